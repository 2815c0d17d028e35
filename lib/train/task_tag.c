/* Token tagging (train.task tag): a tag per word, learned on the first
 * sub-token of each word (the others ignored), as BERT's NER.  The
 * examples, batches and validation are task_finetune.c's; here the model is
 * checked and its tagger sized from the tag set. */
#include "config.h"

#include "train/task_internal.h"

static int prepare(tfm_config *cfg, const tfm_ft_labels *l, tfm_err *err)
{
    if ((cfg->model.classes && !cfg->model.nsp) || cfg->model.span)
        return tfm_err_set(err, "train.task tag with model.classes or model.span: those heads "
                           "would get no targets");
    if (cfg->model.tags == 0)
        cfg->model.tags = (int64_t)l->n;
    else if ((size_t)cfg->model.tags < l->n)
        return tfm_err_set(err, "model.tags %lld, but the data has %zu tags",
                           (long long)cfg->model.tags, l->n);
    return 0;
}

int tfm_task_tag_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    return tfm_task_ft_open(t, cfg, tok, TFM_FT_TAG, prepare, err);
}
