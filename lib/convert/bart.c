/* HuggingFace BART checkpoints (convert/convert.h). */
#include "config.h"

#include "convert/convert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/file.h"
/* A BartForConditionalGeneration (names under "model.") or BartModel (no
 * prefix, no head) safetensors file with config.json beside it becomes
 * tfm's encoder-decoder (model/transformer.h), as modeling_bart.py
 * computes it: post-LN blocks with biases everywhere, q·kᵀ/√head_dim
 * (HF scales q instead: the same), learned positions whose tables have 2
 * leading rows that no position reads (HF's offset of 2: rows 2.. become
 * tfm's wpe of max_position_embeddings rows), embeddings times
 * √d_model with scale_embedding, layernorm_embedding as the embedding
 * norm of both stacks, eps 1e-5 (nn.LayerNorm's; BART's config has no
 * eps), no final norm, the LM head tied to shared.weight plus
 * final_logits_bias [1, V] (head_bias).  Names map as
 *   shared.weight (or encoder/decoder.embed_tokens)  wte
 *   S.embed_positions.weight [P + 2, C]        (enc.)wpe [P, C]
 *   S.layernorm_embedding                      (enc.)ln_e
 *   S.layers.N.self_attn.{q,k,v}_proj          (enc.)h.N.attn.c_attn
 *   S.layers.N.self_attn.out_proj              (enc.)h.N.attn.c_proj
 *   S.layers.N.self_attn_layer_norm            (enc.)h.N.ln_1
 *   decoder.layers.N.encoder_attn.q_proj       h.N.xattn.c_q
 *   decoder.layers.N.encoder_attn.{k,v}_proj   h.N.xattn.c_kv
 *   decoder.layers.N.encoder_attn.out_proj     h.N.xattn.c_proj
 *   decoder.layers.N.encoder_attn_layer_norm   h.N.ln_x
 *   S.layers.N.fc1, fc2                        (enc.)h.N.mlp.c_fc, c_proj
 *   S.layers.N.final_layer_norm                (enc.)h.N.ln_2
 * (Linears transposed: [out, in] there, [in, out] here). */

/* "model." or "" (the prefix of the checkpoint's names), or NULL when the
 * file is not a BART checkpoint. */
static const char *bart_prefix(const tfm_safetensors *st)
{
    if (tfm_hf_format(st))
        return NULL;
    if (tfm_safetensors_find(st, "model.encoder.layers.0.self_attn.q_proj.weight"))
        return "model.";
    if (tfm_safetensors_find(st, "encoder.layers.0.self_attn.q_proj.weight"))
        return "";
    return NULL;
}

static const tfm_hf_key hf_bart_keys[] = {
    {"model_type", HF_READ}, {"d_model", HF_READ}, {"encoder_layers", HF_READ},
    {"decoder_layers", HF_READ}, {"encoder_attention_heads", HF_READ},
    {"decoder_attention_heads", HF_READ}, {"encoder_ffn_dim", HF_READ},
    {"decoder_ffn_dim", HF_READ}, {"max_position_embeddings", HF_READ},
    {"vocab_size", HF_READ}, {"eos_token_id", HF_READ}, {"decoder_start_token_id", HF_READ},
    {"forced_bos_token_id", HF_READ}, {"forced_eos_token_id", HF_READ}, {"dropout", HF_READ},
    {"attention_dropout", HF_READ}, {"activation_dropout", HF_READ},
    {"scale_embedding", HF_READ}, {"tie_word_embeddings", HF_READ},
    {"normalize_before", HF_READ}, {"add_final_layer_norm", HF_READ},
    {"activation_function", HF_READ},
    /* BartConfig's copy of encoder_layers, and old fairseq-era keys that
     * modeling_bart.py no longer reads */
    {"num_hidden_layers", HF_ANY}, {"is_encoder_decoder", HF_ANY},
    {"normalize_embedding", HF_ANY}, {"static_position_embeddings", HF_ANY},
    {"add_bias_logits", HF_ANY}, {"extra_pos_embeddings", HF_ANY},
    {"classif_dropout", HF_ANY}, {"force_bos_token_to_be_generated", HF_ANY},
    /* layers skipped at random in training: tfm has no layerdrop */
    {"encoder_layerdrop", HF_DEFAULT}, {"decoder_layerdrop", HF_DEFAULT}, {NULL, 0},
};

/* Two config.json keys that tfm reads as one (encoder and decoder heads,
 * feed-forward widths) must agree. */
static int bart_same(const tfm_json_doc *doc, const char *a, int64_t va, const char *b,
                     int64_t vb, tfm_err *err)
{
    if (va == vb)
        return 0;
    const tfm_json *j = tfm_json_get(doc->root, b);
    return tfm_err_at(err, doc->name, j->line, j->col, "%s %lld differs from %s %lld: tfm's "
                      "encoder and decoder share one", b, (long long)vb, a, (long long)va);
}

