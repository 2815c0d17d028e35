#include "config.h"

#include "model/transformer.h"
#include "model/head.h"
#include "nn/attention.h"
#include "nn/lora.h"
#include "nn/position.h"
#include "tensor/gemm.h"
#include "tensor/ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- config -------------------------------------------------------------- */

void tfm_model_config_default(tfm_model_config *c)
{
    memset(c, 0, sizeof *c);
    c->forced_bos = -1;
    c->forced_eos = -1;
    c->attn_dropout = -1.0f;
    c->emb_dropout = -1.0f;
    c->n_layer = 12;
    c->n_head = 12;
    c->n_embd = 768;
    c->block_size = 1024;
    c->vocab_size = 50257;
    c->dropout = 0.0f;
    c->tie_embeddings = 1;
    c->ln = TFM_LN_PRE;
    c->act = TFM_ACT_GELU_TANH;
    c->ln_eps = 1e-5f;
    c->bias = 1;
    c->label_smoothing = 0.0f;
    c->kind = TFM_KIND_DECODER;
    c->pos = TFM_POS_LEARNED;
    c->d_ff = 0;
    c->rope = (tfm_rope){10000.0f, TFM_ROPE_DEFAULT, 1.0f, 1.0f, 4.0f, 8192};
    c->t5_buckets = 32;
    c->t5_max_distance = 128;
    c->tie_source = 1;
    c->decoder_start = -1;
}

float tfm_head_scale(const tfm_model_config *c)
{
    return c->head_scale ? 1.0f / sqrtf((float)c->n_embd) : 1.0f;
}

const char *tfm_kind_name(tfm_kind kind)
{
    return kind == TFM_KIND_ENCODER           ? "encoder"
           : kind == TFM_KIND_ENCODER_DECODER ? "encoder-decoder"
                                              : "decoder";
}

const char *tfm_pos_name(tfm_pos pos)
{
    static const char *const names[] = {"learned", "sinusoidal", "rope", "alibi", "t5"};
    return pos >= TFM_POS_LEARNED && pos <= TFM_POS_T5 ? names[pos] : "?";
}

tfm_block tfm_model_block(const tfm_model_config *c)
{
    tfm_act_kind act = c->act == TFM_ACT_GELU_EXACT ? TFM_ACT_KIND_GELU_EXACT
                       : c->act == TFM_ACT_RELU     ? TFM_ACT_KIND_RELU
                                                    : TFM_ACT_KIND_GELU_TANH;
    return (tfm_block){.pre = c->ln == TFM_LN_PRE, .norm = c->norm, .eps = c->ln_eps,
                       .ffn = c->ffn, .act = act, .unscaled = c->attn_unscaled,
                       .n_head = c->n_head, .n_kv_head = tfm_model_config_kv_heads(c),
                       .head_dim = tfm_model_config_head_dim(c), .window = c->window};
}

int tfm_model_config_emb_dim(const tfm_model_config *c)
{
    return c->emb_dim > 0 ? c->emb_dim : c->n_embd;
}

/* A factorised embedding: tables E wide, projected to C (at E = C too:
 * ALBERT's projection is there whatever the widths) */
static int factorised(const tfm_model_config *c)
{
    return c->emb_dim > 0;
}

int tfm_model_config_ff(const tfm_model_config *c)
{
    return c->d_ff > 0 ? c->d_ff : 4 * c->n_embd;
}

int tfm_model_config_head_dim(const tfm_model_config *c)
{
    return c->head_dim > 0 ? c->head_dim : c->n_embd / c->n_head;
}

int tfm_model_config_kv_heads(const tfm_model_config *c)
{
    return c->n_kv_head > 0 ? c->n_kv_head : c->n_head;
}

int tfm_model_config_attn_dim(const tfm_model_config *c)
{
    const tfm_block blk = tfm_model_block(c);
    return tfm_block_q_dim(&blk);
}

int tfm_model_config_kv_dim(const tfm_model_config *c)
{
    const tfm_block blk = tfm_model_block(c);
    return tfm_block_kv_dim(&blk);
}

int tfm_model_config_qkv_dim(const tfm_model_config *c)
{
    const tfm_block blk = tfm_model_block(c);
    return tfm_block_qkv_dim(&blk);
}

int tfm_model_config_enc_layers(const tfm_model_config *c)
{
    if (c->kind != TFM_KIND_ENCODER_DECODER)
        return 0;
    return c->n_enc_layer > 0 ? c->n_enc_layer : c->n_layer;
}

int tfm_model_config_src_vocab(const tfm_model_config *c)
{
    return c->src_vocab_size > 0 ? c->src_vocab_size : c->vocab_size;
}

int tfm_model_config_drops(const tfm_model_config *c)
{
    return c->dropout > 0.0f || c->attn_dropout > 0.0f || c->emb_dropout > 0.0f ||
           c->ffn_dropout > 0.0f || c->final_dropout > 0.0f || c->lora_dropout > 0.0f;
}

int tfm_model_config_check(const tfm_model_config *c, tfm_err *err)
{
    if (c->n_layer < 1 || c->n_layer > 1000)
        return tfm_err_set(err, "n_layer %d is out of range [1, 1000]", c->n_layer);
    if (c->n_head < 1 || c->n_head > 1024)
        return tfm_err_set(err, "n_head %d is out of range [1, 1024]", c->n_head);
    if (c->n_embd < 1 || c->n_embd > 65536)
        return tfm_err_set(err, "n_embd %d is out of range [1, 65536]", c->n_embd);
    if (c->head_dim < 0 || c->head_dim > 65536)
        return tfm_err_set(err, "head_dim %d is out of range [0, 65536]", c->head_dim);
    if (!c->head_dim && c->n_embd % c->n_head)
        return tfm_err_set(err, "n_embd %d is not a multiple of n_head %d", c->n_embd,
                           c->n_head);
    if ((long)c->n_head * tfm_model_config_head_dim(c) > 1 << 20)
        return tfm_err_set(err, "n_head %d x head_dim %d is too wide", c->n_head,
                           tfm_model_config_head_dim(c));
    if (c->window < 0)
        return tfm_err_set(err, "attention window %d is negative", c->window);
    if (c->n_kv_head < 0 || c->n_kv_head > c->n_head || c->n_head % tfm_model_config_kv_heads(c))
        return tfm_err_set(err, "n_kv_head %d must divide n_head %d (0: n_head)", c->n_kv_head,
                           c->n_head);
    if (c->block_size < 1 || c->block_size > 1 << 20)
        return tfm_err_set(err, "block_size %d is out of range [1, 1048576]", c->block_size);
    if (c->vocab_size < 1 || c->vocab_size > 1 << 24)
        return tfm_err_set(err, "vocab_size %d is out of range [1, 16777216]", c->vocab_size);
    if (!(c->dropout >= 0.0f && c->dropout < 1.0f))
        return tfm_err_set(err, "dropout %g is out of range [0, 1)", c->dropout);
    if (!(c->ffn_dropout >= 0.0f && c->ffn_dropout < 1.0f))
        return tfm_err_set(err, "ffn_dropout %g is out of range [0, 1)", c->ffn_dropout);
    if (!(c->final_dropout >= 0.0f && c->final_dropout < 1.0f))
        return tfm_err_set(err, "final_dropout %g is out of range [0, 1)", c->final_dropout);
    if (!(c->attn_dropout == -1.0f || (c->attn_dropout >= 0.0f && c->attn_dropout < 1.0f)))
        return tfm_err_set(err, "attn_dropout %g is neither -1 nor in [0, 1)", c->attn_dropout);
    if (!(c->emb_dropout == -1.0f || (c->emb_dropout >= 0.0f && c->emb_dropout < 1.0f)))
        return tfm_err_set(err, "emb_dropout %g is neither -1 nor in [0, 1)", c->emb_dropout);
    if (!(c->label_smoothing >= 0.0f && c->label_smoothing < 1.0f))
        return tfm_err_set(err, "label_smoothing %g is out of range [0, 1)",
                           c->label_smoothing);
    if (!(c->ln_eps > 0.0f && c->ln_eps < 1.0f))
        return tfm_err_set(err, "layernorm eps %g is out of range (0, 1)", c->ln_eps);
    if (c->ln != TFM_LN_PRE && c->ln != TFM_LN_POST)
        return tfm_err_set(err, "unknown layer norm placement %d", (int)c->ln);
    if (c->act != TFM_ACT_GELU_TANH && c->act != TFM_ACT_GELU_EXACT && c->act != TFM_ACT_RELU)
        return tfm_err_set(err, "unknown activation %d", (int)c->act);
    if (c->norm != TFM_NORM_LAYER && c->norm != TFM_NORM_RMS)
        return tfm_err_set(err, "unknown norm kind %d", (int)c->norm);
    if (c->ffn != TFM_FFN_PLAIN && c->ffn != TFM_FFN_GEGLU && c->ffn != TFM_FFN_SWIGLU)
        return tfm_err_set(err, "unknown feed-forward kind %d", (int)c->ffn);
    if (c->attn_unscaled != 0 && c->attn_unscaled != 1)
        return tfm_err_set(err, "attn_unscaled %d is not 0 or 1", c->attn_unscaled);
    if (c->kind != TFM_KIND_DECODER && c->kind != TFM_KIND_ENCODER &&
        c->kind != TFM_KIND_ENCODER_DECODER)
        return tfm_err_set(err, "unknown model kind %d", (int)c->kind);
    if (c->kind == TFM_KIND_ENCODER_DECODER) {
        if (c->n_enc_layer < 0 || c->n_enc_layer > 1000)
            return tfm_err_set(err, "n_enc_layer %d is out of range [0, 1000]", c->n_enc_layer);
        if (c->src_vocab_size < 0 || c->src_vocab_size > 1 << 24)
            return tfm_err_set(err, "src_vocab_size %d is out of range [0, 16777216]",
                               c->src_vocab_size);
        if (c->tie_source && c->src_vocab_size && c->src_vocab_size != c->vocab_size)
            return tfm_err_set(err, "tie_source with src_vocab_size %d != vocab_size %d: a "
                               "shared embedding needs one vocabulary", c->src_vocab_size,
                               c->vocab_size);
    } else if (c->n_enc_layer || c->src_vocab_size || !c->tie_source) {
        return tfm_err_set(err, "n_enc_layer, tie_source and src_vocab_size are for "
                           "encoder-decoder models, not kind %s", tfm_kind_name(c->kind));
    }
    if (c->pos < TFM_POS_LEARNED || c->pos > TFM_POS_T5)
        return tfm_err_set(err, "unknown position scheme %d", (int)c->pos);
    if (c->d_ff < 0 || c->d_ff > 1 << 20)
        return tfm_err_set(err, "d_ff %d is out of range [0, 1048576]", c->d_ff);
    int hs = tfm_model_config_head_dim(c);
    if (c->pos == TFM_POS_ROPE && hs % 2)
        return tfm_err_set(err, "positions rope needs an even head size, not %d", hs);
    if (c->pos == TFM_POS_ROPE && !(c->rope.base > 1.0f))
        return tfm_err_set(err, "rope_base %g must be greater than 1", c->rope.base);
    if (c->pos == TFM_POS_ROPE && c->rope.scaling != TFM_ROPE_DEFAULT &&
        !(c->rope.factor > 0 && c->rope.original_context > 0 && c->rope.low_freq_factor > 0 &&
          c->rope.high_freq_factor > c->rope.low_freq_factor))
        return tfm_err_set(err, "rope scaling needs factor > 0, original_context > 0 and "
                           "high_freq_factor > low_freq_factor > 0");
    if (c->pos == TFM_POS_SINUSOIDAL && c->n_embd % 2)
        return tfm_err_set(err, "positions sinusoidal needs an even n_embd, not %d", c->n_embd);
    if (c->pos == TFM_POS_T5 && (c->t5_buckets < 2 || c->t5_buckets > 4096 ||
                                 c->t5_max_distance < 2 || c->t5_max_distance > 1 << 20))
        return tfm_err_set(err, "t5_buckets %d or t5_max_distance %d is out of range",
                           c->t5_buckets, c->t5_max_distance);
    /* the logarithmic buckets span (exact, max_distance]: it must not be empty */
    int exact = (c->kind != TFM_KIND_DECODER ? c->t5_buckets / 2 : c->t5_buckets) / 2;
    if (c->pos == TFM_POS_T5 && (exact < 1 || c->t5_max_distance <= exact))
        return tfm_err_set(err, "t5_max_distance %d must exceed the %d exact buckets "
                           "(a quarter of t5_buckets in encoders, a half in decoders)",
                           c->t5_max_distance, exact);
    if (c->n_segments < 0 || c->n_segments > 1024)
        return tfm_err_set(err, "segments %d is out of range [0, 1024]", c->n_segments);
    if (c->emb_dim < 0 || c->emb_dim > 65536)
        return tfm_err_set(err, "embedding_size %d is out of range [0, 65536]", c->emb_dim);
    /* the factorised embedding is ALBERT's and ELECTRA's: an encoder's,
     * with learned (or no) positions added at width E */
    if (factorised(c) && (c->kind != TFM_KIND_ENCODER || c->pos == TFM_POS_SINUSOIDAL ||
                          c->emb_scale))
        return tfm_err_set(err, "embedding_size %d (a factorised embedding) is for encoders "
                           "without sinusoidal positions or emb_scale", c->emb_dim);
    if (c->pooler_act < TFM_POOL_TANH || c->pooler_act > TFM_POOL_GELU)
        return tfm_err_set(err, "unknown pooler activation %d", c->pooler_act);
    if (c->n_segments && c->kind != TFM_KIND_ENCODER)
        return tfm_err_set(err, "segments %d on %s: segment embeddings are for "
                           "encoders (kind: encoder)", c->n_segments,
                           c->kind == TFM_KIND_DECODER ? "a decoder" : "an encoder-decoder");
    if (c->decoder_start < -1 || c->decoder_start >= c->vocab_size)
        return tfm_err_set(err, "decoder_start %d is outside the vocabulary (%d)",
                           c->decoder_start, c->vocab_size);
    if (c->forced_bos < -1 || c->forced_bos >= c->vocab_size)
        return tfm_err_set(err, "forced_bos %d is outside the vocabulary (%d)",
                           c->forced_bos, c->vocab_size);
    if (c->forced_eos < -1 || c->forced_eos >= c->vocab_size)
        return tfm_err_set(err, "forced_eos %d is outside the vocabulary (%d)",
                           c->forced_eos, c->vocab_size);
    if ((c->forced_bos >= 0 || c->source_bos) && c->kind != TFM_KIND_ENCODER_DECODER)
        return tfm_err_set(err, "forced_bos and source_bos are for encoder-decoders, not "
                                "kind %s", tfm_kind_name(c->kind));
    for (int h = 0; tfm_head_parts[h]; h++) {
        const tfm_head_part *hp = tfm_head_parts[h];
        if (hp->check_config && hp->check_config(c, err) < 0)
            return -1;
        if (c->kind == TFM_KIND_ENCODER_DECODER && hp->has(c))
            return tfm_err_set(err, "the %s head is for encoders and decoders, not "
                               "encoder-decoders", hp->name);
    }
    if (c->lora_r < 0 || c->lora_r > 65536)
        return tfm_err_set(err, "lora rank %d is out of range [0, 65536]", c->lora_r);
    if (c->lora_r && !(c->lora_alpha > 0.0f))
        return tfm_err_set(err, "lora alpha %g must be positive", c->lora_alpha);
    if (c->lora_r && !(c->lora_dropout >= 0.0f && c->lora_dropout < 1.0f))
        return tfm_err_set(err, "lora dropout %g is out of range [0, 1)", c->lora_dropout);
    if (c->lora_r && !(c->lora_targets & (TFM_LORA_PROJ * 2 - 1)))
        return tfm_err_set(err, "lora rank %d with no target projections", c->lora_r);
    return 0;
}

