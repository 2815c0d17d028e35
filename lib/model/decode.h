/* Inference forward of the transformer (model/transformer.h) with a key/value
 * cache: decoders, and the decoder of an encoder-decoder over its encoded
 * source.
 *
 *     tfm_weights w;                         // pointers, not copies
 *     tfm_weights_from_model(&w, &model, &err);   // or _bind(lookup)
 *     tfm_infer g;
 *     tfm_infer_init(&g, &cfg, &w, n_slots, max_len, &err);
 *     tfm_infer_prefill(&g, slot, prompt, n, logits, &err); // one batched pass
 *     for (;;) tfm_infer_step(&g, n, tokens, slots, logits, &err);
 *     tfm_infer_free(&g);
 *
 * A "slot" is one sequence's cache (keys and values of every layer for
 * positions 0..len-1).  prefill appends many tokens to one slot at once
 * (matrix products over all its positions); step appends one token to each
 * of n slots and returns n rows of logits: several prompts or beams decode
 * as one batch, reading every weight once per step.  Slots may have
 * different lengths.
 *
 * Weights are only pointed to: they may live in a memory-mapped model file
 * and are never copied or written.  The layout and names are model/transformer.h's
 * (matrices [in, out], lm_head [V, C]).
 *
 * Encoder-decoders: tfm_infer_encode (tfm_infer_encode_many: many sources
 * in one packed pass) runs the encoder once per source
 * (through model/forward.h, the one whole-sequence inference forward) and
 * caches the keys and values of every decoder layer's cross-attention;
 * decoding then reads them as it reads the self-attention cache.
 *
 * Positions: every scheme of model/transformer.h.  A cached key keeps its
 * rotation (RoPE); ALiBi and T5 biases are functions of the absolute
 * distance between a query and each cached key.
 *
 * Context: a slot holds at most max_len positions, and with learned positions
 * at most block_size (the table ends there); the other schemes go past it.
 * Appending past that is an error ("context length N exceeded"); the
 * caller decides to stop.  A decoder with a sliding window
 * (model.attention_window W) keeps a rolling cache when that is smaller:
 * ring = W + chunk rows (chunk = max(W, 64): a longer prefill runs in
 * chunks of that many rows), position p stored at rows p % ring and
 * p % ring + ring, so that every window's keys lie in one run of rows in
 * the order of their positions: the same numbers as the whole cache, in
 * memory constant in the number of tokens decoded.  A prefix-LM prefix
 * must then fit one chunk.
 *
 * Threads: the OpenMP thread count (tfm_blas_init).  Up to 8 rows (decode
 * steps) use a gemv that streams each weight matrix once, split over the
 * threads, in the matrix's dtype (tfm_matrix); longer prompts use tfm_gemm
 * over the float32 values, or, with 8-bit matrices, 8-bit products 8 rows
 * at a time or all rows through tensor/q8.h's tfm_q8_gemm on the matrix
 * repacked into scratch, whichever a timing finds faster (the same
 * numbers either way).
 *
 * Stored weights only: a block matrix (qkv_w .. fcp_w), wte or lm_head
 * may have no float32 values (f32 NULL) beside its 8-bit or bfloat16 data
 * (a file opened with lm/lm.h's TFM_LM_STORED): decode steps read the
 * data as always; a longer prompt's products widen one matrix at a time
 * into scratch (the same float32 values a widened copy would hold, so the
 * same results) and embeddings widen their rows.  Only tfm_infer reads
 * such weights (not model/forward.h, the encoder's stacks or the
 * cross-attention).
 *
 * Ownership: tfm_infer owns its cache and scratch, never the weights
 * (which must outlive it). */
#ifndef TFM_MODEL_DECODE_H
#define TFM_MODEL_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "model/transformer.h"
#include "tensor/matrix.h"
#include "tensor/q8.h"

