#include "config.h"

#include "nn/attention.h"
#include "tensor/gemm.h"
#include "tensor/ops.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static int nthreads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

size_t tfm_attn_scratch_floats(const tfm_attn *a)
{
    return (size_t)nthreads() * 2 * a->Tq * a->Tk;
}

/* Number of keys query i may see. */
static int row_len(const tfm_attn *a, int b, int i)
{
    int len = a->Tk;
    /* Causal, aligned at the end: query i is position Tk - Tq + i, so a
     * query block appended to a cache of earlier keys works unchanged. */
    if (a->mask == TFM_MASK_CAUSAL) {
        int last = i + 1 + (a->Tk - a->Tq);
        len = last < len ? last : len;
    }
    if (a->key_len && a->key_len[b] < len)
        len = a->key_len[b] < 0 ? 0 : a->key_len[b];
    return len;
}

/* In place over x[0, len); called inside the (batch, head) loop, so no
 * parallel region of its own. */
static void softmax_row(float *x, int len)
{
    if (len <= 0)
        return;
    float mx = x[0];
    for (int j = 1; j < len; j++)
        mx = x[j] > mx ? x[j] : mx;
    float s = 0.0f;
#pragma omp simd reduction(+:s)
    for (int j = 0; j < len; j++) {
        float e = tfm_expf_inline(x[j] - mx);
        x[j] = e;
        s += e;
    }
    float inv = 1.0f / s;
#pragma omp simd
    for (int j = 0; j < len; j++)
        x[j] *= inv;
}

/* P with dropout applied (mask regenerated from the element index). */
static void dropped(const tfm_attn *a, float *dst, const float *P, size_t base)
{
    size_t n = (size_t)a->Tq * a->Tk;
    float scale = 1.0f / (1.0f - a->dropout);
    for (size_t i = 0; i < n; i++)
        dst[i] = tfm_dropout_keep(a->seed, base + i, a->dropout) ? P[i] * scale : 0.0f;
}

void tfm_attn_forward(const tfm_attn *a, float *out, int ldo, float *att,
                      const float *q, int ldq, const float *k, int ldk,
                      const float *v, int ldv, float *scratch)
{
    int B = a->B, NH = a->NH, Tq = a->Tq, Tk = a->Tk, HS = a->HS;
    float scale = 1.0f / sqrtf((float)HS);
    size_t tt = (size_t)Tq * Tk;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *Q = q + (size_t)b * Tq * ldq + (size_t)h * HS;
        const float *K = k + (size_t)b * Tk * ldk + (size_t)h * HS;
        const float *V = v + (size_t)b * Tk * ldv + (size_t)h * HS;
        float *P = att + (size_t)bh * tt;
        tfm_gemm1(0, 1, Tq, Tk, HS, scale, Q, ldq, K, ldk, 0.0f, P, Tk);
        for (int i = 0; i < Tq; i++) {
            float *row = P + (size_t)i * Tk;
            int len = row_len(a, b, i);
            softmax_row(row, len);
            memset(row + len, 0, (size_t)(Tk - len) * sizeof *row);
        }
        const float *Pd = P;
        if (a->dropout > 0.0f) {
            float *s = scratch + (size_t)thread_id() * 2 * tt;
            dropped(a, s, P, (size_t)bh * tt);
            Pd = s;
        }
        float *Y = out + (size_t)b * Tq * ldo + (size_t)h * HS;
        tfm_gemm1(0, 0, Tq, HS, Tk, 1.0f, Pd, Tk, V, ldv, 0.0f, Y, ldo);
    }
}

void tfm_attn_backward(const tfm_attn *a, float *dq, int lddq, float *dk, int lddk,
                       float *dv, int lddv, const float *dout, int lddo,
                       const float *att, const float *q, int ldq, const float *k,
                       int ldk, const float *v, int ldv, float *scratch)
{
    int B = a->B, NH = a->NH, Tq = a->Tq, Tk = a->Tk, HS = a->HS;
    float scale = 1.0f / sqrtf((float)HS);
    size_t tt = (size_t)Tq * Tk;
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *Q = q + (size_t)b * Tq * ldq + (size_t)h * HS;
        const float *K = k + (size_t)b * Tk * ldk + (size_t)h * HS;
        const float *V = v + (size_t)b * Tk * ldv + (size_t)h * HS;
        const float *dY = dout + (size_t)b * Tq * lddo + (size_t)h * HS;
        float *dQ = dq + (size_t)b * Tq * lddq + (size_t)h * HS;
        float *dK = dk + (size_t)b * Tk * lddk + (size_t)h * HS;
        float *dV = dv + (size_t)b * Tk * lddv + (size_t)h * HS;
        const float *P = att + (size_t)bh * tt;
        float *dP = scratch + (size_t)thread_id() * 2 * tt;
        float *Pd = dP + tt;
        const float *Pv = P;
        if (a->dropout > 0.0f) {
            dropped(a, Pd, P, (size_t)bh * tt);
            Pv = Pd;
        }
        /* dP' = dY·Vᵀ; dV = P'ᵀ·dY (P' = P after dropout) */
        tfm_gemm1(0, 1, Tq, Tk, HS, 1.0f, dY, lddo, V, ldv, 0.0f, dP, Tk);
        tfm_gemm1(1, 0, Tk, HS, Tq, 1.0f, Pv, Tk, dY, lddo, 0.0f, dV, lddv);
        if (a->dropout > 0.0f) {
            float ds = 1.0f / (1.0f - a->dropout);
            size_t base = (size_t)bh * tt;
            for (size_t i = 0; i < tt; i++)
                dP[i] = tfm_dropout_keep(a->seed, base + i, a->dropout) ? dP[i] * ds : 0.0f;
        }
        /* softmax backward: dS = P ⊙ (dP - Σ_j P·dP); masked entries have
         * P = 0 and so get no gradient. */
        for (int i = 0; i < Tq; i++) {
            const float *p = P + (size_t)i * Tk;
            float *d = dP + (size_t)i * Tk;
            int len = row_len(a, b, i);
            float s = 0.0f;
#pragma omp simd reduction(+:s)
            for (int j = 0; j < len; j++)
                s += p[j] * d[j];
#pragma omp simd
            for (int j = 0; j < len; j++)
                d[j] = p[j] * (d[j] - s);
            memset(d + len, 0, (size_t)(Tk - len) * sizeof *d);
        }
        /* dQ = dS·K·scale; dK = dSᵀ·Q·scale */
        tfm_gemm1(0, 0, Tq, HS, Tk, scale, dP, Tk, K, ldk, 0.0f, dQ, lddq);
        tfm_gemm1(1, 0, Tk, HS, Tq, scale, dP, Tk, Q, ldq, 0.0f, dK, lddk);
    }
}
