/* HuggingFace BERT checkpoints (convert/convert.h). */
#include "config.h"

#include "convert/bert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/file.h"

/* A BertModel / BertForPreTraining / BertForMaskedLM safetensors file as
 * published (names with or without "bert."; LayerNorm.weight/bias or the
 * old LayerNorm.gamma/beta) and the config.json beside it become tfm's
 * encoder (model/transformer.h): post-LN blocks, exact GELU, learned
 * positions (max_position_embeddings rows), segments = type_vocab_size,
 * the embedding LayerNorm, biases, and the LM head tied to the word
 * embeddings.  HF stores each Linear [out, in] and q, k, v apart; tfm's
 * matrices are [in, out] with q, k, v side by side in c_attn, so the
 * weights are copied into the model's layout rather than mapped in place.
 * The heads present are loaded as tfm's (model/transformer.h): the MLM
 * head (cls.predictions.*, its decoder tied to the word embeddings), the
 * pooler (bert.pooler.dense) and the next-sentence head
 * (cls.seq_relationship, kept only with the pooler it reads); buffers such
 * as embeddings.position_ids are ignored. */

/* What tells the kinds apart: model_type, the prefix of the heads
 * models' names, and the architectures tfm reads. */
static const struct bert_layout {
    const char *what;  /* for messages */
    const char *prefix;
    const char *archs; /* for messages */
} layouts[] = {
    [TFM_BERT] = {"BERT", "bert.",
                  "BertModel, BertForPreTraining, BertForMaskedLM, "
                  "BertForNextSentencePrediction, BertForSequenceClassification, "
                  "BertForTokenClassification and BertForQuestionAnswering"},
    [TFM_BERT_ROBERTA] = {"RoBERTa", "roberta.",
                          "RobertaModel, RobertaForMaskedLM, RobertaForSequenceClassification, "
                          "XLMRobertaModel, XLMRobertaForMaskedLM and "
                          "XLMRobertaForSequenceClassification"},
};

/* model_type: BERT's absent (old files) or "bert"; RoBERTa's "roberta" or
 * "xlm-roberta".  Any other is no family's here: its layout differs in
 * ways these names would not show (distilbert.c, electra.c, albert.c read
 * theirs; tfm_convert_unread refuses the rest). */
static int bert_type_is(tfm_bert_kind kind, const char *type)
{
    if (kind == TFM_BERT)
        return !*type || !strcmp(type, "bert");
    return !strcmp(type, "roberta") || !strcmp(type, "xlm-roberta");
}

const char *tfm_bert_detect(const tfm_safetensors *st, tfm_bert_kind kind)
{
    if (tfm_hf_format(st))
        return NULL;
    char full[96];
    snprintf(full, sizeof full, "%sembeddings.word_embeddings.weight", layouts[kind].prefix);
    const char *pre = tfm_safetensors_find(st, full) ? layouts[kind].prefix
                      : tfm_safetensors_find(st, "embeddings.word_embeddings.weight") ? ""
                                                                                        : NULL;
    char type[64];
    tfm_hf_model_type(st->name, type, sizeof type);
    return pre && bert_type_is(kind, type) ? pre : NULL;
}

static const char *bert_prefix(const tfm_safetensors *st)
{
    return tfm_bert_detect(st, TFM_BERT);
}

static const tfm_hf_key hf_bert_keys[] = {
    {"model_type", HF_READ}, {"hidden_size", HF_READ}, {"num_attention_heads", HF_READ},
    {"num_hidden_layers", HF_READ}, {"intermediate_size", HF_READ},
    {"max_position_embeddings", HF_READ}, {"type_vocab_size", HF_READ},
    {"vocab_size", HF_READ}, {"hidden_dropout_prob", HF_READ},
    {"attention_probs_dropout_prob", HF_READ}, {"layer_norm_eps", HF_READ},
    {"hidden_act", HF_READ}, {"position_embedding_type", HF_READ}, {"is_decoder", HF_READ},
    {"tie_word_embeddings", HF_READ},
    /* old Google-release keys HF never read */
    {"directionality", HF_ANY}, {"pooler_fc_size", HF_ANY},
    {"pooler_num_attention_heads", HF_ANY}, {"pooler_num_fc_layers", HF_ANY},
    {"pooler_size_per_head", HF_ANY}, {"pooler_type", HF_ANY}, {"eos_token_id", HF_ANY},
    {"decoder_start_token_id", HF_ANY}, {"is_encoder_decoder", HF_DEFAULT},
    {"forced_bos_token_id", HF_ANY}, {"forced_eos_token_id", HF_ANY}, {NULL, 0},
};

int tfm_bert_act(const tfm_json_doc *doc, const char *key, const char *def, tfm_act *act,
                 tfm_err *err)
{
    const tfm_json *j = tfm_json_get(doc->root, key);
    const char *s = def;
    if ((j || !def) && tfm_json_expect(doc, j, TFM_JSON_STRING, key, err) < 0)
        return -1;
    if (j)
        s = j->str;
    if (!strcmp(s, "gelu")) {
        *act = TFM_ACT_GELU_EXACT;
    } else if (!strcmp(s, "gelu_new") || !strcmp(s, "gelu_pytorch_tanh")) {
        *act = TFM_ACT_GELU_TANH; /* the tanh approximation */
    } else if (!strcmp(s, "relu")) {
        *act = TFM_ACT_RELU;
    } else {
        return tfm_err_at(err, doc->name, j->line, j->col, "%s '%s' is not supported (tfm has "
                          "gelu, gelu_new and relu)", key, s);
    }
    return 0;
}

static int bert_config_int(const tfm_json_doc *doc, const char *key, int64_t min, int64_t max,
                           int64_t *out, tfm_err *err)
{
    return tfm_json_get_int(doc, tfm_json_get(doc->root, key), key, min, max, out, err);
}

typedef tfm_bert_heads bert_heads;
enum {
    BERT_ARCH_ANY = TFM_BERT_ARCH_ANY, BERT_ARCH_SEQ = TFM_BERT_ARCH_SEQ,
    BERT_ARCH_TOK = TFM_BERT_ARCH_TOK, BERT_ARCH_QA = TFM_BERT_ARCH_QA
};

