/*
 * optim.h: dense optimizers over one flat block of parameters, gradients and moments.
 */
#ifndef CTRBOX_DENSE_OPTIM_H
#define CTRBOX_DENSE_OPTIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum { DOPT_ADAM = 0, DOPT_ADAGRAD, DOPT_SGD } dense_opt_kind;

typedef struct {
    dense_opt_kind kind;
    float lr;
    float l2;          /* weight decay added to the gradient */
    float eps;
    float beta1, beta2;
} dense_opt;

void dense_opt_default(dense_opt *o, dense_opt_kind kind);
int dense_opt_from_name(const char *name);   /* "adam", "adagrad", "sgd"; -1 if unknown */
const char *dense_opt_name(dense_opt_kind k);
/* Moment floats per parameter: adam 2, adagrad 1, sgd 0. */
int dense_opt_moments(dense_opt_kind k);
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

/* One step over n parameters p with gradients g; m holds the moments (n * moments floats). */
void dense_opt_step(const dense_opt *o, float *p, const float *g, float *m, size_t n, uint64_t step);
/* The same step on parameters [s, s + len) of a block of n laid out as dense_opt_step's (for a
 * block whose other ranges are updated elsewhere, e.g. on a GPU). */
void dense_opt_step_range(const dense_opt *o, float *p, const float *g, float *m, size_t n, size_t s, size_t len,
                          uint64_t step);

#endif
