/* GGUF files as tfm models (convert/gguf.h). */
#include "config.h"

#include "convert/gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/half.h"
#include "convert/gpt2.h"
#include "convert/llama.h"
#include "io/gguf.h"
#include "model/config_keys.h"
#include "model/file.h"

/* The view being built, in two passes over the architecture's tensors:
 * the first (st NULL) lists tfm's tensors for the image's header, the
 * second fills their data in the image itself (st), so that the file's
 * tensors are copied once. */
typedef struct view {
    const tfm_gguf *g;
    tfm_safetensors_writer w;
    tfm_safetensors *st;
    char *used; /* per GGUF tensor: mapped */
    int q8;     /* some tensor is tfm's q8_0 */
    int meta;   /* the metadata alone: no tensors listed */
} view;

/* The first pass: tensor name is listed (1); the second: *data gets its
 * place in the image (0). */
static int place(view *v, const char *name, tfm_st_dtype dt, int ndim, const size_t *shape,
                 void **data)
{
    if (!v->st) {
        if (!v->meta)
            tfm_safetensors_writer_add(&v->w, name, dt, ndim, shape, NULL);
        return 1;
    }
    const tfm_st_tensor *t = tfm_safetensors_find(v->st, name);
    TFM_ASSERT(t && t->dtype == dt);
    *data = (void *)t->data;
    return 0;
}

/* What a tensor is in tfm's layout: a block's matrix ([in, out],
 * transposed; q8_0 [out, in]), the token table or the head ([V, C] as
 * stored), another table (wpe: float only), a vector. */
enum { K_BLOCK, K_HEAD, K_TABLE, K_VECTOR };

/* The GGUF tensor name of shape ne {in, out} (out 0: a vector [in]),
 * or NULL and an error. */
static const tfm_gguf_tensor *get(view *v, const char *name, uint64_t in, uint64_t out,
                                  tfm_err *err)
{
    const tfm_gguf_tensor *t = tfm_gguf_find(v->g, name);
    if (!t) {
        tfm_err_set(err, "%s: no tensor '%s'", v->g->name, name);
        return NULL;
    }
    int nd = out ? 2 : 1;
    if (t->ndim != nd || t->ne[0] != in || (out && t->ne[1] != out)) {
        char have[96];
        int o = snprintf(have, sizeof have, "{%" PRIu64, t->ne[0]);
        for (int d = 1; d < t->ndim; d++)
            o += snprintf(have + o, sizeof have - (size_t)o, ", %" PRIu64, t->ne[d]);
        snprintf(have + o, sizeof have - (size_t)o, "}");
        if (out)
            tfm_err_set(err, "%s: tensor '%s' has ne %s: the metadata implies {%" PRIu64
                        ", %" PRIu64 "}", v->g->name, name, have, in, out);
        else
            tfm_err_set(err, "%s: tensor '%s' has ne %s: the metadata implies {%" PRIu64 "}",
                        v->g->name, name, have, in);
        return NULL;
    }
    v->used[t - v->g->tensors] = 1;
    return t;
}

static float q8_scale(const unsigned char *blk)
{
    return tfm_f16_to_f32((uint16_t)(blk[0] | blk[1] << 8));
}

/* Element j of row r of t (any type) as float. */
static float value_at(const tfm_gguf_tensor *t, uint64_t r, uint64_t j)
{
    const uint64_t in = t->ne[0];
    const unsigned char *b = t->data;
    uint16_t h;
    float f;
    switch (t->type) {
    case TFM_GGML_F32: memcpy(&f, b + 4 * (r * in + j), 4); return f;
    case TFM_GGML_F16: memcpy(&h, b + 2 * (r * in + j), 2); return tfm_f16_to_f32(h);
    case TFM_GGML_BF16: memcpy(&h, b + 2 * (r * in + j), 2); return tfm_bf16_to_f32(h);
    default: {
        const unsigned char *blk = b + (r * in + j) / TFM_GGML_Q8_BLOCK * TFM_GGML_Q8_BYTES;
        return q8_scale(blk) * (float)(int8_t)blk[2 + j % TFM_GGML_Q8_BLOCK];
    }
    }
}

