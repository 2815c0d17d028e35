/* Semantic search over a stored matrix of vectors: see search.h. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "infer/embed.h"
#include "infer/fill.h"
#include "infer/search.h"

int tfm_search_open(tfm_search *s, const char *path, tfm_err *err)
{
    memset(s, 0, sizeof *s);
    if (tfm_npy_open(&s->a, path, err) < 0)
        return -1;
    const tfm_npy *a = &s->a;
    const char *expect = "expected the float32 [N, D] vectors tfm-embed writes";
    if (a->dtype != TFM_NPY_F32) {
        tfm_err_set(err, "%s: holds %s values: %s", path, tfm_npy_dtype_descr(a->dtype), expect);
        goto fail;
    }
    if (a->ndim != 2) {
        tfm_err_set(err, "%s: a %d-D array: %s", path, a->ndim, expect);
        goto fail;
    }
    if (a->shape[0] == 0 || a->shape[1] == 0) {
        tfm_err_set(err, "%s: an empty [%zu, %zu] array: %s", path, a->shape[0], a->shape[1],
                    expect);
        goto fail;
    }
    if (a->shape[0] > UINT32_MAX || a->shape[1] > (1 << 24)) {
        tfm_err_set(err, "%s: [%zu, %zu] is larger than a search takes (2^32 rows, 2^24 "
                    "columns)", path, a->shape[0], a->shape[1]);
        goto fail;
    }
    s->n = a->shape[0];
    s->d = (int)a->shape[1];
    s->rows = a->data;
    for (size_t i = 0; i < a->count; i++)
        if (!isfinite(s->rows[i])) {
            tfm_err_set(err, "%s: row %zu, column %zu is not finite: %s", path,
                        i / (size_t)s->d + 1, i % (size_t)s->d + 1, expect);
            goto fail;
        }
    s->score = tfm_malloc(sizeof(double) * s->n);
    return 0;
fail:
    tfm_npy_close(&s->a);
    memset(s, 0, sizeof *s);
    return -1;
}

int tfm_search_texts(tfm_search *s, const char *path, tfm_err *err)
{
    tfm_map m;
    if (tfm_map_open(&m, path, err) < 0)
        return -1;
    size_t cap = s->n, n = 0, pos = 0, len;
    size_t *at = tfm_malloc(sizeof(size_t) * cap), *ln = tfm_malloc(sizeof(size_t) * cap);
    const char *line;
    while (tfm_map_line(&m, &pos, &line, &len)) {
        if (n < cap) {
            at[n] = (size_t)(line - (const char *)m.data);
            ln[n] = len;
        }
        n++;
    }
    if (n != s->n) {
        tfm_err_set(err, "%s has %zu line%s but the vectors %zu row%s: the text must be the "
                    "lines the vectors were made from, one a row", path, n, n == 1 ? "" : "s",
                    s->n, s->n == 1 ? "" : "s");
        free(at);
        free(ln);
        tfm_map_close(&m);
        return -1;
    }
    tfm_map_close(&s->text);
    free(s->line_at);
    free(s->line_len);
    s->text = m;
    s->line_at = at;
    s->line_len = ln;
    return 0;
}

void tfm_search_close(tfm_search *s)
{
    tfm_map_close(&s->text);
    free(s->line_at);
    free(s->line_len);
    free(s->score);
    tfm_npy_close(&s->a);
    memset(s, 0, sizeof *s);
}

int tfm_search_top(tfm_search *s, const float *q, int k, uint32_t *row, double *cos)
{
    if ((size_t)k > s->n)
        k = (int)s->n;
    for (size_t i = 0; i < s->n; i++)
        s->score[i] = tfm_cosine(q, s->rows + i * (size_t)s->d, s->d);
    tfm_top_k(s->score, s->n, k, row);
    for (int r = 0; r < k; r++)
        cos[r] = s->score[row[r]];
    return k;
}

const char *tfm_search_text(const tfm_search *s, uint32_t i, size_t *n)
{
    if (!s->line_at || i >= s->n)
        return NULL;
    *n = s->line_len[i];
    return (const char *)s->text.data + s->line_at[i];
}
