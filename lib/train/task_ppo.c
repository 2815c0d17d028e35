/* Proximal policy optimisation against a reward model (train.task ppo),
 * InstructGPT's third stage (Ouyang et al. 2022; PPO: Schulman et al.
 * 2017), with the formulas of TRL's PPOTrainer (trl/experimental/ppo):
 *
 * A rollout: train.batch_size prompts of data.text ({"prompt"} JSON Lines,
 * data/chat.h tfm_chat_prompt_encode), drawn from the run's rng; the
 * policy (the model being trained, train.init's weights at the start)
 * samples an answer to each (tfm_sample_fn: train.temperature,
 * train.top_k, at most train.max_new_tokens, ending with end-of-text when
 * it stopped there).  For each answer token t (its row's position, the
 * state before the token):
 *     logp_t   the policy's log-probability at the rollout
 *     ref_t    the reference's (train.reference, else train.init: frozen,
 *              of the policy's architecture)
 *     v_t      the value head's output (model.tags 1: a scalar on the
 *              policy's last hidden state at that position)
 *     r_t      -kl_coef·(logp_t - ref_t), plus, on the answer's last
 *              token, the score of train.reward_model (frozen) on the
 *              whole prompt + answer
 *     GAE      δ_t = r_t + γ·v_{t+1} - v_t (v after the last token 0),
 *              A_t = δ_t + γλ·A_{t+1}; returns R_t = A_t + v_t; A whitened
 *              over every answer token of the rollout (mean 0, unbiased
 *              variance 1, + 1e-8)
 * Then train.ppo_epochs passes over the rollout, each in train.minibatches
 * steps of batch_size / minibatches answers (a permutation per pass from
 * the run's rng); a step's loss, means over its answer tokens:
 *     ratio = exp(logp'_t - logp_t)
 *     pg    = mean max(-A·ratio, -A·clip(ratio, 1 - cliprange, 1 + cliprange))
 *     v'c   = clip(v'_t, v_t - cliprange_value, v_t + cliprange_value)
 *     vf    = 0.5 · mean max((v'_t - R_t)², (v'c - R_t)²)
 *     loss  = pg + vf_coef·vf
 * its gradient handed to the model per position (model/transformer.h
 * tfm_model_backward_positions): the LM head's losses and the value head.
 *
 * Where TRL differs (docs: tfm-config(5)): TRL's value model is a copy of
 * the reward model; here the value head is on the policy (TRL's older
 * AutoModelForCausalLMWithValueHead), initialised as a tagger.  TRL adds
 * the score one position after the answer's last token (where the KL term
 * is 0, still inside the value's mask); here it is on the last token and
 * the episode ends there (v 0 after it).  TRL divides the logits by its
 * temperature for the log-probabilities; here they are the model's own
 * (the same at temperature 1, the default).  The answer keeps its
 * end-of-text token (TRL with a pad token distinct from it).
 *
 * Logs: every sample of each rollout in samples.tsv (the run directory):
 * update, sample, prompt line, score, KL (Σ_t logp_t - ref_t), tokens, ids.
 * Each evaluation (train.eval_interval steps; a rollout is ppo_epochs ×
 * minibatches steps) reports the last rollout's mean score and KL and the
 * mean pg and vf losses of the steps since the last evaluation: log.tsv's
 * val_reward, val_kl, val_pg_loss, val_vf_loss; val_loss their loss.
 * A resumed run starts a new rollout (the rollout is not checkpointed). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/chat.h"
#include "data/reward.h"
#include "model/file.h"
#include "train/task_internal.h"

typedef struct ppo_task {
    /* the prompts */
    tfm_ids *prompts;
    long *line;
    size_t n_prompts;
    char name[TFM_CONFIG_PATH_MAX + 8];
    /* settings */
    int limit;               /* ids of a prompt and answer at most */
    int B, Bm, T, epochs, n_mini, max_new, top_k;
    double kl_coef, gamma, lam, clip, clip_v, vf_coef, temperature;
    uint32_t eos;
    int32_t pad;
    tfm_model ref, rm;
    int have_ref, have_rm;
    tfm_sample_fn sample;
    char *samples_path;
    /* the rollout */
    int k;                   /* steps done of the current rollout */
    int64_t updates;
    size_t *draw;            /* [B] its prompts */
    size_t *perm;            /* [epochs·B] its passes' orders */
    uint64_t seed;
    tfm_ids *ans;            /* [B] */
    int Tr;                  /* its rows' width */
    int32_t *x, *y, *tags;   /* [B·Tr] */
    float *oldlp, *val, *adv, *ret; /* [B·Tr] at the answer positions */
    float *score, *kl;       /* [B] */
    /* a step */
    int32_t *mx, *my, *mtags;
    float *wl, *wt;
    int32_t dummy[2];
    /* the numbers each evaluation reports */
    double last_score, last_kl, pg_sum, vf_sum, loss_sum;
    long n_steps;
} ppo_task;

