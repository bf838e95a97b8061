/*
 * passes.c: training in passes over the tiers of the sparse tables (AIBox); the API is passes.h.
 *
 * A pass is --pass-rows rows. Three stages overlap: a reader thread parses pass k+2 and
 * collects its distinct keys per table; a fetch thread reads from the SSD tier the rows pass k+1
 * needs that are not in memory; the main thread trains pass k (the trainer, between passes_next
 * and passes_done). At the boundary before pass k trains (passes_next), the main thread installs
 * k's fetched rows, evicts unpinned rows down to the cache budget (k's rows are pinned), and hands
 * k+1's missing keys to the fetch thread. Eviction happens only at boundaries, so a key of k+1
 * found in memory there stays there until k+1 trains (it sees k's update); a key missing there is
 * not touched by k, so the tier's copy is current. With a table folder, passes are cut into parts
 * (the unit of fetch and eviction); a row that leaves memory changed is first written into the
 * tier's open batch (its write-back), which fetches search before the index, and the batch is
 * committed with the catalog (dense state, pending keys and the position in the data) at the
 * pass's end, or at a part's end when it holds its share of the budget (the window): the commit
 * adds the rows in memory that changed, and the writer thread makes it durable while training
 * goes on. A crash resumes after the last commit.
 *
 * Without a table folder (--pass-rows alone) the same loop runs with every row in memory: the
 * reference the tiered runs must reproduce exactly; without --pass-rows an epoch is one pass the
 * trainer streams. This file orchestrates (threads, commits, the catalog); where rows live, the
 * fetches, the install and the eviction are embedding/cache.h's. It never calls the trainer.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../embedding/cache.h"
#include "../embedding/shrink.h"
#include "../embedding/tier.h"
#include "../io/keymap.h"
#include "../io/stream.h"
#include "../io/mix.h"
#include "passes.h"
#include "../embedding/quant.h"
#include "../io/util.h"

#define CATALOG_MAGIC "CTRBXCAT"
#define CATALOG_VERSION 6u   /* 2: settings and data fingerprints apart; 3: a warm start's origin after the head;
                                4: the positions of a pass its committed parts trained, after the origin;
                                5: the tables' deletion records apart, in the tier's "d" record;
                                6: the rates and shrink rules the run was started with (rules_text), after the
                                   positions */
#define RULES_BYTES 320   /* rules_text's room: ten options and their values */

/* Slot files are packed again (emb_tier_repack) when the free slots inside pages still in use pass a
 * share of the live rows: at the epoch's end from 5% down to 1% (disk use stays near the live
 * rows' slots; the index is compacted after it); at each pass's end from 200% down to 150%, a
 * bound on the file between epochs (commits write runs of free slots, their hot rows together, so
 * that freed slots come back in runs: the end-to-end bench's file grew to 2.2 times its rows). */
#define REPACK_EPOCH_WASTE 0.05
#define REPACK_EPOCH_TARGET 0.01
#define REPACK_PASS_WASTE 2.0
#define REPACK_PASS_TARGET 1.5

/* ---- passes and the reader thread ---- */

struct reader;

/* A pass's rows (or, streamed, a shuffle buffer's), shared by its parts. */
typedef struct {
    struct reader *r;    /* told when the last holder lets go (it counts the passes in memory) */
    sample_block rows;
    size_t *order;       /* the training order (a shuffle), or NULL: file order */
    int refs;            /* parts (and the reader) holding it */
    uint64_t index;      /* 1-based pass number within the epoch */
    uint64_t digest;     /* block_digest of its rows */
} pass_unit;

/* A part of a pass: the batches of positions [lo, hi) of its order, sized so that their keys'
 * rows fit the budget (one part per pass when they all do). */
typedef struct {
    pass_unit *u;
    size_t lo, hi;
    int first;           /* begins its pass: the pass clock advances */
    int last;            /* ends its pass */
    key_vec *keys;       /* per table: the part's distinct keys */
} pass_data;

static void unit_gone(struct reader *r, sample_block *rows);

