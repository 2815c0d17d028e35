#include "io/safetensors.h"

#include <string.h>
#include <unistd.h>

#include "base/buf.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [TFM_ST_F64] = {"F64", 8}, [TFM_ST_F32] = {"F32", 4}, [TFM_ST_F16] = {"F16", 2},
    [TFM_ST_BF16] = {"BF16", 2}, [TFM_ST_I64] = {"I64", 8}, [TFM_ST_I32] = {"I32", 4},
    [TFM_ST_I16] = {"I16", 2}, [TFM_ST_I8] = {"I8", 1}, [TFM_ST_U64] = {"U64", 8},
    [TFM_ST_U32] = {"U32", 4}, [TFM_ST_U16] = {"U16", 2}, [TFM_ST_U8] = {"U8", 1},
    [TFM_ST_BOOL] = {"BOOL", 1},
};
#define N_DTYPES (sizeof dtypes / sizeof dtypes[0])

size_t tfm_st_dtype_size(tfm_st_dtype t)
{
    return (unsigned)t < N_DTYPES ? dtypes[t].size : 0;
}

const char *tfm_st_dtype_name(tfm_st_dtype t)
{
    return (unsigned)t < N_DTYPES ? dtypes[t].name : "?";
}

/* ---- reading -------------------------------------------------------- */

/* A non-negative integer that a double represents exactly. */
static int get_size(const tfm_safetensors *st, const tfm_json *j, const char *what,
                    size_t *out, tfm_err *err)
{
    int64_t v;
    if (tfm_json_get_int(&st->doc, j, what, 0, (int64_t)1 << 53, &v, err) < 0)
        return -1;
    *out = (size_t)v;
    return 0;
}

