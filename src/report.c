/*
 * report.c: `ctrbox report MODEL [--data TEST...] --out report.html`: one self-contained HTML page
 * (inline SVG, no script, no network) of a model's run and, with test data, of its predictions:
 *   training   loss over steps, validation AUC and logloss, the learning rate (curve.jsonl, log.jsonl)
 *   test data  ROC and precision-recall curves with their areas, a calibration diagram, score
 *              histograms per class, per-field importance (the AUC lost when a field is replaced
 *              by its default: a key no row has, or a dense value's mean)
 *   SSD tier   per pass: hit rates, MB read and written, the trainer's wait, memory (log.jsonl)
 *   speed      samples/s over time
 * Every chart is an <svg class="chart"> whose series carry data-points="N" and N points, so a test
 * can read the page back from a browser's DOM and check that each chart has its data.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "../io/util.h"
#include "commands.h"
#include "metrics.h"
#include "runlog.h"
#include "score.h"
#include "train.h"

static const char report_help[] =
    "usage: ctrbox report MODEL [--data TEST...] [--out FILE.html] [options]      (or --model MODEL)\n"
    "one self-contained HTML page (inline SVG, no script or network needed): the training loss, validation\n"
    "AUC/logloss and learning rate over steps; with --data, ROC and precision-recall curves with their areas,\n"
    "a calibration diagram, score histograms per class and per-field importance; for tiered runs the hit\n"
    "rates, MB read and written, wait and memory per pass; samples/s over time\n"
    "  MODEL                  a model folder, or its model.ctrbox file\n"
    "  --data FILE...         labeled test data, read as the model was trained (none: the run's charts only)\n"
    "  --out FILE.html        the page (MODEL/report.html), written atomically\n"
    "  --importance-rows N    rows of the test data used for per-field importance (100000; 0: none)\n"
    "  --table-dir DIR        a tiered model's table folder, where it is not where the model says\n"
    "  --format F ...         the input options below: the model's unless given\n";

/* ---- SVG charts ---- */

typedef struct {
    const char *name, *color;
    const double *x, *y;
    size_t n;
    int dots;        /* points as dots (else a line) */
    int dashed;
} series;

typedef struct {
    const char *id, *title, *xlabel, *ylabel;
    double x0, x1, y0, y1;   /* fixed ranges when x0 < x1 (y0 < y1); else from the data */
} chart;

static const char *palette[] = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b" };

static void html_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", f);
        else if (*s == '>') fputs("&gt;", f);
        else if (*s == '&') fputs("&amp;", f);
        else if (*s == '"') fputs("&quot;", f);
        else fputc(*s, f);
    }
}

/* A step of 1, 2 or 5 times a power of ten giving about n ticks over span. */
static double nice_step(double span, int n)
{
    double raw = span / n, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

static void tick_label(char *buf, size_t n, double v, double step)
{
    if (fabs(v) < step * 1e-6) v = 0;
    double a = fabs(v);
    if (a >= 1e6) snprintf(buf, n, "%.3gM", v / 1e6);
    else if (a >= 1e4) snprintf(buf, n, "%.3gk", v / 1e3);
    else snprintf(buf, n, "%.*f", step >= 1 ? 0 : (int)ceil(-log10(step)), v);
}

#define W 560
#define H 320
#define ML 64
#define MR 16
#define MT 46
#define MB 44

static int chart_has_data(const series *s, int ns)
{
    for (int i = 0; i < ns; i++)
        for (size_t k = 0; k < s[i].n; k++)
            if (isfinite(s[i].x[k]) && isfinite(s[i].y[k])) return 1;
    return 0;
}

static void svg_chart(FILE *f, const chart *c, const series *s, int ns)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < ns; i++)
        for (size_t k = 0; k < s[i].n; k++) {
            if (!isfinite(s[i].x[k]) || !isfinite(s[i].y[k])) continue;
            if (s[i].x[k] < x0) x0 = s[i].x[k];
            if (s[i].x[k] > x1) x1 = s[i].x[k];
            if (s[i].y[k] < y0) y0 = s[i].y[k];
            if (s[i].y[k] > y1) y1 = s[i].y[k];
        }
    if (c->x0 < c->x1) x0 = c->x0, x1 = c->x1;
    if (c->y0 < c->y1) y0 = c->y0, y1 = c->y1;
    if (!(x1 > x0)) {   /* one point in x: from 0 (or below it) to a little past it */
        x0 = x0 > 0 ? 0 : x0 - 1;
        x1 = x1 + fmax(1, fabs(x1) * 0.05);
    }
    if (!(y1 > y0)) y0 -= fabs(y0) * 0.05 + 0.5e-3, y1 += fabs(y1) * 0.05 + 0.5e-3;
    if (!(c->y0 < c->y1)) {   /* a little air above and below the data */
        double pad = (y1 - y0) * 0.05;
        y0 -= pad, y1 += pad;
    }
    double pw = W - ML - MR, ph = H - MT - MB;
