/*
 * lanes.c: the lane-parallel training step and epoch (lanes.h).
 *
 * A step on one rank: the distinct keys of its lanes' rows (first seen order) go to their owners,
 * grouped by owner, then table (a header of per-table counts, then the keys); the owners answer with
 * the rows' values in the same order; those rows fill this rank's model tables (emptied first), on
 * which each lane's rows are one batch of model_loss_and_grads. The lanes' gradients wait (dense:
 * P floats a lane; sparse: the values of each row a lane touched) until every rank knows the
 * step's largest, then go out as fixed point: dense summed over ranks, sparse to the owners in the
 * order the keys went, each key's record [shows, clicks, values].
 * The model's tables own nothing between steps; the rows live in the shard (embedding/shard.h).
 */
#include "lanes.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../datasets/source.h"
#include "../embedding/cache.h"
#include "../embedding/shard.h"
#include "../embedding/shrink.h"
#include "../embedding/tier.h"
#include "../io/keymap.h"
#include "../io/util.h"
#include "dist.h"
#include "passes.h"

struct lanes {
    const train_opts *o;
    model *m;
    int G, rank, N, T;            /* lanes, this rank, ranks, tables */
    uint32_t F;                   /* fields */
    int admit;                    /* admission (--min-show): keys wait for rows, owners decide */
    emb_shard *shard;
    /* the step's distinct keys */
    key_map kidx;                 /* key -> index + 1 */
    size_t nk, cap_k;
    uint64_t *ukey;
    uint8_t *utb;
    uint32_t *ushow, *uclick;
    uint16_t *ufield;
    uint8_t *udef, *ufound;       /* a field's default row (admission); the owner served a row */
    size_t *fdef;                 /* (F) with admission: the index of each field's default key, or SIZE_MAX */
    size_t *sorder;               /* send position -> key index */
    size_t *cnt;                  /* (N * T) keys sent to each owner, per table */
    float *vals;                  /* the owners' answer, in send order */
    uint32_t **rmap;              /* (T) row of the model's table -> key index */
    size_t *rmap_cap;
    /* what each sender asked this rank (as owner): its first request's number and count */
    size_t *req_first, *req_n;
    /* with a table folder: this rank's tier, the rows in memory in front of it, the batch of rows
     * written back since the last commit, the job's commits */
    char *top;                    /* DIR (SHARDS.ctrbox) */
    emb_tier *tier;
    emb_cache *cache;
    emb_tier_batch *wb;
    key_vec *pass_keys;           /* (T) the keys of the pass in training, as owner (pinned in memory) */
    uint64_t commits;
    uint32_t pass;                /* the pass the rows loaded now are counted at (eviction's clock) */
    uint32_t step_pass;           /* the pass of the step in training (admission's counters) */
    int init_tiered;              /* --init names a sharded folder (lanes_set_init_folder): its id, commits */
    uint64_t init_id, init_commits;
    lanes_step_fn on_step;        /* called after each step (every rank), or NULL */
    void *on_step_ctx;
    double exchange_s, input_s;   /* seconds in the steps' MPI calls; in the input's (counts, rows) */
    uint64_t bytes_sent, input_bytes;
};

static int mine(const lanes *L, int lane) { return lane % L->N == L->rank; }

static void free_keys(key_vec *keys, int T)
{
    for (int tb = 0; keys && tb < T; tb++) key_vec_free(&keys[tb]);
    free(keys);
}

int lanes_check(const train_opts *o, char *err, size_t errlen)
{
    const model_config *c = &o->mc;
    if (c->min_show > 1 && c->admit_mb > 0) {
        snprintf(err, errlen, "training on several processes (mpirun, or --lanes) counts the shows of keys not yet "
                 "admitted exactly: give --admit-mb 0 (a sketch's collisions would depend on which keys share a "
                 "process)");
        return -1;
    }
    const char *why = o->follow ? "--follow" : NULL;
    if (why) {
        snprintf(err, errlen, "training on several processes (mpirun, or --lanes) does not support %s yet", why);
        return -1;
    }
    return 0;
}

lanes *lanes_create(const train_opts *o, model *m, int n_lanes, uint32_t n_fields)
{
    lanes *L = xcalloc(1, sizeof *L);
    L->o = o;
    L->m = m;
    L->G = n_lanes;
    L->F = n_fields;
    L->admit = model_config_of(m)->min_show > 1;
    L->fdef = xmalloc((n_fields ? n_fields : 1) * sizeof *L->fdef);
    L->rank = dist_rank();
    L->N = dist_size();
    L->T = model_n_tables(m);
    CHECK(L->T <= 255);   /* a key's table is a byte */
    L->shard = emb_shard_create(model_tables(m), L->T);
    key_map_init(&L->kidx, 1024);
    L->cnt = xcalloc((size_t)L->N * (size_t)L->T, sizeof *L->cnt);
    L->rmap = xcalloc((size_t)L->T, sizeof *L->rmap);
    L->rmap_cap = xcalloc((size_t)L->T, sizeof *L->rmap_cap);
    L->req_first = xcalloc((size_t)L->N, sizeof *L->req_first);
    L->req_n = xcalloc((size_t)L->N, sizeof *L->req_n);
    return L;
}

void lanes_destroy(lanes *L)
{
    if (!L) return;
    if (L->wb) emb_tier_abort(L->wb);
    free_keys(L->pass_keys, L->T);
    emb_cache_destroy(L->cache);
    emb_tier_close(L->tier);
    free(L->top);
    emb_shard_destroy(L->shard);
    key_map_free(&L->kidx);
    free(L->ukey), free(L->utb), free(L->ushow), free(L->uclick), free(L->sorder), free(L->cnt), free(L->vals);
    free(L->ufield), free(L->udef), free(L->ufound), free(L->fdef);
    for (int tb = 0; tb < L->T; tb++) free(L->rmap[tb]);
    free(L->rmap), free(L->rmap_cap), free(L->req_first), free(L->req_n);
    free(L);
}

static size_t exchange(lanes *L, const void *send, const size_t *send_bytes, void **recv, size_t *recv_bytes)
{
    double t0 = now_sec();
    size_t got = dist_alltoallv(send, send_bytes, recv, recv_bytes);
    for (int r = 0; r < L->N; r++)
        if (r != L->rank) L->bytes_sent += send_bytes[r];
    L->exchange_s += now_sec() - t0;
    return got;
}

/* Empty the model's tables (they hold one step's rows). */
static void clear_tables(lanes *L)
{
    for (int tb = 0; tb < L->T; tb++) {
        emb_table *t = model_table(L->m, tb);
        size_t rows = emb_table_rows(t);
        if (!rows) continue;
        uint8_t *keep = xcalloc(rows, 1);
        emb_table_keep_rows(t, keep, NULL);
        free(keep);
    }
}

/* Keys in a request's header of T per-table counts (what a sender asked an owner); keys this rank
 * sent owner r (L->cnt, by ask_owners). */
static size_t keys_in(const uint64_t *h, int T)
{
    size_t n = 0;
    for (int tb = 0; tb < T; tb++) n += h[tb];
    return n;
}

static size_t keys_to(const lanes *L, int r)
{
    size_t n = 0;
    for (int tb = 0; tb < L->T; tb++) n += L->cnt[(size_t)r * (size_t)L->T + (size_t)tb];
    return n;
}

/* The step's distinct keys: forgotten (distinct_begin), then those of b's rows [r0, r1) added
 * in first-seen order with their shows and clicks (distinct_add), for any number of blocks. */
static void distinct_begin(lanes *L)
{
    key_map_clear(&L->kidx);
    L->nk = 0;
}

static void distinct_reserve(lanes *L, size_t nnz)
{
    key_map_reserve(&L->kidx, L->nk + nnz);
    if (L->nk + nnz > L->cap_k) {
        L->cap_k = (L->nk + nnz) * 2;
        L->ukey = xrealloc(L->ukey, L->cap_k * sizeof *L->ukey);
        L->utb = xrealloc(L->utb, L->cap_k);
        L->ushow = xrealloc(L->ushow, L->cap_k * sizeof *L->ushow);
        L->uclick = xrealloc(L->uclick, L->cap_k * sizeof *L->uclick);
        L->ufield = xrealloc(L->ufield, L->cap_k * sizeof *L->ufield);
        L->udef = xrealloc(L->udef, L->cap_k);
        L->ufound = xrealloc(L->ufound, L->cap_k);
        L->sorder = xrealloc(L->sorder, L->cap_k * sizeof *L->sorder);
    }
}

