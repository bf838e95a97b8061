/*
 * bench_layout.c: the two SSD-tier layouts of issue 4, measured on this machine's disk.
 *
 *   bench-layout build DIR ROWS ROWBYTES    write both layouts of ROWS random keys:
 *                                           DIR/rows.db  RocksDB, key -> row
 *                                           DIR/index.db RocksDB, key -> slot; DIR/slots fixed slots
 *   bench-layout rocksdb DIR SECONDS THREADS  random multi_get of rows (direct reads, 64 MB cache)
 *   bench-layout slots DIR SECONDS DEPTH      random key -> slot multi_get, then io_uring O_DIRECT
 *                                             reads of the slots, DEPTH in flight
 * Each prints one JSON line: rows/s and CPU seconds per wall second (user + system, whole process).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <rocksdb/c.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../io/mix.h"
#include "../io/util.h"

#define BATCH 64

static void key_of(uint64_t i, char out[8])
{
    uint64_t k = mix64(i + 1);
    for (int b = 0; b < 8; b++) out[b] = (char)(k >> (56 - 8 * b));
}

static rocksdb_t *open_db(const char *path, int create, int direct)
{
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(o, create);
    rocksdb_options_set_use_direct_reads(o, (unsigned char)direct);
    rocksdb_options_increase_parallelism(o, 2);
    rocksdb_block_based_table_options_t *t = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_block_cache(t, rocksdb_cache_create_lru((size_t)atoi(getenv("CACHE_MB") ? getenv("CACHE_MB") : "64") << 20));
    rocksdb_block_based_options_set_filter_policy(t, rocksdb_filterpolicy_create_bloom_full(10));
    rocksdb_options_set_block_based_table_factory(o, t);
    char *err = NULL;
    rocksdb_t *db = rocksdb_open(o, path, &err);
    if (err) die("%s: %s", path, err);
    return db;
}

static void build(const char *dir, uint64_t rows, size_t rowbytes)
{
    mkdir(dir, 0755);
    char p1[4096], p2[4096], p3[4096];
    snprintf(p1, sizeof p1, "%s/rows.db", dir);
    snprintf(p2, sizeof p2, "%s/index.db", dir);
    snprintf(p3, sizeof p3, "%s/slots", dir);
    size_t slot = (rowbytes + 511) / 512 * 512;
    rocksdb_t *a = open_db(p1, 1, 0), *b = open_db(p2, 1, 0);
    int fd = open(p3, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("%s: %s", p3, strerror(errno));
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_disable_WAL(wo, 1);
    char *row = xcalloc(1, slot), *buf = xmalloc(slot * 4096);
    char *err = NULL;
    for (uint64_t i = 0; i < rows; i += 4096) {
        rocksdb_writebatch_t *wa = rocksdb_writebatch_create(), *wb = rocksdb_writebatch_create();
        uint64_t n = rows - i < 4096 ? rows - i : 4096;
        for (uint64_t j = 0; j < n; j++) {
            char k[8];
            key_of(i + j, k);
            uint64_t s = i + j;
            uint64_t r = s * 7919 + 1;
            for (size_t w = 0; w + 8 <= rowbytes; w += 8) {
                uint64_t v = splitmix64(&r);
                memcpy(row + w, &v, 8);        /* trained rows are floats: incompressible */
            }
            memcpy(row, k, 8);
            rocksdb_writebatch_put(wa, k, 8, row, rowbytes);
            rocksdb_writebatch_put(wb, k, 8, (const char *)&s, 8);
            memcpy(buf + j * slot, row, slot);
        }
        rocksdb_write(a, wo, wa, &err);
        if (!err) rocksdb_write(b, wo, wb, &err);
        if (err) die("build: %s", err);
        rocksdb_writebatch_destroy(wa);
        rocksdb_writebatch_destroy(wb);
        if (write(fd, buf, slot * n) != (ssize_t)(slot * n)) die("%s: short write", p3);
    }
    rocksdb_compact_range(a, NULL, 0, NULL, 0);
    rocksdb_compact_range(b, NULL, 0, NULL, 0);
    fsync(fd);
    close(fd);
    rocksdb_close(a);
    rocksdb_close(b);
    FILE *f = fopen(strcat(p3, ".meta"), "w");
    fprintf(f, "%llu %zu\n", (unsigned long long)rows, rowbytes);
    fclose(f);
    free(row);
    free(buf);
}

static void read_meta(const char *dir, uint64_t *rows, size_t *rowbytes)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/slots.meta", dir);
    FILE *f = fopen(p, "r");
    unsigned long long r;
    if (!f || fscanf(f, "%llu %zu", &r, rowbytes) != 2) die("%s: run build first", p);
    fclose(f);
    *rows = r;
}

typedef struct {
    rocksdb_t *db;
    uint64_t rows;
    double until;
    atomic_ullong *done;
    int id;
} rd_arg;

static void multi_get(rocksdb_t *db, const rocksdb_readoptions_t *ro, uint64_t rows, uint64_t *rng, char *vals[BATCH],
                      size_t vsz[BATCH])
{
    char keys[BATCH][8];
    const char *kp[BATCH];
    size_t ks[BATCH];
    char *errs[BATCH];
    for (int j = 0; j < BATCH; j++) {
        key_of(splitmix64(rng) % rows, keys[j]);
        kp[j] = keys[j];
        ks[j] = 8;
    }
    rocksdb_multi_get(db, ro, BATCH, kp, ks, vals, vsz, errs);
    for (int j = 0; j < BATCH; j++) {
        if (errs[j] || !vals[j]) die("multi_get: %s", errs[j] ? errs[j] : "key not found");
    }
}

