/*
 * tier.c: the SSD tier (see tier.h).
 *
 * RocksDB keys: "m" -> the folder's layout line; "c" -> the catalog blob; "g" -> the folder's id
 * and its commit count; 'k' table key(8, big endian) -> {u64 slot, f32 show, f32 click, u32
 * last_pass}. DIR/COMMIT.ctrbox records the same id and count outside RocksDB, written after each
 * commit: at open the two must agree (or the file be one behind: a crash between the two), so an
 * index that lost commits (a damaged MANIFEST) is refused instead of silently rolling back.
 * The free-slot bitmap of each table is rebuilt from the index at open; a commit allocates slots in
 * increasing order, so rows rewritten every pass settle into long runs and write-back is mostly
 * sequential.
 */
#define _GNU_SOURCE
#include "tier.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <liburing.h>
#include <pthread.h>
#include <rocksdb/c.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../io/mix.h"
#include "../io/util.h"
#include "shard.h"
#include "table.h"

#define SLOT_MAGIC "CTRBXSLT"
#define SLOT_VERSION 1u
#define HEADER_BYTES 4096
#define TIER_VERSION "ctrbox-tier 2"   /* 2: the commit record */
#define COMMIT_FILE "COMMIT.ctrbox"
#define COMMIT_MAGIC "CTRBXCMT"
#define COMMIT_VERSION 1u
#define FETCH_DEPTH 64    /* reads in flight (SPAN_BYTES each) */
#define WRITE_DEPTH 128   /* writes in flight */
#define PLAIN_DEPTH 16   /* plain reads in flight where io_uring is refused: a reader thread each */
#define GET_CHUNK 128
#define WRITE_BUF (4u << 20)   /* two of them: one fills while the other's writes complete */
#define PACK_CHUNK (4u << 20)  /* the bytes of a chunk of packed fetched rows */
#define MIN_RUN 16
#define SMAP_WAYS 10   /* entries in a set of the wide layout: one cache line (smap_line) */
#define SMAP_NARROW 16 /* entries in a set of the narrow layout */
/* A fetch read covers at most SPAN_BYTES (a read buffer), and crosses at most half of that in
 * unwanted slots between two wanted ones. In these VMs the kernel's cost is per read more than per
 * byte: spans of 32 KB with gaps of up to 16 KB (instead of 16 KB and 7 slots) took the end-to-end
 * bench's 4.6M rows in 2.17M reads (3.92M before) and the fetch thread's CPU in its reads from
 * 8.5-9.0 to 5.5-6.1 s (fourteenth session); 64 KB and 32 KB take them in 1.60M reads (2.22M),
 * 28 GB read (14.5), and the fetch thread's CPU from 17.8 to 15.8 s (twenty-first session);
 * 128 KB and 64 KB, with half as many buffers (the same 8 MB), in 1.04M reads, 51 GB read, and
 * the fetch's CPU from 16.0-17.0 to 13.5-14.6 s on a Zen 3 (thirty-fifth session;
 * docs/performance.md). Where the locked-memory limit refuses FETCH_DEPTH buffers of SPAN_BYTES,
 * they are of half the size (tier_open). */
#define SPAN_BYTES (128u << 10)
#define PLAIN_SPAN (256u << 10)  /* a plain read's buffer, where io_uring is refused */
#define BLOCK_BYTES 512u         /* the unit of direct I/O: slots smaller than it share one */

/* The slot of a record of row_bytes (and its 8-byte checksum): the next power of two from 64 up to
 * a block, several blocks above that. Slot files of the first layout (one block or more a slot
 * whatever the row) open with the slot size their header records. */
static size_t slot_size(size_t row_bytes)
{
    size_t need = row_bytes + 8, sb = 64;
    if (need > BLOCK_BYTES) return (need + BLOCK_BYTES - 1) / BLOCK_BYTES * BLOCK_BYTES;
    while (sb < need) sb *= 2;
    return sb;
}

static uint64_t round_up(uint64_t v, uint64_t k) { return (v + k - 1) / k * k; }

typedef struct {
    int fd;
    int direct;
    size_t row_bytes, slot_bytes;
    uint64_t blk;            /* slots per block: a read or write covers whole blocks of BLOCK_BYTES */
    uint64_t repack_at;      /* the slot a repack cut short by its row limit goes on from (0: none) */
    uint64_t repack_live;    /* and the live rows of the pages it moves, at most */
    uint64_t *bits;          /* used slots */
    uint64_t words, hwm;     /* bitmap words; slots in use or ever allocated: [0, hwm) */
    uint64_t rows;           /* keys held */
    uint64_t cursor;         /* allocation cursor of the commit being assembled */
    int in_run;              /* the cursor is inside a run of free slots */
    uint64_t free_slots;     /* free slots below hwm */
    uint64_t backed;         /* bytes of the file that were written once (zeros or rows), but for punched pages
                              * (changed under the tier's zmu, read without it: atomic) */
    uint64_t zwant;          /* the zero filler writes zeros from backed up to here (zmu) */
    int zbusy, zerr;         /* it is writing past backed; its last write failed (-errno) (zmu) */
    uint64_t *punched;       /* 4 KB pages below backed given back to the file system (holes), a bit each */
    uint64_t punched_words, n_punched;
} slot_file;

struct emb_tier {
    /* a sharded folder read as one (open_sharded): its ranks' folders; the rest is unused but
     * dir, n, layout, id and gen */
    struct emb_tier **sub;
    int n_sub;
    char *dir;
    int n, readonly, lockfd, failed;
    char failmsg[700];       /* why further commits are refused (failed) */
    uint64_t id, gen;        /* the folder's id and its commits so far (the "g" record) */
    uint64_t side_gen[2];    /* the commit whose file holds the catalog, the deletion record (0: in the index) */
    struct emb_tier_batch *prepared;   /* a commit prepared, not yet published (emb_tier_prepare) */
    int stale;               /* a prepared commit was published at open: the slot state in memory is older */
    slot_file *sf;
    char *layout;            /* the layout line's model part */
    uint64_t *filt, filt_words;   /* the key filter (power of two words) */
    union smap_line *smap;        /* the slot map: smap_sets sets */
    uint64_t smap_sets;
    int smap_wide;                /* its layout (smap_line); changed only under smap_mu */
    int smap_tb_bits;             /* the wide layout's fingerprint bits that name the table (smap_fp) */
    int smap_sb;                  /* the narrow layout's slot bits (24; fewer in tests) */
    pthread_mutex_t smap_mu;
    int smap_waiting;        /* fetches waiting for smap_mu (a commit's update of the map lets them in) */
    uint64_t index_gets;     /* emb_tier_stats' (atomic: fetches and lookups count them without mu) */
    rocksdb_t *db;
    rocksdb_column_family_handle_t *cf;
    rocksdb_options_t *opt;
    rocksdb_cache_t *cache;
    rocksdb_block_based_table_options_t *bopt;
    rocksdb_readoptions_t *ro;
    rocksdb_writeoptions_t *wo;
    int auto_off;            /* RocksDB's own compactions held off: an epoch's repack is under way */
    struct io_uring ring;    /* fetch reads (one fetch at a time: fetch_mu) */
    pthread_mutex_t fetch_mu;   /* the ring and its read buffers: the trainer's evaluation and the
                                 * prefetch thread may fetch at once */
    struct io_uring wring;   /* commit writes (another thread may fetch meanwhile); only the open batch writes */
    /* the zero filler (zfill_main), started with the first write that needs it */
    pthread_t zth;
    int zth_on, zstop;       /* zth_on: 1 running, -1 could not start (back_space writes the zeros) */
    pthread_mutex_t zmu;
    pthread_cond_t zcv;
    uint8_t *wbuf[2];        /* the open batch's write buffers */
    uint8_t *zeros;          /* WRITE_BUF of zeros, to back a file's new space before rows go there */
    /* Fetches search the sealed segments of the open batch, then of the batch being committed,
     * before the index (atomic pointers). A batch committed or dropped is retired: freed only when
     * no fetch can be reading it (emb_tier_settle). */
    emb_tier_batch *open, *committing;
    pthread_mutex_t rec_mu;  /* what durable commits free, until the thread that puts takes it (emb_tier_reclaim) */
    uint64_t *rec;           /* freed entries (see freed_make) */
    size_t n_rec, cap_rec;
    int rec_release;         /* a commit deleted or moved rows: emb_tier_release gives back free space */
    emb_tier_batch *retired;
    int fetching;            /* fetches and lookups under way (atomic; see batch_retire) */
    int rings;               /* ring and wring were made; 0: plain pread and pwrite */
    int ring_err;            /* why not (-errno from io_uring_queue_init) */
    struct plain_pool *pool; /* without rings: the threads that read */
    uint8_t *rbuf;           /* FETCH_DEPTH aligned read buffers, registered with the ring (PLAIN_DEPTH without) */
    size_t rbuf_slot;        /* bytes of one */
    int fixed;               /* rbuf and the slot files are registered with ring */
    pthread_mutex_t mu;      /* stats, and the chunks below */
    emb_tier_stats st;
    /* Chunks of packed fetches (PACK_CHUNK bytes) given back, for the next fetch: freed, they went
     * back to the system and the next fetch faulted them in again a page at a time (two fifths more
     * minor faults in the end-to-end bench's tier run, docs/performance.md). At most as many as
     * the last fetch given back had (chunks_back). */
    uint8_t **spare;
    size_t n_spare, cap_spare;
};

typedef struct {
    uint64_t slot;
    float show, click;
    uint32_t last_pass;
} __attribute__((packed)) idx_val;

typedef struct {
    int tb;
    uint64_t first, n;       /* slots [first, first + n) */
    size_t off;              /* their images in the batch buffer */
} run;

/* An index change of a batch; its RocksDB key is idx_key(tb, key). Batches sort them by (tb, key). */
typedef struct {
    uint64_t key;
    uint8_t tb;
    uint8_t del;
    idx_val v;
} __attribute__((packed)) ientry;

/* A sealed segment of a batch: its index changes sorted by (table, key), in the batch's spill
 * file, never changed after (fetches read it while the batch puts on, and while it is committed). */
typedef struct seg {
    struct seg *older;       /* the segment sealed before it, or NULL */
    size_t n;                /* entries */
    uint64_t off;            /* their place in the spill file */
    size_t tb_at[];          /* (tables + 1) where each table's entries begin */
} seg;

#define SEG_CHUNK 2048       /* the entries a segment reader holds (60 KB) */
#define SEAL_CHUNK EMB_TIER_SEAL_PUTS   /* puts a batch holds unsealed at most (2 MB of index changes) */

/* A slot to free once the commit is durable: its table in the top 16 bits, slot + 1 below. */
typedef uint64_t freed;
static inline freed freed_make(int tb, uint64_t slot1) { return (uint64_t)tb << 48 | slot1; }
static inline int freed_tb(freed f) { return (int)(f >> 48); }
static inline uint64_t freed_slot1(freed f) { return f & ((1ull << 48) - 1); }

/* Slot images go to one of two write buffers; a full buffer's writes are submitted and the other
 * one fills while they complete (it waits only for the writes it submitted two flushes ago).
 * A batch may stay open while a pass's parts train: its puts (rows leaving memory) are written as
 * they come, to free slots only, and sealed at each part's boundary (emb_tier_seal): their index
 * changes then form a segment sorted by key, which fetches search (newest segment first) before
 * the committed index. The commit merges the segments (a key's newest entry stands). */
struct emb_tier_batch {
    emb_tier *t;
    int cur;                 /* the buffer being filled */
    uint8_t *buf[2];         /* slot images waiting to be written, or being written (the tier's wbuf) */
    size_t buf_used[2];
    run *runs[2];            /* their runs of consecutive slots */
    size_t n_runs[2], cap_runs[2];
    int inflight[2];         /* writes submitted from each buffer and not completed */
    freed *fr;
    size_t n_fr, cap_fr;
    size_t n_deleted;        /* rows deleted (their slots freed with no new copy) */
    size_t n_moved;          /* rows moved by emb_tier_repack */
    size_t n_placed;         /* puts placed (slots taken), moves counted */
    int repack_done;         /* a repack ended in this batch: the index is compacted after it */
    void *drec;              /* the deletion record to commit with it ("d"), or NULL: the committed one stays */
    size_t drec_len;
    ientry *ie;              /* index changes not yet sealed */
    size_t n_ie, cap_ie;
    struct seg *newest;      /* the sealed segments, newest first (atomic: fetches walk them) */
    size_t n_segs, seg_bytes;
    int spill_fd;            /* their entries (-1: none yet) */
    uint64_t spill_end;
    emb_tier_batch *next_retired;
    uint8_t *written;        /* (tables) the batch wrote to the slot file */
    int64_t *row_delta;      /* per table */
    int err;                 /* first write error (-errno) */
    char errmsg[512];
};

static int open_lookup(emb_tier *t, int tb, const uint64_t *keys, size_t n, uint64_t *aux, uint8_t *found, char *err,
                       size_t errlen);
static int spill_open(emb_tier_batch *b, char *err, size_t errlen);
static int commit_complete(emb_tier_batch *b, int ret, int empty, int catalog, const char *path, int keep_side,
                           char *err, size_t errlen);
static void release_free(emb_tier *t, slot_file *s);

static void idx_key(uint8_t out[10], int tb, uint64_t key)
{
    out[0] = 'k';
    out[1] = (uint8_t)tb;
    for (int b = 0; b < 8; b++) out[2 + b] = (uint8_t)(key >> (56 - 8 * b));
}

static uint64_t key_of_idx(const uint8_t *k)
{
    uint64_t key = 0;
    for (int b = 0; b < 8; b++) key = key << 8 | k[2 + b];
    return key;
}


static void set_bit(slot_file *s, uint64_t slot)
{
    uint64_t w = slot >> 6;
    if (w >= s->words) {
        /* an eighth more than the slot needs, in steps of 1024 words, not twice: the bitmap lies
         * outside --cache-mb and grows with the file (at 70M slots, the 20 GB bench table's, a
         * doubling took it from 8 to 16 MB: docs/performance.md) */
        uint64_t n = (w + 1 + (w + 1) / 8 + 1023) & ~(uint64_t)1023;
        s->bits = xrealloc(s->bits, n * 8);
        memset(s->bits + s->words, 0, (n - s->words) * 8);
        __atomic_store_n(&s->words, n, __ATOMIC_RELAXED);   /* emb_tier_memory reads it from any thread */
    }
    s->bits[w] |= 1ull << (slot & 63);
    if (slot >= s->hwm) s->hwm = slot + 1;
}

static void clear_bit(slot_file *s, uint64_t slot)
{
    if ((slot >> 6) < s->words && (s->bits[slot >> 6] >> (slot & 63) & 1)) {
        s->bits[slot >> 6] &= ~(1ull << (slot & 63));
        s->free_slots++;
    }
}

static int slot_free(const slot_file *s, uint64_t i)
{
    return i >= s->hwm || !((s->bits[i >> 6] >> (i & 63)) & 1);
}

/* the lowest free slot at or after i (hwm if none below it) */
static uint64_t next_free(const slot_file *s, uint64_t i)
{
    while (i < s->hwm) {
        uint64_t w = s->bits[i >> 6] | ((1ull << (i & 63)) - 1);
        if (w != ~0ull) {
            uint64_t cand = (i & ~63ull) + (uint64_t)__builtin_ctzll(~w);
            return cand < s->hwm ? cand : s->hwm;
        }
        i = (i & ~63ull) + 64;
    }
    return s->hwm;
}

/* The blocks of bitmap word w wholly free: bit b set for the first slot of each free block (blocks
 * of k slots, k a power of two up to 64, lie within words). */
static uint64_t free_blocks(const slot_file *s, uint64_t w)
{
    uint64_t m = w < s->words ? ~s->bits[w] : ~0ull, k = s->blk;
    for (uint64_t sh = 1; sh < k; sh *= 2) m &= m >> sh;   /* bit b: slots b .. b + k - 1 all free */
    uint64_t first = k < 64 ? ~0ull / ((1ull << k) - 1) : 1;   /* bit 0 of every k: each block's first slot */
    return m & first;
}

/* the first slot of the lowest wholly free block at or after slot i (block-aligned), or hwm
 * rounded up to a block if none is below it: a word of the bitmap at a time */
static uint64_t next_free_block(const slot_file *s, uint64_t i)
{
    uint64_t end = round_up(s->hwm, s->blk);
    i = round_up(i, s->blk);
    while (i < end) {
        uint64_t m = free_blocks(s, i >> 6) & ~((1ull << (i & 63)) - 1);
        if (m) {
            uint64_t cand = (i & ~63ull) + (uint64_t)__builtin_ctzll(m);
            return cand < end ? cand : end;
        }
        i = (i & ~63ull) + 64;
    }
    return end;
}

/* the lowest slot in use at or after i, or hwm */
static uint64_t next_used(const slot_file *s, uint64_t i)
{
    while (i < s->hwm) {
        uint64_t m = (i >> 6) < s->words ? s->bits[i >> 6] & ~((1ull << (i & 63)) - 1) : 0;
        if (m) {
            uint64_t cand = (i & ~63ull) + (uint64_t)__builtin_ctzll(m);
            return cand < s->hwm ? cand : s->hwm;
        }
        i = (i & ~63ull) + 64;
    }
    return s->hwm;
}

/* The next slot of the commit: slots go in increasing order, through runs of at least MIN_RUN
 * free slots (or the end of the file); shorter holes wait until their neighbours free up, so
 * the writes stay long and sequential. The search goes a bitmap word at a time: a file of many
 * partly used blocks is crossed once a commit, not a block at a time for every row. */
static int block_free(const slot_file *s, uint64_t i)
{
    for (uint64_t j = i; j < i + s->blk; j++)
        if (!slot_free(s, j)) return 0;
    return 1;
}

static uint64_t alloc_slot(slot_file *s)
{
    uint64_t i = s->cursor, k = s->blk;
    if (i % k && s->in_run) {   /* the rest of a block this commit took whole */
        CHECK(slot_free(s, i));
    } else {
        /* only runs: holes between rows in use are left to the repack (emb_tier_repack), which
         * frees whole pages; filling them one block at a time made a write of every block, the
         * commit's main cost on a fragmented file (docs/performance.md) */
        uint64_t min_run = MIN_RUN * k;
        i = round_up(i, k);
        if (!(s->in_run && block_free(s, i))) {
            for (;;) {
                i = next_free_block(s, i);
                if (i >= s->hwm) break;
                uint64_t used = next_used(s, i);   /* the free run from i ends at the block holding it */
                if (used >= s->hwm || used / k * k - i >= min_run) break;
                i = used / k * k + k;   /* past the block in use */
            }
            s->in_run = 1;
        }
    }
    if (i > s->hwm) s->free_slots += i - s->hwm;   /* a block's unused tail before it, from an earlier commit */
    if (i < s->hwm) s->free_slots--;
    set_bit(s, i);
    s->cursor = i + 1;
    return i;
}

/* ---- the key filter: which keys the tier may hold ----
 * A register-blocked Bloom filter (4 bits in one 64-bit word per key) over every key of every
 * table, built from the index at open and fed by commits, so a fetch skips the index lookups of
 * keys never stored (most of a pass's keys on long-tailed data). It takes a quarter of the index's
 * memory (a power of two bytes, 64 KB at least: inside --cache-mb); past 16 bits a key its false
 * positives grow, and cost lookups only (at 8 bits a key, 2.4% of the keys never stored).
 * Bits are set and read with relaxed atomics: a commit adds keys while another thread fetches. */

static uint64_t filter_hash(int tb, uint64_t key) { return mix64(key ^ (0x9e3779b97f4a7c15ull * (uint64_t)(tb + 1))); }

static uint64_t filter_mask(uint64_t h)
{
    return 1ull << (h & 63) | 1ull << (h >> 6 & 63) | 1ull << (h >> 12 & 63) | 1ull << (h >> 18 & 63);
}

static void filter_add(emb_tier *t, int tb, uint64_t key)
{
    uint64_t h = filter_hash(tb, key);
    __atomic_fetch_or(&t->filt[(h >> 32) & (t->filt_words - 1)], filter_mask(h), __ATOMIC_RELAXED);
}

/* Hint that key's word will be read (write 0) or set (1) soon. The filter is megabytes: a lookup
 * there is a cache miss, and the locked OR of filter_add on a word not in the cache waits for it
 * with nothing else under way (nine tenths of a put's image, docs/performance.md). Always inlined,
 * as key_map_prefetch (io/keymap.h). */
__attribute__((always_inline)) static inline void filter_prefetch(emb_tier *t, int tb, uint64_t key, int write)
{
    const uint64_t *w = &t->filt[(filter_hash(tb, key) >> 32) & (t->filt_words - 1)];
    if (write) __builtin_prefetch(w, 1);
    else __builtin_prefetch(w, 0);
}

static int filter_may_hold(emb_tier *t, int tb, uint64_t key)
{
    uint64_t h = filter_hash(tb, key), m = filter_mask(h);
    return (__atomic_load_n(&t->filt[(h >> 32) & (t->filt_words - 1)], __ATOMIC_RELAXED) & m) == m;
}

/* ---- the slot map: where recently committed keys are ----
 * A cache of the index's newest entries, in a share of the index's memory, so most fetches skip
 * the RocksDB lookup (which was half a fetch's CPU). Sets of entries (one cache line), newest
 * first; an entry is a fingerprint of (table, key) and a slot. It is written only once a commit is
 * durable (each put, in commit order, replaces the entry with the key's fingerprint; a deletion
 * removes it), so a key's entry, when there is one, is the index's own slot. Two keys of a table
 * can share a fingerprint: a fetch that finds another key in the slot asks the index (fetch_into).
 * Two keys of different tables never do: the slot would be one of the other table's file, where an
 * older image of the key (freed, not yet written over) could be, and pass slot_holds (a stale row).
 * So a fingerprint names its table: the narrow layout serves one table only, and the wide layout's
 * fingerprints begin with the table's number (smap_fp). */

