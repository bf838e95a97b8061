/*
 * block.c: sample blocks and data schemas.
 */
#include "block.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#define XXH_INLINE_ALL
#include <xxhash.h>

void schema_init(data_schema *s, uint32_t n_fields)
{
    memset(s, 0, sizeof *s);
    schema_grow(s, n_fields);
}

void schema_grow(data_schema *s, uint32_t n_fields)
{
    if (n_fields <= s->n_fields) return;
    s->kind = xrealloc(s->kind, n_fields ? n_fields : 1);
    s->dense_slot = xrealloc(s->dense_slot, (n_fields ? n_fields : 1) * sizeof *s->dense_slot);
    s->names = xrealloc(s->names, (n_fields ? n_fields : 1) * sizeof *s->names);
    for (uint32_t i = s->n_fields; i < n_fields; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "f%u", i);
        s->kind[i] = FIELD_CAT;
        s->dense_slot[i] = -1;
        s->names[i] = xstrdup(buf);
    }
    s->n_fields = n_fields;
}

void schema_set_name(data_schema *s, uint32_t field, const char *name)
{
    CHECK(field < s->n_fields);
    free(s->names[field]);
    s->names[field] = xstrdup(name);
}

void schema_free(data_schema *s)
{
    for (uint32_t i = 0; i < s->n_fields; i++) free(s->names[i]);
    free(s->names);
    free(s->kind);
    free(s->dense_slot);
    memset(s, 0, sizeof *s);
}

void schema_copy(data_schema *dst, const data_schema *src)
{
    schema_init(dst, src->n_fields);
    dst->n_dense = src->n_dense;
    dst->num_mode = src->num_mode;
    for (uint32_t i = 0; i < src->n_fields; i++) {
        dst->kind[i] = src->kind[i];
        dst->dense_slot[i] = src->dense_slot[i];
        schema_set_name(dst, i, src->names[i]);
    }
}

int schema_equal(const data_schema *a, const data_schema *b)
{
    if (a->n_fields != b->n_fields || a->n_dense != b->n_dense || a->num_mode != b->num_mode)
        return 0;
    for (uint32_t i = 0; i < a->n_fields; i++)
        if (a->kind[i] != b->kind[i] || a->dense_slot[i] != b->dense_slot[i] ||
            strcmp(a->names[i], b->names[i]) != 0)
            return 0;
    return 1;
}

uint32_t schema_first_diff(const data_schema *a, const data_schema *b)
{
    uint32_t f = 0;
    while (f < a->n_fields && f < b->n_fields && a->kind[f] == b->kind[f] && !strcmp(a->names[f], b->names[f])) f++;
    return f;
}

void block_init(sample_block *b, uint32_t n_dense)
{
    memset(b, 0, sizeof *b);
    b->n_dense = n_dense;
    b->row_ptr = xmalloc(sizeof *b->row_ptr);
    b->row_ptr[0] = 0;
}

void block_free(sample_block *b)
{
    free(b->label);
    free(b->dense);
    free(b->row_ptr);
    free(b->key);
    free(b->field);
    free(b->val);
    free(b->ids);
    free(b->id_ptr);
    memset(b, 0, sizeof *b);
}

void block_clear(sample_block *b)
{
    b->rows = 0;
    b->nnz = 0;
    b->row_ptr[0] = 0;
    free(b->ids);   /* rare (a csv's ids): no ids until a row has one again */
    free(b->id_ptr);
    b->ids = NULL;
    b->id_ptr = NULL;
    b->ids_len = b->ids_cap = b->cap_id_rows = 0;
}

/* Row `row`'s id (the rows before it have theirs). */
static void put_id(sample_block *b, size_t row, const char *s, size_t n)
{
    CHECK(b->id_ptr || row == 0);   /* all rows have ids, or none */
    if (row + 2 > b->cap_id_rows) {
        b->cap_id_rows = (row + 2) * 2;
        b->id_ptr = xrealloc(b->id_ptr, b->cap_id_rows * sizeof *b->id_ptr);
    }
    if (row == 0) b->id_ptr[0] = 0;
    if (b->ids_len + n > b->ids_cap) {
        b->ids_cap = (b->ids_len + n) * 2 + 256;
        b->ids = xrealloc(b->ids, b->ids_cap);
    }
    if (n) memcpy(b->ids + b->ids_len, s, n);
    b->ids_len += n;
    b->id_ptr[row + 1] = b->ids_len;
}

void block_push_id(sample_block *b, const char *s, size_t n) { put_id(b, b->rows, s, n); }

