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

/* Threads a workspace is sized for: the most any later region may run
 * (tfm_threads_now lowers OpenMP's default for a while, never above this). */
static int nthreads(void)
{
#ifdef _OPENMP
    int n = omp_get_max_threads(), asked = tfm_blas_threads();
    return n > asked ? n : asked;
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

enum { QB = 8 }; /* rows per block of the fused loops */

/* T5's per-(batch, head) bucket gradients, [B·NH, n_buckets], ahead of the
 * per-thread regions: summed over b in a fixed order after the parallel
 * loop, so dtable does not depend on the schedule or the thread count. */
static size_t t5_floats(const tfm_attn *a)
{
    return a->t5 ? (size_t)a->B * a->NH * a->t5->n_buckets : 0;
}

/* Per thread: two Tq×Tk blocks, plus for the fused path a transposed K or V
 * (HS × Tk rounded up to 16) and two rows; with a position bias, one vector
 * over the relative positions. */
static size_t tiled_per_thread(const tfm_attn *a);

size_t tfm_attn_scratch_floats(const tfm_attn *a)
{
    if (a->impl == TFM_ATTN_TILED)
        return (size_t)nthreads() * tiled_per_thread(a);
    return t5_floats(a) + (size_t)nthreads() * fused_per_thread(a);
}

/* Number of keys query i may see (keys [0, len) before doc_start). */
static int row_len(const tfm_attn *a, int b, int i)
{
    int len = a->Tk;
    /* Causal, aligned at the end: query i is position Tk - Tq + i, so a
     * query block appended to a cache of earlier keys works unchanged. */
    if (a->mask == TFM_MASK_CAUSAL) {
        int last = i + 1 + (a->Tk - a->Tq);
        len = last < len ? last : len;
    } else if (a->mask == TFM_MASK_PREFIX) {
        /* the whole prefix, then causal: still never decreasing in i */
        int last = i + 1 + (a->Tk - a->Tq), p = a->prefix_len[b];
        last = p > last ? p : last;
        len = last < len ? last : len;
    }
    if (a->key_len && a->key_len[b] < len)
        len = a->key_len[b] < 0 ? 0 : a->key_len[b];
    /* a symmetric window also ends after the query */
    if (a->window && a->mask == TFM_MASK_NONE) {
        long last = (long)(a->Tk - a->Tq + i) + a->window;
        len = last < len ? (int)last : len;
    }
    return len;
}

/* First key query i may see (packed documents, a window), at most len. */
static inline int row_lo(const tfm_attn *a, int b, int i, int len)
{
    int lo = 0;
    if (a->doc_start)
        lo = a->doc_start[(size_t)b * a->Tq + i];
    if (a->window) {
        int w = a->Tk - a->Tq + i - a->window + 1;
        lo = w > lo ? w : lo;
    }
    lo = lo > 0 ? lo : 0;
    return lo < len ? lo : len;
}

/* Relative positions rel = j - qpos (key minus query position, qpos = Tk -
 * Tq + i) span [-(Tk-1), Tq-1]: index r = rel + Tk - 1, so row i's biases
 * are the contiguous slice starting at r = Tq - 1 - i, indexed by j. */
static int rel_count(const tfm_attn *a)
{
    return a->Tq + a->Tk - 1;
}

static int has_bias(const tfm_attn *a)
{
    return a->alibi || a->t5;
}

/* br[r - r0] = bias of head h at relative position r - (Tk - 1), for r in
 * [r0, r0 + n). */
static void rel_bias_range(const tfm_attn *a, int h, int r0, int n, float *br)
{
    const tfm_attn_t5 *t5 = a->t5;
    for (int r = r0; r < r0 + n; r++) {
        int rel = r - (a->Tk - 1);
        float x = 0.0f;
        if (a->alibi)
            x += tfm_alibi_bias(a->alibi[h], rel);
        if (t5)
            x += tfm_t5_bias(t5, h, rel);
        br[r - r0] = x;
    }
}

static void rel_bias(const tfm_attn *a, int h, float *br)
{
    rel_bias_range(a, h, 0, rel_count(a), br);
}

/* The cached keys and values of one head are short runs (HS floats) a
 * cache row apart, too far apart for the hardware prefetchers: each is
 * asked for ROW_AHEAD rows ahead. */
enum { ROW_AHEAD = 4 };
static inline void prefetch_floats(const float *p, int n)
{
    for (int i = 0; i < n; i += 16)
        __builtin_prefetch(p + i);
}

void tfm_attn_row(const tfm_attn *a, int h, float *out, const float *q, const float *k,
                  const float *v, size_t ld, int qpos, int n_keys, int prefix, float *s)
{
    const int HS = a->HS;
    const float scale = tfm_attn_scale(a);
    int nk = n_keys; /* keys seen: [lo, nk) */
    if (a->mask != TFM_MASK_NONE) {
        int lim = qpos + 1;
        if (a->mask == TFM_MASK_PREFIX && prefix > lim)
            lim = prefix;
        nk = lim < nk ? lim : nk;
    } else if (a->window && (long)qpos + a->window < nk) {
        nk = qpos + a->window;
    }
    int lo = a->window && qpos - a->window + 1 > 0 ? qpos - a->window + 1 : 0;
    lo = lo < nk ? lo : nk;
    /* the window's keys are the ones the loops below read */
    k += (size_t)lo * ld;
    v += (size_t)lo * ld;
    nk -= lo;
    qpos -= lo;
    for (int j = 0; j < nk; j++) {
        const float *kj = k + (size_t)j * ld;
        if (j + ROW_AHEAD < nk)
            prefetch_floats(kj + (size_t)ROW_AHEAD * ld, HS);
        float d = 0.0f;
#pragma omp simd reduction(+:d)
        for (int i = 0; i < HS; i++)
            d += q[i] * kj[i];
        s[j] = d * scale;
    }
    /* biases on absolute distances: cached keys need nothing redone */
    if (a->alibi) {
        float slope = a->alibi[h];
        for (int j = 0; j < nk; j++)
            s[j] += tfm_alibi_bias(slope, j - qpos);
    }
    if (a->t5)
        for (int j = 0; j < nk; j++)
            s[j] += tfm_t5_bias(a->t5, h, j - qpos);
    /* softmax, normalised as V is summed */
    float mx = -INFINITY;
    for (int j = 0; j < nk; j++)
        mx = s[j] > mx ? s[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+:sum)
    for (int j = 0; j < nk; j++) {
        s[j] = tfm_expf_inline(s[j] - mx);
        sum += s[j];
    }
    for (int i = 0; i < HS; i++)
        out[i] = 0.0f;
    if (nk == 0) /* no key in the window: zeros, as the whole-sequence paths */
        return;
    for (int j = 0; j < nk; j++) {
        const float *vj = v + (size_t)j * ld;
        if (j + ROW_AHEAD < nk)
            prefetch_floats(vj + (size_t)ROW_AHEAD * ld, HS);
        float p = s[j] / sum;
#pragma omp simd
        for (int i = 0; i < HS; i++)
            out[i] += p * vj[i];
    }
}

/* g[r] (per relative position) into the bucket gradients of one (b, h). */
static void t5_scatter(const tfm_attn *a, float *gb, const float *g)
{
    const tfm_attn_t5 *t5 = a->t5;
    memset(gb, 0, (size_t)t5->n_buckets * sizeof *gb);
    for (int r = 0; r < rel_count(a); r++)
        gb[tfm_t5_bucket(r - (a->Tk - 1), t5->bidirectional, t5->n_buckets,
                         t5->max_distance)] += g[r];
}

/* dtable[h, :] += Σ_b gb[b, h, :], b in order. */
static void t5_reduce(const tfm_attn *a, const float *gb)
{
    int nb = a->t5->n_buckets;
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->NH; h++)
            for (int k = 0; k < nb; k++)
                a->t5->dtable[(size_t)h * nb + k] += gb[((size_t)b * a->NH + h) * nb + k];
}

