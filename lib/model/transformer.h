/* The transformer: one description, one parameter table, one training
 * forward and backward, for decoders (GPT) and encoders (BERT).
 *
 * Tutorial:
 *
 *     tfm_model_config cfg;
 *     tfm_model_config_default(&cfg);        // GPT-2 small shape, pre-LN decoder
 *     cfg.n_layer = 4; cfg.vocab_size = 73;  // ...
 *     tfm_model m;
 *     if (tfm_model_init(&m, &cfg, &err) < 0) ...    // params (zeroed) + grads
 *     tfm_model_init_weights(&m, seed);              // GPT-2 style random init
 *     tfm_model_set_training(&m, 1);                 // dropout on
 *     for (;;) {
 *         tfm_model_zero_grad(&m);
 *         if (tfm_model_forward(&m, x, y, B, T, &loss, &err) < 0) ...
 *         tfm_model_backward(&m, 1.0f);              // grads += d(loss)/d(params)
 *         ... optimizer over m.params / m.grads using m.table ...
 *     }
 *     tfm_model_free(&m);
 *
 * Memory (llm.c style): the parameters are one float array sliced into named
 * tensors (m.table lists them with offsets), the gradients a second array of
 * the same layout, the activations a third, planned for the largest (B, T)
 * seen so far and reused; nothing is allocated per step.
 *
 * The model (C = n_embd, F = d_ff, NH heads of HS = head_dim or C/NH, D =
 * NH·HS the attention's inner width, C unless head_dim says otherwise; NKV
 * = n_kv_head key/value heads, K = NKV·HS their width, D unless grouped):
 *   x = wte[tok]·(√C with emb_scale) (+ wpe[pos] learned | + sin/cos(pos) sinusoidal)
 *       (+ wse[segment] when n_segments > 0); x = ln_e(x) when emb_norm;
 *       dropout; with emb_dim E (a factorised embedding: the tables and
 *       ln_e E wide) x = x·emb_proj + b, E → C.
 *   blocks, pre-LN (GPT-2):  x = x + attn(ln_1(x)); x = x + mlp(ln_2(x));
 *           then ln_f.
 *   blocks, post-LN (GPT-1, BERT, the original Transformer):
 *           x = ln_1(x + attn(x)); x = ln_2(x + mlp(x)).
 *   attn: q, k, v = split(x·c_attn + b) (D, K, K wide); per query head h
 *         softmax(q_h·k_gᵀ/√HS + bias)·v_g under the mask, g = h/(NH/NKV)
 *         (grouped-query attention; NKV 1: multi-query); heads
 *         concatenated, ·c_proj + b.
 *   mlp:  act(x·c_fc + b)·c_proj + b; gated (ffn geglu, swiglu):
 *         (act(x·wi_0 + b) ⊙ (x·wi_1 + b))·c_proj + b with act GELU-tanh
 *         (geglu) or SiLU (swiglu), as nn/ffn.h.
 *   ln_*: LayerNorm, or with norm rmsnorm x·w/√(mean(x²) + eps) (no mean,
 *         no bias; nn/norm.h).
 *   With attn_unscaled the scores are q·kᵀ, without 1/√HS (T5).
 *   logits = x·headᵀ, head = wte when tied, else lm_head; with head_scale
 *   logits = (x·C^-0.5)·headᵀ (T5's tied head); with head_bias
 *   final_logits_bias is added to every row (BART's, trained here as any
 *   bias though HF keeps it a fixed buffer).
 * Positions (pos = the index in the sequence, or in its document when
 * packed):
 *   learned     wpe [block_size, C]
 *   sinusoidal  PE(pos, 2i) = sin(pos / 10000^(2i/C)), PE(pos, 2i+1) = cos(…)
 *               (the original Transformer's; no parameters, no length limit)
 *   rope        q and k of every head rotated after the projection, in
 *               halves (GPT-NeoX/LLaMA): for d < HS/2, θ = pos·base^(-2d/HS),
 *               (x_d, x_{d+HS/2}) → (x_d cos θ − x_{d+HS/2} sin θ,
 *                                     x_d sin θ + x_{d+HS/2} cos θ)
 *   alibi       score(i, j) −= slope_h·|i − j| (nn/attention.h's slopes)
 *   t5          score(i, j) += rel_bias[h, bucket(j − i)], one table shared
 *               by every layer; causal buckets for decoders, bidirectional
 *               for encoders (nn/attention.h's tfm_t5_bucket); the scores
 *               keep the 1/√HS scale unless attn_unscaled (T5's own).
 * Masks: decoders are causal; with tfm_batch.prefix_len, prefix-LM (full
 * over the prefix, causal after); with tfm_batch.doc_start, packed
 * documents (block-diagonal).  Encoders attend to every position but the
 * padding after tfm_batch.lengths[b].
 * Encoder-decoder (the original Transformer): an encoder of n_enc_layer
 * blocks over the source (tfm_batch.src, [B, S], padding after
 * src_lengths[b]) with full attention, then the decoder's n_layer blocks over
 * the target, each with a cross-attention sublayer between self-attention
 * and the MLP:
 *   pre-LN:  x = x + attn(ln_1(x)); x = x + xattn(ln_x(x), M);
 *            x = x + mlp(ln_2(x))
 *   post-LN: x = ln_1(x + attn(x)); x = ln_x(x + xattn(x, M));
 *            x = ln_2(x + mlp(x))
 *   xattn(y, M): q = y·c_q + b; k, v = split(M·c_kv + b); per head
 *            softmax(q·kᵀ/√HS) over the source positions < src_lengths[b],
 *            ·v; ·c_proj + b.  No position term (no rotation, ALiBi or T5
 *            bias) in cross-attention.
 * M, the memory, is the encoder's output: after enc.ln_f (pre-LN) or the
 * last block (post-LN).  The encoder embeds the source as the decoder does
 * the target (its own wpe, ln_e, rel_bias, the same position scheme with
 * bidirectional T5 buckets and symmetric ALiBi); its token embedding is wte
 * itself when tie_source (a joint vocabulary: with tie_embeddings, the
 * three-way tie of the original Transformer), else enc.wte of
 * src_vocab_size rows.
 * Dropout (one probability) after the embeddings, on the attention
 * probabilities, and after each of the two residual projections, as GPT-2;
 * with ffn_dropout, also on the feed-forward's hidden units before c_proj
 * (mlp: drop(act(x·c_fc + b))·c_proj + b), as T5's DenseReluDense and
 * BART's activation_dropout; with final_dropout, on each stack's output
 * (after ln_f, or the last block when post-LN), as T5's stacks.
 *
 * Tensor names and layouts follow HuggingFace GPT-2, so GPT-2 checkpoints
 * map one to one (without the "transformer." prefix):
 *     wte.weight               [V, C]
 *     wpe.weight               [block_size, C]   (learned positions only)
 *     wse.weight               [n_segments, C]   (segments only)
 *     ln_e.weight/.bias        [C]               (emb_norm only)
 *     emb_proj.weight          [E, C]            (emb_dim only; [in, out];
 *     emb_proj.bias            [C]                the tables above are E wide)
 *     rel_bias.weight          [NH, t5_buckets]  (t5 positions only)
 *     h.{i}.ln_1.weight/.bias  [C]
 *     h.{i}.attn.c_attn.weight [C, D+2K] (stored [in, out]: y = x·W + b)
 *     h.{i}.attn.c_attn.bias   [D+2K]    (q, k, v in that order)
 *     h.{i}.attn.c_proj.weight [D, C]    ([in, out])
 *     h.{i}.attn.c_proj.bias   [C]
 *     h.{i}.ln_2.weight/.bias  [C]
 *     h.{i}.mlp.c_fc.weight    [C, F]    ([in, out])
 *     h.{i}.mlp.c_fc.bias      [F]
 *     h.{i}.mlp.c_proj.weight  [F, C]    ([in, out])
 *     h.{i}.mlp.c_proj.bias    [C]
 *     ln_f.weight/.bias        [C]       (pre-LN only; post-LN has none)
 *     lm_head.weight           [V, C]    (only when tie_embeddings == 0, [V, E]
 *                                         with emb_dim; a
 *                                         Linear, [out, in], as in HF)
 *     final_logits_bias        [V]       (head_bias only)
 * An encoder-decoder's table: wte, enc.wte (untied source), wpe, enc.wpe,
 * ln_e.*, enc.ln_e.*, rel_bias, enc.rel_bias (each when its scheme or
 * option needs it), then the encoder's blocks enc.h.{i}.* (the block above)
 * and enc.ln_f.* (pre-LN), then the decoder's blocks h.{i}.*, each with,
 * between attn.c_proj.bias and ln_2.weight:
 *     h.{i}.ln_x.weight/.bias     [C]
 *     h.{i}.xattn.c_q.weight      [C, D]    ([in, out])
 *     h.{i}.xattn.c_q.bias        [D]
 *     h.{i}.xattn.c_kv.weight     [C, 2K]   (k, v in that order)
 *     h.{i}.xattn.c_kv.bias       [2K]
 *     h.{i}.xattn.c_proj.weight   [D, C]
 *     h.{i}.xattn.c_proj.bias     [C]
 * then ln_f.* (pre-LN), lm_head.weight (untied) and final_logits_bias.
 * With bias == 0 the four linear biases of each block are absent; layer
 * norms keep theirs (as every model file written so far has them).
 * With norm rmsnorm every ln_*.bias (ln_1, ln_x, ln_2, ln_f, ln_e) is
 * absent.  With a gated ffn, mlp.c_fc.* gives way to
 *     h.{i}.mlp.wi_0.weight    [C, F]    (the gate; [in, out])
 *     h.{i}.mlp.wi_0.bias      [F]       (with bias)
 *     h.{i}.mlp.wi_1.weight    [C, F]    (the linear input)
 *     h.{i}.mlp.wi_1.bias      [F]       (with bias)
 * HuggingFace T5's DenseReluDense.wi_0 / wi_1 / wo are these and
 * mlp.c_proj, transposed ([out, in] there); its layer.N.layer_norm.weight
 * are ln_1, ln_x and ln_2, final_layer_norm ln_f.
 *
 * Heads, after everything above, each a part of its own (a file
 * lib/model/head_*.c behind model/head.h's interface, listed in head.c in
 * this order) with HuggingFace BERT's names; their Linears are stored
 * [out, in] as HF's nn.Linear, and always have biases.  h is the stack's output (after ln_f when pre-LN):
 *   mlm_head: logits = LN(act(h·Dᵀ + d))·headᵀ + cls.predictions.bias,
 *     computed only at the positions whose target is not -1 (D maps C to
 *     E, the embeddings' width: C unless emb_dim):
 *     cls.predictions.transform.dense.weight      [E, C]
 *     cls.predictions.transform.dense.bias        [E]
 *     cls.predictions.transform.LayerNorm.weight/.bias [E]
 *     cls.predictions.bias                        [V]
 *   pooled position p_b (tfm_batch.cls_pos, else 0): u = h[b, p_b], with
 *   pooler u = act(u·Pᵀ + p), act tanh (or pooler_act's ReLU, GELU):
 *     pooler.dense.weight [C, C], pooler.dense.bias [C]
 *   n_classes: z = u·Wᵀ + w; cross-entropy over classes, or with one
 *   output the mean squared error against tfm_batch.values:
 *     classifier.weight [K, C], classifier.bias [K]
 *     (cls.seq_relationship.* when nsp: BERT's next-sentence head)
 *   n_tags: per position z = h·Wᵀ + w, cross-entropy against tags:
 *     classifier.weight [n_tags, C], classifier.bias [n_tags] (HF's
 *     BertForTokenClassification's; token_classifier.* beside a sequence
 *     classifier of n_classes, and in files written before)
 *   span: per position (s, e) = h·Wᵀ + w; the loss is the mean of the
 *   cross-entropies of start over the row's positions against span_start
 *   and of end against span_end (HF's question answering):
 *     qa_outputs.weight [2, C], qa_outputs.bias [2]
 * The loss is lm_weight·LM + classifier + tagger + span, each the mean
 * over its own targets (the heads given none add nothing).
 *
 * Threads: call tfm_blas_init (tensor/gemm.h) once, before the first model
 * call; it sets BLIS's kernels and thread count and OpenMP's thread count.
 * Results are deterministic for a given thread count (no reduction depends
 * on scheduling), so a resumed run repeats bit for bit.
 *
 * Tuning knobs for tests and measurements (tfm_model fields, set after
 * tfm_model_init): attn_impl picks the attention implementation
 * (nn/attention.h); recompute recomputes the MLP activation in backward
 * even for small models (it is kept per layer while that costs ≤ 64 MiB).
 *
 * Ownership: tfm_model owns params, grads, activations and the table (names
 * included); tfm_model_free releases all.  Pointers returned by the accessors
 * stay valid until the next forward with a larger B·T, or free. */
