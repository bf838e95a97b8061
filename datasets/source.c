/*
 * source.c: text or cbx inputs as one stream of sample blocks, with bad-line accounting.
 */
#define _GNU_SOURCE
#include "source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cbx.h"
#include "../io/stream.h"
#include "../io/util.h"

struct data_source {
    source_opts o;
    char **paths;
    int n_paths, cur;           /* index of the open file; n_paths when done */
    line_parser *parser;
    io_stream *stream;
    cbx_reader *cbx;
    data_schema schema;         /* cbx: the files' schema */
    line_stats stats;
    uint64_t reported;
    int direct;                 /* a cbx file was read with O_DIRECT */
    int (*keep)(void *ctx, uint64_t rec);   /* the filter (source_set_filter), or NULL */
    void *keep_ctx;
    uint64_t rec;               /* records seen */
    uint64_t *recs;             /* with a filter: (rows of the last block) their record numbers */
    size_t cap_recs;
    sample_block all;           /* cbx with a filter: a block as read, before the filter */
};

void source_opts_default(source_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_bad_ratio = 0.001;
    o->max_line = 1u << 20;
    o->report_bad = 5;
    o->block_rows = 16384;
}

static void close_current(data_source *s)
{
    io_stream_close(s->stream);
    s->stream = NULL;
    cbx_reader_close(s->cbx);
    s->cbx = NULL;
}

/* Open file i (text: and read its header line if the format has one). */
static int open_file(data_source *s, int i, char *err, size_t errlen)
{
    close_current(s);
    s->cur = i;
    if (i >= s->n_paths) return 0;
    const char *path = s->paths[i];
    int ret;
    if (s->o.fmt == FMT_CBX) {
        ret = cbx_reader_open(&s->cbx, path, err, errlen);
        if (ret < 0) return ret;
        s->direct |= cbx_reader_is_direct(s->cbx);
        if (i == 0) {
            schema_copy(&s->schema, cbx_reader_schema(s->cbx));
        } else if (!schema_equal(&s->schema, cbx_reader_schema(s->cbx))) {
            snprintf(err, errlen, "%s: schema differs from %s's", path, s->paths[0]);
            return -EINVAL;
        }
        return 0;
    }
    if (cbx_file_is_cbx(path)) {   /* read as text it is garbage, or worse, a few lines that parse */
        snprintf(err, errlen, "%s: a cbx file among %s text inputs; give cbx files alone", path, parse_format_name(s->o.fmt));
        return -EINVAL;
    }
    ret = io_stream_open(&s->stream, path, 0, err, errlen);
    if (ret < 0) return ret;
    io_stream_set_max_line(s->stream, s->o.max_line);
    if (!parser_has_header(s->parser)) return 0;
    io_line line;
    ret = io_stream_next_line(s->stream, &line);
    if (ret < 0) {
        snprintf(err, errlen, "%s", io_stream_error(s->stream));
        return ret;
    }
    if (ret == 0) {
        snprintf(err, errlen, "%s: empty file; csv wants a header line", path);
        return -EINVAL;
    }
    if (line.overlong) {
        snprintf(err, errlen, "%s:1: header line too long", path);
        return -EINVAL;
    }
    char msg[400];
    ret = parser_header(s->parser, line.ptr, line.len, msg, sizeof msg);
    if (ret < 0) {
        snprintf(err, errlen, "%s:1: %s", path, msg);
        return ret;
    }
    return 0;
}

int source_open(data_source **out, char *const *paths, int n, const source_opts *o, char *err,
                size_t errlen)
{
    *out = NULL;
    data_source *s = xcalloc(1, sizeof *s);
    s->o = *o;
    block_init(&s->all, 0);
    if (s->o.block_rows == 0) s->o.block_rows = 16384;
    int ret = io_expand_paths(paths, n, &s->paths, err, errlen);
    if (ret < 0) {
        block_free(&s->all);
        free(s);
        return ret;
    }
    s->n_paths = ret;
    /* cbx files say what they are: read as cbx whatever text format was named (a model trained on
     * text, evaluated on its converted data) */
    if (s->o.fmt != FMT_CBX && cbx_file_is_cbx(s->paths[0])) s->o.fmt = FMT_CBX;
    if (s->o.fmt == FMT_NONE) {
        if (!cbx_file_is_cbx(s->paths[0])) {
            snprintf(err, errlen, "%s: not a cbx file; say which text format it is with --format", s->paths[0]);
            source_close(s);
            return -EINVAL;
        }
        s->o.fmt = FMT_CBX;
    }
    if (s->o.fmt != FMT_CBX) {
        parser_opts po = { s->o.fmt, s->o.num, s->o.schema_spec, s->o.field_offsets, s->o.n_offsets, s->o.unlabeled,
                           s->o.id_column };
        ret = parser_create(&s->parser, &po, err, errlen);
        if (ret < 0) {
            source_close(s);
            return ret;
        }
    }
    ret = open_file(s, 0, err, errlen);
    if (ret < 0) {
        source_close(s);
        return ret;
    }
    *out = s;
    return 0;
}

