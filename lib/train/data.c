#include "train/data.h"

#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "io/npy.h"

enum { KIND_NONE, KIND_ARRAY, KIND_NPY };

static void set_name(tfm_tokens *t, const char *name)
{
    snprintf(t->name, sizeof t->name, "%s", name);
}

void tfm_tokens_from_ids(tfm_tokens *t, uint32_t *ids, size_t n, const char *name)
{
    memset(t, 0, sizeof *t);
    t->data = ids;
    t->owned = ids;
    t->n = n;
    t->width = 4;
    t->kind = KIND_ARRAY;
    set_name(t, name);
}

int tfm_tokens_from_text(tfm_tokens *train, tfm_tokens *val, const char *path,
                         const tfm_tokenizer *tok, double val_fraction, tfm_err *err)
{
    memset(train, 0, sizeof *train);
    memset(val, 0, sizeof *val);
    tfm_map m;
    if (tfm_map_open(&m, path, err) < 0)
        return -1;
    tfm_ids ids = {0};
    tfm_tok_scratch *s = tfm_tok_scratch_new(tok);
    tfm_tokenizer_encode(tok, s, (const char *)m.data, m.size, 0, &ids);
    tfm_tok_scratch_free(s);
    tfm_map_close(&m);
    size_t n_val = (size_t)((double)ids.len * val_fraction);
    size_t n_train = ids.len - n_val;
    uint32_t *v = NULL;
    if (n_val) {
        v = tfm_malloc(n_val * sizeof *v);
        memcpy(v, ids.data + n_train, n_val * sizeof *v);
    }
    char name[300];
    snprintf(name, sizeof name, "%s (first %.0f%%)", path, 100 * (1 - val_fraction));
    tfm_tokens_from_ids(train, ids.data, n_train, n_val ? name : path);
    if (n_val) {
        snprintf(name, sizeof name, "%s (last %.0f%%)", path, 100 * val_fraction);
        tfm_tokens_from_ids(val, v, n_val, name);
    }
    return 0;
}

int tfm_tokens_open_npy(tfm_tokens *t, const char *path, tfm_err *err)
{
    memset(t, 0, sizeof *t);
    tfm_npy *a = tfm_malloc(sizeof *a);
    if (tfm_npy_open(a, path, err) < 0) {
        free(a);
        return -1;
    }
    if (tfm_npy_ids_check(a, path, err) < 0)
        goto fail;
    set_name(t, path);
    t->n = a->count;
    if (a->dtype == TFM_NPY_U16 || a->dtype == TFM_NPY_U32) {
        /* The common case: ids used in place from the mapping (their range
         * is checked against the vocabulary by tfm_tokens_check). */
        t->data = a->data;
        t->width = a->dtype == TFM_NPY_U16 ? 2 : 4;
        t->owned = a;
        t->kind = KIND_NPY;
        return 0;
    }
    /* Other integer types (numpy's default int64, int32, uint8) are copied. */
    uint32_t *ids = tfm_malloc((a->count ? a->count : 1) * sizeof *ids);
    if (tfm_npy_ids(a, path, (uint64_t)UINT32_MAX + 1, ids, err) < 0) {
        free(ids);
        goto fail;
    }
    size_t n = a->count;
    tfm_npy_close(a);
    free(a);
    tfm_tokens_from_ids(t, ids, n, path);
    return 0;
fail:
    tfm_npy_close(a);
    free(a);
    return -1;
}

void tfm_tokens_free(tfm_tokens *t)
{
    if (t->kind == KIND_ARRAY)
        free(t->owned);
    else if (t->kind == KIND_NPY) {
        tfm_npy_close(t->owned);
        free(t->owned);
    }
    memset(t, 0, sizeof *t);
}

uint32_t tfm_tokens_max(const tfm_tokens *t)
{
    uint32_t mx = 0;
    if (t->width == 2) {
        const uint16_t *d = t->data;
        for (size_t i = 0; i < t->n; i++)
            mx = d[i] > mx ? d[i] : mx;
    } else {
        const uint32_t *d = t->data;
        for (size_t i = 0; i < t->n; i++)
            mx = d[i] > mx ? d[i] : mx;
    }
    return mx;
}

int tfm_tokens_check(const tfm_tokens *t, uint32_t vocab, tfm_err *err)
{
    if (tfm_tokens_max(t) < vocab)
        return 0;
    for (size_t i = 0; i < t->n; i++) {
        uint32_t id = tfm_tokens_at(t, i);
        if (id >= vocab)
            return tfm_err_set(err, "%s: token id %u at position %zu is outside the "
                                    "vocabulary (size %u)",
                               t->name, id, i, vocab);
    }
    return 0;
}