/* A set, in one of two layouts (the whole map has one: t->smap_wide), newest first:
 * - narrow, in a tier of one table (see emb_tier_open), while every slot put is below 2^24
 *   (2^smap_sb): SMAP_NARROW entries of 32 bits, an 8-bit fingerprint above a 24-bit slot (0: empty). Four bytes an entry, sixteen a set instead
 *   of ten: in the end-to-end bench (8.3M keys, the cache at 10%) the map located 0.72-0.75 of the
 *   rows read instead of 0.70-0.71, and the trainer's waits for the fetch fell from 1.6-2.6 s to
 *   0.02-0.31 s (docs/performance.md, sixteenth session). An 8-bit fingerprint matches another
 *   key's in up to one in 16 lookups of a full set: that fetch reads a slot for nothing and asks
 *   the index (about 1% of the rows read in that bench).
 * - wide, in a tier of several tables, or from the first slot past 2^24 on (the map is emptied
 *   then): SMAP_WAYS entries of a 16-bit fingerprint (0: empty) and a 32-bit slot. With one table a
 *   fingerprint matches another key's about once in 6,500 lookups of a full set; with 2^k tables
 *   (k = smap_tb_bits) the table takes k of its bits, and such matches (of one table's keys) are
 *   2^k times likelier. */
typedef union smap_line {
    struct {
        uint16_t fp[SMAP_WAYS];
        uint32_t slot[SMAP_WAYS];
        uint32_t pad;
    } w;
    uint32_t n[SMAP_NARROW];
} smap_line;
_Static_assert(sizeof(smap_line) == 64, "a slot map set is one cache line");

/* The set of (tb, key), and its hash for smap_fp */
static smap_line *smap_where(const emb_tier *t, int tb, uint64_t key, uint64_t *h)
{
    *h = filter_hash(tb, key);
    return &t->smap[((*h & 0xffffffffu) * t->smap_sets) >> 32];
}

/* The fingerprint of table tb's key of hash h in the map's layout, never 0 (0 is an empty entry):
 * narrow (one table), the hash's top 32 - smap_sb bits; wide, 16 bits: the table's number in the
 * top smap_tb_bits, then the hash's top bits */
static uint32_t smap_fp(const emb_tier *t, int tb, uint64_t h)
{
    if (!t->smap_wide) {
        uint32_t fp = (uint32_t)(h >> (32 + t->smap_sb));
        return fp ? fp : 1;
    }
    uint32_t fp = (uint32_t)(h >> (48 + t->smap_tb_bits));
    return (uint32_t)tb << (16 - t->smap_tb_bits) | (fp ? fp : 1);
}

/* slot + 1 of (tb, key) if the map has its fingerprint, else 0 (caller holds smap_mu) */
static uint64_t smap_get(const emb_tier *t, int tb, uint64_t key)
{
    uint64_t h;
    if (!t->smap_sets) return 0;
    const smap_line *set = smap_where(t, tb, key, &h);
    uint32_t fp = smap_fp(t, tb, h);
    if (!t->smap_wide) {
        for (int w = 0; w < SMAP_NARROW && set->n[w]; w++)
            if (set->n[w] >> t->smap_sb == fp) return (uint64_t)(set->n[w] & ((1u << t->smap_sb) - 1)) + 1;
        return 0;
    }
    for (int w = 0; w < SMAP_WAYS && set->w.fp[w]; w++)
        if (set->w.fp[w] == fp) return (uint64_t)set->w.slot[w] + 1;
    return 0;
}

/* the fingerprint of entry w of set (0: empty) */
static uint32_t smap_fp_at(const emb_tier *t, const smap_line *set, int w)
{
    return t->smap_wide ? set->w.fp[w] : set->n[w] >> t->smap_sb;
}

/* n entries of set move one place: those from w on to one later (up = 0: the one after them is
 * overwritten), or those after w to one earlier (up = 1: entry w is overwritten). */
static void smap_shift(const emb_tier *t, smap_line *set, int w, int n, int up)
{
    if (n <= 0) return;
    if (!t->smap_wide) {
        memmove(set->n + w + !up, set->n + w + up, (size_t)n * sizeof *set->n);
        return;
    }
    memmove(set->w.fp + w + !up, set->w.fp + w + up, (size_t)n * sizeof *set->w.fp);
    memmove(set->w.slot + w + !up, set->w.slot + w + up, (size_t)n * sizeof *set->w.slot);
}

/* (tb, key) now at slot (put), or gone (slot1 == 0) (caller holds smap_mu). A put replaces the
 * entry with its fingerprint, so a set never holds two: none is left behind with a stale slot. */
static void smap_set(emb_tier *t, int tb, uint64_t key, uint64_t slot1)
{
    if (!t->smap_sets) return;
    if (slot1 && slot1 - 1 > UINT32_MAX) {   /* past what an entry holds: the index answers for this key */
        smap_set(t, tb, key, 0);
        return;
    }
    if (!t->smap_wide && slot1 > (1u << t->smap_sb)) {   /* the wide layout from now on */
        memset(t->smap, 0, t->smap_sets * sizeof *t->smap);
        t->smap_wide = 1;
    }
    uint64_t h;
    smap_line *set = smap_where(t, tb, key, &h);
    uint32_t fp = smap_fp(t, tb, h);
    int ways = t->smap_wide ? SMAP_WAYS : SMAP_NARROW, w = 0;
    while (w < ways - 1 && smap_fp_at(t, set, w) && smap_fp_at(t, set, w) != fp) w++;   /* its entry, or the oldest */
    if (slot1 == 0) {
        if (smap_fp_at(t, set, w) == fp) {
            smap_shift(t, set, w, ways - 1 - w, 1);
            if (t->smap_wide) set->w.fp[ways - 1] = 0;
            else set->n[ways - 1] = 0;
        }
        return;
    }
    smap_shift(t, set, 0, w, 0);
    if (t->smap_wide) {
        set->w.fp[0] = (uint16_t)fp;
        set->w.slot[0] = (uint32_t)(slot1 - 1);
    } else {
        set->n[0] = fp << t->smap_sb | (uint32_t)(slot1 - 1);
    }
}

static int fail(char *err, size_t errlen, int code, const char *fmt, const char *a, const char *b)
{
    snprintf(err, errlen, fmt, a, b);
    return code;
}

