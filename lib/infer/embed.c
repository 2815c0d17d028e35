/* Layer selection, pooling and batching of embeddings; see embed.h. */
#include "config.h"

#include "infer/embed.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/order.h"
#include "io/json.h"

/* ---- layers ---- */

static void sel_range(tfm_layer_sel *s, int first, int last, int concat)
{
    s->n = 0;
    s->concat = concat;
    for (int l = first; l <= last; l++) {
        s->layer[s->n] = l;
        s->weight[s->n++] = 1.0f;
    }
}

int tfm_layer_sel_parse(tfm_layer_sel *s, const char *spec, int L, tfm_err *err)
{
    memset(s, 0, sizeof *s);
    if (!strcmp(spec, "first"))
        sel_range(s, 1, 1, 0);
    else if (!strcmp(spec, "last"))
        sel_range(s, L, L, 0);
    else if (!strcmp(spec, "second-last")) {
        if (L < 2)
            return tfm_err_set(err, "'second-last': the model has only %d block", L);
        sel_range(s, L - 1, L - 1, 0);
    } else if (!strcmp(spec, "sum-last-4") || !strcmp(spec, "concat-last-4")) {
        if (L < 4)
            return tfm_err_set(err, "'%s': the model has only %d blocks", spec, L);
        sel_range(s, L - 3, L, spec[0] == 'c');
    } else if (!strcmp(spec, "sum-all")) {
        sel_range(s, 1, L, 0);
    } else {
        char *end;
        long v = strtol(spec, &end, 10);
        if (end == spec || *end) {
            tfm_err_set(err, "'%s': expected a layer number or first, last, second-last, "
                             "sum-last-4, concat-last-4, sum-all", spec);
            return -2;
        }
        if (v > L || v < -(long)L - 1)
            return tfm_err_set(err, "%s is out of range: the model has layers 0 to %d "
                                    "(-1 to -%d from the top)", spec, L, L + 1);
        int l = v < 0 ? L + 1 + (int)v : (int)v;
        sel_range(s, l, l, 0);
    }
    return 0;
}

int tfm_layer_sel_elmo(tfm_layer_sel *s, const float *scalars, int n, float gamma, int L,
                       tfm_err *err)
{
    memset(s, 0, sizeof *s);
    if (n != L + 1)
        return tfm_err_set(err, "%d given, the model has %d layers (0 to %d)",
                           n, L + 1, L);
    float mx = scalars[0];
    for (int l = 1; l < n; l++)
        mx = scalars[l] > mx ? scalars[l] : mx;
    double sum = 0;
    for (int l = 0; l < n; l++)
        sum += exp((double)scalars[l] - mx);
    s->n = n;
    for (int l = 0; l < n; l++) {
        s->layer[l] = l;
        s->weight[l] = (float)(gamma * exp((double)scalars[l] - mx) / sum);
    }
    return 0;
}

int tfm_layer_sel_dim(const tfm_layer_sel *s, int C)
{
    return s->concat ? s->n * C : C;
}

void tfm_layer_sel_combine(const tfm_layer_sel *s, const float *const *hidden, size_t rows,
                           int C, float *out)
{
    const int D = tfm_layer_sel_dim(s, C);
#pragma omp parallel for schedule(static) if (rows * (size_t)D * s->n >= (1 << 16))
    for (size_t r = 0; r < rows; r++) {
        float *o = out + r * D;
        if (s->concat) {
            for (int k = 0; k < s->n; k++)
                memcpy(o + (size_t)k * C, hidden[s->layer[k]] + r * C, sizeof(float) * C);
            continue;
        }
        const float *h0 = hidden[s->layer[0]] + r * C;
        const float w0 = s->weight[0];
        for (int i = 0; i < C; i++)
            o[i] = w0 * h0[i];
        for (int k = 1; k < s->n; k++) {
            const float *h = hidden[s->layer[k]] + r * C;
            const float w = s->weight[k];
            for (int i = 0; i < C; i++)
                o[i] += w * h[i];
        }
    }
}

/* ---- pooling ---- */

static const char *const pool_names[TFM_POOL_N] = {"cls", "max", "mean", "mean-sqrt-len",
                                                   "last", "none"};