/* One part of a fused matrix: rows [row0, row0 + out) of the result,
 * heads > 0 when llama.cpp permuted its rows for the rotation of heads
 * heads (convert_hf_to_gguf's permute: row h·hd + 2i + s holds
 * HuggingFace's h·hd + s·hd/2 + i). */
typedef struct part {
    const tfm_gguf_tensor *t;
    int64_t heads;
} part;

static uint64_t src_row(const part *p, uint64_t r)
{
    if (p->heads <= 0)
        return r;
    const uint64_t hd = p->t->ne[1] / (uint64_t)p->heads, h = r / hd, k = r % hd;
    const uint64_t s = k / (hd / 2), i = k % (hd / 2);
    return h * hd + 2 * i + s;
}

/* tfm's tensor dst of kind from the parts (their rows one after another) */
static int add(view *v, const char *dst, int kind, const part *p, int np, tfm_err *err)
{
    const uint64_t in = p[0].t->ne[0];
    uint64_t N = 0;
    uint32_t type = p[0].t->type;
    for (int j = 0; j < np; j++) {
        N += p[j].t->ndim == 2 ? p[j].t->ne[1] : 1;
        if (p[j].t->type != type)
            type = TFM_GGML_F32 + 1000; /* mixed: float32 */
        if (p[j].heads > 0 && (p[j].t->ne[1] % (uint64_t)(2 * p[j].heads)))
            return tfm_err_set(err, "%s: tensor '%s' has %" PRIu64 " rows: not heads of an "
                               "even size", v->g->name, p[j].t->name, p[j].t->ne[1]);
    }
    size_t shape[2];
    const int vec = kind == K_VECTOR;
    if (type == TFM_GGML_Q8_0 && (kind == K_BLOCK || kind == K_HEAD)) {
        /* tfm's q8_0: I8 values [out, in] and their F16 scales [out, in/32] */
        const uint64_t nb = in / TFM_GGML_Q8_BLOCK;
        char sname[160];
        snprintf(sname, sizeof sname, "%s.q8_scale", dst);
        size_t qshape[2] = {(size_t)N, (size_t)in}, sshape[2] = {(size_t)N, (size_t)nb};
        void *qd = NULL, *sd = NULL;
        v->q8 = 1;
        if (place(v, dst, TFM_ST_I8, 2, qshape, &qd) | place(v, sname, TFM_ST_F16, 2, sshape, &sd))
            return 0;
        int8_t *q = qd;
        uint16_t *s = sd;
        uint64_t row = 0;
        for (int j = 0; j < np; j++)
            for (uint64_t r = 0; r < p[j].t->ne[1]; r++, row++) {
                const unsigned char *src = (const unsigned char *)p[j].t->data +
                                           src_row(&p[j], r) * nb * TFM_GGML_Q8_BYTES;
                for (uint64_t b = 0; b < nb; b++, src += TFM_GGML_Q8_BYTES) {
                    s[row * nb + b] = (uint16_t)(src[0] | src[1] << 8);
                    memcpy(q + row * in + b * TFM_GGML_Q8_BLOCK, src + 2, TFM_GGML_Q8_BLOCK);
                }
            }
        return 0;
    }
    /* 16-bit values kept as they are, the rest as float32 */
    const int es = type == TFM_GGML_F16 || type == TFM_GGML_BF16 ? 2 : 4;
    const tfm_st_dtype dt = type == TFM_GGML_F16 ? TFM_ST_F16
                            : type == TFM_GGML_BF16 ? TFM_ST_BF16 : TFM_ST_F32;
    const int trans = kind == K_BLOCK;
    shape[0] = vec ? (size_t)in : trans ? (size_t)in : (size_t)N;
    shape[1] = trans ? (size_t)N : (size_t)in;
    void *o = NULL;
    if (place(v, dst, dt, vec ? 1 : 2, shape, &o))
        return 0;
    unsigned char *out = o;
    uint64_t row = 0;
    for (int j = 0; j < np; j++) {
        const uint64_t rows = p[j].t->ndim == 2 ? p[j].t->ne[1] : 1;
        for (uint64_t r = 0; r < rows; r++, row++) {
            const uint64_t sr = src_row(&p[j], r);
            for (uint64_t i = 0; i < in; i++) {
                const uint64_t at = trans ? i * N + row : row * in + i;
                if (es == 2)
                    memcpy(out + 2 * at, (const unsigned char *)p[j].t->data + 2 * (sr * in + i),
                           2);
                else {
                    const float f = value_at(p[j].t, sr, i);
                    memcpy(out + 4 * at, &f, 4);
                }
            }
        }
    }
    return 0;
}

