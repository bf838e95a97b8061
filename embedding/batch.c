/*
 * batch.c: gather and scatter of a batch's rows (batch.h).
 *
 * gather: entry k -> key index (distinct keys, first-seen order) -> table row -> unique row u.
 * Without admission distinct keys are distinct rows; with it several keys can read one default
 * row, de-duplicated by the row header's mark (u + 1 during the gather).
 */
#include "batch.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../io/keymap.h"
#include "../io/util.h"

/* One thread's share of the distinct-key pass: a batch-local index over its rows (slots of its
 * key index + 1, io/keymap.h's compact variant) and its keys in first-seen order. Part 0 writes its keys straight into the batch's per-key
 * arrays; the others keep their own. */
enum { DK_PARTS = 16 };
typedef struct {
    key_index map;
    uint64_t *key;
    uint32_t *show, *click, *pos, *gid;   /* pos: the key's slot (to clear it); gid: its batch-wide index */
    uint16_t *field;
    int32_t *owner;       /* the earlier part holding the key, or -1 */
    size_t n, cap_keys;
} dk_part;

struct emb_batch {
    emb_table *const *tab;   /* (n_tables) borrowed */
    int n_tables;
    int *ftab;               /* (n_fields) field -> table, -1 numeric */
    int *tE;                 /* (n_tables) embedding floats per row */
    int has_w, E;            /* E: the widest table's embedding */
    uint32_t min_show;       /* admission (the tables share it) */
    /* unique rows of the batch */
    uint32_t *uidx, *urow;
    uint16_t *utab;          /* table of each unique row */
    size_t *uoff;            /* offset of each unique row's vector in Ue / dUe */
    size_t cap_k, cap_u, U;
    float *Uw, *Ue, *dUw, *dUe;
    int zero_slot;           /* inference: slot of the zero row for unknown keys */
    int no_values;           /* this gather leaves Uw, Ue unset (EMB_GATHER_NO_VALUES) */
    /* the batch's distinct keys, per key in first-seen order */
    uint64_t *lkey;
    uint32_t *lshow, *lclick, *lu, *ent;   /* per key: occurrences, clicks, unique slot; per entry: key index */
    uint16_t *lfield;
    int64_t *lfound;         /* per key: its row found in the table, or -1 */
    size_t lkeys_cap;
    dk_part part[DK_PARTS];  /* one per thread of the distinct-key pass */
};

emb_batch *emb_batch_create(emb_table *const *tabs, int n_tables, const int *field_table, uint32_t n_fields, int has_w)
{
    emb_batch *eb = xcalloc(1, sizeof *eb);
    eb->tab = tabs;
    eb->n_tables = n_tables;
    eb->ftab = xmalloc((n_fields ? n_fields : 1) * sizeof *eb->ftab);
    memcpy(eb->ftab, field_table, n_fields * sizeof *eb->ftab);
    eb->tE = xcalloc((size_t)n_tables, sizeof *eb->tE);
    eb->has_w = has_w;
    for (int t = 0; t < n_tables; t++) {
        eb->tE[t] = emb_table_values(tabs[t]) - has_w;
        if (eb->tE[t] > eb->E) eb->E = eb->tE[t];
        eb->min_show = emb_table_config_of(tabs[t])->min_show;
    }
    return eb;
}

void emb_batch_destroy(emb_batch *eb)
{
    if (!eb) return;
    free(eb->ftab), free(eb->tE), free(eb->utab), free(eb->uoff);
    free(eb->uidx), free(eb->urow), free(eb->Uw), free(eb->Ue), free(eb->dUw), free(eb->dUe);
    free(eb->lkey), free(eb->lshow), free(eb->lclick), free(eb->lu), free(eb->ent), free(eb->lfield), free(eb->lfound);
    for (int i = 0; i < DK_PARTS; i++) {
        dk_part *d = &eb->part[i];
        key_index_free(&d->map), free(d->key), free(d->show), free(d->click), free(d->pos), free(d->gid), free(d->field),
            free(d->owner);
    }
    free(eb);
}

size_t emb_batch_unique(const emb_batch *eb) { return eb->U; }
const uint32_t *emb_batch_uidx(const emb_batch *eb) { return eb->uidx; }
const size_t *emb_batch_uoff(const emb_batch *eb) { return eb->uoff; }
const float *emb_batch_w(const emb_batch *eb) { return eb->Uw; }
const float *emb_batch_e(const emb_batch *eb) { return eb->Ue; }
float *emb_batch_dw(emb_batch *eb) { return eb->dUw; }
float *emb_batch_de(emb_batch *eb) { return eb->dUe; }
const float *emb_batch_dw_const(const emb_batch *eb) { return eb->dUw; }
const float *emb_batch_de_const(const emb_batch *eb) { return eb->dUe; }

