/*
 * layers.h: the dense layers of the CPU backend, forward and backward side by side.
 *
 * Argument order: outputs, then inputs, then weights, then sizes; each buffer's shape is in the
 * comment beside it. Backward functions ADD into weight gradients (so one zeroing per step
 * suffices) and OVERWRITE input gradients unless the name says _acc. Row-major throughout; a
 * linear layer's weight is (OC, C) as in PyTorch. The CUDA backend keeps these names and
 * arguments and adds a stream last. Buffers are the caller's.
 */
#ifndef CTRBOX_DENSE_LAYERS_H
#define CTRBOX_DENSE_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "../embedding/sparse_optim.h"

/* The linear layers' products on the calling thread alone (on: 1) instead of OpenMP's threads: the
 * same results, slower. The preflight sets it where OpenBLAS could not be given a buffer for each
 * thread (dense/backend.c). */
void dense_products_one_thread(int on);
/* out (B, OC) = in (B, C) w^T (OC, C) + b (OC); b may be NULL */
void dense_linear_forward(float *out, const float *in, const float *w, const float *b, int B, int C, int OC);
/* din (B, C) = dout w (NULL: skipped); dw (OC, C) += dout^T in; db (OC) += column sums of dout */
void dense_linear_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                           const float *w, int B, int C, int OC);

/* out = max(in, 0) (n); in place allowed */
void dense_relu_forward(float *out, const float *in, size_t n);
/* din = dout * (out > 0); in place allowed */
void dense_relu_backward(float *din, const float *dout, const float *out, size_t n);

/* out = 1 / (1 + exp(-in)) */
void dense_sigmoid_forward(float *out, const float *in, size_t n);
/* din = dout * out * (1 - out) */
void dense_sigmoid_backward(float *din, const float *dout, const float *out, size_t n);

/* Inverted dropout: mask (n) keeps with probability 1-p, out = in * mask / (1-p). When !train,
 * out = in. The mask comes from (seed, step), so a run is reproducible. */
void dense_dropout_forward(float *out, uint8_t *mask, const float *in, size_t n, float p, uint64_t seed,
                           uint64_t step, int train);
void dense_dropout_backward(float *din, const float *dout, const uint8_t *mask, size_t n, float p);

/* Batch norm over the batch dimension of in (B, C). Training: batch statistics, saved mean (C)
 * and rstd (C), running statistics updated with momentum (PyTorch's rule, unbiased running
 * variance). Inference: running statistics. */
void dense_batchnorm_forward(float *out, float *mean, float *rstd, float *run_mean, float *run_var,
                             const float *in, const float *gamma, const float *beta, int B, int C,
                             float momentum, float eps, int train);
/* din (B, C); dgamma, dbeta (C) += */
void dense_batchnorm_backward(float *din, float *dgamma, float *dbeta, const float *dout, const float *in,
                              const float *mean, const float *rstd, const float *gamma, int B, int C);

/* Embedding pooling. Batch entries k (CSR row_ptr (B+1)) of sample b have unique-row index
 * uidx[k], field field[k] and value val[k]; unique row u's vector starts at emb + uoff[u].
 * slot[field] is the field's slot (F slots, -1: not pooled); slot s has dim[s] floats at offset
 * off[s] of each output row. out (B, W) = sum (or mean, by entry count) of val * vector per slot. */
void dense_pool_forward(float *out, const float *emb, const size_t *uoff, const uint32_t *uidx, const uint16_t *field,
                        const float *val, const uint64_t *row_ptr, const int32_t *slot, const int *off, const int *dim,
                        int mean, int B, int F, int W);
/* demb += val * dout[b, slot] (/ count for mean) for every entry */
void dense_pool_backward(float *demb, const float *dout, const size_t *uoff, const uint32_t *uidx, const uint16_t *field,
                         const float *val, const uint64_t *row_ptr, const int32_t *slot, const int *off, const int *dim,
                         int mean, int B, int F, int W);

/* FM second-order term: out (B) = 0.5 * sum_d ((sum_f e)^2 - sum_f e^2), e (B, F, D) */
void dense_fm_forward(float *out, const float *e, int B, int F, int D);
/* de (B, F, D) = dout[b] * (sum_f e - e) */
void dense_fm_backward(float *de, const float *dout, const float *e, int B, int F, int D);

/* Field-aware FM: e (B, F, F, D), e[b, f, g] is field f's vector toward field g.
 * out (B) = sum_{f<g} <e[b,f,g], e[b,g,f]> */
