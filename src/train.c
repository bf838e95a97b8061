/*
 * train.c: the training loop of every mode, once: epochs of passes (passes.h: one streamed pass
 * per epoch in memory, passes of --pass-rows rows, passes over the SSD tier), each trained in
 * batches with a buffered shuffle; evaluation on the validation set (each epoch and every N
 * steps), early stopping on validation AUC with a learning-rate drop, the model kept in the
 * output folder (the best, or with a table folder the last committed), a progress line on
 * stderr and a JSON-lines log.
 */
#define _GNU_SOURCE
#include "train.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../datasets/cbx.h"
#include "../datasets/fieldstats.h"
#include "../dense/backend.h"
#include "../dense/device.h"
#include "../dense/plan.h"
#include "dist.h"
#include "follow.h"
#include "lanes.h"
#include "metrics.h"
#include "modelfile.h"
#include "passes.h"
#include "score.h"
#include "../io/stream.h"
#include "../io/util.h"

typedef struct {
    const train_opts *o;
    model *m;
    model_meta meta;
    sample_block valid;
    int have_valid;
    FILE *log;
    passes *ps;
    run_state rs;                 /* the pass clock, counters, best AUC: what a commit saves */
    uint64_t rows_epoch_prev;
    uint64_t steps_epoch_prev;      /* the optimizers' steps when the epoch began */
    double t_start, t_epoch, t_last_print;
    uint64_t rows_last_print;   /* rows_done at the last progress line */
    uint64_t epoch_rows;          /* rows of one epoch, known after the first */
    int stopped;                  /* SIGTERM or SIGINT: stopped after a commit, at a pass boundary */
    double unit_auc, unit_logloss;   /* the entry's progressive validation (NaN: none) */
    FILE *curve;                  /* DIR/curve.jsonl: the training curve and the run's events (runlog.h) */
    double iv_loss, iv_t0;        /* the curve's interval: summed loss, rows, start */
    uint64_t iv_n;
    int best_epoch;               /* the epoch of the best validation AUC in this process (0: none yet) */
    int hinted;                   /* small-data hints given: 1 few steps, 2 AUC near 0.5 */
    int stopped_early;
    uint64_t data_digest;         /* the training files' contents as the first epoch read them (have_digest) */
    int have_digest;
} trainer;

/* --follow: SIGTERM and SIGINT ask the run to stop at the next pass boundary after a commit */
static volatile sig_atomic_t stop_asked;
static void on_stop(int sig)
{
    (void)sig;
    stop_asked = 1;
}

int train_read_rows(char *const *paths, int n, const source_opts *in, sample_block *all, data_schema *schema,
                  char *err, size_t errlen)
{
    data_source *s;
    int ret = source_open(&s, paths, n, in, err, errlen);
    if (ret < 0) return ret;
    ret = source_read_all(s, all, err, errlen);
    if (ret == 0 && schema) schema_copy(schema, source_schema(s));
    source_close(s);
    return ret;
}

static int cmp_group(const void *x, const void *y, void *keys)
{
    const uint64_t *gk = keys;
    uint64_t a = gk[*(const size_t *)x], c = gk[*(const size_t *)y];
    return (a > c) - (a < c);
}

static double group_auc(const sample_block *b, const double *prob, int field)
{
    /* rows sorted by group key; per group AUC weighted by its rows (groups with one class skip) */
    size_t n = b->rows;
    uint64_t *gk = xmalloc(n * sizeof *gk);
    size_t *ord = xmalloc(n * sizeof *ord);
    for (size_t i = 0; i < n; i++) {
        gk[i] = 0;
        for (uint64_t k = b->row_ptr[i]; k < b->row_ptr[i + 1]; k++)
            if (b->field[k] == field) {
                gk[i] = b->key[k];
                break;
            }
        ord[i] = i;
    }
    qsort_r(ord, n, sizeof *ord, cmp_group, gk);
    float *l = xmalloc(n * sizeof *l);
    double *p = xmalloc(n * sizeof *p);
    double num = 0, den = 0;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && gk[ord[j]] == gk[ord[i]]) {
            l[j - i] = b->label[ord[j]];
            p[j - i] = prob[ord[j]];
            j++;
        }
        double a = metrics_auc(l, p, j - i);
        if (!isnan(a)) {
            num += a * (double)(j - i);
            den += (double)(j - i);
        }
        i = j;
    }
    free(gk), free(ord), free(l), free(p);
    return den > 0 ? num / den : NAN;
}

/* The metrics of predictions p (b->rows) of b's rows. */
void train_block_metrics(const sample_block *b, const double *p, int group_field, eval_result *r)
{
    memset(r, 0, sizeof *r);
    r->rows = b->rows;
    double sum = 0;
    for (size_t i = 0; i < b->rows; i++) {
        r->positives += b->label[i] > 0.5f;
        sum += p[i];
    }
    r->auc = metrics_auc(b->label, p, b->rows);
    r->logloss = metrics_logloss(b->label, p, b->rows);
    r->calibration = r->positives ? (sum / (double)b->rows) / ((double)r->positives / (double)b->rows) : NAN;
    r->gauc = group_field >= 0 ? group_auc(b, p, group_field) : NAN;
}

void train_evaluate_block(model *m, const sample_block *b, double *prob, int group_field, eval_result *r)
{
    double *p = prob ? prob : xmalloc((b->rows ? b->rows : 1) * sizeof *p);
    model_predict_batch(m, b, 0, b->rows, p);
    train_block_metrics(b, p, group_field, r);
    if (!prob) free(p);
}


/* A number for JSON: null when it is not finite. */
static const char *jnum(char *buf, size_t n, double x)
{
    if (isfinite(x)) snprintf(buf, n, "%.6f", x);
    else snprintf(buf, n, "null");
    return buf;
}

/* A string as a JSON string, quotes and escapes included (caller frees); s must be UTF-8. */
static char *jstr(const char *s)
{
    json_t *j = json_string(s);
    char *q = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;
    json_decref(j);
    return q ? q : xstrdup("null");
}

static void curve_flush(trainer *t)
{
    if (t->curve) fflush(t->curve);
}

static void log_eval(trainer *t, const char *kind, const eval_result *r, double dt)
{
    if (!t->log) return;
    char a[32], b[32], c[32];
    fprintf(t->log,
            "{\"kind\": \"%s\", \"epoch\": %d, \"step\": %llu, \"rows\": %llu, \"train_loss\": %s, "
            "\"valid_auc\": %s, \"valid_logloss\": %s, \"valid_rows\": %zu, \"lr\": %g, "
            "\"samples_per_s\": %.1f, \"train_samples_per_s\": %.1f, \"seconds\": %.2f}\n",
            kind, t->rs.epoch, (unsigned long long)model_step(t->m), (unsigned long long)t->rs.rows_done,
            jnum(a, sizeof a, t->rs.loss_n ? t->rs.loss_sum / (double)t->rs.loss_n : NAN), jnum(b, sizeof b, r ? r->auc : NAN),
            jnum(c, sizeof c, r ? r->logloss : NAN), r ? r->rows : 0, (double)model_config_of(t->m)->dopt.lr,
            dt > 0 ? (double)t->rs.rows_done / dt : 0.0, t->rs.train_seconds > 0 ? (double)t->rs.rows_done / t->rs.train_seconds : 0.0, dt);
    fflush(t->log);
    curve_flush(t);
}

/* A point of the training curve: the loss since the previous point, every step for the first 100,
 * then every 10, 100, 1000 steps: a few hundred lines a decade of steps. */
static void curve_point(trainer *t, double loss, size_t rows)
{
    t->iv_loss += loss * (double)rows;
    t->iv_n += rows;
    uint64_t s = model_step(t->m), k = s < 100 ? 1 : s < 1000 ? 10 : s < 10000 ? 100 : 1000;
    if (!t->curve || s % k) return;
    double now = now_sec();
    fprintf(t->curve, "{\"kind\": \"train\", \"epoch\": %d, \"step\": %llu, \"rows\": %llu, \"loss\": %.6f, \"lr\": %g, "
            "\"samples_per_s\": %.1f, \"seconds\": %.3f}\n", t->rs.epoch, (unsigned long long)s,
            (unsigned long long)t->rs.rows_done, t->iv_loss / (double)t->iv_n, (double)model_config_of(t->m)->dopt.lr,
            now > t->iv_t0 ? (double)t->iv_n / (now - t->iv_t0) : 0.0, now - t->t_start);
    t->iv_loss = 0;
    t->iv_n = 0;
    t->iv_t0 = now;
}

static int save_model(trainer *t)
{
    char err[600];
    t->meta.passes = t->rs.pass;
    if (!model_all_finite(t->m)) {   /* the last step's update can diverge after its loss was finite */
        fprintf(stderr, "%sctrbox: training diverged at epoch %d, step %llu: the model holds NaN or inf values and "
                "is not saved; " DIVERGED_HINT "\n", isatty(2) && !t->o->quiet ? "\n" : "", t->rs.epoch,
                (unsigned long long)model_step(t->m));
        return -1;
    }
    if (modelfile_save(t->o->out, t->m, &t->meta, err, sizeof err) < 0) {
        fprintf(stderr, "ctrbox: %s\n", err);
        return -1;
    }
    return 0;
}

