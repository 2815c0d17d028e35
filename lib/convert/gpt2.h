/* HuggingFace GPT-2 checkpoints, whose names and [in, out] layout are
 * tfm's own: lm/lm.h binds their tensors where they lie in the mapping,
 * with the description and end-of-text id read here. */
#ifndef TFM_CONVERT_GPT2_H
#define TFM_CONVERT_GPT2_H

#include <stdint.h>

#include "convert/convert.h"

/* A GPT-2 file carries no config: its shape read off the tensors, the
 * rest from config.json beside the file (checked against the tensors;
 * without one: 64-wide heads, as every GPT-2 size has, and the
 * feed-forward width of the file's c_fc).  A file that is no GPT-2
 * checkpoint: an error (tfm_convert_unread's when config.json names
 * another architecture). */
int tfm_gpt2_config(const tfm_safetensors *st, tfm_model_config *g, tfm_err *err);

/* tfm's config (the model section) of a GPT-2 description (a checkpoint's,
 * a GGUF file's). */
void tfm_gpt2_config_into(const tfm_model_config *g, tfm_model_keys *c);

/* The token a GPT-2 folder's generation stops at, as transformers'
 * generate takes it: eos_token_id of generation_config.json, else of
 * config.json, beside model_path (else *eos stays as it is). */
int tfm_gpt2_eos(const char *model_path, int V, int64_t *eos, tfm_err *err);

#endif
