/*
 * ctrbox_data.c: the data tool. Commands:
 *   gen      write a Criteo-layout TSV from a known model (and its truth file)
 *   convert  text logs -> the binary cbx format
 *   inspect  rows, positives, CTR, fields, distinct keys per field, bad lines by reason
 *   split    seeded random split of a text or cbx file by ratios
 * Every output is written durably; on error nothing is left at the output path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../datasets/cbx.h"
#include "../datasets/fieldstats.h"
#include "../datasets/gen.h"
#include "../datasets/source.h"
#include "../io/stream.h"
#include "../src/cli.h"
#include "../src/modelfile.h"
#include "../io/util.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ctrbox-data COMMAND [options]      (ctrbox-data COMMAND --help: its options and defaults)\n"
            "  gen       a synthetic Criteo-layout data set from a known model (and its true probabilities)\n"
            "  convert   text logs (criteo, libsvm, libffm, csv) to the binary cbx format\n"
            "  inspect   rows, fields, distinct values, bad lines, label balance of data files\n"
            "  split     one file into train/valid/test files by ratios, seeded\n"
            "  key       the key of a token in a field, as ctrbox-table prints it\n"
            "  --version\n");
}

static const char gen_help[] =
    "usage: ctrbox-data gen --rows N --out FILE.tsv [options]\n"
    "rows in the Criteo layout (label, 13 integers, 26 categorical hashes) drawn from a known model\n"
    "  --rows N               (required)\n"
    "  --out FILE             (required)\n"
    "  --seed S               the model and the rows (1)\n"
    "  --truth FILE           also write label<TAB>true probability lines (ctrbox eval --scores: the best AUC)\n"
    "  --keys SCALE           distinct values per field times SCALE (1)\n"
    "  --offset ROW           start at row ROW of the same stream (0): disjoint train/valid/test files\n";
static const char convert_help[] =
    "usage: ctrbox-data convert --format F [input options] --in FILE... --out FILE.cbx\n"
    "  --in FILE              an input (repeat for several; a folder: its files in name order) (required)\n"
    "  --out FILE.cbx         (required)\n";
static const char inspect_help[] =
    "usage: ctrbox-data inspect [--format F] [input options] [--json] FILE...\n"
    "rows, label balance, per field the values and distinct count (exact up to --exact-limit, then\n"
    "estimated), bad lines; columns whose values are nearly all distinct (ids) are flagged\n"
    "  --json                 one JSON object\n"
    "  --exact-limit N        distinct values counted exactly up to N per field (1048576)\n";
static const char key_help[] =
    "usage: ctrbox-data key --field F --token T [--token T ...] (--model DIR | --data FILE | --format F) [options]\n"
    "the key of each token in field F, one per line: the unsigned 64-bit decimal ctrbox-table prints and\n"
    "exports (npy: uint64), so that rows can be found and joined outside ctrbox. A key is XXH3-64 of the\n"
    "token's bytes seeded with the field's index\n"
    "  --field F              the field's name (C1, or a csv column) or its index from 0 (required)\n"
    "  --token T              the value as it appears in the data: a criteo/csv value, a libsvm/libffm\n"
    "                         feature index\n"
    "  --bucket               T is a value of an integer column read as buckets (--num bucket): its bucket's key\n"
    "  --model DIR            the fields are this model's (its folder or model.ctrbox)\n"
    "  --data FILE            the fields are this file's, read with the input options below\n"
    "  --format F             criteo, libsvm or libffm: fields known without data (none of the three:\n"
    "                         the Criteo layout's names I1-I13, C1-C26, or F as an index)\n";

static const char split_help[] =
    "usage: ctrbox-data split --ratios 8,1,1 --in FILE --out PREFIX [options]\n"
    "each row to one of the parts at random (seeded): PREFIX.train, PREFIX.valid, PREFIX.test for three\n"
    "parts (PREFIX.train, PREFIX.test for two; else PREFIX.part0, ...; .cbx added for cbx input).\n"
    "Text input needs --format: the lines its parser takes go to the parts as they were (a csv header to\n"
    "each); bad lines go to none, are reported, and count against --max-bad-ratio\n"
    "  --ratios L             the parts' shares, e.g. 8,1,1 (required)\n"
    "  --in FILE              (required; a folder stands for its files, in name order)\n"
    "  --out PREFIX           (required; not in a folder --in names)\n"
    "  --seed S               (1)\n";

static uint64_t parse_u64_arg(const char *name, const char *arg)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(arg, &end, 10);
    if (errno || *end || end == arg || arg[0] == '-') die("%s %s: want a non-negative integer", name, arg);
    return v;
}

static int cmd_gen(int argc, char **argv)
{
    static const struct option opts[] = {
        { "rows", required_argument, 0, 'n' }, { "seed", required_argument, 0, 's' },
        { "out", required_argument, 0, 'o' },  { "truth", required_argument, 0, 't' },
        { "keys", required_argument, 0, 'k' }, { "offset", required_argument, 0, 'f' },
        { 0, 0, 0, 0 },
    };
    const cli_cmd cc = { "ctrbox-data", "gen", gen_help, opts, 0 };
    cli_help_check(&cc, argc, argv);
    gen_opts g = { 0, 1, 1.0, 0 };
    const char *out = NULL, *truth = NULL;
    int have_rows = 0, c;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        switch (c) {
        case 'n': g.rows = parse_u64_arg("--rows", optarg); have_rows = 1; break;
        case 's': g.seed = parse_u64_arg("--seed", optarg); break;
        case 'o': out = optarg; break;
        case 't': truth = optarg; break;
        case 'f': g.offset = parse_u64_arg("--offset", optarg); break;
        case 'k': {
            char *end;
            g.keys_scale = strtod(optarg, &end);
            if (*end || !(g.keys_scale > 0) || g.keys_scale > 1e3) die("--keys %s: want a positive scale", optarg);
            break;
        }
        default: cli_usage_error(&cc, "unexpected option");
        }
    }
    if (!have_rows || !out) cli_fail(&cc, "--rows N and --out FILE are required");
    durable_file fo, ft = { 0 };
    int ret = durable_open(&fo, out);
    if (ret < 0) die("%s: cannot create: %s", out, strerror(-ret));
    if (truth && (ret = durable_open(&ft, truth)) < 0) {
        durable_abort(&fo);
        die("%s: cannot create: %s", truth, strerror(-ret));
    }
    ret = gen_write(&g, fo.f, truth ? ft.f : NULL);
    if (ret < 0) {
        durable_abort(&fo);
        if (truth) durable_abort(&ft);
        die("gen: write failed: %s", strerror(-ret));
    }
    if ((ret = durable_commit(&fo)) < 0) {
        if (truth) durable_abort(&ft);
        die("%s: cannot commit: %s", out, strerror(-ret));
    }
    if (truth && (ret = durable_commit(&ft)) < 0) die("%s: cannot commit: %s", truth, strerror(-ret));
    return 0;
}

static void print_bad_lines(FILE *f, const line_stats *st)
{
    uint64_t total = 0;
    for (int i = 1; i < BAD_COUNT; i++) total += st->bad[i];
    fprintf(f, "bad lines: %llu of %llu", (unsigned long long)total, (unsigned long long)st->lines);
    const char *sep = " (";
    for (int i = 1; i < BAD_COUNT; i++)
        if (st->bad[i]) {
            fprintf(f, "%s%s %llu", sep, parse_bad_reason_key(i), (unsigned long long)st->bad[i]);
            sep = ", ";
        }
    fprintf(f, "%s\n", total ? ")" : "");
}

static int cmd_convert(int argc, char **argv)
{
    static const struct option extra[] = {
        { "in", required_argument, 0, 'i' }, { "out", required_argument, 0, 'o' }, { 0, 0, 0, 0 },
    };
    struct option *opts = cli_options_with_input(extra);
    cli_input in;
    cli_input_init(&in);
    const cli_cmd cc = { "ctrbox-data", "convert", convert_help, opts, 1 };
    cli_help_check(&cc, argc, argv);
    const char *out = NULL;
    char **inputs = xcalloc((size_t)argc, sizeof *inputs);
    int n_in = 0, c;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        if (cli_input_option(&in, c, optarg)) continue;
        switch (c) {
        case 'i': inputs[n_in++] = optarg; break;
        case 'o': out = optarg; break;
        default: cli_usage_error(&cc, "unexpected option");
        }
    }
    while (optind < argc && n_in > 0) inputs[n_in++] = argv[optind++];   /* --in a b c */
    if (n_in == 0 || !out) cli_fail(&cc, "--in FILE and --out FILE.cbx are required");
    char which[4200];
    if (io_output_is_input(out, inputs, n_in, which, sizeof which))   /* the log was replaced by its cbx, exit 0 */
        die("--out %s is the input %s: it would be replaced", out, which);
    if (io_output_in_input_folder(out, inputs, n_in, which, sizeof which))
        die("--out %s is in %s, a folder convert reads: the next read of the folder would take it among the logs; "
            "write it elsewhere", out, which);
    if (in.so.fmt == FMT_NONE) cli_fail(&cc, "--format F is required (criteo, libsvm, libffm, csv)");

    char err[1024];
    data_source *src;
    double t0 = now_sec();
    if (source_open(&src, inputs, n_in, &in.so, err, sizeof err) < 0) die("%s", err);
    cbx_writer *w;
    if (cbx_writer_open(&w, out, source_schema(src), source_format(src), err, sizeof err) < 0) die("%s", err);
    sample_block b;
    block_init(&b, source_schema(src)->n_dense);
    uint64_t rows = 0, pos = 0;
    int ret;
    cli_progress pg;
    cli_progress_start(&pg, "convert", "rows");
    while ((ret = source_next(src, &b, err, sizeof err)) > 0) {
        for (size_t i = 0; i < b.rows; i++) pos += b.label[i] > 0.5f;
        rows += b.rows;
        cli_progress_tick(&pg, rows, 0);
        if (cbx_writer_add(w, &b, err, sizeof err) < 0) {
            ret = -1;
            break;
        }
    }
    cli_progress_end(&pg);
    if (ret == 0) ret = cbx_writer_finish(w, source_schema(src), source_stats(src), err, sizeof err);
    else cbx_writer_abort(w);
    if (ret < 0) die("%s; %s not written", err, out);
    double dt = now_sec() - t0;
    fprintf(stderr, "%s: %llu rows, %llu positives, %.2f s (%.0f rows/s)\n", out, (unsigned long long)rows,
            (unsigned long long)pos, dt, dt > 0 ? (double)rows / dt : 0.0);
    print_bad_lines(stderr, source_stats(src));
    block_free(&b);
    source_close(src);
    cli_input_free(&in);
    free(inputs);
    free(opts);
    return 0;
}