#ifndef TFM_MODEL_TRANSFORMER_H
#define TFM_MODEL_TRANSFORMER_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/rng.h"
#include "nn/attention.h"
#include "nn/block.h"
#include "nn/position.h"

typedef enum tfm_ln_place {
    TFM_LN_PRE,   /* GPT-2 */
    TFM_LN_POST,  /* GPT-1, original Transformer */
} tfm_ln_place;

typedef enum tfm_act {
    TFM_ACT_GELU_TANH,   /* GPT-2's tanh approximation */
    TFM_ACT_GELU_EXACT,  /* x·Φ(x) with erf (BERT) */
    TFM_ACT_RELU,
} tfm_act;

typedef enum tfm_kind {
    TFM_KIND_DECODER,          /* causal self-attention (GPT) */
    TFM_KIND_ENCODER,          /* full self-attention with padding (BERT) */
    TFM_KIND_ENCODER_DECODER,  /* encoder, then decoder with cross-attention */
} tfm_kind;

typedef enum tfm_pos {
    TFM_POS_LEARNED,
    TFM_POS_SINUSOIDAL,
    TFM_POS_ROPE,
    TFM_POS_ALIBI,
    TFM_POS_T5,
} tfm_pos;

/* The pooler's activation (model.pooler_activation): BERT's tanh,
 * DistilBERT's pre_classifier ReLU, ELECTRA's classification head GELU
 * (erf). */
