/* The model + tokenizer bundle programs open (lm/lm.h): tfm's files
 * (model/file.h) and HuggingFace checkpoints (convert/convert.h), for
 * inference (weights used in place) or training (weights copied). */
#include "config.h"

#include "lm/lm.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "convert/convert.h"
#include "convert/gguf.h"
#include "convert/gpt2.h"
#include "io/gguf.h"
#include "model/lora.h"
#include "model/quant.h"

/* ---- training and evaluation: weights copied ----------------------- */

/* by the name too: a broken .gguf file is told it is no GGUF file */
static int is_gguf(const char *path)
{
    const size_t n = strlen(path);
    return tfm_gguf_is(path) || (n > 5 && !strcmp(path + n - 5, ".gguf"));
}

int tfm_lm_file_open(tfm_safetensors *st, const char *path, tfm_err *err)
{
    return is_gguf(path) ? tfm_gguf_view_open(st, path, err)
                         : tfm_safetensors_open(st, path, err);
}

/* tfm_lm_file_open for the description alone (a GGUF view's tensors are
 * not made) */
static int file_meta_open(tfm_safetensors *st, const char *path, tfm_err *err)
{
    return is_gguf(path) ? tfm_gguf_view_meta(st, path, err)
                         : tfm_safetensors_open(st, path, err);
}

/* tfm_model_load of a HuggingFace checkpoint st: 1 when st is none. */
static int hf_model_load(tfm_safetensors *st, tfm_model_file_keys *c, tfm_model *m,
                         tfm_tokenizer **tok, tfm_err *err)
{
    const char *pre;
    const tfm_convert_family *f = tfm_convert_detect(st, &pre);
    int rc = 1;
    if (f)
        rc = tfm_model_file_verify(st, 0, err) < 0 || tfm_quant_widen(st, NULL, err) < 0
                 ? -1
                 : tfm_convert_load(f, st, pre, &c->model, m, tok, NULL, err);
    if (rc == 0 && f->task) /* a checkpoint with a task head is fine-tuned for it */
        c->task = c->model.tags          ? TFM_CONFIG_TASK_TAG
                  : c->model.span        ? TFM_CONFIG_TASK_SPAN
                  : c->model.classes && !c->model.nsp ? TFM_CONFIG_TASK_CLASSIFY
                                         : c->task;
    return rc;
}

int tfm_model_load_keys(const char *path, tfm_model_file_keys *c, tfm_model *m,
                        tfm_tokenizer **tok, tfm_err *err)
{
    if (tok)
        *tok = NULL;
    tfm_model_file_keys_defaults(c);
    char file[4200];
    path = tfm_model_file_path(path, file, sizeof file);
    tfm_safetensors st;
    if (tfm_lm_file_open(&st, path, err) < 0)
        return -1;
    int rc = hf_model_load(&st, c, m, tok, err);
    if (rc <= 0)
        goto out;
    rc = -1;
    size_t cfg_len = 0;
    const char *cfg_text = tfm_safetensors_meta(&st, "config", &cfg_len);
    if (!cfg_text) {
        if (tfm_convert_unread(path, err) == 0)
            tfm_err_set(err, "%s: no 'config' in __metadata__", path);
        goto out;
    }
    char name[1100];
    snprintf(name, sizeof name, "%s:config", path);
    if (tfm_schema_apply_yaml(tfm_model_file_keys_schema(), c, cfg_text, cfg_len, name, err) < 0)
        goto out;
    /* a GGUF file's configuration is made of its metadata: it describes the
     * model only, as a HuggingFace checkpoint's */
    c->stored = !tfm_safetensors_meta(&st, "gguf", NULL);
    tfm_model_config g;
    if (tfm_model_config_from_keys(&c->model, &c->lora, &g, err) < 0) {
        tfm_err_prefix(err, "%s", path);
        goto out;
    }
    if (tfm_model_init(m, &g, err) < 0) {
        tfm_err_prefix(err, "%s", path);
        goto out;
    }
    float *arrays[] = {m->params};
    const char *prefixes[] = {""};
    if (tfm_model_file_verify(&st, 0, err) < 0 || tfm_quant_widen(&st, NULL, err) < 0 ||
        tfm_model_file_read(&st, m->table, m->n_table, arrays, prefixes, 1, err) < 0)
        goto fail;
    size_t tok_len = 0;
    const char *tok_json = tfm_safetensors_meta(&st, "tokenizer", &tok_len);
    if (tok && tok_json) {
        snprintf(name, sizeof name, "%s:tokenizer", path);
        if (tfm_tokenizer_from_json(tok, tok_json, tok_len, name, err) < 0)
            goto fail;
        uint32_t tv = tfm_tokenizer_vocab_size(*tok);
        if (tv > (uint32_t)g.vocab_size) {
            tfm_err_set(err, "%s: the tokenizer has %u tokens but the model only %d", path, tv,
                        g.vocab_size);
            tfm_tokenizer_free(*tok);
            *tok = NULL;
            goto fail;
        }
    }
    rc = 0;
    goto out;
fail:
    tfm_model_free(m);
out:
    tfm_safetensors_close(&st);
    return rc;
}

