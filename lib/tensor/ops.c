#include "config.h"

#include "tensor/ops.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Below this many elements a parallel region costs more than it saves. */
#define PAR_MIN 32768

#define exp_poly tfm_expf_inline

float tfm_expf(float x)
{
    return exp_poly(x);
}

/* ---- layer norm ---------------------------------------------------------- */

void tfm_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *w, const float *b, int N, int C, float eps)
{
#pragma omp parallel for schedule(static) if ((size_t)N * C >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float s = 0.0f;
#pragma omp simd reduction(+:s)
        for (int i = 0; i < C; i++)
            s += x[i];
        float m = s / C;
        float v = 0.0f;
#pragma omp simd reduction(+:v)
        for (int i = 0; i < C; i++) {
            float d = x[i] - m;
            v += d * d;
        }
        float rs = 1.0f / sqrtf(v / C + eps);
#pragma omp simd
        for (int i = 0; i < C; i++)
            y[i] = (x[i] - m) * rs * w[i] + b[i];
        mean[n] = m;
        rstd[n] = rs;
    }
}

/* Column block width for parameter reductions: each thread owns whole
 * columns and sums the rows in order, so results do not depend on the
 * thread count or scheduling. */
#define COLBLK 64

void tfm_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                            const float *inp, const float *w, const float *mean,
                            const float *rstd, int N, int C)
{
#pragma omp parallel for schedule(static) if ((size_t)N * C >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], rs = rstd[n];
        float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+:s1, s2)
        for (int i = 0; i < C; i++) {
            float xh = (x[i] - m) * rs;
            float dn = dy[i] * w[i];
            s1 += dn;
            s2 += dn * xh;
        }
        s1 /= C;
        s2 /= C;
#pragma omp simd
        for (int i = 0; i < C; i++) {
            float xh = (x[i] - m) * rs;
            dx[i] += (dy[i] * w[i] - s1 - xh * s2) * rs;
        }
    }
    if (!dw) /* frozen (db too) */
        return;
    int nblk = (C + COLBLK - 1) / COLBLK;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= PAR_MIN)
    for (int k = 0; k < nblk; k++) {
        int c0 = k * COLBLK, c1 = c0 + COLBLK < C ? c0 + COLBLK : C;
        float aw[COLBLK], ab[COLBLK];
        memset(aw, 0, sizeof aw);
        memset(ab, 0, sizeof ab);
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            float m = mean[n], rs = rstd[n];
#pragma omp simd
            for (int i = c0; i < c1; i++) {
                aw[i - c0] += dy[i] * (x[i] - m) * rs;
                ab[i - c0] += dy[i];
            }
        }
        for (int i = c0; i < c1; i++) {
            dw[i] += aw[i - c0];
            db[i] += ab[i - c0];
        }
    }
}

/* ---- activations --------------------------------------------------------- */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

/* GELU-tanh as x·σ(2u), since ½(1 + tanh u) = σ(2u): no cancellation in the
 * negative tail, where 1 + tanh u would lose every digit. */
static inline float sigmoid_poly(float z)
{
    return 1.0f / (1.0f + exp_poly(-z));
}

/* Φ(x) = ½·erfc(-x/√2) through Numerical Recipes' erfc (fractional error
 * < 1.2e-7), taking the small side of the tail directly so that neither
 * tail cancels. */
static inline float cdf_poly(float x)
{
    float z = x * 0.7071067811865476f;
    float a = fabsf(z);
    float t = 1.0f / (1.0f + 0.5f * a);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    float half_erfc = 0.5f * t * exp_poly(-a * a + p);
    return z < 0.0f ? half_erfc : 1.0f - half_erfc;
}

/* This thread's share [*i0, *i1) of n elements, split in 16-float blocks. */
static void thread_chunk(size_t n, size_t *i0, size_t *i1)
{
#ifdef _OPENMP
    size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
#else
    size_t nt = 1, t = 0;
#endif
    size_t blocks = (n + 15) / 16, per = (blocks + nt - 1) / nt;
    size_t a = t * per * 16, b = a + per * 16;
    *i0 = a < n ? a : n;
    *i1 = b < n ? b : n;
}

/* The activations of one element: the loops below and the linear epilogue
 * share them, so both round alike. */
static inline float gelu_tanh1(float x)
{
    float u = GELU_K * (x + GELU_A * x * x * x);
    return x * sigmoid_poly(2.0f * u);
}

