/*
 * test_gpu.c: every kernel of a device backend against its CPU twin (dense/layers.c) on random
 * inputs over a table of shapes, compared with tol + |ref| * eps. The device is the real GPU
 * (skipped, saying why, where there is none) and the simulated one, which runs the CPU kernels:
 * on it the comparison must hold exactly, which checks this harness (shapes, copies, arguments)
 * on machines without a GPU.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dense/backend_sim.h"
#include "../dense/device.h"
#include "../dense/layers.h"

static unsigned seed = 99;
static float frand(void) { return (float)rand_r(&seed) / (float)RAND_MAX * 2.0f - 1.0f; }

static float *host_rand(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

static void *to_dev(const dense_backend *be, const void *h, size_t bytes)
{
    void *d = be->alloc(bytes);
    be->upload(d, h, bytes);
    return d;
}

/* The device's n floats at d against ref: |x - ref| <= tol + |ref| * eps everywhere. */
static void expect_close(const dense_backend *be, const float *d, const float *ref, size_t n, float tol, float eps,
                         const char *what)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    be->download(h, d, n * sizeof *h);
    for (size_t i = 0; i < n; i++)
        cr_assert(fabsf(h[i] - ref[i]) <= tol + fabsf(ref[i]) * eps, "%s [%zu]: device %.9g, cpu %.9g", what, i,
                  (double)h[i], (double)ref[i]);
    free(h);
}

typedef struct {
    int B, C, OC;
} shape;

static const shape shapes[] = { { 1, 1, 1 }, { 7, 13, 5 }, { 64, 33, 17 }, { 256, 429, 400 }, { 1024, 400, 1 } };
#define N_SHAPES (sizeof shapes / sizeof *shapes)

static void check_linear(const dense_backend *be, float tol, float eps)
{
    for (size_t s = 0; s < N_SHAPES; s++)
        for (int with_b = 0; with_b < 2; with_b++) {
            int B = shapes[s].B, C = shapes[s].C, OC = shapes[s].OC;
            size_t ni = (size_t)B * C, no = (size_t)B * OC, nw = (size_t)OC * C;
            float *in = host_rand(ni), *w = host_rand(nw), *b = host_rand((size_t)OC), *dout = host_rand(no);
            float *out = malloc(no * sizeof *out), *din = malloc(ni * sizeof *din), *dw = host_rand(nw),
                  *db = host_rand((size_t)OC);
            float *d_in = to_dev(be, in, ni * 4), *d_w = to_dev(be, w, nw * 4), *d_b = to_dev(be, b, (size_t)OC * 4),
                  *d_dout = to_dev(be, dout, no * 4), *d_out = be->alloc(no * 4), *d_din = be->alloc(ni * 4),
                  *d_dw = to_dev(be, dw, nw * 4), *d_db = to_dev(be, db, (size_t)OC * 4);
            dense_linear_forward(out, in, w, with_b ? b : NULL, B, C, OC);
            be->linear_forward(d_out, d_in, d_w, with_b ? d_b : NULL, B, C, OC);
            dense_linear_backward(with_b ? din : NULL, dw, with_b ? db : NULL, dout, in, w, B, C, OC);
            be->linear_backward(with_b ? d_din : NULL, d_dw, with_b ? d_db : NULL, d_dout, d_in, d_w, B, C, OC);
            char what[64];
            snprintf(what, sizeof what, "linear %dx%dx%d b=%d", B, C, OC, with_b);
            expect_close(be, d_out, out, no, tol, eps, what);
            expect_close(be, d_dw, dw, nw, tol * sqrtf((float)B), eps, what);
            if (with_b) {
                expect_close(be, d_din, din, ni, tol, eps, what);
                expect_close(be, d_db, db, (size_t)OC, tol * sqrtf((float)B), eps, what);
            }
            void *all[] = { d_in, d_w, d_b, d_dout, d_out, d_din, d_dw, d_db };
            for (int i = 0; i < 8; i++) be->release(all[i]);
            free(in), free(w), free(b), free(dout), free(out), free(din), free(dw), free(db);
        }
}