static void ppo_free(void *impl)
{
    ppo_task *D = impl;
    for (size_t i = 0; i < D->n_prompts; i++)
        tfm_ids_free(&D->prompts[i]);
    free(D->prompts);
    free(D->line);
    if (D->have_ref)
        tfm_model_free(&D->ref);
    if (D->have_rm)
        tfm_model_free(&D->rm);
    free(D->samples_path);
    for (int i = 0; D->ans && i < D->B; i++)
        tfm_ids_free(&D->ans[i]);
    free(D->ans);
    free(D->draw);
    free(D->perm);
    free(D->x);
    free(D->y);
    free(D->tags);
    free(D->oldlp);
    free(D->val);
    free(D->adv);
    free(D->ret);
    free(D->score);
    free(D->kl);
    free(D->mx);
    free(D->my);
    free(D->mtags);
    free(D->wl);
    free(D->wt);
    free(D);
}

/* The rollout's prompts and orders from the run's rng; the batch the loop
 * passes back is a placeholder (the step builds its own). */
static int ppo_next(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    (void)err;
    ppo_task *D = impl;
    if (D->k == 0) {
        for (int i = 0; i < D->B; i++)
            D->draw[i] = (size_t)tfm_rng_below(rng, D->n_prompts);
        D->seed = tfm_rng_u64(rng);
        for (int e = 0; e < D->epochs; e++) {
            size_t *p = D->perm + (size_t)e * D->B;
            for (int i = 0; i < D->B; i++)
                p[i] = (size_t)i;
            for (int i = D->B - 1; i > 0; i--) {
                size_t j = (size_t)tfm_rng_below(rng, (uint64_t)i + 1), t = p[i];
                p[i] = p[j];
                p[j] = t;
            }
        }
    }
    D->dummy[0] = D->pad;
    D->dummy[1] = -1;
    *b = (tfm_batch){.inputs = D->dummy, .targets = D->dummy + 1, .B = 1, .T = 1};
    *n_tokens = 0;
    return 0;
}

static int row_len(const ppo_task *D, int i)
{
    return (int)(D->prompts[D->draw[i]].len + D->ans[i].len) - 1;
}

/* The rollout's rows: x = prompt + answer without its last id, y the answer
 * on its positions (-1 elsewhere), tags -1 (the value head's forward). */
static void build_rows(ppo_task *D)
{
    int Tr = 1;
    for (int i = 0; i < D->B; i++)
        Tr = row_len(D, i) > Tr ? row_len(D, i) : Tr;
    D->Tr = Tr;
    for (int i = 0; i < D->B; i++) {
        const tfm_ids *p = &D->prompts[D->draw[i]], *a = &D->ans[i];
        int P = (int)p->len, L = row_len(D, i);
        int32_t *x = D->x + (size_t)i * Tr, *y = D->y + (size_t)i * Tr;
        for (int t = 0; t < Tr; t++) {
            uint32_t cur = t < P ? p->data[t] : t < L ? a->data[t - P] : 0;
            x[t] = t < L ? (int32_t)cur : D->pad;
            y[t] = t >= P - 1 && t < L ? (int32_t)a->data[t + 1 - P] : -1;
            D->tags[(size_t)i * Tr + t] = -1;
        }
    }
}

