/*
 * score.h: a trained model and data read the way it was trained on: what eval, predict and report
 * share. These are the programs' main paths: errors end the process with one line (die).
 */
#ifndef CTRBOX_SCORE_H
#define CTRBOX_SCORE_H

#include "../dense/model.h"
#include "cli.h"
#include "modelfile.h"

/* Where the model comes from. */
typedef struct {
    const char *dir;              /* a model folder, or its model.ctrbox file; or NULL with bundle */
    const char *bundle;           /* a serving bundle (export-serving) */
    char **deltas;                /* delta bundles applied to bundle, in order */
    int n_deltas;
    const char *table_dir;        /* a tiered model's table folder where the user says it is, or NULL */
} score_src;

/* The one MODEL argument left after the options, or model_opt (--model M, the same) when none is
 * left; a usage error otherwise. */
const char *score_model_arg(const cli_cmd *cc, int argc, char **argv, const char *model_opt);
/* The model and its description. */
void score_load(const score_src *src, model **m, model_meta *meta);

/* Where predict's lines and the data's records part: the bad lines' record numbers (ascending,
 * malloc'ed; the caller frees) and the records read (rows and bad lines). */
typedef struct {
    uint64_t *bad;
    size_t n_bad;
    uint64_t records;
} score_gaps;

/* The rows of data[0..n) read as the model's input (its settings, with those the user gave in `in`
 * put over them; format_given: --format was given), into b; a tiered model's rows those keys need
 * are pulled into m. Data another layout than the model's, or whose fields differ, is refused in one
 * line naming both sides. unlabeled: rows may lack labels (predict); id_column: csv ids into b;
 * gaps (if not NULL): the bad lines' places. */
void score_read(const score_src *src, model *m, model_meta *meta, char **data, int n_data, const cli_input *in,
                int format_given, int unlabeled, const char *id_column, sample_block *b, score_gaps *gaps);

/* The same under mpirun (collective): each rank reads its pieces of the data (datasets/source.h) and
 * gets the rows one process would predict in batch k of the model's batch size for every k with
 * k % N == its rank, in order: b's row i is row (*row)[i] of the data (malloc'ed; caller frees); *total:
 * the data's rows over all ranks. gaps (if not NULL) are filled on rank 0, every rank's bad lines. */
void score_read_shared(const score_src *src, model *m, model_meta *meta, char **data, int n_data, const cli_input *in,
                       int format_given, int unlabeled, const char *id_column, sample_block *b, uint64_t **row,
                       uint64_t *total, score_gaps *gaps);

/* Under mpirun, after score_read_shared (collective): this rank's batches predicted, each as one
 * process predicts it, and gathered on rank 0 in row order: there *all holds every row's label, its
 * group field's entry (group_field >= 0) and its id (when b has ids), *prob (malloc'ed, caller frees)
 * the predictions; elsewhere *all is empty and *prob NULL. */
void score_predict_shared(model *m, const sample_block *b, const uint64_t *row, uint64_t total, int group_field,
                          sample_block *all, double **prob);

/* An output (predict's or eval's scores, report's page) that exists as a file the command reads:
 * a data file, the model file or bundle, a delta, the model folder's own files (model.ctrbox,
 * log.jsonl, curve.jsonl, LOCK.model) or a file of its table folder. `--out m/model.ctrbox` replaced
 * the model, `--out data.tsv` the data, with exit 0. 0, or -1 with why in msg. */
int score_output_check(const char *out, const score_src *src, char **data, int n_data, const model_meta *meta, char *msg,
                       size_t len);

/* The model's input settings in words: "criteo (13 dense values, 26 categorical fields: I1 ...)". */
void score_describe_input(const model_meta *mm, char *out, size_t n);
/* How data whose fields are `got` differs from the model's input, as one clause ("its column C9 is
 * none of the model's fields"). */
void score_schema_diff(const data_schema *got, const model_meta *mm, char *diff, size_t n);

#endif
