/* The decoding loop: batching, stopping rules, text streaming. */
#include "config.h"

#include "infer/generate.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"
#include "data/data_keys.h"
#include "data/source.h"

void tfm_gen_opts_default(tfm_gen_opts *o)
{
    memset(o, 0, sizeof *o);
    o->strategy = TFM_GEN_SAMPLE;
    tfm_sample_opts_default(&o->sample);
    o->sample.temperature = 0.8f;
    o->sample.top_k = 40;
    o->sample.top_p = 0.95f;
    o->sample.min_p = 0.05f;
    tfm_beam_opts_default(&o->beam);
    o->max_tokens = 128;
    o->start = -1;
}

void tfm_gen_result_free(tfm_gen_result *r)
{
    for (size_t i = 0; i < r->n_hyps; i++) {
        tfm_ids_free(&r->hyps[i].ids);
        free(r->hyps[i].logprobs);
        tfm_buf_free(&r->hyps[i].text);
    }
    free(r->hyps);
    memset(r, 0, sizeof *r);
}

size_t tfm_gen_final_prefix(const char *text, size_t n, const char *const *stops,
                            size_t n_stops)
{
    /* an unfinished UTF-8 character at the end: its lead byte announces
     * more continuation bytes than follow it */
    size_t keep = n;
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char c = (unsigned char)text[n - back];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        if (need > back)
            keep = n - back;
        break;
    }
    /* the longest suffix that is a proper prefix of a stop string */
    for (size_t s = 0; s < n_stops; s++) {
        size_t sl = strlen(stops[s]);
        for (size_t k = sl > 1 ? sl - 1 : 0; k > 0; k--) {
            if (k > n)
                continue;
            if (memcmp(text + n - k, stops[s], k) == 0) {
                if (n - k < keep)
                    keep = n - k;
                break;
            }
        }
    }
    return keep;
}

static const char *where(const tfm_gen *g, size_t index, char buf[1100]);

/* One prompt being decoded. */
typedef struct seq {
    size_t index;
    int slot;
    tfm_ids hist;        /* prompt + generated, for the repetition penalty */
    tfm_gen_hyp *hyp;
    size_t printed;      /* bytes of hyp->text already handed out */
    tfm_sampler sampler;
    int has_sampler;
    int done;
} seq;

static void emit(tfm_gen_text_fn fn, void *ctx, seq *s, size_t upto)
{
    if (upto > s->printed && fn)
        fn(ctx, s->index, s->hyp->text.data + s->printed, upto - s->printed);
    if (upto > s->printed)
        s->printed = upto;
}

/* Earliest occurrence of any stop string in text[from..n), or n. */
static size_t find_stop(const char *text, size_t n, size_t from,
                        const char *const *stops, size_t n_stops)
{
    size_t best = n;
    for (size_t s = 0; s < n_stops; s++) {
        size_t sl = strlen(stops[s]);
        if (!sl || from >= n)
            continue;
        const char *p = memmem(text + from, n - from, stops[s], sl);
        if (p && (size_t)(p - text) < best)
            best = (size_t)(p - text);
    }
    return best;
}

/* Re-decodes the whole continuation (a byte-level token may end inside a
 * character, and WordPiece joins pieces), then cuts at a stop string and
 * hands out what is final.  Returns 1 when a stop string was found. */
static int update_text(const tfm_gen *g, seq *s, tfm_gen_text_fn fn, void *ctx,
                       int final, tfm_err *err)
{
    const tfm_lm *lm = g->lm;
    tfm_gen_hyp *h = s->hyp;
    if (!lm->tok)
        return 0;
    tfm_buf_clear(&h->text);
    if (tfm_tokenizer_decode(lm->tok, h->ids.data, h->ids.len, 1, &h->text, err) < 0) {
        char w[1100];
        return tfm_err_prefix(err, "%s", where(g, s->index, w));
    }
    size_t from = s->printed;
    size_t stop = find_stop(h->text.data, h->text.len, from, g->opts.stops, g->opts.n_stops);
    if (stop < h->text.len) {
        h->text.len = stop;
        emit(fn, ctx, s, stop);
        return 1;
    }
    size_t upto = final ? h->text.len
                        : tfm_gen_final_prefix(h->text.data, h->text.len,
                                               g->opts.stops, g->opts.n_stops);
    emit(fn, ctx, s, upto);
    return 0;
}

/* A stop string cut h->text: ids and logprobs keep the fewest tokens whose
 * text holds what is left, so that they end where the text does.  With
 * rescore, score becomes their Σ log p.  Returns 1, or -1. */
static int cut_at_stop(const tfm_lm *lm, tfm_gen_hyp *h, int rescore, tfm_err *err)
{
    size_t keep = 0;
    if (h->text.len > 0) {
        tfm_buf t = {0};
        for (keep = 1; keep < h->ids.len; keep++) {
            tfm_buf_clear(&t);
            if (tfm_tokenizer_decode(lm->tok, h->ids.data, keep, 1, &t, err) < 0) {
                tfm_buf_free(&t);
                return -1;
            }
            if (t.len >= h->text.len)
                break;
        }
        tfm_buf_free(&t);
    }
    h->ids.len = keep;
    if (rescore) {
        h->score = 0;
        for (size_t i = 0; i < keep; i++)
            h->score += h->logprobs[i];
    }
    return 1;
}

