/*
 * test_train.c: ctrbox train / eval / predict end to end on generated data: every model learns,
 * one thread and a seed give the same model bytes twice, any number of threads the same as one,
 * early stopping, the JSON log, INI configs, predictions, gAUC, and a corrupt model file is
 * refused.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

TestSuite(train, .fini = th_cleanup);

#define SMALL "--dim 4 --hidden 16,16 --bottom 8,4 --cross 2 --batch 256 --quiet"

static void make_data(void)
{
    cr_assert_eq(th_run(NULL, "$B/ctrbox-data gen --rows 20000 --seed 1 --keys 0.001 --out tr.tsv && "
                              "$B/ctrbox-data gen --rows 4000 --seed 1 --keys 0.001 --offset 20000 --out va.tsv --truth va.truth"),
                 0);
}

static json_t *eval_json(const char *dir, const char *data)
{
    char *out;
    int rc = th_run(&out, "$B/ctrbox eval --model %s --data %s --json", dir, data);
    cr_assert_eq(rc, 0, "%s", out);
    json_t *j = json_loads(out, 0, NULL);
    cr_assert_not_null(j, "%s", out);
    free(out);
    return j;
}

Test(train, every_model_learns)
{
    make_data();
    const char *models[] = { "lr", "fm", "ffm", "dnn", "widedeep", "deepfm", "dcnv2", "dlrm" };
    for (int i = 0; i < 8; i++) {
        char *out;
        int rc = th_run(&out, "$B/ctrbox train --model %s --format criteo --train tr.tsv --valid va.tsv --out m_%s "
                              "--epochs 2 --lr 0.01 " SMALL, models[i], models[i]);
        cr_assert_eq(rc, 0, "%s: %s", models[i], out);
        free(out);
        char dir[32];
        snprintf(dir, sizeof dir, "m_%s", models[i]);
        json_t *j = eval_json(dir, "va.tsv");
        double auc = json_real_value(json_object_get(j, "auc"));
        cr_assert_gt(auc, 0.70, "%s: test AUC %f", models[i], auc);
        cr_assert_eq(json_integer_value(json_object_get(j, "rows")), 4000);
        cr_assert(json_is_real(json_object_get(j, "calibration")));
        json_decref(j);
    }
}

Test(train, deterministic_with_one_thread)
{
    make_data();
    const char *cmd = "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --valid va.tsv --epochs 2 "
                      "--threads 1 --batchnorm --dropout 0.1 " SMALL;
    cr_assert_eq(th_run(NULL, "%s --seed 3 --out a", cmd), 0);
    cr_assert_eq(th_run(NULL, "%s --seed 3 --out b", cmd), 0);
    cr_assert_eq(th_run(NULL, "%s --seed 4 --out c", cmd), 0);
    cr_assert_eq(th_run(NULL, "cmp a/model.ctrbox b/model.ctrbox"), 0, "same seed, same bytes");
    cr_assert_neq(th_run(NULL, "cmp -s a/model.ctrbox c/model.ctrbox"), 0, "another seed, another model");
}

/* The dense products run in blocks that depend on the shapes alone (dense/layers.c): one, two and
 * three threads train the same model bytes and predict the same scores, for a wide layer (d
 * weight split by its rows), batches of uneven blocks, batch norm with dropout, and lanes (as
 * under mpirun). Before, each
 * --threads set OpenBLAS's own split, whose rounding differed. */
Test(train, the_model_does_not_depend_on_the_threads)
{
    make_data();
    const char *runs[] = { "--model deepfm --hidden 600,32 --batch 1000", "--model dcnv2 --hidden 64 --cross 2 --batch 777 "
                           "--batchnorm --dropout 0.1", "--model dlrm --bottom 32,4 --hidden 48 --batch 4096",
                           "--model deepfm --hidden 32 --batch 600 --lanes 3" };
    for (int i = 0; i < 4; i++)
        for (int t = 1; t <= 3; t++) {
            char *out;
            int rc = th_run(&out, "$B/ctrbox train %s --format criteo --train tr.tsv --epochs 2 --dim 4 --lr 0.01 --seed 2 "
                                  "--quiet --threads %d --out m%d_%d && OMP_NUM_THREADS=%d $B/ctrbox predict --model m%d_%d "
                                  "--data va.tsv --out p%d_%d.txt", runs[i], t, i, t, t, i, t, i, t);
            cr_assert_eq(rc, 0, "%s, %d threads: %s", runs[i], t, out);
            free(out);
            if (t == 1) continue;
            cr_assert_eq(th_run(NULL, "cmp m%d_1/model.ctrbox m%d_%d/model.ctrbox", i, i, t), 0, "%s: %d threads, another model",
                         runs[i], t);
            cr_assert_eq(th_run(NULL, "cmp p%d_1.txt p%d_%d.txt", i, i, t), 0, "%s: %d threads, other scores", runs[i], t);
        }
}

