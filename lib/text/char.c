/* The character model: one token per Unicode character, for
 * character-level language models.
 *
 * Vocabulary: the specials first (in the order given; default "<unk>"), then
 * every character seen in training, most frequent first, ties by code point;
 * --vocab-size keeps the most frequent, --min-frequency drops rare ones.
 * A character not in the vocabulary (and each invalid UTF-8 byte) encodes as
 * the unknown token, or is dropped when there is none, as HuggingFace's BPE
 * drops it; tfm_tokenizer_dropped finds such characters so that programs
 * can say so.
 *
 * tokenizer.json form: HuggingFace tokenizers has no character model, so it
 * is written as a BPE model with no merges and no pre-tokenizer (HF's BPE
 * then splits the text into characters and maps the unknown ones to
 * unk_token), the "Fuse" decoder (pieces concatenated), and the Lowercase
 * normalizer when trained with lowercase.
 * Reading, a BPE model whose pre_tokenizer is null is taken as a char model. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "text/tok_internal.h"
#include "text/utf8.h"

typedef struct char_model {
    int64_t unk;
} char_model;

static void char_encode_spans(const tfm_tokenizer *tok, void *scratch, const char *text,
                              size_t len, tfm_ids *out, tfm_ids *start, tfm_ids *end)
{
    const char_model *m = tok->impl;
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, adv;
    (void)scratch;
    while (i < len) {
        int32_t cp = tfm_utf8_decode(s + i, len - i, &adv);
        int64_t id = cp < 0 ? -1 : tfm_tokenizer_token_id(tok, text + i, adv);
        if (id < 0)
            id = m->unk;
        if (id >= 0) {
            tfm_ids_push(out, (uint32_t)id);
            if (start) {
                tfm_ids_push(start, (uint32_t)i);
                tfm_ids_push(end, (uint32_t)(i + adv));
            }
        }
        i += adv;
    }
}

static void char_encode(const tfm_tokenizer *tok, void *scratch, const char *text, size_t len,
                        tfm_ids *out)
{
    char_encode_spans(tok, scratch, text, len, out, NULL, NULL);
}

static void char_decode(const tfm_tokenizer *tok, const uint32_t *ids, size_t n, tfm_buf *out)
{
    for (size_t i = 0; i < n; i++)
        tfm_buf_append(out, tok->pieces[ids[i]], tok->piece_lens[ids[i]]);
}

static void char_to_json(const tfm_tokenizer *tok, tfm_buf *out)
{
    const char_model *m = tok->impl;
    tfm_tok_normalizer_to_json(tok, out);
    tfm_buf_puts(out, "  \"pre_tokenizer\": null,\n"
                      "  \"post_processor\": null,\n  \"decoder\": {\"type\": \"Fuse\"},\n"
                      "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n"
                      "    \"unk_token\": ");
    if (m->unk >= 0)
        tfm_buf_put_json_string(out, tok->pieces[m->unk], tok->piece_lens[m->unk]);
    else
        tfm_buf_puts(out, "null");
    tfm_buf_puts(out, ",\n    \"continuing_subword_prefix\": null,\n"
                      "    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n"
                      "    \"byte_fallback\": false,\n    \"vocab\": {");
    int first = 1;
    for (uint32_t id = 0; id < tok->n_pieces; id++) {
        if (!tok->pieces[id])
            continue; /* a hole in the id space */
        tfm_buf_puts(out, first ? "\n      " : ",\n      ");
        first = 0;
        tfm_buf_put_json_string(out, tok->pieces[id], tok->piece_lens[id]);
        tfm_buf_printf(out, ": %u", id);
    }
    tfm_buf_puts(out, "\n    },\n    \"merges\": []\n  }");
}

size_t tfm_char_dropped(const tfm_tokenizer *tok, const char *text, size_t len, size_t *first)
{
    const char_model *m = tok->impl;
    if (m->unk >= 0)
        return 0;
    /* the spans of what was kept, through the facade's normalizer: a gap
     * between them is characters dropped */
    tfm_ids ids = {0}, start = {0}, end = {0};
    tfm_tokenizer_encode_spans(tok, NULL, text, len, 0, &ids, &start, &end);
    size_t n = 0, at = 0;
    for (size_t i = 0; i <= ids.len; i++) {
        size_t s = i < ids.len ? start.data[i] : len;
        for (size_t adv; at < s; at += adv) {
            tfm_utf8_decode((const unsigned char *)text + at, len - at, &adv);
            if (!n++ && first)
                *first = at;
        }
        if (i < ids.len && end.data[i] > at)
            at = end.data[i];
    }
    tfm_ids_free(&ids);
    tfm_ids_free(&start);
    tfm_ids_free(&end);
    return n;
}

const tfm_tok_ops tfm_char_ops = {
    .encode = char_encode,
    .encode_spans = char_encode_spans,
    .decode = char_decode,
    .to_json = char_to_json,
    .free = free,
};