int tfm_gen_init(tfm_gen *g, const tfm_lm *lm, const tfm_gen_opts *opts,
                 int batch, tfm_err *err)
{
    memset(g, 0, sizeof *g);
    if (opts->max_tokens < 1)
        return tfm_err_set(err, "max tokens must be at least 1");
    if (opts->strategy == TFM_GEN_SAMPLE && tfm_sample_opts_check(&opts->sample, err) < 0)
        return -1;
    if (opts->strategy == TFM_GEN_BEAM) {
        if (opts->beam.beam < 1)
            return tfm_err_set(err, "beam size must be at least 1");
        if (opts->beam.nbest < 1 || opts->beam.nbest > opts->beam.beam)
            return tfm_err_set(err, "nbest must be between 1 and the beam size (%d)",
                               opts->beam.beam);
    }
    if (lm->cfg.kind == TFM_KIND_ENCODER) /* tfm_infer_init says so too, later */
        return tfm_err_set(err, "model.kind encoder does not generate text");
    if (lm->cfg.kind == TFM_KIND_ENCODER_DECODER) {
        /* sources end with it, and translations stop at it */
        if (lm->eos < 0)
            return tfm_err_set(err, "model.kind encoder-decoder needs an end-of-text token, "
                                    "and the model's tokenizer has none");
        int64_t start = opts->start;
        if (start < 0) /* the model's own (T5: 0) */
            start = lm->cfg.decoder_start;
        if (start < 0 && lm->tok)
            start = tfm_tokenizer_specials(lm->tok)->bos;
        if (start < 0)
            start = lm->eos;
        if (start >= lm->cfg.vocab_size)
            return tfm_err_set(err, "start token %lld is outside the vocabulary (%d)",
                               (long long)start, lm->cfg.vocab_size);
        g->encdec = 1;
        g->start = (uint32_t)start;
        g->forced = lm->cfg.forced_bos;
        g->n_start = g->forced >= 0 ? 2 : 1;
    }
    /* HF's forced_eos_token_id; with end-of-text ignored there is no end
     * to force */
    g->forced_last = opts->ignore_eos ? -1 : lm->cfg.forced_eos;
    if (lm->tok)
        for (uint32_t v = 0; v < (uint32_t)lm->cfg.vocab_size; v++) {
            size_t len;
            if (tfm_tokenizer_piece(lm->tok, v, &len))
                continue;
            g->absent = tfm_realloc(g->absent, sizeof *g->absent * (g->n_absent + 1));
            g->absent[g->n_absent++] = v;
        }
    g->lm = lm;
    g->opts = *opts;
    g->batch = batch < 1 ? 1 : batch;
    return 0;
}

void tfm_gen_free(tfm_gen *g)
{
    if (g->infer_ready)
        tfm_infer_free(&g->infer);
    free(g->absent);
    memset(g, 0, sizeof *g);
}

/* New tokens allowed after a prompt of n tokens. */
static int max_new(const tfm_gen_opts *o, size_t n)
{
    int m = o->max_tokens;
    if (o->max_len_a > 0 || o->max_len_b > 0) {
        double ab = o->max_len_a * (double)n + o->max_len_b;
        if (ab < m)
            m = ab < 1 ? 1 : (int)ab;
    }
    return m;
}

/* The longest sequence the model can run: its learned position table ends
 * at block_size; the other schemes are limited by memory only. */
static int context_limit(const tfm_model_config *c)
{
    return c->pos == TFM_POS_LEARNED ? c->block_size : 1 << 20;
}

/* A cache with at least `slots` slots of `len` positions. */
static int need_cache(tfm_gen *g, int slots, int len, tfm_err *err)
{
    if (len > context_limit(&g->lm->cfg))
        len = context_limit(&g->lm->cfg);
    if (g->infer_ready && g->infer_slots >= slots && g->infer_len >= len) {
        for (int i = 0; i < g->infer_slots; i++)
            tfm_infer_reset(&g->infer, i);
        return 0;
    }
    if (g->infer_ready)
        tfm_infer_free(&g->infer);
    g->infer_ready = 0;
    if (tfm_infer_init(&g->infer, &g->lm->cfg, &g->lm->w, slots, len, err) < 0)
        return -1;
    g->infer_ready = 1;
    g->infer_slots = slots;
    g->infer_len = len;
    return 0;
}

int tfm_gen_source_limit(const tfm_model_config *cfg)
{
    return cfg->block_size;
}

