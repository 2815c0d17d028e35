/* BERT's converter (convert/bert.c), which RoBERTa and XLM-RoBERTa's
 * (convert/roberta.c) share: the same encoder under other names for its
 * heads, positions numbered from padding_idx + 1 and one token type. */
#ifndef TFM_CONVERT_BERT_H
#define TFM_CONVERT_BERT_H

#include <stdint.h>

#include "convert/convert.h"

typedef enum { TFM_BERT, TFM_BERT_ROBERTA } tfm_bert_kind;

/* The prefix of st's names ("bert." / "roberta." or "") when it is a
 * checkpoint of that kind: its tensors and config.json's model_type. */
const char *tfm_bert_detect(const tfm_safetensors *st, tfm_bert_kind kind);
/* The family's config mapper, weight loader and task head
 * (tfm_convert_family's config, weights and task) for the kind. */
int tfm_bert_describe(const tfm_safetensors *st, const char *pre, tfm_bert_kind kind,
                      tfm_model_keys *c, tfm_model_config *g, int64_t *eos, tfm_err *err);
int tfm_bert_weights(const tfm_hf_ckpt *b, tfm_bert_kind kind, tfm_err *err);
int tfm_bert_task(const tfm_safetensors *st, const char *pre, tfm_bert_kind kind, tfm_buf *out,
                  tfm_err *err);

/* ---- what the BERT-shaped families (distilbert.c, electra.c, albert.c)
 * share with BERT's ---- */

/* The task head an architecture has (tfm_bert_arch.arch) */
enum { TFM_BERT_ARCH_ANY, TFM_BERT_ARCH_SEQ, TFM_BERT_ARCH_TOK, TFM_BERT_ARCH_QA };
typedef struct tfm_bert_arch {
    const char *name; /* "DistilBertForMaskedLM"; NULL ends a table */
    int arch;
} tfm_bert_arch;
/* What config.json says of a checkpoint's heads. */
typedef struct tfm_bert_heads {
    int arch;       /* the architectures' task head */
    int regression; /* problem_type regression: -1 unsaid, 0 no, 1 yes */
    int tie;        /* tie_word_embeddings */
} tfm_bert_heads;
/* config.json's architectures (each one of archs'; reads: them, for the
 * message), problem_type and tie_word_embeddings into h. */
int tfm_bert_heads_json(const tfm_json_doc *doc, const tfm_bert_arch *archs, const char *reads,
                        tfm_bert_heads *h, tfm_err *err);
/* An activation KEY (gelu, gelu_new, relu); def when absent (NULL: the key
 * is required). */
int tfm_bert_act(const tfm_json_doc *doc, const char *key, const char *def, tfm_act *act,
                 tfm_err *err);
/* The "task" JSON (tfm_convert_family.task) of the heads in c (classes,
 * tags, span, nsp), the labels from config.json's id2label. */
int tfm_bert_task_json(const tfm_safetensors *st, const tfm_model_keys *c, int regression,
                       tfm_buf *out, tfm_err *err);
/* A task head's Linear SRC ([K, n_embd], [K]) into DST (.weight, .bias)
 * with its rows in tfm's sorted order of config.json's labels. */
int tfm_bert_classifier(const tfm_hf_ckpt *b, const char *dst, const char *src, int K,
                        tfm_err *err);

/* pre (or "", tried second) when st has pre + "embeddings.word_embeddings.weight"
 * and config.json's model_type is type; else NULL. */
const char *tfm_bert_prefix(const tfm_safetensors *st, const char *pre, const char *type);

/* A BERT-shaped family's head tensors (names without .weight/.bias, outside
 * the base model's prefix; NULL: the family has no such head), which become
 * tfm's MLM head, pooler, classifier, tagger and span head. */
typedef struct tfm_bert_names {
    const char *what;        /* "DistilBERT", for messages */
    const char *mlm_dense, *mlm_norm, *mlm_bias; /* the MLM transform, the
                                                    decoder's bias */
    const char *mlm_decoder; /* its own weight when untied */
    const char *pooler;      /* the dense before the sequence classifier */
    int pooled_base;         /* 1: the pooler belongs to the base model (BERT's,
                                ALBERT's: kept without a classifier) */
    tfm_pool_act pooler_act;
    const char *classifier;  /* the sequence classifier on the pooler */
    const char *tagger;      /* the token classifier */
    const char *qa;          /* the span head */
} tfm_bert_names;
/* The heads st has, into c (the pooler's name with pre when pooled_base). */
int tfm_bert_names_config(const tfm_safetensors *st, const char *pre, const tfm_bert_names *n,
                          const tfm_bert_heads *h, tfm_model_keys *c, tfm_err *err);
/* The keys ELECTRA's and ALBERT's configs share with BertConfig
 * (hidden_size, num_attention_heads, num_hidden_layers, intermediate_size,
 * max_position_embeddings, type_vocab_size, vocab_size, the dropouts,
 * layer_norm_eps, hidden_act (act_def when absent), position_embedding_type
 * absolute) and embedding_size, as a post-LN encoder with segments, the
 * embedding norm and a factorised embedding into c. */
int tfm_bert_factorised_config(const tfm_json_doc *doc, const char *act_def, tfm_model_keys *c,
                               tfm_err *err);
/* The embeddings (word, position, token type, LayerNorm: E wide) under
 * b->pre + "embeddings." and, with emb_proj, its Linear proj ([C, E]). */
int tfm_bert_embeddings(const tfm_hf_ckpt *b, const char *proj, tfm_err *err);

/* One post-LN block's tensors, after its names' prefix (q, k, v, the
 * attention's output and norm, the feed-forward's two Linears, its norm). */
typedef struct tfm_bert_block_names {
    const char *q, *k, *v, *attn_out, *attn_norm, *fc, *fc_out, *out_norm;
} tfm_bert_block_names;
/* BERT's own: attention.self.query ... output.LayerNorm */
extern const tfm_bert_block_names tfm_bert_block_bert;
/* The block at src (a prefix: "encoder.layer.3.") into tfm's block l. */
int tfm_bert_block(const tfm_hf_ckpt *b, int l, const char *src, const tfm_bert_block_names *n,
                   tfm_err *err);
/* Their weights into b->m. */
int tfm_bert_names_weights(const tfm_hf_ckpt *b, const tfm_bert_names *n, tfm_err *err);

#endif