/* Evaluate; keep the model if it is the best so far. Returns 1 if it improved. */
static int evaluate_and_keep(trainer *t, const char *kind)
{
    eval_result r;
    if (passes_pull(t->ps, &t->valid) < 0) return -1;
    train_evaluate_block(t->m, &t->valid, NULL, -1, &r);
    double dt = now_sec() - t->t_start;
    log_eval(t, kind, &r, dt);
    int better = !(r.auc <= t->rs.best_auc);   /* NaN (one class) counts as better only the first time */
    if (!t->o->quiet)
        fprintf(stderr, "%s[%s] epoch %d step %llu: valid auc %.6f logloss %.6f%s\n", isatty(2) ? "\n" : "", kind, t->rs.epoch,
                (unsigned long long)model_step(t->m), r.auc, r.logloss, better ? " (best)" : "");
    if (better) {
        t->rs.best_auc = r.auc;
        t->best_epoch = t->rs.epoch;
        /* with a table folder the model file pairs the dense state with the committed rows: it is
         * saved after commits, not here in the middle of a pass */
        if (!passes_tiered(t->ps) && save_model(t) < 0) return -1;
    }
    return better;
}

/* Seconds as "45s", "12m05s", "3h07m". */
static const char *duration(char *buf, size_t n, double sec)
{
    long s = (long)(sec + 0.5);
    if (s >= 3600) snprintf(buf, n, "%ldh%02ldm", s / 3600, s % 3600 / 60);
    else if (s >= 60) snprintf(buf, n, "%ldm%02lds", s / 60, s % 60);
    else snprintf(buf, n, "%lds", s);
    return buf;
}

static void progress(trainer *t, int force)
{
    double now = now_sec();
    int tty = isatty(2);
    if (t->o->quiet || (!force && now - t->t_last_print < (tty ? 0.5 : 10.0))) return;
    /* in a log a line per print: the epoch's last, when no row came since the one before, said it */
    if (!tty && force && t->rows_last_print == t->rs.rows_done) return;
    t->t_last_print = now;
    t->rows_last_print = t->rs.rows_done;
    double dt = now - t->t_epoch, rate = dt > 0 ? (double)(t->rs.rows_done - t->rows_epoch_prev) / dt : 0;
    char eta[96] = "";
    if (t->rs.epoch > 1 && !t->epoch_rows) t->epoch_rows = t->rows_epoch_prev / (uint64_t)(t->rs.epoch - 1);
    if (t->epoch_rows && rate > 0) {   /* known from the second epoch on; the run's is a bound when early stopping can end it */
        double in_epoch = (double)(t->rs.rows_done - t->rows_epoch_prev), left = (double)t->epoch_rows - in_epoch;
        double run = (left > 0 ? left : 0) + (double)t->epoch_rows * (t->o->epochs - t->rs.epoch);
        char a[24], b[24];
        snprintf(eta, sizeof eta, "  epoch ETA %s  run ETA %s%s", duration(a, sizeof a, left > 0 ? left / rate : 0),
                 t->have_valid && t->rs.epoch < t->o->epochs ? "at most " : "", duration(b, sizeof b, run / rate));
    }
    char unit[96] = "";
    if (t->o->follow && !isnan(t->unit_auc))
        snprintf(unit, sizeof unit, "  before training: auc %.4f logloss %.4f", t->unit_auc, t->unit_logloss);
    fprintf(stderr, "%sepoch %d/%d  rows %llu  %.0f samples/s  loss %.5f%s%s%s", tty ? "\r" : "", t->rs.epoch, t->o->epochs,
            (unsigned long long)(t->rs.rows_done - t->rows_epoch_prev), rate,
            t->rs.loss_n ? t->rs.loss_sum / (double)t->rs.loss_n : 0.0, unit, eta, tty ? "   " : "\n");
}

/* No better validation AUC this epoch and patience left: the learning rates times --lr-decay. */
static void lr_drop(trainer *t)
{
    model_scale_lr(t->m, t->o->lr_decay);
    const model_config *c = model_config_of(t->m);
    if (!t->o->quiet)
        fprintf(stderr, "learning rates x%g after epoch %d (no better validation AUC): dense %g, sparse %g\n",
                (double)t->o->lr_decay, t->rs.epoch, (double)c->dopt.lr, (double)c->sopt.lr);
    if (t->curve)
        fprintf(t->curve, "{\"kind\": \"lr\", \"epoch\": %d, \"step\": %llu, \"lr\": %g, \"sparse_lr\": %g}\n", t->rs.epoch,
                (unsigned long long)model_step(t->m), (double)c->dopt.lr, (double)c->sopt.lr);
}

/* --patience epochs without a better validation AUC: said, with the model kept. */
static void early_stop(trainer *t)
{
    char kept[160];
    if (passes_tiered(t->ps))   /* a table folder keeps the last commit, not the best epoch */
        snprintf(kept, sizeof kept, "the model is the last pass's (a table folder keeps its last commit)");
    else if (t->best_epoch)
        snprintf(kept, sizeof kept, "the model kept is epoch %d's (validation AUC %.6f)", t->best_epoch, t->rs.best_auc);
    else
        snprintf(kept, sizeof kept, "the model kept is the best epoch's before the resume (validation AUC %.6f)",
                 t->rs.best_auc);
    t->stopped_early = 1;
    if (!t->o->quiet)
        fprintf(stderr, "early stop after epoch %d: no better validation AUC for %d epoch%s; %s\n", t->rs.epoch,
                t->rs.bad_epochs, t->rs.bad_epochs > 1 ? "s" : "", kept);
    if (t->curve)
        fprintf(t->curve, "{\"kind\": \"early_stop\", \"epoch\": %d, \"step\": %llu, \"best_epoch\": %d, \"best_auc\": %.6f}\n",
                t->rs.epoch, (unsigned long long)model_step(t->m), t->best_epoch, t->rs.best_auc);
}

/* After an epoch, once each: too few steps for the optimizers to get anywhere, or a validation AUC
 * that stays near 0.5: one line saying what to change, with numbers. */
static void small_data_hints(trainer *t)
{
    const train_opts *o = t->o;
    if (o->quiet || o->follow) return;
    uint64_t rows = t->rs.rows_done - t->rows_epoch_prev, B = (uint64_t)o->mc.batch;
    uint64_t steps = model_step(t->m) - t->steps_epoch_prev;   /* a pass ends its last batch: passes of fewer rows
                                                               * than --batch take more steps than rows / B */
    if (!(t->hinted & 1) && steps < 50 && rows > 0) {
        t->hinted |= 1;
        uint64_t nb = rows / 200 < 64 ? 64 : rows / 200;   /* about 200 steps an epoch, batches of 64 at least */
        if (nb > B / 2) nb = B / 2 ? B / 2 : 1;
        fprintf(stderr, "hint: epoch %d had %llu rows in %llu steps of --batch %llu; the optimizers need hundreds of "
                "steps: try --batch %llu (%llu steps an epoch) and more --epochs\n", t->rs.epoch,
                (unsigned long long)rows, (unsigned long long)steps, (unsigned long long)B, (unsigned long long)nb,
                (unsigned long long)((rows + nb - 1) / nb));
    }
    if (!(t->hinted & 2) && t->have_valid && t->rs.best_auc < 0.55) {
        t->hinted |= 2;
        const model_config *c = model_config_of(t->m);
        fprintf(stderr, "hint: the best validation AUC is %.4f after epoch %d, near 0.5 (a coin): raise the learning "
                "rates (--lr %g --sparse-lr %g; now %g and %g), train more --epochs, or lower --batch (now %llu)\n",
                t->rs.best_auc, t->rs.epoch, (double)c->dopt.lr * 10, (double)c->sopt.lr * 10, (double)c->dopt.lr,
                (double)c->sopt.lr, (unsigned long long)B);
    }
}

/* Train on positions [lo, hi) of buf's rows in order (NULL: the rows' own), one batch at a time;
 * lo is a batch boundary. */
static int train_rows(trainer *t, const sample_block *buf, const size_t *order, size_t lo, size_t hi)
{
    const train_opts *o = t->o;
    size_t n = hi, B = (size_t)o->mc.batch;
    sample_block batch;
    block_init(&batch, buf->n_dense);
    int ret = 0;
    double t0 = now_sec();
    for (size_t i = lo; i < n && ret == 0; i += B) {
        size_t end = i + B < n ? i + B : n;
        double loss;
        if (order) {   /* gather the permuted rows into a batch */
            block_clear(&batch);
            for (size_t j = i; j < end; j++) block_append(&batch, buf, order[j], order[j] + 1);
            loss = model_train_batch(t->m, &batch, 0, batch.rows, t->rs.pass);
        } else {                 /* file order: train on the buffer's rows in place */
            loss = model_train_batch(t->m, buf, i, end, t->rs.pass);
        }
        if (!isfinite(loss)) {   /* diverged: nothing of it may be saved or committed */
            fprintf(stderr, "%sctrbox: training diverged at epoch %d, step %llu: the loss is %g; " DIVERGED_HINT
                    " (nothing trained since the last save is kept)\n", isatty(2) && !o->quiet ? "\n" : "",
                    t->rs.epoch, (unsigned long long)model_step(t->m), loss);
            ret = -1;
            break;
        }
        t->rs.loss_sum += loss * (double)(end - i);
        t->rs.loss_n += end - i;
        t->rs.rows_done += end - i;
        curve_point(t, loss, end - i);
        progress(t, 0);
        if (o->eval_every && t->have_valid && model_step(t->m) % o->eval_every == 0) {
            t->rs.train_seconds += now_sec() - t0;
            if (evaluate_and_keep(t, "step") < 0) ret = -1;
            t0 = now_sec();
        }
    }
    t->rs.train_seconds += now_sec() - t0;
    block_free(&batch);
    return ret;
}