void source_close(data_source *s)
{
    if (!s) return;
    close_current(s);
    parser_destroy(s->parser);
    schema_free(&s->schema);
    io_free_paths(s->paths, s->n_paths);
    free(s->recs);
    block_free(&s->all);
    free(s);
}

void source_set_filter(data_source *s, int (*keep)(void *ctx, uint64_t rec), void *ctx)
{
    s->keep = keep;
    s->keep_ctx = ctx;
}

const uint64_t *source_block_records(const data_source *s) { return s->recs; }
uint64_t source_records(const data_source *s) { return s->rec; }

/* Row `row` of the block being filled is record rec. */
static void note_record(data_source *s, size_t row, uint64_t rec)
{
    if (row >= s->cap_recs) s->recs = xrealloc(s->recs, (s->cap_recs = s->cap_recs * 2 + 1024) * sizeof *s->recs);
    s->recs[row] = rec;
}

/* A cbx block through the filter: the kept rows of s->all into b. */
static void filter_cbx(data_source *s, sample_block *b)
{
    if (b->n_dense != s->all.n_dense) {
        block_free(b);
        block_init(b, s->all.n_dense);
    }
    block_clear(b);
    uint64_t base = s->rec;
    for (size_t r = 0; r < s->all.rows;) {
        size_t e = r + 1;
        int k = s->keep(s->keep_ctx, base + r);
        while (e < s->all.rows && s->keep(s->keep_ctx, base + e) == k) e++;
        if (k) {
            for (size_t i = r; i < e; i++) note_record(s, b->rows + (i - r), base + i);
            block_append(b, &s->all, r, e);
        }
        r = e;
    }
    s->rec += s->all.rows;
}

static uint64_t bad_total(const line_stats *st)
{
    uint64_t n = 0;
    for (int i = 0; i < CBX_STATS_SLOTS; i++) n += st->bad[i];
    return n;
}

static int check_ratio(data_source *s, int at_end, char *err, size_t errlen)
{
    uint64_t bad = bad_total(&s->stats), lines = s->stats.lines;
    if (lines == 0 || (!at_end && lines < 10000)) return 0;
    if ((double)bad <= s->o.max_bad_ratio * (double)lines) return 0;
    int at = s->cur < s->n_paths ? s->cur : s->n_paths - 1;   /* the file being read when the limit tripped */
    snprintf(err, errlen, "%s: too many bad lines: %llu of %llu (%.3g%%) %sexceed --max-bad-ratio %g; "
             "fix the input or raise the limit", s->paths[at],
             (unsigned long long)bad, (unsigned long long)lines, 100.0 * (double)bad / (double)lines,
             s->n_paths > 1 ? "of the inputs read so far " : "", s->o.max_bad_ratio);
    return -EINVAL;
}

static void count_bad(data_source *s, int reason, uint64_t lineno, const char *detail)
{
    s->stats.bad[reason]++;
    if (s->o.report_bad >= 0 && s->reported < (uint64_t)s->o.report_bad) {
        fprintf(stderr, "%s:%llu: %s\n", s->paths[s->cur], (unsigned long long)lineno, detail);
        s->reported++;
    }
}

static int next_cbx(data_source *s, sample_block *b, char *err, size_t errlen)
{
    while (s->cur < s->n_paths) {
        int ret = cbx_reader_next(s->cbx, s->keep ? &s->all : b, err, errlen);
        if (ret < 0) return ret;
        if (ret > 0) {
            if (!s->keep) {
                s->rec += b->rows;
                return ret;
            }
            filter_cbx(s, b);
            if (b->rows) return ret;
            continue;   /* none of this block's rows kept */
        }
        const cbx_trailer *t = cbx_reader_trailer(s->cbx);
        s->stats.lines += t->stats.lines;
        for (int i = 0; i < CBX_STATS_SLOTS; i++) s->stats.bad[i] += t->stats.bad[i];
        ret = open_file(s, s->cur + 1, err, errlen);
        if (ret < 0) return ret;
    }
    return 0;
}