void emb_batch_unique_row(const emb_batch *eb, size_t u, int *table, uint32_t *row)
{
    *table = eb->utab[u];
    *row = eb->urow[u];
}

/* ---- gather: entries -> unique rows ---- */
static void ensure_unique(emb_batch *eb, size_t nnz)
{
    if (nnz + 1 > eb->cap_k) {
        eb->cap_k = (nnz + 1) * 2;
        eb->uidx = xrealloc(eb->uidx, eb->cap_k * sizeof *eb->uidx);
    }
    if (nnz + 1 > eb->cap_u) {
        eb->cap_u = (nnz + 1) * 2;
        eb->urow = xrealloc(eb->urow, eb->cap_u * sizeof *eb->urow);
        eb->utab = xrealloc(eb->utab, eb->cap_u * sizeof *eb->utab);
        eb->uoff = xrealloc(eb->uoff, (eb->cap_u + 1) * sizeof *eb->uoff);
        eb->Uw = xrealloc(eb->Uw, eb->cap_u * sizeof *eb->Uw);
        eb->dUw = xrealloc(eb->dUw, eb->cap_u * sizeof *eb->dUw);
        if (eb->E) {
            eb->Ue = xrealloc(eb->Ue, eb->cap_u * (size_t)eb->E * sizeof *eb->Ue);
            eb->dUe = xrealloc(eb->dUe, eb->cap_u * (size_t)eb->E * sizeof *eb->dUe);
        }
    }
}

/* Room for n keys in part d (its table at load 1/2 at most); own: it keeps arrays of its own. */
static void dk_reserve(dk_part *d, size_t n, int own)
{
    key_index_reserve(&d->map, n);
    if (n > d->cap_keys) {
        d->cap_keys = n * 2;
        d->pos = xrealloc(d->pos, d->cap_keys * sizeof *d->pos);
        if (own) {
            d->key = xrealloc(d->key, d->cap_keys * sizeof *d->key);
            d->show = xrealloc(d->show, d->cap_keys * sizeof *d->show);
            d->click = xrealloc(d->click, d->cap_keys * sizeof *d->click);
            d->gid = xrealloc(d->gid, d->cap_keys * sizeof *d->gid);
            d->field = xrealloc(d->field, d->cap_keys * sizeof *d->field);
            d->owner = xrealloc(d->owner, d->cap_keys * sizeof *d->owner);
        }
    }
}

/* The index of key in part d's keys, or -1. */
static int64_t dk_find(const dk_part *d, uint64_t key) { return (int64_t)*key_index_slot(&d->map, d->key, key) - 1; }

/* Distinct keys of rows [ra, rb) into part d, in first-seen order; ent[k - k0] = their index. */
static void dk_scan(dk_part *d, const sample_block *b, size_t ra, size_t rb, uint64_t k0, uint32_t *ent)
{
    size_t n = 0;
    for (size_t r = ra; r < rb; r++) {
        uint32_t click = b->label[r] > 0.5f;
        for (uint64_t k = b->row_ptr[r]; k < b->row_ptr[r + 1]; k++) {
            uint64_t key = b->key[k];
            uint32_t *s = key_index_slot(&d->map, d->key, key);
            uint32_t li;
            if (*s) {
                li = *s - 1;
            } else {
                li = (uint32_t)n++;
                *s = li + 1;
                d->pos[li] = (uint32_t)(s - d->map.s);
                d->key[li] = key;
                d->field[li] = b->field[k];
                d->show[li] = 0;
                d->click[li] = 0;
            }
            d->show[li]++;
            d->click[li] += click;
            ent[k - k0] = li;
        }
    }
    d->n = n;
}

/* Distinct keys of rows [r0, r1) in first-seen order: lkey/lfield/lshow/lclick per key, ent[k - k0]
 * = key index. Returns the number of keys. The rows are split between threads in order; each
 * finds the distinct keys of its share in a table small enough to stay in cache. Part t's keys
 * that an earlier part also holds take that part's index; the rest are numbered after all earlier
 * parts' keys, so the order is first-seen over the batch, as one thread would find it. */
