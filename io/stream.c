/*
 * stream.c: one input as decompressed chunks, split into lines or copied out as bytes.
 *
 * Layers: raw chunks (io_reader, or the caller's memory) -> decoder (none, zlib inflate with
 * multi-member gzip, zstd streaming) -> the current chunk `cur` -> lines. A line that lies whole in
 * the current chunk is handed out in place; one that spans chunks is gathered in `carry`.
 */
#define _GNU_SOURCE
#include "stream.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "util.h"
#include "reader.h"
#define XXH_INLINE_ALL
#include <xxhash.h>

/* Reads in flight: page-cache reads run best with a few 256 KiB buffers that stay in cache;
 * O_DIRECT reads go to the device and want more bytes in flight (measured by bench-ingest read). */
#define RAW_CHUNK (256u << 10)
#define RAW_DEPTH 4
#define DIRECT_CHUNK (1u << 20)
#define DIRECT_DEPTH 8
#define OUT_CHUNK (1u << 20)
#define DEFAULT_MAX_LINE (1u << 20)

struct io_stream {
    char *name;
    char err[512];
    io_reader *reader;          /* NULL for memory streams */
    const uint8_t *mem;
    size_t mem_len;
    int mem_done;

    /* raw input not yet decoded */
    const uint8_t *raw;
    size_t raw_len, raw_pos;
    int raw_eof;
    uint64_t raw_offset;        /* compressed bytes consumed before `raw` */

    io_comp comp;
    z_stream z;
    int z_init, z_member_done;
    int pending;                /* decoder stopped on a full output chunk */
    ZSTD_DStream *zs;
    size_t zs_last;             /* last ZSTD_decompressStream result: 0 at a frame end */
    uint8_t *out;               /* decoder output */

    /* current decoded chunk */
    const uint8_t *cur;
    size_t cur_len, cur_pos;
    uint64_t cur_base;          /* decoded offset of cur[0] */
    int eof;

    char *carry;
    size_t carry_len, carry_cap;
    size_t max_line;
    uint64_t lineno;
    int mid_file;               /* the bytes start inside a file (io_stream_mid_file) */
};

