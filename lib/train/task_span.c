/* Extractive question answering (train.task span): the start and end of
 * the answer in [CLS] question [SEP] context-window [SEP] rows, windows
 * data.doc_stride tokens apart, a window without the answer pointing at
 * [CLS], as BERT's SQuAD fine-tuning.  The examples, batches and
 * validation are task_finetune.c's; here the model is checked and given
 * its span head. */
#include "config.h"

#include "train/task_internal.h"

static int prepare(tfm_config *cfg, const tfm_ft_labels *l, tfm_err *err)
{
    (void)l;
    if ((cfg->model.classes && !cfg->model.nsp) || cfg->model.tags)
        return tfm_err_set(err, "train.task span with model.classes or model.tags: those heads "
                           "would get no targets");
    cfg->model.span = 1;
    return 0;
}

int tfm_task_span_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_err *err)
{
    return tfm_task_ft_open(t, cfg, tok, TFM_FT_SPAN, prepare, err);
}
