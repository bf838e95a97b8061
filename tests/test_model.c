/*
 * test_model.c: a finite-difference check of every model's full backward pass (dense parameters
 * and the embedding rows the batch touches), with and without dense inputs, batch norm and
 * dropout; and a few training steps lower the loss.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dense/backend_sim.h"
#include "../dense/model.h"

#include <omp.h>

/* 6 rows, fields 0..2 categorical (field 1 multi-hot, valued), optional 2 dense values. */
static void make_batch(sample_block *b, data_schema *s, int nd)
{
    schema_init(s, 3 + (uint32_t)nd);
    for (int i = 0; i < nd; i++) {
        s->kind[3 + i] = FIELD_NUM;
        s->dense_slot[3 + i] = i;
    }
    s->n_dense = (uint32_t)nd;
    block_init(b, (uint32_t)nd);
    unsigned seed = 5;
    for (int r = 0; r < 6; r++) {
        block_reserve(b, 1, 8);
        int n = 0;
        uint64_t keys[4] = { 100 + (uint64_t)(r % 3), 200 + (uint64_t)(r % 2), 300 + (uint64_t)r % 4, 210 };
        uint16_t fields[4] = { 0, 1, 2, 1 };
        float vals[4] = { 1, 0.5f + 0.1f * (float)r, 1, 1.5f };
        int cnt = r % 2 ? 4 : 3;
        for (int j = 0; j < cnt; j++, n++) {
            b->key[b->nnz] = keys[j];
            b->field[b->nnz] = fields[j];
            b->val[b->nnz] = vals[j];
            b->nnz++;
        }
        for (int i = 0; i < nd; i++) b->dense[(size_t)r * nd + i] = (float)rand_r(&seed) / RAND_MAX * 2;
        b->label[r] = (float)(r % 3 == 0);
        b->rows++;
        b->row_ptr[b->rows] = b->nnz;
    }
}

static int mean_pool;   /* the next models pool multi-hot fields by their mean (--pool mean) */

static model_config small_config(model_kind k, int bn, float dropout)
{
    model_config c;
    model_config_default(&c, k);
    c.pool_mean = mean_pool;
    c.dim = 3;
    c.n_hidden = 2;
    c.hidden[0] = 5;
    c.hidden[1] = 12;   /* wider than the 11 inputs of dcnv2's cross net: both buffer shapes occur */
    c.n_bottom = 2;
    c.bottom[0] = 4;
    c.bottom[1] = 3;
    c.cross_layers = 2;
    c.batchnorm = bn;
    c.dropout = dropout;
    c.init_std = 0.5f;
    c.batch = 8;
    return c;
}

/* Central difference of the loss in one float; a second, smaller step is tried where the first
 * disagrees, since a step can cross a ReLU kink. */
typedef struct {
    model *m;
    sample_block *b;
} ctx;

static double numeric(ctx *c, float *(*where)(ctx *, void *), void *arg, int i, float eps)
{
    float *v = where(c, arg);
    float keep = v[i];
    v[i] = keep + eps;
    double lp = model_loss_and_grads(c->m, c->b, 0, 6);
    v = where(c, arg);
    v[i] = keep - eps;
    double lm = model_loss_and_grads(c->m, c->b, 0, 6);
    v = where(c, arg);
    v[i] = keep;
    return (lp - lm) / (2.0 * eps);
}

static float *dense_where(ctx *c, void *arg)
{
    float *p, *g;
    size_t n;
    (void)arg;
    model_dense(c->m, &p, &g, &n);
    return p;
}

typedef struct {
    int table;
    uint32_t row;
} row_ref;

static float *row_where(ctx *c, void *arg)
{
    row_ref *r = arg;
    return emb_table_vals(model_table(c->m, r->table), r->row);
}

static int agrees(ctx *c, float *(*where)(ctx *, void *), void *arg, int i, double analytic, double *num)
{
    *num = numeric(c, where, arg, i, 1e-3f);
    if (fabs(*num - analytic) <= 2e-3 + 3e-2 * fabs(*num)) return 1;
    *num = numeric(c, where, arg, i, 1e-4f);
    return fabs(*num - analytic) <= 5e-3 + 3e-2 * fabs(*num);
}

/* Place the model's layers on the GPU: every one (1), every other one from the first (2) or from
 * the second (3), so that whole placed models and a device boundary after and before every kind of
 * layer are checked. */
static void place_layers(model *m, int how)
{
    plan_layer_shape sh[PLAN_MAX_LAYERS];
    place_device dev[PLAN_MAX_LAYERS];
    int n = model_layer_chain(m, sh, PLAN_MAX_LAYERS);
    for (int i = 0; i < n; i++) dev[i] = how == 1 || i % 2 == how - 2 ? PLACE_GPU : PLACE_CPU;
    char err[300];
    cr_assert_eq(model_place(m, dev, n, err, sizeof err), 0, "%s", err);
}

