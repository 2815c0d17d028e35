/* T5's span-corruption pre-training for encoder-decoders (train.task
 * span-corruption; the corruption itself in train/spancorrupt.h).
 *
 * data.text is read as one token stream (T5 concatenates its documents the
 * same way); a training sequence is a random window of the raw length that
 * random_spans_helper gives for model.block_size inputs, corrupted with a
 * fresh mask.  Every window has the same counts, so a batch has no
 * padding: source = inputs + EOS, decoder labels = targets + EOS, decoder
 * input = BOS + targets (BOS as the seq2seq task and tfm-generate use it).
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

/* ---- the corruption ----------------------------------------------------------- */

void tfm_span_counts(size_t length, double density, double mean_span, size_t *noise,
                     size_t *spans)
{
    /* tf.math.round on float32, as random_spans_noise_mask computes them */
    float nf = rintf((float)length * (float)density);
    size_t n = nf < 1 ? 1 : (size_t)nf;
    if (n > length - 1)
        n = length - 1;
    float sf = rintf((float)n / (float)mean_span);
    size_t s = sf < 1 ? 1 : (size_t)sf;
    if (s > length - n)
        s = length - n;
    *noise = n;
    *spans = s;
}

void tfm_span_lengths(size_t length, double density, double mean_span, size_t *inputs,
                      size_t *targets)
{
    size_t noise, spans;
    tfm_span_counts(length, density, mean_span, &noise, &spans);
    *inputs = length - noise + spans + 1;
    *targets = noise + spans + 1;
}

size_t tfm_span_raw_length(size_t inputs_length, double density, double mean_span,
                           size_t *targets_length)
{
    size_t in, tg, len = 1;
    /* inputs grow with the raw length (one more token adds at most one
     * input), so the walk stops at the longest that fits */
    for (;;) {
        tfm_span_lengths(len + 1, density, mean_span, &in, &tg);
        if (in > inputs_length)
            break;
        len++;
    }
    if (len < 2)
        return 0;
    if (targets_length) {
        tfm_span_lengths(len, density, mean_span, &in, &tg);
        *targets_length = tg;
    }
    return len;
}

/* Lengths of k non-empty segments of n items, the k - 1 cuts among the
 * n - 1 gaps uniform (T5's _random_segmentation), by selection sampling. */
static void segment(size_t n, size_t k, size_t *len, tfm_rng *rng)
{
    size_t need = k - 1, seg = 0, cur = 1;
    for (size_t gap = 1; gap < n; gap++) {
        if (need && tfm_rng_below(rng, n - gap) < need) {
            len[seg++] = cur;
            cur = 0;
            need--;
        }
        cur++;
    }
    len[seg] = cur;
}

void tfm_span_noise_mask(unsigned char *mask, size_t length, double density,
                         double mean_span, tfm_rng *rng)
{
    size_t noise, spans;
    tfm_span_counts(length, density, mean_span, &noise, &spans);
    size_t *keep = tfm_malloc(2 * spans * sizeof *keep), *drop = keep + spans;
    segment(length - noise, spans, keep, rng);
    segment(noise, spans, drop, rng);
    size_t p = 0;
    for (size_t s = 0; s < spans; s++) {
        memset(mask + p, 0, keep[s]);
        p += keep[s];
        memset(mask + p, 1, drop[s]);
        p += drop[s];
    }
    free(keep);
}

/* noise_span_to_unique_sentinel: tokens where mask[i] == which are dropped,
 * each run of them replaced by the next sentinel. */
static int squeeze(const int32_t *tokens, const unsigned char *mask, size_t length, int which,
                   const int32_t *sentinel, size_t n_sentinel, int32_t *out, size_t *n_out)
{
    size_t n = 0, s = 0;
    for (size_t i = 0; i < length; i++) {
        if (!mask[i] != !which)
            out[n++] = tokens[i];
        else if (i == 0 || !mask[i - 1] != !which) {
            if (s == n_sentinel)
                return -1;
            out[n++] = sentinel[s++];
        }
    }
    *n_out = n;
    return 0;
}