/* Train on a shuffle buffer, chunk its number within the epoch. */
static int train_buffer(trainer *t, const sample_block *buf, uint64_t chunk)
{
    size_t *order = passes_order(t->o, buf->rows, t->rs.epoch, chunk);
    int ret = train_rows(t, buf, order, 0, buf->rows);
    free(order);
    return ret;
}

/* The training files as one source, or NULL (said). */
static data_source *open_training(const train_opts *o)
{
    char err[1024];
    data_source *s;
    if (source_open(&s, o->train, o->n_train, &o->in, err, sizeof err) < 0) {
        fprintf(stderr, "ctrbox: %s\n", err);
        return NULL;
    }
    return s;
}

/* Every epoch reads the training files again: at the end of each they must hold what they held
 * when the first began (a log appended to, cut or rewritten while the run went on trained later
 * epochs on other rows, silently). The first call takes their digest. 0, or -1 (said). */
static int same_data(trainer *t)
{
    char err[1024];
    uint64_t d;
    if (io_files_digest(t->o->train, t->o->n_train, &d, err, sizeof err) < 0) {
        fprintf(stderr, "%sctrbox: %s\n", util_tty_break(), err);
        return -1;
    }
    if (!t->have_digest) {
        t->data_digest = d;
        t->have_digest = 1;
    } else if (d != t->data_digest) {
        fprintf(stderr, "%sctrbox: the training files changed by the end of epoch %d (compared by size and sampled "
                "bytes): every epoch must train the rows the first read; give files that are complete (copy a log "
                "still being written first)\n", util_tty_break(), t->rs.epoch);
        return -1;
    }
    return 0;
}

/* One pass over the whole epoch, read from the files in chunks of the shuffle buffer's size. */
static int train_stream(trainer *t)
{
    const train_opts *o = t->o;
    char err[1024];
    if (!t->have_digest && same_data(t) < 0) return -1;   /* the first epoch: the digest to compare with */
    data_source *s = open_training(o);
    if (!s) return -1;
    sample_block b, buf;
    block_init(&b, source_schema(s)->n_dense);
    block_init(&buf, source_schema(s)->n_dense);
    size_t cap = o->shuffle_rows ? o->shuffle_rows : (size_t)o->mc.batch * 16;
    uint64_t chunk = 0;
    int ret;
    while ((ret = source_next(s, &b, err, sizeof err)) > 0) {
        block_append(&buf, &b, 0, b.rows);
        if (buf.rows >= cap) {
            if (train_buffer(t, &buf, chunk++) < 0) {
                ret = -2;
                break;
            }
            block_clear(&buf);
        }
    }
    if (ret == 0 && buf.rows) ret = train_buffer(t, &buf, chunk++) < 0 ? -2 : 0;
    if (ret == -1 || (ret < 0 && ret != -2)) fprintf(stderr, "%sctrbox: %s\n", util_tty_break(), err);
    block_free(&b);
    block_free(&buf);
    source_close(s);
    if (ret == 0 && same_data(t) < 0) ret = -1;
    return ret < 0 ? -1 : 0;
}

/* The model file, paired with the commit its rows are in (with a table folder: the last, made
 * durable first). */
static int keep_model(trainer *t)
{
    if (passes_stamp(t->ps, &t->meta.table_id, &t->meta.table_commits) < 0) return -1;
    return save_model(t);
}

/* --init: the model in o->init, its architecture checked against this run's, goes on training.
 * A model with its tables in the file hands its dense state, rows (counters and optimizer state
 * included) and pass clock to t->m now; a tiered model names its table folder (*table_dir, owned),
 * whose last commit passes_open starts from. 0, or -1 with err. */
static int warm_start(trainer *t, char **table_dir, uint64_t *table_id, uint64_t *table_commits, char *err, size_t errlen)
{
    const train_opts *o = t->o;
    model_meta meta0;
    char msg[600];
    *table_dir = NULL;
    char *mf = modelfile_path(o->init);   /* a model's folder or its file */
    struct stat st;
    int bare = stat(mf, &st) < 0 && stat(o->init, &st) == 0 && S_ISDIR(st.st_mode);
    free(mf);
    if (bare) {
        /* no model: a table folder (ctrbox-table import's pretrained rows); its tables must be the
         * model's (the folder's layout, checked when it opens), the dense layers start afresh */
        *table_dir = xstrdup(o->init);
        *table_id = *table_commits = 0;
        return 0;
    }
    /* data the model does not read: what differs, and the input it was trained on (a warm start
     * needs the input options the model was trained with: --schema, --num, --field-offsets) */
    if (modelfile_read_meta(o->init, &meta0, msg, sizeof msg) == 0 && !schema_equal(&meta0.schema, &t->meta.schema)) {
        char diff[300], want[600];
        score_schema_diff(&t->meta.schema, &meta0, diff, sizeof diff);
        score_describe_input(&meta0, want, sizeof want);
        snprintf(err, errlen, "%s: %s; the --init model %s was trained on %s: give the input options it was trained with",
                 o->train[0], diff, o->init, want);
        model_meta_free(&meta0);
        return -1;
    }
    model_meta_free(&meta0);
    if (modelfile_load_into(o->init, t->m, &t->meta.schema, &meta0, msg, sizeof msg) < 0) {
        snprintf(err, errlen, "--init %s: %s", o->init, msg);
        return -1;
    }
    t->meta.deltas_from = meta0.deltas_from;
    if (meta0.table_dir) {   /* its dense state and pass clock come from the folder's commit (passes_open) */
        *table_dir = xstrdup(meta0.table_dir);
        *table_id = meta0.table_id;
        *table_commits = meta0.table_commits;
    } else {
        t->rs.pass = meta0.passes;
        if (!meta0.passes)   /* a file of an older build: the newest pass any row saw */
            for (int i = 0; i < model_n_tables(t->m); i++)
                for (size_t r = 0; r < emb_table_rows(model_table(t->m, i)); r++)
                    if (emb_table_head(model_table(t->m, i), (uint32_t)r)->last_pass > t->rs.pass)
                        t->rs.pass = emb_table_head(model_table(t->m, i), (uint32_t)r)->last_pass;
        if (!o->quiet && dist_rank() == 0)   /* said once, by the first of several processes */
            fprintf(stderr, "warm start from %s: pass %u, step %llu\n", o->init, t->rs.pass,
                    (unsigned long long)model_step(t->m));
    }
    model_meta_free(&meta0);
    return 0;
}

/* With the pass tier in GPU memory, its counts so far (rows and bytes moved each way, the pieces a
 * pass was cut into for --gpu-mem-mb) as a line of the run's log. */
static void log_row_tier(trainer *t)
{
    const dev_rows *d = model_row_tier(t->m);
    if (!d || !t->log) return;
    const dev_rows_stats *s = dev_rows_stats_of(d);
    fprintf(t->log, "{\"kind\": \"gpu_rows\", \"epoch\": %d, \"pass\": %u, \"resident_rows\": %zu, \"capacity_rows\": %zu, "
            "\"row_bytes\": %zu, \"uploaded_rows\": %llu, \"upload_bytes\": %llu, \"upload_s\": %.4f, "
            "\"prefetched_rows\": %llu, \"prefetch_bytes\": %llu, \"prefetch_wait_s\": %.4f, \"downloaded_rows\": %llu, "
            "\"download_bytes\": %llu, \"download_s\": %.4f, \"stage_s\": %.4f, \"refills\": %llu}\n",
            t->rs.epoch, t->rs.pass, dev_rows_resident(d), dev_rows_capacity(d), dev_rows_stride(d) * sizeof(float),
            (unsigned long long)s->uploaded, (unsigned long long)s->upload_bytes, s->upload_s,
            (unsigned long long)s->prefetched, (unsigned long long)s->prefetch_bytes, s->prefetch_wait_s,
            (unsigned long long)s->downloaded, (unsigned long long)s->download_bytes, s->download_s, s->stage_s,
            (unsigned long long)s->flushes);
    fflush(t->log);
}