/* The architectures tfm reads, and the task head each has. */
static const tfm_bert_arch bert_archs[][8] = {
    [TFM_BERT] = {{"BertModel", BERT_ARCH_ANY},
                  {"BertForPreTraining", BERT_ARCH_ANY},
                  {"BertForMaskedLM", BERT_ARCH_ANY},
                  {"BertForNextSentencePrediction", BERT_ARCH_ANY},
                  {"BertForSequenceClassification", BERT_ARCH_SEQ},
                  {"BertForTokenClassification", BERT_ARCH_TOK},
                  {"BertForQuestionAnswering", BERT_ARCH_QA},
                  {NULL, 0}},
    /* RobertaForSequenceClassification's head is dense, tanh, out_proj on
     * <s>: tfm's pooler and classifier; its token and span heads are not
     * read (yet) */
    [TFM_BERT_ROBERTA] = {{"RobertaModel", BERT_ARCH_ANY},
                          {"RobertaForMaskedLM", BERT_ARCH_ANY},
                          {"RobertaForSequenceClassification", BERT_ARCH_SEQ},
                          {"XLMRobertaModel", BERT_ARCH_ANY},
                          {"XLMRobertaForMaskedLM", BERT_ARCH_ANY},
                          {"XLMRobertaForSequenceClassification", BERT_ARCH_SEQ},
                          {NULL, 0}},
};

int tfm_bert_heads_json(const tfm_json_doc *doc, const tfm_bert_arch *archs, const char *reads,
                        tfm_bert_heads *h, tfm_err *err)
{
    memset(h, 0, sizeof *h);
    h->regression = -1;
    const tfm_json *a = tfm_json_get(doc->root, "architectures");
    for (size_t i = 0; a && a->type == TFM_JSON_ARRAY && i < a->n; i++) {
        const tfm_json *n = a->items[i];
        size_t k = 0;
        while (archs[k].name && !(n->type == TFM_JSON_STRING && !strcmp(n->str, archs[k].name)))
            k++;
        if (!archs[k].name)
            return tfm_err_at(err, doc->name, n->line, n->col, "architectures: '%s' is not "
                              "supported (tfm reads %s)", n->str ? n->str : "", reads);
        if (archs[k].arch)
            h->arch = archs[k].arch;
    }
    const tfm_json *p = tfm_json_get(doc->root, "problem_type");
    if (p && p->type != TFM_JSON_NULL) {
        if (p->type == TFM_JSON_STRING && !strcmp(p->str, "regression"))
            h->regression = 1;
        else if (p->type == TFM_JSON_STRING && !strcmp(p->str, "single_label_classification"))
            h->regression = 0;
        else
            return tfm_err_at(err, doc->name, p->line, p->col, "problem_type '%s' is not "
                              "supported (tfm's classifier is single_label_classification or "
                              "regression)", p->str ? p->str : "");
    }
    return tfm_hf_bool(doc, "tie_word_embeddings", 1, &h->tie, err);
}

/* config.json beside the checkpoint as the model section c (h: what it
 * says of the heads; NULL: not wanted). */
static int bert_config(const char *model_path, tfm_bert_kind kind, tfm_model_keys *c,
                       bert_heads *h, tfm_err *err)
{
    bert_heads h0;
    if (!h)
        h = &h0;
    char path[4200];
    tfm_hf_json_beside(model_path, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return tfm_err_set(err, "%s: no such file (a HuggingFace %s checkpoint needs "
                                "the config.json beside it)", path, layouts[kind].what);
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = -1;
    int64_t C, NH, L, F, P, S, V, pad = 0;
    double drop, attn_drop;
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        tfm_hf_keys_check(&doc, hf_bert_keys, kind ? "RobertaConfig" : "BertConfig", err) < 0 ||
        bert_config_int(&doc, "hidden_size", 1, 65536, &C, err) < 0 ||
        bert_config_int(&doc, "num_attention_heads", 1, 1024, &NH, err) < 0 ||
        bert_config_int(&doc, "num_hidden_layers", 1, 1000, &L, err) < 0 ||
        bert_config_int(&doc, "intermediate_size", 1, 1 << 20, &F, err) < 0 ||
        bert_config_int(&doc, "max_position_embeddings", 1, 1 << 20, &P, err) < 0 ||
        bert_config_int(&doc, "type_vocab_size", 1, 1024, &S, err) < 0 ||
        bert_config_int(&doc, "vocab_size", 1, 1 << 24, &V, err) < 0 ||
        tfm_hf_prob(&doc, "hidden_dropout_prob", 0.1, &drop, err) < 0 ||
        tfm_hf_prob(&doc, "attention_probs_dropout_prob", 0.1, &attn_drop, err) < 0 ||
        tfm_bert_heads_json(&doc, bert_archs[kind], layouts[kind].archs, h, err) < 0 ||
        (kind == TFM_BERT_ROBERTA &&
         tfm_hf_int(&doc, "pad_token_id", 0, V - 1, 1, &pad, err) < 0))
        goto out;
    const tfm_json *j = tfm_json_get(doc.root, "layer_norm_eps");
    if (tfm_json_expect(&doc, j, TFM_JSON_NUMBER, "layer_norm_eps", err) < 0)
        goto out;
    if (!(j->num >= 1e-12 && j->num < 1)) {
        tfm_err_at(err, path, j->line, j->col, "layer_norm_eps must be in [1e-12, 1), not %s",
                   j->str);
        goto out;
    }
    double eps = j->num;
    tfm_act act;
    if (tfm_bert_act(&doc, "hidden_act", NULL, &act, err) < 0)
        goto out;
    j = tfm_json_get(doc.root, "model_type");
    if ((j || kind) && !(j && j->type == TFM_JSON_STRING && bert_type_is(kind, j->str))) {
        tfm_err_at(err, path, j ? j->line : 1, j ? j->col : 1, "model_type '%s' is not "
                   "supported here (tfm reads %s's layout)", j && j->str ? j->str : "",
                   kind ? "roberta" : "bert");
        goto out;
    }
    if (kind == TFM_BERT_ROBERTA) {
        /* RoBERTa numbers positions from padding_idx + 1 (HF's
         * create_position_ids_from_input_ids): the rows before are never
         * read, and the one token type is folded into the positions */
        if (P <= pad + 1) {
            j = tfm_json_get(doc.root, "max_position_embeddings");
            tfm_err_at(err, path, j->line, j->col, "max_position_embeddings %lld leaves no "
                       "position after pad_token_id %lld + 1 (RoBERTa's first position)",
                       (long long)P, (long long)pad);
            goto out;
        }
        if (S != 1) {
            j = tfm_json_get(doc.root, "type_vocab_size");
            tfm_err_at(err, path, j->line, j->col, "type_vocab_size %lld is not supported for "
                       "RoBERTa (tfm reads its one token type)", (long long)S);
            goto out;
        }
        P -= pad + 1;
        S = 0;
    }
    j = tfm_json_get(doc.root, "position_embedding_type");
    if (j && !(j->type == TFM_JSON_STRING && !strcmp(j->str, "absolute"))) {
        tfm_err_at(err, path, j->line, j->col, "position_embedding_type '%s' is not supported "
                   "(only absolute)", j->str);
        goto out;
    }
    j = tfm_json_get(doc.root, "is_decoder");
    if (j && j->type == TFM_JSON_BOOL && j->boolean) {
        tfm_err_at(err, path, j->line, j->col, "is_decoder true (a causal %s) is not "
                   "supported: tfm reads it as an encoder", layouts[kind].what);
        goto out;
    }
    c->kind = TFM_KIND_ENCODER;
    c->positions = TFM_POS_LEARNED;
    c->norm = TFM_LN_POST;
    c->activation = act;
    c->ln_eps = eps;
    c->n_layer = L;
    c->n_head = NH;
    c->n_embd = C;
    c->d_ff = F;
    c->block_size = P;
    c->segments = S;
    c->vocab_size = V;
    c->emb_norm = 1;
    c->tie_embeddings = 1;
    c->bias = 1;
    /* BertConfig's rates: hidden_dropout_prob on the embeddings and each
     * residual branch, attention_probs_dropout_prob on the attention
     * weights */
    c->dropout = drop;
    c->attn_dropout = attn_drop;
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}