#define PX(v) (ML + ((v) - x0) / (x1 - x0) * pw)
#define PY(v) (MT + ph - ((v) - y0) / (y1 - y0) * ph)
    fprintf(f, "<figure><svg class=\"chart\" id=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" role=\"img\"><title>", c->id, W, H, W, H);
    html_text(f, c->title);
    fprintf(f, "</title><rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/>", W, H);
    fprintf(f, "<text x=\"8\" y=\"18\" class=\"t\">");
    html_text(f, c->title);
    fputs("</text>", f);
    double xs = nice_step(x1 - x0, 6), ys = nice_step(y1 - y0, 5);
    char lab[32];
    for (double v = ceil(x0 / xs) * xs; v <= x1 + xs * 1e-9; v += xs) {
        tick_label(lab, sizeof lab, v, xs);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\" class=\"g\"/><text x=\"%.1f\" y=\"%.1f\" "
                "class=\"xl\">%s</text>", PX(v), MT, PX(v), MT + ph, PX(v), MT + ph + 14, lab);
    }
    for (double v = ceil(y0 / ys) * ys; v <= y1 + ys * 1e-9; v += ys) {
        tick_label(lab, sizeof lab, v, ys);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"g\"/><text x=\"%d\" y=\"%.1f\" "
                "class=\"yl\">%s</text>", ML, PY(v), ML + pw, PY(v), ML - 4, PY(v) + 4, lab);
    }
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%.0f\" height=\"%.0f\" class=\"frame\"/>", ML, MT, pw, ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"ax\">", ML + pw / 2, H - 6);
    html_text(f, c->xlabel);
    fprintf(f, "</text><text x=\"14\" y=\"%.1f\" class=\"ax\" transform=\"rotate(-90 14 %.1f)\">", MT + ph / 2, MT + ph / 2);
    html_text(f, c->ylabel);
    fputs("</text>", f);
    double legend_x = ML;
    for (int i = 0; i < ns; i++) {
        const char *col = s[i].color ? s[i].color : palette[i % 6];
        size_t n = 0;
        for (size_t k = 0; k < s[i].n; k++) n += isfinite(s[i].x[k]) && isfinite(s[i].y[k]);
        fprintf(f, "<g class=\"series\" data-name=\"");
        html_text(f, s[i].name);
        fprintf(f, "\" data-points=\"%zu\">", n);
        if (s[i].dots) {
            for (size_t k = 0; k < s[i].n; k++)
                if (isfinite(s[i].x[k]) && isfinite(s[i].y[k]))
                    fprintf(f, "<circle class=\"pt\" cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>", PX(s[i].x[k]),
                            PY(s[i].y[k]), col);
        } else {
            fprintf(f, "<polyline class=\"ln\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s points=\"", col,
                    s[i].dashed ? " stroke-dasharray=\"5 4\"" : "");
            for (size_t k = 0; k < s[i].n; k++)
                if (isfinite(s[i].x[k]) && isfinite(s[i].y[k])) fprintf(f, "%.1f,%.1f ", PX(s[i].x[k]), PY(s[i].y[k]));
            fputs("\"/>", f);
        }
        fputs("</g>", f);
        /* the legend: a row between the title and the plot */
        fprintf(f, "<rect x=\"%.0f\" y=\"27\" width=\"10\" height=\"10\" fill=\"%s\"/><text x=\"%.0f\" y=\"36\" class=\"lg\">",
                legend_x, col, legend_x + 14);
        html_text(f, s[i].name);
        fputs("</text>", f);
        legend_x += 30 + 6.2 * (double)strlen(s[i].name);
    }
    fputs("</svg></figure>\n", f);
