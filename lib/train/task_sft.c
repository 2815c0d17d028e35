/* Supervised fine-tuning on instructions (train.task sft), InstructGPT's
 * first stage: a decoder learns the completions of data.text's examples
 * (data/chat.h: TRL's prompt/completion and messages formats, the ChatML
 * template), the loss on the completion (assistant) tokens only, as TRL's
 * SFTTrainer with completion_only_loss and assistant_only_loss.
 *
 * An example of L ids is a row x = ids[0..L-1), y[t] = ids[t+1] where the
 * mask marks ids[t+1] a completion token, else -1 (the position would
 * predict a prompt token).  An example longer than block_size + 1 ids is
 * cut to them (data.truncate head: TRL's max_length = block_size + 1,
 * which keeps the start) or is an error naming its line.
 *
 * Batches: train.batch_size examples drawn uniformly, each a row padded to
 * the longest (pad: the tokenizer's, else end-of-text; targets -1).  With
 * data.packing, each of the batch_size rows of block_size positions takes
 * drawn examples one after another while the next fits (its L - 1
 * positions), the rest padding; the first example that does not fit ends
 * the row and begins the next, and the last one drawn that found no row
 * is dropped, so that a batch depends on nothing but the rng.  The rows'
 * doc_start keeps attention inside each example and restarts its
 * positions at 0 (model/transformer.h), so a packed example's loss terms
 * are those it has alone: TRL's padding-free packing (position_ids).
 *
 * Validation: every example of data.val (or the last data.val_fraction of
 * data.text) once, unpacked; the loss is the mean over their completion
 * tokens. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "data/chat.h"
#include "train/task_internal.h"

typedef struct sft_row {
    uint32_t *ids;      /* L ids */
    uint8_t *mask;      /* L: 1 for a completion token */
    int len;
} sft_row;

typedef struct sft_set {
    sft_row *row;
    size_t n;
} sft_set;

typedef struct sft_task {
    sft_set train, val;
    size_t cut, n_tokens;
    int B, T, packing;
    int32_t pad;
    int32_t *x, *y;     /* [B, T] */
    int *docs;          /* [B, T] with packing */
    size_t *draw;       /* [B] */
} sft_task;

static void set_free(sft_set *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->row[i].ids);
        free(s->row[i].mask);
    }
    free(s->row);
    memset(s, 0, sizeof *s);
}

/* Row r of the batch, from position at on: example e's L - 1 positions. */
static size_t put_example(sft_task *S, int *docs, const sft_row *e, int T, int r, int at)
{
    int32_t *x = S->x + (size_t)r * T + at, *y = S->y + (size_t)r * T + at;
    size_t count = 0;
    for (int t = 0; t + 1 < e->len; t++) {
        x[t] = (int32_t)e->ids[t];
        y[t] = e->mask[t + 1] ? (int32_t)e->ids[t + 1] : -1;
        count += e->mask[t + 1];
        if (docs)
            docs[(size_t)r * T + at + t] = at;
    }
    return count;
}

static void pad_row(sft_task *S, int *docs, int T, int r, int from)
{
    for (int t = from; t < T; t++) {
        S->x[(size_t)r * T + t] = S->pad;
        S->y[(size_t)r * T + t] = -1;
        if (docs) /* each padding position a document of its own */
            docs[(size_t)r * T + t] = t;
    }
}

/* Rows of the examples idx[0..n), padded to the longest. */
static size_t build_rows(sft_task *S, const sft_set *set, const size_t *idx, int n, tfm_batch *b)
{
    int T = 1;
    for (int i = 0; i < n; i++)
        T = set->row[idx[i]].len - 1 > T ? set->row[idx[i]].len - 1 : T;
    size_t count = 0;
    for (int i = 0; i < n; i++) {
        const sft_row *e = &set->row[idx[i]];
        count += put_example(S, NULL, e, T, i, 0);
        pad_row(S, NULL, T, i, e->len - 1);
    }
    *b = (tfm_batch){.inputs = S->x, .targets = S->y, .B = n, .T = T};
    return count;
}

static size_t build_packed(sft_task *S, tfm_rng *rng, tfm_batch *b)
{
    const sft_set *set = &S->train;
    int T = S->T;
    size_t count = 0;
    const sft_row *next = &set->row[tfm_rng_below(rng, set->n)];
    for (int r = 0; r < S->B; r++) {
        int at = 0;
        while (at + next->len - 1 <= T) {
            count += put_example(S, S->docs, next, T, r, at);
            at += next->len - 1;
            next = &set->row[tfm_rng_below(rng, set->n)];
        }
        pad_row(S, S->docs, T, r, at);
    }
    *b = (tfm_batch){.inputs = S->x, .targets = S->y, .B = S->B, .T = T, .doc_start = S->docs};
    return count;
}

static int sft_next(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    (void)err;
    sft_task *S = impl;
    if (S->packing) {
        *n_tokens = build_packed(S, rng, b);
        return 0;
    }
    for (int i = 0; i < S->B; i++)
        S->draw[i] = (size_t)tfm_rng_below(rng, S->train.n);
    *n_tokens = build_rows(S, &S->train, S->draw, S->B, b);
    return 0;
}

static int sft_evaluate(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s,
                        tfm_err *err)
{
    (void)seed;
    sft_task *S = impl;
    double sum = 0, count = 0;
    for (size_t first = 0; first < S->val.n; first += (size_t)S->B) {
        size_t n = S->val.n - first < (size_t)S->B ? S->val.n - first : (size_t)S->B;
        for (size_t i = 0; i < n; i++)
            S->draw[i] = first + i;
        tfm_batch b;
        size_t nt = build_rows(S, &S->val, S->draw, (int)n, &b);
        float l;
        if (nt && tfm_model_forward_batch(m, &b, &l, err) < 0)
            return -1;
        sum += nt ? (double)l * (double)nt : 0.0;
        count += (double)nt;
    }
    s->loss = count ? sum / count : NAN;
    return 0;
}