static void check_elementwise(const dense_backend *be, float tol, float eps)
{
    size_t sizes[] = { 1, 1000, 123457 };
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        float *x = host_rand(n), *g = host_rand(n), *y = malloc(n * 4), *dx = malloc(n * 4);
        float *d_x = to_dev(be, x, n * 4), *d_g = to_dev(be, g, n * 4), *d_y = be->alloc(n * 4), *d_dx = be->alloc(n * 4);
        dense_relu_forward(y, x, n);
        be->relu_forward(d_y, d_x, n);
        expect_close(be, d_y, y, n, 0, 0, "relu forward");
        dense_relu_backward(dx, g, y, n);
        be->relu_backward(d_dx, d_g, d_y, n);
        expect_close(be, d_dx, dx, n, 0, 0, "relu backward");
        dense_sigmoid_forward(y, x, n);
        be->sigmoid_forward(d_y, d_x, n);
        expect_close(be, d_y, y, n, tol, eps, "sigmoid forward");
        dense_sigmoid_backward(dx, g, y, n);
        be->sigmoid_backward(d_dx, d_g, d_y, n);
        expect_close(be, d_dx, dx, n, tol, eps, "sigmoid backward");
        for (int train = 0; train < 2; train++) {
            uint8_t *mask = malloc(n), *hmask = malloc(n), *d_mask = be->alloc(n);
            dense_dropout_forward(y, mask, x, n, 0.3f, 17, 5, train);
            be->dropout_forward(d_y, d_mask, d_x, n, 0.3f, 17, 5, train);
            be->download(hmask, d_mask, n);
            cr_assert_arr_eq(hmask, mask, n, "dropout masks differ (train %d)", train);
            expect_close(be, d_y, y, n, 0, eps, "dropout forward");
            dense_dropout_backward(dx, g, mask, n, 0.3f);
            be->dropout_backward(d_dx, d_g, d_mask, n, 0.3f);
            expect_close(be, d_dx, dx, n, 0, eps, "dropout backward");
            be->release(d_mask);
            free(mask), free(hmask);
        }
        be->release(d_x), be->release(d_g), be->release(d_y), be->release(d_dx);
        free(x), free(g), free(y), free(dx);
    }
}

static void check_batchnorm(const dense_backend *be, float tol, float eps)
{
    for (size_t s = 1; s < N_SHAPES; s++)
        for (int train = 0; train < 2; train++) {
            int B = shapes[s].B, C = shapes[s].C;
            size_t n = (size_t)B * C;
            float *in = host_rand(n), *gamma = host_rand((size_t)C), *beta = host_rand((size_t)C), *dout = host_rand(n);
            float *rm = host_rand((size_t)C), *rv = malloc((size_t)C * 4), *out = malloc(n * 4), *mean = malloc((size_t)C * 4),
                  *rstd = malloc((size_t)C * 4), *din = malloc(n * 4), *dg = host_rand((size_t)C), *dbt = host_rand((size_t)C);
            for (int c = 0; c < C; c++) rv[c] = 0.5f + (float)c / (float)C;
            float *d_in = to_dev(be, in, n * 4), *d_gamma = to_dev(be, gamma, (size_t)C * 4),
                  *d_beta = to_dev(be, beta, (size_t)C * 4), *d_dout = to_dev(be, dout, n * 4),
                  *d_rm = to_dev(be, rm, (size_t)C * 4), *d_rv = to_dev(be, rv, (size_t)C * 4), *d_out = be->alloc(n * 4),
                  *d_mean = be->alloc((size_t)C * 4), *d_rstd = be->alloc((size_t)C * 4), *d_din = be->alloc(n * 4),
                  *d_dg = to_dev(be, dg, (size_t)C * 4), *d_db = to_dev(be, dbt, (size_t)C * 4);
            dense_batchnorm_forward(out, mean, rstd, rm, rv, in, gamma, beta, B, C, 0.1f, 1e-5f, train);
            be->batchnorm_forward(d_out, d_mean, d_rstd, d_rm, d_rv, d_in, d_gamma, d_beta, B, C, 0.1f, 1e-5f, train);
            char what[64];
            snprintf(what, sizeof what, "batchnorm %dx%d train=%d", B, C, train);
            expect_close(be, d_out, out, n, tol, eps * 10, what);
            expect_close(be, d_rm, rm, (size_t)C, tol, eps, what);
            expect_close(be, d_rv, rv, (size_t)C, tol, eps * 10, what);
            if (train) {
                dense_batchnorm_backward(din, dg, dbt, dout, in, mean, rstd, gamma, B, C);
                be->batchnorm_backward(d_din, d_dg, d_db, d_dout, d_in, d_mean, d_rstd, d_gamma, B, C);
                expect_close(be, d_din, din, n, tol * 10, eps * 10, what);
                expect_close(be, d_dg, dg, (size_t)C, tol * sqrtf((float)B), eps * 10, what);
                expect_close(be, d_db, dbt, (size_t)C, tol * sqrtf((float)B), eps * 10, what);
            }
            void *all[] = { d_in, d_gamma, d_beta, d_dout, d_rm, d_rv, d_out, d_mean, d_rstd, d_din, d_dg, d_db };
            for (int i = 0; i < 12; i++) be->release(all[i]);
            free(in), free(gamma), free(beta), free(dout), free(rm), free(rv), free(out), free(mean), free(rstd), free(din),
                free(dg), free(dbt);
        }
}

