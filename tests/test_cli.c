#include <unistd.h>
/*
 * test_cli.c: the programs as a user meets them: --help on every command (each option named, with
 * its default), --version, one-line errors for unknown options with the nearest name, messages
 * under the program's own name, and every option the README and docs/ show present in the help
 * of its command.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

TestSuite(cli, .fini = th_cleanup);

typedef struct {
    const char *prog, *cmd;
} command;

static const command commands[] = {
    { "ctrbox", "train" },          { "ctrbox", "eval" },          { "ctrbox", "predict" },
    { "ctrbox", "export-serving" }, { "ctrbox", "plan" },          { "ctrbox", "devices" },
    { "ctrbox", "info" },           { "ctrbox", "report" },        { "ctrbox-data", "gen" },
    { "ctrbox-data", "convert" },   { "ctrbox-data", "inspect" },  { "ctrbox-data", "split" },
    { "ctrbox-data", "key" },
    { "ctrbox-table", "inspect" }, { "ctrbox-table", "export" },
    { "ctrbox-table", "import" },   { "ctrbox-table", "delta" },   { "ctrbox-table", "merge" },
    { "ctrbox-table", "convert" },  { "ctrbox-table", "shrink" },
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

/* Whether text names option opt as "--opt" followed by a character that is not part of a name. */
static int names_option(const char *text, const char *opt)
{
    size_t n = strlen(opt);
    for (const char *p = strstr(text, "--"); p; p = strstr(p + 2, "--"))
        if (!strncmp(p + 2, opt, n) && !(isalnum((unsigned char)p[2 + n]) || p[2 + n] == '-')) return 1;
    return 0;
}

Test(cli, every_command_answers_help_with_its_own_usage)
{
    for (size_t i = 0; i < N_COMMANDS; i++) {
        char *o;
        int rc = th_run(&o, "$B/%s %s --help", commands[i].prog, commands[i].cmd);
        cr_assert_eq(rc, 0, "%s %s --help: exit %d\n%s", commands[i].prog, commands[i].cmd, rc, o);
        char want[128];
        snprintf(want, sizeof want, "usage: %s %s", commands[i].prog, commands[i].cmd);
        cr_assert(strstr(o, want), "%s %s --help does not start with its usage:\n%s", commands[i].prog,
                  commands[i].cmd, o);
        free(o);
    }
    const char *progs[] = { "ctrbox", "ctrbox-data", "ctrbox-table" };
    for (int i = 0; i < 3; i++) {
        char *o;
        cr_assert_eq(th_run(&o, "$B/%s --help", progs[i]), 0);
        free(o);
        cr_assert_eq(th_run(&o, "$B/%s --version", progs[i]), 0, "%s", o);
        char want[64];
        snprintf(want, sizeof want, "%s 0.", progs[i]);
        cr_assert(strstr(o, want) && strstr(o, "(git ") && strstr(o, "CUDA backend: "), "%s", o);
        free(o);
    }
}

Test(cli, help_states_defaults)
{
    char *o;
    cr_assert_eq(th_run(&o, "$B/ctrbox train --help"), 0);
    const char *want[] = { "--epochs N             (10", "--batch N              (4096)", "--lr X                 dense learning rate (0.001)",
                           "--sparse-opt NAME      adam|adagrad|rowwise_adagrad|sgd|ftrl (adam)",
                           "--sparse-lr X          sparse learning rate (the --lr value)", "--cache-mb N", "(1024)",
                           "--max-bad-ratio R", "(default 0.001)" };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) cr_assert(strstr(o, want[i]), "no '%s' in:\n%s", want[i], o);
    free(o);
}

/* stderr only, for one-line checks */
static int run_err(char **out, const char *cmd)
{
    return th_run(out, "%s 2>&1 >/dev/null", cmd);
}

