/* Fused elementwise and row-wise kernels with their backward passes.
 *
 * All tensors are float32, row-major, caller-owned; N is the number of rows
 * (batch × time), C the row width.  Loops run on OpenMP threads (the count
 * set by tfm_blas_init) and are deterministic for a given thread count:
 * reductions across rows never depend on scheduling.
 *
 * Convention for backward passes: gradients of inputs that may have several
 * consumers (residual streams, parameters) are ACCUMULATED (+=); the
 * others are written (=).  Each function says which. */
#ifndef TFM_TENSOR_OPS_H
#define TFM_TENSOR_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Vectorisable exp with ~2 ulp error: n = rint(x/ln 2), r = x - n·ln 2 in two
 * parts, a degree-6 polynomial for e^r, 2^n through the exponent bits.
 * Plain C without branches, so loops over it vectorise (libm's expf does
 * not).  0 below -87.3, saturates above 88.4, NaN gives NaN. */
static inline float tfm_expf_inline(float x)
{
    /* written so that NaN clamps to the low end: the exponent bits below
     * are then in range (a NaN n would be an undefined conversion) */
    float xc = x > -87.33654f ? x : -87.33654f;
    xc = xc < 88.37626f ? xc : 88.37626f;
    /* rint, not roundeven: GCC 12 vectorises only the former */
    float n = __builtin_rintf(xc * 1.44269504088896341f);
    float r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    union { float f; uint32_t i; } u;
    u.i = (uint32_t)((int32_t)n + 127) << 23;
    float y = x < -87.33654f ? 0.0f : p * u.f;
    return x == x ? y : x;
}
/* The same, out of line. */
float tfm_expf(float x);

/* out[n,:] = (inp[n,:] - mean) · rstd · w + b;  mean, rstd: [N] saved.
 * out may alias inp. */
void tfm_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C, float eps);
/* dinp += ..., dw += ..., db += ... (dw and db NULL: not wanted, a frozen
 * norm).  inp is the forward's input (not out). */
void tfm_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C);

typedef enum tfm_act_kind {
    TFM_ACT_KIND_GELU_TANH,
    TFM_ACT_KIND_GELU_EXACT,
    TFM_ACT_KIND_RELU,
} tfm_act_kind;

/* out = act(inp), n elements; out may alias inp. */
void tfm_act_forward(tfm_act_kind kind, float *out, const float *inp, size_t n);
/* dinp = dout · act'(inp) (written); dinp may alias dout. */
void tfm_act_backward(tfm_act_kind kind, float *dinp, const float *dout,
                      const float *inp, size_t n);

/* What follows a linear layer's product, in place on a block of its output
 * y[m, n] (row stride ldy) that starts at row r0, column c0 of the whole:
 * y += bias[c0:], then y = act(y), then add[r0 + r, c0:] += y[r, :] — each
 * step only when set.  The same rounding as tfm_bias_forward,
 * tfm_act_forward and tfm_add_inplace one after the other; it has
 * tensor/gemm.h's epilogue signature (ctx is a tfm_linear_epi), so a product
 * can run it on each block while the block is still in cache. */
typedef struct tfm_linear_epi {
    const float *bias;
    int act; /* apply act_kind */
    tfm_act_kind act_kind;
    float *add;
    size_t ldadd;
} tfm_linear_epi;
void tfm_linear_epilogue(void *ctx, float *y, int ldy, int r0, int m, int c0, int n);

/* out[n,:] += bias (broadcast over rows). */
void tfm_bias_forward(float *out, const float *bias, int N, int C);
/* dbias += Σ_n dout[n,:]. */
void tfm_bias_backward(float *dbias, const float *dout, int N, int C);

/* out = a + b, n elements (out may alias either). */
void tfm_add(float *out, const float *a, const float *b, size_t n);
/* y += x. */
void tfm_add_inplace(float *y, const float *x, size_t n);

/* Dropout with a counter-based mask: element i of stream `seed` is kept
 * with probability 1-p and scaled by 1/(1-p).  The mask is a pure function
 * of (seed, i), so backward regenerates it instead of storing it, and the
 * result does not depend on the thread count.  out may alias inp. */
void tfm_dropout_forward(float *out, const float *inp, size_t n, float p, uint64_t seed);
/* dinp = dout · mask / (1-p) (written; may alias dout). */
void tfm_dropout_backward(float *dinp, const float *dout, size_t n, float p, uint64_t seed);
/* Element i of stream seed is kept when tfm_dropout_hash(seed, i) >=
 * tfm_dropout_threshold(p).  Inline and branch-free, so that loops over
 * elements with the threshold hoisted vectorise (attention's dropout). */
static inline uint32_t tfm_dropout_hash(uint64_t seed, size_t i)
{
    uint32_t h = (uint32_t)i * 0x9E3779B1u ^ (uint32_t)seed;
    h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
    h ^= (uint32_t)(seed >> 32) ^ (uint32_t)((uint64_t)i >> 32);
    h ^= h >> 16; h *= 0x85EBCA6Bu; h ^= h >> 13; h *= 0xC2B2AE35u; h ^= h >> 16;
    return h;
}

static inline uint32_t tfm_dropout_threshold(float p)
{
    double t = (double)p * 4294967296.0;
    return t >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)t;
}

/* 1 when element i of stream seed is kept. */
static inline int tfm_dropout_keep(uint64_t seed, size_t i, float p)
{
    return tfm_dropout_hash(seed, i) >= tfm_dropout_threshold(p);
}

/* out[b,t,:] = wte[tok[b,t],:] + wpe[t,:]  (wpe may be NULL).
 * tok must be in range (the caller checks). */
void tfm_embedding_forward(float *out, const int32_t *tok, const float *wte,
                           const float *wpe, int B, int T, int C);
/* dwte[tok] += dout, dwpe[t] += Σ_b dout[b,t] (dwpe may be NULL). */
void tfm_embedding_backward(float *dwte, float *dwpe, const float *dout,
                            const int32_t *tok, int B, int T, int C);

/* out[n,:] += table[ids[n],:] for n < N (a second embedding: segments,
 * positions given by id).  ids must be in range (the caller checks). */
void tfm_embedding_add(float *out, const int32_t *ids, const float *table, int N, int C);

/* x[0, len) = softmax(x[0, len)) in place (len ≥ 1); no parallel region, for
 * callers already inside one.  −∞ entries come out 0. */
void tfm_softmax_inplace(float *x, int len);

/* Row-wise softmax in place over the first `len` entries of each of N rows
 * of width ld. */
void tfm_softmax_rows(float *x, int N, int len, int ld);

/* Cross-entropy fused with the softmax.  logits [N,V]; targets [N] (-1 =
 * ignored).  Label smoothing eps: target distribution (1-eps)·onehot + eps/V
 * (PyTorch's definition).  Writes lse[n] (log-sum-exp, for backward) and
 * losses[n] (0 for ignored rows; may be NULL); returns the sum of the losses
 * and stores the number of counted rows in *count. */
double tfm_crossentropy_forward(float *lse, float *losses, const float *logits,
                                const int32_t *targets, int N, int V, float eps,
                                long *count);
/* In place: logits[n,:] becomes dloss[n] · (softmax - target distribution);
 * ignored rows become 0.  dloss is the same for every row (mean loss:
 * scale / count). */
void tfm_crossentropy_backward(float *logits, const float *lse, const int32_t *targets,
                               int N, int V, float eps, float dloss);

#endif