Test(train, early_stopping_log_and_predictions)
{
    make_data();
    char *out;
    /* nothing can improve with lr 0: one epoch without a better AUC ends the run */
    cr_assert_eq(th_run(&out, "$B/ctrbox train --model lr --format criteo --train tr.tsv --valid va.tsv --out s "
                              "--epochs 6 --patience 1 --lr 0 " SMALL),
                 0, "%s", out);
    free(out);
    cr_assert_eq(th_run(&out, "wc -l < s/log.jsonl"), 0);
    cr_assert_eq(atoi(out), 2, "stopped after epoch 2: %s", out);
    free(out);
    cr_assert_eq(th_run(&out, "$B/ctrbox train --model fm --format criteo --train tr.tsv --valid va.tsv --out f "
                              "--epochs 2 --eval-every 20 --lr 0.01 " SMALL), 0, "%s", out);
    free(out);
    char *log = th_read(th_path("f/log.jsonl"), NULL);
    char *line = strtok(log, "\n");
    int steps = 0, epochs = 0;
    while (line) {
        json_t *j = json_loads(line, 0, NULL);
        cr_assert_not_null(j, "log line is JSON: %s", line);
        cr_assert(json_is_real(json_object_get(j, "valid_auc")));
        const char *kind = json_string_value(json_object_get(j, "kind"));
        steps += !strcmp(kind, "step");
        epochs += !strcmp(kind, "epoch");
        json_decref(j);
        line = strtok(NULL, "\n");
    }
    free(log);
    cr_assert_eq(epochs, 2);
    cr_assert_eq(steps, 7, "20000 rows / 256 per batch = 79 steps per epoch, an evaluation every 20 steps");
    cr_assert_eq(th_run(&out, "$B/ctrbox predict --model f --data va.tsv --out p.txt && wc -l < p.txt && "
                              "$B/ctrbox eval --model f --data va.tsv --pred-out lp.txt --group C1 --json && "
                              "$B/ctrbox eval --scores lp.txt --json"), 0, "%s", out);
    cr_assert(strstr(out, "4000\n"), "one prediction per row: %s", out);
    cr_assert(strstr(out, "\"gauc\""), "%s", out);
    /* the scores file written by --pred-out gives the same AUC as the model evaluation */
    char *a = strstr(out, "\"auc\": "), *b = a ? strstr(a + 1, "\"auc\": ") : NULL;
    cr_assert(a && b);
    cr_assert(strncmp(a, b, 14) == 0, "%s", out);
    free(out);
}

/* One training loop: in memory an epoch is one pass, streamed from the files. In file order its
 * batches are those of a single --pass-rows pass over the whole epoch, so both give the same
 * model, shrink at each epoch end (--shrink-*) included. */
Test(train, an_epoch_in_memory_is_one_pass)
{
    make_data();
    const char *cmd = "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --epochs 2 --threads 1 "
                      "--shuffle-rows 0 " SMALL;
    cr_assert_eq(th_run(NULL, "%s --shrink-threshold 0.3 --out one", cmd), 0);
    cr_assert_eq(th_run(NULL, "%s --shrink-threshold 0.3 --pass-rows 1000000 --out pass", cmd), 0);
    cr_assert_eq(th_run(NULL, "%s --out keep", cmd), 0);
    cr_assert_eq(th_run(NULL, "for m in one pass keep; do $B/ctrbox predict --model $m --data va.tsv --out p_$m.txt || "
                              "exit 1; done"), 0);
    th_same_file("p_one.txt", "p_pass.txt");
    cr_assert_neq(th_run(NULL, "cmp -s p_one.txt p_keep.txt"), 0, "the streamed run shrank its table");
}

