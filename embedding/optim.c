/*
 * optim.c: Adam, Adagrad and SGD as flat loops over n floats (embedding/optim.h).
 */
#include "optim.h"

#include <math.h>

void optim_adam(float *p, float *m, float *v, const float *g, size_t n, float a, float e, float b1, float b2,
                float l2)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + l2 * p[i];
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        p[i] -= a * m[i] / (sqrtf(v[i]) + e);
    }
}

void optim_adagrad(float *p, float *acc, const float *g, size_t n, float lr, float eps, float l2)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + l2 * p[i];
        acc[i] += gi * gi;
        p[i] -= lr * gi / (sqrtf(acc[i]) + eps);
    }
}

void optim_sgd(float *p, const float *g, size_t n, float lr, float l2)
{
    for (size_t i = 0; i < n; i++) p[i] -= lr * (g[i] + l2 * p[i]);
}

void optim_adam_terms(float lr, float eps, float b1, float b2, uint64_t step, float *a, float *e)
{
    static _Thread_local struct { uint64_t step; float b1, b2; double c1, c2; } bc;
    if (bc.step != step || bc.b1 != b1 || bc.b2 != b2) {
        bc.step = step, bc.b1 = b1, bc.b2 = b2;
        bc.c1 = 1.0 - pow(b1, (double)step);
        bc.c2 = 1.0 - pow(b2, (double)step);
    }
    *a = (float)(lr * sqrt(bc.c2) / bc.c1);
    *e = eps * (float)sqrt(bc.c2);
}
