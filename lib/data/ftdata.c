/* Fine-tuning examples: reading and encoding; see ftdata.h. */
#include "config.h"

#include "data/ftdata.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "data/spans.h"
#include "data/taskdata.h"
#include "io/json.h"
#include "text/utf8.h"

/* ---- strings ------------------------------------------------------------ */

/* The data's strings live in blocks that never move, so examples can point
 * at them while more are read. */
typedef struct block {
    struct block *next;
    size_t used, cap;
    char data[];
} block;

static const char *keep(tfm_ft_data *d, const char *s, size_t n)
{
    block *b = d->arena;
    if (!b || b->cap - b->used < n + 1) {
        size_t cap = n + 1 > 65536 ? n + 1 : 65536;
        block *nb = tfm_malloc(sizeof *nb + cap);
        nb->next = b;
        nb->used = 0;
        nb->cap = cap;
        d->arena = b = nb;
    }
    char *p = b->data + b->used;
    memcpy(p, s, n);
    p[n] = 0;
    b->used += n + 1;
    return p;
}

void tfm_ft_data_free(tfm_ft_data *d)
{
    for (block *b = d->arena, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    free(d->ex);
    free(d->word);
    free(d->tag);
    free(d->word_line);
    free(d->ans);
    memset(d, 0, sizeof *d);
}

typedef struct grow {
    size_t ex, word, ans;
} grow;

static tfm_ft_example *new_example(tfm_ft_data *d, grow *g, long line)
{
    if (d->n == g->ex) {
        g->ex = g->ex ? 2 * g->ex : 256;
        d->ex = tfm_realloc(d->ex, g->ex * sizeof *d->ex);
    }
    tfm_ft_example *e = &d->ex[d->n++];
    memset(e, 0, sizeof *e);
    e->line = line;
    return e;
}

static void add_word(tfm_ft_data *d, grow *g, const char *w, size_t wn, const char *t, size_t tn,
                     long line)
{
    if (d->n_word == g->word) {
        g->word = g->word ? 2 * g->word : 1024;
        d->word = tfm_realloc(d->word, g->word * sizeof *d->word);
        d->tag = tfm_realloc(d->tag, g->word * sizeof *d->tag);
        d->word_line = tfm_realloc(d->word_line, g->word * sizeof *d->word_line);
    }
    d->word[d->n_word] = keep(d, w, wn);
    d->tag[d->n_word] = t ? keep(d, t, tn) : NULL;
    d->word_line[d->n_word++] = line;
}

/* ---- lines -------------------------------------------------------------- */

typedef struct lines {
    const char *text;
    size_t len, pos;
    long line;
} lines;

/* The next line without its newline (and a '\r' before it); 0 at the end. */
static int next_line(lines *L, const char **s, size_t *n)
{
    if (L->pos >= L->len)
        return 0;
    const char *b = L->text + L->pos, *nl = memchr(b, '\n', L->len - L->pos);
    size_t len = nl ? (size_t)(nl - b) : L->len - L->pos;
    L->pos += len + (nl != NULL);
    if (len && b[len - 1] == '\r')
        len--;
    L->line++;
    *s = b;
    *n = len;
    return 1;
}

static int blank_line(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\f' && s[i] != '\v')
            return 0;
    return 1;
}

static int is_jsonl(const char *text, size_t len)
{
    size_t i = len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3) ? 3 : 0;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\r' || text[i] == '\n'))
        i++;
    return i < len && text[i] == '{';
}

/* Every example of a file has gold or none has; classify: one text or two
 * throughout.  The first example decides. */
static int same_shape(tfm_ft_data *d, int gold, int pairs, long line, long first_line,
                      tfm_err *err)
{
    if (d->n == 1) {
        d->gold = gold;
        d->pairs = pairs;
        return 0;
    }
    if (gold != d->gold)
        return tfm_err_at(err, d->name, line, 0, "%s, but line %ld %s (every example has "
                          "one or none does)", gold ? "gold data" : "no gold data", first_line,
                          d->gold ? "has" : "has none");
    if (pairs != d->pairs)
        return tfm_err_at(err, d->name, line, 0, "%s, but line %ld has %s", pairs ? "two texts" :
                          "one text", first_line, d->pairs ? "two" : "one");
    return 0;
}

/* ---- classify ----------------------------------------------------------- */

static int classify_tsv_line(tfm_ft_data *d, grow *g, const tfm_ft_read_opts *o,
                             const char *s, size_t n, long line, tfm_err *err)
{
    const char *f[4];
    size_t fl[4], nf = 0;
    for (const char *p = s, *end = s + n;; nf++) {
        const char *tab = memchr(p, '\t', (size_t)(end - p));
        if (nf < 4) {
            f[nf] = p;
            fl[nf] = tab ? (size_t)(tab - p) : (size_t)(end - p);
        }
        if (!tab) {
            nf++;
            break;
        }
        p = tab + 1;
    }
    int gold, pairs;
    if (o->need_gold || o->pairs < 0) {
        if (nf != 2 && nf != 3)
            return tfm_err_at(err, d->name, line, 0, "%zu field%s: expected label<TAB>text or "
                              "label<TAB>text_a<TAB>text_b", nf, nf == 1 ? "" : "s");
        gold = 1;
        pairs = nf == 3;
    } else {
        if (nf != (size_t)o->pairs + 1 && nf != (size_t)o->pairs + 2)
            return tfm_err_at(err, d->name, line, 0, "%zu field%s: expected %s (the model "
                              "reads %s)", nf, nf == 1 ? "" : "s",
                              o->pairs ? "[label<TAB>]text_a<TAB>text_b" : "[label<TAB>]text",
                              o->pairs ? "pairs of texts" : "one text");
        gold = nf == (size_t)o->pairs + 2;
        pairs = o->pairs;
    }
    tfm_ft_example *e = new_example(d, g, line);
    if (same_shape(d, gold, pairs, line, d->ex[0].line, err) < 0)
        return -1;
    size_t k = 0;
    if (gold) {
        if (blank_line(f[0], fl[0]))
            return tfm_err_at(err, d->name, line, 0, "empty label");
        e->label = keep(d, f[0], fl[0]);
        k = 1;
    }
    for (size_t j = k; j < nf; j++)
        if (fl[j] == 0)
            return tfm_err_at(err, d->name, line, 0, "empty text");
    e->a = keep(d, f[k], fl[k]);
    e->na = fl[k];
    if (pairs) {
        e->b = keep(d, f[k + 1], fl[k + 1]);
        e->nb = fl[k + 1];
    }
    return 0;
}

