/*
 * test_plan.c: the placement planner (dense/plan.h): the dynamic program against brute force on
 * random synthetic profiles (chains with skip edges, layers a device cannot run, tight memory),
 * profiles saved and loaded (and refused when damaged), placement strings, the layer chains of
 * the models, measuring on this machine, and `ctrbox plan` planning a GPU machine from its
 * saved profile on a CPU-only one.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dense/model.h"
#include "../dense/plan.h"
#include "helpers.h"

TestSuite(plan, .fini = th_cleanup);

static unsigned rs = 777;
static double urand(void) { return (double)rand_r(&rs) / RAND_MAX; }

/* A random chain of n layers: each reads the layer before it, sometimes also an earlier one or the host. */
static void random_profile(plan_profile *p, int n, int tight)
{
    memset(p, 0, sizeof *p);
    snprintf(p->model, sizeof p->model, "synthetic");
    p->batch = 1024;
    p->n = n;
    p->link_bytes_per_s = urand() < 0.15 ? 0 : 1e9 * (0.5 + 10 * urand());
    p->link_latency_s = 1e-5 * urand();
    double total_gpu = 0;
    for (int i = 0; i < n; i++) {
        plan_layer *l = &p->l[i];
        snprintf(l->name, sizeof l->name, "l%d", i);
        l->time_s[PLACE_CPU] = urand() < 0.05 ? -1 : 1e-3 * (0.1 + 20 * urand());
        l->time_s[PLACE_GPU] = urand() < 0.15 ? -1 : 1e-3 * (0.05 + 4 * urand());
        l->mem_bytes[PLACE_CPU] = 1e6 * (1 + 50 * urand());
        l->mem_bytes[PLACE_GPU] = l->mem_bytes[PLACE_CPU] * (0.8 + 0.4 * urand());
        total_gpu += l->mem_bytes[PLACE_GPU];
        l->out_bytes = 1e5 * (1 + 100 * urand());
        l->n_inputs = 0;
        if (i == 0 || urand() < 0.2) {
            l->input[l->n_inputs++] = PLAN_HOST;
            l->host_bytes = 1e5 * (1 + 50 * urand());
            if (urand() < 0.3) l->pass_rows = 1e4 * (1 + 10 * urand()), l->pass_bytes = l->pass_rows * 200;   /* reads rows */
        }
        if (i > 0) l->input[l->n_inputs++] = i - 1;
        for (int k = 0; k < 2 && i > 1; k++)
            if (urand() < 0.3) l->input[l->n_inputs++] = rand_r(&rs) % (i - 1);
    }
    p->mem_limit[PLACE_CPU] = tight && urand() < 0.5 ? total_gpu * (0.3 + 0.6 * urand()) : 0;
    p->mem_limit[PLACE_GPU] = tight ? total_gpu * (0.1 + 0.6 * urand()) : 0;
}

Test(plan, dynamic_program_matches_brute_force)
{
    int feasible = 0, mixed = 0, limited = 0;
    for (int trial = 0; trial < 400; trial++) {
        plan_profile p;
        random_profile(&p, 1 + trial % 14, trial % 2);
        plan_result dp, bf;
        int a = plan_solve(&p, &dp), b = plan_brute_force(&p, &bf);
        cr_assert_eq(a, b, "trial %d: dp %d brute force %d", trial, a, b);
        if (a < 0) continue;
        feasible++;
        cr_assert(dp.feasible);
        cr_assert(fabs(dp.step_s - bf.step_s) <= 1e-12 * bf.step_s, "trial %d: dp %.15g brute force %.15g", trial,
                  dp.step_s, bf.step_s);
        for (int d = 0; d < PLACE_COUNT; d++)
            cr_assert(p.mem_limit[d] == 0 || dp.mem[d] <= p.mem_limit[d], "trial %d: device %d over its memory", trial, d);
        int g = 0;
        for (int i = 0; i < p.n; i++) g += dp.dev[i] == PLACE_GPU;
        mixed += g > 0 && g < p.n;
        /* the limit mattered: the unlimited optimum would not fit */
        plan_profile q = p;
        q.mem_limit[PLACE_CPU] = q.mem_limit[PLACE_GPU] = 0;
        plan_result free_r;
        cr_assert_eq(plan_solve(&q, &free_r), 0);
        cr_assert_leq(free_r.step_s, dp.step_s * (1 + 1e-12));
        limited += free_r.step_s < dp.step_s * (1 - 1e-9);
    }
    /* the random cases exercise the interesting ones */
    cr_assert_gt(feasible, 250);
    cr_assert_gt(mixed, 50);
    cr_assert_gt(limited, 20);
}

