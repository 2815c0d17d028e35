/* GGUF files, read (io/gguf.h). */
#include "config.h"

#include "io/gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const type_names[] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64",
    "f64",
};

const char *tfm_gguf_type_name(uint32_t type)
{
    return type < sizeof type_names / sizeof type_names[0] ? type_names[type] : "?";
}

/* ggml's types by id (ggml.h's enum ggml_type), for messages */
static const char *const ggml_names[] = {
    "F32", "F16", "Q4_0", "Q4_1", NULL, NULL, "Q5_0", "Q5_1", "Q8_0", "Q8_1",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS",
    "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32", "I64", "F64",
    "IQ1_M", "BF16", NULL, NULL, NULL, "TQ1_0", "TQ2_0", NULL, NULL, NULL, "MXFP4",
};

const char *tfm_ggml_type_name(uint32_t type)
{
    return type < sizeof ggml_names / sizeof ggml_names[0] ? ggml_names[type] : NULL;
}

/* sizes of the value types that have one (0: string, array) */
static const size_t value_size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

typedef struct rd {
    const tfm_gguf *g;
    size_t pos;
    tfm_err *err;
} rd;

static int truncated(rd *r, const char *what)
{
    return tfm_err_set(r->err, "%s: truncated GGUF file: %s at byte %zu runs past its end "
                       "(%zu bytes)", r->g->name, what, r->pos, r->g->map.size);
}

static int take(rd *r, void *out, size_t n, const char *what)
{
    if (r->g->map.size - r->pos < n)
        return truncated(r, what);
    memcpy(out, r->g->map.data + r->pos, n);
    r->pos += n;
    return 0;
}

