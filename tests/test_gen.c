/*
 * test_gen.c: the generator: the same arguments give the same bytes, another seed other bytes;
 * the layout is Criteo's; the truth file matches the labels; distinct keys grow with rows and
 * with --keys; the oracle scores well above chance.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/fieldstats.h"
#include "../datasets/gen.h"
#include "../datasets/source.h"
#include "../src/metrics.h"
#include "helpers.h"

TestSuite(gen, .fini = th_cleanup);

Test(gen, deterministic_bytes)
{
    char *a, *b, *c;
    cr_assert_eq(th_run(NULL, "$B/ctrbox-data gen --rows 5000 --seed 3 --out a.tsv --truth a.truth"), 0);
    cr_assert_eq(th_run(NULL, "$B/ctrbox-data gen --rows 5000 --seed 3 --out b.tsv --truth b.truth"), 0);
    cr_assert_eq(th_run(NULL, "$B/ctrbox-data gen --rows 5000 --seed 4 --out c.tsv"), 0);
    size_t la, lb, lc;
    a = th_read(th_path("a.tsv"), &la);
    b = th_read(th_path("b.tsv"), &lb);
    c = th_read(th_path("c.tsv"), &lc);
    cr_assert(la == lb && memcmp(a, b, la) == 0, "same arguments, same bytes");
    cr_assert(la != lc || memcmp(a, c, la) != 0, "another seed, other bytes");
    free(a), free(b), free(c);
    /* rows 2000.. written alone are the same bytes as in the whole */
    cr_assert_eq(th_run(NULL, "$B/ctrbox-data gen --rows 3000 --seed 3 --offset 2000 --out d.tsv && "
                              "tail -n 3000 a.tsv | cmp - d.tsv"), 0);
    a = th_read(th_path("a.truth"), &la);
    b = th_read(th_path("b.truth"), &lb);
    cr_assert(la == lb && memcmp(a, b, la) == 0);
    free(a), free(b);
}

Test(gen, layout_truth_and_oracle)
{
    gen_opts g = { 20000, 5, 1.0, 0 };
    FILE *f = fopen(th_path("g.tsv"), "w"), *t = fopen(th_path("g.truth"), "w");
    cr_assert_eq(gen_write(&g, f, t), 0);
    fclose(f), fclose(t);
    /* every line parses as criteo: 40 columns, labels 0/1, integers, 8-hex tokens */
    char *paths[] = { (char *)th_path("g.tsv") };
    source_opts o;
    source_opts_default(&o);
    o.fmt = FMT_CRITEO;
    o.max_bad_ratio = 0;
    data_source *s;
    char err[512];
    cr_assert_eq(source_open(&s, paths, 1, &o, err, sizeof err), 0, "%s", err);
    sample_block b;
    block_init(&b, 13);
    float *labels = malloc(20000 * sizeof *labels);
    size_t rows = 0, missing = 0;
    int r;
    while ((r = source_next(s, &b, err, sizeof err)) > 0) {
        memcpy(labels + rows, b.label, b.rows * sizeof(float));
        rows += b.rows;
        missing += b.rows * 26 - b.nnz;
    }
    cr_assert_eq(r, 0, "%s", err);
    cr_assert_eq(rows, 20000);
    cr_assert_gt(missing, 0, "some categorical values are empty");
    block_free(&b);
    source_close(s);
    /* token shape: 8 lowercase hex digits */
    size_t len;
    char *text = th_read(th_path("g.tsv"), &len);
    char *line2 = strchr(text, '\n') + 1;
    int tabs = 0;
    char *p = line2;
    while (tabs < 14) tabs += *p++ == '\t';
    for (int i = 0; i < 8; i++) cr_assert(strchr("0123456789abcdef", p[i]) && p[i], "hex token");
    free(text);
    /* truth labels are the data's labels, and the oracle beats chance clearly */
    FILE *tf = fopen(th_path("g.truth"), "r");
    double *prob = malloc(20000 * sizeof *prob);
    float *tl = malloc(20000 * sizeof *tl);
    for (size_t i = 0; i < 20000; i++) {
        int lab;
        cr_assert_eq(fscanf(tf, "%d\t%lf", &lab, &prob[i]), 2);
        tl[i] = (float)lab;
        cr_assert_eq(tl[i], labels[i], "row %zu", i);
    }
    fclose(tf);
    double auc = metrics_auc(tl, prob, 20000);
    cr_assert_gt(auc, 0.75, "oracle AUC %f", auc);
    double ctr = 0;
    for (size_t i = 0; i < 20000; i++) ctr += tl[i];
    ctr /= 20000;
    cr_assert(ctr > 0.1 && ctr < 0.4, "CTR %f", ctr);
    free(prob), free(tl), free(labels);
}

static uint64_t distinct_keys(uint64_t rows, double scale)
{
    gen_opts g = { rows, 9, scale, 0 };
    FILE *f = fopen(th_path("d.tsv"), "w");
    cr_assert_eq(gen_write(&g, f, NULL), 0);
    fclose(f);
    char *paths[] = { (char *)th_path("d.tsv") };
    source_opts o;
    source_opts_default(&o);
    o.fmt = FMT_CRITEO;
    data_source *s;
    char err[512];
    cr_assert_eq(source_open(&s, paths, 1, &o, err, sizeof err), 0, "%s", err);
    field_stats *fs = field_stats_create(39, 1 << 22);
    sample_block b;
    block_init(&b, 13);
    while (source_next(s, &b, err, sizeof err) > 0) field_stats_add(fs, &b);
    uint64_t total = 0;
    for (uint32_t i = 13; i < 39; i++) {
        int approx;
        total += field_stats_distinct(fs, i, &approx);
        cr_assert(!approx);
    }
    /* vocabularies differ by orders of magnitude between fields */
    int a;
    cr_assert_lt(field_stats_distinct(fs, 13 + 8, &a), 4, "C9 has 3 tokens");
    cr_assert_gt(field_stats_distinct(fs, 13 + 2, &a), 1000, "C3 has millions");
    block_free(&b);
    field_stats_destroy(fs);
    source_close(s);
    return total;
}

Test(gen, distinct_keys_grow_with_rows_and_scale)
{
    uint64_t k1 = distinct_keys(5000, 1), k2 = distinct_keys(20000, 1), k3 = distinct_keys(20000, 0.01);
    cr_assert_gt(k2, k1 * 2, "keys grow with rows: %llu -> %llu", (unsigned long long)k1, (unsigned long long)k2);
    cr_assert_lt(k2, 20000ull * 26, "Zipf: far fewer distinct keys than occurrences");
    cr_assert_lt(k3 * 2, k2, "--keys 0.01 shrinks the vocabularies: %llu vs %llu", (unsigned long long)k3,
                 (unsigned long long)k2);
}

Test(gen, bad_arguments)
{
    char *out;
    cr_assert_neq(th_run(&out, "$B/ctrbox-data gen --rows x --out a.tsv"), 0);
    cr_assert(strstr(out, "--rows"), "%s", out);
    free(out);
    cr_assert_neq(th_run(&out, "$B/ctrbox-data gen --rows 10 --out /nonexistent/a.tsv"), 0);
    cr_assert(strstr(out, "/nonexistent/a.tsv"), "%s", out);
    free(out);
}