int tfm_model_folder_tokenizer(const char *dir, tfm_tokenizer **tok, tfm_err *err)
{
    char file[4200];
    const char *path = tfm_model_file_path(dir, file, sizeof file);
    tfm_safetensors st;
    if (tfm_safetensors_open(&st, path, NULL) < 0) /* a folder of tokenizer files alone */
        return tfm_hf_tokenizer_beside(path, INT_MAX, 0, tok, err);
    const char *pre;
    const tfm_convert_family *f = tfm_convert_detect(&st, &pre);
    int rc = f ? tfm_convert_tokenizer(f, &st, INT_MAX, tok, err)
               : tfm_hf_tokenizer_beside(path, INT_MAX, 0, tok, err);
    tfm_safetensors_close(&st);
    return rc;
}

int tfm_model_tokenizer_load(tfm_tokenizer **tok, const char *path, tfm_err *err)
{
    struct stat sb;
    *tok = NULL;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (tfm_model_folder_tokenizer(path, tok, err) < 0)
            return -1;
        if (*tok)
            return 0;
    }
    if (tfm_gguf_is(path)) { /* the tokenizer inside a GGUF file */
        tfm_safetensors st;
        if (tfm_gguf_view_meta(&st, path, err) < 0)
            return -1;
        size_t len = 0;
        const char *json = tfm_safetensors_meta(&st, "tokenizer", &len);
        char name[4200];
        snprintf(name, sizeof name, "%s:tokenizer", path);
        int rc = json ? tfm_tokenizer_from_json(tok, json, len, name, err)
                      : tfm_err_set(err, "%s: no tokenizer tfm reads (tokenizer.ggml.model gpt2 "
                                    "is GPT-2's byte-level BPE; others are not read)", path);
        tfm_safetensors_close(&st);
        return rc;
    }
    return tfm_tokenizer_load(tok, path, err); /* and its message for a folder without one */
}

tfm_hf_family tfm_model_file_hf_family(const char *path, const char **prefix)
{
    char file[4200];
    tfm_safetensors st;
    *prefix = "";
    if (!path || !*path ||
        file_meta_open(&st, tfm_model_file_path(path, file, sizeof file), NULL) < 0)
        return TFM_HF_NONE;
    const tfm_convert_family *f = tfm_convert_detect(&st, prefix); /* string literals */
    tfm_safetensors_close(&st);
    return f ? f->id : TFM_HF_NONE;
}

int tfm_lm_file_meta(const char *path, const char *key, tfm_buf *out, tfm_err *err)
{
    char file[4200];
    tfm_safetensors st;
    if (file_meta_open(&st, tfm_model_file_path(path, file, sizeof file), err) < 0)
        return -1;
    size_t len = 0;
    const char *v = tfm_safetensors_meta(&st, key, &len);
    int rc = v != NULL;
    if (v)
        tfm_buf_append(out, v, len);
    const char *pre;
    const tfm_convert_family *f = rc || strcmp(key, "task") ? NULL : tfm_convert_detect(&st, &pre);
    if (f && f->task)
        rc = f->task(&st, pre, out, err); /* a checkpoint's task head */
    tfm_safetensors_close(&st);
    return rc;
}

