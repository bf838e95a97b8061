/*
 * shrink.c: the delete rules over a table's tiers (shrink.h).
 */
#include "shrink.h"

#include <stdio.h>
#include <stdlib.h>
#include <zstd.h>

#include "../io/keymap.h"
#include "../io/util.h"

int emb_shrink_doomed(const emb_shrink_rule *r, float decay, float show, float click, uint32_t last_pass, uint32_t pass)
{
    if (r->unseen && pass > last_pass && pass - last_pass > r->unseen) return 1;
    if (r->threshold < 0) return 0;
    float f = emb_decay_factor(decay, last_pass, pass);
    double sh = show * f, cl = click * f;
    return (sh - cl) * r->nonclk + cl * r->clk < r->threshold;
}

typedef struct {
    emb_table *t;
    emb_tier *tier;
    int tb;
    emb_tier_batch **batch;
    const emb_shrink_opts *o;
    const key_map *spare;
    emb_shrink_result *r;
    uint64_t pending;          /* deletions in the batch since the last commit */
    int failed;
    char *err;
    size_t errlen;
} scan_ctx;

static int tier_key(void *p, uint64_t key, uint64_t slot, float show, float click, uint32_t last_pass)
{
    scan_ctx *s = p;
    if (s->t && emb_table_find(s->t, key) >= 0) return 0;   /* in memory: judged by its newer copy */
    if (key_map_get(s->spare, key)) return 0;
    if (!emb_shrink_doomed(&s->o->rule, s->o->decay, show, click, last_pass, s->o->pass)) {
        s->r->kept++;
        return 0;
    }
    emb_tier_del(*s->batch, s->tb, key, slot + 1);
    if (s->t) emb_table_note_deleted(s->t, key, s->o->note_pass ? s->o->note_pass : s->o->pass);
    s->r->deleted++;
    if (s->o->commit_every && ++s->pending == s->o->commit_every) {   /* bounded memory */
        int ret = emb_tier_commit(*s->batch, NULL, 0, s->err, s->errlen);
        *s->batch = NULL;
        if (ret < 0) return s->failed = 1;
        *s->batch = emb_tier_begin(s->tier);
        s->pending = 0;
    }
    return 0;
}

int emb_shrink_table(emb_table *t, emb_tier *tier, int tb, emb_tier_batch **batch, const emb_shrink_opts *o,
                     emb_shrink_result *r, char *err, size_t errlen)
{
    key_map spare = { 0 };
    key_map_init(&spare, 2);
    for (uint32_t f = 0; f < o->spare_fields; f++) key_set_add(&spare, emb_table_default_key((uint16_t)f));
    int ret = 0;
    if (tier) {
        scan_ctx s = { t, tier, tb, batch, o, &spare, r, 0, 0, err, errlen };
        ret = emb_tier_scan(tier, tb, tier_key, &s, err, errlen) < 0 || s.failed ? -1 : 0;
    }
    for (size_t row = t && ret == 0 ? emb_table_rows(t) : 0; row-- > 0;) {
        emb_row_head *h = emb_table_head(t, (uint32_t)row);
        if (key_map_get(&spare, h->key)) continue;
        if (!emb_shrink_doomed(&o->rule, o->decay, h->show, h->click, h->last_pass, o->pass)) {
            r->kept++;
            continue;
        }
        if (tier) emb_tier_del(*batch, tb, h->key, h->aux);   /* its committed copy, if any */
        emb_table_note_deleted(t, h->key, o->note_pass ? o->note_pass : o->pass);
        emb_table_remove(t, (uint32_t)row);
        r->deleted++;
    }
    key_map_free(&spare);
    return ret;
}

/* ---- the tables' deletion records as one blob ---- */

int emb_deletions_blob(emb_table *const *tables, int n_tables, char **blob, size_t *len)
{
    char *raw;
    size_t n;
    FILE *f = open_memstream(&raw, &n);
    if (!f) return -1;
    int ok = 1;
    for (int i = 0; ok && i < n_tables; i++) ok = emb_table_save_deleted(tables[i], f) == 0;
    if (fclose(f) != 0) ok = 0;
    if (!ok) {
        free(raw);
        return -1;
    }
    ZSTD_CCtx *z = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setParameter(z, ZSTD_c_checksumFlag, 1);
    *blob = xmalloc(ZSTD_compressBound(n));
    *len = ZSTD_compress2(z, *blob, ZSTD_compressBound(n), raw, n);
    ZSTD_freeCCtx(z);
    free(raw);
    if (ZSTD_isError(*len)) {
        free(*blob);
        return -1;
    }
    return 0;
}

int emb_deletions_load(emb_table *const *tables, int n_tables, const void *blob, size_t len, int merge, char *err,
                       size_t errlen)
{
    unsigned long long n = ZSTD_getFrameContentSize(blob, len);
    if (n == ZSTD_CONTENTSIZE_ERROR || n == ZSTD_CONTENTSIZE_UNKNOWN || n > ((uint64_t)1 << 40)) {
        snprintf(err, errlen, "deletion record: not a zstd frame of known size");
        return -1;
    }
    char *raw = xmalloc(n ? n : 1);
    size_t got = ZSTD_decompress(raw, n, blob, len);
    if (ZSTD_isError(got) || got != n) {
        snprintf(err, errlen, "deletion record: %s", ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
        free(raw);
        return -1;
    }
    FILE *f = fmemopen(raw, n ? n : 1, "rb");
    int ret = 0;
    for (int i = 0; ret == 0 && i < n_tables; i++)
        ret = merge ? emb_table_merge_deleted(tables[i], f, err, errlen) : emb_table_load_deleted(tables[i], f, err, errlen);
    if (ret == 0 && (size_t)ftell(f) != n) {
        snprintf(err, errlen, "deletion record: bytes after its %d tables", n_tables);
        ret = -1;
    }
    fclose(f);
    free(raw);
    return ret < 0 ? -1 : 0;
}
