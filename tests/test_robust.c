/*
 * test_robust.c: nothing hangs, nothing crashes, no model changes behind the user's back (issue
 * 13). Each test reproduces one defect a hostile review found, end to end through the programs,
 * under a `timeout` so that a hang fails the test instead of stalling the suite.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"

TestSuite(robust, .fini = th_cleanup, .timeout = 600);

/* Every command runs under this: a hang ends in exit status 124. */
#define T "timeout 120 "
#define SMALL "--dim 4 --hidden 16,16 --batch 256 --threads 1 --quiet"

static void make_data(void)
{
    cr_assert_eq(th_run(NULL, "$B/ctrbox-data gen --rows 20000 --seed 1 --keys 0.002 --out tr.tsv && "
                              "$B/ctrbox-data gen --rows 4000 --seed 1 --keys 0.002 --offset 20000 --out va.tsv"),
                 0);
}

/* Run; assert the exit status and (if not NULL) that the output holds want. */
static void expect(int rc_want, const char *want, const char *fmt, const char *arg)
{
    char *o;
    int rc = th_run(&o, fmt, arg);
    cr_assert_eq(rc, rc_want, "exit %d, want %d: %s", rc, rc_want, o);
    if (want) cr_assert(strstr(o, want), "want '%s' in: %s", want, o);
    free(o);
}

Test(robust, diverged_run_stops_and_saves_nothing)
{
    make_data();
    const char *diverge = T "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --lr 100 --dense-opt sgd "
                            "--sparse-opt sgd --epochs 2 " SMALL " %s";
    /* with a validation set the AUC's tie loop spun forever on NaN scores */
    expect(1, "diverged", diverge, "--valid va.tsv --out v");
    /* without one the NaN model was saved and the run exited 0 */
    expect(1, "diverged", diverge, "--out n");
    cr_assert(!th_file_exists(th_path("n/model.ctrbox")), "a diverged model was saved");
    /* in passes with a table folder: no diverged pass is committed */
    expect(1, "diverged", diverge, "--out p --pass-rows 5000 --table-dir tp --cache-mb 0.05");
}

Test(robust, eval_every_with_a_table_folder)
{
    make_data();
    /* evaluation fetched rows on the ring the prefetch thread was using: SIGSEGV in read_slots, or
     * "short read"; evaluating must not change the model either */
    const char *run = T "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --epochs 2 --pass-rows 2500 "
                        "--cache-mb 0.05 " SMALL " %s";
    for (int i = 0; i < 3; i++) {
        char extra[128];
        snprintf(extra, sizeof extra, "--valid va.tsv --eval-every 3 --out e%d --table-dir te%d", i, i);
        expect(0, NULL, run, extra);
    }
    expect(0, NULL, run, "--out plain --table-dir tplain");
    expect(0, NULL, "$B/ctrbox predict --model e0 --data va.tsv --out p_e0.txt%s", "");
    expect(0, NULL, "$B/ctrbox predict --model plain --data va.tsv --out p_plain.txt%s", "");
    th_same_file("p_e0.txt", "p_plain.txt");
}

/* Without --pass-rows a table folder's passes are the shuffle buffer's (they were empty passes,
 * committed forever): the run ends, one pass of the clock an epoch. */
Test(robust, table_folder_without_pass_rows_ends)
{
    make_data();
    const char *run = T "$B/ctrbox train --model lr --format criteo --train tr.tsv --epochs 2 --out o " SMALL " %s";
    expect(0, NULL, run, "--table-dir td");
    char *log = th_read(th_path("o/log.jsonl"), NULL);
    cr_assert(strstr(log, "\"kind\": \"pass\", \"pass\": 2,") && !strstr(log, "\"pass\": 3,"), "%s", log);
    free(log);
    expect(0, NULL, run, "--resume td");
}

/* Train with `opts`, killed (-9) once the line "pass K:" appears, then resumed to the end; the
 * predictions must equal those of an uninterrupted run. */
static void kill_at_pass_and_resume(const char *opts, int k)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --epochs 2 --pass-rows 2500 --cache-mb 0.05 "
             "--dim 4 --hidden 16,16 --batch 256 --threads 1 %s",
             opts);
    expect(0, NULL, T "%s --quiet --out ref --table-dir tref", cmd);
    char *o;
    th_run(&o, "rm -rf res tres; ( %s --out res --table-dir tres 2>&1 & echo $! > pid; wait ) | "
               "while IFS= read -r l; do case \"$l\" in *'pass %d:'*|*'pass %d ('*) kill -9 $(cat pid);; esac; done; "
               "kill -0 $(cat pid) 2>/dev/null; echo alive=$?",
           cmd, k, k);
    free(o);
    int rc = th_run(&o, T "%s --out res --resume tres", cmd);
    cr_assert_eq(rc, 0, "%s", o);
    const char *at = strstr(o, "resuming after pass ");
    cr_assert(at && atoi(at + 20) >= k && atoi(at + 20) < 16, "not killed between pass %d and the end: %s", k, o);
    free(o);
    expect(0, NULL, "$B/ctrbox predict --model ref --data va.tsv --out p_ref.txt%s", "");
    expect(0, NULL, "$B/ctrbox predict --model res --data va.tsv --out p_res.txt%s", "");
    th_same_file("p_ref.txt", "p_res.txt");
}

Test(robust, resume_with_admission_and_shrink)
{
    make_data();
    /* the pending keys a commit saved depended on which rows were in memory: admitted keys whose
     * rows were resident were dropped from it, so after a resume a key shrunk later started its
     * admission over, where the uninterrupted run admitted it at once */
    kill_at_pass_and_resume("--seed 3 --min-show 2 --shrink-threshold 0.5", 3);
}

#define TIERED T "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --pass-rows 5000 --cache-mb 0.05 " SMALL

Test(robust, disk_full_on_a_small_file_system)
{
    make_data();
    if (geteuid() != 0 || th_run(NULL, "unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /mnt'") != 0)
        cr_skip_test("needs root and mount namespaces (unshare -m) to mount small file systems");
    expect(0, NULL, TIERED " --epochs 2 --out ref%s", "");
    expect(0, NULL, "$B/ctrbox predict --model ref --data va.tsv --out p_ref.txt%s", "");
    /* a full disk, at several moments of the run: a clean error (before, RocksDB's info log
     * aborted the process on the way out: exit 134), then room again and --resume ends with the
     * same model; the folder lives on a tmpfs in a mount namespace of its own */
    int sizes[] = { 1, 2, 3, 5, 8, 12, 16 };
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        char *o;
        int rc = th_run(&o, "B=\"$B\" unshare -m sh -c 'mount -t tmpfs -o size=%dm tmpfs /mnt && "
                            "{ " TIERED " --epochs 2 --out /mnt/o --table-dir /mnt/td; echo rc1=$?; } && "
                            "mount -o remount,size=256m /mnt && " TIERED " --epochs 2 --out /mnt/o --resume /mnt/td && "
                            "$B/ctrbox predict --model /mnt/o --data va.tsv --out p_full.txt'",
                        sizes[i]);
        cr_assert_eq(rc, 0, "%d MB: %s", sizes[i], o);
        cr_assert(strstr(o, "rc1=1") || strstr(o, "rc1=0"), "%d MB: %s", sizes[i], o);
        cr_assert(!strstr(o, "Assertion") && !strstr(o, "CHECK failed"), "%d MB: %s", sizes[i], o);
        free(o);
        th_same_file("p_ref.txt", "p_full.txt");
    }
}

Test(robust, a_damaged_index_is_refused_not_rolled_back)
{
    make_data();
    expect(0, NULL, TIERED " --epochs 1 --out m --table-dir td%s", "");
    expect(0, NULL, "$B/ctrbox predict --model m --data va.tsv --out p_ref.txt && cp -r td td.orig%s", "");
    char *o;
    cr_assert_eq(th_run(&o, "stat -c %%s td/index/MANIFEST-*"), 0);
    long size = atol(o);
    free(o);
    cr_assert_gt(size, 100);
    int refused = 0;
    /* a truncated MANIFEST rolled the folder back to an earlier pass, or made it look empty (and
     * --resume then trained over it); every cut must now be refused, or read the same rows */
    for (long cut = 0; cut < size; cut += size / 23 + 1) {
        cr_assert_eq(th_run(NULL, "rm -rf td && cp -r td.orig td && truncate -s %ld td/index/MANIFEST-*", cut), 0);
        int rc = th_run(&o, T "$B/ctrbox predict --model m --data va.tsv --out p_cut.txt");
        cr_assert(rc == 0 || rc == 1, "cut at %ld: exit %d: %s", cut, rc, o);
        if (rc == 1) {
            cr_assert(strstr(o, "td"), "the message names the folder: %s", o);
            refused++;
        } else {
            th_same_file("p_ref.txt", "p_cut.txt");
        }
        free(o);
        rc = th_run(&o, TIERED " --epochs 1 --out m2 --resume td");
        cr_assert(rc == 1 || (rc == 0 && strstr(o, "resuming after pass 4")), "cut at %ld: --resume %d: %s", cut, rc, o);
        free(o);
    }
    cr_assert_gt(refused, 0);
    /* the commit record itself */
    /* one byte of the folder id changed (its random byte may be an x already: then a y) */
    cr_assert_eq(th_run(NULL, "rm -rf td && cp -r td.orig td && b=$(dd if=td/COMMIT.ctrbox bs=1 skip=20 count=1 "
                              "2>/dev/null) && if [ \"$b\" = x ]; then c=y; else c=x; fi && "
                              "printf $c | dd of=td/COMMIT.ctrbox bs=1 seek=20 conv=notrunc 2>/dev/null"), 0);
    expect(1, "COMMIT.ctrbox", T "$B/ctrbox predict --model m --data va.tsv --out x%s", "");
    cr_assert_eq(th_run(NULL, "rm -rf td && cp -r td.orig td && rm td/COMMIT.ctrbox"), 0);
    expect(1, "COMMIT.ctrbox is missing", T "$B/ctrbox predict --model m --data va.tsv --out x%s", "");
    expect(1, "COMMIT.ctrbox is missing", TIERED " --epochs 1 --out m2 --resume td%s", "");
    /* the index gone: the folder does not start over */
    cr_assert_eq(th_run(NULL, "rm -rf td && cp -r td.orig td && rm -rf td/index"), 0);
    expect(1, "damaged or replaced", TIERED " --epochs 1 --out m2 --resume td%s", "");
}

Test(robust, a_model_never_pairs_its_dense_layers_with_other_rows)
{
    make_data();
    expect(0, NULL, TIERED " --epochs 1 --out m --table-dir td%s", "");
    expect(0, NULL, "cp -r m m_day1 && $B/ctrbox predict --model m --data va.tsv --out p1.txt%s", "");
    /* the table folder trained further: the old model's rows are gone; before, it paired its old
     * dense layers with the new rows (another AUC, exit 0, no warning) */
    expect(0, NULL, TIERED " --epochs 2 --out m --resume td%s", "");
    expect(1, "rows this model was saved with are gone", T "$B/ctrbox predict --model m_day1 --data va.tsv --out x%s", "");
    expect(1, "gone", T "$B/ctrbox eval --model m_day1 --data va.tsv%s", "");
    expect(1, "gone", T "$B/ctrbox export-serving --model m_day1 --out b%s", "");
    expect(1, "gone", T "$B/ctrbox-table inspect m_day1%s", "");
    expect(0, NULL, T "$B/ctrbox eval --model m --data va.tsv%s", "");
    /* shrinking the model keeps that model whole (its file names the new commit); its copy, and
     * any other model saved with that folder, see that their rows changed */
    expect(0, NULL, "cp -r m m_day2 && $B/ctrbox-table shrink m --threshold 0.5%s", "");
    expect(0, NULL, T "$B/ctrbox eval --model m --data va.tsv%s", "");
    expect(1, "gone", T "$B/ctrbox eval --model m_day2 --data va.tsv%s", "");
    /* the table folder shrunk by the table tool: every model saved with it sees it */
    expect(0, NULL, T "$B/ctrbox-table shrink td --threshold 0.8%s", "");
    expect(1, "gone", T "$B/ctrbox eval --model m --data va.tsv%s", "");
}