static int fail(io_stream *s, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(io_stream *s, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(s->err, sizeof s->err, "%s: ", s->name);
    vsnprintf(s->err + n, sizeof s->err - (size_t)n, fmt, ap);
    va_end(ap);
    return code;
}

/* Next raw chunk into s->raw; 1, 0 at end, <0 error. */
static int raw_next(io_stream *s)
{
    s->raw_offset += s->raw_len;
    s->raw = NULL;
    s->raw_len = s->raw_pos = 0;
    if (s->raw_eof) return 0;
    if (!s->reader) {
        if (s->mem_done || s->mem_len == 0) {
            s->raw_eof = 1;
            return 0;
        }
        s->mem_done = 1;
        s->raw = s->mem;
        s->raw_len = s->mem_len;
        return 1;
    }
    const uint8_t *p;
    ssize_t n = io_reader_next(s->reader, &p);
    if (n < 0)
        return fail(s, (int)n, "read error at byte %llu: %s", (unsigned long long)s->raw_offset,
                    n == -ENODATA ? "the file got shorter while read (it changed during training)" : strerror((int)-n));
    if (n == 0) {
        s->raw_eof = 1;
        return 0;
    }
    s->raw = p;
    s->raw_len = (size_t)n;
    return 1;
}

/* The decoders run until their output chunk is full or the input ends. `pending` records that the
 * last call stopped on a full output, so the decoder may hold more output with no new input. */
static int gzip_chunk(io_stream *s)
{
    s->z.next_out = s->out;
    s->z.avail_out = OUT_CHUNK;
    for (;;) {
        if (s->raw_pos == s->raw_len && !s->pending) {
            int r = raw_next(s);
            if (r < 0) return r;
            if (r == 0) {
                if (!s->z_member_done)
                    return fail(s, -EBADMSG, "truncated gzip data (compressed byte %llu)",
                                (unsigned long long)s->raw_offset);
                break;
            }
        }
        if (s->z_member_done) {
            if (s->raw_pos == s->raw_len) continue;
            inflateReset(&s->z);   /* another gzip member follows */
            s->z_member_done = 0;
        }
        s->z.next_in = (Bytef *)(s->raw + s->raw_pos);
        s->z.avail_in = (uInt)(s->raw_len - s->raw_pos);
        uInt out_before = s->z.avail_out;
        int ret = inflate(&s->z, Z_NO_FLUSH);
        size_t used = (s->raw_len - s->raw_pos) - s->z.avail_in;
        s->raw_pos += used;
        s->pending = s->z.avail_out == 0;
        if (ret == Z_STREAM_END) {
            s->z_member_done = 1;
            s->pending = 0;
        } else if (ret == Z_BUF_ERROR) {
            if (used == 0 && out_before == s->z.avail_out && s->raw_pos < s->raw_len)
                return fail(s, -EBADMSG, "gzip stream stuck near compressed byte %llu",
                            (unsigned long long)(s->raw_offset + s->raw_pos));
            s->pending = 0;
        } else if (ret != Z_OK) {
            return fail(s, -EBADMSG, "gzip data error near compressed byte %llu: %s",
                        (unsigned long long)(s->raw_offset + s->raw_pos),
                        s->z.msg ? s->z.msg : "corrupt stream");
        }
        if (s->z.avail_out == 0) break;
    }
    return (int)(OUT_CHUNK - s->z.avail_out);
}

static int zstd_chunk(io_stream *s)
{
    ZSTD_outBuffer ob = { s->out, OUT_CHUNK, 0 };
    for (;;) {
        if (s->raw_pos == s->raw_len && !s->pending) {
            int r = raw_next(s);
            if (r < 0) return r;
            if (r == 0) {
                if (s->zs_last != 0)
                    return fail(s, -EBADMSG, "truncated zstd data (compressed byte %llu)",
                                (unsigned long long)s->raw_offset);
                break;
            }
        }
        ZSTD_inBuffer ib = { s->raw, s->raw_len, s->raw_pos };
        size_t ret = ZSTD_decompressStream(s->zs, &ob, &ib);
        s->raw_pos = ib.pos;
        if (ZSTD_isError(ret))
            return fail(s, -EBADMSG, "zstd data error near compressed byte %llu: %s",
                        (unsigned long long)(s->raw_offset + s->raw_pos), ZSTD_getErrorName(ret));
        s->zs_last = ret;
        s->pending = ob.pos == ob.size;
        if (ob.pos == ob.size) break;
    }
    return (int)ob.pos;
}

/* Make the next decoded chunk current; 1, 0 at end, <0 error. */
static int next_chunk(io_stream *s)
{
    s->cur_base += s->cur_len;
    s->cur = NULL;
    s->cur_len = s->cur_pos = 0;
    if (s->eof) return 0;
    for (;;) {
        int n;
        if (s->comp == IO_COMP_NONE) {
            if (s->raw_pos < s->raw_len) {   /* bytes left from format detection */
                s->cur = s->raw + s->raw_pos;
                s->cur_len = s->raw_len - s->raw_pos;
                s->raw_pos = s->raw_len;
                return 1;
            }
            n = raw_next(s);
            if (n < 0) return n;
            if (n == 0) {
                s->eof = 1;
                return 0;
            }
            s->cur = s->raw;
            s->cur_len = s->raw_len;
            s->raw_pos = s->raw_len;
            return 1;
        }
        n = s->comp == IO_COMP_GZIP ? gzip_chunk(s) : zstd_chunk(s);
        if (n < 0) return n;
        if (n == 0) {
            s->eof = 1;
            return 0;
        }
        s->cur = s->out;
        s->cur_len = (size_t)n;
        return 1;
    }
}

io_comp io_bytes_compression(const void *data, size_t n)
{
    const uint8_t *p = data;
    if (n >= 2 && p[0] == 0x1f && p[1] == 0x8b) return IO_COMP_GZIP;
    if (n >= 4 && p[0] == 0x28 && p[1] == 0xb5 && p[2] == 0x2f && p[3] == 0xfd) return IO_COMP_ZSTD;
    return IO_COMP_NONE;
}

static int detect(io_stream *s)
{
    int r = raw_next(s);
    if (r < 0) return r;
    io_comp c = io_bytes_compression(s->raw, s->raw_len);
    if (c == IO_COMP_GZIP) {
        s->comp = IO_COMP_GZIP;
        if (inflateInit2(&s->z, 15 + 16) != Z_OK) return fail(s, -ENOMEM, "cannot start zlib");
        s->z_init = 1;
        s->z_member_done = 0;
    } else if (c == IO_COMP_ZSTD) {
        s->comp = IO_COMP_ZSTD;
        s->zs = ZSTD_createDStream();
        if (!s->zs) return fail(s, -ENOMEM, "cannot start zstd");
        ZSTD_initDStream(s->zs);
        s->zs_last = 1;
    }
    if (s->comp != IO_COMP_NONE) s->out = xmalloc(OUT_CHUNK);
    return 0;
}

static io_stream *stream_new(const char *name)
{
    io_stream *s = xcalloc(1, sizeof *s);
    s->name = xstrdup(name);
    s->max_line = DEFAULT_MAX_LINE;
    return s;
}

int io_stream_open(io_stream **out, const char *path, int flags, char *err, size_t errlen)
{
    *out = NULL;
    io_stream *s = stream_new(path);
    int direct = (flags & IO_STREAM_DIRECT) != 0;
    int ret = io_reader_open(&s->reader, path, direct ? IO_READER_DIRECT : 0, direct ? DIRECT_CHUNK : RAW_CHUNK,
                             direct ? DIRECT_DEPTH : RAW_DEPTH);
    if (ret < 0) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(-ret));
        io_stream_close(s);
        return ret;
    }
    ret = detect(s);
    if (ret < 0) {
        snprintf(err, errlen, "%s", s->err);
        io_stream_close(s);
        return ret;
    }
    *out = s;
    return 0;
}

