/*
 * source.c: text or cbx inputs as one stream of sample blocks, with bad-line accounting.
 */
#define _GNU_SOURCE
#include "source.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cbx.h"
#include "../io/stream.h"
#define XXH_INLINE_ALL
#include <xxhash.h>
#include "../io/util.h"

#define SPLIT_WINDOW 4             /* pieces a reader reads in a window */
#define SPLIT_MIN_PIECE (64u << 10)
#define SPLIT_MAX_PIECE (8u << 20)

typedef struct {
    int entered;                  /* the fields below are set */
    int whole;                    /* read whole by every reader (compressed, or not a regular file) */
    uint64_t size, unit, pieces;  /* text: bytes, a piece's bytes, pieces; cbx: blocks in pieces */
    uint64_t lines_before;        /* text: lines of the pieces of earlier windows */
    cbx_index *cbx;
} split_file;

typedef struct {
    int file, owner;
    uint64_t at;                  /* text: the piece's first byte; cbx: its block */
    uint64_t end;                 /* text: the byte after its range */
    char *buf;                    /* this reader's text piece: the bytes of its lines */
    size_t len;
    int64_t lines;                /* this reader's: its lines (text, a csv header among them) or rows (cbx) */
    int64_t rows;                 /* this reader's, once parsed: the rows of its good lines */
} split_piece;

struct split {
    int readers, me;
    split_file *f;                /* (n_paths) */
    int file;                     /* where the next window starts: file, piece */
    uint64_t pos;
    uint64_t dealt;               /* pieces dealt so far (piece i to reader i % readers) */
    split_piece *w;               /* the window */
    size_t nw;
    int whole;                    /* the window is file `file`, read whole, not yet at its end */
    uint64_t bytes_read;          /* of the inputs, by this reader */
    int fd;                       /* the text file pieces are read from now, or -1 */
    int fd_file;
};

struct data_source {
    source_opts o;
    char **paths;
    int n_paths, cur;           /* index of the open file; n_paths when done */
    line_parser *parser;
    io_stream *stream;
    cbx_reader *cbx;
    data_schema schema;         /* cbx: the files' schema */
    line_stats stats;
    uint64_t reported;
    struct {                    /* the first bad line read, named when the bad-line limit stops the run */
        int file;               /* index in paths; -1 before any */
        uint64_t lineno;
        char detail[120];
    } first_bad;
    int direct;                 /* a cbx file was read with O_DIRECT */
    int (*keep)(void *ctx, uint64_t rec);   /* the filter (source_set_filter), or NULL */
    void *keep_ctx;
    uint64_t rec;               /* records seen */
    uint64_t *recs;             /* with a filter: (rows of the last block) their record numbers */
    size_t cap_recs;
    uint64_t *bad_recs;         /* with note_bad: bad lines' record numbers */
    size_t n_bad_recs, cap_bad_recs;
    sample_block all;           /* cbx with a filter: a block as read, before the filter */
    struct split *sp;           /* reading by pieces (source_split), or NULL */
    void (*sink)(void *ctx, const char *line, size_t len);   /* source_set_line_sink, or NULL */
    void *sink_ctx;
    char *header;               /* text with a header: the first file's header line, as read */
    size_t header_len;
};

static void split_free(struct split *p);

void source_opts_default(source_opts *o)
{
    memset(o, 0, sizeof *o);
    o->max_bad_ratio = 0.001;
    o->max_line = 1u << 20;
    o->report_bad = 5;
    o->block_rows = 16384;
}

static void close_current(data_source *s)
{
    io_stream_close(s->stream);
    s->stream = NULL;
    cbx_reader_close(s->cbx);
    s->cbx = NULL;
}