Test(robust, resume_checks_the_data_by_content_not_by_name)
{
    make_data();
    expect(0, NULL, "mkdir -p d && cp tr.tsv d/tr.tsv%s", "");
    expect(0, NULL, TIERED " --epochs 2 --out ref --table-dir tref%s", "");
    /* killed after the first epoch (one epoch run, then resumed for two) */
    const char *run = T "$B/ctrbox train --model deepfm --format criteo --pass-rows 5000 --cache-mb 0.05 " SMALL " %s";
    expect(0, NULL, run, "--train d/tr.tsv --epochs 1 --out a --table-dir ta");
    /* the same bytes under another name resume (they were refused) */
    expect(0, NULL, run, "--train ./d/../d/tr.tsv --epochs 2 --out a --resume ta");
    expect(0, NULL, "$B/ctrbox predict --model ref --data va.tsv --out p_ref.txt && "
                    "$B/ctrbox predict --model a --data va.tsv --out p_a.txt%s", "");
    th_same_file("p_ref.txt", "p_a.txt");
    /* a file cut to 3,000 rows resumed "after pass 2", trained nothing and exited 0 */
    expect(0, NULL, run, "--train d/tr.tsv --epochs 1 --out b --table-dir tb");
    expect(0, NULL, "head -3000 tr.tsv > d/tr.tsv%s", "");
    expect(1, "contents differ", run, "--train d/tr.tsv --epochs 2 --out b --resume tb");
    /* one byte changed in the middle, where the quick check of sampled bytes does not look: the
     * first pass's rows differ from the first epoch's */
    expect(0, NULL, "cp tr.tsv d/tr.tsv && printf 9 | dd of=d/tr.tsv bs=1 seek=1200000 conv=notrunc 2>/dev/null%s", "");
    expect(1, "the training files changed", run, "--train d/tr.tsv --epochs 2 --out b --resume tb");
    /* and killed in the middle of the first epoch (after pass 2 of 4): what it skips is checked */
    expect(0, NULL, "cp tr.tsv d/tr.tsv%s", "");
    char *o;
    th_run(&o, "( $B/ctrbox train --model deepfm --format criteo --pass-rows 5000 --cache-mb 0.05 --dim 4 --hidden 16,16 "
               "--batch 256 --threads 1 --train d/tr.tsv --epochs 2 --out c --table-dir tc 2>&1 & echo $! > pid; wait ) | "
               "while IFS= read -r l; do case \"$l\" in *'pass 2:'*|*'pass 2 ('*) kill -9 $(cat pid);; esac; done");
    free(o);
    expect(0, NULL, "printf 9 | dd of=d/tr.tsv bs=1 seek=1200000 conv=notrunc 2>/dev/null%s", "");
    cr_assert_eq(th_run(&o, "$B/ctrbox train --model deepfm --format criteo --pass-rows 5000 --cache-mb 0.05 " SMALL
                            " --train d/tr.tsv --epochs 2 --out c --resume tc"), 1);
    cr_assert(strstr(o, "the training files changed") && strstr(o, "pass 1 of this epoch"), "%s", o);
    free(o);
}

/* A CSV with a label and `cols` feature columns, `rows` rows. */
static void write_wide_csv(const char *name, int cols, int rows)
{
    FILE *f = fopen(th_path(name), "w");
    cr_assert_not_null(f);
    fprintf(f, "label");
    for (int c = 0; c < cols; c++) fprintf(f, ",c%d", c);
    for (int r = 0; r < rows; r++) {
        fprintf(f, "\n%d", r % 2);
        for (int c = 0; c < cols; c++) fprintf(f, ",%d", (c * 7 + r) % 5);
    }
    fprintf(f, "\n");
    cr_assert_eq(fclose(f), 0);
}

Test(robust, csv_with_more_fields_than_ids_is_refused)
{
    /* field ids are 16 bits: column 65537 became field 1 again, and convert wrote a file its own
     * reader refused */
    write_wide_csv("wide.csv", 70000, 3);
    expect(1, "at most 65535", T "$B/ctrbox-data convert --format csv --in wide.csv --out wide.cbx%s", "");
    cr_assert(!th_file_exists(th_path("wide.cbx")));
    write_wide_csv("edge.csv", 65535, 3);
    expect(0, NULL, T "$B/ctrbox-data convert --format csv --in edge.csv --out edge.cbx%s", "");
    expect(0, "rows: 3", T "$B/ctrbox-data inspect edge.cbx%s", "");
}

Test(robust, streams_and_cbx_inputs)
{
    make_data();
    /* a FIFO as --train was opened twice (schema, then each epoch): rows lost, or a hang */
    char *o;
    int rc = th_run(&o, "mkfifo ff && { cat tr.tsv > ff & } && " T "$B/ctrbox train --model lr --format criteo --train ff "
                        "--out f --epochs 1 --quiet; echo rc=$?; timeout 10 cat ff > /dev/null");
    cr_assert(strstr(o, "rc=1") && strstr(o, "not a regular file"), "%d: %s", rc, o);
    free(o);
    /* read once, a stream is fine: predict from a pipe */
    expect(0, NULL, T "$B/ctrbox train --model lr --format criteo --train tr.tsv --valid va.tsv --out m --epochs 1 "
                      "--quiet%s", "");
    expect(0, NULL, "$B/ctrbox predict --model m --data va.tsv --out p_text.txt%s", "");
    expect(0, NULL, "cat va.tsv | $B/ctrbox predict --model m --data /dev/stdin --out p_pipe.txt%s", "");
    th_same_file("p_text.txt", "p_pipe.txt");
    /* a cbx file given to a model trained on text was parsed as text (100%% bad lines, or worse) */
    expect(0, NULL, "$B/ctrbox-data convert --format criteo --in va.tsv --out va.cbx%s", "");
    expect(0, NULL, "$B/ctrbox predict --model m --data va.cbx --out p_cbx.txt%s", "");
    th_same_file("p_text.txt", "p_cbx.txt");
    expect(0, NULL, T "$B/ctrbox train --model lr --format criteo --train tr.tsv --valid va.cbx --out m2 --epochs 1 "
                      "--quiet%s", "");
    expect(1, "a cbx file among criteo text inputs", "$B/ctrbox predict --model m --data va.tsv va.cbx --out x%s", "");
}

Test(robust, empty_input_is_refused)
{
    make_data();
    /* an empty log trained "successfully": exit 0, loss nan, a model written */
    th_write_str(th_path("empty.tsv"), "");
    expect(1, "no rows to train on", T "$B/ctrbox train --model deepfm --format criteo --train empty.tsv --out e " SMALL "%s", "");
    cr_assert(!th_file_exists(th_path("e/model.ctrbox")));
    expect(1, "no rows to train on", T "$B/ctrbox train --model deepfm --format criteo --train empty.tsv --out e2 "
                                       "--pass-rows 100 --table-dir te " SMALL "%s", "");
    expect(1, "no rows to validate on", T "$B/ctrbox train --model lr --format criteo --train tr.tsv --valid empty.tsv "
                                          "--out e3 " SMALL "%s", "");
    expect(0, NULL, T "$B/ctrbox train --model lr --format criteo --train tr.tsv --out m --epochs 1 " SMALL "%s", "");
    expect(1, "no rows to evaluate", T "$B/ctrbox eval --model m --data empty.tsv%s", "");
    /* scoring nothing is not an error: an empty file of predictions */
    expect(0, NULL, T "$B/ctrbox predict --model m --data empty.tsv --out p.txt%s", "");
    cr_assert(th_file_exists(th_path("p.txt")));
}

Test(robust, bad_input_stops_early)
{
    make_data();
    expect(0, NULL, T "$B/ctrbox train --model lr --format criteo --train tr.tsv --out m --epochs 1 " SMALL "%s", "");
    expect(1, "--max-bad-ratio nan: want a number", T "$B/ctrbox eval --model m --data va.tsv --max-bad-ratio nan%s", "");
    expect(1, "want a number", T "$B/ctrbox-data inspect --format criteo va.tsv --max-bad-ratio -nan%s", "");
    /* input that is all bad was read to its end before the ratio stopped it */
    expect(0, NULL, "yes 'not a criteo line' | head -200000 > bad.tsv%s", "");
    expect(1, "too many bad lines: 10000 of 10000", T "$B/ctrbox eval --model m --data bad.tsv%s", "");
    expect(1, "too many bad lines: 10000 of 10000", T "$B/ctrbox train --model lr --format criteo --train bad.tsv "
                                                      "--out b " SMALL "%s", "");
    /* random bytes from a device that never ends */
    expect(1, "too many bad lines", T "$B/ctrbox eval --model m --data /dev/urandom%s", "");
    /* bytes without a line end, from a device that never ends: one overlong "line" forever */
    expect(1, "has no end", T "$B/ctrbox eval --model m --data /dev/zero --max-line 1024%s", "");
}

/* The bad-line limit named the file and the count but no line: training's first look at its input
 * prints none, so a run over a file of a few lines stopped without saying what was wrong. */
Test(robust, the_bad_line_limit_names_the_first_bad_line)
{
    th_write_str(th_path("c.svm"), "1 1:1 2:1\n1 3:x\n0 1:1\n");
    expect(1, "(the first: line 2: not a number", T "$B/ctrbox train --model lr --format libsvm --train c.svm --out c "
                                                   "--quiet%s", "");
    /* in a later file: named with its file */
    th_write_str(th_path("ok.svm"), "1 1:1 2:1\n0 2:1\n");
    expect(1, "ok.svm: too many bad lines: 1 of 5 (20%) of the inputs read so far exceed --max-bad-ratio 0.001 (the "
              "first: c.svm:2: not a number", T "$B/ctrbox train --model lr --format libsvm --train c.svm ok.svm --out c2 "
                                               "--quiet%s", "");
}

/* Piped to a log, an epoch of one batch printed its progress line twice, and an empty line after. */
Test(robust, a_piped_epoch_line_is_printed_once)
{
    make_data();
    char *o;
    cr_assert_eq(th_run(&o, T "$B/ctrbox train --model lr --format criteo --train va.tsv --out m --epochs 2 "
                              "--batch 8192 2>&1 | cat"), 0);
    int ones = 0, empty = 0;
    for (char *l = o; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l)) {
        if (!strncmp(l, "epoch 1/2 ", 10)) ones++;
        if (*l == '\n') empty++;
    }
    cr_assert_eq(ones, 1, "epoch 1's line %d times: %s", ones, o);
    cr_assert_eq(empty, 0, "empty lines in: %s", o);
    free(o);
}

Test(robust, conflicting_schema_entries_are_refused)
{
    th_write_str(th_path("s.csv"), "label,I1,I2,C1\n1,3,4,a\n0,4,5,b\n");
    const char *inspect = T "$B/ctrbox-data inspect --format csv --schema '%s' s.csv";
    /* both were accepted: the last role won, or the skipped label was used as the label anyway */
    expect(1, "two roles (num and cat)", inspect, "I1:num,I1:cat");
    expect(1, "two roles (num and skip)", inspect, "I1-I2:num,I2:skip");
    expect(1, "no label column", inspect, "label:skip");
    expect(0, "rows: 2", inspect, "I1:num,I1-I2:num");   /* the same role twice is no conflict */
}

