/* HuggingFace ALBERT checkpoints (convert/convert.h): BERT's encoder
 * (convert/bert.h) under "albert.", its embeddings embedding_size wide and
 * projected by encoder.embedding_hidden_mapping_in (tfm's
 * model.embedding_size and emb_proj, at any width), and its cross-layer
 * sharing unrolled: HF's layer i runs group i / (num_hidden_layers /
 * num_hidden_groups), whose inner_group_num albert_layers follow each
 * other, so tfm's num_hidden_layers · inner_group_num blocks are copies of
 * the groups' weights (the same numbers; training them would untie them).
 * Each albert_layer: attention.query/key/value/dense/LayerNorm, ffn,
 * ffn_output, full_layer_layer_norm.  Heads: AlbertForMaskedLM's
 * predictions (dense to E, hidden_act, LayerNorm, decoder tied to the word
 * embeddings) as the MLM head, the pooler (albert.pooler, tanh) with
 * AlbertForSequenceClassification's classifier, AlbertForTokenClassification's
 * classifier as the tagger, AlbertForQuestionAnswering's qa_outputs.  The
 * tokenizer is tokenizer.json beside the file (AlbertTokenizer's
 * normalizers, text/unigram.h); a spiece.model alone is refused. */
#include "config.h"

#include "convert/bert.h"
#include "model/file.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const tfm_bert_arch albert_archs[] = {
    {"AlbertModel", TFM_BERT_ARCH_ANY},
    {"AlbertForMaskedLM", TFM_BERT_ARCH_ANY},
    {"AlbertForSequenceClassification", TFM_BERT_ARCH_SEQ},
    {"AlbertForTokenClassification", TFM_BERT_ARCH_TOK},
    {"AlbertForQuestionAnswering", TFM_BERT_ARCH_QA},
    {NULL, 0},
};
#define ALBERT_READS                                                                       \
    "AlbertModel, AlbertForMaskedLM, AlbertForSequenceClassification, "                    \
    "AlbertForTokenClassification and AlbertForQuestionAnswering"

static const tfm_bert_names albert_names = {
    .what = "ALBERT",
    .mlm_dense = "predictions.dense",
    .mlm_norm = "predictions.LayerNorm",
    .mlm_bias = "predictions",
    .mlm_decoder = "predictions.decoder",
    .pooler = "pooler",
    .pooled_base = 1,
    .pooler_act = TFM_POOL_TANH,
    .classifier = "classifier",
    .tagger = "classifier",
    .qa = "qa_outputs",
};

static const tfm_hf_key albert_keys[] = {
    {"model_type", HF_READ}, {"hidden_size", HF_READ}, {"embedding_size", HF_READ},
    {"num_attention_heads", HF_READ}, {"num_hidden_layers", HF_READ},
    {"num_hidden_groups", HF_READ}, {"inner_group_num", HF_READ},
    {"intermediate_size", HF_READ}, {"max_position_embeddings", HF_READ},
    {"type_vocab_size", HF_READ}, {"vocab_size", HF_READ}, {"hidden_dropout_prob", HF_READ},
    {"attention_probs_dropout_prob", HF_READ}, {"layer_norm_eps", HF_READ},
    {"hidden_act", HF_READ}, {"position_embedding_type", HF_READ},
    {"tie_word_embeddings", HF_READ},
    {"classifier_dropout_prob", HF_ANY}, {"eos_token_id", HF_ANY},
    {"is_encoder_decoder", HF_DEFAULT}, {NULL, 0},
};

static const char *albert_detect(const tfm_safetensors *st)
{
    return tfm_bert_prefix(st, "albert.", "albert");
}

/* config.json as c (its blocks unrolled); h: its heads; *groups and
 * *inner: num_hidden_groups and inner_group_num. */
