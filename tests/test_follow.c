/*
 * test_follow.c: training from a stream of logs (--follow), progressive validation, and the
 * deltas a serving process applies to its base bundle.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dense/model.h"
#include "../embedding/table.h"
#include "../src/modelfile.h"
#include "helpers.h"

TestSuite(follow, .fini = th_cleanup);

#define RUN "$B/ctrbox train --model deepfm --format criteo --dim 4 --hidden 8 --batch 256 --lr 0.01 --threads 1 " \
            "--seed 5 --pass-rows 700 --decay 0.9 --shrink-unseen 3 --quiet"

/* the same, with dense layers slow enough for kills to fall inside days */
#define SLOW "$B/ctrbox train --model deepfm --format criteo --dim 16 --hidden 256,256 --batch 32 --lr 0.01 --threads 1 " \
             "--seed 5 --pass-rows 700 --decay 0.9 --shrink-unseen 3 --quiet"

/* Six days of `rows` rows each (d1 .. d6) and a validation set. */
static void make_days_of(int rows)
{
    cr_assert_eq(th_run(NULL, "$B/ctrbox-data gen --rows %d --seed 7 --keys 0.002 --out all.tsv && "
                              "$B/ctrbox-data gen --rows 2000 --seed 7 --keys 0.002 --offset %d --out va.tsv && "
                              "for i in 1 2 3 4 5 6; do sed -n $(( (i - 1) * %d + 1 )),$(( i * %d ))p all.tsv > d$i.tsv; done",
                        6 * rows, 6 * rows, rows, rows),
                 0);
}

static void make_days(void) { make_days_of(2000); }

/* The entries of a model's --follow ledger, "name:rows," each, in order. */
static char *ledger(const char *dir)
{
    model_meta meta;
    char err[600];
    cr_assert_eq(modelfile_read_meta(th_path(dir), &meta, err, sizeof err), 0, "%s", err);
    cr_assert(meta.follow, "%s has no ledger", dir);
    json_t *files = json_object_get(meta.follow, "files");
    size_t n = 0, cap = 4096;
    char *s = calloc(1, cap);
    for (size_t i = 0; i < json_array_size(files); i++) {
        json_t *e = json_array_get(files, i);
        n += (size_t)snprintf(s + n, cap - n, "%s:%lld,", json_string_value(json_object_get(e, "name")),
                              (long long)json_integer_value(json_object_get(e, "rows")));
    }
    model_meta_free(&meta);
    return s;
}

/* A writer drops six days into a folder over time: each file is written in two halves, in
 * place, then marked by NAME.done; the last is a folder of two parts with a _SUCCESS file. The
 * trainer, killed with -9 at random moments (25 times: in the middle of days, of passes, of
 * commits, while waiting) and started again with the same command, ends with the model of an
 * uninterrupted run over the finished folder; every day is trained once, whole (a half-written
 * file never is), in name order. In memory (the model file's bytes) and with a table folder
 * (predictions and the folder's rows). */