static void check_model_placed(model_kind k, int nd, int bn, float dropout, int cat, int per_field, const char *dims,
                               int place)
{
    sample_block b;
    data_schema s;
    make_batch(&b, &s, nd);
    model_config c = small_config(k, bn, dropout);
    c.dlrm_cat = cat;
    c.table_per_field = per_field;
    snprintf(c.field_dims, sizeof c.field_dims, "%s", dims);
    char err[200];
    cr_assert_eq(model_config_check(&c, &s, err, sizeof err), 0, "%s", err);
    model *m = model_create(&c, &s);
    if (place) place_layers(m, place);
    float *p, *g;
    size_t n;
    model_dense(m, &p, &g, &n);
    /* move parameters off zero so every path carries gradient */
    unsigned seed = 9;
    for (size_t i = 0; i < n; i++) p[i] += ((float)rand_r(&seed) / RAND_MAX - 0.5f) * 0.4f;
    model_loss_and_grads(m, &b, 0, 6);
    float *ga = malloc(n * sizeof *ga);
    memcpy(ga, g, n * sizeof *ga);
    char what[64];
    snprintf(what, sizeof what, "%s nd=%d bn=%d dropout=%g cat=%d tables=%d/%s placed=%d%s", model_kind_name(k), nd, bn,
             dropout, cat, per_field, dims, place, mean_pool ? " mean" : "");
    ctx cx = { m, &b };
    int bad = 0;
    double num;
    for (size_t i = 0; i < n; i++)
        if (!agrees(&cx, dense_where, NULL, (int)i, ga[i], &num)) {
            fprintf(stderr, "%s dense[%zu]: analytic %g numeric %g\n", what, i, (double)ga[i], num);
            bad++;
        }
    /* every embedding row of the batch, in every table */
    size_t rows = 0;
    for (int ti = 0; ti < model_n_tables(m); ti++) {
        emb_table *t = model_table(m, ti);
        int V = emb_table_values(t);
        float *rg = malloc((size_t)V * sizeof *rg);
        for (uint32_t r = 0; r < emb_table_rows(t); r++, rows++) {
            model_loss_and_grads(m, &b, 0, 6);
            cr_assert_eq(model_row_grad(m, ti, r, rg), 0);
            row_ref ref = { ti, r };
            for (int i = 0; i < V; i++)
                if (!agrees(&cx, row_where, &ref, i, rg[i], &num)) {
                    fprintf(stderr, "%s table %d row %u value %d: analytic %g numeric %g\n", what, ti, r, i, (double)rg[i], num);
                    bad++;
                }
        }
        free(rg);
    }
    cr_assert_eq(bad, 0, "%s: %d gradients disagree (listed on stderr)", what, bad);
    cr_assert_gt(rows, 5);
    free(ga);
    model_destroy(m);
    block_free(&b);
    schema_free(&s);
}

static void check_model(model_kind k, int nd, int bn, float dropout, int cat, int per_field, const char *dims)
{
    check_model_placed(k, nd, bn, dropout, cat, per_field, dims, 0);
}

/* Every model with its layers on the GPU (all, then every other one either way), with and without
 * dense values; the MLPs with batch norm and dropout too. */
static void check_placed_models(void)
{
    for (int k = 0; k < MODEL_COUNT; k++)
        for (int place = 1; place <= 3; place++) {
            check_model_placed((model_kind)k, 2, 0, 0, 0, 0, "", place);
            if (k == MODEL_DNN || k == MODEL_DEEPFM || k == MODEL_DCNV2 || k == MODEL_DLRM)
                check_model_placed((model_kind)k, 2, 1, 0.3f, 0, 0, "", place);
            if (k == MODEL_FFM || k == MODEL_DLRM) check_model_placed((model_kind)k, 0, 0, 0, 0, 0, "", place);
        }
    for (int place = 1; place <= 3; place++) check_model_placed(MODEL_DLRM, 0, 1, 0.3f, 1, 0, "", place);
    check_model_placed(MODEL_DLRM, 2, 0, 0, 1, 0, "", 2);
    check_model_placed(MODEL_DCNV2, 0, 0, 0, 0, 0, "f0=2,f2=6", 3);   /* tables of their own sizes */
    mean_pool = 1;   /* field 1 is multi-hot: mean pooling's backward divides by its count */
    for (int place = 1; place <= 3; place += 2) {
        check_model_placed(MODEL_DEEPFM, 2, 0, 0, 0, 0, "", place);
        check_model_placed(MODEL_DLRM, 0, 0, 0, 0, 0, "", place);
    }
    mean_pool = 0;
}

