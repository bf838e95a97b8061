/*
 * shard.c: a rank's own rows, served and updated a step at a time (shard.h).
 */
#include "shard.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../io/util.h"

struct emb_shard {
    int n_tables;
    emb_table **tab;
    size_t *words;                 /* (n_tables) gradient record words */
    /* the step: requests in the order served */
    size_t n_req, cap_req;
    uint32_t *req_row;
    uint8_t *req_tb;
    /* rows that took gradients: their sums (row_off into acc), in the order first touched */
    size_t n_hit, cap_hit, acc_used, acc_cap;
    uint32_t *hit_row;
    uint8_t *hit_tb;
    size_t *hit_off;
    int64_t *acc;
};

emb_shard *emb_shard_create(emb_table *const *like, int n_tables)
{
    emb_shard *s = xcalloc(1, sizeof *s);
    s->n_tables = n_tables;
    s->tab = xmalloc((size_t)n_tables * sizeof *s->tab);
    s->words = xmalloc((size_t)n_tables * sizeof *s->words);
    for (int tb = 0; tb < n_tables; tb++) {
        s->tab[tb] = emb_table_create(emb_table_config_of(like[tb]));
        s->words[tb] = 2 + (size_t)emb_table_values(s->tab[tb]);
    }
    return s;
}

void emb_shard_destroy(emb_shard *s)
{
    if (!s) return;
    for (int tb = 0; tb < s->n_tables; tb++) emb_table_destroy(s->tab[tb]);
    free(s->tab), free(s->words);
    free(s->req_row), free(s->req_tb);
    free(s->hit_row), free(s->hit_tb), free(s->hit_off), free(s->acc);
    free(s);
}

emb_table *emb_shard_table(emb_shard *s, int tb) { return s->tab[tb]; }
emb_table *const *emb_shard_table_array(const emb_shard *s) { return s->tab; }
size_t emb_shard_grad_words(const emb_shard *s, int tb) { return s->words[tb]; }

void emb_shard_begin(emb_shard *s)
{
    s->n_req = 0;
    s->n_hit = 0;
    s->acc_used = 0;
}

void emb_shard_serve(emb_shard *s, int tb, const uint64_t *keys, size_t n, int create, float *out, uint8_t *found)
{
    emb_table *t = s->tab[tb];
    size_t V = (size_t)emb_table_values(t);
    if (s->n_req + n > s->cap_req) {
        s->cap_req = (s->n_req + n) * 2;
        s->req_row = xrealloc(s->req_row, s->cap_req * sizeof *s->req_row);
        s->req_tb = xrealloc(s->req_tb, s->cap_req);
    }
    for (size_t i = 0; i < n; i++) {
        int64_t r = create ? (int64_t)emb_table_get(t, keys[i]) : emb_table_find(t, keys[i]);
        if (r >= 0) memcpy(out + i * V, emb_table_vals(t, (uint32_t)r), V * sizeof(float));
        else memset(out + i * V, 0, V * sizeof(float));
        if (found) found[i] = r >= 0;
        s->req_row[s->n_req] = r >= 0 ? (uint32_t)r : UINT32_MAX;
        s->req_tb[s->n_req] = (uint8_t)tb;
        s->n_req++;
    }
}

size_t emb_shard_add(emb_shard *s, size_t first, size_t n, const int64_t *q)
{
    CHECK(first + n <= s->n_req);
    size_t used = 0;
    for (size_t i = first; i < first + n; i++) {
        int tb = s->req_tb[i];
        size_t w = s->words[tb];
        uint32_t row = s->req_row[i];
        if (row == UINT32_MAX) continue;   /* a key served no row (pending admission) sends no gradient */
        emb_row_head *h = emb_table_head(s->tab[tb], row);
        if (!h->mark) {
            if (s->n_hit == s->cap_hit) {
                s->cap_hit = s->cap_hit * 2 + 1024;
                s->hit_row = xrealloc(s->hit_row, s->cap_hit * sizeof *s->hit_row);
                s->hit_tb = xrealloc(s->hit_tb, s->cap_hit);
                s->hit_off = xrealloc(s->hit_off, s->cap_hit * sizeof *s->hit_off);
            }
            if (s->acc_used + w > s->acc_cap) {
                s->acc_cap = (s->acc_used + w) * 2;
                s->acc = xrealloc(s->acc, s->acc_cap * sizeof *s->acc);
            }
            s->hit_row[s->n_hit] = row;
            s->hit_tb[s->n_hit] = (uint8_t)tb;
            s->hit_off[s->n_hit] = s->acc_used;
            memset(s->acc + s->acc_used, 0, w * sizeof *s->acc);
            s->acc_used += w;
            h->mark = (uint32_t)++s->n_hit;
        }
        int64_t *a = s->acc + s->hit_off[h->mark - 1];
        for (size_t j = 0; j < w; j++) a[j] += q[used + j];
        used += w;
    }
    return used;
}

