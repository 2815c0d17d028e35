/* The tokenizer facade: what every kind shares (vocabulary table, added
 * tokens, specials, tokenizer.json envelope, file dispatch). */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <utf8proc.h>

#include "base/file.h"
#include "text/pretok.h"
#include "text/tok_internal.h"
#include "text/utf8.h"
#include "text/wordpiece.h"

/* ---- vocabulary ---- */

static uint64_t piece_hash(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 31);
}

tfm_tokenizer *tfm_tok_new(tfm_tok_kind kind, const tfm_tok_ops *ops)
{
    tfm_tokenizer *t = tfm_calloc(1, sizeof *t);
    t->kind = kind;
    t->ops = ops;
    t->specials = (tfm_tok_specials){-1, -1, -1, -1, -1, -1, -1, -1};
    return t;
}

static void hash_insert(tfm_tokenizer *t, uint32_t id)
{
    uint32_t h = (uint32_t)piece_hash(t->pieces[id], t->piece_lens[id]) & (t->hash_cap - 1);
    while (t->hash[h] != UINT32_MAX)
        h = (h + 1) & (t->hash_cap - 1);
    t->hash[h] = id;
    t->hash_used++;
}

static void hash_grow(tfm_tokenizer *t)
{
    uint32_t cap = t->hash_cap ? t->hash_cap * 2 : 1024;
    free(t->hash);
    t->hash = tfm_malloc((size_t)cap * sizeof *t->hash);
    memset(t->hash, 0xff, (size_t)cap * sizeof *t->hash);
    t->hash_cap = cap;
    t->hash_used = 0;
    /* from the last id down, so that a piece listed twice keeps its later id */
    for (uint32_t id = t->n_pieces; id-- > 0;)
        if (t->pieces[id] && tfm_tokenizer_token_id(t, t->pieces[id], t->piece_lens[id]) < 0)
            hash_insert(t, id);
}

int64_t tfm_tokenizer_token_id(const tfm_tokenizer *t, const char *piece, size_t len)
{
    if (!t->hash_cap)
        return -1;
    uint32_t h = (uint32_t)piece_hash(piece, len) & (t->hash_cap - 1);
    for (;;) {
        uint32_t id = t->hash[h];
        if (id == UINT32_MAX)
            return -1;
        if (t->piece_lens[id] == len && memcmp(t->pieces[id], piece, len) == 0)
            return id;
        h = (h + 1) & (t->hash_cap - 1);
    }
}

static void pieces_reserve(tfm_tokenizer *t, uint32_t n)
{
    if (n <= t->cap_pieces)
        return;
    uint32_t cap = t->cap_pieces ? t->cap_pieces : 256;
    while (cap < n)
        cap *= 2;
    t->pieces = tfm_realloc(t->pieces, (size_t)cap * sizeof *t->pieces);
    t->piece_lens = tfm_realloc(t->piece_lens, (size_t)cap * sizeof *t->piece_lens);
    memset(t->pieces + t->cap_pieces, 0, (size_t)(cap - t->cap_pieces) * sizeof *t->pieces);
    memset(t->piece_lens + t->cap_pieces, 0, (size_t)(cap - t->cap_pieces) * sizeof *t->piece_lens);
    t->cap_pieces = cap;
}

static int vocab_set(tfm_tokenizer *t, uint32_t id, const char *piece, size_t len,
                     const char *what, int dup_ok, tfm_err *err)
{
    const char *w = what ? what : "", *sep = what ? ": " : "";
    if (id > TFM_TOK_MAX_ID)
        return tfm_err_set(err, "%s%stoken id %u is too large (at most %u)", w, sep, id,
                           TFM_TOK_MAX_ID);
    if (len > TFM_TOK_MAX_LEN)
        return tfm_err_set(err, "%s%stoken of %zu bytes is too long", w, sep, len);
    pieces_reserve(t, id + 1);
    if (t->pieces[id])
        return tfm_err_set(err, "%s%stoken id %u is used twice", w, sep, id);
    int64_t old = tfm_tokenizer_token_id(t, piece, len);
    if (old >= 0 && !dup_ok)
        return tfm_err_set(err, "%s%stoken '%.*s' appears twice (ids %lld and %u)", w, sep,
                           (int)len, piece, (long long)old, id);
    t->pieces[id] = tfm_strndup(piece, len);
    t->piece_lens[id] = (uint32_t)len;
    if (id >= t->n_pieces)
        t->n_pieces = id + 1;
    if (old >= 0) {
        /* the later id takes over the piece's hash slot */
        uint32_t h = (uint32_t)piece_hash(piece, len) & (t->hash_cap - 1);
        while (t->hash[h] != (uint32_t)old)
            h = (h + 1) & (t->hash_cap - 1);
        t->hash[h] = id;
        return 0;
    }
    if ((t->hash_used + 1) * 4 >= t->hash_cap * 3)
        hash_grow(t);
    else
        hash_insert(t, id);
    return 0;
}

int tfm_tok_vocab_set(tfm_tokenizer *t, uint32_t id, const char *piece, size_t len,
                      const char *what, tfm_err *err)
{
    return vocab_set(t, id, piece, len, what, 0, err);
}

int tfm_tok_vocab_set_dup(tfm_tokenizer *t, uint32_t id, const char *piece, size_t len,
                          const char *what, tfm_err *err)
{
    return vocab_set(t, id, piece, len, what, 1, err);
}

uint32_t tfm_tok_vocab_push(tfm_tokenizer *t, const char *piece, size_t len)
{
    uint32_t id = t->n_pieces;
    int rc = tfm_tok_vocab_set(t, id, piece, len, NULL, NULL);
    TFM_ASSERT(rc == 0);
    return id;
}

