/*
 * backend_cuda.cu: the CUDA twin of the CPU backend (dense/layers.c, dense/optim.c), built into
 * bin/libctrbox_cuda.so and opened at run time by dense/device.c, so ctrbox itself never links
 * CUDA and runs where there is no GPU or no driver.
 *
 * Each kernel keeps its CPU twin's name (without the dense_ prefix), arguments and semantics
 * (layers.h is the contract: backward ADDS into weight gradients and OVERWRITES input gradients).
 * All buffers are device memory from cuda_alloc. Work is queued on one stream owned by this
 * file (the stream the style guide puts last in a kernel's arguments lives here, in the context,
 * so the CUDA table has the CPU table's type). Functions that return a host value
 * (bce_forward_backward) synchronise. Matrix products go through cuBLAS in row-major terms:
 * a row-major (R, C) matrix is a column-major (C, R) one.
 *
 * Errors: a failing CUDA or cuBLAS call prints what failed, where and why, and exits
 * (cuda_check / cublas_check); these are resource errors the trainer cannot recover from.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "../backend.h"
}

#define cuda_check(call) cuda_check_at((call), #call, __FILE__, __LINE__)
#define cublas_check(call) cublas_check_at((call), #call, __FILE__, __LINE__)

static void cuda_check_at(cudaError_t e, const char *what, const char *file, int line)
{
    if (e == cudaSuccess) return;
    fprintf(stderr, "ctrbox: CUDA error at %s:%d: %s: %s\n", file, line, what, cudaGetErrorString(e));
    exit(1);
}

static void cublas_check_at(cublasStatus_t s, const char *what, const char *file, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS) return;
    fprintf(stderr, "ctrbox: cuBLAS error at %s:%d: %s: status %d\n", file, line, what, (int)s);
    exit(1);
}

static cudaStream_t stream, copy_stream;   /* the kernels' queue; uploads that overlap them */
static cublasHandle_t blas;
static double *loss_acc;   /* device scratch for bce's sum */

#define THREADS 256
static unsigned blocks_for(size_t n) { return (unsigned)((n + THREADS - 1) / THREADS); }
#define LAUNCH(n) blocks_for(n) ? blocks_for(n) : 1, THREADS, 0, stream

/* ---- linear ---- */
__global__ void bias_rows_kernel(float *out, const float *b, int B, int OC)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < (size_t)B * OC) out[i] = b[i % OC];
}

static void linear_forward(float *out, const float *in, const float *w, const float *b, int B, int C, int OC)
{
    if (b) bias_rows_kernel<<<LAUNCH((size_t)B * OC)>>>(out, b, B, OC);
    const float one = 1.0f, beta = b ? 1.0f : 0.0f;
    /* out^T (OC, B) = w (OC, C) . in^T (C, B), column-major */
    cublas_check(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, B, C, &one, w, C, in, C, &beta, out, OC));
}

/* Column reductions of a row-major (B, C) matrix: blocks of 32 columns x 8 row lanes; each lane
 * walks every 8th row (reads of 32 neighbouring columns coalesce), then the lanes add up in
 * shared memory. COLS_GRID / COLS_BLOCK launch it. */
#define COL_LANES 8
#define COLS_GRID(C) dim3(((C) + 31) / 32), dim3(32, COL_LANES), 0, stream

__device__ static float lanes_sum(float v, float (*sh)[33])
{
    sh[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    float s = 0;
    if (threadIdx.y == 0)
        for (int k = 0; k < COL_LANES; k++) s += sh[k][threadIdx.x];
    __syncthreads();
    return s;
}

/* db (OC) += column sums of dout (B, OC) */
__global__ void colsum_add_kernel(float *db, const float *dout, int B, int OC)
{
    __shared__ float sh[COL_LANES][33];
    int o = blockIdx.x * 32 + threadIdx.x;
    float v = 0;
    if (o < OC)
        for (int i = threadIdx.y; i < B; i += COL_LANES) v += dout[(size_t)i * OC + o];
    float s = lanes_sum(v, sh);
    if (threadIdx.y == 0 && o < OC) db[o] += s;
}

static void linear_backward(float *din, float *dw, float *db, const float *dout, const float *in, const float *w,
                            int B, int C, int OC)
{
    const float one = 1.0f, zero = 0.0f;
    /* din^T (C, B) = w^T (C, OC) . dout^T (OC, B) */
    if (din) cublas_check(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, C, B, OC, &one, w, C, dout, OC, &zero, din, C));
    /* dw^T (C, OC) += in^T (C, B) . dout (B, OC) */
    cublas_check(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, B, &one, in, C, dout, OC, &one, dw, C));
    if (db) colsum_add_kernel<<<COLS_GRID(OC)>>>(db, dout, B, OC);
}

/* ---- element-wise ---- */
__global__ void relu_forward_kernel(float *out, const float *in, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] > 0 ? in[i] : 0;
}
__global__ void relu_backward_kernel(float *din, const float *dout, const float *out, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) din[i] = out[i] > 0 ? dout[i] : 0;
}
static void relu_forward(float *out, const float *in, size_t n) { relu_forward_kernel<<<LAUNCH(n)>>>(out, in, n); }
static void relu_backward(float *din, const float *dout, const float *out, size_t n)
{
    relu_backward_kernel<<<LAUNCH(n)>>>(din, dout, out, n);
}

