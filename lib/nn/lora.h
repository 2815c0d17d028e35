/* LoRA (Hu et al. 2022): a low-rank update beside a frozen linear layer,
 * forward and backward, and its merge into the weight.
 *
 *   y = x·W + b + s·(drop(x)·Aᵀ)·Bᵀ,   s = alpha / r
 *
 * x [N, I] (rows contiguous), y [N, O] (rows ldy apart: a slice of a fused
 * projection such as c_attn's q), A [r, I] and B [O, r]: PEFT's
 * lora_A.weight and lora_B.weight, so adapter files map one to one.  The
 * dropout on x (PEFT's lora_dropout) is nn's inverted dropout with its own
 * stream; its mask is redrawn from the seed in backward, not stored.
 * u = drop(x)·Aᵀ [N, r] is kept between forward and backward.
 *
 * Scratch: N·I floats when dropout > 0 (forward) and always in backward,
 * plus N·r floats (du) in backward; caller-owned, nothing allocated. */
#ifndef TFM_NN_LORA_H
#define TFM_NN_LORA_H

#include <stddef.h>
#include <stdint.h>

typedef struct tfm_lora_op {
    int N, I, O, r;
    float scale;     /* alpha / r */
    float dropout;   /* on x, before A; 0 outside training */
    uint64_t seed;   /* the dropout's stream */
} tfm_lora_op;

/* u = drop(x)·Aᵀ; y[:, :O] += scale·u·Bᵀ. */
void tfm_lora_forward(const tfm_lora_op *op, float *y, int ldy, float *u, const float *x,
                      const float *A, const float *B, float *scratch);

/* dB += scale·dyᵀ·u; dA += duᵀ·drop(x) with du = scale·dy·B;
 * dx += drop'(du·A) (dx [N, I] contiguous; NULL: not wanted). */
void tfm_lora_backward(const tfm_lora_op *op, float *dx, float *dA, float *dB, const float *dy,
                       int ldy, const float *x, const float *u, const float *A, const float *B,
                       float *scratch, float *du);

/* W += scale·(B·A)ᵀ for W stored [in, out] (tfm's layout; the I×O block
 * whose rows are ldw apart), or with out_in W += scale·B·A for W stored
 * [out, in] (HuggingFace's nn.Linear). */
void tfm_lora_merge(float *W, int ldw, int out_in, const float *A, const float *B, int I, int O,
                    int r, float scale);

#endif