static void distinct_add(lanes *L, const sample_block *b, size_t r0, size_t r1)
{
    size_t nnz = r1 > r0 ? (size_t)(b->row_ptr[r1] - b->row_ptr[r0]) : 0;
    distinct_reserve(L, nnz);
    size_t nk = L->nk;
    for (size_t r = r0; r < r1; r++) {
        uint32_t click = b->label[r] > 0.5f;
        for (uint64_t k = b->row_ptr[r]; k < b->row_ptr[r + 1]; k++) {
            key_slot *s = key_map_slot(&L->kidx, b->key[k]);
            if (!s->val) {
                s->key = b->key[k];
                s->val = ++nk;
                L->ukey[nk - 1] = b->key[k];
                L->utb[nk - 1] = (uint8_t)model_field_table(L->m, b->field[k]);
                L->ufield[nk - 1] = b->field[k];
                L->udef[nk - 1] = 0;
                L->ushow[nk - 1] = L->uclick[nk - 1] = 0;
            }
            L->ushow[s->val - 1]++;
            L->uclick[s->val - 1] += click;
        }
    }
    L->nk = nk;
}

/* With admission: every categorical field's default key joined to the step's distinct keys (the
 * rows keys pending admission read; L->fdef), with no shows of their own. */
static void distinct_defaults(lanes *L)
{
    distinct_reserve(L, L->F);
    for (uint32_t f = 0; f < L->F; f++) {
        L->fdef[f] = SIZE_MAX;
        int tb = model_field_table(L->m, (uint16_t)f);
        if (tb < 0) continue;
        uint64_t key = emb_table_default_key((uint16_t)f);
        key_slot *s = key_map_slot(&L->kidx, key);
        if (!s->val) {
            s->key = key;
            s->val = ++L->nk;
            L->ukey[L->nk - 1] = key;
            L->utb[L->nk - 1] = (uint8_t)tb;
            L->ufield[L->nk - 1] = (uint16_t)f;
            L->ushow[L->nk - 1] = L->uclick[L->nk - 1] = 0;
        }
        L->udef[s->val - 1] = 1;
        L->fdef[f] = s->val - 1;
    }
}

/* The distinct keys to their owners: the send order (by owner, then table, then first sight:
 * L->sorder, L->cnt) and the requests each owner gets, per sender T counts then the keys, and with
 * counts a word per key: its shows << 32 | clicks, or DEFAULT_ROW for a field's default row.
 * Returns what this rank got as owner (caller frees; rb: bytes from each rank). */
#define DEFAULT_ROW UINT64_MAX
static void *ask_owners(lanes *L, size_t *rb, int with_counts)
{
    int N = L->N, T = L->T;
    size_t nk = L->nk, *cnt = L->cnt;
    memset(cnt, 0, (size_t)N * (size_t)T * sizeof *cnt);
    int *own = xmalloc((nk ? nk : 1) * sizeof *own);
    for (size_t j = 0; j < nk; j++) {
        own[j] = emb_shard_owner(L->ukey[j], N);
        cnt[(size_t)own[j] * (size_t)T + L->utb[j]]++;
    }
    size_t *pos = xmalloc((size_t)N * (size_t)T * sizeof *pos), p = 0;
    for (size_t i = 0; i < (size_t)N * (size_t)T; i++) pos[i] = p, p += cnt[i];
    for (size_t j = 0; j < nk; j++) L->sorder[pos[(size_t)own[j] * (size_t)T + L->utb[j]]++] = j;
    size_t *sb = xmalloc((size_t)N * sizeof *sb);
    uint64_t *req = xmalloc(((size_t)N * (size_t)T + nk * (with_counts ? 2 : 1) + 1) * sizeof *req), *w = req;
    p = 0;
    for (int r = 0; r < N; r++) {
        size_t n = 0;
        for (int tb = 0; tb < T; tb++) *w++ = cnt[(size_t)r * (size_t)T + (size_t)tb], n += cnt[(size_t)r * (size_t)T + (size_t)tb];
        for (size_t i = 0; i < n; i++) *w++ = L->ukey[L->sorder[p + i]];
        for (size_t i = 0; with_counts && i < n; i++) {
            size_t j = L->sorder[p + i];
            *w++ = L->udef[j] ? DEFAULT_ROW : (uint64_t)L->ushow[j] << 32 | L->uclick[j];
        }
        p += n;
        sb[r] = ((size_t)T + n * (with_counts ? 2 : 1)) * sizeof *req;
    }
    void *in;
    exchange(L, req, sb, &in, rb);
    free(own), free(pos), free(sb), free(req);
    return in;
}

/* As owner, with a table folder: the rows of the keys every rank asked (in, rb as ask_owners
 * returns them) into memory from the tier, and the rows no asked key needs evicted down to the
 * budget (those changed since their copy in the tier are written back first, into the batch the
 * next commit makes durable). Rows of keys the tier does not hold are made when a step serves
 * them (counted as coming). 0, or -2 with err. */
static int load_asked(lanes *L, const void *in, const size_t *rb, int predict, char *err, size_t errlen)
{
    int T = L->T;
    key_vec *keys = xcalloc((size_t)T, sizeof *keys);
    key_map seen;
    key_map_init(&seen, 1024);
    const uint64_t *q = in;
    for (int r = 0; r < L->N; r++) {
        const uint64_t *h = q, *k = q + T;
        for (int tb = 0; tb < T; tb++)
            for (uint64_t i = 0; i < h[tb]; i++, k++)
                if (key_set_add(&seen, *k)) key_vec_push(&keys[tb], *k);
        q += rb[r] / sizeof *q;
    }
    key_map_free(&seen);
    emb_fetch *f = emb_cache_missing(L->cache, keys);
    int ret = emb_fetch_run(L->tier, f, err, errlen);
    if (ret == 0) {
        uint64_t coming = emb_cache_install(L->cache, f);
        if (!L->wb) L->wb = emb_tier_begin(L->tier);
        emb_cache_stats cs = { 0 };
        /* a prediction in the middle of a pass keeps the pass's rows too: its later steps find them */
        for (int tb = 0; predict && L->pass_keys && tb < T; tb++)
            for (size_t i = 0; i < L->pass_keys[tb].n; i++) key_vec_push(&keys[tb], L->pass_keys[tb].k[i]);
        emb_pins pin = { keys, NULL };   /* (keys may have grown since f) */
        emb_cache_evict(L->cache, &pin, 1, coming, L->pass, L->wb, &cs);
    }
    emb_fetch_free(f);
    if (!predict && ret == 0) {   /* the pass's keys, until the next pass's */
        free_keys(L->pass_keys, T);
        L->pass_keys = keys;
        keys = NULL;
    }
    free_keys(keys, T);
    return ret < 0 ? -2 : 0;
}

/* As owner, with admission, before serving a training step: the shows and clicks each key got
 * this step, summed over every sender (in, rb as ask_owners returns them with counts), admit it
 * or count it pending (emb_table_admit: exact counts, so each key's fate is its own and does not
 * depend on who else asked); the fields' default rows are made. */
