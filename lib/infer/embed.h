/* Contextual embeddings: which layers, how tokens are pooled, and batching
 * of many inputs over model/forward.h's packed forward.
 *
 *     tfm_embed_opts o;
 *     tfm_embed_opts_default(&o, &cfg);                 // last layer; mean or last
 *     tfm_layer_sel_parse(&o.layers, "sum-last-4", L, &err);
 *     tfm_embedder e;
 *     tfm_embedder_init(&e, &cfg, &w, &o, &err);
 *     tfm_embedder_run(&e, &in, out, &err);             // out in input order
 *     tfm_embedder_free(&e);
 *
 * Layers are numbered as HuggingFace's hidden states (model/forward.h):
 * 0 the embedding output, 1..L the blocks' outputs (L after the final norm
 * of pre-LN models).  Named selections, as in BERT's feature study:
 *   first          1, the first block's output
 *   last           L
 *   second-last    L - 1
 *   sum-last-4     Σ of L-3..L       concat-last-4  [L-3 | L-2 | L-1 | L]
 *   sum-all        Σ of 1..L (BERT's "all 12 layers": the blocks, not the
 *                  embedding output)
 *   N, -N          layer N; -1 the last, -2 the one below, ...
 * ELMo's task weighting, over every layer 0..L:
 *   γ · Σ_l softmax(s)_l · h_l
 *
 * Pooling over an input's tokens (specials included, as sentence-
 * transformers does; batches are packed, so there is no padding to count):
 * cls (the first token), max (per dimension), mean, mean-sqrt-len (the sum
 * of the token vectors over sqrt(T)), last (the last token), none (every
 * token's vector).  Several modes (a set, as a sentence-transformers
 * Pooling module with several pooling_mode_* set) give their vectors side
 * by side in sentence-transformers' order, that of the enum below:
 * [cls | max | mean | mean-sqrt-len | last], k modes k x D wide.  none is
 * alone.  Normalize: each output vector (after concatenation) to unit L2
 * norm (a zero vector stays zero).
 *
 * Batching: tfm_embedder_run sorts its inputs by length, cuts them into
 * batches of at most max_tokens tokens (an input longer than that is a
 * batch alone) and writes each result at its input's place.
 *
 * Ownership: the embedder borrows the weights; it owns its forward's
 * scratch and the hidden-state buffers (sized for max_tokens). */
#ifndef TFM_INFER_EMBED_H
#define TFM_INFER_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "model/decode.h"
#include "model/forward.h"
#include "text/tokenizer.h"

#define TFM_LAYER_SEL_MAX 1025

typedef struct tfm_layer_sel {
    int n;                 /* layers combined */
    int layer[TFM_LAYER_SEL_MAX]; /* absolute: 0..L */
    float weight[TFM_LAYER_SEL_MAX]; /* per layer (sum: 1; ELMo: γ·softmax) */
    int concat;            /* 1: side by side; 0: weighted sum */
} tfm_layer_sel;

/* spec: a name above or a layer number, for a stack of n_layer blocks.
 * Errors: -2 for a spec that is neither (a usage error); -1 for a layer
 * out of range (the message gives the range) or fewer than 4 blocks for
 * the -last-4 selections.  Messages start with the spec, for the caller
 * to put its option name before. */
int tfm_layer_sel_parse(tfm_layer_sel *s, const char *spec, int n_layer, tfm_err *err);
/* ELMo: scalars s_0..s_L (n must be n_layer + 1), weights γ·softmax(s). */
int tfm_layer_sel_elmo(tfm_layer_sel *s, const float *scalars, int n, float gamma,
                       int n_layer, tfm_err *err);
/* Width of a combined vector for hidden size C. */
int tfm_layer_sel_dim(const tfm_layer_sel *s, int C);

/* out[r, :] = the selection over hidden[layer][r, :] for rows [0, rows). */
void tfm_layer_sel_combine(const tfm_layer_sel *s, const float *const *hidden, size_t rows,
                           int C, float *out);

/* In sentence-transformers' order of concatenation (its Pooling.forward;
 * it has weightedmean between mean-sqrt-len and last, which tfm has not). */
typedef enum tfm_pool {
    TFM_POOL_CLS,
    TFM_POOL_MAX,
    TFM_POOL_MEAN,
    TFM_POOL_MEAN_SQRT_LEN,
    TFM_POOL_LAST,
    TFM_POOL_NONE,
    TFM_POOL_N
} tfm_pool;

/* A set of modes: a bit for each. */
#define TFM_POOL_SET(p) (1u << (p))

/* "cls", "max", "mean", "mean-sqrt-len", "last", "none" and back; -1 for an
 * unknown name. */
int tfm_pool_parse(const char *name);
const char *tfm_pool_name(tfm_pool p);

/* A mode or a comma list of modes ("mean,max": their concatenation, in the
 * enum's order whatever the list's).  none cannot be in a list, nor a mode
 * twice.  Returns 0, or -1 with a message that starts with the spec (for
 * the caller to put its option name before). */
int tfm_pool_set_parse(const char *spec, unsigned *set, tfm_err *err);
/* The set as tfm_pool_set_parse reads it, in the enum's order ("max,mean"). */
const char *tfm_pool_set_name(unsigned set, char *buf, size_t size);
/* Number of modes in the set. */
int tfm_pool_set_count(unsigned set);

