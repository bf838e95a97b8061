/*
 * test_cache.c: the rows in memory under a byte budget (embedding/cache.h), over both policies and
 * budgets from "everything unpinned goes" to "nothing needs to go": pinned rows always stay, the
 * rows fit the budget whenever the pinned ones do, the rows dropped are exactly the lowest in the
 * policy's order, and the dirty rows are those changed since their copy in the tier.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../embedding/cache.h"
#include "helpers.h"

TestSuite(cache);

enum { ROWS = 2000, PINNED = 300 };

/* A table of ROWS keys 1..ROWS: key k shown k % 97 times, last in pass 1 + k % 13. */
static emb_table *make_table(void)
{
    emb_table_config c = { 4, 1, { 0 }, 0.1f, 0, 42, 0, 0 };
    sparse_opt_default(&c.opt, SOPT_ADAGRAD);
    emb_table *t = emb_table_create(&c);
    for (uint64_t k = 1; k <= ROWS; k++) {
        uint32_t r = emb_table_get(t, k);
        emb_row_count(&c, emb_table_head(t, r), (float)(k % 97), 0, 1 + (uint32_t)(k % 13));
    }
    return t;
}

/* the policy's priority (lower goes first), ties by key order as the cache breaks them is not
 * needed: the test only checks that every dropped row ranks no higher than every kept one */
static double pri(const emb_row_head *h, int lfu) { return lfu ? h->show : h->last_pass; }

Test(cache, pins_budget_and_order)
{
    int ftab[1] = { 0 };
    for (int lfu = 0; lfu < 2; lfu++)
        for (int kept = 0; kept <= ROWS; kept += 250) {
            emb_table *t = make_table();
            size_t rb = emb_table_row_bytes(t);
            size_t cost = rb + EMB_CACHE_INDEX_BYTES_PER_ROW;   /* a row and its key index slots */
            uint64_t budget = (uint64_t)kept * cost;
            emb_cache *c = emb_cache_create(&t, 1, ftab, 1, budget, lfu);
            key_vec pin = { 0 };
            for (uint64_t k = 1; k <= PINNED; k++) key_vec_push(&pin, k * 5);
            emb_cache_stats st = { 0 };
            double max_dropped = -1;
            uint8_t present[ROWS + 1];
            emb_pins pins = { &pin, NULL };
            uint64_t over = emb_cache_evict(c, &pins, 1, 0, 20, NULL, &st);
            for (uint64_t k = 1; k <= ROWS; k++) present[k] = emb_table_find(t, k) >= 0;
            /* the rows of the dropped keys, by their priority: rebuild them from a fresh table */
            emb_table *ref = make_table();
            double min_kept = 1e30;
            for (uint64_t k = 1; k <= ROWS; k++) {
                const emb_row_head *h = emb_table_head(ref, (uint32_t)emb_table_find(ref, k));
                int pinned = k % 5 == 0 && k / 5 <= PINNED;
                if (pinned) {
                    cr_assert(present[k], "pinned key %llu was dropped (lfu %d, budget %d rows)", (unsigned long long)k, lfu, kept);
                    continue;
                }
                if (present[k]) min_kept = pri(h, lfu) < min_kept ? pri(h, lfu) : min_kept;
                else max_dropped = pri(h, lfu) > max_dropped ? pri(h, lfu) : max_dropped;
            }
            cr_assert_eq(st.evicted, ROWS - emb_table_rows(t));
            if (kept >= PINNED) {
                cr_assert_eq(over, 0);
                cr_assert_leq(emb_cache_bytes(c) + emb_cache_rows(c) * EMB_CACHE_INDEX_BYTES_PER_ROW, budget,
                              "lfu %d, budget %d rows", lfu, kept);
                /* the key index keeps its size across a boundary's eviction (rows come back during the
                 * next pass), within four slots for each row of the most the table held */
                cr_assert_leq(emb_cache_index_bytes(c), (uint64_t)ROWS * EMB_CACHE_INDEX_BYTES_PER_ROW,
                              "the key index (lfu %d, budget %d rows)", lfu, kept);
                cr_assert_geq(emb_table_rows(t), (size_t)kept - 1, "no more dropped than needed");
            } else {
                cr_assert_eq(over, (uint64_t)(PINNED - kept) * cost);
                cr_assert_eq(emb_table_rows(t), PINNED, "everything unpinned goes");
            }
            if (max_dropped >= 0 && min_kept < 1e30) cr_assert_leq(max_dropped, min_kept, "the policy's order (lfu %d)", lfu);
            /* the scratch the eviction keeps (outside the budget): a byte a row and one buffer of
             * 16 bytes a row, each with a quarter more room */
            cr_assert_leq(emb_cache_scratch_bytes(c), (uint64_t)ROWS * 17 * 5 / 4, "lfu %d, budget %d rows", lfu, kept);
            key_vec_free(&pin);
            emb_cache_destroy(c);
            emb_table_destroy(t);
            emb_table_destroy(ref);
        }
}