int tfm_pool_parse(const char *name)
{
    for (int i = 0; i < TFM_POOL_N; i++)
        if (!strcmp(name, pool_names[i]))
            return i;
    return -1;
}

const char *tfm_pool_name(tfm_pool p)
{
    return pool_names[p];
}

int tfm_pool_set_parse(const char *spec, unsigned *set, tfm_err *err)
{
    unsigned s = 0;
    int n = 0;
    for (const char *p = spec;; n++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char name[32];
        int m = -1;
        if (len < sizeof name) {
            memcpy(name, p, len);
            name[len] = 0;
            m = tfm_pool_parse(name);
        }
        if (m < 0)
            return tfm_err_set(err, "'%s': expected cls, mean, max, mean-sqrt-len, last or "
                                    "none, or a comma list of them (mean,max)", spec);
        if (s & TFM_POOL_SET(m))
            return tfm_err_set(err, "'%s': %s twice", spec, name);
        s |= TFM_POOL_SET(m);
        if (!end)
            break;
        p = end + 1;
    }
    if ((s & TFM_POOL_SET(TFM_POOL_NONE)) && n > 0)
        return tfm_err_set(err, "'%s': none (every token's vector) cannot be in a list",
                           spec);
    *set = s;
    return 0;
}

const char *tfm_pool_set_name(unsigned set, char *buf, size_t size)
{
    size_t k = 0;
    buf[0] = 0;
    for (int m = 0; m < TFM_POOL_N; m++)
        if (set & TFM_POOL_SET(m)) {
            int w = snprintf(buf + k, size > k ? size - k : 0, "%s%s", k ? "," : "",
                             pool_names[m]);
            k += w > 0 ? (size_t)w : 0;
        }
    return buf;
}

int tfm_pool_set_count(unsigned set)
{
    int n = 0;
    for (int m = 0; m < TFM_POOL_N; m++)
        n += (set & TFM_POOL_SET(m)) != 0;
    return n;
}

void tfm_pool_rows(tfm_pool p, const float *x, int T, int D, float *out)
{
    switch (p) {
    case TFM_POOL_CLS:
        memcpy(out, x, sizeof(float) * D);
        break;
    case TFM_POOL_LAST:
        memcpy(out, x + (size_t)(T - 1) * D, sizeof(float) * D);
        break;
    case TFM_POOL_MAX:
        memcpy(out, x, sizeof(float) * D);
        for (int t = 1; t < T; t++)
            for (int i = 0; i < D; i++)
                out[i] = fmaxf(out[i], x[(size_t)t * D + i]);
        break;
    case TFM_POOL_MEAN:
    case TFM_POOL_MEAN_SQRT_LEN:
    default: {
        /* in double: a long input's mean must not depend on the order */
        const double div = p == TFM_POOL_MEAN_SQRT_LEN ? sqrt((double)T) : (double)T;
        for (int i = 0; i < D; i++) {
            double s = 0;
            for (int t = 0; t < T; t++)
                s += x[(size_t)t * D + i];
            out[i] = (float)(s / div);
        }
        break;
    }
    }
}

void tfm_pool_set_rows(unsigned set, const float *x, int T, int D, float *out)
{
    for (int m = 0; m < TFM_POOL_NONE; m++)
        if (set & TFM_POOL_SET(m)) {
            tfm_pool_rows((tfm_pool)m, x, T, D, out);
            out += D;
        }
}

void tfm_l2_normalize(float *x, int D)
{
    double s = 0;
    for (int i = 0; i < D; i++)
        s += (double)x[i] * x[i];
    if (s <= 0)
        return;
    float inv = (float)(1.0 / sqrt(s));
    for (int i = 0; i < D; i++)
        x[i] *= inv;
}

double tfm_cosine(const float *a, const float *b, int D)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < D; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0.0;
}

/* ---- defaults ---- */

void tfm_embed_opts_default(tfm_embed_opts *o, const tfm_model_config *cfg)
{
    memset(o, 0, sizeof *o);
    int L = tfm_embedder_layers(cfg);
    tfm_err err;
    tfm_layer_sel_parse(&o->layers, "last", L, &err);
    o->pools = TFM_POOL_SET(cfg->kind == TFM_KIND_DECODER ? TFM_POOL_LAST : TFM_POOL_MEAN);
    o->max_tokens = 4096;
}

