/*
 * test_stream.c: the byte path: plain, gzip (one and several members) and zstd inputs give the same
 * lines; CRLF; lines across chunk boundaries; overlong lines; truncated and corrupt compressed data;
 * folders as inputs; the io_uring reader with and without O_DIRECT.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../io/reader.h"
#include "../io/stream.h"
#include "helpers.h"

TestSuite(stream, .fini = th_cleanup);

/* Text of n lines of varying length (some long enough to cross 1 MiB chunks many times). */
static char *make_text(size_t n, int crlf, size_t *len)
{
    size_t cap = 1 << 20, k = 0;
    char *t = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        size_t w = (i * 7919) % 300 + (i % 1000 == 0 ? 5000 : 0);
        if (k + w + 64 > cap) t = realloc(t, cap = cap * 2 + w);
        k += (size_t)sprintf(t + k, "%zu:", i);
        for (size_t j = 0; j < w; j++) t[k++] = (char)('a' + (i + j) % 26);
        if (crlf) t[k++] = '\r';
        t[k++] = '\n';
    }
    *len = k;
    return t;
}

/* Read every line of path and check line i starts with "i:" and has the right length. */
static void check_lines(const char *path, size_t n)
{
    char err[512];
    io_stream *s;
    cr_assert_eq(io_stream_open(&s, path, 0, err, sizeof err), 0, "%s", err);
    io_line line;
    size_t i = 0;
    int r;
    while ((r = io_stream_next_line(s, &line)) > 0) {
        char want[32];
        int k = sprintf(want, "%zu:", i);
        size_t w = (i * 7919) % 300 + (i % 1000 == 0 ? 5000 : 0);
        cr_assert_eq(line.len, (size_t)k + w, "line %zu: length %zu, want %zu", i, line.len, (size_t)k + w);
        cr_assert(memcmp(line.ptr, want, (size_t)k) == 0, "line %zu", i);
        cr_assert_eq(line.lineno, i + 1);
        i++;
    }
    cr_assert_eq(r, 0, "%s", io_stream_error(s));
    cr_assert_eq(i, n);
    io_stream_close(s);
}

Test(stream, plain_gzip_zstd_crlf)
{
    size_t n = 30000, len;
    for (int crlf = 0; crlf < 2; crlf++) {
        char *t = make_text(n, crlf, &len);
        cr_assert_gt(len, 3u << 20, "the text must span several chunks");
        th_write(th_path("plain"), t, len);
        th_write_gzip(th_path("gz"), t, len);
        th_write_zstd(th_path("zst"), t, len);
        check_lines(th_path("plain"), n);
        check_lines(th_path("gz"), n);
        check_lines(th_path("zst"), n);
        free(t);
    }
}

Test(stream, gzip_members_concatenated)
{
    size_t len;
    char *t = make_text(2000, 0, &len);
    size_t half = 0;
    for (size_t i = 0; i < 1000; i++) half = (size_t)((char *)memchr(t + half, '\n', len - half) - t) + 1;
    th_write_gzip(th_path("a.gz"), t, half);
    th_write_gzip(th_path("b.gz"), t + half, len - half);
    size_t la, lb;
    char *a = th_read(th_path("a.gz"), &la), *b = th_read(th_path("b.gz"), &lb);
    char *ab = malloc(la + lb);
    memcpy(ab, a, la);
    memcpy(ab + la, b, lb);
    th_write(th_path("ab.gz"), ab, la + lb);
    check_lines(th_path("ab.gz"), 2000);
    free(a), free(b), free(ab), free(t);
}

