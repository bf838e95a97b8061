/*
 * test_cbx.c: the binary format. Text -> cbx -> the same rows, keys, fields, values and dense
 * values, for each format; every flipped byte and every truncation is detected; errors name the
 * block and its byte offset; nothing is left behind by an aborted write.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/cbx.h"
#include "../datasets/gen.h"
#include "../datasets/source.h"
#include "helpers.h"

TestSuite(cbx, .fini = th_cleanup);

/* All rows of a source in one block. */
static void read_all(char *const *paths, int n, const source_opts *o, sample_block *all, data_schema *schema,
                     line_stats *st)
{
    data_source *s;
    char err[512];
    cr_assert_eq(source_open(&s, paths, n, o, err, sizeof err), 0, "%s", err);
    sample_block b;
    block_init(&b, source_schema(s)->n_dense);
    block_init(all, source_schema(s)->n_dense);
    int r;
    while ((r = source_next(s, &b, err, sizeof err)) > 0) {
        block_reserve(all, b.rows, b.nnz);
        memcpy(all->label + all->rows, b.label, b.rows * sizeof(float));
        memcpy(all->dense + all->rows * all->n_dense, b.dense, b.rows * b.n_dense * sizeof(float));
        for (size_t i = 0; i < b.rows; i++) all->row_ptr[all->rows + i + 1] = all->nnz + b.row_ptr[i + 1];
        memcpy(all->key + all->nnz, b.key, b.nnz * 8);
        memcpy(all->field + all->nnz, b.field, b.nnz * 2);
        memcpy(all->val + all->nnz, b.val, b.nnz * 4);
        all->rows += b.rows;
        all->nnz += b.nnz;
    }
    cr_assert_eq(r, 0, "%s", err);
    if (schema) schema_copy(schema, source_schema(s));
    if (st) *st = *source_stats(s);
    block_free(&b);
    source_close(s);
}

static void convert(char *const *paths, int n, const source_opts *o, const char *out)
{
    data_source *s;
    char err[512];
    cr_assert_eq(source_open(&s, paths, n, o, err, sizeof err), 0, "%s", err);
    cbx_writer *w;
    cr_assert_eq(cbx_writer_open(&w, out, source_schema(s), o->fmt, err, sizeof err), 0, "%s", err);
    sample_block b;
    block_init(&b, source_schema(s)->n_dense);
    int r;
    while ((r = source_next(s, &b, err, sizeof err)) > 0) cr_assert_eq(cbx_writer_add(w, &b, err, sizeof err), 0, "%s", err);
    cr_assert_eq(r, 0, "%s", err);
    cr_assert_eq(cbx_writer_finish(w, source_schema(s), source_stats(s), err, sizeof err), 0, "%s", err);
    block_free(&b);
    source_close(s);
}

static void assert_same(const sample_block *a, const sample_block *b)
{
    cr_assert_eq(a->rows, b->rows);
    cr_assert_eq(a->nnz, b->nnz);
    cr_assert_eq(a->n_dense, b->n_dense);
    cr_assert(memcmp(a->label, b->label, a->rows * 4) == 0);
    cr_assert(memcmp(a->dense, b->dense, a->rows * a->n_dense * 4) == 0);
    cr_assert(memcmp(a->row_ptr, b->row_ptr, (a->rows + 1) * 8) == 0);
    cr_assert(memcmp(a->key, b->key, a->nnz * 8) == 0);
    cr_assert(memcmp(a->field, b->field, a->nnz * 2) == 0);
    cr_assert(memcmp(a->val, b->val, a->nnz * 4) == 0);
}

typedef struct {
    data_format fmt;
    const char *text;
    size_t block_rows;
} rt_case;

