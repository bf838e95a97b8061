/*
 * score.c: a model and data read as it was trained on (score.h).
 */
#include "score.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../datasets/source.h"
#include "../io/util.h"
#include "passes.h"
#include "train.h"

/* The model's input settings in words: "criteo (13 dense values, 26 categorical fields)". */
void score_describe_input(const model_meta *mm, char *out, size_t n)
{
    const data_schema *sc = &mm->schema;
    size_t w = (size_t)snprintf(out, n, "%s", parse_format_name(mm->input.fmt));
    if (mm->input.fmt == FMT_CBX && mm->source_fmt && w < n)
        w += (size_t)snprintf(out + w, n - w, " converted from %s", parse_format_name(mm->source_fmt));
    if (mm->input.schema_spec && w < n) w += (size_t)snprintf(out + w, n - w, " --schema %s", mm->input.schema_spec);
    if (mm->input.n_offsets && w < n) w += (size_t)snprintf(out + w, n - w, " with %d field offsets", mm->input.n_offsets);
    if (w < n)
        w += (size_t)snprintf(out + w, n - w, " (%u dense values, %u categorical fields%s%s%s", sc->n_dense,
                              sc->n_fields - sc->n_dense, sc->n_fields ? ": " : "", sc->n_fields ? sc->names[0] : "",
                              sc->n_fields > 1 ? " ..." : "");
    if (w < n) snprintf(out + w, n - w, "%s)", sc->num_mode == NUM_BUCKET ? "; --num bucket" : "");
}

/* The data at path (which looks like `looks`) does not read as the model's input: one line naming
 * both sides. */
static void __attribute__((noreturn)) refuse_data(const char *path, const char *looks, const model_meta *mm,
                                                  const char *read_err, const data_schema *got)
{
    char want[600], diff[300] = "";
    score_describe_input(mm, want, sizeof want);
    if (got) {
        uint32_t f = 0;
        while (f < got->n_fields && f < mm->schema.n_fields && got->kind[f] == mm->schema.kind[f] &&
               !strcmp(got->names[f], mm->schema.names[f]))
            f++;
        if (got->num_mode != mm->schema.num_mode)
            snprintf(diff, sizeof diff, "its integers read as %s, the model's as %s", got->num_mode == NUM_BUCKET ? "buckets" : "log values",
                     mm->schema.num_mode == NUM_BUCKET ? "buckets (--num bucket)" : "log values (--num log)");
        else if (f < got->n_fields && f < mm->schema.n_fields)
            snprintf(diff, sizeof diff, "field %u is %s (%s), the model's is %s (%s)", f + 1, got->names[f],
                     got->kind[f] == FIELD_NUM ? "dense" : "categorical", mm->schema.names[f],
                     mm->schema.kind[f] == FIELD_NUM ? "dense" : "categorical");
        else
            snprintf(diff, sizeof diff, "it reads as %u fields (%u dense), the model's are %u (%u dense)", got->n_fields,
                     got->n_dense, mm->schema.n_fields, mm->schema.n_dense);
    }
    die("%s%s%s; this file looks like %s; the model was trained on %s (its input settings are used unless given: "
        "give data in that layout)", got ? path : "", got ? ": " : "", got ? diff : read_err, looks, want);
}

const char *score_model_arg(const cli_cmd *cc, int argc, char **argv, const char *model_opt)
{
    if (model_opt && argc == optind) return model_opt;
    if (argc - optind != 1 || model_opt) cli_fail(cc, "give one model (its folder or its model.ctrbox)");
    return argv[optind];
}

void score_load(const score_src *src, model **m, model_meta *meta)
{
    char err[1024];
    if (src->bundle ? modelfile_bundle_load(src->bundle, m, meta, err, sizeof err) < 0
                    : modelfile_load(src->dir, m, meta, err, sizeof err) < 0)
        die("%s", err);
    for (int i = 0; i < src->n_deltas; i++)
        if (modelfile_bundle_apply(src->deltas[i], *m, meta, err, sizeof err) < 0) die("%s", err);
    if (src->table_dir) {
        if (!meta->table_dir)
            die("--table-dir %s: %s holds its rows itself (no table folder)", src->table_dir,
                src->dir ? src->dir : src->bundle);
        modelfile_find_table_dir(src->dir, meta, src->table_dir, 1);
    }
}

void score_read(const score_src *src, model *m, model_meta *meta, char **data, int n_data, const cli_input *in,
                int format_given, int unlabeled, const char *id_column, sample_block *b)
{
    char err[1024];
    source_opts so = meta->input;   /* read the data as the model was trained, with what the user changed */
    so.max_bad_ratio = in->so.max_bad_ratio;
    cli_input_over(in, &so);
    char looks[300];   /* the first file at a glance: once, a pipe not at all */
    data_format guess = source_sniff(data[0], looks, sizeof looks);
    if (so.fmt == FMT_CBX && !format_given && meta->source_fmt && guess && guess != FMT_CBX) {
        so.fmt = meta->source_fmt;   /* trained on cbx converted from this text format */
        so.num = meta->schema.num_mode == NUM_BUCKET ? NUM_BUCKET : NUM_LOG;
    }
    so.unlabeled = unlabeled;
    so.id_column = id_column;
    /* another layout at a glance is refused before a line is read (csv: by its header, below) */
    if (!format_given && so.fmt != FMT_CBX && so.fmt != FMT_CSV && guess && guess != FMT_CBX && guess != so.fmt &&
        !(guess == FMT_LIBSVM && so.fmt == FMT_LIBFFM)) {
        snprintf(err, sizeof err, "%s: not %s data", data[0], parse_format_name(so.fmt));
        refuse_data(data[0], looks, meta, err, NULL);
    }
    data_schema ds;
    if (train_read_rows(data, n_data, &so, b, &ds, err, sizeof err) < 0) {
        if (!guess || guess == so.fmt || guess == FMT_CBX) die("%s", err);   /* the layout is right: the error is the whole story */
        refuse_data(data[0], looks, meta, err, NULL);
    }
    if (!schema_equal(&ds, &meta->schema)) refuse_data(data[0], looks, meta, NULL, &ds);
    schema_free(&ds);
    if (meta->table_dir && model_pull_from_tier(m, src->dir, meta, b, err, sizeof err) < 0) die("%s", err);
}
