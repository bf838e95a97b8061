/*
 * test_mpi.c: one model trained by several processes (src/lanes.h, src/dist.h), with mpirun
 * --oversubscribe on this machine: the model file is the same bytes for 1, 2 and 3 processes and
 * for one process without mpirun given the same --lanes; the validation AUC over all ranks is one
 * process's on the saved model; with a table folder per rank at a tiny budget the model (read from
 * the sharded folder by predict, export-serving and ctrbox-table) is the one trained in memory, and
 * after kill -9 of one rank mid-run the resumed job ends with the model of an uninterrupted run;
 * each rank parses only its lanes' lines; options this mode does not support are refused in one line.
 * The tests skip when mpirun is absent (make deps installs Open MPI).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../dense/model.h"
#include "../embedding/table.h"
#include "../src/modelfile.h"
#include "helpers.h"

TestSuite(mpi, .fini = th_cleanup);

/* root may run Open MPI's mpirun only when told so; oversubscribed: 3 ranks on 2 cores; its session
 * folder in the test's own (two mpirun starting at once race to create /tmp/ompi.HOST.UID); shared
 * memory without cross-memory attach (a container without ptrace rights refuses it). Under
 * `make asan` LeakSanitizer would report what MPI_Init allocates and never frees (Open MPI's own,
 * partly in plugins it unloads, so no suppression can name them): the ranks run without leak
 * checks, while the plain --lanes runs here check the same code for leaks. */
#define MPIRUN                                                                                              \
    "ASAN_OPTIONS=detect_leaks=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "                  \
    "OMPI_MCA_orte_tmpdir_base=\"$PWD\" OMPI_MCA_btl_vader_single_copy_mechanism=none mpirun --oversubscribe -np "

static void need_mpirun(void)
{
    if (th_run(NULL, "command -v mpirun >/dev/null") != 0) cr_skip_test("mpirun is not installed (make deps installs Open MPI)");
}

static void gen(void)
{
    cr_assert_eq(th_run(NULL, "$B/ctrbox-data gen --rows 9000 --seed 3 --keys 0.004 --out tr.tsv && "
                              "$B/ctrbox-data gen --rows 3000 --seed 3 --keys 0.004 --offset 9000 --out va.tsv"),
                 0);
}

static char *run_ok(const char *fmt, const char *a, const char *b)
{
    char *o, cmd[2048];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    int rc = th_run(&o, "%s", cmd);
    cr_assert_eq(rc, 0, "%s: exit %d\n%s", cmd, rc, o);
    return o;
}

/* The last "valid_auc" of a model folder's log.jsonl. */
static double log_auc(const char *dir)
{
    char p[256];
    snprintf(p, sizeof p, "%s/log.jsonl", dir);
    char *s = th_read(th_path(p), NULL), *q = s, *last = NULL;
    while ((q = strstr(q, "\"valid_auc\": "))) last = q += 13;
    cr_assert(last, "%s has no validation AUC:\n%s", p, s);
    double v = atof(last);
    free(s);
    return v;
}

/* Each model, trained on 1, 2 and 3 processes and plainly with --lanes 6: the same model file;
 * options cover the optimizers, a table per field, the regularizer over the whole table, batch norm
 * (each lane's rows normalized by their own statistics, the running statistics moved once a step), the
 * learning-rate drop after a worse epoch (decided on every rank alike), the file order and an
 * evaluation (and the best model kept) every 7 steps. */
Test(mpi, the_model_does_not_depend_on_the_number_of_processes)
{
    need_mpirun();
    gen();
    static const char *const runs[] = {
        "--model deepfm --dim 4 --hidden 16,16 --batch 300 --epochs 2 --eval-every 7 --dropout 0.2",
        "--model dnn --dim 4 --hidden 16,8 --batchnorm --batch 300 --epochs 2 --dropout 0.1 --shuffle-rows 2000",
        "--model ffm --dim 2 --batch 256 --epochs 2 --sparse-opt adagrad --table-per-field --emb-l2 0.0001 "
        "--lr-decay 0.5 --patience 3 --lr 0.05",
        "--model dcnv2 --dim 4 --hidden 8 --cross 2 --batch 512 --epochs 1 --shuffle-rows 0 --sparse-opt ftrl",
        "--model dlrm --dim 4 --hidden 8 --bottom 8,4 --batch 200 --epochs 1 --shuffle-rows 2500 --dense-opt sgd "
        "--sparse-opt rowwise_adagrad",
    };
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        const char *base = "$B/ctrbox train --format criteo --train tr.tsv --valid va.tsv --threads 1 --quiet --lanes 6 %s %s";
        free(run_ok(base, runs[i], "--out plain"));
        for (int np = 1; np <= 3; np++) {
            char f[512], dir[16], out[32], mfile[48];
            snprintf(f, sizeof f, MPIRUN "%d %s", np, base);
            snprintf(dir, sizeof dir, "np%d", np);
            snprintf(out, sizeof out, "--out %s", dir);
            snprintf(mfile, sizeof mfile, "%s/model.ctrbox", dir);
            free(run_ok(f, runs[i], out));
            th_same_file("plain/model.ctrbox", mfile);
            cr_assert_eq(log_auc(dir), log_auc("plain"), "%s, %d processes: validation AUC %.6f, one process %.6f", runs[i],
                         np, log_auc(dir), log_auc("plain"));
        }
        cr_assert_eq(th_run(NULL, "rm -rf plain np1 np2 np3"), 0);
    }
}

/* The same rows as a gzip file (read whole by every rank) followed by a plain one (cut into
 * pieces), and as a cbx file (cut into blocks): the model file is the same for 1, 2 and 3
 * processes and for one plain process; the text and cbx inputs hold the same records, so all
 * four give the plain text model. */
