/*
 * backend_sim.c: a simulated device for testing placement on machines without a GPU. It runs
 * the CPU kernels, but its memory is its own: alloc records every buffer, and each kernel checks
 * that every pointer it receives lies inside one of them (and upload / download check which side
 * is which). A layer placed on this device that is handed host memory, or host code that reads
 * device memory through upload/download the wrong way round, aborts with the kernel's name:
 * the mistakes that would crash or corrupt on a real GPU show up on the CPU-only CI.
 * Since the kernels are the CPU's, training placed on it must equal CPU training bit for bit.
 *
 * Selected with CTRBOX_GPU_SIM=1 (dense/device.c), which then reports it as the GPU.
 */
#include "backend_sim.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/util.h"
#include "layers.h"

typedef struct {
    const char *p;
    size_t n;
} region;

static region *regions;
static size_t n_regions, cap_regions;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Uploads that do not wait take place at upload_wait, not before: a kernel that reads their slots
 * earlier, or a source buffer reused before the wait, gives wrong numbers here (the tests compare
 * bits), as it may on a GPU, where the copy runs beside the kernels. */
typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} pending_copy;
static pending_copy *pending;
static size_t n_pending, cap_pending;

static int owned(const void *p)
{
    pthread_mutex_lock(&lock);
    int found = 0;
    for (size_t i = 0; i < n_regions && !found; i++)
        found = (const char *)p >= regions[i].p && (const char *)p < regions[i].p + regions[i].n;
    pthread_mutex_unlock(&lock);
    return found;
}

static void need(const void *p, const char *kernel, const char *arg)
{
    if (p && owned(p)) return;
    fprintf(stderr, "ctrbox: simulated GPU: %s got %s = %p, %s\n", kernel, arg, p,
            p ? "not in device memory (a host buffer?)" : "NULL");
    abort();
}
#define NEED(p) need((p), __func__, #p)
#define NEED_OPT(p) ((p) ? need((p), __func__, #p) : (void)0)

static void *sim_alloc(size_t bytes)
{
    void *p = xcalloc(bytes ? bytes : 1, 1);
    pthread_mutex_lock(&lock);
    if (n_regions == cap_regions) regions = xrealloc(regions, (cap_regions = cap_regions * 2 + 64) * sizeof *regions);
    regions[n_regions++] = (region){ p, bytes ? bytes : 1 };
    pthread_mutex_unlock(&lock);
    return p;
}

static void sim_release(void *p)
{
    if (!p) return;
    pthread_mutex_lock(&lock);
    size_t i = 0;
    while (i < n_regions && regions[i].p != p) i++;
    CHECK(i < n_regions);   /* releasing something alloc did not return */
    for (size_t k = 0; k < n_pending; k++)   /* an upload still to land in it */
        CHECK(!((const char *)pending[k].dst >= regions[i].p && (const char *)pending[k].dst < regions[i].p + regions[i].n));
    regions[i] = regions[--n_regions];
    pthread_mutex_unlock(&lock);
    free(p);
}

static void sim_upload(void *dst, const void *src, size_t bytes)
{
    NEED(dst);
    if (bytes && owned(src)) {
        fprintf(stderr, "ctrbox: simulated GPU: upload from device memory %p\n", src);
        abort();
    }
    if (bytes) memmove(dst, src, bytes);
}

static void sim_download(void *dst, const void *src, size_t bytes)
{
    NEED(src);
    if (bytes && owned(dst)) {
        fprintf(stderr, "ctrbox: simulated GPU: download into device memory %p\n", dst);
        abort();
    }
    if (bytes) memmove(dst, src, bytes);
}

static void sim_zero(void *p, size_t bytes)
{
    NEED(p);
    if (bytes) memset(p, 0, bytes);
}

static void sim_copy(void *dst, const void *src, size_t bytes)
{
    NEED(dst), NEED(src);
    if (bytes) memmove(dst, src, bytes);
}

static void sim_sync(void) {}
static void *sim_host_alloc(size_t bytes) { return xmalloc(bytes ? bytes : 1); }