Test(robust, one_trainer_per_model_folder)
{
    make_data();
    const char *run = T "$B/ctrbox train --model lr --format criteo --train tr.tsv --epochs 1 " SMALL " --out %s";
    expect(0, NULL, run, "m");
    /* two trainers wrote one --out folder, both exited 0 and one model was lost */
    int fd = open(th_path("m/LOCK.model"), O_RDWR | O_CREAT, 0644);
    cr_assert(fd >= 0);
    cr_assert_eq(flock(fd, LOCK_EX | LOCK_NB), 0);
    expect(1, "another trainer", run, "m");
    expect(1, "a trainer is writing", T "$B/ctrbox-table shrink m --threshold 0.5%s", "");
    expect(0, NULL, T "$B/ctrbox eval --model m --data va.tsv%s", "");   /* readers need no lock */
    close(fd);
    expect(0, NULL, run, "m");
    /* a trainer killed a moment ago holds its lock until its process has ended, which timeout(1)
     * and launchers do not wait for: a trainer started again at once waits up to 2 s for it */
    char held[512];
    snprintf(held, sizeof held, "flock m/LOCK.model sleep 0.8 & sleep 0.2; %s", run);
    expect(0, NULL, held, "m");
    /* and truly at once: one of two wins, the other says why */
    char *o;
    th_run(&o, "%s m2 & %s m2; echo rc2=$?; wait $!; echo rc1=$?", run, run);
    int both = strstr(o, "rc1=0") && strstr(o, "rc2=0");   /* one after the other */
    int one = (strstr(o, "rc1=0") || strstr(o, "rc2=0")) && (strstr(o, "rc1=1") || strstr(o, "rc2=1")) &&
              strstr(o, "another trainer");
    cr_assert(both || one, "%s", o);
    free(o);
}

Test(robust, killed_writers_leave_no_temporary_files)
{
    make_data();
    const char *run = T "$B/ctrbox train --model lr --format criteo --train tr.tsv --epochs 1 " SMALL " --out m%s";
    expect(0, NULL, run, "");
    /* what a writer killed -9 leaves: "<file>.tmp.<its pid>", 18 MB each, that nothing removed;
     * 4194000 is above any pid in use here, pid 1 is alive (its file may be being written) */
    expect(0, NULL, "head -c 1000 /dev/zero > m/model.ctrbox.tmp.4194000 && touch m/model.ctrbox.tmp.1 && "
                    "mkdir -p e && touch e/keys.npy.tmp.4194000 e/values.npy.tmp.4194001%s", "");
    expect(0, NULL, run, "");
    cr_assert(!th_file_exists(th_path("m/model.ctrbox.tmp.4194000")), "a dead writer's file stays");
    cr_assert(th_file_exists(th_path("m/model.ctrbox.tmp.1")), "a live writer's file was removed");
    expect(0, NULL, T "$B/ctrbox-table export m --to npy e%s", "");
    cr_assert(!th_file_exists(th_path("e/keys.npy.tmp.4194000")));
    cr_assert(!th_file_exists(th_path("e/values.npy.tmp.4194001")));
    /* and for real: a trainer killed while it runs, then run again */
    char *o;
    th_run(&o, "rm -f m/*.tmp.*; $B/ctrbox train --model deepfm --format criteo --train tr.tsv --epochs 50 " SMALL
               " --out k & p=$!; for i in $(seq 200); do ls k/*.tmp.* >/dev/null 2>&1 && break; sleep 0.01; done; "
               "kill -9 $p; wait $p");
    free(o);
    expect(0, NULL, T "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --epochs 1 " SMALL " --out k%s", "");
    expect(0, "none", "ls k | grep -c tmp || echo none%s", "");
}

Test(robust, table_tool_inputs_and_outputs)
{
    make_data();
    expect(0, NULL, TIERED " --epochs 1 --out m --table-dir td%s", "");
    /* import: "-1" as a text key wrapped to 2^64 - 1; a key twice was put twice in one commit and
     * counted twice */
    th_write_str(th_path("neg.tsv"), "5\t1\t0\t0.1\t0.2\t0.3\t0.4\t0.5\n-1\t1\t0\t0.1\t0.2\t0.3\t0.4\t0.5\n");
    expect(1, "neg.tsv:2: want key", T "$B/ctrbox-table import --from text neg.tsv imp --dim 4 --w 1%s", "");
    th_write_str(th_path("dup.tsv"), "5\t1\t0\t0.1\t0.2\t0.3\t0.4\t0.5\n7\t2\t0\t0.1\t0.2\t0.3\t0.4\t0.5\n"
                                     "5\t3\t1\t0.1\t0.2\t0.3\t0.4\t0.5\n");
    expect(1, "key 5 appears twice (lines 1 and 3)", T "$B/ctrbox-table import --from text dup.tsv imp --dim 4 --w 1%s", "");
    cr_assert(!th_file_exists(th_path("imp/index")), "a refused import made its folder");
    /* outputs that exist were overwritten in silence */
    expect(0, NULL, T "$B/ctrbox-table export td --to text t.tsv%s", "");
    expect(1, "t.tsv exists; give --force", T "$B/ctrbox-table export td --to text t.tsv%s", "");
    expect(0, NULL, T "$B/ctrbox-table export td --to text t.tsv --force%s", "");
    expect(0, NULL, T "$B/ctrbox-table export td --to npy n%s", "");
    expect(1, "keys.npy exists", T "$B/ctrbox-table export td --to npy n%s", "");
    expect(0, NULL, T "$B/ctrbox-table delta td --since 1 d.tsv%s", "");
    expect(1, "d.tsv exists", T "$B/ctrbox-table delta td --since 1 d.tsv%s", "");
    expect(0, NULL, T "$B/ctrbox-table convert td --dtype fp16 q.rows%s", "");
    expect(1, "q.rows exists", T "$B/ctrbox-table convert td --dtype fp16 q.rows%s", "");
    expect(0, NULL, T "$B/ctrbox export-serving --model m --out b.bundle%s", "");
    expect(1, "b.bundle exists", T "$B/ctrbox export-serving --model m --out b.bundle%s", "");
    expect(0, NULL, T "$B/ctrbox export-serving --model m --out b.bundle --force%s", "");
    /* a delta from a pass the folder has not reached wrote nothing without a word; the last pass
     * itself is an empty delta, which is no error */
    expect(1, "last pass is 4", T "$B/ctrbox-table delta td --since 99 d99.tsv%s", "");
    cr_assert(!th_file_exists(th_path("d99.tsv")));
    expect(0, "exported 0 rows", T "$B/ctrbox-table delta td --since 4 d4.tsv%s", "");
}

Test(robust, messages_say_what_is_wrong)
{
    make_data();
    expect(0, NULL, TIERED " --epochs 1 --out m --table-dir td%s", "");
    /* a folder given as a bundle: "out of memory allocating 9223372036854775807 bytes" */
    expect(1, "m: not a serving bundle file (a folder", T "$B/ctrbox eval --bundle m --data va.tsv%s", "");
    /* an over-long config line was reported at the line after it; an unknown key without one */
    char *ini = malloc(400);
    snprintf(ini, 400, "model = lr\nformat = criteo\ntrain = %0300d\nepochs = 1\n", 0);
    th_write_str(th_path("long.ini"), ini);
    free(ini);
    expect(1, "long.ini:3: line of 308 characters", T "$B/ctrbox train --config long.ini --out c%s", "");
    th_write_str(th_path("key.ini"), "model = lr\nformat = criteo\n\nbogus = 1\n");
    expect(1, "key.ini:4: unknown key 'bogus'", T "$B/ctrbox train --config key.ini --train tr.tsv --out c%s", "");
    /* a config naming another was "unknown key 'config'", though train takes the key */
    th_write_str(th_path("inc.ini"), "model = lr\nformat = criteo\nconfig = key.ini\n");
    expect(1, "inc.ini:3: config = key.ini: a config cannot name another; give each with --config",
           T "$B/ctrbox train --config inc.ini --train tr.tsv --out c%s", "");
    /* damage to RocksDB's log read "not a ctrbox table folder": the folder's records live in SST
     * files now, and the log holds nothing it needs */
    expect(0, NULL, "$B/ctrbox predict --model m --data va.tsv --out p_ref.txt && "
                    "for f in td/index/*.log; do head -c 5000 /dev/urandom >> $f; done%s", "");
    expect(0, NULL, T "$B/ctrbox predict --model m --data va.tsv --out p_log.txt%s", "");
    th_same_file("p_ref.txt", "p_log.txt");
    expect(0, NULL, TIERED " --epochs 2 --out m --resume td%s", "");
}

/* A config file's switches, repeated keys, and its files beside the command line's. Before:
 * "batchnorm = On" (or yes, True) trained without batch norm, silently; "epochs = 1" then
 * "epochs = 3" trained 3; a config's `train = va.tsv` and `--train tr.tsv` trained on both, though
 * the command line is said to override the file. */
Test(robust, config_switches_repeated_keys_and_the_command_line_s_files)
{
    make_data();
    th_write_str(th_path("on.ini"), "model = dnn\nformat = criteo\ntrain = va.tsv\ndim = 4\nhidden = 8\nbatchnorm = On\n"
                                    "epochs = 1\nbatch = 256\nthreads = 1\nquiet = no\n");
    char *o;
    int rc = th_run(&o, T "$B/ctrbox train --config on.ini --train tr.tsv --out m && " T "$B/ctrbox info m && "
                        "grep -o '\"rows\": [0-9]*' m/log.jsonl");
    cr_assert(rc == 0 && strstr(o, "batchnorm yes") && strstr(o, "\"rows\": 20000") && !strstr(o, "\"rows\": 24000"),
              "%s", o);
    free(o);
    /* without --train the file's is trained; a second file overrides the first, as the command line does */
    th_write_str(th_path("two.ini"), "epochs = 2\nbatchnorm = off\n");
    rc = th_run(&o, T "$B/ctrbox train --config on.ini --config two.ini --out m2 && " T "$B/ctrbox info m2 && "
                    "grep -o '\"rows\": [0-9]*' m2/log.jsonl");
    cr_assert(rc == 0 && strstr(o, "batchnorm no") && strstr(o, "\"rows\": 4000\n\"rows\": 8000"), "%s", o);
    free(o);
    th_write_str(th_path("bool.ini"), "model = lr\nformat = criteo\nquiet = maybe\n");
    expect(1, "bool.ini:3: quiet = maybe: want true or false", T "$B/ctrbox train --config bool.ini --train tr.tsv --out c%s", "");
    th_write_str(th_path("twice.ini"), "model = lr\nformat = criteo\nepochs = 1\n[more]\nepochs = 3\n");
    expect(1, "twice.ini:5: key 'epochs' given twice", T "$B/ctrbox train --config twice.ini --train tr.tsv --out c%s", "");
    /* a config from a pipe was read twice (its lines checked, then parsed) and was empty the second
     * time; a folder read as empty: both trained without their options, exit 0 */
    expect(1, "cannot read: Is a directory", T "$B/ctrbox train --model lr --format criteo --config . --train tr.tsv "
                                            "--out c%s", "");
    cr_assert(!th_file_exists(th_path("c")));
    rc = th_run(&o, "printf 'epochs = 3\\nbatch = 256\\nthreads = 1\\n' | " T "$B/ctrbox train --model lr --format criteo "
                    "--config /dev/stdin --train va.tsv --quiet --out m3 && grep -c '\"kind\": \"epoch\"' m3/log.jsonl");
    cr_assert(rc == 0 && strstr(o, "m3/model.ctrbox\n3\n"), "%s", o);
    free(o);
    /* a value the option refuses names the file's line (it named only the option); a value
     * continued on an indented line, and a blank line and a comment before it, are counted */
    th_write_str(th_path("bad.ini"), "# daily\nmodel = lr\n\ntrain = tr.tsv\n  va.tsv\nformat = criteo\nlr = 0.1x\n");
    expect(1, "ctrbox: bad.ini:7: --lr 0.1x: want a number", T "$B/ctrbox train --config bad.ini --out c%s", "");
    expect(1, "ctrbox: --lr 2x: want a number", T "$B/ctrbox train --model lr --format criteo --train tr.tsv --lr 2x "
                                                "--out c%s", "");
}

/* OPENBLAS_CORETYPE naming a core whose kernels this CPU cannot run (a job script moved from an
 * AVX-512 Xeon to an AVX2 EPYC): the first product ended in SIGILL, exit 132, no line said why.
 * Bulldozer's kernels need FMA4 and XOP, which Intel CPUs and AMD's Zen lack. */
