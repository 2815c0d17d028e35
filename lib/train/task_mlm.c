/* BERT's masked-LM task (optionally with next-sentence prediction) on a
 * token stream: each sequence is [CLS] A [SEP] B [SEP] from a window of the
 * stream, with round(mask_prob·length) content positions chosen and
 * corrupted 80/10/10 (man/tfm-config.5, train.task).  Every draw comes from
 * the rng passed in, so a resumed run repeats the masks bit for bit. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "train/task_internal.h"

typedef struct mlm_task {
    tfm_tokens train, val;
    int B, T, V, nsp;
    int64_t eval_batches;
    int32_t cls, sep, mask;
    unsigned char *special;   /* [V] 1: never drawn as a random token */
    double p_mask, p_tok, p_rand, p_short;
    int32_t *x, *y, *seg;     /* [B, T] */
    int *len;                 /* [B] */
    int32_t *labels;          /* [B] nsp: 0 B follows A, 1 B is random */
    int *pick;                /* [T] scratch for choosing positions */
} mlm_task;

static int32_t random_token(const mlm_task *L, tfm_rng *rng)
{
    for (;;) {
        int32_t t = (int32_t)tfm_rng_below(rng, (uint64_t)L->V);
        if (!L->special[t])
            return t;
    }
}

/* Row r of the batch from data; returns the positions chosen. */
static int draw_row(mlm_task *L, const tfm_tokens *data, tfm_rng *rng, int r)
{
    int T = L->T, content = T - 3;
    if (L->p_short > 0 && tfm_rng_double(rng) < L->p_short)
        content = 2 + (int)tfm_rng_below(rng, (uint64_t)content - 1);
    int na = (content + 1) / 2, nb = content - na;
    size_t off = (size_t)tfm_rng_below(rng, data->n - (size_t)content + 1);
    size_t off_b = off + (size_t)na;
    int label = 0;
    if (L->nsp && tfm_rng_double(rng) < 0.5) {
        off_b = (size_t)tfm_rng_below(rng, data->n - (size_t)nb + 1);
        label = 1;
    }
    int32_t *x = L->x + (size_t)r * T, *y = L->y + (size_t)r * T, *seg = L->seg + (size_t)r * T;
    int n = 0, np = 0;
    x[n] = L->cls;
    seg[n++] = 0;
    for (int i = 0; i < na; i++) {
        L->pick[np++] = n;
        x[n] = (int32_t)tfm_tokens_at(data, off + (size_t)i);
        seg[n++] = 0;
    }
    x[n] = L->sep;
    seg[n++] = 0;
    for (int i = 0; i < nb; i++) {
        L->pick[np++] = n;
        x[n] = (int32_t)tfm_tokens_at(data, off_b + (size_t)i);
        seg[n++] = 1;
    }
    x[n] = L->sep;
    seg[n++] = 1;
    L->len[r] = n;
    for (int t = 0; t < T; t++)
        y[t] = -1;
    for (int t = n; t < T; t++)
        x[t] = seg[t] = 0;
    L->labels[r] = label;
    /* k distinct content positions: a partial Fisher-Yates shuffle */
    int k = (int)lrint(L->p_mask * content);
    k = k < 1 ? 1 : k > content ? content : k;
    for (int i = 0; i < k; i++) {
        int j = i + (int)tfm_rng_below(rng, (uint64_t)(np - i));
        int p = L->pick[j];
        L->pick[j] = L->pick[i];
        L->pick[i] = p;
        y[p] = x[p];
        double u = tfm_rng_double(rng);
        if (u < L->p_tok)
            x[p] = L->mask;
        else if (u >= 1.0 - L->p_rand)
            x[p] = random_token(L, rng);
    }
    return k;
}

static size_t draw(mlm_task *L, const tfm_tokens *data, tfm_rng *rng, tfm_batch *b)
{
    size_t chosen = 0;
    for (int r = 0; r < L->B; r++)
        chosen += (size_t)draw_row(L, data, rng, r);
    *b = (tfm_batch){.inputs = L->x, .targets = L->y, .B = L->B, .T = L->T,
                     .segments = L->seg, .lengths = L->len,
                     .labels = L->nsp ? L->labels : NULL};
    return chosen;
}