/* A batch's entries (CSR rp (B+1)): field f of sample b, for fields 0..nf-1, has 1 + (b + f) % reps
 * entries, each a random unique row below U with a random value. Caller frees. */
typedef struct {
    uint32_t *uidx;
    uint16_t *field;
    float *val;
    uint64_t *rp;
    size_t nnz;
} batch_entries;

static batch_entries make_entries(int B, int nf, int reps, size_t U)
{
    size_t cap = (size_t)B * nf * reps;
    batch_entries e = { malloc(cap * 4), malloc(cap * 2), malloc(cap * 4), malloc(((size_t)B + 1) * 8), 0 };
    e.rp[0] = 0;
    for (int b = 0; b < B; b++) {
        for (int f = 0; f < nf; f++)
            for (int k = 0; k <= (b + f) % reps; k++, e.nnz++)
                e.uidx[e.nnz] = (uint32_t)(rand_r(&seed) % U), e.field[e.nnz] = (uint16_t)f, e.val[e.nnz] = frand();
        e.rp[b + 1] = e.nnz;
    }
    return e;
}

/* Pooling over a batch of multi-hot rows: field f of sample b has 1 + (b + f) % 3 entries. */
static void check_pool(const dense_backend *be, float tol, float eps)
{
    int B = 37, F = 5, D = 6, W = F * D;
    size_t U = 23;
    batch_entries e = make_entries(B, F, 3, U);
    uint32_t *uidx = e.uidx;
    uint16_t *field = e.field;
    float *val = e.val;
    uint64_t *rp = e.rp;
    size_t nnz = e.nnz;
    size_t *uoff = malloc(U * sizeof *uoff);
    for (size_t u = 0; u < U; u++) uoff[u] = u * D;
    int32_t slot[5] = { 0, 1, 2, 3, 4 };
    int off[5], dim[5];
    for (int f = 0; f < F; f++) off[f] = f * D, dim[f] = D;
    float *emb = host_rand(U * D), *dout = host_rand((size_t)B * W), *out = malloc((size_t)B * W * 4),
          *demb = calloc(U * D, 4);
    void *d_uidx = to_dev(be, uidx, nnz * 4), *d_field = to_dev(be, field, nnz * 2), *d_val = to_dev(be, val, nnz * 4),
         *d_rp = to_dev(be, rp, ((size_t)B + 1) * 8), *d_uoff = to_dev(be, uoff, U * sizeof *uoff),
         *d_slot = to_dev(be, slot, sizeof slot), *d_off = to_dev(be, off, sizeof off), *d_dim = to_dev(be, dim, sizeof dim);
    float *d_emb = to_dev(be, emb, U * D * 4), *d_dout = to_dev(be, dout, (size_t)B * W * 4),
          *d_out = be->alloc((size_t)B * W * 4), *d_demb = be->alloc(U * D * 4);
    for (int mean = 0; mean < 2; mean++) {
        dense_pool_forward(out, emb, uoff, uidx, field, val, rp, slot, off, dim, mean, B, F, W);
        be->pool_forward(d_out, d_emb, d_uoff, d_uidx, d_field, d_val, d_rp, d_slot, d_off, d_dim, mean, B, F, W);
        expect_close(be, d_out, out, (size_t)B * W, tol, eps, mean ? "mean pool forward" : "sum pool forward");
        dense_pool_backward(demb, dout, uoff, uidx, field, val, rp, slot, off, dim, mean, B, F, W);
        be->pool_backward(d_demb, d_dout, d_uoff, d_uidx, d_field, d_val, d_rp, d_slot, d_off, d_dim, mean, B, F, W);
        expect_close(be, d_demb, demb, U * D, tol * 10, eps * 10, mean ? "mean pool backward" : "sum pool backward");
    }
    void *all[] = { d_uidx, d_field, d_val, d_rp, d_uoff, d_slot, d_off, d_dim, d_emb, d_dout, d_out, d_demb };
    for (int i = 0; i < 12; i++) be->release(all[i]);
    free(uidx), free(field), free(val), free(rp), free(uoff), free(emb), free(dout), free(out), free(demb);
}