/* ---- parameter table ----------------------------------------------------- */

/* Per-block parameter slots, in table order (the cross-attention's only in
 * an encoder-decoder's decoder).  P_FCW/P_FCB are the plain feed-forward's
 * c_fc or a gated one's gate wi_0; P_FC1W/P_FC1B its wi_1. */
enum {
    P_LN1W = (int)TFM_SLOT_LN1_W, P_LN1B, P_QKVW, P_QKVB, P_PROJW, P_PROJB,
    P_LNXW, P_LNXB, P_XQW, P_XQB, P_XKVW, P_XKVB, P_XPW, P_XPB,
    P_LN2W, P_LN2B, P_FCW, P_FCB, P_FC1W, P_FC1B, P_FCPW, P_FCPB, P_NLAYER
};
_Static_assert((int)P_FCPB == (int)TFM_SLOT_FCP_B && (int)P_NLAYER == (int)TFM_SLOT_N,
               "slots as tfm_slot");

/* The one list of a block's tensors (transformer.h): the table, the
 * pointers into it and the inference weights all come from here, so they
 * cannot disagree. */
int tfm_block_slot(const tfm_model_config *c, tfm_slot slot, int cross, const char **name,
                   size_t *d0, size_t *d1, int *decay)
{
    int s = (int)slot;
    const tfm_block blk = tfm_model_block(c);
    size_t C = c->n_embd, F = tfm_model_config_ff(c);
    int gated = tfm_ffn_gated(c->ffn), rms = c->norm == TFM_NORM_RMS;
    static const char *const names[P_NLAYER] = {
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_x.weight", "ln_x.bias",
        "xattn.c_q.weight", "xattn.c_q.bias", "xattn.c_kv.weight", "xattn.c_kv.bias",
        "xattn.c_proj.weight", "xattn.c_proj.bias", "ln_2.weight", "ln_2.bias",
        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.wi_1.weight", "mlp.wi_1.bias",
        "mlp.c_proj.weight", "mlp.c_proj.bias"};
    /* [d0, d1] of each slot, k·C for k > 0, F for FF, the attention's
     * widths (nn/block.h) for Q (q), KV2 (k | v) and QKV (q | k | v); a
     * bias's is d1 of its weight */
    enum { FF = -1, Q = -2, KV2 = -3, QKV = -4 };
    static const int shape[P_NLAYER][2] = {
        {1, 0}, {1, 0}, {1, QKV}, {QKV, 0}, {Q, 1}, {1, 0}, {1, 0}, {1, 0}, {1, Q},
        {Q, 0}, {1, KV2}, {KV2, 0}, {Q, 1}, {1, 0}, {1, 0}, {1, 0}, {1, FF}, {FF, 0},
        {1, FF}, {FF, 0}, {FF, 1}, {1, 0}};
    if (s >= P_LNXW && s <= P_XPB && !cross)
        return 0;
    if ((s == P_FC1W || s == P_FC1B) && !gated)
        return 0;
    switch (s) {
    case P_QKVB: case P_PROJB: case P_XQB: case P_XKVB: case P_XPB: case P_FCB: case P_FC1B:
    case P_FCPB:
        if (!c->bias)
            return 0;
        break;
    case P_LN1B: case P_LNXB: case P_LN2B:
        if (rms)
            return 0;
        break;
    default:
        break;
    }
    *name = names[s];
    if (gated && s == P_FCW)
        *name = "mlp.wi_0.weight";
    else if (gated && s == P_FCB)
        *name = "mlp.wi_0.bias";
    size_t dim[2];
    for (int k = 0; k < 2; k++)
        dim[k] = shape[s][k] == FF    ? F
                 : shape[s][k] == Q   ? (size_t)tfm_block_q_dim(&blk)
                 : shape[s][k] == KV2 ? 2 * (size_t)tfm_block_kv_dim(&blk)
                 : shape[s][k] == QKV ? (size_t)tfm_block_qkv_dim(&blk)
                                      : (size_t)shape[s][k] * C;
    *d0 = dim[0];
    *d1 = dim[1];
    *decay = dim[1] != 0; /* matrices only */
    return 1;
}

/* A block's LoRA adapters (lora_r > 0), each a pair A [r, in], B [out, r]
 * (nn/lora.h) named after the module it adapts ("h.3.attn.q.lora_A.weight").
 * In the table each group comes right after the tensors it adapts, so that
 * backward still finishes a block's rows from their end (grads_ready): the
 * self-attention's after attn.c_proj, the cross-attention's after
 * xattn.c_proj, the feed-forward's after mlp.c_proj. */
enum { LS_Q, LS_K, LS_V, LS_O, LS_XQ, LS_XK, LS_XV, LS_XO, LS_FC, LS_FC1, LS_FP, LS_N };

/* 1 when block (cross: with cross-attention) has an adapter at site, with
 * its module's name (after "h.{i}.") and the adapted product's in and out
 * widths. */
static int lora_site(const tfm_model_config *c, int site, int cross, const char **module,
                     int *in, int *out)
{
    static const unsigned bit[LS_N] = {TFM_LORA_Q, TFM_LORA_K, TFM_LORA_V, TFM_LORA_O,
                                       TFM_LORA_Q, TFM_LORA_K, TFM_LORA_V, TFM_LORA_O,
                                       TFM_LORA_FC, TFM_LORA_FC, TFM_LORA_PROJ};
    static const char *const names[LS_N] = {
        "attn.q", "attn.k", "attn.v", "attn.c_proj", "xattn.c_q", "xattn.k", "xattn.v",
        "xattn.c_proj", "mlp.c_fc", "mlp.wi_1", "mlp.c_proj"};
    int gated = tfm_ffn_gated(c->ffn);
    if (c->lora_r <= 0 || !(c->lora_targets & bit[site]))
        return 0;
    if (site >= LS_XQ && site <= LS_XO && !cross)
        return 0;
    if (site == LS_FC1 && !gated)
        return 0;
    *module = site == LS_FC && gated ? "mlp.wi_0" : names[site];
    const tfm_block blk = tfm_model_block(c);
    int C = c->n_embd, F = tfm_model_config_ff(c), D = tfm_block_q_dim(&blk);
    *in = site == LS_FP ? F : site == LS_O || site == LS_XO ? D : C;
    *out = site == LS_FC || site == LS_FC1                  ? F
           : site == LS_O || site == LS_XO || site == LS_FP ? C
           : site == LS_Q || site == LS_XQ                  ? D
                                                            : tfm_block_kv_dim(&blk);
    return 1;
}

/* The adapter sites that follow slot s in the table: [*lo, *hi). */
static int lora_group(int s, int *lo, int *hi)
{
    if (s == P_PROJB) {
        *lo = LS_Q, *hi = LS_XQ;
    } else if (s == P_XPB) {
        *lo = LS_XQ, *hi = LS_FC;
    } else if (s == P_FCPB) {
        *lo = LS_FC, *hi = LS_N;
    } else {
        return 0;
    }
    return 1;
}

typedef struct layer_params {
    float *p[P_NLAYER];
    float *la[LS_N], *lb[LS_N]; /* the adapters' A and B; NULL: none */
} layer_params;

/* Each tensor starts on a 64-byte boundary (16 floats) for the SIMD loops and
 * BLIS; the padding stays zero in params and grads. */
static size_t align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

struct tfm_table_builder {
    int lora;    /* the model has adapters: freeze the rest */
    tfm_param *t;
    int n;
    size_t off;
    size_t real;
};
typedef tfm_table_builder table_builder;

static void add_param(table_builder *tb, const char *name, size_t d0, size_t d1, int decay);

/* The adapters after slot s of a block named pre + "h.{l}.". */
static void add_lora(table_builder *tb, const tfm_model_config *c, const char *pre, int l,
                     int cross, int s)
{
    int lo, hi;
    if (!lora_group(s, &lo, &hi))
        return;
    for (int site = lo; site < hi; site++) {
        const char *module;
        int in, out;
        if (!lora_site(c, site, cross, &module, &in, &out))
            continue;
        char name[64];
        snprintf(name, sizeof name, "%sh.%d.%s.lora_A.weight", pre, l, module);
        add_param(tb, name, (size_t)c->lora_r, (size_t)in, 1);
        snprintf(name, sizeof name, "%sh.%d.%s.lora_B.weight", pre, l, module);
        add_param(tb, name, (size_t)out, (size_t)c->lora_r, 1);
    }
}

/* With adapters, what is trained: the adapters, and the task heads that
 * fine-tuning adds (PEFT's modules_to_save for these tasks; the parts say
 * which, head.h). */
void tfm_table_add(table_builder *tb, const char *name, size_t d0, size_t d1, int decay,
                   int lora_trained)
{
    size_t numel = d1 ? d0 * d1 : d0;
    if (tb->t) {
        tfm_param *p = &tb->t[tb->n];
        snprintf(p->name, sizeof p->name, "%s", name);
        p->ndim = d1 ? 2 : 1;
        p->shape[0] = d0;
        p->shape[1] = d1;
        p->offset = tb->off;
        p->numel = numel;
        p->decay = decay;
        p->frozen = tb->lora && !lora_trained;
    }
    tb->n++;
    tb->off += align16(numel);
    tb->real += numel;
}

static void add_param(table_builder *tb, const char *name, size_t d0, size_t d1, int decay)
{
    tfm_table_add(tb, name, d0, d1, decay, strstr(name, ".lora_A.") || strstr(name, ".lora_B."));
}

/* The tensors of one block (tfm_block_slot), and its adapters. */
static void add_block(table_builder *tb, const tfm_model_config *c, const char *pre, int l,
                      int cross)
{
    for (int s = 0; s < P_NLAYER; s++) {
        const char *suffix;
        size_t d0, d1;
        int decay;
        if (tfm_block_slot(c, (tfm_slot)s, cross, &suffix, &d0, &d1, &decay)) {
            char name[48];
            snprintf(name, sizeof name, "%sh.%d.%s", pre, l, suffix);
            add_param(tb, name, d0, d1, decay);
        }
        add_lora(tb, c, pre, l, cross, s);
    }
}

/* A norm's weight and (layernorm) bias of width n: pre + "ln_f" and so on. */
static void add_norm_w(table_builder *tb, const tfm_model_config *c, const char *name, size_t n)
{
    char full[48];
    snprintf(full, sizeof full, "%s.weight", name);
    add_param(tb, full, n, 0, 0);
    if (c->norm == TFM_NORM_RMS)
        return;
    snprintf(full, sizeof full, "%s.bias", name);
    add_param(tb, full, n, 0, 0);
}

static void add_norm(table_builder *tb, const tfm_model_config *c, const char *name)
{
    add_norm_w(tb, c, name, (size_t)c->n_embd);
}

static void build_table(const tfm_model_config *c, table_builder *tb)
{
    size_t C = c->n_embd, V = c->vocab_size, E = tfm_model_config_emb_dim(c);
    tb->lora = c->lora_r > 0;
    int ed = c->kind == TFM_KIND_ENCODER_DECODER;
    add_param(tb, "wte.weight", V, E, 1);
    if (ed && !c->tie_source)
        add_param(tb, "enc.wte.weight", (size_t)tfm_model_config_src_vocab(c), C, 1);
    if (c->pos == TFM_POS_LEARNED) {
        add_param(tb, "wpe.weight", c->block_size, E, 1);
        if (ed)
            add_param(tb, "enc.wpe.weight", c->block_size, C, 1);
    }
    if (c->n_segments)
        add_param(tb, "wse.weight", c->n_segments, E, 1);
    if (c->emb_norm) {
        add_norm_w(tb, c, "ln_e", E);
        if (ed)
            add_norm(tb, c, "enc.ln_e");
    }
    if (factorised(c)) {
        add_param(tb, "emb_proj.weight", E, C, 1);
        add_param(tb, "emb_proj.bias", C, 0, 0);
    }
    if (c->pos == TFM_POS_T5) {
        add_param(tb, "rel_bias.weight", c->n_head, c->t5_buckets, 0);
        if (ed)
            add_param(tb, "enc.rel_bias.weight", c->n_head, c->t5_buckets, 0);
    }
    if (ed) {
        for (int l = 0; l < tfm_model_config_enc_layers(c); l++)
            add_block(tb, c, "enc.", l, 0);
        if (c->ln == TFM_LN_PRE)
            add_norm(tb, c, "enc.ln_f");
    }
    for (int l = 0; l < c->n_layer; l++)
        add_block(tb, c, "", l, ed);
    if (c->ln == TFM_LN_PRE)
        add_norm(tb, c, "ln_f");
    if (!c->tie_embeddings)
        add_param(tb, "lm_head.weight", V, E, 1);
    if (c->head_bias)
        add_param(tb, "final_logits_bias", V, 0, 0);
    /* the heads ([out, in], HF BERT's names) */
    for (int h = 0; tfm_head_parts[h]; h++)
        if (tfm_head_parts[h]->has(c))
            tfm_head_parts[h]->params(tb, c);
}

size_t tfm_model_config_num_params(const tfm_model_config *c)
{
    table_builder tb = {0};
    build_table(c, &tb);
    return tb.real;
}

const tfm_param *tfm_model_param(const tfm_model *m, const char *name)
{
    for (int i = 0; i < m->n_table; i++)
        if (!strcmp(m->table[i].name, name))
            return &m->table[i];
    return NULL;
}

/* ---- activations --------------------------------------------------------- */

