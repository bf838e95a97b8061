/*
 * ctrbox_table.c: the table tool, on the tables a trainer writes: a model folder (its
 * model.ctrbox holds the tables, or names the SSD-tier folder that does) or a table folder.
 *   inspect DIR [--json]                       tables, sizes, counter histograms, frequent keys, pass
 *   export DIR --to text|npy|hugectr OUT [--with-optimizer] [--table N]
 *   import --from text|npy|hugectr IN DIR [--table N] [--dim D --w 0|1 --opt NAME]
 *   delta DIR --since PASS OUT                 the rows changed after PASS (text, with optimizer state)
 *   shrink DIR [--threshold S] [--unseen N] ... delete keys by the CTR accessor's rules
 *   merge A B OUT [--by pass|show]             union of two table folders (newer pass, or more shows, wins)
 *   convert DIR --dtype fp16|bf16|int8 OUT     quantized rows for serving, with the largest and mean error
 * Table folders are read in one sequential pass over their slot files (8 MB at a time) or by an
 * index scan, and written in commits of at most 2^20 rows (import: 2^20 rows in memory; merge:
 * 65,536; shrink: 2^20 deletions), plus the folder's slot bitmap (one bit per slot) and key
 * filter: bounded whatever the table's size. A model file's tables are loaded whole (they were
 * trained in memory). Outputs are written durably; bad input is refused before anything is written.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../embedding/quant.h"
#include "../embedding/shard.h"
#include "../embedding/shrink.h"
#include "../embedding/table.h"
#include "../embedding/tier.h"
#include "../src/cli.h"
#include "../src/modelfile.h"
#include "../io/util.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: ctrbox-table COMMAND [options]      (ctrbox-table COMMAND --help: its options and defaults)\n"
               "  inspect   a table's rows, dims, optimizer, show/click spread, disk bytes\n"
               "  export    the rows as text, npy or HugeCTR files\n"
               "  import    rows from text, npy or HugeCTR files into a table folder\n"
               "  delta     the rows changed after a pass, as a text file import applies\n"
               "  merge     the union of two table folders\n"
               "  convert   rows for serving in fp16, bf16 or int8\n"
               "  shrink    delete keys by score and age\n"
               "  --version\n"
               "DIR: a model folder (model.ctrbox) or an SSD-tier table folder (--table-dir). An existing OUT is\n"
               "replaced only with --force. Keys are printed one way everywhere: unsigned 64-bit decimal (npy: uint64;\n"
               "ctrbox-data key prints the key of a token).\n");
}

static const char inspect_help[] =
    "usage: ctrbox-table inspect DIR [--json]\n"
    "per table: rows, dim, optimizer, bytes, show/click quantiles, the top keys by show; the last committed pass\n"
    "  --json                 one JSON object\n";
static const char export_help[] =
    "usage: ctrbox-table export DIR --to text|npy|hugectr OUT [options]\n"
    "  --to F                 text (one row per line: key, values), npy (keys.npy, values.npy in OUT),\n"
    "                         hugectr (OUT/key, OUT/emb_vector) (required)\n"
    "  --with-optimizer       the optimizer state and counters too (text, npy) (off)\n"
    "  --table N              which table (0)\n"
    "  --since PASS           only rows trained after PASS (text, hugectr) (all)\n"
    "  --force                replace an existing OUT\n";
static const char delta_help[] =
    "usage: ctrbox-table delta DIR --since PASS OUT [options]\n"
    "the rows changed after PASS, with their optimizer state, as a text file `import --from text` applies\n"
    "  --since PASS           (required)\n"
    "  --table N              which table (0)\n"
    "  --force                replace an existing OUT\n"
    "  --to F                 text|hugectr (text)\n"
    "  --with-optimizer       (always on for a delta)\n";
static const char import_help[] =
    "usage: ctrbox-table import --from text|npy|hugectr IN DIR [options]\n"
    "rows into table folder DIR (created when absent: give --dim, --w, --opt); a key present is replaced\n"
    "  --from F               text|npy|hugectr (required)\n"
    "  --table N              which table (0)\n"
    "  --dim D                a new folder's embedding size (required for a new folder)\n"
    "  --w 0|1                a new folder's rows hold a wide weight (the input's layout)\n"
    "  --opt NAME             a new folder's optimizer: adam|adagrad|rowwise_adagrad|sgd|ftrl (adam)\n";
static const char merge_help[] =
    "usage: ctrbox-table merge A B OUT [--by pass|show]\n"
    "the union of two table folders; for a key in both the newer pass wins\n"
    "  --by pass|show         which row wins for a key in both: the newer pass, or the more shown (pass)\n";
static const char convert_help[] =
    "usage: ctrbox-table convert DIR --dtype fp16|bf16|int8 OUT [options]\n"
    "rows for serving (no optimizer state; int8: a scale per row)\n"
    "  --dtype T              fp16|bf16|int8 (required)\n"
    "  --table N              which table (0)\n"
    "  --force                replace an existing OUT\n";
static const char shrink_help[] =
    "usage: ctrbox-table shrink DIR [options]\n"
    "delete keys whose score is below a threshold or that were unseen for a number of passes; in place,\n"
    "committed (give at least one of --threshold and --unseen)\n"
    "  --threshold S          delete keys with score (show - click) * nonclk + click * clk below S (off)\n"
    "  --unseen N             delete keys unseen for more than N passes (off)\n"
    "  --nonclk-coeff X       (0.1)\n"
    "  --clk-coeff X          (1)\n"
    "  --decay R              show and click times R (0 < R < 1) first (none)\n"
    "  --pass P               the pass counted as now (the last committed)\n";

/* ---- one table's description ---- */

typedef struct {
    int dim, has_w, state;
    int opt;          /* sparse_opt_kind */
    size_t row_bytes;
} tdesc;

static int tdesc_values(const tdesc *d) { return d->dim + d->has_w; }

/* "MODEL;t0:dim=D,w=W,opt=NAME,state=S;t1:..." -> per table; the model name into model */
static int parse_layout(const char *layout, int n, tdesc *d, char *mname, size_t mlen)
{
    const char *p = strchr(layout, ';');
    snprintf(mname, mlen, "%.*s", p ? (int)(p - layout) : (int)strlen(layout), layout);
    for (int i = 0; i < n; i++) {
        if (!p) return -1;
        char opt[32];
        int ti;
        if (sscanf(p, ";t%d:dim=%d,w=%d,opt=%31[^,],state=%d", &ti, &d[i].dim, &d[i].has_w, opt, &d[i].state) != 5 ||
            ti != i || (d[i].opt = sparse_opt_from_name(opt)) < 0)
            return -1;
        p = strchr(p + 1, ';');
    }
    return 0;
}

/* ---- a source of rows: a table folder, or a model file's tables ---- */

typedef struct {
    emb_tier *tier;       /* a sharded folder (several processes: DIR/rank-<r>) reads as one table */
    int n_shard;          /* its ranks (0: not sharded) */
    model *m;
    model_meta meta;
    int n;
    tdesc *d;
    char model_name[64];
    uint64_t disk_bytes;
    char path[8300];
} tsrc;


/* 1 if dir is a sharded table folder (DIR/SHARDS.ctrbox): *ranks its sub-folders. */
static int sharded(const char *dir, int *ranks)
{
    char err[1024];
    int g;
    uint64_t commits;
    return emb_shards_read(dir, ranks, &g, &commits, err, sizeof err) == 0 && commits > 0;
}

static int open_folder(tsrc *s, const char *dir, int readonly, char *err, size_t errlen)
{
    int ranks;
    if (sharded(dir, &ranks)) s->n_shard = ranks;   /* opened to write, the tier refuses it */
    if (emb_tier_open(&s->tier, dir, 0, NULL, NULL, readonly, 64u << 20, err, errlen) < 0) return -1;
    s->n = emb_tier_tables(s->tier);
    s->d = xcalloc((size_t)s->n, sizeof *s->d);
    if (parse_layout(emb_tier_layout(s->tier), s->n, s->d, s->model_name, sizeof s->model_name) < 0) {
        snprintf(err, errlen, "%s: its layout record does not describe its tables (%s)", dir, emb_tier_layout(s->tier));
        return -1;
    }
    for (int i = 0; i < s->n; i++) s->d[i].row_bytes = emb_tier_row_bytes(s->tier, i);
    s->disk_bytes = path_disk_bytes(dir);
    snprintf(s->path, sizeof s->path, "%s", dir);
    return 0;
}