static void admit_asked(lanes *L, const void *in, const size_t *rb, uint32_t pass)
{
    int T = L->T;
    key_map *tot = xcalloc((size_t)T, sizeof *tot);   /* per table: key -> index + 1 */
    size_t n = 0, cap = 1024;
    uint64_t *key = xmalloc(cap * sizeof *key), *sum = xmalloc(cap * 2 * sizeof *sum);
    uint8_t *ktb = xmalloc(cap);
    for (int tb = 0; tb < T; tb++) key_map_init(&tot[tb], 1024);
    const uint64_t *q = in;
    for (int r = 0; r < L->N; r++) {
        const uint64_t *h = q, *k = q + T, *w = k + keys_in(h, T);
        for (int tb = 0; tb < T; tb++)
            for (uint64_t i = 0; i < h[tb]; i++, k++, w++) {
                emb_table *t = emb_shard_table(L->shard, tb);
                if (*w == DEFAULT_ROW) {
                    emb_table_get(t, *k);
                    continue;
                }
                key_map_reserve(&tot[tb], tot[tb].n + 1);
                key_slot *s = key_map_slot(&tot[tb], *k);
                if (!s->val) {
                    if (n == cap) {
                        cap *= 2;
                        key = xrealloc(key, cap * sizeof *key), sum = xrealloc(sum, cap * 2 * sizeof *sum);
                        ktb = xrealloc(ktb, cap);
                    }
                    s->key = *k;
                    s->val = ++n;
                    tot[tb].n++;
                    key[n - 1] = *k, ktb[n - 1] = (uint8_t)tb, sum[2 * (n - 1)] = sum[2 * (n - 1) + 1] = 0;
                }
                sum[2 * (s->val - 1)] += *w >> 32;
                sum[2 * (s->val - 1) + 1] += *w & 0xffffffffu;
            }
        q += rb[r] / sizeof *q;
    }
    for (size_t i = 0; i < n; i++) {
        CHECK(sum[2 * i] <= UINT32_MAX);
        emb_table_admit(emb_shard_table(L->shard, ktb[i]), key[i], (uint32_t)sum[2 * i], (uint32_t)sum[2 * i + 1], pass);
    }
    for (int tb = 0; tb < T; tb++) key_map_free(&tot[tb]);
    free(tot), free(key), free(sum), free(ktb);
}

/* The distinct keys of b's rows [r0, r1) from their owners into the model's tables (emptied
 * first); create: rows missing at the owner are made (training), else they read as zeros (and,
 * with a table folder, the owner loads the asked rows from its tier first). With admission the
 * fields' default rows come too, the owners decide which keys get rows (admit_asked), and a key
 * without one is left out of the tables (L->ufound 0): the model reads its field's default row.
 * Collective: every rank calls it, with an empty range when it has no rows. 0, or -2 with err
 * (this rank's tier). */
static int fetch_rows(lanes *L, const sample_block *b, size_t r0, size_t r1, int create, char *err, size_t errlen)
{
    model *m = L->m;
    int N = L->N, T = L->T, admit = L->admit;
    distinct_begin(L);
    distinct_add(L, b, r0, r1);
    if (admit) distinct_defaults(L);
    size_t nk = L->nk;
    size_t *sb = xmalloc((size_t)N * sizeof *sb), *rb = xmalloc((size_t)N * sizeof *rb);
    void *in = ask_owners(L, rb, create && admit);
    int ret = L->tier && !create ? load_asked(L, in, rb, 1, err, errlen) : 0;
    if (create && admit) admit_asked(L, in, rb, L->step_pass);
    /* as owner: serve each sender's keys, in order; with admission, whether each has a row (a byte
     * a key after the values, padded to whole floats) */
    emb_shard_begin(L->shard);
    size_t reply_floats = 0, served = 0;
    const uint64_t *q = in;
    for (int r = 0; r < N; r++) {
        const uint64_t *h = q;
        for (int tb = 0; tb < T; tb++) reply_floats += h[tb] * (size_t)emb_table_values(model_table(m, tb));
        if (admit) reply_floats += (keys_in(h, T) + 3) / 4;
        q += rb[r] / sizeof *q;
    }
    float *reply = xmalloc((reply_floats ? reply_floats : 1) * sizeof *reply), *o = reply;
    q = in;
    for (int r = 0; r < N; r++) {
        const uint64_t *h = q, *keys = q + T;
        size_t nr = keys_in(h, T);
        uint8_t *found = admit ? xmalloc(nr + 1) : NULL, *fo = found;
        L->req_first[r] = served;
        float *o0 = o;
        for (int tb = 0; tb < T; tb++) {
            emb_shard_serve(L->shard, tb, keys, h[tb], create && !admit, o, fo);
            o += h[tb] * (size_t)emb_table_values(model_table(m, tb));
            keys += h[tb];
            served += h[tb];
            if (fo) fo += h[tb];
        }
        if (admit) {
            memset(o, 0, (nr + 3) / 4 * sizeof *o);   /* the padding too: no stray bytes go out */
            memcpy(o, found, nr);
            o += (nr + 3) / 4;
        }
        free(found);
        L->req_n[r] = served - L->req_first[r];
        sb[r] = (size_t)(o - o0) * sizeof *o;
        q += rb[r] / sizeof *q;
    }
    free(in);
    free(L->vals);
    exchange(L, reply, sb, (void **)&L->vals, rb);
    free(reply);
    /* the rows into the model's tables, in send order (each owner's answer in turn) */
    clear_tables(L);
    size_t rec_cap = 0;
    for (int tb = 0; tb < T; tb++)
        if (emb_table_row_bytes(model_table(m, tb)) > rec_cap) rec_cap = emb_table_row_bytes(model_table(m, tb));
    uint8_t *rec = xmalloc(rec_cap);
    const float *v = L->vals;
    size_t i = 0;
    for (int r = 0; r < N; r++) {
        size_t nr = keys_to(L, r), floats = 0;
        for (int tb = 0; tb < T; tb++)
            floats += L->cnt[(size_t)r * (size_t)T + (size_t)tb] * (size_t)emb_table_values(model_table(m, tb));
        const uint8_t *found = admit ? (const uint8_t *)(v + floats) : NULL;
        for (size_t e = 0; e < nr; e++, i++) {
            size_t j = L->sorder[i];
            emb_table *t = model_table(m, L->utb[j]);
            size_t V = (size_t)emb_table_values(t);
            const float *val = v;
            v += V;
            L->ufound[j] = !found || found[e];
            if (!L->ufound[j]) continue;
            memset(rec, 0, emb_table_row_bytes(t));
            ((emb_row_head *)rec)->key = L->ukey[j];
            memcpy(rec + sizeof(emb_row_head), val, V * sizeof *val);
            uint32_t row = emb_table_insert_record(t, rec, 0);
            if (row >= L->rmap_cap[L->utb[j]]) {
                L->rmap_cap[L->utb[j]] = (size_t)row * 2 + 1024;
                L->rmap[L->utb[j]] = xrealloc(L->rmap[L->utb[j]], L->rmap_cap[L->utb[j]] * sizeof **L->rmap);
            }
            L->rmap[L->utb[j]][row] = (uint32_t)j;
        }
        if (admit) v += (nr + 3) / 4;
    }
    CHECK(i == nk);
    free(rec), free(sb), free(rb);
    return ret;
}

/* The largest |v[i]| and m; NaN when some v[i] is NaN (as inf stays inf). */
static double absmax(const float *v, size_t n, double m)
{
    float x = (float)m;
    int nan = 0;
    for (size_t i = 0; i < n; i++) {
        float a = fabsf(v[i]);
        x = a > x ? a : x;
        nan |= a != a;
    }
    return nan || m != m ? NAN : x;
}

/* The exponent e that makes terms values of magnitude up to maxabs, scaled by 2^e and rounded,
 * sum within 2^62. */
static int fixed_exp(double maxabs, int terms)
{
    if (!(maxabs > 0)) return 0;
    int x, t = 0;
    frexp(maxabs, &x);   /* maxabs < 2^x */
    while ((1 << t) < terms) t++;
    int e = 62 - x - t;
    return e < 200 ? e : 200;   /* 2^-200 resolves below any float gradient; 2^e times a weight stays finite */
}

/* One step: the rows of lane grp_lane[k] are sb's [grp[k], grp[k + 1]) for this rank's k < n_grp;
 * size[l]: every lane's rows this step (all ranks know them). Returns the step's summed loss
 * (lane by lane), or NaN when it diverged. */
