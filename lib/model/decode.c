/* KV-cache inference forward; see decode.h. */
#include "config.h"

#include "model/decode.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "tensor/gemm.h"
#include "base/progress.h"
#include "base/half.h"
#include "tensor/ops.h"
#include "tensor/q8.h"
#include "nn/attention.h"
#include "nn/position.h"
#include "model/forward.h"

/* ---- weights ---- */

/* bfloat16 is the top half of a float32: widening is a shift. */
static inline float bf16_f32(uint16_t u)
{
    uint32_t v = (uint32_t)u << 16;
    float f;
    memcpy(&f, &v, sizeof f);
    return f;
}

static inline uint16_t f32_bf16(float f)
{
    uint32_t v;
    memcpy(&v, &f, sizeof v);
    if ((v & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((v >> 16) | 0x40); /* NaN stays NaN */
    v += 0x7fffu + ((v >> 16) & 1);         /* round to nearest even */
    return (uint16_t)(v >> 16);
}


/* One stack's embedding tables and final norm, its tensors' names prefixed
 * with pre ("" or "enc."); an encoder-decoder's source embedding is wte
 * itself when tied. */
static int bind_embed(tfm_embed_weights *e, const tfm_model_config *c, const char *pre,
                      tfm_weights_lookup lookup, void *ctx, tfm_err *err)
{
    /* the tables' width: E with a factorised embedding (an encoder's) */
    const size_t C = (size_t)tfm_model_config_emb_dim(c);
    int enc = *pre != 0;
    char name[64];
#define GETE(dst, suffix, d0, d1)                                             \
    do {                                                                      \
        snprintf(name, sizeof name, "%s%s", pre, suffix);                     \
        if (!((dst) = lookup(ctx, name, (d0), (d1), err)))                    \
            return -1;                                                        \
    } while (0)
    if (enc && c->tie_source) {
        if (!(e->wte.f32 = lookup(ctx, "wte.weight", (size_t)c->vocab_size, C, err)))
            return -1;
    } else {
        GETE(e->wte.f32, "wte.weight",
             (size_t)(enc ? tfm_model_config_src_vocab(c) : c->vocab_size), C);
    }
    if (c->pos == TFM_POS_LEARNED)
        GETE(e->wpe, "wpe.weight", (size_t)c->block_size, C);
    int rms = c->norm == TFM_NORM_RMS; /* norms without a bias */
    if (c->emb_norm) {
        GETE(e->lne_w, "ln_e.weight", C, 0);
        if (!rms)
            GETE(e->lne_b, "ln_e.bias", C, 0);
    }
    if (c->emb_dim > 0) {
        GETE(e->proj_w, "emb_proj.weight", C, (size_t)c->n_embd);
        GETE(e->proj_b, "emb_proj.bias", (size_t)c->n_embd, 0);
    }
    if (c->pos == TFM_POS_T5)
        GETE(e->rel_bias, "rel_bias.weight", (size_t)c->n_head, (size_t)c->t5_buckets);
    if (c->ln == TFM_LN_PRE) {
        GETE(e->lnf_w, "ln_f.weight", (size_t)c->n_embd, 0);
        if (!rms)
            GETE(e->lnf_b, "ln_f.bias", (size_t)c->n_embd, 0);
    }
#undef GETE
    return 0;
}

/* Where each of a block's tensors (model/transformer.h's slots) goes: a
 * matrix's float32 values. */
static const size_t slot_field[TFM_SLOT_N] = {
#define F_(slot, field) [TFM_SLOT_##slot] = offsetof(tfm_layer_weights, field)
    F_(LN1_W, ln1_w), F_(LN1_B, ln1_b), F_(QKV_W, qkv_w.f32), F_(QKV_B, qkv_b),
    F_(PROJ_W, proj_w.f32), F_(PROJ_B, proj_b), F_(LNX_W, lnx_w), F_(LNX_B, lnx_b),
    F_(XQ_W, xq_w.f32), F_(XQ_B, xq_b), F_(XKV_W, xkv_w.f32), F_(XKV_B, xkv_b),
    F_(XP_W, xp_w.f32), F_(XP_B, xp_b), F_(LN2_W, ln2_w), F_(LN2_B, ln2_b),
    F_(FC_W, fc_w.f32), F_(FC_B, fc_b), F_(FC1_W, fc1_w.f32), F_(FC1_B, fc1_b),
    F_(FCP_W, fcp_w.f32), F_(FCP_B, fcp_b),
#undef F_
};

const float *tfm_layer_weight(const tfm_layer_weights *L, tfm_slot s)
{
    TFM_ASSERT((int)s >= 0 && s < TFM_SLOT_N);
    return *(const float *const *)((const char *)L + slot_field[s]);
}

int tfm_weights_bind(tfm_weights *w, const tfm_model_config *c,
                         tfm_weights_lookup lookup, void *ctx, tfm_err *err)
{
    memset(w, 0, sizeof *w);
    const size_t V = (size_t)c->vocab_size;
    const size_t E = (size_t)tfm_model_config_emb_dim(c);
    char name[64];
#define GET(dst, nm, d0, d1)                                                  \
    do {                                                                      \
        if (!((dst) = lookup(ctx, (nm), (d0), (d1), err)))                    \
            goto fail;                                                        \
    } while (0)
    if (bind_embed(&w->dec, c, "", lookup, ctx, err) < 0)
        goto fail;
    if (c->n_segments)
        GET(w->wse, "wse.weight", (size_t)c->n_segments, E);
    if (c->tie_embeddings)
        w->lm_head = w->dec.wte;
    else
        GET(w->lm_head.f32, "lm_head.weight", V, E);
    if (c->head_bias)
        GET(w->head_bias, "final_logits_bias", V, 0);
    int ed = c->kind == TFM_KIND_ENCODER_DECODER;
    w->n_layer = c->n_layer;
    w->layers = tfm_calloc((size_t)c->n_layer, sizeof *w->layers);
    w->n_enc_layer = tfm_model_config_enc_layers(c);
    if (ed) {
        if (bind_embed(&w->enc, c, "enc.", lookup, ctx, err) < 0)
            goto fail;
        w->enc_layers = tfm_calloc((size_t)w->n_enc_layer, sizeof *w->enc_layers);
    }
    for (int k = 0; k < c->n_layer + w->n_enc_layer; k++) {
        /* the decoder's blocks, then the encoder's */
        int enc = k >= c->n_layer, l = enc ? k - c->n_layer : k;
        tfm_layer_weights *L = enc ? &w->enc_layers[l] : &w->layers[l];
        /* the block's tensors as the training table lists them */
        for (int sl = 0; sl < TFM_SLOT_N; sl++) {
            const char *suffix;
            size_t d0, d1;
            int decay;
            if (!tfm_block_slot(c, (tfm_slot)sl, ed && !enc, &suffix, &d0, &d1, &decay))
                continue;
            snprintf(name, sizeof name, "%sh.%d.%s", enc ? "enc." : "", l, suffix);
            const float **dst = (const float **)((char *)L + slot_field[sl]);
            GET(*dst, name, d0, d1);
        }
    }
#undef GET
    return 0;
fail:
    tfm_weights_free(w);
    return -1;
}

static const float *model_lookup(void *ctx, const char *name, size_t d0, size_t d1,
                                 tfm_err *err)
{
    const tfm_model *m = ctx;
    const tfm_param *p = tfm_model_param(m, name);
    if (!p) {
        tfm_err_set(err, "model has no tensor '%s'", name);
        return NULL;
    }
    if (p->shape[0] != d0 || p->shape[1] != d1) {
        tfm_err_set(err, "tensor '%s' has shape [%zu, %zu], expected [%zu, %zu]",
                    name, p->shape[0], p->shape[1], d0, d1);
        return NULL;
    }
    return m->params + p->offset;
}

int tfm_weights_from_model(tfm_weights *w, const tfm_model *m, tfm_err *err)
{
    return tfm_weights_bind(w, &m->cfg, model_lookup, (void *)m, err);
}

static const uint16_t *to_bf16(uint16_t *dst, const float *src, size_t n)
{
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
    for (size_t i = 0; i < n; i++)
        dst[i] = f32_bf16(src[i]);
    return dst;
}

size_t tfm_weights_to_bf16(tfm_weights *w, const tfm_model_config *c)
{
    const size_t C = (size_t)c->n_embd, V = (size_t)c->vocab_size;
    const size_t F = (size_t)tfm_model_config_ff(c), D = (size_t)tfm_model_config_attn_dim(c);
    const size_t QKV = (size_t)tfm_model_config_qkv_dim(c);
    const size_t gated = tfm_ffn_gated(c->ffn);
    const size_t per_layer = C * QKV + D * C + (1 + gated) * C * F + F * C;
    size_t total = per_layer * (size_t)c->n_layer + V * C;
    free(w->bf16_store);
    w->bf16_store = tfm_aligned_alloc(sizeof(uint16_t) * total);
    uint16_t *p = w->bf16_store;
    /* a stored-only matrix (no float32) or an 8-bit one keeps its data;
     * each matrix has its place whether made or not */
#define BF16_OF(m, n)                                                        \
    do {                                                                     \
        if ((m).f32 && (m).dtype != TFM_WEIGHTS_Q8_0)                        \
            (m) = (tfm_matrix){(m).f32, TFM_WEIGHTS_BF16,                    \
                               to_bf16(p, (m).f32, (n)), NULL};              \
        p += (n);                                                            \
    } while (0)
    for (int l = 0; l < c->n_layer; l++) {
        tfm_layer_weights *L = &w->layers[l];
        BF16_OF(L->qkv_w, C * QKV);
        BF16_OF(L->proj_w, D * C);
        BF16_OF(L->fc_w, C * F);
        if (gated)
            BF16_OF(L->fc1_w, C * F);
        BF16_OF(L->fcp_w, F * C);
    }
    BF16_OF(w->lm_head, V * C);
#undef BF16_OF
    return sizeof(uint16_t) * total;
}

/* An 8-bit copy of W [K, N] (a block matrix, [in, out]; float32, else
 * its bfloat16 data) into q [N, K] and d [N, K / 32], or of head [V, C]
 * as it is (trans 0); q and d advance.  As a q8_0 file stores it
 * (model/quant.h): the values from the exact scale, the scale rounded to
 * half precision. */
static tfm_matrix to_q8(int8_t **q, uint16_t **d, const tfm_matrix *M, size_t K, size_t N,
                        int trans)
{
    const float *W = M->f32;
    const uint16_t *W16 = M->data;
    tfm_matrix m = {M->f32, TFM_WEIGHTS_Q8_0, *q, *d};
    const size_t nb = K / TFM_Q8_BLOCK;
#pragma omp parallel if (K * N >= (1 << 16))
    {
        /* a row of the float32 weights, or of stored bfloat16 widened */
        float *row = trans || !W ? tfm_malloc(sizeof(float) * K) : NULL;
        float *dr = tfm_malloc(sizeof(float) * nb);
#pragma omp for schedule(static)
        for (size_t j = 0; j < N; j++) {
            const float *src = W ? W + j * K : row;
            if (trans || !W) {
                for (size_t i = 0; i < K; i++) {
                    size_t at = trans ? i * N + j : j * K + i;
                    row[i] = W ? W[at] : bf16_f32(W16[at]);
                }
                src = row;
            }
            tfm_q8_quantize_ref(*q + j * K, dr, src, (int)K);
            for (size_t b = 0; b < nb; b++)
                (*d)[j * nb + b] = tfm_f32_to_f16(dr[b]);
        }
        free(row);
        free(dr);
    }
    *q += K * N;
    *d += N * nb;
    return m;
}

/* A matrix tfm_weights_to_q8 quantizes. */
typedef struct q8_job {
    tfm_matrix *m;
    size_t K, N;
    int trans;
} q8_job;

size_t tfm_weights_to_q8(tfm_weights *w, const tfm_model_config *c)
{
    const size_t C = (size_t)c->n_embd, V = (size_t)c->vocab_size;
    const size_t F = (size_t)tfm_model_config_ff(c), D = (size_t)tfm_model_config_attn_dim(c);
    /* a product is 8-bit when its input width (C, D or F) is whole blocks */
    const int cq = C % TFM_Q8_BLOCK == 0, dq = D % TFM_Q8_BLOCK == 0;
    const int fq = F % TFM_Q8_BLOCK == 0;
    q8_job *jobs = tfm_malloc(sizeof *jobs * (5 * (size_t)c->n_layer + 1));
    int n = 0;
#define JOB(m, K, N, trans)                                                   \
    do {                                                                      \
        if ((m).dtype != TFM_WEIGHTS_Q8_0)                                    \
            jobs[n++] = (q8_job){&(m), K, N, trans};                          \
    } while (0)
    for (int l = 0; l < c->n_layer; l++) {
        tfm_layer_weights *L = &w->layers[l];
        if (cq) {
            JOB(L->qkv_w, C, (size_t)tfm_model_config_qkv_dim(c), 1);
            JOB(L->fc_w, C, F, 1);
            if (tfm_ffn_gated(c->ffn))
                JOB(L->fc1_w, C, F, 1);
        }
        if (dq)
            JOB(L->proj_w, D, C, 1);
        if (fq)
            JOB(L->fcp_w, F, C, 1);
    }
    if (cq)
        JOB(w->lm_head, C, V, 0);
#undef JOB
    /* an 8-bit matrix (stored, or made by an earlier call) keeps its data:
     * then every matrix has, and the store stays */
    size_t total = 0;
    for (int j = 0; j < n; j++)
        total += jobs[j].K * jobs[j].N;
    if (!total) {
        free(jobs);
        return 0;
    }
    free(w->q8_store);
    /* the scales first: they stay aligned */
    size_t bytes = total + sizeof(uint16_t) * total / TFM_Q8_BLOCK;
    w->q8_store = tfm_aligned_alloc(bytes ? bytes : 1);
    uint16_t *d = w->q8_store;
    int8_t *q = (int8_t *)(d + total / TFM_Q8_BLOCK);
    for (int j = 0; j < n; j++)
        *jobs[j].m = to_q8(&q, &d, jobs[j].m, jobs[j].K, jobs[j].N, jobs[j].trans);
    free(jobs);
    return bytes;
}

void tfm_weights_free(tfm_weights *w)
{
    free(w->q8_store);
    free(w->bf16_store);
    free(w->layers);
    free(w->enc_layers);
    memset(w, 0, sizeof *w);
}

/* ---- gemv over [in, out] weights ---- */

/* Below this many weights a second thread costs more (start-up and, on a
 * busy machine, waiting for it) than it saves. */
#define GEMV_PAR_MIN (1 << 17)

static int gemv_threads(int K, int N)
{
#ifdef _OPENMP
    return (size_t)K * N >= GEMV_PAR_MIN ? tfm_threads_now() : 1;
#else
    return 1;
#endif
}


/* Eight rows of W are read side by side in short runs (a thread's share
 * of a row), which the hardware prefetchers fetch late: each run of
 * PF_BYTES is asked for PF_ROWS rows ahead, and the LM head's rows
 * PF_HEAD rows ahead (GPT-2 small, one thread, bf16: 25.7 -> 20.7 ms a
 * decode step).  l2: into the second-level cache only (prefetcht1), which
 * leaves the first level's miss buffers to the loads (an Intel Xeon, GPT-2
 * small's bf16 LM head on one thread: 9.2 -> 11.3 GB/s); AMD's older cores
 * treat it as prefetcht0 and Zen 4's put it in L2 too, but may drop it:
 * the first decode steps time both (pf_time_begin). */
enum { PF_ROWS = 16, PF_BYTES = 256, PF_HEAD = 4 };
#define PF_COLS(T) (PF_BYTES / (int)sizeof(T))
/* GCC deletes loops of nothing but __builtin_prefetch at -O2 (all of
 * them) and those of locality 2 at -O3 (its dead-code pass): on x86 the
 * instructions are written out. */
static inline void prefetch_run(const void *p, size_t bytes, int l2)
{
    const char *c = p;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    if (l2)
        for (size_t o = 0; o < bytes; o += 64)
            __asm__ volatile("prefetcht1 %0" : : "m"(c[o]));
    else
        for (size_t o = 0; o < bytes; o += 64)
            __asm__ volatile("prefetcht0 %0" : : "m"(c[o]));
#else
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(c + o, 0, l2 ? 2 : 3);
#endif
}

#define LD_F32(p, j) ((p)[j])
#define LD_BF16(p, j) bf16_f32((p)[j])

/* y[r, j0:j1) = b[j0:j1) + Σ_{i0 ≤ i < i1} x[r, i] · W[i, j0:j1) (b NULL:
 * 0), rows of W taken eight at a time (fewer loads and stores of the
 * accumulators than four: +25% on 768-wide matrices), reading one
 * contiguous run of (j1 - j0) weights per row, in row order. */
#define GEMV_COLS(NAME, T, LD, PF)                                            \
    static void NAME(float *y, const float *x, const T *W, const float *b,    \
                     int n, int K, int N, int i0, int i1, int j0, int j1,     \
                     int l2)                                                  \
    {                                                                         \
        (void)l2;                                                             \
        const int m = j1 - j0;                                                \
        for (int r = 0; r < n; r++) {                                         \
            float *acc = y + (size_t)r * N + j0;                              \
            for (int j = 0; j < m; j++)                                       \
                acc[j] = b ? b[j0 + j] : 0.0f;                                \
        }                                                                     \
        int i = i0;                                                           \
        for (; i + 8 <= i1; i += 8) {                                         \
            const T *w0 = W + (size_t)i * N + j0, *w1 = w0 + N, *w2 = w1 + N, \
                    *w3 = w2 + N, *w4 = w3 + N, *w5 = w4 + N, *w6 = w5 + N,   \
                    *w7 = w6 + N;                                             \
            const int ahead = PF && i + PF_ROWS + 8 <= i1;                    \
            const int run = PF ? PF_COLS(T) : m;                              \
            for (int c0 = 0; c0 < m; c0 += run) {                             \
                const int c1 = c0 + run < m ? c0 + run : m;                   \
                if (ahead)                                                    \
                    for (int k = 0; k < 8; k++)                               \
                        prefetch_run(w0 + (size_t)(PF_ROWS + k) * N + c0,     \
                                     (size_t)(c1 - c0) * sizeof(T), l2);      \
                for (int r = 0; r < n; r++) {                                 \
                    const float *xr = x + (size_t)r * K + i;                  \
                    float x0 = xr[0], x1 = xr[1], x2 = xr[2], x3 = xr[3];     \
                    float x4 = xr[4], x5 = xr[5], x6 = xr[6], x7 = xr[7];     \
                    float *acc = y + (size_t)r * N + j0;                      \
                    _Pragma("omp simd")                                       \
                    for (int j = c0; j < c1; j++)                             \
                        acc[j] += (x0 * LD(w0, j) + x1 * LD(w1, j) +          \
                                   x2 * LD(w2, j) + x3 * LD(w3, j)) +         \
                                  (x4 * LD(w4, j) + x5 * LD(w5, j) +          \
                                   x6 * LD(w6, j) + x7 * LD(w7, j));          \
                }                                                             \
            }                                                                 \
        }                                                                     \
        for (; i < i1; i++) {                                                 \
            const T *w0 = W + (size_t)i * N + j0;                             \
            for (int r = 0; r < n; r++) {                                     \
                float x0 = x[(size_t)r * K + i];                              \
                float *acc = y + (size_t)r * N + j0;                          \
                _Pragma("omp simd")                                           \
                for (int j = 0; j < m; j++)                                   \
                    acc[j] += x0 * LD(w0, j);                                 \
            }                                                                 \
        }                                                                     \
    }
GEMV_COLS(gemv_cols, float, LD_F32, 0)
GEMV_COLS(gemv_cols16, uint16_t, LD_BF16, 1)

/* Columns [0, N) split into T ranges of whole 16-float runs (a cache line
 * when W is aligned): range t. */
static void split_cols(int N, int t, int T, int *j0, int *j1)
{
    *j0 = (int)((long)(N / 16) * t / T) * 16;
    *j1 = t + 1 == T ? N : (int)((long)(N / 16) * (t + 1) / T) * 16;
}

/* W is summed in two fixed halves of its rows, the first into y (with the
 * bias), the second into part [n, N], then y += part.  The threads split
 * into two groups, one per half, and a group's threads split the columns:
 * on two threads each streams one contiguous half of W (narrow matrices
 * read in short runs per row, one half of each row per thread, streamed
 * at 24-26 GB/s against 30-34 for long runs).  The halves do not depend
 * on the thread count, nor does the order of any sum. */
static void gemv_rows(float *y, float *part, const float *x, const void *W, int bf16,
                      int l2, const float *b, int n, int K, int N)
{
    const int Kh = K / 16 * 8; /* eight rows at a time in both halves */
    int nt = gemv_threads(K, N);
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#ifdef _OPENMP
        int t = omp_get_thread_num(), T = omp_get_num_threads();
#else
        int t = 0, T = 1;
#endif
        for (int half = 0; half < 2; half++) {
            /* one thread: both halves; else threads [g0, g1) take this one */
            int g0 = T == 1 ? 0 : (half * T + 1) / 2, g1 = T == 1 ? 1 : ((half + 1) * T + 1) / 2;
            if (t < g0 || t >= g1)
                continue;
            int j0, j1;
            split_cols(N, t - g0, g1 - g0, &j0, &j1);
            float *dst = half ? part : y;
            const float *bias = half ? NULL : b;
            int i0 = half ? Kh : 0, i1 = half ? K : Kh;
            if (bf16)
                gemv_cols16(dst, x, W, bias, n, K, N, i0, i1, j0, j1, l2);
            else
                gemv_cols(dst, x, W, bias, n, K, N, i0, i1, j0, j1, 0);
        }
#pragma omp barrier
        int j0, j1;
        split_cols(N, t, T, &j0, &j1);
        for (int r = 0; r < n; r++) {
            float *yr = y + (size_t)r * N;
            const float *pr = part + (size_t)r * N;
            for (int j = j0; j < j1; j++)
                yr[j] += pr[j];
        }
    }
}

void tfm_gemv_rows(float *y, const float *x, const float *W, const float *b,
                   int n, int K, int N)
{
    float *part = tfm_malloc(sizeof(float) * (size_t)n * N);
    gemv_rows(y, part, x, W, 0, 0, b, n, K, N);
    free(part);
}

void tfm_gemv_rows_bf16(float *y, const float *x, const uint16_t *W, const float *b,
                        int n, int K, int N)
{
    float *part = tfm_malloc(sizeof(float) * (size_t)n * N);
    gemv_rows(y, part, x, W, 1, 0, b, n, K, N);
    free(part);
}

/* out[r, v] = <head[v, :], x[r, :]> for the [V, C] LM head: each row of
 * the head is read once for all n rows. */
#define HEAD_ROWS(NAME, T, LD, PF)                                              \
    static void NAME(float *out, const float *x, const T *head, int n, int V, \
                     int C, int l2)                                           \
    {                                                                         \
        (void)l2;                                                             \
        _Pragma("omp parallel for schedule(static) if ((size_t)V * C >= GEMV_PAR_MIN)") \
        for (int v = 0; v < V; v++) {                                         \
            const T *hv = head + (size_t)v * C;                               \
            if (PF && v + PF_HEAD < V)                                        \
                prefetch_run(hv + (size_t)PF_HEAD * C, (size_t)C * sizeof(T), l2); \
            for (int r = 0; r < n; r++) {                                     \
                const float *xr = x + (size_t)r * C;                          \
                float s = 0.0f;                                               \
                _Pragma("omp simd reduction(+:s)")                            \
                for (int i = 0; i < C; i++)                                   \
                    s += LD(hv, i) * xr[i];                                   \
                out[(size_t)r * V + v] = s;                                   \
            }                                                                 \
        }                                                                     \
    }
HEAD_ROWS(head_rows, float, LD_F32, 0)
HEAD_ROWS(head_rows16, uint16_t, LD_BF16, 1)

/* Below this many rows the weights dominate: stream them once with gemv. */
#define GEMV_ROWS 8

/* out[R, N] = in[R, K]·W8ᵀ + b with the inputs quantized to 8 bits per
 * block (tensor/q8.h). */
static void linear_q8(tfm_infer *g, float *out, const float *in, const tfm_q8 *W8,
                      const float *b, int R)
{
    const int K = W8->K, nb = K / TFM_Q8_BLOCK;
    for (int r = 0; r < R; r++)
        tfm_q8_quantize(g->xq + (size_t)r * K, g->xd + (size_t)r * nb, in + (size_t)r * K, K);
    tfm_q8_gemv(out, g->xq, g->xd, W8, b, R);
}

/* The same for all R rows at once, the matrix packed into g's scratch
 * for tfm_q8_gemm: the same numbers (tensor/q8.h), reading the weights
 * once where the rows above read them once per GEMV_ROWS rows. */
static void linear_q8_gemm(tfm_infer *g, float *out, const float *in, const tfm_q8 *W8,
                           const float *b, int R)
{
    const int K = W8->K, nb = K / TFM_Q8_BLOCK;
    tfm_q8_repack(&g->qpack, W8);
#pragma omp parallel for schedule(static) if ((size_t)R * K >= (1 << 16))
    for (int r = 0; r < R; r++)
        tfm_q8_quantize(g->xq + (size_t)r * K, g->xd + (size_t)r * nb, in + (size_t)r * K, K);
    tfm_q8_gemm(out, W8->N, g->xq, g->xd, R, &g->qpack, b, NULL, NULL);
}

static void linear_q8_rows(tfm_infer *g, float *out, const float *in, const tfm_q8 *W8,
                           const float *b, int R)
{
    for (int r0 = 0; r0 < R; r0 += GEMV_ROWS)
        linear_q8(g, out + (size_t)r0 * W8->N, in + (size_t)r0 * W8->K, W8, b,
                  R - r0 < GEMV_ROWS ? R - r0 : GEMV_ROWS);
}

/* The way each shape of long prompt took (K, N, rows' power of two):
 * packing costs a pass over the matrix, so short prompts may stay with
 * the rows.  Timed on the first such product: both ways give the same
 * numbers, so it runs both and keeps the faster (by 3%: a tie keeps the
 * rows). */
typedef struct {
    int K, N, rb, way;
} q8_way;
static struct {
    pthread_mutex_t lock;
    q8_way *v;
    int n, cap;
} q8_ways = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int q8_way_find(int K, int N, int rb)
{
    int way = 0;
    pthread_mutex_lock(&q8_ways.lock);
    for (int i = 0; i < q8_ways.n; i++)
        if (q8_ways.v[i].K == K && q8_ways.v[i].N == N && q8_ways.v[i].rb == rb)
            way = q8_ways.v[i].way;
    pthread_mutex_unlock(&q8_ways.lock);
    return way;
}

static void q8_way_keep(int K, int N, int rb, int way)
{
    pthread_mutex_lock(&q8_ways.lock);
    if (q8_ways.n == q8_ways.cap) {
        q8_ways.cap = q8_ways.cap ? 2 * q8_ways.cap : 16;
        q8_ways.v = tfm_realloc(q8_ways.v, sizeof *q8_ways.v * (size_t)q8_ways.cap);
    }
    q8_ways.v[q8_ways.n++] = (q8_way){K, N, rb, way};
    pthread_mutex_unlock(&q8_ways.lock);
}

static void linear_q8_long(tfm_infer *g, float *out, const float *in, const tfm_q8 *W8,
                           const float *b, int R)
{
    int way = g->q8_prompt;
    int rb = 0;
    for (int r = R; r >>= 1;)
        rb++;
    if (!way)
        way = q8_way_find(W8->K, W8->N, rb);
    if (!way) {
        const double t0 = tfm_now();
        linear_q8_rows(g, out, in, W8, b, R);
        const double t1 = tfm_now();
        linear_q8_gemm(g, out, in, W8, b, R);
        const double t2 = tfm_now();
        q8_way_keep(W8->K, W8->N, rb, t2 - t1 < 0.97 * (t1 - t0) ? 2 : 1);
        return;
    }
    if (way == 2)
        linear_q8_gemm(g, out, in, W8, b, R);
    else
        linear_q8_rows(g, out, in, W8, b, R);
}

/* A stored-only matrix as float32 [K, N] in g's scratch: each value as
 * model/quant.h's widening computes it, so the products below give what
 * they give over a widened copy. */
static const float *widen_matrix(tfm_infer *g, const tfm_matrix *W, int K, int N)
{
    const size_t n = (size_t)K * N;
    if (g->wbuf_n < n) {
        free(g->wbuf);
        g->wbuf = tfm_aligned_alloc(sizeof(float) * n);
        g->wbuf_n = n;
    }
    float *f = g->wbuf;
    if (W->dtype == TFM_WEIGHTS_Q8_0) { /* [N, K] rows, transposed back */
        const tfm_q8 W8 = {W->data, W->scale, N, K};
#pragma omp parallel if (n >= (1 << 16))
        {
            float *row = tfm_malloc(sizeof(float) * (size_t)K);
#pragma omp for schedule(static)
            for (int j = 0; j < N; j++) {
                tfm_q8_row(row, &W8, j);
                for (int i = 0; i < K; i++)
                    f[(size_t)i * N + j] = row[i];
            }
            free(row);
        }
    } else {
        const uint16_t *W16 = W->data;
#pragma omp parallel for schedule(static) if (n >= (1 << 16))
        for (size_t i = 0; i < n; i++)
            f[i] = bf16_f32(W16[i]);
    }
    return f;
}

/* out[R, N] = in[R, K]·W + b: a few rows stream W in its dtype, more
 * multiply its float32 values (widened when stored only). */
static void linear(tfm_infer *g, float *out, const float *in, const tfm_matrix *M,
                   const float *b, int R, int K, int N)
{
    if (M->dtype == TFM_WEIGHTS_Q8_0) {
        /* every row in 8 bits, GEMV_ROWS at a time or (a long prompt,
         * where faster) all at once through tfm_q8_gemm: a row's result
         * does not depend on the others or the way, so a prompt gives what
         * its tokens one by one give; and 8-bit products over a prompt beat
         * widening the matrix for BLIS (GPT-2 small, 16 prompt tokens:
         * 250 -> 24 ms on 2 threads) */
        const tfm_q8 W8 = {M->data, M->scale, N, K};
        if (R > GEMV_ROWS)
            linear_q8_long(g, out, in, &W8, b, R);
        else
            linear_q8(g, out, in, &W8, b, R);
        return;
    }
    if (R <= GEMV_ROWS) {
        switch (M->dtype) {
        case TFM_WEIGHTS_Q8_0:
            break;
        case TFM_WEIGHTS_BF16:
            gemv_rows(out, g->part, in, M->data, 1, g->pf_l2, b, R, K, N);
            return;
        case TFM_WEIGHTS_F32:
            gemv_rows(out, g->part, in, M->f32, 0, 0, b, R, K, N);
            return;
        }
    }
    const float *W = M->f32 ? M->f32 : widen_matrix(g, M, K, N);
    /* small weights: BLIS's threads would cost more than they bring */
    if ((size_t)K * N < GEMV_PAR_MIN)
        tfm_gemm1(0, 0, R, N, K, 1.0f, in, K, W, N, 0.0f, out, N);
    else
        tfm_gemm(0, 0, R, N, K, 1.0f, in, K, W, N, 0.0f, out, N);
    if (b)
        tfm_bias_forward(out, b, R, N);
}

/* ---- the cache ---- */

static int threads_now(void)
{
#ifdef _OPENMP
    return tfm_threads_now();
#else
    return 1;
#endif
}

/* The widest product a step splits (linear's part): the feed-forward's,
 * q|k|v's or the model's. */
static size_t scratch_width(const tfm_model_config *c)
{
    size_t C = (size_t)c->n_embd, F = (size_t)tfm_model_config_ff(c);
    size_t QKV = (size_t)tfm_model_config_qkv_dim(c), W = F > QKV ? F : QKV;
    return W > C ? W : C;
}

static void ensure_rows(tfm_infer *g, int rows)
{
    if (rows <= g->max_rows)
        return;
    const size_t C = (size_t)g->cfg.n_embd, R = (size_t)rows;
    const size_t D = (size_t)tfm_model_config_attn_dim(&g->cfg);
    const size_t HS = (size_t)tfm_model_config_head_dim(&g->cfg);
    const size_t F = (size_t)tfm_model_config_ff(&g->cfg), W = scratch_width(&g->cfg);
    free(g->x); free(g->h); free(g->qkv); free(g->att); free(g->fc); free(g->fc1);
    free(g->part); free(g->xq); free(g->xd);
    free(g->mean); free(g->rstd); free(g->row_slot); free(g->row_pos); free(g->pe);
    const size_t WQ = F > C ? (F > D ? F : D) : (C > D ? C : D); /* an 8-bit input's */
    g->xq = tfm_aligned_alloc(R * WQ);
    g->xd = tfm_aligned_alloc(sizeof(float) * R * (WQ / TFM_Q8_BLOCK + 1));
    g->fc1 = tfm_ffn_gated(g->blk.ffn) ? tfm_aligned_alloc(sizeof(float) * R * F) : NULL;
    g->x = tfm_aligned_alloc(sizeof(float) * R * C);
    g->h = tfm_aligned_alloc(sizeof(float) * R * C);
    g->qkv = tfm_aligned_alloc(sizeof(float) * R * tfm_model_config_qkv_dim(&g->cfg));
    g->att = tfm_aligned_alloc(sizeof(float) * R * D);
    g->fc = tfm_aligned_alloc(sizeof(float) * R * F);
    g->part = tfm_aligned_alloc(sizeof(float) * R * W);
    /* a row's sinusoid (C) or RoPE angles (HS) */
    g->pe = tfm_aligned_alloc(sizeof(float) * R * (C > HS ? C : HS));
    g->mean = tfm_malloc(sizeof(float) * R);
    g->rstd = tfm_malloc(sizeof(float) * R);
    g->row_slot = tfm_malloc(sizeof(int) * R);
    g->row_pos = tfm_malloc(sizeof(int) * R);
    g->max_rows = rows;
}

int tfm_infer_init(tfm_infer *g, const tfm_model_config *cfg,
                       const tfm_weights *w, int n_slots, int max_len,
                       tfm_err *err)
{
    return tfm_infer_init_cache(g, cfg, w, n_slots, max_len, 1, err);
}

int tfm_infer_init_cache(tfm_infer *g, const tfm_model_config *cfg, const tfm_weights *w,
                         int n_slots, int max_len, int rolling, tfm_err *err)
{
    memset(g, 0, sizeof *g);
    if (tfm_model_config_check(cfg, err) < 0)
        return -1;
    if (cfg->kind == TFM_KIND_ENCODER)
        return tfm_err_set(err, "an encoder model does not generate text (model.kind is "
                                "encoder)");
    if (n_slots < 1 || max_len < 1)
        return tfm_err_set(err, "inference needs at least one slot and one position");
    /* only a learned table ends; the other schemes extend past training */
    if (max_len > cfg->block_size && cfg->pos == TFM_POS_LEARNED)
        max_len = cfg->block_size;
    g->cfg = *cfg;
    g->blk = tfm_model_block(cfg);
    g->w = w;
    g->n_slots = n_slots;
    g->max_len = max_len;
    g->kv_width = (size_t)tfm_model_config_kv_dim(cfg); /* n_kv_head heads */
    g->self_rows = max_len;
    if (rolling && cfg->window > 0 && cfg->kind == TFM_KIND_DECODER) {
        int chunk = cfg->window > 64 ? cfg->window : 64;
        if (2 * ((size_t)cfg->window + chunk) < (size_t)max_len) {
            g->chunk = chunk;
            g->ring = cfg->window + chunk;
            g->self_rows = 2 * g->ring;
        }
    }
    size_t per = (size_t)cfg->n_layer * n_slots * max_len * g->kv_width;
    size_t self = (size_t)cfg->n_layer * n_slots * g->self_rows * g->kv_width;
    g->kcache = tfm_aligned_alloc(sizeof(float) * self);
    g->vcache = tfm_aligned_alloc(sizeof(float) * self);
    g->len = tfm_calloc(2 * (size_t)n_slots, sizeof *g->len);
    g->prefix = g->len + n_slots;
    if (cfg->kind == TFM_KIND_ENCODER_DECODER) {
        g->xkcache = tfm_aligned_alloc(sizeof(float) * per);
        g->xvcache = tfm_aligned_alloc(sizeof(float) * per);
        g->src_len = tfm_calloc((size_t)n_slots, sizeof *g->src_len);
    }
    if (cfg->pos == TFM_POS_ALIBI) {
        g->alibi = tfm_malloc(sizeof(float) * (size_t)cfg->n_head);
        tfm_alibi_slopes(g->alibi, cfg->n_head);
    }
    g->erow = tfm_aligned_alloc(sizeof(float) * (size_t)cfg->n_embd);
    ensure_rows(g, n_slots > GEMV_ROWS ? n_slots : GEMV_ROWS);
    return 0;
}

void tfm_infer_free(tfm_infer *g)
{
    free(g->kcache); free(g->vcache); free(g->len);
    free(g->xkcache); free(g->xvcache); free(g->src_len);
    free(g->x); free(g->h); free(g->qkv); free(g->att); free(g->fc); free(g->fc1);
    free(g->part); free(g->xq); free(g->xd);
    free(g->mean); free(g->rstd); free(g->row_slot); free(g->row_pos); free(g->pe);
    free(g->scores); free(g->alibi); free(g->wbuf); free(g->erow);
    tfm_q8_packed_free(&g->qpack);
    if (g->enc)
        tfm_fwd_free(g->enc);
    free(g->enc); free(g->mem); free(g->mem_tok);
    memset(g, 0, sizeof *g);
}

/* Floats of a thread's attention scores: a row sees at most every cached
 * position, with a ring at most its rows. */
static size_t scores_len(const tfm_infer *g)
{
    return (size_t)(g->ring ? g->self_rows : g->max_len);
}

size_t tfm_infer_bytes(const tfm_infer *g)
{
    const size_t C = (size_t)g->cfg.n_embd, D = (size_t)tfm_model_config_attn_dim(&g->cfg);
    const size_t QKV = (size_t)tfm_model_config_qkv_dim(&g->cfg);
    size_t cache = 2 * sizeof(float) * (size_t)g->cfg.n_layer * g->n_slots * g->self_rows *
                   g->kv_width;
    if (g->xkcache)
        cache += 2 * sizeof(float) * (size_t)g->cfg.n_layer * g->n_slots * g->max_len *
                 g->kv_width;
    const size_t F = (size_t)tfm_model_config_ff(&g->cfg), W = scratch_width(&g->cfg);
    size_t HS = (size_t)tfm_model_config_head_dim(&g->cfg);
    size_t scratch = sizeof(float) * (size_t)g->max_rows *
                     (2 * C + QKV + D + (C > HS ? C : HS) + (1 + (g->fc1 != NULL)) * F + W + 2);
    return cache + scratch + sizeof(float) * (size_t)g->scores_threads * scores_len(g) +
           sizeof(float) * (g->wbuf_n + C) + g->qpack.cap * (8 * 64 + 16 * sizeof(float));
}

void tfm_infer_reset(tfm_infer *g, int slot)
{
    TFM_ASSERT(slot >= 0 && slot < g->n_slots);
    g->len[slot] = 0;
    g->prefix[slot] = 0;
}

/* Row `row` of a slot's cache: the self-attention's (self_rows a slot) or
 * the cross-attention's (max_len). */
static inline float *kv_row(const tfm_infer *g, float *cache, int layer, int slot, int row)
{
    const size_t rows = cache == g->kcache || cache == g->vcache ? (size_t)g->self_rows
                                                                 : (size_t)g->max_len;
    return cache + (((size_t)layer * g->n_slots + slot) * rows + row) * g->kv_width;
}

static inline float *kv_at(const tfm_infer *g, float *cache, int layer, int slot, int pos)
{
    return kv_row(g, cache, layer, slot, pos);
}

/* Writes the key or value of position pos: at its row, or with a ring at
 * both of its rows. */
static void kv_store(const tfm_infer *g, float *cache, int layer, int slot, int pos,
                     const float *src)
{
    const size_t n = sizeof(float) * g->kv_width;
    if (!g->ring) {
        memcpy(kv_row(g, cache, layer, slot, pos), src, n);
        return;
    }
    memcpy(kv_row(g, cache, layer, slot, pos % g->ring), src, n);
    memcpy(kv_row(g, cache, layer, slot, pos % g->ring + g->ring), src, n);
}

void tfm_infer_copy_slot(tfm_infer *g, int dst, int src)
{
    TFM_ASSERT(dst >= 0 && dst < g->n_slots && src >= 0 && src < g->n_slots);
    if (dst == src)
        return;
    size_t n = (size_t)(g->ring ? g->self_rows : g->len[src]) * g->kv_width * sizeof(float);
    for (int l = 0; l < g->cfg.n_layer; l++) {
        memcpy(kv_at(g, g->kcache, l, dst, 0), kv_at(g, g->kcache, l, src, 0), n);
        memcpy(kv_at(g, g->vcache, l, dst, 0), kv_at(g, g->vcache, l, src, 0), n);
    }
    if (g->src_len) {
        size_t ns = (size_t)g->src_len[src] * g->kv_width * sizeof(float);
        for (int l = 0; l < g->cfg.n_layer; l++) {
            memcpy(kv_at(g, g->xkcache, l, dst, 0), kv_at(g, g->xkcache, l, src, 0), ns);
            memcpy(kv_at(g, g->xvcache, l, dst, 0), kv_at(g, g->xvcache, l, src, 0), ns);
        }
        g->src_len[dst] = g->src_len[src];
    }
    g->len[dst] = g->len[src];
    g->prefix[dst] = g->prefix[src];
}

/* att[r] = nn/attention.h's tfm_attn_row of q_r over the slot's cache, per
 * head: causal over positions ≤ pos_r and every position of the slot's
 * prefix, with the model's position bias; the (row, head) pairs run in
 * parallel.  cross: over the slot's source instead (the cross-attention
 * cache, every source position, no position bias), with q_r in rows of D. */
static void attention(tfm_infer *g, int layer, int R, int cross)
{
    const int NH = g->blk.n_head, HS = g->blk.head_dim, D = tfm_block_q_dim(&g->blk);
    const int QKV = tfm_block_qkv_dim(&g->blk);
    /* a decoder's T5 buckets are causal (bidirectional 0) */
    const tfm_attn_t5 t5 = {.table = g->w->dec.rel_bias, .n_buckets = g->cfg.t5_buckets,
                            .max_distance = g->cfg.t5_max_distance};
    const tfm_attn desc = {.NH = NH, .NKV = g->blk.n_kv_head, .HS = HS,
                           .unscaled = g->blk.unscaled,
                           .mask = cross ? TFM_MASK_NONE : TFM_MASK_PREFIX,
                           .alibi = cross ? NULL : g->alibi,
                           .t5 = !cross && t5.table ? &t5 : NULL,
                           .window = cross ? 0 : g->blk.window};
    int nt = threads_now();
    if (nt > g->scores_threads) {
        free(g->scores);
        g->scores = tfm_malloc(sizeof(float) * (size_t)nt * scores_len(g));
        g->scores_threads = nt;
    }
    /* worth threads only when there is real work: long contexts or many rows */
    float *kc = cross ? g->xkcache : g->kcache, *vc = cross ? g->xvcache : g->vcache;
    size_t work = 0;
    for (int r = 0; r < R; r++)
        work += (size_t)(cross ? g->src_len[g->row_slot[r]] : g->row_pos[r] + 1) * D;
    /* a prefix row sees the whole prefix (written before this layer's
     * attention runs: a prefix is appended in one prefill) */
#pragma omp parallel for schedule(dynamic, 1) if (R * NH > 1 && work >= (1 << 16))
    for (int rh = 0; rh < R * NH; rh++) {
        int r = rh / NH, h = rh % NH, kh = tfm_attn_kv_head(&desc, h);
#ifdef _OPENMP
        float *s = g->scores + (size_t)omp_get_thread_num() * scores_len(g);
#else
        float *s = g->scores;
#endif
        int slot = g->row_slot[r];
        const float *q = g->qkv + (size_t)r * (cross ? D : QKV) + h * HS;
        /* self: the cache's rows up to max_len, of which the mask reads
         * only those written (this row and the ones before, the prefix).
         * A ring's rows are positions less a multiple of ring: shifted so,
         * the window's first key is at row lo % ring and the rest follow
         * it (distances, and so the biases, unchanged). */
        int qpos = g->row_pos[r], n_keys = cross ? g->src_len[slot] : g->max_len;
        int prefix = cross ? 0 : g->prefix[slot];
        if (!cross && g->ring) {
            int lo = qpos - desc.window + 1 > 0 ? qpos - desc.window + 1 : 0;
            int shift = lo - lo % g->ring;
            qpos -= shift;
            prefix = prefix > shift ? prefix - shift : 0;
            n_keys = g->self_rows;
        }
        tfm_attn_row(&desc, h, g->att + (size_t)r * D + h * HS, q,
                     kv_at(g, kc, layer, slot, 0) + (size_t)kh * HS,
                     kv_at(g, vc, layer, slot, 0) + (size_t)kh * HS, g->kv_width, qpos,
                     n_keys, prefix, s);
    }
}

/* The forward over R rows whose slot/position are in row_slot/row_pos and
 * tokens in tok; logits of the rows in want[0..nwant) go to logits. */
/* With profiling on, the time since the last mark goes to phase p. */
#define PROF(p)                                                               \
    do {                                                                      \
        if (g->profile) {                                                     \
            double now_ = tfm_now();                                          \
            g->prof_s[p] += now_ - prof_t;                                    \
            prof_t = now_;                                                    \
        }                                                                     \
    } while (0)

static void prof_mark(tfm_infer *g, double *t, tfm_prof_phase p)
{
    if (g->profile) {
        double now = tfm_now();
        g->prof_s[p] += now - *t;
        *t = now;
    }
}

/* x[r] = wte[tok[r]] + the position term of row_pos[r], then the embedding
 * norm: one stack's input (the decoder's, or the encoder's). */
static void embed_rows(tfm_infer *g, int R, const uint32_t *tok, const tfm_embed_weights *e)
{
    const tfm_model_config *c = &g->cfg;
    const int C = c->n_embd;
    float *x = g->x;
    const float s = tfm_emb_scale(c);
    for (int r = 0; r < R; r++) {
        const float *te;
        if (e->wte.f32) {
            te = e->wte.f32 + (size_t)tok[r] * C;
        } else if (e->wte.dtype == TFM_WEIGHTS_Q8_0) { /* stored only: the row widened */
            const tfm_q8 W8 = {e->wte.data, e->wte.scale, c->vocab_size, C};
            tfm_q8_row(g->erow, &W8, (int)tok[r]);
            te = g->erow;
        } else {
            const uint16_t *row = (const uint16_t *)e->wte.data + (size_t)tok[r] * C;
            for (int i = 0; i < C; i++)
                g->erow[i] = bf16_f32(row[i]);
            te = g->erow;
        }
        float *xr = x + (size_t)r * C;
        const float *pe = NULL;
        if (c->pos == TFM_POS_LEARNED) {
            pe = e->wpe + (size_t)g->row_pos[r] * C;
        } else if (c->pos == TFM_POS_SINUSOIDAL) {
            float *row = g->pe + (size_t)r * C;
            /* the row of position p: the table's first p rows are not needed */
            tfm_sinusoidal_row(row, g->row_pos[r], C);
            pe = row;
        }
        tfm_embed_row(xr, te, pe, s, C);
    }
    if (e->lne_w)
        tfm_block_norm(&g->blk, x, g->mean, g->rstd, x, e->lne_w, e->lne_b, R, C);
}

/* x += mlp(x) (pre-LN: of ln_2(x); post-LN: then x = ln_2(x)) over R rows. */
static void mlp_rows(tfm_infer *g, const tfm_layer_weights *L, int R, double *prof_t)
{
    const tfm_model_config *c = &g->cfg;
    const int C = c->n_embd, F = tfm_model_config_ff(c), pre = c->ln == TFM_LN_PRE;
    float *x = g->x, *h = g->h;
    const float *min = x;
    if (pre) {
        tfm_block_norm(&g->blk, h, g->mean, g->rstd, x, L->ln2_w, L->ln2_b, R, C);
        min = h;
    }
    prof_mark(g, prof_t, TFM_PROF_OTHER);
    linear(g, g->fc, min, &L->fc_w, L->fc_b, R, C, F);
    if (g->fc1) /* gated: the linear input beside the gate (fc1_w may be stored only) */
        linear(g, g->fc1, min, &L->fc1_w, L->fc1_b, R, C, F);
    prof_mark(g, prof_t, TFM_PROF_FC);
    tfm_block_ffn_mid(&g->blk, g->fc, g->fc, g->fc1, (size_t)R * F);
    prof_mark(g, prof_t, TFM_PROF_OTHER);
    linear(g, h, g->fc, &L->fcp_w, L->fcp_b, R, F, C);
    prof_mark(g, prof_t, TFM_PROF_FCPROJ);
    tfm_add_inplace(x, h, (size_t)R * C);
    if (!pre)
        tfm_block_norm(&g->blk, x, g->mean, g->rstd, x, L->ln2_w, L->ln2_b, R, C);
}

/* x += xattn(x) over the rows' sources (pre-LN: of ln_x(x); post-LN: then
 * x = ln_x(x)). */
static void cross_rows(tfm_infer *g, const tfm_layer_weights *L, int l, int R)
{
    const tfm_model_config *c = &g->cfg;
    const int C = c->n_embd, D = tfm_model_config_attn_dim(c), pre = c->ln == TFM_LN_PRE;
    float *x = g->x, *h = g->h;
    const float *xin = x;
    if (pre) {
        tfm_block_norm(&g->blk, h, g->mean, g->rstd, x, L->lnx_w, L->lnx_b, R, C);
        xin = h;
    }
    linear(g, g->qkv, xin, &L->xq_w, L->xq_b, R, C, D);
    attention(g, l, R, 1);
    linear(g, h, g->att, &L->xp_w, L->xp_b, R, D, C);
    tfm_add_inplace(x, h, (size_t)R * C);
    if (!pre)
        tfm_block_norm(&g->blk, x, g->mean, g->rstd, x, L->lnx_w, L->lnx_b, R, C);
}

static void forward_rows(tfm_infer *g, int R, const uint32_t *tok,
                         int first_logit_row, float *logits)
{
    const tfm_model_config *c = &g->cfg;
    const tfm_weights *w = g->w;
    const int C = c->n_embd, V = c->vocab_size;
    float *x = g->x, *h = g->h;
    double prof_t = g->profile ? tfm_now() : 0;

    const int HS = g->blk.head_dim, D = tfm_block_q_dim(&g->blk);
    const int QKV = tfm_block_qkv_dim(&g->blk);
    const int KO = tfm_block_qkv_off(&g->blk, 1), VO = tfm_block_qkv_off(&g->blk, 2);
    embed_rows(g, R, tok, &w->dec);
    for (int l = 0; l < c->n_layer; l++) {
        const tfm_layer_weights *L = &w->layers[l];
        const int pre = c->ln == TFM_LN_PRE;
        const float *ain = x;
        if (pre) {
            tfm_block_norm(&g->blk, h, g->mean, g->rstd, x, L->ln1_w, L->ln1_b, R, C);
            ain = h;
        }
        PROF(TFM_PROF_OTHER);
        linear(g, g->qkv, ain, &L->qkv_w, L->qkv_b, R, C, QKV);
        PROF(TFM_PROF_QKV);
        if (c->pos == TFM_POS_ROPE) /* keys enter the cache rotated */
            for (int r = 0; r < R; r++)
                tfm_rope_row(g->qkv + (size_t)r * QKV, g->row_pos[r],
                             g->blk.n_head + g->blk.n_kv_head, HS, &c->rope,
                             g->pe + (size_t)r * HS);
        for (int r = 0; r < R; r++) {
            const float *q = g->qkv + (size_t)r * QKV;
            kv_store(g, g->kcache, l, g->row_slot[r], g->row_pos[r], q + KO);
            kv_store(g, g->vcache, l, g->row_slot[r], g->row_pos[r], q + VO);
        }
        attention(g, l, R, 0);
        PROF(TFM_PROF_ATTN);
        linear(g, h, g->att, &L->proj_w, L->proj_b, R, D, C);
        PROF(TFM_PROF_PROJ);
        tfm_add_inplace(x, h, (size_t)R * C);
        if (!pre)
            tfm_block_norm(&g->blk, x, g->mean, g->rstd, x, L->ln1_w, L->ln1_b, R, C);
        if (L->xq_w.f32) {
            cross_rows(g, L, l, R);
            PROF(TFM_PROF_ATTN);
        }
        mlp_rows(g, L, R, &prof_t);
    }
    if (!logits)
        return;
    int n = R - first_logit_row;
    const float *xf = x + (size_t)first_logit_row * C;
    if (c->ln == TFM_LN_PRE) {
        tfm_block_norm(&g->blk, h, g->mean, g->rstd, xf, w->dec.lnf_w, w->dec.lnf_b, n, C);
        xf = h;
    }
    if (c->head_scale) { /* T5's tied head reads x·C^-0.5 */
        const float hs = tfm_head_scale(c);
        for (size_t i = 0; i < (size_t)n * C; i++)
            h[i] = xf[i] * hs;
        xf = h;
    }
    PROF(TFM_PROF_OTHER);
    const tfm_matrix *H = &w->lm_head;
    switch (H->dtype) {
    case TFM_WEIGHTS_Q8_0: {
        const tfm_q8 W8 = {H->data, H->scale, V, C};
        linear_q8(g, logits, xf, &W8, NULL, n);
        break;
    }
    case TFM_WEIGHTS_BF16: head_rows16(logits, xf, H->data, n, V, C, g->pf_l2); break;
    case TFM_WEIGHTS_F32: head_rows(logits, xf, H->f32, n, V, C, 0); break;
    }
    if (w->head_bias)
        tfm_bias_forward(logits, w->head_bias, n, V);
    PROF(TFM_PROF_HEAD);
}

int tfm_infer_encode_many(tfm_infer *g, int n, const int *slots, const uint32_t *const *src,
                          const int *S, tfm_err *err)
{
    const tfm_model_config *c = &g->cfg;
    const tfm_weights *w = g->w;
    if (c->kind != TFM_KIND_ENCODER_DECODER)
        return tfm_err_set(err, "model.kind %s has no encoder to run over a source",
                           tfm_kind_name(c->kind));
    const int Vs = tfm_model_config_src_vocab(c);
    size_t R = 0;
    int longest = 0;
    for (int s = 0; s < n; s++) {
        TFM_ASSERT(slots[s] >= 0 && slots[s] < g->n_slots);
        if (S[s] < 1 || S[s] > g->max_len)
            return tfm_err_set(err, "source of %d tokens: the model takes 1 to %d", S[s],
                               g->max_len);
        for (int i = 0; i < S[s]; i++)
            if (src[s][i] >= (uint32_t)Vs)
                return tfm_err_set(err, "source token id %u is outside the model's source "
                                   "vocabulary (%d)", src[s][i], Vs);
        R += (size_t)S[s];
        longest = S[s] > longest ? S[s] : longest;
    }
    if (n < 1)
        return 0;
    const int C = c->n_embd, KV = tfm_model_config_kv_dim(c);
    /* the one whole-sequence forward (model/forward.h), its top layer; its
     * weights packed once, so that a source's result does not depend on
     * the sources encoded with it (tensor/gemm.h) */
    if (!g->enc) {
        g->enc = tfm_malloc(sizeof *g->enc);
        if (tfm_fwd_init(g->enc, c, w, TFM_FWD_ENCODER, err) < 0) {
            free(g->enc);
            g->enc = NULL;
            return -1;
        }
        tfm_fwd_pack_weights(g->enc);
    }
    if (R > g->mem_rows) {
        free(g->mem);
        g->mem = tfm_aligned_alloc(sizeof(float) * R * C);
        free(g->mem_tok);
        g->mem_tok = tfm_malloc(sizeof(uint32_t) * R);
        g->mem_rows = R;
    }
    for (int s = 0, r = 0; s < n; r += S[s], s++)
        memcpy(g->mem_tok + r, src[s], sizeof(uint32_t) * (size_t)S[s]);
    float *hidden[g->enc->n_layer + 1];
    memset(hidden, 0, sizeof hidden);
    hidden[g->enc->n_layer] = g->mem;
    tfm_fwd_batch b = {.n = n, .len = S, .tok = g->mem_tok, .hidden = hidden};
    if (tfm_fwd_run(g->enc, &b, err) < 0)
        return -1;
    /* every decoder layer's keys and values of each memory, once; source by
     * source, as linear's path (gemv or BLIS) depends on the rows */
    ensure_rows(g, longest);
    for (int s = 0, r = 0; s < n; r += S[s], s++) {
        const float *mem = g->mem + (size_t)r * C;
        const int slot = slots[s];
        for (int l = 0; l < c->n_layer; l++) {
            const tfm_layer_weights *L = &w->layers[l];
            linear(g, g->qkv, mem, &L->xkv_w, L->xkv_b, S[s], C, 2 * KV);
            for (int i = 0; i < S[s]; i++) {
                memcpy(kv_at(g, g->xkcache, l, slot, i), g->qkv + (size_t)i * 2 * KV,
                       sizeof(float) * KV);
                memcpy(kv_at(g, g->xvcache, l, slot, i), g->qkv + (size_t)i * 2 * KV + KV,
                       sizeof(float) * KV);
            }
        }
        g->src_len[slot] = S[s];
        g->len[slot] = 0;
        g->prefix[slot] = 0;
    }
    return 0;
}

int tfm_infer_encode(tfm_infer *g, int slot, const uint32_t *src, int S, tfm_err *err)
{
    return tfm_infer_encode_many(g, 1, &slot, &src, &S, err);
}

/* A slot of an encoder-decoder must have its source before it decodes. */
static int check_source(const tfm_infer *g, int slot, tfm_err *err)
{
    if (g->src_len && !g->src_len[slot])
        return tfm_err_set(err, "an encoder-decoder decodes against a source: encode one "
                                "first");
    return 0;
}

static int check_token(const tfm_infer *g, uint32_t t, tfm_err *err)
{
    if (t >= (uint32_t)g->cfg.vocab_size)
        return tfm_err_set(err, "token id %u is outside the model's vocabulary (%d)",
                           t, g->cfg.vocab_size);
    return 0;
}

int tfm_infer_prefill(tfm_infer *g, int slot, const uint32_t *tokens,
                          int n, float *logits, tfm_err *err)
{
    TFM_ASSERT(slot >= 0 && slot < g->n_slots);
    if (n <= 0)
        return 0;
    if (check_source(g, slot, err) < 0)
        return -1;
    if (g->len[slot] + n > g->max_len)
        return tfm_err_set(err, "context length %d exceeded (%d + %d tokens)",
                           g->max_len, g->len[slot], n);
    for (int i = 0; i < n; i++)
        if (check_token(g, tokens[i], err) < 0)
            return -1;
    if (g->ring && g->prefix[slot] > g->chunk)
        return tfm_err_set(err, "a prefix-LM prefix of %d tokens is longer than a sliding "
                           "window's cache appends at once (%d)", g->prefix[slot], g->chunk);
    /* a ring takes chunk rows at a time: their windows' keys all stay */
    const int step = g->ring ? g->chunk : n;
    for (int i0 = 0; i0 < n; i0 += step) {
        const int m = n - i0 < step ? n - i0 : step;
        ensure_rows(g, m);
        for (int i = 0; i < m; i++) {
            g->row_slot[i] = slot;
            g->row_pos[i] = g->len[slot] + i;
        }
        forward_rows(g, m, tokens + i0, m - 1, i0 + m == n ? logits : NULL);
        g->len[slot] += m;
    }
    return 0;
}

int tfm_infer_prefill_prefix(tfm_infer *g, int slot, const uint32_t *tokens, int n,
                             int n_prefix, float *logits, tfm_err *err)
{
    TFM_ASSERT(slot >= 0 && slot < g->n_slots && n_prefix >= 0 && n_prefix <= n);
    if (g->cfg.kind != TFM_KIND_DECODER)
        return tfm_err_set(err, "a prefix-LM prompt is for decoders, not model.kind %s",
                           tfm_kind_name(g->cfg.kind));
    if (g->len[slot] > 0)
        return tfm_err_set(err, "a prefix-LM prompt starts a sequence: the slot holds %d "
                           "tokens already", g->len[slot]);
    g->prefix[slot] = n_prefix;
    if (tfm_infer_prefill(g, slot, tokens, n, logits, err) < 0) {
        g->prefix[slot] = 0;
        return -1;
    }
    return 0;
}

/* The prefetch hint of bfloat16 products (prefetch_run's l2), chosen by
 * the first decode steps: they alternate the two hints, PF_TRIALS steps
 * each, all of the same row count, and the hint of the faster fastest step
 * stays.  The numbers are the same either way: the hint only moves where
 * the weights wait to be read. */
enum { PF_TRIALS = 4 };

static int pf_timing(const tfm_infer *g, int rows)
{
    if (g->pf_steps >= 2 * PF_TRIALS || rows > GEMV_ROWS || (g->pf_steps && rows != g->pf_rows))
        return 0;
    const tfm_weights *w = g->w;
    return w->lm_head.dtype == TFM_WEIGHTS_BF16 ||
           (w->n_layer && w->layers[0].fc_w.dtype == TFM_WEIGHTS_BF16);
}

static double pf_time_begin(tfm_infer *g, int rows)
{
    if (!pf_timing(g, rows))
        return 0.0;
    g->pf_rows = rows;
    g->pf_l2 = g->pf_steps % 2;
    return tfm_now();
}

static void pf_time_end(tfm_infer *g, double t0)
{
    if (t0 == 0.0)
        return;
    double t = tfm_now() - t0;
    int h = g->pf_steps % 2;
    if (g->pf_steps < 2 || t < g->pf_best[h])
        g->pf_best[h] = t;
    if (++g->pf_steps == 2 * PF_TRIALS)
        g->pf_l2 = g->pf_best[1] < g->pf_best[0];
}

const char *tfm_infer_prefetch(const tfm_infer *g)
{
    return g->pf_steps < 2 * PF_TRIALS ? NULL : g->pf_l2 ? "L2" : "L1";
}

int tfm_infer_step(tfm_infer *g, int n, const uint32_t *tokens,
                       const int *slots, float *logits, tfm_err *err)
{
    ensure_rows(g, n);
    for (int i = 0; i < n; i++) {
        int s = slots[i];
        TFM_ASSERT(s >= 0 && s < g->n_slots);
        if (g->len[s] >= g->max_len)
            return tfm_err_set(err, "context length %d exceeded", g->max_len);
        if (check_source(g, s, err) < 0)
            return -1;
        if (check_token(g, tokens[i], err) < 0)
            return -1;
        g->row_slot[i] = s;
        g->row_pos[i] = g->len[s];
    }
    double t0 = pf_time_begin(g, n);
    forward_rows(g, n, tokens, 0, logits);
    pf_time_end(g, t0);
    for (int i = 0; i < n; i++)
        g->len[slots[i]]++;
    return 0;
}