/* RoBERTa's position table: rows pad_token_id + 1 on (the rows before
 * are never read, as BART's 2), plus its one token type's row, which HF
 * adds to every token. */
static int roberta_positions(const tfm_hf_ckpt *b, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = (size_t)g->n_embd, P = (size_t)g->block_size;
    char cfg[4200];
    tfm_hf_json_beside(b->st->name, "config.json", cfg, sizeof cfg);
    tfm_json_doc doc;
    int64_t pad;
    if (tfm_json_parse_file(&doc, cfg, 0, err) < 0)
        return -1;
    int rc = tfm_hf_int(&doc, "pad_token_id", 0, g->vocab_size - 1, 1, &pad, err);
    tfm_json_doc_free(&doc);
    if (rc < 0)
        return -1;
    size_t off = (size_t)pad + 1;
    const float *pos = tfm_hf_tensor(b, "embeddings.position_embeddings.weight", NULL, P + off,
                                     C, err);
    const float *type = pos ? tfm_hf_tensor(b, "embeddings.token_type_embeddings.weight", NULL,
                                            1, C, err)
                            : NULL;
    if (!type)
        return -1;
    float *wpe = tfm_hf_dst(b, "wpe.weight", 0);
    for (size_t p = 0; p < P; p++)
        for (size_t i = 0; i < C; i++)
            wpe[p * C + i] = pos[(p + off) * C + i] + type[i];
    return 0;
}

static int bert_weights(const tfm_hf_ckpt *b, tfm_bert_kind kind, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = (size_t)g->n_embd;
    if (tfm_hf_copy(b, "wte.weight", 0, "embeddings.word_embeddings.weight", NULL,
                  (size_t)g->vocab_size, C, err) < 0 ||
        (kind == TFM_BERT_ROBERTA
             ? roberta_positions(b, err) < 0
             : tfm_hf_copy(b, "wpe.weight", 0, "embeddings.position_embeddings.weight", NULL,
                           (size_t)g->block_size, C, err) < 0 ||
                   tfm_hf_copy(b, "wse.weight", 0, "embeddings.token_type_embeddings.weight",
                               NULL, (size_t)g->n_segments, C, err) < 0) ||
        tfm_hf_norm(b, "ln_e", 0, "embeddings.LayerNorm", C, err) < 0)
        return -1;
    char src[128];
    for (int l = 0; l < g->n_layer; l++) {
        snprintf(src, sizeof src, "encoder.layer.%d.", l);
        if (tfm_bert_block(b, l, src, &tfm_bert_block_bert, err) < 0)
            return -1;
    }
    /* more layers than config.json says: the wrong config.json */
    snprintf(src, sizeof src, "%sencoder.layer.%d.attention.self.query.weight", b->pre,
             g->n_layer);
    if (tfm_safetensors_find(b->st, src))
        return tfm_err_set(err, "%s: the checkpoint has a layer %d (tensor '%s') but "
                                "config.json's num_hidden_layers is %d",
                           b->st->name, g->n_layer, src, g->n_layer);
    return 0;
}

/* The heads a BERT checkpoint has, into the model section c: the MLM
 * head, the pooler, NSP, and a task head: classifier.* is
 * BertForSequenceClassification's (on the pooler) or
 * BertForTokenClassification's tagger (no pooler), as architectures says
 * or else the pooler's presence; qa_outputs.* is the span head.  Its
 * outputs are classifier.weight's rows. */
/* RoBERTa's heads: the MLM head (lm_head.*: dense, GELU, layer_norm,
 * decoder), the pooler (RobertaModel's) or RobertaForSequenceClassification's
 * classifier.dense + tanh + classifier.out_proj on <s>, which is tfm's
 * pooler and classifier.  Other task heads are refused, not dropped. */