Test(cli, unknown_options_are_one_line_with_the_nearest_name)
{
    struct {
        const char *cmd, *want1, *want2;
        int rc;
    } cases[] = {
        { "$B/ctrbox train --model lr --epoch-count 3", "ctrbox train: unknown option '--epoch-count'",
          "see `ctrbox train --help`", 2 },
        { "$B/ctrbox eval --modle m --data x", "ctrbox eval: unknown option '--modle' (did you mean '--model'?)",
          "see `ctrbox eval --help`", 2 },
        { "$B/ctrbox-data convert --frmat criteo", "ctrbox-data convert: unknown option '--frmat' (did you mean '--format'?)",
          "see `ctrbox-data convert --help`", 2 },
        { "$B/ctrbox-table export d --to", "ctrbox-table export: option '--to' needs a value", "--help`", 2 },
        { "$B/ctrbox-table inspect --hlep", "(did you mean '--help'?)", "ctrbox-table inspect", 2 },
        { "$B/ctrbox trian", "ctrbox: unknown command 'trian' (did you mean 'train'?)", "see `ctrbox --help`", 2 },
        { "$B/ctrbox-data inspct x", "ctrbox-data: unknown command 'inspct' (did you mean 'inspect'?)", "", 2 },
        { "$B/ctrbox predict --model m", "ctrbox predict: --model DIR (or --bundle FILE), --data and --out are required",
          "see `ctrbox predict --help`", 1 },
        { "$B/ctrbox-table merge a b", "ctrbox-table merge: want A B OUT", "see `ctrbox-table merge --help`", 1 },
        { "$B/ctrbox train --model lr --quiet=yes", "option '--quiet' takes no value", "", 2 },
        { "$B/ctrbox-data inspect /nonexistent/x.tsv --format criteo", "ctrbox-data: /nonexistent/x.tsv", "", 1 },
        { "$B/ctrbox-table inspect /nonexistent", "ctrbox-table: /nonexistent", "", 1 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *o;
        int rc = run_err(&o, cases[i].cmd);
        cr_assert_eq(rc, cases[i].rc, "%s: exit %d, want %d: %s", cases[i].cmd, rc, cases[i].rc, o);
        cr_assert(strstr(o, cases[i].want1) && strstr(o, cases[i].want2), "%s:\n%s", cases[i].cmd, o);
        char *nl = strchr(o, '\n');
        cr_assert(nl && !nl[1], "%s: not one line:\n%s", cases[i].cmd, o);
        free(o);
    }
}

/* ---- every option the README and docs/ show is in the help of its command ---- */

typedef struct {
    char prog[32], cmd[32], opt[64], where[300];
} shown;

static int known(const char *prog, const char *cmd)
{
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(commands[i].prog, prog) && !strcmp(commands[i].cmd, cmd)) return 1;
    return 0;
}

/* The word at p (up to blank), without backticks and quotes around it, into w. */
static const char *word(const char *p, char *w, size_t n, int *ends_code)
{
    size_t k = 0;
    *ends_code = 0;
    while (*p && !isspace((unsigned char)*p)) {
        if (*p == '`') *ends_code = k > 0;
        else if (*p != '"' && *p != '\'' && *p != '(' && *p != ')' && k + 1 < n) w[k++] = *p;
        p++;
    }
    w[k] = 0;
    return p;
}

