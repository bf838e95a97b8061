/*
 * layers.c: CPU kernels of the dense layers (cblas for the matrix products, loops for the rest).
 */
#include "layers.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../io/util.h"

/* The element-wise kernels are memory- and ALU-bound loops: compile them for the vector units the
 * CPU has (AVX-512, AVX2, or the SSE2 baseline), chosen once at load time. A build with
 * CTRBOX_NO_AVX512 (make SIMD=avx2) has no AVX-512 variant: how an AVX2-only CPU runs, measured on
 * an AVX-512 one (bench/bench_train.sh ISA=avx2).
 * No contraction into fused multiply-adds: the vector body and its scalar prologue and epilogue
 * would contract the same sum differently, so a result would depend on where a buffer lies (a
 * batch-norm gradient differed between two calls on the same rows as its scratch moved by 16
 * bytes). Without it, each element is the same IEEE operations in either path.
 * CTRBOX_NO_CLONES (make tsan) builds the baseline alone: ThreadSanitizer instruments the clones'
 * resolvers, which run before it has started, and the program would crash at load. */
#if defined CTRBOX_NO_CLONES
#define VECTORIZED __attribute__((optimize("O3", "fp-contract=off")))
#elif defined CTRBOX_NO_AVX512
#define VECTORIZED __attribute__((target_clones("avx2", "default"), optimize("O3", "fp-contract=off")))
#else
#define VECTORIZED __attribute__((target_clones("avx512f", "avx2", "default"), optimize("O3", "fp-contract=off")))
#endif

/* The matrix products run on OpenMP's threads, OpenBLAS single-threaded in each, in blocks taken
 * as threads come:
 * - OpenBLAS's own threads split a product in fixed halves that wait for each other inside it;
 *   one half preempted (by the tier's fetch or writer, or another process) stalled the other
 *   (sched_yield in the profiles of docs/performance.md). Blocks taken as threads come let the
 *   other thread go on with the rest.
 * - The blocks depend on the shapes alone, not on the number of threads, so neither does the
 *   model: OpenBLAS's own split rounded differently with each --threads.
 * Forward and d input: blocks of rows of the batch. d weight sums over the batch: each block of
 * the batch's rows gives a partial sum (the first into dw itself, the others into scratch), added
 * into dw in block order; a layer of OC >= WIDE outputs, or a batch under SMALL rows, is split by
 * rows of dw instead (partial sums of small blocks of the batch cost more memory traffic than
 * products: lanes of 341 rows ran 11% slower so). */
enum { WIDE = 512, SMALL = 1024 };
#define SCRATCH_FLOATS ((size_t)4 << 20)   /* 16 MB: the most d weight's partial sums take */

static int one_thread;   /* dense_products_one_thread */

void dense_products_one_thread(int on) { one_thread = on; }