static int roberta_heads_config(const tfm_safetensors *st, const char *pre, const bert_heads *h,
                                tfm_model_keys *c, tfm_err *err)
{
    static const char *const other[] = {"classifier.weight", "qa_outputs.weight",
                                        "cls.predictions.transform.dense.weight"};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++)
        if (tfm_safetensors_find(st, other[i]))
            return tfm_err_set(err, "%s: tensor '%s': a head tfm does not read on RoBERTa "
                                    "(it reads %s)", st->name, other[i], layouts[1].archs);
    char name[160];
    c->mlm_head = tfm_safetensors_find(st, "lm_head.dense.weight") != NULL;
    if (c->mlm_head && c->activation != TFM_ACT_GELU_EXACT)
        return tfm_err_set(err, "%s: RoBERTa's MLM head applies gelu whatever hidden_act "
                                "says, and tfm's applies hidden_act: a hidden_act other than "
                                "gelu is not supported with lm_head.*", st->name);
    snprintf(name, sizeof name, "%spooler.dense.weight", pre);
    int pooler = tfm_safetensors_find(st, name) != NULL;
    const tfm_st_tensor *dense = tfm_safetensors_find(st, "classifier.dense.weight");
    const tfm_st_tensor *out = tfm_safetensors_find(st, "classifier.out_proj.weight");
    c->tie_embeddings = h->tie || !c->mlm_head;
    if ((h->arch == BERT_ARCH_SEQ || dense || out) && !(dense && out))
        return tfm_err_set(err, "%s: no tensor '%s': RobertaForSequenceClassification's head "
                                "is classifier.dense and classifier.out_proj", st->name,
                           dense ? "classifier.out_proj.weight" : "classifier.dense.weight");
    if (!dense) {
        c->pooler = pooler;
        return 0;
    }
    if (pooler)
        return tfm_err_set(err, "%s: both '%s' and classifier.dense: tfm has one dense + tanh "
                                "before the classifier", st->name, name);
    int64_t K = out->ndim == 2 ? (int64_t)out->shape[0] : 0;
    if (K < 1 || K > 1 << 16)
        return tfm_err_set(err, "%s: tensor 'classifier.out_proj.weight' is not [labels, %lld]",
                           st->name, (long long)c->n_embd);
    if (h->regression == 1 && K != 1)
        return tfm_err_set(err, "%s: problem_type regression with %lld outputs: tfm's "
                                "regression is one value per text", st->name, (long long)K);
    c->pooler = 1;
    c->classes = K;
    return 0;
}

static int bert_heads_config(const tfm_safetensors *st, const char *pre, tfm_bert_kind kind,
                             const bert_heads *h, tfm_model_keys *c, tfm_err *err)
{
    if (kind == TFM_BERT_ROBERTA)
        return roberta_heads_config(st, pre, h, c, err);
    char name[160];
    c->mlm_head = tfm_safetensors_find(st, "cls.predictions.transform.dense.weight") != NULL;
    snprintf(name, sizeof name, "%spooler.dense.weight", pre);
    c->pooler = tfm_safetensors_find(st, name) != NULL;
    c->nsp = c->pooler && tfm_safetensors_find(st, "cls.seq_relationship.weight");
    c->classes = c->nsp ? 2 : 0;
    /* an untied decoder only where there is one: the MLM head's */
    c->tie_embeddings = h->tie || !c->mlm_head;
    const tfm_st_tensor *cl = tfm_safetensors_find(st, "classifier.weight");
    const tfm_st_tensor *qa = tfm_safetensors_find(st, "qa_outputs.weight");
    static const char *const need[] = {NULL, "classifier.weight", "classifier.weight",
                                       "qa_outputs.weight"};
    static const char *const arch[] = {NULL, "BertForSequenceClassification",
                                       "BertForTokenClassification", "BertForQuestionAnswering"};
    if (h->arch && !tfm_safetensors_find(st, need[h->arch]))
        return tfm_err_set(err, "%s: no tensor '%s', which config.json's architectures (%s) "
                                "has", st->name, need[h->arch], arch[h->arch]);
    if (h->arch == BERT_ARCH_SEQ && !c->pooler)
        return tfm_err_set(err, "%s: no tensor '%s', which config.json's architectures (%s) "
                                "has", st->name, name, arch[h->arch]);
    if (cl) {
        int64_t K = cl->ndim == 2 ? (int64_t)cl->shape[0] : 0;
        if (K < 1 || K > 1 << 16)
            return tfm_err_set(err, "%s: tensor 'classifier.weight' is not [labels, %lld]",
                               st->name, (long long)c->n_embd);
        int tag = h->arch == BERT_ARCH_TOK || (h->arch != BERT_ARCH_SEQ && !c->pooler);
        if (!tag && c->nsp)
            return tfm_err_set(err, "%s: both a classifier and the next-sentence head "
                                    "(cls.seq_relationship): tfm has one on the pooler",
                               st->name);
        if (tag)
            c->tags = K;
        else
            c->classes = K;
        if (h->regression == 1 && (tag || K != 1))
            return tfm_err_set(err, "%s: problem_type regression with %lld outputs: tfm's "
                                    "regression is one value per text", st->name,
                               (long long)K);
    }
    c->span = qa != NULL;
    return 0;
}

/* config.json's id2label for K outputs, in id order (PretrainedConfig's
 * LABEL_i without it), and perm: perm[k] is the id of the k-th label in
 * sorted order (tfm's labels are sorted; HF's are by id).  Each must be
 * distinct. */
