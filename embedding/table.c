/*
 * table.c: the in-memory sparse table (see table.h).
 *
 * Index: power-of-two array of {key, row + 1} (0 = empty), load factor at most 1/2, grown by
 * doubling. Slab: rows * row_bytes, grown by doubling. Pending (not yet admitted) keys: a second
 * index of {key, show, click} (exact, admit_bytes 0), or a count-min sketch of a fixed size.
 */
#include "table.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>   /* madvise */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../io/keymap.h"
#include "../io/util.h"

#define SKETCH_D 4   /* rows of the admission sketch */

/* a key waiting for admission: its slot in the pending map, the value holding the two counters */
typedef struct {
    uint64_t key;
    float show, click;
} pending;
_Static_assert(sizeof(pending) == sizeof(key_slot), "a pending entry is a key_slot");

struct emb_table {
    emb_table_config c;
    int V, S;
    size_t row_bytes;
    uint8_t *slab;
    size_t rows, cap_rows;
    key_map idx;            /* key -> row + 1 */
    key_map pend;           /* key -> pending counters (show, click as the value's two halves) */
    key_map dead;           /* key -> 1 + the pass shrink last deleted it at (the deltas' deletions) */
    uint8_t *sk;            /* the admission sketch: SKETCH_D rows of sk_w cells (show, click), or NULL */
    uint32_t sk_w;          /* cells a row, a power of two */
    uint32_t sk_cb;         /* bytes a cell: 1, 2 or 4 (counts of 4, 8 or 16 bits: to min_show, no further) */
    uint32_t dead_from;     /* deletions are recorded from this pass on (UINT32_MAX: none known) */
    uint64_t gen;           /* emb_table_generation */
};

emb_table *emb_table_create(const emb_table_config *c)
{
    emb_table *t = xcalloc(1, sizeof *t);
    t->c = *c;
    t->V = c->dim + (c->has_w ? 1 : 0);
    t->S = sparse_opt_state_floats(c->opt.kind, t->V);
    /* rounded to 8 bytes so every record's header is aligned */
    t->row_bytes = (sizeof(emb_row_head) + (size_t)(t->V + t->S) * sizeof(float) + 7) & ~(size_t)7;
    key_map_init(&t->idx, 1024);
    if (c->min_show > 1 && c->admit_bytes) {
        t->sk_cb = c->min_show <= 15 ? 1 : c->min_show <= 255 ? 2 : 4;
        t->sk_w = 1024;
        while ((uint64_t)t->sk_w * 2 * SKETCH_D * t->sk_cb <= c->admit_bytes && t->sk_w < (1u << 30)) t->sk_w *= 2;
        t->sk = xcalloc((size_t)SKETCH_D * t->sk_w, t->sk_cb);
    }
    return t;
}

size_t emb_table_sketch_bytes(const emb_table *t) { return t->sk ? (size_t)SKETCH_D * t->sk_w * t->sk_cb : 0; }

void emb_table_destroy(emb_table *t)
{
    if (!t) return;
    free(t->slab);
    key_map_free(&t->idx);
    key_map_free(&t->pend);
    key_map_free(&t->dead);
    free(t->sk);
    free(t);
}

const emb_table_config *emb_table_config_of(const emb_table *t) { return &t->c; }
int emb_table_values(const emb_table *t) { return t->V; }
int emb_table_state_floats(const emb_table *t) { return t->S; }
size_t emb_table_row_bytes(const emb_table *t) { return t->row_bytes; }
size_t emb_table_rows(const emb_table *t) { return t->rows; }
uint64_t emb_table_generation(const emb_table *t) { return t->gen; }

size_t emb_table_index_bytes(const emb_table *t) { return (t->idx.cap + t->pend.cap) * sizeof(key_slot); }

emb_row_head *emb_table_head(emb_table *t, uint32_t row) { return (emb_row_head *)(t->slab + (size_t)row * t->row_bytes); }
float *emb_table_vals(emb_table *t, uint32_t row) { return (float *)(t->slab + (size_t)row * t->row_bytes + sizeof(emb_row_head)); }
float *emb_table_state(emb_table *t, uint32_t row) { return emb_table_vals(t, row) + t->V; }

/* A test of each float, ORed, in vectors (O3): each eviction's and commit's row is checked, and a
 * sum of v * 0 (NaN or inf anywhere made it NaN) waited for one add after another */
__attribute__((optimize("O3"))) int emb_row_finite(const emb_table *t, const emb_row_head *h)
{
    const float *v = (const float *)(h + 1);
    int bad = !(fabsf(h->show) <= FLT_MAX) | !(fabsf(h->click) <= FLT_MAX);   /* NaN and inf fail */
    for (int i = 0; i < t->V + t->S; i++) bad |= !(fabsf(v[i]) <= FLT_MAX);
    return !bad;
}

int64_t emb_table_first_nonfinite(const emb_table *t)
{
    for (size_t r = 0; r < t->rows; r++)
        if (!emb_row_finite(t, (const emb_row_head *)(t->slab + r * t->row_bytes))) return (int64_t)r;
    return -1;
}

int64_t emb_table_find(const emb_table *t, uint64_t key) { return (int64_t)key_map_get(&t->idx, key) - 1; }

void emb_table_find_many(const emb_table *t, const uint64_t *keys, size_t n, int64_t *rows)
{
    /* each lookup is a cache miss in an index of megabytes: the slots of the lookups AHEAD
     * further are on their way meanwhile (the end-to-end bench's boundary lookups: 1.11 -> 0.88 s
     * for the pins, 0.69 -> 0.45 s for the misses, docs/performance.md) */
    enum { AHEAD = 12 };
    for (size_t i = 0; i < n && i < AHEAD; i++) key_map_prefetch(&t->idx, keys[i]);
    for (size_t i = 0; i < n; i++) {
        if (i + AHEAD < n) key_map_prefetch(&t->idx, keys[i + AHEAD]);
        rows[i] = (int64_t)key_map_get(&t->idx, keys[i]) - 1;
    }
}