/* The epochs from start_epoch (skipping its first `skip` passes on a resume): 0 or -1 (said). */
static int train_epochs(trainer *t, int start_epoch, uint64_t skip)
{
    const train_opts *o = t->o;
    int ret = 0;
    for (t->rs.epoch = start_epoch; t->rs.epoch <= o->epochs; t->rs.epoch++) {
        t->t_epoch = now_sec();
        t->rows_epoch_prev = t->rs.rows_done;
        t->steps_epoch_prev = model_step(t->m);
        t->rows_last_print = UINT64_MAX;
        if (skip == 0) {
            t->rs.loss_sum = 0;
            t->rs.loss_n = 0;
        }
        passes_begin_epoch(t->ps, skip);
        skip = 0;
        const pass_item *p;
        while (ret == 0 && (p = passes_next(t->ps))) {
            double t0 = now_sec();
            /* with the rows in GPU memory: this pass's go up now, the next one's while this one trains */
            model_rows_prefetch(t->m, p->keys);
            model_rows_prefetch(t->m, p->next_keys);
            ret = p->rows ? train_rows(t, p->rows, p->order, p->lo, p->hi) : train_stream(t);
            model_rows_sync(t->m);   /* the rows the GPU changed go back before the commit */
            log_row_tier(t);
            if (ret == 0) ret = passes_done(t->ps, now_sec() - t0);
            if (ret == 0) progress(t, 0);
            if (ret == 0 && stop_asked && t->o->follow && passes_tiered(t->ps)) {   /* committed where it stands */
                ret = passes_flush(t->ps);
                t->stopped = 1;
                break;
            }
        }
        if (passes_end_epoch(t->ps) < 0) ret = -1;
        if (ret < 0 || t->stopped) break;
        progress(t, 1);
        int better = 1, stop = 0;
        if (t->have_valid) {
            better = evaluate_and_keep(t, "epoch");
            if (better < 0) {
                ret = -1;
                break;
            }
            if (!better) {
                t->rs.bad_epochs++;
                if (t->rs.bad_epochs >= o->patience) stop = 1;
                else if (o->lr_decay > 0 && o->lr_decay < 1) lr_drop(t);
            } else {
                t->rs.bad_epochs = 0;
            }
        } else {
            if (!o->quiet && isatty(2)) fprintf(stderr, "\n");   /* ends the progress line */
            log_eval(t, "epoch", NULL, now_sec() - t->t_start);
        }
        uint64_t shrunk;
        if (passes_commit_epoch(t->ps, &shrunk) < 0) {
            ret = -1;
            break;
        }
        /* shrink deleted rows on the host: the GPU forgets its copies (clean: synced after the last
         * pass, nothing trained since) */
        if (shrunk) model_rows_drop(t->m);
        if (shrunk && !o->quiet) fprintf(stderr, "shrink: %llu keys deleted\n", (unsigned long long)shrunk);
        /* with a table folder the model is the last committed pass; else the best (or the last) */
        if (!t->o->follow && (passes_tiered(t->ps) || !t->have_valid) && keep_model(t) < 0) {
            ret = -1;
            break;
        }
        small_data_hints(t);
        if (stop) {
            early_stop(t);
            break;
        }
    }
    /* a run resumed after its last commit still leaves its model file */
    if (ret == 0 && !t->o->follow && passes_tiered(t->ps) && keep_model(t) < 0) ret = -1;
    return ret;
}

/* --placement: where each layer of m's chain runs (cpu, gpu: every layer the trainer can place,
 * auto: the planner on profiles measured now, LAYER=DEV,...); places them and says so. */
static int place_layers(model *m, const train_opts *o, char *err, size_t errlen)
{
    plan_layer_shape sh[PLAN_MAX_LAYERS];
    int n = model_layer_chain(m, sh, PLAN_MAX_LAYERS);
    const char *why;
    const dense_backend *gpu = device_gpu(&why);
    plan_profile p;
    place_device dev[PLAN_MAX_LAYERS];
    if (!strcmp(o->placement, "auto")) {   /* timed */
        plan_measure(&p, model_kind_name(o->mc.kind), sh, n, o->mc.batch, dense_opt_moments(o->mc.dopt.kind), 3);
    } else {   /* nothing to time */
        plan_profile_init(&p, model_kind_name(o->mc.kind), sh, n, o->mc.batch);
    }
    for (int i = 0; i < n; i++)
        if (!gpu) p.l[i].time_s[PLACE_GPU] = -1;
    int r = 0;
    if (!strcmp(o->placement, "gpu")) {
        if (!gpu) {
            snprintf(err, errlen, "--placement gpu: no GPU here: %s", why);
            r = -1;
        }
        for (int i = 0; i < n; i++) dev[i] = PLACE_GPU;
    } else {
        r = plan_placement_parse(o->placement, &p, dev, err, errlen);
    }
    if (dist_launched()) {   /* every rank places as rank 0 planned: the dense replicas must step alike */
        if (!dist_all(r == 0)) {
            if (r == 0) snprintf(err, errlen, "--placement %s: another process cannot place the layers", o->placement);
            return -1;
        }
        dist_bcast(dev, (size_t)n * sizeof *dev);
    }
    if (r < 0 || model_place(m, dev, n, err, errlen) < 0) return -1;
    /* the pass tier: the rows in GPU memory while they train (one process; lanes take their rows
     * from their owners each step) */
    char tier_line[300] = "";
    if (model_rows_on_device(m) && !dist_launched() && !o->lanes && o->gpu_mem_mb != 0) {
        int dflt = o->gpu_mem_mb < 0;
        uint64_t budget = dflt ? device_gpu_memory() / 2 : (uint64_t)(o->gpu_mem_mb * 1048576.0);
        if (dflt && o->mc.emb_l2_all > 0) {   /* --emb-l2 updates every row each step: the rows stay on the host */
            snprintf(tier_line, sizeof tier_line, "the batch's rows go up each step (--emb-l2 updates them all on the cpu)");
        } else if (model_set_row_tier(m, budget, err, errlen) < 0) {
            return -1;
        } else {
            const dev_rows *d = model_row_tier(m);
            size_t cap = dev_rows_capacity(d), F = 0;
            for (int i = 0; i < n; i++)
                if (sh[i].kind == PL_POOL || sh[i].kind == PL_WIDE) F = (size_t)sh[i].F > F ? (size_t)sh[i].F : F;
            size_t need = (size_t)o->mc.batch * (F ? F : 1);
            if (cap < need) {
                snprintf(err, errlen, "--gpu-mem-mb %g holds %zu rows of %zu bytes; a batch of %d rows with %zu fields "
                         "reads up to %zu: give --gpu-mem-mb %.0f or more, or a smaller --batch",
                         dflt ? (double)budget / 1048576 : o->gpu_mem_mb, cap, dev_rows_stride(d) * sizeof(float), o->mc.batch, F, need,
                         ceil((double)need * dev_rows_stride(d) * sizeof(float) / 1048576));
                return -1;
            }
            snprintf(tier_line, sizeof tier_line, "the pass's rows in GPU memory: %.0f MB, %zu rows of %zu bytes",
                     (double)budget / 1048576, cap, dev_rows_stride(d) * sizeof(float));
        }
    }
    if (!o->quiet && dist_rank() == 0) {
        char line[1024];
        size_t used = 0;
        int used_all = 1;
        for (int i = 0; i < n; i++) used_all &= dev[i] != PLACE_CPU;
        for (int i = 0; i < n; i++)
            if (dev[i] != PLACE_CPU && used < sizeof line)
                used += (size_t)snprintf(line + used, sizeof line - used, "%s%s=%s", used ? "," : "", sh[i].name,
                                         place_device_name(dev[i]));
        fprintf(stderr, "ctrbox: placement %s: %s%s\n", o->placement, used ? line : "every layer on the cpu",
                !used ? "" : used_all ? " (every layer)" : " (the rest on the cpu)");
        if (*tier_line) fprintf(stderr, "ctrbox: %s\n", tier_line);
        if (gpu) fprintf(stderr, "ctrbox: %s\n", why);
    }
    return 0;
}

/* csv: a column whose values are nearly all distinct in the first rows is a row id, which trains
 * nothing (each key seen once) and costs a row a line: said once each, with the option to skip it. */
static void warn_id_columns(const train_opts *o, const data_schema *sc, const field_stats *fs, uint64_t rows)
{
    for (uint32_t f = 0; f < sc->n_fields; f++) {
        double share;
        if (sc->kind[f] != FIELD_CAT || !field_stats_looks_like_id(fs, f, &share)) continue;
        fprintf(stderr, "ctrbox: warning: column %s: %.1f%% distinct in the first %llu rows: a row id, no feature (each "
                "value trains once); skip it with --schema %s%s%s:skip\n", sc->names[f], share * 100,
                (unsigned long long)rows, o->schema_spec ? o->schema_spec : "", o->schema_spec ? "," : "", sc->names[f]);
    }
}

/* The schema of o's training input, and whether it has a row: 1, 0 (none), or -1 with err.
 * id_check (csv): the first block's columns that look like row ids are said. */
static int probe_input(const train_opts *o, int id_check, data_schema *schema, char *err, size_t errlen)
{
    data_source *s;
    source_opts in = o->in;
    in.report_bad = -1;   /* training reports them */
    if (source_open(&s, o->train, o->n_train, &in, err, errlen) < 0) return -1;
    const data_schema *sc = source_schema(s);
    /* the rows of a cbx file were parsed when it was converted: these options, given for it, were
     * dropped without a word, and the model trained on what the file held */
    const char *text_opt = o->schema_given ? "--schema" : o->offsets_given ? "--field-offsets" : NULL;
    if (source_format(s) == FMT_CBX && (text_opt || (o->num_given && o->in.num != sc->num_mode))) {
        if (text_opt)
            snprintf(err, errlen, "%s: a cbx file holds rows parsed when it was converted: %s applies to text (give it "
                     "to ctrbox-data convert)", o->train[0], text_opt);
        else
            snprintf(err, errlen, "%s: its integers were read as %s when it was converted: --num %s applies to text "
                     "(convert the text again with it)", o->train[0], sc->num_mode == NUM_BUCKET ? "buckets" : "log values",
                     o->in.num == NUM_BUCKET ? "bucket" : "log");
        source_close(s);
        return -1;
    }
    sample_block first;   /* an input without a single row trained "successfully" into a NaN loss */
    block_init(&first, sc->n_dense);
    int got = source_next(s, &first, err, errlen);
    if (got > 0 && id_check && o->in.fmt == FMT_CSV) {
        field_stats *fs = field_stats_create(sc->n_fields, first.rows);
        field_stats_add(fs, &first);
        warn_id_columns(o, sc, fs, first.rows);
        field_stats_destroy(fs);
    }
    block_free(&first);
    if (got >= 0) schema_copy(schema, sc);
    source_close(s);
    return got < 0 ? -1 : got > 0;
}