static int tsrc_open(tsrc *s, const char *dir, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    char *p = modelfile_path(dir);   /* a model's folder or its file */
    if (access(p, F_OK) != 0) {
        free(p);
        return open_folder(s, dir, 1, err, errlen);
    }
    if (modelfile_load(dir, &s->m, &s->meta, err, errlen) < 0) {
        free(p);
        return -1;
    }
    if (s->meta.table_dir) {
        model_destroy(s->m);
        s->m = NULL;
        free(p);
        if (modelfile_table_dir_there(dir, &s->meta, "give the table folder itself, where it is now", err, errlen) < 0)
            return -1;
        if (open_folder(s, s->meta.table_dir, 1, err, errlen) < 0) return -1;
        return modelfile_check_tier(dir, &s->meta, s->tier, err, errlen);
    }
    s->n = model_n_tables(s->m);
    s->d = xcalloc((size_t)s->n, sizeof *s->d);
    snprintf(s->model_name, sizeof s->model_name, "%s", model_kind_name(s->meta.cfg.kind));
    for (int i = 0; i < s->n; i++) {
        emb_table *t = model_table(s->m, i);
        const emb_table_config *c = emb_table_config_of(t);
        s->d[i] = (tdesc){ c->dim, c->has_w, emb_table_state_floats(t), (int)c->opt.kind, emb_table_row_bytes(t) };
    }
    s->disk_bytes = path_disk_bytes(p);
    snprintf(s->path, sizeof s->path, "%s", p);
    free(p);
    return 0;
}

static void tsrc_close(tsrc *s)
{
    emb_tier_close(s->tier);
    if (s->m) {
        model_destroy(s->m);
        model_meta_free(&s->meta);
    } else if (s->meta.table_dir) {
        model_meta_free(&s->meta);
    }
    free(s->d);
}

static uint64_t tsrc_rows(tsrc *s, int tb)
{
    return s->tier ? emb_tier_rows(s->tier, tb) : emb_table_rows(model_table(s->m, tb));
}

typedef int (*row_fn)(void *ctx, const emb_row_head *rec);

static int tsrc_scan(tsrc *s, int tb, row_fn fn, void *ctx, char *err, size_t errlen)
{
    if (s->tier) return emb_tier_scan_rows(s->tier, tb, (emb_tier_row_fn)fn, ctx, err, errlen);
    emb_table *t = model_table(s->m, tb);
    for (size_t r = 0; r < emb_table_rows(t); r++)
        if (fn(ctx, emb_table_head(t, (uint32_t)r))) break;
    return 0;
}

/* The last pass a trainer committed to the folder (its catalog), or -1 if none (or not a folder). */
static long long catalog_pass(tsrc *s)
{
    if (!s->tier) return -1;
    char err[1024];
    void *blob;
    size_t len;
    if (emb_tier_catalog(s->tier, &blob, &len, err, sizeof err) < 0) die("%s", err);
    long long pass = -1;
    if (blob && len >= 16 && !memcmp(blob, "CTRBXCAT", 8)) {
        uint32_t p;
        memcpy(&p, (char *)blob + 12, 4);
        pass = p;
    }
    free(blob);
    return pass;
}

/* ---- inspect ---- */

enum { HBINS = 24, TOPK = 10 };

typedef struct {
    uint64_t rows;
    uint64_t show_hist[HBINS], click_hist[HBINS];   /* bin 0: 0; bin b: [2^(b-1), 2^b) */
    emb_row_head top[TOPK];
    int ntop;
    double show_sum, click_sum;
} stats;

static int hbin(float x)
{
    if (!(x >= 1)) return 0;
    int b = 1 + (int)floor(log2(x));
    return b < HBINS ? b : HBINS - 1;
}

static int stats_row(void *ctx, const emb_row_head *h)
{
    stats *s = ctx;
    s->rows++;
    s->show_hist[hbin(h->show)]++;
    s->click_hist[hbin(h->click)]++;
    s->show_sum += h->show;
    s->click_sum += h->click;
    /* top keys by show: a small sorted array, largest first */
    if (s->ntop < TOPK || h->show > s->top[s->ntop - 1].show) {
        int i = s->ntop < TOPK ? s->ntop++ : TOPK - 1;
        while (i > 0 && s->top[i - 1].show < h->show) {
            s->top[i] = s->top[i - 1];
            i--;
        }
        s->top[i] = *h;
    }
    return 0;
}

static int cmd_inspect(int argc, char **argv)
{
    int json = 0;
    const char *dir = NULL;
    static const struct option opts[] = { { "json", no_argument, 0, 'j' }, { 0, 0, 0, 0 } };
    const cli_cmd cc = { "ctrbox-table", "inspect", inspect_help, opts, 0 };
    cli_help_check(&cc, argc, argv);
    int c;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) json = 1;
    if (argc - optind != 1) cli_fail(&cc, "give one model or table folder");
    dir = argv[optind];
    char err[1024];
    tsrc s;
    if (tsrc_open(&s, dir, err, sizeof err) < 0) die("%s", err);
    long long pass = catalog_pass(&s);
    json_t *j = json_object(), *tables = json_array();
    json_object_set_new(j, "path", json_string(s.path));
    json_object_set_new(j, "storage", json_string(s.n_shard ? "ssd-tier-sharded" : s.tier ? "ssd-tier" : "model-file"));
    json_object_set_new(j, "model", json_string(s.model_name));
    json_object_set_new(j, "disk_bytes", json_integer((json_int_t)s.disk_bytes));
    json_object_set_new(j, "last_committed_pass", pass >= 0 ? json_integer(pass) : json_null());
    for (int tb = 0; tb < s.n; tb++) {
        stats st = { 0 };
        if (tsrc_scan(&s, tb, stats_row, &st, err, sizeof err) < 0) die("%s", err);
        json_t *t = json_object(), *sh = json_array(), *ch = json_array(), *top = json_array();
        json_object_set_new(t, "table", json_integer(tb));
        json_object_set_new(t, "dim", json_integer(s.d[tb].dim));
        json_object_set_new(t, "first_order_weight", json_boolean(s.d[tb].has_w));
        json_object_set_new(t, "optimizer", json_string(sparse_opt_name((sparse_opt_kind)s.d[tb].opt)));
        json_object_set_new(t, "state_floats", json_integer(s.d[tb].state));
        json_object_set_new(t, "row_bytes", json_integer((json_int_t)s.d[tb].row_bytes));
        json_object_set_new(t, "rows", json_integer((json_int_t)st.rows));
        json_object_set_new(t, "show_sum", json_real(st.show_sum));
        json_object_set_new(t, "click_sum", json_real(st.click_sum));
        int last = 0;
        for (int b = 0; b < HBINS; b++)
            if (st.show_hist[b] || st.click_hist[b]) last = b;
        for (int b = 0; b <= last; b++) {
            json_array_append_new(sh, json_integer((json_int_t)st.show_hist[b]));
            json_array_append_new(ch, json_integer((json_int_t)st.click_hist[b]));
        }
        json_object_set_new(t, "show_histogram_log2", sh);
        json_object_set_new(t, "click_histogram_log2", ch);
        for (int k = 0; k < st.ntop; k++) {
            json_t *e = json_object();
            char dec[32];   /* keys everywhere: unsigned decimal (a string: JSON numbers stop at 2^53) */
            snprintf(dec, sizeof dec, "%llu", (unsigned long long)st.top[k].key);
            json_object_set_new(e, "key", json_string(dec));
            json_object_set_new(e, "show", json_real(st.top[k].show));
            json_object_set_new(e, "click", json_real(st.top[k].click));
            json_object_set_new(e, "last_pass", json_integer(st.top[k].last_pass));
            json_array_append_new(top, e);
        }
        json_object_set_new(t, "top_keys", top);
        json_array_append_new(tables, t);
        if (!json) {
            if (tb == 0)
                printf("%s (%s, %s): %.1f MB on disk\n", s.path, s.n_shard ? "SSD tier, sharded" : s.tier ? "SSD tier" : "model file", s.model_name,
                       (double)s.disk_bytes / 1e6);
            printf("table %d: dim %d%s, %s (%d state floats), %llu rows of %zu bytes; shows %.0f, clicks %.0f\n", tb,
                   s.d[tb].dim, s.d[tb].has_w ? " + weight" : "", sparse_opt_name((sparse_opt_kind)s.d[tb].opt),
                   s.d[tb].state, (unsigned long long)st.rows, s.d[tb].row_bytes, st.show_sum, st.click_sum);
            printf("  show histogram (0, [1,2), [2,4), ...):");
            for (int b = 0; b <= last; b++) printf(" %llu", (unsigned long long)st.show_hist[b]);
            printf("\n  click histogram:");
            for (int b = 0; b <= last; b++) printf(" %llu", (unsigned long long)st.click_hist[b]);
            printf("\n  most shown keys:");
            for (int k = 0; k < st.ntop; k++) printf(" %llu (%.0f)", (unsigned long long)st.top[k].key, st.top[k].show);
            printf("\n");
        }
    }
    if (!json && pass >= 0) printf("last committed pass: %lld\n", pass);
    json_object_set_new(j, "tables", tables);
    if (json) {
        char *out = json_dumps(j, JSON_INDENT(1) | JSON_REAL_PRECISION(9));
        printf("%s\n", out);
        free(out);
    }
    json_decref(j);
    tsrc_close(&s);
    return 0;
}

