/* Byte spans of tokens in the text they encode: what a tagger's words, a
 * span answer's characters and tfm-embed's per-token output map back
 * through.  Text only, no model (below data/ftdata.h, which uses it). */
#ifndef TFM_DATA_SPANS_H
#define TFM_DATA_SPANS_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "text/tokenizer.h"

/* Byte spans of tokens ids[0..n) in text[0..len): start[i], end[i], as the
 * tokenizer maps them back through its normalization (text/tokenizer.h's
 * tfm_tokenizer_encode_spans: an accented or case-changed character is
 * spanned whole); -1 for a token that is not in the text (specials added
 * around it).  Ids that are not the tokenizer's encoding of text are looked
 * for from the end of the previous token (ASCII case ignored), or -1.  piece (may be NULL) receives each
 * token's text, NUL-separated. */
void tfm_token_spans(const tfm_tokenizer *tok, const char *text, size_t len,
                     const uint32_t *ids, size_t n, long *start, long *end, tfm_buf *piece);

#endif