Test(plan, memory_limit_moves_layers_back)
{
    /* four layers, each 10x faster on the GPU, a free link; the GPU holds only two of them */
    plan_profile p;
    memset(&p, 0, sizeof p);
    p.n = 4;
    p.batch = 1;
    p.link_bytes_per_s = 1e12;
    for (int i = 0; i < 4; i++) {
        snprintf(p.l[i].name, sizeof p.l[i].name, "fc%d", i + 1);
        p.l[i].time_s[PLACE_CPU] = 10.0 * (i + 1);
        p.l[i].time_s[PLACE_GPU] = 1.0 * (i + 1);
        p.l[i].mem_bytes[PLACE_CPU] = p.l[i].mem_bytes[PLACE_GPU] = 100;
        p.l[i].out_bytes = 1;
        p.l[i].n_inputs = 1;
        p.l[i].input[0] = i - 1;
    }
    p.mem_limit[PLACE_GPU] = 250;
    plan_result r;
    cr_assert_eq(plan_solve(&p, &r), 0);
    /* the two slowest layers go to the GPU */
    cr_assert_eq(r.dev[0], PLACE_CPU);
    cr_assert_eq(r.dev[1], PLACE_CPU);
    cr_assert_eq(r.dev[2], PLACE_GPU);
    cr_assert_eq(r.dev[3], PLACE_GPU);
    cr_assert_float_eq(r.mem[PLACE_GPU], 200, 1e-9);
    /* with no room at all everything stays on the CPU; with none on either side there is no plan */
    p.mem_limit[PLACE_GPU] = 50;
    cr_assert_eq(plan_solve(&p, &r), 0);
    for (int i = 0; i < 4; i++) cr_assert_eq(r.dev[i], PLACE_CPU);
    p.mem_limit[PLACE_CPU] = 50;
    cr_assert_eq(plan_solve(&p, &r), -1);
    cr_assert_eq(r.feasible, 0);
}

Test(plan, transfer_costs_keep_cheap_layers_beside_their_inputs)
{
    /* a slow link: the GPU's saving on a small layer is smaller than moving its activations */
    plan_profile p;
    memset(&p, 0, sizeof p);
    p.n = 3;
    p.batch = 1;
    p.link_bytes_per_s = 1e6;   /* 1 MB/s */
    double cpu[3] = { 1, 50, 1 }, gpu[3] = { 0.5, 1, 0.5 };
    for (int i = 0; i < 3; i++) {
        snprintf(p.l[i].name, sizeof p.l[i].name, "l%d", i);
        p.l[i].time_s[PLACE_CPU] = cpu[i];
        p.l[i].time_s[PLACE_GPU] = gpu[i];
        p.l[i].out_bytes = 2e6;   /* 2 s each way */
        p.l[i].n_inputs = 1;
        p.l[i].input[0] = i - 1;
    }
    plan_result r;
    cr_assert_eq(plan_solve(&p, &r), 0);
    /* l1 saves 49 s on the GPU, moving costs 8 s (in and out, both directions): only it moves... */
    /* ...unless the neighbours follow it, which saves their own moves: all three on the GPU */
    place_device all_gpu[3] = { PLACE_GPU, PLACE_GPU, PLACE_GPU };
    plan_result g;
    plan_evaluate(&p, all_gpu, &g);
    cr_assert_float_eq(r.step_s, g.step_s, 1e-12);
    cr_assert_float_eq(g.step_s, 2.0, 1e-12);
    for (int i = 0; i < 3; i++) cr_assert_float_eq(g.moved_bytes[i], 0, 1e-12);
    /* the host batch enters l0: on the GPU it crosses the link */
    p.l[0].input[0] = PLAN_HOST;
    p.l[0].host_bytes = 1e6;
    plan_evaluate(&p, all_gpu, &g);
    cr_assert_float_eq(g.step_s, 3.0, 1e-9);
    cr_assert_float_eq(g.moved_bytes[0], 1e6, 1e-6);
}