Test(robust, a_blas_core_this_cpu_cannot_run_is_refused)
{
    make_data();
    __builtin_cpu_init();
    const char *lacked = !__builtin_cpu_supports("fma4") ? "Bulldozer" : !__builtin_cpu_supports("avx512f") ? "skylakex" : NULL;
    if (!lacked) {
        cr_skip_test("this CPU runs both Bulldozer's and SkylakeX's kernels: no core to refuse");
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, T "env OPENBLAS_CORETYPE=%s $B/ctrbox train --model deepfm --format criteo --train tr.tsv "
                              "--epochs 1 " SMALL " --out m%%s", lacked);
    expect(1, "which this CPU lacks; unset it", cmd, "");
    cr_assert(!th_file_exists(th_path("m")));
    /* one this CPU runs (SSE4.2's, every x86-64 here has it) trains */
    char *o;
    int rc = th_run(&o, T "env OPENBLAS_CORETYPE=Nehalem $B/ctrbox train --model deepfm --format criteo --train tr.tsv "
                        "--epochs 1 " SMALL " --out m");
    cr_assert(rc == 0 && !strstr(o, "OPENBLAS_CORETYPE"), "%s", o);
    free(o);
    /* a name OpenBLAS does not know it dropped without a word, and chose a core itself (SSE3's on
     * a Xeon newer than the library: several times slower); set empty, it is as unset */
    expect(0, "warning: OPENBLAS_CORETYPE=skylake: OpenBLAS runs its", T "env OPENBLAS_CORETYPE=skylake $B/ctrbox eval "
                                                                       "--model m --data va.tsv%s", "");
    rc = th_run(&o, T "env OPENBLAS_CORETYPE= $B/ctrbox eval --model m --data va.tsv");
    cr_assert(rc == 0 && !strstr(o, "OPENBLAS_CORETYPE"), "%s", o);
    free(o);
}

/* predict writes one line per line of the data: a bad line within --max-bad-ratio was dropped and
 * every later probability sat a line early (4,000 lines of output for 4,003 of data, exit 0).
 * Bad lines first, blank, overlong and last, over two files, one compressed, are scored nan in
 * their places; with --id-column the ids name the rows, and bad lines are left out. */
Test(robust, predict_keeps_one_line_per_line_of_the_data)
{
    make_data();
    expect(0, NULL, T "$B/ctrbox train --model lr --format criteo --train tr.tsv --epochs 1 " SMALL " --out m%s", "");
    expect(0, NULL, "{ echo 'not a row'; head -n 99 va.tsv; echo; sed -n '100,2000p' va.tsv; } > b1.tsv && "
                    "{ sed -n '2001,3000p' va.tsv; printf '1\\t%%02000d\\n' 7; sed -n '3001,$p' va.tsv; echo 'last'; } "
                    "| gzip > b2.tsv.gz && " T "$B/ctrbox predict --model m --data va.tsv --out clean.txt%s", "");
    char *o;
    int rc = th_run(&o, T "$B/ctrbox predict --model m --data b1.tsv b2.tsv.gz --out bad.txt --max-line 1024 "
                          "--max-bad-ratio 0.01 && awk 'NR == 1 || NR == 100 || NR == 3001 { print \"nan\" } "
                          "{ print } END { print \"nan\" }' clean.txt | cmp - bad.txt && echo same-lines");
    cr_assert(rc == 0 && strstr(o, "same-lines") && strstr(o, "4 bad lines scored nan, each in its line of bad.txt"), "%s", o);
    free(o);
    /* too many bad lines still stop it, nothing written */
    expect(1, "too many bad lines", "{ cat b1.tsv; echo x; } > b3.tsv && " T "$B/ctrbox predict --model m --data b3.tsv "
                                    "--out none.txt%s", "");
    cr_assert(!th_file_exists(th_path("none.txt")));
}

/* A UTF-8 byte-order mark before a file's first line (Excel's "CSV UTF-8"): a csv's header lost
 * its label column ("no label column" under a header that shows one), a Criteo log's first row was
 * a bad line. It is dropped; the same bytes later in a file are left as they are. */
Test(robust, a_byte_order_mark_before_a_file_is_not_data)
{
    make_data();
    FILE *f = fopen(th_path("a.csv"), "w");
    fprintf(f, "label,a,b\n");
    for (int i = 0; i < 3000; i++) fprintf(f, "%d,a%d,b%d\n", (i * 7 + i / 3) % 3 == 0, i % 17, i % 23);
    fclose(f);
    char *o;
    int rc = th_run(&o, "printf '\\357\\273\\277' | cat - a.csv > bom.csv && printf '\\357\\273\\277' | cat - va.tsv > "
                        "bom.tsv && " T "$B/ctrbox train --model lr --format csv --train a.csv --epochs 1 " SMALL " --out m1 && "
                        T "$B/ctrbox train --model lr --format csv --train bom.csv --epochs 1 " SMALL " --out m2 && "
                        T "$B/ctrbox predict --model m1 --data a.csv --out p1.txt && "
                        T "$B/ctrbox predict --model m2 --data bom.csv --out p2.txt && cmp p1.txt p2.txt && "
                        T "$B/ctrbox train --model lr --format criteo --train tr.tsv --epochs 1 " SMALL " --out m3 && "
                        T "$B/ctrbox predict --model m3 --data va.tsv --out p3.txt && "
                        T "$B/ctrbox predict --model m3 --data bom.tsv --out p4.txt --max-bad-ratio 0 && cmp p3.txt p4.txt && "
                        "echo same");
    cr_assert(rc == 0 && strstr(o, "same"), "%s", o);
    free(o);
    /* inside a file it is the line's bytes: a label that is not a number there, a bad line */
    rc = th_run(&o, "{ head -n 5 va.tsv; printf '\\357\\273\\277'; sed -n 6p va.tsv; } > mid.tsv && "
                    T "$B/ctrbox predict --model m3 --data mid.tsv --out p5.txt --max-bad-ratio 0.5 && sed -n 6p p5.txt");
    cr_assert(rc == 0 && strstr(o, "mid.tsv:6: ") && strstr(o, "\nnan\n"), "%s", o);
    free(o);
}

/* Numbers out of range in a damaged or edited log.jsonl: "epoch": 3e9 was cast to an int
 * (undefined; "-2147483648 epochs") and "rows": 1e30 to a 64-bit count; they are left out. */
Test(robust, run_log_numbers_out_of_range_are_left_out)
{
    make_data();
    expect(0, NULL, T "$B/ctrbox train --model lr --format criteo --train va.tsv --epochs 1 " SMALL " --out m%s", "");
    th_write_str(th_path("m/log.jsonl"), "{\"kind\": \"epoch\", \"epoch\": 2, \"rows\": 5, \"train_loss\": 0.4}\n"
                                        "{\"kind\": \"epoch\", \"epoch\": 3000000000, \"rows\": 1e30, \"train_loss\": 0.5}\n");
    cr_assert_eq(remove(th_path("m/curve.jsonl")), 0);
    expect(0, "the run: 2 epochs, 5 rows trained", T "$B/ctrbox info m%s", "");
    expect(0, "wrote r.html", T "$B/ctrbox report m --out r.html%s", "");
}

/* Outputs over what the command reads: predict's `--out m/model.ctrbox` replaced the model by the
 * scores, `--out va.tsv` the data, report's page and export-serving's bundle (with --force) the
 * model, convert's cbx the log it read, split's part its input, each with exit 0. Refused, nothing
 * changed; a file of scores written before is replaced as it was (a daily job's). Split's parts and
 * convert's cbx written into the folder they read are refused too. */
