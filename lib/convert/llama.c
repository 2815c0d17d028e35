/* HuggingFace Llama-family checkpoints (convert/convert.h):
 * LlamaForCausalLM, Qwen2ForCausalLM and MistralForCausalLM.
 *
 * All three are tfm's decoder (model/transformer.h) with pre-norm blocks,
 * RMSNorm (rms_norm_eps), RoPE in halves (HF's rotate_half) of base
 * rope_theta on every head's head_dim columns, SwiGLU feed-forwards
 * (gate_proj the gate, up_proj the linear input, down_proj the
 * projection), grouped-query attention (num_key_value_heads) and no
 * position table.  Biases: Qwen2's q, k and v projections; Llama's
 * attention_bias (q, k, v, o) and mlp_bias; tfm's model.bias then gives
 * every linear a bias, those HF lacks staying 0.  Mistral's
 * sliding_window (and Qwen2's with use_sliding_window on every layer) is
 * model.attention_window.  The head is untied unless tie_word_embeddings.
 * HF's Linears are [out, in], tfm's [in, out], and q|k|v is fused: the
 * weights are copied.  Refused with a message naming config.json's key:
 * rope types other than default, linear and llama3, pretraining_tp other
 * than 1, an activation other than silu, Qwen2's window on some layers
 * only. */
#include "config.h"

#include "convert/llama.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model/file.h"

static const tfm_hf_key hf_llama_keys[] = {
    {"model_type", HF_READ}, {"vocab_size", HF_READ}, {"hidden_size", HF_READ},
    {"intermediate_size", HF_READ}, {"num_hidden_layers", HF_READ},
    {"num_attention_heads", HF_READ}, {"num_key_value_heads", HF_READ},
    {"head_dim", HF_READ}, {"hidden_act", HF_READ}, {"max_position_embeddings", HF_READ},
    {"rms_norm_eps", HF_READ}, {"rope_theta", HF_READ}, {"rope_parameters", HF_READ},
    {"rope_scaling", HF_READ}, {"tie_word_embeddings", HF_READ},
    {"attention_bias", HF_READ}, {"mlp_bias", HF_READ}, {"attention_dropout", HF_READ},
    {"pretraining_tp", HF_READ}, {"sliding_window", HF_READ},
    {"use_sliding_window", HF_READ}, {"max_window_layers", HF_READ}, {"layer_types", HF_READ},
    {"eos_token_id", HF_READ}, {"forced_eos_token_id", HF_READ}, {"bos_token_id", HF_ANY}, {"initializer_range", HF_ANY},
    {"use_cache", HF_ANY}, {NULL, 0},
};

/* A number of the rope parameters object s, in (min, ∞); absent: def. */
static int rope_num(const tfm_json_doc *doc, const tfm_json *s, const char *key, double def,
                    double min, double *out, tfm_err *err)
{
    const tfm_json *j = tfm_json_get(s, key);
    *out = def;
    if (!j || j->type == TFM_JSON_NULL)
        return 0;
    if (j->type != TFM_JSON_NUMBER || !(j->num > min))
        return tfm_err_at(err, doc->name, j->line, j->col, "%s must be a number above %g", key,
                          min);
    *out = j->num;
    return 0;
}

/* The rope base and scaling of a config.json (transformers 5's
 * rope_parameters, 4's rope_theta and rope_scaling) into c: the default
 * rotation, linear and llama3 scaling are tfm's (nn/position.h); dynamic
 * (whose frequencies change with the length of each input) and yarn (which
 * also scales the attention) are refused. */
