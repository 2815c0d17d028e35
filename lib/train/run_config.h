/* Training configuration (tfm-train's, and the one a model file records):
 * the keys of man/tfm-config.5, read and printed by the schema engine
 * (io/schema.h).  Each key is declared beside its owner: model.* and the
 * run keys opening a model file needs (train.lora.*, train.task,
 * train.prefix_from) in model/config_keys.h, data.* in data/data_keys.h,
 * the optim, schedule and other train keys here; this file joins the
 * tables into one, in --dump-config's order, at tfm_config's fields.
 * Inference reads a model file's keys through their owners
 * (lm/lm.h tfm_model_load_keys, data/data_keys.h), never through
 * tfm_config.
 *
 * Precedence is the order of the calls: tfm_config_defaults, then
 * tfm_config_load_yaml, then tfm_config_set for each override.
 *
 * A tfm_config is plain data (fixed-size strings), so it can be copied with
 * `=` and needs no free. */
#ifndef TFM_TRAIN_RUN_CONFIG_H
#define TFM_TRAIN_RUN_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "data/data_keys.h"
#include "io/schema.h"
#include "model/config_keys.h"
#include "lm/lm.h"
#include "model/quant.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

#define TFM_CONFIG_PATH_MAX TFM_SCHEMA_STRING_MAX
#define TFM_CONFIG_MAX_KEYS 192

typedef enum tfm_config_optim {
    TFM_CONFIG_OPTIM_ADAMW,
    TFM_CONFIG_OPTIM_ADAM,
} tfm_config_optim;

typedef enum tfm_config_decay {
    TFM_CONFIG_DECAY_COSINE,
    TFM_CONFIG_DECAY_LINEAR,
    TFM_CONFIG_DECAY_CONSTANT,
    TFM_CONFIG_DECAY_INVERSE_SQRT,
} tfm_config_decay;

/* train.best_by: a validation metric (train/task.h tfm_task_metrics names
 * those a task reports); the choices' order is the enum's. */
typedef enum tfm_config_best {
    TFM_CONFIG_BEST_LOSS,
    TFM_CONFIG_BEST_BLEU,
    TFM_CONFIG_BEST_MASKED_ACCURACY,
    TFM_CONFIG_BEST_NSP_ACCURACY,
    TFM_CONFIG_BEST_ACCURACY,
    TFM_CONFIG_BEST_MACRO_F1,
    TFM_CONFIG_BEST_PEARSON,
    TFM_CONFIG_BEST_ENTITY_F1,
    TFM_CONFIG_BEST_TOKEN_ACCURACY,
    TFM_CONFIG_BEST_SQUAD_F1,
    TFM_CONFIG_BEST_SQUAD_EM,
} tfm_config_best;
typedef enum tfm_config_noise {
    TFM_CONFIG_NOISE_SPANS,
    TFM_CONFIG_NOISE_IID,
    TFM_CONFIG_NOISE_DROP,
    TFM_CONFIG_NOISE_BERT,
} tfm_config_noise;

typedef struct tfm_config {
    tfm_model_keys model; /* model/config_keys.h */
    tfm_data_keys data;   /* data/data_keys.h */
    struct {
        int type; /* tfm_config_optim */
        double lr, beta1, beta2, eps, weight_decay, grad_clip;
    } optim;
    struct {
        int64_t warmup;
        int decay; /* tfm_config_decay */
        double min_lr;
    } schedule;
    struct {
        int64_t batch_size, grad_accum, max_steps;
        int64_t eval_interval, eval_batches, checkpoint_interval;
        int64_t log_interval, patience;
        int64_t seed; /* -1: chosen from the clock and logged */
        int64_t threads; /* 0: --threads, TFM_NUM_THREADS or all cores */
        double label_smoothing;
        int64_t max_tokens;     /* encoder-decoders: token budget; 0: batch_size */
        double bucket_mb;       /* MPI: gradient all-reduce bucket, MiB */
        int overlap;            /* MPI: all-reduce buckets during backward */
        int eval_bleu;
        int64_t bleu_sentences;
        int best_by;            /* tfm_config_best */
        int task; /* tfm_config_task */
        char init[TFM_CONFIG_PATH_MAX]; /* weights to start from; "" none */
        double mask_prob, mask_token_prob, random_token_prob, short_seq_prob;
        int whole_word_mask;
        double noise_density, mean_span; /* span-corruption (T5) */
        int noise;              /* span-corruption: tfm_config_noise */
        double mask_ratio, poisson_lambda; /* denoise (BART) */
        int permute_sentences;
        int prefix_from;        /* prefix-lm: tfm_config_prefix_from */
        double lm_weight;       /* classify, decoders: the LM loss's weight */
        double beta;            /* dpo: β */
        char reference[TFM_CONFIG_PATH_MAX]; /* dpo, ppo: the reference; "" train.init */
        /* ppo (task_ppo.c) */
        char reward_model[TFM_CONFIG_PATH_MAX];
        double kl_coef, gamma, lam, cliprange, cliprange_value, vf_coef, temperature;
        int64_t ppo_epochs, minibatches, max_new_tokens, top_k;
        double class_balance;   /* classify: draw ∝ class count^-q */
        tfm_lora_keys lora;     /* model/config_keys.h */
    } train;
    /* 1 for each key (by its index in tfm_config_keys) that a file or --set
     * gave, 0 for a default: a run started from another model's file
     * takes the shape keys nobody gave from that file (train/init.h). */
    unsigned char given[TFM_CONFIG_MAX_KEYS];
} tfm_config;