int source_next(data_source *s, sample_block *b, char *err, size_t errlen)
{
    if (s->o.fmt == FMT_CBX) return next_cbx(s, b, err, errlen);
    const data_schema *sc = parser_schema(s->parser);
    if (b->n_dense != sc->n_dense) {
        block_free(b);
        block_init(b, sc->n_dense);
    }
    block_clear(b);
    while (s->cur < s->n_paths && b->rows < s->o.block_rows) {
        io_line line;
        int ret = io_stream_next_line(s->stream, &line);
        if (ret < 0) {
            snprintf(err, errlen, "%s", io_stream_error(s->stream));
            return ret;
        }
        if (ret == 0) {
            ret = open_file(s, s->cur + 1, err, errlen);
            if (ret < 0) return ret;
            continue;
        }
        uint64_t rec = s->rec++;
        if (s->keep && !s->keep(s->keep_ctx, rec)) continue;
        s->stats.lines++;
        uint64_t lineno = line.lineno;
        if (line.overlong) {
            char d[96];
            snprintf(d, sizeof d, "line too long: over %zu bytes", s->o.max_line);
            count_bad(s, BAD_OVERLONG, lineno, d);
            if ((ret = check_ratio(s, 0, err, errlen)) < 0) return ret;
            continue;
        }
        size_t rows = b->rows;
        int r = parser_parse(s->parser, line.ptr, line.len, b);
        if (s->keep && b->rows > rows) note_record(s, rows, rec);
        if (r != BAD_OK) count_bad(s, r, lineno, parser_detail(s->parser));
        /* judged as it goes: input that is all bad stops at 10,000 lines, not at its end */
        if (r != BAD_OK && (ret = check_ratio(s, 0, err, errlen)) < 0) return ret;
    }
    int ret = check_ratio(s, s->cur >= s->n_paths, err, errlen);
    if (ret < 0) return ret;
    return b->rows > 0 ? 1 : 0;
}

const data_schema *source_schema(const data_source *s)
{
    return s->parser ? parser_schema(s->parser) : &s->schema;
}

const line_stats *source_stats(const data_source *s) { return &s->stats; }
data_format source_format(const data_source *s) { return s->o.fmt; }
int source_is_direct(const data_source *s) { return s->direct; }

/* ---- what a file looks like, for messages ---- */

static int all_numeric(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789+-.eE", p[i])) return 0;
    return n > 0;
}

data_format source_sniff(const char *path, char *out, size_t n)
{
    data_format guess = FMT_NONE;
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {   /* a pipe is read once: never looked at here */
        snprintf(out, n, "%s", stat(path, &st) != 0 ? "missing" : "a stream (not looked at)");
        return FMT_NONE;
    }
    if (cbx_file_is_cbx(path)) {
        data_format f = cbx_file_source(path);
        snprintf(out, n, "a cbx file%s%s", f ? " converted from " : "", f ? parse_format_name(f) : "");
        return FMT_CBX;
    }
    char err[300];
    io_stream *s;
    if (io_stream_open(&s, path, 0, err, sizeof err) < 0) {
        snprintf(out, n, "unreadable (%s)", err);
        return FMT_NONE;
    }
    io_line line;
    int r = io_stream_next_line(s, &line);
    if (r <= 0 || line.overlong) {
        snprintf(out, n, r == 0 ? "empty" : r < 0 ? "unreadable" : "a file whose first line is too long to be data");
        io_stream_close(s);
        return FMT_NONE;
    }
    const char *p = line.ptr;
    size_t len = line.len, tabs = 0, commas = 0, colons = 0, spaces = 0;
    for (size_t i = 0; i < len; i++) tabs += p[i] == '\t', commas += p[i] == ',', colons += p[i] == ':', spaces += p[i] == ' ';
    if (tabs) {
        snprintf(out, n, "tab-separated, %zu columns (criteo has 40 with the label, 39 without)", tabs + 1);
        guess = FMT_CRITEO;
    } else if (commas) {
        const char *c = memchr(p, ',', len);
        int header = !all_numeric(p, (size_t)(c - p));
        guess = FMT_CSV;
        snprintf(out, n, "csv, %zu columns%s%.*s ...)", commas + 1, header ? " under a header (" : " (first value ",
                 (int)((size_t)(c - p) < 40 ? (size_t)(c - p) : 40), p);
    } else if (colons && spaces) {
        size_t per = 0;   /* colons in the first feature: 1 for libsvm (index:value), 2 for libffm */
        const char *f = memchr(p, ' ', len) + 1;
        while (f < p + len && *f == ' ') f++;
        for (const char *q = f; q < p + len && *q != ' '; q++) per += *q == ':';
        snprintf(out, n, per >= 2 ? "libffm (label field:index:value ...)" : "libsvm (label index:value ...)");
        guess = per >= 2 ? FMT_LIBFFM : FMT_LIBSVM;
    } else {
        snprintf(out, n, "one column per line (\"%.*s\")", (int)(len < 40 ? len : 40), p);
    }
    io_stream_close(s);
    return guess;
}