static int albert_keys_of(const tfm_safetensors *st, const char *pre, tfm_model_keys *c,
                          tfm_bert_heads *h, int64_t *groups, int64_t *inner, tfm_err *err)
{
    char path[4200];
    tfm_hf_json_beside(st->name, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return tfm_err_set(err, "%s: no such file (a HuggingFace ALBERT checkpoint needs "
                                "the config.json beside it)", path);
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = -1;
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        tfm_hf_keys_check(&doc, albert_keys, "AlbertConfig", err) < 0 ||
        tfm_bert_factorised_config(&doc, "gelu_new", c, err) < 0 ||
        tfm_hf_int(&doc, "num_hidden_groups", 1, 1000, 1, groups, err) < 0 ||
        tfm_hf_int(&doc, "inner_group_num", 1, 1000, 1, inner, err) < 0 ||
        tfm_bert_heads_json(&doc, albert_archs, ALBERT_READS, h, err) < 0)
        goto out;
    if (c->n_layer % *groups) {
        const tfm_json *j = tfm_json_get(doc.root, "num_hidden_groups");
        tfm_err_at(err, path, j->line, j->col, "num_hidden_groups %lld does not divide "
                   "num_hidden_layers %lld (each group runs num_hidden_layers / "
                   "num_hidden_groups layers)", (long long)*groups, (long long)c->n_layer);
        goto out;
    }
    if (c->n_layer * *inner > 1000) {
        const tfm_json *j = tfm_json_get(doc.root, "inner_group_num");
        tfm_err_at(err, path, j->line, j->col, "num_hidden_layers x inner_group_num is more "
                   "than tfm's 1000 blocks");
        goto out;
    }
    c->n_layer *= *inner;
    if (tfm_bert_names_config(st, pre, &albert_names, h, c, err) < 0)
        goto out;
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

static int albert_config(const tfm_safetensors *st, const char *pre, tfm_model_keys *c,
                         tfm_model_config *g, int64_t *eos, tfm_err *err)
{
    tfm_bert_heads h;
    int64_t G, I;
    char path[4200];
    *eos = -1;
    if (albert_keys_of(st, pre, c, &h, &G, &I, err) < 0)
        return -1;
    tfm_hf_json_beside(st->name, "config.json", path, sizeof path);
    return tfm_model_config_from_keys(c, NULL, g, err) < 0 ? tfm_err_prefix(err, "%s", path)
                                                           : 0;
}

static int albert_weights(const tfm_hf_ckpt *b, tfm_err *err)
{
    static const tfm_bert_block_names names = {
        "attention.query", "attention.key", "attention.value", "attention.dense",
        "attention.LayerNorm", "ffn", "ffn_output", "full_layer_layer_norm",
    };
    tfm_model_keys c;
    tfm_bert_heads h;
    int64_t G, I;
    memset(&c, 0, sizeof c);
    if (albert_keys_of(b->st, b->pre, &c, &h, &G, &I, err) < 0 ||
        tfm_bert_embeddings(b, "encoder.embedding_hidden_mapping_in", err) < 0)
        return -1;
    int L = b->m->cfg.n_layer / (int)I, per = L / (int)G;
    char src[160];
    for (int l = 0; l < L; l++)
        for (int i = 0; i < (int)I; i++) {
            snprintf(src, sizeof src, "encoder.albert_layer_groups.%d.albert_layers.%d.",
                     l / per, i);
            if (tfm_bert_block(b, l * (int)I + i, src, &names, err) < 0)
                return -1;
        }
    snprintf(src, sizeof src, "%sencoder.albert_layer_groups.%d.albert_layers.0.ffn.weight",
             b->pre, (int)G);
    if (tfm_safetensors_find(b->st, src))
        return tfm_err_set(err, "%s: the checkpoint has a group %d (tensor '%s') but "
                                "config.json's num_hidden_groups is %d", b->st->name, (int)G,
                           src, (int)G);
    return tfm_bert_names_weights(b, &albert_names, err);
}

static int albert_task(const tfm_safetensors *st, const char *pre, tfm_buf *out, tfm_err *err)
{
    tfm_model_keys c;
    tfm_bert_heads h;
    int64_t G, I;
    memset(&c, 0, sizeof c);
    if (albert_keys_of(st, pre, &c, &h, &G, &I, err) < 0)
        return -1;
    return tfm_bert_task_json(st, &c, h.regression, out, err);
}

/* AlbertTokenizer's normalizers (quotes, NFKD, accents stripped,
 * lowercase) are in its tokenizer.json; a spiece.model alone has only
 * sentencepiece's, and would give other ids than HF's: refused. */
static int albert_tokenizer(const tfm_safetensors *st, tfm_tokenizer *tok, tfm_err *err)
{
    char tj[4200], sp[4200];
    (void)tok;
    tfm_hf_json_beside(st->name, "tokenizer.json", tj, sizeof tj);
    tfm_hf_json_beside(st->name, "spiece.model", sp, sizeof sp);
    if (access(tj, F_OK) != 0 && access(sp, F_OK) == 0)
        return tfm_err_set(err, "%s: ALBERT's tokenizer without a tokenizer.json beside it: "
                                "AlbertTokenizer lowercases and strips accents and quotes "
                                "before its sentencepiece model, which tfm reads from "
                                "tokenizer.json only (save_pretrained writes it)", sp);
    return 0;
}

static const char *const albert_types[] = {"albert", NULL};

const tfm_convert_family tfm_convert_albert = {
    .name = "albert",
    .id = TFM_HF_NONE, /* its module names are not BERT's: adapters keep tfm's */
    .reads = "ALBERT (albert)",
    .what = "ALBERT",
    .model_types = albert_types,
    .detect = albert_detect,
    .config = albert_config,
    .weights = albert_weights,
    .task = albert_task,
    .tokenizer = albert_tokenizer,
};
