/*
 * model.c: the models of model.h, each layer on the backend it is placed on (the CPU's unless
 * model_place moved it).
 *
 * Parameters are registered first (pointer-to-view and size), then one block each is allocated
 * for parameters, gradients and moments and the views are set; a placed layer mirrors its range of
 * them on the device (placed). A batch's buffers are acts: a host copy sized for the configured
 * batch and a device copy made when a layer there needs it, with a record of which is current, so
 * a layer reads its inputs where it runs and values cross only at device boundaries. Batch flow:
 *   gather   embedding/batch.h: entry k -> unique row u; Uw (U) first-order weights, Ue the
 *            embeddings of the unique rows (with the pass tier, dense/devrows.h, they are gathered
 *            out of the rows in device memory instead)
 *   forward/backward over the layers, ending in dUw, dUe (the batch's gradient arrays)
 *   scatter  embedding/batch.h: the optimizer inside each unique row (or, with the pass tier,
 *            inside the rows in device memory); then the dense optimizer over the block
 * The model owns its tables, blocks, acts and the pass tier; acts borrow the batch's row arrays.
 */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "../io/mix.h"
#include "../io/util.h"
#include "backend.h"
#include "devrows.h"

static const char *kind_names[MODEL_COUNT] = { "lr", "fm", "ffm", "dnn", "widedeep", "deepfm", "dcnv2", "dlrm" };

int model_kind_from_name(const char *name)
{
    for (int i = 0; i < MODEL_COUNT; i++)
        if (!strcmp(name, kind_names[i])) return i;
    return -1;
}

const char *model_kind_name(model_kind k) { return (unsigned)k < MODEL_COUNT ? kind_names[k] : "?"; }

void model_config_default(model_config *c, model_kind kind)
{
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->dim = kind == MODEL_FFM ? 4 : 16;
    c->n_hidden = 3;
    c->hidden[0] = c->hidden[1] = c->hidden[2] = 400;
    c->n_bottom = 2;
    c->bottom[0] = 64;
    c->bottom[1] = c->dim;
    c->cross_layers = 3;
    c->init_std = 1e-2f;   /* FuxiCTR's normal(0, 1e-4 variance) */
    c->seed = 1;
    c->batch = 4096;
    dense_opt_default(&c->dopt, DOPT_ADAM);
    sparse_opt_default(&c->sopt, SOPT_ADAM);
}

/* The embedding size field_dims gives the field called name, or 0. */
static int field_dim_of(const model_config *c, const char *name)
{
    const char *p = c->field_dims;
    size_t n = strlen(name);
    while (*p) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        if (eq && eq < end && (size_t)(eq - p) == n && !memcmp(p, name, n)) return atoi(eq + 1);
        p = *end ? end + 1 : end;
    }
    return 0;
}

static void hidden_list(const int *v, int n, char *out, size_t len)
{
    size_t w = 0;
    out[0] = 0;
    for (int i = 0; i < n && w < len; i++) w += (size_t)snprintf(out + w, len - w, "%s%d", i ? "," : "", v[i]);
}

int model_config_diff(const model_config *a, const model_config *b, char *out, size_t n)
{
    char x[128], y[128];
#define DIFF_INT(flag, field)                                                                        \
    if (a->field != b->field) {                                                                      \
        snprintf(out, n, "%s %d in the model, %d here", flag, (int)a->field, (int)b->field);         \
        return 1;                                                                                    \
    }
    if (a->kind != b->kind) {
        snprintf(out, n, "--model %s in the model, %s here", model_kind_name(a->kind), model_kind_name(b->kind));
        return 1;
    }
    DIFF_INT("--dim", dim)
    hidden_list(a->hidden, a->n_hidden, x, sizeof x);
    hidden_list(b->hidden, b->n_hidden, y, sizeof y);
    if (strcmp(x, y)) {
        snprintf(out, n, "--hidden %s in the model, %s here", x, y);
        return 1;
    }
    hidden_list(a->bottom, a->n_bottom, x, sizeof x);
    hidden_list(b->bottom, b->n_bottom, y, sizeof y);
    if (a->kind == MODEL_DLRM && strcmp(x, y)) {
        snprintf(out, n, "--bottom %s in the model, %s here", x, y);
        return 1;
    }
    if (a->kind == MODEL_DCNV2) DIFF_INT("--cross", cross_layers)
    if (a->kind == MODEL_DLRM) DIFF_INT("--interaction cat", dlrm_cat)
    DIFF_INT("--batchnorm", batchnorm)
    DIFF_INT("--pool mean", pool_mean)
    DIFF_INT("--table-per-field", table_per_field)
    if (strcmp(a->field_dims, b->field_dims)) {
        snprintf(out, n, "--field-dim '%s' in the model, '%s' here", a->field_dims, b->field_dims);
        return 1;
    }
    if (a->dopt.kind != b->dopt.kind) {
        snprintf(out, n, "--dense-opt %s in the model, %s here", dense_opt_name(a->dopt.kind), dense_opt_name(b->dopt.kind));
        return 1;
    }
    if (a->sopt.kind != b->sopt.kind) {
        snprintf(out, n, "--sparse-opt %s in the model, %s here", sparse_opt_name(a->sopt.kind), sparse_opt_name(b->sopt.kind));
        return 1;
    }
    if ((a->min_show > 1) != (b->min_show > 1)) {   /* the default rows exist only with admission */
        snprintf(out, n, "--min-show %u in the model, %u here (admission on one side only)", a->min_show, b->min_show);
        return 1;
    }
    if (a->min_show > 1 && a->admit_mb != b->admit_mb) {   /* the sketch's cells are its counts */
        snprintf(out, n, "--admit-mb %g in the model, %g here", (double)a->admit_mb, (double)b->admit_mb);
        return 1;
    }
#undef DIFF_INT
    return 0;
}

int model_config_check(const model_config *c, const data_schema *schema, char *err, size_t errlen)
{
    if (c->min_show > 1 && c->admit_mb > 0 && c->min_show > 0xffff) {
        snprintf(err, errlen, "--min-show %u: the admission sketch counts to 65535 (give --admit-mb 0 for exact counts)",
                 c->min_show);
        return -1;
    }
    if (c->min_show > 1 && c->admit_mb > 0 && c->admit_mb * 1048576.0 / 16 < 1024.0 * 4 * 4) {
        snprintf(err, errlen, "--admit-mb %g: the admission sketch needs at least 0.25 MB (or 0: exact counts)",
                 (double)c->admit_mb);
        return -1;
    }
    const char *p = c->field_dims;
    int sizes = 0, first = 0, mixed = 0;
    while (*p) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        char *stop;
        long d = eq && eq < end ? strtol(eq + 1, &stop, 10) : 0;
        if (!eq || eq > end || eq == p || d < 1 || d > 4096 || stop != end) {
            snprintf(err, errlen, "--field-dim: '%.*s' is not NAME=SIZE", (int)(end - p), p);
            return -1;
        }
        int found = 0;
        for (uint32_t f = 0; f < schema->n_fields; f++)
            if (strlen(schema->names[f]) == (size_t)(eq - p) && !memcmp(schema->names[f], p, (size_t)(eq - p))) {
                found = 1;
                if (schema->kind[f] != FIELD_CAT) {
                    snprintf(err, errlen, "--field-dim: field %s is numeric, it has no embedding", schema->names[f]);
                    return -1;
                }
            }
        if (!found) {
            snprintf(err, errlen, "--field-dim: the data has no field '%.*s'", (int)(eq - p), p);
            return -1;
        }
        if (sizes++ == 0) first = (int)d;
        mixed |= d != first || d != c->dim;
        p = *end ? end + 1 : end;
    }
    int pairwise = c->kind == MODEL_FM || c->kind == MODEL_FFM || c->kind == MODEL_DEEPFM || c->kind == MODEL_DLRM;
    if (mixed && pairwise) {
        snprintf(err, errlen, "--field-dim: %s combines fields' vectors pairwise, so all need the size --dim %d",
                 model_kind_name(c->kind), c->dim);
        return -1;
    }
    return 0;
}

/* ---- parameter registry ---- */
typedef struct {
    float **p, **g;
    size_t n;
    int init;        /* 0 zeros, 1 ones, 2 uniform(-a, a) */
    float a;
} preq;

/* A layer's dense state placed on a device: the parameter block's range [hp, hp + np) (with its
 * gradients and optimizer moments) mirrored there as one block each, and the buffer block's range
 * [hb, hb + nb) (batch norm's running statistics). The host blocks keep a copy, brought up to date
 * by placed_sync_host; edits made to them go back by placed_take_host_edits. */
typedef struct {
    const dense_backend *be;          /* NULL: not placed */
    size_t hp, np, hb, nb;
    float *p, *g, *m, *run;           /* device blocks: parameters, gradients, moments, buffers */
} placed;

typedef struct {
    int in, out;
    float *w, *b, *dw, *db;
    float *gamma, *beta, *dgamma, *dbeta, *run_mean, *run_var;
    int relu, bn;
    float *z, *y, *d, *mean, *rstd;   /* activations (B, out); y is z without batch norm; d = after dropout */
    uint8_t *mask;
    const float *x;                   /* input of the last forward (borrowed) */
    /* Placed on a device (pl.be != NULL): every pointer above is device memory, the parameters
     * views into pl's blocks. */
    placed pl;
    float *xin, *s0, *s1;             /* the staged input (B, in) when the layer before runs on the other
                                         side; the device's backward scratch (B, max(in, out)) */
} fc;

typedef struct {
    int n;
    fc l[MODEL_MAX_LAYERS + 1];
} mlp;

/* Parameters, llm.c's ParameterTensors: views into one block each of parameters and gradients
 * (d*), registered at create (reserve) and laid out by alloc_params; the optimizer's moments and
 * the batch-norm running statistics ("buffers") in blocks of their own. An MLP layer (fc) keeps
 * its views, and its activations, itself. */
typedef struct {
    preq *reqs;
    int n_reqs, cap_reqs;
    float *params, *grads, *moments, *buffers;
    size_t n_params, n_buffers;
    float *bias, *dbias, *wd, *dwd;   /* global bias; wide weights on dense values (ND) */
    mlp deep, bottom, top;
    int n_cross;
    float *cw[MODEL_MAX_LAYERS], *cb[MODEL_MAX_LAYERS], *dcw[MODEL_MAX_LAYERS], *dcb[MODEL_MAX_LAYERS];
    float *head_w, *head_b, *dhead_w, *dhead_b;  /* dcnv2 final linear */
} model_params;