Test(cache, dirty_rows_are_those_changed_since_their_tier_copy)
{
    int ftab[1] = { 0 };
    emb_table *t = make_table();
    emb_cache *c = emb_cache_create(&t, 1, ftab, 1, UINT64_MAX, 1);
    size_t bad;
    cr_assert_eq(emb_cache_dirty(c, &bad), ROWS, "rows never written are dirty");
    /* the even keys as if read from the tier (or written there): clean */
    for (uint64_t k = 2; k <= ROWS; k += 2)
        emb_table_head(t, (uint32_t)emb_table_find(t, k))->aux = (k + 100) | EMB_ROW_CLEAN;
    cr_assert_eq(emb_cache_dirty(c, &bad), ROWS / 2);
    cr_assert_eq(bad, 0);
    /* a training step counts the rows it changes: a clean row it touches is dirty again, and keeps
     * the slot of its copy (freed when it is written again) */
    const emb_table_config *cfg = emb_table_config_of(t);
    emb_row_head *h = emb_table_head(t, (uint32_t)emb_table_find(t, 8));
    emb_row_count(cfg, h, 1, 0, 30);
    cr_assert(!emb_row_clean(h));
    cr_assert_eq(emb_row_slot1(h), 108);
    cr_assert_eq(emb_cache_dirty(c, &bad), ROWS / 2 + 1);
    /* NaN or inf in a dirty row is counted; in a clean one it was committed already */
    emb_table_vals(t, (uint32_t)emb_table_find(t, 3))[1] = 1.0f / 0.0f;
    emb_table_vals(t, (uint32_t)emb_table_find(t, 4))[1] = 1.0f / 0.0f;
    emb_cache_dirty(c, &bad);
    cr_assert_eq(bad, 1);
    emb_cache_destroy(c);
    emb_table_destroy(t);
}

Test(cache, keys_of_a_block_per_table)
{
    emb_table *t = make_table();
    emb_table_config c2 = { 4, 1, { 0 }, 0.1f, 0, 42, 0, 0 };
    sparse_opt_default(&c2.opt, SOPT_SGD);
    emb_table *t2 = emb_table_create(&c2);
    emb_table *tabs[2] = { t, t2 };
    int ftab[3] = { 0, -1, 1 };
    emb_cache *c = emb_cache_create(tabs, 2, ftab, 3, UINT64_MAX, 1);
    sample_block b;
    block_init(&b, 0);
    uint64_t keys[] = { 7, 9, 7, 3, 9, 7 };
    uint16_t fields[] = { 0, 2, 0, 0, 2, 2 };
    for (int r = 0; r < 3; r++) {
        block_reserve(&b, 1, 2);
        if (r == 0) b.row_ptr[0] = 0;
        for (int j = 0; j < 2; j++) {
            b.key[b.nnz] = keys[r * 2 + j];
            b.field[b.nnz] = fields[r * 2 + j];
            b.val[b.nnz] = 1;
            b.nnz++;
        }
        b.label[b.rows] = 0;
        b.rows++;
        b.row_ptr[b.rows] = b.nnz;
    }
    key_vec out[2];
    emb_cache_keys(c, &b, out);
    cr_assert_eq(out[0].n, 2);
    cr_assert_eq(out[0].k[0], 7);
    cr_assert_eq(out[0].k[1], 3);
    cr_assert_eq(out[1].n, 2);
    cr_assert_eq(out[1].k[0], 9);
    cr_assert_eq(out[1].k[1], 7);
    key_vec_free(&out[0]);
    key_vec_free(&out[1]);
    block_free(&b);
    emb_cache_destroy(c);
    emb_table_destroy(t);
    emb_table_destroy(t2);
}

