/* The prefix language model for decoders (train.task prefix-lm), the T5
 * study's "prefix LM": a row is a prefix the model reads with full
 * (bidirectional) attention and a continuation it predicts causally; the
 * loss counts only the continuation (model/transformer.h tfm_batch.prefix_len,
 * nn/attention.h TFM_MASK_PREFIX).
 *
 * train.prefix_from random: a window of block_size + 1 tokens of the token
 * stream (data.text with data.tokenizer, or data.train: the lm task's data)
 * is split after a prefix of P tokens, P uniform in [1, block_size] (T5
 * splits its spans at a uniform point).  The inputs are the window's first
 * block_size tokens, the targets its last; position t predicts token t + 1,
 * so positions P - 1 .. block_size - 1 are scored (block_size + 1 - P
 * targets) and those before, which would predict tokens of the prefix,
 * are not.
 *
 * train.prefix_from pairs: data.text's input<TAB>target lines (read by the
 * seq2seq task's reader, task_seq2seq.c): a row is input + EOS (the
 * prefix) then target + EOS; the prefix's last position (its EOS) predicts
 * the target's first token; data.prefix goes before every input, as
 * before a seq2seq source.  tfm-generate gives a prompt of such a model
 * the same prefix and end-of-text (infer/generate.h).  A pair longer than block_size
 * tokens keeps the input's head (at least one token and its EOS) and then
 * the target's, or is an error naming its line with data.truncate error.
 * Rows are padded to the longest of the batch.
 *
 * Every draw comes from the rng passed in, so a resumed run repeats the
 * rows bit for bit; validation is eval_batches batches drawn from the seed
 * (random), or every validation pair in order (pairs). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "train/task_internal.h"

int tfm_prefixlm_draw(tfm_rng *rng, int T)
{
    return 1 + (int)tfm_rng_below(rng, (uint64_t)T);
}

void tfm_prefixlm_row(const int32_t *w, int T, int P, int32_t *x, int32_t *y)
{
    for (int t = 0; t < T; t++) {
        x[t] = w[t];
        y[t] = t < P - 1 ? -1 : w[t + 1];
    }
}

int tfm_prefixlm_pair_row(const uint32_t *s, int ns, const uint32_t *tg, int nt, int32_t eos,
                          int32_t pad, int T, int32_t *x, int32_t *y)
{
    /* the row r = s ++ tg ++ eos of ns + nt + 1 tokens; x = r[0..L-1),
     * y = r[1..L) */
    int L = ns + nt + 1;
    for (int t = 0; t < T; t++) {
        int32_t cur = t < ns ? (int32_t)s[t] : t < ns + nt ? (int32_t)tg[t - ns] : eos;
        int32_t next = t + 1 < ns ? (int32_t)s[t + 1]
                     : t + 1 < ns + nt ? (int32_t)tg[t + 1 - ns] : eos;
        x[t] = t < L - 1 ? cur : pad;
        y[t] = t < L - 1 && t >= ns - 1 ? next : -1;
    }
    return nt + 1;
}

typedef struct plm_task {
    int pairs;                /* train.prefix_from pairs */
    tfm_tokens train, val;    /* random */
    tfm_pairs ptrain, pval;   /* pairs */
    int B, T;
    int64_t eval_batches;
    int32_t eos, pad;
    size_t truncated;         /* pairs cut to fit */
    int32_t *w;               /* [T + 1] a window */
    int32_t *x, *y;           /* [B, T] */
    int *plen;                /* [B] */
    size_t *draw;             /* [B] pairs */
} plm_task;

/* random: B windows, each split at its own point. */
static void draw_windows(void *impl, const tfm_tokens *data, tfm_rng *rng, tfm_batch *b)
{
    plm_task *K = impl;
    for (int r = 0; r < K->B; r++) {
        tfm_task_text_window(data, (size_t)K->T + 1, rng, K->w);
        K->plen[r] = tfm_prefixlm_draw(rng, K->T);
        tfm_prefixlm_row(K->w, K->T, K->plen[r], K->x + (size_t)r * K->T,
                         K->y + (size_t)r * K->T);
    }
    *b = (tfm_batch){.inputs = K->x, .targets = K->y, .B = K->B, .T = K->T,
                     .prefix_len = K->plen};
}

/* pairs: rows of pairs idx[0..n) padded to the longest; returns the
 * targets scored. */