static void blas_one_thread(void)
{
    if (!omp_in_parallel() && openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

/* rows a block of M: about an eighth, a multiple of 16, within [64, most] (fewer rows repack the
 * other matrix too often) */
static int block_rows(int M, int most)
{
    int r = ((M + 7) / 8 + 15) & ~15;
    return r > most ? most : r < 64 ? 64 : r;
}

/* c (M, N) = op(a) op(b) + beta c, a (M, K) or (K, M), in blocks of rows of c */
static void gemm_by_rows(float *c, const float *a, CBLAS_TRANSPOSE ta, const float *b, CBLAS_TRANSPOSE tb, float beta, int M,
                         int N, int K)
{
    blas_one_thread();
    int rows = block_rows(M, 256), blocks = (M + rows - 1) / rows;
    int lda = ta == CblasTrans ? M : K, ldb = tb == CblasTrans ? K : N;
    #pragma omp parallel for schedule(dynamic, 1) if (blocks > 1 && !one_thread)
    for (int i = 0; i < blocks; i++) {
        int r = i * rows, m = M - r < rows ? M - r : rows;
        const float *ar = ta == CblasTrans ? a + r : a + (size_t)r * K;
        cblas_sgemm(CblasRowMajor, ta, tb, m, N, K, 1.0f, ar, lda, b, ldb, beta, c + (size_t)r * N, N);
    }
}

void dense_linear_forward(float *out, const float *in, const float *w, const float *b, int B, int C, int OC)
{
    if (b) {
        for (int i = 0; i < B; i++) memcpy(out + (size_t)i * OC, b, (size_t)OC * sizeof *out);
    }
    gemm_by_rows(out, in, CblasNoTrans, w, CblasTrans, b ? 1.0f : 0.0f, B, OC, C);
}

/* dw (OC, C) += dout^T (B, OC) in (B, C), in blocks (the comment above) */
static void linear_dw(float *dw, const float *dout, const float *in, int B, int C, int OC)
{
    if (B <= 0 || C <= 0 || OC <= 0) return;
    if (OC >= WIDE || B < SMALL) {
        gemm_by_rows(dw, dout, CblasTrans, in, CblasNoTrans, 1.0f, OC, C, B);
        return;
    }
    static _Thread_local float *scratch;   /* (blocks - 1, OC, C); the thread's until it ends */
    static _Thread_local size_t scratch_n;
    blas_one_thread();
    size_t n = (size_t)OC * C;
    int rows = block_rows(B, 512), blocks = (B + rows - 1) / rows;
    if ((size_t)(blocks - 1) * n > SCRATCH_FLOATS) {   /* fewer, larger blocks */
        blocks = (int)(SCRATCH_FLOATS / n) + 1;
        rows = (B + blocks - 1) / blocks;
        blocks = (B + rows - 1) / rows;
    }
    if (blocks > 1 && (size_t)(blocks - 1) * n > scratch_n) {
        free(scratch);
        scratch_n = (size_t)(blocks - 1) * n;
        scratch = xmalloc(scratch_n * sizeof *scratch);
    }
    float *part = scratch;   /* the threads below see their own _Thread_local */
    #pragma omp parallel for schedule(dynamic, 1) if (blocks > 1 && !one_thread)
    for (int i = 0; i < blocks; i++) {
        int r = i * rows, k = B - r < rows ? B - r : rows;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, k, 1.0f, dout + (size_t)r * OC, OC, in + (size_t)r * C, C,
                    i ? 0.0f : 1.0f, i ? part + (i - 1) * n : dw, C);
    }
    if (blocks < 2) return;
    #pragma omp parallel for schedule(static) if (n >= 16384)
    for (size_t j = 0; j < n; j++) {
        float s = dw[j];
        for (int i = 1; i < blocks; i++) s += part[(i - 1) * n + j];
        dw[j] = s;
    }
}

void dense_linear_backward(float *din, float *dw, float *db, const float *dout, const float *in,
                           const float *w, int B, int C, int OC)
{
    if (din) gemm_by_rows(din, dout, CblasNoTrans, w, CblasNoTrans, 0.0f, B, C, OC);
    linear_dw(dw, dout, in, B, C, OC);
    if (db)
        for (int i = 0; i < B; i++) {
            const float *d = dout + (size_t)i * OC;
            for (int o = 0; o < OC; o++) db[o] += d[o];
        }
}

VECTORIZED void dense_relu_forward(float *out, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = in[i] > 0 ? in[i] : 0;
}

VECTORIZED void dense_relu_backward(float *din, const float *dout, const float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) din[i] = out[i] > 0 ? dout[i] : 0;
}

VECTORIZED void dense_sigmoid_forward(float *out, const float *in, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = 1.0f / (1.0f + expf(-in[i]));
}

VECTORIZED void dense_sigmoid_backward(float *din, const float *dout, const float *out, size_t n)
{
    for (size_t i = 0; i < n; i++) din[i] = dout[i] * out[i] * (1.0f - out[i]);
}