Test(robust, scores_are_not_written_over_what_is_read)
{
    make_data();
    expect(0, NULL, TIERED " --epochs 1 --out m --table-dir td%s", "");
    expect(0, NULL, "cp va.tsv v.tsv && mkdir d && cp va.tsv d/a.tsv && $B/ctrbox export-serving --model m --out b.bundle && "
                    "md5sum m/* td/COMMIT.ctrbox v.tsv d/a.tsv b.bundle > before.md5%s", "");
    static const char *const cases[][2] = {
        { "ctrbox predict --model m --data v.tsv --out v.tsv", "is the data file v.tsv" },
        { "ctrbox predict --model m --data d --out d/a.tsv", "is the data file d/a.tsv" },
        { "ctrbox predict --model m/model.ctrbox --data v.tsv --out m/model.ctrbox", "is the model it reads" },
        { "ctrbox eval --model m --data v.tsv --out m/log.jsonl", "is a file of the model folder it reads" },
        { "ctrbox predict --model m --data v.tsv --out td/COMMIT.ctrbox", "is in the model's table folder" },
        { "ctrbox predict --bundle b.bundle --data v.tsv --out b.bundle", "is the model it reads" },
        { "ctrbox report m --data v.tsv --out m/model.ctrbox", "is a file of the model folder it reads" },
        { "ctrbox report m --data v.tsv --out v.tsv", "is the data file v.tsv" },
        { "ctrbox export-serving --model m --out m/model.ctrbox --force", "is a file of the model folder it reads" },
        { "ctrbox-data convert --format criteo --in d --out d/a.tsv", "--out d/a.tsv is the input d/a.tsv" },
        { "ctrbox-data split --format criteo --in d/a.tsv --ratios 1,1 --out d/a && cp v.tsv d/a.train && "
          "$B/ctrbox-data split --format criteo --in d/a.train --ratios 1,1 --out d/a", "d/a.train, a part written, is the input" },
        /* into the folder read: the next read of d took the parts as data again (twice the rows) */
        { "ctrbox-data split --format criteo --in d --ratios 1,1 --out d/p", "d/p.train, a part written, is in d, the folder split reads" },
        { "ctrbox-data convert --format criteo --in d --out d/c.cbx", "--out d/c.cbx is in d, a folder convert reads" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *o;
        int rc = th_run(&o, T "$B/%s", cases[i][0]);
        cr_assert(rc == 1 && strstr(o, cases[i][1]), "%s: %s", cases[i][0], o);
        free(o);
    }
    expect(0, NULL, "md5sum -c --quiet before.md5 && test ! -e d/p.train && test ! -e d/c.cbx && "
                    T "$B/ctrbox predict --model m --data v.tsv --out m/p.txt && "
                    T "$B/ctrbox predict --model m --data v.tsv --out m/p.txt && test $(wc -l < m/p.txt) = 4000%s", "");
}

/* --out or --table-dir naming a folder given as --train or --valid: from the second epoch its
 * files (log.jsonl, model.ctrbox) were read as data, "too many bad lines", with a model left among
 * the data. Refused before anything is written; a sub-folder is not read and is fine. */
Test(robust, a_folder_of_data_is_not_written_in)
{
    make_data();
    char *o;
    int rc = th_run(&o, "mkdir d && cp tr.tsv d/ && " T "$B/ctrbox train --model lr --format criteo --train d --epochs 2 "
                        SMALL " --out d; echo rc=$?; " T "$B/ctrbox train --model lr --format criteo --train tr.tsv --valid d "
                        "--epochs 1 " SMALL " --pass-rows 5000 --out m --table-dir d/; echo rc=$?; ls d; " T "$B/ctrbox train "
                        "--model lr --format criteo --train d --epochs 2 " SMALL " --out d/m && echo sub-folder-ok");
    cr_assert(rc == 0 && strstr(o, "--out d is a folder of --train files") &&
                  strstr(o, "--table-dir d/ is a folder of --valid files") && strstr(o, "its own\nrc=1\nctrbox: ") && strstr(o, "its own\nrc=1\ntr.tsv\n") &&
                  strstr(o, "sub-folder-ok"), "%s", o);
    free(o);
}

/* A delta of another tiered model, of the same architecture and passes, was applied to a base:
 * the scores came from a mix of two models, exit 0. Bundles name the table folder their rows came
 * from, and a delta from another folder is refused; the model's own delta still applies. */
Test(robust, a_delta_of_another_model_is_refused)
{
    make_data();
    const char *A = "--model fm --format criteo --epochs 1 --pass-rows 2000 --dim 4 --threads 1 --quiet";
    char *o;
    int rc = th_run(&o, "head -n 6000 tr.tsv > a.tsv && sed -n 6001,12000p tr.tsv > b.tsv && "
                        "$B/ctrbox train %s --train a.tsv --out m --table-dir mt && $B/ctrbox export-serving --model m --out base.b && "
                        "$B/ctrbox train %s --init m --train b.tsv --out m && $B/ctrbox export-serving --model m --since 3 --out d.b && "
                        "$B/ctrbox train %s --seed 9 --train b.tsv --out n --table-dir nt && "
                        "$B/ctrbox train %s --init n --train a.tsv --out n && $B/ctrbox export-serving --model n --since 3 --out nd.b && "
                        "$B/ctrbox predict --model m --data va.tsv --out pm.txt && "
                        "$B/ctrbox predict --bundle base.b --delta d.b --data va.tsv --out pb.txt && cmp pm.txt pb.txt && echo same; "
                        "$B/ctrbox predict --bundle base.b --delta nd.b --data va.tsv --out px.txt; echo rc=$?", A, A, A, A);
    cr_assert(rc == 0 && strstr(o, "same\n") && strstr(o, "nd.b: a delta of another model: its rows come from table folder") &&
                  strstr(o, "rc=1"), "%s", o);
    free(o);
}

/* A delta of another run of the same architecture, at the same passes, applied to a base: of a model
 * in memory (bundles named no table folder), of another warm start from the same model, or one whose
 * passes straddle the base's. Each was applied by its pass counts, exit 0, and the serving model was
 * none of the trained ones. Bundles name the state of their model and a delta the state it goes on
 * from (export-serving --since a model folder, and the export folder's manifest). */
Test(robust, a_delta_of_another_run_is_refused_by_state)
{
    make_data();
    char *o;
    int rc = th_run(&o, "head -n 5000 tr.tsv > a.tsv && sed -n 5001,10000p tr.tsv > b.tsv && sed -n 10001,15000p tr.tsv > c.tsv && "
                        "tail -n 5000 tr.tsv > d.tsv && R=\"" T "$B/ctrbox train --model fm --format criteo --epochs 1 " SMALL "\" && "
                        "$R --train a.tsv --out n1 && $R --train b.tsv --init n1 --out n2 && $R --train c.tsv --init n2 --out n3 && "
                        "$R --train b.tsv --out x1 && $R --train c.tsv --init x1 --out x2 && "
                        "$R --train c.tsv --init n1 --out s2 && $R --train d.tsv --init s2 --out s3 && "
                        "E=\"$B/ctrbox export-serving\" && $E --model n1 --out n1.b && $E --model n2 --out n2.b && "
                        "$E --model n2 --since n1 --out d12.b && $E --model n3 --since n2 --out d23.b && "
                        "$E --model x2 --since x1 --out dx.b && $E --model s3 --since s2 --out ds.b && "
                        "$E --model n3 --since n1 --out d13.b && P=\"$B/ctrbox predict --data va.tsv\" && "
                        "$B/ctrbox predict --model n3 --data va.tsv --out p3 && $P --bundle n1.b --delta d12.b --delta d23.b "
                        "--out q3 && cmp p3 q3 && $P --bundle n2.b --delta d12.b --delta d23.b --out r3 && cmp p3 r3 && "
                        "echo chain-ok; for x in 'n1.b --delta dx.b' 'n2.b --delta ds.b' 'n2.b --delta d13.b'; do "
                        "$P --bundle $x --out z; echo rc=$?; done > refused.txt 2>&1; cat refused.txt");
    cr_assert(rc == 0 && strstr(o, "chain-ok"), "%s", o);
    cr_assert(strstr(o, "dx.b: goes on from another model than this one (state ") &&
                  strstr(o, "ds.b: goes on from another model than this one") &&
                  strstr(o, "d13.b: holds the changes after pass 1 up to pass 3, the model is at pass 2, between: which model "
                            "the delta goes on from cannot be checked"),
              "%s", o);
    cr_assert(!strstr(o, "rc=0"), "a delta of another run was applied: %s", o);
    free(o);
    /* a delta --since a folder is said once, as a delta (it was said a base of N rows as well) */
    rc = th_run(&o, "$B/ctrbox export-serving --model n3 --since n2 --out d23b.b");
    cr_assert(rc == 0 && strstr(o, "wrote d23b.b: a delta") && !strstr(o, "rows in"), "%s", o);
    free(o);
    /* the export folder: its deltas go on from its own base, not from another run's */
    rc = th_run(&o, "mkdir f1 f2 && cp a.tsv f1/1.tsv && cp b.tsv f1/2.tsv && cp c.tsv f1/3.tsv && cp b.tsv f2/1.tsv && "
                    "cp a.tsv f2/2.tsv && cp c.tsv f2/3.tsv && R=\"" T "$B/ctrbox train --model fm --format criteo " SMALL "\" && "
                    "$R --follow f1 --follow-idle 0 --export-dir e1 --out m1 && $R --follow f2 --follow-idle 0 --export-dir e2 "
                    "--out m2 && grep -c '\"state\": \"[0-9a-f]\\{16\\}\"' e1/manifest.json && "
                    "B1=$(ls e1/base-*) && D1=$(ls e1/delta-* | head -1) && D2=$(ls e2/delta-* | head -1) && "
                    "$B/ctrbox predict --model m1 --data va.tsv --out pm && $B/ctrbox predict --bundle $B1 $(for d in e1/delta-*; "
                    "do printf -- '--delta %%s ' $d; done) --data va.tsv --out pe && cmp pm pe && echo export-ok; "
                    "$B/ctrbox predict --bundle $B1 --delta $D2 --data va.tsv --out px; echo rc=$?");
    cr_assert(rc == 0 && strstr(o, "3\nexport-ok") && strstr(o, "goes on from another model than this one") &&
                  strstr(o, "rc=1"), "%s", o);
    free(o);
}

/* A validation csv naming other columns than the training data, as many of them: it was validated
 * on as if it held the training fields (only the counts were compared), and the model kept was
 * chosen by that AUC. Refused, naming the first field that differs; the same header validates. */
Test(robust, validation_data_with_other_fields_is_refused)
{
    th_write_str(th_path("a.csv"), "label,a,b\n1,x,y\n0,x,z\n1,w,y\n0,w,z\n");
    th_write_str(th_path("o.csv"), "label,a,c\n1,x,y\n0,x,z\n");
    expect(1, "o.csv: the validation data's fields differ from the training data's (field 2 is c there, b in the training data)",
           T "$B/ctrbox train --model lr --format csv --train a.csv --valid o.csv --epochs 1 --batch 2 --quiet --out m%s", "");
    cr_assert(!th_file_exists(th_path("m/model.ctrbox")));
    expect(0, "best validation AUC", T "$B/ctrbox train --model lr --format csv --train a.csv --valid a.csv --epochs 1 --batch 2 "
                                     "--quiet --out m%s", "");
}

Test(robust, memory_limits_end_in_one_line)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip_test("AddressSanitizer reserves terabytes of address space: ulimit -v cannot be tested under it");
#endif
    make_data();
    expect(0, NULL, TIERED " --epochs 1 --out m --table-dir td%s", "");
    /* under ulimit -v every command could spin forever after its work (an OpenBLAS thread retrying
     * its 128 MB buffer; exit waited for it), and tiered training aborted on RocksDB's uncaught
     * std::system_error: now success, or exit 1 with one line that says why */
    const char *cmds[] = {
        "$B/ctrbox train --model lr --format criteo --train tr.tsv --epochs 1 " SMALL " --out l",
        TIERED " --epochs 1 --out t --table-dir tt",
        "$B/ctrbox eval --model m --data va.tsv",
        "$B/ctrbox predict --model m --data va.tsv --out p.txt",
        "$B/ctrbox-data inspect --format criteo va.tsv",
        "$B/ctrbox-table inspect m",
        "$B/ctrbox plan --model deepfm --batch 512 --reps 1",   /* cuBLAS crashed loading at 990 MB */
    };
    int mbs[] = { 120, 250, 450, 600, 800, 990, 1300 }, ok = 0;
    for (size_t i = 0; i < sizeof mbs / sizeof *mbs; i++)
        for (size_t c = 0; c < sizeof cmds / sizeof *cmds; c++) {
            char *o;
            int rc = th_run(&o, "rm -rf tt; (ulimit -v %d; " T "%s)", mbs[i] * 1024, cmds[c]);
            cr_assert(rc == 0 || (rc == 1 && strstr(o, "ctrbox")), "%d MB, %s: exit %d: %s", mbs[i], cmds[c], rc, o);
            if (rc == 1) cr_assert(!strstr(o, "terminate called") && !strstr(o, "Assertion"), "%s", o);
            ok += rc == 0;
            free(o);
        }
    cr_assert_gt(ok, 0, "nothing ran at any limit");
}

Test(robust, a_late_blas_worker_does_not_hang)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip_test("AddressSanitizer reserves terabytes of address space: ulimit -v cannot be tested under it");
#endif
    make_data();
    /* OpenBLAS's worker takes its 128 MB buffer as it first runs; one the scheduler started late
     * took the buffer the trainer's warm-up had mapped and released, and the trainer's first batch,
     * mapping another after the tables had used the room, retried forever (1 run in 200 at 450 MB;
     * every run with the preload, which starts each thread 50 ms late) */
    int ok = 0;
    for (int mb = 450; mb <= 750; mb += 100) {
        char *o;
        int rc = th_run(&o, "rm -rf tt; (ulimit -v %d; LD_PRELOAD=$B/late-threads.so " TIERED
                            " --epochs 1 --out t --table-dir tt)", mb * 1024);
        cr_assert(rc == 0 || (rc == 1 && strstr(o, "ctrbox")), "%d MB: exit %d: %s", mb, rc, o);
        ok += rc == 0;
        free(o);
    }
    cr_assert_gt(ok, 0, "nothing ran at any limit");
    /* a worker that has not run at all by the preflight (400 ms late) takes its arena and buffer
     * during the warm-up; just over the room the preflight checks for, that mapping fails and
     * OpenBLAS retried forever: now a watchdog ends the run with one line. The limits around that
     * point come from the room the preflight reports at a limit too small for it. */
#define LATE_DLRM "rm -rf d; (ulimit -v %d; LATE_THREADS_MS=400 LD_PRELOAD=$B/late-threads.so " T \
                  "$B/ctrbox train --model dlrm --format criteo --train tr.tsv --epochs 1 --out d " SMALL ")"
    char *o;
    int rc = th_run(&o, LATE_DLRM, 300 * 1024);
    const char *at = strstr(o, "leaves ");
    cr_assert(rc == 1 && at, "300 MB: exit %d: %s", rc, o);
    int base = 300 - atoi(at + 7);   /* MB in use at the preflight */
    free(o);
    for (int mb = base + 318; mb <= base + 334; mb += 2) {
        rc = th_run(&o, LATE_DLRM, mb * 1024);
        cr_assert(rc == 0 || (rc == 1 && strstr(o, "ctrbox")), "%d MB, threads 400 ms late: exit %d: %s", mb, rc, o);
        free(o);
    }
}