static int by_offset(const void *a, const void *b)
{
    const tfm_st_tensor *x = *(tfm_st_tensor *const *)a, *y = *(tfm_st_tensor *const *)b;
    const char *bx = x->data, *by = y->data;
    if (bx != by)
        return bx < by ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

int tfm_safetensors_parse(tfm_safetensors *st, const void *image, size_t size,
                          const char *name, tfm_err *err)
{
    memset(st, 0, sizeof *st);
    st->name = tfm_strdup(name);
    name = st->name;
    const unsigned char *b = image;
    tfm_st_tensor **order = NULL;
    if (size < 8) {
        tfm_err_set(err, "%s: not a safetensors file (%zu bytes, too short)", name, size);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | b[i];
    if (hlen > TFM_ST_MAX_HEADER) {
        tfm_err_set(err, "%s: not a safetensors file (header length %llu exceeds 100 MB)",
                    name, (unsigned long long)hlen);
        goto fail;
    }
    if (hlen > size - 8) {
        tfm_err_set(err, "%s: truncated: header length %llu but only %zu bytes follow",
                    name, (unsigned long long)hlen, size - 8);
        goto fail;
    }
    if (hlen < 2 || b[8] != '{') {
        tfm_err_set(err, "%s: not a safetensors file (header is not a JSON object)", name);
        goto fail;
    }
    /* positions in messages are line:col within the JSON header */
    if (tfm_json_parse(&st->doc, (const char *)b + 8, hlen, name, 0, err) < 0)
        goto fail;
    const tfm_json *root = st->doc.root;
    if (tfm_json_expect(&st->doc, root, TFM_JSON_OBJECT, "the header", err) < 0)
        goto fail;
    const unsigned char *buf = b + 8 + hlen;
    size_t buf_size = size - 8 - hlen;

    st->tensors = tfm_calloc(root->n ? root->n : 1, sizeof *st->tensors);
    for (size_t i = 0; i < root->n; i++) {
        const tfm_json *key = root->keys[i], *val = root->items[i];
        if (!strcmp(key->str, "__metadata__") && key->len == 12) {
            if (tfm_json_expect(&st->doc, val, TFM_JSON_OBJECT, "__metadata__", err) < 0)
                goto fail;
            st->meta = tfm_calloc(val->n ? val->n : 1, sizeof *st->meta);
            for (size_t k = 0; k < val->n; k++) {
                if (tfm_json_expect(&st->doc, val->items[k], TFM_JSON_STRING,
                                    "a __metadata__ value", err) < 0)
                    goto fail;
                st->meta[k].key = val->keys[k]->str;
                st->meta[k].value = val->items[k]->str;
                st->meta[k].value_len = val->items[k]->len;
            }
            st->n_meta = val->n;
            continue;
        }
        if (key->len == 0 || strlen(key->str) != key->len) {
            tfm_err_at(err, name, key->line, key->col,
                       "tensor names must be non-empty and hold no NUL");
            goto fail;
        }
        char what[160];
        snprintf(what, sizeof what, "tensor '%.100s'", key->str);
        if (tfm_json_expect(&st->doc, val, TFM_JSON_OBJECT, what, err) < 0)
            goto fail;
        tfm_st_tensor *t = &st->tensors[st->n_tensors];
        t->name = key->str;
        const tfm_json *dt = tfm_json_get(val, "dtype");
        const tfm_json *shape = tfm_json_get(val, "shape");
        const tfm_json *offs = tfm_json_get(val, "data_offsets");
        snprintf(what, sizeof what, "the dtype of '%.100s'", key->str);
        if (tfm_json_expect(&st->doc, dt, TFM_JSON_STRING, what, err) < 0)
            goto fail;
        int found = -1;
        for (size_t d = 0; d < N_DTYPES; d++)
            if (!strcmp(dt->str, dtypes[d].name))
                found = (int)d;
        if (found < 0) {
            tfm_err_at(err, name, dt->line, dt->col, "unsupported dtype \"%.20s\" for '%.100s'",
                       dt->str, key->str);
            goto fail;
        }
        t->dtype = (tfm_st_dtype)found;
        snprintf(what, sizeof what, "the shape of '%.100s'", key->str);
        if (tfm_json_expect(&st->doc, shape, TFM_JSON_ARRAY, what, err) < 0)
            goto fail;
        if (shape->n > TFM_ST_MAX_DIMS) {
            tfm_err_at(err, name, shape->line, shape->col, "%s has more than %d dimensions",
                       what, TFM_ST_MAX_DIMS);
            goto fail;
        }
        t->ndim = (int)shape->n;
        size_t count = 1;
        int overflow = 0;
        for (size_t d = 0; d < shape->n; d++) {
            if (get_size(st, shape->items[d], what, &t->shape[d], err) < 0)
                goto fail;
            overflow |= __builtin_mul_overflow(count, t->shape[d], &count);
        }
        size_t nbytes = 0;
        overflow |= __builtin_mul_overflow(count, dtypes[found].size, &nbytes);
        snprintf(what, sizeof what, "the data_offsets of '%.100s'", key->str);
        if (tfm_json_expect(&st->doc, offs, TFM_JSON_ARRAY, what, err) < 0)
            goto fail;
        if (offs->n != 2) {
            tfm_err_at(err, name, offs->line, offs->col, "%s must be [begin, end]", what);
            goto fail;
        }
        size_t begin, end;
        if (get_size(st, offs->items[0], what, &begin, err) < 0 ||
            get_size(st, offs->items[1], what, &end, err) < 0)
            goto fail;
        if (begin > end || end > buf_size) {
            tfm_err_at(err, name, offs->line, offs->col,
                       "%s [%zu, %zu] lie outside the %zu-byte data buffer", what, begin,
                       end, buf_size);
            goto fail;
        }
        if (overflow || nbytes != end - begin) {
            tfm_err_at(err, name, offs->line, offs->col,
                       "%s span %zu bytes but shape and dtype make %s", what,
                       end - begin, overflow ? "an overflowing size" : "a different size");
            goto fail;
        }
        t->count = count;
        t->nbytes = nbytes;
        t->data = buf + begin;
        st->n_tensors++;
    }

    /* The buffer must be covered exactly: sort by offset and walk it. */
    order = tfm_malloc((st->n_tensors ? st->n_tensors : 1) * sizeof *order);
    for (size_t i = 0; i < st->n_tensors; i++)
        order[i] = &st->tensors[i];
    qsort(order, st->n_tensors, sizeof *order, by_offset);
    size_t at = 0;
    for (size_t i = 0; i < st->n_tensors; i++) {
        size_t begin = (size_t)((const unsigned char *)order[i]->data - buf);
        if (begin != at) {
            tfm_err_set(err, "%s: tensor '%.100s' at byte %zu %s the previous tensor ending at %zu",
                        name, order[i]->name, begin, begin < at ? "overlaps" : "leaves a hole after",
                        at);
            goto fail;
        }
        at = begin + order[i]->nbytes;
    }
    if (at != buf_size) {
        tfm_err_set(err, "%s: tensors cover %zu bytes of the %zu-byte data buffer", name, at,
                    buf_size);
        goto fail;
    }
    free(order);
    order = NULL;

    /* Element access must be aligned: copy the odd ones out. */
    for (size_t i = 0; i < st->n_tensors; i++) {
        tfm_st_tensor *t = &st->tensors[i];
        if ((uintptr_t)t->data % dtypes[t->dtype].size == 0)
            continue;
        void *c = tfm_aligned_alloc(t->nbytes ? t->nbytes : 1);
        memcpy(c, t->data, t->nbytes);
        t->data = c;
        st->copies = tfm_realloc(st->copies, (st->n_copies + 1) * sizeof *st->copies);
        st->copies[st->n_copies++] = c;
    }
    return 0;
fail:
    free(order);
    tfm_safetensors_close(st);
    return -1;
}

/* The shards of index (PATH.index.json) as one view. */
static int open_index(tfm_safetensors *st, const char *index, tfm_err *err)
{
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, index, 0, err) < 0)
        return -1;
    st->name = tfm_strdup(index);
    int rc = -1;
    const tfm_json *wm = tfm_json_get(doc.root, "weight_map");
    if (!wm) {
        tfm_err_set(err, "%s: no \"weight_map\" (HuggingFace's shard index names each "
                    "tensor's file there)", index);
        goto out;
    }
    if (tfm_json_expect(&doc, wm, TFM_JSON_OBJECT, "weight_map", err) < 0)
        goto out;
    const char *slash = strrchr(index, '/');
    int dir = slash ? (int)(slash - index) + 1 : 0;
    /* the shards, each once, in the order the map first names them */
    const char **files = tfm_calloc(wm->n + 1, sizeof *files);
    st->shards = tfm_calloc(wm->n + 1, sizeof *st->shards);
    size_t total = 0;
    for (size_t i = 0; i < wm->n; i++) {
        const tfm_json *f = wm->items[i];
        if (tfm_json_expect(&doc, f, TFM_JSON_STRING, "a weight_map entry", err) < 0)
            goto out_files;
        if (!f->len || strchr(f->str, '/') || !strcmp(f->str, "..") || strlen(f->str) != f->len) {
            tfm_err_at(err, index, f->line, f->col, "shard '%s' is not a file name in the "
                       "index's folder", f->str);
            goto out_files;
        }
        size_t k = 0;
        while (k < st->n_shards && strcmp(files[k], f->str))
            k++;
        if (k < st->n_shards)
            continue;
        char path[4200];
        snprintf(path, sizeof path, "%.*s%s", dir, index, f->str);
        if (tfm_safetensors_open(&st->shards[k], path, err) < 0) {
            tfm_err_prefix(err, "%s:%ld:%ld: shard", index, f->line, f->col);
            goto out_files;
        }
        files[st->n_shards++] = f->str;
        total += st->shards[k].n_tensors;
    }
    if (!st->n_shards) {
        tfm_err_set(err, "%s: weight_map is empty", index);
        goto out_files;
    }
    st->tensors = tfm_calloc(total + 1, sizeof *st->tensors);
    for (size_t i = 0; i < wm->n; i++) {
        const char *name = wm->keys[i]->str;
        size_t k = 0;
        while (strcmp(files[k], wm->items[i]->str))
            k++;
        const tfm_st_tensor *t = tfm_safetensors_find(&st->shards[k], name);
        if (!t) {
            tfm_err_at(err, index, wm->keys[i]->line, wm->keys[i]->col, "tensor '%s' is not "
                       "in its shard %s", name, st->shards[k].name);
            goto out_files;
        }
        st->tensors[st->n_tensors++] = *t;
    }
    for (size_t k = 0; k < st->n_shards; k++)
        for (size_t i = 0; i < st->shards[k].n_tensors; i++) {
            const tfm_st_tensor *t = &st->shards[k].tensors[i];
            const tfm_json *f = tfm_json_get(wm, t->name);
            if (!f || strcmp(f->str, files[k])) {
                tfm_err_set(err, "%s: tensor '%s' is %s in %s's weight_map", st->shards[k].name,
                            t->name, f ? "listed for another shard" : "not listed", index);
                goto out_files;
            }
        }
    st->n_meta = st->shards[0].n_meta;
    st->meta = tfm_calloc(st->n_meta + 1, sizeof *st->meta);
    memcpy(st->meta, st->shards[0].meta, st->n_meta * sizeof *st->meta);
    for (size_t k = 0; k < st->n_shards; k++)
        st->map.size += st->shards[k].map.size;
    rc = 0;
out_files:
    free(files);
out:
    tfm_json_doc_free(&doc);
    if (rc < 0)
        tfm_safetensors_close(st);
    return rc;
}

