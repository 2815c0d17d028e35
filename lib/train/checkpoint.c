#include "train/checkpoint.h"

#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "io/safetensors.h"

/* ---- the safetensors calls, in one place ---------------------------- */

typedef struct st_writer st_writer;
static st_writer *st_writer_new(void);
static void st_add(st_writer *w, const char *name, const tfm_param *p, const float *data);
static void st_meta(st_writer *w, const char *key, const char *value, size_t len);
static int st_write(st_writer *w, const char *path, tfm_err *err);
static void st_writer_free(st_writer *w);

typedef struct st_reader st_reader;
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

typedef struct meta {
    const char *key;
    tfm_buf value;
} meta;

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

/* Hash of tensors (in table order) and the listed metadata, hex in out. */
static void checksum(const tfm_gpt *m, const float *const *arrays, int n_arrays,
                     const char *const *keys, const char *const *vals, const size_t *lens,
                     int n_keys, char out[17])
{
    hash s = {0x74666d2d636b7074ULL};
    for (int a = 0; a < n_arrays; a++)
        for (int k = 0; k < m->n_table; k++) {
            const tfm_param *p = &m->table[k];
            hash_str(&s, p->name, strlen(p->name));
            hash_bytes(&s, arrays[a] + p->offset, p->numel * sizeof(float));
        }
    for (int i = 0; i < n_keys; i++) {
        hash_str(&s, keys[i], strlen(keys[i]));
        if (vals[i])
            hash_str(&s, vals[i], lens[i]);
        else
            hash_str(&s, "\xff", 1); /* absent differs from empty */
    }
    snprintf(out, 17, "%016" PRIx64, s.h);
}

static int write_file(const char *path, const tfm_gpt *m, const float *const *arrays,
                      const char *const *prefixes, int n_arrays, const char *const *keys,
                      const char *const *vals, const size_t *lens, int n_keys, tfm_err *err)
{
    char sum[17];
    checksum(m, arrays, n_arrays, keys, vals, lens, n_keys, sum);
    st_writer *w = st_writer_new();
    for (int a = 0; a < n_arrays; a++)
        for (int k = 0; k < m->n_table; k++) {
            char name[128];
            snprintf(name, sizeof name, "%s%s", prefixes[a], m->table[k].name);
            st_add(w, name, &m->table[k], arrays[a] + m->table[k].offset);
        }
    for (int i = 0; i < n_keys; i++)
        if (vals[i])
            st_meta(w, keys[i], vals[i], lens[i]);
    st_meta(w, "checksum", sum, 16);
    int rc = st_write(w, path, err);
    st_writer_free(w);
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

/* Reads the listed metadata, copies the tensors into arrays, and verifies
 * the checksum. */
static int read_file(st_reader *r, const char *path, const tfm_gpt *m, float *const *arrays,
                     const char *const *prefixes, int n_arrays, const char *const *keys,
                     const char **vals, size_t *lens, int n_keys, tfm_err *err)
{
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
    size_t sl;
    const char *stored = st_meta_get(r, "checksum", &sl);
    if (!stored)
        return tfm_err_set(err, "%s: no checksum in __metadata__: not a tfm checkpoint", path);
    char sum[17];
    checksum(m, (const float *const *)arrays, n_arrays, keys, vals, lens, n_keys, sum);
    if (sl != 16 || memcmp(stored, sum, 16))
        return tfm_err_set(err, "%s: checksum mismatch: the file is corrupt", path);
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
    if (read_file(r, path, m, arrays, prefixes, 3, state_keys, vals, lens, 11, err) < 0)
        goto out;
    if (!vals[0] || strcmp(vals[0], "tfm-train-state")) {
        tfm_err_set(err, "%s: not a tfm training state", path);
        goto out;
    }
    int64_t t, seed;
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
    if (read_file(r, path, m, arrays, prefixes, 1, model_keys, vals, lens, 4, err) < 0)
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

/* ---- safetensors glue ----------------------------------------------- */

struct st_writer {
    tfm_safetensors_writer w;
};

static st_writer *st_writer_new(void)
{
    st_writer *w = tfm_malloc(sizeof *w);
    tfm_safetensors_writer_init(&w->w);
    return w;
}

static void st_add(st_writer *w, const char *name, const tfm_param *p, const float *data)
{
    size_t shape[2] = {p->shape[0], p->shape[1]};
    tfm_safetensors_writer_add(&w->w, name, TFM_ST_F32, p->ndim, shape, data);
}

static void st_meta(st_writer *w, const char *key, const char *value, size_t len)
{
    tfm_safetensors_writer_meta_n(&w->w, key, value, len);
}

static int st_write(st_writer *w, const char *path, tfm_err *err)
{
    return tfm_safetensors_writer_write(&w->w, path, err);
}

static void st_writer_free(st_writer *w)
{
    tfm_safetensors_writer_free(&w->w);
    free(w);
}

struct st_reader {
    tfm_safetensors st;
};

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
