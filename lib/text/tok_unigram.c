/* The facade's adapter over text/unigram.h: sentencepiece .model files and
 * HF tokenizer.json Unigram models, subword sampling and n-best.
 *
 * Piece types the facade cannot hold itself map onto added tokens: control
 * pieces and the unknown piece are special added tokens (HF lists <pad>,
 * </s>, <unk> so), user-defined symbols are added tokens that are not
 * special and not normalized.  Reading a tokenizer.json reverses that. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "text/tok_internal.h"
#include "text/unigram.h"

static void uni_encode(const tfm_tokenizer *tok, void *scratch, const char *text, size_t len,
                       tfm_ids *out)
{
    if (scratch)
        tfm_unigram_encode_with(tok->impl, scratch, text, len, out, NULL, NULL);
    else
        tfm_unigram_encode(tok->impl, text, len, out, NULL, NULL);
}

static void uni_encode_spans(const tfm_tokenizer *tok, void *scratch, const char *text,
                             size_t len, tfm_ids *out, tfm_ids *start, tfm_ids *end)
{
    if (scratch)
        tfm_unigram_encode_with(tok->impl, scratch, text, len, out, start, end);
    else
        tfm_unigram_encode(tok->impl, text, len, out, start, end);
}

static void uni_encode_after(const tfm_tokenizer *tok, void *scratch, const char *text,
                             size_t len, tfm_ids *out, tfm_ids *start, tfm_ids *end)
{
    tfm_unigram_encode_after(tok->impl, scratch, text, len, out, start, end);
}

static void *uni_scratch_new(const tfm_tokenizer *tok)
{
    (void)tok;
    return tfm_uni_work_new();
}

static void uni_scratch_free(void *scratch)
{
    tfm_uni_work_free(scratch);
}

static int literal(const tfm_tokenizer *tok, uint32_t id)
{
    return id >= tfm_unigram_size(tok->impl) ||
           (tfm_unigram_type(tok->impl, id) == TFM_UNI_CONTROL && tfm_tok_is_added(tok, id));
}

static void uni_decode(const tfm_tokenizer *tok, const uint32_t *ids, size_t n, tfm_buf *out)
{
    /* added tokens past the model's pieces decode as their text, and so do
     * control pieces (</s>, T5's <extra_id_N>) unless the caller dropped the
     * specials: spm_decode leaves them out, HF's decode shows them */
    size_t o0 = out->len;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && !literal(tok, ids[j]))
            j++;
        tfm_unigram_decode_part(tok->impl, ids + i, j - i, out->len == o0, out);
        for (; j < n && literal(tok, ids[j]); j++)
            tfm_buf_append(out, tok->pieces[ids[j]], tok->piece_lens[ids[j]]);
        i = j;
    }
}

/* ---- base64, for the Precompiled normalizer's charsmap ---- */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void b64_put(tfm_buf *out, const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)s[i] << 16 | (i + 1 < n ? (uint32_t)s[i + 1] << 8 : 0) |
                     (i + 2 < n ? s[i + 2] : 0);
        char q[4] = {B64[v >> 18], B64[(v >> 12) & 63], i + 1 < n ? B64[(v >> 6) & 63] : '=',
                     i + 2 < n ? B64[v & 63] : '='};
        tfm_buf_append(out, q, 4);
    }
}

/* -1 on a character outside the alphabet or a bad length. */
static int b64_get(const char *s, size_t n, tfm_buf *out)
{
    uint32_t v = 0;
    int bits = 0;
    size_t pad = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '=') {
            pad++;
            continue;
        }
        const char *p = s[i] ? memchr(B64, s[i], 64) : NULL;
        if (!p || pad)
            return -1;
        v = v << 6 | (uint32_t)(p - B64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            tfm_buf_putc(out, (char)(v >> bits));
        }
    }
    return pad > 2 ? -1 : 0;
}

/* ---- tokenizer.json ---- */

/* split false: sentencepiece segments the whole text (a piece may hold
 * "\xe2\x96\x81" inside, split_by_whitespace=false); the normalizer has done the rest. */
static void metaspace_json(const char *scheme, int split, tfm_buf *out)
{
    tfm_buf_printf(out, "{\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", "
                        "\"prepend_scheme\": \"%s\", \"split\": %s}", scheme,
                   split ? "true" : "false");
}

/* HF's converter's decoder (transformers' LlamaConverter): byte pieces as
 * bytes, the leading spaces dropped as spm_decode drops them. */
static void decoder_json(const tfm_uni_norm_spec *sp, tfm_buf *out)
{
    tfm_buf_puts(out, "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", "
                      "\"pattern\": {\"String\": \"\xe2\x96\x81\"}, \"content\": \" \"}, "
                      "{\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}");
    /* with remove_extra_whitespaces every leading space goes (a text can
     * only start with several by a literal "▁" under identity rules) */
    if (sp->remove_extra_whitespaces)
        tfm_buf_puts(out, ", {\"type\": \"Strip\", \"content\": \" \", \"start\": 65536, "
                          "\"stop\": 0}");
    else if (sp->add_dummy_prefix)
        tfm_buf_puts(out, ", {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, "
                          "\"stop\": 0}");
    tfm_buf_puts(out, "]}");
}