void tfm_gen_profile_bytes(const tfm_model_config *cfg, double wbytes,
                           double bytes[TFM_PROF_N])
{
    const double C = cfg->n_embd, L = cfg->n_layer, F = tfm_model_config_ff(cfg);
    const double D = tfm_model_config_attn_dim(cfg);
    for (int p = 0; p < TFM_PROF_N; p++)
        bytes[p] = 0;
    bytes[TFM_PROF_QKV] = L * C * tfm_model_config_qkv_dim(cfg) * wbytes;
    bytes[TFM_PROF_PROJ] = L * D * C * wbytes;
    bytes[TFM_PROF_FC] = L * C * F * wbytes;
    bytes[TFM_PROF_FCPROJ] = L * F * C * wbytes;
    bytes[TFM_PROF_HEAD] = (double)cfg->vocab_size * C * wbytes;
}

/* How messages name prompt index (from 0): "file:line" or "prompt 3". */
static const char *where(const tfm_gen *g, size_t index, char buf[1100])
{
    if (g->input)
        snprintf(buf, 1100, "%s:%zu", g->input, index + 1);
    else
        snprintf(buf, 1100, "%s %zu", g->encdec ? "source" : "prompt", index + 1);
    return buf;
}

static int check_prompt(const tfm_gen *g, const tfm_ids *p, size_t index, tfm_err *err)
{
    char w[1100];
    if (g->input && !g->encdec) {
        where(g, index, w);
        if (p->len == 0)
            return tfm_err_set(err, "%s: the prompt is empty", w);
        if (p->len > (size_t)context_limit(&g->lm->cfg))
            return tfm_err_set(err, "%s: the prompt is %zu tokens, longer than the model's "
                                    "context (%d)", w, p->len, context_limit(&g->lm->cfg));
        return 0;
    }
    if (g->encdec) {
        const int limit = tfm_gen_source_limit(&g->lm->cfg);
        const int sv = tfm_model_config_src_vocab(&g->lm->cfg);
        if (p->len == 0)
            return tfm_err_set(err, "source %zu is empty (it ends with end-of-text at least)",
                               index + 1);
        if (p->len > (size_t)limit)
            return tfm_err_set(err, "source %zu is %zu tokens, longer than the encoder's "
                                    "context (%d)", index + 1, p->len, limit);
        for (size_t i = 0; i < p->len; i++)
            if (p->data[i] >= (uint32_t)sv)
                return tfm_err_set(err, "source %zu: token id %u is outside the source "
                                        "vocabulary (%d)", index + 1, p->data[i], sv);
        return 0;
    }
    if (p->len == 0)
        return tfm_err_set(err, "prompt %zu is empty", index + 1);
    if (p->len > (size_t)context_limit(&g->lm->cfg))
        return tfm_err_set(err, "prompt %zu is %zu tokens, longer than the model's context (%d)",
                           index + 1, p->len, context_limit(&g->lm->cfg));
    return 0;
}

static void hyp_push(tfm_gen_hyp *h, uint32_t tok, float lp)
{
    tfm_ids_push(&h->ids, tok);
    h->logprobs = tfm_realloc(h->logprobs, sizeof *h->logprobs * h->ids.len);
    h->logprobs[h->ids.len - 1] = lp;
    h->score += lp;
}

/* Logits of rows[0..n) (row r: prompt index index[r], NULL: prompt r of
 * the batch), V wide.  A diverged model's logits are NaN: sampling from
 * them picks no valid token (and the fast exp is undefined on NaN), so
 * decoding stops there.  Ids without text become -inf. */
static int check_logits(const tfm_gen *g, float *x, size_t n, const size_t *index,
                        tfm_err *err)
{
    const size_t V = (size_t)g->lm->cfg.vocab_size;
    for (size_t r = 0; r < n; r++) {
        float *row = x + r * V;
        for (size_t i = 0; i < V; i++)
            if (isnan(row[i])) {
                char w[1100];
                return tfm_err_set(err, "%s: the model produced NaN: its weights are not "
                                        "finite (a diverged training run?)",
                                   where(g, g->cur_first + (index ? index[r] : r), w));
            }
        for (size_t k = 0; k < g->n_absent; k++)
            row[g->absent[k]] = -INFINITY;
    }
    return 0;
}

/* A decoder's tokens ids[0..n) into an empty slot, the first n_prompt of
 * them the prompt: a prefix LM's prompt is its prefix, seen whole by each
 * of its positions, as in training. */
static int prefill(tfm_gen *g, int slot, const uint32_t *ids, size_t n, size_t n_prompt,
                   float *logits, tfm_err *err)
{
    if (g->lm->prefix_lm)
        return tfm_infer_prefill_prefix(&g->infer, slot, ids, (int)n, (int)n_prompt, logits,
                                        err);
    return tfm_infer_prefill(&g->infer, slot, ids, (int)n, logits, err);
}

/* One decode step; with profiling, its phases are added to g->prof_s. */
static int step_profiled(tfm_gen *g, int n, const uint32_t *toks, const int *slots,
                         float *logits, tfm_err *err)
{
    if (!g->opts.profile)
        return tfm_infer_step(&g->infer, n, toks, slots, logits, err);
    memset(g->infer.prof_s, 0, sizeof g->infer.prof_s);
    g->infer.profile = 1;
    int rc = tfm_infer_step(&g->infer, n, toks, slots, logits, err);
    g->infer.profile = 0;
    for (int p = 0; p < TFM_PROF_N; p++)
        g->prof_s[p] += g->infer.prof_s[p];
    g->prof_steps++;
    return rc;
}