/* A JSON string member, or NULL; a member of another type is an error. */
static int json_string(const tfm_ft_data *d, const tfm_json *obj, const char *key, long line,
                       const tfm_json **out, tfm_err *err)
{
    const tfm_json *v = tfm_json_get(obj, key);
    *out = NULL;
    if (!v || v->type == TFM_JSON_NULL)
        return 0;
    if (v->type != TFM_JSON_STRING)
        return tfm_err_at(err, d->name, line, v->col, "\"%s\" must be a string, not %s", key,
                          tfm_json_type_name(v->type));
    *out = v;
    return 0;
}

static int classify_json(tfm_ft_data *d, grow *g, const tfm_ft_read_opts *o, const tfm_json *r,
                         long line, tfm_err *err)
{
    const tfm_json *label = tfm_json_get(r, "label"), *t, *ta, *tb;
    if (label && label->type == TFM_JSON_NULL)
        label = NULL;
    if (label && label->type != TFM_JSON_STRING && label->type != TFM_JSON_NUMBER)
        return tfm_err_at(err, d->name, line, label->col, "\"label\" must be a string or a "
                          "number, not %s", tfm_json_type_name(label->type));
    if (!label && o->need_gold)
        return tfm_err_at(err, d->name, line, 0, "no \"label\"");
    if (json_string(d, r, "text", line, &t, err) < 0 ||
        json_string(d, r, "text_a", line, &ta, err) < 0 ||
        json_string(d, r, "text_b", line, &tb, err) < 0)
        return -1;
    if (t && (ta || tb))
        return tfm_err_at(err, d->name, line, 0, "\"text\" and \"text_a\"/\"text_b\" together: "
                          "give one text or a pair");
    if (!t && !(ta && tb))
        return tfm_err_at(err, d->name, line, 0, "needs \"text\", or \"text_a\" and \"text_b\"");
    tfm_ft_example *e = new_example(d, g, line);
    if (same_shape(d, label != NULL, t == NULL, line, d->ex[0].line, err) < 0)
        return -1;
    if (label) {
        if (label->len == 0)
            return tfm_err_at(err, d->name, line, label->col, "empty label");
        e->label = keep(d, label->str, label->len);
    }
    const tfm_json *a = t ? t : ta;
    if (a->len == 0 || (tb && tb->len == 0))
        return tfm_err_at(err, d->name, line, 0, "empty text");
    e->a = keep(d, a->str, a->len);
    e->na = a->len;
    if (tb) {
        e->b = keep(d, tb->str, tb->len);
        e->nb = tb->len;
    }
    return 0;
}

/* ---- tag ---------------------------------------------------------------- */

static int tag_json(tfm_ft_data *d, grow *g, const tfm_ft_read_opts *o, const tfm_json *r,
                    long line, tfm_err *err)
{
    const tfm_json *toks = tfm_json_get(r, "tokens"), *tags = tfm_json_get(r, "tags");
    if (tags && tags->type == TFM_JSON_NULL)
        tags = NULL;
    if (!toks || toks->type != TFM_JSON_ARRAY || toks->n == 0)
        return tfm_err_at(err, d->name, line, toks ? toks->col : 0,
                          "\"tokens\" must be an array of words (strings)");
    if (tags && (tags->type != TFM_JSON_ARRAY || tags->n != toks->n))
        return tfm_err_at(err, d->name, line, tags->col, "\"tags\" must be an array of %zu "
                          "tags, one per token", toks->n);
    if (!tags && o->need_gold)
        return tfm_err_at(err, d->name, line, 0, "no \"tags\"");
    tfm_ft_example *e = new_example(d, g, line);
    if (same_shape(d, tags != NULL, 0, line, d->ex[0].line, err) < 0)
        return -1;
    e->word0 = d->n_word;
    for (size_t i = 0; i < toks->n; i++) {
        const tfm_json *w = toks->items[i], *t = tags ? tags->items[i] : NULL;
        if (w->type != TFM_JSON_STRING || w->len == 0)
            return tfm_err_at(err, d->name, line, w->col, "token %zu must be a non-empty "
                              "string", i);
        if (t && (t->type != TFM_JSON_STRING || t->len == 0))
            return tfm_err_at(err, d->name, line, t->col, "tag %zu must be a non-empty string",
                              i);
        add_word(d, g, w->str, w->len, t ? t->str : NULL, t ? t->len : 0, line);
    }
    e->n_words = toks->n;
    return 0;
}

