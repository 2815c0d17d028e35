/* What every HuggingFace family's converter shares (convert/convert.h):
 * config.json's values as HF's PretrainedConfig reads them, the check that
 * every key is one tfm honours, and the copies of a checkpoint's tensors
 * into tfm's layout (HF's Linears are [out, in], tfm's [in, out], with
 * q|k|v and k|v fused). */
#include "config.h"

#include "convert/hf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The file's tfm format, or NULL: HuggingFace's save_pretrained writes
 * "format": "pt", which is none. */
const char *tfm_hf_format(const tfm_safetensors *st)
{
    const char *f = tfm_safetensors_meta(st, "format", NULL);
    return f && strcmp(f, "pt") ? f : NULL;
}

/* NAME in the folder of model_path. */
void tfm_hf_json_beside(const char *model_path, const char *name, char *out, size_t n)
{
    const char *slash = strrchr(model_path, '/');
    int dir = slash ? (int)(slash - model_path) + 1 : 0;
    snprintf(out, n, "%.*s%s", dir, model_path, name);
}

void tfm_hf_model_type(const char *model_path, char *out, size_t n)
{
    char path[4200];
    tfm_hf_json_beside(model_path, "config.json", path, sizeof path);
    out[0] = 0;
    tfm_json_doc doc;
    tfm_err e = {0};
    if (access(path, F_OK) != 0 || tfm_json_parse_file(&doc, path, 0, &e) < 0)
        return;
    const tfm_json *j = tfm_json_get(doc.root, "model_type");
    if (j && j->type == TFM_JSON_STRING)
        snprintf(out, n, "%s", j->str);
    tfm_json_doc_free(&doc);
}

/* config.json's dropout probability KEY; absent (or null): def, HF's
 * default for the model type (from_pretrained trains with it). */
int tfm_hf_prob(const tfm_json_doc *doc, const char *key, double def, double *out,
                   tfm_err *err)
{
    const tfm_json *j = tfm_json_get(doc->root, key);
    *out = def;
    if (!j || j->type == TFM_JSON_NULL)
        return 0;
    if (tfm_json_expect(doc, j, TFM_JSON_NUMBER, key, err) < 0)
        return -1;
    if (!(j->num >= 0 && j->num <= 0.99))
        return tfm_err_at(err, doc->name, j->line, j->col, "%s must be a probability in "
                          "[0, 0.99], not %s", key, j->str);
    *out = j->num;
    return 0;
}

/* config.json's integer KEY in [min, max]; absent (or null): def, or an
 * error when def < min (a key without default). */
int tfm_hf_int(const tfm_json_doc *doc, const char *key, int64_t min, int64_t max,
                  int64_t def, int64_t *out, tfm_err *err)
{
    const tfm_json *j = tfm_json_get(doc->root, key);
    if ((!j || j->type == TFM_JSON_NULL) && def >= min) {
        *out = def;
        return 0;
    }
    return tfm_json_get_int(doc, j, key, min, max, out, err);
}

/* config.json's boolean KEY; def when absent (or null). */
int tfm_hf_bool(const tfm_json_doc *doc, const char *key, int def, int *out, tfm_err *err)
{
    const tfm_json *j = tfm_json_get(doc->root, key);
    *out = def;
    if (!j || j->type == TFM_JSON_NULL)
        return 0;
    if (tfm_json_expect(doc, j, TFM_JSON_BOOL, key, err) < 0)
        return -1;
    *out = j->boolean;
    return 0;
}

/* ---- config.json's keys ----------------------------------------------- */

