/* A reward model (train.task reward), InstructGPT's second stage: a
 * decoder with a scalar head (the classifier, model.classes 1, on the last
 * token: data/reward.h) learns from data.text's {"prompt", "chosen",
 * "rejected"} JSON Lines (data/chat.h) to score the chosen answer higher,
 * with TRL's RewardTrainer's loss:
 *
 *     loss = mean over the batch's pairs of −log σ(r(p + c) − r(p + r))
 *
 * each text prompt + answer + end-of-text (TRL's), cut to block_size ids
 * (data.truncate head) or refused naming its line.  A batch is
 * train.batch_size pairs, the chosen texts then the rejected; the loss
 * couples each pair's rows, so the task computes it (tfm_task_step) and
 * hands the rows' factors to tfm_model_backward_rows.  Validation: every
 * pair once, the mean loss, the fraction whose chosen answer scores
 * higher (reward_accuracy) and the mean margin r_c − r_r. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/chat.h"
#include "data/reward.h"
#include "train/task_internal.h"

typedef struct rm_set {
    uint32_t **ids;   /* [2n]: the chosen texts, then the rejected */
    int *len;
    size_t n;         /* pairs */
} rm_set;

typedef struct rm_task {
    rm_set train, val;
    size_t cut;
    int B, T;
    tfm_reward_batch rb;
    const uint32_t **rows; /* [2B] */
    int *rlen;
    float *w;              /* [2B] */
    size_t *draw;          /* [B] */
    int n_cur;
} rm_task;

static void set_free(rm_set *s)
{
    for (size_t i = 0; i < 2 * s->n; i++)
        free(s->ids[i]);
    free(s->ids);
    free(s->len);
    memset(s, 0, sizeof *s);
}

static void build(rm_task *K, const rm_set *s, const size_t *idx, int n, tfm_batch *b)
{
    for (int i = 0; i < n; i++) {
        K->rows[i] = s->ids[idx[i]];
        K->rlen[i] = s->len[idx[i]];
        K->rows[n + i] = s->ids[s->n + idx[i]];
        K->rlen[n + i] = s->len[s->n + idx[i]];
    }
    K->n_cur = n;
    tfm_reward_batch_fill(&K->rb, K->rows, K->rlen, 2 * n, b);
}

static int rm_next(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    (void)err;
    rm_task *K = impl;
    for (int i = 0; i < K->B; i++)
        K->draw[i] = (size_t)tfm_rng_below(rng, K->train.n);
    build(K, &K->train, K->draw, K->B, b);
    *n_tokens = 0;
    for (int i = 0; i < 2 * K->B; i++)
        *n_tokens += (size_t)K->rlen[i];
    return 0;
}

static double log_sigmoid(double z)
{
    return z >= 0 ? -log1p(exp(-z)) : z - log1p(exp(z));
}

/* The last forward's pairs: loss, correct, margin sums; with w, the rows'
 * factors d(scale · mean loss)/d(score). */
static void pair_terms(rm_task *K, tfm_model *m, float scale, float *w, double s[3])
{
    int rows, cols, n = K->n_cur;
    const float *z = tfm_model_head_out(m, TFM_HEAD_CLASS, &rows, &cols);
    for (int i = 0; i < n; i++) {
        double d = (double)z[i] - (double)z[n + i];
        s[0] -= log_sigmoid(d);
        s[1] += d > 0;
        s[2] += d;
        if (w) {
            double g = -scale * exp(log_sigmoid(-d)) / n;
            w[i] = (float)g;
            w[n + i] = (float)-g;
        }
    }
}

static int rm_step(void *impl, tfm_model *m, const tfm_batch *b, float scale, float *loss,
                   tfm_err *err)
{
    rm_task *K = impl;
    if (tfm_model_forward_batch(m, b, NULL, err) < 0)
        return -1;
    double s[3] = {0, 0, 0};
    pair_terms(K, m, scale, K->w, s);
    tfm_model_backward_rows(m, TFM_HEAD_CLASS, K->w);
    *loss = (float)(s[0] / K->n_cur);
    return 0;
}

static int rm_evaluate(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s, tfm_err *err)
{
    (void)seed;
    rm_task *K = impl;
    double sum[3] = {0, 0, 0};
    for (size_t first = 0; first < K->val.n; first += (size_t)K->B) {
        size_t n = K->val.n - first < (size_t)K->B ? K->val.n - first : (size_t)K->B;
        for (size_t i = 0; i < n; i++)
            K->draw[i] = first + i;
        tfm_batch b;
        build(K, &K->val, K->draw, (int)n, &b);
        if (tfm_model_forward_batch(m, &b, NULL, err) < 0)
            return -1;
        pair_terms(K, m, 1.0f, NULL, sum);
    }
    double n = (double)K->val.n;
    s->loss = sum[0] / n;
    s->values[0] = sum[1] / n;
    s->values[1] = sum[2] / n;
    s->metric = s->values[0];
    s->metric_name = "reward_accuracy";
    return 0;
}

static int rm_metrics(void *impl, const char **names)
{
    (void)impl;
    names[0] = "reward_accuracy";
    names[1] = "reward_margin";
    return 2;
}

static int rm_has_val(void *impl)
{
    return ((rm_task *)impl)->val.n > 0;
}

static void rm_describe(void *impl, char *buf, size_t size)
{
    rm_task *K = impl;
    int len = snprintf(buf, size, "%zu training pairs, %zu validation pairs (reward model)",
                       K->train.n, K->val.n);
    if (K->cut && len > 0 && (size_t)len < size)
        snprintf(buf + len, size - (size_t)len, "; %zu text%s cut to %d tokens "
                 "(data.truncate head)", K->cut, K->cut == 1 ? "" : "s", K->T);
}