/* Each "PROG CMD ... --opt" of one logical line (continuations joined) of file at lineno. */
static void scan_line(const char *line, const char *file, int lineno, shown **v, size_t *n, size_t *cap)
{
    char w[256], prog[32] = "", cmd[32] = "";
    int ends, state = 0;   /* 0: looking for a program, 1: its command next, 2: options */
    for (const char *p = line; *p;) {
        while (*p && isspace((unsigned char)*p)) p++;
        if (!*p) break;
        p = word(p, w, sizeof w, &ends);
        const char *base = strrchr(w, '/') ? strrchr(w, '/') + 1 : w;
        if (!strcmp(base, "ctrbox") || !strcmp(base, "ctrbox-data") || !strcmp(base, "ctrbox-table")) {
            snprintf(prog, sizeof prog, "%s", base);
            state = ends ? 0 : 1;
            continue;
        }
        if (state == 1) {
            snprintf(cmd, sizeof cmd, "%s", w);
            state = known(prog, cmd) && !ends ? 2 : 0;
            continue;
        }
        if (state != 2) continue;
        if (!strcmp(w, "|") || !strcmp(w, "&&") || !strcmp(w, "||") || !strcmp(w, ";") || w[strlen(w) - 1] == ';') {
            state = 0;
            continue;
        }
        if (!strncmp(w, "--", 2) && isalpha((unsigned char)w[2])) {
            size_t k = 2;
            while (isalnum((unsigned char)w[k]) || w[k] == '-' || w[k] == '_') k++;
            while (k > 2 && w[k - 1] == '-') k--;
            if (*n == *cap) *v = realloc(*v, (*cap = *cap * 2 + 16) * sizeof **v);
            shown *s = &(*v)[(*n)++];
            snprintf(s->prog, sizeof s->prog, "%s", prog);
            snprintf(s->cmd, sizeof s->cmd, "%s", cmd);
            snprintf(s->opt, sizeof s->opt, "%.*s", (int)(k - 2), w + 2);
            snprintf(s->where, sizeof s->where, "%s:%d", file, lineno);
        }
        if (ends) state = 0;
    }
}

static void scan_file(const char *path, shown **v, size_t *n, size_t *cap)
{
    size_t len;
    char *text = th_read(path, &len);
    char *logical = malloc(len + 1);
    size_t k = 0;
    int lineno = 1, start = 1;
    for (size_t i = 0; i <= len; i++) {
        char ch = i < len ? text[i] : '\n';
        if (ch == '\\' && i + 1 < len && text[i + 1] == '\n') {   /* a continued command line */
            i++;
            lineno++;
            logical[k++] = ' ';
            continue;
        }
        if (ch == '\n') {
            logical[k] = 0;
            scan_line(logical, path, start, v, n, cap);
            k = 0;
            start = ++lineno;
            continue;
        }
        logical[k++] = ch;
    }
    free(logical);
    free(text);
}

Test(cli, every_documented_option_is_in_its_commands_help)
{
    char cwd[4096];
    cr_assert_not_null(getcwd(cwd, sizeof cwd));
    shown *v = NULL;
    size_t n = 0, cap = 0, files = 0;
    char path[8192];
    snprintf(path, sizeof path, "%s/README.md", cwd);
    scan_file(path, &v, &n, &cap);
    files++;
    snprintf(path, sizeof path, "%s/docs", cwd);
    DIR *d = opendir(path);
    cr_assert_not_null(d, "no docs/ in %s", cwd);
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 3, ".md")) continue;
        snprintf(path, sizeof path, "%s/docs/%s", cwd, e->d_name);
        scan_file(path, &v, &n, &cap);
        files++;
    }
    closedir(d);
    cr_assert_gt(n, 50, "only %zu options found in %zu files: the scan is broken", n, files);
    char *helps[N_COMMANDS] = { 0 };
    size_t missing = 0;
    char report[8192] = "";
    for (size_t i = 0; i < n; i++) {
        size_t c = 0;
        while (strcmp(commands[c].prog, v[i].prog) || strcmp(commands[c].cmd, v[i].cmd)) c++;
        if (!helps[c]) cr_assert_eq(th_run(&helps[c], "$B/%s %s --help", v[i].prog, v[i].cmd), 0);
        if (!strcmp(v[i].opt, "help") || names_option(helps[c], v[i].opt)) continue;
        missing++;
        size_t u = strlen(report);
        snprintf(report + u, sizeof report - u, "%s: %s %s --%s\n", v[i].where, v[i].prog, v[i].cmd, v[i].opt);
    }
    for (size_t c = 0; c < N_COMMANDS; c++) free(helps[c]);
    free(v);
    cr_assert_eq(missing, 0, "%zu documented options are not in their command's help:\n%s", missing, report);
}