Test(stream, truncated_and_corrupt_compressed)
{
    size_t len;
    char *t = make_text(5000, 0, &len);
    const char *names[] = { "t.gz", "t.zst" };
    for (int k = 0; k < 2; k++) {
        if (k == 0) th_write_gzip(th_path(names[k]), t, len);
        else th_write_zstd(th_path(names[k]), t, len);
        size_t cl;
        char *c = th_read(th_path(names[k]), &cl);
        for (int mode = 0; mode < 2; mode++) {
            if (mode == 0) th_write(th_path("bad"), c, cl / 2);            /* truncated */
            else {                                                          /* a flipped byte */
                c[cl / 2] ^= 0x5a;
                th_write(th_path("bad"), c, cl);
            }
            char err[512];
            io_stream *s;
            cr_assert_eq(io_stream_open(&s, th_path("bad"), 0, err, sizeof err), 0);
            io_line line;
            int r;
            while ((r = io_stream_next_line(s, &line)) > 0) {}
            cr_assert_lt(r, 0, "%s mode %d: corrupt data must be an error", names[k], mode);
            cr_assert(strstr(io_stream_error(s), th_path("bad")) != NULL, "error names the file: %s", io_stream_error(s));
            io_stream_close(s);
        }
        free(c);
    }
    free(t);
}

Test(stream, overlong_and_no_final_newline)
{
    char *t = malloc(10000);
    memset(t, 'x', 10000);
    memcpy(t, "short\n", 6);
    t[5000] = '\n';
    memcpy(t + 9990, "\nlast\r", 6);
    th_write(th_path("f"), t, 9996);
    char err[256];
    io_stream *s;
    cr_assert_eq(io_stream_open(&s, th_path("f"), 0, err, sizeof err), 0);
    io_stream_set_max_line(s, 1000);
    io_line l;
    cr_assert_eq(io_stream_next_line(s, &l), 1);
    cr_assert_eq(l.len, 5);
    cr_assert_eq(io_stream_next_line(s, &l), 1);
    cr_assert(l.overlong);
    cr_assert_eq(io_stream_next_line(s, &l), 1);
    cr_assert(l.overlong);
    cr_assert_eq(l.lineno, 3);
    cr_assert_eq(io_stream_next_line(s, &l), 1);
    cr_assert(!l.overlong);
    cr_assert_eq(l.len, 4, "the CR of the last line is dropped too");
    cr_assert(memcmp(l.ptr, "last", 4) == 0);
    cr_assert_eq(io_stream_next_line(s, &l), 0);
    io_stream_close(s);
    free(t);
}

Test(stream, reader_direct_and_buffered)
{
    size_t len = (5u << 20) + 123;
    unsigned char *d = malloc(len);
    for (size_t i = 0; i < len; i++) d[i] = (unsigned char)(i * 2654435761u >> 13);
    th_write(th_path("bin"), d, len);
    for (int flags = 0; flags <= IO_READER_DIRECT; flags++) {
        io_reader *r;
        cr_assert_eq(io_reader_open(&r, th_path("bin"), flags, 1 << 20, 3), 0);
        size_t off = 0;
        const uint8_t *p;
        ssize_t n;
        while ((n = io_reader_next(r, &p)) > 0) {
            cr_assert_leq(off + (size_t)n, len);
            cr_assert(memcmp(p, d + off, (size_t)n) == 0, "bytes at %zu", off);
            off += (size_t)n;
        }
        cr_assert_eq(n, 0);
        cr_assert_eq(off, len);
        io_reader_close(r);
    }
    io_reader *r;
    cr_assert_lt(io_reader_open(&r, th_path("missing"), 0, 4096, 2), 0);
    free(d);
}

Test(stream, folder_expands_sorted)
{
    th_write_str(th_path("b"), "x");
    char dir[512];
    snprintf(dir, sizeof dir, "%s", th_path("d"));
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && touch %s/2.txt %s/1.txt %s/.hidden", dir, dir, dir, dir);
    cr_assert_eq(system(cmd), 0);
    char *in[] = { dir, (char *)th_path("b") };
    char **out, err[256];
    int n = io_expand_paths(in, 2, &out, err, sizeof err);
    cr_assert_eq(n, 3);
    cr_assert(strstr(out[0], "/1.txt"));
    cr_assert(strstr(out[1], "/2.txt"));
    cr_assert(strstr(out[2], "/b"));
    io_free_paths(out, n);
    char *missing[] = { (char *)th_path("nope") };
    cr_assert_lt(io_expand_paths(missing, 1, &out, err, sizeof err), 0);
    cr_assert(strstr(err, "nope"));
}