/* GGUF tensor src ({in, out}, out 0: a vector) as tfm's dst */
static int add1(view *v, const char *dst, int kind, const char *src, uint64_t in, uint64_t out,
                tfm_err *err)
{
    part p = {get(v, src, in, out, err), 0};
    return p.t ? add(v, dst, kind, &p, 1, err) : -1;
}

/* a block's tensor: blk.L.src as h.L.dst */
static int addl(view *v, int l, const char *dst, int kind, const char *src, uint64_t in,
                uint64_t out, tfm_err *err)
{
    char d[96], s[96];
    snprintf(d, sizeof d, "h.%d.%s", l, dst);
    snprintf(s, sizeof s, "blk.%d.%s", l, src);
    return add1(v, d, kind, s, in, out, err);
}

/* The "ARCH." keys each mapper reads (an empty type: absent or "none") */
static const char *const gpt2_keys[] = {
    "context_length", "embedding_length", "block_count", "feed_forward_length",
    "attention.head_count", "attention.layer_norm_epsilon", "vocab_size", NULL,
};
static const char *const llama_keys[] = {
    "context_length", "embedding_length", "block_count", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "attention.key_length",
    "attention.value_length", "attention.layer_norm_rms_epsilon", "rope.freq_base",
    "rope.dimension_count", "rope.scaling.type", "expert_count", "vocab_size", NULL,
};

/* Every key of the architecture's is one its mapper reads: another (a
 * window, a scaling factor, a softcap...) may change the model, and is not
 * ignored. */
static int keys_known(const tfm_gguf *g, const char *arch, const char *const *known,
                      tfm_err *err)
{
    const size_t n = strlen(arch);
    for (size_t k = 0; k < g->n_kv; k++) {
        const char *key = g->kv[k].key;
        if (strncmp(key, arch, n) || key[n] != '.')
            continue;
        int ok = 0;
        for (const char *const *q = known; *q && !ok; q++)
            ok = !strcmp(key + n + 1, *q);
        if (!ok)
            return tfm_err_set(err, "%s: metadata '%s' is not one tfm reads in a GGUF %s "
                               "model (it may change the model)", g->name, key, arch);
    }
    return 0;
}

