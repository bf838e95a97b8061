/*
 * test_tabletool.c: ctrbox-table on the folders the trainer writes: inspect, and exact round
 * trips export -> import -> export for text (with optimizer state), NumPy (read back with numpy)
 * and HugeCTR's key / emb_vector files; bad input is refused and leaves the destination as it was.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

TestSuite(tabletool, .fini = th_cleanup);

static void trained_folder(void)
{
    char *o;
    int rc = th_run(&o, "$B/ctrbox-data gen --rows 6000 --seed 4 --keys 0.002 --out tr.tsv && "
                        "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --epochs 1 --pass-rows 2000 "
                        "--dim 4 --hidden 8 --threads 1 --quiet --out m --table-dir t --cache-mb 0.05");
    cr_assert_eq(rc, 0, "%s", o);
    free(o);
}

static char *run_ok(const char *cmd)
{
    char *o;
    int rc = th_run(&o, "%s", cmd);
    cr_assert_eq(rc, 0, "%s: %s", cmd, o);
    return o;
}

static void same(const char *a, const char *b)
{
    size_t la, lb;
    char *x = th_read(th_path(a), &la), *y = th_read(th_path(b), &lb);
    cr_assert(la > 0 && la == lb && !memcmp(x, y, la), "%s and %s differ", a, b);
    free(x);
    free(y);
}

Test(tabletool, inspect_a_table_folder_and_a_model)
{
    trained_folder();
    char *o = run_ok("$B/ctrbox-table inspect t --json");
    cr_assert(strstr(o, "\"storage\": \"ssd-tier\"") && strstr(o, "\"optimizer\": \"adam\"") && strstr(o, "\"dim\": 4"), "%s", o);
    cr_assert(strstr(o, "\"last_committed_pass\": 3"), "%s", o);
    cr_assert(strstr(o, "\"top_keys\"") && strstr(o, "\"show_histogram_log2\""), "%s", o);
    free(o);
    /* the model folder names the table folder */
    o = run_ok("$B/ctrbox-table inspect m");
    cr_assert(strstr(o, "SSD tier") && strstr(o, "table 0: dim 4 + weight"), "%s", o);
    free(o);
    /* an in-memory model file */
    free(run_ok("$B/ctrbox train --model fm --format criteo --train tr.tsv --epochs 1 --dim 4 --quiet --out mm"));
    o = run_ok("$B/ctrbox-table inspect mm --json");
    cr_assert(strstr(o, "\"storage\": \"model-file\""), "%s", o);
    free(o);
}

/* One shrink (embedding/shrink.h): the trainer at its epoch end and ctrbox-table shrink after a run
 * without shrink delete the same keys, from a table folder and from a model file, and both spare
 * the fields' default rows of admission (a threshold no key reaches leaves only those). */
Test(tabletool, trainer_and_tool_shrink_the_same_keys)
{
    free(run_ok("$B/ctrbox-data gen --rows 12000 --seed 5 --keys 0.002 --out tr.tsv"));
    const char *run = "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --epochs 1 --pass-rows 1500 --dim 4 "
                      "--hidden 8 --batch 256 --lr 0.01 --threads 1 --quiet --min-show 3 --decay 0.9";
    const char *rules[][2] = { { "--shrink-threshold 0.4 --shrink-unseen 3", "--threshold 0.4 --unseen 3" },
                               { "--shrink-threshold 1e9", "--threshold 1e9" } };
    for (int tiered = 0; tiered < 2; tiered++)
        for (int i = 0; i < 2; i++) {
            char cmd[2048];
            const char *where = tiered ? "--table-dir tA --cache-mb 1.2" : "";
            free(run_ok("rm -rf mA mB tA tB a.txt b.txt"));
            snprintf(cmd, sizeof cmd, "%s %s %s --out mA 2>/dev/null", run, rules[i][0], where);
            free(run_ok(cmd));
            snprintf(cmd, sizeof cmd, "%s %s --out mB 2>/dev/null && $B/ctrbox-table shrink %s %s --decay 0.9", run,
                     tiered ? "--table-dir tB --cache-mb 1.2" : "", tiered ? "tB" : "mB", rules[i][1]);
            char *o = run_ok(cmd);
            unsigned long long del = 0, kept = 0;
            cr_assert(strstr(o, "keys deleted") && sscanf(strstr(o, "pass 8: "), "pass 8: %llu keys deleted, %llu kept", &del,
                                                          &kept) == 2, "%s", o);
            cr_assert_gt(del, 0, "%s", o);
            free(o);
            snprintf(cmd, sizeof cmd, "$B/ctrbox-table export %s --to text a.txt --with-optimizer >/dev/null 2>&1 && "
                     "$B/ctrbox-table export %s --to text b.txt --with-optimizer >/dev/null 2>&1 && sort a.txt > as.txt && "
                     "sort b.txt > bs.txt && wc -l < as.txt", tiered ? "tA" : "mA", tiered ? "tB" : "mB");
            o = run_ok(cmd);
            cr_assert_gt(atoi(o), 0, "the default rows stay (%s): %s", rules[i][1], o);
            free(o);
            same("as.txt", "bs.txt");
        }
}

