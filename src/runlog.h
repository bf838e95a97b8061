/*
 * runlog.h: a training run's logs, one JSON object a line, written by train.c, read back for
 * `ctrbox info` and `ctrbox report`: their series and summary.
 *
 * DIR/log.jsonl: "epoch" and "step" (validation: auc, logloss), "pass" (one per pass: the SSD
 * tier's hits, bytes, waits and memory), "progressive" and "file" (--follow), "stopped", and "run"
 * (a warm start appending to the logs of the folder it started from; in curve.jsonl too): the
 * summary is of the lines after the last "run" line.
 * DIR/curve.jsonl: "train" (every step for the first 100, then every 10, 100, 1000: the loss since
 * the previous point, lr, speed), "lr" (a learning-rate drop), "early_stop". Unknown kinds are
 * skipped and curve.jsonl may be absent, so older runs read too.
 */
#ifndef CTRBOX_RUNLOG_H
#define CTRBOX_RUNLOG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double step, epoch, rows, seconds;
    double loss;             /* train: the mean loss since the previous train line; epoch: the epoch's */
    double auc, logloss;     /* validation (NaN: none) */
    double lr, samples_per_s;
} run_point;

typedef struct {
    double pass, epoch, rows, keys, hit_memory, hit_ssd, new_keys, bytes_read, bytes_written, wait_s, train_s,
        resident_bytes, rss_bytes, peak_rss_bytes;
} run_pass;

typedef struct {
    run_point *train, *eval;
    size_t n_train, n_eval;
    run_pass *pass;
    size_t n_pass;
    /* the summary */
    int epochs, best_epoch, early_stop;
    uint64_t rows, files;
    double seconds, best_auc, best_logloss, last_loss;
} run_log;

/* The logs of model folder dir: 0, or <0 with err (no log.jsonl, or a line that is not JSON: named
 * with its line number; a last line cut short by a kill is skipped). */
int run_log_read(run_log *l, const char *dir, char *err, size_t errlen);
void run_log_free(run_log *l);

#endif
