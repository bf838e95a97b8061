/*
 * optim.h: dense optimizers over one flat block of parameters, gradients and moments.
 */
#ifndef CTRBOX_DENSE_OPTIM_H
#define CTRBOX_DENSE_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "../embedding/optim.h"   /* the flat loops */

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

/* One step over n parameters p with gradients g; m holds the moments (n * moments floats). */
void dense_opt_step(const dense_opt *o, float *p, const float *g, float *m, size_t n, uint64_t step);
/* The same step on parameters [s, s + len) of a block of n laid out as dense_opt_step's (for a
 * block whose other ranges are updated elsewhere, e.g. on a GPU). */
void dense_opt_step_range(const dense_opt *o, float *p, const float *g, float *m, size_t n, size_t s, size_t len,
                          uint64_t step);

#endif
