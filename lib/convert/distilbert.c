/* HuggingFace DistilBERT checkpoints (convert/convert.h): BERT's post-LN
 * encoder (convert/bert.h) under DistilBertConfig's keys (dim, n_layers,
 * n_heads, hidden_dim, activation) and its names (transformer.layer.N.
 * attention.q_lin ..., sa_layer_norm, ffn.lin1/lin2, output_layer_norm),
 * without token types, every LayerNorm at eps 1e-12.  sinusoidal_pos_embds
 * needs nothing: the table is in the file either way.  Heads: the MLM
 * head (vocab_transform, vocab_layer_norm, vocab_projector),
 * DistilBertForSequenceClassification's pre_classifier + ReLU as tfm's
 * pooler (pooler_activation relu) before classifier, the tagger
 * (classifier) and the span head (qa_outputs).  The tokenizer is BERT's
 * WordPiece (tokenizer.json, else vocab.txt). */
#include "config.h"

#include "convert/bert.h"
#include "model/file.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const tfm_bert_arch distil_archs[] = {
    {"DistilBertModel", TFM_BERT_ARCH_ANY},
    {"DistilBertForMaskedLM", TFM_BERT_ARCH_ANY},
    {"DistilBertForSequenceClassification", TFM_BERT_ARCH_SEQ},
    {"DistilBertForTokenClassification", TFM_BERT_ARCH_TOK},
    {"DistilBertForQuestionAnswering", TFM_BERT_ARCH_QA},
    {NULL, 0},
};
#define DISTIL_READS                                                                       \
    "DistilBertModel, DistilBertForMaskedLM, DistilBertForSequenceClassification, "        \
    "DistilBertForTokenClassification and DistilBertForQuestionAnswering"

static const tfm_bert_names distil_names = {
    .what = "DistilBERT",
    .mlm_dense = "vocab_transform",
    .mlm_norm = "vocab_layer_norm",
    .mlm_bias = "vocab_projector",
    .mlm_decoder = "vocab_projector",
    .pooler = "pre_classifier",
    .pooler_act = TFM_POOL_RELU,
    .classifier = "classifier",
    .tagger = "classifier",
    .qa = "qa_outputs",
};

static const tfm_hf_key distil_keys[] = {
    {"model_type", HF_READ}, {"dim", HF_READ}, {"n_heads", HF_READ}, {"n_layers", HF_READ},
    {"hidden_dim", HF_READ}, {"max_position_embeddings", HF_READ}, {"vocab_size", HF_READ},
    {"dropout", HF_READ}, {"attention_dropout", HF_READ}, {"activation", HF_READ},
    {"tie_word_embeddings", HF_READ},
    /* the position table is stored whichever made it; the heads' dropouts
     * act only in training */
    {"sinusoidal_pos_embds", HF_ANY}, {"qa_dropout", HF_ANY}, {"seq_classif_dropout", HF_ANY},
    {"eos_token_id", HF_ANY}, {"is_encoder_decoder", HF_DEFAULT}, {NULL, 0},
};

static const char *distil_detect(const tfm_safetensors *st)
{
    return tfm_bert_prefix(st, "distilbert.", "distilbert");
}