void tfm_alibi_slopes(float *slopes, int n)
{
    int p = 1;
    while (2 * p <= n)
        p *= 2;
    /* 2^(-8k/p) for the power of two p, then the odd k of 2^(-8k/2p) */
    for (int k = 1; k <= p && k <= n; k++)
        slopes[k - 1] = (float)exp2(-8.0 * k / p);
    for (int k = 1; p + (k - 1) / 2 < n; k += 2)
        slopes[p + (k - 1) / 2] = (float)exp2(-8.0 * k / (2 * p));
}

int tfm_t5_bucket(int rel, int bidirectional, int n_buckets, int max_distance)
{
    int base = 0;
    long n;
    if (bidirectional) {
        n_buckets /= 2;
        base = rel > 0 ? n_buckets : 0;
        n = rel < 0 ? -(long)rel : rel;
    } else {
        n = rel < 0 ? -(long)rel : 0;
    }
    int exact = n_buckets / 2;
    if (n < exact)
        return base + (int)n;
    /* in float, as HF's torch code computes it, then truncated */
    float f = logf((float)n / (float)exact) / (float)log((double)max_distance / exact) *
              (float)(n_buckets - exact);
    int large = exact + (int)f;
    return base + (large < n_buckets - 1 ? large : n_buckets - 1);
}

/* P with dropout applied (mask regenerated from the element index). */
static void dropped(const tfm_attn *a, float *dst, const float *P, size_t base)
{
    size_t n = (size_t)a->Tq * a->Tk;
    float scale = 1.0f / (1.0f - a->dropout);
    uint32_t thr = tfm_dropout_threshold(a->dropout);
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        dst[i] = tfm_dropout_hash(a->seed, base + i) >= thr ? P[i] * scale : 0.0f;
}

/* Scratch of the calling thread: its fused_per_thread region. */
static float *thread_scratch(const tfm_attn *a, float *scratch)
{
    return scratch + t5_floats(a) + (size_t)thread_id() * fused_per_thread(a);
}

/* The relative-position vector of a thread's region (after the blocks, the
 * transposed head and the score rows). */
static size_t fused_head(const tfm_attn *a);
static size_t pad16(size_t n);
static float *thread_rel(const tfm_attn *a, float *ts)
{
    size_t tkp = pad16((size_t)a->Tk);
    return ts + fused_head(a) + (size_t)a->HS * tkp + (size_t)QB * tkp + 16;
}

/* Packed documents, the prefix mask and position biases take the ext copy
 * of the loops (see forward_fused_head). */
static int needs_ext(const tfm_attn *a)
{
    return a->doc_start || a->window || has_bias(a) || a->mask == TFM_MASK_PREFIX;
}

