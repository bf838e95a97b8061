/*
 * fieldstats.h: distinct keys and occurrences per field, for `inspect`.
 *
 * Each field counts distinct keys exactly in an open-addressing set until it holds `exact_limit`
 * keys; past that the field switches to its HyperLogLog sketch (2^14 registers, about 0.8%
 * standard error), which is fed from the start, and is reported as approximate.
 * Memory: at most exact_limit * 16 bytes per field plus 16 KiB.
 */
#ifndef CTRBOX_DATASETS_FIELDSTATS_H
#define CTRBOX_DATASETS_FIELDSTATS_H

#include <stddef.h>
#include <stdint.h>

#include "../io/block.h"

typedef struct field_stats field_stats;

field_stats *field_stats_create(uint32_t n_fields, size_t exact_limit);
void field_stats_destroy(field_stats *fs);
/* Count the block's keys (the number of fields may grow between calls). */
void field_stats_add(field_stats *fs, const sample_block *b);
/* Distinct keys of field f; *approx is set when the figure is an estimate. */
uint64_t field_stats_distinct(const field_stats *fs, uint32_t f, int *approx);
/* Rows in which field f has at least one key, and keys of field f in all. */
uint64_t field_stats_rows_present(const field_stats *fs, uint32_t f);
uint64_t field_stats_keys(const field_stats *fs, uint32_t f);
uint32_t field_stats_fields(const field_stats *fs);
/* Whether field f looks like a row id, no feature: present in at least FIELD_ID_MIN_ROWS rows, and
 * at least FIELD_ID_SHARE of those rows hold a value no other row holds (distinct / rows present,
 * in *share). */
#define FIELD_ID_MIN_ROWS 500
#define FIELD_ID_SHARE 0.95
int field_stats_looks_like_id(const field_stats *fs, uint32_t f, double *share);

#endif