typedef struct layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd;  /* [N,C], [N], [N] */
    float *qkv;                        /* [N,D+2K] */
    float *att;                        /* [B,NH,T,T] probabilities */
    float *atty;                       /* [N,C] heads concatenated */
    float *res_attn;                   /* [N,C] */
    /* cross-attention (an encoder-decoder's decoder blocks) */
    float *lnx, *lnx_mean, *lnx_rstd;  /* [N,C], [N], [N] */
    float *xq;                         /* [N,C] */
    float *xkv;                        /* [Ns,2K] keys and values of the memory */
    float *xatt;                       /* [B,NH,T,S] */
    float *xatty;                      /* [N,C] */
    float *res_x;                      /* [N,C] */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch;                        /* [N,F] before the activation */
    float *fcl;                        /* [N,F] gated: the linear input
                                          (NULL for the plain kind) */
    float *fcg;                        /* [N,F] after it: this layer's own
                                          buffer when small, else shared
                                          scratch recomputed in backward */
    float *res_mlp;                    /* [N,C] */
    float *lora_u[LS_N];               /* [N,r] ([Ns,r] for xattn.k, v): each
                                          adapter's drop(x)·Aᵀ */
} layer_acts;

/* The embedding of one stack's input. */
typedef struct embed_acts {
    float *encoded;                    /* [N,C] embeddings (after dropout) */
    float *emb, *emb_mean, *emb_rstd;  /* [N,E] sum before ln_e, [N], [N] */
    float *small, *dsmall;             /* factorised: [N,E] the embedding
                                          before emb_proj, its gradient */
    float *lnf, *lnf_mean, *lnf_rstd;  /* [N,C] the final norm (pre-LN) */
} embed_acts;

struct tfm_model_acts {
    size_t cap_n, cap_att;     /* planned B·T and B·T·T */
    size_t cap_ns, cap_att_s, cap_xatt; /* B·S, B·S·S, B·T·S */
    float *mem;
    size_t bytes;
    embed_acts dec, enc;       /* the decoder's (or only stack's), the encoder's */
    layer_acts *layer;         /* [n_layer] */
    layer_acts *enc_layer;     /* [enc layers] */
    float *logits;             /* [N,V] */
    float *lse, *losses;       /* [N] */
    /* the heads (heads_*; NULL when the model lacks them) */
    int lm_rows;               /* rows of logits the last forward computed
                                  (0: the LM head did not run) */
    const int32_t *lm_tgt;     /* their targets: targets, or the LM
                                  transform's (MLM) */
    const float *lm_x;         /* [lm_rows, C] the rows it read */
    const char *lm_bias;       /* the logits' bias tensor, or NULL */
    float lm_weight;
    long hcount[TFM_HEAD_N];   /* targets counted per head */
    void *head[TFM_HEAD_PARTS_MAX]; /* each part's activations (head.h);
                                       NULL when the model lacks it */
    int32_t *inputs, *targets; /* [N] copies for backward */
    /* the rest of the batch (tfm_batch), copied; NULL when absent */
    int32_t *segments, *doc_start, *lengths, *prefix_len;
    int32_t *pos;              /* [N] position ids: t, or t - doc_start */
    int32_t *src, *src_pos, *src_lengths; /* [Ns], [Ns], [B] */
    int S;
    int has_segments;
    int *lengths_i, *prefix_i, *doc_i, *src_len_i; /* the attention's views of them */
    float *pe;                 /* sinusoidal table or RoPE angles, [max(T,S), C] */
    int n_pe;                  /* positions in pe */
    const float *memory;       /* [Ns,C] the encoder's output */
    int have_targets;
    long count;                /* targets counted in the loss */
    /* scratch, reused by every layer */
    int keep_fcg;              /* each layer keeps its activation output */
    int inference;             /* forward only: one layer's buffers for
                                  all, no backward scratch */
    float *dfch;               /* [Nmax,F] */
    float *dfcl;               /* [Nmax,F] gated: d of the linear input */
    float *dqkv;               /* [Nmax,D+2K] */
    float *datty;              /* [Nmax,D] */
    float *d0, *d1, *d2, *d3, *dtmp; /* [Nmax,C] */
    float *dxkv;               /* [Ns,2K] */
    float *dmem;               /* [Ns,C] the gradient of the memory */
    float *attn_scratch;
    size_t attn_scratch_n;
    float *lora_x;             /* [Nmax,max(C,D,F)] the adapters' scratch */
    float *lora_du;            /* [Nmax,r] */
    /* dropout streams of the last forward */
    uint64_t seed;
};

/* Table rows per block. */
static int block_rows(const tfm_model *m, int cross)
{
    int per = 0;
    for (int s = 0; s < P_NLAYER; s++) {
        const char *name;
        size_t d0, d1;
        int decay, lo, hi, in, out;
        per += tfm_block_slot(&m->cfg, (tfm_slot)s, cross, &name, &d0, &d1, &decay);
        if (lora_group(s, &lo, &hi))
            for (int site = lo; site < hi; site++)
                per += 2 * lora_site(&m->cfg, site, cross, &name, &in, &out);
    }
    return per;
}

/* The parameters of block l of the stack whose first block starts at table
 * row first (the slots are in table order, add_block's).  With base the
 * gradients, a frozen tensor's pointer is NULL: backward skips it. */
static layer_params block_ptrs(const tfm_model *m, float *base, int first, int l, int cross)
{
    const tfm_param *t = m->table + first + (size_t)l * block_rows(m, cross);
    int grads = base == m->grads;
    layer_params lp;
    memset(&lp, 0, sizeof lp);
#define AT(row) (grads && (row).frozen ? NULL : base + (row).offset)
    for (int s = 0, i = 0; s < P_NLAYER; s++) {
        const char *name;
        size_t d0, d1;
        int decay, lo, hi, in, out;
        if (tfm_block_slot(&m->cfg, (tfm_slot)s, cross, &name, &d0, &d1, &decay)) {
            lp.p[s] = AT(t[i]);
            i++;
        }
        if (lora_group(s, &lo, &hi))
            for (int site = lo; site < hi; site++)
                if (lora_site(&m->cfg, site, cross, &name, &in, &out)) {
                    lp.la[site] = AT(t[i]);
                    lp.lb[site] = AT(t[i + 1]);
                    i += 2;
                }
    }
#undef AT
    return lp;
}

/* NULL when absent, or when base is the gradients and the tensor frozen. */
static float *param_ptr(const tfm_model *m, float *base, const char *name)
{
    const tfm_param *p = tfm_model_param(m, name);
    return p && !(base == m->grads && p->frozen) ? base + p->offset : NULL;
}

float *tfm_model_ptr(const tfm_model *m, float *base, const char *name)
{
    return param_ptr(m, base, name);
}

/* param_ptr of pre + name ("enc." + "wpe.weight"). */
static float *side_ptr(const tfm_model *m, float *base, const char *pre, const char *name)
{
    char full[48];
    snprintf(full, sizeof full, "%s%s", pre, name);
    return param_ptr(m, base, full);
}

static void acts_free(tfm_model_acts *a)
{
    if (!a)
        return;
    free(a->mem);
    for (int h = 0; h < TFM_HEAD_PARTS_MAX; h++)
        free(a->head[h]);
    free(a->layer);
    free(a->enc_layer);
    free(a);
}

/* Lays out every activation in one allocation (two passes: the first, with
 * base NULL, only counts). */
static void take(float **ptr, float *base, size_t *off, size_t n)
{
    if (base)
        *ptr = base + *off;
    *off += align16(n);
}

/* The activations of one stack's embedding and blocks: N rows, att
 * probabilities per head; with cross, memories of Ns rows and xatt cross
 * probabilities per head. */
static void take_stack(tfm_model_acts *a, const tfm_model_config *c, embed_acts *e,
                       layer_acts *layers, int n_layer, size_t N, size_t att, int cross,
                       size_t Ns, size_t xatt, float *base, size_t *off)
{
    const tfm_block blk = tfm_model_block(c);
    size_t C = c->n_embd, F = tfm_model_config_ff(c), D = tfm_block_q_dim(&blk);
    size_t KV = tfm_block_kv_dim(&blk);
    size_t E = tfm_model_config_emb_dim(c);
    take(&e->encoded, base, off, N * C);
    if (factorised(c)) {
        take(&e->small, base, off, N * E);
        if (!a->inference)
            take(&e->dsmall, base, off, N * E);
    }
    if (c->emb_norm) {
        take(&e->emb, base, off, N * E);
        take(&e->emb_mean, base, off, N);
        take(&e->emb_rstd, base, off, N);
    }
    for (int l = 0; l < n_layer; l++) {
        /* Forward only, one set serves every layer: a layer reads its input
         * (the previous layer's res_mlp, or ln2 after post-LN) only before
         * it overwrites that buffer. */
        if (a->inference && l >= 1) {
            if (base)
                layers[l] = layers[0];
            continue;
        }
        layer_acts dummy, *la = base ? &layers[l] : &dummy;
        take(&la->ln1, base, off, N * C);
        take(&la->ln1_mean, base, off, N);
        take(&la->ln1_rstd, base, off, N);
        take(&la->qkv, base, off, N * tfm_block_qkv_dim(&blk));
        take(&la->att, base, off, att * c->n_head);
        take(&la->atty, base, off, N * D);
        take(&la->res_attn, base, off, N * C);
        if (cross) {
            take(&la->lnx, base, off, N * C);
            take(&la->lnx_mean, base, off, N);
            take(&la->lnx_rstd, base, off, N);
            take(&la->xq, base, off, N * D);
            take(&la->xkv, base, off, Ns * 2 * KV);
            take(&la->xatt, base, off, xatt * c->n_head);
            take(&la->xatty, base, off, N * D);
            take(&la->res_x, base, off, N * C);
        }
        take(&la->ln2, base, off, N * C);
        take(&la->ln2_mean, base, off, N);
        take(&la->ln2_rstd, base, off, N);
        take(&la->fch, base, off, N * F);
        if (tfm_ffn_gated(c->ffn))
            take(&la->fcl, base, off, N * F);
        if (a->keep_fcg)
            take(&la->fcg, base, off, N * F);
        take(&la->res_mlp, base, off, N * C);
        for (int site = 0; site < LS_N; site++) {
            const char *module;
            int in, out;
            if (lora_site(c, site, cross, &module, &in, &out))
                take(&la->lora_u[site], base, off,
                     (site == LS_XK || site == LS_XV ? Ns : N) * (size_t)c->lora_r);
        }
    }
    if (c->ln == TFM_LN_PRE) {
        take(&e->lnf, base, off, N * C);
        take(&e->lnf_mean, base, off, N);
        take(&e->lnf_rstd, base, off, N);
    }
}

void tfm_acts_take(float **ptr, float *base, size_t *off, size_t n)
{
    take(ptr, base, off, n);
}

void tfm_acts_take_ids(int32_t **ptr, float *base, size_t *off, size_t n)
{
    float *f = NULL;
    take(&f, base, off, n);
    *ptr = (int32_t *)f;
}

/* The heads' activations, for the heads the model has. */
static void heads_layout(tfm_model_acts *a, const tfm_model_config *c, size_t N, float *base,
                         size_t *off)
{
    for (int h = 0; tfm_head_parts[h]; h++)
        if (a->head[h])
            tfm_head_parts[h]->layout(a->head[h], c, N, base, off);
}

static size_t acts_layout(tfm_model_acts *a, const tfm_model_config *c, size_t N, size_t att,
                          size_t Ns, size_t att_s, size_t xatt, size_t scratch, float *base)
{
    size_t C = c->n_embd, V = c->vocab_size, F = tfm_model_config_ff(c), off = 0;
    int E = tfm_model_config_emb_dim(c);
    size_t D = tfm_model_config_attn_dim(c), HS = tfm_model_config_head_dim(c);
    int L = c->n_layer, Le = tfm_model_config_enc_layers(c);
    size_t Nmax = N > Ns ? N : Ns;
    if (Le)
        take_stack(a, c, &a->enc, a->enc_layer, Le, Ns, att_s, 0, 0, 0, base, &off);
    take_stack(a, c, &a->dec, a->layer, L, N, att, Le > 0, Ns, xatt, base, &off);
    take(&a->logits, base, &off, N * V);
    take(&a->lse, base, &off, N);
    take(&a->losses, base, &off, N);
    heads_layout(a, c, N, base, &off);
    /* ids: [B] arrays fit in N (or Ns) floats too */
    int32_t **ids[] = {&a->inputs, &a->targets, &a->segments, &a->doc_start, &a->lengths,
                       &a->prefix_len, &a->pos, &a->src, &a->src_pos, &a->src_lengths};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        float *f = NULL;
        take(&f, base, &off, i < 7 ? N : Ns);
        *ids[i] = (int32_t *)f;
    }
    if (c->pos == TFM_POS_SINUSOIDAL || c->pos == TFM_POS_ROPE)
        take(&a->pe, base, &off, Nmax * (C > HS ? C : HS)); /* sinusoids or angles */
    float *shared = NULL;
    if (!a->keep_fcg) {
        take(&shared, base, &off, Nmax * F);
        if (base) {
            for (int l = 0; l < L; l++)
                a->layer[l].fcg = shared;
            for (int l = 0; l < Le; l++)
                a->enc_layer[l].fcg = shared;
        }
    }
    if (!a->inference) {
        take(&a->dfch, base, &off, Nmax * F);
        if (tfm_ffn_gated(c->ffn))
            take(&a->dfcl, base, &off, Nmax * F);
        take(&a->dqkv, base, &off, Nmax * tfm_model_config_qkv_dim(c));
        take(&a->datty, base, &off, Nmax * D);
        take(&a->d0, base, &off, Nmax * C);
        /* the LM head's gradient of its rows, E wide (heads_backward) */
        take(&a->d1, base, &off, Nmax * (C > (size_t)E ? C : (size_t)E));
        take(&a->d2, base, &off, Nmax * C);
        take(&a->d3, base, &off, Nmax * C);
        take(&a->dtmp, base, &off, Nmax * C);
        if (Le) {
            take(&a->dxkv, base, &off, Ns * 2 * tfm_model_config_kv_dim(c));
            take(&a->dmem, base, &off, Ns * C);
        }
    }
    take(&a->attn_scratch, base, &off, scratch);
    if (c->lora_r > 0) {
        size_t w = F > C ? F : C;
        take(&a->lora_x, base, &off, Nmax * (w > D ? w : D));
        take(&a->lora_du, base, &off, Nmax * (size_t)c->lora_r);
    }
    return off;
}

