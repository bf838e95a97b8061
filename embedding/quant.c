/*
 * quant.c: row quantization (see quant.h).
 */
#include "quant.h"

#include <math.h>
#include <string.h>

int quant_from_name(const char *name)
{
    static const char *names[] = { "fp32", "fp16", "bf16", "int8" };
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, names[i])) return QUANT_FP32 + i;
    return 0;
}

const char *quant_name(quant_type q)
{
    return q == QUANT_FP32 ? "fp32" : q == QUANT_FP16 ? "fp16" : q == QUANT_BF16 ? "bf16" : "int8";
}

size_t quant_row_bytes(quant_type q, int V)
{
    return q == QUANT_FP32 ? 4 * (size_t)V : q == QUANT_INT8 ? 4 + (size_t)V : 2 * (size_t)V;
}

static uint16_t to_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fff + ((u >> 16) & 1);   /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

size_t quant_encode(quant_type q, const float *v, int V, uint8_t *out)
{
    if (q == QUANT_FP32) {
        memcpy(out, v, (size_t)V * 4);
    } else if (q == QUANT_INT8) {
        float scale = 0;
        for (int i = 0; i < V; i++) scale = fabsf(v[i]) > scale ? fabsf(v[i]) : scale;
        scale = scale > 0 ? scale / 127.0f : 1.0f;
        memcpy(out, &scale, 4);
        for (int i = 0; i < V; i++) {
            float r = roundf(v[i] / scale);
            out[4 + i] = (uint8_t)(int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
        }
    } else {
        for (int i = 0; i < V; i++) {
            uint16_t h;
            if (q == QUANT_FP16) {
                _Float16 f = (_Float16)v[i];
                memcpy(&h, &f, 2);
            } else {
                h = to_bf16(v[i]);
            }
            memcpy(out + 2 * i, &h, 2);
        }
    }
    return quant_row_bytes(q, V);
}

void quant_decode(quant_type q, const uint8_t *in, int V, float *v)
{
    if (q == QUANT_FP32) {
        memcpy(v, in, (size_t)V * 4);
    } else if (q == QUANT_INT8) {
        float scale;
        memcpy(&scale, in, 4);
        for (int i = 0; i < V; i++) v[i] = (float)(int8_t)in[4 + i] * scale;
    } else {
        for (int i = 0; i < V; i++) {
            uint16_t h;
            memcpy(&h, in + 2 * i, 2);
            if (q == QUANT_FP16) {
                _Float16 f;
                memcpy(&f, &h, 2);
                v[i] = (float)f;
            } else {
                v[i] = from_bf16(h);
            }
        }
    }
}
