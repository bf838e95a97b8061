/*
 * backend.c: the CPU backend's table (layers.c, optim.c) and backend lookup by name.
 */
#include "backend.h"

#include <cblas.h>
#include <errno.h>
#include <malloc.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../io/util.h"
#include "layers.h"

static void *cpu_alloc(size_t bytes) { return xcalloc(bytes ? bytes : 1, 1); }
static void cpu_release(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { if (bytes) memmove(dst, src, bytes); }
static void cpu_zero(void *p, size_t bytes) { if (bytes) memset(p, 0, bytes); }
static void cpu_sync(void) {}
static void *cpu_host_alloc(size_t bytes) { return xmalloc(bytes ? bytes : 1); }

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
    .add = dense_add,
    .wide_forward = dense_wide_forward,
    .wide_backward = dense_wide_backward,
    .sum_forward = dense_sum_forward,
    .sum_backward = dense_sum_backward,
    .rowdot_forward = dense_rowdot_forward,
    .rowdot_backward = dense_rowdot_backward,
    .rows_gather = dense_rows_gather,
    .rows_update = dense_rows_update,
    .opt_step = dense_opt_step,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .upload_async = cpu_copy,
    .upload_wait = cpu_sync,
    .host_alloc = cpu_host_alloc,
    .host_release = cpu_release,
    .sync = cpu_sync,
};

const dense_backend *dense_backend_find(const char *name)
{
    return !strcmp(name, "cpu") ? &dense_backend_cpu : NULL;
}

/* What to do where OpenBLAS's buffers do not fit (both of the preflight's lines say it). */
#define BLAS_ROOM_HINT "raise the limit, start with OPENBLAS_NUM_THREADS=1 and fewer --threads (a buffer each), or " \
                       "bound memory with a cgroup instead (systemd-run -p MemoryMax=...)"

/* The warm-up's watchdog: a worker that first runs during the warm-up maps its buffer then, and
 * if the room is gone by then (the arena its thread's first allocation reserves counts too),
 * OpenBLAS retries forever and the warm-up never returns. arg: the limit in MB. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} warm = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };

static void *warm_watch(void *arg)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;   /* the warm-up takes milliseconds */
    pthread_mutex_lock(&warm.mu);
    int r = 0;
    while (!warm.done && r != ETIMEDOUT) r = pthread_cond_timedwait(&warm.cv, &warm.mu, &until);
    int stuck = !warm.done;
    pthread_mutex_unlock(&warm.mu);
    if (stuck)   /* exit ends the process by _exit (process_setup), with the main thread stuck */
        die("OpenBLAS could not map its 128 MB buffers within the address-space limit (ulimit -v) of %llu MB and "
            "retries forever: " BLAS_ROOM_HINT, (unsigned long long)(uintptr_t)arg);
    return NULL;
}

static void *probe_wait(void *arg)
{
    pthread_barrier_wait(arg);
    return NULL;
}

/* OpenMP's threads, each with its stack (ulimit -s, 8 MB by default), are made at the first
 * parallel region, and libgomp ends the process with its own line ("libgomp: Thread creation
 * failed") where one cannot be made (its stack out of the room under limit, the address-space
 * limit in bytes or 0 for none; or the processes a user may run, ulimit -u, all taken): n - 1
 * threads are made here first, all at once, and then OpenMP's pool, which later regions reuse. */
static void omp_pool(int n, uint64_t limit)
{
    if (n < 2) return;
    pthread_t *t = xcalloc((size_t)n - 1, sizeof *t);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)n);
    int made = 0, err = 0;
    for (; made < n - 1; made++)
        if ((err = pthread_create(&t[made], NULL, probe_wait, &bar)) != 0) break;
    if (made < n - 1 && limit)   /* those made wait at the barrier until the process ends */
        die("the address-space limit (ulimit -v) of %llu MB leaves no room for the stacks of %d more thread(s) "
            "(%s): raise the limit, use fewer --threads, or a smaller stack (ulimit -s)", (unsigned long long)(limit >> 20), n - 1,
            strerror(err));
    if (made < n - 1)
        die("cannot start %d more thread(s) (%s): threads count against the processes a user may run (ulimit -u): raise "
            "that limit, or use fewer --threads", n - 1, strerror(err));
    pthread_barrier_wait(&bar);
    for (int i = 0; i < made; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&bar);
    free(t);
    /* a region with nothing to do is compiled away: each thread counts itself in */
    static int in_pool;
    #pragma omp parallel num_threads(n)
    {
        #pragma omp atomic
        in_pool++;
    }
}

/* One product of N x N matrices on this thread (OpenBLAS maps its buffers as it runs); its start and
 * end (now_sec) into *t0 and *t1 where they are not NULL. */
static void warm_product(int N, double *t0, double *t1)
{
    float *a = xcalloc((size_t)N * N * 3, sizeof *a);
    if (t0) *t0 = now_sec();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f, a, N, a + N * N, N, 0.0f, a + 2 * N * N, N);
    if (t1) *t1 = now_sec();
    free(a);
}

