/*
 * cache.h: the rows of the sparse tables kept in CPU memory under a byte budget, in front of the
 * SSD tier (tier.h).
 *
 * Where a row lives: a pass's keys are listed first (emb_cache_keys); those not in memory are
 * read from the tier into a fetch (emb_cache_missing, then emb_fetch_run, on another thread:
 * it reads only the tier), whose rows are installed at the pass boundary (emb_cache_install),
 * before the rows the budget cannot keep leave memory (emb_cache_evict). A row leaving memory is
 * never lost: one changed since its copy in the tier (not EMB_ROW_CLEAN) is first written into the
 * tier's open batch, where fetches find it before the commit makes it durable; a clean one is as
 * the tier holds it. Eviction happens only at boundaries, with the part's own rows and the next
 * part's pinned (the cache's pins, not the rows' headers). A commit writes the rows in memory that
 * are not clean (emb_cache_put_dirty).
 * Eviction order: least frequently shown first (show decayed to the pass; ties: older last pass)
 * or least recently used (older last pass); ties broken by a hash of the key, so the same data
 * evicts the same rows.
 * The cache borrows the tables (the model owns them) and owns the fetches it hands out until
 * emb_fetch_free.
 */
#ifndef CTRBOX_EMBEDDING_CACHE_H
#define CTRBOX_EMBEDDING_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "../io/block.h"
#include "../io/keymap.h"
#include "table.h"
#include "tier.h"

typedef struct emb_cache emb_cache;

/* A pass's counts (added to by the functions that take one). */
typedef struct {
    uint64_t keys;        /* distinct keys of the pass (the caller counts them) */
    uint64_t mem_hits;    /* found in memory */
    uint64_t ssd_hits;    /* read from the tier */
    uint64_t new_keys;    /* in neither: new rows */
    uint64_t evicted;     /* rows dropped */
    uint64_t written, written_bytes;   /* of those, written to the tier first (changed since their copy there) */
    uint64_t nonfinite;   /* of those, holding NaN or inf */
} emb_cache_stats;

/* Rows missing from memory, and what the tier holds of them; and the rows in memory of the keys it
 * was made from, for pinning them (emb_cache_evict) without looking the keys up again. */
typedef struct {
    int n_tables;
    key_vec *miss;            /* (n_tables) the keys to read */
    emb_tier_packed *rec;     /* (n_tables) the records of those found, packed */
    uint64_t **aux;           /* (n_tables) per key: the tier's slot + 1, 0 if it is not there */
    /* (n_tables) the rows of the keys in memory: those found by emb_cache_missing, then those
     * emb_cache_install found or added. They name those rows while the table's generation is
     * gen[tb] (emb_table_generation; emb_cache_evict keeps them up to date when it moves rows);
     * else (or gen[tb] == UINT64_MAX) the keys are looked up. The fetch thread never touches them. */
    uint32_t **rows;
    size_t *n_rows;
    uint64_t *gen;
} emb_fetch;

/* Keys whose rows an eviction keeps: keys (per table), and f (NULL, or the fetch emb_cache_missing
 * made from these keys) whose rows spare the lookups. */
typedef struct {
    const key_vec *keys;
    emb_fetch *f;
} emb_pins;

/* What a row in memory costs the budget besides its bytes: its slots in its table's key index
 * (16-byte slots, grown at a load of 1/2 to 1/4: four a row. The index does not shrink when a
 * boundary evicts (emb_table_trim): it stays at most four slots for each row of the most the
 * budget held). */
#define EMB_CACHE_INDEX_BYTES_PER_ROW 64u

/* --cache-mb's bytes split between the rows (*rows), the tier's index (*index: a quarter, within
 * 1 to 256 MB: its slot map and RocksDB's block cache) and the open batch of rows written back
 * since the last commit (*window: a quarter of the rest). */
void emb_cache_split_budget(double cache_mb, uint64_t *rows, size_t *index, uint64_t *window);

/* tabs (n_tables, borrowed); field_table (n_fields): each field's table, -1 for numeric fields;
 * budget: bytes of rows; lfu: 1 frequency-aware eviction, 0 LRU. */
emb_cache *emb_cache_create(emb_table *const *tabs, int n_tables, const int *field_table, uint32_t n_fields,
                            uint64_t budget, int lfu);
void emb_cache_destroy(emb_cache *c);

/* Bytes of the rows in memory; and of their key indexes (counted against the budget with them). */
uint64_t emb_cache_bytes(const emb_cache *c);
uint64_t emb_cache_index_bytes(const emb_cache *c);
uint64_t emb_cache_rows(const emb_cache *c);
/* The bytes the eviction and the commits hold between boundaries as scratch (outside the budget:
 * a byte a row for the rows kept, and one buffer of at most 16 bytes a row and a quarter more) */