static double log_score_kl(ppo_task *D)
{
    double s = 0;
    for (int i = 0; i < D->B; i++)
        s += D->kl[i];
    return s / D->B;
}

/* The answer's per-token numbers a[o..o+n), one column. */
static void put_floats(FILE *fp, const float *a, size_t n)
{
    fputc('\t', fp);
    for (size_t k = 0; k < n; k++)
        fprintf(fp, k ? " %.9g" : "%.9g", a[k]);
}

/* Each sample of the rollout, a line of samples.tsv. */
static void write_samples(ppo_task *D, const float *ref)
{
    if (!D->samples_path)
        return;
    FILE *fp = fopen(D->samples_path, "a");
    if (!fp)
        return;
    if (ftell(fp) == 0)
        fputs("update\tsample\tprompt_line\treward\tkl\ttokens\tanswer_ids\tlogprobs\t"
              "ref_logprobs\tvalues\tadvantages\treturns\n", fp);
    for (int i = 0; i < D->B; i++) {
        fprintf(fp, "%lld\t%d\t%ld\t%.6g\t%.6g\t%zu\t", (long long)D->updates + 1, i,
                D->line[D->draw[i]], D->score[i], D->kl[i], D->ans[i].len);
        for (size_t k = 0; k < D->ans[i].len; k++)
            fprintf(fp, k ? " %u" : "%u", D->ans[i].data[k]);
        size_t o = (size_t)i * D->Tr + D->prompts[D->draw[i]].len - 1, n = D->ans[i].len;
        put_floats(fp, D->oldlp + o, n);
        put_floats(fp, ref + o, n);
        put_floats(fp, D->val + o, n);
        put_floats(fp, D->adv + o, n);
        put_floats(fp, D->ret + o, n);
        fputc('\n', fp);
    }
    fclose(fp);
}