static int gpt2_view(view *v, tfm_model_keys *c, tfm_err *err)
{
    const tfm_gguf *g = v->g;
    int64_t P, C, L, F, NH;
    double eps;
    if (tfm_gguf_int(g, "gpt2.context_length", 1, 1 << 24, -1, &P, err) < 0 ||
        tfm_gguf_int(g, "gpt2.embedding_length", 1, 1 << 20, -1, &C, err) < 0 ||
        tfm_gguf_int(g, "gpt2.block_count", 1, 4096, -1, &L, err) < 0 ||
        tfm_gguf_int(g, "gpt2.feed_forward_length", 1, 1 << 24, 4 * C, &F, err) < 0 ||
        tfm_gguf_int(g, "gpt2.attention.head_count", 1, C, -1, &NH, err) < 0 ||
        tfm_gguf_float(g, "gpt2.attention.layer_norm_epsilon", 1, 1e-5, &eps, err) < 0)
        return -1;
    const tfm_gguf_tensor *te = tfm_gguf_find(g, "token_embd.weight");
    int64_t nv;
    if (!te || te->ndim != 2)
        return tfm_err_set(err, "%s: no tensor 'token_embd.weight' {n_embd, n_vocab}", g->name);
    const uint64_t V = te->ne[1];
    if (keys_known(g, "gpt2", gpt2_keys, err) < 0 ||
        tfm_gguf_int(g, "gpt2.vocab_size", (int64_t)V, (int64_t)V, (int64_t)V, &nv, err) < 0)
        return -1;
    tfm_model_config m;
    tfm_model_config_default(&m);
    m.vocab_size = (int)V;
    m.n_embd = (int)C;
    m.block_size = (int)P;
    m.n_layer = (int)L;
    m.n_head = (int)NH;
    m.d_ff = F == 4 * C ? 0 : (int)F;
    m.ln_eps = (float)eps;
    m.tie_embeddings = !tfm_gguf_find(g, "output.weight");
    tfm_gpt2_config_into(&m, c);
    const uint64_t c_ = (uint64_t)C, f = (uint64_t)F;
    if (add1(v, "wte.weight", K_HEAD, "token_embd.weight", c_, V, err) < 0 ||
        add1(v, "wpe.weight", K_TABLE, "position_embd.weight", c_, (uint64_t)P, err) < 0 ||
        add1(v, "ln_f.weight", K_VECTOR, "output_norm.weight", c_, 0, err) < 0 ||
        add1(v, "ln_f.bias", K_VECTOR, "output_norm.bias", c_, 0, err) < 0 ||
        (!m.tie_embeddings && add1(v, "lm_head.weight", K_HEAD, "output.weight", c_, V, err) < 0))
        return -1;
    for (int l = 0; l < L; l++)
        if (addl(v, l, "ln_1.weight", K_VECTOR, "attn_norm.weight", c_, 0, err) < 0 ||
            addl(v, l, "ln_1.bias", K_VECTOR, "attn_norm.bias", c_, 0, err) < 0 ||
            addl(v, l, "attn.c_attn.weight", K_BLOCK, "attn_qkv.weight", c_, 3 * c_, err) < 0 ||
            addl(v, l, "attn.c_attn.bias", K_VECTOR, "attn_qkv.bias", 3 * c_, 0, err) < 0 ||
            addl(v, l, "attn.c_proj.weight", K_BLOCK, "attn_output.weight", c_, c_, err) < 0 ||
            addl(v, l, "attn.c_proj.bias", K_VECTOR, "attn_output.bias", c_, 0, err) < 0 ||
            addl(v, l, "ln_2.weight", K_VECTOR, "ffn_norm.weight", c_, 0, err) < 0 ||
            addl(v, l, "ln_2.bias", K_VECTOR, "ffn_norm.bias", c_, 0, err) < 0 ||
            addl(v, l, "mlp.c_fc.weight", K_BLOCK, "ffn_up.weight", c_, f, err) < 0 ||
            addl(v, l, "mlp.c_fc.bias", K_VECTOR, "ffn_up.bias", f, 0, err) < 0 ||
            addl(v, l, "mlp.c_proj.weight", K_BLOCK, "ffn_down.weight", f, c_, err) < 0 ||
            addl(v, l, "mlp.c_proj.bias", K_VECTOR, "ffn_down.bias", c_, 0, err) < 0)
            return -1;
    return 0;
}

