/*
 * cbx.h: the binary sample format (.cbx), the fast input for training.
 *
 * Layout (little-endian):
 *   header  (header_bytes, a multiple of 4096): magic "CTRBOXDS", version, schema, XXH64 of itself
 *   blocks  each: 48-byte header (magic "BLK1", flags, rows, n_dense, nnz, payload bytes,
 *           XXH3 of the payload, XXH64 of the header) then the payload:
 *           label f32[rows], dense f32[rows*n_dense], count u32[rows], field u16[nnz],
 *           key u64[nnz], and val f32[nnz] unless every val is 1 (flag CBX_BLOCK_ONEHOT)
 *   trailer magic "CBXTRAIL", block/row/positive/nnz totals, the text source's line counts by
 *           bad reason, XXH64 of itself. A file without it is truncated.
 * Files are written durably (temporary name, fsync, rename, fsync directory) and read through
 * io_uring with O_DIRECT where the file system allows. Every checksum is verified on read; an
 * error names the block and its byte offset.
 */
#ifndef CTRBOX_DATASETS_CBX_H
#define CTRBOX_DATASETS_CBX_H

#include <stddef.h>
#include <stdint.h>

#include "../io/parse.h"
#include "../io/block.h"

#define CBX_VERSION 1u
#define CBX_STATS_SLOTS 16

/* Lines seen in the text source and bad lines by bad_reason. */
typedef struct {
    uint64_t lines;
    uint64_t bad[CBX_STATS_SLOTS];
} line_stats;

typedef struct {
    uint64_t blocks, rows, positives, nnz;
    line_stats stats;
} cbx_trailer;

typedef struct cbx_writer cbx_writer;

/* 0 or -errno (message in err). The schema may still grow its fields (libffm) if all its fields
 * are categorical and unnamed; the final schema is given to cbx_writer_finish. */
int cbx_writer_open(cbx_writer **out, const char *path, const data_schema *schema,
                    data_format source, char *err, size_t errlen);
int cbx_writer_add(cbx_writer *w, const sample_block *b, char *err, size_t errlen);
/* Write the trailer, patch the header, commit durably, free w. 0 or -errno. */
int cbx_writer_finish(cbx_writer *w, const data_schema *schema, const line_stats *st, char *err,
                      size_t errlen);
/* Drop the temporary file and free w. */
void cbx_writer_abort(cbx_writer *w);

typedef struct cbx_reader cbx_reader;

int cbx_reader_open(cbx_reader **out, const char *path, char *err, size_t errlen);
/* Over memory the caller keeps alive. */
int cbx_reader_open_mem(cbx_reader **out, const void *data, size_t len, char *err, size_t errlen);
void cbx_reader_close(cbx_reader *r);
const data_schema *cbx_reader_schema(const cbx_reader *r);
/* The text format the file was converted from (its header says), or what the writer was given. */
data_format cbx_reader_source(const cbx_reader *r);
/* The same of the cbx file at path; FMT_NONE when it cannot be read or names no text format. */
data_format cbx_file_source(const char *path);
/* Replace b's contents with the next block: 1, 0 at the end (trailer verified), <0 error. */
int cbx_reader_next(cbx_reader *r, sample_block *b, char *err, size_t errlen);
/* The trailer, once cbx_reader_next returned 0. */
const cbx_trailer *cbx_reader_trailer(const cbx_reader *r);
int cbx_reader_is_direct(const cbx_reader *r);

/* The blocks of a cbx file, for reading some of them (a reader among several, datasets/source.h):
 * found by reading the file's header and every block's 48-byte header, not their payloads; the
 * trailer's block, row and entry counts are checked against them (its positives are not: they need
 * the payloads). A block read is checked as cbx_reader_next checks it. */
typedef struct cbx_index cbx_index;

int cbx_index_open(cbx_index **out, const char *path, char *err, size_t errlen);
void cbx_index_close(cbx_index *x);
const data_schema *cbx_index_schema(const cbx_index *x);
const cbx_trailer *cbx_index_trailer(const cbx_index *x);
uint64_t cbx_index_blocks(const cbx_index *x);
uint32_t cbx_index_rows(const cbx_index *x, uint64_t i);
/* Block i's bytes in the file (header and payload). */
uint64_t cbx_index_bytes(const cbx_index *x, uint64_t i);
/* Block i into b (replacing its contents). 0, or <0 with err naming the file, block and offset. */
int cbx_index_read(cbx_index *x, uint64_t i, sample_block *b, char *err, size_t errlen);

/* Whether the first bytes are a cbx header. */
int cbx_is_magic(const void *data, size_t len);
/* Whether the file at path starts with the cbx magic. */
int cbx_file_is_cbx(const char *path);

#endif