/* A pass's parts: each part's distinct keys per table in first-seen order and where it ends are
 * those of a plain reference, with the sets kept from part to part (the reader's) and without, over
 * a shuffled order, two tables and a numeric field, parts of every size from one batch to all. */
Test(cache, parts_of_a_pass_with_and_without_kept_sets)
{
    enum { N = 3000, FIELDS = 5, BATCH = 64 };
    emb_table_config cfg = { 4, 1, { 0 }, 0.1f, 0, 42, 0, 0 };
    sparse_opt_default(&cfg.opt, SOPT_SGD);
    emb_table *tabs[2] = { emb_table_create(&cfg), emb_table_create(&cfg) };
    int ftab[FIELDS] = { 0, 1, -1, 0, 1 };
    emb_cache *c = emb_cache_create(tabs, 2, ftab, FIELDS, UINT64_MAX, 1);
    sample_block b;
    block_init(&b, 0);
    uint64_t s = 7;
    size_t *order = malloc(N * sizeof *order);
    for (size_t r = 0; r < N; r++) {
        int nk = 1 + (int)(splitmix64(&s) % 6);   /* rows of 1 to 6 keys, fields repeated */
        block_reserve(&b, 1, (size_t)nk);
        if (r == 0) b.row_ptr[0] = 0;
        for (int j = 0; j < nk; j++) {
            b.key[b.nnz] = 1 + splitmix64(&s) % 900;   /* keys shared by the tables and repeated */
            b.field[b.nnz] = (uint16_t)(splitmix64(&s) % FIELDS);
            b.val[b.nnz++] = 1;
        }
        b.label[b.rows++] = 0;
        b.row_ptr[b.rows] = b.nnz;
        order[r] = r;
    }
    for (size_t i = N - 1; i > 0; i--) {
        size_t j = splitmix64(&s) % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    size_t rb = emb_table_row_bytes(tabs[0]) + EMB_CACHE_INDEX_BYTES_PER_ROW;
    uint64_t caps[] = { 1, 50 * rb, 400 * rb, UINT64_MAX };
    emb_part_sets *keep = emb_part_sets_new();
    for (size_t ci = 0; ci < sizeof caps / sizeof *caps; ci++) {
        size_t lo = 0, parts = 0;
        while (lo < N) {
            key_vec kept[2], own[2];
            uint64_t bk, bo;
            size_t hk = emb_cache_part(c, &b, order, lo, N, BATCH, caps[ci], kept, &bk, keep);
            size_t ho = emb_cache_part(c, &b, order, lo, N, BATCH, caps[ci], own, &bo, NULL);
            /* the reference: whole batches while their keys fit (the first always), first-seen order */
            size_t hr = lo;
            uint64_t br = 0;
            key_vec ref[2] = { { 0 }, { 0 } };
            while (hr < N) {
                size_t end = N - hr > BATCH ? hr + BATCH : N, mark[2] = { ref[0].n, ref[1].n };
                for (size_t i = hr; i < end; i++)
                    for (uint64_t k = b.row_ptr[order[i]]; k < b.row_ptr[order[i] + 1]; k++) {
                        int tb = ftab[b.field[k]];
                        if (tb < 0) continue;
                        size_t m = 0;
                        while (m < ref[tb].n && ref[tb].k[m] != b.key[k]) m++;
                        if (m == ref[tb].n) key_vec_push(&ref[tb], b.key[k]);
                    }
                uint64_t bytes = (ref[0].n + ref[1].n) * rb;
                if (hr > lo && bytes > caps[ci]) {
                    ref[0].n = mark[0];
                    ref[1].n = mark[1];
                    break;
                }
                br = bytes;
                hr = end;
            }
            cr_assert_eq(hk, hr, "cap %zu, part at %zu: ends at %zu, the reference at %zu", ci, lo, hk, hr);
            cr_assert_eq(ho, hr);
            cr_assert_eq(bk, br);
            cr_assert_eq(bo, br);
            for (int tb = 0; tb < 2; tb++) {
                cr_assert_eq(kept[tb].n, ref[tb].n);
                cr_assert_eq(own[tb].n, ref[tb].n);
                for (size_t i = 0; i < ref[tb].n; i++) {
                    cr_assert_eq(kept[tb].k[i], ref[tb].k[i]);
                    cr_assert_eq(own[tb].k[i], ref[tb].k[i]);
                }
                key_vec_free(&kept[tb]);
                key_vec_free(&own[tb]);
                key_vec_free(&ref[tb]);
            }
            cr_assert_gt(hk, lo);
            lo = hk;
            parts++;
        }
        cr_assert(ci == sizeof caps / sizeof *caps - 1 ? parts == 1 : parts > 1, "cap %zu: %zu parts", ci, parts);
    }
    emb_part_sets_free(keep);
    free(order);
    block_free(&b);
    emb_cache_destroy(c);
    emb_table_destroy(tabs[0]);
    emb_table_destroy(tabs[1]);
}

/* The bucket of show a row is written back in (0 hottest): its power of two */
static int show_bucket(float show)
{
    int x = 0;
    frexpf(show + 1.0f, &x);
    return -x;
}

/* The slot + 1 the tier holds for each of keys[0..n) (after the batch's seal) */
static void slots_of(emb_tier *tier, const uint64_t *keys, size_t n, uint64_t *aux)
{
    char err[1024];
    cr_assert_eq(emb_tier_lookup(tier, 0, keys, n, aux, err, sizeof err), 0, "%s", err);
    for (size_t i = 0; i < n; i++) cr_assert_neq(aux[i], 0, "key %llu was not written", (unsigned long long)keys[i]);
}

/* keys[0..n) with their buckets, in the order of their rows in memory: their slots must follow
 * the buckets, hottest first, and within one the rows' order */
static void assert_hot_first(const uint64_t *keys, const int *bucket, const uint64_t *aux, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            uint64_t si = aux[i] & ~EMB_ROW_CLEAN, sj = aux[j] & ~EMB_ROW_CLEAN;
            int before = bucket[i] <= bucket[j];   /* row i comes first in memory */
            cr_assert_eq(si < sj, before, "%s: keys %llu (bucket %d, slot %llu) and %llu (bucket %d, slot %llu)", what,
                         (unsigned long long)keys[i], bucket[i], (unsigned long long)si, (unsigned long long)keys[j],
                         bucket[j], (unsigned long long)sj);
        }
}