static void check_interactions(const dense_backend *be, float tol, float eps)
{
    int dims[3][3] = { { 1, 2, 1 }, { 33, 26, 16 }, { 256, 13, 10 } };
    for (int k = 0; k < 3; k++) {
        int B = dims[k][0], F = dims[k][1], D = dims[k][2], P = F * (F - 1) / 2;
        size_t ne = (size_t)B * F * D, nf = (size_t)B * F * F * D;
        float *e = host_rand(nf), *dout = host_rand((size_t)B * (P > 0 ? P : 1)), *out = malloc((size_t)B * (P + 1) * 4),
              *de = malloc(nf * 4);
        float *d_e = to_dev(be, e, nf * 4), *d_dout = to_dev(be, dout, (size_t)B * (P > 0 ? P : 1) * 4),
              *d_out = be->alloc((size_t)B * (P + 1) * 4), *d_de = be->alloc(nf * 4);
        dense_fm_forward(out, e, B, F, D);
        be->fm_forward(d_out, d_e, B, F, D);
        expect_close(be, d_out, out, (size_t)B, tol * F, eps * 10, "fm forward");
        dense_fm_backward(de, dout, e, B, F, D);
        be->fm_backward(d_de, d_dout, d_e, B, F, D);
        expect_close(be, d_de, de, ne, tol, eps, "fm backward");
        dense_ffm_forward(out, e, B, F, D);
        be->ffm_forward(d_out, d_e, B, F, D);
        expect_close(be, d_out, out, (size_t)B, tol * F, eps * 10, "ffm forward");
        dense_ffm_backward(de, dout, e, B, F, D);
        be->ffm_backward(d_de, d_dout, d_e, B, F, D);
        expect_close(be, d_de, de, nf, tol, eps, "ffm backward");
        dense_dot_forward(out, e, B, F, D);
        be->dot_forward(d_out, d_e, B, F, D);
        expect_close(be, d_out, out, (size_t)B * P, tol, eps, "dot forward");
        dense_dot_backward(de, dout, e, B, F, D);
        be->dot_backward(d_de, d_dout, d_e, B, F, D);
        expect_close(be, d_de, de, ne, tol * F, eps * 10, "dot backward");
        be->release(d_e), be->release(d_dout), be->release(d_out), be->release(d_de);
        free(e), free(dout), free(out), free(de);
    }
}