__global__ void sigmoid_forward_kernel(float *out, const float *in, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = 1.0f / (1.0f + expf(-in[i]));
}
__global__ void sigmoid_backward_kernel(float *din, const float *dout, const float *out, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) din[i] = dout[i] * out[i] * (1.0f - out[i]);
}
static void sigmoid_forward(float *out, const float *in, size_t n) { sigmoid_forward_kernel<<<LAUNCH(n)>>>(out, in, n); }
static void sigmoid_backward(float *din, const float *dout, const float *out, size_t n)
{
    sigmoid_backward_kernel<<<LAUNCH(n)>>>(din, dout, out, n);
}

/* The CPU twin's mask: SplitMix64's finaliser over (seed, step, index), so both devices drop the same units. */
__device__ __host__ static inline uint64_t dropout_hash(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
__global__ void dropout_forward_kernel(float *out, uint8_t *mask, const float *in, size_t n, float scale,
                                       uint64_t threshold, uint64_t base)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    uint8_t keep = dropout_hash(base + i * 0x9e3779b97f4a7c15ull) >= threshold;
    mask[i] = keep;
    out[i] = keep ? in[i] * scale : 0.0f;
}
static void dropout_forward(float *out, uint8_t *mask, const float *in, size_t n, float p, uint64_t seed,
                            uint64_t step, int train)
{
    if (!train || p <= 0) {
        if (out != in) cuda_check(cudaMemcpyAsync(out, in, n * sizeof *out, cudaMemcpyDeviceToDevice, stream));
        if (mask) cuda_check(cudaMemsetAsync(mask, 1, n, stream));
        return;
    }
    uint64_t threshold = (uint64_t)((double)p * 18446744073709551616.0);
    uint64_t base = dropout_hash(seed ^ (step * 0x9e3779b97f4a7c15ull));
    dropout_forward_kernel<<<LAUNCH(n)>>>(out, mask, in, n, 1.0f / (1.0f - p), threshold, base);
}
__global__ void dropout_backward_kernel(float *din, const float *dout, const uint8_t *mask, size_t n, float scale)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) din[i] = mask[i] ? dout[i] * scale : 0.0f;
}
static void dropout_backward(float *din, const float *dout, const uint8_t *mask, size_t n, float p)
{
    dropout_backward_kernel<<<LAUNCH(n)>>>(din, dout, mask, n, p > 0 ? 1.0f / (1.0f - p) : 1.0f);
}

/* ---- batch norm: column statistics with the reduction above ---- */
__global__ void bn_stats_kernel(float *mean, float *rstd, float *run_mean, float *run_var, const float *in, int B,
                                int C, float momentum, float eps)
{
    __shared__ float sh[COL_LANES][33];
    __shared__ float mu_sh[32];
    int c = blockIdx.x * 32 + threadIdx.x;
    float v = 0;
    if (c < C)
        for (int i = threadIdx.y; i < B; i += COL_LANES) v += in[(size_t)i * C + c];
    float s = lanes_sum(v, sh);
    if (threadIdx.y == 0) mu_sh[threadIdx.x] = s / (float)B;
    __syncthreads();
    float mu = mu_sh[threadIdx.x];
    v = 0;
    if (c < C)
        for (int i = threadIdx.y; i < B; i += COL_LANES) {
            float d = in[(size_t)i * C + c] - mu;
            v += d * d;
        }
    float q = lanes_sum(v, sh);
    if (threadIdx.y != 0 || c >= C) return;
    float var = q / (float)B;
    if (run_mean) {
        run_mean[c] = (1 - momentum) * run_mean[c] + momentum * mu;
        run_var[c] = (1 - momentum) * run_var[c] + momentum * (B > 1 ? q / (float)(B - 1) : var);
    }
    mean[c] = mu;
    rstd[c] = 1.0f / sqrtf(var + eps);
}
__global__ void bn_apply_kernel(float *out, const float *in, const float *mean, const float *rstd, const float *rv,
                                const float *gamma, const float *beta, int B, int C, float eps)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)B * C) return;
    int c = (int)(i % C);
    float r = rstd ? rstd[c] : 1.0f / sqrtf(rv[c] + eps);
    out[i] = gamma[c] * (in[i] - mean[c]) * r + beta[c];
}
static void batchnorm_forward(float *out, float *mean, float *rstd, float *run_mean, float *run_var, const float *in,
                              const float *gamma, const float *beta, int B, int C, float momentum, float eps, int train)
{
    size_t n = (size_t)B * C;
    if (!train) {
        bn_apply_kernel<<<LAUNCH(n)>>>(out, in, run_mean, NULL, run_var, gamma, beta, B, C, eps);
        return;
    }
    bn_stats_kernel<<<COLS_GRID(C)>>>(mean, rstd, run_mean, run_var, in, B, C, momentum, eps);
    bn_apply_kernel<<<LAUNCH(n)>>>(out, in, mean, rstd, NULL, gamma, beta, B, C, eps);
}
__global__ void bn_backward_sums_kernel(float *sdy, float *sdyx, float *dgamma, float *dbeta, const float *dout,
                                        const float *in, const float *mean, const float *rstd, int B, int C)
{
    __shared__ float sh[COL_LANES][33];
    int c = blockIdx.x * 32 + threadIdx.x;
    float a = 0, b = 0;
    if (c < C)
        for (int i = threadIdx.y; i < B; i += COL_LANES) {
            size_t k = (size_t)i * C + c;
            a += dout[k];
            b += dout[k] * (in[k] - mean[c]) * rstd[c];
        }
    a = lanes_sum(a, sh);
    b = lanes_sum(b, sh);
    if (threadIdx.y != 0 || c >= C) return;
    sdy[c] = a, sdyx[c] = b;
    dgamma[c] += b;
    dbeta[c] += a;
}
__global__ void bn_backward_kernel(float *din, const float *dout, const float *in, const float *mean,
                                   const float *rstd, const float *gamma, const float *sdy, const float *sdyx, int B,
                                   int C)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= (size_t)B * C) return;
    int c = (int)(i % C);
    float xhat = (in[i] - mean[c]) * rstd[c];
    din[i] = gamma[c] * rstd[c] / (float)B * ((float)B * dout[i] - sdy[c] - xhat * sdyx[c]);
}
/* Device scratch of at least n floats, kept and grown (work on the one stream is ordered, so
 * one buffer serves every kernel that needs it). */
