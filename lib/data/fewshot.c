#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/fewshot.h"

#include "base/rng.h"
#include "io/json.h"

void tfm_fewshot_init(tfm_fewshot *f, int k, uint64_t seed, int same)
{
    memset(f, 0, sizeof *f);
    f->k = k;
    f->seed = seed;
    f->same = same;
}

void tfm_fewshot_free(tfm_fewshot *f)
{
    tfm_buf_free(&f->text);
    free(f->off);
    free(f->len);
    memset(f, 0, sizeof *f);
}

void tfm_fewshot_add(tfm_fewshot *f, const char *a, size_t na, const char *b, size_t nb)
{
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 64;
        f->off = tfm_realloc(f->off, f->cap * sizeof *f->off);
        f->len = tfm_realloc(f->len, f->cap * sizeof *f->len);
    }
    f->off[f->n] = f->text.len;
    tfm_buf_append(&f->text, a, na);
    tfm_buf_append(&f->text, b, nb);
    f->len[f->n] = na + nb;
    f->n++;
}

int tfm_fewshot_read(tfm_fewshot *f, const char *data, size_t len, int choice, const char *name,
                     tfm_err *err)
{
    long line = 0;
    for (size_t pos = 0; pos < len;) {
        const char *s = data + pos;
        const char *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl != NULL);
        line++;
        size_t k = 0;
        while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r'))
            k++;
        if (k == n)
            continue;
        if (!choice) {
            while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
                n--;
            tfm_fewshot_add(f, s, n, "", 0);
            continue;
        }
        tfm_json_doc doc;
        if (tfm_json_parse_line(&doc, s, n, name, line, err) < 0)
            return -1;
        const tfm_json *c = tfm_json_get(doc.root, "context");
        const tfm_json *e = tfm_json_get(doc.root, "endings");
        const tfm_json *l = tfm_json_get(doc.root, "label");
        if (!c || c->type != TFM_JSON_STRING || !e || e->type != TFM_JSON_ARRAY || !l ||
            l->type != TFM_JSON_NUMBER || l->num != floor(l->num) || l->num < 0 ||
            l->num >= (double)e->n || e->items[(size_t)l->num]->type != TFM_JSON_STRING) {
            tfm_json_doc_free(&doc);
            return tfm_err_set(err, "%s:%ld: a demonstration needs \"context\", \"endings\" "
                               "and the index of the right one in \"label\"", name, line);
        }
        const tfm_json *x = e->items[(size_t)l->num];
        tfm_fewshot_add(f, c->str, c->len, x->str, x->len);
        tfm_json_doc_free(&doc);
    }
    return 0;
}

int tfm_fewshot_check(const tfm_fewshot *f, const char *name, tfm_err *err)
{
    size_t avail = f->n - (f->same && f->n > 0);
    if ((size_t)f->k > avail)
        return tfm_err_set(err, "%s: --shots %d, but only %zu demonstration%s %s available%s",
                           name, f->k, avail, avail == 1 ? "" : "s", avail == 1 ? "is" : "are",
                           f->same ? " to each item (the others in the data)" : "");
    return 0;
}

void tfm_fewshot_pick(const tfm_fewshot *f, size_t item, size_t *pick)
{
    tfm_rng r;
    tfm_rng_seed(&r, f->seed * 0x9E3779B97F4A7C15ull + item + 1);
    for (int j = 0; j < f->k;) {
        size_t c = (size_t)tfm_rng_below(&r, f->n);
        int dup = f->same && c == item;
        for (int i = 0; i < j && !dup; i++)
            dup = pick[i] == c;
        if (!dup)
            pick[j++] = c;
    }
}

void tfm_fewshot_prompt(const tfm_fewshot *f, const size_t *pick, tfm_buf *out)
{
    for (int j = 0; j < f->k; j++) {
        tfm_buf_append(out, f->text.data + f->off[pick[j]], f->len[pick[j]]);
        tfm_buf_append(out, "\n\n", 2);
    }
}
