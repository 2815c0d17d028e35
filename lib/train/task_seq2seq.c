/* The sequence-to-sequence task (encoder-decoders): pairs of sentences,
 * source<TAB>target lines or two line-aligned files, encoded with the one
 * tokenizer of the run (or the source side with data.source_tokenizer).
 *
 * A pair becomes: source ids + [EOS] for the encoder; [BOS] + target for
 * the decoder's input and target + [EOS] for its labels (teacher forcing
 * with the target shifted right).  BOS is the tokenizer's start token, or
 * EOS when it has none (as fairseq starts its decoder).  tfm-generate
 * translates with the same convention.  data.prefix (T5's task prefix) is
 * put before every source, training and validation, and encoded with it as
 * one text: tfm-generate reads it from the model file's config and does the
 * same.
 *
 * Batches: with train.max_tokens, the pairs are sorted by length and a
 * batch is a run of neighbours from a random start, as many as fit the
 * budget counted with padding (pairs × longest side), so that little of a
 * batch is padding; without it, train.batch_size pairs drawn uniformly.  The
 * rng is the whole data position either way. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"
#include "base/order.h"
#include "metrics/bleu.h"
#include "data/source.h"
#include "model/decode.h"
#include "train/task_internal.h"

typedef tfm_pair pair;
typedef tfm_pairs pairs;

typedef struct s2s_task {
    pairs train, val;
    uint32_t bos, eos, pad;
    int B;                  /* batch_size, when max_tokens is 0 */
    int64_t max_tokens;
    int max_len;            /* block_size - 1: the longest side */
    size_t truncated;       /* pairs cut to max_len */
    const tfm_tokenizer *tok;
    size_t bleu_n;          /* validation pairs translated for BLEU; 0: none */
    tfm_translate_fn translate; /* their greedy translator (task.h) */
    /* the batch being built */
    int32_t *src, *x, *y;
    int *src_lengths;
    size_t *draw;           /* [batch_size]: the random pairs of a batch */
    size_t cap_src, cap_tgt, cap_rows;
} s2s_task;

void tfm_pairs_free(tfm_pairs *P)
{
    tfm_buf_free(&P->text);
    free(P->ids.data);
    free(P->p);
    free(P->order);
    memset(P, 0, sizeof *P);
}

/* Length of a pair for batching: its longer side as the model sees it. */
static uint32_t pair_size(const pair *p)
{
    uint32_t t = p->tgt_len + 1;
    return p->src_len > t ? p->src_len : t;
}

/* ---- reading ---------------------------------------------------------------- */

typedef struct reader {
    const tfm_tokenizer *tok, *src_tok;
    tfm_tok_scratch *scratch, *src_scratch;
    tfm_ids src;            /* the source being encoded */
    int max_len;
    int truncate_error;
    int encoder;            /* the sources are an encoder's (else a prefix LM's inputs) */
    int source_bos;         /* model.source_bos: sources begin with the bos */
    int64_t forced_bos;     /* model.forced_bos: every target begins with it; -1: none */
    int keep_text;
    size_t *truncated;
    const char *prefix;     /* data.prefix: text put before every source */
    size_t prefix_len;
    tfm_buf joined;         /* the prefix and a source */
} reader;

/* Encodes one side into P->ids; returns its length (before EOS), or -1.
 * A source is tfm_translate_source's (ending with the source tokenizer's
 * EOS), the very ids tfm-generate builds from the same line. */
static long encode_side(reader *r, pairs *P, const char *s, size_t n, int source,
                        const char *file, size_t line, const char *what, tfm_err *err)
{
    size_t start = P->ids.len, len, cut = 0;
    if (source) {
        const tfm_tokenizer *tok = r->src_tok ? r->src_tok : r->tok;
        if (tfm_translate_source(tok, r->src_tok ? r->src_scratch : r->scratch, s, n,
                                 r->source_bos, r->max_len + 1, 1, r->encoder, &r->src, &cut,
                                 err) < 0)
            return tfm_err_prefix(err, "%s:%zu", file, line);
        tfm_ids_append(&P->ids, r->src.data, r->src.len);
        len = r->src.len - 1;
    } else {
        if (r->forced_bos >= 0) /* as the decoder will be made to begin */
            tfm_ids_push(&P->ids, (uint32_t)r->forced_bos);
        tfm_tokenizer_encode(r->tok, r->scratch, s, n, 0, &P->ids);
        len = P->ids.len - start;
        if (len > (size_t)r->max_len) {
            cut = len - (size_t)r->max_len;
            len = (size_t)r->max_len;
            P->ids.len = start + len;
        }
    }
    if (cut) {
        if (r->truncate_error)
            return tfm_err_set(err, "%s:%zu: the %s has %zu tokens, more than the %d that fit "
                               "model.block_size %d with its end-of-text (data.truncate: head "
                               "cuts it)", file, line, what, len + cut, r->max_len,
                               r->max_len + 1);
        r->truncated[0]++;
    }
    return (long)len;
}