static int read_conll(tfm_ft_data *d, grow *g, const tfm_ft_read_opts *o, const char *text,
                      size_t len, tfm_err *err)
{
    /* a word without its tag: named here, before the column check of
     * taskdata (which would name the first line that differs) */
    long untagged;
    if (o->need_gold && (untagged = tfm_taskdata_conll_untagged(text, len)) > 0)
        return tfm_err_at(err, d->name, untagged, 0, "one column: expected "
                          "word<TAB>tag (a blank line between sentences)");
    tfm_taskdata td;
    if (tfm_taskdata_tags(&td, text, len, d->name, TFM_TAGS_CONLL, err) < 0)
        return -1;
    int gold = td.columns >= 2;
    for (size_t s = 0; s < td.n_group; s++) {
        tfm_ft_example *e = new_example(d, g, td.group_line[s]);
        e->word0 = d->n_word;
        e->n_words = td.group[s + 1] - td.group[s];
        for (size_t i = td.group[s]; i < td.group[s + 1]; i++) {
            const char *w = td.word[i], *t = gold ? td.item[i] : NULL;
            add_word(d, g, w, strlen(w), t, t ? strlen(t) : 0, td.line[i]);
        }
    }
    d->gold = gold;
    tfm_taskdata_free(&td);
    return 0;
}

/* ---- span --------------------------------------------------------------- */

/* Byte offset of character (code point) ch of s[0..n), or -1 past the end. */
static long char_to_byte(const char *s, size_t n, int64_t ch)
{
    size_t pos = 0;
    for (int64_t c = 0; c < ch; c++) {
        if (pos >= n)
            return -1;
        size_t adv;
        tfm_utf8_decode((const unsigned char *)s + pos, n - pos, &adv);
        pos += adv;
    }
    return (long)pos;
}

static int add_answer(tfm_ft_data *d, grow *g, const tfm_ft_example *e, const tfm_json *text,
                      const tfm_json *start, size_t k, long line, tfm_err *err)
{
    if (!text || text->type != TFM_JSON_STRING || text->len == 0)
        return tfm_err_at(err, d->name, line, text ? text->col : 0,
                          "answer %zu: \"text\" must be a non-empty string", k + 1);
    if (!start || start->type != TFM_JSON_NUMBER || start->num < 0 ||
        start->num != floor(start->num) || start->num > 1e15)
        return tfm_err_at(err, d->name, line, start ? start->col : 0,
                          "answer %zu: \"answer_start\" must be a character offset (an "
                          "integer >= 0)", k + 1);
    long b = char_to_byte(e->a, e->na, (int64_t)start->num);
    if (b < 0 || (size_t)b + text->len > e->na || memcmp(e->a + b, text->str, text->len)) {
        size_t avail = b < 0 ? 0 : e->na - (size_t)b;
        int show = (int)(avail < text->len ? avail : text->len);
        return tfm_err_at(err, d->name, line, start->col, "answer %zu: \"%.60s\" is not at "
                          "character %.0f of the context (it has \"%.*s\" there)", k + 1,
                          text->str, start->num, show > 60 ? 60 : show,
                          b < 0 ? "" : e->a + b);
    }
    if (d->n_ans == g->ans) {
        g->ans = g->ans ? 2 * g->ans : 256;
        d->ans = tfm_realloc(d->ans, g->ans * sizeof *d->ans);
    }
    d->ans[d->n_ans++] = (tfm_ft_answer){keep(d, text->str, text->len), text->len, (size_t)b};
    return 0;
}

static int span_json(tfm_ft_data *d, grow *g, const tfm_ft_read_opts *o, const tfm_json *r,
                     long line, tfm_err *err)
{
    const tfm_json *c, *q, *ans = tfm_json_get(r, "answers"), *id = tfm_json_get(r, "id");
    if (json_string(d, r, "context", line, &c, err) < 0 ||
        json_string(d, r, "question", line, &q, err) < 0)
        return -1;
    if (!c || c->len == 0)
        return tfm_err_at(err, d->name, line, 0, "needs a non-empty \"context\"");
    if (!q || q->len == 0)
        return tfm_err_at(err, d->name, line, 0, "needs a non-empty \"question\"");
    if (ans && ans->type == TFM_JSON_NULL)
        ans = NULL;
    if (!ans && o->need_gold)
        return tfm_err_at(err, d->name, line, 0, "no \"answers\"");
    tfm_ft_example *e = new_example(d, g, line);
    if (same_shape(d, ans != NULL, 0, line, d->ex[0].line, err) < 0)
        return -1;
    e->a = keep(d, c->str, c->len);
    e->na = c->len;
    e->b = keep(d, q->str, q->len);
    e->nb = q->len;
    if (id && (id->type == TFM_JSON_STRING || id->type == TFM_JSON_NUMBER))
        e->id = keep(d, id->str, id->len);
    e->ans0 = d->n_ans;
    if (!ans)
        return 0;
    if (ans->type == TFM_JSON_OBJECT) {
        /* HuggingFace datasets: {"text": [...], "answer_start": [...]} */
        const tfm_json *t = tfm_json_get(ans, "text"), *s = tfm_json_get(ans, "answer_start");
        if (!t || !s || t->type != TFM_JSON_ARRAY || s->type != TFM_JSON_ARRAY || t->n != s->n)
            return tfm_err_at(err, d->name, line, ans->col, "\"answers\" must hold arrays "
                              "\"text\" and \"answer_start\" of the same length");
        for (size_t k = 0; k < t->n; k++)
            if (add_answer(d, g, e, t->items[k], s->items[k], k, line, err) < 0)
                return -1;
    } else if (ans->type == TFM_JSON_ARRAY) {
        /* SQuAD's own files: [{"text": ..., "answer_start": ...}, ...] */
        for (size_t k = 0; k < ans->n; k++) {
            const tfm_json *a = ans->items[k];
            if (add_answer(d, g, e, tfm_json_get(a, "text"), tfm_json_get(a, "answer_start"),
                           k, line, err) < 0)
                return -1;
        }
    } else {
        return tfm_err_at(err, d->name, line, ans->col, "\"answers\" must be an object or an "
                          "array, not %s", tfm_json_type_name(ans->type));
    }
    e->n_ans = d->n_ans - e->ans0;
    return 0;
}

