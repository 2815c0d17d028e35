/* Training configuration (tfm-train's, and the one a model file records):
 * the keys of man/tfm-config.5, read and printed by the schema engine
 * (io/schema.h).
 *
 * Precedence is the order of the calls: tfm_config_defaults, then
 * tfm_config_load_yaml, then tfm_config_set for each override.
 *
 * A tfm_config is plain data (fixed-size strings), so it can be copied with
 * `=` and needs no free. */
#ifndef TFM_IO_RUN_CONFIG_H
#define TFM_IO_RUN_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "io/schema.h"

#define TFM_CONFIG_PATH_MAX TFM_SCHEMA_STRING_MAX
#define TFM_CONFIG_MAX_KEYS 128

typedef enum tfm_config_norm {
    TFM_CONFIG_NORM_PRE,  /* GPT-2: x + f(LN(x)) */
    TFM_CONFIG_NORM_POST, /* GPT-1 / original Transformer: LN(x + f(x)) */
} tfm_config_norm;

typedef enum tfm_config_act {
    TFM_CONFIG_ACT_GELU,       /* tanh approximation (GPT-2) */
    TFM_CONFIG_ACT_GELU_EXACT, /* erf form (BERT) */
    TFM_CONFIG_ACT_RELU,
} tfm_config_act;

typedef enum tfm_config_kind {
    TFM_CONFIG_KIND_DECODER,
    TFM_CONFIG_KIND_ENCODER,
    TFM_CONFIG_KIND_ENCODER_DECODER,
} tfm_config_kind;

typedef enum tfm_config_pos {
    TFM_CONFIG_POS_LEARNED,
    TFM_CONFIG_POS_SINUSOIDAL,
    TFM_CONFIG_POS_ROPE,
    TFM_CONFIG_POS_ALIBI,
    TFM_CONFIG_POS_T5,
} tfm_config_pos;

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

typedef enum tfm_config_truncate {
    TFM_CONFIG_TRUNCATE_HEAD,
    TFM_CONFIG_TRUNCATE_ERROR,
} tfm_config_truncate;

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
} tfm_config_task;
typedef enum tfm_config_prefix_from {
    TFM_CONFIG_PREFIX_RANDOM,
    TFM_CONFIG_PREFIX_PAIRS,
} tfm_config_prefix_from;
typedef enum tfm_config_noise {
    TFM_CONFIG_NOISE_SPANS,
    TFM_CONFIG_NOISE_IID,
    TFM_CONFIG_NOISE_DROP,
    TFM_CONFIG_NOISE_BERT,
} tfm_config_noise;

typedef enum tfm_config_documents {
    TFM_CONFIG_DOCS_BLANK_LINE,
    TFM_CONFIG_DOCS_LINE,
} tfm_config_documents;

typedef struct tfm_config {
    struct {
        int64_t n_layer, n_head, n_embd, block_size;
        int64_t vocab_size; /* 0: from the tokenizer (or the data) */
        double dropout;
        double ffn_dropout; /* inside the feed-forward, after its activation */
        double final_dropout; /* on each stack's output, after its final norm */
        int tie_embeddings;
        int bias;
        int norm;       /* tfm_config_norm */
        int norm_type;  /* tfm_norm_kind (nn/norm.h): 0 layernorm, 1 rmsnorm */
        int activation; /* tfm_config_act */
        int ffn;        /* tfm_ffn_kind (nn/ffn.h): 0 plain, 1 geglu, 2 swiglu */
        int attn_scale; /* attention scores scaled by 1/sqrt(head size) */
        double ln_eps;
        int kind;       /* tfm_config_kind */
        int positions;  /* tfm_config_pos */
        int64_t d_ff;   /* 0: 4·n_embd */
        int64_t head_dim; /* 0: n_embd / n_head */
        double rope_base;
        int64_t t5_buckets, t5_max_distance;
        int64_t segments;
        int emb_norm;
        int emb_scale;
        int head_scale;        /* final hidden states · n_embd^-0.5 before the head */
        int head_bias;         /* the LM head adds final_logits_bias (BART) */
        int64_t decoder_start; /* -1: the tokenizer's bos, else eos */
        int64_t forced_bos;    /* the token forced after decoder_start; -1: none */
        int source_bos;        /* sources begin with the tokenizer's bos */
        int init;       /* tfm_init (model/transformer.h): 0 gpt2, 1 xavier */
        int64_t n_enc_layer; /* encoder-decoder: 0 means n_layer */
        int tie_source;
        int64_t src_vocab_size; /* 0: vocab_size */
        int mlm_head, pooler, nsp, span; /* the heads (model/transformer.h) */
        int64_t classes, tags;
    } model;
    struct {
        char train[TFM_CONFIG_PATH_MAX];
        char val[TFM_CONFIG_PATH_MAX];
        char text[TFM_CONFIG_PATH_MAX];
        char tokenizer[TFM_CONFIG_PATH_MAX];
        char source_tokenizer[TFM_CONFIG_PATH_MAX];
        char source[TFM_CONFIG_PATH_MAX];
        char target[TFM_CONFIG_PATH_MAX];
        char val_source[TFM_CONFIG_PATH_MAX];
        char val_target[TFM_CONFIG_PATH_MAX];
        double val_fraction;
        int packing;
        int truncate;   /* tfm_config_truncate */
        int64_t cls_id, sep_id, mask_id, n_special; /* mlm; -1: the tokenizer's */
        int documents;  /* tfm_config_documents: mlm's text */
        int symmetric;      /* classify, decoders: pairs in both orders */
        int64_t doc_stride; /* span: tokens between context windows */
        char prefix[TFM_CONFIG_PATH_MAX]; /* text-to-text: prepended to every source */
    } data;
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
        struct {                /* LoRA adapters (model/lora.h); r 0: none */
            int64_t r;
            double alpha, dropout;
            char targets[TFM_CONFIG_PATH_MAX]; /* "q, v" */
        } lora;
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

#endif