/* ---- export ---- */

typedef enum { FMT_TEXT, FMT_NPY, FMT_HUGECTR } tfmt;

static tfmt fmt_of(const char *cmd, const char *s)
{
    if (!strcmp(s, "text")) return FMT_TEXT;
    if (!strcmp(s, "npy")) return FMT_NPY;
    if (!strcmp(s, "hugectr")) return FMT_HUGECTR;
    die("%s: format '%s': want text, npy or hugectr", cmd, s);
}

/* A NumPy .npy v1.0 header for a little-endian array of dtype ('<u8', '<f4') and shape. */
static void npy_header(FILE *f, const char *dtype, uint64_t n, int cols)
{
    char dict[128];
    int dl = cols > 0 ? snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%llu, %d), }", dtype,
                                 (unsigned long long)n, cols)
                      : snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%llu,), }", dtype,
                                 (unsigned long long)n);
    int total = 10 + dl + 1;
    int pad = (64 - total % 64) % 64;
    uint16_t hl = (uint16_t)(dl + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fwrite(&hl, 2, 1, f);
    fwrite(dict, 1, (size_t)dl, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
}

typedef struct {
    tfmt fmt;
    int with_opt, V, S, dim, has_w;
    FILE *a, *b, *c, *d, *e;   /* text: a; npy: keys, values, counters, state, passes; hugectr: key, emb_vector */
    uint64_t rows, seen, total;
    long long since;        /* only rows last seen after this pass (-1: all) */
    cli_progress pg;
} exporter;

static int export_row(void *ctx, const emb_row_head *h)
{
    exporter *x = ctx;
    const float *v = (const float *)(h + 1), *st = v + x->V;
    x->seen++;
    if ((x->seen & 4095) == 0) cli_progress_tick(&x->pg, x->seen, x->total);
    if (x->since >= 0 && (long long)h->last_pass <= x->since) return 0;
    x->rows++;
    if (x->fmt == FMT_TEXT) {
        fprintf(x->a, "%llu\t%.9g\t%.9g", (unsigned long long)h->key, h->show, h->click);
        for (int i = 0; i < x->V; i++) fprintf(x->a, "\t%.9g", v[i]);
        for (int i = 0; x->with_opt && i < x->S; i++) fprintf(x->a, "\t%.9g", st[i]);
        fputc('\n', x->a);
    } else if (x->fmt == FMT_NPY) {
        int64_t k = (int64_t)h->key;
        float cnt[2] = { h->show, h->click };
        fwrite(&k, 8, 1, x->a);
        fwrite(v, sizeof(float), (size_t)x->V, x->b);
        fwrite(cnt, sizeof cnt, 1, x->c);
        fwrite(&h->last_pass, 4, 1, x->e);
        if (x->with_opt) fwrite(st, sizeof(float), (size_t)x->S, x->d);
    } else {
        int64_t k = (int64_t)h->key;
        fwrite(&k, 8, 1, x->a);
        fwrite(v + x->has_w, sizeof(float), (size_t)x->dim, x->b);
    }
    return 0;
}

static FILE *open_out(durable_file *f, const char *dir, const char *name)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int r = durable_open(f, p);
    if (r < 0) die("%s: cannot create: %s", p, strerror(-r));
    return f->f;
}

static void commit_out(durable_file *f)
{
    if (!f->f) return;
    char *p = xstrdup(f->path);
    int r = durable_commit(f);
    if (r < 0) die("%s: cannot write: %s", p, strerror(-r));
    free(p);
}

static int int_arg(const char *name, const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*end || end == s || errno || v < lo || v > hi) die("%s %s: want a whole number from %ld to %ld", name, s, lo, hi);
    return (int)v;
}

/* An output (a file, or export's folder of npy or HugeCTR files) that would land among the files
 * the command reads: with --force, `convert t --dtype fp16 t/COMMIT.ctrbox` replaced the folder's
 * commit record and the folder no longer opened. Refused whatever --force says. */
static void refuse_output_in_source(const char *out, const char *dir, const tsrc *s)
{
    struct stat os, fs;
    if (stat(out, &os) < 0) return;
    char *copy = xstrdup(out), *dcopy = xstrdup(dir);
    const char *folder = S_ISDIR(os.st_mode) ? out : dirname(copy);
    struct stat ds;
    const char *dir_folder = stat(dir, &ds) == 0 && !S_ISDIR(ds.st_mode) ? dirname(dcopy) : dir;   /* a model file's folder */
    if (stat(folder, &fs) == 0 && (util_same_file(dir_folder, &fs) || util_same_file(s->meta.table_dir, &fs)))
        die("%s is in %s, which this command reads: it would be replaced; write it elsewhere", out,
            util_same_file(dir_folder, &fs) ? dir_folder : s->meta.table_dir);
    free(copy), free(dcopy);
}

static int table_arg(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || end == s || v < 0 || v > 65535) die("--table %s: want a table number", s);
    return (int)v;
}

