/*
 * quant.h: rows for serving: float32 values encoded as fp32, fp16 (IEEE half), bf16 (rounded to
 * nearest even) or int8 with one f32 scale per row (the row's largest magnitude / 127, stored
 * first). Used by the serving bundle and `ctrbox-table convert`.
 */
#ifndef CTRBOX_EMBEDDING_QUANT_H
#define CTRBOX_EMBEDDING_QUANT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { QUANT_FP32 = 1, QUANT_FP16, QUANT_BF16, QUANT_INT8 } quant_type;

/* The type named "fp32", "fp16", "bf16" or "int8", or 0. */
int quant_from_name(const char *name);
const char *quant_name(quant_type q);
/* Bytes of one encoded row of V values (int8: the scale included). */
size_t quant_row_bytes(quant_type q, int V);
/* Encode V values into out (quant_row_bytes); returns the bytes written. */
size_t quant_encode(quant_type q, const float *v, int V, uint8_t *out);
void quant_decode(quant_type q, const uint8_t *in, int V, float *v);

#endif