/* fail, with any arguments */
static int failf(char *err, size_t errlen, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int failf(char *err, size_t errlen, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return code;
}

static void put_u64s(uint8_t *out, uint64_t a, uint64_t b)
{
    memcpy(out, &a, 8);
    memcpy(out + 8, &b, 8);
}

/* ---- the catalog and the deletion record, in files of their own ----
 * They are megabytes (the dense state and its moments, the admission sketch; every key shrink
 * ever deleted). Stored as values in a commit's SST file, each commit's copy stayed in RocksDB's
 * block cache, over its capacity, until a compaction dropped the file (217 MB against 1 MB with
 * --min-show 2). So a commit writes the record durably to DIR/<name>.<commit> first, and its SST
 * file holds a pointer to it: SIDE_MAGIC, u32 version 1, u32 0, u64 commit, u64 bytes, u64 XXH64
 * of the bytes. The file: SIDE_FILE_MAGIC, u32 version 1, u32 0, u64 folder id, u64 commit,
 * u64 bytes, u64 XXH64 of those 40 bytes, then the record. A file no pointer names (a commit that
 * did not happen, or one superseded) is deleted at open and after the next commit. Values that are
 * not pointers are records themselves (folders written before). */

#define SIDE_MAGIC "CTRBXSDP"
#define SIDE_FILE_MAGIC "CTRBXSDF"
static const char *const side_name[2] = { "catalog", "deletions" };
static const char side_key[2] = { 'c', 'd' };

static void side_path(const emb_tier *t, int which, uint64_t gen, char *path, size_t n)
{
    snprintf(path, n, "%s/%s.%llu", t->dir, side_name[which], (unsigned long long)gen);
}

/* The record to DIR/<name>.<gen>, durably, and its pointer into ptr. 0 or -1 (said in err). */
static int side_write(emb_tier *t, int which, uint64_t gen, const void *blob, size_t len, uint8_t ptr[40],
                      char *err, size_t errlen)
{
    char path[4096];
    side_path(t, which, gen, path, sizeof path);
    uint8_t h[48] = { 0 };
    uint32_t v = 1;
    memcpy(h, SIDE_FILE_MAGIC, 8);
    memcpy(h + 8, &v, 4);
    put_u64s(h + 16, t->id, gen);
    uint64_t n = len, sum = XXH64(blob, len, 0);
    memcpy(h + 32, &n, 8);
    uint64_t hs = XXH64(h, 40, 0);
    memcpy(h + 40, &hs, 8);
    memset(ptr, 0, 40);
    memcpy(ptr, SIDE_MAGIC, 8);
    memcpy(ptr + 8, &v, 4);
    put_u64s(ptr + 16, gen, n);
    memcpy(ptr + 32, &sum, 8);
    durable_file d;
    int r = durable_open(&d, path);
    if (r == 0 && (fwrite(h, 1, sizeof h, d.f) != sizeof h || fwrite(blob, 1, len, d.f) != len)) {
        r = -(errno ? errno : EIO);
        durable_abort(&d);
    } else if (r == 0) {
        r = durable_commit(&d);
    }
    return r < 0 ? fail(err, errlen, r, "%s: cannot write: %s", path, strerror(-r)) : 0;
}

/* The gen a pointer value names, or 0 when the value is a record itself (or none). */
static uint64_t side_gen_of(const char *v, size_t vl)
{
    uint64_t gen = 0;
    if (v && vl == 40 && !memcmp(v, SIDE_MAGIC, 8)) memcpy(&gen, v + 16, 8);
    return gen;
}

/* The record a pointer value names, read and checked: 0 (*blob malloc'd), or <0 (said in err). */
static int side_read(emb_tier *t, int which, const char *ptr, void **blob, size_t *len, char *err, size_t errlen)
{
    uint64_t gen, n, sum;
    uint32_t v;
    memcpy(&v, ptr + 8, 4);
    memcpy(&gen, ptr + 16, 8);
    memcpy(&n, ptr + 24, 8);
    memcpy(&sum, ptr + 32, 8);
    char path[4096];
    side_path(t, which, gen, path, sizeof path);
    if (v != 1) return failf(err, errlen, -EBADMSG, "%s: the index names a %s of version %u (this build reads 1)", path, side_name[which], v);
    FILE *f = fopen(path, "rb");
    if (!f) {
        int en = errno;
        snprintf(err, errlen, "%s: cannot open the %s the index names: %s", path, side_name[which], strerror(en));
        return -en;
    }
    int ret = 0;
    char *b = NULL;
    uint8_t h[48];
    if (fread(h, 1, sizeof h, f) != sizeof h) {
        ret = failf(err, errlen, -EBADMSG, "%s: truncated at byte 0 (a header of 48 bytes)", path);
    } else {
        uint64_t hs;
        memcpy(&hs, h + 40, 8);
        uint64_t id, g, nn;
        memcpy(&id, h + 16, 8);
        memcpy(&g, h + 24, 8);
        memcpy(&nn, h + 32, 8);
        if (memcmp(h, SIDE_FILE_MAGIC, 8) || XXH64(h, 40, 0) != hs)
            ret = failf(err, errlen, -EBADMSG, "%s: not a %s file, or its header is damaged (checksum at byte 40)", path, side_name[which]);
        else if (id != t->id || g != gen || nn != n)
            ret = failf(err, errlen, -EBADMSG, "%s: of folder %016llx, commit %llu, %llu bytes; the index names folder %016llx, "
                       "commit %llu, %llu bytes", path, (unsigned long long)id, (unsigned long long)g, (unsigned long long)nn,
                       (unsigned long long)t->id, (unsigned long long)gen, (unsigned long long)n);
    }
    if (ret == 0) {
        b = xmalloc(n ? n : 1);
        size_t got = fread(b, 1, n, f);
        if (got != n)
            ret = failf(err, errlen, -EBADMSG, "%s: truncated at byte %llu (%llu bytes of %s expected)", path,
                       (unsigned long long)(48 + got), (unsigned long long)n, side_name[which]);
        else if (XXH64(b, n, 0) != sum)
            ret = failf(err, errlen, -EBADMSG, "%s: the %s's checksum does not match (bytes 48 to %llu damaged)", path,
                       side_name[which], (unsigned long long)(48 + n));
    }
    fclose(f);
    if (ret < 0) {
        free(b);
        return ret;
    }
    *blob = b;
    *len = n;
    return 0;
}

/* 1 if DIR holds a prepared commit's file (emb_tier_prepare): its side files wait with it. */
static int prepared_exists(const emb_tier *t)
{
    DIR *d = opendir(t->dir);
    if (!d) return 0;
    struct dirent *de;
    int found = 0;
    while (!found && (de = readdir(d))) found = !strncmp(de->d_name, "prepared-", 9);
    closedir(d);
    return found;
}

/* Delete DIR/<name>.<N> files that the index does not name (side_gen). */
static void side_clean(emb_tier *t)
{
    DIR *d = opendir(t->dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        for (int w = 0; w < 2; w++) {
            size_t nl = strlen(side_name[w]);
            if (strncmp(de->d_name, side_name[w], nl) || de->d_name[nl] != '.') continue;
            char *end;
            unsigned long long g = strtoull(de->d_name + nl + 1, &end, 10);
            if (*end || end == de->d_name + nl + 1 || g == t->side_gen[w]) continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", t->dir, de->d_name);
            unlink(path);
        }
    }
    closedir(d);
}

static int open_slot_file(emb_tier *t, int tb, char *err, size_t errlen)
{
    slot_file *s = &t->sf[tb];
    char path[4096];
    snprintf(path, sizeof path, "%s/table%d.slots", t->dir, tb);
    int flags = t->readonly ? O_RDONLY : O_RDWR | O_CREAT;
    s->direct = 1;
    s->fd = open(path, flags | O_DIRECT | O_CLOEXEC, 0644);
    if (s->fd < 0 && errno == EINVAL) {   /* no O_DIRECT on this file system */
        s->direct = 0;
        s->fd = open(path, flags | O_CLOEXEC, 0644);
    }
    if (s->fd < 0) return fail(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    uint8_t *h = xaligned_alloc(4096, HEADER_BYTES);
    memset(h, 0, HEADER_BYTES);
    uint64_t f[4] = { SLOT_VERSION, (uint64_t)tb, s->row_bytes, s->slot_bytes };
    memcpy(h, SLOT_MAGIC, 8);
    memcpy(h + 8, f, sizeof f);
    uint64_t sum = XXH64(h, 40, 0);
    memcpy(h + 40, &sum, 8);
    struct stat stt;
    int ret = 0;
    if (fstat(s->fd, &stt) < 0) ret = fail(err, errlen, -errno, "%s: %s", path, strerror(errno));
    else if (stt.st_size == 0 && !t->readonly) {
        if (pwrite(s->fd, h, HEADER_BYTES, 0) != HEADER_BYTES || fdatasync(s->fd) < 0)
            ret = fail(err, errlen, -(errno ? errno : EIO), "%s: cannot write the header: %s", path, strerror(errno ? errno : EIO));
    } else {
        uint8_t *g = xaligned_alloc(4096, HEADER_BYTES);
        if (pread(s->fd, g, HEADER_BYTES, 0) != HEADER_BYTES) ret = fail(err, errlen, -EBADMSG, "%s: %s", path, "truncated header");
        else if (memcmp(g, SLOT_MAGIC, 8)) ret = fail(err, errlen, -EBADMSG, "%s: %s", path, "not a ctrbox slot file (bad magic)");
        else if (memcmp(g, h, 48)) {
            /* the first layout: slots of whole blocks for any row; the same header otherwise */
            uint64_t old = (s->row_bytes + 8 + BLOCK_BYTES - 1) / BLOCK_BYTES * BLOCK_BYTES;
            memcpy(h + 32, &old, 8);
            sum = XXH64(h, 40, 0);
            memcpy(h + 40, &sum, 8);
            if (old != s->slot_bytes && !memcmp(g, h, 48)) s->slot_bytes = old;
            else ret = fail(err, errlen, -EBADMSG, "%s: %s", path, "header differs from the table's layout or is corrupt");
        }
        free(g);
    }
    free(h);
    return ret;
}

static int page_punched(const slot_file *s, uint64_t page)
{
    return (page >> 6) < s->punched_words && (s->punched[page >> 6] >> (page & 63) & 1);
}

static void mark_punched(slot_file *s, uint64_t page0, uint64_t page1)
{
    if (page1 > s->punched_words * 64) {
        uint64_t w = s->punched_words ? s->punched_words : 64;
        while (w * 64 < page1) w *= 2;
        s->punched = xrealloc(s->punched, w * 8);
        memset(s->punched + s->punched_words, 0, (w - s->punched_words) * 8);
        __atomic_store_n(&s->punched_words, w, __ATOMIC_RELAXED);
    }
    for (uint64_t p = page0; p < page1; p++)
        if (!page_punched(s, p)) {
            s->punched[p >> 6] |= 1ull << (p & 63);
            s->n_punched++;
        }
}

/* The pages of a slot file that are holes (punched by an earlier run's repack), so that rows are
 * written there only after zeros (back_space); the file's end is where new space begins. */
static int find_holes(emb_tier *t, slot_file *s, char *err, size_t errlen)
{
    struct stat st;
    if (fstat(s->fd, &st) < 0) return fail(err, errlen, -errno, "%s: %s", t->dir, strerror(errno));
    s->backed = round_up((uint64_t)st.st_size, BLOCK_BYTES);   /* writes cover whole blocks */
    for (off_t at = HEADER_BYTES; at < (off_t)s->backed;) {
        off_t hole = lseek(s->fd, at, SEEK_HOLE);
        if (hole < 0 || hole >= (off_t)s->backed) break;   /* no SEEK_HOLE: holes are only slower to fill */
        off_t data = lseek(s->fd, hole, SEEK_DATA);
        if (data < 0 || data > (off_t)s->backed) data = (off_t)s->backed;
        mark_punched(s, round_up((uint64_t)hole, 4096) / 4096, (uint64_t)data / 4096);
        at = data;
    }
    return 0;
}

static int rebuild_bitmap(emb_tier *t, char *err, size_t errlen)
{
    rocksdb_iterator_t *it = rocksdb_create_iterator(t->db, t->ro);
    uint8_t k0[1] = { 'k' };
    for (rocksdb_iter_seek(it, (const char *)k0, 1); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        const char *v = rocksdb_iter_value(it, &vl);
        if (kl < 1 || k[0] != 'k') break;
        if (kl != 10 || vl != sizeof(idx_val) || k[1] >= t->n) {
            rocksdb_iter_destroy(it);
            return fail(err, errlen, -EBADMSG, "%s/index: %s", t->dir, "malformed index entry");
        }
        idx_val iv;
        memcpy(&iv, v, sizeof iv);
        set_bit(&t->sf[k[1]], iv.slot);
        t->sf[k[1]].rows++;
        filter_add(t, k[1], key_of_idx(k));
        smap_set(t, k[1], key_of_idx(k), iv.slot + 1);
    }
    for (int i = 0; i < t->n; i++) t->sf[i].free_slots = t->sf[i].hwm - t->sf[i].rows;
    char *e = NULL;
    rocksdb_iter_get_error(it, &e);
    rocksdb_iter_destroy(it);
    if (e) {
        int r = fail(err, errlen, -EIO, "%s/index: %s", t->dir, e);
        free(e);
        return r;
    }
    return 0;
}

/* ---- the commit record ---- */

/* DIR/COMMIT.ctrbox: 1 with (id, gen), 0 if there is none, <0 (err) if it is unreadable or corrupt. */
static int commit_record_read(const char *dir, uint64_t *id, uint64_t *gen, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/" COMMIT_FILE, dir);
    FILE *f = fopen(path, "rb");
    if (!f) return errno == ENOENT ? 0 : fail(err, errlen, -errno, "%s: cannot read: %s", path, strerror(errno));
    uint8_t b[41];
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    uint32_t v;
    uint64_t sum;
    memcpy(&v, b + 8, 4);
    memcpy(&sum, b + 32, 8);
    if (n != 40 || memcmp(b, COMMIT_MAGIC, 8) || XXH64(b, 32, 0) != sum)
        return fail(err, errlen, -EBADMSG, "%s: %s", path, "corrupt or truncated (bad magic, size or checksum)");
    if (v != COMMIT_VERSION) return fail(err, errlen, -EBADMSG, "%s: %s", path, "written by another version of ctrbox");
    memcpy(id, b + 16, 8);
    memcpy(gen, b + 24, 8);
    return 1;
}

/* Write DIR/COMMIT.ctrbox with the tier's id and commit count, durably. 0 or <0 with err. */
static int commit_record_write(emb_tier *t, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/" COMMIT_FILE, t->dir);
    uint8_t b[40] = { 0 };
    uint32_t v = COMMIT_VERSION;
    memcpy(b, COMMIT_MAGIC, 8);
    memcpy(b + 8, &v, 4);
    put_u64s(b + 16, t->id, t->gen);
    uint64_t sum = XXH64(b, 32, 0);
    memcpy(b + 32, &sum, 8);
    int r = durable_write(path, b, sizeof b);
    return r < 0 ? fail(err, errlen, r, "%s: cannot write: %s", path, strerror(-r)) : 0;
}

/* A new folder: its layout line and commit record ("m", "g") go through the memtable, which is
 * flushed at once, so that they live in an SST file like the commits and not in RocksDB's log;
 * then COMMIT.ctrbox. */
static int folder_create(emb_tier *t, const char *layout_line, char *err, size_t errlen)
{
    if (getrandom(&t->id, sizeof t->id, 0) != sizeof t->id) t->id = XXH64(&t, sizeof t, (uint64_t)now_sec() * 1e9);
    t->gen = 0;
    uint8_t g[16];
    put_u64s(g, t->id, t->gen);
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_writebatch_put(wb, "m", 1, layout_line, strlen(layout_line));
    rocksdb_writebatch_put(wb, "g", 1, (const char *)g, sizeof g);
    char *e = NULL;
    rocksdb_write(t->db, t->wo, wb, &e);
    rocksdb_writebatch_destroy(wb);
    if (!e) {
        rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
        rocksdb_flushoptions_set_wait(fo, 1);
        rocksdb_flush(t->db, fo, &e);
        rocksdb_flushoptions_destroy(fo);
    }
    if (e) {
        int r = fail(err, errlen, -EIO, "%s: cannot write the index: %s", t->dir, e);
        free(e);
        return r;
    }
    return commit_record_write(t, err, errlen);
}

/* The index's "g" record against COMMIT.ctrbox (see the file's comment). have_m: the index holds
 * a layout line. Sets t->id and t->gen. 0, 1 for a folder with neither (new), or <0 with err. */
static int commits_check(emb_tier *t, int have_m, char *err, size_t errlen)
{
    char *e = NULL;
    size_t gl = 0;
    char *g = rocksdb_get(t->db, t->ro, "g", 1, &gl, &e);
    if (e) {
        int r = fail(err, errlen, -EIO, "%s: cannot read the index: %s", t->dir, e);
        free(e);
        return r;
    }
    uint64_t id_f = 0, gen_f = 0, id_db = 0, gen_db = 0;
    int rf = commit_record_read(t->dir, &id_f, &gen_f, err, errlen), ret = 0;
    if (g && gl == 16) {
        memcpy(&id_db, g, 8);
        memcpy(&gen_db, g + 8, 8);
    }
    if (rf < 0) {
        ret = rf;
    } else if (!g && !have_m) {
        if (rf) snprintf(err, errlen, "%s: its index holds nothing, but %s records %llu commits: RocksDB's files were "
                         "damaged or replaced (restore the folder from a copy)", t->dir, COMMIT_FILE, (unsigned long long)gen_f);
        ret = rf ? -EBADMSG : 1;
    } else if (!g || gl != 16 || !have_m) {
        snprintf(err, errlen, "%s: its index lacks its %s record: RocksDB's files were damaged (restore the folder from a "
                 "copy)", t->dir, !have_m ? "layout" : "commit");
        ret = -EBADMSG;
    } else if (!rf && gen_db > 0) {
        snprintf(err, errlen, "%s: %s is missing, so its %llu commits cannot be checked (restore the folder from a copy)",
                 t->dir, COMMIT_FILE, (unsigned long long)gen_db);
        ret = -EBADMSG;
    } else if (rf && id_f != id_db) {
        snprintf(err, errlen, "%s: %s belongs to another table folder than its index", t->dir, COMMIT_FILE);
        ret = -EBADMSG;
    } else if (rf && gen_db != gen_f && gen_db != gen_f + 1) {
        snprintf(err, errlen, "%s: its index holds commit %llu, but the folder recorded commit %llu: RocksDB's files %s "
                 "(restore the folder from a copy)", t->dir, (unsigned long long)gen_db, (unsigned long long)gen_f,
                 gen_db < gen_f ? "lost commits (a damaged or truncated MANIFEST?)" : "are newer than the record");
        ret = -EBADMSG;
    }
    free(g);
    if (ret != 0) return ret;
    t->id = id_db;
    t->gen = gen_db;
    /* the record one behind (a crash between the commit and its record), or missing before any
     * commit: written now */
    if (!t->readonly && (!rf || gen_f != gen_db)) return commit_record_write(t, err, errlen);
    return 0;
}

/* "ctrbox-tier 2 tables=N layout=L rows=B0,B1,..." */
static int parse_layout(const char *v, size_t vl, int *n_tables, size_t **rb, char **layout)
{
    char *line = xmalloc(vl + 1);
    memcpy(line, v, vl);
    line[vl] = 0;
    int n = 0, ret = -1;
    char *lay = strstr(line, " layout="), *rows = strstr(line, " rows=");
    if (sscanf(line, TIER_VERSION " tables=%d", &n) == 1 && n > 0 && n <= EMB_TIER_MAX_TABLES && lay && rows && rows > lay) {
        *rows = 0;
        *layout = xstrdup(lay + 8);
        *rb = xcalloc((size_t)n, sizeof **rb);
        char *p = rows + 6;
        ret = 0;
        for (int i = 0; i < n && ret == 0; i++) {
            char *end;
            unsigned long long b = strtoull(p, &end, 10);
            if (end == p || b < sizeof(emb_row_head) || b > (1u << 24)) ret = -1;
            (*rb)[i] = (size_t)b;
            p = *end == ',' ? end + 1 : end;
        }
        *n_tables = n;
    }
    free(line);
    return ret;
}

/* A folder made by ctrbox-table import (its layout's model part is "import") serves any model whose
 * tables are the same (pretrained rows to start from): the layout records agree but for that part. */
static int imported_match(const char *v, size_t vl, const char *want)
{
    static const char tag[] = " layout=import;";
    const char *a = memmem(v, vl, tag, sizeof tag - 1), *b = strstr(want, " layout=");
    const char *bs = b ? strchr(b, ';') : NULL;
    if (!a || !bs) return 0;
    size_t head = (size_t)(a - v) + 8;   /* up to and with " layout=" */
    const char *at = a + sizeof tag - 1;   /* after "import;" */
    size_t rest = vl - (size_t)(at - v);
    return (size_t)(b - want) + 8 == head && !memcmp(v, want, head) && strlen(bs + 1) == rest && !memcmp(at, bs + 1, rest);
}

static int open_sharded(emb_tier **out, const char *dir, int n_tables, const size_t *row_bytes, const char *layout,
                        int readonly, size_t index_cache, char *err, size_t errlen);

/* ---- plain reads, where io_uring is refused ---- */

/* PLAIN_DEPTH reads in flight, each on a reader thread of its own (pread blocks), into the read
 * buffers: read_slots queues them and takes them as they complete, as it does with the ring. With
 * no thread (none could start, as under a small ulimit -v), the reads are made as they are queued. */
typedef struct plain_pool {
    pthread_t th[PLAIN_DEPTH];
    int n_th, stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;                   /* a read queued, or stop */
    pthread_cond_t done_cv;              /* a read done */
    int fd[PLAIN_DEPTH];                 /* buffer b's read */
    size_t len[PLAIN_DEPTH];
    uint64_t off[PLAIN_DEPTH];
    int64_t res[PLAIN_DEPTH];            /* its bytes, or -errno */
    int queue[PLAIN_DEPTH];              /* buffers to read, in order: [qh, qt) mod PLAIN_DEPTH */
    unsigned qh, qt;
    int done[PLAIN_DEPTH], n_done;       /* buffers read, not yet taken */
} plain_pool;

static int64_t read_full(int fd, uint8_t *buf, size_t len, uint64_t off);

static void *pool_main(void *arg)
{
    emb_tier *t = arg;
    plain_pool *p = t->pool;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->qh == p->qt && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        if (p->qh == p->qt) break;   /* stopped, nothing left */
        int b = p->queue[p->qh++ % PLAIN_DEPTH];
        pthread_mutex_unlock(&p->mu);
        int64_t res = read_full(p->fd[b], t->rbuf + (size_t)b * t->rbuf_slot, p->len[b], p->off[b]);
        pthread_mutex_lock(&p->mu);
        p->res[b] = res;
        p->done[p->n_done++] = b;
        pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void pool_start(emb_tier *t)
{
    plain_pool *p = t->pool = xcalloc(1, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    pthread_attr_t at;   /* small stacks: each calls pread alone */
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 256u << 10);
    while (p->n_th < PLAIN_DEPTH && pthread_create(&p->th[p->n_th], &at, pool_main, t) == 0) p->n_th++;
    pthread_attr_destroy(&at);
}

static void pool_stop(emb_tier *t)
{
    plain_pool *p = t->pool;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_th; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->done_cv);
    free(p);
    t->pool = NULL;
}

/* Queue the read of len bytes at off of fd into buffer b; without threads, read it now. */
static void pool_queue(emb_tier *t, int b, int fd, size_t len, uint64_t off)
{
    plain_pool *p = t->pool;
    pthread_mutex_lock(&p->mu);
    p->fd[b] = fd;
    p->len[b] = len;
    p->off[b] = off;
    if (!p->n_th) {
        p->res[b] = read_full(fd, t->rbuf + (size_t)b * t->rbuf_slot, len, off);
        p->done[p->n_done++] = b;
    } else {
        p->queue[p->qt++ % PLAIN_DEPTH] = b;
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
}

/* Wait for reads to complete: their buffers into got and their results into res, their count
 * returned. */
static int pool_wait(plain_pool *p, int *got, int64_t *res)
{
    pthread_mutex_lock(&p->mu);
    while (!p->n_done) pthread_cond_wait(&p->done_cv, &p->mu);
    int n = p->n_done;
    for (int i = 0; i < n; i++) got[i] = p->done[i], res[i] = p->res[p->done[i]];
    p->n_done = 0;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int emb_tier_open(emb_tier **out, const char *dir, int n_tables, const size_t *row_bytes, const char *layout,
                  int readonly, size_t index_cache, char *err, size_t errlen)
{
    *out = NULL;
    int pc = folder_path_check(dir, err, errlen);
    if (pc < 0) return pc;
    if (n_tables > EMB_TIER_MAX_TABLES)
        return failf(err, errlen, -EINVAL,
                     "%s: a table folder holds at most %d tables (its index names a table in one byte); this model "
                     "has %d (fewer with --field-dim naming the fields that get their own, or without --table-per-field)",
                     dir, EMB_TIER_MAX_TABLES, n_tables);
    char rec[4200];
    snprintf(rec, sizeof rec, "%s/" EMB_SHARDS_FILE, dir);
    if (access(rec, F_OK) == 0) return open_sharded(out, dir, n_tables, row_bytes, layout, readonly, index_cache, err, errlen);
    if (!readonly && mkdir(dir, 0755) < 0 && errno != EEXIST)
        return fail(err, errlen, -errno, "%s: cannot create folder: %s", dir, strerror(errno));
    emb_tier *t = xcalloc(1, sizeof *t);
    t->dir = xstrdup(dir);
    t->layout = xstrdup(layout ? layout : "");
    t->n = n_tables;
    t->readonly = readonly;
    t->lockfd = -1;
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->smap_mu, NULL);
    pthread_mutex_init(&t->zmu, NULL);
    pthread_cond_init(&t->zcv, NULL);
    pthread_mutex_init(&t->fetch_mu, NULL);
    pthread_mutex_init(&t->rec_mu, NULL);
    /* the index's memory: a quarter the key filter, seven eighths of the rest the slot map, what
     * is left (at least 1 MB) RocksDB's block cache, which holds its index and filter blocks too.
     * Seven eighths, not three quarters: in the end-to-end bench the map then located 0.69-0.71 of
     * the rows read instead of 0.66-0.68, and the trainer waited less for the fetch in each of three
     * alternating pairs of runs, as with 0.97 of it in three more (docs/performance.md, fifteenth
     * session); the block cache keeps several MB at the larger budgets, whose tables it serves more */
    t->smap_sb = 24;
    t->filt_words = 8192;
    while (t->filt_words * 16 <= index_cache / 4) t->filt_words *= 2;
    size_t rest = index_cache > t->filt_words * 8 ? index_cache - t->filt_words * 8 : 0;
    t->smap_sets = rest / 8 * 7 / sizeof *t->smap;
    if (t->smap_sets) {
        t->smap = xaligned_alloc(64, (size_t)t->smap_sets * sizeof *t->smap);
        memset(t->smap, 0, (size_t)t->smap_sets * sizeof *t->smap);
    }
    size_t block_cache = rest - (size_t)t->smap_sets * sizeof *t->smap;
    int ret = 0;
    size_t *rb_found = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/LOCK.ctrbox", dir);
    t->lockfd = open(path, (readonly ? O_RDONLY : O_RDWR | O_CREAT) | O_CLOEXEC, 0644);
    if (t->lockfd < 0) {
        ret = fail(err, errlen, -errno, "%s: cannot open the table folder: %s", dir,
                   errno == ENOENT ? "no table folder here" : strerror(errno));
        goto out;
    }
    int lk = lock_file(t->lockfd, readonly);   /* waits a moment for a trainer that just died */
    if (lk < 0) {
        ret = fail(err, errlen, lk, "%s: %s", dir,
                   lk != -EBUSY ? strerror(-lk)
                   : readonly   ? "a trainer is using this table folder"
                                : "in use by another trainer or reader (lock held)");
        goto out;
    }
    t->opt = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(t->opt, !readonly);
    rocksdb_options_set_paranoid_checks(t->opt, 1);
    /* RocksDB's info log (index/LOG) only for fatal errors and its header: its file writer aborts
     * (an assertion Debian's build keeps) when it is written again after a failed write, as on a
     * full disk after a commit failed; the C API has no logger of another kind to give it.
     * CTRBOX_ROCKSDB_LOG=1 logs everything, for performance work. At most two old logs stay. */
    rocksdb_options_set_info_log_level(t->opt, getenv("CTRBOX_ROCKSDB_LOG") ? 1 /* INFO */ : 4 /* FATAL */);
    rocksdb_options_set_keep_log_file_num(t->opt, 2);
    rocksdb_options_increase_parallelism(t->opt, 2);
    /* compactions run at a low CPU priority: they have no deadline, the trainer's threads have
     * (docs/performance.md) */
    rocksdb_env_t *env = rocksdb_create_default_env();
    rocksdb_env_lower_thread_pool_cpu_priority(env);
    rocksdb_env_destroy(env);   /* the handle only: the default environment stays */
    /* commits are ingested as SST files (see ingest): only the layout record goes through the
     * memtable, so a small one will do */
    rocksdb_options_set_write_buffer_size(t->opt, 4u << 20);
    /* Universal compaction: every commit's file spans the whole key range, so leveled compaction
     * rewrote all of level 1 every few commits; merging runs of similar size rewrites an entry
     * about log(runs) times. Its compaction thread took 15% of the end-to-end bench's CPU, and the
     * trainer's share of two cores grew by 8% with it (docs/performance.md). */
    rocksdb_options_set_compaction_style(t->opt, rocksdb_universal_compaction);
    /* Runs merge only when 24 have gathered (the default, 4, merged after every fourth commit),
     * of any sizes (size ratio 1%), and the whole index is rewritten only past 5x amplification:
     * the compaction thread's CPU in the end-to-end bench went from 59 to about 12 core-seconds,
     * and lookups stay one read a key (each newer run has its Bloom filter, docs/performance.md) */
    rocksdb_options_set_level0_file_num_compaction_trigger(t->opt, 24);
    rocksdb_universal_compaction_options_t *uco = rocksdb_universal_compaction_options_create();
    rocksdb_universal_compaction_options_set_size_ratio(uco, 1);
    rocksdb_universal_compaction_options_set_max_size_amplification_percent(uco, 400);
    rocksdb_options_set_universal_compaction_options(t->opt, uco);
    rocksdb_universal_compaction_options_destroy(uco);
    /* no compression in the runs compactions write above the last: index blocks missing from the
     * block cache are read from the page cache without a decompression (snappy took a third of a
     * fetch's CPU). The last run, which holds most entries and is written by the full compactions
     * after a repack, is LZ4: the index was a fifth of a table folder's bytes on disk, and the disk
     * bench's index went from 136 to 92 MB (docs/performance.md). A commit's own file is LZ4 too:
     * RocksDB's SST file writer takes the bottommost compression. Written uncompressed, the writer
     * saved its LZ4 and the fetch its decompression, but the fetch read and copied more bytes: one
     * profile each, no CPU saved in all (docs/performance.md, fourteenth session). */
    rocksdb_options_set_compression(t->opt, rocksdb_no_compression);
    rocksdb_options_set_bottommost_compression(t->opt, rocksdb_lz4_compression);
    /* the key filter (filter_may_hold) answers for keys never stored before a lookup is made:
     * the keys looked up are mostly there, and the last sorted run, which holds most of them, needs
     * no Bloom filter of its own (10 bits a key in memory: 100 MB at 80 million keys) */
    rocksdb_options_set_optimize_filters_for_hits(t->opt, 1);
    t->bopt = rocksdb_block_based_options_create();
    /* index blocks: a lookup that misses here reads from the page cache (docs/performance.md) */
    t->cache = rocksdb_cache_create_lru(block_cache > (1u << 20) ? block_cache : (1u << 20));
    rocksdb_block_based_options_set_block_cache(t->bopt, t->cache);
    rocksdb_block_based_options_set_filter_policy(t->bopt, rocksdb_filterpolicy_create_bloom_full(10));
    /* Index and filter blocks live in the block cache, inside --cache-mb: held by each file's table
     * reader instead, they grew with the index (the newer runs' filters alone are 10 bits a key
     * they hold). Both are partitioned (4 KB pieces under a small top level, which stays), so a
     * lookup reads the pieces it needs, not a whole run's filter. */
    rocksdb_block_based_options_set_cache_index_and_filter_blocks(t->bopt, 1);
    rocksdb_block_based_options_set_cache_index_and_filter_blocks_with_high_priority(t->bopt, 1);
    rocksdb_block_based_options_set_pin_top_level_index_and_filter(t->bopt, 1);
    rocksdb_block_based_options_set_index_type(t->bopt, rocksdb_block_based_table_index_type_two_level_index_search);
    rocksdb_block_based_options_set_partition_filters(t->bopt, 1);
    rocksdb_block_based_options_set_metadata_block_size(t->bopt, 4096);
    rocksdb_options_set_block_based_table_factory(t->opt, t->bopt);
    t->ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_verify_checksums(t->ro, 1);
    t->wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(t->wo, 1);
    snprintf(path, sizeof path, "%s/index", dir);
    char *e = NULL;
    /* opened with its (default) column family handle, for the batched MultiGet */
    const char *cfn[1] = { "default" };
    const rocksdb_options_t *cfo[1] = { t->opt };
    t->db = readonly ? rocksdb_open_for_read_only_column_families(t->opt, path, 1, cfn, cfo, &t->cf, 0, &e)
                     : rocksdb_open_column_families(t->opt, path, 1, cfn, cfo, &t->cf, &e);
    if (e) {
        ret = fail(err, errlen, -EIO, "%s: cannot open the index: %s", dir, e);
        free(e);
        goto out;
    }
    /* the layout line: tables and their record sizes, and the model's layout name */
    size_t vl;
    char *v = rocksdb_get(t->db, t->ro, "m", 1, &vl, &e);
    if (e) {
        ret = fail(err, errlen, -EIO, "%s: cannot read the index: %s", dir, e);
        free(e);
        goto out;
    }
    if (v && vl >= 14 && !memcmp(v, "ctrbox-tier 1 ", 14)) {
        free(v);
        ret = fail(err, errlen, -EBADMSG, "%s: %s", dir, "made by an older ctrbox (table folder format 1; this build "
                   "reads format 2): train it again, or export its rows with that version and import them");
        goto out;
    }
    int fresh = commits_check(t, v != NULL, err, errlen);
    if (fresh < 0) {
        free(v);
        ret = fresh;
        goto out;
    }
    for (int w = 0; w < 2; w++) {   /* the catalog's and the deletion record's files */
        size_t pl;
        char *p = rocksdb_get(t->db, t->ro, &side_key[w], 1, &pl, &e);
        if (e) {
            free(v);
            ret = fail(err, errlen, -EIO, "%s: cannot read the index: %s", dir, e);
            free(e);
            goto out;
        }
        t->side_gen[w] = side_gen_of(p, pl);
        free(p);
    }
    if (!readonly && !prepared_exists(t)) side_clean(t);   /* a commit's that did not happen (a prepared one's wait) */
    if (!layout) {   /* whatever the folder holds (the table tools) */
        if (!v) {
            ret = fail(err, errlen, -EBADMSG, "%s: %s", dir, "not a ctrbox table folder (no layout record)");
            goto out;
        }
        free(t->layout);
        t->layout = NULL;
        ret = parse_layout(v, vl, &n_tables, &rb_found, &t->layout);
        if (!t->layout) t->layout = xstrdup("");
        free(v);
        v = NULL;
        if (ret < 0) {
            ret = fail(err, errlen, -EBADMSG, "%s: %s", dir, "malformed layout record");
            goto out;
        }
        t->n = n_tables;
        row_bytes = rb_found;
    } else {
        size_t wl = strlen(layout) + 24 * (size_t)n_tables + 64;   /* "," and a size_t each */
        char *want = xmalloc(wl);
        int w = snprintf(want, wl, "%s tables=%d layout=%s rows=", TIER_VERSION, n_tables, layout);
        for (int i = 0; i < n_tables; i++) w += snprintf(want + w, wl - (size_t)w, "%s%zu", i ? "," : "", row_bytes[i]);
        if (!v && readonly) {
            ret = fail(err, errlen, -EBADMSG, "%s: %s", dir, "not a ctrbox table folder (no layout record)");
        } else if (!v) {
            ret = folder_create(t, want, err, errlen);
        } else if ((vl != strlen(want) || memcmp(v, want, vl) != 0) && !imported_match(v, vl, want)) {
            snprintf(err, errlen, "%s: the folder holds tables of another model (%.*s; this model: %s)", dir,
                     (int)(vl < 1000 ? vl : 1000), v, want);
            ret = -EBADMSG;
        }
        free(v);
        free(want);
        if (ret < 0) goto out;
    }
    /* the map's layout, now that the tables are known: narrow for one table; wide, its fingerprints
     * naming their table, for several (smap_fp) */
    t->smap_wide = t->n > 1;
    while (1 << t->smap_tb_bits < t->n) t->smap_tb_bits++;
    t->sf = xcalloc((size_t)n_tables, sizeof *t->sf);
    size_t maxslot = 512;
    for (int i = 0; i < n_tables; i++) t->sf[i].fd = -1;
    for (int i = 0; i < n_tables && ret == 0; i++) {
        t->sf[i].row_bytes = row_bytes[i];
        t->sf[i].slot_bytes = slot_size(row_bytes[i]);
        ret = open_slot_file(t, i, err, errlen);
        t->sf[i].blk = t->sf[i].slot_bytes < BLOCK_BYTES ? BLOCK_BYTES / t->sf[i].slot_bytes : 1;
        if (t->sf[i].slot_bytes > maxslot) maxslot = t->sf[i].slot_bytes;
    }
    free(rb_found);
    rb_found = NULL;
    for (int i = 0; ret == 0 && !readonly && i < t->n; i++) ret = find_holes(t, &t->sf[i], err, errlen);
    if (ret == 0 && !readonly) {
        t->zeros = xaligned_alloc(4096, WRITE_BUF);
        memset(t->zeros, 0, WRITE_BUF);
    }
    if (ret == 0) {   /* the key filter, filled from the index */
        t->filt = xaligned_alloc(64, t->filt_words * 8);
        memset(t->filt, 0, t->filt_words * 8);
        ret = rebuild_bitmap(t, err, errlen);
    }
    if (ret == 0) {
        /* Where io_uring is refused (a seccomp profile, kernel.io_uring_disabled, or, for users
         * other than root, rings that would pass the locked-memory limit: the kernel counts every
         * process of the user against it), the slots are read with plain pread on the pool's
         * threads, in spans of PLAIN_SPAN (a pread took several times the system time of a ring's
         * read here: fewer, longer ones), and written with plain pwrite */
        int r = io_uring_queue_init(FETCH_DEPTH * 2, &t->ring, 0);
        if (r == 0 && (r = io_uring_queue_init(WRITE_DEPTH * 2, &t->wring, 0)) < 0) io_uring_queue_exit(&t->ring);
        t->rings = r == 0;
        t->ring_err = r;
        if (!t->rings) {
            t->rbuf_slot = (PLAIN_SPAN > maxslot ? PLAIN_SPAN : maxslot) / maxslot * maxslot;
            t->rbuf = xaligned_alloc(4096, t->rbuf_slot * PLAIN_DEPTH);
            pool_start(t);
        }
        /* fixed buffers and files: no page pinning or file lookup per read. Pinned memory counts
         * against RLIMIT_MEMLOCK (8 MB by default for users other than root): where buffers of
         * SPAN_BYTES are refused, those of half; where those are too, plain reads into them */
        for (size_t span = SPAN_BYTES; !t->rbuf; span /= 2) {
            t->rbuf_slot = (span > maxslot ? span : maxslot) / maxslot * maxslot;
            t->rbuf = xaligned_alloc(4096, t->rbuf_slot * FETCH_DEPTH);
            struct iovec iov = { t->rbuf, t->rbuf_slot * FETCH_DEPTH };
            t->fixed = io_uring_register_buffers(&t->ring, &iov, 1) == 0;
            if (!t->fixed && span > SPAN_BYTES / 2) {   /* once more at half the size */
                free(t->rbuf);
                t->rbuf = NULL;
            }
        }
        if (t->fixed) {
            int *fds = xmalloc((size_t)t->n * sizeof *fds);
            for (int i = 0; i < t->n; i++) fds[i] = t->sf[i].fd;
            if (io_uring_register_files(&t->ring, fds, (unsigned)t->n) < 0) {
                io_uring_unregister_buffers(&t->ring);
                t->fixed = 0;
            }
            free(fds);
        }
    }
out:
    if (ret < 0) {
        free(rb_found);
        emb_tier_close(t);
        return ret;
    }
    *out = t;
    return 0;
}

static void close_sharded(emb_tier *t);
static void spare_free(emb_tier *t);

void emb_tier_close(emb_tier *t)
{
    if (!t) return;
    if (t->sub) {
        close_sharded(t);
        return;
    }
    if (t->zth_on > 0) {
        pthread_mutex_lock(&t->zmu);
        t->zstop = 1;
        pthread_cond_broadcast(&t->zcv);
        pthread_mutex_unlock(&t->zmu);
        pthread_join(t->zth, NULL);
        t->zth_on = 0;
    }
    if (t->prepared) {   /* its file stays: the next open's emb_tier_resolve_prepared decides */
        char err[64];
        emb_tier_batch *b = t->prepared;
        t->prepared = NULL;
        commit_complete(b, -ECANCELED, 0, 1, "", 1, err, sizeof err);
    }
    if (!t->readonly && t->sf && t->db && !t->stale) {
        emb_tier_batch *o = __atomic_load_n(&t->open, __ATOMIC_SEQ_CST);
        if (o) emb_tier_abort(o);   /* left open: dropped */
        emb_tier_release(t);
        /* the zeros written ahead of the last slot in use go: the file ends at its last block */
        for (int i = 0; i < t->n; i++) {
            slot_file *s = &t->sf[i];
            uint64_t end = HEADER_BYTES + round_up(s->hwm, s->blk) * s->slot_bytes;
            if (s->fd >= 0 && s->backed > end && ftruncate(s->fd, (off_t)end) == 0) s->backed = end;
        }
    }
    if (t->rings) {
        io_uring_queue_exit(&t->ring);
        io_uring_queue_exit(&t->wring);
    }
    pool_stop(t);
    free(t->rbuf);
    for (int i = 0; t->sf && i < t->n; i++) {
        if (t->sf[i].fd >= 0) close(t->sf[i].fd);
        free(t->sf[i].bits);
        free(t->sf[i].punched);
    }
    free(t->wbuf[0]), free(t->wbuf[1]);
    free(t->zeros);
    spare_free(t);
    free(t->rec);
    pthread_mutex_destroy(&t->rec_mu);
    free(t->sf);
    free(t->filt);
    if (t->cf) rocksdb_column_family_handle_destroy(t->cf);
    if (t->db) rocksdb_close(t->db);
    if (t->ro) rocksdb_readoptions_destroy(t->ro);
    if (t->wo) rocksdb_writeoptions_destroy(t->wo);
    if (t->opt) rocksdb_options_destroy(t->opt);
    if (t->bopt) rocksdb_block_based_options_destroy(t->bopt);
    if (t->cache) rocksdb_cache_destroy(t->cache);
    if (t->lockfd >= 0) close(t->lockfd);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->smap_mu);
    pthread_mutex_destroy(&t->zmu);
    pthread_cond_destroy(&t->zcv);
    pthread_mutex_destroy(&t->fetch_mu);
    free(t->smap);
    free(t->layout);
    free(t->dir);
    free(t);
}

const char *emb_tier_dir(const emb_tier *t) { return t->dir; }

int emb_tier_plain_io(const emb_tier *t)
{
    for (int r = 0; r < t->n_sub; r++)   /* a sharded folder: its ranks' */
        if (emb_tier_plain_io(t->sub[r])) return emb_tier_plain_io(t->sub[r]);
    return t->rings ? 0 : t->ring_err;   /* (a sharded folder's own is 0) */
}

uint64_t emb_tier_id(const emb_tier *t) { return t->id; }
uint64_t emb_tier_commits(const emb_tier *t) { return t->gen; }
uint64_t emb_tier_rows(emb_tier *t, int tb)
{
    uint64_t n = 0;
    for (int r = 0; r < t->n_sub; r++) n += emb_tier_rows(t->sub[r], tb);
    return t->n_sub ? n : __atomic_load_n(&t->sf[tb].rows, __ATOMIC_RELAXED);
}

void emb_tier_debug_map_slot_bits(emb_tier *t, int bits)
{
    CHECK(bits >= 1 && bits <= 24);
    pthread_mutex_lock(&t->smap_mu);
    t->smap_sb = bits;
    pthread_mutex_unlock(&t->smap_mu);
}

int emb_tier_debug_auto_compactions(emb_tier *t)
{
    return !__atomic_load_n(&t->auto_off, __ATOMIC_ACQUIRE);
}

void emb_tier_debug_no_filler(emb_tier *t)
{
    pthread_mutex_lock(&t->zmu);
    CHECK(t->zth_on == 0);
    t->zth_on = -1;
    pthread_mutex_unlock(&t->zmu);
}

emb_tier_mem emb_tier_memory(emb_tier *t)
{
    emb_tier_mem m = { t->smap_sets * sizeof *t->smap, t->filt_words * 8, 0, 0, 0, 0, 0 };
    pthread_mutex_lock(&t->mu);
    m.fetch_spare = t->n_spare * (uint64_t)PACK_CHUNK;
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n; i++)
        m.slot_bits += (__atomic_load_n(&t->sf[i].words, __ATOMIC_RELAXED) +
                        __atomic_load_n(&t->sf[i].punched_words, __ATOMIC_RELAXED)) * 8;
    if (rocksdb_property_int(t->db, "rocksdb.block-cache-usage", &m.block_cache) != 0) m.block_cache = 0;
    if (rocksdb_property_int(t->db, "rocksdb.estimate-table-readers-mem", &m.table_readers) != 0) m.table_readers = 0;
    if (rocksdb_property_int(t->db, "rocksdb.cur-size-all-mem-tables", &m.memtables) != 0) m.memtables = 0;
    return m;
}

double emb_tier_free_share(emb_tier *t)
{
    uint64_t *pend = xcalloc((size_t)t->n, sizeof *pend);
    pthread_mutex_lock(&t->rec_mu);
    for (size_t i = 0; i < t->n_rec; i++) pend[freed_tb(t->rec[i])]++;
    pthread_mutex_unlock(&t->rec_mu);
    double worst = 0;
    for (int i = 0; i < t->n; i++) {
        uint64_t rows = __atomic_load_n(&t->sf[i].rows, __ATOMIC_RELAXED);   /* the writer adds to it */
        double r = (double)(t->sf[i].free_slots + pend[i]) / (double)(rows ? rows : 1);
        if (r > worst) worst = r;
    }
    free(pend);
    return worst;
}

uint64_t emb_tier_disk_bytes(emb_tier *t)
{
    uint64_t b = 0;
    for (int r = 0; r < t->n_sub; r++) b += emb_tier_disk_bytes(t->sub[r]);
    if (t->sub) return b;
    for (int i = 0; i < t->n; i++) b += HEADER_BYTES + t->sf[i].hwm * t->sf[i].slot_bytes;
    return b;
}

static int get_record(emb_tier *t, int which, void **blob, size_t *len, char *err, size_t errlen)
{
    char *e = NULL;
    *blob = rocksdb_get(t->db, t->ro, &side_key[which], 1, len, &e);
    if (e) {
        snprintf(err, errlen, "%s: cannot read the %s: %s", t->dir, which ? "deletion record" : "catalog", e);
        free(e);
        return -EIO;
    }
    if (side_gen_of(*blob, *len)) {
        char *ptr = *blob;
        *blob = NULL;
        int r = side_read(t, which, ptr, blob, len, err, errlen);
        free(ptr);
        return r;
    }
    return 0;
}

int emb_tier_catalog(emb_tier *t, void **blob, size_t *len, char *err, size_t errlen)
{
    if (t->n_sub) return emb_tier_catalog(t->sub[0], blob, len, err, errlen);   /* the same bytes on every rank */
    return get_record(t, 0, blob, len, err, errlen);
}

int emb_tier_deletions(emb_tier *t, void **blob, size_t *len, char *err, size_t errlen)
{
    CHECK(!t->n_sub);
    return get_record(t, 1, blob, len, err, errlen);
}

void emb_tier_set_deletions(emb_tier_batch *b, void *blob, size_t len)
{
    free(b->drec);
    b->drec = blob;
    b->drec_len = len;
}

emb_tier_stats emb_tier_get_stats(emb_tier *t)
{
    pthread_mutex_lock(&t->mu);
    emb_tier_stats s = t->st;
    pthread_mutex_unlock(&t->mu);
    s.index_gets = __atomic_load_n(&t->index_gets, __ATOMIC_RELAXED);
    return s;
}

/* ---- fetch ---- */

/* aux[i] = slot + 1 of keys[i] (c <= GET_CHUNK), or 0: keys the filter rules out are not looked up;
 * with via_map, keys the slot map holds are taken from it (via_map[i] = 1: a guess, see the map);
 * the others by one batched MultiGet. Keys with known[i] (known may be NULL) keep their aux. */
static int lookup_chunk(emb_tier *t, int tb, const uint64_t *keys, size_t c, uint64_t *aux, uint8_t *via_map,
                        const uint8_t *known, char *err, size_t errlen)
{
    uint8_t kb[GET_CHUNK][10];
    const char *kp[GET_CHUNK];
    size_t ks[GET_CHUNK], at[GET_CHUNK], m = 0;
    rocksdb_pinnableslice_t *vals[GET_CHUNK];
    char *errs[GET_CHUNK];
    int ret = 0;
    if (via_map) {
        __atomic_add_fetch(&t->smap_waiting, 1, __ATOMIC_ACQ_REL);
        pthread_mutex_lock(&t->smap_mu);
        __atomic_sub_fetch(&t->smap_waiting, 1, __ATOMIC_ACQ_REL);
    }
    enum { AHEAD = 8 };   /* the filter's words and the map's sets of the keys AHEAD further on their way */
    uint64_t h;
    for (size_t j = 0; j < c; j++) {
        if (j + AHEAD < c) {
            filter_prefetch(t, tb, keys[j + AHEAD], 0);
            if (via_map && t->smap_sets) __builtin_prefetch(smap_where(t, tb, keys[j + AHEAD], &h));
        }
        if (via_map) via_map[j] = 0;
        if (known && known[j]) continue;   /* the open batch's answer, or the filter's (aux set) */
        aux[j] = 0;
        if (!filter_may_hold(t, tb, keys[j])) continue;
        if (via_map && (aux[j] = smap_get(t, tb, keys[j]))) {
            via_map[j] = 1;
            continue;
        }
        idx_key(kb[m], tb, keys[j]);
        kp[m] = (const char *)kb[m];
        ks[m] = 10;
        at[m++] = j;
    }
    if (via_map) pthread_mutex_unlock(&t->smap_mu);
    if (m) rocksdb_batched_multi_get_cf(t->db, t->ro, t->cf, m, kp, ks, vals, errs, 0);
    __atomic_add_fetch(&t->index_gets, (uint64_t)m, __ATOMIC_RELAXED);
    for (size_t j = 0; j < m; j++) {
        if (errs[j]) {
            if (!ret) ret = fail(err, errlen, -EIO, "%s: index read failed: %s", t->dir, errs[j]);
            free(errs[j]);
        }
        if (!vals[j]) continue;
        size_t vl;
        const char *v = rocksdb_pinnableslice_value(vals[j], &vl);
        idx_val iv;
        if (v && vl == sizeof iv) {
            memcpy(&iv, v, sizeof iv);
            aux[at[j]] = iv.slot + 1;
        } else if (v && !ret) {
            ret = fail(err, errlen, -EBADMSG, "%s: %s", t->dir, "malformed index entry");
        }
        rocksdb_pinnableslice_destroy(vals[j]);
    }
    return ret;
}

/* img, read from slot, is key's row, intact */
static int slot_holds(const slot_file *s, const uint8_t *img, uint64_t slot, uint64_t key)
{
    uint64_t sum;
    memcpy(&sum, img + s->slot_bytes - 8, 8);
    return XXH64(img, s->row_bytes, slot) == sum && ((const emb_row_head *)img)->key == key;
}

static int check_slot(emb_tier *t, int tb, const uint8_t *img, uint64_t slot, uint64_t key, char *err, size_t errlen)
{
    slot_file *s = &t->sf[tb];
    if (!slot_holds(s, img, slot, key)) {
        snprintf(err, errlen, "%s/table%d.slots: slot %llu (byte offset %llu) is corrupt (checksum or key mismatch)",
                 t->dir, tb, (unsigned long long)slot, (unsigned long long)(HEADER_BYTES + slot * s->slot_bytes));
        return -EBADMSG;
    }
    return 0;
}

/* Where fetched records go: put(ctx, i, rec) for key i (the slot's image, row_bytes long). */
typedef struct {
    void (*put)(void *ctx, size_t i, const uint8_t *rec);
    void *ctx;
} fetch_sink;

static int fetch_into(emb_tier *t, int tb, const uint64_t *keys, size_t n, fetch_sink sink, uint64_t *aux, char *err,
                      size_t errlen);

typedef struct {
    uint8_t *out;
    size_t row_bytes;
} flat_sink;

static void flat_put(void *ctx, size_t i, const uint8_t *rec)
{
    flat_sink *f = ctx;
    memcpy(f->out + i * f->row_bytes, rec, f->row_bytes);
}

int emb_tier_fetch(emb_tier *t, int tb, const uint64_t *keys, size_t n, uint8_t *out, uint64_t *aux, char *err,
                   size_t errlen)
{
    flat_sink f = { out, emb_tier_row_bytes(t, tb) };
    return fetch_into(t, tb, keys, n, (fetch_sink){ flat_put, &f }, aux, err, errlen);
}

typedef struct {
    emb_tier_packed *p;
    size_t row_bytes;
} packed_sink;

static void spare_free(emb_tier *t)
{
    for (size_t i = 0; i < t->n_spare; i++) free(t->spare[i]);
    free(t->spare);
    t->spare = NULL;
    t->n_spare = t->cap_spare = 0;
}

/* A chunk for a packed fetch: a spare one, or new. */
static uint8_t *chunk_get(emb_tier *t, size_t bytes)
{
    uint8_t *c = NULL;
    if (bytes == PACK_CHUNK) {
        pthread_mutex_lock(&t->mu);
        if (t->n_spare) c = t->spare[--t->n_spare];
        pthread_mutex_unlock(&t->mu);
    }
    return c ? c : xmalloc(bytes);
}

/* A packed fetch's n chunks c (of bytes) given back. The next fetch is likely about this one's
 * size: spares are kept up to n chunks, and those over it are freed. Spares kept up to the most
 * chunks ever live at once held the first fetch of a resumed or warm-started run (every row read,
 * nothing in memory yet) for the rest of the run, outside --cache-mb, once the cache had filled
 * (75 MB at --cache-mb 1024 with passes of 50,000 rows). */
static void chunks_back(emb_tier *t, uint8_t *const *c, size_t n, size_t bytes)
{
    size_t keep = 0;   /* c[0..keep) become spares; the rest, and the spares over n, are freed */
    if (bytes == PACK_CHUNK) {
        pthread_mutex_lock(&t->mu);
        keep = n > t->n_spare ? n - t->n_spare : 0;
        if (t->n_spare + keep > t->cap_spare) {
            t->cap_spare = t->n_spare + keep + 8;
            t->spare = xrealloc(t->spare, t->cap_spare * sizeof *t->spare);
        }
        if (keep) memcpy(t->spare + t->n_spare, c, keep * sizeof *c);   /* (no spares yet: t->spare NULL) */
        t->n_spare += keep;
        while (t->n_spare > n) free(t->spare[--t->n_spare]);
        pthread_mutex_unlock(&t->mu);
    }
    for (size_t i = keep; i < n; i++) free(c[i]);
}

static void packed_put(void *ctx, size_t i, const uint8_t *rec)
{
    packed_sink *s = ctx;
    emb_tier_packed *p = s->p;
    size_t c = p->n / p->per_chunk;
    if (c == p->n_chunks) {   /* fixed-size chunks: no copy and no slack beyond one chunk */
        p->chunk = xrealloc(p->chunk, (p->n_chunks + 1) * sizeof *p->chunk);
        p->chunk[p->n_chunks++] = chunk_get(p->pool, p->chunk_bytes);
    }
    memcpy(p->chunk[c] + (p->n % p->per_chunk) * s->row_bytes, rec, s->row_bytes);
    p->pos[i] = (uint32_t)p->n++;
}

int emb_tier_fetch_packed(emb_tier *t, int tb, const uint64_t *keys, size_t n, emb_tier_packed *out, uint64_t *aux,
                          char *err, size_t errlen)
{
    CHECK(n <= UINT32_MAX);
    packed_sink s = { out, emb_tier_row_bytes(t, tb) };
    memset(out, 0, sizeof *out);
    out->pool = t;
    out->chunk_bytes = s.row_bytes <= PACK_CHUNK ? PACK_CHUNK : s.row_bytes;
    out->per_chunk = out->chunk_bytes / s.row_bytes;
    out->pos = xmalloc((n ? n : 1) * sizeof *out->pos);
    return fetch_into(t, tb, keys, n, (fetch_sink){ packed_put, &s }, aux, err, errlen);
}

const uint8_t *emb_tier_packed_rec(const emb_tier_packed *p, size_t i, size_t row_bytes)
{
    uint32_t r = p->pos[i];
    return p->chunk[r / p->per_chunk] + (r % p->per_chunk) * row_bytes;
}

void emb_tier_packed_free(emb_tier_packed *p)
{
    if (p->pool) chunks_back(p->pool, p->chunk, p->n_chunks, p->chunk_bytes);
    free(p->chunk);
    free(p->pos);
    memset(p, 0, sizeof *p);
}

/* A read of slots [first, first + count): the sorted requests [a, b) fall in it. */
typedef struct {
    uint64_t first, count;
    size_t a, b;
} span;

/* The requests (slot << 32 | key index) in slot order. Slots and a fetch's keys stay below 2^32
 * (tables under 2 TB of 512-byte slots; emb_tier_fetch_packed's bound). */
static void sort_requests(uint64_t *req, size_t m, const uint64_t *aux, size_t n)
{
    size_t j = 0;
    for (size_t i = 0; i < n; i++)
        if (aux[i]) {
            CHECK(aux[i] - 1 <= UINT32_MAX && i <= UINT32_MAX);
            req[j++] = (aux[i] - 1) << 32 | i;
        }
    sort_u64(req, m);
}

/* io_uring_wait_cqe, again after a signal: a SIGTERM that --follow catches to stop at the next
 * commit interrupts the wait (-EINTR), which is no I/O error. */
static int wait_cqe(struct io_uring *ring, struct io_uring_cqe **cqe)
{
    int ret;
    while ((ret = io_uring_wait_cqe(ring, cqe)) == -EINTR) continue;
    return ret;
}

/* The next read from req[*next] on: the requests that lie within half a read buffer of the one
 * before and a buffer of its first, widened to whole blocks (*next moves past them). */
static span next_span(const slot_file *s, const uint64_t *req, size_t m, size_t *next, uint64_t per, uint64_t gap)
{
    uint64_t k = s->blk, a0 = (req[*next] >> 32) / k * k;
    span sp = { req[*next] >> 32, 1, *next, *next + 1 };
    while (sp.b < m) {
        uint64_t slot = req[sp.b] >> 32;
        if (slot - (sp.first + sp.count - 1) - 1 > gap || round_up(slot + 1, k) - a0 > per) break;
        sp.count = slot - sp.first + 1;
        sp.b++;
    }
    sp.count = round_up(sp.first + sp.count, k) - a0;
    sp.first = a0;
    *next = sp.b;
    return sp;
}

/* What a read needs to hand its rows on */
typedef struct {
    emb_tier *t;
    int tb;
    const uint64_t *keys, *req;
    const uint8_t *via_map;
    fetch_sink sink;
    size_t *retry, *n_retry, found;
} read_ctx;

/* The rows of read sp, which returned res (bytes, or -errno) into buf: to the sink, or to retry.
 * 0 or <0 with err. */
static int take_read(read_ctx *x, const span *sp, const uint8_t *buf, int64_t res, char *err, size_t errlen)
{
    emb_tier *t = x->t;
    slot_file *s = &t->sf[x->tb];
    size_t sb = s->slot_bytes;
    if (res < 0) {
        snprintf(err, errlen, "%s/table%d.slots: reading slot %llu: %s", t->dir, x->tb, (unsigned long long)sp->first,
                 strerror((int)-res));
        return (int)res;
    }
    /* a read ends early at the file's end. A slot the index gave there is an error; a slot map
     * guess there is asked of the index again, as any wrong guess (since the map's entries name
     * their table, a guess names a live slot of the key's own table, so this is a safeguard only) */
    for (size_t r = sp->a; r < sp->b; r++) {
        uint64_t slot = x->req[r] >> 32;
        size_t i = (size_t)(x->req[r] & 0xffffffffu);
        const uint8_t *img = buf + (slot - sp->first) * sb;
        int guess = x->via_map && x->via_map[i];   /* from the slot map */
        if ((int64_t)((slot - sp->first + 1) * sb) > res) {
            if (guess) {
                x->retry[(*x->n_retry)++] = i;
                continue;
            }
            snprintf(err, errlen, "%s/table%d.slots: reading slot %llu: short read", t->dir, x->tb, (unsigned long long)slot);
            return -EIO;
        }
        if (guess && !slot_holds(s, img, slot, x->keys[i])) {
            x->retry[(*x->n_retry)++] = i;
            continue;
        }
        int ret = guess ? 0 : check_slot(t, x->tb, img, slot, x->keys[i], err, errlen);
        if (ret) return ret;
        x->sink.put(x->sink.ctx, i, img);
        x->found++;
    }
    return 0;
}

/* pread of len bytes at off into buf, until the file's end or an error: the bytes read, and in *e
 * 0 or the error's -errno */
static size_t read_at(int fd, void *buf, size_t len, uint64_t off, int *e)
{
    size_t got = 0;
    *e = 0;
    while (got < len) {
        ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) *e = -errno;
        if (n <= 0) break;
        got += (size_t)n;
    }
    return got;
}