/* export, and delta (export --since PASS --to text --with-optimizer: an update file import applies) */
static int cmd_export(int argc, char **argv, int delta)
{
    static const struct option opts[] = {
        { "to", required_argument, 0, 't' }, { "with-optimizer", no_argument, 0, 'o' },
        { "table", required_argument, 0, 'n' }, { "since", required_argument, 0, 's' },
        { "force", no_argument, 0, 'F' }, { 0, 0, 0, 0 },
    };
    const cli_cmd cc = { "ctrbox-table", delta ? "delta" : "export", delta ? delta_help : export_help, opts, 0 };
    cli_help_check(&cc, argc, argv);
    const char *to = delta ? "text" : NULL;
    int with_opt = delta, tb = 0, force = 0, c;
    long long since = -1;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        if (c == 't') to = optarg;
        else if (c == 'o') with_opt = 1;
        else if (c == 'n') tb = table_arg(optarg);
        else if (c == 'F') force = 1;
        else if (c == 's') {
            char *end;
            since = strtoll(optarg, &end, 10);
            if (*end || end == optarg || since < 0) die("--since %s: want a pass number", optarg);
        }
        else cli_usage_error(&cc, "unexpected option");
    }
    if (delta && (since < 0 || argc - optind != 2)) cli_fail(&cc, "want DIR --since PASS OUT");
    if (!to || argc - optind != 2) cli_fail(&cc, "want DIR --to text|npy|hugectr OUT");
    if (since >= 0 && !strcmp(to, "npy")) die("--since: with text or hugectr output (npy needs the row count first)");
    const char *dir = argv[optind], *out = argv[optind + 1];
    tfmt fmt = fmt_of("export", to);
    if (fmt == FMT_HUGECTR && with_opt) die("export --to hugectr: HugeCTR's sparse model holds no optimizer state");
    char err[1024];
    tsrc s;
    if (tsrc_open(&s, dir, err, sizeof err) < 0) die("%s", err);
    if (tb >= s.n) die("export: %s has %d table(s)", dir, s.n);
    if (since >= 0) {   /* a pass from the future: nothing could have changed after it, say so */
        long long last = catalog_pass(&s);
        if (last < 0)
            for (int i = 0; i < s.n; i++)
                for (size_t r = 0; s.m && r < emb_table_rows(model_table(s.m, i)); r++)
                    if ((long long)emb_table_head(model_table(s.m, i), (uint32_t)r)->last_pass > last)
                        last = emb_table_head(model_table(s.m, i), (uint32_t)r)->last_pass;
        if (last >= 0 && since > last)
            die("--since %lld: %s's last pass is %lld; no row can have changed after pass %lld", since, dir, last, since);
    }
    tdesc *d = &s.d[tb];
    uint64_t n = tsrc_rows(&s, tb);
    exporter x = { fmt, with_opt, tdesc_values(d), d->state, d->dim, d->has_w, NULL, NULL, NULL, NULL, NULL, 0, 0, n, since,
                   { 0 } };
    cli_progress_start(&x.pg, "export", "rows");
    durable_file fa = { 0 }, fb = { 0 }, fc = { 0 }, fd = { 0 }, fe = { 0 };
    refuse_output_in_source(out, dir, &s);
    if (fmt == FMT_TEXT) {
        refuse_existing_output(out, force);
        int r = durable_open(&fa, out);
        if (r < 0) die("%s: cannot create: %s", out, strerror(-r));
        x.a = fa.f;
    } else {
        const char *names[] = { "keys.npy", "values.npy", "counters.npy", "passes.npy", "state.npy", "key", "emb_vector" };
        for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
            char p[4200];
            snprintf(p, sizeof p, "%s/%s", out, names[i]);
            refuse_existing_output(p, force);
        }
        if (mkdir(out, 0755) < 0 && errno != EEXIST) die("%s: cannot create folder: %s", out, strerror(errno));
        if (fmt == FMT_NPY) {
            x.a = open_out(&fa, out, "keys.npy");
            x.b = open_out(&fb, out, "values.npy");
            x.c = open_out(&fc, out, "counters.npy");
            x.e = open_out(&fe, out, "passes.npy");
            npy_header(x.a, "<u8", n, 0);   /* keys: uint64, as printed everywhere */
            npy_header(x.b, "<f4", n, x.V);
            npy_header(x.c, "<f4", n, 2);
            npy_header(x.e, "<u4", n, 0);
            if (with_opt) {
                x.d = open_out(&fd, out, "state.npy");
                npy_header(x.d, "<f4", n, x.S);
            }
        } else {
            x.a = open_out(&fa, out, "key");
            x.b = open_out(&fb, out, "emb_vector");
        }
    }
    int scanned = tsrc_scan(&s, tb, export_row, &x, err, sizeof err);
    cli_progress_end(&x.pg);
    if (scanned < 0) {
        durable_abort(&fa), durable_abort(&fb);
        if (fc.f) durable_abort(&fc);
        if (fd.f) durable_abort(&fd);
        if (fe.f) durable_abort(&fe);
        die("%s", err);
    }
    if (x.seen != n) die("export: %s: %llu rows read, the index counts %llu", dir, (unsigned long long)x.seen, (unsigned long long)n);
    commit_out(&fa), commit_out(&fb), commit_out(&fc), commit_out(&fd), commit_out(&fe);
    fprintf(stderr, "exported %llu rows of table %d (dim %d) to %s\n", (unsigned long long)x.rows, tb, d->dim, out);
    tsrc_close(&s);
    return 0;
}

/* ---- import ---- */

/* One input row: key, counters, values (V), optional state (S). */
typedef struct {
    tfmt fmt;
    const char *in;
    int V, S, dim, has_w;
    int has_state;
    /* text */
    FILE *f;
    char *line;
    size_t cap;
    uint64_t lineno;
    /* npy / hugectr */
    FILE *fk, *fv, *fc, *fs, *fp;
    uint64_t n, i;
} reader;

static void rd_die(const reader *r, const char *what)
{
    if (r->fmt == FMT_TEXT) die("%s:%llu: %s", r->in, (unsigned long long)r->lineno, what);
    die("%s: row %llu: %s", r->in, (unsigned long long)r->i, what);
}