/* A buffer of the batch (an activation, a gradient, an input) that lives on the host, on the
 * device, or on both: valid says where its contents are current. The host copy is allocated at
 * create for the largest batch (or borrowed: the batch's rows are emb_batch's arrays); the device
 * copy when a layer there first needs it. A layer reads an input with act_get (copied across when
 * it is current only on the other side), writes an output with act_put, adds into one with
 * act_acc; so each layer runs where it is placed and data crosses only at the boundaries. */
enum { ON_HOST = 1, ON_DEV = 2 };
typedef struct {
    float *h, *d;
    size_t n, cap;                    /* floats: the host copy's (the most a batch uses); the device copy's */
    uint8_t valid, borrowed;          /* ON_HOST | ON_DEV; h is not the act's own */
} act;

/* Activations of one batch of up to B rows that backward reads, and their gradients (d*). */
typedef struct {
    act logit, dlogit, label, dense;        /* (B), (B), (B), (B, ND) */
    act wide, fm, head;                     /* (B): the logit's parts from the wide part, FM / FFM, DCN-V2's head */
    act pooled, dpooled;                    /* (B, W) pooled embeddings */
    act x0, dx0;                            /* (B, X0) concat of pooled and dense, the MLP's and cross net's input */
    act deep_o, ddeep, dx0_deep;            /* the deep MLP's output (B, last) and its gradient; d x0 from it */
    act xl[MODEL_MAX_LAYERS + 1], ct[MODEL_MAX_LAYERS];   /* dcnv2: cross layers' outputs (xl[0] unused: x0) and terms */
    act dxl[2], ctmp;                       /* dcnv2 backward: d x_l in turn, cross scratch (B, X0) */
    act cat, dcat;                          /* dcnv2 [x_L, deep out]; dlrm [bottom out, dots] */
    act dots, ddots, inter, dinter, dsplit; /* dlrm: pairwise dots, the vectors they are taken of; d bottom-out share */
    act bot, dbot, top_o;                   /* dlrm: bottom MLP output (B, dim) and its gradient; top MLP output (B) */
    act uw, ue, duw, due;                   /* the batch's rows and their gradients (emb_batch's arrays on the host) */
} model_acts;

/* Scratch: reused within a step, nothing in it outlives a call. */
typedef struct {
    float *hl, *dhl;                         /* (B, widest MLP layer) backward of the MLPs on the host */
    uint64_t *lrp;                           /* (B + 1) the batch's row_ptr, starting at 0 */
    size_t *rec;                             /* (U) the pass tier's slots of the batch's rows */
    size_t cap_rec;
} model_scratch;

/* The step's batch entries as pooling and the wide part read them: on the host, emb_batch's and
 * the block's arrays; on the device, copies uploaded once a step when a layer there first needs
 * them (the field -> slot tables once, at placement). */
typedef struct {
    const uint32_t *uidx;
    const uint16_t *field;
    const float *val;
    const uint64_t *lrp;
    const size_t *uoff;
    const int32_t *slot;
    const int *off, *dim;
} entries;

typedef struct {
    uint32_t *uidx;
    uint16_t *field;
    float *val;
    uint64_t *lrp;
    size_t *uoff, *rec;
    int32_t *slot;
    int *off, *dim;
    size_t cap_k, cap_u;              /* entries and unique rows the buffers hold */
    int fresh;                        /* this step's entries are there */
} dev_entries;

/* The step being run: its rows of the block and their sizes. */
typedef struct {
    const sample_block *b;
    size_t r0, nnz, U;
    uint64_t k0;
    int B;
} step_batch;

struct model {
    model_config c;
    const dense_backend *be;   /* the host's (CPU) backend */
    int B;                /* largest batch */
    int F, ND;            /* pooled fields, dense values */
    int32_t *slot;        /* field -> slot, -1 for num fields */
    int n_fields;
    int n_tables;
    emb_table **tab;      /* (n_tables) */
    int *tE;              /* (n_tables) embedding floats per row (dim, or F*dim for ffm) */
    int *stab, *soff, *sdim;   /* per slot: its table, its offset and width in a pooled row */
    int has_w, E, W;      /* E: the widest table's floats per row; W: pooled row width */
    int X0;               /* width of x0: W + ND */
    emb_batch *rows;      /* the batch's rows of the tables: gathered, and updated after backward */
    model_params p;
    model_acts a;
    model_scratch s;
    uint64_t step;
    uint64_t drop_stream;      /* model_set_dropout_stream: 0 unless lanes set theirs */
    /* Placement (model_place): the device every placed layer runs on (NULL: none), and where each
     * layer that is not an MLP's runs (the host's backend unless placed) */
    const dense_backend *dev;
    const dense_backend *be_emb, *be_wide, *be_fm, *be_cross[MODEL_MAX_LAYERS], *be_head, *be_inter, *be_loss, *be_x0;
    placed pl_wide, pl_cross[MODEL_MAX_LAYERS], pl_head, pl_loss;
    int n_placed;         /* every placed block, the MLP layers' included */
    placed *placed_l[4 * (MODEL_MAX_LAYERS + 1) + 4];
    int host_edited;      /* model_dense handed out the host blocks: upload them before the next step */
    dev_entries de;
    step_batch cur;
    dev_rows *tier;       /* the pass tier: the rows in device memory (model_set_row_tier), or NULL */
};

static void reserve(model *m, float **p, float **g, size_t n, int init, float a)
{
    if (m->p.n_reqs == m->p.cap_reqs) m->p.reqs = xrealloc(m->p.reqs, (size_t)(m->p.cap_reqs = m->p.cap_reqs ? m->p.cap_reqs * 2 : 32) * sizeof *m->p.reqs);
    m->p.reqs[m->p.n_reqs++] = (preq){ p, g, n, init, a };
}

static void fc_reserve(model *m, fc *f, int in, int out, int relu, int bn)
{
    f->in = in;
    f->out = out;
    f->relu = relu;
    f->bn = bn;
    float a = 1.0f / sqrtf((float)in);   /* PyTorch's Linear default */
    reserve(m, &f->w, &f->dw, (size_t)in * out, 2, a);
    reserve(m, &f->b, &f->db, (size_t)out, 2, a);
    if (bn) {
        reserve(m, &f->gamma, &f->dgamma, (size_t)out, 1, 0);
        reserve(m, &f->beta, &f->dbeta, (size_t)out, 0, 0);
        reserve(m, &f->run_mean, NULL, (size_t)out, 0, 0);
        reserve(m, &f->run_var, NULL, (size_t)out, 1, 0);
    }
}

/* MLP: hidden layers relu (+ bn, dropout), then a head to `head` outputs (0: none) */
static int mlp_reserve(model *m, mlp *p, int in, const int *sizes, int n, int head, int relu_all, int bn)
{
    p->n = 0;
    for (int i = 0; i < n; i++) {
        fc_reserve(m, &p->l[p->n++], in, sizes[i], 1, bn && !(relu_all && i == n - 1));
        in = sizes[i];
    }
    if (head) fc_reserve(m, &p->l[p->n++], in, head, 0, 0);
    return head ? head : in;
}

static void mlp_alloc(mlp *p, int B, float dropout)
{
    for (int i = 0; i < p->n; i++) {
        fc *f = &p->l[i];
        size_t n = (size_t)B * f->out;
        f->z = xcalloc(n, sizeof(float));
        f->y = f->bn ? xcalloc(n, sizeof(float)) : f->z;   /* without batch norm ReLU runs in place */
        f->d = f->relu && dropout > 0 ? xcalloc(n, sizeof(float)) : NULL;
        f->mask = f->d ? xcalloc(n, 1) : NULL;
        f->mean = xcalloc((size_t)f->out, sizeof(float));
        f->rstd = xcalloc((size_t)f->out, sizeof(float));
    }
}

static void placed_free(placed *pl)
{
    if (!pl->be) return;
    void *dev[] = { pl->p, pl->g, pl->m, pl->run };
    for (size_t k = 0; k < sizeof dev / sizeof *dev; k++)
        if (dev[k]) pl->be->release(dev[k]);
    memset(pl, 0, sizeof *pl);
}

static void mlp_free(mlp *p)
{
    for (int i = 0; i < p->n; i++) {
        fc *f = &p->l[i];
        if (f->pl.be) {
            void *dev[] = { f->z, f->y != f->z ? f->y : NULL, f->d, f->mask, f->mean, f->rstd, f->xin, f->s0, f->s1 };
            for (size_t k = 0; k < sizeof dev / sizeof *dev; k++)
                if (dev[k]) f->pl.be->release(dev[k]);
            placed_free(&f->pl);
        } else {
            free(f->y != f->z ? f->y : NULL), free(f->z), free(f->d), free(f->mask), free(f->mean), free(f->rstd),
                free(f->xin);
        }
    }
}

static int mlp_width(const mlp *p)
{
    int w = 0;
    for (int i = 0; i < p->n; i++) w = p->l[i].out > w ? p->l[i].out : w;
    return w;
}

/* ---- acts: a batch's buffers on the host and the device ---- */

static void act_init(act *a, size_t n)
{
    a->h = xcalloc(n ? n : 1, sizeof(float));
    a->n = n;
    a->valid = ON_HOST;
}

/* Point a's host copy at the caller's n floats (current there when valid says ON_HOST). */
static void act_borrow(act *a, float *h, size_t n, int valid)
{
    a->h = h;
    a->n = n;
    a->borrowed = 1;
    a->valid = (uint8_t)valid;
}

static void act_free(model *m, act *a)
{
    if (!a->borrowed) free(a->h);
    if (a->d) m->dev->release(a->d);
    memset(a, 0, sizeof *a);
}

static int side_of(const model *m, const dense_backend *be) { return be == m->be ? ON_HOST : ON_DEV; }

/* a's device copy, room for n floats (a copy that grows is stale) */
static float *act_dev(model *m, act *a, size_t n)
{
    if (n > a->cap || !a->d) {
        if (a->d) m->dev->release(a->d);
        a->cap = n > a->n ? n : a->n;
        a->d = m->dev->alloc((a->cap ? a->cap : 1) * sizeof(float));
        a->valid &= (uint8_t)~ON_DEV;
    }
    return a->d;
}

/* a's first n floats on be, current: copied across when they are current only on the other side */
static float *act_get(model *m, act *a, const dense_backend *be, size_t n)
{
    if (be == m->be) {
        if (!(a->valid & ON_HOST)) {
            CHECK(a->valid & ON_DEV);   /* read before any layer wrote it */
            m->dev->download(a->h, a->d, n * sizeof(float));
            a->valid |= ON_HOST;
        }
        return a->h;
    }
    float *d = act_dev(m, a, n);
    if (!(a->valid & ON_DEV)) {
        CHECK(a->valid & ON_HOST);
        be->upload(d, a->h, n * sizeof(float));
        a->valid |= ON_DEV;
    }
    return d;
}

