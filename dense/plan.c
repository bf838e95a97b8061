/*
 * plan.c: the placement planner (plan.h): pricing, the dynamic program, brute force, measuring
 * layers on the devices present, profiles as JSON, placement strings and the printed plan.
 * Labels of the dynamic program are plain structs in growable arrays owned by plan_solve.
 */
#define _GNU_SOURCE
#include "plan.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "../io/util.h"

static const char *kind_names[PL_KIND_COUNT] = { "pool", "wide", "fm", "ffm", "dot", "cross", "fc", "loss" };
const char *plan_layer_kind_name(plan_layer_kind k) { return (unsigned)k < PL_KIND_COUNT ? kind_names[k] : "?"; }

/* ---- pricing ---- */

/* Time and bytes moved for layer i on device d given the devices of the layers before it. */
static int layer_cost(const plan_profile *p, int i, place_device d, const uint8_t *dev, double *t, double *moved)
{
    const plan_layer *l = &p->l[i];
    if (l->time_s[d] < 0) return -1;
    *t = l->time_s[d];
    *moved = 0;
    if (d != PLACE_CPU && l->host_bytes + l->pass_bytes > 0) {
        if (p->link_bytes_per_s <= 0) return -1;
        *moved += l->host_bytes + l->pass_bytes;
        *t += (l->host_bytes + l->pass_bytes) / p->link_bytes_per_s + p->link_latency_s;
    }
    for (int k = 0; k < l->n_inputs; k++) {
        int j = l->input[k];
        if (j < 0 || dev[j] == d) continue;
        if (p->link_bytes_per_s <= 0) return -1;
        *moved += 2 * p->l[j].out_bytes;
        *t += 2 * (p->l[j].out_bytes / p->link_bytes_per_s + p->link_latency_s);
    }
    return 0;
}

static int within(const plan_profile *p, const double *mem)
{
    for (int d = 0; d < PLACE_COUNT; d++)
        if (p->mem_limit[d] > 0 && mem[d] > p->mem_limit[d]) return 0;
    return 1;
}

void plan_evaluate(const plan_profile *p, const place_device *dev, plan_result *r)
{
    uint8_t d8[PLAN_MAX_LAYERS];
    memset(r, 0, sizeof *r);
    r->feasible = 1;
    for (int i = 0; i < p->n; i++) d8[i] = (uint8_t)dev[i], r->dev[i] = dev[i];
    for (int i = 0; i < p->n; i++) {
        double t, moved;
        if (layer_cost(p, i, dev[i], d8, &t, &moved) < 0) {
            r->feasible = 0;
            t = INFINITY, moved = 0;
        }
        r->step_s += t;
        r->moved_bytes[i] = moved;
        r->mem[dev[i]] += p->l[i].mem_bytes[dev[i]];
    }
    if (!within(p, r->mem)) r->feasible = 0;
}

/* ---- the dynamic program ---- */

typedef struct {
    double t, mem[PLACE_COUNT];
    uint32_t key;                    /* devices of the live layers, one bit each */
    uint8_t dev[PLAN_MAX_LAYERS];
} label;

typedef struct {
    label *v;
    size_t n, cap;
} label_set;

static int dominates(const label *a, const label *b)
{
    if (a->t > b->t) return 0;
    for (int d = 0; d < PLACE_COUNT; d++)
        if (a->mem[d] > b->mem[d]) return 0;
    return 1;
}

/* Add x unless a label with its key dominates it; drop the ones it dominates. */
static void label_add(label_set *s, const label *x)
{
    for (size_t k = 0; k < s->n; k++)
        if (s->v[k].key == x->key && dominates(&s->v[k], x)) return;
    size_t w = 0;
    for (size_t k = 0; k < s->n; k++)
        if (!(s->v[k].key == x->key && dominates(x, &s->v[k]))) s->v[w++] = s->v[k];
    s->n = w;
    if (s->n == s->cap) s->v = xrealloc(s->v, (s->cap = s->cap ? s->cap * 2 : 64) * sizeof *s->v);
    s->v[s->n++] = *x;
}