static int rollout(ppo_task *D, tfm_model *m, tfm_err *err)
{
    if (!D->sample)
        return tfm_err_set(err, "train.task ppo: no sampler (tfm_task_set_rollout)");
    tfm_ids *pr = tfm_malloc((size_t)D->B * sizeof *pr);
    for (int i = 0; i < D->B; i++)
        pr[i] = D->prompts[D->draw[i]];
    tfm_weights w;
    int rc = tfm_weights_from_model(&w, m, err);
    if (rc == 0) {
        rc = D->sample(&m->cfg, &w, D->eos, pr, (size_t)D->B, D->max_new, D->temperature,
                       D->top_k, D->seed, D->ans, err);
        tfm_weights_free(&w);
    }
    free(pr);
    if (rc < 0)
        return -1;
    for (int i = 0; i < D->B; i++) {
        /* the reward model's context may be shorter: a sample cut is one
         * that stopped at its length */
        size_t room = (size_t)D->limit - D->prompts[D->draw[i]].len;
        if (D->ans[i].len > room)
            D->ans[i].len = room;
        if (D->ans[i].len == 0) /* the context was full: the prompt's check keeps one */
            tfm_ids_push(&D->ans[i], D->eos);
    }
    build_rows(D);
    const int B = D->B, Tr = D->Tr;
    const size_t N = (size_t)B * Tr;
    tfm_batch b = {.inputs = D->x, .targets = D->y, .B = B, .T = Tr, .tags = D->tags};
    /* the policy's log-probabilities and values, without dropout */
    int was = m->training;
    tfm_model_set_training(m, 0);
    rc = tfm_model_forward_batch(m, &b, NULL, err);
    tfm_model_set_training(m, was);
    if (rc < 0)
        return -1;
    int rows, cols;
    const float *ls = tfm_model_lm_losses(m);
    const float *v = tfm_model_head_out(m, TFM_HEAD_TAG, &rows, &cols);
    for (size_t q = 0; q < N; q++) {
        D->oldlp[q] = D->y[q] >= 0 ? -ls[q] : 0.0f;
        D->val[q] = D->y[q] >= 0 ? v[q] : 0.0f;
    }
    /* the reference's */
    b.tags = NULL;
    if (tfm_model_forward_batch(&D->ref, &b, NULL, err) < 0)
        return -1;
    const float *rl = tfm_model_lm_losses(&D->ref);
    /* the reward model's scores of prompt + answer */
    const uint32_t **ids = tfm_malloc((size_t)B * sizeof *ids);
    uint32_t **own = tfm_malloc((size_t)B * sizeof *own);
    int *len = tfm_malloc((size_t)B * sizeof *len);
    for (int i = 0; i < B; i++) {
        const tfm_ids *p = &D->prompts[D->draw[i]], *a = &D->ans[i];
        own[i] = tfm_malloc((p->len + a->len) * sizeof **own);
        memcpy(own[i], p->data, p->len * sizeof **own);
        memcpy(own[i] + p->len, a->data, a->len * sizeof **own);
        ids[i] = own[i];
        len[i] = (int)(p->len + a->len);
    }
    rc = tfm_reward_score(&D->rm, ids, len, (size_t)B, B, D->pad, D->score, err);
    for (int i = 0; i < B; i++)
        free(own[i]);
    free(own);
    free(ids);
    free(len);
    if (rc < 0)
        return -1;
    /* rewards, GAE, returns */
    double sum = 0, sum2 = 0, score = 0;
    long cnt = 0;
    for (int i = 0; i < B; i++) {
        int P = (int)D->prompts[D->draw[i]].len, n = (int)D->ans[i].len;
        size_t o = (size_t)i * Tr + (size_t)(P - 1);
        double kl = 0, last = 0;
        for (int t = n - 1; t >= 0; t--) {
            double k = (double)D->oldlp[o + t] + (double)rl[o + t];
            kl += k;
            double r = -D->kl_coef * k + (t == n - 1 ? (double)D->score[i] : 0.0);
            double next = t < n - 1 ? (double)D->val[o + t + 1] : 0.0;
            double delta = r + D->gamma * next - (double)D->val[o + t];
            last = delta + D->gamma * D->lam * last;
            D->adv[o + t] = (float)last;
            D->ret[o + t] = (float)(last + (double)D->val[o + t]);
        }
        D->kl[i] = (float)kl;
        score += D->score[i];
        for (int t = 0; t < n; t++) {
            sum += D->adv[o + t];
            cnt++;
        }
    }
    double mean = sum / (double)cnt;
    for (size_t q = 0; q < N; q++)
        if (D->y[q] >= 0)
            sum2 += ((double)D->adv[q] - mean) * ((double)D->adv[q] - mean);
    /* TRL's masked_whiten: unbiased variance (one token: none) */
    double var = cnt > 1 ? sum2 / (double)cnt * (double)cnt / (double)(cnt - 1) : sum2;
    double inv = 1.0 / sqrt(var + 1e-8);
    for (size_t q = 0; q < N; q++)
        D->adv[q] = D->y[q] >= 0 ? (float)(((double)D->adv[q] - mean) * inv) : 0.0f;
    D->last_score = score / B;
    D->last_kl = log_score_kl(D);
    /* the reference's log-probabilities, for the log (wl is a step's
     * scratch) */
    for (size_t q = 0; q < N; q++)
        D->wl[q] = -rl[q];
    write_samples(D, D->wl);
    return 0;
}