static int mlm_next(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    (void)err;
    mlm_task *L = impl;
    draw(L, &L->train, rng, b);
    /* every position is read, whether or not it counts in the loss */
    *n_tokens = 0;
    for (int r = 0; r < L->B; r++)
        *n_tokens += (size_t)L->len[r];
    return 0;
}

/* The MLM loss over every chosen position of eval_batches batches drawn
 * from seed, and the share of them predicted right (argmax). */
static int mlm_evaluate(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s, tfm_err *err)
{
    mlm_task *L = impl;
    tfm_rng rng;
    tfm_rng_seed(&rng, seed);
    double loss = 0;
    long n = 0, right = 0;
    for (int64_t i = 0; i < L->eval_batches; i++) {
        tfm_batch b;
        draw(L, &L->val, &rng, &b);
        if (tfm_model_forward_batch(m, &b, NULL, err) < 0)
            return -1;
        int rows, V;
        const float *z = tfm_model_head_out(m, TFM_HEAD_LM, &rows, &V);
        /* the rows are the positions with targets, in order */
        long k = 0;
        for (size_t p = 0; p < (size_t)L->B * L->T; p++) {
            if (L->y[p] < 0)
                continue;
            const float *row = z + (size_t)k++ * V;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (row[v] > row[best])
                    best = v;
            right += best == L->y[p];
        }
        TFM_ASSERT(k == rows);
        loss += (double)m->head_loss[TFM_HEAD_LM] * (double)rows;
        n += rows;
    }
    s->loss = n ? loss / (double)n : 0.0;
    s->metric = n ? (double)right / (double)n : 0.0;
    s->metric_name = "masked_accuracy";
    return 0;
}

static int mlm_has_val(void *impl)
{
    return ((mlm_task *)impl)->val.n > 0;
}

static void mlm_describe(void *impl, char *buf, size_t size)
{
    mlm_task *L = impl;
    snprintf(buf, size, "%zu training tokens, %zu validation tokens (masked LM%s)", L->train.n,
             L->val.n, L->nsp ? " + next sentence" : "");
}

static void mlm_free(void *impl)
{
    mlm_task *L = impl;
    tfm_tokens_free(&L->train);
    tfm_tokens_free(&L->val);
    free(L->special);
    free(L->x);
    free(L->y);
    free(L->seg);
    free(L->len);
    free(L->labels);
    free(L->pick);
    free(L);
}

static const tfm_task_ops mlm_ops = {
    .name = "mlm",
    .describe = mlm_describe,
    .has_val = mlm_has_val,
    .next = mlm_next,
    .evaluate = mlm_evaluate,
    .free = mlm_free,
};

static const tfm_task_ops mlm_nsp_ops = {
    .name = "mlm+nsp",
    .describe = mlm_describe,
    .has_val = mlm_has_val,
    .next = mlm_next,
    .evaluate = mlm_evaluate,
    .free = mlm_free,
};

/* An id from the config, else the tokenizer's special. */
static int special_id(int64_t cfg_id, int64_t tok_id, const char *key, const char *name,
                      int V, int32_t *out, tfm_err *err)
{
    int64_t id = cfg_id >= 0 ? cfg_id : tok_id;
    if (id < 0)
        return tfm_err_set(err, "train.task mlm needs the id of %s: set %s or use a "
                                "tokenizer that has it", name, key);
    if (id >= V)
        return tfm_err_set(err, "%s %lld is outside the vocabulary (size %d)", key,
                           (long long)id, V);
    *out = (int32_t)id;
    return 0;
}

static int check_model(const tfm_config *cfg, int nsp, tfm_err *err)
{
    const char *task = nsp ? "mlm+nsp" : "mlm";
    if (cfg->model.kind != TFM_CONFIG_KIND_ENCODER)
        return tfm_err_set(err, "train.task %s needs model.kind encoder", task);
    if (!cfg->model.mlm_head)
        return tfm_err_set(err, "train.task %s needs model.mlm_head: true", task);
    if (cfg->model.segments < 2)
        return tfm_err_set(err, "train.task %s needs model.segments: 2 (sentences A and B)",
                           task);
    if (cfg->model.block_size < 5)
        return tfm_err_set(err, "train.task %s needs model.block_size of at least 5 "
                                "([CLS] A [SEP] B [SEP])", task);
    if (nsp && !(cfg->model.pooler && cfg->model.classes == 2 && cfg->model.nsp))
        return tfm_err_set(err, "train.task mlm+nsp needs model.pooler: true, model.classes: 2 "
                                "and model.nsp: true");
    if (!nsp && cfg->model.classes)
        return tfm_err_set(err, "train.task mlm with model.classes %lld: the classifier would "
                                "get no labels (train.task mlm+nsp trains the NSP head)",
                           (long long)cfg->model.classes);
    return 0;
}

