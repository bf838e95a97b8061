/*
 * cbx.c: writer and reader of the binary sample format (layout in cbx.h).
 *
 * The writer streams blocks to a temporary file and, at finish, appends the trailer and rewrites
 * the header (a libffm schema learns its field count only at the end), then commits durably.
 * The reader reads through io_stream (io_uring, O_DIRECT), straight into the block's arrays,
 * hashing as it goes; nothing reaches the caller before its checksum is verified.
 */
#define _GNU_SOURCE
#include "cbx.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../io/stream.h"
#include "../io/util.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "cbx.c writes little-endian integers with memcpy; add byte swaps for this host"
#endif

static const char header_magic[8] = { 'C', 'T', 'R', 'B', 'O', 'X', 'D', 'S' };
static const char trailer_magic[8] = { 'C', 'B', 'X', 'T', 'R', 'A', 'I', 'L' };
#define BLOCK_MAGIC 0x314b4c42u   /* "BLK1" */
#define BLOCK_HEADER_BYTES 48
#define HEADER_FIXED 40
#define TRAILER_BYTES (8 * (6 + CBX_STATS_SLOTS) + 8)
#define CBX_BLOCK_ONEHOT 1u
#define FLAG_EXPLICIT 1u
#define MAX_BLOCK_ROWS (1u << 24)
#define MAX_PAYLOAD (1ull << 32)

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

int cbx_is_magic(const void *data, size_t len)
{
    return len >= 8 && memcmp(data, header_magic, 8) == 0;
}

int cbx_file_is_cbx(const char *path)
{
    struct stat st;   /* a pipe would lose the bytes peeked */
    if (stat(path, &st) < 0 || !S_ISREG(st.st_mode)) return 0;
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    char buf[8];
    size_t n = fread(buf, 1, 8, f);
    fclose(f);
    return cbx_is_magic(buf, n);
}

static int schema_is_explicit(const data_schema *s)
{
    for (uint32_t i = 0; i < s->n_fields; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "f%u", i);
        if (s->kind[i] != FIELD_CAT || strcmp(s->names[i], buf) != 0) return 1;
    }
    return 0;
}

/* Encode the header for schema; returns a malloc'd buffer of *bytes (a multiple of 4096). */
static uint8_t *encode_header(const data_schema *s, data_format source, size_t *bytes)
{
    int expl = schema_is_explicit(s);
    size_t need = HEADER_FIXED + 8;
    if (expl)
        for (uint32_t i = 0; i < s->n_fields; i++) need += 3 + strlen(s->names[i]);
    size_t n = (need + 4095) & ~(size_t)4095;
    uint8_t *h = xcalloc(1, n);
    memcpy(h, header_magic, 8);
    put32(h + 8, CBX_VERSION);
    put32(h + 12, (uint32_t)n);
    put32(h + 16, s->n_fields);
    put32(h + 20, s->n_dense);
    put32(h + 24, s->num_mode);
    put32(h + 28, expl ? FLAG_EXPLICIT : 0);
    put32(h + 32, (uint32_t)source);
    uint8_t *p = h + HEADER_FIXED;
    if (expl)
        for (uint32_t i = 0; i < s->n_fields; i++) {
            size_t len = strlen(s->names[i]);
            if (len > 65535) len = 65535;
            *p++ = s->kind[i];
            p[0] = (uint8_t)(len & 0xff);
            p[1] = (uint8_t)(len >> 8);
            memcpy(p + 2, s->names[i], len);
            p += 2 + len;
        }
    put64(h + n - 8, XXH64(h, n - 8, 0));
    *bytes = n;
    return h;
}

struct cbx_writer {
    durable_file f;
    size_t header_bytes;
    int explicit_schema;
    uint32_t n_dense;
    data_format source;
    cbx_trailer t;
    uint8_t *buf;
    size_t cap;
};

