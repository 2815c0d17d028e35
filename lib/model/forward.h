/* Whole-sequence inference forward: the hidden states of every layer of a
 * stack, for many sequences of different lengths at once, reading the
 * weights in place (model/decode.h's tfm_weights).
 *
 *     tfm_fwd f;
 *     tfm_fwd_init(&f, &cfg, &w, TFM_FWD_MAIN, &err);  // or TFM_FWD_ENCODER
 *     float *hidden[L + 1] = {0};  hidden[L] = top;  // the layers wanted
 *     tfm_fwd_batch b = {.n = 3, .len = lens, .tok = packed, .hidden = hidden};
 *     tfm_fwd_run(&f, &b, &err);                    // top: [Σ len, C]
 *     tfm_fwd_free(&f);
 *
 * Stacks: an encoder's blocks (full attention), a decoder's (causal
 * attention: position i sees 0..i), or the encoder of an encoder-decoder
 * (TFM_FWD_ENCODER; full attention, its own embeddings).  The decoder of an
 * encoder-decoder needs a source: model/decode.h runs it.
 *
 * Packing: the tokens of the n sequences are one [Σ len, C] matrix, so each
 * linear layer is one matrix product over every real token and no padding
 * is ever computed; attention runs per sequence (nn/attention.h), and
 * positions restart at 0 in each.
 *
 * Hidden states, as HuggingFace's output_hidden_states: layer 0 is the
 * embedding output (after the embedding norm, if any), layer l the output
 * of block l; for pre-LN stacks the top layer (n_layer) is after the final
 * norm ln_f (HF GPT-2 does the same), the layers below are the residual
 * stream without it.
 *
 * Attention probabilities of one chosen sequence, on request: [n_layer,
 * n_head, len, len] (query rows, key columns; masked entries 0).  Other
 * sequences longer than TFM_ATTN_TILED_MIN_KEYS take the tiled attention
 * (nn/attention.h): memory linear in the length, the one-pass result to
 * float rounding.
 *
 * Threads: BLIS's for the products, OpenMP's for attention heads and the
 * elementwise kernels (tfm_blas_init).  With the weights packed
 * (tfm_fwd_pack_weights) the result of a sequence does not depend on the
 * other sequences of its batch, to the bit; without, a batch of one token
 * takes gemv's rounding, not the matrix kernel's.
 *
 * Ownership: tfm_fwd owns its scratch (grown to the largest batch seen),
 * never the weights, which must outlive it.  One tfm_fwd per thread. */
#ifndef TFM_MODEL_FORWARD_H
#define TFM_MODEL_FORWARD_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "model/decode.h"
#include "model/transformer.h"
#include "nn/attention.h"
#include "tensor/gemm.h"
#include "tensor/q8.h"

typedef enum tfm_fwd_stack {
    TFM_FWD_MAIN,    /* an encoder's or a decoder's only stack */
    TFM_FWD_ENCODER, /* the encoder of an encoder-decoder */
} tfm_fwd_stack;

/* How products by 8-bit matrices run (tfm_fwd_pack_weights). */
typedef enum tfm_fwd_q8 {
    TFM_FWD_Q8_AUTO, /* the faster of the two per matrix shape
                        (tensor/q8.h's tfm_q8_gemm_faster) */
    TFM_FWD_Q8_ON,   /* 8-bit activations times the 8-bit weights */
    TFM_FWD_Q8_OFF,  /* float32 times the weights widened */
} tfm_fwd_q8;

typedef struct tfm_fwd {
    tfm_model_config cfg;
    const tfm_weights *w;
    const tfm_embed_weights *e;
    const tfm_layer_weights *layers;
    int n_layer;
    int vocab;             /* the stack's input vocabulary */
    tfm_mask_kind mask;    /* causal for decoders */
    tfm_attn_impl attn_impl; /* of the one-pass attention (nn/attention.h):
                                BLAS without AVX-512 (tfm_fwd_init), where
                                the reference tests' rounding was set */
    int t5_bidirectional;
    float *alibi;          /* [n_head] slopes, or NULL */
    /* scratch, for max_rows rows and sequences of up to max_len */
    int max_rows, max_len;
    tfm_block blk;         /* the block (model/transformer.h's tfm_model_block) */
    float *x, *h, *qkv, *att, *fc, *fc1, *mean, *rstd, *pe, *rope;
    float *emb;            /* [rows, E]: a factorised embedding before its
                              projection, else NULL */
    int32_t *pos;
    float *probs, *ascratch; /* probs: P of one attention call (probs_n
                                floats), of sequences of up to probs_len,
                                runs of up to max_run sequences */
    int probs_len, max_run;
    size_t probs_n;
    size_t ascratch_n;
    tfm_gemm_b *packed;    /* [n_layer][5] qkv, proj, fc, fc proj, a gated
                              feed-forward's wi_1; or NULL */
    tfm_q8_packed *q8;     /* the same of the 8-bit matrices (w zeroed where
                              a matrix is not 8-bit); or NULL */
    tfm_fwd_q8 q8_path;
    int8_t *xq;            /* a product's input rows quantized, [rows, K] */
    float *xd;             /* and their block scales */
    size_t xq_n;           /* xq's bytes */
} tfm_fwd;