Test(follow, killed_at_random_ends_as_an_uninterrupted_run)
{
    make_days_of(4000);
    for (int tiered = 0; tiered < 2; tiered++) {
        const char *tk = tiered ? "--table-dir kt --cache-mb 0.05" : "", *tr = tiered ? "--table-dir rt --cache-mb 0.05" : "";
        char *o;
        int rc = th_run(&o,
            "rm -rf in k kt ref rt kills writer.done && mkdir in && "
            "( for i in 1 2 3 4 5; do head -2000 d$i.tsv > in/d$i.tsv; sleep 0.1; tail -2000 d$i.tsv >> in/d$i.tsv; "
            "  touch in/d$i.tsv.done; sleep 0.05; done; "
            "  mkdir in/d6; head -2500 d6.tsv > in/d6/part-0; sleep 0.1; tail -1500 d6.tsv > in/d6/part-1; touch in/d6/_SUCCESS; "
            "  touch writer.done ) & "
            "for i in $(seq 1 25); do "
            "  " SLOW " --follow in --follow-done --follow-idle 1.5 --out k %s 2>>err.txt & pid=$!; "
            "  if [ $((i %% 2)) = 0 ]; then sleep $(printf 0.%%02d $(shuf -i 1-40 -n 1)); "
            "  else n=$(( $(cat k/log.jsonl 2>/dev/null | wc -l) + $(shuf -i 1-5 -n 1) )); t=0; "   /* a few lines on */
            "    while [ $(cat k/log.jsonl 2>/dev/null | wc -l) -lt $n ] && [ $t -lt 60 ]; do sleep 0.01; t=$((t + 1)); done; fi; "
            "  if kill -9 $pid 2>/dev/null; then echo kill >> kills; fi; wait $pid; "
            "done; wait; "
            SLOW " --follow in --follow-done --follow-idle 0.5 --out k %s 2>>err.txt && "
            SLOW " --follow in --follow-idle 0 --out ref %s && "
            "$B/ctrbox predict --model k --data va.tsv --out pk.txt && $B/ctrbox predict --model ref --data va.tsv --out pr.txt && "
            "echo kills $(cat kills 2>/dev/null | wc -l), entries scored $(grep -c progressive k/log.jsonl) times, "
            "$(grep -c '\"kind\": \"pass\"' k/log.jsonl) pass lines for $(grep -c '\"kind\": \"pass\"' ref/log.jsonl)",
            tk, tk, tr);
        cr_assert_eq(rc, 0, "%s", o);
        fprintf(stderr, "follow (%s): %s", tiered ? "table folder" : "in memory", o);
        free(o);
        char *lk = ledger("k"), *lr = ledger("ref");
        cr_assert_str_eq(lk, "d1.tsv:4000,d2.tsv:4000,d3.tsv:4000,d4.tsv:4000,d5.tsv:4000,d6:4000,");
        cr_assert_str_eq(lk, lr);
        free(lk), free(lr);
        th_same_file("pk.txt", "pr.txt");
        if (tiered) {
            th_same_rows("kt", "rt");
        } else {
            th_same_file("k/model.ctrbox", "ref/model.ctrbox");
        }
        /* the log: each day's end at most once (a kill can fall between the model and its line) */
        cr_assert_eq(th_run(&o, "grep -o '\"kind\": \"file\", \"file\": \"[^\"]*\"' k/log.jsonl | sort | uniq -d"), 0);
        cr_assert_str_eq(o, "", "a day trained twice: %s", o);
        free(o);
    }
}

/* The model --follow ends with is the model of a chain of warm starts, one per file (the same
 * pass boundaries); each file is scored first by the model of the files before it: the AUC and
 * logloss in the log are `ctrbox eval` of the previous day's model on it. SIGTERM stops at a
 * pass boundary with exit 0 and the same command goes on. */
