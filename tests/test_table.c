/*
 * test_table.c: the sparse table and its optimizers: rows keep key, counters, values and state
 * together; initial values depend on (seed, key) only; admission by shows; save/load round trip
 * and corruption detection; each sparse optimizer's step against its formula.
 */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../dense/optim.h"
#include "../embedding/table.h"
#include "helpers.h"

TestSuite(table, .fini = th_cleanup);

static emb_table_config cfg(sparse_opt_kind k, uint32_t min_show)
{
    emb_table_config c = { 4, 1, { 0 }, 0.1f, 0, 42, min_show };
    sparse_opt_default(&c.opt, k);
    return c;
}

Test(table, init_depends_on_seed_and_key_only)
{
    emb_table_config c = cfg(SOPT_ADAGRAD, 0);
    emb_table *a = emb_table_create(&c), *b = emb_table_create(&c);
    for (uint64_t k = 1; k <= 5000; k++) emb_table_get(a, k);
    for (uint64_t k = 5000; k >= 1; k--) emb_table_get(b, k);   /* other order, other growth */
    cr_assert_eq(emb_table_rows(a), 5000);
    for (uint64_t k = 1; k <= 5000; k += 97) {
        float *va = emb_table_vals(a, (uint32_t)emb_table_find(a, k)), *vb = emb_table_vals(b, (uint32_t)emb_table_find(b, k));
        cr_assert(memcmp(va, vb, (size_t)emb_table_values(a) * sizeof(float)) == 0, "key %llu", (unsigned long long)k);
        cr_assert_eq(va[0], 0.0f, "first-order weight starts at 0");
    }
    /* spread about init_std */
    double s2 = 0;
    for (uint64_t k = 1; k <= 5000; k++) {
        float *v = emb_table_vals(a, (uint32_t)emb_table_find(a, k));
        for (int d = 1; d < 5; d++) s2 += v[d] * v[d];
    }
    cr_assert_float_eq(sqrt(s2 / 20000), 0.1, 0.01);
    cr_assert_eq(emb_table_find(a, 99999), -1);
    emb_table_destroy(a);
    emb_table_destroy(b);
}

Test(table, counters_and_admission)
{
    emb_table_config c = cfg(SOPT_SGD, 3);
    emb_table *t = emb_table_create(&c);
    uint32_t d = emb_table_touch(t, 77, 5, 1, 1);
    cr_assert_eq(emb_table_head(t, d)->key, emb_table_default_key(5), "before 3 shows: the field's default row");
    cr_assert_eq(emb_table_find(t, 77), -1, "no row of its own yet");
    cr_assert_eq(emb_table_touch(t, 77, 5, 0, 2), d);
    uint32_t r = emb_table_touch(t, 77, 5, 1, 3);
    cr_assert_neq(r, d, "admitted at the third show");
    emb_row_head *h = emb_table_head(t, r);
    cr_assert_eq(h->key, 77);
    cr_assert_float_eq(h->show, 3, 0);
    cr_assert_float_eq(h->click, 2, 0);
    cr_assert_eq(h->last_pass, 3);
    cr_assert_eq(emb_table_touch(t, 77, 5, 0, 4), r);
    cr_assert_float_eq(emb_table_head(t, r)->show, 4, 0);
    cr_assert_eq(emb_table_lookup(t, 12345, 5), (int64_t)d, "unknown keys read the default row");
    cr_assert_eq(emb_table_lookup(t, 12345, 9), -1);
    emb_table_destroy(t);
}

Test(table, pending_counters_survive_save_and_load)
{
    emb_table_config c = cfg(SOPT_SGD, 3);
    emb_table *t = emb_table_create(&c);
    emb_table_touch(t, 77, 5, 1, 1);
    emb_table_touch(t, 77, 5, 0, 2);   /* two shows: one short of admission */
    FILE *f = fopen(th_path("p.bin"), "wb");
    cr_assert_eq(emb_table_save(t, f), 0);
    fclose(f);
    emb_table *u = emb_table_create(&c);
    char err[256];
    f = fopen(th_path("p.bin"), "rb");
    cr_assert_eq(emb_table_load(u, f, err, sizeof err), 0, "%s", err);
    fclose(f);
    cr_assert_eq(emb_table_find(u, 77), -1);
    uint32_t r = emb_table_touch(u, 77, 5, 1, 3);
    cr_assert_eq(emb_table_head(u, r)->key, 77, "the third show admits it, after the reload too");
    cr_assert_float_eq(emb_table_head(u, r)->show, 3, 0);
    cr_assert_float_eq(emb_table_head(u, r)->click, 2, 0);
    emb_table_destroy(t), emb_table_destroy(u);
}