/* A Pooling module's pooling_mode_* keys, in its Pooling.forward's order;
 * -1: a mode tfm does not have. */
static const struct {
    const char *key;
    int mode;
} st_modes[] = {
    {"pooling_mode_cls_token", TFM_POOL_CLS},
    {"pooling_mode_max_tokens", TFM_POOL_MAX},
    {"pooling_mode_mean_tokens", TFM_POOL_MEAN},
    {"pooling_mode_mean_sqrt_len_tokens", TFM_POOL_MEAN_SQRT_LEN},
    {"pooling_mode_weightedmean_tokens", -1},
    {"pooling_mode_lasttoken", TFM_POOL_LAST},
};

/* The set of a Pooling config.json: every pooling_mode_* that is true. */
static int st_pooling(const tfm_json_doc *doc, const char *path, unsigned *pools, tfm_err *err)
{
    const tfm_json *c = doc->root;
    if (tfm_json_expect(doc, c, TFM_JSON_OBJECT, "a Pooling config", err) < 0)
        return -1;
    unsigned set = 0;
    for (size_t i = 0; i < c->n; i++) {
        const char *key = c->keys[i]->str;
        const tfm_json *v = c->items[i];
        if (strncmp(key, "pooling_mode_", 13))
            continue;
        if (v->type != TFM_JSON_BOOL)
            return tfm_err_at(err, path, v->line, v->col, "%s: expected true or false", key);
        if (!v->boolean)
            continue;
        int mode = -1;
        for (size_t k = 0; k < sizeof st_modes / sizeof *st_modes; k++)
            if (!strcmp(key, st_modes[k].key))
                mode = st_modes[k].mode;
        if (mode < 0)
            return tfm_err_at(err, path, v->line, v->col, "%s is set: tfm has no such pooling "
                              "(it has cls_token, max_tokens, mean_tokens, "
                              "mean_sqrt_len_tokens, lasttoken)", key);
        set |= TFM_POOL_SET(mode);
    }
    if (!set)
        return tfm_err_set(err, "%s: no pooling_mode_* is set (tfm has cls_token, "
                                "max_tokens, mean_tokens, mean_sqrt_len_tokens, lasttoken)",
                           path);
    *pools = set;
    return 0;
}

/* The Transformer module's sentence_bert_config.json (in dir): its
 * max_seq_length; do_lower_case true (the text lowercased before the
 * tokenizer) is refused. */
static int st_transformer(const char *dir, int *max_len, tfm_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/sentence_bert_config.json", dir);
    if (access(path, F_OK) != 0)
        return 0;
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = -1;
    int64_t n;
    const tfm_json *j;
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0)
        goto out;
    j = tfm_json_get(doc.root, "do_lower_case");
    if (j && j->type == TFM_JSON_BOOL && j->boolean) {
        tfm_err_at(err, path, j->line, j->col, "do_lower_case true is not supported (give a "
                   "lowercasing tokenizer instead)");
        goto out;
    }
    j = tfm_json_get(doc.root, "max_seq_length");
    if (j && j->type != TFM_JSON_NULL) {
        if (tfm_json_get_int(&doc, j, "max_seq_length", 1, 1 << 24, &n, err) < 0)
            goto out;
        *max_len = (int)n;
    }
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

int tfm_embed_st_defaults(const char *dir, unsigned *pools, int *normalize, int *max_len,
                          tfm_err *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/modules.json", dir);
    if (access(path, F_OK) != 0)
        return 0;
    tfm_json_doc doc, pdoc = {0};
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = -1;
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_ARRAY, "modules.json", err) < 0)
        goto out;
    for (size_t i = 0; i < doc.root->n; i++) {
        const tfm_json *m = doc.root->items[i];
        const tfm_json *type = tfm_json_get(m, "type"), *mpath = tfm_json_get(m, "path");
        if (!type || type->type != TFM_JSON_STRING)
            continue;
        if (strstr(type->str, "Normalize"))
            *normalize = 1;
        if (strstr(type->str, "models.Transformer") && mpath && mpath->type == TFM_JSON_STRING) {
            char td[4400];
            snprintf(td, sizeof td, "%s/%s", dir, mpath->str);
            if (st_transformer(td, max_len, err) < 0)
                goto out;
        }
        if (!strstr(type->str, "Pooling") || !mpath || mpath->type != TFM_JSON_STRING)
            continue;
        char pc[4400];
        snprintf(pc, sizeof pc, "%s/%s/config.json", dir, mpath->str);
        tfm_json_doc_free(&pdoc);
        if (tfm_json_parse_file(&pdoc, pc, 0, err) < 0)
            goto out;
        if (st_pooling(&pdoc, pc, pools, err) < 0)
            goto out;
    }
    rc = 1;