/* a on be, to be written there whole: the other side's copy is stale after */
static float *act_put(model *m, act *a, const dense_backend *be, size_t n)
{
    float *p = be == m->be ? a->h : act_dev(m, a, n);
    a->valid = (uint8_t)side_of(m, be);
    return p;
}

/* a on be, current, to be added into there */
static float *act_acc(model *m, act *a, const dense_backend *be, size_t n)
{
    float *p = act_get(m, a, be, n);
    a->valid = (uint8_t)side_of(m, be);
    return p;
}

/* Make n floats at src (living on backend from) available on backend to, in dst if they must move. */
static const float *move_to(const dense_backend *to, float *dst, const float *src, const dense_backend *from, size_t n)
{
    if (to == from) return src;
    if (from == &dense_backend_cpu) to->upload(dst, src, n * sizeof *src);
    else if (to == &dense_backend_cpu) from->download(dst, src, n * sizeof *src);
    else CHECK(!"moving between two devices");
    return dst;
}

/* The layer's output: after dropout, else after batch norm or ReLU, else the linear's. */
static const float *fc_out(const fc *f) { return f->d ? f->d : f->bn || f->relu ? f->y : f->z; }
static const dense_backend *fc_be(const model *m, const fc *f) { return f->pl.be ? f->pl.be : m->be; }

/* The MLP on x (B, in of the first layer) into out (B, out of the last), each layer where it is
 * placed (inside the stack, data crosses through the layers' own staging buffers). */
static void mlp_forward(model *m, mlp *p, act *xa, act *out, int B, int train)
{
    const dense_backend *xbe = fc_be(m, &p->l[0]);
    const float *x = act_get(m, xa, xbe, (size_t)B * p->l[0].in);
    for (int i = 0; i < p->n; i++) {
        fc *f = &p->l[i];
        const dense_backend *be = fc_be(m, f);
        size_t n = (size_t)B * f->out;
        x = move_to(be, f->xin, x, xbe, (size_t)B * f->in);
        f->x = x;
        be->linear_forward(f->z, x, f->w, f->b, B, f->in, f->out);
        if (f->bn)
            be->batchnorm_forward(f->y, f->mean, f->rstd, f->run_mean, f->run_var, f->z, f->gamma, f->beta, B, f->out,
                                  0.1f, 1e-5f, train);
        if (f->relu) be->relu_forward(f->y, f->bn ? f->y : f->z, n);   /* in place: y is z without batch norm */
        if (f->d)
            be->dropout_forward(f->d, f->mask, f->y, n, m->c.dropout,
                                m->c.seed * 1000003 + (uint64_t)(uintptr_t)i + m->drop_stream * 0x632be59bd9b4e019ull,
                                m->step * 64 + (uint64_t)(p - &m->p.deep), train);
        x = fc_out(f);
        xbe = be;
    }
    size_t n = (size_t)B * p->l[p->n - 1].out;
    xbe->copy(act_put(m, out, xbe, n), x, n * sizeof *x);
}

/* dout (B, out of the last layer) back through the MLP into din (B, in of the first; NULL: not
 * needed) */
static void mlp_backward(model *m, mlp *p, act *din, act *dout, int B)
{
    const dense_backend *gbe = fc_be(m, &p->l[p->n - 1]);
    const float *g = act_get(m, dout, gbe, (size_t)B * p->l[p->n - 1].out);
    for (int i = p->n - 1; i >= 0; i--) {
        fc *f = &p->l[i];
        const dense_backend *be = fc_be(m, f);
        float *t0 = f->pl.be ? f->s0 : m->s.hl, *t1 = f->pl.be ? f->s1 : m->s.dhl;
        size_t n = (size_t)B * f->out;
        g = move_to(be, f->relu || f->d ? t1 : t0, g, gbe, n);   /* where the next kernel may overwrite it */
        float *t = t0;
        if (f->d) {
            be->dropout_backward(t, g, f->mask, n, m->c.dropout);
            g = t;
        }
        if (f->relu) {
            be->relu_backward(t, g, f->y, n);
            g = t;
        }
        if (f->bn) {
            be->batchnorm_backward(t1, f->dgamma, f->dbeta, g, f->z, f->mean, f->rstd, f->gamma, B, f->out);
            g = t1;
        }
        float *dx = i > 0 ? (g == t0 ? t1 : t0) : din ? act_put(m, din, be, (size_t)B * f->in) : NULL;
        be->linear_backward(dx, f->dw, f->db, g, f->x, f->w, B, f->in, f->out);
        g = dx;
        gbe = be;
    }
}

/* ---- placement of layers on a device ---- */

static size_t fc_params(const fc *f) { return (size_t)f->in * f->out + f->out + (f->bn ? 2u * f->out : 0); }

/* Copy the host state of placed block pl (parameters, moments, buffers) to the device. */
static void placed_upload(model *m, placed *pl)
{
    int mom = dense_opt_moments(m->c.dopt.kind);
    pl->be->upload(pl->p, m->p.params + pl->hp, pl->np * sizeof(float));
    for (int k = 0; k < mom; k++)
        pl->be->upload(pl->m + (size_t)k * pl->np, m->p.moments + (size_t)k * m->p.n_params + pl->hp, pl->np * sizeof(float));
    if (pl->nb) pl->be->upload(pl->run, m->p.buffers + pl->hb, pl->nb * sizeof(float));
}

/* ... and back, with the gradients of the last step. */
static void placed_download(model *m, placed *pl)
{
    int mom = dense_opt_moments(m->c.dopt.kind);
    pl->be->download(m->p.params + pl->hp, pl->p, pl->np * sizeof(float));
    pl->be->download(m->p.grads + pl->hp, pl->g, pl->np * sizeof(float));
    for (int k = 0; k < mom; k++)
        pl->be->download(m->p.moments + (size_t)k * m->p.n_params + pl->hp, pl->m + (size_t)k * pl->np, pl->np * sizeof(float));
    if (pl->nb) pl->be->download(m->p.buffers + pl->hb, pl->run, pl->nb * sizeof(float));
}

/* Place the parameters at host view p (np floats, and nb buffer floats at run) on backend be. */
static void placed_make(model *m, placed *pl, const dense_backend *be, const float *p, size_t np, const float *run, size_t nb)
{
    CHECK(!pl->be && be != m->be);
    int mom = dense_opt_moments(m->c.dopt.kind);
    pl->be = be;
    pl->hp = (size_t)(p - m->p.params), pl->np = np;
    pl->hb = run ? (size_t)(run - m->p.buffers) : 0, pl->nb = nb;
    pl->p = be->alloc(np * sizeof(float));
    pl->g = be->alloc(np * sizeof(float));
    pl->m = be->alloc(np * (size_t)(mom ? mom : 1) * sizeof(float));
    pl->run = nb ? be->alloc(nb * sizeof(float)) : NULL;
    placed_upload(m, pl);
    CHECK(m->n_placed < (int)(sizeof m->placed_l / sizeof *m->placed_l));
    m->placed_l[m->n_placed++] = pl;
}

/* The device's copy of a host parameter (or gradient) view v of the layer placed as pl; v itself
 * when the layer runs on the host. */
static float *pview(const model *m, const placed *pl, float *v) { return pl->be ? pl->p + (v - m->p.params - pl->hp) : v; }
static float *gview(const model *m, const placed *pl, float *v) { return pl->be ? pl->g + (v - m->p.grads - pl->hp) : v; }

/* Move layer f to backend be: its state, activations and scratch are allocated there. */
static void fc_place(model *m, fc *f, const dense_backend *be)
{
    int B = m->B;
    size_t wn = (size_t)f->in * f->out, n = (size_t)B * f->out, wide = (size_t)B * (f->in > f->out ? f->in : f->out);
    /* the registry put [w | b | gamma | beta] side by side, and run_mean, run_var */
    CHECK(f->b == f->w + wn && (!f->bn || (f->gamma == f->b + f->out && f->beta == f->gamma + f->out &&
                                           f->run_var == f->run_mean + f->out)));
    placed_make(m, &f->pl, be, f->w, fc_params(f), f->bn ? f->run_mean : NULL, f->bn ? 2 * (size_t)f->out : 0);
    f->w = f->pl.p, f->b = f->pl.p + wn, f->dw = f->pl.g, f->db = f->pl.g + wn;
    if (f->bn) {
        f->gamma = f->b + f->out, f->beta = f->gamma + f->out, f->dgamma = f->db + f->out, f->dbeta = f->dgamma + f->out;
        f->run_mean = f->pl.run, f->run_var = f->pl.run + f->out;
    }
    int drop = f->d != NULL;
    free(f->y != f->z ? f->y : NULL), free(f->z), free(f->d), free(f->mask), free(f->mean), free(f->rstd);
    f->z = be->alloc(n * sizeof(float));
    f->y = f->bn ? be->alloc(n * sizeof(float)) : f->z;
    f->d = drop ? be->alloc(n * sizeof(float)) : NULL;
    f->mask = drop ? be->alloc(n) : NULL;
    f->mean = be->alloc((size_t)f->out * sizeof(float));
    f->rstd = be->alloc((size_t)f->out * sizeof(float));
    f->xin = be->alloc((size_t)B * f->in * sizeof(float));
    f->s0 = be->alloc(wide * sizeof(float));
    f->s1 = be->alloc(wide * sizeof(float));
}

/* Bring the host blocks up to date with the placed layers (the host copy is a cache of their
 * state, so this does not change the model), unless the host blocks were handed out for editing
 * and are ahead. */
static void placed_sync_host(const model *cm)
{
    model *m = (model *)cm;
    if (m->host_edited) return;   /* edits through model_dense are pending: the host is ahead */
    for (int i = 0; i < m->n_placed; i++) placed_download(m, m->placed_l[i]);
}

/* ---- the layer chain for the planner ---- */

/* What a chain layer is in the model, for model_place. */
typedef enum { REF_EMB, REF_WIDE, REF_FM, REF_CROSS, REF_FC, REF_HEAD, REF_INTER, REF_LOSS } ref_kind;
typedef struct {
    ref_kind kind;
    int idx;        /* cross layer */
    fc *f;          /* MLP layer */
} layer_ref;

static int chain_add(plan_layer_shape *out, layer_ref *refs, int *n, int max, const char *name, plan_layer_kind kind,
                     int in, int o, size_t params, int n_in, const int *inputs, ref_kind rk)
{
    CHECK(*n < max && n_in <= PLAN_MAX_INPUTS);
    plan_layer_shape *s = &out[*n];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->kind = kind, s->in = in, s->out = o, s->params = params, s->n_inputs = n_in;
    memcpy(s->input, inputs, (size_t)n_in * sizeof *inputs);
    if (refs) refs[*n] = (layer_ref){ rk, 0, NULL };
    return (*n)++;
}

