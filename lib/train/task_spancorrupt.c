/* T5's span-corruption pre-training for encoder-decoders (train.task
 * span-corruption; the corruption itself in train/spancorrupt.h).
 *
 * data.text is read as one token stream (T5 concatenates its documents the
 * same way); a training sequence is a random window of the raw length that
 * random_spans_helper gives for model.block_size inputs, corrupted with a
 * fresh mask.  Every window has the same counts, so a batch has no
 * padding (train.noise spans): source = inputs + EOS, decoder labels = targets + EOS, decoder
 * input = BOS + targets (BOS as the seq2seq task and tfm-generate use it).
 *
 * train.noise picks the T5 study's other objectives (train/spancorrupt.h)
 * on windows of model.block_size - 1 tokens with an i.i.d. mask: iid (a
 * sentinel per run of noise; a window is cut before the first run the
 * tokenizer has no sentinel for), drop (no sentinels) and bert
 * (<extra_id_0> as T5's mask, train.random_token_prob random tokens, the
 * target the whole window).  Their lengths vary: a batch is padded to its
 * longest source and target.
 *
 * Every draw comes from the rng passed in, so a resumed run repeats the
 * windows and masks bit for bit. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "train/spancorrupt.h"
#include "train/task_internal.h"

/* ---- the task ------------------------------------------------------------------- */

typedef struct sc_task {
    tfm_tokens train, val;
    int B;
    int noise;                /* tfm_config_noise */
    size_t raw, spans;        /* window; spans: noise spans per window */
    int S, T;                 /* the longest inputs and targets, each with EOS */
    double density, mean_span, random_prob;
    int64_t eval_batches;
    int32_t bos, eos, pad;
    uint32_t V;
    int32_t *sentinel;        /* [n_sentinel]: <extra_id_0> .. */
    size_t n_sentinel;
    unsigned char *special;   /* [V] bert: never a random token */
    int32_t *window;          /* [raw] */
    unsigned char *mask;      /* [raw] */
    tfm_text_batch tb;
    size_t count;             /* the last batch's labels */
} sc_task;

/* One window's inputs s and targets y, without EOS. */
static void corrupt(sc_task *K, tfm_rng *rng, int32_t *s, size_t *ns, int32_t *y, size_t *nt)
{
    size_t len = K->raw;
    if (K->noise == TFM_CONFIG_NOISE_SPANS)
        tfm_span_noise_mask(K->mask, len, K->density, K->mean_span, rng);
    else
        tfm_noise_iid_mask(K->mask, len, K->density, rng);
    switch (K->noise) {
    case TFM_CONFIG_NOISE_DROP:
        tfm_noise_drop(K->window, K->mask, len, s, ns, y, nt);
        return;
    case TFM_CONFIG_NOISE_BERT:
        tfm_noise_replace(K->window, K->mask, len, K->sentinel[0], K->random_prob, K->special,
                          K->V, rng, s);
        memcpy(y, K->window, len * sizeof *y);
        *ns = *nt = len;
        return;
    case TFM_CONFIG_NOISE_IID:
        len = tfm_span_fit(K->mask, len, K->n_sentinel);
        break;
    }
    int rc = tfm_span_corrupt(K->window, K->mask, len, K->sentinel, K->n_sentinel, s, ns, y,
                              nt);
    TFM_ASSERT(rc == 0);
}

static void draw(void *impl, const tfm_tokens *data, tfm_rng *rng, tfm_batch *b)
{
    sc_task *K = impl;
    tfm_text_batch *tb = &K->tb;
    for (int r = 0; r < K->B; r++) {
        tfm_task_text_window(data, K->raw, rng, K->window);
        int32_t *s = tb->rows_s + (size_t)r * K->S, *y = tb->rows_y + (size_t)r * K->T;
        size_t ns, nt;
        corrupt(K, rng, s, &ns, y, &nt);
        TFM_ASSERT(ns < (size_t)K->S && nt < (size_t)K->T);
        s[ns] = K->eos;
        y[nt] = K->eos;
        tb->src_len[r] = (int)ns + 1;
        tb->tgt_len[r] = (int)nt + 1;
    }
    K->count = tfm_text_batch_finish(tb, b);
}

