/*
 * cache.c: the rows in CPU memory under a byte budget (cache.h): fetches from the tier, the
 * install and the eviction at pass boundaries, and the dirty rows a commit writes.
 */
#define _GNU_SOURCE
#include "cache.h"

#include <malloc.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../io/mix.h"
#include "../io/util.h"

/* The boundary's loops over keys and rows share chunks out as threads come (schedule dynamic):
 * with the fetch, writer and reader threads on the same cores, a static share left the trainer's
 * thread waiting at a loop's end for a thread that had lost its core. */

/* Keys looked up at once (emb_table_find_many) by one thread of a boundary's loops */
#define FIND_CHUNK 1024

/* The eviction's scans over rows ask for a row this many rows before they read it: the rows
 * leaving are not in the core's cache, and their addresses keep no stride a prefetcher follows
 * (kept rows lie between them) */
#define ROW_AHEAD 16

/* a row in memory costs the budget its bytes and its key index slots (cache.h) */
#define ROW_INDEX_BYTES EMB_CACHE_INDEX_BYTES_PER_ROW
_Static_assert(EMB_CACHE_INDEX_BYTES_PER_ROW == 4 * sizeof(key_slot), "four index slots a row");

struct emb_cache {
    emb_table *const *tab;   /* (n_tables) borrowed */
    int n_tables;
    size_t *row_bytes;       /* (n_tables) */
    int *ftab;               /* (n_fields) field -> table, -1 numeric */
    uint32_t n_fields;
    int admission;           /* min_show > 1: the fields' default rows belong to every pass */
    uint64_t budget;
    int lfu;
    /* eviction's scratch, kept from boundary to boundary (fresh pages each time were a tenth of its cost) */
    uint8_t **keep;          /* (n_tables) a byte per row */
    size_t *keep_cap;
    /* One buffer for the steps of an eviction one after the other, and for a commit's puts: the
     * victims (least_victims), then a byte a row and a chunk of rows to write (put_in_order), then
     * each row's number after the eviction (4 bytes a row, the most of the three when few rows
     * go). The eviction runs with the budget's rows all in memory, at the process's peak. */
    void *scr;
    size_t scr_cap;
};

/* *p with room for `bytes` (its contents are not kept when it grows) */
static void *scratch(void **p, size_t *cap, size_t bytes)
{
    if (bytes > *cap) {
        free(*p);
        *cap = bytes + bytes / 4;
        *p = xmalloc(*cap);
    }
    return *p;
}

void emb_cache_split_budget(double cache_mb, uint64_t *rows, size_t *index, uint64_t *window)
{
    uint64_t budget = (uint64_t)(cache_mb * 1048576.0);
    uint64_t ix = budget / 4;
    if (ix > (256u << 20)) ix = 256u << 20;
    if (ix < (1u << 20)) ix = 1u << 20;
    *index = (size_t)ix;
    uint64_t rest = budget > ix ? budget - ix : 0;
    *window = rest / 8;
    *rows = rest - *window;
}

emb_cache *emb_cache_create(emb_table *const *tabs, int n_tables, const int *field_table, uint32_t n_fields,
                            uint64_t budget, int lfu)
{
    CHECK(n_tables <= 0xffff);   /* a victim's 16 bits */
    emb_cache *c = xcalloc(1, sizeof *c);
    c->tab = tabs;
    c->n_tables = n_tables;
    c->row_bytes = xcalloc((size_t)n_tables, sizeof *c->row_bytes);
    for (int i = 0; i < n_tables; i++) {
        c->row_bytes[i] = emb_table_row_bytes(tabs[i]);
        c->admission |= emb_table_config_of(tabs[i])->min_show > 1;
    }
    c->ftab = xmalloc((n_fields ? n_fields : 1) * sizeof *c->ftab);
    memcpy(c->ftab, field_table, n_fields * sizeof *c->ftab);
    c->n_fields = n_fields;
    c->budget = budget;
    c->lfu = lfu;
    c->keep = xcalloc((size_t)n_tables, sizeof *c->keep);
    c->keep_cap = xcalloc((size_t)n_tables, sizeof *c->keep_cap);
    return c;
}

void emb_cache_destroy(emb_cache *c)
{
    if (!c) return;
    for (int i = 0; i < c->n_tables; i++) free(c->keep[i]);
    free(c->keep), free(c->keep_cap), free(c->scr);
    free(c->row_bytes);
    free(c->ftab);
    free(c);
}

uint64_t emb_cache_bytes(const emb_cache *c)
{
    uint64_t b = 0;
    for (int i = 0; i < c->n_tables; i++) b += emb_table_rows(c->tab[i]) * c->row_bytes[i];
    return b;
}