static int add_pair(reader *r, pairs *P, const char *s, size_t sn, const char *t, size_t tn,
                    const char *sfile, const char *tfile, size_t line, tfm_err *err)
{
    if (sn == 0)
        return tfm_err_set(err, "%s:%zu: empty source", sfile, line);
    if (tn == 0)
        return tfm_err_set(err, "%s:%zu: empty target", tfile, line);
    if (P->n == P->cap) {
        P->cap = P->cap ? 2 * P->cap : 1024;
        P->p = tfm_realloc(P->p, P->cap * sizeof *P->p);
    }
    pair *p = &P->p[P->n];
    p->line = (uint32_t)line;
    p->src = P->ids.len;
    if (r->prefix_len) { /* encoded as one text, as tfm-generate encodes it */
        r->joined.len = 0;
        tfm_buf_append(&r->joined, r->prefix, r->prefix_len);
        tfm_buf_append(&r->joined, s, sn);
        s = r->joined.data;
        sn = r->joined.len;
    }
    long ls = encode_side(r, P, s, sn, 1, sfile, line, "source", err);
    if (ls < 0)
        return -1;
    p->src_len = (uint32_t)ls + 1;
    p->tgt = P->ids.len;
    long lt = encode_side(r, P, t, tn, 0, tfile, line, "target", err);
    if (lt < 0)
        return -1;
    p->tgt_len = (uint32_t)lt;
    p->ref = P->text.len;
    p->ref_len = r->keep_text ? tn : 0;
    if (r->keep_text)
        tfm_buf_append(&P->text, t, tn);
    P->n++;
    return 0;
}

static int read_tsv(reader *r, pairs *P, const char *path, tfm_err *err)
{
    tfm_map m;
    if (tfm_map_open(&m, path, err) < 0)
        return -1;
    size_t pos = 0, line = 0;
    const char *s;
    size_t n;
    int rc = 0;
    while (rc == 0 && tfm_map_line(&m, &pos, &s, &n)) {
        line++;
        const char *tab = memchr(s, '\t', n);
        if (!tab) {
            rc = tfm_err_set(err, "%s:%zu: no tab: expected source<TAB>target", path, line);
            break;
        }
        const char *t = tab + 1;
        size_t tn = n - (size_t)(t - s);
        if (memchr(t, '\t', tn)) {
            rc = tfm_err_set(err, "%s:%zu: more than one tab: expected source<TAB>target", path,
                             line);
            break;
        }
        rc = add_pair(r, P, s, (size_t)(tab - s), t, tn, path, path, line, err);
    }
    tfm_map_close(&m);
    if (rc == 0 && P->n == 0)
        rc = tfm_err_set(err, "%s: no pairs", path);
    snprintf(P->name, sizeof P->name, "%s", path);
    return rc;
}