static float *scratch(size_t n)
{
    static float *buf;
    static size_t cap;
    if (n > cap) {
        if (buf) {
            cuda_check(cudaStreamSynchronize(stream));
            cuda_check(cudaFree(buf));
        }
        cuda_check(cudaMalloc((void **)&buf, n * sizeof(float)));
        cap = n;
    }
    return buf;
}

static void batchnorm_backward(float *din, float *dgamma, float *dbeta, const float *dout, const float *in,
                               const float *mean, const float *rstd, const float *gamma, int B, int C)
{
    float *s = scratch(2 * (size_t)C);
    bn_backward_sums_kernel<<<COLS_GRID(C)>>>(s, s + C, dgamma, dbeta, dout, in, mean, rstd, B, C);
    bn_backward_kernel<<<LAUNCH((size_t)B * C)>>>(din, dout, in, mean, rstd, gamma, s, s + C, B, C);
}

/* ---- embedding pooling: one thread per (sample, output float) ---- */
__global__ void pool_forward_kernel(float *out, const float *emb, const size_t *uoff, const uint32_t *uidx,
                                    const uint16_t *field, const float *val, const uint64_t *row_ptr,
                                    const int32_t *slot, const int *off, const int *dim, int mean, int B, int F,
                                    int W, const int *col_slot)
{
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (t >= (size_t)B * W) return;
    int b = (int)(t / W), w = (int)(t % W), s = col_slot[w];
    if (s < 0) {
        out[t] = 0;
        return;
    }
    int d = w - off[s], cnt = 0;
    float acc = 0;
    for (uint64_t k = row_ptr[b]; k < row_ptr[b + 1]; k++) {
        if (slot[field[k]] != s) continue;
        acc += val[k] * emb[uoff[uidx[k]] + d];
        cnt++;
    }
    out[t] = mean && cnt > 1 ? acc / (float)cnt : acc;
}
__global__ void pool_backward_kernel(float *demb, const float *dout, const size_t *uoff, const uint32_t *uidx,
                                     const uint16_t *field, const float *val, const uint64_t *row_ptr,
                                     const int32_t *slot, const int *off, const int *dim, int mean, int B, int F,
                                     int W, const int *col_slot)
{
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (t >= (size_t)B * W) return;
    int b = (int)(t / W), w = (int)(t % W), s = col_slot[w];
    if (s < 0) return;
    int d = w - off[s], cnt = 0;
    if (mean)
        for (uint64_t k = row_ptr[b]; k < row_ptr[b + 1]; k++) cnt += slot[field[k]] == s;
    float g = dout[t];
    for (uint64_t k = row_ptr[b]; k < row_ptr[b + 1]; k++) {
        if (slot[field[k]] != s) continue;
        float v = val[k];
        if (mean && cnt > 1) v /= (float)cnt;
        atomicAdd(&demb[uoff[uidx[k]] + d], v * g);   /* unique rows are shared across the batch */
    }
}
/* The column -> slot map of a pooled row (W ints: the slot a float belongs to, -1 none), built
 * when (off, dim, F, W) change and kept on the device. off and dim are keyed by address: a model
 * never rewrites its slot tables in place, and releasing either forgets the map (cuda_release),
 * since a later allocation may reuse the address for other tables (the planner's measurements
 * come and go before the model's). */
static int *cs_dev, cs_cap_w, cs_key_f = -1, cs_key_w = -1;
static const int *cs_key_off, *cs_key_dim;