static int sft_has_val(void *impl)
{
    return ((sft_task *)impl)->val.n > 0;
}

static void sft_describe(void *impl, char *buf, size_t size)
{
    sft_task *S = impl;
    int len = snprintf(buf, size, "%zu training examples (%zu completion tokens), %zu "
                                  "validation examples%s",
                       S->train.n, S->n_tokens, S->val.n,
                       S->packing ? ", packed" : "");
    if (S->cut && len > 0 && (size_t)len < size)
        snprintf(buf + len, size - (size_t)len, "; %zu example%s cut to %d tokens "
                 "(data.truncate head)", S->cut, S->cut == 1 ? "" : "s", S->T + 1);
}

static void sft_free(void *impl)
{
    sft_task *S = impl;
    set_free(&S->train);
    set_free(&S->val);
    free(S->x);
    free(S->y);
    free(S->docs);
    free(S->draw);
    free(S);
}

static const tfm_task_ops sft_ops = {
    .name = "sft",
    .describe = sft_describe,
    .has_val = sft_has_val,
    .next = sft_next,
    .evaluate = sft_evaluate,
    .free = sft_free,
};

/* Examples [from, from + n) of d into set: encoded, checked against V,
 * cut to T + 1 ids or refused (truncate_error). */
static int encode_set(sft_task *S, sft_set *set, const tfm_chat_data *d, size_t from, size_t n,
                      const tfm_tokenizer *tok, uint32_t V, int truncate_error, tfm_err *err)
{
    tfm_tok_scratch *sc = tfm_tok_scratch_new(tok);
    tfm_ids ids = {0}, mask = {0};
    set->row = tfm_calloc(n ? n : 1, sizeof *set->row);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const tfm_chat_example *e = &d->ex[from + i];
        tfm_chat_encode(e, tok, sc, &ids, &mask);
        size_t L = ids.len, limit = (size_t)S->T + 1;
        if (L > limit && truncate_error) {
            rc = tfm_err_at(err, d->name, e->line, 0, "%zu tokens, more than model.block_size "
                            "+ 1 = %zu (data.truncate head keeps the first %zu)", L, limit,
                            limit);
            break;
        }
        if (L > limit) {
            L = limit;
            S->cut++;
        }
        size_t scored = 0;
        for (size_t k = 1; k < L; k++)
            scored += mask.data[k];
        if (L < 2 || !scored) {
            rc = tfm_err_at(err, d->name, e->line, 0, "no completion token to learn%s",
                            L < ids.len ? " in the first model.block_size + 1 tokens" : "");
            break;
        }
        sft_row *r = &set->row[set->n++];
        r->len = (int)L;
        r->ids = tfm_malloc(L * sizeof *r->ids);
        r->mask = tfm_malloc(L);
        for (size_t k = 0; k < L; k++) {
            if (ids.data[k] >= V) {
                rc = tfm_err_at(err, d->name, e->line, 0, "token id %u is outside "
                                "model.vocab_size %u", ids.data[k], V);
                break;
            }
            r->ids[k] = ids.data[k];
            r->mask[k] = (uint8_t)mask.data[k];
        }
        if (set == &S->train)
            S->n_tokens += scored;
    }
    tfm_ids_free(&ids);
    tfm_ids_free(&mask);
    tfm_tok_scratch_free(sc);
    return rc;
}

static int load(sft_task *S, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    const char *src = cfg->train.init[0] ? cfg->train.init : cfg->data.tokenizer;
    if (src[0] && tfm_chat_template_check(src, err) < 0)
        return -1;
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    if (sp->eos < 0)
        return tfm_err_set(err, "train.task sft: the tokenizer has no end-of-text token, "
                           "which ends each completion");
    S->pad = sp->pad >= 0 ? (int32_t)sp->pad : (int32_t)sp->eos;
    tfm_chat_data tr = {0}, va = {0};
    if (tfm_chat_read_file(&tr, cfg->data.text, 0, err) < 0)
        return -1;
    int rc = -1;
    size_t ntr = tr.n, nva = 0;
    if (cfg->data.val[0]) {
        if (tfm_chat_read_file(&va, cfg->data.val, 0, err) < 0)
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
    if (encode_set(S, &S->train, &tr, 0, ntr, tok, V, terr, err) < 0 ||
        encode_set(S, &S->val, cfg->data.val[0] ? &va : &tr, cfg->data.val[0] ? 0 : ntr, nva,
                   tok, V, terr, err) < 0)
        goto out;
    rc = 0;
out:
    tfm_chat_data_free(&tr);
    tfm_chat_data_free(&va);
    return rc;
}

int tfm_task_sft_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    if (!tok)
        return tfm_err_set(err, "train.task sft needs a tokenizer (data.tokenizer or "
                           "train.init's)");
    sft_task *S = tfm_calloc(1, sizeof *S);
    S->T = (int)cfg->model.block_size;
    S->B = (int)cfg->train.batch_size;
    S->packing = cfg->data.packing;
    if (load(S, cfg, tok, err) < 0) {
        sft_free(S);
        return -1;
    }
    size_t bt = (size_t)S->B * (size_t)S->T;
    S->x = tfm_malloc(bt * sizeof *S->x);
    S->y = tfm_malloc(bt * sizeof *S->y);
    if (S->packing)
        S->docs = tfm_malloc(bt * sizeof *S->docs);
    S->draw = tfm_malloc((size_t)S->B * sizeof *S->draw);
    t->ops = &sft_ops;
    t->impl = S;
    return 0;
}
