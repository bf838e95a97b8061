/*
 * model.h: the CTR models, each a composition of the dense layers over pooled embeddings.
 *
 *   lr        bias + sum of first-order weights + linear on dense values
 *   fm        lr + FM second-order term
 *   ffm       lr + field-aware FM (each key has one dim-vector per field)
 *   dnn       MLP on [pooled embeddings, dense values]
 *   widedeep  lr + dnn
 *   deepfm    lr + FM + dnn
 *   dcnv2     cross network (DCN-V2) and MLP in parallel on [embeddings, dense], linear on both
 *   dlrm      bottom MLP on dense values -> dot interaction with the embeddings -> top MLP
 *             (or, with dlrm_cat, the concatenated vectors into the top MLP)
 *
 * A model owns its sparse table (embedding/table.h) and one block each for dense parameters,
 * gradients and optimizer moments (views into them per layer), plus activation buffers sized for
 * the batch. A training step: gather the batch's rows (de-duplicated), forward, backward,
 * sparse update inside each touched row, dense optimizer step.
 */
#ifndef CTRBOX_DENSE_MODEL_H
#define CTRBOX_DENSE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "../io/block.h"
#include "../embedding/batch.h"
#include "../embedding/table.h"
#include "devrows.h"
#include "optim.h"
#include "plan.h"

typedef enum {
    MODEL_LR = 0, MODEL_FM, MODEL_FFM, MODEL_DNN, MODEL_WIDEDEEP, MODEL_DEEPFM, MODEL_DCNV2, MODEL_DLRM,
    MODEL_COUNT
} model_kind;

#define MODEL_MAX_LAYERS 8

typedef struct {
    model_kind kind;
    int dim;                               /* embedding size */
    int n_hidden, hidden[MODEL_MAX_LAYERS];   /* MLP (dnn, widedeep, deepfm, dcnv2 deep, dlrm top) */
    int n_bottom, bottom[MODEL_MAX_LAYERS];   /* dlrm bottom MLP; its last size is dim */
    int cross_layers;                      /* dcnv2 */
    int dlrm_cat;                          /* dlrm interaction: 0 dot products (+ bottom output), 1 concatenation (FuxiCTR's "cat") */
    int batchnorm;
    float dropout;
    int pool_mean;                         /* mean pooling of multi-hot fields (default sum) */
    float init_std;                        /* embedding init */
    uint64_t seed;
    int batch;                             /* largest batch */
    dense_opt dopt;
    sparse_opt sopt;
    float emb_l2_all;                      /* L2 (coefficient/2 * ||E||^2) on every row each step */
    uint32_t min_show;
    float admit_mb;                        /* with min_show > 1: the admission sketch's MB over all tables
                                              (0: exact counts; < 0 before train resolves the default) */
    float decay;                           /* show/click decay per pass (0: none) */
    int table_per_field;                   /* one table per categorical field (default: one shared) */
    char field_dims[512];                  /* "NAME=DIM,...": these fields get a table of that size */
} model_config;

int model_kind_from_name(const char *name);   /* -1 if unknown */
const char *model_kind_name(model_kind k);
/* Defaults for kind: dim 16, hidden 400,400,400, 3 cross layers, dlrm bottom 64,dim; Adam. */
void model_config_default(model_config *c, model_kind kind);

typedef struct model model;

/* Whether a and b describe the same architecture (what a warm start cannot change: the model,
 * sizes, layers, tables and optimizer kinds; rates, decay and the like may differ): 0, or 1 with
 * the first difference in out ("--dim 16 in the model, 8 here"). */
int model_config_diff(const model_config *a, const model_config *b, char *out, size_t n);

/* Whether c fits the schema (field names in field_dims exist and are categorical; models that
 * combine fields' vectors pairwise need one size for all): 0, or -1 with a message in err. */
int model_config_check(const model_config *c, const data_schema *schema, char *err, size_t errlen);

/* The schema says which fields are categorical (pooled) and how many dense values a row has. */
model *model_create(const model_config *c, const data_schema *schema);
void model_destroy(model *m);
const model_config *model_config_of(const model *m);
/* The sparse tables: one shared by all fields, or several (table_per_field, field_dims). */
int model_n_tables(const model *m);
emb_table *model_table(model *m, int i);
/* All of them, (model_n_tables) borrowed for the model's life. */
emb_table *const *model_tables(const model *m);
/* The table a field's keys live in; -1 for a numeric field. */
int model_field_table(const model *m, uint16_t field);

