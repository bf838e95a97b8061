/*
 * modelfile.c: the model file (see modelfile.h); JSON through jansson.
 */
#define _GNU_SOURCE
#include "modelfile.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../embedding/quant.h"
#include "../embedding/tier.h"
#include "../io/util.h"

#define MF_MAGIC "CTRBXMDL"
#define MF_END "CTRBXEND"
#define MF_VERSION 1u

static json_t *int_list(const int *v, int n)
{
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(v[i]));
    return a;
}

static json_t *meta_to_json(const model_meta *mm)
{
    const model_config *c = &mm->cfg;
    json_t *o = json_object(), *mo = json_object(), *so = json_object(), *io = json_object();
    json_object_set_new(mo, "kind", json_string(model_kind_name(c->kind)));
    json_object_set_new(mo, "dim", json_integer(c->dim));
    json_object_set_new(mo, "hidden", int_list(c->hidden, c->n_hidden));
    json_object_set_new(mo, "bottom", int_list(c->bottom, c->n_bottom));
    json_object_set_new(mo, "cross_layers", json_integer(c->cross_layers));
    json_object_set_new(mo, "interaction", json_string(c->dlrm_cat ? "cat" : "dot"));
    json_object_set_new(mo, "batchnorm", json_boolean(c->batchnorm));
    json_object_set_new(mo, "dropout", json_real(c->dropout));
    json_object_set_new(mo, "pool_mean", json_boolean(c->pool_mean));
    json_object_set_new(mo, "init_std", json_real(c->init_std));
    json_object_set_new(mo, "seed", json_integer((json_int_t)c->seed));
    json_object_set_new(mo, "batch", json_integer(c->batch));
    json_object_set_new(mo, "dense_opt", json_string(dense_opt_name(c->dopt.kind)));
    json_object_set_new(mo, "lr", json_real(c->dopt.lr));
    json_object_set_new(mo, "dense_l2", json_real(c->dopt.l2));
    json_object_set_new(mo, "sparse_opt", json_string(sparse_opt_name(c->sopt.kind)));
    json_object_set_new(mo, "sparse_lr", json_real(c->sopt.lr));
    json_object_set_new(mo, "l2", json_real(c->sopt.l2));
    json_object_set_new(mo, "emb_l2", json_real(c->emb_l2_all));
    json_object_set_new(mo, "min_show", json_integer(c->min_show));
    json_object_set_new(mo, "admit_mb", json_real(c->admit_mb > 0 ? c->admit_mb : 0));
    json_object_set_new(mo, "decay", json_real(c->decay));
    json_object_set_new(mo, "table_per_field", json_boolean(c->table_per_field));
    json_object_set_new(mo, "field_dims", json_string(c->field_dims));
    json_object_set_new(o, "model", mo);
    json_object_set_new(o, "passes", json_integer((json_int_t)mm->passes));
    if (mm->deltas_from) json_object_set_new(o, "deltas_from", json_integer((json_int_t)mm->deltas_from));
    if (mm->is_delta) json_object_set_new(o, "delta_since", json_integer((json_int_t)mm->delta_since));
    const uint64_t states[2] = { mm->state, mm->is_delta ? mm->since_state : 0 };   /* bundles only */
    const char *const state_keys[2] = { "state", "since_state" };
    for (int i = 0; i < 2; i++)
        if (states[i]) {
            char id[17];
            modelfile_state_text(states[i], id);
            json_object_set_new(o, state_keys[i], json_string(id));
        }
    if (mm->follow) json_object_set(o, "follow", (json_t *)mm->follow);
    if (!mm->table_dir && mm->table_id) {
        /* a bundle of a tiered model: the folder its rows came from, so that a delta of another
         * model (of the same architecture and passes) is not applied to this one's base */
        char id[24];
        snprintf(id, sizeof id, "%016llx", (unsigned long long)mm->table_id);
        json_object_set_new(o, "source_table_id", json_string(id));
    }
    if (mm->table_dir) {
        char id[24];
        snprintf(id, sizeof id, "%016llx", (unsigned long long)mm->table_id);
        json_object_set_new(o, "table_dir", json_string(mm->table_dir));
        json_object_set_new(o, "table_id", json_string(id));
        json_object_set_new(o, "table_commits", json_integer((json_int_t)mm->table_commits));
        if (mm->table_shrink) json_object_set_new(o, "table_shrink", json_string(mm->table_shrink));
    }
    json_t *fields = json_array();
    for (uint32_t f = 0; f < mm->schema.n_fields; f++) {
        json_t *fo = json_object();
        json_object_set_new(fo, "name", json_string(mm->schema.names[f]));
        json_object_set_new(fo, "kind", json_string(mm->schema.kind[f] == FIELD_NUM ? "num" : "cat"));
        json_array_append_new(fields, fo);
    }
    json_object_set_new(so, "fields", fields);
    json_object_set_new(so, "n_dense", json_integer(mm->schema.n_dense));
    json_object_set_new(so, "num_mode", json_integer(mm->schema.num_mode));
    json_object_set_new(o, "schema", so);
    json_object_set_new(io, "format", json_string(parse_format_name(mm->input.fmt)));
    json_object_set_new(io, "num", json_string(mm->input.num == NUM_BUCKET ? "bucket" : "log"));
    json_object_set_new(io, "max_line", json_integer((json_int_t)mm->input.max_line));
    if (mm->source_fmt) json_object_set_new(io, "converted_from", json_string(parse_format_name(mm->source_fmt)));
    if (mm->schema_spec) json_object_set_new(io, "schema", json_string(mm->schema_spec));
    if (mm->input.n_offsets) {
        json_t *a = json_array();
        for (int i = 0; i < mm->input.n_offsets; i++) json_array_append_new(a, json_integer((json_int_t)mm->offsets[i]));
        json_object_set_new(io, "field_offsets", a);
    }
    json_object_set_new(o, "input", io);
    return o;
}

json_t *modelfile_meta_json(const model_meta *mm) { return meta_to_json(mm); }

static int get_int_list(json_t *a, int *v, int max)
{
    int n = (int)json_array_size(a);
    if (n > max) n = max;
    for (int i = 0; i < n; i++) v[i] = (int)json_integer_value(json_array_get(a, (size_t)i));
    return n;
}