void emb_shard_apply(emb_shard *s, int exp, uint32_t pass, uint64_t step, float l2_all)
{
    int Vmax = 0;
    for (int tb = 0; tb < s->n_tables; tb++)
        if (emb_table_values(s->tab[tb]) > Vmax) Vmax = emb_table_values(s->tab[tb]);
    /* each row is updated once: in parallel, with the result of one thread */
    #pragma omp parallel
    {
        float *g = xmalloc((size_t)(Vmax ? Vmax : 1) * sizeof *g);
        #pragma omp for schedule(dynamic, 1024)
        for (size_t i = 0; i < s->n_hit; i++) {
            emb_table *t = s->tab[s->hit_tb[i]];
            int V = emb_table_values(t);
            const int64_t *a = s->acc + s->hit_off[i];
            emb_row_head *h = emb_table_head(t, s->hit_row[i]);
            emb_row_count(emb_table_config_of(t), h, (float)a[0], (float)a[1], pass);
            const float *v = emb_table_vals(t, s->hit_row[i]);
            for (int j = 0; j < V; j++) {
                g[j] = (float)ldexp((double)a[2 + j], -exp);
                if (l2_all > 0) g[j] += l2_all * v[j];
            }
            emb_table_update(t, s->hit_row[i], g, step);
        }
        if (l2_all > 0)   /* the rows no batch touched: the regularizer alone */
            for (int tb = 0; tb < s->n_tables; tb++) {
                emb_table *t = s->tab[tb];
                int V = emb_table_values(t);
                size_t rows = emb_table_rows(t);
                #pragma omp for schedule(dynamic, 1024)
                for (size_t r = 0; r < rows; r++) {
                    if (emb_table_head(t, (uint32_t)r)->mark) continue;
                    const float *v = emb_table_vals(t, (uint32_t)r);
                    for (int j = 0; j < V; j++) g[j] = l2_all * v[j];
                    emb_table_update(t, (uint32_t)r, g, step);
                }
            }
        free(g);
    }
    for (size_t i = 0; i < s->n_hit; i++) emb_table_head(s->tab[s->hit_tb[i]], s->hit_row[i])->mark = 0;
}

/* ---- the record of a sharded table folder ---- */

#define EMB_SHARDS_MAGIC "CTRBXSHD"

int emb_shards_read(const char *top, int *ranks, int *n_lanes, uint64_t *commits, char *err, size_t errlen)
{
    char path[4096];
    if (folder_path_check(top, err, errlen) < 0) return -1;
    snprintf(path, sizeof path, "%s/" EMB_SHARDS_FILE, top);
    *commits = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return 0;
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    uint8_t r[40] = { 0 };
    size_t got = fread(r, 1, sizeof r, f);
    fclose(f);
    uint32_t v, n, g;
    uint64_t c, sum;
    memcpy(&v, r + 8, 4), memcpy(&n, r + 12, 4), memcpy(&g, r + 16, 4), memcpy(&c, r + 24, 8), memcpy(&sum, r + 32, 8);
    if (got != sizeof r || memcmp(r, EMB_SHARDS_MAGIC, 8) || v != 1 || sum != XXH64(r, 32, 0)) {
        snprintf(err, errlen, "%s: not a ctrbox shard record, or damaged (its checksum fails)", path);
        return -1;
    }
    *ranks = (int)n, *n_lanes = (int)g, *commits = c;
    return 0;
}

int emb_shards_write(const char *top, int ranks, int n_lanes, uint64_t commits, char *err, size_t errlen)
{
    char path[4096];
    if (folder_path_check(top, err, errlen) < 0) return -1;
    snprintf(path, sizeof path, "%s/" EMB_SHARDS_FILE, top);
    uint8_t r[40] = { 0 };
    uint32_t v = 1, n = (uint32_t)ranks, g = (uint32_t)n_lanes;
    memcpy(r, EMB_SHARDS_MAGIC, 8), memcpy(r + 8, &v, 4), memcpy(r + 12, &n, 4), memcpy(r + 16, &g, 4);
    memcpy(r + 24, &commits, 8);
    uint64_t sum = XXH64(r, 32, 0);
    memcpy(r + 32, &sum, 8);
    int ret = durable_write(path, r, sizeof r);
    if (ret < 0) snprintf(err, errlen, "%s: cannot write: %s", path, strerror(-ret));
    return ret;
}