int plan_solve(const plan_profile *p, plan_result *r)
{
    /* last[j]: the last layer that reads j's output; j is live after step i while last[j] > i */
    int last[PLAN_MAX_LAYERS];
    for (int j = 0; j < p->n; j++) last[j] = j;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->l[i].n_inputs; k++)
            if (p->l[i].input[k] >= 0 && last[p->l[i].input[k]] < i) last[p->l[i].input[k]] = i;
    label_set cur = { 0 }, next = { 0 };
    label start;
    memset(&start, 0, sizeof start);
    label_add(&cur, &start);
    for (int i = 0; i < p->n; i++) {
        next.n = 0;
        for (size_t k = 0; k < cur.n; k++) {
            for (int d = 0; d < PLACE_COUNT; d++) {
                label x = cur.v[k];
                double t, moved;
                x.dev[i] = (uint8_t)d;
                if (layer_cost(p, i, (place_device)d, x.dev, &t, &moved) < 0) continue;
                x.t += t;
                x.mem[d] += p->l[i].mem_bytes[d];
                if (!within(p, x.mem)) continue;   /* memory only grows along the chain */
                x.key = 0;
                int bit = 0;
                for (int j = 0; j <= i; j++)
                    if (last[j] > i) x.key |= (uint32_t)(x.dev[j] != PLACE_CPU) << bit++;
                label_add(&next, &x);
            }
        }
        label_set t = cur;
        cur = next;
        next = t;
    }
    const label *best = NULL;
    for (size_t k = 0; k < cur.n; k++)
        if (!best || cur.v[k].t < best->t) best = &cur.v[k];
    int ret = -1;
    if (best) {
        place_device dev[PLAN_MAX_LAYERS];
        for (int i = 0; i < p->n; i++) dev[i] = (place_device)best->dev[i];
        plan_evaluate(p, dev, r);
        ret = 0;
    } else {
        memset(r, 0, sizeof *r);
    }
    free(cur.v);
    free(next.v);
    return ret;
}

int plan_brute_force(const plan_profile *p, plan_result *r)
{
    CHECK(p->n <= 24);
    memset(r, 0, sizeof *r);
    plan_result x;
    place_device dev[PLAN_MAX_LAYERS];
    for (uint32_t mask = 0; mask < (1u << p->n); mask++) {
        for (int i = 0; i < p->n; i++) dev[i] = (mask >> i) & 1 ? PLACE_GPU : PLACE_CPU;
        plan_evaluate(p, dev, &x);
        if (x.feasible && (!r->feasible || x.step_s < r->step_s)) *r = x;
    }
    return r->feasible ? 0 : -1;
}

/* ---- measuring ---- */

static float *rand_buf(const dense_backend *be, size_t n, uint64_t *seed)
{
    float *h = xmalloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((*seed >> 40) & 0xffff) / 65536.0f - 0.5f;
    }
    float *d = be->alloc((n ? n : 1) * sizeof *d);
    be->upload(d, h, n * sizeof *d);
    free(h);
    return d;
}

/* Buffers of one layer on one backend, and the pool's index arrays. */
typedef struct {
    const dense_backend *be;
    float *x, *x2, *y, *dy, *dx, *w, *dw, *b, *db, *m, *z, *gamma, *beta, *dgamma, *dbeta, *mean, *rstd, *rm, *rv, *t;
    uint8_t *mask;
    size_t *uoff;
    uint32_t *uidx;
    uint16_t *field;
    float *val;
    uint64_t *row_ptr;
    int32_t *slot;
    int *off, *dim;
    float *slab, *uw, *duw;   /* pool, wide: the pass tier's rows and the batch's weights */
    size_t *rec, *ruoff;      /* their slots, and each row's embedding floats (none for the wide part) */
} layer_bufs;

static void *upload_copy(const dense_backend *be, const void *h, size_t bytes)
{
    void *d = be->alloc(bytes);
    be->upload(d, h, bytes);
    return d;
}

