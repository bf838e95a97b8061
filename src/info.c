/*
 * info.c: `ctrbox info MODEL`: what a model is, from its file, its table folder and its log:
 * configuration, layers with shapes and parameter counts, tables with rows and bytes, training
 * history, input settings. Text, or one JSON object with --json.
 */
#define _GNU_SOURCE
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../dense/plan.h"
#include "../embedding/table.h"
#include "../embedding/tier.h"
#include "../io/util.h"
#include "commands.h"
#include "passes.h"
#include "runlog.h"
#include "score.h"

static const char info_help[] =
    "usage: ctrbox info MODEL [--json] [--table-dir DIR]      (or --model MODEL)\n"
    "what a model is: its configuration, layers with shapes and parameter counts, tables with rows and\n"
    "bytes, training history (epochs, passes, steps, best validation AUC, from DIR/log.jsonl), input settings\n"
    "  MODEL                  a model folder, or its model.ctrbox file\n"
    "  --json                 one JSON object instead of text\n"
    "  --table-dir DIR        a tiered model's table folder, where it is not where the model says\n";

/* A JSON value as the text view prints it. */
static void put_value(FILE *f, json_t *v)
{
    if (json_is_string(v)) fprintf(f, "%s", *json_string_value(v) ? json_string_value(v) : "-");
    else if (json_is_integer(v)) fprintf(f, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v)) fprintf(f, "%g", json_real_value(v));
    else if (json_is_boolean(v)) fprintf(f, "%s", json_is_true(v) ? "yes" : "no");
    else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            if (i) fputc(',', f);
            put_value(f, x);
        }
        if (!json_array_size(v)) fputc('-', f);
    } else fputc('-', f);
}

