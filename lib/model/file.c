/* tfm's model files: checksums, writing, reading (HuggingFace's are
 * convert/'s, opening either is lm/'s). */
#include "config.h"

#include "model/file.h"
#include "model/lora.h"
#include "model/quant.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"
#include "io/json.h"

/* ---- integrity ------------------------------------------------------ */

/* Each step is a bijection of the state for a fixed input word and of the
 * word for a fixed state, so any single changed word changes the result. */
typedef struct hash {
    uint64_t h;
} hash;

static void hash_bytes(hash *s, const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = s->h ^ (n * 0x9e3779b97f4a7c15ULL);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h = (h << 29) | (h >> 35);
    }
    uint64_t w = 0;
    memcpy(&w, b + i, n - i);
    h = (h ^ w ^ ((uint64_t)(n - i) << 56)) * 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    s->h = h;
}

static void hash_str(hash *s, const char *str, size_t n)
{
    hash_bytes(s, str, n);
}

/* The checksum covers what a reader sees: every tensor (name, dtype, shape,
 * bytes) in name order and every metadata pair but "checksum" in key order,
 * so that it can be verified from the file alone (tfm_model_file_verify). */
typedef struct item {
    const char *name;
    int dtype;
    int ndim;
    const size_t *shape;
    const void *data;
    size_t nbytes;
} item;

typedef struct kv {
    const char *key, *val;
    size_t len;
} kv;

static int item_cmp(const void *a, const void *b)
{
    return strcmp(((const item *)a)->name, ((const item *)b)->name);
}

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const kv *)a)->key, ((const kv *)b)->key);
}

static void checksum(item *it, size_t n, kv *meta, size_t n_meta, char out[17])
{
    qsort(it, n, sizeof *it, item_cmp);
    qsort(meta, n_meta, sizeof *meta, kv_cmp);
    hash s = {0x74666d2d636b7074ULL};
    for (size_t i = 0; i < n; i++) {
        uint64_t dims[TFM_ST_MAX_DIMS + 2] = {(uint64_t)it[i].dtype, (uint64_t)it[i].ndim};
        for (int d = 0; d < it[i].ndim && d < TFM_ST_MAX_DIMS; d++)
            dims[2 + d] = it[i].shape[d];
        hash_str(&s, it[i].name, strlen(it[i].name));
        hash_bytes(&s, dims, sizeof dims);
        hash_bytes(&s, it[i].data, it[i].nbytes);
    }
    for (size_t i = 0; i < n_meta; i++) {
        if (!strcmp(meta[i].key, "checksum"))
            continue;
        hash_str(&s, meta[i].key, strlen(meta[i].key));
        hash_str(&s, meta[i].val, meta[i].len);
    }
    snprintf(out, 17, "%016" PRIx64, s.h);
}

int tfm_model_file_verify(const tfm_safetensors *st, int required, tfm_err *err)
{
    size_t sl = 0;
    const char *stored = tfm_safetensors_meta(st, "checksum", &sl);
    if (!stored)
        return required ? tfm_err_set(err, "%s: no checksum in __metadata__: not a tfm file",
                                      st->name)
                        : 0;
    item *it = tfm_malloc((st->n_tensors + 1) * sizeof *it);
    kv *meta = tfm_malloc((st->n_meta + 1) * sizeof *meta);
    for (size_t i = 0; i < st->n_tensors; i++) {
        const tfm_st_tensor *t = &st->tensors[i];
        it[i] = (item){t->name, (int)t->dtype, t->ndim, t->shape, t->data, t->nbytes};
    }
    for (size_t i = 0; i < st->n_meta; i++)
        meta[i] = (kv){st->meta[i].key, st->meta[i].value, st->meta[i].value_len};
    char sum[17];
    checksum(it, st->n_tensors, meta, st->n_meta, sum);
    free(it);
    free(meta);
    if (sl != 16 || memcmp(stored, sum, 16))
        return tfm_err_set(err, "%s: checksum mismatch: the file is corrupt", st->name);
    return 0;
}

/* tfm_model_file_write with the matrices stored as dt (model/quant.h);
 * names (NULL: the table's) name the table's entries. */