/* Open file i (text: and read its header line if the format has one). */
static int open_file(data_source *s, int i, char *err, size_t errlen)
{
    close_current(s);
    s->cur = i;
    if (i >= s->n_paths) return 0;
    const char *path = s->paths[i];
    int ret;
    if (s->o.fmt == FMT_CBX) {
        ret = cbx_reader_open(&s->cbx, path, err, errlen);
        if (ret < 0) return ret;
        s->direct |= cbx_reader_is_direct(s->cbx);
        if (i == 0) {
            schema_copy(&s->schema, cbx_reader_schema(s->cbx));
        } else if (!schema_equal(&s->schema, cbx_reader_schema(s->cbx))) {
            snprintf(err, errlen, "%s: schema differs from %s's", path, s->paths[0]);
            return -EINVAL;
        }
        return 0;
    }
    if (cbx_file_is_cbx(path)) {   /* read as text it is garbage, or worse, a few lines that parse */
        snprintf(err, errlen, "%s: a cbx file among %s text inputs; give cbx files alone", path, parse_format_name(s->o.fmt));
        return -EINVAL;
    }
    ret = io_stream_open(&s->stream, path, 0, err, errlen);
    if (ret < 0) return ret;
    io_stream_set_max_line(s->stream, s->o.max_line);
    if (!parser_has_header(s->parser)) return 0;
    io_line line;
    ret = io_stream_next_line(s->stream, &line);
    if (ret < 0) {
        snprintf(err, errlen, "%s", io_stream_error(s->stream));
        return ret;
    }
    if (ret == 0) {
        snprintf(err, errlen, "%s: empty file; csv wants a header line", path);
        return -EINVAL;
    }
    if (line.overlong) {
        snprintf(err, errlen, "%s:1: header line too long", path);
        return -EINVAL;
    }
    char msg[400];
    ret = parser_header(s->parser, line.ptr, line.len, msg, sizeof msg);
    if (ret < 0) {
        snprintf(err, errlen, "%s:1: %s", path, msg);
        return ret;
    }
    if (!s->header) {
        s->header = xmalloc(line.len + 1);
        memcpy(s->header, line.ptr, line.len);
        s->header[s->header_len = line.len] = 0;
    }
    return 0;
}

int source_open(data_source **out, char *const *paths, int n, const source_opts *o, char *err,
                size_t errlen)
{
    *out = NULL;
    data_source *s = xcalloc(1, sizeof *s);
    s->o = *o;
    s->first_bad.file = -1;
    block_init(&s->all, 0);
    if (s->o.block_rows == 0) s->o.block_rows = 16384;
    int ret = io_expand_paths(paths, n, &s->paths, err, errlen);
    if (ret < 0) {
        block_free(&s->all);
        free(s);
        return ret;
    }
    s->n_paths = ret;
    /* cbx files say what they are: read as cbx whatever text format was named (a model trained on
     * text, evaluated on its converted data) */
    if (s->o.fmt != FMT_CBX && cbx_file_is_cbx(s->paths[0])) s->o.fmt = FMT_CBX;
    if (s->o.fmt == FMT_NONE) {
        if (!cbx_file_is_cbx(s->paths[0])) {
            snprintf(err, errlen, "%s: not a cbx file; say which text format it is with --format", s->paths[0]);
            source_close(s);
            return -EINVAL;
        }
        s->o.fmt = FMT_CBX;
    }
    if (s->o.fmt != FMT_CBX) {
        parser_opts po = { s->o.fmt, s->o.num, s->o.schema_spec, s->o.field_offsets, s->o.n_offsets, s->o.unlabeled,
                           s->o.id_column, s->o.order };
        ret = parser_create(&s->parser, &po, err, errlen);
        if (ret < 0) {
            source_close(s);
            return ret;
        }
    }
    ret = open_file(s, 0, err, errlen);
    if (ret < 0) {
        source_close(s);
        return ret;
    }
    *out = s;
    return 0;
}

void source_close(data_source *s)
{
    if (!s) return;
    close_current(s);
    parser_destroy(s->parser);
    schema_free(&s->schema);
    io_free_paths(s->paths, s->n_paths);
    free(s->recs);
    free(s->bad_recs);
    free(s->header);
    block_free(&s->all);
    split_free(s->sp);
    free(s);
}

void source_set_filter(data_source *s, int (*keep)(void *ctx, uint64_t rec), void *ctx)
{
    s->keep = keep;
    s->keep_ctx = ctx;
}

void source_set_line_sink(data_source *s, void (*sink)(void *ctx, const char *line, size_t len), void *ctx)
{
    s->sink = sink;
    s->sink_ctx = ctx;
}