typedef enum tfm_pool_act { TFM_POOL_TANH, TFM_POOL_RELU, TFM_POOL_GELU } tfm_pool_act;

/* tfm_model_init_weights' scheme (model.init). */
typedef enum tfm_init {
    TFM_INIT_GPT2,             /* N(0, 0.02), residual projections scaled */
    TFM_INIT_XAVIER,           /* Xavier-uniform matrices, embeddings N(0, C^-0.5) */
} tfm_init;

typedef struct tfm_model_config {
    tfm_kind kind;
    tfm_pos pos;
    int n_layer;
    int n_head;
    int n_embd;          /* C; a multiple of n_head unless head_dim is set */
    int head_dim;        /* HS, each head's width; 0 means n_embd/n_head.  The
                            attention's inner width D = n_head·HS may differ
                            from C (flan-t5-small: 6·64 over 512) */
    int n_kv_head;       /* key/value heads of every attention, dividing
                            n_head (grouped-query attention; 1: multi-query);
                            0 means n_head */
    int window;          /* sliding-window self-attention (nn/attention.h's
                            tfm_attn.window); 0: none */
    int block_size;      /* maximum context T */
    int vocab_size;      /* V */
    float dropout;       /* in [0, 1); applied only in training mode */
    float ffn_dropout;   /* in [0, 1): on the feed-forward's hidden units
                            (after act, or the gated product), in training */
    float final_dropout; /* in [0, 1): on each stack's output, after its
                            final norm (T5's T5Stack), in training */
    float attn_dropout;  /* in [0, 1): on the attention probabilities, in
                            training; -1 (default): dropout's */
    float emb_dropout;   /* in [0, 1): on the embeddings, in training; -1
                            (default): dropout's */
    int tie_embeddings;  /* 1: the LM head is wte (default) */
    tfm_ln_place ln;
    tfm_act act;
    float ln_eps;        /* 1e-5 */
    int bias;            /* 1: linear layers have biases (default) */
    float label_smoothing; /* in [0, 1): target = (1-ε)·onehot + ε/V */
    int d_ff;            /* F, the MLP's inner width; 0 means 4·n_embd */
    tfm_rope rope;       /* base 10000, default scaling */
    int t5_buckets;      /* 32 */
    int t5_max_distance; /* 128 */
    int n_segments;      /* segment (token type) embeddings; 0: none */
    int emb_norm;        /* 1: LayerNorm after the embedding sum (BERT) */
    int emb_dim;         /* E > 0: a factorised embedding (ALBERT,
                            ELECTRA): the embedding tables, ln_e and the MLM
                            head's output E wide, projected by emb_proj to
                            n_embd after the embedding dropout (at E =
                            n_embd too, as ALBERT's); 0: none, the tables
                            n_embd wide.  Encoders only */
    int emb_scale;       /* 1: token embeddings times √n_embd (the original
                            Transformer), before the positions are added */
    int head_scale;      /* 1: the LM head reads the final hidden states times
                            n_embd^-0.5 (T5 with tied embeddings) */
    int head_bias;       /* 1: the LM head adds final_logits_bias [V] (BART) */
    int decoder_start;   /* encoder-decoder: the first decoder token; -1: the
                            tokenizer's bos, else eos (infer/generate.h) */
    int forced_bos;      /* encoder-decoder: the token forced right after it
                            in generation and first in every training
                            target (HF's forced_bos_token_id); -1: none */
    int forced_eos;      /* the token generation ends with when it reaches
                            its length limit: the last new token allowed is
                            forced to be it (HF's forced_eos_token_id);
                            -1: none */
    int source_bos;      /* encoder-decoder: text sources begin with the
                            source tokenizer's bos (BART's <s>) */
    tfm_init init;       /* tfm_model_init_weights' scheme (GPT-2 by default) */
    tfm_norm_kind norm;  /* the stacks' norms: layernorm (default) or rmsnorm
                            (weight only; the MLM head keeps its LayerNorm) */
    tfm_ffn_kind ffn;    /* feed-forward: plain (default), geglu, swiglu */
    int attn_unscaled;   /* 1: attention scores without 1/√HS (T5) */
    /* encoder-decoder only: */
    int n_enc_layer;     /* the encoder's blocks; 0 means n_layer */
    int tie_source;      /* 1: the source embedding is wte (default) */
    int src_vocab_size;  /* rows of enc.wte when untied; 0 means vocab_size */
    /* heads (decoders and encoders), each a part of its own: */
    int mlm_head;        /* BERT's MLM transform before the LM decoder */
    int pooler;          /* dense + tanh on the pooled position */
    int pooler_act;      /* the pooler's activation: TFM_POOL_* */
    int pool_mean;       /* the classifier reads the mean of the positions up
                            to the pooled one, not that position */
    int n_classes;       /* classifier on the pooled position: 0 none, 1
                            regression (MSE), ≥ 2 classes (cross-entropy) */
    int nsp;             /* the classifier is BERT's next-sentence head
                            (n_classes 2, named cls.seq_relationship) */
    int n_tags;          /* token tagger: tags per position; 0 none */
    int span;            /* span start/end classifiers */
    /* LoRA adapters (nn/lora.h), for training: with lora_r > 0 every
     * targeted projection gains y += (alpha/r)·B·A·drop(x), and every
     * tensor but the adapters and the task heads (classifier,
     * token_classifier, qa_outputs) is frozen (tfm_param.frozen). */
    int lora_r;          /* rank; 0: no adapters */
    float lora_alpha;
    float lora_dropout;  /* on the adapter's input, in training */
    unsigned lora_targets; /* TFM_LORA_* bits */
} tfm_model_config;

