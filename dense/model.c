/*
 * model.c: the models of model.h on the CPU backend.
 *
 * Parameters are registered first (pointer-to-view and size), then one block each is allocated
 * for parameters, gradients and moments and the views are set. Activation buffers are sized for
 * the configured batch. Batch flow:
 *   gather   embedding/batch.h: entry k -> unique row u; Uw (U) first-order weights, Ue the
 *            embeddings of the unique rows
 *   forward/backward over the dense layers, ending in dUw, dUe (the batch's gradient arrays)
 *   scatter  embedding/batch.h: the optimizer inside each unique row; then the dense optimizer
 *            over the block
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

typedef struct {
    int in, out;
    float *w, *b, *dw, *db;
    float *gamma, *beta, *dgamma, *dbeta, *run_mean, *run_var;
    int relu, bn;
    float *z, *y, *d, *mean, *rstd;   /* activations (B, out); y is z without batch norm; d = after dropout */
    uint8_t *mask;
    const float *x;                   /* input of the last forward (borrowed) */
    /* Placed on a device (be != NULL): every pointer above is device memory; its parameters,
     * gradients and moments are one block each there (dev_p: [w | b | gamma | beta]), the host
     * blocks keep a copy brought up to date by placed_sync_host. */
    const dense_backend *be;
    float *dev_p, *dev_g, *dev_m, *dev_run;
    size_t np, hp;                    /* parameter floats; offset of w in the host parameter block */
    float *host_run;                  /* run_mean, run_var in the host buffer block */
    float *xin, *s0, *s1;             /* the staged input (B, in) (on the host for a host layer after a
                                         placed one); device backward scratch (B, max(in, out)) */
} fc;

typedef struct {
    int n;
    fc l[MODEL_MAX_LAYERS + 1];
    float *hout;                      /* host copy of the output when the last layer is placed */
} mlp;

/* Parameters, llm.c's ParameterTensors: views into one block each of parameters and gradients
 * (d*), registered at create (reserve) and laid out by alloc_params; the optimizer's moments and
 * the batch-norm running statistics ("buffers") in blocks of their own. An MLP layer (fc) keeps
 * its views, and its activations, itself: it is the unit placed on a device. */
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

/* Activations of one batch of up to B rows that backward reads, and their gradients (d*). */
typedef struct {
    float *logit, *dlogit, *label, *dense;   /* (B), (B), (B), (B, ND) */
    float *pooled, *dpooled;                 /* (B, W) pooled embeddings */
    float *x0, *dx0full;                     /* (B, X0) concat of pooled and dense */
    float *fm_out, *dfm;                     /* (B) */
    float *xl[MODEL_MAX_LAYERS + 1], *ct[MODEL_MAX_LAYERS];   /* dcnv2: cross layers' inputs and terms (B, X0) */
    float *cat, *dcat;                       /* dcnv2 [x_L, deep out]; dlrm [bottom out, dots] */
    float *dots, *ddots, *inter, *dinter;    /* dlrm: pairwise dots, the vectors they are taken of */
    float *dbot;                             /* (B, dim) dlrm: gradient of the bottom MLP's output */
} model_acts;

/* Scratch: reused within a step, nothing in it outlives a call. */
typedef struct {
    float *hl, *dhl;                         /* (B, widest MLP layer) backward of the MLPs */
    float *dxl[2], *ctmp;                    /* dcnv2 backward */
    uint64_t *lrp;                           /* (B + 1) the batch's row_ptr, starting at 0 */
} model_scratch;