int io_stream_open_mem(io_stream **out, const void *data, size_t len, const char *name)
{
    io_stream *s = stream_new(name);
    s->mem = data;
    s->mem_len = len;
    int ret = detect(s);
    if (ret < 0) {
        io_stream_close(s);
        *out = NULL;
        return ret;
    }
    *out = s;
    return 0;
}

void io_stream_mid_file(io_stream *s) { s->mid_file = 1; }

int io_stream_open_mem_plain(io_stream **out, const void *data, size_t len, const char *name)
{
    io_stream *s = stream_new(name);
    s->mem = data;
    s->mem_len = len;
    int ret = raw_next(s);
    if (ret < 0) {
        io_stream_close(s);
        *out = NULL;
        return ret;
    }
    *out = s;
    return 0;
}

void io_stream_close(io_stream *s)
{
    if (!s) return;
    io_reader_close(s->reader);
    if (s->z_init) inflateEnd(&s->z);
    if (s->zs) ZSTD_freeDStream(s->zs);
    free(s->out);
    free(s->carry);
    free(s->name);
    free(s);
}

void io_stream_set_max_line(io_stream *s, size_t max_line) { s->max_line = max_line ? max_line : 1; }

static void carry_append(io_stream *s, const uint8_t *p, size_t n)
{
    if (s->carry_len + n > s->carry_cap) {
        size_t cap = s->carry_cap ? s->carry_cap : 4096;
        while (cap < s->carry_len + n) cap *= 2;
        s->carry = xrealloc(s->carry, cap);
        s->carry_cap = cap;
    }
    memcpy(s->carry + s->carry_len, p, n);
    s->carry_len += n;
}

static void finish_line(io_stream *s, io_line *line, const char *p, size_t n, int overlong)
{
    /* a UTF-8 byte-order mark before a file's first line (Excel's "CSV UTF-8", PowerShell) is not
     * data: it was read as part of the first column's name ("no label column" under a header that
     * shows one) or of the first row's first token */
    if (s->lineno == 0 && !s->mid_file && n >= 3 && !memcmp(p, "\xEF\xBB\xBF", 3)) p += 3, n -= 3;
    if (n > 0 && p[n - 1] == '\r') n--;
    line->ptr = overlong ? "" : p;
    line->len = overlong ? 0 : n;
    line->overlong = overlong;
    line->lineno = ++s->lineno;
}