out:
    tfm_json_doc_free(&pdoc);
    tfm_json_doc_free(&doc);
    return rc;
}

/* ---- the embedder ---- */

int tfm_embedder_layers(const tfm_model_config *cfg)
{
    return cfg->kind == TFM_KIND_ENCODER_DECODER ? tfm_model_config_enc_layers(cfg)
                                                 : cfg->n_layer;
}

int tfm_embedder_init(tfm_embedder *e, const tfm_model_config *cfg, const tfm_weights *w,
                      const tfm_embed_opts *o, tfm_err *err)
{
    memset(e, 0, sizeof *e);
    tfm_fwd_stack stack =
        cfg->kind == TFM_KIND_ENCODER_DECODER ? TFM_FWD_ENCODER : TFM_FWD_MAIN;
    if (tfm_fwd_init(&e->fwd, cfg, w, stack, err) < 0)
        return -1;
    e->o = *o;
    if (e->o.max_tokens < 1)
        e->o.max_tokens = 1;
    e->C = cfg->n_embd;
    e->L = e->fwd.n_layer;
    for (int k = 0; k < o->layers.n; k++)
        if (o->layers.layer[k] < 0 || o->layers.layer[k] > e->L) {
            tfm_fwd_free(&e->fwd);
            return tfm_err_set(err, "layer %d is out of range: the model has layers 0 to %d",
                               o->layers.layer[k], e->L);
        }
    e->D = tfm_layer_sel_dim(&o->layers, e->C);
    const unsigned none = TFM_POOL_SET(TFM_POOL_NONE);
    if (!o->pools || (o->pools & ~(none | (none - 1))) ||
        ((o->pools & none) && o->pools != none)) {
        tfm_fwd_free(&e->fwd);
        return tfm_err_set(err, "pooling: none, or a set of cls, max, mean, mean-sqrt-len "
                                "and last");
    }
    e->W = o->pools == none ? e->D : tfm_pool_set_count(o->pools) * e->D;
    tfm_fwd_pack_weights(&e->fwd);
    e->hidden = tfm_calloc((size_t)e->L + 1, sizeof *e->hidden);
    return 0;
}

void tfm_embedder_free(tfm_embedder *e)
{
    tfm_fwd_free(&e->fwd);
    if (e->hidden)
        for (int l = 0; l <= e->L; l++)
            free(e->hidden[l]);
    free(e->hidden);
    free(e->comb);
    free(e->order);
    free(e->btok);
    free(e->bseg);
    free(e->blen);
    memset(e, 0, sizeof *e);
}

/* Hidden-state and combination buffers for rows rows. */
static void ensure_rows(tfm_embedder *e, size_t rows)
{
    if (rows <= e->rows)
        return;
    for (int k = 0; k < e->o.layers.n; k++) {
        int l = e->o.layers.layer[k];
        free(e->hidden[l]);
        e->hidden[l] = NULL;
    }
    for (int k = 0; k < e->o.layers.n; k++) {
        int l = e->o.layers.layer[k];
        if (!e->hidden[l])
            e->hidden[l] = tfm_aligned_alloc(sizeof(float) * rows * e->C);
    }
    free(e->comb);
    e->comb = tfm_aligned_alloc(sizeof(float) * rows * e->D);
    e->rows = rows;
}

static size_t input_len(const void *in, size_t i)
{
    return (size_t)((const tfm_embed_input *)in)->len[i];
}

