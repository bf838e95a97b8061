/*
 * train.h: the training loop of `ctrbox train` and the evaluation helpers it shares with
 * `ctrbox eval` / `predict`.
 */
#ifndef CTRBOX_TRAIN_H
#define CTRBOX_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "../datasets/source.h"
#include "../dense/model.h"

typedef struct {
    model_config mc;
    source_opts in;
    const char *schema_spec;      /* kept for the model file */
    const uint64_t *offsets;
    char **train;
    int n_train;
    char **valid;
    int n_valid;
    const char *out;
    int epochs;
    int patience;                 /* stop after this many epochs without a better validation AUC */
    float lr_decay;               /* multiply learning rates by this when validation AUC does not improve */
    uint64_t eval_every;          /* also evaluate every N steps (0: per epoch only) */
    size_t shuffle_rows;          /* buffered shuffle of this many rows (0: keep file order) */
    int threads;
    int quiet;
} train_opts;

int train_run(const train_opts *o);

/* Read every row of the inputs into one block (caller frees); the schema is copied into schema
 * if not NULL. 0 or <0 with err. */
int read_all_rows(char *const *paths, int n, const source_opts *in, sample_block *all, data_schema *schema,
                  char *err, size_t errlen);

typedef struct {
    double auc, logloss, calibration, gauc;
    size_t rows, positives;
} eval_result;

/* Evaluate m on all rows of b; prob (b->rows) receives the predictions if not NULL.
 * group_field >= 0 adds gAUC grouped by the first key of that field. */
void evaluate_block(model *m, const sample_block *b, double *prob, int group_field, eval_result *r);

#endif
