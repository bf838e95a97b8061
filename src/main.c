/*
 * main.c: the ctrbox program.
 *   train    train a model from logs or cbx files, early-stopping on a validation set
 *   eval     AUC, logloss, calibration (and gAUC) of a model on data, or of a scores file
 *   predict  one probability per input row
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <ini.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../embedding/quant.h"
#include "../embedding/tier.h"
#include "../dense/backend.h"
#include "../dense/device.h"
#include "../dense/plan.h"
#include "../io/parse.h"
#include "../io/stream.h"
#include "cli.h"
#include "commands.h"
#include "dist.h"
#include "metrics.h"
#include "modelfile.h"
#include "passes.h"
#include "score.h"
#include "train.h"
#include "../io/util.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ctrbox COMMAND [options]      (ctrbox COMMAND --help: the command's options and defaults)\n"
            "  train           train a model from logs or cbx files (early stopping on --valid; passes; SSD tier)\n"
            "  eval            AUC, logloss, calibration (and gAUC) of a model on labeled data, or of a scores file\n"
            "  predict         one probability per input row (the data may lack labels)\n"
            "  export-serving  a read-only serving bundle of a model (or a delta since a pass)\n"
            "  info            what a model is: configuration, layers, tables, training history, input settings\n"
            "  report          one self-contained HTML page: training curves, ROC/PR, calibration, fields, tier\n"
            "  plan            time each layer on each device and place the layers (HeterPS)\n"
            "  devices         the devices found (the CUDA backend is loaded at run time)\n"
            "  --version       version, git commit, CUDA backend built or not\n"
            "tools: ctrbox-data (generate, convert, inspect, split data; keys of tokens), ctrbox-table (table folders)\n");
}

static const char train_help[] =
    "usage: ctrbox train --model KIND --train FILE... [--valid FILE...] --out DIR [--format F] [options]\n"
    "  --config FILE.ini      options as key = value (long option names; a switch = true or false; a key once\n"
    "                         a file), overridden by a later file and by the command line (whose --train and\n"
    "                         --valid files replace the file's)\n"
    "  --model KIND           lr|fm|ffm|dnn|widedeep|deepfm|dcnv2|dlrm (required)\n"
    "  --train FILE...        training files (text in --format, or cbx); a folder: its files in name order\n"
    "  --valid FILE...        validation files: evaluated each epoch, the best model kept, early stopping\n"
    "  --out DIR              the model folder: model.ctrbox and log.jsonl (required)\n"
    "model:\n"
    "  --dim N                embedding size (16; ffm: 4)\n"
    "  --hidden L             MLP sizes (400,400,400)\n"
    "  --bottom L             dlrm's bottom MLP on the dense values (64,DIM)\n"
    "  --cross N              dcnv2 cross layers (3)\n"
    "  --batchnorm            batch normalisation in the MLP (off)\n"
    "  --dropout P            dropout in the MLP (0)\n"
    "  --pool sum|mean        multi-hot fields pooled (sum)\n"
    "  --interaction dot|cat  dlrm's interaction (dot)\n"
    "  --table-per-field      one table per field (off: one table shared by all fields)\n"
    "  --field-dim NAME=SIZE,...  a field's own table and embedding size (none)\n"
    "training:\n"
    "  --epochs N             (10; 1 with --follow)\n"
    "  --batch N              (4096)\n"
    "  --seed S               (1)\n"
    "  --threads N            (2)\n"
    "  --shuffle-rows N       rows shuffled together (1000000; 0: file order)\n"
    "  --lanes G              train as G lanes whose gradients are summed exactly, as under mpirun: the\n"
    "                         model is the same for any number of processes (12 under mpirun; none: one\n"
    "                         process trains batch by batch)\n"
    "  --lr X                 dense learning rate (0.001)\n"
    "  --dense-opt NAME       adam|adagrad|sgd (adam)\n"
    "  --dense-l2 X           dense L2 (0)\n"
    "  --sparse-lr X          sparse learning rate (the --lr value)\n"
    "  --sparse-opt NAME      adam|adagrad|rowwise_adagrad|sgd|ftrl (adam)\n"
    "  --l2 X                 L2 on the rows a step touches (0)\n"
    "  --emb-l2 X             L2 on the whole table, every step (0; not with --table-dir)\n"
    "  --init-std X           initial embedding values' standard deviation (0.01)\n"
    "  --min-show N           a key gets a row once seen N times (0: at once)\n"
    "  --admit-mb MB          with --min-show: the shows of keys not yet admitted are counted in a sketch\n"
    "                         of MB over all tables, inside --cache-mb (0: exact counts, memory grows with\n"
    "                         the keys) (16; with --init the model's; under mpirun or --lanes 0)\n"
    "  --patience N           epochs without a better validation AUC before stopping (2)\n"
    "  --lr-decay F           learning rates times F after an epoch without improvement (1: never)\n"
    "  --eval-every STEPS     evaluate (and keep the best) every STEPS steps too (0: each epoch only)\n"
    "  --quiet                no progress lines (the final summary stays)\n"
    "  --placement P          cpu|gpu|auto|LAYER=DEV,... where the layers run (cpu; see ctrbox plan); gpu:\n"
    "                         the whole model\n"
    "  --gpu-mem-mb N         with the embedding layer on the GPU: its memory for the pass's rows (values and\n"
    "                         optimizer state; a pass that does not fit trains in pieces) (half the GPU's;\n"
    "                         0: none, the batch's rows go up each step and are updated on the cpu)\n"
    "passes and the SSD tier:\n"
    "  --pass-rows N          train in passes of N rows, each shuffled as a whole (none: with a table folder\n"
    "                         the shuffle buffer's rows, --shuffle-rows, and the epoch is one pass)\n"
    "  --table-dir DIR        sparse rows in an SSD tier in DIR (RocksDB index + slot files) (none: in memory);\n"
    "                         a pass is trained in parts whose rows fit --cache-mb, and committed (the\n"
    "                         model is the same at any budget)\n"
    "  --init MODEL_DIR       warm start: the model's dense and sparse state (optimizer state and counters\n"
    "                         too) trained on with new --train files; the pass clock goes on; rates, decay,\n"
    "                         shrink, batch, epochs may change, the architecture may not. A tiered model\n"
    "                         trains on in its table folder; so does a table folder\n"
    "                         of pretrained rows from ctrbox-table import (fresh dense layers)\n"
    "  --resume DIR           continue the run committed in table folder DIR (same options otherwise;\n"
    "                         starts it if DIR holds none, so a restarted job can always pass it)\n"
    "  --cache-mb N           rows kept in memory with a table folder (1024)\n"
    "  --cache-policy P       lfu|lru (lfu)\n"
    "  --decay R              show/click multiplied by R (0 < R < 1) at each pass boundary (none)\n"
    "  --shrink-threshold S   at each epoch end delete keys whose score is below S (off)\n"
    "  --shrink-unseen N      ... and keys unseen for more than N passes (off)\n"
    "  --nonclk-coeff X       score = (show - click) * nonclk + click * clk (0.1)\n"
    "  --clk-coeff X          (1)\n"
    "a stream of logs (instead of --train):\n"
    "  --follow DIR           train each file that comes into DIR once, in name order, when complete: renamed\n"
    "                         into place, or marked by NAME.done, or a sub-folder with a _SUCCESS file. The\n"
    "                         model in --out records what it trained; after a kill the same command goes on.\n"
    "                         Each file is scored before it trains (progressive validation). SIGTERM/SIGINT\n"
    "                         stop after the next commit\n"
    "  --no-progressive       do not score each file before training on it\n"
    "  --follow-idle S        end when nothing new comes for S seconds (else run until a signal)\n"
    "  --follow-done          files need a NAME.done (the default once DIR holds any .done file)\n"
    "  --export-dir E         after a file: a serving bundle in E (a base, then deltas) and E/manifest.json\n"
    "  --export-every N       ... when N passes went by (1)\n"
    "(--profile, --save-profile, --fields, --dense, --reps, --cpu-mem-mb, --rows-per-step: ctrbox plan's)\n";

static const char plan_help[] =
    "usage: ctrbox plan --model KIND [model options] [options]\n"
    "time each layer on each device, place the layers (HeterPS), print the plan; the model options are\n"
    "train's (--dim, --hidden, --bottom, --cross, --batch, --placement ...: see ctrbox train --help)\n"
    "  --fields N             categorical fields of the model measured (26)\n"
    "  --dense N              dense values (13)\n"
    "  --profile FILE         plan from a saved profile instead of measuring\n"
    "  --save-profile FILE    save the measured profile\n"
    "  --placement P          auto|cpu|gpu|LAYER=DEV,... (auto)\n"
    "  --reps N               timing repetitions per layer (5)\n"
    "  --cpu-mem-mb N         memory the CPU side may use (the profile's)\n"
    "  --gpu-mem-mb N         memory the GPU side may use (the profile's)\n"
    "  --rows-per-step N      rows a step brings to the GPU's pass tier that it does not hold yet (batch x\n"
    "                         fields: every row new; fewer when keys repeat within a pass)\n"
    "plan takes train's options too; those that do not shape the model are ignored. train's options:\n";

static const char eval_help[] =
    "usage: ctrbox eval --model DIR|DIR/model.ctrbox --data FILE... [options]\n"
    "       ctrbox eval --bundle FILE [--delta FILE]... --data FILE... [options]\n"
    "       ctrbox eval --scores FILE [--json]\n"
    "AUC, logloss and calibration (mean predicted CTR / observed CTR: 1 is calibrated, above 1 the model\n"
    "over-predicts) of a model on labeled data. The data is read as the model was trained (format, schema,\n"
    "field offsets, numeric mode): --data alone is enough. Under mpirun each process reads its share of\n"
    "the data and predicts its batches; the output is one process's.\n"
    "  --model DIR            the model folder, or its model.ctrbox file\n"
    "  --bundle FILE          a serving bundle (ctrbox export-serving) instead of --model\n"
    "  --delta FILE           a delta bundle applied to --bundle, in the order given (none)\n"
    "  --table-dir DIR        a tiered model's table folder, where it is not where the model says (the\n"
    "                         folder beside the model is found by itself when both moved together)\n"
    "  --data FILE...         labeled data\n"
    "  --pred-out FILE        also write label<TAB>probability lines (none)\n"
    "  --out FILE             the same as --pred-out\n"
    "  --group FIELD          also the group AUC (gAUC) over this categorical field (none)\n"
    "  --id-column NAME       (predict's; refused here)\n"
    "  --json                 one JSON object instead of the text line\n"
    "  --scores FILE          evaluate label<TAB>probability lines instead of a model\n"
    "the input options below are the model's unless given; one that changes the fields is refused\n";

static const char predict_help[] =
    "usage: ctrbox predict --model DIR|DIR/model.ctrbox --data FILE... --out FILE [options]\n"
    "       ctrbox predict --bundle FILE [--delta FILE]... --data FILE... --out FILE [options]\n"
    "one probability per line of the data, in order (a bad line, within --max-bad-ratio, is scored nan in\n"
    "its place); the data may lack labels (criteo: 39 columns; libsvm/libffm: no leading label; csv: no\n"
    "label column). The data is read as the model was trained. Under mpirun each process reads its share\n"
    "of the data and predicts its batches; rank 0 writes the file.\n"
    "  --model DIR            the model folder, or its model.ctrbox file\n"
    "  --bundle FILE          a serving bundle instead of --model\n"
    "  --delta FILE           a delta bundle applied to --bundle, in the order given (none)\n"
    "  --table-dir DIR        a tiered model's table folder, where it is not where the model says\n"
    "  --data FILE...         the rows to score (- is standard input)\n"
    "  --out FILE             the probabilities (required; - is standard output)\n"
    "  --pred-out FILE        the same as --out\n"
    "  --id-column NAME       csv: NAME,probability lines under a header (none)\n"
    "  --group FIELD          (eval's; ignored)\n"
    "  --json                 (eval's; ignored)\n"
    "  --scores FILE          (eval's)\n"
    "the input options below are the model's unless given; one that changes the fields is refused\n";

static const char export_help[] =
    "usage: ctrbox export-serving --model DIR --out BUNDLE [options]\n"
    "one read-only file for serving: dense layers, rows (no optimizer state), the model description\n"
    "  --model DIR            the model folder, or its model.ctrbox file\n"
    "  --out BUNDLE           the bundle written (an existing one only with --force)\n"
    "  --dtype T              fp32|fp16|bf16|int8 row values (fp32; int8: a scale per row)\n"
    "  --since PASS|MODEL_DIR a delta: the rows trained after that pass (a model folder: its pass) and the\n"
    "                         keys deleted since; predict --bundle BASE --delta D1 --delta D2 applies them.\n"
    "                         A model folder is named in the delta by its state, so that the delta goes\n"
    "                         only on a base (or delta) exported from that model; with a pass number\n"
    "                         that is not checked\n"
    "  --table-dir DIR        a tiered model's table folder, where it is not where the model says\n"
    "  --force                replace an existing --out\n";

static const char devices_help[] =
    "usage: ctrbox devices\n"
    "the devices found: the CPU, and a GPU when the CUDA backend (libctrbox_cuda.so beside the program,\n"
    "or $CTRBOX_CUDA_LIB) loads and finds one ($CTRBOX_GPU: which, 0)\n";

/* Read label<TAB>probability lines; dies with file:line on a bad one. */
static size_t read_scores(const char *path, float **label_out, double **prob_out)
{
    char err[600];
    io_stream *s;
    if (io_stream_open(&s, path, 0, err, sizeof err) < 0) die("%s", err);
    size_t n = 0, cap = 1 << 16;
    float *label = xmalloc(cap * sizeof *label);
    double *prob = xmalloc(cap * sizeof *prob);
    io_line line;
    int ret;
    while ((ret = io_stream_next_line(s, &line)) > 0) {
        const char *tab = line.overlong ? NULL : memchr(line.ptr, '\t', line.len);
        double l, p;
        if (!tab || parse_number(line.ptr, (size_t)(tab - line.ptr), &l) < 0 || (l != 0 && l != 1) ||
            parse_number(tab + 1, line.len - (size_t)(tab - line.ptr) - 1, &p) < 0 || p < 0 || p > 1)
            die("%s:%llu: want 'label<TAB>probability' with label 0 or 1 and probability in [0, 1]", path,
                (unsigned long long)line.lineno);
        if (n == cap) {
            cap *= 2;
            label = xrealloc(label, cap * sizeof *label);
            prob = xrealloc(prob, cap * sizeof *prob);
        }
        label[n] = (float)l;
        prob[n] = p;
        n++;
    }
    if (ret < 0) die("%s", io_stream_error(s));
    io_stream_close(s);
    *label_out = label;
    *prob_out = prob;
    return n;
}