/* One (batch, head); ext as in the fused loops below (forward_fused_head). */
static inline __attribute__((always_inline)) void
forward_blas_head(const tfm_attn *a, int ext, int bh, float *out, int ldo, float *att,
                  const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
                  float *scratch)
{
    int NH = a->NH, Tq = a->Tq, Tk = a->Tk, HS = a->HS;
    float scale = tfm_attn_scale(a);
    size_t tt = (size_t)Tq * Tk;
    {
        int b = bh / NH, h = bh % NH, kh = tfm_attn_kv_head(a, h);
        const float *Q = q + (size_t)b * Tq * ldq + (size_t)h * HS;
        const float *K = k + (size_t)b * Tk * ldk + (size_t)kh * HS;
        const float *V = v + (size_t)b * Tk * ldv + (size_t)kh * HS;
        float *P = att + (size_t)bh * tt;
        float *ts = thread_scratch(a, scratch);
        const float *br = NULL;
        if (ext && has_bias(a)) {
            rel_bias(a, h, thread_rel(a, ts));
            br = thread_rel(a, ts);
        }
        tfm_gemm1(0, 1, Tq, Tk, HS, scale, Q, ldq, K, ldk, 0.0f, P, Tk);
        for (int i = 0; i < Tq; i++) {
            float *row = P + (size_t)i * Tk;
            int len = row_len(a, b, i), lo = ext ? row_lo(a, b, i, len) : 0;
            if (ext && br) {
                const float *bi = br + (Tq - 1 - i);
#pragma omp simd
                for (int j = lo; j < len; j++)
                    row[j] += bi[j];
            }
            if (len > lo)
                tfm_softmax_inplace(row + lo, len - lo);
            if (ext)
                memset(row, 0, (size_t)lo * sizeof *row);
            memset(row + len, 0, (size_t)(Tk - len) * sizeof *row);
        }
        const float *Pd = P;
        if (a->dropout > 0.0f) {
            dropped(a, ts, P, (size_t)bh * tt);
            Pd = ts;
        }
        float *Y = out + (size_t)b * Tq * ldo + (size_t)h * HS;
        tfm_gemm1(0, 0, Tq, HS, Tk, 1.0f, Pd, Tk, V, ldv, 0.0f, Y, ldo);
    }
}

static inline __attribute__((always_inline)) void
backward_blas_head(const tfm_attn *a, int ext, int bh, float *dq, int lddq, float *dK,
                   int lddk, float *dV, int lddv, const float *dout, int lddo,
                   const float *att, const float *q, int ldq, const float *k, int ldk,
                   const float *v, int ldv, float *scratch)
{
    int NH = a->NH, Tq = a->Tq, Tk = a->Tk, HS = a->HS;
    float scale = tfm_attn_scale(a);
    size_t tt = (size_t)Tq * Tk;
    {
        int b = bh / NH, h = bh % NH, kh = tfm_attn_kv_head(a, h);
        const float *Q = q + (size_t)b * Tq * ldq + (size_t)h * HS;
        const float *K = k + (size_t)b * Tk * ldk + (size_t)kh * HS;
        const float *V = v + (size_t)b * Tk * ldv + (size_t)kh * HS;
        const float *dY = dout + (size_t)b * Tq * lddo + (size_t)h * HS;
        float *dQ = dq + (size_t)b * Tq * lddq + (size_t)h * HS;
        const float *P = att + (size_t)bh * tt;
        float *ts = thread_scratch(a, scratch);
        float *dP = ts;
        float *Pd = dP + tt;
        /* T5: dS summed per relative position, [Tq + Tk - 1] */
        float *g = NULL;
        if (ext && a->t5) {
            g = thread_rel(a, ts);
            memset(g, 0, (size_t)rel_count(a) * sizeof *g);
        }
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
            uint32_t thr = tfm_dropout_threshold(a->dropout);
#pragma omp simd
            for (size_t i = 0; i < tt; i++)
                dP[i] = tfm_dropout_hash(a->seed, base + i) >= thr ? dP[i] * ds : 0.0f;
        }
        /* softmax backward: dS = P ⊙ (dP - Σ_j P·dP) (w.r.t. the biased
         * score, before the 1/√HS of Q·Kᵀ); masked entries have P = 0 and
         * so get no gradient. */
        for (int i = 0; i < Tq; i++) {
            const float *p = P + (size_t)i * Tk;
            float *d = dP + (size_t)i * Tk;
            int len = row_len(a, b, i), lo = ext ? row_lo(a, b, i, len) : 0;
            float s = 0.0f;
#pragma omp simd reduction(+:s)
            for (int j = lo; j < len; j++)
                s += p[j] * d[j];
#pragma omp simd
            for (int j = lo; j < len; j++)
                d[j] = p[j] * (d[j] - s);
            if (ext && g) {
                float *gi = g + (Tq - 1 - i);
#pragma omp simd
                for (int j = lo; j < len; j++)
                    gi[j] += d[j];
            }
            if (ext)
                memset(d, 0, (size_t)lo * sizeof *d);
            memset(d + len, 0, (size_t)(Tk - len) * sizeof *d);
        }
        if (ext && g)
            t5_scatter(a, scratch + (size_t)bh * a->t5->n_buckets, g);
        /* dQ = dS·K·scale; dK = dSᵀ·Q·scale */
        tfm_gemm1(0, 0, Tq, HS, Tk, scale, dP, Tk, K, ldk, 0.0f, dQ, lddq);
        tfm_gemm1(1, 0, Tk, HS, Tq, scale, dP, Tk, Q, ldq, 0.0f, dK, lddk);
    }
}

