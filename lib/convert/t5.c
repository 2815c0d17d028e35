/* HuggingFace T5 and mT5 checkpoints (convert/convert.h). */
#include "config.h"

#include "convert/convert.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/file.h"
/* A T5ForConditionalGeneration safetensors file as save_pretrained writes
 * it (t5-small's layout: shared.weight, no lm_head.weight when tied; v1.1
 * and flan-t5's: gated-gelu, an untied lm_head.weight, num_decoder_layers
 * that may differ from num_layers) with config.json beside it becomes tfm's
 * encoder-decoder (model/transformer.h): pre-norm blocks with RMSNorm
 * (layer_norm_epsilon, default 1e-6), T5 relative positions with one table
 * per stack (block 0's relative_attention_bias, [buckets, heads] there,
 * [heads, buckets] in tfm), unscaled attention, no biases, the feed-forward
 * of feed_forward_proj, the source embedding tied to the target's
 * (shared.weight; encoder.embed_tokens.weight or decoder.embed_tokens.weight
 * when a file lacks it), the LM head tied unless lm_head.weight differs
 * from it (t5_head_tied), reading the hidden states times d_model^-0.5
 * (head_scale) unless scale_decoder_outputs (transformers 5) or
 * tie_word_embeddings (4) is false.  HF's
 * Linears are [out, in], tfm's [in, out], and tfm's q|k|v and k|v are
 * fused: the weights are copied.  Old files also carry a
 * decoder.block.0.layer.1.EncDecAttention.relative_attention_bias that HF
 * never uses (cross-attention has no position bias): it is ignored. */

static int t5_is(const tfm_safetensors *st)
{
    return !tfm_hf_format(st) &&
           tfm_safetensors_find(st, "encoder.block.0.layer.0.SelfAttention.q.weight") != NULL;
}


static const tfm_hf_key hf_t5_keys[] = {
    {"model_type", HF_READ}, {"d_model", HF_READ}, {"d_kv", HF_READ}, {"d_ff", HF_READ},
    {"num_layers", HF_READ}, {"num_decoder_layers", HF_READ}, {"num_heads", HF_READ},
    {"vocab_size", HF_READ}, {"relative_attention_num_buckets", HF_READ},
    {"relative_attention_max_distance", HF_READ}, {"n_positions", HF_READ},
    {"decoder_start_token_id", HF_READ}, {"eos_token_id", HF_READ},
    {"forced_eos_token_id", HF_READ}, {"dropout_rate", HF_READ},
    {"layer_norm_epsilon", HF_READ}, {"feed_forward_proj", HF_READ},
    {"tie_word_embeddings", HF_READ}, {"dense_act_fn", HF_READ}, {"is_gated_act", HF_READ},
    {"scale_decoder_outputs", HF_READ},
    {"is_encoder_decoder", HF_ANY}, {"forced_bos_token_id", HF_DEFAULT}, {NULL, 0},
};

/* config.json beside a T5 checkpoint as the model section c, and its
 * end-of-text id. */