uint64_t emb_cache_index_bytes(const emb_cache *c)
{
    uint64_t b = 0;
    for (int i = 0; i < c->n_tables; i++) b += emb_table_index_bytes(c->tab[i]);
    return b;
}

uint64_t emb_cache_scratch_bytes(const emb_cache *c)
{
    uint64_t b = c->scr_cap;
    for (int i = 0; i < c->n_tables; i++) b += c->keep_cap[i];
    return b;
}

uint64_t emb_cache_rows(const emb_cache *c)
{
    uint64_t n = 0;
    for (int i = 0; i < c->n_tables; i++) n += emb_table_rows(c->tab[i]);
    return n;
}

void emb_cache_keys(const emb_cache *c, const sample_block *b, key_vec *out)
{
    emb_cache_part(c, b, NULL, 0, b->rows, b->rows ? b->rows : 1, UINT64_MAX, out, NULL, NULL);
}

/* Add key to v unless the set x over v's keys holds it (x grows at load 1/2, its 4-byte slots
 * index v): 1 if it was new. */
static int part_add(key_index *x, key_vec *v, uint64_t key)
{
    if ((v->n + 1) * 2 > x->cap) {   /* grown tables come back empty: index v's keys again */
        key_index_reserve(x, x->cap ? x->cap : 512);
        for (size_t i = 0; i < v->n; i++) *key_index_slot(x, v->k, v->k[i]) = (uint32_t)i + 1;
    }
    uint32_t *slot = key_index_slot(x, v->k, key);
    if (*slot) return 0;
    key_vec_push(v, key);
    *slot = (uint32_t)v->n;
    return 1;
}

/* A key occurrence of a part's rows, gathered in row order (part_keys) */
typedef struct emb_part_key {
    uint64_t key;
    int tb;
} part_key;

/* The keys of rows order[i0..i1) (order NULL: i0..i1) into q (grown as needed: *cap), in their
 * order, each row's keys on their way AHEAD rows before it is read: the order is a shuffle, so a
 * row's keys are a miss each, and its row_ptr entry one more. Returns how many. */
static size_t part_keys(const emb_cache *c, const sample_block *b, const size_t *order, size_t i0, size_t i1,
                        size_t n_all, part_key **q, size_t *cap)
{
    enum { AHEAD = 8 };
    size_t n = 0;
    for (size_t i = i0; i < i1; i++) {
        if (i + 2 * AHEAD < n_all) __builtin_prefetch(&b->row_ptr[order ? order[i + 2 * AHEAD] : i + 2 * AHEAD]);
        if (i + AHEAD < n_all) {
            size_t r2 = order ? order[i + AHEAD] : i + AHEAD;
            uint64_t k0 = b->row_ptr[r2], k1 = b->row_ptr[r2 + 1];
            for (uint64_t k = k0; k < k1; k += 8) __builtin_prefetch(&b->key[k]);
            for (uint64_t k = k0; k < k1; k += 32) __builtin_prefetch(&b->field[k]);
        }
        size_t r = order ? order[i] : i;
        uint64_t k0 = b->row_ptr[r], k1 = b->row_ptr[r + 1];
        if (n + (k1 - k0) > *cap) *q = xrealloc(*q, (*cap = 2 * (n + (k1 - k0))) * sizeof **q);
        for (uint64_t k = k0; k < k1; k++) {
            int tb = c->ftab[b->field[k]];
            if (tb >= 0) (*q)[n++] = (part_key){ b->key[k], tb };
        }
    }
    return n;
}

emb_part_sets *emb_part_sets_new(void) { return xcalloc(1, sizeof(emb_part_sets)); }

/* What s holds (not s itself) */
static void part_sets_release(emb_part_sets *s)
{
    for (int i = 0; i < s->n; i++) key_index_free(&s->sets[i]);
    free(s->sets);
    free(s->q);
}

void emb_part_sets_free(emb_part_sets *s)
{
    if (!s) return;
    part_sets_release(s);
    free(s);
}

