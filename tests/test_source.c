/*
 * test_source.c: one stream from several inputs (datasets/source.h), read by pieces: readers that
 * each read their own share of the bytes see together exactly the records one reader sees, with
 * the same record numbers and rows, for text files cut at any byte (lines crossing pieces, CRLF,
 * no final newline, empty and overlong lines, bad lines, a csv header), compressed files (read
 * whole by every reader), several files, and cbx files cut into blocks; each reader reads about
 * its share of the bytes.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/cbx.h"
#include "../datasets/gen.h"
#include "../datasets/source.h"
#include "helpers.h"

TestSuite(source, .fini = th_cleanup);

/* Rows read with their record numbers. */
typedef struct {
    sample_block b;
    uint64_t *rec;
    size_t cap;
} rows_seen;

static void seen_add(rows_seen *x, const sample_block *b, const uint64_t *rec)
{
    if (x->b.rows + b->rows > x->cap) x->rec = realloc(x->rec, (x->cap = (x->b.rows + b->rows) * 2 + 64) * sizeof *x->rec);
    memcpy(x->rec + x->b.rows, rec, b->rows * sizeof *rec);
    block_append(&x->b, b, 0, b->rows);
}

static int keep_all(void *ctx, uint64_t rec) { return 1; }

/* Every record as one reader reads it plainly (the filter keeps all, to number them). */
static void read_plain(char *const *paths, int n, const source_opts *o, rows_seen *x, uint64_t *records)
{
    data_source *s;
    char err[512];
    cr_assert_eq(source_open(&s, paths, n, o, err, sizeof err), 0, "%s", err);
    source_set_filter(s, keep_all, NULL);
    sample_block b;
    block_init(&b, source_schema(s)->n_dense);
    block_init(&x->b, source_schema(s)->n_dense);
    int r;
    while ((r = source_next(s, &b, err, sizeof err)) > 0) seen_add(x, &b, source_block_records(s));
    cr_assert_eq(r, 0, "%s", err);
    *records = source_records(s);
    block_free(&b);
    source_close(s);
}

typedef struct {
    int me, R;
} whole_ctx;

static int keep_mine(void *ctx, uint64_t rec)
{
    const whole_ctx *c = ctx;
    return (int)(rec / 7 % (uint64_t)c->R) == c->me;
}

/* R readers in lockstep, window by window, as processes would go; every row any of them read,
 * with its record, into x; each reader's bytes read into bytes[]. */
static void read_split(char *const *paths, int n, const source_opts *o, int R, rows_seen *x, uint64_t *records,
                       uint64_t *bytes)
{
    data_source *s[8];
    whole_ctx ctx[8];
    sample_block b;
    char err[512];
    cr_assert(R <= 8);
    for (int r = 0; r < R; r++) {
        cr_assert_eq(source_open(&s[r], paths, n, o, err, sizeof err), 0, "%s", err);
        source_split(s[r], R, r);
        ctx[r] = (whole_ctx){ r, R };
        source_set_filter(s[r], keep_mine, &ctx[r]);
    }
    block_init(&b, source_schema(s[0])->n_dense);
    block_init(&x->b, source_schema(s[0])->n_dense);
    int64_t counts[64], sum[64];
    for (;;) {
        source_window w[8];
        int got[8] = { 0 };
        for (int r = 0; r < R; r++) {
            got[r] = source_window_next(s[r], &w[r], err, sizeof err);
            cr_assert(got[r] >= 0, "%s", err);
            cr_assert(got[r] == got[0] && w[r].whole == w[0].whole && w[r].pieces == w[0].pieces,
                      "readers disagree on the window");
        }
        if (!got[0]) break;
        if (w[0].whole) {
            for (int r = 0; r < R; r++) {
                int k;
                while ((k = source_next(s[r], &b, err, sizeof err)) > 0) seen_add(x, &b, source_block_records(s[r]));
                cr_assert_eq(k, 0, "%s", err);
            }
            continue;
        }
        cr_assert(w[0].pieces <= 64);
        memset(sum, 0, sizeof sum);
        for (int r = 0; r < R; r++) {
            cr_assert_eq(source_window_read(s[r], counts, err, sizeof err), 0, "%s", err);
            for (size_t i = 0; i < w[0].pieces; i++) {
                cr_assert(counts[i] == 0 || source_window_owner(s[r], i) == r);
                sum[i] += counts[i];
            }
        }
        for (int r = 0; r < R; r++) {
            cr_assert_eq(source_window_parse(s[r], sum, &b, err, sizeof err), 0, "%s", err);
            if (b.rows) seen_add(x, &b, source_block_records(s[r]));
        }
    }
    *records = source_records(s[0]);
    for (int r = 0; r < R; r++) {
        cr_assert_eq(source_records(s[r]), *records);
        bytes[r] = source_bytes_read(s[r]);
        source_close(s[r]);
    }
    block_free(&b);
}

