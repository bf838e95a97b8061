/*
 * backend.c: the CPU backend's table (layers.c, optim.c) and backend lookup by name.
 */
#include "backend.h"

#include <stdlib.h>
#include <string.h>

#include "../src/util.h"
#include "layers.h"

static void *cpu_alloc(size_t bytes) { return xcalloc(bytes ? bytes : 1, 1); }
static void cpu_release(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { if (bytes) memmove(dst, src, bytes); }
static void cpu_zero(void *p, size_t bytes) { if (bytes) memset(p, 0, bytes); }
static void cpu_sync(void) {}

const dense_backend dense_backend_cpu = {
    .name = "cpu",
    .linear_forward = dense_linear_forward,
    .linear_backward = dense_linear_backward,
    .relu_forward = dense_relu_forward,
    .relu_backward = dense_relu_backward,
    .sigmoid_forward = dense_sigmoid_forward,
    .sigmoid_backward = dense_sigmoid_backward,
    .dropout_forward = dense_dropout_forward,
    .dropout_backward = dense_dropout_backward,
    .batchnorm_forward = dense_batchnorm_forward,
    .batchnorm_backward = dense_batchnorm_backward,
    .pool_forward = dense_pool_forward,
    .pool_backward = dense_pool_backward,
    .fm_forward = dense_fm_forward,
    .fm_backward = dense_fm_backward,
    .ffm_forward = dense_ffm_forward,
    .ffm_backward = dense_ffm_backward,
    .cross_forward = dense_cross_forward,
    .cross_backward = dense_cross_backward,
    .dot_forward = dense_dot_forward,
    .dot_backward = dense_dot_backward,
    .concat_forward = dense_concat_forward,
    .concat_backward = dense_concat_backward,
    .bce_forward_backward = dense_bce_forward_backward,
    .opt_step = dense_opt_step,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
};

const dense_backend *dense_backend_find(const char *name)
{
    return !strcmp(name, "cpu") ? &dense_backend_cpu : NULL;
}