/* The projections LoRA may target (tfm_model_config.lora_targets): q, k,
 * v the query, key and value parts of attn.c_attn (and, in cross-attention,
 * xattn.c_q and the two parts of xattn.c_kv); o attn.c_proj (and
 * xattn.c_proj); fc mlp.c_fc (gated: mlp.wi_0 and mlp.wi_1); proj
 * mlp.c_proj. */
enum {
    TFM_LORA_Q = 1, TFM_LORA_K = 2, TFM_LORA_V = 4, TFM_LORA_O = 8, TFM_LORA_FC = 16,
    TFM_LORA_PROJ = 32
};

/* The heads whose losses a batch may ask for (tfm_model.head_loss). */
typedef enum tfm_head {
    TFM_HEAD_LM,     /* next-token or masked-token logits */
    TFM_HEAD_CLASS,  /* the sequence classifier (or regression) */
    TFM_HEAD_TAG,    /* the token tagger */
    TFM_HEAD_SPAN,   /* span start and end */
    TFM_HEAD_N
} tfm_head;

/* "decoder", "encoder"; "learned", "sinusoidal", "rope", "alibi", "t5" (the
 * config's words). */
const char *tfm_kind_name(tfm_kind kind);
const char *tfm_pos_name(tfm_pos pos);

/* The block every path applies (nn/block.h): placement, norm kind and
 * eps, feed-forward kind and activation, attention scale, heads. */
