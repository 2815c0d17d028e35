/* Fill-mask: what an encoder with BERT's masked-LM head predicts for each
 * [MASK] of a text, as HuggingFace's fill-mask pipeline reports it.
 *
 *     tfm_filler f;
 *     tfm_filler_open(&f, "run/model.safetensors", NULL, &err);  // an MLM encoder
 *     tfm_fill_out o = {0};
 *     tfm_filler_run(&f, "the [MASK] sat", 14, 5, &o, &err); // top 5 per mask
 *     // o.n_mask masks; mask j's candidates o.id[j*o.k + r], o.prob[...]
 *     tfm_fill_out_free(&o);
 *     tfm_filler_close(&f);
 *
 * The text is encoded with its added tokens split out (so the tokenizer's
 * mask text, e.g. "[MASK]", becomes the mask id) between [CLS] and [SEP]
 * when the tokenizer (or data.cls_id/sep_id) has them, segment 0, and run
 * through the model's own forward in inference mode; the MLM head, LN(act(
 * h·Dᵀ + d))·Eᵀ + b, runs only at the mask positions.  Probabilities are
 * the softmax over the model's whole vocabulary (double precision), the
 * candidates in descending probability (ties: lower id first).
 *
 * Ownership: the filler owns the model, its tokenizer and its buffers;
 * tfm_fill_out owns its arrays (reused by later runs). */
#ifndef TFM_INFER_FILL_H
#define TFM_INFER_FILL_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "data/data_keys.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

typedef struct tfm_filler {
    tfm_data_keys data;    /* the model file's */
    tfm_model m;           /* in inference mode */
    tfm_tokenizer *tok;
    tfm_tok_scratch *scratch;
    int64_t cls, sep, mask;
    char mask_text[64];    /* the mask token's text, for messages */
    tfm_ids ids;
    int32_t *in, *tgt;     /* [block_size] */
    int32_t *seg;          /* [block_size] zeros, or NULL: no segments */
    double *p;             /* [V] probabilities of one mask */
} tfm_filler;

/* Errors (naming path): a file that does not load, a decoder or an
 * encoder-decoder, an encoder without model.mlm_head ("has no masked-LM
 * head"), no tokenizer, a tokenizer without a mask token.  adapter: a LoRA
 * adapter directory merged in (model/lora.h; NULL: none). */
int tfm_filler_open(tfm_filler *f, const char *path, const char *adapter, tfm_err *err);
void tfm_filler_close(tfm_filler *f);

typedef struct tfm_fill_out {
    int n_mask, k;         /* masks found; candidates per mask */
    int n_tokens;          /* the encoded input's length */
    int *pos;              /* [n_mask] each mask's position in the input */
    uint32_t *id;          /* [n_mask, k] */
    double *prob;          /* [n_mask, k] */
    size_t cap_mask;
} tfm_fill_out;

/* Top k candidates (k is cut to the vocabulary) for every mask of text.
 * Errors: no mask token in the text (-2, the message says which text is
 * the mask), an input longer than the model's context (-1). */
int tfm_filler_run(tfm_filler *f, const char *text, size_t len, int k, tfm_fill_out *o,
                   tfm_err *err);
void tfm_fill_out_free(tfm_fill_out *o);

/* The top k of p[0..n) by value, descending, ties by lower index: their
 * indices in idx[0..k) (k ≤ n). */
void tfm_top_k(const double *p, size_t n, int k, uint32_t *idx);

#endif