static int llama_view(view *v, tfm_model_keys *c, tfm_err *err)
{
    const tfm_gguf *g = v->g;
    tfm_llama_dims d = {.window = 0, .forced_eos = -1};
    int64_t rot, vlen, experts;
    char scaling[64];
    if (tfm_gguf_int(g, "llama.context_length", 1, 1 << 24, -1, &d.P, err) < 0 ||
        tfm_gguf_int(g, "llama.embedding_length", 1, 1 << 20, -1, &d.C, err) < 0 ||
        tfm_gguf_int(g, "llama.block_count", 1, 4096, -1, &d.L, err) < 0 ||
        tfm_gguf_int(g, "llama.feed_forward_length", 1, 1 << 24, -1, &d.F, err) < 0 ||
        tfm_gguf_int(g, "llama.attention.head_count", 1, d.C, -1, &d.NH, err) < 0 ||
        tfm_gguf_int(g, "llama.attention.head_count_kv", 1, d.NH, d.NH, &d.NKV, err) < 0 ||
        tfm_gguf_int(g, "llama.attention.key_length", 1, 1 << 16, d.C / d.NH, &d.HS, err) < 0 ||
        tfm_gguf_int(g, "llama.attention.value_length", d.HS, d.HS, d.HS, &vlen, err) < 0 ||
        tfm_gguf_int(g, "llama.rope.dimension_count", d.HS, d.HS, d.HS, &rot, err) < 0 ||
        tfm_gguf_int(g, "llama.expert_count", 0, 0, 0, &experts, err) < 0 ||
        tfm_gguf_float(g, "llama.attention.layer_norm_rms_epsilon", 1, -1, &d.eps, err) < 0 ||
        tfm_gguf_float(g, "llama.rope.freq_base", 1e12, 10000, &d.base, err) < 0 ||
        tfm_gguf_string(g, "llama.rope.scaling.type", scaling, sizeof scaling, err) < 0)
        return -1;
    if (d.eps < 0)
        return tfm_err_set(err, "%s: no metadata 'llama.attention.layer_norm_rms_epsilon' "
                           "(a number)", g->name);
    if (scaling[0] && strcmp(scaling, "none"))
        return tfm_err_set(err, "%s: llama.rope.scaling.type '%s' is not supported (tfm has "
                           "the default rotation only)", g->name, scaling);
    if (d.NH % d.NKV)
        return tfm_err_set(err, "%s: llama.attention.head_count_kv %" PRId64 " must divide "
                           "llama.attention.head_count %" PRId64, g->name, d.NKV, d.NH);
    const tfm_gguf_tensor *te = tfm_gguf_find(g, "token_embd.weight");
    if (!te || te->ndim != 2)
        return tfm_err_set(err, "%s: no tensor 'token_embd.weight' {n_embd, n_vocab}", g->name);
    d.V = (int64_t)te->ne[1];
    int64_t nv;
    if (keys_known(g, "llama", llama_keys, err) < 0 ||
        tfm_gguf_int(g, "llama.vocab_size", d.V, d.V, d.V, &nv, err) < 0)
        return -1;
    d.tied = !tfm_gguf_find(g, "output.weight");
    tfm_llama_config_into(&d, c);
    const uint64_t C = (uint64_t)d.C, F = (uint64_t)d.F, V = (uint64_t)d.V;
    const uint64_t D = (uint64_t)(d.NH * d.HS), K = (uint64_t)(d.NKV * d.HS);
    if (add1(v, "wte.weight", K_HEAD, "token_embd.weight", C, V, err) < 0 ||
        add1(v, "ln_f.weight", K_VECTOR, "output_norm.weight", C, 0, err) < 0 ||
        (!d.tied && add1(v, "lm_head.weight", K_HEAD, "output.weight", C, V, err) < 0))
        return -1;
    for (int l = 0; l < d.L; l++) {
        char s[3][64];
        for (int j = 0; j < 3; j++)
            snprintf(s[j], sizeof s[j], "blk.%d.attn_%c.weight", l, "qkv"[j]);
        part p[3] = {{get(v, s[0], C, D, err), d.NH}, {NULL, d.NKV}, {NULL, 0}};
        if (p[0].t)
            p[1].t = get(v, s[1], C, K, err);
        if (p[1].t)
            p[2].t = get(v, s[2], C, K, err);
        char qkv[64];
        snprintf(qkv, sizeof qkv, "h.%d.attn.c_attn.weight", l);
        if (!p[2].t || add(v, qkv, K_BLOCK, p, 3, err) < 0 ||
            addl(v, l, "ln_1.weight", K_VECTOR, "attn_norm.weight", C, 0, err) < 0 ||
            addl(v, l, "attn.c_proj.weight", K_BLOCK, "attn_output.weight", D, C, err) < 0 ||
            addl(v, l, "ln_2.weight", K_VECTOR, "ffn_norm.weight", C, 0, err) < 0 ||
            addl(v, l, "mlp.wi_0.weight", K_BLOCK, "ffn_gate.weight", C, F, err) < 0 ||
            addl(v, l, "mlp.wi_1.weight", K_BLOCK, "ffn_up.weight", C, F, err) < 0 ||
            addl(v, l, "mlp.c_proj.weight", K_BLOCK, "ffn_down.weight", F, C, err) < 0)
            return -1;
    }
    return 0;
}

