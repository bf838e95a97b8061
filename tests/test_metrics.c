/*
 * test_metrics.c: exact AUC against a brute-force pair count (ties half), logloss against values
 * computed by hand and by sklearn, and `ctrbox eval --scores`.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/metrics.h"
#include "helpers.h"

TestSuite(metrics, .fini = th_cleanup);

static double brute_auc(const float *l, const double *s, size_t n)
{
    double num = 0, pairs = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            if (l[i] > 0.5f && l[j] < 0.5f) {
                pairs++;
                num += s[i] > s[j] ? 1 : s[i] == s[j] ? 0.5 : 0;
            }
    return num / pairs;
}

Test(metrics, auc_matches_brute_force_with_ties)
{
    unsigned seed = 1;
    size_t sizes[] = { 2, 3, 10, 101, 1000 };
    int levels[] = { 2, 5, 1000000 };   /* few distinct scores: many ties */
    for (size_t a = 0; a < 5; a++)
        for (size_t k = 0; k < 3; k++) {
            size_t n = sizes[a];
            float *l = malloc(n * sizeof *l);
            double *s = malloc(n * sizeof *s);
            for (size_t i = 0; i < n; i++) {
                l[i] = (float)(i % 2 == 0 ? 1 : i % 4 == 1 ? 0 : rand_r(&seed) % 3 == 0);
                s[i] = (double)(rand_r(&seed) % levels[k]) / levels[k] + (l[i] > 0 ? 0.1 : 0);
            }
            double want = brute_auc(l, s, n), got = metrics_auc(l, s, n);
            cr_assert_float_eq(got, want, 1e-12, "n=%zu levels=%d: %f vs %f", n, levels[k], got, want);
            free(l), free(s);
        }
    float l1[] = { 1, 1 };
    double s1[] = { 0.2, 0.4 };
    cr_assert(isnan(metrics_auc(l1, s1, 2)), "one class: undefined");
}

Test(metrics, nan_scores_give_nan_not_a_hang, .timeout = 10)
{
    /* a diverged model scores NaN: the tie loop never advanced on NaN (NaN != NaN) and spun */
    float l[] = { 0, 1, 0, 1, 1 };
    double s[] = { 0.3, NAN, 0.3, 0.8, NAN };
    cr_assert(isnan(metrics_auc(l, s, 5)));
    cr_assert(isnan(metrics_logloss(l, s, 5)));
    double all_nan[] = { NAN, NAN, NAN, NAN, NAN };
    cr_assert(isnan(metrics_auc(l, all_nan, 5)));
    cr_assert(isnan(metrics_auc(l, s, 0)), "no rows: undefined");
}

Test(metrics, known_values)
{
    /* The classic example: 3 of 4 positive-negative pairs ordered right, AUC 0.75. Logloss
     * computed in Python: -(log(.9)+log(.6)+log(.35)+log(.8))/4 = 0.47228795380917615 */
    float l[] = { 0, 0, 1, 1 };
    double s[] = { 0.1, 0.4, 0.35, 0.8 };
    cr_assert_float_eq(metrics_auc(l, s, 4), 0.75, 1e-12);
    double want = -(log(0.9) + log(0.6) + log(0.35) + log(0.8)) / 4;
    cr_assert_float_eq(metrics_logloss(l, s, 4), want, 1e-12);
    cr_assert_float_eq(want, 0.47228795380917615, 1e-12);
    double ext[] = { 0, 1, 0, 1 };   /* clipped, finite */
    cr_assert(isfinite(metrics_logloss(l, ext, 4)));
}

Test(metrics, sklearn_reference_values)
{
    /* Made with Debian's python3-sklearn 1.2.1:
     *   from sklearn.metrics import roc_auc_score, log_loss
     *   y = [1,0,1,0,1,1,0,0,1,0]; p = [0.9,0.9,0.5,0.5,0.5,0.2,0.2,0.1,0.7,0.7]
     *   roc_auc_score(y, p) -> 0.5800000000000001; log_loss(y, p) -> 0.7985976878002512
     *   and for y = [0,0,1,1], p = [0.1,0.4,0.35,0.8]: 0.75 and 0.47228795380917615 */
    float y[10] = { 1, 0, 1, 0, 1, 1, 0, 0, 1, 0 };
    double p[10] = { 0.9, 0.9, 0.5, 0.5, 0.5, 0.2, 0.2, 0.1, 0.7, 0.7 };
    cr_assert_float_eq(metrics_auc(y, p, 10), 0.5800000000000001, 1e-12);
    cr_assert_float_eq(metrics_logloss(y, p, 10), 0.7985976878002512, 1e-12);
    float y4[4] = { 0, 0, 1, 1 };
    double p4[4] = { 0.1, 0.4, 0.35, 0.8 };
    cr_assert_float_eq(metrics_auc(y4, p4, 4), 0.75, 1e-12);
    cr_assert_float_eq(metrics_logloss(y4, p4, 4), 0.47228795380917615, 1e-12);
}