int io_stream_next_line(io_stream *s, io_line *line)
{
    int overlong = 0;
    uint64_t skipped = 0;   /* bytes of an overlong line dropped so far */
    s->carry_len = 0;
    for (;;) {
        if (s->cur_pos == s->cur_len) {
            int r = next_chunk(s);
            if (r < 0) return r;
            if (r == 0) {
                if (s->carry_len == 0 && !overlong) return 0;
                finish_line(s, line, s->carry, s->carry_len, overlong);   /* no final '\n' */
                return 1;
            }
        }
        const uint8_t *start = s->cur + s->cur_pos;
        size_t avail = s->cur_len - s->cur_pos;
        const uint8_t *nl = memchr(start, '\n', avail);
        size_t n = nl ? (size_t)(nl - start) : avail;
        s->cur_pos += nl ? n + 1 : n;
        if (!overlong && s->carry_len + n > s->max_line + 1) {   /* +1: room for a '\r' */
            overlong = 1;
            s->carry_len = 0;
        }
        /* an input with no line end at all (binary data, /dev/zero) would be read to its end, or
         * forever: past 64 times the longest line it is not a text log */
        if (overlong && (skipped += n) > (uint64_t)s->max_line * 64 && !nl)
            return fail(s, -EINVAL, "line %llu has no end within %llu bytes (at byte %llu): not a text log",
                        (unsigned long long)s->lineno + 1, (unsigned long long)skipped,
                        (unsigned long long)io_stream_offset(s));
        if (nl && s->carry_len == 0 && !overlong) {
            finish_line(s, line, (const char *)start, n, 0);
            return 1;
        }
        if (!overlong) carry_append(s, start, n);
        if (nl) {
            finish_line(s, line, s->carry, s->carry_len, overlong);
            return 1;
        }
    }
}

ssize_t io_stream_read(io_stream *s, void *dst, size_t n)
{
    size_t done = 0;
    uint8_t *d = dst;
    while (done < n) {
        if (s->cur_pos == s->cur_len) {
            int r = next_chunk(s);
            if (r < 0) return r;
            if (r == 0) break;
        }
        size_t k = s->cur_len - s->cur_pos;
        if (k > n - done) k = n - done;
        memcpy(d + done, s->cur + s->cur_pos, k);
        s->cur_pos += k;
        done += k;
    }
    return (ssize_t)done;
}

uint64_t io_stream_offset(const io_stream *s) { return s->cur_base + s->cur_pos; }

int io_stream_eof(io_stream *s)
{
    if (s->cur_pos < s->cur_len) return 0;
    int r = next_chunk(s);
    return r <= 0;
}

const char *io_stream_name(const io_stream *s) { return s->name; }
const char *io_stream_error(const io_stream *s) { return s->err; }
io_comp io_stream_compression(const io_stream *s) { return s->comp; }
int io_stream_is_direct(const io_stream *s) { return s->reader && io_reader_is_direct(s->reader); }

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

const char *io_input_path(const char *arg) { return strcmp(arg, "-") ? arg : "/dev/stdin"; }

int io_output_is_input(const char *out, char *const *inputs, int n, char *which, size_t len)
{
    struct stat os;
    if (stat(out, &os) < 0 || !S_ISREG(os.st_mode)) return 0;   /* new, or a stream */
    char **files, err[512];
    int k = io_expand_paths(inputs, n, &files, err, sizeof err), hit = 0;
    for (int i = 0; i < k && !hit; i++)
        if (util_same_file(files[i], &os)) {
            snprintf(which, len, "%s", files[i]);
            hit = 1;
        }
    if (k > 0) io_free_paths(files, k);
    return hit;
}

int io_output_in_input_folder(const char *out, char *const *inputs, int n, char *which, size_t len)
{
    const char *slash = strrchr(out, '/'), *base = slash ? slash + 1 : out;
    if (base[0] == '.' || base[0] == '_' || !base[0]) return 0;   /* a listing passes over these */
    char *dir = slash ? strndup(out, (size_t)(slash - out) + (slash == out)) : strdup(".");
    struct stat ds;
    int hit = 0;
    if (dir && stat(dir, &ds) == 0 && S_ISDIR(ds.st_mode))
        for (int i = 0; i < n && !hit; i++)
            if (util_same_file(io_input_path(inputs[i]), &ds)) {
                snprintf(which, len, "%s", inputs[i]);
                hit = 1;
            }
    free(dir);
    return hit;
}

