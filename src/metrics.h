/*
 * metrics.h: offline evaluation metrics over (label, probability) pairs.
 *
 * AUC is exact: pairs are sorted by score and tied scores give each positive-negative pair half
 * credit (the Mann-Whitney statistic, as sklearn's roc_auc_score). Logloss clips probabilities to
 * [1e-15, 1 - 1e-15]. The caller owns the arrays; metrics_auc sorts a copy.
 */
#ifndef CTRBOX_METRICS_H
#define CTRBOX_METRICS_H

#include <stddef.h>

/* NaN when only one class is present, or when a score is NaN (a diverged model). */
double metrics_auc(const float *label, const double *score, size_t n);
double metrics_logloss(const float *label, const double *prob, size_t n);

#endif