#undef PX
#undef PY
}

/* A chart, or one line saying why there is none (a chart is never drawn empty). */
static void chart_or_note(FILE *f, const chart *c, const series *s, int ns, const char *why)
{
    if (chart_has_data(s, ns)) {
        svg_chart(f, c, s, ns);
        return;
    }
    fputs("<p class=\"none\">", f);
    html_text(f, c->title);
    fputs(": ", f);
    html_text(f, why);
    fputs("</p>\n", f);
}

/* Horizontal bars, one per name, largest first as given. */
static void svg_bars(FILE *f, const char *id, const char *title, const char *xlabel, char **names, const double *v, int n)
{
    int rowh = 18, h = MT + rowh * n + 40, lw = 150, pw = W - lw - 60;
    double hi = 0, lo = 0;
    for (int i = 0; i < n; i++) hi = fmax(hi, v[i]), lo = fmin(lo, v[i]);
    if (hi - lo <= 0) hi = lo + 1e-4;
    fprintf(f, "<figure><svg class=\"chart\" id=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" role=\"img\"><title>", id, W, h, W, h);
    html_text(f, title);
    fprintf(f, "</title><rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#fff\"/><text x=\"8\" y=\"20\" class=\"t\">",
            W, h);
    html_text(f, title);
    fprintf(f, "</text><g class=\"series\" data-name=\"bars\" data-points=\"%d\">", n);
    double zero = lw + (0 - lo) / (hi - lo) * pw;
    for (int i = 0; i < n; i++) {
        double x = lw + (fmin(v[i], 0) - lo) / (hi - lo) * pw, wd = fabs(v[i]) / (hi - lo) * pw;
        int y = MT + rowh * i;
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"yl\">", lw - 6, y + 13);
        html_text(f, names[i]);
        fprintf(f, "</text><rect class=\"bar\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%d\" class=\"lg\">%.5f</text>", x, y + 2, wd < 0.5 ? 0.5 : wd, rowh - 4,
                v[i] >= 0 ? palette[0] : palette[1], lw + pw + 4.0, y + 13, v[i]);
    }
    fprintf(f, "</g><line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#333\"/>", zero, MT, zero, MT + rowh * n);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"ax\">", lw + pw / 2.0, h - 8);
    html_text(f, xlabel);
    fputs("</text></svg></figure>\n", f);
}

/* ---- the page ---- */

static const char style[] =
    "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1180px;color:#222}"
    "h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;margin-top:32px}"
    "figure{display:inline-block;margin:6px}svg .t{font:bold 13px sans-serif}svg .xl{font:11px sans-serif;"
    "text-anchor:middle}svg .yl{font:11px sans-serif;text-anchor:end}svg .ax{font:12px sans-serif;text-anchor:middle}"
    "svg .lg{font:11px sans-serif}svg .g{stroke:#eee}svg .frame{fill:none;stroke:#888}"
    "table{border-collapse:collapse}td,th{padding:2px 10px;border-bottom:1px solid #eee;text-align:right}"
    "td:first-child,th:first-child{text-align:left}.none{color:#777}.kv td{text-align:left}";

static void kv(FILE *f, const char *k, const char *v)
{
    fputs("<tr><td>", f);
    html_text(f, k);
    fputs("</td><td>", f);
    html_text(f, v);
    fputs("</td></tr>", f);
}

/* A run's points as one array per quantity, for the charts. */
typedef struct {
    double *step, *loss, *auc, *logloss, *lr, *seconds, *sps;
} point_columns;