/* The arrays at capacities cap_rows and cap_nnz (0: as they are) */
static void block_resize(sample_block *b, size_t cap_rows, size_t cap_nnz)
{
    if (cap_rows) {
        b->label = xrealloc(b->label, cap_rows * sizeof *b->label);
        b->dense = xrealloc(b->dense, cap_rows * (b->n_dense ? b->n_dense : 1) * sizeof *b->dense);
        b->row_ptr = xrealloc(b->row_ptr, (cap_rows + 1) * sizeof *b->row_ptr);
        b->cap_rows = cap_rows;
    }
    if (cap_nnz) {
        b->key = xrealloc(b->key, cap_nnz * sizeof *b->key);
        b->field = xrealloc(b->field, cap_nnz * sizeof *b->field);
        b->val = xrealloc(b->val, cap_nnz * sizeof *b->val);
        b->cap_nnz = cap_nnz;
    }
}

void block_reserve(sample_block *b, size_t rows, size_t nnz)
{
    size_t cap_rows = 0, cap_nnz = 0;
    if (b->rows + rows > b->cap_rows) {
        cap_rows = b->cap_rows ? b->cap_rows : 1024;
        while (cap_rows < b->rows + rows) cap_rows *= 2;
    }
    if (b->nnz + nnz > b->cap_nnz) {
        cap_nnz = b->cap_nnz ? b->cap_nnz : 16384;
        while (cap_nnz < b->nnz + nnz) cap_nnz *= 2;
    }
    block_resize(b, cap_rows, cap_nnz);
}

void block_reserve_exact(sample_block *b, size_t rows, size_t nnz)
{
    block_resize(b, b->rows + rows > b->cap_rows ? b->rows + rows : 0, b->nnz + nnz > b->cap_nnz ? b->nnz + nnz : 0);
}

void block_shrink_to_fit(sample_block *b)
{
    size_t rows = b->rows ? b->rows : 1, nnz = b->nnz ? b->nnz : 1;
    block_resize(b, b->cap_rows > rows ? rows : 0, b->cap_nnz > nnz ? nnz : 0);
}

size_t block_bytes(const sample_block *b)
{
    size_t row = sizeof *b->label + (b->n_dense ? b->n_dense : 1) * sizeof *b->dense + sizeof *b->row_ptr;
    size_t ids = b->id_ptr ? b->ids_cap + b->cap_id_rows * sizeof *b->id_ptr : 0;
    return b->cap_rows * row + b->cap_nnz * (sizeof *b->key + sizeof *b->field + sizeof *b->val) + ids;
}

int block_vals_all_one(const sample_block *b)
{
    for (size_t i = 0; i < b->nnz; i++)
        if (b->val[i] != 1.0f) return 0;
    return 1;
}

uint64_t block_digest(const sample_block *b, uint64_t seed)
{
    XXH64_state_t *h = XXH64_createState();
    XXH64_reset(h, seed);
    XXH64_update(h, &b->rows, sizeof b->rows);
    XXH64_update(h, b->label, b->rows * sizeof *b->label);
    XXH64_update(h, b->dense, b->rows * b->n_dense * sizeof *b->dense);
    XXH64_update(h, b->row_ptr, (b->rows + 1) * sizeof *b->row_ptr);
    XXH64_update(h, b->field, b->nnz * sizeof *b->field);
    XXH64_update(h, b->key, b->nnz * sizeof *b->key);
    XXH64_update(h, b->val, b->nnz * sizeof *b->val);
    uint64_t d = XXH64_digest(h);
    XXH64_freeState(h);
    return d;
}

void block_append(sample_block *dst, const sample_block *src, size_t r0, size_t r1)
{
    CHECK(dst->n_dense == src->n_dense && r0 <= r1 && r1 <= src->rows);
    size_t rows = r1 - r0, k0 = (size_t)src->row_ptr[r0], nnz = (size_t)src->row_ptr[r1] - k0;
    block_reserve(dst, rows, nnz);
    memcpy(dst->label + dst->rows, src->label + r0, rows * sizeof *dst->label);
    memcpy(dst->dense + dst->rows * dst->n_dense, src->dense + r0 * src->n_dense, rows * src->n_dense * sizeof *dst->dense);
    for (size_t i = 0; i < rows; i++) dst->row_ptr[dst->rows + i + 1] = dst->nnz + (src->row_ptr[r0 + i + 1] - k0);
    memcpy(dst->key + dst->nnz, src->key + k0, nnz * sizeof *dst->key);
    memcpy(dst->field + dst->nnz, src->field + k0, nnz * sizeof *dst->field);
    memcpy(dst->val + dst->nnz, src->val + k0, nnz * sizeof *dst->val);
    CHECK(!dst->id_ptr == !src->id_ptr || !dst->rows || !rows);   /* ids on all rows or none */
    for (size_t i = 0; src->id_ptr && i < rows; i++)
        put_id(dst, dst->rows + i, src->ids + src->id_ptr[r0 + i], (size_t)(src->id_ptr[r0 + i + 1] - src->id_ptr[r0 + i]));
    dst->rows += rows;
    dst->nnz += nnz;
}