static int file_write_as(const char *path, const tfm_param *table, const char *const *names,
                         int n_table, const float *const *arrays, const char *const *prefixes,
                         int n_arrays, const char *const *keys, const char *const *vals,
                         const size_t *lens, int n_keys, tfm_weight_dtype dt, tfm_err *err)
{
    size_t n = (size_t)n_arrays * (size_t)n_table, nt = 0;
    /* up to two stored tensors per parameter: an 8-bit matrix and its scales */
    item *it = tfm_malloc((2 * n + 1) * sizeof *it);
    tfm_enc_tensor *enc = tfm_malloc((2 * n + 1) * sizeof *enc);
    kv meta[17];
    size_t n_meta = 0;
    int rc = -1;
    tfm_safetensors_writer w;
    tfm_safetensors_writer_init(&w);
    for (int a = 0; a < n_arrays; a++)
        for (int k = 0; k < n_table; k++) {
            const tfm_param *p = &table[k];
            char name[128];
            snprintf(name, sizeof name, "%s%s", prefixes[a], names ? names[k] : p->name);
            int got = tfm_quant_encode(name, arrays[a] + p->offset, p->ndim, p->shape, dt,
                                       &enc[nt], err);
            if (got < 0) {
                rc = -2; /* the model's fault: tfm_model_resave names it */
                goto out;
            }
            nt += (size_t)got;
        }
    for (size_t j = 0; j < nt; j++) {
        const tfm_enc_tensor *e = &enc[j];
        it[j] = (item){e->name, e->dtype, e->ndim, e->shape, e->data, e->nbytes};
        tfm_safetensors_writer_add(&w, e->name, e->dtype, e->ndim, e->shape, e->data);
    }
    for (int i = 0; i < n_keys; i++)
        if (vals[i]) {
            meta[n_meta++] = (kv){keys[i], vals[i], lens[i]};
            tfm_safetensors_writer_meta_n(&w, keys[i], vals[i], lens[i]);
        }
    if (dt != TFM_WEIGHTS_F32) {
        const char *name = tfm_weight_dtype_name(dt);
        meta[n_meta++] = (kv){"weights", name, strlen(name)};
        tfm_safetensors_writer_meta(&w, "weights", name);
    }
    char sum[17];
    checksum(it, nt, meta, n_meta, sum);
    tfm_safetensors_writer_meta_n(&w, "checksum", sum, 16);
    rc = tfm_safetensors_writer_write(&w, path, err);
out:
    tfm_safetensors_writer_free(&w);
    for (size_t j = 0; j < nt; j++)
        if (enc[j].owned)
            free((void *)enc[j].data);
    free(enc);
    free(it);
    return rc;
}

int tfm_model_file_write(const char *path, const tfm_param *table, int n_table,
                         const float *const *arrays, const char *const *prefixes, int n_arrays,
                         const char *const *keys, const char *const *vals, const size_t *lens,
                         int n_keys, tfm_err *err)
{
    TFM_ASSERT(n_keys <= 16);
    return file_write_as(path, table, NULL, n_table, arrays, prefixes, n_arrays, keys, vals,
                         lens, n_keys, TFM_WEIGHTS_F32, err);
}

int tfm_model_file_write_named(const char *path, const tfm_param *table,
                               const char *const *names, int n_table, const float *array,
                               const char *const *keys, const char *const *vals,
                               const size_t *lens, int n_keys, tfm_err *err)
{
    TFM_ASSERT(n_keys <= 16);
    const char *prefixes[] = {""};
    return file_write_as(path, table, names, n_table, &array, prefixes, 1, keys, vals, lens,
                         n_keys, TFM_WEIGHTS_F32, err);
}

