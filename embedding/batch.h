/*
 * batch.h: a batch's rows of the sparse tables. Gather finds the batch's distinct keys, the row
 * each trains (created, counted, or read at inference), and copies the rows' values into
 * contiguous arrays the dense layers read; scatter applies the optimizer inside each of those
 * rows with the gradients the layers left beside them.
 *
 * The views after a gather (valid until the next one):
 *   U                the unique rows, in the order their keys are first seen in the batch
 *   uidx (nnz)       entry k of the batch (k - row_ptr[r0]) -> its unique row
 *   uoff (U + 1)     offset of each unique row's embedding in Ue / dUe (widths differ by table)
 *   Uw (U), Ue (uoff[U])    first-order weights and embeddings of the unique rows
 *   dUw, dUe         their gradients, same shapes: zeroed and filled by the dense backward
 * Keys are de-duplicated per batch (several keys may share a row: a field's default row with
 * admission); each unique row is then updated once, so the update runs in parallel with the
 * result of one thread. The row header's `mark` is this module's scratch during a gather or a
 * scatter and 0 otherwise. The batch borrows the tables; it owns its arrays.
 */
#ifndef CTRBOX_EMBEDDING_BATCH_H
#define CTRBOX_EMBEDDING_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "../io/block.h"
#include "table.h"

typedef enum {
    EMB_GATHER_TRAIN = 0,   /* count shows and clicks, create rows (admission: default rows) */
    EMB_GATHER_NO_COUNT,    /* nothing counted; a missing key gets a row, with admission its field's
                             * default row (the rows were given: src/lanes.c) */
    EMB_GATHER_INFER,       /* nothing created: unknown keys read a zero row */
    EMB_GATHER_NO_VALUES = 0x10,   /* with a mode: find, create and count the rows, but leave Uw and Ue
                                    * unset (the rows' values are read elsewhere: a device's pass tier) */
} emb_gather_mode;

typedef struct emb_batch emb_batch;

/* tabs (n_tables, borrowed); field_table (n_fields): the table of each categorical field's keys
 * (-1 for a numeric one, which has no keys); has_w: the rows start with a first-order weight. */
emb_batch *emb_batch_create(emb_table *const *tabs, int n_tables, const int *field_table, uint32_t n_fields, int has_w);
void emb_batch_destroy(emb_batch *eb);

void emb_batch_gather(emb_batch *eb, const sample_block *b, size_t r0, size_t r1, uint32_t pass, emb_gather_mode mode);

size_t emb_batch_unique(const emb_batch *eb);
const uint32_t *emb_batch_uidx(const emb_batch *eb);
const size_t *emb_batch_uoff(const emb_batch *eb);
const float *emb_batch_w(const emb_batch *eb);
const float *emb_batch_e(const emb_batch *eb);
float *emb_batch_dw(emb_batch *eb);
/* Unique row u's table and row (row UINT32_MAX: inference's zero row for unknown keys). */
void emb_batch_unique_row(const emb_batch *eb, size_t u, int *table, uint32_t *row);
const float *emb_batch_dw_const(const emb_batch *eb);
const float *emb_batch_de_const(const emb_batch *eb);
float *emb_batch_de(emb_batch *eb);

/* The optimizer inside each gathered row with its gradient (dUw, dUe), at step `step`. With
 * l2_all > 0 every row of every table also gets l2_all * value (FuxiCTR's embedding
 * regularizer over the whole table, every step). */
void emb_batch_scatter(emb_batch *eb, uint64_t step, float l2_all);
/* Gradient of a table row's values (has_w + embedding floats) from the last backward; 0 if the
 * row was gathered, -1 if not. */
int emb_batch_row_grad(const emb_batch *eb, int table, uint32_t row, float *g);

#endif
