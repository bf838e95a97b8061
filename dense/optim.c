/*
 * optim.c: Adam, Adagrad and SGD as flat loops over the parameter block.
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

void dense_opt_step(const dense_opt *o, float *p, const float *g, float *m, size_t n, uint64_t step)
{
    float l2 = o->l2, lr = o->lr;
    switch (o->kind) {
    case DOPT_ADAM: {
        float *v = m + n;
        double c1 = 1.0 - pow(o->beta1, (double)step), c2 = 1.0 - pow(o->beta2, (double)step);
        float a = (float)(lr * sqrt(c2) / c1), e = o->eps * (float)sqrt(c2), b1 = o->beta1, b2 = o->beta2;
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + l2 * p[i];
            m[i] = b1 * m[i] + (1 - b1) * gi;
            v[i] = b2 * v[i] + (1 - b2) * gi * gi;
            p[i] -= a * m[i] / (sqrtf(v[i]) + e);
        }
        break;
    }
    case DOPT_ADAGRAD:
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + l2 * p[i];
            m[i] += gi * gi;
            p[i] -= lr * gi / (sqrtf(m[i]) + o->eps);
        }
        break;
    case DOPT_SGD:
        for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + l2 * p[i]);
        break;
    }
}