/* --follow: the watched folder, the entry being trained, the ledger of those trained. */
typedef struct {
    char *dir;                    /* absolute */
    char *name, *path;            /* the entry now */
    json_t *ledger;               /* saved in the model file (t->meta.follow) */
    uint64_t trained;             /* entries trained by this process */
    char *unsaved;                /* the log lines of entries trained since the model was kept, or NULL */
    double saved_at;
} follow_run;

/* The next entry to train, waited for: 1 with oc->train set to it (and its schema in *schema if
 * schema->n_fields is 0, else checked against it), 0 when the run ends (idle, or a signal), -1
 * (said). Entries without rows join the ledger, untrained. */
static int follow_next_entry(follow_run *fr, train_opts *oc, data_schema *schema, uint32_t pass)
{
    char err[1024];
    for (;;) {
        free(fr->name), free(fr->path);
        fr->name = fr->path = NULL;
        int r = follow_wait(fr->dir, oc->follow_done, fr->ledger, oc->follow_idle, &stop_asked, &fr->name, &fr->path, err,
                            sizeof err);
        if (r <= 0) {
            if (r < 0) fprintf(stderr, "ctrbox: %s\n", err);
            return r < 0 ? -1 : 0;
        }
        json_t *js = json_string(fr->name);   /* the ledger is JSON: a name must be UTF-8 */
        int utf8 = js != NULL;
        json_decref(js);
        if (!utf8) {
            fprintf(stderr, "ctrbox: %s: the name is not UTF-8 (the model's ledger is JSON): rename it; the same command "
                    "then goes on\n", fr->path);
            return -1;
        }
        oc->train = &fr->path;
        oc->n_train = 1;
        oc->in.order = schema->n_fields ? schema : NULL;   /* csv columns matched to the model's by name */
        data_schema us = { 0 };
        int got = probe_input(oc, 0, &us, err, sizeof err);
        if (got < 0) {
            fprintf(stderr, "ctrbox: %s (--follow: move it out of %s or fix it; the same command then goes on)\n", err,
                    fr->dir);
            return -1;
        }
        if (got == 0) {
            if (!oc->quiet) fprintf(stderr, "%s: no rows; nothing to train\n", fr->path);
            follow_ledger_add(fr->ledger, fr->name, 0, pass);
            schema_free(&us);
            continue;
        }
        if (schema->n_fields && !schema_equal(schema, &us)) {
            model_meta mm = { .schema = *schema, .input = oc->in };   /* a view: what the model trains on */
            char diff[300];
            score_schema_diff(&us, &mm, diff, sizeof diff);
            fprintf(stderr, "ctrbox: %s: %s (--follow: move it out of %s; the same command then goes on)\n", fr->path, diff,
                    fr->dir);
            schema_free(&us);
            return -1;
        }
        if (!schema->n_fields) schema_copy(schema, &us);
        schema_free(&us);
        return 1;
    }
}

/* Progressive validation: the entry's rows scored by the model before it trains on them. */
static int score_entry(trainer *t, const char *name)
{
    const train_opts *o = t->o;
    char err[1024];
    data_source *s = open_training(o);
    if (!s) return -1;
    sample_block b;
    block_init(&b, source_schema(s)->n_dense);
    size_t n = 0, cap = 0;
    float *lab = NULL;
    double *prob = NULL;
    int ret;
    double t0 = now_sec();
    while ((ret = source_next(s, &b, err, sizeof err)) > 0) {
        if (passes_pull(t->ps, &b) < 0) {
            ret = -2;
            break;
        }
        if (n + b.rows > cap) {
            cap = (n + b.rows) * 2;
            lab = xrealloc(lab, cap * sizeof *lab);
            prob = xrealloc(prob, cap * sizeof *prob);
        }
        model_predict_batch(t->m, &b, 0, b.rows, prob + n);
        memcpy(lab + n, b.label, b.rows * sizeof *lab);
        n += b.rows;
    }
    if (ret == -1) fprintf(stderr, "ctrbox: %s\n", err);
    block_free(&b);
    source_close(s);
    if (ret == 0) {
        t->unit_auc = metrics_auc(lab, prob, n);
        t->unit_logloss = metrics_logloss(lab, prob, n);
        char a[32], l[32];
        if (t->log) {
            char *q = jstr(name);
            fprintf(t->log, "{\"kind\": \"progressive\", \"file\": %s, \"pass\": %u, \"rows\": %zu, \"auc\": %s, "
                    "\"logloss\": %s, \"seconds\": %.3f}\n", q, t->rs.pass, n, jnum(a, sizeof a, t->unit_auc),
                    jnum(l, sizeof l, t->unit_logloss), now_sec() - t0);
            free(q);
            fflush(t->log);
        }
        if (!o->quiet)
            fprintf(stderr, "%s: %zu rows; scored before training on them (progressive validation): auc %.6f logloss %.6f\n",
                    name, n, t->unit_auc, t->unit_logloss);
    }
    free(lab);
    free(prob);
    return ret < 0 ? -1 : 0;
}

/* The model kept with the entries trained since the last save (their log lines then), and the
 * export, if one is due. 0 or -1 (said). */
static int follow_save(trainer *t, follow_run *fr)
{
    const train_opts *o = t->o;
    if (keep_model(t) < 0) return -1;
    fr->saved_at = now_sec();
    if (t->log && fr->unsaved) fputs(fr->unsaved, t->log), fflush(t->log);
    free(fr->unsaved);
    fr->unsaved = NULL;
    if (!o->export_dir) return 0;
    char err[1024], *wrote;
    if (follow_export(t->ps, &t->meta, o->export_dir, t->rs.pass, o->export_every, &wrote, err, sizeof err) < 0) {
        fprintf(stderr, "ctrbox: --export-dir: %s\n", err);
        return -1;
    }
    if (wrote && !o->quiet) fprintf(stderr, "exported %s\n", wrote);
    free(wrote);
    return 0;
}

/* An in-memory model is saved whole: while the folder holds more entries ready to train (a
 * backlog), the save waits for the last of them, up to this many seconds of training (what a kill
 * then trains again, from the last save: never an entry twice in the model). A model whose rows
 * are in a table folder is saved after each entry (a few kilobytes; its folder has moved on). */
enum { FOLLOW_SAVE_DEFER = 300 };

/* The entry is trained: it joins the ledger, saved with the model now or with the next entries'. */
static int follow_entry_done(trainer *t, follow_run *fr, uint32_t first_pass)
{
    const train_opts *o = t->o;
    follow_ledger_add(fr->ledger, fr->name, t->rs.rows_done, t->rs.pass);
    fr->trained++;
    char *line, *q = jstr(fr->name);
    if (asprintf(&line, "%s{\"kind\": \"file\", \"file\": %s, \"rows\": %llu, \"first_pass\": %u, \"pass\": %u, "
                 "\"trained\": %zu}\n", fr->unsaved ? fr->unsaved : "", q, (unsigned long long)t->rs.rows_done,
                 first_pass + 1, t->rs.pass, follow_ledger_count(fr->ledger)) < 0)
        die("out of memory");
    free(q);
    free(fr->unsaved);
    fr->unsaved = line;
    if (!o->quiet)
        fprintf(stderr, "trained %s: %llu rows, passes %u to %u; %zu entries of %s trained\n", fr->name,
                (unsigned long long)t->rs.rows_done, first_pass + 1, t->rs.pass, follow_ledger_count(fr->ledger), fr->dir);
    int backlog = 0;
    if (!passes_tiered(t->ps) && !o->export_dir && !stop_asked && now_sec() - fr->saved_at < FOLLOW_SAVE_DEFER) {
        char err[1024], *name, *path;
        int settling;
        backlog = follow_next(fr->dir, o->follow_done, fr->ledger, &name, &path, &settling, err, sizeof err) > 0;
        free(name), free(path);
    }
    return backlog ? 0 : follow_save(t, fr);
}

/* --follow, before anything is read: the folder, the signals, and where the run stands: a model in
 * the output folder that follows this folder goes on (oc->init), else a new run (from --init if
 * given). 0, or -1 (said). */
static int follow_begin(follow_run *fr, train_opts *oc)
{
    char err[1024];
    struct stat st;
    fr->dir = realpath(oc->follow, NULL);
    if (!fr->dir || stat(fr->dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "ctrbox: --follow %s: %s\n", oc->follow, fr->dir ? "not a folder" : strerror(errno));
        return -1;
    }
    struct sigaction sa = { 0 };
    sa.sa_handler = on_stop;   /* no SA_RESTART: a wait for new files ends at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    char mf[4200];
    snprintf(mf, sizeof mf, "%s/model.ctrbox", oc->out);
    if (access(mf, F_OK) == 0) {
        model_meta meta;
        if (modelfile_read_meta(oc->out, &meta, err, sizeof err) < 0) {
            fprintf(stderr, "ctrbox: %s\n", err);
            return -1;
        }
        int mine = meta.follow && follow_ledger_dir_is(meta.follow, fr->dir);
        if (mine) fr->ledger = json_deep_copy(meta.follow);
        model_meta_free(&meta);
        if (!mine) {
            fprintf(stderr, "ctrbox: --out %s holds a model that does not follow %s: give an empty folder (with --init %s "
                    "to start from that model)\n", oc->out, fr->dir, oc->out);
            return -1;
        }
        if (!oc->quiet)
            fprintf(stderr, "following %s: %zu entries trained, going on\n", fr->dir, follow_ledger_count(fr->ledger));
        oc->init = oc->out;
        oc->resume = 0;
    } else {
        fr->ledger = follow_ledger_new(fr->dir);
        oc->resume = oc->table_dir && !oc->init;   /* a first entry killed on the way goes on */
        if (!oc->quiet) fprintf(stderr, "following %s\n", fr->dir);
    }
    return 0;
}