static inline float gelu_exact1(float x)
{
    return x * cdf_poly(x);
}

static inline float relu1(float x)
{
    return x > 0.0f ? x : 0.0f;
}

/* The loops live in plain functions: GCC does not vectorise them inside
 * "parallel for simd" (it gives up on the outlined body).  "omp simd" makes
 * GCC vectorise them at -O2 too (Debian builds packages with -O2), where its
 * cheap cost model otherwise leaves them scalar: 4x slower. */
static void gelu_tanh_fwd(float *restrict out, const float *restrict inp, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        out[i] = gelu_tanh1(inp[i]);
}

static void gelu_exact_fwd(float *restrict out, const float *restrict inp, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        out[i] = gelu_exact1(inp[i]);
}

static void relu_fwd(float *restrict out, const float *restrict inp, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        out[i] = relu1(inp[i]);
}

static void gelu_tanh_bwd(float *dinp, const float *dout, const float *restrict inp, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_K * (x + GELU_A * x * x * x);
        float sg = sigmoid_poly(2.0f * u);
        float du = GELU_K * (1.0f + 3.0f * GELU_A * x * x);
        /* ½(1+tanh) = σ, ½(1-tanh²) = 2σ(1-σ) */
        dinp[i] = dout[i] * (sg + x * 2.0f * sg * (1.0f - sg) * du);
    }
}

static void gelu_exact_bwd(float *dinp, const float *dout, const float *restrict inp, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cdf = cdf_poly(x);
        float pdf = 0.3989422804014327f * exp_poly(-0.5f * x * x);
        dinp[i] = dout[i] * (cdf + x * pdf);
    }
}

static void relu_bwd(float *dinp, const float *dout, const float *restrict inp, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

void tfm_act_forward(tfm_act_kind kind, float *out, const float *inp, size_t n)
{
    void (*f)(float *restrict, const float *restrict, size_t) =
        kind == TFM_ACT_KIND_GELU_TANH ? gelu_tanh_fwd
        : kind == TFM_ACT_KIND_GELU_EXACT ? gelu_exact_fwd : relu_fwd;
    if (out == inp) {
        /* in place: restrict does not hold, go through a stack block */
#pragma omp parallel if (n >= PAR_MIN)
        {
            size_t i0, i1;
            thread_chunk(n, &i0, &i1);
            float tmp[256];
            for (size_t i = i0; i < i1; i += 256) {
                size_t k = i1 - i < 256 ? i1 - i : 256;
                memcpy(tmp, inp + i, k * sizeof *tmp);
                f(out + i, tmp, k);
            }
        }
        return;
    }
#pragma omp parallel if (n >= PAR_MIN)
    {
        size_t i0, i1;
        thread_chunk(n, &i0, &i1);
        f(out + i0, inp + i0, i1 - i0);
    }
}

void tfm_act_backward(tfm_act_kind kind, float *dinp, const float *dout,
                      const float *inp, size_t n)
{
    void (*f)(float *, const float *, const float *restrict, size_t) =
        kind == TFM_ACT_KIND_GELU_TANH ? gelu_tanh_bwd
        : kind == TFM_ACT_KIND_GELU_EXACT ? gelu_exact_bwd : relu_bwd;
#pragma omp parallel if (n >= PAR_MIN)
    {
        size_t i0, i1;
        thread_chunk(n, &i0, &i1);
        f(dinp + i0, dout + i0, inp + i0, i1 - i0);
    }
}

/* ---- bias, residual ------------------------------------------------------ */

void tfm_bias_forward(float *out, const float *bias, int N, int C)
{
#pragma omp parallel for schedule(static) if ((size_t)N * C >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *y = out + (size_t)n * C;
#pragma omp simd
        for (int i = 0; i < C; i++)
            y[i] += bias[i];
    }
}

/* One row of the epilogue; kind < 0: no activation.  Inlined per kind
 * (the blocks are rows of a 16-column strip: a call and a copy per row, as
 * tfm_act_forward makes, would cost as much as the activation). */
static inline __attribute__((always_inline)) void
epilogue_row(int kind, float *restrict y, const float *restrict b, float *restrict add, int n)
{
    if (b) {
#pragma omp simd
        for (int i = 0; i < n; i++)
            y[i] += b[i];
    }
    if (kind == TFM_ACT_KIND_GELU_TANH) {
#pragma omp simd
        for (int i = 0; i < n; i++)
            y[i] = gelu_tanh1(y[i]);
    } else if (kind == TFM_ACT_KIND_GELU_EXACT) {
#pragma omp simd
        for (int i = 0; i < n; i++)
            y[i] = gelu_exact1(y[i]);
    } else if (kind == TFM_ACT_KIND_RELU) {
#pragma omp simd
        for (int i = 0; i < n; i++)
            y[i] = relu1(y[i]);
    }
    if (add) {
#pragma omp simd
        for (int i = 0; i < n; i++)
            add[i] += y[i];
    }
}