size_t emb_cache_part(const emb_cache *c, const sample_block *b, const size_t *order, size_t lo, size_t hi, size_t batch,
                      uint64_t cap, key_vec *out, uint64_t *bytes_out, emb_part_sets *keep)
{
    /* the sets (4 bytes a slot: a pass's keys are millions) and the gathered keys: the caller's,
     * kept from part to part (fresh pages each part were a third of the time), or this call's */
    emb_part_sets own = { 0 }, *ps = keep ? keep : &own;
    if (ps->n < c->n_tables) {
        ps->sets = xrealloc(ps->sets, (size_t)c->n_tables * sizeof *ps->sets);
        memset(ps->sets + ps->n, 0, (size_t)(c->n_tables - ps->n) * sizeof *ps->sets);
        ps->n = c->n_tables;
    }
    key_index *sets = ps->sets;
    for (int tb = 0; tb < c->n_tables; tb++)
        if (sets[tb].cap) memset(sets[tb].s, 0, sets[tb].cap * sizeof *sets[tb].s);
    size_t *mark = xmalloc((size_t)c->n_tables * sizeof *mark);
    memset(out, 0, (size_t)c->n_tables * sizeof *out);
    uint64_t bytes = 0;
    /* with admission, pending keys train their field's default row: it belongs to every pass */
    if (c->admission)
        for (uint32_t f = 0; f < c->n_fields; f++) {
            int tb = c->ftab[f];
            uint64_t dk = emb_table_default_key((uint16_t)f);
            if (tb >= 0 && part_add(&sets[tb], &out[tb], dk)) bytes += c->row_bytes[tb] + ROW_INDEX_BYTES;
        }
    /* each batch's keys gathered a few hundred rows at a time (they stay in the core's cache), then
     * added in that order with their set slots, then the keys those slots name, on their way AHEAD
     * and AHEAD / 2 keys before: the sets and key vectors are megabytes, each lookup a miss */
    enum { ROWS_AT_ONCE = 256, AHEAD = 32 };
    size_t pos = lo;
    while (pos < hi) {
        size_t end = hi - pos > batch ? pos + batch : hi;
        uint64_t add = 0;
        for (int tb = 0; tb < c->n_tables; tb++) mark[tb] = out[tb].n;
        for (size_t i0 = pos; i0 < end; i0 += ROWS_AT_ONCE) {
            size_t i1 = end - i0 > ROWS_AT_ONCE ? i0 + ROWS_AT_ONCE : end;
            size_t nq = part_keys(c, b, order, i0, i1, hi, &ps->q, &ps->q_cap);
            const part_key *q = ps->q;
            for (size_t j = 0; j < nq; j++) {
                if (j + AHEAD < nq) {
                    const key_index *x = &sets[q[j + AHEAD].tb];
                    if (x->cap) __builtin_prefetch(&x->s[mix64(q[j + AHEAD].key) & (x->cap - 1)]);
                }
                if (j + AHEAD / 2 < nq) {
                    const part_key *a = &q[j + AHEAD / 2];
                    const key_index *x = &sets[a->tb];
                    uint32_t v = x->cap ? x->s[mix64(a->key) & (x->cap - 1)] : 0;
                    if (v && v <= out[a->tb].n) __builtin_prefetch(&out[a->tb].k[v - 1]);
                }
                if (part_add(&sets[q[j].tb], &out[q[j].tb], q[j].key)) add += c->row_bytes[q[j].tb] + ROW_INDEX_BYTES;
            }
        }
        if (pos > lo && bytes + add > cap) {   /* the batch opens the next part (the sets are dropped) */
            for (int tb = 0; tb < c->n_tables; tb++) out[tb].n = mark[tb];
            break;
        }
        bytes += add;
        pos = end;
    }
    for (int i = 0; i < c->n_tables; i++) key_vec_fit(&out[i]);   /* kept while the part waits and trains: no headroom */
    if (!keep) part_sets_release(&own);
    free(mark);
    if (bytes_out) *bytes_out = bytes;
    return pos;
}

