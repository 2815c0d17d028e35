#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/progress.h"
#include "infer/eval.h"
#include "metrics/metrics.h"
#include "infer/generate.h"

/* Copies one tensor of the opened file into the model's parameter array. */
static int put(tfm_model *m, const char *name, const float *src, int *bound)
{
    const tfm_param *p = tfm_model_param(m, name);
    if (!p || !src)
        return 0;
    memcpy(m->params + p->offset, src, p->numel * sizeof(float));
    (*bound)++;
    return 0;
}

static void plan(tfm_eval *e, int context);

int tfm_eval_open(tfm_eval *e, const char *path, const char *adapter, int batch, tfm_err *err)
{
    memset(e, 0, sizeof *e);
    e->eos = -1;
    e->path = path;
    /* tfm_lm reads both tfm's files and HuggingFace GPT-2 checkpoints and
     * verifies the checksum; the batched forward wants the weights in a
     * tfm_model, so they are copied once */
    tfm_lm lm;
    if (tfm_lm_open_adapter(&lm, path, adapter, err) < 0)
        return -1;
    if (lm.cfg.kind != TFM_KIND_DECODER) {
        tfm_err_set(err, "%s: model.kind is %s: the language-model scores need a decoder "
                    "(one that predicts each next token)", path, tfm_kind_name(lm.cfg.kind));
        tfm_lm_close(&lm);
        return -1;
    }
    if (tfm_model_init(&e->model, &lm.cfg, err) < 0) {
        tfm_lm_close(&lm);
        return tfm_err_prefix(err, "%s", path);
    }
    const tfm_weights *w = &lm.w;
    int bound = 0;
    char name[64];
    put(&e->model, "wte.weight", w->dec.wte.f32, &bound);
    put(&e->model, "wpe.weight", w->dec.wpe, &bound);
    put(&e->model, "wse.weight", w->wse, &bound);
    put(&e->model, "ln_e.weight", w->dec.lne_w, &bound);
    put(&e->model, "ln_e.bias", w->dec.lne_b, &bound);
    put(&e->model, "rel_bias.weight", w->dec.rel_bias, &bound);
    put(&e->model, "ln_f.weight", w->dec.lnf_w, &bound);
    put(&e->model, "ln_f.bias", w->dec.lnf_b, &bound);
    if (!lm.cfg.tie_embeddings)
        put(&e->model, "lm_head.weight", w->lm_head.f32, &bound);
    for (int i = 0; i < w->n_layer; i++)
        for (int k = 0; k < TFM_SLOT_N; k++) {
            const char *suffix;
            size_t d0, d1;
            int decay;
            if (!tfm_block_slot(&lm.cfg, (tfm_slot)k, 0, &suffix, &d0, &d1, &decay))
                continue;
            snprintf(name, sizeof name, "h.%d.%s", i, suffix);
            put(&e->model, name, tfm_layer_weight(&w->layers[i], (tfm_slot)k), &bound);
        }
    if (bound != e->model.n_table) {
        tfm_err_set(err, "%s: %d of the model's %d tensors could be bound", path, bound,
                    e->model.n_table);
        tfm_lm_close(&lm);
        tfm_model_free(&e->model);
        return -1;
    }
    tfm_model_set_inference(&e->model);
    e->tok = lm.tok; /* taken over */
    lm.tok = NULL;
    e->eos = lm.eos;
    e->prefix_lm = lm.prefix_lm;
    tfm_lm_close(&lm);
    e->batch_asked = batch;
    plan(e, e->model.cfg.block_size);
    return 0;
}

/* Buffers for batches of sequences of up to context tokens. */
static void plan(tfm_eval *e, int context)
{
    int batch = e->batch_asked;
    if (batch < 1) {
        /* the forward's logits are [batch, T, V] floats */
        size_t per = (size_t)context * (size_t)e->model.cfg.vocab_size * sizeof(float);
        size_t b = ((size_t)256 << 20) / (per ? per : 1);
        batch = b < 1 ? 1 : b > 16 ? 16 : (int)b;
    }
    e->batch = batch;
    e->context = context;
    size_t rows = (size_t)batch * (size_t)context;
    free(e->in);
    free(e->nll);
    free(e->hit);
    e->in = tfm_malloc(rows * sizeof *e->in);
    e->nll = tfm_malloc(rows * sizeof *e->nll);
    e->hit = tfm_malloc(rows);
}

int tfm_eval_set_context(tfm_eval *e, int context, tfm_err *err)
{
    const tfm_model_config *c = &e->model.cfg;
    if (context < 2)
        return tfm_err_set(err, "a context of %d tokens leaves nothing to score", context);
    if (context > c->block_size && c->pos == TFM_POS_LEARNED)
        return tfm_err_set(err, "context %d is longer than the model's %d: learned positions "
                                "end there", context, c->block_size);
    if (context > 1 << 20)
        return tfm_err_set(err, "context %d is out of range (at most 1048576)", context);
    if (context != e->context)
        plan(e, context);
    return 0;
}

