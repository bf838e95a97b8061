/*
 * util.c: checked allocation, fatal errors, clock, durable file writes.
 */
#define _GNU_SOURCE
#include "util.h"

#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/lsan_interface.h>
#endif

static const char *prog = "ctrbox";

static void leave(int status, void *arg)
{
    (void)arg;
    /* eval's figures, a table tool's listing: `> out.txt` on a full disk (or standard output closed)
     * lost them with exit 0 */
    int e = fflush(stdout) ? errno : 0;
    if (ferror(stdout) && status == 0) {
        fprintf(stderr, "%s: cannot write standard output: %s\n", prog, strerror(e ? e : EIO));
        status = 1;
    }
    fflush(NULL);
#ifdef __SANITIZE_ADDRESS__
    __lsan_do_leak_check();   /* its own exit handler would not run */
#endif
    _exit(status);
}

static void abort_after_uncaught(int sig)
{
    (void)sig;
    _exit(1);
}

static void uncaught(void)
{
    /* Out of memory, another thread of the library may hit glibc's own fatal error (a thread-local
     * destructor it cannot register) and abort while this one says why: that abort ends the
     * process as this handler would, exit 1, not 134 (seen in robust::memory_limits_end_in_one_line). */
    signal(SIGABRT, abort_after_uncaught);
    fflush(NULL);
    fprintf(stderr, "%s: a library (RocksDB) failed with an exception it does not catch, most likely for want of "
            "memory or threads: give the process more memory (ulimit -v) or more threads (ulimit -u), or use a smaller "
            "--cache-mb\n",
            program_invocation_short_name);
    _exit(1);
}

/* std::set_terminate, by its mangled name (libstdc++ comes with RocksDB; this program is C).
 * Weak: a program without RocksDB (the fuzz targets) links without it. */
void (*_ZSt13set_terminatePFvvE(void (*handler)(void)))(void) __attribute__((weak));

void process_setup(void)
{
    on_exit(leave, NULL);
    if (_ZSt13set_terminatePFvvE) _ZSt13set_terminatePFvvE(uncaught);
}

/* OpenBLAS starts its worker threads in its constructor, before main; where one cannot be made
 * (its stack, ulimit -s, beyond the room ulimit -v leaves, or no process left under RLIMIT_NPROC)
 * it prints why and raises SIGINT, which ended the process with exit 130 and no line of ours.
 * From the program's preinit functions (run before any library's constructor) to its own
 * constructors (run after them), a SIGINT the process sends itself ends it with one line, exit 1;
 * one from outside does what it did before. */
static struct sigaction load_old;
static int load_on;
static char load_msg[600];
static size_t load_len;

static void load_sigint(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (si->si_code == SI_TKILL && si->si_pid == getpid()) {
        ssize_t w = write(2, load_msg, load_len);
        (void)w;
        _exit(1);
    }
    if (load_old.sa_handler == SIG_IGN) return;
    sigaction(sig, &load_old, NULL);
    raise(sig);   /* delivered on return, as before */
}

static void load_guard_on(int argc, char **argv, char **envp)
{
    (void)envp;
    const char *name = argc > 0 && argv[0] ? argv[0] : "ctrbox", *slash = strrchr(name, '/');
    name = slash ? slash + 1 : name;
    struct rlimit st, as;
    char stack[80] = "", room[80] = "no address-space limit";
    if (getrlimit(RLIMIT_STACK, &st) == 0 && st.rlim_cur != RLIM_INFINITY)
        snprintf(stack, sizeof stack, " of %llu MB (ulimit -s)", (unsigned long long)(st.rlim_cur >> 20));
    if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
        snprintf(room, sizeof room, "an address-space limit (ulimit -v) of %llu MB", (unsigned long long)(as.rlim_cur >> 20));
    int n = snprintf(load_msg, sizeof load_msg,
                     "%s: OpenBLAS could not start its threads as the program loaded (its line above says why; each takes a "
                     "stack%s, within %s, and counts against the processes a user may run): lower the stack size, raise the "
                     "limit, or start with OPENBLAS_NUM_THREADS=1\n", name, stack, room);
    load_len = n < 0 ? 0 : (size_t)n < sizeof load_msg ? (size_t)n : sizeof load_msg - 1;
    struct sigaction sa = { 0 };
    sa.sa_sigaction = load_sigint;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    load_on = sigaction(SIGINT, &sa, &load_old) == 0;
}

