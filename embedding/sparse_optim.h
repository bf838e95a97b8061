/*
 * sparse_optim.h: optimizers applied inside one sparse row.
 *
 * A row's trainable values are v[0..V) (the first-order weight, if any, then the embedding);
 * its optimizer state s[] sits right after them in the same record (sparse_opt_state_floats
 * tells how many floats). L2 is applied to the rows a step touches (lazy, as in sparse trainers).
 */
#ifndef CTRBOX_EMBEDDING_SPARSE_OPTIM_H
#define CTRBOX_EMBEDDING_SPARSE_OPTIM_H

#include <stdint.h>

typedef enum {
    SOPT_SGD = 0,
    SOPT_ADAGRAD,            /* one accumulator per value */
    SOPT_ROWWISE_ADAGRAD,    /* one accumulator per row (mean of g^2 over the row) */
    SOPT_ADAM,               /* moments per value, bias correction with the global step */
    SOPT_FTRL,               /* FTRL-proximal (McMahan et al. 2013), per value z and n */
} sparse_opt_kind;

typedef struct {
    sparse_opt_kind kind;
    float lr;
    float l2;                /* added to the gradient: g += l2 * v */
    float eps;               /* adagrad / adam epsilon */
    float init_acc;          /* adagrad initial accumulator */
    float beta1, beta2;      /* adam */
    float ftrl_alpha, ftrl_beta, ftrl_l1, ftrl_l2;
} sparse_opt;

void sparse_opt_default(sparse_opt *o, sparse_opt_kind kind);
/* "sgd", "adagrad", "rowwise_adagrad", "adam", "ftrl"; -1 if unknown */
int sparse_opt_from_name(const char *name);
const char *sparse_opt_name(sparse_opt_kind k);
/* Floats of state for V values. */
int sparse_opt_state_floats(sparse_opt_kind k, int V);
/* Initial state of a new row. */
void sparse_opt_init_state(const sparse_opt *o, float *s, int V);
/* One step on v (V) with gradient g (V) and state s; step counts from 1. */
void sparse_opt_update(const sparse_opt *o, float *v, float *s, const float *g, int V, uint64_t step);

#endif
