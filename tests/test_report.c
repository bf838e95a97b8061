/*
 * test_report.c: `ctrbox report` as a browser shows it. The page is self-contained (no script, no
 * fetched resource); headless Chromium renders it to a PNG that is not blank, and the DOM it
 * builds holds every chart with its data points. Where Chromium is absent the browser checks skip
 * and say so.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

TestSuite(report, .fini = th_cleanup);

static char *run_ok(const char *cmd)
{
    char *o;
    int rc = th_run(&o, "%s", cmd);
    cr_assert_eq(rc, 0, "%s: exit %d\n%s", cmd, rc, o);
    return o;
}

/* A tiered DeepFM run with validation, and its report on test rows. */
static void make_report(void)
{
    free(run_ok("$B/ctrbox-data gen --rows 12000 --seed 3 --keys 0.002 --out tr.tsv && "
                "$B/ctrbox-data gen --rows 3000 --seed 3 --keys 0.002 --offset 12000 --out va.tsv && "
                "$B/ctrbox-data gen --rows 3000 --seed 3 --keys 0.002 --offset 15000 --out te.tsv && "
                "$B/ctrbox train --model deepfm --format criteo --train tr.tsv --valid va.tsv --out m --epochs 3 "
                "--dim 4 --hidden 16 --batch 256 --threads 1 --pass-rows 3000 --table-dir t --cache-mb 0.2 --quiet "
                "--lr-decay 0.5 && $B/ctrbox report m --data te.tsv --out r.html"));
}

static const char *charts[] = { "train-loss", "valid-auc", "valid-logloss", "lr", "speed", "roc", "pr", "calibration",
                                "histogram", "importance", "tier-hits", "tier-io", "tier-wait", "tier-memory" };
#define N_CHARTS (sizeof charts / sizeof charts[0])

/* Each chart of the page (or DOM) text is there, and each of its series holds data-points="N" > 0
 * points: N pairs in a polyline, or N dots, or N bars. */
static void check_charts(const char *html, const char *what)
{
    for (size_t c = 0; c < N_CHARTS; c++) {
        char id[64];
        snprintf(id, sizeof id, "id=\"%s\"", charts[c]);
        const char *p = strstr(html, id);
        cr_assert(p, "%s: no chart %s", what, charts[c]);
        const char *end = strstr(p, "</svg>");
        cr_assert(end, "%s: chart %s is not closed", what, charts[c]);
        int series = 0;
        for (const char *g = strstr(p, "class=\"series\""); g && g < end; g = strstr(g + 1, "class=\"series\"")) {
            const char *dp = strstr(g, "data-points=\"");
            cr_assert(dp && dp < end, "%s: %s: a series without data-points", what, charts[c]);
            long n = atol(dp + 13);
            const char *gend = strstr(g, "</g>");
            cr_assert_gt(n, 0, "%s: %s: an empty series", what, charts[c]);
            long got = 0;
            const char *pts = strstr(g, " points=\"");   /* a line: its coordinate pairs */
            if (pts && pts < gend) {
                for (const char *q = pts + 9; *q != '"'; q++) got += *q == ',';
            } else {
                for (const char *q = g; (q = strstr(q + 1, "<circle")) && q < gend;) got++;
                for (const char *q = g; (q = strstr(q + 1, "class=\"bar\"")) && q < gend;) got++;
            }
            cr_assert_eq(got, n, "%s: %s: %ld points drawn, data-points says %ld", what, charts[c], got, n);
            series++;
        }
        cr_assert_gt(series, 0, "%s: chart %s has no series", what, charts[c]);
    }
}

