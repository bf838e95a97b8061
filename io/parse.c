/*
 * parse.c: criteo, libsvm, libffm and csv line parsers.
 *
 * Every parser first checks the line's bytes (NUL, UTF-8), then walks it once, appending the row's
 * sparse entries to the block as it goes; on a bad token it rolls the block back to the row start.
 * Tokens are hashed in place, never copied, except csv's quoted fields (unescaped into `tok`).
 */
#define _GNU_SOURCE
#include "parse.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "util.h"

typedef enum { ROLE_CAT = 0, ROLE_NUM, ROLE_LABEL, ROLE_SKIP, ROLE_ID } col_role;

struct line_parser {
    parser_opts o;
    uint64_t *offsets;      /* libsvm field offsets (owned copy) */
    data_schema schema;
    /* column layout (criteo, csv) */
    int n_cols;
    uint8_t *role;          /* (n_cols) col_role */
    uint32_t *field;        /* (n_cols) field id of a CAT/NUM column */
    char **col_names;       /* (n_cols) csv header names */
    int have_header;
    char *tok;              /* csv unescape buffer */
    size_t tok_cap;
    char *id;               /* the row's id (--id-column), copied out of the line */
    size_t id_len, id_cap;
    char detail[256];
};

static const char *reason_keys[BAD_COUNT] = {
    "ok", "columns", "number", "overlong", "utf8", "nul", "label", "feature", "field",
};
static const char *reason_texts[BAD_COUNT] = {
    "ok", "wrong column count", "not a number", "line too long", "invalid UTF-8", "NUL byte",
    "bad label", "malformed feature", "field id out of range",
};

const char *parse_bad_reason_key(int r) { return r >= 0 && r < BAD_COUNT ? reason_keys[r] : "?"; }
const char *parse_bad_reason_text(int r) { return r >= 0 && r < BAD_COUNT ? reason_texts[r] : "?"; }

data_format parse_format_from_name(const char *name)
{
    if (!strcmp(name, "criteo")) return FMT_CRITEO;
    if (!strcmp(name, "libsvm") || !strcmp(name, "libfm")) return FMT_LIBSVM;
    if (!strcmp(name, "libffm")) return FMT_LIBFFM;
    if (!strcmp(name, "csv")) return FMT_CSV;
    if (!strcmp(name, "cbx")) return FMT_CBX;
    return FMT_NONE;
}

const char *parse_format_name(data_format f)
{
    static const char *names[] = { "none", "criteo", "libsvm", "libffm", "csv", "cbx" };
    return f <= FMT_CBX ? names[f] : "?";
}