/* The deletion record: the keys shrink deleted and the pass of the last deletion, kept through a
 * save and load (the table section, and the record a tier's commit keeps apart), asked for since a
 * pass; the pending blob of a commit no longer carries it. */
Test(table, deletion_record_survives_save_and_load)
{
    emb_table_config c = cfg(SOPT_SGD, 0);
    emb_table *t = emb_table_create(&c);
    cr_assert_eq(emb_table_deletions_from(t), 0, "a new table knows every deletion");
    for (uint64_t k = 1; k <= 300; k++) emb_table_note_deleted(t, k * 1000003, (uint32_t)(k % 10));
    emb_table_note_deleted(t, 0, 2);
    emb_table_note_deleted(t, UINT64_MAX, 9);
    emb_table_note_deleted(t, 0, 7);   /* deleted again later: the later pass */
    for (int blob = 0; blob < 2; blob++) {
        FILE *f = fopen(th_path("d.bin"), "wb");
        cr_assert_eq(blob ? emb_table_save_deleted(t, f) : emb_table_save(t, f), 0);
        fclose(f);
        emb_table *u = emb_table_create(&c);
        char err[256];
        f = fopen(th_path("d.bin"), "rb");
        cr_assert_eq(blob ? emb_table_load_deleted(u, f, err, sizeof err) : emb_table_load(u, f, err, sizeof err), 0, "%s", err);
        fclose(f);
        if (blob) {   /* the pending blob leaves a table's record as it was */
            emb_table *empty = emb_table_create(&c);
            f = fopen(th_path("p.bin"), "wb");
            cr_assert_eq(emb_table_save_pending(empty, f), 0);
            fclose(f);
            emb_table_destroy(empty);
            f = fopen(th_path("p.bin"), "rb");
            cr_assert_eq(emb_table_load_pending(u, f, err, sizeof err), 0, "%s", err);
            fclose(f);
        }
        cr_assert_eq(emb_table_deletions_from(u), 0);
        key_vec v = { 0 };
        size_t n = emb_table_deleted_since(u, 6, &v);   /* passes 7, 8, 9 */
        size_t want = 0, zero = 0, top = 0;
        for (uint64_t k = 1; k <= 300; k++) want += k % 10 > 6;
        for (size_t i = 0; i < v.n; i++) zero += v.k[i] == 0, top += v.k[i] == UINT64_MAX;
        cr_assert_eq(n, want + 2, "%zu keys deleted after pass 6, want %zu", n, want + 2);
        cr_assert(zero == 1 && top == 1);
        key_vec_free(&v);
        emb_table_destroy(u);
    }
    /* a damaged record is refused */
    FILE *f = fopen(th_path("d.bin"), "r+b");
    fseek(f, -20, SEEK_END);
    fputc(0x55, f);
    fclose(f);
    emb_table *u = emb_table_create(&c);
    char err[256];
    f = fopen(th_path("d.bin"), "rb");
    cr_assert_neq(emb_table_load_deleted(u, f, err, sizeof err), 0);
    cr_assert(strstr(err, "checksum mismatch"), "%s", err);
    fclose(f);
    emb_table_destroy(u), emb_table_destroy(t);
}