/* ---- added tokens and specials ---- */

static void added_flag_set(tfm_tokenizer *t, uint32_t id, uint8_t v)
{
    if (id >= t->added_flag_cap) {
        size_t cap = t->added_flag_cap ? t->added_flag_cap : 64;
        while (cap <= id)
            cap *= 2;
        t->added_flag = tfm_realloc(t->added_flag, cap);
        memset(t->added_flag + t->added_flag_cap, 0, cap - t->added_flag_cap);
        t->added_flag_cap = cap;
    }
    t->added_flag[id] = v;
}

int tfm_tok_add_token(tfm_tokenizer *t, const tfm_tok_added *a, const char *what, tfm_err *err)
{
    if (a->len == 0)
        return tfm_err_set(err, "%s: an added token is empty", what);
    int64_t have = tfm_tokenizer_token_id(t, a->content, a->len);
    if (have >= 0 && have != a->id)
        return tfm_err_set(err, "%s: added token '%s' has id %u but the vocabulary says %lld",
                           what, a->content, a->id, (long long)have);
    if (have < 0 && tfm_tok_vocab_set(t, a->id, a->content, a->len, what, err))
        return -1;
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].id == a->id)
            return tfm_err_set(err, "%s: added token id %u appears twice", what, a->id);
    t->added = tfm_realloc(t->added, (t->n_added + 1) * sizeof *t->added);
    size_t i = t->n_added++;
    while (i > 0 && t->added[i - 1].id > a->id) {
        t->added[i] = t->added[i - 1];
        i--;
    }
    t->added[i] = *a;
    t->added[i].content = tfm_strndup(a->content, a->len);
    added_flag_set(t, a->id, a->special ? 2 : 1);
    if (a->len > t->max_added_len)
        t->max_added_len = a->len;
    return 0;
}

void tfm_tok_add_specials(tfm_tokenizer *t, const char **specials, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(specials[i]);
        if (len == 0)
            continue;
        int64_t id = tfm_tokenizer_token_id(t, specials[i], len);
        if (id >= 0 && tfm_tok_is_added(t, (uint32_t)id))
            continue;
        tfm_tok_added a = {.content = (char *)specials[i], .len = len,
                           .id = id >= 0 ? (uint32_t)id : t->n_pieces, .special = 1};
        int rc = tfm_tok_add_token(t, &a, "specials", NULL);
        TFM_ASSERT(rc == 0);
    }
}

void tfm_tok_guess_specials(tfm_tokenizer *t)
{
    static const struct {
        const char *name;
        size_t field; /* offset in tfm_tok_specials */
    } names[] = {
#define F(f) offsetof(tfm_tok_specials, f)
        {"[UNK]", F(unk)}, {"<unk>", F(unk)}, {"<|unk|>", F(unk)},
        {"[PAD]", F(pad)}, {"<pad>", F(pad)}, {"<|pad|>", F(pad)},
        {"[CLS]", F(cls)}, {"<cls>", F(cls)},
        {"[SEP]", F(sep)}, {"<sep>", F(sep)},
        {"[MASK]", F(mask)}, {"<mask>", F(mask)},
        {"<|endoftext|>", F(eos)}, {"</s>", F(eos)}, {"<|eos|>", F(eos)},
        {"<|endoftext|>", F(bos)}, {"<s>", F(bos)}, {"<|bos|>", F(bos)},
        {"[CLS]", F(bos)}, {"[SEP]", F(eos)},
#undef F
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int64_t *f = (int64_t *)((char *)&t->specials + names[i].field);
        if (*f >= 0)
            continue;
        int64_t id = tfm_tokenizer_token_id(t, names[i].name, strlen(names[i].name));
        if (id >= 0 && tfm_tok_is_added(t, (uint32_t)id) == 2)
            *f = id;
    }
}

/* ---- the public API ---- */

void tfm_tokenizer_free(tfm_tokenizer *t)
{
    if (!t)
        return;
    if (t->ops && t->ops->free)
        t->ops->free(t->impl);
    for (uint32_t i = 0; i < t->n_pieces; i++)
        free(t->pieces[i]);
    free(t->pieces);
    free(t->piece_lens);
    free(t->hash);
    for (size_t i = 0; i < t->n_added; i++)
        free(t->added[i].content);
    free(t->added);
    free(t->added_flag);
    free(t);
}

tfm_tok_kind tfm_tokenizer_kind(const tfm_tokenizer *t) { return t->kind; }
uint32_t tfm_tokenizer_vocab_size(const tfm_tokenizer *t) { return t->n_pieces; }
const tfm_tok_specials *tfm_tokenizer_specials(const tfm_tokenizer *t) { return &t->specials; }

int tfm_tokenizer_set_wrap(tfm_tokenizer *t, int64_t cls, int64_t sep)
{
    if (cls < 0 || sep < 0 || (uint64_t)cls >= t->n_pieces || (uint64_t)sep >= t->n_pieces)
        return -1;
    t->specials.cls = cls;
    t->specials.sep = sep;
    return 0;
}

const char *tfm_tokenizer_piece(const tfm_tokenizer *t, uint32_t id, size_t *len)
{
    if (id >= t->n_pieces || !t->pieces[id])
        return NULL;
    if (len)
        *len = t->piece_lens[id];
    return t->pieces[id];
}

int64_t tfm_tokenizer_merge_rank(const tfm_tokenizer *t, uint32_t id)
{
    return t->kind == TFM_TOK_BPE ? tfm_bpe_merge_rank(t, id) : -1;
}