static int llama_rope(const tfm_json_doc *doc, int64_t P, tfm_model_keys *c, tfm_err *err)
{
    const tfm_json *p = tfm_json_get(doc->root, "rope_parameters");
    const tfm_json *s = tfm_json_get(doc->root, "rope_scaling");
    const tfm_json *t = tfm_json_get(doc->root, "rope_theta");
    if (p && p->type == TFM_JSON_OBJECT) {
        t = tfm_json_get(p, "rope_theta") ? tfm_json_get(p, "rope_theta") : t;
        s = p;
    }
    c->rope_base = 10000.0;
    if (t && t->type != TFM_JSON_NULL) {
        if (t->type != TFM_JSON_NUMBER || !(t->num > 1.0))
            return tfm_err_at(err, doc->name, t->line, t->col, "rope_theta must be a number "
                              "above 1");
        c->rope_base = t->num;
    }
    if (s && s->type != TFM_JSON_NULL && s->type != TFM_JSON_OBJECT)
        return tfm_err_at(err, doc->name, s->line, s->col, "rope_scaling must be an object");
    const tfm_json *type = s && s->type == TFM_JSON_OBJECT
                               ? (tfm_json_get(s, "rope_type") ? tfm_json_get(s, "rope_type")
                                                               : tfm_json_get(s, "type"))
                               : NULL;
    const char *name = !type ? "default" : type->type == TFM_JSON_STRING ? type->str : "?";
    c->rope_scaling = TFM_ROPE_DEFAULT;
    if (!strcmp(name, "default"))
        return 0;
    if (strcmp(name, "linear") && strcmp(name, "llama3"))
        return tfm_err_at(err, doc->name, type->line, type->col, "rope type '%s' is not "
                          "supported (tfm has default, linear and llama3; dynamic and yarn "
                          "are not)", name);
    double low, high, orig;
    if (rope_num(doc, s, "factor", 1.0, 0.0, &c->rope_factor, err) < 0 ||
        rope_num(doc, s, "low_freq_factor", 1.0, 0.0, &low, err) < 0 ||
        rope_num(doc, s, "high_freq_factor", 4.0, 0.0, &high, err) < 0 ||
        rope_num(doc, s, "original_max_position_embeddings", (double)P, 0.0, &orig, err) < 0)
        return -1;
    c->rope_scaling = !strcmp(name, "linear") ? TFM_ROPE_LINEAR : TFM_ROPE_LLAMA3;
    c->rope_low_freq_factor = low;
    c->rope_high_freq_factor = high;
    c->rope_original_context = (int64_t)orig;
    if (c->rope_scaling == TFM_ROPE_LLAMA3 && !(high > low))
        return tfm_err_at(err, doc->name, s->line, s->col, "high_freq_factor (%g) must be above "
                          "low_freq_factor (%g)", high, low);
    return 0;
}

/* Mistral's sliding_window, Qwen2's when use_sliding_window holds for
 * every layer: the window, or 0. */
static int llama_window(const tfm_json_doc *doc, const char *type, int64_t L, int64_t P,
                        int64_t *window, tfm_err *err)
{
    *window = 0;
    int use = !strcmp(type, "mistral");
    if (!strcmp(type, "qwen2") && tfm_hf_bool(doc, "use_sliding_window", 0, &use, err) < 0)
        return -1;
    const tfm_json *lt = tfm_json_get(doc->root, "layer_types");
    if (lt && lt->type == TFM_JSON_ARRAY) {
        int sliding = 0;
        for (size_t i = 0; i < lt->n; i++)
            sliding += lt->items[i]->type == TFM_JSON_STRING &&
                       !strcmp(lt->items[i]->str, "sliding_attention");
        if (sliding && sliding != (int)lt->n)
            return tfm_err_at(err, doc->name, lt->line, lt->col, "layer_types mixes sliding "
                              "and full attention: tfm's window is the same in every layer");
        use = use || sliding;
    }
    if (!use)
        return 0;
    if (!strcmp(type, "qwen2")) {
        int64_t mwl;
        if (tfm_hf_int(doc, "max_window_layers", 0, 1 << 20, L, &mwl, err) < 0)
            return -1;
        /* Qwen2 slides only in layers from max_window_layers on */
        if (mwl > 0 && mwl < L) {
            const tfm_json *j = tfm_json_get(doc->root, "max_window_layers");
            return tfm_err_at(err, doc->name, j->line, j->col, "max_window_layers %lld of %lld "
                              "layers: a window in some layers only is not supported",
                              (long long)mwl, (long long)L);
        }
        if (mwl >= L)
            return 0;
    }
    int64_t w;
    if (tfm_hf_int(doc, "sliding_window", 0, 1 << 30, 0, &w, err) < 0)
        return -1;
    *window = w < P ? w : 0; /* a window of the whole context is none */
    return 0;
}