Test(table, save_load_round_trip_and_corruption)
{
    emb_table_config c = cfg(SOPT_ADAM, 0);
    emb_table *t = emb_table_create(&c);
    float g[5] = { 0.1f, -0.2f, 0.3f, 0.4f, -0.5f };
    for (uint64_t k = 1; k <= 300; k++) emb_table_update(t, emb_table_touch(t, k * 7919, 0, (int)(k % 2), 1), g, 1);
    FILE *f = fopen(th_path("t.bin"), "wb");
    cr_assert_eq(emb_table_save(t, f), 0);
    fclose(f);
    emb_table *u = emb_table_create(&c);
    char err[256];
    f = fopen(th_path("t.bin"), "rb");
    cr_assert_eq(emb_table_load(u, f, err, sizeof err), 0, "%s", err);
    fclose(f);
    cr_assert_eq(emb_table_rows(u), 300);
    for (uint64_t k = 1; k <= 300; k++) {
        int64_t a = emb_table_find(t, k * 7919), b = emb_table_find(u, k * 7919);
        cr_assert(b >= 0);
        cr_assert(memcmp(emb_table_vals(t, (uint32_t)a) - 0, emb_table_vals(u, (uint32_t)b),
                         (size_t)(emb_table_values(t) + emb_table_state_floats(t)) * sizeof(float)) == 0);
        cr_assert_float_eq(emb_table_head(u, (uint32_t)b)->click, (float)(k % 2), 0);
    }
    size_t len;
    char *bytes = th_read(th_path("t.bin"), &len);
    bytes[len / 2] ^= 4;
    th_write(th_path("bad.bin"), bytes, len);
    emb_table *w = emb_table_create(&c);
    f = fopen(th_path("bad.bin"), "rb");
    cr_assert_lt(emb_table_load(w, f, err, sizeof err), 0);
    cr_assert(strstr(err, "checksum"), "%s", err);
    fclose(f);
    emb_table_config other = cfg(SOPT_ADAGRAD, 0);
    emb_table *x = emb_table_create(&other);
    f = fopen(th_path("t.bin"), "rb");
    cr_assert_lt(emb_table_load(x, f, err, sizeof err), 0, "a table of another layout is refused");
    fclose(f);
    free(bytes);
    emb_table_destroy(t), emb_table_destroy(u), emb_table_destroy(w), emb_table_destroy(x);
}

Test(table, sparse_optimizer_steps)
{
    const float v0[2] = { 0.5f, -1.0f }, g[2] = { 0.2f, -0.4f };
    for (int k = 0; k < 5; k++) {
        sparse_opt o;
        sparse_opt_default(&o, (sparse_opt_kind)k);
        o.lr = 0.1f;
        o.l2 = 0.01f;
        float v[2], s[4];
        memcpy(v, v0, sizeof v);
        sparse_opt_init_state(&o, s, 2);
        sparse_opt_update(&o, v, s, g, 2, 1);
        for (int i = 0; i < 2; i++) {
            double gi = g[i] + 0.01 * v0[i], want;
            switch (k) {
            case SOPT_SGD: want = v0[i] - 0.1 * gi; break;
            case SOPT_ADAGRAD: want = v0[i] - 0.1 * gi / (fabs(gi) + 1e-10); break;
            case SOPT_ROWWISE_ADAGRAD: {
                double g0 = g[0] + 0.01 * v0[0], g1 = g[1] + 0.01 * v0[1];
                want = v0[i] - 0.1 * gi / (sqrt((g0 * g0 + g1 * g1) / 2) + 1e-10);
                break;
            }
            case SOPT_ADAM: want = v0[i] - 0.1 * (gi > 0 ? 1 : -1); break;   /* first step: lr * sign */
            default: {   /* FTRL from z = g - sigma v, n = g^2 (no l2 in the gradient) */
                double n = g[i] * g[i], sigma = sqrt(n) / o.ftrl_alpha, z = g[i] - sigma * v0[i];
                want = -z / ((o.ftrl_beta + sqrt(n)) / o.ftrl_alpha);
            }
            }
            cr_assert_float_eq(v[i], want, 1e-5, "%s value %d: %f vs %f", sparse_opt_name((sparse_opt_kind)k), i, v[i], want);
        }
    }
}

Test(table, dense_optimizer_steps)
{
    for (int k = 0; k < 3; k++) {
        dense_opt o;
        dense_opt_default(&o, (dense_opt_kind)k);
        o.lr = 0.1f;
        float p[2] = { 0.5f, -1.0f }, g[2] = { 0.2f, -0.4f }, m[4] = { 0 };
        dense_opt_step(&o, p, g, m, 2, 1);
        float want0 = k == DOPT_SGD ? 0.5f - 0.02f : 0.5f - 0.1f;   /* adam, adagrad: lr * sign on step 1 */
        cr_assert_float_eq(p[0], want0, 1e-5, "%s", dense_opt_name((dense_opt_kind)k));
    }
}

/* Rows claimed in order and filled on several threads: every key finds its claimed row, with the
 * values emb_table_insert gives it; the table then grows and removes rows as usual. */
