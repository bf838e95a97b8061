/*
 * metrics.h: offline evaluation metrics over (label, probability) pairs.
 *
 * AUC is exact: pairs are sorted by score and tied scores give each positive-negative pair half
 * credit (the Mann-Whitney statistic, as sklearn's roc_auc_score). Logloss clips probabilities to
 * [1e-15, 1 - 1e-15]. The caller owns the arrays; metrics_auc and the curves sort a copy.
 */
#ifndef CTRBOX_METRICS_H
#define CTRBOX_METRICS_H

#include <stddef.h>

/* NaN when only one class is present, or when a score is NaN (a diverged model). */
double metrics_auc(const float *label, const double *score, size_t n);
double metrics_logloss(const float *label, const double *prob, size_t n);

/* The ROC and precision-recall curves: a point at each distinct score from the highest down (tied
 * scores are one threshold), after (0, 0) and (recall 0, precision 1), thinned to at most max
 * points with the last kept: fpr, tpr, recall, precision (arrays of max >= 2). The average
 * precision (the sum over thresholds of recall gained times precision) in *ap. Returns the points;
 * one class only: the positive or negative rates are 0. */
size_t metrics_curves(const float *label, const double *score, size_t n, size_t max, double *fpr, double *tpr,
                      double *recall, double *precision, double *ap);
/* Calibration: the rows sorted by score and cut into nb buckets of equal size (nb <= n), lowest
 * first; each bucket's mean score in pred and its share of positives in observed. */
void metrics_calibration(const float *label, const double *score, size_t n, int nb, double *pred, double *observed);

#endif