struct model {
    model_config c;
    const dense_backend *be;   /* every layer runs through it */
    int B;                /* largest batch */
    int F, ND;            /* pooled fields, dense values */
    int32_t *slot;        /* field -> slot, -1 for num fields */
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
    int n_placed;         /* MLP layers placed on a device (model_place) */
    int host_edited;      /* model_dense handed out the host blocks: upload them before the next step */
    fc *placed[3 * (MODEL_MAX_LAYERS + 1)];
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

static void mlp_free(mlp *p)
{
    for (int i = 0; i < p->n; i++) {
        fc *f = &p->l[i];
        if (f->be) {
            void *dev[] = { f->z, f->y != f->z ? f->y : NULL, f->d, f->mask, f->mean, f->rstd, f->dev_p, f->dev_g, f->dev_m, f->dev_run,
                            f->xin, f->s0, f->s1 };
            for (size_t k = 0; k < sizeof dev / sizeof *dev; k++)
                if (dev[k]) f->be->release(dev[k]);
        } else {
            free(f->y != f->z ? f->y : NULL), free(f->z), free(f->d), free(f->mask), free(f->mean), free(f->rstd),
                free(f->xin);
        }
    }
    free(p->hout);
}

static int mlp_width(const mlp *p)
{
    int w = 0;
    for (int i = 0; i < p->n; i++) w = p->l[i].out > w ? p->l[i].out : w;
    return w;
}

/* The layer's output: after dropout, else after batch norm or ReLU, else the linear's. */
static const float *fc_out(const fc *f) { return f->d ? f->d : f->bn || f->relu ? f->y : f->z; }

/* Make n floats at src (living on backend from) available on backend to, in dst if they must move. */
static const float *move_to(const dense_backend *to, float *dst, const float *src, const dense_backend *from, size_t n)
{
    if (to == from) return src;
    if (from == &dense_backend_cpu) to->upload(dst, src, n * sizeof *src);
    else if (to == &dense_backend_cpu) from->download(dst, src, n * sizeof *src);
    else CHECK(!"moving between two devices");
    return dst;
}

static const dense_backend *fc_be(const model *m, const fc *f) { return f->be ? f->be : m->be; }

/* x (B, in of the first layer) on the host -> the output (B, out of the last), on the host */
static const float *mlp_forward(model *m, mlp *p, const float *x, int B, int train)
{
    const dense_backend *xbe = m->be;
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
    return p->n ? move_to(m->be, p->hout, x, xbe, (size_t)B * p->l[p->n - 1].out) : x;
}

/* dout (B, out of the last layer), on the host -> din (B, in of the first; NULL: not needed), on
 * the host; s0, s1 host scratch */
static void mlp_backward(model *m, mlp *p, float *din, const float *dout, float *s0, float *s1, int B)
{
    const float *g = dout;
    const dense_backend *gbe = m->be;
    for (int i = p->n - 1; i >= 0; i--) {
        fc *f = &p->l[i];
        const dense_backend *be = fc_be(m, f);
        float *t0 = f->be ? f->s0 : s0, *t1 = f->be ? f->s1 : s1;
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
        float *other = g == t0 ? t1 : t0;
        float *dx = i > 0 ? other : din && be != m->be ? other : din;
        be->linear_backward(dx, f->dw, f->db, g, f->x, f->w, B, f->in, f->out);
        if (i == 0 && din && dx != din) move_to(m->be, din, dx, be, (size_t)B * f->in);
        g = dx;
        gbe = be;
    }
}

/* ---- placement of MLP layers on a device ---- */

static size_t fc_params(const fc *f) { return (size_t)f->in * f->out + f->out + (f->bn ? 2u * f->out : 0); }

/* Copy the host state of placed layer f (parameters, moments, running statistics) to the device. */
static void fc_upload(model *m, fc *f)
{
    int mom = dense_opt_moments(m->c.dopt.kind);
    f->be->upload(f->dev_p, m->p.params + f->hp, f->np * sizeof(float));
    for (int k = 0; k < mom; k++)
        f->be->upload(f->dev_m + (size_t)k * f->np, m->p.moments + (size_t)k * m->p.n_params + f->hp, f->np * sizeof(float));
    if (f->bn) f->be->upload(f->dev_run, f->host_run, 2 * (size_t)f->out * sizeof(float));
}

/* ... and back, with the gradients of the last step. */
static void fc_download(model *m, fc *f)
{
    int mom = dense_opt_moments(m->c.dopt.kind);
    f->be->download(m->p.params + f->hp, f->dev_p, f->np * sizeof(float));
    f->be->download(m->p.grads + f->hp, f->dev_g, f->np * sizeof(float));
    for (int k = 0; k < mom; k++)
        f->be->download(m->p.moments + (size_t)k * m->p.n_params + f->hp, f->dev_m + (size_t)k * f->np, f->np * sizeof(float));
    if (f->bn) f->be->download(f->host_run, f->dev_run, 2 * (size_t)f->out * sizeof(float));
}

/* Move layer f to backend be: its state, activations and scratch are allocated there. */
static void fc_place(model *m, fc *f, const dense_backend *be)
{
    CHECK(!f->be && be != &dense_backend_cpu);
    int B = m->B, mom = dense_opt_moments(m->c.dopt.kind);
    size_t wn = (size_t)f->in * f->out, n = (size_t)B * f->out, wide = (size_t)B * (f->in > f->out ? f->in : f->out);
    f->np = fc_params(f);
    f->hp = (size_t)(f->w - m->p.params);
    /* the registry put [w | b | gamma | beta] side by side, and run_mean, run_var */
    CHECK(f->b == f->w + wn && (!f->bn || (f->gamma == f->b + f->out && f->beta == f->gamma + f->out &&
                                           f->run_var == f->run_mean + f->out)));
    f->be = be;
    f->host_run = f->run_mean;
    f->dev_p = be->alloc(f->np * sizeof(float));
    f->dev_g = be->alloc(f->np * sizeof(float));
    f->dev_m = be->alloc(f->np * (size_t)(mom ? mom : 1) * sizeof(float));
    f->dev_run = f->bn ? be->alloc(2 * (size_t)f->out * sizeof(float)) : NULL;
    fc_upload(m, f);
    f->w = f->dev_p, f->b = f->dev_p + wn, f->dw = f->dev_g, f->db = f->dev_g + wn;
    if (f->bn) {
        f->gamma = f->b + f->out, f->beta = f->gamma + f->out, f->dgamma = f->db + f->out, f->dbeta = f->dgamma + f->out;
        f->run_mean = f->dev_run, f->run_var = f->dev_run + f->out;
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
    m->placed[m->n_placed++] = f;
}

/* Bring the host blocks up to date with the placed layers (the host copy is a cache of their
 * state, so this does not change the model), unless the host blocks were handed out for editing
 * and are ahead. */
static void placed_sync_host(const model *cm)
{
    model *m = (model *)cm;
    if (m->host_edited) return;   /* edits through model_dense are pending: the host is ahead */
    for (int i = 0; i < m->n_placed; i++) fc_download(m, m->placed[i]);
}

/* ---- the layer chain for the planner ---- */

static int chain_add(plan_layer_shape *out, int *n, int max, const char *name, plan_layer_kind kind, int in, int o,
                     size_t params, int n_in, const int *inputs)
{
    CHECK(*n < max && n_in <= PLAN_MAX_INPUTS);
    plan_layer_shape *s = &out[*n];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->kind = kind, s->in = in, s->out = o, s->params = params, s->n_inputs = n_in;
    memcpy(s->input, inputs, (size_t)n_in * sizeof *inputs);
    return (*n)++;
}

/* The layers of an MLP, the first reading inputs; returns the index of the last. */
static int chain_mlp(const model *m, const mlp *p, const char *prefix, plan_layer_shape *out, int *n, int max, int n_in,
                     const int *inputs, const fc **fcs)
{
    int last = -1;
    for (int i = 0; i < p->n; i++) {
        const fc *f = &p->l[i];
        char name[24];
        if (!f->relu) snprintf(name, sizeof name, "%s", strcmp(prefix, "bot") ? "head" : "bot_head");
        else snprintf(name, sizeof name, "%s%d", prefix, i + 1);
        size_t params = (size_t)f->in * f->out + f->out + (f->bn ? 2u * f->out : 0);
        last = i ? chain_add(out, n, max, name, PL_FC, f->in, f->out, params, 1, &last)
                 : chain_add(out, n, max, name, PL_FC, f->in, f->out, params, n_in, inputs);
        out[last].bn = f->bn, out[last].relu = f->relu, out[last].dropout = f->d ? m->c.dropout : 0;
        out[last].gpu_ok = 1;   /* model_place runs MLP layers on a device */
        if (fcs) fcs[last] = f;
    }
    return last;
}

static int layer_chain(const model *m, plan_layer_shape *out, int max, const fc **fcs)
{
    int n = 0, host = PLAN_HOST, emb = -1, logit_in[PLAN_MAX_INPUTS], n_logit = 0, D = m->c.dim;
    if (m->E) {
        emb = chain_add(out, &n, max, "embedding", PL_POOL, 0, m->W, 0, 1, &host);
        out[emb].F = m->F, out[emb].D = m->F ? m->W / m->F : 0;
    }
    if (m->has_w) {
        int w = chain_add(out, &n, max, "wide", PL_WIDE, 0, 1, (size_t)m->ND, 1, &host);
        out[w].F = m->F ? m->F : 1, out[w].D = 1;
        logit_in[n_logit++] = w;
    }
    if (m->c.kind == MODEL_FM || m->c.kind == MODEL_DEEPFM || m->c.kind == MODEL_FFM) {
        int i = chain_add(out, &n, max, m->c.kind == MODEL_FFM ? "ffm" : "fm", m->c.kind == MODEL_FFM ? PL_FFM : PL_FM, m->W,
                          1, 0, 1, &emb);
        out[i].F = m->F, out[i].D = D;
        logit_in[n_logit++] = i;
    }
    int x0_in[2] = { emb, host }, n_x0 = m->ND ? 2 : 1;
    if (m->c.kind == MODEL_DNN || m->c.kind == MODEL_WIDEDEEP || m->c.kind == MODEL_DEEPFM) {
        logit_in[n_logit++] = chain_mlp(m, &m->p.deep, "fc", out, &n, max, n_x0, x0_in, fcs);
    } else if (m->c.kind == MODEL_DCNV2) {
        int prev = -1;
        for (int l = 0; l < m->p.n_cross; l++) {
            char name[24];
            snprintf(name, sizeof name, "cross%d", l + 1);
            int in2[3] = { emb, host, prev };
            prev = l ? chain_add(out, &n, max, name, PL_CROSS, m->X0, m->X0, (size_t)m->X0 * m->X0 + m->X0, 2,
                                 (int[]){ emb, prev })
                     : chain_add(out, &n, max, name, PL_CROSS, m->X0, m->X0, (size_t)m->X0 * m->X0 + m->X0, n_x0, in2);
        }
        int deep = m->p.deep.n ? chain_mlp(m, &m->p.deep, "fc", out, &n, max, n_x0, x0_in, fcs) : -1;
        int dh = m->p.deep.n ? m->p.deep.l[m->p.deep.n - 1].out : 0;
        int hin[2] = { prev >= 0 ? prev : emb, deep };
        logit_in[n_logit++] = chain_add(out, &n, max, "head", PL_FC, m->X0 + dh, 1, (size_t)(m->X0 + dh) + 1,
                                        deep >= 0 ? 2 : 1, hin);
    } else if (m->c.kind == MODEL_DLRM) {
        int nf = m->F + (m->ND ? 1 : 0);
        int bot = m->ND ? chain_mlp(m, &m->p.bottom, "bot", out, &n, max, 1, &host, fcs) : -1;
        int parts[2] = { emb, bot };
        int top_in[2] = { emb, bot }, n_top = bot >= 0 ? 2 : 1;
        if (!m->c.dlrm_cat) {
            int i = chain_add(out, &n, max, "interaction", PL_DOT, nf * D, nf * (nf - 1) / 2, 0, n_top, parts);
            out[i].F = nf, out[i].D = D;
            top_in[0] = i;
        }
        logit_in[n_logit++] = chain_mlp(m, &m->p.top, "top", out, &n, max, n_top, top_in, fcs);
    }
    logit_in[n_logit++] = host;   /* the labels */
    chain_add(out, &n, max, "loss", PL_LOSS, 1, 1, 1, n_logit, logit_in);   /* it holds the global bias */
    return n;
}

int model_layer_chain(const model *m, plan_layer_shape *out, int max) { return layer_chain(m, out, max, NULL); }

int model_place(model *m, const place_device *dev, int n, char *err, size_t errlen)
{
    plan_layer_shape sh[PLAN_MAX_LAYERS];
    const fc *fcs[PLAN_MAX_LAYERS] = { 0 };
    int nl = layer_chain(m, sh, PLAN_MAX_LAYERS, fcs);
    CHECK(n == nl && m->n_placed == 0);
    for (int i = 0; i < n; i++) {
        if (dev[i] == PLACE_CPU) continue;
        const char *why = "";
        const dense_backend *be = device_backend(dev[i]);
        if (dev[i] == PLACE_GPU) device_gpu(&why);
        if (!be) {
            snprintf(err, errlen, "layer %s: no %s here: %s", sh[i].name, place_device_name(dev[i]), why);
            return -1;
        }
        if (!fcs[i]) {
            snprintf(err, errlen, "layer %s: the trainer runs only MLP layers (fc, top, bot, head) on the %s so far",
                     sh[i].name, place_device_name(dev[i]));
            return -1;
        }
    }
    for (int i = 0; i < n; i++)
        if (dev[i] != PLACE_CPU) fc_place(m, (fc *)fcs[i], device_backend(dev[i]));
    mlp *mlps[3] = { &m->p.deep, &m->p.top, &m->p.bottom };
    for (int k = 0; k < 3; k++)
        if (mlps[k]->n && mlps[k]->l[mlps[k]->n - 1].be)
            mlps[k]->hout = xcalloc((size_t)m->B * mlps[k]->l[mlps[k]->n - 1].out, sizeof(float));
    for (int k = 0; k < 3; k++)   /* host layers reading a placed one stage its output on the host */
        for (int i = 1; i < mlps[k]->n; i++)
            if (!mlps[k]->l[i].be && mlps[k]->l[i - 1].be)
                mlps[k]->l[i].xin = xcalloc((size_t)m->B * mlps[k]->l[i].in, sizeof(float));
    return 0;
}

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

    m->s.lrp = xcalloc((size_t)B + 1, sizeof *m->s.lrp);
    m->a.dbot = xcalloc((size_t)B * D, sizeof(float));
    m->a.logit = xcalloc((size_t)B, sizeof(float));
    m->a.dlogit = xcalloc((size_t)B, sizeof(float));
    m->a.label = xcalloc((size_t)B, sizeof(float));
    m->a.dense = xcalloc((size_t)B * (m->ND ? m->ND : 1), sizeof(float));
    if (m->E) {
        m->a.pooled = xcalloc((size_t)B * m->W, sizeof(float));
        m->a.dpooled = xcalloc((size_t)B * m->W, sizeof(float));
    }
    m->a.fm_out = xcalloc((size_t)B, sizeof(float));
    m->a.dfm = xcalloc((size_t)B, sizeof(float));
    if (m->p.deep.n || m->p.top.n || m->p.bottom.n) {
        m->a.x0 = xcalloc((size_t)B * m->X0, sizeof(float));
        m->a.dx0full = xcalloc((size_t)B * m->X0, sizeof(float));
        mlp_alloc(&m->p.deep, B, c->dropout);
        mlp_alloc(&m->p.top, B, c->dropout);
        mlp_alloc(&m->p.bottom, B, 0);
        /* the MLPs' backward scratch: (B, widest layer) */
        int w = mlp_width(&m->p.deep);
        if (mlp_width(&m->p.top) > w) w = mlp_width(&m->p.top);
        if (mlp_width(&m->p.bottom) > w) w = mlp_width(&m->p.bottom);
        m->s.hl = xcalloc((size_t)B * w, sizeof(float));
        m->s.dhl = xcalloc((size_t)B * w, sizeof(float));
        /* concatenations: dcnv2 [x_L, deep out]; dlrm [bottom out, dots] and d bottom out */
        int cw = c->kind == MODEL_DCNV2 ? m->X0 + deep_out : c->kind == MODEL_DLRM ? (top_in > D ? top_in : D) : 0;
        if (cw) {
            m->a.cat = xcalloc((size_t)B * cw, sizeof(float));
            m->a.dcat = xcalloc((size_t)B * cw, sizeof(float));
        }
    }
    if (c->kind == MODEL_DCNV2) {
        for (int i = 0; i <= m->p.n_cross; i++) m->a.xl[i] = xcalloc((size_t)B * m->X0, sizeof(float));
        for (int i = 0; i < m->p.n_cross; i++) m->a.ct[i] = xcalloc((size_t)B * m->X0, sizeof(float));
        m->s.dxl[0] = xcalloc((size_t)B * m->X0, sizeof(float));
        m->s.dxl[1] = xcalloc((size_t)B * m->X0, sizeof(float));
        m->s.ctmp = xcalloc((size_t)B * (m->X0 > deep_out ? m->X0 : deep_out), sizeof(float));   /* d x_L scratch and d deep-out */
    }
    if (c->kind == MODEL_DLRM) {
        int nf = m->F + (m->ND ? 1 : 0);
        m->a.inter = xcalloc((size_t)B * nf * D, sizeof(float));
        m->a.dinter = xcalloc((size_t)B * nf * D, sizeof(float));
        m->a.dots = xcalloc((size_t)B * (nf * (nf - 1) / 2 + 1), sizeof(float));
        m->a.ddots = xcalloc((size_t)B * (nf * (nf - 1) / 2 + 1), sizeof(float));
    }
    return m;
}

void model_destroy(model *m)
{
    if (!m) return;
    for (int t = 0; t < m->n_tables; t++) emb_table_destroy(m->tab[t]);
    emb_batch_destroy(m->rows);
    free(m->tab), free(m->tE), free(m->stab), free(m->soff), free(m->sdim);
    mlp_free(&m->p.deep), mlp_free(&m->p.top), mlp_free(&m->p.bottom);
    for (int i = 0; i <= MODEL_MAX_LAYERS; i++) free(m->a.xl[i]);
    for (int i = 0; i < MODEL_MAX_LAYERS; i++) free(m->a.ct[i]);
    free(m->s.dxl[0]), free(m->s.dxl[1]), free(m->s.ctmp);
    free(m->a.inter), free(m->a.dinter), free(m->a.dots), free(m->a.ddots);
    free(m->a.logit), free(m->a.dlogit), free(m->a.label), free(m->a.dense), free(m->a.pooled), free(m->a.dpooled);
    free(m->a.fm_out), free(m->a.dfm), free(m->a.x0), free(m->a.dx0full), free(m->s.hl), free(m->s.dhl), free(m->a.cat), free(m->a.dcat);
    free(m->s.lrp), free(m->a.dbot);
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
static void forward(model *m, const sample_block *b, size_t r0, int B, int train)
{
    const uint64_t *rp = b->row_ptr + r0;
    uint64_t k0 = rp[0];
    uint64_t *lrp = m->s.lrp;
    for (int i = 0; i <= B; i++) lrp[i] = rp[i] - k0;
    const uint16_t *field = b->field + k0;
    const float *val = b->val + k0;
    int D = m->c.dim, ND = m->ND, F = m->F;
    const uint32_t *uidx = emb_batch_uidx(m->rows);
    const float *Uw = emb_batch_w(m->rows);
    if (ND) memcpy(m->a.dense, b->dense + r0 * (size_t)ND, (size_t)B * ND * sizeof(float));
    for (int i = 0; i < B; i++) m->a.logit[i] = m->p.bias[0];
    if (m->has_w) {
        #pragma omp parallel for schedule(static) if (B >= 1024)
        for (int i = 0; i < B; i++) {
            float s = 0;
            for (uint64_t k = lrp[i]; k < lrp[i + 1]; k++)
                if (m->slot[field[k]] >= 0) s += val[k] * Uw[uidx[k]];
            if (ND)
                for (int j = 0; j < ND; j++) s += m->a.dense[(size_t)i * ND + j] * m->p.wd[j];
            m->a.logit[i] += s;
        }
    }
    if (m->E)
        m->be->pool_forward(m->a.pooled, emb_batch_e(m->rows), emb_batch_uoff(m->rows), uidx, field, val, lrp, m->slot, m->soff, m->sdim, m->c.pool_mean,
                           B, F, m->W);
    switch (m->c.kind) {
    case MODEL_FM: case MODEL_DEEPFM:
        m->be->fm_forward(m->a.fm_out, m->a.pooled, B, F, D);
        for (int i = 0; i < B; i++) m->a.logit[i] += m->a.fm_out[i];
        break;
    case MODEL_FFM:
        m->be->ffm_forward(m->a.fm_out, m->a.pooled, B, F, D);
        for (int i = 0; i < B; i++) m->a.logit[i] += m->a.fm_out[i];
        break;
    default:
        break;
    }
    if (m->p.deep.n && m->c.kind != MODEL_DLRM) {
        const float *parts[2] = { m->a.pooled, m->a.dense };
        int C[2] = { m->W, ND };
        m->be->concat_forward(m->a.x0, parts, C, ND ? 2 : 1, B);
    }
    if (m->c.kind == MODEL_DNN || m->c.kind == MODEL_WIDEDEEP || m->c.kind == MODEL_DEEPFM) {
        const float *o = mlp_forward(m, &m->p.deep, m->a.x0, B, train);
        for (int i = 0; i < B; i++) m->a.logit[i] += o[i];
    } else if (m->c.kind == MODEL_DCNV2) {
        memcpy(m->a.xl[0], m->a.x0, (size_t)B * m->X0 * sizeof(float));
        for (int l = 0; l < m->p.n_cross; l++)
            m->be->cross_forward(m->a.xl[l + 1], m->a.ct[l], m->a.x0, m->a.xl[l], m->p.cw[l], m->p.cb[l], B, m->X0);
        const float *h = mlp_forward(m, &m->p.deep, m->a.x0, B, train);
        int dh = m->p.deep.n ? m->p.deep.l[m->p.deep.n - 1].out : 0;
        const float *parts[2] = { m->a.xl[m->p.n_cross], h };
        int C[2] = { m->X0, dh };
        m->be->concat_forward(m->a.cat, parts, C, dh ? 2 : 1, B);
        int W = m->X0 + dh;
        for (int i = 0; i < B; i++) {
            const float *x = m->a.cat + (size_t)i * W;
            float acc = m->p.head_b[0];
            for (int j = 0; j < W; j++) acc += x[j] * m->p.head_w[j];
            m->a.logit[i] += acc;
        }
    } else if (m->c.kind == MODEL_DLRM) {
        int nf = F + (ND ? 1 : 0);
        const float *bot = ND ? mlp_forward(m, &m->p.bottom, m->a.dense, B, train) : NULL;
        const float *parts[2] = { bot, m->a.pooled };
        int C[2] = { D, F * D };
        if (ND) m->be->concat_forward(m->a.inter, parts, C, 2, B);
        else memcpy(m->a.inter, m->a.pooled, (size_t)B * F * D * sizeof(float));
        int P = nf * (nf - 1) / 2;
        const float *top_in = m->a.inter;   /* cat: the vectors themselves */
        if (!m->c.dlrm_cat) {
            m->be->dot_forward(m->a.dots, m->a.inter, B, nf, D);
            const float *tp[2] = { bot, m->a.dots };
            int TC[2] = { D, P };
            if (ND) m->be->concat_forward(m->a.cat, tp, TC, 2, B);
            else memcpy(m->a.cat, m->a.dots, (size_t)B * P * sizeof(float));
            top_in = m->a.cat;
        }
        const float *o = mlp_forward(m, &m->p.top, top_in, B, train);
        for (int i = 0; i < B; i++) m->a.logit[i] += o[i];
    }
}

static void backward(model *m, const sample_block *b, size_t r0, int B)
{
    uint64_t k0 = b->row_ptr[r0];
    uint64_t *lrp = m->s.lrp;
    for (int i = 0; i <= B; i++) lrp[i] = b->row_ptr[r0 + i] - k0;
    const uint16_t *field = b->field + k0;
    const float *val = b->val + k0;
    int D = m->c.dim, ND = m->ND, F = m->F;
    const float *g = m->a.dlogit;
    const uint32_t *uidx = emb_batch_uidx(m->rows);
    const size_t *uoff = emb_batch_uoff(m->rows);
    float *dUw = emb_batch_dw(m->rows), *dUe = emb_batch_de(m->rows);
    size_t U = emb_batch_unique(m->rows);
    for (int i = 0; i < B; i++) m->p.dbias[0] += g[i];
    memset(dUw, 0, U * sizeof(float));
    if (m->E) memset(dUe, 0, uoff[U] * sizeof(float));
    if (m->has_w) {
        for (int i = 0; i < B; i++) {
            for (uint64_t k = lrp[i]; k < lrp[i + 1]; k++)
                if (m->slot[field[k]] >= 0) dUw[uidx[k]] += val[k] * g[i];
            for (int j = 0; j < ND; j++) m->p.dwd[j] += m->a.dense[(size_t)i * ND + j] * g[i];
        }
    }
    if (!m->E) return;
    size_t pn = (size_t)B * m->W;
    memset(m->a.dpooled, 0, pn * sizeof(float));
    switch (m->c.kind) {
    case MODEL_FM: case MODEL_DEEPFM:
        m->be->fm_backward(m->a.dpooled, g, m->a.pooled, B, F, D);
        break;
    case MODEL_FFM:
        m->be->ffm_backward(m->a.dpooled, g, m->a.pooled, B, F, D);
        break;
    default:
        break;
    }
    float *s0 = m->s.hl, *s1 = m->s.dhl;
    if (m->c.kind == MODEL_DNN || m->c.kind == MODEL_WIDEDEEP || m->c.kind == MODEL_DEEPFM) {
        mlp_backward(m, &m->p.deep, m->a.dx0full, g, s0, s1, B);
    } else if (m->c.kind == MODEL_DCNV2) {
        int dh = m->p.deep.n ? m->p.deep.l[m->p.deep.n - 1].out : 0, W = m->X0 + dh;
        for (int i = 0; i < B; i++) {
            float gi = g[i];
            m->p.dhead_b[0] += gi;
            const float *x = m->a.cat + (size_t)i * W;
            float *dc = m->a.dcat + (size_t)i * W;
            for (int j = 0; j < W; j++) {
                m->p.dhead_w[j] += gi * x[j];
                dc[j] = gi * m->p.head_w[j];
            }
        }
        float *dparts[2] = { m->s.dxl[0], m->s.ctmp };
        int C[2] = { m->X0, dh };
        m->be->concat_backward(dparts, m->a.dcat, C, dh ? 2 : 1, B, 0);
        /* deep branch: d x0 from the MLP */
        memset(m->a.dx0full, 0, (size_t)B * m->X0 * sizeof(float));
        if (dh) {
            float *dx0_deep = m->s.dxl[1];
            mlp_backward(m, &m->p.deep, dx0_deep, m->s.ctmp, s0, s1, B);
            for (size_t j = 0; j < (size_t)B * m->X0; j++) m->a.dx0full[j] += dx0_deep[j];
        }
        /* cross branch, last layer first; dxl[0] holds d x_L */
        float *dcur = m->s.dxl[0], *dnext = m->s.dxl[1];
        for (int l = m->p.n_cross - 1; l >= 0; l--) {
            m->be->cross_backward(m->a.dx0full, dnext, m->p.dcw[l], m->p.dcb[l], m->s.ctmp, dcur, m->a.x0, m->a.xl[l], m->a.ct[l],
                                 m->p.cw[l], B, m->X0);
            float *t = dcur;
            dcur = dnext;
            dnext = t;
        }
        for (size_t j = 0; j < (size_t)B * m->X0; j++) m->a.dx0full[j] += dcur[j];   /* x_0 = x0 */
    } else if (m->c.kind == MODEL_DLRM) {
        int nf = F + (ND ? 1 : 0), P = nf * (nf - 1) / 2;
        float *dbot = m->a.dbot;
        if (m->c.dlrm_cat) {   /* the top MLP read the vectors themselves */
            mlp_backward(m, &m->p.top, m->a.dinter, g, s0, s1, B);
            if (ND) memset(dbot, 0, (size_t)B * D * sizeof(float));
        } else {               /* it read [bottom output, dot products] */
            mlp_backward(m, &m->p.top, m->a.dcat, g, s0, s1, B);
            if (ND) {
                float *dtp[2] = { dbot, m->a.ddots };
                int TC[2] = { D, P };
                m->be->concat_backward(dtp, m->a.dcat, TC, 2, B, 0);
            } else {
                memcpy(m->a.ddots, m->a.dcat, (size_t)B * P * sizeof(float));
            }
            m->be->dot_backward(m->a.dinter, m->a.ddots, m->a.inter, B, nf, D);
        }
        if (ND) {
            /* the interaction's gradient splits into d bottom-out (into dcat, free by now) and d pooled */
            float *dparts[2] = { m->a.dcat, m->a.dpooled };
            int C[2] = { D, F * D };
            m->be->concat_backward(dparts, m->a.dinter, C, 2, B, 0);
            for (size_t j = 0; j < (size_t)B * D; j++) dbot[j] += m->a.dcat[j];
            mlp_backward(m, &m->p.bottom, NULL, dbot, s0, s1, B);
        } else {
            for (size_t j = 0; j < pn; j++) m->a.dpooled[j] += m->a.dinter[j];
        }
    }
    if (m->p.deep.n && m->c.kind != MODEL_DLRM) {
        /* pooled part of d x0 */
        for (int i = 0; i < B; i++) {
            const float *src = m->a.dx0full + (size_t)i * m->X0;
            float *dst = m->a.dpooled + (size_t)i * m->W;
            for (int j = 0; j < m->W; j++) dst[j] += src[j];
        }
    }
    m->be->pool_backward(dUe, m->a.dpooled, uoff, uidx, field, val, lrp, m->slot, m->soff, m->sdim, m->c.pool_mean,
                        B, F, m->W);
}

/* Placed layers take up edits made to the host blocks through model_dense. */
static void placed_take_host_edits(model *m)
{
    if (!m->host_edited) return;
    for (int i = 0; i < m->n_placed; i++) fc_upload(m, m->placed[i]);
    m->host_edited = 0;
}

static double loss_and_grads(model *m, const sample_block *b, size_t r0, size_t r1, int train)
{
    placed_take_host_edits(m);
    int B = (int)(r1 - r0);
    CHECK(B <= m->B);
    memset(m->p.grads, 0, m->p.n_params * sizeof(float));
    for (int i = 0; i < m->n_placed; i++) m->placed[i]->be->zero(m->placed[i]->dev_g, m->placed[i]->np * sizeof(float));
    memcpy(m->a.label, b->label + r0, (size_t)B * sizeof(float));
    forward(m, b, r0, B, train);
    double loss = m->be->bce_forward_backward(m->a.dlogit, m->a.logit, m->a.label, B);
    backward(m, b, r0, B);
    return loss;
}

double model_loss_and_grads(model *m, const sample_block *b, size_t r0, size_t r1)
{
    emb_batch_gather(m->rows, b, r0, r1, 0, EMB_GATHER_NO_COUNT);
    double loss = loss_and_grads(m, b, r0, r1, 1);
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
            if (m->placed[i]->hp >= s && m->placed[i]->hp < next) next = m->placed[i]->hp, len = m->placed[i]->np;
        if (next > s) dense_opt_step_range(&m->c.dopt, m->p.params, m->p.grads, m->p.moments, m->p.n_params, s, next - s, m->step);
        if (next == m->p.n_params) break;
        s = next + len;
    }
    for (int i = 0; i < m->n_placed; i++) {
        fc *f = m->placed[i];
        f->be->opt_step(&m->c.dopt, f->dev_p, f->dev_g, f->dev_m, f->np, m->step);
    }
}

const emb_batch *model_batch_rows(const model *m) { return m->rows; }

void model_set_dropout_stream(model *m, uint64_t stream) { m->drop_stream = stream; }

uint64_t model_dense_apply(model *m)
{
    /* a caller's gradients (model_dense) and other host edits reach the placed layers first */
    for (int i = 0; m->host_edited && i < m->n_placed; i++)
        m->placed[i]->be->upload(m->placed[i]->dev_g, m->p.grads + m->placed[i]->hp, m->placed[i]->np * sizeof(float));
    placed_take_host_edits(m);
    m->step++;
    dense_step(m);
    return m->step;
}

double model_train_batch(model *m, const sample_block *b, size_t r0, size_t r1, uint32_t pass)
{
    emb_batch_gather(m->rows, b, r0, r1, pass, EMB_GATHER_TRAIN);
    double loss = loss_and_grads(m, b, r0, r1, 1);
    m->step++;
    emb_batch_scatter(m->rows, m->step, m->c.emb_l2_all);
    dense_step(m);
    return loss;
}

void model_predict_batch(model *m, const sample_block *b, size_t r0, size_t r1, double *prob)
{
    size_t done = r0;
    while (done < r1) {
        size_t end = done + (size_t)m->B < r1 ? done + (size_t)m->B : r1;
        int B = (int)(end - done);
        emb_batch_gather(m->rows, b, done, end, 0, EMB_GATHER_INFER);
        placed_take_host_edits(m);
        forward(m, b, done, B, 0);
        for (int i = 0; i < B; i++) prob[done - r0 + (size_t)i] = 1.0 / (1.0 + exp(-(double)m->a.logit[i]));
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
    for (int i = 0; i < m->n_placed; i++) fc_upload(m, m->placed[i]);
    return 0;
}
