/*
 * test_layers.c: a finite-difference gradient check for every dense layer. Each check takes
 * L = sum(r * out) for a fixed random r, runs the layer's backward with dout = r, and compares
 * every input and weight gradient with central differences of L (computed in double). The
 * linear layer's products, in blocks on several threads, are also checked against sums in double
 * and for the same bits on one, two and three threads.
 */
#include <cblas.h>
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../dense/backend.h"
#include "../dense/layers.h"

#define EPS 1e-2f

static unsigned seed = 12345;
/* every buffer a test allocates, freed by the suite's teardown */
static void *owned[256];
static int n_owned;
static void *own(void *p)
{
    cr_assert_lt(n_owned, 256);
    return owned[n_owned++] = p;
}
static void free_owned(void)
{
    while (n_owned) free(owned[--n_owned]);
}
TestSuite(layers, .fini = free_owned);

static float frand(void) { return (float)rand_r(&seed) / (float)RAND_MAX * 2.0f - 1.0f; }
static float *rnd(size_t n)
{
    float *p = own(malloc(n * sizeof *p));
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}
static float *zeros(size_t n) { return own(calloc(n, sizeof(float))); }

typedef double (*loss_fn)(void *ctx);

/* Compare analytic gradient g of every element of x against central differences of loss. */
static void check(const char *what, float *x, size_t n, const float *g, loss_fn loss, void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + EPS;
        double lp = loss(ctx);
        x[i] = keep - EPS;
        double lm = loss(ctx);
        x[i] = keep;
        double num = (lp - lm) / (2.0 * EPS);
        cr_assert(fabs(num - g[i]) <= 3e-3 + 2e-2 * fabs(num), "%s[%zu]: analytic %g, numeric %g", what, i,
                  (double)g[i], num);
    }
}

