/*
 * test_follow.c: training from a stream of logs: the deltas a serving process applies to its base
 * bundle.
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
Test(follow, base_and_deltas_give_the_full_bundle, .timeout = 300)
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
                            "$B/ctrbox predict --bundle base.bdl --delta x1.bdl --delta x2.bdl --data va.tsv --out pd.txt",
                            where);
        cr_assert_eq(rc, 0, "%s", o);
        free(o);
        th_same_file("pf.txt", "pd.txt");
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