int tfm_safetensors_open(tfm_safetensors *st, const char *path, tfm_err *err)
{
    memset(st, 0, sizeof *st);
    if (strcmp(path, "-") && access(path, F_OK) != 0) {
        char other[4200];
        snprintf(other, sizeof other, "%s.index.json", path);
        if (access(other, F_OK) == 0)
            return open_index(st, other, err);
        const char *slash = strrchr(path, '/');
        int dir = slash ? (int)(slash - path) + 1 : 0;
        if (!strcmp(path + dir, "model.safetensors")) {
            snprintf(other, sizeof other, "%.*spytorch_model.bin", dir, path);
            if (access(other, F_OK) != 0)
                snprintf(other, sizeof other, "%.*spytorch_model.bin.index.json", dir, path);
            if (access(other, F_OK) == 0)
                return tfm_err_set(err, "%s: no such file, only %s: PyTorch's pickle format "
                                   "is not supported (loading it can run code); convert the "
                                   "folder with HuggingFace transformers: "
                                   "from_pretrained(DIR).save_pretrained(DIR, "
                                   "safe_serialization=True) writes model.safetensors",
                                   path, other);
        }
    }
    tfm_map m;
    if (tfm_map_open(&m, path, err) < 0)
        return -1;
    const char *name = strcmp(path, "-") == 0 ? "<stdin>" : path;
    if (tfm_safetensors_parse(st, m.data, m.size, name, err) < 0) {
        tfm_map_close(&m);
        return -1;
    }
    st->map = m;
    return 0;
}