static void load_guard_off(void) __attribute__((constructor));
static void load_guard_off(void)
{
    if (load_on) sigaction(SIGINT, &load_old, NULL);
    load_on = 0;
}

/* Descriptors 0, 1 and 2 closed when the program started (`ctrbox train ... 2>&-`, a daemon's child)
 * were the first the program opened next: log.jsonl took descriptor 2 and every progress line and
 * message went into it, a model file taking 1 would have had standard output's lines in it. Each
 * closed one is held by /dev/null opened to read, before anything else runs: writing to it fails
 * as writing to a closed descriptor does (EBADF), and an input or output that names it is refused
 * (util_std_closed). */
static int std_closed_mask;

static void std_fds_open(void)
{
    for (int fd = 0; fd <= 2; fd++) {
        if (fcntl(fd, F_GETFD) >= 0 || errno != EBADF) continue;
        int n = open("/dev/null", O_RDONLY);
        if (n < 0) _exit(127);   /* no /dev/null: nothing can be said, nowhere to say it */
        if (n != fd) {
            /* a lower closed descriptor was taken first; it is handled in its own turn */
            if (dup2(n, fd) < 0) _exit(127);
            close(n);
        }
        std_closed_mask |= 1 << fd;
    }
}

int util_std_closed(int fd) { return fd >= 0 && fd <= 2 && (std_closed_mask >> fd & 1); }

static void preinit(int argc, char **argv, char **envp)
{
    std_fds_open();   /* first: the libraries' constructors may open files or print */
    load_guard_on(argc, argv, envp);
}

__attribute__((section(".preinit_array"), used)) static void (*const preinit_fn)(int, char **, char **) = preinit;

void util_set_prog(const char *name) { prog = name; }
const char *util_prog(void) { return prog; }