/* The layers of an MLP, the first reading inputs; returns the index of the last. */
static int chain_mlp(const model *m, const mlp *p, const char *prefix, plan_layer_shape *out, layer_ref *refs, int *n,
                     int max, int n_in, const int *inputs)
{
    int last = -1;
    for (int i = 0; i < p->n; i++) {
        const fc *f = &p->l[i];
        char name[24];
        if (!f->relu) snprintf(name, sizeof name, "%s", strcmp(prefix, "bot") ? "head" : "bot_head");
        else snprintf(name, sizeof name, "%s%d", prefix, i + 1);
        size_t params = (size_t)f->in * f->out + f->out + (f->bn ? 2u * f->out : 0);
        last = i ? chain_add(out, refs, n, max, name, PL_FC, f->in, f->out, params, 1, &last, REF_FC)
                 : chain_add(out, refs, n, max, name, PL_FC, f->in, f->out, params, n_in, inputs, REF_FC);
        out[last].bn = f->bn, out[last].relu = f->relu, out[last].dropout = f->d ? m->c.dropout : 0;
        if (refs) refs[last].f = (fc *)f;
    }
    return last;
}

static int layer_chain(const model *m, plan_layer_shape *out, int max, layer_ref *refs)
{
    int n = 0, host = PLAN_HOST, emb = -1, logit_in[PLAN_MAX_INPUTS], n_logit = 0, D = m->c.dim, rf = 0;
    for (int t = 0; t < m->n_tables; t++) {   /* a row in the pass tier: values and optimizer state */
        int r = emb_table_values(m->tab[t]) + emb_table_state_floats(m->tab[t]);
        rf = r > rf ? r : rf;
    }
    if (m->E) {
        emb = chain_add(out, refs, &n, max, "embedding", PL_POOL, 0, m->W, 0, 1, &host, REF_EMB);
        out[emb].F = m->F, out[emb].D = m->F ? m->W / m->F : 0, out[emb].row_floats = rf;
    }
    if (m->has_w) {
        int w = chain_add(out, refs, &n, max, "wide", PL_WIDE, 0, 1, (size_t)m->ND, 1, &host, REF_WIDE);
        out[w].F = m->F ? m->F : 1, out[w].D = 1;
        if (!m->E) out[w].row_floats = rf;   /* with an embedding layer, its rows are that layer's */
        logit_in[n_logit++] = w;
    }
    if (m->c.kind == MODEL_FM || m->c.kind == MODEL_DEEPFM || m->c.kind == MODEL_FFM) {
        int i = chain_add(out, refs, &n, max, m->c.kind == MODEL_FFM ? "ffm" : "fm", m->c.kind == MODEL_FFM ? PL_FFM : PL_FM,
                          m->W, 1, 0, 1, &emb, REF_FM);
        out[i].F = m->F, out[i].D = D;
        logit_in[n_logit++] = i;
    }
    int x0_in[2] = { emb, host }, n_x0 = m->ND ? 2 : 1;
    if (m->c.kind == MODEL_DNN || m->c.kind == MODEL_WIDEDEEP || m->c.kind == MODEL_DEEPFM) {
        logit_in[n_logit++] = chain_mlp(m, &m->p.deep, "fc", out, refs, &n, max, n_x0, x0_in);
    } else if (m->c.kind == MODEL_DCNV2) {
        int prev = -1;
        for (int l = 0; l < m->p.n_cross; l++) {
            char name[24];
            snprintf(name, sizeof name, "cross%d", l + 1);
            int in2[3] = { emb, host, prev };
            prev = l ? chain_add(out, refs, &n, max, name, PL_CROSS, m->X0, m->X0, (size_t)m->X0 * m->X0 + m->X0, 2,
                                 (int[]){ emb, prev }, REF_CROSS)
                     : chain_add(out, refs, &n, max, name, PL_CROSS, m->X0, m->X0, (size_t)m->X0 * m->X0 + m->X0, n_x0,
                                 in2, REF_CROSS);
            if (refs) refs[prev].idx = l;
        }
        int deep = m->p.deep.n ? chain_mlp(m, &m->p.deep, "fc", out, refs, &n, max, n_x0, x0_in) : -1;
        int dh = m->p.deep.n ? m->p.deep.l[m->p.deep.n - 1].out : 0;
        int hin[2] = { prev >= 0 ? prev : emb, deep };
        logit_in[n_logit++] = chain_add(out, refs, &n, max, "head", PL_FC, m->X0 + dh, 1, (size_t)(m->X0 + dh) + 1,
                                        deep >= 0 ? 2 : 1, hin, REF_HEAD);
    } else if (m->c.kind == MODEL_DLRM) {
        int nf = m->F + (m->ND ? 1 : 0);
        int bot = m->ND ? chain_mlp(m, &m->p.bottom, "bot", out, refs, &n, max, 1, &host) : -1;
        int parts[2] = { emb, bot };
        int top_in[2] = { emb, bot }, n_top = bot >= 0 ? 2 : 1;
        if (!m->c.dlrm_cat) {
            int i = chain_add(out, refs, &n, max, "interaction", PL_DOT, nf * D, nf * (nf - 1) / 2, 0, n_top, parts,
                              REF_INTER);
            out[i].F = nf, out[i].D = D;
            top_in[0] = i;
        }
        logit_in[n_logit++] = chain_mlp(m, &m->p.top, "top", out, refs, &n, max, n_top, top_in);
    }
    logit_in[n_logit++] = host;   /* the labels */
    chain_add(out, refs, &n, max, "loss", PL_LOSS, 1, 1, 1, n_logit, logit_in, REF_LOSS);   /* it holds the global bias */
    return n;
}

int model_layer_chain(const model *m, plan_layer_shape *out, int max) { return layer_chain(m, out, max, NULL); }

/* The device copies of the field -> slot tables pooling and the wide part read. */
static void entries_place(model *m)
{
    const dense_backend *d = m->dev;
    dev_entries *e = &m->de;
    e->slot = d->alloc((size_t)(m->n_fields ? m->n_fields : 1) * sizeof *e->slot);
    d->upload(e->slot, m->slot, (size_t)m->n_fields * sizeof *e->slot);
    int Fs = m->F ? m->F : 1;
    e->off = d->alloc((size_t)Fs * sizeof *e->off);
    e->dim = d->alloc((size_t)Fs * sizeof *e->dim);
    d->upload(e->off, m->soff, (size_t)m->F * sizeof *e->off);
    d->upload(e->dim, m->sdim, (size_t)m->F * sizeof *e->dim);
}

int model_place(model *m, const place_device *dev, int n, char *err, size_t errlen)
{
    plan_layer_shape sh[PLAN_MAX_LAYERS];
    layer_ref refs[PLAN_MAX_LAYERS];
    int nl = layer_chain(m, sh, PLAN_MAX_LAYERS, refs);
    CHECK(n == nl && m->n_placed == 0 && !m->dev);
    for (int i = 0; i < n; i++) {
        if (dev[i] == PLACE_CPU) continue;
        const char *why = "";
        const dense_backend *be = device_backend(dev[i]);
        if (dev[i] == PLACE_GPU) device_gpu(&why);
        if (!be) {
            snprintf(err, errlen, "layer %s: no %s here: %s", sh[i].name, place_device_name(dev[i]), why);
            return -1;
        }
        m->dev = be;
    }
    if (!m->dev) return 0;
    for (int i = 0; i < n; i++) {
        if (dev[i] == PLACE_CPU) continue;
        const dense_backend *be = device_backend(dev[i]);
        switch (refs[i].kind) {
        case REF_EMB: m->be_emb = be; break;
        case REF_WIDE:
            m->be_wide = be;
            if (m->ND) placed_make(m, &m->pl_wide, be, m->p.wd, (size_t)m->ND, NULL, 0);
            break;
        case REF_FM: m->be_fm = be; break;
        case REF_CROSS: {
            int l = refs[i].idx;
            CHECK(m->p.cb[l] == m->p.cw[l] + (size_t)m->X0 * m->X0);   /* registered side by side */
            m->be_cross[l] = be;
            placed_make(m, &m->pl_cross[l], be, m->p.cw[l], (size_t)m->X0 * m->X0 + m->X0, NULL, 0);
            break;
        }
        case REF_FC: fc_place(m, refs[i].f, be); break;
        case REF_HEAD: {
            size_t in = (size_t)sh[i].in;
            CHECK(m->p.head_b == m->p.head_w + in);
            m->be_head = be;
            placed_make(m, &m->pl_head, be, m->p.head_w, in + 1, NULL, 0);
            break;
        }
        case REF_INTER: m->be_inter = be; break;
        case REF_LOSS:
            m->be_loss = be;
            placed_make(m, &m->pl_loss, be, m->p.bias, 1, NULL, 0);
            break;
        }
    }
    /* x0 = [pooled, dense] is made where its first reader runs */
    m->be_x0 = m->c.kind == MODEL_DCNV2 && m->p.n_cross ? m->be_cross[0] : m->p.deep.n ? fc_be(m, &m->p.deep.l[0]) : m->be;
    mlp *mlps[3] = { &m->p.deep, &m->p.top, &m->p.bottom };
    for (int k = 0; k < 3; k++)   /* host layers reading a placed one stage its output on the host */
        for (int i = 1; i < mlps[k]->n; i++)
            if (!mlps[k]->l[i].pl.be && mlps[k]->l[i - 1].pl.be)
                mlps[k]->l[i].xin = xcalloc((size_t)m->B * mlps[k]->l[i].in, sizeof(float));
    if (m->be_emb != m->be || m->be_wide != m->be) entries_place(m);
    return 0;
}

static int deep_out_of(const model *m) { return m->p.deep.n ? m->p.deep.l[m->p.deep.n - 1].out : 0; }

static int uses_w(model_kind k) { return k == MODEL_LR || k == MODEL_FM || k == MODEL_FFM || k == MODEL_WIDEDEEP || k == MODEL_DEEPFM; }
static int uses_emb(model_kind k) { return k != MODEL_LR; }