int tfm_eval_set_tokenizer(tfm_eval *e, tfm_tokenizer *tok, tfm_err *err)
{
    if (tfm_tokenizer_vocab_size(tok) > (uint32_t)e->model.cfg.vocab_size)
        return tfm_err_set(err, "the tokenizer has %u tokens but the model only %d",
                           tfm_tokenizer_vocab_size(tok), e->model.cfg.vocab_size);
    tfm_tokenizer_free(e->tok);
    e->tok = tok;
    e->eos = tfm_tokenizer_specials(tok)->eos;
    return 0;
}

void tfm_eval_close(tfm_eval *e)
{
    tfm_model_free(&e->model);
    tfm_tokenizer_free(e->tok);
    free(e->in);
    free(e->nll);
    free(e->hit);
    memset(e, 0, sizeof *e);
}

/* Runs seqs[0..n) (n ≤ batch) as one forward and scores them. */
static int score_batch(tfm_eval *e, tfm_eval_seq *seqs, int n, tfm_err *err)
{
    const int V = e->model.cfg.vocab_size;
    const size_t block = (size_t)e->context;
    size_t T = 0;
    for (int i = 0; i < n; i++) {
        size_t len = seqs[i].n < block ? seqs[i].n : block;
        if (len > T)
            T = len;
    }
    for (int i = 0; i < n; i++) {
        size_t len = seqs[i].n < block ? seqs[i].n : block;
        const uint32_t *ids = seqs[i].ids + (seqs[i].n - len);
        int32_t *row = e->in + (size_t)i * T;
        for (size_t t = 0; t < len; t++)
            row[t] = (int32_t)ids[t];
        /* padding: any valid id; the causal mask keeps it out of the scores */
        for (size_t t = len; t < T; t++)
            row[t] = 0;
    }
    /* a prefix LM reads the unscored history as its prefix */
    int plen[n];
    for (int i = 0; i < n; i++) {
        size_t len = seqs[i].n < block ? seqs[i].n : block;
        plen[i] = (int)(len - seqs[i].n_target);
    }
    tfm_batch b = {.inputs = e->in, .B = n, .T = (int)T,
                   .prefix_len = e->prefix_lm ? plen : NULL};
    if (tfm_model_forward_batch(&e->model, &b, NULL, err) < 0)
        return -1;
    const float *logits = tfm_model_logits(&e->model);
    /* One parallel loop over every row of the batch (not one per sequence:
     * each parallel region costs a barrier), then sums in a fixed order, so
     * the result does not depend on the thread count. */
    const long rows = (long)n * (long)T;
#pragma omp parallel for schedule(static)
    for (long r = 0; r < rows; r++) {
        int i = (int)(r / (long)T);
        size_t t = (size_t)(r % (long)T);
        size_t len = seqs[i].n < block ? seqs[i].n : block;
        if (t < len - seqs[i].n_target || t >= len)
            continue;
        const float *l = logits + ((size_t)r - 1) * (size_t)V; /* t ≥ 1 */
        uint32_t y = (uint32_t)e->in[r];
        e->nll[r] = tfm_metrics_nll(l, V, y);
        e->hit[r] = (uint32_t)tfm_metrics_argmax(l, V) == y;
    }
    for (int i = 0; i < n; i++) {
        size_t len = seqs[i].n < block ? seqs[i].n : block;
        double lp = 0;
        int greedy = 1;
        const size_t first = len - seqs[i].n_target;
        for (size_t t = first; t < len; t++) {
            lp -= e->nll[(size_t)i * T + t];
            greedy &= e->hit[(size_t)i * T + t];
            if (seqs[i].token_logprobs)
                seqs[i].token_logprobs[t - first] = -e->nll[(size_t)i * T + t];
        }
        seqs[i].logprob = lp;
        seqs[i].greedy = greedy;
    }
    for (int i = 0; i < n; i++)
        e->stat_tokens += seqs[i].n < block ? seqs[i].n : block;
    return 0;
}