/* read_at, as one result: the bytes read, or -errno */
static int64_t read_full(int fd, uint8_t *buf, size_t len, uint64_t off)
{
    int e;
    size_t got = read_at(fd, buf, len, off, &e);
    return e ? e : (int64_t)got;
}

/* len bytes of table tb's slot file at off into buf: 0, or <0 with a message naming the byte
 * where the read stopped */
static int read_slot_bytes(emb_tier *t, int tb, uint8_t *buf, size_t len, uint64_t off, char *err, size_t errlen)
{
    int e;
    size_t got = read_at(t->sf[tb].fd, buf, len, off, &e);
    if (got == len) return 0;
    snprintf(err, errlen, "%s/table%d.slots: read failed at byte %llu: %s", t->dir, tb, (unsigned long long)(off + got),
             e ? strerror(-e) : "truncated");
    return e ? e : -EBADMSG;
}

/* Start the read of span sp of table tb's slot file into read buffer b: on the ring, or on the
 * pool's threads */
static void read_start(emb_tier *t, int tb, int b, const span *sp)
{
    slot_file *s = &t->sf[tb];
    uint8_t *buf = t->rbuf + (size_t)b * t->rbuf_slot;
    size_t len = sp->count * s->slot_bytes;
    uint64_t off = HEADER_BYTES + sp->first * s->slot_bytes;
    if (!t->rings) {
        pool_queue(t, b, s->fd, len, off);
        return;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);
    CHECK(sqe);
    if (t->fixed) {
        io_uring_prep_read_fixed(sqe, tb, buf, (unsigned)len, off, 0);
        sqe->flags |= IOSQE_FIXED_FILE;
    } else {
        io_uring_prep_read(sqe, s->fd, buf, (unsigned)len, off);
    }
    io_uring_sqe_set_data64(sqe, (uint64_t)b);
}