static json_t *jnum(double x) { return isnan(x) ? json_null() : json_real(x); }

/* The metrics of data (what names it in a warning) as a line, or as JSON */
static void print_result(const eval_result *r, const char *data, int json, int with_model)
{
    /* an AUC of one label is nan (and calibration with no positive): said, where it was printed bare */
    if (r->rows && (r->positives == 0 || r->positives == r->rows))
        fprintf(stderr, "ctrbox: warning: %s holds only %s: its AUC is undefined (nan)%s; evaluate on data with both "
                "labels\n", data, r->positives ? "positives" : "negatives",
                with_model && !r->positives ? ", and so is calibration (no click to compare with)" : "");
    if (json) {
        json_t *o = json_object();
        json_object_set_new(o, "auc", jnum(r->auc));
        json_object_set_new(o, "logloss", jnum(r->logloss));
        json_object_set_new(o, "rows", json_integer((json_int_t)r->rows));
        json_object_set_new(o, "positives", json_integer((json_int_t)r->positives));
        if (with_model) json_object_set_new(o, "calibration", jnum(r->calibration));
        if (!isnan(r->gauc)) json_object_set_new(o, "gauc", json_real(r->gauc));
        char *s = json_dumps(o, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
        puts(s);
        free(s);
        json_decref(o);
        return;
    }
    printf("auc %.6f  logloss %.6f  rows %zu  positives %zu", r->auc, r->logloss, r->rows, r->positives);
    if (with_model) printf("  calibration %.4f", r->calibration);
    if (!isnan(r->gauc)) printf("  gauc %.6f", r->gauc);
    printf("\n");
}


/* An id as a csv field: quoted when it holds a comma, a quote or a line break. */
static void put_csv_field(FILE *f, const char *s, size_t n)
{
    if (!memchr(s, ',', n) && !memchr(s, '"', n) && !memchr(s, '\n', n) && !memchr(s, '\r', n)) {
        fwrite(s, 1, n, f);
        return;
    }
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"') fputc('"', f);
        fputc(s[i], f);
    }
    fputc('"', f);
}

