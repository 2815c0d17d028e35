/* BERT's converter (convert/bert.c), which RoBERTa and XLM-RoBERTa's
 * (convert/roberta.c) share: the same encoder under other names for its
 * heads, positions numbered from padding_idx + 1 and one token type. */
#ifndef TFM_CONVERT_BERT_H
#define TFM_CONVERT_BERT_H

#include <stdint.h>

#include "convert/convert.h"

typedef enum { TFM_BERT, TFM_BERT_ROBERTA } tfm_bert_kind;

/* The prefix of st's names ("bert." / "roberta." or "") when it is a
 * checkpoint of that kind: its tensors and config.json's model_type. */
const char *tfm_bert_detect(const tfm_safetensors *st, tfm_bert_kind kind);
/* The family's config mapper, weight loader and task head
 * (tfm_convert_family's config, weights and task) for the kind. */
int tfm_bert_describe(const tfm_safetensors *st, const char *pre, tfm_bert_kind kind,
                      tfm_model_keys *c, tfm_model_config *g, int64_t *eos, tfm_err *err);
int tfm_bert_weights(const tfm_hf_ckpt *b, tfm_bert_kind kind, tfm_err *err);
int tfm_bert_task(const tfm_safetensors *st, const char *pre, tfm_bert_kind kind, tfm_buf *out,
                  tfm_err *err);

#endif