/* Positions per slot for prompts[0..n): a decoder's prompt and new tokens;
 * an encoder-decoder's source, or its start token and new tokens. */
static int cache_len(const tfm_gen *g, const tfm_ids *prompts, size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = g->encdec ? (size_t)g->n_start + (size_t)max_new(&g->opts, prompts[i].len)
                             : prompts[i].len + (size_t)g->opts.max_tokens;
        if (g->encdec && prompts[i].len > l)
            l = prompts[i].len;
        len = l > len ? l : len;
    }
    return len > INT_MAX ? INT_MAX : (int)len;
}

/* Encoder-decoders: sources prompts[0..n) into slots[0..n), one encoder
 * pass for all. */
static int encode_sources(tfm_gen *g, const tfm_ids *prompts, size_t n, const int *slots,
                          tfm_err *err)
{
    const uint32_t **src = tfm_malloc(sizeof *src * (n ? n : 1));
    int *len = tfm_malloc(sizeof *len * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        src[i] = prompts[i].data;
        len[i] = prompts[i].len > INT_MAX ? INT_MAX : (int)prompts[i].len;
    }
    int rc = tfm_infer_encode_many(&g->infer, (int)n, slots, src, len, err);
    free(src);
    free(len);
    return rc;
}

/* Encoder-decoders: the sources into slots[0..n), then the decoder's
 * prompt of every slot at once — the start token, and the forced one
 * (model.forced_bos) after it; logits [n, V]: of the first free token. */
static int start_decoders(tfm_gen *g, const tfm_ids *prompts, size_t n, const int *slots,
                          uint32_t *toks, float *logits, tfm_err *err)
{
    if (encode_sources(g, prompts, n, slots, err) < 0)
        return -1;
    for (int k = 0; k < g->n_start; k++) {
        for (size_t i = 0; i < n; i++)
            toks[i] = k ? (uint32_t)g->forced : g->start;
        if (tfm_infer_step(&g->infer, (int)n, toks, slots, logits, err) < 0)
            return -1;
    }
    return 0;
}