static int meta_from_json(json_t *o, model_meta *mm, char *err, size_t errlen)
{
    memset(mm, 0, sizeof *mm);
    json_t *mo = json_object_get(o, "model"), *so = json_object_get(o, "schema"), *io = json_object_get(o, "input");
    int kind = mo ? model_kind_from_name(json_string_value(json_object_get(mo, "kind")) ?: "") : -1;
    if (!so || !io || kind < 0) {
        snprintf(err, errlen, "model description is incomplete");
        return -EBADMSG;
    }
    model_config *c = &mm->cfg;
    model_config_default(c, (model_kind)kind);
    c->dim = (int)json_integer_value(json_object_get(mo, "dim"));
    c->n_hidden = get_int_list(json_object_get(mo, "hidden"), c->hidden, MODEL_MAX_LAYERS);
    c->n_bottom = get_int_list(json_object_get(mo, "bottom"), c->bottom, MODEL_MAX_LAYERS);
    c->cross_layers = (int)json_integer_value(json_object_get(mo, "cross_layers"));
    c->dlrm_cat = !strcmp(json_string_value(json_object_get(mo, "interaction")) ?: "dot", "cat");
    c->batchnorm = json_is_true(json_object_get(mo, "batchnorm"));
    c->dropout = (float)json_real_value(json_object_get(mo, "dropout"));
    c->pool_mean = json_is_true(json_object_get(mo, "pool_mean"));
    c->init_std = (float)json_real_value(json_object_get(mo, "init_std"));
    c->seed = (uint64_t)json_integer_value(json_object_get(mo, "seed"));
    c->batch = (int)json_integer_value(json_object_get(mo, "batch"));
    int dk = dense_opt_from_name(json_string_value(json_object_get(mo, "dense_opt")) ?: "");
    int sk = sparse_opt_from_name(json_string_value(json_object_get(mo, "sparse_opt")) ?: "");
    if (dk < 0 || sk < 0 || c->dim <= 0 || c->batch <= 0) {
        snprintf(err, errlen, "model description has bad values");
        return -EBADMSG;
    }
    dense_opt_default(&c->dopt, (dense_opt_kind)dk);
    sparse_opt_default(&c->sopt, (sparse_opt_kind)sk);
    c->dopt.lr = (float)json_real_value(json_object_get(mo, "lr"));
    c->dopt.l2 = (float)json_real_value(json_object_get(mo, "dense_l2"));
    c->sopt.lr = (float)json_real_value(json_object_get(mo, "sparse_lr"));
    c->sopt.l2 = (float)json_real_value(json_object_get(mo, "l2"));
    c->emb_l2_all = (float)json_real_value(json_object_get(mo, "emb_l2"));
    c->min_show = (uint32_t)json_integer_value(json_object_get(mo, "min_show"));
    c->admit_mb = (float)json_number_value(json_object_get(mo, "admit_mb"));   /* older files: 0, exact counts */
    if (!(c->admit_mb >= 0 && c->admit_mb <= 1e6)) {
        snprintf(err, errlen, "model description: \"admit_mb\" is not a size");
        return -EBADMSG;
    }
    c->decay = (float)json_real_value(json_object_get(mo, "decay"));
    json_t *passes = json_object_get(o, "passes");   /* absent in files of older builds: 0 */
    if (passes && (!json_is_integer(passes) || json_integer_value(passes) < 0 || json_integer_value(passes) > UINT32_MAX)) {
        snprintf(err, errlen, "model description: \"passes\" is not a pass count");
        return -EBADMSG;
    }
    mm->passes = passes ? (uint32_t)json_integer_value(passes) : 0;
    json_t *df = json_object_get(o, "deltas_from"), *ds = json_object_get(o, "delta_since"), *fw = json_object_get(o, "follow");
    if ((df && (!json_is_integer(df) || json_integer_value(df) < 0 || json_integer_value(df) > UINT32_MAX)) ||
        (ds && (!json_is_integer(ds) || json_integer_value(ds) < 0 || json_integer_value(ds) > UINT32_MAX)) ||
        (fw && (!json_is_object(fw) || !json_is_string(json_object_get(fw, "dir")) ||
                !json_is_array(json_object_get(fw, "files"))))) {
        snprintf(err, errlen, "model description: \"deltas_from\", \"delta_since\" or \"follow\" is malformed");
        return -EBADMSG;
    }
    mm->deltas_from = df ? (uint32_t)json_integer_value(df) : 0;
    mm->is_delta = ds != NULL;
    mm->delta_since = ds ? (uint32_t)json_integer_value(ds) : 0;
    mm->follow = fw ? json_incref(fw) : NULL;
    const char *const state_keys[2] = { "state", "since_state" };
    uint64_t *const states[2] = { &mm->state, &mm->since_state };
    for (int i = 0; i < 2; i++) {
        json_t *v = json_object_get(o, state_keys[i]);
        if (v && modelfile_state_parse(json_string_value(v), states[i]) < 0) {
            snprintf(err, errlen, "model description: \"%s\" is not a model state (16 hex digits)", state_keys[i]);
            return -EBADMSG;
        }
    }
    const char *td = json_string_value(json_object_get(o, "table_dir")),
               *sid = json_string_value(json_object_get(o, "source_table_id"));
    if (!td && sid) {
        char *end = NULL;
        mm->table_id = strtoull(sid, &end, 16);
        if (*end || !*sid) {
            snprintf(err, errlen, "model description: \"source_table_id\" is not a table folder's id");
            return -EBADMSG;
        }
    }
    if (td) {
        const char *id = json_string_value(json_object_get(o, "table_id"));
        json_t *commits = json_object_get(o, "table_commits");
        char *end = NULL;
        if (id) mm->table_id = strtoull(id, &end, 16);
        if (!id || *end || !json_is_integer(commits) || json_integer_value(commits) < 0) {
            snprintf(err, errlen, "model description names a table folder without its id and commit");
            return -EBADMSG;
        }
        mm->table_commits = (uint64_t)json_integer_value(commits);
        mm->table_dir = xstrdup(td);
        const char *sh = json_string_value(json_object_get(o, "table_shrink"));
        if (sh) mm->table_shrink = xstrdup(sh);
    }
    c->table_per_field = json_is_true(json_object_get(mo, "table_per_field"));
    snprintf(c->field_dims, sizeof c->field_dims, "%s", json_string_value(json_object_get(mo, "field_dims")) ?: "");
    json_t *fields = json_object_get(so, "fields");
    uint32_t nf = (uint32_t)json_array_size(fields);
    if (nf > CBX_MAX_FIELDS) {
        snprintf(err, errlen, "model description has too many fields");
        return -EBADMSG;
    }
    schema_init(&mm->schema, nf);
    uint32_t dense = 0;
    for (uint32_t f = 0; f < nf; f++) {
        json_t *fo = json_array_get(fields, f);
        schema_set_name(&mm->schema, f, json_string_value(json_object_get(fo, "name")) ?: "?");
        if (!strcmp(json_string_value(json_object_get(fo, "kind")) ?: "cat", "num")) {
            mm->schema.kind[f] = FIELD_NUM;
            mm->schema.dense_slot[f] = (int32_t)dense++;
        }
    }
    mm->schema.n_dense = (uint32_t)json_integer_value(json_object_get(so, "n_dense"));
    mm->schema.num_mode = (uint32_t)json_integer_value(json_object_get(so, "num_mode"));
    if (mm->schema.n_dense != dense) {
        snprintf(err, errlen, "model description: dense count does not match the fields");
        return -EBADMSG;
    }
    source_opts_default(&mm->input);
    mm->input.fmt = parse_format_from_name(json_string_value(json_object_get(io, "format")) ?: "");
    mm->input.num = !strcmp(json_string_value(json_object_get(io, "num")) ?: "log", "bucket") ? NUM_BUCKET : NUM_LOG;
    json_t *ml = json_object_get(io, "max_line");
    if (json_is_integer(ml) && json_integer_value(ml) >= 16 && json_integer_value(ml) <= (1ll << 30))
        mm->input.max_line = (size_t)json_integer_value(ml);
    mm->source_fmt = parse_format_from_name(json_string_value(json_object_get(io, "converted_from")) ?: "");
    const char *spec = json_string_value(json_object_get(io, "schema"));
    if (spec) mm->input.schema_spec = mm->schema_spec = xstrdup(spec);
    json_t *offs = json_object_get(io, "field_offsets");
    if (offs && json_array_size(offs)) {
        int n = (int)json_array_size(offs);
        mm->offsets = xmalloc((size_t)n * sizeof *mm->offsets);
        for (int i = 0; i < n; i++) mm->offsets[i] = (uint64_t)json_integer_value(json_array_get(offs, (size_t)i));
        mm->input.field_offsets = mm->offsets;
        mm->input.n_offsets = n;
    }
    return 0;
}