static void bufs_make(layer_bufs *L, const plan_layer_shape *s, int B, int moments)
{
    const dense_backend *be = L->be;
    uint64_t seed = 12345;
    size_t in = (size_t)B * (s->in > 0 ? s->in : 1), out = (size_t)B * (s->out > 0 ? s->out : 1);
    switch (s->kind) {
    case PL_POOL: case PL_WIDE: {
        int F = s->F, D = s->kind == PL_WIDE ? 1 : s->D;
        size_t nnz = (size_t)B * F;   /* one entry per slot, every row distinct: the most rows a batch pulls */
        size_t *uoff = xmalloc((nnz + 1) * sizeof *uoff);
        uint32_t *uidx = xmalloc(nnz * sizeof *uidx);
        uint16_t *field = xmalloc(nnz * sizeof *field);
        float *val = xmalloc(nnz * sizeof *val);
        uint64_t *rp = xmalloc(((size_t)B + 1) * sizeof *rp);
        int32_t *slot = xmalloc((size_t)F * sizeof *slot);
        int *off = xmalloc((size_t)F * sizeof *off), *dim = xmalloc((size_t)F * sizeof *dim);
        for (size_t k = 0; k < nnz; k++) uoff[k] = k * D, uidx[k] = (uint32_t)k, field[k] = (uint16_t)(k % F), val[k] = 1;
        uoff[nnz] = nnz * D;
        for (int b = 0; b <= B; b++) rp[b] = (uint64_t)b * F;
        for (int f = 0; f < F; f++) slot[f] = f, off[f] = f * D, dim[f] = D;
        L->uoff = upload_copy(be, uoff, (nnz + 1) * sizeof *uoff);
        L->uidx = upload_copy(be, uidx, nnz * sizeof *uidx);
        L->field = upload_copy(be, field, nnz * sizeof *field);
        L->val = upload_copy(be, val, nnz * sizeof *val);
        L->row_ptr = upload_copy(be, rp, ((size_t)B + 1) * sizeof *rp);
        L->slot = upload_copy(be, slot, (size_t)F * sizeof *slot);
        L->off = upload_copy(be, off, (size_t)F * sizeof *off);
        L->dim = upload_copy(be, dim, (size_t)F * sizeof *dim);
        free(uoff), free(uidx), free(field), free(val), free(rp), free(slot), free(off), free(dim);
        L->w = rand_buf(be, nnz * D, &seed);
        L->dw = be->alloc(nnz * D * sizeof(float));
        L->y = be->alloc((size_t)B * F * D * sizeof(float));
        L->dy = rand_buf(be, (size_t)B * F * D, &seed);
        if (s->row_floats > 0) {   /* the rows out of the pass tier and their sparse update, every row distinct */
            size_t R = (size_t)s->row_floats, *rec = xmalloc((nnz + 1) * sizeof *rec);
            for (size_t k = 0; k < nnz; k++) rec[k] = k * R;
            L->rec = upload_copy(be, rec, nnz * sizeof *rec);
            for (size_t k = 0; k <= nnz; k++) rec[k] = s->kind == PL_WIDE ? 0 : k * D;   /* the wide part's rows: a weight */
            L->ruoff = upload_copy(be, rec, (nnz + 1) * sizeof *rec);
            free(rec);
            L->slab = rand_buf(be, nnz * R, &seed);
            L->uw = be->alloc(nnz * sizeof(float));
            L->duw = rand_buf(be, nnz, &seed);
        }
        break;
    }
    case PL_FM: case PL_DOT: case PL_FFM: {
        size_t n = (size_t)B * s->F * s->D * (s->kind == PL_FFM ? s->F : 1);
        size_t P = s->kind == PL_DOT ? (size_t)s->F * (s->F - 1) / 2 : 1;
        L->x = rand_buf(be, n, &seed);
        L->dx = be->alloc(n * sizeof(float));
        L->y = be->alloc((size_t)B * P * sizeof(float));
        L->dy = rand_buf(be, (size_t)B * P, &seed);
        break;
    }
    case PL_CROSS:
        L->x = rand_buf(be, in, &seed);
        L->x2 = rand_buf(be, in, &seed);
        L->y = be->alloc(in * sizeof(float));
        L->t = be->alloc(in * sizeof(float));
        L->z = be->alloc(in * sizeof(float));
        L->dx = be->alloc(in * sizeof(float));
        L->dgamma = be->alloc(in * sizeof(float));   /* d x0 */
        L->dy = rand_buf(be, in, &seed);
        L->w = rand_buf(be, (size_t)s->in * s->in, &seed);
        L->dw = be->alloc((size_t)s->in * s->in * sizeof(float));
        L->b = rand_buf(be, (size_t)s->in, &seed);
        L->db = be->alloc((size_t)s->in * sizeof(float));
        L->m = be->alloc(((size_t)s->in * s->in + s->in) * (moments ? moments : 1) * sizeof(float));
        break;
    case PL_FC:
        L->x = rand_buf(be, in, &seed);
        L->dx = be->alloc(in * sizeof(float));
        L->z = be->alloc(out * sizeof(float));
        L->y = be->alloc(out * sizeof(float));
        L->t = be->alloc(out * sizeof(float));
        L->dy = rand_buf(be, out, &seed);
        L->mask = be->alloc(out);
        L->w = rand_buf(be, (size_t)s->in * s->out, &seed);
        L->dw = be->alloc((size_t)s->in * s->out * sizeof(float));
        L->b = rand_buf(be, (size_t)s->out, &seed);
        L->db = be->alloc((size_t)s->out * sizeof(float));
        L->gamma = rand_buf(be, (size_t)s->out, &seed);
        L->beta = rand_buf(be, (size_t)s->out, &seed);
        L->dgamma = be->alloc((size_t)s->out * sizeof(float));
        L->dbeta = be->alloc((size_t)s->out * sizeof(float));
        L->mean = be->alloc((size_t)s->out * sizeof(float));
        L->rstd = be->alloc((size_t)s->out * sizeof(float));
        L->rm = be->alloc((size_t)s->out * sizeof(float));
        L->rv = rand_buf(be, (size_t)s->out, &seed);
        L->m = be->alloc(((size_t)s->in * s->out + s->out) * (moments ? moments : 1) * sizeof(float));
        break;
    case PL_LOSS:
        L->x = rand_buf(be, (size_t)B, &seed);
        L->x2 = be->alloc((size_t)B * sizeof(float));
        L->dx = be->alloc((size_t)B * sizeof(float));
        break;
    default:
        break;
    }
}

