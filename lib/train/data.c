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