/* --admit-mb not given: a warm start's model's (its sketch goes on), else ADMIT_MB_DEFAULT with
 * admission (exact counts, 0, in lanes: src/lanes.h). A model that cannot be read is said by the
 * warm start itself. */
static void resolve_admit(train_opts *oc, int in_lanes)
{
    if (oc->mc.admit_mb >= 0) return;
    oc->mc.admit_mb = oc->mc.min_show > 1 && !in_lanes ? ADMIT_MB_DEFAULT : 0;
    if (!oc->init) return;
    char *dir = modelfile_folder(oc->init), err[1024];
    model_meta meta;
    if (modelfile_read_meta(dir, &meta, err, sizeof err) == 0) {
        if (meta.cfg.min_show > 1) oc->mc.admit_mb = meta.cfg.admit_mb;
        model_meta_free(&meta);
    }
    free(dir);
}

/* Open the output folder's lock and logs (the lead rank of a job, or the only process): 0, or -1 (said). */
static int open_outputs(trainer *t, int *lock)
{
    const train_opts *o = t->o;
    if (mkdir(o->out, 0755) < 0 && errno != EEXIST) {
        fprintf(stderr, "ctrbox: %s: cannot create folder: %s\n", o->out, strerror(errno));
        return -1;
    }
    /* one trainer per model folder: two would both exit 0 with one model lost */
    *lock = folder_lock(o->out, MODEL_LOCK, 0);
    if (*lock < 0) {
        fprintf(stderr, "ctrbox: %s: %s\n", o->out,
                *lock == -EBUSY ? "another trainer (or ctrbox-table) is writing this model folder" : strerror(-*lock));
        return -1;
    }
    char logpath[4096];
    snprintf(logpath, sizeof logpath, "%s/log.jsonl", o->out);
    t->log = util_log_open(logpath, o->resume || o->init || o->follow);   /* a warm start run again after a kill goes on */
    if (!t->log) {
        fprintf(stderr, "ctrbox: %s: %s\n", logpath, strerror(errno));
        close(*lock);
        return -1;
    }
    snprintf(logpath, sizeof logpath, "%s/curve.jsonl", o->out);
    t->curve = util_log_open(logpath, o->resume || o->init || o->follow);   /* informational: a run goes on without it */
    if (o->init && !o->follow) {   /* a warm start: `ctrbox info`'s summary begins again here (runlog.h) */
        json_t *j = json_pack("{s:s, s:s}", "kind", "run", "init", o->init);
        char *line = j ? json_dumps(j, JSON_PRESERVE_ORDER) : NULL;
        if (line) {
            fprintf(t->log, "%s\n", line);
            if (t->curve) fprintf(t->curve, "%s\n", line);
        }
        free(line);
        json_decref(j);
    }
    return 0;
}

/* Save the model (rank 0): in memory, with every owner's rows gathered; with a table folder, naming
 * the sharded folder and its last commit (the rows stay there). Collective. 1, or <0 with err
 * (-2: this rank's own failure). */
static int lanes_keep(trainer *t, lanes *L, char *err, size_t errlen)
{
    int lead = dist_rank() == 0, r;
    if (lanes_tiered(L)) {
        lanes_table_stamp(L, &t->meta.table_id, &t->meta.table_commits);
        if (lead && !t->meta.table_dir && !(t->meta.table_dir = realpath(t->o->table_dir, NULL))) {
            snprintf(err, errlen, "%s: %s", t->o->table_dir, strerror(errno));
            return -2;
        }
    } else if ((r = lanes_collect(L, err, errlen)) < 0) {
        return r;
    }
    if (!dist_all(!lead || save_model(t) == 0)) {
        snprintf(err, errlen, "the model could not be saved");
        return -1;
    }
    return 1;
}

/* Evaluate in lanes over all ranks (kind "epoch" or "step"), log it, and, in memory, keep the model
 * when it is the best so far (lanes_keep; with a table folder the model kept is the last commit's,
 * saved at the end). 1 if better, 0 if not, or <0 with err (-2: this rank's own failure). */
static int lanes_eval(trainer *t, lanes *L, lanes_state *st, double *prob, const char *kind, char *err, size_t errlen)
{
    int lead = dist_rank() == 0;
    t->rs.epoch = st->epoch;
    t->rs.rows_done = st->rows_done;
    t->rs.loss_sum = st->epoch_loss;
    t->rs.loss_n = st->epoch_rows;
    eval_result er;
    int r = lanes_predict(L, &t->valid, prob, err, errlen);
    if (r < 0) return r;
    train_block_metrics(&t->valid, prob, -1, &er);
    log_eval(t, kind, &er, now_sec() - t->t_start);
    int better = !(er.auc <= st->best_auc);
    if (lead && !t->o->quiet)
        fprintf(stderr, "[%s] epoch %d step %llu: valid auc %.6f logloss %.6f%s\n", kind, st->epoch,
                (unsigned long long)model_step(t->m), er.auc, er.logloss, better ? " (best)" : "");
    if (!better) return 0;
    st->best_auc = t->rs.best_auc = er.auc;
    st->best_epoch = t->best_epoch = st->epoch;
    if (lanes_tiered(L)) return 1;   /* the model kept names the folder's last commit: saved at the end */
    return lanes_keep(t, L, err, errlen);
}

typedef struct {
    trainer *t;
    lanes *L;
    lanes_state *st;
    double *prob;
} lanes_hook_ctx;

/* --eval-every: after every that many steps (every rank alike: the step count is the job's). */
static int lanes_step_hook(void *ctx, char *err, size_t errlen)
{
    lanes_hook_ctx *c = ctx;
    if (model_step(c->t->m) % c->t->o->eval_every) return 0;
    int r = lanes_eval(c->t, c->L, c->st, c->prob, "step", err, errlen);
    return r < 0 ? r : 0;
}

/* Training in lanes (src/lanes.h), by every rank of an MPI job or by one process with --lanes:
 * epochs (with a table folder committed pass by pass, and resumed), the validation AUC over all
 * ranks' predictions, early stop and learning-rate drops as train_epochs decides them (every rank
 * computes the same metrics, so all decide alike); the model file (every owner's rows gathered)
 * is written by rank 0. Returns the exit status. */
