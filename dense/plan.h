/*
 * plan.h: the HeterPS placement planner. A model is a chain of layers (in the order a forward
 * pass runs them; a layer may read the outputs of earlier layers, not only of the one before).
 * A profile gives, per layer and device, the forward + backward time at the batch size and the
 * memory the layer holds there, and the bytes each layer's output has; with the link speed it
 * prices every assignment of layers to devices:
 *
 *   step = sum_i time[i][dev_i]
 *        + sum over edges j -> i with dev_j != dev_i of 2 * (out_bytes[j] / link + latency)
 *          (the activation forward and its gradient backward)
 *        + for a layer on the GPU that reads the batch: host_bytes[i] / link + latency
 *          (the batch sits in CPU memory)
 *        + for the embedding layer and the wide part on the GPU: pass_bytes[i] / link (the pass
 *          tier's rows going up and coming back, per step; dense/devrows.h)
 *
 * under sum of mem[i][dev] <= the device's limit. plan_solve finds the cheapest assignment by
 * dynamic programming over the chain: its state is the device of each layer whose output a later
 * layer still reads, and per state it keeps the Pareto set of (time, memory per device), so the
 * memory limits are met exactly. plan_brute_force tries every assignment (tests).
 *
 * Profiles are measured on this machine's devices (plan_measure) or read from a JSON file saved
 * on another machine (format "ctrbox-profile", version, XXH64 of the canonical body), so a GPU
 * machine can be planned from a CPU-only one.
 */
#ifndef CTRBOX_DENSE_PLAN_H
#define CTRBOX_DENSE_PLAN_H

#include <stddef.h>
#include <stdio.h>

#include "device.h"

#define PLAN_MAX_LAYERS 40
#define PLAN_MAX_INPUTS 4
#define PLAN_HOST (-1)   /* an input that is the batch itself, in CPU memory */

typedef enum { PL_POOL = 0, PL_WIDE, PL_FM, PL_FFM, PL_DOT, PL_CROSS, PL_FC, PL_LOSS, PL_KIND_COUNT } plan_layer_kind;

/* What a layer is, enough to run it alone on a backend (plan_measure) and to size it. Widths are
 * floats per sample. */
typedef struct {
    char name[24];
    plan_layer_kind kind;
    int in, out;          /* fc, cross: in -> out; pool: out = sum of slot dims */
    int F, D;             /* pool: slots and floats per slot; fm, ffm, dot: fields and dim */
    int bn, relu;         /* fc */
    float dropout;        /* fc */
    int n_inputs, input[PLAN_MAX_INPUTS];   /* producing layers (indices < this one) or PLAN_HOST */
    size_t params;        /* dense parameter floats */
    int row_floats;       /* pool, wide: floats of a row the pass tier holds (values and optimizer state) */
} plan_layer_shape;

const char *plan_layer_kind_name(plan_layer_kind k);

typedef struct {
    char name[24];
    double time_s[PLACE_COUNT];      /* forward + backward at the batch size; < 0: cannot run there */
    double mem_bytes[PLACE_COUNT];   /* parameters, gradients, moments and activations held there */
    double out_bytes;                /* the output a later layer reads (its gradient has the same size) */
    double host_bytes;               /* what it reads from the batch in CPU memory per step (both ways) */
    double pass_bytes;               /* on the GPU: the pass tier's rows up and back per step (pool, wide) */
    double pass_rows;                /* the new rows a step brings, that pass_bytes assumes */
    int n_inputs, input[PLAN_MAX_INPUTS];
} plan_layer;

typedef struct {
    char model[32];
    int batch;
    char device[PLACE_COUNT][160];   /* what each device was ("" if absent when measured) */
    double mem_limit[PLACE_COUNT];   /* bytes usable on each device; 0: no limit */
    double link_bytes_per_s;         /* host <-> GPU copy speed; 0: no link (no GPU) */
    double link_latency_s;
    int n;
    plan_layer l[PLAN_MAX_LAYERS];
} plan_profile;

typedef struct {
    int feasible;
    place_device dev[PLAN_MAX_LAYERS];
    double step_s;                   /* predicted step time */
    double mem[PLACE_COUNT];         /* bytes used on each device */
    double moved_bytes[PLAN_MAX_LAYERS];   /* bytes crossing into layer i per step (both directions) */
} plan_result;

/* Price an assignment: fills r (feasible: within the memory limits and every layer on a device
 * that can run it). */
void plan_evaluate(const plan_profile *p, const place_device *dev, plan_result *r);
/* The cheapest feasible assignment: 0, or -1 if none fits (r->feasible 0). */
int plan_solve(const plan_profile *p, plan_result *r);
/* The same by trying all 2^n assignments (n <= 24); for tests. */
int plan_brute_force(const plan_profile *p, plan_result *r);

/* A profile of shapes with nothing measured: names, inputs, sizes of what crosses, and every
 * layer runnable on every device in no time (for checking a hand placement). The pass tier's
 * bytes assume each step brings all its rows new (no key seen before in the pass): the most it
 * moves; plan_set_rows_per_step sets the rows a step brings instead. */
void plan_profile_init(plan_profile *p, const char *model_name, const plan_layer_shape *shapes, int n, int batch);
/* The pass tier's traffic for `rows` new rows a step, for the layers that read rows. */
void plan_set_rows_per_step(plan_profile *p, double rows);
/* Time each layer of shapes forward + backward at `batch` on every device present (median of
 * `reps` timed runs after a warm-up), size its memory, and measure the host <-> GPU link. */
void plan_measure(plan_profile *p, const char *model_name, const plan_layer_shape *shapes, int n, int batch,
                  int moments, int reps);

/* Durable JSON; 0 or -1 with a message naming the file in err. */
int plan_profile_save(const plan_profile *p, const char *path, char *err, size_t errlen);
int plan_profile_load(plan_profile *p, const char *path, char *err, size_t errlen);

/* "cpu", "gpu", "auto" (r = plan_solve) or "LAYER=DEV,..." (others on the CPU): the device of each
 * layer of p. 0, or -1 with a message (unknown layer or device, no such device here). */
int plan_placement_parse(const char *spec, const plan_profile *p, place_device *dev, char *err, size_t errlen);

/* The plan as a table: layer, device, time on each device, bytes moved, memory, predicted step. */
void plan_print(FILE *f, const plan_profile *p, const plan_result *r);

#endif
