/*
 * devrows.c: the pass tier in device memory (devrows.h).
 *
 * Slots are handed out in order, [0, used); a batch's missing rows take the next ones, so they go
 * up in one copy from one host staging buffer. Per slot the host keeps the row's key, table and
 * whether the device changed it; per table a key -> slot + 1 map (io/keymap.h). Sync downloads each
 * run of consecutive dirty slots at once and writes the rows into their tables by key (a row's
 * number in its table may have changed since: the CPU cache evicts and fetches at boundaries).
 */
#include "devrows.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/keymap.h"
#include "../io/util.h"

struct dev_rows {
    const dense_backend *be;
    emb_table *const *tab;
    int n_tables;
    size_t stride, max_slots;
    float *slab;              /* device: cap slots of stride floats */
    size_t cap, used, n_dirty;
    key_map *map;             /* (n_tables) key -> slot + 1 */
    size_t *in_map;           /* (n_tables) entries of each map */
    uint64_t *skey;           /* per slot (cap): key, table, changed on the device */
    uint16_t *stab;
    uint8_t *sdirty;
    float *stage;             /* host staging for uploads and downloads */
    size_t stage_rows;
    uint32_t *miss;           /* the batch's unique rows to upload */
    size_t miss_cap;
    float *pf_stage;          /* host (the backend's pinned memory): rows sent ahead, until they land */
    size_t pf_rows;
    uint32_t *pf_row;         /* the rows to send ahead, and their tables */
    uint16_t *pf_tab;
    size_t pf_cap;
    size_t pend_lo, pend_hi;  /* slots whose upload may still be in flight */
    dev_rows_stats st;
};

dev_rows *dev_rows_create(const dense_backend *be, emb_table *const *tabs, int n_tables, uint64_t budget)
{
    dev_rows *d = xcalloc(1, sizeof *d);
    d->be = be;
    d->tab = tabs;
    d->n_tables = n_tables;
    for (int t = 0; t < n_tables; t++) {
        size_t r = (size_t)emb_table_values(tabs[t]) + (size_t)emb_table_state_floats(tabs[t]);
        if (r > d->stride) d->stride = r;
    }
    if (d->stride == 0) d->stride = 1;
    d->max_slots = (size_t)(budget / (d->stride * sizeof(float)));
    d->map = xcalloc((size_t)n_tables, sizeof *d->map);
    d->in_map = xcalloc((size_t)n_tables, sizeof *d->in_map);
    for (int t = 0; t < n_tables; t++) key_map_init(&d->map[t], 1024);
    return d;
}

/* The uploads sent ahead have landed: their slots may be read (and their staging reused). */
static void pending_wait(dev_rows *d)
{
    if (d->pend_hi > d->pend_lo) {
        double t0 = now_sec();
        d->be->upload_wait();
        d->st.prefetch_wait_s += now_sec() - t0;
    }
    d->pend_lo = d->pend_hi = 0;
}

void dev_rows_destroy(dev_rows *d)
{
    if (!d) return;
    pending_wait(d);
    if (d->pf_stage) d->be->host_release(d->pf_stage);
    free(d->pf_row), free(d->pf_tab);
    if (d->slab) d->be->release(d->slab);
    for (int t = 0; t < d->n_tables; t++) key_map_free(&d->map[t]);
    free(d->map), free(d->in_map), free(d->skey), free(d->stab), free(d->sdirty), free(d->stage), free(d->miss);
    free(d);
}

size_t dev_rows_stride(const dev_rows *d) { return d->stride; }
size_t dev_rows_capacity(const dev_rows *d) { return d->max_slots; }
float *dev_rows_slab(dev_rows *d) { return d->slab; }
size_t dev_rows_resident(const dev_rows *d) { return d->used; }
size_t dev_rows_dirty(const dev_rows *d) { return d->n_dirty; }
const dev_rows_stats *dev_rows_stats_of(const dev_rows *d) { return &d->st; }

static void stage_reserve(dev_rows *d, size_t rows)
{
    if (rows <= d->stage_rows) return;
    d->stage_rows = rows > 2 * d->stage_rows ? rows : 2 * d->stage_rows;
    d->stage = xrealloc(d->stage, d->stage_rows * d->stride * sizeof *d->stage);
}