Test(metrics, eval_scores_cli)
{
    th_write_str(th_path("s.tsv"), "0\t0.1\n0\t0.4\n1\t0.35\n1\t0.8\n");
    char *out;
    cr_assert_eq(th_run(&out, "$B/ctrbox eval --scores s.tsv --json"), 0, "%s", out);
    cr_assert(strstr(out, "\"auc\": 0.75"), "%s", out);
    cr_assert(strstr(out, "\"rows\": 4"), "%s", out);
    cr_assert(strstr(out, "\"logloss\": 0.47228795"), "%s", out);
    free(out);
    th_write_str(th_path("bad.tsv"), "0\t0.1\n1\t1.5\n");
    cr_assert_neq(th_run(&out, "$B/ctrbox eval --scores bad.tsv"), 0);
    cr_assert(strstr(out, "bad.tsv:2:"), "error names file and line: %s", out);
    free(out);
    /* no rows: "auc nan  logloss nan  rows 0", exit 0, where eval of a model on empty data stops */
    th_write_str(th_path("none.tsv"), "");
    cr_assert_eq(th_run(&out, "$B/ctrbox eval --scores none.tsv"), 1, "%s", out);
    cr_assert(strstr(out, "none.tsv: no rows to evaluate"), "%s", out);
    free(out);
}

/* The curves against a direct count at every threshold: with room for every point, the trapezoids
 * under the ROC points are the exact AUC (ties count half), the average precision is the sum of
 * recall gained times precision, and calibration buckets hold the rows' means. */
Test(metrics, curves_and_calibration_match_a_direct_count)
{
    unsigned seed = 7;
    enum { N = 3000 };
    static float l[N];
    static double s[N];
    for (int i = 0; i < N; i++) {
        s[i] = (double)(rand_r(&seed) % 200) / 200.0;   /* many ties */
        l[i] = (float)(rand_r(&seed) % 1000 < 300 + (int)(s[i] * 400));
    }
    size_t max = N + 2;
    double *fpr = malloc(max * sizeof(double)), *tpr = malloc(max * sizeof(double)), *rec = malloc(max * sizeof(double)),
           *prec = malloc(max * sizeof(double)), ap;
    size_t k = metrics_curves(l, s, N, max, fpr, tpr, rec, prec, &ap);
    cr_assert_eq(k, 201, "a point per distinct score and the origin: %zu", k);
    cr_assert(fpr[0] == 0 && tpr[0] == 0 && fabs(fpr[k - 1] - 1) < 1e-12 && fabs(tpr[k - 1] - 1) < 1e-12);
    double area = 0;
    for (size_t i = 1; i < k; i++) area += (fpr[i] - fpr[i - 1]) * (tpr[i] + tpr[i - 1]) / 2;
    cr_assert(fabs(area - metrics_auc(l, s, N)) < 1e-9, "%.12f vs %.12f", area, metrics_auc(l, s, N));
    /* the average precision, thresholds counted directly from the highest score down */
    double pos = 0, want = 0, last_r = 0;
    for (int i = 0; i < N; i++) pos += l[i];
    for (int t = 199; t >= 0; t--) {
        double tp = 0, all = 0;
        for (int i = 0; i < N; i++)
            if (s[i] >= t / 200.0 - 1e-12) tp += l[i], all++;
        if (all == 0) continue;
        want += (tp / pos - last_r) * (tp / all);
        last_r = tp / pos;
    }
    cr_assert(fabs(ap - want) < 1e-9, "%.12f vs %.12f", ap, want);
    /* thinned: the ends stay, at most max points */
    size_t k2 = metrics_curves(l, s, N, 20, fpr, tpr, rec, prec, &ap);
    cr_assert(k2 <= 20 && k2 >= 10 && fabs(fpr[k2 - 1] - 1) < 1e-12, "%zu", k2);
    /* a perfect ranking: average precision 1 */
    float l2[4] = { 0, 1, 0, 1 };
    double s2[4] = { 0.1, 0.9, 0.2, 0.8 };
    metrics_curves(l2, s2, 4, 8, fpr, tpr, rec, prec, &ap);
    cr_assert(fabs(ap - 1) < 1e-12);
    /* calibration: buckets of equal size, ascending, whose means average to the whole */
    double pred[10], obs[10], mp = 0, mo = 0, all_p = 0, all_o = 0;
    metrics_calibration(l, s, N, 10, pred, obs);
    for (int j = 0; j < 10; j++) {
        if (j) cr_assert_geq(pred[j], pred[j - 1]);
        mp += pred[j] / 10, mo += obs[j] / 10;
    }
    for (int i = 0; i < N; i++) all_p += s[i] / N, all_o += (double)l[i] / N;
    cr_assert(fabs(mp - all_p) < 1e-9 && fabs(mo - all_o) < 1e-9);
    free(fpr), free(tpr), free(rec), free(prec);
}