tfm_tok_scratch *tfm_tok_scratch_new(const tfm_tokenizer *t)
{
    tfm_tok_scratch *s = tfm_calloc(1, sizeof *s);
    s->tok = t;
    if (t->ops->scratch_new)
        s->impl = t->ops->scratch_new(t);
    return s;
}

void tfm_tok_scratch_free(tfm_tok_scratch *s)
{
    if (!s)
        return;
    if (s->tok->ops->scratch_free)
        s->tok->ops->scratch_free(s->impl);
    tfm_buf_free(&s->norm);
    free(s);
}

/* The added token that starts at s[0..n), longest first; NULL if none. */
static const tfm_tok_added *added_at(const tfm_tokenizer *t, const char *s, size_t n)
{
    const tfm_tok_added *best = NULL;
    for (size_t i = 0; i < t->n_added; i++) {
        const tfm_tok_added *a = &t->added[i];
        if (a->len <= n && (!best || a->len > best->len) && a->content[0] == s[0] &&
            memcmp(a->content, s, a->len) == 0)
            best = a;
    }
    return best;
}

/* Bytes of whitespace just before s[end], not before s[lo]. */
static size_t space_before(const char *s, size_t lo, size_t end)
{
    size_t i = end, adv;
    while (i > lo) {
        size_t j = i - 1;
        while (j > lo && i - j < 4 && ((unsigned char)s[j] & 0xC0) == 0x80)
            j--;
        if (tfm_char_class((const unsigned char *)s + j, i - j, &adv) != TFM_CC_SPACE ||
            adv != i - j)
            break;
        i = j;
    }
    return end - i;
}

/* Bytes of whitespace from s[i] on. */
static size_t space_after(const char *s, size_t i, size_t n)
{
    size_t k = i, adv;
    while (k < n && tfm_char_class((const unsigned char *)s + k, n - k, &adv) == TFM_CC_SPACE)
        k += adv;
    return k - i;
}

/* A word character for single_word added tokens, as HF decides it: the
 * regex class \w (Alphabetic, marks, Nd, Pc, Join_Control). */
static int word_cp(int32_t cp)
{
    if (cp < 0)
        return 0;
    if (cp == 0x200C || cp == 0x200D || (cp >= 0x24B6 && cp <= 0x24E9) ||
        (cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) ||
        (cp >= 0x1F170 && cp <= 0x1F189))
        return 1; /* Join_Control, and the symbols that are Alphabetic */
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return 1;
    case UTF8PROC_CATEGORY_CN: {
        /* letters and digits newer than utf8proc's tables */
        unsigned char u[4];
        size_t l = tfm_utf8_encode((uint32_t)cp, u), adv;
        int k = tfm_char_class(u, l, &adv);
        return k == TFM_CC_LETTER || k == TFM_CC_NUMBER;
    }
    default:
        return 0;
    }
}

/* 1 if the added token at s[i..i+len) stands alone: no word character
 * right before or right after it. */
static int single_word_ok(const char *s, size_t n, size_t i, size_t len)
{
    size_t adv;
    if (i > 0) {
        size_t j = i - 1;
        while (j > 0 && i - j < 4 && ((unsigned char)s[j] & 0xC0) == 0x80)
            j--;
        int32_t cp = tfm_utf8_decode((const unsigned char *)s + j, i - j, &adv);
        if (adv == i - j && word_cp(cp))
            return 0;
    }
    if (i + len < n &&
        word_cp(tfm_utf8_decode((const unsigned char *)s + i + len, n - i - len, &adv)))
        return 0;
    return 1;
}

/* The model's ids of in[0..n) with their spans in it (ops->encode_spans, or
 * each token's decoded bytes one after another). */
static void model_spans(const tfm_tokenizer *t, void *sc, const char *in, size_t n,
                        tfm_ids *out, tfm_ids *st, tfm_ids *en)
{
    if (t->ops->encode_spans) {
        t->ops->encode_spans(t, sc, in, n, out, st, en);
        return;
    }
    size_t i0 = out->len, at = 0;
    t->ops->encode(t, sc, in, n, out);
    tfm_buf piece = {0};
    for (size_t i = i0; i < out->len; i++) {
        tfm_buf_clear(&piece);
        t->ops->decode(t, &out->data[i], 1, &piece);
        size_t b = at + piece.len < n ? at + piece.len : n;
        tfm_ids_push(st, (uint32_t)at);
        tfm_ids_push(en, (uint32_t)b);
        at = b;
    }
    tfm_buf_free(&piece);
}

/* One span without added tokens: normalizer (if the facade owns one), then
 * the model.  With st and en, each id's byte span in text, text[0] being
 * at byte base of the whole input. */
