/* The helpers every HuggingFace family's converter shares (one file per
 * family beside this one: convert/convert.h holds the registry).
 *
 *     tfm_hf_json_beside(st->name, "config.json", path, sizeof path);
 *     ... tfm_hf_keys_check(&doc, my_keys, "BertConfig", err) ...
 *     tfm_hf_ckpt b = {st, "bert.", m, "BERT"};
 *     tfm_hf_linear(&b, "h.%d.attn.c_proj", l, src, C, C, err);
 *
 * Tensors are read as F32 (the caller widens bfloat16 and half precision
 * first: model/quant.h tfm_quant_widen); errors name the file and the
 * tensor or the config.json key. */
#ifndef TFM_CONVERT_HF_H
#define TFM_CONVERT_HF_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

/* The file's tfm format, or NULL: HuggingFace's save_pretrained writes
 * "format": "pt", which is none. */
const char *tfm_hf_format(const tfm_safetensors *st);

/* NAME in the folder of model_path (config.json, tokenizer.json, ...
 * beside the checkpoint), into out. */
void tfm_hf_json_beside(const char *model_path, const char *name, char *out, size_t n);

/* config.json's model_type beside model_path into out ("" when there is
 * no config.json, no model_type or the file does not parse: the loader
 * then says why). */
void tfm_hf_model_type(const char *model_path, char *out, size_t n);

/* ---- config.json's values ---- */

/* A dropout probability KEY; absent (or null): def, HF's default for the
 * model type (from_pretrained trains with it). */
int tfm_hf_prob(const tfm_json_doc *doc, const char *key, double def, double *out,
                tfm_err *err);
/* An integer KEY in [min, max]; absent (or null): def, or an error when
 * def < min (a key without default). */
int tfm_hf_int(const tfm_json_doc *doc, const char *key, int64_t min, int64_t max, int64_t def,
               int64_t *out, tfm_err *err);
/* A boolean KEY; def when absent (or null). */
int tfm_hf_bool(const tfm_json_doc *doc, const char *key, int def, int *out, tfm_err *err);
/* null, false, 0, {} or []: a key's value that changes nothing */
int tfm_hf_is_default(const tfm_json *j);

/* How a reader treats a config.json key: read (the family's reader handles
 * it), harmless (changes no computation: labels, generation settings,
 * bookkeeping) or harmless at its default only (null, false, 0, {}, []). */
enum { HF_READ, HF_ANY, HF_DEFAULT };

typedef struct tfm_hf_key {
    const char *key;
    int how;
} tfm_hf_key;

/* Every key of config.json is the family's (its table, ended by {NULL};
 * what: "GPT2Config") or PretrainedConfig's own harmless ones: an unknown
 * one may change the model, and ignoring it would compute another model
 * than HuggingFace's. */
int tfm_hf_keys_check(const tfm_json_doc *doc, const tfm_hf_key *family, const char *what,
                      tfm_err *err);

/* generation_config.json beside model_path, which transformers 5's
 * generate reads instead of config.json: its decoder_start_token_id,
 * eos_token_id, forced_bos_token_id (bos NULL: a family without one, whose
 * file must not set it) and forced_eos_token_id replace the values given
 * when present.  No file: nothing. */
int tfm_hf_generation_ids(const char *model_path, int64_t V, int64_t *start, int64_t *eos,
                          int64_t *bos, int64_t *forced_eos, tfm_err *err);

/* ---- a checkpoint's tensors copied into a tfm_model ---- */

typedef struct tfm_hf_ckpt {
    const tfm_safetensors *st;
    const char *pre; /* the prefix of its names: "bert.", "model.", "" */
    tfm_model *m;
    const char *what; /* "BERT", "T5": for messages */
} tfm_hf_ckpt;

/* The tensor pre + name (or pre + alt, another spelling such as the old
 * LayerNorm gamma/beta), which must be F32 [d0] (d1 == 0) or [d0, d1]. */
const float *tfm_hf_tensor(const tfm_hf_ckpt *b, const char *name, const char *alt, size_t d0,
                           size_t d1, tfm_err *err);
/* dst[i, j] = src[j, i]: an HF Linear [out, in] into tfm's [in, out] with
 * row stride ld (3C for the q, k, v parts of c_attn). */
void tfm_hf_transpose(float *dst, size_t ld, const float *src, size_t out, size_t in);
/* The floats of m's parameter fmt (with %d: layer), which must exist. */
float *tfm_hf_dst(const tfm_hf_ckpt *b, const char *fmt, int layer);
/* A vector or an embedding table, copied as it is. */
int tfm_hf_copy(const tfm_hf_ckpt *b, const char *dst, int layer, const char *src,
                const char *alt, size_t d0, size_t d1, tfm_err *err);
/* LayerNorm SRC (SRC.weight/.bias or SRC.gamma/.beta) into DST.weight/.bias. */
int tfm_hf_norm(const tfm_hf_ckpt *b, const char *dst, int layer, const char *src, size_t C,
                tfm_err *err);
/* Linear SRC ([out, in] weight, [out] bias) into DST ([in, out], [out]). */
int tfm_hf_linear(const tfm_hf_ckpt *b, const char *dst, int layer, const char *src,
                  size_t out, size_t in, tfm_err *err);
/* The weight SRC [out, in] into columns [col, col + out) of DST ([in, ld]):
 * one part of a fused q|k|v whose parts differ in width. */
int tfm_hf_cols(const tfm_hf_ckpt *b, const char *dst, size_t ld, size_t col, const char *src,
                size_t out, size_t in, tfm_err *err);
/* Linears SRC[0..n) ([out, in] weights, [out] biases) side by side into
 * DST.weight ([in, n·out]) and DST.bias ([n·out]): q|k|v, k|v. */
int tfm_hf_fused(const tfm_hf_ckpt *b, const char *dst, const char *const *src, int n,
                 size_t out, size_t in, tfm_err *err);

/* ---- tensors used where they lie (tfm's files and GPT-2's) ---- */

/* The tensor of tfm's name, or "transformer." + name (HuggingFace GPT-2
 * files may prefix every name); NULL when neither. */
const tfm_st_tensor *tfm_hf_find(const tfm_safetensors *st, const char *name);
/* tfm_weights_bind's lookup over a tfm_safetensors (ctx): F32 [d0] or
 * [d0, d1], or NULL and an error naming the file and the tensor. */
const float *tfm_hf_lookup(void *ctx, const char *name, size_t d0, size_t d1, tfm_err *err);

/* ---- the tokenizer beside a checkpoint (convert/hf_tokenizer.c) ---- */

/* tokenizer.json beside model_path (which says whether it lowercases),
 * else BERT's vocab.txt, else T5's spiece.model, else GPT-2's vocab.json +
 * merges.txt (or encoder.json + vocab.bpe), the last three with
 * tokenizer_config.json's settings (t5: a T5 folder's defaults, 100
 * <extra_id_N> sentinels); tokenizer_config.json's special tokens must be
 * the tokenizer's.  More tokens than vocab_size: an error.  *tok = NULL
 * when there is none. */
int tfm_hf_tokenizer_beside(const char *model_path, int vocab_size, int t5, tfm_tokenizer **tok,
                            tfm_err *err);

#endif