static void alloc_params(model *m)
{
    size_t np = 0, nb = 0;
    for (int i = 0; i < m->p.n_reqs; i++) {
        if (m->p.reqs[i].g) np += m->p.reqs[i].n;
        else nb += m->p.reqs[i].n;
    }
    m->p.n_params = np;
    m->p.n_buffers = nb;
    m->p.params = xcalloc(np ? np : 1, sizeof(float));
    m->p.grads = xcalloc(np ? np : 1, sizeof(float));
    m->p.moments = xcalloc(np * (size_t)(dense_opt_moments(m->c.dopt.kind) ? dense_opt_moments(m->c.dopt.kind) : 1) + 1, sizeof(float));
    m->p.buffers = xcalloc(nb ? nb : 1, sizeof(float));
    uint64_t rs = m->c.seed ^ 0x5deece66dull;
    size_t op = 0, ob = 0;
    for (int i = 0; i < m->p.n_reqs; i++) {
        preq *r = &m->p.reqs[i];
        float *p;
        if (r->g) {
            p = m->p.params + op;
            *r->g = m->p.grads + op;
            op += r->n;
        } else {
            p = m->p.buffers + ob;
            ob += r->n;
        }
        *r->p = p;
        for (size_t j = 0; j < r->n; j++) {
            if (r->init == 1) p[j] = 1.0f;
            else if (r->init == 2) p[j] = (float)(((double)(splitmix64(&rs) >> 11) * (1.0 / 9007199254740992.0) * 2 - 1) * r->a);
        }
    }
}

model *model_create(const model_config *c, const data_schema *schema)
{
    model *m = xcalloc(1, sizeof *m);
    m->c = *c;
    m->be = &dense_backend_cpu;
    m->B = c->batch;
    m->slot = xmalloc((schema->n_fields ? schema->n_fields : 1) * sizeof *m->slot);
    for (uint32_t f = 0; f < schema->n_fields; f++) m->slot[f] = schema->kind[f] == FIELD_CAT ? m->F++ : -1;
    m->ND = (int)schema->n_dense;
    m->has_w = uses_w(c->kind);
    char err[300];
    CHECK(model_config_check(c, schema, err, sizeof err) == 0);
    /* tables: fields named in field_dims (or all, with table_per_field) get one each, in slot
     * order; the others share table 0 */
    int Fs = m->F ? m->F : 1;
    m->stab = xcalloc((size_t)Fs, sizeof *m->stab);
    m->soff = xcalloc((size_t)Fs, sizeof *m->soff);
    m->sdim = xcalloc((size_t)Fs, sizeof *m->sdim);
    int *tdim = xcalloc((size_t)Fs + 1, sizeof *tdim);
    int shared = -1;
    for (uint32_t f = 0; f < schema->n_fields; f++) {
        int sl = m->slot[f];
        if (sl < 0) continue;
        int dim = field_dim_of(c, schema->names[f]);
        if (dim == 0 && !c->table_per_field) {
            if (shared < 0) {
                shared = m->n_tables++;
                tdim[shared] = c->dim;
            }
            m->stab[sl] = shared;
        } else {
            m->stab[sl] = m->n_tables;
            tdim[m->n_tables++] = dim ? dim : c->dim;
        }
    }
    if (m->n_tables == 0) tdim[m->n_tables++] = c->dim;   /* no categorical field: one empty table */
    m->tab = xcalloc((size_t)m->n_tables, sizeof *m->tab);
    m->tE = xcalloc((size_t)m->n_tables, sizeof *m->tE);
    for (int t = 0; t < m->n_tables; t++) {
        m->tE[t] = !uses_emb(c->kind) ? 0 : c->kind == MODEL_FFM ? m->F * tdim[t] : tdim[t];
        if (m->tE[t] > m->E) m->E = m->tE[t];
        emb_table_config tc = { m->tE[t], m->has_w, c->sopt, c->init_std, 0, c->seed + (uint64_t)t * 1000003, c->min_show,
                                  c->decay, c->admit_mb > 0 ? (uint64_t)(c->admit_mb * 1048576.0 / m->n_tables) : 0 };
        m->tab[t] = emb_table_create(&tc);
    }
    for (int sl = 0; sl < m->F; sl++) {
        m->sdim[sl] = m->tE[m->stab[sl]];
        m->soff[sl] = m->W;
        m->W += m->sdim[sl];
    }
    free(tdim);
    int *ftab = xmalloc((schema->n_fields ? schema->n_fields : 1) * sizeof *ftab);
    for (uint32_t f = 0; f < schema->n_fields; f++) ftab[f] = m->slot[f] < 0 ? -1 : m->stab[m->slot[f]];
    m->rows = emb_batch_create(m->tab, m->n_tables, ftab, schema->n_fields, m->has_w);
    free(ftab);

    int B = m->B, D = c->dim;
    reserve(m, &m->p.bias, &m->p.dbias, 1, 0, 0);
    if (m->has_w && m->ND) reserve(m, &m->p.wd, &m->p.dwd, (size_t)m->ND, 0, 0);
    m->X0 = m->W + m->ND;
    int deep_out = 0, top_in = 0;
    switch (c->kind) {
    case MODEL_DNN: case MODEL_WIDEDEEP: case MODEL_DEEPFM:
        mlp_reserve(m, &m->p.deep, m->X0, c->hidden, c->n_hidden, 1, 0, c->batchnorm);
        break;
    case MODEL_DCNV2:
        m->p.n_cross = c->cross_layers;
        for (int i = 0; i < m->p.n_cross; i++) {
            float a = 1.0f / sqrtf((float)m->X0);
            reserve(m, &m->p.cw[i], &m->p.dcw[i], (size_t)m->X0 * m->X0, 2, a);
            reserve(m, &m->p.cb[i], &m->p.dcb[i], (size_t)m->X0, 0, 0);
        }
        deep_out = mlp_reserve(m, &m->p.deep, m->X0, c->hidden, c->n_hidden, 0, 0, c->batchnorm);
        {
            int in = m->X0 + deep_out;
            float a = 1.0f / sqrtf((float)in);
            reserve(m, &m->p.head_w, &m->p.dhead_w, (size_t)in, 2, a);
            reserve(m, &m->p.head_b, &m->p.dhead_b, 1, 2, a);
        }
        break;
    case MODEL_DLRM: {
        int nf = m->F + (m->ND ? 1 : 0);
        if (m->ND) {
            int sizes[MODEL_MAX_LAYERS];
            memcpy(sizes, c->bottom, sizeof sizes);
            sizes[c->n_bottom - 1] = D;   /* the bottom MLP ends at the embedding size */
            mlp_reserve(m, &m->p.bottom, m->ND, sizes, c->n_bottom, 0, 1, 0);
        }
        top_in = c->dlrm_cat ? nf * D : nf * (nf - 1) / 2 + (m->ND ? D : 0);
        mlp_reserve(m, &m->p.top, top_in, c->hidden, c->n_hidden, 1, 0, c->batchnorm);
        break;
    }
    default:
        break;
    }
    alloc_params(m);

    size_t nB = (size_t)B;
    m->n_fields = (int)schema->n_fields;
    m->be_emb = m->be_wide = m->be_fm = m->be_head = m->be_inter = m->be_loss = m->be_x0 = m->be;
    for (int i = 0; i < MODEL_MAX_LAYERS; i++) m->be_cross[i] = m->be;
    m->s.lrp = xcalloc(nB + 1, sizeof *m->s.lrp);
    act_init(&m->a.logit, nB), act_init(&m->a.dlogit, nB), act_init(&m->a.label, nB);
    act_init(&m->a.dense, nB * (size_t)m->ND);
    if (m->has_w) act_init(&m->a.wide, nB);
    if (m->E) act_init(&m->a.pooled, nB * m->W), act_init(&m->a.dpooled, nB * m->W);
    if (c->kind == MODEL_FM || c->kind == MODEL_FFM || c->kind == MODEL_DEEPFM) act_init(&m->a.fm, nB);
    if (m->p.deep.n || m->p.top.n || m->p.bottom.n) {
        mlp_alloc(&m->p.deep, B, c->dropout);
        mlp_alloc(&m->p.top, B, c->dropout);
        mlp_alloc(&m->p.bottom, B, 0);
        /* the MLPs' backward scratch on the host: (B, widest layer) */
        int w = mlp_width(&m->p.deep);
        if (mlp_width(&m->p.top) > w) w = mlp_width(&m->p.top);
        if (mlp_width(&m->p.bottom) > w) w = mlp_width(&m->p.bottom);
        m->s.hl = xcalloc(nB * w, sizeof(float));
        m->s.dhl = xcalloc(nB * w, sizeof(float));
    }
    if (m->p.deep.n || c->kind == MODEL_DCNV2) {   /* x0 = [pooled, dense] */
        act_init(&m->a.x0, nB * m->X0), act_init(&m->a.dx0, nB * m->X0);
        if (m->p.deep.n) act_init(&m->a.deep_o, nB * deep_out_of(m)), act_init(&m->a.ddeep, nB * deep_out_of(m));
    }
    if (c->kind == MODEL_DCNV2) {
        int dh = deep_out_of(m);
        for (int i = 1; i <= m->p.n_cross; i++) act_init(&m->a.xl[i], nB * m->X0);
        for (int i = 0; i < m->p.n_cross; i++) act_init(&m->a.ct[i], nB * m->X0);
        act_init(&m->a.dxl[0], nB * m->X0), act_init(&m->a.dxl[1], nB * m->X0), act_init(&m->a.ctmp, nB * m->X0);
        act_init(&m->a.dx0_deep, nB * m->X0);
        act_init(&m->a.cat, nB * (size_t)(m->X0 + dh)), act_init(&m->a.dcat, nB * (size_t)(m->X0 + dh));
        act_init(&m->a.head, nB);
    }
    if (c->kind == MODEL_DLRM) {
        int nf = m->F + (m->ND ? 1 : 0), P = nf * (nf - 1) / 2;
        act_init(&m->a.top_o, nB);
        act_init(&m->a.inter, nB * nf * D), act_init(&m->a.dinter, nB * nf * D);
        act_init(&m->a.dots, nB * (P + 1)), act_init(&m->a.ddots, nB * (P + 1));
        act_init(&m->a.cat, nB * (size_t)top_in), act_init(&m->a.dcat, nB * (size_t)top_in);
        if (m->ND) act_init(&m->a.bot, nB * D), act_init(&m->a.dbot, nB * D), act_init(&m->a.dsplit, nB * D);
    }
    return m;
}

void model_destroy(model *m)
{
    if (!m) return;
    dev_rows_destroy(m->tier);
    for (int t = 0; t < m->n_tables; t++) emb_table_destroy(m->tab[t]);
    emb_batch_destroy(m->rows);
    free(m->tab), free(m->tE), free(m->stab), free(m->soff), free(m->sdim);
    mlp_free(&m->p.deep), mlp_free(&m->p.top), mlp_free(&m->p.bottom);
    placed_free(&m->pl_wide), placed_free(&m->pl_head), placed_free(&m->pl_loss);
    for (int i = 0; i < MODEL_MAX_LAYERS; i++) placed_free(&m->pl_cross[i]);
    act *acts = (act *)&m->a;   /* model_acts is acts only */
    for (size_t i = 0; i < sizeof m->a / sizeof(act); i++) act_free(m, &acts[i]);
    if (m->dev) {
        void *dev[] = { m->de.uidx, m->de.field, m->de.val, m->de.lrp, m->de.uoff, m->de.rec, m->de.slot, m->de.off, m->de.dim };
        for (size_t k = 0; k < sizeof dev / sizeof *dev; k++)
            if (dev[k]) m->dev->release(dev[k]);
    }
    free(m->s.hl), free(m->s.dhl), free(m->s.lrp), free(m->s.rec);
    free(m->p.params), free(m->p.grads), free(m->p.moments), free(m->p.buffers), free(m->p.reqs), free(m->slot);
    free(m);
}