static void encode_span(const tfm_tokenizer *t, tfm_tok_scratch *scratch, const char *text,
                        size_t len, tfm_ids *out, size_t base, tfm_ids *st, tfm_ids *en)
{
    void *sc = scratch ? scratch->impl : NULL;
    size_t i0 = out->len;
    if ((!t->lowercase && !t->nfc) || t->kind == TFM_TOK_WORDPIECE) {
        if (base > 0 && t->ops->encode_after) {
            t->ops->encode_after(t, sc, text, len, out, st, en);
            if (!st)
                return;
        } else if (!st) {
            t->ops->encode(t, sc, text, len, out);
            return;
        } else {
            model_spans(t, sc, text, len, out, st, en);
        }
    } else {
        tfm_buf local = {0}, *b = scratch ? &scratch->norm : &local;
        tfm_buf_clear(b);
        if (!st) {
            if (t->nfc)
                tfm_utf8_nfc_src(text, len, b, NULL);
            else
                tfm_utf8_lower(text, len, b);
            t->ops->encode(t, sc, b->data, b->len, out);
            tfm_buf_free(&local);
            return;
        }
        /* lowercasing may change a character's length (U+0130, U+1E9E),
         * composing too: spans go back through the map of its bytes */
        tfm_ids src = {0};
        if (t->nfc)
            tfm_utf8_nfc_src(text, len, b, &src);
        else
            tfm_utf8_lower_src(text, len, b, &src);
        model_spans(t, sc, b->data, b->len, out, st, en);
        for (size_t i = i0; i < out->len; i++) {
            uint32_t s0 = st->data[i], e0 = en->data[i];
            st->data[i] = s0 < src.len ? src.data[s0] : (uint32_t)len;
            if (e0 > s0) {
                size_t adv, o = src.data[e0 - 1];
                tfm_utf8_decode((const unsigned char *)text + o, len - o, &adv);
                en->data[i] = (uint32_t)(o + adv);
            } else {
                en->data[i] = st->data[i];
            }
        }
        tfm_ids_free(&src);
        tfm_buf_free(&local);
    }
    for (size_t i = i0; i < out->len; i++) {
        st->data[i] += (uint32_t)base;
        en->data[i] += (uint32_t)base;
    }
}

void tfm_tokenizer_encode(const tfm_tokenizer *t, tfm_tok_scratch *scratch, const char *text,
                          size_t len, int split_special, tfm_ids *out)
{
    tfm_tokenizer_encode_spans(t, scratch, text, len, split_special, out, NULL, NULL);
}

void tfm_tokenizer_encode_spans(const tfm_tokenizer *t, tfm_tok_scratch *scratch,
                                const char *text, size_t len, int split_special, tfm_ids *out,
                                tfm_ids *st, tfm_ids *en)
{
    /* a scratch caches one tokenizer's results: using it with another would
     * give wrong ids silently */
    TFM_ASSERT(!scratch || scratch->tok == t);
    TFM_ASSERT(!st || (st->len == out->len && en->len == out->len));
    if (!split_special || t->n_added == 0) {
        encode_span(t, scratch, text, len, out, 0, st, en);
        return;
    }
    /* Added tokens are cut out first (as HF does); the text between them is
     * encoded on its own, so no pre-token spans an added token.  An added
     * token with lstrip/rstrip also takes the whitespace on its left/right. */
    uint8_t first[256] = {0};
    for (size_t i = 0; i < t->n_added; i++)
        first[(unsigned char)t->added[i].content[0]] = 1;
    size_t start = 0;
    for (size_t i = 0; i < len; i++) {
        if (!first[(unsigned char)text[i]])
            continue;
        const tfm_tok_added *a = added_at(t, text + i, len - i);
        if (!a || (a->single_word && !single_word_ok(text, len, i, a->len)))
            continue;
        size_t end = i - (a->lstrip ? space_before(text, start, i) : 0);
        if (end > start)
            encode_span(t, scratch, text + start, end - start, out, start, st, en);
        tfm_ids_push(out, a->id);
        if (st) {
            tfm_ids_push(st, (uint32_t)i);
            tfm_ids_push(en, (uint32_t)(i + a->len));
        }
        size_t next = i + a->len;
        if (a->rstrip)
            next += space_after(text, next, len);
        start = next;
        i = next - 1;
    }
    if (start < len)
        encode_span(t, scratch, text + start, len - start, out, start, st, en);
}

int tfm_tok_pair_truncate(size_t na, size_t nb, size_t max, size_t *keep_a, size_t *keep_b)
{
    *keep_a = na;
    *keep_b = nb;
    if (na + nb <= max)
        return 0;
    size_t lo = na < nb ? na : nb;
    if (2 * lo <= max) {
        /* only the longer one is cut, down to what the shorter leaves */
        if (na > nb)
            *keep_a = max - nb;
        else
            *keep_b = max - na;
    } else {
        /* both reach the same length, then lose a token each in turn, the
         * second first: A keeps the odd one */
        *keep_a = max - max / 2;
        *keep_b = max / 2;
    }
    return 1;
}

int tfm_tokenizer_decode(const tfm_tokenizer *t, const uint32_t *ids, size_t n, int skip_special,
                         tfm_buf *out, tfm_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= t->n_pieces || !t->pieces[ids[i]])
            return tfm_err_set(err, "token id %u is not in the vocabulary (size %u)", ids[i],
                               t->n_pieces);
    if (!skip_special) {
        t->ops->decode(t, ids, n, out);
        return 0;
    }
    uint32_t *keep = tfm_malloc((n + 1) * sizeof *keep);
    size_t k = 0;
    /* sentencepiece's unknown piece is text (unk_surface), as spm_decode
     * shows it: only the control pieces go */
    int64_t unk = t->kind == TFM_TOK_UNIGRAM ? t->specials.unk : -1;
    for (size_t i = 0; i < n; i++)
        if (tfm_tok_is_added(t, ids[i]) != 2 || ids[i] == unk)
            keep[k++] = ids[i];
    t->ops->decode(t, keep, k, out);
    free(keep);
    return 0;
}

/* ---- tokenizer.json ---- */

static int type_is(const tfm_json *node, const char *type)
{
    const tfm_json *x = tfm_json_get(node, "type");
    return x && x->type == TFM_JSON_STRING && strcmp(x->str, type) == 0;
}