/* T5's template: </s> after each sequence, as --add-special does; a read
 * template's first token (Llama 2's <s>) instead when there is one. */
static void post_processor_json(const tfm_tokenizer *tok, tfm_buf *out)
{
    int64_t eos = tok->specials.eos;
    if (tfm_tok_prefix_to_json(tok, out))
        return;
    if (eos < 0) {
        tfm_buf_puts(out, "null");
        return;
    }
    size_t len;
    const char *p = tfm_tokenizer_piece(tok, (uint32_t)eos, &len);
    tfm_buf b = {0};
    tfm_buf_put_json_string(&b, p, len);
    const char *e = b.data;
    int n = (int)b.len;
    tfm_buf_printf(out, "{\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": "
                        "{\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": %.*s, "
                        "\"type_id\": 0}}], \"pair\": [{\"Sequence\": {\"id\": \"A\", \"type_id\": "
                        "0}}, {\"SpecialToken\": {\"id\": %.*s, \"type_id\": 0}}, {\"Sequence\": "
                        "{\"id\": \"B\", \"type_id\": 0}}, {\"SpecialToken\": {\"id\": %.*s, "
                        "\"type_id\": 0}}], \"special_tokens\": {%.*s: {\"id\": %.*s, \"ids\": "
                        "[%lld], \"tokens\": [%.*s]}}}",
                   n, e, n, e, n, e, n, e, n, e, (long long)eos, n, e);
    tfm_buf_free(&b);
}

/* The computed normalizer's nmt rules as HF Replace regexes (unigram.h). */
static const char NMT_SPACES[] = "[\t\n\f\r\xe1\x9a\x80\xe2\x80\x8b\xe2\x80\x8c\xe2\x80\x8e"
                                 "\xe2\x80\x8f\xe2\x80\xa8\xe2\x80\xa9\xe2\x96\x81\xef\xbb\xbf"
                                 "\xef\xbf\xbd]";
static const char NMT_DROPPED[] = "[\x01-\x08\x0b\x0e-\x1f\x7f\xc2\x8f\xc2\x9f]";

static void replace_json(tfm_buf *out, const char *regex, const char *content)
{
    tfm_buf_puts(out, "{\"type\": \"Replace\", \"pattern\": {\"Regex\": ");
    tfm_buf_put_json_string(out, regex, strlen(regex));
    tfm_buf_puts(out, "}, \"content\": ");
    tfm_buf_put_json_string(out, content, strlen(content));
    tfm_buf_putc(out, '}');
}

/* sentencepiece's BPE as HF writes it (a BPE model under Metaspace): the
 * vocab by id and, for the pieces merges can make, best score first, each
 * split into two vocab pieces as a merge.  Reading it back gives each piece
 * the rank of its first merge as its score, which keeps the order of the
 * scores (spm_train's are all distinct) but not their values. */
typedef struct scored {
    float score;
    uint32_t id;
} scored;

static int by_score(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    return x->score > y->score ? -1 : x->score < y->score ? 1 : x->id < y->id ? -1 : x->id > y->id;
}

static int mergeable(tfm_uni_type ty)
{
    return ty == TFM_UNI_NORMAL || ty == TFM_UNI_USER || ty == TFM_UNI_UNUSED;
}

