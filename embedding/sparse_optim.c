/*
 * sparse_optim.c: SGD, Adagrad (per value and row-wise), Adam and FTRL-proximal on one row.
 */
#include "sparse_optim.h"

#include <math.h>
#include <string.h>

#include "optim.h"

void sparse_opt_default(sparse_opt *o, sparse_opt_kind kind)
{
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->lr = kind == SOPT_ADAM ? 1e-3f : kind == SOPT_SGD ? 0.05f : 0.05f;
    o->eps = kind == SOPT_ADAM ? 1e-8f : 1e-10f;
    o->init_acc = 0.0f;
    o->beta1 = 0.9f;
    o->beta2 = 0.999f;
    o->ftrl_alpha = 0.05f;
    o->ftrl_beta = 1.0f;
    o->ftrl_l1 = 0.0f;
    o->ftrl_l2 = 0.0f;
}

static const char *names[] = { "sgd", "adagrad", "rowwise_adagrad", "adam", "ftrl" };

int sparse_opt_from_name(const char *name)
{
    for (int i = 0; i < 5; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

const char *sparse_opt_name(sparse_opt_kind k) { return (unsigned)k < 5 ? names[k] : "?"; }

int sparse_opt_state_floats(sparse_opt_kind k, int V)
{
    switch (k) {
    case SOPT_SGD: return 0;
    case SOPT_ADAGRAD: return V;
    case SOPT_ROWWISE_ADAGRAD: return 1;
    case SOPT_ADAM: return 2 * V;
    case SOPT_FTRL: return 2 * V;
    }
    return 0;
}

void sparse_opt_init_state(const sparse_opt *o, float *s, int V)
{
    int n = sparse_opt_state_floats(o->kind, V);
    for (int i = 0; i < n; i++) s[i] = 0;
    if (o->kind == SOPT_ADAGRAD || o->kind == SOPT_ROWWISE_ADAGRAD)
        for (int i = 0; i < n; i++) s[i] = o->init_acc;
}

void sparse_opt_update(const sparse_opt *o, float *v, float *s, const float *g, int V, uint64_t step)
{
    float l2 = o->l2, lr = o->lr;
    switch (o->kind) {
    case SOPT_SGD:
        optim_sgd(v, g, (size_t)V, lr, l2);
        break;
    case SOPT_ADAGRAD:
        optim_adagrad(v, s, g, (size_t)V, lr, o->eps, l2);
        break;
    case SOPT_ROWWISE_ADAGRAD: {
        float sum = 0;
        for (int i = 0; i < V; i++) {
            float gi = g[i] + l2 * v[i];
            sum += gi * gi;
        }
        s[0] += sum / (float)V;
        float scale = lr / (sqrtf(s[0]) + o->eps);
        for (int i = 0; i < V; i++) v[i] -= scale * (g[i] + l2 * v[i]);
        break;
    }
    case SOPT_ADAM: {
        float a, e;
        optim_adam_terms(lr, o->eps, o->beta1, o->beta2, step, &a, &e);
        optim_adam(v, s, s + V, g, (size_t)V, a, e, o->beta1, o->beta2, l2);
        break;
    }
    case SOPT_FTRL: {
        float *z = s, *n = s + V;
        for (int i = 0; i < V; i++) {
            float gi = g[i];
            float n_new = n[i] + gi * gi;
            float sigma = (sqrtf(n_new) - sqrtf(n[i])) / o->ftrl_alpha;
            z[i] += gi - sigma * v[i];
            n[i] = n_new;
            if (fabsf(z[i]) <= o->ftrl_l1) {
                v[i] = 0;
            } else {
                float sgn = z[i] < 0 ? -1.0f : 1.0f;
                v[i] = -(z[i] - sgn * o->ftrl_l1) / ((o->ftrl_beta + sqrtf(n[i])) / o->ftrl_alpha + o->ftrl_l2);
            }
        }
        break;
    }
    }
}