static void sim_upload_async(void *dst, const void *src, size_t bytes)
{
    NEED(dst);
    if (bytes && owned(src)) {
        fprintf(stderr, "ctrbox: simulated GPU: upload from device memory %p\n", src);
        abort();
    }
    pthread_mutex_lock(&lock);
    if (n_pending == cap_pending) pending = xrealloc(pending, (cap_pending = cap_pending * 2 + 8) * sizeof *pending);
    pending[n_pending++] = (pending_copy){ dst, src, bytes };
    pthread_mutex_unlock(&lock);
}

static void sim_upload_wait(void)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_pending; i++)
        if (pending[i].bytes) memmove(pending[i].dst, pending[i].src, pending[i].bytes);
    n_pending = 0;
    pthread_mutex_unlock(&lock);
}

static void linear_forward(float *out, const float *in, const float *w, const float *b, int B, int C, int OC)
{
    NEED(out), NEED(in), NEED(w), NEED_OPT(b);
    dense_linear_forward(out, in, w, b, B, C, OC);
}
static void linear_backward(float *din, float *dw, float *db, const float *dout, const float *in, const float *w, int B,
                            int C, int OC)
{
    NEED_OPT(din), NEED(dw), NEED_OPT(db), NEED(dout), NEED(in), NEED(w);
    dense_linear_backward(din, dw, db, dout, in, w, B, C, OC);
}
static void relu_forward(float *out, const float *in, size_t n) { NEED(out), NEED(in); dense_relu_forward(out, in, n); }
static void relu_backward(float *din, const float *dout, const float *out, size_t n)
{
    NEED(din), NEED(dout), NEED(out);
    dense_relu_backward(din, dout, out, n);
}
static void sigmoid_forward(float *out, const float *in, size_t n) { NEED(out), NEED(in); dense_sigmoid_forward(out, in, n); }
static void sigmoid_backward(float *din, const float *dout, const float *out, size_t n)
{
    NEED(din), NEED(dout), NEED(out);
    dense_sigmoid_backward(din, dout, out, n);
}
static void dropout_forward(float *out, uint8_t *mask, const float *in, size_t n, float p, uint64_t seed, uint64_t step,
                            int train)
{
    NEED(out), NEED_OPT(mask), NEED(in);
    dense_dropout_forward(out, mask, in, n, p, seed, step, train);
}
static void dropout_backward(float *din, const float *dout, const uint8_t *mask, size_t n, float p)
{
    NEED(din), NEED(dout), NEED(mask);
    dense_dropout_backward(din, dout, mask, n, p);
}
static void batchnorm_forward(float *out, float *mean, float *rstd, float *run_mean, float *run_var, const float *in,
                              const float *gamma, const float *beta, int B, int C, float momentum, float eps, int train)
{
    NEED(out), NEED(in), NEED(gamma), NEED(beta);
    if (train) NEED(mean), NEED(rstd);
    NEED_OPT(run_mean), NEED_OPT(run_var);
    dense_batchnorm_forward(out, mean, rstd, run_mean, run_var, in, gamma, beta, B, C, momentum, eps, train);
}
static void batchnorm_backward(float *din, float *dgamma, float *dbeta, const float *dout, const float *in,
                               const float *mean, const float *rstd, const float *gamma, int B, int C)
{
    NEED(din), NEED(dgamma), NEED(dbeta), NEED(dout), NEED(in), NEED(mean), NEED(rstd), NEED(gamma);
    dense_batchnorm_backward(din, dgamma, dbeta, dout, in, mean, rstd, gamma, B, C);
}
static void pool_forward(float *out, const float *emb, const size_t *uoff, const uint32_t *uidx, const uint16_t *field,
                         const float *val, const uint64_t *row_ptr, const int32_t *slot, const int *off, const int *dim,
                         int mean, int B, int F, int W)
{
    NEED(out), NEED(emb), NEED(uoff), NEED(uidx), NEED(field), NEED(val), NEED(row_ptr), NEED(slot), NEED(off), NEED(dim);
    dense_pool_forward(out, emb, uoff, uidx, field, val, row_ptr, slot, off, dim, mean, B, F, W);
}
static void pool_backward(float *demb, const float *dout, const size_t *uoff, const uint32_t *uidx,
                          const uint16_t *field, const float *val, const uint64_t *row_ptr, const int32_t *slot,
                          const int *off, const int *dim, int mean, int B, int F, int W)
{
    NEED(demb), NEED(dout), NEED(uoff), NEED(uidx), NEED(field), NEED(val), NEED(row_ptr), NEED(slot), NEED(off), NEED(dim);
    dense_pool_backward(demb, dout, uoff, uidx, field, val, row_ptr, slot, off, dim, mean, B, F, W);
}
#define PAIRWISE(NAME)                                                                             \
    static void NAME##_forward(float *out, const float *e, int B, int F, int D)                    \
    {                                                                                              \
        NEED(out), NEED(e);                                                                        \
        dense_##NAME##_forward(out, e, B, F, D);                                                   \
    }                                                                                              \
    static void NAME##_backward(float *de, const float *dout, const float *e, int B, int F, int D) \
    {                                                                                              \
        NEED(de), NEED(dout), NEED(e);                                                             \
        dense_##NAME##_backward(de, dout, e, B, F, D);                                             \
    }