static double step(lanes *L, const sample_block *sb, const size_t *grp, const int *grp_lane, int n_grp, const size_t *size,
                   uint32_t pass)
{
    model *m = L->m;
    int N = L->N;
    size_t B = 0;
    for (int l = 0; l < L->G; l++) B += size[l];
    L->step_pass = pass;
    fetch_rows(L, sb, 0, sb->rows, 1, NULL, 0);   /* no tier read: the pass's rows are in memory */
    float *params, *grads;
    size_t P;
    model_dense(m, &params, &grads, &P);
    /* the lanes' gradients, waiting for the scale */
    float *dstash = xmalloc(((size_t)n_grp * P + 1) * sizeof *dstash);
    size_t *voff = xmalloc((L->nk + 1) * sizeof *voff);   /* key j's values in a lane's sparse gradient */
    voff[0] = 0;
    for (size_t j = 0; j < L->nk; j++) voff[j + 1] = voff[j] + (size_t)emb_table_values(model_table(m, L->utb[j]));
    size_t sp_cap = 0, sp_n = 0, sp_gcap = 0;
    uint32_t *sp_j = NULL;   /* (lane k, key j) entries: the key, its gradient (values) */
    float *sp_g = NULL;
    size_t *sp_first = xmalloc(((size_t)n_grp + 1) * sizeof *sp_first), sp_used = 0;
    double *loss = xcalloc((size_t)L->G, sizeof *loss), maxabs[3] = { 0, 0, 0 };
    /* batch norm: each lane normalizes by its own rows' statistics (ghost batches), and the running
     * statistics move once a step, from where they were, by the lanes' updates weighted by their rows */
    float *run;
    size_t R;
    model_buffers(m, &run, &R);
    float *run0 = xmalloc((R ? R : 1) * sizeof *run0), *rdelta = xmalloc(((size_t)n_grp * R + 1) * sizeof *rdelta);
    memcpy(run0, run, R * sizeof *run0);
    for (int k = 0; k < n_grp; k++) {
        size_t nb = grp[k + 1] - grp[k];
        model_set_dropout_stream(m, (uint64_t)grp_lane[k] + 1);
        memcpy(run, run0, R * sizeof *run);
        loss[grp_lane[k]] = model_loss_and_grads(m, sb, grp[k], grp[k + 1]) * (double)nb;
        for (size_t i = 0; i < R; i++) rdelta[(size_t)k * R + i] = run[i] - run0[i];
        maxabs[2] = absmax(rdelta + (size_t)k * R, R, maxabs[2]);
        model_dense(m, &params, &grads, &P);
        memcpy(dstash + (size_t)k * P, grads, P * sizeof *grads);
        maxabs[0] = absmax(grads, P, maxabs[0]);
        const emb_batch *eb = model_batch_rows(m);
        size_t U = emb_batch_unique(eb);
        const float *dw = emb_batch_dw_const(eb), *de = emb_batch_de_const(eb);
        const size_t *uoff = emb_batch_uoff(eb);
        sp_first[k] = sp_n;
        for (size_t u = 0; u < U; u++) {
            int tb;
            uint32_t row;
            emb_batch_unique_row(eb, u, &tb, &row);
            size_t j = L->rmap[tb][row], V = voff[j + 1] - voff[j];
            if (sp_n == sp_cap) {
                sp_cap = sp_cap * 2 + 1024;
                sp_j = xrealloc(sp_j, sp_cap * sizeof *sp_j);
            }
            if (sp_used + V > sp_gcap) {
                sp_gcap = (sp_used + V) * 2 + 4096;
                sp_g = xrealloc(sp_g, sp_gcap * sizeof *sp_g);
            }
            int has_w = emb_table_config_of(model_table(m, tb))->has_w;
            if (has_w) sp_g[sp_used] = dw[u];
            memcpy(sp_g + sp_used + has_w, de + uoff[u], (V - (size_t)has_w) * sizeof *sp_g);
            maxabs[1] = absmax(sp_g + sp_used, V, maxabs[1]);
            sp_j[sp_n++] = (uint32_t)j;
            sp_used += V;
        }
    }
    sp_first[n_grp] = sp_n;
    double t0 = now_sec();
    dist_max_f64(maxabs, 3);
    dist_sum_f64_ordered(loss, (size_t)L->G);
    L->exchange_s += now_sec() - t0;
    double total = 0;
    for (int l = 0; l < L->G; l++) total += loss[l];
    if (!isfinite(maxabs[0]) || !isfinite(maxabs[1]) || !isfinite(maxabs[2]) || !isfinite(total)) {
        memcpy(run, run0, R * sizeof *run);
        free(dstash), free(voff), free(sp_j), free(sp_g), free(sp_first), free(loss), free(run0), free(rdelta);
        return NAN;
    }
    /* dense (and the running statistics' moves): the lanes' sums, exact, over every rank */
    int ed = fixed_exp(maxabs[0], L->G), es = fixed_exp(maxabs[1], L->G), eb = fixed_exp(maxabs[2], L->G);
    int64_t *acc = xcalloc(P + R + 1, sizeof *acc);
    for (int k = 0; k < n_grp; k++) {
        double wk = (double)(grp[k + 1] - grp[k]) / (double)B;
        const float *g = dstash + (size_t)k * P, *d = rdelta + (size_t)k * R;
        double sc = ldexp(wk, ed), sr = ldexp(wk, eb);   /* g * wk * 2^ed, the power of two exact either way */
        for (size_t i = 0; i < P; i++) acc[i] += llrint((double)g[i] * sc);
        for (size_t i = 0; i < R; i++) acc[P + i] += llrint((double)d[i] * sr);
    }
    t0 = now_sec();
    dist_sum_i64(acc, P + R);
    L->exchange_s += now_sec() - t0;
    L->bytes_sent += N > 1 ? (P + R) * sizeof *acc : 0;
    double inv = ldexp(1.0, -ed), binv = ldexp(1.0, -eb);
    for (size_t i = 0; i < P; i++) grads[i] = (float)((double)acc[i] * inv);
    for (size_t i = 0; i < R; i++) run[i] = (float)((double)run0[i] + (double)acc[P + i] * binv);
    free(acc), free(run0), free(rdelta);
    uint64_t st = model_dense_apply(m);
    /* sparse: per key with a row [shows, clicks, values] in send order, to the owners; a key
     * pending admission sends nothing, its shows and clicks count for its field's default row */
    if (L->admit)
        for (size_t j = 0; j < L->nk; j++)
            if (!L->ufound[j]) {
                size_t d = L->fdef[L->ufield[j]];
                L->ushow[d] += L->ushow[j];
                L->uclick[d] += L->uclick[j];
            }
    size_t words = 0;
    for (size_t j = 0; j < L->nk; j++) words += L->ufound[j] ? emb_shard_grad_words(L->shard, L->utb[j]) : 0;
    int64_t *kq = xcalloc(words ? words : 1, sizeof *kq);
    size_t *koff = xmalloc((L->nk + 1) * sizeof *koff);   /* key j's record, in send order */
    size_t *sb_ = xcalloc((size_t)N, sizeof *sb_), *rb = xmalloc((size_t)N * sizeof *rb);
    size_t off = 0, i = 0;
    for (int r = 0; r < N; r++) {
        size_t nr = keys_to(L, r);
        for (size_t e = 0; e < nr; e++, i++) {
            size_t j = L->sorder[i];
            if (!L->ufound[j]) continue;
            koff[j] = off;
            kq[off] = L->ushow[j];
            kq[off + 1] = L->uclick[j];
            off += emb_shard_grad_words(L->shard, L->utb[j]);
            sb_[r] += emb_shard_grad_words(L->shard, L->utb[j]) * sizeof *kq;
        }
    }
    const float *g = sp_g;
    for (int k = 0; k < n_grp; k++) {
        double wk = (double)(grp[k + 1] - grp[k]) / (double)B, sc = ldexp(wk, es);
        for (size_t e = sp_first[k]; e < sp_first[k + 1]; e++) {
            size_t j = sp_j[e], V = voff[j + 1] - voff[j];
            int64_t *a = kq + koff[j] + 2;
            for (size_t v = 0; v < V; v++) a[v] += llrint((double)g[v] * sc);
            g += V;
        }
    }
    void *in;
    exchange(L, kq, sb_, &in, rb);
    const int64_t *q = in;
    for (int r = 0; r < N; r++) {
        size_t used = emb_shard_add(L->shard, L->req_first[r], L->req_n[r], q);
        CHECK(used * sizeof *q == rb[r]);
        q += used;
    }
    free(in);
    emb_shard_apply(L->shard, es, pass, st, model_config_of(m)->emb_l2_all);
    free(dstash), free(voff), free(sp_j), free(sp_g), free(sp_first), free(kq), free(koff), free(sb_), free(rb);
    free(loss);
    return total;
}

/* Rows of lane l in a step of a batch of B rows over G lanes. */
static size_t lane_batch(size_t B, int G, int l) { return B / (size_t)G + ((size_t)l < B % (size_t)G); }

/* ---- commits (with a table folder) ---- */

#define CATALOG_MAGIC "CTRBXLNC"

/* Table t's keys pending admission, as 16-byte entries (key, show, click); and such entries put
 * into a table (those of keys rank `rank` of n owns; n 0: all). */