/* npy header: returns the data offset; checks dtype and shape */
static void npy_open(reader *r, FILE **fp, const char *name, const char *dtype, uint64_t *n, int cols)
{
    char p[4200];
    snprintf(p, sizeof p, "%s/%s", r->in, name);
    FILE *f = fopen(p, "rb");
    if (!f) die("%s: cannot open: %s", p, strerror(errno));
    unsigned char m[10];
    if (fread(m, 1, 10, f) != 10 || memcmp(m, "\x93NUMPY", 6) != 0) die("%s: not a .npy file (bad magic)", p);
    uint32_t hl = m[8] | (uint32_t)m[9] << 8;
    if (m[6] != 1) {
        unsigned char e[2];
        if (fread(e, 1, 2, f) != 2) die("%s: truncated header", p);
        hl |= (uint32_t)e[0] << 16 | (uint32_t)e[1] << 24;
    }
    if (hl > 65536) die("%s: header too long", p);
    char *h = xcalloc(hl + 1, 1);
    if (fread(h, 1, hl, f) != hl) die("%s: truncated header", p);
    char want[32], alt[32] = "-";
    snprintf(want, sizeof want, "'descr': '%s'", dtype);
    if (!strcmp(dtype, "<u8")) snprintf(alt, sizeof alt, "'descr': '<i8'");   /* the same 64 bits (older exports) */
    if (!strstr(h, want) && !strstr(h, alt)) die("%s: dtype is not %s%s", p, dtype, strcmp(dtype, "<u8") ? "" : " (or <i8)");
    if (strstr(h, "'fortran_order': True")) die("%s: Fortran order is not supported", p);
    const char *sh = strstr(h, "'shape': (");
    unsigned long long rows = 0;
    int c2 = 0, got = sh ? sscanf(sh, "'shape': (%llu, %d)", &rows, &c2) : 0;
    if (cols > 0 ? got != 2 : got < 1) die("%s: shape is not (rows%s)", p, cols > 0 ? ", columns" : ",");
    if (cols > 0 && c2 != cols) die("%s: %d columns, the table's rows have %d", p, c2, cols);
    if (*n != UINT64_MAX && rows != *n) die("%s: %llu rows, keys.npy has %llu", p, rows, (unsigned long long)*n);
    long data = ftell(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    size_t esz = strcmp(dtype, "<u8") ? 4 : 8;
    if ((uint64_t)(size - data) != rows * (uint64_t)(cols > 0 ? cols : 1) * esz)
        die("%s: %ld data bytes, the header's shape needs %llu (truncated?)", p, size - data,
            (unsigned long long)(rows * (uint64_t)(cols > 0 ? cols : 1) * esz));
    fseek(f, data, SEEK_SET);
    free(h);
    *n = rows;
    *fp = f;
}

static void reader_open(reader *r)
{
    if (r->fmt == FMT_TEXT) {
        r->f = fopen(r->in, "r");
        if (!r->f) die("%s: cannot open: %s", r->in, strerror(errno));
        /* import reads its input twice (checked, then imported): a pipe gave nothing the second
         * time, "imported 0 rows", exit 0 */
        struct stat st;
        if (fstat(fileno(r->f), &st) == 0 && !S_ISREG(st.st_mode))
            die("%s: not a regular file (a pipe or a device): import reads its input twice, checked and then imported; "
                "write it to a file first", r->in);
        return;
    }
    r->n = UINT64_MAX;
    if (r->fmt == FMT_NPY) {
        npy_open(r, &r->fk, "keys.npy", "<u8", &r->n, 0);
        npy_open(r, &r->fv, "values.npy", "<f4", &r->n, r->V);
        char p[4200];
        snprintf(p, sizeof p, "%s/counters.npy", r->in);
        if (access(p, F_OK) == 0) npy_open(r, &r->fc, "counters.npy", "<f4", &r->n, 2);
        snprintf(p, sizeof p, "%s/passes.npy", r->in);
        if (access(p, F_OK) == 0) npy_open(r, &r->fp, "passes.npy", "<u4", &r->n, 0);
        snprintf(p, sizeof p, "%s/state.npy", r->in);
        if (access(p, F_OK) == 0) {
            npy_open(r, &r->fs, "state.npy", "<f4", &r->n, r->S);
            r->has_state = 1;
        }
        return;
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/key", r->in);
    r->fk = fopen(p, "rb");
    if (!r->fk) die("%s: cannot open: %s", p, strerror(errno));
    snprintf(p, sizeof p, "%s/emb_vector", r->in);
    r->fv = fopen(p, "rb");
    if (!r->fv) die("%s: cannot open: %s", p, strerror(errno));
    fseek(r->fk, 0, SEEK_END);
    fseek(r->fv, 0, SEEK_END);
    long kb = ftell(r->fk), vb = ftell(r->fv);
    rewind(r->fk);
    rewind(r->fv);
    if (kb % 8) die("%s/key: %ld bytes, not a whole number of int64 keys", r->in, kb);
    if ((uint64_t)vb != (uint64_t)kb / 8 * (uint64_t)r->dim * 4)
        die("%s: %ld keys but %ld bytes of vectors: the table's dim %d needs %llu (mismatched count or dimension)",
            r->in, kb / 8, vb, r->dim, (unsigned long long)(kb / 8 * r->dim * 4));
    r->n = (uint64_t)kb / 8;
}

static void reader_close(reader *r)
{
    FILE *fs[] = { r->f, r->fk, r->fv, r->fc, r->fs, r->fp };
    for (int i = 0; i < 6; i++)
        if (fs[i]) fclose(fs[i]);
    free(r->line);
    memset(r, 0, sizeof *r);
}

/* The next row into h (values and, if the input has it, state after them): 1, or 0 at the end.
 * A bad row dies with its line or row number. */
static int reader_next(reader *r, emb_row_head *h)
{
    float *v = (float *)(h + 1);
    memset(h, 0, sizeof *h);
    if (r->fmt == FMT_TEXT) {
        ssize_t len = getline(&r->line, &r->cap, r->f);
        if (len < 0) return 0;
        r->lineno++;
        char *p = r->line, *end;
        errno = 0;
        h->key = strtoull(p, &end, 10);   /* which takes a sign ("-1" wrapped to 2^64 - 1) and spaces */
        if (!(*p >= '0' && *p <= '9') || *end != '\t' || errno)
            rd_die(r, "want key<TAB>show<TAB>click<TAB>values... with the key an unsigned decimal below 2^64");
        p = end + 1;
        int n = 0, want = r->V + 2;
        float buf[2];
        for (;;) {
            float x = strtof(p, &end);
            if (end == p || !isfinite(x)) rd_die(r, "a field is not a finite number");
            if (n < 2) buf[n] = x;
            else if (n - 2 < r->V + r->S) v[n - 2] = x;
            n++;
            p = end;
            if (*p == '\t') p++;
            else break;
        }
        if (*p != '\n' && *p != 0) rd_die(r, "trailing characters");
        if (n != want && n != want + r->S) {
            char msg[160];
            snprintf(msg, sizeof msg, "%d values; the table's rows have %d (or %d with the optimizer state)", n - 2, r->V,
                     r->V + r->S);
            rd_die(r, msg);
        }
        h->show = buf[0];
        h->click = buf[1];
        r->has_state = n == want + r->S && r->S > 0;
        return 1;
    }
    if (r->i >= r->n) return 0;
    int64_t k;
    if (fread(&k, 8, 1, r->fk) != 1) rd_die(r, "truncated keys");
    h->key = (uint64_t)k;
    if (r->fmt == FMT_NPY) {
        if (fread(v, sizeof(float), (size_t)r->V, r->fv) != (size_t)r->V) rd_die(r, "truncated values");
        float cnt[2] = { 0, 0 };
        if (r->fc && fread(cnt, sizeof cnt, 1, r->fc) != 1) rd_die(r, "truncated counters");
        h->show = cnt[0];
        h->click = cnt[1];
        if (r->fp && fread(&h->last_pass, 4, 1, r->fp) != 1) rd_die(r, "truncated passes");
        if (r->fs && fread(v + r->V, sizeof(float), (size_t)r->S, r->fs) != (size_t)r->S) rd_die(r, "truncated state");
    } else {
        if (r->has_w) v[0] = 0;
        if (fread(v + r->has_w, sizeof(float), (size_t)r->dim, r->fv) != (size_t)r->dim) rd_die(r, "truncated vectors");
    }
    r->i++;
    /* as the text reader: a NaN or inf went into the table silently (scores of nan, or a run that
     * "diverged" at its first step) */
    int n = r->V + (r->fmt == FMT_NPY && r->fs ? r->S : 0);
    for (int j = 0; j < n; j++)
        if (!isfinite(v[j])) rd_die(r, "a value is not a finite number");
    if (!isfinite(h->show) || !isfinite(h->click)) rd_die(r, "a counter is not a finite number");
    return 1;
}

/* (key, row) pairs by key, then row */
static int cmp_key_row(const void *x, const void *y)
{
    const uint64_t *a = x, *b = y;
    if (a[0] != b[0]) return a[0] < b[0] ? -1 : 1;
    return (a[1] > b[1]) - (a[1] < b[1]);
}

static int cmd_import(int argc, char **argv)
{
    static const struct option opts[] = {
        { "from", required_argument, 0, 'f' }, { "table", required_argument, 0, 'n' },
        { "dim", required_argument, 0, 'd' }, { "w", required_argument, 0, 'w' },
        { "opt", required_argument, 0, 'o' }, { 0, 0, 0, 0 },
    };
    const cli_cmd cc = { "ctrbox-table", "import", import_help, opts, 0 };
    cli_help_check(&cc, argc, argv);
    const char *from = NULL, *optname = "adam";
    int tb = 0, dim = 0, has_w = -1, c;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        if (c == 'f') from = optarg;
        else if (c == 'n') tb = table_arg(optarg);
        else if (c == 'd') dim = int_arg("--dim", optarg, 1, 4096);   /* atoi: "--dim 8x" was 8, "--dim x" "give --dim" */
        else if (c == 'w') has_w = int_arg("--w", optarg, 0, 1);
        else if (c == 'o') optname = optarg;
        else cli_usage_error(&cc, "unexpected option");
    }
    if (!from || argc - optind != 2) cli_fail(&cc, "want --from text|npy|hugectr IN DIR");
    const char *in = argv[optind], *dir = argv[optind + 1];
    tfmt fmt = fmt_of("import", from);
    char err[1024];
    tsrc s = { 0 };
    char idx[4200];
    snprintf(idx, sizeof idx, "%s/index", dir);
    tdesc d;
    sparse_opt opt;
    if (access(idx, F_OK) == 0) {   /* extend a folder: its layout rules */
        memset(&s, 0, sizeof s);
        if (open_folder(&s, dir, 0, err, sizeof err) < 0) die("%s", err);
        if (tb >= s.n) die("import: %s has %d table(s)", dir, s.n);
        d = s.d[tb];
        if (dim && dim != d.dim) die("import: --dim %d, but %s's table %d has dim %d", dim, dir, tb, d.dim);
    } else {
        if (dim <= 0 || dim > 65536) die("import: %s is not a table folder; give --dim (and --w, --opt) to create one", dir);
        int k = sparse_opt_from_name(optname);
        if (k < 0) die("--opt %s: want adam, adagrad, rowwise_adagrad, sgd or ftrl", optname);
        emb_table_config tc = { dim, has_w > 0, { 0 }, 0.01f, 0, 1, 0, 0 };
        sparse_opt_default(&tc.opt, (sparse_opt_kind)k);
        emb_table *t = emb_table_create(&tc);
        d = (tdesc){ dim, has_w > 0, emb_table_state_floats(t), k, emb_table_row_bytes(t) };
        emb_table_destroy(t);
        tb = 0;
    }
    sparse_opt_default(&opt, (sparse_opt_kind)d.opt);
    reader r = { .fmt = fmt, .in = in, .V = tdesc_values(&d), .S = d.state, .dim = d.dim, .has_w = d.has_w };
    emb_row_head *h = xaligned_alloc(8, d.row_bytes);
    /* first pass: validate everything; nothing is written before the input is known good. A key
     * twice would be two puts in one commit (and counted twice): refused, naming both rows. */
    reader_open(&r);
    uint64_t n = 0, cap = 1 << 16;
    uint64_t (*seen)[2] = xmalloc(cap * sizeof *seen);   /* (key, row) */
    while (reader_next(&r, h)) {
        if (n == cap) seen = xrealloc(seen, (cap *= 2) * sizeof *seen);
        seen[n][0] = h->key;
        seen[n][1] = n;
        n++;
    }
    reader_close(&r);
    qsort(seen, n, sizeof *seen, cmp_key_row);
    for (uint64_t i = 1; i < n; i++)
        if (seen[i][0] == seen[i - 1][0])
            die("%s: key %llu appears twice (%s %llu and %llu)", in, (unsigned long long)seen[i][0],
                fmt == FMT_TEXT ? "lines" : "rows", (unsigned long long)(seen[i - 1][1] + (fmt == FMT_TEXT)),
                (unsigned long long)(seen[i][1] + (fmt == FMT_TEXT)));
    free(seen);
    if (!s.tier) {   /* create the folder only now */
        char layout[256];
        snprintf(layout, sizeof layout, "import;t0:dim=%d,w=%d,opt=%s,state=%d", d.dim, d.has_w,
                 sparse_opt_name((sparse_opt_kind)d.opt), d.state);
        memset(&s, 0, sizeof s);
        if (emb_tier_open(&s.tier, dir, 1, &d.row_bytes, layout, 0, 64u << 20, err, sizeof err) < 0) die("%s", err);
    }
    /* second pass: commits of up to a million rows; keys already there are replaced */
    r = (reader){ .fmt = fmt, .in = in, .V = tdesc_values(&d), .S = d.state, .dim = d.dim, .has_w = d.has_w };
    reader_open(&r);
    enum { CHUNK = 1 << 20 };
    uint8_t *recs = xmalloc((size_t)CHUNK * d.row_bytes);
    uint64_t *keys = xmalloc(CHUNK * sizeof *keys), *aux = xmalloc(CHUNK * sizeof *aux), done = 0, replaced = 0;
    for (;;) {
        size_t m = 0;
        while (m < CHUNK && reader_next(&r, (emb_row_head *)(recs + m * d.row_bytes))) {
            emb_row_head *e = (emb_row_head *)(recs + m * d.row_bytes);
            if (!r.has_state) sparse_opt_init_state(&opt, (float *)(e + 1) + r.V, r.V);
            keys[m++] = e->key;
        }
        if (m == 0) break;
        if (done + m > n) die("%s: changed while it was imported (it had %llu rows when checked); %llu rows were imported", in,
                              (unsigned long long)n, (unsigned long long)done);
        if (emb_tier_lookup(s.tier, tb, keys, m, aux, err, sizeof err) < 0) die("%s", err);
        emb_tier_batch *b = emb_tier_begin(s.tier);
        for (size_t i = 0; i < m; i++) {
            emb_row_head *e = (emb_row_head *)(recs + i * d.row_bytes);
            e->aux = aux[i];
            replaced += aux[i] != 0;
            emb_tier_put(b, tb, e);
        }
        done += m;
        if (emb_tier_commit(b, NULL, 0, err, sizeof err) < 0) die("%s", err);   /* a trainer's catalog stays */
    }
    reader_close(&r);
    if (done != n)
        die("%s: changed while it was imported (it had %llu rows when checked); %llu rows were imported", in,
            (unsigned long long)n, (unsigned long long)done);
    fprintf(stderr, "imported %llu rows into table %d of %s (%llu replaced)\n", (unsigned long long)done, tb, dir,
            (unsigned long long)replaced);
    free(recs), free(keys), free(aux), free(h);
    tsrc_close(&s);
    return 0;
}

/* ---- convert: rows for serving, quantized ---- *
 * File: "CTRBXQRW", u32 version 1, u32 dtype (2 fp16, 3 bf16, 4 int8: quant.h), u64 rows, u32 values per
 * row (first-order weight, then the embedding), u32 reserved; per row: u64 key, for int8 an f32
 * scale, then the values (2 bytes each, or 1); last, the XXH64 of everything before it. */

typedef struct {
    FILE *f;
    XXH64_state_t *st;
    quant_type q;
    int V;
    uint64_t rows;
    uint8_t *buf;
    float *back;
    double max_err, sum_err, n_vals;
} converter;

static void put_sum(converter *c, const void *p, size_t n)
{
    fwrite(p, 1, n, c->f);
    XXH64_update(c->st, p, n);
}

static int convert_row(void *ctx, const emb_row_head *h)
{
    converter *c = ctx;
    const float *v = (const float *)(h + 1);
    put_sum(c, &h->key, 8);
    put_sum(c, c->buf, quant_encode(c->q, v, c->V, c->buf));
    quant_decode(c->q, c->buf, c->V, c->back);
    for (int i = 0; i < c->V; i++) {
        double e = fabs((double)c->back[i] - v[i]);
        if (e > c->max_err) c->max_err = e;
        c->sum_err += e;
        c->n_vals++;
    }
    c->rows++;
    return 0;
}

static int cmd_convert(int argc, char **argv)
{
    static const struct option opts[] = {
        { "dtype", required_argument, 0, 'd' }, { "table", required_argument, 0, 'n' }, { "force", no_argument, 0, 'F' },
        { 0, 0, 0, 0 },
    };
    const cli_cmd cc = { "ctrbox-table", "convert", convert_help, opts, 0 };
    cli_help_check(&cc, argc, argv);
    int dtype = 0, tb = 0, force = 0, c;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        if (c == 'd') {
            dtype = quant_from_name(optarg);
            if (!dtype || dtype == QUANT_FP32) die("--dtype %s: want fp16, bf16 or int8", optarg);
        } else if (c == 'n') {
            tb = table_arg(optarg);
        } else if (c == 'F') {
            force = 1;
        } else {
            cli_usage_error(&cc, "unexpected option");
        }
    }
    if (!dtype || argc - optind != 2) cli_fail(&cc, "want DIR --dtype fp16|bf16|int8 OUT [--table N]");
    const char *dir = argv[optind], *out = argv[optind + 1];
    char err[1024];
    tsrc s;
    if (tsrc_open(&s, dir, err, sizeof err) < 0) die("%s", err);
    if (tb >= s.n) die("convert: %s has %d table(s)", dir, s.n);
    refuse_output_in_source(out, dir, &s);
    refuse_existing_output(out, force);
    durable_file df;
    int r = durable_open(&df, out);
    if (r < 0) die("%s: cannot create: %s", out, strerror(-r));
    int V = tdesc_values(&s.d[tb]);
    converter cv = { df.f, XXH64_createState(), (quant_type)dtype, V, 0, xmalloc(quant_row_bytes(QUANT_FP32, V)),
                     xmalloc((size_t)V * sizeof(float)), 0, 0, 0 };
    XXH64_reset(cv.st, 0);
    uint64_t n = tsrc_rows(&s, tb);
    uint32_t hv[4] = { 1, (uint32_t)dtype, 0, 0 };
    put_sum(&cv, "CTRBXQRW", 8);
    put_sum(&cv, hv, 8);
    put_sum(&cv, &n, 8);
    hv[2] = (uint32_t)cv.V;
    put_sum(&cv, &hv[2], 8);
    if (tsrc_scan(&s, tb, convert_row, &cv, err, sizeof err) < 0) {
        durable_abort(&df);
        die("%s", err);
    }
    if (cv.rows != n) {
        durable_abort(&df);
        die("convert: %s: %llu rows read, the index counts %llu", dir, (unsigned long long)cv.rows, (unsigned long long)n);
    }
    uint64_t sum = XXH64_digest(cv.st);
    XXH64_freeState(cv.st);
    free(cv.buf);
    free(cv.back);
    fwrite(&sum, 8, 1, df.f);
    if ((r = durable_commit(&df)) < 0) die("%s: cannot write: %s", out, strerror(-r));
    printf("converted %llu rows (%d values each) to %s: largest error %.3g, mean error %.3g\n", (unsigned long long)n,
           cv.V, dtype == QUANT_INT8 ? "int8 (a scale per row)" : quant_name((quant_type)dtype), cv.max_err,
           cv.n_vals ? cv.sum_err / cv.n_vals : 0.0);
    tsrc_close(&s);
    return 0;
}