static void oom(size_t n)
{
    fprintf(stderr, "%s: out of memory allocating %zu bytes\n", prog, n);
    exit(1);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

void sort_u64(uint64_t *v, size_t n)
{
    if (n < 64) {   /* insertion sort */
        for (size_t i = 1; i < n; i++) {
            uint64_t x = v[i];
            size_t j = i;
            for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
            v[j] = x;
        }
        return;
    }
    uint64_t *tmp = xmalloc(n * sizeof *tmp), *src = v, *dst = tmp;
    size_t *count = xmalloc(65536 * sizeof *count);
    for (int shift = 0; shift < 64; shift += 16) {
        memset(count, 0, 65536 * sizeof *count);
        for (size_t i = 0; i < n; i++) count[(src[i] >> shift) & 0xffff]++;
        size_t sum = 0;
        for (size_t d = 0; d < 65536; d++) {
            size_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (size_t i = 0; i < n; i++) dst[count[(src[i] >> shift) & 0xffff]++] = src[i];
        uint64_t *x = src;
        src = dst;
        dst = x;
    }
    /* four passes: the sorted keys are back in v */
    free(count);
    free(tmp);
}

void *xaligned_alloc(size_t align, size_t n)
{
    void *p = NULL;
    if (posix_memalign(&p, align, n ? n : align) != 0) oom(n);
    return p;
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}

static const char *die_where;
void util_die_where(const char *where) { die_where = where; }

void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    if (die_where) fprintf(stderr, "%s: ", die_where);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

double cpu_sec(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

double now_sec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Delete the temporary files of path ("<path>.tmp.<pid>") that processes killed while writing it
 * left behind: those whose process is gone (a live one may be writing it now). */
static void remove_stale_tmp(const char *path)
{
    char *copy = xstrdup(path), *copy2 = xstrdup(path);
    const char *dir = dirname(copy), *base = basename(copy2);
    size_t bl = strlen(base);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *n = e->d_name;
        if (strncmp(n, base, bl) || strncmp(n + bl, ".tmp.", 5)) continue;
        char *end;
        long pid = strtol(n + bl + 5, &end, 10);
        if (*end || end == n + bl + 5 || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
            char full[4096];
            if (snprintf(full, sizeof full, "%s/%s", dir, n) < (int)sizeof full) unlink(full);   /* not a name cut short */
        }
    }
    if (d) closedir(d);
    free(copy);
    free(copy2);
}

const char *util_tty_break(void) { return isatty(2) ? "\n" : ""; }

int util_same_file(const char *path, const struct stat *st)
{
    struct stat b;
    return path && stat(path, &b) == 0 && b.st_dev == st->st_dev && b.st_ino == st->st_ino;
}

int util_own_fd(const char *path, int input)
{
    if (!strcmp(path, "-")) return input ? 0 : 1;
    if (!strcmp(path, "/dev/stdin")) return 0;
    if (!strcmp(path, "/dev/stdout")) return 1;
    if (!strcmp(path, "/dev/stderr")) return 2;
    const char *p = !strncmp(path, "/dev/fd/", 8) ? path + 8 : !strncmp(path, "/proc/self/fd/", 14) ? path + 14 : NULL;
    if (!p || *p < '0' || *p > '9') return -1;
    char *end;
    long n = strtol(p, &end, 10);
    return *end || n > INT_MAX ? -1 : (int)n;
}

int durable_open(durable_file *d, const char *path)
{
    memset(d, 0, sizeof *d);
    int own = util_own_fd(path, 0);
    if (util_std_closed(own)) return -EBADF;   /* closed when the program started: not /dev/null's sink */
    if (own >= 0) {
        /* written to the descriptor as the shell opened it: standard output redirected to a file
         * (`--out /dev/stdout > p.txt`) went by the durable path below, the link /dev/stdout
         * resolving to that file, and as root the machine's /dev/stdout was renamed over (p.txt
         * stayed empty); a file opened to append (>>) is appended to */
        int fd = dup(own);
        if (fd < 0) return -errno;
        d->f = fdopen(fd, "w");
        if (!d->f) {
            int e = errno;
            close(fd);
            return -e;
        }
        d->path = xstrdup(path);
        return 0;
    }
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
        /* a pipe or a device: written as it is, a stream has no temporary name (and renaming one
         * over a device would replace it by a file) */
        d->f = fopen(path, "w");
        if (!d->f) return -errno;
        d->path = xstrdup(path);
        return 0;
    }
    /* a link to a file: the file is written, the link stays (it was replaced by the file) */
    char *target = lstat(path, &st) == 0 && S_ISLNK(st.st_mode) ? realpath(path, NULL) : NULL;
    if (target) {
        int r = durable_open(d, target);
        free(target);
        return r;
    }
    remove_stale_tmp(path);
    size_t n = strlen(path) + 32;
    d->path = xstrdup(path);
    d->tmp = xmalloc(n);
    snprintf(d->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    d->f = fopen(d->tmp, "wb");
    if (!d->f) {
        int e = errno;
        free(d->path);
        free(d->tmp);
        memset(d, 0, sizeof *d);
        return -e;
    }
    setvbuf(d->f, NULL, _IOFBF, 1 << 20);
    return 0;
}

static int fsync_dir_of(const char *path)
{
    char *copy = xstrdup(path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    free(copy);
    if (fd < 0) return -errno;
    int ret = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return ret;
}

int durable_commit(durable_file *d)
{
    int ret = 0;
    if (fflush(d->f) != 0 || ferror(d->f)) ret = -(errno ? errno : EIO);
    if (!d->tmp) {   /* a stream */
        if (fclose(d->f) != 0 && !ret) ret = -errno;
        free(d->path);
        memset(d, 0, sizeof *d);
        return ret;
    }
    if (!ret && fsync(fileno(d->f)) < 0) ret = -errno;
    if (fclose(d->f) != 0 && !ret) ret = -errno;
    d->f = NULL;
    if (!ret && rename(d->tmp, d->path) < 0) ret = -errno;
    if (!ret) ret = fsync_dir_of(d->path);
    if (ret) unlink(d->tmp);
    free(d->path);
    free(d->tmp);
    memset(d, 0, sizeof *d);
    return ret;
}

void durable_abort(durable_file *d)
{
    if (d->f) fclose(d->f);
    if (d->tmp) unlink(d->tmp);
    free(d->path);
    free(d->tmp);
    memset(d, 0, sizeof *d);
}

int durable_write(const char *path, const void *buf, size_t len)
{
    durable_file d;
    int r = durable_open(&d, path);
    if (r == 0 && fwrite(buf, 1, len, d.f) != len) {
        r = -(errno ? errno : EIO);
        durable_abort(&d);
    } else if (r == 0) {
        r = durable_commit(&d);
    }
    return r;
}

int parse_u64_list(const char *s, uint64_t **out)
{
    int n = 0, cap = 8;
    uint64_t *v = xmalloc(cap * sizeof *v);
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        if (*p < '0' || *p > '9') goto bad;
        unsigned long long x = strtoull(p, &end, 10);
        if (errno || end == p) goto bad;
        if (n == cap) v = xrealloc(v, (cap *= 2) * sizeof *v);
        v[n++] = x;
        p = end;
        if (*p == ',') {
            p++;
            if (!*p) goto bad;
        } else if (*p) {
            goto bad;
        }
    }
    if (n == 0) goto bad;
    *out = v;
    return n;
bad:
    free(v);
    *out = NULL;
    return -1;
}

/* The instruction sets OpenBLAS's x86 cores are built for, and whether this CPU runs them. */
enum { ISA_AVX512, ISA_AVX2, ISA_AVX, ISA_FMA4 };
static const char *const isa_name[] = { "AVX-512", "AVX2 and FMA", "AVX", "FMA4 and XOP (AMD's Bulldozer family)" };

static int cpu_runs(int isa)
{
    __builtin_cpu_init();
    switch (isa) {
    case ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    case ISA_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case ISA_AVX: return __builtin_cpu_supports("avx");
    default: return __builtin_cpu_supports("fma4") && __builtin_cpu_supports("xop");
    }
}

/* The instructions a core's kernels need that the CPU lacks ("AVX-512"), or NULL: OpenBLAS takes
 * OPENBLAS_CORETYPE as it is, and a core this CPU cannot run (SkylakeX on an AVX2 EPYC, a job
 * script moved between machines) ended the first product in SIGILL, no line said why. */
static const char *blas_core_lacks(const char *core)
{
    static const struct {
        const char *name;
        int isa;
    } cores[] = {
        { "skylakex", ISA_AVX512 }, { "cooperlake", ISA_AVX512 }, { "sapphirerapids", ISA_AVX512 },
        { "haswell", ISA_AVX2 },    { "zen", ISA_AVX2 },          { "sandybridge", ISA_AVX },
        { "bulldozer", ISA_FMA4 },  { "piledriver", ISA_FMA4 },   { "steamroller", ISA_FMA4 },
        { "excavator", ISA_FMA4 },
    };
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
        if (!strcasecmp(core, cores[i].name)) return cpu_runs(cores[i].isa) ? NULL : isa_name[cores[i].isa];
    return NULL;
}

/* OpenBLAS's own (cblas.h is not included here); weak: the fuzz targets link this file without it */
char *openblas_get_corename(void) __attribute__((weak));

void blas_select_core(char **argv)
{
    int set = 0;
    const char *user_core = getenv("OPENBLAS_CORETYPE");
    if (user_core && !*user_core) user_core = NULL;   /* set empty: as unset, for OpenBLAS too */
    const char *lacks = user_core ? blas_core_lacks(user_core) : NULL;
    if (lacks)
        die("OPENBLAS_CORETYPE=%s: that core's kernels need %s, which this CPU lacks; unset it (%s picks the kernels "
            "for this CPU) or name a core this CPU runs", user_core, lacks, prog);
    if (!user_core) {
        const char *core = cpu_runs(ISA_AVX512) ? "SkylakeX" : cpu_runs(ISA_AVX2) ? "Haswell" : NULL;
        if (core) set += setenv("OPENBLAS_CORETYPE", core, 1) == 0;
    }
    /* idle workers sleep after about 2^16 cycles (OpenBLAS) or 20000 spins (libgomp) instead of
     * 2^28 cycles and 300000 spins: between layers they still spin, and the tier's fetch, writer
     * and compaction threads get the cores while the trainer commits */
    if (!getenv("OPENBLAS_THREAD_TIMEOUT")) set += setenv("OPENBLAS_THREAD_TIMEOUT", "16", 1) == 0;
    if (!getenv("GOMP_SPINCOUNT") && !getenv("OMP_WAIT_POLICY")) set += setenv("GOMP_SPINCOUNT", "20000", 1) == 0;
    if (!set) {
        /* a name OpenBLAS does not know ("skylake", "junk") it drops without a word and picks a core
         * itself: on a CPU newer than the library, its SSE3 kernels, several times slower */
        const char *used = openblas_get_corename ? openblas_get_corename() : NULL;
        if (user_core && used && strcasecmp(used, user_core))
            fprintf(stderr, "%s: warning: OPENBLAS_CORETYPE=%s: OpenBLAS runs its %s kernels instead (a name it does not "
                    "know, or a core it maps to another); unset it to let %s pick the kernels for this CPU\n",
                    prog, user_core, used, prog);
        return;
    }
    /* the program run again finds the descriptors closed at the start as they were (they hold
     * /dev/null here) */
    for (int fd = 0; fd <= 2; fd++)
        if (util_std_closed(fd)) close(fd);
    execv("/proc/self/exe", argv);   /* on failure, go on with the libraries' own choices */
    std_fds_open();
}

void thread_lower_priority(int delta)
{
    id_t tid = (id_t)gettid();
    errno = 0;
    int now = getpriority(PRIO_PROCESS, tid);   /* -1 is a valid value: errno tells */
    if (now == -1 && errno) return;
    int want = now + delta > 19 ? 19 : now + delta;
    if (want > now) (void)setpriority(PRIO_PROCESS, tid, want);
}

static uint64_t du_sum;

static int du_one(const char *p, const struct stat *st, int type, struct FTW *ftw)
{
    (void)p, (void)ftw;
    if (type == FTW_F) du_sum += (uint64_t)st->st_blocks * 512;
    return 0;
}

uint64_t path_disk_bytes(const char *path)
{
    du_sum = 0;
    if (nftw(path, du_one, 16, FTW_PHYS) != 0) return 0;
    return du_sum;
}

int lock_file(int fd, int shared)
{
    /* A writer that died a moment ago releases its lock only as its process ends, which can take
     * a while after its parent saw it killed (timeout(1)'s own SIGKILL does not wait for it, and a
     * process's memory and io_uring are torn down first): a job started again at once (a
     * launcher's restart, mpirun's other ranks still exiting) waits up to 2 s for that. A reader
     * does not wait: a writer it meets is alive. */
    for (int tries = 0;; tries++) {
        if (flock(fd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) == 0) return 0;
        if (errno != EWOULDBLOCK) return -errno;
        if (shared || tries == 40) return -EBUSY;
        usleep(50000);
    }
}

int folder_path_check(const char *dir, char *err, size_t errlen)
{
    size_t n = strlen(dir);
    if (n <= FOLDER_PATH_MAX) return 0;
    snprintf(err, errlen, "%.40s...%s: a folder's path of %zu bytes, over the %d ctrbox takes (the paths of the files in "
             "it must stay within the system's 4096)", dir, dir + n - 40, n, FOLDER_PATH_MAX);
    return -ENAMETOOLONG;
}

FILE *util_log_open(const char *path, int append)
{
    if (!append) return fopen(path, "w");
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0666);   /* as fopen(path, "a") */
    if (fd < 0) return NULL;
    off_t end = lseek(fd, 0, SEEK_END), keep = -1;   /* just past the last newline */
    char buf[4096];
    for (off_t hi = end; end > 0 && keep < 0;) {
        off_t lo = hi > (off_t)sizeof buf ? hi - (off_t)sizeof buf : 0;
        if (pread(fd, buf, (size_t)(hi - lo), lo) != hi - lo) break;   /* unread: left as it is */
        off_t i = hi - lo;
        while (i > 0 && buf[i - 1] != '\n') i--;
        if (i > 0 || lo == 0) keep = lo + i;
        hi = lo;
    }
    if (keep >= 0 && keep < end && ftruncate(fd, keep) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    FILE *f = fdopen(fd, "a");
    if (!f) close(fd);
    return f;
}

int folder_lock(const char *dir, const char *name, int shared)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return -ENAMETOOLONG;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0 && shared) fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int r = lock_file(fd, shared);
    if (r < 0) {
        close(fd);
        return r;
    }
    return fd;
}


uint64_t address_space_left(uint64_t *limit)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY) {
        if (limit) *limit = UINT64_MAX;
        return UINT64_MAX;
    }
    if (limit) *limit = rl.rlim_cur;
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%lu", &pages) != 1) pages = 0;
        fclose(f);
    }
    uint64_t used = (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
    return rl.rlim_cur > used ? rl.rlim_cur - used : 0;
}

void refuse_existing_output(const char *path, int force)
{
    struct stat st;
    if (!force && util_own_fd(path, 0) < 0 && stat(path, &st) == 0 && (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
        die("%s exists; give --force to replace it", path);
}
