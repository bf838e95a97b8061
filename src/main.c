/*
 * main.c: the ctrbox program. Commands so far:
 *   eval --scores FILE [--json]   AUC, logloss and rows of a "label<TAB>probability" file
 *                                 (on a generator's truth file: the oracle).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../io/parse.h"
#include "../io/stream.h"
#include "metrics.h"
#include "util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: ctrbox COMMAND [options]\n"
               "  eval --scores FILE [--json]   AUC, logloss, rows of label<TAB>probability lines\n");
}

/* Read label<TAB>probability lines; dies with file:line on a bad one. */
static size_t read_scores(const char *path, float **label_out, double **prob_out)
{
    char err[600];
    io_stream *s;
    if (io_stream_open(&s, path, 0, err, sizeof err) < 0) die("%s", err);
    size_t n = 0, cap = 1 << 16;
    float *label = xmalloc(cap * sizeof *label);
    double *prob = xmalloc(cap * sizeof *prob);
    io_line line;
    int ret;
    while ((ret = io_stream_next_line(s, &line)) > 0) {
        const char *tab = line.overlong ? NULL : memchr(line.ptr, '\t', line.len);
        double l, p;
        if (!tab || parse_number(line.ptr, (size_t)(tab - line.ptr), &l) < 0 || (l != 0 && l != 1) ||
            parse_number(tab + 1, line.len - (size_t)(tab - line.ptr) - 1, &p) < 0 || p < 0 || p > 1)
            die("%s:%llu: want 'label<TAB>probability' with label 0 or 1 and probability in [0, 1]", path,
                (unsigned long long)line.lineno);
        if (n == cap) {
            cap *= 2;
            label = xrealloc(label, cap * sizeof *label);
            prob = xrealloc(prob, cap * sizeof *prob);
        }
        label[n] = (float)l;
        prob[n] = p;
        n++;
    }
    if (ret < 0) die("%s", io_stream_error(s));
    io_stream_close(s);
    *label_out = label;
    *prob_out = prob;
    return n;
}

static void print_json_metrics(double auc, double logloss, size_t rows, size_t pos)
{
    json_t *o = json_object();
    json_object_set_new(o, "auc", isnan(auc) ? json_null() : json_real(auc));
    json_object_set_new(o, "logloss", isnan(logloss) ? json_null() : json_real(logloss));
    json_object_set_new(o, "rows", json_integer((json_int_t)rows));
    json_object_set_new(o, "positives", json_integer((json_int_t)pos));
    char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    puts(s);
    free(s);
    json_decref(o);
}

static int cmd_eval(int argc, char **argv)
{
    static const struct option opts[] = {
        { "scores", required_argument, 0, 's' }, { "json", no_argument, 0, 'j' }, { 0, 0, 0, 0 },
    };
    const char *scores = NULL;
    int json = 0, c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 's': scores = optarg; break;
        case 'j': json = 1; break;
        default: usage(stderr); return 2;
        }
    }
    if (!scores) die("eval: --scores FILE is required (model evaluation comes with training)");
    float *label;
    double *prob;
    size_t n = read_scores(scores, &label, &prob);
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) pos += label[i] > 0.5f;
    double auc = metrics_auc(label, prob, n), ll = metrics_logloss(label, prob, n);
    if (json) print_json_metrics(auc, ll, n, pos);
    else printf("auc %.6f  logloss %.6f  rows %zu  positives %zu\n", auc, ll, n, pos);
    free(label);
    free(prob);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    argv[1] = argv[0];
    argc--, argv++;
    if (!strcmp(cmd, "eval")) return cmd_eval(argc, argv);
    fprintf(stderr, "ctrbox: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