static int ppo_step(void *impl, tfm_model *m, const tfm_batch *unused, float scale, float *loss,
                    tfm_err *err)
{
    (void)unused;
    ppo_task *D = impl;
    if (D->k == 0 && rollout(D, m, err) < 0)
        return -1;
    const int Tr = D->Tr, Bm = D->Bm;
    const size_t *idx = D->perm + (size_t)(D->k / D->n_mini) * D->B +
                        (size_t)(D->k % D->n_mini) * Bm;
    for (int j = 0; j < Bm; j++) {
        size_t src = idx[j] * (size_t)Tr, dst = (size_t)j * Tr;
        memcpy(D->mx + dst, D->x + src, (size_t)Tr * sizeof *D->mx);
        memcpy(D->my + dst, D->y + src, (size_t)Tr * sizeof *D->my);
        memcpy(D->mtags + dst, D->tags + src, (size_t)Tr * sizeof *D->mtags);
    }
    tfm_batch b = {.inputs = D->mx, .targets = D->my, .B = Bm, .T = Tr, .tags = D->mtags};
    if (tfm_model_forward_batch(m, &b, NULL, err) < 0)
        return -1;
    int rows, cols;
    const float *ls = tfm_model_lm_losses(m);
    const float *v = tfm_model_head_out(m, TFM_HEAD_TAG, &rows, &cols);
    long n = 0;
    for (size_t q = 0; q < (size_t)Bm * Tr; q++)
        n += D->my[q] >= 0;
    double pg = 0, vf = 0;
    for (int j = 0; j < Bm; j++)
        for (int t = 0; t < Tr; t++) {
            size_t q = (size_t)j * Tr + t, s = idx[j] * (size_t)Tr + t;
            D->wl[q] = D->wt[q] = 0.0f;
            if (D->my[q] < 0)
                continue;
            double A = D->adv[s], ratio = exp(-(double)ls[q] - (double)D->oldlp[s]);
            double rc = ratio < 1 - D->clip ? 1 - D->clip : ratio > 1 + D->clip ? 1 + D->clip
                                                                                : ratio;
            double p1 = -A * ratio, p2 = -A * rc;
            /* d/d logp' of the larger (the clipped one's is 0 outside the range) */
            double dp = p1 >= p2 || rc == ratio ? -A * ratio : 0.0;
            pg += p1 > p2 ? p1 : p2;
            double vp = v[q], vo = D->val[s], R = D->ret[s];
            double vc = vp < vo - D->clip_v ? vo - D->clip_v
                        : vp > vo + D->clip_v ? vo + D->clip_v : vp;
            double v1 = (vp - R) * (vp - R), v2 = (vc - R) * (vc - R);
            double dv = v1 >= v2 || vc == vp ? 2 * (vp - R) : 0.0;
            vf += v1 > v2 ? v1 : v2;
            /* the model's quantity is the position's LM loss, -logp' */
            D->wl[q] = (float)(-scale * dp / (double)n);
            D->wt[q] = (float)(scale * D->vf_coef * 0.5 * dv / (double)n);
        }
    pg /= (double)n;
    vf = 0.5 * vf / (double)n;
    tfm_model_backward_positions(m, D->wl, D->wt);
    *loss = (float)(pg + D->vf_coef * vf);
    D->pg_sum += pg;
    D->vf_sum += vf;
    D->loss_sum += *loss;
    D->n_steps++;
    if (++D->k == D->epochs * D->n_mini) {
        D->k = 0;
        D->updates++;
    }
    return 0;
}

static int ppo_evaluate(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s,
                        tfm_err *err)
{
    (void)m;
    (void)seed;
    (void)err;
    ppo_task *D = impl;
    double n = D->n_steps ? (double)D->n_steps : NAN;
    s->loss = D->loss_sum / n;
    s->values[0] = D->last_score;
    s->values[1] = D->last_kl;
    s->values[2] = D->pg_sum / n;
    s->values[3] = D->vf_sum / n;
    s->metric = s->values[0];
    s->metric_name = "reward";
    D->pg_sum = D->vf_sum = D->loss_sum = 0;
    D->n_steps = 0;
    return 0;
}

static int ppo_metrics(void *impl, const char **names)
{
    (void)impl;
    names[0] = "reward";
    names[1] = "kl";
    names[2] = "pg_loss";
    names[3] = "vf_loss";
    return 4;
}

static int ppo_has_val(void *impl)
{
    (void)impl;
    return 1;
}

static void ppo_describe(void *impl, char *buf, size_t size)
{
    ppo_task *D = impl;
    snprintf(buf, size, "%zu prompts (PPO: %d answers a rollout, %d passes of %d steps, "
             "kl_coef %g)", D->n_prompts, D->B, D->epochs, D->n_mini, D->kl_coef);
}