PAIRWISE(fm)
PAIRWISE(ffm)
PAIRWISE(dot)
static void cross_forward(float *out, float *t, const float *x0, const float *xl, const float *w, const float *b, int B,
                          int C)
{
    NEED(out), NEED(t), NEED(x0), NEED(xl), NEED(w), NEED_OPT(b);
    dense_cross_forward(out, t, x0, xl, w, b, B, C);
}
static void cross_backward(float *dx0, float *dxl, float *dw, float *db, float *tmp, const float *dout, const float *x0,
                           const float *xl, const float *t, const float *w, int B, int C)
{
    NEED(dx0), NEED(dxl), NEED(dw), NEED_OPT(db), NEED(tmp), NEED(dout), NEED(x0), NEED(xl), NEED(t), NEED(w);
    dense_cross_backward(dx0, dxl, dw, db, tmp, dout, x0, xl, t, w, B, C);
}
static void concat_forward(float *out, const float *const *in, const int *C, int n, int B)
{
    NEED(out);
    for (int i = 0; i < n; i++) need(in[i], __func__, "in[i]");
    dense_concat_forward(out, in, C, n, B);
}
static void concat_backward(float *const *din, const float *dout, const int *C, int n, int B, int acc)
{
    NEED(dout);
    for (int i = 0; i < n; i++)
        if (din[i]) need(din[i], __func__, "din[i]");
    dense_concat_backward(din, dout, C, n, B, acc);
}
static double bce_forward_backward(float *dlogit, const float *logit, const float *label, int B)
{
    NEED_OPT(dlogit), NEED(logit), NEED(label);
    return dense_bce_forward_backward(dlogit, logit, label, B);
}
static void add(float *y, const float *x, size_t n) { NEED(y), NEED(x); dense_add(y, x, n); }
static void wide_forward(float *out, const float *w, const uint32_t *uidx, const uint16_t *field, const float *val,
                         const uint64_t *row_ptr, const int32_t *slot, const float *x, const float *wd, int B, int ND)
{
    NEED(out), NEED(w), NEED(uidx), NEED(field), NEED(val), NEED(row_ptr), NEED(slot);
    if (ND) NEED(x), NEED(wd);
    dense_wide_forward(out, w, uidx, field, val, row_ptr, slot, x, wd, B, ND);
}
static void wide_backward(float *dw, float *dwd, const float *dout, const uint32_t *uidx, const uint16_t *field,
                          const float *val, const uint64_t *row_ptr, const int32_t *slot, const float *x, int B, int ND)
{
    NEED(dw), NEED(dout), NEED(uidx), NEED(field), NEED(val), NEED(row_ptr), NEED(slot);
    if (ND) NEED(dwd), NEED(x);
    dense_wide_backward(dw, dwd, dout, uidx, field, val, row_ptr, slot, x, B, ND);
}
static void sum_forward(float *out, const float *const *in, int n, const float *bias, int B)
{
    NEED(out), NEED(bias);
    for (int i = 0; i < n; i++) need(in[i], __func__, "in[i]");
    dense_sum_forward(out, in, n, bias, B);
}
static void sum_backward(float *dbias, const float *dout, int B) { NEED(dbias), NEED(dout); dense_sum_backward(dbias, dout, B); }
static void rowdot_forward(float *out, const float *in, const float *w, const float *b, int B, int C)
{
    NEED(out), NEED(in), NEED(w), NEED(b);
    dense_rowdot_forward(out, in, w, b, B, C);
}
static void rowdot_backward(float *din, float *dw, float *db, const float *dout, const float *in, const float *w, int B,
                            int C)
{
    NEED_OPT(din), NEED(dw), NEED(db), NEED(dout), NEED(in), NEED(w);
    dense_rowdot_backward(din, dw, db, dout, in, w, B, C);
}
static void rows_gather(float *w, float *e, const float *slab, const size_t *rec, const size_t *uoff, int has_w,
                        size_t U)
{
    if (!U) return;
    NEED(slab), NEED(rec), NEED(uoff);
    if (has_w) NEED(w);
    if (uoff[0] != uoff[U]) NEED(e);   /* (uoff is device memory here: the simulation reads it in place) */
    dense_rows_gather(w, e, slab, rec, uoff, has_w, U);
}
static void rows_update(float *slab, const size_t *rec, const size_t *uoff, const float *dw, const float *de, int has_w,
                        const sparse_opt *o, uint64_t step, size_t U)
{
    if (!U) return;
    NEED(slab), NEED(rec), NEED(uoff);
    if (has_w) NEED(dw);
    if (uoff[0] != uoff[U]) NEED(de);
    dense_rows_update(slab, rec, uoff, dw, de, has_w, o, step, U);
}
static void opt_step(const dense_opt *o, float *p, const float *g, float *m, size_t n, uint64_t step)
{
    NEED(p), NEED(g);
    if (dense_opt_moments(o->kind)) NEED(m);
    dense_opt_step(o, p, g, m, n, step);
}