/* Runs inputs order[0..n) as one packed batch and writes their results. */
static int run_batch(tfm_embedder *e, const tfm_embed_input *in, const size_t *order, int n,
                     size_t rows, const size_t *out_row, float *out, tfm_err *err)
{
    if (rows > e->btok_n) {
        free(e->btok);
        free(e->bseg);
        e->btok = tfm_malloc(sizeof(uint32_t) * rows);
        e->bseg = tfm_malloc(rows);
        e->btok_n = rows;
    }
    e->blen = tfm_realloc(e->blen, sizeof(int) * (size_t)n);
    size_t r = 0;
    for (int k = 0; k < n; k++) {
        int i = (int)order[k];
        e->blen[k] = in->len[i];
        memcpy(e->btok + r, in->tok + in->off[i], sizeof(uint32_t) * in->len[i]);
        if (in->seg)
            memcpy(e->bseg + r, in->seg + in->off[i], (size_t)in->len[i]);
        r += (size_t)in->len[i];
    }
    ensure_rows(e, rows);
    tfm_fwd_batch b = {.n = n, .len = e->blen, .tok = e->btok,
                       .seg = in->seg ? e->bseg : NULL, .hidden = e->hidden};
    if (tfm_fwd_run(&e->fwd, &b, err) < 0)
        return -1;
    tfm_layer_sel_combine(&e->o.layers, (const float *const *)e->hidden, rows, e->C, e->comb);
    const int D = e->D, W = e->W;
    r = 0;
    for (int k = 0; k < n; k++) {
        int i = (int)order[k], T = in->len[i];
        const float *x = e->comb + r * D;
        if (e->o.pools == TFM_POOL_SET(TFM_POOL_NONE)) {
            float *o = out + out_row[i] * D;
            memcpy(o, x, sizeof(float) * (size_t)T * D);
            if (e->o.normalize)
                for (int t = 0; t < T; t++)
                    tfm_l2_normalize(o + (size_t)t * D, D);
        } else {
            /* normalized after concatenation, as sentence-transformers does */
            float *o = out + (size_t)i * W;
            tfm_pool_set_rows(e->o.pools, x, T, D, o);
            if (e->o.normalize)
                tfm_l2_normalize(o, W);
        }
        r += (size_t)T;
    }
    return 0;
}

int tfm_embedder_run(tfm_embedder *e, const tfm_embed_input *in, float *out, tfm_err *err)
{
    if (in->n <= 0)
        return 0;
    /* check lengths first, so that an error names the input in the chunk */
    int maxT = tfm_fwd_max_len(&e->fwd);
    for (int i = 0; i < in->n; i++)
        if (in->len[i] < 1 || in->len[i] > maxT)
            return tfm_err_set(err, "input %d has %d tokens: the model takes 1 to %d", i,
                               in->len[i], maxT);
    size_t need = (size_t)in->n * 2;
    if (need > e->n_order) {
        free(e->order);
        e->order = tfm_malloc(sizeof *e->order * need);
        e->n_order = need;
    }
    size_t *order = e->order;
    size_t *out_row = NULL;
    tfm_order_by_key(order, (size_t)in->n, input_len, in);
    if (e->o.pools == TFM_POOL_SET(TFM_POOL_NONE)) {
        out_row = tfm_malloc(sizeof(size_t) * (size_t)in->n);
        size_t r = 0;
        for (int i = 0; i < in->n; i++) {
            out_row[i] = r;
            r += (size_t)in->len[i];
        }
    }
    int rc = 0;
    for (int k = 0; k < in->n && rc == 0;) {
        size_t rows = (size_t)in->len[order[k]];
        int m = 1;
        while (k + m < in->n && rows + (size_t)in->len[order[k + m]] <= (size_t)e->o.max_tokens) {
            rows += (size_t)in->len[order[k + m]];
            m++;
        }
        rc = run_batch(e, in, order + k, m, rows, out_row, out, err);
        k += m;
    }
    free(out_row);
    return rc;
}