/* The pass tier: a layer that reads rows pays their trip to GPU memory and back when it runs there;
 * the new rows a step brings scale it. */
Test(plan, the_pass_tier_is_priced_on_the_gpu)
{
    plan_profile p;
    memset(&p, 0, sizeof p);
    p.n = 2;
    p.batch = 1000;
    p.link_bytes_per_s = 1e9;
    for (int i = 0; i < 2; i++) {
        snprintf(p.l[i].name, sizeof p.l[i].name, i ? "loss" : "embedding");
        p.l[i].time_s[PLACE_CPU] = 2.0, p.l[i].time_s[PLACE_GPU] = 1.0;
        p.l[i].n_inputs = 1, p.l[i].input[0] = i - 1;
    }
    p.l[0].pass_rows = 1e6, p.l[0].pass_bytes = 3e9;   /* 3 s a step at the link's speed */
    place_device gpu[2] = { PLACE_GPU, PLACE_GPU }, cpu[2] = { PLACE_CPU, PLACE_CPU };
    plan_result r;
    plan_evaluate(&p, gpu, &r);
    cr_assert_float_eq(r.step_s, 1.0 + 3.0 + 1.0, 1e-9);
    cr_assert_float_eq(r.moved_bytes[0], 3e9, 1);
    plan_evaluate(&p, cpu, &r);
    cr_assert_float_eq(r.step_s, 4.0, 1e-9, "on the cpu the rows stay");
    cr_assert_eq(plan_solve(&p, &r), 0);
    cr_assert_eq(r.dev[0], PLACE_CPU, "3 s of rows a step keep the embedding on the cpu");
    plan_set_rows_per_step(&p, 1e5);   /* keys repeat: a tenth of the rows are new each step */
    cr_assert_float_eq(p.l[0].pass_bytes, 3e8, 1);
    cr_assert_eq(plan_solve(&p, &r), 0);
    cr_assert(r.dev[0] == PLACE_GPU && r.dev[1] == PLACE_GPU);
    cr_assert_float_eq(r.step_s, 1.0 + 0.3 + 1.0, 1e-9);
}