static void bufs_free(layer_bufs *L)
{
    void *all[] = { L->x, L->x2, L->y, L->dy, L->dx, L->w, L->dw, L->b, L->db, L->m, L->z, L->gamma, L->beta,
                    L->dgamma, L->dbeta, L->mean, L->rstd, L->rm, L->rv, L->t, L->mask, L->uoff, L->uidx,
                    L->field, L->val, L->row_ptr, L->slot, L->off, L->dim, L->slab, L->uw, L->duw, L->rec, L->ruoff };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]) L->be->release(all[i]);
}

/* One forward + backward (+ the optimizer step on its parameters) of layer s. */
static void layer_run(layer_bufs *L, const plan_layer_shape *s, int B, const dense_opt *o)
{
    const dense_backend *be = L->be;
    switch (s->kind) {
    case PL_POOL: case PL_WIDE: {
        int D = s->kind == PL_WIDE ? 1 : s->D, W = s->F * D, has_w = s->kind == PL_WIDE;
        size_t U = (size_t)B * s->F;
        if (L->slab) be->rows_gather(L->uw, L->w, L->slab, L->rec, L->ruoff, has_w, U);
        be->pool_forward(L->y, L->w, L->uoff, L->uidx, L->field, L->val, L->row_ptr, L->slot, L->off, L->dim, 0, B,
                         s->F, W);
        be->zero(L->dw, (size_t)B * W * sizeof(float));
        be->pool_backward(L->dw, L->dy, L->uoff, L->uidx, L->field, L->val, L->row_ptr, L->slot, L->off, L->dim, 0, B,
                          s->F, W);
        if (L->slab) {   /* the sparse optimizer inside the rows: Adam, the default */
            sparse_opt so;
            sparse_opt_default(&so, SOPT_ADAM);
            be->rows_update(L->slab, L->rec, L->ruoff, L->duw, L->dw, has_w, &so, 1, U);
        }
        break;
    }
    case PL_FM:
        be->fm_forward(L->y, L->x, B, s->F, s->D);
        be->fm_backward(L->dx, L->dy, L->x, B, s->F, s->D);
        break;
    case PL_FFM:
        be->ffm_forward(L->y, L->x, B, s->F, s->D);
        be->ffm_backward(L->dx, L->dy, L->x, B, s->F, s->D);
        break;
    case PL_DOT:
        be->dot_forward(L->y, L->x, B, s->F, s->D);
        be->dot_backward(L->dx, L->dy, L->x, B, s->F, s->D);
        break;
    case PL_CROSS: {
        size_t n = (size_t)s->in * s->in;
        be->cross_forward(L->y, L->t, L->x, L->x2, L->w, L->b, B, s->in);
        be->cross_backward(L->dgamma, L->dx, L->dw, L->db, L->z, L->dy, L->x, L->x2, L->t, L->w, B, s->in);
        be->opt_step(o, L->w, L->dw, L->m, n, 1);
        break;
    }
    case PL_FC: {
        size_t n = (size_t)B * s->out;
        be->linear_forward(L->z, L->x, L->w, L->b, B, s->in, s->out);
        const float *y = L->z;
        if (s->bn) {
            be->batchnorm_forward(L->y, L->mean, L->rstd, L->rm, L->rv, L->z, L->gamma, L->beta, B, s->out, 0.1f,
                                  1e-5f, 1);
            y = L->y;
        }
        if (s->relu) be->relu_forward(L->y, y, n);
        if (s->dropout > 0) be->dropout_forward(L->t, L->mask, L->y, n, s->dropout, 1, 1, 1);
        const float *g = L->dy;
        if (s->dropout > 0) be->dropout_backward(L->t, g, L->mask, n, s->dropout), g = L->t;
        if (s->relu) be->relu_backward(L->t, g, L->y, n), g = L->t;
        if (s->bn)
            be->batchnorm_backward(L->z, L->dgamma, L->dbeta, g, L->z, L->mean, L->rstd, L->gamma, B, s->out), g = L->z;
        be->linear_backward(L->dx, L->dw, L->db, g, L->x, L->w, B, s->in, s->out);
        be->opt_step(o, L->w, L->dw, L->m, (size_t)s->in * s->out, 1);
        break;
    }
    case PL_LOSS:
        be->bce_forward_backward(L->dx, L->x, L->x2, B);
        break;
    default:
        break;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Memory a layer holds on a device: parameters with gradients and moments, activations and
 * their gradients, and for the pool the batch's rows and their gradients, and the pass tier's room
 * for at least one batch's rows. */
static double layer_memory(const plan_layer_shape *s, int B, int moments)
{
    double par = (double)s->params * (2 + moments) * 4;
    double out = (double)B * (s->out > 0 ? s->out : 1) * 4;
    switch (s->kind) {
    case PL_POOL: case PL_WIDE:
        return par + 2 * out + 2.0 * B * s->F * (s->kind == PL_WIDE ? 1 : s->D) * 4 + (double)B * s->F * s->row_floats * 4;
    case PL_FC: return par + out * (3 + (s->bn ? 1 : 0) + (s->dropout > 0 ? 1.25 : 0));
    case PL_CROSS: return par + 4.0 * B * s->in * 4;
    default: return par + 2 * out;
    }
}

void plan_profile_init(plan_profile *p, const char *model_name, const plan_layer_shape *shapes, int n, int batch)
{
    CHECK(n <= PLAN_MAX_LAYERS);
    memset(p, 0, sizeof *p);
    snprintf(p->model, sizeof p->model, "%s", model_name);
    p->batch = batch;
    p->n = n;
    for (int i = 0; i < n; i++) {
        const plan_layer_shape *s = &shapes[i];
        plan_layer *l = &p->l[i];
        snprintf(l->name, sizeof l->name, "%s", s->name);
        l->n_inputs = s->n_inputs;
        memcpy(l->input, s->input, sizeof l->input);
        l->out_bytes = (double)batch * (s->kind == PL_DOT ? s->F * (s->F - 1) / 2 : s->kind == PL_POOL ? s->F * s->D
                                                                                   : s->out > 0 ? s->out : 1) * 4;
        /* pool, wide: the batch's entries go up (key slot, field, value: 10 bytes; the row's offset in
         * the pass tier: 8); the rows themselves are the pass tier's (pass_bytes) */
        for (int k = 0; k < s->n_inputs; k++)
            if (s->input[k] == PLAN_HOST)
                l->host_bytes += s->kind == PL_POOL || s->kind == PL_WIDE ? (double)batch * s->F * (10 + 8)
                                                                          : (double)batch * (s->kind == PL_LOSS ? 1 : s->in) * 4;
        if ((s->kind == PL_POOL || s->kind == PL_WIDE) && s->row_floats > 0) {   /* every row of the batch new */
            l->pass_rows = (double)batch * s->F;
            l->pass_bytes = 2.0 * l->pass_rows * s->row_floats * 4;
        }
    }
}

void plan_set_rows_per_step(plan_profile *p, double rows)
{
    for (int i = 0; i < p->n; i++)
        if (p->l[i].pass_rows > 0) {
            p->l[i].pass_bytes *= rows / p->l[i].pass_rows;
            p->l[i].pass_rows = rows;
        }
}

void plan_measure(plan_profile *p, const char *model_name, const plan_layer_shape *shapes, int n, int batch,
                  int moments, int reps)
{
    CHECK(reps >= 1);
    plan_profile_init(p, model_name, shapes, n, batch);
    const char *why;
    const dense_backend *gpu = device_gpu(&why);
    snprintf(p->device[PLACE_CPU], sizeof p->device[0], "cpu: %ld cores, OpenBLAS", sysconf(_SC_NPROCESSORS_ONLN));
    if (gpu) snprintf(p->device[PLACE_GPU], sizeof p->device[0], "%s", why);
    p->mem_limit[PLACE_CPU] = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE) * 0.8;
    p->mem_limit[PLACE_GPU] = gpu ? (double)device_gpu_memory() * 0.9 : 0;
    dense_opt o;
    dense_opt_default(&o, moments == 2 ? DOPT_ADAM : moments == 1 ? DOPT_ADAGRAD : DOPT_SGD);
    double *times = xmalloc((size_t)reps * sizeof *times);
    for (int i = 0; i < n; i++) {
        const plan_layer_shape *s = &shapes[i];
        plan_layer *l = &p->l[i];
        for (int d = 0; d < PLACE_COUNT; d++) {
            const dense_backend *be = device_backend((place_device)d);
            l->mem_bytes[d] = layer_memory(s, batch, moments);
            l->time_s[d] = -1;
            if (!be) continue;
            layer_bufs L;
            memset(&L, 0, sizeof L);
            L.be = be;
            bufs_make(&L, s, batch, moments);
            layer_run(&L, s, batch, &o);   /* warm-up */
            be->sync();
            for (int r = 0; r < reps; r++) {
                double t0 = now_sec();
                layer_run(&L, s, batch, &o);
                be->sync();
                times[r] = now_sec() - t0;
            }
            l->time_s[d] = median(times, reps);
            bufs_free(&L);
        }
    }
    if (gpu) {   /* the link: 64 MiB each way, and a 4-byte copy for the latency */
        size_t bytes = 64u << 20;
        void *h = xcalloc(bytes, 1), *dbuf = gpu->alloc(bytes);
        double bw[6], lat[20];
        for (int r = 0; r < 6; r++) {
            double t0 = now_sec();
            if (r % 2) gpu->download(h, dbuf, bytes);
            else gpu->upload(dbuf, h, bytes);
            bw[r] = (double)bytes / (now_sec() - t0);
        }
        for (int r = 0; r < 20; r++) {
            double t0 = now_sec();
            gpu->upload(dbuf, h, 4);
            lat[r] = now_sec() - t0;
        }
        p->link_bytes_per_s = median(bw, 6);
        p->link_latency_s = median(lat, 20);
        gpu->release(dbuf);
        free(h);
    }
    free(times);
}

/* ---- profiles as JSON ---- */

static json_t *profile_body(const plan_profile *p)
{
    json_t *o = json_object();
    json_object_set_new(o, "model", json_string(p->model));
    json_object_set_new(o, "batch", json_integer(p->batch));
    json_t *devs = json_array();
    for (int d = 0; d < PLACE_COUNT; d++) {
        json_t *x = json_object();
        json_object_set_new(x, "device", json_string(place_device_name((place_device)d)));
        json_object_set_new(x, "what", json_string(p->device[d]));
        json_object_set_new(x, "mem_limit_bytes", json_real(p->mem_limit[d]));
        json_array_append_new(devs, x);
    }
    json_object_set_new(o, "devices", devs);
    json_object_set_new(o, "link_bytes_per_s", json_real(p->link_bytes_per_s));
    json_object_set_new(o, "link_latency_s", json_real(p->link_latency_s));
    json_t *ls = json_array();
    for (int i = 0; i < p->n; i++) {
        const plan_layer *l = &p->l[i];
        json_t *x = json_object(), *t = json_object(), *m = json_object(), *in = json_array();
        for (int d = 0; d < PLACE_COUNT; d++) {
            json_object_set_new(t, place_device_name((place_device)d), l->time_s[d] < 0 ? json_null() : json_real(l->time_s[d]));
            json_object_set_new(m, place_device_name((place_device)d), json_real(l->mem_bytes[d]));
        }
        for (int k = 0; k < l->n_inputs; k++) json_array_append_new(in, json_integer(l->input[k]));
        json_object_set_new(x, "name", json_string(l->name));
        json_object_set_new(x, "time_s", t);
        json_object_set_new(x, "mem_bytes", m);
        json_object_set_new(x, "out_bytes", json_real(l->out_bytes));
        json_object_set_new(x, "host_bytes", json_real(l->host_bytes));
        json_object_set_new(x, "pass_bytes", json_real(l->pass_bytes));
        json_object_set_new(x, "pass_rows", json_real(l->pass_rows));
        json_object_set_new(x, "inputs", in);
        json_array_append_new(ls, x);
    }
    json_object_set_new(o, "layers", ls);
    return o;
}

static uint64_t body_digest(const json_t *body)
{
    char *s = json_dumps(body, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17));
    uint64_t h = XXH64(s, strlen(s), 0);
    free(s);
    return h;
}

