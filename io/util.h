/*
 * util.h: the three error levels of STYLE.md, checked allocation, durable files.
 *
 * CHECK(x) aborts on a programmer error with file:line and the expression.
 * xmalloc/xcalloc/xrealloc exit with a message when memory runs out (unrecoverable).
 * Expected failures are returned as negative errno-style codes by the modules themselves.
 * durable_*: write to "<path>.tmp.<pid>", fsync, rename over <path>, fsync the directory; opening
 * deletes the temporary files of <path> that killed processes left. A path that is a pipe or a
 * device is written directly (tmp is NULL); so is one of the process's own descriptors ("-" and
 * /dev/stdout: standard output; /dev/stderr, /dev/fd/N, /proc/self/fd/N), as the shell opened it.
 * A symbolic link's file is written, the link stays.
 */
#ifndef CTRBOX_UTIL_H
#define CTRBOX_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>   /* abort */

#define CHECK(x)                                                                    \
    do {                                                                            \
        if (!(x)) {                                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #x);   \
            abort();                                                                \
        }                                                                           \
    } while (0)

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
void *xaligned_alloc(size_t align, size_t n);
char *xstrdup(const char *s);
/* Sorts v ascending: LSD radix sort, 16 bits a pass, with n words of scratch. */
void sort_u64(uint64_t *v, size_t n);

/* First thing in each program's main: the process then always ends by _exit, after flushing
 * stdio (and, under AddressSanitizer, the leak check), from a return of main or an exit() anywhere,
 * a library's included. Library destructors do not run: OpenBLAS's joins its worker threads, and
 * waits forever for one stuck retrying an allocation under an address-space limit. An exception a
 * C++ library (RocksDB) does not catch, as when it cannot start a thread, ends the process with
 * one line and exit status 1 instead of an abort. */
void process_setup(void);

/* Whether descriptor fd (0, 1 or 2) was closed when the program started (it is on /dev/null now). */
int util_std_closed(int fd);
/* The process's own descriptor a path names, or -1: "-" (0 as an input, 1 as an output),
 * /dev/stdin 0, /dev/stdout 1, /dev/stderr 2, /dev/fd/N and /proc/self/fd/N N. */
int util_own_fd(const char *path, int input);
/* Whether path names the file st describes (the same device and inode; 0 when path cannot be stat'ed). */
struct stat;
int util_same_file(const char *path, const struct stat *st);

/* What goes before an error line that may follow a progress line: "\n" when standard error is a
 * terminal (where progress lines are drawn over with \r), "" in a log file or a pipe, where it was an
 * empty line before each such error. */
const char *util_tty_break(void);

/* The program's name in its messages ("ctrbox", "ctrbox-data", "ctrbox-table"); each main sets it. */
void util_set_prog(const char *name);
const char *util_prog(void);

/* Print "prog: message" on stderr and exit(1). For the programs' main paths only. */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Where the value being handled came from ("run.ini:3": a config file's line), put before die's
 * message until set to NULL again: a bad value from a config file named the option, not the line. */
void util_die_where(const char *where);

/* Monotonic clock in seconds. */
double now_sec(void);
/* CPU seconds (user + system) the process has used, all threads. */
double cpu_sec(void);

/* A file written durably: open to a temporary name; commit renames it into place. */
typedef struct {
    FILE *f;
    char *path;     /* final name (owned) */
    char *tmp;      /* temporary name (owned), NULL when path is a stream */
} durable_file;

/* 0 or -errno. On success d->f is open for writing. */
int durable_open(durable_file *d, const char *path);
/* Flush, fsync, rename, fsync the directory; 0 or -errno. Closes d either way. */
int durable_commit(durable_file *d);
/* Close and delete the temporary file (after an error). */
void durable_abort(durable_file *d);
/* The whole file at path is buf (len bytes), durably (durable_open ... durable_commit): 0 or -errno. */
int durable_write(const char *path, const void *buf, size_t len);

/* An output that exists as a file or folder is replaced only with --force: else die saying so
 * (a pipe, a device or one of the process's own descriptors, as durable_open names them, is
 * written to, nothing is kept there). */
void refuse_existing_output(const char *path, int force);

/* Bytes of address space left under the address-space limit (ulimit -v, RLIMIT_AS), or UINT64_MAX
 * without one; *limit (if not NULL) gets the limit. */
uint64_t address_space_left(uint64_t *limit);

/* Bytes a file or folder (all files below it) takes on disk: allocated blocks; 0 if unreadable. */
uint64_t path_disk_bytes(const char *path);

/* The longest path of a folder ctrbox keeps files in: its files' paths (a name of up to 255 bytes,
 * a temporary's suffix after it) then stay within the system's limit of 4096 bytes. A longer folder
 * is refused where it comes in: a file's path built from it in a buffer of that size was cut short,
 * another file's name (DIR/LOCK for DIR/LOCK.model), written silently. */
#define FOLDER_PATH_MAX 3800
/* 0 if dir's path fits FOLDER_PATH_MAX; else -ENAMETOOLONG, and a line in err naming the path by
 * its two ends and its length. */
int folder_path_check(const char *dir, char *err, size_t errlen);

/* Take fd's flock, exclusive (one writer) or shared: 0, -EBUSY when another process holds it, or
 * -errno. An exclusive lock waits up to 2 s for a holder whose process is ending; a shared one does
 * not wait. */
int lock_file(int fd, int shared);
/* Hold DIR/NAME's flock as lock_file takes it: the open descriptor, which keeps the lock until
 * closed (or the process ends), or -EBUSY when another process holds it, or -errno (-ENAMETOOLONG
 * where DIR/NAME passes 4096 bytes). */
int folder_lock(const char *dir, const char *name, int shared);
/* A log of JSON lines opened to write: new (append 0), or to go on (append 1), a last line cut short
 * (a kill or a full disk mid-write) dropped first: the lines written next ran on from it and the
 * history read back ended there. NULL with errno. */
FILE *util_log_open(const char *path, int append);

/* OpenBLAS 0.3.21 (Debian 12) does not recognise recent Xeons and falls back to its SSE3
 * (Prescott) kernels, 5x slower than its AVX-512 ones. If OPENBLAS_CORETYPE is unset, pick the
 * kernel family the CPU supports; if OPENBLAS_THREAD_TIMEOUT and GOMP_SPINCOUNT (or
 * OMP_WAIT_POLICY) are unset, shorten how long idle BLAS and OpenMP workers spin; then
 * re-execute the program with them set (the libraries read them when loaded). Values the user
 * set are kept. Call first thing in main. */
void blas_select_core(char **argv);

/* Lower the calling thread's CPU priority by delta nice steps (at most to 19), relative to what it
 * has: the tier's background threads give way to the trainer's BLAS threads, which lose more than
 * the core when one of them is preempted (the other waits at their barrier). Best effort. */
void thread_lower_priority(int delta);

/* Parse "a,b,c" of non-negative integers; returns count or -1 on a bad list. Caller frees *out. */
int parse_u64_list(const char *s, uint64_t **out);

#endif