typedef struct tfm_layer_weights {
    const float *ln1_w, *ln1_b;   /* [C] */
    tfm_matrix qkv_w;             /* [C, D+2K]: q | k | v (nn/block.h) */
    const float *qkv_b;           /* [D+2K] */
    tfm_matrix proj_w;            /* [C, C] */
    const float *proj_b;          /* [C] */
    const float *ln2_w, *ln2_b;   /* [C] */
    tfm_matrix fc_w;              /* [C, F]: c_fc, or a gated
                                     feed-forward's gate wi_0 */
    const float *fc_b;            /* [F] */
    tfm_matrix fc1_w;             /* [C, F]: a gated one's wi_1, else none */
    const float *fc1_b;           /* [F] */
    tfm_matrix fcp_w;             /* [F, C] */
    const float *fcp_b;           /* [C] */
    /* an encoder-decoder's decoder blocks: the cross-attention (float32) */
    const float *lnx_w, *lnx_b;   /* [C] */
    tfm_matrix xq_w;              /* [C, C] */
    const float *xq_b;            /* [C] */
    tfm_matrix xkv_w;             /* [C, 2K] */
    const float *xkv_b;           /* [2K] */
    tfm_matrix xp_w;              /* [C, C] */
    const float *xp_b;            /* [C] */
} tfm_layer_weights;

/* One stack's embedding tables and final norm (the tables and ln_e E wide:
 * C, or a factorised embedding's emb_dim). */
typedef struct tfm_embed_weights {
    tfm_matrix wte;               /* [V, E]: the rows read as float32 (or,
                                     stored only, widened from data) */
    const float *wpe;             /* [block_size, E]; learned positions only */
    const float *lne_w, *lne_b;   /* [E]: the embedding norm, or NULL (lne_b
                                     NULL for rmsnorm, as every norm's bias) */
    const float *proj_w, *proj_b; /* [E, C], [C]: a factorised embedding's
                                     emb_proj, else NULL */
    const float *rel_bias;        /* [n_head, t5_buckets]: t5 positions, or NULL */
    const float *lnf_w, *lnf_b;   /* [C]; NULL for post-LN */
} tfm_embed_weights;

typedef struct tfm_weights {
    tfm_embed_weights dec;        /* the decoder's (or an encoder's only stack's) */
    const float *wse;             /* [n_segments, E] or NULL */
    tfm_matrix lm_head;           /* [V, E]; dec.wte's float32 values when tied */
    const float *head_bias;       /* [V] final_logits_bias, or NULL */
    tfm_layer_weights *layers; /* [n_layer], owned by this struct */
    int n_layer;
    /* an encoder-decoder's encoder (n_enc_layer 0 otherwise) */
    tfm_embed_weights enc;
    tfm_layer_weights *enc_layers; /* [n_enc_layer], owned */
    int n_enc_layer;
    uint16_t *bf16_store;         /* owned: the bfloat16 data tfm_weights_to_bf16 made */
    void *q8_store;               /* owned: the 8-bit data tfm_weights_to_q8 made */
} tfm_weights;

/* Finds a tensor by name and checks its shape (dims[1] = 0 for vectors);
 * returns NULL after setting err when absent or of another shape. */
typedef const float *(*tfm_weights_lookup)(void *ctx, const char *name, size_t d0,
                                       size_t d1, tfm_err *err);

/* A block's tensor by its slot (model/transformer.h's tfm_block_slot), a
 * matrix's float32 values: NULL when the configuration has none. */
const float *tfm_layer_weight(const tfm_layer_weights *L, tfm_slot s);

/* Binds every tensor the config needs through lookup: every matrix as
 * float32 (TFM_WEIGHTS_F32). */
int tfm_weights_bind(tfm_weights *w, const tfm_model_config *cfg,
                         tfm_weights_lookup lookup, void *ctx, tfm_err *err);
/* Points into a tfm_model's parameter array (the model must outlive w). */
int tfm_weights_from_model(tfm_weights *w, const tfm_model *m, tfm_err *err);
void tfm_weights_free(tfm_weights *w);
/* Makes the block matrices (but the cross-attention's) and the LM head
 * bfloat16 (round to nearest even) for the decode steps: half the bytes
 * per token, at bfloat16's 8-bit precision (the products still accumulate
 * in float32).  The prompt pass keeps the float32 values.  Returns the
 * bytes allocated (owned by w).  A matrix without float32 values (stored
 * only) or already 8-bit keeps the data it has. */