static int cmp_idx(const void *a, const void *b, void *ctx)
{
    const uint64_t *rec = ctx;
    uint64_t x = rec[*(const size_t *)a], y = rec[*(const size_t *)b];
    return x < y ? -1 : x > y;
}

/* x's rows in record order equal want's (which are in record order). */
static void same_rows(const rows_seen *want, rows_seen *x, const char *what)
{
    cr_assert_eq(x->b.rows, want->b.rows, "%s: %zu rows, one reader %zu", what, x->b.rows, want->b.rows);
    size_t n = x->b.rows, *idx = malloc((n + 1) * sizeof *idx);
    for (size_t i = 0; i < n; i++) idx[i] = i;
    qsort_r(idx, n, sizeof *idx, cmp_idx, x->rec);
    sample_block sorted;
    block_init(&sorted, x->b.n_dense);
    for (size_t i = 0; i < n; i++) {
        cr_assert_eq(x->rec[idx[i]], want->rec[i], "%s: row %zu is record %llu, one reader's %llu", what, i,
                     (unsigned long long)x->rec[idx[i]], (unsigned long long)want->rec[i]);
        block_append(&sorted, &x->b, idx[i], idx[i] + 1);
    }
    cr_assert_eq(block_digest(&sorted, 1), block_digest(&want->b, 1), "%s: the rows differ", what);
    block_free(&sorted);
    free(idx);
}

static void seen_free(rows_seen *x)
{
    block_free(&x->b);
    free(x->rec);
    memset(x, 0, sizeof *x);
}

/* A criteo log with the awkward lines: bad ones, an empty one, CRLF, an overlong one, and no
 * final newline; lines of very different lengths so that pieces cut them anywhere. */
static char *awkward_log(size_t rows, size_t *len)
{
    size_t cap = rows * 400 + 200000, n = 0;
    char *t = malloc(cap);
    unsigned long long x = 88172645463325252ull;
    for (size_t i = 0; i < rows; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (i % 997 == 5) { n += (size_t)sprintf(t + n, "not a row\n"); continue; }
        if (i % 1499 == 9) { t[n++] = '\n'; continue; }
        if (i == rows / 2) { memset(t + n, 'z', 70000); n += 70000; t[n++] = '\n'; continue; }   /* over max_line */
        n += (size_t)sprintf(t + n, "%d", (int)(x & 1));
        for (int f = 0; f < 13; f++) n += (size_t)sprintf(t + n, "\t%d", (int)((x >> f) % 50));
        for (int f = 0; f < 26; f++) {
            int w = (int)((x >> (f % 40)) % (f == 3 ? 60 : 9)) + 1;   /* field 4 long now and then */
            n += (size_t)sprintf(t + n, "\t%0*x", w, (unsigned)((x >> f) & 0xffff));
        }
        n += (size_t)sprintf(t + n, i % 5 == 0 ? "\r\n" : "\n");
    }
    n--;   /* no final newline */
    *len = n;
    return t;
}