static int sc_next(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    (void)err;
    sc_task *K = impl;
    draw(K, &K->train, rng, b);
    *n_tokens = K->count;
    return 0;
}

static int sc_evaluate(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s, tfm_err *err)
{
    sc_task *K = impl;
    return tfm_task_text_loss(K, draw, &K->val, K->eval_batches, m, seed, s, err);
}

static int sc_has_val(void *impl)
{
    return ((sc_task *)impl)->val.n > 0;
}

static void sc_describe(void *impl, char *buf, size_t size)
{
    sc_task *K = impl;
    static const char *const what[] = {
        [TFM_CONFIG_NOISE_IID] = "i.i.d. noise, a sentinel per run",
        [TFM_CONFIG_NOISE_DROP] = "i.i.d. noise dropped from the inputs",
        [TFM_CONFIG_NOISE_BERT] = "i.i.d. noise masked, BERT-style",
    };
    if (K->noise == TFM_CONFIG_NOISE_SPANS)
        snprintf(buf, size, "%zu training tokens, %zu validation tokens (span corruption: "
                            "windows of %zu tokens, %zu noise spans, %d inputs, %d targets)",
                 K->train.n, K->val.n, K->raw, K->spans, K->S, K->T);
    else
        snprintf(buf, size, "%zu training tokens, %zu validation tokens (span corruption: "
                            "windows of %zu tokens, %s, density %g)",
                 K->train.n, K->val.n, K->raw, what[K->noise], K->density);
}

static void sc_free(void *impl)
{
    sc_task *K = impl;
    tfm_tokens_free(&K->train);
    tfm_tokens_free(&K->val);
    free(K->sentinel);
    free(K->special);
    free(K->window);
    free(K->mask);
    tfm_text_batch_free(&K->tb);
    free(K);
}

static const tfm_task_ops sc_ops = {
    .name = "span-corruption",
    .describe = sc_describe,
    .has_val = sc_has_val,
    .next = sc_next,
    .evaluate = sc_evaluate,
    .free = sc_free,
};

/* <extra_id_0> .. <extra_id_{max-1}> from the tokenizer, stopping at the
 * first it lacks; fewer than need is an error saying why they are needed. */
static int sentinels(sc_task *K, const tfm_tokenizer *tok, const char *name, size_t need,
                     size_t max, const char *why, tfm_err *err)
{
    K->sentinel = tfm_malloc((max ? max : 1) * sizeof *K->sentinel);
    for (size_t i = 0; i < max; i++) {
        char piece[32];
        int n = snprintf(piece, sizeof piece, "<extra_id_%zu>", i);
        int64_t id = tfm_tokenizer_token_id(tok, piece, (size_t)n);
        if (id < 0 && i >= need)
            break;
        if (id < 0)
            return tfm_err_set(err, "%s: no sentinel %s: %s; tfm-tokenize train -m unigram "
                               "--extra-ids %zu makes a tokenizer with <extra_id_0> to "
                               "<extra_id_%zu>", name, piece, why, need, need - 1);
        if (id >= K->V)
            return tfm_err_set(err, "%s: sentinel %s is id %lld, outside model.vocab_size %u",
                               name, piece, (long long)id, K->V);
        K->sentinel[K->n_sentinel++] = (int32_t)id;
    }
    return 0;
}

