/* UTF-8 decoding that never fails: an invalid or truncated sequence yields
 * one byte at a time, so callers can keep every input byte. */
#ifndef TFM_TEXT_UTF8_H
#define TFM_TEXT_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Decodes the character at s[0..n) (n >= 1).  Returns the code point and sets
 * *adv to its length; for a byte that does not start a valid, complete,
 * shortest-form sequence (surrogates and > U+10FFFF included) returns -1
 * with *adv = 1. */
int32_t tfm_utf8_decode(const unsigned char *s, size_t n, size_t *adv);

/* Appends the encoding of cp (< 0x110000) to dst (4 bytes room); returns the
 * length. */
size_t tfm_utf8_encode(uint32_t cp, unsigned char *dst);

/* Appends s[0..n) lowercased character by character as HuggingFace's
 * Lowercase normalizer does (Rust's char::to_lowercase: simple mappings
 * plus U+0130 -> "i\u0307"); invalid bytes are copied unchanged. */
struct tfm_buf;
void tfm_utf8_lower(const char *s, size_t n, struct tfm_buf *out);

/* The same; src receives, for each byte appended, the offset in s of the
 * character it came from. */
struct tfm_ids;
void tfm_utf8_lower_src(const char *s, size_t n, struct tfm_buf *out, struct tfm_ids *src);

/* Appends s[0..n) in Unicode normalization form C (utf8proc's, as HF's NFC
 * normalizer); src (may be NULL) receives for each byte appended the
 * offset in s it came from: its own for text NFC keeps, else the start of
 * the run that composed (a character and the non-ASCII ones after it).
 * Invalid bytes are copied unchanged. */
void tfm_utf8_nfc_src(const char *s, size_t n, struct tfm_buf *out, struct tfm_ids *src);

/* 1 when s[0..n) is valid UTF-8. */
int tfm_utf8_valid(const unsigned char *s, size_t n);

/* 0 when text[0..len) is valid UTF-8, else the line (1-based) of its first
 * invalid byte: every reader of text input reports "file:line: invalid
 * UTF-8" from it. */
long tfm_utf8_invalid_line(const char *text, size_t len);

#endif