static int read_two(reader *r, pairs *P, const char *spath, const char *tpath, tfm_err *err)
{
    tfm_map ms, mt;
    if (tfm_map_open(&ms, spath, err) < 0)
        return -1;
    if (tfm_map_open(&mt, tpath, err) < 0) {
        tfm_map_close(&ms);
        return -1;
    }
    size_t ps = 0, pt = 0, line = 0;
    int rc = 0;
    for (;;) {
        const char *s, *t;
        size_t sn, tn;
        int hs = tfm_map_line(&ms, &ps, &s, &sn), ht = tfm_map_line(&mt, &pt, &t, &tn);
        if (!hs && !ht)
            break;
        line++;
        if (hs != ht) {
            rc = tfm_err_set(err, "%s:%zu: %s ends here but %s has more lines (the two files "
                             "must be line-aligned)", hs ? tpath : spath, line,
                             hs ? tpath : spath, hs ? spath : tpath);
            break;
        }
        if ((rc = add_pair(r, P, s, sn, t, tn, spath, tpath, line, err)) < 0)
            break;
    }
    tfm_map_close(&ms);
    tfm_map_close(&mt);
    if (rc == 0 && P->n == 0)
        rc = tfm_err_set(err, "%s: no pairs", spath);
    snprintf(P->name, sizeof P->name, "%s", spath);
    return rc;
}

/* Moves the last `count` pairs of from into to (ids stay shared by copy). */
static void split_tail(pairs *from, pairs *to, size_t count)
{
    memset(to, 0, sizeof *to);
    to->cap = count;
    to->p = tfm_malloc((count ? count : 1) * sizeof *to->p);
    size_t first = from->n - count;
    size_t lo = count ? from->p[first].src : from->ids.len;
    tfm_ids_append(&to->ids, from->ids.data + lo, from->ids.len - lo);
    for (size_t i = 0; i < count; i++) {
        to->p[i] = from->p[first + i];
        to->p[i].src -= lo;
        to->p[i].tgt -= lo;
    }
    to->n = count;
    from->n = first;
    from->ids.len = lo;
    size_t tlo = count ? from->p[first].ref : from->text.len;
    tfm_buf_append(&to->text, from->text.data + tlo, from->text.len - tlo);
    for (size_t i = 0; i < count; i++)
        to->p[i].ref -= tlo;
    from->text.len = tlo;
}

int tfm_task_pairs_read(tfm_pairs *train, tfm_pairs *val, const tfm_config *cfg,
                        const tfm_tokenizer *tok, const tfm_tokenizer *src_tok, int max_len,
                        int keep_text, size_t *truncated, tfm_err *err)
{
    reader r = {.tok = tok, .scratch = tfm_tok_scratch_new(tok),
                .src_tok = src_tok, .src_scratch = src_tok ? tfm_tok_scratch_new(src_tok) : NULL,
                .max_len = max_len,
                .truncate_error = cfg->data.truncate == TFM_CONFIG_TRUNCATE_ERROR,
                .encoder = cfg->model.kind == TFM_KIND_ENCODER_DECODER,
                .source_bos = cfg->model.source_bos,
                .forced_bos = cfg->model.forced_bos,
                .keep_text = keep_text, .truncated = truncated,
                .prefix = cfg->data.prefix, .prefix_len = strlen(cfg->data.prefix)};
    int rc;
    if (cfg->data.text[0])
        rc = read_tsv(&r, train, cfg->data.text, err);
    else
        rc = read_two(&r, train, cfg->data.source, cfg->data.target, err);
    if (rc == 0 && cfg->data.val[0])
        rc = read_tsv(&r, val, cfg->data.val, err);
    else if (rc == 0 && cfg->data.val_source[0])
        rc = read_two(&r, val, cfg->data.val_source, cfg->data.val_target, err);
    tfm_tok_scratch_free(r.scratch);
    tfm_ids_free(&r.src);
    tfm_buf_free(&r.joined);
    if (r.src_scratch)
        tfm_tok_scratch_free(r.src_scratch);
    if (rc < 0)
        return -1;
    if (!val->n && cfg->data.val_fraction > 0) {
        size_t nv = (size_t)((double)train->n * cfg->data.val_fraction);
        if (nv == train->n)
            nv--;
        split_tail(train, val, nv);
        snprintf(val->name, sizeof val->name, "%s", train->name);
    }
    return 0;
}

static size_t size_of_pair(const void *P, size_t i)
{
    return pair_size(&((const pairs *)P)->p[i]);
}

static void sort_by_size(pairs *P)
{
    P->order = tfm_malloc((P->n ? P->n : 1) * sizeof *P->order);
    tfm_order_by_key(P->order, P->n, size_of_pair, P);
}

/* ---- batches ---------------------------------------------------------------- */