void dense_ffm_forward(float *out, const float *e, int B, int F, int D);
void dense_ffm_backward(float *de, const float *dout, const float *e, int B, int F, int D);

/* DCN-V2 cross layer: out (B, C) = x0 * (xl w^T + b) + xl; t (B, C) keeps xl w^T + b for backward */
void dense_cross_forward(float *out, float *t, const float *x0, const float *xl, const float *w, const float *b,
                         int B, int C);
/* dx0 (B, C) += dout * t; dxl (B, C) = dout + (dout * x0) w; dw (C, C), db (C) += ; tmp (B, C) scratch */
void dense_cross_backward(float *dx0, float *dxl, float *dw, float *db, float *tmp, const float *dout,
                          const float *x0, const float *xl, const float *t, const float *w, int B, int C);

/* DLRM dot interaction: out (B, P) with P = F(F-1)/2, the dot products <e[b,i], e[b,j]> for i > j
 * in row order (i = 1..F-1, j = 0..i-1), e (B, F, D) */
void dense_dot_forward(float *out, const float *e, int B, int F, int D);
void dense_dot_backward(float *de, const float *dout, const float *e, int B, int F, int D);

/* Concatenate per row: out (B, sum C) from parts in_i (B, C_i) */
void dense_concat_forward(float *out, const float *const *in, const int *C, int n, int B);
/* Split dout back: din_i (B, C_i) (NULL: skipped); _acc adds */
void dense_concat_backward(float *const *din, const float *dout, const int *C, int n, int B, int acc);

/* y (n) += x (n) */
void dense_add(float *y, const float *x, size_t n);

/* The wide part of a row: out (B) = sum over its entries k of a pooled field (slot[field[k]] >= 0)
 * of val[k] * w[uidx[k]], plus x (B, ND) wd (ND) (x, wd unread when ND = 0); w (U) the first-order
 * weights of the batch's unique rows; entries as pooling's (CSR row_ptr (B+1)). Each row's sum
 * is taken in entry order, then the dense terms. */
void dense_wide_forward(float *out, const float *w, const uint32_t *uidx, const uint16_t *field, const float *val,
                        const uint64_t *row_ptr, const int32_t *slot, const float *x, const float *wd, int B, int ND);
/* dw (U) += val * dout[b] for every pooled entry; dwd (ND) += x^T dout */
void dense_wide_backward(float *dw, float *dwd, const float *dout, const uint32_t *uidx, const uint16_t *field,
                         const float *val, const uint64_t *row_ptr, const int32_t *slot, const float *x, int B, int ND);

/* The logit: out (B) = bias[0] + in_0 + ... + in_{n-1} (each (B)), added in that order */
void dense_sum_forward(float *out, const float *const *in, int n, const float *bias, int B);
/* dbias (1) += the sum of dout (B), in row order (each input's gradient is dout itself) */
void dense_sum_backward(float *dbias, const float *dout, int B);

/* A linear layer to one output, each row's dot product taken in order (DCN-V2's head):
 * out (B) = in (B, C) w (C) + b[0] */
void dense_rowdot_forward(float *out, const float *in, const float *w, const float *b, int B, int C);
/* din (B, C) = dout w^T (NULL: skipped); dw (C) += in^T dout; db (1) += the sum of dout */
void dense_rowdot_backward(float *din, float *dw, float *db, const float *dout, const float *in, const float *w, int B,
                           int C);

/* A batch's unique rows out of a slab of row records (a device's pass tier): unique row u's record
 * starts at slab + rec[u] with its values (the first-order weight when has_w, then the embedding:
 * uoff[u+1] - uoff[u] floats) and the optimizer's state after them. w (U) = the weights (has_w),
 * e (uoff[U]) the embeddings at e + uoff[u]. */
void dense_rows_gather(float *w, float *e, const float *slab, const size_t *rec, const size_t *uoff, int has_w,
                       size_t U);
/* The sparse optimizer o at `step` inside each unique row's record (sparse_opt_update), with the
 * gradient dw[u] (has_w) and de (uoff[U]) at de + uoff[u]: what emb_batch_scatter does to a
 * table's rows. */
void dense_rows_update(float *slab, const size_t *rec, const size_t *uoff, const float *dw, const float *de, int has_w,
                       const sparse_opt *o, uint64_t step, size_t U);

/* Binary cross-entropy on logits, mean over B: returns the loss; dlogit (B) = (sigmoid - y) / B
 * (NULL: skipped). Stable for large |logit|. */
double dense_bce_forward_backward(float *dlogit, const float *logit, const float *label, int B);

#endif