static int load(mlm_task *L, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    if (cfg->train.mask_token_prob + cfg->train.random_token_prob > 1.0)
        return tfm_err_set(err, "train.mask_token_prob (%g) + train.random_token_prob (%g) "
                                "exceed 1", cfg->train.mask_token_prob,
                           cfg->train.random_token_prob);
    if (check_model(cfg, L->nsp, err) < 0 ||
        tfm_task_load_stream(&L->train, &L->val, cfg, tok, err) < 0)
        return -1;
    int V = (int)cfg->model.vocab_size, T = (int)cfg->model.block_size;
    const tfm_tok_specials *sp = tok ? tfm_tokenizer_specials(tok) : NULL;
    if (special_id(cfg->data.cls_id, sp ? sp->cls : -1, "data.cls_id", "[CLS]", V, &L->cls,
                   err) < 0 ||
        special_id(cfg->data.sep_id, sp ? sp->sep : -1, "data.sep_id", "[SEP]", V, &L->sep,
                   err) < 0 ||
        special_id(cfg->data.mask_id, sp ? sp->mask : -1, "data.mask_id", "[MASK]", V,
                   &L->mask, err) < 0)
        return -1;
    L->special = tfm_calloc((size_t)V, 1);
    for (int64_t i = 0; i < cfg->data.n_special && i < V; i++)
        L->special[i] = 1;
    L->special[L->cls] = L->special[L->sep] = L->special[L->mask] = 1;
    if (sp) {
        const int64_t ids[] = {sp->unk, sp->pad, sp->bos, sp->eos};
        for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
            if (ids[i] >= 0 && ids[i] < V)
                L->special[ids[i]] = 1;
    }
    int n_special = 0;
    for (int i = 0; i < V; i++)
        n_special += L->special[i];
    if (n_special == V)
        return tfm_err_set(err, "every id of the vocabulary (%d) is special: no random "
                                "replacement token to draw", V);
    size_t need = (size_t)T - 3;
    if (L->train.n < need)
        return tfm_err_set(err, "%s: %zu tokens, fewer than block_size - 3 = %zu", L->train.name,
                           L->train.n, need);
    if (L->val.n && L->val.n < need)
        return tfm_err_set(err, "%s: %zu tokens, fewer than block_size - 3 = %zu", L->val.name,
                           L->val.n, need);
    L->V = V;
    L->T = T;
    return 0;
}

int tfm_task_mlm_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    mlm_task *L = tfm_malloc(sizeof *L);
    memset(L, 0, sizeof *L);
    L->nsp = cfg->train.task == TFM_CONFIG_TASK_MLM_NSP;
    if (load(L, cfg, tok, err) < 0) {
        mlm_free(L);
        return -1;
    }
    L->B = (int)cfg->train.batch_size;
    L->eval_batches = cfg->train.eval_batches;
    L->p_mask = cfg->train.mask_prob;
    L->p_tok = cfg->train.mask_token_prob;
    L->p_rand = cfg->train.random_token_prob;
    L->p_short = cfg->train.short_seq_prob;
    size_t bt = (size_t)L->B * L->T;
    L->x = tfm_malloc(bt * sizeof *L->x);
    L->y = tfm_malloc(bt * sizeof *L->y);
    L->seg = tfm_malloc(bt * sizeof *L->seg);
    L->len = tfm_malloc((size_t)L->B * sizeof *L->len);
    L->labels = tfm_malloc((size_t)L->B * sizeof *L->labels);
    L->pick = tfm_malloc((size_t)L->T * sizeof *L->pick);
    t->ops = L->nsp ? &mlm_nsp_ops : &mlm_ops;
    t->impl = L;
    return 0;
}