int tfm_model_load_keys_adapter(const char *path, const char *adapter, tfm_model_file_keys *k,
                                tfm_model *m, tfm_tokenizer **tok, tfm_err *err)
{
    if (tfm_model_load_keys(path, k, m, tok, err) < 0)
        return -1;
    const char *pre;
    tfm_hf_family f = adapter ? tfm_model_file_hf_family(path, &pre) : TFM_HF_NONE;
    if (adapter && tfm_adapter_apply(m, adapter, path, f, err) < 0) {
        tfm_model_free(m);
        if (tok && *tok) {
            tfm_tokenizer_free(*tok);
            *tok = NULL;
        }
        return -1;
    }
    return 0;
}

/* ---- inference ----------------------------------------------------- */

/* A checkpoint whose layout differs from tfm's (BERT, T5, BART): its
 * weights are copied into a tfm_model the tfm_lm owns, then bound from
 * there; the end-of-text id is config.json's, else the tokenizer's. */
static int copied_lm_open(tfm_lm *lm, const tfm_convert_family *f, const tfm_safetensors *st,
                          const char *pre, tfm_err *err)
{
    tfm_model_file_keys c;
    tfm_model_file_keys_defaults(&c);
    tfm_model *m = tfm_calloc(1, sizeof *m);
    if (tfm_convert_load(f, st, pre, &c.model, m, &lm->tok, &lm->eos, err) < 0) {
        free(m);
        return -1;
    }
    lm->model = m;
    tfm_model_set_inference(m); /* no gradients */
    lm->cfg = m->cfg;
    if (lm->eos < 0 && lm->tok)
        lm->eos = tfm_tokenizer_specials(lm->tok)->eos;
    return tfm_weights_from_model(&lm->w, m, err);
}

/* lookup, through the stored-only matrices' keys (model/quant.h) */
static const float *lookup_stored(void *ctx, const char *name, size_t d0, size_t d1,
                                  tfm_err *err)
{
    const tfm_lm *lm = ctx;
    const tfm_safetensors *st = lm->file;
    const tfm_st_tensor *t = tfm_hf_find(st, name);
    const tfm_quant_view *v = t ? tfm_quant_find(lm->quant, t->name) : NULL;
    if (!v || !v->stored_only)
        return tfm_hf_lookup((void *)st, name, d0, d1, err);
    if (v->shape[0] != d0 || v->shape[1] != d1) {
        tfm_err_set(err, "%s: tensor '%s' has shape [%zu, %zu] (as tfm lays it out), the "
                    "config implies [%zu, %zu]", st->name, name, v->shape[0], v->shape[1],
                    d0, d1);
        return NULL;
    }
    return v->m.f32;
}

int tfm_lm_open(tfm_lm *lm, const char *path, tfm_err *err)
{
    return tfm_lm_open_flags(lm, path, NULL, 0, err);
}

