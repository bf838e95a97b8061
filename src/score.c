/*
 * score.c: a model and data read as it was trained on (score.h).
 */
#include "score.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../datasets/source.h"
#include "../io/stream.h"
#include "../io/util.h"
#include "dist.h"
#include "passes.h"
#include "train.h"

/* The model's input settings in words: "criteo (13 dense values, 26 categorical fields)". */
void score_describe_input(const model_meta *mm, char *out, size_t n)
{
    const data_schema *sc = &mm->schema;
    size_t w = (size_t)snprintf(out, n, "%s", parse_format_name(mm->input.fmt));
    if (mm->input.fmt == FMT_CBX && mm->source_fmt && w < n)
        w += (size_t)snprintf(out + w, n - w, " converted from %s", parse_format_name(mm->source_fmt));
    if (mm->input.schema_spec && w < n) w += (size_t)snprintf(out + w, n - w, " --schema %s", mm->input.schema_spec);
    if (mm->input.n_offsets && w < n) w += (size_t)snprintf(out + w, n - w, " with %d field offsets", mm->input.n_offsets);
    if (w < n)
        w += (size_t)snprintf(out + w, n - w, " (%u dense values, %u categorical fields%s%s%s", sc->n_dense,
                              sc->n_fields - sc->n_dense, sc->n_fields ? ": " : "", sc->n_fields ? sc->names[0] : "",
                              sc->n_fields > 1 ? " ..." : "");
    if (w < n) snprintf(out + w, n - w, "%s)", sc->num_mode == NUM_BUCKET ? "; --num bucket" : "");
}

/* The first field of a whose name b has not (kinds 0), or has as another kind (kinds 1), or -1. */
static int name_not_in(const data_schema *a, const data_schema *b, int kinds)
{
    for (uint32_t i = 0; i < a->n_fields; i++) {
        uint32_t j = 0;
        while (j < b->n_fields && strcmp(a->names[i], b->names[j])) j++;
        if (kinds ? j < b->n_fields && a->kind[i] != b->kind[j] : j == b->n_fields) return (int)i;
    }
    return -1;
}

void score_schema_diff(const data_schema *got, const model_meta *mm, char *diff, size_t n)
{
    uint32_t f = schema_first_diff(got, &mm->schema);
    /* csv columns are matched by name, in any order: say which name is not matched */
    int csv = mm->input.fmt == FMT_CSV, extra = csv ? name_not_in(got, &mm->schema, 0) : -1;
    int lacks = csv ? name_not_in(&mm->schema, got, 0) : -1, kind = csv ? name_not_in(got, &mm->schema, 1) : -1;
    if (got->num_mode != mm->schema.num_mode)
        snprintf(diff, n, "its integers read as %s, the model's as %s", got->num_mode == NUM_BUCKET ? "buckets" : "log values",
                 mm->schema.num_mode == NUM_BUCKET ? "buckets (--num bucket)" : "log values (--num log)");
    else if (extra >= 0)
        snprintf(diff, n, "its column %s is none of the model's fields", got->names[extra]);
    else if (lacks >= 0)
        snprintf(diff, n, "it has no column %s, a field of the model's", mm->schema.names[lacks]);
    else if (kind >= 0)
        snprintf(diff, n, "its column %s reads as %s, the model's as %s", got->names[kind],
                 got->kind[kind] == FIELD_NUM ? "dense" : "categorical", got->kind[kind] == FIELD_NUM ? "categorical" : "dense");
    else if (f < got->n_fields && f < mm->schema.n_fields)
        snprintf(diff, n, "field %u is %s (%s), the model's is %s (%s)", f + 1, got->names[f],
                 got->kind[f] == FIELD_NUM ? "dense" : "categorical", mm->schema.names[f],
                 mm->schema.kind[f] == FIELD_NUM ? "dense" : "categorical");
    else
        snprintf(diff, n, "it reads as %u fields (%u dense), the model's are %u (%u dense)", got->n_fields, got->n_dense,
                 mm->schema.n_fields, mm->schema.n_dense);
}