void tfm_linear_epilogue(void *ctx, float *y, int ldy, int r0, int m, int c0, int n)
{
    const tfm_linear_epi *e = ctx;
    const float *b = e->bias ? e->bias + c0 : NULL;
    const int kind = e->act ? (int)e->act_kind : -1;
    /* a product's strips are 16 columns (BLIS's nr): at a constant width
     * the row's loops unroll, and its vectors' activations overlap */
#define EPILOGUE_ROWS(K)                                                                  \
    for (int r = 0; r < m; r++) {                                                         \
        float *yr = y + (size_t)r * ldy;                                                  \
        float *ar = e->add ? e->add + (size_t)(r0 + r) * e->ldadd + c0 : NULL;            \
        if (n == 16)                                                                      \
            epilogue_row(K, yr, b, ar, 16);                                               \
        else                                                                              \
            epilogue_row(K, yr, b, ar, n);                                                \
    }
    switch (kind) {
    case TFM_ACT_KIND_GELU_TANH: EPILOGUE_ROWS(TFM_ACT_KIND_GELU_TANH) break;
    case TFM_ACT_KIND_GELU_EXACT: EPILOGUE_ROWS(TFM_ACT_KIND_GELU_EXACT) break;
    case TFM_ACT_KIND_RELU: EPILOGUE_ROWS(TFM_ACT_KIND_RELU) break;
    default: EPILOGUE_ROWS(-1) break;
    }
#undef EPILOGUE_ROWS
}

void tfm_bias_backward(float *dbias, const float *dout, int N, int C)
{
    int nblk = (C + COLBLK - 1) / COLBLK;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= PAR_MIN)
    for (int k = 0; k < nblk; k++) {
        int c0 = k * COLBLK, c1 = c0 + COLBLK < C ? c0 + COLBLK : C;
        float acc[COLBLK];
        memset(acc, 0, sizeof acc);
        for (int n = 0; n < N; n++) {
            const float *dy = dout + (size_t)n * C;
#pragma omp simd
            for (int i = c0; i < c1; i++)
                acc[i - c0] += dy[i];
        }
        for (int i = c0; i < c1; i++)
            dbias[i] += acc[i - c0];
    }
}

void tfm_add(float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void tfm_add_inplace(float *y, const float *x, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

/* ---- dropout ------------------------------------------------------------- */

/* A 32-bit integer hash of (seed, i) (murmur3's finalizer, applied twice so
 * both seed halves mix in): cheap, vectorisable, and good enough to decide
 * coin flips. */
static void dropout_apply(float *out, const float *inp, size_t n, float p, uint64_t seed)
{
    uint32_t thr = tfm_dropout_threshold(p);
    float scale = 1.0f / (1.0f - p);
#pragma omp parallel for simd schedule(static) if (n >= PAR_MIN)
    for (size_t i = 0; i < n; i++)
        out[i] = tfm_dropout_hash(seed, i) >= thr ? inp[i] * scale : 0.0f;
}

void tfm_dropout_forward(float *out, const float *inp, size_t n, float p, uint64_t seed)
{
    if (p <= 0.0f) {
        if (out != inp)
            memcpy(out, inp, n * sizeof *out);
        return;
    }
    dropout_apply(out, inp, n, p, seed);
}

void tfm_dropout_backward(float *dinp, const float *dout, size_t n, float p, uint64_t seed)
{
    tfm_dropout_forward(dinp, dout, n, p, seed);
}

/* ---- embedding ----------------------------------------------------------- */

void tfm_embedding_forward(float *out, const int32_t *tok, const float *wte,
                           const float *wpe, int B, int T, int C)
{
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= PAR_MIN)
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        const float *e = wte + (size_t)tok[bt] * C;
        float *y = out + (size_t)bt * C;
        if (wpe) {
            const float *p = wpe + (size_t)t * C;
#pragma omp simd
            for (int i = 0; i < C; i++)
                y[i] = e[i] + p[i];
        } else {
            memcpy(y, e, (size_t)C * sizeof *y);
        }
    }
}