Test(robust, openmp_threads_out_of_room_end_in_ctrbox_s_line)
{
#ifdef __SANITIZE_ADDRESS__
    cr_skip_test("AddressSanitizer reserves terabytes of address space: ulimit -v cannot be tested under it");
#endif
    make_data();
    /* Threads with stacks of about 293 MB (ulimit -s) under ulimit -v. OpenBLAS makes its worker
     * as the program loads, and out of room raised SIGINT (exit 130, its own lines only); OpenMP
     * makes its threads at the first parallel region, and out of room libgomp ended the process
     * with its own line ("libgomp: Thread creation failed"). */
#define BIG_STACKS "rm -rf m; (ulimit -v %d; ulimit -s 300000; OPENBLAS_NUM_THREADS=2 " T "$B/ctrbox train --model deepfm " \
                   "--format criteo --train tr.tsv --epochs 1 --threads 2 --quiet --out m)"
    char *o;
    int rc = th_run(&o, BIG_STACKS, 300 * 1024);
    cr_assert(rc == 1 && strstr(o, "ctrbox: OpenBLAS could not start its threads as the program loaded"), "300 MB: exit %d: %s",
              rc, o);
    free(o);
    /* The threads' stacks are checked first (the preflight makes OpenMP's threads, then checks the
     * room for OpenBLAS's buffers: one for each of them too): past the limits where OpenBLAS
     * cannot start, each limit ends in the stacks' line until the preflight's line on OpenBLAS's
     * room; from the MB in use then and that room on, every run trains or ends in ctrbox's line */
    int base = -1, need = 0, stacks = 0;
    for (int mb = 350; base < 0 && mb <= 1200; mb += 50) {
        rc = th_run(&o, BIG_STACKS, mb * 1024);
        const char *at = strstr(o, " leaves "), *nd = strstr(o, "alone needs ");
        cr_assert(rc == 1 && strstr(o, "ctrbox: ") && !strstr(o, "libgomp"), "%d MB: exit %d: %s", mb, rc, o);
        stacks += strstr(o, "no room for the stacks") != NULL;
        if (at && nd) {
            base = mb - atoi(at + 8);
            need = atoi(nd + 12);
        }
        free(o);
    }
    cr_assert(base >= 0 && need > 0, "no preflight line between 350 and 1200 MB");
    cr_assert_gt(stacks, 0, "no run between 350 MB and the preflight's line reached the threads' stacks check");
    int trained = 0;
    for (int mb = base + need; mb <= base + need + 300; mb += 25) {
        rc = th_run(&o, BIG_STACKS, mb * 1024);
        cr_assert(rc == 0 || (rc == 1 && strstr(o, "ctrbox: ") && !strstr(o, "libgomp")), "%d MB: exit %d: %s", mb, rc,
                  o);
        trained += rc == 0;
        free(o);
    }
    cr_assert_gt(trained, 0, "no run between %d and %d MB trained", base + need, base + need + 300);
}

Test(robust, threads_out_of_processes_end_in_one_line)
{
    /* Threads count against the processes a user may run (ulimit -u; root is exempt, so the runs
     * are another user's). Out of them, libgomp ended the process with its own line, and a reader
     * thread that never started was waited for forever; io_uring, without a worker thread for a
     * write, failed it ("Operation canceled"). Now each run trains, or ends with one ctrbox line;
     * the one stopped latest then resumes to the model of a run never stopped. */
    if (geteuid() != 0) cr_skip_test("ulimit -u binds users other than root: running as one needs root");
    make_data();
#define AS_NOBODY "setpriv --reuid=65534 --regid=65534 --clear-groups bash -c "
#define NPROC_RUN(extra) "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --pass-rows 3000 --cache-mb 1 " \
                         "--dim 4 --hidden 16,16 --batch 256 --quiet --epochs 2 --threads 2 " extra
    if (th_run(NULL, "chmod 777 . && " AS_NOBODY "\"test -x $B/ctrbox && test -r tr.tsv && test -w .\"") != 0)
        cr_skip_test("user 65534 cannot run %s/ctrbox here", getenv("CTRBOX_BIN") ? getenv("CTRBOX_BIN") : "bin");
    int trained = 0, refused = 0, stopped = -1;
    for (int n = 6; n <= 20; n++) {
        char *o;
        int rc = th_run(&o, "rm -rf u%d t%d; " AS_NOBODY "\"ulimit -u %d; " T NPROC_RUN("--table-dir t%d --out u%d") "\"", n, n,
                        n, n, n);
        cr_assert(rc == 0 || (rc == 1 && strstr(o, "ctrbox")), "ulimit -u %d: exit %d: %s", n, rc, o);
        cr_assert(!strstr(o, "libgomp") && !strstr(o, "terminate called") && !strstr(o, "Operation canceled"),
                  "ulimit -u %d: %s", n, o);
        trained += rc == 0;
        refused += rc == 1;
        if (rc == 1 && strstr(o, "cannot start the thread")) stopped = n;
        free(o);
    }
    cr_assert(trained > 0 && refused > 0, "ulimit -u from 6 to 20: %d runs trained, %d ended for want of threads", trained,
              refused);
    expect(0, NULL, NPROC_RUN("--table-dir tw --out w%s"), "");
    expect(0, NULL, "$B/ctrbox predict --model w --data va.tsv --out p_w.txt%s", "");
    if (stopped < 0) return;   /* every run stopped before or trained */
    char cmd[600];
    snprintf(cmd, sizeof cmd, NPROC_RUN("--out u%d --resume t%d") " && $B/ctrbox predict --model u%d --data va.tsv --out p_u.txt", stopped, stopped, stopped);
    expect(0, NULL, "%s", cmd);
    th_same_file("p_u.txt", "p_w.txt");
}

Test(robust, outputs_to_pipes_and_devices_are_streamed)
{
    make_data();
    expect(0, NULL, T "$B/ctrbox train --model lr --format criteo --train tr.tsv --epochs 1 " SMALL " --out m%s", "");
    /* a durable write renamed its temporary file over the output: a FIFO (or, as root,
     * /dev/stdout) was replaced by a regular file */
    char *o;
    th_run(&o, "mkfifo pred.fifo && { timeout 60 cat pred.fifo > got.txt & } && " T "$B/ctrbox predict --model m "
               "--data va.tsv --out pred.fifo; echo rc=$?; wait; test -p pred.fifo && echo still-a-fifo; wc -l < got.txt");
    cr_assert(strstr(o, "rc=0") && strstr(o, "still-a-fifo") && strstr(o, "4000"), "%s", o);
    free(o);
    /* (not tried on /dev/stdout itself: a regression would replace the machine's) */
    expect(1, "not a regular file", "mkfifo b.fifo && { timeout 60 cat b.fifo > /dev/null & } && " T
                                    "$B/ctrbox export-serving --model m --out b.fifo%s", "");
}

/* A folder of N bytes' path under the test's folder, made (echoes it): components of 200 bytes */
#define LONG_DIR "long_dir() { d=$PWD/lp; while [ $((${#d} + 201)) -lt $1 ]; do d=$d/$(printf '%%0200d' 0); done; " \
                 "d=$d/$(printf \"%%0$(($1 - ${#d} - 1))d\" 0); mkdir -p $d && echo $d; }; "

Test(robust, folder_paths_too_long_for_their_files_are_refused)
{
    make_data();
    /* Paths of files in a folder were built in buffers of 4096 bytes: from a folder of 4090 bytes,
     * the trainer wrote DIR/LOCK, DIR/log. and DIR/curv (DIR/LOCK.model, log.jsonl, curve.jsonl cut
     * short, another file's name each) and ended with a message cut before its reason; a table
     * folder's files alike. A folder longer than 3800 bytes is refused before anything is written. */
    char *o;
    int rc = th_run(&o, LONG_DIR "D=$(long_dir 4090); echo ${#D}; " T "$B/ctrbox train --model lr --format criteo "
                        "--train tr.tsv --epochs 1 " SMALL " --out $D; echo rc=$?; ls -A $D | wc -l | sed 's/^/files=/'");
    cr_assert(rc == 0 && strstr(o, "4090\n") && strstr(o, "rc=1") && strstr(o, "over the 3800") && strstr(o, "files=0\n"), "%s", o);
    free(o);
    rc = th_run(&o, LONG_DIR "D=$(long_dir 3900); " T "$B/ctrbox train --model lr --format criteo --train tr.tsv "
                    "--epochs 1 " SMALL " --pass-rows 5000 --cache-mb 64 --out m --table-dir $D; echo rc=$?; "
                    "ls -A $D | wc -l | sed 's/^/files=/'; test -e m || echo no-model-folder; "
                    T "$B/ctrbox-table inspect $D; echo rc2=$?");
    cr_assert(rc == 0 && strstr(o, "rc=1") && strstr(o, "over the 3800") && strstr(o, "files=0\n") &&
                  strstr(o, "no-model-folder") && strstr(o, "rc2=1"), "%s", o);
    cr_assert_eq(strstr(strstr(o, "rc=1"), "over the 3800") != NULL, 1, "%s", o);   /* the tool says why too */
    free(o);
    /* at the bound, every file keeps its name: a tiered model trains, evaluates and resumes */
    rc = th_run(&o, LONG_DIR "D=$(long_dir 3795); " T "$B/ctrbox train --model fm --format criteo --train tr.tsv "
                    "--epochs 1 " SMALL " --pass-rows 5000 --cache-mb 64 --out $D --table-dir $D/t && "
                    T "$B/ctrbox eval --model $D --data va.tsv >/dev/null && " T "$B/ctrbox train --model fm --format criteo "
                    "--train tr.tsv --epochs 2 " SMALL " --pass-rows 5000 --cache-mb 64 --out $D --resume $D/t && "
                    "ls $D $D/t | tr '\\n' ' '");
    cr_assert(rc == 0 && strstr(o, " model.ctrbox ") && strstr(o, " LOCK.model ") && strstr(o, " log.jsonl ") &&
                  strstr(o, " curve.jsonl ") && strstr(o, " table0.slots ") && strstr(o, " COMMIT.ctrbox "), "%s", o);
    free(o);
}

Test(robust, training_files_changed_during_a_run_stop_it)
{
    make_data();
    /* Every epoch reads the files again. Read whole each epoch (no --pass-rows), a file appended
     * to (a log still being written) or rewritten after the first epoch trained the later epochs
     * on other rows, and the run ended with exit 0; and a file that got shorter while read said
     * "Input/output error". Now the run stops at the first epoch that would read other bytes, in
     * memory as with a table folder, without committing that epoch. */
    const char *change[] = { "head -100 tr.tsv >> t.tsv", "sed -i 's/^0/1/' t.tsv" };
    const char *where[] = { "", "--table-dir tt --cache-mb 64" };
    for (int c = 0; c < 2; c++)
        for (int w = 0; w < 2; w++) {
            char *o;
            int rc = th_run(&o, "rm -rf m tt; cp tr.tsv t.tsv; " T "$B/ctrbox train --model lr --format criteo "
                                "--train t.tsv --epochs 1000 " SMALL " --out m %s & p=$!; for i in $(seq 6000); do "
                                "grep -q '\"kind\": \"epoch\"' m/log.jsonl 2>/dev/null && break; sleep 0.01; done; %s; "
                                "wait $p; echo rc=$?; grep -c '\"kind\": \"epoch\"' m/log.jsonl",
                            where[w], change[c]);
            cr_assert(rc == 0 && strstr(o, "rc=1") && strstr(o, "the training files changed"), "%s\n%s: %s", change[c],
                      where[w], o);
            free(o);
        }
    /* the table folder's last commit is the epoch before: a resume with the changed file is refused */
    expect(1, "differ from those of the committed run",
           T "$B/ctrbox train --model lr --format criteo --train t.tsv --epochs 1000 " SMALL " --out m --resume tt%s", "");
}

/* Descriptors 0, 1 and 2 closed when a program starts, and a standard output that cannot be
 * written. Before: with `2>&-` log.jsonl took descriptor 2 and held the progress lines (`ctrbox
 * info`: "not a JSON line"); `--data -` with standard input closed predicted nothing, exit 0;
 * eval's figures to a full disk (/dev/full) or a closed standard output were lost, exit 0. */