Test(mpi, compressed_plain_and_cbx_inputs_give_one_model)
{
    need_mpirun();
    gen();
    cr_assert_eq(th_run(NULL, "head -n 4000 tr.tsv | gzip > a.tsv.gz && tail -n +4001 tr.tsv > b.tsv && "
                              "$B/ctrbox-data convert --format criteo --in tr.tsv --out tr.cbx 2>/dev/null"),
                 0);
    const char *base = "$B/ctrbox train --format criteo %s --threads 1 --quiet --lanes 6 --model deepfm --dim 4 "
                       "--hidden 8 --batch 256 --epochs 2 --shuffle-rows 3000 %s";
    free(run_ok(base, "--train tr.tsv", "--out plain"));
    static const char *const inputs[] = { "--train a.tsv.gz --train b.tsv", "--train tr.cbx" };
    for (size_t i = 0; i < 2; i++)
        for (int np = 1; np <= 3; np++) {
            char f[512], out[32], mfile[48];
            snprintf(f, sizeof f, MPIRUN "%d %s", np, base);
            snprintf(out, sizeof out, "--out m%zu%d", i, np);
            snprintf(mfile, sizeof mfile, "m%zu%d/model.ctrbox", i, np);
            free(run_ok(f, inputs[i], out));
            th_same_file("plain/model.ctrbox", mfile);
        }
}

/* eval and predict under mpirun: each rank reads its share of the data (a gzip file whole, a plain
 * one by pieces, with bad lines) and predicts its batches; rank 0 prints the metrics (gAUC too) and
 * writes the predictions in input order: the same bytes as one process's, for 1, 2 and 3 processes;
 * csv ids come along. */
Test(mpi, eval_and_predict_give_one_process_results)
{
    need_mpirun();
    gen();
    const char *one = "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ";
    cr_assert_eq(th_run(NULL, "$B/ctrbox train --format criteo --train tr.tsv --threads 1 --quiet --model deepfm --dim 4 "
                              "--hidden 8 --batch 128 --epochs 1 --out m && "
                              "awk 'NR == 77 || NR == 1500 { print \"not a row\" } { print }' va.tsv > vb.tsv && "
                              "head -n 1000 vb.tsv | gzip > v1.gz && tail -n +1001 vb.tsv > v2.tsv"), 0);
    /* a csv with ids */
    FILE *f = fopen(th_path("ids.csv"), "w");
    fprintf(f, "id,label,a,b,c\n");
    for (int i = 0; i < 3000; i++) fprintf(f, "r%d,%d,%d,b%d,c%d\n", i, (i * 7 + i / 3) % 3 == 0, i % 17, i % 23, (i * 13) % 31);
    fclose(f);
    cr_assert_eq(th_run(NULL, "$B/ctrbox train --format csv --schema 'id:skip,label:label,a:num,b:cat,c:cat' --train ids.csv "
                              "--threads 1 --quiet --model lr --batch 64 --epochs 1 --out mc"), 0);
    char *want, *o, cmd[1024];
    snprintf(cmd, sizeof cmd, "%s$B/ctrbox eval --model m --data v1.gz --data v2.tsv --json --group C3 "
             "--max-bad-ratio 0.01 2>/dev/null && %s$B/ctrbox predict --model m --data v1.gz --data v2.tsv --out one.pred "
             "--max-bad-ratio 0.01 2>/dev/null && %s$B/ctrbox predict --model mc --data ids.csv --id-column id "
             "--out one.ids", one, one, one);
    cr_assert_eq(th_run(&want, "%s", cmd), 0, "%s", want);
    cr_assert(strstr(want, "\"gauc\""), "%s", want);
    /* the bad lines are scored nan in their own lines: line N of the output is line N of the data */
    cr_assert_eq(th_run(&o, "sed -n '77p;1501p' one.pred | tr '\\n' ' '; grep -c nan one.pred; wc -l < vb.tsv; wc -l < one.pred"), 0);
    cr_assert_str_eq(o, "nan nan 2\n3002\n3002\n");
    free(o);
    for (int np = 1; np <= 3; np++) {
        snprintf(cmd, sizeof cmd, "%s" MPIRUN "%d $B/ctrbox eval --model m --data v1.gz --data v2.tsv --json --group C3 "
                 "--max-bad-ratio 0.01 2>/dev/null && %s" MPIRUN "%d $B/ctrbox predict --model m --data v1.gz --data v2.tsv "
                 "--out np.pred --max-bad-ratio 0.01 2>/dev/null && %s" MPIRUN "%d $B/ctrbox predict --model mc "
                 "--data ids.csv --id-column id --out np.ids", one, np, one, np, one, np);
        cr_assert_eq(th_run(&o, "%s", cmd), 0, "%d processes: %s", np, o);
        cr_assert_str_eq(o, want, "%d processes: eval printed\n%s\none process:\n%s", np, o, want);
        th_same_file("one.pred", "np.pred");
        th_same_file("one.ids", "np.ids");
        free(o);
    }
    free(want);
}

/* Ranks that see the input with other sizes (here each is given a file of its own; in life a log
 * that grew while they opened it) stop at once with one line, not in a collective that never
 * ends; eval alike. */
Test(mpi, ranks_that_see_other_files_stop_with_a_message)
{
    need_mpirun();
    gen();
    cr_assert_eq(th_run(NULL, "cp tr.tsv f0.tsv && head -n 8000 tr.tsv > f1.tsv && cp va.tsv v0.tsv && "
                              "head -n 2000 va.tsv > v1.tsv && $B/ctrbox train --format criteo --train tr.tsv --quiet "
                              "--model lr --epochs 1 --out m"), 0);
    char *o;
    int rc = th_run(&o, MPIRUN "2 timeout 120 sh -c \"exec $B/ctrbox train --model lr --format criteo "
                        "--train f\\$OMPI_COMM_WORLD_RANK.tsv --quiet --epochs 1 --out m2\"");
    cr_assert(rc != 0 && rc != 124, "exit %d\n%s", rc, o);
    cr_assert(strstr(o, "see the input files with other sizes"), "%s", o);
    cr_assert(!th_file_exists(th_path("m2/model.ctrbox")));
    free(o);
    rc = th_run(&o, MPIRUN "2 timeout 120 sh -c \"exec $B/ctrbox eval --model m --data v\\$OMPI_COMM_WORLD_RANK.tsv\"");
    cr_assert(rc != 0 && rc != 124, "exit %d\n%s", rc, o);
    cr_assert(strstr(o, "see the data files with other sizes"), "%s", o);
    free(o);
}

/* The number in a log line after `"name": `, from the last line of kind "lanes". */
static double lanes_log(const char *dir, const char *name)
{
    char p[256], key[64];
    snprintf(p, sizeof p, "%s/log.jsonl", dir);
    snprintf(key, sizeof key, "\"%s\": ", name);
    char *s = th_read(th_path(p), NULL), *q = s, *last = NULL;
    while ((q = strstr(q, "\"kind\": \"lanes\""))) last = q++;
    cr_assert(last, "%s has no lanes line:\n%s", p, s);
    char *v = strstr(last, key);
    cr_assert(v, "%s: no %s", p, name);
    double x = atof(v + strlen(key));
    free(s);
    return x;
}