/* Greedy and sampling: prompts[0..n) decoded as one batch. */
static int run_batch(tfm_gen *g, const tfm_ids *prompts, size_t n, size_t first_index,
                     tfm_gen_result *res, tfm_gen_text_fn fn, void *ctx, tfm_err *err)
{
    const tfm_lm *lm = g->lm;
    const int V = lm->cfg.vocab_size;
    if (need_cache(g, (int)n, cache_len(g, prompts, n), err) < 0)
        return -1;
    const int ctx_len = g->infer.max_len;
    int rc = -1;
    seq *seqs = tfm_calloc(n, sizeof *seqs);
    float *logits = tfm_malloc(sizeof *logits * n * V);
    uint32_t *toks = tfm_malloc(sizeof *toks * n);
    int *slots = tfm_malloc(sizeof *slots * n);
    size_t *rows = tfm_malloc(sizeof *rows * n); /* row -> seq */
    size_t nrows = 0;

    double t0 = tfm_now();
    for (size_t i = 0; i < n; i++) {
        seq *s = &seqs[i];
        s->index = first_index + i;
        s->slot = (int)i;
        res[i].n_prompt = prompts[i].len;
        res[i].hyps = tfm_calloc(1, sizeof *res[i].hyps);
        res[i].n_hyps = 1;
        s->hyp = &res[i].hyps[0];
        if (g->encdec) { /* the target so far: the penalty's history */
            tfm_ids_push(&s->hist, g->start);
            if (g->forced >= 0)
                tfm_ids_push(&s->hist, (uint32_t)g->forced);
        } else
            tfm_ids_append(&s->hist, prompts[i].data, prompts[i].len);
        if (g->opts.strategy == TFM_GEN_SAMPLE) {
            if (tfm_sampler_init(&s->sampler, &g->opts.sample, (uint32_t)V,
                                 g->opts.seed + s->index, err) < 0)
                goto done;
            s->has_sampler = 1;
        }
        if (g->encdec) {
            slots[i] = s->slot;
        } else if (prefill(g, s->slot, prompts[i].data, prompts[i].len, prompts[i].len,
                           logits + nrows * V, err) < 0 ||
                   check_logits(g, logits + nrows * V, 1, &i, err) < 0) {
            goto done;
        }
        rows[nrows++] = i;
    }
    /* encoder-decoders: every source in one encoder pass, every start token
     * in one step */
    if (g->encdec && (start_decoders(g, prompts, n, slots, toks, logits, err) < 0 ||
                      check_logits(g, logits, n, NULL, err) < 0))
        goto done;
    double t1 = tfm_now();
    size_t generated = 0;
    for (;;) {
        size_t nstep = 0;
        for (size_t r = 0; r < nrows; r++) {
            seq *s = &seqs[rows[r]];
            const float *lg = logits + r * V;
            /* the last token allowed (by max_new, or because the context
             * is full) is the forced one, when the model has it */
            const int last =
                s->hyp->ids.len + 1 >= (size_t)max_new(&g->opts, prompts[rows[r]].len) ||
                g->infer.len[s->slot] >= ctx_len;
            uint32_t tok = g->forced_last >= 0 && last ? (uint32_t)g->forced_last
                : s->has_sampler
                ? tfm_sampler_sample(&s->sampler, lg, s->hist.data, s->hist.len)
                : tfm_argmax(lg, (size_t)V);
            float lp = (float)(lg[tok] - tfm_logsumexp(lg, (size_t)V));
            if (!g->opts.ignore_eos && lm->eos >= 0 && tok == (uint32_t)lm->eos) {
                /* beam scores count end-of-text: so do these */
                s->hyp->finish = TFM_FINISH_EOS;
                s->hyp->eos_logprob = lp;
                s->hyp->score += lp;
                s->done = 1;
            } else {
                generated++;
                hyp_push(s->hyp, tok, lp);
                tfm_ids_push(&s->hist, tok);
                int st = update_text(g, s, fn, ctx, 0, err);
                if (st == 1)
                    st = cut_at_stop(lm, s->hyp, 1, err);
                if (st < 0)
                    goto done;
                if (st == 1) {
                    s->hyp->finish = TFM_FINISH_STOP;
                    s->done = 1;
                } else if (s->hyp->ids.len >= (size_t)max_new(&g->opts, prompts[rows[r]].len) ||
                           g->infer.len[s->slot] >= ctx_len) {
                    s->hyp->finish = TFM_FINISH_LENGTH;
                    s->done = 1;
                }
            }
            if (s->done) {
                if (s->hyp->finish != TFM_FINISH_STOP && update_text(g, s, fn, ctx, 1, err) < 0)
                    goto done;
                continue;
            }
            toks[nstep] = tok;
            slots[nstep] = s->slot;
            rows[nstep] = rows[r];
            nstep++;
        }
        nrows = nstep;
        if (!nrows)
            break;
        if (g->opts.no_cache) {
            /* the baseline the cache is measured against: the whole
             * sequence again, in one batched pass per row */
            for (size_t r = 0; r < nrows; r++) {
                seq *s = &seqs[rows[r]];
                tfm_infer_reset(&g->infer, s->slot);
                if (prefill(g, s->slot, s->hist.data, s->hist.len, prompts[rows[r]].len,
                            logits + r * V, err) < 0)
                    goto done;
            }
        } else if (step_profiled(g, (int)nrows, toks, slots, logits, err) < 0) {
            goto done;
        }
        if (check_logits(g, logits, nrows, rows, err) < 0)
            goto done;
    }
    double t2 = tfm_now();
    for (size_t i = 0; i < n; i++) {
        res[i].prefill_s = t1 - t0;
        res[i].decode_s = t2 - t1;
        g->stat_prompt_tokens += prompts[i].len;
        g->stat_out_tokens += res[i].hyps[0].ids.len;
    }
    g->stat_seqs += n;
    g->stat_gen_tokens += generated;
    g->stat_prefill_s += t1 - t0;
    g->stat_decode_s += t2 - t1;
    rc = 0;
done:
    for (size_t i = 0; i < n; i++) {
        tfm_ids_free(&seqs[i].hist);
        if (seqs[i].has_sampler)
            tfm_sampler_free(&seqs[i].sampler);
    }
    free(seqs);
    free(logits);
    free(toks);
    free(slots);
    free(rows);
    return rc;
}

/* Beam search's view of the cache.  With no_cache, each slot's tokens so
 * far (hist) and its prompt's length (plen, for a prefix LM's prefix):
 * every step runs them all again. */
typedef struct beam_ctx {
    tfm_gen *g;
    tfm_ids *hist;
    size_t *plen;
} beam_ctx;