void tfm_tokens_batch(const tfm_tokens *t, tfm_rng *rng, int B, int T, int32_t *x,
                      int32_t *y)
{
    TFM_ASSERT(t->n >= (size_t)T + 1);
    for (int b = 0; b < B; b++) {
        size_t s = (size_t)tfm_rng_below(rng, t->n - (size_t)T);
        for (int i = 0; i < T; i++) {
            x[(size_t)b * T + i] = (int32_t)tfm_tokens_at(t, s + i);
            y[(size_t)b * T + i] = (int32_t)tfm_tokens_at(t, s + i + 1);
        }
    }
}

/* ---- documents of segments ------------------------------------------------ */

static void push_size(size_t **a, size_t *cap, size_t i, size_t v)
{
    if (i >= *cap) {
        *cap = *cap ? 2 * *cap : 256;
        *a = tfm_realloc(*a, *cap * sizeof **a);
    }
    (*a)[i] = v;
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

void tfm_docs_free(tfm_docs *d)
{
    tfm_tokens_free(&d->ids);
    free(d->seg);
    free(d->doc);
    free(d->line);
    memset(d, 0, sizeof *d);
}

/* Moves the last n_val documents of d into val. */
static void docs_split(tfm_docs *d, tfm_docs *val, size_t n_val)
{
    size_t fd = d->n_doc - n_val, fs = d->doc[fd], fi = d->seg[fs];
    size_t n_seg = d->n_seg - fs, n_ids = d->ids.n - fi;
    uint32_t *ids = tfm_malloc((n_ids ? n_ids : 1) * sizeof *ids);
    memcpy(ids, (const uint32_t *)d->ids.data + fi, n_ids * sizeof *ids);
    tfm_tokens_from_ids(&val->ids, ids, n_ids, d->ids.name);
    val->seg = tfm_malloc((n_seg + 1) * sizeof *val->seg);
    for (size_t i = 0; i <= n_seg; i++)
        val->seg[i] = d->seg[fs + i] - fi;
    val->doc = tfm_malloc((n_val + 1) * sizeof *val->doc);
    val->line = tfm_malloc(n_val * sizeof *val->line);
    for (size_t j = 0; j <= n_val; j++)
        val->doc[j] = d->doc[fd + j] - fs;
    memcpy(val->line, d->line + fd, n_val * sizeof *val->line);
    val->n_seg = n_seg;
    val->n_doc = n_val;
    d->n_doc = fd;
    d->n_seg = fs;
    d->ids.n = fi;
}

int tfm_docs_from_text(tfm_docs *train, tfm_docs *val, const char *path,
                       tfm_docs_format format, const tfm_tokenizer *tok, double val_fraction,
                       tfm_err *err)
{
    memset(train, 0, sizeof *train);
    if (val)
        memset(val, 0, sizeof *val);
    tfm_map m;
    if (tfm_map_open(&m, path, err) < 0)
        return -1;
    tfm_ids ids = {0};
    tfm_tok_scratch *s = tfm_tok_scratch_new(tok);
    size_t cap_seg = 0, cap_doc = 0, cap_line = 0, n_seg = 0, n_doc = 0, pos = 0, line = 0;
    size_t *seg = NULL, *doc = NULL, *lines = NULL;
    int open = 0; /* the current document has a segment */
    push_size(&seg, &cap_seg, 0, 0);
    const char *t;
    size_t n;
    while (tfm_map_line(&m, &pos, &t, &n)) {
        line++;
        while (n && is_space(*t))
            t++, n--;
        while (n && is_space(t[n - 1]))
            n--;
        if (n == 0) {
            n_doc += open;
            open = 0;
            continue;
        }
        size_t before = ids.len;
        tfm_tokenizer_encode(tok, s, t, n, 0, &ids);
        if (ids.len == before)
            continue; /* as BERT: only control characters, say */
        if (!open) {
            push_size(&doc, &cap_doc, n_doc, n_seg);
            push_size(&lines, &cap_line, n_doc, line);
            open = 1;
        }
        push_size(&seg, &cap_seg, ++n_seg, ids.len);
        if (format == TFM_DOCS_LINE) {
            n_doc++;
            open = 0;
        }
    }
    n_doc += open;
    push_size(&doc, &cap_doc, n_doc, n_seg);
    tfm_tok_scratch_free(s);
    tfm_map_close(&m);
    tfm_tokens_from_ids(&train->ids, ids.data, ids.len, path);
    train->seg = seg;
    train->doc = doc;
    train->line = lines;
    train->n_seg = n_seg;
    train->n_doc = n_doc;
    size_t n_val = val ? (size_t)((double)n_doc * val_fraction) : 0;
    if (n_val)
        docs_split(train, val, n_val);
    return 0;
}