/* The rows an eviction writes back, and a commit's dirty rows, go to the tier hot first (buckets
 * of show by its power of two), in their order in memory within a bucket; clean rows and kept
 * rows are not written. */
Test(cache, rows_are_written_back_hot_first)
{
    int ftab[1] = { 0 };
    emb_table *t = make_table();
    size_t rb = emb_table_row_bytes(t), cost = rb + EMB_CACHE_INDEX_BYTES_PER_ROW;
    char err[1024];
    emb_tier *tier;
    cr_assert_eq(emb_tier_open(&tier, th_path("hotfirst"), 1, &rb, "test", 0, 8u << 20, err, sizeof err), 0, "%s", err);
    /* every third row clean, as if read from the tier: never written */
    for (uint32_t r = 0; r < ROWS; r += 3) emb_table_head(t, r)->aux = (1u << 30) | EMB_ROW_CLEAN;
    /* the rows in memory by row: key, bucket, clean */
    uint64_t keys[ROWS];
    int bucket[ROWS], clean[ROWS];
    for (uint32_t r = 0; r < ROWS; r++) {
        const emb_row_head *h = emb_table_head(t, r);
        keys[r] = h->key, bucket[r] = show_bucket(h->show), clean[r] = emb_row_clean(h);
    }
    /* an eviction down to 1200 rows, none pinned (lru) */
    emb_cache *c = emb_cache_create(&t, 1, ftab, 1, 1200 * cost, 0);
    emb_tier_batch *b = emb_tier_begin(tier);
    emb_cache_stats st = { 0 };
    key_vec none = { 0 };
    emb_pins pins = { &none, NULL };
    emb_cache_evict(c, &pins, 1, 0, 20, b, &st);
    cr_assert_eq(emb_table_rows(t), 1200);
    cr_assert_eq(emb_tier_seal(b, err, sizeof err), 0, "%s", err);
    uint64_t wk[ROWS], aux[ROWS];
    int wbk[ROWS];
    size_t n = 0, gone = 0;
    for (uint32_t r = 0; r < ROWS; r++) {
        if (emb_table_find(t, keys[r]) >= 0) continue;
        gone++;
        if (!clean[r]) wk[n] = keys[r], wbk[n++] = bucket[r];
    }
    cr_assert_eq(gone, ROWS - 1200);
    cr_assert_eq(st.written, n, "the dirty rows of those that went: %zu of %zu", n, gone);
    cr_assert_gt(n, 100);
    slots_of(tier, wk, n, aux);
    assert_hot_first(wk, wbk, aux, n, "eviction");
    /* a commit's dirty rows: those that stayed, less the clean ones */
    size_t m = 0;
    for (uint32_t r = 0; r < emb_table_rows(t); r++) {
        const emb_row_head *h = emb_table_head(t, r);
        if (!emb_row_clean(h)) wk[m] = h->key, wbk[m++] = show_bucket(h->show);
    }
    uint64_t bytes = 0;
    cr_assert_eq(emb_cache_put_dirty(c, b, &bytes), m);
    cr_assert_gt(m, 100);
    cr_assert_eq(emb_tier_seal(b, err, sizeof err), 0, "%s", err);
    slots_of(tier, wk, m, aux);
    for (size_t i = 0; i < m; i++)   /* after the eviction's slots */
        cr_assert_eq(emb_table_head(t, (uint32_t)emb_table_find(t, wk[i]))->aux, aux[i] | EMB_ROW_CLEAN);
    assert_hot_first(wk, wbk, aux, m, "commit");
    emb_tier_abort(b);
    emb_tier_close(tier);
    key_vec_free(&none);
    emb_cache_destroy(c);
    emb_table_destroy(t);
}