static double dotd(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* ---- linear ---- */
typedef struct { int B, C, OC; float *in, *w, *b, *out, *r; } lin_ctx;
static double lin_loss(void *p)
{
    lin_ctx *c = p;
    dense_linear_forward(c->out, c->in, c->w, c->b, c->B, c->C, c->OC);
    return dotd(c->out, c->r, (size_t)c->B * c->OC);
}
Test(layers, linear)
{
    lin_ctx c = { 5, 7, 3 };
    c.in = rnd(35), c.w = rnd(21), c.b = rnd(3), c.out = zeros(15), c.r = rnd(15);
    float *din = zeros(35), *dw = zeros(21), *db = zeros(3);
    lin_loss(&c);
    dense_linear_backward(din, dw, db, c.r, c.in, c.w, c.B, c.C, c.OC);
    check("linear.in", c.in, 35, din, lin_loss, &c);
    check("linear.w", c.w, 21, dw, lin_loss, &c);
    check("linear.b", c.b, 3, db, lin_loss, &c);
}

/* The products run in blocks of the batch (d weight: partial sums added in order) and, for wide
 * layers and small batches, of d weight's rows, on as many threads as there are: against sums in
 * double, for shapes of one block, uneven blocks, a small batch, the wide path and the scratch's
 * limit; and the same bits with one,
 * two and three threads, whatever OpenBLAS's own thread count was set to (before, each --threads
 * rounded the products its own way). */
Test(layers, linear_in_blocks_is_exact_and_the_same_on_any_threads)
{
    static const int shapes[][3] = { { 1, 3, 1 },     { 17, 5, 4 },    { 256, 429, 400 }, { 1000, 64, 1 },
                                     { 4096, 400, 400 }, { 777, 40, 600 }, { 2048, 4000, 300 } };
    const int threads[] = { 1, 2, 3, -3 };   /* -3: 3 threads, the products on one (the preflight's fallback) */
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        int B = shapes[si][0], C = shapes[si][1], OC = shapes[si][2];
        size_t nin = (size_t)B * C, nw = (size_t)OC * C, nout = (size_t)B * OC;
        float *in = malloc(nin * sizeof *in), *w = malloc(nw * sizeof *w), *b = malloc(OC * sizeof *b);
        float *dout = malloc(nout * sizeof *dout), *dw0 = malloc(nw * sizeof *dw0);
        for (size_t i = 0; i < nin; i++) in[i] = frand();
        for (size_t i = 0; i < nw; i++) w[i] = frand(), dw0[i] = frand();
        for (int i = 0; i < OC; i++) b[i] = frand();
        for (size_t i = 0; i < nout; i++) dout[i] = frand();
        float *ref[3] = { NULL };   /* out, din, dw of the first thread count */
        for (size_t ti = 0; ti < sizeof threads / sizeof *threads; ti++) {
            int nt = abs(threads[ti]);
            omp_set_num_threads(nt);
            openblas_set_num_threads(nt);
            dense_products_one_thread(threads[ti] < 0);
            float *out = malloc(nout * sizeof *out), *din = malloc(nin * sizeof *din), *dw = malloc(nw * sizeof *dw);
            memcpy(dw, dw0, nw * sizeof *dw);
            dense_linear_forward(out, in, w, b, B, C, OC);
            dense_linear_backward(din, dw, NULL, dout, in, w, B, C, OC);
            if (!ref[0]) {
                ref[0] = out, ref[1] = din, ref[2] = dw;
                /* a sample of each output against the sum in double, within the rounding of its terms */
                for (int k = 0; k < 200; k++) {
                    int i = (int)((unsigned)k * 7919u % (unsigned)B), o = (int)((unsigned)k * 104729u % (unsigned)OC);
                    int j = (int)((unsigned)k * 1299709u % (unsigned)C);
                    double s = b[o], mag = fabs(b[o]);
                    for (int c = 0; c < C; c++) s += (double)in[(size_t)i * C + c] * w[(size_t)o * C + c],
                                                mag += fabs((double)in[(size_t)i * C + c] * w[(size_t)o * C + c]);
                    cr_assert(fabs(out[(size_t)i * OC + o] - s) <= 1e-5 * mag + 1e-6, "%dx%dx%d out[%d,%d] %g, sum %g",
                              B, C, OC, i, o, (double)out[(size_t)i * OC + o], s);
                    s = mag = 0;
                    for (int q = 0; q < OC; q++) s += (double)dout[(size_t)i * OC + q] * w[(size_t)q * C + j],
                                                 mag += fabs((double)dout[(size_t)i * OC + q] * w[(size_t)q * C + j]);
                    cr_assert(fabs(din[(size_t)i * C + j] - s) <= 1e-5 * mag + 1e-6, "%dx%dx%d din[%d,%d]", B, C, OC, i, j);
                    s = dw0[(size_t)o * C + j], mag = fabs(s);
                    for (int r = 0; r < B; r++) s += (double)dout[(size_t)r * OC + o] * in[(size_t)r * C + j],
                                                mag += fabs((double)dout[(size_t)r * OC + o] * in[(size_t)r * C + j]);
                    cr_assert(fabs(dw[(size_t)o * C + j] - s) <= 1e-5 * mag + 1e-6, "%dx%dx%d dw[%d,%d] %g, sum %g", B,
                              C, OC, o, j, (double)dw[(size_t)o * C + j], s);
                }
            } else {
                cr_assert(memcmp(out, ref[0], nout * sizeof *out) == 0, "%dx%dx%d forward: %d threads", B, C, OC,
                          threads[ti]);
                cr_assert(memcmp(din, ref[1], nin * sizeof *din) == 0, "%dx%dx%d d input: %d threads", B, C, OC,
                          threads[ti]);
                cr_assert(memcmp(dw, ref[2], nw * sizeof *dw) == 0, "%dx%dx%d d weight: %d threads", B, C, OC,
                          threads[ti]);
                free(out), free(din), free(dw);
            }
        }
        for (int i = 0; i < 3; i++) free(ref[i]);
        free(in), free(w), free(b), free(dout), free(dw0);
    }
    dense_products_one_thread(0);
    omp_set_num_threads(2);
}

/* The preflight's check that its products on OpenMP's threads ran at once (dense/backend.c): only
 * calls all running together, by more than half the shortest, pass it */