static void ppo_set_rollout(void *impl, tfm_sample_fn sample, const char *samples_path)
{
    ppo_task *D = impl;
    D->sample = sample;
    free(D->samples_path);
    D->samples_path = samples_path ? tfm_strndup(samples_path, strlen(samples_path)) : NULL;
}

static const tfm_task_ops ppo_ops = {
    .name = "ppo",
    .describe = ppo_describe,
    .has_val = ppo_has_val,
    .next = ppo_next,
    .evaluate = ppo_evaluate,
    .free = ppo_free,
    .metrics = ppo_metrics,
    .step = ppo_step,
    .set_rollout = ppo_set_rollout,
};

static int load_prompts(ppo_task *D, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    tfm_chat_data d = {0};
    if (tfm_chat_read_file(&d, cfg->data.text, TFM_CHAT_READ_PROMPTS, err) < 0)
        return -1;
    snprintf(D->name, sizeof D->name, "%s", d.name);
    D->prompts = tfm_calloc(d.n, sizeof *D->prompts);
    D->line = tfm_calloc(d.n, sizeof *D->line);
    tfm_tok_scratch *sc = tfm_tok_scratch_new(tok);
    int rc = 0;
    uint32_t V = (uint32_t)cfg->model.vocab_size;
    for (size_t i = 0; i < d.n && rc == 0; i++) {
        tfm_chat_prompt_encode(&d.ex[i], tok, sc, &D->prompts[i]);
        D->line[i] = d.ex[i].line;
        D->n_prompts++;
        const tfm_ids *p = &D->prompts[i];
        if (p->len == 0)
            rc = tfm_err_at(err, d.name, d.ex[i].line, 0, "the prompt has no tokens");
        for (size_t k = 0; rc == 0 && k < p->len; k++)
            if (p->data[k] >= V)
                rc = tfm_err_at(err, d.name, d.ex[i].line, 0, "token id %u is outside "
                                "model.vocab_size %u", p->data[k], V);
    }
    tfm_tok_scratch_free(sc);
    tfm_chat_data_free(&d);
    return rc;
}

/* A frozen model file (the reference, the reward model), for forwards. */
static int load_frozen(tfm_model *m, const char *key, const char *path, tfm_err *err)
{
    tfm_config c;
    if (tfm_model_load(path, &c, m, NULL, err) < 0) {
        tfm_err_prefix(err, "%s", key);
        return -1;
    }
    tfm_model_set_training(m, 0);
    tfm_model_set_inference(m);
    return 0;
}

static int open_models(ppo_task *D, tfm_config *cfg, tfm_err *err)
{
    tfm_model_config pc;
    if (tfm_model_config_from(cfg, &pc, err) < 0)
        return -1;
    const char *rkey = cfg->train.reference[0] ? "train.reference" : "train.init";
    const char *rpath = cfg->train.reference[0] ? cfg->train.reference : cfg->train.init;
    if (load_frozen(&D->ref, rkey, rpath, err) < 0)
        return -1;
    D->have_ref = 1;
    if (tfm_task_same_architecture(&pc, &D->ref.cfg, rkey, rpath, err) < 0)
        return -1;
    const char *mp = cfg->train.reward_model;
    if (load_frozen(&D->rm, "train.reward_model", mp, err) < 0)
        return -1;
    D->have_rm = 1;
    if (tfm_reward_model_check(&D->rm.cfg, mp, err) < 0) {
        tfm_err_prefix(err, "train.reward_model");
        return -1;
    }
    if (D->rm.cfg.vocab_size != pc.vocab_size)
        return tfm_err_set(err, "train.reward_model %s: its model.vocab_size is %d, the "
                           "policy's %d (the reward model reads the policy's ids)", mp,
                           D->rm.cfg.vocab_size, pc.vocab_size);
    /* a prompt and answer is at most block_size + 1 ids of the policy's,
     * and the reward model reads them all */
    D->limit = D->rm.cfg.block_size < D->T + 1 ? D->rm.cfg.block_size : D->T + 1;
    for (size_t i = 0; i < D->n_prompts; i++)
        if (D->prompts[i].len + 1 > (size_t)D->limit)
            return tfm_err_at(err, D->name, D->line[i], 0, "the prompt is %zu tokens: an "
                              "answer needs one more, and %s reads at most %d (the policy's "
                              "model.block_size + 1, the reward model's model.block_size)",
                              D->prompts[i].len, "the reward model and the policy", D->limit);
    return 0;
}