tfm_block tfm_model_block(const tfm_model_config *cfg);

/* The tensors of one block, in table order: every path binds a block's
 * tensors through tfm_block_slot, so the training table and the
 * inference weights (model/decode.h) come from one list. */
typedef enum tfm_slot {
    TFM_SLOT_LN1_W, TFM_SLOT_LN1_B, TFM_SLOT_QKV_W, TFM_SLOT_QKV_B, TFM_SLOT_PROJ_W,
    TFM_SLOT_PROJ_B, TFM_SLOT_LNX_W, TFM_SLOT_LNX_B, TFM_SLOT_XQ_W, TFM_SLOT_XQ_B,
    TFM_SLOT_XKV_W, TFM_SLOT_XKV_B, TFM_SLOT_XP_W, TFM_SLOT_XP_B, TFM_SLOT_LN2_W,
    TFM_SLOT_LN2_B, TFM_SLOT_FC_W, TFM_SLOT_FC_B, TFM_SLOT_FC1_W, TFM_SLOT_FC1_B,
    TFM_SLOT_FCP_W, TFM_SLOT_FCP_B, TFM_SLOT_N
} tfm_slot;

/* Slot s of a block (cross: with cross-attention, an encoder-decoder's
 * decoder): 1 and its name after "h.{i}." ("mlp.wi_0.weight"), shape
 * ([d0, d1], d1 0 for vectors) and decay (1 for matrices); 0 when the
 * configuration has no such tensor. */
int tfm_block_slot(const tfm_model_config *cfg, tfm_slot s, int cross, const char **name,
                   size_t *d0, size_t *d1, int *decay);

/* The factor on the hidden states the LM head reads: n_embd^-0.5 with
 * head_scale (T5's tied head), else 1. */
float tfm_head_scale(const tfm_model_config *cfg);

/* E: emb_dim, or n_embd when 0 (the width of wte, wpe, wse and ln_e). */
int tfm_model_config_emb_dim(const tfm_model_config *cfg);

/* F: d_ff, or 4·n_embd when 0. */
int tfm_model_config_ff(const tfm_model_config *cfg);
/* HS: head_dim, or n_embd/n_head when 0. */
int tfm_model_config_head_dim(const tfm_model_config *cfg);
/* D = n_head·HS: the width of q and of the heads concatenated; K =
 * n_kv_head·HS, of k and of v; D + 2K, of the fused q | k | v (nn/block.h's
 * widths of the model's block). */
int tfm_model_config_attn_dim(const tfm_model_config *cfg);
int tfm_model_config_kv_dim(const tfm_model_config *cfg);
int tfm_model_config_qkv_dim(const tfm_model_config *cfg);
/* NKV: n_kv_head, or n_head when 0. */
int tfm_model_config_kv_heads(const tfm_model_config *cfg);
/* The encoder's blocks of an encoder-decoder (n_enc_layer, or n_layer when
 * 0); 0 for the other kinds. */
int tfm_model_config_enc_layers(const tfm_model_config *cfg);
/* Rows of the source embedding: src_vocab_size, or vocab_size when 0. */
int tfm_model_config_src_vocab(const tfm_model_config *cfg);

/* GPT-2 small: a decoder with learned positions, 12 layers, 12 heads, 768
 * wide, context 1024, vocabulary 50257, dropout 0, tied, pre-LN, GELU tanh,
 * eps 1e-5, bias, no smoothing, d_ff 4·768, no segments. */
void tfm_model_config_default(tfm_model_config *cfg);
/* Checks ranges, divisibility and combinations; the message names the bad
 * fields (e.g. "n_embd 100 is not a multiple of n_head 3", "rope needs an
 * even head size, n_embd/n_head is 5"). */
int tfm_model_config_check(const tfm_model_config *cfg, tfm_err *err);

/* 1 when training draws dropout masks (any of the rates is above 0). */
int tfm_model_config_drops(const tfm_model_config *cfg);
/* Number of parameters the config implies (tied head counted once). */
size_t tfm_model_config_num_params(const tfm_model_config *cfg);