Test(source, readers_by_pieces_see_one_readers_records)
{
    size_t len;
    char *log = awkward_log(6000, &len);
    th_write(th_path("a.tsv"), log, len);
    th_write_gzip(th_path("b.tsv.gz"), log, len / 3);
    th_write(th_path("c.tsv"), log + len / 2, len - len / 2);
    th_write(th_path("e.tsv"), "", 0);
    free(log);
    char *const paths[] = { (char *)th_path("a.tsv"), (char *)th_path("b.tsv.gz"), (char *)th_path("e.tsv"),
                            (char *)th_path("c.tsv") };
    source_opts o;
    source_opts_default(&o);
    o.fmt = FMT_CRITEO;
    o.max_line = 60000;
    o.max_bad_ratio = 0.05;
    o.report_bad = -1;
    o.block_rows = 1000;
    rows_seen want = { 0 };
    uint64_t records;
    read_plain(paths, 4, &o, &want, &records);
    cr_assert(want.b.rows > 9000 && records > want.b.rows);
    static const int readers[] = { 1, 2, 3, 5, 8 };
    for (size_t k = 0; k < sizeof readers / sizeof *readers; k++) {
        int R = readers[k];
        rows_seen x = { 0 };
        uint64_t got, bytes[8];
        read_split(paths, 4, &o, R, &x, &got, bytes);
        char what[64];
        snprintf(what, sizeof what, "%d readers", R);
        cr_assert_eq(got, records, "%s: %llu records, one reader %llu", what, (unsigned long long)got,
                     (unsigned long long)records);
        same_rows(&want, &x, what);
        /* each reads about its share of the two plain files (the gzip file is read whole, uncounted) */
        size_t plain = len + (len - len / 2), most = 0, all = 0;
        for (int r = 0; r < R; r++) {
            all += bytes[r];
            if (bytes[r] > most) most = bytes[r];
        }
        cr_assert(all >= plain && all <= plain + (size_t)R * 200000, "%s: %zu bytes read of %zu", what, all, plain);
        cr_assert(most <= plain / (size_t)R * 1.5 + 200000, "%s: a reader read %zu of %zu bytes", what, most, plain);
        seen_free(&x);
    }
    seen_free(&want);
}

Test(source, a_csv_header_in_every_file_and_pieces_smaller_than_a_line)
{
    /* lines longer than a piece (64 KiB): most pieces hold no line start */
    size_t n = 0, cap = 3 << 20;
    char *t = malloc(cap);
    n += (size_t)sprintf(t + n, "label,I1,C1,C2\n");
    for (int i = 0; i < 40; i++) {
        n += (size_t)sprintf(t + n, "%d,%d,", i % 2, i);
        for (int k = 0; k < (i % 3 ? 10 : 70000); k++) t[n++] = (char)('a' + (i + k) % 26);
        n += (size_t)sprintf(t + n, ",x%d\n", i);
    }
    th_write(th_path("a.csv"), t, n);
    th_write(th_path("b.csv"), t, 15 + 40);   /* the header and a bit: a cut last line */
    free(t);
    char *const paths[] = { (char *)th_path("a.csv"), (char *)th_path("b.csv") };
    source_opts o;
    source_opts_default(&o);
    o.fmt = FMT_CSV;
    o.schema_spec = "label:label,I1:num,C1:cat,C2:cat";
    o.max_line = 100000;
    o.max_bad_ratio = 0.1;   /* the cut line */
    o.report_bad = -1;
    rows_seen want = { 0 };
    uint64_t records;
    read_plain(paths, 2, &o, &want, &records);
    cr_assert_eq(want.b.rows, 40);   /* b.csv's one line is cut: bad */
    for (int R = 1; R <= 4; R++) {
        rows_seen x = { 0 };
        uint64_t got, bytes[8];
        read_split(paths, 2, &o, R, &x, &got, bytes);
        cr_assert_eq(got, records);
        same_rows(&want, &x, "csv");
        seen_free(&x);
    }
    seen_free(&want);
}