Test(report, is_self_contained_and_holds_every_chart)
{
    make_report();
    size_t len;
    char *html = th_read(th_path("r.html"), &len);
    cr_assert(!strstr(html, "<script") && !strstr(html, "src=") && !strstr(html, "href=") &&
                  !strstr(html, "https://") && !strstr(html, "<link"),
              "the page fetches or runs something");
    check_charts(html, "r.html");
    const char *words[] = { "Calibration</b> is the mean predicted CTR over the observed CTR", "ROC curve (AUC 0.",
                            "average precision 0.", "AUC lost", "learning rate" };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) cr_assert(strstr(html, words[i]), "no '%s'", words[i]);
    free(html);
    /* the AUC on the page is ctrbox eval's */
    char *o = run_ok("$B/ctrbox eval --model m --data te.tsv --json | sed 's/.*\"auc\": \\([0-9.]*\\).*/\\1/'");
    char want[64];
    snprintf(want, sizeof want, "AUC %.6f", atof(o));
    html = th_read(th_path("r.html"), &len);
    cr_assert(strstr(html, want), "no '%s' on the page", want);
    free(html), free(o);
    /* without test data: the run's charts, and a line saying what needs --data */
    free(run_ok("$B/ctrbox report m/model.ctrbox"));
    html = th_read(th_path("m/report.html"), &len);
    cr_assert(strstr(html, "id=\"train-loss\"") && strstr(html, "No test data given") && !strstr(html, "id=\"roc\""));
    free(html);
    /* test rows of one class: no AUC, ROC, PR or importance, and no NaN on the page */
    free(run_ok("awk -F'\t' 'BEGIN { OFS = \"\t\" } { $1 = 0; print }' te.tsv > zero.tsv && "
                "$B/ctrbox report m --data zero.tsv --out z.html"));
    html = th_read(th_path("z.html"), &len);
    cr_assert(strstr(html, "one class, so no AUC") && !strstr(html, "id=\"roc\"") && !strstr(html, "id=\"importance\"") &&
                  strstr(html, "id=\"calibration\"") && !strstr(html, "nan") && !strstr(html, "inf"),
              "%s", html);
    free(html);
}

static const char png_check[] =
    "import sys, zlib, struct\n"
    "d = open(sys.argv[1], 'rb').read()\n"
    "assert d[:8] == b'\\x89PNG\\r\\n\\x1a\\n', 'not a PNG'\n"
    "i, idat, w, h, ct = 8, b'', 0, 0, 0\n"
    "while i < len(d):\n"
    "    n, t = struct.unpack('>I4s', d[i:i + 8]); c = d[i + 8:i + 8 + n]; i += 12 + n\n"
    "    if t == b'IHDR': w, h, bd, ct = struct.unpack('>IIBB', c[:10])\n"
    "    if t == b'IDAT': idat += c\n"
    "bpp = {2: 3, 6: 4}[ct]; raw = zlib.decompress(idat); stride = w * bpp\n"
    "prev = bytearray(stride); colors = set(); dark = 0\n"
    "for y in range(h):\n"
    "    f = raw[y * (stride + 1)]; line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])\n"
    "    for x in range(stride):\n"
    "        a = line[x - bpp] if x >= bpp else 0; b = prev[x]; c = prev[x - bpp] if x >= bpp else 0\n"
    "        if f == 1: line[x] = (line[x] + a) & 255\n"
    "        elif f == 2: line[x] = (line[x] + b) & 255\n"
    "        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255\n"
    "        elif f == 4:\n"
    "            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)\n"
    "            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255\n"
    "    for x in range(0, stride, bpp * 4):\n"
    "        px = tuple(line[x:x + 3]); colors.add(px); dark += sum(px) < 600\n"
    "    prev = line\n"
    "print(w, h, len(colors), dark)\n";

Test(report, renders_in_a_browser)
{
    if (th_run(NULL, "command -v chromium >/dev/null") != 0)
        cr_skip_test("chromium is not installed (tools/install-deps.sh installs Debian's chromium): the report is not "
                     "checked in a browser here");
    make_report();
    th_write_str(th_path("png.py"), png_check);
    const char *chrome = "chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --user-data-dir=prof "
                         "--hide-scrollbars";
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "timeout 120 %s --dump-dom \"file://$PWD/r.html\" > dom.html 2>/dev/null", chrome);
    free(run_ok(cmd));
    size_t len;
    char *dom = th_read(th_path("dom.html"), &len);
    cr_assert_gt(len, 1000, "the browser built no page");
    check_charts(dom, "the browser's DOM");
    free(dom);
    snprintf(cmd, sizeof cmd, "timeout 120 %s --window-size=1200,2400 --screenshot=\"$PWD/r.png\" \"file://$PWD/r.html\" "
             ">/dev/null 2>&1; python3 png.py r.png", chrome);
    char *o = run_ok(cmd);
    int w = 0, h = 0, colors = 0, dark = 0;
    cr_assert_eq(sscanf(o, "%d %d %d %d", &w, &h, &colors, &dark), 4, "%s", o);
    cr_assert(w == 1200 && h == 2400, "%s", o);
    cr_assert_gt(colors, 8, "the page looks blank: %s", o);
    cr_assert_gt(dark, 2000, "the page has almost nothing drawn: %s", o);
    free(o);
}
