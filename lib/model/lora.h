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
 * blocks.  On a HuggingFace base (GPT-2, BERT, RoBERTa, T5, BART: its
 * family, which the caller gives, lm/lm.h tfm_model_file_hf_family) the
 * names are its own, as PeftModel loads them on that base (PEFT's task
 * class: BERT's "bert.", RoBERTa's "roberta.", GPT-2's "transformer.",
 * BART's "model." prefix): GPT-2's q, k, v adapters become one adapter of
 * c_attn (the parts' A stacked, B block-diagonal) and every module's rank
 * is then parts·r (zero-padded; lora_alpha scaled to keep alpha/r). */
#ifndef TFM_MODEL_LORA_H
#define TFM_MODEL_LORA_H

#include <stddef.h>

#include "base/err.h"
#include "model/transformer.h"

/* The HuggingFace family whose module names a base model carries
 * (convert/convert.h detects it); TFM_HF_NONE: tfm's own names. */
typedef enum tfm_hf_family {
    TFM_HF_NONE,
    TFM_HF_GPT2,
    TFM_HF_BERT,
    TFM_HF_T5,
    TFM_HF_BART,
    TFM_HF_ROBERTA, /* BERT's module names, under "roberta." */
} tfm_hf_family;

/* "q, v" (train.lora.targets: tfm's names or HuggingFace's, comma or blank
 * separated) as TFM_LORA_* bits; a word that names no projection is an
 * error naming it and the known words. */
int tfm_lora_targets_parse(const char *list, unsigned *bits, tfm_err *err);

/* Trainable floats of m (the tensors not frozen), without padding, and
 * the whole model's, for the start report. */
size_t tfm_model_trainable(const tfm_model *m, size_t *total);

/* Writes m's adapters and trained heads into dir (which must exist) as
 * above; base: the base model's path ("" or NULL: unknown), of family f
 * whose names carry the prefix pre; task_type: PEFT's ("CAUSAL_LM",
 * "SEQ_CLS", ...; NULL: null).  Atomic per file. */
int tfm_lora_save(const char *dir, const tfm_model *m, const char *base, tfm_hf_family f,
                  const char *pre, const char *task_type, tfm_err *err);

/* The weight an adapter module adapts: "attn.q" is the q columns of
 * "attn.c_attn.weight" ([in, out], rows ld apart); 1 and *weight (the
 * suffix after "h.{i}."), *part (which of the fused weight's parts: q, k, v
 * of c_attn at nn/block.h's tfm_block_qkv_off, k, v of c_kv; else 0) when
 * module is one of tfm's. */
int tfm_lora_module_weight(const char *module, const char **weight, int *part);

/* Adds every adapter's (alpha/r)·B·A into the weight it adapts, in
 * m->params; returns a copy of those weights as they were, for
 * tfm_lora_unmerge (NULL when m has no adapters). */
float *tfm_lora_merge_model(tfm_model *m);
/* Puts the copied weights back, bit for bit, and frees the copy. */
void tfm_lora_unmerge_model(tfm_model *m, float *saved);

/* ---- applying an adapter directory to a base model (--adapter DIR) ----
 *
 * Reads DIR/adapter_config.json (required: r, lora_alpha; use_rslora
 * scales by alpha/sqrt(r); peft_type LORA, bias none, no use_dora, no
 * rank_pattern or alpha_pattern) and DIR/adapter_model.safetensors (F32,
 * BF16 or F16), and merges W += scale·B·A into copies of the base weights it
 * adapts.  Module names are tfm's (above; a whole tensor too, such as
 * h.{i}.attn.c_attn) or HuggingFace's, with or without their model prefix
 * ("transformer.", "bert."):
 *   GPT-2  h.{i}.attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj (Conv1D:
 *          the adapter spans the fused q, k, v)
 *   BERT   encoder.layer.{i}.attention.self.query, .key, .value,
 *          attention.output.dense, intermediate.dense, output.dense
 *   T5     encoder.block.{i}.layer.0.SelfAttention.q, .k, .v, .o,
 *          decoder.block.{i}.layer.1.EncDecAttention.q, .k, .v, .o,
 *          {encoder,decoder}.block.{i}.layer.{n}.DenseReluDense.wi, .wo,
 *          .wi_0, .wi_1
 * Any other tensor (PEFT's modules_to_save, tfm's trained heads) replaces
 * the base's tensor of that name and shape.  Every target_modules entry
 * must match a module of the file (PEFT's rule: the name or its last
 * dotted parts; a string is a regular expression over the whole name).
 * Every value must be finite.  Errors name the file and the tensor or key.
 * base_path (the base model as given, or NULL): a base_model_name_or_path
 * naming another model (neither the same last path component, "gpt2" of
 * "openai-community/gpt2", nor the same file) is warned about on stderr. */

/* The base's tensor of tfm's name: its floats and shape (shape[1] 0 for
 * vectors), or NULL when the base has none. */
typedef const float *(*tfm_lora_base_fn)(void *ctx, const char *name, size_t shape[2]);

typedef struct tfm_adapter {
    int n;
    struct tfm_adapted {
        char name[48];      /* tfm's tensor name */
        size_t numel;
        float *data;        /* the merged (or replaced) tensor, owned */
    } *t;
} tfm_adapter;

/* base_f: the base's family (TFM_HF_NONE when it is tfm's or unknown). */
int tfm_adapter_load(tfm_adapter *ad, const char *dir, const char *base_path,
                     tfm_hf_family base_f, tfm_lora_base_fn base, void *ctx,
                     tfm_err *err);
/* The adapted tensor of that name, or NULL when the adapter leaves it. */
const float *tfm_adapter_find(const tfm_adapter *ad, const char *name);
void tfm_adapter_free(tfm_adapter *ad);

/* tfm_adapter_load over m's weights, copied back into m->params. */
int tfm_adapter_apply(tfm_model *m, const char *dir, const char *base_path,
                      tfm_hf_family base_f, tfm_err *err);

#endif