/* ---- reading ------------------------------------------------------------ */

int tfm_ft_read(tfm_ft_data *d, tfm_ft_task task, const char *text, size_t len,
                const char *name, const tfm_ft_read_opts *o, tfm_err *err)
{
    memset(d, 0, sizeof *d);
    d->task = task;
    snprintf(d->name, sizeof d->name, "%s", name);
    grow g = {0};
    d->jsonl = is_jsonl(text, len);
    int rc = 0;
    long bad = tfm_utf8_invalid_line(text, len);
    if (bad) /* TSV, CoNLL and JSON Lines alike */
        rc = tfm_err_at(err, name, bad, 0, "invalid UTF-8");
    else if (task == TFM_FT_SPAN && !d->jsonl && !blank_line(text, len))
        rc = tfm_err_at(err, name, 1, 0, "expected JSON Lines: one {\"context\": ..., "
                        "\"question\": ..., \"answers\": ...} object a line");
    else if (task == TFM_FT_TAG && !d->jsonl)
        rc = read_conll(d, &g, o, text, len, err);
    else {
        lines L = {text, len, 0, 0};
        const char *s;
        size_t n;
        while (rc == 0 && next_line(&L, &s, &n)) {
            if (blank_line(s, n))
                continue;
            if (!d->jsonl) {
                rc = classify_tsv_line(d, &g, o, s, n, L.line, err);
                continue;
            }
            tfm_json_doc doc;
            if (tfm_json_parse_line(&doc, s, n, name, L.line, err) < 0) {
                rc = -1;
                break;
            }
            if (doc.root->type != TFM_JSON_OBJECT)
                rc = tfm_err_at(err, name, L.line, 0, "expected a JSON object, not %s",
                                tfm_json_type_name(doc.root->type));
            else if (task == TFM_FT_CLASSIFY)
                rc = classify_json(d, &g, o, doc.root, L.line, err);
            else if (task == TFM_FT_TAG)
                rc = tag_json(d, &g, o, doc.root, L.line, err);
            else
                rc = span_json(d, &g, o, doc.root, L.line, err);
            tfm_json_doc_free(&doc);
        }
    }
    if (rc == 0 && d->n == 0)
        rc = tfm_err_set(err, "%s: no examples", name);
    if (rc < 0)
        tfm_ft_data_free(d);
    return rc;
}

int tfm_ft_read_file(tfm_ft_data *d, tfm_ft_task task, const char *path,
                     const tfm_ft_read_opts *o, tfm_err *err)
{
    int is_stdin = !strcmp(path, "-");
    const char *name = is_stdin ? "stdin" : path;
    FILE *fp = is_stdin ? stdin : fopen(path, "rb");
    if (!fp)
        return tfm_err_errno(err, "%s", path);
    tfm_buf b = {0};
    int rc = tfm_read_all(fp, name, &b, err);
    if (!is_stdin)
        fclose(fp);
    if (rc == 0)
        rc = tfm_ft_read(d, task, b.data ? b.data : "", b.len, name, o, err);
    tfm_buf_free(&b);
    return rc;
}

/* ---- label sets --------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A finite number written in full; *decimal: with '.' or an exponent. */
static int parse_number(const char *s, double *v, int *decimal)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    if (end == s || *end || !isfinite(*v))
        return 0;
    if (decimal)
        *decimal = strpbrk(s, ".eE") != NULL;
    return 1;
}

int tfm_ft_labels_from_data(tfm_ft_labels *l, const tfm_ft_data *const *d, size_t nd,
                            int regression, tfm_err *err)
{
    memset(l, 0, sizeof *l);
    if (nd == 0 || d[0]->task == TFM_FT_SPAN) /* spans have no label set */
        return 0;
    size_t total = 0;
    for (size_t k = 0; k < nd; k++)
        total += d[k]->task == TFM_FT_TAG ? d[k]->n_word : d[k]->n;
    const char **all = tfm_malloc((total ? total : 1) * sizeof *all);
    size_t n = 0;
    int numbers = 1, decimal = 0;
    for (size_t k = 0; k < nd; k++) {
        const tfm_ft_data *D = d[k];
        if (!D->gold)
            continue;
        if (D->task == TFM_FT_TAG) {
            for (size_t i = 0; i < D->n_word; i++)
                all[n++] = D->tag[i];
            continue;
        }
        l->pairs = D->pairs;
        for (size_t i = 0; i < D->n; i++) {
            double v;
            int dec = 0;
            int num = parse_number(D->ex[i].label, &v, &dec);
            if (!num && regression == 1) {
                free(all);
                return tfm_err_at(err, D->name, D->ex[i].line, 0, "label '%.60s' is not a "
                                  "number (a regression: model.classes 1)", D->ex[i].label);
            }
            numbers &= num;
            decimal |= dec;
            all[n++] = D->ex[i].label;
        }
    }
    if (nd && d[0]->task == TFM_FT_CLASSIFY &&
        (regression == 1 || (regression < 0 && numbers && decimal && n))) {
        l->regression = 1;
        free(all);
        return 0;
    }
    qsort(all, n, sizeof *all, cmp_str);
    l->name = tfm_malloc((n ? n : 1) * sizeof *l->name);
    for (size_t i = 0; i < n; i++)
        if (i == 0 || strcmp(all[i], all[i - 1]))
            l->name[l->n++] = tfm_strdup(all[i]);
    free(all);
    return 0;
}