void model_meta_free(model_meta *mm)
{
    schema_free(&mm->schema);
    free(mm->schema_spec);
    free(mm->offsets);
    free(mm->table_dir);
    free(mm->table_shrink);
    if (mm->follow) json_decref((json_t *)mm->follow);
    memset(mm, 0, sizeof *mm);
}

static char *join(const char *dir, const char *name);

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

void modelfile_find_table_dir(const char *dir, model_meta *meta, const char *path, int given)
{
    if (!given && is_dir(meta->table_dir)) return;   /* where it was saved */
    char *folder = modelfile_folder(dir);
    char *p = given || path[0] == '/' ? xstrdup(path) : join(folder, path);
    free(folder);
    if (!given && !is_dir(p)) {   /* neither: the message names the stored place */
        free(p);
        return;
    }
    free(meta->table_dir);
    meta->table_dir = p;
}

int modelfile_table_dir_there(const char *dir, const model_meta *meta, const char *hint, char *err, size_t errlen)
{
    if (is_dir(meta->table_dir)) return 0;
    char *mp = modelfile_path(dir);
    snprintf(err, errlen, "%s: its rows are in the table folder %s, which is not there: %s", mp, meta->table_dir, hint);
    free(mp);
    return -ENOENT;
}

int modelfile_check_tier(const char *dir, const model_meta *meta, const emb_tier *tier, char *err, size_t errlen)
{
    uint64_t now = emb_tier_commits(tier);
    if (emb_tier_id(tier) == meta->table_id && now == meta->table_commits) return 0;
    char what[160];
    if (meta->table_shrink && emb_tier_id(tier) == meta->table_id) {
        char *mp = modelfile_path(dir);
        snprintf(err, errlen, "%s: a ctrbox-table shrink of this model (%s) was interrupted; run it again "
                 "with the same settings to finish it", mp, meta->table_shrink);
        free(mp);
        return -1;
    }
    if (emb_tier_id(tier) != meta->table_id) snprintf(what, sizeof what, "is another table folder now (made again since)");
    else snprintf(what, sizeof what, "now holds commit %llu (trained further, or changed by ctrbox-table, since)",
                  (unsigned long long)now);
    char *mp = modelfile_path(dir);
    snprintf(err, errlen, "%s: its dense layers go with commit %llu of table folder %s, which %s: the rows "
             "this model was saved with are gone. Use the model the later run saved, or keep a model fixed with "
             "ctrbox export-serving", mp, (unsigned long long)meta->table_commits, meta->table_dir, what);
    free(mp);
    return -1;
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char *modelfile_path(const char *dir)
{
    return is_file(dir) ? xstrdup(dir) : join(dir, "model.ctrbox");
}

char *modelfile_folder(const char *dir)
{
    if (!is_file(dir)) return xstrdup(dir);
    const char *slash = strrchr(dir, '/');
    if (!slash) return xstrdup(".");
    if (slash == dir) return xstrdup("/");
    char *d = xstrdup(dir);
    d[slash - dir] = 0;
    return d;
}

/* The path of folder `to` relative to folder `from`, both absolute and canonical (realpath), as
 * "../"s and `to`'s own components (caller frees). */
static char *relative_path(const char *from, const char *to)
{
    size_t i = 0, common = 0;   /* the end of the shared leading components */
    while (from[i] && from[i] == to[i]) {
        i++;
        if (from[i - 1] == '/') common = i;
    }
    if ((!from[i] || from[i] == '/') && (!to[i] || to[i] == '/')) common = i;   /* a whole component shared */
    size_t ups = 0;
    for (const char *p = from + common; *p; p++)
        if (*p != '/' && (p == from + common || p[-1] == '/')) ups++;
    const char *rest = to + common;
    while (*rest == '/') rest++;
    char *r = xmalloc(ups * 3 + strlen(rest) + 2);
    r[0] = 0;
    for (size_t k = 0; k < ups; k++) strcat(r, "../");
    strcat(r, rest);
    size_t n = strlen(r);
    if (n > 1 && r[n - 1] == '/') r[n - 1] = 0;
    if (!r[0]) strcpy(r, ".");
    return r;
}

int modelfile_save(const char *dir, const model *m, const model_meta *meta, char *err, size_t errlen)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot create folder: %s", dir, strerror(e));
        return -e;
    }
    char *path = join(dir, "model.ctrbox");
    char *rel = NULL;   /* the table folder seen from the model's: found again when both move together */
    if (meta->table_dir) {
        char *a = realpath(dir, NULL), *b = realpath(meta->table_dir, NULL);
        if (a && b) rel = relative_path(a, b);
        free(a);
        free(b);
    }
    durable_file f;
    int ret = durable_open(&f, path);
    if (ret < 0) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(-ret));
        free(path);
        return ret;
    }
    model_meta plain = *meta;   /* a state names a bundle's model; the file's is its own bytes */
    plain.state = plain.since_state = 0;
    json_t *j = meta_to_json(&plain);
    if (rel) json_object_set_new(j, "table_dir_relative", json_string(rel));
    free(rel);
    char *js = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    uint32_t hv[2] = { MF_VERSION, 0 };
    uint64_t jl = strlen(js), jh = XXH64(js, jl, 0);
    int ok = fwrite(MF_MAGIC, 1, 8, f.f) == 8 && fwrite(hv, sizeof hv, 1, f.f) == 1 && fwrite(&jl, 8, 1, f.f) == 1 &&
             fwrite(js, 1, jl, f.f) == jl && fwrite(&jh, 8, 1, f.f) == 1;
    free(js);
    if (ok) ok = model_save_dense(m, f.f) == 0;
    for (int t = 0; ok && !meta->table_dir && t < model_n_tables(m); t++) ok = emb_table_save(model_table((model *)m, t), f.f) == 0;
    if (ok) ok = fwrite(MF_END, 1, 8, f.f) == 8;
    if (!ok) {
        int e = errno ? errno : EIO;
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(e));
        durable_abort(&f);
        free(path);
        return -e;
    }
    ret = durable_commit(&f);
    if (ret < 0) snprintf(err, errlen, "%s: cannot commit: %s", path, strerror(-ret));
    free(path);
    return ret;
}