/* A table of n keys 1..n with dimension 1: key k shown k % 1009 times, last in pass 1 + k % 13 */
static emb_table *make_big_table(size_t n)
{
    emb_table_config c = { 1, 1, { 0 }, 0.1f, 0, 42, 0, 0 };
    sparse_opt_default(&c.opt, SOPT_ADAGRAD);
    emb_table *t = emb_table_create(&c);
    for (uint64_t k = 1; k <= n; k++)
        emb_row_count(&c, emb_table_head(t, emb_table_get(t, k)), (float)(k % 1009), 0, 1 + (uint32_t)(k % 13));
    return t;
}

/* Many rows and a few to drop (1%): each thread holds the victims it finds in a buffer of about
 * twice those (with one of 16 bytes for every row not kept, the scratch was 5.1 MB here), and
 * the rows dropped are the same with one thread, two, or twelve (where the threads' buffers would
 * be more than one for every row not kept, and that one holds them). */
Test(cache, few_rows_to_drop_of_many_take_little_scratch)
{
    enum { BIG = 300000, DROP = 3000 };
    int ftab[1] = { 0 }, threads[] = { 1, 2, 12 };
    key_vec pin = { 0 };
    for (uint64_t k = 7; k <= BIG; k += 7) key_vec_push(&pin, k);
    uint8_t *gone = calloc(BIG + 1, 1);
    for (int lfu = 0; lfu < 2; lfu++)
        for (size_t ti = 0; ti < sizeof threads / sizeof *threads; ti++) {
            omp_set_num_threads(threads[ti]);
            emb_table *t = make_big_table(BIG), *ref = make_big_table(BIG);
            size_t cost = emb_table_row_bytes(t) + EMB_CACHE_INDEX_BYTES_PER_ROW;
            emb_cache *c = emb_cache_create(&t, 1, ftab, 1, (uint64_t)(BIG - DROP) * cost, lfu);
            emb_pins pins = { &pin, NULL };
            emb_cache_stats st = { 0 };
            cr_assert_eq(emb_cache_evict(c, &pins, 1, 0, 20, NULL, &st), 0);
            cr_assert_eq(emb_table_rows(t), BIG - DROP, "lfu %d, %d threads", lfu, threads[ti]);
            double max_dropped = -1, min_kept = 1e30;
            for (uint64_t k = 1; k <= BIG; k++) {
                int g = emb_table_find(t, k) < 0;
                double p = pri(emb_table_head(ref, (uint32_t)emb_table_find(ref, k)), lfu);
                if (k % 7 == 0) cr_assert(!g, "pinned key %llu was dropped", (unsigned long long)k);
                if (g) max_dropped = p > max_dropped ? p : max_dropped;
                else if (k % 7) min_kept = p < min_kept ? p : min_kept;
                if (ti == 0) gone[k] = (uint8_t)g;
                else cr_assert_eq(g, gone[k], "key %llu, lfu %d: dropped with %d threads %s with one", (unsigned long long)k,
                                  lfu, threads[ti], g ? "but not" : "and not");
            }
            cr_assert_leq(max_dropped, min_kept, "the policy's order (lfu %d, %d threads)", lfu, threads[ti]);
            if (threads[ti] <= 2)   /* a byte a row to keep and the victims' buffers (900 KB), a quarter more room */
                cr_assert_leq(emb_cache_scratch_bytes(c), (uint64_t)BIG * 5, "lfu %d, %d threads: %llu bytes", lfu,
                              threads[ti], (unsigned long long)emb_cache_scratch_bytes(c));
            emb_cache_destroy(c);
            emb_table_destroy(t);
            emb_table_destroy(ref);
        }
    free(gone);
    key_vec_free(&pin);
}