/* What eval and predict are asked: a model (a folder, or a bundle and its deltas in order), data,
 * outputs. predict_only: score (rows may lack labels; with id_column the output is
 * "ID,probability" lines under a header, else one probability per line of the data, a bad one's nan). */
typedef struct {
    const char *dir, *bundle;
    char **deltas;
    int n_deltas;
    char **data;
    int n_data;
    cli_input *in;
    int format_given;
    const char *pred_out, *group;
    int json, predict_only;
    const char *id_column;
    const char *table_dir;        /* a tiered model's table folder given on the command line, or NULL */
} eval_job;

static int model_data_eval(const eval_job *j)
{
    const char *dir = j->dir, *pred_out = j->pred_out, *group = j->group, *id_column = j->id_column;
    char **data = j->data;
    int n_data = j->n_data, json = j->json, predict_only = j->predict_only;
    cli_input *in = j->in;
    model *m;
    model_meta meta;
    const score_src src = { dir, j->bundle, j->deltas, j->n_deltas, j->table_dir };
    score_load(&src, &m, &meta);
    char msg[1200];
    if (pred_out && score_output_check(pred_out, &src, data, n_data, &meta, msg, sizeof msg) < 0) {   /* every rank alike */
        if (dist_rank() == 0) die("%s", msg);
        exit(1);
    }
    int gf = -1;
    if (group) {
        for (uint32_t f = 0; f < meta.schema.n_fields; f++)
            if (!strcmp(meta.schema.names[f], group)) gf = (int)f;
        if (gf < 0 || meta.schema.kind[gf] != FIELD_CAT) die("--group %s: no categorical field of that name", group);
    }
    sample_block b;
    double *prob;
    eval_result r;
    /* predict's line N is the data's record N: a bad line (within --max-bad-ratio) was dropped and
     * every later probability sat a line early, exit 0; it is scored nan in its place. With ids
     * each line names its row. */
    score_gaps gaps = { 0 }, *gp = predict_only && !id_column ? &gaps : NULL;
    if (dist_size() > 1) {   /* each rank reads its share and predicts its batches; rank 0 writes */
        sample_block mine;
        uint64_t *row, total;
        score_read_shared(&src, m, &meta, data, n_data, in, j->format_given, predict_only, id_column, &mine, &row, &total,
                          gp);
        if (!predict_only && !total) {
            if (dist_rank() == 0) die("%s%s: no rows to evaluate", data[0], n_data > 1 ? " ..." : "");
            exit(1);
        }
        score_predict_shared(m, &mine, row, total, gf, &b, &prob);
        block_free(&mine);
        free(row);
        if (dist_rank() != 0) {
            free(gaps.bad);
            block_free(&b);
            model_meta_free(&meta);
            model_destroy(m);
            return 0;
        }
        train_block_metrics(&b, prob, gf, &r);
    } else {
        score_read(&src, m, &meta, data, n_data, in, j->format_given, predict_only, id_column, &b, gp);
        if (!predict_only && !b.rows) die("%s%s: no rows to evaluate", data[0], n_data > 1 ? " ..." : "");
        prob = xmalloc((b.rows ? b.rows : 1) * sizeof *prob);
        train_evaluate_block(m, &b, prob, gf, &r);
    }
    if (pred_out) {
        durable_file f;
        int ret = durable_open(&f, pred_out);
        if (ret < 0) die("%s: cannot create: %s", pred_out, strerror(-ret));
        if (id_column) {
            put_csv_field(f.f, id_column, strlen(id_column));
            fputs(",probability\n", f.f);
        }
        if (gp && gaps.records != b.rows + gaps.n_bad)
            die("%s: %llu records read, %zu rows and %zu bad lines: cannot keep one line per record", pred_out,
                (unsigned long long)gaps.records, b.rows, gaps.n_bad);
        size_t k = 0;
        for (size_t i = 0; i < b.rows; i++) {
            for (; gp && k < gaps.n_bad && gaps.bad[k] == i + k; k++) fputs("nan\n", f.f);
            if (id_column) {
                put_csv_field(f.f, b.ids + b.id_ptr[i], (size_t)(b.id_ptr[i + 1] - b.id_ptr[i]));
                fprintf(f.f, ",%.9g\n", prob[i]);
            } else if (predict_only) {
                fprintf(f.f, "%.9g\n", prob[i]);
            } else {
                fprintf(f.f, "%d\t%.9g\n", b.label[i] > 0.5f, prob[i]);
            }
        }
        for (; gp && k < gaps.n_bad; k++) fputs("nan\n", f.f);
        if ((ret = durable_commit(&f)) < 0) die("%s: cannot write: %s", pred_out, strerror(-ret));
        if (gaps.n_bad)
            fprintf(stderr, "ctrbox predict: %zu bad line%s scored nan, each in its line of %s\n", gaps.n_bad,
                    gaps.n_bad == 1 ? "" : "s", pred_out);
    }
    free(gaps.bad);
    if (!predict_only) {
        char name[4200];
        snprintf(name, sizeof name, "%s%s", data[0], n_data > 1 ? " ..." : "");
        print_result(&r, name, json, 1);
    }
    free(prob);
    block_free(&b);
    model_meta_free(&meta);
    model_destroy(m);
    return 0;
}