int tfm_task_ppo_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    if (!tok)
        return tfm_err_set(err, "train.task ppo needs a tokenizer (data.tokenizer or "
                           "train.init's)");
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    if (sp->eos < 0)
        return tfm_err_set(err, "train.task ppo: the tokenizer has no end-of-text token, "
                           "which ends each answer");
    if (cfg->model.tags == 0)
        cfg->model.tags = 1; /* the value head */
    else if (cfg->model.tags != 1)
        return tfm_err_set(err, "model.tags %lld with train.task ppo: the value head has one "
                           "output", (long long)cfg->model.tags);
    if (cfg->model.classes || cfg->model.span || cfg->model.nsp)
        return tfm_err_set(err, "train.task ppo with model.classes, model.span or model.nsp: "
                           "those heads would get no targets");
    if (tfm_task_vocab_from_tokenizer(cfg, tok, err) < 0)
        return -1;
    ppo_task *D = tfm_calloc(1, sizeof *D);
    D->T = (int)cfg->model.block_size;
    D->B = (int)cfg->train.batch_size;
    D->n_mini = (int)cfg->train.minibatches;
    D->Bm = D->B / D->n_mini;
    D->epochs = (int)cfg->train.ppo_epochs;
    D->max_new = (int)cfg->train.max_new_tokens;
    D->top_k = (int)cfg->train.top_k;
    D->kl_coef = cfg->train.kl_coef;
    D->gamma = cfg->train.gamma;
    D->lam = cfg->train.lam;
    D->clip = cfg->train.cliprange;
    D->clip_v = cfg->train.cliprange_value;
    D->vf_coef = cfg->train.vf_coef;
    D->temperature = cfg->train.temperature;
    D->eos = (uint32_t)sp->eos;
    D->pad = sp->pad >= 0 ? (int32_t)sp->pad : (int32_t)sp->eos;
    size_t bt = (size_t)D->B * (size_t)D->T;
    D->ans = tfm_calloc((size_t)D->B, sizeof *D->ans);
    D->draw = tfm_calloc((size_t)D->B, sizeof *D->draw);
    D->perm = tfm_calloc((size_t)D->epochs * D->B, sizeof *D->perm);
    D->x = tfm_malloc(bt * sizeof *D->x);
    D->y = tfm_malloc(bt * sizeof *D->y);
    D->tags = tfm_malloc(bt * sizeof *D->tags);
    D->oldlp = tfm_malloc(bt * sizeof *D->oldlp);
    D->val = tfm_malloc(bt * sizeof *D->val);
    D->adv = tfm_malloc(bt * sizeof *D->adv);
    D->ret = tfm_malloc(bt * sizeof *D->ret);
    D->score = tfm_malloc((size_t)D->B * sizeof *D->score);
    D->kl = tfm_malloc((size_t)D->B * sizeof *D->kl);
    D->mx = tfm_malloc(bt * sizeof *D->mx);
    D->my = tfm_malloc(bt * sizeof *D->my);
    D->mtags = tfm_malloc(bt * sizeof *D->mtags);
    D->wl = tfm_malloc(bt * sizeof *D->wl);
    D->wt = tfm_malloc(bt * sizeof *D->wt);
    D->last_score = D->last_kl = NAN;
    if (load_prompts(D, cfg, tok, err) < 0 || open_models(D, cfg, err) < 0) {
        ppo_free(D);
        return -1;
    }
    t->ops = &ppo_ops;
    t->impl = D;
    return 0;
}