int plan_profile_save(const plan_profile *p, const char *path, char *err, size_t errlen)
{
    json_t *root = json_object(), *body = profile_body(p);
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)body_digest(body));
    json_object_set_new(root, "format", json_string("ctrbox-profile"));
    json_object_set_new(root, "version", json_integer(1));
    json_object_set_new(root, "xxh64", json_string(hex));
    json_object_set_new(root, "profile", body);
    durable_file f;
    int r = durable_open(&f, path);
    if (r == 0) {
        if (json_dumpf(root, f.f, JSON_INDENT(1) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) < 0 || fputc('\n', f.f) == EOF) {
            durable_abort(&f);
            r = -EIO;
        } else {
            r = durable_commit(&f);
        }
    }
    json_decref(root);
    if (r < 0) snprintf(err, errlen, "%s: cannot write the profile: %s", path, strerror(-r));
    return r < 0 ? -1 : 0;
}

static int num_of(const json_t *o, const char *key, double *v)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_number(x)) return -1;
    *v = json_number_value(x);
    return 0;
}

int plan_profile_load(plan_profile *p, const char *path, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    memset(p, 0, sizeof *p);
    if (!root) {
        snprintf(err, errlen, "%s:%d: not a JSON profile: %s", path, je.line, je.text);
        return -1;
    }
    const char *what = NULL;
    json_t *body = json_object_get(root, "profile");
    const char *fmt = json_string_value(json_object_get(root, "format"));
    const char *hex = json_string_value(json_object_get(root, "xxh64"));
    char want[17];
    if (!fmt || strcmp(fmt, "ctrbox-profile")) {
        what = "not a ctrbox profile (format is not \"ctrbox-profile\")";
        goto fail;
    }
    if (json_integer_value(json_object_get(root, "version")) != 1) {
        what = "unsupported profile version (this ctrbox reads version 1)";
        goto fail;
    }
    if (!json_is_object(body) || !hex) {
        what = "no profile body or checksum";
        goto fail;
    }
    snprintf(want, sizeof want, "%016llx", (unsigned long long)body_digest(body));
    if (strcmp(hex, want)) {
        what = "checksum mismatch (the profile was edited or damaged)";
        goto fail;
    }
    snprintf(p->model, sizeof p->model, "%s", json_string_value(json_object_get(body, "model")) ?: "");
    p->batch = (int)json_integer_value(json_object_get(body, "batch"));
    json_t *devs = json_object_get(body, "devices"), *ls = json_object_get(body, "layers");
    if (num_of(body, "link_bytes_per_s", &p->link_bytes_per_s) || num_of(body, "link_latency_s", &p->link_latency_s) ||
        !json_is_array(devs) || json_array_size(devs) != PLACE_COUNT || !json_is_array(ls) ||
        json_array_size(ls) > PLAN_MAX_LAYERS || p->batch <= 0) {
        what = "missing or bad fields (batch, devices, link_*, layers)";
        goto fail;
    }
    for (int d = 0; d < PLACE_COUNT; d++) {
        json_t *x = json_array_get(devs, (size_t)d);
        snprintf(p->device[d], sizeof p->device[d], "%s", json_string_value(json_object_get(x, "what")) ?: "");
        if (num_of(x, "mem_limit_bytes", &p->mem_limit[d])) {
            what = "a device without mem_limit_bytes";
            goto fail;
        }
    }
    p->n = (int)json_array_size(ls);
    for (int i = 0; i < p->n; i++) {
        json_t *x = json_array_get(ls, (size_t)i), *t = json_object_get(x, "time_s"), *m = json_object_get(x, "mem_bytes");
        json_t *in = json_object_get(x, "inputs");
        plan_layer *l = &p->l[i];
        const char *name = json_string_value(json_object_get(x, "name"));
        if (!name || num_of(x, "out_bytes", &l->out_bytes) || num_of(x, "host_bytes", &l->host_bytes) ||
            !json_is_array(in) || json_array_size(in) > PLAN_MAX_INPUTS) {
            what = "a layer without name, out_bytes, host_bytes or inputs";
            goto fail;
        }
        snprintf(l->name, sizeof l->name, "%s", name);
        if (num_of(x, "pass_bytes", &l->pass_bytes) || num_of(x, "pass_rows", &l->pass_rows))
            l->pass_bytes = l->pass_rows = 0;   /* a profile of an earlier build: its rows went up each batch */
        l->n_inputs = (int)json_array_size(in);
        for (int k = 0; k < l->n_inputs; k++) {
            l->input[k] = (int)json_integer_value(json_array_get(in, (size_t)k));
            if (l->input[k] < PLAN_HOST || l->input[k] >= i) {
                what = "a layer reading a layer that does not come before it";
                goto fail;
            }
        }
        for (int d = 0; d < PLACE_COUNT; d++) {
            json_t *tv = json_object_get(t, place_device_name((place_device)d));
            l->time_s[d] = json_is_number(tv) ? json_number_value(tv) : -1;
            if (num_of(m, place_device_name((place_device)d), &l->mem_bytes[d])) {
                what = "a layer without mem_bytes for every device";
                goto fail;
            }
        }
    }
    json_decref(root);
    return 0;
fail:
    snprintf(err, errlen, "%s: %s", path, what);
    json_decref(root);
    return -1;
}

