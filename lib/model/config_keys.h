/* The model's configuration keys: model.* of tfm-config(5), declared once,
 * beside the description they set (model/transformer.h's tfm_model_config).
 *
 * tfm_model_keys is the model section of a configuration file as the user
 * gives it (integers as int64_t, numbers as double, so that --dump-config
 * prints back what was written); its enumerations are the model's own, in
 * the order of the keys' choices.  model/run_config.c registers the table
 * into tfm-train's schema; tfm_model_config_from (model/file.h) turns the
 * section into a tfm_model_config. */
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
    double rope_base;
    int64_t t5_buckets, t5_max_distance;
    int64_t segments;
    int emb_norm;
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
    int64_t classes, tags;
} tfm_model_keys;

/* The keys ("model.n_layer", ...), offsets into tfm_model_keys, in the
 * order --dump-config prints them. */
const tfm_schema_key *tfm_model_keys_table(size_t *n);

/* The checks between model keys (n_embd divisible by n_head, keys that only
 * an encoder-decoder takes, ...), with messages naming the keys. */
int tfm_model_keys_check(const tfm_model_keys *k, tfm_err *err);

#endif