/* ---- rows as bytes, for another process of the job ---- */

#define PAD8(n) (((n) + 7) & ~(size_t)7)

static uint8_t *pack_put(uint8_t *p, const void *src, size_t n)
{
    if (n) memcpy(p, src, n);
    memset(p + n, 0, PAD8(n) - n);
    return p + PAD8(n);
}

void block_pack(const sample_block *b, size_t r0, size_t r1, const uint64_t *recs, uint8_t **buf, size_t *len,
                size_t *cap)
{
    CHECK(r0 <= r1 && r1 <= b->rows);
    size_t rows = r1 - r0, k0 = (size_t)b->row_ptr[r0], nnz = (size_t)b->row_ptr[r1] - k0, nd = b->n_dense;
    size_t i0 = b->id_ptr ? (size_t)b->id_ptr[r0] : 0, idl = b->id_ptr ? (size_t)b->id_ptr[r1] - i0 : 0;
    size_t need = 5 * 8 + rows * 8 + (rows + 1) * 8 + PAD8(rows * 4) + PAD8(rows * nd * 4) + PAD8(nnz * 2) + nnz * 8 +
                  PAD8(nnz * 4) + (b->id_ptr ? (rows + 1) * 8 + PAD8(idl) : 0);
    if (*len + need > *cap) {
        *cap = (*len + need) * 2;
        *buf = xrealloc(*buf, *cap);
    }
    uint8_t *p = *buf + *len;
    uint64_t head[5] = { rows, nnz, nd, b->id_ptr != NULL, idl };
    p = pack_put(p, head, sizeof head);
    p = pack_put(p, recs + r0, rows * 8);
    uint64_t *rp = (uint64_t *)(void *)p;
    for (size_t i = 0; i <= rows; i++) rp[i] = b->row_ptr[r0 + i] - k0;
    p += (rows + 1) * 8;
    p = pack_put(p, b->label + r0, rows * 4);
    p = pack_put(p, b->dense + r0 * nd, rows * nd * 4);
    p = pack_put(p, b->field + k0, nnz * 2);
    p = pack_put(p, b->key + k0, nnz * 8);
    p = pack_put(p, b->val + k0, nnz * 4);
    if (b->id_ptr) {
        uint64_t *ip = (uint64_t *)(void *)p;
        for (size_t i = 0; i <= rows; i++) ip[i] = b->id_ptr[r0 + i] - i0;
        p += (rows + 1) * 8;
        p = pack_put(p, b->ids + i0, idl);
    }
    CHECK((size_t)(p - *buf - *len) == need);
    *len += need;
}

size_t block_unpack(sample_block *b, const uint8_t *buf, size_t len, uint64_t **recs, size_t *cap_recs)
{
    size_t done = 0;
    CHECK(((uintptr_t)buf & 7) == 0);
    while (len > 0) {
        CHECK(len >= 40);
        const uint64_t *head = (const uint64_t *)(const void *)buf;
        size_t rows = (size_t)head[0], nnz = (size_t)head[1], nd = (size_t)head[2], idl = (size_t)head[4];
        int ids = head[3] != 0;
        CHECK(nd == b->n_dense);
        const uint8_t *p = buf + 40;
        sample_block v = { .rows = rows, .nnz = nnz, .n_dense = (uint32_t)nd };
        const uint64_t *rec = (const uint64_t *)(const void *)p;
        p += rows * 8;
        v.row_ptr = (uint64_t *)(uintptr_t)p, p += (rows + 1) * 8;
        v.label = (float *)(uintptr_t)p, p += PAD8(rows * 4);
        v.dense = (float *)(uintptr_t)p, p += PAD8(rows * nd * 4);
        v.field = (uint16_t *)(uintptr_t)p, p += PAD8(nnz * 2);
        v.key = (uint64_t *)(uintptr_t)p, p += nnz * 8;
        v.val = (float *)(uintptr_t)p, p += PAD8(nnz * 4);
        if (ids) {
            v.id_ptr = (uint64_t *)(uintptr_t)p, p += (rows + 1) * 8;
            v.ids = (char *)(uintptr_t)p, p += PAD8(idl);
        }
        size_t used = (size_t)(p - buf);
        CHECK(used <= len);
        if (b->rows + rows > *cap_recs) {
            *cap_recs = (b->rows + rows) * 2 + 1024;
            *recs = xrealloc(*recs, *cap_recs * sizeof **recs);
        }
        memcpy(*recs + b->rows, rec, rows * 8);
        block_append(b, &v, 0, rows);
        done += rows;
        buf += used, len -= used;
    }
    return done;
}