/* config.json as c; h: what it says of the heads */
static int distil_keys_of(const tfm_safetensors *st, const char *pre, tfm_model_keys *c,
                          tfm_bert_heads *h, tfm_err *err)
{
    char path[4200];
    tfm_hf_json_beside(st->name, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return tfm_err_set(err, "%s: no such file (a HuggingFace DistilBERT checkpoint needs "
                                "the config.json beside it)", path);
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int64_t C, NH, L, F, P, V;
    double drop, attn;
    tfm_act act;
    int rc = -1;
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        tfm_hf_keys_check(&doc, distil_keys, "DistilBertConfig", err) < 0 ||
        tfm_hf_int(&doc, "dim", 1, 65536, 768, &C, err) < 0 ||
        tfm_hf_int(&doc, "n_heads", 1, 1024, 12, &NH, err) < 0 ||
        tfm_hf_int(&doc, "n_layers", 1, 1000, 6, &L, err) < 0 ||
        tfm_hf_int(&doc, "hidden_dim", 1, 1 << 20, 3072, &F, err) < 0 ||
        tfm_hf_int(&doc, "max_position_embeddings", 1, 1 << 20, 512, &P, err) < 0 ||
        tfm_hf_int(&doc, "vocab_size", 1, 1 << 24, 30522, &V, err) < 0 ||
        tfm_hf_prob(&doc, "dropout", 0.1, &drop, err) < 0 ||
        tfm_hf_prob(&doc, "attention_dropout", 0.1, &attn, err) < 0 ||
        tfm_bert_act(&doc, "activation", "gelu", &act, err) < 0 ||
        tfm_bert_heads_json(&doc, distil_archs, DISTIL_READS, h, err) < 0)
        goto out;
    c->kind = TFM_KIND_ENCODER;
    c->positions = TFM_POS_LEARNED;
    c->norm = TFM_LN_POST;
    c->activation = act;
    c->ln_eps = 1e-12; /* DistilBERT's every LayerNorm */
    c->n_layer = L;
    c->n_head = NH;
    c->n_embd = C;
    c->d_ff = F;
    c->block_size = P;
    c->segments = 0;
    c->vocab_size = V;
    c->emb_norm = 1;
    c->bias = 1;
    c->dropout = drop;
    c->attn_dropout = attn;
    rc = tfm_bert_names_config(st, pre, &distil_names, h, c, err);
out:
    tfm_json_doc_free(&doc);
    return rc;
}

static int distil_config(const tfm_safetensors *st, const char *pre, tfm_model_keys *c,
                         tfm_model_config *g, int64_t *eos, tfm_err *err)
{
    tfm_bert_heads h;
    char path[4200];
    *eos = -1;
    if (distil_keys_of(st, pre, c, &h, err) < 0)
        return -1;
    tfm_hf_json_beside(st->name, "config.json", path, sizeof path);
    return tfm_model_config_from_keys(c, NULL, g, err) < 0 ? tfm_err_prefix(err, "%s", path)
                                                           : 0;
}

static int distil_weights(const tfm_hf_ckpt *b, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = (size_t)g->n_embd;
    if (tfm_hf_copy(b, "wte.weight", 0, "embeddings.word_embeddings.weight", NULL,
                    (size_t)g->vocab_size, C, err) < 0 ||
        tfm_hf_copy(b, "wpe.weight", 0, "embeddings.position_embeddings.weight", NULL,
                    (size_t)g->block_size, C, err) < 0 ||
        tfm_hf_norm(b, "ln_e", 0, "embeddings.LayerNorm", C, err) < 0)
        return -1;
    static const tfm_bert_block_names names = {
        "attention.q_lin", "attention.k_lin", "attention.v_lin", "attention.out_lin",
        "sa_layer_norm", "ffn.lin1", "ffn.lin2", "output_layer_norm",
    };
    char src[128];
    for (int l = 0; l < g->n_layer; l++) {
        snprintf(src, sizeof src, "transformer.layer.%d.", l);
        if (tfm_bert_block(b, l, src, &names, err) < 0)
            return -1;
    }
    snprintf(src, sizeof src, "%stransformer.layer.%d.attention.q_lin.weight", b->pre,
             g->n_layer);
    if (tfm_safetensors_find(b->st, src))
        return tfm_err_set(err, "%s: the checkpoint has a layer %d (tensor '%s') but "
                                "config.json's n_layers is %d", b->st->name, g->n_layer, src,
                           g->n_layer);
    return tfm_bert_names_weights(b, &distil_names, err);
}

static int distil_task(const tfm_safetensors *st, const char *pre, tfm_buf *out, tfm_err *err)
{
    tfm_model_keys c;
    tfm_bert_heads h;
    memset(&c, 0, sizeof c);
    if (distil_keys_of(st, pre, &c, &h, err) < 0)
        return -1;
    return tfm_bert_task_json(st, &c, h.regression, out, err);
}

static const char *const distil_types[] = {"distilbert", NULL};

const tfm_convert_family tfm_convert_distilbert = {
    .name = "distilbert",
    .id = TFM_HF_NONE, /* its module names are not BERT's: adapters keep tfm's */
    .reads = "DistilBERT (distilbert)",
    .what = "DistilBERT",
    .model_types = distil_types,
    .detect = distil_detect,
    .config = distil_config,
    .weights = distil_weights,
    .task = distil_task,
};
