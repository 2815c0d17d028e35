/* Label files of the fine-tuning tasks: see taskdata.h.  The text is copied
 * once and cut in place with NULs; items point into the copy. */
#include "config.h"

#include "data/taskdata.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "text/utf8.h"

typedef struct growth {
    size_t cap_items, cap_groups, cap_words;
} growth;

static void push_item(tfm_taskdata *d, growth *g, const char *s, long line)
{
    if (d->n == g->cap_items) {
        g->cap_items = g->cap_items ? 2 * g->cap_items : 64;
        d->item = tfm_realloc(d->item, g->cap_items * sizeof *d->item);
        d->line = tfm_realloc(d->line, g->cap_items * sizeof *d->line);
    }
    d->item[d->n] = s;
    d->line[d->n++] = line;
}

/* CoNLL: the word of the item just pushed (the words grow with the items) */
static void set_word(tfm_taskdata *d, growth *g, const char *w)
{
    if (g->cap_words < g->cap_items) {
        g->cap_words = g->cap_items;
        d->word = tfm_realloc(d->word, g->cap_words * sizeof *d->word);
    }
    d->word[d->n - 1] = w;
}

/* Opens group n_group at the current item; group[n_group] is kept as the end. */
static void push_group(tfm_taskdata *d, growth *g, long line)
{
    if (d->n_group + 1 >= g->cap_groups) {
        g->cap_groups = g->cap_groups ? 2 * g->cap_groups : 64;
        d->group = tfm_realloc(d->group, (g->cap_groups + 1) * sizeof *d->group);
        d->group_line = tfm_realloc(d->group_line, g->cap_groups * sizeof *d->group_line);
    }
    d->group[d->n_group] = d->n;
    d->group_line[d->n_group++] = line;
    d->group[d->n_group] = d->n;
}

static void close_group(tfm_taskdata *d)
{
    d->group[d->n_group] = d->n;
}

static int blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/* Keeps a copy of the text in d, where the items will point; invalid UTF-8
 * is an error naming its line, as in every text input. */
static int copy_text(tfm_taskdata *d, const char *text, size_t len, const char *name,
                     tfm_err *err)
{
    long bad = tfm_utf8_invalid_line(text, len);
    if (bad)
        return tfm_err_at(err, name, bad, 0, "invalid UTF-8");
    d->text = tfm_malloc(len + 1);
    memcpy(d->text, text, len);
    d->text[len] = 0;
    return 0;
}

/* The line at *pos of d->text[0..len), NUL-terminated with a '\r' before
 * its newline dropped, its length in *l; NULL at the end.  Counts d->lines. */
static char *next_line(tfm_taskdata *d, size_t len, size_t *pos, size_t *l)
{
    if (*pos >= len)
        return NULL;
    char *s = d->text + *pos, *nl = memchr(s, '\n', len - *pos);
    *l = nl ? (size_t)(nl - s) : len - *pos;
    *pos += *l + (nl != NULL);
    s[*l] = 0;
    if (*l > 0 && s[*l - 1] == '\r')
        s[--*l] = 0;
    d->lines++;
    return s;
}

static char *trim(char *s, size_t *l)
{
    while (*l > 0 && blank(s[*l - 1]))
        s[--*l] = 0;
    while (*l > 0 && blank(*s)) {
        s++;
        --*l;
    }
    return s;
}

int tfm_taskdata_labels(tfm_taskdata *d, const char *text, size_t len, const char *name,
                        tfm_err *err)
{
    memset(d, 0, sizeof *d);
    growth g = {0};
    char *s;
    size_t pos = 0, l;
    if (copy_text(d, text, len, name, err) < 0)
        return -1;
    while ((s = next_line(d, len, &pos, &l))) {
        long line = d->lines;
        s = trim(s, &l);
        if (l == 0) {
            tfm_taskdata_free(d);
            return tfm_err_at(err, name, line, 0, "empty line: one label a line");
        }
        push_item(d, &g, s, line);
    }
    return 0;
}

int tfm_taskdata_values(tfm_taskdata *d, const char *text, size_t len, const char *name,
                        tfm_err *err)
{
    if (tfm_taskdata_labels(d, text, len, name, err) < 0)
        return -1;
    d->value = tfm_malloc((d->n ? d->n : 1) * sizeof *d->value);
    for (size_t i = 0; i < d->n; i++) {
        char *end;
        errno = 0;
        double v = strtod(d->item[i], &end);
        if (*end || end == d->item[i] || !isfinite(v)) {
            int r = tfm_err_at(err, name, d->line[i], 0, "'%.40s' is not a finite number",
                               d->item[i]);
            tfm_taskdata_free(d);
            return r;
        }
        d->value[i] = v;
    }
    return 0;
}

static int is_docstart(const char *s) { return !strncmp(s, "-DOCSTART-", 10); }

/* CoNLL separates sentences by blank lines and usually ends with one; a
 * file of one sentence a line has none (but for an empty sentence). */