const char *source_header_line(const data_source *s, size_t *len)
{
    *len = s->header_len;
    return s->header;
}

const uint64_t *source_block_records(const data_source *s) { return s->recs; }
uint64_t source_records(const data_source *s) { return s->rec; }

const uint64_t *source_bad_records(const data_source *s, size_t *n)
{
    *n = s->n_bad_recs;
    return s->bad_recs;
}

/* Row `row` of the block being filled is record rec. */
static void note_record(data_source *s, size_t row, uint64_t rec)
{
    if (row >= s->cap_recs) s->recs = xrealloc(s->recs, (s->cap_recs = s->cap_recs * 2 + 1024) * sizeof *s->recs);
    s->recs[row] = rec;
}

/* A cbx block through the filter: the kept rows of s->all into b. */
static void filter_cbx(data_source *s, sample_block *b)
{
    if (b->n_dense != s->all.n_dense) {
        block_free(b);
        block_init(b, s->all.n_dense);
    }
    block_clear(b);
    uint64_t base = s->rec;
    for (size_t r = 0; r < s->all.rows;) {
        size_t e = r + 1;
        int k = s->keep(s->keep_ctx, base + r);
        while (e < s->all.rows && s->keep(s->keep_ctx, base + e) == k) e++;
        if (k) {
            for (size_t i = r; i < e; i++) note_record(s, b->rows + (i - r), base + i);
            block_append(b, &s->all, r, e);
        }
        r = e;
    }
    s->rec += s->all.rows;
}

static uint64_t bad_total(const line_stats *st)
{
    uint64_t n = 0;
    for (int i = 0; i < CBX_STATS_SLOTS; i++) n += st->bad[i];
    return n;
}

static int check_ratio(data_source *s, int at_end, char *err, size_t errlen)
{
    uint64_t bad = bad_total(&s->stats), lines = s->stats.lines;
    if (lines == 0 || (!at_end && lines < 10000)) return 0;
    if ((double)bad <= s->o.max_bad_ratio * (double)lines) return 0;
    int at = s->cur < s->n_paths ? s->cur : s->n_paths - 1;   /* the file being read when the limit tripped */
    /* the first bad line goes with it: the run may stop before a single one was printed (training's
     * first look at its input prints none, and --quiet none at all) */
    char first[256] = "";
    if (s->first_bad.file >= 0) {
        if (s->first_bad.file == at)
            snprintf(first, sizeof first, " (the first: line %llu: %s)", (unsigned long long)s->first_bad.lineno,
                     s->first_bad.detail);
        else
            snprintf(first, sizeof first, " (the first: %s:%llu: %s)", s->paths[s->first_bad.file],
                     (unsigned long long)s->first_bad.lineno, s->first_bad.detail);
    }
    snprintf(err, errlen, "%s: too many bad lines: %llu of %llu (%.3g%%) %sexceed --max-bad-ratio %g%s; "
             "fix the input or raise the limit", s->paths[at],
             (unsigned long long)bad, (unsigned long long)lines, 100.0 * (double)bad / (double)lines,
             s->n_paths > 1 ? "of the inputs read so far " : "", s->o.max_bad_ratio, first);
    return -EINVAL;
}

/* The bad lines this process has printed (file and line): a later epoch reads the same files
 * again, and its first five bad lines were the first epoch's, printed once more each epoch. */
static struct {
    pthread_mutex_t mu;
    uint64_t seen[256];   /* XXH64 of the path, xor the line number's mix */
    int n;
} printed = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* Whether this process printed that line before; remembered from now on when not. */
static int printed_before(const char *path, uint64_t lineno)
{
    uint64_t h = XXH64(path, strlen(path), 0) ^ XXH64(&lineno, sizeof lineno, 1);
    pthread_mutex_lock(&printed.mu);
    int i = 0;
    while (i < printed.n && printed.seen[i] != h) i++;
    int before = i < printed.n;
    if (!before && printed.n < (int)(sizeof printed.seen / sizeof printed.seen[0])) printed.seen[printed.n++] = h;
    pthread_mutex_unlock(&printed.mu);
    return before;
}