Test(cbx, round_trip_every_format)
{
    gen_opts g = { 3000, 11, 0.01, 0 };
    FILE *f = fopen(th_path("gen.tsv"), "w");
    cr_assert_eq(gen_write(&g, f, NULL), 0);
    fclose(f);
    size_t glen;
    char *gen = th_read(th_path("gen.tsv"), &glen);
    rt_case cases[] = {
        { FMT_CRITEO, gen, 1000 },
        { FMT_CRITEO, gen, 7 },
        { FMT_LIBSVM, "1 3:1 5:2.5\n0 7:1\n-1 3:1 9:0.125 11:1\n+1\n", 2 },
        { FMT_LIBFFM, "1 0:3:1 4:5:2.5\n0 2:7:1\n1 9:abc:0.5\n", 16384 },
        { FMT_CSV, "label,a,n\n1,x,2.5\n0,,7\n1,\"q,r\",\n", 16384 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        th_write_str(th_path("in.txt"), cases[i].text);
        char *paths[] = { (char *)th_path("in.txt") };
        source_opts o;
        source_opts_default(&o);
        o.fmt = cases[i].fmt;
        o.block_rows = cases[i].block_rows;
        if (cases[i].fmt == FMT_CSV) o.schema_spec = "n:num";
        sample_block text, bin;
        data_schema st, sb;
        read_all(paths, 1, &o, &text, &st, NULL);
        convert(paths, 1, &o, th_path("out.cbx"));
        char *cpaths[] = { (char *)th_path("out.cbx") };
        source_opts oc;
        source_opts_default(&oc);   /* format detected from the magic */
        read_all(cpaths, 1, &oc, &bin, &sb, NULL);
        cr_assert_gt(text.rows, 0);
        assert_same(&text, &bin);
        cr_assert(schema_equal(&st, &sb), "case %zu: schema survives the round trip", i);
        block_free(&text), block_free(&bin), schema_free(&st), schema_free(&sb);
    }
    free(gen);
}

Test(cbx, stats_survive_and_several_files_form_one_stream)
{
    th_write_str(th_path("a.txt"), "1 1:1\nbad line\n0 2:1\n");
    th_write_str(th_path("b.txt"), "1 3:1\n");
    char *paths[] = { (char *)th_path("a.txt"), (char *)th_path("b.txt") };
    source_opts o;
    source_opts_default(&o);
    o.fmt = FMT_LIBSVM;
    o.max_bad_ratio = 0.5;
    o.report_bad = -1;
    convert(paths, 2, &o, th_path("x.cbx"));
    convert(paths + 1, 1, &o, th_path("y.cbx"));
    char *cp[] = { (char *)th_path("x.cbx"), (char *)th_path("y.cbx") };
    source_opts oc;
    source_opts_default(&oc);
    sample_block all;
    line_stats st;
    read_all(cp, 2, &oc, &all, NULL, &st);
    cr_assert_eq(all.rows, 4);
    cr_assert_eq(st.lines, 5);
    cr_assert_eq(st.bad[BAD_LABEL], 1);
    block_free(&all);
}

/* A small cbx of three blocks, in memory. */
static char *small_cbx(size_t *len)
{
    th_write_str(th_path("s.txt"), "1 1:1 2:0.5\n0 3:1\n1 4:1\n0 5:1 6:1\n1 7:1\n0\n1 8:2\n");
    char *paths[] = { (char *)th_path("s.txt") };
    source_opts o;
    source_opts_default(&o);
    o.fmt = FMT_LIBSVM;
    o.block_rows = 3;
    convert(paths, 1, &o, th_path("s.cbx"));
    return th_read(th_path("s.cbx"), len);
}

static int read_mem(const char *data, size_t len, char *err, size_t errlen)
{
    cbx_reader *r;
    int ret = cbx_reader_open_mem(&r, data, len, err, errlen);
    if (ret < 0) return ret;
    sample_block b;
    block_init(&b, 0);
    while ((ret = cbx_reader_next(r, &b, err, errlen)) > 0) {}
    block_free(&b);
    cbx_reader_close(r);
    return ret;
}

Test(cbx, every_flipped_byte_is_detected)
{
    size_t len;
    char *d = small_cbx(&len);
    char err[512];
    cr_assert_eq(read_mem(d, len, err, sizeof err), 0, "%s", err);
    for (size_t i = 0; i < len; i++) {
        for (int bit = 0; bit < 8; bit += 3) {
            d[i] ^= (char)(1 << bit);
            err[0] = 0;
            int r = read_mem(d, len, err, sizeof err);
            cr_assert_lt(r, 0, "flipping bit %d of byte %zu went unnoticed", bit, i);
            cr_assert(strlen(err) > 0);
            d[i] ^= (char)(1 << bit);
        }
    }
    free(d);
}

Test(cbx, every_truncation_is_detected)
{
    size_t len;
    char *d = small_cbx(&len);
    char err[512];
    for (size_t n = 0; n < len; n++) {
        err[0] = 0;
        cr_assert_lt(read_mem(d, n, err, sizeof err), 0, "truncation to %zu bytes went unnoticed", n);
    }
    /* bytes after the trailer are an error too */
    char *e = malloc(len + 1);
    memcpy(e, d, len);
    e[len] = 0;
    cr_assert_lt(read_mem(e, len + 1, err, sizeof err), 0);
    free(e);
    free(d);
}

Test(cbx, errors_name_block_and_offset)
{
    size_t len;
    char *d = small_cbx(&len);
    /* the second block's payload: find its header after the first block */
    size_t first = 4096, payload1;
    memcpy(&payload1, d + first + 24, 8);
    size_t second = first + 48 + payload1;
    d[second + 48 + 2] ^= 1;
    th_write(th_path("c.cbx"), d, len);
    cbx_reader *r;
    char err[512];
    cr_assert_eq(cbx_reader_open(&r, th_path("c.cbx"), err, sizeof err), 0, "%s", err);
    sample_block b;
    block_init(&b, 0);
    cr_assert_eq(cbx_reader_next(r, &b, err, sizeof err), 1);
    cr_assert_lt(cbx_reader_next(r, &b, err, sizeof err), 0);
    char want[128];
    snprintf(want, sizeof want, "block 1 at byte offset %zu", second);
    cr_assert(strstr(err, want) != NULL, "error '%s' should name '%s'", err, want);
    cr_assert(strstr(err, "c.cbx") != NULL);
    block_free(&b);
    cbx_reader_close(r);

    th_write(th_path("t.cbx"), d, second);   /* cut right after block 0 */
    cr_assert_eq(cbx_reader_open(&r, th_path("t.cbx"), err, sizeof err), 0);
    block_init(&b, 0);
    cr_assert_eq(cbx_reader_next(r, &b, err, sizeof err), 1);
    cr_assert_lt(cbx_reader_next(r, &b, err, sizeof err), 0);
    cr_assert(strstr(err, "truncated") && strstr(err, "block 1"), "%s", err);
    block_free(&b);
    cbx_reader_close(r);
    free(d);
}

Test(cbx, aborted_write_leaves_nothing)
{
    data_schema s;
    schema_init(&s, 2);
    cbx_writer *w;
    char err[256];
    cr_assert_eq(cbx_writer_open(&w, th_path("a.cbx"), &s, FMT_LIBSVM, err, sizeof err), 0);
    cbx_writer_abort(w);
    char *out;
    th_run(&out, "ls -A");
    cr_assert_str_eq(out, "", "left behind: %s", out);
    free(out);
    cr_assert_lt(cbx_writer_open(&w, "/nonexistent-dir/x.cbx", &s, FMT_LIBSVM, err, sizeof err), 0);
    cr_assert(strstr(err, "/nonexistent-dir/x.cbx"));
    schema_free(&s);
}