static uint64_t le(const unsigned char *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int u32(rd *r, uint32_t *v, const char *what)
{
    unsigned char b[4] = {0};
    if (take(r, b, 4, what) < 0)
        return -1;
    *v = (uint32_t)le(b, 4);
    return 0;
}

static int u64(rd *r, uint64_t *v, const char *what)
{
    unsigned char b[8] = {0};
    if (take(r, b, 8, what) < 0)
        return -1;
    *v = le(b, 8);
    return 0;
}

static int str(rd *r, tfm_gguf_str *s, const char *what)
{
    uint64_t n;
    if (u64(r, &n, what) < 0)
        return -1;
    if (r->g->map.size - r->pos < n)
        return truncated(r, what);
    s->s = (const char *)r->g->map.data + r->pos;
    s->n = (size_t)n;
    r->pos += (size_t)n;
    return 0;
}

static char *str_dup(const tfm_gguf_str *s)
{
    char *c = tfm_malloc(s->n + 1);
    memcpy(c, s->s, s->n);
    c[s->n] = 0;
    return c;
}

/* A value of type t (nested arrays included); kv (NULL: skipped) gets it. */
static int value(rd *r, uint32_t t, tfm_gguf_kv *kv, const char *key, int depth)
{
    if (t > TFM_GGUF_F64)
        return tfm_err_set(r->err, "%s: metadata '%s' has value type %" PRIu32 ": GGUF's "
                           "types are 0..12", r->g->name, key, t);
    if (t == TFM_GGUF_STRING) {
        tfm_gguf_str s = {0};
        if (str(r, &s, key) < 0)
            return -1;
        if (kv)
            kv->str = s;
        return 0;
    }
    if (t == TFM_GGUF_ARRAY) {
        uint32_t e;
        uint64_t n;
        if (depth > 8)
            return tfm_err_set(r->err, "%s: metadata '%s' nests arrays more than 8 deep",
                               r->g->name, key);
        if (u32(r, &e, key) < 0 || u64(r, &n, key) < 0)
            return -1;
        if (e > TFM_GGUF_F64)
            return tfm_err_set(r->err, "%s: metadata '%s' is an array of type %" PRIu32
                               ": GGUF's types are 0..12", r->g->name, key, e);
        if (kv) {
            kv->elem = e;
            kv->n = n;
            kv->data = r->g->map.data + r->pos;
        }
        if (value_size[e]) {
            if (n > (r->g->map.size - r->pos) / value_size[e])
                return truncated(r, key);
            r->pos += (size_t)n * value_size[e];
            return 0;
        }
        /* every element takes at least 8 bytes: the count is bounded */
        if (n > (r->g->map.size - r->pos) / 8)
            return truncated(r, key);
        if (kv && e == TFM_GGUF_STRING)
            kv->strs = tfm_malloc((size_t)(n ? n : 1) * sizeof *kv->strs);
        for (uint64_t i = 0; i < n; i++) {
            if (e == TFM_GGUF_STRING) {
                tfm_gguf_str s = {0};
                if (str(r, &s, key) < 0)
                    return -1;
                if (kv)
                    kv->strs[i] = s;
            } else if (value(r, e, NULL, key, depth + 1) < 0) {
                return -1;
            }
        }
        return 0;
    }
    if (r->g->map.size - r->pos < value_size[t])
        return truncated(r, key);
    const unsigned char *b = r->g->map.data + r->pos;
    r->pos += value_size[t];
    if (!kv)
        return 0;
    uint64_t u = le(b, value_size[t]);
    int64_t i;
    double f;
    float f4;
    switch (t) {
    case TFM_GGUF_I8: i = (int8_t)u; f = (double)i; break;
    case TFM_GGUF_I16: i = (int16_t)u; f = (double)i; break;
    case TFM_GGUF_I32: i = (int32_t)u; f = (double)i; break;
    case TFM_GGUF_I64: i = (int64_t)u; f = (double)i; break;
    case TFM_GGUF_F32: {
        uint32_t w = (uint32_t)u;
        memcpy(&f4, &w, 4);
        f = f4;
        i = (int64_t)f;
        break;
    }
    case TFM_GGUF_F64: memcpy(&f, &u, 8); i = (int64_t)f; break;
    default: i = (int64_t)u; f = (double)u; break;
    }
    kv->u = u;
    kv->i = i;
    kv->f = f;
    return 0;
}

static size_t type_bytes(uint32_t type, uint64_t count)
{
    switch (type) {
    case TFM_GGML_F32: return (size_t)count * 4;
    case TFM_GGML_F16:
    case TFM_GGML_BF16: return (size_t)count * 2;
    default: return (size_t)(count / TFM_GGML_Q8_BLOCK) * TFM_GGML_Q8_BYTES;
    }
}

int tfm_gguf_is(const char *path)
{
    FILE *f = fopen(path, "rb");
    char b[4];
    int is = f && fread(b, 1, 4, f) == 4 && !memcmp(b, "GGUF", 4);
    if (f)
        fclose(f);
    return is;
}

int tfm_gguf_open(tfm_gguf *g, const char *path, tfm_err *err)
{
    memset(g, 0, sizeof *g);
    if (tfm_map_open(&g->map, path, err) < 0)
        return -1;
    g->name = tfm_strdup(path);
    rd r = {g, 0, err};
    char magic[4] = {0};
    uint32_t version;
    uint64_t nt, nkv;
    if (take(&r, magic, 4, "the magic") < 0)
        goto fail;
    if (memcmp(magic, "GGUF", 4)) {
        tfm_err_set(err, "%s: not a GGUF file (its first bytes are not \"GGUF\")", path);
        goto fail;
    }
    if (u32(&r, &version, "the version") < 0)
        goto fail;
    if (version != 2 && version != 3) {
        if ((version & 0xffff) == 0 && (version >> 24) >= 2 && (version >> 24) <= 3)
            tfm_err_set(err, "%s: a big-endian GGUF file: tfm reads little-endian ones",
                        path);
        else
            tfm_err_set(err, "%s: GGUF version %" PRIu32 ": tfm reads versions 2 and 3",
                        path, version);
        goto fail;
    }
    g->version = version;
    if (u64(&r, &nt, "the tensor count") < 0 || u64(&r, &nkv, "the metadata count") < 0)
        goto fail;
    /* a key/value takes at least 12 bytes, a tensor info 24 */
    if (nkv > g->map.size / 12 || nt > g->map.size / 24) {
        tfm_err_set(err, "%s: truncated GGUF file: %" PRIu64 " metadata entries and %" PRIu64
                    " tensors cannot fit in %zu bytes", path, nkv, nt, g->map.size);
        goto fail;
    }
    g->kv = tfm_calloc((size_t)nkv + 1, sizeof *g->kv);
    g->tensors = tfm_calloc((size_t)nt + 1, sizeof *g->tensors);
    for (uint64_t k = 0; k < nkv; k++) {
        tfm_gguf_kv *kv = &g->kv[k];
        tfm_gguf_str key = {0};
        if (str(&r, &key, "a metadata key") < 0)
            goto fail;
        kv->key = str_dup(&key);
        g->n_kv++;
        if (u32(&r, &kv->type, kv->key) < 0 || value(&r, kv->type, kv, kv->key, 0) < 0)
            goto fail;
    }
    g->alignment = 32;
    const tfm_gguf_kv *al = tfm_gguf_get(g, "general.alignment");
    if (al) {
        if (al->type != TFM_GGUF_U32 || al->u == 0 || (al->u & (al->u - 1))) {
            tfm_err_set(err, "%s: general.alignment must be a u32 power of two, not %s %" PRIu64,
                        path, tfm_gguf_type_name(al->type), al->u);
            goto fail;
        }
        g->alignment = (size_t)al->u;
    }
    for (uint64_t k = 0; k < nt; k++) {
        tfm_gguf_tensor *t = &g->tensors[k];
        tfm_gguf_str name = {0};
        uint32_t nd;
        uint64_t off;
        if (str(&r, &name, "a tensor name") < 0)
            goto fail;
        t->name = str_dup(&name);
        g->n_tensors++;
        if (u32(&r, &nd, t->name) < 0)
            goto fail;
        if (nd < 1 || nd > 4) {
            tfm_err_set(err, "%s: tensor '%s' has %" PRIu32 " dimensions: GGUF's have 1 to 4",
                        path, t->name, nd);
            goto fail;
        }
        t->ndim = (int)nd;
        t->count = 1;
        for (int d = 0; d < 4; d++) {
            t->ne[d] = 1;
            if (d < t->ndim && u64(&r, &t->ne[d], t->name) < 0)
                goto fail;
            if (t->ne[d] && t->count > UINT64_MAX / 2 / t->ne[d]) {
                tfm_err_set(err, "%s: tensor '%s' has too many elements", path, t->name);
                goto fail;
            }
            t->count *= t->ne[d];
        }
        if (u32(&r, &t->type, t->name) < 0 || u64(&r, &off, t->name) < 0)
            goto fail;
        const char *tn = tfm_ggml_type_name(t->type);
        if (t->type != TFM_GGML_F32 && t->type != TFM_GGML_F16 && t->type != TFM_GGML_BF16 &&
            t->type != TFM_GGML_Q8_0) {
            if (tn)
                tfm_err_set(err, "%s: tensor '%s' is of type %s: tfm reads F32, F16, BF16 and "
                            "Q8_0 tensors", path, t->name, tn);
            else
                tfm_err_set(err, "%s: tensor '%s' has unknown type %" PRIu32 " (ggml's types "
                            "are 0..39; tfm reads F32, F16, BF16 and Q8_0)", path, t->name,
                            t->type);
            goto fail;
        }
        if (t->type == TFM_GGML_Q8_0 && t->ne[0] % TFM_GGML_Q8_BLOCK) {
            tfm_err_set(err, "%s: tensor '%s' is Q8_0 with rows of %" PRIu64 ": not a "
                        "multiple of %d", path, t->name, t->ne[0], TFM_GGML_Q8_BLOCK);
            goto fail;
        }
        if (off % g->alignment) {
            tfm_err_set(err, "%s: tensor '%s' at offset %" PRIu64 ", not a multiple of the "
                        "alignment %zu", path, t->name, off, g->alignment);
            goto fail;
        }
        t->nbytes = type_bytes(t->type, t->count);
        t->data = (const void *)(uintptr_t)off; /* made an address below */
    }
    size_t start = (r.pos + g->alignment - 1) / g->alignment * g->alignment;
    for (size_t k = 0; k < g->n_tensors; k++) {
        tfm_gguf_tensor *t = &g->tensors[k];
        uint64_t off = (uint64_t)(uintptr_t)t->data;
        if (start > g->map.size || off > g->map.size - start ||
            t->nbytes > g->map.size - start - off) {
            tfm_err_set(err, "%s: truncated GGUF file: tensor '%s' (%zu bytes at offset %"
                        PRIu64 " of the data from byte %zu) runs past its end (%zu bytes)",
                        path, t->name, t->nbytes, off, start, g->map.size);
            goto fail;
        }
        t->data = g->map.data + start + off;
        for (size_t j = 0; j < k; j++)
            if (!strcmp(g->tensors[j].name, t->name)) {
                tfm_err_set(err, "%s: tensor name '%s' used twice", path, t->name);
                goto fail;
            }
    }
    return 0;
fail:
    tfm_gguf_close(g);
    return -1;
}

void tfm_gguf_close(tfm_gguf *g)
{
    for (size_t k = 0; k < g->n_kv; k++) {
        free(g->kv[k].key);
        free(g->kv[k].strs);
    }
    for (size_t k = 0; k < g->n_tensors; k++)
        free(g->tensors[k].name);
    free(g->kv);
    free(g->tensors);
    if (g->map.data)
        tfm_map_close(&g->map);
    free(g->name);
    memset(g, 0, sizeof *g);
}

const tfm_gguf_kv *tfm_gguf_get(const tfm_gguf *g, const char *key)
{
    for (size_t k = 0; k < g->n_kv; k++)
        if (!strcmp(g->kv[k].key, key))
            return &g->kv[k];
    return NULL;
}

const tfm_gguf_tensor *tfm_gguf_find(const tfm_gguf *g, const char *name)
{
    for (size_t k = 0; k < g->n_tensors; k++)
        if (!strcmp(g->tensors[k].name, name))
            return &g->tensors[k];
    return NULL;
}

static int is_int(uint32_t t)
{
    return t <= TFM_GGUF_I32 || t == TFM_GGUF_U64 || t == TFM_GGUF_I64;
}

static int is_signed(uint32_t t)
{
    return t == TFM_GGUF_I8 || t == TFM_GGUF_I16 || t == TFM_GGUF_I32 || t == TFM_GGUF_I64;
}

int tfm_gguf_int(const tfm_gguf *g, const char *key, int64_t min, int64_t max, int64_t def,
                 int64_t *out, tfm_err *err)
{
    const tfm_gguf_kv *kv = tfm_gguf_get(g, key);
    if (!kv) {
        if (def < min)
            return tfm_err_set(err, "%s: no metadata '%s' (an integer)", g->name, key);
        *out = def;
        return 0;
    }
    if (!is_int(kv->type))
        return tfm_err_set(err, "%s: metadata '%s' is %s: expected an integer", g->name, key,
                           tfm_gguf_type_name(kv->type));
    int neg = is_signed(kv->type) && kv->i < 0;
    if (neg ? kv->i < min : kv->u > (uint64_t)max || (int64_t)kv->u < min)
        return tfm_err_set(err, "%s: metadata '%s' is %s%" PRIu64 ": expected %" PRId64
                           "..%" PRId64, g->name, key, neg ? "-" : "",
                           neg ? (uint64_t)0 - kv->u : kv->u, min, max);
    *out = neg ? kv->i : (int64_t)kv->u;
    return 0;
}

int tfm_gguf_float(const tfm_gguf *g, const char *key, double max, double def, double *out,
                   tfm_err *err)
{
    const tfm_gguf_kv *kv = tfm_gguf_get(g, key);
    if (!kv) {
        *out = def;
        return 0;
    }
    if (kv->type != TFM_GGUF_F32 && kv->type != TFM_GGUF_F64 && !is_int(kv->type))
        return tfm_err_set(err, "%s: metadata '%s' is %s: expected a number", g->name, key,
                           tfm_gguf_type_name(kv->type));
    double v = is_int(kv->type) ? (is_signed(kv->type) ? (double)kv->i : (double)kv->u) : kv->f;
    if (!(v > 0 && v < max))
        return tfm_err_set(err, "%s: metadata '%s' is %g: expected a number in (0, %g)",
                           g->name, key, v, max);
    *out = v;
    return 0;
}

int tfm_gguf_string(const tfm_gguf *g, const char *key, char *out, size_t n, tfm_err *err)
{
    const tfm_gguf_kv *kv = tfm_gguf_get(g, key);
    out[0] = 0;
    if (!kv)
        return 0;
    if (kv->type != TFM_GGUF_STRING)
        return tfm_err_set(err, "%s: metadata '%s' is %s: expected a string", g->name, key,
                           tfm_gguf_type_name(kv->type));
    snprintf(out, n, "%.*s", (int)(kv->str.n < n ? kv->str.n : n - 1), kv->str.s);
    return 0;
}
