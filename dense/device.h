/*
 * device.h: the devices this process can run dense layers on. The CPU backend is always there;
 * the CUDA backend is a shared object (libctrbox_cuda.so, built when nvcc is found) opened with
 * dlopen on first use, so the same ctrbox binary runs on machines with no GPU, no driver or no
 * CUDA libraries and says why it found no GPU. With CTRBOX_GPU_SIM=1 the GPU is the simulated
 * device of backend_sim.h (tests of placement on CPU-only machines).
 */
#ifndef CTRBOX_DENSE_DEVICE_H
#define CTRBOX_DENSE_DEVICE_H

#include <stddef.h>

#include "backend.h"

typedef enum { PLACE_CPU = 0, PLACE_GPU = 1, PLACE_COUNT } place_device;

const char *place_device_name(place_device d);   /* "cpu", "gpu" */
int place_device_from_name(const char *name);    /* -1 if unknown */

/* The GPU backend (device 0 or $CTRBOX_GPU), or NULL; why is a one-line reason (not built,
 * library missing, no driver, no device). Loaded once; the result is cached. The library is
 * $CTRBOX_CUDA_LIB, else libctrbox_cuda.so beside the running executable. */
const dense_backend *device_gpu(const char **why);
/* Total memory of the GPU in bytes (0 without one). */
size_t device_gpu_memory(void);
/* The backend of d, or NULL when d is absent. */
const dense_backend *device_backend(place_device d);
/* One line per device found, for the log: "cpu: 2 cores, OpenBLAS" / "gpu0: NVIDIA H200, ..." or
 * "gpu: none (why)". Borrowed, static. */
const char *device_describe(void);
/* Where the CUDA backend is looked for: $CTRBOX_CUDA_LIB, else libctrbox_cuda.so beside the program. */
int device_cuda_lib_path(char *path, size_t n);

#endif