static void forward_blas(const tfm_attn *a, float *out, int ldo, float *att,
                         const float *q, int ldq, const float *k, int ldk,
                         const float *v, int ldv, float *scratch)
{
    int n = a->B * a->NH;
    /* heads taken one at a time: one core or the other of a shared
     * machine runs slower for seconds, and a fixed half waits for it */
    if (needs_ext(a)) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int bh = 0; bh < n; bh++)
            forward_blas_head(a, 1, bh, out, ldo, att, q, ldq, k, ldk, v, ldv, scratch);
    } else {
#pragma omp parallel for schedule(dynamic, 1)
        for (int bh = 0; bh < n; bh++)
            forward_blas_head(a, 0, bh, out, ldo, att, q, ldq, k, ldk, v, ldv, scratch);
    }
}

static void backward_units(const tfm_attn *a, int fused, float *dq, int lddq, float *dk,
                           int lddk, float *dv, int lddv, const float *dout, int lddo,
                           const float *att, const float *q, int ldq, const float *k, int ldk,
                           const float *v, int ldv, float *scratch);

static void backward_blas(const tfm_attn *a, float *dq, int lddq, float *dk, int lddk,
                          float *dv, int lddv, const float *dout, int lddo,
                          const float *att, const float *q, int ldq, const float *k,
                          int ldk, const float *v, int ldv, float *scratch)
{
    backward_units(a, 0, dq, lddq, dk, lddk, dv, lddv, dout, lddo, att, q, ldq, k, ldk, v, ldv,
                   scratch);
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

/* The target's own vector: GCC lowers wider generic vectors to pairs of
 * narrower ones and then keeps the accumulator arrays on the stack. */
#ifdef __AVX512F__
#define VW 16
#else
#define VW 8
#endif
typedef float vf __attribute__((vector_size(VW * 4)));
typedef float vfu __attribute__((vector_size(VW * 4), aligned(4)));

static inline vf vload(const float *p) { return *(const vfu *)p; }
static inline void vstore(float *p, vf x) { *(vfu *)p = x; }
static inline vf vbcast(float x) { return x - (vf){0}; }


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

/* Grouped heads: a thread's dK and dV of one query head, [Tk, HS] each,
 * before they are added to the group's. */
static size_t group_floats(const tfm_attn *a)
{
    return tfm_attn_kv_heads(a) < a->NH ? 2 * (size_t)a->Tk * a->HS : 0;
}

static size_t fused_per_thread(const tfm_attn *a)
{
    size_t tkp = pad16((size_t)a->Tk);
    size_t rel = has_bias(a) ? pad16((size_t)rel_count(a)) : 0;
    return fused_head(a) + (size_t)a->HS * tkp + (size_t)QB * tkp + 16 + rel + group_floats(a);
}

/* The calling thread's group_floats, at the end of its region. */
static float *thread_group(const tfm_attn *a, float *scratch)
{
    return thread_scratch(a, scratch) + fused_per_thread(a) - group_floats(a);
}

/* dst[j·ld + d] += src[j·HS + d] for the Tk rows of a head. */
static void add_head(float *dst, int ld, const float *src, int Tk, int HS)
{
    for (int j = 0; j < Tk; j++) {
        float *d = dst + (size_t)j * ld;
        const float *x = src + (size_t)j * HS;
#pragma omp simd
        for (int i = 0; i < HS; i++)
            d[i] += x[i];
    }
}

/* C[r, 0:VW·NB) = alpha · Σ_{k<K} A[r·rsa + k·csa] · B[k·ldb + (0:VW·NB)]
 * for r < MR: MR·NB accumulators stay in registers, each B vector loaded
 * once per k serves MR rows.  Called with constant MR and NB only. */
static inline __attribute__((always_inline)) void kern(int MR, int NB, int K, float alpha,
                                                       const float *A, size_t rsa, size_t csa,
                                                       const float *B, size_t ldb, float *C,
                                                       size_t ldc)
{
    vf acc[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int nb = 0; nb < NB; nb++)
            acc[r][nb] = vbcast(0.0f);
    for (int k = 0; k < K; k++) {
        const float *b = B + (size_t)k * ldb, *ak = A + (size_t)k * csa;
        vf bv[4];
#pragma GCC unroll 4
        for (int nb = 0; nb < NB; nb++)
            bv[nb] = vload(b + VW * nb);
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            vf x = vbcast(ak[(size_t)r * rsa]);
#pragma GCC unroll 4
            for (int nb = 0; nb < NB; nb++)
                acc[r][nb] += x * bv[nb];
        }
    }
    vf al = vbcast(alpha);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
        for (int nb = 0; nb < NB; nb++)
            vstore(C + (size_t)r * ldc + VW * nb, acc[r][nb] * al);
}

/* C[M, N] = alpha · A·B, A[i, k] = A[i·rsa + k·csa], B row-major (ldb),
 * N a multiple of 16.  K = 0 writes zeros.  The blocking keeps every
 * accumulator, the B vectors and the broadcast in registers: AVX-512 has 32
 * (16 accumulators: 8 rows of two vectors, 4 of four); AVX2 has 16 (12
 * accumulators: 6 rows of two, BLIS's haswell 6x16 shape). */