static int cmd_eval(int argc, char **argv, int predict)
{
    static const struct option extra[] = {
        { "scores", required_argument, 0, 's' }, { "json", no_argument, 0, 'j' },
        { "model", required_argument, 0, 'm' },  { "data", required_argument, 0, 'd' },
        { "pred-out", required_argument, 0, 'p' }, { "out", required_argument, 0, 'p' },
        { "group", required_argument, 0, 'g' }, { "bundle", required_argument, 0, 'b' },
        { "id-column", required_argument, 0, 'i' }, { "delta", required_argument, 0, 'D' },
        { "table-dir", required_argument, 0, 'T' }, { 0, 0, 0, 0 },
    };
    struct option *opts = cli_options_with_input(extra);
    const cli_cmd cc = { "ctrbox", predict ? "predict" : "eval", predict ? predict_help : eval_help, opts, 1 };
    cli_help_check(&cc, argc, argv);
    cli_input in;
    cli_input_init(&in);
    const char *scores = NULL, *dir = NULL, *pred = NULL, *group = NULL, *bundle = NULL, *id_column = NULL,
               *table_dir = NULL;
    char **data = xcalloc((size_t)argc + 1, sizeof *data), **deltas = xcalloc((size_t)argc + 1, sizeof *deltas);
    int json = 0, n_data = 0, n_deltas = 0, format_given = 0, c;
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        if (c == CLI_OPT_FORMAT) format_given = 1;
        if (cli_input_option(&in, c, optarg)) continue;
        switch (c) {
        case 's': scores = optarg; break;
        case 'j': json = 1; break;
        case 'm': dir = optarg; break;
        case 'b': bundle = optarg; break;
        case 'd': data[n_data++] = optarg; cli_more_args(argc, argv, data, &n_data); break;
        case 'p': pred = optarg; break;
        case 'g': group = optarg; break;
        case 'i': id_column = optarg; break;
        case 'D': deltas[n_deltas++] = optarg; break;
        case 'T': table_dir = optarg; break;
        default: cli_usage_error(&cc, "unexpected option");
        }
    }
    int ret = 0;
    if (dir || bundle) dense_cpu_preflight(0);
    if (n_deltas && !bundle) die("%s: --delta FILE goes with --bundle BASE (the base bundle it changes)", predict ? "predict" : "eval");
    eval_job job = { dir, bundle, deltas, n_deltas, data, n_data, &in, format_given, pred, group, json, predict, id_column,
                     table_dir };
    if (predict) {
        if ((!dir && !bundle) || !n_data || !pred)
            cli_fail(&cc, "--model DIR (or --bundle FILE), --data and --out are required");
        job.group = NULL;
        job.json = 0;
        ret = model_data_eval(&job);
    } else if (dir || bundle) {
        if (!n_data) cli_fail(&cc, "--data FILE is required with --model or --bundle");
        if (id_column) die("eval: --id-column is predict's (eval needs labels, not ids)");
        ret = model_data_eval(&job);
    }
    free(deltas);
    if (predict || dir || bundle) {
        free(data);
        free(opts);
        cli_input_free(&in);
        return ret;
    }
    if (!scores) cli_fail(&cc, "give --model DIR --data FILE, or --scores FILE");
    if (dist_size() > 1) {
        if (dist_rank() == 0) fprintf(stderr, "ctrbox eval: --scores runs as one process (without mpirun)\n");
        return 2;
    }
    float *label;
    double *prob;
    size_t n = read_scores(scores, &label, &prob);
    if (!n) die("%s: no rows to evaluate", scores);   /* as eval of a model on empty data */
    eval_result r = { 0 };
    r.rows = n;
    for (size_t i = 0; i < n; i++) r.positives += label[i] > 0.5f;
    r.auc = metrics_auc(label, prob, n);
    r.logloss = metrics_logloss(label, prob, n);
    r.gauc = NAN;
    print_result(&r, scores, json, 0);
    free(label);
    free(prob);
    free(data);
    free(opts);
    cli_input_free(&in);
    return 0;
}

/* ---- train ---- */
enum {
    T_MODEL = 2000, T_TRAIN, T_VALID, T_OUT, T_DIM, T_HIDDEN, T_BOTTOM, T_CROSS, T_BN, T_DROPOUT, T_POOL, T_EPOCHS,
    T_BATCH, T_SEED, T_THREADS, T_SHUFFLE, T_LR, T_DOPT, T_DL2, T_SLR, T_SOPT, T_L2, T_EMBL2, T_INIT, T_MINSHOW, T_ADMITMB,
    T_PATIENCE, T_DECAY, T_EVERY, T_QUIET, T_CONFIG, T_INTER, T_TPF, T_FDIM, T_PASSROWS, T_TABLEDIR, T_RESUME,
    T_CACHEMB, T_CACHEPOL, T_CTRDECAY, T_SHRINKT, T_SHRINKU, T_NONCLK, T_CLK, T_PLACEMENT, T_INITFROM,
    T_FOLLOW, T_FIDLE, T_FDONE, T_NOPROG, T_EXPEVERY, T_EXPDIR, T_LANES,
    /* plan only */
    T_PROFILE, T_SAVEPROF, T_FIELDS, T_NDENSE, T_REPS, T_CPUMEM, T_GPUMEM, T_ROWSSTEP,
};
static const struct option train_extra[] = {
    { "model", required_argument, 0, T_MODEL }, { "train", required_argument, 0, T_TRAIN },
    { "valid", required_argument, 0, T_VALID }, { "out", required_argument, 0, T_OUT },
    { "dim", required_argument, 0, T_DIM }, { "hidden", required_argument, 0, T_HIDDEN },
    { "bottom", required_argument, 0, T_BOTTOM }, { "cross", required_argument, 0, T_CROSS },
    { "batchnorm", no_argument, 0, T_BN }, { "dropout", required_argument, 0, T_DROPOUT },
    { "pool", required_argument, 0, T_POOL }, { "epochs", required_argument, 0, T_EPOCHS },
    { "batch", required_argument, 0, T_BATCH }, { "seed", required_argument, 0, T_SEED },
    { "threads", required_argument, 0, T_THREADS }, { "shuffle-rows", required_argument, 0, T_SHUFFLE },
    { "lanes", required_argument, 0, T_LANES },
    { "lr", required_argument, 0, T_LR }, { "dense-opt", required_argument, 0, T_DOPT },
    { "dense-l2", required_argument, 0, T_DL2 }, { "sparse-lr", required_argument, 0, T_SLR },
    { "sparse-opt", required_argument, 0, T_SOPT }, { "l2", required_argument, 0, T_L2 },
    { "emb-l2", required_argument, 0, T_EMBL2 }, { "init-std", required_argument, 0, T_INIT },
    { "min-show", required_argument, 0, T_MINSHOW }, { "admit-mb", required_argument, 0, T_ADMITMB }, { "patience", required_argument, 0, T_PATIENCE },
    { "lr-decay", required_argument, 0, T_DECAY }, { "eval-every", required_argument, 0, T_EVERY },
    { "quiet", no_argument, 0, T_QUIET }, { "config", required_argument, 0, T_CONFIG },
    { "interaction", required_argument, 0, T_INTER }, { "table-per-field", no_argument, 0, T_TPF },
    { "field-dim", required_argument, 0, T_FDIM }, { "pass-rows", required_argument, 0, T_PASSROWS },
    { "table-dir", required_argument, 0, T_TABLEDIR }, { "resume", required_argument, 0, T_RESUME },
    { "init", required_argument, 0, T_INITFROM }, { "follow", required_argument, 0, T_FOLLOW },
    { "follow-idle", required_argument, 0, T_FIDLE }, { "follow-done", no_argument, 0, T_FDONE },
    { "no-progressive", no_argument, 0, T_NOPROG }, { "export-every", required_argument, 0, T_EXPEVERY },
    { "export-dir", required_argument, 0, T_EXPDIR },
    { "cache-mb", required_argument, 0, T_CACHEMB }, { "cache-policy", required_argument, 0, T_CACHEPOL },
    { "decay", required_argument, 0, T_CTRDECAY }, { "shrink-threshold", required_argument, 0, T_SHRINKT },
    { "shrink-unseen", required_argument, 0, T_SHRINKU }, { "nonclk-coeff", required_argument, 0, T_NONCLK },
    { "clk-coeff", required_argument, 0, T_CLK }, { "placement", required_argument, 0, T_PLACEMENT },
    { "profile", required_argument, 0, T_PROFILE }, { "save-profile", required_argument, 0, T_SAVEPROF },
    { "fields", required_argument, 0, T_FIELDS }, { "dense", required_argument, 0, T_NDENSE },
    { "reps", required_argument, 0, T_REPS }, { "rows-per-step", required_argument, 0, T_ROWSSTEP }, { "cpu-mem-mb", required_argument, 0, T_CPUMEM },
    { "gpu-mem-mb", required_argument, 0, T_GPUMEM }, { 0, 0, 0, 0 },
};

/* What `ctrbox plan` takes besides the model flags. */
typedef struct {
    const char *profile, *save_profile;
    int fields, ndense, reps;
    double cpu_mem_mb, gpu_mem_mb;   /* < 0: the profile's */
    double rows_per_step;            /* 0: every row of a batch new to the pass tier */
} plan_opts;

