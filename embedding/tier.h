/*
 * tier.h: the SSD tier of the sparse tables, in a folder (--table-dir).
 *
 * Layout (chosen by measurement, docs/performance.md "SSD tier layouts"): each table's rows live
 * in a file of fixed-size slots (DIR/table<i>.slots) read with io_uring and O_DIRECT, many reads
 * in flight; a RocksDB database (DIR/index) is the store of record for everything else: the index
 * key -> (slot, show, click, last pass) and the catalog of the last committed pass (an opaque blob
 * the trainer writes: dense state, pending keys, its position in the data).
 *
 * Slot file: a 4096-byte header (magic "CTRBXSLT", version, table, row and slot sizes, XXH64),
 * then slots of slot_bytes (the row record rounded up to 512 bytes with room for a trailer: the
 * XXH64 of the record seeded by the slot number, so a torn or misdirected read is detected).
 *
 * Commit (atomic): the changed rows are written to free slots (never over a slot the committed
 * index points to), the slot files are fdatasync'ed, then one SST file carrying the new index
 * entries, deletions and the catalog is ingested into RocksDB as a whole. Slots freed by the
 * commit are reused only by later commits. A crash before the ingestion leaves the previous commit
 * intact: its slots are untouched, and the free-slot bitmap is rebuilt from the index when the
 * folder is opened.
 *
 * The folder counts its commits in the index and in DIR/COMMIT.ctrbox, a record of its own written
 * after each commit; opening a folder whose index holds fewer commits than the record (RocksDB's
 * files damaged or truncated) is refused instead of rolling back.
 *
 * One process opens a folder for writing (an exclusive flock on DIR/LOCK.ctrbox); readers take a
 * shared lock, so a trainer and a reader exclude each other.
 */
#ifndef CTRBOX_EMBEDDING_TIER_H
#define CTRBOX_EMBEDDING_TIER_H

#include <stddef.h>
#include <stdint.h>

typedef struct emb_tier emb_tier;
struct emb_table;   /* table.h */

typedef struct {
    uint64_t rows_read, bytes_read;        /* fetches that found their row; bytes the reads covered */
    uint64_t reads;                        /* reads issued (one may serve several rows) */
    uint64_t map_hits, map_wrong;          /* slots the slot map gave; of those, another key's */
    uint64_t index_gets;                   /* keys looked up in the index (RocksDB) */
} emb_tier_stats;

/* A folder holds at most this many tables: its index names a key's table in one byte. */
#define EMB_TIER_MAX_TABLES 256

/* Open (creating if allowed) DIR for n_tables (at most EMB_TIER_MAX_TABLES) tables whose records have row_bytes[i] bytes.
 * `layout` names the model layout; a folder made for another layout is refused. index_cache:
 * bytes for the index in memory: a quarter holds the key filter (which keys the tier may hold),
 * seven eighths of the rest the slot map (the newest index entries, which spare most fetches a
 * RocksDB lookup), the rest RocksDB's block cache (with its index and filter blocks). 0, or <0 with
 * a one-line message in err.
 * A sharded folder (DIR/SHARDS.ctrbox and one folder per rank, embedding/shard.h) opens read-only
 * only, as one table: fetches and lookups go to each key's owner, scans merge the ranks' keys in
 * order, row counts add up; its commits are the job's (every rank must hold them), its id
 * emb_tier_shards_id of the ranks' ids. Writing to it is refused (the job writes each rank's). */
int emb_tier_open(emb_tier **out, const char *dir, int n_tables, const size_t *row_bytes, const char *layout,
                  int readonly, size_t index_cache, char *err, size_t errlen);
void emb_tier_close(emb_tier *t);
/* The id of a sharded folder whose ranks' folders have ids[0 .. ranks). */
uint64_t emb_tier_shards_id(const uint64_t *ids, int ranks);
const char *emb_tier_dir(const emb_tier *t);
/* 0 where the folder is read and written with io_uring; where io_uring is refused (a seccomp
 * profile, kernel.io_uring_disabled, a locked-memory limit the rings would pass), the -errno it
 * gave: the slots are then read with plain pread on reader threads, and written with plain pwrite
 * (slower). */
