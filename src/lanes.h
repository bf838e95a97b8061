/*
 * lanes.h: training one model with several processes (MPI, src/dist.h), or with one in the same
 * arithmetic (`--lanes G` without mpirun), so that the model does not depend on the number of
 * processes (issue 16).
 *
 * The rows are dealt to G lanes, a fixed number the user sets (not the number of ranks): row i of
 * the training files (counted over all files, in order) goes to lane (i / LANES_BLOCK) % G, and
 * lane l is trained by rank l % N. Each shuffle buffer (--shuffle-rows rows of the files) is
 * shuffled lane by lane (seeded by epoch, buffer and lane); a step takes the next B/G rows of every
 * lane (the first B % G lanes one more): the global batch is B rows, whatever N is.
 * A step: every rank asks the owners (embedding/shard.h) for the rows of its lanes' keys, computes
 * each lane's gradients alone (a lane's rows are one batch of the model), and the lanes' gradients
 * are summed exactly, as 64-bit fixed point at a scale every rank agrees on (from the step's
 * largest gradient): dense ones over all ranks (dist_sum_i64), sparse ones by each row's owner. A
 * sum of integers does not depend on its order, so neither does the model on N.
 * What this mode refuses (said at start): a table folder, admission (--min-show), batch norm,
 * dropout, placement on a device, --pass-rows, --follow, --init, shrink.
 */
#ifndef CTRBOX_SRC_LANES_H
#define CTRBOX_SRC_LANES_H

#include <stdint.h>
#include <stdio.h>

#include "../dense/model.h"
#include "train.h"

#define LANES_BLOCK 64   /* rows of the files dealt to one lane at a time */

typedef struct lanes lanes;

typedef struct {
    double loss_sum;          /* sum over the epoch's rows of the loss */
    uint64_t rows, steps;
    double exchange_s;        /* seconds in MPI calls (keys, rows, gradients, sums) */
    uint64_t bytes_sent;      /* this rank's bytes sent to other ranks in those calls */
    uint64_t keys;            /* distinct keys this rank asked the owners for, summed over steps */
} lanes_stats;

/* Why the options cannot train in lanes (a one-line message into err), or 0. */
int lanes_check(const train_opts *o, char *err, size_t errlen);
/* m: this rank's model (its tables hold a step's rows only; the rows it owns are the lanes'). */
lanes *lanes_create(const train_opts *o, model *m, int n_lanes);
void lanes_destroy(lanes *L);
/* One epoch over the training files; pass: the pass clock (counts). 0; -1 with err when training
 * diverged (every rank sees it); -2 with err when this rank could not read its input. */
int lanes_epoch(lanes *L, int epoch, uint32_t pass, lanes_stats *st, char *err, size_t errlen);
/* Predictions for every row of b (every rank holds b; each predicts its share with the owners'
 * rows): prob (b->rows) on every rank. */
void lanes_predict(lanes *L, const sample_block *b, double *prob);
/* The sparse learning rate of the rows this rank owns (after the model's changed). */
void lanes_set_sparse_lr(lanes *L, float lr);
/* Every owner's rows into rank 0's model tables, sorted by key (the model file is then the same
 * for any N); elsewhere the tables are left empty. */
void lanes_collect(lanes *L);

#endif