int cbx_writer_open(cbx_writer **out, const char *path, const data_schema *schema,
                    data_format source, char *err, size_t errlen)
{
    *out = NULL;
    cbx_writer *w = xcalloc(1, sizeof *w);
    int ret = durable_open(&w->f, path);
    if (ret < 0) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(-ret));
        free(w);
        return ret;
    }
    uint8_t *h = encode_header(schema, source, &w->header_bytes);
    w->explicit_schema = schema_is_explicit(schema);
    w->n_dense = schema->n_dense;
    w->source = source;
    if (fwrite(h, 1, w->header_bytes, w->f.f) != w->header_bytes) {
        ret = -errno;
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno));
        free(h);
        cbx_writer_abort(w);
        return ret ? ret : -EIO;
    }
    free(h);
    *out = w;
    return 0;
}

static uint8_t *grow(cbx_writer *w, size_t n)
{
    if (n > w->cap) {
        w->buf = xrealloc(w->buf, n);
        w->cap = n;
    }
    return w->buf;
}

int cbx_writer_add(cbx_writer *w, const sample_block *b, char *err, size_t errlen)
{
    if (b->rows == 0) return 0;
    CHECK(b->n_dense == w->n_dense);
    int onehot = block_vals_all_one(b);
    size_t rows = b->rows, nnz = b->nnz;
    size_t payload = rows * 4 + rows * b->n_dense * 4 + rows * 4 + nnz * 2 + nnz * 8 + (onehot ? 0 : nnz * 4);
    uint8_t *p = grow(w, BLOCK_HEADER_BYTES + payload);
    uint8_t *q = p + BLOCK_HEADER_BYTES;
    memcpy(q, b->label, rows * 4), q += rows * 4;
    memcpy(q, b->dense, rows * b->n_dense * 4), q += rows * b->n_dense * 4;
    for (size_t i = 0; i < rows; i++, q += 4) put32(q, (uint32_t)(b->row_ptr[i + 1] - b->row_ptr[i]));
    memcpy(q, b->field, nnz * 2), q += nnz * 2;
    memcpy(q, b->key, nnz * 8), q += nnz * 8;
    if (!onehot) memcpy(q, b->val, nnz * 4), q += nnz * 4;
    CHECK((size_t)(q - p) == BLOCK_HEADER_BYTES + payload);
    put32(p, BLOCK_MAGIC);
    put32(p + 4, onehot ? CBX_BLOCK_ONEHOT : 0);
    put32(p + 8, (uint32_t)rows);
    put32(p + 12, b->n_dense);
    put64(p + 16, nnz);
    put64(p + 24, payload);
    put64(p + 32, XXH3_64bits(p + BLOCK_HEADER_BYTES, payload));
    put64(p + 40, XXH64(p, 40, 0));
    if (fwrite(p, 1, BLOCK_HEADER_BYTES + payload, w->f.f) != BLOCK_HEADER_BYTES + payload) {
        int e = errno ? errno : EIO;
        snprintf(err, errlen, "%s: write failed: %s", w->f.path, strerror(e));
        return -e;
    }
    w->t.blocks++;
    w->t.rows += rows;
    w->t.nnz += nnz;
    for (size_t i = 0; i < rows; i++) w->t.positives += b->label[i] > 0.5f;
    return 0;
}

static void encode_trailer(uint8_t *p, const cbx_trailer *t)
{
    memcpy(p, trailer_magic, 8);
    put64(p + 8, t->blocks);
    put64(p + 16, t->rows);
    put64(p + 24, t->positives);
    put64(p + 32, t->nnz);
    put64(p + 40, t->stats.lines);
    for (int i = 0; i < CBX_STATS_SLOTS; i++) put64(p + 48 + 8 * i, t->stats.bad[i]);
    put64(p + TRAILER_BYTES - 8, XXH64(p, TRAILER_BYTES - 8, 0));
}