static void check_cross_concat_bce(const dense_backend *be, float tol, float eps)
{
    int B = 65, C = 39;
    size_t n = (size_t)B * C;
    float *x0 = host_rand(n), *xl = host_rand(n), *w = host_rand((size_t)C * C), *b = host_rand((size_t)C),
          *dout = host_rand(n), *out = malloc(n * 4), *t = malloc(n * 4), *tmp = malloc(n * 4), *dx0 = host_rand(n),
          *dxl = malloc(n * 4), *dw = host_rand((size_t)C * C), *db = host_rand((size_t)C);
    float *d_x0 = to_dev(be, x0, n * 4), *d_xl = to_dev(be, xl, n * 4), *d_w = to_dev(be, w, (size_t)C * C * 4),
          *d_b = to_dev(be, b, (size_t)C * 4), *d_dout = to_dev(be, dout, n * 4), *d_out = be->alloc(n * 4),
          *d_t = be->alloc(n * 4), *d_tmp = be->alloc(n * 4), *d_dx0 = to_dev(be, dx0, n * 4), *d_dxl = be->alloc(n * 4),
          *d_dw = to_dev(be, dw, (size_t)C * C * 4), *d_db = to_dev(be, db, (size_t)C * 4);
    dense_cross_forward(out, t, x0, xl, w, b, B, C);
    be->cross_forward(d_out, d_t, d_x0, d_xl, d_w, d_b, B, C);
    expect_close(be, d_out, out, n, tol, eps, "cross forward");
    expect_close(be, d_t, t, n, tol, eps, "cross forward t");
    dense_cross_backward(dx0, dxl, dw, db, tmp, dout, x0, xl, t, w, B, C);
    be->cross_backward(d_dx0, d_dxl, d_dw, d_db, d_tmp, d_dout, d_x0, d_xl, d_t, d_w, B, C);
    expect_close(be, d_dx0, dx0, n, tol, eps, "cross backward dx0");
    expect_close(be, d_dxl, dxl, n, tol, eps, "cross backward dxl");
    expect_close(be, d_dw, dw, (size_t)C * C, tol * sqrtf((float)B), eps, "cross backward dw");
    expect_close(be, d_db, db, (size_t)C, tol * sqrtf((float)B), eps, "cross backward db");
    /* concat of three parts, back with and without accumulation, one part skipped */
    int Cs[3] = { 3, 17, 1 }, T = 21;
    float *parts[3], *d_parts[3], *cat = malloc((size_t)B * T * 4), *d_cat = be->alloc((size_t)B * T * 4);
    for (int i = 0; i < 3; i++) {
        parts[i] = host_rand((size_t)B * Cs[i]);
        d_parts[i] = to_dev(be, parts[i], (size_t)B * Cs[i] * 4);
    }
    dense_concat_forward(cat, (const float *const *)parts, Cs, 3, B);
    be->concat_forward(d_cat, (const float *const *)d_parts, Cs, 3, B);
    expect_close(be, d_cat, cat, (size_t)B * T, 0, 0, "concat forward");
    for (int acc = 0; acc < 2; acc++) {
        float *hp[3] = { parts[0], NULL, parts[2] }, *dp[3] = { d_parts[0], NULL, d_parts[2] };
        dense_concat_backward(hp, cat, Cs, 3, B, acc);
        be->concat_backward(dp, d_cat, Cs, 3, B, acc);
        expect_close(be, d_parts[0], parts[0], (size_t)B * Cs[0], 0, 0, "concat backward 0");
        expect_close(be, d_parts[2], parts[2], (size_t)B * Cs[2], 0, 0, "concat backward 2");
    }
    expect_close(be, d_parts[1], parts[1], (size_t)B * Cs[1], 0, 0, "concat backward skipped part unchanged");
    /* loss: large logits too */
    float *logit = host_rand((size_t)B), *label = malloc((size_t)B * 4), *dl = malloc((size_t)B * 4);
    for (int i = 0; i < B; i++) logit[i] *= i % 5 ? 3 : 60, label[i] = (float)(i % 3 == 0);
    float *d_logit = to_dev(be, logit, (size_t)B * 4), *d_label = to_dev(be, label, (size_t)B * 4),
          *d_dl = be->alloc((size_t)B * 4);
    double l_cpu = dense_bce_forward_backward(dl, logit, label, B), l_dev = be->bce_forward_backward(d_dl, d_logit, d_label, B);
    cr_assert(fabs(l_cpu - l_dev) <= tol + fabs(l_cpu) * eps, "bce loss: device %.9g cpu %.9g", l_dev, l_cpu);
    expect_close(be, d_dl, dl, (size_t)B, tol, eps, "bce dlogit");
    void *all[] = { d_x0, d_xl, d_w, d_b, d_dout, d_out, d_t, d_tmp, d_dx0, d_dxl, d_dw, d_db, d_cat,
                    d_parts[0], d_parts[1], d_parts[2], d_logit, d_label, d_dl };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->release(all[i]);
    free(x0), free(xl), free(w), free(b), free(dout), free(out), free(t), free(tmp), free(dx0), free(dxl), free(dw),
        free(db), free(cat), free(parts[0]), free(parts[1]), free(parts[2]), free(logit), free(label), free(dl);
}