emb_fetch *emb_cache_missing(const emb_cache *c, const key_vec *keys)
{
    emb_fetch *f = xcalloc(1, sizeof *f);
    f->n_tables = c->n_tables;
    f->miss = xcalloc((size_t)c->n_tables, sizeof *f->miss);
    f->rec = xcalloc((size_t)c->n_tables, sizeof *f->rec);
    f->aux = xcalloc((size_t)c->n_tables, sizeof *f->aux);
    f->rows = xcalloc((size_t)c->n_tables, sizeof *f->rows);
    f->n_rows = xcalloc((size_t)c->n_tables, sizeof *f->n_rows);
    f->gen = xcalloc((size_t)c->n_tables, sizeof *f->gen);
    for (int tb = 0; tb < c->n_tables; tb++) {
        const emb_table *e = c->tab[tb];
        size_t nk = keys[tb].n;
        f->rows[tb] = xmalloc((nk ? nk : 1) * sizeof **f->rows);   /* a row for each key at most */
        f->gen[tb] = emb_table_generation(e);
        uint32_t *at = xmalloc((nk ? nk : 1) * sizeof *at);   /* row, or UINT32_MAX: absent */
        #pragma omp parallel for schedule(dynamic, 1)
        for (size_t c0 = 0; c0 < nk; c0 += FIND_CHUNK) {   /* the table is only read */
            int64_t r[FIND_CHUNK];
            size_t m = nk - c0 < FIND_CHUNK ? nk - c0 : FIND_CHUNK;
            emb_table_find_many(e, keys[tb].k + c0, m, r);
            for (size_t i = 0; i < m; i++) at[c0 + i] = r[i] < 0 ? UINT32_MAX : (uint32_t)r[i];
        }
        for (size_t i = 0; i < nk; i++) {
            if (at[i] == UINT32_MAX) key_vec_push(&f->miss[tb], keys[tb].k[i]);
            else f->rows[tb][f->n_rows[tb]++] = at[i];
        }
        free(at);
        f->aux[tb] = xcalloc(f->miss[tb].n ? f->miss[tb].n : 1, sizeof **f->aux);
    }
    return f;
}

int emb_fetch_run(emb_tier *tier, emb_fetch *f, char *err, size_t errlen)
{
    for (int tb = 0; tb < f->n_tables; tb++) {
        if (!f->miss[tb].n) continue;
        sort_u64(f->miss[tb].k, f->miss[tb].n);   /* in key order: lookups in a row share the index's blocks */
        if (emb_tier_fetch_packed(tier, tb, f->miss[tb].k, f->miss[tb].n, &f->rec[tb], f->aux[tb], err, errlen) < 0)
            return -1;
    }
    return 0;
}

void emb_fetch_free(emb_fetch *f)
{
    if (!f) return;
    for (int i = 0; i < f->n_tables; i++) {
        key_vec_free(&f->miss[i]);
        emb_tier_packed_free(&f->rec[i]);
        free(f->aux[i]);
        free(f->rows[i]);
    }
    free(f->miss), free(f->rec), free(f->aux), free(f->rows), free(f->n_rows), free(f->gen);
    free(f);
}

void emb_cache_count(const key_vec *keys, const emb_fetch *f, emb_cache_stats *st)
{
    for (int tb = 0; tb < f->n_tables; tb++) {
        st->mem_hits += keys[tb].n - f->miss[tb].n;
        for (size_t i = 0; i < f->miss[tb].n; i++) {
            if (f->aux[tb][i]) st->ssd_hits++;
            else st->new_keys++;
        }
    }
}

uint64_t emb_cache_fetch_bytes(const emb_cache *c, const emb_fetch *f)
{
    uint64_t b = 0;
    for (int tb = 0; tb < c->n_tables; tb++) b += f->miss[tb].n * (c->row_bytes[tb] + ROW_INDEX_BYTES);
    return b;
}

uint64_t emb_cache_install(emb_cache *c, emb_fetch *f)
{
    uint64_t coming = 0;
    for (int tb = 0; tb < c->n_tables; tb++) {
        emb_table *e = c->tab[tb];
        size_t n = f->miss[tb].n;
        uint64_t n_new = 0;
        uint32_t *row = xmalloc((n ? n : 1) * sizeof *row);   /* row + 1, 0: none */
        uint8_t *fill = xmalloc(n ? n : 1);
        #pragma omp parallel for schedule(dynamic, 1) reduction(+ : n_new)
        for (size_t c0 = 0; c0 < n; c0 += FIND_CHUNK) {   /* the table is only read */
            int64_t r[FIND_CHUNK];
            size_t m = n - c0 < FIND_CHUNK ? n - c0 : FIND_CHUNK;
            emb_table_find_many(e, f->miss[tb].k + c0, m, r);
            for (size_t i = 0; i < m; i++) {
                row[c0 + i] = r[i] < 0 ? 0 : (uint32_t)r[i] + 1;   /* created since the misses were listed */
                fill[c0 + i] = f->aux[tb][c0 + i] && r[i] < 0;
                n_new += !f->aux[tb][c0 + i] && r[i] < 0;   /* in neither: training creates it */
            }
        }
        coming += n_new * (c->row_bytes[tb] + ROW_INDEX_BYTES);
        /* rows claimed in key order on this thread (the same rows with any thread count), filled on
         * all: the keys are distinct, and nothing looks a key up until the loop ends */
        for (size_t i = 0; i < n; i++)
            if (fill[i]) row[i] = emb_table_claim(e) + 1;
        #pragma omp parallel for schedule(dynamic, 4096)
        for (size_t i = 0; i < n; i++) {
            if (!fill[i]) continue;
            /* the slot read holds the row as it is: it may leave memory unwritten */
            emb_table_fill_record(e, row[i] - 1, emb_tier_packed_rec(&f->rec[tb], i, c->row_bytes[tb]),
                                  f->aux[tb][i] | EMB_ROW_CLEAN);
        }
        emb_tier_packed_free(&f->rec[tb]);
        /* the part's rows now: those in memory when the misses were listed (if none moved since:
         * rows added do not move them) and these */
        if (f->gen[tb] == emb_table_generation(e)) {
            for (size_t i = 0; i < n; i++)
                if (row[i]) f->rows[tb][f->n_rows[tb]++] = row[i] - 1;
        } else {
            f->gen[tb] = UINT64_MAX;
        }
        free(row);
        free(fill);
    }
    return coming;
}