static size_t pending_blob(const emb_table *t, uint8_t **out)
{
    uint64_t *k;
    float *c;
    size_t n = emb_table_pending_entries(t, &k, &c);
    uint8_t *b = xmalloc(n * 16 + 1);
    for (size_t i = 0; i < n; i++) memcpy(b + 16 * i, &k[i], 8), memcpy(b + 16 * i + 8, &c[2 * i], 8);
    free(k), free(c);
    *out = b;
    return n * 16;
}

static void pending_put(emb_table *t, const uint8_t *b, size_t len, int rank, int n)
{
    for (size_t i = 0; i + 16 <= len; i += 16) {
        uint64_t k;
        float c[2];
        memcpy(&k, b + i, 8), memcpy(c, b + i + 8, 8);
        if (!n || emb_shard_owner(k, n) == rank) emb_table_pending_put(t, k, c[0], c[1]);
    }
}

#define PENDING_MAGIC "CTRBXLNP"

/* The catalog a commit saves on every rank: the job's part, the same bytes everywhere (magic,
 * version 2, ranks, lanes, lanes_state, the learning rates, the dense state (model_save_dense),
 * XXH64 of all before), then the rank's own: the keys it owns pending admission (magic, u32
 * tables, per table u64 bytes and its 16-byte entries (pending_blob), XXH64 of the section), and
 * the section's bytes as u64. Version 1 had the job's part alone. */
static void *catalog_make(lanes *L, const lanes_state *st, size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    CHECK(f);
    uint32_t v = 2, hdr[2] = { (uint32_t)L->N, (uint32_t)L->G };
    float lr[2] = { model_config_of(L->m)->dopt.lr, model_config_of(L->m)->sopt.lr };
    int ok = fwrite(CATALOG_MAGIC, 1, 8, f) == 8 && fwrite(&v, 4, 1, f) == 1 && fwrite(hdr, sizeof hdr, 1, f) == 1 &&
             fwrite(st, sizeof *st, 1, f) == 1 && fwrite(lr, sizeof lr, 1, f) == 1 && model_save_dense(L->m, f) == 0;
    CHECK(ok && fflush(f) == 0);
    uint64_t sum = XXH64(buf, n, 0);
    ok = fwrite(&sum, 8, 1, f) == 1;
    size_t common = n + 8;
    uint32_t T = (uint32_t)L->T;
    ok = ok && fwrite(PENDING_MAGIC, 1, 8, f) == 8 && fwrite(&T, 4, 1, f) == 1;
    for (int tb = 0; ok && tb < L->T; tb++) {
        uint8_t *b;
        uint64_t bytes = pending_blob(emb_shard_table(L->shard, tb), &b);
        ok = fwrite(&bytes, 8, 1, f) == 1 && fwrite(b, 1, bytes, f) == bytes;
        free(b);
    }
    CHECK(ok && fflush(f) == 0);
    uint64_t own = n - common + 16;
    sum = XXH64(buf + common, n - common, 0);
    ok = fwrite(&sum, 8, 1, f) == 1 && fwrite(&own, 8, 1, f) == 1;
    CHECK(ok && fclose(f) == 0);
    *len = n;
    return buf;
}

/* The bytes of the job's part of a catalog (all of a version 1 catalog's); 0 if it is not one. */
static size_t catalog_common(const void *blob, size_t len)
{
    const char *p = blob;
    uint32_t v;
    uint64_t own;
    if (len < 12 + 8 || memcmp(p, CATALOG_MAGIC, 8)) return 0;
    memcpy(&v, p + 8, 4);
    if (v == 1) return len;
    memcpy(&own, p + len - 8, 8);
    return v == 2 && own >= 16 && own <= len - 12 ? len - (size_t)own : 0;
}

/* A rank's own part of its catalog (tail, n bytes): the keys it owns pending admission into its
 * tables. 0, or -1 when it is damaged. */
static int catalog_load_pending(lanes *L, const uint8_t *tail, size_t n)
{
    uint64_t sum;
    uint32_t T;
    if (n < 12 + 16 || memcmp(tail, PENDING_MAGIC, 8) || (memcpy(&sum, tail + n - 16, 8), sum != XXH64(tail, n - 16, 0)))
        return -1;
    memcpy(&T, tail + 8, 4);
    if (T != (uint32_t)L->T) return -1;
    size_t at = 12;
    for (int tb = 0; tb < L->T; tb++) {
        uint64_t bytes;
        if (at + 8 > n - 16) return -1;
        memcpy(&bytes, tail + at, 8);
        at += 8;
        if (bytes % 16 || bytes > n - 16 - at) return -1;
        emb_table *own = emb_shard_table(L->shard, tb);
        emb_table_pending_clear(own);
        pending_put(own, tail + at, (size_t)bytes, 0, 0);
        at += (size_t)bytes;
    }
    return at == n - 16 ? 0 : -1;
}

static int catalog_load(lanes *L, const void *blob, size_t len0, lanes_state *st, char *err, size_t errlen)
{
    const char *p = blob;
    uint32_t v, hdr[2];
    uint64_t sum;
    size_t head = 8 + 4 + sizeof hdr + sizeof *st + 2 * sizeof(float), len = catalog_common(blob, len0);
    if (len < head + 8 || (memcpy(&sum, p + len - 8, 8), sum != XXH64(p, len - 8, 0)) ||
        (len < len0 && catalog_load_pending(L, (const uint8_t *)p + len, len0 - len) < 0)) {
        snprintf(err, errlen, "%s: the committed catalog is not a run in lanes, or is damaged", L->top);
        return -1;
    }
    memcpy(&v, p + 8, 4), memcpy(hdr, p + 12, sizeof hdr);
    if (hdr[0] != (uint32_t)L->N || hdr[1] != (uint32_t)L->G) {
        snprintf(err, errlen, "%s: committed by %u processes in %u lanes, resumed by %d in %d", L->top, hdr[0], hdr[1], L->N,
                 L->G);
        return -1;
    }
    memcpy(st, p + 12 + sizeof hdr, sizeof *st);
    float lr[2];
    memcpy(lr, p + 12 + sizeof hdr + sizeof *st, sizeof lr);
    model_set_lr(L->m, lr[0], lr[1]);
    lanes_set_sparse_lr(L, lr[1]);
    FILE *f = fmemopen((void *)(p + head), len - 8 - head, "rb");
    CHECK(f);
    char e[512];
    int ret = model_load_dense(L->m, f, e, sizeof e);
    fclose(f);
    if (ret < 0) snprintf(err, errlen, "%s: %s", L->top, e);
    return ret < 0 ? -1 : 0;
}

/* The pass's rows made durable on every rank, as one commit of the job: each prepares, rank 0
 * records the count once all have, each publishes. 0, or -2 with err (the job keeps its last
 * commit: a rank whose prepare failed says why, the others that another did). */
static int commit_batch(lanes *L, emb_tier_batch *b, const lanes_state *st, char *err, size_t errlen)
{
    uint64_t bytes = 0;
    emb_cache_put_dirty(L->cache, b, &bytes);
    size_t len;
    void *cat = catalog_make(L, st, &len);
    int ret = emb_tier_prepare(b, cat, len, err, errlen);
    free(cat);
    double t0 = now_sec();
    int all = dist_all(ret == 0);
    if (all && L->rank == 0) ret = emb_shards_write(L->top, L->N, L->G, L->commits + 1, err, errlen);
    all = all && dist_all(ret == 0);
    L->exchange_s += now_sec() - t0;
    if (!all) {
        if (ret == 0) snprintf(err, errlen, "another process could not commit pass %u: the table folder %s keeps commit %llu",
                               st->pass, L->top, (unsigned long long)L->commits);
        if (ret == 0 || L->rank == 0) emb_tier_discard(L->tier);
        return -2;
    }
    if (emb_tier_publish(L->tier, err, errlen) < 0) return -2;   /* the record stands: a resume publishes it */
    L->commits++;
    return 0;
}

static int commit_pass(lanes *L, const lanes_state *st, char *err, size_t errlen)
{
    emb_tier_batch *b = L->wb ? L->wb : emb_tier_begin(L->tier);
    L->wb = NULL;
    return commit_batch(L, b, st, err, errlen);
}

