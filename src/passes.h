/*
 * passes.h: training in passes (AIBox): where each pass's rows come from and where they go.
 *
 * The trainer (train.c) drives one loop for every mode: for each epoch passes_begin_epoch; then
 * passes_next gives each pass with its rows in memory, the trainer trains it, passes_done commits
 * it; at the epoch's end passes_end_epoch, the trainer evaluates and decides, and
 * passes_commit_epoch commits that (with shrink). The modes:
 *   no --pass-rows, no table folder   one pass per epoch, streamed by the trainer from the files
 *                                     (the pass has no rows here: pass_item.rows is NULL)
 *   --pass-rows                       passes of that many rows, every row in memory
 *   --table-dir                       passes over the SSD tier, cut into parts that fit the
 *                                     budget, each part committed
 * The pass counter (run_state.pass) is the clock of decay and of unseen-shrink: it advances by
 * one at each passes_next. With a table folder, the run's state (run_state, the dense state, the
 * pending keys, the position in the data) is committed with each pass, and --resume restores it.
 */
#ifndef CTRBOX_SRC_PASSES_H
#define CTRBOX_SRC_PASSES_H

#include <stdint.h>
#include <stdio.h>

#include "train.h"

/* Where the run stands: what the trainer counts and a commit saves. */
typedef struct {
    uint32_t pass;            /* passes begun */
    int epoch;
    uint64_t rows_done;       /* rows trained, all epochs */
    uint64_t loss_n;          /* this epoch's rows and summed loss */
    double loss_sum;
    double best_auc;
    int bad_epochs;           /* epochs since the best validation AUC */
    double train_seconds;     /* time in training steps (batch assembly included, reading not) */
} run_state;

typedef struct passes passes;

/* What the trainer trains next: a pass, or a part of one. With a table folder a pass is cut,
 * in its training order and at batch boundaries, into parts whose keys' rows fit the cache
 * budget (--cache-mb); each part is fetched, trained and committed as a pass was, and the pass
 * clock moves once a pass. The parts train the pass's batches unchanged, so the model does not
 * depend on the budget. Without --pass-rows a table folder's passes are the shuffle buffer's
 * (train_stream's chunks) and the epoch is one pass of the clock, as streamed in memory. */
typedef struct {
    const sample_block *rows;   /* the pass's rows; NULL: the whole epoch, read by the trainer */
    const size_t *order;        /* its training order (NULL: the rows' own) */
    size_t lo, hi;              /* the positions of order this item trains */
    uint64_t index;             /* 1-based pass number within the epoch */
    const key_vec *keys;        /* per table: its distinct keys (NULL: streamed) */
    const key_vec *next_keys;   /* the next item's, when it is read already (else NULL) */
} pass_item;

/* The training order of a pass (or shuffle buffer) of n rows, chunk its number within the
 * epoch: a seeded shuffle, or NULL (file order) without --shuffle-rows. Caller frees. */
size_t *passes_order(const train_opts *o, size_t n, int epoch, uint64_t chunk);

/* Open the run of o on model m (schema: the data's), its table folder table_dir (absolute; NULL
 * for none), pass lines into log. With --resume the committed state is restored into rs and m,
 * and *start_epoch / *skip (passes of that epoch already done) say where the run goes on.
 * init (a warm start from a tiered model, --init; NULL for none: the model's table folder, id and
 * commit count): that commit, which the folder must still hold, gives m its dense state and pending
 * keys and rs its pass clock, and the run starts anew on its own data; unless the folder's last
 * commit is this same run's (same settings and data: it was killed), which then resumes. An init
 * with id 0 is a bare table folder (ctrbox-table import): its rows, with its last commit's dense
 * state if it has one, else fresh dense layers from pass 0.
 * 0, or -1 (said on stderr). */
int passes_open(passes **out, const train_opts *o, model *m, const data_schema *schema, const char *table_dir,
                const model_meta *init, FILE *log, run_state *rs, int *start_epoch, uint64_t *skip);
/* Stop the threads (the last commit made durable first) and close: 0, or -1 if a commit failed. */
int passes_close(passes *p);
/* Whether the rows live in a table folder (the model kept is the last committed pass's). */
int passes_tiered(const passes *p);
/* Whether the run resumes inside a pass (its last commit was made after a part, not at a pass's
 * end): until the first pass begins. */