static size_t distinct_keys(emb_batch *eb, const sample_block *b, size_t r0, size_t r1)
{
    uint64_t k0 = b->row_ptr[r0];
    size_t nnz = (size_t)(b->row_ptr[r1] - k0);
    if (nnz > eb->lkeys_cap) {
        eb->lkeys_cap = nnz * 2;
        eb->lkey = xrealloc(eb->lkey, eb->lkeys_cap * sizeof *eb->lkey);
        eb->lshow = xrealloc(eb->lshow, eb->lkeys_cap * sizeof *eb->lshow);
        eb->lclick = xrealloc(eb->lclick, eb->lkeys_cap * sizeof *eb->lclick);
        eb->lu = xrealloc(eb->lu, eb->lkeys_cap * sizeof *eb->lu);
        eb->ent = xrealloc(eb->ent, eb->lkeys_cap * sizeof *eb->ent);
        eb->lfield = xrealloc(eb->lfield, eb->lkeys_cap * sizeof *eb->lfield);
        eb->lfound = xrealloc(eb->lfound, eb->lkeys_cap * sizeof *eb->lfound);
    }
    enum { MIN_PART = 16384 };   /* entries per part below which a thread is not worth waking */
    int want = omp_get_max_threads();
    if (want > DK_PARTS) want = DK_PARTS;
    if ((size_t)want > nnz / MIN_PART) want = nnz / MIN_PART > 1 ? (int)(nnz / MIN_PART) : 1;
    dk_part *P = eb->part;
    size_t total = 0;
    #pragma omp parallel num_threads(want)
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        size_t ra = r0 + (r1 - r0) * (size_t)t / (size_t)nt, rb = r0 + (r1 - r0) * (size_t)(t + 1) / (size_t)nt;
        dk_part *d = &P[t];
        dk_reserve(d, (size_t)(b->row_ptr[rb] - b->row_ptr[ra]), t > 0);
        if (t == 0) {   /* part 0's keys keep their indices: it writes the batch's arrays */
            d->key = eb->lkey, d->show = eb->lshow, d->click = eb->lclick, d->field = eb->lfield;
        }
        dk_scan(d, b, ra, rb, k0, eb->ent);
        #pragma omp barrier
        /* the earliest part holding each key of parts 1.. (the tables are only read now) */
        for (int u = 1; u < nt; u++) {
            dk_part *e = &P[u];
            #pragma omp for schedule(static)
            for (size_t j = 0; j < e->n; j++) {
                e->owner[j] = -1;
                for (int s = 0; s < u; s++) {
                    int64_t i = dk_find(&P[s], e->key[j]);
                    if (i >= 0) {
                        e->owner[j] = s;
                        e->gid[j] = (uint32_t)i;   /* the index within part s, made batch-wide below */
                        break;
                    }
                }
            }
        }
        for (size_t j = 0; j < d->n; j++) d->map.s[d->pos[j]] = 0;   /* clear the slots used, for the next batch */
        #pragma omp single
        {   /* number the keys each part sees first, in part order */
            size_t n = P[0].n;
            for (int u = 1; u < nt; u++) {
                dk_part *e = &P[u];
                for (size_t j = 0; j < e->n; j++) {
                    if (e->owner[j] >= 0) continue;
                    e->gid[j] = (uint32_t)n;
                    eb->lkey[n] = e->key[j];
                    eb->lfield[n] = e->field[j];
                    eb->lshow[n] = e->show[j];
                    eb->lclick[n] = e->click[j];
                    n++;
                }
            }
            total = n;
        }
        /* the other keys add their counts to their first part's; then the entries take batch-wide
         * indices (a key's owner part was numbered above, and its index there is a first sight) */
        for (int u = 1; u < nt; u++) {
            dk_part *e = &P[u];
            #pragma omp for schedule(static)
            for (size_t j = 0; j < e->n; j++) {
                if (e->owner[j] < 0) continue;
                uint32_t g = e->owner[j] == 0 ? e->gid[j] : P[e->owner[j]].gid[e->gid[j]];
                eb->lshow[g] += e->show[j];
                eb->lclick[g] += e->click[j];
                e->gid[j] = g;
            }
        }
        for (int u = 1; u < nt; u++) {
            size_t ua = r0 + (r1 - r0) * (size_t)u / (size_t)nt, ub = r0 + (r1 - r0) * (size_t)(u + 1) / (size_t)nt;
            const uint32_t *gid = P[u].gid;
            #pragma omp for schedule(static)
            for (uint64_t k = b->row_ptr[ua]; k < b->row_ptr[ub]; k++) eb->ent[k - k0] = gid[eb->ent[k - k0]];
        }
        if (t == 0) d->key = NULL, d->show = d->click = NULL, d->field = NULL;   /* they were the batch's */
    }
    return total;
}

/* Unique slot for row `row` of table t (de-duplicated by the row's mark), its values copied in
 * (unless the gather leaves them: eb->no_values). */