/* ---- a model remembers its input settings; --model takes the folder or the file; a tiered model
 * finds its table folder when both moved, or where --table-dir says ---- */

static void gen_small(void)
{
    cr_assert_eq(th_run(NULL, "$B/ctrbox-data gen --rows 6000 --seed 2 --keys 0.002 --out tr.tsv && "
                              "$B/ctrbox-data gen --rows 2000 --seed 2 --keys 0.002 --offset 6000 --out va.tsv"),
                 0);
}

static char *run_ok(const char *cmd)
{
    char *o;
    int rc = th_run(&o, "%s", cmd);
    cr_assert_eq(rc, 0, "%s: exit %d\n%s", cmd, rc, o);
    return o;
}

static void run_same(const char *a, const char *b)
{
    char *x = run_ok(a), *y = run_ok(b);
    cr_assert_str_eq(x, y, "%s\nand\n%s\ndiffer", a, b);
    free(x), free(y);
}

#define S " --threads 1 --quiet --dim 4 --hidden 8 --batch 256 --epochs 1"

Test(cli, eval_and_predict_need_only_the_data)
{
    gen_small();
    /* csv with a schema: the model keeps it (and the other input settings) */
    cr_assert_eq(th_run(NULL, "awk -F'\\t' 'BEGIN { print \"rid,click,n1,C1,C2\" } { print \"r\" NR \",\" $1 \",\" $2 \",\" $15 "
                              "\",\" $16 }' tr.tsv > tr.csv && awk -F'\\t' 'BEGIN { print \"rid,click,n1,C1,C2\" } { print \"r\" "
                              "NR \",\" $1 \",\" $2 \",\" $15 \",\" $16 }' va.tsv > va.csv"), 0);
    free(run_ok("$B/ctrbox train --model fm --format csv --schema rid:skip,n1:num --num bucket --train tr.csv --out mc" S));
    run_same("$B/ctrbox eval --model mc --data va.csv",
             "$B/ctrbox eval --model mc --data va.csv --format csv --schema rid:skip,n1:num --num bucket");
    /* --model takes the file too */
    run_same("$B/ctrbox eval --model mc --data va.csv", "$B/ctrbox eval --model mc/model.ctrbox --data va.csv");
    /* a setting that changes the fields is refused in one line naming both sides */
    char *o;
    cr_assert_eq(run_err(&o, "$B/ctrbox eval --model mc --data va.csv --num log"), 1, "%s", o);
    cr_assert(strstr(o, "va.csv: its integers read as log values") && strstr(o, "the model was trained on csv --schema "
              "rid:skip,n1:num") && strchr(o, '\n') == o + strlen(o) - 1, "%s", o);
    free(o);
    cr_assert_eq(run_err(&o, "$B/ctrbox eval --model mc --data va.csv --schema n1:num"), 1, "%s", o);
    cr_assert(strstr(o, "its column rid is none of the model's fields") && strstr(o, "looks like csv, 5 columns "
              "under a header (rid ...)"), "%s", o);
    free(o);

    /* criteo text: csv, libsvm or too few columns are named as such */
    free(run_ok("$B/ctrbox train --model lr --format criteo --train tr.tsv --out mt" S));
    cr_assert_eq(run_err(&o, "$B/ctrbox predict --model mt --data va.csv --out p.txt"), 1, "%s", o);
    cr_assert(strstr(o, "va.csv: not criteo data; this file looks like csv, 5 columns under a header") &&
              strstr(o, "the model was trained on criteo (13 dense values, 26 categorical fields"), "%s", o);
    free(o);
    th_write_str(th_path("l.svm"), "1 3:1 7:1\n0 2:1\n");
    cr_assert_eq(run_err(&o, "$B/ctrbox eval --model mt --data l.svm"), 1, "%s", o);
    cr_assert(strstr(o, "looks like libsvm (label index:value ...)"), "%s", o);
    free(o);

    /* a model trained on cbx reads the text it was converted from */
    free(run_ok("$B/ctrbox-data convert --format criteo --in tr.tsv --out tr.cbx && "
                "$B/ctrbox-data convert --format criteo --in va.tsv --out va.cbx && "
                "$B/ctrbox train --model lr --train tr.cbx --out mb" S));
    run_same("$B/ctrbox eval --model mb --data va.cbx", "$B/ctrbox eval --model mb --data va.tsv");
    run_same("$B/ctrbox eval --model mb --data va.tsv", "$B/ctrbox eval --model mt --data va.tsv");
}