const tfm_json *tfm_tok_pre_tokenizer(const tfm_json *root)
{
    const tfm_json *p = tfm_json_get(root, "pre_tokenizer");
    const tfm_json *list = tfm_json_get(p, "pretokenizers");
    if (type_is(p, "Sequence") && list && list->type == TFM_JSON_ARRAY && list->n == 1)
        return list->items[0];
    return p;
}

int tfm_tok_normalizer_from_json(tfm_tokenizer *t, const tfm_json_doc *doc, const tfm_json *root,
                                 tfm_err *err)
{
    const tfm_json *n = tfm_json_get(root, "normalizer");
    if (!n || n->type == TFM_JSON_NULL)
        return 0;
    if (type_is(n, "Lowercase")) {
        t->lowercase = 1;
        return 0;
    }
    if (type_is(n, "NFC")) {
        t->nfc = 1;
        return 0;
    }
    /* a Sequence of Lowercase only (or empty) is the same */
    const tfm_json *list = tfm_json_get(n, "normalizers");
    if (type_is(n, "Sequence") && list && list->type == TFM_JSON_ARRAY) {
        size_t i = 0;
        while (i < list->n && type_is(list->items[i], "Lowercase"))
            i++;
        if (i == list->n) {
            t->lowercase = list->n > 0;
            return 0;
        }
    }
    return tfm_err_at(err, doc->name, n->line, n->col,
                      "unsupported normalizer for this model (null, Lowercase or NFC)");
}

void tfm_tok_normalizer_to_json(const tfm_tokenizer *t, tfm_buf *out)
{
    tfm_buf_puts(out, t->lowercase ? "  \"normalizer\": {\"type\": \"Lowercase\"},\n"
                      : t->nfc   ? "  \"normalizer\": {\"type\": \"NFC\"},\n"
                                 : "  \"normalizer\": null,\n");
}

int tfm_tok_prefix_to_json(const tfm_tokenizer *t, tfm_buf *out)
{
    int64_t p = t->specials.prefix;
    if (p < 0)
        return 0;
    tfm_buf q = {0};
    tfm_buf_put_json_string(&q, t->pieces[p], t->piece_lens[p]);
    int n = (int)q.len;
    tfm_buf_printf(out, "{\"type\": \"TemplateProcessing\", \"single\": "
                        "[{\"SpecialToken\": {\"id\": %.*s, \"type_id\": 0}}, {\"Sequence\": "
                        "{\"id\": \"A\", \"type_id\": 0}}], \"pair\": [{\"SpecialToken\": {\"id\": "
                        "%.*s, \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, "
                        "{\"SpecialToken\": {\"id\": %.*s, \"type_id\": 1}}, {\"Sequence\": "
                        "{\"id\": \"B\", \"type_id\": 1}}], \"special_tokens\": {%.*s: {\"id\": "
                        "%.*s, \"ids\": [%lld], \"tokens\": [%.*s]}}}",
                   n, q.data, n, q.data, n, q.data, n, q.data, n, q.data, (long long)p, n, q.data);
    tfm_buf_free(&q);
    return 1;
}

/* TemplateProcessing's single [SpecialToken X, Sequence A]: X is the
 * prefix (a template of any other shape adds none here: RoBERTa's wrap is
 * convert's). */
static int prefix_from_json(tfm_tokenizer *t, const tfm_json_doc *doc, const tfm_json *root,
                            tfm_err *err)
{
    const tfm_json *pp = tfm_json_get(root, "post_processor");
    const tfm_json *s = type_is(pp, "TemplateProcessing") ? tfm_json_get(pp, "single") : NULL;
    if (!s || s->type != TFM_JSON_ARRAY || s->n != 2 || !tfm_json_get(s->items[1], "Sequence"))
        return 0;
    const tfm_json *id = tfm_json_get(tfm_json_get(s->items[0], "SpecialToken"), "id");
    if (!id || id->type != TFM_JSON_STRING)
        return 0;
    int64_t v = tfm_tokenizer_token_id(t, id->str, id->len);
    if (v < 0)
        return tfm_err_at(err, doc->name, id->line, id->col, "post_processor: the template's "
                          "'%s' is not a token of the tokenizer", id->str);
    t->specials.prefix = v;
    return 0;
}

void tfm_tokenizer_to_json(const tfm_tokenizer *t, tfm_buf *out)
{
    tfm_buf_puts(out, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n"
                      "  \"added_tokens\": [");
    for (size_t i = 0; i < t->n_added; i++) {
        const tfm_tok_added *a = &t->added[i];
        tfm_buf_printf(out, "%s\n    {\"id\": %u, \"content\": ", i ? "," : "", a->id);
        tfm_buf_put_json_string(out, a->content, a->len);
        tfm_buf_printf(out, ", \"single_word\": %s, \"lstrip\": %s, \"rstrip\": %s, "
                            "\"normalized\": %s, \"special\": %s}",
                       a->single_word ? "true" : "false", a->lstrip ? "true" : "false",
                       a->rstrip ? "true" : "false", a->normalized ? "true" : "false",
                       a->special ? "true" : "false");
    }
    tfm_buf_puts(out, t->n_added ? "\n  ],\n" : "],\n");
    t->ops->to_json(t, out);
    tfm_buf_puts(out, "\n}\n");
}

static int get_bool(const tfm_json *obj, const char *key, int def)
{
    const tfm_json *x = tfm_json_get(obj, key);
    return x && x->type == TFM_JSON_BOOL ? x->boolean : def;
}

