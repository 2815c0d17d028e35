/* Model files with bfloat16 or 8-bit weights (model/file.h writes and
 * reads them through this).
 *
 * A file's __metadata__ "weights" says how its matrices are stored
 * (absent: every tensor F32):
 *   "bf16": every 2-D tensor BF16, in tfm's layout and shape; vectors F32.
 *   "q8_0": llama.cpp's Q8_0 (tensor/q8.h) for the block matrices (the
 *     attention's, cross-attention's and feed-forward's, "h.N.*" and
 *     "enc.h.N.*") and the token embedding / LM head ("wte.weight",
 *     "lm_head.weight"), each as an I8 tensor of torch's Linear layout
 *     [out, in] -- the block matrices, [in, out] in tfm, transposed;
 *     wte and lm_head, [V, C], as they are -- so that the blocks of 32 run
 *     along the rows, plus an F16 tensor of the block scales named
 *     "<name>.q8_scale", [out, in / 32]; weight = scale·value.  A matrix
 *     whose input width is not a multiple of 32, and every other tensor,
 *     stays F32.  Values are -127..127 and scales finite and >= 0:
 *     anything else is refused as a corrupt file.
 * The checksum (model/file.h) covers the tensors as stored.
 *
 * Reading widens the file's view (io/safetensors.h tfm_safetensors_
 * replace): F16 and BF16 tensors (a tfm file's or a HuggingFace
 * checkpoint's) become F32, 8-bit matrices become F32 in tfm's layout,
 * so that every program reads such files as float32 ones (the 8-bit
 * blocks' scales stay F16, as tensor/q8.h multiplies them; F32 scales
 * are rounded to F16); inference
 * (tfm_lm_open) then also points the decode steps at the stored bfloat16
 * or 8-bit matrices (model/decode.h), which they multiply directly.
 * Decoding alone (tfm_lm_open_flags's TFM_LM_STORED) needs no float32
 * copy of those: they stay as stored, tfm_quant_widen_keep. */
#ifndef TFM_MODEL_QUANT_H
#define TFM_MODEL_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "io/safetensors.h"
#include "model/decode.h"

/* tfm_weight_dtype (tensor/matrix.h): "f32", "bf16", "q8_0" */
const char *tfm_weight_dtype_name(tfm_weight_dtype dt);
int tfm_weight_dtype_parse(const char *s, tfm_weight_dtype *dt);

/* A tensor as written: data owned when owned is 1. */
typedef struct tfm_enc_tensor {
    char name[80];
    tfm_st_dtype dtype;
    int ndim;
    size_t shape[2];
    const void *data;
    size_t nbytes;
    int owned;
} tfm_enc_tensor;

/* The tensors (one or two) that store F32 tensor name of shape [d0] or
 * [d0, d1] (ndim) as dt; data is borrowed when stored as it is.  Returns
 * their count, or -1 (nothing held) for a matrix q8_0 would store 8-bit
 * that holds a NaN or infinity: kept float32 it would go unnoticed. */
int tfm_quant_encode(const char *name, const float *data, int ndim, const size_t *shape,
                     tfm_weight_dtype dt, tfm_enc_tensor out[2], tfm_err *err);

/* The stored bfloat16 and 8-bit matrices of a widened file. */
typedef struct tfm_quant_view {
    const char *name;     /* the tensor's (st's) */
    tfm_matrix m;         /* m.f32: its widened data (what weights bind);
                             stored only: the stored data's address, a key
                             that weights bind and tfm_quant_attach
                             replaces by NULL, never read as float;
                             m.dtype, .data, .scale: the stored matrix
                             (TFM_WEIGHTS_BF16 or TFM_WEIGHTS_Q8_0) */
    int stored_only;      /* 1: not widened (st still has it as stored) */
    size_t shape[2];      /* its shape in tfm's layout */
} tfm_quant_view;

typedef struct tfm_quant_views {
    tfm_quant_view *v;
    int n;
} tfm_quant_views;

/* Widens st (opened and its checksum checked) as above; views (NULL: not
 * wanted) gets the stored matrices.  Errors name the file and tensor. */
int tfm_quant_widen(tfm_safetensors *st, tfm_quant_views *views, tfm_err *err);
/* The same, but (keep 1) the 8-bit and bfloat16 matrices that decode
 * steps read stored -- a decoder's block matrices (not an encoder's or the
 * cross-attention's), wte and lm_head -- are checked and not widened:
 * their views are stored_only, st keeps them as stored, and weights bind
 * them through the view's key (tfm_quant_find). */
int tfm_quant_widen_keep(tfm_safetensors *st, tfm_quant_views *views, int keep, tfm_err *err);
/* The view of st's tensor named name (st's own name), or NULL. */
const tfm_quant_view *tfm_quant_find(const tfm_quant_views *views, const char *name);
/* Makes w's matrices that the decode steps stream (model/decode.h), and
 * an encoder-decoder's encoder blocks' (model/forward.h multiplies 8-bit
 * ones), of the stored dtype and data where w binds a stored one (a tensor an
 * adapter replaced is not bound, so stays float32); the float32 values
 * bound to stored-only views become NULL. */
void tfm_quant_attach(const tfm_quant_views *views, tfm_weights *w);
void tfm_quant_views_free(tfm_quant_views *views);

#endif