/* SplitMix64's finaliser: a dropout mask bit per element from (seed, step, index) */
static inline uint64_t dropout_hash(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

VECTORIZED void dense_dropout_forward(float *out, uint8_t *mask, const float *in, size_t n, float p, uint64_t seed,
                           uint64_t step, int train)
{
    if (!train || p <= 0) {
        if (out != in) memcpy(out, in, n * sizeof *out);
        if (mask) memset(mask, 1, n);
        return;
    }
    float scale = 1.0f / (1.0f - p);
    uint64_t threshold = (uint64_t)((double)p * 18446744073709551616.0);
    uint64_t base = dropout_hash(seed ^ (step * 0x9e3779b97f4a7c15ull));
    for (size_t i = 0; i < n; i++) {
        uint8_t keep = dropout_hash(base + i * 0x9e3779b97f4a7c15ull) >= threshold;
        mask[i] = keep;
        out[i] = keep ? in[i] * scale : 0.0f;
    }
}

VECTORIZED void dense_dropout_backward(float *din, const float *dout, const uint8_t *mask, size_t n, float p)
{
    float scale = p > 0 ? 1.0f / (1.0f - p) : 1.0f;
    for (size_t i = 0; i < n; i++) din[i] = mask[i] ? dout[i] * scale : 0.0f;
}

VECTORIZED void dense_batchnorm_forward(float *out, float *mean, float *rstd, float *run_mean, float *run_var,
                             const float *in, const float *gamma, const float *beta, int B, int C,
                             float momentum, float eps, int train)
{
    if (!train) {
        for (int i = 0; i < B; i++) {
            const float *x = in + (size_t)i * C;
            float *y = out + (size_t)i * C;
            for (int c = 0; c < C; c++) y[c] = gamma[c] * (x[c] - run_mean[c]) / sqrtf(run_var[c] + eps) + beta[c];
        }
        return;
    }
    for (int c = 0; c < C; c++) mean[c] = 0, rstd[c] = 0;
    for (int i = 0; i < B; i++) {
        const float *x = in + (size_t)i * C;
        for (int c = 0; c < C; c++) mean[c] += x[c];
    }
    for (int c = 0; c < C; c++) mean[c] /= (float)B;
    for (int i = 0; i < B; i++) {   /* rstd holds the sum of squared deviations for now */
        const float *x = in + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            float d = x[c] - mean[c];
            rstd[c] += d * d;
        }
    }
    for (int c = 0; c < C; c++) {
        float var = rstd[c] / (float)B;
        if (run_mean) {
            run_mean[c] = (1 - momentum) * run_mean[c] + momentum * mean[c];
            run_var[c] = (1 - momentum) * run_var[c] + momentum * (B > 1 ? rstd[c] / (float)(B - 1) : var);
        }
        rstd[c] = 1.0f / sqrtf(var + eps);
    }
    for (int i = 0; i < B; i++) {
        const float *x = in + (size_t)i * C;
        float *y = out + (size_t)i * C;
        for (int c = 0; c < C; c++) y[c] = gamma[c] * (x[c] - mean[c]) * rstd[c] + beta[c];
    }
}

VECTORIZED void dense_batchnorm_backward(float *din, float *dgamma, float *dbeta, const float *dout, const float *in,
                              const float *mean, const float *rstd, const float *gamma, int B, int C)
{
    /* sums per column: sum dy and sum dy * xhat (dgamma/dbeta get them too) */
    float *sdy = xcalloc((size_t)C, sizeof *sdy), *sdyx = xcalloc((size_t)C, sizeof *sdyx);
    for (int i = 0; i < B; i++) {
        const float *x = in + (size_t)i * C, *dy = dout + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            sdy[c] += dy[c];
            sdyx[c] += dy[c] * (x[c] - mean[c]) * rstd[c];
        }
    }
    for (int c = 0; c < C; c++) {
        dgamma[c] += sdyx[c];
        dbeta[c] += sdy[c];
    }
    for (int i = 0; i < B; i++) {
        const float *x = in + (size_t)i * C, *dy = dout + (size_t)i * C;
        float *dx = din + (size_t)i * C;
        for (int c = 0; c < C; c++) {
            float xhat = (x[c] - mean[c]) * rstd[c];
            dx[c] = gamma[c] * rstd[c] / (float)B * ((float)B * dy[c] - sdy[c] - xhat * sdyx[c]);
        }
    }
    free(sdy);
    free(sdyx);
}

