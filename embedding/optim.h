/*
 * optim.h: the optimizers' flat loops over n floats, shared by the dense parameter block
 * (dense/optim.h) and the values inside each sparse row (sparse_optim.h). p: parameters, g:
 * gradients (l2 is added to them: g + l2 * p); the moments are updated in place.
 */
#ifndef CTRBOX_EMBEDDING_OPTIM_H
#define CTRBOX_EMBEDDING_OPTIM_H

#include <stddef.h>
#include <stdint.h>

/* Adam on n values: m, v moments; the step's bias corrections come in as a = lr * sqrt(c2) / c1
 * and e = eps * sqrt(c2) (c = 1 - beta^step); l2 is added to the gradient. Shared by the dense
 * optimizer and the sparse rows. */
void optim_adam(float *p, float *m, float *v, const float *g, size_t n, float a, float e, float b1, float b2,
                float l2);
/* Adagrad on n values with accumulators acc, and SGD; l2 is added to the gradient. */
void optim_adagrad(float *p, float *acc, const float *g, size_t n, float lr, float eps, float l2);
void optim_sgd(float *p, const float *g, size_t n, float lr, float l2);
/* Bias-correction terms (a, e above) of step `step`, cached per thread since they change once per step. */
void optim_adam_terms(float lr, float eps, float b1, float b2, uint64_t step, float *a, float *e);

#endif
