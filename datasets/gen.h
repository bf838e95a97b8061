/*
 * gen.h: a generator of Criteo-layout click logs whose labels come from a known model.
 *
 * Each row: 13 integer columns and 26 categorical 8-hex-digit tokens, some empty. Token ranks are
 * Zipf-distributed per field over vocabularies from a handful to millions (Criteo's field sizes,
 * times keys_scale). The label is Bernoulli(sigmoid(logit)) with
 *   logit = bias + sum of per-token weights + low-rank pairwise interactions between the tokens of
 *           ten fields + linear terms in log1p of the integers,
 * every parameter derived by hashing (seed, field, rank), so nothing is stored and the same
 * options give the same bytes. Row i is the same whatever range it is written in, so
 * --offset gives disjoint rows (a test set) from the same model. The truth output has one "label<TAB>probability" line per row.
 */
#ifndef CTRBOX_DATASETS_GEN_H
#define CTRBOX_DATASETS_GEN_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    uint64_t rows;
    uint64_t seed;
    double keys_scale;     /* multiplies every vocabulary size; default 1 */
    uint64_t offset;       /* index of the first row: rows offset .. offset+rows-1 of the stream */
} gen_opts;

/* Write rows to out (and truth, if not NULL). 0 or -errno on a write error. */
int gen_write(const gen_opts *o, FILE *out, FILE *truth);

/* Vocabulary size of categorical field f (0..25) under o. */
uint64_t gen_vocab(const gen_opts *o, int f);

#endif
