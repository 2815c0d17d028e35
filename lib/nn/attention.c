#include "config.h"

#include "nn/attention.h"
#include "tensor/gemm.h"
#include "tensor/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Largest Tq·Tk·HS handled by the fused loops. */
#define FUSED_MAX (256 * 256 * 64)

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

static size_t fused_per_thread(const tfm_attn *a);

/* Per thread: two Tq×Tk blocks, plus for the fused path a transposed K or V
 * (HS × Tk rounded up to 16) and two rows. */
size_t tfm_attn_scratch_floats(const tfm_attn *a)
{
    return (size_t)nthreads() * fused_per_thread(a);
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

static void forward_blas(const tfm_attn *a, float *out, int ldo, float *att,
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

static void backward_blas(const tfm_attn *a, float *dq, int lddq, float *dk, int lddk,
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

/* ---- fused loops ---------------------------------------------------------
 * For the short contexts of small models a BLIS call per (batch, head) and
 * product costs more in call overhead (~3-5 µs) than in arithmetic.  These
 * loops keep their accumulators in registers (GCC vector extensions: AVX-512
 * where the target has it, split into narrower vectors elsewhere):
 *   scores  S[i, j-block] = Σ_d q_i[d]·Kᵀ[d, j-block]   (K transposed once)
 *   outputs y_i[d-block]  = Σ_j P[i,j]·V[j, d-block]
 * and backward likewise, with dV and dK computed key by key (Σ over queries)
 * so that nothing is read-modified-written in memory per term.  Needs
 * HS % 16 == 0; other head sizes take the BLIS path. */

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

static inline v16 vload(const float *p) { return *(const v16u *)p; }
static inline void vstore(float *p, v16 x) { *(v16u *)p = x; }
static inline v16 vbcast(float x) { return (v16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

static size_t pad16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

static size_t fused_per_thread(const tfm_attn *a)
{
    size_t tkp = pad16((size_t)a->Tk);
    return 2 * (size_t)a->Tq * a->Tk + (size_t)a->HS * tkp + 2 * tkp + 16;
}

/* dst[0..n) = Σ_d x[d]·M[d, 0..n) for M with row stride ld (≥ pad16(n),
 * zero-padded): one register per 16 outputs. */
static inline void rowvec_times_mat(float *dst, const float *x, const float *M, size_t ld,
                                    int HS, int n)
{
    for (int j0 = 0; j0 < n; j0 += 64) {
        v16 a0 = vbcast(0), a1 = vbcast(0), a2 = vbcast(0), a3 = vbcast(0);
        int nb = (n - j0 + 15) / 16;
        nb = nb > 4 ? 4 : nb;
        for (int d = 0; d < HS; d++) {
            v16 xd = vbcast(x[d]);
            const float *m = M + (size_t)d * ld + j0;
            a0 += xd * vload(m);
            if (nb > 1) a1 += xd * vload(m + 16);
            if (nb > 2) a2 += xd * vload(m + 32);
            if (nb > 3) a3 += xd * vload(m + 48);
        }
        vstore(dst + j0, a0);
        if (nb > 1) vstore(dst + j0 + 16, a1);
        if (nb > 2) vstore(dst + j0 + 32, a2);
        if (nb > 3) vstore(dst + j0 + 48, a3);
    }
}

/* y[0..HS) = Σ_{j in [j0, j1)} w[j·ws]·R[j, 0..HS) (R row stride ldr). */
static inline void weighted_rows(float *y, const float *w, size_t ws, const float *R,
                                 size_t ldr, int j0, int j1, int HS)
{
    for (int d0 = 0; d0 < HS; d0 += 64) {
        v16 a0 = vbcast(0), a1 = vbcast(0), a2 = vbcast(0), a3 = vbcast(0);
        int nb = (HS - d0) / 16;
        nb = nb > 4 ? 4 : nb;
        for (int j = j0; j < j1; j++) {
            v16 wj = vbcast(w[(size_t)j * ws]);
            const float *r = R + (size_t)j * ldr + d0;
            a0 += wj * vload(r);
            if (nb > 1) a1 += wj * vload(r + 16);
            if (nb > 2) a2 += wj * vload(r + 32);
            if (nb > 3) a3 += wj * vload(r + 48);
        }
        vstore(y + d0, a0);
        if (nb > 1) vstore(y + d0 + 16, a1);
        if (nb > 2) vstore(y + d0 + 32, a2);
        if (nb > 3) vstore(y + d0 + 48, a3);
    }
}

static void forward_fused(const tfm_attn *a, float *out, int ldo, float *att,
                          const float *q, int ldq, const float *k, int ldk,
                          const float *v, int ldv, float *scratch)
{
    int B = a->B, NH = a->NH, Tq = a->Tq, Tk = a->Tk, HS = a->HS;
    float scale = 1.0f / sqrtf((float)HS);
    float dscale = a->dropout > 0.0f ? 1.0f / (1.0f - a->dropout) : 1.0f;
    size_t tt = (size_t)Tq * Tk, tkp = pad16((size_t)Tk), per = fused_per_thread(a);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *Q = q + (size_t)b * Tq * ldq + (size_t)h * HS;
        const float *K = k + (size_t)b * Tk * ldk + (size_t)h * HS;
        const float *V = v + (size_t)b * Tk * ldv + (size_t)h * HS;
        float *P = att + (size_t)bh * tt;
        float *Kt = scratch + (size_t)thread_id() * per;
        float *srow = Kt + (size_t)HS * tkp, *qs = srow + tkp;
        for (int d = 0; d < HS; d++) {
            float *kt = Kt + (size_t)d * tkp;
            for (int j = 0; j < Tk; j++)
                kt[j] = K[(size_t)j * ldk + d];
            for (size_t j = Tk; j < tkp; j++)
                kt[j] = 0.0f;
        }
        for (int i = 0; i < Tq; i++) {
            float *row = P + (size_t)i * Tk;
            int len = row_len(a, b, i);
            const float *qi = Q + (size_t)i * ldq;
            for (int d = 0; d < HS; d++)
                qs[d] = qi[d] * scale;
            rowvec_times_mat(srow, qs, Kt, tkp, HS, len);
            memcpy(row, srow, (size_t)len * sizeof *row);
            softmax_row(row, len);
            memset(row + len, 0, (size_t)(Tk - len) * sizeof *row);
            const float *pr = row;
            if (a->dropout > 0.0f) {
                size_t base = (size_t)bh * tt + (size_t)i * Tk;
                for (int j = 0; j < len; j++)
                    srow[j] = tfm_dropout_keep(a->seed, base + j, a->dropout) ? row[j] * dscale : 0.0f;
                pr = srow;
            }
            float *y = out + ((size_t)b * Tq + i) * ldo + (size_t)h * HS;
            weighted_rows(y, pr, 1, V, ldv, 0, len, HS);
        }
    }
}

static void backward_fused(const tfm_attn *a, float *dq, int lddq, float *dk, int lddk,
                           float *dv, int lddv, const float *dout, int lddo,
                           const float *att, const float *q, int ldq, const float *k,
                           int ldk, const float *v, int ldv, float *scratch)
{
    int B = a->B, NH = a->NH, Tq = a->Tq, Tk = a->Tk, HS = a->HS;
    float scale = 1.0f / sqrtf((float)HS);
    float dscale = a->dropout > 0.0f ? 1.0f / (1.0f - a->dropout) : 1.0f;
    size_t tt = (size_t)Tq * Tk, tkp = pad16((size_t)Tk), per = fused_per_thread(a);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *Q = q + (size_t)b * Tq * ldq + (size_t)h * HS;
        const float *K = k + (size_t)b * Tk * ldk + (size_t)h * HS;
        const float *V = v + (size_t)b * Tk * ldv + (size_t)h * HS;
        const float *dY = dout + (size_t)b * Tq * lddo + (size_t)h * HS;
        const float *P = att + (size_t)bh * tt;
        float *dQ = dq + (size_t)b * Tq * lddq + (size_t)h * HS;
        float *dK = dk + (size_t)b * Tk * lddk + (size_t)h * HS;
        float *dV = dv + (size_t)b * Tk * lddv + (size_t)h * HS;
        float *dS = scratch + (size_t)thread_id() * per;   /* [Tq, Tk] */
        float *Pd = dS + tt;                                 /* [Tq, Tk] */
        float *Vt = Pd + tt, *dp = Vt + (size_t)HS * tkp;
        for (int d = 0; d < HS; d++) {
            float *vt = Vt + (size_t)d * tkp;
            for (int j = 0; j < Tk; j++)
                vt[j] = V[(size_t)j * ldv + d];
            for (size_t j = Tk; j < tkp; j++)
                vt[j] = 0.0f;
        }
        /* per query: dP' = dY·Vᵀ, dropout, softmax backward -> dS row; dQ row */
        for (int i = 0; i < Tq; i++) {
            const float *p = P + (size_t)i * Tk;
            float *ds = dS + (size_t)i * Tk, *pd = Pd + (size_t)i * Tk;
            int len = row_len(a, b, i);
            rowvec_times_mat(dp, dY + (size_t)i * lddo, Vt, tkp, HS, len);
            if (a->dropout > 0.0f) {
                size_t base = (size_t)bh * tt + (size_t)i * Tk;
                for (int j = 0; j < len; j++) {
                    float keep = tfm_dropout_keep(a->seed, base + j, a->dropout) ? dscale : 0.0f;
                    pd[j] = p[j] * keep;
                    dp[j] *= keep;
                }
            } else {
                memcpy(pd, p, (size_t)len * sizeof *pd);
            }
            memset(pd + len, 0, (size_t)(Tk - len) * sizeof *pd);
            float s = 0.0f;
#pragma omp simd reduction(+:s)
            for (int j = 0; j < len; j++)
                s += p[j] * dp[j];
#pragma omp simd
            for (int j = 0; j < len; j++)
                ds[j] = p[j] * (dp[j] - s) * scale;
            memset(ds + len, 0, (size_t)(Tk - len) * sizeof *ds);
            weighted_rows(dQ + (size_t)i * lddq, ds, 1, K, ldk, 0, len, HS);
        }
        /* per key: dV_j = Σ_i P'[i,j]·dY_i, dK_j = Σ_i dS[i,j]·Q_i; entries a
         * query cannot see are 0, and under the causal mask the queries
         * before key j are skipped outright. */
        for (int j = 0; j < Tk; j++) {
            int i0 = 0;
            if (a->mask == TFM_MASK_CAUSAL)
                i0 = j - (Tk - Tq) > 0 ? j - (Tk - Tq) : 0;
            i0 = i0 < Tq ? i0 : Tq;
            weighted_rows(dV + (size_t)j * lddv, Pd + j, (size_t)Tk, dY, lddo, i0, Tq, HS);
            weighted_rows(dK + (size_t)j * lddk, dS + j, (size_t)Tk, Q, ldq, i0, Tq, HS);
        }
    }
}

/* The fused loops win while a head's products are small; past that BLIS's
 * packed kernels take over (measured crossover: see gpt_bench). */
static int use_fused(const tfm_attn *a)
{
    if (a->HS % 16)
        return 0;
    /* TFM_ATTN=blas|fused forces a path, for tests and measurements */
    const char *env = getenv("TFM_ATTN");
    if (env && !strcmp(env, "blas"))
        return 0;
    if (env && !strcmp(env, "fused"))
        return 1;
    return (size_t)a->Tq * a->Tk * a->HS <= (size_t)FUSED_MAX;
}

void tfm_attn_forward(const tfm_attn *a, float *out, int ldo, float *att,
                      const float *q, int ldq, const float *k, int ldk,
                      const float *v, int ldv, float *scratch)
{
    if (use_fused(a))
        forward_fused(a, out, ldo, att, q, ldq, k, ldk, v, ldv, scratch);
    else
        forward_blas(a, out, ldo, att, q, ldq, k, ldk, v, ldv, scratch);
}

void tfm_attn_backward(const tfm_attn *a, float *dq, int lddq, float *dk, int lddk,
                       float *dv, int lddv, const float *dout, int lddo,
                       const float *att, const float *q, int ldq, const float *k,
                       int ldk, const float *v, int ldv, float *scratch)
{
    if (use_fused(a))
        backward_fused(a, dq, lddq, dk, lddk, dv, lddv, dout, lddo, att, q, ldq, k, ldk, v,
                       ldv, scratch);
    else
        backward_blas(a, dq, lddq, dk, lddk, dv, lddv, dout, lddo, att, q, ldq, k, ldk, v, ldv,
                      scratch);
}
