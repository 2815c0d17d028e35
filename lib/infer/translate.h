/* Translation with encoder-decoder models: text to source ids, the source
 * tokenizer of a model file, and greedy translation of id sequences with a
 * model in memory (validation during training).  Decoding itself is
 * tfm_gen's (infer/generate.h): a source is a "prompt" of an
 * encoder-decoder.
 *
 *     tfm_ids src = {0};  size_t cut;
 *     tfm_translate_source(src_tok, scratch, line, len,
 *                          tfm_gen_source_limit(&lm.cfg), 1, &src, &cut, &err);
 *     ... tfm_gen_run(&gen, &src, 1, 0, &res, NULL, NULL, &err) ...
 *
 * Conventions (shared with training, train/): a source is the source
 * tokenizer's ids of the line (special-token text is ordinary text)
 * followed by that tokenizer's end-of-text; an empty line is end-of-text
 * alone.  tfm_translate_source builds every source, in training,
 * validation and tfm-generate alike, so the encoder always sees the ids it
 * was trained on.  The decoder starts from the tokenizer's beginning-of-text token,
 * or end-of-text when it has none, and stops at end-of-text.  The model
 * file's "tokenizer" serves both sides unless its metadata also holds
 * "source_tokenizer" (a second tokenizer.json), which then encodes sources.
 *
 * Ownership: the caller owns every tfm_ids and tokenizer returned. */
#ifndef TFM_INFER_TRANSLATE_H
#define TFM_INFER_TRANSLATE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "data/source.h"
#include "model/decode.h"
#include "lm/lm.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

/* The model file's "source_tokenizer" (its ids must lie in the source
 * vocabulary), or *out = NULL when it has none. */
int tfm_lm_source_tokenizer(const tfm_lm *lm, tfm_tokenizer **out, tfm_err *err);

/* How text becomes the sources of lm, an encoder-decoder (tfm-generate's
 * rule): encoded by the file's source tokenizer (tfm_lm_source_tokenizer)
 * when it has one, else by the model's own; ended by that tokenizer's
 * end-of-text (data/source.h), or, when the model's own has none (a BART
 * folder's bare vocab.json) or there is no tokenizer at all, by the model's
 * (its config.json's). */
typedef struct tfm_lm_sources {
    const tfm_tokenizer *tok;   /* NULL: none (sources as ids only) */
    tfm_tok_scratch *scratch;   /* tok's: lm_scratch, or its own for owned */
    int64_t eos;                /* ends every source; -1: none */
    tfm_tokenizer *owned;       /* the file's source tokenizer, or NULL */
} tfm_lm_sources;

/* lm_scratch: a scratch of lm->tok (NULL without one). */
int tfm_lm_sources_open(tfm_lm_sources *s, const tfm_lm *lm, tfm_tok_scratch *lm_scratch,
                        tfm_err *err);
void tfm_lm_sources_close(tfm_lm_sources *s);

/* Greedy translations of the sources src[0..n) (ids ending with eos, at
 * most model.block_size of them) by the encoder-decoder cfg/w (e.g. from
 * tfm_weights_from_model): out[i] = the target ids of src[i], end-of-text
 * excluded.  start: the decoder's first token (-1: eos).  At most
 * max_len_a·S + max_len_b new tokens for a source of S (both 0: 1·S + 50),
 * within model.block_size for learned positions.  Sources of similar
 * lengths are decoded together, `batch` at a time (< 1: 64).  out[0..n)
 * must be zeroed or hold ids (they are cleared); on error they are freed. */
int tfm_translate_greedy(const tfm_model_config *cfg, const tfm_weights *w, int64_t start,
                         uint32_t eos, const tfm_ids *src, size_t n, int batch,
                         double max_len_a, int max_len_b, tfm_ids *out, tfm_err *err);

#endif