/* NULL (and an error) when absent or not an F32 tensor of the param's shape. */
static const float *tensor_like(const tfm_safetensors *st, const char *name, const tfm_param *p,
                                tfm_err *err)
{
    const tfm_st_tensor *t = tfm_safetensors_find(st, name);
    char old[160]; /* a tagger's file from before its HF name */
    if (!t && tfm_head_legacy_name(name, old, sizeof old))
        t = tfm_safetensors_find(st, old);
    if (!t) {
        tfm_err_set(err, "no tensor '%s' (was the run made with another model "
                         "configuration?)",
                    name);
        return NULL;
    }
    int same = t->dtype == TFM_ST_F32 && t->ndim == p->ndim && t->shape[0] == p->shape[0] &&
               (p->ndim == 1 || t->shape[1] == p->shape[1]);
    if (!same) {
        char want[64], got[64];
        if (p->ndim == 1)
            snprintf(want, sizeof want, "F32 [%zu]", p->shape[0]);
        else
            snprintf(want, sizeof want, "F32 [%zu, %zu]", p->shape[0], p->shape[1]);
        int n = snprintf(got, sizeof got, "%s [", tfm_st_dtype_name(t->dtype));
        for (int i = 0; i < t->ndim && n < 48; i++)
            n += snprintf(got + n, sizeof got - (size_t)n, "%s%zu", i ? ", " : "", t->shape[i]);
        snprintf(got + n, sizeof got - (size_t)n, "]");
        tfm_err_set(err, "tensor '%s' is %s but the configuration needs %s", name, got, want);
        return NULL;
    }
    return t->data;
}

int tfm_model_file_read(const tfm_safetensors *st, const tfm_param *table, int n_table,
                        float *const *arrays, const char *const *prefixes, int n_arrays,
                        tfm_err *err)
{
    for (int a = 0; a < n_arrays; a++)
        for (int k = 0; k < n_table; k++) {
            char name[128];
            snprintf(name, sizeof name, "%s%s", prefixes[a], table[k].name);
            const float *d = tensor_like(st, name, &table[k], err);
            if (!d)
                return tfm_err_prefix(err, "%s", st->name);
            memcpy(arrays[a] + table[k].offset, d, table[k].numel * sizeof(float));
        }
    return 0;
}

/* ---- the description ---------------------------------------------- */

int tfm_model_config_from_keys(const tfm_model_keys *c, const tfm_lora_keys *lora,
                               tfm_model_config *g, tfm_err *err)
{
    tfm_model_config_default(g);
    g->n_layer = (int)c->n_layer;
    g->n_head = (int)c->n_head;
    g->n_embd = (int)c->n_embd;
    g->block_size = (int)c->block_size;
    g->vocab_size = (int)c->vocab_size;
    g->dropout = (float)c->dropout;
    g->ffn_dropout = (float)c->ffn_dropout;
    g->final_dropout = (float)c->final_dropout;
    g->attn_dropout = (float)c->attn_dropout;
    g->emb_dropout = (float)c->emb_dropout;
    g->tie_embeddings = c->tie_embeddings;
    g->bias = c->bias;
    g->ln = c->norm;
    g->act = c->activation;
    g->ln_eps = (float)c->ln_eps;
    g->kind = c->kind;
    g->pos = c->positions;
    g->d_ff = (int)c->d_ff;
    g->head_dim = (int)c->head_dim;
    g->n_kv_head = (int)c->n_kv_head;
    g->window = (int)c->window;
    g->rope = (tfm_rope){(float)c->rope_base, c->rope_scaling, (float)c->rope_factor,
                         (float)c->rope_low_freq_factor, (float)c->rope_high_freq_factor,
                         (int)c->rope_original_context};
    g->t5_buckets = (int)c->t5_buckets;
    g->t5_max_distance = (int)c->t5_max_distance;
    g->n_segments = (int)c->segments;
    g->emb_norm = c->emb_norm;
    g->emb_scale = c->emb_scale;
    g->head_scale = c->head_scale;
    g->head_bias = c->head_bias;
    g->decoder_start = (int)c->decoder_start;
    g->forced_bos = (int)c->forced_bos;
    g->forced_eos = (int)c->forced_eos;
    g->source_bos = c->source_bos;
    g->init = c->init;
    g->norm = c->norm_type;
    g->ffn = c->ffn;
    g->attn_unscaled = !c->attn_scale;
    g->n_enc_layer = (int)c->n_enc_layer;
    g->tie_source = c->tie_source;
    g->src_vocab_size = (int)c->src_vocab_size;
    g->mlm_head = c->mlm_head;
    g->pooler = c->pooler;
    g->pooler_act = c->pooler_act;
    g->emb_dim = (int)c->embedding_size;
    g->pool_mean = c->pooling;
    g->n_classes = (int)c->classes;
    g->nsp = c->nsp;
    g->n_tags = (int)c->tags;
    g->span = c->span;
    if (lora) {
        g->lora_r = (int)lora->r;
        g->lora_alpha = (float)lora->alpha;
        g->lora_dropout = (float)lora->dropout;
        if (g->lora_r && tfm_lora_targets_parse(lora->targets, &g->lora_targets, err) < 0)
            return -1;
    }
    if (tfm_model_config_check(g, err) < 0)
        return tfm_err_prefix(err, "model");
    return 0;
}

