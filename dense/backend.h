/*
 * backend.h: the dense backend interface. A backend is a table of the layer kernels of
 * layers.h (same names without the dense_ prefix, same arguments) and the dense optimizer step;
 * models call layers only through it. The CPU backend (cblas, loops) is dense_backend_cpu; it
 * works on host memory. The CUDA backend (dense/cuda/backend_cuda.cu, a shared object loaded at
 * run time by dense/device.c) provides the same table over device memory; its stream is carried
 * by its context instead of a last argument, so the two tables have one type.
 *
 * Every pointer a kernel takes lives in its backend's memory: buffers come from alloc and data
 * crosses with upload / download. Pointer arrays and sizes (concat's and sum's parts, the sparse
 * optimizer's settings) are passed by value, on the host, as described per kernel.
 */
#ifndef CTRBOX_DENSE_BACKEND_H
#define CTRBOX_DENSE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "optim.h"
#include "../embedding/sparse_optim.h"

typedef struct dense_backend {
    const char *name;
    void (*linear_forward)(float *out, const float *in, const float *w, const float *b, int B, int C, int OC);
    void (*linear_backward)(float *din, float *dw, float *db, const float *dout, const float *in, const float *w, int B,
                            int C, int OC);
    void (*relu_forward)(float *out, const float *in, size_t n);
    void (*relu_backward)(float *din, const float *dout, const float *out, size_t n);
    void (*sigmoid_forward)(float *out, const float *in, size_t n);
    void (*sigmoid_backward)(float *din, const float *dout, const float *out, size_t n);
    void (*dropout_forward)(float *out, uint8_t *mask, const float *in, size_t n, float p, uint64_t seed, uint64_t step,
                            int train);
    void (*dropout_backward)(float *din, const float *dout, const uint8_t *mask, size_t n, float p);
    void (*batchnorm_forward)(float *out, float *mean, float *rstd, float *run_mean, float *run_var, const float *in,
                              const float *gamma, const float *beta, int B, int C, float momentum, float eps,
                              int train);
    void (*batchnorm_backward)(float *din, float *dgamma, float *dbeta, const float *dout, const float *in,
                               const float *mean, const float *rstd, const float *gamma, int B, int C);
    void (*pool_forward)(float *out, const float *emb, const size_t *uoff, const uint32_t *uidx, const uint16_t *field,
                         const float *val, const uint64_t *row_ptr, const int32_t *slot, const int *off, const int *dim,
                         int mean, int B, int F, int W);
    void (*pool_backward)(float *demb, const float *dout, const size_t *uoff, const uint32_t *uidx,
                          const uint16_t *field, const float *val, const uint64_t *row_ptr, const int32_t *slot,
                          const int *off, const int *dim, int mean, int B, int F, int W);
    void (*fm_forward)(float *out, const float *e, int B, int F, int D);
    void (*fm_backward)(float *de, const float *dout, const float *e, int B, int F, int D);
    void (*ffm_forward)(float *out, const float *e, int B, int F, int D);
    void (*ffm_backward)(float *de, const float *dout, const float *e, int B, int F, int D);
    void (*cross_forward)(float *out, float *t, const float *x0, const float *xl, const float *w, const float *b, int B,
                          int C);
    void (*cross_backward)(float *dx0, float *dxl, float *dw, float *db, float *tmp, const float *dout, const float *x0,
                           const float *xl, const float *t, const float *w, int B, int C);
    void (*dot_forward)(float *out, const float *e, int B, int F, int D);
    void (*dot_backward)(float *de, const float *dout, const float *e, int B, int F, int D);
    void (*concat_forward)(float *out, const float *const *in, const int *C, int n, int B);
    void (*concat_backward)(float *const *din, const float *dout, const int *C, int n, int B, int acc);
    double (*bce_forward_backward)(float *dlogit, const float *logit, const float *label, int B);
    void (*add)(float *y, const float *x, size_t n);
    void (*wide_forward)(float *out, const float *w, const uint32_t *uidx, const uint16_t *field, const float *val,
                         const uint64_t *row_ptr, const int32_t *slot, const float *x, const float *wd, int B, int ND);
    void (*wide_backward)(float *dw, float *dwd, const float *dout, const uint32_t *uidx, const uint16_t *field,
                          const float *val, const uint64_t *row_ptr, const int32_t *slot, const float *x, int B, int ND);
    void (*sum_forward)(float *out, const float *const *in, int n, const float *bias, int B);
    void (*sum_backward)(float *dbias, const float *dout, int B);
    void (*rowdot_forward)(float *out, const float *in, const float *w, const float *b, int B, int C);
    void (*rowdot_backward)(float *din, float *dw, float *db, const float *dout, const float *in, const float *w, int B,
                            int C);
    void (*rows_gather)(float *w, float *e, const float *slab, const size_t *rec, const size_t *uoff, int has_w,
                        size_t U);
    void (*rows_update)(float *slab, const size_t *rec, const size_t *uoff, const float *dw, const float *de, int has_w,
                        const sparse_opt *o, uint64_t step, size_t U);
    void (*opt_step)(const dense_opt *o, float *p, const float *g, float *m, size_t n, uint64_t step);
    /* memory of the backend: alloc returns zeroed bytes and dies when out of memory */
    void *(*alloc)(size_t bytes);
    void (*release)(void *p);
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    void (*zero)(void *p, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);   /* within the backend's memory */
    /* An upload that does not wait: on a device, a copy engine's queue beside the kernels'; host_src
     * (from host_alloc: pinned) must stay until upload_wait, after which the kernels queued see it. */
    void (*upload_async)(void *dst, const void *host_src, size_t bytes);
    void (*upload_wait)(void);
    void *(*host_alloc)(size_t bytes);   /* host memory the device copies from at full speed */
    void (*host_release)(void *p);
    void (*sync)(void);   /* wait for the kernels queued so far */
} dense_backend;

extern const dense_backend dense_backend_cpu;

/* The backend called name ("cpu"), or NULL. */
const dense_backend *dense_backend_find(const char *name);

/* Make OpenMP's pool of `threads` threads (0: all cores), once that many are known to start
 * (their stacks fit, and ulimit -u leaves them room; else die with one line), and set OpenBLAS to
 * one thread: the products run single-threaded on each of OpenMP's threads (layers.c). Under an
 * address-space limit (ulimit -v), make sure OpenBLAS's buffers fit: it maps 128 MB for each
 * thread of its own pool (all cores, or OPENBLAS_NUM_THREADS, whatever `threads` is) as it first
 * runs, and for each thread calling it at once; where that fails it retries forever. Without room
 * for them, die with one line; else take them now (one small multiplication on every thread of
 * OpenBLAS's pool, then one on each of OpenMP's threads at once, until their clocks show them all
 * running together; where they never do, the products run on one thread, with a warning), before
 * data and tables use the room up. A worker that first runs during that warm-up and cannot map its
 * buffer then would hang it: after 10 s a watchdog ends the process with one line, exit 1. */
void dense_cpu_preflight(int threads);
/* Whether n calls, each from t0[i] to t1[i] (seconds), were all running at once: each was still
 * running when the last began, by more than half the shortest call (the preflight's check that
 * its products on OpenMP's threads each took a buffer while the others held theirs). */
int dense_calls_overlapped(const double *t0, const double *t1, int n);

#endif
