/*
 * block.h: a block of samples, the unit every reader produces and every consumer takes.
 *
 * Row i has label[i] (0 or 1), dense[i*n_dense .. +n_dense) and sparse entries
 * row_ptr[i] .. row_ptr[i+1] of (field, key, val), in CSR so multi-hot rows work.
 * The schema says what the fields are. A block owns its arrays.
 */
#ifndef CTRBOX_DATASETS_BLOCK_H
#define CTRBOX_DATASETS_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#define CBX_MAX_FIELDS 65535u

typedef enum { FIELD_CAT = 0, FIELD_NUM = 1 } field_kind;

/* How integer/num columns are treated. */
typedef enum {
    NUM_LOG = 0,      /* dense value log1p(max(x, 0)) (DLRM) */
    NUM_BUCKET = 1,   /* categorical token floor(ln(x)^2) for x > 2, else floor(x) (Criteo winners) */
} num_mode;

typedef struct {
    uint32_t n_fields;     /* field ids are 0 .. n_fields-1 */
    uint32_t n_dense;      /* dense values per row */
    uint32_t num_mode;     /* num_mode used when the data was parsed */
    uint8_t *kind;         /* (n_fields) field_kind; NUM fields carry a dense slot, not keys */
    int32_t *dense_slot;   /* (n_fields) dense index of a NUM field, -1 otherwise */
    char **names;          /* (n_fields) names, owned */
} data_schema;

void schema_init(data_schema *s, uint32_t n_fields);      /* all categorical, names f0.. */
void schema_free(data_schema *s);
void schema_copy(data_schema *dst, const data_schema *src);
int schema_equal(const data_schema *a, const data_schema *b);
/* The first field whose name or kind differs between a and b; the smaller field count when none does. */
uint32_t schema_first_diff(const data_schema *a, const data_schema *b);
/* Grow to n_fields (new fields categorical, named f<i>). */
void schema_grow(data_schema *s, uint32_t n_fields);
void schema_set_name(data_schema *s, uint32_t field, const char *name);

typedef struct {
    size_t rows, cap_rows;
    size_t nnz, cap_nnz;
    uint32_t n_dense;
    float *label;          /* (rows) */
    float *dense;          /* (rows, n_dense) */
    uint64_t *row_ptr;     /* (rows + 1) */
    uint64_t *key;         /* (nnz) */
    uint16_t *field;       /* (nnz) */
    float *val;            /* (nnz) */
    /* Row ids (a csv's --id-column), or none (id_ptr NULL): row i's id is the bytes
     * ids[id_ptr[i] .. id_ptr[i + 1]). A row without a label (unlabeled input) has label NaN. */
    char *ids;
    uint64_t *id_ptr;      /* (rows + 1) */
    size_t ids_len, ids_cap, cap_id_rows;
} sample_block;

void block_init(sample_block *b, uint32_t n_dense);
void block_free(sample_block *b);
void block_clear(sample_block *b);
/* Room for one more row with up to `nnz` sparse entries. */
void block_reserve(sample_block *b, size_t rows, size_t nnz);
/* The id of the row about to be added (row b->rows): call it before the row is complete. Every
 * row of a block has an id or none does. */
void block_push_id(sample_block *b, const char *s, size_t n);
/* Append rows [r0, r1) of src to dst (same n_dense; their ids too). */
void block_append(sample_block *dst, const sample_block *src, size_t r0, size_t r1);
/* Rows [r0, r1) of b with their record numbers recs[r0 .. r1) (ids too), appended as bytes to *buf
 * (*len of them used, *cap allocated; grown as needed): for another process of the same job, which
 * block_unpack gives them to. Sections are 8-byte aligned (the buffer is malloc'ed). */
void block_pack(const sample_block *b, size_t r0, size_t r1, const uint64_t *recs, uint8_t **buf, size_t *len,
                size_t *cap);
/* The rows block_pack wrote into buf[0, len) appended to b (same n_dense), their record numbers to
 * (*recs)[rows before .. ) (grown with *cap_recs). Returns the rows appended. The bytes come from
 * this build's block_pack (a programmer error otherwise: CHECK). */
size_t block_unpack(sample_block *b, const uint8_t *buf, size_t len, uint64_t **recs, size_t *cap_recs);
/* Give back the capacity beyond rows and nnz (a block kept for a while). */
void block_shrink_to_fit(sample_block *b);
/* Room for rows more rows and nnz more keys, at exactly that capacity (block_reserve doubles). */
void block_reserve_exact(sample_block *b, size_t rows, size_t nnz);
/* The bytes the block holds allocated (its capacity, ids included). */
size_t block_bytes(const sample_block *b);
/* Whether every val is 1 (one-hot data; the binary format then omits them). */
int block_vals_all_one(const sample_block *b);
/* XXH64 of the block's rows (labels, dense values, row lengths, fields, keys, values), seeded:
 * the identity of what a pass trains on. */
uint64_t block_digest(const sample_block *b, uint64_t seed);

#endif
