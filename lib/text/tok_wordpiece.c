/* The facade's adapter over text/wordpiece.h (engineer "wordpiece"). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "text/tok_internal.h"
#include "text/wordpiece.h"

static void wp_encode(const tfm_tokenizer *tok, void *scratch, const char *text, size_t len,
                      tfm_ids *out)
{
    tfm_wordpiece_encode(tok->impl, scratch, text, len, out);
}

static void wp_encode_spans(const tfm_tokenizer *tok, void *scratch, const char *text,
                            size_t len, tfm_ids *out, tfm_ids *start, tfm_ids *end)
{
    tfm_wordpiece_encode_spans(tok->impl, scratch, text, len, out, start, end);
}

static void wp_decode(const tfm_tokenizer *tok, const uint32_t *ids, size_t n, tfm_buf *out)
{
    const char **p = tfm_malloc((n + 1) * sizeof *p);
    size_t *l = tfm_malloc((n + 1) * sizeof *l);
    for (size_t i = 0; i < n; i++) {
        p[i] = tok->pieces[ids[i]];
        l[i] = tok->piece_lens[ids[i]];
    }
    tfm_wordpiece_decode_pieces_wp(tok->impl, p, l, n, out);
    free(p);
    free(l);
}

static void wp_to_json(const tfm_tokenizer *tok, tfm_buf *out)
{
    const tfm_wordpiece *wp = tok->impl;
    tfm_buf_puts(out, "  \"normalizer\": ");
    tfm_wordpiece_normalizer_json(wp, out);
    tfm_buf_puts(out, ",\n  \"pre_tokenizer\": ");
    tfm_wordpiece_pre_tokenizer_json(wp, out);
    tfm_buf_puts(out, ",\n  \"post_processor\": ");
    tfm_wordpiece_post_processor_json(wp, out);
    tfm_buf_puts(out, ",\n  \"decoder\": ");
    tfm_wordpiece_decoder_json(wp, out);
    tfm_buf_puts(out, ",\n  \"model\": ");
    tfm_wordpiece_model_json(wp, out);
}

static void *wp_scratch_new(const tfm_tokenizer *tok)
{
    return tfm_wordpiece_scratch_new();
}

static void wp_scratch_free(void *s)
{
    tfm_wordpiece_scratch_free(s);
}

static void wp_free(void *impl)
{
    tfm_wordpiece_free(impl);
}

static const tfm_tok_ops wp_ops = {
    .encode = wp_encode,
    .encode_spans = wp_encode_spans,
    .decode = wp_decode,
    .to_json = wp_to_json,
    .scratch_new = wp_scratch_new,
    .scratch_free = wp_scratch_free,
    .free = wp_free,
};

/* Copies the model's pieces into the facade's table.  A vocab.txt may list
 * a piece twice (HF: the later id wins for lookups, both decode). */
static int adopt(tfm_tokenizer *tok, tfm_wordpiece *wp, const char *name, tfm_err *err)
{
    tok->ops = &wp_ops;
    tok->impl = wp;
    uint32_t n = tfm_wordpiece_vocab_size(wp);
    for (uint32_t id = 0; id < n; id++) {
        size_t len;
        const char *p = tfm_wordpiece_piece(wp, id, &len);
        if (p && tfm_tok_vocab_set_dup(tok, id, p, len, name, err))
            return -1;
    }
    return 0;
}

int tfm_tok_wordpiece_from_json(tfm_tokenizer *tok, const tfm_json_doc *doc,
                                const tfm_json *root, tfm_err *err)
{
    tfm_wordpiece *wp;
    if (tfm_wordpiece_from_json(&wp, doc, tfm_json_get(root, "model"),
                                tfm_json_get(root, "normalizer"),
                                tfm_json_get(root, "pre_tokenizer"), err))
        return -1;
    if (tfm_wordpiece_decoder_from_json(wp, doc, tfm_json_get(root, "decoder"), err)) {
        tfm_wordpiece_free(wp);
        return -1;
    }
    return adopt(tok, wp, doc->name, err);
}

static void bert_specials(tfm_tokenizer *tok)
{
    static const char *const names[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (size_t i = 0; i < 5; i++) {
        int64_t id = tfm_tokenizer_token_id(tok, names[i], strlen(names[i]));
        if (id < 0 || tfm_tok_is_added(tok, (uint32_t)id))
            continue;
        tfm_tok_added a = {.content = (char *)names[i], .len = strlen(names[i]),
                           .id = (uint32_t)id, .special = 1};
        tfm_tok_add_token(tok, &a, "vocab", NULL);
    }
}

int tfm_tok_wordpiece_from_vocab_txt(tfm_tokenizer *tok, const char *path, tfm_err *err)
{
    tfm_wordpiece *wp;
    if (tfm_wordpiece_load_vocab_txt(&wp, path, err))
        return -1;
    if (adopt(tok, wp, path, err))
        return -1;
    bert_specials(tok);
    tfm_tok_guess_specials(tok);
    return 0;
}

/* ---- training ---- */

static void *wt_create(const tfm_tok_train_opts *opts)
{
    return tfm_wordpiece_trainer_new(opts);
}

static void wt_feed(void *impl, const char *text, size_t len)
{
    tfm_wordpiece_trainer_feed(impl, text, len);
}

static int wt_finish(void *impl, const tfm_tok_train_opts *opts, tfm_tokenizer **out,
                     tfm_err *err)
{
    tfm_wordpiece *wp;
    if (tfm_wordpiece_trainer_finish(impl, &wp, err))
        return -1;
    tfm_tokenizer *tok = tfm_tok_new(TFM_TOK_WORDPIECE, NULL);
    if (adopt(tok, wp, "trained vocabulary", err)) {
        tfm_tokenizer_free(tok);
        return -1;
    }
    if (opts->specials) {
        for (size_t i = 0; i < opts->n_specials; i++) {
            int64_t id = tfm_tokenizer_token_id(tok, opts->specials[i], strlen(opts->specials[i]));
            if (id < 0 || tfm_tok_is_added(tok, (uint32_t)id))
                continue;
            tfm_tok_added a = {.content = (char *)opts->specials[i],
                               .len = strlen(opts->specials[i]), .id = (uint32_t)id,
                               .special = 1};
            tfm_tok_add_token(tok, &a, "specials", NULL);
        }
    } else {
        bert_specials(tok);
    }
    tfm_tok_guess_specials(tok);
    *out = tok;
    return 0;
}

static void wt_free(void *impl)
{
    tfm_wordpiece_trainer_free(impl);
}

const tfm_tok_trainer_ops tfm_tok_wordpiece_trainer_ops = {
    .create = wt_create,
    .feed = wt_feed,
    .finish = wt_finish,
    .free = wt_free,
};