Test(cli, a_tiered_model_finds_its_table_folder)
{
    gen_small();
    free(run_ok("mkdir w && $B/ctrbox train --model fm --format criteo --train tr.tsv --out w/m --table-dir w/t "
                "--pass-rows 2000 --cache-mb 0.1" S));
    char *want = run_ok("$B/ctrbox eval --model w/m --data va.tsv");
    /* both moved together */
    char *o = run_ok("mv w w2 && $B/ctrbox eval --model w2/m --data va.tsv");
    cr_assert_str_eq(o, want);
    free(o);
    /* the table folder moved elsewhere: named, and --table-dir points to it */
    cr_assert_eq(run_err(&o, "mkdir x && mv w2/t x/t2 && $B/ctrbox eval --model w2/m --data va.tsv"), 1, "%s", o);
    cr_assert(strstr(o, "w2/m/model.ctrbox: its rows are in the table folder ") && strstr(o, "give --table-dir DIR"), "%s", o);
    free(o);
    o = run_ok("$B/ctrbox eval --model w2/m --table-dir x/t2 --data va.tsv");
    cr_assert_str_eq(o, want);
    free(o);
    o = run_ok("$B/ctrbox export-serving --model w2/m/model.ctrbox --table-dir x/t2 --out b.bundle >/dev/null && "
               "$B/ctrbox eval --bundle b.bundle --data va.tsv");
    cr_assert_str_eq(o, want);
    free(o);
    /* the wrong folder is refused by its id */
    free(run_ok("$B/ctrbox train --model fm --format criteo --train va.tsv --out m3 --table-dir t3 --pass-rows 2000" S));
    cr_assert_eq(th_run(&o, "$B/ctrbox eval --model w2/m --table-dir t3 --data va.tsv"), 1, "%s", o);
    cr_assert(strstr(o, "is another table folder"), "%s", o);
    free(o);
    free(want);
}

/* ---- ctrbox info, and what the trainer says on the console ---- */