static int *col_slot_for(const int *off, const int *dim, int F, int W)
{
    int *&dev = cs_dev, &cap_w = cs_cap_w, &key_f = cs_key_f, &key_w = cs_key_w;
    const int *&key_off = cs_key_off, *&key_dim = cs_key_dim;
    if (dev && key_off == off && key_dim == dim && key_f == F && key_w == W) return dev;
    int *host_off = (int *)malloc(sizeof(int) * (size_t)F), *host_dim = (int *)malloc(sizeof(int) * (size_t)F);
    int *m = (int *)malloc(sizeof(int) * (size_t)W);
    cuda_check(cudaMemcpyAsync(host_off, off, sizeof(int) * (size_t)F, cudaMemcpyDeviceToHost, stream));
    cuda_check(cudaMemcpyAsync(host_dim, dim, sizeof(int) * (size_t)F, cudaMemcpyDeviceToHost, stream));
    cuda_check(cudaStreamSynchronize(stream));
    for (int w = 0; w < W; w++) m[w] = -1;
    for (int s = 0; s < F; s++)
        for (int d = 0; d < host_dim[s]; d++)
            if (host_off[s] + d < W) m[host_off[s] + d] = s;
    if (cap_w < W) {
        if (dev) cuda_check(cudaFree(dev));
        cuda_check(cudaMalloc((void **)&dev, sizeof(int) * (size_t)W));
        cap_w = W;
    }
    cuda_check(cudaMemcpy(dev, m, sizeof(int) * (size_t)W, cudaMemcpyHostToDevice));
    free(m);
    free(host_off);
    free(host_dim);
    key_off = off, key_dim = dim, key_f = F, key_w = W;
    return dev;
}
/* off and dim are device arrays of F ints, as every pointer a kernel takes */
static void pool_forward(float *out, const float *emb, const size_t *uoff, const uint32_t *uidx, const uint16_t *field,
                         const float *val, const uint64_t *row_ptr, const int32_t *slot, const int *off, const int *dim,
                         int mean, int B, int F, int W)
{
    int *cs = col_slot_for(off, dim, F, W);
    pool_forward_kernel<<<LAUNCH((size_t)B * W)>>>(out, emb, uoff, uidx, field, val, row_ptr, slot, off, dim, mean, B,
                                                   F, W, cs);
}
static void pool_backward(float *demb, const float *dout, const size_t *uoff, const uint32_t *uidx,
                          const uint16_t *field, const float *val, const uint64_t *row_ptr, const int32_t *slot,
                          const int *off, const int *dim, int mean, int B, int F, int W)
{
    int *cs = col_slot_for(off, dim, F, W);
    pool_backward_kernel<<<LAUNCH((size_t)B * W)>>>(demb, dout, uoff, uidx, field, val, row_ptr, slot, off, dim, mean,
                                                    B, F, W, cs);
}

/* ---- interactions: one thread per sample (F and D are small) ---- */
__global__ void fm_forward_kernel(float *out, const float *e, int B, int F, int D)
{
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    const float *x = e + (size_t)b * F * D;
    float acc = 0;
    for (int d = 0; d < D; d++) {
        float s = 0, q = 0;
        for (int f = 0; f < F; f++) {
            float v = x[(size_t)f * D + d];
            s += v;
            q += v * v;
        }
        acc += s * s - q;
    }
    out[b] = 0.5f * acc;
}
__global__ void fm_backward_kernel(float *de, const float *dout, const float *e, int B, int F, int D)
{
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;   /* one thread per (b, d) */
    if (t >= (size_t)B * D) return;
    int b = (int)(t / D), d = (int)(t % D);
    const float *x = e + (size_t)b * F * D;
    float s = 0;
    for (int f = 0; f < F; f++) s += x[(size_t)f * D + d];
    for (int f = 0; f < F; f++) de[(size_t)b * F * D + (size_t)f * D + d] = dout[b] * (s - x[(size_t)f * D + d]);
}
static void fm_forward(float *out, const float *e, int B, int F, int D) { fm_forward_kernel<<<LAUNCH((size_t)B)>>>(out, e, B, F, D); }
static void fm_backward(float *de, const float *dout, const float *e, int B, int F, int D)
{
    fm_backward_kernel<<<LAUNCH((size_t)B * D)>>>(de, dout, e, B, F, D);
}

__global__ void ffm_forward_kernel(float *out, const float *e, int B, int F, int D)
{
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    const float *x = e + (size_t)b * F * F * D;
    float acc = 0;
    for (int f = 0; f < F; f++)
        for (int g = f + 1; g < F; g++) {
            const float *u = x + ((size_t)f * F + g) * D, *v = x + ((size_t)g * F + f) * D;
            for (int d = 0; d < D; d++) acc += u[d] * v[d];
        }
    out[b] = acc;
}
__global__ void ffm_backward_kernel(float *de, const float *dout, const float *e, int B, int F, int D)
{
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;   /* one thread per (b, f, g) */
    if (t >= (size_t)B * F * F) return;
    int b = (int)(t / ((size_t)F * F)), f = (int)(t / F % F), g = (int)(t % F);
    float *u = de + (size_t)b * F * F * D + ((size_t)f * F + g) * D;
    const float *v = e + (size_t)b * F * F * D + ((size_t)g * F + f) * D;
    for (int d = 0; d < D; d++) u[d] = f == g ? 0.0f : dout[b] * v[d];
}
static void ffm_forward(float *out, const float *e, int B, int F, int D) { ffm_forward_kernel<<<LAUNCH((size_t)B)>>>(out, e, B, F, D); }
static void ffm_backward(float *de, const float *dout, const float *e, int B, int F, int D)
{
    ffm_backward_kernel<<<LAUNCH((size_t)B * F * F)>>>(de, dout, e, B, F, D);
}

