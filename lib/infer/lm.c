/* Opening a model file for inference: the weights stay in the mapping. */
#include "config.h"

#include "infer/generate.h"

#include <stdio.h>
#include <string.h>

#include "io/config.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"

static const tfm_st_tensor *find(const tfm_safetensors *st, const char *name)
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

static const float *lookup(void *ctx, const char *name, size_t d0, size_t d1, tfm_err *err)
{
    const tfm_safetensors *st = ctx;
    const tfm_st_tensor *t = find(st, name);
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

/* A HuggingFace GPT-2 file carries no config: read the shape off the
 * tensors (64-wide heads, as every GPT-2 size has). */
static int config_from_shapes(const tfm_safetensors *st, tfm_gpt_config *g, tfm_err *err)
{
    const tfm_st_tensor *wte = find(st, "wte.weight"), *wpe = find(st, "wpe.weight");
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2)
        return tfm_err_set(err, "%s: not a tfm model file (no \"format\": \"tfm-gpt\" "
                           "in __metadata__) nor a GPT-2 checkpoint", st->name);
    tfm_gpt_config_default(g);
    g->vocab_size = (int)wte->shape[0];
    g->n_embd = (int)wte->shape[1];
    g->block_size = (int)wpe->shape[0];
    g->n_head = g->n_embd % 64 == 0 ? g->n_embd / 64 : 1;
    int L = 0;
    for (;; L++) {
        char name[64];
        snprintf(name, sizeof name, "h.%d.ln_1.weight", L);
        if (!find(st, name))
            break;
    }
    g->n_layer = L;
    g->tie_embeddings = 1;
    return tfm_gpt_config_check(g, err) < 0 ? tfm_err_prefix(err, "%s", st->name) : 0;
}

int tfm_lm_open(tfm_lm *lm, const char *path, tfm_err *err)
{
    memset(lm, 0, sizeof *lm);
    lm->eos = -1;
    tfm_safetensors *st = tfm_calloc(1, sizeof *st);
    if (tfm_safetensors_open(st, path, err) < 0) {
        free(st);
        return -1;
    }
    lm->file = st;
    lm->file_bytes = st->map.size;
    /* a flipped byte in the weights would otherwise go unnoticed: the
     * check reads the file once, the cost of about one generated token */
    if (tfm_checkpoint_verify(st, err) < 0)
        goto fail;
    const char *format = tfm_safetensors_meta(st, "format", NULL);
    size_t cfg_len = 0;
    const char *cfg_text = tfm_safetensors_meta(st, "config", &cfg_len);
    if (format && strcmp(format, "tfm-gpt") != 0) {
        tfm_err_set(err, "%s: model format '%s' is not a GPT language model (tfm-gpt)",
                    path, format);
        goto fail;
    }
    if (format && cfg_text) {
        tfm_config c;
        tfm_config_defaults(&c);
        char name[1100];
        snprintf(name, sizeof name, "%s:config", path);
        if (tfm_config_apply_yaml(&c, cfg_text, cfg_len, name, err) < 0)
            goto fail;
        if (c.model.vocab_size == 0) {
            const tfm_st_tensor *wte = find(st, "wte.weight");
            if (wte && wte->ndim == 2)
                c.model.vocab_size = (int64_t)wte->shape[0];
        }
        if (tfm_config_gpt(&c, &lm->cfg, err) < 0) {
            tfm_err_prefix(err, "%s", path);
            goto fail;
        }
    } else if (config_from_shapes(st, &lm->cfg, err) < 0) {
        goto fail;
    }
    if (tfm_gpt_weights_bind(&lm->w, &lm->cfg, lookup, st, err) < 0)
        goto fail;
    size_t tok_len = 0;
    const char *tok_json = tfm_safetensors_meta(st, "tokenizer", &tok_len);
    if (tok_json) {
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
    return 0;
fail:
    tfm_lm_close(lm);
    return -1;
}

void tfm_lm_close(tfm_lm *lm)
{
    if (lm->tok)
        tfm_tokenizer_free(lm->tok);
    tfm_gpt_weights_free(&lm->w);
    if (lm->file) {
        tfm_safetensors_close(lm->file);
        free(lm->file);
    }
    memset(lm, 0, sizeof *lm);
    lm->eos = -1;
}
