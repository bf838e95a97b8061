/*
 * train_internal.h: the trainer's state, shared by the epoch loop (train.c) and the pass loop
 * with the SSD tier (passes.c).
 */
#ifndef CTRBOX_TRAIN_INTERNAL_H
#define CTRBOX_TRAIN_INTERNAL_H

#include <stdio.h>

#include "modelfile.h"
#include "train.h"

typedef struct {
    const train_opts *o;
    model *m;
    model_meta meta;
    sample_block valid;
    int have_valid;
    FILE *log;
    double best_auc;
    int bad_epochs;
    uint64_t rows_done, rows_epoch_prev;
    double t_start, t_epoch, t_last_print;
    double loss_sum;
    uint64_t loss_n;
    int epoch;
    uint64_t epoch_rows;          /* rows of one epoch, known after the first */
    uint32_t pass;                /* the pass number rows are counted under (the epoch without passes) */
    struct pass_state *ps;        /* pass mode (passes.c), or NULL */
    int tiered;                   /* rows in a table folder: the model kept is the last committed pass's */
    double train_seconds;         /* time in training steps (batch assembly included, reading not) */
} trainer;

void log_eval(trainer *t, const char *kind, const eval_result *r, double dt);
int save_model(trainer *t);
/* Evaluate on the validation set; keep the model if it is the best so far. 1 if it improved. */
int evaluate_and_keep(trainer *t, const char *kind);
void progress(trainer *t, int force);
/* Train on the rows of buf in (shuffled) order, one batch at a time. */
int train_buffer(trainer *t, sample_block *buf, uint64_t chunk);
/* The epochs in passes (--pass-rows, --table-dir): 0 or 1 (error reported). */
int train_passes(trainer *t);
/* Before evaluating: make the rows of the keys in b resident (pass mode with a tier). */
int passes_pull_for_eval(trainer *t, const sample_block *b);

#endif
