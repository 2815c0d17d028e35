/* Byte-level BPE (GPT-2): the model behind TFM_TOK_BPE tokenizers.
 *
 * Text is pre-tokenized with GPT-2's pattern (text/pretok.h); each pre-token
 * is a sequence of bytes, each byte a base token (GPT-2 spells byte b as a
 * printable character, "Ġ" for a space); then the pair of adjacent tokens
 * with the lowest merge rank is merged, leftmost first, until no pair has a
 * rank.  This is exactly HuggingFace's BPE model (for well-formed merge lists
 * it is also GPT-2's and tiktoken's).
 *
 * Programs use text/tokenizer.h; this header is for the facade, the trainer
 * and the tests. */
#ifndef TFM_TEXT_BPE_H
#define TFM_TEXT_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* GPT-2's byte alphabet: the code point that spells byte b, and the inverse
 * (-1 for a code point that spells no byte). */
uint32_t tfm_bpe_byte_char(uint8_t b);
int tfm_bpe_char_byte(uint32_t cp);
/* Appends the spelling of bytes s[0..n) in the byte alphabet. */
void tfm_bpe_spell(const unsigned char *s, size_t n, tfm_buf *out);

typedef struct tfm_bpe tfm_bpe;
typedef struct tfm_bpe_cache tfm_bpe_cache;

/* The model: vocabulary size n (ids 0..n-1), a function giving each id's
 * piece (in the byte alphabet), and merges as pairs of ids in rank order
 * with the id each produces.  Built by the loaders in bpe.c and the trainer. */
typedef struct tfm_bpe_merge {
    uint32_t left, right, merged;
} tfm_bpe_merge;

/* Per-thread word cache. */
tfm_bpe_cache *tfm_bpe_cache_new(void);
void tfm_bpe_cache_free(tfm_bpe_cache *c);

/* Appends the ids of one pre-token (bytes s[0..n), n >= 1).  cache may be
 * NULL.  Exposed for tests (small-word and long-word paths must agree). */
void tfm_bpe_encode_word(const tfm_bpe *m, tfm_bpe_cache *cache,
                         const unsigned char *s, size_t n, tfm_ids *out);
/* Forces the long-word (heap) algorithm; for tests. */
void tfm_bpe_encode_word_heap(const tfm_bpe *m, const unsigned char *s,
                              size_t n, tfm_ids *out);

#endif