int tfm_char_from_json(tfm_tokenizer *tok, const tfm_json_doc *doc, const tfm_json *root,
                       tfm_err *err)
{
    const tfm_json *model = tfm_json_get(root, "model");
    const tfm_json *x;
    if (tfm_tok_normalizer_from_json(tok, doc, root, err))
        return -1;
    if ((x = tfm_json_get(model, "merges")) && !(x->type == TFM_JSON_ARRAY && x->n == 0))
        return tfm_err_at(err, doc->name, x->line, x->col,
                          "a BPE model with merges needs the ByteLevel pre_tokenizer");
    const tfm_json *v = tfm_json_get(model, "vocab");
    if (!v)
        return tfm_err_at(err, doc->name, model->line, model->col, "model has no \"vocab\"");
    if (tfm_json_expect(doc, v, TFM_JSON_OBJECT, "vocab", err))
        return -1;
    for (size_t i = 0; i < v->n; i++) {
        int64_t id;
        if (tfm_json_get_int(doc, v->items[i], "token id", 0, TFM_TOK_MAX_ID, &id, err))
            return -1;
        if (tfm_tok_vocab_set(tok, (uint32_t)id, v->keys[i]->str, v->keys[i]->len, NULL, err))
            return tfm_err_prefix(err, "%s:%ld:%ld", doc->name, v->keys[i]->line,
                                  v->keys[i]->col);
    }
    char_model *m = tfm_calloc(1, sizeof *m);
    m->unk = -1;
    tok->impl = m;
    if ((x = tfm_json_get(model, "unk_token")) && x->type == TFM_JSON_STRING) {
        m->unk = tfm_tokenizer_token_id(tok, x->str, x->len);
        if (m->unk < 0)
            return tfm_err_at(err, doc->name, x->line, x->col,
                              "unk_token '%s' is not in the vocabulary", x->str);
    }
    return 0;
}

/* ---- training ---- */

typedef struct char_trainer {
    uint64_t *count; /* [0x110000] */
    int lowercase;
    tfm_buf lower;
} char_trainer;

static void *char_train_create(const tfm_tok_train_opts *opts)
{
    char_trainer *t = tfm_calloc(1, sizeof *t);
    t->count = tfm_calloc(0x110000, sizeof *t->count);
    t->lowercase = opts->lowercase == 1;
    return t;
}

static void char_train_feed(void *impl, const char *text, size_t len)
{
    char_trainer *t = impl;
    if (t->lowercase) {
        tfm_buf_clear(&t->lower);
        tfm_utf8_lower(text, len, &t->lower);
        text = t->lower.data;
        len = t->lower.len;
    }
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, adv;
    while (i < len) {
        if (s[i] < 0x80) {
            t->count[s[i++]]++;
            continue;
        }
        int32_t cp = tfm_utf8_decode(s + i, len - i, &adv);
        if (cp >= 0)
            t->count[cp]++;
        i += adv;
    }
}

typedef struct cp_count {
    uint32_t cp;
    uint64_t n;
} cp_count;

static int by_count(const void *a, const void *b)
{
    const cp_count *x = a, *y = b;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    return x->cp < y->cp ? -1 : x->cp > y->cp;
}

static int looks_unk(const char *s)
{
    return strcmp(s, "<unk>") == 0 || strcmp(s, "[UNK]") == 0 || strcmp(s, "<|unk|>") == 0;
}

static int char_train_finish(void *impl, const tfm_tok_train_opts *opts, tfm_tokenizer **out,
                             tfm_err *err)
{
    char_trainer *t = impl;
    static const char *defaults[] = {"<unk>"};
    const char **sp = opts->specials ? opts->specials : defaults;
    size_t nsp = opts->specials ? opts->n_specials : 1;
    tfm_tokenizer *tok = tfm_tok_new(TFM_TOK_CHAR, &tfm_char_ops);
    tok->lowercase = t->lowercase;
    char_model *m = tfm_calloc(1, sizeof *m);
    m->unk = -1;
    tok->impl = m;
    tfm_tok_add_specials(tok, sp, nsp);
    for (size_t i = 0; i < nsp; i++)
        if (m->unk < 0 && looks_unk(sp[i]))
            m->unk = tfm_tokenizer_token_id(tok, sp[i], strlen(sp[i]));
    size_t n = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++)
        n += t->count[cp] > 0;
    cp_count *c = tfm_malloc((n + 1) * sizeof *c);
    n = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++)
        if (t->count[cp] > 0)
            c[n++] = (cp_count){cp, t->count[cp]};
    qsort(c, n, sizeof *c, by_count);
    uint64_t minf = opts->min_frequency;
    for (size_t i = 0; i < n; i++) {
        if (opts->vocab_size && tok->n_pieces >= opts->vocab_size)
            break;
        if (c[i].n < minf)
            break;
        unsigned char u[4];
        size_t l = tfm_utf8_encode(c[i].cp, u);
        if (tfm_tokenizer_token_id(tok, (const char *)u, l) < 0)
            tfm_tok_vocab_push(tok, (const char *)u, l);
    }
    free(c);
    tfm_tok_guess_specials(tok);
    *out = tok;
    return 0;
}

static void char_train_free(void *impl)
{
    char_trainer *t = impl;
    if (!t)
        return;
    free(t->count);
    tfm_buf_free(&t->lower);
    free(t);
}

const tfm_tok_trainer_ops tfm_char_trainer_ops = {
    .create = char_train_create,
    .feed = char_train_feed,
    .finish = char_train_finish,
    .free = char_train_free,
};