/* ctrbox plan: measure (or load) the profile of the model's layers, place them, print the plan. */
static int run_plan(const train_opts *o, const plan_opts *po)
{
    plan_profile p;
    char err[1200];
    printf("devices:\n%s\n", device_describe());
    if (po->profile) {
        if (plan_profile_load(&p, po->profile, err, sizeof err) < 0) die("%s", err);
        /* another model's layers: its plan was printed as if it were this one's */
        if (strcmp(p.model, model_kind_name(o->mc.kind)))
            die("%s: measured for --model %s, not %s: give that model, or measure this one (leave out --profile)",
                po->profile, p.model, model_kind_name(o->mc.kind));
        printf("profile %s (measured on: %s%s%s)\n", po->profile, p.device[PLACE_CPU], *p.device[PLACE_GPU] ? "; " : "",
               p.device[PLACE_GPU]);
    } else {
        data_schema s;
        schema_init(&s, (uint32_t)(po->ndense + po->fields));
        for (int f = 0; f < po->ndense; f++) s.kind[f] = FIELD_NUM, s.dense_slot[f] = f;
        s.n_dense = (uint32_t)po->ndense;
        char e[300];
        if (model_config_check(&o->mc, &s, e, sizeof e) < 0) die("%s", e);
        model *m = model_create(&o->mc, &s);
        plan_layer_shape shapes[PLAN_MAX_LAYERS];
        int n = model_layer_chain(m, shapes, PLAN_MAX_LAYERS);
        plan_measure(&p, model_kind_name(o->mc.kind), shapes, n, o->mc.batch, dense_opt_moments(o->mc.dopt.kind),
                     po->reps);
        model_destroy(m);
        schema_free(&s);
    }
    if (po->cpu_mem_mb >= 0) p.mem_limit[PLACE_CPU] = po->cpu_mem_mb * 1e6;
    if (po->gpu_mem_mb >= 0) p.mem_limit[PLACE_GPU] = po->gpu_mem_mb * 1e6;
    if (po->rows_per_step > 0) plan_set_rows_per_step(&p, po->rows_per_step);
    if (po->save_profile) {
        if (plan_profile_save(&p, po->save_profile, err, sizeof err) < 0) die("%s", err);
        printf("saved the profile to %s\n", po->save_profile);
    }
    place_device dev[PLAN_MAX_LAYERS];
    const char *spec = o->placement ? o->placement : "auto";
    if (plan_placement_parse(spec, &p, dev, err, sizeof err) < 0) die("%s", err);
    plan_result r;
    plan_evaluate(&p, dev, &r);
    printf("placement %s\n", spec);
    plan_print(stdout, &p, &r);
    return r.feasible ? 0 : 1;
}

static double num_arg(const char *name, const char *arg, double lo, double hi)
{
    char *end;
    double v = strtod(arg, &end);
    if (*end || end == arg || !(v >= lo && v <= hi)) die("--%s %s: want a number in [%g, %g]", name, arg, lo, hi);
    return v;
}

static int list_arg(const char *name, const char *arg, int *v)
{
    uint64_t *l;
    int n = parse_u64_list(arg, &l);
    if (n < 0 || n > MODEL_MAX_LAYERS) die("--%s %s: want up to %d sizes like 400,400,400", name, arg, MODEL_MAX_LAYERS);
    for (int i = 0; i < n; i++) {
        if (l[i] < 1 || l[i] > 65536) die("--%s %s: sizes between 1 and 65536", name, arg);
        v[i] = (int)l[i];
    }
    free(l);
    return n;
}

typedef struct {
    int argc, cap;
    char **argv;
    const char *path;
    char err[300];
    int seen[256];   /* the options this file gave, by their values (T_MODEL on, and the input options') */
    int n_seen;
    char **where;    /* (cap) "FILE:LINE" of each value in argv (NULL: not a value) */
    const char *text, *at;   /* the file's text; where the next key is looked for (the keys come in order) */
    int line;        /* at's line number */
    char **all;      /* the files' options, then the command line's: what getopt reads (held here, in memory,
                      * where LeakSanitizer finds it when an option's refusal exits) */
} ini_args;

/* The line of key `name` in the config text, from a->at on (inih gives the handler no line numbers;
 * it calls it in the file's order): its number, a->at moved past it; or, not found (an indented
 * line continues the value above it, under that key's name), the line before a->at. */
static int ini_line_of(ini_args *a, const char *name)
{
    size_t n = strlen(name);
    int line = a->line;
    for (const char *at = a->at; *at; line++) {
        const char *p = at + strspn(at, " \t");
        size_t len = strcspn(at, "\n");
        int hit = !strncmp(p, name, n) && (p[n] == '=' || p[n] == ':' || p[n] == ' ' || p[n] == '\t');
        at += len + (at[len] == '\n');
        if (hit) {
            a->at = at;
            a->line = line + 1;
            return line;
        }
    }
    return a->line - 1;
}

/* A switch's value in a config file: "batchnorm = on" or "= True" read as false and trained
 * without it, silently. -1: neither. */
static int ini_bool(const char *v)
{
    static const char *const yes[] = { "true", "yes", "on", "1" }, *const no[] = { "false", "no", "off", "0" };
    for (int i = 0; i < 4; i++) {
        if (!strcasecmp(v, yes[i])) return 1;
        if (!strcasecmp(v, no[i])) return 0;
    }
    return -1;
}

static int ini_option(void *user, const char *section, const char *name, const char *value)
{
    ini_args *a = user;
    (void)section;
    const struct option *o = NULL;
    for (const struct option *p = train_extra; p->name; p++)
        if (!strcmp(p->name, name)) o = p;
    for (const struct option *p = cli_input_options; p->name; p++)
        if (!strcmp(p->name, name)) o = p;
    if (!o) {
        snprintf(a->err, sizeof a->err, "unknown key '%s'", name);
        return 0;
    }
    if (o->val == T_CONFIG) {   /* a key train knows, which was called unknown */
        snprintf(a->err, sizeof a->err, "config = %s: a config cannot name another; give each with --config", value);
        return 0;
    }
    /* the files of train and valid add up, as on the command line; any other key given twice is
     * an edit gone wrong, not a choice (one value was silently dropped) */
    if (o->val != T_TRAIN && o->val != T_VALID) {
        for (int i = 0; i < a->n_seen; i++)
            if (a->seen[i] == o->val) {
                snprintf(a->err, sizeof a->err, "key '%s' given twice", name);
                return 0;
            }
        if (a->n_seen < (int)(sizeof a->seen / sizeof a->seen[0])) a->seen[a->n_seen++] = o->val;
    }
    int on = o->has_arg == no_argument ? ini_bool(value) : 0;
    if (on < 0) {
        snprintf(a->err, sizeof a->err, "%s = %s: want true or false (yes/no, on/off, 1/0)", name, value);
        return 0;
    }
    if (a->argc + 3 > a->cap) {
        a->cap = a->cap * 2 + 8;
        a->argv = xrealloc(a->argv, (size_t)a->cap * sizeof *a->argv);
        a->where = xrealloc(a->where, (size_t)a->cap * sizeof *a->where);
    }
    int line = ini_line_of(a, name);
    size_t n = strlen(name) + 3;
    char *flag = xmalloc(n);
    snprintf(flag, n, "--%s", name);
    if (o->has_arg == no_argument) {
        if (on) {
            a->where[a->argc] = NULL;
            a->argv[a->argc++] = flag;
        } else {   /* off: an earlier file's "on" is undone (a switch has no value, nor a place in where) */
            int k = 1;
            for (int i = 1; i < a->argc; i++)
                if (strcmp(a->argv[i], flag)) a->where[k] = a->where[i], a->argv[k++] = a->argv[i];
                else free(a->argv[i]);
            a->argc = k;
            free(flag);
        }
    } else {
        a->where[a->argc] = NULL;
        a->argv[a->argc++] = flag;
        if (asprintf(&a->where[a->argc], "%s:%d", a->path, line) < 0) a->where[a->argc] = NULL;
        a->argv[a->argc++] = xstrdup(value);
    }
    return 1;
}