static int cmd_inspect(int argc, char **argv)
{
    static const struct option extra[] = {
        { "json", no_argument, 0, 'j' }, { "exact-limit", required_argument, 0, 'x' }, { 0, 0, 0, 0 },
    };
    struct option *opts = cli_options_with_input(extra);
    cli_input in;
    cli_input_init(&in);
    in.so.max_bad_ratio = 1.0;   /* inspect reports bad lines rather than stopping on them */
    const cli_cmd cc = { "ctrbox-data", "inspect", inspect_help, opts, 1 };
    cli_help_check(&cc, argc, argv);
    int json = 0, c;
    size_t exact_limit = 1u << 20;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        if (cli_input_option(&in, c, optarg)) continue;
        switch (c) {
        case 'j': json = 1; break;
        case 'x': exact_limit = (size_t)parse_u64_arg("--exact-limit", optarg); break;
        default: cli_usage_error(&cc, "unexpected option");
        }
    }
    if (optind >= argc) cli_fail(&cc, "name a file");
    if (json) in.so.report_bad = -1;
    char err[1024];
    data_source *src;
    if (source_open(&src, argv + optind, argc - optind, &in.so, err, sizeof err) < 0) die("%s", err);
    field_stats *fs = field_stats_create(source_schema(src)->n_fields, exact_limit);
    sample_block b;
    block_init(&b, source_schema(src)->n_dense);
    uint64_t rows = 0, pos = 0;
    int ret;
    cli_progress pg;
    cli_progress_start(&pg, "inspect", "rows");
    while ((ret = source_next(src, &b, err, sizeof err)) > 0) {
        rows += b.rows;
        for (size_t i = 0; i < b.rows; i++) pos += b.label[i] > 0.5f;
        field_stats_add(fs, &b);
        cli_progress_tick(&pg, rows, 0);
    }
    cli_progress_end(&pg);
    if (ret < 0) die("%s", err);
    const data_schema *sc = source_schema(src);
    const line_stats *st = source_stats(src);
    double ctr = rows ? (double)pos / (double)rows : 0;
    uint32_t n_num = 0;
    for (uint32_t f = 0; f < sc->n_fields; f++) n_num += sc->kind[f] == FIELD_NUM;
    if (json) {
        json_t *o = json_object(), *fields = json_array(), *badj = json_object();
        json_object_set_new(o, "format", json_string(parse_format_name(source_format(src))));
        json_object_set_new(o, "rows", json_integer((json_int_t)rows));
        json_object_set_new(o, "positives", json_integer((json_int_t)pos));
        json_object_set_new(o, "ctr", json_real(ctr));
        json_object_set_new(o, "n_fields", json_integer(sc->n_fields));
        json_object_set_new(o, "n_dense", json_integer(sc->n_dense));
        for (uint32_t f = 0; f < sc->n_fields; f++) {
            int approx;
            json_t *fj = json_object();
            json_object_set_new(fj, "name", json_string(sc->names[f]));
            json_object_set_new(fj, "kind", json_string(sc->kind[f] == FIELD_NUM ? "num" : "cat"));
            if (sc->kind[f] == FIELD_CAT) {
                double share;
                int id = field_stats_looks_like_id(fs, f, &share);
                json_object_set_new(fj, "distinct_share", json_real(share));
                json_object_set_new(fj, "looks_like_id", json_boolean(id));
                uint64_t d = field_stats_distinct(fs, f, &approx);
                json_object_set_new(fj, "distinct", json_integer((json_int_t)d));
                json_object_set_new(fj, "distinct_approximate", json_boolean(approx));
                json_object_set_new(fj, "rows_present", json_integer((json_int_t)field_stats_rows_present(fs, f)));
                json_object_set_new(fj, "keys", json_integer((json_int_t)field_stats_keys(fs, f)));
            }
            json_array_append_new(fields, fj);
        }
        json_object_set_new(o, "fields", fields);
        json_object_set_new(o, "lines", json_integer((json_int_t)st->lines));
        for (int i = 1; i < BAD_COUNT; i++)
            json_object_set_new(badj, parse_bad_reason_key(i), json_integer((json_int_t)st->bad[i]));
        json_object_set_new(o, "bad_lines", badj);
        char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(s);
        free(s);
        json_decref(o);
    } else {
        printf("format: %s\nrows: %llu\npositives: %llu\nctr: %.6f\nfields: %u (%u num as dense values, %u cat)\n",
               parse_format_name(source_format(src)), (unsigned long long)rows, (unsigned long long)pos, ctr,
               sc->n_fields, n_num, sc->n_fields - n_num);
        printf("%-16s %-4s %14s %12s %12s %9s\n", "field", "kind", "distinct", "rows_with", "keys", "distinct%");
        int any_approx = 0, ids = 0;
        for (uint32_t f = 0; f < sc->n_fields; f++) {
            if (sc->kind[f] == FIELD_NUM) {
                printf("%-16s %-4s %14s %12s %12s %9s\n", sc->names[f], "num", "-", "-", "-", "-");
                continue;
            }
            int approx;
            uint64_t d = field_stats_distinct(fs, f, &approx);
            any_approx |= approx;
            char dbuf[32];
            snprintf(dbuf, sizeof dbuf, "%s%llu", approx ? "~" : "", (unsigned long long)d);
            double share;
            int id = field_stats_looks_like_id(fs, f, &share);
            ids += id;
            printf("%-16s %-4s %14s %12llu %12llu %8.1f%%%s\n", sc->names[f], "cat", dbuf,
                   (unsigned long long)field_stats_rows_present(fs, f), (unsigned long long)field_stats_keys(fs, f),
                   share * 100, id ? "  an id? (nearly every row its own value)" : "");
        }
        if (ids)
            printf("an id column is no feature: each value is seen once, so its embedding learns nothing; csv: skip it with "
                   "--schema NAME:skip\n");
        if (any_approx) printf("~: approximate (HyperLogLog, about 0.8%% error), past %zu distinct keys\n", exact_limit);
        print_bad_lines(stdout, st);
    }
    field_stats_destroy(fs);
    block_free(&b);
    source_close(src);
    cli_input_free(&in);
    free(opts);
    return 0;
}

