/* A translation source: the source tokenizer's ids of a line followed by
 * its end-of-text, cut to the encoder's context (or a prefix LM's input,
 * cut to the model's).  Training (train/task_seq2seq.c), validation and
 * tfm-generate (infer/translate.h) build every source with these, so the
 * encoder always sees the ids it was trained on.  Text and ids only, no
 * model. */
#ifndef TFM_DATA_SOURCE_H
#define TFM_DATA_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "text/tokenizer.h"

/* out = the ids of text[0..len) by the source tokenizer tok + tok's
 * end-of-text (an error when it has none), after tok's beginning-of-text
 * with bos (model.source_bos: BART's <s>; an error when tok has none).  text must be valid UTF-8 (else
 * an error).  A source longer than limit tokens is an error, or with
 * truncate keeps its first limit - 1 tokens and the end-of-text; *dropped
 * (may be NULL) is the number of tokens cut.  encoder: the limit is an
 * encoder's context (the error names a source and the encoder's context),
 * else a prefix LM's (an input and the model's context). */
int tfm_translate_source(const tfm_tokenizer *tok, tfm_tok_scratch *scratch, const char *text,
                         size_t len, int bos, int limit, int truncate, int encoder,
                         tfm_ids *out, size_t *dropped, tfm_err *err);

/* The same; with split_special the text of a special token (T5's
 * <extra_id_0>, BART's <mask>) is that token: infilling prompted with text
 * (tfm-generate --split-special), which training data never is. */
int tfm_translate_source_split(const tfm_tokenizer *tok, tfm_tok_scratch *scratch,
                               const char *text, size_t len, int bos, int limit, int truncate,
                               int encoder, int split_special, tfm_ids *out, size_t *dropped,
                               tfm_err *err);

/* The end-of-text that ends a source: the source tokenizer's (-1: none). */
int64_t tfm_translate_source_eos(const tfm_tokenizer *src_tok);

/* The length rule alone, for sources given as ids (ending with eos):
 * longer than limit is an error, or with truncate the first limit - 1
 * tokens and the eos. */
int tfm_translate_fit(tfm_ids *src, uint32_t eos, int limit, int truncate, int encoder,
                      size_t *dropped, tfm_err *err);

#endif