int cmd_info(int argc, char **argv)
{
    static const struct option opts[] = {
        { "json", no_argument, 0, 'j' }, { "table-dir", required_argument, 0, 'T' },
        { "model", required_argument, 0, 'm' }, { 0, 0, 0, 0 },
    };
    const cli_cmd cc = { "ctrbox", "info", info_help, opts, 0 };
    cli_help_check(&cc, argc, argv);
    int json = 0, c;
    const char *table_dir = NULL, *model_opt = NULL;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        if (c == 'j') json = 1;
        else if (c == 'T') table_dir = optarg;
        else if (c == 'm') model_opt = optarg;
    }
    const char *dir = score_model_arg(&cc, argc, argv, model_opt);
    model *m;
    model_meta meta;
    const score_src src = { dir, NULL, NULL, 0, table_dir };
    score_load(&src, &m, &meta);
    char err[1024];
    char *path = modelfile_path(dir), *folder = modelfile_folder(dir);
    struct stat st;
    json_t *o = json_object(), *desc = modelfile_meta_json(&meta);
    json_object_set_new(o, "path", json_string(path));
    json_object_set_new(o, "file_bytes", json_integer(stat(path, &st) == 0 ? (json_int_t)st.st_size : 0));
    json_object_set(o, "model", json_object_get(desc, "model"));

    /* layers */
    plan_layer_shape sh[PLAN_MAX_LAYERS];
    int nl = model_layer_chain(m, sh, PLAN_MAX_LAYERS);
    json_t *layers = json_array();
    uint64_t dense_params = 0;
    for (int i = 0; i < nl; i++) {
        json_t *l = json_object();
        json_object_set_new(l, "name", json_string(sh[i].name));
        json_object_set_new(l, "kind", json_string(plan_layer_kind_name(sh[i].kind)));
        json_object_set_new(l, "in", json_integer(sh[i].in));
        json_object_set_new(l, "out", json_integer(sh[i].out));
        json_object_set_new(l, "params", json_integer((json_int_t)sh[i].params));
        json_array_append_new(layers, l);
        dense_params += sh[i].params;
    }
    json_object_set_new(o, "layers", layers);
    json_object_set_new(o, "dense_params", json_integer((json_int_t)dense_params));

    /* tables: in the file, or in the table folder as of the model's commit */
    emb_tier *tier = NULL;
    if (meta.table_dir && model_tier_open(m, dir, &meta, &tier, err, sizeof err) < 0) die("%s", err);
    json_t *tables = json_array();
    uint64_t sparse_params = 0;
    for (int t = 0; t < model_n_tables(m); t++) {
        emb_table *tb = model_table(m, t);
        const emb_table_config *tc = emb_table_config_of(tb);
        uint64_t rows = tier ? emb_tier_rows(tier, t) : emb_table_rows(tb);
        json_t *x = json_object();
        json_object_set_new(x, "table", json_integer(t));
        json_object_set_new(x, "dim", json_integer(tc->dim));
        json_object_set_new(x, "weight", json_boolean(tc->has_w));
        json_object_set_new(x, "optimizer", json_string(sparse_opt_name(tc->opt.kind)));
        json_object_set_new(x, "rows", json_integer((json_int_t)rows));
        json_object_set_new(x, "row_bytes", json_integer((json_int_t)emb_table_row_bytes(tb)));
        json_object_set_new(x, "bytes", json_integer((json_int_t)(rows * emb_table_row_bytes(tb))));
        json_array_append_new(tables, x);
        sparse_params += rows * (uint64_t)(tc->dim + tc->has_w);
    }
    json_object_set_new(o, "tables", tables);
    json_object_set_new(o, "sparse_params", json_integer((json_int_t)sparse_params));
    if (meta.table_dir) {
        json_t *tf = json_object();
        json_object_set_new(tf, "path", json_string(meta.table_dir));
        json_object_set_new(tf, "commit", json_integer((json_int_t)meta.table_commits));
        json_object_set_new(tf, "disk_bytes", json_integer((json_int_t)path_disk_bytes(meta.table_dir)));
        json_object_set_new(o, "table_folder", tf);
    }
    emb_tier_close(tier);

    /* history: the model's clocks, and its log */
    run_log lg;
    char lp[4200];
    snprintf(lp, sizeof lp, "%s/log.jsonl", folder);
    int have_log = run_log_read(&lg, folder, err, sizeof err) == 0;
    json_t *h = json_object();
    json_object_set_new(h, "passes", json_integer(meta.passes));
    json_object_set_new(h, "steps", json_integer((json_int_t)model_step(m)));
    if (have_log) {
        json_object_set_new(h, "epochs", json_integer(lg.epochs));
        json_object_set_new(h, "rows_trained", json_integer((json_int_t)lg.rows));
        json_object_set_new(h, "seconds", json_real(lg.seconds));
        json_object_set_new(h, "best_valid_auc", isnan(lg.best_auc) ? json_null() : json_real(lg.best_auc));
        json_object_set_new(h, "best_epoch", lg.best_epoch ? json_integer(lg.best_epoch) : json_null());
        json_object_set_new(h, "best_valid_logloss", isnan(lg.best_logloss) ? json_null() : json_real(lg.best_logloss));
        json_object_set_new(h, "last_train_loss", isnan(lg.last_loss) ? json_null() : json_real(lg.last_loss));
        json_object_set_new(h, "early_stop", json_boolean(lg.early_stop));
        json_object_set_new(h, "files_followed", json_integer((json_int_t)lg.files));
    }
    json_object_set_new(h, "log", have_log ? json_string(lp) : json_null());
    json_object_set_new(o, "history", h);
    json_t *in = json_object_get(desc, "input");
    char words[800];
    score_describe_input(&meta, words, sizeof words);
    json_object_set_new(in, "summary", json_string(words));
    json_object_set(o, "input", in);
    json_object_set(o, "schema", json_object_get(desc, "schema"));

    if (json) {
        char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_INDENT(2) | JSON_REAL_PRECISION(8));
        puts(s);
        free(s);
    } else {
        printf("%s: %s model, %.1f MB\n", path, model_kind_name(meta.cfg.kind), (double)st.st_size / 1e6);
        printf("configuration:\n ");
        const char *k;
        json_t *v;
        int col = 1;
        json_object_foreach(json_object_get(desc, "model"), k, v) {
            if (!strcmp(k, "kind")) continue;
            char item[200];
            FILE *mf = fmemopen(item, sizeof item, "w");
            fprintf(mf, " %s ", k);
            put_value(mf, v);
            fclose(mf);
            if (col + strlen(item) > 100) printf("\n "), col = 1;
            printf("%s", item);
            col += (int)strlen(item);
        }
        printf("\nlayers (%llu dense parameters):\n", (unsigned long long)dense_params);
        for (int i = 0; i < nl; i++)
            printf("  %-16s %-10s %6d -> %-6d %10zu parameters\n", sh[i].name, plan_layer_kind_name(sh[i].kind),
                   sh[i].in, sh[i].out, sh[i].params);
        printf("tables (%llu parameters; %s):\n", (unsigned long long)sparse_params,
               meta.table_dir ? "rows in a table folder" : "rows in the model file");
        size_t i;
        json_array_foreach(tables, i, v) {
            printf("  table %zu: dim %lld%s, %s, %lld rows of %lld bytes (%.1f MB)\n", i,
                   (long long)json_integer_value(json_object_get(v, "dim")),
                   json_is_true(json_object_get(v, "weight")) ? " + weight" : "",
                   json_string_value(json_object_get(v, "optimizer")),
                   (long long)json_integer_value(json_object_get(v, "rows")),
                   (long long)json_integer_value(json_object_get(v, "row_bytes")),
                   (double)json_integer_value(json_object_get(v, "bytes")) / 1e6);
        }
        if (meta.table_dir)
            printf("  table folder %s, commit %llu, %.1f MB on disk\n", meta.table_dir,
                   (unsigned long long)meta.table_commits,
                   (double)json_integer_value(json_object_get(json_object_get(o, "table_folder"), "disk_bytes")) / 1e6);
        printf("history: the model kept has %u passes, %llu steps", meta.passes, (unsigned long long)model_step(m));
        if (have_log) {
            printf("; the run: %d epoch%s, %llu rows trained in %.1f s", lg.epochs, lg.epochs == 1 ? "" : "s", (unsigned long long)lg.rows, lg.seconds);
            if (lg.best_epoch)
                printf("; best validation AUC %.6f (logloss %.6f) at epoch %d%s", lg.best_auc, lg.best_logloss,
                       lg.best_epoch, lg.early_stop ? ", then early stop" : "");
            else if (!isnan(lg.last_loss))
                printf("; last training loss %.6f (no validation data)", lg.last_loss);
            if (lg.files) printf("; %llu files followed", (unsigned long long)lg.files);
        } else {
            printf(" (no more history: %s)", err);
        }
        printf("\ninput: %s\n", words);
    }
    if (have_log) run_log_free(&lg);
    json_decref(o);
    json_decref(desc);
    free(path);
    free(folder);
    model_meta_free(&meta);
    model_destroy(m);
    return 0;
}
