/* bfloat16 and 8-bit weights in model files; see quant.h. */
#include "config.h"

#include "model/quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/transformer.h"
#include "tensor/q8.h"

const char *tfm_weight_dtype_name(tfm_weight_dtype dt)
{
    return dt == TFM_WEIGHTS_BF16 ? "bf16" : dt == TFM_WEIGHTS_Q8_0 ? "q8_0" : "f32";
}

int tfm_weight_dtype_parse(const char *s, tfm_weight_dtype *dt)
{
    for (int i = TFM_WEIGHTS_F32; i <= TFM_WEIGHTS_Q8_0; i++)
        if (!strcmp(s, tfm_weight_dtype_name((tfm_weight_dtype)i))) {
            *dt = (tfm_weight_dtype)i;
            return 0;
        }
    return -1;
}

/* A block's matrix ("h.3.attn.c_attn.weight", "enc.h.0.mlp.c_fc.weight"):
 * [in, out] in tfm, transposed when 8-bit. */
static int block_matrix(const char *name)
{
    static const char *const suffixes[] = {
        "attn.c_attn.weight", "attn.c_proj.weight", "xattn.c_q.weight",
        "xattn.c_kv.weight",  "xattn.c_proj.weight", "mlp.c_fc.weight",
        "mlp.wi_0.weight",    "mlp.wi_1.weight",     "mlp.c_proj.weight"};
    if (!strncmp(name, "enc.", 4))
        name += 4;
    if (strncmp(name, "h.", 2) || name[2] < '0' || name[2] > '9')
        return 0;
    name += 2;
    while (*name >= '0' && *name <= '9')
        name++;
    if (*name++ != '.')
        return 0;
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (!strcmp(name, suffixes[i]))
            return 1;
    return 0;
}

/* [V, C] tables read as a product's rows (the LM head), stored as they are. */
static int head_matrix(const char *name)
{
    return !strcmp(name, "wte.weight") || !strcmp(name, "lm_head.weight");
}

#define SCALE_SUFFIX ".q8_scale"

int tfm_quant_encode(const char *name, const float *data, int ndim, const size_t *shape,
                     tfm_weight_dtype dt, tfm_enc_tensor out[2], tfm_err *err)
{
    memset(out, 0, 2 * sizeof *out);
    tfm_enc_tensor *t = &out[0];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = TFM_ST_F32;
    t->ndim = ndim;
    size_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= t->shape[d] = shape[d];
    t->data = data;
    t->nbytes = n * sizeof(float);
    if (ndim != 2 || dt == TFM_WEIGHTS_F32)
        return 1;
    if (dt == TFM_WEIGHTS_BF16) {
        uint16_t *b = tfm_malloc(n * sizeof *b + 1);
        for (size_t i = 0; i < n; i++)
            b[i] = tfm_f32_to_bf16(data[i]);
        t->dtype = TFM_ST_BF16;
        t->data = b;
        t->nbytes = n * sizeof *b;
        t->owned = 1;
        return 1;
    }
    int trans = block_matrix(name);
    if (!trans && !head_matrix(name))
        return 1;
    /* rows of K inputs: [out, in] */
    const size_t N = trans ? shape[1] : shape[0], K = trans ? shape[0] : shape[1];
    if (K % TFM_Q8_BLOCK || n == 0)
        return 1;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(data[i]))
            return tfm_err_set(err, "tensor '%s' holds %g at [%zu, %zu]: q8_0 cannot store it "
                               "(the model is broken)", name, (double)data[i], i / shape[1],
                               i % shape[1]);
    const size_t nb = K / TFM_Q8_BLOCK;
    int8_t *q = tfm_malloc(n);
    uint16_t *s = tfm_malloc(N * nb * sizeof *s);
    int ok = 1;
#pragma omp parallel if (n >= (1 << 16))
    {
        float *row = tfm_malloc(sizeof(float) * K), *d = tfm_malloc(sizeof(float) * nb);
#pragma omp for schedule(static) reduction(&&:ok)
        for (size_t j = 0; j < N; j++) {
            const float *src = data + j * K;
            if (trans) {
                for (size_t i = 0; i < K; i++)
                    row[i] = data[i * N + j];
                src = row;
            }
            tfm_q8_quantize_ref(q + j * K, d, src, (int)K);
            /* as llama.cpp: the values from the exact scale, the scale
             * stored in half precision */
            for (size_t b = 0; b < nb; b++) {
                s[j * nb + b] = tfm_f32_to_f16(d[b]);
                ok = ok && isfinite(tfm_f16_to_f32(s[j * nb + b]));
            }
        }
        free(row);
        free(d);
    }
    if (!ok) { /* a block beyond half precision's range: kept exact */
        free(q);
        free(s);
        return 1;
    }
    t->dtype = TFM_ST_I8;
    t->shape[0] = N;
    t->shape[1] = K;
    t->data = q;
    t->nbytes = n;
    t->owned = 1;
    tfm_enc_tensor *u = &out[1];
    snprintf(u->name, sizeof u->name, "%s" SCALE_SUFFIX, name);
    u->dtype = TFM_ST_F16;
    u->ndim = 2;
    u->shape[0] = N;
    u->shape[1] = nb;
    u->data = s;
    u->nbytes = N * nb * sizeof *s;
    u->owned = 1;
    return 2;
}

