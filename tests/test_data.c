/*
 * test_data.c: the data tool end to end: every real data family reads with the row and positive
 * counts of its PROVENANCE (skipped without ../shared/data); bad lines are counted, reported as
 * file:line and stop the run past --max-bad-ratio with nothing written; inspect and split.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

TestSuite(data, .fini = th_cleanup);

static json_t *inspect_json(const char *args)
{
    char *out;
    int rc = th_run(&out, "$B/ctrbox-data inspect --json %s", args);
    cr_assert_eq(rc, 0, "inspect %s: %s", args, out);
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    cr_assert_not_null(j, "inspect %s printed no JSON: %s", args, out);
    free(out);
    return j;
}

static long long jint(json_t *o, const char *key) { return (long long)json_integer_value(json_object_get(o, key)); }

typedef struct {
    const char *args;   /* relative to the data folder */
    long long rows, positives, fields;
} real_case;

Test(data, real_data_families)
{
    const char *d = th_shared_data();
    if (!d) cr_skip_test("../shared/data is absent");
    const char *frappe_offs = "0,957,5039,5046,5053,5055,5058,5060,5069,5149";
    char buf[16][512];
    real_case cases[] = {
        { "--format libsvm --field-offsets %s %s/frappe/train_reconstructed.libsvm", 202027, 67604, 10 },
        { "--format libsvm --field-offsets %s %s/frappe/valid.libsvm", 57722, 19063, 10 },
        { "--format libsvm --field-offsets %s %s/frappe/test.libsvm", 28860, 9536, 10 },
        { "--format libsvm --field-offsets %s %s/frappe/frappe.validation.libfm", 57722, 19063, 10 },
        { "--format libsvm --field-offsets %s %s/frappe/frappe.test.libfm", 28860, 9536, 10 },
        { "--format csv %.0s%s/frappe/train_reconstructed.csv", 202027, 67604, 10 },
        { "--format csv %.0s%s/frappe/valid.csv", 57722, 19063, 10 },
        { "--format csv %.0s%s/frappe/test.csv", 28860, 9536, 10 },
        { "--format libsvm %.0s%s/ipinyou_sample/train.fm.txt", 26773, 255, 1 },
        { "--format libsvm %.0s%s/ipinyou_sample/test.fm.txt", 21150, 50, 1 },
        { "--format csv --schema I1-I13:num %.0s%s/criteo_samples/deepctr_criteo_sample.txt", 200, 49, 39 },
        { "--format csv --schema Id:skip,I1-I13:num --num bucket %.0s%s/criteo_samples/3idiots_train.tiny.csv", 1999, 418, 39 },
        { "--format csv --schema id:skip %.0s%s/avazu_sample/deepctr_avazu_sample.txt", 100, 20, 22 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(buf[i], sizeof buf[i], cases[i].args, frappe_offs, d);
        json_t *j = inspect_json(buf[i]);
        cr_assert_eq(jint(j, "rows"), cases[i].rows, "%s: rows %lld", buf[i], jint(j, "rows"));
        cr_assert_eq(jint(j, "positives"), cases[i].positives, "%s: positives", buf[i]);
        cr_assert_eq(jint(j, "n_fields"), cases[i].fields, "%s: fields", buf[i]);
        json_t *bad = json_object_get(j, "bad_lines");
        const char *k;
        json_t *v;
        json_object_foreach(bad, k, v) cr_assert_eq(json_integer_value(v), 0, "%s: bad %s", buf[i], k);
        json_decref(j);
    }
    /* frappe's fields have the sizes PROVENANCE lists (user 957, item 4082, ..., city 233) */
    snprintf(buf[0], sizeof buf[0], "--format libsvm --field-offsets %s %s/frappe/train_reconstructed.libsvm %s/frappe/valid.libsvm %s/frappe/test.libsvm", frappe_offs, d, d, d);
    json_t *j = inspect_json(buf[0]);
    long long want[] = { 957, 4082, 7, 7, 2, 3, 2, 9, 80, 233 };
    json_t *fields = json_object_get(j, "fields");
    for (int f = 0; f < 10; f++)
        cr_assert_eq(jint(json_array_get(fields, (size_t)f), "distinct"), want[f], "field %d", f);
    cr_assert_eq(jint(j, "rows"), 202027 + 57722 + 28860);
    json_decref(j);
}

Test(data, bad_lines_counted_reported_and_limited)
{
    th_write_str(th_path("in.txt"), "1 1:1\n1 2:x\n7 3:1\n1 4:1\n0 5\n1 6:1\n");
    char *out;
    /* over the default ratio: stops, says why, writes nothing */
    cr_assert_neq(th_run(&out, "$B/ctrbox-data convert --format libsvm --in in.txt --out o.cbx"), 0);
    cr_assert(strstr(out, "in.txt:2: not a number"), "%s", out);
    cr_assert(strstr(out, "in.txt:3: bad label"), "%s", out);
    cr_assert(strstr(out, "in.txt:5: malformed feature"), "%s", out);
    cr_assert(strstr(out, "--max-bad-ratio"), "%s", out);
    cr_assert(!th_file_exists(th_path("o.cbx")), "nothing written");
    free(out);
    th_run(&out, "ls -A");
    cr_assert_str_eq(out, "in.txt\n", "no temporary file left: %s", out);
    free(out);
    /* under a raised limit: written, counted by reason */
    cr_assert_eq(th_run(&out, "$B/ctrbox-data convert --format libsvm --max-bad-ratio 0.5 --in in.txt --out o.cbx"), 0, "%s", out);
    free(out);
    json_t *j = inspect_json("o.cbx");
    cr_assert_eq(jint(j, "rows"), 3);
    cr_assert_eq(jint(j, "lines"), 6);
    json_t *bad = json_object_get(j, "bad_lines");
    cr_assert_eq(jint(bad, "number"), 1);
    cr_assert_eq(jint(bad, "label"), 1);
    cr_assert_eq(jint(bad, "feature"), 1);
    json_decref(j);
    /* an existing output survives a failed run */
    th_write_str(th_path("keep.cbx"), "precious");
    cr_assert_neq(th_run(NULL, "$B/ctrbox-data convert --format libsvm --in in.txt --out keep.cbx"), 0);
    char *k = th_read(th_path("keep.cbx"), NULL);
    cr_assert_str_eq(k, "precious");
    free(k);
}

Test(data, every_bad_kind_in_one_file_never_crashes)
{
    /* every bad kind, plus an overlong line, in criteo TSV */
    char line[2048];
    FILE *f = fopen(th_path("c.tsv"), "wb");
    const char *good = "1\t1\t2\t3\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\ta\tb\tc\td\te\tf\tg\th\ti\tj\tk\tl\tm\tn\to\tp\tq\tr\ts\tt\tu\tv\tw\tx\ty\tz";
    fprintf(f, "%s\r\n", good);
    fprintf(f, "%s\tEXTRA\n", good);
    snprintf(line, sizeof line, "%s", good);
    line[2] = 'q';
    fprintf(f, "%s\n", line);
    line[0] = '5', line[2] = '1';
    fprintf(f, "%s\n", line);
    fwrite("1\t\0\n", 1, 4, f);
    fprintf(f, "1\t\xff\xfe\n");
    for (int i = 0; i < 3000; i++) fputc('z', f);
    fputc('\n', f);
    fprintf(f, "%s", good);   /* no final newline */
    fclose(f);
    char *out;
    int rc = th_run(&out, "$B/ctrbox-data inspect --format criteo --max-line 2000 --json c.tsv");
    cr_assert_eq(rc, 0, "%s", out);
    json_t *j = json_loads(out, 0, NULL);
    cr_assert_not_null(j, "%s", out);
    cr_assert_eq(jint(j, "rows"), 2, "the CRLF line and the last line are good");
    json_t *bad = json_object_get(j, "bad_lines");
    cr_assert_eq(jint(bad, "columns"), 1);
    cr_assert_eq(jint(bad, "number"), 1);
    cr_assert_eq(jint(bad, "label"), 1);
    cr_assert_eq(jint(bad, "nul"), 1);
    cr_assert_eq(jint(bad, "utf8"), 1);
    cr_assert_eq(jint(bad, "overlong"), 1);
    json_decref(j);
    free(out);
    /* the same through gzip and zstd */
    size_t len;
    char *raw = th_read(th_path("c.tsv"), &len);
    th_write_gzip(th_path("c.gz"), raw, len);
    th_write_zstd(th_path("c.zst"), raw, len);
    free(raw);
    cr_assert_eq(th_run(&out, "$B/ctrbox-data inspect --format criteo --max-line 2000 c.gz c.zst | grep -E '^(rows|bad)'"), 0);
    cr_assert(strstr(out, "rows: 4"), "%s", out);
    cr_assert(strstr(out, "bad lines: 12 of 16"), "%s", out);
    free(out);
}

Test(data, split_is_seeded_and_complete)
{
    cr_assert_eq(th_run(NULL, "$B/ctrbox-data gen --rows 10000 --seed 2 --out g.tsv"), 0);
    char *out;
    cr_assert_eq(th_run(&out, "$B/ctrbox-data split --format criteo --ratios 8,1,1 --seed 5 --in g.tsv --out p && "
                              "$B/ctrbox-data split --format criteo --ratios 8,1,1 --seed 5 --in g.tsv --out q && "
                              "$B/ctrbox-data split --format criteo --ratios 8,1,1 --seed 6 --in g.tsv --out r && "
                              "cmp p.train q.train && cmp p.test q.test && ! cmp -s p.train r.train && "
                              "sort g.tsv > s1 && cat p.train p.valid p.test | sort > s2 && cmp s1 s2"),
                 0, "%s", out);
    free(out);
    cr_assert_eq(th_run(&out, "wc -l < p.train"), 0);
    long train = atol(out);
    cr_assert(train > 7700 && train < 8300, "8/10 of 10000 rows: %ld", train);
    free(out);
    /* cbx splits too, and csv keeps its header in each part */
    cr_assert_eq(th_run(&out, "$B/ctrbox-data convert --format criteo --in g.tsv --out g.cbx && "
                              "$B/ctrbox-data split --ratios 1,1 --seed 1 --in g.cbx --out c && "
                              "$B/ctrbox-data inspect --json c.train.cbx c.test.cbx | grep '\"rows\"'"), 0, "%s", out);
    cr_assert(strstr(out, "\"rows\": 10000"), "%s", out);
    free(out);
    th_write_str(th_path("h.csv"), "label,a\n1,x\n0,y\n1,z\n");
    cr_assert_eq(th_run(&out, "$B/ctrbox-data split --format csv --ratios 1,1 --seed 1 --in h.csv --out h && "
                              "head -1 h.train && head -1 h.test"), 0, "%s", out);
    cr_assert(strstr(out, "label,a\nlabel,a\n"), "%s", out);
    free(out);
}

/* Text split judged its lines by nothing: a bad line went to a part and counted as one of its rows,
 * and a csv split without --format sent its header to one part as a row. The parts now hold exactly
 * the lines training would take, and the bad ones are named. */
Test(data, split_leaves_bad_lines_out)
{
    /* b.tsv: g.tsv with three bad lines, at 1001 (two columns), 1002 (empty) and 2003 (g's row 2001
     * behind an extra column) */
    cr_assert_eq(th_run(NULL, "$B/ctrbox-data gen --rows 3000 --seed 3 --out g.tsv && "
                              "(head -1000 g.tsv; printf '1\\tx\\n\\n'; sed -n 1001,2000p g.tsv; printf '2\\t'; "
                              "sed -n 2001,3000p g.tsv) > b.tsv"), 0);
    char *out;
    cr_assert_eq(th_run(&out, "$B/ctrbox-data split --format criteo --max-bad-ratio 0.01 --ratios 1,1 --in b.tsv "
                              "--out p | awk '{n += $2} END {print n \" rows in the parts\"}' && "
                              "cat p.train p.test | sort > s1 && sed 2001d g.tsv | sort | cmp - s1 && echo good-lines"),
                 0, "%s", out);
    cr_assert(strstr(out, "b.tsv:1001: ") && strstr(out, "b.tsv:1002: ") && strstr(out, "b.tsv:2003: "), "%s", out);
    cr_assert(strstr(out, "bad lines: 3 of 3002") && strstr(out, "in none of the parts"), "%s", out);
    cr_assert(strstr(out, "\n2999 rows in the parts\n") && strstr(out, "good-lines"), "%s", out);
    free(out);
    /* over the limit: refused with the first bad line, and no part is written */
    cr_assert_neq(th_run(&out, "$B/ctrbox-data split --format criteo --max-bad-ratio 0.0005 --ratios 1,1 --in b.tsv --out q"), 0);
    cr_assert(strstr(out, "too many bad lines") && strstr(out, "the first: line 1001"), "%s", out);
    free(out);
    cr_assert_neq(th_run(NULL, "test -e q.train || test -e q.test"), 0, "a refused split leaves no part");
    /* csv: the header to every part, never as a row; without --format, refused */
    th_write_str(th_path("h.csv"), "label,a,b\n1,x,2\n0,y,3\n1,z,abc\n0,w,4\n");
    cr_assert_neq(th_run(&out, "$B/ctrbox-data split --ratios 1,1 --in h.csv --out h"), 0);
    cr_assert(strstr(out, "--format"), "%s", out);
    free(out);
    cr_assert_eq(th_run(&out, "$B/ctrbox-data split --format csv --schema label:label,a:cat,b:num --max-bad-ratio 0.5 "
                              "--ratios 1,1 --in h.csv --out h && head -qn1 h.train h.test && "
                              "! grep -q abc h.train h.test && cat h.train h.test | wc -l"), 0, "%s", out);
    cr_assert(strstr(out, "label,a,b\nlabel,a,b\n5\n") && strstr(out, "h.csv:4: "), "%s", out);
    free(out);
}

Test(data, folder_input_and_usage_errors)
{
    cr_assert_eq(th_run(NULL, "mkdir d && printf '1 1:1\\n' > d/a && printf '0 2:1\\n' > d/b"), 0);
    json_t *j = inspect_json("--format libsvm d");
    cr_assert_eq(jint(j, "rows"), 2);
    json_decref(j);
    char *out;
    cr_assert_neq(th_run(&out, "$B/ctrbox-data convert --format nope --in d --out x.cbx"), 0);
    cr_assert(strstr(out, "--format nope"), "%s", out);
    free(out);
    cr_assert_neq(th_run(&out, "$B/ctrbox-data inspect d/a"), 0);
    cr_assert(strstr(out, "--format"), "text input without --format is explained: %s", out);
    free(out);
    cr_assert_neq(th_run(&out, "$B/ctrbox-data inspect --format csv d/a"), 0);
    cr_assert(strstr(out, "d/a:1:"), "%s", out);
    free(out);
}
