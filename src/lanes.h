/*
 * lanes.h: training one model with several processes (MPI, src/dist.h), or with one in the same
 * arithmetic (`--lanes G` without mpirun), so that the model does not depend on the number of
 * processes (issue 16).
 *
 * The records of the training files (their lines, bad ones included, or a cbx file's rows; counted
 * over all files, in order) are dealt to G lanes, a fixed number the user sets (not the number of
 * ranks): record i goes to lane (i / LANES_BLOCK) % G, and lane l is trained by rank l % N. Each
 * rank reads its own pieces of the files (byte ranges of a text file, blocks of a cbx file:
 * datasets/source.h), window by window: the pieces' line counts are summed over the ranks, which
 * numbers every record alike everywhere, and each row goes to the rank of its lane (one
 * MPI_Alltoallv a window). A compressed file cannot be cut: every rank reads it whole and parses
 * its lanes' lines only. Each judges the bad-line ratio of the lines it parsed. Each shuffle buffer
 * (--shuffle-rows records of the files) is
 * one pass: shuffled lane by lane (seeded by epoch, buffer and lane), and a step takes the next B/G
 * rows of every lane (the first B % G lanes one more): the global batch is B rows, whatever N is.
 * A step: every rank asks the owners (embedding/shard.h) for the rows of its lanes' keys, computes
 * each lane's gradients alone (a lane's rows are one batch of the model), and the lanes' gradients
 * are summed exactly, as 64-bit fixed point at a scale every rank agrees on (from the step's
 * largest gradient): dense ones over all ranks (dist_sum_i64), sparse ones by each row's owner. A
 * sum of integers does not depend on its order, so neither does the model on N.
 *
 * With a table folder (--table-dir DIR) each rank keeps its rows in its own SSD tier, DIR/rank-R,
 * under its own --cache-mb: before a pass the owners load the rows of its keys (the tier's reads,
 * then eviction of rows no pass key needs); after it every rank commits, in two phases: each
 * prepares its commit (emb_tier_prepare), and once all have, rank 0 records the job's commit count
 * in DIR/SHARDS.ctrbox and each publishes. A resume (--resume DIR) starts every rank from the
 * commit the record names (docs/formats.md). A folder is sharded for one number of ranks.
 * --pass-rows N makes a pass N records of the files instead of the shuffle buffer's. --init loads the
 * model file on every rank, each keeping the rows it owns; the pass clock and step go on.
 * Dropout draws each lane's masks from its own stream (model_set_dropout_stream).
 * Shrink (--shrink-threshold, --shrink-unseen) runs at each epoch's end, before its evaluation:
 * every owner judges its rows by the accessor's rules at the job's pass clock (lanes_shrink); with
 * a table folder the deletions are one commit of the job.
 * Batch norm normalizes each lane's rows by their own statistics (ghost batches of B/G rows, as a
 * data-parallel worker's batch norm uses its local batch); the running statistics move once a step,
 * from where they were, by the lanes' moves weighted by their rows, summed exactly as the gradients.
 * Admission (--min-show) counts exactly (--admit-mb 0; a sketch's collisions would depend on which
 * keys share a rank): the step's requests carry each key's shows and clicks, summed over the ranks'
 * lanes; the owner admits a key once its count reaches min_show (emb_table_admit) and serves the
 * fields' default rows, which every step fetches; a key left pending reads its field's default row,
 * which takes its gradient and shows. The owners' pending keys go into the model file (rank 0
 * gathers them) and into each rank's commits (its catalog's own part).
 * --init of a model whose rows are in a sharded folder trains on in that folder: from the model's
 * commit (its dense state, rates, pass clock and pending keys; the job's position starts afresh)
 * when the folder holds no later one, else as a resume (the same command again after a kill).
 * --placement: every rank places the layers as rank 0 planned (a rank's own timings could differ);
 * the lanes' summed gradients reach the placed layers' optimizer step (model_dense_apply).
 * What this mode refuses (said at start): a sketch for admission (--admit-mb > 0), --follow. --init with a table folder: each rank keeps the warm start's rows it owns in
 * front of its tier (a killed run goes on when the same command runs again, as in one process).
 * With a table folder, an evaluation in the middle
 * of a pass (--eval-every) loads the validation rows beside the pass's, which stay.
 */
#ifndef CTRBOX_SRC_LANES_H
#define CTRBOX_SRC_LANES_H

#include <stdint.h>
#include <stdio.h>

#include "../dense/model.h"
#include "train.h"

#define LANES_BLOCK 64   /* rows of the files dealt to one lane at a time */

typedef struct lanes lanes;

/* Where a run stands: what a commit saves (with the dense state and learning rates) and a resume
 * restores. */