size_t tfm_weights_to_bf16(tfm_weights *w, const tfm_model_config *cfg);
/* The same to 8 bits (tensor/q8.h's Q8_0, the block matrices transposed
 * to [out, in]) for the matrices whose input width is a multiple of 32:
 * the decode steps then quantize their inputs to 8 bits per 32-block too
 * and multiply in integers.  Returns the bytes allocated (owned by w).  A
 * matrix without float32 values (stored only) is quantized from its
 * bfloat16 data, or keeps its 8-bit data. */
size_t tfm_weights_to_q8(tfm_weights *w, const tfm_model_config *cfg);

/* Phases of the forward, for "where does the time go". */
typedef enum tfm_prof_phase {
    TFM_PROF_QKV,    /* c_attn */
    TFM_PROF_ATTN,   /* attention over the cache */
    TFM_PROF_PROJ,   /* attn.c_proj */
    TFM_PROF_FC,     /* mlp.c_fc */
    TFM_PROF_FCPROJ, /* mlp.c_proj */
    TFM_PROF_HEAD,   /* LM head */
    TFM_PROF_OTHER,  /* embeddings, layer norms, GELU, residuals */
    TFM_PROF_N,
} tfm_prof_phase;

typedef struct tfm_infer {
    tfm_model_config cfg;
    const tfm_weights *w;
    int n_slots, max_len;
    size_t kv_width;        /* K = n_kv_head·head_dim, a cached key's width */
    float *kcache, *vcache; /* [n_layer][n_slots][self_rows][K] each */
    int ring;               /* rolling cache: positions kept (0: none) */
    int chunk;              /* rows a prefill appends at once with a ring */
    int self_rows;          /* rows per slot: max_len, or 2·ring */
    int *len;               /* [n_slots] positions filled */
    int *prefix;            /* [n_slots] prefix-LM: positions every query of
                               the slot sees (tfm_infer_prefill_prefix);
                               0: causal */
    /* encoder-decoders: each slot's source, as the cross-attention's keys
     * and values of every decoder layer */
    float *xkcache, *xvcache; /* [n_layer][n_slots][max_len][K] each */
    int *src_len;           /* [n_slots] source positions; 0: none encoded */
    int max_rows;           /* scratch capacity in rows */
    tfm_block blk;          /* the block (model/transformer.h's tfm_model_block) */
    float *x, *h, *qkv, *att, *fc, *mean, *rstd; /* scratch */
    float *fc1;             /* a gated feed-forward's linear input, or NULL */
    float *part;            /* [max_rows][4 C]: a gemv's second half */
    int8_t *xq;             /* [max_rows][max(F, C)]: 8-bit inputs */
    float *xd;              /* their block scales */
    float *scores;          /* [threads][max_len] */
    float *wbuf;            /* a stored matrix widened for a long prompt */
    size_t wbuf_n;          /* its capacity in floats */
    tfm_q8_packed qpack;    /* an 8-bit matrix packed for a long prompt */
    int q8_prompt;          /* a long prompt's 8-bit products: 0 the faster
                               way (timed once per shape), 1 GEMV_ROWS rows
                               at a time, 2 the matrix packed for
                               tfm_q8_gemm (the same numbers every way) */
    float *erow;            /* [C]: a stored embedding row widened */
    int scores_threads;
    int *row_slot, *row_pos;
    float *pe;              /* [max_rows][C]: sinusoid rows or RoPE angles */
    float *alibi;           /* [n_head] ALiBi slopes, or NULL */
    struct tfm_fwd *enc;    /* encoder-decoders: the encoder's forward
                               (model/forward.h) */
    float *mem;             /* [mem_rows][C]: its output */
    uint32_t *mem_tok;      /* [mem_rows]: the sources it ran over */
    size_t mem_rows;
    int profile;            /* 1: add each phase's wall time to prof_s */
    double prof_s[TFM_PROF_N];
    /* bfloat16 weights: where the products' prefetches put them (0: the
     * first-level cache, 1: the second only), timed on the first decode
     * steps (pf_best: each hint's fastest step, pf_steps: steps timed,
     * pf_rows: their row count) */
    int pf_l2, pf_steps, pf_rows;
    double pf_best[2];
} tfm_infer;