static void count_bad(data_source *s, int reason, uint64_t lineno, uint64_t rec, const char *detail)
{
    s->stats.bad[reason]++;
    if (s->first_bad.file < 0) {
        s->first_bad.file = s->cur;
        s->first_bad.lineno = lineno;
        snprintf(s->first_bad.detail, sizeof s->first_bad.detail, "%s", detail);
    }
    if (s->o.note_bad) {
        if (s->n_bad_recs == s->cap_bad_recs)
            s->bad_recs = xrealloc(s->bad_recs, (s->cap_bad_recs = s->cap_bad_recs * 2 + 64) * sizeof *s->bad_recs);
        s->bad_recs[s->n_bad_recs++] = rec;
    }
    if (s->o.report_bad >= 0 && s->reported < (uint64_t)s->o.report_bad) {
        if (!printed_before(s->paths[s->cur], lineno))
            fprintf(stderr, "%s:%llu: %s\n", s->paths[s->cur], (unsigned long long)lineno, detail);
        s->reported++;
    }
}

/* One line (record rec, line lineno of file s->cur) into b, or counted as bad: 0, or <0 with err
 * (the bad-line limit). */
static int take_line(data_source *s, const io_line *line, uint64_t lineno, uint64_t rec, sample_block *b, char *err,
                     size_t errlen)
{
    s->stats.lines++;
    if (line->overlong) {
        char d[96];
        snprintf(d, sizeof d, "line too long: over %zu bytes", s->o.max_line);
        count_bad(s, BAD_OVERLONG, lineno, rec, d);
        return check_ratio(s, 0, err, errlen);
    }
    size_t rows = b->rows;
    int r = parser_parse(s->parser, line->ptr, line->len, b);
    if ((s->keep || s->sp) && b->rows > rows) note_record(s, rows, rec);
    if (r == BAD_OK) {
        if (s->sink) s->sink(s->sink_ctx, line->ptr, line->len);
        return 0;
    }
    count_bad(s, r, lineno, rec, parser_detail(s->parser));
    /* judged as it goes: input that is all bad stops at 10,000 lines, not at its end */
    return check_ratio(s, 0, err, errlen);
}

static int next_cbx(data_source *s, sample_block *b, char *err, size_t errlen)
{
    while (s->cur < s->n_paths) {
        int ret = cbx_reader_next(s->cbx, s->keep ? &s->all : b, err, errlen);
        if (ret < 0) return ret;
        if (ret > 0) {
            if (!s->keep) {
                s->rec += b->rows;
                return ret;
            }
            filter_cbx(s, b);
            if (b->rows) return ret;
            continue;   /* none of this block's rows kept */
        }
        const cbx_trailer *t = cbx_reader_trailer(s->cbx);
        s->stats.lines += t->stats.lines;
        for (int i = 0; i < CBX_STATS_SLOTS; i++) s->stats.bad[i] += t->stats.bad[i];
        ret = open_file(s, s->cur + 1, err, errlen);
        if (ret < 0) return ret;
    }
    return 0;
}

static void whole_done(data_source *s);
static int split_done(const data_source *s);

int source_read_all(data_source *s, sample_block *all, char *err, size_t errlen)
{
    sample_block b;
    block_init(&b, source_schema(s)->n_dense);
    block_init(all, source_schema(s)->n_dense);
    int ret;
    while ((ret = source_next(s, &b, err, errlen)) > 0) block_append(all, &b, 0, b.rows);
    block_free(&b);
    if (ret < 0) block_free(all);
    return ret;
}

int source_next(data_source *s, sample_block *b, char *err, size_t errlen)
{
    if (s->sp && !s->sp->whole) return 0;   /* by pieces: a whole file's window only */
    if (s->o.fmt == FMT_CBX) return next_cbx(s, b, err, errlen);
    const data_schema *sc = parser_schema(s->parser);
    if (b->n_dense != sc->n_dense) {
        block_free(b);
        block_init(b, sc->n_dense);
    }
    block_clear(b);
    while (s->cur < s->n_paths && b->rows < s->o.block_rows) {
        io_line line;
        int ret = io_stream_next_line(s->stream, &line);
        if (ret < 0) {
            snprintf(err, errlen, "%s", io_stream_error(s->stream));
            return ret;
        }
        if (ret == 0) {
            if (s->sp) {   /* a whole file in a window of its own: the window ends with it */
                whole_done(s);
                break;
            }
            ret = open_file(s, s->cur + 1, err, errlen);
            if (ret < 0) return ret;
            continue;
        }
        uint64_t rec = s->rec++;
        if (s->keep && !s->keep(s->keep_ctx, rec)) continue;
        if ((ret = take_line(s, &line, line.lineno, rec, b, err, errlen)) < 0) return ret;
    }
    int ret = check_ratio(s, s->sp ? split_done(s) : s->cur >= s->n_paths, err, errlen);
    if (ret < 0) return ret;
    return b->rows > 0 ? 1 : 0;
}