/* Wait for started reads to complete: their buffers into got and their results (bytes, or -errno)
 * into res (room for every read in flight); their count, or <0 where the ring's wait failed. */
static int read_wait(emb_tier *t, int *got, int64_t *res)
{
    if (!t->rings) return pool_wait(t->pool, got, res);
    io_uring_submit(&t->ring);
    struct io_uring_cqe *cqe;
    if (wait_cqe(&t->ring, &cqe) < 0) return -1;
    unsigned head, n = 0;
    io_uring_for_each_cqe(&t->ring, head, cqe) {
        got[n] = (int)cqe->user_data;
        res[n++] = cqe->res;
    }
    io_uring_cq_advance(&t->ring, n);
    return (int)n;
}

/* Read the rows of the requests req[0..m) (sorted, see sort_requests) in slot order, each read
 * covering several requests (next_span): one read then serves several rows (rows committed in one
 * pass sit together, and are often fetched together), so the kernel's cost per read is paid fewer
 * times. A request the slot map answered (via_map) whose slot holds another key goes to retry, to
 * be asked of the index. */
static int read_slots(emb_tier *t, int tb, const uint64_t *keys, const uint64_t *req, size_t m, const uint8_t *via_map,
                      fetch_sink sink, size_t *retry, size_t *n_retry, char *err, size_t errlen)
{
    slot_file *s = &t->sf[tb];
    size_t sb = s->slot_bytes, per = t->rbuf_slot / sb;   /* slots one read buffer holds */
    uint64_t gap = t->rbuf_slot / 2 / sb;                  /* unwanted slots a read may cross */
    read_ctx x = { t, tb, keys, req, via_map, sink, retry, n_retry, 0 };
    size_t next = 0, reads = 0;
    uint64_t bytes = 0;
    int ret = 0, busy = 0;
    span inflight[FETCH_DEPTH];
    int freeb[FETCH_DEPTH], got[FETCH_DEPTH], nfree = t->rings ? FETCH_DEPTH : PLAIN_DEPTH;
    int64_t res[FETCH_DEPTH];
    for (int i = 0; i < nfree; i++) freeb[i] = i;
    while (ret == 0 && (next < m || busy > 0)) {
        while (next < m && nfree > 0) {
            span sp = next_span(s, req, m, &next, per, gap);
            int b = freeb[--nfree];
            inflight[b] = sp;
            read_start(t, tb, b, &sp);
            busy++;
            reads++;
            bytes += sp.count * sb;
        }
        int n = read_wait(t, got, res);
        if (n < 0) {
            ret = fail(err, errlen, -EIO, "%s: %s", t->dir, "io_uring wait failed");
            busy = 0;   /* nothing more can be learned about them */
            break;
        }
        for (int j = 0; j < n; j++) {
            int b = got[j];
            uint8_t *buf = t->rbuf + (size_t)b * t->rbuf_slot;
            if (!ret && (res[j] == -ECANCELED || res[j] == -EAGAIN))   /* io_uring had no worker for it (ulimit -u): read here */
                res[j] = read_full(s->fd, buf, inflight[b].count * sb, HEADER_BYTES + inflight[b].first * sb);
            if (!ret) ret = take_read(&x, &inflight[b], buf, res[j], err, errlen);
            freeb[nfree++] = b;
        }
        busy -= n;
    }
    /* after an error, wait for what is still in flight before the buffers are reused */
    while (busy > 0) {
        int n = read_wait(t, got, res);
        if (n < 0) break;
        busy -= n;
    }
    pthread_mutex_lock(&t->mu);
    t->st.rows_read += x.found;
    t->st.bytes_read += bytes;
    t->st.reads += reads;
    pthread_mutex_unlock(&t->mu);
    return ret;
}

/* All lookups first (slot map, then index), then the reads in slot order; then the index's answer
 * for the keys whose map entry was another key's. */
static int fetch_sharded(emb_tier *t, int tb, const uint64_t *keys, size_t n, fetch_sink sink, uint64_t *aux, char *err,
                         size_t errlen);

static int fetch_into(emb_tier *t, int tb, const uint64_t *keys, size_t n, fetch_sink sink, uint64_t *aux, char *err,
                      size_t errlen)
{
    if (t->n_sub) return fetch_sharded(t, tb, keys, n, sink, aux, err, errlen);
    int ret = 0;
    size_t m = 0, n_retry = 0;
    uint8_t *via_map = xmalloc(n ? n : 1), *known = xmalloc(n ? n : 1);
    __atomic_add_fetch(&t->fetching, 1, __ATOMIC_SEQ_CST);
    ret = open_lookup(t, tb, keys, n, aux, known, err, errlen);   /* rows put since the last commit, newest first */
    for (size_t next = 0; next < n && ret == 0; next += GET_CHUNK) {
        size_t c = n - next < GET_CHUNK ? n - next : GET_CHUNK;
        ret = lookup_chunk(t, tb, keys + next, c, aux + next, via_map + next, known + next, err, errlen);
        for (size_t j = 0; j < c; j++) m += aux[next + j] != 0;
    }
    free(known);
    uint64_t *req = xmalloc((m ? m : 1) * sizeof *req);
    size_t *retry = xmalloc((m ? m : 1) * sizeof *retry);
    pthread_mutex_lock(&t->fetch_mu);
    if (ret == 0 && m) {
        sort_requests(req, m, aux, n);
        ret = read_slots(t, tb, keys, req, m, via_map, sink, retry, &n_retry, err, errlen);
    }
    if (ret == 0 && n_retry) {   /* rare: a fingerprint shared by two keys */
        uint64_t *rk = xmalloc(n_retry * sizeof *rk), *ra = xmalloc(n_retry * sizeof *ra);
        for (size_t r = 0; r < n_retry; r++) rk[r] = keys[retry[r]];
        for (size_t next = 0; next < n_retry && ret == 0; next += GET_CHUNK)
            ret = lookup_chunk(t, tb, rk + next, n_retry - next < GET_CHUNK ? n_retry - next : GET_CHUNK, ra + next, NULL,
                               NULL, err, errlen);
        size_t m2 = 0;
        for (size_t r = 0; ret == 0 && r < n_retry; r++) {
            aux[retry[r]] = ra[r];
            if (ra[r]) {
                CHECK(ra[r] - 1 <= UINT32_MAX);
                req[m2++] = (ra[r] - 1) << 32 | retry[r];
            }
        }
        sort_u64(req, m2);
        if (ret == 0 && m2) ret = read_slots(t, tb, keys, req, m2, NULL, sink, NULL, NULL, err, errlen);
        free(rk);
        free(ra);
    }
    pthread_mutex_unlock(&t->fetch_mu);
    size_t hits = 0;
    for (size_t i = 0; i < n; i++) hits += via_map[i];
    pthread_mutex_lock(&t->mu);
    t->st.map_hits += hits;
    t->st.map_wrong += n_retry;
    pthread_mutex_unlock(&t->mu);
    __atomic_sub_fetch(&t->fetching, 1, __ATOMIC_SEQ_CST);
    free(req);
    free(retry);
    free(via_map);
    return ret;
}

static int lookup_sharded(emb_tier *t, int tb, const uint64_t *keys, size_t n, uint64_t *aux, char *err, size_t errlen);

int emb_tier_lookup(emb_tier *t, int tb, const uint64_t *keys, size_t n, uint64_t *aux, char *err, size_t errlen)
{
    if (t->n_sub) return lookup_sharded(t, tb, keys, n, aux, err, errlen);
    int ret = 0;
    uint8_t *known = xmalloc(n ? n : 1);
    __atomic_add_fetch(&t->fetching, 1, __ATOMIC_SEQ_CST);
    ret = open_lookup(t, tb, keys, n, aux, known, err, errlen);
    for (size_t next = 0; next < n && ret == 0; next += GET_CHUNK)
        ret = lookup_chunk(t, tb, keys + next, n - next < GET_CHUNK ? n - next : GET_CHUNK, aux + next, NULL, known + next,
                           err, errlen);
    __atomic_sub_fetch(&t->fetching, 1, __ATOMIC_SEQ_CST);
    free(known);
    return ret;
}

/* ---- scan ---- */

static int scan_sharded(emb_tier *t, int tb, emb_tier_key_fn fn, void *ctx, char *err, size_t errlen);

int emb_tier_scan(emb_tier *t, int tb, emb_tier_key_fn fn, void *ctx, char *err, size_t errlen)
{
    if (t->n_sub) return scan_sharded(t, tb, fn, ctx, err, errlen);
    rocksdb_iterator_t *it = rocksdb_create_iterator(t->db, t->ro);
    uint8_t k0[2] = { 'k', (uint8_t)tb };
    int ret = 0;
    for (rocksdb_iter_seek(it, (const char *)k0, 2); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kl, vl;
        const uint8_t *k = (const uint8_t *)rocksdb_iter_key(it, &kl);
        const char *v = rocksdb_iter_value(it, &vl);
        if (kl != 10 || k[0] != 'k' || k[1] != tb) break;
        idx_val iv;
        if (vl != sizeof iv) {
            ret = fail(err, errlen, -EBADMSG, "%s/index: %s", t->dir, "malformed index entry");
            break;
        }
        memcpy(&iv, v, sizeof iv);
        if (fn(ctx, key_of_idx(k), iv.slot, iv.show, iv.click, iv.last_pass)) break;
    }
    char *e = NULL;
    rocksdb_iter_get_error(it, &e);
    rocksdb_iter_destroy(it);
    if (e && !ret) ret = fail(err, errlen, -EIO, "%s/index: %s", t->dir, e);
    free(e);
    return ret;
}

int emb_tier_scan_rows(emb_tier *t, int tb, emb_tier_row_fn fn, void *ctx, char *err, size_t errlen)
{
    for (int r = 0; r < t->n_sub; r++)   /* rank by rank (no order is promised) */
        if (emb_tier_scan_rows(t->sub[r], tb, fn, ctx, err, errlen) < 0) return -1;
    if (t->n_sub) return 0;
    slot_file *s = &t->sf[tb];
    size_t per = WRITE_BUF / s->slot_bytes;   /* whole blocks */
    uint8_t *buf = xaligned_alloc(4096, per * s->slot_bytes);
    int ret = 0, stop = 0;
    for (uint64_t first = 0; first < s->hwm && ret == 0 && !stop; first += per) {
        uint64_t n = s->hwm - first < per ? s->hwm - first : per;
        size_t want = (size_t)round_up(n, s->blk) * s->slot_bytes;   /* the file ends at a block's end */
        ret = read_slot_bytes(t, tb, buf, want, HEADER_BYTES + first * s->slot_bytes, err, errlen);
        for (uint64_t i = 0; ret == 0 && !stop && i < n; i++) {
            if (slot_free(s, first + i)) continue;
            const uint8_t *img = buf + i * s->slot_bytes;
            ret = check_slot(t, tb, img, first + i, ((const emb_row_head *)img)->key, err, errlen);
            if (ret == 0) stop = fn(ctx, img);
        }
    }
    free(buf);
    return ret;
}

size_t emb_tier_row_bytes(const emb_tier *t, int tb) { return t->n_sub ? emb_tier_row_bytes(t->sub[0], tb) : t->sf[tb].row_bytes; }
int emb_tier_tables(const emb_tier *t) { return t->n; }
const char *emb_tier_layout(const emb_tier *t) { return t->layout; }

/* ---- commit ---- */

emb_tier_batch *emb_tier_begin(emb_tier *t)
{
    CHECK(!t->n_sub);   /* read-only */
    CHECK(!t->readonly);
    CHECK(!__atomic_load_n(&t->open, __ATOMIC_ACQUIRE));   /* one batch puts at a time */
    emb_tier_settle(t);
    emb_tier_batch *b = xcalloc(1, sizeof *b);
    b->t = t;
    if (!t->wbuf[0]) {
        t->wbuf[0] = xaligned_alloc(4096, WRITE_BUF);
        t->wbuf[1] = xaligned_alloc(4096, WRITE_BUF);
    }
    b->buf[0] = t->wbuf[0];
    b->buf[1] = t->wbuf[1];
    b->row_delta = xcalloc((size_t)t->n, sizeof *b->row_delta);
    b->written = xcalloc((size_t)t->n, 1);
    b->spill_fd = -1;
    for (int i = 0; i < t->n; i++) {
        t->sf[i].cursor = 0;
        t->sf[i].in_run = 0;
    }
    __atomic_store_n(&t->open, b, __ATOMIC_RELEASE);
    return b;
}

void emb_tier_reclaim(emb_tier *t)
{
    pthread_mutex_lock(&t->rec_mu);
    for (size_t i = 0; i < t->n_rec; i++) clear_bit(&t->sf[freed_tb(t->rec[i])], freed_slot1(t->rec[i]) - 1);
    t->n_rec = 0;
    pthread_mutex_unlock(&t->rec_mu);
}

static void batch_free(emb_tier_batch *b);

/* Free the retired batches if no fetch is under way: a fetch that began before a batch was retired
 * may still read its segments, one that began after cannot find it (the pointers are cleared
 * before `fetching` is read, and a fetch counts itself before it reads them: seq_cst on both). */
static void free_retired(emb_tier *t)
{
    if (__atomic_load_n(&t->fetching, __ATOMIC_SEQ_CST)) return;
    pthread_mutex_lock(&t->rec_mu);
    emb_tier_batch *r = t->retired;
    t->retired = NULL;
    pthread_mutex_unlock(&t->rec_mu);
    while (r) {
        emb_tier_batch *next = r->next_retired;
        batch_free(r);
        r = next;
    }
}

void emb_tier_settle(emb_tier *t)
{
    emb_tier_reclaim(t);
    free_retired(t);
}

/* Not in emb_tier_settle, at every boundary: the next commits fill those pages again (a write to
 * a hole is a write of zeros first, back_space), and on a file system mounted with discard each
 * hole punched waits for its discards, on the thread that releases (the end-to-end bench's
 * trainer waited 13.55 s in them after its epoch, docs/performance.md). */
void emb_tier_release(emb_tier *t)
{
    emb_tier_settle(t);
    pthread_mutex_lock(&t->rec_mu);
    int release = t->rec_release;
    t->rec_release = 0;
    pthread_mutex_unlock(&t->rec_mu);
    for (int i = 0; release && i < t->n; i++) release_free(t, &t->sf[i]);
}

/* The batch's first write error (err: -errno), naming the file and the run's offset */
static void set_write_error(emb_tier_batch *b, const run *r, int err)
{
    if (b->err) return;
    const slot_file *s = &b->t->sf[r->tb];
    b->err = err;
    snprintf(b->errmsg, sizeof b->errmsg, "%s/table%d.slots: write failed at byte %llu: %s", b->t->dir, r->tb,
             (unsigned long long)(HEADER_BYTES + r->first * s->slot_bytes), strerror(-err));
}

/* Write run r of buffer w from its byte done on (a short write's rest, or the whole run without
 * rings) with plain writes, which say why a write was short. */