int lanes_shrink(lanes *L, const lanes_state *st, uint64_t *deleted, char *err, size_t errlen)
{
    const train_opts *o = L->o;
    *deleted = 0;
    if (o->shrink_threshold < 0 && !o->shrink_unseen) return 0;
    /* each owner judges its rows by the same rules at the same pass clock: the keys deleted do not
     * depend on who owns them */
    emb_shrink_opts so = { { o->shrink_threshold, o->shrink_unseen, o->nonclk_coeff, o->clk_coeff },
                           model_config_of(L->m)->decay, st->pass, L->admit ? L->F : 0, 0, 0 };
    emb_tier_batch *b = NULL;
    if (L->tier) {
        b = L->wb ? L->wb : emb_tier_begin(L->tier);
        L->wb = NULL;
    }
    int ret = 0;
    uint64_t n = 0;
    for (int tb = 0; tb < L->T && ret == 0; tb++) {
        emb_shrink_result r = { 0 };
        if (emb_shrink_table(emb_shard_table(L->shard, tb), L->tier, tb, L->tier ? &b : NULL, &so, &r, err, errlen) < 0)
            ret = -2;
        n += r.deleted;
    }
    if (!dist_all(ret == 0)) {   /* every rank alike, before the commit (a collective) */
        if (ret == 0) snprintf(err, errlen, "another process could not shrink its rows");
        if (b) emb_tier_abort(b);
        return ret < 0 ? ret : -1;
    }
    if (L->tier) {   /* the deletions and each rank's deletion record, committed as the job's */
        char *blob;
        size_t len;
        if (emb_deletions_blob(emb_shard_table_array(L->shard), L->T, &blob, &len) < 0) die("cannot serialise the deletion record");
        emb_tier_set_deletions(b, blob, len);
        if ((ret = commit_batch(L, b, st, err, errlen)) < 0) return ret;
    }
    int64_t d = (int64_t)n;
    dist_sum_i64(&d, 1);
    *deleted = (uint64_t)d;
    return 0;
}

int lanes_open_tier(lanes *L, uint32_t n_fields, lanes_state *st, int *resumed, char *err, size_t errlen)
{
    const train_opts *o = L->o;
    *resumed = 0;
    L->top = xstrdup(o->table_dir);
    int ok = mkdir(L->top, 0755) == 0 || errno == EEXIST, shape[2] = { 0, 0 };
    uint64_t k = 0;
    if (!ok) snprintf(err, errlen, "%s: cannot create folder: %s", L->top, strerror(errno));
    if (ok && L->rank == 0) ok = emb_shards_read(L->top, &shape[0], &shape[1], &k, err, errlen) == 0;
    if (!dist_all(ok)) {
        if (ok) snprintf(err, errlen, "%s: another process could not open it", L->top);
        return -1;
    }
    dist_bcast(&k, sizeof k);   /* rank 0's record, everywhere */
    dist_bcast(shape, sizeof shape);
    if (k && !o->resume && !o->init) {
        snprintf(err, errlen, "%s: holds a committed run; add --resume to continue it, or give an empty folder", L->top);
        return -1;
    }
    if (L->init_tiered && !k) {
        snprintf(err, errlen, "--init %s: its rows are in %s, a table folder of one process (or of no commit): a job on "
                 "several processes (or in lanes) trains on the sharded folder such a job wrote; train on this one in one "
                 "process", o->init, L->top);
        return -1;
    }
    if (L->init_tiered && !o->resume && k < L->init_commits) {
        snprintf(err, errlen, "--init %s: names commit %llu of %s, which holds %llu (not the folder the model was saved "
                 "from, or restored from an older copy)", o->init, (unsigned long long)L->init_commits, L->top,
                 (unsigned long long)k);
        return -1;
    }
    if (k && (shape[0] != L->N || shape[1] != L->G)) {
        snprintf(err, errlen, "%s: sharded for %d processes in %d lanes; %s it with mpirun -np %d and --lanes %d", L->top,
                 shape[0], shape[1], L->init_tiered ? "train on" : "resume", shape[0], shape[1]);
        return -1;
    }
    uint64_t rows_budget, window;
    size_t index;
    emb_cache_split_budget(o->cache_mb, &rows_budget, &index, &window);
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/rank-%d", L->top, L->rank);
    int r = mkdir(dir, 0755) < 0 && errno != EEXIST ? -1 : 0;
    if (r < 0) snprintf(err, errlen, "%s: cannot create folder: %s", dir, strerror(errno));
    if (r == 0) r = model_open_tier(L->m, dir, 0, index, &L->tier, err, errlen);
    int published = 0;
    if (r == 0) r = emb_tier_resolve_prepared(L->tier, k, &published, err, errlen);
    if (r == 0 && published) {   /* the job's last commit, prepared here before a crash: read as committed */
        emb_tier_close(L->tier);
        L->tier = NULL;
        r = model_open_tier(L->m, dir, 0, index, &L->tier, err, errlen);
    }
    if (r == 0 && emb_tier_commits(L->tier) != k) {
        snprintf(err, errlen, "%s: holds %llu commits, the job recorded %llu in %s/" EMB_SHARDS_FILE " (a folder from another "
                 "run, or damaged)", dir, (unsigned long long)emb_tier_commits(L->tier), (unsigned long long)k, L->top);
        r = -1;
    }
    void *blob = NULL;
    size_t len = 0;
    if (r == 0 && k) r = emb_tier_catalog(L->tier, &blob, &len, err, errlen) < 0 ? -1 : 0;
    /* every rank's catalog is the same bytes */
    uint64_t h = blob ? XXH64(blob, catalog_common(blob, len), 0) : 0, h0 = h;
    if (r != 0 && dist_rank() > 0) fprintf(stderr, "ctrbox: rank %d: %s\n", dist_rank(), err);   /* rank 0 says its own */
    if (!dist_all(r == 0)) {
        if (r == 0) snprintf(err, errlen, "%s: another process could not open its folder", L->top);
        free(blob);
        return -1;
    }
    dist_bcast(&h0, sizeof h0);
    if (!dist_all(h0 == h)) {
        snprintf(err, errlen, "%s: the processes' folders hold different commits (not one job's)", L->top);
        free(blob);
        return -1;
    }
    int fresh = L->init_tiered && !o->resume && k == L->init_commits;
    if (k && fresh) {   /* a new job from the model's commit: its dense state, rates, pass clock and pending keys */
        lanes_state was;
        r = catalog_load(L, blob, len, &was, err, errlen);
        if (r == 0) st->pass = was.pass;
    } else if (k) {   /* --resume, or the same --init command again: the job goes on from its last commit */
        r = catalog_load(L, blob, len, st, err, errlen);
        *resumed = r == 0;
    }
    if (k) {
        void *d = NULL;
        size_t dl = 0;
        if (r == 0 && (r = emb_tier_deletions(L->tier, &d, &dl, err, errlen)) == 0 && d)   /* what shrink deleted */
            r = emb_deletions_load(emb_shard_table_array(L->shard), L->T, d, dl, 0, err, errlen);
        free(d);
    } else if (o->resume && L->rank == 0 && !o->quiet) {
        fprintf(stderr, "--resume: %s has no committed pass yet; starting from the beginning\n", L->top);
    }
    free(blob);
    L->commits = k;
    if (fresh && dist_all(r == 0)) {   /* the folder the model names, not a copy of another */
        uint64_t id = 0, c;
        lanes_table_stamp(L, &id, &c);
        dist_bcast(&id, sizeof id);
        if (id != L->init_id) {
            snprintf(err, errlen, "--init %s: %s is not the folder the model was saved from (another run's, or rebuilt)",
                     o->init, L->top);
            r = -1;
        }
    }
    /* a warm start's rows (lanes_adopt_rows) are the first pass's; resumed, the folder's are newer */
    for (int tb = 0; k && tb < L->T; tb++) {
        emb_table *own = emb_shard_table(L->shard, tb);
        uint8_t *keep = xcalloc(emb_table_rows(own) + 1, 1);
        emb_table_keep_rows(own, keep, NULL);
        free(keep);
    }
    int *ftab = xmalloc((n_fields ? n_fields : 1) * sizeof *ftab);
    for (uint32_t f = 0; f < n_fields; f++) ftab[f] = model_field_table(L->m, (uint16_t)f);
    L->cache = emb_cache_create(emb_shard_table_array(L->shard), L->T, ftab, n_fields, rows_budget, o->cache_lfu);
    free(ftab);
    return dist_all(r == 0) ? 0 : -1;
}

