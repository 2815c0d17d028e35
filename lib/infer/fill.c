#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer/fill.h"
#include "lm/lm.h"

int tfm_filler_open(tfm_filler *f, const char *path, const char *adapter, tfm_err *err)
{
    memset(f, 0, sizeof *f);
    tfm_model_file_keys k;
    if (tfm_model_load_keys_adapter(path, adapter, &k, &f->m, &f->tok, err) < 0)
        return -1;
    tfm_data_keys_defaults(&f->data);
    if (k.stored && tfm_data_keys_of_file(path, &f->data, err) < 0)
        goto fail;
    const tfm_model_config *c = &f->m.cfg;
    if (c->kind != TFM_KIND_ENCODER) {
        tfm_err_set(err, "%s: model.kind is %s: fill-mask needs an encoder with a masked-LM "
                    "head (train.task mlm)", path, tfm_kind_name(c->kind));
        goto fail;
    }
    if (!c->mlm_head) {
        tfm_err_set(err, "%s has no masked-LM head (model.mlm_head: an encoder pre-trained "
                    "with train.task mlm, or a BERT checkpoint with cls.predictions)", path);
        goto fail;
    }
    if (!f->tok) {
        tfm_err_set(err, "%s has no tokenizer", path);
        goto fail;
    }
    const tfm_tok_specials *sp = tfm_tokenizer_specials(f->tok);
    f->cls = f->data.cls_id >= 0 ? f->data.cls_id : sp->cls;
    f->sep = f->data.sep_id >= 0 ? f->data.sep_id : sp->sep;
    f->mask = f->data.mask_id >= 0 ? f->data.mask_id : sp->mask;
    size_t n = 0;
    const char *piece = f->mask >= 0 ? tfm_tokenizer_piece(f->tok, (uint32_t)f->mask, &n) : NULL;
    if (!piece) {
        tfm_err_set(err, "%s: its tokenizer has no mask token", path);
        goto fail;
    }
    if (n >= sizeof f->mask_text)
        n = sizeof f->mask_text - 1;
    memcpy(f->mask_text, piece, n);
    f->mask_text[n] = 0;
    f->scratch = tfm_tok_scratch_new(f->tok);
    f->in = tfm_malloc((size_t)c->block_size * sizeof *f->in);
    f->tgt = tfm_malloc((size_t)c->block_size * sizeof *f->tgt);
    /* segment 0 everywhere: its embedding is added, as HF's token_type_ids
     * of zeros (a NULL segments array would add none) */
    if (c->n_segments)
        f->seg = tfm_calloc((size_t)c->block_size, sizeof *f->seg);
    f->p = tfm_malloc((size_t)c->vocab_size * sizeof *f->p);
    tfm_model_set_inference(&f->m);
    tfm_model_set_training(&f->m, 0);
    return 0;
fail:
    tfm_filler_close(f);
    return -1;
}

void tfm_filler_close(tfm_filler *f)
{
    if (f->m.params)
        tfm_model_free(&f->m);
    if (f->scratch)
        tfm_tok_scratch_free(f->scratch);
    if (f->tok)
        tfm_tokenizer_free(f->tok);
    tfm_ids_free(&f->ids);
    free(f->in);
    free(f->tgt);
    free(f->seg);
    free(f->p);
    memset(f, 0, sizeof *f);
}

void tfm_fill_out_free(tfm_fill_out *o)
{
    free(o->pos);
    free(o->id);
    free(o->prob);
    memset(o, 0, sizeof *o);
}