/* Room for n slots on the device and in the per-slot arrays (the slab grows by copying). */
static void slots_reserve(dev_rows *d, size_t n)
{
    if (n <= d->cap) return;
    pending_wait(d);   /* the slab is copied */
    size_t cap = d->cap ? d->cap : 4096;
    while (cap < n) cap *= 2;
    if (cap > d->max_slots) cap = d->max_slots;
    float *slab = d->be->alloc(cap * d->stride * sizeof *slab);
    if (d->used) d->be->copy(slab, d->slab, d->used * d->stride * sizeof *slab);
    if (d->slab) d->be->release(d->slab);
    d->slab = slab;
    d->skey = xrealloc(d->skey, cap * sizeof *d->skey);
    d->stab = xrealloc(d->stab, cap * sizeof *d->stab);
    d->sdirty = xrealloc(d->sdirty, cap * sizeof *d->sdirty);
    d->cap = cap;
}

/* Floats of table t's record that the tier keeps: values, then the optimizer's state. */
static size_t record_floats(const dev_rows *d, int t)
{
    return (size_t)emb_table_values(d->tab[t]) + (size_t)emb_table_state_floats(d->tab[t]);
}

/* Slot s (reserved) takes row `row` of table t: its key goes into the map and the slot's record,
 * its values and state into the staging at stage, to be uploaded. */
static void slot_take(dev_rows *d, int t, uint32_t row, size_t s, float *stage)
{
    uint64_t key = emb_table_head(d->tab[t], row)->key;
    memcpy(stage, emb_table_vals(d->tab[t], row), record_floats(d, t) * sizeof(float));
    if (2 * (d->in_map[t] + 1) > d->map[t].cap) key_map_reserve(&d->map[t], d->in_map[t] + 1);
    key_map_put_new(&d->map[t], key, s + 1);
    d->in_map[t]++;
    d->skey[s] = key, d->stab[s] = (uint16_t)t, d->sdirty[s] = 0;
}

void dev_rows_sync(dev_rows *d)
{
    pending_wait(d);
    if (!d->n_dirty) return;
    double t0 = now_sec(), copy = 0;
    for (size_t s = 0; s < d->used;) {
        if (!d->sdirty[s]) {
            s++;
            continue;
        }
        size_t e = s;
        while (e < d->used && d->sdirty[e]) e++;
        stage_reserve(d, e - s);
        double c0 = now_sec();
        d->be->download(d->stage, d->slab + s * d->stride, (e - s) * d->stride * sizeof *d->stage);
        copy += now_sec() - c0;
        for (size_t k = s; k < e; k++) {
            int t = d->stab[k];
            int64_t row = emb_table_find(d->tab[t], d->skey[k]);
            CHECK(row >= 0);   /* a row changed on the device left its table: dev_rows_drop was not called */
            memcpy(emb_table_vals(d->tab[t], (uint32_t)row), d->stage + (k - s) * d->stride,
                   record_floats(d, t) * sizeof(float));
            d->sdirty[k] = 0;
        }
        d->st.downloaded += e - s;
        d->st.download_bytes += (e - s) * d->stride * sizeof(float);
        s = e;
    }
    d->n_dirty = 0;
    d->st.download_s += copy;
    d->st.stage_s += now_sec() - t0 - copy;
}

void dev_rows_drop(dev_rows *d)
{
    dev_rows_sync(d);
    for (int t = 0; t < d->n_tables; t++) {
        key_map_clear(&d->map[t]);
        d->in_map[t] = 0;
    }
    d->used = 0;
}

