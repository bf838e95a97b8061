/*
 * bench_ingest.c: timings for the ingestion benchmark (bench/bench_ingest.sh runs it beside its
 * references). One line of JSON per run on stdout.
 *   parse --format F FILE...   text -> parse + hash into blocks, one thread: rows/s, MB/s
 *   read [--direct] FILE       io_uring reader vs plain read() over the same file: MB/s each
 *   cbx FILE                   binary-format read (io_uring, O_DIRECT, checksums): rows/s, MB/s
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../datasets/source.h"
#include "../io/reader.h"
#include "../io/util.h"

static uint64_t file_bytes(char *const *paths, int n)
{
    uint64_t t = 0;
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(paths[i], &st) == 0) t += (uint64_t)st.st_size;
    }
    return t;
}

static int run_source(data_format fmt, char *const *paths, int n, const char *what)
{
    source_opts o;
    source_opts_default(&o);
    o.fmt = fmt;
    data_source *s;
    char err[1024];
    double t0 = now_sec(), c0 = cpu_sec();
    if (source_open(&s, paths, n, &o, err, sizeof err) < 0) die("%s", err);
    sample_block b;
    block_init(&b, source_schema(s)->n_dense);
    uint64_t rows = 0, nnz = 0;
    int ret;
    while ((ret = source_next(s, &b, err, sizeof err)) > 0) {
        rows += b.rows;
        nnz += b.nnz;
    }
    if (ret < 0) die("%s", err);
    double dt = now_sec() - t0, cpu = cpu_sec() - c0;
    uint64_t bytes = file_bytes(paths, n);
    printf("{\"what\": \"%s\", \"rows\": %llu, \"keys\": %llu, \"bytes\": %llu, \"seconds\": %.4f, "
           "\"cpu_seconds\": %.4f, \"rows_per_s\": %.0f, \"mb_per_s\": %.1f, \"direct\": %s}\n",
           what, (unsigned long long)rows, (unsigned long long)nnz, (unsigned long long)bytes, dt, cpu,
           (double)rows / dt, (double)bytes / dt / 1e6, source_is_direct(s) ? "true" : "false");
    block_free(&b);
    source_close(s);
    return 0;
}

static int run_read(const char *path, int direct)
{
    /* io_uring reader */
    io_reader *r;
    double t0 = now_sec();
    int ret = io_reader_open(&r, path, direct ? IO_READER_DIRECT : 0, 1 << 20, 8);
    if (ret < 0) die("%s: %s", path, strerror(-ret));
    const uint8_t *p;
    ssize_t n;
    uint64_t total = 0, sum = 0;
    while ((n = io_reader_next(r, &p)) > 0) {
        total += (uint64_t)n;
        sum += p[0];
    }
    if (n < 0) die("%s: %s", path, strerror((int)-n));
    int is_direct = io_reader_is_direct(r);
    io_reader_close(r);
    double t_uring = now_sec() - t0;
    /* plain read() of the same size chunks, same open flags */
    int fd = open(path, O_RDONLY | (is_direct ? O_DIRECT : 0));
    if (fd < 0) die("%s: %s", path, strerror(errno));
    uint8_t *buf = xaligned_alloc(4096, 1 << 20);
    t0 = now_sec();
    uint64_t total2 = 0;
    while ((n = read(fd, buf, 1 << 20)) > 0) {
        total2 += (uint64_t)n;
        sum += buf[0];
    }
    double t_read = now_sec() - t0;
    close(fd);
    free(buf);
    if (total != total2) die("reader and read() disagree: %llu vs %llu bytes", (unsigned long long)total,
                             (unsigned long long)total2);
    printf("{\"what\": \"read\", \"direct\": %s, \"bytes\": %llu, \"uring_mb_per_s\": %.1f, "
           "\"read_mb_per_s\": %.1f, \"checksum\": %llu}\n",
           is_direct ? "true" : "false", (unsigned long long)total, (double)total / t_uring / 1e6,
           (double)total / t_read / 1e6, (unsigned long long)(sum & 1));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench-ingest parse --format F FILE... | read [--direct] FILE | cbx FILE\n");
        return 2;
    }
    if (!strcmp(argv[1], "parse") && argc >= 5 && !strcmp(argv[2], "--format")) {
        data_format f = parse_format_from_name(argv[3]);
        if (f == FMT_NONE || f == FMT_CBX) die("parse: want a text format");
        return run_source(f, argv + 4, argc - 4, "parse");
    }
    if (!strcmp(argv[1], "read")) {
        int direct = argc >= 4 && !strcmp(argv[2], "--direct");
        return run_read(argv[direct ? 3 : 2], direct);
    }
    if (!strcmp(argv[1], "cbx")) return run_source(FMT_CBX, argv + 2, argc - 2, "cbx");
    die("unknown mode %s", argv[1]);
}