/* modelfile_load (into NULL: a new model in *out) and modelfile_load_into (into: an existing model
 * of the same architecture and schema, checked before any state is read into it). */
static int load(const char *dir, model *into, const data_schema *schema, model **out, model_meta *meta, char *err,
                size_t errlen)
{
    if (out) *out = NULL;
    memset(meta, 0, sizeof *meta);
    char *path = modelfile_path(dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        char *commit = join(dir, "COMMIT.ctrbox"), *log = join(dir, "log.jsonl");
        if (e == ENOENT && is_file(commit))   /* the --table-dir given where the --out was meant */
            snprintf(err, errlen, "%s is a table folder (--table-dir), not a model folder: give the run's --out folder "
                     "(ctrbox-table inspect %s looks at the table)", dir, dir);
        else if (e == ENOENT && is_file(log))
            snprintf(err, errlen, "%s: no model.ctrbox yet: the run that writes this folder has not saved a model (it "
                     "is still on its first epoch, or stopped before; its log.jsonl says how far it went)", dir);
        else
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        free(commit), free(log), free(path);
        return -e;
    }
    char magic[8], msg[300];
    uint32_t hv[2];
    uint64_t jl = 0, jh;
    int ret = -EBADMSG;
    model *m = NULL;
    char *js = NULL;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, MF_MAGIC, 8) || fread(hv, sizeof hv, 1, f) != 1 ||
        fread(&jl, 8, 1, f) != 1) {
        snprintf(err, errlen, "%s: not a ctrbox model file", path);
        goto fail;
    }
    if (hv[0] != MF_VERSION || jl > (64u << 20)) {
        snprintf(err, errlen, "%s: model file version %u, this build reads %u", path, hv[0], MF_VERSION);
        goto fail;
    }
    js = xmalloc(jl + 1);
    if (fread(js, 1, jl, f) != jl || fread(&jh, 8, 1, f) != 1 || XXH64(js, jl, 0) != jh) {
        snprintf(err, errlen, "%s: model description truncated or corrupt", path);
        goto fail;
    }
    js[jl] = 0;
    json_error_t je;
    json_t *j = json_loads(js, 0, &je);
    if (!j) {
        snprintf(err, errlen, "%s: model description is not JSON", path);
        goto fail;
    }
    ret = meta_from_json(j, meta, msg, sizeof msg);
    const char *rel = json_string_value(json_object_get(j, "table_dir_relative"));
    if (ret == 0 && meta->table_dir && rel) modelfile_find_table_dir(dir, meta, rel, 0);
    json_decref(j);
    if (ret < 0) {
        snprintf(err, errlen, "%s: %s", path, msg);
        goto fail;
    }
    if (model_config_check(&meta->cfg, &meta->schema, msg, sizeof msg) < 0) {
        snprintf(err, errlen, "%s: %s", path, msg);
        ret = -EBADMSG;
        goto fail;
    }
    if (!into && !out) {   /* the description only */
        fclose(f);
        free(js);
        free(path);
        return 0;
    }
    if (into && model_config_diff(&meta->cfg, model_config_of(into), msg, sizeof msg)) {
        snprintf(err, errlen, "another architecture: %s", msg);   /* the caller names the model */
        ret = -EINVAL;
        goto fail;
    }
    if (into && !schema_equal(&meta->schema, schema)) {
        snprintf(err, errlen, "trained on %u fields and %u dense values (%s ...), the data has %u and %u (%s ...)",
                 meta->schema.n_fields, meta->schema.n_dense, meta->schema.n_fields ? meta->schema.names[0] : "",
                 schema->n_fields, schema->n_dense, schema->n_fields ? schema->names[0] : "");
        ret = -EINVAL;
        goto fail;
    }
    m = into ? into : model_create(&meta->cfg, &meta->schema);
    ret = model_load_dense(m, f, msg, sizeof msg);
    for (int t = 0; ret == 0 && !meta->table_dir && t < model_n_tables(m); t++) ret = emb_table_load(model_table(m, t), f, msg, sizeof msg);
    if (ret < 0) {
        snprintf(err, errlen, "%s: %s", path, msg);
        goto fail;
    }
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, MF_END, 8) || fgetc(f) != EOF) {
        snprintf(err, errlen, "%s: truncated or trailing bytes after the model", path);
        ret = -EBADMSG;
        goto fail;
    }
    fclose(f);
    free(js);
    free(path);
    if (out) *out = m;
    return 0;