static void write_run(emb_tier_batch *b, int w, const run *r, size_t done)
{
    const slot_file *s = &b->t->sf[r->tb];
    size_t want = r->n * s->slot_bytes;
    while (done < want && !b->err) {
        ssize_t n = pwrite(s->fd, b->buf[w] + r->off + done, want - done,
                           (off_t)(HEADER_BYTES + r->first * s->slot_bytes + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) set_write_error(b, r, n < 0 ? -errno : -ENOSPC);
        else done += (size_t)n;
    }
}

/* Handle the writes that completed (waiting for one first if wait): count them off their
 * buffer; a short write gets the rest written synchronously, which says why it was short. */
static void reap(emb_tier_batch *b, int wait)
{
    emb_tier *t = b->t;
    struct io_uring_cqe *cqe;
    if (wait && wait_cqe(&t->wring, &cqe) < 0) {
        if (!b->err) {
            b->err = -EIO;
            snprintf(b->errmsg, sizeof b->errmsg, "%s: io_uring write wait failed", t->dir);
        }
        b->inflight[0] = b->inflight[1] = 0;   /* nothing more can be learned about them */
        return;
    }
    unsigned head, got = 0;
    io_uring_for_each_cqe(&t->wring, head, cqe) {
        int w = (int)(cqe->user_data >> 32);
        const run *r = &b->runs[w][cqe->user_data & 0xffffffffu];
        /* a write io_uring could not hand to a worker thread (none could start: ulimit -u) is
         * written here; write_run says why where that fails too */
        if (cqe->res == -ECANCELED || cqe->res == -EAGAIN) write_run(b, w, r, 0);
        else if (cqe->res < 0) set_write_error(b, r, cqe->res);
        else write_run(b, w, r, (size_t)cqe->res);
        b->inflight[w]--;
        got++;
    }
    io_uring_cq_advance(&t->wring, got);
}

/* Close buffer w's last run at the end of its block: the slots after its last row are written as
 * zeros (they stay free: a block holding a row is never taken whole again until it is empty), so
 * every write covers whole blocks, as direct I/O wants. */
static void pad_run(emb_tier_batch *b, int w)
{
    if (!b->n_runs[w]) return;
    run *r = &b->runs[w][b->n_runs[w] - 1];
    slot_file *s = &b->t->sf[r->tb];
    uint64_t end = round_up(r->first + r->n, s->blk), pad = end - (r->first + r->n);
    memset(b->buf[w] + b->buf_used[w], 0, pad * s->slot_bytes);
    b->buf_used[w] += pad * s->slot_bytes;
    r->n += pad;
    if (s->cursor < end) s->cursor = end;   /* the padded slots are not taken again in this commit */
}

/* Bytes [off, off + len) of slot file s become written zeros (direct I/O: whole blocks), so that
 * a later write of rows there overwrites blocks the file system has already allocated. A write to
 * unallocated space (the file's end, or a punched hole) changes the file's extents: on ext4 such a
 * direct write waits for the journal, which a concurrent fdatasync holds, and io_uring hands it to
 * a worker thread; the commits' writes went at about a tenth of the disk's speed
 * (docs/performance.md). 0 or -errno. */
static int zero_fill(emb_tier *t, slot_file *s, uint64_t off, uint64_t len)
{
    for (uint64_t done = 0; done < len;) {
        size_t n = len - done < WRITE_BUF ? (size_t)(len - done) : WRITE_BUF;
        ssize_t r = pwrite(s->fd, t->zeros, n, (off_t)(off + done));
        if (r <= 0) return r < 0 ? -errno : -EIO;
        done += (uint64_t)r;
    }
    return 0;
}

/* The zero filler: zeros from each slot file's backed up to its zwant, 4 MB a write, on a thread
 * of its own (the writes wait for the disk: on the trainer's thread they took about 3 s of the
 * end-to-end bench's boundaries, docs/performance.md, seventeenth session). Only the filler writes
 * past backed; a row is written below backed only (back_space waits for the filler). */
static void *zfill_main(void *arg)
{
    emb_tier *t = arg;
    thread_lower_priority(19);
    pthread_mutex_lock(&t->zmu);
    while (!t->zstop) {
        slot_file *s = NULL;
        for (int i = 0; i < t->n && !s; i++)
            if (t->sf[i].backed < t->sf[i].zwant && !t->sf[i].zerr) s = &t->sf[i];
        if (!s) {
            pthread_cond_wait(&t->zcv, &t->zmu);
            continue;
        }
        uint64_t at = s->backed, n = s->zwant - at < WRITE_BUF ? s->zwant - at : WRITE_BUF;
        s->zbusy = 1;
        pthread_mutex_unlock(&t->zmu);
        ssize_t r = pwrite(s->fd, t->zeros, (size_t)n, (off_t)at);
        int e = r < 0 ? -errno : r == 0 ? -EIO : 0;
        pthread_mutex_lock(&t->zmu);
        s->zbusy = 0;
        if (e) {
            s->zerr = e;
            s->zwant = at;
        } else {
            __atomic_store_n(&s->backed, at + (uint64_t)r, __ATOMIC_RELEASE);
        }
        pthread_cond_broadcast(&t->zcv);
    }
    pthread_mutex_unlock(&t->zmu);
    return NULL;
}

/* The zero filler stopped on s, for a change of its end (the caller holds zmu) */
static void zfill_hold(emb_tier *t, slot_file *s)
{
    while (s->zbusy) pthread_cond_wait(&t->zcv, &t->zmu);
    s->zwant = s->backed;
}

/* The space of bytes [off0, off1) of s is written once before rows go there: punched pages in it
 * (1 MB around) and the file's new end (with room ahead, a quarter of the file up to 64 MB) are
 * filled with zeros first, the new end by the zero filler (zfill_main). Only the batch that puts calls
 * this, before it submits the run's write. */
static int back_space(emb_tier *t, slot_file *s, uint64_t off0, uint64_t off1)
{
    if (!s->direct) return 0;
    int ret = 0;
    if (s->n_punched) {
        uint64_t g0 = off0 / (1u << 20) * (1u << 20) / 4096, g1 = round_up(off1, 1u << 20) / 4096;
        for (uint64_t p = g0; p < g1 && ret == 0; p++) {
            if (!page_punched(s, p)) continue;
            uint64_t q = p;
            while (q < g1 && page_punched(s, q)) {
                s->punched[q >> 6] &= ~(1ull << (q & 63));
                s->n_punched--;
                q++;
            }
            ret = zero_fill(t, s, p * 4096, (q - p) * 4096);   /* below backed: the filler is elsewhere */
            p = q;
        }
    }
    /* the filler keeps `ahead` bytes past the last write (a quarter of the file, 1 to 64 MB); it
     * is told to go on once a write comes within half of that of backed, and waited for only when
     * a write would pass backed */
    uint64_t backed = __atomic_load_n(&s->backed, __ATOMIC_ACQUIRE);
    uint64_t ahead = backed / 4;
    ahead = ahead < (1u << 20) ? (1u << 20) : ahead > (64u << 20) ? (64u << 20) : round_up(ahead, 1u << 20);
    if (ret != 0 || off1 + ahead / 2 <= backed) return ret;
    /* from the end of what was written (whole blocks: slots there may be in use), to a page past it */
    uint64_t to = round_up(off1, 4096) + ahead;
    pthread_mutex_lock(&t->zmu);
    if (!t->zth_on) {   /* a small stack: it calls pwrite alone (and under ulimit -v a thread may not start) */
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setstacksize(&at, 256u << 10);
        t->zth_on = pthread_create(&t->zth, &at, zfill_main, t) == 0 ? 1 : -1;
        pthread_attr_destroy(&at);
    }
    if (t->zth_on < 0) {   /* no filler: the zeros are written here */
        ret = zero_fill(t, s, backed, to - backed);
        if (ret == 0) __atomic_store_n(&s->backed, to, __ATOMIC_RELEASE);
    } else {
        s->zerr = 0;   /* an earlier write's failure, if any: the disk may have room now */
        if (to > s->zwant) s->zwant = to;
        pthread_cond_broadcast(&t->zcv);
        while (s->backed < off1 && !s->zerr) pthread_cond_wait(&t->zcv, &t->zmu);
        if (s->backed < off1) {
            ret = s->zerr;
            s->zerr = 0;
        }
    }
    pthread_mutex_unlock(&t->zmu);
    return ret;
}

/* Submit the writes of buffer w (at most WRITE_DEPTH in flight in all). */
static void submit_buf(emb_tier_batch *b, int w)
{
    emb_tier *t = b->t;
    pad_run(b, w);
    for (size_t i = 0; i < b->n_runs[w] && b->err == 0; i++) {
        run *rn = &b->runs[w][i];
        slot_file *sf = &t->sf[rn->tb];
        int zr = back_space(t, sf, HEADER_BYTES + rn->first * sf->slot_bytes, HEADER_BYTES + (rn->first + rn->n) * sf->slot_bytes);
        if (zr < 0) {
            b->err = zr;
            snprintf(b->errmsg, sizeof b->errmsg, "%s/table%d.slots: cannot extend the file: %s", t->dir, rn->tb, strerror(-zr));
            break;
        }
        b->written[rn->tb] = 1;
        if (!t->rings) {   /* a plain write, done when it returns */
            write_run(b, w, rn, 0);
            continue;
        }
        while (b->inflight[0] + b->inflight[1] >= WRITE_DEPTH && b->err == 0) {
            io_uring_submit(&t->wring);
            reap(b, 1);
        }
        if (b->err) break;
        struct io_uring_sqe *sqe = io_uring_get_sqe(&t->wring);
        CHECK(sqe);
        io_uring_prep_write(sqe, sf->fd, b->buf[w] + rn->off, (unsigned)(rn->n * sf->slot_bytes),
                            HEADER_BYTES + rn->first * sf->slot_bytes);
        io_uring_sqe_set_data64(sqe, (uint64_t)w << 32 | i);
        b->inflight[w]++;
    }
    if (t->rings) io_uring_submit(&t->wring);
}

/* Wait for buffer w's writes; then it is empty. */
static void drain(emb_tier_batch *b, int w)
{
    while (b->inflight[w] > 0) reap(b, 1);
    b->n_runs[w] = 0;
    b->buf_used[w] = 0;
}

/* A batch's lists grow by a quarter (at least 64K entries): they count in --cache-mb while a
 * window of passes is open, so they keep little slack. */
static size_t grow(size_t cap, size_t need)
{
    size_t c = cap + cap / 4 + 65536;
    return c < need ? need : c;
}

void emb_tier_reserve(emb_tier_batch *b, size_t puts)
{
    if (b->cap_ie < b->n_ie + puts) b->ie = xrealloc(b->ie, (b->cap_ie = grow(b->cap_ie, b->n_ie + puts)) * sizeof *b->ie);
    if (b->cap_fr < b->n_fr + puts) b->fr = xrealloc(b->fr, (b->cap_fr = grow(b->cap_fr, b->n_fr + puts)) * sizeof *b->fr);
}

size_t emb_tier_batch_bytes(const emb_tier_batch *b)
{
    return b ? b->cap_ie * sizeof *b->ie + b->cap_fr * sizeof *b->fr + b->seg_bytes : 0;
}

size_t emb_tier_batch_growth(const emb_tier_batch *b, size_t puts)
{
    size_t tail = b ? b->n_ie : 0, cap = b ? b->cap_ie : 0, need = tail + puts < SEAL_CHUNK ? tail + puts : SEAL_CHUNK;
    size_t segs = puts / SEAL_CHUNK + 1;
    return puts * sizeof(freed) + (need > cap ? need - cap : 0) * sizeof(ientry) +
           segs * (sizeof(seg) + 8 * ((size_t)(b ? b->t->n : 1) + 1));
}

static void add_freed(emb_tier_batch *b, int tb, uint64_t slot1)
{
    if (!slot1) return;
    if (b->n_fr == b->cap_fr) b->fr = xrealloc(b->fr, (b->cap_fr = grow(b->cap_fr, b->n_fr + 1)) * sizeof *b->fr);
    b->fr[b->n_fr++] = freed_make(tb, slot1);
}

static ientry *add_ientry(emb_tier_batch *b)
{
    if (b->n_ie == b->cap_ie) b->ie = xrealloc(b->ie, (b->cap_ie = grow(b->cap_ie, b->n_ie + 1)) * sizeof *b->ie);
    return &b->ie[b->n_ie++];
}

/* byte i of an entry's sort key (table, then the key from its most significant byte) */
static inline unsigned ie_byte(const ientry *e, int i) { return i == 0 ? e->tb : (unsigned)(e->key >> (64 - 8 * i)) & 0xff; }

static inline int ie_cmp(const ientry *a, const ientry *b)
{
    if (a->tb != b->tb) return a->tb < b->tb ? -1 : 1;
    return (a->key > b->key) - (a->key < b->key);
}

/* Index entries in (table, key) order, in place: an MSD radix sort on the sort key's bytes
 * (American flag sort), insertion sort for small buckets. A segment's keys are distinct but for
 * repeated deletions of one key, or a put and then its deletion (shrink), whose order does not
 * matter: a deletion wins (segr_run). */
static void sort_ientries(ientry *v, size_t n, int byte)
{
    if (n < 24 || byte >= 9) {
        for (size_t i = 1; i < n; i++) {
            ientry x = v[i];
            size_t j = i;
            for (; j > 0 && ie_cmp(&v[j - 1], &x) > 0; j--) v[j] = v[j - 1];
            v[j] = x;
        }
        return;
    }
    size_t count[256] = { 0 }, start[257], next[256];
    for (size_t i = 0; i < n; i++) count[ie_byte(&v[i], byte)]++;
    start[0] = 0;
    for (int d = 0; d < 256; d++) start[d + 1] = start[d] + count[d];
    memcpy(next, start, sizeof next);
    for (int d = 0; d < 256; d++)
        while (next[d] < start[d + 1]) {   /* place v[next[d]] in its bucket, until one of d's lands here */
            int c = (int)ie_byte(&v[next[d]], byte);
            if (c == d) {
                next[d]++;
            } else {
                ientry x = v[next[d]];
                v[next[d]] = v[next[c]];
                v[next[c]++] = x;
            }
        }
    for (int d = 0; d < 256; d++)
        if (count[d] > 1) sort_ientries(v + start[d], count[d], byte + 1);
}

/* Where one put goes: its slot, and the place of its image in the buffer being filled (stored
 * there by put_image). */
typedef struct {
    emb_row_head *h;
    uint8_t *img;
    uint64_t slot;
    size_t ie;               /* its index entry */
} placed;

/* Place rec: its slot, its run and its image's place in the fill buffer (the buffer the image goes
 * in is full: it is written and the other one filled; *flush: the images placed before must be
 * stored first, as submit_buf writes the buffer as it is). The old slot is freed or the key is new. */
static placed place_put(emb_tier_batch *b, int tb, emb_row_head *h, void (*flush)(void *), void *ctx)
{
    emb_tier *t = b->t;
    slot_file *s = &t->sf[tb];
    int w = b->cur;
    run *last = b->n_runs[w] ? &b->runs[w][b->n_runs[w] - 1] : NULL;
    /* a block is written by one run: a run of another table, or of this one elsewhere, closes
     * the block this table was filling (its rest stays free) */
    if (s->cursor % s->blk && !(last && last->tb == tb && last->first + last->n == s->cursor)) {
        s->cursor = round_up(s->cursor, s->blk);
        s->in_run = 0;
    }
    uint64_t slot = alloc_slot(s);
    b->n_placed++;
    int cont = last && last->tb == tb && last->first + last->n == slot;
    if (!cont) pad_run(b, w);   /* the run before ends at its block's end */
    /* a new block must fit the buffer whole: buffers are switched only at block boundaries */
    if (slot % s->blk == 0 && b->buf_used[w] + s->blk * s->slot_bytes > WRITE_BUF) {   /* write this buffer, fill the other */
        if (flush) flush(ctx);
        submit_buf(b, w);
        b->cur = w = !w;
        drain(b, w);
        cont = 0;
    }
    last = b->n_runs[w] ? &b->runs[w][b->n_runs[w] - 1] : NULL;
    if (cont) {
        last->n++;
    } else {
        CHECK(slot % s->blk == 0);
        if (b->n_runs[w] == b->cap_runs[w])
            b->runs[w] = xrealloc(b->runs[w], (b->cap_runs[w] = b->cap_runs[w] * 2 + 256) * sizeof *b->runs[w]);
        b->runs[w][b->n_runs[w]++] = (run){ tb, slot, 1, b->buf_used[w] };
    }
    placed p = { h, b->buf[w] + b->buf_used[w], slot, b->n_ie };
    b->buf_used[w] += s->slot_bytes;
    add_ientry(b);
    if (emb_row_slot1(h)) add_freed(b, tb, emb_row_slot1(h));
    else b->row_delta[tb]++;   /* a new key: put_image adds it to the key filter */
    return p;
}

/* The slot image of a placed put (the record, zeros, its checksum seeded by the slot) and its
 * index entry; the row in memory takes the slot + 1 as its aux. Puts of distinct rows may be
 * stored on several threads at once. */
static void put_image(emb_tier_batch *b, int tb, const placed *p)
{
    const slot_file *s = &b->t->sf[tb];
    emb_row_head *h = p->h;
    memcpy(p->img, h, s->row_bytes);
    memset(p->img + s->row_bytes, 0, s->slot_bytes - s->row_bytes);
    ((emb_row_head *)p->img)->mark = 0;
    ((emb_row_head *)p->img)->aux = 0;
    if (!emb_row_slot1(h)) filter_add(b->t, tb, h->key);   /* before it is durable: a false positive at worst */
    uint64_t sum = XXH64(p->img, s->row_bytes, p->slot);
    memcpy(p->img + s->slot_bytes - 8, &sum, 8);
    ientry *e = &b->ie[p->ie];
    e->key = h->key;
    e->tb = (uint8_t)tb;
    e->del = 0;
    e->v = (idx_val){ p->slot, h->show, h->click, h->last_pass };
    h->aux = (p->slot + 1) | EMB_ROW_CLEAN;   /* the slot holds the row as it is */
}

/* Seal once SEAL_CHUNK puts wait: a batch's index changes in memory stay within 2 MB, the rest in
 * its spill file. A failure is kept in b->err (the next seal or the commit says it). */
static void seal_full(emb_tier_batch *b, size_t more)
{
    char err[512];
    if (b->n_ie && b->n_ie + more > SEAL_CHUNK && emb_tier_seal(b, err, sizeof err) < 0 && !b->err) {
        b->err = -EIO;
        snprintf(b->errmsg, sizeof b->errmsg, "%s", err);
    }
}

size_t emb_tier_put(emb_tier_batch *b, int tb, void *rec)
{
    seal_full(b, 1);
    placed p = place_put(b, tb, rec, NULL, NULL);
    put_image(b, tb, &p);
    return b->t->sf[tb].slot_bytes;
}

/* The puts placed and not yet stored (put_rows' flush). */
typedef struct {
    emb_tier_batch *b;
    int tb;
    placed *v;
    size_t n;
    const struct emb_table *check;   /* (put_rows') */
    size_t bad;
} pending_puts;

static void store_pending(void *ctx)
{
    pending_puts *q = ctx;
    enum { AHEAD = 8 };   /* rows and key filter words on their way (filter_prefetch) */
    size_t bad = 0;
    #pragma omp parallel for schedule(dynamic, 1024) reduction(+ : bad)   /* chunks as threads come (cache.c) */
    for (size_t i = 0; i < q->n; i++) {
        if (i + 2 * AHEAD < q->n)
            for (size_t o = 0; o < q->b->t->sf[q->tb].row_bytes; o += 64) __builtin_prefetch((char *)q->v[i + 2 * AHEAD].h + o);
        if (i + AHEAD < q->n && !emb_row_slot1(q->v[i + AHEAD].h)) filter_prefetch(q->b->t, q->tb, q->v[i + AHEAD].h->key, 1);
        put_image(q->b, q->tb, &q->v[i]);
        /* from the image, in the cache now: the rows are not read twice */
        if (q->check) bad += !emb_row_finite(q->check, (const emb_row_head *)q->v[i].img);
    }
    q->bad += bad;
    q->n = 0;
}

size_t emb_tier_put_rows(emb_tier_batch *b, int tb, void *const *recs, size_t n, const struct emb_table *check,
                         size_t *nonfinite)
{
    size_t chunk = WRITE_BUF / b->t->sf[tb].slot_bytes + 1;   /* a buffer's puts at most */
    pending_puts q = { b, tb, xmalloc((chunk < n ? chunk : n ? n : 1) * sizeof *q.v), 0, check, 0 };
    for (size_t i = 0; i < n;) {
        size_t k = n - i < SEAL_CHUNK ? n - i : SEAL_CHUNK;
        seal_full(b, k);
        emb_tier_reserve(b, k);   /* index entries are written in place by the threads */
        for (size_t end = i + k; i < end; i++) {
            if (i + 8 < end) __builtin_prefetch(recs[i + 8]);   /* its head, for its old slot (place_put) */
            placed p = place_put(b, tb, recs[i], store_pending, &q);   /* a full buffer stores q's puts first */
            q.v[q.n++] = p;
        }
        store_pending(&q);
    }
    if (nonfinite) *nonfinite += q.bad;
    free(q.v);
    return n * b->t->sf[tb].slot_bytes;
}

void emb_tier_del(emb_tier_batch *b, int tb, uint64_t key, uint64_t aux)
{
    seal_full(b, 1);
    aux &= ~EMB_ROW_CLEAN;
    ientry *e = add_ientry(b);
    e->key = key;
    e->tb = (uint8_t)tb;
    e->del = 1;
    memset(&e->v, 0, sizeof e->v);
    if (aux) {
        add_freed(b, tb, aux);
        b->row_delta[tb]--;
        b->n_deleted++;
    }
}

/* After commits that deleted or moved rows (shrink, repack), at emb_tier_release: the file system
 * gets back the pages of free slots (holes punched) and the free tail of the file (cut off). Rows
 * do not move; a slot read back from a hole reads zeros, and only free slots are there. */
static void release_free(emb_tier *t, slot_file *s)
{
    uint64_t sb = s->slot_bytes, h = s->hwm;
    while (h > 0 && slot_free(s, h - 1)) h--;
    h = round_up(h, s->blk);
    if (h < s->hwm) {
        s->free_slots -= s->hwm - h;
        s->hwm = h;
        pthread_mutex_lock(&t->zmu);
        zfill_hold(t, s);
        if (ftruncate(s->fd, (off_t)(HEADER_BYTES + h * sb)) == 0)   /* else the space stays: nothing is lost */
            __atomic_store_n(&s->backed, HEADER_BYTES + h * sb, __ATOMIC_RELEASE);
        s->zwant = s->backed;
        pthread_mutex_unlock(&t->zmu);
    }
    for (uint64_t i = next_free(s, 0); i < s->hwm; i = next_free(s, i)) {
        uint64_t j = i;
        while (j < s->hwm && slot_free(s, j)) j++;
        uint64_t off0 = round_up(HEADER_BYTES + i * sb, 4096), off1 = (HEADER_BYTES + j * sb) / 4096 * 4096;
        if (off1 > off0 && fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)off0, (off_t)(off1 - off0)) == 0)
            mark_punched(s, off0 / 4096, off1 / 4096);
        i = j;
    }
}

/* RocksDB's own compactions on or off. An epoch's repack holds them off until its full compaction:
 * its commits' files (an entry for most keys) set off a compaction of the whole index by size
 * amplification, which the full compaction after them did again (at the end-to-end bench's first
 * epoch's end 17.7M and then 11.1M entries read, where the full compaction alone reads 20.5M: a
 * third less CPU, docs/performance.md). RocksDB stalls no writes for the runs gathering meanwhile:
 * its limits on level-0 files hold only with its compactions on. Should the setting fail,
 * compactions stay as they are. The writer's thread and the trainer's (an abort) may both turn
 * them on. */
static void auto_compactions(emb_tier *t, int on)
{
    if (__atomic_load_n(&t->auto_off, __ATOMIC_ACQUIRE) == !on) return;
    const char *k[1] = { "disable_auto_compactions" }, *v[1] = { on ? "false" : "true" };
    char *e = NULL;
    rocksdb_set_options_cf(t->db, t->cf, 1, k, v, &e);
    if (e) free(e);
    else __atomic_store_n(&t->auto_off, !on, __ATOMIC_RELEASE);
}

/* Rows in use in slots [p0, p0 + page) below hwm, those in `gone` (freed by the batch) not counted. */
static uint64_t page_live(const slot_file *s, const uint8_t *gone, uint64_t p0, uint64_t page, uint64_t hwm)
{
    /* a page of 8 to 64 slots, aligned, below hwm: its bits in the bitmap's word, a popcount (the
     * pass's repack looks at every page of the file at each pass's end) */
    if (page >= 8 && page <= 64 && !(page & (page - 1)) && !(p0 & (page - 1)) && p0 + page <= hwm) {
        uint64_t m = page == 64 ? ~0ull : ((1ull << page) - 1) << (p0 & 63);
        uint64_t used = ((p0 >> 6) < s->words ? s->bits[p0 >> 6] : 0) & m, g = 0;
        memcpy(&g, gone + p0 / 8, page / 8);   /* little-endian: slot p0 + i is bit i */
        g = page == 64 ? g : g << (p0 & 63);
        return (uint64_t)__builtin_popcountll(used & ~g);
    }
    uint64_t live = 0;
    for (uint64_t j = p0; j < p0 + page && j < hwm; j++) live += !slot_free(s, j) && !(gone[j / 8] >> (j % 8) & 1);
    return live;
}