static int added_from_json(tfm_tokenizer *t, const tfm_json_doc *doc, const tfm_json *arr,
                           tfm_err *err)
{
    if (!arr || arr->type == TFM_JSON_NULL)
        return 0;
    if (tfm_json_expect(doc, arr, TFM_JSON_ARRAY, "added_tokens", err))
        return -1;
    for (size_t i = 0; i < arr->n; i++) {
        const tfm_json *e = arr->items[i];
        if (tfm_json_expect(doc, e, TFM_JSON_OBJECT, "an added token", err))
            return -1;
        const tfm_json *id = tfm_json_get(e, "id"), *c = tfm_json_get(e, "content");
        if (!id || !c)
            return tfm_err_at(err, doc->name, e->line, e->col,
                              "an added token needs \"id\" and \"content\"");
        int64_t v;
        if (tfm_json_get_int(doc, id, "id", 0, TFM_TOK_MAX_ID, &v, err) ||
            tfm_json_expect(doc, c, TFM_JSON_STRING, "content", err))
            return -1;
        tfm_tok_added a = {
            .content = (char *)c->str, .len = c->len, .id = (uint32_t)v,
            .special = get_bool(e, "special", 0), .single_word = get_bool(e, "single_word", 0),
            .lstrip = get_bool(e, "lstrip", 0), .rstrip = get_bool(e, "rstrip", 0),
            .normalized = get_bool(e, "normalized", 0),
        };
        if (tfm_tok_add_token(t, &a, doc->name, err))
            return tfm_err_prefix(err, "%s:%ld:%ld", doc->name, e->line, e->col) ;
    }
    return 0;
}

/* 1 when the normalizer is sentencepiece's in HF's terms: a Sequence
 * holding Prepend("\xe2\x96\x81") or Replace(" ", "\xe2\x96\x81") (LlamaConverter's). */
static int metaspace_normalizer(const tfm_json *root)
{
    const tfm_json *n = tfm_json_get(root, "normalizer");
    const tfm_json *list = type_is(n, "Sequence") ? tfm_json_get(n, "normalizers") : NULL;
    for (size_t i = 0; list && list->type == TFM_JSON_ARRAY && i < list->n; i++) {
        const tfm_json *x = list->items[i], *c = tfm_json_get(x, "prepend");
        if (type_is(x, "Prepend") && c && c->type == TFM_JSON_STRING &&
            !strcmp(c->str, "\xe2\x96\x81"))
            return 1;
        c = tfm_json_get(x, "content");
        if (type_is(x, "Replace") && c && c->type == TFM_JSON_STRING &&
            !strcmp(c->str, "\xe2\x96\x81"))
            return 1;
    }
    return 0;
}

static int from_doc(tfm_tokenizer **out, const tfm_json_doc *doc, tfm_err *err)
{
    const tfm_json *root = doc->root;
    if (tfm_json_expect(doc, root, TFM_JSON_OBJECT, "a tokenizer.json", err))
        return -1;
    const tfm_json *model = tfm_json_get(root, "model");
    if (!model)
        return tfm_err_at(err, doc->name, root->line, root->col,
                          "no \"model\": not a tokenizer.json (for GPT-2's vocab.json + "
                          "merges.txt give their directory)");
    if (tfm_json_expect(doc, model, TFM_JSON_OBJECT, "model", err))
        return -1;
    const tfm_json *type = tfm_json_get(model, "type");
    const tfm_json *pre = tfm_tok_pre_tokenizer(root);
    const tfm_json *ptype = tfm_json_get(pre, "type");
    tfm_tokenizer *t;
    int rc;
    if (type && type->type == TFM_JSON_STRING && strcmp(type->str, "WordPiece") == 0) {
        t = tfm_tok_new(TFM_TOK_WORDPIECE, NULL);
        rc = tfm_tok_wordpiece_from_json(t, doc, root, err);
    } else if (type && type->type == TFM_JSON_STRING && strcmp(type->str, "BPE") == 0) {
        int digits = 0;
        if (tfm_bpe_split_pre_tokenizer(doc, pre, &digits, err) < 0)
            return -1;
        if (digits || (ptype && ptype->type == TFM_JSON_STRING &&
                       strcmp(ptype->str, "ByteLevel") == 0)) {
            t = tfm_tok_new(TFM_TOK_BPE, &tfm_bpe_ops);
            rc = tfm_bpe_from_json(t, doc, root, err);
        } else if (ptype && ptype->type == TFM_JSON_STRING && strcmp(ptype->str, "Metaspace") == 0) {
            /* sentencepiece's BPE (pieces merged by score, as spm_encode) */
            t = tfm_tok_new(TFM_TOK_UNIGRAM, NULL);
            rc = tfm_tok_unigram_from_json(t, doc, root, err);
        } else if ((!pre || pre->type == TFM_JSON_NULL) && metaspace_normalizer(root)) {
            /* the same as older converters write it (Llama 2's): the
             * normalizer puts the "\xe2\x96\x81"s in */
            t = tfm_tok_new(TFM_TOK_UNIGRAM, NULL);
            rc = tfm_tok_unigram_from_json(t, doc, root, err);
        } else if (!pre || pre->type == TFM_JSON_NULL) {
            t = tfm_tok_new(TFM_TOK_CHAR, &tfm_char_ops);
            rc = tfm_char_from_json(t, doc, root, err);
        } else {
            const tfm_json *at = ptype ? ptype : pre;
            return tfm_err_at(err, doc->name, at->line, at->col,
                              "unsupported pre_tokenizer for a BPE model (ByteLevel, Llama 3's "
                              "or Qwen2's Split then ByteLevel, Metaspace for sentencepiece's "
                              "BPE, or null for a character model)");
        }
    } else if (type && type->type == TFM_JSON_STRING && strcmp(type->str, "Unigram") == 0) {
        t = tfm_tok_new(TFM_TOK_UNIGRAM, NULL);
        rc = tfm_tok_unigram_from_json(t, doc, root, err);
    } else {
        const tfm_json *at = type ? type : model;
        return tfm_err_at(err, doc->name, at->line, at->col,
                          "unsupported model type (BPE, WordPiece or Unigram)");
    }
    if (rc == 0)
        rc = added_from_json(t, doc, tfm_json_get(root, "added_tokens"), err);
    if (rc == 0)
        rc = prefix_from_json(t, doc, root, err);
    if (rc) {
        tfm_tokenizer_free(t);
        return -1;
    }
    tfm_tok_guess_specials(t);
    *out = t;
    return 0;
}