fail:
    fclose(f);
    free(js);
    free(path);
    if (m != into) model_destroy(m);
    model_meta_free(meta);
    return ret;
}

int modelfile_load(const char *dir, model **out, model_meta *meta, char *err, size_t errlen)
{
    return load(dir, NULL, NULL, out, meta, err, errlen);
}

int modelfile_read_meta(const char *dir, model_meta *meta, char *err, size_t errlen)
{
    return load(dir, NULL, NULL, NULL, meta, err, errlen);
}

int modelfile_load_into(const char *dir, model *m, const data_schema *schema, model_meta *meta, char *err, size_t errlen)
{
    return load(dir, m, schema, NULL, meta, err, errlen);
}

/* ---- the serving bundle ---- */

#define BD_MAGIC "CTRBXBDL"
#define BD_VERSION 2u   /* 1: no deleted keys after each table */

static int cmp_key_row(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a > b) - (a < b);
}

/* A tier's table streamed into the bundle: the keys in the index's order (ascending), then the
 * rows fetched in that order, 65,536 at a time. */
typedef struct {
    FILE *f;
    emb_tier *tier;
    int tb, dtype, pass;
    int64_t since;             /* a delta: only rows last trained after this pass (< 0: all) */
    uint32_t V;
    size_t rb, n;
    uint64_t *keys, *aux, count;
    uint8_t *rec, *buf;
    int bad;
    char *err;
    size_t errlen;
} bstream;

enum { BCHUNK = 65536 };

static void bs_flush(bstream *b)
{
    if (!b->n || b->bad) return;
    if (emb_tier_fetch(b->tier, b->tb, b->keys, b->n, b->rec, b->aux, b->err, b->errlen) < 0) {
        b->bad = 1;
        return;
    }
    for (size_t i = 0; i < b->n && !b->bad; i++) {
        if (!b->aux[i]) {
            snprintf(b->err, b->errlen, "table %d: key %016llx vanished while exporting", b->tb, (unsigned long long)b->keys[i]);
            b->bad = 1;
            break;
        }
        size_t k = quant_encode((quant_type)b->dtype, (const float *)((const emb_row_head *)(b->rec + i * b->rb) + 1), (int)b->V, b->buf);
        if (fwrite(b->buf, 1, k, b->f) != k) b->bad = 1;
    }
    b->n = 0;
}

static int bs_key(void *ctx, uint64_t key, uint64_t slot, float show, float click, uint32_t last_pass)
{
    bstream *b = ctx;
    if (b->since >= 0 && (int64_t)last_pass <= b->since) return 0;
    b->count++;
    if (b->pass == 0) return fwrite(&key, 8, 1, b->f) != 1;
    b->keys[b->n++] = key;
    if (b->n == BCHUNK) bs_flush(b);
    return b->bad;
}

static int bundle_table_from_tier(FILE *f, emb_tier *tier, int tb, int dtype, int64_t since, uint32_t V, size_t rb, char *err,
                                  size_t errlen)
{
    uint64_t n = emb_tier_rows(tier, tb);   /* a delta's count is known after its key scan: written then */
    long at = ftell(f);
    if (at < 0 || fwrite(&n, 8, 1, f) != 1 || fwrite(&V, 4, 1, f) != 1) return -1;
    bstream b = { f, tier, tb, dtype, 0, since, V, rb, 0, xmalloc(BCHUNK * 8), xmalloc(BCHUNK * 8), 0, xmalloc(BCHUNK * rb),
                  xmalloc(4 + (size_t)V * 4), 0, err, errlen };
    int ret = 0;
    for (b.pass = 0; b.pass < 2 && ret == 0; b.pass++) {
        b.count = 0;
        ret = emb_tier_scan(tier, tb, bs_key, &b, err, errlen);
        if (ret == 0) bs_flush(&b);
        if (ret == 0 && b.pass == 0 && since >= 0) {
            n = b.count;
            ret = fseek(f, at, SEEK_SET) < 0 || fwrite(&n, 8, 1, f) != 1 || fseek(f, 0, SEEK_END) < 0 ? -1 : 0;
        }
        if (ret == 0 && (b.bad || b.count != n)) {
            if (!b.bad) snprintf(err, errlen, "table %d: the index changed while exporting", tb);
            ret = -1;
        }
    }
    free(b.keys), free(b.aux), free(b.rec), free(b.buf);
    return ret;
}

/* A table's rows from memory: those last trained after `since` (< 0: all), in key order. */
static int bundle_table_from_memory(FILE *f, emb_table *e, int dtype, int64_t since, uint32_t V)
{
    uint64_t all = emb_table_rows(e), n = 0;
    uint64_t *kr = xmalloc((all ? all : 1) * 2 * sizeof *kr);   /* (key, row) pairs sorted by key */
    for (uint64_t r = 0; r < all; r++) {
        const emb_row_head *h = emb_table_head(e, (uint32_t)r);
        if (since >= 0 && (int64_t)h->last_pass <= since) continue;
        kr[2 * n] = h->key;
        kr[2 * n + 1] = r;
        n++;
    }
    qsort(kr, n, 2 * sizeof *kr, cmp_key_row);
    int ok = fwrite(&n, 8, 1, f) == 1 && fwrite(&V, 4, 1, f) == 1;
    for (uint64_t r = 0; ok && r < n; r++) ok = fwrite(&kr[2 * r], 8, 1, f) == 1;
    uint8_t *buf = xmalloc(4 + (size_t)V * 4);
    for (uint64_t r = 0; ok && r < n; r++) {
        size_t b = quant_encode((quant_type)dtype, emb_table_vals(e, (uint32_t)kr[2 * r + 1]), (int)V, buf);
        ok = fwrite(buf, 1, b, f) == b;
    }
    free(buf);
    free(kr);
    return ok ? 0 : -1;
}