/* A config file's text, read once: it was read twice (its lines checked, then parsed), and a
 * config from a pipe (`--config <(...)`, /dev/stdin) was empty the second time, a folder read as
 * empty too: its options were dropped without a word. inih reads a line in pieces of INI_MAX_LINE
 * bytes and reports the error at the line its tail looks like: a line that long is refused here, at
 * its own number; a NUL would end inih's reading of the text there. */
static char *config_read(const char *path)
{
    enum { MAX = 1 << 20 };
    FILE *f = fopen(path, "r");
    if (!f) die("%s: cannot open: %s", path, strerror(errno));
    char *text = xmalloc(MAX + 1);
    size_t n = fread(text, 1, MAX + 1, f);
    if (ferror(f)) die("%s: cannot read: %s", path, strerror(errno));
    fclose(f);
    if (n > MAX) die("%s: over %d bytes: not a config file", path, MAX);
    text[n] = 0;
    if (strlen(text) != n) die("%s: byte %zu is NUL: not a config file", path, strlen(text));
    int no = 1;
    for (const char *p = text; *p; no++) {
        size_t len = strcspn(p, "\n"), k = len;
        while (k > 0 && p[k - 1] == '\r') k--;
        if (k > INI_MAX_LINE - 2) die("%s:%d: line of %zu characters; at most %d", path, no, k, INI_MAX_LINE - 2);
        p += len + (p[len] == '\n');
    }
    return text;
}

