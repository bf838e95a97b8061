/*
 * parse.h: text line parsers for the input formats, producing rows of a sample_block.
 *
 * Formats: criteo (TAB: label, I1..I13, C1..C26), libsvm (`label idx:val ...`, fields from
 * offsets), libffm (`label field:idx:val ...`), csv (header line, roles from a schema). For
 * scoring (parser_opts.unlabeled) each also reads its lines without the label.
 * Keys are XXH3-64 of the token bytes seeded by the field id. A bad line leaves the block as it
 * was and returns its reason; parser_detail() then says what was wrong.
 * The parser owns its schema; the caller owns the block.
 */
#ifndef CTRBOX_IO_PARSE_H
#define CTRBOX_IO_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "block.h"

typedef enum { FMT_NONE = 0, FMT_CRITEO, FMT_LIBSVM, FMT_LIBFFM, FMT_CSV, FMT_CBX } data_format;

/* "criteo", "libsvm" (or "libfm"), "libffm", "csv", "cbx"; FMT_NONE if unknown. */
data_format parse_format_from_name(const char *name);
const char *parse_format_name(data_format f);

typedef enum {
    BAD_OK = 0,
    BAD_COLUMNS,     /* wrong column or token count, empty line */
    BAD_NUMBER,      /* not a number where one belongs */
    BAD_OVERLONG,    /* line longer than the limit */
    BAD_UTF8,        /* invalid UTF-8 */
    BAD_NUL,         /* NUL byte or other control byte */
    BAD_LABEL,       /* label not 0/1 or -1/+1 */
    BAD_FEATURE,     /* malformed feature token (idx:val, field:idx:val) */
    BAD_FIELD,       /* field id outside the schema */
    BAD_COUNT
} bad_reason;

/* Short machine name ("columns", "number", ...) and a phrase for people. */
const char *parse_bad_reason_key(int r);
const char *parse_bad_reason_text(int r);

typedef struct {
    data_format fmt;
    num_mode num;
    const char *schema_spec;          /* csv: "name:role,A1-A9:role"; roles label|num|cat|skip */
    const uint64_t *field_offsets;    /* libsvm: first global index of each field, ascending */
    int n_offsets;
    int unlabeled;                    /* rows may come without a label (scoring): criteo lines of 39
                                       * columns, libsvm/libffm lines that start with a feature, a csv
                                       * header without the label column; such rows get label NaN */
    const char *id_column;            /* csv: this column is each row's id (block ids), not a feature */
    const data_schema *order;         /* csv: a model's fields; a header of the same feature columns in
                                       * another order is read in this one (columns matched by name) */
} parser_opts;

typedef struct line_parser line_parser;

/* 0 or -EINVAL with a message in err. */
int parser_create(line_parser **out, const parser_opts *o, char *err, size_t errlen);
void parser_destroy(line_parser *p);
/* Whether each file starts with a header line (csv). */
int parser_has_header(const line_parser *p);
/* Give the header line of a file: the first one sets the columns, later ones must match. */
int parser_header(line_parser *p, const char *line, size_t len, char *err, size_t errlen);
/* Append one row parsed from line to b: BAD_OK, or a bad_reason with b unchanged. */
int parser_parse(line_parser *p, const char *line, size_t len, sample_block *b);
/* What was wrong with the last bad line (borrowed until the next call). */
const char *parser_detail(const line_parser *p);
const data_schema *parser_schema(const line_parser *p);

/* Key of a token in a field. */
uint64_t parse_feature_key(const char *tok, size_t len, uint32_t field);
/* The bucket of a num value under NUM_BUCKET. */
int64_t parse_num_bucket(double x);
/* Parse a whole string as a finite number: 0, or -1. */
int parse_number(const char *s, size_t n, double *out);
/* Check bytes for NUL/control bytes and UTF-8 validity: BAD_OK, BAD_NUL or BAD_UTF8. */
int parse_check_line_bytes(const char *s, size_t n);

#endif