/* Text to a cbx file of blocks of `rows` rows. */
static void to_cbx(const char *txt, const char *cbx, size_t rows)
{
    char *const paths[] = { (char *)txt };
    source_opts o;
    source_opts_default(&o);
    o.fmt = FMT_CRITEO;
    o.block_rows = rows;
    data_source *s;
    cbx_writer *w;
    char err[512];
    cr_assert_eq(source_open(&s, paths, 1, &o, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cbx_writer_open(&w, cbx, source_schema(s), FMT_CRITEO, err, sizeof err), 0, "%s", err);
    sample_block b;
    block_init(&b, 0);
    while (source_next(s, &b, err, sizeof err) > 0) cr_assert_eq(cbx_writer_add(w, &b, err, sizeof err), 0, "%s", err);
    cr_assert_eq(cbx_writer_finish(w, source_schema(s), source_stats(s), err, sizeof err), 0, "%s", err);
    block_free(&b);
    source_close(s);
}

Test(source, cbx_files_are_cut_into_their_blocks)
{
    cr_assert_eq(th_run(NULL, "cd %s && $B/ctrbox-data gen --rows 7000 --seed 5 --out g.tsv && head -n 1234 g.tsv > h.tsv",
                        th_tmpdir()),
                 0);
    to_cbx(th_path("g.tsv"), th_path("g.cbx"), 500);
    to_cbx(th_path("h.tsv"), th_path("h.cbx"), 300);
    char *const paths[] = { (char *)th_path("g.cbx"), (char *)th_path("h.cbx") };
    size_t gl, hl;
    free(th_read(th_path("g.cbx"), &gl));
    free(th_read(th_path("h.cbx"), &hl));
    source_opts o;
    source_opts_default(&o);
    rows_seen want = { 0 };
    uint64_t records;
    read_plain(paths, 2, &o, &want, &records);
    cr_assert_eq(records, 8234);
    for (int R = 1; R <= 4; R++) {
        rows_seen x = { 0 };
        uint64_t got, bytes[8], all = 0, most = 0;
        read_split(paths, 2, &o, R, &x, &got, bytes);
        cr_assert_eq(got, records);
        same_rows(&want, &x, "cbx");
        for (int r = 0; r < R; r++) all += bytes[r], most = bytes[r] > most ? bytes[r] : most;
        /* the blocks' bytes, each read once: the files less their headers and trailers */
        cr_assert(all < gl + hl && all > (gl + hl) * 9 / 10, "%d readers: %llu bytes of blocks read of %zu", R,
                  (unsigned long long)all, gl + hl);
        cr_assert(most <= all / (uint64_t)R + all / 8, "%d readers: one read %llu of %llu", R, (unsigned long long)most,
                  (unsigned long long)all);
        seen_free(&x);
    }
    seen_free(&want);
}

Test(source, pieces_that_begin_at_a_line_start)
{
    /* lines of 128 bytes: every piece (64 KiB) begins exactly at a line; one line is empty and
     * one ends the file without a newline */
    size_t n = 0, rows = 3000;
    char *t = malloc(rows * 128 + 1);
    for (size_t i = 0; i < rows; i++) {
        int k = sprintf(t + n, "%d", (int)(i % 2));
        for (int f = 0; f < 13; f++) k += sprintf(t + n + k, "\t%d", (int)(i + f) % 7);
        for (int f = 0; f < 25; f++) k += sprintf(t + n + k, "\t%x", (unsigned)(i * 31 + f) % 16);
        k += sprintf(t + n + k, "\t");
        while (k < 127) t[n + k++] = 'q';
        t[n + k++] = '\n';
        if (i == 1023) t[n] = '\n';   /* an empty line, then a short one */
        n += (size_t)k;
    }
    th_write(th_path("a.tsv"), t, n - 1);
    free(t);
    char *const paths[] = { (char *)th_path("a.tsv") };
    source_opts o;
    source_opts_default(&o);
    o.fmt = FMT_CRITEO;
    o.report_bad = -1;
    o.max_bad_ratio = 0.01;
    rows_seen want = { 0 };
    uint64_t records;
    read_plain(paths, 1, &o, &want, &records);
    cr_assert_eq(records, rows + 1);
    for (int R = 1; R <= 3; R++) {
        rows_seen x = { 0 };
        uint64_t got, bytes[8];
        read_split(paths, 1, &o, R, &x, &got, bytes);
        cr_assert_eq(got, records, "%d readers: %llu records", R, (unsigned long long)got);
        same_rows(&want, &x, "128-byte lines");
        seen_free(&x);
    }
    seen_free(&want);
}