int emb_tier_repack(emb_tier_batch *b, double max_waste, double target_waste, int compact, uint64_t max_rows,
                    emb_tier_moved_fn moved, void *ctx, uint64_t *rows, int *more, char *err, size_t errlen)
{
    emb_tier *t = b->t;
    int ret = 0, cut = 0, active = 0;
    *rows = 0;
    /* the pages are read from the file: a put of this batch could be in one, not yet written */
    CHECK(!b->n_placed);
    for (int tb = 0; tb < t->n && ret == 0 && !cut; tb++) {
        slot_file *s = &t->sf[tb];
        uint64_t sb = s->slot_bytes, page = sb < 4096 ? 4096 / sb : 1, hwm = s->hwm;
        if (page < 2) continue;   /* a slot a page: no page holds free slots beside live ones */
        /* the slots this batch frees (shrink's deletions) count as free: their rows are gone */
        uint8_t *gone = xcalloc((size_t)(hwm / 8 + 1), 1);
        for (size_t i = 0; i < b->n_fr; i++)
            if (freed_tb(b->fr[i]) == tb && freed_slot1(b->fr[i]) - 1 < hwm)
                gone[(freed_slot1(b->fr[i]) - 1) / 8] |= (uint8_t)(1u << ((freed_slot1(b->fr[i]) - 1) % 8));
        uint64_t max_live = s->repack_live;   /* a repack cut short goes on with its own pages */
        if (!s->repack_at) {
            /* the pages by their live rows: the waste is the free slots of pages still in use
             * (whole free pages go back to the file system, emb_tier_release, and cost no disk) */
            uint64_t *hist = xcalloc(page + 1, sizeof *hist), live = 0, waste = 0;
            for (uint64_t p0 = 0; p0 < hwm; p0 += page) {
                uint64_t l = page_live(s, gone, p0, page, hwm);
                hist[l]++;
                live += l;
                if (l) waste += page - l;
            }
            /* move the sparsest pages: the fewest live rows L that leave at most target_waste */
            max_live = 0;
            if (hwm >= 16 * page && (double)waste > max_waste * (double)live) {
                uint64_t left = waste;
                while (max_live + 1 < page && (double)left > target_waste * (double)live) {
                    max_live++;
                    left -= hist[max_live] * (page - max_live);
                }
            }
            free(hist);
            if (!max_live) {
                free(gone);
                continue;
            }
        }
        s->repack_live = max_live;
        active = 1;
        if (compact) auto_compactions(t, 0);   /* on again after the full compaction (commit_complete) */
        /* the rows of those pages go densely to the file's first runs of free slots (alloc_slot),
         * the end of the file only when those are taken; their pages are then free whole. A
         * repack of several commits fills, from the second on, the pages the commits before
         * emptied: the file does not grow by the rows it moves (moved to its end, the end-to-end
         * bench's file went from 16.8M slots to 23M, docs/performance.md). Which pages move is
         * read from the bitmap as it was (before): the slots taken by the moves are not yet
         * written, and a page they fill is not read back. */
        s->cursor = 0;
        s->in_run = 0;
        slot_file before = { .hwm = hwm };   /* what page_live reads; the rest is the zero filler's */
        before.words = hwm / 64 + 1 < s->words ? hwm / 64 + 1 : s->words;
        before.bits = xmalloc((before.words + 1) * sizeof *before.bits);
        memcpy(before.bits, s->bits, before.words * sizeof *before.bits);
        size_t chunk = WRITE_BUF / (page * sb) * page;   /* slots read at once: whole pages */
        uint8_t *buf = xaligned_alloc(4096, chunk * sb), *rec = xmalloc(s->row_bytes);
        uint64_t c0 = s->repack_at ? (s->repack_at - 1) / chunk * chunk : 0;
        s->repack_at = 0;
        for (; c0 < hwm && ret == 0 && !cut; c0 += chunk) {
            uint64_t c1 = c0 + chunk < hwm ? c0 + chunk : round_up(hwm, page), want_read = 0;
            for (uint64_t p0 = c0; p0 < c1 && !want_read; p0 += page) {
                uint64_t live = page_live(&before, gone, p0, page, hwm);
                want_read = live && live <= max_live;
            }
            if (!want_read) continue;
            /* whole blocks up to the last slot in use: the file may end there */
            size_t len = (size_t)round_up((c1 < hwm ? c1 : hwm) - c0, s->blk) * sb;
            ret = read_slot_bytes(t, tb, buf, len, HEADER_BYTES + c0 * sb, err, errlen);
            for (uint64_t p0 = c0; p0 < c1 && ret == 0; p0 += page) {
                if (*rows >= max_rows) {   /* the rest in the next batch, from this page on */
                    s->repack_at = p0 + 1;
                    cut = 1;
                    break;
                }
                uint64_t live = page_live(&before, gone, p0, page, hwm);
                if (!live || live > max_live) continue;
                for (uint64_t j = p0; j < p0 + page && ret == 0; j++) {
                    if (!page_live(&before, gone, j, 1, hwm)) continue;
                    const uint8_t *img = buf + (j - c0) * sb;
                    ret = check_slot(t, tb, img, j, ((const emb_row_head *)img)->key, err, errlen);
                    if (ret) break;
                    memcpy(rec, img, s->row_bytes);
                    emb_row_head *h = (emb_row_head *)rec;
                    h->aux = j + 1;   /* the slot it leaves, freed once the commit is durable */
                    emb_tier_put(b, tb, rec);
                    if (moved) moved(ctx, tb, h->key, h->aux);
                    b->n_moved++;
                    ++*rows;
                }
            }
        }
        if (!cut) s->repack_live = 0;
        free(before.bits);
        free(buf);
        free(rec);
        free(gone);
    }
    *more = cut;
    if (ret == 0 && active && !cut && compact) b->repack_done = 1;
    return ret;
}

static void batch_free(emb_tier_batch *b)
{
    drain(b, 0);   /* the buffers may still be read by writes in flight */
    drain(b, 1);
    free(b->runs[0]), free(b->runs[1]);
    free(b->ie);
    for (seg *g = b->newest; g;) {
        seg *older = g->older;
        free(g);
        g = older;
    }
    if (b->spill_fd >= 0) close(b->spill_fd);
    free(b->written);
    free(b->drec);
    free(b->fr);
    free(b->row_delta);
    free(b);
}

/* The batch is done with (committed or dropped): fetches stop finding it, and it is freed once no
 * fetch can be reading it (emb_tier_settle). */
