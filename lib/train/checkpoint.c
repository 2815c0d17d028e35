#include "train/checkpoint.h"

#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "io/safetensors.h"

/* Reading goes through a small wrapper that names tensors of the wrong
 * shape in terms of the model configuration. */
typedef struct st_reader {
    tfm_safetensors st;
} st_reader;
static int st_open(st_reader **r, const char *path, tfm_err *err);
/* NULL (and an error) when absent or not an F32 tensor of the param's shape. */
static const float *st_get(st_reader *r, const char *name, const tfm_param *p, tfm_err *err);
static const char *st_meta_get(st_reader *r, const char *key, size_t *len);
static void st_close(st_reader *r);

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

/* ---- metadata ------------------------------------------------------- */

static void put_u64s(tfm_buf *b, const uint64_t *w, int n)
{
    for (int i = 0; i < n; i++)
        tfm_buf_printf(b, "%s%016" PRIx64, i ? ":" : "", w[i]);
}

static int get_u64s(const char *s, uint64_t *w, int n)
{
    for (int i = 0; i < n; i++) {
        char *end;
        w[i] = strtoull(s, &end, 16);
        if (end != s + 16 || (i + 1 < n ? *end != ':' : *end != 0))
            return -1;
        s = end + 1;
    }
    return 0;
}

static const char *const model_keys[] = {"format", "config", "tokenizer", "step"};
static const char *const state_keys[] = {"format",   "config",    "step",
                                         "adam_t",   "data_rng",  "dropout_rng",
                                         "best_val", "best_step", "evals_since_best",
                                         "elapsed",  "seed"};

/* The checksum covers what a reader sees: every tensor (name, dtype, shape,
 * bytes) in name order and every metadata pair but "checksum" in key order,
 * so that it can be verified from the file alone (tfm_checkpoint_verify). */
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

