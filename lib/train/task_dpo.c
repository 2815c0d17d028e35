/* Direct preference optimisation (train.task dpo; Rafailov et al. 2023):
 * a decoder learns from data.text's {"prompt", "chosen", "rejected"} JSON
 * Lines (data/chat.h) to prefer the chosen answer, against a frozen
 * reference model, with TRL's DPOTrainer's sigmoid loss:
 *
 *     z = β·((log π(c|p) − log π_ref(c|p)) − (log π(r|p) − log π_ref(r|p)))
 *     loss = mean over the batch's pairs of −log σ(z)
 *
 * log π(a|p) the sum of the answer's token log-probabilities (its ids
 * after the prompt's, TRL's: the shorter of the two common prefixes of
 * the prompt's ids with prompt + answer's), β = train.beta.  The
 * reference is train.reference, else train.init (the model the run starts
 * from); its log-probabilities of every pair are computed once at the
 * start (TRL's precompute_ref_log_probs: the same numbers, since it never
 * changes), and it must have the policy's architecture.
 *
 * A batch is train.batch_size pairs: the chosen rows, then the rejected
 * rows, padded to the longest (targets −1 but on the answers).  The loss
 * couples each pair's two rows, so the task computes it itself
 * (tfm_task_step): one forward of the whole batch, then the backward with
 * each row's factor d(loss)/d(its summed log-probability)
 * (model/transformer.h tfm_model_backward_rows).
 *
 * Validation: every pair of data.val (or the last data.val_fraction) once:
 * the mean loss, and TRL's rewards β·(log π − log π_ref): the fraction of
 * pairs whose chosen reward is above the rejected one's, their means and
 * the mean margin. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "data/chat.h"
#include "train/task_internal.h"

typedef struct dpo_row {
    uint32_t *ids;
    int len, start;     /* the answer: ids[start..len) */
    double ref;         /* the reference's log-probability of the answer */
} dpo_row;

typedef struct dpo_set {
    dpo_row *c, *r;     /* [n] chosen, rejected */
    size_t n;
} dpo_set;

typedef struct dpo_task {
    dpo_set train, val;
    size_t cut;
    int B, T;
    double beta;
    int32_t pad;
    int32_t *x, *y;     /* [2B, T] */
    size_t *draw;       /* [B] the pairs of the last batch */
    const dpo_set *cur; /* and their set */
    int n_cur;
    float *w;           /* [2B] each row's factor */
} dpo_task;

static void set_free(dpo_set *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->c[i].ids);
        free(s->r[i].ids);
    }
    free(s->c);
    free(s->r);
    memset(s, 0, sizeof *s);
}

/* Row k: x = ids[0..L-1), y[t] = ids[t+1] on the answer, else -1. */
static size_t put_row(dpo_task *D, const dpo_row *e, int T, int k)
{
    int32_t *x = D->x + (size_t)k * T, *y = D->y + (size_t)k * T;
    size_t count = 0;
    for (int t = 0; t < T; t++) {
        int in = t + 1 < e->len;
        x[t] = in ? (int32_t)e->ids[t] : D->pad;
        y[t] = in && t + 1 >= e->start ? (int32_t)e->ids[t + 1] : -1;
        count += y[t] >= 0;
    }
    return count;
}

/* The pairs idx[0..n) of set: chosen rows 0..n, rejected rows n..2n. */
static size_t build(dpo_task *D, const dpo_set *set, const size_t *idx, int n, tfm_batch *b)
{
    int T = 1;
    for (int i = 0; i < n; i++) {
        int a = set->c[idx[i]].len - 1, r = set->r[idx[i]].len - 1;
        T = a > T ? a : T;
        T = r > T ? r : T;
    }
    size_t count = 0;
    for (int i = 0; i < n; i++) {
        count += put_row(D, &set->c[idx[i]], T, i);
        count += put_row(D, &set->r[idx[i]], T, n + i);
    }
    D->cur = set;
    D->n_cur = n;
    *b = (tfm_batch){.inputs = D->x, .targets = D->y, .B = 2 * n, .T = T};
    return count;
}

