/*
 * bench_train.c: the MLP of DeepFM (the trainer's own layer code: linear + bias + ReLU, forward
 * and backward) against cblas_sgemm on the same matrix shapes (OpenBLAS's own threads, as many as
 * OpenMP's), in one process. Prints JSON:
 * achieved GFLOP/s of each and their ratio. Usage: bench-train mlp [B IN H1,H2,...]
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dense/layers.h"
#include "../io/util.h"

int main(int argc, char **argv)
{
    blas_select_core(argv);
    int B = argc > 2 ? atoi(argv[2]) : 4096, in0 = argc > 3 ? atoi(argv[3]) : 26 * 16 + 13;
    int sizes[16], n = 0;
    const char *spec = argc > 4 ? argv[4] : "400,400,400,1";
    for (const char *p = spec; *p;) {
        sizes[n++] = atoi(p);
        p = strchr(p, ',');
        if (!p) break;
        p++;
    }
    float *act[17], *grad[17], *w[16], *b[16], *dw[16], *db[16];
    int dims[17];
    dims[0] = in0;
    for (int i = 0; i < n; i++) dims[i + 1] = sizes[i];
    double flops = 0;
    for (int i = 0; i <= n; i++) {
        act[i] = xcalloc((size_t)B * dims[i], sizeof(float));
        grad[i] = xcalloc((size_t)B * dims[i], sizeof(float));
        for (size_t j = 0; j < (size_t)B * dims[i]; j++) act[i][j] = (float)(j % 7) * 0.1f;
    }
    for (int i = 0; i < n; i++) {
        w[i] = xcalloc((size_t)dims[i] * dims[i + 1], sizeof(float));
        dw[i] = xcalloc((size_t)dims[i] * dims[i + 1], sizeof(float));
        b[i] = xcalloc((size_t)dims[i + 1], sizeof(float));
        db[i] = xcalloc((size_t)dims[i + 1], sizeof(float));
        for (size_t j = 0; j < (size_t)dims[i] * dims[i + 1]; j++) w[i][j] = (float)(j % 13) * 0.01f - 0.06f;
        flops += 6.0 * B * dims[i] * dims[i + 1];   /* forward, d input, d weight */
    }
    int reps = 20;
    /* the trainer's layers */
    double best_mlp = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_sec();
        for (int i = 0; i < n; i++) {
            dense_linear_forward(act[i + 1], act[i], w[i], b[i], B, dims[i], dims[i + 1]);
            if (i + 1 < n) dense_relu_forward(act[i + 1], act[i + 1], (size_t)B * dims[i + 1]);
        }
        for (int i = n - 1; i >= 0; i--) {
            if (i + 1 < n) dense_relu_backward(grad[i + 1], grad[i + 1], act[i + 1], (size_t)B * dims[i + 1]);
            dense_linear_backward(grad[i], dw[i], db[i], grad[i + 1], act[i], w[i], B, dims[i], dims[i + 1]);
        }
        double dt = now_sec() - t0;
        if (dt < best_mlp) best_mlp = dt;
    }
    /* the same gemms, nothing else, on OpenBLAS's own threads (the layers above set it to one
     * thread and run their blocks on OpenMP's: dense/layers.c) */
    openblas_set_num_threads(omp_get_max_threads());
    double best_gemm = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_sec();
        for (int i = 0; i < n; i++)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, dims[i + 1], dims[i], 1, act[i], dims[i], w[i], dims[i], 0,
                        act[i + 1], dims[i + 1]);
        for (int i = n - 1; i >= 0; i--) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, dims[i], dims[i + 1], 1, grad[i + 1], dims[i + 1], w[i],
                        dims[i], 0, grad[i], dims[i]);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, dims[i + 1], dims[i], B, 1, grad[i + 1], dims[i + 1], act[i],
                        dims[i], 1, dw[i], dims[i]);
        }
        double dt = now_sec() - t0;
        if (dt < best_gemm) best_gemm = dt;
    }
    printf("{\"batch\": %d, \"shape\": \"%d,%s\", \"mlp_gflops\": %.1f, \"sgemm_gflops\": %.1f, \"ratio\": %.3f, "
           "\"blas_core\": \"%s\"}\n",
           B, in0, spec, flops / best_mlp / 1e9, flops / best_gemm / 1e9, best_gemm / best_mlp, openblas_get_corename());
    return 0;
}
