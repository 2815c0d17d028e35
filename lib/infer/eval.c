#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/progress.h"
#include "infer/eval.h"
#include "metrics/metrics.h"
#include "infer/generate.h"

static void plan(tfm_eval *e, int context);

int tfm_eval_open(tfm_eval *e, const char *path, const char *adapter, int batch, tfm_err *err)
{
    memset(e, 0, sizeof *e);
    e->eos = e->bos = -1;
    e->path = path;
    /* tfm_lm reads both tfm's files and HuggingFace checkpoints, verifies
     * the checksum and widens stored 8-bit and bfloat16 matrices */
    if (tfm_lm_open_adapter(&e->lm, path, adapter, err) < 0)
        return -1;
    if (e->lm.cfg.kind != TFM_KIND_DECODER) {
        tfm_err_set(err, "%s: model.kind is %s: the language-model scores need a decoder "
                    "(one that predicts each next token)", path, tfm_kind_name(e->lm.cfg.kind));
        tfm_lm_close(&e->lm);
        return -1;
    }
    e->cfg = e->lm.cfg;
    const tfm_matrix *H = &e->lm.w.lm_head;
    if (!H->f32) {
        tfm_err_set(err, "%s: the LM head is not in float32", path);
        tfm_lm_close(&e->lm);
        return -1;
    }
    if (tfm_fwd_init(&e->fwd, &e->lm.cfg, &e->lm.w, TFM_FWD_MAIN, err) < 0) {
        tfm_lm_close(&e->lm);
        return tfm_err_prefix(err, "%s", path);
    }
    tfm_fwd_pack_weights(&e->fwd);
    /* scores that do not depend on what a timing chose: the widened
     * float32 weights, never the 8-bit products */
    e->fwd.q8_path = TFM_FWD_Q8_OFF;
    e->tok = e->lm.tok; /* taken over */
    e->lm.tok = NULL;
    e->eos = e->lm.eos;
    e->bos = e->tok && tfm_tokenizer_specials(e->tok)->prefix >= 0
                 ? tfm_tokenizer_specials(e->tok)->prefix : e->eos;
    e->prefix_lm = e->lm.prefix_lm;
    e->batch_asked = batch;
    plan(e, e->cfg.block_size);
    return 0;
}

/* Rows of the LM head's products: always this many for a model (padded),
 * so a row's logits never depend on how many rows were scored with it;
 * as many as keep the logits within 32 MB (32 to 1024). */
static int head_rows(int V)
{
    int rows = (1 << 23) / (V > 0 ? V : 1);
    return rows < 32 ? 32 : rows > 1024 ? 1024 : rows;
}

/* Buffers for batches of sequences of up to context tokens. */
static void plan(tfm_eval *e, int context)
{
    int batch = e->batch_asked;
    if (batch < 1) {
        /* the forward's activations of one sequence: the residual, norm,
         * q|k|v, attention and feed-forward rows and the top layer */
        const tfm_model_config *c = &e->cfg;
        size_t width = 4 * (size_t)c->n_embd + (size_t)tfm_model_config_qkv_dim(c) +
                       (size_t)tfm_model_config_attn_dim(c) + 2 * (size_t)tfm_model_config_ff(c);
        size_t per = (size_t)context * width * sizeof(float);
        size_t b = ((size_t)256 << 20) / (per ? per : 1);
        batch = b < 1 ? 1 : b > 16 ? 16 : (int)b;
    }
    e->batch = batch;
    e->context = context;
    const size_t rows = (size_t)batch * (size_t)context, C = (size_t)e->cfg.n_embd;
    free(e->in);
    free(e->nll);
    free(e->hit);
    free(e->top);
    free(e->head_in);
    free(e->logits);
    free(e->head_row);
    free(e->head_pos);
    free(e->packed);
    e->in = tfm_malloc(rows * sizeof *e->in);
    e->packed = tfm_malloc(rows * sizeof *e->packed);
    e->head_pos = tfm_malloc(rows * sizeof *e->head_pos);
    e->nll = tfm_malloc(rows * sizeof *e->nll);
    e->hit = tfm_malloc(rows);
    e->top = tfm_aligned_alloc(rows * C * sizeof *e->top);
    const size_t H = (size_t)head_rows(e->cfg.vocab_size);
    e->head_in = tfm_aligned_alloc(H * C * sizeof *e->head_in);
    e->logits = tfm_aligned_alloc(H * e->cfg.vocab_size * sizeof *e->logits);
    e->head_row = tfm_malloc(rows * sizeof *e->head_row);
}

int tfm_eval_set_context(tfm_eval *e, int context, tfm_err *err)
{
    const tfm_model_config *c = &e->cfg;
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
    if (tfm_tokenizer_vocab_size(tok) > (uint32_t)e->cfg.vocab_size)
        return tfm_err_set(err, "the tokenizer has %u tokens but the model only %d",
                           tfm_tokenizer_vocab_size(tok), e->cfg.vocab_size);
    tfm_tokenizer_free(e->tok);
    e->tok = tok;
    e->eos = tfm_tokenizer_specials(tok)->eos;
    e->bos = tfm_tokenizer_specials(tok)->prefix >= 0 ? tfm_tokenizer_specials(tok)->prefix
                                                      : e->eos;
    return 0;
}