long tfm_ft_label_id(const tfm_ft_labels *l, const char *name)
{
    size_t lo = 0, hi = l->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(l->name[mid], name);
        if (c == 0)
            return (long)mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

void tfm_ft_labels_json(const tfm_ft_labels *l, tfm_ft_task task, tfm_buf *out)
{
    if (task == TFM_FT_SPAN) {
        tfm_buf_puts(out, "{}");
        return;
    }
    if (task == TFM_FT_CLASSIFY && l->regression) {
        tfm_buf_printf(out, "{\"regression\":true,\"pairs\":%s}", l->pairs ? "true" : "false");
        return;
    }
    tfm_buf_printf(out, "{\"%s\":[", task == TFM_FT_TAG ? "tags" : "labels");
    for (size_t i = 0; i < l->n; i++) {
        if (i)
            tfm_buf_putc(out, ',');
        tfm_buf_put_json_string(out, l->name[i], strlen(l->name[i]));
    }
    tfm_buf_putc(out, ']');
    if (task == TFM_FT_CLASSIFY)
        tfm_buf_printf(out, ",\"pairs\":%s", l->pairs ? "true" : "false");
    tfm_buf_putc(out, '}');
}

int tfm_ft_labels_parse(tfm_ft_labels *l, tfm_ft_task task, const char *json, size_t len,
                        const char *name, tfm_err *err)
{
    memset(l, 0, sizeof *l);
    tfm_json_doc doc;
    if (tfm_json_parse(&doc, json, len, name, 0, err) < 0)
        return -1;
    int rc = 0;
    const tfm_json *r = doc.root;
    const tfm_json *arr = tfm_json_get(r, task == TFM_FT_TAG ? "tags" : "labels");
    const tfm_json *reg = tfm_json_get(r, "regression"), *pairs = tfm_json_get(r, "pairs");
    l->regression = reg && reg->type == TFM_JSON_BOOL && reg->boolean;
    l->pairs = pairs && pairs->type == TFM_JSON_BOOL && pairs->boolean;
    if (!l->regression && task != TFM_FT_SPAN) {
        if (!arr || arr->type != TFM_JSON_ARRAY || arr->n == 0) {
            rc = tfm_err_set(err, "%s: no \"%s\" array", name,
                             task == TFM_FT_TAG ? "tags" : "labels");
            goto out;
        }
        l->name = tfm_malloc(arr->n * sizeof *l->name);
        for (size_t i = 0; i < arr->n; i++) {
            const tfm_json *s = arr->items[i];
            if (s->type != TFM_JSON_STRING || (i && strcmp(l->name[i - 1], s->str) >= 0)) {
                rc = tfm_err_set(err, "%s: the labels must be distinct strings in sorted "
                                 "order", name);
                goto out;
            }
            l->name[l->n++] = tfm_strdup(s->str);
        }
    }
out:
    tfm_json_doc_free(&doc);
    if (rc < 0)
        tfm_ft_labels_free(l);
    return rc;
}

void tfm_ft_labels_free(tfm_ft_labels *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->name[i]);
    free(l->name);
    memset(l, 0, sizeof *l);
}

/* ---- token offsets ------------------------------------------------------ */

static int space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

void tfm_ft_token_offsets(const tfm_tokenizer *tok, const char *text, size_t len,
                          const uint32_t *ids, size_t n, long *start, long *end)
{
    tfm_token_spans(tok, text, len, ids, n, start, end, NULL);
    long prev = 0;
    for (size_t i = 0; i < n; i++) {
        if (start[i] >= 0) {
            prev = end[i];
            continue;
        }
        long next = (long)len;
        for (size_t j = i + 1; j < n; j++)
            if (start[j] >= 0) {
                next = start[j];
                break;
            }
        long a = prev, b = next < prev ? prev : next;
        while (a < b && space(text[a]))
            a++;
        while (b > a && space(text[b - 1]))
            b--;
        /* the tokens of one gap share it: each gets the whole gap */
        start[i] = a;
        end[i] = b;
    }
}

/* ---- encoding ----------------------------------------------------------- */

void tfm_ft_set_free(tfm_ft_set *s)
{
    free(s->row);
    free(s->ex_row);
    tfm_ids_free(&s->ids);
    free(s->seg);
    free(s->tag);
    free(s->word_pos);
    free(s->ex_word);
    free(s->tok_start);
    free(s->tok_end);
    free(s->ex_tok);
    free(s->context);
    free(s->ex_context);
    memset(s, 0, sizeof *s);
}

/* A row under construction: its tokens, segments and tags. */
typedef struct draft {
    tfm_ids ids;
    tfm_buf seg;
    int32_t *tag;
    size_t tag_cap;
} draft;

static void draft_clear(draft *r)
{
    tfm_ids_clear(&r->ids);
    tfm_buf_clear(&r->seg);
}

/* Gives the tokens appended since the last call (ids past seg.len) their
 * segment and the tag -1. */
static void draft_fill(draft *r, uint8_t seg)
{
    if (r->ids.len > r->tag_cap) {
        r->tag_cap = 2 * r->ids.len;
        r->tag = tfm_realloc(r->tag, r->tag_cap * sizeof *r->tag);
    }
    for (size_t i = r->seg.len; i < r->ids.len; i++) {
        tfm_buf_putc(&r->seg, (char)seg);
        r->tag[i] = -1;
    }
}

