/* Gated feed-forward elementwise stage; see ffn.h. */
#include "config.h"

#include "nn/ffn.h"

#include "tensor/ops.h"

#define PAR_MIN 32768

void tfm_glu_forward(tfm_ffn_kind kind, float *out, const float *gate, const float *lin,
                     size_t n)
{
    if (kind == TFM_FFN_GEGLU) {
        /* GELU as the plain kind computes it (tensor/ops.h) */
        tfm_act_forward(TFM_ACT_KIND_GELU_TANH, out, gate, n);
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
        for (size_t i = 0; i < n; i++)
            out[i] *= lin[i];
        return;
    }
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float z = gate[i];
        out[i] = z / (1.0f + tfm_expf_inline(-z)) * lin[i];
    }
}

void tfm_glu_backward(tfm_ffn_kind kind, float *dgate, float *dlin, const float *dout,
                      const float *gate, const float *lin, size_t n)
{
    if (kind == TFM_FFN_GEGLU) {
        tfm_act_forward(TFM_ACT_KIND_GELU_TANH, dlin, gate, n);
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
        for (size_t i = 0; i < n; i++) {
            float d = dout[i];
            dlin[i] *= d;
            dgate[i] = d * lin[i];
        }
        tfm_act_backward(TFM_ACT_KIND_GELU_TANH, dgate, dgate, gate, n);
        return;
    }
    /* silu'(z) = σ(z)·(1 + z·(1 - σ(z))) */
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        float z = gate[i], d = dout[i];
        float s = 1.0f / (1.0f + tfm_expf_inline(-z));
        dlin[i] = d * z * s;
        dgate[i] = d * lin[i] * s * (1.0f + z * (1.0f - s));
    }
}

const char *tfm_ffn_name(tfm_ffn_kind kind)
{
    return kind == TFM_FFN_GEGLU ? "geglu" : kind == TFM_FFN_SWIGLU ? "swiglu" : "plain";
}