VECTORIZED void dense_pool_forward(float *out, const float *emb, const size_t *uoff, const uint32_t *uidx,
                                   const uint16_t *field, const float *val, const uint64_t *row_ptr, const int32_t *slot,
                                   const int *off, const int *dim, int mean, int B, int F, int W)
{
    memset(out, 0, (size_t)B * W * sizeof *out);
    int *cnt = mean ? xcalloc((size_t)F, sizeof *cnt) : NULL;
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * W;
        for (uint64_t k = row_ptr[b]; k < row_ptr[b + 1]; k++) {
            int s = slot[field[k]];
            if (s < 0) continue;
            const float *e = emb + uoff[uidx[k]];
            float v = val[k], *os = o + off[s];
            for (int d = 0; d < dim[s]; d++) os[d] += v * e[d];
            if (mean) cnt[s]++;
        }
        if (mean)
            for (int s = 0; s < F; s++) {
                if (cnt[s] > 1)
                    for (int d = 0; d < dim[s]; d++) o[off[s] + d] /= (float)cnt[s];
                cnt[s] = 0;
            }
    }
    free(cnt);
}

VECTORIZED void dense_pool_backward(float *demb, const float *dout, const size_t *uoff, const uint32_t *uidx,
                                    const uint16_t *field, const float *val, const uint64_t *row_ptr, const int32_t *slot,
                                    const int *off, const int *dim, int mean, int B, int F, int W)
{
    int *cnt = mean ? xcalloc((size_t)F, sizeof *cnt) : NULL;
    for (int b = 0; b < B; b++) {
        const float *g = dout + (size_t)b * W;
        if (mean) {
            for (int s = 0; s < F; s++) cnt[s] = 0;
            for (uint64_t k = row_ptr[b]; k < row_ptr[b + 1]; k++)
                if (slot[field[k]] >= 0) cnt[slot[field[k]]]++;
        }
        for (uint64_t k = row_ptr[b]; k < row_ptr[b + 1]; k++) {
            int s = slot[field[k]];
            if (s < 0) continue;
            float v = val[k];
            if (mean && cnt[s] > 1) v /= (float)cnt[s];
            float *de = demb + uoff[uidx[k]];
            const float *gs = g + off[s];
            for (int d = 0; d < dim[s]; d++) de[d] += v * gs[d];
        }
    }
    free(cnt);
}