/* Each rank reads only its pieces of the file (datasets/source.h): the most bytes one read and
 * the most rows one parsed are its share; a bad line is reported once over all ranks, by the one
 * that read it, with its line number. The rows go to the ranks of their lanes, and the bad lines
 * count as records, so lanes and passes do not depend on N: 1, 2 and 3 processes write a plain
 * process's model. */
Test(mpi, each_process_reads_its_share_of_the_bytes)
{
    need_mpirun();
    gen();
    /* four bad lines among 9000 good ones (lines 701, 2302, 5003, 8404), in different lanes' blocks */
    cr_assert_eq(th_run(NULL, "awk 'NR == 701 || NR == 2301 || NR == 5001 || NR == 8401 { print \"not a row\" } "
                              "{ print }' tr.tsv > bad.tsv && test $(wc -l < bad.tsv) = 9004"), 0);
    const char *base = "$B/ctrbox train --format criteo --train bad.tsv --threads 1 --quiet --lanes 6 --model deepfm "
                       "--dim 4 --hidden 8 --batch 300 --epochs 1 --shuffle-rows 2000 --max-bad-ratio 0.01 %s %s";
    free(run_ok(base, "", "--out plain"));
    cr_assert_eq(lanes_log("plain", "records"), 9004);
    cr_assert_eq(lanes_log("plain", "own_rows_max"), 9000);
    size_t len;
    free(th_read(th_path("bad.tsv"), &len));
    double size = (double)len;
    static const int lines[] = { 701, 2302, 5003, 8404 };
    for (int np = 1; np <= 3; np++) {
        char f[512], out[32];
        snprintf(f, sizeof f, MPIRUN "%d %s", np, base);
        snprintf(out, sizeof out, "--out np%d", np);
        char *o = run_ok(f, "", out);
        for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
            char want[32];
            snprintf(want, sizeof want, "bad.tsv:%d:", lines[i]);
            char *at = strstr(o, want);
            cr_assert(at && !strstr(at + 1, want), "%d processes: line %d reported %s:\n%s", np, lines[i],
                      at ? "more than once" : "by none", o);
        }
        free(o);
        snprintf(out, sizeof out, "np%d", np);
        cr_assert_eq(lanes_log(out, "records"), 9004);
        /* each reads its pieces of the file (8 a rank, of equal bytes) and parses their lines */
        double bytes = lanes_log(out, "own_bytes_max"), rows = lanes_log(out, "own_rows_max");
        cr_assert(bytes >= size / np && bytes <= size / np * 1.05 + 8 * 4096, "%d processes: the most bytes one read is "
                  "%.0f of %.0f", np, bytes, size);
        cr_assert(rows >= 9000.0 / np && rows <= 9000.0 / np * 1.1, "%d processes: the most rows one parsed is %.0f", np,
                  rows);
        char mfile[48];
        snprintf(mfile, sizeof mfile, "np%d/model.ctrbox", np);
        th_same_file("plain/model.ctrbox", mfile);
    }
}

/* The lanes' model is a model of the data: its validation AUC is close to one trained batch by
 * batch on the same global batch, and `ctrbox eval` (one process, one thread as the training had)
 * reads the saved model to the AUC the training logged over the ranks' predictions. */
Test(mpi, lanes_train_as_well_and_evaluate_as_one_process)
{
    need_mpirun();
    gen();
    const char *base = "$B/ctrbox train --format criteo --train tr.tsv --valid va.tsv --threads 1 --quiet --model deepfm "
                       "--dim 4 --hidden 16,16 --batch 256 --epochs 3 %s %s";
    free(run_ok(base, "", "--out one"));
    char f[512];
    snprintf(f, sizeof f, MPIRUN "2 %s", base);
    free(run_ok(f, "", "--out two"));   /* 12 lanes under mpirun by default */
    double a1 = log_auc("one"), a2 = log_auc("two");
    cr_assert(a1 > 0.7 && fabs(a1 - a2) < 0.01, "validation AUC %.6f batch by batch, %.6f in 12 lanes on 2 processes", a1, a2);
    char *o = run_ok("OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $B/ctrbox eval --model %s --data va.tsv --json%s", "two", "");
    const char *p = strstr(o, "\"auc\": ");
    cr_assert(p, "%s", o);
    double e = atof(p + 7);
    /* log.jsonl prints six decimals: the same AUC rounds the same */
    char x[32], y[32];
    snprintf(x, sizeof x, "%.6f", e);
    snprintf(y, sizeof y, "%.6f", a2);
    cr_assert_str_eq(x, y, "ctrbox eval %.10f, the training's evaluation over 2 processes %s", e, y);
    free(o);
    /* ctrbox info reads the run from the lanes' log lines: 3 epochs of 9000 rows */
    o = run_ok("$B/ctrbox info --model %s --json%s", "two", "");
    cr_assert(strstr(o, "\"epochs\": 3") && strstr(o, "\"rows_trained\": 27000"), "%s", o);
    free(o);
}