/* max_len: positions per slot, of the target and, for encoder-decoders, of
 * the source (clamped to cfg->block_size for learned positions).  An
 * encoder is an error: it does not generate. */
int tfm_infer_init(tfm_infer *g, const tfm_model_config *cfg,
                       const tfm_weights *w, int n_slots, int max_len,
                       tfm_err *err);
/* The same with the rolling cache asked for: rolling 0 never (every
 * position at its own row), else where the window makes it smaller (as
 * tfm_infer_init does). */
int tfm_infer_init_cache(tfm_infer *g, const tfm_model_config *cfg, const tfm_weights *w,
                         int n_slots, int max_len, int rolling, tfm_err *err);
void tfm_infer_free(tfm_infer *g);

/* Empties a slot's target (an encoder-decoder's source stays until the
 * next tfm_infer_encode). */
void tfm_infer_reset(tfm_infer *g, int slot);

/* Encoder-decoders: runs the encoder over src[0..S) and keeps, for every
 * decoder layer, the keys and values its cross-attention reads; empties the
 * slot's target.  Prefill and step then decode against it (a slot must
 * have a source).  Errors: an id outside the source vocabulary, S < 1 or
 * above max_len. */
int tfm_infer_encode(tfm_infer *g, int slot, const uint32_t *src, int S, tfm_err *err);
/* The same for n sources at once, src[i][0..S[i]) into slots[i]: one
 * packed encoder pass over all their tokens (model/forward.h); each slot
 * ends as tfm_infer_encode would leave it, to the bit.  Nothing is encoded
 * when one source is in error. */
int tfm_infer_encode_many(tfm_infer *g, int n, const int *slots, const uint32_t *const *src,
                          const int *S, tfm_err *err);
/* Slot dst becomes a copy of slot src (its filled positions only, and its
 * source). */
void tfm_infer_copy_slot(tfm_infer *g, int dst, int src);

/* Appends tokens[0..n) to slot in one pass.  logits: [V] for the last
 * position (NULL: none).  Errors: an id outside the vocabulary, or the
 * context overflowing. */
int tfm_infer_prefill(tfm_infer *g, int slot, const uint32_t *tokens,
                          int n, float *logits, tfm_err *err);

/* A prefix LM's prompt (lm/lm.h tfm_lm.prefix_lm): appends
 * tokens[0..n) to an empty slot of a decoder, the first n_prefix of them a
 * prefix that every position of the slot sees (full attention among them),
 * the rest and every later step causal: tfm_batch.prefix_len's mask
 * (nn/attention.h TFM_MASK_PREFIX), so the logits are those of the training
 * forward with prefix_len n_prefix.  Errors: tfm_infer_prefill's, a slot
 * not empty, or not a decoder. */
int tfm_infer_prefill_prefix(tfm_infer *g, int slot, const uint32_t *tokens, int n,
                             int n_prefix, float *logits, tfm_err *err);

/* Appends tokens[i] to slots[i] for i < n (distinct slots); logits
 * [n, V] are those of the next token of each. */
int tfm_infer_step(tfm_infer *g, int n, const uint32_t *tokens,
                       const int *slots, float *logits, tfm_err *err);

/* Where the bfloat16 products' prefetches put the weights, as timed on
 * the first decode steps: "L1" or "L2"; NULL before the choice is made or
 * without bfloat16 weights. */
const char *tfm_infer_prefetch(const tfm_infer *g);

/* Bytes of cache and scratch held (the weights are not counted). */
size_t tfm_infer_bytes(const tfm_infer *g);

/* y[n, N] = x[n, K] · W[K, N] (+ b[N]), W row-major [in, out], read once
 * for all n rows, in two fixed halves of its rows summed apart and then
 * added (threads split the halves, then the columns), so that every column
 * is summed in the same order whatever the thread count: results do not
 * depend on it.
 * Exposed for tests and benchmarks. */
void tfm_gemv_rows(float *y, const float *x, const float *W, const float *b,
                   int n, int K, int N);
/* The same with bfloat16 weights. */
void tfm_gemv_rows_bf16(float *y, const float *x, const uint16_t *W, const float *b,
                        int n, int K, int N);

#endif