static int cmd_train(int argc, char **argv, int plan)
{
    struct option *opts = cli_options_with_input(train_extra);
    char *plan_text = NULL;
    if (plan && asprintf(&plan_text, "%s%s", plan_help, train_help) < 0) die("out of memory");
    const cli_cmd cc = { "ctrbox", plan ? "plan" : "train", plan ? plan_text : train_help, opts, 1 };
    cli_help_check(&cc, argc, argv);
    /* a --config file's options go first, so the command line overrides them */
    ini_args ia = { 1, 8, xcalloc(8, sizeof(char *)), NULL, "" };
    ia.where = xcalloc(8, sizeof(char *));
    ia.argv[0] = argv[0];
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--config")) {
            ia.path = argv[i + 1];
            ia.n_seen = 0;   /* a later file overrides an earlier one, as the command line does */
            char *text = config_read(ia.path);
            ia.text = ia.at = text;
            ia.line = 1;
            int r = ini_parse_string(text, ini_option, &ia);
            free(text);
            if (r < 0) die("%s: out of memory", ia.path);
            if (ia.err[0]) die("%s:%d: %s", ia.path, r, ia.err);
            if (r > 0) die("%s:%d: not key = value", ia.path, r);
        }
    char **av = ia.all = xcalloc((size_t)(ia.argc + argc + 1), sizeof *av);
    int ac = 0;
    for (int i = 0; i < ia.argc; i++) av[ac++] = ia.argv[i];
    for (int i = 1; i < argc; i++) av[ac++] = argv[i];

    cli_input in;
    cli_input_init(&in);
    train_opts o = { 0 };
    model_kind kind = MODEL_COUNT;
    /* first pass: the model kind, for its defaults */
    for (int i = 1; i + 1 < ac; i++)
        if (!strcmp(av[i], "--model")) {
            int k = model_kind_from_name(av[i + 1]);
            if (k < 0) die("--model %s: want lr, fm, ffm, dnn, widedeep, deepfm, dcnv2 or dlrm", av[i + 1]);
            kind = (model_kind)k;
        }
    if (kind == MODEL_COUNT) cli_fail(&cc, "--model KIND is required (lr, fm, ffm, dnn, widedeep, deepfm, dcnv2, dlrm)");
    model_config_default(&o.mc, kind);
    o.epochs = 10;
    o.follow_idle = -1;
    o.progressive = 1;
    o.patience = 2;
    o.lr_decay = 1;
    o.shuffle_rows = 1000000;
    o.threads = 2;
    o.cache_mb = 1024;
    o.gpu_mem_mb = -1;
    o.mc.admit_mb = -1;   /* not given: train_run resolves it */
    o.cache_lfu = 1;
    o.shrink_threshold = -1;
    o.nonclk_coeff = 0.1f;
    o.clk_coeff = 1.0f;
    o.train = xcalloc((size_t)ac + 1, sizeof *o.train);
    o.valid = xcalloc((size_t)ac + 1, sizeof *o.valid);
    plan_opts po = { NULL, NULL, 26, 13, 5, -1, -1 };
    int sparse_lr_set = 0, bottom_set = 0, epochs_set = 0, train_cli = 0, valid_cli = 0, c;
    optind = 1;
    while ((c = cli_getopt(&cc, ac, av)) != -1) {
        const char *where = NULL;   /* a value from a config file: its line, in the messages that refuse it */
        for (int i = 1; optarg && i < ia.argc && !where; i++)
            if (optarg == ia.argv[i]) where = ia.where[i];
        util_die_where(where);
        if (cli_input_option(&in, c, optarg)) continue;
        switch (c) {
        case T_MODEL: case T_CONFIG: break;
        case T_TRAIN:
        case T_VALID: {
            /* the command line's files replace a config file's (they were added to them: a config
             * naming yesterday's log and `--train today.log` trained on both) */
            int *n = c == T_TRAIN ? &o.n_train : &o.n_valid, *from_cli = c == T_TRAIN ? &train_cli : &valid_cli;
            int from_config = 0;
            for (int i = 1; i < ia.argc; i++) from_config |= optarg == ia.argv[i];
            if (!*from_cli && !from_config) {
                *from_cli = 1;
                *n = 0;
            }
            char **list = c == T_TRAIN ? o.train : o.valid;
            list[(*n)++] = optarg;
            cli_more_args(ac, av, list, n);
            break;
        }
        case T_OUT: o.out = optarg; break;
        case T_DIM: o.mc.dim = (int)num_arg("dim", optarg, 1, 4096); break;
        case T_HIDDEN: o.mc.n_hidden = list_arg("hidden", optarg, o.mc.hidden); break;
        case T_BOTTOM: o.mc.n_bottom = list_arg("bottom", optarg, o.mc.bottom); bottom_set = 1; break;
        case T_CROSS: o.mc.cross_layers = (int)num_arg("cross", optarg, 0, MODEL_MAX_LAYERS); break;
        case T_BN: o.mc.batchnorm = 1; break;
        case T_DROPOUT: o.mc.dropout = (float)num_arg("dropout", optarg, 0, 0.99); break;
        case T_POOL:
            if (strcmp(optarg, "sum") && strcmp(optarg, "mean")) die("--pool %s: want sum or mean", optarg);
            o.mc.pool_mean = !strcmp(optarg, "mean");
            break;
        case T_EPOCHS: o.epochs = (int)num_arg("epochs", optarg, 1, 1e6); epochs_set = 1; break;
        case T_BATCH: o.mc.batch = (int)num_arg("batch", optarg, 1, 1 << 20); break;
        case T_SEED: o.mc.seed = (uint64_t)num_arg("seed", optarg, 0, 1e15); break;
        case T_THREADS: o.threads = (int)num_arg("threads", optarg, 1, 256); break;
        case T_LANES: o.lanes = (int)num_arg("lanes", optarg, 1, 65536); break;
        case T_SHUFFLE: o.shuffle_rows = (size_t)num_arg("shuffle-rows", optarg, 0, 1e10); break;
        case T_LR: o.mc.dopt.lr = (float)num_arg("lr", optarg, 0, 100); break;
        case T_DOPT: {
            int k = dense_opt_from_name(optarg);
            if (k < 0) die("--dense-opt %s: want adam, adagrad or sgd", optarg);
            float lr = o.mc.dopt.lr, l2 = o.mc.dopt.l2;
            dense_opt_default(&o.mc.dopt, (dense_opt_kind)k);
            o.mc.dopt.lr = lr, o.mc.dopt.l2 = l2;
            break;
        }
        case T_DL2: o.mc.dopt.l2 = (float)num_arg("dense-l2", optarg, 0, 100); break;
        case T_SLR: o.mc.sopt.lr = (float)num_arg("sparse-lr", optarg, 0, 100); sparse_lr_set = 1; break;
        case T_SOPT: {
            int k = sparse_opt_from_name(optarg);
            if (k < 0) die("--sparse-opt %s: want adam, adagrad, rowwise_adagrad, sgd or ftrl", optarg);
            float lr = o.mc.sopt.lr, l2 = o.mc.sopt.l2;
            sparse_opt_default(&o.mc.sopt, (sparse_opt_kind)k);
            o.mc.sopt.lr = lr, o.mc.sopt.l2 = l2;
            break;
        }
        case T_L2: o.mc.sopt.l2 = (float)num_arg("l2", optarg, 0, 100); break;
        case T_EMBL2: o.mc.emb_l2_all = (float)num_arg("emb-l2", optarg, 0, 100); break;
        case T_INIT: o.mc.init_std = (float)num_arg("init-std", optarg, 0, 10); break;
        case T_MINSHOW: o.mc.min_show = (uint32_t)num_arg("min-show", optarg, 0, 1e9); break;
        case T_ADMITMB: o.mc.admit_mb = (float)num_arg("admit-mb", optarg, 0, 1e6); break;
        case T_PATIENCE: o.patience = (int)num_arg("patience", optarg, 1, 1e6); break;
        case T_DECAY: o.lr_decay = (float)num_arg("lr-decay", optarg, 0, 1); break;
        case T_EVERY: o.eval_every = (uint64_t)num_arg("eval-every", optarg, 0, 1e15); break;
        case T_QUIET: o.quiet = 1; break;
        case T_TPF: o.mc.table_per_field = 1; break;
        case T_FDIM:
            if (strlen(optarg) >= sizeof o.mc.field_dims) die("--field-dim: too long");
            snprintf(o.mc.field_dims, sizeof o.mc.field_dims, "%s", optarg);
            break;
        case T_INTER:
            if (strcmp(optarg, "dot") && strcmp(optarg, "cat")) die("--interaction %s: want dot or cat", optarg);
            o.mc.dlrm_cat = !strcmp(optarg, "cat");
            break;
        case T_PASSROWS: o.pass_rows = (uint64_t)num_arg("pass-rows", optarg, 1, 1e12); break;
        case T_TABLEDIR: o.table_dir = optarg; break;
        case T_RESUME: o.table_dir = optarg; o.resume = 1; break;
        case T_INITFROM: o.init = optarg; break;
        case T_FOLLOW: o.follow = optarg; break;
        case T_FIDLE: o.follow_idle = num_arg("follow-idle", optarg, 0, 1e9); break;
        case T_FDONE: o.follow_done = 1; break;
        case T_NOPROG: o.progressive = 0; break;
        case T_EXPEVERY: o.export_every = (uint32_t)num_arg("export-every", optarg, 1, 1e9); break;
        case T_EXPDIR: o.export_dir = optarg; break;
        case T_CACHEMB: o.cache_mb = num_arg("cache-mb", optarg, 0, 1e9); break;
        case T_CACHEPOL:
            if (strcmp(optarg, "lfu") && strcmp(optarg, "lru")) die("--cache-policy %s: want lfu or lru", optarg);
            o.cache_lfu = !strcmp(optarg, "lfu");
            break;
        case T_CTRDECAY: o.mc.decay = (float)num_arg("decay", optarg, 0, 1); break;
        case T_SHRINKT: o.shrink_threshold = num_arg("shrink-threshold", optarg, 0, 1e30); break;
        case T_SHRINKU: o.shrink_unseen = (uint32_t)num_arg("shrink-unseen", optarg, 1, 1e9); break;
        case T_NONCLK: o.nonclk_coeff = (float)num_arg("nonclk-coeff", optarg, 0, 1e6); break;
        case T_CLK: o.clk_coeff = (float)num_arg("clk-coeff", optarg, 0, 1e6); break;
        case T_PLACEMENT: o.placement = optarg; break;
        case T_GPUMEM:
            if (plan) po.gpu_mem_mb = num_arg("gpu-mem-mb", optarg, 0, 1e9);
            else o.gpu_mem_mb = num_arg("gpu-mem-mb", optarg, 0, 1e9);
            break;
        case T_PROFILE: case T_SAVEPROF: case T_FIELDS: case T_NDENSE: case T_REPS: case T_CPUMEM: case T_ROWSSTEP:
            if (!plan) die("train: --%s is an option of ctrbox plan", av[optind - 2] + 2);
            if (c == T_PROFILE) po.profile = optarg;
            else if (c == T_SAVEPROF) po.save_profile = optarg;
            else if (c == T_FIELDS) po.fields = (int)num_arg("fields", optarg, 1, 4096);
            else if (c == T_NDENSE) po.ndense = (int)num_arg("dense", optarg, 0, 4096);
            else if (c == T_REPS) po.reps = (int)num_arg("reps", optarg, 1, 1000);
            else if (c == T_CPUMEM) po.cpu_mem_mb = num_arg("cpu-mem-mb", optarg, 0, 1e9);
            else po.rows_per_step = num_arg("rows-per-step", optarg, 1, 1e12);
            break;
        default: cli_usage_error(&cc, "unexpected option");
        }
    }
    util_die_where(NULL);
    if (!sparse_lr_set) o.mc.sopt.lr = o.mc.dopt.lr;
    if (!bottom_set) o.mc.bottom[o.mc.n_bottom - 1] = o.mc.dim;
    if (plan) {
        dense_cpu_preflight(0);
        int r = run_plan(&o, &po);
        free(o.train), free(o.valid), free(opts), free(av), free(plan_text);
        cli_input_free(&in);
        for (int i = 1; i < ia.argc; i++) free(ia.argv[i]), free(ia.where[i]);
        free(ia.argv), free(ia.where);
        return r;
    }
    if (o.table_dir && o.mc.emb_l2_all > 0)
        die("--emb-l2 updates every row at every step; it cannot be used with --table-dir (use --l2)");
    if (o.follow) {
        if (o.n_train || o.n_valid || o.resume)
            die("train: --follow DIR trains the files that come into DIR: it takes no --train, --valid or --resume (each "
                "file is scored before it trains: progressive validation; a killed run goes on when run again)");
        if (!o.out) die("train: --follow needs --out DIR");
        if (!epochs_set) o.epochs = 1;
    } else if (o.follow_idle >= 0 || o.follow_done || o.export_dir || o.export_every) {
        die("train: --follow-idle, --follow-done, --export-dir and --export-every go with --follow DIR");
    }
    if (o.export_every && !o.export_dir) die("train: --export-every N needs --export-dir DIR");
    if (o.export_dir && !o.export_every) o.export_every = 1;
    if (!o.follow && (!o.n_train || !o.out)) cli_fail(&cc, "--train FILE and --out DIR are required");
    /* A folder read written in: the files written there (model.ctrbox, log.jsonl, COMMIT.ctrbox, a
     * bundle) were read as logs or data ("too many bad lines") and the run stopped with them left there */
    const char *written[] = { o.out, o.table_dir, o.export_dir }, *names[] = { "--out", "--table-dir", "--export-dir" };
    for (int i = -1; i < o.n_train + o.n_valid; i++) {
        const char *in_dir = i < 0 ? o.follow : i < o.n_train ? o.train[i] : o.valid[i - o.n_train];
        struct stat is;
        if (!in_dir || stat(in_dir, &is) < 0 || !S_ISDIR(is.st_mode)) continue;
        for (int k = 0; k < 3; k++) {
            if (!util_same_file(written[k], &is)) continue;
            if (i < 0)
                die("train: %s %s is the --follow folder: the files written there would be read as logs; give a folder "
                    "of its own", names[k], written[k]);
            die("train: %s %s is a folder of %s files: the files written there would be read as data; give a folder "
                "of its own", names[k], written[k], i < o.n_train ? "--train" : "--valid");
        }
    }
    const char *folders[] = { o.out, o.table_dir, o.export_dir };   /* where files are written */
    for (size_t i = 0; i < sizeof folders / sizeof *folders; i++) {
        char e[256];
        if (folders[i] && folder_path_check(folders[i], e, sizeof e) < 0) die("train: %s", e);
    }
    if (o.init && o.resume)
        die("train: --init starts a new run from a model, --resume continues a run: give one (a warm-started run "
            "killed on the way continues when the same --init command runs again)");
    if (in.so.fmt == FMT_NONE && (o.follow || !cbx_file_is_cbx(o.train[0])))
        die("train: --format is required for text input%s", o.follow ? " (and with --follow: cbx for cbx files)" : "");
    if (o.mc.kind == MODEL_FFM && o.mc.dim * 64 > 65536) die("--dim %d is too large for ffm", o.mc.dim);
    o.in = in.so;
    o.schema_given = !!(in.given & 1u << (CLI_OPT_SCHEMA - CLI_OPT_BASE));
    o.offsets_given = !!(in.given & 1u << (CLI_OPT_FIELD_OFFSETS - CLI_OPT_BASE));
    o.num_given = !!(in.given & 1u << (CLI_OPT_NUM - CLI_OPT_BASE));
    o.schema_spec = in.so.schema_spec;
    o.offsets = in.offsets;
    if (o.in.fmt == FMT_NONE) o.in.fmt = FMT_CBX;
    int ret = train_run(&o);
    free(o.train);
    free(o.valid);
    free(opts);
    cli_input_free(&in);
    for (int i = 1; i < ia.argc; i++) free(ia.argv[i]), free(ia.where[i]);
    free(ia.argv), free(ia.where);
    free(av);
    return ret;
}