static int dpo_next(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    (void)err;
    dpo_task *D = impl;
    for (int i = 0; i < D->B; i++)
        D->draw[i] = (size_t)tfm_rng_below(rng, D->train.n);
    *n_tokens = build(D, &D->train, D->draw, D->B, b);
    return 0;
}

/* log σ(z), stably. */
static double log_sigmoid(double z)
{
    return z >= 0 ? -log1p(exp(-z)) : z - log1p(exp(z));
}

typedef struct dpo_sums {
    double loss, correct, chosen, rejected;
} dpo_sums;

/* The last forward's per-pair terms into s (sums over the pairs); with w,
 * each row's factor d(scale · mean loss)/d(its summed CE). */
static void pair_terms(dpo_task *D, tfm_model *m, const tfm_batch *b, float scale, float *w,
                       dpo_sums *s)
{
    const float *ls = tfm_model_lm_losses(m);
    int n = D->n_cur, T = b->T;
    for (int i = 0; i < n; i++) {
        double lp[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            const float *l = ls + (size_t)(i + k * n) * T;
            for (int t = 0; t < T; t++)
                lp[k] -= l[t];
        }
        const size_t j = D->draw[i];
        double rc = D->beta * (lp[0] - D->cur->c[j].ref);
        double rr = D->beta * (lp[1] - D->cur->r[j].ref);
        double z = rc - rr;
        s->loss -= log_sigmoid(z);
        s->correct += rc > rr;
        s->chosen += rc;
        s->rejected += rr;
        if (w) {
            /* d(−log σ(z))/dz = −σ(−z); z rises with the chosen log-prob,
             * which is minus its summed CE */
            double g = scale * D->beta * exp(log_sigmoid(-z)) / n;
            w[i] = (float)g;
            w[n + i] = (float)-g;
        }
    }
}

static int dpo_step(void *impl, tfm_model *m, const tfm_batch *b, float scale, float *loss,
                    tfm_err *err)
{
    dpo_task *D = impl;
    if (tfm_model_forward_batch(m, b, NULL, err) < 0)
        return -1;
    dpo_sums s = {0};
    pair_terms(D, m, b, scale, D->w, &s);
    tfm_model_backward_rows(m, TFM_HEAD_LM, D->w);
    *loss = (float)(s.loss / D->n_cur);
    return 0;
}

static int dpo_evaluate(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s,
                        tfm_err *err)
{
    (void)seed;
    dpo_task *D = impl;
    dpo_sums sum = {0};
    for (size_t first = 0; first < D->val.n; first += (size_t)D->B) {
        size_t n = D->val.n - first < (size_t)D->B ? D->val.n - first : (size_t)D->B;
        for (size_t i = 0; i < n; i++)
            D->draw[i] = first + i;
        tfm_batch b;
        build(D, &D->val, D->draw, (int)n, &b);
        if (tfm_model_forward_batch(m, &b, NULL, err) < 0)
            return -1;
        pair_terms(D, m, &b, 1.0f, NULL, &sum);
    }
    double n = (double)D->val.n;
    s->loss = sum.loss / n;
    s->values[0] = sum.correct / n;
    s->values[1] = sum.chosen / n;
    s->values[2] = sum.rejected / n;
    s->values[3] = (sum.chosen - sum.rejected) / n;
    s->metric = s->values[0];
    s->metric_name = "reward_accuracy";
    return 0;
}

static int dpo_metrics(void *impl, const char **names)
{
    (void)impl;
    names[0] = "reward_accuracy";
    names[1] = "chosen_reward";
    names[2] = "rejected_reward";
    names[3] = "reward_margin";
    return 4;
}

static int dpo_has_val(void *impl)
{
    return ((dpo_task *)impl)->val.n > 0;
}

static void dpo_describe(void *impl, char *buf, size_t size)
{
    dpo_task *D = impl;
    int len = snprintf(buf, size, "%zu training pairs, %zu validation pairs (DPO, beta %g)",
                       D->train.n, D->val.n, D->beta);
    if (D->cut && len > 0 && (size_t)len < size)
        snprintf(buf + len, size - (size_t)len, "; %zu answer%s cut to %d tokens "
                 "(data.truncate head)", D->cut, D->cut == 1 ? "" : "s", D->T + 1);
}