/* Fills the batch from pairs idx[0..n). */
static void build(s2s_task *K, const pairs *P, const size_t *idx, int n, tfm_batch *b,
                  size_t *n_tokens)
{
    int S = 1, T = 1;
    for (int i = 0; i < n; i++) {
        const pair *p = &P->p[idx[i]];
        if ((int)p->src_len > S)
            S = (int)p->src_len;
        if ((int)p->tgt_len + 1 > T)
            T = (int)p->tgt_len + 1;
    }
    size_t ns = (size_t)n * S, nt = (size_t)n * T;
    if (ns > K->cap_src) {
        K->cap_src = ns;
        K->src = tfm_realloc(K->src, ns * sizeof *K->src);
    }
    if (nt > K->cap_tgt) {
        K->cap_tgt = nt;
        K->x = tfm_realloc(K->x, nt * sizeof *K->x);
        K->y = tfm_realloc(K->y, nt * sizeof *K->y);
    }
    if ((size_t)n > K->cap_rows) {
        K->cap_rows = (size_t)n;
        K->src_lengths = tfm_realloc(K->src_lengths, (size_t)n * sizeof *K->src_lengths);
    }
    size_t count = 0;
    for (int i = 0; i < n; i++) {
        const pair *p = &P->p[idx[i]];
        const uint32_t *src = P->ids.data + p->src, *tgt = P->ids.data + p->tgt;
        int32_t *s = K->src + (size_t)i * S, *x = K->x + (size_t)i * T, *y = K->y + (size_t)i * T;
        for (int j = 0; j < S; j++)
            s[j] = j < (int)p->src_len ? (int32_t)src[j] : (int32_t)K->pad;
        x[0] = (int32_t)K->bos;
        for (int j = 0; j < T; j++) {
            if (j > 0)
                x[j] = j <= (int)p->tgt_len ? (int32_t)tgt[j - 1] : (int32_t)K->pad;
            y[j] = j < (int)p->tgt_len ? (int32_t)tgt[j] : j == (int)p->tgt_len ? (int32_t)K->eos
                                                                                : -1;
        }
        K->src_lengths[i] = (int)p->src_len;
        count += p->tgt_len + 1;
    }
    *b = (tfm_batch){.inputs = K->x, .targets = K->y, .B = n, .T = T, .src = K->src, .S = S,
                     .src_lengths = K->src_lengths};
    *n_tokens = count;
}

/* How many of the sorted pairs from `first` on fit the budget. */
static size_t run_length(const s2s_task *K, const pairs *P, size_t first)
{
    size_t n = 0;
    uint32_t longest = 0;
    while (first + n < P->n) {
        uint32_t s = pair_size(&P->p[P->order[first + n]]);
        uint32_t l = s > longest ? s : longest;
        if (n && (uint64_t)(n + 1) * l > (uint64_t)K->max_tokens)
            break;
        longest = l;
        n++;
    }
    return n;
}

static int s2s_next(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    (void)err;
    s2s_task *K = impl;
    pairs *P = &K->train;
    if (!K->max_tokens) {
        for (int i = 0; i < K->B; i++)
            K->draw[i] = (size_t)tfm_rng_below(rng, P->n);
        build(K, P, K->draw, K->B, b, n_tokens);
        return 0;
    }
    /* a run of neighbours in length order from a random start; near the
     * end the run extends backwards, so the longest pairs still fill a
     * batch */
    size_t first = (size_t)tfm_rng_below(rng, P->n);
    size_t n = run_length(K, P, first);
    while (first > 0 && first + n == P->n) {
        size_t m = run_length(K, P, first - 1);
        if (m <= n)
            break;
        first--;
        n = m;
    }
    build(K, P, P->order + first, (int)n, b, n_tokens);
    return 0;
}

/* Corpus BLEU (sacrebleu's, metrics/bleu.h) of greedy translations of the
 * first bleu_n validation pairs against their target texts. */