static void bpe_model_json(const tfm_tokenizer *tok, tfm_buf *out)
{
    const tfm_unigram *u = tok->impl;
    uint32_t V = tfm_unigram_size(u);
    size_t ul;
    const char *unk = tfm_unigram_piece(u, (uint32_t)tfm_unigram_unk_id(u), &ul);
    tfm_buf_puts(out, ",\n  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": ");
    tfm_buf_put_json_string(out, unk, ul);
    tfm_buf_printf(out, ", \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, "
                        "\"fuse_unk\": true, \"byte_fallback\": %s, \"vocab\": {",
                   tfm_unigram_byte_fallback(u) ? "true" : "false");
    for (uint32_t id = 0; id < V; id++) {
        size_t len;
        const char *p = tfm_unigram_piece(u, id, &len);
        tfm_buf_puts(out, id ? ",\n    " : "\n    ");
        tfm_buf_put_json_string(out, p, len);
        tfm_buf_printf(out, ": %u", id);
    }
    tfm_buf_puts(out, "\n  }, \"merges\": [");
    scored *order = tfm_malloc((V + 1) * sizeof *order);
    for (uint32_t id = 0; id < V; id++)
        order[id] = (scored){tfm_unigram_score(u, id), id};
    qsort(order, V, sizeof *order, by_score);
    int first = 1;
    for (uint32_t k = 0; k < V; k++) {
        size_t len;
        const char *p = tfm_unigram_piece(u, order[k].id, &len);
        if (!mergeable(tfm_unigram_type(u, order[k].id)))
            continue;
        for (size_t i = 1; i < len; i++) {
            if (((unsigned char)p[i] & 0xc0) == 0x80)
                continue; /* inside a character */
            if (tfm_tokenizer_token_id(tok, p, i) < 0 ||
                tfm_tokenizer_token_id(tok, p + i, len - i) < 0)
                continue;
            tfm_buf_puts(out, first ? "\n    [" : ",\n    [");
            tfm_buf_put_json_string(out, p, i);
            tfm_buf_puts(out, ", ");
            tfm_buf_put_json_string(out, p + i, len - i);
            tfm_buf_putc(out, ']');
            first = 0;
        }
    }
    free(order);
    tfm_buf_puts(out, "\n  ]}");
}

static void uni_to_json(const tfm_tokenizer *tok, tfm_buf *out)
{
    const tfm_unigram *u = tok->impl;
    const tfm_uni_norm_spec *sp = tfm_unigram_norm_spec(u);
    /* sentencepiece's normalization in HF's terms, all of it in the
     * normalizer (as transformers' LlamaConverter writes it): the charsmap,
     * what remove_extra_whitespaces does (spaces only: HF's Strip would
     * take tabs too), the dummy prefix (Prepend: Metaspace would not
     * prepend to a text that starts with a space), spaces as "▁".  User
     * symbols of a .model are vocabulary pieces with the score that
     * sentencepiece's lattice gives them, so HF's Unigram finds them where
     * sentencepiece does; ones that are added tokens (read so from a
     * tokenizer.json) HF cuts out before normalizing: Metaspace then adds
     * the dummy prefix ("first"), which HF misses before a symbol that
     * starts the text. */
    /* user symbols that are added tokens (read from a tokenizer.json that
     * lists them so), which HF cuts out of the text before normalizing */
    int user = 0;
    for (uint32_t id = 0; id < tfm_unigram_size(u); id++)
        user |= tfm_unigram_type(u, id) == TFM_UNI_USER && tfm_tok_is_added(tok, id);
    /* with the spaces kept, sentencepiece adds the dummy prefix even to a
     * text the normalizer empties ("\x7f"): so before the charsmap, which
     * makes it a space that the last Replace makes "▁" again */
    int prepend = sp->add_dummy_prefix && !user && !sp->prefix_unless_space;
    int prepend_first = prepend && !sp->remove_extra_whitespaces;
    int k = 0;
    tfm_buf_puts(out, "  \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [");
    /* ALBERT's, before the charsmap; the last Replace always follows */
    if (sp->quotes) {
        tfm_buf_puts(out, "{\"type\": \"Replace\", \"pattern\": {\"String\": \"``\"}, "
                          "\"content\": \"\\\"\"}, ");
        tfm_buf_puts(out, "{\"type\": \"Replace\", \"pattern\": {\"String\": \"''\"}, "
                          "\"content\": \"\\\"\"}, ");
    }
    if (sp->nfkd)
        tfm_buf_puts(out, "{\"type\": \"NFKD\"}, ");
    if (sp->strip_accents)
        tfm_buf_puts(out, "{\"type\": \"StripAccents\"}, ");
    if (sp->lowercase)
        tfm_buf_puts(out, "{\"type\": \"Lowercase\"}, ");
    if (prepend_first)
        tfm_buf_printf(out, "{\"type\": \"Prepend\", \"prepend\": \"\xe2\x96\x81\"}%s",
                       sp->charsmap_len || sp->nmt || sp->nfkc ? ", " : "");
    if (sp->charsmap_len) {
        tfm_buf_puts(out, "{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"");
        b64_put(out, sp->charsmap, sp->charsmap_len);
        tfm_buf_puts(out, "\"}");
        k++;
    } else {
        if (sp->nmt) {
            replace_json(out, NMT_SPACES, " ");
            tfm_buf_puts(out, ", ");
            replace_json(out, NMT_DROPPED, "");
            k++;
        }
        if (sp->nfkc)
            tfm_buf_puts(out, k++ ? ", {\"type\": \"NFKC\"}" : "{\"type\": \"NFKC\"}");
    }
    k += prepend_first;
    if (sp->remove_extra_whitespaces) {
        if (k++)
            tfm_buf_puts(out, ", ");
        /* with user symbols, SpmConverter's form: leading spaces become the
         * "▁" Metaspace then sees and adds no other */
        replace_json(out, user && sp->add_dummy_prefix ? " +$" : "^ +| +$", "");
        tfm_buf_puts(out, ", ");
        replace_json(out, " {2,}", user && sp->add_dummy_prefix ? "\xe2\x96\x81" : " ");
    }
    if (prepend && !prepend_first)
        tfm_buf_printf(out, "%s{\"type\": \"Prepend\", \"prepend\": \"\xe2\x96\x81\"}",
                       k++ ? ", " : "");
    tfm_buf_printf(out, "%s{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, "
                        "\"content\": \"\xe2\x96\x81\"}", k++ ? ", " : "");
    tfm_buf_puts(out, "]},\n  \"pre_tokenizer\": ");
    metaspace_json(!sp->add_dummy_prefix ? "never"
                   : user || sp->prefix_first ? "first"
                   : sp->prefix_unless_space ? "always" : "never",
                   sp->split_spaces, out);
    tfm_buf_puts(out, ",\n  \"post_processor\": ");
    post_processor_json(tok, out);
    tfm_buf_puts(out, ",\n  \"decoder\": ");
    decoder_json(sp, out);
    if (tfm_unigram_is_bpe(u)) {
        bpe_model_json(tok, out);
        return;
    }
    tfm_buf_printf(out, ",\n  \"model\": {\"type\": \"Unigram\", \"unk_id\": %lld, "
                        "\"byte_fallback\": %s, \"vocab\": [",
                   (long long)tfm_unigram_unk_id(u), tfm_unigram_byte_fallback(u) ? "true" : "false");
    uint32_t V = tfm_unigram_size(u);
    for (uint32_t id = 0; id < V; id++) {
        size_t len;
        const char *p = tfm_unigram_piece(u, id, &len);
        tfm_buf_puts(out, id ? ",\n    [" : "\n    [");
        tfm_buf_put_json_string(out, p, len);
        /* 9 significant digits: a float32 score reads back bit for bit */
        tfm_buf_puts(out, ", ");
        /* sentencepiece scores a user symbol length x max_score - 0.1 in
         * the lattice, max_score starting at FLT_MIN: -0.1 */
        int lattice = tfm_unigram_type(u, id) == TFM_UNI_USER && !tfm_tok_is_added(tok, id);
        tfm_buf_put_json_double(out, 9, lattice ? -0.1f : tfm_unigram_score(u, id));
        tfm_buf_putc(out, ']');
    }
    tfm_buf_puts(out, "\n  ]}");
}

static void uni_free(void *impl)
{
    tfm_unigram_free(impl);
}

static const tfm_tok_ops uni_ops = {
    .encode = uni_encode,
    .encode_spans = uni_encode_spans,
    .encode_after = uni_encode_after,
    .decode = uni_decode,
    .to_json = uni_to_json,
    .scratch_new = uni_scratch_new,
    .scratch_free = uni_scratch_free,
    .free = uni_free,
};

const char *tfm_tokenizer_hf_caveat(const tfm_tokenizer *tok)
{
    if (tok->ops != &uni_ops || !tfm_unigram_norm_spec(tok->impl)->add_dummy_prefix)
        return NULL;
    const tfm_unigram *u = tok->impl;
    for (uint32_t id = 0; id < tfm_unigram_size(u); id++)
        if (tfm_unigram_type(u, id) == TFM_UNI_USER && tfm_tok_is_added(tok, id))
            return "HF tokenizers cut user-defined symbols (added tokens) out of the text "
                   "before the dummy prefix is added, so a text that starts with one (or, "
                   "with remove_extra_whitespaces off, with a space) gets no \"\xe2\x96\x81\" "
                   "before it there and other ids than sentencepiece's";
    return NULL;
}

/* The model's pieces into the facade's table; control and unknown pieces
 * become special added tokens, user-defined symbols added tokens. */
int tfm_tok_unigram_adopt(tfm_tokenizer *tok, tfm_unigram *u, const char *name, tfm_err *err)
{
    tok->ops = &uni_ops;
    tok->impl = u;
    uint32_t V = tfm_unigram_size(u);
    for (uint32_t id = 0; id < V; id++) {
        size_t len;
        const char *p = tfm_unigram_piece(u, id, &len);
        if (tfm_tok_vocab_set(tok, id, p, len, name, err))
            return -1;
    }
    /* a Unigram model's user-defined symbols stay the model's: its lattice
     * finds them, as sentencepiece's does (an added token would be cut out
     * of the text first, and HF would then miss the "▁" before one); HF's
     * BPE has no such pieces, only added tokens */
    int bpe = tfm_unigram_is_bpe(u);
    for (uint32_t id = 0; id < V; id++) {
        tfm_uni_type ty = tfm_unigram_type(u, id);
        if (ty != TFM_UNI_CONTROL && ty != TFM_UNI_UNKNOWN && (ty != TFM_UNI_USER || !bpe))
            continue;
        size_t len;
        const char *p = tfm_unigram_piece(u, id, &len);
        /* normalized: HF finds the symbol in the normalized text, past the
         * spaces the normalizer has handled (as sentencepiece) */
        tfm_tok_added a = {.content = (char *)p, .len = len, .id = id,
                           .special = ty != TFM_UNI_USER, .normalized = ty == TFM_UNI_USER};
        if (tfm_tok_add_token(tok, &a, name, err))
            return -1;
    }
    return 0;
}

int tfm_tok_unigram_from_spm(tfm_tokenizer *tok, const char *path, tfm_err *err)
{
    tfm_map m;
    if (tfm_map_open(&m, path, err))
        return -1;
    tfm_unigram *u;
    int rc = tfm_unigram_from_spm(&u, m.data, m.size, path, err);
    tfm_map_close(&m);
    if (rc)
        return -1;
    if (tfm_tok_unigram_adopt(tok, u, path, err))
        return -1;
    tfm_tok_guess_specials(tok);
    return 0;
}

static int type_is(const tfm_json *node, const char *type)
{
    const tfm_json *x = tfm_json_get(node, "type");
    return x && x->type == TFM_JSON_STRING && strcmp(x->str, type) == 0;
}

static int str_is(const tfm_json *x, const char *s)
{
    return x && x->type == TFM_JSON_STRING && strcmp(x->str, s) == 0;
}

/* One normalizer of the Sequence: Precompiled, Strip, Replace of " {2,}". */
static int norm_item(const tfm_json_doc *doc, const tfm_json *n, tfm_uni_norm_spec *sp,
                     int *prepend, tfm_buf *charsmap, tfm_err *err)
{
    if (type_is(n, "Precompiled")) {
        const tfm_json *c = tfm_json_get(n, "precompiled_charsmap");
        if (!c || c->type == TFM_JSON_NULL)
            return 0;
        if (tfm_json_expect(doc, c, TFM_JSON_STRING, "precompiled_charsmap", err))
            return -1;
        tfm_buf_clear(charsmap);
        if (b64_get(c->str, c->len, charsmap))
            return tfm_err_at(err, doc->name, c->line, c->col,
                              "precompiled_charsmap is not base64");
        sp->charsmap = (const unsigned char *)charsmap->data;
        sp->charsmap_len = charsmap->len;
        return 0;
    }
    if (type_is(n, "NFKC")) {
        sp->nfkc = 1;
        return 0;
    }
    /* AlbertTokenizer's (its normalizers' order: unigram.h) */
    if (type_is(n, "NFKD") || type_is(n, "StripAccents") || type_is(n, "Lowercase")) {
        *(type_is(n, "NFKD") ? &sp->nfkd : type_is(n, "Lowercase") ? &sp->lowercase
                                                                   : &sp->strip_accents) = 1;
        return 0;
    }
    const tfm_json *qs = tfm_json_get(tfm_json_get(n, "pattern"), "String");
    if (type_is(n, "Replace") && (str_is(qs, "``") || str_is(qs, "''")) &&
        str_is(tfm_json_get(n, "content"), "\"")) {
        sp->quotes = 1; /* both come together (AlbertTokenizer's) */
        return 0;
    }
    const tfm_json *rx = tfm_json_get(tfm_json_get(n, "pattern"), "Regex");
    if (type_is(n, "Replace") && (str_is(rx, NMT_SPACES) || str_is(rx, NMT_DROPPED))) {
        sp->nmt = 1;
        return 0;
    }
    if (type_is(n, "Strip")) {
        sp->remove_extra_whitespaces = 1;
        return 0;
    }
    const tfm_json *pat = tfm_json_get(n, "pattern");
    if (type_is(n, "Replace") && (str_is(tfm_json_get(pat, "Regex"), " {2,}") ||
                                  str_is(tfm_json_get(pat, "Regex"), " +$") ||
                                  str_is(tfm_json_get(pat, "Regex"), "^ +| +$") ||
                                  str_is(tfm_json_get(pat, "String"), "  "))) {
        sp->remove_extra_whitespaces = 1;
        return 0;
    }
    /* LlamaConverter's: the dummy prefix, and spaces as "\xe2\x96\x81" (which
     * Metaspace does too) */
    if (type_is(n, "Prepend") && str_is(tfm_json_get(n, "prepend"), "\xe2\x96\x81")) {
        *prepend = 1;
        return 0;
    }
    if (type_is(n, "Replace") && str_is(tfm_json_get(pat, "String"), " ") &&
        str_is(tfm_json_get(n, "content"), "\xe2\x96\x81"))
        return 0;
    return tfm_err_at(err, doc->name, n->line, n->col,
                      "unsupported normalizer for a Unigram model (Precompiled, NFKC, Strip, "
                      "Prepend of \"\xe2\x96\x81\", Replace of \" {2,}\", \" +$\", \" \" or of "
                      "sentencepiece's nmt characters; ALBERT's Replace of quotes, NFKD, "
                      "StripAccents, Lowercase)");
}

/* model: where to point when there is no pre_tokenizer */
static int metaspace(const tfm_json_doc *doc, const tfm_json *m, const tfm_json *model,
                     tfm_uni_norm_spec *sp, tfm_err *err)
{
    /* transformers 5's T5Tokenizer writes WhitespaceSplit, then Metaspace:
     * whitespace runs collapse and the ends go, as sentencepiece's
     * remove_extra_whitespaces */
    const tfm_json *seq = type_is(m, "Sequence") ? tfm_json_get(m, "pretokenizers") : NULL;
    if (seq && seq->type == TFM_JSON_ARRAY && seq->n == 2 &&
        type_is(seq->items[0], "WhitespaceSplit")) {
        sp->remove_extra_whitespaces = 1;
        m = seq->items[1];
    }
    if (!type_is(m, "Metaspace")) {
        const tfm_json *at = m ? m : model;
        return tfm_err_at(err, doc->name, at->line, at->col,
                          "a Unigram model needs a Metaspace pre_tokenizer");
    }
    const tfm_json *r = tfm_json_get(m, "replacement");
    if (r && !str_is(r, "\xe2\x96\x81"))
        return tfm_err_at(err, doc->name, r->line, r->col,
                          "unsupported Metaspace replacement (only \"\xe2\x96\x81\")");
    const tfm_json *ps = tfm_json_get(m, "prepend_scheme"), *aps;
    if (ps && ps->type != TFM_JSON_NULL) {
        if (str_is(ps, "always") || str_is(ps, "first")) {
            sp->add_dummy_prefix = sp->prefix_unless_space = 1;
            sp->prefix_first = str_is(ps, "first");
        }
        else if (str_is(ps, "never"))
            sp->add_dummy_prefix = 0;
        else
            return tfm_err_at(err, doc->name, ps->line, ps->col,
                              "unknown prepend_scheme (always, first, never)");
    } else if ((aps = tfm_json_get(m, "add_prefix_space")) && aps->type == TFM_JSON_BOOL) {
        sp->add_dummy_prefix = sp->prefix_unless_space = aps->boolean;
    }
    const tfm_json *split = tfm_json_get(m, "split"); /* HF's default: true */
    if (split && split->type != TFM_JSON_BOOL)
        return tfm_err_at(err, doc->name, split->line, split->col, "split is true or false");
    sp->split_spaces = !split || split->boolean;
    return 0;
}

/* A vocabulary entry as read: piece (a STRING node), score, where. */
typedef struct uni_entry {
    const tfm_json *piece, *at;
    double score;
} uni_entry;

/* HF's Unigram: "vocab" [[piece, score], ...] and "unk_id". */
static int unigram_entries(const tfm_json_doc *doc, const tfm_json *model, uni_entry *ent,
                           int64_t *unk_id, tfm_err *err)
{
    const tfm_json *vocab = tfm_json_get(model, "vocab"), *unk = tfm_json_get(model, "unk_id");
    if (!unk || unk->type == TFM_JSON_NULL)
        return tfm_err_at(err, doc->name, model->line, model->col,
                          "a Unigram model needs an \"unk_id\"");
    if (tfm_json_get_int(doc, unk, "unk_id", 0, TFM_TOK_MAX_ID, unk_id, err))
        return -1;
    if (!vocab || vocab->type != TFM_JSON_ARRAY)
        return tfm_err_at(err, doc->name, model->line, model->col,
                          "a Unigram model needs a \"vocab\" array of [piece, score]");
    if ((uint64_t)*unk_id >= vocab->n)
        return tfm_err_at(err, doc->name, unk->line, unk->col, "unk_id %lld is past the vocab",
                          (long long)*unk_id);
    for (size_t i = 0; i < vocab->n; i++) {
        const tfm_json *e = vocab->items[i];
        if (e->type != TFM_JSON_ARRAY || e->n != 2 || e->items[0]->type != TFM_JSON_STRING ||
            e->items[1]->type != TFM_JSON_NUMBER)
            return tfm_err_at(err, doc->name, e->line, e->col,
                              "a Unigram vocab entry is [piece, score]");
        ent[i] = (uni_entry){e->items[0], e->items[1], e->items[1]->num};
    }
    return 0;
}

/* sentencepiece's BPE as HF writes it: "vocab" {piece: id} with ids 0..n-1,
 * "unk_token", "merges" ["a b", ...] or [[a, b], ...].  A piece's score is
 * minus the rank of the first merge that makes it; pieces no merge makes
 * score below all of those, in id order.  Sets tok's vocabulary. */
static int bpe_entries(tfm_tokenizer *tok, const tfm_json_doc *doc, const tfm_json *model,
                       uni_entry *ent, int64_t *unk_id, tfm_err *err)
{
    const tfm_json *vocab = tfm_json_get(model, "vocab"), *unk = tfm_json_get(model, "unk_token");
    const tfm_json *merges = tfm_json_get(model, "merges");
    if (!vocab || vocab->type != TFM_JSON_OBJECT)
        return tfm_err_at(err, doc->name, model->line, model->col,
                          "a BPE model needs a \"vocab\" object of piece: id");
    if (!merges || merges->type != TFM_JSON_ARRAY)
        return tfm_err_at(err, doc->name, model->line, model->col,
                          "a BPE model needs a \"merges\" array");
    /* transformers 5's LlamaTokenizer writes null beside byte_fallback
     * (every character has its bytes): sentencepiece's <unk> then */
    const tfm_json *bf = tfm_json_get(model, "byte_fallback");
    int null_unk = (!unk || unk->type == TFM_JSON_NULL) && bf && bf->type == TFM_JSON_BOOL &&
                   bf->boolean;
    if (!null_unk && (!unk || unk->type != TFM_JSON_STRING))
        return tfm_err_at(err, doc->name, model->line, model->col,
                          "a sentencepiece BPE model needs an \"unk_token\" (or "
                          "byte_fallback)");
    size_t nv = vocab->n;
    for (size_t i = 0; i < nv; i++) {
        int64_t id;
        if (tfm_json_get_int(doc, vocab->items[i], "a vocab id", 0, (int64_t)nv - 1, &id, err))
            return -1;
        if (ent[id].piece)
            return tfm_err_at(err, doc->name, vocab->items[i]->line, vocab->items[i]->col,
                              "vocab id %lld is given twice", (long long)id);
        ent[id] = (uni_entry){vocab->keys[i], vocab->items[i], NAN};
        if (tfm_tok_vocab_set(tok, (uint32_t)id, vocab->keys[i]->str, vocab->keys[i]->len,
                              doc->name, err))
            return -1;
    }
    *unk_id = null_unk ? tfm_tokenizer_token_id(tok, "<unk>", 5)
                       : tfm_tokenizer_token_id(tok, unk->str, unk->len);
    if (null_unk && *unk_id < 0)
        return tfm_err_at(err, doc->name, model->line, model->col, "unk_token null: expected "
                          "sentencepiece's <unk> in the vocab");
    if (*unk_id < 0)
        return tfm_err_at(err, doc->name, unk->line, unk->col, "unk_token is not in the vocab");
    tfm_buf m = {0};
    int rc = 0;
    for (size_t r = 0; r < merges->n && !rc; r++) {
        const tfm_json *e = merges->items[r];
        tfm_buf_clear(&m);
        if (e->type == TFM_JSON_ARRAY && e->n == 2 && e->items[0]->type == TFM_JSON_STRING &&
            e->items[1]->type == TFM_JSON_STRING) {
            tfm_buf_append(&m, e->items[0]->str, e->items[0]->len);
            tfm_buf_append(&m, e->items[1]->str, e->items[1]->len);
        } else if (e->type == TFM_JSON_STRING && memchr(e->str, ' ', e->len)) {
            const char *sp = memchr(e->str, ' ', e->len);
            tfm_buf_append(&m, e->str, (size_t)(sp - e->str));
            tfm_buf_append(&m, sp + 1, e->len - (size_t)(sp - e->str) - 1);
        } else {
            rc = tfm_err_at(err, doc->name, e->line, e->col, "a merge is \"a b\" or [a, b]");
            break;
        }
        int64_t id = tfm_tokenizer_token_id(tok, m.data, m.len);
        if (id < 0)
            rc = tfm_err_at(err, doc->name, e->line, e->col, "a merge makes a piece that is "
                                                              "not in the vocab");
        else if (isnan(ent[id].score))
            ent[id].score = -(double)r;
    }
    tfm_buf_free(&m);
    for (size_t i = 0; i < nv && !rc; i++)
        if (isnan(ent[i].score))
            ent[i].score = -(double)(merges->n + i);
    return rc;
}

int tfm_tok_unigram_from_json(tfm_tokenizer *tok, const tfm_json_doc *doc,
                              const tfm_json *root, tfm_err *err)
{
    const tfm_json *model = tfm_json_get(root, "model");
    tfm_uni_norm_spec sp = {.add_dummy_prefix = 1, .escape_whitespaces = 1,
                            .prefix_unless_space = 1};
    tfm_buf charsmap = {0};
    const tfm_json *norm = tfm_json_get(root, "normalizer");
    int rc = 0, prepend = 0;
    if (norm && norm->type != TFM_JSON_NULL) {
        const tfm_json *list = tfm_json_get(norm, "normalizers");
        if (type_is(norm, "Sequence") && list && list->type == TFM_JSON_ARRAY) {
            for (size_t i = 0; i < list->n && !rc; i++)
                rc = norm_item(doc, list->items[i], &sp, &prepend, &charsmap, err);
        } else {
            rc = norm_item(doc, norm, &sp, &prepend, &charsmap, err);
        }
    }
    const tfm_json *pre = tfm_tok_pre_tokenizer(root);
    if (!rc && (!pre || pre->type == TFM_JSON_NULL) && prepend) {
        /* LlamaConverter's older form: no pre-tokenizer, the normalizer's
         * Prepend and Replace do Metaspace's work; the text is one piece */
        sp.split_spaces = 0;
    } else if (!rc) {
        rc = metaspace(doc, pre, model, &sp, err);
    }
    if (prepend) /* sentencepiece's: before whatever the text starts with */
        sp.add_dummy_prefix = 1, sp.prefix_unless_space = 0;
    int bpe = type_is(model, "BPE");
    const tfm_json *vocab = tfm_json_get(model, "vocab");
    const tfm_json *bf = tfm_json_get(model, "byte_fallback");
    int byte_fallback = bf && bf->type == TFM_JSON_BOOL && bf->boolean;
    /* each id's piece, score and where it stands, from either layout */
    size_t nv = vocab && (vocab->type == TFM_JSON_ARRAY || vocab->type == TFM_JSON_OBJECT)
                    ? vocab->n : 0;
    uni_entry *ent = tfm_calloc(nv + 1, sizeof *ent);
    int64_t unk_id = -1;
    if (!rc)
        rc = bpe ? bpe_entries(tok, doc, model, ent, &unk_id, err)
                 : unigram_entries(doc, model, ent, &unk_id, err);
    tfm_unigram *u = NULL;
    if (!rc)
        rc = tfm_unigram_new(&u, &sp, doc->name, err);
    tfm_buf_free(&charsmap);
    if (rc) {
        free(ent);
        return -1;
    }
    tfm_unigram_set_bpe(u, bpe);
    /* added tokens give the pieces' types: special ones are control pieces,
     * the others user-defined symbols */
    uint8_t *kind = tfm_calloc(nv + 1, 1);
    const tfm_json *added = tfm_json_get(root, "added_tokens");
    for (size_t i = 0; added && added->type == TFM_JSON_ARRAY && i < added->n; i++) {
        const tfm_json *e = added->items[i], *id = tfm_json_get(e, "id");
        const tfm_json *spc = tfm_json_get(e, "special");
        if (id && id->type == TFM_JSON_NUMBER && id->num >= 0 && id->num < (double)nv)
            kind[(size_t)id->num] = spc && spc->type == TFM_JSON_BOOL && spc->boolean
                                        ? TFM_UNI_CONTROL : TFM_UNI_USER;
    }
    for (size_t i = 0; i < nv && !rc; i++) {
        const tfm_json *p = ent[i].piece;
        tfm_uni_type ty = kind[i] ? (tfm_uni_type)kind[i] : TFM_UNI_NORMAL;
        if ((int64_t)i == unk_id)
            ty = TFM_UNI_UNKNOWN;
        else if (byte_fallback && p->len == 6 && memcmp(p->str, "<0x", 3) == 0 &&
                 p->str[5] == '>')
            ty = TFM_UNI_BYTE;
        if (!isfinite(ent[i].score) || fabs(ent[i].score) > 3.4e38) {
            rc = tfm_err_at(err, doc->name, ent[i].at->line, ent[i].at->col,
                            "the score of '%.*s' is not a finite number",
                            (int)(p->len > 64 ? 64 : p->len), p->str);
            break;
        }
        char at[1100];
        snprintf(at, sizeof at, "%s:%ld:%ld", doc->name, ent[i].at->line, ent[i].at->col);
        if (tfm_unigram_add(u, p->str, p->len, (float)ent[i].score, ty, at, err)) {
            rc = -1;
            break;
        }
    }
    free(kind);
    free(ent);
    if (!rc)
        rc = tfm_unigram_finish(u, byte_fallback, doc->name, err);
    if (rc) {
        tfm_unigram_free(u);
        return -1;
    }
    /* the added tokens are registered by the facade; types already match */
    tok->ops = &uni_ops;
    tok->impl = u;
    if (bpe)
        return 0; /* bpe_entries set the vocabulary */
    for (uint32_t id = 0; id < tfm_unigram_size(u); id++) {
        size_t len;
        const char *p = tfm_unigram_piece(u, id, &len);
        if (tfm_tok_vocab_set(tok, id, p, len, doc->name, err))
            return -1;
    }
    return 0;
}

/* ---- subword regularization ---- */

static int need_unigram(const tfm_tokenizer *tok, const char *what, tfm_err *err)
{
    if (tok->kind == TFM_TOK_UNIGRAM)
        return 0;
    return tfm_err_set(err, "%s needs a Unigram (sentencepiece) tokenizer", what);
}

int tfm_tokenizer_encode_sample(const tfm_tokenizer *tok, const char *text, size_t len,
                                float alpha, tfm_rng *rng, tfm_ids *out, tfm_err *err)
{
    if (need_unigram(tok, "sampling", err))
        return -1;
    /* sentencepiece reads BPE-dropout's alpha as a probability (1 and over:
     * every merge skipped) where the Unigram's is an exponent of any size */
    if (tfm_unigram_is_bpe(tok->impl) && !(alpha <= 1))
        return tfm_err_set(err, "this sentencepiece model is BPE: its sampling is BPE-dropout, "
                                "whose ALPHA is the probability of skipping a merge, in [0, 1], "
                                "not %g", alpha);
    tfm_unigram_sample(tok->impl, text, len, alpha, rng, out);
    return 0;
}

int tfm_tokenizer_encode_nbest(const tfm_tokenizer *tok, const char *text, size_t len,
                               size_t nbest, tfm_ids *out, tfm_ids *off, tfm_err *err)
{
    if (need_unigram(tok, "n-best encoding", err))
        return -1;
    if (tfm_unigram_is_bpe(tok->impl))
        return tfm_err_set(err, "n-best encoding needs a Unigram model: this sentencepiece "
                                "model is BPE (--sample is BPE-dropout with it)");
    tfm_unigram_nbest(tok->impl, text, len, nbest, out, off);
    return 0;
}

int tfm_tokenizer_set_llama_metaspace(tfm_tokenizer *tok, const char *scheme)
{
    if (tok->ops != &uni_ops || !tfm_unigram_is_bpe(tok->impl))
        return -1;
    /* the spec is the model's own, and encoding reads it afresh */
    tfm_uni_norm_spec *sp = (tfm_uni_norm_spec *)tfm_unigram_norm_spec(tok->impl);
    if (sp->charsmap_len || sp->nmt || sp->nfkc)
        return -1;
    sp->remove_extra_whitespaces = 0;
    sp->escape_whitespaces = 1;
    sp->split_spaces = 0;
    sp->add_dummy_prefix = strcmp(scheme, "never") != 0;
    sp->prefix_unless_space = 1;
    sp->prefix_first = strcmp(scheme, "first") == 0;
    return 0;
}