static void dpo_free(void *impl)
{
    dpo_task *D = impl;
    set_free(&D->train);
    set_free(&D->val);
    free(D->x);
    free(D->y);
    free(D->draw);
    free(D->w);
    free(D);
}

static const tfm_task_ops dpo_ops = {
    .name = "dpo",
    .describe = dpo_describe,
    .has_val = dpo_has_val,
    .next = dpo_next,
    .evaluate = dpo_evaluate,
    .free = dpo_free,
    .metrics = dpo_metrics,
    .step = dpo_step,
};

/* ids[0..L) into row, cut to T + 1 ids or refused; the answer must keep
 * a token. */
static int fill_row(dpo_task *D, dpo_row *row, const tfm_ids *ids, size_t start, uint32_t V,
                    int truncate_error, const char *name, long line, const char *what,
                    tfm_err *err)
{
    size_t L = ids->len, limit = (size_t)D->T + 1;
    if (L > limit && truncate_error)
        return tfm_err_at(err, name, line, 0, "the prompt and %s answer are %zu tokens, more "
                          "than model.block_size + 1 = %zu (data.truncate head keeps the "
                          "first %zu)", what, L, limit, limit);
    if (L > limit) {
        L = limit;
        D->cut++;
    }
    if (start < 1)
        start = 1; /* the first token is predicted by nothing */
    if (start >= L)
        return tfm_err_at(err, name, line, 0, "the %s answer has no token left in the first "
                          "model.block_size + 1 = %zu", what, limit);
    row->ids = tfm_malloc(L * sizeof *row->ids);
    for (size_t k = 0; k < L; k++) {
        if (ids->data[k] >= V)
            return tfm_err_at(err, name, line, 0, "token id %u is outside model.vocab_size %u",
                              ids->data[k], V);
        row->ids[k] = ids->data[k];
    }
    row->len = (int)L;
    row->start = (int)start;
    return 0;
}

static int encode_set(dpo_task *D, dpo_set *set, const tfm_chat_data *d, size_t from, size_t n,
                      const tfm_tokenizer *tok, uint32_t V, int truncate_error, tfm_err *err)
{
    tfm_tok_scratch *sc = tfm_tok_scratch_new(tok);
    tfm_ids c = {0}, r = {0};
    set->c = tfm_calloc(n ? n : 1, sizeof *set->c);
    set->r = tfm_calloc(n ? n : 1, sizeof *set->r);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const tfm_chat_example *e = &d->ex[from + i];
        size_t start = tfm_pref_encode(e, tok, sc, &c, &r);
        set->n++;
        rc = fill_row(D, &set->c[i], &c, start, V, truncate_error, d->name, e->line, "chosen",
                      err);
        if (rc == 0)
            rc = fill_row(D, &set->r[i], &r, start, V, truncate_error, d->name, e->line,
                          "rejected", err);
    }
    tfm_ids_free(&c);
    tfm_ids_free(&r);
    tfm_tok_scratch_free(sc);
    return rc;
}

int tfm_task_same_architecture(const tfm_model_config *p, const tfm_model_config *r,
                               const char *key, const char *path, tfm_err *err)
{
    const struct {
        const char *key;
        long a, b;
    } k[] = {
        {"model.kind", p->kind, r->kind},
        {"model.n_layer", p->n_layer, r->n_layer},
        {"model.n_head", p->n_head, r->n_head},
        {"model.n_embd", p->n_embd, r->n_embd},
        {"model.head_dim", tfm_model_config_head_dim(p), tfm_model_config_head_dim(r)},
        {"model.d_ff", tfm_model_config_ff(p), tfm_model_config_ff(r)},
        {"model.vocab_size", p->vocab_size, r->vocab_size},
        {"model.block_size", p->block_size, r->block_size},
        {"model.pos", p->pos, r->pos},
        {"model.ln", p->ln, r->ln},
        {"model.norm", p->norm, r->norm},
        {"model.ffn", p->ffn, r->ffn},
        {"model.activation", p->act, r->act},
        {"model.tie_embeddings", p->tie_embeddings, r->tie_embeddings},
        {"model.bias", p->bias, r->bias},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].a != k[i].b)
            return tfm_err_set(err, "%s %s: its %s is %ld, the policy's %ld "
                               "(expected a reference of the policy's architecture)", key, path,
                               k[i].key, k[i].b, k[i].a);
    return 0;
}