/* (bucket, row) pairs in order */
typedef struct { int bucket; uint32_t row; uint64_t slot; } bucket_row;
static int cmp_bucket_row(const void *x, const void *y)
{
    const bucket_row *a = x, *b = y;
    if (a->bucket != b->bucket) return a->bucket < b->bucket ? -1 : 1;
    return (a->row > b->row) - (a->row < b->row);
}

/* A commit of more dirty rows than a batch seals at once goes in chunks of them, from a byte a
 * row (a pointer to every row to write was 8 bytes more a row, 3.4 MB of scratch here), hot
 * first all the same across the chunks. */
Test(cache, a_commit_of_many_rows_goes_in_chunks_hot_first)
{
    enum { BIG = 300000 };
    int ftab[1] = { 0 };
    emb_table *t = make_big_table(BIG);
    size_t rb = emb_table_row_bytes(t);
    char err[1024];
    emb_tier *tier;
    cr_assert_eq(emb_tier_open(&tier, th_path("chunks"), 1, &rb, "test", 0, 8u << 20, err, sizeof err), 0, "%s", err);
    for (uint32_t r = 0; r < BIG; r += 3) emb_table_head(t, r)->aux = (1u << 30) | EMB_ROW_CLEAN;
    bucket_row *br = malloc(BIG * sizeof *br);
    uint64_t *keys = malloc(BIG * sizeof *keys), *aux = malloc(BIG * sizeof *aux);
    size_t m = 0;
    for (uint32_t r = 0; r < BIG; r++) {
        const emb_row_head *h = emb_table_head(t, r);
        if (emb_row_clean(h)) continue;
        br[m] = (bucket_row){ show_bucket(h->show), r, 0 };
        keys[m++] = h->key;
    }
    cr_assert_gt(m, 2 * EMB_TIER_SEAL_PUTS);
    emb_cache *c = emb_cache_create(&t, 1, ftab, 1, UINT64_MAX, 1);
    emb_tier_batch *b = emb_tier_begin(tier);
    uint64_t bytes = 0;
    cr_assert_eq(emb_cache_put_dirty(c, b, &bytes), m);
    cr_assert_eq(emb_tier_seal(b, err, sizeof err), 0, "%s", err);
    cr_assert_leq(emb_cache_scratch_bytes(c), (uint64_t)BIG * 5, "%llu bytes", (unsigned long long)emb_cache_scratch_bytes(c));
    slots_of(tier, keys, m, aux);
    for (size_t i = 0; i < m; i++) br[i].slot = aux[i] & ~EMB_ROW_CLEAN;
    qsort(br, m, sizeof *br, cmp_bucket_row);
    for (size_t i = 1; i < m; i++)
        cr_assert_lt(br[i - 1].slot, br[i].slot, "rows %u (bucket %d) and %u (bucket %d): slots %llu and %llu", br[i - 1].row,
                     br[i - 1].bucket, br[i].row, br[i].bucket, (unsigned long long)br[i - 1].slot,
                     (unsigned long long)br[i].slot);
    emb_tier_abort(b);
    emb_tier_close(tier);
    free(br);
    free(keys);
    free(aux);
    emb_cache_destroy(c);
    emb_table_destroy(t);
}