static int acts_plan(tfm_model *m, int B, int T, int S, tfm_err *err)
{
    const tfm_model_config *c = &m->cfg;
    int ed = c->kind == TFM_KIND_ENCODER_DECODER;
    if (!ed)
        S = 0;
    size_t N = (size_t)B * T, att = (size_t)B * T * T;
    size_t Ns = (size_t)B * S, att_s = (size_t)B * S * S, xatt = (size_t)B * T * S;
    /* the biases need scratch of their own: describe them too */
    tfm_attn_t5 t5 = {.n_buckets = c->t5_buckets, .max_distance = c->t5_max_distance};
    tfm_attn probe = {.B = B, .Tq = T, .Tk = T, .NH = c->n_head,
                      .NKV = tfm_model_config_kv_heads(c), .HS = tfm_model_config_head_dim(c),
                      .alibi = m->alibi, .t5 = c->pos == TFM_POS_T5 ? &t5 : NULL};
    size_t scratch = tfm_attn_scratch_floats(&probe);
    if (ed) {
        probe.Tq = probe.Tk = S;
        size_t s2 = tfm_attn_scratch_floats(&probe);
        tfm_attn cross = {.B = B, .Tq = T, .Tk = S, .NH = probe.NH, .NKV = probe.NKV,
                          .HS = probe.HS};
        size_t s3 = tfm_attn_scratch_floats(&cross);
        scratch = s2 > scratch ? s2 : scratch;
        scratch = s3 > scratch ? s3 : scratch;
    }
    tfm_model_acts *a = m->acts;
    if (a && a->cap_n >= N && a->cap_att >= att && a->attn_scratch_n >= scratch &&
        a->cap_ns >= Ns && a->cap_att_s >= att_s && a->cap_xatt >= xatt)
        return 0;
    /* Grow to cover both the old and the new shape, so alternating shapes
     * (training and evaluation batches) settle after one re-plan. */
#define GROW(x, cap) x = a && a->cap > x ? a->cap : x
    GROW(N, cap_n);
    GROW(att, cap_att);
    GROW(Ns, cap_ns);
    GROW(att_s, cap_att_s);
    GROW(xatt, cap_xatt);
    GROW(scratch, attn_scratch_n);
#undef GROW
    acts_free(a);
    a = tfm_calloc(1, sizeof *a);
    a->layer = tfm_calloc((size_t)c->n_layer, sizeof *a->layer);
    int Le = tfm_model_config_enc_layers(c);
    a->enc_layer = Le ? tfm_calloc((size_t)Le, sizeof *a->enc_layer) : NULL;
    for (int h = 0; tfm_head_parts[h]; h++)
        if (tfm_head_parts[h]->has(c))
            a->head[h] = tfm_calloc(1, tfm_head_parts[h]->acts_size);
    /* Keeping every layer's activation output saves recomputing it in
     * backward; worth its memory only while that stays small (GPT-2 small
     * would need 150 MB more). */
    a->keep_fcg = ((double)N * c->n_layer + (double)Ns * Le) * tfm_model_config_ff(c) *
                      sizeof(float) <= 64.0 * (1 << 20);
    if (m->recompute) /* tests cover the recomputing path too */
        a->keep_fcg = 0;
    a->inference = m->grads == NULL;
    if (a->inference)
        a->keep_fcg = 0;
    size_t n = acts_layout(a, c, N, att, Ns, att_s, xatt, scratch, NULL);
    a->mem = tfm_aligned_alloc(n * sizeof(float));
    if (!a->mem) {
        acts_free(a);
        m->acts = NULL;
        return tfm_err_set(err, "out of memory planning activations for batch %d x %d", B, T);
    }
    memset(a->mem, 0, n * sizeof(float));
    acts_layout(a, c, N, att, Ns, att_s, xatt, scratch, a->mem);
    a->cap_n = N;
    a->cap_att = att;
    a->cap_ns = Ns;
    a->cap_att_s = att_s;
    a->cap_xatt = xatt;
    a->attn_scratch_n = scratch;
    a->bytes = n * sizeof(float);
    m->acts = a;
    return 0;
}

/* ---- init ---------------------------------------------------------------- */

int tfm_model_grad_span(const tfm_model *m, int *row, size_t *lo, size_t *hi)
{
    int i = *row;
    while (i < m->n_table && m->table[i].frozen)
        i++;
    if (i >= m->n_table)
        return 0;
    *lo = m->table[i].offset;
    while (i < m->n_table && !m->table[i].frozen)
        i++;
    *hi = i < m->n_table ? m->table[i].offset : m->n_params;
    *row = i;
    return 1;
}

size_t tfm_model_frozen_pages(const tfm_model *m, const float *grads, size_t *resident)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), pages = 0, prev = 0, lo, hi;
    *resident = 0;
    for (int row = 0, more = 1; more; prev = hi) {
        more = tfm_model_grad_span(m, &row, &lo, &hi);
        if (!more)
            lo = hi = m->n_params;
        uintptr_t a = ((uintptr_t)(grads + prev) + page - 1) & ~(uintptr_t)(page - 1);
        uintptr_t b = (uintptr_t)(grads + lo) & ~(uintptr_t)(page - 1);
        if (a < b) {
            pages += (b - a) / page;
            *resident += tfm_pages_resident(grads + prev, (lo - prev) * sizeof(float));
        }
    }
    return pages;
}

/* Zero gradients from the kernel: a LoRA run's frozen base's pages are
 * never written, so they never cost memory (on 4 KiB pages then: a 2 MiB
 * one would make the frozen floats around an adapter resident). */
static float *grads_alloc(const tfm_model *m)
{
    int row = 0;
    size_t lo, hi;
    int whole = !tfm_model_grad_span(m, &row, &lo, &hi) || (lo == 0 && hi == m->n_params);
    return tfm_pages_alloc(m->n_params * sizeof(float), whole);
}

int tfm_model_init(tfm_model *m, const tfm_model_config *cfg, tfm_err *err)
{
    memset(m, 0, sizeof *m);
    if (tfm_model_config_check(cfg, err) < 0)
        return -1;
    m->cfg = *cfg;
    table_builder tb = {0};
    build_table(cfg, &tb);
    m->table = tfm_calloc((size_t)tb.n, sizeof *m->table);
    m->n_table = tb.n;
    tb.t = m->table;
    tb.n = 0;
    tb.off = 0;
    tb.real = 0;
    build_table(cfg, &tb);
    m->n_params = tb.off;
    m->params = tfm_aligned_alloc(m->n_params * sizeof(float));
    m->grads = grads_alloc(m);
    if (!m->params || !m->grads) {
        tfm_model_free(m);
        return tfm_err_set(err, "out of memory for %zu parameters", tb.real);
    }
    memset(m->params, 0, m->n_params * sizeof(float));
    const tfm_param *h0 = tfm_model_param(m, "h.0.ln_1.weight");
    m->first_layer = (int)(h0 - m->table);
    const tfm_param *e0 = tfm_model_param(m, "enc.h.0.ln_1.weight");
    m->enc_first_layer = e0 ? (int)(e0 - m->table) : 0;
    if (cfg->pos == TFM_POS_ALIBI) {
        m->alibi = tfm_malloc((size_t)cfg->n_head * sizeof *m->alibi);
        tfm_alibi_slopes(m->alibi, cfg->n_head);
    }
    tfm_rng_seed(&m->rng, 0);
    m->loss = -1.0f;
    return 0;
}

void tfm_model_free(tfm_model *m)
{
    if (!m->shares_params) {
        free(m->params);
        free(m->table);
        free(m->alibi);
    }
    tfm_pages_free(m->grads, m->n_params * sizeof(float));
    acts_free(m->acts);
    memset(m, 0, sizeof *m);
}

void tfm_model_init_replica(tfm_model *r, const tfm_model *m)
{
    TFM_ASSERT(!m->shares_params && m->grads);
    memset(r, 0, sizeof *r);
    r->cfg = m->cfg;
    r->params = m->params;
    r->table = m->table;
    r->n_table = m->n_table;
    r->first_layer = m->first_layer;
    r->enc_first_layer = m->enc_first_layer;
    r->alibi = m->alibi;
    r->attn_impl = m->attn_impl;
    r->recompute = m->recompute;
    r->n_params = m->n_params;
    r->shares_params = 1;
    r->loss = -1.0f;
    r->grads = grads_alloc(r);
}

void tfm_model_init_weights(tfm_model *m, uint64_t seed)
{
    tfm_rng r;
    tfm_rng_seed(&r, seed);
    /* residual projections scaled by the residual sums they feed: two a
     * block, three in a decoder with cross-attention */
    int Le = tfm_model_config_enc_layers(&m->cfg);
    float resid_std = 0.02f / sqrtf((Le ? 3.0f : 2.0f) * m->cfg.n_layer);
    float enc_resid_std = Le ? 0.02f / sqrtf(2.0f * Le) : 0.0f;
    int xavier = m->cfg.init == TFM_INIT_XAVIER;
    for (int i = 0; i < m->n_table; i++) {
        const tfm_param *p = &m->table[i];
        float *w = m->params + p->offset;
        const char *name = p->name;
        size_t len = strlen(name);
        int is_ln = strstr(name, "ln_") != NULL || strstr(name, "LayerNorm") != NULL;
        int is_bias = (len > 5 && !strcmp(name + len - 5, ".bias")) ||
                      !strcmp(name, "final_logits_bias");
        if (strstr(name, ".lora_A.")) {
            /* PEFT's: Kaiming-uniform with a = √5, bound 1/√in */
            float bound = 1.0f / sqrtf((float)p->shape[1]);
            for (size_t j = 0; j < p->numel; j++)
                w[j] = bound * (2.0f * tfm_rng_float(&r) - 1.0f);
        } else if (strstr(name, ".lora_B.")) {
            memset(w, 0, p->numel * sizeof *w); /* the adapter starts as nothing */
        } else if (is_ln && !is_bias) {
            for (size_t j = 0; j < p->numel; j++)
                w[j] = 1.0f;
        } else if (is_bias) {
            memset(w, 0, p->numel * sizeof *w);
        } else if (xavier && p->ndim == 2 && !strstr(name, "rel_bias.")) {
            int table = (len >= 10 && (!strcmp(name + len - 10, "wte.weight") ||
                                       !strcmp(name + len - 10, "wpe.weight") ||
                                       !strcmp(name + len - 10, "wse.weight")));
            if (table) {
                float std = 1.0f / sqrtf((float)m->cfg.n_embd);
                for (size_t j = 0; j < p->numel; j++)
                    w[j] = std * tfm_rng_normal(&r);
            } else {
                /* [in, out]; fused q|k|v and k|v are separate matrices:
                 * each column's bound is its part's, q (the first D
                 * columns of c_attn) or k and v (K each) */
                const tfm_block blk = tfm_model_block(&m->cfg);
                size_t cols = p->shape[1], nq = 0, part = cols;
                if (strstr(name, "c_attn.weight")) {
                    nq = (size_t)tfm_block_q_dim(&blk);
                    part = (size_t)tfm_block_kv_dim(&blk);
                } else if (strstr(name, "c_kv.weight")) {
                    part = (size_t)tfm_block_kv_dim(&blk);
                }
                float aq = (float)sqrt(6.0 / ((double)p->shape[0] + (double)nq));
                float a = (float)sqrt(6.0 / ((double)p->shape[0] + (double)part));
                for (size_t j = 0; j < p->numel; j++)
                    w[j] = (j % cols < nq ? aq : a) * (2.0f * tfm_rng_float(&r) - 1.0f);
            }
        } else {
            float std = !strstr(name, "c_proj.weight") ? 0.02f
                        : strncmp(name, "enc.", 4) == 0 ? enc_resid_std
                                                        : resid_std;
            for (size_t j = 0; j < p->numel; j++)
                w[j] = std * tfm_rng_normal(&r);
        }
    }
    tfm_rng_seed(&m->rng, seed ^ 0xD1B54A32D192ED03ull);
}

void tfm_model_set_training(tfm_model *m, int training)
{
    m->training = training;
}

float *tfm_model_logits(tfm_model *m)
{
    return m->acts ? m->acts->logits : NULL;
}

void tfm_model_zero_grad(tfm_model *m)
{
    TFM_ASSERT(m->grads);
    int row = 0;
    size_t lo, hi;
    while (tfm_model_grad_span(m, &row, &lo, &hi))
        memset(m->grads + lo, 0, (hi - lo) * sizeof(float));
}

size_t tfm_model_blocks_offset(const tfm_model *m)
{
    int ed = m->cfg.kind == TFM_KIND_ENCODER_DECODER;
    return m->table[ed ? m->enc_first_layer : m->first_layer].offset;
}

void tfm_model_set_inference(tfm_model *m)
{
    TFM_ASSERT(!m->shares_params);
    tfm_pages_free(m->grads, m->n_params * sizeof(float));
    m->grads = NULL;
    acts_free(m->acts); /* re-planned without what backward needs */
    m->acts = NULL;
    m->training = 0;
}

size_t tfm_model_bytes(const tfm_model *m)
{
    size_t n = m->shares_params ? 0 : m->n_params, lo, hi;
    int row = 0;
    while (m->grads && tfm_model_grad_span(m, &row, &lo, &hi))
        n += hi - lo;
    return n * sizeof(float) + (m->acts ? m->acts->bytes : 0);
}

/* ---- layers -------------------------------------------------------------- */


/* out[N,O] = inp[N,I]·W[I,O] + b   (W stored [in, out], as HF GPT-2) */
static void linear_forward(float *out, const float *inp, const float *W, const float *b,
                           int N, int I, int O)
{
    tfm_gemm(0, 0, N, O, I, 1.0f, inp, I, W, O, 0.0f, out, O);
    if (b)
        tfm_bias_forward(out, b, N, O);
}

/* dW += inpᵀ·dout, db += Σ dout, dinp = dout·Wᵀ + beta·dinp (dinp may be NULL;
 * dW and db NULL for a frozen layer) */
static void linear_backward(float *dinp, float beta, float *dW, float *db, const float *dout,
                            const float *inp, const float *W, int N, int I, int O)
{
    if (dW) /* NULL: frozen */
        tfm_gemm(1, 0, I, O, N, 1.0f, inp, I, dout, O, 1.0f, dW, O);
    if (db)
        tfm_bias_backward(db, dout, N, O);
    if (dinp)
        tfm_gemm(0, 1, N, I, O, 1.0f, dout, O, W, O, beta, dinp, I);
}