/* The reference's log-probabilities of every answer of set. */
static int ref_logps(dpo_task *D, tfm_model *ref, dpo_set *set, tfm_err *err)
{
    for (size_t first = 0; first < set->n; first += (size_t)D->B) {
        size_t n = set->n - first < (size_t)D->B ? set->n - first : (size_t)D->B;
        for (size_t i = 0; i < n; i++)
            D->draw[i] = first + i;
        tfm_batch b;
        build(D, set, D->draw, (int)n, &b);
        if (tfm_model_forward_batch(ref, &b, NULL, err) < 0)
            return -1;
        const float *ls = tfm_model_lm_losses(ref);
        for (size_t i = 0; i < 2 * n; i++) {
            double lp = 0;
            for (int t = 0; t < b.T; t++)
                lp -= ls[i * (size_t)b.T + t];
            (i < n ? set->c : set->r)[first + i % n].ref = lp;
        }
    }
    return 0;
}

static int reference(dpo_task *D, tfm_config *cfg, tfm_err *err)
{
    const char *path = cfg->train.reference[0] ? cfg->train.reference : cfg->train.init;
    tfm_model_config pc;
    if (tfm_model_config_from(cfg, &pc, err) < 0)
        return -1;
    tfm_config rcfg;
    tfm_model ref;
    if (tfm_model_load(path, &rcfg, &ref, NULL, err) < 0) {
        tfm_err_prefix(err, "%s", cfg->train.reference[0] ? "train.reference" : "train.init");
        return -1;
    }
    int rc = tfm_task_same_architecture(&pc, &ref.cfg, "train.reference", path, err);
    if (rc == 0) {
        tfm_model_set_training(&ref, 0);
        tfm_model_set_inference(&ref);
        rc = ref_logps(D, &ref, &D->train, err);
        if (rc == 0)
            rc = ref_logps(D, &ref, &D->val, err);
    }
    tfm_model_free(&ref);
    return rc;
}

static int load(dpo_task *D, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    if (sp->eos < 0)
        return tfm_err_set(err, "train.task dpo: the tokenizer has no end-of-text token, "
                           "which ends each answer");
    D->pad = sp->pad >= 0 ? (int32_t)sp->pad : (int32_t)sp->eos;
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
    if (encode_set(D, &D->train, &tr, 0, ntr, tok, V, terr, err) < 0 ||
        encode_set(D, &D->val, cfg->data.val[0] ? &va : &tr, cfg->data.val[0] ? 0 : ntr, nva,
                   tok, V, terr, err) < 0)
        goto out;
    rc = 0;
out:
    tfm_chat_data_free(&tr);
    tfm_chat_data_free(&va);
    return rc;
}

int tfm_task_dpo_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    if (!tok)
        return tfm_err_set(err, "train.task dpo needs a tokenizer (data.tokenizer or "
                           "train.init's)");
    dpo_task *D = tfm_calloc(1, sizeof *D);
    D->T = (int)cfg->model.block_size;
    D->B = (int)cfg->train.batch_size;
    D->beta = cfg->train.beta;
    size_t bt = 2 * (size_t)D->B * (size_t)D->T;
    D->x = tfm_malloc(bt * sizeof *D->x);
    D->y = tfm_malloc(bt * sizeof *D->y);
    D->draw = tfm_malloc((size_t)D->B * sizeof *D->draw);
    D->w = tfm_malloc(2 * (size_t)D->B * sizeof *D->w);
    if (load(D, cfg, tok, err) < 0 || reference(D, cfg, err) < 0) {
        dpo_free(D);
        return -1;
    }
    t->ops = &dpo_ops;
    t->impl = D;
    return 0;
}