int emb_tier_plain_io(const emb_tier *t);
/* The folder's identity (random, made with it) and how many commits it holds: every commit,
 * a trainer's or a table tool's, adds one. A model file records both, so rows that changed
 * since it was saved are noticed. */
uint64_t emb_tier_id(const emb_tier *t);
uint64_t emb_tier_commits(const emb_tier *t);

/* The last committed catalog blob (malloc'ed, caller frees), or *blob = NULL if nothing is
 * committed yet. 0 or <0 with err. */
int emb_tier_catalog(emb_tier *t, void **blob, size_t *len, char *err, size_t errlen);
/* The last committed deletion record (as the catalog; NULL if none was committed). A batch given one
 * (set_deletions takes the malloc'ed blob) commits it with the catalog; a batch without keeps the
 * committed one: the record changes with shrink alone, and the catalog goes with every commit. */
int emb_tier_deletions(emb_tier *t, void **blob, size_t *len, char *err, size_t errlen);

/* Read the rows of n keys of table tb. For each key found, its record goes to out + i * row_bytes
 * and aux[i] = slot + 1; for a key the tier does not hold, aux[i] = 0. Thread-safe against a
 * concurrent commit for keys the commit does not touch, and against fetches from other threads (one
 * at a time). 0, or <0 with err (I/O error, corrupt
 * slot). */
int emb_tier_fetch(emb_tier *t, int tb, const uint64_t *keys, size_t n, uint8_t *out, uint64_t *aux, char *err,
                   size_t errlen);
/* The same, with the records of the keys found packed together in 4 MB chunks (in no
 * particular order): memory for the found keys only. emb_tier_packed_rec gives key i's record
 * (for a key found); emb_tier_packed_free releases them. */
typedef struct {
    struct emb_tier *pool;        /* the tier its chunks go back to: free it before closing that */
    uint8_t **chunk;
    size_t n_chunks, per_chunk;   /* records per chunk */
    size_t chunk_bytes;           /* of each chunk: PACK_CHUNK (tier.c), or one record when larger */
    uint32_t *pos;                /* per key: its record's number */
    size_t n;
} emb_tier_packed;
int emb_tier_fetch_packed(emb_tier *t, int tb, const uint64_t *keys, size_t n, emb_tier_packed *out, uint64_t *aux,
                          char *err, size_t errlen);
const uint8_t *emb_tier_packed_rec(const emb_tier_packed *p, size_t i, size_t row_bytes);
void emb_tier_packed_free(emb_tier_packed *p);

/* Index lookups only: aux[i] = slot + 1 of keys[i], or 0 if the tier does not hold it. */
int emb_tier_lookup(emb_tier *t, int tb, const uint64_t *keys, size_t n, uint64_t *aux, char *err, size_t errlen);

/* The rows of one table held by the tier, and its per-key counters, by iteration in key order:
 * calls fn for each key (stop early by returning nonzero). For shrink and the table tools. */
typedef int (*emb_tier_key_fn)(void *ctx, uint64_t key, uint64_t slot, float show, float click, uint32_t last_pass);
int emb_tier_scan(emb_tier *t, int tb, emb_tier_key_fn fn, void *ctx, char *err, size_t errlen);
/* Every row of table tb held by the last commit, in slot order, by one sequential pass over the
 * slot file (8 MB reads; memory bounded by that and the slot bitmap): calls fn with each record
 * (stop early by returning nonzero). Corrupt slots are errors (file, slot, byte offset). */
typedef int (*emb_tier_row_fn)(void *ctx, const void *rec);
int emb_tier_scan_rows(emb_tier *t, int tb, emb_tier_row_fn fn, void *ctx, char *err, size_t errlen);
uint64_t emb_tier_rows(emb_tier *t, int tb);
size_t emb_tier_row_bytes(const emb_tier *t, int tb);
int emb_tier_tables(const emb_tier *t);
/* The layout line the folder was made for (see emb_tier_open). */
const char *emb_tier_layout(const emb_tier *t);
uint64_t emb_tier_disk_bytes(emb_tier *t);