/* Dropout stream of one site: a splitmix64 step over (step seed, site). */
static uint64_t site_seed(uint64_t seed, uint64_t site)
{
    uint64_t z = seed + (site + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

enum { SITE_EMB, SITE_ATT, SITE_RATT, SITE_RMLP };

/* Sites are numbered per stack: the decoder's (or only stack's) from 0, as
 * before encoder-decoders existed (so resumed runs draw the same), the
 * encoder's and the cross-attention's in ranges of their own. */
#define ENC_SITES ((uint64_t)2 << 40)
#define CROSS_SITES ((uint64_t)1 << 40)
#define LORA_SITES ((uint64_t)3 << 40)
#define FFN_SITES ((uint64_t)4 << 40)
#define FINAL_SITES ((uint64_t)5 << 40)

static uint64_t layer_site(uint64_t seed, uint64_t base, int l, int which)
{
    return site_seed(seed, base + 1 + (uint64_t)l * 3 + (uint64_t)(which - 1));
}

static uint64_t cross_site(uint64_t seed, int l, int which)
{
    return site_seed(seed, CROSS_SITES + (uint64_t)l * 2 + (uint64_t)(which - 1));
}

static float drop_p(const tfm_model *m)
{
    return m->training ? m->cfg.dropout : 0.0f;
}

/* On the attention probabilities and on the embeddings: their own rates
 * (BART's attention_dropout, GPT-2's embd_pdrop), else dropout's. */
static float attn_p(const tfm_model *m)
{
    return !m->training ? 0.0f : m->cfg.attn_dropout >= 0.0f ? m->cfg.attn_dropout
                                                              : m->cfg.dropout;
}

static float emb_p(const tfm_model *m)
{
    return !m->training ? 0.0f : m->cfg.emb_dropout >= 0.0f ? m->cfg.emb_dropout
                                                             : m->cfg.dropout;
}

/* The feed-forward's inner dropout (ffn_dropout) of block l of a stack:
 * its probability and, in a range of its own, its stream. */
static float ffn_p(const tfm_model *m)
{
    return m->training ? m->cfg.ffn_dropout : 0.0f;
}

static uint64_t ffn_site(uint64_t seed, int enc, int l)
{
    return site_seed(seed, FFN_SITES + (enc ? (uint64_t)1 << 36 : 0) + (uint64_t)l);
}

/* The dropout on a stack's output (final_dropout): probability, stream. */
static float final_p(const tfm_model *m)
{
    return m->training ? m->cfg.final_dropout : 0.0f;
}

static uint64_t final_site(uint64_t seed, int enc)
{
    return site_seed(seed, FINAL_SITES + (uint64_t)enc);
}

static float lora_p(const tfm_model *m)
{
    return m->training ? m->cfg.lora_dropout : 0.0f;
}

static int check_heads(const tfm_model_config *c, const tfm_batch *b, tfm_err *err);

/* The batch's shape and ids, before any work: errors name the row and
 * position in the batch as the caller gave it. */
int tfm_batch_check(const tfm_model_config *c, const tfm_batch *b, tfm_err *err)
{
    int V = c->vocab_size, B = b->B, T = b->T;
    int ed = c->kind == TFM_KIND_ENCODER_DECODER;
    if (B < 1 || T < 1)
        return tfm_err_set(err, "batch %d x %d is empty", B, T);
    /* only a learned table ends; the other schemes extend past training */
    if (T > c->block_size && c->pos == TFM_POS_LEARNED)
        return tfm_err_set(err, "sequence length %d exceeds the model's context %d", T,
                           c->block_size);
    if (b->segments && !c->n_segments)
        return tfm_err_set(err, "segment ids given to a model without segments");
    if (b->targets && factorised(c) && !c->mlm_head)
        return tfm_err_set(err, "LM targets given to a model with embedding_size %d and no "
                           "MLM head (the head that maps back to the embeddings' width)",
                           c->emb_dim);
    if (c->kind != TFM_KIND_DECODER && (b->prefix_len || b->doc_start))
        return tfm_err_set(err, "prefix-LM and packed documents are for decoders");
    if (c->kind != TFM_KIND_ENCODER && b->lengths)
        return tfm_err_set(err, "padding lengths are for encoders (decoders ignore targets "
                                "of -1 instead)");
    if (ed && (!b->src || b->S < 1))
        return tfm_err_set(err, "an encoder-decoder needs a source batch");
    if (!ed && (b->src || b->src_lengths))
        return tfm_err_set(err, "a source batch given to a model of kind %s",
                           tfm_kind_name(c->kind));
    if (ed && b->S > c->block_size && c->pos == TFM_POS_LEARNED)
        return tfm_err_set(err, "source length %d exceeds the model's context %d", b->S,
                           c->block_size);
    for (size_t i = 0, N = (size_t)B * T; i < N; i++) {
        if (b->inputs[i] < 0 || b->inputs[i] >= V)
            return tfm_err_set(err, "token id %d at batch row %zu, position %zu is outside the vocabulary (size %d)",
                               (int)b->inputs[i], i / T, i % T, V);
        if (b->targets && (b->targets[i] < -1 || b->targets[i] >= V))
            return tfm_err_set(err, "target id %d at batch row %zu, position %zu is outside the vocabulary (size %d)",
                               (int)b->targets[i], i / T, i % T, V);
        if (b->segments && (b->segments[i] < 0 || b->segments[i] >= c->n_segments))
            return tfm_err_set(err, "segment id %d at batch row %zu, position %zu is outside [0, %d)",
                               (int)b->segments[i], i / T, i % T, c->n_segments);
        if (b->doc_start && (b->doc_start[i] < 0 || b->doc_start[i] > (int)(i % T)))
            return tfm_err_set(err, "document start %d at batch row %zu, position %zu is not a position before it",
                               b->doc_start[i], i / T, i % T);
    }
    if (ed) {
        int S = b->S, Vs = tfm_model_config_src_vocab(c);
        for (size_t i = 0, Ns = (size_t)B * S; i < Ns; i++)
            if (b->src[i] < 0 || b->src[i] >= Vs)
                return tfm_err_set(err, "source token id %d at batch row %zu, position %zu is outside the source vocabulary (size %d)",
                                   (int)b->src[i], i / S, i % S, Vs);
    }
    for (int r = 0; r < B; r++) {
        if (b->lengths && (b->lengths[r] < 1 || b->lengths[r] > T))
            return tfm_err_set(err, "length %d of batch row %d is out of range [1, %d]",
                               b->lengths[r], r, T);
        if (b->prefix_len && (b->prefix_len[r] < 0 || b->prefix_len[r] > T))
            return tfm_err_set(err, "prefix length %d of batch row %d is out of range [0, %d]",
                               b->prefix_len[r], r, T);
        if (ed && b->src_lengths && (b->src_lengths[r] < 1 || b->src_lengths[r] > b->S))
            return tfm_err_set(err, "source length %d of batch row %d is out of range [1, %d]",
                               b->src_lengths[r], r, b->S);
    }
    return check_heads(c, b, err);
}

/* The heads' targets: each only for a model with its head, in range (every
 * part checks, so that targets for a head the model lacks are an error). */
static int check_heads(const tfm_model_config *c, const tfm_batch *b, tfm_err *err)
{
    if (!(b->lm_weight >= 0.0f && b->lm_weight < 1e6f))
        return tfm_err_set(err, "lm_weight %g is out of range [0, 1e6)", b->lm_weight);
    for (int h = 0; tfm_head_parts[h]; h++)
        if (tfm_head_parts[h]->check && tfm_head_parts[h]->check(c, b, err) < 0)
            return -1;
    return 0;
}

/* Copies what backward needs of the batch and derives the position ids. */
static void keep_batch(tfm_model_acts *a, const tfm_batch *b, int ed)
{
    size_t N = (size_t)b->B * b->T;
    memcpy(a->inputs, b->inputs, N * sizeof *b->inputs);
    a->have_targets = b->targets != NULL;
    if (b->targets)
        memcpy(a->targets, b->targets, N * sizeof *b->targets);
#define KEEP(field, to, n)                                                    \
    do {                                                                      \
        if (b->field)                                                         \
            memcpy(a->to, b->field, (n) * sizeof *a->to);                     \
    } while (0)
    KEEP(segments, segments, N);
    KEEP(doc_start, doc_start, N);
    KEEP(lengths, lengths, (size_t)b->B);
    KEEP(prefix_len, prefix_len, (size_t)b->B);
    a->S = ed ? b->S : 0;
    if (ed) {
        KEEP(src, src, (size_t)b->B * b->S);
        KEEP(src_lengths, src_lengths, (size_t)b->B);
        for (size_t i = 0, Ns = (size_t)b->B * b->S; i < Ns; i++)
            a->src_pos[i] = (int32_t)(i % b->S);
    }
#undef KEEP
    for (int h = 0; tfm_head_parts[h]; h++)
        if (a->head[h] && tfm_head_parts[h]->keep)
            tfm_head_parts[h]->keep(a->head[h], b);
    a->lm_weight = b->lm_weight > 0.0f ? b->lm_weight : 1.0f;
    a->has_segments = b->segments != NULL;
    a->lengths_i = b->lengths ? a->lengths : NULL;
    a->prefix_i = b->prefix_len ? a->prefix_len : NULL;
    a->doc_i = b->doc_start ? a->doc_start : NULL;
    a->src_len_i = ed && b->src_lengths ? a->src_lengths : NULL;
    for (size_t i = 0; i < N; i++)
        a->pos[i] = (int32_t)(i % b->T) - (b->doc_start ? b->doc_start[i] : 0);
}

/* One stack as forward and backward see it: the decoder (or an encoder's
 * only stack), or an encoder-decoder's encoder. */
typedef struct side {
    const char *pre;           /* its tensors' prefix: "" or "enc." */
    int enc;                   /* an encoder-decoder's encoder */
    int first, n_layer, cross; /* table row of its first block; blocks;
                                  cross-attention in them */
    int T;                     /* positions per sequence */
    size_t N;                  /* rows: B·T */
    embed_acts *e;
    layer_acts *layer;
    const int32_t *ids, *pos;
    int packed;                /* pos restarts per document */
    uint64_t site;             /* its dropout sites */
    tfm_attn_t5 t5;            /* its relative bias (t5 positions) */
} side;

static side side_of(tfm_model *m, int enc)
{
    const tfm_model_config *c = &m->cfg;
    tfm_model_acts *a = m->acts;
    side sd = {.pre = enc ? "enc." : "", .enc = enc};
    sd.first = enc ? m->enc_first_layer : m->first_layer;
    sd.n_layer = enc ? tfm_model_config_enc_layers(c) : c->n_layer;
    sd.cross = !enc && c->kind == TFM_KIND_ENCODER_DECODER;
    sd.T = enc ? a->S : m->T;
    sd.N = (size_t)m->B * sd.T;
    sd.e = enc ? &a->enc : &a->dec;
    sd.layer = enc ? a->enc_layer : a->layer;
    sd.ids = enc ? a->src : a->inputs;
    sd.pos = enc ? a->src_pos : a->pos;
    sd.packed = !enc && a->doc_i;
    sd.site = enc ? ENC_SITES : 0;
    if (c->pos == TFM_POS_T5)
        sd.t5 = (tfm_attn_t5){.table = side_ptr(m, m->params, sd.pre, "rel_bias.weight"),
                              .dtable = m->grads ? side_ptr(m, m->grads, sd.pre,
                                                            "rel_bias.weight")
                                                 : NULL,
                              .n_buckets = c->t5_buckets,
                              .max_distance = c->t5_max_distance,
                              .bidirectional = enc || c->kind == TFM_KIND_ENCODER};
    return sd;
}

/* The self-attention of block l of a stack, for the kept batch. */
static tfm_attn self_attn(const tfm_model *m, const side *sd, int l)
{
    const tfm_model_config *c = &m->cfg;
    const tfm_model_acts *a = m->acts;
    tfm_attn at = {.B = m->B, .Tq = sd->T, .Tk = sd->T, .NH = c->n_head,
                   .NKV = tfm_model_config_kv_heads(c), .HS = tfm_model_config_head_dim(c),
                   .dropout = attn_p(m), .window = c->window,
                   .seed = layer_site(a->seed, sd->site, l, SITE_ATT)};
    if (sd->enc) {
        at.mask = TFM_MASK_NONE;
        at.key_len = a->src_len_i;
    } else if (c->kind == TFM_KIND_ENCODER) {
        at.mask = TFM_MASK_NONE;
        at.key_len = a->lengths_i;
    } else {
        at.mask = a->prefix_i ? TFM_MASK_PREFIX : TFM_MASK_CAUSAL;
        at.prefix_len = a->prefix_i;
        at.doc_start = a->doc_i;
    }
    at.alibi = m->alibi;
    at.t5 = c->pos == TFM_POS_T5 ? &sd->t5 : NULL;
    at.impl = m->attn_impl;
    at.unscaled = c->attn_unscaled;
    return at;
}

/* The adapter of block l at site, over N rows (nn/lora.h); its dropout
 * stream is the site's own. */
static tfm_lora_op lora_op(const tfm_model *m, const side *sd, int l, int site, size_t N,
                           int in, int out)
{
    const tfm_model_config *c = &m->cfg;
    uint64_t k = LORA_SITES + (sd->enc ? (uint64_t)1 << 36 : 0) + (uint64_t)l * LS_N + site;
    return (tfm_lora_op){.N = (int)N, .I = in, .O = out, .r = c->lora_r,
                         .scale = c->lora_alpha / (float)c->lora_r, .dropout = lora_p(m),
                         .seed = site_seed(m->acts->seed, k)};
}

/* y[:, :out] (rows ldy apart) += the adapter of block l at site applied to
 * x [N, in], when the block has one there. */
static void lora_fwd(tfm_model *m, const side *sd, int l, const layer_params *lp, int site,
                     float *y, int ldy, const float *x, size_t N)
{
    const char *module;
    int in, out;
    if (!lp->la[site] || !lora_site(&m->cfg, site, sd->cross, &module, &in, &out))
        return;
    tfm_lora_op op = lora_op(m, sd, l, site, N, in, out);
    tfm_lora_forward(&op, y, ldy, sd->layer[l].lora_u[site], x, lp->la[site], lp->lb[site],
                     m->acts->lora_x);
}

/* Its backward: dy the gradient of y (rows ldy apart); dx += the input's. */
static void lora_bwd(tfm_model *m, const side *sd, int l, const layer_params *lp,
                     const layer_params *gp, int site, float *dx, const float *dy, int ldy,
                     const float *x, size_t N)
{
    const char *module;
    int in, out;
    if (!lp->la[site] || !lora_site(&m->cfg, site, sd->cross, &module, &in, &out))
        return;
    tfm_lora_op op = lora_op(m, sd, l, site, N, in, out);
    tfm_lora_backward(&op, dx, gp->la[site], gp->lb[site], dy, ldy, x,
                      sd->layer[l].lora_u[site], lp->la[site], lp->lb[site], m->acts->lora_x,
                      m->acts->lora_du);
}

/* The cross-attention of decoder block l: every target position over the
 * source's unpadded positions, no position term. */
static tfm_attn cross_attn(const tfm_model *m, int l)
{
    const tfm_model_config *c = &m->cfg;
    const tfm_model_acts *a = m->acts;
    return (tfm_attn){.B = m->B, .Tq = m->T, .Tk = a->S, .NH = c->n_head,
                      .NKV = tfm_model_config_kv_heads(c),
                      .HS = tfm_model_config_head_dim(c), .mask = TFM_MASK_NONE,
                      .key_len = a->src_len_i, .dropout = attn_p(m),
                      .seed = cross_site(a->seed, l, SITE_ATT), .impl = m->attn_impl,
                      .unscaled = c->attn_unscaled};
}

/* Rotates (or, with inverse, rotates back) the q and k columns of a stack's
 * rows laid out q | k | v: the n_head + n_kv_head heads of q and k are
 * adjacent. */
static void rope_qk(tfm_model *m, const side *sd, float *qkv, int inverse)
{
    const tfm_block blk = tfm_model_block(&m->cfg);
    tfm_rope_apply(qkv, tfm_block_qkv_dim(&blk), (int)sd->N, sd->pos, 0,
                   blk.n_head + blk.n_kv_head, blk.head_dim, m->acts->pe, m->acts->n_pe,
                   inverse);
}

static void scale_rows(float *x, size_t n, float s)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

/* The token embedding a stack reads: an untied source's own, else wte. */
static float *side_wte(const tfm_model *m, float *base, const side *sd)
{
    return sd->enc && !m->cfg.tie_source ? param_ptr(m, base, "enc.wte.weight")
                                         : param_ptr(m, base, "wte.weight");
}

static void embed_forward(tfm_model *m, const side *sd, int B)
{
    const tfm_model_config *c = &m->cfg;
    const tfm_block blk = tfm_model_block(c);
    tfm_model_acts *a = m->acts;
    embed_acts *e = sd->e;
    int C = tfm_model_config_emb_dim(c), T = sd->T; /* the tables' width */
    size_t N = sd->N;
    float *P = m->params, *wte = side_wte(m, P, sd);
    float *out = factorised(c) ? e->small : e->encoded;
    float *emb = c->emb_norm ? e->emb : out;
    float *wpe = side_ptr(m, P, sd->pre, "wpe.weight");
    if (c->pos == TFM_POS_LEARNED && !sd->packed && !c->emb_scale) {
        tfm_embedding_forward(emb, sd->ids, wte, wpe, B, T, C);
    } else {
        tfm_embedding_forward(emb, sd->ids, wte, NULL, B, T, C);
        if (c->emb_scale)
            scale_rows(emb, N * C, sqrtf((float)C));
        if (c->pos == TFM_POS_LEARNED)
            tfm_embedding_add(emb, sd->pos, wpe, (int)N, C);
        else if (c->pos == TFM_POS_SINUSOIDAL)
            tfm_embedding_add(emb, sd->pos, a->pe, (int)N, C);
    }
    if (!sd->enc && a->has_segments)
        tfm_embedding_add(emb, a->segments, param_ptr(m, P, "wse.weight"), (int)N, C);
    if (c->emb_norm)
        tfm_block_norm(&blk, out, e->emb_mean, e->emb_rstd, e->emb,
                              side_ptr(m, P, sd->pre, "ln_e.weight"),
                              side_ptr(m, P, sd->pre, "ln_e.bias"), (int)N, C);
    tfm_dropout_forward(out, out, N * C, emb_p(m), site_seed(a->seed, sd->site + SITE_EMB));
    if (factorised(c))
        linear_forward(e->encoded, out, param_ptr(m, P, "emb_proj.weight"),
                       param_ptr(m, P, "emb_proj.bias"), (int)N, C, c->n_embd);
}

/* Block l of a stack on input x; returns its output. */
static const float *block_forward(tfm_model *m, const side *sd, int l, const float *x)
{
    const tfm_model_config *c = &m->cfg;
    const tfm_block blk = tfm_model_block(c);
    tfm_model_acts *a = m->acts;
    int C = c->n_embd, F = tfm_model_config_ff(c), pre = c->ln == TFM_LN_PRE;
    int D = tfm_block_q_dim(&blk), KV = tfm_block_kv_dim(&blk), QKV = tfm_block_qkv_dim(&blk);
    int KO = tfm_block_qkv_off(&blk, 1), VO = tfm_block_qkv_off(&blk, 2); /* k's, v's columns */
    size_t N = sd->N;
    float p = drop_p(m);
    layer_params lp = block_ptrs(m, m->params, sd->first, l, sd->cross);
    layer_acts *la = &sd->layer[l];
    tfm_attn at = self_attn(m, sd, l);
    if (pre) {
        tfm_block_norm(&blk, la->ln1, la->ln1_mean, la->ln1_rstd, x, lp.p[P_LN1W],
                              lp.p[P_LN1B], N, C);
    }
    const float *qin = pre ? la->ln1 : x;
    linear_forward(la->qkv, qin, lp.p[P_QKVW], lp.p[P_QKVB], N, C, QKV);
    for (int j = 0; j < 3; j++)
        lora_fwd(m, sd, l, &lp, LS_Q + j, la->qkv + tfm_block_qkv_off(&blk, j), QKV, qin, N);
    if (c->pos == TFM_POS_ROPE)
        rope_qk(m, sd, la->qkv, 0);
    tfm_attn_forward(&at, la->atty, D, la->att, la->qkv, QKV, la->qkv + KO, QKV, la->qkv + VO,
                     QKV, a->attn_scratch);
    linear_forward(la->res_attn, la->atty, lp.p[P_PROJW], lp.p[P_PROJB], N, D, C);
    lora_fwd(m, sd, l, &lp, LS_O, la->res_attn, C, la->atty, N);
    tfm_dropout_forward(la->res_attn, la->res_attn, N * C, p,
                        layer_site(a->seed, sd->site, l, SITE_RATT));
    tfm_add_inplace(la->res_attn, x, N * C);
    /* h: the stream after the attention sublayer(s) */
    const float *h = la->res_attn;
    if (!pre) {
        tfm_block_norm(&blk, la->ln1, la->ln1_mean, la->ln1_rstd, la->res_attn,
                              lp.p[P_LN1W], lp.p[P_LN1B], N, C);
        h = la->ln1;
    }
    if (sd->cross) {
        size_t Ns = (size_t)m->B * a->S;
        tfm_attn xt = cross_attn(m, l);
        const float *xin = h;
        if (pre) {
            tfm_block_norm(&blk, la->lnx, la->lnx_mean, la->lnx_rstd, h, lp.p[P_LNXW],
                                  lp.p[P_LNXB], N, C);
            xin = la->lnx;
        }
        linear_forward(la->xq, xin, lp.p[P_XQW], lp.p[P_XQB], N, C, D);
        lora_fwd(m, sd, l, &lp, LS_XQ, la->xq, D, xin, N);
        linear_forward(la->xkv, a->memory, lp.p[P_XKVW], lp.p[P_XKVB], Ns, C, 2 * KV);
        lora_fwd(m, sd, l, &lp, LS_XK, la->xkv, 2 * KV, a->memory, Ns);
        lora_fwd(m, sd, l, &lp, LS_XV, la->xkv + KV, 2 * KV, a->memory, Ns);
        tfm_attn_forward(&xt, la->xatty, D, la->xatt, la->xq, D, la->xkv, 2 * KV,
                         la->xkv + KV, 2 * KV, a->attn_scratch);
        linear_forward(la->res_x, la->xatty, lp.p[P_XPW], lp.p[P_XPB], N, D, C);
        lora_fwd(m, sd, l, &lp, LS_XO, la->res_x, C, la->xatty, N);
        tfm_dropout_forward(la->res_x, la->res_x, N * C, p, cross_site(a->seed, l, SITE_RATT));
        tfm_add_inplace(la->res_x, h, N * C);
        h = la->res_x;
        if (!pre) {
            tfm_block_norm(&blk, la->lnx, la->lnx_mean, la->lnx_rstd, la->res_x,
                                  lp.p[P_LNXW], lp.p[P_LNXB], N, C);
            h = la->lnx;
        }
    }
    const float *mlp_in = h;
    if (pre) {
        tfm_block_norm(&blk, la->ln2, la->ln2_mean, la->ln2_rstd, h, lp.p[P_LN2W],
                              lp.p[P_LN2B], N, C);
        mlp_in = la->ln2;
    }
    linear_forward(la->fch, mlp_in, lp.p[P_FCW], lp.p[P_FCB], N, C, F);
    lora_fwd(m, sd, l, &lp, LS_FC, la->fch, F, mlp_in, N);
    if (la->fcl) { /* gated: the linear input beside the gate */
        linear_forward(la->fcl, mlp_in, lp.p[P_FC1W], lp.p[P_FC1B], N, C, F);
        lora_fwd(m, sd, l, &lp, LS_FC1, la->fcl, F, mlp_in, N);
    }
    tfm_block_ffn_mid(&blk, la->fcg, la->fch, la->fcl, N * F);
    tfm_dropout_forward(la->fcg, la->fcg, N * F, ffn_p(m), ffn_site(a->seed, sd->enc, l));
    linear_forward(la->res_mlp, la->fcg, lp.p[P_FCPW], lp.p[P_FCPB], N, F, C);
    lora_fwd(m, sd, l, &lp, LS_FP, la->res_mlp, C, la->fcg, N);
    tfm_dropout_forward(la->res_mlp, la->res_mlp, N * C, p,
                        layer_site(a->seed, sd->site, l, SITE_RMLP));
    tfm_add_inplace(la->res_mlp, h, N * C);
    if (pre)
        return la->res_mlp;
    tfm_block_norm(&blk, la->ln2, la->ln2_mean, la->ln2_rstd, la->res_mlp, lp.p[P_LN2W],
                          lp.p[P_LN2B], N, C);
    return la->ln2;
}

/* Embedding, blocks and (pre-LN) final norm of a stack; returns its output. */
static const float *stack_forward(tfm_model *m, const side *sd)
{
    const tfm_model_config *c = &m->cfg;
    const tfm_block blk = tfm_model_block(c);
    embed_forward(m, sd, m->B);
    const float *x = sd->e->encoded;
    for (int l = 0; l < sd->n_layer; l++)
        x = block_forward(m, sd, l, x);
    /* the output (ln_f's, or the last block's ln_2 when post-LN) is no
     * block's input and no norm's backward reads it: dropped in place */
    float *out = (float *)x;
    if (c->ln == TFM_LN_PRE) {
        embed_acts *e = sd->e;
        tfm_block_norm(&blk, e->lnf, e->lnf_mean, e->lnf_rstd, x,
                       side_ptr(m, m->params, sd->pre, "ln_f.weight"),
                       side_ptr(m, m->params, sd->pre, "ln_f.bias"), sd->N, c->n_embd);
        out = e->lnf;
    }
    tfm_dropout_forward(out, out, sd->N * (size_t)c->n_embd, final_p(m),
                        final_site(m->acts->seed, sd->enc));
    return out;
}

/* ---- heads ---------------------------------------------------------------- */

/* A fine-tuning head: without targets the LM logits are skipped. */
static int has_task_head(const tfm_model_config *c)
{
    for (int h = 0; tfm_head_parts[h]; h++)
        if (tfm_head_parts[h]->task && tfm_head_parts[h]->task(c))
            return 1;
    return 0;
}

/* The part that transforms the LM head's input (BERT's MLM transform), or
 * -1. */
static int lm_transform(const tfm_model_acts *a)
{
    for (int h = 0; tfm_head_parts[h]; h++)
        if (a->head[h] && tfm_head_parts[h]->lm_forward)
            return h;
    return -1;
}

/* Every head of the model on the stack's output: the LM (when there are
 * targets, or no task head), then the parts in table order; sets m->loss
 * and m->head_loss from the targets kept in the acts. */
static void heads_forward(tfm_model *m, const float *final, int lm_targets)
{
    const tfm_model_config *c = &m->cfg;
    tfm_model_acts *a = m->acts;
    /* the LM head reads rows of the embeddings' width (the MLM transform's
     * output); a factorised model has none without that transform */
    int C = tfm_model_config_emb_dim(c), V = c->vocab_size, B = m->B, T = m->T, N = B * T;
    float *P = m->params;
    double total = 0.0;
    int any = 0;
    for (int h = 0; h < TFM_HEAD_N; h++) {
        m->head_loss[h] = -1.0f;
        a->hcount[h] = 0;
    }
    a->count = 0;
    a->lm_rows = 0;
    a->lm_tgt = NULL;
    if ((lm_targets || !has_task_head(c)) && (!factorised(c) || c->mlm_head)) {
        const float *head = c->tie_embeddings ? param_ptr(m, P, "wte.weight")
                                              : param_ptr(m, P, "lm_head.weight");
        const int32_t *tgt = lm_targets ? a->targets : NULL;
        const float *x = final;
        const char *bias = c->head_bias ? "final_logits_bias" : NULL;
        int R = N, t = lm_transform(a);
        if (t >= 0) {
            R = tfm_head_parts[t]->lm_forward(a->head[t], m, final, tgt, &x, &tgt);
            bias = tfm_head_parts[t]->lm_bias;
        }
        if (R) {
            tfm_gemm(0, 1, R, V, C, tfm_head_scale(c), x, C, head, C, 0.0f, a->logits, V);
            if (bias)
                tfm_bias_forward(a->logits, param_ptr(m, P, bias), R, V);
        }
        a->lm_rows = R;
        a->lm_x = x;
        a->lm_bias = bias;
        if (tgt) {
            double sum = R ? tfm_crossentropy_forward(a->lse, a->losses, a->logits, tgt, R, V,
                                                      c->label_smoothing, &a->count)
                           : 0.0;
            a->lm_tgt = tgt;
            a->hcount[TFM_HEAD_LM] = a->count;
            m->head_loss[TFM_HEAD_LM] = a->count ? (float)(sum / a->count) : 0.0f;
            total += a->lm_weight * m->head_loss[TFM_HEAD_LM];
            any = 1;
        }
    }
    for (int h = 0; tfm_head_parts[h]; h++) {
        const tfm_head_part *hp = tfm_head_parts[h];
        float l;
        if (a->head[h] && hp->forward &&
            hp->forward(a->head[h], m, final, &l, &a->hcount[hp->loss])) {
            m->head_loss[hp->loss] = l;
            total += l;
            any = 1;
        }
    }
    a->have_targets = any;
    m->loss = any ? (float)total : -1.0f;
}

const float *tfm_model_head_out(const tfm_model *m, tfm_head h, int *rows, int *cols)
{
    const tfm_model_acts *a = m->acts;
    *rows = *cols = 0;
    if (!a)
        return NULL;
    if (h == TFM_HEAD_LM) {
        if (!a->lm_rows)
            return NULL;
        *rows = a->lm_rows;
        *cols = m->cfg.vocab_size;
        return a->logits;
    }
    for (int k = 0; tfm_head_parts[k]; k++)
        if (tfm_head_parts[k]->loss == h && a->head[k] && tfm_head_parts[k]->out)
            return tfm_head_parts[k]->out(a->head[k], m, rows, cols);
    return NULL;
}

/* The heads backward: f[h] is d(total loss)/d(each counted item's loss) of
 * head h.  Writes the gradient of the stack's output into dfinal [N,C]
 * (scratch: a->d1, free before the blocks' backward). */
static void heads_backward(tfm_model *m, const float *final, float *dfinal, const float *f)
{
    const tfm_model_config *c = &m->cfg;
    tfm_model_acts *a = m->acts;
    int C = c->n_embd, E = tfm_model_config_emb_dim(c), V = c->vocab_size, N = m->B * m->T;
    float *G = m->grads, *P = m->params, *tmp = a->d1;
    int R = a->lm_rows, wrote = 0;
    if (R && a->lm_tgt) {
        float *head = c->tie_embeddings ? param_ptr(m, P, "wte.weight")
                                        : param_ptr(m, P, "lm_head.weight");
        float *dhead = c->tie_embeddings ? param_ptr(m, G, "wte.weight")
                                         : param_ptr(m, G, "lm_head.weight");
        int rows = m->rows_grad && m->rows_head == TFM_HEAD_LM;
        tfm_crossentropy_backward(a->logits, a->lse, a->lm_tgt, R, V, c->label_smoothing,
                                  rows ? 1.0f : f[TFM_HEAD_LM]);
        for (int r = 0; rows && r < R; r++) { /* each row's own factor */
            float *g = a->logits + (size_t)r * V, w = m->rows_grad[m->rows_per_pos ? r : r / m->T];
            for (int i = 0; i < V; i++)
                g[i] *= w;
        }
        /* logits = s·x·headᵀ (+ bias) */
        const float hs = tfm_head_scale(c);
        if (dhead) /* NULL: frozen */
            tfm_gemm(1, 0, V, E, R, hs, a->logits, V, a->lm_x, E, 1.0f, dhead, E);
        float *dbias = a->lm_bias ? param_ptr(m, G, a->lm_bias) : NULL;
        if (dbias)
            tfm_bias_backward(dbias, a->logits, R, V);
        int t = lm_transform(a);
        if (t < 0) {
            tfm_gemm(0, 0, N, C, V, hs, a->logits, V, head, C, 0.0f, dfinal, C);
        } else {
            /* R ≤ N rows of E: tmp is planned [N, max(C, E)] */
            tfm_gemm(0, 0, R, E, V, hs, a->logits, V, head, E, 0.0f, tmp, E);
            tfm_head_parts[t]->lm_backward(a->head[t], m, R, tmp, dfinal);
        }
        wrote = 1;
    }
    if (!wrote)
        memset(dfinal, 0, (size_t)N * C * sizeof *dfinal);
    for (int h = 0; tfm_head_parts[h]; h++)
        if (a->head[h] && tfm_head_parts[h]->backward)
            tfm_head_parts[h]->backward(a->head[h], m, final, dfinal, tmp,
                                        f[tfm_head_parts[h]->loss]);
}

int tfm_model_forward_checked(tfm_model *m, const tfm_batch *batch, float *loss, tfm_err *err)
{
    const tfm_model_config *c = &m->cfg;
    int B = batch->B, T = batch->T, ed = c->kind == TFM_KIND_ENCODER_DECODER;
    int S = ed ? batch->S : 0;
    int C = c->n_embd, V = c->vocab_size;
    size_t N = (size_t)B * T;
    if (acts_plan(m, B, T, S, err) < 0)
        return -1;
    tfm_model_acts *a = m->acts;
    m->B = B;
    m->T = T;
    keep_batch(a, batch, ed);
    float p = drop_p(m);
    a->seed = p > 0.0f || lora_p(m) > 0.0f || ffn_p(m) > 0.0f || final_p(m) > 0.0f
                  ? tfm_rng_u64(&m->rng)
                  : 0;
    a->n_pe = T > S ? T : S;
    if (c->pos == TFM_POS_SINUSOIDAL)
        tfm_sinusoidal_table(a->pe, a->n_pe, C);
    else if (c->pos == TFM_POS_ROPE) /* packed documents restart: no position reaches T */
        tfm_rope_table(a->pe, 0, a->n_pe, tfm_model_config_head_dim(c), &c->rope);
    if (ed) {
        side enc = side_of(m, 1);
        a->memory = stack_forward(m, &enc);
    }
    side dec = side_of(m, 0);
    const float *final = stack_forward(m, &dec);
    heads_forward(m, final, batch->targets != NULL);
    (void)N;
    (void)V;
    if (loss)
        *loss = m->loss;
    return 0;
}

int tfm_model_forward_batch(tfm_model *m, const tfm_batch *batch, float *loss, tfm_err *err)
{
    if (tfm_batch_check(&m->cfg, batch, err) < 0)
        return -1;
    return tfm_model_forward_checked(m, batch, loss, err);
}

int tfm_model_forward(tfm_model *m, const int32_t *inputs, const int32_t *targets,
                      int B, int T, float *loss, tfm_err *err)
{
    tfm_batch b = {.inputs = inputs, .targets = targets, .B = B, .T = T};
    return tfm_model_forward_batch(m, &b, loss, err);
}

/* ---- gradients ready during backward (tfm_model.grads_ready) ------------ */

/* The offset just past a stack's tensors (its blocks, then ln_f when
 * pre-LN): the decoder's is where the LM head and the heads start. */
static size_t stack_end(const tfm_model *m, const side *sd)
{
    int row = sd->first + sd->n_layer * block_rows(m, sd->cross) +
              (m->cfg.ln == TFM_LN_PRE ? (m->cfg.norm == TFM_NORM_RMS ? 1 : 2) : 0);
    return row < m->n_table ? m->table[row].offset : m->n_params;
}

/* Backward of m has written grads[lo, n_params) for the last time. */
static void grads_final(tfm_model *m, size_t lo)
{
    if (m->grads_ready)
        m->grads_ready(m->grads_ready_ctx, lo);
}

/* The cross-attention sublayer of decoder block l backward: dh is the
 * gradient of its output; adds the memory's gradient into a->dmem and
 * writes the gradient of its input xin's LayerNorm-free path into *dxin
 * (=, or += with beta 1). */
static void cross_backward(tfm_model *m, const side *sd, int l, const layer_params *lp,
                           const layer_params *gp, const float *dres, const float *xin,
                           float *dxin, float beta)
{
    const tfm_model_config *c = &m->cfg;
    tfm_model_acts *a = m->acts;
    layer_acts *la = &a->layer[l];
    int C = c->n_embd, D = tfm_model_config_attn_dim(c), KV = tfm_model_config_kv_dim(c);
    size_t N = (size_t)m->B * m->T, Ns = (size_t)m->B * a->S;
    tfm_attn xt = cross_attn(m, l);
    /* res_x = h + drop(xatty·Wxp + b) */
    tfm_dropout_backward(a->dtmp, dres, N * C, drop_p(m), cross_site(a->seed, l, SITE_RATT));
    linear_backward(a->datty, 0.0f, gp->p[P_XPW], gp->p[P_XPB], a->dtmp, la->xatty,
                    lp->p[P_XPW], N, D, C);
    lora_bwd(m, sd, l, lp, gp, LS_XO, a->datty, a->dtmp, C, la->xatty, N);
    /* dq into dqkv as [N, D] */
    tfm_attn_backward(&xt, a->dqkv, D, a->dxkv, 2 * KV, a->dxkv + KV, 2 * KV, a->datty, D,
                      la->xatt, la->xq, D, la->xkv, 2 * KV, la->xkv + KV, 2 * KV,
                      a->attn_scratch);
    linear_backward(a->dmem, 1.0f, gp->p[P_XKVW], gp->p[P_XKVB], a->dxkv, a->memory,
                    lp->p[P_XKVW], Ns, C, 2 * KV);
    lora_bwd(m, sd, l, lp, gp, LS_XK, a->dmem, a->dxkv, 2 * KV, a->memory, Ns);
    lora_bwd(m, sd, l, lp, gp, LS_XV, a->dmem, a->dxkv + KV, 2 * KV, a->memory, Ns);
    linear_backward(dxin, beta, gp->p[P_XQW], gp->p[P_XQB], a->dqkv, xin, lp->p[P_XQW], N, C,
                    D);
    lora_bwd(m, sd, l, lp, gp, LS_XQ, dxin, a->dqkv, D, xin, N);
}

/* The feed-forward of a block backward: dres is the gradient of its
 * output, in its input (ln_2's output, or the stream after post-LN);
 * writes the input's gradient into din (=, or += with beta 1).  din may be
 * dres (it is read first). */
static void ffn_backward(tfm_model *m, const side *sd, int l, const tfm_block *blk,
                         const layer_params *lp, const layer_params *gp, layer_acts *la,
                         const float *dres, const float *in, float *din, float beta, size_t N)
{
    tfm_model_acts *a = m->acts;
    int C = m->cfg.n_embd, F = tfm_model_config_ff(&m->cfg);
    float pf = ffn_p(m);
    uint64_t fseed = ffn_site(a->seed, sd->enc, l);
    if (!a->keep_fcg) { /* the same mask: a function of its stream */
        tfm_block_ffn_mid(blk, la->fcg, la->fch, la->fcl, N * F);
        tfm_dropout_forward(la->fcg, la->fcg, N * F, pf, fseed);
    }
    linear_backward(a->dfch, 0.0f, gp->p[P_FCPW], gp->p[P_FCPB], dres, la->fcg,
                    lp->p[P_FCPW], N, F, C);
    lora_bwd(m, sd, l, lp, gp, LS_FP, a->dfch, dres, C, la->fcg, N);
    tfm_dropout_backward(a->dfch, a->dfch, N * F, pf, fseed);
    tfm_block_ffn_mid_backward(blk, a->dfch, a->dfcl, a->dfch, la->fch, la->fcl, N * F);
    linear_backward(din, beta, gp->p[P_FCW], gp->p[P_FCB], a->dfch, in, lp->p[P_FCW], N, C, F);
    lora_bwd(m, sd, l, lp, gp, LS_FC, din, a->dfch, F, in, N);
    if (la->fcl) {
        linear_backward(din, 1.0f, gp->p[P_FC1W], gp->p[P_FC1B], a->dfcl, in, lp->p[P_FC1W], N,
                        C, F);
        lora_bwd(m, sd, l, lp, gp, LS_FC1, din, a->dfcl, F, in, N);
    }
}

/* Block l of a stack backward: dy is the gradient of its output; returns
 * the buffer holding the gradient of its input (the next dy). */
static float *block_backward(tfm_model *m, const side *sd, int l, float *dy)
{
    const tfm_model_config *c = &m->cfg;
    const tfm_block blk = tfm_model_block(c);
    tfm_model_acts *a = m->acts;
    int C = c->n_embd, D = tfm_block_q_dim(&blk), QKV = tfm_block_qkv_dim(&blk);
    int KO = tfm_block_qkv_off(&blk, 1), VO = tfm_block_qkv_off(&blk, 2); /* k's, v's columns */
    size_t N = sd->N;
    float p = drop_p(m);
    float *G = m->grads, *P = m->params;
    layer_params lp = block_ptrs(m, P, sd->first, l, sd->cross);
    layer_params gp = block_ptrs(m, G, sd->first, l, sd->cross);
    layer_acts *la = &sd->layer[l];
    const float *x;
    if (l == 0)
        x = sd->e->encoded;
    else
        x = c->ln == TFM_LN_PRE ? sd->layer[l - 1].res_mlp : sd->layer[l - 1].ln2;
    tfm_attn at = self_attn(m, sd, l);
    uint64_t rmlp = layer_site(a->seed, sd->site, l, SITE_RMLP);
    uint64_t ratt = layer_site(a->seed, sd->site, l, SITE_RATT);
    if (c->ln == TFM_LN_PRE) {
        const float *h = sd->cross ? la->res_x : la->res_attn;
        /* res_mlp = h + drop(act(fch)·Wp + b); dy flows to h */
        tfm_dropout_backward(a->dtmp, dy, N * C, p, rmlp);
        ffn_backward(m, sd, l, &blk, &lp, &gp, la, a->dtmp, la->ln2, a->dtmp, 0.0f, N);
        tfm_block_norm_backward(&blk, dy, gp.p[P_LN2W], gp.p[P_LN2B], a->dtmp, h, lp.p[P_LN2W],
                               la->ln2_mean, la->ln2_rstd, N, C);
        grads_final(m, (size_t)(lp.p[P_LN2W] - P));
        if (sd->cross) {
            /* res_x = res_attn + drop(xattn(ln_x(res_attn))); dy holds d res_x */
            cross_backward(m, sd, l, &lp, &gp, dy, la->lnx, a->d3, 0.0f);
            tfm_block_norm_backward(&blk, dy, gp.p[P_LNXW], gp.p[P_LNXB], a->d3, la->res_attn,
                                   lp.p[P_LNXW], la->lnx_mean, la->lnx_rstd, N, C);
            grads_final(m, (size_t)(lp.p[P_LNXW] - P));
        }
        /* res_attn = x + drop(atty·Wproj + b); dy now holds d res_attn */
        tfm_dropout_backward(a->dtmp, dy, N * C, p, ratt);
        linear_backward(a->datty, 0.0f, gp.p[P_PROJW], gp.p[P_PROJB], a->dtmp, la->atty,
                        lp.p[P_PROJW], N, D, C);
        lora_bwd(m, sd, l, &lp, &gp, LS_O, a->datty, a->dtmp, C, la->atty, N);
        tfm_attn_backward(&at, a->dqkv, QKV, a->dqkv + KO, QKV, a->dqkv + VO, QKV,
                          a->datty, D, la->att, la->qkv, QKV, la->qkv + KO, QKV,
                          la->qkv + VO, QKV, a->attn_scratch);
        if (c->pos == TFM_POS_ROPE)
            rope_qk(m, sd, a->dqkv, 1);
        linear_backward(a->dtmp, 0.0f, gp.p[P_QKVW], gp.p[P_QKVB], a->dqkv, la->ln1,
                        lp.p[P_QKVW], N, C, QKV);
        for (int j = 0; j < 3; j++)
            lora_bwd(m, sd, l, &lp, &gp, LS_Q + j, a->dtmp,
                     a->dqkv + tfm_block_qkv_off(&blk, j), QKV, la->ln1, N);
        tfm_block_norm_backward(&blk, dy, gp.p[P_LN1W], gp.p[P_LN1B], a->dtmp, x, lp.p[P_LN1W],
                               la->ln1_mean, la->ln1_rstd, N, C);
        grads_final(m, (size_t)(lp.p[P_LN1W] - P));
        return dy; /* d x */
    }
    /* post-LN: ln2 = LN(res_mlp) */
    float *dr2 = a->d1, *dr1 = a->d2;
    memset(dr2, 0, N * C * sizeof *dr2);
    tfm_block_norm_backward(&blk, dr2, gp.p[P_LN2W], gp.p[P_LN2B], dy, la->res_mlp, lp.p[P_LN2W],
                           la->ln2_mean, la->ln2_rstd, N, C);
    /* res_mlp = h + drop(act(fch)·Wp + b), h = ln_x or ln_1 */
    const float *h = sd->cross ? la->lnx : la->ln1;
    tfm_dropout_backward(a->dtmp, dr2, N * C, p, rmlp);
    ffn_backward(m, sd, l, &blk, &lp, &gp, la, a->dtmp, h, dr2, 1.0f, N);
    grads_final(m, (size_t)(lp.p[P_LN2W] - P));
    /* dr2 = d h */
    float *dln1 = dr2;
    if (sd->cross) {
        /* ln_x = LN(res_x); res_x = ln_1 + drop(xattn(ln_1)) */
        float *dres = a->d3;
        memset(dres, 0, N * C * sizeof *dres);
        tfm_block_norm_backward(&blk, dres, gp.p[P_LNXW], gp.p[P_LNXB], dr2, la->res_x, lp.p[P_LNXW],
                               la->lnx_mean, la->lnx_rstd, N, C);
        cross_backward(m, sd, l, &lp, &gp, dres, la->ln1, dres, 1.0f);
        grads_final(m, (size_t)(lp.p[P_LNXW] - P));
        dln1 = dres;
    }
    /* ln1 = LN(res_attn) */
    memset(dr1, 0, N * C * sizeof *dr1);
    tfm_block_norm_backward(&blk, dr1, gp.p[P_LN1W], gp.p[P_LN1B], dln1, la->res_attn, lp.p[P_LN1W],
                           la->ln1_mean, la->ln1_rstd, N, C);
    /* res_attn = x + drop(atty·Wproj + b) */
    tfm_dropout_backward(a->dtmp, dr1, N * C, p, ratt);
    linear_backward(a->datty, 0.0f, gp.p[P_PROJW], gp.p[P_PROJB], a->dtmp, la->atty,
                    lp.p[P_PROJW], N, D, C);
    lora_bwd(m, sd, l, &lp, &gp, LS_O, a->datty, a->dtmp, C, la->atty, N);
    tfm_attn_backward(&at, a->dqkv, QKV, a->dqkv + KO, QKV, a->dqkv + VO, QKV,
                      a->datty, D, la->att, la->qkv, QKV, la->qkv + KO, QKV,
                      la->qkv + VO, QKV, a->attn_scratch);
    if (c->pos == TFM_POS_ROPE)
        rope_qk(m, sd, a->dqkv, 1);
    linear_backward(dr1, 1.0f, gp.p[P_QKVW], gp.p[P_QKVB], a->dqkv, x, lp.p[P_QKVW], N, C,
                    QKV);
    for (int j = 0; j < 3; j++)
        lora_bwd(m, sd, l, &lp, &gp, LS_Q + j, dr1, a->dqkv + tfm_block_qkv_off(&blk, j), QKV,
                 x, N);
    grads_final(m, (size_t)(lp.p[P_LN1W] - P));
    /* dr1 = d x: it becomes the next block's dy */
    a->d2 = dy;
    a->d0 = dr1;
    return dr1;
}

/* A stack's blocks and embedding backward, from dout, the gradient of its
 * output (before the final norm's backward). */
static void stack_backward(tfm_model *m, const side *sd, float *dout)
{
    const tfm_model_config *c = &m->cfg;
    const tfm_block blk = tfm_model_block(c);
    tfm_model_acts *a = m->acts;
    int C = c->n_embd, L = sd->n_layer;
    size_t N = sd->N;
    float *G = m->grads, *P = m->params;
    embed_acts *e = sd->e;
    float *dy = a->d0;
    tfm_dropout_backward(dout, dout, N * C, final_p(m), final_site(a->seed, sd->enc));
    if (c->ln == TFM_LN_PRE) {
        memset(dy, 0, N * C * sizeof *dy);
        tfm_block_norm_backward(&blk, dy, side_ptr(m, G, sd->pre, "ln_f.weight"),
                               side_ptr(m, G, sd->pre, "ln_f.bias"), dout,
                               sd->layer[L - 1].res_mlp, side_ptr(m, P, sd->pre, "ln_f.weight"),
                               e->lnf_mean, e->lnf_rstd, N, C);
        grads_final(m, (size_t)(side_ptr(m, P, sd->pre, "ln_f.weight") - P));
    } else if (dout != dy) {
        memcpy(dy, dout, N * C * sizeof *dy);
    }
    for (int l = L - 1; l >= 0; l--)
        dy = block_backward(m, sd, l, dy);
    if (!side_wte(m, G, sd))
        return; /* frozen embeddings (a LoRA run's): nothing below to train */
    float *dsmall = a->dtmp;
    if (factorised(c)) {
        /* emb_proj's, then the tables' at width E (dtmp and dy are [N,C],
         * which E may exceed: the embedding's own buffers instead) */
        C = tfm_model_config_emb_dim(c);
        dsmall = e->dsmall;
        linear_backward(dsmall, 0.0f, param_ptr(m, G, "emb_proj.weight"),
                        param_ptr(m, G, "emb_proj.bias"), dy, e->small,
                        param_ptr(m, P, "emb_proj.weight"), (int)N, C, c->n_embd);
        dy = e->small; /* free: the forward's input of emb_proj is read */
    }
    tfm_dropout_backward(dsmall, factorised(c) ? dsmall : dy, N * C, emb_p(m),
                         site_seed(a->seed, sd->site + SITE_EMB));
    const float *demb = dsmall;
    if (c->emb_norm) {
        /* dy is free now: it receives d(sum before ln_e) */
        memset(dy, 0, N * C * sizeof *dy);
        tfm_block_norm_backward(&blk, dy, side_ptr(m, G, sd->pre, "ln_e.weight"),
                               side_ptr(m, G, sd->pre, "ln_e.bias"), dsmall, e->emb,
                               side_ptr(m, P, sd->pre, "ln_e.weight"), e->emb_mean, e->emb_rstd,
                               N, C);
        demb = dy;
    }
    int by_id = c->pos == TFM_POS_LEARNED && (sd->packed || c->emb_scale);
    float *wpe = c->pos == TFM_POS_LEARNED ? side_ptr(m, G, sd->pre, "wpe.weight") : NULL;
    const float *dtok = demb;
    if (c->emb_scale) {
        /* the token rows were scaled by √C, the positions were not; one of
         * dy and dtmp holds demb, the other is free */
        float *buf = demb == a->dtmp ? dy : a->dtmp;
        memcpy(buf, demb, N * C * sizeof *buf);
        scale_rows(buf, N * C, sqrtf((float)C));
        dtok = buf;
    }
    tfm_embedding_backward(side_wte(m, G, sd), by_id ? NULL : wpe, dtok, sd->ids, m->B, sd->T,
                           C);
    if (by_id)
        tfm_embedding_backward(wpe, NULL, demb, sd->pos, 1, (int)N, C);
    if (!sd->enc && a->has_segments)
        tfm_embedding_backward(param_ptr(m, G, "wse.weight"), NULL, demb, a->segments, 1,
                               (int)N, C);
}

/* Backward of the last forward; f[h]: d(loss)/d(each counted item's loss)
 * of head h. */
void tfm_model_backward_heads(tfm_model *m, const float f[TFM_HEAD_N])
{
    const tfm_model_config *c = &m->cfg;
    tfm_model_acts *a = m->acts;
    TFM_ASSERT(a && a->have_targets && !a->inference);
    int C = c->n_embd, L = c->n_layer;
    const float *final = c->ln == TFM_LN_PRE ? a->dec.lnf : a->layer[L - 1].ln2;
    /* d final: into dtmp before the final norm, else straight into d0 */
    float *dfinal = c->ln == TFM_LN_PRE ? a->dtmp : a->d0;
    heads_backward(m, final, dfinal, f);
    int ed = c->kind == TFM_KIND_ENCODER_DECODER;
    if (ed)
        memset(a->dmem, 0, (size_t)m->B * a->S * C * sizeof *a->dmem);
    side dec = side_of(m, 0);
    /* the heads and an untied LM head are done (a tied one is wte) */
    grads_final(m, stack_end(m, &dec));
    stack_backward(m, &dec, dfinal);
    if (ed) {
        side enc = side_of(m, 1);
        stack_backward(m, &enc, a->dmem);
    }
    /* the embeddings last: wte takes the tied head's, the decoder's and the
     * tied source's gradients */
    grads_final(m, 0);
    /* the logits now hold their gradient */
    a->have_targets = 0;
}

const float *tfm_model_lm_losses(const tfm_model *m)
{
    const tfm_model_acts *a = m->acts;
    return a && a->lm_tgt && a->lm_rows == m->B * m->T ? a->losses : NULL;
}

void tfm_model_backward_rows(tfm_model *m, tfm_head h, const float *w)
{
    TFM_ASSERT(m->acts && (h == TFM_HEAD_CLASS || tfm_model_lm_losses(m)));
    float f[TFM_HEAD_N] = {0};
    f[h] = 1.0f;
    m->rows_grad = w;
    m->rows_head = h;
    tfm_model_backward_heads(m, f);
    m->rows_grad = NULL;
}

void tfm_model_backward_positions(tfm_model *m, const float *w_lm, const float *w_tag)
{
    TFM_ASSERT(m->acts && tfm_model_lm_losses(m) && (!w_tag || m->cfg.n_tags == 1));
    float f[TFM_HEAD_N] = {0};
    f[TFM_HEAD_LM] = 1.0f;
    m->rows_grad = w_lm;
    m->rows_head = TFM_HEAD_LM;
    m->rows_per_pos = 1;
    m->tag_grad = w_tag;
    tfm_model_backward_heads(m, f);
    m->rows_grad = m->tag_grad = NULL;
    m->rows_per_pos = 0;
}

void tfm_model_backward(tfm_model *m, float scale)
{
    tfm_model_acts *a = m->acts;
    TFM_ASSERT(a);
    float f[TFM_HEAD_N];
    for (int h = 0; h < TFM_HEAD_N; h++)
        f[h] = a->hcount[h] ? scale / (float)a->hcount[h] : 0.0f;
    f[TFM_HEAD_LM] *= a->lm_weight;
    tfm_model_backward_heads(m, f);
}

/* ---- batches in parts ----------------------------------------------------- */

const long *tfm_model_head_counts(const tfm_model *m)
{
    return m->acts->hcount;
}


int tfm_model_forward_backward(tfm_model *m, const int32_t *inputs, const int32_t *targets,
                             int B, int T, float scale, float *loss, tfm_err *err)
{
    tfm_batch b = {.inputs = inputs, .targets = targets, .B = B, .T = T};
    return tfm_model_forward_backward_batch(m, &b, scale, loss, err);
}

tfm_batch tfm_batch_rows(const tfm_batch *b, int r0, int rows)
{
    size_t off = (size_t)r0 * b->T;
    tfm_batch p = {.inputs = b->inputs + off, .targets = b->targets ? b->targets + off : NULL,
                   .B = rows, .T = b->T};
    p.segments = b->segments ? b->segments + off : NULL;
    p.doc_start = b->doc_start ? b->doc_start + off : NULL;
    p.lengths = b->lengths ? b->lengths + r0 : NULL;
    p.prefix_len = b->prefix_len ? b->prefix_len + r0 : NULL;
    p.S = b->S;
    p.src = b->src ? b->src + (size_t)r0 * b->S : NULL;
    p.src_lengths = b->src_lengths ? b->src_lengths + r0 : NULL;
    for (int h = 0; tfm_head_parts[h]; h++)
        if (tfm_head_parts[h]->rows)
            tfm_head_parts[h]->rows(&p, b, r0);
    p.lm_weight = b->lm_weight;
    p.head_total = b->head_total;
    return p;
}

void tfm_batch_counts(const tfm_model_config *c, const tfm_batch *b, long count[TFM_HEAD_N])
{
    size_t N = (size_t)b->B * b->T;
    for (int h = 0; h < TFM_HEAD_N; h++)
        count[h] = 0;
    for (size_t i = 0; b->targets && i < N; i++)
        count[TFM_HEAD_LM] += b->targets[i] >= 0;
    for (int h = 0; tfm_head_parts[h]; h++)
        if (tfm_head_parts[h]->count)
            count[tfm_head_parts[h]->loss] = tfm_head_parts[h]->count(c, b);
}

void tfm_head_factors(float f[TFM_HEAD_N], const long total[TFM_HEAD_N],
                      const float w[TFM_HEAD_N], float scale)
{
    for (int h = 0; h < TFM_HEAD_N; h++)
        f[h] = total[h] ? scale * w[h] / (float)total[h] : 0.0f;
}

/* With tfm_batch.head_total, each head's sum over total[h] is this batch's
 * share of the larger one's mean. */
void tfm_model_parts_loss(tfm_model *m, tfm_model *const *part, int n,
                          long (*count)[TFM_HEAD_N], const long total[TFM_HEAD_N],
                          const int given[TFM_HEAD_N], const float w[TFM_HEAD_N])
{
    double loss_sum = 0;
    for (int h = 0; h < TFM_HEAD_N; h++) {
        double sum = 0;
        for (int k = 0; k < n; k++)
            if (count[k][h])
                sum += (double)part[k]->head_loss[h] * (double)count[k][h];
        m->head_loss[h] = !given[h] ? -1.0f : total[h] ? (float)(sum / (double)total[h]) : 0.0f;
        if (given[h])
            loss_sum += w[h] * m->head_loss[h];
    }
    m->loss = (float)loss_sum;
}

void tfm_batch_heads(const tfm_batch *b, int given[TFM_HEAD_N], float w[TFM_HEAD_N])
{
    for (int h = 0; h < TFM_HEAD_N; h++) {
        given[h] = 0;
        w[h] = 1.0f;
    }
    given[TFM_HEAD_LM] = b->targets != NULL;
    w[TFM_HEAD_LM] = b->lm_weight > 0.0f ? b->lm_weight : 1.0f;
    for (int h = 0; tfm_head_parts[h]; h++)
        if (tfm_head_parts[h]->given)
            given[tfm_head_parts[h]->loss] = tfm_head_parts[h]->given(b);
}

int tfm_model_forward_backward_batch(tfm_model *m, const tfm_batch *batch, float scale,
                                     float *loss, tfm_err *err)
{
    int given[TFM_HEAD_N], any = 0;
    float w[TFM_HEAD_N];
    tfm_batch_heads(batch, given, w);
    for (int h = 0; h < TFM_HEAD_N; h++)
        any |= given[h];
    TFM_ASSERT(any);
    float l;
    if (tfm_model_forward_batch(m, batch, &l, err) < 0)
        return -1;
    if (!batch->head_total) {
        tfm_model_backward(m, scale);
    } else {
        float f[TFM_HEAD_N];
        tfm_head_factors(f, batch->head_total, w, scale);
        tfm_model_backward_heads(m, f);
        long count[1][TFM_HEAD_N];
        memcpy(count[0], m->acts->hcount, sizeof count[0]);
        tfm_model_parts_loss(m, &m, 1, count, batch->head_total, given, w);
    }
    if (loss)
        *loss = m->loss;
    return 0;
}