int dev_rows_batch(dev_rows *d, const emb_batch *eb, size_t *rec, int train, char *err, size_t errlen)
{
    size_t U = emb_batch_unique(eb);
    if (U > d->max_slots) {
        snprintf(err, errlen, "a batch trains %zu rows and the GPU's pass tier holds %zu (%zu bytes a row): raise "
                 "--gpu-mem-mb or lower --batch", U, d->max_slots, d->stride * sizeof(float));
        return -1;
    }
    if (U > d->miss_cap) d->miss = xrealloc(d->miss, (d->miss_cap = U * 2) * sizeof *d->miss);
    size_t n_miss = 0;
    for (int pass = 0; pass < 2; pass++) {   /* the second only when the rows did not fit: every row is missing then */
        n_miss = 0;
        int in_flight = 0;
        /* the lookups on every thread (the maps are only read), the misses listed in order after */
        #pragma omp parallel for schedule(static, 1024) reduction(| : in_flight) if (U >= 8192)
        for (size_t u = 0; u < U; u++) {
            int t;
            uint32_t row;
            emb_batch_unique_row(eb, u, &t, &row);
            CHECK(row != UINT32_MAX);   /* inference's zero row never trains */
            uint64_t v = key_map_get(&d->map[t], emb_table_head(d->tab[t], row)->key);
            rec[u] = v ? (size_t)(v - 1) * d->stride : SIZE_MAX;
            in_flight |= v && v - 1 >= d->pend_lo && v - 1 < d->pend_hi;
        }
        for (size_t u = 0; u < U; u++)
            if (rec[u] == SIZE_MAX) d->miss[n_miss++] = (uint32_t)u;
        if (in_flight) pending_wait(d);
        if (d->used + n_miss <= d->max_slots) break;
        dev_rows_drop(d);
        d->st.flushes++;
    }
    if (n_miss) {
        double t0 = now_sec();
        slots_reserve(d, d->used + n_miss);
        stage_reserve(d, n_miss);
        for (size_t i = 0; i < n_miss; i++) {
            size_t u = d->miss[i], s = d->used + i;
            int t;
            uint32_t row;
            emb_batch_unique_row(eb, u, &t, &row);
            slot_take(d, t, row, s, d->stage + i * d->stride);
            rec[u] = s * d->stride;
        }
        double c0 = now_sec();
        d->be->upload(d->slab + d->used * d->stride, d->stage, n_miss * d->stride * sizeof *d->stage);
        double c1 = now_sec();
        d->used += n_miss;
        d->st.uploaded += n_miss;
        d->st.upload_bytes += n_miss * d->stride * sizeof(float);
        d->st.upload_s += c1 - c0;
        d->st.stage_s += c0 - t0;
    }
    if (train)
        for (size_t u = 0; u < U; u++) {
            size_t s = rec[u] / d->stride;
            d->n_dirty += !d->sdirty[s];
            d->sdirty[s] = 1;
        }
    return 0;
}

void dev_rows_prefetch(dev_rows *d, const key_vec *keys)
{
    if (!keys) return;
    pending_wait(d);   /* one set in flight at a time: its staging buffer is reused */
    double t0 = now_sec();
    size_t n = 0, room = d->max_slots - d->used;
    for (int t = 0; t < d->n_tables && n < room; t++)
        for (size_t i = 0; i < keys[t].n && n < room; i++) {
            uint64_t key = keys[t].k[i];
            if (key_map_get(&d->map[t], key)) continue;
            int64_t row = emb_table_find(d->tab[t], key);
            if (row < 0) continue;   /* not in memory now (or new): the batch that reads it uploads it */
            if (n == d->pf_cap) {
                d->pf_cap = d->pf_cap ? 2 * d->pf_cap : 4096;
                d->pf_row = xrealloc(d->pf_row, d->pf_cap * sizeof *d->pf_row);
                d->pf_tab = xrealloc(d->pf_tab, d->pf_cap * sizeof *d->pf_tab);
            }
            d->pf_row[n] = (uint32_t)row, d->pf_tab[n] = (uint16_t)t;
            n++;
        }
    if (!n) return;
    slots_reserve(d, d->used + n);
    if (n > d->pf_rows) {
        if (d->pf_stage) d->be->host_release(d->pf_stage);
        d->pf_rows = n > 2 * d->pf_rows ? n : 2 * d->pf_rows;
        d->pf_stage = d->be->host_alloc(d->pf_rows * d->stride * sizeof *d->pf_stage);
    }
    for (size_t i = 0; i < n; i++) slot_take(d, d->pf_tab[i], d->pf_row[i], d->used + i, d->pf_stage + i * d->stride);
    d->be->upload_async(d->slab + d->used * d->stride, d->pf_stage, n * d->stride * sizeof *d->pf_stage);
    d->pend_lo = d->used, d->pend_hi = d->used + n;
    d->used += n;
    d->st.uploaded += n, d->st.prefetched += n;
    d->st.upload_bytes += n * d->stride * sizeof(float);
    d->st.prefetch_bytes += n * d->stride * sizeof(float);
    d->st.stage_s += now_sec() - t0;
}