Test(follow, equals_a_chain_of_warm_starts_and_scores_each_file_first)
{
    make_days();
    char *o;
    int rc = th_run(&o,
        "mkdir in && for i in 1 2 3; do cp d$i.tsv in/.d$i.tmp && mv in/.d$i.tmp in/d$i.tsv; done && "
        RUN " --epochs 1 --train d1.tsv --out c1 && " RUN " --epochs 1 --train d2.tsv --init c1 --out c2 && "
        RUN " --epochs 1 --train d3.tsv --init c2 --out c3 && "
        RUN " --follow in --follow-idle 0 --out f && "
        "$B/ctrbox predict --model c3 --data va.tsv --out pc.txt && $B/ctrbox predict --model f --data va.tsv --out pf.txt && "
        "$B/ctrbox eval --model c2 --data d3.tsv --json");
    cr_assert_eq(rc, 0, "%s", o);
    th_same_file("pc.txt", "pf.txt");
    json_t *ev = strstr(o, "{\"auc\"") ? json_loads(strstr(o, "{\"auc\""), 0, NULL) : NULL;   /* after the summaries */
    cr_assert(ev, "%s", o);
    free(o);
    double auc = json_real_value(json_object_get(ev, "auc")), ll = json_real_value(json_object_get(ev, "logloss"));
    json_decref(ev);
    rc = th_run(&o, "grep '\"kind\": \"progressive\", \"file\": \"d3.tsv\"' f/log.jsonl");
    cr_assert_eq(rc, 0, "%s", o);
    json_t *pv = json_loads(o, 0, NULL);
    cr_assert(pv, "%s", o);
    cr_assert_float_eq(json_real_value(json_object_get(pv, "auc")), auc, 2e-6, "%s", o);
    cr_assert_float_eq(json_real_value(json_object_get(pv, "logloss")), ll, 2e-6, "%s", o);
    cr_assert_eq(json_integer_value(json_object_get(pv, "rows")), 2000);
    json_decref(pv);
    free(o);

    /* SIGTERM: exit 0 after a commit; the same command finishes; the model is the same */
    rc = th_run(&o, "cp d4.tsv d5.tsv d6.tsv in/ && "
                    RUN " --follow in --out s --table-dir st --cache-mb 0.05 2>err.txt & pid=$!; "
                    "n=0; while ! grep -qs '\"kind\": \"pass\"' s/log.jsonl && [ $n -lt 1200 ]; do sleep 0.05; n=$((n + 1)); done; "
                    "kill -TERM $pid; wait $pid; "
                    "echo rc=$?; grep -c '\"kind\": \"stopped\"' s/log.jsonl; "
                    RUN " --follow in --follow-idle 0 --out s --table-dir st --cache-mb 0.05 && "
                    RUN " --follow in --follow-idle 0 --out f && "
                    "$B/ctrbox predict --model s --data va.tsv --out ps.txt && $B/ctrbox predict --model f --data va.tsv --out pf.txt");
    cr_assert_eq(rc, 0, "%s", o);
    cr_assert(strstr(o, "rc=0\n1\n"), "SIGTERM: exit 0 and the log says so: %s", o);
    free(o);
    th_same_file("ps.txt", "pf.txt");
    char *l = ledger("s");
    cr_assert_str_eq(l, "d1.tsv:2000,d2.tsv:2000,d3.tsv:2000,d4.tsv:2000,d5.tsv:2000,d6.tsv:2000,");
    free(l);
}