Test(train, admission_by_min_show)
{
    make_data();
    char *out;
    cr_assert_eq(th_run(&out, "$B/ctrbox train --model fm --format criteo --train tr.tsv --valid va.tsv --out a "
                              "--epochs 2 --lr 0.01 --min-show 3 " SMALL), 0, "%s", out);
    free(out);
    json_t *j = eval_json("a", "va.tsv");
    cr_assert_gt(json_real_value(json_object_get(j, "auc")), 0.70);
    json_decref(j);
    /* fewer rows than keys seen: rare keys share their field's row (exact counts and the sketch alike) */
    cr_assert_eq(th_run(&out, "$B/ctrbox train --model fm --format criteo --train tr.tsv --out b --epochs 1 " SMALL " && "
                              "$B/ctrbox train --model fm --format criteo --train tr.tsv --out c --epochs 1 --min-show 3 " SMALL " && "
                              "$B/ctrbox train --model fm --format criteo --train tr.tsv --out d --epochs 1 --min-show 3 "
                              "--admit-mb 0 " SMALL " && for m in b c d; do $B/ctrbox info $m --json | "
                              "python3 -c 'import json,sys; print(\"rows\", sum(t[\"rows\"] for t in json.load(sys.stdin)[\"tables\"]))'; done"),
                 0, "%s", out);
    long rb = 0, rc = 0, rd = 0;
    const char *sz = strstr(out, "rows ");   /* after the trainers' summaries */
    cr_assert(sz && sscanf(sz, "rows %ld rows %ld rows %ld", &rb, &rc, &rd) == 3, "%s", out);
    cr_assert_lt(rc * 2, rb, "admission keeps rare keys out of the table: %ld vs %ld rows", rc, rb);
    cr_assert_eq(rc, rd, "the sketch admits as exact counts do on data this small");
    free(out);
}

Test(train, tables_per_field_and_sizes)
{
    make_data();
    char *out;
    cr_assert_eq(th_run(&out, "$B/ctrbox train --model dnn --format criteo --train tr.tsv --valid va.tsv --out t "
                              "--epochs 2 --lr 0.01 --table-per-field --field-dim C1=8,C9=2 " SMALL), 0, "%s", out);
    free(out);
    json_t *j = eval_json("t", "va.tsv");
    cr_assert_gt(json_real_value(json_object_get(j, "auc")), 0.70);
    json_decref(j);
    cr_assert_neq(th_run(&out, "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --out u --field-dim C1=8 " SMALL), 0);
    cr_assert(strstr(out, "--field-dim") && strstr(out, "pairwise"), "%s", out);
    free(out);
    cr_assert_neq(th_run(&out, "$B/ctrbox train --model dnn --format criteo --train tr.tsv --out u --field-dim Q7=8 " SMALL), 0);
    cr_assert(strstr(out, "Q7"), "%s", out);
    free(out);
}

Test(train, ini_config_and_bad_input)
{
    make_data();
    th_write_str(th_path("m.ini"), "[model]\nmodel = dnn\ndim = 4\nhidden = 8\nbatchnorm = true\n[train]\nepochs = 1\nbatch = 256\n");
    char *out;
    cr_assert_eq(th_run(&out, "$B/ctrbox train --config m.ini --format criteo --train tr.tsv --out i --quiet --dim 6"), 0, "%s", out);
    free(out);
    size_t len;
    char *bytes = th_read(th_path("i/model.ctrbox"), &len);
    cr_assert(strstr(bytes + 24, "\"kind\":\"dnn\"") && strstr(bytes + 24, "\"dim\":6") && strstr(bytes + 24, "\"hidden\":[8]") &&
              strstr(bytes + 24, "\"batchnorm\":true"), "config read, command line wins: %.300s", bytes + 24);
    bytes[len - 20] ^= 1;
    th_write(th_path("i/model.ctrbox"), bytes, len);
    free(bytes);
    cr_assert_neq(th_run(&out, "$B/ctrbox eval --model i --data va.tsv"), 0);
    cr_assert(strstr(out, "i/model.ctrbox"), "corruption is reported with the file: %s", out);
    free(out);
    th_write_str(th_path("bad.ini"), "[x]\nnot_an_option = 3\n");
    cr_assert_neq(th_run(&out, "$B/ctrbox train --config bad.ini --model lr --format criteo --train tr.tsv --out z"), 0);
    cr_assert(strstr(out, "not_an_option"), "%s", out);
    free(out);
    cr_assert_neq(th_run(&out, "$B/ctrbox train --model nope --train tr.tsv --out z"), 0);
    cr_assert(strstr(out, "--model nope"), "%s", out);
    free(out);
    cr_assert_neq(th_run(&out, "$B/ctrbox eval --model missing --data va.tsv"), 0);
    cr_assert(strstr(out, "missing/model.ctrbox"), "%s", out);
    free(out);
}