/* The window and the longest inputs and targets (with EOS) of train.noise. */
static int lengths(sc_task *K, tfm_config *cfg, tfm_err *err)
{
    size_t block = (size_t)cfg->model.block_size;
    if (K->noise != TFM_CONFIG_NOISE_SPANS) {
        /* inputs and targets are at most the window (each noise or
         * non-noise run has a token for its sentinel) */
        if (block < 3)
            return tfm_err_set(err, "model.block_size %zu is too short to corrupt: a window "
                               "needs at least 2 tokens and EOS", block);
        K->raw = block - 1;
        K->S = K->T = (int)block;
        return 0;
    }
    size_t tl = 0;
    K->raw = tfm_span_raw_length(block, K->density, K->mean_span, &tl);
    if (K->raw == 0)
        return tfm_err_set(err, "model.block_size %zu is too short to corrupt: span "
                           "corruption needs at least 3 inputs (a token, a sentinel, EOS)",
                           block);
    if (tl > block)
        return tfm_err_set(err, "train.noise_density %g: windows of %zu tokens give %zu "
                           "targets, more than model.block_size %zu (lower the density)",
                           K->density, K->raw, tl, block);
    size_t noise, in;
    tfm_span_counts(K->raw, K->density, K->mean_span, &noise, &K->spans);
    tfm_span_lengths(K->raw, K->density, K->mean_span, &in, &tl);
    K->S = (int)in;
    K->T = (int)tl;
    return 0;
}

static int load(sc_task *K, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    const char *name = cfg->data.tokenizer;
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    if (sp->eos < 0)
        return tfm_err_set(err, "%s: the tokenizer has no end-of-text token, which ends the "
                           "inputs and targets of span corruption", name);
    K->eos = (int32_t)sp->eos;
    K->bos = (int32_t)tfm_task_decoder_start(cfg, sp);
    K->pad = sp->pad >= 0 ? (int32_t)sp->pad : K->eos;
    K->noise = cfg->train.noise;
    K->density = cfg->train.noise_density;
    K->mean_span = cfg->train.mean_span;
    K->random_prob = cfg->train.random_token_prob;
    if (lengths(K, cfg, err) < 0 ||
        tfm_task_text_open(&K->train, &K->val, cfg, tok, K->raw, err) < 0)
        return -1;
    K->V = (uint32_t)cfg->model.vocab_size;
    char why[160];
    int rc = 0;
    switch (K->noise) {
    case TFM_CONFIG_NOISE_SPANS:
        snprintf(why, sizeof why, "train.task span-corruption needs %zu (one per noise span)",
                 K->spans);
        rc = sentinels(K, tok, name, K->spans, K->spans, why, err);
        break;
    case TFM_CONFIG_NOISE_IID:
        rc = sentinels(K, tok, name, 1, K->raw,
                       "train.noise iid needs one per run of noise tokens (a window is cut "
                       "before the first run without one)", err);
        break;
    case TFM_CONFIG_NOISE_BERT:
        /* all of them, to keep them out of the random tokens */
        rc = sentinels(K, tok, name, 1, K->V,
                       "train.noise bert masks with <extra_id_0>, as T5 does", err);
        break;
    }
    if (rc < 0)
        return -1;
    if (K->noise == TFM_CONFIG_NOISE_BERT) {
        K->special = tfm_calloc(K->V, 1);
        const int64_t ids[] = {sp->unk, sp->pad, sp->bos, sp->eos, sp->cls, sp->sep, sp->mask};
        for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
            if (ids[i] >= 0 && ids[i] < K->V)
                K->special[ids[i]] = 1;
        size_t n_special = 0;
        for (size_t i = 0; i < K->n_sentinel; i++)
            K->special[K->sentinel[i]] = 1;
        for (uint32_t i = 0; i < K->V; i++)
            n_special += K->special[i];
        if (K->random_prob > 0 && n_special == K->V)
            return tfm_err_set(err, "every id of the vocabulary (%u) is special: no random "
                               "replacement token to draw (set train.random_token_prob 0)",
                               K->V);
    }
    return 0;
}

int tfm_task_spancorrupt_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok,
                              tfm_err *err)
{
    sc_task *K = tfm_malloc(sizeof *K);
    memset(K, 0, sizeof *K);
    if (load(K, cfg, tok, err) < 0) {
        sc_free(K);
        return -1;
    }
    K->B = (int)cfg->train.batch_size;
    K->eval_batches = cfg->train.eval_batches;
    K->window = tfm_malloc(K->raw * sizeof *K->window);
    K->mask = tfm_malloc(K->raw);
    tfm_text_batch_init(&K->tb, K->B, K->S, K->T, K->bos, K->pad);
    t->ops = &sc_ops;
    t->impl = K;
    return 0;
}