/* What --follow refuses, and what it never reads. */
Test(follow, refusals_and_names_it_skips)
{
    make_days();
    char *o;
    int rc = th_run(&o, "mkdir in && cp d1.tsv in/d1.tsv && cp d2.tsv in/.hidden && cp d2.tsv in/_tmp && "
                        "cp d2.tsv in/d2.tsv.tmp && cp d2.tsv in/d2.part && mkdir in/d3 && cp d3.tsv in/d3/part-0 && "
                        RUN " --follow in --follow-idle 0 --out f --export-dir ex && cat ex/manifest.json");
    cr_assert_eq(rc, 0, "%s", o);
    cr_assert(strstr(o, "base-0000000003.bundle"), "%s", o);
    free(o);
    char *l = ledger("f");
    cr_assert_str_eq(l, "d1.tsv:2000,", "temporary names and a folder without _SUCCESS wait");
    free(l);
    cr_assert_neq(th_run(&o, RUN " --follow in --train d1.tsv --out g"), 0);
    cr_assert(strstr(o, "takes no --train"), "%s", o);
    free(o);
    cr_assert_neq(th_run(&o, RUN " --train d1.tsv --out g && " RUN " --follow in --out g --follow-idle 0"), 0);
    cr_assert(strstr(o, "holds a model that does not follow"), "%s", o);
    free(o);
    /* a folder written in that is the watched one: its files (model.ctrbox, COMMIT.ctrbox, a bundle)
     * were read as logs, "too many bad lines", the run stopped with them left in the folder */
    const char *into[] = { "--out in", "--out h --table-dir in", "--out h --export-dir ./in/" };
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(th_run(&o, RUN " --follow in --follow-idle 0 %s; echo rc=$?; ls in | wc -l", into[i]), 0);
        cr_assert(strstr(o, "is the --follow folder") && strstr(o, "rc=1\n5\n"), "%s: %s", into[i], o);
        free(o);
    }
    /* a file of bad lines stops the run, naming it; nothing of the model is lost */
    cr_assert_neq(th_run(&o, "cut -f1-30 d2.tsv > in/d2b.tsv && " RUN " --follow in --follow-idle 0 --out f"), 0);
    cr_assert(strstr(o, "d2b.tsv"), "%s", o);
    free(o);
    l = ledger("f");
    cr_assert_str_eq(l, "d1.tsv:2000,");
    free(l);
    /* a name with quotes and backslashes is logged as valid JSON; a name that is not UTF-8 is
     * refused, naming it (the ledger is JSON) */
    cr_assert_eq(th_run(&o, "mkdir q && cp d3.tsv 'q/a\"b\\c.tsv' && " RUN " --follow q --follow-idle 0 --out fq"), 0, "%s", o);
    free(o);
    size_t len;
    char *log = th_read(th_path("fq/log.jsonl"), &len);
    int files = 0;
    for (char *line = strtok(log, "\n"); line; line = strtok(NULL, "\n")) {
        json_t *j = json_loads(line, 0, NULL);
        cr_assert(j, "not JSON: %s", line);
        const char *f = json_string_value(json_object_get(j, "file"));
        if (f && !strcmp(json_string_value(json_object_get(j, "kind")), "file")) {
            cr_assert_str_eq(f, "a\"b\\c.tsv");
            files++;
        }
        json_decref(j);
    }
    cr_assert_eq(files, 1);
    free(log);
    cr_assert_neq(th_run(&o, "mkdir u && cp d3.tsv \"u/$(printf 'x\\377.tsv')\" && " RUN " --follow u --follow-idle 0 --out fu"), 0);
    cr_assert(strstr(o, "the name is not UTF-8"), "%s", o);
    free(o);
}

/* Rows, keys and dense layers of two models, compared exactly. */
static void same_model(model *a, model *b)
{
    cr_assert_eq(model_n_tables(a), model_n_tables(b));
    for (int t = 0; t < model_n_tables(a); t++) {
        emb_table *x = model_table(a, t), *y = model_table(b, t);
        cr_assert_eq(emb_table_rows(x), emb_table_rows(y), "table %d: %zu rows, %zu", t, emb_table_rows(x), emb_table_rows(y));
        size_t V = (size_t)emb_table_values(x);
        for (size_t r = 0; r < emb_table_rows(x); r++) {
            int64_t s = emb_table_find(y, emb_table_head(x, (uint32_t)r)->key);
            cr_assert_geq(s, 0, "key %016llx missing", (unsigned long long)emb_table_head(x, (uint32_t)r)->key);
            cr_assert_eq(memcmp(emb_table_vals(x, (uint32_t)r), emb_table_vals(y, (uint32_t)s), V * sizeof(float)), 0);
        }
    }
    char *da, *db;
    size_t la, lb;
    FILE *fa = open_memstream(&da, &la), *fb = open_memstream(&db, &lb);
    cr_assert_eq(model_save_dense(a, fa), 0);
    cr_assert_eq(model_save_dense(b, fb), 0);
    fclose(fa), fclose(fb);
    cr_assert(la == lb && !memcmp(da, db, la), "dense layers differ");
    free(da), free(db);
}

/* Base plus deltas is the full bundle of the final model, key for key, with keys deleted by
 * shrink on the way (and created again); in memory and from a table folder; in fp16 too. Deltas
 * out of order, with a gap, or given as a base are refused. */