int emb_cache_pull(emb_cache *c, emb_tier *tier, const sample_block *b, char *err, size_t errlen)
{
    key_vec *keys = xcalloc((size_t)c->n_tables, sizeof *keys);
    emb_cache_keys(c, b, keys);
    emb_fetch *f = emb_cache_missing(c, keys);
    int ret = emb_fetch_run(tier, f, err, errlen);
    if (ret == 0) emb_cache_install(c, f);
    emb_fetch_free(f);
    for (int tb = 0; tb < c->n_tables; tb++) key_vec_free(&keys[tb]);
    free(keys);
    return ret;
}

/* ---- eviction ---- */

/* A row that may go, 16 bytes: the least (pri, ref) go first. pri is the policy's priority
 * above a tie-break: lru, the last pass seen, then 32 bits of the key's hash; lfu, the shows
 * (their float's bits, which order as the values do for values >= 0), then the last pass seen.
 * ref is 16 more bits of the hash, the table and the row. */
typedef struct {
    uint64_t pri;
    uint64_t ref;
} victim;

static victim victim_of(const emb_table_config *cfg, const emb_row_head *h, uint32_t pass, int lfu, int tb, uint32_t row)
{
    uint64_t hash = mix64(h->key), pri;
    if (lfu) {
        float show, click;
        emb_row_counters_at(cfg, h, pass, &show, &click);
        uint32_t bits;
        show = show > 0 ? show : 0;   /* -0 and NaN with 0 */
        memcpy(&bits, &show, sizeof bits);
        pri = (uint64_t)bits << 32 | h->last_pass;
    } else {
        pri = (uint64_t)h->last_pass << 32 | hash >> 32;
    }
    return (victim){ pri, (hash >> 16 & 0xffff) << 48 | (uint64_t)tb << 32 | row };
}

static int cmp_victim(const void *x, const void *y)
{
    const victim *a = x, *b = y;
    if (a->pri != b->pri) return a->pri < b->pri ? -1 : 1;
    return (a->ref > b->ref) - (a->ref < b->ref);
}

/* Reorder v so that its k smallest (cmp_victim) come first: quickselect with a three-way
 * partition around a median-of-three pivot (average linear time). */
static void select_smallest(victim *v, size_t n, size_t k)
{
    size_t lo = 0, hi = n;
    while (hi - lo > 1 && k > lo && k < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const victim *a = &v[lo], *b = &v[mid], *c = &v[hi - 1];
        victim p = cmp_victim(a, b) < 0 ? (cmp_victim(b, c) < 0 ? *b : cmp_victim(a, c) < 0 ? *c : *a)
                                        : (cmp_victim(a, c) < 0 ? *a : cmp_victim(b, c) < 0 ? *c : *b);
        size_t lt = lo, i = lo, gt = hi;   /* [lo, lt) < p, [lt, i) == p, [gt, hi) > p */
        while (i < gt) {
            int r = cmp_victim(&v[i], &p);
            victim t;
            if (r < 0) {
                t = v[lt], v[lt] = v[i], v[i] = t;
                lt++, i++;
            } else if (r > 0) {
                gt--;
                t = v[gt], v[gt] = v[i], v[i] = t;
            } else {
                i++;
            }
        }
        if (k <= lt) hi = lt;
        else if (k <= gt) return;
        else lo = gt;
    }
}

/* With more rows not kept than the threads' buffers hold, a thread keeps the victims it finds in
 * a buffer of twice the rows to drop and this many more; when it fills, the least of them stay,
 * and a row after them that is not less than the most of those is passed over */
#define VICTIMS_SLACK 16384

