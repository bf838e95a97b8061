/*
 * late_threads.c: a preload (LD_PRELOAD) for the tests that starts every new thread of a program
 * late (50 ms, or LATE_THREADS_MS), as a loaded machine's scheduler may:
 * robust::a_late_blas_worker_does_not_hang checks with it that OpenBLAS's workers, which take their
 * buffers as they first run, leave the trainer's own buffer alone under an address-space limit, and
 * that a worker which cannot map its buffer then does not hang the run.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct start {
    void *(*fn)(void *);
    void *arg;
};

static void *late_start(void *p)
{
    const char *e = getenv("LATE_THREADS_MS");   /* first: the thread touches nothing before */
    long ms = e ? atol(e) : 50;
    nanosleep(&(struct timespec){ .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000 }, NULL);
    struct start s = *(struct start *)p;
    free(p);
    return s.fn(s.arg);
}

int pthread_create(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
    static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "pthread_create");
    struct start *s = malloc(sizeof *s);
    if (!s) return real(t, attr, fn, arg);
    s->fn = fn;
    s->arg = arg;
    int r = real(t, attr, late_start, s);
    if (r) free(s);
    return r;
}
