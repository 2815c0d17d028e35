/* HuggingFace GPT-2 checkpoints (convert/convert.h, convert/gpt2.h). */
#include "config.h"

#include "convert/gpt2.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const tfm_hf_key hf_gpt2_keys[] = {
    {"model_type", HF_READ}, {"n_head", HF_READ}, {"n_embd", HF_READ}, {"n_layer", HF_READ},
    {"n_positions", HF_READ}, {"vocab_size", HF_READ}, {"n_inner", HF_READ},
    {"activation_function", HF_READ}, {"layer_norm_epsilon", HF_READ},
    {"resid_pdrop", HF_READ}, {"attn_pdrop", HF_READ}, {"embd_pdrop", HF_READ},
    {"forced_eos_token_id", HF_READ}, {"tie_word_embeddings", HF_READ},
    {"scale_attn_weights", HF_READ},
    /* n_ctx: an old copy of n_positions HF no longer reads; summary_*:
     * GPT2DoubleHeadsModel's head; the upcast: precision only */
    {"n_ctx", HF_ANY}, {"eos_token_id", HF_ANY}, {"decoder_start_token_id", HF_ANY},
    {"summary_type", HF_ANY}, {"summary_use_proj", HF_ANY}, {"summary_activation", HF_ANY},
    {"summary_proj_to_labels", HF_ANY}, {"summary_first_dropout", HF_ANY},
    {"reorder_and_upcast_attn", HF_ANY}, {"is_encoder_decoder", HF_DEFAULT},
    {"is_decoder", HF_ANY}, {"scale_attn_by_inverse_layer_idx", HF_DEFAULT},
    {"forced_bos_token_id", HF_DEFAULT}, {NULL, 0},
};

/* GPT2Config's integer KEY, which the tensors already tell (have): an
 * error naming config.json when it says otherwise. */
static int gpt2_agrees(const tfm_json_doc *doc, const char *key, int64_t have,
                       const char *tensor, tfm_err *err)
{
    const tfm_json *j = tfm_json_get(doc->root, key);
    int64_t v;
    if (!j || j->type == TFM_JSON_NULL)
        return 0;
    if (tfm_json_get_int(doc, j, key, 1, INT64_MAX, &v, err) < 0)
        return -1;
    if (v != have)
        return tfm_err_at(err, doc->name, j->line, j->col, "%s %lld but the checkpoint has "
                          "%lld (%s)", key, (long long)v, (long long)have, tensor);
    return 0;
}

/* HuggingFace's config.json beside a GPT-2 checkpoint (st, its shapes
 * already in g): every key as GPT2Config means it, checked against the
 * tensors (convert/convert.h).  Absent: 0, nothing changed. */