static int train_lanes(trainer *t)
{
    train_opts lo = *t->o;   /* with a tiered --init, its folder is the table folder */
    const train_opts *o = &lo;
    char err[1024], *init_dir = NULL;
    uint64_t init_id = 0, init_commits = 0;
    int N = dist_size(), lead = dist_rank() == 0, G = o->lanes ? o->lanes : 12, lock = -1, ret = 0;
    if (G < N) {
        if (lead)
            fprintf(stderr, "ctrbox: --lanes %d: fewer lanes than the %d processes; give --lanes %d or more (a multiple "
                    "of %d keeps every process equally busy)\n", G, N, N, N);
        return 1;
    }
    if (!dist_all(!lead || open_outputs(t, &lock) == 0)) return 1;
    lanes_state st = { .epoch = 1, .best_auc = -INFINITY };
    lanes *L = NULL;
    double *prob = NULL;
    if (o->init) {   /* every rank reads the model file; each keeps the rows it owns (lanes_adopt_rows) */
        int r = warm_start(t, &init_dir, &init_id, &init_commits, err, sizeof err);
        if (r == 0 && init_dir) {   /* its rows are in a table folder: the job trains on in it, as one process does */
            char *want = realpath(init_dir, NULL), *given = o->table_dir ? realpath(o->table_dir, NULL) : NULL;
            if (!want) {
                snprintf(err, sizeof err, "--init %s: its table folder %s: %s", o->init, init_dir, strerror(errno));
                r = -1;
            } else if (o->table_dir && (!given || strcmp(want, given))) {
                snprintf(err, sizeof err, "--init %s: its rows are in the table folder %s; train on in that folder (give "
                         "it as --table-dir, or no --table-dir)", o->init, init_dir);
                r = -1;
            } else {
                lo.table_dir = init_dir;
                t->meta.table_dir = want;
                want = NULL;
            }
            free(want), free(given);
        }
        if (!dist_all(r == 0)) {
            if (lead) fprintf(stderr, "ctrbox: %s\n", err);
            ret = 1;
            goto done;
        }
        st.pass = t->rs.pass;
    }
    L = lanes_create(o, t->m, G, t->meta.schema.n_fields);
    if (init_dir) lanes_set_init_folder(L, init_id, init_commits);
    if (o->init) lanes_adopt_rows(L);
    int resumed = 0;
    /* a rank whose own folder or input fails stops the job: the others would wait for it */
#define FAIL_RANK(r)                                                                            \
    do {                                                                                        \
        if ((r) == -2 && N > 1) fprintf(stderr, "ctrbox: rank %d: %s\n", dist_rank(), err);    \
        else if (lead) fprintf(stderr, "ctrbox: %s\n", err); /* -1: every rank alike */         \
        if ((r) == -2 && N > 1) dist_abort(1);                                                  \
        ret = 1;                                                                                \
    } while (0)
    if (o->table_dir && lanes_open_tier(L, t->meta.schema.n_fields, &st, &resumed, err, sizeof err) < 0) {
        if (lead) fprintf(stderr, "ctrbox: %s\n", err);
        ret = 1;
        goto done;
    }
    if (resumed && lead && !o->quiet)
        fprintf(stderr, "resumed from %s: epoch %d after %llu shuffle buffer(s), pass %u, step %llu\n", o->table_dir,
                st.epoch, (unsigned long long)st.chunk, st.pass, (unsigned long long)model_step(t->m));
    t->t_start = t->iv_t0 = now_sec();
    if (lead && !o->quiet)
        fprintf(stderr, "training in %d lanes (global batch %d) on %d process%s\n", G, o->mc.batch, N, N > 1 ? "es" : "");
    prob = t->have_valid ? xmalloc(t->valid.rows * sizeof *prob) : NULL;
    lanes_hook_ctx hook = { t, L, &st, prob };
    if (o->eval_every && t->have_valid) lanes_set_step_hook(L, lanes_step_hook, &hook);
    for (; st.epoch <= o->epochs && ret == 0; st.epoch++, st.chunk = 0, st.epoch_loss = 0, st.epoch_rows = st.epoch_steps = 0) {
        lanes_stats x;
        double t0 = now_sec();
        int r = lanes_epoch(L, &st, &x, err, sizeof err);
        if (r < 0) {
            FAIL_RANK(r);
            break;
        }
        double sec = now_sec() - t0 - x.hook_s;   /* training alone */
        uint64_t shrunk;
        if ((r = lanes_shrink(L, &st, &shrunk, err, sizeof err)) < 0) {
            FAIL_RANK(r);
            break;
        }
        if (shrunk && lead && !o->quiet) fprintf(stderr, "shrink: %llu keys deleted\n", (unsigned long long)shrunk);
        t->rs.epoch = st.epoch;
        t->rs.pass = st.pass;
        t->rs.train_seconds += sec;
        t->rs.rows_done = st.rows_done;
        t->rs.loss_sum = st.epoch_loss;
        t->rs.loss_n = st.epoch_rows;
        /* own_rows, own_bytes: the largest share */
        double ex[5] = { x.exchange_s, sec, (double)x.own_rows, (double)x.own_bytes, x.input_s };
        int64_t sums[3] = { (int64_t)x.bytes_sent, (int64_t)x.keys, (int64_t)x.input_bytes };
        dist_max_f64(ex, 5);
        dist_sum_i64(sums, 3);
        float *pp, *pg;
        size_t np;
        model_dense(t->m, &pp, &pg, &np);
        double loss = st.epoch_rows ? st.epoch_loss / (double)st.epoch_rows : NAN;
        if (t->log)
            fprintf(t->log, "{\"kind\": \"lanes\", \"epoch\": %d, \"ranks\": %d, \"lanes\": %d, \"steps\": %llu, \"rows\": %llu, "
                    "\"train_loss\": %.6f, \"seconds\": %.3f, \"samples_per_s\": %.1f, \"exchange_s\": %.3f, "
                    "\"exchange_bytes\": %lld, \"keys_asked\": %lld, \"dense_params\": %zu, \"records\": %llu, "
                    "\"own_rows_max\": %.0f, \"own_bytes_max\": %.0f, \"input_exchange_s\": %.3f, \"input_bytes\": %lld}\n",
                    st.epoch, N, G, (unsigned long long)x.steps, (unsigned long long)x.rows, loss, ex[1],
                    ex[1] > 0 ? (double)x.rows / ex[1] : 0.0, ex[0], (long long)sums[0], (long long)sums[1], np,
                    (unsigned long long)x.records, ex[2], ex[3], ex[4], (long long)sums[2]);
        if (lead && !o->quiet)
            fprintf(stderr, "epoch %d: %llu rows in %llu steps, train loss %.6f, %.0f samples/s (%.1f s exchanging)\n",
                    st.epoch, (unsigned long long)st.epoch_rows, (unsigned long long)st.epoch_steps, loss,
                    ex[1] > 0 ? (double)x.rows / ex[1] : 0.0, ex[0]);
        if (!t->have_valid) continue;
        r = lanes_eval(t, L, &st, prob, "epoch", err, sizeof err);
        if (r < 0) {
            FAIL_RANK(r);
            break;
        }
        if (r == 1) {
            st.bad_epochs = t->rs.bad_epochs = 0;
            continue;
        }
        t->rs.bad_epochs = ++st.bad_epochs;
        if (st.bad_epochs >= o->patience) {
            if (lead) early_stop(t);
            break;
        }
        if (o->lr_decay > 0 && o->lr_decay < 1) {
            if (lead) lr_drop(t);
            else model_scale_lr(t->m, o->lr_decay);
            lanes_set_sparse_lr(L, model_config_of(t->m)->sopt.lr);
        }
    }
    if (ret == 0 && (!t->have_valid || lanes_tiered(L))) {
        int r = lanes_keep(t, L, err, sizeof err);
        if (r < 0) FAIL_RANK(r);
    }
#undef FAIL_RANK
    if (ret == 0 && lead)
        fprintf(stderr, "done in %.1f s%s; %s %.6f; model in %s/model.ctrbox\n", now_sec() - t->t_start,
                t->stopped_early ? " (early stop)" : "", t->have_valid ? "best validation AUC" : "last training loss",
                t->have_valid ? st.best_auc : t->rs.loss_n ? t->rs.loss_sum / (double)t->rs.loss_n : NAN, o->out);
done:
    free(prob);
    free(init_dir);
    free(t->meta.table_dir);
    t->meta.table_dir = NULL;
    lanes_destroy(L);
    if (t->log) fclose(t->log);
    if (t->curve) fclose(t->curve);
    if (lock >= 0) close(lock);
    return ret;
}