int io_expand_paths(char *const *paths, int n, char ***out, char *err, size_t errlen)
{
    int cnt = 0, cap = 16;
    char **v = xmalloc((size_t)cap * sizeof *v);
    for (int i = 0; i < n; i++) {
        struct stat st;
        const char *path = io_input_path(paths[i]);
        int fd = util_own_fd(paths[i], 1);
        if (util_std_closed(fd)) {
            /* it reads as /dev/null now: an empty input, not the data meant */
            snprintf(err, errlen, "%s: %s was closed when the program started", paths[i],
                     fd == 0 ? "standard input" : "that descriptor");
            io_free_paths(v, cnt);
            return -EBADF;
        }
        if (stat(path, &st) < 0) {
            int e = errno;
            snprintf(err, errlen, "%s: %s", path, strerror(e));
            io_free_paths(v, cnt);
            return -e;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (cnt == cap) v = xrealloc(v, (size_t)(cap *= 2) * sizeof *v);
            v[cnt++] = xstrdup(path);
            continue;
        }
        DIR *d = opendir(path);
        if (!d) {
            int e = errno;
            snprintf(err, errlen, "%s: %s", path, strerror(e));
            io_free_paths(v, cnt);
            return -e;
        }
        int first = cnt;
        struct dirent *de;
        while ((de = readdir(d))) {
            if (de->d_name[0] == '.' || de->d_name[0] == '_') continue;   /* hidden; _SUCCESS, _logs (Hadoop, Spark) */
            size_t len = strlen(path) + strlen(de->d_name) + 2;
            char *p = xmalloc(len);
            snprintf(p, len, "%s/%s", path, de->d_name);
            struct stat ls;
            int sr = stat(p, &st), e = errno;
            if (sr < 0 && lstat(p, &ls) == 0 && S_ISLNK(ls.st_mode)) {
                /* a link whose file is gone: its rows were left out without a word */
                char to[512];
                ssize_t k = readlink(p, to, sizeof to - 1);
                to[k > 0 ? k : 0] = 0;
                snprintf(err, errlen, "%s: a link to %s, which cannot be read (%s): its data would be left out; restore it "
                         "or remove the link", p, to, strerror(e));
                free(p);
                closedir(d);
                io_free_paths(v, cnt);
                return -e;
            }
            if (sr < 0 || !S_ISREG(st.st_mode)) {   /* gone since the listing; a folder, a pipe */
                free(p);
                continue;
            }
            if (cnt == cap) v = xrealloc(v, (size_t)(cap *= 2) * sizeof *v);
            v[cnt++] = p;
        }
        closedir(d);
        qsort(v + first, (size_t)(cnt - first), sizeof *v, cmp_str);
    }
    if (cnt == 0) {
        snprintf(err, errlen, "no input files");
        free(v);
        return -ENOENT;
    }
    *out = v;
    return cnt;
}

void io_free_paths(char **paths, int n)
{
    for (int i = 0; i < n; i++) free(paths[i]);
    free(paths);
}

int io_file_digest(const char *path, uint64_t *out, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        if (fd >= 0) close(fd);
        return -e;
    }
    enum { EDGE = 64 << 10, BLOCK = 4 << 10, INNER = 14 };
    uint64_t size = (uint64_t)st.st_size;
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, 0);
    XXH64_update(h, &size, sizeof size);
    char *buf = xmalloc(EDGE);
    int ret = 0;
    for (int i = 0; i < INNER + 2 && ret == 0; i++) {
        uint64_t off = i == 0 ? 0 : i == INNER + 1 ? (size > EDGE ? size - EDGE : 0) : size * (uint64_t)i / (INNER + 1);
        size_t want = i == 0 || i == INNER + 1 ? EDGE : BLOCK;
        if (off >= size) continue;
        if (want > size - off) want = (size_t)(size - off);
        ssize_t got = pread(fd, buf, want, (off_t)off);
        if (got != (ssize_t)want) {
            ret = got < 0 ? -errno : -EIO;
            snprintf(err, errlen, "%s: reading at byte %llu: %s", path, (unsigned long long)off,
                     got < 0 ? strerror(errno) : "the file shrank while read");
            break;
        }
        XXH64_update(h, buf, want);
    }
    *out = XXH64_digest(h);
    XXH64_freeState(h);
    free(buf);
    close(fd);
    return ret;
}

int io_files_digest(char *const *paths, int n, uint64_t *out, char *err, size_t errlen)
{
    char **all;
    int m = io_expand_paths(paths, n, &all, err, errlen);
    if (m < 0) return m;
    uint64_t h = XXH64(&m, sizeof m, 0);
    int ret = 0;
    for (int i = 0; i < m && ret == 0; i++) {
        uint64_t d;
        ret = io_file_digest(all[i], &d, err, errlen);
        h = XXH64(&d, sizeof d, h);
    }
    io_free_paths(all, m);
    *out = h;
    return ret;
}