/* Which part a row goes to: a seeded hash of its index against the cumulative ratios. */
static int pick_part(uint64_t seed, uint64_t row, const double *cum, int k)
{
    double u = (double)(XXH3_64bits_withSeed(&row, sizeof row, seed) >> 11) * (1.0 / 9007199254740992.0);
    for (int i = 0; i < k - 1; i++)
        if (u < cum[i]) return i;
    return k - 1;
}

static char *part_name(const char *prefix, int i, int k, int cbx)
{
    static const char *two[] = { "train", "test" }, *three[] = { "train", "valid", "test" };
    char tail[32];
    if (k == 2) snprintf(tail, sizeof tail, "%s", two[i]);
    else if (k == 3) snprintf(tail, sizeof tail, "%s", three[i]);
    else snprintf(tail, sizeof tail, "part%d", i);
    size_t n = strlen(prefix) + 48;
    char *s = xmalloc(n);
    snprintf(s, n, "%s.%s%s", prefix, tail, cbx ? ".cbx" : "");
    return s;
}

/* Text split: each line the parser took goes, as it was, to the part its row index picks. */
typedef struct {
    uint64_t seed, row;
    const double *cum;
    int k;
    uint64_t *counts;
    durable_file out[64];
} text_parts;

static void text_part_line(void *ctx, const char *line, size_t len)
{
    text_parts *tp = ctx;
    int p = pick_part(tp->seed, tp->row++, tp->cum, tp->k);
    fwrite(line, 1, len, tp->out[p].f);
    fputc('\n', tp->out[p].f);
    tp->counts[p]++;
}