/* idx[0..k) kept sorted: higher value first, then lower index */
void tfm_top_k(const double *p, size_t n, int k, uint32_t *idx)
{
    int have = 0;
    for (size_t i = 0; i < n; i++) {
        if (have == k && !(p[i] > p[idx[k - 1]]))
            continue; /* ties keep the lower index already in */
        int j = have < k ? have++ : k - 1;
        while (j > 0 && p[i] > p[idx[j - 1]]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = (uint32_t)i;
    }
}

int tfm_filler_run(tfm_filler *f, const char *text, size_t len, int k, tfm_fill_out *o,
                   tfm_err *err)
{
    const tfm_model_config *c = &f->m.cfg;
    int V = c->vocab_size, T = c->block_size;
    if (k > V)
        k = V;
    if (k < 1)
        k = 1;
    tfm_ids_clear(&f->ids);
    if (f->cls >= 0 && f->sep >= 0)
        tfm_ids_push(&f->ids, (uint32_t)f->cls);
    tfm_tokenizer_encode(f->tok, f->scratch, text, len, 1, &f->ids);
    if (f->cls >= 0 && f->sep >= 0)
        tfm_ids_push(&f->ids, (uint32_t)f->sep);
    int n_mask = 0;
    for (size_t i = 0; i < f->ids.len; i++)
        n_mask += f->ids.data[i] == (uint32_t)f->mask;
    if (!n_mask) {
        tfm_err_set(err, "no mask token %s in the text", f->mask_text);
        return -2;
    }
    if (f->ids.len > (size_t)T)
        return tfm_err_set(err, "%zu tokens, more than the model's context of %d",
                           f->ids.len, T);
    int n = (int)f->ids.len;
    if ((size_t)n_mask > o->cap_mask) {
        o->cap_mask = (size_t)n_mask;
        o->pos = tfm_realloc(o->pos, o->cap_mask * sizeof *o->pos);
    }
    free(o->id);
    free(o->prob);
    o->id = tfm_malloc((size_t)n_mask * (size_t)k * sizeof *o->id);
    o->prob = tfm_malloc((size_t)n_mask * (size_t)k * sizeof *o->prob);
    o->n_mask = n_mask;
    o->k = k;
    o->n_tokens = n;
    int j = 0;
    for (int i = 0; i < n; i++) {
        f->in[i] = (int32_t)f->ids.data[i];
        /* a target makes the MLM head run at this position; its value only
         * enters the loss, which is not used */
        f->tgt[i] = f->ids.data[i] == (uint32_t)f->mask ? (int32_t)f->mask : -1;
        if (f->tgt[i] >= 0)
            o->pos[j++] = i;
    }
    tfm_batch b = {.inputs = f->in, .targets = f->tgt, .B = 1, .T = n, .lengths = &n,
                   .segments = f->seg};
    if (tfm_model_forward_batch(&f->m, &b, NULL, err) < 0)
        return -1;
    int rows = 0, cols = 0;
    const float *z = tfm_model_head_out(&f->m, TFM_HEAD_LM, &rows, &cols);
    if (!z || rows != n_mask || cols != V)
        return tfm_err_set(err, "the masked-LM head gave %d rows of %d, not %d of %d", rows,
                           cols, n_mask, V);
    for (int m = 0; m < n_mask; m++) {
        const float *zr = z + (size_t)m * V;
        /* a NaN would sort anywhere and make every probability NaN */
        for (int v = 0; v < V; v++)
            if (!isfinite(zr[v]))
                return tfm_err_set(err, "the model produced %s at mask %d: its weights are "
                                        "not finite (a diverged training run?)",
                                   isnan(zr[v]) ? "NaN" : "an infinite score", m + 1);
        double mx = zr[0], s = 0.0;
        for (int v = 1; v < V; v++)
            if (zr[v] > mx)
                mx = zr[v];
        for (int v = 0; v < V; v++)
            s += f->p[v] = exp((double)zr[v] - mx);
        for (int v = 0; v < V; v++)
            f->p[v] /= s;
        uint32_t *idx = o->id + (size_t)m * k;
        tfm_top_k(f->p, (size_t)V, k, idx);
        for (int r = 0; r < k; r++)
            o->prob[(size_t)m * k + r] = f->p[idx[r]];
    }
    return 0;
}