int tfm_safetensors_view(tfm_safetensors *st, void *image, size_t size, const char *name,
                         tfm_err *err)
{
    if (tfm_safetensors_parse(st, image, size, name, err) < 0) {
        free(image);
        return -1;
    }
    st->map = (tfm_map){image, size, 0};
    return 0;
}

void tfm_safetensors_close(tfm_safetensors *st)
{
    for (size_t k = 0; k < st->n_shards; k++)
        tfm_safetensors_close(&st->shards[k]);
    free(st->shards);
    for (size_t i = 0; i < st->n_copies; i++)
        free(st->copies[i]);
    free(st->copies);
    free(st->tensors);
    free(st->meta);
    tfm_json_doc_free(&st->doc);
    if (st->map.data)
        tfm_map_close(&st->map);
    free((char *)st->name);
    memset(st, 0, sizeof *st);
}

const tfm_st_tensor *tfm_safetensors_find(const tfm_safetensors *st, const char *name)
{
    for (size_t i = 0; i < st->n_tensors; i++)
        if (!strcmp(st->tensors[i].name, name))
            return &st->tensors[i];
    return NULL;
}

const char *tfm_safetensors_meta(const tfm_safetensors *st, const char *key, size_t *len)
{
    for (size_t i = 0; i < st->n_meta; i++)
        if (!strcmp(st->meta[i].key, key)) {
            if (len)
                *len = st->meta[i].value_len;
            return st->meta[i].value;
        }
    return NULL;
}

void tfm_safetensors_replace(tfm_safetensors *st, tfm_st_tensor *t, tfm_st_dtype dtype,
                             int ndim, const size_t *shape, void *data)
{
    TFM_ASSERT(t >= st->tensors && t < st->tensors + st->n_tensors);
    TFM_ASSERT(ndim >= 0 && ndim <= TFM_ST_MAX_DIMS);
    size_t count = 1;
    for (int d = 0; d < ndim; d++)
        count *= t->shape[d] = shape[d];
    t->ndim = ndim;
    t->dtype = dtype;
    t->count = count;
    t->nbytes = count * dtypes[dtype].size;
    t->data = data;
    st->copies = tfm_realloc(st->copies, (st->n_copies + 1) * sizeof *st->copies);
    st->copies[st->n_copies++] = data;
}