const data_schema *source_schema(const data_source *s)
{
    return s->parser ? parser_schema(s->parser) : &s->schema;
}

const line_stats *source_stats(const data_source *s) { return &s->stats; }
data_format source_format(const data_source *s) { return s->o.fmt; }
int source_is_direct(const data_source *s) { return s->direct; }

/* ---- reading by pieces (source_split) ---- */

static void split_free_window(struct split *p)
{
    for (size_t i = 0; i < p->nw; i++) free(p->w[i].buf);
    p->nw = 0;
}

static void split_free(struct split *p)
{
    if (!p) return;
    split_free_window(p);
    free(p->w);
    if (p->fd >= 0) close(p->fd);
    free(p->f);   /* cbx indexes are closed as windows pass their files */
    free(p);
}

void source_split(data_source *s, int readers, int me)
{
    CHECK(!s->sp && readers >= 1 && me >= 0 && me < readers && s->rec == 0);
    close_current(s);   /* files are opened as windows reach them */
    struct split *p = xcalloc(1, sizeof *p);
    p->readers = readers, p->me = me;
    p->f = xcalloc((size_t)s->n_paths, sizeof *p->f);
    p->w = xcalloc((size_t)SPLIT_WINDOW * (size_t)readers, sizeof *p->w);
    p->fd = -1;
    s->sp = p;
}

uint64_t source_bytes_read(const data_source *s) { return s->sp ? s->sp->bytes_read : 0; }

static int split_done(const data_source *s) { return s->sp->file >= s->n_paths && !s->sp->whole; }

/* Past file i (its last piece dealt, or read whole). */
static void split_next_file(data_source *s)
{
    struct split *p = s->sp;
    p->file++;
    p->pos = 0;
}

static void whole_done(data_source *s)
{
    close_current(s);
    s->sp->whole = 0;
    split_next_file(s);
}

/* What file i is and how it is cut; a csv file's header read (every reader). */
static int enter_file(data_source *s, int i, char *err, size_t errlen)
{
    split_file *f = &s->sp->f[i];
    const char *path = s->paths[i];
    f->entered = 1;
    if (s->o.fmt == FMT_CBX) {
        int ret = cbx_index_open(&f->cbx, path, err, errlen);
        if (ret < 0) return ret;
        if (i == 0) {
            schema_free(&s->schema);
            schema_copy(&s->schema, cbx_index_schema(f->cbx));
        } else if (!schema_equal(&s->schema, cbx_index_schema(f->cbx))) {
            snprintf(err, errlen, "%s: schema differs from %s's", path, s->paths[0]);
            return -EINVAL;
        }
        f->pieces = cbx_index_blocks(f->cbx);
        return 0;
    }
    if (cbx_file_is_cbx(path)) {
        snprintf(err, errlen, "%s: a cbx file among %s text inputs; give cbx files alone", path, parse_format_name(s->o.fmt));
        return -EINVAL;
    }
    struct stat st;
    uint8_t magic[4];
    if (s->sp->readers > 1 && (stat(path, &st) != 0 || !S_ISREG(st.st_mode))) {
        snprintf(err, errlen, "%s: not a regular file: several processes cannot each read it (write it to a file first)",
                 path);
        return -EINVAL;
    }
    int fd = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    ssize_t got = fd >= 0 ? pread(fd, magic, sizeof magic, 0) : -1;
    if (fd >= 0) close(fd);
    f->whole = got < 0 || io_bytes_compression(magic, (size_t)got) != IO_COMP_NONE;
    if (f->whole) return 0;   /* opened (and its header read) when its window comes */
    f->size = (uint64_t)st.st_size;
    uint64_t u = f->size / ((uint64_t)s->sp->readers * 8);
    u = u < SPLIT_MIN_PIECE ? SPLIT_MIN_PIECE : u > SPLIT_MAX_PIECE ? SPLIT_MAX_PIECE : (u + 4095) & ~(uint64_t)4095;
    f->unit = u;
    f->pieces = (f->size + u - 1) / u;
    if (!parser_has_header(s->parser)) return 0;
    int ret = open_file(s, i, err, errlen);   /* the header, as one reader reads it */
    close_current(s);
    return ret;
}

