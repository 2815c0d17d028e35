/* Internal to the WordPiece code: the callback form of BERT's basic
 * tokenizer, so that encoding and training see each word as soon as it is
 * complete, without storing the word list. */
#ifndef TFM_TEXT_BERT_INTERNAL_H
#define TFM_TEXT_BERT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "text/wordpiece.h"

/* Called once per word (normalized UTF-8, never empty). */
typedef void (*tfm_bert_word_fn)(void *ctx, const char *word, size_t len);

/* normalize = 0: no normalizer at all; pretokenize = 0: the whole normalized
 * text is one word (HF with a null pre_tokenizer).  word is scratch. */
void tfm_bert_split(const tfm_bert_norm *norm, int normalize, int pretokenize,
                    const char *text, size_t len, tfm_buf *word,
                    tfm_bert_word_fn fn, void *ctx);

/* The same; src (not NULL) receives, beside each word's bytes, the byte
 * offset in text of the input character each byte came from (a word's
 * bytes are src->data[0 .. len) when fn runs), so that a token maps back
 * to the original text through every normalization. */
void tfm_bert_split_src(const tfm_bert_norm *norm, int normalize, int pretokenize,
                        const char *text, size_t len, tfm_buf *word, tfm_ids *src,
                        tfm_bert_word_fn fn, void *ctx);

/* Tests set this to compare the per-character fast path with the full
 * pipeline. */
extern int tfm_bert_nocache;

/* Decodes one code point at s[0..n) (n > 0) as WHATWG's UTF-8 decoder does:
 * a maximal invalid subpart reads as U+FFFD.  Returns the bytes consumed. */
size_t tfm_bert_utf8_next(const unsigned char *s, size_t n, int32_t *cp);

/* Appends cp as UTF-8. */
void tfm_bert_put_utf8(tfm_buf *b, int32_t cp);

#endif