/* ---- export-serving ---- */
static int cmd_export_serving(int argc, char **argv)
{
    static const struct option opts[] = {
        { "model", required_argument, 0, 'm' }, { "out", required_argument, 0, 'o' },
        { "dtype", required_argument, 0, 'd' }, { "force", no_argument, 0, 'F' },
        { "since", required_argument, 0, 's' }, { "table-dir", required_argument, 0, 'T' }, { 0, 0, 0, 0 },
    };
    const cli_cmd cc = { "ctrbox", "export-serving", export_help, opts, 0 };
    cli_help_check(&cc, argc, argv);
    const char *dir = NULL, *out = NULL, *table_dir = NULL;
    int dtype = QUANT_FP32, force = 0, c;
    int64_t since = -1;
    uint64_t since_state = 0;   /* --since a model folder: the model the delta goes on from */
    while ((c = cli_getopt(&cc, argc, argv)) != -1) {
        if (c == 'm') dir = optarg;
        else if (c == 'o') out = optarg;
        else if (c == 'T') table_dir = optarg;
        else if (c == 'F') force = 1;
        else if (c == 's') {   /* a pass, or a model folder: its pass (the model a serving base came from) */
            if (strspn(optarg, "0123456789") == strlen(optarg)) {
                since = (int64_t)num_arg("since", optarg, 0, UINT32_MAX);
            } else {
                char err[1024];
                model_meta sm;
                if (modelfile_read_meta(optarg, &sm, err, sizeof err) < 0)
                    die("--since %s: want a pass number or a model folder: %s", optarg, err);
                since = sm.passes;
                model_meta_free(&sm);
                if (modelfile_state(optarg, &since_state, err, sizeof err) < 0) die("--since %s: %s", optarg, err);
            }
        }
        else if (c == 'd') {
            dtype = quant_from_name(optarg);
            if (!dtype) die("--dtype %s: want fp32, fp16, bf16 or int8", optarg);
        } else {
            cli_usage_error(&cc, "unexpected option");
        }
    }
    if (optind < argc) cli_fail(&cc, "unexpected argument '%s'", argv[optind]);
    if (!dir || !out) cli_fail(&cc, "--model DIR and --out BUNDLE are required");
    refuse_existing_output(out, force);
    char err[1024];
    model_meta sm;   /* --force replaced the model itself by its bundle (`--out m/model.ctrbox`) */
    if (modelfile_read_meta(dir, &sm, err, sizeof err) == 0) {
        if (table_dir) free(sm.table_dir), sm.table_dir = xstrdup(table_dir);
        const score_src src = { dir, NULL, NULL, 0, table_dir };
        if (score_output_check(out, &src, NULL, 0, &sm, err, sizeof err) < 0) die("%s", err);
        model_meta_free(&sm);
    }
    uint64_t rows;
    int tables;
    if (model_export_bundle(dir, table_dir, out, dtype, since, since_state, &rows, &tables, err, sizeof err) < 0) die("%s", err);
    if (since < 0)
        printf("wrote %s: %llu rows in %d table(s), dense layers and the model description\n", out, (unsigned long long)rows, tables);
    else
        printf("wrote %s: a delta, the rows trained after pass %lld and the keys deleted since\n", out, (long long)since);
    if (since >= 0 && !since_state)
        fprintf(stderr, "note: a delta --since a pass number does not name the model it goes on from, so predict "
                "cannot check that its base is that model; --since the base's model folder names it\n");
    return 0;
}

static int run_command(int argc, char **argv);

int main(int argc, char **argv)
{
    util_set_prog("ctrbox");
    blas_select_core(argv);   /* may execute the program again: before MPI starts */
    dist_init(&argc, &argv);
    int rc = run_command(argc, argv);
    dist_finalize();
    return rc;
}

static int run_command(int argc, char **argv)
{
    process_setup();
    signal(SIGXFSZ, SIG_IGN);   /* a file-size limit fails the write (EFBIG) instead of killing us */
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        cli_print_version("ctrbox");
        return 0;
    }
    const char *cmd = argv[1];
    argv[1] = argv[0];
    argc--, argv++;
    if (dist_size() > 1 && strcmp(cmd, "train") && strcmp(cmd, "eval") && strcmp(cmd, "predict")) {
        if (dist_rank() == 0)
            fprintf(stderr, "ctrbox %s: under mpirun only train, eval and predict run on several processes; run %s as one "
                    "process (without mpirun)\n", cmd, cmd);
        return 2;
    }
    if (!strcmp(cmd, "eval")) return cmd_eval(argc, argv, 0);
    if (!strcmp(cmd, "predict")) return cmd_eval(argc, argv, 1);
    if (!strcmp(cmd, "train")) return cmd_train(argc, argv, 0);
    if (!strcmp(cmd, "plan")) return cmd_train(argc, argv, 1);
    if (!strcmp(cmd, "devices")) {
        static const struct option none[] = { { 0, 0, 0, 0 } };
        const cli_cmd cc = { "ctrbox", "devices", devices_help, none, 0 };
        cli_help_check(&cc, argc, argv);
        if (cli_getopt(&cc, argc, argv) != -1 || optind < argc) cli_fail(&cc, "takes no arguments");
        printf("%s\n", device_describe());
        return 0;
    }
    if (!strcmp(cmd, "export-serving")) return cmd_export_serving(argc, argv);
    if (!strcmp(cmd, "info")) return cmd_info(argc, argv);
    if (!strcmp(cmd, "report")) return cmd_report(argc, argv);
    static const char *const cmds[] = { "train", "eval", "predict", "export-serving", "info", "report", "plan", "devices",
                                        NULL };
    cli_unknown_command("ctrbox", cmd, cmds);
}