static size_t build_pairs(plm_task *K, const tfm_pairs *P, const size_t *idx, int n,
                          tfm_batch *b)
{
    int T = 1;
    for (int i = 0; i < n; i++) {
        const tfm_pair *p = &P->p[idx[i]];
        int L = (int)(p->src_len + p->tgt_len);
        T = L > T ? L : T;
    }
    size_t count = 0;
    for (int i = 0; i < n; i++) {
        const tfm_pair *p = &P->p[idx[i]];
        count += (size_t)tfm_prefixlm_pair_row(P->ids.data + p->src, (int)p->src_len,
                                               P->ids.data + p->tgt, (int)p->tgt_len, K->eos,
                                               K->pad, T, K->x + (size_t)i * T,
                                               K->y + (size_t)i * T);
        K->plen[i] = (int)p->src_len;
    }
    *b = (tfm_batch){.inputs = K->x, .targets = K->y, .B = n, .T = T, .prefix_len = K->plen};
    return count;
}

static int plm_next(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    (void)err;
    plm_task *K = impl;
    if (K->pairs) {
        for (int i = 0; i < K->B; i++)
            K->draw[i] = (size_t)tfm_rng_below(rng, K->ptrain.n);
        *n_tokens = build_pairs(K, &K->ptrain, K->draw, K->B, b);
        return 0;
    }
    draw_windows(K, &K->train, rng, b);
    *n_tokens = 0;
    for (int r = 0; r < K->B; r++)
        *n_tokens += (size_t)(K->T + 1 - K->plen[r]);
    return 0;
}

/* pairs: the mean loss per target token over every validation pair. */
static int eval_pairs(plm_task *K, tfm_model *m, tfm_task_score *s, tfm_err *err)
{
    const tfm_pairs *P = &K->pval;
    double sum = 0, count = 0;
    for (size_t first = 0; first < P->n; first += (size_t)K->B) {
        size_t n = P->n - first < (size_t)K->B ? P->n - first : (size_t)K->B;
        for (size_t i = 0; i < n; i++)
            K->draw[i] = first + i;
        tfm_batch b;
        size_t nt = build_pairs(K, P, K->draw, (int)n, &b);
        float l;
        if (tfm_model_forward_batch(m, &b, &l, err) < 0)
            return -1;
        sum += (double)l * (double)nt;
        count += (double)nt;
    }
    s->loss = count ? sum / count : NAN;
    return 0;
}

static int plm_evaluate(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s,
                        tfm_err *err)
{
    plm_task *K = impl;
    if (K->pairs)
        return eval_pairs(K, m, s, err);
    return tfm_task_text_loss(K, draw_windows, &K->val, K->eval_batches, m, seed, s, err);
}

static int plm_has_val(void *impl)
{
    plm_task *K = impl;
    return K->pairs ? K->pval.n > 0 : K->val.n > 0;
}

static void plm_describe(void *impl, char *buf, size_t size)
{
    plm_task *K = impl;
    if (!K->pairs) {
        snprintf(buf, size, "%zu training tokens, %zu validation tokens (prefix LM: windows of "
                            "%d tokens split after a prefix of 1 to %d)",
                 K->train.n, K->val.n, K->T + 1, K->T);
        return;
    }
    int len = snprintf(buf, size, "%zu training pairs (%zu tokens), %zu validation pairs "
                                  "(prefix LM: the input the prefix)",
                       K->ptrain.n, K->ptrain.ids.len, K->pval.n);
    if (K->truncated && len > 0 && (size_t)len < size)
        snprintf(buf + len, size - (size_t)len,
                 "; %zu pairs cut to %d tokens (data.truncate head)", K->truncated, K->T);
}

static void plm_free(void *impl)
{
    plm_task *K = impl;
    tfm_tokens_free(&K->train);
    tfm_tokens_free(&K->val);
    tfm_pairs_free(&K->ptrain);
    tfm_pairs_free(&K->pval);
    free(K->w);
    free(K->x);
    free(K->y);
    free(K->plen);
    free(K->draw);
    free(K);
}

static const tfm_task_ops plm_ops = {
    .name = "prefix-lm",
    .describe = plm_describe,
    .has_val = plm_has_val,
    .next = plm_next,
    .evaluate = plm_evaluate,
    .free = plm_free,
};

/* Fits every pair into T positions (see the top), checks its ids against
 * V; errors name the line. */