/* ---- merge: the union of two table folders ---- */

enum { MCHUNK = 65536 };

typedef struct {
    emb_tier *out;
    int tb, by_show, phase;   /* phase 0: copy A; 1: B against what A left */
    size_t rb, n;
    uint8_t *rec, *have;      /* MCHUNK rows; the rows OUT holds for their keys */
    uint64_t *keys, *aux;
    uint64_t copied, replaced, added;
    char err[1024];
    int failed;
} merger;

static void merge_flush(merger *g)
{
    if (g->n == 0 || g->failed) return;
    if (g->phase == 1 && emb_tier_fetch(g->out, g->tb, g->keys, g->n, g->have, g->aux, g->err, sizeof g->err) < 0) {
        g->failed = 1;
        return;
    }
    emb_tier_batch *b = emb_tier_begin(g->out);
    for (size_t i = 0; i < g->n; i++) {
        emb_row_head *h = (emb_row_head *)(g->rec + i * g->rb);
        h->aux = 0;
        if (g->phase == 1 && g->aux[i]) {   /* in both: the newer pass wins (or more shows); A on a tie */
            const emb_row_head *a = (const emb_row_head *)(g->have + i * g->rb);
            int newer = g->by_show ? h->show > a->show : h->last_pass > a->last_pass;
            if (!newer) continue;
            h->aux = g->aux[i];
            g->replaced++;
        } else if (g->phase == 1) {
            g->added++;
        } else {
            g->copied++;
        }
        emb_tier_put(b, g->tb, h);
    }
    if (emb_tier_commit(b, NULL, 0, g->err, sizeof g->err) < 0) g->failed = 1;
    g->n = 0;
}

