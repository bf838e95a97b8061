/*
 * dist.c: MPI behind dist.h. Without a launcher nothing here calls MPI: one rank, plain copies.
 */
#include "dist.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/block.h"
#include "../io/util.h"

static int active, rank, size = 1;

int dist_launched(void)
{
    /* Open MPI's mpirun, MPICH's Hydra (PMI), any PMIx launcher */
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

/* A rank that exits without dist_finalize (an error said, then exit) takes the job down: the
 * others would wait for it in the next collective. */
static void exit_hook(void)
{
    if (active && size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
}

void dist_init(int *argc, char ***argv)
{
    if (!dist_launched() || active) return;
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    active = 1;
    atexit(exit_hook);
}

void dist_finalize(void)
{
    if (!active) return;
    MPI_Finalize();
    active = 0;
}

int dist_rank(void) { return rank; }
int dist_size(void) { return size; }

void dist_abort(int code)
{
    fflush(stdout);
    fflush(stderr);
    if (active) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

void dist_sum_i64(int64_t *v, size_t n)
{
    if (!active || size == 1) return;
    for (size_t i = 0; i < n;) {   /* counts are int */
        int c = n - i > (size_t)INT_MAX / 2 ? INT_MAX / 2 : (int)(n - i);
        MPI_Allreduce(MPI_IN_PLACE, v + i, c, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        i += (size_t)c;
    }
}

void dist_max_f64(double *v, size_t n)
{
    if (!active || size == 1) return;
    CHECK(n <= INT_MAX);
    MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
}

void dist_sum_f64_ordered(double *v, size_t n)
{
    if (!active || size == 1) return;
    CHECK(n * (size_t)size <= INT_MAX);
    double *all = xmalloc(n * (size_t)size * sizeof *all);
    MPI_Allgather(v, (int)n, MPI_DOUBLE, all, (int)n, MPI_DOUBLE, MPI_COMM_WORLD);
    for (size_t i = 0; i < n; i++) {
        double s = all[i];
        for (int r = 1; r < size; r++) s += all[(size_t)r * n + i];
        v[i] = s;
    }
    free(all);
}

int dist_all(int ok)
{
    if (!active || size == 1) return ok != 0;
    int v = ok != 0;
    MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    return v;
}

static int to_int(size_t n)
{
    if (n > (size_t)INT_MAX) {
        fprintf(stderr, "ctrbox: rank %d: an exchange of %zu bytes with one rank is over MPI's 2 GB count; use a "
                "smaller --batch or more ranks\n", rank, n);
        dist_abort(1);
    }
    return (int)n;
}

size_t dist_alltoallv(const void *send, const size_t *send_bytes, void **recv, size_t *recv_bytes)
{
    if (!active || size == 1) {
        recv_bytes[0] = send_bytes[0];
        *recv = xmalloc(send_bytes[0] ? send_bytes[0] : 1);
        if (send_bytes[0]) memcpy(*recv, send, send_bytes[0]);
        return send_bytes[0];
    }
    int *sc = xmalloc(4 * (size_t)size * sizeof *sc), *sd = sc + size, *rc = sd + size, *rd = rc + size;
    size_t off = 0;
    for (int r = 0; r < size; r++) {
        sc[r] = to_int(send_bytes[r]);
        sd[r] = to_int(off);
        off += send_bytes[r];
    }
    MPI_Alltoall(sc, 1, MPI_INT, rc, 1, MPI_INT, MPI_COMM_WORLD);
    off = 0;
    for (int r = 0; r < size; r++) {
        recv_bytes[r] = (size_t)rc[r];
        rd[r] = to_int(off);
        off += (size_t)rc[r];
    }
    *recv = xmalloc(off ? off : 1);
    MPI_Alltoallv(send, sc, sd, MPI_BYTE, *recv, rc, rd, MPI_BYTE, MPI_COMM_WORLD);
    free(sc);
    return off;
}

size_t dist_gather_bytes(const void *buf, size_t bytes, void **out)
{
    *out = NULL;
    if (!active || size == 1) {
        *out = xmalloc(bytes ? bytes : 1);
        if (bytes) memcpy(*out, buf, bytes);
        return bytes;
    }
    int n = to_int(bytes), *rc = NULL, *rd = NULL;
    if (rank == 0) rc = xmalloc(2 * (size_t)size * sizeof *rc), rd = rc + size;
    MPI_Gather(&n, 1, MPI_INT, rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    size_t total = 0;
    if (rank == 0) {
        for (int r = 0; r < size; r++) {
            rd[r] = to_int(total);
            total += (size_t)rc[r];
        }
        to_int(total);
        *out = xmalloc(total ? total : 1);
    }
    MPI_Gatherv(buf, n, MPI_BYTE, *out, rc, rd, MPI_BYTE, 0, MPI_COMM_WORLD);
    free(rc);
    return total;
}

void dist_bcast(void *buf, size_t n)
{
    if (!active || size == 1) return;
    MPI_Bcast(buf, to_int(n), MPI_BYTE, 0, MPI_COMM_WORLD);
}

int dist_same(const void *buf, size_t n)
{
    if (!active || size == 1) return 1;
    void *r0 = xmalloc(n ? n : 1);
    memcpy(r0, buf, n);
    dist_bcast(r0, n);
    int same = memcmp(r0, buf, n) == 0;
    free(r0);
    return dist_all(same);
}

void dist_ship_rows(const sample_block *b, const uint64_t *num, int (*dest)(void *ctx, uint64_t num), void *ctx,
                    uint64_t from, uint64_t lo, uint64_t hi, sample_block *in, uint64_t **in_num, size_t *in_cap,
                    size_t **order, double *secs, uint64_t *bytes)
{
    uint8_t **buf = xcalloc((size_t)size, sizeof *buf);
    size_t *len = xcalloc((size_t)size, sizeof *len), *cap = xcalloc((size_t)size, sizeof *cap);
    for (size_t r = 0; r < b->rows;) {   /* runs of rows for one rank */
        int to = dest(ctx, num[r]);
        size_t e = r + 1;
        while (e < b->rows && dest(ctx, num[e]) == to) e++;
        size_t a = r;
        while (a < e && num[a] < from) a++;
        if (a < e) block_pack(b, a, e, num, &buf[to], &len[to], &cap[to]);
        r = e;
    }
    size_t total = 0;
    for (int k = 0; k < size; k++) total += len[k];
    uint8_t *send = xmalloc(total ? total : 1), *p = send;
    for (int k = 0; k < size; k++) {
        if (len[k]) memcpy(p, buf[k], len[k]);
        p += len[k];
        free(buf[k]);
        if (k != rank) *bytes += len[k];
    }
    void *recv;
    size_t *recv_bytes = xmalloc((size_t)size * sizeof *recv_bytes);
    double t0 = now_sec();
    dist_alltoallv(send, len, &recv, recv_bytes);
    *secs += now_sec() - t0;
    free(send), free(buf), free(len), free(cap);
    block_clear(in);
    const uint8_t *q = recv;
    for (int k = 0; k < size; k++) {   /* each rank's part: whole runs (8-byte aligned sections) */
        if (recv_bytes[k]) block_unpack(in, q, recv_bytes[k], in_num, in_cap);
        q += recv_bytes[k];
    }
    free(recv), free(recv_bytes);
    /* numbers are distinct and in [lo, hi): their order by placing each at its offset */
    size_t span = (size_t)(hi - lo), *at = xmalloc((span ? span : 1) * sizeof *at), n = 0;
    for (size_t i = 0; i < span; i++) at[i] = SIZE_MAX;
    for (size_t i = 0; i < in->rows; i++) {
        CHECK((*in_num)[i] >= lo && (*in_num)[i] < hi && at[(*in_num)[i] - lo] == SIZE_MAX);
        at[(*in_num)[i] - lo] = i;
    }
    *order = xrealloc(*order, (in->rows ? in->rows : 1) * sizeof **order);
    for (size_t i = 0; i < span; i++)
        if (at[i] != SIZE_MAX) (*order)[n++] = at[i];
    free(at);
}
