/* The model's configuration keys: model.* of tfm-config(5), declared once,
 * beside the description they set (model/transformer.h's tfm_model_config).
 *
 * tfm_model_keys is the model section of a configuration file as the user
 * gives it (integers as int64_t, numbers as double, so that --dump-config
 * prints back what was written); its enumerations are the model's own, in
 * the order of the keys' choices.  tfm_model_config_from_keys
 * (model/file.h) turns the section into a tfm_model_config.
 *
 * Beside them, the keys of the training run that opening a model file
 * needs, so model/ reads them and declares them: train.lora.* (the adapters
 * are part of the parameter table) and train.task with train.prefix_from (a
 * prefix LM's prompt is its prefix).  A model file records the whole run
 * configuration; model/ reads only these keys of it (tfm_model_file_keys)
 * and leaves the rest to their owners, which join all the tables into
 * tfm-train's schema (train/run_config.h). */
#ifndef TFM_MODEL_CONFIG_KEYS_H
#define TFM_MODEL_CONFIG_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "io/schema.h"
#include "model/transformer.h"
#include "nn/ffn.h"
#include "nn/norm.h"

typedef struct tfm_model_keys {
    int64_t n_layer, n_head, n_embd, block_size;
    int64_t vocab_size; /* 0: from the tokenizer (or the data) */
    double dropout;
    double ffn_dropout;   /* inside the feed-forward, after its activation */
    double final_dropout; /* on each stack's output, after its final norm */
    double attn_dropout;  /* on the attention probabilities; -1: dropout's */
    double emb_dropout;   /* on the embeddings; -1: dropout's */
    int tie_embeddings;
    int bias;
    tfm_ln_place norm;
    tfm_norm_kind norm_type;
    tfm_act activation;
    tfm_ffn_kind ffn;
    int attn_scale; /* attention scores scaled by 1/sqrt(head size) */
    double ln_eps;
    tfm_kind kind;
    tfm_pos positions;
    int64_t d_ff;     /* 0: 4·n_embd */
    int64_t head_dim; /* 0: n_embd / n_head */
    int64_t n_kv_head; /* key/value heads; 0: n_head */
    int64_t window;    /* sliding-window self-attention; 0: none */
    double rope_base;
    tfm_rope_scaling rope_scaling;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_original_context;
    int64_t t5_buckets, t5_max_distance;
    int64_t segments;
    int emb_norm;
    int64_t embedding_size; /* E of a factorised embedding; 0: n_embd */
    int emb_scale;
    int head_scale;        /* final hidden states · n_embd^-0.5 before the head */
    int head_bias;         /* the LM head adds final_logits_bias (BART) */
    int64_t decoder_start; /* -1: the tokenizer's bos, else eos */
    int64_t forced_bos;    /* the token forced after decoder_start; -1: none */
    int64_t forced_eos;    /* the token forced last at the length limit; -1: none */
    int source_bos;        /* sources begin with the tokenizer's bos */
    tfm_init init;
    int64_t n_enc_layer; /* encoder-decoder: 0 means n_layer */
    int tie_source;
    int64_t src_vocab_size; /* 0: vocab_size */
    int mlm_head, pooler, nsp, span; /* the heads */
    int pooling;                     /* 0 token, 1 mean */
    tfm_pool_act pooler_act;
    int64_t classes, tags;
} tfm_model_keys;

/* The keys ("model.n_layer", ...), offsets into tfm_model_keys, in the
 * order --dump-config prints them. */
const tfm_schema_key *tfm_model_keys_table(size_t *n);

/* train.lora.*: LoRA adapters (model/lora.h); r 0: none. */
typedef struct tfm_lora_keys {
    int64_t r;
    double alpha, dropout;
    char targets[TFM_SCHEMA_STRING_MAX]; /* "q, v" */
} tfm_lora_keys;

/* train.task's values, in the order of its choices. */
typedef enum tfm_config_task {
    TFM_CONFIG_TASK_LM,
    TFM_CONFIG_TASK_MLM,
    TFM_CONFIG_TASK_MLM_NSP,
    TFM_CONFIG_TASK_CLASSIFY,
    TFM_CONFIG_TASK_TAG,
    TFM_CONFIG_TASK_SPAN,
    TFM_CONFIG_TASK_SPAN_CORRUPTION,
    TFM_CONFIG_TASK_DENOISE,
    TFM_CONFIG_TASK_PREFIX_LM,
    TFM_CONFIG_TASK_SFT,
    TFM_CONFIG_TASK_DPO,
    TFM_CONFIG_TASK_REWARD,
    TFM_CONFIG_TASK_PPO,
} tfm_config_task;
typedef enum tfm_config_prefix_from {
    TFM_CONFIG_PREFIX_RANDOM,
    TFM_CONFIG_PREFIX_PAIRS,
} tfm_config_prefix_from;

/* train.lora.* (offsets into tfm_lora_keys); train.task and
 * train.prefix_from (each at offset 0 of an int). */
const tfm_schema_key *tfm_lora_keys_table(size_t *n);
const tfm_schema_key *tfm_task_key(void);
const tfm_schema_key *tfm_prefix_from_key(void);

#define TFM_MODEL_FILE_MAX_KEYS 64

/* A model file's configuration as model/ reads it: the keys above; the
 * file's other keys are skipped (their owners read them). */
typedef struct tfm_model_file_keys {
    tfm_model_keys model;
    tfm_lora_keys lora;
    int task;        /* tfm_config_task */
    int prefix_from; /* tfm_config_prefix_from */
    int stored;      /* 1: read from the file's recorded configuration; 0: a
                        HuggingFace checkpoint, model describes it */
    unsigned char given[TFM_MODEL_FILE_MAX_KEYS];
} tfm_model_file_keys;

/* The schema of tfm_model_file_keys (its skip_unknown set). */
const tfm_schema *tfm_model_file_keys_schema(void);
void tfm_model_file_keys_defaults(tfm_model_file_keys *k);

/* The checks between model keys (n_embd divisible by n_head, keys that only
 * an encoder-decoder takes, ...), with messages naming the keys. */
int tfm_model_keys_check(const tfm_model_keys *k, tfm_err *err);

#endif