typedef struct {
    int epoch;                /* the epoch in training (from 1) */
    uint64_t chunk;           /* its shuffle buffers trained (and committed) */
    uint32_t pass;            /* the pass clock: one pass a shuffle buffer */
    uint64_t rows_done;       /* rows trained, all epochs */
    double epoch_loss;        /* this epoch's so far: summed loss, rows, steps */
    uint64_t epoch_rows, epoch_steps;
    double best_auc;          /* validation: the best AUC, at which epoch, epochs since */
    int best_epoch, bad_epochs;
} lanes_state;

/* What one process measured (not saved). */
typedef struct {
    double exchange_s;        /* seconds in MPI calls (keys, rows, gradients, sums) */
    uint64_t bytes_sent;      /* this rank's bytes sent to other ranks in those calls */
    uint64_t keys;            /* distinct keys this rank asked the owners for, summed over steps */
    uint64_t steps, rows;
    double hook_s;            /* seconds in the step hook (evaluations): not training */
    uint64_t records;         /* records of the files (lines, rows of cbx files) */
    uint64_t own_rows;        /* rows this rank parsed (or decoded): of its pieces of the files, and of
                               * its lanes in a file every rank reads whole */
    uint64_t own_bytes;       /* bytes of the files this rank read by pieces */
    double input_s;           /* seconds in MPI calls for the input: pieces' line counts, rows shipped */
    uint64_t input_bytes;     /* rows this rank shipped to the ranks of their lanes, in bytes */
} lanes_stats;

/* Called by every rank after each step: 0, or <0 with err to stop the epoch (-1: every rank
 * alike; -2: this rank's own failure). */
typedef int (*lanes_step_fn)(void *ctx, char *err, size_t errlen);
void lanes_set_step_hook(lanes *L, lanes_step_fn fn, void *ctx);

/* Why the options cannot train in lanes (a one-line message into err), or 0. */
int lanes_check(const train_opts *o, char *err, size_t errlen);
/* m: this rank's model (its tables hold a step's rows only; the rows it owns are the lanes'). */
lanes *lanes_create(const train_opts *o, model *m, int n_lanes, uint32_t n_fields);
void lanes_destroy(lanes *L);
/* With o->table_dir: this rank's table folder, opened (made if new) under o->cache_mb; with
 * o->resume and a global commit, *st and the model's dense state and rates restored from it
 * (*resumed 1). Collective. 0, or -1 with err (every rank fails alike, except for its own folder's
 * faults: then the caller aborts the job). n_fields: the schema's. */
int lanes_open_tier(lanes *L, uint32_t n_fields, lanes_state *st, int *resumed, char *err, size_t errlen);
/* Train epoch st->epoch from its shuffle buffer st->chunk on, committing after each with a table
 * folder; st follows. 0; -1 with err when training diverged (every rank sees it); -2 with err when
 * this rank could not read its input or write its folder (the caller aborts the job). */
int lanes_epoch(lanes *L, lanes_state *st, lanes_stats *x, char *err, size_t errlen);
/* Predictions for every row of b (every rank holds b; each predicts batch k % N of b's batches of
 * --batch rows, as one process batches them): prob (b->rows) on every rank. 0, or -2 with err. */
int lanes_predict(lanes *L, const sample_block *b, double *prob, char *err, size_t errlen);
/* A warm start's rows (the model file --init loaded into the model's tables, on every rank): this
 * rank keeps those it owns; the model's tables are emptied. */
void lanes_adopt_rows(lanes *L);
/* The sparse learning rate of the rows this rank owns (after the model's changed). */
void lanes_set_sparse_lr(lanes *L, float lr);
/* At an epoch's end (collective): the keys the accessor's delete rules doom, deleted by their
 * owners (with a table folder, in one commit of the job, with each rank's deletion record);
 * *deleted over all ranks. 0, or <0 with err as lanes_epoch. */
int lanes_shrink(lanes *L, const lanes_state *st, uint64_t *deleted, char *err, size_t errlen);
/* Whether the rows are in a table folder (lanes_open_tier). */
int lanes_tiered(const lanes *L);
/* --init names a model whose rows are in a sharded table folder (id and commits as the model file
 * records them; the job trains on in that folder): before lanes_open_tier. */
void lanes_set_init_folder(lanes *L, uint64_t id, uint64_t commits);
/* With a table folder, for the model file that names it (collective): on rank 0 the id a reader
 * of the sharded folder sees (emb_tier_shards_id of the ranks' ids), and the job's commits. */
void lanes_table_stamp(lanes *L, uint64_t *id, uint64_t *commits);
/* In memory: every owner's rows into rank 0's model tables, sorted by key (the model file is then
 * the same for any N); elsewhere the tables are left empty. 0, or -2 with err. */
int lanes_collect(lanes *L, char *err, size_t errlen);

#endif
