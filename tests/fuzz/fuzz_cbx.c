/*
 * fuzz_cbx.c: libFuzzer target for the cbx reader over memory. Any input must end in a clean
 * error or in blocks that keep their invariants; never a crash or a hang.
 */
#include <stdint.h>
#include <stdlib.h>

#include "../../datasets/cbx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cbx_reader *r;
    char err[512];
    if (cbx_reader_open_mem(&r, data, size, err, sizeof err) < 0) {
        if (!err[0]) abort();
        return 0;
    }
    const data_schema *s = cbx_reader_schema(r);
    sample_block b;
    block_init(&b, s->n_dense);
    int ret;
    while ((ret = cbx_reader_next(r, &b, err, sizeof err)) > 0) {
        if (b.row_ptr[b.rows] != b.nnz) abort();
        for (size_t k = 0; k < b.nnz; k++)
            if (b.field[k] >= s->n_fields) abort();
    }
    if (ret < 0 && !err[0]) abort();
    block_free(&b);
    cbx_reader_close(r);
    return 0;
}