int train_run(const train_opts *o0)
{
    train_opts oc = *o0;   /* --follow sets the training files to each entry in turn */
    const train_opts *o = &oc;
    trainer t = { .o = o, .rs = { .best_auc = -INFINITY }, .unit_auc = NAN };
    follow_run fr = { 0 };
    char err[1024];
    int in_lanes = o->lanes > 0 || dist_launched();
    if (in_lanes && lanes_check(o, err, sizeof err) < 0) {
        if (dist_rank() == 0) fprintf(stderr, "ctrbox: %s\n", err);
        return 1;
    }
    dense_cpu_preflight(o->threads);
    if (o->threads > 0) omp_set_num_threads(o->threads);
    /* training reads its files once per epoch (and first for the schema): a pipe or a device would
     * lose rows or hang on the second read */
    for (int i = 0; i < o->n_train; i++) {
        struct stat st;
        const char *path = io_input_path(o->train[i]);
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
            fprintf(stderr, "ctrbox: %s: not a regular file (a pipe, socket or device): training reads its files more "
                    "than once; write the data to a file first\n", path);
            return 1;
        }
    }
    /* the schema: from the first training file (and the validation set must agree). A warm start
     * reads csv columns by the names its model was trained on (a file whose columns moved was
     * refused as another layout); a model that cannot be read is said when it is loaded */
    model_meta im = { 0 };
    if (o->init && modelfile_read_meta(o->init, &im, err, sizeof err) == 0 && im.schema.n_fields) {
        if (o->follow) schema_copy(&t.meta.schema, &im.schema);   /* each entry is read as the model's */
        else oc.in.order = &im.schema;
    }
    if (o->follow) {
        int r = follow_begin(&fr, &oc);
        if (r == 0) r = follow_next_entry(&fr, &oc, &t.meta.schema, 0);
        model_meta_free(&im);
        if (r <= 0) {
            if (r == 0 && !o->quiet) fprintf(stderr, "nothing new in %s\n", fr.dir);
            free(fr.dir), free(fr.name), free(fr.path);
            if (fr.ledger) json_decref(fr.ledger);
            schema_free(&t.meta.schema);
            return r < 0;
        }
        t.meta.follow = fr.ledger;
    } else {
        int got = probe_input(o, !o->resume, &t.meta.schema, err, sizeof err);
        if (oc.in.order) oc.in.order = &t.meta.schema;   /* the same names, for every later read */
        model_meta_free(&im);
        if (got <= 0) {
            if (got == 0) snprintf(err, sizeof err, "%s%s: no rows to train on", o->train[0], o->n_train > 1 ? " ..." : "");
            fprintf(stderr, "ctrbox: %s\n", err);
            schema_free(&t.meta.schema);
            return 1;
        }
    }
    if (o->in.fmt == FMT_LIBFFM) {
        fprintf(stderr, "ctrbox: libffm input: convert it to cbx first (its field count is known only at the end)\n");
        return 1;
    }
    if (o->n_valid) {
        data_schema vs;
        source_opts vin = o->in;
        vin.order = &t.meta.schema;   /* csv columns matched to the training data's by name */
        if (train_read_rows(o->valid, o->n_valid, &vin, &t.valid, &vs, err, sizeof err) < 0) {
            fprintf(stderr, "ctrbox: %s\n", err);
            return 1;
        }
        /* names and kinds, not only their counts: a csv whose header named other columns (label,a,c
         * against label,a,b) was validated on as if it held the training fields, and the model kept
         * was chosen by that AUC */
        int same = schema_equal(&vs, &t.meta.schema);
        char diff[300] = "";
        uint32_t f = schema_first_diff(&vs, &t.meta.schema);
        if (!same && f < vs.n_fields && f < t.meta.schema.n_fields)
            snprintf(diff, sizeof diff, " (field %u is %s there, %s in the training data)", f + 1, vs.names[f],
                     t.meta.schema.names[f]);
        schema_free(&vs);
        if (!same || !t.valid.rows) {
            fprintf(stderr, "ctrbox: %s%s: %s%s\n", o->valid[0], o->n_valid > 1 ? " ..." : "",
                    !same ? "the validation data's fields differ from the training data's" : "no rows to validate on", diff);
            block_free(&t.valid);
            return 1;
        }
        t.have_valid = 1;
        size_t pos = 0;
        for (size_t i = 0; i < t.valid.rows; i++) pos += t.valid.label[i] > 0.5f;
        /* its AUC is nan every epoch: each counts as the best, no early stop, the last is kept */
        if ((pos == 0 || pos == t.valid.rows) && dist_rank() == 0)
            fprintf(stderr, "ctrbox: warning: %s%s holds only %s: its AUC is undefined (nan), so each epoch's model "
                    "counts as the best and the last is kept; give validation data with both labels\n", o->valid[0],
                    o->n_valid > 1 ? " ..." : "", pos ? "positives" : "negatives");
    }
    resolve_admit(&oc, in_lanes);
    if (in_lanes && o->mc.min_show > 1 && o->mc.admit_mb > 0) {   /* the warm start's sketch (lanes_check) */
        if (dist_rank() == 0)
            fprintf(stderr, "ctrbox: --init %s counts the shows of keys not yet admitted in a sketch (--admit-mb %g), "
                    "and training on several processes (mpirun, or --lanes) counts them exactly: go on with it in one "
                    "process\n", o->init, (double)o->mc.admit_mb);
        if (t.have_valid) block_free(&t.valid);
        schema_free(&t.meta.schema);
        return 1;
    }
    t.meta.cfg = o->mc;
    if (model_config_check(&o->mc, &t.meta.schema, err, sizeof err) < 0) {
        fprintf(stderr, "ctrbox: %s\n", err);
        return 1;
    }
    t.meta.input = o->in;
    if (o->in.fmt == FMT_CBX)   /* what the cbx files were converted from: eval may be given that text */
        t.meta.source_fmt = o->follow ? FMT_NONE : cbx_file_source(o->train[0]);
    t.meta.schema_spec = (char *)o->schema_spec;
    t.meta.offsets = (uint64_t *)o->offsets;
    t.m = model_create(&o->mc, &t.meta.schema);
    if (o->placement && strcmp(o->placement, "cpu") && place_layers(t.m, o, err, sizeof err) < 0) {
        if (dist_rank() == 0) fprintf(stderr, "ctrbox: %s\n", err);
        model_destroy(t.m);
        schema_free(&t.meta.schema);
        if (t.have_valid) block_free(&t.valid);
        return 1;
    }
    if (in_lanes) {
        int r = train_lanes(&t);
        model_destroy(t.m);
        schema_free(&t.meta.schema);
        if (t.have_valid) block_free(&t.valid);
        return r;
    }
    int lock;
    if (open_outputs(&t, &lock) < 0) return 1;
    t.t_start = t.iv_t0 = fr.saved_at = now_sec();
    int ret = 0, tiered = 0;
    char *init_dir = NULL, *abs = NULL;   /* a tiered --init model's table folder; the folder trained in */
    uint64_t init_id = 0, init_commits = 0;
    if (o->init && warm_start(&t, &init_dir, &init_id, &init_commits, err, sizeof err) < 0) {
        fprintf(stderr, "ctrbox: %s\n", err);
        ret = 1;
        goto done;
    }
    const char *tdir = o->table_dir ? o->table_dir : init_dir;
    abs = tdir ? realpath(tdir, NULL) : NULL;
    if (o->table_dir && !abs && mkdir(o->table_dir, 0755) == 0) abs = realpath(o->table_dir, NULL);
    if (tdir && !abs) {
        fprintf(stderr, "ctrbox: %s: cannot %s: %s\n", tdir, o->table_dir ? "create folder" : "open the table folder",
                strerror(errno));
        ret = 1;
        goto done;
    }
    if (init_dir) {   /* a tiered model trains on where its rows are */
        char *want = realpath(init_dir, NULL);
        int same = want && !strcmp(want, abs);
        free(want);
        if (!same) {
            fprintf(stderr, "ctrbox: --init %s: its rows are in the table folder %s; train on in that folder (give it "
                    "as --table-dir, or no --table-dir)\n", o->init, init_dir);
            ret = 1;
            goto done;
        }
    } else if (o->init && abs) {
        fprintf(stderr, "ctrbox: --init %s: its tables are in the model file; a warm start into a table folder is not "
                "supported (train on in memory, without --table-dir)\n", o->init);
        ret = 1;
        goto done;
    }
    t.meta.table_dir = abs;
    int start_epoch;
    uint64_t skip;
    model_meta init = { .table_dir = init_dir, .table_id = init_id, .table_commits = init_commits };
    if (passes_open(&t.ps, o, t.m, &t.meta.schema, abs, init_dir ? &init : NULL, t.log, &t.rs, &start_epoch, &skip) < 0)
        ret = 1;
    if (ret == 0 && o->follow && o->export_dir && follow_ledger_count(fr.ledger) && start_epoch == 1 && skip == 0 &&
        !passes_resumes_mid_pass(t.ps)) {
        /* killed between the model and its export: the model is the one kept, export it if due (a
         * run resumed in the middle of an entry, even in its first pass, has moved on: its next
         * export covers these passes; exported now, the delta would hold half a pass under the
         * pass's number, and the pass's end would find it done) */
        char *wrote;
        t.meta.passes = t.rs.pass;
        if (follow_export(t.ps, &t.meta, o->export_dir, t.rs.pass, o->export_every, &wrote, err, sizeof err) < 0) {
            fprintf(stderr, "ctrbox: --export-dir: %s\n", err);
            ret = 1;
        } else if (wrote && !o->quiet) {
            fprintf(stderr, "exported %s\n", wrote);
        }
        free(wrote);
    }
    while (ret == 0) {   /* once; with --follow, once per entry of the folder */
        uint32_t first_pass = t.rs.pass;
        t.unit_auc = t.unit_logloss = NAN;
        /* a resumed entry was scored before it was killed (the log has it) */
        if (o->follow && o->progressive && start_epoch == 1 && skip == 0 && score_entry(&t, fr.name) < 0) ret = 1;
        if (ret == 0 && train_epochs(&t, start_epoch, skip) < 0) ret = 1;
        if (ret || !o->follow || t.stopped) break;
        if (follow_entry_done(&t, &fr, first_pass) < 0) {
            ret = 1;
            break;
        }
        int r = stop_asked ? 0 : follow_next_entry(&fr, &oc, &t.meta.schema, t.rs.pass);
        if (r <= 0) {   /* the model is still at the end of the last entry trained: kept */
            ret = r < 0;
            if (fr.unsaved && follow_save(&t, &fr) < 0) ret = 1;
            break;
        }
        /* the next entry: as a warm start from the model just kept, without reading it back */
        t.rs = (run_state){ .pass = t.rs.pass, .best_auc = -INFINITY };
        start_epoch = 1;
        skip = 0;
        t.have_digest = 0;   /* the next entry's files */
        if (passes_restart(t.ps) < 0) ret = 1;
    }
    tiered = t.ps && passes_tiered(t.ps);   /* the model kept is then the last commit's, not the best epoch's */
    if (passes_close(t.ps) < 0) ret = 1;
    t.meta.table_dir = NULL;
    if (ret == 0 && o->follow && stop_asked && t.log) {
        char *q = jstr(t.stopped && fr.name ? fr.name : "");
        fprintf(t.log, "{\"kind\": \"stopped\", \"pass\": %u, \"trained\": %zu, \"entry\": %s}\n", t.rs.pass,
                follow_ledger_count(fr.ledger), q);
        free(q);
    }
done:
    free(abs);
    free(init_dir);
    if (ret == 0 && !o->quiet && o->follow)
        fprintf(stderr, "%s after %.1f s: %llu entries trained now, %zu in all; model in %s/model.ctrbox%s\n",
                t.stopped || stop_asked ? "stopped by a signal" : "nothing new", now_sec() - t.t_start,
                (unsigned long long)fr.trained, follow_ledger_count(fr.ledger), o->out,
                t.stopped ? " (the same command goes on from the last commit)" : "");
    else if (ret == 0) {   /* the summary, --quiet or not */
        char best[96] = "";
        if (t.have_valid && t.best_epoch && !tiered)
            snprintf(best, sizeof best, " at epoch %d (the model kept)", t.best_epoch);
        fprintf(stderr, "done in %.1f s%s; %s %.6f%s; model in %s/model.ctrbox\n", now_sec() - t.t_start,
                t.stopped_early ? " (early stop)" : "", t.have_valid ? "best validation AUC" : "last training loss",
                t.have_valid ? t.rs.best_auc : (t.rs.loss_n ? t.rs.loss_sum / (double)t.rs.loss_n : NAN), best, o->out);
    }
    free(fr.dir), free(fr.name), free(fr.path), free(fr.unsaved);
    if (fr.ledger) json_decref(fr.ledger);
    t.meta.follow = NULL;
    fclose(t.log);
    if (t.curve) fclose(t.curve);
    close(lock);
    model_destroy(t.m);
    schema_free(&t.meta.schema);
    if (t.have_valid) block_free(&t.valid);
    return ret;
}