static int t5_config(const char *model_path, tfm_model_keys *c, int64_t *eos, tfm_err *err)
{
    char path[4200];
    tfm_hf_json_beside(model_path, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return tfm_err_set(err, "%s: no such file (a HuggingFace T5 checkpoint needs "
                                "the config.json beside it)", path);
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = -1;
    int64_t C, KV, F, L, DL, NH, V, NB, MD, P, start, pad, forced_eos;
    double drop;
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        tfm_hf_keys_check(&doc, hf_t5_keys, "T5Config", err) < 0 ||
        tfm_hf_int(&doc, "d_model", 1, 65536, -1, &C, err) < 0 ||
        tfm_hf_int(&doc, "d_kv", 1, 65536, -1, &KV, err) < 0 ||
        tfm_hf_int(&doc, "d_ff", 1, 1 << 20, -1, &F, err) < 0 ||
        tfm_hf_int(&doc, "num_layers", 1, 1024, -1, &L, err) < 0 ||
        tfm_hf_int(&doc, "num_decoder_layers", 1, 1024, L, &DL, err) < 0 ||
        tfm_hf_int(&doc, "num_heads", 1, 1024, -1, &NH, err) < 0 ||
        tfm_hf_int(&doc, "vocab_size", 2, 1 << 24, -1, &V, err) < 0 ||
        tfm_hf_int(&doc, "relative_attention_num_buckets", 4, 4096, 32, &NB, err) < 0 ||
        tfm_hf_int(&doc, "relative_attention_max_distance", 2, 1 << 20, 128, &MD, err) < 0 ||
        tfm_hf_int(&doc, "n_positions", 1, 1 << 20, 512, &P, err) < 0 ||
        tfm_hf_int(&doc, "decoder_start_token_id", 0, V - 1, 0, &start, err) < 0 ||
        tfm_hf_int(&doc, "eos_token_id", 0, V - 1, 1, eos, err) < 0 ||
        tfm_hf_int(&doc, "pad_token_id", 0, V - 1, 0, &pad, err) < 0 ||
        tfm_hf_int(&doc, "forced_eos_token_id", -1, V - 1, -1, &forced_eos, err) < 0 ||
        tfm_hf_prob(&doc, "dropout_rate", 0.1, &drop, err) < 0 ||
        tfm_hf_generation_ids(model_path, V, &start, eos, NULL, &forced_eos, err) < 0)
        goto out;
    const tfm_json *j = tfm_json_get(doc.root, "model_type");
    if (j && !(j->type == TFM_JSON_STRING && (!strcmp(j->str, "t5") || !strcmp(j->str, "mt5")))) {
        tfm_err_at(err, path, j->line, j->col, "model_type '%s' is not supported (tfm reads "
                   "t5 and mt5)", j->str ? j->str : "");
        goto out;
    }
    if (NH * KV > 1 << 20) {
        j = tfm_json_get(doc.root, "d_kv");
        tfm_err_at(err, path, j->line, j->col, "num_heads %lld x d_kv %lld is too wide",
                   (long long)NH, (long long)KV);
        goto out;
    }
    double eps = 1e-6;
    j = tfm_json_get(doc.root, "layer_norm_epsilon");
    if (j) {
        if (tfm_json_expect(&doc, j, TFM_JSON_NUMBER, "layer_norm_epsilon", err) < 0)
            goto out;
        if (!(j->num >= 1e-12 && j->num < 1)) {
            tfm_err_at(err, path, j->line, j->col, "layer_norm_epsilon must be in [1e-12, 1), "
                       "not %s", j->str);
            goto out;
        }
        eps = j->num;
    }
    /* HF's T5Config: "relu", "gelu", "gated-gelu" (GELU-tanh), "gated-silu", ... */
    tfm_ffn_kind ffn = TFM_FFN_PLAIN;
    tfm_act act = TFM_ACT_RELU;
    j = tfm_json_get(doc.root, "feed_forward_proj");
    if (j && tfm_json_expect(&doc, j, TFM_JSON_STRING, "feed_forward_proj", err) < 0)
        goto out;
    const char *proj = j ? j->str : "relu";
    if (!strcmp(proj, "relu")) {
        act = TFM_ACT_RELU;
    } else if (!strcmp(proj, "gelu")) {
        act = TFM_ACT_GELU_EXACT;
    } else if (!strcmp(proj, "gelu_new") || !strcmp(proj, "gelu_pytorch_tanh")) {
        act = TFM_ACT_GELU_TANH;
    } else if (!strcmp(proj, "gated-gelu") || !strcmp(proj, "gated-gelu_new")) {
        ffn = TFM_FFN_GEGLU; /* GELU-tanh, as HF maps gated-gelu to gelu_new */
        act = TFM_ACT_GELU_TANH;
    } else if (!strcmp(proj, "gated-silu")) {
        ffn = TFM_FFN_SWIGLU;
    } else {
        tfm_err_at(err, path, j->line, j->col, "feed_forward_proj '%s' is not supported (tfm "
                   "has relu, gelu, gelu_new, gated-gelu and gated-silu)", proj);
        goto out;
    }
    /* T5Config derives these from feed_forward_proj, but a config.json's
     * own values win in HF (set after it): they must say the same */
    const char *fn = !strcmp(proj, "gated-gelu") ? "gelu_new" : strrchr(proj, '-') ? strrchr(proj, '-') + 1 : proj;
    j = tfm_json_get(doc.root, "dense_act_fn");
    if (j && !(j->type == TFM_JSON_STRING && !strcmp(j->str, fn))) {
        tfm_err_at(err, path, j->line, j->col, "dense_act_fn '%s' differs from feed_forward_proj "
                   "'%s' (which means %s): tfm reads only feed_forward_proj's", j->str ? j->str : "",
                   proj, fn);
        goto out;
    }
    j = tfm_json_get(doc.root, "is_gated_act");
    if (j && !(j->type == TFM_JSON_BOOL && j->boolean == tfm_ffn_gated(ffn))) {
        tfm_err_at(err, path, j->line, j->col, "is_gated_act %s differs from feed_forward_proj "
                   "'%s'", j->str ? j->str : "", proj);
        goto out;
    }
    /* transformers 5 reads tie_word_embeddings false (v1.1's) as "no
     * d_model^-0.5 before the head" (scale_decoder_outputs, which it then
     * writes) and ties the head unless the file holds an lm_head.weight
     * that differs: t5_load decides the tie from the tensors */
    int tied, scale;
    if (tfm_hf_bool(&doc, "tie_word_embeddings", 1, &tied, err) < 0 ||
        tfm_hf_bool(&doc, "scale_decoder_outputs", tied, &scale, err) < 0)
        goto out;
    (void)pad; /* padding is told by lengths, never by id */
    j = tfm_json_get(doc.root, "architectures");
    int enc_only = j && j->type == TFM_JSON_ARRAY && j->n == 1 &&
                   j->items[0]->type == TFM_JSON_STRING &&
                   !strcmp(j->items[0]->str, "T5EncoderModel");
    c->kind = enc_only ? TFM_KIND_ENCODER : TFM_KIND_ENCODER_DECODER;
    c->positions = TFM_POS_T5;
    c->norm = TFM_LN_PRE;
    c->norm_type = TFM_NORM_RMS;
    c->ffn = ffn;
    c->activation = act;
    c->attn_scale = 0;
    c->bias = 0;
    c->ln_eps = eps;
    c->n_layer = DL;
    c->n_enc_layer = L;
    c->n_head = NH;
    c->n_embd = C;
    /* d_kv need not be d_model/num_heads (v1.1 and flan-t5 small: 6 x 64
     * over 512; t5-3b, t5-11b) */
    c->head_dim = KV;
    c->d_ff = F;
    c->block_size = P;
    c->vocab_size = V;
    c->t5_buckets = NB;
    c->t5_max_distance = MD;
    c->tie_embeddings = tied;
    c->tie_source = 1;
    c->head_scale = scale;
    c->decoder_start = start;
    c->forced_eos = forced_eos;
    /* HF's T5 drops at dropout_rate everywhere: embeddings, attention
     * weights, each residual branch, inside the feed-forward and after each
     * stack's final norm (attn_dropout and emb_dropout: -1, the same) */
    c->dropout = drop;
    c->ffn_dropout = drop;
    c->final_dropout = drop;
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

/* One relative-bias table: HF's [buckets, heads] into tfm's [heads, buckets]. */
static int t5_rel_bias(const tfm_hf_ckpt *b, const char *dst, const char *stack, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    char src[128];
    snprintf(src, sizeof src, "%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
             stack);
    return tfm_hf_cols(b, dst, (size_t)g->t5_buckets, 0, src, (size_t)g->t5_buckets,
                     (size_t)g->n_head, err);
}

/* "STACK.block.L.layer.N.PART" (HF) and "PREh.L.PART" (tfm). */
static const char *t5_src(char s[128], const char *stack, int l, int n, const char *part)
{
    snprintf(s, 128, "%s.block.%d.layer.%d.%s", stack, l, n, part);
    return s;
}

static const char *t5_dst(char d[64], const char *pre, int l, const char *part)
{
    snprintf(d, 64, "%sh.%d.%s", pre, l, part);
    return d;
}

/* The blocks of one stack ("encoder" into "enc.h.N.", "decoder" into
 * "h.N.": self-attention in layer 0, cross-attention in the decoder's
 * layer 1, the feed-forward last), then its final norm. */
static int t5_stack(const tfm_hf_ckpt *b, const char *stack, const char *pre, int n_layer,
                    int cross, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = (size_t)g->n_embd, F = (size_t)tfm_model_config_ff(g);
    size_t D = (size_t)tfm_model_config_attn_dim(g); /* HF's inner_dim */
    int gated = tfm_ffn_gated(g->ffn), ff = cross ? 2 : 1;
    char d[64], s[128];
    for (int l = 0; l < n_layer; l++) {
        if (tfm_hf_copy(b, t5_dst(d, pre, l, "ln_1.weight"), 0,
                      t5_src(s, stack, l, 0, "layer_norm.weight"), NULL, C, 0, err) < 0 ||
            tfm_hf_cols(b, t5_dst(d, pre, l, "attn.c_attn.weight"), 3 * D, 0,
                      t5_src(s, stack, l, 0, "SelfAttention.q.weight"), D, C, err) < 0 ||
            tfm_hf_cols(b, t5_dst(d, pre, l, "attn.c_attn.weight"), 3 * D, D,
                      t5_src(s, stack, l, 0, "SelfAttention.k.weight"), D, C, err) < 0 ||
            tfm_hf_cols(b, t5_dst(d, pre, l, "attn.c_attn.weight"), 3 * D, 2 * D,
                      t5_src(s, stack, l, 0, "SelfAttention.v.weight"), D, C, err) < 0 ||
            tfm_hf_cols(b, t5_dst(d, pre, l, "attn.c_proj.weight"), C, 0,
                      t5_src(s, stack, l, 0, "SelfAttention.o.weight"), C, D, err) < 0)
            return -1;
        if (cross &&
            (tfm_hf_copy(b, t5_dst(d, pre, l, "ln_x.weight"), 0,
                       t5_src(s, stack, l, 1, "layer_norm.weight"), NULL, C, 0, err) < 0 ||
             tfm_hf_cols(b, t5_dst(d, pre, l, "xattn.c_q.weight"), D, 0,
                       t5_src(s, stack, l, 1, "EncDecAttention.q.weight"), D, C, err) < 0 ||
             tfm_hf_cols(b, t5_dst(d, pre, l, "xattn.c_kv.weight"), 2 * D, 0,
                       t5_src(s, stack, l, 1, "EncDecAttention.k.weight"), D, C, err) < 0 ||
             tfm_hf_cols(b, t5_dst(d, pre, l, "xattn.c_kv.weight"), 2 * D, D,
                       t5_src(s, stack, l, 1, "EncDecAttention.v.weight"), D, C, err) < 0 ||
             tfm_hf_cols(b, t5_dst(d, pre, l, "xattn.c_proj.weight"), C, 0,
                       t5_src(s, stack, l, 1, "EncDecAttention.o.weight"), C, D, err) < 0))
            return -1;
        if (tfm_hf_copy(b, t5_dst(d, pre, l, "ln_2.weight"), 0,
                      t5_src(s, stack, l, ff, "layer_norm.weight"), NULL, C, 0, err) < 0 ||
            tfm_hf_cols(b, t5_dst(d, pre, l, gated ? "mlp.wi_0.weight" : "mlp.c_fc.weight"), F, 0,
                      t5_src(s, stack, l, ff, gated ? "DenseReluDense.wi_0.weight"
                                                    : "DenseReluDense.wi.weight"),
                      F, C, err) < 0 ||
            (gated && tfm_hf_cols(b, t5_dst(d, pre, l, "mlp.wi_1.weight"), F, 0,
                                t5_src(s, stack, l, ff, "DenseReluDense.wi_1.weight"), F, C,
                                err) < 0) ||
            tfm_hf_cols(b, t5_dst(d, pre, l, "mlp.c_proj.weight"), C, 0,
                      t5_src(s, stack, l, ff, "DenseReluDense.wo.weight"), C, F, err) < 0)
            return -1;
    }
    /* a block beyond config.json's count, or a bias table in a later block
     * (umT5's, one per layer), would be silently dropped */
    if (tfm_safetensors_find(b->st, t5_src(s, stack, n_layer, 0, "SelfAttention.q.weight")))
        return tfm_err_set(err, "%s: the checkpoint has a block %d (tensor '%s') but "
                                "config.json says %d", b->st->name, n_layer, s, n_layer);
    if (n_layer > 1 &&
        tfm_safetensors_find(b->st, t5_src(s, stack, 1, 0,
                                           "SelfAttention.relative_attention_bias.weight")))
        return tfm_err_set(err, "%s: tensor '%s': a relative bias in every block (umT5) is "
                                "not supported; T5 has one, in block 0", b->st->name, s);
    snprintf(d, sizeof d, "%sln_f.weight", pre);
    snprintf(s, sizeof s, "%s.final_layer_norm.weight", stack);
    return tfm_hf_copy(b, d, 0, s, NULL, C, 0, err);
}

static int t5_weights(const tfm_hf_ckpt *b, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = (size_t)g->n_embd, V = (size_t)g->vocab_size;
    /* save_pretrained keeps shared.weight of the tied three */
    const char *alt = tfm_safetensors_find(b->st, "decoder.embed_tokens.weight") &&
                              !tfm_safetensors_find(b->st, "encoder.embed_tokens.weight")
                          ? "decoder.embed_tokens.weight"
                          : "encoder.embed_tokens.weight";
    if (g->kind == TFM_KIND_ENCODER) /* T5EncoderModel's: the encoder stack alone */
        return tfm_hf_copy(b, "wte.weight", 0, "shared.weight", alt, V, C, err) < 0 ||
                       t5_rel_bias(b, "rel_bias.weight", "encoder", err) < 0 ||
                       t5_stack(b, "encoder", "", g->n_layer, 0, err) < 0
                   ? -1
                   : 0;
    if (tfm_hf_copy(b, "wte.weight", 0, "shared.weight", alt, V, C, err) < 0 ||
        t5_rel_bias(b, "enc.rel_bias.weight", "encoder", err) < 0 ||
        t5_rel_bias(b, "rel_bias.weight", "decoder", err) < 0 ||
        t5_stack(b, "encoder", "enc.", tfm_model_config_enc_layers(g), 0, err) < 0 ||
        t5_stack(b, "decoder", "", g->n_layer, 1, err) < 0)
        return -1;
    if (!g->tie_embeddings &&
        tfm_hf_copy(b, "lm_head.weight", 0, "lm_head.weight", NULL, V, C, err) < 0)
        return -1;
    return 0;
}

/* Whether a T5 file's head is its embedding, as transformers 5 ties it:
 * no lm_head.weight, or one equal to the embedding (torch's .bin files and
 * old save_pretrained kept both); tie_word_embeddings no longer decides. */
static int t5_head_tied(const tfm_safetensors *st)
{
    const tfm_st_tensor *h = tfm_safetensors_find(st, "lm_head.weight");
    if (!h)
        return 1;
    const tfm_st_tensor *e = tfm_safetensors_find(st, "shared.weight");
    if (!e)
        e = tfm_safetensors_find(st, "decoder.embed_tokens.weight");
    if (!e)
        e = tfm_safetensors_find(st, "encoder.embed_tokens.weight");
    return e && e->dtype == h->dtype && e->nbytes == h->nbytes && e->ndim == h->ndim &&
           !memcmp(e->shape, h->shape, sizeof e->shape[0] * (size_t)h->ndim) &&
           !memcmp(e->data, h->data, h->nbytes);
}

/* The config mapper: config.json, the head's tie as the tensors say, and
 * T5EncoderModel's encoder stack alone (tfm's encoder with T5's
 * bidirectional positions, tfm-embed; no head); the end-of-text id is
 * config.json's. */
static int t5_describe(const tfm_safetensors *st, const char *pre, tfm_model_keys *c,
                       tfm_model_config *g, int64_t *eos, tfm_err *err)
{
    (void)pre;
    char cfg_path[4200];
    tfm_hf_json_beside(st->name, "config.json", cfg_path, sizeof cfg_path);
    if (t5_config(st->name, c, eos, err) < 0)
        return -1;
    c->tie_embeddings = t5_head_tied(st);
    if (c->kind == TFM_KIND_ENCODER) {
        c->n_layer = c->n_enc_layer;
        c->n_enc_layer = 0;
        c->decoder_start = -1;
        c->forced_eos = -1;
        c->head_scale = 0;
        c->tie_embeddings = 1;
    }
    if (tfm_model_config_from_keys(c, NULL, g, err) < 0)
        return tfm_err_prefix(err, "%s", cfg_path);
    return 0;
}

static const char *t5_detect(const tfm_safetensors *st)
{
    return t5_is(st) ? "" : NULL;
}

static const char *const t5_types[] = {"t5", "mt5", NULL};

const tfm_convert_family tfm_convert_t5 = {
    .name = "t5",
    .id = TFM_HF_T5,
    .reads = "T5 and mT5 (t5, mt5)",
    .what = "T5",
    .model_types = t5_types,
    .detect = t5_detect,
    .config = t5_describe,
    .weights = t5_weights,
    .t5_tokenizer = 1,
};
