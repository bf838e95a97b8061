/*
 * dist.h: the processes of one job under MPI (issue 16), wrapped once. The `ctrbox` binary links
 * MPI and calls MPI_Init only when a launcher started it (mpirun/mpiexec: Open MPI, MPICH's
 * Hydra, or PMIx set the environment dist_launched reads); started plainly it is one process and
 * every function here does what one rank alone would (no MPI call is made).
 *
 * Every collective is called by all ranks in the same order. A failed MPI call aborts the job
 * (MPI's default error handler): a rank that stops alone would leave the others waiting.
 * Buffers are the caller's; dist_alltoallv's receive buffer is allocated here (caller frees).
 */
#ifndef CTRBOX_SRC_DIST_H
#define CTRBOX_SRC_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "../io/block.h"

/* 1 when a launcher started this process (it then takes part in a job, even of one rank). */
int dist_launched(void);
/* MPI_Init when launched; safe to call once at start. A launched rank that exits without
 * dist_finalize aborts the whole job. */
void dist_init(int *argc, char ***argv);
void dist_finalize(void);
int dist_rank(void);
int dist_size(void);
/* Stop every rank of the job (code as the exit status). */
void dist_abort(int code) __attribute__((noreturn));

/* In place over all ranks: sums of v (n), exact; maxima of v (n). */
void dist_sum_i64(int64_t *v, size_t n);
void dist_max_f64(double *v, size_t n);
/* The sum over ranks of v (n) into v, added rank after rank (rank 0's first): the same bits on
 * every rank and for a given set of per-rank values. */
void dist_sum_f64_ordered(double *v, size_t n);
/* 1 if every rank passes a non-zero ok. */
int dist_all(int ok);

/* Each rank sends send_bytes[r] bytes (from send, in rank order) to rank r; *recv (allocated,
 * caller frees) receives what every rank sent this one, in rank order, recv_bytes[r] from rank r.
 * Counts above 2 GB to one rank abort with a message. Returns the bytes received. */
size_t dist_alltoallv(const void *send, const size_t *send_bytes, void **recv, size_t *recv_bytes);
/* Rank 0 receives every rank's bytes in rank order (*out allocated there, caller frees; NULL
 * elsewhere); returns the total on rank 0, 0 elsewhere. */
size_t dist_gather_bytes(const void *buf, size_t bytes, void **out);
/* Rank 0's bytes to every rank (same n everywhere). */
void dist_bcast(void *buf, size_t n);
/* 1 on every rank if every rank's n bytes equal rank 0's, else 0 on every rank. */
int dist_same(const void *buf, size_t n);

/* Rows between the ranks (collective): each row r of b (numbered num[r], distinct over all ranks,
 * all in [lo, hi); those below `from` left out) goes to rank dest(ctx, num); *in gets the rows every
 * rank sent this one, their numbers in *in_num (grown with *in_cap), and *order (realloc'ed) their
 * order by number. Seconds in MPI added to *secs, bytes sent to other ranks to *bytes. */
void dist_ship_rows(const sample_block *b, const uint64_t *num, int (*dest)(void *ctx, uint64_t num), void *ctx,
                    uint64_t from, uint64_t lo, uint64_t hi, sample_block *in, uint64_t **in_num, size_t *in_cap,
                    size_t **order, double *secs, uint64_t *bytes);

#endif