int tfm_checkpoint_verify(const tfm_safetensors *st, tfm_err *err)
{
    size_t sl = 0;
    const char *stored = tfm_safetensors_meta(st, "checksum", &sl);
    if (!stored)
        return 0;
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

static int write_file(const char *path, const tfm_gpt *m, const float *const *arrays,
                      const char *const *prefixes, int n_arrays, const char *const *keys,
                      const char *const *vals, const size_t *lens, int n_keys, tfm_err *err)
{
    size_t n = (size_t)n_arrays * (size_t)m->n_table;
    item *it = tfm_malloc((n + 1) * sizeof *it);
    char (*names)[128] = tfm_malloc((n + 1) * sizeof *names);
    kv meta[16];
    size_t n_meta = 0;
    tfm_safetensors_writer w;
    tfm_safetensors_writer_init(&w);
    for (int a = 0, j = 0; a < n_arrays; a++)
        for (int k = 0; k < m->n_table; k++, j++) {
            const tfm_param *p = &m->table[k];
            snprintf(names[j], sizeof names[j], "%s%s", prefixes[a], p->name);
            it[j] = (item){names[j], TFM_ST_F32, p->ndim, p->shape, arrays[a] + p->offset,
                           p->numel * sizeof(float)};
            tfm_safetensors_writer_add(&w, names[j], TFM_ST_F32, p->ndim, p->shape,
                                       arrays[a] + p->offset);
        }
    for (int i = 0; i < n_keys; i++)
        if (vals[i]) {
            meta[n_meta++] = (kv){keys[i], vals[i], lens[i]};
            tfm_safetensors_writer_meta_n(&w, keys[i], vals[i], lens[i]);
        }
    char sum[17];
    checksum(it, n, meta, n_meta, sum);
    tfm_safetensors_writer_meta_n(&w, "checksum", sum, 16);
    int rc = tfm_safetensors_writer_write(&w, path, err);
    tfm_safetensors_writer_free(&w);
    free(it);
    free(names);
    return rc;
}

int tfm_checkpoint_save_model(const char *path, const tfm_gpt *m, const char *config_yaml,
                              const char *tok_json, size_t tok_len, int64_t step,
                              tfm_err *err)
{
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
    const char *vals[] = {"tfm-gpt", config_yaml, tok_json, stepbuf};
    size_t lens[] = {7, strlen(config_yaml), tok_json ? tok_len : 0, strlen(stepbuf)};
    const float *arrays[] = {m->params};
    const char *prefixes[] = {""};
    return write_file(path, m, arrays, prefixes, 1, model_keys, vals, lens, 4, err);
}

int tfm_checkpoint_save_state(const char *path, const tfm_gpt *m, const tfm_adam *o,
                              const tfm_train_state *s, const char *config_yaml,
                              tfm_err *err)
{
    tfm_buf b[11] = {{0}};
    tfm_buf_puts(&b[0], "tfm-train-state");
    tfm_buf_puts(&b[1], config_yaml);
    tfm_buf_printf(&b[2], "%lld", (long long)s->step);
    tfm_buf_printf(&b[3], "%lld", (long long)o->t);
    put_u64s(&b[4], s->data_rng.s, 4);
    put_u64s(&b[5], m->rng.s, 4);
    tfm_buf_printf(&b[6], "%.17g", s->best_val);
    tfm_buf_printf(&b[7], "%lld", (long long)s->best_step);
    tfm_buf_printf(&b[8], "%lld", (long long)s->evals_since_best);
    tfm_buf_printf(&b[9], "%.17g", s->elapsed);
    tfm_buf_printf(&b[10], "%" PRIu64, s->seed);
    const char *vals[11];
    size_t lens[11];
    for (int i = 0; i < 11; i++) {
        vals[i] = tfm_buf_cstr(&b[i]);
        lens[i] = b[i].len;
    }
    const float *arrays[] = {m->params, o->m, o->v};
    const char *prefixes[] = {"", "adam.m.", "adam.v."};
    int rc = write_file(path, m, arrays, prefixes, 3, state_keys, vals, lens, 11, err);
    for (int i = 0; i < 11; i++)
        tfm_buf_free(&b[i]);
    return rc;
}

/* Verifies the checksum, reads the listed metadata and copies the tensors
 * into arrays. */
static int read_file(st_reader *r, const char *path, const tfm_gpt *m, float *const *arrays,
                     const char *const *prefixes, int n_arrays, const char *const *keys,
                     const char **vals, size_t *lens, int n_keys, int need_checksum,
                     tfm_err *err)
{
    size_t sl;
    if (need_checksum && !st_meta_get(r, "checksum", &sl))
        return tfm_err_set(err, "%s: no checksum in __metadata__: not a tfm checkpoint", path);
    if (tfm_checkpoint_verify(&r->st, err) < 0)
        return -1;
    for (int i = 0; i < n_keys; i++)
        vals[i] = st_meta_get(r, keys[i], &lens[i]);
    for (int a = 0; a < n_arrays; a++)
        for (int k = 0; k < m->n_table; k++) {
            char name[128];
            snprintf(name, sizeof name, "%s%s", prefixes[a], m->table[k].name);
            const float *d = st_get(r, name, &m->table[k], err);
            if (!d)
                return tfm_err_prefix(err, "%s", path);
            memcpy(arrays[a] + m->table[k].offset, d, m->table[k].numel * sizeof(float));
        }
    return 0;
}

static int parse_i64(const char *path, const char *key, const char *v, int64_t *out,
                     tfm_err *err)
{
    char *end;
    if (!v)
        return tfm_err_set(err, "%s: no '%s' in __metadata__", path, key);
    long long x = strtoll(v, &end, 10);
    if (end == v || *end)
        return tfm_err_set(err, "%s: bad '%s' in __metadata__", path, key);
    *out = x;
    return 0;
}

int tfm_checkpoint_load_state(const char *path, tfm_gpt *m, tfm_adam *o, tfm_train_state *s,
                              tfm_err *err)
{
    st_reader *r;
    if (st_open(&r, path, err) < 0)
        return -1;
    const char *vals[11];
    size_t lens[11];
    float *arrays[] = {m->params, o->m, o->v};
    const char *prefixes[] = {"", "adam.m.", "adam.v."};
    int rc = -1;
    if (read_file(r, path, m, arrays, prefixes, 3, state_keys, vals, lens, 11, 1, err) < 0)
        goto out;
    if (!vals[0] || strcmp(vals[0], "tfm-train-state")) {
        tfm_err_set(err, "%s: not a tfm training state", path);
        goto out;
    }
    int64_t t = 0, seed = 0; /* set on success; GCC -O3 cannot see it */
    if (parse_i64(path, "step", vals[2], &s->step, err) < 0 ||
        parse_i64(path, "adam_t", vals[3], &t, err) < 0 ||
        parse_i64(path, "best_step", vals[7], &s->best_step, err) < 0 ||
        parse_i64(path, "evals_since_best", vals[8], &s->evals_since_best, err) < 0 ||
        parse_i64(path, "seed", vals[10], &seed, err) < 0)
        goto out;
    o->t = t;
    s->seed = (uint64_t)seed;
    if (!vals[4] || get_u64s(vals[4], s->data_rng.s, 4) < 0 || !vals[5] ||
        get_u64s(vals[5], m->rng.s, 4) < 0 || !vals[6] || !vals[9]) {
        tfm_err_set(err, "%s: bad RNG state in __metadata__", path);
        goto out;
    }
    s->best_val = strtod(vals[6], NULL);
    s->elapsed = strtod(vals[9], NULL);
    rc = 0;
out:
    st_close(r);
    return rc;
}

int tfm_checkpoint_load_config(const char *path, tfm_config *c, tfm_err *err)
{
    st_reader *r;
    if (st_open(&r, path, err) < 0)
        return -1;
    size_t len;
    const char *yaml = st_meta_get(r, "config", &len);
    int rc;
    if (!yaml) {
        rc = tfm_err_set(err, "%s: no 'config' in __metadata__", path);
    } else {
        char name[1100];
        snprintf(name, sizeof name, "%s:config", path);
        rc = tfm_config_apply_yaml(c, yaml, len, name, err);
    }
    st_close(r);
    return rc;
}

int tfm_checkpoint_load_model(const char *path, tfm_config *c, tfm_gpt *m,
                              tfm_tokenizer **tok, tfm_err *err)
{
    if (tok)
        *tok = NULL;
    tfm_config_defaults(c);
    if (tfm_checkpoint_load_config(path, c, err) < 0)
        return -1;
    tfm_gpt_config g;
    if (tfm_config_gpt(c, &g, err) < 0)
        return tfm_err_prefix(err, "%s", path);
    st_reader *r;
    if (st_open(&r, path, err) < 0)
        return -1;
    int rc = -1;
    if (tfm_gpt_init(m, &g, err) < 0) {
        tfm_err_prefix(err, "%s", path);
        goto out;
    }
    const char *vals[4];
    size_t lens[4];
    float *arrays[] = {m->params};
    const char *prefixes[] = {""};
    if (read_file(r, path, m, arrays, prefixes, 1, model_keys, vals, lens, 4, 0, err) < 0)
        goto fail;
    if (tok && vals[2]) {
        char name[1100];
        snprintf(name, sizeof name, "%s:tokenizer", path);
        if (tfm_tokenizer_from_json(tok, vals[2], lens[2], name, err) < 0)
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
    tfm_gpt_free(m);
out:
    st_close(r);
    return rc;
}

/* ---- safetensors reading --------------------------------------------- */

static int st_open(st_reader **r, const char *path, tfm_err *err)
{
    *r = tfm_malloc(sizeof **r);
    if (tfm_safetensors_open(&(*r)->st, path, err) < 0) {
        free(*r);
        *r = NULL;
        return -1;
    }
    return 0;
}

static const float *st_get(st_reader *r, const char *name, const tfm_param *p, tfm_err *err)
{
    const tfm_st_tensor *t = tfm_safetensors_find(&r->st, name);
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

static const char *st_meta_get(st_reader *r, const char *key, size_t *len)
{
    *len = 0;
    return tfm_safetensors_meta(&r->st, key, len);
}

static void st_close(st_reader *r)
{
    if (!r)
        return;
    tfm_safetensors_close(&r->st);
    free(r);
}