Test(plan, profile_round_trip_and_damage)
{
    th_tmpdir();
    plan_profile p, q;
    random_profile(&p, 9, 1);
    snprintf(p.device[PLACE_GPU], sizeof p.device[0], "gpu0: Synthetic, 80.0 GiB");
    char err[1500];
    const char *path = th_path("prof.json");
    cr_assert_eq(plan_profile_save(&p, path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(plan_profile_load(&q, path, err, sizeof err), 0, "%s", err);
    cr_assert_eq(q.n, p.n);
    cr_assert_str_eq(q.device[PLACE_GPU], p.device[PLACE_GPU]);
    cr_assert_eq(q.link_bytes_per_s, p.link_bytes_per_s);
    for (int i = 0; i < p.n; i++) {
        cr_assert_str_eq(q.l[i].name, p.l[i].name);
        for (int d = 0; d < PLACE_COUNT; d++) {
            cr_assert_eq(q.l[i].time_s[d], p.l[i].time_s[d], "layer %d device %d", i, d);
            cr_assert_eq(q.l[i].mem_bytes[d], p.l[i].mem_bytes[d]);
        }
        cr_assert_eq(q.l[i].n_inputs, p.l[i].n_inputs);
        cr_assert_eq(q.l[i].pass_bytes, p.l[i].pass_bytes);
        cr_assert_eq(q.l[i].pass_rows, p.l[i].pass_rows);
        cr_assert_arr_eq(q.l[i].input, p.l[i].input, sizeof(int) * (size_t)p.l[i].n_inputs);
    }
    plan_result a, b;
    cr_assert_eq(plan_solve(&p, &a), plan_solve(&q, &b));
    cr_assert_eq(a.step_s, b.step_s);

    /* an edited number: the checksum catches it */
    size_t len;
    char *text = th_read(path, &len);
    char *at = strstr(text, "\"out_bytes\": ");
    cr_assert_not_null(at);
    at += strlen("\"out_bytes\": ");
    *at = *at == '9' ? '1' : '9';
    th_write(th_path("edited.json"), text, len);
    cr_assert_eq(plan_profile_load(&q, th_path("edited.json"), err, sizeof err), -1);
    cr_assert(strstr(err, "edited.json") && strstr(err, "checksum"), "%s", err);
    /* another version, another format, not JSON */
    th_write_str(th_path("v2.json"), "{\"format\": \"ctrbox-profile\", \"version\": 2}");
    cr_assert_eq(plan_profile_load(&q, th_path("v2.json"), err, sizeof err), -1);
    cr_assert(strstr(err, "version"), "%s", err);
    th_write_str(th_path("other.json"), "{\"format\": \"something\"}");
    cr_assert_eq(plan_profile_load(&q, th_path("other.json"), err, sizeof err), -1);
    cr_assert(strstr(err, "not a ctrbox profile"), "%s", err);
    th_write_str(th_path("bad.json"), "{\n\"format\": ");
    cr_assert_eq(plan_profile_load(&q, th_path("bad.json"), err, sizeof err), -1);
    cr_assert(strstr(err, "bad.json:2"), "%s", err);
    free(text);
}

Test(plan, placement_strings)
{
    plan_profile p;
    memset(&p, 0, sizeof p);
    p.n = 3;
    p.link_bytes_per_s = 1e9;
    const char *names[3] = { "embedding", "fc1", "loss" };
    for (int i = 0; i < 3; i++) {
        snprintf(p.l[i].name, sizeof p.l[i].name, "%s", names[i]);
        p.l[i].time_s[PLACE_CPU] = 1;
        p.l[i].time_s[PLACE_GPU] = i == 1 ? 0.1 : -1;
        p.l[i].n_inputs = 1;
        p.l[i].input[0] = i - 1;
    }
    place_device dev[PLAN_MAX_LAYERS];
    char err[600];
    cr_assert_eq(plan_placement_parse("cpu", &p, dev, err, sizeof err), 0);
    for (int i = 0; i < 3; i++) cr_assert_eq(dev[i], PLACE_CPU);
    cr_assert_eq(plan_placement_parse("fc1=gpu", &p, dev, err, sizeof err), 0);
    cr_assert(dev[0] == PLACE_CPU && dev[1] == PLACE_GPU && dev[2] == PLACE_CPU);
    cr_assert_eq(plan_placement_parse("auto", &p, dev, err, sizeof err), 0);
    cr_assert(dev[0] == PLACE_CPU && dev[1] == PLACE_GPU && dev[2] == PLACE_CPU);
    cr_assert_eq(plan_placement_parse("gpu", &p, dev, err, sizeof err), -1);
    cr_assert(strstr(err, "embedding cannot run on the gpu"), "%s", err);
    cr_assert_eq(plan_placement_parse("fc9=gpu", &p, dev, err, sizeof err), -1);
    cr_assert(strstr(err, "'fc9=gpu'"), "%s", err);
    cr_assert_eq(plan_placement_parse("fc1=tpu", &p, dev, err, sizeof err), -1);
    cr_assert_eq(plan_placement_parse("fc1", &p, dev, err, sizeof err), -1);
}

/* Criteo's shape: 13 dense values, 26 categorical fields. */
static void criteo_schema(data_schema *s)
{
    schema_init(s, 39);
    for (int f = 0; f < 13; f++) s->kind[f] = FIELD_NUM, s->dense_slot[f] = f;
    s->n_dense = 13;
}

Test(plan, every_model_has_a_chain_with_all_its_parameters)
{
    data_schema s;
    criteo_schema(&s);
    for (int k = 0; k < MODEL_COUNT; k++) {
        for (int bn = 0; bn < 2; bn++) {
            model_config c;
            model_config_default(&c, (model_kind)k);
            c.dim = 8, c.batch = 64, c.n_hidden = 2, c.hidden[0] = 32, c.hidden[1] = 16, c.batchnorm = bn;
            c.dropout = bn ? 0.1f : 0;
            if (k == MODEL_FFM) c.dim = 2;
            model *m = model_create(&c, &s);
            plan_layer_shape sh[PLAN_MAX_LAYERS];
            int n = model_layer_chain(m, sh, PLAN_MAX_LAYERS);
            cr_assert_gt(n, 1);
            cr_assert_eq(sh[n - 1].kind, PL_LOSS, "%s", model_kind_name((model_kind)k));
            size_t params = 0;
            for (int i = 0; i < n; i++) {
                params += sh[i].params;
                for (int j = 0; j < sh[i].n_inputs; j++)
                    cr_assert(sh[i].input[j] >= PLAN_HOST && sh[i].input[j] < i, "%s layer %s reads %d",
                              model_kind_name((model_kind)k), sh[i].name, sh[i].input[j]);
                for (int j = 0; j < i; j++) cr_assert_str_neq(sh[i].name, sh[j].name);
            }
            /* the layer that reads the rows knows their size in the pass tier (values and Adam's state) */
            int rows_at = sh[0].kind == PL_POOL || sh[0].kind == PL_WIDE ? 0 : -1;
            cr_assert_eq(rows_at, 0, "%s", model_kind_name((model_kind)k));
            int V = (k == MODEL_FFM ? 26 * c.dim : k == MODEL_LR ? 0 : c.dim) +
                    (k == MODEL_LR || k == MODEL_FM || k == MODEL_FFM || k == MODEL_WIDEDEEP || k == MODEL_DEEPFM);
            cr_assert_eq(sh[0].row_floats, 3 * V, "%s: a row of %d floats", model_kind_name((model_kind)k), sh[0].row_floats);
            float *pp, *gg;
            size_t np;
            model_dense(m, &pp, &gg, &np);
            cr_assert_eq(params, np, "%s: chain has %zu parameters, the model %zu", model_kind_name((model_kind)k), params,
                         np);
            model_destroy(m);
        }
    }
    schema_free(&s);
}

Test(plan, measured_on_this_machine)
{
    data_schema s;
    criteo_schema(&s);
    model_config c;
    model_config_default(&c, MODEL_DCNV2);
    c.dim = 8, c.batch = 256, c.n_hidden = 2, c.hidden[0] = 64, c.hidden[1] = 64, c.batchnorm = 1, c.dropout = 0.2f;
    model *m = model_create(&c, &s);
    plan_layer_shape sh[PLAN_MAX_LAYERS];
    int n = model_layer_chain(m, sh, PLAN_MAX_LAYERS);
    plan_profile p;
    plan_measure(&p, "dcnv2", sh, n, c.batch, 2, 3);
    const char *why;
    const dense_backend *gpu = device_gpu(&why);
    cr_assert_eq(p.n, n);
    for (int i = 0; i < n; i++) {
        cr_assert_gt(p.l[i].time_s[PLACE_CPU], 0, "%s", p.l[i].name);
        cr_assert_gt(p.l[i].mem_bytes[PLACE_CPU], 0, "%s", p.l[i].name);
        if (gpu) cr_assert_gt(p.l[i].time_s[PLACE_GPU], 0, "%s", p.l[i].name);
        else cr_assert_lt(p.l[i].time_s[PLACE_GPU], 0, "%s", p.l[i].name);
    }
    plan_result r;
    cr_assert_eq(plan_solve(&p, &r), 0);
    if (!gpu) {
        cr_assert_eq(p.link_bytes_per_s, 0);
        for (int i = 0; i < n; i++) cr_assert_eq(r.dev[i], PLACE_CPU);
    }
    model_destroy(m);
    schema_free(&s);
}

Test(plan, cli_plans_a_gpu_machine_from_its_profile)
{
    th_tmpdir();
    char *out;
    /* measure here and save */
    int rc = th_run(&out, "$B/ctrbox plan --model deepfm --dim 8 --hidden 64,64 --batch 512 --reps 2 --save-profile %s",
                    th_path("here.json"));
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "predicted step") && strstr(out, "fc1") && strstr(out, "devices:"), "%s", out);
    free(out);
    /* a profile as a GPU machine would save it: the MLP 20x faster there, a fast link */
    plan_profile p;
    char err[600];
    cr_assert_eq(plan_profile_load(&p, th_path("here.json"), err, sizeof err), 0, "%s", err);
    snprintf(p.device[PLACE_GPU], sizeof p.device[0], "gpu0: Synthetic GPU, 80.0 GiB");
    p.mem_limit[PLACE_GPU] = 80e9;
    p.link_bytes_per_s = 20e9;
    p.link_latency_s = 1e-5;
    for (int i = 0; i < p.n; i++) p.l[i].time_s[PLACE_GPU] = p.l[i].time_s[PLACE_CPU] / 20;
    cr_assert_eq(plan_profile_save(&p, th_path("gpu.json"), err, sizeof err), 0, "%s", err);
    rc = th_run(&out, "$B/ctrbox plan --model deepfm --dim 8 --hidden 64,64 --batch 512 --profile %s", th_path("gpu.json"));
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "Synthetic GPU"), "%s", out);
    /* the MLP's layers are planned on the GPU */
    char *fc1 = strstr(out, "\nfc1 ");
    cr_assert_not_null(fc1, "%s", out);
    cr_assert(!strncmp(fc1 + 1 + 15, "gpu", 3), "%s", out);
    free(out);
    /* a hand placement is priced too; an unknown layer is refused in one line */
    rc = th_run(&out, "$B/ctrbox plan --model deepfm --dim 8 --hidden 64,64 --batch 512 --profile %s --placement cpu",
                th_path("gpu.json"));
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = th_run(&out, "$B/ctrbox plan --model deepfm --dim 8 --hidden 64,64 --profile %s --placement fc7=gpu 2>&1",
                th_path("gpu.json"));
    cr_assert_neq(rc, 0);
    cr_assert(strstr(out, "fc7=gpu"), "%s", out);
    free(out);
    /* the pass tier's traffic is printed, and --rows-per-step scales it */
    rc = th_run(&out, "$B/ctrbox plan --model deepfm --dim 8 --hidden 64,64 --batch 512 --profile %s --placement gpu",
                th_path("gpu.json"));
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "pass tier: with embedding on the gpu its rows go up to GPU memory and back, 2.88 MB a step for "
                          "13312 new rows"), "%s", out);
    free(out);
    rc = th_run(&out, "$B/ctrbox plan --model deepfm --dim 8 --hidden 64,64 --batch 512 --profile %s --placement gpu "
                      "--rows-per-step 1331.2", th_path("gpu.json"));
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "0.29 MB a step for 1331 new rows"), "%s", out);
    free(out);
    /* another model's profile: its plan was printed as this one's, exit 0 */
    rc = th_run(&out, "$B/ctrbox plan --model dcnv2 --dim 8 --hidden 64,64 --batch 512 --profile %s 2>&1", th_path("gpu.json"));
    cr_assert(rc == 1 && strstr(out, "measured for --model deepfm, not dcnv2"), "%s", out);
    free(out);
    /* a damaged profile names itself */
    th_write_str(th_path("junk.json"), "[1, 2");
    rc = th_run(&out, "$B/ctrbox plan --model deepfm --profile %s 2>&1", th_path("junk.json"));
    cr_assert_neq(rc, 0);
    cr_assert(strstr(out, "junk.json:1"), "%s", out);
    free(out);
}