static int bert_labels(const char *cfg_path, int K, char ***names, int **perm, tfm_err *err)
{
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, cfg_path, 0, err) < 0)
        return -1;
    char **nm = tfm_calloc((size_t)K, sizeof *nm);
    int *pm = tfm_malloc((size_t)K * sizeof *pm), rc = -1;
    const tfm_json *j = tfm_json_get(doc.root, "id2label");
    if (j && j->type != TFM_JSON_NULL &&
        tfm_json_expect(&doc, j, TFM_JSON_OBJECT, "id2label", err) < 0)
        goto out;
    if (j && j->type == TFM_JSON_OBJECT && j->n != (size_t)K) {
        tfm_err_at(err, cfg_path, j->line, j->col, "id2label has %zu labels but the "
                   "classifier %d outputs", j->n, K);
        goto out;
    }
    for (size_t i = 0; j && j->type == TFM_JSON_OBJECT && i < j->n; i++) {
        char *end;
        long id = strtol(j->keys[i]->str, &end, 10);
        const tfm_json *v = j->items[i];
        if (*end || end == j->keys[i]->str || id < 0 || id >= K || nm[id] ||
            v->type != TFM_JSON_STRING) {
            tfm_err_at(err, cfg_path, j->keys[i]->line, j->keys[i]->col, "id2label: expected "
                       "ids 0 to %d, each once, with a string", K - 1);
            goto out;
        }
        nm[id] = tfm_strdup(v->str);
    }
    for (int i = 0; i < K; i++) {
        if (!nm[i]) {
            char b[32];
            snprintf(b, sizeof b, "LABEL_%d", i);
            nm[i] = tfm_strdup(b);
        }
        pm[i] = i;
    }
    for (int i = 1; i < K; i++) /* insertion sort: K is small */
        for (int k = i; k > 0 && strcmp(nm[pm[k - 1]], nm[pm[k]]) >= 0; k--) {
            if (!strcmp(nm[pm[k - 1]], nm[pm[k]])) {
                tfm_err_at(err, cfg_path, j ? j->line : 1, j ? j->col : 1, "id2label: the "
                           "label '%s' is there twice", nm[pm[k]]);
                goto out;
            }
            int t = pm[k];
            pm[k] = pm[k - 1];
            pm[k - 1] = t;
        }
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    if (rc < 0) {
        for (int i = 0; i < K; i++)
            free(nm[i]);
        free(nm);
        free(pm);
        return -1;
    }
    *names = nm;
    *perm = pm;
    return 0;
}

static void bert_labels_free(char **names, int *perm, int K)
{
    for (int i = 0; names && i < K; i++)
        free(names[i]);
    free(names);
    free(perm);
}

/* The "task" a tfm model file carries, for a BERT checkpoint with a task
 * head (lm/lm.h tfm_lm_file_meta): {"labels": [...sorted], "pairs": false},
 * {"regression": true, "pairs": false}, {"tags": [...]} or {} (span).  0:
 * no task head. */
int tfm_bert_task(const tfm_safetensors *st, const char *pre, tfm_bert_kind kind, tfm_buf *out,
                  tfm_err *err)
{
    tfm_model_keys c;
    bert_heads h;
    memset(&c, 0, sizeof c);
    if (bert_config(st->name, kind, &c, &h, err) < 0 ||
        bert_heads_config(st, pre, kind, &h, &c, err) < 0)
        return -1;
    return tfm_bert_task_json(st, &c, h.regression, out, err);
}

int tfm_bert_task_json(const tfm_safetensors *st, const tfm_model_keys *k, int regression,
                       tfm_buf *out, tfm_err *err)
{
    const tfm_model_keys c = *k;
    char cfg[4200];
    int K = (int)(c.tags ? c.tags : c.nsp ? 0 : c.classes);
    if (!K && c.span) {
        tfm_buf_puts(out, "{}");
        return 1;
    }
    if (!K)
        return 0;
    if (!c.tags && K == 1 && regression != 0) {
        tfm_buf_puts(out, "{\"regression\":true,\"pairs\":false}");
        return 1;
    }
    char **names;
    int *perm;
    tfm_hf_json_beside(st->name, "config.json", cfg, sizeof cfg);
    if (bert_labels(cfg, K, &names, &perm, err) < 0)
        return -1;
    tfm_buf_printf(out, "{\"%s\":[", c.tags ? "tags" : "labels");
    for (int k = 0; k < K; k++) {
        if (k)
            tfm_buf_putc(out, ',');
        tfm_buf_put_json_string(out, names[perm[k]], strlen(names[perm[k]]));
    }
    tfm_buf_puts(out, c.tags ? "]}" : "],\"pairs\":false}");
    bert_labels_free(names, perm, K);
    return 1;
}

/* A task head's Linear SRC ([K, C], [K]) into DST with its rows in tfm's
 * sorted label order. */
static int bert_head_rows(const tfm_hf_ckpt *b, const char *dst, const char *src, int K,
                          const int *perm, tfm_err *err)
{
    char sw[96], sb[96], dw[96], db[96];
    size_t C = (size_t)b->m->cfg.n_embd;
    snprintf(sw, sizeof sw, "%s.weight", src);
    snprintf(sb, sizeof sb, "%s.bias", src);
    snprintf(dw, sizeof dw, "%s.weight", dst);
    snprintf(db, sizeof db, "%s.bias", dst);
    const float *w = tfm_hf_tensor(b, sw, NULL, (size_t)K, C, err);
    const float *bias = w ? tfm_hf_tensor(b, sb, NULL, (size_t)K, 0, err) : NULL;
    if (!bias)
        return -1;
    float *ow = tfm_hf_dst(b, dw, 0), *ob = tfm_hf_dst(b, db, 0);
    for (int k = 0; k < K; k++) {
        int r = perm ? perm[k] : k;
        memcpy(ow + (size_t)k * C, w + (size_t)r * C, C * sizeof(float));
        ob[k] = bias[r];
    }
    return 0;
}

/* Copies the heads bert_heads_config found (HF's Linears are [out, in], as
 * tfm's heads). */
/* RoBERTa's, into the same parameters: lm_head.* as cls.predictions.*,
 * classifier.dense as the pooler and classifier.out_proj as the
 * classifier. */