static uint64_t counts_total(const uint64_t *counts, int k)
{
    uint64_t n = 0;
    for (int i = 0; i < k; i++) n += counts[i];
    return n;
}

static int cmd_split(int argc, char **argv)
{
    static const struct option extra[] = {
        { "ratios", required_argument, 0, 'r' }, { "seed", required_argument, 0, 's' },
        { "in", required_argument, 0, 'i' },     { "out", required_argument, 0, 'o' },
        { 0, 0, 0, 0 },
    };
    struct option *opts = cli_options_with_input(extra);
    cli_input in;
    cli_input_init(&in);
    const char *ratios = NULL, *input = NULL, *prefix = NULL;
    const cli_cmd cc = { "ctrbox-data", "split", split_help, opts, 1 };
    cli_help_check(&cc, argc, argv);
    uint64_t seed = 1;
    int c;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        if (cli_input_option(&in, c, optarg)) continue;
        switch (c) {
        case 'r': ratios = optarg; break;
        case 's': seed = parse_u64_arg("--seed", optarg); break;
        case 'i': input = io_input_path(optarg); break;   /* "-": standard input */
        case 'o': prefix = optarg; break;
        default: cli_usage_error(&cc, "unexpected option");
        }
    }
    if (!ratios || !input || !prefix) cli_fail(&cc, "--ratios, --in and --out are required");
    uint64_t *rv;
    int k = parse_u64_list(ratios, &rv);
    if (k < 2 || k > 64) die("--ratios %s: want two or more integers like 8,1,1", ratios);
    double total = 0, cum[64];
    for (int i = 0; i < k; i++) total += (double)rv[i];
    if (total <= 0) die("--ratios %s: want a positive sum", ratios);
    double acc = 0;
    for (int i = 0; i < k; i++) cum[i] = (acc += (double)rv[i]) / total;
    free(rv);

    int cbx = in.so.fmt == FMT_CBX || (in.so.fmt == FMT_NONE && cbx_file_is_cbx(input));
    char err[1024];
    uint64_t counts[64] = { 0 };
    char *names[64];
    for (int i = 0; i < k; i++) {
        names[i] = part_name(prefix, i, k, cbx);
        char which[4200];
        if (io_output_is_input(names[i], (char *const *)&input, 1, which, sizeof which))
            die("%s, a part written, is the input %s: it would be replaced", names[i], which);
        if (io_output_in_input_folder(names[i], (char *const *)&input, 1, which, sizeof which))
            die("%s, a part written, is in %s, the folder split reads: the next read of the folder would take the "
                "part as data again; write the parts elsewhere", names[i], which);
    }
    if (cbx) {   /* block by block, rows to parts */
        data_source *src;
        in.so.fmt = FMT_CBX;
        if (source_open(&src, (char *const *)&input, 1, &in.so, err, sizeof err) < 0) die("%s", err);
        const data_schema *sc = source_schema(src);
        cbx_writer *w[64];
        sample_block part[64], b;
        for (int i = 0; i < k; i++) {
            if (cbx_writer_open(&w[i], names[i], sc, FMT_CBX, err, sizeof err) < 0) {
                for (int j = 0; j < i; j++) cbx_writer_abort(w[j]);
                die("%s", err);
            }
            block_init(&part[i], sc->n_dense);
        }
        block_init(&b, sc->n_dense);
        uint64_t row = 0;
        int ret;
        while ((ret = source_next(src, &b, err, sizeof err)) > 0) {
            for (int i = 0; i < k; i++) block_clear(&part[i]);
            for (size_t r = 0; r < b.rows; r++) {
                sample_block *p = &part[pick_part(seed, row++, cum, k)];
                size_t n = (size_t)(b.row_ptr[r + 1] - b.row_ptr[r]);
                block_reserve(p, 1, n);
                p->label[p->rows] = b.label[r];
                memcpy(p->dense + p->rows * p->n_dense, b.dense + r * b.n_dense, b.n_dense * sizeof(float));
                memcpy(p->key + p->nnz, b.key + b.row_ptr[r], n * sizeof *p->key);
                memcpy(p->field + p->nnz, b.field + b.row_ptr[r], n * sizeof *p->field);
                memcpy(p->val + p->nnz, b.val + b.row_ptr[r], n * sizeof *p->val);
                p->nnz += n;
                p->row_ptr[++p->rows] = p->nnz;
            }
            for (int i = 0; i < k && ret > 0; i++) {
                counts[i] += part[i].rows;
                if (cbx_writer_add(w[i], &part[i], err, sizeof err) < 0) ret = -1;
            }
            if (ret < 0) break;
        }
        for (int i = 0; i < k; i++) {
            if (ret == 0) ret = cbx_writer_finish(w[i], sc, NULL, err, sizeof err);
            else cbx_writer_abort(w[i]);
            block_free(&part[i]);
        }
        block_free(&b);
        source_close(src);
        if (ret < 0) die("%s", err);
    } else {   /* text: the lines the parser takes, as they were, to parts; a csv header to each */
        data_source *src;
        if (source_open(&src, (char *const *)&input, 1, &in.so, err, sizeof err) < 0) die("%s", err);
        text_parts tp = { .seed = seed, .cum = cum, .k = k, .counts = counts };
        for (int i = 0; i < k; i++) {
            int r = durable_open(&tp.out[i], names[i]);
            if (r < 0) {
                for (int j = 0; j < i; j++) durable_abort(&tp.out[j]);
                die("%s: cannot create: %s", names[i], strerror(-r));
            }
        }
        size_t hlen;
        const char *header = source_header_line(src, &hlen);
        for (int i = 0; header && i < k; i++) {
            fwrite(header, 1, hlen, tp.out[i].f);
            fputc('\n', tp.out[i].f);
        }
        source_set_line_sink(src, text_part_line, &tp);
        sample_block b;
        block_init(&b, 0);
        int ret;
        while ((ret = source_next(src, &b, err, sizeof err)) > 0) {}
        block_free(&b);
        for (int i = 0; i < k; i++) {
            if (ret == 0) {
                int r = durable_commit(&tp.out[i]);
                if (r < 0) {
                    snprintf(err, sizeof err, "%s: cannot write: %s", names[i], strerror(-r));
                    ret = -1;
                }
            } else {
                durable_abort(&tp.out[i]);
            }
        }
        if (ret < 0) die("%s", err);
        const line_stats *st = source_stats(src);
        if (st->lines > counts_total(counts, k)) {   /* the bad lines were printed as they were read */
            print_bad_lines(stderr, st);
            fprintf(stderr, "ctrbox-data split: the bad lines are in none of the parts\n");
        }
        source_close(src);
    }
    for (int i = 0; i < k; i++) {
        printf("%s: %llu rows\n", names[i], (unsigned long long)counts[i]);
        free(names[i]);
    }
    cli_input_free(&in);
    free(opts);
    return 0;
}

