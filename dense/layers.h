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

/* Binary cross-entropy on logits, mean over B: returns the loss; dlogit (B) = (sigmoid - y) / B
 * (NULL: skipped). Stable for large |logit|. */
double dense_bce_forward_backward(float *dlogit, const float *logit, const float *label, int B);

#endif