Test(tabletool, round_trips_are_exact)
{
    trained_folder();
    /* text with the optimizer state: every byte of every row comes back */
    free(run_ok("$B/ctrbox-table export t --to text a.txt --with-optimizer && "
                "$B/ctrbox-table import --from text a.txt t2 --dim 4 --w 1 --opt adam && "
                "$B/ctrbox-table export t2 --to text b.txt --with-optimizer && sort a.txt > as.txt && sort b.txt > bs.txt"));
    same("as.txt", "bs.txt");
    /* npy, checked with numpy against the text export, then imported and exported again */
    free(run_ok("$B/ctrbox-table export t --to npy np"));
    char *o;
    int rc = th_run(&o, "/usr/bin/python3 -c \"\n"
                        "import numpy as np\n"
                        "k = np.load('np/keys.npy'); v = np.load('np/values.npy'); c = np.load('np/counters.npy')\n"
                        "p = np.load('np/passes.npy'); assert p.dtype == np.uint32 and p.shape == k.shape and p.max() >= 1\n"
                        "rows = [l.split('\\t') for l in open('a.txt').read().splitlines()]\n"
                        "assert k.dtype == np.uint64 and v.dtype == np.float32 and v.shape == (len(rows), 5), (k.dtype, v.shape)\n"
                        "for i, r in enumerate(rows):\n"
                        "    assert int(k[i]) == int(r[0]), i\n"
                        "    assert c[i, 0] == np.float32(r[1]) and c[i, 1] == np.float32(r[2]), i\n"
                        "    assert (v[i] == np.array(r[3:8], dtype=np.float32)).all(), i\n"
                        "print('numpy ok', len(rows))\"");
    if (rc != 0 && strstr(o, "No module named")) {
        free(o);
        cr_skip_test("python3-numpy is not installed");
    }
    cr_assert_eq(rc, 0, "%s", o);
    cr_assert(strstr(o, "numpy ok"), "%s", o);
    free(o);
    free(run_ok("$B/ctrbox-table import --from npy np t3 --dim 4 --w 1 --opt adam && "
                "$B/ctrbox-table export t3 --to npy np3 && cmp np/keys.npy np3/keys.npy && cmp np/values.npy np3/values.npy && "
                "cmp np/counters.npy np3/counters.npy && cmp np/passes.npy np3/passes.npy"));
    /* keys.npy of int64 (as the previous release wrote it) reads as the same keys */
    free(run_ok("mkdir old && cp np/*.npy old/ && /usr/bin/python3 -c \"import numpy as np; "
                "np.save('old/keys.npy', np.load('np/keys.npy').view(np.int64))\" && "
                "$B/ctrbox-table import --from npy old t5 --dim 4 --w 1 --opt adam && "
                "$B/ctrbox-table export t5 --to npy np5 && cmp np/keys.npy np5/keys.npy && cmp np/values.npy np5/values.npy"));
    /* HugeCTR: keys and embedding vectors (the first-order weight is not part of it) */
    free(run_ok("$B/ctrbox-table export t --to hugectr hc && test $(stat -c %s hc/key) -gt 0 && "
                "test $(( $(stat -c %s hc/key) / 8 * 16 )) -eq $(stat -c %s hc/emb_vector) && "
                "$B/ctrbox-table import --from hugectr hc t4 --dim 4 --w 1 --opt adam && "
                "$B/ctrbox-table export t4 --to hugectr hc4 && cmp hc/key hc4/key && cmp hc/emb_vector hc4/emb_vector"));
}

