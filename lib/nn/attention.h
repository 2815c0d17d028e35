/* Multi-head scaled dot-product attention, forward and backward.
 *
 * One function serves self-attention (q, k, v are column slices of one
 * fused projection, e.g. GPT's c_attn output with row stride 3C) and
 * cross-attention (k, v from an encoder's output, Tk != Tq): each operand is
 * a pointer plus a row stride, and head h uses columns [h·HS, (h+1)·HS).
 * Grouped-query attention: with NKV < NH key/value heads, query head h
 * reads key/value head h / (NH / NKV) (tfm_attn_kv_head), and backward
 * sums the gradients of a group's query heads into their shared dK, dV
 * (in head order: the sums do not depend on the threads).
 * Masks: causal (query i sees keys j ≤ i + Tk - Tq: queries are the last Tq
 * positions, so a cache of earlier keys works), none (encoders), prefix-LM,
 * combined with optional per-sequence key lengths (padding: keys j ≥
 * key_len[b] unseen), for packed documents per-query first keys, and a
 * sliding window.
 * Optional position biases on the scores: ALiBi slopes or T5's learned
 * relative buckets (whose gradient backward accumulates).
 *
 * Per (batch, head): S = Q·Kᵀ·scale (+ position bias) with masked entries
 * excluded (−∞ before the softmax), scale = 1/√HS (1 with unscaled: T5),
 * P = softmax(S), optional dropout on P, Y = P·V.  P is saved for backward;
 * dropout masks are regenerated from (seed, index), not stored.
 * The (batch, head) pairs run on OpenMP threads.  Two implementations give
 * the same results: register-blocked fused loops over the visible triangle
 * (head size a multiple of 16 and Tq·Tk·HS ≤ 256·256·64: about twice as fast
 * as BLIS at T = 64 and T = 256, measured), else one single-threaded BLIS
 * product per head.  tfm_attn.impl forces one (tests, measurements).
 * All buffers are caller-owned. */
#ifndef TFM_NN_ATTENTION_H
#define TFM_NN_ATTENTION_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

typedef enum tfm_mask_kind {
    TFM_MASK_NONE,    /* full: encoders, cross-attention */
    TFM_MASK_CAUSAL,  /* query i sees keys j <= i + Tk - Tq */
    TFM_MASK_PREFIX,  /* prefix-LM: every query sees keys j < prefix_len[b],
                         and causally beyond (Tq == Tk) */
} tfm_mask_kind;

/* Relative position bias of T5: score(i, j) += table[h·n_buckets +
 * bucket(j - i)] (tfm_t5_bucket). */
typedef struct tfm_attn_t5 {
    const float *table;  /* [NH, n_buckets] */
    float *dtable;       /* [NH, n_buckets]: backward ADDS the gradient here
                            (NULL: not wanted, a frozen table) */
    int n_buckets, max_distance;
    int bidirectional;   /* 1: encoders (half the buckets for j > i) */
} tfm_attn_t5;

/* Which implementation runs. */
typedef enum tfm_attn_impl {
    TFM_ATTN_AUTO,   /* fused when it fits (below), else BLAS */
    TFM_ATTN_BLAS,
    TFM_ATTN_FUSED,
    TFM_ATTN_TILED,  /* forward only, att NULL: blocks of queries against
                        blocks of keys with an online softmax (as
                        FlashAttention computes it): scratch and memory
                        O(Tq + Tk) per thread, never Tq×Tk; only the
                        allowed blocks are computed; no dropout */
} tfm_attn_impl;

/* From this many keys on, an inference forward that keeps no P takes the
 * tiled path (callers choose it: tfm_attn_tiled_wanted): below it the
 * one-pass paths, whose rounding the path-equivalence and reference tests
 * pin, stay; above it a Tq×Tk buffer per head (16 MB at 2,048) costs more
 * than the tiles.  The tiled result equals the one-pass result to float
 * rounding (relative 1e-6 on the tests' cases), not to the bit. */
#define TFM_ATTN_TILED_MIN_KEYS 1024

typedef struct tfm_attn {
    int B, Tq, Tk, NH, HS;
    int NKV;             /* key/value heads, dividing NH; 0 means NH */
    tfm_mask_kind mask;
    const int *key_len;  /* [B] valid keys per sequence, or NULL (all) */
    float dropout;       /* on the probabilities; 0 = off */
    uint64_t seed;       /* dropout stream */
    const int *prefix_len; /* [B] for TFM_MASK_PREFIX */
    /* Packed documents (block-diagonal, with a causal mask): query i of
     * sequence b sees only keys j >= doc_start[b·Tq + i], the first
     * position of its document.  NULL: no packing. */
    const int *doc_start;
    /* Position biases added to the scaled scores, for self-attention
     * (query i stands at position Tk - Tq + i, as under the causal mask):
     * ALiBi, score(i, j) -= alibi[h]·|i - j| (slopes: tfm_alibi_slopes);
     * T5, a learned bias per head and bucket of the distance.  NULL: none. */
    const float *alibi;  /* [NH] */
    const tfm_attn_t5 *t5;
    /* Sliding window: query i (at position qpos = Tk - Tq + i) sees only
     * keys j with qpos - j < window, and under no causal or prefix mask
     * also j - qpos < window (Mistral's causal window of `window` keys
     * ending at the query; Longformer's symmetric one).  0: none. */
    int window;
    tfm_attn_impl impl;  /* 0: TFM_ATTN_AUTO */
    int unscaled;        /* 1: scores are Q·Kᵀ without 1/√HS (T5) */
} tfm_attn;