/* On the simulated device (CPU kernels behind device memory that every kernel checks): the
 * placement's copies and gradient paths, on any machine. */
Test(model, gradient_check_placed_on_simulated_gpu)
{
    setenv("CTRBOX_GPU_SIM", "1", 1);
    cr_assert_not_null(device_gpu(NULL));
    check_placed_models();
    cr_assert_eq(dense_backend_sim_buffers(), 0, "device buffers leaked");
}

/* On a real GPU: the CUDA kernels' gradients. */
Test(model, gradient_check_on_gpu)
{
    const char *why;
    if (!device_gpu(&why)) cr_skip_test("no GPU: %s", why);
    check_placed_models();
}

Test(model, gradient_check_every_model)
{
    for (int k = 0; k < MODEL_COUNT; k++)
        for (int nd = 0; nd <= 2; nd += 2) check_model((model_kind)k, nd, 0, 0, 0, 0, "");
    for (int nd = 0; nd <= 2; nd += 2) check_model(MODEL_DLRM, nd, 0, 0, 1, 0, "");   /* dlrm's concatenation variant */
    mean_pool = 1;   /* mean pooling of the multi-hot field */
    check_model(MODEL_DEEPFM, 2, 0, 0, 0, 0, "");
    check_model(MODEL_FFM, 0, 0, 0, 0, 0, "");
    mean_pool = 0;
}

Test(model, gradient_check_tables_per_field_and_sizes)
{
    /* a table per field; and fields with their own sizes beside a shared table */
    for (int k = 0; k < MODEL_COUNT; k++) check_model((model_kind)k, 2, 0, 0, 0, 1, "");
    model_kind mixed[] = { MODEL_DNN, MODEL_WIDEDEEP, MODEL_DCNV2 };
    for (int i = 0; i < 3; i++) {
        check_model(mixed[i], 2, 0, 0, 0, 0, "f1=5");
        check_model(mixed[i], 0, 0, 0, 0, 1, "f0=2,f2=6");
    }
    /* models that combine vectors pairwise refuse mixed sizes; unknown or numeric fields too */
    sample_block b;
    data_schema s;
    make_batch(&b, &s, 2);
    char err[200];
    model_config c = small_config(MODEL_DEEPFM, 0, 0);
    snprintf(c.field_dims, sizeof c.field_dims, "f1=5");
    cr_assert_lt(model_config_check(&c, &s, err, sizeof err), 0);
    cr_assert(strstr(err, "deepfm"), "%s", err);
    snprintf(c.field_dims, sizeof c.field_dims, "f1=3");   /* the same size as --dim is fine */
    cr_assert_eq(model_config_check(&c, &s, err, sizeof err), 0, "%s", err);
    c.kind = MODEL_DNN;
    snprintf(c.field_dims, sizeof c.field_dims, "nope=4");
    cr_assert_lt(model_config_check(&c, &s, err, sizeof err), 0);
    snprintf(c.field_dims, sizeof c.field_dims, "f3=4");
    cr_assert_lt(model_config_check(&c, &s, err, sizeof err), 0, "f3 is numeric");
    snprintf(c.field_dims, sizeof c.field_dims, "f1=x");
    cr_assert_lt(model_config_check(&c, &s, err, sizeof err), 0);
    block_free(&b);
    schema_free(&s);
}

Test(model, gradient_check_batchnorm_dropout)
{
    model_kind ks[] = { MODEL_DNN, MODEL_DEEPFM, MODEL_DCNV2, MODEL_DLRM };
    for (int i = 0; i < 4; i++) check_model(ks[i], 2, 1, 0.3f, 0, 0, "");
}

/* Dropout's mask stream: stream 0 is the default's masks; two lanes' streams drop other units of
 * the same rows (their losses differ), and a stream's masks are the same each time it is asked. */
Test(model, dropout_streams_draw_their_own_masks)
{
    sample_block b;
    data_schema s;
    make_batch(&b, &s, 2);
    model_config c = small_config(MODEL_DEEPFM, 0, 0.5f);
    model *m = model_create(&c, &s);
    double base = model_loss_and_grads(m, &b, 0, 6);
    model_set_dropout_stream(m, 0);
    cr_assert_eq(model_loss_and_grads(m, &b, 0, 6), base);
    model_set_dropout_stream(m, 1);
    double one = model_loss_and_grads(m, &b, 0, 6);
    model_set_dropout_stream(m, 2);
    double two = model_loss_and_grads(m, &b, 0, 6);
    cr_assert(one != base && two != one, "losses %.9g (stream 0), %.9g (1), %.9g (2)", base, one, two);
    model_set_dropout_stream(m, 1);
    cr_assert_eq(model_loss_and_grads(m, &b, 0, 6), one);
    model_destroy(m);
    block_free(&b);
    schema_free(&s);
}

