/*
 * table.h: the in-memory sparse table: one fixed-size record per 64-bit key.
 *
 * A record holds the key, the CTR counters (show, click, last pass seen), the trainable values
 * (first-order weight if the table has one, then the embedding) and the optimizer state, read and
 * updated together. Records live in one slab indexed by row number; an open-addressing index
 * (linear probing) maps keys to rows. Row numbers are stable; row pointers are valid until the
 * next insert. New rows are initialised from a hash of (seed, key), so a row's first value does
 * not depend on insertion order or on where the row lived before: the same seed and data give the
 * same model with any tiering.
 * Admission: with min_show > 1 a key first only counts shows and clicks, in a count-min sketch of
 * admit_bytes (a fixed size: conservative update, 4 rows of cells of a show and a click count, 4, 8
 * or 16 bits each as min_show needs; a key
 * sharing its cells with others may be admitted early, never late; a key shrink deleted is
 * admitted again at its next show), or exactly in a side index (admit_bytes 0: its memory grows
 * with the keys; a deleted key counts again from 0); it reads the shared default row of its field
 * until it has min_show shows.
 */
#ifndef CTRBOX_EMBEDDING_TABLE_H
#define CTRBOX_EMBEDDING_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "../io/keymap.h"
#include "sparse_optim.h"

typedef struct {
    int dim;               /* embedding floats per row */
    int has_w;             /* a first-order weight before the embedding */
    sparse_opt opt;
    float init_std;        /* embedding init: normal(0, init_std) (uniform if init_uniform) */
    int init_uniform;      /* uniform in [-init_std, init_std] */
    uint64_t seed;
    uint32_t min_show;     /* admission threshold (0: every key gets its row at once) */
    float decay;           /* show/click multiplied by this at each pass boundary (0 or 1: none) */
    uint64_t admit_bytes;  /* with admission: the count-min sketch's bytes (0: exact counts per key) */
} emb_table_config;

typedef struct {
    uint64_t key;
    float show, click;
    uint32_t last_pass;
    uint32_t mark;         /* embedding/batch.c's scratch during a gather or scatter, else 0 (not persisted) */
    uint64_t aux;          /* the SSD tier's slot + 1 of this row's copy there, 0 if none; with EMB_ROW_CLEAN
                            * that copy is the row as it is (not persisted) */
} emb_row_head;

/* aux's flag: the tier's copy holds the row as it is now (it was read from there or written there,
 * and nothing changed it since: emb_row_count clears it), so the row may leave memory unwritten */
#define EMB_ROW_CLEAN (1ull << 63)
static inline uint64_t emb_row_slot1(const emb_row_head *h) { return h->aux & ~EMB_ROW_CLEAN; }
static inline int emb_row_clean(const emb_row_head *h) { return (h->aux & EMB_ROW_CLEAN) != 0; }

/* Count `shows` and `clicks` into a row at pass `pass`: the counters first decay by
 * decay^(pass - last_pass) (lazily, so rows on any tier decay alike), then add. Every training
 * step counts the rows it changes, so this is where a row stops being clean (EMB_ROW_CLEAN). */
void emb_row_count(const emb_table_config *c, emb_row_head *h, float shows, float clicks, uint32_t pass);
/* The row's counters as of pass `pass` (decayed), and its CTR-accessor score
 * (show - click) * nonclk + click * clk. */
void emb_row_counters_at(const emb_table_config *c, const emb_row_head *h, uint32_t pass, float *show, float *click);

typedef struct emb_table emb_table;

emb_table *emb_table_create(const emb_table_config *c);
void emb_table_destroy(emb_table *t);
const emb_table_config *emb_table_config_of(const emb_table *t);

/* Trainable values per row (has_w + dim) and floats of optimizer state. */
int emb_table_values(const emb_table *t);
int emb_table_state_floats(const emb_table *t);
size_t emb_table_row_bytes(const emb_table *t);
/* Bytes of the admission sketch (0: none). */
size_t emb_table_sketch_bytes(const emb_table *t);
size_t emb_table_rows(const emb_table *t);
/* Bytes of the key index of the rows and of the pending keys' counters (the deletion record apart). */
size_t emb_table_index_bytes(const emb_table *t);