__global__ void cross_out_kernel(float *out, const float *x0, const float *t, const float *xl, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = x0[i] * t[i] + xl[i];
}
static void cross_forward(float *out, float *t, const float *x0, const float *xl, const float *w, const float *b, int B,
                          int C)
{
    linear_forward(t, xl, w, b, B, C, C);
    cross_out_kernel<<<LAUNCH((size_t)B * C)>>>(out, x0, t, xl, (size_t)B * C);
}
__global__ void cross_back_pre_kernel(float *tmp, float *dx0, const float *dout, const float *x0, const float *t, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    tmp[i] = dout[i] * x0[i];
    dx0[i] += dout[i] * t[i];
}
__global__ void add_kernel(float *y, const float *x, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
static void cross_backward(float *dx0, float *dxl, float *dw, float *db, float *tmp, const float *dout, const float *x0,
                           const float *xl, const float *t, const float *w, int B, int C)
{
    size_t n = (size_t)B * C;
    cross_back_pre_kernel<<<LAUNCH(n)>>>(tmp, dx0, dout, x0, t, n);
    linear_backward(dxl, dw, db, tmp, xl, w, B, C, C);
    add_kernel<<<LAUNCH(n)>>>(dxl, dout, n);
}

__global__ void dot_forward_kernel(float *out, const float *e, int B, int F, int D)
{
    int P = F * (F - 1) / 2;
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;   /* one thread per (b, pair) */
    if (t >= (size_t)B * P) return;
    int b = (int)(t / P), k = (int)(t % P), i = 1;
    while (k >= i) k -= i, i++;   /* pair k of row order: (i, j) with j < i */
    const float *x = e + (size_t)b * F * D;
    float s = 0;
    for (int d = 0; d < D; d++) s += x[(size_t)i * D + d] * x[(size_t)k * D + d];
    out[t] = s;
}
__global__ void dot_backward_kernel(float *de, const float *dout, const float *e, int B, int F, int D)
{
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;   /* one thread per (b, field i, d) */
    if (t >= (size_t)B * F * D) return;
    int P = F * (F - 1) / 2;
    int b = (int)(t / ((size_t)F * D)), i = (int)(t / D % F), d = (int)(t % D);
    const float *x = e + (size_t)b * F * D, *g = dout + (size_t)b * P;
    float s = 0;
    for (int j = 0; j < F; j++) {
        if (j == i) continue;
        int hi = i > j ? i : j, lo = i > j ? j : i;
        s += g[hi * (hi - 1) / 2 + lo] * x[(size_t)j * D + d];
    }
    de[t] = s;
}
static void dot_forward(float *out, const float *e, int B, int F, int D)
{
    dot_forward_kernel<<<LAUNCH((size_t)B * (F * (F - 1) / 2))>>>(out, e, B, F, D);
}
static void dot_backward(float *de, const float *dout, const float *e, int B, int F, int D)
{
    dot_backward_kernel<<<LAUNCH((size_t)B * F * D)>>>(de, dout, e, B, F, D);
}

/* ---- concat: the host array of part pointers is passed by value, up to 8 parts ---- */
#define CONCAT_MAX 8
struct parts {
    float *p[CONCAT_MAX];
    int c[CONCAT_MAX];
};
__global__ void concat_forward_kernel(float *out, parts in, int n, int total, int B)
{
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (t >= (size_t)B * total) return;
    int b = (int)(t / total), c = (int)(t % total), i = 0;
    while (c >= in.c[i]) c -= in.c[i++];
    out[t] = in.p[i][(size_t)b * in.c[i] + c];
}
__global__ void concat_backward_kernel(parts din, const float *dout, int n, int total, int B, int acc)
{
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (t >= (size_t)B * total) return;
    int b = (int)(t / total), c = (int)(t % total), i = 0;
    while (c >= din.c[i]) c -= din.c[i++];
    if (!din.p[i]) return;
    float *d = &din.p[i][(size_t)b * din.c[i] + c];
    *d = acc ? *d + dout[t] : dout[t];
}
static parts parts_of(const float *const *p, const int *C, int n, int *total)
{
    if (n > CONCAT_MAX) {
        fprintf(stderr, "ctrbox: CUDA concat of %d parts (at most %d)\n", n, CONCAT_MAX);
        exit(1);
    }
    parts s;
    memset(&s, 0, sizeof s);
    *total = 0;
    for (int i = 0; i < n; i++) s.p[i] = (float *)p[i], s.c[i] = C[i], *total += C[i];
    return s;
}
static void concat_forward(float *out, const float *const *in, const int *C, int n, int B)
{
    int total;
    parts s = parts_of(in, C, n, &total);
    concat_forward_kernel<<<LAUNCH((size_t)B * total)>>>(out, s, n, total, B);
}
static void concat_backward(float *const *din, const float *dout, const int *C, int n, int B, int acc)
{
    int total;
    parts s = parts_of((const float *const *)din, C, n, &total);
    concat_backward_kernel<<<LAUNCH((size_t)B * total)>>>(s, dout, n, total, B, acc);
}

/* ---- loss ---- */
__global__ void bce_kernel(double *loss, float *dlogit, const float *logit, const float *label, int B)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B) return;
    float z = logit[i], y = label[i];
    atomicAdd(loss, (double)(z > 0 ? z : 0) - (double)z * y + log1p(exp(-fabs((double)z))));
    if (dlogit) dlogit[i] = (1.0f / (1.0f + expf(-z)) - y) / (float)B;
}
static double bce_forward_backward(float *dlogit, const float *logit, const float *label, int B)
{
    double sum = 0;
    cuda_check(cudaMemsetAsync(loss_acc, 0, sizeof *loss_acc, stream));
    bce_kernel<<<LAUNCH((size_t)B)>>>(loss_acc, dlogit, logit, label, B);
    cuda_check(cudaMemcpyAsync(&sum, loss_acc, sizeof sum, cudaMemcpyDeviceToHost, stream));
    cuda_check(cudaStreamSynchronize(stream));
    return sum / B;
}

/* ---- the logit, the wide part, DCN-V2's head ---- */

/* dsum[0] += the sum of x (n): one block, each thread a strided share, then a tree in shared memory */
__global__ void sum_add_kernel(float *dsum, const float *x, size_t n)
{
    __shared__ float sh[THREADS];
    float v = 0;
    for (size_t i = threadIdx.x; i < n; i += THREADS) v += x[i];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) dsum[0] += sh[0];
}