int source_window_next(data_source *s, source_window *w, char *err, size_t errlen)
{
    struct split *p = s->sp;
    CHECK(p && !p->whole);
    split_free_window(p);
    for (int i = 0; i < p->file && i < s->n_paths; i++) {   /* files behind the window */
        cbx_index_close(p->f[i].cbx);
        p->f[i].cbx = NULL;
    }
    memset(w, 0, sizeof *w);
    size_t cap = (size_t)SPLIT_WINDOW * (size_t)p->readers;
    while (p->file < s->n_paths && p->nw < cap) {
        split_file *f = &p->f[p->file];
        int ret;
        if (!f->entered && (ret = enter_file(s, p->file, err, errlen)) < 0) return ret;
        if (f->whole) {
            if (p->nw) break;   /* its window comes after this one */
            if ((ret = open_file(s, p->file, err, errlen)) < 0) return ret;
            p->whole = w->whole = 1;
            return 1;
        }
        while (p->pos < f->pieces && p->nw < cap) {
            split_piece *q = &p->w[p->nw++];
            memset(q, 0, sizeof *q);
            q->file = p->file;
            q->owner = (int)(p->dealt++ % (uint64_t)p->readers);
            if (s->o.fmt == FMT_CBX) {
                q->at = p->pos;
            } else {
                q->at = p->pos * f->unit;
                q->end = q->at + f->unit < f->size ? q->at + f->unit : f->size;
            }
            p->pos++;
        }
        if (p->pos == f->pieces) split_next_file(s);   /* its cbx index is closed with the next window */
    }
    w->pieces = p->nw;
    return p->nw > 0;
}

int source_window_owner(const data_source *s, size_t i) { return s->sp->w[i].owner; }

uint64_t source_window_digest(const data_source *s)
{
    const struct split *p = s->sp;
    uint64_t h = XXH64(&p->whole, sizeof p->whole, p->nw);
    for (size_t i = 0; i < p->nw; i++) {
        uint64_t v[4] = { (uint64_t)p->w[i].file, p->w[i].at, p->w[i].end, (uint64_t)p->w[i].owner };
        h = XXH64(v, sizeof v, h);
    }
    return p->whole ? XXH64(&p->file, sizeof p->file, h) : h;
}

void source_window_rows(const data_source *s, int64_t *rows)
{
    const struct split *p = s->sp;
    for (size_t i = 0; i < p->nw; i++) rows[i] = p->w[i].owner == p->me ? p->w[i].rows : 0;
}

/* The bytes of a text piece's lines into q->buf: the lines that start in [at, end), the last read on
 * to its end (or to past max_line, enough to know it is overlong); their count in q->lines. */
