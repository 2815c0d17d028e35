/* The language-model task: random windows of a token stream (decoders). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "train/data.h"
#include "train/task_internal.h"

typedef struct lm_task {
    tfm_tokens train, val;
    int B, T;
    int64_t eval_batches;
    int64_t eot;            /* data.packing: the end-of-text id, else -1 */
    int32_t *x, *y;         /* [B, T] */
    int *docs;              /* [B, T] with packing */
} lm_task;

/* docs[b·T + t] = the first position of the document of x[b, t], a
 * document ending with (and including) each eot token. */
static void doc_starts(int *docs, const int32_t *x, int B, int T, int64_t eot)
{
    for (int b = 0; b < B; b++)
        for (int t = 0, d = 0; t < T; t++) {
            docs[(size_t)b * T + t] = d;
            if (x[(size_t)b * T + t] == eot)
                d = t + 1;
        }
}

static void draw(lm_task *L, const tfm_tokens *data, tfm_rng *rng, tfm_batch *b)
{
    tfm_tokens_batch(data, rng, L->B, L->T, L->x, L->y);
    if (L->docs)
        doc_starts(L->docs, L->x, L->B, L->T, L->eot);
    *b = (tfm_batch){.inputs = L->x, .targets = L->y, .B = L->B, .T = L->T,
                     .doc_start = L->docs};
}

static int lm_next(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    (void)err;
    lm_task *L = impl;
    draw(L, &L->train, rng, b);
    *n_tokens = (size_t)L->B * L->T;
    return 0;
}

/* The mean loss of eval_batches windows drawn from seed. */
static int lm_evaluate(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s, tfm_err *err)
{
    lm_task *L = impl;
    tfm_rng rng;
    tfm_rng_seed(&rng, seed);
    double sum = 0;
    for (int64_t i = 0; i < L->eval_batches; i++) {
        tfm_batch b;
        draw(L, &L->val, &rng, &b);
        float l;
        if (tfm_model_forward_batch(m, &b, &l, err) < 0)
            return -1;
        sum += l;
    }
    s->loss = sum / (double)L->eval_batches;
    return 0;
}

static int lm_has_val(void *impl)
{
    return ((lm_task *)impl)->val.n > 0;
}

static void lm_describe(void *impl, char *buf, size_t size)
{
    lm_task *L = impl;
    snprintf(buf, size, "%zu training tokens, %zu validation tokens", L->train.n, L->val.n);
}

static void lm_free(void *impl)
{
    lm_task *L = impl;
    tfm_tokens_free(&L->train);
    tfm_tokens_free(&L->val);
    free(L->x);
    free(L->y);
    free(L->docs);
    free(L);
}

static const tfm_task_ops lm_ops = {
    .name = "lm",
    .describe = lm_describe,
    .has_val = lm_has_val,
    .next = lm_next,
    .evaluate = lm_evaluate,
    .free = lm_free,
};

int tfm_task_load_stream(tfm_tokens *train, tfm_tokens *val, tfm_config *cfg,
                         const tfm_tokenizer *tok, tfm_err *err)
{
    if (cfg->data.text[0]) {
        if (tfm_tokens_from_text(train, val, cfg->data.text, tok, cfg->data.val_fraction,
                                 err) < 0)
            return -1;
    } else {
        if (tfm_tokens_open_npy(train, cfg->data.train, err) < 0)
            return -1;
        if (cfg->data.val[0] && tfm_tokens_open_npy(val, cfg->data.val, err) < 0)
            return -1;
    }
    return tfm_task_check_vocab(train, val, cfg, tok, err);
}

int tfm_task_vocab_from_tokenizer(tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    uint32_t tv = tfm_tokenizer_vocab_size(tok);
    if (cfg->model.vocab_size == 0)
        cfg->model.vocab_size = tv;
    else if ((uint32_t)cfg->model.vocab_size < tv)
        return tfm_err_set(err, "model.vocab_size %lld is smaller than the vocabulary of "
                           "tokenizer %s (%u tokens)", (long long)cfg->model.vocab_size,
                           cfg->data.tokenizer, tv);
    return 0;
}

int tfm_task_check_vocab(const tfm_tokens *train, const tfm_tokens *val, tfm_config *cfg,
                         const tfm_tokenizer *tok, tfm_err *err)
{
    if (tok) {
        if (tfm_task_vocab_from_tokenizer(cfg, tok, err) < 0)
            return -1;
    } else if (cfg->model.vocab_size == 0) {
        uint32_t mx = tfm_tokens_max(train), mv = tfm_tokens_max(val);
        cfg->model.vocab_size = (int64_t)(mx > mv ? mx : mv) + 1;
    }
    uint32_t V = (uint32_t)cfg->model.vocab_size;
    if (tfm_tokens_check(train, V, err) < 0 || tfm_tokens_check(val, V, err) < 0)
        return -1;
    return 0;
}

static int load(lm_task *L, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    if (tfm_task_load_stream(&L->train, &L->val, cfg, tok, err) < 0)
        return -1;
    L->eot = -1;
    if (cfg->data.packing) {
        L->eot = tok ? tfm_tokenizer_specials(tok)->eos : -1;
        if (L->eot < 0)
            return tfm_err_set(err, "data.packing needs an end-of-text token, and %s",
                               tok ? "the tokenizer has none"
                                   : "there is no data.tokenizer to name it");
    }
    size_t need = (size_t)cfg->model.block_size + 1;
    if (L->train.n < need)
        return tfm_err_set(err, "%s: %zu tokens, fewer than block_size + 1 = %zu", L->train.name,
                           L->train.n, need);
    if (L->val.n && L->val.n < need)
        return tfm_err_set(err, "%s: %zu tokens, fewer than block_size + 1 = %zu", L->val.name,
                           L->val.n, need);
    return 0;
}

int tfm_task_lm_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    lm_task *L = tfm_malloc(sizeof *L);
    memset(L, 0, sizeof *L);
    if (load(L, cfg, tok, err) < 0) {
        lm_free(L);
        return -1;
    }
    L->B = (int)cfg->train.batch_size;
    L->T = (int)cfg->model.block_size;
    L->eval_batches = cfg->train.eval_batches;
    size_t bt = (size_t)L->B * L->T;
    L->x = tfm_malloc(bt * sizeof *L->x);
    L->y = tfm_malloc(bt * sizeof *L->y);
    if (L->eot >= 0)
        L->docs = tfm_malloc(bt * sizeof *L->docs);
    t->ops = &lm_ops;
    t->impl = L;
    return 0;
}