static point_columns columns(const run_point *p, size_t n)
{
    point_columns c;
    double **all[] = { &c.step, &c.loss, &c.auc, &c.logloss, &c.lr, &c.seconds, &c.sps };
    for (int k = 0; k < 7; k++) *all[k] = xmalloc((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) {
        c.step[i] = p[i].step, c.loss[i] = p[i].loss, c.auc[i] = p[i].auc, c.logloss[i] = p[i].logloss;
        c.lr[i] = p[i].lr, c.seconds[i] = p[i].seconds, c.sps[i] = p[i].samples_per_s;
    }
    return c;
}

static void columns_free(point_columns *c)
{
    free(c->step), free(c->loss), free(c->auc), free(c->logloss), free(c->lr), free(c->seconds), free(c->sps);
}

static void training_section(FILE *f, const run_log *lg)
{
    fputs("<h2>Training</h2>\n", f);
    size_t nt = lg->n_train, ne = lg->n_eval;
    point_columns tr = columns(lg->train, nt), ev = columns(lg->eval, ne);
    double *ts = tr.step, *tl = tr.loss, *tlr = tr.lr, *tsec = tr.seconds, *tsps = tr.sps;
    double *es = ev.step, *el = ev.loss, *ea = ev.auc, *ell = ev.logloss, *elr = ev.lr, *esec = ev.seconds, *esps = ev.sps;
    series loss[2] = { { "loss since the previous point", NULL, ts, tl, nt, 0, 0 },
                       { "epoch's mean loss", NULL, es, el, ne, 1, 0 } };
    chart c1 = { "train-loss", "Training loss (logloss)", "step", "loss", 0, 0, 0, 0 };
    chart_or_note(f, &c1, loss, 2, "no training points in the log");
    series va[1] = { { "validation AUC", NULL, es, ea, ne, 1, 0 } };
    chart c2 = { "valid-auc", "Validation AUC", "step", "AUC", 0, 0, 0, 0 };
    chart_or_note(f, &c2, va, 1, "no validation data in this run (train --valid)");
    series vl[1] = { { "validation logloss", palette[1], es, ell, ne, 1, 0 } };
    chart c3 = { "valid-logloss", "Validation logloss", "step", "logloss", 0, 0, 0, 0 };
    chart_or_note(f, &c3, vl, 1, "no validation data in this run (train --valid)");
    series lr[1] = { nt ? (series){ "dense learning rate", palette[2], ts, tlr, nt, 0, 0 }
                        : (series){ "dense learning rate", palette[2], es, elr, ne, 1, 0 } };
    chart c4 = { "lr", "Learning rate", "step", "lr", 0, 0, 0, 0 };
    chart_or_note(f, &c4, lr, 1, "no learning-rate points in the log");
    fputs("<h2>Speed</h2>\n", f);
    series sp[1] = { nt ? (series){ "samples/s", palette[4], tsec, tsps, nt, 0, 0 }
                        : (series){ "samples/s", palette[4], esec, esps, ne, 1, 0 } };
    chart c5 = { "speed", "Samples per second over the run", "seconds since the start", "samples/s", 0, 0, 0, 0 };
    chart_or_note(f, &c5, sp, 1, "no timed points in the log");
    columns_free(&tr);
    columns_free(&ev);
}

static void tier_section(FILE *f, const run_log *lg)
{
    fputs("<h2>SSD tier, per pass</h2>\n", f);
    size_t n = 0;
    for (size_t i = 0; i < lg->n_pass; i++) n += !isnan(lg->pass[i].hit_memory);
    if (!n) {
        fputs("<p class=\"none\">No pass lines with tier statistics: the run kept its rows in memory (train "
              "--table-dir trains with the SSD tier).</p>\n", f);
        return;
    }
    size_t m = lg->n_pass;
    double *p = xmalloc(m * sizeof *p), *hm = xmalloc(m * sizeof *p), *hs = xmalloc(m * sizeof *p),
           *nk = xmalloc(m * sizeof *p), *rd = xmalloc(m * sizeof *p), *wr = xmalloc(m * sizeof *p),
           *wt = xmalloc(m * sizeof *p), *res = xmalloc(m * sizeof *p), *rss = xmalloc(m * sizeof *p),
           *peak = xmalloc(m * sizeof *p);
    for (size_t i = 0; i < m; i++) {
        const run_pass *q = &lg->pass[i];
        p[i] = (double)(i + 1), hm[i] = q->hit_memory, hs[i] = q->hit_ssd, nk[i] = q->new_keys;
        rd[i] = q->bytes_read / 1e6, wr[i] = q->bytes_written / 1e6, wt[i] = q->wait_s;
        res[i] = q->resident_bytes / 1e6, rss[i] = q->rss_bytes / 1e6, peak[i] = q->peak_rss_bytes / 1e6;
    }
    series h[3] = { { "in memory", NULL, p, hm, m, 0, 0 }, { "read from the SSD", NULL, p, hs, m, 0, 0 },
                    { "new keys", NULL, p, nk, m, 0, 1 } };
    chart c1 = { "tier-hits", "Where a pass's keys were found (share of its keys)", "pass (in the log's order)", "share",
                 0, 0, 0, 1 };
    chart_or_note(f, &c1, h, 3, "no hit rates");
    series io[2] = { { "MB read", NULL, p, rd, m, 0, 0 }, { "MB written", NULL, p, wr, m, 0, 0 } };
    chart c2 = { "tier-io", "MB read and written per pass", "pass", "MB", 0, 0, 0, 0 };
    chart_or_note(f, &c2, io, 2, "no byte counts");
    series w[1] = { { "trainer's wait for rows (s)", palette[3], p, wt, m, 0, 0 } };
    chart c3 = { "tier-wait", "Seconds the trainer waited for rows, per pass", "pass", "seconds", 0, 0, 0, 0 };
    chart_or_note(f, &c3, w, 1, "no waits");
    series mem[3] = { { "rows in memory (MB)", NULL, p, res, m, 0, 0 }, { "RSS (MB)", NULL, p, rss, m, 0, 0 },
                      { "peak RSS (MB)", NULL, p, peak, m, 0, 1 } };
    chart c4 = { "tier-memory", "Memory per pass", "pass", "MB", 0, 0, 0, 0 };
    chart_or_note(f, &c4, mem, 3, "no memory figures");
    free(p), free(hm), free(hs), free(nk), free(rd), free(wr), free(wt), free(res), free(rss), free(peak);
}

/* The AUC of m on b with field f at its default: a key no row has (categorical; fixed per field),
 * which reads what an unseen key reads at inference (emb_table_lookup: the field's default row
 * under admission, else zeros), or the field's mean over b (dense). */
static double auc_without(model *m, const sample_block *b, const data_schema *sc, uint32_t f, double *prob)
{
    sample_block c;
    block_init(&c, b->n_dense);
    block_append(&c, b, 0, b->rows);
    if (sc->kind[f] == FIELD_NUM) {
        int slot = sc->dense_slot[f];
        double sum = 0;
        for (size_t r = 0; r < c.rows; r++) sum += c.dense[r * c.n_dense + (size_t)slot];
        float mean = c.rows ? (float)(sum / (double)c.rows) : 0;
        for (size_t r = 0; r < c.rows; r++) c.dense[r * c.n_dense + (size_t)slot] = mean;
    } else {
        uint64_t absent = XXH64("ctrbox: a field at its default", 30, f);
        for (size_t i = 0; i < c.nnz; i++)
            if (c.field[i] == f) c.key[i] = absent;
    }
    eval_result r;
    train_evaluate_block(m, &c, prob, -1, &r);
    block_free(&c);
    return r.auc;
}

static void test_section(FILE *f, model *m, const model_meta *meta, const sample_block *b, const char *what,
                         size_t imp_rows)
{
    fputs("<h2>Test data</h2>\n<p>", f);
    html_text(f, what);
    double *prob = xmalloc(b->rows * sizeof *prob);
    eval_result r;
    train_evaluate_block(m, b, prob, -1, &r);
    int one_class = r.positives == 0 || r.positives == r.rows;   /* AUC, ROC, PR and importance are undefined */
    if (one_class)
        fprintf(f, ": %zu rows, all %s: one class, so no AUC, ROC, precision-recall curve or field importance. logloss "
                "%.6f.</p>\n", r.rows, r.positives ? "clicked" : "not clicked", r.logloss);
    else
        fprintf(f, ": %zu rows, %zu positives (CTR %.5f). AUC %.6f, logloss %.6f, calibration %.4f.</p>\n", r.rows,
                r.positives, (double)r.positives / (double)r.rows, r.auc, r.logloss, r.calibration);
    size_t max = 400;
    double *fpr = xmalloc(max * sizeof(double)), *tpr = xmalloc(max * sizeof(double)), *rec = xmalloc(max * sizeof(double)),
           *prec = xmalloc(max * sizeof(double)), ap;
    size_t k = metrics_curves(b->label, prob, b->rows, max, fpr, tpr, rec, prec, &ap);
    double diag[2] = { 0, 1 };
    char t1[96], t2[128];
    if (one_class) snprintf(t1, sizeof t1, "ROC curve");
    else snprintf(t1, sizeof t1, "ROC curve (AUC %.4f)", r.auc);
    if (one_class) k = 0;
    series roc[2] = { { "the model", NULL, fpr, tpr, k, 0, 0 }, { "chance", "#999", diag, diag, k ? 2 : 0, 0, 1 } };
    chart c1 = { "roc", t1, "false positive rate", "true positive rate", 0, 1, 0, 1 };
    chart_or_note(f, &c1, roc, 2, "none: the test data has one class");
    snprintf(t2, sizeof t2, "Precision-recall (area: average precision %.4f)", ap);
    double base[2] = { (double)r.positives / (double)r.rows, (double)r.positives / (double)r.rows };
    series pr[2] = { { "the model", NULL, rec, prec, k, 0, 0 }, { "the CTR (chance)", "#999", diag, base, k ? 2 : 0, 0, 1 } };
    chart c2 = { "pr", t2, "recall", "precision", 0, 1, 0, 1 };
    chart_or_note(f, &c2, pr, 2, "none: the test data has one class");

    /* calibration: 20 buckets of equal rows by predicted CTR */
    int nb = b->rows >= 2000 ? 20 : b->rows >= 200 ? 10 : 1;
    double *bp = xmalloc((size_t)nb * sizeof *bp), *bo = xmalloc((size_t)nb * sizeof *bo), hi = 0;
    metrics_calibration(b->label, prob, b->rows, nb, bp, bo);
    for (int j = 0; j < nb; j++) hi = fmax(hi, fmax(bp[j], bo[j]));
    double line[2] = { 0, hi * 1.05 };
    series cal[2] = { { "observed CTR of the bucket", NULL, bp, bo, (size_t)nb, 1, 0 },
                      { "perfect calibration", "#999", line, line, 2, 0, 1 } };
    chart c3 = { "calibration", "Calibration: predicted against observed CTR", "mean predicted CTR of the bucket",
                 "observed CTR", 0, hi * 1.05, 0, hi * 1.05 };
    chart_or_note(f, &c3, cal, 2, "no rows");
    char cal_text[64];
    if (isfinite(r.calibration)) snprintf(cal_text, sizeof cal_text, "%.4f", r.calibration);
    else snprintf(cal_text, sizeof cal_text, "undefined: no row was clicked");
    fprintf(f, "<p>Rows are sorted by predicted CTR and cut into %d buckets of equal size; each dot is a bucket's "
            "mean prediction against the share of its rows that were clicked. On the grey line the model is "
            "calibrated. <b>Calibration</b> is the mean predicted CTR over the observed CTR of all rows: 1 is "
            "calibrated, above 1 the model over-predicts clicks, below 1 it under-predicts (here %s).</p>\n",
            nb, cal_text);

    /* score histograms per class: the share of each class's rows in 40 bins of the score */
    double top = 0;
    for (size_t i = 0; i < b->rows; i++) top = fmax(top, prob[i]);
    if (!(top > 0)) top = 1;
    int bins = 40;
    double *hx = xmalloc((size_t)bins * sizeof *hx), *hp = xcalloc((size_t)bins, sizeof *hp),
           *hn = xcalloc((size_t)bins, sizeof *hn);
    for (size_t i = 0; i < b->rows; i++) {
        int j = (int)(prob[i] / top * bins);
        if (j >= bins) j = bins - 1;
        if (b->label[i] > 0.5f) hp[j] += 1;
        else hn[j] += 1;
    }
    size_t neg = r.rows - r.positives;
    for (int j = 0; j < bins; j++) {
        hx[j] = (j + 0.5) * top / bins;
        hp[j] /= (double)(r.positives ? r.positives : 1), hn[j] /= (double)(neg ? neg : 1);
    }
    series hist[2] = { { "clicked rows", NULL, hx, hp, (size_t)bins, 0, 0 },
                       { "not clicked", NULL, hx, hn, (size_t)bins, 0, 0 } };
    chart c4 = { "histogram", "Scores per class (each class's share of rows per bin)", "predicted CTR", "share of the class",
                 0, top, 0, 0 };
    chart_or_note(f, &c4, hist, 2, "no rows");

    /* per-field importance */
    const data_schema *sc = &meta->schema;
    if (imp_rows && sc->n_fields && !one_class) {
        sample_block sub;
        block_init(&sub, b->n_dense);
        block_append(&sub, b, 0, b->rows < imp_rows ? b->rows : imp_rows);
        double *p2 = xmalloc(sub.rows * sizeof *p2);
        eval_result base_r;
        train_evaluate_block(m, &sub, p2, -1, &base_r);
        double *drop = xmalloc(sc->n_fields * sizeof *drop);
        int *order = xmalloc(sc->n_fields * sizeof *order);
        for (uint32_t fi = 0; fi < sc->n_fields; fi++) {
            drop[fi] = base_r.auc - auc_without(m, &sub, sc, fi, p2);
            order[fi] = (int)fi;
        }
        for (uint32_t i = 1; i < sc->n_fields; i++)   /* largest drop first; ties by field order */
            for (uint32_t j = i; j > 0 && drop[order[j]] > drop[order[j - 1]]; j--) {
                int t = order[j];
                order[j] = order[j - 1], order[j - 1] = t;
            }
        char **names = xmalloc(sc->n_fields * sizeof *names);
        double *v = xmalloc(sc->n_fields * sizeof *v);
        for (uint32_t i = 0; i < sc->n_fields; i++) names[i] = sc->names[order[i]], v[i] = drop[order[i]];
        svg_bars(f, "importance", "Per-field importance: validation AUC lost without the field", "AUC lost", names, v,
                 (int)sc->n_fields);
        fprintf(f, "<p>Each field in turn is replaced by its default, on the first %zu rows (AUC %.6f with every field): "
                "a categorical field's keys by a key no row has (it reads what an unseen key reads: its field's default "
                "row with --min-show admission, else zeros), a dense value by its mean. "
                "The bar is the AUC lost; near 0 the model does not use the field, below 0 it does better without "
                "it.</p>\n", sub.rows, base_r.auc);
        free(names), free(v), free(drop), free(order), free(p2);
        block_free(&sub);
    }
    free(hx), free(hp), free(hn), free(bp), free(bo), free(fpr), free(tpr), free(rec), free(prec), free(prob);
}

int cmd_report(int argc, char **argv)
{
    static const struct option extra[] = {
        { "data", required_argument, 0, 'd' }, { "out", required_argument, 0, 'o' }, { "model", required_argument, 0, 'm' },
        { "importance-rows", required_argument, 0, 'i' }, { "table-dir", required_argument, 0, 'T' }, { 0, 0, 0, 0 },
    };
    struct option *opts = cli_options_with_input(extra);
    const cli_cmd cc = { "ctrbox", "report", report_help, opts, 1 };
    cli_help_check(&cc, argc, argv);
    cli_input in;
    cli_input_init(&in);
    char **data = xcalloc((size_t)argc + 1, sizeof *data);
    int n_data = 0, format_given = 0, c;
    const char *out = NULL, *table_dir = NULL, *model_opt = NULL;
    size_t imp_rows = 100000;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        if (c == CLI_OPT_FORMAT) format_given = 1;
        if (cli_input_option(&in, c, optarg)) continue;
        if (c == 'd') {
            data[n_data++] = optarg;
            cli_more_args(argc, argv, data, &n_data);
        } else if (c == 'o') {
            out = optarg;
        } else if (c == 'T') {
            table_dir = optarg;
        } else if (c == 'm') {
            model_opt = optarg;
        } else if (c == 'i') {
            char *end;
            double v = strtod(optarg, &end);
            if (*end || !(v >= 0 && v <= 1e12)) cli_fail(&cc, "--importance-rows %s: want a row count", optarg);
            imp_rows = (size_t)v;
        }
    }
    const char *dir = score_model_arg(&cc, argc, argv, model_opt);
    model *m;
    model_meta meta;
    const score_src src = { dir, NULL, NULL, 0, table_dir };
    score_load(&src, &m, &meta);
    char *folder = modelfile_folder(dir), *path = modelfile_path(dir), err[1024];
    char *def = NULL;
    if (!out && asprintf(&def, "%s/report.html", folder) < 0) die("out of memory");
    if (!out) out = def;
    if (score_output_check(out, &src, data, n_data, &meta, err, sizeof err) < 0) die("%s", err);
    sample_block b;
    if (n_data) {
        score_read(&src, m, &meta, data, n_data, &in, format_given, 0, NULL, &b, NULL);
        if (!b.rows) die("%s%s: no rows", data[0], n_data > 1 ? " ..." : "");
    }
    run_log lg;
    int have_log = run_log_read(&lg, folder, err, sizeof err) == 0;
    if (!have_log) fprintf(stderr, "ctrbox report: %s: the run's charts are left out\n", err);

    durable_file df;
    int r = durable_open(&df, out);
    if (r < 0) die("%s: cannot create: %s", out, strerror(-r));
    FILE *f = df.f;
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>ctrbox report: ", f);
    html_text(f, path);
    fprintf(f, "</title><style>%s</style></head><body>\n<h1>ctrbox report: ", style);
    html_text(f, path);
    fputs("</h1>\n<table class=\"kv\">", f);
    char v[900];
    time_t now = time(NULL);
    strftime(v, sizeof v, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    kv(f, "written", v);
    snprintf(v, sizeof v, "%s, dim %d, batch %d, %s lr %g (dense), %s lr %g (sparse)", model_kind_name(meta.cfg.kind),
             meta.cfg.dim, meta.cfg.batch, dense_opt_name(meta.cfg.dopt.kind), (double)meta.cfg.dopt.lr,
             sparse_opt_name(meta.cfg.sopt.kind), (double)meta.cfg.sopt.lr);
    kv(f, "model", v);
    score_describe_input(&meta, v, sizeof v);
    kv(f, "input", v);
    snprintf(v, sizeof v, "%u passes, %llu steps%s", meta.passes, (unsigned long long)model_step(m),
             meta.table_dir ? "; rows in a table folder" : "; rows in the model file");
    kv(f, "the model kept", v);
    if (have_log) {
        int w = snprintf(v, sizeof v, "%d epoch%s, %llu rows in %.1f s", lg.epochs, lg.epochs == 1 ? "" : "s", (unsigned long long)lg.rows, lg.seconds);
        if (lg.best_epoch)
            snprintf(v + w, sizeof v - (size_t)w, "; best validation AUC %.6f (logloss %.6f) at epoch %d%s", lg.best_auc,
                     lg.best_logloss, lg.best_epoch, lg.early_stop ? ", then early stop" : "");
        kv(f, "the run", v);
    }
    fputs("</table>\n", f);
    if (have_log) training_section(f, &lg);
    if (n_data) {
        snprintf(v, sizeof v, "%s%s", data[0], n_data > 1 ? " and more" : "");
        test_section(f, m, &meta, &b, v, imp_rows);
    } else {
        fputs("<h2>Test data</h2><p class=\"none\">No test data given (ctrbox report MODEL --data TEST): no ROC, "
              "precision-recall, calibration, histograms or field importance.</p>\n", f);
    }
    if (have_log) tier_section(f, &lg);
    fputs("</body></html>\n", f);
    if (ferror(f)) {
        durable_abort(&df);
        die("%s: write failed", out);
    }
    if ((r = durable_commit(&df)) < 0) die("%s: cannot write: %s", out, strerror(-r));
    printf("wrote %s\n", out);
    if (have_log) run_log_free(&lg);
    if (n_data) block_free(&b);
    free(def), free(folder), free(path), free(data), free(opts);
    cli_input_free(&in);
    model_meta_free(&meta);
    model_destroy(m);
    return 0;
}