typedef struct tfm_param {
    char name[48];       /* e.g. "h.3.attn.c_attn.weight" */
    int ndim;            /* 1 or 2 */
    size_t shape[2];     /* shape[1] is 0 for ndim 1 */
    size_t offset;       /* in floats, into params and grads */
    size_t numel;
    int decay;           /* 1 for matrices (linear and embedding weights),
                            0 for biases and layer-norm parameters */
    int frozen;          /* 1: not trained (a LoRA run's base weights):
                            backward leaves its gradient 0, optimizers
                            skip it */
} tfm_param;

typedef struct tfm_model_acts tfm_model_acts;   /* private activation plan */

/* tfm_model.grads_ready: grads[lo, n_params) are final. */
typedef void (*tfm_grads_ready_fn)(void *ctx, size_t lo);

typedef struct tfm_model {
    tfm_model_config cfg;
    float *params;       /* n_params floats, 64-byte aligned */
    float *grads;        /* n_params floats; accumulated by backward.  A
                            frozen tensor's part is never written nor
                            read (tfm_model_grad_span): zero, and with
                            its pages never resident */
    size_t n_params;     /* floats in params/grads: every tensor starts on a
                            64-byte boundary, so this includes up to 15 zero
                            padding floats per tensor (an optimizer may run
                            over the whole array, or over grads' runs;
                            padding stays 0) */
    tfm_param *table;    /* n_table entries, in the order listed above */
    int n_table;
    int first_layer;     /* index of h.0.ln_1.weight in the table */
    int enc_first_layer; /* of enc.h.0.ln_1.weight (encoder-decoders) */
    float *alibi;        /* [n_head] ALiBi slopes, or NULL */
    int training;        /* dropout active when 1 and cfg.dropout > 0 */
    tfm_attn_impl attn_impl; /* tests, measurements: 0 (auto), or a forced
                                attention implementation */
    int recompute;       /* tests, measurements: recompute the MLP activation
                            in backward whatever the model's size */
    tfm_rng rng;         /* dropout masks; part of the training state:
                            save and restore it to resume bit for bit */
    /* Set by the last forward: */
    int B, T;
    float loss;          /* mean loss, or -1 when no targets were given */
    float head_loss[TFM_HEAD_N]; /* each head's mean loss, -1 when it had
                                    no targets */
    tfm_model_acts *acts;
    int shares_params;   /* a replica (tfm_model_init_replica): params and
                            table belong to another model */
    /* When set, the backward of tfm_model_backward and
     * tfm_model_forward_backward* calls grads_ready(grads_ready_ctx, lo) as
     * gradients become final, so that their all-reduce overlaps the rest of
     * backward: grads[lo, n_params) will not change again before the call
     * returns.  Called at each sublayer boundary (a repeated lo is only a
     * chance to make progress), lo never grows, and the last call has lo 0.
     * Backward finishes the table from its end: the heads (and an untied
     * lm_head), ln_f, the decoder's blocks from the top, the encoder's, then
     * the embeddings (a tied wte takes the LM head's gradient first and the
     * embedding's last).  Always on the thread that called the backward,
     * between layers.  Not called in forward.  (train/replicas.h sums its
     * replicas' gradients through this hook, and hands the caller's on.) */
    tfm_grads_ready_fn grads_ready;
    void *grads_ready_ctx;
    /* During tfm_model_backward_rows only: its head and row factors (the
     * heads' backward reads them); NULL otherwise. */
    const float *rows_grad;
    tfm_head rows_head;
    int rows_per_pos;        /* tfm_model_backward_positions: rows_grad is
                                per position, not per row */
    const float *tag_grad;   /* and the tagger's output gradient, or NULL */
} tfm_model;

/* Allocates params (zeroed) and grads (zeroed: pages from the kernel, so
 * that those of frozen tensors never become resident) for cfg; activations
 * are planned on the first forward.  The rng is seeded with 0; seed it (or
 * restore it) yourself for dropout.  -1 on a bad config. */
int tfm_model_init(tfm_model *m, const tfm_model_config *cfg, tfm_err *err);
void tfm_model_free(tfm_model *m);

/* GPT-2 initialisation from seed: matrices and embeddings N(0, 0.02), the
 * residual projections (the c_proj weights) N(0, 0.02/√(k·L)) with k the
 * residual branches per block of their stack (2; 3 in an encoder-decoder's
 * decoder),
 * biases 0, layer norms weight 1 bias 0.  Also seeds m->rng from seed.
 * With cfg.init TFM_INIT_XAVIER (the original Transformer as fairseq and
 * PyTorch's references do it): the embedding tables (wte, enc.wte, wpe,
 * wse) N(0, C^-0.5); every other matrix Xavier-uniform, U(±√(6/(in + out))),
 * the fused c_attn and c_kv as their 3 and 2 separate C×C matrices; T5's
 * bias tables as GPT-2; biases 0, layer norms 1 and 0. */
void tfm_model_init_weights(tfm_model *m, uint64_t seed);