Test(tabletool, bad_input_is_refused_and_changes_nothing)
{
    trained_folder();
    free(run_ok("$B/ctrbox-table export t --to text a.txt && $B/ctrbox-table export t --to npy np && "
                "$B/ctrbox-table export t --to hugectr hc && $B/ctrbox-table export t --to text before.txt"));
    struct {
        const char *setup, *cmd, *want;
    } cases[] = {
        { "head -c 100 np/values.npy > bad.npy && mkdir -p np2 && cp np/keys.npy np2/ && cp bad.npy np2/values.npy",
          "--from npy np2 t", "truncated" },
        { "mkdir -p np3 && cp np/values.npy np3/ && printf 'NOTNUMPY' > np3/keys.npy", "--from npy np3 t", "bad magic" },
        { "mkdir -p hc2 && cp hc/key hc2/ && head -c 64 hc/emb_vector > hc2/emb_vector", "--from hugectr hc2 t",
          "mismatched count or dimension" },
        { "printf '1\\t1\\t0\\t0.5\\t0.5\\n' > short.txt", "--from text short.txt t", "short.txt:1: 2 values" },
        { "head -3 a.txt > bad.txt && printf 'x\\t1\\n' >> bad.txt", "--from text bad.txt t", "bad.txt:4:" },
        { "true", "--from text a.txt t --dim 8", "table 0 has dim 4" },
        /* atoi: "--dim 4x" was 4, "--dim x" said "give --dim" */
        { "true", "--from text a.txt new --dim 4x --w 1", "--dim 4x: want a whole number from 1 to 4096" },
        { "true", "--from text a.txt new --dim 4 --w 2", "--w 2: want a whole number from 0 to 1" },
        /* a NaN as the last value (npy, HugeCTR) was imported as it was */
        { "mkdir -p np4 && cp np/*.npy np4/ && printf '\\000\\000\\300\\177' | dd of=np4/values.npy bs=1 "
          "seek=$(($(stat -c %s np4/values.npy) - 4)) conv=notrunc 2>/dev/null", "--from npy np4 t", "not a finite number" },
        { "mkdir -p hc5 && cp hc/* hc5/ && printf '\\000\\000\\200\\177' | dd of=hc5/emb_vector bs=1 "
          "seek=$(($(stat -c %s hc5/emb_vector) - 4)) conv=notrunc 2>/dev/null", "--from hugectr hc5 t", "not a finite number" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        cr_assert_eq(th_run(NULL, "%s", cases[i].setup), 0, "%s", cases[i].setup);
        char *o;
        int rc = th_run(&o, "$B/ctrbox-table import %s", cases[i].cmd);
        cr_assert_eq(rc, 1, "%s: %s", cases[i].cmd, o);
        cr_assert(strstr(o, cases[i].want), "%s: want '%s' in: %s", cases[i].cmd, cases[i].want, o);
        free(o);
    }
    /* a pipe: read twice (checked, then imported), it gave nothing the second time: "imported 0
     * rows", exit 0 */
    char *o;
    int rc = th_run(&o, "cat a.txt | $B/ctrbox-table import --from text /dev/stdin t");
    cr_assert(rc == 1 && strstr(o, "/dev/stdin: not a regular file"), "%s", o);
    free(o);
    free(run_ok("$B/ctrbox-table export t --to text after.txt"));
    same("before.txt", "after.txt");
}

/* An output among the files a command reads: with --force, `convert t --dtype fp16 t/COMMIT.ctrbox`
 * replaced the folder's commit record and the folder no longer opened (export alike, and npy files
 * into the folder itself). Refused whatever --force says, the folder unchanged; a new file there is
 * written. */
Test(tabletool, outputs_over_the_folder_read_are_refused)
{
    trained_folder();
    free(run_ok("$B/ctrbox-table export t --to text before.txt && find t m -type f -not -path 't/index/*' -exec md5sum {} + > before.md5"));
    static const char *const cases[] = {
        "convert t --dtype fp16 t/COMMIT.ctrbox --force", "export t --to text t/table0.slots --force",
        "export t --to npy t --force", "delta m --since 1 m/log.jsonl --force", "export m --to hugectr m --force",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *o;
        int rc = th_run(&o, "$B/ctrbox-table %s", cases[i]);
        cr_assert(rc == 1 && strstr(o, "which this command reads: it would be replaced"), "%s: exit %d: %s", cases[i], rc, o);
        free(o);
    }
    free(run_ok("md5sum -c --quiet before.md5 && $B/ctrbox-table export t --to text after.txt"));
    same("before.txt", "after.txt");
}

/* delta: the rows a pass changed, applied to the table as it was before that pass, give the
 * table after it; merge keeps the newer rows; shrink deletes by the accessor's rules in one commit
 * and is idempotent. */
Test(tabletool, delta_merge_and_shrink)
{
    char *o = run_ok("$B/ctrbox-data gen --rows 6000 --seed 4 --keys 0.002 --out tr.tsv && head -4000 tr.tsv > tr4.tsv && "
                     "A='--model deepfm --format criteo --epochs 1 --pass-rows 2000 --dim 4 --hidden 8 --threads 1 --quiet "
                     "--cache-mb 0.05' && $B/ctrbox train $A --train tr4.tsv --out ma --table-dir ta && "
                     "$B/ctrbox train $A --train tr.tsv --out mb --table-dir tb && "
                     "$B/ctrbox-table delta tb --since 2 d.txt && $B/ctrbox-table import --from text d.txt ta && "
                     "$B/ctrbox-table export ta --to text a.txt --with-optimizer && "
                     "$B/ctrbox-table export tb --to text b.txt --with-optimizer && sort a.txt > as.txt && sort b.txt > bs.txt && "
                     "test $(wc -l < d.txt) -gt 0 && test $(wc -l < d.txt) -lt $(wc -l < b.txt)");   /* a part of it */
    free(o);
    same("as.txt", "bs.txt");
    /* merge: ta (before pass 3, with the delta applied) and tb agree; merging the pass-2 table of
     * a fresh run with tb in either order gives tb, since tb's rows are as new or newer */
    free(run_ok("A='--model deepfm --format criteo --epochs 1 --pass-rows 2000 --dim 4 --hidden 8 --threads 1 --quiet "
                "--cache-mb 0.05' && $B/ctrbox train $A --train tr4.tsv --out mc --table-dir tc && "
                "$B/ctrbox-table merge tc tb g1 && $B/ctrbox-table merge tb tc g2 && "
                "$B/ctrbox-table export g1 --to text g1.txt --with-optimizer && sort g1.txt > g1s.txt && "
                "$B/ctrbox-table export g2 --to text g2.txt --with-optimizer && sort g2.txt > g2s.txt"));
    same("bs.txt", "g1s.txt");
    same("bs.txt", "g2s.txt");
    char *e;
    cr_assert_eq(th_run(&e, "$B/ctrbox-table merge tc tb g1"), 1);
    cr_assert(strstr(e, "already holds a table folder"), "%s", e);
    free(e);
    o = run_ok("$B/ctrbox-table shrink tb --unseen 1 && $B/ctrbox-table shrink tb --unseen 1 && "
               "$B/ctrbox-table inspect tb --json | grep '\"rows\"'");
    unsigned long long del = 0, kept = 0, del2 = 9, kept2 = 0, rows = 0;
    cr_assert_eq(sscanf(o, "shrink tb at pass 3: %llu keys deleted, %llu kept\nshrink tb at pass 3: %llu keys deleted, %llu kept\n"
                           "   \"rows\": %llu", &del, &kept, &del2, &kept2, &rows), 5, "%s", o);
    cr_assert_gt(del, 0);
    cr_assert_eq(del2, 0);
    cr_assert_eq(kept, kept2);
    cr_assert_eq(rows, kept);
    free(o);
}

/* convert: quantized rows of the expected size, with errors within each type's precision. */
Test(tabletool, convert_quantizes_within_bounds)
{
    trained_folder();
    const char *types[] = { "fp16", "bf16", "int8" };
    double bound[] = { 1e-3, 1e-2, 1e-2 };
    for (int i = 0; i < 3; i++) {
        char *o;
        int rc = th_run(&o, "$B/ctrbox-table convert t --dtype %s q.%s && stat -c %%s q.%s", types[i], types[i], types[i]);
        cr_assert_eq(rc, 0, "%s", o);
        unsigned long long rows = 0, size = 0;
        int vals = 0;
        double maxe = 1, meane = 1;
        const char *e = strstr(o, "largest error");
        cr_assert(e, "%s", o);
        cr_assert_eq(sscanf(o, "converted %llu rows (%d values each)", &rows, &vals), 2, "%s", o);
        cr_assert_eq(sscanf(e, "largest error %lf, mean error %lf\n%llu", &maxe, &meane, &size), 3, "%s", o);
        free(o);
        cr_assert_eq(vals, 5);
        cr_assert_gt(rows, 0);
        unsigned long long per = i < 2 ? 8 + 2 * 5 : 8 + 4 + 5;
        cr_assert_eq(size, 32 + rows * per + 8, "%s: %llu bytes", types[i], size);
        cr_assert_lt(maxe, bound[i], "%s: largest error %g", types[i], maxe);
        cr_assert_leq(meane, maxe);
    }
}

/* The serving bundle scores like the full model: exactly in fp32, within the quantization error
 * otherwise; a damaged bundle is refused. */
Test(tabletool, serving_bundle_predicts_like_the_model)
{
    trained_folder();
    free(run_ok("$B/ctrbox-data gen --rows 2000 --seed 4 --keys 0.002 --offset 6000 --out va.tsv && "
                "$B/ctrbox predict --model m --data va.tsv --out p.full"));
    const char *types[] = { "fp32", "fp16", "bf16", "int8" };
    double bound[] = { 0, 1e-3, 1e-2, 2e-2 };
    for (int i = 0; i < 4; i++) {
        char *o;
        int rc = th_run(&o, "$B/ctrbox export-serving --model m --out b.%s --dtype %s >/dev/null && "
                            "$B/ctrbox predict --bundle b.%s --data va.tsv --out p.%s && "
                            "paste p.full p.%s | awk '{ e = $1 - $2; if (e < 0) e = -e; if (e > m) m = e } END { printf \"%%.9f\\n\", m }'",
                        types[i], types[i], types[i], types[i], types[i]);
        cr_assert_eq(rc, 0, "%s", o);
        double maxdp = 1;
        cr_assert_eq(sscanf(o, "%lf", &maxdp), 1, "%s", o);
        cr_assert_leq(maxdp, bound[i], "%s: predictions differ by up to %g", types[i], maxdp);
        free(o);
    }
    char *o;
    int rc = th_run(&o, "cp b.fp16 bad && printf 'Z' | dd of=bad bs=1 seek=500 conv=notrunc 2>/dev/null && "
                        "$B/ctrbox predict --bundle bad --data va.tsv --out p.bad");
    cr_assert_eq(rc, 1, "%s", o);
    cr_assert(strstr(o, "bad: not a ctrbox serving bundle, or truncated or corrupt"), "%s", o);
    free(o);
}

/* shrink on a model folder whose tables are in the model file: rewritten, still usable. */
Test(tabletool, shrink_a_model_file)
{
    char *o = run_ok("$B/ctrbox-data gen --rows 4000 --seed 4 --keys 0.002 --out tr.tsv && "
                     "$B/ctrbox train --model fm --format criteo --train tr.tsv --epochs 2 --dim 4 --quiet --out mm && "
                     "$B/ctrbox-table shrink mm --threshold 3 && $B/ctrbox-table inspect mm --json | grep '\"rows\"' && "
                     "$B/ctrbox predict --model mm --data tr.tsv --out p.txt");
    unsigned long long del = 0, kept = 0, rows = 1;
    const char *sh = strstr(o, "shrink mm at pass");   /* after the trainer's summary */
    cr_assert(sh && sscanf(sh, "shrink mm at pass 2: %llu keys deleted, %llu kept\n   \"rows\": %llu", &del, &kept, &rows) == 3,
              "%s", o);
    cr_assert_gt(del, 0);
    cr_assert_eq(rows, kept);
    free(o);
}