static void draft_push(draft *r, uint32_t id, uint8_t seg)
{
    tfm_ids_push(&r->ids, id);
    draft_fill(r, seg);
}

static void draft_free(draft *r)
{
    tfm_ids_free(&r->ids);
    tfm_buf_free(&r->seg);
    free(r->tag);
}

/* Keeps the first max - 1 tokens and the last one (the closing special). */
static void draft_cut(draft *r, size_t max)
{
    size_t n = r->ids.len;
    if (n <= max)
        return;
    r->ids.data[max - 1] = r->ids.data[n - 1];
    r->seg.data[max - 1] = r->seg.data[n - 1];
    r->tag[max - 1] = r->tag[n - 1];
    r->ids.len = max;
    r->seg.len = max;
}

static tfm_ft_row *add_row(tfm_ft_set *s, const draft *r, size_t ex)
{
    if (s->n_rows == s->rows_cap) {
        s->rows_cap = s->rows_cap ? 2 * s->rows_cap : 256;
        s->row = tfm_realloc(s->row, s->rows_cap * sizeof *s->row);
    }
    tfm_ft_row *w = &s->row[s->n_rows++];
    memset(w, 0, sizeof *w);
    w->off = s->ids.len;
    w->len = (int)r->ids.len;
    w->label = -1;
    w->value = NAN;
    w->start = w->end = -1;
    w->ex = ex;
    size_t need = s->ids.len + r->ids.len;
    tfm_ids_append(&s->ids, r->ids.data, r->ids.len);
    if (s->has_seg) {
        if (need > s->seg_cap) {
            s->seg_cap = need * 2;
            s->seg = tfm_realloc(s->seg, s->seg_cap);
        }
        memcpy(s->seg + w->off, r->seg.data, r->ids.len);
    }
    if (s->task == TFM_FT_TAG) {
        if (need > s->tag_cap) {
            s->tag_cap = need * 2;
            s->tag = tfm_realloc(s->tag, s->tag_cap * sizeof *s->tag);
        }
        memcpy(s->tag + w->off, r->tag, r->ids.len * sizeof *r->tag);
    }
    return w;
}

typedef struct enc {
    tfm_ft_set *s;
    const tfm_ft_data *d;
    const tfm_tokenizer *tok;
    tfm_tok_scratch *scratch;
    const tfm_ft_labels *labels;
    const tfm_ft_enc_opts *o;
    draft r;
    tfm_ids tmp, tmp2;
} enc;

/* Gold label of an example as a class id or value, or an error naming it. */
static int gold_label(enc *E, const tfm_ft_example *e, tfm_ft_row *w, tfm_err *err)
{
    const tfm_ft_labels *l = E->labels;
    if (l->regression) {
        double v;
        if (!parse_number(e->label, &v, NULL))
            return tfm_err_at(err, E->d->name, e->line, 0, "label '%.60s' is not a number (the "
                              "model is a regression)", e->label);
        w->value = (float)v;
        return 0;
    }
    long id = tfm_ft_label_id(l, e->label);
    if (id < 0) {
        tfm_buf list = {0};
        for (size_t i = 0; i < l->n && i < 10; i++)
            tfm_buf_printf(&list, "%s%s", i ? ", " : "", l->name[i]);
        if (l->n > 10)
            tfm_buf_puts(&list, ", ...");
        int rc = tfm_err_at(err, E->d->name, e->line, 0, "label '%.60s' is not one of the "
                            "model's %zu labels (%s)", e->label, l->n, tfm_buf_cstr(&list));
        tfm_buf_free(&list);
        return rc;
    }
    w->label = (int32_t)id;
    return 0;
}

static int too_long(enc *E, const tfm_ft_example *e, size_t n, tfm_err *err)
{
    return tfm_err_at(err, E->d->name, e->line, 0, "%zu tokens, more than the model's context "
                      "of %d (data.truncate head cuts it)", n, E->o->max_len);
}

/* Cuts the draft to max_len (or fails with truncate_error); counts it. */
static int fit(enc *E, const tfm_ft_example *e, int *cut, tfm_err *err)
{
    size_t n = E->r.ids.len, max = (size_t)E->o->max_len;
    if (n <= max)
        return 0;
    if (E->o->truncate_error)
        return too_long(E, e, n, err);
    draft_cut(&E->r, max);
    *cut = 1;
    return 0;
}

static void encode_text(enc *E, const char *s, size_t n)
{
    tfm_tokenizer_encode(E->tok, E->scratch, s, n, 0, &E->r.ids);
}