Test(model, training_lowers_the_loss)
{
    for (int k = 0; k < MODEL_COUNT; k++) {
        sample_block b;
        data_schema s;
        make_batch(&b, &s, 2);
        model_config c = small_config((model_kind)k, 0, 0);
        c.dopt.lr = 0.01f;
        c.sopt.lr = 0.01f;
        model *m = model_create(&c, &s);
        double first = model_train_batch(m, &b, 0, 6, 0), last = first;
        for (int i = 0; i < 200; i++) last = model_train_batch(m, &b, 0, 6, 0);
        cr_assert_lt(last, first * 0.7, "%s: loss %f -> %f", model_kind_name((model_kind)k), first, last);
        double prob[6];
        model_predict_batch(m, &b, 0, 6, prob);
        for (int i = 0; i < 6; i++) cr_assert(prob[i] > 0 && prob[i] < 1);
        model_destroy(m);
        block_free(&b);
        schema_free(&s);
    }
}

/* rows x 20 fields; keys drawn from a small skewed set, so most keys recur within a batch and
 * across the parts the distinct-key pass splits a batch into */
static void make_big_batch(sample_block *b, data_schema *s, int rows, unsigned seed)
{
    schema_init(s, 20);
    block_init(b, 0);
    for (int r = 0; r < rows; r++) {
        block_reserve(b, 1, 20);
        for (int f = 0; f < 20; f++) {
            unsigned x = (unsigned)rand_r(&seed) % 4096;
            b->key[b->nnz] = (uint64_t)f << 32 | (x * x) >> 12;   /* skewed towards small ids */
            b->field[b->nnz] = (uint16_t)f;
            b->val[b->nnz] = 1;
            b->nnz++;
        }
        b->label[r] = (float)(rand_r(&seed) % 5 == 0);
        b->rows++;
        b->row_ptr[b->rows] = b->nnz;
    }
}

/* The distinct-key pass splits a batch between threads and merges their keys in first-seen order:
 * 1, 2, 3 and 5 threads must give the same rows, counters, values and predictions, bit for bit. */
Test(model, thread_count_does_not_change_training)
{
    enum { ROWS = 5000, STEPS = 3 };
    const int threads[] = { 1, 2, 3, 5 };
    double *ref = NULL;
    emb_table *ref_tab = NULL;
    model *keep = NULL;
    for (size_t ti = 0; ti < sizeof threads / sizeof *threads; ti++) {
        omp_set_num_threads(threads[ti]);
        model_config c = small_config(MODEL_FM, 0, 0);
        c.batch = ROWS;
        data_schema s;
        sample_block b;
        make_big_batch(&b, &s, ROWS, 9);
        model *m = model_create(&c, &s);
        for (int i = 0; i < STEPS; i++) model_train_batch(m, &b, 0, ROWS, (uint32_t)i);
        double *prob = malloc(ROWS * sizeof *prob);
        model_predict_batch(m, &b, 0, ROWS, prob);
        emb_table *t = model_table(m, 0);
        if (!ref) {
            ref = prob, ref_tab = t, keep = m;
            /* the counters count every occurrence: key of entry 0 against a direct count */
            uint64_t key = b.key[0];
            float shows = 0;
            for (size_t k = 0; k < b.nnz; k++) shows += b.key[k] == key;
            emb_row_head *h = emb_table_head(t, (uint32_t)emb_table_find(t, key));
            cr_assert_eq(h->show, shows * STEPS, "show %f, counted %f", h->show, shows * STEPS);
            cr_assert_gt(emb_table_rows(t), 1000, "keys recur but are many: %zu rows", emb_table_rows(t));
        } else {
            cr_assert_eq(emb_table_rows(t), emb_table_rows(ref_tab), "%d threads", threads[ti]);
            size_t rb = emb_table_row_bytes(t);
            for (uint32_t r = 0; r < emb_table_rows(t); r++)   /* same keys in the same rows, same bytes */
                cr_assert(memcmp(emb_table_head(t, r), emb_table_head(ref_tab, r), rb) == 0, "%d threads: row %u",
                          threads[ti], r);
            cr_assert(memcmp(prob, ref, ROWS * sizeof *prob) == 0, "%d threads: predictions differ", threads[ti]);
            free(prob);
            model_destroy(m);
        }
        block_free(&b);
        schema_free(&s);
    }
    omp_set_num_threads(2);
    free(ref);
    model_destroy(keep);
}