/* The data at path (which looks like `looks`) does not read as the model's input: one line naming
 * both sides. */
static void __attribute__((noreturn)) refuse_data(const char *path, const char *looks, const model_meta *mm,
                                                  const char *read_err, const data_schema *got)
{
    char want[600], diff[300] = "";
    score_describe_input(mm, want, sizeof want);
    if (got) score_schema_diff(got, mm, diff, sizeof diff);
    die("%s%s%s; this file looks like %s; the model was trained on %s (its input settings are used unless given: "
        "give data in that layout)", got ? path : "", got ? ": " : "", got ? diff : read_err, looks, want);
}

const char *score_model_arg(const cli_cmd *cc, int argc, char **argv, const char *model_opt)
{
    if (model_opt && argc == optind) return model_opt;
    if (argc - optind != 1 || model_opt) cli_fail(cc, "give one model (its folder or its model.ctrbox)");
    return argv[optind];
}

void score_load(const score_src *src, model **m, model_meta *meta)
{
    char err[1024];
    if (src->bundle ? modelfile_bundle_load(src->bundle, m, meta, err, sizeof err) < 0
                    : modelfile_load(src->dir, m, meta, err, sizeof err) < 0)
        die("%s", err);
    for (int i = 0; i < src->n_deltas; i++)
        if (modelfile_bundle_apply(src->deltas[i], *m, meta, err, sizeof err) < 0) die("%s", err);
    if (src->table_dir) {
        if (!meta->table_dir)
            die("--table-dir %s: %s holds its rows itself (no table folder)", src->table_dir,
                src->dir ? src->dir : src->bundle);
        modelfile_find_table_dir(src->dir, meta, src->table_dir, 1);
    }
}

/* The source options that read data as the model's input (score_read's first half): another layout at
 * a glance is refused before a line is read; *guess and looks say what the first file looks like. */
static source_opts score_opts(const model_meta *meta, char **data, const cli_input *in, int format_given, int unlabeled,
                              const char *id_column, data_format *guess, char *looks, size_t looks_n)
{
    char err[1024];
    source_opts so = meta->input;   /* read the data as the model was trained, with what the user changed */
    so.max_bad_ratio = in->so.max_bad_ratio;
    cli_input_over(in, &so);
    *guess = source_sniff(data[0], looks, looks_n);   /* the first file at a glance: once, a pipe not at all */
    if (so.fmt == FMT_CBX && !format_given && meta->source_fmt && *guess && *guess != FMT_CBX) {
        so.fmt = meta->source_fmt;   /* trained on cbx converted from this text format */
        so.num = meta->schema.num_mode == NUM_BUCKET ? NUM_BUCKET : NUM_LOG;
    }
    so.unlabeled = unlabeled;
    so.id_column = id_column;
    so.order = &meta->schema;   /* csv columns matched to the model's fields by name */
    /* another layout at a glance is refused before a line is read (csv: by its header, below) */
    if (!format_given && so.fmt != FMT_CBX && so.fmt != FMT_CSV && *guess && *guess != FMT_CBX && *guess != so.fmt &&
        !(*guess == FMT_LIBSVM && so.fmt == FMT_LIBFFM)) {
        snprintf(err, sizeof err, "%s: not %s data", data[0], parse_format_name(so.fmt));
        refuse_data(data[0], looks, meta, err, NULL);
    }
    return so;
}

/* A read that failed: the error is the whole story when the layout is right, else the layouts. */
static void __attribute__((noreturn)) read_failed(char **data, data_format guess, const char *looks, const source_opts *so,
                                                  const model_meta *meta, const char *err)
{
    if (!guess || guess == so->fmt || guess == FMT_CBX) die("%s", err);
    refuse_data(data[0], looks, meta, err, NULL);
}