/* out[D] = pooling of x[T, D] (T >= 1); none is not a pooling here. */
void tfm_pool_rows(tfm_pool p, const float *x, int T, int D, float *out);
/* out[k * D]: the set's k poolings side by side, in the enum's order. */
void tfm_pool_set_rows(unsigned set, const float *x, int T, int D, float *out);
/* x /= ||x|| (unchanged when 0). */
void tfm_l2_normalize(float *x, int D);
/* Cosine of a and b; 0 when either is zero. */
double tfm_cosine(const float *a, const float *b, int D);

typedef struct tfm_embed_opts {
    tfm_layer_sel layers;
    unsigned pools;        /* a set of TFM_POOL_SET(mode); none alone */
    int normalize;
    int max_tokens;        /* token budget of one forward batch */
} tfm_embed_opts;

/* The last layer, mean pooling for encoders and last-token pooling for
 * decoders, no normalization, 4096 tokens a batch. */
void tfm_embed_opts_default(tfm_embed_opts *o, const tfm_model_config *cfg);

/* sentence-transformers' folder layout: modules.json naming a Pooling
 * module (its config.json: pooling_mode_cls_token, _max_tokens,
 * _mean_tokens, _mean_sqrt_len_tokens, _lasttoken; every one set is
 * pooled, side by side) and a Normalize module, and the Transformer
 * module's sentence_bert_config.json: max_seq_length into *max_len (the
 * tokens an input keeps; untouched without it).  Returns 1 and sets
 * *pools and *normalize when dir holds modules.json, 0 when it does not,
 * -1 on a malformed file, a pooling_mode_* set that tfm does not have or
 * do_lower_case true (the message names the key). */
int tfm_embed_st_defaults(const char *dir, unsigned *pools, int *normalize, int *max_len,
                          tfm_err *err);

/* A chunk of inputs: input i is tok[off[i] .. off[i] + len[i]) (and its
 * segment ids at the same places in seg, or seg NULL). */
typedef struct tfm_embed_input {
    int n;
    const uint32_t *tok;
    const uint8_t *seg;
    const size_t *off;
    const int *len;
} tfm_embed_input;

typedef struct tfm_embedder {
    tfm_fwd fwd;
    tfm_embed_opts o;
    int C, D, L;           /* D: a token's vector (the layer selection's width) */
    int W;                 /* an output vector: k x D for k pooling modes, D for none */
    float **hidden;        /* [L + 1]: a buffer for each layer used */
    float *comb;           /* [max_tokens, D] */
    size_t rows;           /* capacity of the buffers in rows */
    size_t *order;         /* scratch */
    size_t n_order;
    uint32_t *btok;        /* a batch's tokens, packed */
    uint8_t *bseg;
    int *blen;
    size_t btok_n;
} tfm_embedder;

/* The stack embedded: an encoder-decoder's encoder, else the only one.
 * The layer selection must fit that stack (tfm_embedder_layers). */
int tfm_embedder_init(tfm_embedder *e, const tfm_model_config *cfg, const tfm_weights *w,
                      const tfm_embed_opts *o, tfm_err *err);
void tfm_embedder_free(tfm_embedder *e);
/* Blocks of the stack an embedder runs for cfg. */
int tfm_embedder_layers(const tfm_model_config *cfg);

/* Pooled: out[i, W] for input i.  TFM_POOL_NONE: out[Σ len, D], input i's
 * tokens at rows off'[i] = Σ_{j<i} len[j] (input order).  Errors are
 * tfm_fwd_run's, naming the input's index in the chunk. */
int tfm_embedder_run(tfm_embedder *e, const tfm_embed_input *in, float *out, tfm_err *err);

/* One input alone, with its attention probabilities: attn [L, n_head, len,
 * len]; vec (may be NULL; W floats, or len x D for none) as
 * tfm_embedder_run would give it. */
int tfm_embedder_attention(tfm_embedder *e, const uint32_t *tok, const uint8_t *seg, int len,
                           float *attn, float *vec, tfm_err *err);

/* ---- text to inputs ---- */

/* Appends the ids (and segment ids to seg, when not NULL) of one input:
 * with a tokenizer that has [CLS] and [SEP], [CLS] A [SEP], or for a pair
 * (b not NULL) [CLS] A [SEP] B [SEP] with segments 0 then 1; otherwise the
 * text's tokens (b appended after an end-of-text token, if the tokenizer
 * has one).  With max > 0 an input longer than max is cut to max: a pair
 * longest-first (text/tokenizer.h's tfm_tok_pair_truncate, as training
 * cuts it), one text to its head (tfm_embed_truncate).  seg, when given,
 * has the same length as ids.  Returns the number of ids before cutting. */
size_t tfm_embed_encode(const tfm_tokenizer *tok, tfm_tok_scratch *scratch, const char *a,
                        size_t na, const char *b, size_t nb, size_t max, tfm_ids *ids,
                        tfm_buf *seg);

/* Truncates ids (and seg) from position `from` to keep max in all: the
 * head of the input, keeping its last token when that is [SEP]. */
void tfm_embed_truncate(const tfm_tokenizer *tok, tfm_ids *ids, tfm_buf *seg, size_t from,
                        size_t max);

#endif
