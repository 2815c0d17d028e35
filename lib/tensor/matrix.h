/* A weight matrix and its dtype: the float32 values that whole-sequence
 * products read, beside the stored form (bfloat16, or 8-bit blocks as
 * tensor/q8.h defines them) that decode steps stream.  Plain pointers,
 * never owned: model/ binds them to a model file's tensors. */
#ifndef TFM_TENSOR_MATRIX_H
#define TFM_TENSOR_MATRIX_H

#include <stdint.h>

/* How a matrix is stored (model/quant.h names them for files). */
typedef enum tfm_weight_dtype {
    TFM_WEIGHTS_F32,
    TFM_WEIGHTS_BF16,
    TFM_WEIGHTS_Q8_0,
} tfm_weight_dtype;

/* A weight matrix: its float32 values, which the whole-sequence products
 * read (model/forward.h, which may multiply an 8-bit one in 8 bits
 * instead; prompts past the gemv rows), and the form decode steps stream,
 * of a dtype:
 *   TFM_WEIGHTS_F32   f32 itself (data NULL);
 *   TFM_WEIGHTS_BF16  data: uint16_t bfloat16 in f32's layout;
 *   TFM_WEIGHTS_Q8_0  data: int8_t [out, in] (tensor/q8.h: a block
 *                     matrix transposed, wte and lm_head [V, C] as they
 *                     are), scale: its half-precision block scales
 *                     [out, in / 32].
 * f32 is NULL for a matrix stored only (model/decode.h), and for one the
 * configuration has not (a plain feed-forward's fc1_w); zeroed: none. */
typedef struct tfm_matrix {
    const float *f32;
    tfm_weight_dtype dtype;
    const void *data;
    const uint16_t *scale;
} tfm_matrix;

#endif
