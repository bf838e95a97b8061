/*
 * keymap.h: the one hash map of 64-bit keys in ctrbox: open addressing with linear probing over
 * slots of (key, value), the slot of a key first sought at mix64(key) & (cap - 1).
 *
 * A slot whose value is 0 is empty, so any key (0 and UINT64_MAX included) can be stored and
 * values are the caller's: a row + 1 (a table's index), an index + 1 (a batch's distinct keys),
 * 1 (a set), two packed floats (admission counters). Deletion shifts the following entries back,
 * so there are no tombstones. The capacity is a power of two; key_set_add and key_map_reserve
 * keep the load at 1/2 at most, other users grow the map themselves (key_map_rehash).
 * Slot arrays of 4 MB and more are mapped with their pages populated at once: that takes half
 * the time of faulting them in one by one (docs/performance.md); a rehash's new slots are the
 * exception (their pages come in as the old ones go back: key_map_rehash).
 * The map owns its slots. Reads may run on several threads; so may key_map_put_shared of
 * distinct keys, with no other write meanwhile.
 */
#ifndef CTRBOX_IO_KEYMAP_H
#define CTRBOX_IO_KEYMAP_H

#include <stddef.h>
#include <stdint.h>

#include "mix.h"

typedef struct {
    uint64_t key;
    uint64_t val;          /* 0: the slot is empty */
} key_slot;

typedef struct {
    key_slot *s;
    size_t cap;            /* a power of two (0 before init) */
    size_t n;              /* a set's entries (key_set_add counts them); other users keep their own count */
} key_map;

/* cap: a power of two, at least 2. */
void key_map_init(key_map *m, size_t cap);
void key_map_free(key_map *m);
/* Empty every slot (the capacity stays). */
void key_map_clear(key_map *m);
/* Move every entry into a map of capacity cap (a power of two above the entries), in slot order;
 * the old slots' memory goes back as they are read, so that growing holds about the new map's
 * bytes, not both maps'. */
void key_map_rehash(key_map *m, size_t cap);
/* Grow (doubling) until n entries fit at load 1/2. */
void key_map_reserve(key_map *m, size_t n);

static inline size_t key_map_home(const key_map *m, uint64_t key) { return (size_t)(mix64(key) & (m->cap - 1)); }

/* The slot holding key, or the empty slot where it would go. */
static inline key_slot *key_map_slot(const key_map *m, uint64_t key)
{
    size_t mask = m->cap - 1, i = key_map_home(m, key);
    while (m->s[i].val != 0 && m->s[i].key != key) i = (i + 1) & mask;
    return &m->s[i];
}

/* key's value, or 0 if absent. */
static inline uint64_t key_map_get(const key_map *m, uint64_t key) { return key_map_slot(m, key)->val; }

/* Hint that key will be looked up soon. Always inlined: GCC counts a prefetch as no side effect,
 * so a call left out of line is a "const" call and is deleted (the hint with it). */
__attribute__((always_inline)) static inline void key_map_prefetch(const key_map *m, uint64_t key)
{
    __builtin_prefetch(m->s + key_map_home(m, key));
}

/* The same, for a key about to be put. */
__attribute__((always_inline)) static inline void key_map_prefetch_put(const key_map *m, uint64_t key)
{
    __builtin_prefetch(m->s + key_map_home(m, key), 1);
}

/* Put a key known to be absent with value val (not 0); no growth. */
void key_map_put_new(key_map *m, uint64_t key, uint64_t val);
/* The same for puts of distinct absent keys on several threads at once: each takes the first
 * free slot of its probe sequence by setting its value atomically (only values are read
 * meanwhile). Which slot a key gets then depends on timing; what it finds does not. n is not
 * counted. */
void key_map_put_shared(key_map *m, uint64_t key, uint64_t val);
/* Delete key (which must be present); the entries after it shift back. */
void key_map_del(key_map *m, uint64_t key);

/* A set: add key (value 1), growing at load 1/2; 1 if it was new, 0 if already there. */
int key_set_add(key_map *m, uint64_t key);

/* The compact variant, for a batch's distinct keys: slots of 4 bytes that hold an index + 1 into
 * the caller's array of keys (0: empty), probed the same way. A batch's table of a few hundred
 * thousand slots then stays in the core's cache, as 16-byte slots would not (they cost the
 * sparse side a fifth of its speed in bench/bench_train.sh's LR). The caller empties the slots
 * it used (their positions are key_index_slot's results) before the next batch. */
typedef struct {
    uint32_t *s;
    size_t cap;            /* a power of two (0 before the first reserve) */
} key_index;

/* Room for n keys at load 1/2; a table that grows comes back empty. */
void key_index_reserve(key_index *x, size_t n);
void key_index_free(key_index *x);

/* The slot holding key (keys: the caller's array the slots index), or the empty slot where it would go. */
static inline uint32_t *key_index_slot(const key_index *x, const uint64_t *keys, uint64_t key)
{
    size_t mask = x->cap - 1, i = (size_t)(mix64(key) & mask);
    for (uint32_t v; (v = x->s[i]) != 0 && keys[v - 1] != key; i = (i + 1) & mask) {}
    return &x->s[i];
}

/* A growing array of keys (a pass's distinct keys per table, a fetch's missing keys). */
typedef struct {
    uint64_t *k;
    size_t n, cap;
} key_vec;

void key_vec_push(key_vec *v, uint64_t key);
/* Drop the spare capacity (a vector kept for long). */
void key_vec_fit(key_vec *v);
void key_vec_free(key_vec *v);

#endif
