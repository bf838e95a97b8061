/*
 * device.c: finding the devices (device.h). The CUDA backend is opened with dlopen, once, under
 * a mutex; everything it returns is static for the life of the process.
 */
#define _GNU_SOURCE
#include "device.h"

#include "backend_sim.h"
#include "../io/util.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *names[PLACE_COUNT] = { "cpu", "gpu" };

const char *place_device_name(place_device d) { return (unsigned)d < PLACE_COUNT ? names[d] : "?"; }

int place_device_from_name(const char *name)
{
    for (int i = 0; i < PLACE_COUNT; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

typedef int (*cuda_open_fn)(int which, const dense_backend **out, size_t *mem_bytes, char *desc, size_t desclen);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const dense_backend *gpu;
static size_t gpu_mem;
static char gpu_desc[1024], describe[1400];

int device_cuda_lib_path(char *path, size_t n)
{
    const char *env = getenv("CTRBOX_CUDA_LIB");
    if (env && *env) {
        snprintf(path, n, "%s", env);
        return 0;
    }
    if (n < 64) return -1;
    ssize_t got = readlink("/proc/self/exe", path, n - 32);
    if (got < 0) got = 0;
    path[got] = 0;
    char *slash = strrchr(path, '/');
    snprintf(slash ? slash + 1 : path, 32, "libctrbox_cuda.so");
    return 0;
}

static void gpu_load(void)
{
    const char *sim = getenv("CTRBOX_GPU_SIM");
    if (sim && !strcmp(sim, "1")) {
        gpu = &dense_backend_sim;
        gpu_mem = (size_t)8 << 30;
        snprintf(gpu_desc, sizeof gpu_desc, "gpu0: simulated on the CPU (CTRBOX_GPU_SIM=1, for tests), 8.0 GiB");
        return;
    }
    char path[PATH_MAX];
    const char *env = getenv("CTRBOX_CUDA_LIB");
    device_cuda_lib_path(path, sizeof path);
    if (access(path, R_OK) != 0) {
        if (env && *env) snprintf(gpu_desc, sizeof gpu_desc, "none (CTRBOX_CUDA_LIB=%.900s: no such file)", path);
        else snprintf(gpu_desc, sizeof gpu_desc, "none (the CUDA backend %.900s was not built: nvcc was not found)", path);
        return;
    }
    /* CUDA's libraries map about 700 MB when loaded, and cuBLAS crashes in its initialiser when a
     * mapping fails under an address-space limit: not loaded without room for them */
    uint64_t limit, left = address_space_left(&limit);
    if (left < ((uint64_t)1 << 30)) {
        snprintf(gpu_desc, sizeof gpu_desc, "none (the address-space limit (ulimit -v) of %llu MB leaves %llu MB; "
                 "the CUDA backend's libraries need about 1 GB: not loaded)", (unsigned long long)(limit >> 20),
                 (unsigned long long)(left >> 20));
        return;
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(gpu_desc, sizeof gpu_desc, "none (%.1000s)", dlerror());
        return;
    }
    cuda_open_fn open_fn = (cuda_open_fn)dlsym(h, "ctrbox_cuda_open");
    if (!open_fn) {
        snprintf(gpu_desc, sizeof gpu_desc, "none (%.900s has no ctrbox_cuda_open)", path);
        return;
    }
    const char *which_env = getenv("CTRBOX_GPU");
    int which = which_env && *which_env ? atoi(which_env) : 0;
    char desc[900];
    int n = open_fn(which, &gpu, &gpu_mem, desc, sizeof desc);
    if (n <= 0 || !gpu)
        snprintf(gpu_desc, sizeof gpu_desc, n <= 0 ? "none (%s)" : "%s (CTRBOX_GPU names no device)", desc);
    else
        snprintf(gpu_desc, sizeof gpu_desc, "%s (using gpu%d)", desc, which);
}

static void load(void)
{
    gpu_load();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *core = getenv("OPENBLAS_CORETYPE");
    __builtin_cpu_init();   /* the variant dense/layers.c's target_clones resolve to */
#ifdef CTRBOX_NO_AVX512
    const char *simd = __builtin_cpu_supports("avx2") ? "avx2 (a build without avx512f)" : "sse2";
#else
    const char *simd = __builtin_cpu_supports("avx512f") ? "avx512f" : __builtin_cpu_supports("avx2") ? "avx2" : "sse2";
#endif
    snprintf(describe, sizeof describe, "cpu: %ld cores, OpenBLAS (core %s), element-wise kernels %s\n%s%s", cores,
             core && *core ? core : "the library's choice", simd, gpu ? "" : "gpu: ", gpu_desc);
}

const dense_backend *device_gpu(const char **why)
{
    pthread_once(&once, load);
    if (why) *why = gpu_desc;
    return gpu;
}

size_t device_gpu_memory(void)
{
    pthread_once(&once, load);
    return gpu ? gpu_mem : 0;
}

const dense_backend *device_backend(place_device d)
{
    if (d == PLACE_CPU) return &dense_backend_cpu;
    if (d == PLACE_GPU) return device_gpu(NULL);
    return NULL;
}

const char *device_describe(void)
{
    pthread_once(&once, load);
    return describe;
}