/* ---- writing -------------------------------------------------------- */

void tfm_safetensors_writer_init(tfm_safetensors_writer *w)
{
    memset(w, 0, sizeof *w);
}

void tfm_safetensors_writer_add(tfm_safetensors_writer *w, const char *name,
                                tfm_st_dtype dtype, int ndim, const size_t *shape,
                                const void *data)
{
    TFM_ASSERT((unsigned)dtype < N_DTYPES && ndim >= 0 && ndim <= TFM_ST_MAX_DIMS);
    if (w->n == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 32;
        w->entries = tfm_realloc(w->entries, w->cap * sizeof *w->entries);
    }
    tfm_st_entry *e = &w->entries[w->n++];
    memset(e, 0, sizeof *e);
    e->name = tfm_strdup(name);
    e->dtype = dtype;
    e->ndim = ndim;
    size_t nbytes = dtypes[dtype].size;
    for (int i = 0; i < ndim; i++) {
        e->shape[i] = shape[i];
        TFM_ASSERT(!__builtin_mul_overflow(nbytes, shape[i], &nbytes));
    }
    e->nbytes = nbytes;
    e->data = data;
}

void tfm_safetensors_writer_meta_n(tfm_safetensors_writer *w, const char *key,
                                   const char *value, size_t len)
{
    for (size_t i = 0; i < w->n_meta; i++)
        if (!strcmp(w->meta[2 * i], key)) {
            free(w->meta[2 * i + 1]);
            w->meta[2 * i + 1] = tfm_strndup(value, len);
            w->meta_len[i] = len;
            return;
        }
    if (w->n_meta == w->cap_meta) {
        w->cap_meta = w->cap_meta ? 2 * w->cap_meta : 8;
        w->meta = tfm_realloc(w->meta, 2 * w->cap_meta * sizeof *w->meta);
        w->meta_len = tfm_realloc(w->meta_len, w->cap_meta * sizeof *w->meta_len);
    }
    w->meta[2 * w->n_meta] = tfm_strdup(key);
    w->meta[2 * w->n_meta + 1] = tfm_strndup(value, len);
    w->meta_len[w->n_meta++] = len;
}