/* normal(0,1) from two hashes */
static float gauss(uint64_t a, uint64_t b)
{
    double u = ((double)(a >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double v = ((double)(b >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

static void init_row(emb_table *t, uint32_t row, uint64_t key)
{
    emb_row_head *h = emb_table_head(t, row);
    memset(h, 0, t->row_bytes);   /* padding included, so saved tables are byte-for-byte reproducible */
    h->key = key;
    float *v = emb_table_vals(t, row);
    int off = 0;
    if (t->c.has_w) v[off++] = 0.0f;
    for (int d = 0; d < t->c.dim; d++) {
        uint64_t in[2] = { key, (uint64_t)d };
        uint64_t a = XXH3_64bits_withSeed(in, sizeof in, t->c.seed);
        if (t->c.init_uniform) {
            double u = ((double)(a >> 11) + 0.5) * (1.0 / 9007199254740992.0);
            v[off + d] = (float)((2 * u - 1) * t->c.init_std);
        } else {
            uint64_t b = XXH3_64bits_withSeed(in, sizeof in, t->c.seed ^ 0x9e3779b97f4a7c15ull);
            v[off + d] = t->c.init_std * gauss(a, b);
        }
    }
    sparse_opt_init_state(&t->c.opt, v + t->V, t->V);
}

uint32_t emb_table_get(emb_table *t, uint64_t key)
{
    int64_t r = emb_table_find(t, key);
    return r >= 0 ? (uint32_t)r : emb_table_insert(t, key);
}

uint32_t emb_table_claim(emb_table *t)
{
    if ((t->rows + 1) * 2 > t->idx.cap) key_map_rehash(&t->idx, t->idx.cap * 2);   /* claimed rows count: the index has room for them */
    if (t->rows == t->cap_rows) {
        t->cap_rows = t->cap_rows ? t->cap_rows * 2 : 1024;
        t->slab = xrealloc(t->slab, t->cap_rows * t->row_bytes);
    }
    CHECK(t->rows < UINT32_MAX);
    return (uint32_t)t->rows++;
}

void emb_table_fill(emb_table *t, uint32_t row, uint64_t key)
{
    key_map_put_shared(&t->idx, key, (uint64_t)row + 1);
    init_row(t, row, key);
}

uint32_t emb_table_insert(emb_table *t, uint64_t key)
{
    uint32_t row = emb_table_claim(t);
    emb_table_fill(t, row, key);
    return row;
}

uint64_t emb_table_default_key(uint16_t field)
{
    static const char tag[] = "ctrbox:field-default";
    return XXH3_64bits_withSeed(tag, sizeof tag - 1, (uint64_t)field + 0x10000);
}

/* pending index: open addressing on pend[], load at most 1/2. An entry whose show is ADMITTED
 * is a tombstone: its key got its row and nothing is pending for it (the slot stays so that
 * probing needs no deletion; growth drops it). A key is pending exactly while it has an entry with
 * show > 0, whatever tier its row or its neighbours live in: the state a commit saves. */
#define ADMITTED (-1.0f)
static pending *pend_find(const emb_table *t, uint64_t key)
{
    if (!t->pend.cap) return NULL;
    key_slot *k = key_map_slot(&t->pend, key);
    return k->val ? (pending *)k : NULL;
}

static pending *pend_add(emb_table *t, uint64_t key)
{
    if (!t->pend.cap || (t->pend.n + 1) * 2 > t->pend.cap) {   /* rebuilt without tombstones, at most a quarter full */
        size_t live = 0, cap = 1024;
        for (size_t i = 0; i < t->pend.cap; i++) live += ((pending *)&t->pend.s[i])->show > 0;
        while (cap < (live + 1) * 4) cap *= 2;
        key_map n;
        key_map_init(&n, cap);
        for (size_t i = 0; i < t->pend.cap; i++)
            if (((pending *)&t->pend.s[i])->show > 0) key_map_put_new(&n, t->pend.s[i].key, t->pend.s[i].val);
        key_map_free(&t->pend);
        n.n = live;
        t->pend = n;
    }
    pending *p = (pending *)key_map_slot(&t->pend, key);   /* empty: its counters are 0 */
    p->key = key;
    t->pend.n++;
    return p;
}

/* The admission sketch (count-min, conservative update): each key has a cell in each of SKETCH_D
 * rows, a cell holds a show count (low half) and a click count (high half), each saturating at the
 * half's largest value, which is at least min_show: a key's counts below min_show are kept whole.
 * A key's counts are the smallest of its cells'; an update raises only the cells below the new
 * count, so a key is over-counted only where every one of its cells is shared with keys counted
 * higher: it may be admitted early, never late. Counts are not taken out when a key is admitted
 * (that would lower the keys sharing a cell with it): a key whose row shrink deletes is admitted
 * again at its next show, where exact counts start it over. */
static void sketch_cells(const emb_table *t, uint64_t key, size_t *cell)
{
    XXH128_hash_t h = XXH3_128bits_withSeed(&key, sizeof key, t->c.seed);
    uint32_t part[4] = { (uint32_t)h.low64, (uint32_t)(h.low64 >> 32), (uint32_t)h.high64, (uint32_t)(h.high64 >> 32) };
    for (int i = 0; i < SKETCH_D; i++) cell[i] = (size_t)i * t->sk_w + (part[i] & (t->sk_w - 1));
}

static uint32_t cell_get(const emb_table *t, size_t i)
{
    if (t->sk_cb == 1) return t->sk[i];
    if (t->sk_cb == 2) return ((const uint16_t *)(const void *)t->sk)[i];
    return ((const uint32_t *)(const void *)t->sk)[i];
}

static void cell_set(emb_table *t, size_t i, uint32_t v)
{
    if (t->sk_cb == 1) t->sk[i] = (uint8_t)v;
    else if (t->sk_cb == 2) ((uint16_t *)(void *)t->sk)[i] = (uint16_t)v;
    else ((uint32_t *)(void *)t->sk)[i] = v;
}

/* Raise key's cells to show and click (saturating). */
static void sketch_raise(emb_table *t, const size_t *cell, uint64_t show, uint64_t click)
{
    uint32_t bits = t->sk_cb * 4, max = (1u << bits) - 1;
    uint32_t ns = show > max ? max : (uint32_t)show, nc = click > max ? max : (uint32_t)click;
    for (int i = 0; i < SKETCH_D; i++) {
        uint32_t v = cell_get(t, cell[i]), cs = v & max, cc = v >> bits;
        cell_set(t, cell[i], (cs > ns ? cs : ns) | (cc > nc ? cc : nc) << bits);
    }
}

/* Count shows and clicks of key: its counts after them (*show, *click), and whether they admit it. */
static int sketch_count(emb_table *t, uint64_t key, uint32_t shows, uint32_t clicks, uint64_t *show, uint64_t *click)
{
    size_t cell[SKETCH_D];
    uint32_t bits = t->sk_cb * 4, max = (1u << bits) - 1, s = max, c = max;
    sketch_cells(t, key, cell);
    for (int i = 0; i < SKETCH_D; i++) {
        uint32_t v = cell_get(t, cell[i]);
        if ((v & max) < s) s = v & max;
        if ((v >> bits) < c) c = v >> bits;
    }
    uint64_t ns = (uint64_t)s + shows, nc = (uint64_t)c + clicks;
    *show = ns;
    *click = nc < ns ? nc : ns;
    sketch_raise(t, cell, ns, nc);
    return ns >= t->c.min_show;
}

uint32_t emb_table_touch_n(emb_table *t, uint64_t key, uint16_t field, uint32_t shows, uint32_t clicks, uint32_t pass)
{
    return emb_table_touch_found(t, key, emb_table_find(t, key), field, shows, clicks, pass);
}

/* Count shows and clicks of a key waiting for admission, in the sketch or exactly: whether they
 * admit it, and then its counts gathered so far (these included), which its row starts with. */
static int pending_count(emb_table *t, uint64_t key, uint32_t shows, uint32_t clicks, float *show, float *click)
{
    if (t->sk) {
        uint64_t s, c;
        int admit = sketch_count(t, key, shows, clicks, &s, &c);
        *show = (float)s;
        *click = (float)c;
        return admit;
    }
    pending *p = pend_find(t, key);
    if (!p) p = pend_add(t, key);
    if (p->show == ADMITTED) p->show = 0, p->click = 0;   /* its row was deleted (shrink): it starts over */
    p->show += (float)shows;
    p->click += (float)clicks;
    if (p->show < (float)t->c.min_show) return 0;
    *show = p->show;
    *click = p->click;
    p->show = ADMITTED;
    p->click = 0;
    return 1;
}

uint32_t emb_table_touch_found(emb_table *t, uint64_t key, int64_t r, uint16_t field, uint32_t shows,
                               uint32_t clicks, uint32_t pass)
{
    if (r < 0 && t->c.min_show > 1) {
        float show, click;
        if (!pending_count(t, key, shows, clicks, &show, &click)) {   /* it trains its field's default row */
            uint32_t d = emb_table_get(t, emb_table_default_key(field));
            emb_row_count(&t->c, emb_table_head(t, d), (float)shows, (float)clicks, pass);
            return d;
        }
        uint32_t row = emb_table_get(t, key);   /* admitted, with the counts gathered so far */
        emb_row_head *h = emb_table_head(t, row);
        h->show = show;
        h->click = click;
        h->last_pass = pass;
        return row;
    }
    uint32_t row = r >= 0 ? (uint32_t)r : emb_table_insert(t, key);
    emb_row_count(&t->c, emb_table_head(t, row), (float)shows, (float)clicks, pass);
    return row;
}

int64_t emb_table_admit(emb_table *t, uint64_t key, uint32_t shows, uint32_t clicks, uint32_t pass)
{
    int64_t r = emb_table_find(t, key);
    if (r >= 0) return r;
    if (t->c.min_show <= 1) return emb_table_get(t, key);
    float show, click;
    if (!pending_count(t, key, shows, clicks, &show, &click)) return -1;
    uint32_t row = emb_table_get(t, key);
    emb_row_head *h = emb_table_head(t, row);   /* the counts before these, which the caller counts */
    h->show = show - (float)shows;
    h->click = click - (float)clicks;
    h->last_pass = pass;
    return row;
}

size_t emb_table_pending_entries(const emb_table *t, uint64_t **keys, float **counts)
{
    size_t n = 0;
    for (size_t i = 0; i < t->pend.cap; i++) n += ((const pending *)&t->pend.s[i])->show > 0;
    *keys = xmalloc((n ? n : 1) * sizeof **keys);
    *counts = xmalloc((n ? n : 1) * 2 * sizeof **counts);
    n = 0;
    for (size_t i = 0; i < t->pend.cap; i++) {
        const pending *p = (const pending *)&t->pend.s[i];
        if (!(p->show > 0)) continue;
        (*keys)[n] = p->key;
        (*counts)[2 * n] = p->show;
        (*counts)[2 * n + 1] = p->click;
        n++;
    }
    return n;
}

void emb_table_pending_clear(emb_table *t)
{
    key_map_free(&t->pend);
    memset(&t->pend, 0, sizeof t->pend);
}

void emb_table_pending_put(emb_table *t, uint64_t key, float show, float click)
{
    CHECK(show > 0 && !t->sk);
    pending *p = pend_find(t, key);
    if (!p) p = pend_add(t, key);
    p->show = show;
    p->click = click;
}

uint32_t emb_table_touch(emb_table *t, uint64_t key, uint16_t field, int click, uint32_t pass)
{
    return emb_table_touch_n(t, key, field, 1, click ? 1 : 0, pass);
}

void emb_table_prefetch(const emb_table *t, uint64_t key) { key_map_prefetch(&t->idx, key); }

void emb_table_prefetch_row(const emb_table *t, uint32_t row)
{
    __builtin_prefetch(t->slab + (size_t)row * t->row_bytes);
}

int64_t emb_table_lookup(const emb_table *t, uint64_t key, uint16_t field)
{
    int64_t r = emb_table_find(t, key);
    if (r >= 0 || t->c.min_show <= 1) return r;
    return emb_table_find(t, emb_table_default_key(field));
}

float emb_decay_factor(float decay, uint32_t last_pass, uint32_t pass)
{
    return decay > 0 && decay < 1 && pass > last_pass ? powf(decay, (float)(pass - last_pass)) : 1;
}

void emb_row_count(const emb_table_config *c, emb_row_head *h, float shows, float clicks, uint32_t pass)
{
    if (c->decay > 0 && c->decay < 1 && pass > h->last_pass && (h->show != 0 || h->click != 0)) {
        float f = emb_decay_factor(c->decay, h->last_pass, pass);
        h->show *= f;
        h->click *= f;
    }
    h->show += shows;
    h->click += clicks;
    h->last_pass = pass;
    h->aux &= ~EMB_ROW_CLEAN;
}

void emb_row_counters_at(const emb_table_config *c, const emb_row_head *h, uint32_t pass, float *show, float *click)
{
    float f = emb_decay_factor(c->decay, h->last_pass, pass);
    *show = h->show * f;
    *click = h->click * f;
}

uint32_t emb_table_insert_record(emb_table *t, const void *rec, uint64_t aux)
{
    uint32_t row = emb_table_claim(t);   /* not initialised: the record overwrites every byte */
    emb_table_fill_record(t, row, rec, aux);
    return row;
}

void emb_table_fill_record(emb_table *t, uint32_t row, const void *rec, uint64_t aux)
{
    key_map_put_shared(&t->idx, ((const emb_row_head *)rec)->key, (uint64_t)row + 1);
    memcpy(emb_table_head(t, row), rec, t->row_bytes);
    emb_table_head(t, row)->mark = 0;
    emb_table_head(t, row)->aux = aux;
}

void emb_table_remove(emb_table *t, uint32_t row)
{
    CHECK(row < t->rows);
    t->gen++;
    key_map_del(&t->idx, emb_table_head(t, row)->key);
    uint32_t last = (uint32_t)(t->rows - 1);
    if (row != last) {
        memcpy(emb_table_head(t, row), emb_table_head(t, last), t->row_bytes);
        key_map_slot(&t->idx, emb_table_head(t, row)->key)->val = (uint64_t)row + 1;
    }
    t->rows--;
}

size_t emb_table_keep_rows(emb_table *t, const uint8_t *keep, uint32_t *moved_to)
{
    size_t gone = 0;
    for (size_t r = 0; r < t->rows; r++) gone += !keep[r];
    t->gen++;
    if (gone * 2 <= t->rows) {
        /* up to half go (a part's eviction: 28% of the rows in the end-to-end bench): the last kept
         * rows fill the places of those that went, and only the keys that went or moved are
         * touched in the index, in batches with their slots on their way (AHEAD ahead), instead of
         * moving every row after the first hole and building the index again */
        enum { AHEAD = 12 };
        uint64_t *del = xmalloc((gone ? gone : 1) * sizeof *del);   /* the keys that go */
        uint32_t *at = xmalloc((gone ? gone : 1) * sizeof *at);     /* the places rows moved to */
        size_t nd = 0, nm = 0;
        if (moved_to)
            for (size_t r = 0; r < t->rows; r++) moved_to[r] = (uint32_t)r;
        size_t w = t->rows;   /* rows [0, w) are still to place */
        for (size_t r = 0; r < w; r++) {
            if (keep[r]) continue;
            del[nd++] = emb_table_head(t, (uint32_t)r)->key;
            while (w > r + 1 && !keep[w - 1]) del[nd++] = emb_table_head(t, (uint32_t)--w)->key;
            if (--w > r) {   /* row w is kept: it takes r's place */
                memcpy(emb_table_head(t, (uint32_t)r), emb_table_head(t, (uint32_t)w), t->row_bytes);
                at[nm++] = (uint32_t)r;
                if (moved_to) moved_to[w] = (uint32_t)r;
            }
        }
        t->rows = w;
        for (size_t i = 0; i < nd; i++) {
            if (i + AHEAD < nd) key_map_prefetch_put(&t->idx, del[i + AHEAD]);
            key_map_del(&t->idx, del[i]);
        }
        for (size_t i = 0; i < nm; i++) {
            if (i + AHEAD < nm) key_map_prefetch_put(&t->idx, emb_table_head(t, at[i + AHEAD])->key);
            key_map_slot(&t->idx, emb_table_head(t, at[i])->key)->val = (uint64_t)at[i] + 1;
        }
        free(del);
        free(at);
        return gone;
    }
    size_t w = 0;
    for (size_t r = 0; r < t->rows; r++) {
        emb_row_head *h = emb_table_head(t, (uint32_t)r);
        if (!keep[r]) continue;
        if (w != r) memcpy(emb_table_head(t, (uint32_t)w), h, t->row_bytes);
        if (moved_to) moved_to[r] = (uint32_t)w;
        w++;
    }
    size_t removed = t->rows - w;
    t->rows = w;
    /* the index again, on every thread (distinct keys), each slot on its way AHEAD rows before:
     * a put's compare-and-swap on a slot not in the cache waits with nothing else under way */
    key_map_clear(&t->idx);
    enum { AHEAD = 12 };
    #pragma omp parallel for schedule(dynamic, 4096)
    for (size_t r = 0; r < w; r++) {
        if (r + AHEAD < w) key_map_prefetch_put(&t->idx, emb_table_head(t, (uint32_t)(r + AHEAD))->key);
        key_map_put_shared(&t->idx, emb_table_head(t, (uint32_t)r)->key, (uint64_t)r + 1);
    }
    return removed;
}

static int cmp_pending(const void *x, const void *y)
{
    uint64_t a = ((const pending *)x)->key, b = ((const pending *)y)->key;
    return (a > b) - (a < b);
}

static int put_pending(const emb_table *t, FILE *f, XXH64_state_t *st, int sorted);

/* The keys waiting for admission (not admitted since), as u64 count then entries, into the
 * running checksum; then the checksum. Shared by the table section and the pending blob. The
 * table section writes them in key order, so that a model file's bytes do not depend on the map's
 * history (a table loaded and trained on saves what one never saved would); the commit's blob,
 * written each pass, keeps the map's order. */
static int put_dead(const emb_table *t, FILE *f, XXH64_state_t *st);

static int put_pending_and_sum(const emb_table *t, FILE *f, XXH64_state_t *st, int sorted, int with_dead)
{
    int ok = put_pending(t, f, st, sorted) == 0;
    ok = ok && (!with_dead || put_dead(t, f, st) == 0);
    /* the admission sketch: u64 cells a row (0: none), u64 bytes a cell, then its rows of cells */
    uint64_t w[2] = { t->sk ? t->sk_w : 0, t->sk ? t->sk_cb : 0 };
    XXH64_update(st, w, sizeof w);
    ok = ok && fwrite(w, sizeof w, 1, f) == 1;
    if (t->sk) {
        size_t n = emb_table_sketch_bytes(t);
        XXH64_update(st, t->sk, n);
        ok = ok && fwrite(t->sk, 1, n, f) == n;
    }
    uint64_t h = XXH64_digest(st);
    XXH64_freeState(st);
    ok = ok && fwrite(&h, 8, 1, f) == 1;
    return ok ? 0 : -(errno ? errno : EIO);
}

static int put_pending(const emb_table *t, FILE *f, XXH64_state_t *st, int sorted)
{
    uint64_t np = 0;
    for (size_t i = 0; i < t->pend.cap; i++)
        if (((const pending *)&t->pend.s[i])->show > 0) np++;
    XXH64_update(st, &np, sizeof np);
    int ok = fwrite(&np, sizeof np, 1, f) == 1;
    pending *all = sorted ? xmalloc((np ? np : 1) * sizeof *all) : NULL;
    size_t n = 0;
    for (size_t i = 0; ok && i < t->pend.cap; i++) {
        const pending *p = (const pending *)&t->pend.s[i];
        if (!(p->show > 0)) continue;
        if (all) {
            all[n++] = *p;
            continue;
        }
        XXH64_update(st, p, sizeof *p);
        ok = fwrite(p, sizeof *p, 1, f) == 1;
    }
    if (all) {
        qsort(all, n, sizeof *all, cmp_pending);
        XXH64_update(st, all, n * sizeof *all);
        ok = ok && fwrite(all, sizeof *all, n, f) == n;
        free(all);
    }
    return ok ? 0 : -(errno ? errno : EIO);
}

/* The deletion record's (key, pass) pairs in key order (malloc'ed; *n of them). */
static key_slot *dead_sorted(const emb_table *t, size_t *n)
{
    key_slot *dk = xmalloc((t->dead.n ? t->dead.n : 1) * sizeof *dk);
    size_t nd = 0;
    for (size_t i = 0; i < t->dead.cap; i++)
        if (t->dead.s[i].val) dk[nd++] = (key_slot){ t->dead.s[i].key, t->dead.s[i].val - 1 };
    qsort(dk, nd, sizeof *dk, cmp_pending);
    *n = nd;
    return dk;
}

/* An empty deletion record, complete from pass `from`. */
static void dead_reset(emb_table *t, uint32_t from)
{
    key_map_free(&t->dead);
    memset(&t->dead, 0, sizeof t->dead);
    t->dead_from = from;
}

/* the deletion record, in key order: u64 from-pass, u64 count, (key, pass) pairs */
static int put_dead(const emb_table *t, FILE *f, XXH64_state_t *st)
{
    uint64_t dh[2] = { t->dead_from, t->dead.n };
    XXH64_update(st, dh, sizeof dh);
    int ok = fwrite(dh, sizeof dh, 1, f) == 1;
    size_t nd;
    key_slot *dk = dead_sorted(t, &nd);
    XXH64_update(st, dk, nd * sizeof *dk);
    ok = ok && fwrite(dk, sizeof *dk, nd, f) == nd;
    free(dk);
    return ok ? 0 : -(errno ? errno : EIO);
}

/* key -> val in the deletion record (added or replaced), at load 1/2 at most */
static void dead_put(emb_table *t, uint64_t key, uint64_t val)
{
    if (!t->dead.cap) key_map_init(&t->dead, 64);
    key_slot *k = key_map_slot(&t->dead, key);
    if (!k->val) {
        if ((t->dead.n + 1) * 2 > t->dead.cap) {
            key_map_rehash(&t->dead, t->dead.cap * 2);
            k = key_map_slot(&t->dead, key);
        }
        k->key = key;
        t->dead.n++;
    }
    k->val = val;
}

/* Read what put_pending_and_sum wrote (what names the section in errors), checking the sum. */
/* A pending key's exact counts (a file of exact counts, or of an older build) into the sketch. */
static void sketch_put(emb_table *t, uint64_t key, float show, float click)
{
    size_t cell[SKETCH_D];
    sketch_cells(t, key, cell);
    sketch_raise(t, cell, (uint64_t)show, (uint64_t)click);
}

static int get_dead(emb_table *t, FILE *f, XXH64_state_t *st, const char *what, char *err, size_t errlen);

/* The pending keys, then the deletion record (with_dead) and the sketch (with_sketch), then the
 * checksum: the table section and a commit's blob of each version. */
static int get_pending_and_sum(emb_table *t, FILE *f, XXH64_state_t *st, int with_dead, int with_sketch,
                               const char *what, char *err, size_t errlen)
{
    uint64_t np = 0;
    int ret = 0;
    if (fread(&np, sizeof np, 1, f) != 1) {
        snprintf(err, errlen, "%s: truncated before the pending keys", what);
        ret = -EBADMSG;
    }
    if (!ret) XXH64_update(st, &np, sizeof np);
    for (uint64_t i = 0; !ret && i < np; i++) {
        pending p;
        if (fread(&p, sizeof p, 1, f) != 1) {
            snprintf(err, errlen, "%s: truncated at pending key %llu of %llu", what, (unsigned long long)i,
                     (unsigned long long)np);
            ret = -EBADMSG;
            break;
        }
        XXH64_update(st, &p, sizeof p);
        if (!(p.show > 0)) {
            snprintf(err, errlen, "%s: pending key %llu has no shows", what, (unsigned long long)i);
            ret = -EBADMSG;
            break;
        }
        if (t->sk) {   /* exact counts into this table's sketch */
            sketch_put(t, p.key, p.show, p.click);
            continue;
        }
        pending *q = pend_find(t, p.key);
        if (!q) q = pend_add(t, p.key);
        q->show = p.show;
        q->click = p.click;
    }
    if (!ret && with_dead) ret = get_dead(t, f, st, what, err, errlen);
    uint64_t w[2] = { 0, 0 };
    if (!ret && with_sketch && fread(w, sizeof w, 1, f) != 1) {
        snprintf(err, errlen, "%s: truncated before the admission sketch", what);
        ret = -EBADMSG;
    }
    if (!ret && with_sketch) XXH64_update(st, w, sizeof w);
    if (!ret && w[0] && (w[0] != (t->sk ? t->sk_w : 0) || w[1] != t->sk_cb)) {
        snprintf(err, errlen, "%s: its admission sketch has %llu cells of %llu bits a row, this model's %llu of %u (another "
                 "--admit-mb, or --min-show past 15 or 255)", what, (unsigned long long)w[0], (unsigned long long)w[1] * 8,
                 (unsigned long long)(t->sk ? t->sk_w : 0), t->sk_cb * 8);
        ret = -EBADMSG;
    }
    if (!ret && w[0]) {
        size_t n = emb_table_sketch_bytes(t);
        if (fread(t->sk, 1, n, f) != n) {
            snprintf(err, errlen, "%s: truncated in the admission sketch", what);
            ret = -EBADMSG;
        } else {
            XXH64_update(st, t->sk, n);
        }
    }
    uint64_t want = XXH64_digest(st), got;
    XXH64_freeState(st);
    if (!ret && (fread(&got, 8, 1, f) != 1 || got != want)) {
        snprintf(err, errlen, "%s: checksum mismatch", what);
        ret = -EBADMSG;
    }
    return ret;
}

/* The deletion record into t (replacing what it held); a file of an older build has none: its
 * deletions are not known (dead_from UINT32_MAX), and the caller says from when they are. */
static int get_dead(emb_table *t, FILE *f, XXH64_state_t *st, const char *what, char *err, size_t errlen)
{
    uint64_t dh[2];
    if (fread(dh, sizeof dh, 1, f) != 1) {
        snprintf(err, errlen, "%s: truncated before the deleted keys", what);
        return -EBADMSG;
    }
    XXH64_update(st, dh, sizeof dh);
    if (dh[0] > UINT32_MAX) {
        snprintf(err, errlen, "%s: bad deletion record", what);
        return -EBADMSG;
    }
    dead_reset(t, (uint32_t)dh[0]);
    for (uint64_t i = 0; i < dh[1]; i++) {
        key_slot d;
        if (fread(&d, sizeof d, 1, f) != 1 || d.val > UINT32_MAX) {
            snprintf(err, errlen, "%s: truncated or bad at deleted key %llu of %llu", what, (unsigned long long)i,
                     (unsigned long long)dh[1]);
            return -EBADMSG;
        }
        XXH64_update(st, &d, sizeof d);
        dead_put(t, d.key, d.val + 1);
    }
    return 0;
}

#define DEAD_MAGIC "CTRBXDEL"
#define DEAD_VERSION 1u

/* The record alone: magic, u32 version, u64 from-pass, u64 count, the keys in increasing order as
 * differences from the one before (the first from 0), their passes, a checksum of all after the
 * magic. Differences and passes in columns leave mostly zero bytes: the tier compresses it. */
int emb_table_save_deleted(const emb_table *t, void *file)
{
    FILE *f = file;
    uint32_t v = DEAD_VERSION;
    uint64_t dh[2] = { t->dead_from, t->dead.n };
    size_t nd;
    key_slot *dk = dead_sorted(t, &nd);
    uint64_t *col = xmalloc((nd ? nd : 1) * sizeof *col);
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    XXH64_update(st, &v, sizeof v);
    XXH64_update(st, dh, sizeof dh);
    int ok = fwrite(DEAD_MAGIC, 1, 8, f) == 8 && fwrite(&v, sizeof v, 1, f) == 1 && fwrite(dh, sizeof dh, 1, f) == 1;
    for (int c = 0; c < 2; c++) {
        for (size_t i = 0; i < nd; i++) col[i] = c ? dk[i].val : dk[i].key - (i ? dk[i - 1].key : 0);
        XXH64_update(st, col, nd * sizeof *col);
        ok = ok && fwrite(col, sizeof *col, nd, f) == nd;
    }
    uint64_t h = XXH64_digest(st);
    XXH64_freeState(st);
    free(col);
    free(dk);
    ok = ok && fwrite(&h, 8, 1, f) == 1;
    return ok ? 0 : -(errno ? errno : EIO);
}

static int load_deleted(emb_table *t, void *file, int merge, char *err, size_t errlen);

int emb_table_load_deleted(emb_table *t, void *file, char *err, size_t errlen) { return load_deleted(t, file, 0, err, errlen); }
int emb_table_merge_deleted(emb_table *t, void *file, char *err, size_t errlen) { return load_deleted(t, file, 1, err, errlen); }

static int load_deleted(emb_table *t, void *file, int merge, char *err, size_t errlen)
{
    FILE *f = file;
    char magic[8];
    uint32_t v;
    uint64_t dh[2];
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, DEAD_MAGIC, 8) != 0 || fread(&v, sizeof v, 1, f) != 1) {
        snprintf(err, errlen, "deletion record: bad magic or truncated");
        return -EBADMSG;
    }
    if (v != DEAD_VERSION) {
        snprintf(err, errlen, "deletion record: version %u, this build reads %u", v, DEAD_VERSION);
        return -EBADMSG;
    }
    if (fread(dh, sizeof dh, 1, f) != 1 || dh[0] > UINT32_MAX || dh[1] > ((uint64_t)1 << 40)) {
        snprintf(err, errlen, "deletion record: truncated or bad head");
        return -EBADMSG;
    }
    size_t nd = (size_t)dh[1];
    uint64_t *col = xmalloc((nd ? nd : 1) * 2 * sizeof *col);
    int ret = fread(col, sizeof *col, 2 * nd, f) == 2 * nd ? 0 : -EBADMSG;
    if (ret) snprintf(err, errlen, "deletion record: truncated (%zu keys)", nd);
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    XXH64_update(st, &v, sizeof v);
    XXH64_update(st, dh, sizeof dh);
    XXH64_update(st, col, 2 * nd * sizeof *col);
    uint64_t want = XXH64_digest(st), got;
    XXH64_freeState(st);
    if (!ret && (fread(&got, 8, 1, f) != 1 || got != want)) {
        snprintf(err, errlen, "deletion record: checksum mismatch");
        ret = -EBADMSG;
    }
    for (size_t i = 0; !ret && i < nd; i++)
        if (col[nd + i] > UINT32_MAX || (i && col[i] == 0)) {
            snprintf(err, errlen, "deletion record: bad entry %zu of %zu", i, nd);
            ret = -EBADMSG;
        }
    if (!ret) {
        if (!merge) dead_reset(t, (uint32_t)dh[0]);
        else if ((uint32_t)dh[0] > t->dead_from || t->dead_from == UINT32_MAX) t->dead_from = (uint32_t)dh[0];
        uint64_t key = 0;
        for (size_t i = 0; i < nd; i++) {
            key += col[i];
            uint64_t had = merge && t->dead.cap ? key_map_get(&t->dead, key) : 0;
            if (had < col[nd + i] + 1) dead_put(t, key, col[nd + i] + 1);   /* the later deletion */
        }
    }
    free(col);
    return ret;
}

#define PENDING_MAGIC "CTRBXPN4"   /* with the sketch; the deletion record is saved apart (emb_table_save_deleted).
                                      "CTRBXPN3" (both), "CTRBXPN2" (the record alone) and "CTRBXPND"
                                      (neither) still read */

int emb_table_save_pending(const emb_table *t, void *file)
{
    FILE *f = file;
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    if (fwrite(PENDING_MAGIC, 1, 8, f) != 8) {
        XXH64_freeState(st);
        return -(errno ? errno : EIO);
    }
    return put_pending_and_sum(t, f, st, 0, 0);
}

int emb_table_load_pending(emb_table *t, void *file, char *err, size_t errlen)
{
    FILE *f = file;
    char magic[8];
    int got = fread(magic, 1, 8, f) == 8;
    int level = !got ? -1 : !memcmp(magic, "CTRBXPND", 8) ? 0 : !memcmp(magic, "CTRBXPN2", 8) ? 1
              : !memcmp(magic, "CTRBXPN3", 8) ? 2 : !memcmp(magic, PENDING_MAGIC, 8) ? 3 : -1;
    if (level < 0) {
        snprintf(err, errlen, "pending keys: bad magic or truncated");
        return -EBADMSG;
    }
    if (level == 0) t->dead_from = UINT32_MAX;   /* an older build's: no deletions known */
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    return get_pending_and_sum(t, f, st, level == 1 || level == 2, level >= 2, "pending keys", err, errlen);
}

void emb_table_trim(emb_table *t)
{
    /* Rows leave at each pass boundary and come back while the next pass trains: the slab and the
     * index keep their size unless the rows fell far below it, so that a boundary does not release
     * pages and shrink the index only to fault them in and rehash it again (a tenth of the trainer's
     * time in the end-to-end tier bench). What they keep is at most what the most rows took, which
     * the cache's budget bounded (4 index slots a row at growth).
     * The slab: pages past twice the rows go (they read back as zeros if the slab grows into them
     * again, and every row is initialised before use). */
    size_t keep = (t->rows * 2 + 1024) * t->row_bytes, page = 4096;
    size_t cap = t->cap_rows * t->row_bytes;
    uintptr_t from = ((uintptr_t)t->slab + keep + page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t to = ((uintptr_t)t->slab + cap) & ~(uintptr_t)(page - 1);
    if (t->slab && to > from + (1u << 20)) madvise((void *)from, to - from, MADV_DONTNEED);
    /* the key index: down to a load of 1/4 once it fell under 1/16 */
    size_t want = 1024;
    while (want < t->rows * 4) want *= 2;
    if (t->idx.cap >= want * 4) key_map_rehash(&t->idx, want);
}

void emb_table_set_lr(emb_table *t, float lr) { t->c.opt.lr = lr; }

void emb_table_update(emb_table *t, uint32_t row, const float *g, uint64_t step)
{
    float *v = emb_table_vals(t, row);
    sparse_opt_update(&t->c.opt, v, v + t->V, g, t->V, step);
}

#define TABLE_MAGIC "CTRBXTBL"
#define TABLE_VERSION 5u   /* 2: pending keys' counters saved; 3: 32-byte row header; 4: deleted keys;
                              5: the admission sketch */

int emb_table_save(const emb_table *t, void *file)
{
    FILE *f = file;
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    uint64_t hdr[6] = { TABLE_VERSION, (uint64_t)t->c.dim, (uint64_t)t->c.has_w, (uint64_t)t->c.opt.kind,
                        (uint64_t)t->rows, (uint64_t)t->row_bytes };
    int ok = fwrite(TABLE_MAGIC, 1, 8, f) == 8 && fwrite(hdr, sizeof hdr, 1, f) == 1;
    XXH64_update(st, hdr, sizeof hdr);
    /* rows in row order; the mark scratch is zeroed so equal tables give equal bytes */
    uint8_t *buf = xmalloc(t->row_bytes);
    for (size_t r = 0; ok && r < t->rows; r++) {
        memcpy(buf, t->slab + r * t->row_bytes, t->row_bytes);
        ((emb_row_head *)buf)->mark = 0;
        ((emb_row_head *)buf)->aux = 0;
        XXH64_update(st, buf, t->row_bytes);
        ok = fwrite(buf, t->row_bytes, 1, f) == 1;
    }
    free(buf);
    /* keys still waiting for admission: their counters, so a reloaded table admits them at the
     * same show as one that never stopped */
    if (!ok) {
        XXH64_freeState(st);
        return -(errno ? errno : EIO);
    }
    return put_pending_and_sum(t, f, st, 1, 1);
}

int emb_table_load(emb_table *t, void *file, char *err, size_t errlen)
{
    FILE *f = file;
    char magic[8];
    uint64_t hdr[6];
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, TABLE_MAGIC, 8) != 0 || fread(hdr, sizeof hdr, 1, f) != 1) {
        snprintf(err, errlen, "sparse table: bad magic or truncated header");
        return -EBADMSG;
    }
    if (hdr[0] < 3 || hdr[0] > TABLE_VERSION || hdr[1] != (uint64_t)t->c.dim || hdr[2] != (uint64_t)t->c.has_w ||
        hdr[3] != (uint64_t)t->c.opt.kind || hdr[5] != t->row_bytes || hdr[4] > UINT32_MAX) {
        snprintf(err, errlen, "sparse table: version or layout differs from the model's (dim %llu, optimizer %llu)",
                 (unsigned long long)hdr[1], (unsigned long long)hdr[3]);
        return -EBADMSG;
    }
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    XXH64_update(st, hdr, sizeof hdr);
    size_t n = (size_t)hdr[4];
    uint8_t *buf = xmalloc(t->row_bytes);
    int ret = 0;
    for (size_t r = 0; r < n; r++) {
        if (fread(buf, t->row_bytes, 1, f) != 1) {
            snprintf(err, errlen, "sparse table: truncated at row %zu of %zu", r, n);
            ret = -EBADMSG;
            break;
        }
        XXH64_update(st, buf, t->row_bytes);
        emb_row_head *h = (emb_row_head *)buf;
        if (emb_table_find(t, h->key) >= 0) {
            snprintf(err, errlen, "sparse table: key %016llx appears twice (row %zu)", (unsigned long long)h->key, r);
            ret = -EBADMSG;
            break;
        }
        emb_table_insert_record(t, buf, 0);
    }
    free(buf);
    if (ret) {
        XXH64_freeState(st);
        return ret;
    }
    ret = get_pending_and_sum(t, f, st, hdr[0] >= 4, hdr[0] >= 5, "sparse table", err, errlen);
    if (ret == 0 && hdr[0] < 4) {   /* deletions are known from the newest pass a row saw */
        t->dead_from = 0;
        for (size_t r = 0; r < t->rows; r++)
            if (emb_table_head(t, (uint32_t)r)->last_pass > t->dead_from) t->dead_from = emb_table_head(t, (uint32_t)r)->last_pass;
    }
    return ret;
}

void emb_table_note_deleted(emb_table *t, uint64_t key, uint32_t pass) { dead_put(t, key, (uint64_t)pass + 1); }

size_t emb_table_deleted_since(const emb_table *t, uint32_t since, key_vec *out)
{
    size_t n = 0;
    for (size_t i = 0; i < t->dead.cap; i++)
        if (t->dead.s[i].val > (uint64_t)since + 1) {
            key_vec_push(out, t->dead.s[i].key);
            n++;
        }
    return n;
}

uint32_t emb_table_deletions_from(const emb_table *t) { return t->dead_from; }

void emb_table_set_deletions_from(emb_table *t, uint32_t pass) { t->dead_from = pass; }
