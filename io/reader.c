/*
 * reader.c: io_uring read-ahead of one file in fixed chunks.
 *
 * Slots 0..depth-1 each own one aligned buffer. Slot i holds the chunk at index head+k where k is
 * its distance from the head slot, so completions (which may arrive in any order) are matched to
 * slots by user_data and handed out strictly in order. A short read before the end of the file is
 * continued in the same slot.
 */
#define _GNU_SOURCE
#include "reader.h"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

typedef struct {
    uint8_t *buf;
    uint64_t off;       /* file offset of the chunk */
    size_t want;        /* bytes expected (chunk, or less at the end of the file) */
    size_t got;         /* bytes read so far */
    int busy;           /* a read is in flight */
    int err;            /* -errno of a failed read */
} slot;

struct io_reader {
    int fd;
    int direct;
    int use_uring;
    struct io_uring ring;
    uint64_t size;
    size_t chunk;
    int depth;
    slot *slots;
    int head;           /* slot of the next chunk to hand out */
    uint64_t next_off;  /* offset of the next chunk to submit */
    int handed;         /* slot handed out last time, to resubmit; -1 if none */
};

static int submit_slot(io_reader *r, int i)
{
    slot *s = &r->slots[i];
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
    CHECK(sqe);
    size_t len = r->direct ? r->chunk - s->got : s->want - s->got;
    io_uring_prep_read(sqe, r->fd, s->buf + s->got, (unsigned)len, s->off + s->got);
    io_uring_sqe_set_data64(sqe, (uint64_t)i);
    s->busy = 1;
    return 0;
}

/* Give slot i the next chunk of the file, if any is left. */
static void queue_next(io_reader *r, int i)
{
    slot *s = &r->slots[i];
    s->busy = 0;
    s->err = 0;
    s->got = 0;
    s->want = 0;
    if (r->next_off >= r->size) return;
    s->off = r->next_off;
    s->want = r->size - s->off < r->chunk ? (size_t)(r->size - s->off) : r->chunk;
    r->next_off += s->want;
    submit_slot(r, i);
}

static int open_fd(const char *path, int direct)
{
    return open(path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
}

int io_reader_open(io_reader **out, const char *path, int flags, size_t chunk, int depth)
{
    *out = NULL;
    io_reader *r = xcalloc(1, sizeof *r);
    r->handed = -1;
    r->chunk = (chunk + 4095) & ~(size_t)4095;
    if (r->chunk == 0) r->chunk = 4096;
    r->depth = depth < 1 ? 1 : depth;
    r->direct = (flags & IO_READER_DIRECT) != 0;
    r->fd = open_fd(path, r->direct);
    if (r->fd < 0 && r->direct && errno == EINVAL) {
        r->direct = 0;
        r->fd = open_fd(path, 0);
    }
    if (r->fd < 0) {
        int e = errno;
        free(r);
        return -e;
    }
    struct stat st;
    if (fstat(r->fd, &st) < 0) {
        int e = errno;
        close(r->fd);
        free(r);
        return -e;
    }
    if (S_ISDIR(st.st_mode)) {
        close(r->fd);
        free(r);
        return -EISDIR;
    }
    r->slots = xcalloc((size_t)r->depth, sizeof *r->slots);
    for (int i = 0; i < r->depth; i++) r->slots[i].buf = xaligned_alloc(4096, r->chunk);
    r->use_uring = S_ISREG(st.st_mode);
    r->size = (uint64_t)st.st_size;
    if (r->use_uring) {
        int ret = io_uring_queue_init((unsigned)r->depth, &r->ring, 0);
        if (ret < 0) r->use_uring = 0;   /* no io_uring here (seccomp, old kernel): plain reads */
    }
    if (!r->use_uring && r->direct) {
        /* plain read() with O_DIRECT would need the same alignment care; keep it simple */
        close(r->fd);
        r->direct = 0;
        r->fd = open_fd(path, 0);
        if (r->fd < 0) {
            int e = errno;
            io_reader_close(r);
            return -e;
        }
    }
    if (r->use_uring) {
        for (int i = 0; i < r->depth; i++) queue_next(r, i);
        int ret = io_uring_submit(&r->ring);
        if (ret < 0) {
            io_reader_close(r);
            return ret;
        }
    }
    *out = r;
    return 0;
}

/* Reap completions until slot i has all it wants (or failed). */
static int wait_slot(io_reader *r, int i)
{
    slot *s = &r->slots[i];
    while (s->busy) {
        struct io_uring_cqe *cqe;
        int ret = io_uring_wait_cqe(&r->ring, &cqe);
        if (ret == -EINTR) continue;
        if (ret < 0) return ret;
        int j = (int)io_uring_cqe_get_data64(cqe);
        int res = cqe->res;
        io_uring_cqe_seen(&r->ring, cqe);
        slot *t = &r->slots[j];
        t->busy = 0;
        if (res < 0) {
            t->err = res;
        } else if (res == 0) {
            if (t->got < t->want) t->err = -ENODATA;   /* file shrank while we read it (io_reader_next's caller says so) */
        } else {
            t->got += (size_t)res;
            if (t->got < t->want) {                 /* short read: continue it */
                submit_slot(r, j);
                ret = io_uring_submit(&r->ring);
                if (ret < 0) return ret;
            }
        }
    }
    return s->err;
}

ssize_t io_reader_next(io_reader *r, const uint8_t **data)
{
    *data = NULL;
    if (!r->use_uring) {
        slot *s = &r->slots[0];
        for (;;) {
            ssize_t n = read(r->fd, s->buf, r->chunk);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return -errno;
            *data = s->buf;
            return n;
        }
    }
    if (r->handed >= 0) {
        queue_next(r, r->handed);
        r->handed = -1;
        int ret = io_uring_submit(&r->ring);
        if (ret < 0) return ret;
    }
    slot *s = &r->slots[r->head];
    if (s->want == 0 && !s->busy) return 0;   /* nothing queued: end of file */
    int ret = wait_slot(r, r->head);
    if (ret < 0) return ret;
    *data = s->buf;
    r->handed = r->head;
    r->head = (r->head + 1) % r->depth;
    return (ssize_t)s->got;
}

int io_reader_is_direct(const io_reader *r) { return r->direct; }
uint64_t io_reader_size(const io_reader *r) { return r->size; }

void io_reader_close(io_reader *r)
{
    if (!r) return;
    if (r->use_uring) {
        /* drain reads still in flight before their buffers are freed */
        for (int i = 0; i < r->depth; i++)
            if (r->slots[i].busy) wait_slot(r, i);
        io_uring_queue_exit(&r->ring);
    }
    if (r->slots)
        for (int i = 0; i < r->depth; i++) free(r->slots[i].buf);
    free(r->slots);
    if (r->fd >= 0) close(r->fd);
    free(r);
}