/* The `want` least victims (cmp_victim) of the n_free rows whose keep byte is 0, first in c's
 * scratch (in no order among them; the same ones whatever the threads); *n: their count, want or
 * fewer (every row not kept). The rows are scanned in chunks on every thread. A buffer for every
 * row not kept took 16 bytes a row at the process's peak (34 MB of scratch at a 1 GB budget,
 * where 6% of the rows go); where that is more than the threads' buffers, they hold the victims. */
static victim *least_victims(emb_cache *c, size_t want, size_t n_free, uint32_t pass, size_t *n)
{
    size_t nt = (size_t)omp_get_max_threads(), per = 2 * want + VICTIMS_SLACK;   /* a thread's buffer */
    int bounded = n_free > nt * per;
    victim *v = scratch(&c->scr, &c->scr_cap, (bounded ? nt * per : n_free ? n_free : 1) * sizeof *v);
    size_t *got = xcalloc(nt, sizeof *got), all = 0;
    victim *most = xmalloc(nt * sizeof *most);
    for (size_t t = 0; t < nt; t++) most[t] = (victim){ UINT64_MAX, UINT64_MAX };   /* none passed over yet */
    for (int tb = 0; tb < c->n_tables; tb++) {
        emb_table *e = c->tab[tb];
        const emb_table_config *cfg = emb_table_config_of(e);
        const uint8_t *keep = c->keep[tb];
        size_t rows = emb_table_rows(e), chunks = (rows + FIND_CHUNK - 1) / FIND_CHUNK;
        size_t *at = bounded ? NULL : xmalloc((chunks + 1) * sizeof *at);   /* each chunk's first victim */
        if (at) at[0] = all;
        for (size_t k = 0; k < chunks && at; k++) {
            size_t r1 = (k + 1) * FIND_CHUNK < rows ? (k + 1) * FIND_CHUNK : rows, m = 0;
            for (size_t r = k * FIND_CHUNK; r < r1; r++) m += !keep[r];
            at[k + 1] = at[k] + m;
        }
        #pragma omp parallel
        {
            size_t me = (size_t)omp_get_thread_num();
            victim *mine = v + me * per;
            #pragma omp for schedule(dynamic, 1)
            for (size_t k = 0; k < chunks; k++) {
                size_t r1 = (k + 1) * FIND_CHUNK < rows ? (k + 1) * FIND_CHUNK : rows, j = bounded ? got[me] : at[k];
                for (size_t r = k * FIND_CHUNK; r < r1; r++) {
                    if (r + ROW_AHEAD < r1 && !keep[r + ROW_AHEAD]) emb_table_prefetch_row(e, (uint32_t)(r + ROW_AHEAD));
                    if (keep[r]) continue;
                    victim x = victim_of(cfg, emb_table_head(e, (uint32_t)r), pass, c->lfu, tb, (uint32_t)r);
                    if (!bounded) {
                        v[j++] = x;
                        continue;
                    }
                    if (cmp_victim(&x, &most[me]) >= 0) continue;   /* `want` of this thread's are less */
                    mine[j++] = x;
                    if (j == per) {
                        select_smallest(mine, j, want);
                        j = want;
                        most[me] = mine[0];
                        for (size_t i = 1; i < j; i++)
                            if (cmp_victim(&mine[i], &most[me]) > 0) most[me] = mine[i];
                    }
                }
                if (bounded) got[me] = j;
            }
        }
        if (at) all = at[chunks];
        free(at);
    }
    if (bounded) {   /* each thread's least, together */
        for (size_t t = 0; t < nt; t++) {
            size_t k = got[t] < want ? got[t] : want;
            select_smallest(v + t * per, got[t], k);
            memmove(v + all, v + t * per, k * sizeof *v);
            all += k;
        }
    }
    free(got);
    free(most);
    select_smallest(v, all, want);
    *n = all;
    return v;
}

/* Table tb's rows that are not clean (and whose keep byte is 0, with keep) go to wb hot first,
 * cold after (buckets of show by its power of two; in row order within one). The slots a run of
 * them takes are then freed together when those keys come again, and whole runs of free slots are
 * written again, instead of holes between cold rows; and the rows most likely to be read back sit
 * together, so that one fetch read serves several of them. A byte a row in c's scratch holds its
 * bucket, and the rows go in chunks of a batch's seal (the same batch as one put of them all):
 * a pointer to every row to write was 8 bytes more a row, kept in the scratch from then on.
 * Returns the rows put; the bytes go to *bytes, and those with NaN or inf to *nonfinite (with
 * check: written all the same, the commit refuses them). */