/* The schema, its keys in the order --dump-config prints them. */
const tfm_schema *tfm_config_schema(void);
const tfm_schema_key *tfm_config_keys(size_t *n);
const tfm_schema_key *tfm_config_find(const char *path);

void tfm_config_defaults(tfm_config *c);

/* Applies the keys present in a YAML document (sections as mappings:
 * `model: {n_layer: 4}`); keys absent keep their current value.  Errors name
 * name:line:col.  tfm_config_load_yaml reads a file. */
int tfm_config_apply_yaml(tfm_config *c, const char *text, size_t len,
                          const char *name, tfm_err *err);
int tfm_config_load_yaml(tfm_config *c, const char *path, tfm_err *err);

/* One override "section.key=value"; the value is read as the key's type. */
int tfm_config_set(tfm_config *c, const char *assignment, tfm_err *err);

/* Checks between keys (n_embd divisible by n_head, data present, ...). */
int tfm_config_validate(const tfm_config *c, tfm_err *err);

/* Appends the configuration as YAML; with comments != 0 each key carries its
 * documentation as a comment.  The output parses back to the same values. */
void tfm_config_dump(const tfm_config *c, int comments, tfm_buf *out);

/* Whether a file or --set gave the key (path must be a key). */
int tfm_config_given(const tfm_config *c, const char *path);

/* The closest key to a misspelt one (NULL when nothing is close). */
const char *tfm_config_suggest(const char *path);

/* Enum value name, e.g. tfm_config_choice_name("model.norm", 0) = "pre". */
const char *tfm_config_choice_name(const char *path, int value, char *buf, size_t size);

/* ---- model files with their whole configuration -------------------- */

/* The model section and train.* keys of c (LoRA adapters, label smoothing)
 * as the model's description: model/file.h tfm_model_config_from_keys. */
int tfm_model_config_from(const tfm_config *c, tfm_model_config *out, tfm_err *err);

/* The configuration stored in a model or state file, applied over *c. */
int tfm_model_file_config(const char *path, tfm_config *c, tfm_err *err);

/* Loads a model file for training or evaluation (lm/lm.h
 * tfm_model_load_keys) with its whole configuration: defaults overlaid with
 * the stored YAML (a HuggingFace checkpoint: defaults with the model
 * section describing it).  The caller frees m and *tok. */
int tfm_model_load(const char *path, tfm_config *c, tfm_model *m, tfm_tokenizer **tok,
                   tfm_err *err);
/* The same with a LoRA adapter directory (model/lora.h; NULL: none) merged
 * into m's weights. */
int tfm_model_load_adapter(const char *path, const char *adapter, tfm_config *c, tfm_model *m,
                           tfm_tokenizer **tok, tfm_err *err);

/* Writes the model file (or HuggingFace checkpoint) in with its matrices
 * stored as dt (model/quant.h) to out, atomically: the same config,
 * tokenizers, task and step. */
int tfm_model_convert_file(const char *in, const char *out, tfm_weight_dtype dt, tfm_err *err);

/* Writes out (atomically): the model at base (a tfm file or a HuggingFace
 * checkpoint, as tfm_model_load reads it) with the adapter in dir merged
 * in, as a tfm model file with base's configuration, tokenizer, task and
 * step. */
int tfm_lora_merge_file(const char *base, const char *dir, const char *out, tfm_err *err);

#endif