int tfm_span_corrupt(const int32_t *tokens, const unsigned char *mask, size_t length,
                     const int32_t *sentinel, size_t n_sentinel, int32_t *inputs,
                     size_t *n_inputs, int32_t *targets, size_t *n_targets)
{
    if (squeeze(tokens, mask, length, 1, sentinel, n_sentinel, inputs, n_inputs) < 0 ||
        squeeze(tokens, mask, length, 0, sentinel, n_sentinel, targets, n_targets) < 0)
        return -1;
    return 0;
}

/* ---- the task ------------------------------------------------------------------- */

typedef struct sc_task {
    tfm_tokens train, val;
    int B, S, T;              /* S inputs and T targets, each with EOS */
    size_t raw, spans;
    double density, mean_span;
    int64_t eval_batches;
    int32_t bos, eos;
    int32_t *sentinel;        /* [spans]: <extra_id_0> .. */
    int32_t *window;          /* [raw] */
    unsigned char *mask;      /* [raw] */
    int32_t *src, *x, *y;     /* [B, S], [B, T], [B, T] */
    int *src_len;             /* [B] */
} sc_task;

static void draw(sc_task *K, const tfm_tokens *data, tfm_rng *rng, tfm_batch *b)
{
    for (int r = 0; r < K->B; r++) {
        size_t at = (size_t)tfm_rng_below(rng, data->n - K->raw + 1);
        for (size_t i = 0; i < K->raw; i++)
            K->window[i] = (int32_t)tfm_tokens_at(data, at + i);
        tfm_span_noise_mask(K->mask, K->raw, K->density, K->mean_span, rng);
        int32_t *s = K->src + (size_t)r * K->S, *x = K->x + (size_t)r * K->T,
                *y = K->y + (size_t)r * K->T;
        size_t ns, nt;
        int rc = tfm_span_corrupt(K->window, K->mask, K->raw, K->sentinel, K->spans, s, &ns, y,
                                  &nt);
        TFM_ASSERT(rc == 0 && ns + 1 == (size_t)K->S && nt + 1 == (size_t)K->T);
        s[ns] = K->eos;
        y[nt] = K->eos;
        x[0] = K->bos;
        memcpy(x + 1, y, nt * sizeof *x);
        K->src_len[r] = K->S;
    }
    *b = (tfm_batch){.inputs = K->x, .targets = K->y, .B = K->B, .T = K->T, .src = K->src,
                     .S = K->S, .src_lengths = K->src_len};
}

static int sc_next(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    (void)err;
    sc_task *K = impl;
    draw(K, &K->train, rng, b);
    *n_tokens = (size_t)K->B * (size_t)K->T;
    return 0;
}

/* The mean loss per target token over eval_batches batches drawn from seed. */
static int sc_evaluate(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s, tfm_err *err)
{
    sc_task *K = impl;
    tfm_rng rng;
    tfm_rng_seed(&rng, seed);
    double sum = 0;
    for (int64_t i = 0; i < K->eval_batches; i++) {
        tfm_batch b;
        draw(K, &K->val, &rng, &b);
        float l;
        if (tfm_model_forward_batch(m, &b, &l, err) < 0)
            return -1;
        sum += l;
    }
    s->loss = sum / (double)K->eval_batches;
    return 0;
}

static int sc_has_val(void *impl)
{
    return ((sc_task *)impl)->val.n > 0;
}

static void sc_describe(void *impl, char *buf, size_t size)
{
    sc_task *K = impl;
    snprintf(buf, size, "%zu training tokens, %zu validation tokens (span corruption: windows "
                        "of %zu tokens, %zu noise spans, %d inputs, %d targets)",
             K->train.n, K->val.n, K->raw, K->spans, K->S, K->T);
}