static int bleu(s2s_task *K, tfm_model *m, double *score, tfm_err *err)
{
    pairs *P = &K->val;
    size_t n = K->bleu_n;
    tfm_ids *src = tfm_malloc(n * sizeof *src), *out = tfm_malloc(n * sizeof *out);
    memset(src, 0, n * sizeof *src);
    memset(out, 0, n * sizeof *out);
    for (size_t i = 0; i < n; i++)
        tfm_ids_append(&src[i], P->ids.data + P->p[i].src, P->p[i].src_len);
    tfm_weights w;
    int rc = K->translate ? tfm_weights_from_model(&w, m, err)
                          : tfm_err_set(err, "train.eval_bleu: no translator to decode the "
                                        "validation sources (tfm_task_set_translate)");
    if (rc == 0) {
        rc = K->translate(&m->cfg, &w, K->bos, K->eos, src, n, 0, 0, 0, out, err);
        tfm_weights_free(&w);
    }
    tfm_bleu_stats st = {0};
    tfm_buf hyp = {0};
    for (size_t i = 0; rc == 0 && i < n; i++) {
        tfm_buf_clear(&hyp);
        rc = tfm_tokenizer_decode(K->tok, out[i].data, out[i].len, 1, &hyp, err);
        const char *ref = P->text.data + P->p[i].ref;
        size_t ref_len = P->p[i].ref_len;
        if (rc == 0)
            tfm_bleu_add(&st, hyp.data ? hyp.data : "", hyp.len, &ref, &ref_len, 1, 0);
    }
    if (rc == 0) {
        tfm_bleu_score sc;
        tfm_bleu_compute(&st, 0, &sc);
        *score = sc.bleu;
    }
    tfm_buf_free(&hyp);
    for (size_t i = 0; i < n; i++) {
        free(src[i].data);
        free(out[i].data);
    }
    free(src);
    free(out);
    return rc;
}

static int s2s_metrics(void *impl, const char **names)
{
    names[0] = "bleu";
    return ((s2s_task *)impl)->bleu_n ? 1 : 0;
}

/* Mean loss per target token over every validation pair, in length order
 * and batched as training is. */
static int s2s_evaluate(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s, tfm_err *err)
{
    (void)seed;
    s2s_task *K = impl;
    pairs *P = &K->val;
    if (K->bleu_n && bleu(K, m, &s->metric, err) < 0)
        return -1;
    if (K->bleu_n)
        s->metric_name = "bleu";
    s->values[0] = s->metric;
    double sum = 0, count = 0;
    for (size_t first = 0; first < P->n;) {
        size_t n = K->max_tokens ? run_length(K, P, first) : (size_t)K->B;
        if (first + n > P->n)
            n = P->n - first;
        tfm_batch b;
        size_t nt;
        build(K, P, P->order + first, (int)n, &b, &nt);
        float l;
        if (tfm_model_forward_batch(m, &b, &l, err) < 0)
            return -1;
        sum += (double)l * (double)nt;
        count += (double)nt;
        first += n;
    }
    s->loss = count ? sum / count : NAN;
    return 0;
}

static int s2s_has_val(void *impl)
{
    return ((s2s_task *)impl)->val.n > 0;
}

static void s2s_describe(void *impl, char *buf, size_t size)
{
    s2s_task *K = impl;
    int len = snprintf(buf, size, "%zu training pairs (%zu tokens), %zu validation pairs",
                       K->train.n, K->train.ids.len, K->val.n);
    if (K->truncated && len > 0 && (size_t)len < size)
        snprintf(buf + len, size - (size_t)len,
                 "; %zu sides cut to %d tokens (data.truncate head)", K->truncated, K->max_len);
}

static void s2s_free(void *impl)
{
    s2s_task *K = impl;
    tfm_pairs_free(&K->train);
    tfm_pairs_free(&K->val);
    free(K->src);
    free(K->x);
    free(K->y);
    free(K->src_lengths);
    free(K->draw);
    free(K);
}

static void s2s_set_translate(void *impl, tfm_translate_fn translate)
{
    ((s2s_task *)impl)->translate = translate;
}

static const tfm_task_ops s2s_ops = {
    .name = "seq2seq",
    .describe = s2s_describe,
    .has_val = s2s_has_val,
    .next = s2s_next,
    .evaluate = s2s_evaluate,
    .metrics = s2s_metrics,
    .set_translate = s2s_set_translate,
    .free = s2s_free,
};

