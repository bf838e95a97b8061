/*
 * backend_sim.h: a simulated device (CPU kernels over separately tracked memory that every
 * kernel checks), standing in for the GPU in tests on machines without one. See backend_sim.c.
 */
#ifndef CTRBOX_DENSE_BACKEND_SIM_H
#define CTRBOX_DENSE_BACKEND_SIM_H

#include "backend.h"

extern const dense_backend dense_backend_sim;
/* Buffers allocated on it and not yet released (for leak checks in tests). */
size_t dense_backend_sim_buffers(void);

#endif
