/*
 * metrics.c: exact AUC with ties, logloss, the ROC and precision-recall curves, calibration buckets.
 */
#include "metrics.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../io/util.h"

typedef struct {
    double score;
    float label;
} scored;

static int cmp_score(const void *a, const void *b)
{
    double x = ((const scored *)a)->score, y = ((const scored *)b)->score;
    return (x > y) - (x < y);
}

/* The pairs sorted by score, ascending (caller frees). */
static scored *sorted(const float *label, const double *score, size_t n)
{
    scored *v = xmalloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (scored){ score[i], label[i] };
    qsort(v, n, sizeof *v, cmp_score);
    return v;
}

double metrics_auc(const float *label, const double *score, size_t n)
{
    for (size_t i = 0; i < n; i++)   /* NaN orders against nothing: no ranking, no AUC */
        if (isnan(score[i])) return NAN;
    scored *v = sorted(label, score, n);
    double neg_below = 0, pos_total = 0, num = 0;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        double pos = 0, neg = 0;
        while (j < n && v[j].score == v[i].score) {
            if (v[j].label > 0.5f) pos++;
            else neg++;
            j++;
        }
        num += pos * neg_below + 0.5 * pos * neg;
        neg_below += neg;
        pos_total += pos;
        i = j;
    }
    free(v);
    if (pos_total == 0 || neg_below == 0) return NAN;
    return num / (pos_total * neg_below);
}

double metrics_logloss(const float *label, const double *prob, size_t n)
{
    const double eps = 1e-15;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        double p = prob[i] < eps ? eps : prob[i] > 1 - eps ? 1 - eps : prob[i];
        sum -= label[i] > 0.5f ? log(p) : log(1 - p);
    }
    return n ? sum / (double)n : NAN;
}

size_t metrics_curves(const float *label, const double *score, size_t n, size_t max, double *fpr, double *tpr,
                      double *recall, double *precision, double *ap)
{
    scored *v = sorted(label, score, n);
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) pos += v[i].label > 0.5f;
    size_t neg = n - pos, tp = 0, fp = 0, k = 0, every = n / (max - 1) + 1, due = every;   /* rows between points */
    double last_r = 0;
    *ap = 0;
    fpr[k] = tpr[k] = recall[k] = 0, precision[k] = 1, k++;
    for (size_t d = 0; d < n; d++) {   /* d-th highest score */
        const scored *x = &v[n - 1 - d];
        if (x->label > 0.5f) tp++;
        else fp++;
        if (d + 1 < n && v[n - 2 - d].score == x->score) continue;   /* ties: one threshold */
        double r = pos ? (double)tp / (double)pos : 0, p = (double)tp / (double)(tp + fp);
        *ap += (r - last_r) * p;
        last_r = r;
        if (d + 1 == n || (d + 1 >= due && k + 2 < max)) {   /* room is kept for the last */
            fpr[k] = neg ? (double)fp / (double)neg : 0, tpr[k] = r, recall[k] = r, precision[k] = p;
            k++;
            due = d + 1 + every;
        }
    }
    free(v);
    return k;
}

void metrics_calibration(const float *label, const double *score, size_t n, int nb, double *pred, double *observed)
{
    scored *v = sorted(label, score, n);
    size_t *count = xcalloc((size_t)nb, sizeof *count);
    for (int j = 0; j < nb; j++) pred[j] = observed[j] = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = i * (size_t)nb / n;
        pred[j] += v[i].score, observed[j] += v[i].label > 0.5f, count[j]++;
    }
    for (int j = 0; j < nb; j++) {
        pred[j] /= (double)(count[j] ? count[j] : 1);
        observed[j] /= (double)(count[j] ? count[j] : 1);
    }
    free(count);
    free(v);
}