static int fit_pairs(plm_task *K, tfm_pairs *P, int truncate_error, uint32_t V, tfm_err *err)
{
    for (size_t i = 0; i < P->n; i++) {
        tfm_pair *p = &P->p[i];
        int ns = (int)p->src_len, nt = (int)p->tgt_len;
        for (int j = 0; j < ns + nt; j++) {
            uint32_t id = P->ids.data[j < ns ? p->src + j : p->tgt + j - ns];
            if (id >= V)
                return tfm_err_set(err, "%s:%u: token id %u is outside model.vocab_size %u",
                                   P->name, p->line, id, V);
        }
        if (ns + nt <= K->T)
            continue;
        if (truncate_error)
            return tfm_err_set(err, "%s:%u: the input and target are %d tokens with their "
                               "end-of-text tokens, more than model.block_size + 1 = %d "
                               "(data.truncate: head cuts them)", P->name, p->line,
                               ns + nt + 1, K->T + 1);
        int ns2 = K->T - nt < 2 ? 2 : K->T - nt;
        if (ns2 < ns) { /* the input's head and its EOS */
            P->ids.data[p->src + ns2 - 1] = (uint32_t)K->eos;
            p->src_len = (uint32_t)ns2;
        }
        if ((int)p->src_len + nt > K->T)
            p->tgt_len = (uint32_t)(K->T - (int)p->src_len);
        K->truncated++;
    }
    return 0;
}

static int load(plm_task *K, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    K->T = (int)cfg->model.block_size;
    K->pairs = cfg->train.prefix_from == TFM_CONFIG_PREFIX_PAIRS;
    if (!K->pairs) {
        if (tfm_task_load_stream(&K->train, &K->val, cfg, tok, err) < 0)
            return -1;
        size_t need = (size_t)K->T + 1;
        if (K->train.n < need)
            return tfm_err_set(err, "%s: %zu tokens, fewer than block_size + 1 = %zu",
                               K->train.name, K->train.n, need);
        if (K->val.n && K->val.n < need)
            return tfm_err_set(err, "%s: %zu tokens, fewer than block_size + 1 = %zu",
                               K->val.name, K->val.n, need);
        return 0;
    }
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    if (sp->eos < 0)
        return tfm_err_set(err, "%s: the tokenizer has no end-of-text token, which ends the "
                           "input (the prefix) and the target of train.prefix_from pairs",
                           cfg->data.tokenizer);
    K->eos = (int32_t)sp->eos;
    K->pad = sp->pad >= 0 ? (int32_t)sp->pad : K->eos;
    if (K->T < 3)
        return tfm_err_set(err, "model.block_size %d is too short for pairs: an input token, "
                           "end-of-text and a target token", K->T);
    /* each side at most block_size - 1 tokens here, then the pair fitted */
    if (tfm_task_pairs_read(&K->ptrain, &K->pval, cfg, tok, NULL, K->T - 1, 0, &K->truncated,
                            err) < 0)
        return -1;
    K->truncated = 0; /* counted again below, a pair once */
    if (tfm_task_vocab_from_tokenizer(cfg, tok, err) < 0)
        return -1;
    int terr = cfg->data.truncate == TFM_CONFIG_TRUNCATE_ERROR;
    uint32_t V = (uint32_t)cfg->model.vocab_size;
    if (fit_pairs(K, &K->ptrain, terr, V, err) < 0 || fit_pairs(K, &K->pval, terr, V, err) < 0)
        return -1;
    return 0;
}

int tfm_task_prefixlm_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok,
                           tfm_err *err)
{
    plm_task *K = tfm_malloc(sizeof *K);
    memset(K, 0, sizeof *K);
    if (load(K, cfg, tok, err) < 0) {
        plm_free(K);
        return -1;
    }
    K->B = (int)cfg->train.batch_size;
    K->eval_batches = cfg->train.eval_batches;
    size_t bt = (size_t)K->B * (size_t)K->T;
    K->w = tfm_malloc(((size_t)K->T + 1) * sizeof *K->w);
    K->x = tfm_malloc(bt * sizeof *K->x);
    K->y = tfm_malloc(bt * sizeof *K->y);
    K->plen = tfm_malloc((size_t)K->B * sizeof *K->plen);
    K->draw = tfm_malloc((size_t)K->B * sizeof *K->draw);
    t->ops = &plm_ops;
    t->impl = K;
    return 0;
}