static int hf_config_json(const tfm_safetensors *st, tfm_model_config *g, tfm_err *err)
{
    char path[4200];
    tfm_hf_json_beside(st->name, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return 0;
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = 0;
    int64_t v;
    char what[64];
    snprintf(what, sizeof what, "wte.weight [%d, %d]", g->vocab_size, g->n_embd);
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        tfm_hf_keys_check(&doc, hf_gpt2_keys, "GPT2Config", err) < 0 ||
        gpt2_agrees(&doc, "vocab_size", g->vocab_size, what, err) < 0 ||
        gpt2_agrees(&doc, "n_embd", g->n_embd, what, err) < 0 ||
        gpt2_agrees(&doc, "n_positions", g->block_size, "rows of wpe.weight", err) < 0 ||
        gpt2_agrees(&doc, "n_layer", g->n_layer, "blocks h.N", err) < 0)
        rc = -1;
    /* the LM and the bare model: other heads (sequence classification's
     * score, the double heads) would be dropped without a word */
    const tfm_json *j = tfm_json_get(doc.root, "architectures");
    for (size_t i = 0; rc == 0 && j && j->type == TFM_JSON_ARRAY && i < j->n; i++) {
        const tfm_json *n = j->items[i];
        char reads[512];
        if (!(n->type == TFM_JSON_STRING &&
              (!strcmp(n->str, "GPT2LMHeadModel") || !strcmp(n->str, "GPT2Model"))))
            rc = tfm_err_at(err, path, n->line, n->col, "architecture '%s' is not one tfm "
                            "reads: it reads the folders of %s",
                            n->str ? n->str : "", tfm_convert_reads(reads, sizeof reads));
    }
    j = tfm_json_get(doc.root, "model_type");
    if (rc == 0 && j && !(j->type == TFM_JSON_STRING && !strcmp(j->str, "gpt2")))
        rc = tfm_err_at(err, path, j->line, j->col, "model_type '%s' is not supported here "
                        "(tfm reads gpt2's layout)", j->str ? j->str : "");
    j = tfm_json_get(doc.root, "n_head");
    if (rc == 0 && j) {
        if (tfm_json_get_int(&doc, j, "n_head", 1, 1024, &v, err) < 0)
            rc = -1;
        else
            g->n_head = (int)v;
    }
    /* the feed-forward's width: null is 4 × n_embd */
    j = tfm_json_get(doc.root, "n_inner");
    if (rc == 0 && j && j->type != TFM_JSON_NULL) {
        if (tfm_json_get_int(&doc, j, "n_inner", 1, 1 << 20, &v, err) < 0)
            rc = -1;
        else
            g->d_ff = (int)v;
    } else if (rc == 0) {
        g->d_ff = 0;
    }
    const tfm_st_tensor *fc = tfm_hf_find(st, "h.0.mlp.c_fc.weight");
    int ff = g->d_ff ? g->d_ff : 4 * g->n_embd;
    if (rc == 0 && fc && fc->ndim == 2 && fc->shape[1] != (size_t)ff) {
        if (j && j->type != TFM_JSON_NULL)
            rc = tfm_err_at(err, path, j->line, j->col, "n_inner %d but the checkpoint's "
                            "h.0.mlp.c_fc.weight is [%zu, %zu]", ff, fc->shape[0],
                            fc->shape[1]);
        else
            rc = tfm_err_set(err, "%s: n_inner %s means 4 x n_embd = %d, but the checkpoint's "
                             "h.0.mlp.c_fc.weight is [%zu, %zu]", path, j ? "null" : "absent",
                             ff, fc->shape[0], fc->shape[1]);
    }
    int scaled = 1, tied = 1;
    if (rc == 0 && (tfm_hf_bool(&doc, "scale_attn_weights", 1, &scaled, err) < 0 ||
                    tfm_hf_bool(&doc, "tie_word_embeddings", 1, &tied, err) < 0))
        rc = -1;
    if (rc == 0) {
        g->attn_unscaled = !scaled;
        g->tie_embeddings = tied;
    }
    j = tfm_json_get(doc.root, "tie_word_embeddings");
    if (rc == 0 && !tied && !tfm_hf_find(st, "lm_head.weight"))
        rc = tfm_err_at(err, path, j->line, j->col, "tie_word_embeddings false but %s has no "
                        "lm_head.weight (the untied head)", st->name);
    j = tfm_json_get(doc.root, "activation_function");
    if (rc == 0 && j) {
        if (j->type == TFM_JSON_STRING && (!strcmp(j->str, "gelu_new") ||
                                           !strcmp(j->str, "gelu_pytorch_tanh")))
            g->act = TFM_ACT_GELU_TANH;
        else if (j->type == TFM_JSON_STRING && !strcmp(j->str, "gelu"))
            g->act = TFM_ACT_GELU_EXACT;
        else if (j->type == TFM_JSON_STRING && !strcmp(j->str, "relu"))
            g->act = TFM_ACT_RELU;
        else
            rc = tfm_err_set(err, "%s:%ld:%ld: activation_function '%s' is not supported "
                             "(tfm has gelu_new, gelu and relu)", path, j->line, j->col,
                             j->str ? j->str : "");
    }
    j = tfm_json_get(doc.root, "layer_norm_epsilon");
    if (rc == 0 && j) {
        if (j->type != TFM_JSON_NUMBER || !(j->num > 0 && j->num < 1))
            rc = tfm_err_set(err, "%s:%ld:%ld: layer_norm_epsilon must be a number in (0, 1)",
                             path, j->line, j->col);
        else
            g->ln_eps = (float)j->num;
    }
    /* GPT2Config's rates (0.1 each by default) and the token HF's generate
     * forces last */
    double resid, attn, embd;
    int64_t forced_eos;
    if (rc == 0 && (tfm_hf_prob(&doc, "resid_pdrop", 0.1, &resid, err) < 0 ||
                    tfm_hf_prob(&doc, "attn_pdrop", 0.1, &attn, err) < 0 ||
                    tfm_hf_prob(&doc, "embd_pdrop", 0.1, &embd, err) < 0 ||
                    tfm_hf_int(&doc, "forced_eos_token_id", -1, g->vocab_size - 1, -1, &forced_eos,
                           err) < 0))
        rc = -1;
    if (rc == 0) {
        g->dropout = (float)resid;
        g->attn_dropout = (float)attn;
        g->emb_dropout = (float)embd;
        g->forced_eos = (int)forced_eos;
    }
    tfm_json_doc_free(&doc);
    return rc;
}