Test(robust, closed_standard_descriptors_and_an_unwritable_standard_output)
{
    make_data();
    char *o;
    th_run(&o, T "$B/ctrbox train --model fm --format criteo --train tr.tsv --epochs 2 --dim 4 --batch 256 --threads 1 "
               "--out m >&- 2>&-; echo rc=$?; grep -vc '^{' m/log.jsonl; " T "$B/ctrbox info m | grep history");
    cr_assert(strstr(o, "rc=0\n0\n") && strstr(o, "2 epochs") && !strstr(o, "not a JSON line"), "%s", o);
    free(o);
    expect(1, "standard input was closed when the program started", T "$B/ctrbox predict --model m --data - --out p.txt <&-%s", "");
    expect(1, "/dev/stdin: standard input was closed", T "$B/ctrbox eval --model m --data /dev/stdin <&-%s", "");
    expect(1, "-: cannot create: Bad file descriptor", T "$B/ctrbox predict --model m --data va.tsv --out - >&-%s", "");
    expect(1, "cannot write standard output: Bad file descriptor", T "$B/ctrbox eval --model m --data va.tsv >&-%s", "");
    expect(1, "ctrbox-data: cannot write standard output", T "$B/ctrbox-data inspect --format criteo va.tsv >&-%s", "");
    /* the program that runs itself again (to pick OpenBLAS's kernels) finds them closed as well */
    expect(1, "cannot write standard output", T "env -u OPENBLAS_CORETYPE $B/ctrbox eval --model m --data va.tsv >&-%s", "");
    expect(0, "auc", T "$B/ctrbox eval --model m --data va.tsv <&- 2>&-%s", "");
    if (access("/dev/full", W_OK) != 0) {
        cr_log_warn("no /dev/full here: a full standard output is not tried");
        return;
    }
    expect(1, "ctrbox: cannot write standard output: No space left on device",
           T "$B/ctrbox eval --model m --data va.tsv > /dev/full%s", "");
    expect(1, "ctrbox-table: cannot write standard output: No space left on device",
           T "$B/ctrbox-table inspect m/model.ctrbox > /dev/full%s", "");
}

Test(robust, outputs_through_links_and_the_process_s_own_descriptors)
{
    make_data();
    expect(0, NULL, T "$B/ctrbox train --model lr --format criteo --train tr.tsv --epochs 1 " SMALL " --out m%s", "");
#define PRED T "$B/ctrbox predict --model m --data va.tsv --out "
    /* a link to a file: the file gets the output, the link stays (it was replaced by a file) */
    char *o;
    th_run(&o, "echo old > real.txt && ln -s real.txt so && " PRED "so && test -L so && echo still-a-link; wc -l < real.txt");
    cr_assert(strstr(o, "still-a-link") && strstr(o, "4000"), "%s", o);
    free(o);
    /* "-" is standard output (a file named "-" was written), /dev/fd/N the descriptor; as an input
     * "-" is standard input ("No such file"), refused for training as any pipe (with "-" it read
     * the rows for the schema, then trained an empty epoch: loss nan, exit 0) */
    th_run(&o, PRED "- | wc -l; test -e ./- && echo a-file-named-dash; " PRED "/dev/fd/5 5> p5.txt && wc -l < p5.txt; "
               "cat va.tsv | " T "$B/ctrbox predict --model m --data - --out - | wc -l; cat tr.tsv | " T "$B/ctrbox train "
               "--model lr --format criteo --train - --epochs 1 " SMALL " --out m2; echo rc=$?; cat va.tsv | " T "$B/ctrbox-data "
               "split --format criteo --ratios 1,1 --in - --out sp >/dev/null && cat sp.train sp.test | wc -l");
    cr_assert(strstr(o, "4000\n4000\n4000\n") && !strstr(o, "a-file-named-dash") && strstr(o, "not a regular file") &&
                  strstr(o, "rc=1\n4000\n"), "%s", o);
    free(o);
    /* `--out /dev/stdout > p.txt`: the link /dev/stdout resolved to p.txt, a regular file, which
     * took the durable path: as root the machine's /dev/stdout was renamed over by a file holding
     * the predictions, p.txt stayed empty, exit 0. Tried in a mount namespace of its own with a
     * /dev of its own, so that a regression does not replace this machine's. */
    if (geteuid() != 0) {
        cr_log_warn("not root: /dev/stdout redirected to a file is not tried (it needs a mount namespace)");
        return;
    }
    int rc = th_run(&o, "export B; unshare -m sh -c 'mount -t tmpfs none /dev && ln -s /proc/self/fd/1 /dev/stdout && "
                        "mknod /dev/null c 1 3 && " PRED "/dev/stdout > p1.txt && echo x > p2.txt && "
                        PRED "/dev/stdout >> p2.txt && ls -l /dev/stdout' && wc -l < p1.txt && wc -l < p2.txt");
    if (rc != 0 && strstr(o, "unshare")) {
        cr_log_warn("no mount namespace here (%s): /dev/stdout redirected to a file is not tried", o);
        free(o);
        return;
    }
    cr_assert(rc == 0 && strstr(o, "-> /proc/self/fd/1") && strstr(o, "\n4000\n4001"), "%s", o);
    free(o);
#undef PRED
}

/* Each epoch reads the training files again, and its first five bad lines, the first epoch's,
 * were printed once more each epoch (ten epochs: fifty lines for five). A line is printed once a
 * process, whichever way the run reads (in memory, by passes with a table folder, by lanes). */
Test(robust, bad_lines_are_printed_once_not_each_epoch)
{
    make_data();
    const char *ways[] = { "", "--pass-rows 1000 --table-dir t", "--lanes 2" };
    for (size_t i = 0; i < sizeof ways / sizeof ways[0]; i++) {
        char *o;
        int rc = th_run(&o, "rm -rf m t; head -n 4000 tr.tsv | awk 'NR %% 500 == 0 { print \"bad\"; next } { print }' > "
                            "b.tsv && " T "$B/ctrbox train --model lr --format criteo --train b.tsv --epochs 3 %s " SMALL
                            " --max-bad-ratio 0.01 --out m 2>&1 | grep -c '^b.tsv:'",
                            ways[i]);
        cr_assert(rc == 0 && !strcmp(o, "5\n"), "%s: %s", ways[i], o);
        free(o);
    }
}

/* Validation data of one label: its AUC is nan each epoch, so each epoch counted as the best and
 * the last was kept, with no early stop and no word on why ("best validation AUC nan"). */
Test(robust, validation_data_of_one_label_is_named)
{
    make_data();
    char *o;
    int rc = th_run(&o, "awk -F'\\t' 'BEGIN { OFS = \"\\t\" } { $1 = 0; print }' va.tsv > neg.tsv && " T "$B/ctrbox train "
                        "--model lr --format criteo --train tr.tsv --valid neg.tsv --epochs 2 " SMALL " --out m && " T
                        "$B/ctrbox train --model lr --format criteo --train tr.tsv --valid va.tsv --epochs 1 " SMALL " --out n");
    cr_assert(rc == 0 && strstr(o, "warning: neg.tsv holds only negatives: its AUC is undefined") &&
                  !strstr(o, "va.tsv holds"), "%s", o);
    free(o);
}

/* A run going on in a model folder (--init, --resume, --follow) appends to log.jsonl and
 * curve.jsonl. A last line cut short (a kill or a full disk mid-write) had the next run's first line
 * run on from it, and `ctrbox info` read the history only up to there ("not a JSON line"). The cut
 * line is dropped now: a long one, one in a file of no whole line (then the warm start's "run" line
 * and its epoch line), and a whole file left alone. */
Test(robust, a_log_line_cut_short_is_dropped_before_appending)
{
    make_data();
    const char *run = T "$B/ctrbox train --model lr --format criteo --train va.tsv --epochs 1 " SMALL;
    char *o;
    int rc = th_run(&o, "%s --out m 2>/dev/null && cp m/log.jsonl whole && printf '%%6000s' | tr ' ' x >> m/log.jsonl && printf '{\"kind\": \"ep' >> m/curve.jsonl && "
                        "%s --init m --out m 2>/dev/null && grep -vc '^{[^{]*}$' m/log.jsonl m/curve.jsonl; "
                        "$B/ctrbox info m | grep -c 'no more history'; printf 'junk' > m/log.jsonl && %s --init m --out m "
                        "2>/dev/null && grep -vc '^{.*}$' m/log.jsonl; grep -c . m/log.jsonl; cp whole m/log.jsonl && %s "
                        "--init m --out m 2>/dev/null && head -c $(wc -c < whole) m/log.jsonl | cmp - whole && echo kept",
                        run, run, run, run);
    cr_assert(rc == 0 && !strcmp(o, "m/log.jsonl:0\nm/curve.jsonl:0\n0\n0\n2\nkept\n"), "%s", o);
    free(o);
}

/* A table folder given where the model folder was meant, and a model folder whose run has not
 * saved yet: both said only "DIR/model.ctrbox: cannot open: No such file or directory". */
Test(robust, a_table_folder_or_an_unsaved_run_given_as_the_model_is_named)
{
    make_data();
    char *o;
    int rc = th_run(&o, T "$B/ctrbox train --model lr --format criteo --train va.tsv --epochs 1 " SMALL " --pass-rows 1000 "
                          "--table-dir t --out m && mkdir u && cp m/log.jsonl u/ && " T "$B/ctrbox predict --model t --data "
                          "va.tsv --out p.txt; echo rc=$?; " T "$B/ctrbox info u; echo rc=$?; " T "$B/ctrbox eval --model m "
                          "--data va.tsv > /dev/null && echo ok");
    cr_assert(rc == 0 && strstr(o, "t is a table folder (--table-dir), not a model folder") && strstr(o, "\nrc=1\n") &&
                  strstr(o, "u: no model.ctrbox yet") && !strstr(o, "rc=0") && strstr(o, "ok\n"), "%s", o);
    free(o);
}

/* A cbx file's rows were parsed when it was converted: --num, --schema and --field-offsets given
 * for training on it were dropped without a word (--num bucket trained on log values). Refused
 * now, --num only when it differs from the file's. And an error after the run has started came
 * after an empty line in a log file or a pipe (meant to end a terminal's progress line). */
Test(robust, text_options_given_for_a_cbx_file_are_refused)
{
    make_data();
    char *o;
    int rc = th_run(&o, "$B/ctrbox-data convert --format criteo --in va.tsv --out v.cbx > /dev/null 2>&1 && for a in "
                        "'--num bucket' '--schema I1:skip' '--field-offsets 0,5'; do " T "$B/ctrbox train --model lr $a "
                        "--train v.cbx --epochs 1 " SMALL " --out m; echo rc=$?; done; " T "$B/ctrbox train --model lr "
                        "--num log --train v.cbx --epochs 1 " SMALL " --out m && echo same-num-ok; " T "$B/ctrbox train "
                        "--model lr --format criteo --train v.cbx --train va.tsv --pass-rows 1000 --table-dir t --epochs 1 "
                        SMALL " --out n 2>&1 | head -c 7");
    cr_assert(rc == 0 && strstr(o, "v.cbx: its integers were read as log values when it was converted: --num bucket") &&
                  strstr(o, "--schema applies to text") && strstr(o, "--field-offsets applies to text") &&
                  !strstr(o, "rc=0") && strstr(o, "same-num-ok\nctrbox:"), "%s", o);
    free(o);
}

/* A csv whose columns moved (a daily export of the same columns in another order) was refused by
 * predict, eval, --valid and --follow ("field 1 is C2, the model's is I1"). Columns are matched to the
 * model's fields by name now: the scores, the metrics and the model kept are those of the data in
 * the model's order. A column the model lacks, or one it has not, is named. */