Test(table, parallel_fills_index_every_key)
{
    emb_table_config c = cfg(SOPT_ADAM, 0);
    emb_table *a = emb_table_create(&c), *b = emb_table_create(&c);
    enum { N = 200000 };
    uint32_t *row = malloc(N * sizeof *row);
    for (uint64_t k = 0; k < N; k++) row[k] = emb_table_claim(a);
    #pragma omp parallel for num_threads(4) schedule(static, 64)
    for (uint64_t k = 0; k < N; k++) emb_table_fill(a, row[k], k * 7919 + 3);
    for (uint64_t k = 0; k < N; k++) cr_assert_eq(emb_table_insert(b, k * 7919 + 3), row[k]);
    size_t rb = emb_table_row_bytes(a);
    for (uint64_t k = 0; k < N; k++) {
        cr_assert_eq(emb_table_find(a, k * 7919 + 3), (int64_t)row[k], "key %llu", (unsigned long long)k);
        cr_assert(memcmp(emb_table_head(a, row[k]), emb_table_head(b, row[k]), rb) == 0);
    }
    cr_assert_eq(emb_table_find(a, 5), -1);
    for (uint64_t k = N; k < N + 5000; k++) emb_table_get(a, k * 7919 + 3);   /* grows past the filled index */
    emb_table_remove(a, 17);
    for (uint64_t k = 0; k < N + 5000; k++)
        if (k != 17) cr_assert_eq(emb_table_head(a, (uint32_t)emb_table_find(a, k * 7919 + 3))->key, k * 7919 + 3);
    cr_assert_eq(emb_table_find(a, 17 * 7919 + 3), -1);
    free(row);
    emb_table_destroy(a);
    emb_table_destroy(b);
}

/* A long-tailed stream of shows: key i of n drawn with weight 1 / (i + 1). */
static uint64_t tail_key(uint64_t *s, uint64_t n)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    double u = (double)(*s >> 11) / 9007199254740992.0;
    return (uint64_t)(pow((double)n + 1, u)) + 1000;   /* log-uniform: P(k) ~ 1/k */
}

/* 20,000 more shows of the long tail train the same rows in a and b. */
static void admit_alike(emb_table *a, emb_table *b, uint64_t *seed)
{
    for (int i = 0; i < 20000; i++) {
        uint64_t k = tail_key(seed, 20000);
        uint32_t ra = emb_table_touch_n(a, k, 2, 1, 0, 2), rb = emb_table_touch_n(b, k, 2, 1, 0, 2);
        cr_assert_eq(emb_table_head(a, ra)->key, emb_table_head(b, rb)->key, "show %d, key %llu", i, (unsigned long long)k);
    }
}

/* The admission sketch against exact counts: with room for every key it admits the same keys at
 * the same show with the same counters; a small one admits keys early (the estimate is an upper
 * bound until an admitted key's counts leave their cells), and survives save and load. */