void tfm_eval_close(tfm_eval *e)
{
    tfm_fwd_free(&e->fwd);
    tfm_lm_close(&e->lm);
    tfm_tokenizer_free(e->tok);
    free(e->in);
    free(e->nll);
    free(e->hit);
    free(e->top);
    free(e->head_in);
    free(e->logits);
    free(e->head_row);
    free(e->head_pos);
    free(e->packed);
    memset(e, 0, sizeof *e);
}

/* The scored positions' NLL and argmax hits from the rows of top that
 * predict them (head_row[k]: the row before scored position k of the
 * packed batch, pos[k] where its results go), head_rows at a time. */
static void score_rows(tfm_eval *e, const int32_t *head_row, const size_t *pos, size_t n)
{
    const int V = e->cfg.vocab_size, C = e->cfg.n_embd;
    const tfm_weights *w = &e->lm.w;
    const float hs = tfm_head_scale(&e->cfg);
    const int H = head_rows(V);
    for (size_t k0 = 0; k0 < n; k0 += (size_t)H) {
        const int m = n - k0 < (size_t)H ? (int)(n - k0) : H;
        for (int k = 0; k < H; k++) {
            float *dst = e->head_in + (size_t)k * C;
            if (k >= m) {
                memset(dst, 0, sizeof(float) * (size_t)C);
                continue;
            }
            const float *src = e->top + (size_t)head_row[k0 + k] * C;
            for (int i = 0; i < C; i++)
                dst[i] = src[i] * hs;
        }
        tfm_gemm(0, 1, H, V, C, 1.0f, e->head_in, C, w->lm_head.f32, C, 0.0f, e->logits, V);
        if (w->head_bias)
            tfm_bias_forward(e->logits, w->head_bias, m, V);
#pragma omp parallel for schedule(static)
        for (int k = 0; k < m; k++) {
            const float *l = e->logits + (size_t)k * V;
            const size_t r = pos[k0 + k];
            uint32_t y = (uint32_t)e->in[r];
            e->nll[r] = tfm_metrics_nll(l, V, y);
            e->hit[r] = (uint32_t)tfm_metrics_argmax(l, V) == y;
        }
    }
}

/* Runs seqs[0..n) (n ≤ batch) as one packed forward and scores them: in,
 * nll and hit hold sequence i at offset i·context. */
static int score_batch(tfm_eval *e, tfm_eval_seq *seqs, int n, tfm_err *err)
{
    const size_t block = (size_t)e->context;
    const int L = e->cfg.n_layer;
    int len[n], plen[n];
    size_t n_scored = 0;
    for (int i = 0; i < n; i++) {
        size_t m = seqs[i].n < block ? seqs[i].n : block;
        len[i] = (int)m;
        /* a prefix LM reads the unscored history as its prefix */
        plen[i] = (int)(m - seqs[i].n_target);
        n_scored += seqs[i].n_target;
    }
    /* the packed ids first (the forward's input), then each sequence's at
     * i·context for the scores */
    uint32_t *packed = e->packed;
    size_t r = 0, k = 0;
    for (int i = 0; i < n; i++) {
        const uint32_t *ids = seqs[i].ids + (seqs[i].n - (size_t)len[i]);
        for (int t = 0; t < len[i]; t++) {
            packed[r + t] = ids[t];
            e->in[(size_t)i * block + t] = (int32_t)ids[t];
        }
        for (int t = plen[i]; t < len[i]; t++, k++) {
            e->head_row[k] = (int32_t)(r + t - 1); /* t ≥ 1 */
            e->head_pos[k] = (size_t)i * block + t;
        }
        r += (size_t)len[i];
    }
    float *hidden[L + 1];
    memset(hidden, 0, sizeof hidden);
    hidden[L] = e->top;
    tfm_fwd_batch b = {.n = n, .len = len, .tok = packed, .hidden = hidden,
                       .prefix = e->prefix_lm ? plen : NULL};
    if (tfm_fwd_run(&e->fwd, &b, err) < 0)
        return -1;
    score_rows(e, e->head_row, e->head_pos, n_scored);
    for (int i = 0; i < n; i++) {
        size_t len = seqs[i].n < block ? seqs[i].n : block;
        double lp = 0;
        int greedy = 1;
        const size_t first = len - seqs[i].n_target;
        for (size_t t = first; t < len; t++) {
            lp -= e->nll[(size_t)i * block + t];
            greedy &= e->hit[(size_t)i * block + t];
            if (seqs[i].token_logprobs)
                seqs[i].token_logprobs[t - first] = -e->nll[(size_t)i * block + t];
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