void tfm_embedding_backward(float *dwte, float *dwpe, const float *dout,
                            const int32_t *tok, int B, int T, int C)
{
    /* Tokens repeat, so rows of dwte collide: split by columns instead of
     * rows, each thread adding its columns in sequence order. */
    int nblk = (C + COLBLK - 1) / COLBLK;
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= PAR_MIN)
    for (int k = 0; k < nblk; k++) {
        int c0 = k * COLBLK, c1 = c0 + COLBLK < C ? c0 + COLBLK : C;
        for (int bt = 0; bt < B * T; bt++) {
            float *d = dwte + (size_t)tok[bt] * C;
            const float *dy = dout + (size_t)bt * C;
#pragma omp simd
            for (int i = c0; i < c1; i++)
                d[i] += dy[i];
        }
    }
    if (!dwpe)
        return;
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= PAR_MIN)
    for (int t = 0; t < T; t++) {
        float *d = dwpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const float *dy = dout + ((size_t)b * T + t) * C;
#pragma omp simd
            for (int i = 0; i < C; i++)
                d[i] += dy[i];
        }
    }
}

void tfm_embedding_add(float *out, const int32_t *ids, const float *table, int N, int C)
{
#pragma omp parallel for schedule(static) if ((size_t)N * C >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *e = table + (size_t)ids[n] * C;
        float *y = out + (size_t)n * C;
#pragma omp simd
        for (int i = 0; i < C; i++)
            y[i] += e[i];
    }
}

/* ---- softmax and cross-entropy ------------------------------------------- */

void tfm_softmax_inplace(float *x, int len)
{
    float mx = -INFINITY;
#pragma omp simd reduction(max:mx)
    for (int i = 0; i < len; i++)
        mx = x[i] > mx ? x[i] : mx;
    float s = 0.0f;
#pragma omp simd reduction(+:s)
    for (int i = 0; i < len; i++) {
        float e = exp_poly(x[i] - mx);
        x[i] = e;
        s += e;
    }
    float inv = 1.0f / s;
#pragma omp simd
    for (int i = 0; i < len; i++)
        x[i] *= inv;
}

void tfm_softmax_rows(float *x, int N, int len, int ld)
{
#pragma omp parallel for schedule(static) if ((size_t)N * len >= PAR_MIN)
    for (int n = 0; n < N; n++)
        tfm_softmax_inplace(x + (size_t)n * ld, len);
}

double tfm_crossentropy_forward(float *lse, float *losses, const float *logits,
                                const int32_t *targets, int N, int V, float eps,
                                long *count)
{
    double total = 0.0;
    long cnt = 0;
#pragma omp parallel for schedule(static) reduction(+:total, cnt) if ((size_t)N * V >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float mx = -INFINITY;
        for (int i = 0; i < V; i++)
            mx = x[i] > mx ? x[i] : mx;
        float s = 0.0f, sx = 0.0f;
#pragma omp simd reduction(+:s, sx)
        for (int i = 0; i < V; i++) {
            s += exp_poly(x[i] - mx);
            sx += x[i];
        }
        float l = mx + logf(s);
        lse[n] = l;
        int t = targets[n];
        float loss = 0.0f;
        if (t >= 0) {
            /* -Σ q_j log p_j with q = (1-eps)·onehot + eps/V, log p_j = x_j - lse */
            loss = l - (1.0f - eps) * x[t] - eps * (sx / V);
            cnt++;
        }
        if (losses)
            losses[n] = loss;
        else
            total += loss;
    }
    /* With per-row losses, sum them in order: OpenMP's reduction combines
     * threads in arrival order, which would make the loss differ between
     * runs in the last bits. */
    if (losses)
        for (int n = 0; n < N; n++)
            total += losses[n];
    *count = cnt;
    return total;
}

void tfm_crossentropy_backward(float *logits, const float *lse, const int32_t *targets,
                               int N, int V, float eps, float dloss)
{
#pragma omp parallel for schedule(static) if ((size_t)N * V >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        float *x = logits + (size_t)n * V;
        int t = targets[n];
        if (t < 0) {
            memset(x, 0, (size_t)V * sizeof *x);
            continue;
        }
        float l = lse[n], u = eps / V;
#pragma omp simd
        for (int i = 0; i < V; i++)
            x[i] = dloss * (exp_poly(x[i] - l) - u);
        x[t] -= dloss * (1.0f - eps);
    }
}