/* ---- placement strings ---- */

int plan_placement_parse(const char *spec, const plan_profile *p, place_device *dev, char *err, size_t errlen)
{
    for (int i = 0; i < p->n; i++) dev[i] = PLACE_CPU;
    int all = place_device_from_name(spec);
    if (all >= 0 || !strcmp(spec, "auto")) {
        if (all >= 0)
            for (int i = 0; i < p->n; i++) dev[i] = (place_device)all;
        else {
            plan_result r;
            if (plan_solve(p, &r) < 0) {
                snprintf(err, errlen, "--placement auto: no assignment of the layers fits the devices' memory");
                return -1;
            }
            memcpy(dev, r.dev, sizeof r.dev[0] * (size_t)p->n);
        }
    } else {
        char *copy = xstrdup(spec), *save = NULL;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            char whole[128];
            snprintf(whole, sizeof whole, "%s", tok);
            char *eq = strchr(tok, '=');
            int d = eq ? place_device_from_name(eq + 1) : -1, found = 0;
            if (eq) *eq = 0;
            for (int i = 0; eq && d >= 0 && i < p->n; i++)
                if (!strcmp(p->l[i].name, tok)) dev[i] = (place_device)d, found = 1;
            if (!found) {
                snprintf(err, errlen,
                         "--placement %s: '%s' is not LAYER=cpu|gpu with a layer of this model (see ctrbox plan)", spec,
                         whole);
                free(copy);
                return -1;
            }
        }
        free(copy);
    }
    for (int i = 0; i < p->n; i++)
        if (p->l[i].time_s[dev[i]] < 0) {
            const char *why = "";
            if (dev[i] == PLACE_GPU) device_gpu(&why);
            snprintf(err, errlen, "--placement %s: layer %s cannot run on the %s here%s%s", spec, p->l[i].name,
                     place_device_name(dev[i]), *why ? ": gpu: " : "", why);
            return -1;
        }
    return 0;
}

