/* Multi-head scaled dot-product attention, forward and backward.
 *
 * One function serves self-attention (q, k, v are column slices of one
 * fused projection, e.g. GPT's c_attn output with row stride 3C) and
 * cross-attention (k, v from an encoder's output, Tk != Tq): each operand is
 * a pointer plus a row stride, and head h uses columns [h·HS, (h+1)·HS).
 * Masks: causal (query i sees keys j ≤ i + Tk - Tq: queries are the last Tq
 * positions, so a cache of earlier keys works), none (encoders), combined with
 * optional per-sequence key lengths (padding: keys j ≥ key_len[b] unseen).
 *
 * Per (batch, head): S = Q·Kᵀ/√HS with masked entries excluded (−∞ before the
 * softmax), P = softmax(S), optional dropout on P, Y = P·V.  P is saved for
 * backward; dropout masks are regenerated from (seed, index), not stored.
 * The (batch, head) pairs run on OpenMP threads.  Two implementations give
 * the same results: register-blocked fused loops over the visible triangle
 * (head size a multiple of 16 and Tq·Tk·HS ≤ 256·256·64: about twice as fast
 * as BLIS at T = 64 and T = 256, measured), else one single-threaded BLIS
 * product per head.  TFM_ATTN=blas|fused in the environment forces one.
 * All buffers are caller-owned. */
#ifndef TFM_NN_ATTENTION_H
#define TFM_NN_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

typedef enum tfm_mask_kind {
    TFM_MASK_NONE,
    TFM_MASK_CAUSAL,
} tfm_mask_kind;

typedef struct tfm_attn {
    int B, Tq, Tk, NH, HS;
    tfm_mask_kind mask;
    const int *key_len;  /* [B] valid keys per sequence, or NULL (all) */
    float dropout;       /* on the probabilities; 0 = off */
    uint64_t seed;       /* dropout stream */
} tfm_attn;

/* Floats of scratch the calls below need (for the current OpenMP thread
 * count). */
size_t tfm_attn_scratch_floats(const tfm_attn *a);

/* out[b, i, h·HS + d] (row stride ldo) = attention; att: [B, NH, Tq, Tk]
 * receives P (masked entries 0). */
void tfm_attn_forward(const tfm_attn *a, float *out, int ldo, float *att,
                      const float *q, int ldq, const float *k, int ldk,
                      const float *v, int ldv, float *scratch);

/* Writes (=) dq, dk, dv (same layouts as q, k, v) from dout and the saved
 * P.  For self-attention, dq/dk/dv are slices of one fused gradient. */
void tfm_attn_backward(const tfm_attn *a, float *dq, int lddq, float *dk, int lddk,
                       float *dv, int lddv, const float *dout, int lddo,
                       const float *att, const float *q, int ldq, const float *k,
                       int ldk, const float *v, int ldv, float *scratch);

#endif
