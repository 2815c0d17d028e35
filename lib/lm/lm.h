/* The model a program opens: a tfm model file (model/file.h), a
 * HuggingFace checkpoint (convert/convert.h says which families and how),
 * as a file or as the folder holding model.safetensors, or a GGUF file
 * (convert/gguf.h), with its tokenizer.
 *
 *     tfm_lm lm;                                    // inference: weights stay mapped
 *     if (tfm_lm_open(&lm, "model.safetensors", &err) < 0) ...
 *     ... tfm_infer over lm.w with lm.cfg, lm.tok for text ...
 *     tfm_lm_close(&lm);
 *
 *     tfm_model_file_keys k; tfm_model m;           // training: weights copied
 *     tfm_model_load_keys("model.safetensors", &k, &m, &tok, &err);
 *     tfm_model_save("out.safetensors", &m, yaml, tok_json, tok_len, step, &err);
 *
 * (train/run_config.h's tfm_model_load gives the whole configuration.)
 *
 * Ownership: tfm_lm owns the mapping, the weight view, the tokenizer and (a
 * BERT, T5 or BART checkpoint) the copied weights. */
#ifndef TFM_LM_LM_H
#define TFM_LM_LM_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "model/config_keys.h"
#include "model/decode.h"
#include "model/file.h"
#include "model/lora.h"
#include "model/quant.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

/* Opens a model file for its description and tensors: a safetensors file
 * (io/safetensors.h) or a GGUF file's view as a tfm file (convert/gguf.h),
 * by the file's first bytes or its name's .gguf. */
int tfm_lm_file_open(tfm_safetensors *st, const char *path, tfm_err *err);

/* The HuggingFace family of a checkpoint (a file or folder) as
 * convert/convert.h detects it, with the prefix its names carry ("bert.",
 * "model.", "transformer." or ""); TFM_HF_NONE for a tfm file or none at
 * all. */
tfm_hf_family tfm_model_file_hf_family(const char *path, const char **prefix);

/* tfm_model_file_meta, and for "task" a HuggingFace checkpoint's (one with
 * a task head, made from its config.json) when the file stores none. */
int tfm_lm_file_meta(const char *path, const char *key, tfm_buf *out, tfm_err *err);

/* The tokenizer of a HuggingFace folder as its model's loader reads it:
 * tokenizer.json, else vocab.txt, spiece.model, vocab.json + merges.txt or
 * encoder.json + vocab.bpe with tokenizer_config.json's settings (a T5
 * folder's spiece.model: T5Tokenizer's extra_ids, 100 by default); *tok
 * NULL (and 0) when there is none.  For a directory given as a tokenizer
 * (tfm_tokenizer_load reads the files alone). */
int tfm_model_folder_tokenizer(const char *dir, tfm_tokenizer **tok, tfm_err *err);

/* A tokenizer named by a user (-t, data.tokenizer): a HuggingFace folder
 * with its tokenizer_config.json as tfm_model_folder_tokenizer reads it (a
 * cased BERT folder stays cased, a T5 folder has its sentinels), a GGUF
 * file's tokenizer (convert/gguf.h), else tfm_tokenizer_load's file. */
int tfm_model_tokenizer_load(tfm_tokenizer **tok, const char *path, tfm_err *err);

/* Loads a model file for training or evaluation: the keys of its config
 * that model/ reads (defaults overlaid with the stored YAML; the stored
 * YAML's other keys are skipped: train/run_config.h's tfm_model_load reads
 * them all), the model built from them with the stored weights, and the
 * tokenizer when the file has one (*tok = NULL otherwise; tok may be NULL
 * to skip it).  path may be a folder (its model.safetensors).  HuggingFace
 * checkpoints load too (convert/convert.h): k->model then describes them
 * and nothing else is set but a task head's train.task.  The caller frees
 * m and *tok. */
int tfm_model_load_keys(const char *path, tfm_model_file_keys *k, tfm_model *m,
                        tfm_tokenizer **tok, tfm_err *err);
/* The same with a LoRA adapter directory (model/lora.h; NULL: none) merged
 * into m's weights. */
int tfm_model_load_keys_adapter(const char *path, const char *adapter, tfm_model_file_keys *k,
                                tfm_model *m, tfm_tokenizer **tok, tfm_err *err);

/* Writes m with configuration config_yaml and tokenizer tok (or NULL) to
 * out with its matrices stored as dt, atomically, carrying the task, source
 * tokenizer and step of the model file meta_from (tfm_lm_file_meta's). */
int tfm_model_resave(const char *meta_from, const char *config_yaml, const tfm_model *m,
                     const tfm_tokenizer *tok, const char *out, tfm_weight_dtype dt,
                     tfm_err *err);

/* A model opened for inference: weights used in place from the mapped
 * file. */
typedef struct tfm_lm {
    tfm_model_config cfg;
    tfm_weights w;
    tfm_tokenizer *tok;   /* NULL when the file carries none */
    int64_t eos;          /* end-of-text id, -1 when none */
    /* A prefix LM (its stored config's train.task is prefix-lm): a prompt
     * is its prefix (model/decode.h tfm_infer_prefill_prefix); with
     * train.prefix_from pairs (prefix_pairs 1) it was trained on inputs
     * ending with end-of-text, which a prompt then gets too. */
    int prefix_lm, prefix_pairs;
    size_t file_bytes;
    void *file;           /* private: the open safetensors file */
    void *model;          /* private: a HuggingFace checkpoint's weights
                             copied into tfm's layout (tfm_model), or NULL */
    void *adapter;        /* private: the weights a LoRA adapter changed
                             (model/lora.h's tfm_adapter), or NULL */
    void *quant;          /* private: the file's stored bfloat16 and 8-bit
                             matrices (model/quant.h's tfm_quant_views) */
} tfm_lm;

/* Opens a tfm model file (or a HuggingFace checkpoint; path may be a
 * folder): checks the format and the checksum, reads the config and
 * tokenizer from __metadata__ and binds the F32 tensors where they lie in
 * the mapping (a checkpoint whose layout is not tfm's, BERT, T5 or BART,
 * is copied).  Errors name the path. */
int tfm_lm_open(tfm_lm *lm, const char *path, tfm_err *err);
/* The same with a LoRA adapter directory (model/lora.h; NULL: none) merged
 * in: only the weights it adapts are copied, the rest stay mapped. */
int tfm_lm_open_adapter(tfm_lm *lm, const char *path, const char *adapter, tfm_err *err);

/* For decoding only (tfm_infer): a decoder's 8-bit and bfloat16 matrices
 * (model/quant.h) are not widened to float32, which would double or
 * quadruple the memory held; lm.w then has NULL for their float32
 * weights (model/decode.h), so that lm.w serves tfm_infer alone.  Ignored
 * for other kinds of model and with an adapter. */
#define TFM_LM_STORED 1u
/* tfm_lm_open_adapter with flags (TFM_LM_*; 0: as tfm_lm_open_adapter). */
int tfm_lm_open_flags(tfm_lm *lm, const char *path, const char *adapter, unsigned flags,
                      tfm_err *err);
void tfm_lm_close(tfm_lm *lm);

#endif