/* A HuggingFace GPT-2 file carries no config: read the shape off the
 * tensors, and the rest from config.json beside the file (without one:
 * 64-wide heads, as every GPT-2 size has, and the feed-forward width of
 * the file's c_fc). */
int tfm_gpt2_config(const tfm_safetensors *st, tfm_model_config *g, tfm_err *err)
{
    const tfm_st_tensor *wte = tfm_hf_find(st, "wte.weight"), *wpe = tfm_hf_find(st, "wpe.weight");
    if ((!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2) && tfm_convert_unread(st->name, err))
        return -1;
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2)
        return tfm_err_set(err, "%s: not a tfm model file (no \"format\": \"tfm-gpt\" "
                           "in __metadata__) nor a GPT-2 checkpoint", st->name);
    tfm_model_config_default(g);
    g->vocab_size = (int)wte->shape[0];
    g->n_embd = (int)wte->shape[1];
    g->block_size = (int)wpe->shape[0];
    g->n_head = g->n_embd % 64 == 0 ? g->n_embd / 64 : 1;
    int L = 0;
    for (;; L++) {
        char name[64];
        snprintf(name, sizeof name, "h.%d.ln_1.weight", L);
        if (!tfm_hf_find(st, name))
            break;
    }
    g->n_layer = L;
    g->tie_embeddings = 1;
    const tfm_st_tensor *fc = tfm_hf_find(st, "h.0.mlp.c_fc.weight");
    if (fc && fc->ndim == 2 && fc->shape[1] != 4 * (size_t)g->n_embd)
        g->d_ff = (int)fc->shape[1];
    if (hf_config_json(st, g, err) < 0)
        return -1;
    return tfm_model_config_check(g, err) < 0 ? tfm_err_prefix(err, "%s", st->name) : 0;
}

void tfm_gpt2_config_into(const tfm_model_config *g, tfm_model_keys *c)
{
    c->kind = TFM_KIND_DECODER;
    c->positions = TFM_POS_LEARNED;
    c->norm = TFM_LN_PRE;
    c->activation = g->act;
    c->ln_eps = g->ln_eps;
    c->n_layer = g->n_layer;
    c->n_head = g->n_head;
    c->n_embd = g->n_embd;
    c->d_ff = g->d_ff;
    c->block_size = g->block_size;
    c->vocab_size = g->vocab_size;
    c->tie_embeddings = g->tie_embeddings;
    c->attn_scale = !g->attn_unscaled;
    c->bias = 1;
    /* config.json's, as float: printed back as the YAML a file saves */
    c->dropout = g->dropout;
    c->attn_dropout = g->attn_dropout;
    c->emb_dropout = g->emb_dropout;
    c->forced_eos = g->forced_eos;
}