const model_config *model_config_of(const model *m) { return &m->c; }
int model_n_tables(const model *m) { return m->n_tables; }
int model_field_table(const model *m, uint16_t field) { return m->slot[field] < 0 ? -1 : m->stab[m->slot[field]]; }
emb_table *model_table(model *m, int i) { return i >= 0 && i < m->n_tables ? m->tab[i] : NULL; }
emb_table *const *model_tables(const model *m) { return m->tab; }
uint64_t model_step(const model *m) { return m->step; }

static int floats_finite(const float *v, size_t n)
{
    float acc = 0;
    for (size_t i = 0; i < n; i++) acc += v[i] * 0;   /* NaN or inf anywhere makes it NaN */
    return acc == 0;
}

int model_dense_finite(model *m)
{
    placed_sync_host(m);
    return floats_finite(m->p.params, m->p.n_params) && floats_finite(m->p.buffers, m->p.n_buffers) &&
           floats_finite(m->p.moments, m->p.n_params * (size_t)dense_opt_moments(m->c.dopt.kind));
}

int model_all_finite(model *m)
{
    model_rows_sync(m);
    if (!model_dense_finite(m)) return 0;
    for (int i = 0; i < model_n_tables(m); i++)
        if (emb_table_first_nonfinite(model_table(m, i)) >= 0) return 0;
    return 1;
}

void model_scale_lr(model *m, float factor)
{
    m->c.dopt.lr *= factor;
    m->c.sopt.lr *= factor;
    for (int t = 0; t < m->n_tables; t++) emb_table_set_lr(m->tab[t], m->c.sopt.lr);
}

void model_set_lr(model *m, float dense, float sparse)
{
    m->c.dopt.lr = dense;
    m->c.sopt.lr = sparse;
    for (int t = 0; t < m->n_tables; t++) emb_table_set_lr(m->tab[t], sparse);
}

/* ---- forward / backward ---- */

/* The step's batch: rows [r0, r0 + B) of b, whose rows the gather found (m->rows). The host acts of
 * the batch's inputs and rows are set; the device's copies of its entries are stale. */
static void batch_begin(model *m, const sample_block *b, size_t r0, int B)
{
    step_batch *c = &m->cur;
    c->b = b, c->r0 = r0, c->B = B;
    c->k0 = b->row_ptr[r0];
    c->nnz = (size_t)(b->row_ptr[r0 + (size_t)B] - c->k0);
    c->U = emb_batch_unique(m->rows);
    for (int i = 0; i <= B; i++) m->s.lrp[i] = b->row_ptr[r0 + (size_t)i] - c->k0;
    if (m->ND) memcpy(m->a.dense.h, b->dense + r0 * (size_t)m->ND, (size_t)B * m->ND * sizeof(float));
    memcpy(m->a.label.h, b->label + r0, (size_t)B * sizeof(float));
    m->a.dense.valid = m->a.label.valid = ON_HOST;
    const size_t *uoff = emb_batch_uoff(m->rows);
    act_borrow(&m->a.uw, (float *)emb_batch_w(m->rows), c->U, ON_HOST);
    act_borrow(&m->a.ue, (float *)emb_batch_e(m->rows), uoff[c->U], ON_HOST);
    act_borrow(&m->a.duw, emb_batch_dw(m->rows), c->U, 0);
    act_borrow(&m->a.due, emb_batch_de(m->rows), uoff[c->U], 0);
    m->de.fresh = 0;
}

/* The step's entries as a layer on be reads them (uploaded to the device once a step). */
static entries entries_on(model *m, const dense_backend *be)
{
    step_batch *c = &m->cur;
    const uint64_t k0 = c->k0;
    if (be == m->be)
        return (entries){ emb_batch_uidx(m->rows), c->b->field + k0, c->b->val + k0, m->s.lrp, emb_batch_uoff(m->rows),
                          m->slot, m->soff, m->sdim };
    dev_entries *e = &m->de;
    if (!e->fresh) {
        const dense_backend *d = m->dev;
        if (c->nnz > e->cap_k || !e->uidx) {
            void *old[] = { e->uidx, e->field, e->val };
            for (int k = 0; k < 3; k++)
                if (old[k]) d->release(old[k]);
            e->cap_k = c->nnz * 2 > 1024 ? c->nnz * 2 : 1024;
            e->uidx = d->alloc(e->cap_k * sizeof *e->uidx);
            e->field = d->alloc(e->cap_k * sizeof *e->field);
            e->val = d->alloc(e->cap_k * sizeof *e->val);
        }
        if (c->U + 1 > e->cap_u || !e->uoff) {
            if (e->uoff) d->release(e->uoff), d->release(e->rec);
            e->cap_u = (c->U + 1) * 2 > 1024 ? (c->U + 1) * 2 : 1024;
            e->uoff = d->alloc(e->cap_u * sizeof *e->uoff);
            e->rec = d->alloc(e->cap_u * sizeof *e->rec);
        }
        if (!e->lrp) e->lrp = d->alloc(((size_t)m->B + 1) * sizeof *e->lrp);
        d->upload(e->uidx, emb_batch_uidx(m->rows), c->nnz * sizeof *e->uidx);
        d->upload(e->field, c->b->field + k0, c->nnz * sizeof *e->field);
        d->upload(e->val, c->b->val + k0, c->nnz * sizeof *e->val);
        d->upload(e->lrp, m->s.lrp, ((size_t)c->B + 1) * sizeof *e->lrp);
        d->upload(e->uoff, emb_batch_uoff(m->rows), (c->U + 1) * sizeof *e->uoff);
        e->fresh = 1;
    }
    return (entries){ e->uidx, e->field, e->val, e->lrp, e->uoff, e->slot, e->off, e->dim };
}

/* With the pass tier: the batch's rows out of device memory into uw, ue there (rows not there are
 * uploaded first); train: the step will change them. */
static void rows_from_tier(model *m, int train)
{
    size_t U = m->cur.U;
    if (U > m->s.cap_rec) m->s.rec = xrealloc(m->s.rec, (m->s.cap_rec = U * 2) * sizeof *m->s.rec);
    char err[300];
    if (dev_rows_batch(m->tier, m->rows, m->s.rec, train, err, sizeof err) < 0) die("%s", err);
    const dense_backend *d = m->dev;
    entries e = entries_on(m, d);
    d->upload(m->de.rec, m->s.rec, U * sizeof *m->s.rec);
    size_t ne = emb_batch_uoff(m->rows)[U];
    d->rows_gather(m->has_w ? act_put(m, &m->a.uw, d, U) : NULL, ne ? act_put(m, &m->a.ue, d, ne) : NULL,
                   dev_rows_slab(m->tier), m->de.rec, e.uoff, m->has_w, U);
}

static void forward(model *m, int train)
{
    int B = m->cur.B, D = m->c.dim, ND = m->ND, F = m->F;
    size_t nB = (size_t)B, U = m->cur.U, ne = emb_batch_uoff(m->rows)[U];
    act *logit_in[4];
    int n_logit = 0;
    if (m->has_w) {
        const dense_backend *be = m->be_wide;
        entries e = entries_on(m, be);
        be->wide_forward(act_put(m, &m->a.wide, be, nB), act_get(m, &m->a.uw, be, U), e.uidx, e.field, e.val, e.lrp, e.slot,
                         ND ? act_get(m, &m->a.dense, be, nB * ND) : NULL, ND ? pview(m, &m->pl_wide, m->p.wd) : NULL, B,
                         ND);
        logit_in[n_logit++] = &m->a.wide;
    }
    if (m->E) {
        const dense_backend *be = m->be_emb;
        entries e = entries_on(m, be);
        be->pool_forward(act_put(m, &m->a.pooled, be, nB * m->W), act_get(m, &m->a.ue, be, ne), e.uoff, e.uidx, e.field,
                         e.val, e.lrp, e.slot, e.off, e.dim, m->c.pool_mean, B, F, m->W);
    }
    if (m->c.kind == MODEL_FM || m->c.kind == MODEL_DEEPFM || m->c.kind == MODEL_FFM) {
        const dense_backend *be = m->be_fm;
        const float *e = act_get(m, &m->a.pooled, be, nB * m->W);
        if (m->c.kind == MODEL_FFM) be->ffm_forward(act_put(m, &m->a.fm, be, nB), e, B, F, D);
        else be->fm_forward(act_put(m, &m->a.fm, be, nB), e, B, F, D);
        logit_in[n_logit++] = &m->a.fm;
    }
    if (m->a.x0.h) {   /* [pooled, dense], where its first reader runs */
        const dense_backend *be = m->be_x0;
        const float *parts[2] = { act_get(m, &m->a.pooled, be, nB * m->W), ND ? act_get(m, &m->a.dense, be, nB * ND) : NULL };
        int C[2] = { m->W, ND };
        be->concat_forward(act_put(m, &m->a.x0, be, nB * m->X0), parts, C, ND ? 2 : 1, B);
    }
    if (m->c.kind == MODEL_DNN || m->c.kind == MODEL_WIDEDEEP || m->c.kind == MODEL_DEEPFM) {
        mlp_forward(m, &m->p.deep, &m->a.x0, &m->a.deep_o, B, train);
        logit_in[n_logit++] = &m->a.deep_o;
    } else if (m->c.kind == MODEL_DCNV2) {
        size_t n = nB * m->X0;
        act *xl = &m->a.x0;   /* x_0 = x0 */
        for (int l = 0; l < m->p.n_cross; l++) {
            const dense_backend *be = m->be_cross[l];
            const placed *pl = &m->pl_cross[l];
            const float *x0 = act_get(m, &m->a.x0, be, n), *xin = act_get(m, xl, be, n);
            be->cross_forward(act_put(m, &m->a.xl[l + 1], be, n), act_put(m, &m->a.ct[l], be, n), x0, xin,
                              pview(m, pl, m->p.cw[l]), pview(m, pl, m->p.cb[l]), B, m->X0);
            xl = &m->a.xl[l + 1];
        }
        if (m->p.deep.n) mlp_forward(m, &m->p.deep, &m->a.x0, &m->a.deep_o, B, train);
        int dh = deep_out_of(m), W = m->X0 + dh;
        const dense_backend *be = m->be_head;
        const float *parts[2] = { act_get(m, xl, be, n), dh ? act_get(m, &m->a.deep_o, be, nB * dh) : NULL };
        int C[2] = { m->X0, dh };
        be->concat_forward(act_put(m, &m->a.cat, be, nB * W), parts, C, dh ? 2 : 1, B);
        be->rowdot_forward(act_put(m, &m->a.head, be, nB), act_get(m, &m->a.cat, be, nB * W),
                           pview(m, &m->pl_head, m->p.head_w), pview(m, &m->pl_head, m->p.head_b), B, W);
        logit_in[n_logit++] = &m->a.head;
    } else if (m->c.kind == MODEL_DLRM) {
        int nf = F + (ND ? 1 : 0), P = nf * (nf - 1) / 2;
        if (ND) mlp_forward(m, &m->p.bottom, &m->a.dense, &m->a.bot, B, train);
        const dense_backend *bt = fc_be(m, &m->p.top.l[0]), *bi = m->c.dlrm_cat ? bt : m->be_inter;
        act *inter = ND ? &m->a.inter : &m->a.pooled, *top_in = inter;
        if (ND) {   /* [bottom out, pooled] */
            const float *parts[2] = { act_get(m, &m->a.bot, bi, nB * D), act_get(m, &m->a.pooled, bi, nB * F * D) };
            int C[2] = { D, F * D };
            bi->concat_forward(act_put(m, inter, bi, nB * nf * D), parts, C, 2, B);
        }
        if (!m->c.dlrm_cat) {   /* the top MLP reads [bottom out, dots] (or the dots alone) */
            bi->dot_forward(act_put(m, &m->a.dots, bi, nB * P), act_get(m, inter, bi, nB * nf * D), B, nf, D);
            top_in = &m->a.dots;
            if (ND) {
                const float *tp[2] = { act_get(m, &m->a.bot, bt, nB * D), act_get(m, &m->a.dots, bt, nB * P) };
                int TC[2] = { D, P };
                bt->concat_forward(act_put(m, &m->a.cat, bt, nB * (D + P)), tp, TC, 2, B);
                top_in = &m->a.cat;
            }
        }
        mlp_forward(m, &m->p.top, top_in, &m->a.top_o, B, train);
        logit_in[n_logit++] = &m->a.top_o;
    }
    const dense_backend *be = m->be_loss;
    const float *in[4];
    for (int k = 0; k < n_logit; k++) in[k] = act_get(m, logit_in[k], be, nB);
    be->sum_forward(act_put(m, &m->a.logit, be, nB), in, n_logit, pview(m, &m->pl_loss, m->p.bias), B);
}