/* A table's deleted keys after `since` (none for a base), in order. */
static int bundle_deleted(FILE *f, const emb_table *e, int64_t since)
{
    key_vec d = { 0 };
    if (since >= 0) emb_table_deleted_since(e, (uint32_t)since, &d);
    if (d.n) qsort(d.k, d.n, sizeof *d.k, cmp_key_row);   /* by the first u64: the key */
    uint64_t n = d.n;
    int ok = fwrite(&n, 8, 1, f) == 1 && (!n || fwrite(d.k, 8, n, f) == n);
    key_vec_free(&d);
    return ok ? 0 : -1;
}

/* ---- a model's state: which trained model a serving bundle holds ----
 * XXH64 of the model file's bytes after its description (the dense section, the tables, the end
 * magic), then, for a model whose rows are in a table folder, with the folder's id: a model trained
 * any further (its dense section holds the optimizer's step), or another model, has another state.
 * Not the folder's commit count: commits that train nothing (a repack) would make the same model
 * two states. In memory it is the hash of the bytes its file would have, written to a stream that
 * only hashes. */
static uint64_t state_finish(uint64_t bytes, uint64_t table_id)
{
    uint64_t v[2] = { bytes, table_id };
    uint64_t s = table_id ? XXH64(v, sizeof v, 0) : bytes;
    return s ? s : 1;   /* 0: unknown */
}

void modelfile_state_text(uint64_t state, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)state); }

int modelfile_state_parse(const char *text, uint64_t *state)
{
    char *end = NULL;
    if (!text || strlen(text) != 16 || !isxdigit((unsigned char)text[0])) return -1;
    uint64_t v = strtoull(text, &end, 16);
    if (*end || !v) return -1;
    *state = v;
    return 0;
}

static ssize_t hash_write(void *h, const char *buf, size_t n)
{
    XXH64_update(h, buf, n);
    return (ssize_t)n;
}

uint64_t modelfile_state_of(const model *m, uint64_t table_id)
{
    XXH64_state_t h;
    XXH64_reset(&h, 0);
    FILE *f = fopencookie(&h, "w", (cookie_io_functions_t){ .write = hash_write });
    CHECK(f);
    model_save_dense(m, f);
    for (int t = 0; !table_id && t < model_n_tables(m); t++) emb_table_save(model_table((model *)m, t), f);
    fwrite(MF_END, 1, 8, f);
    fclose(f);
    return state_finish(XXH64_digest(&h), table_id);
}

int modelfile_state(const char *dir, uint64_t *state, char *err, size_t errlen)
{
    model_meta meta;
    int ret = modelfile_read_meta(dir, &meta, err, errlen);
    if (ret < 0) return ret;
    char *path = modelfile_path(dir);
    FILE *f = fopen(path, "rb");
    uint64_t jl = 0;
    ret = f && fseek(f, 16, SEEK_SET) == 0 && fread(&jl, 8, 1, f) == 1 && fseek(f, (long)(jl + 8), SEEK_CUR) == 0 ? 0 : -EIO;
    XXH64_state_t h;
    XXH64_reset(&h, 0);
    char *buf = xmalloc(1 << 20);
    size_t n;
    while (ret == 0 && (n = fread(buf, 1, 1 << 20, f)) > 0) XXH64_update(&h, buf, n);
    if (ret == 0 && ferror(f)) ret = -EIO;
    free(buf);
    if (f) fclose(f);
    if (ret < 0) snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno ? errno : EIO));
    else *state = state_finish(XXH64_digest(&h), meta.table_dir ? meta.table_id : 0);
    free(path);
    model_meta_free(&meta);
    return ret;
}

int modelfile_bundle_save(const char *path, model *m, const model_meta *meta, emb_tier *tier, int dtype, int64_t since,
                          char *err, size_t errlen)
{
    if (since >= 0) {   /* the deletions since then must all be known */
        uint32_t from = meta->deltas_from;
        for (int t = 0; t < model_n_tables(m); t++)
            if (emb_table_deletions_from(model_table(m, t)) > from) from = emb_table_deletions_from(model_table(m, t));
        if ((uint64_t)since > meta->passes || (uint64_t)since < from) {
            if ((uint64_t)since > meta->passes)
                snprintf(err, errlen, "--since %lld: the model has trained %u passes", (long long)since, meta->passes);
            else
                snprintf(err, errlen, "--since %lld: the keys deleted before pass %u are not recorded (%s); export a full "
                         "bundle as the new base", (long long)since, from,
                         from == meta->deltas_from ? "ctrbox-table shrink deleted keys offline at that pass"
                                                   : "the model was saved by an older build, or shrunk offline");
            return -EINVAL;
        }
    }
    durable_file f;
    int ret = durable_open(&f, path);
    if (ret < 0) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(-ret));
        return ret;
    }
    if (!f.tmp) {   /* its checksum is computed by reading the bytes back */
        durable_abort(&f);
        snprintf(err, errlen, "%s: not a regular file: a bundle is written to a file, not to a pipe or a device", path);
        return -EINVAL;
    }
    model_meta mm = *meta;
    mm.table_dir = NULL;   /* the rows are in the bundle */
    mm.follow = NULL;
    mm.is_delta = since >= 0;
    mm.delta_since = since >= 0 ? (uint32_t)since : 0;
    json_t *j = meta_to_json(&mm);
    char *js = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    uint32_t hv[2] = { BD_VERSION, (uint32_t)dtype };
    uint64_t jl = strlen(js);
    int ok = fwrite(BD_MAGIC, 1, 8, f.f) == 8 && fwrite(hv, sizeof hv, 1, f.f) == 1 && fwrite(&jl, 8, 1, f.f) == 1 &&
             fwrite(js, 1, jl, f.f) == jl;
    free(js);
    ok = ok && model_save_dense(m, f.f) == 0;
    for (int t = 0; ok && t < model_n_tables(m); t++) {
        emb_table *e = model_table(m, t);
        uint32_t V = (uint32_t)emb_table_values(e);
        if (tier && bundle_table_from_tier(f.f, tier, t, dtype, since, V, emb_table_row_bytes(e), err, errlen) < 0) {
            durable_abort(&f);
            return -EIO;
        }
        ok = (tier || bundle_table_from_memory(f.f, e, dtype, since, V) == 0) && bundle_deleted(f.f, e, since) == 0;
    }
    ok = ok && fwrite(MF_END, 1, 8, f.f) == 8 && fflush(f.f) == 0;
    if (ok) {   /* the checksum of every byte so far, read back */
        FILE *r = fopen(f.tmp, "rb");
        XXH64_state_t *st = XXH64_createState();
        XXH64_reset(st, 0);
        char blk[1 << 16];
        size_t k;
        while (r && (k = fread(blk, 1, sizeof blk, r)) > 0) XXH64_update(st, blk, k);
        uint64_t sum = XXH64_digest(st);
        XXH64_freeState(st);
        ok = r && fclose(r) == 0 && fwrite(&sum, 8, 1, f.f) == 1;
    }
    if (!ok) {
        int e = errno ? errno : EIO;
        snprintf(err, errlen, "%s: write failed: %s", path, strerror(e));
        durable_abort(&f);
        return -e;
    }
    ret = durable_commit(&f);
    if (ret < 0) snprintf(err, errlen, "%s: cannot commit: %s", path, strerror(-ret));
    return ret;
}