static int encode_classify(enc *E, size_t ex, tfm_err *err)
{
    const tfm_ft_example *e = &E->d->ex[ex];
    const tfm_ft_enc_opts *o = E->o;
    int cut = 0;
    /* A pair is cut longest-first (BERT's truncate_seq_pair), so that a long
     * text_a does not leave text_b out of the row; a single text keeps its
     * head (fit). */
    tfm_ids *ta = &E->tmp, *tb = &E->tmp2;
    size_t ka = 0, kb = 0;
    if (e->b) {
        tfm_ids_clear(ta);
        tfm_ids_clear(tb);
        tfm_tokenizer_encode(E->tok, E->scratch, e->a, e->na, 0, ta);
        tfm_tokenizer_encode(E->tok, E->scratch, e->b, e->nb, 0, tb);
        size_t specials = o->decoder ? 2 : 3, max = (size_t)o->max_len;
        size_t room = max > specials ? max - specials : 0;
        if (ta->len + tb->len + specials > max && o->truncate_error)
            return too_long(E, e, ta->len + tb->len + specials, err);
        cut = tfm_tok_pair_truncate(ta->len, tb->len, room, &ka, &kb);
    }
    for (int order = 0; order < (o->decoder && o->both_orders && e->b ? 2 : 1); order++) {
        draft *r = &E->r;
        draft_clear(r);
        if (o->decoder) {
            /* GPT: text, delimiter, text, extract (one token serves both) */
            if (e->b) {
                /* both orders hold the same (cut) texts */
                tfm_ids_append(&r->ids, order ? tb->data : ta->data, order ? kb : ka);
                tfm_ids_push(&r->ids, (uint32_t)o->eos);
                tfm_ids_append(&r->ids, order ? ta->data : tb->data, order ? ka : kb);
            } else {
                encode_text(E, e->a, e->na);
            }
            tfm_ids_push(&r->ids, (uint32_t)o->eos);
            draft_fill(r, 0);
        } else {
            draft_push(r, (uint32_t)o->cls, 0);
            if (e->b)
                tfm_ids_append(&r->ids, ta->data, ka);
            else
                encode_text(E, e->a, e->na);
            draft_push(r, (uint32_t)o->sep, 0);   /* fills a's segments too */
            if (e->b) {
                tfm_ids_append(&r->ids, tb->data, kb);
                draft_push(r, (uint32_t)o->sep, 1);
            }
        }
        if (fit(E, e, &cut, err) < 0)
            return -1;
        tfm_ft_row *w = add_row(E->s, r, ex);
        w->cls_pos = o->decoder ? w->len - 1 : 0;
        if (E->d->gold && gold_label(E, e, w, err) < 0)
            return -1;
    }
    E->s->truncated += cut;
    return 0;
}

static int encode_tag(enc *E, size_t ex, tfm_err *err)
{
    const tfm_ft_example *e = &E->d->ex[ex];
    tfm_ft_set *s = E->s;
    draft *r = &E->r;
    draft_clear(r);
    draft_push(r, (uint32_t)E->o->cls, 0);
    int bpe = tfm_tokenizer_kind(E->tok) == TFM_TOK_BPE;
    int64_t unk = tfm_tokenizer_specials(E->tok)->unk;
    if (s->word_cap < s->ex_word[ex - s->ex0] + e->n_words) {
        s->word_cap = 2 * (s->ex_word[ex - s->ex0] + e->n_words);
        s->word_pos = tfm_realloc(s->word_pos, s->word_cap * sizeof *s->word_pos);
    }
    long *pos = s->word_pos + s->ex_word[ex - s->ex0];
    for (size_t i = 0; i < e->n_words; i++) {
        size_t w = e->word0 + i, from = r->ids.len;
        const char *word = E->d->word[w];
        if (bpe && i > 0) {
            /* byte-level BPE spells a word after a space with it */
            tfm_buf t = {0};
            tfm_buf_putc(&t, ' ');
            tfm_buf_puts(&t, word);
            encode_text(E, t.data, t.len);
            tfm_buf_free(&t);
        } else {
            encode_text(E, word, strlen(word));
        }
        if (r->ids.len == from && unk >= 0)
            tfm_ids_push(&r->ids, (uint32_t)unk);
        draft_fill(r, 0);
        pos[i] = r->ids.len > from ? (long)from : -1;
        if (pos[i] >= 0 && E->d->gold) {
            long id = tfm_ft_label_id(E->labels, E->d->tag[w]);
            if (id < 0)
                return tfm_err_at(err, E->d->name, E->d->word_line[w], 0, "tag '%.60s' is not "
                                  "one of the model's %zu tags", E->d->tag[w], E->labels->n);
            r->tag[from] = (int32_t)id;
        }
    }
    draft_push(r, (uint32_t)E->o->sep, 0);
    int cut = 0;
    if (fit(E, e, &cut, err) < 0)
        return -1;
    for (size_t i = 0; cut && i < e->n_words; i++)
        if (pos[i] >= (long)r->ids.len - 1)
            pos[i] = -1;
    s->ex_word[ex - s->ex0 + 1] = s->ex_word[ex - s->ex0] + e->n_words;
    add_row(s, r, ex);
    s->truncated += cut;
    return 0;
}