int tfm_tokenizer_from_json(tfm_tokenizer **out, const char *json, size_t len, const char *name,
                            tfm_err *err)
{
    tfm_json_doc doc;
    if (tfm_json_parse(&doc, json, len, name, 0, err))
        return -1;
    int rc = from_doc(out, &doc, err);
    tfm_json_doc_free(&doc);
    return rc;
}

static int exists(const char *dir, const char *name, tfm_buf *path)
{
    tfm_buf_clear(path);
    tfm_buf_printf(path, "%s/%s", dir, name);
    struct stat st;
    return stat(tfm_buf_cstr(path), &st) == 0 && S_ISREG(st.st_mode);
}

static int load_gpt2(tfm_tokenizer **out, const char *vocab, const char *merges, tfm_err *err)
{
    tfm_tokenizer *t = tfm_tok_new(TFM_TOK_BPE, &tfm_bpe_ops);
    if (tfm_bpe_from_gpt2_files(t, vocab, merges, err)) {
        tfm_tokenizer_free(t);
        return -1;
    }
    /* GPT-2's <|endoftext|> is a special token (HF lists it in added_tokens),
     * and so are RoBERTa's and BART's five when the vocabulary holds them (HF's
     * tokenizer classes add them as special from the same two files). */
    static const char *const specials[] = {"<|endoftext|>", "<s>", "<pad>", "</s>", "<unk>",
                                           "<mask>"};
    for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) {
        size_t len = strlen(specials[i]);
        int64_t id = tfm_tokenizer_token_id(t, specials[i], len);
        if (id < 0)
            continue;
        tfm_tok_added a = {.content = (char *)specials[i], .len = len, .id = (uint32_t)id,
                           .special = 1};
        tfm_tok_add_token(t, &a, vocab, NULL);
    }
    tfm_tok_guess_specials(t);
    *out = t;
    return 0;
}

static int ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* A model file (safetensors) carries its tokenizer.json as the
 * "tokenizer" string of the header's __metadata__.  Only the header is read
 * here (validated: length within the file and at most 100 MB). */
static int load_safetensors(tfm_tokenizer **out, const char *path, tfm_err *err)
{
    tfm_map m;
    if (tfm_map_open(&m, path, err))
        return -1;
    uint64_t n = 0;
    for (int i = 0; i < 8 && (size_t)i < m.size; i++)
        n |= (uint64_t)m.data[i] << (8 * i);
    int rc = -1;
    if (m.size < 8 || n > m.size - 8 || n > (100u << 20)) {
        tfm_err_set(err, "%s: not a safetensors file (bad header length)", path);
        goto done;
    }
    tfm_json_doc doc;
    if (tfm_json_parse(&doc, (const char *)m.data + 8, (size_t)n, path, 0, err))
        goto done;
    const tfm_json *tj = tfm_json_get(tfm_json_get(doc.root, "__metadata__"), "tokenizer");
    if (!tj || tj->type != TFM_JSON_STRING) {
        tfm_err_set(err, "%s: the model file holds no tokenizer (__metadata__.tokenizer)", path);
    } else {
        tfm_buf name = {0};
        tfm_buf_printf(&name, "%s:tokenizer", path);
        rc = tfm_tokenizer_from_json(out, tj->str, tj->len, tfm_buf_cstr(&name), err);
        tfm_buf_free(&name);
    }
    tfm_json_doc_free(&doc);
done:
    tfm_map_close(&m);
    return rc;
}

int tfm_tokenizer_load(tfm_tokenizer **out, const char *path, tfm_err *err)
{
    *out = NULL;
    if (tfm_is_dir(path)) {
        tfm_buf a = {0}, b = {0};
        int rc;
        if (exists(path, "tokenizer.json", &a)) {
            rc = tfm_tokenizer_load(out, tfm_buf_cstr(&a), err);
        } else if (exists(path, "vocab.json", &a) && exists(path, "merges.txt", &b)) {
            rc = load_gpt2(out, tfm_buf_cstr(&a), tfm_buf_cstr(&b), err);
        } else if (exists(path, "encoder.json", &a) && exists(path, "vocab.bpe", &b)) {
            rc = load_gpt2(out, tfm_buf_cstr(&a), tfm_buf_cstr(&b), err);
        } else if (exists(path, "vocab.txt", &a) || exists(path, "spiece.model", &a)) {
            rc = tfm_tokenizer_load(out, tfm_buf_cstr(&a), err);
        } else {
            rc = tfm_err_set(err, "%s: no tokenizer.json, vocab.json + merges.txt, "
                                  "encoder.json + vocab.bpe, vocab.txt or spiece.model in this "
                                  "directory", path);
        }
        tfm_buf_free(&a);
        tfm_buf_free(&b);
        return rc;
    }
    if (ends_with(path, ".safetensors"))
        return load_safetensors(out, path, err);
    if (ends_with(path, "merges.txt") || ends_with(path, "vocab.bpe"))
        return tfm_err_set(err, "%s: GPT-2 merges alone are not a tokenizer: give the directory "
                                "holding them with vocab.json (or encoder.json)", path);
    if (ends_with(path, ".model")) {
        tfm_tokenizer *t = tfm_tok_new(TFM_TOK_UNIGRAM, NULL);
        if (tfm_tok_unigram_from_spm(t, path, err)) {
            tfm_tokenizer_free(t);
            return -1;
        }
        *out = t;
        return 0;
    }
    if (ends_with(path, ".txt")) {
        tfm_tokenizer *t = tfm_tok_new(TFM_TOK_WORDPIECE, NULL);
        if (tfm_tok_wordpiece_from_vocab_txt(t, path, err)) {
            tfm_tokenizer_free(t);
            return -1;
        }
        *out = t;
        return 0;
    }
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err))
        return -1;
    int rc = from_doc(out, &doc, err);
    tfm_json_doc_free(&doc);
    return rc;
}