void score_read(const score_src *src, model *m, model_meta *meta, char **data, int n_data, const cli_input *in,
                int format_given, int unlabeled, const char *id_column, sample_block *b, score_gaps *gaps)
{
    char err[1024], looks[300];
    data_format guess;
    source_opts so = score_opts(meta, data, in, format_given, unlabeled, id_column, &guess, looks, sizeof looks);
    so.note_bad = gaps != NULL;
    data_source *s;
    if (source_open(&s, data, n_data, &so, err, sizeof err) < 0) read_failed(data, guess, looks, &so, meta, err);
    if (source_read_all(s, b, err, sizeof err) < 0) read_failed(data, guess, looks, &so, meta, err);
    if (!schema_equal(source_schema(s), &meta->schema)) refuse_data(data[0], looks, meta, NULL, source_schema(s));
    if (gaps) {
        const uint64_t *bad = source_bad_records(s, &gaps->n_bad);
        gaps->bad = xmalloc((gaps->n_bad ? gaps->n_bad : 1) * sizeof *gaps->bad);
        if (gaps->n_bad) memcpy(gaps->bad, bad, gaps->n_bad * sizeof *bad);   /* (bad is NULL when none) */
        gaps->records = source_records(s);
    }
    source_close(s);
    if (meta->table_dir && model_pull_from_tier(m, src->dir, meta, b, err, sizeof err) < 0) die("%s", err);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Under mpirun: rows to the rank of their batch. */
typedef struct {
    uint64_t B;
    int N;
} batch_owner;

static int batch_rank(void *ctx, uint64_t row)
{
    const batch_owner *o = ctx;
    return (int)(row / o->B % (uint64_t)o->N);
}

void score_read_shared(const score_src *src, model *m, model_meta *meta, char **data, int n_data, const cli_input *in,
                       int format_given, int unlabeled, const char *id_column, sample_block *b, uint64_t **row,
                       uint64_t *total, score_gaps *gaps)
{
    char err[1024], looks[300];
    data_format guess;
    source_opts so = score_opts(meta, data, in, format_given, unlabeled, id_column, &guess, looks, sizeof looks);
    so.note_bad = gaps != NULL;
    data_source *s;
    if (source_open(&s, data, n_data, &so, err, sizeof err) < 0) read_failed(data, guess, looks, &so, meta, err);
    int N = dist_size(), me = dist_rank();
    batch_owner own = { (uint64_t)model_config_of(m)->batch, N };
    source_split(s, N, me);
    uint32_t nd = source_schema(s)->n_dense;
    sample_block got, in_rows;
    block_init(&got, nd), block_init(&in_rows, nd), block_init(b, nd);
    uint64_t *num = NULL, *in_num = NULL, before = 0, bytes = 0;
    size_t num_cap = 0, in_cap = 0, row_cap = 0, *order = NULL, n_counts = 0;
    int64_t *counts = NULL;
    double secs = 0;
    *row = NULL;
    source_window w;
    int ret;
    while ((ret = source_window_next(s, &w, err, sizeof err)) >= 0) {
        uint64_t agree[2] = { (uint64_t)ret, ret ? source_window_digest(s) : 0 };
        if (!dist_same(agree, sizeof agree)) {   /* a file grew or changed while the ranks opened it */
            if (me == 0) die("%s: the processes see the data files with other sizes (a file changed while read)", data[0]);
            exit(1);
        }
        if (ret == 0) break;
        if (w.whole) {   /* every rank reads it all, keeping its batches' rows */
            while ((ret = source_next(s, &got, err, sizeof err)) > 0) {
                for (size_t i = 0; i < got.rows; i++)
                    if (batch_rank(&own, before + i) == me) {
                        if (b->rows == row_cap) *row = xrealloc(*row, (row_cap = row_cap * 2 + 1024) * sizeof **row);
                        (*row)[b->rows] = before + i;
                        block_append(b, &got, i, i + 1);
                    }
                before += got.rows;
            }
            if (ret < 0) break;
            continue;
        }
        if (w.pieces > n_counts) counts = xrealloc(counts, (n_counts = w.pieces) * sizeof *counts);
        if ((ret = source_window_read(s, counts, err, sizeof err)) < 0) break;
        dist_sum_i64(counts, w.pieces);
        if ((ret = source_window_parse(s, counts, &got, err, sizeof err)) < 0) break;
        source_window_rows(s, counts);
        int64_t *mine = xmalloc(w.pieces * sizeof *mine);
        memcpy(mine, counts, w.pieces * sizeof *mine);
        dist_sum_i64(counts, w.pieces);   /* every piece's rows: the rows' numbers */
        if (got.rows > num_cap) num = xrealloc(num, (num_cap = got.rows) * sizeof *num);
        uint64_t at = before;
        size_t r = 0;
        for (size_t i = 0; i < w.pieces; i++) {
            for (int64_t k = 0; k < mine[i]; k++) num[r++] = at + (uint64_t)k;
            at += (uint64_t)counts[i];
        }
        CHECK(r == got.rows);
        free(mine);
        dist_ship_rows(&got, num, batch_rank, &own, 0, before, at, &in_rows, &in_num, &in_cap, &order, &secs, &bytes);
        for (size_t i = 0; i < in_rows.rows; i++) {
            size_t k = order[i];
            if (b->rows == row_cap) *row = xrealloc(*row, (row_cap = row_cap * 2 + 1024) * sizeof **row);
            (*row)[b->rows] = in_num[k];
            block_append(b, &in_rows, k, k + 1);
        }
        before = at;
    }
    if (ret < 0) read_failed(data, guess, looks, &so, meta, err);
    if (!schema_equal(source_schema(s), &meta->schema)) refuse_data(data[0], looks, meta, NULL, source_schema(s));
    if (gaps) {   /* every rank's bad lines on rank 0 (a file read whole: every rank found them) */
        size_t n;
        const uint64_t *bad = source_bad_records(s, &n);
        void *all = NULL;
        size_t got_bytes = dist_gather_bytes(bad, n * sizeof *bad, &all);
        gaps->bad = all ? all : xmalloc(sizeof *gaps->bad);
        gaps->n_bad = got_bytes / sizeof *bad;
        qsort(gaps->bad, gaps->n_bad, sizeof *gaps->bad, cmp_u64);
        size_t k = 0;
        for (size_t i = 0; i < gaps->n_bad; i++)
            if (k == 0 || gaps->bad[i] != gaps->bad[k - 1]) gaps->bad[k++] = gaps->bad[i];
        gaps->n_bad = k;
        gaps->records = source_records(s);
    }
    source_close(s);
    block_free(&got), block_free(&in_rows);
    free(num), free(in_num), free(order), free(counts);
    *total = before;
    if (meta->table_dir && model_pull_from_tier(m, src->dir, meta, b, err, sizeof err) < 0) die("%s", err);
}

/* A row's prediction as it goes to rank 0. */
typedef struct {
    uint64_t row;
    double prob;
    float label;
    uint32_t has_group;
    uint64_t group;               /* the key of the row's group field */
    uint64_t id_len;              /* bytes of its id after the records, in row order */
} scored;

void score_predict_shared(model *m, const sample_block *b, const uint64_t *row, uint64_t total, int group_field,
                          sample_block *all, double **prob)
{
    size_t n = b->rows, B = (size_t)model_config_of(m)->batch;
    double *p = xmalloc((n ? n : 1) * sizeof *p);
    for (size_t a = 0; a < n;) {   /* each batch alone: the rows one process predicts together */
        size_t e = a + 1;
        while (e < n && row[e] / B == row[a] / B) e++;
        model_predict_batch(m, b, a, e, p + a);
        a = e;
    }
    size_t ids = b->id_ptr ? (size_t)b->id_ptr[n] : 0, bytes = n * sizeof(scored) + ids;
    uint8_t *buf = xmalloc(bytes ? bytes : 1);
    for (size_t i = 0; i < n; i++) {
        scored x = { row[i], p[i], b->label[i], 0, 0, b->id_ptr ? b->id_ptr[i + 1] - b->id_ptr[i] : 0 };
        for (uint64_t k = b->row_ptr[i]; group_field >= 0 && k < b->row_ptr[i + 1]; k++)
            if (b->field[k] == group_field) {
                x.has_group = 1, x.group = b->key[k];
                break;
            }
        memcpy(buf + i * sizeof x, &x, sizeof x);
    }
    if (ids) memcpy(buf + n * sizeof(scored), b->ids, ids);
    free(p);
    /* each rank's records and ids, then the records' count: rank 0 finds every part */
    int64_t cnt = (int64_t)n;
    void *got, *got_n;
    size_t len = dist_gather_bytes(buf, bytes, &got);
    dist_gather_bytes(&cnt, sizeof cnt, &got_n);
    free(buf);
    block_init(all, 0);
    *prob = NULL;
    if (dist_rank() != 0) return;
    size_t *where = xmalloc((total ? total : 1) * sizeof *where);   /* row -> offset of its record */
    const uint8_t **idp = xmalloc((total ? total : 1) * sizeof *idp);
    const uint8_t *q = got;
    for (int r = 0; r < dist_size(); r++) {
        int64_t k;
        memcpy(&k, (const uint8_t *)got_n + (size_t)r * sizeof k, sizeof k);
        const uint8_t *id = q + (size_t)k * sizeof(scored);
        for (int64_t i = 0; i < k; i++) {
            scored x;
            memcpy(&x, q + (size_t)i * sizeof x, sizeof x);
            CHECK(x.row < total);
            where[x.row] = (size_t)(q + (size_t)i * sizeof x - (const uint8_t *)got);
            idp[x.row] = id;
            id += x.id_len;
        }
        q = id;
    }
    CHECK((size_t)(q - (const uint8_t *)got) == len);
    *prob = xmalloc((total ? total : 1) * sizeof **prob);
    for (uint64_t i = 0; i < total; i++) {
        scored x;
        memcpy(&x, (const uint8_t *)got + where[i], sizeof x);
        block_reserve(all, 1, 1);
        if (b->id_ptr) block_push_id(all, (const char *)idp[i], (size_t)x.id_len);
        all->label[all->rows] = x.label;
        if (x.has_group) {
            all->field[all->nnz] = (uint16_t)group_field;
            all->key[all->nnz] = x.group;
            all->val[all->nnz++] = 1.0f;
        }
        all->row_ptr[++all->rows] = all->nnz;
        (*prob)[i] = x.prob;
    }
    free(where), free(idp), free(got), free(got_n);
}

int score_output_check(const char *out, const score_src *src, char **data, int n_data, const model_meta *meta, char *msg,
                       size_t len)
{
    struct stat os, ds;
    if (stat(out, &os) < 0 || !S_ISREG(os.st_mode)) return 0;   /* new, or a stream */
    char which[4200];
    int ret = 0;
    if (n_data && io_output_is_input(out, data, n_data, which, sizeof which))
        ret = snprintf(msg, len, "--out %s is the data file %s: it would be replaced", out, which);
    const char *read[] = { src->bundle, src->dir };
    for (int i = 0; i < 2 && !ret; i++)
        if (read[i] && util_same_file(read[i], &os)) ret = snprintf(msg, len, "--out %s is the model it reads (%s)", out, read[i]);
    for (int i = 0; i < src->n_deltas && !ret; i++)
        if (util_same_file(src->deltas[i], &os)) ret = snprintf(msg, len, "--out %s is the delta it reads (%s)", out, src->deltas[i]);
    char *ocopy = xstrdup(out), *bcopy = xstrdup(out), *mf = src->dir ? modelfile_path(src->dir) : NULL;
    const char *base = basename(bcopy);
    if (!ret && stat(dirname(ocopy), &ds) == 0) {
        static const char *const own[] = { "model.ctrbox", "log.jsonl", "curve.jsonl", "LOCK.model" };
        for (int i = 0; mf && i < 4 && !ret; i++)
            if (!strcmp(base, own[i]) && util_same_file(dirname(mf), &ds))
                ret = snprintf(msg, len, "--out %s is a file of the model folder it reads: it would be replaced", out);
        if (!ret && meta->table_dir && util_same_file(meta->table_dir, &ds))
            ret = snprintf(msg, len, "--out %s is in the model's table folder %s: write it elsewhere", out, meta->table_dir);
    }
    free(ocopy), free(bcopy), free(mf);
    return ret ? -1 : 0;
}