/* ---- model files ---------------------------------------------------- */


int tfm_model_save(const char *path, const tfm_model *m, const char *config_yaml,
                   const char *tok_json, size_t tok_len, int64_t step, tfm_err *err)
{
    return tfm_model_save_translation(path, m, config_yaml, tok_json, tok_len, NULL, 0, step,
                                      err);
}

int tfm_model_save_translation(const char *path, const tfm_model *m, const char *config_yaml,
                               const char *tok_json, size_t tok_len, const char *src_tok_json,
                               size_t src_tok_len, int64_t step, tfm_err *err)
{
    return tfm_model_save_task(path, m, config_yaml, tok_json, tok_len, src_tok_json,
                               src_tok_len, NULL, step, err);
}

int tfm_model_save_task(const char *path, const tfm_model *m, const char *config_yaml,
                        const char *tok_json, size_t tok_len, const char *src_tok_json,
                        size_t src_tok_len, const char *task_json, int64_t step, tfm_err *err)
{
    return tfm_model_save_dtype(path, m, config_yaml, tok_json, tok_len, src_tok_json,
                                src_tok_len, task_json, step, TFM_WEIGHTS_F32, err);
}

int tfm_model_save_dtype(const char *path, const tfm_model *m, const char *config_yaml,
                         const char *tok_json, size_t tok_len, const char *src_tok_json,
                         size_t src_tok_len, const char *task_json, int64_t step,
                         tfm_weight_dtype dt, tfm_err *err)
{
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
    /* the optional pairs last, and only when present */
    const char *keys[6] = {"format", "config", "tokenizer", "step"};
    const char *vals[6] = {"tfm-gpt", config_yaml, tok_json, stepbuf};
    size_t lens[6] = {7, strlen(config_yaml), tok_json ? tok_len : 0, strlen(stepbuf)};
    int n = 4;
    if (src_tok_json) {
        keys[n] = "source_tokenizer";
        vals[n] = src_tok_json;
        lens[n++] = src_tok_len;
    }
    if (task_json) {
        keys[n] = "task";
        vals[n] = task_json;
        lens[n++] = strlen(task_json);
    }
    const float *arrays[] = {m->params};
    const char *prefixes[] = {""};
    return file_write_as(path, m->table, NULL, m->n_table, arrays, prefixes, 1, keys, vals,
                         lens, n, dt, err);
}

int tfm_model_file_meta(const char *path, const char *key, tfm_buf *out, tfm_err *err)
{
    char file[4200];
    path = tfm_model_file_path(path, file, sizeof file);
    tfm_safetensors st;
    if (tfm_safetensors_open(&st, path, err) < 0)
        return -1;
    size_t len = 0;
    const char *v = tfm_safetensors_meta(&st, key, &len);
    int rc = v != NULL;
    if (v)
        tfm_buf_append(out, v, len);
    tfm_safetensors_close(&st);
    return rc;
}

/* A folder stands for the model.safetensors inside it (HuggingFace's
 * layout: config.json and the tokenizer beside it). */
const char *tfm_model_file_path(const char *path, char *buf, size_t n)
{
    if (!tfm_is_dir(path))
        return path;
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    snprintf(buf, n, "%.*s/model.safetensors", (int)len, path);
    return buf;
}

int tfm_model_file_apply_config(const char *path, const tfm_schema *s, void *c, tfm_err *err)
{
    char file[4200];
    path = tfm_model_file_path(path, file, sizeof file);
    tfm_buf yaml = {0};
    int has = tfm_model_file_meta(path, "config", &yaml, err);
    if (has > 0) {
        char name[1100];
        snprintf(name, sizeof name, "%s:config", path);
        if (tfm_schema_apply_yaml(s, c, yaml.data, yaml.len, name, err) < 0)
            has = -1;
    }
    tfm_buf_free(&yaml);
    return has;
}