static size_t put_in_order(emb_cache *c, emb_tier_batch *wb, int tb, const uint8_t *keep, int check,
                           uint64_t *bytes, size_t *nonfinite)
{
    enum { HOT = 40, NONE = 255 };
    emb_table *e = c->tab[tb];
    size_t rows = emb_table_rows(e), cnt[HOT] = { 0 }, first[HOT] = { 0 }, last[HOT] = { 0 };
    size_t bk_bytes = (rows + 7) / 8 * 8, chunk = rows < EMB_TIER_SEAL_PUTS ? rows : EMB_TIER_SEAL_PUTS;
    uint8_t *bk = scratch(&c->scr, &c->scr_cap, bk_bytes + (chunk ? chunk : 1) * sizeof(emb_row_head *));
    emb_row_head **o = (emb_row_head **)(bk + bk_bytes);
    for (size_t r = 0; r < rows; r++) {
        bk[r] = NONE;
        if (keep && keep[r]) continue;
        if (r + ROW_AHEAD < rows && !(keep && keep[r + ROW_AHEAD])) emb_table_prefetch_row(e, (uint32_t)(r + ROW_AHEAD));
        const emb_row_head *h = emb_table_head(e, (uint32_t)r);
        if (emb_row_clean(h)) continue;
        int x = 0;
        frexpf(h->show + 1.0f, &x);
        int b = HOT - (x < 1 ? 1 : x > HOT ? HOT : x);
        bk[r] = (uint8_t)b;
        if (!cnt[b]++) first[b] = r;
        last[b] = r;
    }
    size_t m = 0, n = 0;
    for (int b = 0; b < HOT; b++) {
        if (!cnt[b]) continue;
        for (size_t r = first[b]; r <= last[b]; r++) {
            if (bk[r] != b) continue;
            o[n++] = emb_table_head(e, (uint32_t)r);
            if (n == chunk) {
                *bytes += emb_tier_put_rows(wb, tb, (void *const *)o, n, check ? e : NULL, nonfinite);
                m += n, n = 0;
            }
        }
    }
    if (n) *bytes += emb_tier_put_rows(wb, tb, (void *const *)o, n, check ? e : NULL, nonfinite);
    return m + n;
}

/* Write the rows of table tb whose keep byte is 0 and that are not clean into wb, before they
 * leave memory; their count with NaN or inf goes to st. */
static void write_back(emb_cache *c, emb_tier_batch *wb, int tb, const uint8_t *keep, emb_cache_stats *st)
{
    size_t bad = 0;
    st->written += put_in_order(c, wb, tb, keep, 1, &st->written_bytes, &bad);
    st->nonfinite += bad;
}

/* The pins' fetches whose rows name table tb's rows as they are */
static int pin_rows_hold(const emb_pins *pn, const emb_table *e, int tb)
{
    return pn->f && pn->f->gen[tb] == emb_table_generation(e);
}