static void rm_free(void *impl)
{
    rm_task *K = impl;
    set_free(&K->train);
    set_free(&K->val);
    tfm_reward_batch_free(&K->rb);
    free(K->rows);
    free(K->rlen);
    free(K->w);
    free(K->draw);
    free(K);
}

static const tfm_task_ops rm_ops = {
    .name = "reward",
    .describe = rm_describe,
    .has_val = rm_has_val,
    .next = rm_next,
    .evaluate = rm_evaluate,
    .free = rm_free,
    .metrics = rm_metrics,
    .step = rm_step,
};

static int keep_text(rm_task *K, rm_set *s, size_t k, const tfm_ids *ids, uint32_t V,
                     int truncate_error, const char *name, long line, tfm_err *err)
{
    size_t L = ids->len;
    if (L > (size_t)K->T && truncate_error)
        return tfm_err_at(err, name, line, 0, "a prompt and answer of %zu tokens, more than "
                          "model.block_size %d (data.truncate head keeps the first %d)", L,
                          K->T, K->T);
    if (L > (size_t)K->T) {
        L = (size_t)K->T;
        K->cut++;
    }
    s->ids[k] = tfm_malloc(L * sizeof **s->ids);
    s->len[k] = (int)L;
    for (size_t i = 0; i < L; i++) {
        if (ids->data[i] >= V)
            return tfm_err_at(err, name, line, 0, "token id %u is outside model.vocab_size %u",
                              ids->data[i], V);
        s->ids[k][i] = ids->data[i];
    }
    return 0;
}

static int encode_set(rm_task *K, rm_set *s, const tfm_chat_data *d, size_t from, size_t n,
                      const tfm_tokenizer *tok, uint32_t V, int terr, tfm_err *err)
{
    tfm_tok_scratch *sc = tfm_tok_scratch_new(tok);
    tfm_ids c = {0}, r = {0};
    s->ids = tfm_calloc(2 * n + 1, sizeof *s->ids);
    s->len = tfm_calloc(2 * n + 1, sizeof *s->len);
    s->n = n;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const tfm_chat_example *e = &d->ex[from + i];
        tfm_pref_encode(e, tok, sc, &c, &r);
        rc = keep_text(K, s, i, &c, V, terr, d->name, e->line, err);
        if (rc == 0)
            rc = keep_text(K, s, n + i, &r, V, terr, d->name, e->line, err);
    }
    tfm_ids_free(&c);
    tfm_ids_free(&r);
    tfm_tok_scratch_free(sc);
    return rc;
}

static int load(rm_task *K, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    if (sp->eos < 0)
        return tfm_err_set(err, "train.task reward: the tokenizer has no end-of-text token, "
                           "which ends each answer (the token the reward is read at)");
    if (cfg->model.classes == 0)
        cfg->model.classes = 1;
    else if (cfg->model.classes != 1)
        return tfm_err_set(err, "model.classes %lld with train.task reward: a reward model "
                           "has one output", (long long)cfg->model.classes);
    if (cfg->model.tags || cfg->model.span || cfg->model.nsp)
        return tfm_err_set(err, "train.task reward with model.tags, model.span or model.nsp: "
                           "those heads would get no targets");
    tfm_reward_batch_init(&K->rb, 2 * K->B, K->T, sp->pad >= 0 ? (int32_t)sp->pad
                                                               : (int32_t)sp->eos);
    tfm_chat_data tr = {0}, va = {0};
    if (tfm_chat_read_file(&tr, cfg->data.text, 1, err) < 0)
        return -1;
    int rc = -1;
    size_t ntr = tr.n, nva = 0;
    if (cfg->data.val[0]) {
        if (tfm_chat_read_file(&va, cfg->data.val, 1, err) < 0)
            goto out;
        nva = va.n;
    } else {
        nva = (size_t)((double)tr.n * cfg->data.val_fraction);
        if (nva >= tr.n)
            nva = tr.n - 1;
        ntr = tr.n - nva;
    }
    if (tfm_task_vocab_from_tokenizer(cfg, tok, err) < 0)
        goto out;
    uint32_t V = (uint32_t)cfg->model.vocab_size;
    int terr = cfg->data.truncate == TFM_CONFIG_TRUNCATE_ERROR;
    if (encode_set(K, &K->train, &tr, 0, ntr, tok, V, terr, err) < 0 ||
        encode_set(K, &K->val, cfg->data.val[0] ? &va : &tr, cfg->data.val[0] ? 0 : ntr, nva,
                   tok, V, terr, err) < 0)
        goto out;
    rc = 0;
out:
    tfm_chat_data_free(&tr);
    tfm_chat_data_free(&va);
    return rc;
}

int tfm_task_reward_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    if (!tok)
        return tfm_err_set(err, "train.task reward needs a tokenizer (data.tokenizer or "
                           "train.init's)");
    rm_task *K = tfm_calloc(1, sizeof *K);
    K->T = (int)cfg->model.block_size;
    K->B = (int)cfg->train.batch_size;
    K->rows = tfm_malloc(2 * (size_t)K->B * sizeof *K->rows);
    K->rlen = tfm_malloc(2 * (size_t)K->B * sizeof *K->rlen);
    K->w = tfm_malloc(2 * (size_t)K->B * sizeof *K->w);
    K->draw = tfm_malloc((size_t)K->B * sizeof *K->draw);
    if (load(K, cfg, tok, err) < 0) {
        rm_free(K);
        return -1;
    }
    t->ops = &rm_ops;
    t->impl = K;
    return 0;
}