uint64_t emb_cache_scratch_bytes(const emb_cache *c);

/* emb_cache_part's sets of keys seen, kept from one part to the next (its size: a part's keys) */
typedef struct {
    key_index *sets;   /* (n) */
    int n;
    struct emb_part_key *q;   /* the keys gathered from a few hundred rows (cache.c's) */
    size_t q_cap;
} emb_part_sets;
emb_part_sets *emb_part_sets_new(void);
void emb_part_sets_free(emb_part_sets *s);

/* The distinct keys of block b per table, in first-seen order (out: n_tables vectors, caller
 * frees each with key_vec_free); with admission the fields' default rows count as keys of every
 * block (pending keys train them). */
void emb_cache_keys(const emb_cache *c, const sample_block *b, key_vec *out);
/* A part of a pass sized to the budget: the distinct keys (out, as emb_cache_keys') of b's rows
 * order[lo], order[lo + 1], ... (order NULL: lo, lo + 1, ...), taken `batch` rows at a time until
 * position hi, or until the next batch would take the rows of the keys over `cap` bytes (the first
 * batch is always taken). Returns the position where the part ends (a batch boundary: parts of
 * one pass train its batches unchanged); *bytes (may be NULL): the bytes of the keys' rows and of
 * their slots in the key index (counted as cap counts them). keep (may be NULL): emb_cache_part's
 * scratch, kept by a caller that lists many parts (the reader thread), used by one thread at a time. */
size_t emb_cache_part(const emb_cache *c, const sample_block *b, const size_t *order, size_t lo, size_t hi, size_t batch,
                      uint64_t cap, key_vec *out, uint64_t *bytes, emb_part_sets *keep);

/* The keys of `keys` (per table) not in memory: a fetch to run (caller frees with emb_fetch_free). */
emb_fetch *emb_cache_missing(const emb_cache *c, const key_vec *keys);
/* Read the fetch's rows from the tier (sorts its keys): 0, or -1 with err. Touches no row in memory. */
int emb_fetch_run(emb_tier *tier, emb_fetch *f, char *err, size_t errlen);
void emb_fetch_free(emb_fetch *f);
/* Count the pass's keys (of `keys`, which f was made from): in memory, read from the tier, new. */
void emb_cache_count(const key_vec *keys, const emb_fetch *f, emb_cache_stats *st);
/* Bytes the fetch may add, rows and index slots: every key it reads (before it runs: an upper bound). */
uint64_t emb_cache_fetch_bytes(const emb_cache *c, const emb_fetch *f);
/* Install the fetched rows (a key already in memory keeps its row: it is the same or newer), and
 * free their records. Returns the bytes the fetch's new keys will add (those in neither memory nor
 * the tier, that training creates): their rows and key index slots. */
uint64_t emb_cache_install(emb_cache *c, emb_fetch *f);
/* The rows of every key of block b into memory at once (before an evaluation): its keys, the
 * missing ones read from the tier, installed. 0, or -1 with err. */
int emb_cache_pull(emb_cache *c, emb_tier *tier, const sample_block *b, char *err, size_t errlen);

/* Drop unpinned rows until the rows in memory with their key index slots (64 bytes a row at most)
 * and `coming` bytes (rows about to come, as emb_cache_install counts them) fit the budget; the rows
 * of the keys of pins[0..n_pins) stay (their fetches' rows then name them where they are after).
 * `pass` ages the counters. A dropped row that is not clean is first put into wb (the tier's open
 * batch; NULL without a tier: nothing is dropped there). Returns the bytes the pinned rows and
 * coming take beyond the budget (0 when they fit): memory then exceeds the budget by that much. */
uint64_t emb_cache_evict(emb_cache *c, const emb_pins *pins, int n_pins, uint64_t coming, uint32_t pass,
                         emb_tier_batch *wb, emb_cache_stats *st);

/* The rows in memory that are not clean (changed since their copy in the tier, or never written):
 * their count, and how many hold NaN or inf (when nonfinite is not NULL: that reads every value). */
size_t emb_cache_dirty(const emb_cache *c, size_t *nonfinite);
/* Put them into a commit (hot rows first); returns their count, and adds the bytes the tier
 * writes for them to *bytes (each record with its checksum, in its slot). They are clean after. */
size_t emb_cache_put_dirty(emb_cache *c, emb_tier_batch *b, uint64_t *bytes);

/* emb_tier_repack's callback (ctx: the cache): a row the tier moved takes its new slot, when it is
 * in memory. */
void emb_cache_moved(void *ctx, int tb, uint64_t key, uint64_t slot1);

#endif