static int lm_open(tfm_lm *lm, const char *path, unsigned flags, tfm_err *err)
{
    memset(lm, 0, sizeof *lm);
    lm->eos = -1;
    char file[4200];
    path = tfm_model_file_path(path, file, sizeof file);
    tfm_safetensors *st = tfm_calloc(1, sizeof *st);
    if (tfm_lm_file_open(st, path, err) < 0) {
        free(st);
        return -1;
    }
    lm->file = st;
    lm->file_bytes = st->map.size;
    /* a flipped byte in the weights would otherwise go unnoticed: the
     * check reads the file once, the cost of about one generated token */
    if (tfm_model_file_verify(st, 0, err) < 0)
        goto fail;
    /* bfloat16, half precision and 8-bit tensors read as float32 (once the
     * kind of model is known: a decoder opened TFM_LM_STORED keeps the
     * matrices its decode steps read stored only); the stored matrices
     * are kept for the decode steps */
    lm->quant = tfm_calloc(1, sizeof(tfm_quant_views));
    const char *format = tfm_hf_format(st);
    size_t cfg_len = 0;
    const char *cfg_text = tfm_safetensors_meta(st, "config", &cfg_len);
    if (format && strcmp(format, "tfm-gpt") != 0) {
        tfm_err_set(err, "%s: model format '%s' is not a GPT language model (tfm-gpt)",
                    path, format);
        goto fail;
    }
    const char *pre;
    const tfm_convert_family *fam = tfm_convert_detect(st, &pre);
    if (fam && !fam->in_place) {
        if (tfm_quant_widen(st, lm->quant, err) < 0)
            goto fail;
        if (copied_lm_open(lm, fam, st, pre, err) < 0)
            goto fail;
        /* the weights were copied: the mapped pages would only hold memory
         * (the mapping stays, for the file's description) */
        if (st->map.mapped)
            madvise((void *)st->map.data, st->map.size, MADV_DONTNEED);
        return 0;
    }
    if (format && cfg_text) {
        tfm_model_file_keys c;
        tfm_model_file_keys_defaults(&c);
        char name[1100];
        snprintf(name, sizeof name, "%s:config", path);
        if (tfm_schema_apply_yaml(tfm_model_file_keys_schema(), &c, cfg_text, cfg_len, name,
                                  err) < 0)
            goto fail;
        if (c.model.vocab_size == 0) {
            const tfm_st_tensor *wte = tfm_hf_find(st, "wte.weight");
            if (wte && wte->ndim == 2)
                c.model.vocab_size = (int64_t)wte->shape[0];
        }
        if (tfm_model_config_from_keys(&c.model, &c.lora, &lm->cfg, err) < 0) {
            tfm_err_prefix(err, "%s", path);
            goto fail;
        }
        lm->prefix_lm = c.task == TFM_CONFIG_TASK_PREFIX_LM;
        lm->prefix_pairs = lm->prefix_lm && c.prefix_from == TFM_CONFIG_PREFIX_PAIRS;
    } else {
        /* shapes as stored: only BF16 and F16 tensors (of the same shape)
         * come without tfm's metadata */
        if (tfm_gpt2_config(st, &lm->cfg, err) < 0 ||
            tfm_hf_tokenizer_beside(path, lm->cfg.vocab_size, 0, &lm->tok, err) < 0)
            goto fail;
        if (lm->tok)
            lm->eos = tfm_tokenizer_specials(lm->tok)->eos;
        if (tfm_gpt2_eos(path, lm->cfg.vocab_size, &lm->eos, err) < 0)
            goto fail;
    }
    const int keep = (flags & TFM_LM_STORED) && lm->cfg.kind == TFM_KIND_DECODER;
    if (tfm_quant_widen_keep(st, lm->quant, keep, err) < 0)
        goto fail;
    if (tfm_weights_bind(&lm->w, &lm->cfg, keep ? lookup_stored : tfm_hf_lookup,
                         keep ? (void *)lm : st, err) < 0)
        goto fail;
    tfm_quant_attach(lm->quant, &lm->w);
    size_t tok_len = 0;
    const char *tok_json = tfm_safetensors_meta(st, "tokenizer", &tok_len);
    if (tok_json && !lm->tok) {
        char name[1100];
        snprintf(name, sizeof name, "%s:tokenizer", path);
        if (tfm_tokenizer_from_json(&lm->tok, tok_json, tok_len, name, err) < 0)
            goto fail;
        if (tfm_tokenizer_vocab_size(lm->tok) > (uint32_t)lm->cfg.vocab_size) {
            tfm_err_set(err, "%s: the tokenizer has %u tokens but the model only %d",
                        path, tfm_tokenizer_vocab_size(lm->tok), lm->cfg.vocab_size);
            goto fail;
        }
        lm->eos = tfm_tokenizer_specials(lm->tok)->eos;
    }
    const char *eos = tfm_safetensors_meta(st, "eos_token_id", NULL); /* a GGUF file's */
    if (eos)
        lm->eos = strtoll(eos, NULL, 10);
    return 0;
fail:
    tfm_lm_close(lm);
    return -1;
}

/* The adapter's tensors first, then the file's (tfm_weights_bind's lookup). */
typedef struct adapted_file {
    const tfm_safetensors *st;
    const tfm_adapter *ad;
} adapted_file;

static const float *lookup_adapted(void *ctx, const char *name, size_t d0, size_t d1,
                                   tfm_err *err)
{
    const adapted_file *a = ctx;
    const float *w = tfm_hf_lookup((void *)a->st, name, d0, d1, err);
    const float *t = w ? tfm_adapter_find(a->ad, name) : NULL;
    return t ? t : w;
}