static void small_gemm(int M, int N, int K, float alpha, const float *A, size_t rsa,
                       size_t csa, const float *B, size_t ldb, float *C, size_t ldc)
{
#ifdef __AVX512F__
    for (int j0 = 0; j0 < N; j0 += 64) {
        int nb = (N - j0) / 16 < 4 ? (N - j0) / 16 : 4;
        int mr = nb <= 2 ? 8 : 4;
#else
    for (int j0 = 0; j0 < N; j0 += 16) {
        int nb = 2, mr = 6;
#endif
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
#ifdef __AVX512F__
                KCASE(1, 1) KCASE(2, 1) KCASE(3, 1) KCASE(4, 1)
                KCASE(5, 1) KCASE(6, 1) KCASE(7, 1) KCASE(8, 1)
                KCASE(7, 2) KCASE(8, 2)
                KCASE(1, 3) KCASE(2, 3) KCASE(3, 3) KCASE(4, 3)
                KCASE(1, 4) KCASE(2, 4) KCASE(3, 4) KCASE(4, 4)
#endif
                KCASE(1, 2) KCASE(2, 2) KCASE(3, 2) KCASE(4, 2)
                KCASE(5, 2) KCASE(6, 2)
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

/* p[lo, len) = softmax(s[lo, len)), the rest of p[0, Tk) = 0, where s is a
 * row of the score block (valid from lo rounded down to 16 up to len rounded
 * up): whole vectors with no remainder loops, which dominate rows this
 * short. */
static inline __attribute__((always_inline)) void
softmax_padded(float *restrict p, float *restrict s, int lo, int len, int Tk)
{
    int c = lo & ~15, n = (len + 15) & ~15;
    for (int j = c; j < lo; j++)
        s[j] = -INFINITY;
    for (int j = len; j < n; j++)
        s[j] = -INFINITY;
    if (len > lo)
        tfm_softmax_inplace(s + c, n - c);
    memset(p, 0, (size_t)lo * sizeof *p);
    memcpy(p + lo, s + lo, (size_t)(len - lo) * sizeof *p);
    memset(p + len, 0, (size_t)(Tk - len) * sizeof *p);
}

/* First column of a block of query rows: their least first key, rounded
 * down to a vector (the products skip whole vectors of earlier
 * documents). */
static int block_lo(const tfm_attn *a, int b, int i0, int m, int seen)
{
    int lo = seen;
    for (int i = i0; i < i0 + m; i++) {
        int l = row_lo(a, b, i, row_len(a, b, i));
        lo = l < lo ? l : lo;
    }
    return lo & ~15;
}

/* One (batch, head) of the loops below, instantiated twice: ext = 0 is the
 * plain path (causal or full, optional padding: the decoder's hot loop,
 * unchanged), ext = 1 adds packed documents, the prefix mask and position
 * biases; the compiler drops every ext branch of the plain copy.  (Each
 * copy needs its own parallel loop: GCC outlines a parallel region before
 * inlining, so ext inside one would be a run-time value.) */
static inline __attribute__((always_inline)) void
forward_fused_head(const tfm_attn *a, int ext, int bh, float *out, int ldo, float *att,
                   const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
                   float *scratch)
{
    int NH = a->NH, Tq = a->Tq, Tk = a->Tk, HS = a->HS;
    float scale = tfm_attn_scale(a);
    float dscale = a->dropout > 0.0f ? 1.0f / (1.0f - a->dropout) : 1.0f;
    size_t tt = (size_t)Tq * Tk, tkp = pad16((size_t)Tk);
    {
        int b = bh / NH, h = bh % NH, kh = tfm_attn_kv_head(a, h);
        const float *Q = q + (size_t)b * Tq * ldq + (size_t)h * HS;
        const float *K = k + (size_t)b * Tk * ldk + (size_t)kh * HS;
        const float *V = v + (size_t)b * Tk * ldv + (size_t)kh * HS;
        float *Y = out + (size_t)b * Tq * ldo + (size_t)h * HS;
        float *P = att + (size_t)bh * tt;
        float *Pd = thread_scratch(a, scratch);                  /* [QB, Tk] */
        float *Kt = Pd + fused_head(a), *S = Kt + (size_t)HS * tkp; /* [HS, tkp], [QB, tkp] */
        const float *br = NULL;                                  /* [Tq + Tk - 1] */
        if (ext && has_bias(a)) {
            rel_bias(a, h, thread_rel(a, Pd));
            br = thread_rel(a, Pd);
        }
        transpose_head(Kt, tkp, K, (size_t)ldk, Tk, HS);
        for (int i0 = 0; i0 < Tq; i0 += QB) {
            int m = Tq - i0 < QB ? Tq - i0 : QB;
            int seen = row_len(a, b, i0 + m - 1); /* row lengths never decrease */
            int c0 = ext && a->doc_start ? block_lo(a, b, i0, m, seen) : 0;
            small_gemm(m, (int)pad16((size_t)seen) - c0, HS, scale, Q + (size_t)i0 * ldq,
                       (size_t)ldq, 1, Kt + c0, tkp, S + c0, tkp);
            for (int i = i0; i < i0 + m; i++) {
                float *s = S + (size_t)(i - i0) * tkp;
                int len = row_len(a, b, i), lo = ext ? row_lo(a, b, i, len) : 0;
                if (ext && br) {
                    const float *bi = br + (Tq - 1 - i);
#pragma omp simd
                    for (int j = lo; j < len; j++)
                        s[j] += bi[j];
                }
                softmax_padded(P + (size_t)i * Tk, s, lo, len, Tk);
            }
            const float *pr = P + (size_t)i0 * Tk;
            if (a->dropout > 0.0f) {
                uint32_t thr = tfm_dropout_threshold(a->dropout);
                for (int i = i0; i < i0 + m; i++) {
                    size_t base = (size_t)bh * tt + (size_t)i * Tk;
                    const float *row = P + (size_t)i * Tk;
                    float *d = Pd + (size_t)(i - i0) * Tk;
#pragma omp simd
                    for (int j = c0; j < seen; j++)
                        d[j] = tfm_dropout_hash(a->seed, base + (size_t)j) >= thr ? row[j] * dscale : 0.0f;
                }
                pr = Pd;
            }
            small_gemm(m, HS, seen - c0, 1.0f, pr + c0, (size_t)Tk, 1, V + (size_t)c0 * ldv,
                       (size_t)ldv, Y + (size_t)i0 * ldo, (size_t)ldo);
        }
    }
}

static inline __attribute__((always_inline)) void
backward_fused_head(const tfm_attn *a, int ext, int bh, float *dq, int lddq, float *dK,
                    int lddk, float *dV, int lddv, const float *dout, int lddo,
                    const float *att, const float *q, int ldq, const float *k, int ldk,
                    const float *v, int ldv, float *scratch)
{
    int NH = a->NH, Tq = a->Tq, Tk = a->Tk, HS = a->HS;
    float scale = tfm_attn_scale(a);
    float dscale = a->dropout > 0.0f ? 1.0f / (1.0f - a->dropout) : 1.0f;
    size_t tt = (size_t)Tq * Tk, tkp = pad16((size_t)Tk);
    {
        int b = bh / NH, h = bh % NH, kh = tfm_attn_kv_head(a, h);
        const float *Q = q + (size_t)b * Tq * ldq + (size_t)h * HS;
        const float *K = k + (size_t)b * Tk * ldk + (size_t)kh * HS;
        const float *V = v + (size_t)b * Tk * ldv + (size_t)kh * HS;
        const float *dY = dout + (size_t)b * Tq * lddo + (size_t)h * HS;
        const float *P = att + (size_t)bh * tt;
        float *dQ = dq + (size_t)b * Tq * lddq + (size_t)h * HS;
        float *dS = thread_scratch(a, scratch);               /* [Tq, Tk] */
        float *Pd = dS + tt;                                  /* [Tq, Tk] */
        float *Vt = dS + fused_head(a), *dP = Vt + (size_t)HS * tkp; /* [HS, tkp], [QB, tkp] */
        /* T5: the unscaled dS summed per relative position, [Tq + Tk - 1] */
        float *g = NULL;
        if (ext && a->t5) {
            g = thread_rel(a, dS);
            memset(g, 0, (size_t)rel_count(a) * sizeof *g);
        }
        transpose_head(Vt, tkp, V, (size_t)ldv, Tk, HS);
        /* per block of queries: dP' = dY·Vᵀ, dropout, softmax backward into
         * dS (scaled), then dQ = dS·K */
        for (int i0 = 0; i0 < Tq; i0 += QB) {
            int m = Tq - i0 < QB ? Tq - i0 : QB;
            int seen = row_len(a, b, i0 + m - 1);
            int c0 = ext && a->doc_start ? block_lo(a, b, i0, m, seen) : 0;
            small_gemm(m, (int)pad16((size_t)seen) - c0, HS, 1.0f, dY + (size_t)i0 * lddo,
                       (size_t)lddo, 1, Vt + c0, tkp, dP + c0, tkp);
            for (int i = i0; i < i0 + m; i++) {
                const float *p = P + (size_t)i * Tk;
                float *ds = dS + (size_t)i * Tk, *pd = Pd + (size_t)i * Tk;
                float *dp = dP + (size_t)(i - i0) * tkp;
                int len = row_len(a, b, i), lo = ext ? row_lo(a, b, i, len) : 0;
                if (a->dropout > 0.0f) {
                    size_t base = (size_t)bh * tt + (size_t)i * Tk;
                    uint32_t thr = tfm_dropout_threshold(a->dropout);
#pragma omp simd
                    for (int j = lo; j < len; j++) {
                        float keep = tfm_dropout_hash(a->seed, base + (size_t)j) >= thr ? dscale : 0.0f;
                        pd[j] = p[j] * keep;
                        dp[j] *= keep;
                    }
                } else {
                    memcpy(pd + lo, p + lo, (size_t)(len - lo) * sizeof *pd);
                }
                /* the key loop below reads whole columns: zero the masked */
                if (ext) {
                    memset(pd, 0, (size_t)lo * sizeof *pd);
                    memset(ds, 0, (size_t)lo * sizeof *ds);
                }
                memset(pd + len, 0, (size_t)(Tk - len) * sizeof *pd);
                float s = 0.0f;
#pragma omp simd reduction(+:s)
                for (int j = lo; j < len; j++)
                    s += p[j] * dp[j];
                if (ext && g) {
                    /* d(biased score) = P ⊙ (dP - s): the table's gradient */
                    float *gi = g + (Tq - 1 - i);
#pragma omp simd
                    for (int j = lo; j < len; j++) {
                        float x = p[j] * (dp[j] - s);
                        gi[j] += x;
                        ds[j] = x * scale;
                    }
                } else {
#pragma omp simd
                    for (int j = lo; j < len; j++)
                        ds[j] = p[j] * (dp[j] - s) * scale;
                }
                memset(ds + len, 0, (size_t)(Tk - len) * sizeof *ds);
            }
            small_gemm(m, HS, seen - c0, 1.0f, dS + (size_t)i0 * Tk + c0, (size_t)Tk, 1,
                       K + (size_t)c0 * ldk, (size_t)ldk, dQ + (size_t)i0 * lddq, (size_t)lddq);
        }
        if (ext && g)
            t5_scatter(a, scratch + (size_t)bh * a->t5->n_buckets, g);
        /* per block of keys: dV = P'ᵀ·dY, dK = dSᵀ·Q over the queries that
         * can see the block's first key (the rest of the column is 0) */
        for (int j0 = 0; j0 < Tk; j0 += QB) {
            int m = Tk - j0 < QB ? Tk - j0 : QB;
            int i0 = 0;
            if (a->mask == TFM_MASK_CAUSAL)
                i0 = j0 - (Tk - Tq) > 0 ? j0 - (Tk - Tq) : 0;
            else if (ext && a->mask == TFM_MASK_PREFIX && j0 >= a->prefix_len[b])
                i0 = j0 - (Tk - Tq); /* past the prefix, causal */
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

static void forward_fused(const tfm_attn *a, float *out, int ldo, float *att,
                          const float *q, int ldq, const float *k, int ldk,
                          const float *v, int ldv, float *scratch)
{
    int n = a->B * a->NH;
    if (needs_ext(a)) {
#pragma omp parallel for schedule(static)
        for (int bh = 0; bh < n; bh++)
            forward_fused_head(a, 1, bh, out, ldo, att, q, ldq, k, ldk, v, ldv, scratch);
    } else {
#pragma omp parallel for schedule(static)
        for (int bh = 0; bh < n; bh++)
            forward_fused_head(a, 0, bh, out, ldo, att, q, ldq, k, ldk, v, ldv, scratch);
    }
}

/* One unit of a backward loop: a (batch, head), whose dK and dV are its
 * columns of dk and dv; or, with grouped heads, a (batch, key/value head)
 * and its group's query heads in order, the first writing dK and dV, each
 * later one its own into the thread's group scratch, then added (a fixed
 * order: the sums do not depend on the threads).  fused and ext are
 * constants where it is inlined (the loops below). */
static inline __attribute__((always_inline)) void
backward_unit(const tfm_attn *a, int fused, int ext, int u, float *dq, int lddq, float *dk,
              int lddk, float *dv, int lddv, const float *dout, int lddo, const float *att,
              const float *q, int ldq, const float *k, int ldk, const float *v, int ldv,
              float *scratch)
{
    const int NH = a->NH, NKV = tfm_attn_kv_heads(a), G = NH / NKV, Tk = a->Tk, HS = a->HS;
    int b = u / NKV, kh = u % NKV;
    float *dK = dk + (size_t)b * Tk * lddk + (size_t)kh * HS;
    float *dV = dv + (size_t)b * Tk * lddv + (size_t)kh * HS;
    float *tk = G > 1 ? thread_group(a, scratch) : NULL, *tv = tk ? tk + (size_t)Tk * HS : NULL;
    for (int j = 0; j < G; j++) {
        int bh = b * NH + kh * G + j;
        float *K = j ? tk : dK, *V = j ? tv : dV;
        int ldk_ = j ? HS : lddk, ldv_ = j ? HS : lddv;
        if (fused)
            backward_fused_head(a, ext, bh, dq, lddq, K, ldk_, V, ldv_, dout, lddo, att, q,
                                ldq, k, ldk, v, ldv, scratch);
        else
            backward_blas_head(a, ext, bh, dq, lddq, K, ldk_, V, ldv_, dout, lddo, att, q, ldq,
                               k, ldk, v, ldv, scratch);
        if (j) {
            add_head(dK, lddk, tk, Tk, HS);
            add_head(dV, lddv, tv, Tk, HS);
        }
    }
}

static void backward_units(const tfm_attn *a, int fused, float *dq, int lddq, float *dk,
                           int lddk, float *dv, int lddv, const float *dout, int lddo,
                           const float *att, const float *q, int ldq, const float *k, int ldk,
                           const float *v, int ldv, float *scratch)
{
    int n = a->B * tfm_attn_kv_heads(a);
#define UNITS(FUSED, EXT)                                                                   \
    do {                                                                                    \
        _Pragma("omp parallel for schedule(static)")                                        \
        for (int u = 0; u < n; u++)                                                         \
            backward_unit(a, FUSED, EXT, u, dq, lddq, dk, lddk, dv, lddv, dout, lddo, att,  \
                          q, ldq, k, ldk, v, ldv, scratch);                                 \
    } while (0)
    if (needs_ext(a)) {
        if (fused)
            UNITS(1, 1);
        else
            UNITS(0, 1);
        if (a->t5 && a->t5->dtable) /* NULL: the table is frozen */
            t5_reduce(a, scratch);
    } else if (fused) {
        UNITS(1, 0);
    } else {
        UNITS(0, 0);
    }
#undef UNITS
}

static void backward_fused(const tfm_attn *a, float *dq, int lddq, float *dk, int lddk,
                           float *dv, int lddv, const float *dout, int lddo,
                           const float *att, const float *q, int ldq, const float *k,
                           int ldk, const float *v, int ldv, float *scratch)
{
    backward_units(a, 1, dq, lddq, dk, lddk, dv, lddv, dout, lddo, att, q, ldq, k, ldk, v, ldv,
                   scratch);
}

/* ---- tiles with an online softmax (inference) ---- */

/* Query rows and keys of a tile: the TQ×TK scores, TK keys and values and
 * TQ accumulator rows stay in the second-level cache at HS = 64. */
enum { TQ = 64, TK = 256 };

/* The tile's scores, the accumulators, the running maxima and sums, and
 * with a position bias the relative positions a block of rows spans. */
static size_t tiled_per_thread(const tfm_attn *a)
{
    size_t rel = has_bias(a) ? pad16((size_t)TQ + a->Tk) : 0;
    return (size_t)TQ * TK + (size_t)TQ * a->HS + 2 * (size_t)TQ + rel + 16;
}

/* One block of up to TQ query rows of one (batch, head) against the key
 * blocks any of its rows sees: per row a running maximum m and sum l, the
 * accumulator rescaled by e^(m_old - m_new) when the maximum grows. */
static void forward_tiled_unit(const tfm_attn *a, int u, float *out, int ldo, const float *q,
                               int ldq, const float *k, int ldk, const float *v, int ldv,
                               float *scratch)
{
    const int NH = a->NH, Tq = a->Tq, Tk = a->Tk, HS = a->HS;
    const int nqb = (Tq + TQ - 1) / TQ, bh = u / nqb, i0 = u % nqb * TQ;
    const int nq = Tq - i0 < TQ ? Tq - i0 : TQ;
    const int b = bh / NH, h = bh % NH, kh = tfm_attn_kv_head(a, h);
    float *S = scratch + (size_t)thread_id() * tiled_per_thread(a);
    float *acc = S + (size_t)TQ * TK, *m = acc + (size_t)TQ * HS, *l = m + TQ;
    float *br = has_bias(a) ? l + TQ : NULL;
    const float scale = tfm_attn_scale(a);
    const float *Q = q + ((size_t)b * Tq + i0) * ldq + (size_t)h * HS;
    const float *K = k + (size_t)b * Tk * ldk + (size_t)kh * HS;
    const float *V = v + (size_t)b * Tk * ldv + (size_t)kh * HS;
    int lo[TQ], hi[TQ], jlo = Tk, jhi = 0;
    for (int i = 0; i < nq; i++) {
        hi[i] = row_len(a, b, i0 + i);
        lo[i] = row_lo(a, b, i0 + i, hi[i]);
        if (hi[i] > lo[i]) {
            jlo = lo[i] < jlo ? lo[i] : jlo;
            jhi = hi[i] > jhi ? hi[i] : jhi;
        }
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    memset(acc, 0, sizeof(float) * (size_t)nq * HS);
    /* row i's bias at key j is br[nq - 1 - i + j] (rel_bias's index less
     * that of the block's last row at key 0) */
    if (br)
        rel_bias_range(a, h, Tq - nq - i0, nq + Tk - 1, br);
    for (int j0 = jlo; j0 < jhi; j0 += TK) {
        const int nk = jhi - j0 < TK ? jhi - j0 : TK;
        tfm_gemm1(0, 1, nq, nk, HS, scale, Q, ldq, K + (size_t)j0 * ldk, ldk, 0.0f, S, TK);
        for (int i = 0; i < nq; i++) {
            float *s = S + (size_t)i * TK;
            int c0 = lo[i] - j0, c1 = hi[i] - j0;
            c0 = c0 < 0 ? 0 : c0 > nk ? nk : c0;
            c1 = c1 < c0 ? c0 : c1 > nk ? nk : c1;
            memset(s, 0, sizeof(float) * (size_t)c0);
            memset(s + c1, 0, sizeof(float) * (size_t)(nk - c1));
            if (c1 == c0)
                continue;
            if (br) {
                const float *bi = br + (nq - 1 - i) + j0;
#pragma omp simd
                for (int j = c0; j < c1; j++)
                    s[j] += bi[j];
            }
            float mx = m[i];
            for (int j = c0; j < c1; j++)
                mx = s[j] > mx ? s[j] : mx;
            float sum = 0.0f;
#pragma omp simd reduction(+:sum)
            for (int j = c0; j < c1; j++) {
                s[j] = tfm_expf_inline(s[j] - mx);
                sum += s[j];
            }
            if (mx != m[i]) { /* the first block of a row rescales zeros */
                const float c = tfm_expf_inline(m[i] - mx);
                float *ar = acc + (size_t)i * HS;
                for (int d = 0; d < HS; d++)
                    ar[d] *= c;
                l[i] *= c;
                m[i] = mx;
            }
            l[i] += sum;
        }
        tfm_gemm1(0, 0, nq, HS, nk, 1.0f, S, TK, V + (size_t)j0 * ldv, ldv, 1.0f, acc, HS);
    }
    float *Y = out + ((size_t)b * Tq + i0) * ldo + (size_t)h * HS;
    for (int i = 0; i < nq; i++) {
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        for (int d = 0; d < HS; d++)
            Y[(size_t)i * ldo + d] = acc[(size_t)i * HS + d] * inv;
    }
}

static void forward_tiled(const tfm_attn *a, float *out, int ldo, const float *q, int ldq,
                          const float *k, int ldk, const float *v, int ldv, float *scratch)
{
    const int n = a->B * a->NH * ((a->Tq + TQ - 1) / TQ);
    /* causal blocks differ in cost: taken one at a time */
#pragma omp parallel for schedule(dynamic, 1)
    for (int u = 0; u < n; u++)
        forward_tiled_unit(a, u, out, ldo, q, ldq, k, ldk, v, ldv, scratch);
}

/* The fused loops win while a head's products are small; past that BLIS's
 * packed kernels take over (measured crossover: see model_bench). */
static int use_fused(const tfm_attn *a)
{
    if (a->HS % 16)
        return 0;
    /* tests and measurements force a path through impl */
    if (a->impl != TFM_ATTN_AUTO)
        return a->impl == TFM_ATTN_FUSED;
    return (size_t)a->Tq * a->Tk * a->HS <= (size_t)FUSED_MAX;
}

void tfm_attn_forward(const tfm_attn *a, float *out, int ldo, float *att,
                      const float *q, int ldq, const float *k, int ldk,
                      const float *v, int ldv, float *scratch)
{
    if (a->impl == TFM_ATTN_TILED) {
        TFM_ASSERT(a->dropout == 0.0f); /* inference only */
        forward_tiled(a, out, ldo, q, ldq, k, ldk, v, ldv, scratch);
    } else if (use_fused(a))
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