Test(table, admission_sketch_against_exact_counts)
{
    emb_table_config ce = cfg(SOPT_SGD, 3), cs = ce, ct = ce;
    cs.admit_bytes = 1u << 24;   /* 16 MB: 4,194,304 cells of a byte a row, for 20,000 keys */
    ct.admit_bytes = 1u << 14;   /* 16 KB: 4,096 cells a row */
    emb_table *e = emb_table_create(&ce), *s = emb_table_create(&cs), *t = emb_table_create(&ct);
    cr_assert_eq(emb_table_sketch_bytes(e), 0);
    cr_assert_eq(emb_table_sketch_bytes(s), 1u << 24);
    cr_assert_eq(emb_table_sketch_bytes(t), 1u << 14);
    uint64_t seed = 9;
    for (int i = 0; i < 200000; i++) {
        uint64_t k = tail_key(&seed, 20000);
        int clk = (k * 7 + (uint64_t)i) % 5 == 0;
        uint32_t shows = 1 + (uint32_t)(i % 3 == 0);
        uint32_t re = emb_table_touch_n(e, k, 2, shows, clk, 1), rs = emb_table_touch_n(s, k, 2, shows, clk, 1);
        emb_table_touch_n(t, k, 2, shows, clk, 1);
        cr_assert_eq(emb_table_head(e, re)->key, emb_table_head(s, rs)->key, "touch %d key %llu", i, (unsigned long long)k);
    }
    cr_assert_eq(emb_table_rows(e), emb_table_rows(s));
    size_t early = 0;
    for (size_t r = 0; r < emb_table_rows(e); r++) {
        const emb_row_head *h = emb_table_head(e, (uint32_t)r);
        const emb_row_head *g = emb_table_head(s, (uint32_t)emb_table_find(s, h->key));
        cr_assert(h->show == g->show && h->click == g->click, "key %llu: %g/%g exact, %g/%g sketch",
                  (unsigned long long)h->key, h->show, h->click, g->show, g->click);
    }
    for (size_t r = 0; r < emb_table_rows(t); r++) early += emb_table_find(e, emb_table_head(t, (uint32_t)r)->key) < 0;
    for (size_t r = 0; r < emb_table_rows(e); r++)   /* never late */
        cr_assert_geq(emb_table_find(t, emb_table_head(e, (uint32_t)r)->key), 0);
    cr_assert_gt(early, 0, "a sketch of 4,096 cells a row admits keys early on 20,000 keys");
    cr_assert_gt(emb_table_rows(t), emb_table_rows(e));
    /* the sketch goes with the table: save, load, and the next shows admit alike */
    FILE *f = fopen(th_path("sk.tbl"), "w+b");
    cr_assert(f && emb_table_save(s, f) == 0);
    rewind(f);
    emb_table *l = emb_table_create(&cs);
    char err[256];
    cr_assert_eq(emb_table_load(l, f, err, sizeof err), 0, "%s", err);
    admit_alike(s, l, &seed);
    /* a table saved with exact counts loads into a sketch: the pending keys' counts go on */
    rewind(f);
    cr_assert(ftruncate(fileno(f), 0) == 0 && emb_table_save(e, f) == 0);
    rewind(f);
    emb_table *x = emb_table_create(&cs);
    cr_assert_eq(emb_table_load(x, f, err, sizeof err), 0, "%s", err);
    admit_alike(e, x, &seed);
    /* a sketch of another size is refused, and so is a damaged one */
    rewind(f);
    cr_assert(ftruncate(fileno(f), 0) == 0 && emb_table_save(s, f) == 0);
    rewind(f);
    emb_table *y = emb_table_create(&ct);
    cr_assert_neq(emb_table_load(y, f, err, sizeof err), 0);
    cr_assert(strstr(err, "admission sketch") && strstr(err, "--admit-mb"), "%s", err);
    fseek(f, 0, SEEK_END);
    long end = ftell(f);
    fseek(f, end - 4096, SEEK_SET);
    fputc(0x5a, f);
    rewind(f);
    emb_table *z = emb_table_create(&cs);
    cr_assert_neq(emb_table_load(z, f, err, sizeof err), 0);
    cr_assert(strstr(err, "checksum"), "%s", err);
    fclose(f);
    emb_table *all[] = { e, s, t, l, x, y, z };
    for (int i = 0; i < 7; i++) emb_table_destroy(all[i]);
}

/* Dropping rows: a few (holes filled from the end, keys deleted one by one) or most (the kept rows
 * packed in order, the index built again); either way every kept key finds its own row, values
 * included, at the number moved_to gives it, no dropped key is found, and the generation moves. */