static int cmd_key(int argc, char **argv)
{
    static const struct option extra[] = {
        { "field", required_argument, 0, 'f' }, { "token", required_argument, 0, 't' },
        { "model", required_argument, 0, 'm' }, { "data", required_argument, 0, 'd' },
        { "bucket", no_argument, 0, 'b' }, { 0, 0, 0, 0 },
    };
    struct option *opts = cli_options_with_input(extra);
    const cli_cmd cc = { "ctrbox-data", "key", key_help, opts, 1 };
    cli_help_check(&cc, argc, argv);
    cli_input in;
    cli_input_init(&in);
    const char *field = NULL, *model_dir = NULL;
    char *data = NULL;
    char **tokens = xcalloc((size_t)argc + 1, sizeof *tokens);
    int n_tok = 0, bucket = 0, c;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        if (cli_input_option(&in, c, optarg)) continue;
        switch (c) {
        case 'b': bucket = 1; break;
        case 'f': field = optarg; break;
        case 't': tokens[n_tok++] = optarg; break;
        case 'm': model_dir = optarg; break;
        case 'd': data = optarg; break;
        default: cli_usage_error(&cc, "unexpected option");
        }
    }
    if (!field || !n_tok) cli_fail(&cc, "--field F and --token T are required");
    if (optind < argc) cli_fail(&cc, "unexpected argument '%s'", argv[optind]);
    int sources = !!model_dir + !!data + (in.so.fmt != FMT_NONE && !data);
    if (sources > 1) cli_fail(&cc, "give the fields one way: --model DIR, --data FILE or --format F");
    if (!sources) in.so.fmt = FMT_CRITEO;   /* a field's index, or a name of the Criteo layout (ctrbox-data gen's) */
    char err[1024];
    data_schema sc;
    if (model_dir) {   /* the model's fields, read as it was trained */
        model_meta meta;
        if (modelfile_read_meta(model_dir, &meta, err, sizeof err) < 0) die("%s", err);
        schema_copy(&sc, &meta.schema);
        model_meta_free(&meta);
    } else if (data) {
        data_source *src;
        if (source_open(&src, &data, 1, &in.so, err, sizeof err) < 0) die("%s", err);
        schema_copy(&sc, source_schema(src));
        source_close(src);
    } else {
        if (in.so.fmt == FMT_CSV || in.so.fmt == FMT_CBX) cli_fail(&cc, "--format csv or cbx: give --data FILE for its fields");
        parser_opts po = { in.so.fmt, in.so.num, NULL, in.so.field_offsets, in.so.n_offsets, 0, NULL };
        line_parser *p;
        if (parser_create(&p, &po, err, sizeof err) < 0) die("%s", err);
        schema_copy(&sc, parser_schema(p));
        parser_destroy(p);
    }
    long fi = -1;
    for (uint32_t f = 0; f < sc.n_fields; f++)
        if (!strcmp(sc.names[f], field)) fi = f;
    char *end;
    if (fi < 0 && *field && (fi = strtol(field, &end, 10), *end || fi < 0)) fi = -1;
    if (fi < 0 || (fi >= (long)sc.n_fields && in.so.fmt != FMT_LIBFFM && in.so.fmt != FMT_LIBSVM))
        die("--field %s: no such field (fields: %s%s%s ...)", field, sc.n_fields ? sc.names[0] : "",
            sc.n_fields > 1 ? ", " : "", sc.n_fields > 1 ? sc.names[1] : "");
    if ((uint32_t)fi < sc.n_fields && sc.kind[fi] == FIELD_NUM)
        die("--field %s: an integer column read as a dense value has no key (read as buckets, --num bucket, it has)", field);
    for (int i = 0; i < n_tok; i++) {
        const char *t = tokens[i];
        char buf[32];
        double x;
        if (bucket) {   /* an integer column's value read as buckets: its bucket's key */
            if (parse_number(t, strlen(t), &x) < 0) die("--token %s: --bucket wants a number", t);
            snprintf(buf, sizeof buf, "%lld", (long long)parse_num_bucket(x));
            t = buf;
        }
        printf("%llu\n", (unsigned long long)parse_feature_key(t, strlen(t), (uint32_t)fi));
    }
    schema_free(&sc);
    free(tokens);
    free(opts);
    cli_input_free(&in);
    return 0;
}

int main(int argc, char **argv)
{
    util_set_prog("ctrbox-data");
    process_setup();
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        cli_print_version("ctrbox-data");
        return 0;
    }
    const char *cmd = argv[1];
    argv[1] = argv[0];
    argc--, argv++;
    if (!strcmp(cmd, "gen")) return cmd_gen(argc, argv);
    if (!strcmp(cmd, "convert")) return cmd_convert(argc, argv);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc, argv);
    if (!strcmp(cmd, "split")) return cmd_split(argc, argv);
    if (!strcmp(cmd, "key")) return cmd_key(argc, argv);
    static const char *const cmds[] = { "gen", "convert", "inspect", "split", "key", NULL };
    cli_unknown_command("ctrbox-data", cmd, cmds);
}