void tfm_safetensors_writer_meta(tfm_safetensors_writer *w, const char *key,
                                 const char *value)
{
    tfm_safetensors_writer_meta_n(w, key, value, strlen(value));
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The header (with its length) into h and the order of the data into
 * *order (malloc'd), for writing to a file or into memory. */
static int writer_header(const tfm_safetensors_writer *w, const char *name, tfm_buf *h_out,
                         size_t **order_out, tfm_err *err)
{
    /* duplicate names would make an invalid file */
    if (w->n > 1) {
        char **names = tfm_malloc(w->n * sizeof *names);
        for (size_t i = 0; i < w->n; i++)
            names[i] = w->entries[i].name;
        qsort(names, w->n, sizeof *names, cmp_names);
        for (size_t i = 1; i < w->n; i++)
            if (!strcmp(names[i - 1], names[i])) {
                tfm_err_set(err, "%s: tensor name '%s' used twice", name, names[i]);
                free(names);
                return -1;
            }
        free(names);
    }
    for (size_t i = 0; i < w->n; i++)
        if (!strcmp(w->entries[i].name, "__metadata__") || !w->entries[i].name[0])
            return tfm_err_set(err, "%s: invalid tensor name '%s'", name, w->entries[i].name);

    tfm_buf h = {0};
    tfm_buf_append(&h, "\0\0\0\0\0\0\0\0", 8);
    tfm_buf_putc(&h, '{');
    int first = 1;
    if (w->n_meta) {
        tfm_buf_puts(&h, "\"__metadata__\":{");
        for (size_t i = 0; i < w->n_meta; i++) {
            if (i)
                tfm_buf_putc(&h, ',');
            tfm_buf_put_json_string(&h, w->meta[2 * i], strlen(w->meta[2 * i]));
            tfm_buf_putc(&h, ':');
            tfm_buf_put_json_string(&h, w->meta[2 * i + 1], w->meta_len[i]);
        }
        tfm_buf_putc(&h, '}');
        first = 0;
    }
    /* Data goes in order of decreasing element size, so that every tensor
     * starts aligned to its element size (the format allows no padding). */
    size_t *offs = tfm_malloc((w->n ? w->n : 1) * sizeof *offs);
    size_t *order = tfm_malloc((w->n ? w->n : 1) * sizeof *order);
    size_t off = 0, k = 0;
    for (size_t sz = 8; sz >= 1; sz /= 2)
        for (size_t i = 0; i < w->n; i++)
            if (dtypes[w->entries[i].dtype].size == sz) {
                order[k++] = i;
                offs[i] = off;
                off += w->entries[i].nbytes;
            }
    TFM_ASSERT(k == w->n);
    for (size_t i = 0; i < w->n; i++) {
        const tfm_st_entry *e = &w->entries[i];
        if (!first)
            tfm_buf_putc(&h, ',');
        first = 0;
        tfm_buf_put_json_string(&h, e->name, strlen(e->name));
        tfm_buf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", dtypes[e->dtype].name);
        for (int d = 0; d < e->ndim; d++)
            tfm_buf_printf(&h, "%s%zu", d ? "," : "", e->shape[d]);
        tfm_buf_printf(&h, "],\"data_offsets\":[%zu,%zu]}", offs[i], offs[i] + e->nbytes);
    }
    free(offs);
    tfm_buf_putc(&h, '}');
    /* pad with spaces so that the data (and every F64/I64) starts 8-aligned */
    while (h.len % 8)
        tfm_buf_putc(&h, ' ');
    uint64_t hlen = h.len - 8;
    if (hlen > TFM_ST_MAX_HEADER) {
        tfm_buf_free(&h);
        free(order);
        return tfm_err_set(err, "%s: header of %llu bytes exceeds the 100 MB limit", name,
                           (unsigned long long)hlen);
    }
    for (int i = 0; i < 8; i++)
        h.data[i] = (char)(hlen >> (8 * i));
    *h_out = h;
    *order_out = order;
    return 0;
}

int tfm_safetensors_writer_write(const tfm_safetensors_writer *w, const char *path,
                                 tfm_err *err)
{
    const char *name = path && strcmp(path, "-") ? path : "<stdout>";
    tfm_buf h;
    size_t *order;
    if (writer_header(w, name, &h, &order, err) < 0)
        return -1;
    tfm_out o;
    if (tfm_out_open(&o, path, err) < 0) {
        tfm_buf_free(&h);
        free(order);
        return -1;
    }
    int ok = fwrite(h.data, 1, h.len, o.fp) == h.len;
    tfm_buf_free(&h);
    for (size_t i = 0; ok && i < w->n; i++) {
        const tfm_st_entry *e = &w->entries[order[i]];
        ok = e->nbytes == 0 || fwrite(e->data, 1, e->nbytes, o.fp) == e->nbytes;
    }
    free(order);
    if (!ok) {
        tfm_err_errno(err, "%s: write error", name);
        tfm_out_abort(&o);
        return -1;
    }
    return tfm_out_commit(&o, err);
}

int tfm_safetensors_writer_image(const tfm_safetensors_writer *w, const char *name,
                                 void **image, size_t *size, tfm_err *err)
{
    tfm_buf h;
    size_t *order;
    if (writer_header(w, name, &h, &order, err) < 0)
        return -1;
    size_t n = h.len;
    for (size_t i = 0; i < w->n; i++)
        n += w->entries[i].nbytes;
    /* aligned as a mapping would be: the tensors' alignment is the file's */
    unsigned char *b = tfm_aligned_alloc(n + 1);
    memcpy(b, h.data, h.len);
    size_t off = h.len;
    tfm_buf_free(&h);
    for (size_t i = 0; i < w->n; i++) {
        const tfm_st_entry *e = &w->entries[order[i]];
        if (e->nbytes && e->data)
            memcpy(b + off, e->data, e->nbytes);
        else if (e->nbytes)
            memset(b + off, 0, e->nbytes);
        off += e->nbytes;
    }
    free(order);
    *image = b;
    *size = n;
    return 0;
}

void tfm_safetensors_writer_free(tfm_safetensors_writer *w)
{
    for (size_t i = 0; i < w->n; i++)
        free(w->entries[i].name);
    free(w->entries);
    for (size_t i = 0; i < 2 * w->n_meta; i++)
        free(w->meta[i]);
    free(w->meta);
    free(w->meta_len);
    memset(w, 0, sizeof *w);
}