Test(table, keep_rows_drops_exactly_the_rows_not_kept)
{
    emb_table_config c = cfg(SOPT_ADAGRAD, 0);
    const int n = 20000;   /* the index is rebuilt in chunks of 4096 rows on several threads */
    for (int share = 0; share < 3; share++) {   /* about 1/10, 1/4 and 3/4 of the rows go */
        emb_table *t = emb_table_create(&c);
        for (uint64_t k = 1; k <= (uint64_t)n; k++) emb_table_get(t, k * 7919);
        uint8_t *keep = malloc((size_t)n);
        size_t kept = 0;
        for (int r = 0; r < n; r++) {
            uint64_t key = emb_table_head(t, (uint32_t)r)->key;
            uint64_t h = key * 0x9E3779B97F4A7C15ull >> 56;   /* 0..255 */
            keep[r] = share == 0 ? h >= 26 : share == 1 ? h >= 64 : h >= 192;   /* holes filled twice, then rebuilt */
            if (r >= n - 5) keep[r] = share != 0;   /* a run of dropped (or kept) rows at the end */
            emb_table_vals(t, (uint32_t)r)[1] = (float)key;   /* a value that names its key */
            kept += keep[r];
        }
        uint8_t *was_kept = calloc((size_t)n + 1, 1);
        uint32_t *was_at = calloc((size_t)n + 1, sizeof *was_at), *moved_to = malloc((size_t)n * sizeof *moved_to);
        for (int r = 0; r < n; r++) {
            was_kept[emb_table_head(t, (uint32_t)r)->key / 7919] = keep[r];
            was_at[emb_table_head(t, (uint32_t)r)->key / 7919] = (uint32_t)r;
        }
        uint64_t gen = emb_table_generation(t);
        cr_assert_eq(emb_table_keep_rows(t, keep, moved_to), (size_t)n - kept);
        cr_assert_neq(emb_table_generation(t), gen);
        cr_assert_eq(emb_table_rows(t), kept);
        for (uint64_t k = 1; k <= (uint64_t)n; k++) {
            int64_t r = emb_table_find(t, k * 7919);
            cr_assert_eq(r >= 0, was_kept[k] != 0, "share %d key %llu", share, (unsigned long long)k);
            if (r < 0) continue;
            cr_assert_lt((size_t)r, kept, "share %d key %llu: a row past the table's end", share, (unsigned long long)k);
            cr_assert_eq((uint32_t)r, moved_to[was_at[k]], "share %d key %llu: moved_to", share, (unsigned long long)k);
            cr_assert_eq(emb_table_head(t, (uint32_t)r)->key, k * 7919);
            cr_assert_eq(emb_table_vals(t, (uint32_t)r)[1], (float)(k * 7919));
        }
        /* the batched lookups answer as the single ones, for keys kept, dropped and never there,
         * in batches shorter and longer than their lookahead */
        uint64_t *keys = malloc(2 * (size_t)n * sizeof *keys);
        int64_t *rows = malloc(2 * (size_t)n * sizeof *rows);
        for (int i = 0; i < 2 * n; i++) keys[i] = (uint64_t)(i + 1) * 7919 + (i % 3 == 2);
        for (size_t len = 0; len <= 2 * (size_t)n; len = len ? len * 7 : 5) {
            emb_table_find_many(t, keys, len, rows);
            for (size_t i = 0; i < len; i++) cr_assert_eq(rows[i], emb_table_find(t, keys[i]), "len %zu key %zu", len, i);
        }
        free(keys);
        free(rows);
        free(keep);
        free(was_kept);
        free(was_at);
        free(moved_to);
        emb_table_destroy(t);
    }
}

/* emb_row_finite on a row of dim floats and their state: each float, and each counter, set to NaN
 * or inf in turn makes it fail; large, tiny, subnormal and signed zero values pass */
static void finite_check(int dim)
{
    emb_table_config c = cfg(SOPT_ADAGRAD, 0);
    c.dim = dim;
    emb_table *t = emb_table_create(&c);
    uint32_t r = (uint32_t)emb_table_get(t, 12345);
    emb_row_head *h = emb_table_head(t, r);
    float *v = emb_table_vals(t, r);
    int n = emb_table_values(t) + emb_table_state_floats(t);
    cr_assert_gt(emb_table_state_floats(t), 0, "adagrad keeps state");
    const float good[] = { 0.0f, -0.0f, FLT_MAX, -FLT_MAX, FLT_MIN / 4, 1e-30f, -3.5f };
    for (int i = 0; i < n; i++) v[i] = good[i % 7];
    h->show = FLT_MAX, h->click = -0.0f;
    cr_assert(emb_row_finite(t, h), "dim %d: large, tiny, subnormal and signed zero values are finite", dim);
    const float bad[] = { NAN, -NAN, INFINITY, -INFINITY };
    for (int b = 0; b < 4; b++) {
        for (int i = 0; i < n; i++) {
            float was = v[i];
            v[i] = bad[b];
            cr_assert(!emb_row_finite(t, h), "dim %d: float %d of %d set to %g", dim, i, n, (double)bad[b]);
            v[i] = was;
        }
        float s = h->show, k = h->click;
        h->show = bad[b];
        cr_assert(!emb_row_finite(t, h), "dim %d: show %g", dim, (double)bad[b]);
        h->show = s, h->click = bad[b];
        cr_assert(!emb_row_finite(t, h), "dim %d: click %g", dim, (double)bad[b]);
        h->click = k;
    }
    cr_assert(emb_row_finite(t, h));
    emb_table_destroy(t);
}

/* the check by which a commit refuses diverged rows, in rows shorter and longer than a vector,
 * with and without a tail after the last one */
Test(table, finite_check_finds_nan_and_inf_anywhere_in_a_row)
{
    for (int dim = 1; dim <= 29; dim += 14) finite_check(dim);
}