static void add(float *y, const float *x, size_t n) { add_kernel<<<LAUNCH(n)>>>(y, x, n); }

__global__ void wide_forward_kernel(float *out, const float *w, const uint32_t *uidx, const uint16_t *field,
                                    const float *val, const uint64_t *row_ptr, const int32_t *slot, const float *x,
                                    const float *wd, int B, int ND)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B) return;
    float s = 0;
    for (uint64_t k = row_ptr[i]; k < row_ptr[i + 1]; k++)
        if (slot[field[k]] >= 0) s += val[k] * w[uidx[k]];
    for (int j = 0; j < ND; j++) s += x[(size_t)i * ND + j] * wd[j];
    out[i] = s;
}
static void wide_forward(float *out, const float *w, const uint32_t *uidx, const uint16_t *field, const float *val,
                         const uint64_t *row_ptr, const int32_t *slot, const float *x, const float *wd, int B, int ND)
{
    wide_forward_kernel<<<LAUNCH((size_t)B)>>>(out, w, uidx, field, val, row_ptr, slot, x, wd, B, ND);
}
__global__ void wide_backward_rows_kernel(float *dw, const float *dout, const uint32_t *uidx, const uint16_t *field,
                                          const float *val, const uint64_t *row_ptr, const int32_t *slot, int B)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B) return;
    for (uint64_t k = row_ptr[i]; k < row_ptr[i + 1]; k++)
        if (slot[field[k]] >= 0) atomicAdd(&dw[uidx[k]], val[k] * dout[i]);   /* unique rows are shared */
}
/* dwd (ND) += x^T dout, a column reduction as colsum_add_kernel's */
__global__ void wide_backward_dense_kernel(float *dwd, const float *dout, const float *x, int B, int ND)
{
    __shared__ float sh[COL_LANES][33];
    int j = blockIdx.x * 32 + threadIdx.x;
    float v = 0;
    if (j < ND)
        for (int i = threadIdx.y; i < B; i += COL_LANES) v += x[(size_t)i * ND + j] * dout[i];
    float s = lanes_sum(v, sh);
    if (threadIdx.y == 0 && j < ND) dwd[j] += s;
}
static void wide_backward(float *dw, float *dwd, const float *dout, const uint32_t *uidx, const uint16_t *field,
                          const float *val, const uint64_t *row_ptr, const int32_t *slot, const float *x, int B, int ND)
{
    wide_backward_rows_kernel<<<LAUNCH((size_t)B)>>>(dw, dout, uidx, field, val, row_ptr, slot, B);
    if (ND) wide_backward_dense_kernel<<<COLS_GRID(ND)>>>(dwd, dout, x, B, ND);
}

#define SUM_MAX 8
struct sum_parts {
    const float *p[SUM_MAX];
};
__global__ void sum_forward_kernel(float *out, sum_parts in, int n, const float *bias, int B)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= B) return;
    float s = bias[0];
    for (int k = 0; k < n; k++) s += in.p[k][i];
    out[i] = s;
}
static void sum_forward(float *out, const float *const *in, int n, const float *bias, int B)
{
    if (n > SUM_MAX) {
        fprintf(stderr, "ctrbox: CUDA sum of %d parts (at most %d)\n", n, SUM_MAX);
        exit(1);
    }
    sum_parts s;
    memset(&s, 0, sizeof s);
    for (int k = 0; k < n; k++) s.p[k] = in[k];
    sum_forward_kernel<<<LAUNCH((size_t)B)>>>(out, s, n, bias, B);
}
static void sum_backward(float *dbias, const float *dout, int B) { sum_add_kernel<<<1, THREADS, 0, stream>>>(dbias, dout, (size_t)B); }

__global__ void fill_kernel(float *out, const float *v, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = v[0];
}
static void rowdot_forward(float *out, const float *in, const float *w, const float *b, int B, int C)
{
    fill_kernel<<<LAUNCH((size_t)B)>>>(out, b, (size_t)B);
    const float one = 1.0f;
    /* out (B) += in (B, C) w: in is a column-major (C, B) matrix, so in^T w */
    cublas_check(cublasSgemv(blas, CUBLAS_OP_T, C, B, &one, in, C, w, 1, &one, out, 1));
}
__global__ void outer_kernel(float *out, const float *a, const float *b, int R, int C)
{
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (t < (size_t)R * C) out[t] = a[t / C] * b[t % C];
}
static void rowdot_backward(float *din, float *dw, float *db, const float *dout, const float *in, const float *w, int B,
                            int C)
{
    const float one = 1.0f;
    if (din) outer_kernel<<<LAUNCH((size_t)B * C)>>>(din, dout, w, B, C);
    /* dw (C) += in^T dout: the column-major (C, B) matrix times dout */
    cublas_check(cublasSgemv(blas, CUBLAS_OP_N, C, B, &one, in, C, dout, 1, &one, dw, 1));
    sum_add_kernel<<<1, THREADS, 0, stream>>>(db, dout, (size_t)B);
}