/* A bundle file: a new model and its metadata; dead (an array of a key_vec per table, or NULL):
 * the deleted keys of a delta. */
static int bundle_read(const char *path, model **out, model_meta *meta, key_vec **dead, char *err, size_t errlen)
{
    *out = NULL;
    if (dead) *dead = NULL;
    memset(meta, 0, sizeof *meta);
    size_t len;
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    struct stat st;   /* a folder opens too, and its size read as 2^63 - 1 */
    if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a serving bundle file (%s)", path,
                 S_ISDIR(st.st_mode) ? "a folder: give the file export-serving wrote" : "not a regular file");
        fclose(f);
        return -EINVAL;
    }
    len = (size_t)st.st_size;
    uint8_t *all = xmalloc(len ? len : 1);   /* bundle_read */
    int ret = fread(all, 1, len, f) == len ? 0 : -EIO;
    fclose(f);
    uint64_t sum = 0;
    if (ret == 0 && len >= 8) memcpy(&sum, all + len - 8, 8);
    if (ret < 0 || len < 8 + 16 + 8 + 8 || memcmp(all, BD_MAGIC, 8) || XXH64(all, len - 8, 0) != sum) {
        snprintf(err, errlen, "%s: not a ctrbox serving bundle, or truncated or corrupt (checksum)", path);
        free(all);
        return -EBADMSG;
    }
    uint32_t hv[2];
    uint64_t jl;
    memcpy(hv, all + 8, 8);
    memcpy(&jl, all + 16, 8);
    model *m = NULL;
    char msg[300];
    ret = -EBADMSG;
    if ((hv[0] != BD_VERSION && hv[0] != 1) || hv[1] < QUANT_FP32 || hv[1] > QUANT_INT8 || jl > len) {
        snprintf(err, errlen, "%s: bundle version %u or value type %u unknown", path, hv[0], hv[1]);
        goto fail;
    }
    json_error_t je;
    json_t *j = json_loadb((const char *)all + 24, jl, 0, &je);
    if (!j || meta_from_json(j, meta, msg, sizeof msg) < 0 || model_config_check(&meta->cfg, &meta->schema, msg, sizeof msg) < 0) {
        if (j) json_decref(j);
        snprintf(err, errlen, "%s: bad model description", path);
        goto fail;
    }
    json_decref(j);
    m = model_create(&meta->cfg, &meta->schema);
    FILE *mf = fmemopen(all + 24 + jl, len - 8 - 24 - jl, "rb");
    if (model_load_dense(m, mf, msg, sizeof msg) < 0) {
        fclose(mf);
        snprintf(err, errlen, "%s: %s", path, msg);
        goto fail;
    }
    size_t pos = 24 + jl + (size_t)ftell(mf);
    fclose(mf);
    int dtype = (int)hv[1];
    for (int t = 0; t < model_n_tables(m); t++) {
        emb_table *e = model_table(m, t);
        uint64_t n;
        uint32_t V;
        if (pos + 12 > len - 16) goto truncated;
        memcpy(&n, all + pos, 8);
        memcpy(&V, all + pos + 8, 4);
        pos += 12;
        size_t per = quant_row_bytes((quant_type)dtype, (int)V);
        if (V != (uint32_t)emb_table_values(e)) {
            snprintf(err, errlen, "%s: table %d has %u values a row, the model %d", path, t, V, emb_table_values(e));
            goto fail;
        }
        if (n > (len - pos) / (8 + per)) goto truncated;
        const uint8_t *keys = all + pos, *vals = keys + n * 8;
        uint8_t *rec = xcalloc(1, emb_table_row_bytes(e));
        for (uint64_t r = 0; r < n; r++) {
            emb_row_head *h = (emb_row_head *)rec;
            memcpy(&h->key, keys + r * 8, 8);
            quant_decode((quant_type)dtype, vals + r * per, (int)V, (float *)(h + 1));
            emb_table_insert_record(e, rec, 0);
        }
        free(rec);
        pos += n * (8 + per);
        if (hv[0] < 2) continue;   /* version 1: no deleted keys */
        uint64_t nd;
        if (pos + 8 > len - 16) goto truncated;
        memcpy(&nd, all + pos, 8);
        pos += 8;
        if (nd > (len - 16 - pos) / 8 || (nd && !meta->is_delta)) goto truncated;
        if (dead && !*dead) *dead = xcalloc((size_t)model_n_tables(m), sizeof **dead);
        for (uint64_t i = 0; dead && i < nd; i++) {
            uint64_t k;
            memcpy(&k, all + pos + i * 8, 8);
            key_vec_push(&(*dead)[t], k);
        }
        pos += nd * 8;
    }
    if (pos + 16 != len || memcmp(all + pos, MF_END, 8)) goto truncated;
    free(all);
    *out = m;
    return 0;