static int beam_step(void *ctx, size_t n, const uint32_t *tokens, const int *slots,
                     float *logprobs, tfm_err *err)
{
    beam_ctx *b = ctx;
    tfm_gen *g = b->g;
    const int V = g->lm->cfg.vocab_size;
    if (b->hist) {
        for (size_t i = 0; i < n; i++) {
            tfm_ids *h = &b->hist[slots[i]];
            tfm_ids_push(h, tokens[i]);
            tfm_infer_reset(&g->infer, slots[i]);
            if (prefill(g, slots[i], h->data, h->len, b->plen[slots[i]],
                        logprobs + i * (size_t)V, err) < 0)
                return -1;
        }
    } else if (step_profiled(g, (int)n, tokens, slots, logprobs, err) < 0) {
        return -1;
    }
    /* slot s holds a hypothesis of the batch's prompt s / beam */
    size_t *index = tfm_malloc(sizeof *index * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        index[i] = (size_t)slots[i] / (size_t)g->opts.beam.beam;
    int rc = check_logits(g, logprobs, n, index, err);
    free(index);
    if (rc < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        tfm_log_softmax(logprobs + i * V, (size_t)V, logprobs + i * V);
    return 0;
}

static int beam_copy(void *ctx, int dst, int src, tfm_err *err)
{
    beam_ctx *b = ctx;
    tfm_infer_copy_slot(&b->g->infer, dst, src); /* an encoder-decoder's source too */
    if (b->hist) {
        tfm_ids_clear(&b->hist[dst]);
        tfm_ids_append(&b->hist[dst], b->hist[src].data, b->hist[src].len);
    }
    return 0;
}

/* Beam search for prompts[0..n): their searches step together, prompt i
 * in slots i·beam .. i·beam + beam - 1. */
static int run_beam(tfm_gen *g, const tfm_ids *prompts, size_t n, size_t first_index,
                    tfm_gen_result *res, tfm_gen_text_fn fn, void *ctx, tfm_err *err)
{
    const tfm_lm *lm = g->lm;
    const int V = lm->cfg.vocab_size;
    const tfm_gen_opts *o = &g->opts;
    const int B = o->beam.beam;
    if (need_cache(g, (int)n * B, cache_len(g, prompts, n), err) < 0)
        return -1;
    float *first = tfm_malloc(sizeof *first * n * V);
    uint32_t *toks = tfm_malloc(sizeof *toks * n);
    int *slots = tfm_malloc(sizeof *slots * n);
    tfm_beam_task *tasks = tfm_malloc(sizeof *tasks * n);
    tfm_beam_result *br = tfm_calloc(n, sizeof *br);
    beam_ctx bc = {g, NULL, NULL};
    if (o->no_cache) {
        bc.hist = tfm_calloc(n * (size_t)B, sizeof *bc.hist);
        bc.plen = tfm_calloc(n * (size_t)B, sizeof *bc.plen);
        for (size_t i = 0; i < n; i++) {
            tfm_ids *h = &bc.hist[i * (size_t)B];
            if (g->encdec) {
                tfm_ids_push(h, g->start);
                if (g->forced >= 0)
                    tfm_ids_push(h, (uint32_t)g->forced);
            } else {
                tfm_ids_append(h, prompts[i].data, prompts[i].len);
            }
            for (int k = 0; k < B; k++)
                bc.plen[i * (size_t)B + (size_t)k] = g->encdec ? h->len : prompts[i].len;
        }
    }
    int rc = -1;
    double t0 = tfm_now();
    for (size_t i = 0; i < n; i++) {
        int slot0 = (int)i * B;
        if (g->encdec) {
            slots[i] = slot0;
        } else if (prefill(g, slot0, prompts[i].data, prompts[i].len, prompts[i].len,
                           first + i * V, err) < 0) {
            goto done;
        }
        /* the last token needs no cache position: up to max_len - prompt + 1 */
        int plen = g->encdec ? g->n_start : (int)prompts[i].len;
        int room = g->infer.max_len - plen + 1;
        int limit = max_new(o, prompts[i].len);
        tasks[i] = (tfm_beam_task){first + i * V, slot0, limit < room ? limit : room};
    }
    if (g->encdec && start_decoders(g, prompts, n, slots, toks, first, err) < 0)
        goto done;
    if (check_logits(g, first, n, NULL, err) < 0)
        goto done;
    for (size_t i = 0; i < n; i++)
        tfm_log_softmax(first + i * V, (size_t)V, first + i * V);
    double t1 = tfm_now();
    tfm_beam_opts bo = o->beam;
    bo.eos = o->ignore_eos ? -1 : lm->eos;
    bo.forced_last = g->forced_last;
    bo.len_extra = g->encdec ? (int)g->n_start - 1 : 0; /* the forced <s> */
    tfm_beam_model m = {&bc, (uint32_t)V, beam_step, beam_copy};
    if (tfm_beam_search_many(&m, &bo, tasks, n, br, err) < 0)
        goto done;
    double t2 = tfm_now();
    for (size_t j = 0; j < n; j++) {
        tfm_gen_result *r = &res[j];
        r->n_prompt = prompts[j].len;
        r->prefill_s = t1 - t0;
        r->decode_s = t2 - t1;
        r->n_hyps = br[j].n;
        r->hyps = tfm_calloc(br[j].n ? br[j].n : 1, sizeof *r->hyps);
        g->stat_gen_tokens += br[j].steps + 1;
        for (size_t k = 0; k < br[j].n; k++) {
            const tfm_beam_hyp *bh = &br[j].hyps[k];
            tfm_gen_hyp *h = &r->hyps[k];
            size_t len = bh->len;
            if (bh->finish == TFM_FINISH_EOS && len > 0)
                h->eos_logprob = bh->logprobs[--len]; /* not part of the output */
            for (size_t i = 0; i < len; i++)
                hyp_push(h, bh->tokens[i], bh->logprobs[i]);
            h->finish = bh->finish;
            h->score = bh->score;
            if (lm->tok) {
                char w[1100];
                if (tfm_tokenizer_decode(lm->tok, h->ids.data, h->ids.len, 1, &h->text,
                                         err) < 0) {
                    tfm_err_prefix(err, "%s", where(g, first_index + j, w));
                    goto done;
                }
                size_t stop = find_stop(h->text.data, h->text.len, 0, o->stops, o->n_stops);
                if (stop < h->text.len) {
                    h->text.len = stop;
                    h->finish = TFM_FINISH_STOP;
                    if (cut_at_stop(lm, h, 0, err) < 0)
                        goto done;
                    /* the score of what is reported: the tokens kept, no
                     * end-of-text, normalised by their number */
                    double sum = 0;
                    for (size_t i = 0; i < h->ids.len; i++)
                        sum += h->logprobs[i];
                    h->eos_logprob = 0;
                    h->score = tfm_beam_score(sum, h->ids.len, o->beam.alpha, o->beam.lenpen);
                }
            }
        }
        /* cut hypotheses score anew: best first again (stable) */
        for (size_t k = 1; k < r->n_hyps; k++)
            for (size_t m = k; m > 0 && r->hyps[m].score > r->hyps[m - 1].score; m--) {
                tfm_gen_hyp t = r->hyps[m];
                r->hyps[m] = r->hyps[m - 1];
                r->hyps[m - 1] = t;
            }
        if (fn && br[j].n && r->hyps[0].text.len)
            fn(ctx, first_index + j, r->hyps[0].text.data, r->hyps[0].text.len);
        g->stat_prompt_tokens += prompts[j].len;
        g->stat_out_tokens += br[j].n ? r->hyps[0].ids.len : 0;
    }
    g->stat_seqs += n;
    g->stat_prefill_s += t1 - t0;
    g->stat_decode_s += t2 - t1;
    rc = 0;
done:
    for (size_t j = 0; bc.hist && j < n * (size_t)B; j++)
        tfm_ids_free(&bc.hist[j]);
    free(bc.hist);
    free(bc.plen);
    for (size_t j = 0; j < n; j++)
        tfm_beam_result_free(&br[j]);
    free(br);
    free(first);
    free(toks);
    free(slots);
    free(tasks);
    return rc;
}

/* A prefix LM's input of pairs that fills the whole context (--truncate
 * head cuts it so): its answer would begin past the positions the model
 * was trained on, so there is none. */
static int full_input(const tfm_gen *g, const tfm_ids *p)
{
    return g->lm->prefix_pairs && p->len >= (size_t)tfm_gen_source_limit(&g->lm->cfg);
}

int tfm_gen_run(tfm_gen *g, const tfm_ids *prompts, size_t n, size_t first_index,
                tfm_gen_result *results, tfm_gen_text_fn on_text, void *ctx,
                tfm_err *err)
{
    memset(results, 0, sizeof *results * n);
    for (size_t i = 0; i < n; i++)
        if (check_prompt(g, &prompts[i], first_index + i, err) < 0)
            return -1;
    for (size_t b0 = 0; b0 < n;) {
        if (full_input(g, &prompts[b0])) { /* no room for an answer: it is empty */
            tfm_gen_result *r = &results[b0];
            r->n_prompt = prompts[b0].len;
            r->hyps = tfm_calloc(1, sizeof *r->hyps);
            r->n_hyps = 1;
            r->hyps[0].finish = TFM_FINISH_LENGTH;
            g->stat_prompt_tokens += prompts[b0].len;
            g->stat_seqs++;
            b0++;
            continue;
        }
        size_t nb = 1;
        while (nb < (size_t)g->batch && b0 + nb < n && !full_input(g, &prompts[b0 + nb]))
            nb++;
        g->cur_first = first_index + b0;
        int rc = g->opts.strategy == TFM_GEN_BEAM
            ? run_beam(g, prompts + b0, nb, first_index + b0, results + b0, on_text, ctx, err)
            : run_batch(g, prompts + b0, nb, first_index + b0, results + b0, on_text, ctx, err);
        if (rc < 0) {
            for (size_t i = 0; i < n; i++)
                tfm_gen_result_free(&results[i]);
            return -1;
        }
        b0 += nb;
    }
    return 0;
}

int tfm_gen_prompt_ids(const tfm_lm *lm, const tfm_gen_prompt *p, const char *text, size_t len,
                       const char *where, tfm_ids *out, size_t *cut, tfm_err *err)
{
    const int encdec = lm->cfg.kind == TFM_KIND_ENCODER_DECODER;
    *cut = 0;
    tfm_ids_clear(out);
    if (p->ids) {
        const char *s = text, *end = text + len;
        while (s < end) {
            while (s < end && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n' || *s == ','))
                s++;
            if (s >= end)
                break;
            char *q;
            unsigned long long v = strtoull(s, &q, 10);
            int vocab = encdec ? tfm_model_config_src_vocab(&lm->cfg) : lm->cfg.vocab_size;
            if (q == s || v >= (unsigned long long)vocab)
                return tfm_err_set(err, "%s: '%.*s' is not a token id below %d", where,
                                   (int)(q > s ? q - s : 1), s, vocab);
            tfm_ids_push(out, (uint32_t)v);
            s = q;
        }
    } else if (encdec || lm->prefix_pairs) {
        /* a prefix LM of pairs reads its input as a source is read; the
         * task prefix and the text are one text, as in training */
        tfm_buf joined = {0};
        if (p->prefix_len) {
            tfm_buf_append(&joined, p->prefix, p->prefix_len);
            tfm_buf_append(&joined, text, len);
            text = joined.data;
            len = joined.len;
        }
        int rc = tfm_translate_source_split(encdec ? p->src_tok : lm->tok,
                                            encdec ? p->src_scratch : p->scratch, text, len,
                                            encdec && lm->cfg.source_bos,
                                            tfm_gen_source_limit(&lm->cfg), p->truncate, encdec,
                                            p->split_special, out, cut, err);
        tfm_buf_free(&joined);
        return rc < 0 ? tfm_err_prefix(err, "%s", where) : 0;
    } else {
        if (tfm_tokenizer_check_kept(lm->tok, text, len, err) < 0)
            return tfm_err_prefix(err, "%s", where);
        /* the token the tokenizer's template starts a text with (Llama 3's
         * <|begin_of_text|>), as HF's input_ids have it */
        int64_t pre = tfm_tokenizer_specials(lm->tok)->prefix;
        if (pre >= 0)
            tfm_ids_push(out, (uint32_t)pre);
        tfm_tokenizer_encode(lm->tok, p->scratch, text, len, 1, out);
    }
    if (encdec) { /* token ids of the line: the source ends with end-of-text */
        if (p->src_eos < 0)
            return tfm_err_set(err, "the source tokenizer has no end-of-text token, which "
                                    "ends every source");
        /* ids ending with it already (a HuggingFace tokenizer's input_ids)
         * keep that one */
        if (!p->ids || !out->len || out->data[out->len - 1] != (uint32_t)p->src_eos)
            tfm_ids_push(out, (uint32_t)p->src_eos);
        if (tfm_translate_fit(out, (uint32_t)p->src_eos, tfm_gen_source_limit(&lm->cfg),
                              p->truncate, 1, cut, err) < 0)
            return tfm_err_prefix(err, "%s", where);
        return 0;
    }
    if (lm->prefix_pairs) { /* ids of an input: it ends with end-of-text */
        if (lm->eos < 0)
            return tfm_err_set(err, "the model has no end-of-text token to end its input");
        tfm_ids_push(out, (uint32_t)lm->eos);
        if (tfm_translate_fit(out, (uint32_t)lm->eos, tfm_gen_source_limit(&lm->cfg),
                              p->truncate, 0, cut, err) < 0)
            return tfm_err_prefix(err, "%s", where);
        return 0;
    }
    if (out->len == 0 && lm->eos >= 0)
        tfm_ids_push(out, (uint32_t)lm->eos);
    if (out->len == 0)
        return tfm_err_set(err, "%s is empty, and the model has no end-of-text token to "
                                "start from", where);
    return 0;
}

int tfm_gen_task_prefix(const char *path, tfm_buf *out, tfm_err *err)
{
    tfm_data_keys d;
    if (tfm_data_keys_of_file(path, &d, err) < 0)
        return -1;
    tfm_buf_puts(out, d.prefix);
    return 0;
}

int tfm_gen_sample_answers(const tfm_model_config *cfg, const tfm_weights *w, uint32_t eos,
                           const tfm_ids *prompts, size_t n, int max_new, double temperature,
                           int top_k, uint64_t seed, tfm_ids *out, tfm_err *err)
{
    for (size_t i = 0; i < n; i++)
        tfm_ids_clear(&out[i]);
    /* a model view without a file or tokenizer, as tfm_translate_greedy's */
    tfm_lm lm;
    memset(&lm, 0, sizeof lm);
    lm.cfg = *cfg;
    lm.w = *w;
    lm.eos = eos;
    tfm_gen_opts o;
    tfm_gen_opts_default(&o);
    o.strategy = TFM_GEN_SAMPLE;
    tfm_sample_opts_default(&o.sample);
    o.sample.temperature = (float)temperature;
    o.sample.top_k = top_k > 0 ? (uint32_t)top_k : 0;
    o.max_tokens = max_new;
    o.seed = seed;
    int batch = n < 64 ? (int)(n ? n : 1) : 64;
    tfm_gen g;
    if (tfm_gen_init(&g, &lm, &o, batch, err) < 0)
        return -1;
    tfm_gen_result *res = tfm_calloc((size_t)batch, sizeof *res);
    int rc = 0;
    for (size_t b0 = 0; b0 < n && rc == 0; b0 += (size_t)batch) {
        size_t nb = n - b0 < (size_t)batch ? n - b0 : (size_t)batch;
        if (tfm_gen_run(&g, prompts + b0, nb, b0, res, NULL, NULL, err) < 0) {
            rc = -1;
            break;
        }
        for (size_t j = 0; j < nb; j++) {
            const tfm_gen_hyp *h = &res[j].hyps[0];
            tfm_ids_append(&out[b0 + j], h->ids.data, h->ids.len);
            if (h->finish == TFM_FINISH_EOS)
                tfm_ids_push(&out[b0 + j], eos);
            tfm_gen_result_free(&res[j]);
        }
    }
    free(res);
    tfm_gen_free(&g);
    return rc;
}
