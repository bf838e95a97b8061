/*
 * source.h: one stream of sample blocks from several inputs: text logs of one format (plain, gzip
 * or zstd) or cbx files, given as files and folders (a folder stands for its files, by name).
 *
 * Bad text lines are counted by reason; the first few are printed on stderr as
 * "file:line: reason"; when the share of bad lines exceeds max_bad_ratio the source stops with an
 * error (checked once 10,000 lines are seen, and at the end).
 * The source owns its schema and statistics; blocks are the caller's.
 */
#ifndef CTRBOX_DATASETS_SOURCE_H
#define CTRBOX_DATASETS_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "../io/parse.h"
#include "../io/block.h"
#include "cbx.h"

typedef struct {
    data_format fmt;              /* cbx whenever the first file has its magic (cbx files are never read
                                   * as text); FMT_NONE and no magic: an error */
    num_mode num;
    const char *schema_spec;
    const uint64_t *field_offsets;
    int n_offsets;
    double max_bad_ratio;         /* default 0.001 */
    size_t max_line;              /* bytes; default 1 MiB */
    int report_bad;               /* bad lines to print; default 5, -1 for none */
    size_t block_rows;            /* rows per block; default 16384 */
    int unlabeled;                /* rows may lack their label (scoring; parse.h); label NaN */
    const char *id_column;        /* csv: each row's id comes from this column (block ids) */
    int note_bad;                 /* keep the record numbers of bad lines (source_bad_records) */
    const data_schema *order;     /* csv: a model's fields, read in its order from a header that names the
                                   * same columns in another (parser_opts) */
} source_opts;

void source_opts_default(source_opts *o);

typedef struct data_source data_source;

/* 0 or -errno with a one-line message in err. For csv the first file's header is read here. */
int source_open(data_source **out, char *const *paths, int n, const source_opts *o, char *err,
                size_t errlen);
void source_close(data_source *s);
/* Fill b with the next rows: 1, 0 at the end, <0 on error (message in err). */
int source_next(data_source *s, sample_block *b, char *err, size_t errlen);
/* Every row left into all (initialized here; freed again on an error): 0, or <0 with err. */
int source_read_all(data_source *s, sample_block *all, char *err, size_t errlen);
/* The schema; for libffm it grows while reading and is final at the end. */
const data_schema *source_schema(const data_source *s);
/* Lines seen and bad lines by reason (text: counted here; cbx: from the files' trailers). */
const line_stats *source_stats(const data_source *s);
data_format source_format(const data_source *s);
/* What the file at path looks like, in words ("csv, 12 columns under a header (id ...)", "a cbx file
 * converted from criteo", "tab-separated, 40 columns ..."), for a message that refuses it; and the
 * format it most likely is (FMT_NONE: no guess). A guess from one line, never used to read. */
data_format source_sniff(const char *path, char *out, size_t n);
/* Whether cbx files were read with O_DIRECT. */
int source_is_direct(const data_source *s);

/* Keep only the records keep(ctx, rec) says (set before the first source_next). rec numbers
 * every record of the inputs from 0, across files: a text line after the header (bad and overlong
 * lines too), a cbx row. A text line not kept is found and counted, never parsed (nor judged: the
 * bad-line counts and ratio are over the kept lines); cbx rows not kept are dropped after their
 * block is read. Several processes reading one input each take their share this way. */
void source_set_filter(data_source *s, int (*keep)(void *ctx, uint64_t rec), void *ctx);
/* Text: sink(ctx, line, len) gets each line source_next reads into a row, as it was read (bad lines
 * are counted and reported as ever, and never reach it), before source_next returns its block. A tool
 * that copies lines (ctrbox-data split) writes only the lines the parser takes. */
void source_set_line_sink(data_source *s, void (*sink)(void *ctx, const char *line, size_t len), void *ctx);
/* Text with a header line (csv): the first file's, as read (NUL-terminated, *len bytes); else NULL. */
const char *source_header_line(const data_source *s, size_t *len);
/* With a filter: the record number of each row of the block the last source_next filled. */
const uint64_t *source_block_records(const data_source *s);
/* Records seen so far (kept or not). */
uint64_t source_records(const data_source *s);
/* With note_bad: the record numbers of the bad lines this reader parsed so far, ascending (*n of
 * them). A text record is a row or a bad line: predict scores the bad ones as nan in their place. */
const uint64_t *source_bad_records(const data_source *s, size_t *n);

/* ---- reading by pieces: several readers, each reading its own share of the bytes ----
 *
 * The inputs are cut into pieces, in order: a plain text file (regular, not compressed) into byte
 * ranges (1/8 of its share for each reader, 64 KiB to 8 MiB; a line belongs to the piece its first
 * byte lies in, and its reader reads on past the range to the line's end); a cbx file into its
 * blocks. Piece i, counted over all files, is read by reader i % readers. A compressed file or a
 * pipe cannot be cut: every reader reads it whole, keeping the records the filter keeps.
 * Records are numbered as above (lines after a csv header, bad ones too; cbx rows), so the
 * readers together see the records one reader sees, with the same numbers.
 * Every reader goes through the same windows, in order:
 *   source_window_next   the next window: up to 4 pieces a reader, or one whole file (w->whole)
 *   pieces:  source_window_read  reads this reader's pieces and counts their lines (counts[i]: piece
 *                                i's, 0 for the others' pieces);
 *            the caller sums the counts over the readers;
 *            source_window_parse this reader's pieces' rows into b, their records in
 *                                source_block_records; bad lines are reported with their line number
 *   whole:   source_next (with the filter) until it returns 0: the file's end.
 * The bad-line ratio is each reader's, over the lines it parsed. */
typedef struct {
    int whole;                    /* one file every reader reads whole */
    size_t pieces;                /* otherwise: the window's pieces */
} source_window;

/* Read by pieces, as reader `me` of `readers` (before the first read). */
void source_split(data_source *s, int readers, int me);
/* 1 with *w, 0 at the end of the inputs, <0 with err. */
int source_window_next(data_source *s, source_window *w, char *err, size_t errlen);
/* The window's identity (its pieces, their files, ranges and readers): readers that see files of
 * other sizes (a file that grew or was replaced while they opened it) see other windows. */
uint64_t source_window_digest(const data_source *s);
/* The reader of piece i of the window. */
int source_window_owner(const data_source *s, size_t i);
int source_window_read(data_source *s, int64_t *counts, char *err, size_t errlen);
/* counts: every piece's, summed over the readers. 0 (b may have no rows), or <0 with err. */
int source_window_parse(data_source *s, const int64_t *counts, sample_block *b, char *err, size_t errlen);
/* After source_window_parse: the rows each piece of the window gave this reader (0 for the others'
 * pieces); b held them piece after piece. */
void source_window_rows(const data_source *s, int64_t *rows);
/* Bytes of the inputs this reader has read (by pieces; a whole file's are not counted). */
uint64_t source_bytes_read(const data_source *s);

#endif