static int roberta_head_weights(const tfm_hf_ckpt *b, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = g->n_embd, V = g->vocab_size;
    tfm_hf_ckpt top = *b;
    top.pre = ""; /* the heads are outside "roberta." */
    if (g->mlm_head &&
        (tfm_hf_copy(&top, "cls.predictions.transform.dense.weight", 0, "lm_head.dense.weight",
                     NULL, C, C, err) < 0 ||
         tfm_hf_copy(&top, "cls.predictions.transform.dense.bias", 0, "lm_head.dense.bias", NULL,
                     C, 0, err) < 0 ||
         tfm_hf_norm(&top, "cls.predictions.transform.LayerNorm", 0, "lm_head.layer_norm", C,
                     err) < 0 ||
         tfm_hf_copy(&top, "cls.predictions.bias", 0,
                     !g->tie_embeddings && tfm_safetensors_find(b->st, "lm_head.decoder.bias")
                         ? "lm_head.decoder.bias"
                         : "lm_head.bias",
                     NULL, V, 0, err) < 0))
        return -1;
    if (!g->tie_embeddings &&
        tfm_hf_copy(&top, "lm_head.weight", 0, "lm_head.decoder.weight", NULL, V, C, err) < 0)
        return -1;
    if (!g->n_classes)
        return g->pooler && (tfm_hf_copy(b, "pooler.dense.weight", 0, "pooler.dense.weight",
                                         NULL, C, C, err) < 0 ||
                             tfm_hf_copy(b, "pooler.dense.bias", 0, "pooler.dense.bias", NULL, C,
                                         0, err) < 0)
                   ? -1
                   : 0;
    int K = g->n_classes;
    if (tfm_hf_copy(&top, "pooler.dense.weight", 0, "classifier.dense.weight", NULL, C, C,
                    err) < 0 ||
        tfm_hf_copy(&top, "pooler.dense.bias", 0, "classifier.dense.bias", NULL, C, 0, err) < 0)
        return -1;
    return tfm_bert_classifier(&top, "classifier", "classifier.out_proj", K, err);
}

int tfm_bert_classifier(const tfm_hf_ckpt *b, const char *dst, const char *src, int K,
                        tfm_err *err)
{
    char cfg[4200], **names = NULL;
    int *perm = NULL;
    tfm_hf_json_beside(b->st->name, "config.json", cfg, sizeof cfg);
    if (K > 1 && bert_labels(cfg, K, &names, &perm, err) < 0)
        return -1;
    int rc = bert_head_rows(b, dst, src, K, perm, err);
    bert_labels_free(names, perm, K);
    return rc;
}

static int bert_head_weights(const tfm_hf_ckpt *b, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = g->n_embd, V = g->vocab_size;
    tfm_hf_ckpt cls = *b;
    cls.pre = ""; /* cls.* never has the "bert." prefix */
    if (g->mlm_head &&
        (tfm_hf_copy(&cls, "cls.predictions.transform.dense.weight", 0,
                   "cls.predictions.transform.dense.weight", NULL, C, C, err) < 0 ||
         tfm_hf_copy(&cls, "cls.predictions.transform.dense.bias", 0,
                   "cls.predictions.transform.dense.bias", NULL, C, 0, err) < 0 ||
         tfm_hf_norm(&cls, "cls.predictions.transform.LayerNorm", 0,
                   "cls.predictions.transform.LayerNorm", C, err) < 0 ||
         tfm_hf_copy(&cls, "cls.predictions.bias", 0,
                   /* untied, transformers 5 computes with the decoder's own
                    * bias (tied, it is cls.predictions.bias) */
                   !g->tie_embeddings &&
                           tfm_safetensors_find(b->st, "cls.predictions.decoder.bias")
                       ? "cls.predictions.decoder.bias"
                       : "cls.predictions.bias",
                   NULL, V, 0, err) < 0))
        return -1;
    if (g->pooler && (tfm_hf_copy(b, "pooler.dense.weight", 0, "pooler.dense.weight", NULL, C, C,
                                err) < 0 ||
                      tfm_hf_copy(b, "pooler.dense.bias", 0, "pooler.dense.bias", NULL, C, 0,
                                err) < 0))
        return -1;
    if (g->nsp && (tfm_hf_copy(&cls, "cls.seq_relationship.weight", 0,
                             "cls.seq_relationship.weight", NULL, 2, C, err) < 0 ||
                   tfm_hf_copy(&cls, "cls.seq_relationship.bias", 0, "cls.seq_relationship.bias",
                             NULL, 2, 0, err) < 0))
        return -1;
    if (!g->tie_embeddings && tfm_hf_copy(&cls, "lm_head.weight", 0,
                                        "cls.predictions.decoder.weight", NULL, V, C, err) < 0)
        return -1;
    if (g->span && bert_head_rows(&cls, "qa_outputs", "qa_outputs", 2, NULL, err) < 0)
        return -1;
    int K = g->n_tags ? g->n_tags : g->nsp ? 0 : g->n_classes;
    if (!K)
        return 0;
    /* the tagger is classifier.*, and so is the classifier without one;
     * the rows in the sorted order of its labels */
    return tfm_bert_classifier(&cls, "classifier", "classifier", K, err);
}

/* The config mapper: config.json, and the heads the file has; the
 * end-of-text id is the tokenizer's. */
int tfm_bert_describe(const tfm_safetensors *st, const char *pre, tfm_bert_kind kind,
                      tfm_model_keys *c, tfm_model_config *g, int64_t *eos, tfm_err *err)
{
    char cfg_path[4200];
    tfm_hf_json_beside(st->name, "config.json", cfg_path, sizeof cfg_path);
    bert_heads h;
    *eos = -1;
    if (bert_config(st->name, kind, c, &h, err) < 0 ||
        bert_heads_config(st, pre, kind, &h, c, err) < 0)
        return -1;
    if (tfm_model_config_from_keys(c, NULL, g, err) < 0)
        return tfm_err_prefix(err, "%s", cfg_path);
    return 0;
}

int tfm_bert_weights(const tfm_hf_ckpt *b, tfm_bert_kind kind, tfm_err *err)
{
    if (bert_weights(b, kind, err) < 0)
        return -1;
    return kind == TFM_BERT_ROBERTA ? roberta_head_weights(b, err) : bert_head_weights(b, err);
}

static int bert_describe(const tfm_safetensors *st, const char *pre, tfm_model_keys *c,
                         tfm_model_config *g, int64_t *eos, tfm_err *err)
{
    return tfm_bert_describe(st, pre, TFM_BERT, c, g, eos, err);
}

static int bert_all_weights(const tfm_hf_ckpt *b, tfm_err *err)
{
    return tfm_bert_weights(b, TFM_BERT, err);
}

