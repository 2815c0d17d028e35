/* Normalisations of a row, forward and backward: LayerNorm (tensor/ops.h,
 * GPT-2 and BERT) and RMSNorm (T5, LLaMA), behind one call that a block
 * description (nn/block.h) dispatches on.
 *
 *   layernorm  y = (x - mean)·rstd·w + b,   rstd = 1/√(mean((x - mean)²) + eps)
 *   rmsnorm    y = x·rstd·w,                rstd = 1/√(mean(x²) + eps)
 *              (no mean subtracted, no bias: T5's T5LayerNorm)
 *
 * Tensors are float32 row-major [N, C], caller-owned; rows run on OpenMP
 * threads, and parameter gradients are summed per column in row order, so
 * results do not depend on the thread count.  Backward ACCUMULATES (+=)
 * into dinp, dw and db, as tensor/ops.h's layernorm does. */
#ifndef TFM_NN_NORM_H
#define TFM_NN_NORM_H

typedef enum tfm_norm_kind {
    TFM_NORM_LAYER, /* LayerNorm: mean and variance, weight and bias */
    TFM_NORM_RMS,   /* RMSNorm: root mean square, weight only */
} tfm_norm_kind;

/* out[n,:] = inp[n,:]·rstd[n]·w; rstd: [N] saved for backward.  out may
 * alias inp. */
void tfm_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N,
                         int C, float eps);
/* dinp += ..., dw += ... (dw NULL: not wanted, a frozen norm).  inp is the
 * forward's input. */
void tfm_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C);

/* Either kind: mean is written by layernorm only (rmsnorm leaves it), b
 * and db are layernorm's bias (NULL for rmsnorm).  The layernorm kind is
 * exactly tfm_layernorm_forward / _backward. */
void tfm_norm_forward(tfm_norm_kind kind, float *out, float *mean, float *rstd,
                      const float *inp, const float *w, const float *b, int N, int C,
                      float eps);
void tfm_norm_backward(tfm_norm_kind kind, float *dinp, float *dw, float *db,
                       const float *dout, const float *inp, const float *w, const float *mean,
                       const float *rstd, int N, int C);

/* "layernorm", "rmsnorm" (the config's words). */
const char *tfm_norm_name(tfm_norm_kind kind);

#endif