/* x0's gradient (dx0) into dpooled, which is added to on the embedding layer's side. */
static void dx0_to_pooled(model *m, int B)
{
    const dense_backend *be = m->be_emb;
    float *dst[2] = { act_acc(m, &m->a.dpooled, be, (size_t)B * m->W), NULL };
    int C[2] = { m->W, m->ND };
    be->concat_backward(dst, act_get(m, &m->a.dx0, be, (size_t)B * m->X0), C, m->ND ? 2 : 1, B, 1);
}

static void backward(model *m)
{
    int B = m->cur.B, D = m->c.dim, ND = m->ND, F = m->F;
    size_t nB = (size_t)B, U = m->cur.U, ne = emb_batch_uoff(m->rows)[U], pn = nB * m->W;
    {
        const dense_backend *be = m->be_loss;
        be->sum_backward(gview(m, &m->pl_loss, m->p.dbias), act_get(m, &m->a.dlogit, be, nB), B);
    }
    if (m->has_w) {
        const dense_backend *be = m->be_wide;
        entries e = entries_on(m, be);
        float *dw = act_put(m, &m->a.duw, be, U);
        be->zero(dw, U * sizeof *dw);
        be->wide_backward(dw, ND ? gview(m, &m->pl_wide, m->p.dwd) : NULL, act_get(m, &m->a.dlogit, be, nB), e.uidx,
                          e.field, e.val, e.lrp, e.slot, ND ? act_get(m, &m->a.dense, be, nB * ND) : NULL, B, ND);
    }
    if (!m->E) return;
    act *dp = &m->a.dpooled;
    if (m->c.kind == MODEL_FM || m->c.kind == MODEL_DEEPFM || m->c.kind == MODEL_FFM) {   /* writes all of dpooled */
        const dense_backend *be = m->be_fm;
        const float *g = act_get(m, &m->a.dlogit, be, nB), *e = act_get(m, &m->a.pooled, be, pn);
        if (m->c.kind == MODEL_FFM) be->ffm_backward(act_put(m, dp, be, pn), g, e, B, F, D);
        else be->fm_backward(act_put(m, dp, be, pn), g, e, B, F, D);
    } else {
        m->be_emb->zero(act_put(m, dp, m->be_emb, pn), pn * sizeof(float));
    }
    if (m->c.kind == MODEL_DNN || m->c.kind == MODEL_WIDEDEEP || m->c.kind == MODEL_DEEPFM) {
        mlp_backward(m, &m->p.deep, &m->a.dx0, &m->a.dlogit, B);
        dx0_to_pooled(m, B);
    } else if (m->c.kind == MODEL_DCNV2) {
        size_t n = nB * m->X0;
        int dh = deep_out_of(m), W = m->X0 + dh, L = m->p.n_cross;
        const dense_backend *be = m->be_head;
        be->rowdot_backward(act_put(m, &m->a.dcat, be, nB * W), gview(m, &m->pl_head, m->p.dhead_w),
                            gview(m, &m->pl_head, m->p.dhead_b), act_get(m, &m->a.dlogit, be, nB),
                            act_get(m, &m->a.cat, be, nB * W), pview(m, &m->pl_head, m->p.head_w), B, W);
        /* [d x_L, d deep out] */
        act *dcur = &m->a.dxl[0], *dnext = &m->a.dxl[1];
        float *dparts[2] = { act_put(m, dcur, be, n), dh ? act_put(m, &m->a.ddeep, be, nB * dh) : NULL };
        int C[2] = { m->X0, dh };
        be->concat_backward(dparts, act_get(m, &m->a.dcat, be, nB * W), C, dh ? 2 : 1, B, 0);
        const dense_backend *b0 = m->be_x0;
        b0->zero(act_put(m, &m->a.dx0, b0, n), n * sizeof(float));
        if (dh) {   /* the deep branch's d x0 */
            mlp_backward(m, &m->p.deep, &m->a.dx0_deep, &m->a.ddeep, B);
            b0->add(act_acc(m, &m->a.dx0, b0, n), act_get(m, &m->a.dx0_deep, b0, n), n);
        }
        for (int l = L - 1; l >= 0; l--) {   /* the cross branch, last layer first */
            const dense_backend *bc = m->be_cross[l];
            const placed *pl = &m->pl_cross[l];
            float *dx0 = act_acc(m, &m->a.dx0, bc, n), *dxl = act_put(m, dnext, bc, n), *tmp = act_put(m, &m->a.ctmp, bc, n);
            bc->cross_backward(dx0, dxl, gview(m, pl, m->p.dcw[l]), gview(m, pl, m->p.dcb[l]), tmp, act_get(m, dcur, bc, n),
                               act_get(m, &m->a.x0, bc, n), act_get(m, l ? &m->a.xl[l] : &m->a.x0, bc, n),
                               act_get(m, &m->a.ct[l], bc, n), pview(m, pl, m->p.cw[l]), B, m->X0);
            act *t = dcur;
            dcur = dnext;
            dnext = t;
        }
        b0->add(act_acc(m, &m->a.dx0, b0, n), act_get(m, dcur, b0, n), n);   /* x_0 = x0 */
        dx0_to_pooled(m, B);
    } else if (m->c.kind == MODEL_DLRM) {
        int nf = F + (ND ? 1 : 0), P = nf * (nf - 1) / 2;
        const dense_backend *bt = fc_be(m, &m->p.top.l[0]), *bi = m->c.dlrm_cat ? bt : m->be_inter;
        act *inter = ND ? &m->a.inter : &m->a.pooled;
        if (m->c.dlrm_cat) {   /* the top MLP read the vectors themselves */
            mlp_backward(m, &m->p.top, &m->a.dinter, &m->a.dlogit, B);
        } else {               /* it read [bottom out, dot products] (or the dots alone) */
            act *ddots = &m->a.dcat;
            mlp_backward(m, &m->p.top, &m->a.dcat, &m->a.dlogit, B);
            if (ND) {
                float *dtp[2] = { act_put(m, &m->a.dbot, bt, nB * D), act_put(m, &m->a.ddots, bt, nB * P) };
                int TC[2] = { D, P };
                bt->concat_backward(dtp, act_get(m, &m->a.dcat, bt, nB * (D + P)), TC, 2, B, 0);
                ddots = &m->a.ddots;
            }
            bi->dot_backward(act_put(m, &m->a.dinter, bi, nB * nf * D), act_get(m, ddots, bi, nB * P),
                             act_get(m, inter, bi, nB * nf * D), B, nf, D);
        }
        if (ND) {
            /* the interaction's gradient splits into d bottom-out and d pooled */
            float *dparts[2] = { act_put(m, &m->a.dsplit, bi, nB * D), act_put(m, dp, bi, pn) };
            int C[2] = { D, F * D };
            bi->concat_backward(dparts, act_get(m, &m->a.dinter, bi, nB * nf * D), C, 2, B, 0);
            const dense_backend *bb = fc_be(m, &m->p.bottom.l[m->p.bottom.n - 1]);
            if (m->c.dlrm_cat) bb->zero(act_put(m, &m->a.dbot, bb, nB * D), nB * D * sizeof(float));
            bb->add(act_acc(m, &m->a.dbot, bb, nB * D), act_get(m, &m->a.dsplit, bb, nB * D), nB * D);
            mlp_backward(m, &m->p.bottom, NULL, &m->a.dbot, B);
        } else {
            const dense_backend *be = m->be_emb;
            be->add(act_acc(m, dp, be, pn), act_get(m, &m->a.dinter, be, pn), pn);
        }
    }
    const dense_backend *be = m->be_emb;
    entries e = entries_on(m, be);
    float *de = act_put(m, &m->a.due, be, ne);
    be->zero(de, ne * sizeof *de);
    be->pool_backward(de, act_get(m, dp, be, pn), e.uoff, e.uidx, e.field, e.val, e.lrp, e.slot, e.off, e.dim,
                      m->c.pool_mean, B, F, m->W);
}

/* Placed layers take up edits made to the host blocks through model_dense. */
static void placed_take_host_edits(model *m)
{
    if (!m->host_edited) return;
    for (int i = 0; i < m->n_placed; i++) placed_upload(m, m->placed_l[i]);
    m->host_edited = 0;
}