int cbx_writer_finish(cbx_writer *w, const data_schema *schema, const line_stats *st, char *err,
                      size_t errlen)
{
    int ret = 0;
    uint8_t tr[TRAILER_BYTES];
    if (st) w->t.stats = *st;
    encode_trailer(tr, &w->t);
    size_t hb;
    uint8_t *h = encode_header(schema, w->source, &hb);
    CHECK(hb == w->header_bytes || !w->explicit_schema);
    if (hb != w->header_bytes) {   /* only an implicit schema can change, and its header size cannot */
        free(h);
        CHECK(!"header size changed");
    }
    if (fwrite(tr, 1, sizeof tr, w->f.f) != sizeof tr || fflush(w->f.f) != 0) {
        ret = -(errno ? errno : EIO);
    } else if (pwrite(fileno(w->f.f), h, hb, 0) != (ssize_t)hb) {
        ret = -(errno ? errno : EIO);
    }
    free(h);
    if (ret < 0) {
        snprintf(err, errlen, "%s: write failed: %s", w->f.path, strerror(-ret));
        cbx_writer_abort(w);
        return ret;
    }
    char *path = xstrdup(w->f.path);
    ret = durable_commit(&w->f);
    if (ret < 0) snprintf(err, errlen, "%s: cannot commit: %s", path, strerror(-ret));
    free(path);
    free(w->buf);
    free(w);
    return ret;
}

void cbx_writer_abort(cbx_writer *w)
{
    if (!w) return;
    durable_abort(&w->f);
    free(w->buf);
    free(w);
}

struct cbx_reader {
    io_stream *s;
    data_schema schema;
    data_format source;     /* the text format the file was converted from */
    uint64_t block_index;
    uint64_t offset;        /* byte offset of the next block */
    cbx_trailer seen;       /* totals of the blocks read so far */
    cbx_trailer trailer;
    int done;
    uint32_t *counts;
    size_t counts_cap;
};

#define RFAIL(code, ...) do { snprintf(err, errlen, __VA_ARGS__); return (code); } while (0)

static int read_exact(cbx_reader *r, void *dst, size_t n, char *err, size_t errlen)
{
    ssize_t got = io_stream_read(r->s, dst, n);
    if (got < 0) RFAIL((int)got, "%s", io_stream_error(r->s));
    return got == (ssize_t)n ? 1 : 0;
}

static int read_header(cbx_reader *r, char *err, size_t errlen)
{
    const char *name = io_stream_name(r->s);
    uint8_t fixed[HEADER_FIXED];
    int ret = read_exact(r, fixed, HEADER_FIXED, err, errlen);
    if (ret < 0) return ret;
    if (ret == 0 || memcmp(fixed, header_magic, 8) != 0)
        RFAIL(-EBADMSG, "%s: not a cbx file (bad magic at byte offset 0)", name);
    uint32_t version = get32(fixed + 8), hb = get32(fixed + 12);
    if (version != CBX_VERSION)
        RFAIL(-EBADMSG, "%s: cbx version %u, this build reads version %u", name, version, CBX_VERSION);
    if (hb < 4096 || hb % 4096 || hb > (64u << 20))
        RFAIL(-EBADMSG, "%s: corrupt header (size %u at byte offset 12)", name, hb);
    uint8_t *h = xmalloc(hb);
    memcpy(h, fixed, HEADER_FIXED);
    ret = read_exact(r, h + HEADER_FIXED, hb - HEADER_FIXED, err, errlen);
    if (ret <= 0) {
        free(h);
        if (ret < 0) return ret;
        RFAIL(-EBADMSG, "%s: truncated header (want %u bytes)", name, hb);
    }
    if (XXH64(h, hb - 8, 0) != get64(h + hb - 8)) {
        free(h);
        RFAIL(-EBADMSG, "%s: header checksum mismatch (bytes 0..%u)", name, hb);
    }
    uint32_t nf = get32(h + 16), nd = get32(h + 20), mode = get32(h + 24), flags = get32(h + 28);
    r->source = (data_format)get32(h + 32);
    if (nf > CBX_MAX_FIELDS || mode > NUM_BUCKET) {
        free(h);
        RFAIL(-EBADMSG, "%s: corrupt header (%u fields, num mode %u)", name, nf, mode);
    }
    schema_init(&r->schema, nf);
    r->schema.num_mode = mode;
    uint32_t dense = 0;
    if (flags & FLAG_EXPLICIT) {
        const uint8_t *p = h + HEADER_FIXED, *end = h + hb - 8;
        for (uint32_t i = 0; i < nf; i++) {
            if (end - p < 3) goto bad_schema;
            uint8_t kind = p[0];
            size_t len = (size_t)p[1] | (size_t)p[2] << 8;
            if (kind > FIELD_NUM || (size_t)(end - p - 3) < len) goto bad_schema;
            char *nm = xmalloc(len + 1);
            memcpy(nm, p + 3, len);
            nm[len] = 0;
            schema_set_name(&r->schema, i, nm);
            free(nm);
            r->schema.kind[i] = kind;
            if (kind == FIELD_NUM) r->schema.dense_slot[i] = (int32_t)dense++;
            p += 3 + len;
        }
    }
    if (dense != nd) goto bad_schema;
    r->schema.n_dense = nd;
    free(h);
    r->offset = hb;
    return 0;
bad_schema:
    free(h);
    RFAIL(-EBADMSG, "%s: corrupt schema in the header", name);
}

