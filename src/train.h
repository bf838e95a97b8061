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
#include "modelfile.h"

/* --admit-mb's default: the admission sketch's MB over all tables (16: 4 rows of a million cells
 * for a model of one table) */
#define ADMIT_MB_DEFAULT 16
/* What a divergence message suggests: the learning rates, or a feature value far beyond the
 * others (libsvm and libffm values are used as they are: a value of 1e30 overflows at once). */
#define DIVERGED_HINT "lower --lr or --sparse-lr, or look for feature values of extreme size in the data"

typedef struct {
    model_config mc;
    source_opts in;
    const char *schema_spec;      /* kept for the model file */
    int schema_given, offsets_given, num_given;   /* by the user: a cbx file's rows were read with its own */
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
    int lanes;                    /* train in this many lanes (src/lanes.h; 0: batch by batch, or 12 under mpirun) */
    int quiet;
    /* passes and the SSD tier (issue 4) */
    uint64_t pass_rows;           /* rows per pass (0: no passes unless a table folder is given) */
    const char *table_dir;        /* the SSD tier's folder, or NULL (tables in memory) */
    int resume;                   /* continue the run committed in table_dir */
    const char *init;             /* --init: warm start from this model folder */
    double cache_mb;              /* byte budget of the rows kept in memory with a table folder */
    int cache_lfu;                /* eviction: 1 frequency-aware (default), 0 LRU */
    double shrink_threshold;      /* delete keys whose score falls below this at each epoch end (<0: off) */
    uint32_t shrink_unseen;       /* delete keys unseen for this many passes (0: off) */
    float nonclk_coeff, clk_coeff;   /* score = (show - click) * nonclk + click * clk */
    const char *placement;        /* --placement: cpu (NULL), gpu, auto or LAYER=DEV,... (issue 5) */
    double gpu_mem_mb;            /* the pass tier's GPU memory when the rows are read there (0: none; < 0: half the GPU's) */
    /* a watched folder (src/follow.h) */
    const char *follow;           /* --follow DIR: train each complete entry of DIR once, in name order */
    double follow_idle;           /* end when nothing new comes for this many seconds (< 0: never) */
    int follow_done;              /* files need a done-file (NAME.done) */
    int progressive;              /* score each entry with the model before training on it */
    uint32_t export_every;        /* with export_dir: a bundle (base, then deltas) every that many passes */
    const char *export_dir;
} train_opts;

int train_run(const train_opts *o);

/* Read every row of the inputs into one block (caller frees); the schema is copied into schema
 * if not NULL. 0 or <0 with err. */
int train_read_rows(char *const *paths, int n, const source_opts *in, sample_block *all, data_schema *schema,
                  char *err, size_t errlen);

typedef struct {
    double auc, logloss, calibration, gauc;
    size_t rows, positives;
} eval_result;

/* Evaluate m on all rows of b; prob (b->rows) receives the predictions if not NULL.
 * group_field >= 0 adds gAUC grouped by the first key of that field. */
void train_evaluate_block(model *m, const sample_block *b, double *prob, int group_field, eval_result *r);
/* The metrics of predictions p of b's rows (labels; the group field's keys for gAUC). */
void train_block_metrics(const sample_block *b, const double *p, int group_field, eval_result *r);

#endif