Test(layers, calls_running_at_once_are_told_from_calls_one_after_another)
{
    static const struct { int n, at_once; double t0[3], t1[3]; } cases[] = {
        { 1, 1, { 0 }, { 1 } },
        { 2, 1, { 0, 0.01 }, { 1, 1.02 } },           /* started together */
        { 2, 1, { 0, 0.2 }, { 1, 0.4 } },             /* one inside the other */
        { 2, 0, { 0, 1 }, { 1, 2 } },                 /* one after the other */
        { 2, 0, { 0, 1.5 }, { 1, 2 } },
        { 2, 0, { 1.5, 0 }, { 2, 1 } },
        { 2, 0, { 0, 0.95 }, { 1, 1.95 } },           /* together for a twentieth only */
        { 3, 0, { 0, 0.9, 1.5 }, { 1, 2, 2.5 } },     /* each with the next, never all three */
        { 3, 1, { 0, 0.1, 0.2 }, { 1.2, 1.1, 1 } },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        cr_assert_eq(dense_calls_overlapped(cases[i].t0, cases[i].t1, cases[i].n), cases[i].at_once, "case %zu", i);
}

/* ---- elementwise: relu, sigmoid, dropout ---- */
typedef struct { int kind; size_t n; float *in, *out, *r; uint8_t *mask; } ew_ctx;
static double ew_loss(void *p)
{
    ew_ctx *c = p;
    if (c->kind == 0) dense_relu_forward(c->out, c->in, c->n);
    if (c->kind == 1) dense_sigmoid_forward(c->out, c->in, c->n);
    if (c->kind == 2) dense_dropout_forward(c->out, c->mask, c->in, c->n, 0.3f, 7, 3, 1);
    return dotd(c->out, c->r, c->n);
}
Test(layers, relu_sigmoid_dropout)
{
    for (int kind = 0; kind < 3; kind++) {
        ew_ctx c = { kind, 40 };
        c.in = rnd(40), c.out = zeros(40), c.r = rnd(40), c.mask = own(malloc(40));
        for (int i = 0; i < 40; i++)
            if (fabsf(c.in[i]) < 0.05f) c.in[i] = 0.3f;   /* away from relu's kink */
        float *din = zeros(40);
        ew_loss(&c);
        if (kind == 0) dense_relu_backward(din, c.r, c.out, 40);
        if (kind == 1) dense_sigmoid_backward(din, c.r, c.out, 40);
        if (kind == 2) {
            dense_dropout_backward(din, c.r, c.mask, 40, 0.3f);
            int kept = 0;
            for (int i = 0; i < 40; i++) kept += c.mask[i];
            cr_assert(kept > 10 && kept < 40, "dropout keeps about 70%%: %d of 40", kept);
        }
        check(kind == 0 ? "relu" : kind == 1 ? "sigmoid" : "dropout", c.in, 40, din, ew_loss, &c);
    }
}

/* ---- batch norm ---- */
typedef struct { int B, C; float *in, *g, *be, *out, *mean, *rstd, *r; } bn_ctx;
static double bn_loss(void *p)
{
    bn_ctx *c = p;
    dense_batchnorm_forward(c->out, c->mean, c->rstd, NULL, NULL, c->in, c->g, c->be, c->B, c->C, 0.1f, 1e-5f, 1);
    return dotd(c->out, c->r, (size_t)c->B * c->C);
}
Test(layers, batchnorm)
{
    bn_ctx c = { 6, 4 };
    c.in = rnd(24), c.g = rnd(4), c.be = rnd(4), c.out = zeros(24), c.mean = zeros(4), c.rstd = zeros(4), c.r = rnd(24);
    float *din = zeros(24), *dg = zeros(4), *db = zeros(4);
    bn_loss(&c);
    dense_batchnorm_backward(din, dg, db, c.r, c.in, c.mean, c.rstd, c.g, c.B, c.C);
    check("bn.in", c.in, 24, din, bn_loss, &c);
    check("bn.gamma", c.g, 4, dg, bn_loss, &c);
    check("bn.beta", c.be, 4, db, bn_loss, &c);
    /* running statistics and inference mode */
    float rm[4] = { 0 }, rv[4] = { 1, 1, 1, 1 };
    dense_batchnorm_forward(c.out, c.mean, c.rstd, rm, rv, c.in, c.g, c.be, c.B, c.C, 1.0f, 1e-5f, 1);
    float *o2 = zeros(24);
    dense_batchnorm_forward(o2, NULL, NULL, rm, rv, c.in, c.g, c.be, c.B, c.C, 0.1f, 1e-5f, 0);
    /* momentum 1: running = batch stats (unbiased variance), so inference differs only by B/(B-1) */
    for (int i = 0; i < 24; i++) {
        float xhat_inf = (o2[i] - c.be[i % 4]) / c.g[i % 4], xhat_tr = (c.out[i] - c.be[i % 4]) / c.g[i % 4];
        cr_assert_float_eq(xhat_inf, xhat_tr * sqrtf(5.0f / 6.0f), 1e-3);
    }
}

/* ---- pooling (sum and mean, multi-hot, values) ---- */
typedef struct { int mean, mixed; float *emb, *out, *r; } pool_ctx;
static const uint64_t pool_rows[] = { 0, 3, 4, 8 };
static const uint32_t pool_uidx[] = { 0, 1, 2, 3, 2, 4, 1, 2 };   /* each row in one slot */
static const uint16_t pool_field[] = { 0, 0, 2, 1, 2, 0, 1, 1 };
static const float pool_val[] = { 1, 0.5f, 2, 1, 1, 1, -1, 3 };
static const int32_t pool_slot[] = { 0, -1, 1 };   /* field 1 is not pooled */
/* uniform: both slots 4 wide; mixed: slot 0 is 4 wide, slot 1 is 2 wide (its own table) */
static const int pool_off[2][2] = { { 0, 4 }, { 0, 4 } }, pool_dim[2][2] = { { 4, 4 }, { 4, 2 } };
static const size_t pool_uoff[2][5] = { { 0, 4, 8, 12, 16 }, { 0, 4, 8, 10, 14 } };
static double pool_loss(void *p)
{
    pool_ctx *c = p;
    int W = 4 + pool_dim[c->mixed][1];
    dense_pool_forward(c->out, c->emb, pool_uoff[c->mixed], pool_uidx, pool_field, pool_val, pool_rows, pool_slot,
                       pool_off[c->mixed], pool_dim[c->mixed], c->mean, 3, 2, W);
    return dotd(c->out, c->r, (size_t)3 * W);
}
Test(layers, pooling)
{
    /* rows 0, 1, 4 belong to slot 0 (field 0), rows 2, 3 to slot 1 (field 2) in the entries */
    for (int mixed = 0; mixed < 2; mixed++)
        for (int mean = 0; mean < 2; mean++) {
            pool_ctx c = { mean, mixed };
            int W = 4 + pool_dim[mixed][1];
            c.emb = rnd(20), c.out = zeros((size_t)3 * W), c.r = rnd((size_t)3 * W);
            float *de = zeros(20);
            pool_loss(&c);
            dense_pool_backward(de, c.r, pool_uoff[mixed], pool_uidx, pool_field, pool_val, pool_rows, pool_slot,
                                pool_off[mixed], pool_dim[mixed], mean, 3, 2, W);
            check(mean ? "pool.mean" : "pool.sum", c.emb, 20, de, pool_loss, &c);
        }
}

/* ---- FM, FFM, dot interaction ---- */
typedef struct { int kind, B, F, D; float *e, *out, *r; } ia_ctx;
static size_t ia_in(const ia_ctx *c) { return (size_t)c->B * c->F * (c->kind == 1 ? c->F : 1) * c->D; }
static size_t ia_out(const ia_ctx *c) { return (size_t)c->B * (c->kind == 2 ? c->F * (c->F - 1) / 2 : 1); }
static double ia_loss(void *p)
{
    ia_ctx *c = p;
    if (c->kind == 0) dense_fm_forward(c->out, c->e, c->B, c->F, c->D);
    if (c->kind == 1) dense_ffm_forward(c->out, c->e, c->B, c->F, c->D);
    if (c->kind == 2) dense_dot_forward(c->out, c->e, c->B, c->F, c->D);
    return dotd(c->out, c->r, ia_out(c));
}
Test(layers, fm_ffm_dot)
{
    for (int kind = 0; kind < 3; kind++) {
        ia_ctx c = { kind, 3, 4, 3 };
        c.e = rnd(ia_in(&c)), c.out = zeros(ia_out(&c)), c.r = rnd(ia_out(&c));
        float *de = zeros(ia_in(&c));
        ia_loss(&c);
        if (kind == 0) dense_fm_backward(de, c.r, c.e, c.B, c.F, c.D);
        if (kind == 1) dense_ffm_backward(de, c.r, c.e, c.B, c.F, c.D);
        if (kind == 2) dense_dot_backward(de, c.r, c.e, c.B, c.F, c.D);
        check(kind == 0 ? "fm" : kind == 1 ? "ffm" : "dot", c.e, ia_in(&c), de, ia_loss, &c);
    }
    /* FM equals the explicit pairwise sum */
    float e[2 * 3 * 2] = { 1, 2, 3, 4, 5, 6, -1, 0.5f, 2, 2, 0, 1 }, out[2];
    dense_fm_forward(out, e, 2, 3, 2);
    cr_assert_float_eq(out[0], (1 * 3 + 2 * 4) + (1 * 5 + 2 * 6) + (3 * 5 + 4 * 6), 1e-5);
}

/* ---- DCN-V2 cross ---- */
typedef struct { int B, C; float *x0, *xl, *w, *b, *t, *out, *r; } cr_ctx;
static double cr_loss(void *p)
{
    cr_ctx *c = p;
    dense_cross_forward(c->out, c->t, c->x0, c->xl, c->w, c->b, c->B, c->C);
    return dotd(c->out, c->r, (size_t)c->B * c->C);
}
Test(layers, cross)
{
    cr_ctx c = { 4, 5 };
    c.x0 = rnd(20), c.xl = rnd(20), c.w = rnd(25), c.b = rnd(5), c.t = zeros(20), c.out = zeros(20), c.r = rnd(20);
    float *dx0 = zeros(20), *dxl = zeros(20), *dw = zeros(25), *db = zeros(5), *tmp = zeros(20);
    cr_loss(&c);
    dense_cross_backward(dx0, dxl, dw, db, tmp, c.r, c.x0, c.xl, c.t, c.w, c.B, c.C);
    check("cross.x0", c.x0, 20, dx0, cr_loss, &c);
    check("cross.xl", c.xl, 20, dxl, cr_loss, &c);
    check("cross.w", c.w, 25, dw, cr_loss, &c);
    check("cross.b", c.b, 5, db, cr_loss, &c);
}

/* ---- concat ---- */
typedef struct { float *a, *b, *out, *r; } cc_ctx;
static double cc_loss(void *p)
{
    cc_ctx *c = p;
    const float *in[2] = { c->a, c->b };
    int C[2] = { 2, 3 };
    dense_concat_forward(c->out, in, C, 2, 3);
    return dotd(c->out, c->r, 15);
}
Test(layers, concat)
{
    cc_ctx c = { rnd(6), rnd(9), zeros(15), rnd(15) };
    float *da = zeros(6), *db = zeros(9);
    float *d[2] = { da, db };
    int C[2] = { 2, 3 };
    cc_loss(&c);
    dense_concat_backward(d, c.r, C, 2, 3, 0);
    check("concat.a", c.a, 6, da, cc_loss, &c);
    check("concat.b", c.b, 9, db, cc_loss, &c);
}

/* ---- BCE on logits ---- */
typedef struct { float *z, *y; } bce_ctx;
static double bce_loss(void *p)
{
    bce_ctx *c = p;
    return dense_bce_forward_backward(NULL, c->z, c->y, 6);
}
Test(layers, bce)
{
    float z[6] = { -3, -0.5f, 0, 0.7f, 2, 40 }, y[6] = { 0, 1, 1, 0, 1, 1 }, dz[6];
    bce_ctx c = { z, y };
    double l = dense_bce_forward_backward(dz, z, y, 6);
    check("bce.logit", z, 6, dz, bce_loss, &c);
    double want = 0;
    for (int i = 0; i < 6; i++) {
        double p = 1 / (1 + exp(-(double)z[i]));
        want -= y[i] ? log(p) : log(1 - p);
    }
    cr_assert_float_eq(l, want / 6, 1e-6);
    float big[1] = { -200 }, one[1] = { 1 };
    cr_assert(isfinite(dense_bce_forward_backward(NULL, big, one, 1)), "stable for large logits");
}

/* ---- the wide part (entries of pooling's batch, one field not pooled), with and without dense values ---- */
typedef struct { int nd; float *w, *x, *wd, *out, *r; } wide_ctx;
static double wide_loss(void *p)
{
    wide_ctx *c = p;
    dense_wide_forward(c->out, c->w, pool_uidx, pool_field, pool_val, pool_rows, pool_slot, c->x, c->wd, 3, c->nd);
    return dotd(c->out, c->r, 3);
}
Test(layers, wide)
{
    for (int nd = 0; nd <= 2; nd += 2) {
        wide_ctx c = { nd, rnd(5), rnd(6), rnd(2), zeros(3), rnd(3) };
        float *dw = zeros(5), *dwd = zeros(2);
        wide_loss(&c);
        dense_wide_backward(dw, dwd, c.r, pool_uidx, pool_field, pool_val, pool_rows, pool_slot, c.x, 3, nd);
        check("wide.w", c.w, 5, dw, wide_loss, &c);
        if (nd) check("wide.wd", c.wd, 2, dwd, wide_loss, &c);
        /* the field that is not pooled (field 1) adds nothing: row 1's entry is alone in it */
        cr_assert_float_eq(dw[3], 0.0f, 0, "entries of a numeric field carry no gradient");
    }
}

/* ---- the logit: a bias and a sum of parts ---- */
typedef struct { float *a, *b, *bias, *out, *r; } sum_ctx;
static double sum_loss(void *p)
{
    sum_ctx *c = p;
    const float *in[2] = { c->a, c->b };
    dense_sum_forward(c->out, in, 2, c->bias, 4);
    return dotd(c->out, c->r, 4);
}
Test(layers, sum)
{
    sum_ctx c = { rnd(4), rnd(4), rnd(1), zeros(4), rnd(4) };
    float *dbias = zeros(1);
    sum_loss(&c);
    dense_sum_backward(dbias, c.r, 4);
    check("sum.bias", c.bias, 1, dbias, sum_loss, &c);
    check("sum.part", c.a, 4, c.r, sum_loss, &c);   /* each part's gradient is dout itself */
}

/* ---- DCN-V2's head: a row's dot product ---- */
typedef struct { float *in, *w, *b, *out, *r; } rd_ctx;
static double rd_loss(void *p)
{
    rd_ctx *c = p;
    dense_rowdot_forward(c->out, c->in, c->w, c->b, 3, 5);
    return dotd(c->out, c->r, 3);
}
Test(layers, rowdot)
{
    rd_ctx c = { rnd(15), rnd(5), rnd(1), zeros(3), rnd(3) };
    float *din = zeros(15), *dw = zeros(5), *db = zeros(1);
    rd_loss(&c);
    dense_rowdot_backward(din, dw, db, c.r, c.in, c.w, 3, 5);
    check("rowdot.in", c.in, 15, din, rd_loss, &c);
    check("rowdot.w", c.w, 5, dw, rd_loss, &c);
    check("rowdot.b", c.b, 1, db, rd_loss, &c);
}

/* ---- the pass tier's rows: gather reads the records, the update is the table's own ---- */
Test(layers, rows_gather_and_update_are_the_tables)
{
    for (int k = 0; k < 5; k++) {
        sparse_opt o;
        sparse_opt_default(&o, (sparse_opt_kind)k);
        o.l2 = 1e-3f;
        int V = 5, R = 16;   /* a weight and 4 floats of embedding; up to 2V of state */
        size_t rec[3] = { 2 * (size_t)R, 0, (size_t)R }, uoff[4] = { 0, 4, 8, 12 };
        float *slab = rnd((size_t)3 * R), *ref = own(malloc((size_t)3 * R * sizeof(float))), w[3], e[12];
        for (int i = 0; i < 3 * R; i++) slab[i] = fabsf(slab[i]) + 0.1f;
        memcpy(ref, slab, (size_t)3 * R * sizeof(float));
        dense_rows_gather(w, e, slab, rec, uoff, 1, 3);
        for (int u = 0; u < 3; u++) {
            cr_assert_eq(w[u], slab[rec[u]]);
            cr_assert_arr_eq(e + uoff[u], slab + rec[u] + 1, 4 * sizeof(float));
        }
        float *dw = rnd(3), *de = rnd(12);
        dense_rows_update(slab, rec, uoff, dw, de, 1, &o, 7, 3);
        for (int u = 0; u < 3; u++) {
            float g[5] = { dw[u], de[uoff[u]], de[uoff[u] + 1], de[uoff[u] + 2], de[uoff[u] + 3] };
            sparse_opt_update(&o, ref + rec[u], ref + rec[u] + V, g, V, 7);
        }
        cr_assert_arr_eq(slab, ref, (size_t)3 * R * sizeof(float), "%s: not sparse_opt_update's rows", sparse_opt_name(o.kind));
    }
}

/* ---- the backend table ---- */

Test(layers, cpu_backend_table)
{
    const dense_backend *be = dense_backend_find("cpu");
    cr_assert_eq(be, &dense_backend_cpu);
    cr_assert_null(dense_backend_find("nope"));
    /* every entry is set, and each runs the kernel of the same name */
    const void *const *slot = (const void *const *)((const char *)be + sizeof(const char *));
    size_t n = (sizeof *be - sizeof(const char *)) / sizeof(void *);
    for (size_t i = 0; i < n; i++) cr_assert_not_null(slot[i], "entry %zu", i);
    cr_assert_eq((void *)be->linear_forward, (void *)dense_linear_forward);
    cr_assert_eq((void *)be->pool_backward, (void *)dense_pool_backward);
    cr_assert_eq((void *)be->bce_forward_backward, (void *)dense_bce_forward_backward);
}

/* ---- the same bits wherever the buffers lie ----
 * Each kernel runs on the same numbers placed at 16 offsets (0..15 floats past an aligned
 * address), with blocks of shifting sizes allocated in between so that a kernel's own scratch
 * moves too; every output must equal the first run's bit for bit: the model must not depend on
 * where the allocator put a batch (a batch-norm gradient once did, through contracted sums). */
typedef struct { int B, C; const float *dy, *x, *g, *be; float out[2][50 * 16], stat[4][16]; } same_bits;

static float *at(float *base, int o, const float *src, size_t n)
{
    float *p = base + o;
    memcpy(p, src, n * sizeof *p);
    return p;
}

static void bn_at(same_bits *s, int o, float *buf)
{
    size_t n = (size_t)s->B * s->C, stride = n + 16;
    float *x = at(buf, o, s->x, n), *dy = at(buf + stride, o, s->dy, n), *y = buf + 2 * stride + o, *dx = buf + 3 * stride + o;
    float *mean = buf + 4 * stride + o, *rstd = mean + 16, *dg = rstd + 16, *db = dg + 16;
    memset(dg, 0, 32 * sizeof *dg);
    dense_batchnorm_forward(y, mean, rstd, NULL, NULL, x, s->g, s->be, s->B, s->C, 0.1f, 1e-5f, 1);
    dense_batchnorm_backward(dx, dg, db, dy, x, mean, rstd, s->g, s->B, s->C);
    memcpy(s->out[0], y, n * sizeof *y), memcpy(s->out[1], dx, n * sizeof *dx);
    size_t c = (size_t)s->C * sizeof *mean;
    memcpy(s->stat[0], mean, c), memcpy(s->stat[1], rstd, c), memcpy(s->stat[2], dg, c), memcpy(s->stat[3], db, c);
}

Test(layers, results_do_not_depend_on_buffer_alignment)
{
    static const int cols[] = { 8, 13, 16 };
    for (int k = 0; k < 3; k++) {
        int C = cols[k];
        same_bits ref = { 50, C }, s;
        size_t n = (size_t)ref.B * C;
        ref.x = rnd(n), ref.dy = rnd(n), ref.g = rnd((size_t)C), ref.be = rnd((size_t)C);
        s = ref;
        size_t bytes = (5 * (n + 16) + 96) * sizeof(float);
        float *buf = own(aligned_alloc(64, (bytes + 63) / 64 * 64));   /* a multiple of the alignment (C11) */
        bn_at(&ref, 0, buf);
        for (int o = 0; o < 16; o++)
            for (int rep = 0; rep < 3; rep++) {
                own(malloc((size_t)(16 * ((o + rep) % 5) + C * 4)));   /* the kernels' scratch moves */
                memset(&s.out, 0, sizeof s.out), memset(&s.stat, 0, sizeof s.stat);
                bn_at(&s, o, buf);
                cr_assert(!memcmp(s.out, ref.out, sizeof ref.out) && !memcmp(s.stat, ref.stat, sizeof ref.stat),
                          "batch norm, %d columns, at offset %d (call %d): not the bits of offset 0", C, o, rep);
            }
    }
}