/* config.json beside a BART checkpoint as the model section c, and
 * its end-of-text id. */
static int bart_config(const char *model_path, tfm_model_keys *c, int64_t *eos, tfm_err *err)
{
    char path[4200];
    tfm_hf_json_beside(model_path, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return tfm_err_set(err, "%s: no such file (a HuggingFace BART checkpoint needs "
                                "the config.json beside it)", path);
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = -1, scale, tied, before, final_ln;
    int64_t C, L, DL, NH, DNH, F, DF, P, V, start, bos, pad, forced, forced_eos;
    double drop, attn_drop, act_drop;
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        tfm_hf_keys_check(&doc, hf_bart_keys, "BartConfig", err) < 0 ||
        tfm_hf_int(&doc, "d_model", 1, 65536, -1, &C, err) < 0 ||
        tfm_hf_int(&doc, "encoder_layers", 1, 1024, -1, &L, err) < 0 ||
        tfm_hf_int(&doc, "decoder_layers", 1, 1024, -1, &DL, err) < 0 ||
        tfm_hf_int(&doc, "encoder_attention_heads", 1, 1024, -1, &NH, err) < 0 ||
        tfm_hf_int(&doc, "decoder_attention_heads", 1, 1024, -1, &DNH, err) < 0 ||
        tfm_hf_int(&doc, "encoder_ffn_dim", 1, 1 << 20, -1, &F, err) < 0 ||
        tfm_hf_int(&doc, "decoder_ffn_dim", 1, 1 << 20, -1, &DF, err) < 0 ||
        tfm_hf_int(&doc, "max_position_embeddings", 1, 1 << 20, -1, &P, err) < 0 ||
        tfm_hf_int(&doc, "vocab_size", 4, 1 << 24, -1, &V, err) < 0 ||
        tfm_hf_int(&doc, "pad_token_id", 0, V - 1, 1, &pad, err) < 0 ||
        tfm_hf_int(&doc, "bos_token_id", 0, V - 1, 0, &bos, err) < 0 ||
        tfm_hf_int(&doc, "eos_token_id", 0, V - 1, 2, eos, err) < 0 ||
        tfm_hf_int(&doc, "decoder_start_token_id", 0, V - 1, 2, &start, err) < 0 ||
        tfm_hf_int(&doc, "forced_bos_token_id", -1, V - 1, -1, &forced, err) < 0 ||
        tfm_hf_int(&doc, "forced_eos_token_id", -1, V - 1, -1, &forced_eos, err) < 0 ||
        tfm_hf_generation_ids(model_path, V, &start, eos, &forced, &forced_eos, err) < 0 ||
        tfm_hf_prob(&doc, "dropout", 0.1, &drop, err) < 0 ||
        tfm_hf_prob(&doc, "attention_dropout", 0.0, &attn_drop, err) < 0 ||
        tfm_hf_prob(&doc, "activation_dropout", 0.0, &act_drop, err) < 0 ||
        bart_same(&doc, "encoder_attention_heads", NH, "decoder_attention_heads", DNH, err) < 0 ||
        bart_same(&doc, "encoder_ffn_dim", F, "decoder_ffn_dim", DF, err) < 0 ||
        tfm_hf_bool(&doc, "scale_embedding", 0, &scale, err) < 0 ||
        tfm_hf_bool(&doc, "tie_word_embeddings", 1, &tied, err) < 0 ||
        tfm_hf_bool(&doc, "normalize_before", 0, &before, err) < 0 ||
        tfm_hf_bool(&doc, "add_final_layer_norm", 0, &final_ln, err) < 0)
        goto out;
    const tfm_json *j = tfm_json_get(doc.root, "model_type");
    if (j && !(j->type == TFM_JSON_STRING && !strcmp(j->str, "bart"))) {
        tfm_err_at(err, path, j->line, j->col, "model_type '%s' is not supported (tfm reads "
                   "bart; mbart, marian and pegasus are pre-LN or sinusoidal)",
                   j->str ? j->str : "");
        goto out;
    }
    if (before || final_ln) {
        j = tfm_json_get(doc.root, before ? "normalize_before" : "add_final_layer_norm");
        tfm_err_at(err, path, j->line, j->col, "%s true (mBART's pre-LN layout) is not "
                   "BART's: HF's BartModel ignores it, so the file was made for another model",
                   before ? "normalize_before" : "add_final_layer_norm");
        goto out;
    }
    if (C % NH) {
        j = tfm_json_get(doc.root, "encoder_attention_heads");
        tfm_err_at(err, path, j->line, j->col, "d_model %lld is not a multiple of "
                   "encoder_attention_heads %lld", (long long)C, (long long)NH);
        goto out;
    }
    /* HF's ACT2FN names */
    tfm_act act;
    j = tfm_json_get(doc.root, "activation_function");
    if (j && tfm_json_expect(&doc, j, TFM_JSON_STRING, "activation_function", err) < 0)
        goto out;
    const char *fn = j ? j->str : "gelu";
    if (!strcmp(fn, "gelu")) {
        act = TFM_ACT_GELU_EXACT;
    } else if (!strcmp(fn, "gelu_new") || !strcmp(fn, "gelu_pytorch_tanh")) {
        act = TFM_ACT_GELU_TANH;
    } else if (!strcmp(fn, "relu")) {
        act = TFM_ACT_RELU;
    } else {
        tfm_err_at(err, path, j->line, j->col, "activation_function '%s' is not supported "
                   "(tfm has gelu, gelu_new and relu)", fn);
        goto out;
    }
    /* padding is told by lengths, never by id; bos is the tokenizer's */
    (void)pad, (void)bos;
    c->kind = TFM_KIND_ENCODER_DECODER;
    c->positions = TFM_POS_LEARNED;
    c->norm = TFM_LN_POST;
    c->activation = act;
    c->ln_eps = 1e-5;
    c->bias = 1;
    c->n_layer = DL;
    c->n_enc_layer = L;
    c->n_head = NH;
    c->n_embd = C;
    c->d_ff = F;
    c->block_size = P;
    c->vocab_size = V;
    c->emb_norm = 1;
    c->emb_scale = scale;
    c->tie_embeddings = tied;
    c->tie_source = 1;
    c->decoder_start = start;
    /* HF's generate forces forced_bos_token_id (bart-large's 0, <s>) right
     * after the start token; its tokenizer begins every text with <s> */
    c->forced_bos = forced;
    c->source_bos = 1;
    /* HF's generate forces forced_eos_token_id (bart-large's 2, </s>) as
     * the last token a generation may have */
    c->forced_eos = forced_eos;
    /* BartConfig's rates: dropout on the embeddings and each residual
     * branch, attention_dropout on the attention weights,
     * activation_dropout inside the feed-forward; no final dropout */
    c->dropout = drop;
    c->attn_dropout = attn_drop;
    c->ffn_dropout = act_drop;
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

/* Layer l's Linear (out > 0: [out, in] weight and bias) or LayerNorm
 * (out 0, width in) STACK.layers.l.SRC into PREh.l.DST. */
static int bart_part(const tfm_hf_ckpt *b, const char *stack, const char *pre, int l,
                     const char *src, const char *dst, size_t out, size_t in, tfm_err *err)
{
    char s[160], d[64];
    snprintf(s, sizeof s, "%s.layers.%d.%s", stack, l, src);
    snprintf(d, sizeof d, "%sh.%d.%s", pre, l, dst);
    return out ? tfm_hf_linear(b, d, 0, s, out, in, err) : tfm_hf_norm(b, d, 0, s, in, err);
}

/* Layer l's attention ATTN ("self_attn", "encoder_attn"): its projections
 * PROJ[0..n) fused into PREh.l.DST (q|k|v into attn.c_attn, k|v into
 * xattn.c_kv). */
static int bart_fused(const tfm_hf_ckpt *b, const char *stack, const char *pre, int l,
                      const char *attn, const char *const *proj, int n, const char *dst,
                      size_t C, tfm_err *err)
{
    char s[3][160], d[64];
    const char *src[3];
    for (int k = 0; k < n; k++) {
        snprintf(s[k], sizeof s[k], "%s.layers.%d.%s.%s", stack, l, attn, proj[k]);
        src[k] = s[k];
    }
    snprintf(d, sizeof d, "%sh.%d.%s", pre, l, dst);
    return tfm_hf_fused(b, d, src, n, C, C, err);
}

/* One stack: "encoder" into "enc.", "decoder" into "" (with the
 * cross-attention); its positions, embedding norm and layers. */
static int bart_stack(const tfm_hf_ckpt *b, const char *stack, const char *pre, int n_layer,
                      int cross, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = (size_t)g->n_embd, F = (size_t)tfm_model_config_ff(g), P = (size_t)g->block_size;
    static const char *const qkv[3] = {"q_proj", "k_proj", "v_proj"};
    char d[64], s[160];
    snprintf(s, sizeof s, "%s.embed_positions.weight", stack);
    const float *pos = tfm_hf_tensor(b, s, NULL, P + 2, C, err);
    if (!pos)
        return -1;
    snprintf(d, sizeof d, "%swpe.weight", pre);
    memcpy(tfm_hf_dst(b, d, 0), pos + 2 * C, P * C * sizeof(float)); /* rows 0, 1: unread */
    snprintf(d, sizeof d, "%sln_e", pre);
    snprintf(s, sizeof s, "%s.layernorm_embedding", stack);
    if (tfm_hf_norm(b, d, 0, s, C, err) < 0)
        return -1;
    for (int l = 0; l < n_layer; l++) {
        if (bart_fused(b, stack, pre, l, "self_attn", qkv, 3, "attn.c_attn", C, err) < 0 ||
            bart_part(b, stack, pre, l, "self_attn.out_proj", "attn.c_proj", C, C, err) < 0 ||
            bart_part(b, stack, pre, l, "self_attn_layer_norm", "ln_1", 0, C, err) < 0)
            return -1;
        if (cross &&
            (bart_part(b, stack, pre, l, "encoder_attn.q_proj", "xattn.c_q", C, C, err) < 0 ||
             bart_fused(b, stack, pre, l, "encoder_attn", qkv + 1, 2, "xattn.c_kv", C, err) < 0 ||
             bart_part(b, stack, pre, l, "encoder_attn.out_proj", "xattn.c_proj", C, C, err) < 0 ||
             bart_part(b, stack, pre, l, "encoder_attn_layer_norm", "ln_x", 0, C, err) < 0))
            return -1;
        if (bart_part(b, stack, pre, l, "fc1", "mlp.c_fc", F, C, err) < 0 ||
            bart_part(b, stack, pre, l, "fc2", "mlp.c_proj", C, F, err) < 0 ||
            bart_part(b, stack, pre, l, "final_layer_norm", "ln_2", 0, C, err) < 0)
            return -1;
    }
    /* a layer beyond config.json's count would be silently dropped, and a
     * final norm (mBART's) silently skipped */
    snprintf(s, sizeof s, "%s%s.layers.%d.self_attn.q_proj.weight", b->pre, stack, n_layer);
    if (tfm_safetensors_find(b->st, s))
        return tfm_err_set(err, "%s: the checkpoint has a layer %d (tensor '%s') but "
                                "config.json says %d", b->st->name, n_layer, s, n_layer);
    snprintf(s, sizeof s, "%s%s.layer_norm.weight", b->pre, stack);
    if (tfm_safetensors_find(b->st, s))
        return tfm_err_set(err, "%s: tensor '%s': a final norm (mBART's pre-LN layout) is "
                                "not BART's", b->st->name, s);
    return 0;
}

static int bart_weights(const tfm_hf_ckpt *b, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = (size_t)g->n_embd, V = (size_t)g->vocab_size;
    char alt[64];
    /* save_pretrained keeps shared.weight of the tied three */
    snprintf(alt, sizeof alt, "%s.embed_tokens.weight",
             tfm_safetensors_find(b->st, "model.decoder.embed_tokens.weight") ||
                     tfm_safetensors_find(b->st, "decoder.embed_tokens.weight")
                 ? "decoder"
                 : "encoder");
    if (tfm_hf_copy(b, "wte.weight", 0, "shared.weight", alt, V, C, err) < 0 ||
        bart_stack(b, "encoder", "enc.", tfm_model_config_enc_layers(g), 0, err) < 0 ||
        bart_stack(b, "decoder", "", g->n_layer, 1, err) < 0)
        return -1;
    tfm_hf_ckpt top = *b;
    top.pre = ""; /* the head's tensors are outside "model." */
    if (!g->tie_embeddings &&
        tfm_hf_copy(&top, "lm_head.weight", 0, "lm_head.weight", NULL, V, C, err) < 0)
        return -1;
    /* [1, V] in the file */
    if (g->head_bias) {
        const float *fb = tfm_hf_tensor(&top, "final_logits_bias", NULL, 1, V, err);
        if (!fb)
            return -1;
        memcpy(tfm_hf_dst(b, "final_logits_bias", 0), fb, V * sizeof(float));
    }
    return 0;
}

/* The config mapper: config.json, and a head bias where the file has one
 * (BartModel's files have no head, and HF's head starts with a zero bias);
 * the end-of-text id is config.json's. */
static int bart_describe(const tfm_safetensors *st, const char *pre, tfm_model_keys *c,
                         tfm_model_config *g, int64_t *eos, tfm_err *err)
{
    (void)pre;
    char cfg_path[4200];
    tfm_hf_json_beside(st->name, "config.json", cfg_path, sizeof cfg_path);
    if (bart_config(st->name, c, eos, err) < 0)
        return -1;
    c->head_bias = tfm_safetensors_find(st, "final_logits_bias") != NULL;
    if (tfm_model_config_from_keys(c, NULL, g, err) < 0)
        return tfm_err_prefix(err, "%s", cfg_path);
    return 0;
}

static const char *const bart_types[] = {"bart", NULL};

const tfm_convert_family tfm_convert_bart = {
    .name = "bart",
    .id = TFM_HF_BART,
    .reads = "BART (bart)",
    .what = "BART",
    .model_types = bart_types,
    .detect = bart_prefix,
    .config = bart_describe,
    .weights = bart_weights,
};