static void sc_free(void *impl)
{
    sc_task *K = impl;
    tfm_tokens_free(&K->train);
    tfm_tokens_free(&K->val);
    free(K->sentinel);
    free(K->window);
    free(K->mask);
    free(K->src);
    free(K->x);
    free(K->y);
    free(K->src_len);
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

/* <extra_id_0> .. <extra_id_{n-1}> from the tokenizer. */
static int sentinels(sc_task *K, const tfm_tokenizer *tok, const char *name, int64_t V,
                     tfm_err *err)
{
    K->sentinel = tfm_malloc(K->spans * sizeof *K->sentinel);
    for (size_t i = 0; i < K->spans; i++) {
        char piece[32];
        int n = snprintf(piece, sizeof piece, "<extra_id_%zu>", i);
        int64_t id = tfm_tokenizer_token_id(tok, piece, (size_t)n);
        if (id < 0)
            return tfm_err_set(err, "%s: no sentinel %s: train.task span-corruption needs %zu "
                               "(one per noise span); tfm-tokenize train -m unigram "
                               "--extra-ids %zu makes a tokenizer with <extra_id_0> to "
                               "<extra_id_%zu>", name, piece, K->spans, K->spans,
                               K->spans - 1);
        if (id >= V)
            return tfm_err_set(err, "%s: sentinel %s is id %lld, outside model.vocab_size %lld",
                               name, piece, (long long)id, (long long)V);
        K->sentinel[i] = (int32_t)id;
    }
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
    K->bos = sp->bos >= 0 ? (int32_t)sp->bos : K->eos;
    K->density = cfg->train.noise_density;
    K->mean_span = cfg->train.mean_span;
    size_t tl = 0;
    K->raw = tfm_span_raw_length((size_t)cfg->model.block_size, K->density, K->mean_span, &tl);
    if (K->raw == 0)
        return tfm_err_set(err, "model.block_size %lld is too short to corrupt: span "
                           "corruption needs at least 3 inputs (a token, a sentinel, EOS)",
                           (long long)cfg->model.block_size);
    if (tl > (size_t)cfg->model.block_size)
        return tfm_err_set(err, "train.noise_density %g: windows of %zu tokens give %zu "
                           "targets, more than model.block_size %lld (lower the density)",
                           K->density, K->raw, tl, (long long)cfg->model.block_size);
    size_t noise;
    tfm_span_counts(K->raw, K->density, K->mean_span, &noise, &K->spans);
    size_t in;
    tfm_span_lengths(K->raw, K->density, K->mean_span, &in, &tl);
    K->S = (int)in;
    K->T = (int)tl;
    if (tfm_tokens_from_text(&K->train, &K->val, cfg->data.text, tok,
                             cfg->data.val[0] ? 0 : cfg->data.val_fraction, err) < 0)
        return -1;
    if (cfg->data.val[0] && tfm_tokens_from_text(&K->val, NULL, cfg->data.val, tok, 0, err) < 0)
        return -1;
    if (tfm_task_check_vocab(&K->train, &K->val, cfg, tok, err) < 0 ||
        sentinels(K, tok, name, cfg->model.vocab_size, err) < 0)
        return -1;
    if (K->train.n < K->raw)
        return tfm_err_set(err, "%s: %zu tokens, fewer than the %zu of a window (model."
                           "block_size %lld inputs)", K->train.name, K->train.n, K->raw,
                           (long long)cfg->model.block_size);
    if (K->val.n && K->val.n < K->raw)
        return tfm_err_set(err, "%s: %zu validation tokens, fewer than the %zu of a window",
                           K->val.name, K->val.n, K->raw);
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
    K->src = tfm_malloc((size_t)K->B * K->S * sizeof *K->src);
    K->x = tfm_malloc((size_t)K->B * K->T * sizeof *K->x);
    K->y = tfm_malloc((size_t)K->B * K->T * sizeof *K->y);
    K->src_len = tfm_malloc((size_t)K->B * sizeof *K->src_len);
    t->ops = &sc_ops;
    t->impl = K;
    return 0;
}