/* Forward and backward of rows [r0, r1) of b, whose rows are gathered; tier: they come from the
 * pass tier (train: the step will change them). */
static double loss_and_grads(model *m, const sample_block *b, size_t r0, size_t r1, int tier, int train)
{
    placed_take_host_edits(m);
    int B = (int)(r1 - r0);
    CHECK(B <= m->B);
    batch_begin(m, b, r0, B);
    if (tier) rows_from_tier(m, train);
    memset(m->p.grads, 0, m->p.n_params * sizeof(float));
    for (int i = 0; i < m->n_placed; i++) m->placed_l[i]->be->zero(m->placed_l[i]->g, m->placed_l[i]->np * sizeof(float));
    forward(m, 1);
    const dense_backend *be = m->be_loss;
    double loss = be->bce_forward_backward(act_put(m, &m->a.dlogit, be, (size_t)B), act_get(m, &m->a.logit, be, (size_t)B),
                                           act_get(m, &m->a.label, be, (size_t)B), B);
    backward(m);
    return loss;
}

/* The batch's row gradients on the host (the CPU's scatter, lanes, gradient checks read them). */
static void row_grads_to_host(model *m)
{
    size_t U = m->cur.U, ne = emb_batch_uoff(m->rows)[U];
    if (m->has_w) act_get(m, &m->a.duw, m->be, U);
    if (ne) act_get(m, &m->a.due, m->be, ne);
}

double model_loss_and_grads(model *m, const sample_block *b, size_t r0, size_t r1)
{
    model_rows_sync(m);   /* the gather reads the tables' rows */
    emb_batch_gather(m->rows, b, r0, r1, 0, EMB_GATHER_NO_COUNT);
    double loss = loss_and_grads(m, b, r0, r1, 0, 1);
    row_grads_to_host(m);
    placed_sync_host(m);   /* the gradients are read from the host block */
    m->host_edited = m->n_placed > 0;
    return loss;
}

/* The dense optimizer step: placed layers on their device, the rest of the block on the host. */
static void dense_step(model *m)
{
    if (!m->n_placed) {
        m->be->opt_step(&m->c.dopt, m->p.params, m->p.grads, m->p.moments, m->p.n_params, m->step);
        return;
    }
    size_t s = 0;
    for (;;) {   /* host ranges between placed layers, in block order */
        size_t next = m->p.n_params, len = 0;
        for (int i = 0; i < m->n_placed; i++)
            if (m->placed_l[i]->hp >= s && m->placed_l[i]->hp < next) next = m->placed_l[i]->hp, len = m->placed_l[i]->np;
        if (next > s) dense_opt_step_range(&m->c.dopt, m->p.params, m->p.grads, m->p.moments, m->p.n_params, s, next - s, m->step);
        if (next == m->p.n_params) break;
        s = next + len;
    }
    for (int i = 0; i < m->n_placed; i++) {
        placed *pl = m->placed_l[i];
        pl->be->opt_step(&m->c.dopt, pl->p, pl->g, pl->m, pl->np, m->step);
    }
}

const emb_batch *model_batch_rows(const model *m) { return m->rows; }

void model_set_dropout_stream(model *m, uint64_t stream) { m->drop_stream = stream; }

uint64_t model_dense_apply(model *m)
{
    /* a caller's gradients (model_dense) and other host edits reach the placed layers first */
    for (int i = 0; m->host_edited && i < m->n_placed; i++)
        m->placed_l[i]->be->upload(m->placed_l[i]->g, m->p.grads + m->placed_l[i]->hp, m->placed_l[i]->np * sizeof(float));
    placed_take_host_edits(m);
    m->step++;
    dense_step(m);
    return m->step;
}

double model_train_batch(model *m, const sample_block *b, size_t r0, size_t r1, uint32_t pass)
{
    /* with the pass tier the rows' values are read out of device memory */
    emb_batch_gather(m->rows, b, r0, r1, pass, m->tier ? EMB_GATHER_TRAIN | EMB_GATHER_NO_VALUES : EMB_GATHER_TRAIN);
    double loss = loss_and_grads(m, b, r0, r1, m->tier != NULL, 1);
    m->step++;
    if (m->tier) {   /* the sparse optimizer inside the rows in device memory */
        const dense_backend *d = m->dev;
        size_t U = m->cur.U, ne = emb_batch_uoff(m->rows)[U];
        d->rows_update(dev_rows_slab(m->tier), m->de.rec, entries_on(m, d).uoff,
                       m->has_w ? act_get(m, &m->a.duw, d, U) : NULL, ne ? act_get(m, &m->a.due, d, ne) : NULL, m->has_w,
                       &emb_table_config_of(m->tab[0])->opt, m->step, U);
    } else {
        row_grads_to_host(m);
        emb_batch_scatter(m->rows, m->step, m->c.emb_l2_all);
    }
    dense_step(m);
    return loss;
}

void model_predict_batch(model *m, const sample_block *b, size_t r0, size_t r1, double *prob)
{
    model_rows_sync(m);   /* the gather reads the tables' rows */
    size_t done = r0;
    while (done < r1) {
        size_t end = done + (size_t)m->B < r1 ? done + (size_t)m->B : r1;
        int B = (int)(end - done);
        emb_batch_gather(m->rows, b, done, end, 0, EMB_GATHER_INFER);
        placed_take_host_edits(m);
        batch_begin(m, b, done, B);
        forward(m, 0);
        const float *logit = act_get(m, &m->a.logit, m->be, (size_t)B);
        for (int i = 0; i < B; i++) prob[done - r0 + (size_t)i] = 1.0 / (1.0 + exp(-(double)logit[i]));
        done = end;
    }
}

void model_dense(model *m, float **params, float **grads, size_t *n)
{
    placed_sync_host(m);
    m->host_edited = m->n_placed > 0;
    *params = m->p.params;
    *grads = m->p.grads;
    *n = m->p.n_params;
}

void model_buffers(model *m, float **buffers, size_t *n)
{
    placed_sync_host(m);
    m->host_edited = m->n_placed > 0;
    *buffers = m->p.buffers;
    *n = m->p.n_buffers;
}

int model_row_grad(const model *m, int table, uint32_t row, float *g) { return emb_batch_row_grad(m->rows, table, row, g); }

/* ---- the pass tier ---- */

int model_rows_on_device(const model *m) { return m->dev && (m->be_emb != m->be || m->be_wide != m->be); }

int model_set_row_tier(model *m, uint64_t budget, char *err, size_t errlen)
{
    CHECK(!m->tier);
    if (!model_rows_on_device(m)) {
        snprintf(err, errlen, "the embedding layer runs on the cpu: there is no pass tier on the gpu");
        return -1;
    }
    if (m->c.emb_l2_all > 0) {
        snprintf(err, errlen, "--emb-l2 changes every row of the table each step, not only the pass's: it cannot train "
                 "with the rows in GPU memory (give --gpu-mem-mb 0 to keep them on the cpu)");
        return -1;
    }
    m->tier = dev_rows_create(m->dev, m->tab, m->n_tables, budget);
    return 0;
}

void model_rows_sync(model *m)
{
    if (m->tier) dev_rows_sync(m->tier);
}

void model_rows_drop(model *m)
{
    if (m->tier) dev_rows_drop(m->tier);
}

void model_rows_prefetch(model *m, const key_vec *keys)
{
    if (m->tier && keys) dev_rows_prefetch(m->tier, keys);
}

const dev_rows *model_row_tier(const model *m) { return m->tier; }

#define DENSE_MAGIC "CTRBXDNS"
#define DENSE_VERSION 1u

/* XXH64 over the dense section: header, parameters, buffers, moments */
static uint64_t dense_digest(const model *m, const uint64_t *hdr, size_t hdr_bytes, size_t nm)
{
    XXH64_state_t *st = XXH64_createState();
    XXH64_reset(st, 0);
    XXH64_update(st, hdr, hdr_bytes);
    XXH64_update(st, m->p.params, m->p.n_params * sizeof(float));
    XXH64_update(st, m->p.buffers, m->p.n_buffers * sizeof(float));
    XXH64_update(st, m->p.moments, nm * sizeof(float));
    uint64_t h = XXH64_digest(st);
    XXH64_freeState(st);
    return h;
}

int model_save_dense(const model *m, void *file)
{
    FILE *f = file;
    size_t nm = m->p.n_params * (size_t)dense_opt_moments(m->c.dopt.kind);
    placed_sync_host(m);
    uint64_t hdr[5] = { DENSE_VERSION, m->p.n_params, m->p.n_buffers, nm, m->step };
    uint64_t h = dense_digest(m, hdr, sizeof hdr, nm);
    int ok = fwrite(DENSE_MAGIC, 1, 8, f) == 8 && fwrite(hdr, sizeof hdr, 1, f) == 1 &&
             fwrite(m->p.params, sizeof(float), m->p.n_params, f) == m->p.n_params &&
             fwrite(m->p.buffers, sizeof(float), m->p.n_buffers, f) == m->p.n_buffers &&
             fwrite(m->p.moments, sizeof(float), nm, f) == nm && fwrite(&h, 8, 1, f) == 1;
    return ok ? 0 : -(errno ? errno : EIO);
}

int model_load_dense(model *m, void *file, char *err, size_t errlen)
{
    FILE *f = file;
    char magic[8];
    uint64_t hdr[5];
    size_t nm = m->p.n_params * (size_t)dense_opt_moments(m->c.dopt.kind);
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, DENSE_MAGIC, 8) || fread(hdr, sizeof hdr, 1, f) != 1) {
        snprintf(err, errlen, "dense parameters: bad magic or truncated header");
        return -EBADMSG;
    }
    if (hdr[0] != DENSE_VERSION || hdr[1] != m->p.n_params || hdr[2] != m->p.n_buffers || hdr[3] != nm) {
        snprintf(err, errlen, "dense parameters: %llu parameters in the file, the model has %zu",
                 (unsigned long long)hdr[1], m->p.n_params);
        return -EBADMSG;
    }
    uint64_t h;
    if (fread(m->p.params, sizeof(float), m->p.n_params, f) != m->p.n_params ||
        fread(m->p.buffers, sizeof(float), m->p.n_buffers, f) != m->p.n_buffers ||
        fread(m->p.moments, sizeof(float), nm, f) != nm || fread(&h, 8, 1, f) != 1) {
        snprintf(err, errlen, "dense parameters: truncated");
        return -EBADMSG;
    }
    if (dense_digest(m, hdr, sizeof hdr, nm) != h) {
        snprintf(err, errlen, "dense parameters: checksum mismatch");
        return -EBADMSG;
    }
    m->step = hdr[4];
    for (int i = 0; i < m->n_placed; i++) placed_upload(m, m->placed_l[i]);
    return 0;
}
