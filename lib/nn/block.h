/* One description of a transformer block, which every path that applies a
 * block follows: the training forward and backward (model/transformer.c),
 * the packed whole-sequence forward (model/forward.c) and the cached decode
 * step (model/decode.c).  Each piece it names is implemented once, in nn/
 * and tensor/: the norm (nn/norm.h), the feed-forward's elementwise stage
 * (nn/ffn.h, tensor/ops.h's activations), the positions (nn/position.h:
 * sinusoids and RoPE, a table or one row) and the attention with its scale
 * and position biases (nn/attention.h: whole sequences, and one query row
 * over a cache, tfm_attn_row).  model/transformer.h's tfm_model_block derives it from
 * a model's configuration.
 *
 *   pre-norm:   x = x + attn(norm_1(x)); [x = x + xattn(norm_x(x), M)];
 *               x = x + ffn(norm_2(x))
 *   post-norm:  x = norm_1(x + attn(x)); [x = norm_x(x + xattn(x, M))];
 *               x = norm_2(x + ffn(x))
 *   ffn(x) = mid(x·W_0 + b_0, x·W_1 + b_1)·W_proj + b, mid as nn/ffn.h
 *            (plain: act(u), no W_1)
 *   attn: n_head query heads and n_kv_head key/value heads of head_dim
 *         each (grouped-query attention; n_kv_head 1: multi-query), query
 *         head h reading key/value head h / (n_head / n_kv_head).  Every
 *         attention sublayer is laid out alike: the fused self-attention
 *         projection's columns are q | k | v (tfm_block_qkv_dim wide, part
 *         j at tfm_block_qkv_off), the cross-attention's c_q is q and its
 *         c_kv is k | v (2·tfm_block_kv_dim). */
#ifndef TFM_NN_BLOCK_H
#define TFM_NN_BLOCK_H

#include <stddef.h>

#include "nn/ffn.h"
#include "nn/norm.h"
#include "tensor/ops.h"

typedef struct tfm_block {
    int pre;             /* 1: pre-norm (GPT-2, T5); 0: post-norm (BERT) */
    tfm_norm_kind norm;  /* of every norm of the stack (norm_1, norm_x,
                            norm_2, the final and the embedding norm) */
    float eps;
    tfm_ffn_kind ffn;
    tfm_act_kind act;    /* the plain feed-forward's activation */
    int unscaled;        /* attention scores without 1/√HS (tfm_attn) */
    int n_head;          /* query heads */
    int n_kv_head;       /* key/value heads, dividing n_head */
    int head_dim;        /* HS, each head's width */
    int window;          /* sliding-window self-attention (tfm_attn.window);
                            0: none; cross-attention has none */
} tfm_block;

/* The widths of the attention's projections: q (and the heads
 * concatenated), k or v, and the fused q | k | v.  The one place they are
 * spelled out. */
static inline int tfm_block_q_dim(const tfm_block *blk)
{
    return blk->n_head * blk->head_dim;
}

static inline int tfm_block_kv_dim(const tfm_block *blk)
{
    return blk->n_kv_head * blk->head_dim;
}

static inline int tfm_block_qkv_dim(const tfm_block *blk)
{
    return tfm_block_q_dim(blk) + 2 * tfm_block_kv_dim(blk);
}

/* Part j (0 q, 1 k, 2 v) of the fused q | k | v: its first column and
 * width. */
static inline int tfm_block_qkv_off(const tfm_block *blk, int j)
{
    return j == 0 ? 0 : tfm_block_q_dim(blk) + (j - 1) * tfm_block_kv_dim(blk);
}

static inline int tfm_block_qkv_width(const tfm_block *blk, int j)
{
    return j == 0 ? tfm_block_q_dim(blk) : tfm_block_kv_dim(blk);
}

/* A norm of the block (b NULL for rmsnorm); as nn/norm.h's. */
static inline void tfm_block_norm(const tfm_block *blk, float *out, float *mean, float *rstd,
                                  const float *inp, const float *w, const float *b, int N,
                                  int C)
{
    tfm_norm_forward(blk->norm, out, mean, rstd, inp, w, b, N, C, blk->eps);
}

static inline void tfm_block_norm_backward(const tfm_block *blk, float *dinp, float *dw,
                                           float *db, const float *dout, const float *inp,
                                           const float *w, const float *mean,
                                           const float *rstd, int N, int C)
{
    tfm_norm_backward(blk->norm, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

/* The feed-forward's middle, n elements: out = act(u) (plain; lin unused)
 * or act(u) ⊙ lin (gated).  out may alias u. */
static inline void tfm_block_ffn_mid(const tfm_block *blk, float *out, const float *u,
                                     const float *lin, size_t n)
{
    if (tfm_ffn_gated(blk->ffn))
        tfm_glu_forward(blk->ffn, out, u, lin, n);
    else
        tfm_act_forward(blk->act, out, u, n);
}

/* Its backward: du (written; may alias dout) and, gated, dlin (written). */
static inline void tfm_block_ffn_mid_backward(const tfm_block *blk, float *du, float *dlin,
                                              const float *dout, const float *u,
                                              const float *lin, size_t n)
{
    if (tfm_ffn_gated(blk->ffn))
        tfm_glu_backward(blk->ffn, du, dlin, dout, u, lin, n);
    else
        tfm_act_backward(blk->act, du, dout, u, n);
}

#endif
