/* tfm's model files: the one place that writes and reads them (lm/lm.h
 * opens them, and HuggingFace checkpoints, for programs).
 *
 *     tfm_model_save("out.safetensors", &m, yaml, tok_json, tok_len, step, &err);
 *     tfm_model_file_read(&st, m.table, m.n_table, arrays, prefixes, 1, &err);
 *
 * A tfm model file is safetensors: F32 tensors under the names of
 * model/transformer.h, and in __metadata__ "format" = "tfm-gpt" (the name
 * predates the other model kinds; the config's model.kind says which), "config"
 * = the effective YAML configuration (train/run_config.h: model/ reads only
 * its own keys of it, model/config_keys.h), "tokenizer" = the
 * tokenizer.json text, "step", a fine-tuned model's "task" (its labels),
 * and "checksum": a 64-bit hash of every tensor
 * (name, dtype, shape, bytes) and every other metadata pair, so a flipped
 * byte anywhere is an error on load, not a silently different model.  Files
 * are written to a temporary name and renamed (base/file.h).
 *
 * Training state files (train/checkpoint.h) use the same writer, reader and
 * checksum with more arrays (optimizer moments) under prefixed names. */
#ifndef TFM_MODEL_FILE_H
#define TFM_MODEL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "io/safetensors.h"
#include "model/quant.h"
#include "base/buf.h"
#include "model/config_keys.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

/* The model section of a configuration, with LoRA adapters (lora may be
 * NULL: none), as the model's description; vocab_size must have been
 * resolved (non-zero).  Fails with the model code's message, prefixed
 * "model", on a bad shape. */
int tfm_model_config_from_keys(const tfm_model_keys *k, const tfm_lora_keys *lora,
                               tfm_model_config *out, tfm_err *err);

/* The model file a path names: path itself, or a folder's model.safetensors
 * (written into buf). */
const char *tfm_model_file_path(const char *path, char *buf, size_t n);

/* Checks an open file's "checksum" against its tensors and metadata: 0 when
 * it matches, or when the file has none and required is 0 (files not
 * written by tfm); else -1 naming the file. */
int tfm_model_file_verify(const tfm_safetensors *st, int required, tfm_err *err);

/* Writes n_arrays arrays of the table's layout, array a under the names
 * prefixes[a] + parameter name, with the metadata pairs whose value is not
 * NULL and the checksum; atomically. */
int tfm_model_file_write(const char *path, const tfm_param *table, int n_table,
                         const float *const *arrays, const char *const *prefixes, int n_arrays,
                         const char *const *keys, const char *const *vals, const size_t *lens,
                         int n_keys, tfm_err *err);

/* The same for one array whose table entry k is named names[k] (names
 * longer than a tfm_param's: HuggingFace's module paths). */
int tfm_model_file_write_named(const char *path, const tfm_param *table,
                               const char *const *names, int n_table, const float *array,
                               const char *const *keys, const char *const *vals,
                               const size_t *lens, int n_keys, tfm_err *err);

/* Copies the tensors named like tfm_model_file_write's into arrays; a
 * missing tensor or another shape is an error naming the tensor and the
 * shape the table expects. */
int tfm_model_file_read(const tfm_safetensors *st, const tfm_param *table, int n_table,
                        float *const *arrays, const char *const *prefixes, int n_arrays,
                        tfm_err *err);

/* Writes m's weights with config_yaml and tok_json (may be NULL). */
int tfm_model_save(const char *path, const tfm_model *m, const char *config_yaml,
                   const char *tok_json, size_t tok_len, int64_t step, tfm_err *err);
/* The same with "source_tokenizer" (an encoder-decoder's second tokenizer,
 * which encodes its sources; NULL: none). */
int tfm_model_save_translation(const char *path, const tfm_model *m, const char *config_yaml,
                               const char *tok_json, size_t tok_len, const char *src_tok_json,
                               size_t src_tok_len, int64_t step, tfm_err *err);

/* The same with "task": a fine-tuned model's task description (JSON text,
 * e.g. its label set, train/task.h; NULL: none). */
int tfm_model_save_task(const char *path, const tfm_model *m, const char *config_yaml,
                        const char *tok_json, size_t tok_len, const char *src_tok_json,
                        size_t src_tok_len, const char *task_json, int64_t step, tfm_err *err);

/* The same with the matrices stored as dt (model/quant.h: bf16, or
 * Q8_0 8-bit blocks) and "weights" in __metadata__ saying so; -2 (nothing
 * written) when a matrix to store 8-bit holds a NaN or infinity. */
int tfm_model_save_dtype(const char *path, const tfm_model *m, const char *config_yaml,
                         const char *tok_json, size_t tok_len, const char *src_tok_json,
                         size_t src_tok_len, const char *task_json, int64_t step,
                         tfm_weight_dtype dt, tfm_err *err);

/* Appends the __metadata__ value of key of the model file at path (a folder:
 * its model.safetensors) to out: 1 when present, 0 when absent, -1 when the
 * file cannot be read.  (lm/lm.h tfm_lm_file_meta also makes a
 * HuggingFace checkpoint's "task".) */
int tfm_model_file_meta(const char *path, const char *key, tfm_buf *out, tfm_err *err);

/* Applies the configuration recorded in the model file at path (a folder:
 * its model.safetensors) with schema s over c, the struct s fills (each
 * owner reads its keys of it with its own schema); errors name
 * "path:config".  1 when the file records one, 0 when not, -1 on error. */
int tfm_model_file_apply_config(const char *path, const tfm_schema *s, void *c, tfm_err *err);

#endif
