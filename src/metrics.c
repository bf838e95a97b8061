/*
 * metrics.c: exact AUC with ties, and logloss.
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

double metrics_auc(const float *label, const double *score, size_t n)
{
    for (size_t i = 0; i < n; i++)   /* NaN orders against nothing: no ranking, no AUC */
        if (isnan(score[i])) return NAN;
    scored *v = xmalloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = (scored){ score[i], label[i] };
    qsort(v, n, sizeof *v, cmp_score);
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