/* ---- training ---- */

struct tfm_tok_trainer {
    const tfm_tok_trainer_ops *ops;
    void *impl;
    tfm_tok_train_opts opts;
};

tfm_tok_trainer *tfm_tok_trainer_new(const tfm_tok_train_opts *opts)
{
    tfm_tok_trainer *t = tfm_calloc(1, sizeof *t);
    t->opts = *opts;
    switch (opts->kind) {
    case TFM_TOK_BPE: t->ops = &tfm_bpe_trainer_ops; break;
    case TFM_TOK_CHAR: t->ops = &tfm_char_trainer_ops; break;
    case TFM_TOK_WORDPIECE: t->ops = &tfm_tok_wordpiece_trainer_ops; break;
    case TFM_TOK_UNIGRAM: t->ops = &tfm_unigram_trainer_ops; break;
    }
    TFM_ASSERT(t->ops);
    t->impl = t->ops->create(&t->opts);
    return t;
}

void tfm_tok_trainer_feed(tfm_tok_trainer *t, const char *text, size_t len)
{
    t->ops->feed(t->impl, text, len);
}

int tfm_tok_trainer_finish(tfm_tok_trainer *t, tfm_tokenizer **out, tfm_err *err)
{
    return t->ops->finish(t->impl, &t->opts, out, err);
}

uint64_t tfm_tok_trainer_skipped(const tfm_tok_trainer *t, uint64_t *bytes)
{
    *bytes = 0;
    return t->ops->skipped ? t->ops->skipped(t->impl, bytes) : 0;
}

void tfm_tok_trainer_free(tfm_tok_trainer *t)
{
    if (!t)
        return;
    t->ops->free(t->impl);
    free(t);
}

size_t tfm_tokenizer_dropped(const tfm_tokenizer *tok, const char *text, size_t len,
                             size_t *first)
{
    return tok->ops == &tfm_char_ops ? tfm_char_dropped(tok, text, len, first) : 0;
}

const char *tfm_tok_describe_char(const char *text, size_t len, char buf[64])
{
    size_t adv;
    int32_t cp = tfm_utf8_decode((const unsigned char *)text, len, &adv);
    if (cp < 0)
        snprintf(buf, 64, "byte 0x%02X", (unsigned char)text[0]);
    else if (cp < 0x20 || cp == 0x7f)
        snprintf(buf, 64, "U+%04X", (unsigned)cp);
    else
        snprintf(buf, 64, "'%.*s' (U+%04X)", (int)adv, text, (unsigned)cp);
    return buf;
}

int tfm_tokenizer_check_kept(const tfm_tokenizer *tok, const char *text, size_t len,
                             tfm_err *err)
{
    size_t first = 0;
    if (!tfm_tokenizer_dropped(tok, text, len, &first))
        return 0;
    char c[64];
    return tfm_err_set(err, "%s is not in the vocabulary, which has no unknown token",
                       tfm_tok_describe_char(text + first, len - first, c));
}

/* ---- tokenizer_config.json's settings (convert/hf_tokenizer.c) ---- */

int tfm_tokenizer_set_bert_case(tfm_tokenizer *tok, int lowercase, int strip_accents,
                                int chinese_chars)
{
    if (tok->kind != TFM_TOK_WORDPIECE)
        return -1;
    /* the normalizer is the tokenizer's own, and encoding reads it afresh */
    tfm_bert_norm *n = (tfm_bert_norm *)tfm_wordpiece_norm(tok->impl);
    n->lowercase = lowercase;
    n->strip_accents = strip_accents;
    n->handle_chinese_chars = chinese_chars;
    return 0;
}

int tfm_tokenizer_add_extra_ids(tfm_tokenizer *tok, uint32_t n, const char *what, tfm_err *err)
{
    uint32_t base = tok->n_pieces;
    for (uint32_t k = n; k-- > 0;) {
        char s[32];
        int l = snprintf(s, sizeof s, "<extra_id_%u>", k);
        int64_t have = tfm_tokenizer_token_id(tok, s, (size_t)l);
        if (have >= 0 && tfm_tok_is_added(tok, (uint32_t)have))
            continue;
        tfm_tok_added a = {.content = s, .len = (size_t)l, .id = base + (n - 1 - k),
                           .special = 1};
        if (have >= 0)
            a.id = (uint32_t)have; /* the model's own sentinel piece */
        if (tfm_tok_add_token(tok, &a, what, err) < 0)
            return -1;
    }
    return 0;
}
