/*
 * bench_tier.c: prefetch rate of the SSD tier.
 *
 *   bench-tier build DIR ROWS      a tier of ROWS rows of a DeepFM table (dim 16, Adam: 240-byte
 *                                  records in 512-byte slots), committed 1M rows at a time
 *   bench-tier fetch DIR SECONDS   fetch random keys (batches of 64k, sorted as the trainer's fetch
 *                                  thread sorts them) for about SECONDS; prints rows/s and the CPU
 *                                  it cost (cores). BENCH_TIER_UNSORTED=1 leaves them unsorted.
 * Output: one JSON line each.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "../embedding/table.h"
#include "../embedding/tier.h"
#include "../io/mix.h"
#include "../io/util.h"

static emb_table_config config(void)
{
    emb_table_config c = { 16, 1, { 0 }, 0.01f, 0, 1, 0, 0 };
    sparse_opt_default(&c.opt, SOPT_ADAM);
    return c;
}

static uint64_t key_of(uint64_t i) { return mix64(i * 2 + 1); }

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[1], "build") && strcmp(argv[1], "fetch"))) {
        fprintf(stderr, "usage: bench-tier build DIR ROWS | fetch DIR SECONDS\n");
        return 2;
    }
    emb_table_config c = config();
    emb_table *probe = emb_table_create(&c);
    size_t rb = emb_table_row_bytes(probe);
    emb_table_destroy(probe);
    char err[1024];
    emb_tier *tier;
    if (emb_tier_open(&tier, argv[2], 1, &rb, "bench", 0, 256u << 20, err, sizeof err) < 0) die("%s", err);
    if (!strcmp(argv[1], "build")) {
        uint64_t rows = strtoull(argv[3], NULL, 10);
        double t0 = now_sec();
        for (uint64_t i = 0; i < rows; i += 1000000) {
            emb_table *t = emb_table_create(&c);
            emb_tier_batch *b = emb_tier_begin(tier);
            uint64_t n = rows - i < 1000000 ? rows - i : 1000000;
            for (uint64_t j = 0; j < n; j++) emb_tier_put(b, 0, emb_table_head(t, emb_table_get(t, key_of(i + j))));
            char blob[16];
            snprintf(blob, sizeof blob, "%llu", (unsigned long long)(i + n));
            if (emb_tier_commit(b, blob, strlen(blob), err, sizeof err) < 0) die("%s", err);
            emb_table_destroy(t);
        }
        printf("{\"build_rows\": %llu, \"seconds\": %.1f, \"disk_bytes\": %llu}\n", (unsigned long long)rows,
               now_sec() - t0, (unsigned long long)emb_tier_disk_bytes(tier));
    } else {
        uint64_t rows = emb_tier_rows(tier, 0);
        if (rows == 0) die("%s: empty; run build first", argv[2]);
        double secs = atof(argv[3]);
        int sorted = !getenv("BENCH_TIER_UNSORTED");
        enum { BATCH = 65536 };
        uint64_t *keys = xmalloc(BATCH * sizeof *keys), *aux = xmalloc(BATCH * sizeof *aux), s = 12345, done = 0;
        uint8_t *out = xmalloc(BATCH * rb);
        double c0 = cpu_sec(), t0 = now_sec();
        while (now_sec() - t0 < secs) {
            for (int i = 0; i < BATCH; i++) keys[i] = key_of(splitmix64(&s) % rows);
            if (sorted) sort_u64(keys, BATCH);   /* as the trainer's fetch thread does */
            if (emb_tier_fetch(tier, 0, keys, BATCH, out, aux, err, sizeof err) < 0) die("%s", err);
            for (int i = 0; i < BATCH; i++)
                if (!aux[i]) die("key %llu not found", (unsigned long long)keys[i]);
            done += BATCH;
        }
        double t = now_sec() - t0, cpu = cpu_sec() - c0;
        emb_tier_stats st = emb_tier_get_stats(tier);   /* reads issued (one may serve several rows), rows the slot map located */
        printf("{\"rows\": %llu, \"fetched\": %llu, \"rows_per_s\": %.0f, \"reads_per_s\": %.0f, \"slot_map_hits\": %.3f, "
               "\"cpu_cores\": %.3f, \"seconds\": %.2f}\n",
               (unsigned long long)rows, (unsigned long long)done, (double)done / t, (double)st.reads / t,
               (double)(st.map_hits - st.map_wrong) / (double)(done ? done : 1), cpu / t, t);
        free(keys), free(aux), free(out);
    }
    emb_tier_close(tier);
    return 0;
}
