#include "config.h"

#include "nn/attention.h"
#include "base/err.h"
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
            if (len > 0)
                tfm_softmax_inplace(row, len);
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
 * product costs more in call overhead (~3-5 µs) than in arithmetic.  Here
 * every product of a head goes through one register-blocked kernel (GCC
 * vector extensions: AVX-512 where the target has it, split into narrower
 * vectors elsewhere) over blocks of QB query rows, or QB keys for dK and dV,
 * and only over the keys the block can see: under the causal mask the
 * masked triangle costs nothing but the tail of a block.  K (forward) and V
 * (backward) are transposed once per head so that scores come out as rows.
 * Needs HS % 16 == 0; other head sizes take the BLIS path. */

typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4)));

static inline v16 vload(const float *p) { return *(const v16u *)p; }
static inline void vstore(float *p, v16 x) { *(v16u *)p = x; }
static inline v16 vbcast(float x) { return (v16){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; }

enum { QB = 8 }; /* rows per block */

static size_t pad16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* dS and P' (forward: scores and dropped probabilities of a block), the
 * transposed K or V, and a block of score rows. */
static size_t fused_head(const tfm_attn *a)
{
    size_t tt2 = 2 * (size_t)a->Tq * a->Tk, blk = (size_t)QB * a->Tk;
    return tt2 > blk ? tt2 : blk;
}

static size_t fused_per_thread(const tfm_attn *a)
{
    size_t tkp = pad16((size_t)a->Tk);
    return fused_head(a) + (size_t)a->HS * tkp + (size_t)QB * tkp + 16;
}

/* C[r, 0:16·NB) = alpha · Σ_{k<K} A[r·rsa + k·csa] · B[k·ldb + (0:16·NB)]
 * for r < MR: MR·NB accumulators stay in registers, each B vector loaded
 * once per k serves MR rows.  Called with constant MR and NB only. */
static inline __attribute__((always_inline)) void kern(int MR, int NB, int K, float alpha,
                                                       const float *A, size_t rsa, size_t csa,
                                                       const float *B, size_t ldb, float *C,
                                                       size_t ldc)
{
    v16 acc[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int nb = 0; nb < NB; nb++)
            acc[r][nb] = vbcast(0.0f);
    for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb, *ak = A + (size_t)k * csa;
        v16 bv[4];
#pragma GCC unroll 4
        for (int nb = 0; nb < NB; nb++)
            bv[nb] = vload(b + 16 * nb);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            v16 x = vbcast(ak[(size_t)r * rsa]);
#pragma GCC unroll 4
            for (int nb = 0; nb < NB; nb++)
                acc[r][nb] += x * bv[nb];
        }
    }
    v16 al = vbcast(alpha);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int nb = 0; nb < NB; nb++)
            vstore(C + (size_t)r * ldc + 16 * nb, acc[r][nb] * al);
}

/* C[M, N] = alpha · A·B, A[i, k] = A[i·rsa + k·csa], B row-major (ldb),
 * N a multiple of 16.  K = 0 writes zeros. */
static void small_gemm(int M, int N, int K, float alpha, const float *A, size_t rsa,
                       size_t csa, const float *B, size_t ldb, float *C, size_t ldc)
{
    for (int j0 = 0; j0 < N; j0 += 64) {
        int nb = (N - j0) / 16 < 4 ? (N - j0) / 16 : 4;
        /* 16 accumulators at most: 8 rows of two vectors, 4 of four */
        int mr = nb <= 2 ? 8 : 4;
        for (int i0 = 0; i0 < M; i0 += mr) {
            int m = M - i0 < mr ? M - i0 : mr;
            const float *a = A + (size_t)i0 * rsa;
            const float *b = B + j0;
            float *c = C + (size_t)i0 * ldc + j0;
            switch (m * 8 + nb) {
#define KCASE(MR, NB)                                                         \
    case (MR) * 8 + (NB):                                                     \
        kern(MR, NB, K, alpha, a, rsa, csa, b, ldb, c, ldc);                  \
        break;
                KCASE(1, 1) KCASE(2, 1) KCASE(3, 1) KCASE(4, 1)
                KCASE(5, 1) KCASE(6, 1) KCASE(7, 1) KCASE(8, 1)
                KCASE(1, 2) KCASE(2, 2) KCASE(3, 2) KCASE(4, 2)
                KCASE(5, 2) KCASE(6, 2) KCASE(7, 2) KCASE(8, 2)
                KCASE(1, 3) KCASE(2, 3) KCASE(3, 3) KCASE(4, 3)
                KCASE(1, 4) KCASE(2, 4) KCASE(3, 4) KCASE(4, 4)
#undef KCASE
            default:
                TFM_ASSERT(0);
            }
        }
    }
}

/* Dst[d, 0:ldt) = Src[0:T, d] zero-padded: rows of the transpose. */
static void transpose_head(float *dst, size_t ldt, const float *src, size_t lds, int T, int HS)
{
    for (int d = 0; d < HS; d++) {
        float *t = dst + (size_t)d * ldt;
        for (int j = 0; j < T; j++)
            t[j] = src[(size_t)j * lds + d];
        for (size_t j = (size_t)T; j < ldt; j++)
            t[j] = 0.0f;
    }
}