/* The token a GPT-2 folder's generation stops at, as transformers'
 * generate takes it: eos_token_id of generation_config.json, else of
 * config.json (else *eos stays the tokenizer's).  An id outside the
 * vocabulary (GPT2Config's default 50256 in a smaller model) is one
 * generate never produces: nothing changes.  Several ids: refused, tfm
 * stops at one. */
int tfm_gpt2_eos(const char *model_path, int V, int64_t *eos, tfm_err *err)
{
    static const char *const files[] = {"generation_config.json", "config.json"};
    for (int f = 0; f < 2; f++) {
        char path[4200];
        tfm_hf_json_beside(model_path, files[f], path, sizeof path);
        if (access(path, F_OK) != 0)
            continue;
        tfm_json_doc doc;
        if (tfm_json_parse_file(&doc, path, 0, err) < 0)
            return -1;
        const tfm_json *j = tfm_json_get(doc.root, "eos_token_id");
        if (j && j->type == TFM_JSON_ARRAY && j->n == 1)
            j = j->items[0];
        int rc = 0, found = 0;
        if (j && j->type == TFM_JSON_ARRAY && j->n > 1)
            rc = tfm_err_at(err, path, j->line, j->col, "eos_token_id lists %zu tokens: "
                            "expected one (tfm's generation stops at one end-of-text token)",
                            j->n);
        else if (j && j->type == TFM_JSON_NUMBER && j->num == (double)(int64_t)j->num) {
            found = 1;
            if (j->num >= 0 && j->num < V)
                *eos = (int64_t)j->num;
        } else if (j && j->type != TFM_JSON_NULL && !(j->type == TFM_JSON_ARRAY && !j->n))
            rc = tfm_err_at(err, path, j->line, j->col, "eos_token_id must be a token id");
        tfm_json_doc_free(&doc);
        if (rc < 0 || found)
            return rc;
    }
    return 0;
}


/* The config mapper of tfm_model_load: the description from the shapes
 * and config.json (tfm_gpt2_config), as tfm's model section. */
static int gpt2_describe(const tfm_safetensors *st, const char *pre, tfm_model_keys *c,
                         tfm_model_config *g, int64_t *eos, tfm_err *err)
{
    (void)pre;
    *eos = -1;
    if (tfm_gpt2_config(st, g, err) < 0)
        return -1;
    tfm_gpt2_config_into(g, c);
    return 0;
}

/* The weights copied as they are: GPT-2's names and [in, out] layout are
 * tfm's. */
static int gpt2_weights(const tfm_hf_ckpt *b, tfm_err *err)
{
    tfm_model *m = b->m;
    for (int i = 0; i < m->n_table; i++) {
        const tfm_param *p = &m->table[i];
        const float *src = tfm_hf_lookup((void *)b->st, p->name, p->shape[0], p->shape[1], err);
        if (!src)
            return -1;
        memcpy(m->params + p->offset, src, sizeof(float) * p->numel);
    }
    return 0;
}

/* No tfm format and a wte tensor: "" or "transformer." */
static const char *gpt2_detect(const tfm_safetensors *st)
{
    if (tfm_hf_format(st) || !tfm_hf_find(st, "wte.weight"))
        return NULL;
    return tfm_safetensors_find(st, "wte.weight") ? "" : "transformer.";
}

static const char *const gpt2_types[] = {"gpt2", NULL};

const tfm_convert_family tfm_convert_gpt2 = {
    .name = "gpt2",
    .id = TFM_HF_GPT2,
    .reads = "GPT-2 (GPT2LMHeadModel, GPT2Model)",
    .what = "GPT-2",
    .model_types = gpt2_types,
    .detect = gpt2_detect,
    .config = gpt2_describe,
    .weights = gpt2_weights,
    .in_place = 1,
};