/* The factor of Q·Kᵀ: 1/√HS, or 1 when unscaled.  Every attention (the
 * cached decode step's too) takes it from here. */
static inline float tfm_attn_scale(const tfm_attn *a)
{
    return a->unscaled ? 1.0f : 1.0f / sqrtf((float)a->HS);
}

/* Key/value heads, and the one query head h reads (k and v hold
 * tfm_attn_kv_heads heads of HS columns). */
static inline int tfm_attn_kv_heads(const tfm_attn *a)
{
    return a->NKV > 0 ? a->NKV : a->NH;
}

static inline int tfm_attn_kv_head(const tfm_attn *a, int h)
{
    return h / (a->NH / tfm_attn_kv_heads(a));
}

/* The ALiBi paper's head slopes: for n a power of two, 2^(-8k/n) for k =
 * 1..n; otherwise those of the largest power of two below n, then every
 * other slope of twice that power, as in the paper's code. */
void tfm_alibi_slopes(float *slopes, int n);

/* T5's bucket of a relative position rel = j - i (key minus query), as
 * HuggingFace's T5 computes it: exact buckets for small distances,
 * logarithmic ones up to max_distance, the last bucket beyond; with
 * bidirectional, half the buckets for rel > 0; else (causal) rel > 0 maps
 * to bucket 0. */
int tfm_t5_bucket(int rel, int bidirectional, int n_buckets, int max_distance);

/* The position biases of one (query, key) pair, rel = j - i (key minus
 * query position): every attention (the whole-sequence one here and the
 * cached decode step's, tfm_attn_row) adds these to its scaled scores. */
static inline float tfm_alibi_bias(float slope, int rel)
{
    return -(slope * (float)abs(rel));
}

static inline float tfm_t5_bias(const tfm_attn_t5 *t5, int h, int rel)
{
    return t5->table[(size_t)h * t5->n_buckets +
                     tfm_t5_bucket(rel, t5->bidirectional, t5->n_buckets, t5->max_distance)];
}

/* The cached decode step's attention: one query row q (head h: HS floats)
 * at position qpos over the key and value rows k[j·ld], v[j·ld] (the
 * columns of head h's key/value head, tfm_attn_kv_head; j < n_keys, the
 * rows the cache holds), of a's scale, position
 * biases (alibi, t5) and mask: none sees all n_keys, causal keys j ≤ qpos,
 * prefix also every j < prefix (0: causal), each within the window; of a,
 * only HS, unscaled, mask, alibi, t5 and window are read.  out[0:HS) = softmax(scores)·V; s holds the scores (at least
 * as many floats as keys seen).  Single-threaded: the caller runs rows and
 * heads on its threads.  Keys are read in place, so a cache of earlier keys
 * needs nothing redone when a row is appended. */
void tfm_attn_row(const tfm_attn *a, int h, float *out, const float *q, const float *k,
                  const float *v, size_t ld, int qpos, int n_keys, int prefix, float *s);

/* Floats of scratch the calls below need (for the current OpenMP thread
 * count). */
size_t tfm_attn_scratch_floats(const tfm_attn *a);

/* out[b, i, h·HS + d] (row stride ldo) = attention; att: [B, NH, Tq, Tk]
 * receives P (masked entries 0), except with TFM_ATTN_TILED (att unused,
 * may be NULL).  A query that sees no key gets zeros. */
void tfm_attn_forward(const tfm_attn *a, float *out, int ldo, float *att,
                      const float *q, int ldq, const float *k, int ldk,
                      const float *v, int ldv, float *scratch);

/* The implementation an inference forward keeping no P should ask for
 * at Tk keys: TFM_ATTN_TILED past TFM_ATTN_TILED_MIN_KEYS, else dflt. */
static inline tfm_attn_impl tfm_attn_tiled_wanted(int Tk, tfm_attn_impl dflt)
{
    return Tk > TFM_ATTN_TILED_MIN_KEYS ? TFM_ATTN_TILED : dflt;
}

/* Writes (=) dq, dk, dv (same layouts as q, k, v) from dout and the saved
 * P.  For self-attention, dq/dk/dv are slices of one fused gradient.  With
 * grouped heads, dk and dv are each head group's sum. */
void tfm_attn_backward(const tfm_attn *a, float *dq, int lddq, float *dk, int lddk,
                       float *dv, int lddv, const float *dout, int lddo,
                       const float *att, const float *q, int ldq, const float *k,
                       int ldk, const float *v, int ldv, float *scratch);

#endif