Test(cli, info_describes_a_model)
{
    gen_small();
    free(run_ok("$B/ctrbox train --model deepfm --format criteo --train tr.tsv --valid va.tsv --out m --epochs 3 "
                "--threads 1 --quiet --dim 4 --hidden 8 --batch 256"));
    char *o = run_ok("$B/ctrbox info m");
    const char *want[] = { "m/model.ctrbox: deepfm model", "configuration:", "hidden 8", "layers (", "fc1", "fm",
                           "tables (", "table 0: dim 4 + weight, adam", "best validation AUC", "input: criteo" };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) cr_assert(strstr(o, want[i]), "no '%s' in:\n%s", want[i], o);
    free(o);
    char *o2 = run_ok("$B/ctrbox info --model m");   /* --model MODEL works too */
    cr_assert(strstr(o2, "m/model.ctrbox: deepfm model"), "%s", o2);
    free(o2);
    o = run_ok("$B/ctrbox info m/model.ctrbox --json");
    json_error_t je;
    json_t *j = json_loads(o, 0, &je);
    cr_assert_not_null(j, "%s", o);
    json_t *layers = json_object_get(j, "layers"), *l;
    size_t i;
    long long sum = 0;
    json_array_foreach(layers, i, l) sum += json_integer_value(json_object_get(l, "params"));
    cr_assert_gt(json_array_size(layers), 3);
    cr_assert_eq(sum, json_integer_value(json_object_get(j, "dense_params")));
    /* the rows: as ctrbox-table counts them */
    char *t = run_ok("$B/ctrbox-table inspect m --json");
    json_t *tj = json_loads(t, 0, &je);
    cr_assert_not_null(tj, "%s", t);
    cr_assert_eq(json_integer_value(json_object_get(json_array_get(json_object_get(j, "tables"), 0), "rows")),
                 json_integer_value(json_object_get(json_array_get(json_object_get(tj, "tables"), 0), "rows")));
    /* the best validation AUC: the log's best epoch line */
    char *best = run_ok("grep -o '\"valid_auc\": [0-9.]*' m/log.jsonl | cut -d' ' -f2 | sort -g | tail -1");
    double b = json_real_value(json_object_get(json_object_get(j, "history"), "best_valid_auc"));
    cr_assert(fabs(b - atof(best)) < 1e-6, "%g vs %s", b, best);
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(j, "input"), "format")), "criteo");
    json_decref(tj), json_decref(j);
    free(t), free(o), free(best);
    /* tiered: the rows of the folder's commit */
    free(run_ok("$B/ctrbox train --model fm --format criteo --train tr.tsv --out tm --table-dir tt --pass-rows 3000" S));
    o = run_ok("$B/ctrbox info tm --json");
    j = json_loads(o, 0, &je);
    cr_assert_not_null(j, "%s", o);
    cr_assert_geq(json_integer_value(json_object_get(json_object_get(j, "table_folder"), "commit")), 2, "%s", o);
    cr_assert_gt(json_integer_value(json_object_get(json_array_get(json_object_get(j, "tables"), 0), "rows")), 1000);
    json_decref(j);
    free(o);
}

Test(cli, the_console_says_what_happens)
{
    gen_small();
    /* lr 0 never improves: a learning-rate drop after epoch 2, an early stop after epoch 3, the model
     * kept is epoch 1's; with 6000 rows in batches of 4096 and an AUC of 0.5, both hints */
    char *o;
    cr_assert_eq(th_run(&o, "$B/ctrbox train --model lr --format criteo --train tr.tsv --valid va.tsv --out m --epochs 5 "
                            "--patience 2 --lr-decay 0.5 --lr 0 --threads 1"), 0, "%s", o);
    const char *want[] = { "epoch 2/5", "run ETA at most ", "learning rates x0.5 after epoch 2 (no better validation AUC)",
                           "early stop after epoch 3: no better validation AUC for 2 epochs; the model kept is epoch 1's",
                           "hint: epoch 1 had 6000 rows in 2 steps of --batch 4096", "try --batch 64 (94 steps an epoch)",
                           "hint: the best validation AUC is 0.5000 after epoch 1", "--lr 0 --sparse-lr 0",
                           "done in ", "(early stop); best validation AUC 0.500000 at epoch 1 (the model kept)" };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) cr_assert(strstr(o, want[i]), "no '%s' in:\n%s", want[i], o);
    free(o);
    o = run_ok("grep -c '\"kind\": \"lr\"' m/curve.jsonl && grep -c '\"kind\": \"early_stop\", \"epoch\": 3' m/curve.jsonl "
               "&& grep -c '\"kind\": \"train\"' m/curve.jsonl");
    cr_assert_str_eq(o, "1\n1\n6\n", "%s", o);   /* 2 steps an epoch, 3 epochs */
    free(o);
    /* --quiet: the summary alone */
    cr_assert_eq(th_run(&o, "$B/ctrbox train --model lr --format criteo --train tr.tsv --out q --epochs 2 --quiet"), 0);
    cr_assert(!strncmp(o, "done in ", 8) && strchr(o, '\n') == o + strlen(o) - 1, "%s", o);
    free(o);
    /* passes of fewer rows than --batch end a step each: the hint counted rows / batch ("2 steps");
     * a budget its index takes whole was "0.0 MB over the 0.0 MB": one batch's keys blamed */
    cr_assert_eq(th_run(&o, "$B/ctrbox train --model lr --format criteo --train tr.tsv --out p --epochs 1 --pass-rows 1000 "
                            "--threads 1 && $B/ctrbox train --model fm --format criteo --train tr.tsv --out pt --epochs 1 "
                            "--pass-rows 1000 --threads 1 --table-dir ptd --cache-mb 1"), 0, "%s", o);
    cr_assert(strstr(o, "hint: epoch 1 had 6000 rows in 6 steps of --batch 4096") &&
                  strstr(o, "MB in memory (the rows") &&
                  strstr(o, "over the 0 KB --cache-mb leaves for them: the tier's index takes all of it"), "%s", o);
    free(o);
}