/* What this mode does not do yet is refused on every rank in one line, before anything is written. */
Test(mpi, unsupported_options_are_refused)
{
    need_mpirun();
    gen();
    static const struct {
        const char *args, *want;
    } bad[] = {
        { "--table-dir tdir --emb-l2 0.001", "cannot be used with --table-dir" },
        { "--min-show 2 --admit-mb 4", "counts the shows of keys not yet admitted exactly: give --admit-mb 0" },
        { "--lanes 1", "--lanes 1: fewer lanes than the 2 processes" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *o, cmd[1024];
        snprintf(cmd, sizeof cmd, MPIRUN "2 $B/ctrbox train --model fm --format criteo --train tr.tsv --quiet --out m%zu %s",
                 i, bad[i].args);
        int rc = th_run(&o, "%s", cmd);
        cr_assert_neq(rc, 0, "%s: exit 0\n%s", cmd, o);
        cr_assert(strstr(o, bad[i].want), "%s: want '%s' in\n%s", cmd, bad[i].want, o);
        char mfile[64];
        snprintf(mfile, sizeof mfile, "m%zu/model.ctrbox", i);
        cr_assert(!th_file_exists(th_path(mfile)), "%s wrote a model", cmd);
        free(o);
    }
    char *o;
    cr_assert_neq(th_run(&o, MPIRUN "2 $B/ctrbox export-serving --model m0 --out x.bundle"), 0);
    cr_assert(strstr(o, "under mpirun only train, eval and predict run on several processes"), "%s", o);
    free(o);
    th_write_str(th_path("s.tsv"), "1\t0.9\n0\t0.2\n");
    cr_assert_neq(th_run(&o, MPIRUN "2 $B/ctrbox eval --scores s.tsv"), 0);
    cr_assert(strstr(o, "--scores runs as one process"), "%s", o);
    free(o);
}

/* Model folder MDIR's predictions on va.tsv (one thread) into NAME.pred, and the rows of TABLE (a
 * model or table folder) with their optimizer state, sorted, into NAME.sorted: what two runs are compared by. */
static void outputs_of(const char *mdir, const char *table, const char *name)
{
    cr_assert_eq(th_run(NULL, "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $B/ctrbox predict --model %s --data va.tsv --out %s.pred && "
                              "$B/ctrbox-table export %s --to text %s.txt --with-optimizer && sort %s.txt > %s.sorted",
                        mdir, name, table, name, name, name),
                 0, "%s: predict or export failed", mdir);
}

static long long shard_commits(const char *dir);
/* Start `job` (a shell command writing a sharded folder `dir`, its model into `out`) in the
 * background, kill -9 one of its ranks once the job has made `at` commits, and wait for mpirun to
 * end the job; the commits it reached. `out` names this test's job among all (tests run at once).
 * One shell finds the rank first (the binary ctrbox, run again by itself: not mpirun's, whose
 * command line names the same options, in this test's folder: another suite on the machine runs
 * the same commands elsewhere), then reads the commit count (SHARDS.ctrbox's, at byte 24) every
 * 2 ms and kills at once: a job's commits come tens of milliseconds apart, and a kill that lagged
 * behind them (a process started per poll, then the search) landed after the last one. */
static long long kill_a_rank_at(const char *job, const char *dir, const char *out, long long at)
{
    char cmd[3072];
    cr_assert_eq(th_run(NULL, "rm -f job.rc"), 0);
    snprintf(cmd, sizeof cmd, "(%s > job.log 2>&1; echo $? > job.rc) > /dev/null 2>&1 & true", job);
    cr_assert_eq(th_run(NULL, "%s", cmd), 0);
    char *o;
    cr_assert_eq(th_run(&o, "rank=; for i in $(seq 3000); do [ -f job.rc ] && break; "
                            "for p in $(pgrep -f -- '--out %s'); do case $(readlink /proc/$p/exe) in */ctrbox) "
                            "[ \"$(readlink /proc/$p/cwd)\" = \"$(pwd -P)\" ] && rank=$p;; esac; done; "
                            "[ -n \"$rank\" ] && break; sleep 0.01; done; "
                            "while [ ! -f job.rc ]; do c=$(od -An -t u8 -j 24 -N 8 %s/SHARDS.ctrbox 2>/dev/null); "
                            "[ \"${c:-0}\" -ge %lld ] 2>/dev/null && break; sleep 0.002; done; "
                            "[ -f job.rc ] && { echo ended; exit 0; }; kill -9 $rank; "
                            "for i in $(seq 600); do [ -f job.rc ] && break; sleep 0.05; done; cat job.rc",
                        out, dir, at),
                 0, "%s", o);
    cr_assert(strncmp(o, "ended", 5), "the job ended before its kill at commit %lld", at);
    cr_assert_neq(atoi(o), 0, "the job survived the kill of a rank:\n%s", o);
    free(o);
    return shard_commits(dir);
}


/* Shrink in lanes: every owner deletes the keys the accessor's rules doom at each epoch's end;
 * the model file (its deletion record too) is the same for 1, 2 and 3 processes and one plain
 * process; with a table folder per rank the deletions are the job's commits and the model is the
 * in-memory one, also after kill -9 of a rank just after the first epoch's shrink and --resume. */
Test(mpi, shrink_deletes_the_same_keys_on_any_number_of_processes)
{
    need_mpirun();
    gen();
    const char *base = "$B/ctrbox train --format criteo --train tr.tsv --threads 1 --model fm --dim 4 --batch 256 "
                       "--epochs 3 --shuffle-rows 700 --lanes 4 --shrink-threshold 1.5 --shrink-unseen 3 --decay 0.8 %s %s";
    char *want = run_ok(base, "", "--out mem");
    const char *at = strstr(want, "shrink: ");
    cr_assert(at && atol(at + 8) > 0, "no keys deleted:\n%s", want);
    long first = atol(at + 8);
    char f[512], out[32], mfile[48];
    for (int np = 1; np <= 3; np++) {
        snprintf(f, sizeof f, MPIRUN "%d %s", np, base);
        snprintf(out, sizeof out, "--out np%d", np);
        char *o = run_ok(f, "", out);
        at = strstr(o, "shrink: ");
        cr_assert(at && atol(at + 8) == first, "%d processes: %s", np, o);
        free(o);
        snprintf(mfile, sizeof mfile, "np%d/model.ctrbox", np);
        th_same_file("mem/model.ctrbox", mfile);
    }
    free(want);
    snprintf(f, sizeof f, MPIRUN "2 %s", base);
    free(run_ok(f, "--table-dir t2 --cache-mb 0.05", "--out tier2 --quiet"));
    cr_assert_eq(shard_commits("t2"), 3 * 14, "13 buffers and the shrink an epoch");
    outputs_of("mem", "mem", "mem");
    outputs_of("tier2", "t2", "tier2");
    th_same_file("mem.pred", "tier2.pred");
    th_same_file("mem.sorted", "tier2.sorted");
    /* killed just after the first epoch's shrink (commit 14), resumed */
    char full[2048];
    snprintf(full, sizeof full, f, "--table-dir cut --cache-mb 0.05", "--out out_shrink --quiet");
    long long cut = kill_a_rank_at(full, "cut", "out_shrink", 14);
    cr_assert(cut >= 14 && cut < 3 * 14, "killed at commit %lld", cut);
    free(run_ok(f, "--resume cut --cache-mb 0.05", "--out out_shrink --quiet"));
    outputs_of("out_shrink", "cut", "cut");
    th_same_file("mem.pred", "cut.pred");
    th_same_file("mem.sorted", "cut.sorted");
}

/* Every valid_auc of a model folder's log.jsonl, in order, as one string. */
static char *log_aucs(const char *dir)
{
    char p[256];
    snprintf(p, sizeof p, "%s/log.jsonl", dir);
    char *s = th_read(th_path(p), NULL), *q = s, *out = calloc(1, 1);
    size_t n = 0;
    while ((q = strstr(q, "\"valid_auc\": "))) {
        q += 13;
        size_t k = strcspn(q, ",}");
        out = realloc(out, n + k + 2);
        memcpy(out + n, q, k);
        n += k;
        out[n++] = ' ';
        out[n] = 0;
    }
    free(s);
    return out;
}

/* --eval-every with a table folder per rank at a tiny budget: the evaluations in the middle of a
 * pass load the validation rows without evicting the pass's, so every evaluation is the in-memory
 * run's and the folder ends with its rows. */
Test(mpi, evaluations_in_a_pass_leave_the_tiered_rows_alone)
{
    need_mpirun();
    gen();
    const char *base = "$B/ctrbox train --format criteo --train tr.tsv --valid va.tsv --threads 1 --quiet --model deepfm "
                       "--dim 4 --hidden 16 --batch 256 --epochs 2 --shuffle-rows 700 --lanes 4 --eval-every 5 %s %s";
    free(run_ok(base, "", "--out mem"));
    char f[512];
    snprintf(f, sizeof f, "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 " MPIRUN "2 %s", base);
    free(run_ok(f, "--table-dir t2 --cache-mb 0.05", "--out tier2"));
    char *a = log_aucs("mem"), *b = log_aucs("tier2");
    cr_assert(strlen(a) > 100, "few evaluations: %s", a);
    cr_assert_str_eq(a, b, "in memory: %s\ntiered on 2 processes: %s", a, b);
    free(a), free(b);
    free(run_ok(base, "--table-dir t1 --cache-mb 0.05", "--out tier1"));
    cr_assert_eq(th_run(NULL, "for x in t1 t2; do $B/ctrbox-table export $x --to text $x.txt --with-optimizer && "
                              "sort $x.txt > $x.sorted || exit 1; done"), 0);
    th_same_file("t1.sorted", "t2.sorted");
}

/* --init into a table folder per rank: each rank keeps the warm start's rows it owns in front of
 * its tier; the model is the in-memory warm start's, also after kill -9 of a rank and the same
 * command again, as in one process (the ranks go on from the folder's commit, not from the model
 * file again). */
Test(mpi, a_warm_start_into_a_table_folder)
{
    need_mpirun();
    gen();
    const char *base = "$B/ctrbox train --format criteo --train tr.tsv --threads 1 --quiet --model deepfm --dim 4 "
                       "--hidden 16 --batch 256 --shuffle-rows 700 --lanes 4 %s %s";
    free(run_ok(base, "--epochs 1", "--out first"));
    char f[512];
    snprintf(f, sizeof f, MPIRUN "2 %s", base);
    free(run_ok(f, "--epochs 2 --init first", "--out mem"));
    free(run_ok(f, "--epochs 2 --init first --table-dir w2 --cache-mb 0.05", "--out tier2"));
    outputs_of("mem", "mem", "mem");
    outputs_of("tier2", "w2", "tier2");
    th_same_file("mem.pred", "tier2.pred");
    th_same_file("mem.sorted", "tier2.sorted");
    char full[2048];
    snprintf(full, sizeof full, f, "--epochs 2 --init first --table-dir cut --cache-mb 0.05", "--out out_warm");
    long long at = kill_a_rank_at(full, "cut", "out_warm", 5);
    cr_assert(at >= 5 && at < 26, "killed at commit %lld", at);
    free(run_ok(f, "--epochs 2 --init first --table-dir cut --cache-mb 0.05", "--out out_warm"));   /* the same command */
    outputs_of("out_warm", "cut", "cut");
    th_same_file("mem.pred", "cut.pred");
    th_same_file("mem.sorted", "cut.sorted");
}

/* Training that diverges stops every rank at the same step; the job says so once, writes no model. */
Test(mpi, divergence_is_said_once)
{
    need_mpirun();
    gen();
    char *o;
    int rc = th_run(&o, MPIRUN "2 $B/ctrbox train --model deepfm --dim 4 --hidden 8 --format criteo --train tr.tsv "
                    "--quiet --out div --lr 100 --sparse-lr 100 --dense-opt sgd --sparse-opt sgd");
    cr_assert_neq(rc, 0, "%s", o);
    char *at = strstr(o, "training diverged");
    cr_assert(at && !strstr(at + 1, "training diverged"), "want one divergence line in\n%s", o);
    cr_assert(!th_file_exists(th_path("div/model.ctrbox")));
    free(o);
}

/* A warm start (--init) on 1, 2 and 3 processes goes on from a model trained in passes of
 * --pass-rows rows: the same model file as one plain process's, its pass clock counting on. */
Test(mpi, warm_start_and_pass_rows_do_not_depend_on_the_number_of_processes)
{
    need_mpirun();
    gen();
    const char *base = "$B/ctrbox train --format criteo --valid va.tsv --threads 1 --quiet --model fm --dim 4 --batch 256 "
                       "--epochs 1 --lanes 6 %s %s";
    free(run_ok(base, "--train tr.tsv --pass-rows 2000", "--out day1"));
    free(run_ok(base, "--train va.tsv --init day1 --pass-rows 1000", "--out plain"));
    char *o = run_ok("$B/ctrbox info %s%s", "plain", "");
    cr_assert(strstr(o, "8 passes"), "5 passes of 2000 rows, then 3 of 1000:\n%s", o);
    free(o);
    for (int np = 1; np <= 3; np++) {
        char f[512], out[32], mfile[48];
        snprintf(f, sizeof f, MPIRUN "%d %s", np, base);
        snprintf(out, sizeof out, "--out np%d", np);
        snprintf(mfile, sizeof mfile, "np%d/model.ctrbox", np);
        free(run_ok(f, "--train va.tsv --init day1 --pass-rows 1000", out));
        th_same_file("plain/model.ctrbox", mfile);
    }
}

/* The job's commit count in a sharded table folder's record (docs/formats.md), or -1. */
static long long shard_commits(const char *dir)
{
    char p[256];
    snprintf(p, sizeof p, "%s/SHARDS.ctrbox", dir);
    FILE *f = fopen(th_path(p), "rb");
    if (!f) return -1;
    uint8_t r[40];
    long long c = -1;
    if (fread(r, 1, sizeof r, f) == sizeof r) {
        uint64_t v;
        memcpy(&v, r + 24, 8);
        c = (long long)v;
    }
    fclose(f);
    return c;
}

/* Rows in SSD tiers, one per rank, at a budget of a few rows: the model of the run in memory (its
 * predictions, serving bundle and rows), for 1 and 2 processes; then kill -9 of one rank after some commits (the job ends), and the same
 * command with --resume ends with the uninterrupted run's model, at several kill points. */
Test(mpi, sharded_tier_gives_the_in_memory_model_and_resumes_after_a_kill)
{
    need_mpirun();
    gen();
    const char *base = "$B/ctrbox train --format criteo --train tr.tsv --valid va.tsv --threads 1 --quiet --model deepfm "
                       "--dim 4 --hidden 16 --batch 256 --epochs 3 --shuffle-rows 700 --lanes 4 %s %s";
    free(run_ok(base, "", "--out mem"));
    char f[512];
    snprintf(f, sizeof f, MPIRUN "2 %s", base);
    free(run_ok(f, "--table-dir t2 --cache-mb 0.05", "--out tier2"));
    free(run_ok(base, "--table-dir t1 --cache-mb 0.05", "--out tier1"));
    cr_assert_eq(shard_commits("t2"), 3 * 13, "one commit per shuffle buffer: 13 of 700 rows an epoch");
    /* the tiered models name their folders (the rows stay there: the file is a fraction of the
     * in-memory model's); eval, predict and export-serving read the sharded folder as one table and
     * give the in-memory model's predictions and serving bundle, byte for byte */
    struct stat sm, st;
    cr_assert(stat(th_path("mem/model.ctrbox"), &sm) == 0 && stat(th_path("tier2/model.ctrbox"), &st) == 0);
    long long mem_bytes = sm.st_size, tier_bytes = st.st_size;
    cr_assert(tier_bytes > 0 && tier_bytes * 4 < mem_bytes, "model files: %lld bytes tiered, %lld in memory", tier_bytes,
              mem_bytes);
    cr_assert_eq(th_run(NULL, "for x in mem tier2 tier1; do OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $B/ctrbox predict "
                              "--model $x --data va.tsv --out $x.pred && $B/ctrbox export-serving --model $x --out $x.bundle "
                              "|| exit 1; done"), 0);
    th_same_file("mem.pred", "tier2.pred");
    th_same_file("mem.pred", "tier1.pred");
    th_same_bundle("mem.bundle", "tier2.bundle");   /* but for the folder tier2.bundle names */
    /* predict under mpirun: each rank reads its share and its rows from the sharded folder */
    cr_assert_eq(th_run(NULL, "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 " MPIRUN "2 $B/ctrbox predict --model tier2 "
                              "--data va.tsv --out tier2np.pred"), 0);
    th_same_file("mem.pred", "tier2np.pred");
    /* ctrbox-table reads a sharded folder as one table, given itself or the model naming it: its rows
     * (optimizer state included), sorted, are those of the one-process folder and of the in-memory
     * model file; tools that write refuse it */
    cr_assert_eq(th_run(NULL, "for x in t2 t1 tier2 mem; do $B/ctrbox-table export $x --to text $x.txt --with-optimizer && "
                              "sort $x.txt > $x.sorted || exit 1; done"), 0);
    th_same_file("t2.sorted", "t1.sorted");
    th_same_file("t2.sorted", "tier2.sorted");
    th_same_file("t2.sorted", "mem.sorted");
    char *o;
    /* one process cannot train on in it: said in one line */
    cr_assert_neq(th_run(&o, "$B/ctrbox train --format criteo --train tr.tsv --quiet --model deepfm --dim 4 --hidden 16 "
                             "--init tier2 --table-dir t2 --out warm"), 0);
    cr_assert(strstr(o, "sharded over 2 processes") && strstr(o, "mpirun -np 2"), "%s", o);
    free(o);
    cr_assert_eq(th_run(&o, "$B/ctrbox-table export t2 --to npy t2npy && ls t2npy"), 0, "%s", o);
    cr_assert(strstr(o, "keys.npy") && strstr(o, "values.npy"), "%s", o);
    free(o);
    /* as npy, sorted by key: the one-process folder's and the in-memory model's export, bit for bit */
    cr_assert_eq(th_run(NULL, "$B/ctrbox-table export t1 --to npy t1npy && $B/ctrbox-table export mem --to npy memnpy"), 0);
    cr_assert_eq(th_run(&o, "/usr/bin/python3 -c 'import numpy as np, sys\n"
                            "def rows(d):\n"
                            "    k = np.load(d + \"/keys.npy\"); v = np.load(d + \"/values.npy\"); o = np.argsort(k, kind=\"stable\")\n"
                            "    return k[o], v[o]\n"
                            "k2, v2 = rows(\"t2npy\")\n"
                            "for d in (\"t1npy\", \"memnpy\"):\n"
                            "    k, v = rows(d)\n"
                            "    if len(k2) < 1000 or not (np.array_equal(k, k2) and v.tobytes() == v2.tobytes()): sys.exit(d + \" differs\")\n'"),
                 0, "%s", o);
    free(o);
    cr_assert_neq(th_run(&o, "$B/ctrbox-table shrink t2 --unseen 1"), 0);
    cr_assert(strstr(o, "sharded over 2 processes"), "%s", o);
    free(o);
    /* kill -9 one rank mid-run: mpirun ends the job; --resume goes on from the job's last commit */
    static const int kill_at[] = { 2, 17 };
    for (size_t i = 0; i < sizeof kill_at / sizeof *kill_at; i++) {
        cr_assert_eq(th_run(NULL, "rm -rf cut out_cut cut.pred cut.txt cut.sorted"), 0);
        char full[2048];
        snprintf(full, sizeof full, f, "--table-dir cut --cache-mb 0.05", "--out out_cut");
        long long at = kill_a_rank_at(full, "cut", "out_cut", kill_at[i]);
        cr_assert(at >= kill_at[i] && at < 3 * 13, "killed at commit %lld", at);
        free(run_ok(f, "--resume cut --cache-mb 0.05", "--out out_cut"));
        cr_assert_eq(th_run(NULL, "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $B/ctrbox predict --model out_cut --data va.tsv "
                                  "--out cut.pred && $B/ctrbox-table export cut --to text cut.txt --with-optimizer && "
                                  "sort cut.txt > cut.sorted"), 0);
        th_same_file("mem.pred", "cut.pred");
        th_same_file("t2.sorted", "cut.sorted");
        cr_assert_eq(shard_commits("cut"), 3 * 13, "killed at commit %lld, resumed to %lld", at, shard_commits("cut"));
        cr_assert_eq(th_run(NULL, "rm -f job.rc job.log"), 0);
    }
}

/* The keys pending admission in table 0 of a model folder, sorted: *n entries (key, show, click). */
typedef struct {
    uint64_t key;
    float show, click;
} pending_key;
static int cmp_pending_key(const void *a, const void *b)
{
    uint64_t x = ((const pending_key *)a)->key, y = ((const pending_key *)b)->key;
    return (x > y) - (x < y);
}
static pending_key *pending_of(const char *dir, size_t *n)
{
    model *m;
    model_meta meta;
    char err[1024];
    cr_assert_eq(modelfile_load(th_path(dir), &m, &meta, err, sizeof err), 0, "%s: %s", dir, err);
    uint64_t *k;
    float *c;
    *n = emb_table_pending_entries(model_table(m, 0), &k, &c);
    pending_key *p = malloc((*n + 1) * sizeof *p);
    for (size_t i = 0; i < *n; i++) p[i] = (pending_key){ k[i], c[2 * i], c[2 * i + 1] };
    qsort(p, *n, sizeof *p, cmp_pending_key);
    free(k), free(c);
    model_destroy(m);
    model_meta_free(&meta);
    return p;
}

/* Admission (--min-show) in lanes: the owners decide from the shows every rank's lanes gave a key
 * in a step (exact counts), so the model file is the same for 1, 2 and 3 processes and one plain
 * process; the keys still pending, with their counts, are those one process without lanes leaves;
 * with a table folder per rank at a tiny budget the model is the in-memory one, also after kill -9
 * of a rank and --resume (each rank's pending keys are in its commits); a warm start goes on with
 * the pending keys on any number of processes. */
Test(mpi, admission_does_not_depend_on_the_number_of_processes)
{
    need_mpirun();
    gen();
    const char *base = "$B/ctrbox train --format criteo --train tr.tsv --threads 1 --quiet --model deepfm --dim 4 "
                       "--hidden 8 --batch 256 --epochs 2 --shuffle-rows 700 --lanes 4 --min-show 3 %s %s";
    free(run_ok(base, "", "--out mem"));
    char f[512], out[32], mfile[48];
    for (int np = 1; np <= 3; np++) {
        snprintf(f, sizeof f, MPIRUN "%d %s", np, base);
        snprintf(out, sizeof out, "--out np%d", np);
        free(run_ok(f, "", out));
        snprintf(mfile, sizeof mfile, "np%d/model.ctrbox", np);
        th_same_file("mem/model.ctrbox", mfile);
    }
    free(run_ok("$B/ctrbox train --format criteo --train tr.tsv --threads 1 --quiet --model deepfm --dim 4 --hidden 8 "
                "--batch 256 --epochs 2 --shuffle-rows 700 --min-show 3 --admit-mb 0 %s %s", "", "--out one"));
    size_t na, nb;
    pending_key *a = pending_of("mem", &na), *b = pending_of("one", &nb);
    cr_assert(na > 1000, "%zu keys pending", na);
    cr_assert_eq(na, nb, "%zu keys pending in lanes, %zu in one process", na, nb);
    for (size_t i = 0; i < na; i++)
        cr_assert(a[i].key == b[i].key && a[i].show == b[i].show && a[i].click == b[i].click,
                  "pending key %zu: %llu (%g, %g) in lanes, %llu (%g, %g) in one process", i, (unsigned long long)a[i].key,
                  a[i].show, a[i].click, (unsigned long long)b[i].key, b[i].show, b[i].click);
    free(a), free(b);
    /* sharded at a tiny budget; killed mid-run and resumed */
    outputs_of("mem", "mem", "mem");
    snprintf(f, sizeof f, MPIRUN "2 %s", base);
    free(run_ok(f, "--table-dir t2 --cache-mb 0.05", "--out tier2"));
    outputs_of("tier2", "t2", "tier2");
    th_same_file("mem.pred", "tier2.pred");
    th_same_file("mem.sorted", "tier2.sorted");
    char full[2048];
    snprintf(full, sizeof full, f, "--table-dir cut --cache-mb 0.05", "--out out_admit");
    long long at = kill_a_rank_at(full, "cut", "out_admit", 9);
    cr_assert(at >= 9 && at < 26, "killed at commit %lld", at);
    free(run_ok(f, "--resume cut --cache-mb 0.05", "--out out_admit"));
    outputs_of("out_admit", "cut", "cut");
    th_same_file("mem.pred", "cut.pred");
    th_same_file("mem.sorted", "cut.sorted");
    /* a warm start: the owners take the model's pending keys */
    const char *warm = "$B/ctrbox train --format criteo --train va.tsv --threads 1 --quiet --model deepfm --dim 4 --hidden 8 "
                       "--batch 256 --epochs 1 --lanes 4 --min-show 3 --init mem %s %s";
    free(run_ok(warm, "", "--out w0"));
    snprintf(f, sizeof f, MPIRUN "3 %s", warm);
    free(run_ok(f, "", "--out w3"));
    th_same_file("w0/model.ctrbox", "w3/model.ctrbox");
    pending_key *w = pending_of("w0", &nb);
    a = pending_of("mem", &na);
    size_t kept = 0;   /* keys pending before and after: their counts went on */
    for (size_t i = 0, j = 0; i < na && j < nb;) {
        if (a[i].key < w[j].key) i++;
        else if (a[i].key > w[j].key) j++;
        else {
            cr_assert(w[j].show >= a[i].show, "key %llu: %g shows, then %g", (unsigned long long)a[i].key, a[i].show, w[j].show);
            kept++, i++, j++;
        }
    }
    cr_assert(kept > 100, "%zu keys pending before and after the warm start", kept);
    free(a), free(w);
    /* a model counting them in a sketch cannot go on in lanes */
    free(run_ok("$B/ctrbox train --format criteo --train va.tsv --threads 1 --quiet --model deepfm --dim 4 --hidden 8 "
                "--batch 256 --epochs 1 --min-show 3 %s %s", "", "--out sk"));
    char *o;
    cr_assert_neq(th_run(&o, MPIRUN "2 $B/ctrbox train --format criteo --train va.tsv --threads 1 --quiet --model deepfm "
                             "--dim 4 --hidden 8 --batch 256 --epochs 1 --min-show 3 --init sk --out wsk"), 0, "%s", o);
    cr_assert(strstr(o, "--init sk counts the shows of keys not yet admitted in a sketch (--admit-mb 16)"), "%s", o);
    cr_assert(!th_file_exists(th_path("wsk/model.ctrbox")), "a model was written");
    free(o);
}

/* MLP layers placed on a device (the simulated one: CTRBOX_GPU_SIM=1) in lanes: the lanes' summed
 * gradients reach the placed layers' optimizer step, and every rank places as rank 0 planned, so
 * the model file is the CPU's for one plain process and for 2 and 3 processes. */
Test(mpi, placed_layers_give_the_cpu_model)
{
    need_mpirun();
    gen();
    const char *base = "$B/ctrbox train --format criteo --train tr.tsv --threads 1 --quiet --lanes 6 --model deepfm --dim 4 "
                       "--hidden 16,8 --batchnorm --dropout 0.1 --batch 300 --epochs 2 --shuffle-rows 2000 --min-show 2 %s %s";
    free(run_ok(base, "", "--out cpu"));
    static const char *const places[] = { "--placement gpu", "--placement fc1=gpu,head=gpu", "--placement auto" };
    char f[512], out[32], mfile[48];
    for (size_t i = 0; i < 3; i++) {
        snprintf(f, sizeof f, "CTRBOX_GPU_SIM=1 %s", base);
        snprintf(out, sizeof out, "--out p%zu", i);
        free(run_ok(f, places[i], out));
        snprintf(mfile, sizeof mfile, "p%zu/model.ctrbox", i);
        th_same_file("cpu/model.ctrbox", mfile);
        for (int np = 2; np <= 3; np++) {
            snprintf(f, sizeof f, MPIRUN "%d -x CTRBOX_GPU_SIM=1 %s", np, base);
            snprintf(out, sizeof out, "--out p%zu_%d", i, np);
            free(run_ok(f, places[i], out));
            snprintf(mfile, sizeof mfile, "p%zu_%d/model.ctrbox", i, np);
            th_same_file("cpu/model.ctrbox", mfile);
        }
    }
}

/* The next day's job on a sharded folder: --init of a model whose rows are in a table folder per
 * rank trains on in that folder (as one process trains on in its own), from the model's commit: the
 * model is the one the same two days give in memory, also when the second day is killed and run
 * again; another number of processes, another --table-dir and one process's folder are refused. */
Test(mpi, the_next_day_trains_on_in_the_sharded_folder)
{
    need_mpirun();
    gen();
    const char *day = "$B/ctrbox train --format criteo --threads 1 --quiet --lanes 4 --model deepfm --dim 4 --hidden 8 "
                      "--batch 256 --shuffle-rows 700 --min-show 2 --cache-mb 0.05 %s %s";
    free(run_ok(day, "--train tr.tsv --epochs 1", "--out mem1"));
    free(run_ok(day, "--train va.tsv --epochs 2 --init mem1", "--out mem2"));
    char f[512];
    snprintf(f, sizeof f, MPIRUN "2 %s", day);
    free(run_ok(f, "--train tr.tsv --epochs 1 --table-dir td", "--out t1"));
    cr_assert_eq(shard_commits("td"), 13);
    free(run_ok(f, "--train va.tsv --epochs 2 --init t1", "--out t2"));
    cr_assert_eq(shard_commits("td"), 13 + 10);
    outputs_of("mem2", "mem2", "mem2");
    outputs_of("t2", "td", "t2");
    th_same_file("mem2.pred", "t2.pred");
    th_same_file("mem2.sorted", "t2.sorted");
    /* the second day killed after 4 of its commits, then the same command again */
    free(run_ok(f, "--train tr.tsv --epochs 1 --table-dir tk", "--out k1"));
    char full[2048];
    snprintf(full, sizeof full, f, "--train va.tsv --epochs 2 --init k1", "--out k2");
    long long at = kill_a_rank_at(full, "tk", "k2", 13 + 4);
    cr_assert(at >= 13 + 4 && at < 13 + 10, "killed at commit %lld", at);
    free(run_ok(f, "--train va.tsv --epochs 2 --init k1", "--out k2"));
    outputs_of("k2", "tk", "k2");
    th_same_file("mem2.pred", "k2.pred");
    th_same_file("mem2.sorted", "k2.sorted");
    /* refused, with nothing written */
    static const struct {
        int np;
        const char *args, *want;
    } bad[] = {
        { 3, "--train va.tsv --init t2", "sharded for 2 processes in 4 lanes; train on it with mpirun -np 2 and --lanes 4" },
        { 2, "--train va.tsv --init t2 --table-dir other", "train on in that folder (give it as --table-dir, or no --table-dir)" },
        { 2, "--train va.tsv --init one", "a table folder of one process" },
    };
    free(run_ok("$B/ctrbox train --format criteo --threads 1 --quiet --model deepfm --dim 4 --hidden 8 --batch 256 "
                "--pass-rows 3000 --min-show 2 --admit-mb 0 --train va.tsv --table-dir tone %s %s", "", "--out one"));
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *o, cmd[1024], more[600];
        snprintf(more, sizeof more, "%s --out bad%zu", bad[i].args, i);
        snprintf(f, sizeof f, MPIRUN "%d %s", bad[i].np, day);
        snprintf(cmd, sizeof cmd, f, more, "");
        cr_assert_neq(th_run(&o, "%s", cmd), 0, "%s: exit 0\n%s", cmd, o);
        cr_assert(strstr(o, bad[i].want), "%s: want '%s' in\n%s", cmd, bad[i].want, o);
        free(o);
        snprintf(more, sizeof more, "bad%zu/model.ctrbox", i);
        cr_assert(!th_file_exists(th_path(more)), "%s wrote a model", cmd);
    }
    cr_assert(!th_file_exists(th_path("other")) && !th_file_exists(th_path("tone/rank-0")), "a refused job made folders");
}
