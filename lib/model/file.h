/* Model files: the one place that reads and writes them.
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
 * HuggingFace checkpoints open too (no tfm metadata; HF's "format": "pt"
 * is allowed), as the file or as the folder holding model.safetensors and
 * config.json:
 *   GPT-2 (names with or without "transformer."): the shape read off the
 *     tensors, n_head, layer_norm_epsilon and activation_function from
 *     config.json if present; weights used in place by tfm_lm_open, copied
 *     by tfm_model_load; the tokenizer is tokenizer.json beside the file,
 *     else vocab.json + merges.txt.
 *   BERT (BertModel, BertForPreTraining, BertForMaskedLM,
 *     BertForNextSentencePrediction, BertForSequenceClassification,
 *     BertForTokenClassification, BertForQuestionAnswering: config.json's
 *     architectures, any other refused; names with or
 *     without "bert."; LayerNorm weight/bias or gamma/beta): an encoder
 *     from config.json (required: hidden_size, num_attention_heads,
 *     num_hidden_layers, intermediate_size, max_position_embeddings,
 *     type_vocab_size, vocab_size, layer_norm_eps, hidden_act), post-LN,
 *     learned positions, segments, the embedding norm, the LM head tied to
 *     the word embeddings; weights copied into tfm's layout (q, k, v
 *     concatenated, matrices transposed); the pooler (bert.pooler.dense),
 *     the MLM head (cls.predictions.*) and the next-sentence head
 *     (cls.seq_relationship.*, with the pooler) when the file has them;
 *     tie_word_embeddings false: the MLM decoder's own weight and bias
 *     (cls.predictions.decoder.*).  A task head makes the model fine-tuned
 *     for it (train.task classify: classifier.* on the pooler, labels
 *     id2label's, their rows in sorted order, one output regression
 *     unless problem_type says single_label_classification; tag:
 *     classifier.* without a pooler; span: qa_outputs.*), its "task"
 *     (tfm_model_file_meta) made from config.json.
 *     The tokenizer is tokenizer.json beside the file,
 *     else vocab.txt (uncased WordPiece).
 *   T5 (T5ForConditionalGeneration, t5 or mt5: t5-small's layout, v1.1 and
 *     flan-t5's): an encoder-decoder from config.json (required: d_model,
 *     d_kv, d_ff, num_layers, num_heads, vocab_size; HF's defaults for
 *     num_decoder_layers, relative_attention_num_buckets (32) and
 *     _max_distance (128), feed_forward_proj (relu; also gelu, gelu_new,
 *     gated-gelu, gated-silu), tie_word_embeddings (true),
 *     layer_norm_epsilon (1e-6), decoder_start_token_id (0), eos_token_id
 *     (1), n_positions (512, as block_size)); num_heads·d_kv must equal
 *     d_model.  Weights copied (file.c says how); the end-of-text id is
 *     config.json's; the tokenizer is tokenizer.json beside the file, else
 *     spiece.model.  Only F32 files: F16 and BF16 tensors are refused.
 *   BART (BartForConditionalGeneration under "model.", or BartModel): an
 *     encoder-decoder from config.json (required: d_model, encoder_layers,
 *     decoder_layers, encoder/decoder_attention_heads and _ffn_dim (each
 *     pair equal), max_position_embeddings, vocab_size; HF's defaults for
 *     activation_function (gelu), scale_embedding (false),
 *     tie_word_embeddings (true), decoder_start_token_id (2), eos_token_id
 *     (2)); post-LN, learned positions past HF's 2 unread rows, the
 *     embedding norm, final_logits_bias as model.head_bias.  Weights
 *     copied; end-of-text and tokenizer as T5's, else vocab.json +
 *     merges.txt.  mBART's pre-LN layout is refused.
 *   Every config.json's dropout rates become the model.*dropout keys, HF's
 *     defaults when absent (T5 dropout_rate: dropout, ffn_ and final_;
 *     BART dropout, attention_dropout, activation_dropout; BERT
 *     hidden_dropout_prob, attention_probs_dropout_prob; GPT-2 resid_pdrop,
 *     attn_pdrop, embd_pdrop), and forced_eos_token_id model.forced_eos
 *     (T5, BART, GPT-2).
 *
 * Training state files (train/checkpoint.h) use the same writer, reader and
 * checksum with more arrays (optimizer moments) under prefixed names.
 *
 * Ownership: tfm_lm owns the mapping, the weight view, the tokenizer and (a
 * BERT, T5 or BART checkpoint) the copied weights. */