/* tfm_adapter_load's view of a mapped file: F32 tensors by tfm's names. */
static const float *file_base(void *ctx, const char *name, size_t shape[2])
{
    const tfm_st_tensor *t = tfm_hf_find(ctx, name);
    if (!t || t->dtype != TFM_ST_F32 || t->ndim > 2)
        return NULL;
    shape[0] = t->shape[0];
    shape[1] = t->ndim == 2 ? t->shape[1] : 0;
    return t->data;
}

int tfm_lm_open_adapter(tfm_lm *lm, const char *path, const char *adapter, tfm_err *err)
{
    return tfm_lm_open_flags(lm, path, adapter, 0, err);
}

int tfm_lm_open_flags(tfm_lm *lm, const char *path, const char *adapter, unsigned flags,
                      tfm_err *err)
{
    /* an adapter adds to float32 base weights */
    if (lm_open(lm, path, adapter ? flags & ~TFM_LM_STORED : flags, err) < 0)
        return -1;
    if (!adapter)
        return 0;
    const char *pre;
    tfm_hf_family f = tfm_model_file_hf_family(path, &pre);
    if (lm->model) { /* a copied checkpoint: merged in place, bound where it was */
        if (tfm_adapter_apply(lm->model, adapter, path, f, err) < 0)
            goto fail;
        return 0;
    }
    tfm_adapter *ad = tfm_calloc(1, sizeof *ad);
    lm->adapter = ad;
    if (tfm_adapter_load(ad, adapter, path, f, file_base, lm->file, err) < 0)
        goto fail;
    adapted_file a = {lm->file, ad};
    tfm_weights_free(&lm->w);
    if (tfm_weights_bind(&lm->w, &lm->cfg, lookup_adapted, &a, err) < 0)
        goto fail;
    tfm_quant_attach(lm->quant, &lm->w);
    return 0;
fail:
    tfm_lm_close(lm);
    return -1;
}

void tfm_lm_close(tfm_lm *lm)
{
    if (lm->adapter) {
        tfm_adapter_free(lm->adapter);
        free(lm->adapter);
    }
    if (lm->tok)
        tfm_tokenizer_free(lm->tok);
    tfm_weights_free(&lm->w);
    if (lm->model) {
        tfm_model_free(lm->model);
        free(lm->model);
    }
    if (lm->file) {
        tfm_safetensors_close(lm->file);
        free(lm->file);
    }
    if (lm->quant) {
        tfm_quant_views_free(lm->quant);
        free(lm->quant);
    }
    memset(lm, 0, sizeof *lm);
    lm->eos = -1;
}

/* ---- conversion ------------------------------------------------------ */

int tfm_model_resave(const char *meta_from, const char *config_yaml, const tfm_model *m,
                     const tfm_tokenizer *tok, const char *out, tfm_weight_dtype dt,
                     tfm_err *err)
{
    tfm_buf tj = {0}, task = {0}, src = {0}, step = {0};
    if (tok)
        tfm_tokenizer_to_json(tok, &tj);
    int rc = -1, has_task, has_src, has_step;
    if ((has_task = tfm_lm_file_meta(meta_from, "task", &task, err)) < 0 ||
        (has_src = tfm_lm_file_meta(meta_from, "source_tokenizer", &src, err)) < 0 ||
        (has_step = tfm_lm_file_meta(meta_from, "step", &step, err)) < 0)
        goto out;
    rc = tfm_model_save_dtype(out, m, config_yaml, tok ? tj.data : NULL, tj.len,
                              has_src ? src.data : NULL, src.len,
                              has_task ? tfm_buf_cstr(&task) : NULL,
                              has_step ? strtoll(tfm_buf_cstr(&step), NULL, 10) : 0, dt, err);
    if (rc == -2) {
        tfm_err_prefix(err, "%s", meta_from);
        rc = -1;
    }
out:
    tfm_buf_free(&tj);
    tfm_buf_free(&task);
    tfm_buf_free(&src);
    tfm_buf_free(&step);
    return rc;
}


