/*
 * shard.h: the sparse rows one rank owns when several processes train one model (issue 16).
 *
 * Each key is owned by one rank, chosen by a hash of the key (emb_shard_owner); the owner keeps
 * its row (values, optimizer state, counters) and is the only one to change it. A training step
 * on the owner: requests come (emb_shard_serve: the rows' values go back, missing rows are created
 * as emb_table_get creates them, from a hash of seed and key), then the gradients of the same
 * requests, in the same order (emb_shard_add), as fixed-point integers with the key's shows and
 * clicks; emb_shard_apply turns each row's sum into floats once every rank's part is in, counts
 * and updates the row. Integer sums do not depend on the order they are added in, so a row's
 * update does not depend on how many ranks sent parts of it.
 *
 * The gradient record of a request of table tb: int64 shows, clicks, then V(tb) fixed-point values
 * (emb_shard_grad_words). The shard owns its tables (made with the configs of `like`) and its
 * per-step arrays; a row's header `mark` is its scratch during a step.
 */
#ifndef CTRBOX_EMBEDDING_SHARD_H
#define CTRBOX_EMBEDDING_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "../io/mix.h"
#include "table.h"

typedef struct emb_shard emb_shard;

/* The rank (of n) that owns key: not the table index's hash (mix64 of the key), so that each
 * owner's keys still spread over its index's slots. */
static inline int emb_shard_owner(uint64_t key, int n) { return (int)(mix64(key ^ 0x5851f42d4c957f2dull) % (uint64_t)n); }

emb_shard *emb_shard_create(emb_table *const *like, int n_tables);
void emb_shard_destroy(emb_shard *s);
emb_table *emb_shard_table(emb_shard *s, int tb);
/* Its tables (n_tables, owned by the shard, for a cache in front of a tier). */
emb_table *const *emb_shard_table_array(const emb_shard *s);

/* int64 words of a request's gradient record in table tb. */
size_t emb_shard_grad_words(const emb_shard *s, int tb);

/* A new step: the requests and gradients of the last are forgotten. */
void emb_shard_begin(emb_shard *s);
/* Requests for the rows of keys (n) of table tb: their values (V floats each) into out, and whether
 * the row exists into found[i] (NULL: not wanted). create: a missing row is created (training);
 * else it reads as zeros and nothing is kept (inference, and keys pending admission, whose rows
 * take no gradients). The requests are numbered in the order served. */
void emb_shard_serve(emb_shard *s, int tb, const uint64_t *keys, size_t n, int create, float *out, uint8_t *found);
/* The gradient records of requests first, first + 1, ... (in order: each is as long as its
 * table's record; a request that served no row has none), added to their rows' sums; q holds them
 * back to back; returns the words read. */
size_t emb_shard_add(emb_shard *s, size_t first, size_t n, const int64_t *q);
/* The step's updates: each row that took gradients gets sum * 2^-exp as its gradient (with l2_all
 * > 0 every row, touched or not, also gets l2_all * value), its shows and clicks counted at pass;
 * step as the optimizers count it. */
void emb_shard_apply(emb_shard *s, int exp, uint32_t pass, uint64_t step, float l2_all);

/* A sharded table folder, DIR: one table folder per rank, DIR/rank-<r>, and DIR/SHARDS.ctrbox, the
 * job's record (docs/formats.md): the ranks and lanes it was made for, the job's commits.
 * emb_shards_read: 0 (*commits 0 when DIR has no record), or -1 with err. emb_shards_write: durable;
 * 0 or -errno with err. */
#define EMB_SHARDS_FILE "SHARDS.ctrbox"
int emb_shards_read(const char *top, int *ranks, int *n_lanes, uint64_t *commits, char *err, size_t errlen);
int emb_shards_write(const char *top, int ranks, int n_lanes, uint64_t commits, char *err, size_t errlen);

#endif