static int encode_span(enc *E, size_t ex, tfm_err *err)
{
    const tfm_ft_example *e = &E->d->ex[ex];
    const tfm_ft_enc_opts *o = E->o;
    tfm_ft_set *s = E->s;
    size_t k = ex - s->ex0;
    /* the context's tokens and where they lie in it */
    tfm_ids *c = &E->tmp;
    tfm_ids_clear(c);
    tfm_tokenizer_encode(E->tok, E->scratch, e->a, e->na, 0, c);
    size_t first = s->ex_tok[k], nc = c->len;
    if (first + nc > s->tok_cap) {
        s->tok_cap = 2 * (first + nc);
        s->tok_start = tfm_realloc(s->tok_start, s->tok_cap * sizeof *s->tok_start);
        s->tok_end = tfm_realloc(s->tok_end, s->tok_cap * sizeof *s->tok_end);
    }
    long *ts = s->tok_start + first, *te = s->tok_end + first;
    tfm_ft_token_offsets(E->tok, e->a, e->na, c->data, nc, ts, te);
    s->ex_tok[k + 1] = first + nc;
    size_t c0 = s->ex_context[k];
    if (c0 + e->na > s->context_cap) {
        s->context_cap = 2 * (c0 + e->na);
        s->context = tfm_realloc(s->context, s->context_cap);
    }
    if (e->na)
        memcpy(s->context + c0, e->a, e->na);
    s->ex_context[k + 1] = c0 + e->na;
    if (nc == 0)
        return tfm_err_at(err, E->d->name, e->line, 0, "the context has no tokens");
    /* the question, at most half the row */
    draft *r = &E->r;
    draft_clear(r);
    draft_push(r, (uint32_t)o->cls, 0);
    encode_text(E, e->b, e->nb);
    draft_fill(r, 0);
    size_t nq = r->ids.len - 1, max_q = (size_t)o->max_len / 2;
    int cut = 0;
    if (nq > max_q) {
        if (o->truncate_error)
            return tfm_err_at(err, E->d->name, e->line, 0, "the question has %zu tokens, more "
                              "than half the model's context of %d (data.truncate head cuts "
                              "it)", nq, o->max_len);
        r->ids.len = r->seg.len = 1 + max_q;
        nq = max_q;
        cut = 1;
    }
    draft_push(r, (uint32_t)o->sep, 0);
    size_t head = r->ids.len;
    if ((size_t)o->max_len < head + 2)
        return tfm_err_at(err, E->d->name, e->line, 0, "no room for the context: the model's "
                          "context of %d holds only the question", o->max_len);
    size_t room = (size_t)o->max_len - head - 1;
    if (nc > room && o->truncate_error)
        return tfm_err_at(err, E->d->name, e->line, 0, "the context has %zu tokens, more than "
                          "the %zu that fit beside the question (data.truncate head splits it "
                          "into windows)", nc, room);
    size_t stride = o->doc_stride > 0 && (size_t)o->doc_stride < room ? (size_t)o->doc_stride
                                                                      : room;
    /* the first answer's tokens: the first ending after its start, the last
     * starting before its end */
    long as = -1, ae = -1;
    if (E->d->gold && e->n_ans) {
        const tfm_ft_answer *a = &E->d->ans[e->ans0];
        long bs = (long)a->start, be = (long)(a->start + a->len);
        for (size_t i = 0; i < nc; i++) {
            if (as < 0 && te[i] > bs)
                as = (long)i;
            if (ts[i] < be)
                ae = (long)i;
        }
        if (as < 0 || ae < as)
            as = ae = -1;
    }
    for (size_t w0 = 0;; w0 += stride) {
        size_t wl = nc - w0 < room ? nc - w0 : room;
        r->ids.len = r->seg.len = head;
        tfm_ids_append(&r->ids, c->data + w0, wl);
        draft_fill(r, 1);
        draft_push(r, (uint32_t)o->sep, 1);
        tfm_ft_row *w = add_row(s, r, ex);
        w->ctx_pos = (int)head;
        w->ctx_len = (int)wl;
        w->ctx_tok = w0;
        if (E->d->gold) {
            int in = as >= 0 && (size_t)as >= w0 && (size_t)ae < w0 + wl;
            w->start = in ? (int32_t)(head + (size_t)as - w0) : 0;
            w->end = in ? (int32_t)(head + (size_t)ae - w0) : 0;
        }
        if (w0 + wl >= nc)
            break;
    }
    s->truncated += cut;
    return 0;
}

int tfm_ft_encode(tfm_ft_set *s, const tfm_ft_data *d, size_t first, size_t count,
                  const tfm_tokenizer *tok, const tfm_ft_labels *labels,
                  const tfm_ft_enc_opts *o, tfm_err *err)
{
    memset(s, 0, sizeof *s);
    TFM_ASSERT(first + count <= d->n);
    TFM_ASSERT(!d->gold || labels || d->task == TFM_FT_SPAN);
    s->task = d->task;
    s->decoder = o->decoder;
    s->has_gold = d->gold;
    s->has_seg = o->segments && !o->decoder;
    s->ex0 = first;
    s->n_ex = count;
    s->ex_row = tfm_calloc(count + 1, sizeof *s->ex_row);
    if (d->task == TFM_FT_TAG)
        s->ex_word = tfm_calloc(count + 1, sizeof *s->ex_word);
    if (d->task == TFM_FT_SPAN) {
        s->ex_tok = tfm_calloc(count + 1, sizeof *s->ex_tok);
        s->ex_context = tfm_calloc(count + 1, sizeof *s->ex_context);
    }
    if (!o->decoder && (o->cls < 0 || o->sep < 0))
        return tfm_err_set(err, "no [CLS] and [SEP] ids (an encoder reads [CLS] A [SEP]): use a "
                           "tokenizer that has them or set data.cls_id and data.sep_id");
    if (o->decoder && o->eos < 0)
        return tfm_err_set(err, "no end-of-text token: a decoder's classifier reads one at the "
                           "end of the text (and between two texts)");
    enc E = {.s = s, .d = d, .tok = tok, .scratch = tfm_tok_scratch_new(tok), .labels = labels,
             .o = o};
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < count; i++) {
        size_t ex = first + i;
        rc = d->task == TFM_FT_CLASSIFY ? encode_classify(&E, ex, err)
             : d->task == TFM_FT_TAG    ? encode_tag(&E, ex, err)
                                        : encode_span(&E, ex, err);
        s->ex_row[i + 1] = s->n_rows;
    }
    draft_free(&E.r);
    tfm_ids_free(&E.tmp);
    tfm_ids_free(&E.tmp2);
    tfm_tok_scratch_free(E.scratch);
    if (rc < 0)
        tfm_ft_set_free(s);
    return rc;
}