static void batch_retire(emb_tier_batch *b)
{
    emb_tier *t = b->t;
    emb_tier_batch *want = b;
    __atomic_compare_exchange_n(&t->open, &want, NULL, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    want = b;
    __atomic_compare_exchange_n(&t->committing, &want, NULL, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    drain(b, 0);
    drain(b, 1);
    pthread_mutex_lock(&t->rec_mu);
    b->next_retired = t->retired;
    t->retired = b;
    pthread_mutex_unlock(&t->rec_mu);
    free_retired(t);
}

void emb_tier_abort(emb_tier_batch *b)
{
    if (b->n_ie || b->n_fr || b->newest) b->t->failed = 1;   /* its slots stay marked used until the folder is opened again */
    auto_compactions(b->t, 1);   /* a repack cut short */
    batch_retire(b);
}

int emb_tier_seal(emb_tier_batch *b, char *err, size_t errlen)
{
    submit_buf(b, b->cur);
    /* the index changes are sorted and spilled while the writes complete (the boundary waited for
     * the disk after the sort before); fetches see the segment only once the rows are written */
    size_t bytes = b->n_ie * sizeof *b->ie;
    int ret = b->n_ie && !b->err ? spill_open(b, err, errlen) : 0;
    if (ret == 0 && b->n_ie && !b->err) {
        sort_ientries(b->ie, b->n_ie, 0);
        for (size_t done = 0; done < bytes;) {
            ssize_t w = pwrite(b->spill_fd, (char *)b->ie + done, bytes - done, (off_t)(b->spill_end + done));
            if (w <= 0) {
                b->err = w < 0 ? -errno : -ENOSPC;
                snprintf(b->errmsg, sizeof b->errmsg, "%s: cannot write a temporary file: %s", b->t->dir, strerror(-b->err));
                break;
            }
            done += (size_t)w;
        }
    }
    drain(b, 0);
    drain(b, 1);
    if (b->err) {
        snprintf(err, errlen, "%s", b->errmsg);
        return b->err;
    }
    if (ret < 0) return ret;
    if (!b->n_ie) return 0;
    emb_tier *t = b->t;
    seg *g = xmalloc(sizeof *g + ((size_t)t->n + 1) * sizeof *g->tb_at);
    g->n = b->n_ie;
    g->off = b->spill_end;
    for (int tb = 0, i = 0; tb <= t->n; tb++) {   /* each table's first entry */
        while ((size_t)i < b->n_ie && b->ie[i].tb < tb) i++;
        g->tb_at[tb] = (size_t)i;
    }
    g->tb_at[t->n] = b->n_ie;
    g->older = b->newest;
    __atomic_store_n(&b->newest, g, __ATOMIC_RELEASE);   /* whole before a fetch can see it */
    b->spill_end += bytes;
    b->n_segs++;
    b->seg_bytes += sizeof *g + ((size_t)t->n + 1) * sizeof *g->tb_at;
    b->n_ie = 0;
    return 0;
}

int emb_tier_finish(emb_tier_batch *b, char *err, size_t errlen)
{
    int ret = emb_tier_seal(b, err, errlen);
    if (ret < 0) return ret;
    emb_tier *t = b->t;
    /* the batch being committed is searched by fetches until its commit returns */
    __atomic_store_n(&t->committing, b, __ATOMIC_RELEASE);
    emb_tier_batch *want = b;
    __atomic_compare_exchange_n(&t->open, &want, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return 0;
}

/* ---- the open batch's segments, spilled ---- */

/* Where a batch's sealed segments live: a file of its own (O_TMPFILE in the folder, gone with the
 * process), read through the page cache. 0 or <0 with err. */
static int spill_open(emb_tier_batch *b, char *err, size_t errlen)
{
    if (b->spill_fd >= 0) return 0;
    int fd = open(b->t->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {   /* no O_TMPFILE here: a file unlinked at once */
        char path[4096];
        snprintf(path, sizeof path, "%s/spill.XXXXXX", b->t->dir);
        fd = mkostemp(path, O_CLOEXEC);
        if (fd >= 0) unlink(path);
    }
    if (fd < 0) return fail(err, errlen, -errno, "%s: cannot create a temporary file: %s", b->t->dir, strerror(errno));
    b->spill_fd = fd;
    return 0;
}

/* A reader of a segment's entries, SEG_CHUNK at a time. */
typedef struct {
    int fd, err;
    uint64_t off;            /* the file offset of the next entry to read in */
    size_t left;             /* entries not read in yet */
    size_t at, have;         /* the head's place in buf; entries in buf */
    ientry buf[SEG_CHUNK];
} seg_reader;

static void segr_init(seg_reader *r, int fd, uint64_t off, size_t n)
{
    r->fd = fd;
    r->err = 0;
    r->off = off;
    r->left = n;
    r->at = r->have = 0;
}

/* The entry at the reader's head, or NULL at its end (r->err: a read failed). */
static const ientry *segr_peek(seg_reader *r)
{
    if (r->at < r->have) return &r->buf[r->at];
    if (!r->left || r->err) return NULL;
    size_t k = r->left < SEG_CHUNK ? r->left : SEG_CHUNK, bytes = k * sizeof *r->buf;
    int e;
    if (read_at(r->fd, r->buf, bytes, r->off, &e) < bytes) {
        r->err = e ? e : -EIO;
        return NULL;
    }
    r->off += bytes;
    r->left -= k;
    r->at = 0;
    r->have = k;
    return r->buf;
}

/* Consume the entries of the key at the head: *out is the one that stands (the last put, or a
 * deletion: a deletion wins: shrink after the put). */
static void segr_run(seg_reader *r, ientry *out)
{
    const ientry *h = segr_peek(r);
    uint64_t key = h->key;
    uint8_t tb = h->tb;
    int del = 0;
    for (; h && h->key == key && h->tb == tb; r->at++, h = segr_peek(r)) {
        if (!del || h->del) *out = *h;
        del |= h->del;
    }
}

/* The entries of table tb in segment g: a reader over them. */
static void segr_table(seg_reader *r, const emb_tier_batch *b, const seg *g, int tb)
{
    segr_init(r, b->spill_fd, g->off + g->tb_at[tb] * sizeof(ientry), g->tb_at[tb + 1] - g->tb_at[tb]);
}

static int key_order_cmp(const void *x, const void *y, void *keys)
{
    uint64_t a = ((const uint64_t *)keys)[*(const size_t *)x], b = ((const uint64_t *)keys)[*(const size_t *)y];
    return (a > b) - (a < b);
}

/* The answer of the batches not yet in the index for the keys of table tb (a fetch's): the open
 * batch's sealed segments, newest first, then those of the batch being committed. found[i] = 1 and
 * aux[i] = slot + 1 where the newest segment holding keys[i] put it, found[i] = 2 (aux[i] = 0)
 * where it deleted it, found[i] = 3 (aux[i] = 0) where the key filter rules it out (the tier has
 * no copy: lookup_chunk passes over it), found[i] = 0 where none has it. A put adds its key to the
 * filter before its segment is sealed, so the keys ruled out are in no segment, and each segment's
 * entries of the table are merged in key order with the others only (most of a fetch's keys are
 * new; docs/performance.md, thirty-third session). Segments are never changed once sealed, and
 * batches are freed only when no fetch reads them (free_retired). 0, or <0 with err (a spill
 * file's read failed). */
static int open_lookup(emb_tier *t, int tb, const uint64_t *keys, size_t n, uint64_t *aux, uint8_t *found, char *err,
                       size_t errlen)
{
    memset(found, 0, n);
    emb_tier_batch *bs[2] = { __atomic_load_n(&t->open, __ATOMIC_SEQ_CST), __atomic_load_n(&t->committing, __ATOMIC_SEQ_CST) };
    if (!n || ((!bs[0] || !__atomic_load_n(&bs[0]->newest, __ATOMIC_ACQUIRE)) &&
               (!bs[1] || !__atomic_load_n(&bs[1]->newest, __ATOMIC_ACQUIRE))))
        return 0;
    size_t *ord = xmalloc(n * sizeof *ord);   /* the keys the filter lets through, in ascending order */
    int sorted = 1;
    size_t all = n;
    enum { AHEAD = 8 };   /* the filter's words of the keys AHEAD further on their way */
    n = 0;
    for (size_t i = 0; i < all; i++) {
        if (i + AHEAD < all) filter_prefetch(t, tb, keys[i + AHEAD], 0);
        if (!filter_may_hold(t, tb, keys[i])) {
            found[i] = 3;
            aux[i] = 0;
            continue;
        }
        if (n && keys[ord[n - 1]] >= keys[i]) sorted = 0;
        ord[n++] = i;
    }
    if (!sorted) qsort_r(ord, n, sizeof *ord, key_order_cmp, (void *)keys);
    seg_reader *r = xmalloc(sizeof *r);
    int ret = 0;
    for (int k = 0; k < 2 && ret == 0; k++) {
        if (!bs[k] || (k == 1 && bs[1] == bs[0])) continue;
        for (const seg *g = __atomic_load_n(&bs[k]->newest, __ATOMIC_ACQUIRE); g && ret == 0; g = g->older) {
            segr_table(r, bs[k], g, tb);
            const ientry *h = segr_peek(r);
            for (size_t j = 0; j < n && h; j++) {
                size_t i = ord[j];
                while (h && h->key < keys[i]) {
                    r->at++;
                    h = segr_peek(r);
                }
                if (!h || h->key != keys[i]) continue;
                ientry e;
                segr_run(r, &e);
                for (; ; j++) {   /* the key, and its copies after it */
                    i = ord[j];
                    if (!found[i]) {
                        found[i] = e.del ? 2 : 1;
                        aux[i] = e.del ? 0 : e.v.slot + 1;
                    }
                    if (j + 1 == n || keys[ord[j + 1]] != e.key) break;
                }
                h = segr_peek(r);
            }
            if (r->err) ret = fail(err, errlen, r->err, "%s: cannot read a temporary file: %s", t->dir, strerror(-r->err));
        }
    }
    free(r);
    free(ord);
    return ret;
}

/* A segment reader's head as the merge compares it: (table, key), then the newer segment first */
typedef struct {
    uint64_t key;
    uint32_t tb, g;
} seg_head;

static inline int head_lt(const seg_head *x, const seg_head *y)
{
    if (x->tb != y->tb) return x->tb < y->tb;
    if (x->key != y->key) return x->key < y->key;
    return x->g > y->g;
}

/* The batch's sealed segments merged in (table, key) order: fn(ctx, e) for each key's newest
 * segment's entry (segr_run's). The heap holds the readers' heads by value, so that a compare
 * reads two adjacent heads instead of two readers' buffers (docs/performance.md, thirty-first
 * session). 0, or <0 (a read failed, or fn's). */
static int merge_segments(const emb_tier_batch *b, int (*fn)(void *ctx, const ientry *e), void *ctx)
{
    size_t S = b->n_segs;
    seg_reader *rd = xmalloc((S ? S : 1) * sizeof *rd);
    size_t k = S;
    for (const seg *g = b->newest; g; g = g->older) {   /* rd[0] the oldest */
        k--;
        segr_init(&rd[k], b->spill_fd, g->off, g->n);
    }
    seg_head *heap = xmalloc((S ? S : 1) * sizeof *heap);   /* the segments by their heads */
    size_t hn = 0;
    for (size_t g = 0; g < S; g++) {
        const ientry *h = segr_peek(&rd[g]);
        if (!h) continue;
        size_t c = hn++;   /* sift up */
        heap[c] = (seg_head){ h->key, h->tb, (uint32_t)g };
        while (c && head_lt(&heap[c], &heap[(c - 1) / 2])) {
            size_t p = (c - 1) / 2;
            seg_head tmp = heap[c];
            heap[c] = heap[p], heap[p] = tmp, c = p;
        }
    }
    int ret = 0;
    while (hn && ret == 0) {
        ientry e, unused;
        seg_head key = heap[0];
        segr_run(&rd[key.g], &e);
        ret = fn(ctx, &e);
        /* every segment past this key (the newest's run is consumed already) */
        for (int first = 1; hn && (first || (heap[0].tb == key.tb && heap[0].key == key.key)); first = 0) {
            seg_reader *r = &rd[heap[0].g];
            if (!first) segr_run(r, &unused);
            const ientry *h = segr_peek(r);
            if (h) {
                heap[0].key = h->key;
                heap[0].tb = h->tb;
            } else {
                heap[0] = heap[--hn];
            }
            size_t c = 0;   /* sift down */
            for (;;) {
                size_t l = 2 * c + 1, m = c;
                if (l < hn && head_lt(&heap[l], &heap[m])) m = l;
                if (l + 1 < hn && head_lt(&heap[l + 1], &heap[m])) m = l + 1;
                if (m == c) break;
                seg_head tmp = heap[c];
                heap[c] = heap[m], heap[m] = tmp, c = m;
            }
        }
    }
    for (size_t g = 0; g < S && ret == 0; g++)
        if (rd[g].err) ret = rd[g].err;
    free(rd);
    free(heap);
    return ret;
}

/* The index changes (merged) and the catalog go into one SST file, which RocksDB ingests as a
 * whole: it syncs the file, links it into the index folder and records it in its manifest, so a
 * commit is all there or not at all. This skips the WAL and the memtable, whose skip list was most
 * of a commit's CPU and made every index lookup search it too (docs/performance.md). */
static int sst_entry(void *ctx, const ientry *e)
{
    rocksdb_sstfilewriter_t *w = ((void **)ctx)[0];
    char **errp = ((void **)ctx)[1];
    uint8_t k[10];
    idx_key(k, e->tb, e->key);
    if (e->del) rocksdb_sstfilewriter_delete(w, (const char *)k, 10, errp);
    else rocksdb_sstfilewriter_put(w, (const char *)k, 10, (const char *)&e->v, sizeof e->v, errp);
    return *errp ? -EIO : 0;
}

/* A commit's entries go into the slot map in pieces of SMAP_PIECE, their sets on their way before
 * the lock is taken, and a fetch waiting for the map takes it between two pieces. The writer runs
 * at the lowest priority: holding the map through a whole commit's million entries, it kept the
 * fetch waiting, and the trainer waiting for the fetch, until the trainer's cores let it finish
 * (docs/performance.md, fourteenth session). A fetch meanwhile finds the committed keys in the
 * batch being committed first (open_lookup), so the map's state between pieces is never read for
 * them. */
enum { SMAP_PIECE = 512 };
typedef struct {
    emb_tier *t;
    size_t n;
    uint8_t tb[SMAP_PIECE];
    uint64_t key[SMAP_PIECE], slot1[SMAP_PIECE];
} smap_piece;

static void smap_apply(smap_piece *p)
{
    emb_tier *t = p->t;
    uint64_t h;
    for (size_t i = 0; i < p->n && t->smap_sets; i++) __builtin_prefetch(smap_where(t, p->tb[i], p->key[i], &h), 1);
    pthread_mutex_lock(&t->smap_mu);
    for (size_t i = 0; i < p->n; i++) smap_set(t, p->tb[i], p->key[i], p->slot1[i]);
    pthread_mutex_unlock(&t->smap_mu);
    p->n = 0;
    while (__atomic_load_n(&t->smap_waiting, __ATOMIC_ACQUIRE)) sched_yield();   /* else this thread takes it again first */
}

static int smap_entry(void *ctx, const ientry *e)
{
    smap_piece *p = ctx;
    p->tb[p->n] = e->tb;
    p->key[p->n] = e->key;
    p->slot1[p->n] = e->del ? 0 : e->v.slot + 1;
    if (++p->n == SMAP_PIECE) smap_apply(p);
    return 0;
}

/* The batch's sealed segments one after the other, oldest first: fn(ctx, e) for each key's entry
 * in each (segr_run's), so that a key in several comes once from each, its newest last. For the
 * slot map, where the last entry of a key set is the one that stays: the merge of them all that the
 * SST takes (merge_segments) was the writer's largest part of its CPU, and was done twice. 0, or <0
 * (a read failed, or fn's). */
static int each_segment(const emb_tier_batch *b, int (*fn)(void *ctx, const ientry *e), void *ctx)
{
    size_t k = b->n_segs;
    const seg **old = xmalloc((k ? k : 1) * sizeof *old);   /* old[0] the oldest */
    for (const seg *g = b->newest; g; g = g->older) old[--k] = g;
    seg_reader *r = xmalloc(sizeof *r);
    int ret = 0;
    for (size_t i = 0; i < b->n_segs && ret == 0; i++) {
        segr_init(r, b->spill_fd, old[i]->off, old[i]->n);
        ientry e;
        while (ret == 0 && segr_peek(r)) {
            segr_run(r, &e);
            ret = fn(ctx, &e);
        }
        if (ret == 0 && r->err) ret = r->err;
    }
    free(r);
    free(old);
    return ret;
}

/* The batch's index changes and the catalog as one SST file at path (finished, so synced), the
 * side files it names first. 0 or <0 with err (the file is gone then). */
static int write_sst(emb_tier *t, const emb_tier_batch *b, const void *catalog, size_t len, const char *path, char *err,
                     size_t errlen)
{
    uint8_t g[16];   /* the commit record, one commit further */
    put_u64s(g, t->id, t->gen + 1);
    uint8_t side[2][40];   /* the catalog and the deletion record: their files first */
    if (catalog && side_write(t, 0, t->gen + 1, catalog, len, side[0], err, errlen) < 0) return -EIO;
    if (b->drec && side_write(t, 1, t->gen + 1, b->drec, b->drec_len, side[1], err, errlen) < 0) return -EIO;
    unlink(path);   /* a crash's leftover: never ingested, so never part of the index */
    rocksdb_envoptions_t *eo = rocksdb_envoptions_create();
    rocksdb_sstfilewriter_t *w = rocksdb_sstfilewriter_create(eo, t->opt);
    char *e = NULL;
    rocksdb_sstfilewriter_open(w, path, &e);
    /* "c" < "d" < "g" < 'k' keys */
    if (!e && catalog) rocksdb_sstfilewriter_put(w, "c", 1, (const char *)side[0], 40, &e);
    if (!e && b->drec) rocksdb_sstfilewriter_put(w, "d", 1, (const char *)side[1], 40, &e);
    if (!e) rocksdb_sstfilewriter_put(w, "g", 1, (const char *)g, sizeof g, &e);
    void *ctx[2] = { w, &e };
    int mr = e ? 0 : merge_segments(b, sst_entry, ctx);
    if (mr < 0 && !e) {
        snprintf(err, errlen, "%s: cannot read a temporary file: %s", t->dir, strerror(-mr));
        rocksdb_sstfilewriter_destroy(w);
        rocksdb_envoptions_destroy(eo);
        unlink(path);
        return mr;
    }
    if (!e) rocksdb_sstfilewriter_finish(w, &e);
    rocksdb_sstfilewriter_destroy(w);
    rocksdb_envoptions_destroy(eo);
    if (e) {
        snprintf(err, errlen, "%s: commit failed: %s", t->dir, e);
        free(e);
        unlink(path);
        return -EIO;
    }
    return 0;
}

/* Add the SST file at path to the index: the commit is durable. A commit's own file is moved into
 * RocksDB, and a failure deletes it. A prepared commit's file (the job may have recorded it: if
 * this process dies, the next open publishes it) is copied in and deleted only once ingested:
 * RocksDB writes the commit's sequence number into the file it ingests (write_global_seqno, which
 * the C API cannot turn off), in place when it moves the file, so a process killed between that
 * write and the index's update left a prepared file no later ingestion accepts ("global seqno
 * property" corruption: mpi::admission_does_not_depend_on_the_number_of_processes saw it). */
static int ingest_file(emb_tier *t, const char *path, char *err, size_t errlen)
{
    char *e = NULL;
    const char *files[1] = { path };
    int prepared = strstr(path, "/prepared-") != NULL;
    rocksdb_ingestexternalfileoptions_t *io = rocksdb_ingestexternalfileoptions_create();
    rocksdb_ingestexternalfileoptions_set_move_files(io, !prepared);
    rocksdb_ingest_external_file_cf(t->db, t->cf, files, 1, io, &e);
    rocksdb_ingestexternalfileoptions_destroy(io);
    if (e) {
        snprintf(err, errlen, "%s: commit failed: %s", t->dir, e);
        free(e);
        if (!prepared) unlink(path);
        return -EIO;
    }
    if (prepared) unlink(path);   /* ingested: a crash before this leaves a commit the next open counts, and drops the file */
    return 0;
}

/* The first half of a commit: the batch finished, its slots synced, its index changes and the
 * catalog written as the SST file at path (*empty: nothing to commit, no file). 0 or <0 with err. */
static int commit_stage(emb_tier_batch *b, const void *catalog, size_t len, const char *path, int *empty, char *err,
                        size_t errlen)
{
    emb_tier *t = b->t;
    int ret = 0;
    *empty = 0;
    if (t->failed) {
        if (t->failmsg[0]) snprintf(err, errlen, "%s", t->failmsg);
        else snprintf(err, errlen, "%s: an earlier commit failed; the table folder keeps its last committed pass", t->dir);
        ret = -EIO;
    }
    /* a batch committed on the thread that put into it is finished here; one handed to another
     * thread was before (no write of it is in flight, and the other thread puts no more) */
    if (ret == 0 && __atomic_load_n(&t->committing, __ATOMIC_ACQUIRE) != b) ret = emb_tier_finish(b, err, errlen);
    for (int i = 0; ret == 0 && i < t->n; i++) {
        if (b->written[i] && fdatasync(t->sf[i].fd) < 0) {
            ret = -errno;
            snprintf(err, errlen, "%s/table%d.slots: fdatasync failed: %s", t->dir, i, strerror(errno));
        }
    }
    *empty = !b->n_segs && !catalog;   /* nothing changes: no commit */
    if (ret == 0 && !*empty) ret = write_sst(t, b, catalog, len, path, err, errlen);
    return ret;
}

/* The second half: the staged file ingested (ret 0, not empty), the record written, the slots the
 * commit freed handed over; after a failure (ret < 0) the tier refuses further commits. The
 * batch is freed. keep_side: the side files no committed index names stay (a prepared commit's,
 * for the next open to publish). Returns ret, or the ingestion's failure. */
static int commit_complete(emb_tier_batch *b, int ret, int empty, int catalog, const char *path, int keep_side,
                           char *err, size_t errlen)
{
    emb_tier *t = b->t;
    if (ret == 0 && !empty) ret = ingest_file(t, path, err, errlen);
    if (ret == 0 && !empty) {
        /* durable: the record follows. Should it fail, the folder (the record one behind) is still
         * good, and opening it writes the record again; later commits are refused meanwhile. */
        t->gen++;
        if (catalog) t->side_gen[0] = t->gen;
        if (b->drec) t->side_gen[1] = t->gen;
        char rerr[600];
        if (commit_record_write(t, rerr, sizeof rerr) < 0) {
            t->failed = 1;
            snprintf(t->failmsg, sizeof t->failmsg, "%s (the commit it records is durable)", rerr);
        }
    }
    if ((catalog || b->drec) && !keep_side) side_clean(t);   /* the files no pointer names now (a failed commit's too) */
    if (ret == 0 && b->repack_done) {   /* most keys have a new entry: the old ones go now, not some day */
        rocksdb_compact_range_cf(t->db, t->cf, NULL, 0, NULL, 0);
    }
    if (ret != 0 || b->repack_done) auto_compactions(t, 1);
    if (ret == 0) {
        smap_piece *piece = xmalloc(sizeof *piece);   /* the map follows the index */
        piece->t = t;
        piece->n = 0;
        int mr = each_segment(b, smap_entry, piece);
        smap_apply(piece);
        free(piece);
        if (mr < 0) {   /* the index is right, the map may not be: nothing is looked up in it from now */
            pthread_mutex_lock(&t->smap_mu);
            memset(t->smap, 0, t->smap_sets * sizeof *t->smap);
            pthread_mutex_unlock(&t->smap_mu);
        }
        /* the slots the commit freed, for the thread that puts (it allocates from the bitmap) */
        pthread_mutex_lock(&t->rec_mu);
        if (t->n_rec + b->n_fr > t->cap_rec)
            t->rec = xrealloc(t->rec, (t->cap_rec = t->n_rec + b->n_fr + 1024) * sizeof *t->rec);
        if (b->n_fr) memcpy(t->rec + t->n_rec, b->fr, b->n_fr * sizeof *b->fr);
        t->n_rec += b->n_fr;
        /* the rows the index holds now (read by any thread: whole words) */
        for (int i = 0; i < t->n; i++) __atomic_add_fetch(&t->sf[i].rows, (uint64_t)b->row_delta[i], __ATOMIC_RELAXED);
        t->rec_release |= b->n_deleted || b->n_moved;
        pthread_mutex_unlock(&t->rec_mu);
    } else {
        t->failed = 1;
    }
    batch_retire(b);
    return ret;
}

int emb_tier_commit(emb_tier_batch *b, const void *catalog, size_t len, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/commit.sst", b->t->dir);
    int empty, ret = commit_stage(b, catalog, len, path, &empty, err, errlen);
    return commit_complete(b, ret, empty, catalog != NULL, path, 0, err, errlen);
}

/* ---- a commit in two phases (several folders committing one pass together) ---- */

static int fsync_dir(const char *dir, char *err, size_t errlen)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int ret = fd < 0 || fsync(fd) < 0 ? -errno : 0;
    if (fd >= 0) close(fd);
    if (ret < 0) snprintf(err, errlen, "%s: cannot sync the folder: %s", dir, strerror(-ret));
    return ret;
}

static void prepared_path(const emb_tier *t, uint64_t gen, char *path, size_t n)
{
    snprintf(path, n, "%s/prepared-%llu.sst", t->dir, (unsigned long long)gen);
}

int emb_tier_prepare(emb_tier_batch *b, const void *catalog, size_t len, char *err, size_t errlen)
{
    emb_tier *t = b->t;
    CHECK(catalog && !t->prepared);
    char path[4096];
    prepared_path(t, t->gen + 1, path, sizeof path);
    int empty, ret = commit_stage(b, catalog, len, path, &empty, err, errlen);
    if (ret == 0) ret = fsync_dir(t->dir, err, errlen);   /* the file's name is durable too */
    if (ret < 0) {
        unlink(path);
        return commit_complete(b, ret, empty, 1, path, 0, err, errlen);
    }
    t->prepared = b;
    return 0;
}

int emb_tier_publish(emb_tier *t, char *err, size_t errlen)
{
    emb_tier_batch *b = t->prepared;
    CHECK(b);
    t->prepared = NULL;
    char path[4096];
    prepared_path(t, t->gen + 1, path, sizeof path);
    return commit_complete(b, 0, 0, 1, path, 0, err, errlen);
}

void emb_tier_discard(emb_tier *t)
{
    emb_tier_batch *b = t->prepared;
    if (!b) return;
    t->prepared = NULL;
    char path[4096], err[64];
    prepared_path(t, t->gen + 1, path, sizeof path);
    unlink(path);
    commit_complete(b, -ECANCELED, 0, 1, path, 0, err, sizeof err);
    snprintf(t->failmsg, sizeof t->failmsg, "%s: a commit prepared here was called off; the folder keeps its last commit",
             t->dir);
}

int emb_tier_resolve_prepared(emb_tier *t, uint64_t want, int *published, char *err, size_t errlen)
{
    *published = 0;
    DIR *d = opendir(t->dir);
    if (!d) return fail(err, errlen, -errno, "%s: cannot list the folder: %s", t->dir, strerror(errno));
    int ret = 0;
    struct dirent *de;
    while ((de = readdir(d)) && ret == 0) {
        unsigned long long g;
        char tail[8];
        if (sscanf(de->d_name, "prepared-%llu.%7s", &g, tail) != 2 || strcmp(tail, "sst")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", t->dir, de->d_name);
        if (g == t->gen + 1 && g == want && !t->readonly) {   /* every folder prepared it: its commit stands */
            ret = ingest_file(t, path, err, errlen);
            if (ret == 0) {
                t->gen++;
                ret = commit_record_write(t, err, errlen);
                *published = ret == 0;
                /* the slots it holds are not in this open's bitmap: nothing may be put or cut
                 * before the folder is opened again */
                t->stale = 1;
                t->failed = 1;
                snprintf(t->failmsg, sizeof t->failmsg, "%s: open the folder again after a prepared commit was published",
                         t->dir);
            }
        } else if (!t->readonly && unlink(path) < 0) {   /* not every folder prepared it: it never happened */
            ret = fail(err, errlen, -errno, "%s: cannot remove it: %s", path, strerror(errno));
        }
    }
    closedir(d);
    if (ret == 0 && !*published && !t->readonly) side_clean(t);   /* the dropped commit's catalog */
    return ret;
}

/* ---- a sharded folder, read as one ---- */

/* DIR/SHARDS.ctrbox names the ranks; each DIR/rank-<r> opens read-only (a share of index_cache
 * each) and must hold the job's commits: a rank ahead or behind is a job killed between its two
 * phases, which the job's --resume settles. */
static int open_sharded(emb_tier **out, const char *dir, int n_tables, const size_t *row_bytes, const char *layout,
                        int readonly, size_t index_cache, char *err, size_t errlen)
{
    int ranks, lanes;
    uint64_t commits;
    if (emb_shards_read(dir, &ranks, &lanes, &commits, err, errlen) < 0) return -EBADMSG;
    if (!readonly)
        return failf(err, errlen, -EINVAL, "%s: a table folder sharded over %d processes opens read-only (eval, predict, "
                     "export-serving, info, ctrbox-table inspect, export, delta, convert, merge); train on in it with "
                     "mpirun -np %d ... --resume %s", dir, ranks, ranks, dir);
    if (ranks < 1 || ranks > 1 << 20) return failf(err, errlen, -EBADMSG, "%s/" EMB_SHARDS_FILE ": %d ranks", dir, ranks);
    emb_tier *t = xcalloc(1, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);   /* its packed fetches' chunks */
    t->dir = xstrdup(dir);
    t->readonly = 1;
    t->lockfd = -1;
    t->gen = commits;
    t->sub = xcalloc((size_t)ranks, sizeof *t->sub);
    uint64_t *ids = xmalloc((size_t)ranks * sizeof *ids);
    int ret = 0;
    for (int r = 0; r < ranks && ret == 0; r++) {
        char sub[4200];
        snprintf(sub, sizeof sub, "%s/rank-%d", dir, r);
        ret = emb_tier_open(&t->sub[r], sub, n_tables, row_bytes, layout, 1, index_cache / (size_t)ranks, err, errlen);
        if (ret < 0) break;
        t->n_sub = r + 1;
        ids[r] = emb_tier_id(t->sub[r]);
        if (emb_tier_commits(t->sub[r]) != commits)
            ret = failf(err, errlen, -EBADMSG, "%s: holds %llu commits, the job recorded %llu in %s/" EMB_SHARDS_FILE " (killed "
                       "between a commit's two phases: the job's --resume settles it)", sub,
                       (unsigned long long)emb_tier_commits(t->sub[r]), (unsigned long long)commits, dir);
        else if (strcmp(emb_tier_layout(t->sub[r]), emb_tier_layout(t->sub[0])))
            ret = failf(err, errlen, -EBADMSG, "%s: its tables differ from rank-0's", sub);
    }
    if (ret == 0) {
        t->n = emb_tier_tables(t->sub[0]);
        t->layout = xstrdup(emb_tier_layout(t->sub[0]));
        t->id = emb_tier_shards_id(ids, ranks);
    }
    free(ids);
    if (ret < 0) {
        close_sharded(t);
        return ret;
    }
    *out = t;
    return 0;
}

static void close_sharded(emb_tier *t)
{
    for (int r = 0; r < t->n_sub; r++) emb_tier_close(t->sub[r]);
    spare_free(t);
    pthread_mutex_destroy(&t->mu);
    free(t->sub), free(t->layout), free(t->dir), free(t);
}

uint64_t emb_tier_shards_id(const uint64_t *ids, int ranks) { return XXH64(ids, (size_t)ranks * sizeof *ids, 0x5348); }

/* The keys (n) of each rank: their positions, rank by rank (pos), and where each rank's start (at, ranks + 1). */
static void split_by_owner(const emb_tier *t, const uint64_t *keys, size_t n, size_t *pos, size_t *at)
{
    memset(at, 0, ((size_t)t->n_sub + 1) * sizeof *at);
    for (size_t i = 0; i < n; i++) at[emb_shard_owner(keys[i], t->n_sub) + 1]++;
    for (int r = 0; r < t->n_sub; r++) at[r + 1] += at[r];
    size_t *fill = xmalloc((size_t)t->n_sub * sizeof *fill);
    memcpy(fill, at, (size_t)t->n_sub * sizeof *fill);
    for (size_t i = 0; i < n; i++) pos[fill[emb_shard_owner(keys[i], t->n_sub)]++] = i;   /* keys' order kept per rank */
    free(fill);
}

typedef struct {
    fetch_sink to;
    const size_t *pos;   /* a rank's key i is the caller's pos[i] */
} routed_sink;

static void routed_put(void *ctx, size_t i, const uint8_t *rec)
{
    routed_sink *s = ctx;
    s->to.put(s->to.ctx, s->pos[i], rec);
}

/* keys (n) by owner: each rank's share (k, m keys; pos: their places among keys) through one(),
 * whose aux answers are put back in the keys' places. */
typedef int (*share_fn)(emb_tier *sub, int tb, const uint64_t *k, size_t m, const size_t *pos, uint64_t *aux, void *ctx,
                        char *err, size_t errlen);

static int by_owner(emb_tier *t, int tb, const uint64_t *keys, size_t n, uint64_t *aux, share_fn one, void *ctx, char *err,
                    size_t errlen)
{
    size_t *pos = xmalloc((n ? n : 1) * sizeof *pos), *at = xmalloc(((size_t)t->n_sub + 1) * sizeof *at);
    uint64_t *k = xmalloc((n ? n : 1) * sizeof *k), *a = xmalloc((n ? n : 1) * sizeof *a);
    split_by_owner(t, keys, n, pos, at);
    int ret = 0;
    for (int r = 0; r < t->n_sub && ret == 0; r++) {
        size_t m = at[r + 1] - at[r];
        for (size_t i = 0; i < m; i++) k[i] = keys[pos[at[r] + i]];
        ret = one(t->sub[r], tb, k, m, pos + at[r], a, ctx, err, errlen);
        for (size_t i = 0; ret == 0 && i < m; i++) aux[pos[at[r] + i]] = a[i];
    }
    free(pos), free(at), free(k), free(a);
    return ret;
}

static int fetch_share(emb_tier *sub, int tb, const uint64_t *k, size_t m, const size_t *pos, uint64_t *aux, void *ctx,
                       char *err, size_t errlen)
{
    routed_sink rs = { *(fetch_sink *)ctx, pos };
    return fetch_into(sub, tb, k, m, (fetch_sink){ routed_put, &rs }, aux, err, errlen);
}

static int fetch_sharded(emb_tier *t, int tb, const uint64_t *keys, size_t n, fetch_sink sink, uint64_t *aux, char *err,
                         size_t errlen)
{
    return by_owner(t, tb, keys, n, aux, fetch_share, &sink, err, errlen);
}

static int lookup_share(emb_tier *sub, int tb, const uint64_t *k, size_t m, const size_t *pos, uint64_t *aux, void *ctx,
                        char *err, size_t errlen)
{
    (void)pos, (void)ctx;
    return emb_tier_lookup(sub, tb, k, m, aux, err, errlen);
}

static int lookup_sharded(emb_tier *t, int tb, const uint64_t *keys, size_t n, uint64_t *aux, char *err, size_t errlen)
{
    return by_owner(t, tb, keys, n, aux, lookup_share, NULL, err, errlen);
}

/* The ranks' index entries of table tb merged in key order (each rank's are in key order; a key
 * is in one rank's only). */
static int scan_sharded(emb_tier *t, int tb, emb_tier_key_fn fn, void *ctx, char *err, size_t errlen)
{
    int R = t->n_sub, ret = 0;
    rocksdb_iterator_t **it = xcalloc((size_t)R, sizeof *it);
    uint8_t k0[2] = { 'k', (uint8_t)tb };
    /* the rank's iterator at its next entry of table tb, or NULL past its last */
    #define AT_TABLE(r)                                                                                     \
        do {                                                                                                \
            size_t kl_;                                                                                     \
            const uint8_t *k_ = rocksdb_iter_valid(it[r]) ? (const uint8_t *)rocksdb_iter_key(it[r], &kl_) : NULL; \
            if (!k_ || kl_ != 10 || k_[0] != 'k' || k_[1] != tb) {                                          \
                rocksdb_iter_destroy(it[r]);                                                                \
                it[r] = NULL;                                                                               \
            }                                                                                               \
        } while (0)
    for (int r = 0; r < R; r++) {
        it[r] = rocksdb_create_iterator(t->sub[r]->db, t->sub[r]->ro);
        rocksdb_iter_seek(it[r], (const char *)k0, 2);
        AT_TABLE(r);
    }
    for (;;) {
        int best = -1;
        uint64_t bk = 0;
        for (int r = 0; r < R; r++) {
            if (!it[r]) continue;
            size_t kl;
            uint64_t key = key_of_idx((const uint8_t *)rocksdb_iter_key(it[r], &kl));
            if (best < 0 || key < bk) best = r, bk = key;
        }
        if (best < 0) break;
        size_t vl;
        const char *v = rocksdb_iter_value(it[best], &vl);
        idx_val iv;
        if (vl != sizeof iv) {
            ret = fail(err, errlen, -EBADMSG, "%s/index: %s", t->sub[best]->dir, "malformed index entry");
            break;
        }
        memcpy(&iv, v, sizeof iv);
        if (fn(ctx, bk, iv.slot, iv.show, iv.click, iv.last_pass)) break;
        rocksdb_iter_next(it[best]);
        char *e = NULL;
        rocksdb_iter_get_error(it[best], &e);
        if (e) {
            ret = fail(err, errlen, -EIO, "%s/index: %s", t->sub[best]->dir, e);
            free(e);
            break;
        }
        AT_TABLE(best);
    }
    #undef AT_TABLE
    for (int r = 0; r < R; r++)
        if (it[r]) rocksdb_iter_destroy(it[r]);
    free(it);
    return ret;
}