/* Row of key, or -1. */
int64_t emb_table_find(const emb_table *t, uint64_t key);
/* The same for n keys: rows[i] of keys[i] (the lookups overlap: faster than one at a time). */
void emb_table_find_many(const emb_table *t, const uint64_t *keys, size_t n, int64_t *rows);
/* Row of key, created (and initialised) if absent. */
uint32_t emb_table_get(emb_table *t, uint64_t key);
/* A new row for a key known to be absent (emb_table_find said -1 since). */
uint32_t emb_table_insert(emb_table *t, uint64_t key);
/* Insertion in two steps, for many absent keys at once: emb_table_claim reserves the next row
 * (serially, in key order, so rows are numbered as emb_table_insert would number them); then
 * emb_table_fill indexes and initialises each claimed row. Fills of distinct keys may run on
 * several threads at once, beside reads and updates of other rows, but with no lookup, insertion
 * or removal meanwhile. */
uint32_t emb_table_claim(emb_table *t);
void emb_table_fill(emb_table *t, uint32_t row, uint64_t key);
emb_row_head *emb_table_head(emb_table *t, uint32_t row);
float *emb_table_vals(emb_table *t, uint32_t row);     /* (values) then (state) */
float *emb_table_state(emb_table *t, uint32_t row);

/* The row a key trains, counting the show (and click): its own row, or with admission pending
 * the default row of its field. */
uint32_t emb_table_touch(emb_table *t, uint64_t key, uint16_t field, int click, uint32_t pass);
/* The same for `shows` occurrences at once, `clicks` of them clicked (a batch's de-duplicated key). */
uint32_t emb_table_touch_n(emb_table *t, uint64_t key, uint16_t field, uint32_t shows, uint32_t clicks, uint32_t pass);
/* As emb_table_touch_n, with `found` the result of an earlier emb_table_find of the same key
 * (rows inserted since for other keys do not change it). */
uint32_t emb_table_touch_found(emb_table *t, uint64_t key, int64_t found, uint16_t field, uint32_t shows,
                               uint32_t clicks, uint32_t pass);
/* Admission by a shard's owner (embedding/shard.h), exact counts only (no sketch): a key with a row
 * returns it; else it counts shows and clicks, and once they reach min_show gets its row, whose
 * counters are those gathered before these (the caller counts these with the step, emb_row_count
 * at `pass`, as emb_table_touch_found's row ends up). -1 while the key is pending. Without admission
 * every key gets its row. */
int64_t emb_table_admit(emb_table *t, uint64_t key, uint32_t shows, uint32_t clicks, uint32_t pass);
/* The keys pending admission (exact counts): n keys (*keys) and their show, click pairs (*counts),
 * malloc'ed, in no order; and one such entry set in a table without a sketch (show > 0): the
 * pending keys of several owners gathered into one table, or spread from one. */
size_t emb_table_pending_entries(const emb_table *t, uint64_t **keys, float **counts);
void emb_table_pending_put(emb_table *t, uint64_t key, float show, float click);
void emb_table_pending_clear(emb_table *t);
/* Hint that key will be looked up soon (prefetches its index slot); and that a row will be read. */
void emb_table_prefetch(const emb_table *t, uint64_t key);
void emb_table_prefetch_row(const emb_table *t, uint32_t row);
/* The row a key reads at inference (no counting, nothing created): own row, field default row,
 * or -1 if neither exists. */
int64_t emb_table_lookup(const emb_table *t, uint64_t key, uint16_t field);
/* The key of field f's shared default row. */
uint64_t emb_table_default_key(uint16_t field);

/* The factor counters decay by from last_pass to pass: decay^(pass - last_pass) (1 when decay is
 * 0 or 1, or pass is not later). */
float emb_decay_factor(float decay, uint32_t last_pass, uint32_t pass);