/* tokenizer.ggml.* as a tokenizer.json (GPT-2's byte-level BPE) into out:
 * 1, or 0 when the file has none tfm reads. */
static int tokenizer_json(const tfm_gguf *g, int64_t V, tfm_buf *out, tfm_err *err)
{
    char model[64], pre[64];
    if (tfm_gguf_string(g, "tokenizer.ggml.model", model, sizeof model, err) < 0 ||
        tfm_gguf_string(g, "tokenizer.ggml.pre", pre, sizeof pre, err) < 0)
        return -1;
    if (strcmp(model, "gpt2") || (pre[0] && strcmp(pre, "gpt-2") && strcmp(pre, "default")))
        return 0;
    const tfm_gguf_kv *tok = tfm_gguf_get(g, "tokenizer.ggml.tokens");
    const tfm_gguf_kv *mer = tfm_gguf_get(g, "tokenizer.ggml.merges");
    const tfm_gguf_kv *typ = tfm_gguf_get(g, "tokenizer.ggml.token_type");
    if (!tok || tok->type != TFM_GGUF_ARRAY || tok->elem != TFM_GGUF_STRING)
        return tfm_err_set(err, "%s: tokenizer.ggml.tokens must be an array of strings",
                           g->name);
    if (!mer || mer->type != TFM_GGUF_ARRAY || mer->elem != TFM_GGUF_STRING)
        return tfm_err_set(err, "%s: tokenizer.ggml.merges must be an array of strings "
                           "(tokenizer.ggml.model gpt2)", g->name);
    if (tok->n > (uint64_t)V)
        return tfm_err_set(err, "%s: tokenizer.ggml.tokens has %" PRIu64 " tokens but the "
                           "model only %" PRId64, g->name, tok->n, V);
    if (typ && (typ->type != TFM_GGUF_ARRAY || typ->elem != TFM_GGUF_I32 || typ->n != tok->n))
        return tfm_err_set(err, "%s: tokenizer.ggml.token_type must be an array of i32, one "
                           "per token (%" PRIu64 ")", g->name, tok->n);
    tfm_buf_puts(out, "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,"
                      "\"added_tokens\":[");
    int first = 1;
    for (uint64_t i = 0; typ && i < tok->n; i++) {
        const unsigned char *p = typ->data + 4 * i;
        const int32_t t = (int32_t)(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24);
        if (t != 3 && t != 4) /* control, user-defined */
            continue;
        tfm_buf_printf(out, "%s{\"id\":%" PRIu64 ",\"content\":", first ? "" : ",", i);
        tfm_buf_put_json_string(out, tok->strs[i].s, tok->strs[i].n);
        tfm_buf_printf(out, ",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                            "\"normalized\":%s,\"special\":%s}",
                       t == 3 ? "false" : "true", t == 3 ? "true" : "false");
        first = 0;
    }
    tfm_buf_puts(out, "],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\","
                      "\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true},"
                      "\"post_processor\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,"
                      "\"trim_offsets\":false,\"use_regex\":true},\"decoder\":{\"type\":"
                      "\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,"
                      "\"use_regex\":true},\"model\":{\"type\":\"BPE\",\"dropout\":null,"
                      "\"unk_token\":null,\"continuing_subword_prefix\":\"\","
                      "\"end_of_word_suffix\":\"\",\"fuse_unk\":false,\"byte_fallback\":false,"
                      "\"ignore_merges\":false,\"vocab\":{");
    for (uint64_t i = 0; i < tok->n; i++) {
        if (i)
            tfm_buf_putc(out, ',');
        tfm_buf_put_json_string(out, tok->strs[i].s, tok->strs[i].n);
        tfm_buf_printf(out, ":%" PRIu64, i);
    }
    tfm_buf_puts(out, "},\"merges\":[");
    for (uint64_t i = 0; i < mer->n; i++) {
        if (i)
            tfm_buf_putc(out, ',');
        tfm_buf_put_json_string(out, mer->strs[i].s, mer->strs[i].n);
    }
    tfm_buf_puts(out, "]}}");
    return 1;
}