static uint32_t unique_row(emb_batch *eb, int t, int64_t row)
{
    if (row < 0) {   /* inference, unknown key: a zero vector */
        if (eb->zero_slot < 0) {
            eb->zero_slot = (int)eb->U;
            eb->urow[eb->U] = UINT32_MAX;
            eb->utab[eb->U] = 0;
            eb->uoff[eb->U + 1] = eb->uoff[eb->U] + (size_t)eb->E;
            eb->Uw[eb->U] = 0;
            if (eb->E) memset(eb->Ue + eb->uoff[eb->U], 0, (size_t)eb->E * sizeof(float));
            eb->U++;
        }
        return (uint32_t)eb->zero_slot;
    }
    emb_row_head *h = emb_table_head(eb->tab[t], (uint32_t)row);
    if (h->mark == 0) {   /* several keys can share a row (a field's default row) */
        h->mark = (uint32_t)eb->U + 1;
        eb->urow[eb->U] = (uint32_t)row;
        eb->utab[eb->U] = (uint16_t)t;
        eb->uoff[eb->U + 1] = eb->uoff[eb->U] + (size_t)eb->tE[t];
        const float *v = emb_table_vals(eb->tab[t], (uint32_t)row);
        if (eb->has_w && !eb->no_values) eb->Uw[eb->U] = v[0];
        if (eb->tE[t] && !eb->no_values) memcpy(eb->Ue + eb->uoff[eb->U], v + eb->has_w, (size_t)eb->tE[t] * sizeof(float));
        eb->U++;
    }
    return h->mark - 1;
}

void emb_batch_gather(emb_batch *eb, const sample_block *b, size_t r0, size_t r1, uint32_t pass, emb_gather_mode mode)
{
    eb->no_values = (mode & EMB_GATHER_NO_VALUES) != 0;
    mode = (emb_gather_mode)(mode & ~EMB_GATHER_NO_VALUES);
    uint64_t k0 = b->row_ptr[r0], k1 = b->row_ptr[r1];
    size_t nnz = (size_t)(k1 - k0);
    ensure_unique(eb, nnz);
    eb->U = 0;
    eb->uoff[0] = 0;
    eb->zero_slot = -1;
    size_t nk = distinct_keys(eb, b, r0, r1);
    /* Look every key up in its field's table in parallel (the tables are only read), prefetching
     * index slots ahead; then create, count and de-duplicate in key order. */
    enum { AHEAD = 8 };
    const int64_t CLAIMED = (int64_t)1 << 32;   /* in lfound: a row claimed for a new key, to fill */
    #pragma omp parallel for schedule(static, 256)
    for (size_t j = 0; j < nk; j++) {
        if (j + AHEAD < nk) emb_table_prefetch(eb->tab[eb->ftab[eb->lfield[j + AHEAD]]], eb->lkey[j + AHEAD]);
        eb->lfound[j] = emb_table_find(eb->tab[eb->ftab[eb->lfield[j]]], eb->lkey[j]);
    }
    if (mode != EMB_GATHER_INFER && eb->min_show <= 1) {
        /* every key has a row of its own, so distinct keys are distinct rows: create the missing
         * rows in key order, lay out the vectors, then count and gather all rows in parallel */
        for (size_t j = 0; j < nk; j++) {
            int t = eb->ftab[eb->lfield[j]];
            if (eb->lfound[j] < 0) eb->lfound[j] = CLAIMED | emb_table_claim(eb->tab[t]);   /* distinct: still absent */
            eb->utab[j] = (uint16_t)t;
            eb->uoff[j + 1] = eb->uoff[j] + (size_t)eb->tE[t];
        }
        #pragma omp parallel for schedule(static, 256)
        for (size_t j = 0; j < nk; j++) {
            emb_table *tb = eb->tab[eb->utab[j]];
            uint32_t row = (uint32_t)eb->lfound[j];
            if (j + AHEAD < nk) {   /* the row, and for a new key the index slot it will take */
                emb_table_prefetch_row(eb->tab[eb->utab[j + AHEAD]], (uint32_t)eb->lfound[j + AHEAD]);
                if (eb->lfound[j + AHEAD] & CLAIMED) emb_table_prefetch(eb->tab[eb->utab[j + AHEAD]], eb->lkey[j + AHEAD]);
            }
            if (eb->lfound[j] & CLAIMED) emb_table_fill(tb, row, eb->lkey[j]);
            if (mode == EMB_GATHER_TRAIN) {
                emb_row_count(emb_table_config_of(tb), emb_table_head(tb, row), (float)eb->lshow[j], (float)eb->lclick[j], pass);
            }
            eb->urow[j] = row;
            if (eb->no_values) continue;
            const float *v = emb_table_vals(tb, row);
            if (eb->has_w) eb->Uw[j] = v[0];
            int E = eb->tE[eb->utab[j]];
            if (E) memcpy(eb->Ue + eb->uoff[j], v + eb->has_w, (size_t)E * sizeof(float));
        }
        eb->U = nk;
        for (size_t k = 0; k < nnz; k++) eb->uidx[k] = eb->ent[k];
        return;
    }
    for (size_t j = 0; j < nk; j++) {
        int t = eb->ftab[eb->lfield[j]];
        emb_table *tb = eb->tab[t];
        if (j + AHEAD < nk && eb->lfound[j + AHEAD] >= 0)
            emb_table_prefetch_row(eb->tab[eb->ftab[eb->lfield[j + AHEAD]]], (uint32_t)eb->lfound[j + AHEAD]);
        int64_t row, f = eb->lfound[j];
        if (mode == EMB_GATHER_TRAIN) row = emb_table_touch_found(tb, eb->lkey[j], f, eb->lfield[j], eb->lshow[j], eb->lclick[j], pass);
        else if (mode == EMB_GATHER_NO_COUNT) row = f >= 0 ? f : emb_table_get(tb, emb_table_default_key(eb->lfield[j]));
        else row = f >= 0 ? f : emb_table_lookup(tb, eb->lkey[j], eb->lfield[j]);
        eb->lu[j] = unique_row(eb, t, row);
    }
    for (size_t k = 0; k < nnz; k++) eb->uidx[k] = eb->lu[eb->ent[k]];
    for (size_t u = 0; u < eb->U; u++)
        if (eb->urow[u] != UINT32_MAX) emb_table_head(eb->tab[eb->utab[u]], eb->urow[u])->mark = 0;
}