/* Checks every id of P against the two vocabularies. */
static int check_ids(const pairs *P, int64_t src_vocab, int64_t vocab, tfm_err *err)
{
    for (size_t i = 0; i < P->n; i++) {
        const pair *p = &P->p[i];
        for (uint32_t j = 0; j < p->src_len; j++)
            if (P->ids.data[p->src + j] >= src_vocab)
                return tfm_err_set(err, "%s:%u: source token id %u is outside the source "
                                   "vocabulary (size %lld)", P->name, p->line,
                                   P->ids.data[p->src + j], (long long)src_vocab);
        for (uint32_t j = 0; j < p->tgt_len; j++)
            if (P->ids.data[p->tgt + j] >= vocab)
                return tfm_err_set(err, "%s:%u: target token id %u is outside the vocabulary "
                                   "(size %lld)", P->name, p->line, P->ids.data[p->tgt + j],
                                   (long long)vocab);
    }
    return 0;
}

static int load(s2s_task *K, tfm_config *cfg, const tfm_tokenizer *tok,
                const tfm_tokenizer *src_tok, tfm_err *err)
{
    if (src_tok && tfm_translate_source_eos(src_tok) < 0)
        return tfm_err_set(err, "%s: the source tokenizer has no end-of-text token, which "
                           "ends every source", cfg->data.source_tokenizer);
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    if (sp->eos < 0)
        return tfm_err_set(err, "%s: the tokenizer has no end-of-text token, which an "
                           "encoder-decoder needs to end sources and targets (train one with "
                           "a special such as </s>)", cfg->data.tokenizer);
    K->eos = (uint32_t)sp->eos;
    K->bos = (uint32_t)tfm_task_decoder_start(cfg, sp);
    K->pad = sp->pad >= 0 ? (uint32_t)sp->pad : K->eos;
    if (cfg->model.block_size < 2)
        return tfm_err_set(err, "model.block_size %lld: an encoder-decoder needs at least 2 "
                           "(a token and end-of-text)", (long long)cfg->model.block_size);
    K->max_len = (int)cfg->model.block_size - 1;
    /* a side holds at most block_size - 1 tokens besides its EOS or BOS:
     * the source then EOS, the target after BOS (input) or before EOS
     * (labels) */
    if (tfm_task_pairs_read(&K->train, &K->val, cfg, tok, src_tok, K->max_len,
                            cfg->train.eval_bleu, &K->truncated, err) < 0)
        return -1;
    if (tfm_task_vocab_from_tokenizer(cfg, tok, err) < 0)
        return -1;
    if (src_tok) {
        uint32_t sv = tfm_tokenizer_vocab_size(src_tok);
        if (cfg->model.src_vocab_size == 0)
            cfg->model.src_vocab_size = sv;
        else if ((uint32_t)cfg->model.src_vocab_size < sv)
            return tfm_err_set(err, "model.src_vocab_size %lld is smaller than the vocabulary "
                               "of source tokenizer %s (%u tokens)",
                               (long long)cfg->model.src_vocab_size,
                               cfg->data.source_tokenizer, sv);
    }
    int64_t sv = cfg->model.src_vocab_size ? cfg->model.src_vocab_size : cfg->model.vocab_size;
    if (check_ids(&K->train, sv, cfg->model.vocab_size, err) < 0 ||
        check_ids(&K->val, sv, cfg->model.vocab_size, err) < 0)
        return -1;
    K->B = (int)cfg->train.batch_size;
    K->max_tokens = cfg->train.max_tokens;
    K->draw = tfm_malloc((size_t)K->B * sizeof *K->draw);
    K->tok = tok;
    if (cfg->train.eval_bleu)
        K->bleu_n = (uint64_t)cfg->train.bleu_sentences < K->val.n
                        ? (size_t)cfg->train.bleu_sentences : K->val.n;
    sort_by_size(&K->train);
    sort_by_size(&K->val);
    return 0;
}

int tfm_task_seq2seq_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok,
                          const tfm_tokenizer *src_tok, tfm_err *err)
{
    s2s_task *K = tfm_malloc(sizeof *K);
    memset(K, 0, sizeof *K);
    if (load(K, cfg, tok, src_tok, err) < 0) {
        s2s_free(K);
        return -1;
    }
    t->ops = &s2s_ops;
    t->impl = K;
    return 0;
}