uint64_t emb_cache_evict(emb_cache *c, const emb_pins *pins, int n_pins, uint64_t coming, uint32_t pass,
                         emb_tier_batch *wb, emb_cache_stats *st)
{
    CHECK(n_pins >= 0 && n_pins < 32);   /* a bit each below */
    uint64_t used = emb_cache_bytes(c) + emb_cache_rows(c) * ROW_INDEX_BYTES + coming;
    if (used <= c->budget) return 0;
    /* keep[tb][row]: pinned first (the part's and the next part's keys), then every row but the
     * victims; valid while no row moves */
    uint8_t **keep = c->keep;
    uint64_t unpinned = 0;
    size_t n_free = 0;
    for (int tb = 0; tb < c->n_tables; tb++) {
        emb_table *e = c->tab[tb];
        size_t rows = emb_table_rows(e);
        uint8_t *p = scratch((void **)&keep[tb], &c->keep_cap[tb], rows ? rows : 1);
        memset(p, 0, rows);
        for (int l = 0; l < n_pins; l++) {
            if (pin_rows_hold(&pins[l], e, tb)) {   /* no lookups: the fetch has the rows */
                const emb_fetch *f = pins[l].f;
                for (size_t i = 0; i < f->n_rows[tb]; i++) {
                    CHECK(f->rows[tb][i] < rows);
                    p[f->rows[tb][i]] = 1;
                }
                continue;
            }
            const key_vec *pv = &pins[l].keys[tb];
            #pragma omp parallel for schedule(dynamic, 1)
            for (size_t c0 = 0; c0 < pv->n; c0 += FIND_CHUNK) {
                int64_t r[FIND_CHUNK];
                size_t m = pv->n - c0 < FIND_CHUNK ? pv->n - c0 : FIND_CHUNK;
                emb_table_find_many(e, pv->k + c0, m, r);
                for (size_t i = 0; i < m; i++)
                    if (r[i] >= 0) p[r[i]] = 1;
            }
        }
        size_t n_unpinned = 0;
        for (size_t r = 0; r < rows; r++) n_unpinned += !p[r];
        unpinned += n_unpinned * (c->row_bytes[tb] + ROW_INDEX_BYTES);
        n_free += n_unpinned;
    }
    uint64_t over = used - unpinned > c->budget ? used - unpinned - c->budget : 0;
    /* when every unpinned row must go (the pass's rows fill the budget), no ordering is needed */
    if (used - unpinned < c->budget) {
        /* only the rows to drop need choosing: the `want` least shown; with rows of one size they
         * all go, with several the least shown of them first */
        size_t rb0 = c->row_bytes[0] + ROW_INDEX_BYTES, want = (size_t)((used - c->budget + rb0 - 1) / rb0);
        int mixed = 0;
        for (int tb = 1; tb < c->n_tables; tb++) {
            mixed |= c->row_bytes[tb] != c->row_bytes[0];
            if (c->row_bytes[tb] < c->row_bytes[0]) want = (size_t)((used - c->budget) / (c->row_bytes[tb] + ROW_INDEX_BYTES)) + 1;
        }
        size_t n;
        victim *v = least_victims(c, want, n_free, pass, &n);
        if (want > n) want = n;
        if (want && mixed) qsort(v, want, sizeof *v, cmp_victim);
        for (int tb = 0; tb < c->n_tables; tb++) memset(keep[tb], 1, emb_table_rows(c->tab[tb]));
        for (size_t i = 0; i < want && used > c->budget; i++) {
            int tb = (int)(v[i].ref >> 32 & 0xffff);
            keep[tb][(uint32_t)v[i].ref] = 0;
            used -= c->row_bytes[tb] + ROW_INDEX_BYTES;
        }
    }
    /* the rows not kept go: those changed since their copy in the tier are written first; the
     * pins' rows follow theirs */
    for (int tb = 0; tb < c->n_tables; tb++) {
        emb_table *e = c->tab[tb];
        if (wb) write_back(c, wb, tb, keep[tb], st);
        int follow = 0;
        for (int l = 0; l < n_pins; l++) follow |= pin_rows_hold(&pins[l], e, tb) << l;
        uint32_t *moved = follow ? scratch(&c->scr, &c->scr_cap, (emb_table_rows(e) + 1) * sizeof *moved) : NULL;
        st->evicted += emb_table_keep_rows(e, keep[tb], moved);
        for (int l = 0; l < n_pins; l++) {
            emb_fetch *f = pins[l].f;
            if (!(follow >> l & 1) || f->gen[tb] == emb_table_generation(e)) continue;   /* (a fetch pinned twice) */
            for (size_t i = 0; i < f->n_rows[tb]; i++) f->rows[tb][i] = moved[f->rows[tb][i]];
            f->gen[tb] = emb_table_generation(e);
        }
        emb_table_trim(e);
    }
    return over;
}

/* ---- the rows a commit writes ---- */

size_t emb_cache_dirty(const emb_cache *c, size_t *nonfinite)
{
    size_t dirty = 0, bad = 0;
    for (int tb = 0; tb < c->n_tables; tb++) {
        emb_table *e = c->tab[tb];
        size_t rows = emb_table_rows(e);
        #pragma omp parallel for schedule(dynamic, 4096) reduction(+ : dirty, bad)
        for (size_t r = 0; r < rows; r++) {
            const emb_row_head *h = emb_table_head(e, (uint32_t)r);
            if (emb_row_clean(h)) continue;
            dirty++;
            if (nonfinite) bad += !emb_row_finite(e, h);
        }
    }
    if (nonfinite) *nonfinite = bad;
    return dirty;
}

size_t emb_cache_put_dirty(emb_cache *c, emb_tier_batch *b, uint64_t *bytes)
{
    size_t n = 0;
    for (int tb = 0; tb < c->n_tables; tb++) n += put_in_order(c, b, tb, NULL, 0, bytes, NULL);
    return n;
}

void emb_cache_moved(void *ctx, int tb, uint64_t key, uint64_t slot1)
{
    emb_cache *c = ctx;
    int64_t r = emb_table_find(c->tab[tb], key);
    if (r < 0) return;
    emb_row_head *h = emb_table_head(c->tab[tb], (uint32_t)r);
    h->aux = slot1 | (h->aux & EMB_ROW_CLEAN);   /* the same bytes, elsewhere */
}