Test(follow, base_and_deltas_give_the_full_bundle)
{
    make_days();
    for (int tiered = 0; tiered < 2; tiered++) {
        const char *where = tiered ? "--table-dir t --cache-mb 0.05" : "";
        char *o;
        int rc = th_run(&o, "rm -rf m m6 t *.bdl && " RUN " --epochs 1 --train d1.tsv d2.tsv --out m %s && "
                            "$B/ctrbox export-serving --model m --out base.bdl && "
                            "$B/ctrbox export-serving --model m --out base16.bdl --dtype fp16 && "
                            "cp -r m m6 && " RUN " --epochs 1 --train d3.tsv d4.tsv --init m --out m --shrink-unseen 1 && "
                            "$B/ctrbox export-serving --model m --since m6 --out x1.bdl && "
                            "$B/ctrbox export-serving --model m --since 6 --out x1_16.bdl --dtype fp16 && "
                            RUN " --epochs 1 --train d5.tsv d6.tsv --init m --out m && "
                            "$B/ctrbox export-serving --model m --since 12 --out x2.bdl && "
                            "$B/ctrbox export-serving --model m --since 12 --out x2_16.bdl --dtype fp16 && "
                            "$B/ctrbox export-serving --model m --out full.bdl && "
                            "$B/ctrbox export-serving --model m --out full16.bdl --dtype fp16 && "
                            "$B/ctrbox predict --bundle full.bdl --data va.tsv --out pf.txt && "
                            "$B/ctrbox predict --bundle base.bdl --delta x1.bdl --delta x2.bdl --data va.tsv --out pd.txt && "
                            /* the second run's deletions, kept through the third run's commits */
                            "$B/ctrbox export-serving --model m --since 6 --out x12.bdl && "
                            "$B/ctrbox predict --bundle base.bdl --delta x12.bdl --data va.tsv --out pd12.txt",
                            where);
        cr_assert_eq(rc, 0, "%s", o);
        free(o);
        th_same_file("pf.txt", "pd.txt");
        th_same_file("pf.txt", "pd12.txt");
        const char *sets[2][4] = { { "base.bdl", "x1.bdl", "x2.bdl", "full.bdl" },
                                   { "base16.bdl", "x1_16.bdl", "x2_16.bdl", "full16.bdl" } };
        for (int q = 0; q < 2; q++) {
            model *b, *f;
            model_meta mb, mf;
            char err[600];
            cr_assert_eq(modelfile_bundle_load(th_path(sets[q][0]), &b, &mb, err, sizeof err), 0, "%s", err);
            model *b0;
            model_meta m0;
            cr_assert_eq(modelfile_bundle_load(th_path(sets[q][0]), &b0, &m0, err, sizeof err), 0, "%s", err);
            cr_assert_eq(modelfile_bundle_apply(th_path(sets[q][1]), b, &mb, err, sizeof err), 0, "%s", err);
            size_t gone = 0;
            for (size_t r = 0; r < emb_table_rows(model_table(b0, 0)); r++)
                gone += emb_table_find(model_table(b, 0), emb_table_head(model_table(b0, 0), (uint32_t)r)->key) < 0;
            cr_assert_gt(gone, 100, "the first delta deletes keys (%zu)", gone);
            model_destroy(b0);
            model_meta_free(&m0);
            cr_assert_eq(modelfile_bundle_apply(th_path(sets[q][2]), b, &mb, err, sizeof err), 0, "%s", err);
            cr_assert_eq(modelfile_bundle_load(th_path(sets[q][3]), &f, &mf, err, sizeof err), 0, "%s", err);
            cr_assert_eq(mb.passes, mf.passes);
            same_model(f, b);
            /* the first after the second: refused, the model unchanged; the second again: no change */
            cr_assert_neq(modelfile_bundle_apply(th_path(sets[q][1]), b, &mb, err, sizeof err), 0);
            cr_assert(strstr(err, "older"), "%s", err);
            same_model(f, b);
            cr_assert_eq(modelfile_bundle_apply(th_path(sets[q][2]), b, &mb, err, sizeof err), 0, "%s", err);
            same_model(f, b);
            model_destroy(b), model_destroy(f);
            model_meta_free(&mb), model_meta_free(&mf);
        }
        cr_assert_neq(th_run(&o, "$B/ctrbox predict --bundle base.bdl --delta x2.bdl --data va.tsv --out p.txt"), 0);
        cr_assert(strstr(o, "x2.bdl: holds the changes after pass 12 up to pass 18, the model is at pass 6: the deltas "
                            "between are missing"), "%s", o);
        free(o);
        cr_assert_neq(th_run(&o, "$B/ctrbox predict --bundle x1.bdl --data va.tsv --out p.txt"), 0);
        cr_assert(strstr(o, "x1.bdl: a delta"), "%s", o);
        free(o);
        cr_assert_neq(th_run(&o, "$B/ctrbox export-serving --model m --since 99 --out y.bdl"), 0);
        cr_assert(strstr(o, "--since 99: the model has trained 18 passes"), "%s", o);
        free(o);
        /* an offline shrink: in memory its deletions go in the next delta; a table folder's are not
         * in the deletion record, and a delta must start after them */
        rc = th_run(&o, "$B/ctrbox-table shrink m --unseen 1 && $B/ctrbox export-serving --model m --since 18 --out y.bdl && "
                        "$B/ctrbox export-serving --model m --out full2.bdl && "
                        "$B/ctrbox predict --bundle full2.bdl --data va.tsv --out pf2.txt && "
                        "$B/ctrbox predict --bundle full.bdl --delta y.bdl --data va.tsv --out pd2.txt");
        if (tiered) {
            cr_assert_neq(rc, 0, "%s", o);
            cr_assert(strstr(o, "--since 18: the keys deleted before pass 19 are not recorded (ctrbox-table shrink"), "%s", o);
        } else {
            cr_assert_eq(rc, 0, "%s", o);
            th_same_file("pf2.txt", "pd2.txt");
            cr_assert_eq(th_run(NULL, "cmp -s pf.txt pf2.txt"), 1, "the shrink changed the predictions");
        }
        free(o);
    }
}