/* ---- the pass tier's rows: one warp per unique row ---- */
__global__ void rows_gather_kernel(float *w, float *e, const float *slab, const size_t *rec, const size_t *uoff,
                                   int has_w, size_t U)
{
    size_t u = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (u >= U) return;
    const float *r = slab + rec[u];
    if (has_w && lane == 0) w[u] = r[0];
    size_t E = uoff[u + 1] - uoff[u];
    for (size_t d = lane; d < E; d += 32) e[uoff[u] + d] = r[has_w + d];
}
static void rows_gather(float *w, float *e, const float *slab, const size_t *rec, const size_t *uoff, int has_w,
                        size_t U)
{
    if (U) rows_gather_kernel<<<LAUNCH(U * 32)>>>(w, e, slab, rec, uoff, has_w, U);
}
/* sparse_optim.c's rules, one thread per row (a row has tens of values); Adam's bias corrections
 * come in as a and ae, computed on the host as optim_adam_terms does */
__global__ void rows_update_kernel(float *slab, const size_t *rec, const size_t *uoff, const float *dw, const float *de,
                                   int has_w, sparse_opt o, float a, float ae, size_t U)
{
    size_t u = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (u >= U) return;
    int E = (int)(uoff[u + 1] - uoff[u]), V = has_w + E;
    float *v = slab + rec[u], *s = v + V;
    const float *g1 = de + uoff[u] - has_w;   /* value i >= has_w has gradient g1[i] */
#define GRAD(i) ((has_w && (i) == 0) ? dw[u] : g1[i])
    float l2 = o.l2, lr = o.lr;
    switch (o.kind) {
    case SOPT_SGD:
        for (int i = 0; i < V; i++) v[i] -= lr * (GRAD(i) + l2 * v[i]);
        break;
    case SOPT_ADAGRAD:
        for (int i = 0; i < V; i++) {
            float gi = GRAD(i) + l2 * v[i];
            s[i] += gi * gi;
            v[i] -= lr * gi / (sqrtf(s[i]) + o.eps);
        }
        break;
    case SOPT_ROWWISE_ADAGRAD: {
        float sum = 0;
        for (int i = 0; i < V; i++) {
            float gi = GRAD(i) + l2 * v[i];
            sum += gi * gi;
        }
        s[0] += sum / (float)V;
        float scale = lr / (sqrtf(s[0]) + o.eps);
        for (int i = 0; i < V; i++) v[i] -= scale * (GRAD(i) + l2 * v[i]);
        break;
    }
    case SOPT_ADAM:
        for (int i = 0; i < V; i++) {
            float gi = GRAD(i) + l2 * v[i];
            s[i] = o.beta1 * s[i] + (1 - o.beta1) * gi;
            s[V + i] = o.beta2 * s[V + i] + (1 - o.beta2) * gi * gi;
            v[i] -= a * s[i] / (sqrtf(s[V + i]) + ae);
        }
        break;
    case SOPT_FTRL:
        for (int i = 0; i < V; i++) {
            float gi = GRAD(i), n_new = s[V + i] + gi * gi;
            float sigma = (sqrtf(n_new) - sqrtf(s[V + i])) / o.ftrl_alpha;
            s[i] += gi - sigma * v[i];
            s[V + i] = n_new;
            if (fabsf(s[i]) <= o.ftrl_l1) {
                v[i] = 0;
            } else {
                float sgn = s[i] < 0 ? -1.0f : 1.0f;
                v[i] = -(s[i] - sgn * o.ftrl_l1) / ((o.ftrl_beta + sqrtf(s[V + i])) / o.ftrl_alpha + o.ftrl_l2);
            }
        }
        break;
    }
#undef GRAD
}
static void rows_update(float *slab, const size_t *rec, const size_t *uoff, const float *dw, const float *de, int has_w,
                        const sparse_opt *o, uint64_t step, size_t U)
{
    if (!U) return;
    double c1 = 1.0 - pow(o->beta1, (double)step), c2 = 1.0 - pow(o->beta2, (double)step);
    float a = (float)(o->lr * sqrt(c2) / c1), ae = o->eps * (float)sqrt(c2);
    rows_update_kernel<<<LAUNCH(U)>>>(slab, rec, uoff, dw, de, has_w, *o, a, ae, U);
}

/* ---- dense optimizer (optim.c's rules; Adam's bias corrections come in as a and e) ---- */
__global__ void adam_kernel(float *p, float *m, float *v, const float *g, size_t n, float a, float e, float b1, float b2,
                            float l2)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i] + l2 * p[i];
    m[i] = b1 * m[i] + (1 - b1) * gi;
    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
    p[i] -= a * m[i] / (sqrtf(v[i]) + e);
}
__global__ void adagrad_kernel(float *p, float *acc, const float *g, size_t n, float lr, float eps, float l2)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i] + l2 * p[i];
    acc[i] += gi * gi;
    p[i] -= lr * gi / (sqrtf(acc[i]) + eps);
}
__global__ void sgd_kernel(float *p, const float *g, size_t n, float lr, float l2)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) p[i] -= lr * (g[i] + l2 * p[i]);
}
static void opt_step(const dense_opt *o, float *p, const float *g, float *m, size_t n, uint64_t step)
{
    switch (o->kind) {
    case DOPT_ADAM: {
        double c1 = 1.0 - pow(o->beta1, (double)step), c2 = 1.0 - pow(o->beta2, (double)step);
        float a = (float)(o->lr * sqrt(c2) / c1), e = o->eps * (float)sqrt(c2);
        adam_kernel<<<LAUNCH(n)>>>(p, m, m + n, g, n, a, e, o->beta1, o->beta2, o->l2);
        break;
    }
    case DOPT_ADAGRAD:
        adagrad_kernel<<<LAUNCH(n)>>>(p, m, g, n, o->lr, o->eps, o->l2);
        break;
    case DOPT_SGD:
        sgd_kernel<<<LAUNCH(n)>>>(p, g, n, o->lr, o->l2);
        break;
    }
}