/* A commit being assembled (one at a time puts: emb_tier_begin refuses a second while one is
 * open). put: the record (a table row) is stored in a new slot; its header's aux is set to that
 * slot + 1 with EMB_ROW_CLEAN (the old slot, from the aux it had, is freed once the commit is
 * durable). del: the key is removed (aux: its slot + 1, or 0). */
typedef struct emb_tier_batch emb_tier_batch;
emb_tier_batch *emb_tier_begin(emb_tier *t);
/* Room for `puts` more puts (a caller that knows the count avoids growth headroom). */
void emb_tier_reserve(emb_tier_batch *b, size_t puts);
/* repack: when the free slots inside the pages of a table that still hold rows (this batch's
 * deletions counted; whole free pages go back to the file system, emb_tier_release, and cost no
 * disk) are over max_waste of its live rows, the rows of its sparsest 4 KB pages (the fewest live
 * rows that leave at most target_waste) are moved to its first runs of free slots, densely (puts
 * of this batch, which must hold no other put: the pages are read from the file), so that the
 * commit frees those pages whole. At most max_rows rows move in one batch (each costs the batch
 * about 50 bytes until its commit): *more says the repack stopped there, and the next batch's
 * repack goes on from that page with the same pages, whatever the waste. With compact, the commit
 * of the batch where a repack ends has RocksDB compact the index. moved(ctx, tb, key, slot1) (may be NULL) says each
 * move: a copy of the row in memory must take the new slot + 1 as its aux. *rows: the rows moved.
 * 0, or <0 with err (a corrupt slot, a read error). */
typedef void (*emb_tier_moved_fn)(void *ctx, int tb, uint64_t key, uint64_t slot1);
/* The most free slots below a slot file's end over its rows, of any table (whole free pages
 * counted, and the slots of commits not yet reclaimed): an upper bound of the waste a repack
 * measures, known without waiting for the commit in flight (with its slots, a slight underestimate). */
double emb_tier_free_share(emb_tier *t);
int emb_tier_repack(emb_tier_batch *b, double max_waste, double target_waste, int compact, uint64_t max_rows,
                    emb_tier_moved_fn moved, void *ctx, uint64_t *rows, int *more, char *err, size_t errlen);
/* put returns the bytes of the slot written (the row, its checksum and padding). */
size_t emb_tier_put(emb_tier_batch *b, int tb, void *rec);
/* The same for n distinct rows of table tb at once (the rows' images are made by the OpenMP
 * threads, the slots and writes are as n puts in that order would take them); returns the bytes.
 * check (NULL: none): the rows' table; the rows holding NaN or inf (emb_row_finite, read from
 * their images as they are made) are added to *nonfinite. */
size_t emb_tier_put_rows(emb_tier_batch *b, int tb, void *const *recs, size_t n, const struct emb_table *check,
                         size_t *nonfinite);
/* A batch seals its index changes every this many puts (put_rows seals between chunks of it): a
 * caller putting rows in chunks of this many makes the same batch as one call with them all */
#define EMB_TIER_SEAL_PUTS 65536
void emb_tier_del(emb_tier_batch *b, int tb, uint64_t key, uint64_t aux);
/* The batch's puts so far are written (their I/O completed) and fetches find them: their index
 * changes become a sealed segment, sorted by key, searched before the committed index (newest
 * segment first). A batch may stay open across passes' parts, sealed at each boundary: the rows that
 * leave memory are written to free slots as they go, and the commit only adds what it must. Only
 * the thread that puts seals; fetches run beside it only while it neither puts nor seals.
 * 0, or <0 with err (a write failed: the batch can only be aborted). */
int emb_tier_seal(emb_tier_batch *b, char *err, size_t errlen);
/* The batch takes no more puts: it is sealed, and fetches search it as the batch being committed
 * (after the open one) until its commit returns. It may then be committed on another thread while
 * a new batch begins. 0 or <0 with err, as emb_tier_seal. */
int emb_tier_finish(emb_tier_batch *b, char *err, size_t errlen);
/* Bytes the batch holds in memory while it is open (b may be NULL: 0): the slots it frees once
 * durable (8 bytes a put) and its index changes not yet sealed (its sealed segments are in a
 * temporary file); and what `puts` more puts before the next seal would add to them. */