int tfm_eval_score(tfm_eval *e, tfm_eval_seq *seqs, size_t n, tfm_progress *progress,
                   tfm_err *err)
{
    const size_t block = (size_t)e->context;
    for (size_t i = 0; i < n; i++) {
        if (seqs[i].n_target < 1 || seqs[i].n_target >= seqs[i].n)
            return tfm_err_set(err, "sequence %zu: %zu tokens to score of %zu (need at "
                               "least one, and one token of history)",
                               i + 1, seqs[i].n_target, seqs[i].n);
        if (seqs[i].n_target >= block)
            return tfm_err_set(err, "sequence %zu: %zu tokens to score do not fit the "
                               "model's context of %zu (with one token of history)",
                               i + 1, seqs[i].n_target, block);
    }
    double t0 = tfm_now();
    size_t done = 0;
    for (size_t i = 0; i < n; i += (size_t)e->batch) {
        int m = n - i < (size_t)e->batch ? (int)(n - i) : e->batch;
        if (score_batch(e, seqs + i, m, err) < 0)
            return -1;
        /* A diverged model's NaN would come out as a plausible accuracy
         * (every comparison with NaN is false): no result from it. */
        for (int j = 0; j < m; j++)
            if (!isfinite(seqs[i + j].logprob))
                return tfm_err_set(err, "%s: the model's scores are not finite (%s): its "
                                   "weights are not finite (a diverged training run?)",
                                   e->path ? e->path : "model",
                                   isnan(seqs[i + j].logprob) ? "NaN" : "infinite");
        if (progress) {
            for (int j = 0; j < m; j++)
                done += seqs[i + j].n_target;
            tfm_progress_update(progress, (double)done);
        }
    }
    e->stat_seconds += tfm_now() - t0;
    return 0;
}

/* ---- perplexity ---------------------------------------------------------- */

void tfm_ppl_init(tfm_ppl *p, const uint32_t *ids, size_t n, size_t context, size_t stride,
                  int token_logprobs)
{
    memset(p, 0, sizeof *p);
    size_t nw = tfm_ppl_windows(n, context, stride, NULL, 0);
    p->n_windows = nw;
    p->w = tfm_malloc(nw * sizeof *p->w);
    tfm_ppl_windows(n, context, stride, p->w, nw);
    p->seqs = tfm_calloc(nw, sizeof *p->seqs);
    for (size_t i = 0; i < nw; i++) {
        p->seqs[i].ids = ids + p->w[i].begin;
        p->seqs[i].n = p->w[i].end - p->w[i].begin;
        p->seqs[i].n_target = p->w[i].end - p->w[i].score_from;
        p->scored += p->seqs[i].n_target;
    }
    if (token_logprobs) {
        p->token_lp = tfm_malloc((p->scored ? p->scored : 1) * sizeof *p->token_lp);
        for (size_t i = 0, k = 0; i < nw; k += p->seqs[i].n_target, i++)
            p->seqs[i].token_logprobs = p->token_lp + k;
    }
}

int tfm_ppl_run(tfm_ppl *p, tfm_eval *e, tfm_progress *progress, tfm_err *err)
{
    if (tfm_eval_score(e, p->seqs, p->n_windows, progress, err) < 0)
        return -1;
    double total = 0;
    for (size_t i = 0; i < p->n_windows; i++)
        total -= p->seqs[i].logprob;
    p->nll = total;
    p->cross_entropy = total / (double)p->scored;
    p->perplexity = exp(p->cross_entropy);
    return 0;
}

void tfm_ppl_free(tfm_ppl *p)
{
    free(p->w);
    free(p->seqs);
    free(p->token_lp);
    memset(p, 0, sizeof *p);
}

int tfm_ppl_text_size(const tfm_tokenizer *tok, const uint32_t *ids, int bos_first,
                      const char *text, size_t len, size_t *bytes, size_t *chars,
                      tfm_err *err)
{
    *bytes = len;
    *chars = tfm_metrics_utf8_chars(text, len);
    if (bos_first)
        return 0;
    tfm_buf first = {0};
    if (tfm_tokenizer_decode(tok, ids, 1, 0, &first, err) < 0) {
        tfm_buf_free(&first);
        return -1;
    }
    *bytes -= first.len < *bytes ? first.len : *bytes;
    *chars -= tfm_metrics_utf8_chars(first.data, first.len);
    tfm_buf_free(&first);
    return 0;
}

/* ---- multiple choice and last word -------------------------------------- */

void tfm_eval_choice_pick(const tfm_eval_seq *seqs, const size_t *end_bytes, size_t n,
                          int best[3])
{
    double bs[3] = {-INFINITY, -INFINITY, -INFINITY};
    best[0] = best[1] = best[2] = 0;
    for (size_t j = 0; j < n; j++) {
        const tfm_eval_seq *q = &seqs[j];
        double sc[3] = {q->logprob, q->logprob / (double)q->n_target,
                        q->logprob / (double)end_bytes[j]};
        for (int m = 0; m < 3; m++)
            if (sc[m] > bs[m]) {
                bs[m] = sc[m];
                best[m] = (int)j;
            }
    }
}

long tfm_eval_last_word(const char *s, size_t len)
{
    for (size_t k = len; k-- > 0;)
        if (s[k] == ' ')
            return (long)k;
    return -1;
}