static void check_optimizers(const dense_backend *be, float tol, float eps)
{
    size_t n = 10007;
    for (int k = 0; k < 3; k++) {
        dense_opt o;
        dense_opt_default(&o, (dense_opt_kind)k);
        o.l2 = 1e-3f;
        int mom = dense_opt_moments(o.kind);
        float *p = host_rand(n), *g = host_rand(n), *m = calloc(n * (size_t)(mom ? mom : 1), 4);
        float *d_p = to_dev(be, p, n * 4), *d_g = to_dev(be, g, n * 4), *d_m = to_dev(be, m, n * (size_t)(mom ? mom : 1) * 4);
        for (uint64_t step = 1; step <= 3; step++) {
            dense_opt_step(&o, p, g, m, n, step);
            be->opt_step(&o, d_p, d_g, d_m, n, step);
        }
        expect_close(be, d_p, p, n, tol, eps, dense_opt_name(o.kind));
        expect_close(be, d_m, m, n * (size_t)mom, tol, eps, dense_opt_name(o.kind));
        be->release(d_p), be->release(d_g), be->release(d_m);
        free(p), free(g), free(m);
    }
}

/* The wide part, the logit's sum, DCN-V2's head, add and copy. */
static void check_wide_sum_rowdot(const dense_backend *be, float tol, float eps)
{
    int B = 45, F = 4, ND = 3, C = 37;
    size_t U = 19;
    batch_entries e = make_entries(B, F + 1, 2, U);   /* field F is numeric: slot -1, skipped */
    uint32_t *uidx = e.uidx;
    uint16_t *field = e.field;
    float *val = e.val;
    uint64_t *rp = e.rp;
    size_t nnz = e.nnz;
    int32_t slot[5] = { 0, 1, 2, 3, -1 };
    float *w = host_rand(U), *x = host_rand((size_t)B * ND), *wd = host_rand((size_t)ND), *dout = host_rand((size_t)B),
          *out = malloc((size_t)B * 4), *dw = host_rand(U), *dwd = host_rand((size_t)ND);
    void *d_uidx = to_dev(be, uidx, nnz * 4), *d_field = to_dev(be, field, nnz * 2), *d_val = to_dev(be, val, nnz * 4),
         *d_rp = to_dev(be, rp, ((size_t)B + 1) * 8), *d_slot = to_dev(be, slot, sizeof slot);
    float *d_w = to_dev(be, w, U * 4), *d_x = to_dev(be, x, (size_t)B * ND * 4), *d_wd = to_dev(be, wd, (size_t)ND * 4),
          *d_dout = to_dev(be, dout, (size_t)B * 4), *d_out = be->alloc((size_t)B * 4), *d_dw = to_dev(be, dw, U * 4),
          *d_dwd = to_dev(be, dwd, (size_t)ND * 4);
    for (int nd = 0; nd <= ND; nd += ND) {
        dense_wide_forward(out, w, uidx, field, val, rp, slot, x, wd, B, nd);
        be->wide_forward(d_out, d_w, d_uidx, d_field, d_val, d_rp, d_slot, d_x, d_wd, B, nd);
        expect_close(be, d_out, out, (size_t)B, tol, eps, "wide forward");
        dense_wide_backward(dw, dwd, dout, uidx, field, val, rp, slot, x, B, nd);
        be->wide_backward(d_dw, d_dwd, d_dout, d_uidx, d_field, d_val, d_rp, d_slot, d_x, B, nd);
        expect_close(be, d_dw, dw, U, tol * 10, eps * 10, "wide backward dw");
        expect_close(be, d_dwd, dwd, (size_t)ND, tol * sqrtf((float)B), eps * 10, "wide backward dwd");
    }
    /* the logit: bias plus three parts */
    float *parts[3], *d_parts[3], bias = 0.25f, *d_bias = to_dev(be, &bias, 4), dbias = 0.5f, *d_dbias = to_dev(be, &dbias, 4);
    for (int i = 0; i < 3; i++) parts[i] = host_rand((size_t)B), d_parts[i] = to_dev(be, parts[i], (size_t)B * 4);
    dense_sum_forward(out, (const float *const *)parts, 3, &bias, B);
    be->sum_forward(d_out, (const float *const *)d_parts, 3, d_bias, B);
    expect_close(be, d_out, out, (size_t)B, tol, eps, "sum forward");
    dense_sum_backward(&dbias, dout, B);
    be->sum_backward(d_dbias, d_dout, B);
    expect_close(be, d_dbias, &dbias, 1, tol * sqrtf((float)B), eps, "sum backward");
    /* the head: (B, C) -> (B) */
    float *in = host_rand((size_t)B * C), *hw = host_rand((size_t)C), hb = -0.5f, *din = malloc((size_t)B * C * 4),
          *hdw = host_rand((size_t)C), hdb = 0.125f;
    float *d_in = to_dev(be, in, (size_t)B * C * 4), *d_hw = to_dev(be, hw, (size_t)C * 4), *d_hb = to_dev(be, &hb, 4),
          *d_din = be->alloc((size_t)B * C * 4), *d_hdw = to_dev(be, hdw, (size_t)C * 4), *d_hdb = to_dev(be, &hdb, 4);
    dense_rowdot_forward(out, in, hw, &hb, B, C);
    be->rowdot_forward(d_out, d_in, d_hw, d_hb, B, C);
    expect_close(be, d_out, out, (size_t)B, tol * 10, eps * 10, "rowdot forward");
    dense_rowdot_backward(din, hdw, &hdb, dout, in, hw, B, C);
    be->rowdot_backward(d_din, d_hdw, d_hdb, d_dout, d_in, d_hw, B, C);
    expect_close(be, d_din, din, (size_t)B * C, tol, eps, "rowdot backward din");
    expect_close(be, d_hdw, hdw, (size_t)C, tol * sqrtf((float)B), eps * 10, "rowdot backward dw");
    expect_close(be, d_hdb, &hdb, 1, tol * sqrtf((float)B), eps * 10, "rowdot backward db");
    /* add and copy */
    dense_add(in, din, (size_t)B * C);
    be->add(d_in, d_din, (size_t)B * C);
    expect_close(be, d_in, in, (size_t)B * C, tol, eps, "add");
    be->copy(d_din, d_in, (size_t)B * C * 4);
    expect_close(be, d_din, in, (size_t)B * C, tol, eps, "copy");
    void *all[] = { d_uidx, d_field, d_val, d_rp, d_slot, d_w, d_x, d_wd, d_dout, d_out, d_dw, d_dwd, d_bias, d_dbias,
                    d_parts[0], d_parts[1], d_parts[2], d_in, d_hw, d_hb, d_din, d_hdw, d_hdb };
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->release(all[i]);
    free(uidx), free(field), free(val), free(rp), free(w), free(x), free(wd), free(dout), free(out), free(dw), free(dwd);
    free(parts[0]), free(parts[1]), free(parts[2]), free(in), free(hw), free(din), free(hdw);
}