size_t emb_tier_batch_bytes(const emb_tier_batch *b);
size_t emb_tier_batch_growth(const emb_tier_batch *b, size_t puts);
/* Make the batch and the catalog durable, atomically (catalog NULL: the committed one stays).
 * It finishes the batch first: a batch committed on another thread than its puts' must be
 * finished before it is handed over. Fetches find its rows meanwhile, and a new batch may begin
 * and put.
 * 0 or <0 with err; the batch is freed either way. After a failure the tier refuses further commits (the last commit stays intact). */
int emb_tier_commit(emb_tier_batch *b, const void *catalog, size_t len, char *err, size_t errlen);
/* A commit in two phases, for several folders (one per process of a job) that commit one pass
 * together. emb_tier_prepare does all of emb_tier_commit (catalog required) but the last step: the
 * batch's index changes and the catalog wait, durable, in DIR/prepared-<commit>.sst, outside the
 * index (fetches find the batch meanwhile). Then emb_tier_publish adds them to the index (the
 * commit counts), or emb_tier_discard deletes them (the folder keeps its last commit and refuses
 * further ones). A crash, or emb_tier_close, between the two leaves the file: after the next open,
 * emb_tier_resolve_prepared publishes it if its commit is `want` (the one every folder prepared,
 * as the job recorded), else deletes it; *published says which (then close and open the folder
 * again to read it as committed). 0 or <0 with err. */
int emb_tier_prepare(emb_tier_batch *b, const void *catalog, size_t len, char *err, size_t errlen);
int emb_tier_publish(emb_tier *t, char *err, size_t errlen);
void emb_tier_discard(emb_tier *t);
int emb_tier_resolve_prepared(emb_tier *t, uint64_t want, int *published, char *err, size_t errlen);
/* The slots that durable commits freed become free to put into: called by the thread that puts,
 * at its own pace. emb_tier_settle does it too and frees the batches committed since (when no
 * fetch reads them); emb_tier_begin settles first. emb_tier_release settles and gives the file
 * system back the space of the rows deleted or moved since (holes punched, the free end of the
 * file cut off); emb_tier_close releases (the thread that puts calls both). */
void emb_tier_reclaim(emb_tier *t);
void emb_tier_settle(emb_tier *t);
void emb_tier_release(emb_tier *t);

void emb_tier_set_deletions(emb_tier_batch *b, void *blob, size_t len);

/* Drop a batch without committing (its slots are free again at the next open; a batch that put
 * or deleted anything leaves the tier refusing further commits, an empty one does not). */
void emb_tier_abort(emb_tier_batch *b);

emb_tier_stats emb_tier_get_stats(emb_tier *t);

/* The tier's memory, by part (bytes): the slot map and the key filter (fixed at open), what
 * RocksDB reports of its block cache, its table readers (index and filter blocks outside the
 * cache) and its memtables, the slot files' bitmaps (a bit a slot, grown an eighth ahead, and
 * a bit a page punched: they grow with the files), and the spare chunks kept for the next packed
 * fetch (at most the last one's). Any thread may ask. */
typedef struct {
    uint64_t slot_map, filter, block_cache, table_readers, memtables, slot_bits, fetch_spare;
} emb_tier_mem;
emb_tier_mem emb_tier_memory(emb_tier *t);

/* Tests only: the slot map's narrow layout holds slots below 2^bits (24 unless set; 1 to 24), so
 * that a small table reaches the wide layout. Call before the first commit. */
void emb_tier_debug_map_slot_bits(emb_tier *t, int bits);
/* Tests only: 1 when RocksDB's own compactions are on (an epoch's repack holds them off until the
 * full compaction after its last commit). */
int emb_tier_debug_auto_compactions(emb_tier *t);
/* Tests only: the zeros ahead of the slot files' ends are written by the writing thread itself,
 * as when the zero filler's thread cannot start. Call before the first put. */
void emb_tier_debug_no_filler(emb_tier *t);

#endif