int passes_resumes_mid_pass(const passes *p);

/* The run goes on with other training files (--follow's next entry; o's files changed), as a warm
 * start from the last commit (the model kept now) would: a new run on its own data. The caller
 * resets the run state but its pass clock. 0, or -1 (said). */
int passes_restart(passes *p);

/* Start epoch rs->epoch, skipping its first `skip` passes (a resume). */
void passes_begin_epoch(passes *p, uint64_t skip);
/* The next pass, its rows in memory and the cache within its budget; NULL at the epoch's end or
 * after an error (passes_end_epoch says which). The item is valid until passes_done. */
const pass_item *passes_next(passes *p);
/* The item is trained (t_train seconds): report it; with a table folder commit it at its pass's end
 * (or earlier, see passes_flush). 0 or -1. */
int passes_done(passes *p, double t_train);
/* Commit now what was trained since the last commit (with a table folder; passes commit at a
 * pass's end, or at a part's end when the rows written back since fill their share of the budget):
 * a run asked to stop goes on from here. 0 or -1 (said). */
int passes_flush(passes *p);
/* End the epoch (also after a failed pass): 0, or -1 if reading or fetching failed (said). */
int passes_end_epoch(passes *p);
/* The epoch's end is decided (evaluation, learning rate): shrink by the accessor's rules and
 * commit, durably; *shrunk: the keys deleted. 0 or -1. */
int passes_commit_epoch(passes *p, uint64_t *shrunk);

/* Before evaluating b: make the rows of its keys resident (with a table folder). 0 or -1. */
int passes_pull(passes *p, const sample_block *b);
/* The commit a model file saved now pairs with, once durable: the folder's id and commit count
 * (0 and 0 without a table folder). 0, or -1 if that commit failed. */
int passes_stamp(passes *p, uint64_t *id, uint64_t *commits);

/* Open m's table folder dir (its layout line must be m's: "MODEL;t0:dim=D,w=0|1,opt=NAME,state=S;...").
 * 0, or <0 with err. */
int model_open_tier(model *m, const char *dir, int readonly, size_t index_cache, struct emb_tier **out, char *err,
                    size_t errlen);
/* Read from the model's table folder (meta->table_dir) the rows of every key in b into m's tables
 * (a model whose rows live in a table folder, before it scores b); the folder must still hold the
 * rows the model in model_dir was saved with. 0, or <0 with a message in err. */
int model_pull_from_tier(model *m, const char *model_dir, const model_meta *meta, const sample_block *b, char *err,
                         size_t errlen);

/* The serving bundle of the run's model as of its last commit, made durable first (meta: the
 * model's description, its pass clock set) to path: since < 0 a base, else a delta since that pass
 * (modelfile_bundle_save), in fp32; since_state: the state of the model the delta goes on from (0:
 * not known). *state: the state of the model exported (modelfile_state_of). 0, or <0 with err. */
int passes_export(passes *p, const model_meta *meta, const char *path, int64_t since, uint64_t since_state,
                  uint64_t *state, char *err, size_t errlen);

/* Write the serving bundle of the model in model_dir to out (modelfile_bundle_save: since < 0 a
 * base, else a delta since that pass), its rows read from memory or streamed from its table folder
 * (whose last commit, the model's, gives the tables' deletion record). *rows, *tables: what it
 * holds; the bundle names the model's state (modelfile_state), and a delta since_state, the state of
 * the model it goes on from (0: not known). 0, or <0 with err. */
/* A tiered model's table folder (meta->table_dir), opened read-only and checked to hold the
 * model's commit; a folder that is not there is named with the --table-dir hint. 0 or <0 with err. */
int model_tier_open(model *m, const char *model_dir, const model_meta *meta, struct emb_tier **tier, char *err,
                    size_t errlen);
int model_export_bundle(const char *model_dir, const char *table_dir, const char *out, int dtype, int64_t since,
                        uint64_t since_state, uint64_t *rows, int *tables, char *err, size_t errlen);

#endif
