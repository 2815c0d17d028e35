/* Where each token of an encoding lies in its text (data/spans.h). */
#include "config.h"

#include "data/spans.h"

#include <string.h>

static int lower_ascii(int c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* Position of p[0..np) in text[from..len) ignoring ASCII case, or -1. */
static long find_ci(const char *text, size_t len, size_t from, const char *p, size_t np)
{
    if (!np)
        return -1;
    for (size_t i = from; i + np <= len; i++) {
        size_t k = 0;
        while (k < np && lower_ascii((unsigned char)text[i + k]) ==
                             lower_ascii((unsigned char)p[k]))
            k++;
        if (k == np)
            return (long)i;
    }
    return -1;
}

void tfm_token_spans(const tfm_tokenizer *tok, const char *text, size_t len,
                     const uint32_t *ids, size_t n, long *start, long *end, tfm_buf *piece)
{
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    tfm_tok_kind kind = tfm_tokenizer_kind(tok);
    tfm_buf t = {0};
    tfm_err err;
    size_t cur = 0;
    /* The spans the tokenizer gives through its normalization, taken while
     * ids follow its encoding of text; searching the pieces is only the
     * fallback for ids that do not. */
    tfm_ids re = {0}, rs = {0}, rend = {0};
    tfm_tokenizer_encode_spans(tok, NULL, text, len, 0, &re, &rs, &rend);
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        tfm_buf_clear(&t);
        int special = (int64_t)ids[i] == sp->cls || (int64_t)ids[i] == sp->sep ||
                      (kind == TFM_TOK_BPE && (int64_t)ids[i] == sp->eos);
        if (kind == TFM_TOK_WORDPIECE) {
            size_t pl;
            const char *p = tfm_tokenizer_piece(tok, ids[i], &pl);
            if (p && pl >= 2 && p[0] == '#' && p[1] == '#')
                p += 2, pl -= 2;
            if (p)
                tfm_buf_append(&t, p, pl);
        } else if (tfm_tokenizer_decode(tok, &ids[i], 1, 0, &t, &err) < 0) {
            t.len = 0;
        }
        start[i] = end[i] = -1;
        if (!special && j < re.len && re.data[j] == ids[i]) {
            start[i] = (long)rs.data[j];
            end[i] = (long)rend.data[j];
            cur = (size_t)end[i];
            j++;
        } else if (!special && kind == TFM_TOK_BPE) {
            /* decode(encode(x)) == x: the bytes follow each other exactly */
            if (cur + t.len <= len && !memcmp(text + cur, t.data, t.len)) {
                start[i] = (long)cur;
                end[i] = (long)(cur + t.len);
                cur += t.len;
            }
        } else if (!special && (int64_t)ids[i] != sp->unk) {
            long at = find_ci(text, len, cur, t.data, t.len);
            if (at >= 0) {
                start[i] = at;
                end[i] = at + (long)t.len;
                cur = (size_t)end[i];
            }
        }
        if (piece) {
            tfm_buf_append(piece, t.data, t.len);
            tfm_buf_putc(piece, 0);
        }
    }
    tfm_buf_free(&t);
    tfm_ids_free(&re);
    tfm_ids_free(&rs);
    tfm_ids_free(&rend);
}
