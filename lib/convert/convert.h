/* HuggingFace checkpoints as tfm models: one converter per family, in a
 * registry (convert.c), each in its own file (gpt2.c, bert.c, roberta.c,
 * distilbert.c, electra.c, albert.c, t5.c, bart.c, llama.c) over the
 * helpers of convert/hf.h (and the BERT-shaped ones over convert/bert.h).  A new family is one file and
 * one line of the registry.
 *
 *     const char *pre;
 *     const tfm_convert_family *f = tfm_convert_detect(&st, &pre);
 *     if (f) tfm_convert_load(f, &st, pre, &keys, &m, &tok, &eos, &err);
 *
 * (lm/lm.h opens files and folders through this; programs use lm/.)
 *
 * What each family reads, as the file or as the folder holding
 * model.safetensors and config.json (no tfm metadata; HF's "format": "pt"
 * is allowed):
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
 *     (lm/lm.h tfm_lm_file_meta) made from config.json.
 *     The tokenizer is tokenizer.json beside the file,
 *     else vocab.txt (uncased WordPiece).
 *   RoBERTa and XLM-RoBERTa (roberta.c: model_type roberta, xlm-roberta;
 *     RobertaModel, RobertaForMaskedLM, RobertaForSequenceClassification
 *     and their XLMRoberta twins): BERT's encoder with positions from
 *     pad_token_id + 1, the one token type folded into them, lm_head.* as
 *     the MLM head, classifier.dense/out_proj as the pooler and classifier,
 *     the tokenizer.json's <s> ... </s> wrap.  BERT's family takes
 *     model_type bert (or none).
 *   DistilBERT, ELECTRA and ALBERT (distilbert.c, electra.c, albert.c say
 *     what they read): BERT's encoder under their names and config keys,
 *     ELECTRA's and ALBERT's factorised embedding as model.embedding_size,
 *     ALBERT's shared layers copied into each block; their heads through
 *     convert/bert.h's tfm_bert_names.  CamemBERT, RoFormer... are refused.
 *   T5 (T5ForConditionalGeneration, t5 or mt5: t5-small's layout, v1.1 and
 *     flan-t5's): an encoder-decoder from config.json (required: d_model,
 *     d_kv, d_ff, num_layers, num_heads, vocab_size; HF's defaults for
 *     num_decoder_layers, relative_attention_num_buckets (32) and
 *     _max_distance (128), feed_forward_proj (relu; also gelu, gelu_new,
 *     gated-gelu, gated-silu), tie_word_embeddings (true),
 *     layer_norm_epsilon (1e-6), decoder_start_token_id (0), eos_token_id
 *     (1), n_positions (512, as block_size)); num_heads·d_kv must equal
 *     d_model.  Weights copied (t5.c says how); the end-of-text id is
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
 *   Llama, Qwen2 and Mistral (llama.c says what it reads): decoders with
 *     RMSNorm, RoPE, SwiGLU, grouped-query attention and a sliding window;
 *     weights copied; the tokenizer is tokenizer.json beside the file
 *     (Llama 3's and Qwen2's byte-level BPE, Llama 2's sentencepiece BPE,
 *     read as transformers' LlamaTokenizer class reads it), its template's
 *     first token (<|begin_of_text|>, <s>) put before prompts and texts.
 *   Every config.json's dropout rates become the model.*dropout keys, HF's
 *     defaults when absent (T5 dropout_rate: dropout, ffn_ and final_;
 *     BART dropout, attention_dropout, activation_dropout; BERT
 *     hidden_dropout_prob, attention_probs_dropout_prob; GPT-2 resid_pdrop,
 *     attn_pdrop, embd_pdrop), and forced_eos_token_id model.forced_eos
 *     (T5, BART, GPT-2).
 * A folder whose config.json names another architecture is refused with
 * one message naming the file, the architecture and the families above. */
#ifndef TFM_CONVERT_CONVERT_H
#define TFM_CONVERT_CONVERT_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "convert/hf.h"
#include "io/safetensors.h"
#include "model/config_keys.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

typedef struct tfm_convert_family {
    const char *name;               /* "bert" */
    tfm_hf_family id;               /* the naming its LoRA adapters carry */
    const char *reads;              /* for messages: "BERT (model_type bert)" */
    const char *what;               /* "BERT": in messages about its tensors */
    const char *const *model_types; /* config.json's model_type values it reads,
                                       NULL-terminated */
    /* The prefix of st's names when st is this family's checkpoint (by its
     * tensor names), else NULL. */
    const char *(*detect)(const tfm_safetensors *st);
    /* The config mapper: config.json beside st (and st's tensors) as tfm's
     * model section c and the description g built from it; *eos the
     * end-of-text id config.json gives (-1: the tokenizer's). */
    int (*config)(const tfm_safetensors *st, const char *pre, tfm_model_keys *c,
                  tfm_model_config *g, int64_t *eos, tfm_err *err);
    /* The weight loader: st's tensors into b->m, built from g. */
    int (*weights)(const tfm_hf_ckpt *b, tfm_err *err);
    /* A fine-tuned checkpoint's "task" (JSON, as tfm's files carry it) into
     * out: 1, or 0 when it has no task head; NULL: the family has none. */
    int (*task)(const tfm_safetensors *st, const char *pre, tfm_buf *out, tfm_err *err);
    /* What the tokenizer beside st needs of the family (RoBERTa's <s> ...
     * </s> wrap, from its post-processor); NULL: nothing. */
    int (*tokenizer)(const tfm_safetensors *st, tfm_tokenizer *tok, tfm_err *err);
    int t5_tokenizer; /* tfm_hf_tokenizer_beside's T5 defaults */
    int in_place;     /* tfm's names and layout: tfm_lm binds the mapped tensors */
} tfm_convert_family;

/* The families, in the order detection tries them; NULL-terminated. */
extern const tfm_convert_family *const tfm_convert_families[];

/* The family of an open checkpoint and its names' prefix (*pre), or NULL
 * (for a tfm file too). */
const tfm_convert_family *tfm_convert_detect(const tfm_safetensors *st, const char **pre);

/* Builds *m (and the model section c) from st, an open checkpoint of
 * family f whose tensors are F32 (model/quant.h tfm_quant_widen); the
 * tokenizer beside it when tok is not NULL; *eos (may be NULL) as the
 * config mapper's.  On failure nothing is held. */
int tfm_convert_load(const tfm_convert_family *f, const tfm_safetensors *st, const char *pre,
                     tfm_model_keys *c, tfm_model *m, tfm_tokenizer **tok, int64_t *eos,
                     tfm_err *err);

/* The tokenizer beside st as family f reads it (tfm_hf_tokenizer_beside,
 * then f's tokenizer hook); *tok NULL when there is none. */
int tfm_convert_tokenizer(const tfm_convert_family *f, const tfm_safetensors *st,
                          int vocab_size, tfm_tokenizer **tok, tfm_err *err);

/* config.json beside a checkpoint that no converter recognised
 * (model_path: its safetensors file): -1 and an error naming the file, the
 * architecture it says and the families tfm reads.  0 (nothing set) when
 * there is no config.json, or it names a family tfm reads (the caller's
 * message about the tensors stands). */
int tfm_convert_unread(const char *model_path, tfm_err *err);

/* "GPT-2 (...), BERT (...) ... and BART (bart)": what tfm reads, for
 * messages, into buf. */
const char *tfm_convert_reads(char *buf, size_t n);

#endif