static void *rd_thread(void *p)
{
    rd_arg *a = p;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    uint64_t rng = 1234567 + (uint64_t)a->id;
    while (now_sec() < a->until) {
        char *vals[BATCH];
        size_t vsz[BATCH];
        multi_get(a->db, ro, a->rows, &rng, vals, vsz);
        for (int j = 0; j < BATCH; j++) free(vals[j]);
        atomic_fetch_add(a->done, BATCH);
    }
    rocksdb_readoptions_destroy(ro);
    return NULL;
}

static void bench_rocksdb(const char *dir, double secs, int threads)
{
    uint64_t rows;
    size_t rowbytes;
    read_meta(dir, &rows, &rowbytes);
    char p[4096];
    snprintf(p, sizeof p, "%s/rows.db", dir);
    rocksdb_t *db = open_db(p, 0, 1);
    atomic_ullong done = 0;
    pthread_t th[256];
    rd_arg args[256];
    double c0 = cpu_sec(), t0 = now_sec();
    for (int i = 0; i < threads; i++) {
        args[i] = (rd_arg){db, rows, t0 + secs, &done, i};
        pthread_create(&th[i], NULL, rd_thread, &args[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    double t = now_sec() - t0, c = cpu_sec() - c0;
    printf("{\"layout\":\"rocksdb\",\"threads\":%d,\"rows\":%llu,\"row_bytes\":%zu,\"rows_per_s\":%.0f,\"cpu_cores\":%.2f}\n",
           threads, (unsigned long long)rows, rowbytes, done / t, c / t);
    rocksdb_close(db);
}

static void bench_slots(const char *dir, double secs, int depth)
{
    uint64_t rows;
    size_t rowbytes;
    read_meta(dir, &rows, &rowbytes);
    size_t slot = (rowbytes + 511) / 512 * 512;
    char p[4096];
    snprintf(p, sizeof p, "%s/index.db", dir);
    rocksdb_t *db = open_db(p, 0, 0);     /* the small index reads through the page cache */
    snprintf(p, sizeof p, "%s/slots", dir);
    int fd = open(p, O_RDONLY | O_DIRECT);
    if (fd < 0) die("%s: %s", p, strerror(errno));
    struct io_uring ring;
    if (io_uring_queue_init((unsigned)depth * 2, &ring, 0)) die("io_uring_queue_init");
    uint8_t *bufs;
    if (posix_memalign((void **)&bufs, 4096, slot * (size_t)depth)) die("posix_memalign");
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    uint64_t rng = 99, done = 0;
    int inflight = 0, free_n = depth;
    int *free_bufs = xmalloc(sizeof(int) * (size_t)depth);
    for (int i = 0; i < depth; i++) free_bufs[i] = i;
    uint64_t pending[BATCH];
    int npending = 0;
    double c0 = cpu_sec(), t0 = now_sec(), until = t0 + secs;
    while (now_sec() < until) {
        if (npending == 0) {
            /* index lookups for the next batch while reads are in flight */
            char *vals[BATCH];
            size_t vsz[BATCH];
            multi_get(db, ro, rows, &rng, vals, vsz);
            for (int j = 0; j < BATCH; j++) {
                memcpy(&pending[j], vals[j], 8);
                free(vals[j]);
            }
            npending = BATCH;
        }
        while (npending > 0 && free_n > 0) {
            int b = free_bufs[--free_n];
            struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
            io_uring_prep_read(sqe, fd, bufs + (size_t)b * slot, (unsigned)slot, pending[--npending] * slot);
            io_uring_sqe_set_data64(sqe, (uint64_t)b);
            inflight++;
        }
        io_uring_submit(&ring);
        struct io_uring_cqe *cqe;
        unsigned head, n = 0;
        if (inflight > 0 && npending > 0 && free_n == 0) io_uring_wait_cqe(&ring, &cqe);
        io_uring_for_each_cqe(&ring, head, cqe) {
            if (cqe->res != (int)slot) die("slot read: %d", cqe->res);
            free_bufs[free_n++] = (int)cqe->user_data;
            n++;
        }
        io_uring_cq_advance(&ring, n);
        inflight -= (int)n;
        done += n;
    }
    double t = now_sec() - t0, c = cpu_sec() - c0;
    printf("{\"layout\":\"slots\",\"depth\":%d,\"rows\":%llu,\"row_bytes\":%zu,\"slot_bytes\":%zu,\"rows_per_s\":%.0f,\"cpu_cores\":%.2f}\n",
           depth, (unsigned long long)rows, rowbytes, slot, done / t, c / t);
    rocksdb_close(db);
    close(fd);
    free(bufs);
    free(free_bufs);
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "build")) build(argv[2], strtoull(argv[3], NULL, 10), strtoul(argv[4], NULL, 10));
    else if (argc == 5 && !strcmp(argv[1], "rocksdb")) bench_rocksdb(argv[2], atof(argv[3]), atoi(argv[4]));
    else if (argc == 5 && !strcmp(argv[1], "slots")) bench_slots(argv[2], atof(argv[3]), atoi(argv[4]));
    else {
        fprintf(stderr, "usage: bench-layout build DIR ROWS ROWBYTES | rocksdb DIR SECONDS THREADS | slots DIR SECONDS DEPTH\n");
        return 2;
    }
    return 0;
}
