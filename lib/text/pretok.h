/* GPT-2's pre-tokenization, written out by hand.  It splits text exactly as
 * tiktoken and HuggingFace tokenizers apply the regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with \p{L} = Lu Ll Lt Lm Lo, \p{N} = Nd Nl No as of Unicode 16 (what
 * tiktoken 1.0.22 and HF tokenizers 0.23 use: utf8proc's Unicode 15 tables
 * plus a table of the letters and digits Unicode 16 added) and \s = the
 * Unicode White_Space property (U+0009..000D, 0020,
 * 0085, 00A0, 1680, 2000..200A, 2028, 2029, 202F, 205F, 3000), which is what
 * Rust's regex and Oniguruma use.
 *
 * Those tools only ever see valid UTF-8 (their input is decoded first, an
 * invalid byte becoming U+FFFD).  Here each byte that is not part of a valid
 * sequence is a character of its own in the class of U+FFFD (a symbol: the
 * [^\s\p{L}\p{N}] class), but keeps its own byte, so byte-level BPE encodes it
 * exactly and decode(encode(x)) == x for any bytes. */
#ifndef TFM_TEXT_PRETOK_H
#define TFM_TEXT_PRETOK_H

#include <stddef.h>
#include <stdint.h>

enum { TFM_CC_LETTER, TFM_CC_NUMBER, TFM_CC_SPACE, TFM_CC_OTHER };

/* Class of the character at s[0..n) (n >= 1), its length in *adv. */
int tfm_char_class(const unsigned char *s, size_t n, size_t *adv);

/* End of the pre-token that starts at s[i] (i < n); always > i. */
size_t tfm_gpt2_pretok_next(const unsigned char *s, size_t n, size_t i);

/* Llama 3's and Qwen2's pre-tokenization (tokenizer.json's Split with
 * these regexes, behavior Isolated), by hand as GPT-2's is, with the same
 * classes and handling of invalid bytes:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen2's has \p{N} where Llama 3's has \p{N}{1,3}: max_digits 1 or 3.
 * The case-insensitive contractions take U+017F (long s) as an s, as
 * Oniguruma's case folding does. */
extern const char tfm_pretok_llama3_regex[], tfm_pretok_qwen2_regex[];
size_t tfm_llama3_pretok_next(const unsigned char *s, size_t n, size_t i, int max_digits);

#endif