/* ---- memory ---- */
static void *cuda_alloc(size_t bytes)
{
    void *p = NULL;
    cuda_check(cudaMalloc(&p, bytes ? bytes : 1));
    cuda_check(cudaMemsetAsync(p, 0, bytes ? bytes : 1, stream));
    return p;
}
static void cuda_release(void *p)
{
    if (!p) return;
    if (p == cs_key_off || p == cs_key_dim) cs_key_off = cs_key_dim = NULL;   /* its column map goes stale */
    cuda_check(cudaStreamSynchronize(stream));
    cuda_check(cudaFree(p));
}
static void cuda_upload(void *dst, const void *src, size_t bytes)
{
    if (bytes) cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream));
    cuda_check(cudaStreamSynchronize(stream));   /* the host buffer may be reused at once */
}
static void cuda_download(void *dst, const void *src, size_t bytes)
{
    if (bytes) cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
    cuda_check(cudaStreamSynchronize(stream));
}
static void cuda_zero(void *p, size_t bytes)
{
    if (bytes) cuda_check(cudaMemsetAsync(p, 0, bytes, stream));
}
static void cuda_copy(void *dst, const void *src, size_t bytes)
{
    if (bytes) cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}
static void cuda_sync(void) { cuda_check(cudaStreamSynchronize(stream)); }
static void cuda_upload_async(void *dst, const void *src, size_t bytes)
{
    /* after the kernels queued so far (the slots may have been read by them), beside those queued next */
    static cudaEvent_t queued;
    if (!queued) cuda_check(cudaEventCreateWithFlags(&queued, cudaEventDisableTiming));
    cuda_check(cudaEventRecord(queued, stream));
    cuda_check(cudaStreamWaitEvent(copy_stream, queued, 0));
    if (bytes) cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copy_stream));
}
static void cuda_upload_wait(void) { cuda_check(cudaStreamSynchronize(copy_stream)); }
static void *cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    cuda_check(cudaMallocHost(&p, bytes ? bytes : 1));
    return p;
}
static void cuda_host_release(void *p)
{
    if (p) cuda_check(cudaFreeHost(p));
}

static dense_backend table;

/*
 * The entry point dense/device.c looks up with dlsym. Fills desc with one line per device found
 * ("gpu0: NVIDIA H200, 139.8 GiB, compute 9.0"), selects device `which`, and returns its backend
 * table and total memory; returns the device count (0: none; then *out is NULL and desc says
 * why).
 */
extern "C" int ctrbox_cuda_open(int which, const dense_backend **out, size_t *mem_bytes, char *desc, size_t desclen)
{
    int n = 0;
    *out = NULL;
    desc[0] = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(desc, desclen, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "count is 0");
        return 0;
    }
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        used += (size_t)snprintf(desc + used, used < desclen ? desclen - used : 0, "%sgpu%d: %s, %.1f GiB, compute %d.%d",
                                 i ? "\n" : "", i, p.name, (double)p.totalGlobalMem / (1 << 30), p.major, p.minor);
        if (used >= desclen) used = desclen - 1;
        if (i == which) *mem_bytes = p.totalGlobalMem;
    }
    if (which < 0 || which >= n) return n;
    cuda_check(cudaSetDevice(which));
    if (!stream) {
        cuda_check(cudaStreamCreate(&stream));
        cuda_check(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
        cublas_check(cublasCreate(&blas));
        cublas_check(cublasSetStream(blas, stream));
        cuda_check(cudaMalloc((void **)&loss_acc, sizeof *loss_acc));
    }
    table.name = "cuda";
    table.linear_forward = linear_forward;
    table.linear_backward = linear_backward;
    table.relu_forward = relu_forward;
    table.relu_backward = relu_backward;
    table.sigmoid_forward = sigmoid_forward;
    table.sigmoid_backward = sigmoid_backward;
    table.dropout_forward = dropout_forward;
    table.dropout_backward = dropout_backward;
    table.batchnorm_forward = batchnorm_forward;
    table.batchnorm_backward = batchnorm_backward;
    table.pool_forward = pool_forward;
    table.pool_backward = pool_backward;
    table.fm_forward = fm_forward;
    table.fm_backward = fm_backward;
    table.ffm_forward = ffm_forward;
    table.ffm_backward = ffm_backward;
    table.cross_forward = cross_forward;
    table.cross_backward = cross_backward;
    table.dot_forward = dot_forward;
    table.dot_backward = dot_backward;
    table.concat_forward = concat_forward;
    table.concat_backward = concat_backward;
    table.bce_forward_backward = bce_forward_backward;
    table.add = add;
    table.wide_forward = wide_forward;
    table.wide_backward = wide_backward;
    table.sum_forward = sum_forward;
    table.sum_backward = sum_backward;
    table.rowdot_forward = rowdot_forward;
    table.rowdot_backward = rowdot_backward;
    table.rows_gather = rows_gather;
    table.rows_update = rows_update;
    table.opt_step = opt_step;
    table.alloc = cuda_alloc;
    table.release = cuda_release;
    table.upload = cuda_upload;
    table.download = cuda_download;
    table.zero = cuda_zero;
    table.copy = cuda_copy;
    table.upload_async = cuda_upload_async;
    table.upload_wait = cuda_upload_wait;
    table.host_alloc = cuda_host_alloc;
    table.host_release = cuda_host_release;
    table.sync = cuda_sync;
    *out = &table;
    return n;
}
