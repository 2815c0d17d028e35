/* IEEE half precision and bfloat16 to and from float32 (round to nearest
 * even; NaN stays NaN, overflow becomes infinity): the stored dtypes of
 * model files (io/safetensors.h) and the scales of 8-bit weights
 * (tensor/q8.h). */
#ifndef TFM_BASE_HALF_H
#define TFM_BASE_HALF_H

#include <stdint.h>

float tfm_f16_to_f32(uint16_t h);
uint16_t tfm_f32_to_f16(float f);
float tfm_bf16_to_f32(uint16_t h);
uint16_t tfm_f32_to_bf16(float f);

#endif