/* ---- reading -------------------------------------------------------- */

static void shape_str(char *buf, size_t n, const tfm_st_tensor *t)
{
    int o = snprintf(buf, n, "%s [", tfm_st_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && (size_t)o < n; i++)
        o += snprintf(buf + o, n - (size_t)o, "%s%zu", i ? ", " : "", t->shape[i]);
    if ((size_t)o < n)
        snprintf(buf + o, n - (size_t)o, "]");
}

/* F16 or BF16 tensor t to F32 in place (in st's view). */
static void widen16(tfm_safetensors *st, tfm_st_tensor *t)
{
    const uint16_t *h = t->data;
    float *f = tfm_aligned_alloc(t->count * sizeof *f + 1);
    if (t->dtype == TFM_ST_BF16)
        for (size_t i = 0; i < t->count; i++)
            f[i] = tfm_bf16_to_f32(h[i]);
    else
        for (size_t i = 0; i < t->count; i++)
            f[i] = tfm_f16_to_f32(h[i]);
    size_t shape[TFM_ST_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    tfm_safetensors_replace(st, t, TFM_ST_F32, t->ndim, shape, f);
}

/* Kept stored by tfm_quant_widen_keep: what decode steps read stored. */
static int keepable(const char *name)
{
    return head_matrix(name) ||
           (block_matrix(name) && strncmp(name, "enc.", 4) && !strstr(name, "xattn."));
}

/* The 8-bit matrix t and its scales to F32 in tfm's layout (keep: only
 * checked); *view gets the stored matrix. */
static int widen_q8(tfm_safetensors *st, tfm_st_tensor *t, tfm_quant_view *view, int keep,
                    tfm_err *err)
{
    const char *w = tfm_safetensors_meta(st, "weights", NULL);
    char got[96];
    if (!w || strcmp(w, "q8_0"))
        return tfm_err_set(err, "%s: tensor '%s' is I8 but __metadata__ does not say "
                           "\"weights\": \"q8_0\"", st->name, t->name);
    int trans = block_matrix(t->name);
    if (t->ndim != 2 || (!trans && !head_matrix(t->name)))
        return tfm_err_set(err, "%s: tensor '%s' is I8: tfm reads 8-bit blocks only for "
                           "the blocks' matrices, wte and lm_head", st->name, t->name);
    const size_t N = t->shape[0], K = t->shape[1], nb = K / TFM_Q8_BLOCK;
    if (K % TFM_Q8_BLOCK)
        return tfm_err_set(err, "%s: 8-bit tensor '%s' has rows %zu wide, not a multiple "
                           "of %d", st->name, t->name, K, TFM_Q8_BLOCK);
    char sname[200];
    snprintf(sname, sizeof sname, "%s" SCALE_SUFFIX, t->name);
    tfm_st_tensor *s = (tfm_st_tensor *)tfm_safetensors_find(st, sname);
    if (!s)
        return tfm_err_set(err, "%s: 8-bit tensor '%s' has no scales ('%s')", st->name,
                           t->name, sname);
    if ((s->dtype != TFM_ST_F16 && s->dtype != TFM_ST_F32) || s->ndim != 2 ||
        s->shape[0] != N || s->shape[1] != nb) {
        shape_str(got, sizeof got, s);
        return tfm_err_set(err, "%s: tensor '%s' is %s but the 8-bit '%s' [%zu, %zu] needs "
                           "F16 [%zu, %zu]: the file is corrupt", st->name, sname, got,
                           t->name, N, K, N, nb);
    }
    if (s->dtype == TFM_ST_F32) { /* products read half precision: rounded */
        uint16_t *h = tfm_malloc(N * nb * sizeof *h + 1);
        for (size_t i = 0; i < N * nb; i++)
            h[i] = tfm_f32_to_f16(((const float *)s->data)[i]);
        size_t shape[2] = {N, nb};
        tfm_safetensors_replace(st, s, TFM_ST_F16, 2, shape, h);
    }
    const uint16_t *d = s->data;
    for (size_t i = 0; i < N * nb; i++) {
        const float v = tfm_f16_to_f32(d[i]);
        if (!(isfinite(v) && v >= 0))
            return tfm_err_set(err, "%s: tensor '%s': block %zu of row %zu has scale %g: "
                               "the file is corrupt", st->name, sname, i % nb, i / nb,
                               (double)v);
    }
    const int8_t *q = t->data;
    for (size_t i = 0; i < N * K; i++)
        if (q[i] == -128) /* the kernels' sign trick needs -127..127 */
            return tfm_err_set(err, "%s: tensor '%s': row %zu holds -128, outside Q8_0's "
                               "-127..127: the file is corrupt", st->name, t->name, i / K);
    if (keep) {
        *view = (tfm_quant_view){t->name,
                                 {(const float *)(const void *)q, TFM_WEIGHTS_Q8_0, q, d}, 1,
                                 {trans ? K : N, trans ? N : K}};
        return 0;
    }
    float *f = tfm_aligned_alloc(N * K * sizeof *f + 1);
    const tfm_q8 W = {q, d, (int)N, (int)K};
#pragma omp parallel if (N * K >= (1 << 16))
    {
        float *row = trans ? tfm_malloc(sizeof(float) * K) : NULL;
#pragma omp for schedule(static)
        for (size_t j = 0; j < N; j++) {
            tfm_q8_row(trans ? row : f + j * K, &W, (int)j);
            for (size_t i = 0; trans && i < K; i++)
                f[i * N + j] = row[i];
        }
        free(row);
    }
    *view = (tfm_quant_view){t->name, {f, TFM_WEIGHTS_Q8_0, q, d}, 0,
                             {trans ? K : N, trans ? N : K}};
    size_t shape[2] = {trans ? K : N, trans ? N : K};
    tfm_safetensors_replace(st, t, TFM_ST_F32, 2, shape, f);
    return 0;
}

int tfm_quant_widen(tfm_safetensors *st, tfm_quant_views *views, tfm_err *err)
{
    return tfm_quant_widen_keep(st, views, 0, err);
}

int tfm_quant_widen_keep(tfm_safetensors *st, tfm_quant_views *views, int keep, tfm_err *err)
{
    tfm_quant_views v = {0};
    v.v = tfm_calloc(st->n_tensors + 1, sizeof *v.v);
    for (size_t i = 0; i < st->n_tensors; i++) {
        tfm_st_tensor *t = &st->tensors[i];
        if (t->dtype == TFM_ST_I8) {
            if (widen_q8(st, t, &v.v[v.n], keep && keepable(t->name), err) < 0) {
                tfm_quant_views_free(&v);
                return -1;
            }
            v.n++;
        } else if (t->dtype == TFM_ST_BF16 || t->dtype == TFM_ST_F16) {
            const uint16_t *stored = t->data;
            const size_t nl = strlen(t->name), sl = strlen(SCALE_SUFFIX);
            if (t->dtype == TFM_ST_F16 && nl > sl && !strcmp(t->name + nl - sl, SCALE_SUFFIX))
                continue; /* 8-bit blocks' scales: read as they are */
            int bf = t->dtype == TFM_ST_BF16 && t->ndim == 2;
            if (bf && keep && keepable(t->name)) {
                const tfm_matrix m = {(const float *)(const void *)stored,
                                      TFM_WEIGHTS_BF16, stored, NULL};
                v.v[v.n++] = (tfm_quant_view){t->name, m, 1, {t->shape[0], t->shape[1]}};
                continue;
            }
            widen16(st, t);
            if (bf)
                v.v[v.n++] = (tfm_quant_view){t->name,
                                              {t->data, TFM_WEIGHTS_BF16, stored, NULL}, 0,
                                              {t->shape[0], t->shape[1]}};
        }
    }
    if (views)
        *views = v;
    else
        tfm_quant_views_free(&v);
    return 0;
}

static const tfm_quant_view *view_of(const tfm_quant_views *v, const float *f32)
{
    for (int i = 0; f32 && i < v->n; i++)
        if (v->v[i].m.f32 == f32)
            return &v->v[i];
    return NULL;
}

const tfm_quant_view *tfm_quant_find(const tfm_quant_views *v, const char *name)
{
    for (int i = 0; v && i < v->n; i++)
        if (!strcmp(v->v[i].name, name))
            return &v->v[i];
    return NULL;
}

/* *m becomes the stored matrix its float32 values are bound to, if any
 * (wte: only a stored-only one, whose rows embeddings must widen). */
static void attach(const tfm_quant_views *v, tfm_matrix *m, int stored_only)
{
    const tfm_quant_view *x = view_of(v, m->f32);
    if (!x || (stored_only && !x->stored_only))
        return;
    *m = x->m;
    if (x->stored_only)
        m->f32 = NULL;
}

void tfm_quant_attach(const tfm_quant_views *v, tfm_weights *w)
{
    if (!v || !v->n)
        return;
    /* an encoder-decoder's encoder blocks too: its whole-sequence forward
     * (model/forward.h) multiplies their 8-bit matrices */
    for (int l = 0; l < w->n_layer + w->n_enc_layer; l++) {
        tfm_layer_weights *L = l < w->n_layer ? &w->layers[l] : &w->enc_layers[l - w->n_layer];
        tfm_matrix *m[5] = {&L->qkv_w, &L->proj_w, &L->fc_w, &L->fc1_w, &L->fcp_w};
        for (int k = 0; k < 5; k++)
            attach(v, m[k], 0);
    }
    /* the head before wte: tied, both hold the same key */
    attach(v, &w->lm_head, 0);
    attach(v, &w->dec.wte, 1);
}

void tfm_quant_views_free(tfm_quant_views *v)
{
    free(v->v);
    memset(v, 0, sizeof *v);
}