static int merge_row(void *ctx, const emb_row_head *h)
{
    merger *g = ctx;
    memcpy(g->rec + g->n * g->rb, h, g->rb);
    g->keys[g->n++] = h->key;
    if (g->n == MCHUNK) merge_flush(g);
    return g->failed;
}

static int cmd_merge(int argc, char **argv)
{
    static const struct option opts[] = { { "by", required_argument, 0, 'b' }, { 0, 0, 0, 0 } };
    const cli_cmd cc = { "ctrbox-table", "merge", merge_help, opts, 0 };
    cli_help_check(&cc, argc, argv);
    int by_show = 0, c;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        if (c == 'b' && (!strcmp(optarg, "pass") || !strcmp(optarg, "show"))) by_show = !strcmp(optarg, "show");
        else cli_fail(&cc, "--by %s: want pass or show", optarg);
    }
    if (argc - optind != 3) cli_fail(&cc, "want A B OUT [--by pass|show]");
    const char *da = argv[optind], *db = argv[optind + 1], *dout = argv[optind + 2];
    char err[1024], idx[4200];
    tsrc a = { 0 }, b = { 0 }, o = { 0 };
    if (open_folder(&a, da, 1, err, sizeof err) < 0 || open_folder(&b, db, 1, err, sizeof err) < 0) die("%s", err);
    if (a.n != b.n) die("merge: %s has %d tables, %s %d", da, a.n, db, b.n);
    for (int i = 0; i < a.n; i++)
        if (memcmp(&a.d[i], &b.d[i], sizeof a.d[i]))
            die("merge: table %d differs (dim %d / %d, optimizer %s / %s)", i, a.d[i].dim, b.d[i].dim,
                sparse_opt_name((sparse_opt_kind)a.d[i].opt), sparse_opt_name((sparse_opt_kind)b.d[i].opt));
    snprintf(idx, sizeof idx, "%s/index", dout);
    if (access(idx, F_OK) == 0) die("merge: %s already holds a table folder; give a new one", dout);
    size_t *rb = xcalloc((size_t)a.n, sizeof *rb);
    for (int i = 0; i < a.n; i++) rb[i] = a.d[i].row_bytes;
    if (emb_tier_open(&o.tier, dout, a.n, rb, emb_tier_layout(a.tier), 0, 64u << 20, err, sizeof err) < 0) die("%s", err);
    merger g = { .out = o.tier, .by_show = by_show };
    for (int tb = 0; tb < a.n; tb++) {
        g.tb = tb;
        g.rb = rb[tb];
        g.rec = xmalloc(MCHUNK * g.rb);
        g.have = xmalloc(MCHUNK * g.rb);
        g.keys = xmalloc(MCHUNK * sizeof *g.keys);
        g.aux = xmalloc(MCHUNK * sizeof *g.aux);
        for (g.phase = 0; g.phase < 2; g.phase++) {
            if (emb_tier_scan_rows(g.phase ? b.tier : a.tier, tb, (emb_tier_row_fn)merge_row, &g, err, sizeof err) < 0)
                die("%s", err);
            merge_flush(&g);
            if (g.failed) die("%s", g.err);
        }
        free(g.rec), free(g.have), free(g.keys), free(g.aux);
    }
    printf("merged %s and %s into %s: %llu rows of A, %llu added and %llu replaced from B\n", da, db, dout,
           (unsigned long long)g.copied, (unsigned long long)g.added, (unsigned long long)g.replaced);
    free(rb);
    tsrc_close(&a), tsrc_close(&b), tsrc_close(&o);
    return 0;
}

/* ---- shrink: the CTR accessor's delete rules, offline (embedding/shrink.h, as the trainer) ---- */

typedef struct {
    emb_shrink_opts o;
    long long pass;            /* --pass, or -1: the last committed pass (the newest a row saw) */
    emb_shrink_result r;
    emb_tier *tier;
} shrinker;

static void shrink_folder(const char *dir, shrinker *sk);
static void shrink_resolve_pass(const char *dir, shrinker *sk);

/* A model folder: its in-memory tables shrunk and the model file written again (durably); a
 * model whose rows live in a table folder is shrunk there, and its model file then names the
 * folder's new commit (other models saved with that folder will see that their rows changed). */