static int read_text_piece(data_source *s, split_piece *q, char *err, size_t errlen)
{
    struct split *p = s->sp;
    split_file *f = &p->f[q->file];
    const char *path = s->paths[q->file];
    if (p->fd_file != q->file || p->fd < 0) {
        if (p->fd >= 0) close(p->fd);
        p->fd = open(path, O_RDONLY | O_CLOEXEC);
        p->fd_file = q->file;
        if (p->fd < 0) {
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
            return -errno;
        }
    }
    uint64_t from = q->at ? q->at - 1 : 0, to = q->end + 4096 < f->size ? q->end + 4096 : f->size;
    size_t cap = (size_t)(to - from), len = 0, more = 64u << 10;
    char *b = xmalloc(cap + 1);
    for (;;) {   /* [from, to) into b[len ..) */
        while (from + len < to) {
            ssize_t got = pread(p->fd, b + len, (size_t)(to - from - len), (off_t)(from + len));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                int e = got < 0 ? errno : EIO;
                snprintf(err, errlen, "%s: read error at byte %llu: %s", path, (unsigned long long)(from + len),
                         got < 0 ? strerror(e) : "the file got shorter while read");
                free(b);
                return -e;
            }
            len += (size_t)got;
            p->bytes_read += (uint64_t)got;
        }
        /* the first line start in the piece, and the last */
        size_t first = 0;
        if (q->at) {
            if (b[0] == '\n') {
                first = 1;
            } else {
                char *nl = memchr(b, '\n', (size_t)(q->end - from) - 1);
                first = nl ? (size_t)(nl - b) + 1 : (size_t)(q->end - from);
            }
        }
        size_t stop = (size_t)(q->end - from);   /* line starts are below it */
        int64_t lines = 0;
        size_t last = first;
        for (size_t at = first; at < stop;) {
            lines++;
            last = at;
            char *nl = memchr(b + at, '\n', stop - at);
            if (!nl) break;
            at = (size_t)(nl - b) + 1;
        }
        if (lines == 0) {
            q->lines = 0;
            free(b);
            return 0;
        }
        char *nl = memchr(b + last, '\n', len - last);
        size_t end = nl ? (size_t)(nl - b) + 1 : len;
        if (nl || from + len == f->size || len - last > s->o.max_line + 2) {
            q->buf = b;
            q->len = end - first;
            memmove(b, b + first, q->len);
            q->lines = lines;
            return 0;
        }
        /* the last line goes on past what was read: read on */
        to = to + more < f->size ? to + more : f->size;
        more *= 2;
        if ((size_t)(to - from) > cap) b = xrealloc(b, (cap = (size_t)(to - from)) + 1);
    }
}

int source_window_read(data_source *s, int64_t *counts, char *err, size_t errlen)
{
    struct split *p = s->sp;
    for (size_t i = 0; i < p->nw; i++) {
        split_piece *q = &p->w[i];
        counts[i] = 0;
        if (q->owner != p->me) continue;
        if (s->o.fmt == FMT_CBX) {
            q->lines = cbx_index_rows(p->f[q->file].cbx, q->at);
            p->bytes_read += cbx_index_bytes(p->f[q->file].cbx, q->at);
        } else {
            int ret = read_text_piece(s, q, err, errlen);
            if (ret < 0) return ret;
        }
        counts[i] = q->lines;
    }
    return 0;
}

int source_window_parse(data_source *s, const int64_t *counts, sample_block *b, char *err, size_t errlen)
{
    struct split *p = s->sp;
    uint32_t nd = source_schema(s)->n_dense;
    if (b->n_dense != nd) {
        block_free(b);
        block_init(b, nd);
    }
    block_clear(b);
    int header = s->o.fmt != FMT_CBX && parser_has_header(s->parser), ret = 0;
    for (size_t i = 0; i < p->nw && ret == 0; i++) {
        split_piece *q = &p->w[i];
        split_file *f = &p->f[q->file];
        int head = header && q->at == 0 && counts[i] > 0;   /* the piece holding a csv file's header line */
        uint64_t records = (uint64_t)counts[i] - (uint64_t)head, line0 = f->lines_before, rec = s->rec;
        f->lines_before += (uint64_t)counts[i];
        s->rec += records;   /* every reader numbers every piece's records alike */
        if (q->owner != p->me) continue;
        s->cur = q->file;   /* for the messages */
        size_t rows0 = b->rows;
        if (s->o.fmt == FMT_CBX) {
            if ((ret = cbx_index_read(f->cbx, q->at, &s->all, err, errlen)) < 0) break;
            CHECK(s->all.rows == records);
            for (size_t r = 0; r < s->all.rows; r++) note_record(s, b->rows + r, rec + r);
            block_append(b, &s->all, 0, s->all.rows);
            q->rows = (int64_t)s->all.rows;
            if (p->me == 0 && q->at + 1 == f->pieces) {   /* the conversion's line counts, once over the readers */
                const cbx_trailer *t = cbx_index_trailer(f->cbx);
                s->stats.lines += t->stats.lines;
                for (int k = 0; k < CBX_STATS_SLOTS; k++) s->stats.bad[k] += t->stats.bad[k];
            }
            continue;
        }
        io_stream *ms;
        if ((ret = io_stream_open_mem_plain(&ms, q->buf, q->len, s->paths[q->file])) < 0) {
            snprintf(err, errlen, "%s: cannot read", s->paths[q->file]);
            break;
        }
        io_stream_set_max_line(ms, s->o.max_line);
        if (q->at != 0) io_stream_mid_file(ms);
        io_line line;
        int got;
        uint64_t seen = 0;
        while (ret == 0 && (got = io_stream_next_line(ms, &line)) > 0) {
            seen++;
            if (head && line.lineno == 1) continue;   /* read by every reader when the file was entered */
            ret = take_line(s, &line, line0 + line.lineno, rec++, b, err, errlen);
        }
        if (ret == 0 && got < 0) {
            snprintf(err, errlen, "%s", io_stream_error(ms));
            ret = got;
        }
        CHECK(ret < 0 || seen == (uint64_t)counts[i]);   /* the lines counted are the lines read */
        q->rows = (int64_t)(b->rows - rows0);
        io_stream_close(ms);
        free(q->buf);
        q->buf = NULL;
    }
    if (ret < 0) return ret;
    return check_ratio(s, split_done(s), err, errlen);
}

