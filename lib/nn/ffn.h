/* The feed-forward sublayer's kinds and the elementwise stage between its
 * projections, forward and backward.
 *
 *   plain   y = act(x·W_fc + b)·W_proj + b          (GPT-2, BERT)
 *   geglu   y = (gelu_tanh(x·W_0 + b_0) ⊙ (x·W_1 + b_1))·W_proj + b
 *                                                    (T5 v1.1 "gated-gelu")
 *   swiglu  y = (silu(x·W_0 + b_0) ⊙ (x·W_1 + b_1))·W_proj + b
 *                                                    (LLaMA, PaLM)
 * silu(z) = z·σ(z).  W_0 is the gate (T5's wi_0), W_1 the linear input
 * (wi_1).  The products are the caller's (each inference path has its own
 * matrix kernels); this header holds what lies between them.
 *
 * Arrays of n floats, caller-owned; the loops run on OpenMP threads and do
 * not depend on their count. */
#ifndef TFM_NN_FFN_H
#define TFM_NN_FFN_H

#include <stddef.h>

typedef enum tfm_ffn_kind {
    TFM_FFN_PLAIN,  /* one input projection and an activation */
    TFM_FFN_GEGLU,  /* gated, GELU (tanh) on the gate */
    TFM_FFN_SWIGLU, /* gated, SiLU on the gate */
} tfm_ffn_kind;

/* 1 for the gated kinds (two input projections). */
static inline int tfm_ffn_gated(tfm_ffn_kind k)
{
    return k != TFM_FFN_PLAIN;
}

/* out = act(gate) ⊙ lin for a gated kind; out may alias gate (not lin). */
void tfm_glu_forward(tfm_ffn_kind kind, float *out, const float *gate, const float *lin,
                     size_t n);
/* dlin = dout ⊙ act(gate), dgate = dout ⊙ lin ⊙ act'(gate) (both written);
 * dgate may alias dout, dlin aliases neither. */
void tfm_glu_backward(tfm_ffn_kind kind, float *dgate, float *dlin, const float *dout,
                      const float *gate, const float *lin, size_t n);

/* "plain", "geglu", "swiglu" (the config's words). */
const char *tfm_ffn_name(tfm_ffn_kind kind);

#endif