/* ---- epochs ---- */

/* Train a shuffle buffer (pass st->pass, buffer st->chunk of epoch st->epoch): cnt[l] rows of
 * this rank's lanes (summed over the ranks here, to every lane's), lb[l] their rows; with a table
 * folder the pass's rows are loaded first and committed after. 0, -1 (diverged) or -2 with err. */
static int train_chunk(lanes *L, sample_block *lb, size_t *cnt, lanes_state *st, lanes_stats *x, char *err,
                       size_t errlen)
{
    int G = L->G, ret = 0;
    size_t B = (size_t)L->o->mc.batch, steps = 0;
    int64_t *all = xmalloc((size_t)G * sizeof *all);   /* every lane's rows: each rank counted its own */
    for (int l = 0; l < G; l++) all[l] = (int64_t)cnt[l];
    dist_sum_i64(all, G);
    for (int l = 0; l < G; l++) cnt[l] = (size_t)all[l];
    free(all);
    st->pass++;
    if (L->tier) {   /* the owners load the rows of every key of the pass */
        distinct_begin(L);
        for (int l = 0; l < G; l++)
            if (mine(L, l)) distinct_add(L, &lb[l], 0, lb[l].rows);
        size_t *rb = xmalloc((size_t)L->N * sizeof *rb);
        if (L->admit) distinct_defaults(L);
        void *in = ask_owners(L, rb, 0);
        L->pass = st->pass;
        ret = load_asked(L, in, rb, 0, err, errlen);
        free(in), free(rb);
        if (ret < 0) return ret;
    }
    size_t **order = xcalloc((size_t)G, sizeof *order);
    for (int l = 0; l < G; l++) {
        size_t bl = lane_batch(B, G, l), n = bl ? (cnt[l] + bl - 1) / bl : 0;
        if (n > steps) steps = n;
        if (mine(L, l)) order[l] = passes_order(L->o, cnt[l], st->epoch, st->chunk * (uint64_t)G + (uint64_t)l);
    }
    sample_block sb;
    block_init(&sb, lb[0].n_dense);
    size_t *grp = xmalloc(((size_t)G + 1) * sizeof *grp), *size = xmalloc((size_t)G * sizeof *size);
    int *grp_lane = xmalloc((size_t)G * sizeof *grp_lane);
    for (size_t s = 0; s < steps && ret == 0; s++) {
        block_clear(&sb);
        int n = 0;
        for (int l = 0; l < G; l++) {
            size_t bl = lane_batch(B, G, l), a = s * bl < cnt[l] ? s * bl : cnt[l], e = a + bl < cnt[l] ? a + bl : cnt[l];
            size[l] = e - a;
            if (!mine(L, l) || a == e) continue;
            grp[n] = sb.rows;
            grp_lane[n++] = l;
            if (order[l])
                for (size_t p = a; p < e; p++) block_append(&sb, &lb[l], order[l][p], order[l][p] + 1);
            else
                block_append(&sb, &lb[l], a, e);
        }
        grp[n] = sb.rows;
        double loss = step(L, &sb, grp, grp_lane, n, size, st->pass);
        x->keys += L->nk;
        if (!isfinite(loss)) {
            snprintf(err, errlen, "training diverged at epoch %d, step %llu: the loss or a gradient is not finite; "
                     DIVERGED_HINT " (the model is not saved%s)", st->epoch, (unsigned long long)model_step(L->m) + 1,
                     L->tier ? "; the table folder keeps its last commit" : "");
            ret = -1;
            break;
        }
        size_t rows = 0;
        for (int l = 0; l < G; l++) rows += size[l];
        st->epoch_loss += loss;
        st->epoch_rows += rows;
        st->epoch_steps++;
        st->rows_done += rows;
        x->rows += rows;
        x->steps++;
        if (L->on_step) {
            double t0 = now_sec();
            ret = L->on_step(L->on_step_ctx, err, errlen);
            x->hook_s += now_sec() - t0;
        }
    }
    for (int l = 0; l < G; l++) free(order[l]);
    free(order), free(grp), free(size), free(grp_lane);
    block_free(&sb);
    if (ret == 0) st->chunk++;
    if (ret == 0 && L->tier) ret = commit_pass(L, st, err, errlen);
    return ret;
}

static int lane_of(const lanes *L, uint64_t rec) { return (int)((rec / LANES_BLOCK) % (uint64_t)L->G); }
static int keep_mine(void *ctx, uint64_t rec) { lanes *L = ctx; return mine(L, lane_of(L, rec)); }

/* An epoch's reading: the rows of this rank's lanes gathered into shuffle buffers, each trained when
 * the records of the files pass its end. */
typedef struct {
    lanes *L;
    lanes_state *st;
    lanes_stats *x;
    sample_block *lb;             /* (G) the buffer's rows, lane by lane */
    size_t *cnt;                  /* (G) their counts */
    uint64_t cap, chunk, skip;    /* records a buffer; the buffer being filled; buffers committed */
    int failed;
    char *err;
    size_t errlen;
} epoch_read;

static void end_chunk(epoch_read *e)
{
    if (e->chunk >= e->skip) e->failed = train_chunk(e->L, e->lb, e->cnt, e->st, e->x, e->err, e->errlen);
    e->chunk++;
    for (int k = 0; k < e->L->G; k++) block_clear(&e->lb[k]);
    memset(e->cnt, 0, (size_t)e->L->G * sizeof *e->cnt);
}

/* Rows of this rank's lanes, in record order (rows order[i] of b, or its rows in turn without
 * order), into their lanes' buffers; the buffers before a row's are trained first. */
static void take_rows(epoch_read *e, const sample_block *b, const uint64_t *rec, const size_t *order)
{
    lanes *L = e->L;
    for (size_t i = 0; i < b->rows && !e->failed;) {
        size_t r = order ? order[i] : i;
        uint64_t c = rec[r] / e->cap;
        while (e->chunk < c && !e->failed) end_chunk(e);
        if (e->failed) break;
        int l = lane_of(L, rec[r]);
        CHECK(mine(L, l));
        size_t j = i + 1;   /* the run of rows of one lane in one buffer, next to each other in b */
        while (j < b->rows && (order ? order[j] : j) == r + (j - i) && rec[r + (j - i)] / e->cap == c &&
               lane_of(L, rec[r + (j - i)]) == l)
            j++;
        if (e->chunk >= e->skip) block_append(&e->lb[l], b, r, r + (j - i));   /* a committed buffer is only read past */
        e->cnt[l] += j - i;
        i = j;
    }
}

static int lane_rank(void *ctx, uint64_t rec) { lanes *L = ctx; return lane_of(L, rec) % L->N; }