int tfm_fwd_init(tfm_fwd *f, const tfm_model_config *cfg, const tfm_weights *w,
                 tfm_fwd_stack stack, tfm_err *err);
void tfm_fwd_free(tfm_fwd *f);

/* Packs the stack's weight matrices once into BLIS's kernel layout
 * (tensor/gemm.h's tfm_gemm_packed) for the runs that follow: a short batch
 * (one sentence) then reads each weight once instead of packing it again
 * in every product.  Same results to the bit; costs a second copy of the
 * matrices' memory.
 *
 * 8-bit matrices (model/decode.h's tfm_matrix of dtype TFM_WEIGHTS_Q8_0,
 * with their float32 widening) are also packed for tensor/q8.h's
 * tfm_q8_gemm (a quarter of their float32 memory; the float32 packing is
 * freed where the 8-bit product is chosen), and their products
 * then quantize the input rows to 8 bits per block of 32 (tfm_q8_quantize)
 * and multiply in integers -- the numbers of the decode steps' 8-bit
 * products -- where that is faster than float32 on this machine for the
 * matrix's shape (timed once per shape in the process), or always, or
 * never: q8_path, the process's tfm_fwd_q8_policy (programs' --q8-gemm).
 * A row's result still never depends on its batch. */
void tfm_fwd_pack_weights(tfm_fwd *f);

/* The q8_path every later tfm_fwd_pack_weights takes (default AUTO);
 * tfm_fwd_q8_option sets it from a program's --q8-gemm argument ("auto",
 * "on" or "off"; anything else is a usage error, exit 2). */
tfm_fwd_q8 tfm_fwd_q8_policy(void);
void tfm_fwd_q8_option(const char *prog, const char *arg);

/* The longest sequence the stack takes: block_size with learned
 * positions, else no limit (INT32_MAX). */
int tfm_fwd_max_len(const tfm_fwd *f);

typedef struct tfm_fwd_batch {
    int n;                 /* sequences */
    const int *len;        /* [n], each >= 1 */
    const uint32_t *tok;   /* [Σ len] the sequences one after another */
    const uint8_t *seg;    /* [Σ len] segment ids (models with segments), or
                              NULL: all 0 */
    float *const *hidden;  /* [n_layer + 1]: where layer l's [Σ len, C] goes,
                              NULL for layers not wanted */
    float *attn;           /* [n_layer, n_head, len, len] of sequence
                              attn_seq, or NULL */
    int attn_seq;
    const int *prefix;     /* [n] a causal stack's prefix-LM prefixes (every
                              position sees the first prefix[s] of its
                              sequence), or NULL */
} tfm_fwd_batch;

/* Errors: a token id outside the vocabulary, a segment id outside
 * n_segments, a sequence of no tokens or longer than tfm_fwd_max_len
 * (messages name the sequence's index in the batch). */
int tfm_fwd_run(tfm_fwd *f, const tfm_fwd_batch *b, tfm_err *err);

/* Floating-point operations of the matrix products and attention of one
 * sequence of len tokens (2 per multiply-add), for speed reports. */
double tfm_fwd_flops(const tfm_model_config *cfg, int n_layer, int len);

/* The embedding of one token, shared by every inference path:
 * x = te·scale + pe (pe NULL: no position term); scale = √C with
 * model.emb_scale, else 1 (tfm_emb_scale). */
static inline float tfm_emb_scale(const tfm_model_config *c)
{
    return c->emb_scale ? sqrtf((float)c->n_embd) : 1.0f;
}

static inline void tfm_embed_row(float *x, const float *te, const float *pe, float scale, int C)
{
    if (pe)
        for (int i = 0; i < C; i++)
            x[i] = te[i] * scale + pe[i];
    else
        for (int i = 0; i < C; i++)
            x[i] = te[i] * scale;
}

#endif
