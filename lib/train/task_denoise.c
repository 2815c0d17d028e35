/* BART's denoising pre-training for encoder-decoders (train.task denoise;
 * the noise itself in train/denoise.h).
 *
 * data.text is read as one token stream, as span-corruption reads it; a
 * training sequence is a random window of model.block_size - 1 tokens.  The
 * source is the window with its sentences shuffled (train.permute_sentences)
 * and then text infilling (train.mask_ratio, train.poisson_lambda,
 * train.random_token_prob) + EOS, padded to the batch's longest; the
 * decoder's labels are the original window + EOS, its input BOS + window.
 * As fairseq's and HF's BART see a text, <s> text </s>: with
 * model.source_bos the source begins with the tokenizer's bos, and with
 * model.forced_bos the labels begin with that token (never noised); the
 * window is a token shorter.
 *
 * A sentence ends at a token whose text ends with . ! ? (or 。！？), or that
 * holds a line break (the data's segment boundaries, where the tokenizer
 * keeps them), or at EOS.
 *
 * Every draw comes from the rng passed in, so a resumed run repeats the
 * windows and their noise bit for bit. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"
#include "train/denoise.h"
#include "train/task_internal.h"

typedef struct dn_task {
    tfm_tokens train, val;
    int B, T;                 /* T = block_size: the window and EOS */
    size_t W;                 /* window */
    int permute;
    int64_t eval_batches;
    int32_t bos, eos, pad;
    int32_t src_lead, tgt_lead; /* the source's and labels' first token; -1: none */
    uint32_t V;
    size_t n_ends;            /* tokens that end a sentence */
    unsigned char *special;   /* [V] never a random token */
    unsigned char *is_end;    /* [V] ends a sentence */
    tfm_denoise noise;
    int32_t *perm;            /* [W] */
    tfm_text_batch tb;        /* sources and labels of at most T */
} dn_task;

static void draw(void *impl, const tfm_tokens *data, tfm_rng *rng, tfm_batch *b)
{
    dn_task *K = impl;
    tfm_text_batch *tb = &K->tb;
    for (int r = 0; r < K->B; r++) {
        /* the window is the labels; the source is made from it */
        int32_t *y = tb->rows_y + (size_t)r * K->T, *s = tb->rows_s + (size_t)r * K->T;
        int ty = K->tgt_lead >= 0, ts = K->src_lead >= 0;
        if (ty)
            y[0] = K->tgt_lead;
        if (ts)
            s[0] = K->src_lead;
        int32_t *w = y + ty; /* the window */
        tfm_task_text_window(data, K->W, rng, w);
        w[K->W] = K->eos;
        tb->tgt_len[r] = (int)K->W + 1 + ty;
        const int32_t *noisy = w;
        if (K->permute) {
            tfm_denoise_permute(&K->noise, w, K->W, K->is_end, rng, K->perm);
            noisy = K->perm;
        }
        size_t n = tfm_denoise_infill(&K->noise, noisy, K->W, K->W, rng, s + ts);
        s[ts + n] = K->eos;
        tb->src_len[r] = ts + (int)n + 1;
    }
    tfm_text_batch_finish(tb, b);
}

static int dn_next(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    (void)err;
    dn_task *K = impl;
    draw(K, &K->train, rng, b);
    *n_tokens = (size_t)K->B * (size_t)K->T;
    return 0;
}

static int dn_evaluate(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s, tfm_err *err)
{
    dn_task *K = impl;
    return tfm_task_text_loss(K, draw, &K->val, K->eval_batches, m, seed, s, err);
}

static int dn_has_val(void *impl)
{
    return ((dn_task *)impl)->val.n > 0;
}

static void dn_describe(void *impl, char *buf, size_t size)
{
    dn_task *K = impl;
    snprintf(buf, size, "%zu training tokens, %zu validation tokens (denoising: windows of "
                        "%zu tokens, %g of them in Poisson spans%s)",
             K->train.n, K->val.n, K->W, K->noise.mask_ratio,
             K->permute ? (K->n_ends ? ", sentences shuffled"
                                     : ", no token ends a sentence: nothing to shuffle")
                        : "");
}

static void dn_free(void *impl)
{
    dn_task *K = impl;
    tfm_tokens_free(&K->train);
    tfm_tokens_free(&K->val);
    tfm_denoise_free(&K->noise);
    free(K->special);
    free(K->is_end);
    free(K->perm);
    tfm_text_batch_free(&K->tb);
    free(K);
}

static const tfm_task_ops dn_ops = {
    .name = "denoise",
    .describe = dn_describe,
    .has_val = dn_has_val,
    .next = dn_next,
    .evaluate = dn_evaluate,
    .free = dn_free,
};