/* Scoring logs without labels: criteo's 39-column test layout, libsvm lines without the label,
 * and a csv without its label column get the scores of their labeled twins; a csv's
 * --id-column comes through, in row order, as "id,probability" under a header. */
Test(train, unlabeled_logs_are_scored_like_their_labeled_twins)
{
    make_data();
    char *o;
    int rc = th_run(&o,
        "$B/ctrbox train --model fm --format criteo --train tr.tsv --epochs 1 --out mc " SMALL " && "
        "cut -f2- va.tsv > va_nl.tsv && "
        "$B/ctrbox predict --model mc --data va.tsv --out pc1.txt && "
        "$B/ctrbox predict --model mc --data va_nl.tsv --out pc2.txt && "
        /* libsvm: the criteo rows' categorical tokens as indexes */
        "svm() { awk -F'\\t' '{ s = $1; for (i = 15; i <= 40; i++) if ($i != \"\") s = s \" \" (i * 1000 + (length($i) * 7 + index(\"0123456789abcdef\", substr($i, 1, 1)))) \":1\"; print s }' \"$1\"; } && "
        "svm tr.tsv > tr.svm && svm va.tsv > va.svm && "
        "cut -d' ' -f2- va.svm > va_nl.svm && "
        "$B/ctrbox train --model lr --format libsvm --train tr.svm --epochs 1 --out ms " SMALL " && "
        "$B/ctrbox predict --model ms --data va.svm --out ps1.txt && "
        "$B/ctrbox predict --model ms --data va_nl.svm --out ps2.txt && "
        /* csv with an id column the model skips */
        "csv() { awk -F'\\t' 'BEGIN { print \"rid,click,C1,C2,C3\" } { print \"r\" NR \",\" $1 \",\" $15 \",\" $16 \",\" $17 }' \"$1\"; } && "
        "csv tr.tsv > tr.csv && csv va.tsv > va.csv && "
        "awk -F'\\t' 'BEGIN { print \"rid,C1,C2,C3\" } { print \"r\" NR \",\" $15 \",\" $16 \",\" $17 }' va.tsv > va_nl.csv && "
        "$B/ctrbox train --model fm --format csv --schema rid:skip --train tr.csv --epochs 1 --out mv " SMALL " && "
        "$B/ctrbox predict --model mv --data va.csv --out pv1.txt --id-column rid && "
        "$B/ctrbox predict --model mv --data va_nl.csv --out pv2.txt --id-column rid && "
        "$B/ctrbox predict --model mv --data va_nl.csv --out pv3.txt && "
        "head -1 pv2.txt && sed -n 2p pv2.txt | cut -d, -f1 && tail -1 pv2.txt | cut -d, -f1 && wc -l < pv2.txt && "
        "cut -d, -f2 pv2.txt | tail -n +2 | cmp - pv3.txt && echo same-scores");
    cr_assert_eq(rc, 0, "%s", o);
    cr_assert(strstr(o, "rid,probability\nr1\nr4000\n4001\nsame-scores"), "%s", o);
    free(o);
    th_same_file("pc1.txt", "pc2.txt");
    th_same_file("ps1.txt", "ps2.txt");
    th_same_file("pv1.txt", "pv2.txt");
    /* eval needs the labels, and says so */
    cr_assert_neq(th_run(&o, "$B/ctrbox eval --model mc --data va_nl.tsv"), 0);
    cr_assert(strstr(o, "without its label"), "%s", o);
    free(o);
}

/* Daily training (--init): day 1, then day 2 from day 1's model, then day 3 from day 2's, give
 * the model of one run over the three days with the same pass boundaries: in memory the same
 * bytes, in a table folder the same rows (optimizer state and counters included) and
 * predictions. Running a finished day again trains nothing twice; another architecture is
 * refused in one line that names the difference. */