static int reader_init(cbx_reader *r, char *err, size_t errlen)
{
    return read_header(r, err, errlen);
}

data_format cbx_reader_source(const cbx_reader *r) { return r->source; }

data_format cbx_file_source(const char *path)
{
    cbx_reader *r;
    char err[300];
    if (cbx_reader_open(&r, path, err, sizeof err) < 0) return FMT_NONE;
    data_format f = r->source;
    cbx_reader_close(r);
    return f == FMT_CRITEO || f == FMT_LIBSVM || f == FMT_LIBFFM || f == FMT_CSV ? f : FMT_NONE;
}

int cbx_reader_open(cbx_reader **out, const char *path, char *err, size_t errlen)
{
    *out = NULL;
    cbx_reader *r = xcalloc(1, sizeof *r);
    int ret = io_stream_open(&r->s, path, IO_STREAM_DIRECT, err, errlen);
    if (ret == 0) ret = reader_init(r, err, errlen);
    if (ret < 0) {
        cbx_reader_close(r);
        return ret;
    }
    *out = r;
    return 0;
}

int cbx_reader_open_mem(cbx_reader **out, const void *data, size_t len, char *err, size_t errlen)
{
    *out = NULL;
    cbx_reader *r = xcalloc(1, sizeof *r);
    int ret = io_stream_open_mem(&r->s, data, len, "<memory>");
    if (ret < 0) {
        snprintf(err, errlen, "<memory>: cannot open");
        free(r);
        return ret;
    }
    ret = reader_init(r, err, errlen);
    if (ret < 0) {
        cbx_reader_close(r);
        return ret;
    }
    *out = r;
    return 0;
}

void cbx_reader_close(cbx_reader *r)
{
    if (!r) return;
    io_stream_close(r->s);
    schema_free(&r->schema);
    free(r->counts);
    free(r);
}

const data_schema *cbx_reader_schema(const cbx_reader *r) { return &r->schema; }
const cbx_trailer *cbx_reader_trailer(const cbx_reader *r) { return r->done ? &r->trailer : NULL; }
int cbx_reader_is_direct(const cbx_reader *r) { return io_stream_is_direct(r->s); }