/* p[0, len) = softmax(s[0, len)), p[len, Tk) = 0, where s is a row of the
 * score block (room up to the next multiple of 16): whole vectors with no
 * remainder loops, which dominate rows this short. */
static void softmax_padded(float *restrict p, float *restrict s, int len, int Tk)
{
    int n = (len + 15) & ~15;
    for (int j = len; j < n; j++)
        s[j] = -INFINITY;
    if (n)
        tfm_softmax_inplace(s, n);
    memcpy(p, s, (size_t)len * sizeof *p);
    memset(p + len, 0, (size_t)(Tk - len) * sizeof *p);
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
        float *Y = out + (size_t)b * Tq * ldo + (size_t)h * HS;
        float *P = att + (size_t)bh * tt;
        float *Pd = scratch + (size_t)thread_id() * per;      /* [QB, Tk] */
        float *Kt = Pd + fused_head(a), *S = Kt + (size_t)HS * tkp; /* [HS, tkp], [QB, tkp] */
        transpose_head(Kt, tkp, K, (size_t)ldk, Tk, HS);
        for (int i0 = 0; i0 < Tq; i0 += QB) {
            int m = Tq - i0 < QB ? Tq - i0 : QB;
            int seen = row_len(a, b, i0 + m - 1); /* row lengths never decrease */
            small_gemm(m, (int)pad16((size_t)seen), HS, scale, Q + (size_t)i0 * ldq,
                       (size_t)ldq, 1, Kt, tkp, S, tkp);
            for (int i = i0; i < i0 + m; i++)
                softmax_padded(P + (size_t)i * Tk, S + (size_t)(i - i0) * tkp,
                               row_len(a, b, i), Tk);
            const float *pr = P + (size_t)i0 * Tk;
            if (a->dropout > 0.0f) {
                for (int i = i0; i < i0 + m; i++) {
                    size_t base = (size_t)bh * tt + (size_t)i * Tk;
                    const float *row = P + (size_t)i * Tk;
                    float *d = Pd + (size_t)(i - i0) * Tk;
                    for (int j = 0; j < seen; j++)
                        d[j] = tfm_dropout_keep(a->seed, base + j, a->dropout) ? row[j] * dscale : 0.0f;
                }
                pr = Pd;
            }
            small_gemm(m, HS, seen, 1.0f, pr, (size_t)Tk, 1, V, (size_t)ldv,
                       Y + (size_t)i0 * ldo, (size_t)ldo);
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
        float *dS = scratch + (size_t)thread_id() * per;      /* [Tq, Tk] */
        float *Pd = dS + tt;                                  /* [Tq, Tk] */
        float *Vt = dS + fused_head(a), *dP = Vt + (size_t)HS * tkp; /* [HS, tkp], [QB, tkp] */
        transpose_head(Vt, tkp, V, (size_t)ldv, Tk, HS);
        /* per block of queries: dP' = dY·Vᵀ, dropout, softmax backward into
         * dS (scaled), then dQ = dS·K */
        for (int i0 = 0; i0 < Tq; i0 += QB) {
            int m = Tq - i0 < QB ? Tq - i0 : QB;
            int seen = row_len(a, b, i0 + m - 1);
            small_gemm(m, (int)pad16((size_t)seen), HS, 1.0f, dY + (size_t)i0 * lddo,
                       (size_t)lddo, 1, Vt, tkp, dP, tkp);
            for (int i = i0; i < i0 + m; i++) {
                const float *p = P + (size_t)i * Tk;
                float *ds = dS + (size_t)i * Tk, *pd = Pd + (size_t)i * Tk;
                float *dp = dP + (size_t)(i - i0) * tkp;
                int len = row_len(a, b, i);
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
            }
            small_gemm(m, HS, seen, 1.0f, dS + (size_t)i0 * Tk, (size_t)Tk, 1, K, (size_t)ldk,
                       dQ + (size_t)i0 * lddq, (size_t)lddq);
        }
        /* per block of keys: dV = P'ᵀ·dY, dK = dSᵀ·Q over the queries that
         * can see the block's first key (the rest of the column is 0) */
        for (int j0 = 0; j0 < Tk; j0 += QB) {
            int m = Tk - j0 < QB ? Tk - j0 : QB;
            int i0 = 0;
            if (a->mask == TFM_MASK_CAUSAL)
                i0 = j0 - (Tk - Tq) > 0 ? j0 - (Tk - Tq) : 0;
            i0 = i0 < Tq ? i0 : Tq;
            small_gemm(m, HS, Tq - i0, 1.0f, Pd + (size_t)i0 * Tk + j0, 1, (size_t)Tk,
                       dY + (size_t)i0 * lddo, (size_t)lddo, dV + (size_t)j0 * lddv,
                       (size_t)lddv);
            small_gemm(m, HS, Tq - i0, 1.0f, dS + (size_t)i0 * Tk + j0, 1, (size_t)Tk,
                       Q + (size_t)i0 * ldq, (size_t)ldq, dK + (size_t)j0 * lddk,
                       (size_t)lddk);
        }
    }
}

/* The fused loops win while a head's products are small; past that BLIS's
 * packed kernels take over (measured crossover: see model_bench). */
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