Test(train, warm_start_over_days_equals_one_run)
{
    cr_assert_eq(th_run(NULL, "$B/ctrbox-data gen --rows 9000 --seed 7 --keys 0.002 --out all.tsv && "
                              "$B/ctrbox-data gen --rows 2000 --seed 7 --keys 0.002 --offset 9000 --out va.tsv && "
                              "head -3000 all.tsv > d1.tsv && sed -n 3001,6000p all.tsv > d2.tsv && tail -3000 all.tsv > d3.tsv"),
                 0);
    const char *run = "$B/ctrbox train --model deepfm --format criteo --epochs 1 --pass-rows 1000 --dim 4 --hidden 8 "
                      "--batch 256 --lr 0.01 --threads 1 --seed 5 --shuffle-rows 0 --decay 0.9 --min-show 2 --quiet";
    for (int tiered = 0; tiered < 2; tiered++) {
        const char *where = tiered ? "--cache-mb 0.05" : "";
        char *o;
        int rc = th_run(&o, "rm -rf one n1 n2 n3 t1 t3 && "
                            "%s %s --train d1.tsv d2.tsv d3.tsv --out one %s 2>/dev/null && "
                            "%s %s --train d1.tsv --out n1 %s 2>/dev/null && "
                            "%s %s --train d2.tsv --init n1 --out n2 2>/dev/null && "
                            "%s %s --train d2.tsv --init n1 --out n2 2>/dev/null && "   /* again: nothing trained twice */
                            "%s %s --train d3.tsv --init n2 --out n3 2>/dev/null && "
                            "$B/ctrbox predict --model one --data va.tsv --out p1.txt && "
                            "$B/ctrbox predict --model n3 --data va.tsv --out p3.txt",
                            run, where, tiered ? "--table-dir t3" : "", run, where, tiered ? "--table-dir t1" : "", run,
                            where, run, where, run, where);
        cr_assert_eq(rc, 0, "%s", o);
        free(o);
        th_same_file("p1.txt", "p3.txt");
        if (tiered) {
            th_same_rows("t3", "t1");
        } else {
            th_same_file("one/model.ctrbox", "n3/model.ctrbox");
        }
    }
    char *o;
    cr_assert_neq(th_run(&o, "%s --train d2.tsv --init n1 --out bad --dim 8", run), 0);
    cr_assert(strstr(o, "--init n1: another architecture: --dim 4 in the model, 8 here"), "%s", o);
    free(o);
    /* day 1's model no longer pairs with its folder once day 2 trained on in it */
    cr_assert_neq(th_run(&o, "%s --train d3.tsv --init n1 --out bad --cache-mb 0.05 --seed 6", run), 0);
    cr_assert(strstr(o, "--init"), "%s", o);
    free(o);
}

/* --init from a table folder of pretrained rows (ctrbox-table import): the run finds every key
 * there (no new key), and with learning rates 0 the rows it ends with are the imported ones. */
Test(train, warm_start_from_imported_rows)
{
    make_data();
    char *o;
    int rc = th_run(&o,
        "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --epochs 1 --out a " SMALL " --threads 1 && "
        "$B/ctrbox-table export a --to npy emb && $B/ctrbox-table import --from npy emb f --dim 4 --w 1 --opt adam && "
        "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --epochs 1 --out w --init f --pass-rows 5000 "
        "--cache-mb 0.2 --lr 0 --sparse-lr 0 " SMALL " --threads 1 2>/dev/null && "
        "$B/ctrbox-table export a --to text a.txt && $B/ctrbox-table export f --to text f.txt && "
        "cut -f1,4- a.txt | sort > a2.txt && cut -f1,4- f.txt | sort > f2.txt && "
        "grep -o '\"kind\": \"pass\", \"pass\": [0-9]*' w/log.jsonl | sort -u | wc -l && "
        "grep -o '\"new_keys\": [0-9.]*' w/log.jsonl | sort -u");
    cr_assert_eq(rc, 0, "%s", o);
    cr_assert(strstr(o, "\n4\n\"new_keys\": 0.000000\n"), "four passes, every key found in the imported rows: %s", o);
    free(o);
    th_same_file("a2.txt", "f2.txt");
    /* rows of another size are refused, naming both layouts */
    cr_assert_neq(th_run(&o, "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --epochs 1 --out w2 --init f "
                             "--pass-rows 5000 --dim 8 --hidden 16,16 --batch 256 --quiet"), 0);
    cr_assert(strstr(o, "tables of another model"), "%s", o);
    free(o);
}
