/*
 * modelfile.h: a trained model on disk, one file DIR/model.ctrbox written durably, so a crash
 * leaves either the old model or the new one.
 *
 * Layout: magic "CTRBXMDL", u32 version, u32 reserved, u64 JSON length, the JSON (model config,
 * data schema and input options), u64 XXH64 of the JSON; the dense section (model_save_dense);
 * the sparse table section (emb_table_save), absent when the JSON names a "table_dir" (the rows
 * are in that SSD-tier folder, as of its commit "table_commits": see docs/formats.md); magic
 * "CTRBXEND".
 */
#ifndef CTRBOX_MODELFILE_H
#define CTRBOX_MODELFILE_H

#include <stddef.h>
#include <stdint.h>

#include "../datasets/source.h"
#include "../dense/model.h"

typedef struct {
    model_config cfg;
    data_schema schema;
    source_opts input;            /* fmt, num, schema_spec, offsets, max_line as trained (strings owned) */
    data_format source_fmt;       /* trained on cbx: the text format it was converted from (or FMT_NONE) */
    char *schema_spec;
    uint64_t *offsets;
    char *table_dir;              /* the sparse rows live in this SSD-tier folder, not in the file */
    uint64_t table_id, table_commits;   /* ... as that folder was when the model was saved */
    char *table_shrink;           /* a ctrbox-table shrink of this model under way (its settings), or NULL */
    uint32_t passes;              /* passes trained when saved: the clock a warm start (--init) goes on from */
    uint32_t deltas_from;         /* deltas since an earlier pass are refused (an offline shrink of a table
                                   * folder deleted keys the tables' deletion record does not know) */
    int is_delta;                 /* a delta bundle: the rows changed after pass delta_since, and deletions */
    uint32_t delta_since;
    uint64_t state, since_state;  /* bundles: the state of the model it holds (modelfile_state), and for a
                                   * delta the state of the model it goes on from; 0: not known (bundles
                                   * of earlier builds, a delta --since a pass number) */
    void *follow;                 /* --follow's ledger (a jansson object: "dir", "files": [...]), or NULL */
} model_meta;

/* The lock file of a model folder (folder_lock): a trainer and ctrbox-table shrink hold it while
 * they write the folder. */
#define MODEL_LOCK "LOCK.model"

/* Write m with its metadata to DIR/model.ctrbox (DIR is created if missing). 0 or -errno. */
int modelfile_save(const char *dir, const model *m, const model_meta *meta, char *err, size_t errlen);
/* Load DIR/model.ctrbox: a new model and its metadata (caller frees both). 0 or <0. */
int modelfile_load(const char *dir, model **out, model_meta *meta, char *err, size_t errlen);
/* The same into m, a model of the same architecture (model_config_diff) built for schema: another
 * is refused, naming the difference (not the file: the caller names it), before any state is read
 * (-EINVAL). A model whose rows are in
 * a table folder gives its dense state only. A warm start reads the file once, without a second
 * model. On an error m may hold part of the state. */
int modelfile_load_into(const char *dir, model *m, const data_schema *schema, model_meta *meta, char *err,
                        size_t errlen);
/* DIR given as a model's folder or as its file: the file (DIR/model.ctrbox, or DIR itself when it
 * is a file), and the folder (caller frees). */
char *modelfile_path(const char *dir);
char *modelfile_folder(const char *dir);
/* A tiered model's table folder (meta->table_dir): the stored absolute place, else the place stored
 * relative to the model (path, relative to the model's folder) when the folder moved with the
 * model. given: path is the user's (--table-dir), taken as it is. Loading calls it (given 0). The
 * folder's id and commit are checked when it is opened (modelfile_check_tier). */
void modelfile_find_table_dir(const char *dir, model_meta *meta, const char *path, int given);
/* 0 when meta's table folder is there; else -ENOENT and "MODEL: its rows are in the table folder X,
 * which is not there: HINT" (hint: what the program takes to name the folder's new place). */
int modelfile_table_dir_there(const char *dir, const model_meta *meta, const char *hint, char *err, size_t errlen);
/* The description (JSON) of DIR/model.ctrbox only, checked, into meta. 0 or <0 with err. */
int modelfile_read_meta(const char *dir, model_meta *meta, char *err, size_t errlen);
void model_meta_free(model_meta *meta);
/* The description as saved in the file (a new jansson object: "model", "schema", "input", ...). */
struct json_t *modelfile_meta_json(const model_meta *meta);

/* A model whose rows live in a table folder (meta->table_dir) pairs its dense layers with the
 * folder's rows as they were when it was saved: 0 if tier (that folder, open) still holds them,
 * else -1 with a message naming the model (dir) and what changed. */
struct emb_tier;
int modelfile_check_tier(const char *dir, const model_meta *meta, const struct emb_tier *tier, char *err, size_t errlen);

/* Which trained model this is, as 64 bits (never 0): the hash of the model file's bytes after its
 * description, with the table folder's id for a model whose rows are there. Two models differ in
 * state when they differ in any dense parameter, optimizer state or step, in memory in any row too
 * (a tiered model's rows go with its dense section's step), or their folders differ.
 * modelfile_state reads DIR's file; modelfile_state_of hashes the bytes m's file would have
 * (table_id 0: m's tables are in memory; else m's rows are in that folder). */
int modelfile_state(const char *dir, uint64_t *state, char *err, size_t errlen);
uint64_t modelfile_state_of(const model *m, uint64_t table_id);
/* A state as bundles and export manifests write it: 16 hex digits (out: 17 bytes). Parsing gives 0
 * with *state, or -1 for anything else (0 itself is no state). */
void modelfile_state_text(uint64_t state, char out[17]);
int modelfile_state_parse(const char *text, uint64_t *state);

/* The serving bundle: one read-only file, written durably: magic "CTRBXBDL", u32 version, u32
 * value type, u64 JSON length, the JSON (as in model files), the dense section, per table u64
 * rows, u32 values a row, the keys sorted (u64 each), the rows in that order (fp32, fp16 or bf16
 * values, or an f32 scale then int8 values), "CTRBXEND", and the XXH64 of all bytes before it.
 * No optimizer state or counters. */
/* dtype: a quant_type (embedding/quant.h). tier: read m's rows from this open table folder, streaming (keys in index order, rows fetched
 * in that order), or NULL: m's tables are in memory. since < 0: every row (a base); else a delta:
 * the rows last trained after pass `since` and, per table, the keys deleted after it (version 2:
 * after each table's rows, u64 count and the deleted keys in order; version 1 had none). A delta
 * since a pass before the tables' deletion record (emb_table_deletions_from) is refused. */
int modelfile_bundle_save(const char *path, model *m, const model_meta *meta, struct emb_tier *tier, int dtype,
                          int64_t since, char *err, size_t errlen);
/* A new model (tables in memory, rows dequantized) and its metadata, from a base bundle (a delta
 * is refused: it holds only part of the rows); 0 or <0 with err. */
int modelfile_bundle_load(const char *path, model **out, model_meta *meta, char *err, size_t errlen);
/* Apply the delta bundle at path to m (loaded from a base, with meta): the same model, and a delta
 * that goes on from where m is (its since <= meta->passes <= its pass: equal for the same delta
 * again, which changes nothing, or one of an offline shrink); its deletions, then its
 * rows and dense layers. meta->passes becomes the delta's. 0 or <0 with err (m unchanged when the
 * delta is refused; a delta that fails on the way leaves m part-applied). */
int modelfile_bundle_apply(const char *path, model *m, model_meta *meta, char *err, size_t errlen);

#endif