/* Insert a whole record (a row read back from the SSD tier) for a key known to be absent; the
 * record's mark and aux are replaced by 0 and `aux`. */
uint32_t emb_table_insert_record(emb_table *t, const void *rec, uint64_t aux);
/* The same into a row emb_table_claim reserved (as emb_table_fill: distinct keys on several
 * threads at once, no lookup meanwhile). */
void emb_table_fill_record(emb_table *t, uint32_t row, const void *rec, uint64_t aux);
/* Remove a row: the last row moves into its place (row numbers of other rows may change). */
void emb_table_remove(emb_table *t, uint32_t row);
/* Remove every row r with keep[r] == 0; returns how many went. Row numbers change: when half or
 * less go, the last kept rows move into the places of those that went, their keys leave the
 * index one by one; when more go, the kept rows keep their order and the index is built again.
 * moved_to (NULL, or an array of the rows before): each kept row's number after. */
size_t emb_table_keep_rows(emb_table *t, const uint8_t *keep, uint32_t *moved_to);
/* Counts the calls that moved or removed rows (emb_table_remove, emb_table_keep_rows): a row
 * number taken at one generation names the same row while the generation stays (rows added since
 * do not move the others). */
uint64_t emb_table_generation(const emb_table *t);
/* Give the memory of the slab's unused tail back to the system, and shrink the key index, when
 * the rows have fallen far below them (to half the slab's pages, a sixteenth of the index's load). */
void emb_table_trim(emb_table *t);
/* Keys waiting for admission, as a blob (and back): the SSD tier keeps them with each commit. */
int emb_table_save_pending(const emb_table *t, void *file);
int emb_table_load_pending(emb_table *t, void *file, char *err, size_t errlen);

/* The deletion record, for deltas to serving: shrink notes each key it deletes with the pass;
 * emb_table_deleted_since appends to out the keys last deleted after pass `since` (a key deleted
 * and created again is in both the record and the rows: a delta deletes, then puts). The record
 * is complete from emb_table_deletions_from on (0 for a new table; a file of an older build: the
 * newest pass its rows saw; UINT32_MAX: nothing known). A table section saves it with the pending
 * keys; a tier's commit saves it apart (emb_table_save_deleted), only when it changed, since it
 * grows with every shrink and the pending keys' blob goes with every commit. */
void emb_table_note_deleted(emb_table *t, uint64_t key, uint32_t pass);
size_t emb_table_deleted_since(const emb_table *t, uint32_t since, key_vec *out);
uint32_t emb_table_deletions_from(const emb_table *t);
/* The deletion record alone, with its magic, version and checksum; load replaces t's. 0 or -errno
 * (err says what was wrong). */
int emb_table_save_deleted(const emb_table *t, void *file);
int emb_table_load_deleted(emb_table *t, void *file, char *err, size_t errlen);
/* The same, added to t's record (a key in both keeps the later pass; the union is complete from the
 * later of the two starts): another owner's deletions, when several processes trained the table. */
int emb_table_merge_deleted(emb_table *t, void *file, char *err, size_t errlen);
void emb_table_set_deletions_from(emb_table *t, uint32_t pass);

/* Whether a record's counters, values and optimizer state are all finite (not NaN or inf). */
int emb_row_finite(const emb_table *t, const emb_row_head *h);
/* -1 if every row is finite, else the first row that is not. */
int64_t emb_table_first_nonfinite(const emb_table *t);

/* Change the sparse learning rate (a learning-rate schedule). */
void emb_table_set_lr(emb_table *t, float lr);
/* Apply the optimizer to a row with gradient g (values). */
void emb_table_update(emb_table *t, uint32_t row, const float *g, uint64_t step);

/* Write / read every row (and pending counters) to an open stream; 0 or -errno (format with
 * magic, version and an XXH64 over the whole section, validated on read). */
int emb_table_save(const emb_table *t, void *file /* FILE* */);
int emb_table_load(emb_table *t, void *file /* FILE* */, char *err, size_t errlen);

#endif