int tfm_embedder_attention(tfm_embedder *e, const uint32_t *tok, const uint8_t *seg, int len,
                           float *attn, float *vec, tfm_err *err)
{
    ensure_rows(e, (size_t)len);
    tfm_fwd_batch b = {.n = 1, .len = &len, .tok = tok, .seg = seg, .hidden = e->hidden,
                       .attn = attn, .attn_seq = 0};
    if (tfm_fwd_run(&e->fwd, &b, err) < 0)
        return -1;
    if (vec) {
        tfm_layer_sel_combine(&e->o.layers, (const float *const *)e->hidden, (size_t)len, e->C,
                              e->comb);
        if (e->o.pools == TFM_POOL_SET(TFM_POOL_NONE)) {
            memcpy(vec, e->comb, sizeof(float) * (size_t)len * e->D);
            if (e->o.normalize)
                for (int t = 0; t < len; t++)
                    tfm_l2_normalize(vec + (size_t)t * e->D, e->D);
        } else {
            tfm_pool_set_rows(e->o.pools, e->comb, len, e->D, vec);
            if (e->o.normalize)
                tfm_l2_normalize(vec, e->W);
        }
    }
    return 0;
}

/* ---- text to inputs ---- */

size_t tfm_embed_encode(const tfm_tokenizer *tok, tfm_tok_scratch *scratch, const char *a,
                        size_t na, const char *b, size_t nb, size_t max, tfm_ids *ids,
                        tfm_buf *seg)
{
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    size_t n0 = ids->len;
    int bert = sp->cls >= 0 && sp->sep >= 0;
    if (bert)
        tfm_ids_push(ids, (uint32_t)sp->cls);
    tfm_tokenizer_encode(tok, scratch, a, na, 0, ids);
    size_t a_end = ids->len; /* A's tokens are [n0 + bert, a_end) */
    if (bert)
        tfm_ids_push(ids, (uint32_t)sp->sep);
    size_t na_ids = ids->len - n0;
    size_t b_end = ids->len;
    if (b) {
        if (!bert && sp->eos >= 0)
            tfm_ids_push(ids, (uint32_t)sp->eos);
        na_ids = ids->len - n0;
        tfm_tokenizer_encode(tok, scratch, b, nb, 0, ids);
        b_end = ids->len;
        if (bert)
            tfm_ids_push(ids, (uint32_t)sp->sep);
    }
    size_t got = ids->len - n0;
    if (seg)
        for (size_t i = n0; i < ids->len; i++)
            tfm_buf_putc(seg, (char)(b && bert && i - n0 >= na_ids ? 1 : 0));
    if (!max || got <= max)
        return got;
    if (!b) {
        tfm_embed_truncate(tok, ids, seg, n0, max);
        return got;
    }
    /* A pair loses tokens longest-first, as in training (ftdata.h), so that
     * a long A does not leave B out. */
    size_t a0 = n0 + (size_t)bert, b0 = n0 + na_ids;
    size_t la = a_end - a0, lb = b_end - b0, specials = got - la - lb, ka, kb;
    tfm_tok_pair_truncate(la, lb, max > specials ? max - specials : 0, &ka, &kb);
    /* the separators, the kept B and its [SEP] move up after the kept A
     * (seg, when given, runs beside ids) */
    size_t w = a0 + ka;
    for (size_t i = a_end; i < ids->len; i++) {
        if (i >= b0 + kb && i < b_end)
            continue;
        ids->data[w] = ids->data[i];
        if (seg)
            seg->data[w] = seg->data[i];
        w++;
    }
    ids->len = w;
    if (seg)
        seg->len = w;
    if (ids->len - n0 > max) /* fewer positions than specials */
        tfm_embed_truncate(tok, ids, seg, n0, max);
    return got;
}

void tfm_embed_truncate(const tfm_tokenizer *tok, tfm_ids *ids, tfm_buf *seg, size_t from,
                        size_t max)
{
    size_t n = ids->len - from;
    if (n <= max)
        return;
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    uint32_t last = ids->data[ids->len - 1];
    char last_seg = seg ? seg->data[seg->len - 1] : 0;
    ids->len = from + max;
    if (seg)
        seg->len = from + max;
    if (max > 1 && sp->sep >= 0 && last == (uint32_t)sp->sep) {
        ids->data[ids->len - 1] = last;
        if (seg)
            seg->data[seg->len - 1] = last_seg;
    }
}