/* One training step on rows [r0, r1) of b (r1 - r0 <= batch); returns the mean loss. */
double model_train_batch(model *m, const sample_block *b, size_t r0, size_t r1, uint32_t pass);
/* Probabilities of rows [r0, r1) (inference mode: running BN statistics, no dropout, unknown
 * keys read zeros or their field's default row). */
void model_predict_batch(model *m, const sample_block *b, size_t r0, size_t r1, double *prob);

/* For gradient checks: the loss of rows [r0, r1) in training mode with gradients left in the
 * gradient block (of model_dense, also for placed layers) and per-row gradients, without any
 * update and without counting shows (with admission a key without a row reads its field's default
 * row). */
double model_loss_and_grads(model *m, const sample_block *b, size_t r0, size_t r1);
/* After model_loss_and_grads: the batch's rows and their gradients (embedding/batch.h's views). */
const emb_batch *model_batch_rows(const model *m);
/* The dense optimizer step with the gradients in the block model_dense hands out (set by the
 * caller: a sum over processes); counts the step, which it returns (the sparse rows' step). */
uint64_t model_dense_apply(model *m);
/* Dense parameters and their gradients (n floats each), brought up to date from layers placed on
 * a device; edits made through them reach those layers at the next step or prediction. */
void model_dense(model *m, float **params, float **grads, size_t *n);
/* The batch-norm running statistics (one block; n 0 without batch norm), on the host: a caller may
 * change them, as model_dense's parameters. */
void model_buffers(model *m, float **buffers, size_t *n);
/* Gradient of a table row's values from the last model_loss_and_grads (values floats); 0 if the
 * row took part, -1 if not. */
int model_row_grad(const model *m, int table, uint32_t row, float *g);

/* The model as the planner's chain of layers (plan.h), in forward order with the inputs each
 * reads: embedding pooling, wide part, interaction, MLP layers, head, loss. Returns the count
 * (at most max). */
int model_layer_chain(const model *m, plan_layer_shape *out, int max);
/* Run the chain's layers where dev (one per chain layer) says; every layer can run on a device.
 * A placed layer keeps its parameters, gradients, moments and activations there; an activation
 * or gradient crosses only where its producer and its reader run on different sides (the batch's
 * entries and rows go up once a step when a layer there reads them). Call once, after
 * model_create (model_load_dense later updates the devices). 0, or -1 with err (a device that is
 * absent). */
int model_place(model *m, const place_device *dev, int n, char *err, size_t errlen);

/* The pass tier (dense/devrows.h): with the embedding layer or the wide part on a device, the rows
 * the batches train live in its memory, within budget bytes, gathered and updated there by
 * model_train_batch. Whether the rows are read on a device; set up the tier (0, or -1 with err:
 * the rows are on the cpu, or --emb-l2 updates every row each step). */
int model_rows_on_device(const model *m);
int model_set_row_tier(model *m, uint64_t budget, char *err, size_t errlen);
/* Write the rows the device changed back into the tables (they stay there, clean): before anything
 * reads the tables' values (a commit, a save; model_predict_batch and model_all_finite do it). */
void model_rows_sync(model *m);
/* The same, then forget every row in device memory: before rows change on the host (shrink). */
void model_rows_drop(model *m);
/* Send the rows of keys (per table: a pass's distinct keys) to the tier ahead of the batches that
 * read them, without waiting (dev_rows_prefetch); nothing without a tier or keys. */
void model_rows_prefetch(model *m, const key_vec *keys);
/* The tier, or NULL (its counts for the log). */
const dev_rows *model_row_tier(const model *m);

/* Dense state (parameters, BN running statistics, optimizer moments, step) to/from a stream:
 * magic, version, sizes and an XXH64. 0 or -errno / -EBADMSG. */
int model_save_dense(const model *m, void *file);
int model_load_dense(model *m, void *file, char *err, size_t errlen);
uint64_t model_step(const model *m);
/* Whether the dense state (parameters, BN statistics, moments) and every row of the in-memory
 * tables are finite: a diverged run turns them NaN or inf, and such a model is not saved. */
int model_all_finite(model *m);
int model_dense_finite(model *m);
/* Scale both learning rates (dense and sparse) by factor. */
void model_scale_lr(model *m, float factor);
/* Set the dense and sparse learning rates (a resumed run's, as committed). */
void model_set_lr(model *m, float dense, float sparse);
/* Which masks dropout draws (stream 0 unless set): a lane sets its own, so that the lanes of a step,
 * each a batch of the same step, do not drop the same units of their rows. */
void model_set_dropout_stream(model *m, uint64_t stream);

#endif