VECTORIZED void dense_fm_forward(float *out, const float *e, int B, int F, int D)
{
    for (int b = 0; b < B; b++) {
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
}

VECTORIZED void dense_fm_backward(float *de, const float *dout, const float *e, int B, int F, int D)
{
    float *s = xmalloc((size_t)D * sizeof *s);
    for (int b = 0; b < B; b++) {
        const float *x = e + (size_t)b * F * D;
        float *g = de + (size_t)b * F * D;
        for (int d = 0; d < D; d++) s[d] = 0;
        for (int f = 0; f < F; f++)
            for (int d = 0; d < D; d++) s[d] += x[(size_t)f * D + d];
        for (int f = 0; f < F; f++)
            for (int d = 0; d < D; d++) g[(size_t)f * D + d] = dout[b] * (s[d] - x[(size_t)f * D + d]);
    }
    free(s);
}

void dense_ffm_forward(float *out, const float *e, int B, int F, int D)
{
    for (int b = 0; b < B; b++) {
        const float *x = e + (size_t)b * F * F * D;
        float acc = 0;
        for (int f = 0; f < F; f++)
            for (int g = f + 1; g < F; g++) {
                const float *u = x + ((size_t)f * F + g) * D, *v = x + ((size_t)g * F + f) * D;
                for (int d = 0; d < D; d++) acc += u[d] * v[d];
            }
        out[b] = acc;
    }
}

void dense_ffm_backward(float *de, const float *dout, const float *e, int B, int F, int D)
{
    for (int b = 0; b < B; b++) {
        const float *x = e + (size_t)b * F * F * D;
        float *gx = de + (size_t)b * F * F * D;
        for (int f = 0; f < F; f++) {
            memset(gx + ((size_t)f * F + f) * D, 0, (size_t)D * sizeof *gx);
            for (int g = 0; g < F; g++) {
                if (g == f) continue;
                const float *v = x + ((size_t)g * F + f) * D;
                float *u = gx + ((size_t)f * F + g) * D;
                for (int d = 0; d < D; d++) u[d] = dout[b] * v[d];
            }
        }
    }
}

void dense_cross_forward(float *out, float *t, const float *x0, const float *xl, const float *w, const float *b,
                         int B, int C)
{
    dense_linear_forward(t, xl, w, b, B, C, C);
    size_t n = (size_t)B * C;
    for (size_t i = 0; i < n; i++) out[i] = x0[i] * t[i] + xl[i];
}

void dense_cross_backward(float *dx0, float *dxl, float *dw, float *db, float *tmp, const float *dout,
                          const float *x0, const float *xl, const float *t, const float *w, int B, int C)
{
    size_t n = (size_t)B * C;
    for (size_t i = 0; i < n; i++) {
        tmp[i] = dout[i] * x0[i];   /* d t */
        dx0[i] += dout[i] * t[i];
    }
    dense_linear_backward(dxl, dw, db, tmp, xl, w, B, C, C);
    for (size_t i = 0; i < n; i++) dxl[i] += dout[i];
}

void dense_dot_forward(float *out, const float *e, int B, int F, int D)
{
    int P = F * (F - 1) / 2;
    for (int b = 0; b < B; b++) {
        const float *x = e + (size_t)b * F * D;
        float *o = out + (size_t)b * P;
        int k = 0;
        for (int i = 1; i < F; i++)
            for (int j = 0; j < i; j++) {
                float s = 0;
                for (int d = 0; d < D; d++) s += x[(size_t)i * D + d] * x[(size_t)j * D + d];
                o[k++] = s;
            }
    }
}

void dense_dot_backward(float *de, const float *dout, const float *e, int B, int F, int D)
{
    int P = F * (F - 1) / 2;
    memset(de, 0, (size_t)B * F * D * sizeof *de);
    for (int b = 0; b < B; b++) {
        const float *x = e + (size_t)b * F * D, *g = dout + (size_t)b * P;
        float *gx = de + (size_t)b * F * D;
        int k = 0;
        for (int i = 1; i < F; i++)
            for (int j = 0; j < i; j++, k++) {
                float d0 = g[k];
                for (int d = 0; d < D; d++) {
                    gx[(size_t)i * D + d] += d0 * x[(size_t)j * D + d];
                    gx[(size_t)j * D + d] += d0 * x[(size_t)i * D + d];
                }
            }
    }
}

void dense_concat_forward(float *out, const float *const *in, const int *C, int n, int B)
{
    int total = 0;
    for (int i = 0; i < n; i++) total += C[i];
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * total;
        for (int i = 0; i < n; i++) {
            memcpy(o, in[i] + (size_t)b * C[i], (size_t)C[i] * sizeof *o);
            o += C[i];
        }
    }
}

void dense_concat_backward(float *const *din, const float *dout, const int *C, int n, int B, int acc)
{
    int total = 0;
    for (int i = 0; i < n; i++) total += C[i];
    for (int b = 0; b < B; b++) {
        const float *g = dout + (size_t)b * total;
        for (int i = 0; i < n; i++) {
            if (din[i]) {
                float *d = din[i] + (size_t)b * C[i];
                if (acc)
                    for (int c = 0; c < C[i]; c++) d[c] += g[c];
                else
                    memcpy(d, g, (size_t)C[i] * sizeof *d);
            }
            g += C[i];
        }
    }
}

double dense_bce_forward_backward(float *dlogit, const float *logit, const float *label, int B)
{
    double loss = 0;
    for (int i = 0; i < B; i++) {
        float z = logit[i], y = label[i];
        loss += (z > 0 ? z : 0) - z * y + log1p(exp(-fabs(z)));
        if (dlogit) dlogit[i] = (1.0f / (1.0f + expf(-z)) - y) / (float)B;
    }
    return loss / B;
}