static int read_trailer(cbx_reader *r, const uint8_t *first8, char *err, size_t errlen)
{
    const char *name = io_stream_name(r->s);
    uint8_t t[TRAILER_BYTES];
    memcpy(t, first8, 8);
    int ret = read_exact(r, t + 8, TRAILER_BYTES - 8, err, errlen);
    if (ret < 0) return ret;
    if (ret == 0) RFAIL(-EBADMSG, "%s: truncated trailer at byte offset %llu", name, (unsigned long long)r->offset);
    if (XXH64(t, TRAILER_BYTES - 8, 0) != get64(t + TRAILER_BYTES - 8))
        RFAIL(-EBADMSG, "%s: trailer checksum mismatch at byte offset %llu", name, (unsigned long long)r->offset);
    cbx_trailer *tr = &r->trailer;
    tr->blocks = get64(t + 8);
    tr->rows = get64(t + 16);
    tr->positives = get64(t + 24);
    tr->nnz = get64(t + 32);
    tr->stats.lines = get64(t + 40);
    for (int i = 0; i < CBX_STATS_SLOTS; i++) tr->stats.bad[i] = get64(t + 48 + 8 * i);
    if (tr->blocks != r->seen.blocks || tr->rows != r->seen.rows || tr->positives != r->seen.positives ||
        tr->nnz != r->seen.nnz)
        RFAIL(-EBADMSG, "%s: trailer says %llu blocks / %llu rows but the file holds %llu / %llu",
              name, (unsigned long long)tr->blocks, (unsigned long long)tr->rows,
              (unsigned long long)r->seen.blocks, (unsigned long long)r->seen.rows);
    uint8_t extra;
    ret = read_exact(r, &extra, 1, err, errlen);
    if (ret < 0) return ret;
    if (ret == 1)
        RFAIL(-EBADMSG, "%s: unexpected bytes after the trailer at byte offset %llu", name,
              (unsigned long long)(r->offset + TRAILER_BYTES));
    r->done = 1;
    return 0;
}

/* A block's 48-byte header, checked. */
typedef struct {
    uint32_t flags, rows, nd;
    uint64_t nnz, payload, hash;
} block_head;

static int parse_head(const uint8_t *h, const data_schema *sc, const char *name, unsigned long long bi,
                      unsigned long long off, block_head *bh, char *err, size_t errlen)
{
    if (get32(h) != BLOCK_MAGIC || XXH64(h, 40, 0) != get64(h + 40))
        RFAIL(-EBADMSG, "%s: corrupt block %llu header at byte offset %llu", name, bi, off);
    bh->flags = get32(h + 4), bh->rows = get32(h + 8), bh->nd = get32(h + 12);
    bh->nnz = get64(h + 16), bh->payload = get64(h + 24), bh->hash = get64(h + 32);
    int onehot = (bh->flags & CBX_BLOCK_ONEHOT) != 0;
    uint64_t want = (uint64_t)bh->rows * 8 + (uint64_t)bh->rows * bh->nd * 4 + bh->nnz * (onehot ? 10 : 14);
    if (bh->nd != sc->n_dense || bh->rows == 0 || bh->rows > MAX_BLOCK_ROWS ||
        bh->nnz > (uint64_t)bh->rows * CBX_MAX_FIELDS * 64 || bh->payload != want || bh->payload > MAX_PAYLOAD ||
        (bh->flags & ~CBX_BLOCK_ONEHOT))
        RFAIL(-EBADMSG, "%s: block %llu at byte offset %llu has inconsistent sizes", name, bi, off);
    return 0;
}

/* The payload's six parts, in file order, pointed into b (made ready for the block) and *counts. */
typedef struct {
    void *dst;
    size_t n;
} block_part;

static void payload_parts(const block_head *bh, sample_block *b, uint32_t **counts, size_t *counts_cap,
                          block_part parts[6])
{
    uint32_t rows = bh->rows, nd = bh->nd;
    uint64_t nnz = bh->nnz;
    if (b->n_dense != nd) {
        block_free(b);
        block_init(b, nd);
    }
    block_clear(b);
    block_reserve(b, rows, nnz);
    if (*counts_cap < rows) *counts = xrealloc(*counts, (*counts_cap = rows) * sizeof **counts);
    int onehot = (bh->flags & CBX_BLOCK_ONEHOT) != 0;
    block_part p[6] = {
        { b->label, (size_t)rows * 4 }, { b->dense, (size_t)rows * nd * 4 }, { *counts, (size_t)rows * 4 },
        { b->field, nnz * 2 }, { b->key, nnz * 8 }, { b->val, onehot ? 0 : nnz * 4 },
    };
    memcpy(parts, p, sizeof p);
}