/* Finds a parameter by name; NULL when absent. */
const tfm_param *tfm_model_param(const tfm_model *m, const char *name);
/* The name a tensor had in files written before the tagger took HF's
 * classifier.* ("adam.m.classifier.bias" -> "adam.m.token_classifier.bias"),
 * in buf; NULL when it had no other.  Readers try it for a tensor missing
 * under its own name. */
const char *tfm_head_legacy_name(const char *name, char *buf, size_t size);

void tfm_model_set_training(tfm_model *m, int training);

/* inputs: B·T token ids, row-major [B, T]; targets: the same shape, or NULL
 * for logits only (then *loss is set to -1).  A model with a fine-tuning
 * head (classifier other than NSP, tagger, span) computes LM logits only
 * when given targets.  A target of -1 is ignored in
 * the loss (padding); the mean runs over the others.  1 ≤ T ≤ block_size.
 * Ids outside [0, V) are an error naming the position.  loss may be NULL. */
int tfm_model_forward(tfm_model *m, const int32_t *inputs, const int32_t *targets,
                    int B, int T, float *loss, tfm_err *err);

/* One batch with everything a mask or an embedding may need.  Only inputs,
 * B and T are required; the rest may be NULL. */
typedef struct tfm_batch {
    const int32_t *inputs;   /* [B, T] token ids */
    const int32_t *targets;  /* [B, T], -1 ignored; NULL: logits only */
    int B, T;
    const int32_t *segments; /* [B, T] in [0, n_segments) (models with segments) */
    const int *lengths;      /* [B] encoders: positions ≥ lengths[b] are padding,
                                never attended to */
    const int *prefix_len;   /* [B] decoders: prefix-LM */
    const int *doc_start;    /* [B, T] decoders: the first position of each
                                position's document (packing): attention stays
                                inside the document, positions restart at 0 */
    const int32_t *src;      /* [B, S] encoder-decoders: the source ids */
    int S;
    const int *src_lengths;  /* [B] source positions ≥ src_lengths[b] are
                                padding; NULL: none */
    /* the heads' targets (only for models with the head; NULL: none): */
    const int *cls_pos;      /* [B] the pooled position of each row; NULL: 0
                                ([CLS]); a decoder's classifier reads its
                                last token */
    const int32_t *labels;   /* [B] class ids in [0, n_classes), -1 ignored */
    const float *values;     /* [B] regression targets (n_classes 1) */
    const int32_t *tags;     /* [B, T] tag ids in [0, n_tags), -1 ignored */
    const int32_t *span_start, *span_end; /* [B] positions; -1 in both:
                                             the row has no answer */
    float lm_weight;         /* the LM loss's weight in the total (GPT
                                fine-tuning's λ); 0 means 1 */
    const long *head_total;  /* [TFM_HEAD_N] or NULL.  This batch is a part of
                                a larger one (data parallelism across
                                processes) whose heads count these targets
                                (tfm_batch_counts of it): in
                                tfm_model_forward_backward_batch each head's
                                mean runs over them, so the gradients and
                                losses of the parts add up to the whole's */
} tfm_batch;

/* The targets each head's mean runs over in a batch: LM targets not -1 (the
 * MLM head's too), class labels not -1 (every row for a regression),
 * tags not -1, rows with a span. */
void tfm_batch_counts(const tfm_model_config *c, const tfm_batch *b, long count[TFM_HEAD_N]);

int tfm_model_forward_batch(tfm_model *m, const tfm_batch *batch, float *loss, tfm_err *err);

/* Rows [r0, r0 + rows) of a batch: every per-row field offset, nothing
 * copied (data-parallel shares of a batch; head_total is kept). */
tfm_batch tfm_batch_rows(const tfm_batch *b, int r0, int rows);

/* Logits [B, T, V] of the last forward.  Valid until the next backward
 * (which turns them into their gradient in place) or forward.  With the
 * MLM head they are [R, V]: one row per position whose target is not -1,
 * in row-major order (every position when there were no targets). */
float *tfm_model_logits(tfm_model *m);

/* A head's outputs of the last forward, [*rows, *cols]: TFM_HEAD_LM the
 * logits above; TFM_HEAD_CLASS [B, n_classes]; TFM_HEAD_TAG [B·T, n_tags];
 * TFM_HEAD_SPAN [B·T, 2] (start, end).  NULL when the head did not run.
 * Valid as tfm_model_logits's. */
const float *tfm_model_head_out(const tfm_model *m, tfm_head h, int *rows, int *cols);

/* The LM loss of each position of the last forward, −log p(target), 0
 * where the target was −1 ([B·T]; NULL when the LM head had no targets or
 * ran through the MLM transform).  Valid as tfm_model_logits's. */
const float *tfm_model_lm_losses(const tfm_model *m);

/* Backward of the last forward for a loss over whole rows that the caller
 * computed from it (DPO's over the rows' summed log-probabilities, a
 * reward model's over its scores): w[b] is d(loss)/d(row b's quantity),
 * which for h TFM_HEAD_LM is the sum of the row's LM losses (the
 * tfm_model_lm_losses of its targets) and for TFM_HEAD_CLASS, with one
 * classifier output, the row's output.  The other heads add nothing.
 * grads += the gradient.  The last forward must have had the head's
 * targets (a classifier's: values, whose loss is ignored); decoders'
 * LM head without a transform. */
