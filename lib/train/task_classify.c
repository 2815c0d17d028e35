/* Sequence classification and regression (train.task classify): a label or
 * a number per text or pair of texts, read by the classifier on the pooled
 * position (an encoder's [CLS]; a decoder's last token, with GPT's
 * auxiliary LM loss weighted by train.lm_weight).  The examples, batches and
 * validation are task_finetune.c's; here the model is checked and its
 * classifier sized from the labels. */
#include "config.h"

#include "train/task_internal.h"

static int prepare(tfm_config *cfg, const tfm_ft_labels *l, tfm_err *err)
{
    if (cfg->model.nsp)
        return tfm_err_set(err, "train.task classify with model.nsp true: that classifier is "
                           "BERT's next-sentence head (set model.nsp false: a classifier of "
                           "its own, classifier.weight)");
    if (cfg->model.tags || cfg->model.span)
        return tfm_err_set(err, "train.task classify with model.tags or model.span: those heads "
                           "would get no targets");
    if (l->regression) {
        cfg->model.classes = 1;
        return 0;
    }
    if (l->n < 2)
        return tfm_err_set(err, "%s: one label only ('%s'): nothing to tell apart",
                           cfg->data.text, l->n ? l->name[0] : "");
    if (cfg->model.classes == 0)
        cfg->model.classes = (int64_t)l->n;
    else if ((size_t)cfg->model.classes < l->n)
        return tfm_err_set(err, "model.classes %lld, but the data has %zu labels",
                           (long long)cfg->model.classes, l->n);
    return 0;
}

int tfm_task_classify_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    return tfm_task_ft_open(t, cfg, tok, TFM_FT_CLASSIFY, prepare, err);
}