truncated:
    snprintf(err, errlen, "%s: sections do not add up to the file's size", path);
fail:
    if (dead && *dead) {
        for (int t = 0; m && t < model_n_tables(m); t++) key_vec_free(&(*dead)[t]);
        free(*dead);
        *dead = NULL;
    }
    free(all);
    model_destroy(m);
    model_meta_free(meta);
    return -EBADMSG;
}

int modelfile_bundle_load(const char *path, model **out, model_meta *meta, char *err, size_t errlen)
{
    int ret = bundle_read(path, out, meta, NULL, err, errlen);
    if (ret == 0 && meta->is_delta) {
        snprintf(err, errlen, "%s: a delta (the rows changed after pass %u): give its base bundle with --bundle and this "
                 "file with --delta", path, meta->delta_since);
        model_destroy(*out);
        *out = NULL;
        model_meta_free(meta);
        return -EINVAL;
    }
    return ret;
}

int modelfile_bundle_apply(const char *path, model *m, model_meta *meta, char *err, size_t errlen)
{
    model *d;
    model_meta dm;
    key_vec *dead;
    int ret = bundle_read(path, &d, &dm, &dead, err, errlen);
    if (ret < 0) return ret;
    char diff[300];
    if (!dm.is_delta)
        snprintf(err, errlen, "%s: a full bundle, not a delta (give it with --bundle)", path);
    else if (model_config_diff(&meta->cfg, &dm.cfg, diff, sizeof diff) != 0)
        snprintf(err, errlen, "%s: a delta of another model: %s", path, diff);
    else if (dm.schema.n_fields != meta->schema.n_fields || dm.schema.n_dense != meta->schema.n_dense)
        snprintf(err, errlen, "%s: a delta of another model: its data has other fields", path);
    else if (dm.table_id && meta->table_id && dm.table_id != meta->table_id)   /* (bundles before them name none) */
        snprintf(err, errlen, "%s: a delta of another model: its rows come from table folder %016llx, the model's from %016llx",
                 path, (unsigned long long)dm.table_id, (unsigned long long)meta->table_id);
    else if (dm.delta_since > meta->passes || dm.passes < meta->passes)   /* equal: the same again, or an offline shrink's */
        snprintf(err, errlen, "%s: holds the changes after pass %u up to pass %u, the model is at pass %u: %s", path,
                 dm.delta_since, dm.passes, meta->passes,
                 dm.passes < meta->passes ? "it is older (give the deltas in the order they were written)"
                                          : "the deltas between are missing");
    /* by state (bundles that carry one): the model the delta goes on from is this one. The pass
     * counts alone took a delta of another run of the same architecture, or of another warm start
     * from the same model, and changed the serving model into neither, without a word. */
    else if (meta->state && dm.since_state && meta->passes == dm.delta_since && meta->state != dm.since_state)
        snprintf(err, errlen, "%s: goes on from another model than this one (state %016llx at pass %u, this one %016llx): "
                 "a delta of another run, or exported --since another model folder than this base's", path,
                 (unsigned long long)dm.since_state, dm.delta_since, (unsigned long long)meta->state);
    else if (meta->state && dm.since_state && meta->passes != dm.delta_since && meta->passes == dm.passes &&
             meta->state != dm.state)   /* the same delta again changes nothing; another one would */
        snprintf(err, errlen, "%s: a delta of another model at the same pass %u (state %016llx, this one %016llx)", path,
                 dm.passes, (unsigned long long)dm.state, (unsigned long long)meta->state);
    else if (meta->state && dm.since_state && meta->passes != dm.delta_since && meta->passes != dm.passes)
        snprintf(err, errlen, "%s: holds the changes after pass %u up to pass %u, the model is at pass %u, between: "
                 "which model the delta goes on from cannot be checked; export it --since the model folder this base "
                 "(or its last delta) was exported from", path, dm.delta_since, dm.passes, meta->passes);
    else
        ret = 1;
    if (ret == 1) {   /* deletions, then the rows (a key deleted and created again comes back), then the dense layers */
        ret = 0;
        for (int t = 0; dead && t < model_n_tables(m); t++)
            for (size_t i = 0; i < dead[t].n; i++) {
                int64_t r = emb_table_find(model_table(m, t), dead[t].k[i]);
                if (r >= 0) emb_table_remove(model_table(m, t), (uint32_t)r);
            }
        for (int t = 0; t < model_n_tables(m); t++) {
            emb_table *to = model_table(m, t), *from = model_table(d, t);
            size_t V = (size_t)emb_table_values(to);
            for (size_t r = 0; r < emb_table_rows(from); r++) {
                uint64_t key = emb_table_head(from, (uint32_t)r)->key;
                int64_t at = emb_table_find(to, key);
                uint32_t row = at >= 0 ? (uint32_t)at : emb_table_insert_record(to, emb_table_head(from, (uint32_t)r), 0);
                memcpy(emb_table_vals(to, row), emb_table_vals(from, (uint32_t)r), V * sizeof(float));
            }
        }
        char *buf = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&buf, &len);
        ret = f && model_save_dense(d, f) == 0 && fclose(f) == 0 ? 0 : -EIO;
        if (ret == 0) {
            f = fmemopen(buf, len, "rb");
            ret = f && model_load_dense(m, f, diff, sizeof diff) == 0 ? 0 : -EBADMSG;
            if (f) fclose(f);
            if (ret < 0) snprintf(err, errlen, "%s: %s", path, diff);
        } else {
            snprintf(err, errlen, "%s: out of memory", path);
        }
        free(buf);
        if (ret == 0) {
            meta->passes = dm.passes;
            meta->state = dm.state;   /* 0 when the delta names none: what follows is not checked */
        }
    } else {
        ret = -EINVAL;
    }
    for (int t = 0; dead && t < model_n_tables(d); t++) key_vec_free(&dead[t]);
    free(dead);
    model_destroy(d);
    model_meta_free(&dm);
    return ret;
}
