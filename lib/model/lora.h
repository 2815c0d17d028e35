/* LoRA adapters as files and names (the arithmetic is nn/lora.h; the
 * adapters in training are tensors of model/transformer.h's table).
 *
 * An adapter directory is PEFT's layout:
 *   adapter_config.json        peft_type "LORA", r, lora_alpha, lora_dropout,
 *                              target_modules, bias "none", task_type,
 *                              base_model_name_or_path (train.init)
 *   adapter_model.safetensors  base_model.model.<module>.lora_A.weight [r, in]
 *                              base_model.model.<module>.lora_B.weight [out, r]
 *                              and the trained task heads,
 *                              base_model.model.<head>.weight/.bias
 * with tfm's module names (model/transformer.h): h.{i}.attn.q, .k, .v (the
 * parts of attn.c_attn), h.{i}.attn.c_proj, h.{i}.xattn.c_q, .k, .v (parts
 * of xattn.c_kv), h.{i}.xattn.c_proj, h.{i}.mlp.c_fc (gated: mlp.wi_0,
 * mlp.wi_1), h.{i}.mlp.c_proj, "enc." before an encoder-decoder's encoder
 * blocks. */
#ifndef TFM_MODEL_LORA_H
#define TFM_MODEL_LORA_H

#include <stddef.h>

#include "base/err.h"
#include "model/transformer.h"

/* "q, v" (train.lora.targets: tfm's names or HuggingFace's, comma or blank
 * separated) as TFM_LORA_* bits; a word that names no projection is an
 * error naming it and the known words. */
int tfm_lora_targets_parse(const char *list, unsigned *bits, tfm_err *err);

/* Trainable floats of m (the tensors not frozen), without padding, and
 * the whole model's, for the start report. */
size_t tfm_model_trainable(const tfm_model *m, size_t *total);

/* Writes m's adapters and trained heads into dir (which must exist) as
 * above; base: the base model's path ("" or NULL: unknown); task_type:
 * PEFT's ("CAUSAL_LM", "SEQ_CLS", ...; NULL: null).  Atomic per file. */
int tfm_lora_save(const char *dir, const tfm_model *m, const char *base, const char *task_type,
                  tfm_err *err);

/* The weight an adapter module adapts: "attn.q" is the columns [0, C) of
 * "attn.c_attn.weight" ([in, out], rows ld apart); 1 and *weight (the
 * suffix after "h.{i}."), *part (the column block, in units of the
 * module's out width) when module is one of tfm's. */
int tfm_lora_module_weight(const char *module, const char **weight, int *part);

/* Adds every adapter's (alpha/r)·B·A into the weight it adapts, in
 * m->params; returns a copy of those weights as they were, for
 * tfm_lora_unmerge (NULL when m has no adapters). */
float *tfm_lora_merge_model(tfm_model *m);
/* Puts the copied weights back, bit for bit, and frees the copy. */
void tfm_lora_unmerge_model(tfm_model *m, float *saved);

#endif