static int bert_task_json(const tfm_safetensors *st, const char *pre, tfm_buf *out,
                          tfm_err *err)
{
    return tfm_bert_task(st, pre, TFM_BERT, out, err);
}

static const char *const bert_types[] = {"bert", NULL};

const tfm_convert_family tfm_convert_bert = {
    .name = "bert",
    .id = TFM_HF_BERT,
    .reads = "BERT (model_type bert)",
    .what = "BERT",
    .model_types = bert_types,
    .detect = bert_prefix,
    .config = bert_describe,
    .weights = bert_all_weights,
    .task = bert_task_json,
};

const char *tfm_bert_prefix(const tfm_safetensors *st, const char *pre, const char *type)
{
    if (tfm_hf_format(st))
        return NULL;
    char full[96], t[64];
    snprintf(full, sizeof full, "%sembeddings.word_embeddings.weight", pre);
    const char *p = tfm_safetensors_find(st, full)                                 ? pre
                    : tfm_safetensors_find(st, "embeddings.word_embeddings.weight") ? ""
                                                                                    : NULL;
    tfm_hf_model_type(st->name, t, sizeof t);
    return p && !strcmp(t, type) ? p : NULL;
}

/* The tensor NAME.weight of st (pre: its prefix, or ""), or NULL. */
static const tfm_st_tensor *names_find(const tfm_safetensors *st, const char *pre,
                                       const char *name)
{
    char full[160];
    if (!name)
        return NULL;
    snprintf(full, sizeof full, "%s%s.weight", pre, name);
    return tfm_safetensors_find(st, full);
}

int tfm_bert_names_config(const tfm_safetensors *st, const char *pre, const tfm_bert_names *n,
                          const tfm_bert_heads *h, tfm_model_keys *c, tfm_err *err)
{
    c->mlm_head = names_find(st, "", n->mlm_dense) != NULL;
    c->tie_embeddings = h->tie || !c->mlm_head;
    const char *ppre = n->pooled_base ? pre : "";
    const tfm_st_tensor *pool = names_find(st, ppre, n->pooler);
    const tfm_st_tensor *cl = names_find(st, "", n->classifier);
    const tfm_st_tensor *tag = names_find(st, "", n->tagger);
    c->span = names_find(st, "", n->qa) != NULL;
    /* one classifier.* may be either (DistilBERT's): the architecture says,
     * else the pooler before it */
    int seq = cl && (cl != tag || h->arch == BERT_ARCH_SEQ || (h->arch != BERT_ARCH_TOK && pool));
    if (seq && cl == tag)
        tag = NULL;
    c->pooler = pool && (seq || n->pooled_base);
    c->pooler_act = n->pooler_act;
    if (h->arch == BERT_ARCH_SEQ && !(seq && pool))
        return tfm_err_set(err, "%s: no tensor '%s%s.weight', which config.json's "
                                "architectures (a %s sequence classifier) has", st->name,
                           seq ? ppre : "", seq ? n->pooler : n->classifier, n->what);
    if (seq && !pool)
        return tfm_err_set(err, "%s: tensor '%s.weight' without '%s%s.weight': %s's sequence "
                                "classifier reads it", st->name, n->classifier, ppre, n->pooler,
                           n->what);
    if ((h->arch == BERT_ARCH_TOK && !tag) || (h->arch == BERT_ARCH_QA && !c->span))
        return tfm_err_set(err, "%s: no tensor '%s.weight', which config.json's architectures "
                                "has", st->name, h->arch == BERT_ARCH_QA ? n->qa : n->tagger);
    const tfm_st_tensor *t = seq ? cl : tag;
    if (t) {
        int64_t K = t->ndim == 2 ? (int64_t)t->shape[0] : 0;
        if (K < 1 || K > 1 << 16)
            return tfm_err_set(err, "%s: tensor '%s.weight' is not [labels, %lld]", st->name,
                               seq ? n->classifier : n->tagger, (long long)c->n_embd);
        if (h->regression == 1 && (!seq || K != 1))
            return tfm_err_set(err, "%s: problem_type regression with %lld outputs: tfm's "
                                    "regression is one value per text", st->name, (long long)K);
        if (seq)
            c->classes = K;
        else
            c->tags = K;
    }
    return 0;
}

/* A head's Linear SRC ([out, in], [out]) into DST as it is (tfm's heads
 * are [out, in] too). */
static int head_linear(const tfm_hf_ckpt *b, const char *dst, const char *src, size_t out,
                       size_t in, tfm_err *err)
{
    char dw[96], db[96], sw[160], sb[160];
    snprintf(dw, sizeof dw, "%s.weight", dst);
    snprintf(db, sizeof db, "%s.bias", dst);
    snprintf(sw, sizeof sw, "%s.weight", src);
    snprintf(sb, sizeof sb, "%s.bias", src);
    return tfm_hf_copy(b, dw, 0, sw, NULL, out, in, err) < 0 ||
                   tfm_hf_copy(b, db, 0, sb, NULL, out, 0, err) < 0
               ? -1
               : 0;
}

int tfm_bert_names_weights(const tfm_hf_ckpt *b, const tfm_bert_names *n, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = g->n_embd, V = g->vocab_size, E = tfm_model_config_emb_dim(g);
    tfm_hf_ckpt top = *b;
    top.pre = ""; /* the heads are outside the base model's names */
    char src[160];
    if (g->mlm_head) {
        snprintf(src, sizeof src, "%s.bias", n->mlm_bias);
        if (head_linear(&top, "cls.predictions.transform.dense", n->mlm_dense, E, C,
                               err) < 0 ||
            tfm_hf_norm(&top, "cls.predictions.transform.LayerNorm", 0, n->mlm_norm, E, err) < 0 ||
            tfm_hf_copy(&top, "cls.predictions.bias", 0, src, NULL, V, 0, err) < 0)
            return -1;
        snprintf(src, sizeof src, "%s.weight", n->mlm_decoder);
        if (!g->tie_embeddings &&
            tfm_hf_copy(&top, "lm_head.weight", 0, src, NULL, V, E, err) < 0)
            return -1;
    }
    if (g->pooler &&
        head_linear(n->pooled_base ? b : &top, "pooler.dense", n->pooler, C, C, err) < 0)
        return -1;
    if (g->n_classes && tfm_bert_classifier(&top, "classifier", n->classifier, g->n_classes,
                                            err) < 0)
        return -1;
    if (g->n_tags && tfm_bert_classifier(&top, "classifier", n->tagger, g->n_tags, err) < 0)
        return -1;
    return g->span ? bert_head_rows(&top, "qa_outputs", n->qa, 2, NULL, err) : 0;
}