/* PretrainedConfig's own keys, the same for every family */
static const tfm_hf_key hf_common_keys[] = {
    /* dtype: transformers 5's name for torch_dtype (the stored type, which
     * the safetensors header says again) */
    {"architectures", HF_ANY}, {"torch_dtype", HF_ANY}, {"dtype", HF_ANY},
    {"transformers_version", HF_ANY},
    {"id2label", HF_ANY}, {"label2id", HF_ANY}, {"num_labels", HF_ANY},
    {"_name_or_path", HF_ANY}, {"_commit_hash", HF_ANY}, {"use_cache", HF_ANY},
    {"return_dict", HF_ANY}, {"output_hidden_states", HF_ANY}, {"output_attentions", HF_ANY},
    {"output_past", HF_ANY}, {"torchscript", HF_ANY}, {"use_bfloat16", HF_ANY},
    {"tf_legacy_loss", HF_ANY}, {"gradient_checkpointing", HF_ANY},
    {"chunk_size_feed_forward", HF_ANY}, {"initializer_range", HF_ANY},
    {"initializer_factor", HF_ANY}, {"init_std", HF_ANY}, {"finetuning_task", HF_ANY},
    {"problem_type", HF_ANY}, {"tokenizer_class", HF_ANY}, {"prefix", HF_ANY},
    {"task_specific_params", HF_ANY}, {"bos_token_id", HF_ANY}, {"pad_token_id", HF_ANY},
    {"sep_token_id", HF_ANY}, {"max_length", HF_ANY}, {"min_length", HF_ANY},
    {"do_sample", HF_ANY}, {"early_stopping", HF_ANY}, {"num_beams", HF_ANY},
    {"num_beam_groups", HF_ANY}, {"diversity_penalty", HF_ANY}, {"temperature", HF_ANY},
    {"top_k", HF_ANY}, {"top_p", HF_ANY}, {"typical_p", HF_ANY},
    {"repetition_penalty", HF_ANY}, {"length_penalty", HF_ANY},
    {"no_repeat_ngram_size", HF_ANY}, {"encoder_no_repeat_ngram_size", HF_ANY},
    {"bad_words_ids", HF_ANY}, {"num_return_sequences", HF_ANY}, {"output_scores", HF_ANY},
    {"return_dict_in_generate", HF_ANY}, {"remove_invalid_values", HF_ANY},
    {"exponential_decay_length_penalty", HF_ANY}, {"suppress_tokens", HF_ANY},
    {"begin_suppress_tokens", HF_ANY}, {"_attn_implementation", HF_ANY},
    {"_attn_implementation_autoset", HF_ANY}, {"classifier_dropout", HF_ANY},
    {"_num_labels", HF_ANY}, {"xla_device", HF_ANY}, {"max_new_tokens", HF_ANY},
    {"add_cross_attention", HF_DEFAULT}, {"pruned_heads", HF_DEFAULT},
    {"tie_encoder_decoder", HF_DEFAULT}, {"cross_attention_hidden_size", HF_DEFAULT},
    {"is_decoder", HF_DEFAULT}, {"forced_decoder_ids", HF_DEFAULT}, {NULL, 0},
};

static const tfm_hf_key *hf_key_find(const tfm_hf_key *t, const char *key)
{
    for (; t->key; t++)
        if (!strcmp(t->key, key))
            return t;
    return NULL;
}

/* null, false, 0, {} or []: a key's value that changes nothing */
int tfm_hf_is_default(const tfm_json *j)
{
    return j->type == TFM_JSON_NULL || (j->type == TFM_JSON_BOOL && !j->boolean) ||
           (j->type == TFM_JSON_NUMBER && j->num == 0) ||
           ((j->type == TFM_JSON_ARRAY || j->type == TFM_JSON_OBJECT) && j->n == 0);
}

/* Every key of config.json is the family's (what: "GPT2Config") or
 * harmless: an unknown one may change the model, and ignoring it would
 * compute another model than HuggingFace's. */
int tfm_hf_keys_check(const tfm_json_doc *doc, const tfm_hf_key *family, const char *what,
                         tfm_err *err)
{
    const tfm_json *root = doc->root;
    for (size_t i = 0; root && root->type == TFM_JSON_OBJECT && i < root->n; i++) {
        const char *key = root->keys[i]->str;
        const tfm_json *v = root->items[i];
        const tfm_hf_key *k = hf_key_find(family, key);
        if (!k)
            k = hf_key_find(hf_common_keys, key);
        if (!k)
            return tfm_err_at(err, doc->name, root->keys[i]->line, root->keys[i]->col,
                              "'%s' is not a %s key tfm reads: it may change the model, so "
                              "it is refused rather than ignored", key, what);
        if (k->how == HF_DEFAULT && !tfm_hf_is_default(v))
            return tfm_err_at(err, doc->name, v->line, v->col, "%s %s is not supported "
                              "(tfm computes the model only without it)", key,
                              v->type == TFM_JSON_STRING ? v->str
                              : v->type == TFM_JSON_ARRAY || v->type == TFM_JSON_OBJECT
                                  ? "(not empty)"
                                  : v->str);
    }
    return 0;
}

/* The tensor pre + name (or pre + alt, the old LayerNorm spelling), which
 * must be F32 [d0] (d1 == 0) or [d0, d1]. */