void tfm_model_backward_rows(tfm_model *m, tfm_head h, const float *w);
/* The same per position (PPO's loss over answer tokens): w_lm[b·T + t] is
 * d(loss)/d(that position's LM loss) (tfm_model_lm_losses), and w_tag
 * (NULL: none) d(loss)/d(the tagger's one output there) for a model with
 * model.tags 1 (a value head), whose forward had tags (all -1: no tagger
 * loss).  grads += the gradient. */
void tfm_model_backward_positions(tfm_model *m, const float *w_lm, const float *w_tag);

/* Sets every gradient to 0. */
void tfm_model_zero_grad(tfm_model *m);

/* Where the first block's parameters start (an encoder-decoder's encoder
 * block 0): below lie the embeddings and the tables all blocks share, whose
 * gradients backward finishes only at its end (grads_ready's lo 0). */
size_t tfm_model_blocks_offset(const tfm_model *m);

/* Adds scale · d(mean loss)/d(params) of the last forward (which must have
 * had targets) into m->grads.  scale is 1 normally, 1/k when accumulating k
 * micro-batches. */
void tfm_model_backward(tfm_model *m, float scale);

/* Forward and backward of one batch: grads += scale · d(mean loss)/d(params),
 * *loss = the mean loss.  (Data parallelism over threads, the batch's rows
 * split among replicas of the model, is train/replicas.h's.) */
int tfm_model_forward_backward(tfm_model *m, const int32_t *inputs, const int32_t *targets,
                             int B, int T, float scale, float *loss, tfm_err *err);
/* The same for a full batch description (targets required). */
int tfm_model_forward_backward_batch(tfm_model *m, const tfm_batch *batch, float scale,
                                     float *loss, tfm_err *err);

/* The pieces a data-parallel caller (train/replicas.h) runs a batch's
 * parts with. */

/* r becomes a replica of m: m's params and table, shared (m must outlive
 * it), with gradients (zeroed) and activations of its own; its rng is
 * seeded with 0.  tfm_model_free(r) frees only what is its own. */
void tfm_model_init_replica(tfm_model *r, const tfm_model *m);
/* The checks tfm_model_forward_batch makes of a batch before any work. */
int tfm_batch_check(const tfm_model_config *c, const tfm_batch *b, tfm_err *err);
/* tfm_model_forward_batch of a batch tfm_batch_check accepted. */
int tfm_model_forward_checked(tfm_model *m, const tfm_batch *b, float *loss, tfm_err *err);
/* The targets each head's mean ran over in the last forward. */
const long *tfm_model_head_counts(const tfm_model *m);
/* Backward of the last forward with f[h] = d(loss)/d(each counted item's
 * loss of head h) (tfm_head_factors). */
void tfm_model_backward_heads(tfm_model *m, const float f[TFM_HEAD_N]);
/* Which heads a batch has targets for, and their weights in the loss. */
void tfm_batch_heads(const tfm_batch *b, int given[TFM_HEAD_N], float w[TFM_HEAD_N]);
/* f[h] = scale·w[h]/total[h] (0 when total[h] is): each head's mean over
 * total[h] targets. */
void tfm_head_factors(float f[TFM_HEAD_N], const long total[TFM_HEAD_N],
                      const float w[TFM_HEAD_N], float scale);
/* m's head losses and loss from n parts' (part[k]'s, over count[k][h]
 * targets): each head's sum over total[h]. */
void tfm_model_parts_loss(tfm_model *m, tfm_model *const *part, int n,
                          long (*count)[TFM_HEAD_N], const long total[TFM_HEAD_N],
                          const int given[TFM_HEAD_N], const float w[TFM_HEAD_N]);

/* The parts of grads that backward writes, one run of tensors not frozen
 * at a time: start with *row 0; each call gives the next run at or after
 * table row *row as floats [*lo, *hi) (the padding after each tensor
 * included) and moves *row past it; 0 when none is left.  Without frozen
 * tensors, the one run [0, n_params).  Whatever reads or clears grads
 * (zeroing, summing replicas or ranks, norms) keeps to these runs: the
 * rest stays zero, untouched, and costs no memory. */
int tfm_model_grad_span(const tfm_model *m, int *row, size_t *lo, size_t *hi);
/* The memory pages of grads (m's, or a replica's laid out alike) that lie
 * wholly outside those runs (the frozen tensors'); *resident: how many of
 * them are resident (base/err.h tfm_pages_resident), which should be none. */
size_t tfm_model_frozen_pages(const tfm_model *m, const float *grads, size_t *resident);

/* Forward only from now on (evaluation): frees the gradients, and later
 * forwards keep one layer's activations instead of every layer's and no
 * backward scratch; backward is then an error. */
void tfm_model_set_inference(tfm_model *m);

/* Bytes held by the model (params unless shared, grads but for frozen
 * tensors', activations), for reports. */
size_t tfm_model_bytes(const tfm_model *m);

#endif