const dense_backend dense_backend_sim = {
    .name = "sim",
    .linear_forward = linear_forward,
    .linear_backward = linear_backward,
    .relu_forward = relu_forward,
    .relu_backward = relu_backward,
    .sigmoid_forward = sigmoid_forward,
    .sigmoid_backward = sigmoid_backward,
    .dropout_forward = dropout_forward,
    .dropout_backward = dropout_backward,
    .batchnorm_forward = batchnorm_forward,
    .batchnorm_backward = batchnorm_backward,
    .pool_forward = pool_forward,
    .pool_backward = pool_backward,
    .fm_forward = fm_forward,
    .fm_backward = fm_backward,
    .ffm_forward = ffm_forward,
    .ffm_backward = ffm_backward,
    .cross_forward = cross_forward,
    .cross_backward = cross_backward,
    .dot_forward = dot_forward,
    .dot_backward = dot_backward,
    .concat_forward = concat_forward,
    .concat_backward = concat_backward,
    .bce_forward_backward = bce_forward_backward,
    .add = add,
    .wide_forward = wide_forward,
    .wide_backward = wide_backward,
    .sum_forward = sum_forward,
    .sum_backward = sum_backward,
    .rowdot_forward = rowdot_forward,
    .rowdot_backward = rowdot_backward,
    .rows_gather = rows_gather,
    .rows_update = rows_update,
    .opt_step = opt_step,
    .alloc = sim_alloc,
    .release = sim_release,
    .upload = sim_upload,
    .download = sim_download,
    .zero = sim_zero,
    .copy = sim_copy,
    .upload_async = sim_upload_async,
    .upload_wait = sim_upload_wait,
    .host_alloc = sim_host_alloc,
    .host_release = free,
    .sync = sim_sync,
};

size_t dense_backend_sim_buffers(void)
{
    pthread_mutex_lock(&lock);
    size_t n = n_regions;
    pthread_mutex_unlock(&lock);
    return n;
}
