/* HuggingFace ELECTRA checkpoints (convert/convert.h): BERT's encoder
 * (convert/bert.h) under "electra.", its embeddings embedding_size wide
 * and, when that differs from hidden_size, projected by embeddings_project
 * (tfm's model.embedding_size and emb_proj).  Heads: ElectraForMaskedLM's
 * generator (generator_predictions: dense to E, GELU, LayerNorm;
 * generator_lm_head tied to the word embeddings) as the MLM head,
 * ElectraForSequenceClassification's classifier.dense + GELU +
 * classifier.out_proj on the first token as the pooler (pooler_activation
 * gelu_exact) and classifier, ElectraForTokenClassification's classifier
 * as the tagger.  ElectraForPreTraining is read as its ElectraModel: the
 * discriminator's per-token head (discriminator_predictions) is no head
 * tfm has, and is left unread.  The tokenizer is BERT's WordPiece. */
#include "config.h"

#include "convert/bert.h"
#include "model/file.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const tfm_bert_arch electra_archs[] = {
    {"ElectraModel", TFM_BERT_ARCH_ANY},
    {"ElectraForPreTraining", TFM_BERT_ARCH_ANY},
    {"ElectraForMaskedLM", TFM_BERT_ARCH_ANY},
    {"ElectraForSequenceClassification", TFM_BERT_ARCH_SEQ},
    {"ElectraForTokenClassification", TFM_BERT_ARCH_TOK},
    {NULL, 0},
};
#define ELECTRA_READS                                                                      \
    "ElectraModel, ElectraForPreTraining (as its ElectraModel), ElectraForMaskedLM, "      \
    "ElectraForSequenceClassification and ElectraForTokenClassification"

static const tfm_bert_names electra_names = {
    .what = "ELECTRA",
    .mlm_dense = "generator_predictions.dense",
    .mlm_norm = "generator_predictions.LayerNorm",
    .mlm_bias = "generator_lm_head",
    .mlm_decoder = "generator_lm_head",
    .pooler = "classifier.dense",
    .pooler_act = TFM_POOL_GELU,
    .classifier = "classifier.out_proj",
    .tagger = "classifier",
};

static const tfm_hf_key electra_keys[] = {
    {"model_type", HF_READ}, {"hidden_size", HF_READ}, {"embedding_size", HF_READ},
    {"num_attention_heads", HF_READ}, {"num_hidden_layers", HF_READ},
    {"intermediate_size", HF_READ}, {"max_position_embeddings", HF_READ},
    {"type_vocab_size", HF_READ}, {"vocab_size", HF_READ}, {"hidden_dropout_prob", HF_READ},
    {"attention_probs_dropout_prob", HF_READ}, {"layer_norm_eps", HF_READ},
    {"hidden_act", HF_READ}, {"position_embedding_type", HF_READ},
    {"tie_word_embeddings", HF_READ},
    /* the multiple-choice head's summary, the heads' dropout in training */
    {"summary_type", HF_ANY}, {"summary_use_proj", HF_ANY}, {"summary_activation", HF_ANY},
    {"summary_last_dropout", HF_ANY}, {"classifier_dropout", HF_ANY},
    {"eos_token_id", HF_ANY}, {"is_decoder", HF_DEFAULT}, {"add_cross_attention", HF_DEFAULT},
    {"is_encoder_decoder", HF_DEFAULT}, {NULL, 0},
};

static const char *electra_detect(const tfm_safetensors *st)
{
    return tfm_bert_prefix(st, "electra.", "electra");
}

/* config.json as c; h: what it says of the heads */
static int electra_keys_of(const tfm_safetensors *st, const char *pre, tfm_model_keys *c,
                           tfm_bert_heads *h, tfm_err *err)
{
    char path[4200];
    tfm_hf_json_beside(st->name, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return tfm_err_set(err, "%s: no such file (a HuggingFace ELECTRA checkpoint needs "
                                "the config.json beside it)", path);
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = -1;
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        tfm_hf_keys_check(&doc, electra_keys, "ElectraConfig", err) < 0 ||
        tfm_bert_factorised_config(&doc, "gelu", c, err) < 0 ||
        tfm_bert_heads_json(&doc, electra_archs, ELECTRA_READS, h, err) < 0)
        goto out;
    /* without embeddings_project the embeddings are hidden_size wide */
    if (c->embedding_size == c->n_embd)
        c->embedding_size = 0;
    if (tfm_bert_names_config(st, pre, &electra_names, h, c, err) < 0)
        goto out;
    if (c->mlm_head && c->activation != TFM_ACT_GELU_EXACT) {
        tfm_err_set(err, "%s: ELECTRA's generator head applies gelu whatever hidden_act says, "
                         "and tfm's MLM head applies hidden_act: a hidden_act other than "
                         "gelu is not supported with generator_predictions.*", path);
        goto out;
    }
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

static int electra_config(const tfm_safetensors *st, const char *pre, tfm_model_keys *c,
                          tfm_model_config *g, int64_t *eos, tfm_err *err)
{
    tfm_bert_heads h;
    char path[4200];
    *eos = -1;
    if (electra_keys_of(st, pre, c, &h, err) < 0)
        return -1;
    tfm_hf_json_beside(st->name, "config.json", path, sizeof path);
    return tfm_model_config_from_keys(c, NULL, g, err) < 0 ? tfm_err_prefix(err, "%s", path)
                                                           : 0;
}

static int electra_weights(const tfm_hf_ckpt *b, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    if (tfm_bert_embeddings(b, "embeddings_project", err) < 0)
        return -1;
    char src[128];
    for (int l = 0; l < g->n_layer; l++) {
        snprintf(src, sizeof src, "encoder.layer.%d.", l);
        if (tfm_bert_block(b, l, src, &tfm_bert_block_bert, err) < 0)
            return -1;
    }
    snprintf(src, sizeof src, "%sencoder.layer.%d.attention.self.query.weight", b->pre,
             g->n_layer);
    if (tfm_safetensors_find(b->st, src))
        return tfm_err_set(err, "%s: the checkpoint has a layer %d (tensor '%s') but "
                                "config.json's num_hidden_layers is %d", b->st->name,
                           g->n_layer, src, g->n_layer);
    return tfm_bert_names_weights(b, &electra_names, err);
}

static int electra_task(const tfm_safetensors *st, const char *pre, tfm_buf *out, tfm_err *err)
{
    tfm_model_keys c;
    tfm_bert_heads h;
    memset(&c, 0, sizeof c);
    if (electra_keys_of(st, pre, &c, &h, err) < 0)
        return -1;
    return tfm_bert_task_json(st, &c, h.regression, out, err);
}

static const char *const electra_types[] = {"electra", NULL};

const tfm_convert_family tfm_convert_electra = {
    .name = "electra",
    .id = TFM_HF_NONE, /* its module names are not BERT's: adapters keep tfm's */
    .reads = "ELECTRA (electra)",
    .what = "ELECTRA",
    .model_types = electra_types,
    .detect = electra_detect,
    .config = electra_config,
    .weights = electra_weights,
    .task = electra_task,
};