const tfm_bert_block_names tfm_bert_block_bert = {
    "attention.self.query", "attention.self.key", "attention.self.value",
    "attention.output.dense", "attention.output.LayerNorm", "intermediate.dense",
    "output.dense", "output.LayerNorm",
};

int tfm_bert_block(const tfm_hf_ckpt *b, int l, const char *src, const tfm_bert_block_names *n,
                   tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = (size_t)g->n_embd, F = (size_t)tfm_model_config_ff(g);
    char q[192], k[192], v[192], s[192], dst[48];
    snprintf(q, sizeof q, "%s%s", src, n->q);
    snprintf(k, sizeof k, "%s%s", src, n->k);
    snprintf(v, sizeof v, "%s%s", src, n->v);
    snprintf(dst, sizeof dst, "h.%d.attn.c_attn", l);
    /* q, k, v side by side: c_attn [C, 3C], bias [3C] */
    const char *qkv[3] = {q, k, v};
    if (tfm_hf_fused(b, dst, qkv, 3, C, C, err) < 0)
        return -1;
    /* post-LN: ln_1 is the norm after attention, ln_2 after the MLP */
#define PART(call, name)                                                        \
    do {                                                                        \
        snprintf(s, sizeof s, "%s%s", src, name);                               \
        if ((call) < 0)                                                         \
            return -1;                                                          \
    } while (0)
    PART(tfm_hf_linear(b, "h.%d.attn.c_proj", l, s, C, C, err), n->attn_out);
    PART(tfm_hf_norm(b, "h.%d.ln_1", l, s, C, err), n->attn_norm);
    PART(tfm_hf_linear(b, "h.%d.mlp.c_fc", l, s, F, C, err), n->fc);
    PART(tfm_hf_linear(b, "h.%d.mlp.c_proj", l, s, C, F, err), n->fc_out);
    PART(tfm_hf_norm(b, "h.%d.ln_2", l, s, C, err), n->out_norm);
#undef PART
    return 0;
}

int tfm_bert_factorised_config(const tfm_json_doc *doc, const char *act_def, tfm_model_keys *c,
                               tfm_err *err)
{
    int64_t C, NH, L, F, P, S, V, E;
    double drop, attn, eps;
    tfm_act act;
    if (tfm_hf_int(doc, "hidden_size", 1, 65536, -1, &C, err) < 0 ||
        tfm_hf_int(doc, "embedding_size", 1, 65536, -1, &E, err) < 0 ||
        tfm_hf_int(doc, "num_attention_heads", 1, 1024, -1, &NH, err) < 0 ||
        tfm_hf_int(doc, "num_hidden_layers", 1, 1000, -1, &L, err) < 0 ||
        tfm_hf_int(doc, "intermediate_size", 1, 1 << 20, -1, &F, err) < 0 ||
        tfm_hf_int(doc, "max_position_embeddings", 1, 1 << 20, 512, &P, err) < 0 ||
        tfm_hf_int(doc, "type_vocab_size", 1, 1024, 2, &S, err) < 0 ||
        tfm_hf_int(doc, "vocab_size", 1, 1 << 24, -1, &V, err) < 0 ||
        tfm_hf_prob(doc, "hidden_dropout_prob", 0.1, &drop, err) < 0 ||
        tfm_hf_prob(doc, "attention_probs_dropout_prob", 0.1, &attn, err) < 0 ||
        tfm_hf_prob(doc, "layer_norm_eps", 1e-12, &eps, err) < 0 ||
        tfm_bert_act(doc, "hidden_act", act_def, &act, err) < 0)
        return -1;
    const tfm_json *j = tfm_json_get(doc->root, "position_embedding_type");
    if (j && !(j->type == TFM_JSON_STRING && !strcmp(j->str, "absolute")))
        return tfm_err_at(err, doc->name, j->line, j->col, "position_embedding_type '%s' is "
                          "not supported (only absolute)", j->str ? j->str : "");
    if (!(eps >= 1e-12)) {
        j = tfm_json_get(doc->root, "layer_norm_eps");
        return tfm_err_at(err, doc->name, j->line, j->col, "layer_norm_eps must be in "
                          "[1e-12, 1), not %s", j->str);
    }
    c->kind = TFM_KIND_ENCODER;
    c->positions = TFM_POS_LEARNED;
    c->norm = TFM_LN_POST;
    c->activation = act;
    c->ln_eps = eps;
    c->n_layer = L;
    c->n_head = NH;
    c->n_embd = C;
    c->d_ff = F;
    c->block_size = P;
    c->segments = S;
    c->vocab_size = V;
    c->embedding_size = E;
    c->emb_norm = 1;
    c->bias = 1;
    c->dropout = drop;
    c->attn_dropout = attn;
    return 0;
}

int tfm_bert_embeddings(const tfm_hf_ckpt *b, const char *proj, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t E = (size_t)tfm_model_config_emb_dim(g);
    if (tfm_hf_copy(b, "wte.weight", 0, "embeddings.word_embeddings.weight", NULL,
                    (size_t)g->vocab_size, E, err) < 0 ||
        tfm_hf_copy(b, "wpe.weight", 0, "embeddings.position_embeddings.weight", NULL,
                    (size_t)g->block_size, E, err) < 0 ||
        tfm_hf_copy(b, "wse.weight", 0, "embeddings.token_type_embeddings.weight", NULL,
                    (size_t)g->n_segments, E, err) < 0 ||
        tfm_hf_norm(b, "ln_e", 0, "embeddings.LayerNorm", E, err) < 0)
        return -1;
    return g->emb_dim ? tfm_hf_linear(b, "emb_proj", 0, proj, (size_t)g->n_embd, E, err) : 0;
}