int dense_calls_overlapped(const double *t0, const double *t1, int n)
{
    double last_start = t0[0], first_end = t1[0], shortest = t1[0] - t0[0];
    for (int i = 1; i < n; i++) {
        last_start = t0[i] > last_start ? t0[i] : last_start;
        first_end = t1[i] < first_end ? t1[i] : first_end;
        shortest = t1[i] - t0[i] < shortest ? t1[i] - t0[i] : shortest;
    }
    return n < 2 || first_end - last_start > shortest / 2;
}

/* A product on each of n threads, started together after a barrier, until one round's calls were
 * all running at once (each then held a buffer of its own while the others held theirs): the
 * calls' clocks show it. A thread the scheduler starts late, or a product done before another
 * begins, leaves a buffer to be mapped in training, after the tables have taken the room, where
 * OpenBLAS retries forever. The products grow after three rounds (about 0.3 ms, then 3 ms, for one
 * thread's product alone). 1 once a round overlapped, 0 if none of ROUNDS did. */
static int warm_each_thread(int n)
{
    enum { ROUNDS = 12 };
    double *t0 = xcalloc((size_t)n, sizeof *t0), *t1 = xcalloc((size_t)n, sizeof *t1);
    int overlapped = 0;
    for (int r = 0; r < ROUNDS && !overlapped; r++) {
        int N = r < 3 ? 256 : 512, team = 1;   /* 3 MB of matrices a thread at most */
        #pragma omp parallel num_threads(n)
        {
            int i = omp_get_thread_num();
            #pragma omp single
            team = omp_get_num_threads();   /* OpenMP may give fewer; training gets no more */
            warm_product(N, &t0[i], &t1[i]);
        }
        overlapped = dense_calls_overlapped(t0, t1, team);
    }
    free(t0);
    free(t1);
    return overlapped;
}

void dense_cpu_preflight(int threads)
{
    /* OpenBLAS's workers start with the library, each mapping its own 128 MB buffer as it first
     * runs, and a worker the scheduler starts late takes whichever buffer is free then: the one
     * this thread's first call mapped and released. The trainer's next multiplication then maps
     * another, after the tables have used the room up, and retries forever (seen as a rare hang
     * of robust::memory_limits_end_in_one_line). So, once OpenMP's threads are made, the warm-up
     * runs on every thread of OpenBLAS's pool. The products then run single-threaded on each of
     * OpenMP's threads at once (layers.c), each with a buffer of its own: a second warm-up maps
     * those, and where it never sees them all at once, the products run on one thread. */
    int pool = openblas_get_num_threads(), n = threads > 0 ? threads : omp_get_max_threads();
    uint64_t limit;
    omp_pool(n, address_space_left(&limit) != UINT64_MAX ? limit : 0);   /* their stacks first */
    uint64_t left = address_space_left(&limit);
    pthread_attr_t at;
    pthread_t watch;
    int attr = 0, watched = 0;
    if (left != UINT64_MAX) {
        mallopt(M_ARENA_MAX, 2);   /* each arena reserves 64 MB of address space */
        /* the pool's workers hold one each; the threads calling at once one each, the caller's
         * taken from the pool's warm-up */
        uint64_t need = (uint64_t)(pool - 1 + n) * (129u << 20) + (64u << 20);
        if (need > left)
            die("the address-space limit (ulimit -v) of %llu MB leaves %llu MB, and OpenBLAS alone needs %llu MB "
                "for its %d thread(s) and --threads %d: " BLAS_ROOM_HINT, (unsigned long long)(limit >> 20),
                (unsigned long long)(left >> 20), (unsigned long long)(need >> 20), pool, n);
        /* a worker not started yet maps its buffer during the warm-up: if that fails, the watchdog
         * ends the process with one line (without room for its small stack, the warm-up goes on
         * unwatched) */
        attr = pthread_attr_init(&at) == 0;
        watched = attr && pthread_attr_setstacksize(&at, 256 << 10) == 0 &&
                  pthread_create(&watch, &at, warm_watch, (void *)(uintptr_t)(limit >> 20)) == 0;
        warm_product(512, NULL, NULL);   /* large enough that every thread of the pool takes part, and holds its buffer */
    }
    openblas_set_num_threads(1);
    if (left != UINT64_MAX) {
        if (n > 1 && !warm_each_thread(n)) {
            /* a thread without a buffer of its own would map one in training, where the limit may
             * refuse it: one thread's products need only the buffer mapped above */
            dense_products_one_thread(1);
            fprintf(stderr, "ctrbox: warning: under the address-space limit (ulimit -v), OpenMP's %d threads never ran a "
                    "product at the same time in the preflight (a busy machine), so OpenBLAS could not map a buffer for each "
                    "of them: the dense layers' products run on one thread (slower; the same model)\n", n);
        }
        if (watched) {
            pthread_mutex_lock(&warm.mu);
            warm.done = 1;
            pthread_cond_signal(&warm.cv);
            pthread_mutex_unlock(&warm.mu);
            pthread_join(watch, NULL);
            warm.done = 0;
        }
        if (attr) pthread_attr_destroy(&at);
    }
}