/* ---- scatter: the optimizer inside each gathered row ---- */

/* The gradient of unique row u's values into g (has_w + its table's embedding width). */
static void unique_grad(const emb_batch *eb, size_t u, float *g)
{
    if (eb->has_w) g[0] = eb->dUw[u];
    size_t E = eb->uoff[u + 1] - eb->uoff[u];
    if (E) memcpy(g + eb->has_w, eb->dUe + eb->uoff[u], E * sizeof(float));
}

void emb_batch_scatter(emb_batch *eb, uint64_t step, float l2_all)
{
    int Vmax = eb->has_w + eb->E;
    if (l2_all > 0) {
        /* every row gets l2 * v, plus its data gradient if the batch touched it (found by its mark) */
        float *g = xmalloc((size_t)Vmax * sizeof *g), *d = xmalloc((size_t)Vmax * sizeof *d);
        for (size_t u = 0; u < eb->U; u++)
            if (eb->urow[u] != UINT32_MAX) emb_table_head(eb->tab[eb->utab[u]], eb->urow[u])->mark = (uint32_t)u + 1;
        for (int t = 0; t < eb->n_tables; t++) {
            emb_table *tb = eb->tab[t];
            int V = emb_table_values(tb);
            size_t n = emb_table_rows(tb);
            for (size_t r = 0; r < n; r++) {
                emb_row_head *h = emb_table_head(tb, (uint32_t)r);
                const float *v = emb_table_vals(tb, (uint32_t)r);
                for (int i = 0; i < V; i++) g[i] = l2_all * v[i];
                if (h->mark) {
                    unique_grad(eb, h->mark - 1, d);
                    h->mark = 0;
                    for (int i = 0; i < V; i++) g[i] += d[i];
                }
                emb_table_update(tb, (uint32_t)r, g, step);
            }
        }
        free(g), free(d);
        return;
    }
    /* each unique row is updated once, so rows can be updated in parallel: same result */
    #pragma omp parallel
    {
        float *gt = xmalloc((size_t)Vmax * sizeof *gt);
        #pragma omp for schedule(static)
        for (size_t u = 0; u < eb->U; u++) {
            if (u + 8 < eb->U && eb->urow[u + 8] != UINT32_MAX) emb_table_prefetch_row(eb->tab[eb->utab[u + 8]], eb->urow[u + 8]);
            if (eb->urow[u] == UINT32_MAX) continue;
            unique_grad(eb, u, gt);
            emb_table_update(eb->tab[eb->utab[u]], eb->urow[u], gt, step);
        }
        free(gt);
    }
}

int emb_batch_row_grad(const emb_batch *eb, int table, uint32_t row, float *g)
{
    for (size_t u = 0; u < eb->U; u++)
        if (eb->urow[u] == row && eb->utab[u] == table) {
            unique_grad(eb, u, g);
            return 0;
        }
    return -1;
}