const float *tfm_hf_tensor(const tfm_hf_ckpt *b, const char *name, const char *alt,
                                size_t d0, size_t d1, tfm_err *err)
{
    char full[160], full_alt[160] = "", want[64], got[96];
    snprintf(full, sizeof full, "%s%s", b->pre, name);
    const tfm_st_tensor *t = tfm_safetensors_find(b->st, full);
    if (!t && alt) {
        snprintf(full_alt, sizeof full_alt, "%s%s", b->pre, alt);
        t = tfm_safetensors_find(b->st, full_alt);
    }
    if (d1)
        snprintf(want, sizeof want, "F32 [%zu, %zu]", d0, d1);
    else
        snprintf(want, sizeof want, "F32 [%zu]", d0);
    if (!t) {
        if (alt)
            tfm_err_set(err, "%s: no tensor '%s' (nor '%s'): a %s checkpoint needs it, %s",
                        b->st->name, full, full_alt, b->what, want);
        else
            tfm_err_set(err, "%s: no tensor '%s': a %s checkpoint needs it, %s", b->st->name,
                        full, b->what, want);
        return NULL;
    }
    if (t->dtype != TFM_ST_F32 || t->ndim != (d1 ? 2 : 1) || t->shape[0] != d0 ||
        (d1 && t->shape[1] != d1)) {
        int n = snprintf(got, sizeof got, "%s [", tfm_st_dtype_name(t->dtype));
        for (int i = 0; i < t->ndim && n < 80; i++)
            n += snprintf(got + n, sizeof got - (size_t)n, "%s%zu", i ? ", " : "", t->shape[i]);
        snprintf(got + n, sizeof got - (size_t)n, "]");
        tfm_err_set(err, "%s: tensor '%s' is %s but config.json implies %s", b->st->name,
                    t->name, got, want);
        return NULL;
    }
    return t->data;
}

/* dst[i, j] = src[j, i]: an HF Linear [out, in] into tfm's [in, out] with
 * row stride ld (3C for the q, k, v parts of c_attn). */
void tfm_hf_transpose(float *dst, size_t ld, const float *src, size_t out, size_t in)
{
    for (size_t j0 = 0; j0 < out; j0 += 32)
        for (size_t i = 0; i < in; i++)
            for (size_t j = j0; j < out && j < j0 + 32; j++)
                dst[i * ld + j] = src[j * in + i];
}

float *tfm_hf_dst(const tfm_hf_ckpt *b, const char *fmt, int layer)
{
    char name[64];
    snprintf(name, sizeof name, fmt, layer);
    const tfm_param *p = tfm_model_param(b->m, name);
    TFM_ASSERT(p);
    return b->m->params + p->offset;
}

/* A vector or an embedding table, copied as it is. */
int tfm_hf_copy(const tfm_hf_ckpt *b, const char *dst, int layer, const char *src,
                     const char *alt, size_t d0, size_t d1, tfm_err *err)
{
    const float *s = tfm_hf_tensor(b, src, alt, d0, d1, err);
    if (!s)
        return -1;
    memcpy(tfm_hf_dst(b, dst, layer), s, d0 * (d1 ? d1 : 1) * sizeof(float));
    return 0;
}

/* LayerNorm SRC (SRC.weight/.bias or SRC.gamma/.beta) into DST.weight/.bias. */
int tfm_hf_norm(const tfm_hf_ckpt *b, const char *dst, int layer, const char *src,
                     size_t C, tfm_err *err)
{
    char dw[64], db[64], sw[128], sg[128], sb[128], sbeta[128];
    snprintf(dw, sizeof dw, "%s.weight", dst);
    snprintf(db, sizeof db, "%s.bias", dst);
    snprintf(sw, sizeof sw, "%s.weight", src);
    snprintf(sg, sizeof sg, "%s.gamma", src);
    snprintf(sb, sizeof sb, "%s.bias", src);
    snprintf(sbeta, sizeof sbeta, "%s.beta", src);
    return tfm_hf_copy(b, dw, layer, sw, sg, C, 0, err) < 0 ||
                   tfm_hf_copy(b, db, layer, sb, sbeta, C, 0, err) < 0
               ? -1
               : 0;
}

/* Linear SRC ([out, in] weight, [out] bias) into DST ([in, out], [out]). */
int tfm_hf_linear(const tfm_hf_ckpt *b, const char *dst, int layer, const char *src,
                       size_t out, size_t in, tfm_err *err)
{
    char dw[64], db[64], sw[128], sb[128];
    snprintf(dw, sizeof dw, "%s.weight", dst);
    snprintf(db, sizeof db, "%s.bias", dst);
    snprintf(sw, sizeof sw, "%s.weight", src);
    snprintf(sb, sizeof sb, "%s.bias", src);
    const float *w = tfm_hf_tensor(b, sw, NULL, out, in, err);
    if (!w)
        return -1;
    tfm_hf_transpose(tfm_hf_dst(b, dw, layer), out, w, out, in);
    return tfm_hf_copy(b, db, layer, sb, NULL, out, 0, err);
}

int tfm_hf_cols(const tfm_hf_ckpt *b, const char *dst, size_t ld, size_t col, const char *src,
                size_t out, size_t in, tfm_err *err)
{
    const float *w = tfm_hf_tensor(b, src, NULL, out, in, err);
    if (!w)
        return -1;
    tfm_hf_transpose(tfm_hf_dst(b, dst, 0) + col, ld, w, out, in);
    return 0;
}