/* ---- printing ---- */

static void fmt_time(char *b, size_t n, double t)
{
    if (t < 0) snprintf(b, n, "-");
    else snprintf(b, n, "%.3f ms", t * 1e3);
}

void plan_print(FILE *f, const plan_profile *p, const plan_result *r)
{
    fprintf(f, "plan for %s at batch %d\n", p->model, p->batch);
    for (int d = 0; d < PLACE_COUNT; d++)
        fprintf(f, "  %-4s %s\n", place_device_name((place_device)d), *p->device[d] ? p->device[d] : "(absent)");
    if (p->link_bytes_per_s > 0)
        fprintf(f, "  link %.2f GB/s, %.1f us latency\n", p->link_bytes_per_s / 1e9, p->link_latency_s * 1e6);
    fprintf(f, "%-14s %-6s %12s %12s %12s %12s %12s\n", "layer", "device", "cpu time", "gpu time", "moved", "pass tier",
            "memory");
    for (int i = 0; i < p->n; i++) {
        const plan_layer *l = &p->l[i];
        char tc[32], tg[32], pt[32] = "-";
        fmt_time(tc, sizeof tc, l->time_s[PLACE_CPU]);
        fmt_time(tg, sizeof tg, l->time_s[PLACE_GPU]);
        if (l->pass_bytes > 0) snprintf(pt, sizeof pt, "%.2f MB", l->pass_bytes / 1e6);
        fprintf(f, "%-14s %-6s %12s %12s %9.2f MB %12s %9.1f MB\n", l->name, place_device_name(r->dev[i]), tc, tg,
                r->moved_bytes[i] / 1e6, pt, l->mem_bytes[r->dev[i]] / 1e6);
    }
    for (int i = 0; i < p->n; i++)
        if (p->l[i].pass_bytes > 0) {
            fprintf(f, "pass tier: with %s on the gpu its rows go up to GPU memory and back, %.2f MB a step for %.0f "
                    "new rows (--rows-per-step)", p->l[i].name, p->l[i].pass_bytes / 1e6, p->l[i].pass_rows);
            if (p->link_bytes_per_s > 0) fprintf(f, " (%.3f ms at the link's speed)", p->l[i].pass_bytes / p->link_bytes_per_s * 1e3);
            fprintf(f, "; in \"moved\" when it runs there\n");
            break;
        }
    if (!r->feasible) {
        fprintf(f, "no feasible assignment\n");
        return;
    }
    fprintf(f, "predicted step %.3f ms (%.0f samples/s); memory cpu %.1f MB, gpu %.1f MB\n", r->step_s * 1e3,
            p->batch / r->step_s, r->mem[PLACE_CPU] / 1e6, r->mem[PLACE_GPU] / 1e6);
}
