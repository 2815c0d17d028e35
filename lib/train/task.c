#include "train/task.h"

#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "train/task_internal.h"

int tfm_task_open(tfm_task **out, tfm_config *cfg, const tfm_tokenizer *tok,
                  const tfm_tokenizer *src_tok, tfm_err *err)
{
    *out = NULL;
    tfm_task *t = tfm_malloc(sizeof *t);
    t->ops = NULL;
    t->impl = NULL;
    int rc;
    if (cfg->train.task == TFM_CONFIG_TASK_SPAN_CORRUPTION)
        rc = tfm_task_spancorrupt_open(t, cfg, tok, err);
    else if (cfg->train.task == TFM_CONFIG_TASK_DENOISE)
        rc = tfm_task_denoise_open(t, cfg, tok, err);
    else if (cfg->train.task == TFM_CONFIG_TASK_PREFIX_LM)
        rc = tfm_task_prefixlm_open(t, cfg, tok, err);
    else if (cfg->train.task == TFM_CONFIG_TASK_SFT)
        rc = tfm_task_sft_open(t, cfg, tok, err);
    else if (cfg->train.task == TFM_CONFIG_TASK_DPO)
        rc = tfm_task_dpo_open(t, cfg, tok, err);
    else if (cfg->train.task == TFM_CONFIG_TASK_REWARD)
        rc = tfm_task_reward_open(t, cfg, tok, err);
    else if (cfg->train.task == TFM_CONFIG_TASK_PPO)
        rc = tfm_task_ppo_open(t, cfg, tok, err);
    else if (cfg->model.kind == TFM_KIND_ENCODER_DECODER)
        rc = tfm_task_seq2seq_open(t, cfg, tok, src_tok, err);
    else if (cfg->train.task == TFM_CONFIG_TASK_LM)
        rc = tfm_task_lm_open(t, cfg, tok, err);
    else if (cfg->train.task == TFM_CONFIG_TASK_CLASSIFY)
        rc = tfm_task_classify_open(t, cfg, tok, err);
    else if (cfg->train.task == TFM_CONFIG_TASK_TAG)
        rc = tfm_task_tag_open(t, cfg, tok, err);
    else if (cfg->train.task == TFM_CONFIG_TASK_SPAN)
        rc = tfm_task_span_open(t, cfg, tok, err);
    else
        rc = tfm_task_mlm_open(t, cfg, tok, err);
    if (rc < 0) {
        free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void tfm_task_free(tfm_task *t)
{
    if (!t)
        return;
    t->ops->free(t->impl);
    free(t);
}

const char *tfm_task_name(const tfm_task *t)
{
    return t->ops->name;
}

void tfm_task_describe(const tfm_task *t, char *buf, size_t size)
{
    t->ops->describe(t->impl, buf, size);
}

void tfm_task_set_translate(tfm_task *t, tfm_translate_fn translate)
{
    if (t->ops->set_translate)
        t->ops->set_translate(t->impl, translate);
}

const char *tfm_task_meta(const tfm_task *t)
{
    return t->ops->meta ? t->ops->meta(t->impl) : NULL;
}

int tfm_task_metrics(const tfm_task *t, const char **names)
{
    return t->ops->metrics ? t->ops->metrics(t->impl, names) : 0;
}

void tfm_task_set_rollout(tfm_task *t, tfm_sample_fn sample, const char *samples_path)
{
    if (t->ops->set_rollout)
        t->ops->set_rollout(t->impl, sample, samples_path);
}

int tfm_task_metric_higher_better(const char *name)
{
    size_t n = strlen(name);
    return !(n >= 4 && !strcmp(name + n - 4, "loss"));
}

int tfm_task_has_step(const tfm_task *t)
{
    return t->ops->step != NULL;
}

int tfm_task_step(tfm_task *t, tfm_model *m, const tfm_batch *b, float scale, float *loss,
                  tfm_err *err)
{
    return t->ops->step(t->impl, m, b, scale, loss, err);
}

int tfm_task_has_val(const tfm_task *t)
{
    return t->ops->has_val(t->impl);
}

int tfm_task_next(tfm_task *t, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    return t->ops->next(t->impl, rng, b, n_tokens, err);
}

int tfm_task_evaluate(tfm_task *t, tfm_model *m, uint64_t seed, tfm_task_score *s,
                      tfm_err *err)
{
    s->loss = NAN;
    s->metric = NAN;
    s->metric_name = NULL;
    for (int i = 0; i < TFM_TASK_METRICS_MAX; i++)
        s->values[i] = NAN;
    int was_training = m->training;
    tfm_model_set_training(m, 0);
    int rc = t->ops->evaluate(t->impl, m, seed, s, err);
    tfm_model_set_training(m, was_training);
    return rc;
}