/* The pass tier's kernels: gather a batch's unique rows out of a slab of records, and every
 * sparse optimizer inside them, against the CPU's (sparse_opt_update, what a table's rows get). */
static void check_rows(const dense_backend *be, float tol, float eps)
{
    for (int has_w = 0; has_w < 2; has_w++)
        for (int k = 0; k < 5; k++) {
            sparse_opt o;
            sparse_opt_default(&o, (sparse_opt_kind)k);
            o.l2 = k == SOPT_FTRL ? 0 : 1e-3f;
            o.ftrl_l1 = 0.01f;
            size_t U = 61, R = 64, slots = 200, widths[3] = { has_w ? 0 : 8, 5, 16 };   /* rows of three widths (with has_w, one table without embeddings) */
            size_t *rec = malloc(U * sizeof *rec), *uoff = malloc((U + 1) * sizeof *uoff);
            uoff[0] = 0;
            for (size_t u = 0; u < U; u++) {
                rec[u] = (u * 37 % slots) * R;   /* distinct slots, out of order */
                uoff[u + 1] = uoff[u] + widths[(u + (size_t)has_w) % 3];
            }
            float *slab = host_rand(slots * R), *w = malloc(U * 4), *e = malloc((uoff[U] + 1) * 4), *dw = host_rand(U),
                  *de = host_rand(uoff[U] + 1);
            for (size_t i = 0; i < slots * R; i++) slab[i] = fabsf(slab[i]) + (k == SOPT_FTRL ? 0 : 0.1f);   /* accumulators >= 0 */
            void *d_rec = to_dev(be, rec, U * sizeof *rec), *d_uoff = to_dev(be, uoff, (U + 1) * sizeof *uoff);
            float *d_slab = to_dev(be, slab, slots * R * 4), *d_w = be->alloc(U * 4), *d_e = be->alloc((uoff[U] + 1) * 4),
                  *d_dw = to_dev(be, dw, U * 4), *d_de = to_dev(be, de, (uoff[U] + 1) * 4);
            dense_rows_gather(w, e, slab, rec, uoff, has_w, U);
            be->rows_gather(d_w, d_e, d_slab, d_rec, d_uoff, has_w, U);
            if (has_w) expect_close(be, d_w, w, U, 0, 0, "rows gather w");
            expect_close(be, d_e, e, uoff[U], 0, 0, "rows gather e");
            for (uint64_t step = 1; step <= 3; step++) {
                dense_rows_update(slab, rec, uoff, dw, de, has_w, &o, step, U);
                be->rows_update(d_slab, d_rec, d_uoff, d_dw, d_de, has_w, &o, step, U);
            }
            char what[64];
            snprintf(what, sizeof what, "rows update %s has_w=%d", sparse_opt_name(o.kind), has_w);
            expect_close(be, d_slab, slab, slots * R, tol, eps * 10, what);
            void *all[] = { d_rec, d_uoff, d_slab, d_w, d_e, d_dw, d_de };
            for (size_t i = 0; i < sizeof all / sizeof *all; i++) be->release(all[i]);
            free(rec), free(uoff), free(slab), free(w), free(e), free(dw), free(de);
        }
}

static void check_all(const dense_backend *be, float tol, float eps)
{
    check_wide_sum_rowdot(be, tol, eps);
    check_rows(be, tol, eps);
    check_linear(be, tol, eps);
    check_elementwise(be, tol, eps);
    check_batchnorm(be, tol, eps);
    check_pool(be, tol, eps);
    check_interactions(be, tol, eps);
    check_cross_concat_bce(be, tol, eps);
    check_optimizers(be, tol, eps);
}

Test(gpu, kernels_match_their_cpu_twins)
{
    const char *why;
    const dense_backend *be = device_gpu(&why);
    if (!be) cr_skip_test("no GPU: %s", why);
    check_all(be, 1e-4f, 1e-4f);
}

/* The harness itself, on the simulated device: the CPU's kernels, so exactly equal. */
Test(gpu, harness_on_the_simulated_device)
{
    check_all(&dense_backend_sim, 0, 0);
    cr_assert_eq(dense_backend_sim_buffers(), 0, "device buffers leaked");
}
