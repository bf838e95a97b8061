/*
 * shrink.h: the CTR accessor's delete rules (PaddlePaddle's CtrCommonAccessor), applied to a
 * table's rows wherever they live: in memory, in the SSD tier, or both. One implementation for
 * the trainer (at each epoch end, inside the pass's commit) and for `ctrbox-table shrink`
 * (offline, on a model or a table folder), so the two delete the same keys.
 *
 * A key goes when it was unseen for more than `unseen` passes (0: off) or when its score
 * (show - click) * nonclk + click * clk, counters decayed to `pass` by `decay` (0 or 1: none), is
 * below `threshold` (< 0: off). The fields' shared default rows (admission) always stay.
 */
#ifndef CTRBOX_EMBEDDING_SHRINK_H
#define CTRBOX_EMBEDDING_SHRINK_H

#include <stddef.h>
#include <stdint.h>

#include "table.h"
#include "tier.h"

typedef struct {
    double threshold;
    uint32_t unseen;
    double nonclk, clk;
} emb_shrink_rule;

/* Whether a key with these counters goes at pass `pass`. */
int emb_shrink_doomed(const emb_shrink_rule *r, float decay, float show, float click, uint32_t last_pass, uint32_t pass);

typedef struct {
    emb_shrink_rule rule;
    float decay;
    uint32_t pass;             /* the clock the rule reads */
    uint32_t spare_fields;     /* the default rows of fields 0 .. spare_fields-1 stay (65536: any field) */
    uint64_t commit_every;     /* with a tier: commit every that many deletions (0: all in the caller's batch) */
    uint32_t note_pass;        /* the pass the table's deletion record notes (0: `pass`); an offline shrink
                                * of a model at pass P notes P + 1, after any bundle exported at P */
} emb_shrink_opts;

typedef struct {
    uint64_t deleted, kept;    /* default rows, and tier rows judged by their copy in memory, not counted */
} emb_shrink_result;

/* Shrink table tb: its rows in memory (t; NULL for none) and, with a tier, the rows only the tier
 * holds (a key in memory is judged by its newer copy there, and its tier copy goes with it).
 * Deletions from the tier go into *batch (begun by the caller; with commit_every it is committed
 * and begun again on the way, and the caller commits the last one). 0, or -1 with err (the tier
 * could not be read or a commit failed: *batch is then NULL or still the caller's to abort). */
int emb_shrink_table(emb_table *t, emb_tier *tier, int tb, emb_tier_batch **batch, const emb_shrink_opts *o,
                     emb_shrink_result *r, char *err, size_t errlen);

/* The deletion records of tables[0 .. n_tables) as one blob: the emb_table_save_deleted of each,
 * one after the other, in one zstd frame with its content checksum (the tier's "d" record, and what
 * the processes of one job send each other). 0, or -1. */
int emb_deletions_blob(emb_table *const *tables, int n_tables, char **blob, size_t *len);
/* Such a blob into the tables: replacing their records, or merged into them (emb_table_merge_deleted).
 * 0, or -1 with err. */
int emb_deletions_load(emb_table *const *tables, int n_tables, const void *blob, size_t len, int merge, char *err,
                       size_t errlen);

#endif