int lanes_epoch(lanes *L, lanes_state *st, lanes_stats *x, char *err, size_t errlen)
{
    const train_opts *o = L->o;
    int G = L->G;
    memset(x, 0, sizeof *x);
    L->exchange_s = L->input_s = 0;
    L->bytes_sent = L->input_bytes = 0;
    data_source *s;
    if (source_open(&s, o->train, o->n_train, &o->in, err, errlen) < 0) return -2;
    source_split(s, L->N, L->rank);       /* this rank reads its pieces of the files */
    source_set_filter(s, keep_mine, L);   /* and parses its lanes' lines of a file every rank reads whole */
    uint32_t nd = source_schema(s)->n_dense;
    sample_block b, in;
    block_init(&b, nd);
    block_init(&in, nd);
    uint64_t *in_rec = NULL;
    size_t in_cap = 0, *order = NULL;
    epoch_read e = { L, st, x, xmalloc((size_t)G * sizeof *e.lb), xcalloc((size_t)G, sizeof *e.cnt), 0, 0, st->chunk,
                     0, err, errlen };
    for (int l = 0; l < G; l++) block_init(&e.lb[l], nd);
    /* a pass: --pass-rows records of the files, or the shuffle buffer's */
    e.cap = o->pass_rows ? o->pass_rows : o->shuffle_rows ? o->shuffle_rows : (uint64_t)o->mc.batch * 16;
    int64_t *counts = NULL;
    size_t n_counts = 0;
    int ret;
    source_window w;
    while (!e.failed && (ret = source_window_next(s, &w, err, errlen)) >= 0) {
        uint64_t agree[2] = { (uint64_t)ret, ret ? source_window_digest(s) : 0 };
        if (!dist_same(agree, sizeof agree)) {   /* a file grew or changed while the ranks opened it */
            snprintf(err, errlen, "%s: the processes see the input files with other sizes (a file changed while read)",
                     o->train[0]);
            e.failed = -1;   /* every rank alike */
            break;
        }
        if (ret == 0) break;
        if (w.whole) {   /* every rank reads it, each keeping its lanes' records */
            while (!e.failed && (ret = source_next(s, &b, err, errlen)) > 0) {
                x->own_rows += b.rows;
                take_rows(&e, &b, source_block_records(s), NULL);
            }
            if (ret < 0) break;
        } else {
            if (w.pieces > n_counts) counts = xrealloc(counts, (n_counts = w.pieces) * sizeof *counts);
            uint64_t lo = source_records(s);
            if ((ret = source_window_read(s, counts, err, errlen)) < 0) break;
            double t0 = now_sec();
            dist_sum_i64(counts, w.pieces);   /* every piece's lines, for the records' numbers */
            L->input_s += now_sec() - t0;
            if ((ret = source_window_parse(s, counts, &b, err, errlen)) < 0) break;
            x->own_rows += b.rows;
            /* each row to the rank of its lane, those of committed buffers left out */
            dist_ship_rows(&b, source_block_records(s), lane_rank, L, e.skip * e.cap, lo, source_records(s), &in, &in_rec,
                           &in_cap, &order, &L->input_s, &L->input_bytes);
            take_rows(&e, &in, in_rec, order);
        }
        /* the buffers the records read have passed: every rank trains them now, before the next window */
        while (!e.failed && (e.chunk + 1) * e.cap <= source_records(s)) end_chunk(&e);
    }
    if (!e.failed && ret < 0) e.failed = -2;
    x->records = source_records(s);
    x->own_bytes = source_bytes_read(s);
    /* the buffers left: up to the one of the last record */
    while (!e.failed && x->records && e.chunk <= (x->records - 1) / e.cap) end_chunk(&e);
    source_close(s);
    block_free(&b), block_free(&in);
    free(in_rec), free(order), free(counts);
    for (int l = 0; l < G; l++) block_free(&e.lb[l]);
    free(e.lb), free(e.cnt);
    x->exchange_s = L->exchange_s;
    x->bytes_sent = L->bytes_sent;
    x->input_s = L->input_s;
    x->input_bytes = L->input_bytes;
    return e.failed;
}

int lanes_predict(lanes *L, const sample_block *b, double *prob, char *err, size_t errlen)
{
    /* batch k of B rows (the batches one process predicts in, so each prediction is the same
     * bits) goes to rank k % N */
    size_t n = b->rows, B = (size_t)L->o->mc.batch, N = (size_t)L->N, nb = (n + B - 1) / B;
    int ret = 0;
    memset(prob, 0, n * sizeof *prob);
    for (size_t k0 = 0; k0 < nb; k0 += N) {   /* every rank the same number of exchanges */
        size_t k = k0 + (size_t)L->rank, a = k < nb ? k * B : n, e = a + B < n ? a + B : n;
        if (fetch_rows(L, b, a, e, 0, err, errlen) < 0) ret = -2;
        if (e > a) model_predict_batch(L->m, b, a, e, prob + a);
    }
    double t0 = now_sec();
    dist_sum_f64_ordered(prob, n);   /* the other ranks' predictions are zeros here: exact */
    L->exchange_s += now_sec() - t0;
    return ret;
}

void lanes_set_init_folder(lanes *L, uint64_t id, uint64_t commits)
{
    L->init_tiered = 1;
    L->init_id = id;
    L->init_commits = commits;
}

void lanes_set_step_hook(lanes *L, lanes_step_fn fn, void *ctx)
{
    L->on_step = fn;
    L->on_step_ctx = ctx;
}

void lanes_adopt_rows(lanes *L)
{
    for (int tb = 0; tb < L->T; tb++) {
        emb_table *t = model_table(L->m, tb), *own = emb_shard_table(L->shard, tb);
        for (size_t r = 0; r < emb_table_rows(t); r++) {
            emb_row_head *h = emb_table_head(t, (uint32_t)r);
            if (emb_shard_owner(h->key, L->N) == L->rank) emb_table_insert_record(own, h, 0);
        }
        uint8_t *b;   /* the keys pending admission: each owner its own */
        size_t len = pending_blob(t, &b);
        pending_put(own, b, len, L->rank, L->N);
        free(b);
        emb_table_pending_clear(t);
    }
    clear_tables(L);
}

void lanes_set_sparse_lr(lanes *L, float lr)
{
    for (int tb = 0; tb < L->T; tb++) emb_table_set_lr(emb_shard_table(L->shard, tb), lr);
}

static int cmp_rec_key(const void *a, const void *b)
{
    uint64_t x = ((const emb_row_head *)a)->key, y = ((const emb_row_head *)b)->key;
    return (x > y) - (x < y);
}

typedef struct {
    uint8_t *buf;
    size_t n, cap, rbytes;
} rec_list;

static int rec_list_add(void *ctx, const void *rec)
{
    rec_list *l = ctx;
    if (l->n == l->cap) l->buf = xrealloc(l->buf, (l->cap = l->cap * 2 + 1024) * l->rbytes);
    memcpy(l->buf + l->n++ * l->rbytes, rec, l->rbytes);
    return 0;
}

int lanes_tiered(const lanes *L) { return L->tier != NULL; }

void lanes_table_stamp(lanes *L, uint64_t *id, uint64_t *commits)
{
    uint64_t own = emb_tier_id(L->tier);
    void *all;
    dist_gather_bytes(&own, sizeof own, &all);
    if (L->rank == 0) *id = emb_tier_shards_id(all, L->N);
    free(all);
    *commits = L->commits;
}

int lanes_collect(lanes *L, char *err, size_t errlen)
{
    model *m = L->m;
    int ret = 0;
    clear_tables(L);
    for (int tb = 0; tb < L->T; tb++) {
        emb_table *own = emb_shard_table(L->shard, tb), *t = model_table(m, tb);
        rec_list l = { NULL, 0, 0, emb_table_row_bytes(own) };
        if (L->tier) {   /* every row is in the last commit (the rows in memory are clean copies) */
            if (ret == 0 && emb_tier_scan_rows(L->tier, tb, rec_list_add, &l, err, errlen) < 0) ret = -2;
        } else {
            for (size_t r = 0; r < emb_table_rows(own); r++) rec_list_add(&l, emb_table_head(own, (uint32_t)r));
        }
        void *all;
        size_t got = dist_gather_bytes(l.buf, l.n * l.rbytes, &all);
        free(l.buf);
        if (L->rank == 0) {
            size_t n = got / l.rbytes;
            qsort(all, n, l.rbytes, cmp_rec_key);
            for (size_t i = 0; i < n; i++) {
                emb_row_head *h = (emb_row_head *)((uint8_t *)all + i * l.rbytes);
                h->mark = 0;
                h->aux = 0;
                emb_table_insert_record(t, h, 0);
            }
        }
        free(all);
        if (L->admit) {   /* the owners' keys pending admission, into rank 0's table (saved in key order) */
            uint8_t *b;
            size_t len = pending_blob(own, &b);
            got = dist_gather_bytes(b, len, &all);
            free(b);
            if (L->rank == 0) {
                emb_table_pending_clear(t);
                pending_put(t, all, got, 0, 0);
            }
            free(all);
        }
    }
    /* the owners' deletion records (shrink), merged into rank 0's tables: a delta bundle carries them */
    char *blob = NULL;
    size_t len = 0;
    if (emb_deletions_blob(emb_shard_table_array(L->shard), L->T, &blob, &len) < 0) die("cannot serialise the deletion record");
    uint64_t n = len;
    void *lens, *all;
    dist_gather_bytes(&n, sizeof n, &lens);
    dist_gather_bytes(blob, len, &all);
    free(blob);
    if (L->rank == 0) {
        const uint8_t *p = all;
        for (int r = 0; r < L->N && ret == 0; r++) {
            memcpy(&n, (const uint8_t *)lens + (size_t)r * sizeof n, sizeof n);
            if (emb_deletions_load(model_tables(m), L->T, p, (size_t)n, 1, err, errlen) < 0) ret = -2;
            p += n;
        }
    }
    free(lens), free(all);
    return ret;
}