/* The payload read into parts: its checksum and contents checked, b completed; the positives in *pos. */
static int finish_block(const block_head *bh, const block_part parts[6], const uint32_t *counts, const data_schema *sc,
                        sample_block *b, const char *name, unsigned long long bi, unsigned long long off, uint64_t *pos,
                        char *err, size_t errlen)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (int i = 0; i < 6; i++)
        if (parts[i].n) XXH3_64bits_update(&st, parts[i].dst, parts[i].n);
    if (XXH3_64bits_digest(&st) != bh->hash)
        RFAIL(-EBADMSG, "%s: checksum mismatch in block %llu at byte offset %llu", name, bi, off);
    if (bh->flags & CBX_BLOCK_ONEHOT)
        for (uint64_t i = 0; i < bh->nnz; i++) b->val[i] = 1.0f;
    uint64_t sum = 0;
    *pos = 0;
    for (uint32_t i = 0; i < bh->rows; i++) {
        if (b->label[i] != 0.0f && b->label[i] != 1.0f)
            RFAIL(-EBADMSG, "%s: block %llu at byte offset %llu: row %u has label %g", name, bi, off, i, b->label[i]);
        *pos += b->label[i] == 1.0f;
        sum += counts[i];
        b->row_ptr[i + 1] = sum;
    }
    if (sum != bh->nnz) RFAIL(-EBADMSG, "%s: block %llu at byte offset %llu: row counts do not add up", name, bi, off);
    for (uint64_t i = 0; i < bh->nnz; i++)
        if (b->field[i] >= sc->n_fields || sc->kind[b->field[i]] != FIELD_CAT)
            RFAIL(-EBADMSG, "%s: block %llu at byte offset %llu: field %u outside the schema", name, bi, off, b->field[i]);
    b->rows = bh->rows;
    b->nnz = bh->nnz;
    return 0;
}

int cbx_reader_next(cbx_reader *r, sample_block *b, char *err, size_t errlen)
{
    const char *name = io_stream_name(r->s);
    if (r->done) return 0;
    unsigned long long bi = (unsigned long long)r->block_index, off = (unsigned long long)r->offset;
    uint8_t h[BLOCK_HEADER_BYTES];
    ssize_t got = io_stream_read(r->s, h, 8);
    if (got < 0) RFAIL((int)got, "%s", io_stream_error(r->s));
    if (got == 0)
        RFAIL(-EBADMSG, "%s: truncated: ends after block %llu at byte offset %llu with no trailer", name,
              bi, off);
    if (got < 8) RFAIL(-EBADMSG, "%s: truncated block %llu at byte offset %llu", name, bi, off);
    if (memcmp(h, trailer_magic, 8) == 0) {
        int ret = read_trailer(r, h, err, errlen);
        return ret < 0 ? ret : 0;
    }
    int ret = read_exact(r, h + 8, BLOCK_HEADER_BYTES - 8, err, errlen);
    if (ret < 0) return ret;
    if (ret == 0) RFAIL(-EBADMSG, "%s: truncated block %llu header at byte offset %llu", name, bi, off);
    block_head bh;
    if ((ret = parse_head(h, &r->schema, name, bi, off, &bh, err, errlen)) < 0) return ret;
    block_part parts[6];
    payload_parts(&bh, b, &r->counts, &r->counts_cap, parts);
    for (int i = 0; i < 6; i++) {
        if (parts[i].n == 0) continue;
        ret = read_exact(r, parts[i].dst, parts[i].n, err, errlen);
        if (ret < 0) return ret;
        if (ret == 0)
            RFAIL(-EBADMSG, "%s: truncated block %llu at byte offset %llu", name, bi, off);
    }
    uint64_t pos;
    if ((ret = finish_block(&bh, parts, r->counts, &r->schema, b, name, bi, off, &pos, err, errlen)) < 0) return ret;
    r->block_index++;
    r->offset += BLOCK_HEADER_BYTES + bh.payload;
    r->seen.blocks++;
    r->seen.rows += bh.rows;
    r->seen.nnz += bh.nnz;
    r->seen.positives += pos;
    return 1;
}