static int shrink_model_file(const char *dir, shrinker *sk)
{
    char err[1024];
    model *m;
    model_meta meta;
    int lock = folder_lock(dir, MODEL_LOCK, 0);
    if (lock < 0) die("%s: %s", dir, lock == -EBUSY ? "a trainer is writing this model folder" : strerror(-lock));
    if (modelfile_load(dir, &m, &meta, err, sizeof err) < 0) die("%s", err);
    sk->o.spare_fields = meta.cfg.min_show > 1 ? meta.schema.n_fields : 0;
    if (meta.table_dir) {
        /* the model file says first that this shrink is under way (with its settings): should it
         * be interrupted, the model is refused until the same shrink runs again and finishes */
        tsrc s = { 0 };
        if (open_folder(&s, meta.table_dir, 0, err, sizeof err) < 0) die("%s", err);
        sk->tier = s.tier;
        shrink_resolve_pass(meta.table_dir, sk);
        char rule[256];
        snprintf(rule, sizeof rule, "threshold %g, unseen %u, nonclk-coeff %g, clk-coeff %g, decay %g, pass %lld",
                 sk->o.rule.threshold, sk->o.rule.unseen, sk->o.rule.nonclk, sk->o.rule.clk, (double)sk->o.decay, sk->pass);
        if (meta.table_shrink && strcmp(meta.table_shrink, rule))
            die("shrink: %s: an interrupted shrink with other settings (%s) must be finished first", dir, meta.table_shrink);
        if (!meta.table_shrink) {
            if (modelfile_check_tier(dir, &meta, s.tier, err, sizeof err) < 0) die("%s", err);
            meta.table_shrink = xstrdup(rule);
            if (modelfile_save(dir, m, &meta, err, sizeof err) < 0) die("%s", err);
        }
        shrink_folder(meta.table_dir, sk);
        meta.table_commits = emb_tier_commits(s.tier);
        /* the folder's deletions are not in the tables' deletion record (the commit's catalog keeps
         * it): a delta for serving can only start after them, from a base exported now */
        if (sk->r.deleted && meta.deltas_from < meta.passes + 1) meta.deltas_from = meta.passes + 1;
        free(meta.table_shrink);
        meta.table_shrink = NULL;
        if (modelfile_save(dir, m, &meta, err, sizeof err) < 0) die("%s", err);
        tsrc_close(&s);
        model_meta_free(&meta);
        model_destroy(m);
        return 0;
    }
    if (sk->pass < 0) {   /* the newest pass any row saw */
        sk->pass = 0;
        for (int tb = 0; tb < model_n_tables(m); tb++)
            for (size_t r = 0; r < emb_table_rows(model_table(m, tb)); r++)
                if (emb_table_head(model_table(m, tb), (uint32_t)r)->last_pass > sk->pass)
                    sk->pass = emb_table_head(model_table(m, tb), (uint32_t)r)->last_pass;
    }
    sk->o.pass = (uint32_t)sk->pass;
    sk->o.note_pass = meta.passes + 1;   /* a delta since the model's pass carries these deletions */
    for (int tb = 0; tb < model_n_tables(m); tb++)
        if (emb_shrink_table(model_table(m, tb), NULL, tb, NULL, &sk->o, &sk->r, err, sizeof err) < 0) die("%s", err);
    if (modelfile_save(dir, m, &meta, err, sizeof err) < 0) die("%s", err);
    printf("shrink %s at pass %lld: %llu keys deleted, %llu kept\n", dir, sk->pass, (unsigned long long)sk->r.deleted,
           (unsigned long long)sk->r.kept);
    model_meta_free(&meta);
    model_destroy(m);
    return 0;
}

static double num(const char *name, const char *arg)
{
    char *end;
    double v = strtod(arg, &end);
    if (*end || end == arg || !(v >= 0)) die("--%s %s: want a non-negative number", name, arg);
    return v;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int cmd_shrink(int argc, char **argv)
{
    static const struct option opts[] = {
        { "threshold", required_argument, 0, 't' }, { "unseen", required_argument, 0, 'u' },
        { "nonclk-coeff", required_argument, 0, 'n' }, { "clk-coeff", required_argument, 0, 'c' },
        { "decay", required_argument, 0, 'd' }, { "pass", required_argument, 0, 'p' }, { 0, 0, 0, 0 },
    };
    const cli_cmd cc = { "ctrbox-table", "shrink", shrink_help, opts, 0 };
    cli_help_check(&cc, argc, argv);
    shrinker sk = { .o = { .rule = { -1, 0, 0.1, 1 }, .commit_every = 1u << 20 }, .pass = -1 };
    int c;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        if (c == 't') sk.o.rule.threshold = num("threshold", optarg);
        else if (c == 'u') sk.o.rule.unseen = (uint32_t)num("unseen", optarg);
        else if (c == 'n') sk.o.rule.nonclk = num("nonclk-coeff", optarg);
        else if (c == 'c') sk.o.rule.clk = num("clk-coeff", optarg);
        else if (c == 'd') sk.o.decay = (float)num("decay", optarg);
        else if (c == 'p') sk.pass = (long long)num("pass", optarg);
        else cli_usage_error(&cc, "unexpected option");
    }
    if (argc - optind != 1) cli_fail(&cc, "want DIR [--threshold S] [--unseen N] ...");
    if (sk.o.rule.threshold < 0 && !sk.o.rule.unseen) cli_fail(&cc, "give --threshold S and/or --unseen N");
    const char *dir = argv[optind];
    char err[1024];
    char *mf = modelfile_path(dir);
    int is_model = access(mf, F_OK) == 0, named = strcmp(mf, dir) != 0 || !strcmp(base_name(dir), "model.ctrbox");
    free(mf);
    if (is_model && !named) die("shrink: %s: give the model's folder (the model file is rewritten as model.ctrbox in it)", dir);
    if (is_model) {
        char *folder = modelfile_folder(dir);
        int r = shrink_model_file(folder, &sk);
        free(folder);
        return r;
    }
    tsrc s = { 0 };
    if (open_folder(&s, dir, 0, err, sizeof err) < 0) die("%s", err);
    sk.tier = s.tier;
    sk.o.spare_fields = 65536;   /* a bare folder does not say its fields or whether it used admission */
    shrink_folder(dir, &sk);
    tsrc_close(&s);
    return 0;
}

/* Without --pass: the table folder's last committed pass (sk->tier open). */
static void shrink_resolve_pass(const char *dir, shrinker *sk)
{
    if (sk->pass < 0) {
        tsrc s = { .tier = sk->tier };
        sk->pass = catalog_pass(&s);
        if (sk->pass < 0 && (sk->o.rule.unseen || sk->o.decay > 0)) die("shrink: %s has no committed pass; give --pass P", dir);
        if (sk->pass < 0) sk->pass = 0;
    }
}

/* Shrink the table folder dir, open for writing as sk->tier. */
static void shrink_folder(const char *dir, shrinker *sk)
{
    char err[1024];
    shrink_resolve_pass(dir, sk);
    sk->o.pass = (uint32_t)sk->pass;
    /* commits of up to 2^20 deletions (each atomic; the iterator reads a snapshot): after a crash
     * part of the keys are gone, and running shrink again with the same --pass finishes the job */
    emb_tier_batch *b = emb_tier_begin(sk->tier);
    for (int tb = 0; tb < emb_tier_tables(sk->tier); tb++)
        if (emb_shrink_table(NULL, sk->tier, tb, &b, &sk->o, &sk->r, err, sizeof err) < 0) {
            if (b) emb_tier_abort(b);
            die("%s", err);
        }
    if (emb_tier_commit(b, NULL, 0, err, sizeof err) < 0) die("%s", err);
    printf("shrink %s at pass %lld: %llu keys deleted, %llu kept\n", dir, sk->pass, (unsigned long long)sk->r.deleted,
           (unsigned long long)sk->r.kept);
}

int main(int argc, char **argv)
{
    util_set_prog("ctrbox-table");
    process_setup();
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        cli_print_version("ctrbox-table");
        return 0;
    }
    const char *cmd = argv[1];
    argv[1] = argv[0];
    argc--, argv++;
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc, argv);
    if (!strcmp(cmd, "export")) return cmd_export(argc, argv, 0);
    if (!strcmp(cmd, "delta")) return cmd_export(argc, argv, 1);
    if (!strcmp(cmd, "shrink")) return cmd_shrink(argc, argv);
    if (!strcmp(cmd, "merge")) return cmd_merge(argc, argv);
    if (!strcmp(cmd, "convert")) return cmd_convert(argc, argv);
    if (!strcmp(cmd, "import")) return cmd_import(argc, argv);
    static const char *const cmds[] = { "inspect", "export", "import", "delta", "merge", "convert", "shrink", NULL };
    cli_unknown_command("ctrbox-table", cmd, cmds);
}
