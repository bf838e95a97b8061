/*
 * keymap.c: the open-addressing map of keymap.h, and the key vector.
 */
#include "keymap.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util.h"

#define MAPPED ((size_t)4 << 20)

/* A rehash gives the old slots' pages back this many bytes at a time (a multiple of the page) */
#define RELEASE ((size_t)1 << 20)

/* populate: the pages at once; else as they are first written */
static key_slot *slots_alloc(size_t cap, int populate)
{
    size_t bytes = cap * sizeof(key_slot);
    if (bytes < MAPPED) return xcalloc(cap, sizeof(key_slot));
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
    if (p == MAP_FAILED) die("out of memory (mapping %zu bytes for a hash index)", bytes);
    return p;
}

static void slots_free(key_slot *s, size_t cap)
{
    if (!s) return;
    if (cap * sizeof(key_slot) < MAPPED) free(s);
    else munmap(s, cap * sizeof(key_slot));
}

void key_map_init(key_map *m, size_t cap)
{
    CHECK(cap >= 2 && (cap & (cap - 1)) == 0);
    m->s = slots_alloc(cap, 1);
    m->cap = cap;
    m->n = 0;
}

void key_map_free(key_map *m)
{
    slots_free(m->s, m->cap);
    memset(m, 0, sizeof *m);
}

void key_map_clear(key_map *m)
{
    memset(m->s, 0, m->cap * sizeof *m->s);
    m->n = 0;
}

/* Both maps whole at once were three times the old one's bytes: a table's key index doubling at
 * the budget's rows was the largest single step of a budgeted run's memory (64 MB more than the
 * index the budget counts, at --cache-mb 1024). Instead the old slots' pages go back as they are
 * read, and the new map's pages come in as they are written. The old slots are read in order, and
 * when a map doubles a key's new home is its old home or that plus the old capacity: the new map
 * fills at two fronts that keep pace with the old map's release, and the two together hold about
 * the new map's bytes. */
void key_map_rehash(key_map *m, size_t cap)
{
    CHECK(cap >= 2 && (cap & (cap - 1)) == 0);
    key_map n = { slots_alloc(cap, 0), cap, 0 };
    size_t per = m->cap * sizeof(key_slot) >= MAPPED ? RELEASE / sizeof(key_slot) : 0;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->s[i].val) key_map_put_new(&n, m->s[i].key, m->s[i].val);
        if (per && ((i + 1) & (per - 1)) == 0) madvise(m->s + (i + 1 - per), RELEASE, MADV_DONTNEED);
    }
    slots_free(m->s, m->cap);
    n.n = m->n;
    *m = n;
}

void key_map_reserve(key_map *m, size_t n)
{
    if (!m->cap) key_map_init(m, 1024);
    size_t cap = m->cap;
    while (n * 2 > cap) cap *= 2;
    if (cap != m->cap) key_map_rehash(m, cap);
}

void key_map_put_new(key_map *m, uint64_t key, uint64_t val)
{
    size_t mask = m->cap - 1, i = key_map_home(m, key);
    while (m->s[i].val) i = (i + 1) & mask;
    m->s[i].key = key;
    m->s[i].val = val;
}

void key_map_put_shared(key_map *m, uint64_t key, uint64_t val)
{
    size_t mask = m->cap - 1, i = key_map_home(m, key);
    for (;; i = (i + 1) & mask) {
        uint64_t empty = 0;
        if (__atomic_load_n(&m->s[i].val, __ATOMIC_RELAXED) == 0 &&
            __atomic_compare_exchange_n(&m->s[i].val, &empty, val, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
            break;
    }
    m->s[i].key = key;
}

void key_map_del(key_map *m, uint64_t key)
{
    size_t mask = m->cap - 1, i = (size_t)(key_map_slot(m, key) - m->s), j = i;
    CHECK(m->s[i].val != 0);
    for (;;) {
        j = (j + 1) & mask;
        if (m->s[j].val == 0) break;
        size_t home = key_map_home(m, m->s[j].key);
        /* j's entry may move to i if its home is not in (i, j] (cyclically) */
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            m->s[i] = m->s[j];
            i = j;
        }
    }
    m->s[i].key = 0;
    m->s[i].val = 0;
}

int key_set_add(key_map *m, uint64_t key)
{
    if (!m->cap || (m->n + 1) * 2 > m->cap) key_map_reserve(m, m->n + 1);
    key_slot *s = key_map_slot(m, key);
    if (s->val) return 0;
    s->key = key;
    s->val = 1;
    m->n++;
    return 1;
}

void key_index_reserve(key_index *x, size_t n)
{
    if (n * 2 <= x->cap) return;
    size_t cap = 1024;
    while (cap < n * 2) cap *= 2;
    free(x->s);
    x->s = xcalloc(cap, sizeof *x->s);
    x->cap = cap;
}

void key_index_free(key_index *x)
{
    free(x->s);
    memset(x, 0, sizeof *x);
}

void key_vec_push(key_vec *v, uint64_t key)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 1024;
        v->k = xrealloc(v->k, v->cap * sizeof *v->k);
    }
    v->k[v->n++] = key;
}

void key_vec_fit(key_vec *v)
{
    if (v->cap > v->n && v->n) {
        v->k = xrealloc(v->k, v->n * sizeof *v->k);
        v->cap = v->n;
    }
}

void key_vec_free(key_vec *v)
{
    free(v->k);
    memset(v, 0, sizeof *v);
}