/* Whether a token's text ends a sentence (see the top). */
static int ends_sentence(const char *t, size_t n)
{
    if (memchr(t, '\n', n))
        return 1;
    while (n && (t[n - 1] == ' ' || t[n - 1] == '\t' || t[n - 1] == '\r'))
        n--;
    if (n && (t[n - 1] == '.' || t[n - 1] == '!' || t[n - 1] == '?'))
        return 1;
    static const char *const wide[] = {"\u3002", "\uff01", "\uff1f"};
    for (size_t i = 0; i < sizeof wide / sizeof *wide; i++) {
        size_t w = strlen(wide[i]);
        if (n >= w && !memcmp(t + n - w, wide[i], w))
            return 1;
    }
    return 0;
}

/* The special and is_end tables of the vocabulary. */
static void tables(dn_task *K, const tfm_tokenizer *tok, const tfm_tok_specials *sp)
{
    K->special = tfm_calloc(K->V, 1);
    K->is_end = tfm_calloc(K->V, 1);
    const int64_t ids[] = {sp->unk, sp->pad, sp->bos, sp->eos, sp->cls, sp->sep, sp->mask};
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
        if (ids[i] >= 0 && ids[i] < K->V)
            K->special[ids[i]] = 1;
    tfm_buf text = {0};
    tfm_err e;
    uint32_t tv = tfm_tokenizer_vocab_size(tok);
    for (uint32_t id = 0; id < K->V && id < tv; id++) {
        tfm_buf_clear(&text);
        if (!K->special[id] && tfm_tokenizer_decode(tok, &id, 1, 1, &text, &e) == 0 &&
            ends_sentence(text.data, text.len))
            K->is_end[id] = 1;
        K->n_ends += K->is_end[id];
    }
    K->is_end[K->eos] = 1;
    tfm_buf_free(&text);
}

static int load(dn_task *K, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    const char *name = cfg->data.tokenizer;
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    if (sp->eos < 0)
        return tfm_err_set(err, "%s: the tokenizer has no end-of-text token, which ends the "
                           "source and target of denoising", name);
    if (sp->mask < 0)
        return tfm_err_set(err, "%s: no mask token (<mask> or [MASK]): train.task denoise "
                           "replaces each noise span with one; train a tokenizer with it "
                           "(tfm-tokenize train --special '<mask>' ...)", name);
    K->eos = (int32_t)sp->eos;
    K->bos = (int32_t)tfm_task_decoder_start(cfg, sp);
    K->pad = sp->pad >= 0 ? (int32_t)sp->pad : K->eos;
    if (cfg->model.source_bos && sp->bos < 0)
        return tfm_err_set(err, "%s: model.source_bos, but the tokenizer has no "
                           "beginning-of-text token to begin each source with", name);
    K->src_lead = cfg->model.source_bos ? (int32_t)sp->bos : -1;
    K->tgt_lead = (int32_t)cfg->model.forced_bos;
    int lead = K->src_lead >= 0 || K->tgt_lead >= 0;
    if (cfg->model.block_size < 3 + lead)
        return tfm_err_set(err, "model.block_size %lld is too short to denoise: the target "
                           "needs at least 2 tokens and EOS%s", (long long)cfg->model.block_size,
                           lead ? ", after its leading <s>" : "");
    K->T = (int)cfg->model.block_size;
    K->W = (size_t)K->T - 1 - (size_t)lead;
    if (tfm_task_text_open(&K->train, &K->val, cfg, tok, K->W, err) < 0)
        return -1;
    K->V = (uint32_t)cfg->model.vocab_size;
    if (sp->mask >= K->V)
        return tfm_err_set(err, "%s: the mask token is id %lld, outside model.vocab_size %lld",
                           name, (long long)sp->mask, (long long)K->V);
    tables(K, tok, sp);
    size_t n_special = 0;
    for (uint32_t i = 0; i < K->V; i++)
        n_special += K->special[i];
    if (cfg->train.random_token_prob > 0 && n_special == K->V)
        return tfm_err_set(err, "every id of the vocabulary (%u) is special: no random "
                           "replacement token to draw (set train.random_token_prob 0)", K->V);
    tfm_denoise_init(&K->noise, cfg->train.mask_ratio, cfg->train.poisson_lambda,
                     cfg->train.random_token_prob, (int32_t)sp->mask, K->special, K->V, K->W);
    K->permute = cfg->train.permute_sentences;
    return 0;
}

int tfm_task_denoise_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    dn_task *K = tfm_malloc(sizeof *K);
    memset(K, 0, sizeof *K);
    if (load(K, cfg, tok, err) < 0) {
        dn_free(K);
        return -1;
    }
    K->B = (int)cfg->train.batch_size;
    K->eval_batches = cfg->train.eval_batches;
    K->perm = tfm_malloc(K->W * sizeof *K->perm);
    tfm_text_batch_init(&K->tb, K->B, K->T, K->T, K->bos, K->pad);
    t->ops = &dn_ops;
    t->impl = K;
    return 0;
}
