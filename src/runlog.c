/*
 * runlog.c: a run's log.jsonl read back (runlog.h).
 */
#include "runlog.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../io/util.h"

static double num(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : NAN;
}

/* A count that fits where it goes, or NAN: a damaged or edited log's "epoch": 3e9 was cast to an
 * int (undefined; "-2147483648 epochs") and "rows": 1e30 to a uint64_t. */
static double count(double x, double max) { return x >= 0 && x <= max ? x : NAN; }

static void *grow(void *v, size_t n, size_t size)
{
    return (n & (n - 1)) == 0 ? xrealloc(v, (n ? 2 * n : 1) * size) : v;   /* at 0, 1, 2, 4, ... */
}

static int read_file(run_log *l, const char *path, double *best, char *err, size_t errlen)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "%s: %s", path, strerror(e));
        return -e;
    }
    char *line = NULL;
    size_t cap = 0;
    double lanes_rows = 0, lanes_seconds = 0;   /* summed over the lanes' epoch lines */
    double rows = 0, seconds = 0;               /* the most of this file's lines since its last "run" line */
    int is_log = strstr(path, "/log.jsonl") != NULL;
    for (int no = 1; getline(&line, &cap, f) >= 0; no++) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        if (!o) {
            if (feof(f)) break;   /* a last line cut short by a kill: the lines before it stand */
            snprintf(err, errlen, "%s:%d: not a JSON line", path, no);
            free(line);
            fclose(f);
            return -EBADMSG;
        }
        const char *kind = json_string_value(json_object_get(o, "kind"));
        if (!kind) kind = "";
        run_point p = { num(o, "step"), count(num(o, "epoch"), INT_MAX), count(num(o, "rows"), 0x1p63), num(o, "seconds"), NAN,
                        num(o, "valid_auc"), num(o, "valid_logloss"), num(o, "lr"), num(o, "samples_per_s") };
        if (!strcmp(kind, "train")) {
            p.loss = num(o, "loss");
            l->train = grow(l->train, l->n_train, sizeof *l->train);
            l->train[l->n_train++] = p;
        } else if (!strcmp(kind, "epoch") || !strcmp(kind, "step")) {
            p.loss = num(o, "train_loss");
            l->eval = grow(l->eval, l->n_eval, sizeof *l->eval);
            l->eval[l->n_eval++] = p;
            if (!strcmp(kind, "epoch") && p.epoch > l->epochs) l->epochs = (int)p.epoch;
            if (!isnan(p.loss)) l->last_loss = p.loss;
            if (!isnan(p.auc) && p.auc > *best) {
                *best = p.auc;
                l->best_auc = p.auc;
                l->best_logloss = p.logloss;
                l->best_epoch = (int)p.epoch;
            }
        } else if (!strcmp(kind, "pass")) {
            run_pass q = { num(o, "pass"), num(o, "epoch"), num(o, "rows"), num(o, "keys"), num(o, "hit_memory"),
                           num(o, "hit_ssd"), num(o, "new_keys"), num(o, "bytes_read"), num(o, "bytes_written"),
                           num(o, "wait_s"), num(o, "train_s"), num(o, "resident_bytes"), num(o, "rss_bytes"),
                           num(o, "peak_rss_bytes") };
            l->pass = grow(l->pass, l->n_pass, sizeof *l->pass);
            l->pass[l->n_pass++] = q;
        } else if (!strcmp(kind, "lanes")) {   /* an epoch trained in lanes: its own rows and seconds */
            if (p.epoch > l->epochs) l->epochs = (int)p.epoch;
            if (!isnan(num(o, "train_loss"))) l->last_loss = num(o, "train_loss");
            if (!isnan(p.rows)) lanes_rows += p.rows;
            if (!isnan(p.seconds)) lanes_seconds += p.seconds;
            p.rows = lanes_rows, p.seconds = lanes_seconds;
        } else if (!strcmp(kind, "early_stop")) {
            l->early_stop = 1;
        } else if (!strcmp(kind, "file")) {
            l->files++;
        } else if (!strcmp(kind, "run")) {
            /* a warm start written into the folder of the model it started from: the summary is
             * this run's, not the largest numbers of both (the series keep both: steps go on) */
            lanes_rows = lanes_seconds = rows = seconds = 0;
            if (is_log) {
                l->epochs = l->best_epoch = 0;
                l->files = 0;
                l->best_auc = l->best_logloss = l->last_loss = NAN;
                *best = -INFINITY;
            } else {
                l->early_stop = 0;
            }
        }
        if (p.rows < 0x1p63 && strcmp(kind, "pass") && strcmp(kind, "file") && p.rows > rows) rows = p.rows;
        if (!isnan(p.seconds) && p.seconds > seconds) seconds = p.seconds;
        json_decref(o);
    }
    free(line);
    fclose(f);
    /* log.jsonl's, then curve.jsonl's: the most of both since their last "run" lines */
    if (rows > (double)l->rows) l->rows = (uint64_t)rows;
    if (seconds > l->seconds) l->seconds = seconds;
    return 0;
}

int run_log_read(run_log *l, const char *dir, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    l->best_auc = l->best_logloss = l->last_loss = NAN;
    double best = -INFINITY;
    char path[4200];
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    int ret = read_file(l, path, &best, err, errlen);
    snprintf(path, sizeof path, "%s/curve.jsonl", dir);
    if (ret == 0 && access(path, F_OK) == 0) ret = read_file(l, path, &best, err, errlen);
    if (ret < 0) run_log_free(l);
    return ret;
}

void run_log_free(run_log *l)
{
    free(l->train);
    free(l->eval);
    free(l->pass);
    memset(l, 0, sizeof *l);
}