/* Linears SRC[0..n) ([out, in] weights, [out] biases) side by side into
 * DST.weight ([in, n·out]) and DST.bias ([n·out]): q|k|v, k|v. */
int tfm_hf_fused(const tfm_hf_ckpt *b, const char *dst, const char *const *src, int n,
                    size_t out, size_t in, tfm_err *err)
{
    char dw[64], db[64], s[160];
    snprintf(dw, sizeof dw, "%s.weight", dst);
    snprintf(db, sizeof db, "%s.bias", dst);
    for (int k = 0; k < n; k++) {
        snprintf(s, sizeof s, "%s.weight", src[k]);
        const float *w = tfm_hf_tensor(b, s, NULL, out, in, err);
        if (!w)
            return -1;
        tfm_hf_transpose(tfm_hf_dst(b, dw, 0) + (size_t)k * out, (size_t)n * out, w, out, in);
        snprintf(s, sizeof s, "%s.bias", src[k]);
        const float *bias = tfm_hf_tensor(b, s, NULL, out, 0, err);
        if (!bias)
            return -1;
        memcpy(tfm_hf_dst(b, db, 0) + (size_t)k * out, bias, out * sizeof(float));
    }
    return 0;
}

/* generation_config.json beside model_path, which transformers 5's
 * generate reads instead of config.json (save_pretrained no longer writes
 * these there): its decoder_start_token_id, eos_token_id,
 * forced_bos_token_id (bos NULL: a T5, which has none) and
 * forced_eos_token_id replace config.json's when present.  No file:
 * nothing. */
int tfm_hf_generation_ids(const char *model_path, int64_t V, int64_t *start, int64_t *eos,
                             int64_t *bos, int64_t *forced_eos, tfm_err *err)
{
    char path[4200];
    tfm_hf_json_beside(model_path, "generation_config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return 0;
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = -1;
    const tfm_json *j;
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        tfm_hf_int(&doc, "decoder_start_token_id", 0, V - 1, *start, start, err) < 0 ||
        tfm_hf_int(&doc, "eos_token_id", 0, V - 1, *eos, eos, err) < 0 ||
        tfm_hf_int(&doc, "forced_eos_token_id", -1, V - 1, *forced_eos, forced_eos, err) < 0 ||
        (bos && tfm_hf_int(&doc, "forced_bos_token_id", -1, V - 1, *bos, bos, err) < 0))
        goto out;
    if (!bos && (j = tfm_json_get(doc.root, "forced_bos_token_id")) && !tfm_hf_is_default(j)) {
        tfm_err_at(err, path, j->line, j->col, "forced_bos_token_id is not supported for T5 "
                   "(tfm forces a first token only in BART)");
        goto out;
    }
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

const tfm_st_tensor *tfm_hf_find(const tfm_safetensors *st, const char *name)
{
    const tfm_st_tensor *t = tfm_safetensors_find(st, name);
    if (!t) {
        /* HuggingFace GPT-2 files may prefix every name */
        char buf[96];
        snprintf(buf, sizeof buf, "transformer.%s", name);
        t = tfm_safetensors_find(st, buf);
    }
    return t;
}

const float *tfm_hf_lookup(void *ctx, const char *name, size_t d0, size_t d1, tfm_err *err)
{
    const tfm_safetensors *st = ctx;
    const tfm_st_tensor *t = tfm_hf_find(st, name);
    if (!t) {
        tfm_err_set(err, "%s: no tensor '%s' (not a GPT model file?)", st->name, name);
        return NULL;
    }
    if (t->dtype != TFM_ST_F32) {
        tfm_err_set(err, "%s: tensor '%s' is %s; only F32 weights are supported",
                    st->name, name, tfm_st_dtype_name(t->dtype));
        return NULL;
    }
    int want_ndim = d1 ? 2 : 1;
    if (t->ndim != want_ndim || t->shape[0] != d0 || (d1 && t->shape[1] != d1)) {
        char got[96] = "";
        size_t o = 0;
        for (int i = 0; i < t->ndim && o < sizeof got; i++)
            o += (size_t)snprintf(got + o, sizeof got - o, "%s%zu", i ? ", " : "", t->shape[i]);
        if (d1)
            tfm_err_set(err, "%s: tensor '%s' has shape [%s], the config implies [%zu, %zu]",
                        st->name, name, got, d0, d1);
        else
            tfm_err_set(err, "%s: tensor '%s' has shape [%s], the config implies [%zu]",
                        st->name, name, got, d0);
        return NULL;
    }
    return t->data;
}


