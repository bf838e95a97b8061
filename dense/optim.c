/*
 * optim.c: the dense optimizers' settings and their step over the parameter block (the flat
 * loops are embedding/optim.c's, shared with the rows' optimizers).
 */
#include "optim.h"

#include <math.h>
#include <string.h>

void dense_opt_default(dense_opt *o, dense_opt_kind kind)
{
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->lr = kind == DOPT_ADAM ? 1e-3f : 0.01f;
    o->eps = kind == DOPT_ADAM ? 1e-8f : 1e-10f;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
}

static const char *names[] = { "adam", "adagrad", "sgd" };
int dense_opt_from_name(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}
const char *dense_opt_name(dense_opt_kind k) { return (unsigned)k < 3 ? names[k] : "?"; }
int dense_opt_moments(dense_opt_kind k) { return k == DOPT_ADAM ? 2 : k == DOPT_ADAGRAD ? 1 : 0; }

void dense_opt_step_range(const dense_opt *o, float *p, const float *g, float *m, size_t n, size_t s, size_t len,
                          uint64_t step)
{
    float l2 = o->l2, lr = o->lr;
    switch (o->kind) {
    case DOPT_ADAM: {
        float a, e;
        optim_adam_terms(lr, o->eps, o->beta1, o->beta2, step, &a, &e);
        optim_adam(p + s, m + s, m + n + s, g + s, len, a, e, o->beta1, o->beta2, l2);
        break;
    }
    case DOPT_ADAGRAD:
        optim_adagrad(p + s, m + s, g + s, len, lr, o->eps, l2);
        break;
    case DOPT_SGD:
        optim_sgd(p + s, g + s, len, lr, l2);
        break;
    }
}

void dense_opt_step(const dense_opt *o, float *p, const float *g, float *m, size_t n, uint64_t step)
{
    dense_opt_step_range(o, p, g, m, n, 0, n, step);
}