void tfm_llama_config_into(const tfm_llama_dims *d, tfm_model_keys *c)
{
    c->kind = TFM_KIND_DECODER;
    c->positions = TFM_POS_ROPE;
    c->rope_base = d->base;
    c->norm = TFM_LN_PRE;
    c->norm_type = TFM_NORM_RMS;
    c->ffn = TFM_FFN_SWIGLU;
    c->attn_scale = 1;
    c->bias = d->bias;
    c->ln_eps = d->eps;
    c->n_layer = d->L;
    c->n_head = d->NH;
    c->n_kv_head = d->NKV;
    c->n_embd = d->C;
    c->head_dim = d->HS;
    c->d_ff = d->F;
    c->block_size = d->P;
    c->vocab_size = d->V;
    c->window = d->window;
    c->tie_embeddings = d->tied;
    c->dropout = 0;
    c->attn_dropout = d->attn_dropout;
    c->emb_dropout = 0;
    c->forced_eos = d->forced_eos;
}

static int llama_describe(const tfm_safetensors *st, const char *pre, tfm_model_keys *c,
                          tfm_model_config *g, int64_t *eos, tfm_err *err)
{
    (void)pre;
    char path[4200];
    tfm_hf_json_beside(st->name, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return tfm_err_set(err, "%s: no such file (a HuggingFace Llama-family checkpoint "
                                "needs the config.json beside it)", path);
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = -1;
    int64_t V, C, F, L, NH, NKV, HS, P, tp, window, start = 0, forced_eos;
    double eps, drop;
    int tied, abias, mbias;
    const tfm_json *mt = tfm_json_get(doc.root, "model_type");
    const char *type = mt && mt->type == TFM_JSON_STRING ? mt->str : "llama";
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        tfm_hf_keys_check(&doc, hf_llama_keys, "LlamaConfig", err) < 0 ||
        tfm_hf_int(&doc, "vocab_size", 2, 1 << 24, -1, &V, err) < 0 ||
        tfm_hf_int(&doc, "hidden_size", 1, 65536, -1, &C, err) < 0 ||
        tfm_hf_int(&doc, "intermediate_size", 1, 1 << 20, -1, &F, err) < 0 ||
        tfm_hf_int(&doc, "num_hidden_layers", 1, 1024, -1, &L, err) < 0 ||
        tfm_hf_int(&doc, "num_attention_heads", 1, 1024, -1, &NH, err) < 0 ||
        tfm_hf_int(&doc, "num_key_value_heads", 1, NH, NH, &NKV, err) < 0 ||
        tfm_hf_int(&doc, "head_dim", 1, 65536, C / NH, &HS, err) < 0 ||
        tfm_hf_int(&doc, "max_position_embeddings", 1, 1 << 20, 2048, &P, err) < 0 ||
        tfm_hf_int(&doc, "pretraining_tp", 1, 1, 1, &tp, err) < 0 ||
        tfm_hf_int(&doc, "eos_token_id", -1, V - 1, -1, eos, err) < 0 ||
        tfm_hf_int(&doc, "forced_eos_token_id", -1, V - 1, -1, &forced_eos, err) < 0 ||
        tfm_hf_prob(&doc, "attention_dropout", 0.0, &drop, err) < 0 ||
        tfm_hf_bool(&doc, "tie_word_embeddings", 0, &tied, err) < 0 ||
        tfm_hf_bool(&doc, "attention_bias", 0, &abias, err) < 0 ||
        tfm_hf_bool(&doc, "mlp_bias", 0, &mbias, err) < 0 ||
        llama_rope(&doc, P, c, err) < 0 ||
        llama_window(&doc, type, L, P, &window, err) < 0 ||
        tfm_hf_generation_ids(st->name, V, &start, eos, NULL, &forced_eos, err) < 0)
        goto out;
    const tfm_json *j = tfm_json_get(doc.root, "hidden_act");
    if (j && !(j->type == TFM_JSON_STRING && !strcmp(j->str, "silu"))) {
        tfm_err_at(err, path, j->line, j->col, "hidden_act '%s' is not supported (tfm's "
                   "SwiGLU takes silu)", j->type == TFM_JSON_STRING ? j->str : "?");
        goto out;
    }
    j = tfm_json_get(doc.root, "rms_norm_eps");
    eps = j && j->type == TFM_JSON_NUMBER ? j->num : 1e-6;
    if (!(eps >= 1e-12 && eps < 1)) {
        tfm_err_at(err, path, j->line, j->col, "rms_norm_eps must be in [1e-12, 1)");
        goto out;
    }
    if (NH % NKV) {
        j = tfm_json_get(doc.root, "num_key_value_heads");
        tfm_err_at(err, path, j->line, j->col, "num_key_value_heads %lld must divide "
                   "num_attention_heads %lld", (long long)NKV, (long long)NH);
        goto out;
    }
    const tfm_llama_dims dims = {
        .V = V, .C = C, .F = F, .L = L, .NH = NH, .NKV = NKV, .HS = HS, .P = P,
        .window = window, .forced_eos = forced_eos, .eps = eps, .base = c->rope_base,
        .attn_dropout = drop, .tied = tied,
        .bias = !strcmp(type, "qwen2") || abias || mbias,
    };
    tfm_llama_config_into(&dims, c); /* the scaling stays llama_rope's */
    if (tfm_model_config_from_keys(c, NULL, g, err) < 0) {
        tfm_err_prefix(err, "%s", path);
        goto out;
    }
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

/* SRC's bias [out] (present: Qwen2's q|k|v, attention_bias, mlp_bias)
 * into DST's bias from column col; absent: DST keeps its zeros. */
static int llama_bias(const tfm_hf_ckpt *b, const char *dst, size_t col, const char *src,
                      size_t out, tfm_err *err)
{
    char name[160];
    snprintf(name, sizeof name, "%s%s", b->pre, src);
    if (!tfm_safetensors_find(b->st, name))
        return 0;
    const float *v = tfm_hf_tensor(b, src, NULL, out, 0, err);
    if (!v)
        return -1;
    memcpy(tfm_hf_dst(b, dst, 0) + col, v, out * sizeof(float));
    return 0;
}

static int llama_weights(const tfm_hf_ckpt *b, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    const tfm_block blk = tfm_model_block(g);
    const size_t C = (size_t)g->n_embd, V = (size_t)g->vocab_size;
    const size_t F = (size_t)tfm_model_config_ff(g);
    const size_t D = (size_t)tfm_block_q_dim(&blk), K = (size_t)tfm_block_kv_dim(&blk);
    const size_t QKV = (size_t)tfm_block_qkv_dim(&blk);
    static const char *const qkv[3] = {"q_proj", "k_proj", "v_proj"};
    static const struct { const char *dst, *src; int attn; } lin[] = {
        {"attn.c_proj", "self_attn.o_proj", 1}, {"mlp.wi_0", "mlp.gate_proj", 0},
        {"mlp.wi_1", "mlp.up_proj", 0}, {"mlp.c_proj", "mlp.down_proj", 0},
    };
    char d[64], db[64], s[128], sb[128];
    if (tfm_hf_copy(b, "wte.weight", 0, "embed_tokens.weight", NULL, V, C, err) < 0 ||
        tfm_hf_copy(b, "ln_f.weight", 0, "norm.weight", NULL, C, 0, err) < 0)
        return -1;
    for (int l = 0; l < g->n_layer; l++) {
        snprintf(d, sizeof d, "h.%d.ln_1.weight", l);
        snprintf(s, sizeof s, "layers.%d.input_layernorm.weight", l);
        if (tfm_hf_copy(b, d, 0, s, NULL, C, 0, err) < 0)
            return -1;
        snprintf(d, sizeof d, "h.%d.ln_2.weight", l);
        snprintf(s, sizeof s, "layers.%d.post_attention_layernorm.weight", l);
        if (tfm_hf_copy(b, d, 0, s, NULL, C, 0, err) < 0)
            return -1;
        snprintf(d, sizeof d, "h.%d.attn.c_attn.weight", l);
        snprintf(db, sizeof db, "h.%d.attn.c_attn.bias", l);
        for (int p = 0; p < 3; p++) {
            size_t col = (size_t)tfm_block_qkv_off(&blk, p), out = p ? K : D;
            snprintf(s, sizeof s, "layers.%d.self_attn.%s.weight", l, qkv[p]);
            snprintf(sb, sizeof sb, "layers.%d.self_attn.%s.bias", l, qkv[p]);
            if (tfm_hf_cols(b, d, QKV, col, s, out, C, err) < 0 ||
                (g->bias && llama_bias(b, db, col, sb, out, err) < 0))
                return -1;
        }
        for (size_t k = 0; k < sizeof lin / sizeof lin[0]; k++) {
            /* [out, in]: o_proj [C, D], gate and up [F, C], down [C, F] */
            size_t out = k == 0 || k == 3 ? C : F, in = k == 0 ? D : k == 3 ? F : C;
            snprintf(d, sizeof d, "h.%d.%s.weight", l, lin[k].dst);
            snprintf(db, sizeof db, "h.%d.%s.bias", l, lin[k].dst);
            snprintf(s, sizeof s, "layers.%d.%s.weight", l, lin[k].src);
            snprintf(sb, sizeof sb, "layers.%d.%s.bias", l, lin[k].src);
            if (tfm_hf_cols(b, d, out, 0, s, out, in, err) < 0 ||
                (g->bias && llama_bias(b, db, 0, sb, out, err) < 0))
                return -1;
        }
    }
    /* a block beyond config.json's count would be silently dropped */
    snprintf(s, sizeof s, "%slayers.%d.self_attn.q_proj.weight", b->pre, g->n_layer);
    if (tfm_safetensors_find(b->st, s))
        return tfm_err_set(err, "%s: the checkpoint has a block %d (tensor '%s') but "
                                "config.json says %d", b->st->name, g->n_layer, s, g->n_layer);
    if (!g->tie_embeddings) {
        /* the head lies outside "model." */
        tfm_hf_ckpt top = *b;
        top.pre = "";
        if (tfm_hf_copy(&top, "lm_head.weight", 0, "lm_head.weight", NULL, V, C, err) < 0)
            return -1;
    }
    return 0;
}

static const char *llama_detect(const tfm_safetensors *st)
{
    return !tfm_hf_format(st) &&
                   tfm_safetensors_find(st, "model.layers.0.self_attn.q_proj.weight") &&
                   tfm_safetensors_find(st, "model.layers.0.mlp.gate_proj.weight")
               ? "model."
               : NULL;
}

static const char *const llama_types[] = {"llama", "qwen2", "mistral", NULL};

const tfm_convert_family tfm_convert_llama = {
    .name = "llama",
    .id = TFM_HF_NONE,
    .reads = "Llama, Qwen2 and Mistral (llama, qwen2, mistral)",
    .what = "Llama",
    .model_types = llama_types,
    .detect = llama_detect,
    .config = llama_describe,
    .weights = llama_weights,
};