static void unit_release(pass_unit *u)
{
    if (!u || __atomic_sub_fetch(&u->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
    struct reader *r = u->r;
    free(u->order);
    unit_gone(r, &u->rows);
    free(u);
}

static void pass_free(pass_data *p, int n_tables)
{
    if (!p) return;
    unit_release(p->u);
    for (int i = 0; p->keys && i < n_tables; i++) key_vec_free(&p->keys[i]);
    free(p->keys);
    free(p);
}

size_t *passes_order(const train_opts *o, size_t n, int epoch, uint64_t chunk)
{
    if (!o->shuffle_rows) return NULL;
    size_t *perm = xmalloc((n ? n : 1) * sizeof *perm);
    for (size_t i = 0; i < n; i++) perm[i] = i;
    uint64_t s = XXH64(&chunk, sizeof chunk, o->mc.seed * 7919 + (uint64_t)epoch);
    for (size_t i = n; i > 1; i--) {   /* Fisher-Yates with a seeded xorshift */
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        size_t j = (size_t)(s % i);
        size_t tmp = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = tmp;
    }
    return perm;
}

typedef struct reader {
    const train_opts *o;
    uint32_t n_dense;
    const emb_cache *cache;   /* lists a part's keys (and is only read) */
    int n_tables;
    int epoch;           /* seeds the shuffle */
    uint64_t part_cap;   /* bytes of rows a part's keys may take (UINT64_MAX: a pass is one part) */
    uint64_t skip;       /* passes of the epoch already committed (resume) */
    uint64_t skip_rows;  /* and positions of the next one (a resume after a part) */
    const uint64_t *known;  /* the digests of the first epoch's passes seen so far (a copy) */
    uint64_t n_known;
    int whole;           /* known holds the whole first epoch (a later epoch reads it again) */
    uint64_t over;       /* the largest part over part_cap (one batch's keys alone), bytes */
    uint64_t parse_peak; /* the most bytes a pass's rows took while parsed (atomic) */
    emb_part_sets *sets; /* emb_cache_part's, kept from part to part (the reader thread's) */
    sample_block spare;  /* the rows of the last pass freed, for the next (has_spare) */
    int has_spare;
    uint64_t last_nnz;   /* keys of the last pass parsed (the next one's room) */
    int max_units;       /* passes' rows in memory at once (a pass parsed ahead of those training) */
    int units;           /* passes in memory now */
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pass_data *ready;    /* one part parsed ahead of the one being fetched */
    int hold;            /* a boundary runs: a reader with a part ready waits to list the next (reader_hold) */
    int eof, err, stop;
    char errmsg[1024];
} reader;

/* A pass's rows against the first epoch's pass of that number (every epoch reads the same rows in
 * the same passes; a resume checks what it skips): 0, or -1 with err when the data changed. */
static int check_pass(reader *r, pass_unit *p, char *err, size_t errlen)
{
    p->digest = block_digest(&p->rows, 0);
    if (p->index <= r->n_known ? p->digest == r->known[p->index - 1] : !r->whole) return 0;
    snprintf(err, errlen, "pass %llu of this epoch (%zu rows) %s the first epoch's: the training files changed since the run "
             "began", (unsigned long long)p->index, p->rows.rows, p->index <= r->n_known ? "differs from" : "is beyond");
    return -1;
}

/* A pass's rows left memory: the reader may parse the next, into their arrays (pages already
 * there: fresh ones each pass cost a fault each, and giving them back a TLB flush on every core),
 * unless the reader has ended. */
static void unit_gone(reader *r, sample_block *rows)
{
    pthread_mutex_lock(&r->mu);
    if (!r->eof && !r->has_spare) {
        r->spare = *rows;
        r->has_spare = 1;
    } else {
        block_free(rows);
    }
    r->units--;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Hand part p to the trainer's side once the one before it is taken: 0, or -1 when stopped. */
static int reader_put(reader *r, pass_data *p)
{
    pthread_mutex_lock(&r->mu);
    while (r->ready && !r->stop) pthread_cond_wait(&r->cv, &r->mu);
    int stop = r->stop;
    if (!stop) r->ready = p;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return stop ? -1 : 0;
}

/* Wait while a boundary runs, if a part is ready ahead: listing a part's keys takes a core, and
 * the boundary's eviction is on the trainer's critical path while the next part has until the
 * boundary after. With no part ready the trainer may soon wait for this one: no waiting. */
static void reader_gate(reader *r)
{
    pthread_mutex_lock(&r->mu);
    while (r->hold && r->ready && !r->stop) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

/* The trainer's side: a boundary begins (1) or ends (0). */
static void reader_hold(reader *r, int hold)
{
    pthread_mutex_lock(&r->mu);
    r->hold = hold;
    if (!hold) pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Cut a complete pass into parts, in its training order, and hand them over: 0, -1 when stopped,
 * -2 with err when a resume's position does not fit it. */
static int reader_parts(reader *r, pass_unit *u, char *err, size_t errlen)
{
    const train_opts *o = r->o;
    size_t n = u->rows.rows, lo = 0;
    if (u->index == r->skip + 1 && r->skip_rows) {
        if (r->skip_rows >= n) {
            snprintf(err, errlen, "pass %llu of this epoch holds %zu rows, where the run had trained %llu of it: the "
                     "training files changed", (unsigned long long)u->index, n, (unsigned long long)r->skip_rows);
            return -2;
        }
        lo = (size_t)r->skip_rows;
    }
    /* the room left (a reused pass's arrays are kept within a sixteenth of its rows) */
    if (u->rows.cap_rows > n + n / 16 || u->rows.cap_nnz > u->rows.nnz + u->rows.nnz / 16) block_shrink_to_fit(&u->rows);
    r->last_nnz = u->rows.nnz;
    u->order = passes_order(o, n, r->epoch, o->pass_rows ? u->index : u->index - 1);
    int ret = 0;
    while (lo < n && ret == 0) {
        reader_gate(r);
        pass_data *p = xcalloc(1, sizeof *p);
        p->keys = xcalloc((size_t)r->n_tables, sizeof *p->keys);
        uint64_t bytes;
        p->hi = emb_cache_part(r->cache, &u->rows, u->order, lo, n, (size_t)o->mc.batch, r->part_cap, p->keys, &bytes, r->sets);
        if (bytes > r->part_cap && bytes > r->over) r->over = bytes;
        p->lo = lo;
        /* streamed (no --pass-rows) the epoch is one pass: its clock moves once */
        p->first = lo == 0 && (o->pass_rows || u->index == 1);
        p->last = p->hi == n;
        p->u = u;
        __atomic_add_fetch(&u->refs, 1, __ATOMIC_ACQ_REL);
        lo = p->hi;
        if (reader_put(r, p) < 0) {
            pass_free(p, r->n_tables);
            ret = -1;
        }
    }
    return ret;
}

static void *reader_main(void *arg)
{
    pthread_setname_np(pthread_self(), "ctrbox-read");   /* names for top, perf and /proc */
    reader *r = arg;
    const train_opts *o = r->o;
    /* a pass is --pass-rows rows; streamed, the shuffle buffer's whole blocks, as train_stream takes them */
    uint64_t stream_cap = o->shuffle_rows ? o->shuffle_rows : (uint64_t)o->mc.batch * 16;
    data_source *s;
    char err[1024];
    int ret = source_open(&s, o->train, o->n_train, &o->in, err, sizeof err);
    sample_block b;
    block_init(&b, r->n_dense);
    r->sets = emb_part_sets_new();
    pass_unit *cur = NULL;
    uint64_t index = 0;
    size_t off = 0;   /* rows of b already taken */
    int end = 0;
    while (ret >= 0 && !end) {
        if (off == b.rows) {
            ret = source_next(s, &b, err, sizeof err);
            off = 0;
            if (ret < 0) break;
            end = ret == 0;
        }
        if (!cur) {
            if (end) break;
            /* parse the next pass only once the part before is taken and fewer than max_units
             * passes are in memory: with a table folder two (the one training and the next, whose
             * first part is fetched while the other's last trains), else three (one parsed
             * ahead: the trainer does not wait for it) */
            pthread_mutex_lock(&r->mu);
            while ((r->ready || r->units >= r->max_units) && !r->stop) pthread_cond_wait(&r->cv, &r->mu);
            int stop = r->stop, reuse = r->has_spare;
            if (!stop) r->units++;
            sample_block rows = r->spare;
            r->has_spare = 0;
            pthread_mutex_unlock(&r->mu);
            if (stop) {
                if (reuse) block_free(&rows);
                break;
            }
            cur = xcalloc(1, sizeof *cur);
            cur->r = r;
            cur->refs = 1;
            if (reuse) {
                cur->rows = rows;
                block_clear(&cur->rows);
            } else {
                block_init(&cur->rows, r->n_dense);
            }
            if (o->pass_rows && r->last_nnz)   /* the last pass's keys and a sixteenth more: no doubling */
                block_reserve_exact(&cur->rows, o->pass_rows, r->last_nnz + r->last_nnz / 16);
        }
        size_t take = end ? 0 : b.rows - off;
        if (o->pass_rows && take > o->pass_rows - cur->rows.rows) take = (size_t)(o->pass_rows - cur->rows.rows);
        block_append(&cur->rows, &b, off, off + take);
        off += take;
        if (!end && cur->rows.rows < (o->pass_rows ? o->pass_rows : stream_cap)) continue;
        if (!cur->rows.rows) break;   /* the data ended at a pass boundary */
        cur->index = ++index;
        uint64_t peak = block_bytes(&cur->rows);
        if (peak > __atomic_load_n(&r->parse_peak, __ATOMIC_RELAXED)) __atomic_store_n(&r->parse_peak, peak, __ATOMIC_RELAXED);
        if ((ret = check_pass(r, cur, err, sizeof err)) < 0) break;
        /* committed before a resume: parsed again only to be skipped */
        if (index > r->skip) {
            int pr = reader_parts(r, cur, err, sizeof err);
            if (pr == -2) ret = -1;
            if (pr < 0) break;
        }
        unit_release(cur);
        cur = NULL;
    }
    unit_release(cur);
    block_free(&b);
    emb_part_sets_free(r->sets);
    r->sets = NULL;
    if (s) source_close(s);
    if (ret == 0 && (index < r->skip + (r->skip_rows > 0) || (r->whole && index < r->n_known))) {   /* shorter than what was trained */
        snprintf(err, sizeof err, "the training data now holds %llu passes of %llu rows, where the run had %llu: the "
                 "training files changed", (unsigned long long)index,
                 (unsigned long long)(o->pass_rows ? o->pass_rows : stream_cap),
                 (unsigned long long)(r->skip > r->n_known ? r->skip : r->n_known));
        ret = -1;
    }
    pthread_mutex_lock(&r->mu);
    if (ret < 0) {
        r->err = 1;
        snprintf(r->errmsg, sizeof r->errmsg, "%s", err);
    }
    r->eof = 1;   /* rows freed from now on are not kept */
    if (r->has_spare) block_free(&r->spare);
    r->has_spare = 0;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* The next pass, or NULL at the end of the epoch (r->err says whether it ended in an error). */
static pass_data *reader_pop(reader *r)
{
    pthread_mutex_lock(&r->mu);
    while (!r->ready && !r->eof) pthread_cond_wait(&r->cv, &r->mu);
    pass_data *p = r->ready;
    r->ready = NULL;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    return p;
}

/* ---- the fetch thread ---- */

typedef struct {
    emb_tier *tier;
    struct passes *ps;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    emb_fetch *job;
    int busy, quit, err;
    char errmsg[1024];
} fetcher;

static int writer_wait(struct passes *ps);

static void *fetcher_main(void *arg)
{
    pthread_setname_np(pthread_self(), "ctrbox-fetch");
    /* below the trainer: a preempted BLAS thread stalls its partner too, and the fetch mostly has
     * until the next boundary (a fetch still running there is waited for with the cores free);
     * the end-to-end bench: docs/performance.md, twelfth session */
    thread_lower_priority(5);
    fetcher *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->busy && !f->quit) pthread_cond_wait(&f->cv, &f->mu);
        if (f->quit) break;
        emb_fetch *j = f->job;
        pthread_mutex_unlock(&f->mu);
        char err[1024];
        /* rows written back since the last durable commit are found in the tier's open batch and
         * in the one being committed (emb_tier_finish) */
        int bad = emb_fetch_run(f->tier, j, err, sizeof err) < 0;
        pthread_mutex_lock(&f->mu);
        if (bad && !f->err) {
            f->err = 1;
            snprintf(f->errmsg, sizeof f->errmsg, "%s", err);
        }
        f->busy = 0;
        pthread_cond_broadcast(&f->cv);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* ---- the pass state ---- */

typedef struct {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    emb_tier_batch *b;        /* the commit in flight */
    char *blob;
    size_t len;
    uint32_t pass, last_ok;   /* its pass; the last pass made durable */
    uint64_t seq, seq_ok;     /* its number among this run's commits; the last made durable */
    char *line;               /* the console line of commit line_seq, said once it is durable */
    uint64_t line_seq;
    int busy, quit, err;
    double secs;
    char errmsg[1100];
} writer;

struct passes {
    const train_opts *o;
    model *m;
    run_state *rs;            /* the trainer's */
    FILE *log;
    uint32_t n_fields, n_dense;
    emb_tier *tier;
    emb_cache *cache;         /* the rows in memory (all of them without a tier) */
    int n_tables;
    fetcher fx;
    writer wr;
    int warned_over;          /* a pass's own rows exceeded the budget (said once) */
    int dead_saved;           /* the tier holds the tables' deletion records as they are */
    int repack_due;           /* a pass ended: its repack is made at the next boundary */
    /* statistics of the current pass */
    emb_cache_stats cs;
    uint64_t rows_read, bytes_read, rows_written, bytes_written;
    uint64_t reads, map_hits, map_wrong, index_gets;
    double wait_s, commit_s, boundary_s, read_wait_s, commit_wait_s;
    double cpu_at[4];         /* CPU seconds at the last pass line: the process, the fetch, the writer, the reader */
    emb_tier_stats st0;
    /* where the run stands (the catalog) */
    uint64_t pass_in_epoch;   /* passes of the current epoch committed */
    uint64_t rows_in_pass;    /* and positions of the next one (its parts committed so far) */
    uint64_t resume_rows;     /* the committed rows_in_pass a resume starts the epoch after */
    uint64_t part_cap;        /* bytes of rows a part's keys may take (UINT64_MAX: in memory) */
    emb_tier_batch *wb;       /* the open batch: rows written back since the last commit (NULL: none yet) */
    uint64_t window;          /* the bytes it may hold: a commit comes before it would hold more */
    char *cat;                /* the last catalog made (the commit in flight's) */
    size_t cat_cap;
    uint64_t window_bad;      /* rows it holds with NaN or inf (the commit refuses them) */
    uint64_t repack_rows;     /* rows one commit of a repack moves at most */
    int epoch_done;           /* the current epoch's end (evaluation, shrink) is committed */
    uint64_t settings, data;  /* what a resume must share with the commit (catalog_head) */
    char rules[RULES_BYTES];  /* and the rates and shrink rules it was started with (rules_text) */
    uint64_t origin[2];       /* a warm start's: the table folder id and commit count it began from (0, 0: none) */
    key_vec digests;           /* block_digest of the first epoch's passes, in order (the catalog's) */
    /* the epoch under way */
    reader rd;
    int reading;              /* rd's thread runs */
    pass_data *cur, *nxt;     /* the pass handed out and the one after it */
    emb_fetch *job;           /* the fetch in flight (for nxt, or for cur before it is handed out) */
    emb_fetch *cur_f;         /* cur's fetch, installed: its rows, pinned at cur's boundary */
    pass_item item;
    int failed;               /* a pass failed: the epoch ends */
};

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &res) != 2) res = 0;
        fclose(f);
    }
    return res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* What malloc holds, over all its arenas: in use in the arenas (small allocations), in use in
 * chunks of their own mapping (large ones, whether touched or not), and free in the arenas (kept
 * for reuse). Of the memory the pass lines do not name, live small allocations grow the first,
 * fragmentation the last. */
static void malloc_bytes(uint64_t *arena, uint64_t *mapped, uint64_t *free_bytes)
{
    struct mallinfo2 mi = mallinfo2();
    *arena = (uint64_t)mi.uordblks;
    *mapped = (uint64_t)mi.hblkhd;
    *free_bytes = (uint64_t)mi.fordblks;
}

static uint64_t peak_rss_bytes(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_maxrss * 1024;
}

/* CPU seconds thread th has used so far (0 where its clock cannot be read) */
static double thread_cpu_sec(pthread_t th)
{
    clockid_t c;
    struct timespec ts;
    if (pthread_getcpuclockid(th, &c) != 0 || clock_gettime(c, &ts) != 0) return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The CPU seconds used since the last pass line, by the whole process and by the fetch, writer
 * and reader threads (out[1..3]: 0 for those not running); the marks move on to now. */
static void pass_cpu(passes *ps, double out[4])
{
    double now[4] = { cpu_sec(), 0, 0, 0 };
    if (ps->fx.th) now[1] = thread_cpu_sec(ps->fx.th);   /* started with the tier (passes_close) */
    if (ps->wr.th) now[2] = thread_cpu_sec(ps->wr.th);
    if (ps->reading) now[3] = thread_cpu_sec(ps->rd.th);
    for (int i = 0; i < 4; i++) {
        out[i] = now[i] > ps->cpu_at[i] ? now[i] - ps->cpu_at[i] : 0;
        ps->cpu_at[i] = now[i];
    }
}

static void fetch_start(passes *ps, emb_fetch *j)
{
    pthread_mutex_lock(&ps->fx.mu);
    ps->fx.job = j;
    ps->fx.busy = 1;
    pthread_cond_broadcast(&ps->fx.cv);
    pthread_mutex_unlock(&ps->fx.mu);
}

static int fetch_wait(passes *ps)
{
    double t0 = now_sec();
    pthread_mutex_lock(&ps->fx.mu);
    while (ps->fx.busy) pthread_cond_wait(&ps->fx.cv, &ps->fx.mu);
    int err = ps->fx.err;
    pthread_mutex_unlock(&ps->fx.mu);
    ps->wait_s += now_sec() - t0;
    if (err) fprintf(stderr, "%sctrbox: %s\n", util_tty_break(), ps->fx.errmsg);
    return err ? -1 : 0;
}

int passes_pull(passes *ps, const sample_block *b)
{
    if (!ps || !ps->tier) return 0;
    if (writer_wait(ps) < 0) return -1;
    char err[1024];
    int ret = emb_cache_pull(ps->cache, ps->tier, b, err, sizeof err);
    if (ret < 0) fprintf(stderr, "%sctrbox: %s\n", util_tty_break(), err);
    return ret;
}

/* The rows in memory of m's tables, in front of the tier (budget: bytes of rows). */
static emb_cache *cache_of(model *m, uint32_t n_fields, uint64_t budget, int lfu)
{
    int *ftab = xmalloc((n_fields ? n_fields : 1) * sizeof *ftab);
    for (uint32_t f = 0; f < n_fields; f++) ftab[f] = model_field_table(m, (uint16_t)f);
    emb_cache *c = emb_cache_create(model_tables(m), model_n_tables(m), ftab, n_fields, budget, lfu);
    free(ftab);
    return c;
}

/* The layout line a table folder records for m's tables: "MODEL;t0:dim=D,w=0|1,opt=NAME,state=S;..."
 * (malloc'ed: a line of every table, however many) */
static char *tier_layout(model *m)
{
    size_t len = 64 + 96 * (size_t)model_n_tables(m);   /* a table's part is under 96 bytes */
    char *out = xmalloc(len);
    int w = snprintf(out, len, "%s", model_kind_name(model_config_of(m)->kind));
    for (int i = 0; i < model_n_tables(m); i++) {
        const emb_table_config *c = emb_table_config_of(model_table(m, i));
        w += snprintf(out + w, len - (size_t)w, ";t%d:dim=%d,w=%d,opt=%s,state=%d", i, c->dim, c->has_w,
                      sparse_opt_name(c->opt.kind), emb_table_state_floats(model_table(m, i)));
        CHECK((size_t)w < len);
    }
    return out;
}

int model_open_tier(model *m, const char *dir, int readonly, size_t index_cache, emb_tier **out, char *err, size_t errlen)
{
    char *layout = tier_layout(m);
    int n = model_n_tables(m);
    size_t *rb = xcalloc((size_t)n, sizeof *rb);
    for (int i = 0; i < n; i++) rb[i] = emb_table_row_bytes(model_table(m, i));
    int ret = emb_tier_open(out, dir, n, rb, layout, readonly, index_cache, err, errlen);
    free(rb);
    free(layout);
    static int said;   /* once a process */
    if (ret == 0 && emb_tier_plain_io(*out) && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) {
        fprintf(stderr, "ctrbox: warning: %s: io_uring is refused here (%s): the table folder is read and written with "
                "plain reads and writes, which is slower (a container's seccomp profile, the sysctl "
                "kernel.io_uring_disabled, or a locked-memory limit, `ulimit -l`, under what this user's processes "
                "hold refuses it)\n", dir, strerror(-emb_tier_plain_io(*out)));
    }
    return ret;
}

int model_tier_open(model *m, const char *model_dir, const model_meta *meta, emb_tier **tier, char *err,
                            size_t errlen)
{
    *tier = NULL;
    int ret = modelfile_table_dir_there(model_dir, meta, "give --table-dir DIR, where the folder is now", err, errlen);
    if (ret < 0) return ret;
    ret = model_open_tier(m, meta->table_dir, 1, 64u << 20, tier, err, errlen);
    if (ret == 0 && modelfile_check_tier(model_dir, meta, *tier, err, errlen) < 0) {
        emb_tier_close(*tier);
        *tier = NULL;
        ret = -1;
    }
    return ret;
}

int model_pull_from_tier(model *m, const char *model_dir, const model_meta *meta, const sample_block *b, char *err,
                         size_t errlen)
{
    emb_tier *tier;
    int ret = model_tier_open(m, model_dir, meta, &tier, err, errlen);
    if (ret == 0) {
        emb_cache *c = cache_of(m, meta->schema.n_fields, UINT64_MAX, 1);
        ret = emb_cache_pull(c, tier, b, err, errlen);
        emb_cache_destroy(c);
        emb_tier_close(tier);
    }
    return ret;
}

/* ---- eviction ---- */

/* bytes for a message: MB, or KB below a tenth of one ("0.0 MB over the 0.0 MB" said nothing) */
static void size_text(char *out, size_t n, uint64_t bytes)
{
    if (bytes >= 104858) snprintf(out, n, "%.1f MB", (double)bytes / 1048576.0);
    else snprintf(out, n, "%.0f KB", (double)bytes / 1024.0);
}

/* Drop rows down to the budget, the part's own and the next part's pinned (next may be NULL; each
 * with its fetch, made from those keys, or NULL); say once when they alone exceed it. */
static void evict(passes *ps, key_vec *keys, emb_fetch *keys_f, key_vec *next, emb_fetch *next_f, uint64_t coming)
{
    if (ps->tier && !ps->wb) ps->wb = emb_tier_begin(ps->tier);
    uint64_t bad = ps->cs.nonfinite;
    emb_pins pins[2] = { { keys, keys_f }, { next, next_f } };
    uint64_t over = emb_cache_evict(ps->cache, pins, next ? 2 : 1, coming, ps->rs->pass, ps->wb, &ps->cs);
    ps->window_bad += ps->cs.nonfinite - bad;
    if (over && !ps->warned_over) {   /* said once */
        uint64_t budget, window;
        size_t index;
        emb_cache_split_budget(ps->o->cache_mb, &budget, &index, &window);
        char keep[32], room[32];
        size_text(keep, sizeof keep, budget + over);
        size_text(room, sizeof room, budget);
        fprintf(stderr, "%sctrbox: warning: pass %u keeps %s in memory (the rows of its part's keys and of the "
                "next part's, and their key index), over the %s --cache-mb leaves for them: %s; memory exceeds the "
                "budget by the difference (a smaller --batch or a larger --cache-mb stays within it)\n",
                ps->o->quiet || !isatty(2) ? "" : "\n", ps->rs->pass, keep, room,
                budget ? "one batch's keys take more than half of it" : "the tier's index takes all of it (1 MB at least)");
        ps->warned_over = 1;
    }
}

/* ---- the catalog: where the run stands, committed with each pass ---- */

/* The rates and shrink rules a run is started with, as options ("--lr 0.001 --sparse-lr 0.001
 * ..."): not in the settings' fingerprint, a resume with another --sparse-lr, --l2 or
 * --shrink-threshold went on with those, silently another model than the run's. The dense rate
 * after --lr-decay's drops is in the catalog's head; these are the options given. */
static void rules_text(const train_opts *o, char *out, size_t n)
{
    const model_config *c = &o->mc;
    const char *name[] = { "--lr", "--sparse-lr", "--dense-l2", "--l2", "--emb-l2", "--lr-decay", "--shrink-threshold",
                           "--shrink-unseen", "--nonclk-coeff", "--clk-coeff" };
    double v[] = { c->dopt.lr, c->sopt.lr, c->dopt.l2, c->sopt.l2, c->emb_l2_all, o->lr_decay, o->shrink_threshold,
                   o->shrink_unseen ? (double)o->shrink_unseen : -1, o->nonclk_coeff, o->clk_coeff };   /* < 0: off */
    int is_float[] = { 1, 1, 1, 1, 1, 1, 0, 0, 1, 1 };
    memset(out, 0, n);
    size_t w = 0;
    for (size_t i = 0; i < sizeof v / sizeof *v && w < n; i++) {
        char num[40];
        if (v[i] < 0) {   /* a shrink rule not set */
            snprintf(num, sizeof num, "off");
        } else {
            int p = 6;   /* the fewest digits that read back as the same number: "0.001", not "0.00100000005" */
            do snprintf(num, sizeof num, "%.*g", p, v[i]);
            while ((is_float[i] ? (double)(float)strtod(num, NULL) != v[i] : strtod(num, NULL) != v[i]) && ++p < 17);
        }
        w += (size_t)snprintf(out + w, n - w, "%s%s %s", i ? " " : "", name[i], num);
    }
    CHECK(w < n);
}

/* Whether the rules a commit was made with (was) differ from this run's (now): 1 with the first
 * option that differs as "--lr 0.001" in was_opt and "--lr 0.002" in now_opt (n bytes each), or 0 */
static int rules_differ(const char *was, const char *now, char *was_opt, char *now_opt, size_t n)
{
    if (!strcmp(was, now)) return 0;
    char a[RULES_BYTES], b[RULES_BYTES], *sa, *sb;
    snprintf(a, sizeof a, "%s", was);
    snprintf(b, sizeof b, "%s", now);
    char *na = strtok_r(a, " ", &sa), *nb = strtok_r(b, " ", &sb);
    while (na && nb) {
        char *va = strtok_r(NULL, " ", &sa), *vb = strtok_r(NULL, " ", &sb);
        if (strcmp(na, nb) || !va || !vb || strcmp(va, vb)) {
            snprintf(was_opt, n, "%s %s", na, va ? va : "?");
            snprintf(now_opt, n, "%s %s", nb, vb ? vb : "?");
            return 1;
        }
        na = strtok_r(NULL, " ", &sa);
        nb = strtok_r(NULL, " ", &sb);
    }
    snprintf(was_opt, n, "%s", was);
    snprintf(now_opt, n, "%s", now);
    return 1;
}


typedef struct {
    uint32_t pass, epoch;
    uint64_t pass_in_epoch, rows_done, loss_n;
    int32_t epoch_done, bad_epochs;
    double loss_sum, best_auc, train_seconds;
    float dense_lr, sparse_lr;
    uint64_t settings, data;   /* settings_fingerprint, data_fingerprint */
    uint64_t n_digests;        /* the first epoch's passes whose digests follow the head */
} catalog_head;

static int catalog_write(passes *ps, FILE *f);

/* The catalog into ps->cat (kept from commit to commit: it is megabytes, the dense state with its
 * moments, and growing a fresh buffer each time took a tenth of a commit's time): *blob points
 * into it until the next catalog_make. 0 or -1. */
static int catalog_make(passes *ps, char **blob, size_t *len)
{
    for (;;) {
        if (!ps->cat_cap) ps->cat = xmalloc(ps->cat_cap = 1u << 20);
        FILE *f = fmemopen(ps->cat, ps->cat_cap - 8, "wb");   /* room for the checksum after */
        if (!f) return -1;
        int ok = catalog_write(ps, f) && fflush(f) == 0 && !ferror(f);
        long at = ftell(f);
        fclose(f);
        if (ok && at > 0) {
            *len = (size_t)at;
            break;
        }
        if (ps->cat_cap >= ((size_t)1 << 40)) return -1;
        free(ps->cat);   /* too small: twice the size, again */
        ps->cat = xmalloc(ps->cat_cap *= 2);
    }
    uint64_t sum = XXH64(ps->cat, *len, 0);
    memcpy(ps->cat + *len, &sum, 8);
    *len += 8;
    *blob = ps->cat;
    return 0;
}

/* The catalog's body into f: 1 if every write went through. */
static int catalog_write(passes *ps, FILE *f)
{
    const run_state *rs = ps->rs;
    catalog_head h = { rs->pass, (uint32_t)rs->epoch, ps->pass_in_epoch, rs->rows_done, rs->loss_n, ps->epoch_done,
                       rs->bad_epochs, rs->loss_sum, rs->best_auc, rs->train_seconds, model_config_of(ps->m)->dopt.lr,
                       model_config_of(ps->m)->sopt.lr, ps->settings, ps->data, ps->digests.n };
    uint32_t v = CATALOG_VERSION;
    int ok = fwrite(CATALOG_MAGIC, 1, 8, f) == 8 && fwrite(&v, 4, 1, f) == 1 && fwrite(&h, sizeof h, 1, f) == 1;
    ok = ok && fwrite(ps->origin, sizeof ps->origin, 1, f) == 1;
    ok = ok && fwrite(&ps->rows_in_pass, sizeof ps->rows_in_pass, 1, f) == 1;
    ok = ok && fwrite(ps->rules, sizeof ps->rules, 1, f) == 1;
    ok = ok && fwrite(ps->digests.k, sizeof *ps->digests.k, ps->digests.n, f) == ps->digests.n;
    ok = ok && model_save_dense(ps->m, f) == 0;
    for (int i = 0; ok && i < ps->n_tables; i++) ok = emb_table_save_pending(model_table(ps->m, i), f) == 0;
    return ok;
}

/* The tables' deletion records, as the tier's "d" record (embedding/shrink.h). */
static int deletions_make(passes *ps, char **blob, size_t *len)
{
    return emb_deletions_blob(model_tables(ps->m), ps->n_tables, blob, len);
}

static int deletions_load(passes *ps, char *err, size_t errlen)
{
    void *blob;
    size_t len;
    int ret = emb_tier_deletions(ps->tier, &blob, &len, err, errlen);
    if (ret < 0) return ret;
    if (!blob) {
        snprintf(err, errlen, "catalog: the deletion record it goes with is missing");
        return -1;
    }
    ret = emb_deletions_load(model_tables(ps->m), ps->n_tables, blob, len, 0, err, errlen);
    free(blob);
    return ret;
}

/* Read a commit's catalog into ps and its model. warm: from another run (a warm start): its
 * settings and data may differ, and its pass digests are not this run's. */
static int catalog_load(passes *ps, const char *blob, size_t len, catalog_head *h, int warm, char *err, size_t errlen)
{
    uint64_t sum;
    uint32_t v;
    if (len < 12 + sizeof *h + 8 || memcmp(blob, CATALOG_MAGIC, 8) != 0) {
        snprintf(err, errlen, "catalog: bad magic or truncated");
        return -1;
    }
    memcpy(&sum, blob + len - 8, 8);
    memcpy(&v, blob + 8, 4);
    if (XXH64(blob, len - 8, 0) != sum) {
        snprintf(err, errlen, "catalog: checksum mismatch");
        return -1;
    }
    if (v < 2 || v > CATALOG_VERSION) {
        snprintf(err, errlen, "catalog: version %u, this build reads 2 to %u", v, CATALOG_VERSION);
        return -1;
    }
    memcpy(h, blob + 12, sizeof *h);
    if (!warm && h->settings != ps->settings) {
        snprintf(err, errlen, "the committed run used other settings (model, sizes, optimizers, seed, batch, passes, "
                 "shuffle, admission or input format differ)%s", model_config_of(ps->m)->min_show > 1 &&
                 model_config_of(ps->m)->admit_mb > 0 ? "; a run of an earlier build with --min-show counted "
                 "admission exactly: resume it with --admit-mb 0" : "");
        return -1;
    }
    if (!warm && h->data != ps->data) {
        snprintf(err, errlen, "the training files' contents differ from those of the committed run (they are compared "
                 "by size and sampled bytes, not by name)");
        return -1;
    }
    size_t body = len - 8 - 12 - sizeof *h;
    size_t at = 12 + sizeof *h;   /* version 3: the origin, then the digests */
    if (v >= 3) {
        if (body < sizeof ps->origin) {
            snprintf(err, errlen, "catalog: truncated");
            return -1;
        }
        if (!warm) memcpy(ps->origin, blob + at, sizeof ps->origin);
        at += sizeof ps->origin;
        body -= sizeof ps->origin;
    }
    uint64_t rows_in = 0;   /* version 4: the positions of the next pass done */
    if (v >= 4) {
        if (body < sizeof rows_in) {
            snprintf(err, errlen, "catalog: truncated");
            return -1;
        }
        memcpy(&rows_in, blob + at, sizeof rows_in);
        at += sizeof rows_in;
        body -= sizeof rows_in;
    }
    if (!warm) ps->rows_in_pass = rows_in;
    if (v >= 6) {   /* version 6: the rates and shrink rules the run was started with */
        char was[RULES_BYTES];
        if (body < sizeof was) {
            snprintf(err, errlen, "catalog: truncated");
            return -1;
        }
        memcpy(was, blob + at, sizeof was);
        at += sizeof was;
        body -= sizeof was;
        was[sizeof was - 1] = 0;
        char d[RULES_BYTES], now[RULES_BYTES];
        if (!warm && rules_differ(was, ps->rules, d, now, sizeof d)) {
            /* --follow: the daily job started again with a new rate goes on with it (a chain of warm
             * starts, whose rates may change); said, as the entry begun with the old one */
            if (ps->o->follow) {
                fprintf(stderr, "ctrbox: warning: --follow: the entry in progress was begun with %s; it goes on with "
                        "%s\n", d, now);
            } else {
                snprintf(err, errlen, "the committed run trains with %s, this command gives %s: give the committed "
                         "run's value to continue it (or start a new run from its model with --init)", d, now);
                return -1;
            }
        }
    }
    if (h->n_digests > body / 8) {
        snprintf(err, errlen, "catalog: truncated (%llu pass digests)", (unsigned long long)h->n_digests);
        return -1;
    }
    for (uint64_t i = 0; !warm && i < h->n_digests; i++) {
        uint64_t d;
        memcpy(&d, blob + at + i * 8, 8);
        key_vec_push(&ps->digests, d);
    }
    FILE *f = fmemopen((void *)(blob + at + h->n_digests * 8), body - h->n_digests * 8, "rb");
    int ret = model_load_dense(ps->m, f, err, errlen);
    for (int i = 0; ret == 0 && i < ps->n_tables; i++) {
        ret = emb_table_load_pending(model_table(ps->m, i), f, err, errlen);
        if (ret == 0 && v < 5 && emb_table_deletions_from(model_table(ps->m, i)) == UINT32_MAX)   /* an older build's commit */
            emb_table_set_deletions_from(model_table(ps->m, i), h->pass);
    }
    fclose(f);
    if (ret == 0 && v >= 5) ret = deletions_load(ps, err, errlen);
    return ret < 0 ? -1 : 0;
}

int model_export_bundle(const char *model_dir, const char *table_dir, const char *out, int dtype, int64_t since,
                        uint64_t since_state, uint64_t *rows, int *tables, char *err, size_t errlen)
{
    model *m;
    model_meta meta;
    uint64_t state;
    int ret = modelfile_state(model_dir, &state, err, errlen);
    if (ret < 0) return ret;
    ret = modelfile_load(model_dir, &m, &meta, err, errlen);
    if (ret < 0) return ret;
    meta.state = state;
    meta.since_state = since_state;
    if (table_dir && meta.table_dir) modelfile_find_table_dir(model_dir, &meta, table_dir, 1);
    emb_tier *tier = NULL;
    if (meta.table_dir && (ret = model_tier_open(m, model_dir, &meta, &tier, err, errlen)) == 0 && since >= 0) {
        /* the pending keys and the deletion record are in the commit's catalog */
        void *blob;
        size_t len;
        ret = emb_tier_catalog(tier, &blob, &len, err, errlen);
        if (ret == 0 && blob) {
            passes ps = { .m = m, .n_tables = model_n_tables(m), .tier = tier };
            catalog_head h;
            ret = catalog_load(&ps, blob, len, &h, 1, err, errlen);
            key_vec_free(&ps.digests);
        }
        free(blob);
    }
    if (ret == 0) ret = modelfile_bundle_save(out, m, &meta, tier, dtype, since, err, errlen);
    *rows = 0;
    *tables = model_n_tables(m);
    for (int t = 0; ret == 0 && t < *tables; t++) *rows += tier ? emb_tier_rows(tier, t) : emb_table_rows(model_table(m, t));
    emb_tier_close(tier);
    model_meta_free(&meta);
    model_destroy(m);
    return ret;
}

/* ---- shrink: delete keys by the CTR accessor's rules (all tiers; embedding/shrink.h) ---- */

static int shrink(passes *ps, emb_tier_batch *batch, uint64_t *deleted)
{
    const train_opts *o = ps->o;
    *deleted = 0;
    if (o->shrink_threshold < 0 && !o->shrink_unseen) return 0;
    const model_config *c = model_config_of(ps->m);
    emb_shrink_opts so = { { o->shrink_threshold, o->shrink_unseen, o->nonclk_coeff, o->clk_coeff }, c->decay, ps->rs->pass,
                           c->min_show > 1 ? ps->n_fields : 0, 0 };
    for (int tb = 0; tb < ps->n_tables; tb++) {
        emb_shrink_result r = { 0 };
        char err[1024];
        if (emb_shrink_table(model_table(ps->m, tb), ps->tier, tb, &batch, &so, &r, err, sizeof err) < 0) {
            fprintf(stderr, "%sctrbox: %s\n", util_tty_break(), err);
            return -1;
        }
        *deleted += r.deleted;
    }
    return 0;
}

/* ---- commits: assembled by the main thread, made durable by the writer thread ---- */

static void *writer_main(void *arg)
{
    pthread_setname_np(pthread_self(), "ctrbox-write");
    thread_lower_priority(19);   /* a commit has until the next one: the cores the trainer leaves will do */
    passes *ps = arg;
    writer *w = &ps->wr;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->busy && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (w->quit) break;
        pthread_mutex_unlock(&w->mu);
        char err[1024];
        double t0 = now_sec();
        int ret = emb_tier_commit(w->b, w->blob, w->len, err, sizeof err);   /* the blob is ps->cat's */
        pthread_mutex_lock(&w->mu);
        w->secs = now_sec() - t0;
        if (ret < 0 && !w->err) {
            w->err = 1;
            snprintf(w->errmsg, sizeof w->errmsg, "%s (the table folder keeps pass %u and earlier)", err, w->last_ok);
        }
        if (ret == 0) {
            w->last_ok = w->pass;
            w->seq_ok = w->seq;
        }
        if (w->line && w->line_seq <= w->seq_ok) {   /* the pass is durable: now it can be said */
            fputs(w->line, stderr);
            free(w->line);
            w->line = NULL;
        }
        w->b = NULL;
        w->busy = 0;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Wait until the commit in flight is durable: 0, or -1 (reported once) if it failed. */
static int writer_wait(passes *ps)
{
    writer *w = &ps->wr;
    if (!ps->tier) return 0;
    pthread_mutex_lock(&w->mu);
    while (w->busy) pthread_cond_wait(&w->cv, &w->mu);
    int err = w->err;
    if (err == 1) {
        fprintf(stderr, "%sctrbox: %s\n", util_tty_break(), w->errmsg);
        w->err = 2;   /* reported once */
    }
    pthread_mutex_unlock(&w->mu);
    return err ? -1 : 0;
}

/* Hand batch b, with the catalog, to the writer thread: it is finished here (its writes done, no
 * more puts), so that the trainer may begin the next batch while the writer commits. 0, or -1 (said;
 * b aborted) when its writes failed. */
static int hand_over(passes *ps, emb_tier_batch *b, uint32_t pass)
{
    char err[1024];
    if (emb_tier_finish(b, err, sizeof err) < 0) {
        fprintf(stderr, "%sctrbox: %s (the table folder keeps pass %u and earlier)\n", util_tty_break(), err, ps->wr.last_ok);
        emb_tier_abort(b);
        return -1;
    }
    char *blob;
    size_t len;
    if (catalog_make(ps, &blob, &len) < 0) die("cannot serialise the catalog");
    writer *w = &ps->wr;
    pthread_mutex_lock(&w->mu);
    w->b = b;
    w->blob = blob;
    w->len = len;
    w->pass = pass;
    w->seq++;
    w->busy = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

/* Commit the open batch (rows written back since the last commit) with, when rows, every row in
 * memory not clean, and the catalog; with shrunk, the epoch's shrink and repack; or (pass_end,
 * rows 0) a pass's repack, when it moves rows: at a boundary, with no fetch in flight (a fetch reads
 * slots by the index of the commit before, and the repack's commit frees the pages it empties)
 * and the batch empty. sync: wait until it is durable. 0 or -1. */
static int commit(passes *ps, int rows, uint64_t *shrunk, int pass_end, int sync)
{
    uint32_t pass = ps->rs->pass;
    if (shrunk) *shrunk = 0;
    if (!ps->tier) return shrunk ? shrink(ps, NULL, shrunk) : 0;
    double w0 = now_sec();
    if (writer_wait(ps) < 0) return -1;   /* one commit in flight at a time */
    ps->commit_wait_s += now_sec() - w0;
    double t0 = now_sec();
    /* nothing diverged is committed */
    size_t bad = 0;
    if (rows) emb_cache_dirty(ps->cache, &bad);
    bad += ps->window_bad + !model_dense_finite(ps->m);
    if (bad) {
        fprintf(stderr, "%sctrbox: training diverged in pass %u: the model holds NaN or inf values; pass %u is not "
                "committed (the table folder keeps pass %u); " DIVERGED_HINT "\n",
                isatty(2) && !ps->o->quiet ? "\n" : "", pass, pass, ps->wr.last_ok);
        return -1;
    }
    emb_tier_batch *b = ps->wb ? ps->wb : emb_tier_begin(ps->tier);
    ps->wb = NULL;
    if (rows) ps->rows_written += emb_cache_put_dirty(ps->cache, b, &ps->bytes_written);
    if (shrunk && shrink(ps, b, shrunk) < 0) {
        emb_tier_abort(b);   /* the tier keeps its last commit */
        return -1;
    }
    /* the deletion records change with shrink alone: they go with the epoch's commit (and the
     * run's first), not with every commit */
    int dead = shrunk || !ps->dead_saved;
    if (dead) {
        char *blob;
        size_t len;
        if (deletions_make(ps, &blob, &len) < 0) die("cannot serialise the deletion record");
        emb_tier_set_deletions(b, blob, len);
    }
    /* the epoch's or a pass's end: slot files with much free space inside their pages are packed
     * again, in commits of at most repack_rows moved rows (the first is this one) */
    uint64_t moved = 0;
    int epoch = shrunk != NULL;
    for (int more = epoch || pass_end; ; ) {
        uint64_t n = 0;
        char err[1024];
        if (more && emb_tier_repack(b, epoch ? REPACK_EPOCH_WASTE : REPACK_PASS_WASTE,
                                    epoch ? REPACK_EPOCH_TARGET : REPACK_PASS_TARGET, epoch, ps->repack_rows,
                                    emb_cache_moved, ps->cache, &n, &more, err, sizeof err) < 0) {
            fprintf(stderr, "%sctrbox: %s\n", util_tty_break(), err);
            emb_tier_abort(b);
            return -1;
        }
        moved += n;
        if (!rows && !epoch && !n && !more && !dead) {   /* a pass's repack that found nothing to move */
            emb_tier_abort(b);
            break;
        }
        if (hand_over(ps, b, pass) < 0) return -1;
        ps->window_bad = 0;
        ps->dead_saved |= dead;   /* a failed commit refuses all later ones */
        if (!more) break;
        if (writer_wait(ps) < 0) return -1;
        b = emb_tier_begin(ps->tier);
    }
    ps->commit_s += now_sec() - t0;
    if (moved && ps->log) {
        fprintf(ps->log, "{\"kind\": \"repack\", \"pass\": %u, \"rows_moved\": %llu, \"disk_bytes\": %llu}\n", pass,
                (unsigned long long)moved, (unsigned long long)emb_tier_disk_bytes(ps->tier));
        fflush(ps->log);
    }
    return sync ? writer_wait(ps) : 0;
}

/* ---- per-pass statistics ---- */

/* seconds the writer spent on the last finished commit */
static double writer_secs(passes *ps)
{
    if (!ps->tier) return 0;
    pthread_mutex_lock(&ps->wr.mu);
    double s = ps->wr.secs;
    pthread_mutex_unlock(&ps->wr.mu);
    return s;
}

static void pass_report(passes *ps, pass_data *p, double t_train)
{
    const run_state *rs = ps->rs;
    uint64_t rr = ps->rows_read, br = ps->bytes_read;
    const emb_cache_stats *cs = &ps->cs;
    /* the rows written back at its boundary, and its commit's (if it ended with one) */
    uint64_t rw = ps->rows_written + cs->written, bw = ps->bytes_written + cs->written_bytes;
    double k = cs->keys ? (double)cs->keys : 1;
    uint64_t resident = emb_cache_rows(ps->cache);
    emb_tier_mem tm = { 0 };
    if (ps->tier) tm = emb_tier_memory(ps->tier);
    /* the passes' samples in memory (--pass-rows bounds them, not --cache-mb): the passes held,
     * each at most the largest so far */
    pthread_mutex_lock(&ps->rd.mu);
    uint64_t samples = (uint64_t)ps->rd.units * __atomic_load_n(&ps->rd.parse_peak, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&ps->rd.mu);
    double cpu[4];
    pass_cpu(ps, cpu);
    if (ps->log) {
        uint64_t m_arena, m_mapped, m_free;
        malloc_bytes(&m_arena, &m_mapped, &m_free);
        fprintf(ps->log,
                "{\"kind\": \"pass\", \"pass\": %u, \"epoch\": %d, \"pass_in_epoch\": %llu, \"from\": %zu, \"rows\": %zu, \"keys\": %llu, "
                "\"hit_memory\": %.6f, \"hit_ssd\": %.6f, \"new_keys\": %.6f, \"rows_read\": %llu, \"bytes_read\": %llu, "
                "\"reads\": %llu, \"slot_map_hits\": %llu, \"slot_map_wrong\": %llu, \"index_gets\": %llu, \"rows_written\": %llu, \"bytes_written\": %llu, "
                "\"evicted\": %llu, \"resident_rows\": %llu, \"resident_bytes\": %llu, \"index_bytes\": %llu, \"samples_bytes\": %llu, "
                "\"wait_s\": %.3f, \"read_wait_s\": %.3f, \"boundary_s\": %.3f, \"train_s\": %.3f, \"commit_s\": %.3f, "
                "\"commit_wait_s\": %.3f, \"writer_s\": %.3f, "
                "\"cpu_s\": %.3f, \"fetch_cpu_s\": %.3f, \"writer_cpu_s\": %.3f, \"reader_cpu_s\": %.3f, "
                "\"slot_map_bytes\": %llu, \"filter_bytes\": %llu, \"block_cache_bytes\": %llu, \"table_readers_bytes\": %llu, "
                "\"memtable_bytes\": %llu, \"batch_bytes\": %llu, \"slot_bits_bytes\": %llu, \"cache_scratch_bytes\": %llu, \"fetch_spare_bytes\": %llu, "
                "\"malloc_arena_bytes\": %llu, \"malloc_mapped_bytes\": %llu, \"malloc_free_bytes\": %llu, \"rss_bytes\": %llu, \"peak_rss_bytes\": %llu}\n",
                rs->pass, rs->epoch, (unsigned long long)p->u->index, p->lo, p->hi - p->lo, (unsigned long long)cs->keys,
                (double)cs->mem_hits / k, (double)cs->ssd_hits / k, (double)cs->new_keys / k, (unsigned long long)rr,
                (unsigned long long)br, (unsigned long long)ps->reads, (unsigned long long)ps->map_hits,
                (unsigned long long)ps->map_wrong, (unsigned long long)ps->index_gets, (unsigned long long)rw,
                (unsigned long long)bw, (unsigned long long)cs->evicted,
                (unsigned long long)resident, (unsigned long long)emb_cache_bytes(ps->cache),
                (unsigned long long)emb_cache_index_bytes(ps->cache), (unsigned long long)samples, ps->wait_s, ps->read_wait_s, ps->boundary_s, t_train, ps->commit_s, ps->commit_wait_s, writer_secs(ps),
                cpu[0], cpu[1], cpu[2], cpu[3],
                (unsigned long long)tm.slot_map, (unsigned long long)tm.filter, (unsigned long long)tm.block_cache,
                (unsigned long long)tm.table_readers, (unsigned long long)tm.memtables,
                (unsigned long long)emb_tier_batch_bytes(ps->wb), (unsigned long long)tm.slot_bits,
                (unsigned long long)emb_cache_scratch_bytes(ps->cache), (unsigned long long)tm.fetch_spare,
                (unsigned long long)m_arena, (unsigned long long)m_mapped, (unsigned long long)m_free,
                (unsigned long long)rss_bytes(),
                (unsigned long long)peak_rss_bytes());
        fflush(ps->log);
    }
    if (!ps->o->quiet && ps->tier) {
        /* "pass N:" is said once pass N is durable (a kill after it resumes after N): by the writer
         * when it finishes the commit, or here if it already has */
        char *line, part[64] = "";
        if (!p->first || !p->last)
            snprintf(part, sizeof part, " (rows %zu-%zu of %zu)", p->lo + 1, p->hi, p->u->rows.rows);
        if (asprintf(&line, "%spass %u%s: %zu rows, %llu keys: memory %.1f%% ssd %.1f%% new %.1f%%; read %.1f MB, wrote "
                     "%.1f MB; waited %.2f s, commit %.2f s; rss %.0f MB\n", isatty(2) ? "\n" : "", rs->pass, part, p->hi - p->lo,
                     (unsigned long long)cs->keys, 100.0 * (double)cs->mem_hits / k, 100.0 * (double)cs->ssd_hits / k,
                     100.0 * (double)cs->new_keys / k, (double)br / 1e6, (double)bw / 1e6, ps->wait_s, ps->commit_s,
                     (double)rss_bytes() / 1048576.0) < 0)
            die("out of memory");
        writer *w = &ps->wr;
        pthread_mutex_lock(&w->mu);
        free(w->line);   /* a line still waiting belongs to a commit that failed */
        w->line = NULL;
        if (w->seq_ok >= w->seq) {
            fputs(line, stderr);
            free(line);
        } else {
            w->line = line;
            w->line_seq = w->seq;
        }
        pthread_mutex_unlock(&w->mu);
    }
    memset(&ps->cs, 0, sizeof ps->cs);
    ps->rows_read = ps->bytes_read = 0;
    ps->reads = ps->map_hits = ps->map_wrong = ps->index_gets = 0;
    ps->rows_written = ps->bytes_written = 0;
    ps->wait_s = ps->commit_s = ps->boundary_s = ps->read_wait_s = ps->commit_wait_s = 0;
}

/* The settings a resumed run must share with the committed one (model, passes, seed, input). */
static uint64_t settings_fingerprint(const train_opts *o)
{
    const model_config *c = &o->mc;
    char buf[8192];
    int n = snprintf(buf, sizeof buf, "%d %d %d %d %d %d %d %g %llu %d %d %d %g %d %g %u %d %s %llu %zu %d %d %s|",
                     (int)c->kind, c->dim, c->n_hidden, c->n_bottom, c->cross_layers, c->dlrm_cat, c->batchnorm,
                     (double)c->dropout, (unsigned long long)c->seed, c->batch, (int)c->dopt.kind, (int)c->sopt.kind,
                     (double)c->init_std, c->table_per_field, (double)c->decay, c->min_show, c->pool_mean,
                     c->field_dims, (unsigned long long)o->pass_rows, o->shuffle_rows, (int)o->in.fmt, (int)o->in.num,
                     o->in.schema_spec ? o->in.schema_spec : "");
    for (int i = 0; i < c->n_hidden && n < (int)sizeof buf - 16; i++) n += snprintf(buf + n, sizeof buf - (size_t)n, "%d,", c->hidden[i]);
    for (int i = 0; i < c->n_bottom && n < (int)sizeof buf - 16; i++) n += snprintf(buf + n, sizeof buf - (size_t)n, "b%d,", c->bottom[i]);
    for (int i = 0; i < o->in.n_offsets && n < (int)sizeof buf - 32; i++)
        n += snprintf(buf + n, sizeof buf - (size_t)n, "o%llu,", (unsigned long long)o->in.field_offsets[i]);
    if (c->min_show > 1 && c->admit_mb > 0 && n < (int)sizeof buf - 32)   /* exact counts: as earlier builds */
        n += snprintf(buf + n, sizeof buf - (size_t)n, "a%g", (double)c->admit_mb);
    return XXH64(buf, (size_t)(n < (int)sizeof buf ? n : (int)sizeof buf - 1), 0);
}

/* The training data, by content (io_files_digest), not by name: a file cut or rewritten since the
 * commit is noticed, the same file under another path is not refused. */
static int data_fingerprint(const train_opts *o, uint64_t *out, char *err, size_t errlen)
{
    return io_files_digest(o->train, o->n_train, out, err, errlen);
}

/* ---- the run: open, the epochs' passes, close ---- */

int passes_tiered(const passes *ps) { return ps && ps->tier != NULL; }
int passes_resumes_mid_pass(const passes *ps) { return ps->resume_rows != 0; }

/* A thread of the run could not start (e: pthread_create's error): said, -1. Threads count against
 * the processes a user may run (ulimit -u), and each takes its stack (ulimit -s) of the address
 * space (ulimit -v); a reader never started was waited for forever. */
static int thread_failed(const char *what, int e)
{
    fprintf(stderr, "%sctrbox: cannot start %s: %s (threads count against the processes a user may run, ulimit -u, "
            "and each takes a stack, ulimit -s, of the address space, ulimit -v): raise those limits\n", util_tty_break(), what,
            strerror(e));
    return -1;
}

int passes_open(passes **out, const train_opts *o, model *m, const data_schema *schema, const char *table_dir,
                const model_meta *init, FILE *log, run_state *rs, int *start_epoch, uint64_t *skip)
{
    /* buffers of a pass's size are mapped and unmapped, not kept in malloc's arenas after use */
    if (o->pass_rows || table_dir) {
        mallopt(M_MMAP_THRESHOLD, 1 << 20);
        mallopt(M_ARENA_MAX, 2);   /* fewer per-thread arenas holding freed memory */
    }
    passes *ps = xcalloc(1, sizeof *ps);
    *out = ps;
    ps->cpu_at[0] = cpu_sec();
    ps->o = o;
    ps->m = m;
    ps->rs = rs;
    ps->log = log;
    ps->n_fields = schema->n_fields;
    ps->n_dense = schema->n_dense;
    ps->n_tables = model_n_tables(m);
    /* --cache-mb covers the rows kept in memory, the index's memory and the open batch */
    uint64_t budget, window;
    size_t index_cache;
    emb_cache_split_budget(o->cache_mb, &budget, &index_cache, &window);
    uint64_t sketch = 0;   /* the admission sketch counts inside the budget too */
    for (int i = 0; i < ps->n_tables; i++) sketch += emb_table_sketch_bytes(model_table(m, i));
    if (table_dir && sketch > budget && !o->quiet)
        fprintf(stderr, "ctrbox: warning: --cache-mb %g leaves %.1f MB beside the tier's index, less than the admission "
                "sketch's %.1f MB: memory exceeds the budget (give a larger --cache-mb or a smaller --admit-mb)\n",
                o->cache_mb, (double)budget / 1048576.0, (double)sketch / 1048576.0);
    budget = budget > sketch ? budget - sketch : 0;
    ps->window = window;
    ps->cache = cache_of(m, schema->n_fields, table_dir ? budget : UINT64_MAX, o->cache_lfu);
    /* a part's keys take at most half the rows' budget: the next part's stay pinned beside them */
    ps->part_cap = table_dir ? budget / 2 : UINT64_MAX;
    /* a moved row holds about 50 bytes of the commit (its index entry, its old slot) until it is
     * durable: a repack's commit takes an eighth of the budget at most, or 64K rows */
    ps->repack_rows = budget / 8 / 50 > 65536 ? budget / 8 / 50 : 65536;
    const char *rr = getenv("CTRBOX_REPACK_ROWS");   /* tests: repacks of many commits on small tables */
    if (rr && atoll(rr) > 0) ps->repack_rows = (uint64_t)atoll(rr);
    ps->settings = settings_fingerprint(o);
    rules_text(o, ps->rules, sizeof ps->rules);
    *start_epoch = 1;
    *skip = 0;
    if (!table_dir) return 0;
    int warm = init != NULL, bare = warm && init->table_id == 0;   /* bare: a table folder, no model */
    char err[1024];
    if (data_fingerprint(o, &ps->data, err, sizeof err) < 0 ||
        model_open_tier(m, table_dir, 0, index_cache, &ps->tier, err, sizeof err) < 0) {
        fprintf(stderr, "ctrbox: %s\n", err);
        return -1;
    }
    void *blob;
    size_t len;
    if (emb_tier_catalog(ps->tier, &blob, &len, err, sizeof err) < 0) {
        fprintf(stderr, "ctrbox: %s\n", err);
        return -1;
    }
    if (blob && !o->resume && !warm) {
        fprintf(stderr, "ctrbox: %s: holds a committed run; add --resume to continue it, or give an empty folder\n",
                table_dir);
        free(blob);
        return -1;
    }
    if (!blob && warm && !bare) {
        fprintf(stderr, "ctrbox: --init %s: its table folder %s has no committed pass\n", o->init, table_dir);
        return -1;
    }
    uint64_t origin[2] = { 0, 0 };   /* where a warm start begins: the model's commit, or a bare folder's id */
    if (warm) {
        origin[0] = bare ? emb_tier_id(ps->tier) : init->table_id;
        origin[1] = bare ? 0 : init->table_commits;
    }
    if (!blob && bare) {
        memcpy(ps->origin, origin, sizeof origin);
        if (!o->quiet) fprintf(stderr, "warm start from the rows of %s (the dense layers afresh)\n", table_dir);
    }
    if (!blob && o->resume && !o->quiet)
        fprintf(stderr, "--resume: %s has no committed pass yet; starting from the beginning\n", table_dir);
    if (blob) {
        catalog_head h;
        uint32_t v = 0;
        if (warm && len >= 12 + sizeof h + sizeof ps->origin) {   /* this warm start's own commit (it was killed): resume it */
            uint64_t was[2];
            memcpy(&v, (const char *)blob + 8, 4);
            memcpy(&h, (const char *)blob + 12, sizeof h);
            memcpy(was, (const char *)blob + 12 + sizeof h, sizeof was);
            if (v >= 3 && h.settings == ps->settings && h.data == ps->data && was[0] == origin[0] && was[1] == origin[1])
                warm = 0;
        }
        if (catalog_load(ps, blob, len, &h, warm, err, sizeof err) < 0) {
            fprintf(stderr, "ctrbox: %s %s: %s\n", init ? "--init" : "--resume", init ? o->init : table_dir, err);
            free(blob);
            return -1;
        }
        free(blob);
        if (warm && !bare && modelfile_check_tier(o->init, init, ps->tier, err, sizeof err) < 0) {   /* the model's commit, no other */
            fprintf(stderr, "ctrbox: --init: %s\n", err);
            return -1;
        }
        if (warm) {   /* a new run from that commit: its clock and model, nothing else */
            memcpy(ps->origin, origin, sizeof origin);
            rs->pass = h.pass;
            *start_epoch = 1;
            *skip = 0;
            if (!o->quiet)
                fprintf(stderr, "warm start from %s: pass %u of %s, step %llu\n", o->init, h.pass, table_dir,
                        (unsigned long long)model_step(m));
            goto threads;
        }
        rs->pass = h.pass;
        rs->epoch = (int)h.epoch;
        rs->rows_done = h.rows_done;
        rs->loss_n = h.loss_n;
        rs->loss_sum = h.loss_sum;
        rs->best_auc = h.best_auc;
        rs->bad_epochs = h.bad_epochs;
        rs->train_seconds = h.train_seconds;
        float dl = model_config_of(m)->dopt.lr;
        if (dl > 0 && h.dense_lr != dl) model_scale_lr(m, h.dense_lr / dl);
        *start_epoch = h.epoch_done ? (int)h.epoch + 1 : (int)h.epoch;
        *skip = h.epoch_done ? 0 : h.pass_in_epoch;
        ps->resume_rows = h.epoch_done ? 0 : ps->rows_in_pass;
        char part[96] = "";
        if (ps->resume_rows)
            snprintf(part, sizeof part, " and %llu rows of the next", (unsigned long long)ps->resume_rows);
        if (!o->quiet)
            fprintf(stderr, "resuming after pass %u (epoch %u, %llu passes of it done%s)\n", h.pass, h.epoch,
                    (unsigned long long)h.pass_in_epoch, part);
        if (h.epoch_done && (h.bad_epochs >= o->patience)) *start_epoch = o->epochs + 1;
    }
threads:
    ps->fx.tier = ps->tier;
    ps->fx.ps = ps;
    pthread_mutex_init(&ps->fx.mu, NULL);
    pthread_cond_init(&ps->fx.cv, NULL);
    int e = pthread_create(&ps->fx.th, NULL, fetcher_main, &ps->fx);
    if (e) {
        ps->fx.th = 0;   /* passes_close joins only the threads started */
        return thread_failed("the fetch thread", e);
    }
    pthread_mutex_init(&ps->wr.mu, NULL);
    pthread_cond_init(&ps->wr.cv, NULL);
    ps->wr.last_ok = rs->pass;
    if ((e = pthread_create(&ps->wr.th, NULL, writer_main, ps)) != 0) {
        ps->wr.th = 0;
        return thread_failed("the commit writer thread", e);
    }
    return 0;
}

void passes_begin_epoch(passes *ps, uint64_t skip)
{
    ps->failed = 0;
    ps->repack_due = 0;   /* the epoch's end repacked */
    ps->cur = ps->nxt = NULL;
    ps->job = NULL;
    ps->item.index = 0;
    if (!ps->o->pass_rows && !ps->tier) return;   /* one pass, streamed by the trainer */
    reader *r = &ps->rd;
    memset(r, 0, sizeof *r);
    r->o = ps->o;
    r->n_dense = ps->n_dense;
    r->cache = ps->cache;
    r->n_tables = ps->n_tables;
    r->epoch = ps->rs->epoch;
    r->part_cap = ps->part_cap;
    r->max_units = ps->tier ? 2 : 3;
    r->skip = skip;
    r->skip_rows = ps->resume_rows;
    ps->resume_rows = 0;
    r->n_known = ps->digests.n;
    r->whole = ps->rs->epoch > 1;
    r->known = xmalloc((r->n_known ? r->n_known : 1) * sizeof *r->known);
    if (r->n_known) memcpy((uint64_t *)r->known, ps->digests.k, r->n_known * sizeof *r->known);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    int e = pthread_create(&r->th, NULL, reader_main, r);
    if (e) {   /* passes_next ends the epoch at once, and passes_end_epoch says it failed */
        thread_failed("the thread that reads the training rows", e);
        free((uint64_t *)r->known);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        ps->failed = 1;
        return;
    }
    ps->cpu_at[3] = 0;   /* a new reader: its clock starts at 0 */
    ps->reading = 1;
    ps->nxt = reader_pop(r);
    if (ps->nxt && ps->tier) {
        ps->job = emb_cache_missing(ps->cache, ps->nxt->keys);
        fetch_start(ps, ps->job);
    }
}

const pass_item *passes_next(passes *ps)
{
    if (ps->failed) return NULL;
    if (!ps->reading) {   /* streamed: one pass per epoch */
        if (ps->item.index) return NULL;
        ps->rs->pass++;
        ps->item = (pass_item){ NULL, NULL, 0, 0, 1, NULL, NULL };
        return &ps->item;
    }
    pass_data *cur = ps->cur = ps->nxt;
    ps->nxt = NULL;
    if (!cur) return NULL;
    if (cur->first) malloc_trim(0);   /* the last pass's buffers freed in every thread's arena go back */
    for (int tb = 0; tb < ps->n_tables; tb++) ps->cs.keys += cur->keys[tb].n;
    uint64_t coming = 0;
    if (ps->tier) {
        /* this part's rows, fetched while the last part trained: rows dropped since the last
         * durable commit were written back first, and the fetch found them in the open batch or
         * in the one being committed */
        int fw = fetch_wait(ps);
        if (fw < 0) {
            ps->failed = 1;
            return NULL;
        }
        emb_cache_count(cur->keys, ps->job, &ps->cs);
        emb_tier_stats st = emb_tier_get_stats(ps->tier);   /* the reads this part waited for */
        ps->rows_read = st.rows_read - ps->st0.rows_read;
        ps->bytes_read = st.bytes_read - ps->st0.bytes_read;
        ps->reads = st.reads - ps->st0.reads;
        ps->map_hits = st.map_hits - ps->st0.map_hits;
        ps->map_wrong = st.map_wrong - ps->st0.map_wrong;
        ps->index_gets = st.index_gets - ps->st0.index_gets;
        ps->st0 = st;
        double b0 = now_sec();
        coming = emb_cache_install(ps->cache, ps->job);   /* and the rows its new keys will add */
        ps->cur_f = ps->job;
        ps->job = NULL;
        ps->boundary_s += now_sec() - b0;
    }
    double w0 = now_sec();
    if (ps->tier) reader_hold(&ps->rd, 1);   /* until the eviction is done */
    ps->nxt = reader_pop(&ps->rd);
    ps->read_wait_s += now_sec() - w0;
    /* the last pass's repack, now that no fetch is in flight, when the slot files' free space may
     * call for one (it waits for that pass's commit); before the pass clock moves, so that its
     * commit's catalog is that pass's (a resume from it starts the next pass) */
    if (ps->repack_due && ps->tier && emb_tier_free_share(ps->tier) <= REPACK_PASS_WASTE) ps->repack_due = 0;
    if (ps->repack_due && ps->tier) {
        ps->repack_due = 0;
        double b0 = now_sec();
        int cr = commit(ps, 0, NULL, 1, 0);
        ps->boundary_s += now_sec() - b0;
        if (cr < 0) {
            reader_hold(&ps->rd, 0);
            ps->failed = 1;
            return NULL;
        }
    }
    if (cur->first) ps->rs->pass++;
    if (ps->tier) {
        /* The next part's rows in memory now stay (pinned), and what it reads or creates is
         * counted before it comes: the rows in memory stay within the budget until it trains.
         * A key it lacks now is not in memory after this part's rows are installed, so the
         * tier's copy (or none: a new key this part may create first) is the one to read. */
        double b0 = now_sec();
        if (ps->nxt) {
            ps->job = emb_cache_missing(ps->cache, ps->nxt->keys);
            coming += emb_cache_fetch_bytes(ps->cache, ps->job);
        }
        emb_tier_settle(ps->tier);   /* the slots and batches of the commits durable since */
        /* The fetch reads while the rows go: it asks only for keys not in memory, whose copies in
         * the tier were sealed at earlier boundaries, and eviction writes to free slots only (as
         * the commit at the end of a part does while a fetch runs). The other core reads while
         * this one writes back, instead of waiting through the boundary. */
        if (ps->job) fetch_start(ps, ps->job);
        evict(ps, cur->keys, ps->cur_f, ps->nxt ? ps->nxt->keys : NULL, ps->job, coming);
        emb_fetch_free(ps->cur_f);
        ps->cur_f = NULL;
        char err[1024];
        int sr = ps->wb ? emb_tier_seal(ps->wb, err, sizeof err) : 0;
        reader_hold(&ps->rd, 0);
        if (sr < 0) {   /* the rows written back, findable */
            fprintf(stderr, "%sctrbox: %s\n", util_tty_break(), err);
            ps->failed = 1;
            return NULL;
        }
        ps->boundary_s += now_sec() - b0;
    }
    ps->item = (pass_item){ &cur->u->rows, cur->u->order, cur->lo, cur->hi, cur->u->index, cur->keys,
                            ps->nxt ? ps->nxt->keys : NULL };
    return &ps->item;
}

int passes_done(passes *ps, double t_train)
{
    pass_data *cur = ps->cur;
    if (!cur) return 0;   /* streamed: nothing to commit */
    ps->pass_in_epoch = cur->last ? cur->u->index : cur->u->index - 1;
    ps->rows_in_pass = cur->last ? 0 : cur->hi;
    if (cur->u->index > ps->digests.n) key_vec_push(&ps->digests, cur->u->digest);   /* the first epoch */
    ps->epoch_done = 0;
    int ret = 0;
    if (ps->tier) {
        /* the rows this part changed may all be written back at the next boundary: commit before the
         * open batch would pass its share of the budget */
        if (cur->last ||
            emb_tier_batch_bytes(ps->wb) + emb_tier_batch_growth(ps->wb, emb_cache_dirty(ps->cache, NULL)) > ps->window)
            ret = commit(ps, 1, NULL, 0, 0);
    }
    ps->repack_due |= cur->last;
    if (ret == 0) pass_report(ps, cur, t_train);
    else ps->failed = 1;
    pass_free(cur, ps->n_tables);
    ps->cur = NULL;
    return ret;
}
int passes_end_epoch(passes *ps)
{
    int ret = ps->failed ? -1 : 0;
    if (ps->wb && ret < 0) {   /* a failed epoch's written-back rows are not committed */
        emb_tier_abort(ps->wb);
        ps->wb = NULL;
    }
    if (!ps->reading) return ret;
    if (ps->job) {   /* stopped with a fetch in flight */
        fetch_wait(ps);
        emb_fetch_free(ps->job);
        ps->job = NULL;
    }
    emb_fetch_free(ps->cur_f);   /* stopped at a boundary before its eviction */
    ps->cur_f = NULL;
    pass_free(ps->cur, ps->n_tables);
    pass_free(ps->nxt, ps->n_tables);
    ps->cur = ps->nxt = NULL;
    reader *r = &ps->rd;
    pthread_mutex_lock(&r->mu);
    r->stop = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->th, NULL);
    pass_free(r->ready, ps->n_tables);
    if (ret == 0 && r->err) {
        fprintf(stderr, "%sctrbox: %s\n", util_tty_break(), r->errmsg);
        ret = -1;
    }
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free((uint64_t *)r->known);
    ps->reading = 0;
    return ret;
}

int passes_export(passes *ps, const model_meta *meta, const char *path, int64_t since, uint64_t since_state,
                  uint64_t *state, char *err, size_t errlen)
{
    if (ps->tier && writer_wait(ps) < 0) {
        snprintf(err, errlen, "the last commit failed");
        return -1;
    }
    model_meta mm = *meta;
    mm.state = *state = modelfile_state_of(ps->m, ps->tier ? emb_tier_id(ps->tier) : 0);
    mm.since_state = since_state;
    return modelfile_bundle_save(path, ps->m, &mm, ps->tier, QUANT_FP32, since, err, errlen);
}

int passes_restart(passes *ps)
{
    ps->digests.n = 0;   /* the new data's first epoch */
    ps->pass_in_epoch = 0;
    ps->rows_in_pass = 0;
    ps->epoch_done = 0;
    if (!ps->tier) return 0;
    char err[1024];
    if (writer_wait(ps) < 0) return -1;
    if (data_fingerprint(ps->o, &ps->data, err, sizeof err) < 0) {
        fprintf(stderr, "ctrbox: %s\n", err);
        return -1;
    }
    ps->origin[0] = emb_tier_id(ps->tier);   /* as passes_open's warm start from the model kept now */
    ps->origin[1] = emb_tier_commits(ps->tier);
    return 0;
}

int passes_commit_epoch(passes *ps, uint64_t *shrunk)
{
    ps->epoch_done = 1;
    return commit(ps, 1, shrunk, 0, 1);
}

int passes_flush(passes *ps)
{
    if (!ps->tier || !ps->wb) return 0;
    return commit(ps, 1, NULL, 0, 1);
}

int passes_stamp(passes *ps, uint64_t *id, uint64_t *commits)
{
    if (!ps->tier) return 0;
    if (writer_wait(ps) < 0) return -1;
    *id = emb_tier_id(ps->tier);
    *commits = emb_tier_commits(ps->tier);
    return 0;
}

int passes_close(passes *ps)
{
    if (!ps) return 0;
    int ret = 0;
    if (ps->reading) passes_end_epoch(ps);
    if (ps->wb) {   /* a run that stopped with rows written back since its last commit: they go */
        emb_tier_abort(ps->wb);
        ps->wb = NULL;
    }
    if (ps->wr.th) {
        if (writer_wait(ps) < 0) ret = -1;
        pthread_mutex_lock(&ps->wr.mu);
        ps->wr.quit = 1;
        pthread_cond_broadcast(&ps->wr.cv);
        pthread_mutex_unlock(&ps->wr.mu);
        pthread_join(ps->wr.th, NULL);
        free(ps->wr.line);
        pthread_mutex_destroy(&ps->wr.mu);
        pthread_cond_destroy(&ps->wr.cv);
    }
    if (ps->fx.th) {
        pthread_mutex_lock(&ps->fx.mu);
        ps->fx.quit = 1;
        pthread_cond_broadcast(&ps->fx.cv);
        pthread_mutex_unlock(&ps->fx.mu);
        pthread_join(ps->fx.th, NULL);
        pthread_mutex_destroy(&ps->fx.mu);
        pthread_cond_destroy(&ps->fx.cv);
    }
    if (ps->tier) emb_tier_close(ps->tier);
    free(ps->cat);
    emb_cache_destroy(ps->cache);
    key_vec_free(&ps->digests);
    free(ps);
    return ret;
}