/* A run killed inside an entry's first pass, after a part's commit, resumes there: its export
 * comes at the entry's end, not at the resume (a delta made then held half a pass under the
 * pass's number, and the entry's end found that pass exported). Base and deltas give the full
 * bundle. The kill waits for the pass's second part to be logged (its first part committed at
 * this budget); a run that ends before it tests nothing more than an uninterrupted one. */
Test(follow, kill_inside_an_entry_s_first_pass_exports_at_its_end)
{
    make_days();
#define EX SLOW " --epochs 1 --pass-rows 4000 --table-dir t --cache-mb 0.05 --export-dir ex --export-every 2 --follow-done " \
           "--follow in --out k"
    char *o;
    int rc = th_run(&o, "mkdir -p in && for i in 1 2; do cp d$i.tsv in/ && touch in/d$i.tsv.done; done && "
                        EX " --follow-idle 0 && cp d3.tsv in/ && touch in/d3.tsv.done && "
                        "{ " EX " & p=$!; for i in $(seq 3000); do "
                        "grep -q '\"pass\": 3, \"epoch\": 1, \"pass_in_epoch\": 1, \"from\": [1-9]' k/log.jsonl && break; "
                        "sleep 0.01; done; kill -9 $p; wait $p; true; } && "
                        EX " --follow-idle 0 && "
                        "$B/ctrbox export-serving --model k --out full.bdl && "
                        "$B/ctrbox predict --bundle full.bdl --data va.tsv --out pf.txt && "
                        "ds=$(grep -o '\"delta-[^\"]*\"' ex/manifest.json | tr -d '\"' | sed 's|^|--delta ex/|' | tr '\\n' ' ') && "
                        "base=$(grep -o '\"base-[^\"]*\"' ex/manifest.json | tr -d '\"') && "
                        "$B/ctrbox predict --bundle ex/$base $ds --data va.tsv --out pd.txt");
#undef EX
    cr_assert_eq(rc, 0, "%s", o);
    free(o);
    th_same_file("pf.txt", "pd.txt");
}