/* ---- one printed form of a key; ctrbox-data key; csv id columns ---- */

Test(cli, a_key_prints_one_way_and_ctrbox_data_key_finds_its_row)
{
    gen_small();
    free(run_ok("$B/ctrbox train --model fm --format criteo --train tr.tsv --out m" S " && "
                "$B/ctrbox train --model fm --format criteo --num bucket --train tr.tsv --out mb" S " && "
                "$B/ctrbox-table export m --to text m.txt && $B/ctrbox-table export mb --to text mb.txt"));
    /* the key of the first row's C1 value: the model's, the format's, and a row of the table */
    char *k1 = run_ok("$B/ctrbox-data key --model m --field C1 --token $(head -1 tr.tsv | cut -f15)");
    char *k2 = run_ok("$B/ctrbox-data key --format criteo --field 13 --token $(head -1 tr.tsv | cut -f15)");
    cr_assert_str_eq(k1, k2);
    char *k3 = run_ok("$B/ctrbox-data key --field C1 --token $(head -1 tr.tsv | cut -f15)");   /* the Criteo layout */
    cr_assert_str_eq(k1, k3);
    free(k3);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "grep -c '^%.*s\t' m.txt", (int)strcspn(k1, "\n"), k1);
    char *o = run_ok(cmd);
    cr_assert_str_eq(o, "1\n", "key %s is not a row of the table", k1);
    free(o);
    /* an integer column read as buckets: the bucket's key */
    o = run_ok("k=$($B/ctrbox-data key --model mb --field I2 --bucket --token $(head -1 tr.tsv | cut -f3)) && grep -c \"^$k\t\" mb.txt");
    cr_assert_str_eq(o, "1\n", "%s", o);
    free(o);
    char *e;
    cr_assert_eq(run_err(&e, "$B/ctrbox-data key --model m --field I2 --token 5"), 1, "%s", e);
    cr_assert(strstr(e, "has no key"), "%s", e);
    free(e);
    /* inspect prints the most shown keys the same way, text and JSON */
    o = run_ok("$B/ctrbox-table inspect m | sed -n 's/.*most shown keys: \\([0-9]*\\) .*/\\1/p'");
    cr_assert(o[0] >= '0' && o[0] <= '9', "not a decimal key: %s", o);
    snprintf(cmd, sizeof cmd, "grep -c '^%.*s\t' m.txt && $B/ctrbox-table inspect m --json | grep -c '\"key\": \"%.*s\"'",
             (int)strcspn(o, "\n"), o, (int)strcspn(o, "\n"), o);
    char *c = run_ok(cmd);
    cr_assert_str_eq(c, "1\n1\n", "%s", c);
    free(c), free(o), free(k1), free(k2);
    /* npy keys are uint64, the same numbers */
    int rc = th_run(&o, "$B/ctrbox-table export m --to npy np && /usr/bin/python3 -c \"import numpy as np; "
                        "k = np.load('np/keys.npy'); t = [int(l.split()[0]) for l in open('m.txt')]; "
                        "assert k.dtype == np.uint64 and [int(x) for x in k] == t; print('ok')\"");
    if (rc != 0 && strstr(o, "No module named")) {
        free(o);
        cr_skip_test("python3-numpy is not installed");
    }
    cr_assert_eq(rc, 0, "%s", o);
    free(o);
}