#ifndef TFM_MODEL_FILE_H
#define TFM_MODEL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "io/safetensors.h"
#include "model/decode.h"
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

/* The HuggingFace family of a checkpoint (a file or folder): its loader's
 * (model/file.c), with the prefix its names carry ("bert.", "model.",
 * "transformer." or ""); TFM_HF_NONE for a tfm file or none at all. */
typedef enum tfm_hf_family {
    TFM_HF_NONE,
    TFM_HF_GPT2,
    TFM_HF_BERT,
    TFM_HF_T5,
    TFM_HF_BART,
} tfm_hf_family;
tfm_hf_family tfm_model_file_hf_family(const char *path, const char **prefix);

/* The tokenizer of a HuggingFace folder as its model's loader reads it:
 * tokenizer.json, else vocab.txt, spiece.model, vocab.json + merges.txt or
 * encoder.json + vocab.bpe with tokenizer_config.json's settings (a T5
 * folder's spiece.model: T5Tokenizer's extra_ids, 100 by default); *tok
 * NULL (and 0) when there is none.  For a directory given as a tokenizer
 * (tfm_tokenizer_load reads the files alone). */
int tfm_model_folder_tokenizer(const char *dir, tfm_tokenizer **tok, tfm_err *err);

/* A tokenizer named by a user (-t, data.tokenizer): a HuggingFace folder
 * with its tokenizer_config.json as tfm_model_folder_tokenizer reads it (a
 * cased BERT folder stays cased, a T5 folder has its sentinels), else
 * tfm_tokenizer_load's file. */
int tfm_model_tokenizer_load(tfm_tokenizer **tok, const char *path, tfm_err *err);

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

/* Writes m with configuration config_yaml and tokenizer tok (or NULL) to
 * out with its matrices stored as dt, atomically, carrying the task, source
 * tokenizer and step of the model file meta_from. */
int tfm_model_resave(const char *meta_from, const char *config_yaml, const tfm_model *m,
                     const tfm_tokenizer *tok, const char *out, tfm_weight_dtype dt,
                     tfm_err *err);

/* Appends the __metadata__ value of key of the model file at path (a folder:
 * its model.safetensors) to out: 1 when present, 0 when absent, -1 when the
 * file cannot be read. */
int tfm_model_file_meta(const char *path, const char *key, tfm_buf *out, tfm_err *err);

/* Applies the configuration recorded in the model file at path (a folder:
 * its model.safetensors) with schema s over c, the struct s fills (each
 * owner reads its keys of it with its own schema); errors name
 * "path:config".  1 when the file records one, 0 when not, -1 on error. */
int tfm_model_file_apply_config(const char *path, const tfm_schema *s, void *c, tfm_err *err);

/* Loads a model file for training or evaluation: the keys of its config
 * that model/ reads (defaults overlaid with the stored YAML; the stored
 * YAML's other keys are skipped: train/run_config.h's tfm_model_load reads
 * them all), the model built from them with the stored weights, and the
 * tokenizer when the file has one (*tok = NULL otherwise; tok may be NULL
 * to skip it).  path may be a folder (its model.safetensors).  HuggingFace
 * BERT, GPT-2, T5 and BART checkpoints load too (above): k->model then
 * describes them and nothing else is set.  The caller frees m and *tok. */
int tfm_model_load_keys(const char *path, tfm_model_file_keys *k, tfm_model *m,
                        tfm_tokenizer **tok, tfm_err *err);
/* The same with a LoRA adapter directory (model/lora.h; NULL: none) merged
 * into m's weights. */
int tfm_model_load_keys_adapter(const char *path, const char *adapter, tfm_model_file_keys *k,
                                tfm_model *m, tfm_tokenizer **tok, tfm_err *err);

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
    void *model;          /* private: a HuggingFace BERT or T5 checkpoint's
                             weights copied into tfm's layout (tfm_model), or
                             NULL */
    void *adapter;        /* private: the weights a LoRA adapter changed
                             (model/lora.h's tfm_adapter), or NULL */
    void *quant;          /* private: the file's stored bfloat16 and 8-bit
                             matrices (model/quant.h's tfm_quant_views) */
} tfm_lm;

/* Opens a tfm model file (or a HuggingFace GPT-2, BERT or T5 one; path may
 * be a folder): checks the format and the checksum, reads the config and
 * tokenizer from __metadata__ and binds the F32 tensors where they lie in
 * the mapping (a BERT or T5 checkpoint's are copied).  Errors name the
 * path. */
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