static tfm_tag_format detect(const char *text, size_t len)
{
    int seen_text = 0;
    for (size_t pos = 0; pos < len;) {
        const char *s = text + pos, *nl = memchr(s, '\n', len - pos);
        size_t l = nl ? (size_t)(nl - s) : len - pos, k = 0;
        pos += l + (nl != NULL);
        while (k < l && blank(s[k]))
            k++;
        if (k == l) {
            if (seen_text)
                return TFM_TAGS_CONLL;
            continue;
        }
        if (l - k >= 10 && is_docstart(s + k))
            return TFM_TAGS_CONLL;
        seen_text = 1;
    }
    return TFM_TAGS_LINES;
}

int tfm_taskdata_tags(tfm_taskdata *d, const char *text, size_t len, const char *name,
                      tfm_tag_format fmt, tfm_err *err)
{
    if (fmt == TFM_TAGS_AUTO)
        fmt = detect(text, len);
    memset(d, 0, sizeof *d);
    growth g = {0};
    size_t columns = 0;  /* of the first token line (CoNLL) */
    long columns_line = 0;
    int open = 0;        /* CoNLL: a sentence is open */
    char *s;
    size_t pos = 0, l;
    if (copy_text(d, text, len, name, err) < 0)
        return -1;
    while ((s = next_line(d, len, &pos, &l))) {
        long line = d->lines;
        s = trim(s, &l);
        if (fmt == TFM_TAGS_LINES) {
            push_group(d, &g, line);
            for (char *p = s; *p;) {
                while (blank(*p))
                    *p++ = 0;
                if (!*p)
                    break;
                push_item(d, &g, p, line);
                while (*p && !blank(*p))
                    p++;
            }
            close_group(d);
            continue;
        }
        if (l == 0 || is_docstart(s)) {
            open = 0;
            continue;
        }
        size_t nf = 0;
        char *last = s;
        for (char *p = s; *p;) {
            while (blank(*p))
                *p++ = 0;
            if (!*p)
                break;
            last = p;
            nf++;
            while (*p && !blank(*p))
                p++;
        }
        if (!columns) {
            columns = nf;
            columns_line = line;
            d->columns = nf;
        } else if (nf != columns) {
            tfm_taskdata_free(d);
            return tfm_err_at(err, name, line, 0, "%zu column%s, but line %ld has %zu "
                              "(CoNLL: the same columns on every token line, the tag last)",
                              nf, nf == 1 ? "" : "s", columns_line, columns);
        }
        if (!open) {
            push_group(d, &g, line);
            open = 1;
        }
        push_item(d, &g, last, line);
        set_word(d, &g, s);
        close_group(d);
    }
    return 0;
}

long tfm_taskdata_conll_untagged(const char *text, size_t len)
{
    long line = 0;
    for (size_t pos = 0; pos < len;) {
        const char *s = text + pos, *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl != NULL);
        if (n && s[n - 1] == '\r')
            n--;
        line++;
        size_t k = 0, fields = 0;
        while (k < n) {
            while (k < n && (s[k] == ' ' || s[k] == '\t'))
                k++;
            if (k < n)
                fields++;
            while (k < n && s[k] != ' ' && s[k] != '\t')
                k++;
        }
        if (fields == 1 && !(n >= 10 && !memcmp(s, "-DOCSTART-", 10)))
            return line;
    }
    return 0;
}

int tfm_taskdata_answers(tfm_taskdata *d, const char *text, size_t len, const char *name,
                         int multi, tfm_err *err)
{
    memset(d, 0, sizeof *d);
    growth g = {0};
    char *s;
    size_t pos = 0, l;
    if (copy_text(d, text, len, name, err) < 0)
        return -1;
    while ((s = next_line(d, len, &pos, &l))) {
        long line = d->lines;
        push_group(d, &g, line);
        char *p = s;
        for (;;) {
            char *tab = multi ? strchr(p, '\t') : NULL;
            if (tab)
                *tab = 0;
            push_item(d, &g, p, line);
            if (!tab)
                break;
            p = tab + 1;
        }
        close_group(d);
    }
    return 0;
}

void tfm_taskdata_free(tfm_taskdata *d)
{
    free(d->item);
    free(d->word);
    free(d->value);
    free(d->line);
    free(d->group);
    free(d->group_line);
    free(d->text);
    memset(d, 0, sizeof *d);
}

int tfm_taskdata_same_count(size_t n_pred, size_t n_gold, const char *pname, const char *gname,
                            const char *what, tfm_err *err)
{
    if (n_pred < n_gold)
        return tfm_err_set(err, "%s:%zu: missing: %s has %zu %s, %s only %zu", pname,
                           n_pred + 1, gname, n_gold, what, pname, n_pred);
    if (n_pred > n_gold)
        return tfm_err_set(err, "%s:%zu: one too many: %s has only %zu %s", pname, n_gold + 1,
                           gname, n_gold, what);
    return 0;
}

int tfm_taskdata_same_sentences(const tfm_taskdata *p, const tfm_taskdata *g, const char *pname,
                                const char *gname, tfm_err *err)
{
    for (size_t s = 0; s < g->n_group; s++) {
        size_t lg = g->group[s + 1] - g->group[s], lp = p->group[s + 1] - p->group[s];
        if (lg != lp)
            return tfm_err_set(err, "%s:%ld: sentence %zu has %zu tag%s, but %zu at %s:%ld",
                               pname, p->group_line[s], s + 1, lp, lp == 1 ? "" : "s", lg,
                               gname, g->group_line[s]);
    }
    return 0;
}