static int bad(line_parser *p, int reason, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(line_parser *p, int reason, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(p->detail, sizeof p->detail, "%s: ", reason_texts[reason]);
    vsnprintf(p->detail + n, sizeof p->detail - (size_t)n, fmt, ap);
    va_end(ap);
    return reason;
}

/* Show at most 40 bytes of a token in a message, replacing what does not print. */
static const char *shown(const char *s, size_t n, char *buf)
{
    size_t k = n < 40 ? n : 40, j = 0;
    for (size_t i = 0; i < k; i++) buf[j++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    if (n > k) buf[j++] = '.', buf[j++] = '.', buf[j++] = '.';
    buf[j] = 0;
    return buf;
}

uint64_t parse_feature_key(const char *tok, size_t len, uint32_t field)
{
    return XXH3_64bits_withSeed(tok, len, field);
}

int64_t parse_num_bucket(double x)
{
    if (x > 2) {
        double l = log(x);
        return (int64_t)floor(l * l);
    }
    if (x < -1e15) x = -1e15;
    return (int64_t)floor(x);
}

int parse_number(const char *s, size_t n, double *out)
{
    size_t i = 0;
    int neg = 0;
    if (n == 0) return -1;
    if (s[0] == '-' || s[0] == '+') {
        neg = s[0] == '-';
        i = 1;
    }
    if (i < n && n - i <= 18) {   /* fast path: plain integers */
        uint64_t v = 0;
        size_t j = i;
        while (j < n && s[j] >= '0' && s[j] <= '9') v = v * 10 + (uint64_t)(s[j++] - '0');
        if (j == n) {
            *out = neg ? -(double)v : (double)v;
            return 0;
        }
    }
    if (n >= 64) return -1;
    char buf[64];
    for (size_t j = 0; j < n; j++) {
        char c = s[j];
        if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+'))
            return -1;
        buf[j] = c;
    }
    buf[n] = 0;
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (end != buf + n || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int utf8_valid(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k;
        unsigned min;
        if (c >= 0xc2 && c <= 0xdf) k = 1, min = 0x80;
        else if (c >= 0xe0 && c <= 0xef) k = 2, min = 0x800;
        else if (c >= 0xf0 && c <= 0xf4) k = 3, min = 0x10000;
        else return 0;
        if (n - i < k + 1) return 0;   /* sequence cut off by the line end */
        unsigned cp = c & (0x3f >> k);
        for (size_t j = 1; j <= k; j++) {
            unsigned d = s[i + j];
            if ((d & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (d & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += k + 1;
    }
    return 1;
}

int parse_check_line_bytes(const char *s, size_t n)
{
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t zero = 0, high = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        zero |= (w - ones) & ~w & highs;
        high |= w & highs;
    }
    for (; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == 0) zero = 1;
        high |= c & 0x80;
    }
    if (zero && memchr(s, 0, n)) return BAD_NUL;
    if (high && !utf8_valid((const unsigned char *)s, n)) return BAD_UTF8;
    return BAD_OK;
}

/* Label from a token: 1, 0, -1 or +1 (also as 1.0 etc.); returns 0 or 1, or -1 if bad. */
static int parse_label(const char *s, size_t n)
{
    if (n == 1) {
        if (s[0] == '1') return 1;
        if (s[0] == '0') return 0;
    }
    double v;
    if (parse_number(s, n, &v) < 0) return -1;
    if (v == 1) return 1;
    if (v == 0 || v == -1) return 0;
    return -1;
}

/* log1p of the small non-negative integers that most count columns hold, computed once with
 * log1p itself, so the table changes speed, never values. */
#define LOG1P_TABLE 4096
static float log1p_table[LOG1P_TABLE];
static pthread_once_t log1p_once = PTHREAD_ONCE_INIT;
static void log1p_table_init(void)
{
    for (int i = 0; i < LOG1P_TABLE; i++) log1p_table[i] = (float)log1p((double)i);
}

static float dense_log1p(double x)
{
    if (x <= 0) return 0.0f;
    if (x < LOG1P_TABLE && x == (double)(int)x) return log1p_table[(int)x];
    return (float)log1p(x);
}

/* A num column's value into the row: dense slot (NUM_LOG) or a bucket key (NUM_BUCKET). */
static int put_num(line_parser *p, sample_block *b, float *dense, uint32_t field, const char *s,
                   size_t n)
{
    if (n == 0) return BAD_OK;   /* missing */
    double x;
    char buf[48];
    if (parse_number(s, n, &x) < 0)
        return bad(p, BAD_NUMBER, "%s '%s'", p->schema.names[field], shown(s, n, buf));
    if (p->o.num == NUM_LOG) {
        dense[p->schema.dense_slot[field]] = dense_log1p(x);
        return BAD_OK;
    }
    int len = snprintf(buf, sizeof buf, "%lld", (long long)parse_num_bucket(x));
    b->key[b->nnz] = parse_feature_key(buf, (size_t)len, field);
    b->field[b->nnz] = (uint16_t)field;
    b->val[b->nnz] = 1.0f;
    b->nnz++;
    return BAD_OK;
}

static void put_cat(sample_block *b, uint32_t field, const char *s, size_t n)
{
    if (n == 0) return;   /* missing */
    b->key[b->nnz] = parse_feature_key(s, n, field);
    b->field[b->nnz] = (uint16_t)field;
    b->val[b->nnz] = 1.0f;
    b->nnz++;
}

static void row_begin(sample_block *b, size_t nnz)
{
    block_reserve(b, 1, nnz);
    if (b->n_dense) memset(b->dense + b->rows * b->n_dense, 0, b->n_dense * sizeof(float));
}

/* label: 0, 1, or -1 for a row without one (NaN) */
static int row_end(sample_block *b, int label)
{
    b->label[b->rows] = label < 0 ? NAN : (float)label;
    b->rows++;
    b->row_ptr[b->rows] = b->nnz;
    return BAD_OK;
}

/* Columns of a line of unquoted fields. */
static int columns_of(const char *s, size_t n, char sep)
{
    int cols = 1;
    for (const char *q = memchr(s, sep, n); q; q = memchr(q + 1, sep, (size_t)(s + n - q - 1))) cols++;
    return cols;
}

/* A criteo line of 39 columns where labels are wanted. */
static int unlabeled_line(line_parser *p)
{
    return bad(p, BAD_COLUMNS, "%d columns: a line without its label (ctrbox predict scores such lines; train and eval "
               "need the label first)", p->n_cols - 1);
}

/* Parse a row of separated columns (criteo, csv without quotes in the fast path). */
static int parse_columns(line_parser *p, const char *s, size_t n, sample_block *b, char sep)
{
    char buf[48];
    size_t nnz0 = b->nnz;
    row_begin(b, (size_t)p->n_cols);
    float *dense = b->dense + b->rows * b->n_dense;
    const char *c = s, *e = s + n;
    int label = -1, ret;
    /* criteo for scoring: a line one column short has no label (its first column) */
    int want = p->n_cols, no_label = 0;
    if (p->o.unlabeled && p->o.fmt == FMT_CRITEO && columns_of(s, n, sep) == p->n_cols - 1) no_label = 1, want--;
    for (int col = no_label, got = 0; col < p->n_cols; col++, got++) {
        const char *t;
        size_t len;
        if (c < e && *c == '"' && sep == ',') {   /* quoted csv field */
            size_t k = 0;
            const char *q = c + 1;
            if (p->tok_cap < n) p->tok = xrealloc(p->tok, p->tok_cap = n + 1);
            for (;;) {
                if (q >= e) {
                    b->nnz = nnz0;
                    return bad(p, BAD_COLUMNS, "unterminated quote in column %d (a row is one line: a line break inside "
                                                     "quotes is not read)", col + 1);
                }
                if (*q == '"') {
                    if (q + 1 < e && q[1] == '"') {
                        p->tok[k++] = '"';
                        q += 2;
                        continue;
                    }
                    q++;
                    break;
                }
                p->tok[k++] = *q++;
            }
            if (q < e && *q != sep) {
                b->nnz = nnz0;
                return bad(p, BAD_COLUMNS, "text after a closing quote in column %d", col + 1);
            }
            t = p->tok;
            len = k;
            c = q;
        } else {
            const char *end = memchr(c, sep, (size_t)(e - c));
            if (!end) end = e;
            t = c;
            len = (size_t)(end - c);
            c = end;
        }
        /* c is at a separator or at the line end */
        if (got + 1 < want) {
            if (c >= e) {
                b->nnz = nnz0;
                if (p->o.fmt == FMT_CRITEO && !p->o.unlabeled && got + 1 == p->n_cols - 1) return unlabeled_line(p);
                return bad(p, BAD_COLUMNS, "%d columns, want %d%s", got + 1, p->n_cols,
                           p->o.unlabeled && p->o.fmt == FMT_CRITEO ? " (or 39 without the label)" : "");
            }
            c++;
        } else if (c < e) {
            int extra = 1;
            for (const char *q = c + 1; q < e; q++) extra += *q == sep;
            b->nnz = nnz0;
            return bad(p, BAD_COLUMNS, "%d or more columns, want %d", want + extra, p->n_cols);
        }
        switch (p->role[col]) {
        case ROLE_CAT:
            put_cat(b, p->field[col], t, len);
            break;
        case ROLE_NUM:
            if ((ret = put_num(p, b, dense, p->field[col], t, len)) != BAD_OK) {
                b->nnz = nnz0;
                return ret;
            }
            break;
        case ROLE_LABEL:
            label = parse_label(t, len);
            if (label < 0) {
                b->nnz = nnz0;
                if (p->o.fmt == FMT_CRITEO && columns_of(s, n, sep) == p->n_cols - 1) return unlabeled_line(p);
                return bad(p, BAD_LABEL, "'%s'", shown(t, len, buf));
            }
            break;
        case ROLE_ID:   /* copied: t may be the unescape buffer, which the next quoted column reuses */
            if (len > p->id_cap) p->id = xrealloc(p->id, p->id_cap = len + 64);
            memcpy(p->id, t, len);
            p->id_len = len;
            break;
        default:
            break;
        }
    }
    if (p->o.id_column) block_push_id(b, p->id, p->id_len);
    return row_end(b, label);
}

/* libsvm and libffm: label, then space-separated features. */
static int parse_sparse(line_parser *p, const char *s, size_t n, sample_block *b)
{
    char buf[48];
    const char *c = s, *e = s + n;
    size_t nnz0 = b->nnz;
    while (c < e && (*c == ' ' || *c == '\t')) c++;
    const char *t = c;
    while (c < e && *c != ' ' && *c != '\t') c++;
    if (c == t) return bad(p, BAD_COLUMNS, "empty line");
    int label = -1;
    if (p->o.unlabeled && memchr(t, ':', (size_t)(c - t))) {
        c = t;   /* scoring: the line starts with a feature */
    } else {
        label = parse_label(t, (size_t)(c - t));
        if (label < 0) return bad(p, BAD_LABEL, "'%s'", shown(t, (size_t)(c - t), buf));
    }
    row_begin(b, 16);
    int ffm = p->o.fmt == FMT_LIBFFM;
    for (;;) {
        while (c < e && (*c == ' ' || *c == '\t')) c++;
        if (c >= e) break;
        t = c;
        while (c < e && *c != ' ' && *c != '\t') c++;
        size_t len = (size_t)(c - t);
        const char *c1 = memchr(t, ':', len);
        if (!c1) goto bad_feature;
        uint32_t field = 0;
        const char *idx = t, *idx_end = c1;
        if (ffm) {
            double f;
            const char *c2 = memchr(c1 + 1, ':', (size_t)(c - c1 - 1));
            if (!c2) goto bad_feature;
            if (parse_number(t, (size_t)(c1 - t), &f) < 0 || f != floor(f))
                goto bad_feature;
            if (f < 0 || f >= CBX_MAX_FIELDS) {
                b->nnz = nnz0;
                return bad(p, BAD_FIELD, "field %s (0..%u allowed)", shown(t, (size_t)(c1 - t), buf),
                           CBX_MAX_FIELDS - 1);
            }
            field = (uint32_t)f;
            idx = c1 + 1;
            idx_end = c2;
            c1 = c2;
            if (field >= p->schema.n_fields) schema_grow(&p->schema, field + 1);
        } else {
            uint64_t v = 0;
            if (idx == idx_end || idx_end - idx > 19) goto bad_feature;
            for (const char *q = idx; q < idx_end; q++) {
                if (*q < '0' || *q > '9') goto bad_feature;
                v = v * 10 + (uint64_t)(*q - '0');
            }
            if (p->o.n_offsets > 0) {
                if (v < p->offsets[0]) {
                    b->nnz = nnz0;
                    return bad(p, BAD_FIELD, "index %llu is below the first field offset %llu",
                               (unsigned long long)v, (unsigned long long)p->offsets[0]);
                }
                int lo = 0, hi = p->o.n_offsets;   /* last offset <= v */
                while (hi - lo > 1) {
                    int mid = (lo + hi) / 2;
                    if (p->offsets[mid] <= v) lo = mid;
                    else hi = mid;
                }
                field = (uint32_t)lo;
            }
        }
        if (idx == idx_end) goto bad_feature;
        double val;
        if (parse_number(c1 + 1, (size_t)(c - c1 - 1), &val) < 0) {
            b->nnz = nnz0;
            return bad(p, BAD_NUMBER, "value in '%s'", shown(t, len, buf));
        }
        if (fabs(val) > FLT_MAX) {   /* 1e39 became inf: the loss nan at the first step, "lower --lr" */
            b->nnz = nnz0;
            return bad(p, BAD_NUMBER, "value in '%s' is beyond a 32-bit float's range", shown(t, len, buf));
        }
        block_reserve(b, 1, 1);
        b->key[b->nnz] = parse_feature_key(idx, (size_t)(idx_end - idx), field);
        b->field[b->nnz] = (uint16_t)field;
        b->val[b->nnz] = (float)val;
        b->nnz++;
        continue;
    bad_feature:
        b->nnz = nnz0;
        return bad(p, BAD_FEATURE, "'%s', want %s", shown(t, len, buf),
                   ffm ? "field:index:value" : "index:value");
    }
    return row_end(b, label);
}

int parser_parse(line_parser *p, const char *line, size_t len, sample_block *b)
{
    int r = parse_check_line_bytes(line, len);
    if (r == BAD_NUL) return bad(p, BAD_NUL, "at byte %zu of the line", (size_t)((const char *)memchr(line, 0, len) - line));
    if (r == BAD_UTF8) return bad(p, BAD_UTF8, "in the line");
    switch (p->o.fmt) {
    case FMT_CRITEO:
        return parse_columns(p, line, len, b, '\t');
    case FMT_CSV:
        CHECK(p->have_header);
        return parse_columns(p, line, len, b, ',');
    default:
        return parse_sparse(p, line, len, b);
    }
}

/* Set up the column layout once roles are known; fields numbered in column order. */
static void layout_fields(line_parser *p)
{
    uint32_t nf = 0, nd = 0;
    for (int i = 0; i < p->n_cols; i++)
        if (p->role[i] == ROLE_CAT || p->role[i] == ROLE_NUM) nf++;
    schema_free(&p->schema);
    schema_init(&p->schema, nf);
    p->schema.num_mode = p->o.num;
    nf = 0;
    for (int i = 0; i < p->n_cols; i++) {
        if (p->role[i] != ROLE_CAT && p->role[i] != ROLE_NUM) continue;
        p->field[i] = nf;
        schema_set_name(&p->schema, nf, p->col_names[i]);
        if (p->role[i] == ROLE_NUM && p->o.num == NUM_LOG) {
            p->schema.kind[nf] = FIELD_NUM;
            p->schema.dense_slot[nf] = (int32_t)nd++;
        }
        nf++;
    }
    p->schema.n_dense = nd;
    const data_schema *want = p->o.order;
    if (!want || schema_equal(&p->schema, want) || p->schema.n_fields != want->n_fields ||
        p->schema.n_dense != want->n_dense || p->schema.num_mode != want->num_mode)
        return;
    /* the same feature columns in another order (a daily export whose columns moved): each column
     * takes the field of its name in the model, so its keys and dense slot are the model's */
    uint32_t *to = xmalloc((size_t)p->n_cols * sizeof *to);
    for (int i = 0; i < p->n_cols; i++) {
        if (p->role[i] != ROLE_CAT && p->role[i] != ROLE_NUM) continue;
        uint32_t f = p->field[i], j = 0;
        while (j < want->n_fields && strcmp(want->names[j], p->schema.names[f])) j++;
        if (j == want->n_fields || want->kind[j] != p->schema.kind[f]) {
            free(to);   /* another set of fields: the caller's check says which */
            return;
        }
        to[i] = j;
    }
    for (int i = 0; i < p->n_cols; i++)
        if (p->role[i] == ROLE_CAT || p->role[i] == ROLE_NUM) p->field[i] = to[i];
    free(to);
    schema_free(&p->schema);
    schema_copy(&p->schema, want);
}

static void set_columns(line_parser *p, int n)
{
    p->n_cols = n;
    p->role = xcalloc((size_t)n, 1);
    p->field = xcalloc((size_t)n, sizeof *p->field);
    p->col_names = xcalloc((size_t)n, sizeof *p->col_names);
}

int parser_create(line_parser **out, const parser_opts *o, char *err, size_t errlen)
{
    *out = NULL;
    pthread_once(&log1p_once, log1p_table_init);
    line_parser *p = xcalloc(1, sizeof *p);
    p->o = *o;
    switch (o->fmt) {
    case FMT_CRITEO:
        set_columns(p, 40);
        p->col_names[0] = xstrdup("label");
        p->role[0] = ROLE_LABEL;
        for (int i = 1; i < 40; i++) {
            char name[8];
            snprintf(name, sizeof name, i <= 13 ? "I%d" : "C%d", i <= 13 ? i : i - 13);
            p->col_names[i] = xstrdup(name);
            p->role[i] = i <= 13 ? ROLE_NUM : ROLE_CAT;
        }
        layout_fields(p);
        break;
    case FMT_LIBSVM:
        if (o->n_offsets > 0) {
            p->offsets = xmalloc((size_t)o->n_offsets * sizeof *p->offsets);
            memcpy(p->offsets, o->field_offsets, (size_t)o->n_offsets * sizeof *p->offsets);
            for (int i = 1; i < o->n_offsets; i++)
                if (p->offsets[i] <= p->offsets[i - 1]) {
                    snprintf(err, errlen, "--field-offsets must be strictly ascending");
                    parser_destroy(p);
                    return -EINVAL;
                }
            if (o->n_offsets > (int)CBX_MAX_FIELDS) {
                snprintf(err, errlen, "--field-offsets: at most %u fields", CBX_MAX_FIELDS);
                parser_destroy(p);
                return -EINVAL;
            }
        }
        schema_init(&p->schema, o->n_offsets > 0 ? (uint32_t)o->n_offsets : 1);
        break;
    case FMT_LIBFFM:
        schema_init(&p->schema, 0);
        break;
    case FMT_CSV:
        schema_init(&p->schema, 0);
        break;
    default:
        snprintf(err, errlen, "not a text format: %s", parse_format_name(o->fmt));
        parser_destroy(p);
        return -EINVAL;
    }
    if ((o->schema_spec || o->id_column) && o->fmt != FMT_CSV) {
        snprintf(err, errlen, "%s applies to --format csv only", o->schema_spec ? "--schema" : "--id-column");
        parser_destroy(p);
        return -EINVAL;
    }
    p->schema.num_mode = o->num;
    *out = p;
    return 0;
}

void parser_destroy(line_parser *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_cols; i++) free(p->col_names[i]);
    free(p->col_names);
    free(p->role);
    free(p->field);
    free(p->offsets);
    free(p->tok);
    free(p->id);
    schema_free(&p->schema);
    free(p);
}

int parser_has_header(const line_parser *p) { return p->o.fmt == FMT_CSV; }

static int role_from_name(const char *s, size_t n)
{
    if (n == 5 && !memcmp(s, "label", 5)) return ROLE_LABEL;
    if (n == 3 && !memcmp(s, "num", 3)) return ROLE_NUM;
    if (n == 3 && !memcmp(s, "cat", 3)) return ROLE_CAT;
    if (n == 4 && !memcmp(s, "skip", 4)) return ROLE_SKIP;
    return -1;
}

static int find_col(const line_parser *p, const char *name, size_t n)
{
    for (int i = 0; i < p->n_cols; i++)
        if (strlen(p->col_names[i]) == n && !memcmp(p->col_names[i], name, n)) return i;
    return -1;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Split a name like "I13" into prefix "I" and number 13; -1 if it does not end in digits. */
static long name_number(const char *s, size_t n, size_t *prefix)
{
    size_t i = n;
    while (i > 0 && s[i - 1] >= '0' && s[i - 1] <= '9') i--;
    if (i == n || n - i > 9) return -1;
    *prefix = i;
    return strtol(s + i, NULL, 10);
}

static const char *role_name(int r)
{
    static const char *names[] = { "cat", "num", "label", "skip" };
    return names[r];
}

/* Give column col the role the schema names; a column named twice must get one role. named[col]
 * is the role + 1 it was given, 0 if none yet. */
static int set_role(line_parser *p, uint8_t *named, int col, int role, char *err, size_t errlen)
{
    if (named[col] && named[col] != role + 1) {
        snprintf(err, errlen, "--schema gives column '%s' two roles (%s and %s)", p->col_names[col],
                 role_name(named[col] - 1), role_name(role));
        return -EINVAL;
    }
    named[col] = (uint8_t)(role + 1);
    p->role[col] = (uint8_t)role;
    return 0;
}

/* Apply "name:role,A1-A9:role" to the header's columns (named: see set_role). */
static int apply_schema(line_parser *p, const char *spec, uint8_t *named, char *err, size_t errlen)
{
    const char *c = spec;
    while (*c) {
        const char *end = strchr(c, ',');
        if (!end) end = c + strlen(c);
        const char *colon = memchr(c, ':', (size_t)(end - c));
        if (!colon || colon == c) {
            snprintf(err, errlen, "--schema: '%.*s' is not name:role", (int)(end - c), c);
            return -EINVAL;
        }
        int role = role_from_name(colon + 1, (size_t)(end - colon - 1));
        if (role < 0) {
            snprintf(err, errlen, "--schema: role '%.*s' is not label, num, cat or skip",
                     (int)(end - colon - 1), colon + 1);
            return -EINVAL;
        }
        const char *dash = memchr(c, '-', (size_t)(colon - c));
        int col = find_col(p, c, (size_t)(colon - c));
        if (col < 0 && role == ROLE_LABEL && p->o.unlabeled) {   /* scoring data without its label column */
            c = *end ? end + 1 : end;
            continue;
        }
        if (col >= 0 || !dash) {
            if (col < 0) {
                snprintf(err, errlen, "--schema names column '%.*s', which the header lacks",
                         (int)(colon - c), c);
                return -EINVAL;
            }
            if (set_role(p, named, col, role, err, errlen) < 0) return -EINVAL;
        } else {   /* a range: I1-I13 */
            size_t pa, pb;
            long a = name_number(c, (size_t)(dash - c), &pa);
            long z = name_number(dash + 1, (size_t)(colon - dash - 1), &pb);
            if (a < 0 || z < a || pa != pb || memcmp(c, dash + 1, pa) != 0) {
                snprintf(err, errlen, "--schema: '%.*s' is not a range like I1-I13", (int)(colon - c), c);
                return -EINVAL;
            }
            for (long k = a; k <= z; k++) {
                char name[256];
                if (pa + 12 > sizeof name) return -EINVAL;
                int len = snprintf(name, sizeof name, "%.*s%ld", (int)pa, c, k);
                int i = find_col(p, name, (size_t)len);
                if (i < 0) {
                    snprintf(err, errlen, "--schema names column '%s', which the header lacks", name);
                    return -EINVAL;
                }
                if (set_role(p, named, i, role, err, errlen) < 0) return -EINVAL;
            }
        }
        c = *end ? end + 1 : end;
    }
    return 0;
}

/* A csv header's names, as its rows' fields are read (RFC 4180: a quoted name may hold commas, and
 * "" in it is a quote): their count with *out (each name and the array malloc'ed), or -(column) of
 * a quote that does not end. Split at every comma, "pos,x" was two columns, and every row of the
 * file one column short of them: all bad lines. */
static int header_names(const char *line, size_t len, char ***out)
{
    int n = 0, cap = 16;
    char **v = xmalloc((size_t)cap * sizeof *v), *name = xmalloc(len + 1);   /* one name unquoted */
    const char *c = line, *e = line + len;
    for (;;) {
        size_t k = 0;
        if (c < e && *c == '"') {
            const char *q = c + 1;
            for (;;) {
                if (q >= e) {
                    free(name);
                    for (int i = 0; i < n; i++) free(v[i]);
                    free(v);
                    return -(n + 1);
                }
                if (*q == '"' && q + 1 < e && q[1] == '"') name[k++] = '"', q += 2;
                else if (*q == '"') break;
                else name[k++] = *q++;
            }
            c = q + 1;
            while (c < e && *c != ',') name[k++] = *c++;   /* after the closing quote, up to the comma */
        } else {
            while (c < e && *c != ',') name[k++] = *c++;
        }
        name[k] = 0;
        if (n == cap) v = xrealloc(v, (size_t)(cap *= 2) * sizeof *v);
        v[n++] = xstrdup(name);
        if (c >= e) break;
        c++;   /* the comma */
    }
    free(name);
    *out = v;
    return n;
}

int parser_header(line_parser *p, const char *line, size_t len, char *err, size_t errlen)
{
    if (parse_check_line_bytes(line, len) != BAD_OK) {
        snprintf(err, errlen, "header line has NUL bytes or invalid UTF-8");
        return -EINVAL;
    }
    char **names;
    int n = header_names(line, len, &names);
    if (n < 0) {
        snprintf(err, errlen, "header has a quote that does not end (column %d)", -n);
        return -EINVAL;
    }
    if (p->have_header) {   /* a later file: same columns */
        int ok = n == p->n_cols;
        for (int i = 0; ok && i < n; i++) ok = !strcmp(p->col_names[i], names[i]);
        for (int i = 0; i < n; i++) free(names[i]);
        free(names);
        if (!ok) {
            snprintf(err, errlen, "header differs from the first file's");
            return -EINVAL;
        }
        return 0;
    }
    set_columns(p, n);
    for (int i = 0; i < n; i++) {
        p->col_names[i] = names[i];
        p->role[i] = ROLE_CAT;
    }
    free(names);
    char **sorted = xmalloc((size_t)n * sizeof *sorted);   /* a name twice: sorted, neighbours */
    memcpy(sorted, p->col_names, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_name);
    for (int i = 1; i < n; i++)
        if (!strcmp(sorted[i], sorted[i - 1])) {
            snprintf(err, errlen, "header names column '%s' twice", sorted[i]);
            free(sorted);
            return -EINVAL;
        }
    free(sorted);
    uint8_t *named = xcalloc((size_t)n, 1);
    if (p->o.schema_spec) {
        int ret = apply_schema(p, p->o.schema_spec, named, err, errlen);
        if (ret < 0) {
            free(named);
            return ret;
        }
    }
    int labels = 0;
    for (int i = 0; i < n; i++) labels += p->role[i] == ROLE_LABEL;
    if (labels == 0) {   /* by its name, unless the schema gave that column another role */
        for (int i = 0; i < n && !labels; i++)
            if (!named[i] && (!strcmp(p->col_names[i], "label") || !strcmp(p->col_names[i], "click") ||
                              !strcmp(p->col_names[i], "Label"))) {
                p->role[i] = ROLE_LABEL;
                labels = 1;
            }
    }
    free(named);
    if (p->o.id_column) {
        int col = find_col(p, p->o.id_column, strlen(p->o.id_column));
        if (col < 0) {
            snprintf(err, errlen, "--id-column %s: the header has no such column", p->o.id_column);
            return -EINVAL;
        }
        if (p->role[col] == ROLE_LABEL) {
            snprintf(err, errlen, "--id-column %s: that is the label column", p->o.id_column);
            return -EINVAL;
        }
        p->role[col] = ROLE_ID;
    }
    if (labels == 0 && p->o.unlabeled) labels = 1;   /* scoring: rows without labels */
    if (labels != 1) {
        snprintf(err, errlen, labels ? "--schema names %d label columns; want one"
                                     : "no label column: name one 'label', 'click' or 'Label', or use --schema COL:label",
                 labels);
        return -EINVAL;
    }
    int features = 0;   /* field ids are 16 bits: more would wrap onto other fields */
    for (int i = 0; i < n; i++) features += p->role[i] == ROLE_CAT || p->role[i] == ROLE_NUM;
    if (features > (int)CBX_MAX_FIELDS) {
        snprintf(err, errlen, "%d feature columns; at most %u are supported (skip some with --schema NAME:skip)", features,
                 CBX_MAX_FIELDS);
        return -EINVAL;
    }
    layout_fields(p);
    p->have_header = 1;
    return 0;
}

const char *parser_detail(const line_parser *p) { return p->detail; }
const data_schema *parser_schema(const line_parser *p) { return &p->schema; }