VECTORIZED void dense_add(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void dense_wide_forward(float *out, const float *w, const uint32_t *uidx, const uint16_t *field, const float *val,
                        const uint64_t *row_ptr, const int32_t *slot, const float *x, const float *wd, int B, int ND)
{
    #pragma omp parallel for schedule(static) if (B >= 1024)
    for (int i = 0; i < B; i++) {
        float s = 0;
        for (uint64_t k = row_ptr[i]; k < row_ptr[i + 1]; k++)
            if (slot[field[k]] >= 0) s += val[k] * w[uidx[k]];
        for (int j = 0; j < ND; j++) s += x[(size_t)i * ND + j] * wd[j];
        out[i] = s;
    }
}

void dense_wide_backward(float *dw, float *dwd, const float *dout, const uint32_t *uidx, const uint16_t *field,
                         const float *val, const uint64_t *row_ptr, const int32_t *slot, const float *x, int B, int ND)
{
    for (int i = 0; i < B; i++) {
        for (uint64_t k = row_ptr[i]; k < row_ptr[i + 1]; k++)
            if (slot[field[k]] >= 0) dw[uidx[k]] += val[k] * dout[i];
        for (int j = 0; j < ND; j++) dwd[j] += x[(size_t)i * ND + j] * dout[i];
    }
}

void dense_sum_forward(float *out, const float *const *in, int n, const float *bias, int B)
{
    for (int i = 0; i < B; i++) out[i] = bias[0];
    for (int k = 0; k < n; k++)
        for (int i = 0; i < B; i++) out[i] += in[k][i];
}

void dense_sum_backward(float *dbias, const float *dout, int B)
{
    for (int i = 0; i < B; i++) dbias[0] += dout[i];
}

void dense_rowdot_forward(float *out, const float *in, const float *w, const float *b, int B, int C)
{
    for (int i = 0; i < B; i++) {
        const float *x = in + (size_t)i * C;
        float acc = b[0];
        for (int j = 0; j < C; j++) acc += x[j] * w[j];
        out[i] = acc;
    }
}

void dense_rowdot_backward(float *din, float *dw, float *db, const float *dout, const float *in, const float *w, int B,
                           int C)
{
    for (int i = 0; i < B; i++) {
        float g = dout[i];
        db[0] += g;
        const float *x = in + (size_t)i * C;
        float *d = din ? din + (size_t)i * C : NULL;
        for (int j = 0; j < C; j++) {
            dw[j] += g * x[j];
            if (d) d[j] = g * w[j];
        }
    }
}

void dense_rows_gather(float *w, float *e, const float *slab, const size_t *rec, const size_t *uoff, int has_w,
                       size_t U)
{
    #pragma omp parallel for schedule(static) if (U >= 4096)
    for (size_t u = 0; u < U; u++) {
        const float *r = slab + rec[u];
        if (has_w) w[u] = r[0];
        if (uoff[u + 1] > uoff[u]) memcpy(e + uoff[u], r + has_w, (uoff[u + 1] - uoff[u]) * sizeof *e);
    }
}

void dense_rows_update(float *slab, const size_t *rec, const size_t *uoff, const float *dw, const float *de, int has_w,
                       const sparse_opt *o, uint64_t step, size_t U)
{
    /* each unique row once: rows update in parallel with one thread's result */
    #pragma omp parallel if (U >= 4096)
    {
        size_t cap = 0;
        float *g = NULL;
        #pragma omp for schedule(static)
        for (size_t u = 0; u < U; u++) {
            size_t E = uoff[u + 1] - uoff[u], V = (size_t)has_w + E;
            if (V > cap) g = xrealloc(g, (cap = V) * sizeof *g);
            if (has_w) g[0] = dw[u];
            if (E) memcpy(g + has_w, de + uoff[u], E * sizeof *g);
            float *v = slab + rec[u];
            sparse_opt_update(o, v, v + V, g, (int)V, step);
        }
        free(g);
    }
}
