/*
 * fieldstats.c: exact-then-HyperLogLog distinct counting per field.
 *
 * The exact set is a key_map (io/keymap.h) until exact_limit keys. HyperLogLog: register index from the top 14 bits of a remixed key, rank
 * from the rest; estimate with the standard bias correction and linear counting for small sets.
 */
#include "fieldstats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../io/keymap.h"
#include "../io/mix.h"
#include "../io/util.h"

#define HLL_P 14
#define HLL_M (1u << HLL_P)

typedef struct {
    key_map set;            /* the distinct keys, until the field goes approximate */
    int approx;
    uint8_t *hll;           /* (HLL_M) */
    uint64_t rows_present, keys;
    uint64_t last_row;      /* row id + 1 of the last row counted in rows_present */
} field;

struct field_stats {
    field *f;
    uint32_t n;
    size_t exact_limit;
    uint64_t rows_seen;
};

static void field_init(field *f)
{
    memset(f, 0, sizeof *f);
    key_map_init(&f->set, 1024);
    f->hll = xcalloc(HLL_M, 1);
}

field_stats *field_stats_create(uint32_t n_fields, size_t exact_limit)
{
    field_stats *fs = xcalloc(1, sizeof *fs);
    fs->exact_limit = exact_limit ? exact_limit : 1;
    fs->n = n_fields;
    fs->f = xcalloc(n_fields ? n_fields : 1, sizeof *fs->f);
    for (uint32_t i = 0; i < n_fields; i++) field_init(&fs->f[i]);
    return fs;
}

void field_stats_destroy(field_stats *fs)
{
    if (!fs) return;
    for (uint32_t i = 0; i < fs->n; i++) {
        key_map_free(&fs->f[i].set);
        free(fs->f[i].hll);
    }
    free(fs->f);
    free(fs);
}

static void add_key(field_stats *fs, field *f, uint64_t key)
{
    uint64_t h = mix64(key ^ 0x9e3779b97f4a7c15ull);
    uint32_t idx = (uint32_t)(h >> (64 - HLL_P));
    uint64_t rest = h << HLL_P;
    uint8_t rank = rest ? (uint8_t)(__builtin_clzll(rest) + 1) : (uint8_t)(64 - HLL_P + 1);
    if (rank > f->hll[idx]) f->hll[idx] = rank;
    if (f->approx) return;
    key_set_add(&f->set, key);
    if (f->set.n > fs->exact_limit) {
        key_map_free(&f->set);
        f->approx = 1;
    }
}

void field_stats_add(field_stats *fs, const sample_block *b)
{
    for (size_t r = 0; r < b->rows; r++) {
        uint64_t row_id = ++fs->rows_seen;
        for (uint64_t k = b->row_ptr[r]; k < b->row_ptr[r + 1]; k++) {
            uint32_t fi = b->field[k];
            if (fi >= fs->n) {
                fs->f = xrealloc(fs->f, (fi + 1) * sizeof *fs->f);
                for (uint32_t i = fs->n; i <= fi; i++) field_init(&fs->f[i]);
                fs->n = fi + 1;
            }
            field *f = &fs->f[fi];
            f->keys++;
            if (f->last_row != row_id) {
                f->rows_present++;
                f->last_row = row_id;
            }
            add_key(fs, f, b->key[k]);
        }
    }
}

static double hll_estimate(const uint8_t *reg)
{
    double sum = 0;
    unsigned zeros = 0;
    for (unsigned i = 0; i < HLL_M; i++) {
        sum += ldexp(1.0, -reg[i]);
        zeros += reg[i] == 0;
    }
    double m = HLL_M, alpha = 0.7213 / (1 + 1.079 / m);
    double e = alpha * m * m / sum;
    if (e <= 2.5 * m && zeros) e = m * log(m / zeros);   /* linear counting */
    return e;
}

uint64_t field_stats_distinct(const field_stats *fs, uint32_t fi, int *approx)
{
    *approx = 0;
    if (fi >= fs->n) return 0;
    const field *f = &fs->f[fi];
    if (!f->approx) return f->set.n;
    *approx = 1;
    return (uint64_t)llround(hll_estimate(f->hll));
}

uint64_t field_stats_rows_present(const field_stats *fs, uint32_t f) { return f < fs->n ? fs->f[f].rows_present : 0; }
uint64_t field_stats_keys(const field_stats *fs, uint32_t f) { return f < fs->n ? fs->f[f].keys : 0; }
uint32_t field_stats_fields(const field_stats *fs) { return fs->n; }

int field_stats_looks_like_id(const field_stats *fs, uint32_t f, double *share)
{
    int approx;
    uint64_t rows = field_stats_rows_present(fs, f), d = field_stats_distinct(fs, f, &approx);
    *share = rows ? (double)d / (double)rows : 0;
    if (*share > 1) *share = 1;   /* an estimate past the exact limit, or several keys a row */
    return rows >= FIELD_ID_MIN_ROWS && *share >= FIELD_ID_SHARE;
}
