/*
 * fuzz_text.h: the body of the text-format fuzz targets. The input is a whole file: it goes
 * through the stream (compression detection, gzip/zstd decoding, line splitting with a small line
 * limit) and the parser of FUZZ_FORMAT, as a real run would. Besides crashes, it aborts when a
 * parsed block breaks its invariants.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../io/block.h"
#include "../../io/parse.h"
#include "../../io/stream.h"

static void check_block(const sample_block *b, const data_schema *s)
{
    if (b->row_ptr[0] != 0 || b->row_ptr[b->rows] != b->nnz) abort();
    for (size_t i = 0; i < b->rows; i++) {
        if (b->label[i] != 0.0f && b->label[i] != 1.0f) abort();
        if (b->row_ptr[i + 1] < b->row_ptr[i]) abort();
    }
    for (size_t k = 0; k < b->nnz; k++)
        if (b->field[k] >= s->n_fields) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const uint64_t offsets[] = { 0, 10, 100, 1000 };
    parser_opts o = { FUZZ_FORMAT, (size & 1) ? NUM_BUCKET : NUM_LOG, FUZZ_SCHEMA, NULL, 0 };
    if (FUZZ_FORMAT == FMT_LIBSVM && (size & 2)) {
        o.field_offsets = offsets;
        o.n_offsets = 4;
    }
    line_parser *p;
    char err[512];
    if (parser_create(&p, &o, err, sizeof err) < 0) abort();
    io_stream *s;
    if (io_stream_open_mem(&s, data, size, "fuzz") < 0) {
        parser_destroy(p);
        return 0;
    }
    io_stream_set_max_line(s, 256);
    sample_block b;
    block_init(&b, parser_schema(p)->n_dense);
    io_line line;
    int header = parser_has_header(p), ok = 1;
    while (io_stream_next_line(s, &line) > 0) {
        if (line.overlong) continue;
        if (header) {
            header = 0;
            if (parser_header(p, line.ptr, line.len, err, sizeof err) < 0) {
                ok = 0;
                break;
            }
            block_free(&b);
            block_init(&b, parser_schema(p)->n_dense);
            continue;
        }
        int r = parser_parse(p, line.ptr, line.len, &b);
        if (r < 0 || r >= BAD_COUNT) abort();
        if (r != BAD_OK && parser_detail(p)[0] == 0) abort();
    }
    if (ok) check_block(&b, parser_schema(p));
    block_free(&b);
    io_stream_close(s);
    parser_destroy(p);
    return 0;
}