Test(robust, csv_columns_in_another_order_are_matched_by_name)
{
    make_data();
    char *o;
    int rc = th_run(&o, "awk -F'\\t' 'BEGIN { print \"label,I1,C1,C2\" } { print $1 \",\" $2 \",\" $15 \",\" $16 }' tr.tsv > a.csv && "
                        "awk -F'\\t' 'BEGIN { print \"label,I1,C1,C2\" } { print $1 \",\" $2 \",\" $15 \",\" $16 }' va.tsv > v.csv && "
                        "awk -F'\\t' 'BEGIN { print \"C2,I1,label,C1\" } { print $16 \",\" $2 \",\" $1 \",\" $15 }' va.tsv > w.csv && "
                        "awk -F'\\t' 'BEGIN { print \"C2,I1,label,C9\" } { print $16 \",\" $2 \",\" $1 \",\" $15 }' va.tsv > x.csv && "
                        T "$B/ctrbox train --model fm --format csv --schema I1:num --train a.csv --valid v.csv --epochs 2 "
                        SMALL " --out m && " T "$B/ctrbox train --model fm --format csv --schema I1:num --train a.csv --valid "
                        "w.csv --epochs 2 " SMALL " --out n && cmp m/model.ctrbox n/model.ctrbox && echo same-model && "
                        T "$B/ctrbox predict --model m --data v.csv --out p && " T "$B/ctrbox predict --model m --data w.csv "
                        "--out q && cmp p q && echo same-scores && " T "$B/ctrbox eval --model m --data v.csv > e1 && "
                        T "$B/ctrbox eval --model m --data w.csv > e2 && cmp e1 e2 && echo same-eval; " T "$B/ctrbox eval "
                        "--model m --data x.csv; echo rc=$?; mkdir fa fb && cp a.csv fa/1.csv && cp v.csv fa/2.csv && "
                        "cp a.csv fb/1.csv && cp w.csv fb/2.csv && for f in fa fb; do " T "$B/ctrbox train --model fm --format "
                        "csv --schema I1:num --follow $f --follow-idle 0 " SMALL " --out m$f || exit 1; done && " T "$B/ctrbox "
                        "predict --model mfa --data v.csv --out pa && " T "$B/ctrbox predict --model mfb --data v.csv --out "
                        "pb && cmp pa pb && echo same-follow");
    cr_assert(rc == 0 && strstr(o, "same-model\n") && strstr(o, "same-scores\n") && strstr(o, "same-eval\n") &&
                  strstr(o, "same-follow\n") &&
                  strstr(o, "x.csv: its column C9 is none of the model's fields") && strstr(o, "rc=1\n"), "%s", o);
    free(o);
}

/* A warm start written into the folder of the model it starts from (--init m --out m) appends to
 * m/log.jsonl, and `ctrbox info` summed up both runs as one: the largest epoch and row numbers of
 * either ("the run: 3 epochs, 60000 rows" for a run of one epoch over 4,000). A "run" line now
 * begins the warm start's part of the logs, and the summary is of the lines after it. */
Test(robust, a_warm_start_into_its_own_folder_is_summed_up_alone)
{
    make_data();
    const char *a = T "$B/ctrbox train --model lr --format criteo " SMALL;
    char *o;
    int rc = th_run(&o, "%s --train tr.tsv --valid va.tsv --epochs 3 --out m 2>/dev/null && %s --train va.tsv --valid va.tsv "
                        "--epochs 1 --init m --out m 2>/dev/null && " T "$B/ctrbox info m | grep history && " T "$B/ctrbox "
                        "report --model m --out r.html > /dev/null && grep -c '\"kind\": \"epoch\"' m/log.jsonl",
                    a, a);
    cr_assert(rc == 0 && strstr(o, "the run: 1 epoch, 4000 rows") && strstr(o, "at epoch 1") && strstr(o, "\n4\n"), "%s", o);
    free(o);
}

/* A folder of data holding a link whose file is gone (a day's log moved away): the link was
 * skipped without a word, and the run trained on the rest. It is refused now, naming the link;
 * hidden names, sub-folders and pipes are still passed over. */
Test(robust, a_link_to_nothing_in_a_folder_of_data_is_refused)
{
    make_data();
    char *o;
    int rc = th_run(&o, "mkdir d && cp va.tsv d/a.tsv && mkdir d/sub && mkfifo d/pipe && ln -s gone.tsv d/.hidden && "
                        T "$B/ctrbox train --model lr --format criteo --train d --epochs 1 " SMALL " --out m && echo ok; "
                        "ln -s gone.tsv d/b.tsv && " T "$B/ctrbox train --model lr --format criteo --train d --epochs 1 " SMALL
                        " --out n; echo rc=$?; " T "$B/ctrbox predict --model m --data d --out p.txt; echo rc=$?");
    cr_assert(rc == 0 && strstr(o, "ok\n") && strstr(o, "d/b.tsv: a link to gone.tsv, which cannot be read") &&
                  strstr(o, "rc=1\nctrbox: d/b.tsv") && !strstr(o, "rc=0"), "%s", o);
    free(o);
}

/* A warm start (--init) on a csv whose columns moved was refused ("trained on 3 fields ... (I1
 * ...), the data has 3 and ... (C2 ...)"), where predict and --valid read it by name. Its columns
 * are matched to the model's fields by name now, under --follow too: the same model as from the
 * data in order. */
Test(robust, a_warm_start_reads_moved_csv_columns_by_name)
{
    make_data();
    char *o;
    int rc = th_run(&o, "awk -F'\\t' 'BEGIN { print \"label,I1,C1,C2\" } { print $1 \",\" $2 \",\" $15 \",\" $16 }' tr.tsv > a.csv && "
                        "mkdir -p in moved && awk -F'\\t' 'BEGIN { print \"label,I1,C1,C2\" } { print $1 \",\" $2 \",\" $15 \",\" $16 }' "
                        "va.tsv > in/v.csv && awk -F'\\t' 'BEGIN { print \"C2,I1,label,C1\" } { print $16 \",\" $2 \",\" $1 \",\" $15 }' "
                        "va.tsv > moved/v.csv && " T "$B/ctrbox train --model fm --format csv --schema I1:num --train a.csv "
                        "--epochs 1 " SMALL " --out m && "
                        T "$B/ctrbox train --model fm --format csv --schema I1:num --train in/v.csv --init m --epochs 1 " SMALL " --out i1 && "
                        T "$B/ctrbox train --model fm --format csv --schema I1:num --train moved/v.csv --init m --epochs 1 " SMALL " --out i2 && "
                        "cmp i1/model.ctrbox i2/model.ctrbox && echo same-model && "
                        T "$B/ctrbox train --model fm --format csv --schema I1:num --follow in --follow-idle 0 --init m " SMALL " --out f1 && "
                        T "$B/ctrbox train --model fm --format csv --schema I1:num --follow moved --follow-idle 0 --init m " SMALL " --out f2 && "
                        T "$B/ctrbox predict --model f1 --data in/v.csv --out p1 && "
                        T "$B/ctrbox predict --model f2 --data in/v.csv --out p2 && cmp p1 p2 && echo same-follow");
    cr_assert(rc == 0 && strstr(o, "same-model\n") && strstr(o, "same-follow\n"), "%s", o);
    free(o);
}

/* A warm start without the input options its model was trained with (--schema here) was refused
 * with two field counts ("trained on 3 fields and 1 dense values (I1 ...), the data has 3 and 0
 * (I1 ...)"), as was a --follow file lacking a column: the refusal names the column that differs,
 * and for --init the options the model was trained on. */
Test(robust, a_warm_start_on_other_input_names_the_options)
{
    make_data();
    expect(0, NULL, "awk -F'\\t' 'BEGIN { print \"label,I1,C1,C2\" } { print $1 \",\" $2 \",\" $15 \",\" $16 }' va.tsv > a.csv && "
                    T "$B/ctrbox train --model fm --format csv --schema I1:num --train a.csv --epochs 1 " SMALL " --out m%s", "");
    expect(1, "a.csv: its column I1 reads as categorical, the model's as dense; the --init model m was trained on csv "
              "--schema I1:num", T "$B/ctrbox train --model fm --format csv --train a.csv --init m " SMALL " --out n%s", "");
    expect(1, "its integers read as buckets, the model's as log values (--num log)",
           T "$B/ctrbox train --model fm --format csv --schema I1:num --num bucket --train a.csv --init m " SMALL " --out n%s", "");
    cr_assert(!th_file_exists(th_path("n/model.ctrbox")));
    /* under --follow a later file that lacks a column was refused with two field counts too */
    expect(1, "f/2.csv: it has no column C2, a field of the model's (--follow: move it out of",
           "mkdir f && cp a.csv f/1.csv && cut -d, -f1-3 a.csv > f/2.csv && " T "$B/ctrbox train --model fm --format csv "
           "--schema I1:num --follow f --follow-idle 0 " SMALL " --out g%s", "");
}

/* eval of data of one label printed "auc nan ... calibration nan" with nothing saying why */
Test(robust, eval_of_one_label_says_why_the_auc_is_nan)
{
    make_data();
    expect(0, "neg.tsv holds only negatives: its AUC is undefined (nan), and so is calibration",
           "awk -F'\\t' '$1 == 0' va.tsv > neg.tsv && " T "$B/ctrbox train --model lr --format criteo --train tr.tsv "
           "--epochs 1 --out m " SMALL " && " T "$B/ctrbox eval --model m --data neg.tsv 2>&1%s", "");
    expect(0, "pos.txt holds only positives: its AUC is undefined (nan); evaluate",
           "printf '1\\t0.5\\n1\\t0.7\\n' > pos.txt && " T "$B/ctrbox eval --scores pos.txt 2>&1%s", "");
    /* both labels: no warning */
    char *o;
    cr_assert_eq(th_run(&o, T "$B/ctrbox eval --model m --data va.tsv 2>&1"), 0);
    cr_assert(!strstr(o, "warning"), "%s", o);
    free(o);
}

/* --resume with other rates or shrink rules (--sparse-lr, --l2, --lr, --lr-decay,
 * --shrink-threshold) went on with them: the rest of the run trained otherwise, silently another
 * model than the run's. Refused now, naming the option;
 * with the same rates the run goes on (a second epoch here) to the uninterrupted run's model. */
Test(robust, a_resume_with_other_rates_is_refused)
{
    make_data();
#define RUN T "$B/ctrbox train --model fm --format criteo --train tr.tsv --pass-rows 5000 --cache-mb 0.05 " SMALL
    expect(0, NULL, RUN " --epochs 2 --out whole --table-dir twhole%s", "");
    expect(0, NULL, RUN " --epochs 1 --out r --resume tr%s", "");
    const char *other[] = { "--sparse-lr 0.01", "--l2 0.1", "--lr 0.002", "--lr-decay 0.5", "--dense-l2 0.001",
                            "--shrink-threshold 0.5", "--shrink-unseen 3", "--clk-coeff 2" };
    for (size_t i = 0; i < sizeof other / sizeof *other; i++) {
        char opt[64], want[96];
        snprintf(opt, sizeof opt, " --epochs 2 --out r --resume tr %s", other[i]);
        snprintf(want, sizeof want, "this command gives %s: give the committed run's value", other[i]);
        expect(1, want, RUN "%s", opt);
    }
    expect(0, NULL, RUN " --epochs 2 --out r --resume tr --lr 0.001%s", "");
#undef RUN
    expect(0, NULL, "$B/ctrbox predict --model whole --data va.tsv --out p_whole.txt && $B/ctrbox predict --model r "
                    "--data va.tsv --out p_r.txt%s", "");
    th_same_file("p_whole.txt", "p_r.txt");
    /* --follow is a chain of warm starts, whose rates may change: a daily job stopped inside an
     * entry and started again with a new rate goes on with it, and says so */
    char *o;
    int rc = th_run(&o, "mkdir in && cat tr.tsv tr.tsv > in/d1.tsv && "
                        T "$B/ctrbox train --model fm --format criteo --pass-rows 1000 --cache-mb 0.05 " SMALL " --follow in "
                        "--out f --table-dir tf 2>/dev/null & pid=$!; "
                        "n=0; while ! grep -qs '\"kind\": \"pass\"' f/log.jsonl && [ $n -lt 1200 ]; do sleep 0.05; n=$((n + 1)); done; "
                        "kill -TERM $pid; wait $pid; grep -c '\"kind\": \"stopped\".*\"entry\": \"d1.tsv\"' f/log.jsonl; "
                        T "$B/ctrbox train --model fm --format criteo --pass-rows 1000 --cache-mb 0.05 " SMALL " --follow in "
                        "--follow-idle 0 --out f --table-dir tf --lr 0.002 2>&1");
    cr_assert(rc == 0 && !strncmp(o, "1\n", 2) && strstr(o, "ctrbox: warning: --follow: the entry in progress was begun "
                                                          "with --lr 0.001; it goes on with --lr 0.002"), "%s", o);
    free(o);
}