/* ---- the blocks of a file, for reading some of them ---- */

struct cbx_index {
    char *path;
    int fd;
    data_schema schema;
    uint64_t n;                 /* blocks */
    uint64_t *off;              /* (n) byte offset of block i's header */
    uint32_t *rows;             /* (n) */
    uint64_t *bytes;            /* (n) header and payload */
    cbx_trailer trailer;
    uint32_t *counts;
    size_t counts_cap;
};

/* pread exactly n bytes at off: 1, 0 (the file ends first), <0. */
static int pread_exact(int fd, void *dst, size_t n, uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t got = pread(fd, (uint8_t *)dst + done, n - done, (off_t)(off + done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -errno;
        if (got == 0) return 0;
        done += (size_t)got;
    }
    return 1;
}

int cbx_index_open(cbx_index **out, const char *path, char *err, size_t errlen)
{
    *out = NULL;
    cbx_reader *r;
    int ret = cbx_reader_open(&r, path, err, errlen);
    if (ret < 0) return ret;
    cbx_index *x = xcalloc(1, sizeof *x);
    x->path = xstrdup(path);
    x->fd = -1;
    schema_copy(&x->schema, &r->schema);
    uint64_t off = r->offset;
    cbx_reader_close(r);
    x->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (x->fd < 0) {
        ret = -errno;
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(x->fd, &st) < 0) {
        ret = -errno;
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        goto fail;
    }
    uint64_t size = (uint64_t)st.st_size, cap = 0, nnz = 0, rows = 0;
    for (;;) {
        uint8_t h[TRAILER_BYTES];
        unsigned long long bi = (unsigned long long)x->n, o = (unsigned long long)off;
        if ((ret = pread_exact(x->fd, h, 8, off)) <= 0) {
            if (ret == 0) snprintf(err, errlen, "%s: truncated: ends after block %llu at byte offset %llu with no trailer", path, bi, o);
            else snprintf(err, errlen, "%s: %s", path, strerror(-ret));
            ret = ret ? ret : -EBADMSG;
            goto fail;
        }
        if (memcmp(h, trailer_magic, 8) == 0) {
            if ((ret = pread_exact(x->fd, h, TRAILER_BYTES, off)) <= 0 || XXH64(h, TRAILER_BYTES - 8, 0) != get64(h + TRAILER_BYTES - 8)) {
                snprintf(err, errlen, "%s: %s trailer at byte offset %llu", path, ret < 0 ? strerror(-ret) : ret == 0 ? "truncated" : "corrupt", o);
                ret = ret < 0 ? ret : -EBADMSG;
                goto fail;
            }
            cbx_trailer *tr = &x->trailer;
            tr->blocks = get64(h + 8), tr->rows = get64(h + 16), tr->positives = get64(h + 24), tr->nnz = get64(h + 32);
            tr->stats.lines = get64(h + 40);
            for (int i = 0; i < CBX_STATS_SLOTS; i++) tr->stats.bad[i] = get64(h + 48 + 8 * i);
            if (tr->blocks != x->n || tr->rows != rows || tr->nnz != nnz) {
                snprintf(err, errlen, "%s: trailer says %llu blocks / %llu rows but the file holds %llu / %llu", path,
                         (unsigned long long)tr->blocks, (unsigned long long)tr->rows, bi, (unsigned long long)rows);
                ret = -EBADMSG;
                goto fail;
            }
            if (off + TRAILER_BYTES != size) {
                snprintf(err, errlen, "%s: unexpected bytes after the trailer at byte offset %llu", path,
                         (unsigned long long)(off + TRAILER_BYTES));
                ret = -EBADMSG;
                goto fail;
            }
            break;
        }
        if ((ret = pread_exact(x->fd, h + 8, BLOCK_HEADER_BYTES - 8, off + 8)) <= 0) {
            snprintf(err, errlen, "%s: truncated block %llu header at byte offset %llu", path, bi, o);
            ret = ret ? ret : -EBADMSG;
            goto fail;
        }
        block_head bh;
        if ((ret = parse_head(h, &x->schema, path, bi, o, &bh, err, errlen)) < 0) goto fail;
        if (off + BLOCK_HEADER_BYTES + bh.payload > size) {
            snprintf(err, errlen, "%s: truncated block %llu at byte offset %llu", path, bi, o);
            ret = -EBADMSG;
            goto fail;
        }
        if (x->n == cap) {
            cap = cap ? cap * 2 : 64;
            x->off = xrealloc(x->off, cap * sizeof *x->off);
            x->rows = xrealloc(x->rows, cap * sizeof *x->rows);
            x->bytes = xrealloc(x->bytes, cap * sizeof *x->bytes);
        }
        x->bytes[x->n] = BLOCK_HEADER_BYTES + bh.payload;
        x->off[x->n] = off;
        x->rows[x->n++] = bh.rows;
        rows += bh.rows, nnz += bh.nnz;
        off += BLOCK_HEADER_BYTES + bh.payload;
    }
    *out = x;
    return 0;
fail:
    cbx_index_close(x);
    return ret;
}

void cbx_index_close(cbx_index *x)
{
    if (!x) return;
    if (x->fd >= 0) close(x->fd);
    schema_free(&x->schema);
    free(x->path), free(x->off), free(x->rows), free(x->bytes), free(x->counts);
    free(x);
}

const data_schema *cbx_index_schema(const cbx_index *x) { return &x->schema; }
const cbx_trailer *cbx_index_trailer(const cbx_index *x) { return &x->trailer; }
uint64_t cbx_index_blocks(const cbx_index *x) { return x->n; }
uint32_t cbx_index_rows(const cbx_index *x, uint64_t i) { return x->rows[i]; }

uint64_t cbx_index_bytes(const cbx_index *x, uint64_t i) { return x->bytes[i]; }

int cbx_index_read(cbx_index *x, uint64_t i, sample_block *b, char *err, size_t errlen)
{
    CHECK(i < x->n);
    unsigned long long bi = (unsigned long long)i, off = (unsigned long long)x->off[i];
    uint8_t h[BLOCK_HEADER_BYTES];
    int ret = pread_exact(x->fd, h, sizeof h, x->off[i]);
    if (ret <= 0) RFAIL(ret ? ret : -EBADMSG, "%s: block %llu at byte offset %llu: %s", x->path, bi, off, ret ? strerror(-ret) : "truncated");
    block_head bh;
    if ((ret = parse_head(h, &x->schema, x->path, bi, off, &bh, err, errlen)) < 0) return ret;
    if (bh.rows != x->rows[i]) RFAIL(-EBADMSG, "%s: block %llu at byte offset %llu changed while read", x->path, bi, off);
    block_part parts[6];
    payload_parts(&bh, b, &x->counts, &x->counts_cap, parts);
    struct iovec iov[6];
    int n = 0;
    for (int k = 0; k < 6; k++)
        if (parts[k].n) iov[n++] = (struct iovec){ parts[k].dst, parts[k].n };
    uint64_t at = x->off[i] + BLOCK_HEADER_BYTES, left = bh.payload;
    struct iovec *v = iov;
    while (left > 0) {   /* preadv of the payload straight into the block's arrays */
        ssize_t got = preadv(x->fd, v, n, (off_t)at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) RFAIL(got < 0 ? -errno : -EBADMSG, "%s: block %llu at byte offset %llu: %s", x->path, bi, off,
                            got < 0 ? strerror(errno) : "truncated");
        at += (uint64_t)got, left -= (uint64_t)got;
        while (n > 0 && (size_t)got >= v->iov_len) got -= (ssize_t)v->iov_len, v++, n--;
        if (n > 0) v->iov_base = (uint8_t *)v->iov_base + got, v->iov_len -= (size_t)got;
    }
    uint64_t pos;
    return finish_block(&bh, parts, x->counts, &x->schema, b, x->path, bi, off, &pos, err, errlen);
}