/* ---- what a file looks like, for messages ---- */

static int all_numeric(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789+-.eE", p[i])) return 0;
    return n > 0;
}

data_format source_sniff(const char *path, char *out, size_t n)
{
    data_format guess = FMT_NONE;
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {   /* a pipe is read once: never looked at here */
        snprintf(out, n, "%s", stat(path, &st) != 0 ? "missing" : "a stream (not looked at)");
        return FMT_NONE;
    }
    if (cbx_file_is_cbx(path)) {
        data_format f = cbx_file_source(path);
        snprintf(out, n, "a cbx file%s%s", f ? " converted from " : "", f ? parse_format_name(f) : "");
        return FMT_CBX;
    }
    char err[300];
    io_stream *s;
    if (io_stream_open(&s, path, 0, err, sizeof err) < 0) {
        snprintf(out, n, "unreadable (%s)", err);
        return FMT_NONE;
    }
    io_line line;
    int r = io_stream_next_line(s, &line);
    if (r <= 0 || line.overlong) {
        snprintf(out, n, r == 0 ? "empty" : r < 0 ? "unreadable" : "a file whose first line is too long to be data");
        io_stream_close(s);
        return FMT_NONE;
    }
    const char *p = line.ptr;
    size_t len = line.len, tabs = 0, commas = 0, colons = 0, spaces = 0;
    for (size_t i = 0; i < len; i++) tabs += p[i] == '\t', commas += p[i] == ',', colons += p[i] == ':', spaces += p[i] == ' ';
    if (tabs) {
        snprintf(out, n, "tab-separated, %zu columns (criteo has 40 with the label, 39 without)", tabs + 1);
        guess = FMT_CRITEO;
    } else if (commas) {
        const char *c = memchr(p, ',', len);
        int header = !all_numeric(p, (size_t)(c - p));
        guess = FMT_CSV;
        snprintf(out, n, "csv, %zu columns%s%.*s ...)", commas + 1, header ? " under a header (" : " (first value ",
                 (int)((size_t)(c - p) < 40 ? (size_t)(c - p) : 40), p);
    } else if (colons && spaces) {
        size_t per = 0;   /* colons in the first feature: 1 for libsvm (index:value), 2 for libffm */
        const char *f = memchr(p, ' ', len) + 1;
        while (f < p + len && *f == ' ') f++;
        for (const char *q = f; q < p + len && *q != ' '; q++) per += *q == ':';
        snprintf(out, n, per >= 2 ? "libffm (label field:index:value ...)" : "libsvm (label index:value ...)");
        guess = per >= 2 ? FMT_LIBFFM : FMT_LIBSVM;
    } else {
        snprintf(out, n, "one column per line (\"%.*s\")", (int)(len < 40 ? len : 40), p);
    }
    io_stream_close(s);
    return guess;
}