Test(cli, csv_id_columns_are_reported)
{
    gen_small();
    free(run_ok("awk -F'\\t' 'BEGIN { print \"rid,click,C1,C2\" } { print \"r\" NR \",\" $1 \",\" $15 \",\" $16 }' tr.tsv > tr.csv"));
    char *o = run_ok("$B/ctrbox-data inspect --format csv tr.csv");
    const char *rid = strstr(o, "\nrid "), *c1 = strstr(o, "\nC1 ");
    cr_assert(rid && c1, "%s", o);
    cr_assert(strstr(rid, "100.0%  an id?") && strstr(rid, "an id?") < c1, "%s", o);
    cr_assert(!strstr(c1, "an id?\n") && strstr(o, "--schema NAME:skip"), "%s", o);
    free(o);
    o = run_ok("$B/ctrbox-data inspect --format csv --json tr.csv");
    json_t *j = json_loads(o, 0, NULL);
    cr_assert_not_null(j, "%s", o);
    json_t *fields = json_object_get(j, "fields");
    cr_assert(json_is_true(json_object_get(json_array_get(fields, 0), "looks_like_id")));
    cr_assert(json_is_false(json_object_get(json_array_get(fields, 1), "looks_like_id")));
    json_decref(j);
    free(o);
    /* train warns once, with the option that skips it; not when it is skipped */
    cr_assert_eq(th_run(&o, "$B/ctrbox train --model lr --format csv --train tr.csv --out a" S), 0, "%s", o);
    cr_assert(strstr(o, "warning: column rid: 100.0% distinct in the first 6000 rows") &&
              strstr(o, "skip it with --schema rid:skip"), "%s", o);
    cr_assert_eq(strstr(o, "warning: column rid") , strstr(o, "warning: column "));
    cr_assert_null(strstr(strstr(o, "warning: column rid") + 1, "warning: column rid"), "%s", o);
    free(o);
    cr_assert_eq(th_run(&o, "$B/ctrbox train --model lr --format csv --schema rid:skip --train tr.csv --out b" S), 0, "%s", o);
    cr_assert_null(strstr(o, "warning"), "%s", o);
    free(o);
}

/* A long convert shows its progress on a terminal (a pty from script(1)) and nothing in a pipe:
 * the input pauses for a second so that the run is long on any machine. */
Test(cli, progress_on_a_terminal_only)
{
    if (th_run(NULL, "command -v script >/dev/null") != 0) cr_skip_test("script(1) (bsdutils) is not installed");
    gen_small();
    const char *slow = "(head -3000 tr.tsv; sleep 1.2; tail -n +3001 tr.tsv)";
    char cmd[512];
    snprintf(cmd, sizeof cmd, "script -qfec \"%s | $B/ctrbox-data convert --format criteo --in /dev/stdin --out a.cbx\" /dev/null",
             slow);
    char *o = run_ok(cmd);
    cr_assert(strstr(o, "\rconvert: ") && strstr(o, " rows, ") && strstr(o, "a.cbx: 6000 rows"), "%s", o);
    free(o);
    snprintf(cmd, sizeof cmd, "%s | $B/ctrbox-data convert --format criteo --in /dev/stdin --out b.cbx", slow);
    o = run_ok(cmd);
    cr_assert(!strstr(o, "convert: ") && !strchr(o, '\r') && strstr(o, "b.cbx: 6000 rows"), "%s", o);
    free(o);
}