static int view_open(tfm_safetensors *st, const char *path, int meta, tfm_err *err)
{
    memset(st, 0, sizeof *st);
    tfm_gguf g;
    if (tfm_gguf_open(&g, path, err) < 0)
        return -1;
    view v = {.g = &g, .meta = meta};
    tfm_safetensors_writer_init(&v.w);
    v.used = tfm_calloc(g.n_tensors + 1, 1);
    tfm_model_file_keys k;
    tfm_model_file_keys_defaults(&k);
    tfm_buf yaml = {0}, tok = {0};
    int rc = -1;
    char arch[64];
    if (tfm_gguf_string(&g, "general.architecture", arch, sizeof arch, err) < 0)
        goto out;
    if (!arch[0]) {
        tfm_err_set(err, "%s: no metadata 'general.architecture' (a string)", path);
        goto out;
    }
    int (*arch_view)(view *, tfm_model_keys *, tfm_err *) =
        !strcmp(arch, "gpt2") ? gpt2_view : !strcmp(arch, "llama") ? llama_view : NULL;
    if (!arch_view) {
        tfm_err_set(err, "%s: architecture '%s' is not one tfm reads: it reads GGUF's gpt2 "
                    "and llama", path, arch);
        goto out;
    }
    if (arch_view(&v, &k.model, err) < 0)
        goto out;
    for (size_t i = 0; i < g.n_tensors; i++)
        if (!v.used[i]) {
            tfm_err_set(err, "%s: tensor '%s' is not one tfm reads in a GGUF %s model",
                        path, g.tensors[i].name, arch);
            goto out;
        }
    tfm_model_config cfg;
    if (tfm_model_config_from_keys(&k.model, NULL, &cfg, err) < 0) {
        tfm_err_prefix(err, "%s", path);
        goto out;
    }
    int has_tok = tokenizer_json(&g, k.model.vocab_size, &tok, err);
    if (has_tok < 0)
        goto out;
    int64_t eos;
    if (tfm_gguf_int(&g, "tokenizer.ggml.eos_token_id", 0, k.model.vocab_size - 1, INT64_MAX,
                     &eos, err) < 0)
        goto out;
    tfm_schema_dump(tfm_model_file_keys_schema(), &k, 0, &yaml);
    tfm_safetensors_writer_meta(&v.w, "format", "tfm-gpt");
    tfm_safetensors_writer_meta(&v.w, "config", tfm_buf_cstr(&yaml));
    tfm_safetensors_writer_meta(&v.w, "gguf", arch);
    if (v.q8)
        tfm_safetensors_writer_meta(&v.w, "weights", "q8_0");
    if (has_tok)
        tfm_safetensors_writer_meta_n(&v.w, "tokenizer", tok.data, tok.len);
    if (eos != INT64_MAX) {
        char e[32];
        snprintf(e, sizeof e, "%" PRId64, eos);
        tfm_safetensors_writer_meta(&v.w, "eos_token_id", e);
    }
    void *image;
    size_t size;
    if (tfm_safetensors_writer_image(&v.w, path, &image, &size, err) < 0 ||
        tfm_safetensors_view(st, image, size, path, err) < 0)
        goto out;
    if (meta) {
        rc = 0;
        goto out;
    }
    /* the second pass: the tensors' data into the image */
    v.st = st;
    tfm_model_file_keys_defaults(&k);
    rc = arch_view(&v, &k.model, err);
    if (rc < 0)
        tfm_safetensors_close(st);
out:
    tfm_safetensors_writer_free(&v.w);
    free(v.used);
    tfm_buf_free(&yaml);
    tfm_buf_free(&tok);
    tfm_gguf_close(&g);
    return rc;
}

int tfm_gguf_view_open(tfm_safetensors *st, const char *path, tfm_err *err)
{
    return view_open(st, path, 0, err);
}

int tfm_gguf_view_meta(tfm_safetensors *st, const char *path, tfm_err *err)
{
    return view_open(st, path, 1, err);
}
