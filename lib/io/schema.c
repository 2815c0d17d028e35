/* The configuration schema engine: see io/schema.h. */
#include "io/schema.h"

#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/opt.h"
#include "io/json.h"

#define I64 9.2e18

size_t tfm_schema_join(tfm_schema_key *dst, size_t cap, const tfm_schema_part *parts,
                       size_t n_parts)
{
    size_t n = 0;
    for (size_t p = 0; p < n_parts; p++)
        for (size_t i = 0; i < parts[p].n; i++) {
            TFM_ASSERT(n < cap);
            dst[n] = parts[p].keys[i];
            dst[n++].offset += parts[p].base;
        }
    return n;
}

const tfm_schema_key *tfm_schema_find(const tfm_schema *s, const char *path)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->keys[i].path, path) == 0)
            return &s->keys[i];
    return NULL;
}

/* Index of s in "a|b|c", or -1. */
static int choice_index(const char *choices, const char *s, size_t len)
{
    int idx = 0;
    const char *p = choices;
    for (;;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && memcmp(p, s, n) == 0)
            return idx;
        if (!bar)
            return -1;
        p = bar + 1;
        idx++;
    }
}

static const char *choice_at(const char *choices, int idx, char *buf, size_t size)
{
    const char *p = choices;
    for (int i = 0; i < idx; i++) {
        p = strchr(p, '|');
        if (!p)
            return NULL;
        p++;
    }
    const char *bar = strchr(p, '|');
    size_t n = bar ? (size_t)(bar - p) : strlen(p);
    if (n >= size)
        n = size - 1;
    memcpy(buf, p, n);
    buf[n] = 0;
    return buf;
}

const char *tfm_schema_choice_name(const tfm_schema *s, const char *path, int value, char *buf,
                                   size_t size)
{
    const tfm_schema_key *k = tfm_schema_find(s, path);
    if (!k || k->type != TFM_SCHEMA_ENUM)
        return NULL;
    return choice_at(k->choices, value, buf, size);
}

static const char *type_name(const tfm_schema_key *k)
{
    switch (k->type) {
    case TFM_SCHEMA_INT: return "an integer";
    case TFM_SCHEMA_FLOAT: return "a number";
    case TFM_SCHEMA_BOOL: return "true or false";
    case TFM_SCHEMA_STRING: return "a string";
    case TFM_SCHEMA_ENUM: return "one of";
    }
    return "?";
}

/* Parses text as the key's type and stores it.  Returns 0, or -1 with a
 * message (without location: the caller adds where the text came from). */
static int store_value(void *c, const tfm_schema_key *k, const char *text,
                       int is_string, tfm_err *err);

static int store(const tfm_schema *s, void *c, const tfm_schema_key *k, const char *text,
                 int is_string, tfm_err *err)
{
    if (store_value(c, k, text, is_string, err) < 0)
        return -1;
    ((unsigned char *)c + s->given_offset)[k - s->keys] = 1;
    return 0;
}

static int store_value(void *c, const tfm_schema_key *k, const char *text,
                       int is_string, tfm_err *err)
{
    char *field = (char *)c + k->offset;
    switch (k->type) {
    case TFM_SCHEMA_INT: {
        char *end;
        errno = 0;
        long long v = is_string ? 0 : strtoll(text, &end, 10);
        if (is_string || errno || !*text || *end) {
            /* Accept integral numbers written as 1e3 or 1000.0. */
            double d;
            if (is_string || tfm_parse_double(text, -I64, I64, &d) < 0 || d != floor(d))
                return tfm_err_set(err, "'%s' must be an integer, got '%s'", k->path, text);
            v = (long long)d;
        }
        if ((double)v < k->min || (double)v > k->max)
            return tfm_err_set(err, "'%s' must be in [%.0f, %.0f], got %lld", k->path, k->min,
                               k->max, v);
        *(int64_t *)field = v;
        return 0;
    }
    case TFM_SCHEMA_FLOAT: {
        double d;
        if (is_string || tfm_parse_double(text, -INFINITY, INFINITY, &d) < 0)
            return tfm_err_set(err, "'%s' must be a number, got '%s'", k->path, text);
        if (d < k->min || d > k->max)
            return tfm_err_set(err, "'%s' must be in [%g, %g], got %s", k->path, k->min,
                               k->max, text);
        *(double *)field = d;
        return 0;
    }
    case TFM_SCHEMA_BOOL: {
        int b;
        if (!is_string && (!strcmp(text, "true") || !strcmp(text, "True") || !strcmp(text, "1")))
            b = 1;
        else if (!is_string &&
                 (!strcmp(text, "false") || !strcmp(text, "False") || !strcmp(text, "0")))
            b = 0;
        else
            return tfm_err_set(err, "'%s' must be true or false, got '%s'", k->path, text);
        *(int *)field = b;
        return 0;
    }
    case TFM_SCHEMA_STRING: {
        size_t n = strlen(text);
        if (n >= TFM_SCHEMA_STRING_MAX)
            return tfm_err_set(err, "'%s' is too long (%zu bytes, at most %d)", k->path, n,
                               TFM_SCHEMA_STRING_MAX - 1);
        memcpy(field, text, n + 1);
        return 0;
    }
    case TFM_SCHEMA_ENUM: {
        int idx = choice_index(k->choices, text, strlen(text));
        if (idx < 0)
            return tfm_err_set(err, "'%s' must be one of %s, got '%s'", k->path, k->choices,
                               text);
        *(int *)field = idx;
        return 0;
    }
    }
    return tfm_err_set(err, "internal: bad key type");
}

void tfm_schema_defaults(const tfm_schema *s, void *c)
{
    memset(c, 0, s->size);
    for (size_t i = 0; i < s->n; i++) {
        tfm_err err = {0};
        int rc = store_value(c, &s->keys[i], s->keys[i].def, 0, &err);
        TFM_ASSERT(rc == 0);
    }
}

int tfm_schema_given(const tfm_schema *s, const void *c, const char *path)
{
    const tfm_schema_key *k = tfm_schema_find(s, path);
    TFM_ASSERT(k);
    return ((const unsigned char *)c + s->given_offset)[k - s->keys];
}

const char *tfm_schema_suggest(const tfm_schema *s, const char *path)
{
    /* Compare both the full path and the last component, so that a key put in
     * the wrong section ("train.lr") and a typo ("optim.lerning_rate") both
     * find their match. */
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    const char *dot = strrchr(path, '.');
    const char *leaf = dot ? dot + 1 : path;
    for (size_t i = 0; i < s->n; i++) {
        const char *kleaf = strrchr(s->keys[i].path, '.') + 1;
        size_t d1 = tfm_edit_distance(path, s->keys[i].path);
        size_t d2 = tfm_edit_distance(leaf, kleaf);
        /* A matching leaf in another section is a strong hint. */
        size_t d = d1 < d2 + 1 ? d1 : d2 + 1;
        if (d < best_d) {
            best_d = d;
            best = s->keys[i].path;
        }
    }
    /* Long names people type for the short keys. */
    for (size_t i = 0; i < s->n_aliases; i++) {
        size_t d = tfm_edit_distance(leaf, s->aliases[i].name);
        if (d < best_d) {
            best_d = d;
            best = s->aliases[i].key;
        }
    }
    size_t len = strlen(leaf);
    size_t limit = len / 3 > 2 ? len / 3 : 2;
    if (best_d > limit)
        return NULL;
    return best;
}

static int unknown_key(const tfm_schema *s, tfm_err *err, const char *name, long line, long col,
                       const char *shown, const char *full)
{
    const char *hint = tfm_schema_suggest(s, full);
    if (hint)
        return tfm_err_at(err, name, line, col, "unknown key '%s' (did you mean '%s'?)", shown,
                          hint);
    return tfm_err_at(err, name, line, col, "unknown key '%s'", shown);
}

static int is_section(const tfm_schema *s, const char *name, size_t n)
{
    for (size_t i = 0; i < s->n; i++) {
        const char *dot = strchr(s->keys[i].path, '.');
        if ((size_t)(dot - s->keys[i].path) == n && memcmp(s->keys[i].path, name, n) == 0)
            return 1;
    }
    return 0;
}

static int apply_value(const tfm_schema *s, void *c, const tfm_schema_key *k,
                       const tfm_json_doc *doc, const tfm_json *v, tfm_err *err)
{
    const char *name = doc->name;
    tfm_err e = {0};
    switch (v->type) {
    case TFM_JSON_NULL:
        if (k->type == TFM_SCHEMA_STRING)
            return store(s, c, k, "", 1, &e) < 0
                       ? tfm_err_at(err, name, v->line, v->col, "%s", e.msg)
                       : 0;
        return tfm_err_at(err, name, v->line, v->col, "'%s' must be %s%s%s, got null", k->path,
                          type_name(k), k->choices ? " " : "", k->choices ? k->choices : "");
    case TFM_JSON_ARRAY:
        if (k->type == TFM_SCHEMA_STRING) { /* a list of words: "a, b" */
            char joined[TFM_SCHEMA_STRING_MAX] = "";
            size_t at = 0;
            for (size_t i = 0; i < v->n; i++) {
                const tfm_json *it = v->items[i];
                if (it->type != TFM_JSON_STRING)
                    return tfm_err_at(err, name, it->line, it->col,
                                      "'%s' must be a list of words", k->path);
                int w = snprintf(joined + at, sizeof joined - at, "%s%.*s", i ? ", " : "",
                                 (int)it->len, it->str);
                if (w < 0 || (size_t)w >= sizeof joined - at)
                    return tfm_err_at(err, name, v->line, v->col, "'%s' is too long", k->path);
                at += (size_t)w;
            }
            return store(s, c, k, joined, 0, &e) < 0
                       ? tfm_err_at(err, name, v->line, v->col, "%s", e.msg)
                       : 0;
        }
        /* fall through */
    case TFM_JSON_OBJECT:
        return tfm_err_at(err, name, v->line, v->col, "'%s' must be %s%s%s, got %s", k->path,
                          type_name(k), k->choices ? " " : "", k->choices ? k->choices : "",
                          v->type == TFM_JSON_ARRAY ? "a list" : "a mapping");
    case TFM_JSON_STRING:
        if (memchr(v->str, 0, v->len))
            return tfm_err_at(err, name, v->line, v->col, "'%s' contains a NUL byte", k->path);
        /* A quoted "4" is still a string: numbers must be written as numbers,
         * except that strings and enums take any text. */
        if (store(s, c, k, v->str, k->type == TFM_SCHEMA_INT || k->type == TFM_SCHEMA_FLOAT ||
                                    k->type == TFM_SCHEMA_BOOL, &e) < 0)
            return tfm_err_at(err, name, v->line, v->col, "%s", e.msg);
        return 0;
    case TFM_JSON_NUMBER:
    case TFM_JSON_BOOL:
        if (k->type == TFM_SCHEMA_STRING || k->type == TFM_SCHEMA_ENUM) {
            /* A file name like 2024 is fine; an enum given a number is not. */
            if (k->type == TFM_SCHEMA_ENUM || v->type == TFM_JSON_BOOL)
                return tfm_err_at(err, name, v->line, v->col, "'%s' must be %s%s%s, got %s",
                                  k->path, type_name(k), k->choices ? " " : "",
                                  k->choices ? k->choices : "", v->str);
        }
        if (k->type == TFM_SCHEMA_BOOL && v->type != TFM_JSON_BOOL)
            return tfm_err_at(err, name, v->line, v->col, "'%s' must be true or false, got %s",
                              k->path, v->str);
        if ((k->type == TFM_SCHEMA_INT || k->type == TFM_SCHEMA_FLOAT) &&
            v->type != TFM_JSON_NUMBER)
            return tfm_err_at(err, name, v->line, v->col, "'%s' must be %s, got %s", k->path,
                              type_name(k), v->str);
        if (store(s, c, k, v->str, 0, &e) < 0)
            return tfm_err_at(err, name, v->line, v->col, "%s", e.msg);
        return 0;
    }
    return 0;
}

/* The keys of mapping sv under prefix ("train"); a key that is a prefix of
 * keys itself ("train.lora") may hold a mapping of them. */
static int apply_mapping(const tfm_schema *s, void *c, const tfm_json_doc *doc, const char *prefix,
                         const tfm_json *sv, tfm_err *err)
{
    const char *name = doc->name;
    for (size_t j = 0; j < sv->n; j++) {
        const tfm_json *kk = sv->keys[j], *kv = sv->items[j];
        char full[256];
        snprintf(full, sizeof full, "%s.%.*s", prefix, (int)kk->len, kk->str);
        for (size_t p = 0; p < j; p++)
            if (sv->keys[p]->len == kk->len && !memcmp(sv->keys[p]->str, kk->str, kk->len))
                return tfm_err_at(err, name, kk->line, kk->col, "duplicate key '%s'", full);
        const tfm_schema_key *k = tfm_schema_find(s, full);
        if (!k && kv->type == TFM_JSON_OBJECT) {
            size_t n = strlen(full);
            for (size_t i = 0; i < s->n; i++)
                if (!strncmp(s->keys[i].path, full, n) && s->keys[i].path[n] == '.')
                    k = &s->keys[i];
            if (k) {
                if (apply_mapping(s, c, doc, full, kv, err) < 0)
                    return -1;
                continue;
            }
        }
        if (!k && s->skip_unknown)
            continue;
        if (!k) {
            char shown[128];
            snprintf(shown, sizeof shown, "%.*s", (int)kk->len, kk->str);
            return unknown_key(s, err, name, kk->line, kk->col, shown, full);
        }
        if (apply_value(s, c, k, doc, kv, err) < 0)
            return -1;
    }
    return 0;
}

/* Only blanks and comments: a valid configuration that sets nothing. */
static int yaml_is_empty(const char *text, size_t len)
{
    int comment = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = text[i];
        if (ch == '\n')
            comment = 0;
        else if (ch == '#')
            comment = 1;
        else if (!comment && !isspace((unsigned char)ch))
            return 0;
    }
    return 1;
}

int tfm_schema_apply_yaml(const tfm_schema *s, void *c, const char *text, size_t len,
                          const char *name, tfm_err *err)
{
    if (yaml_is_empty(text, len))
        return 0;
    tfm_json_doc doc;
    if (tfm_json_parse(&doc, text, len, name, 1, err) < 0)
        return -1;
    int rc = -1;
    const tfm_json *root = doc.root;
    if (!root || root->type == TFM_JSON_NULL) { /* an empty file sets nothing */
        rc = 0;
        goto out;
    }
    if (root->type != TFM_JSON_OBJECT) {
        tfm_err_at(err, name, root->line, root->col,
                   "the configuration must be a mapping of sections (model:, data:, ...)");
        goto out;
    }
    for (size_t i = 0; i < root->n; i++) {
        const tfm_json *sk = root->keys[i], *sv = root->items[i];
        if (!is_section(s, sk->str, sk->len)) {
            if (s->skip_unknown)
                continue;
            if (sv->type != TFM_JSON_OBJECT) {
                /* "lr: 0.1" at the top: suggest the sectioned key. */
                char full[256];
                snprintf(full, sizeof full, "%.*s", (int)sk->len, sk->str);
                unknown_key(s, err, name, sk->line, sk->col, full, full);
            } else {
                tfm_err_at(err, name, sk->line, sk->col,
                           "unknown section '%.*s' (expected %s)", (int)sk->len, sk->str,
                           s->sections);
            }
            goto out;
        }
        if (sv->type == TFM_JSON_NULL)
            continue;
        if (sv->type != TFM_JSON_OBJECT) {
            tfm_err_at(err, name, sv->line, sv->col, "section '%.*s' must be a mapping",
                       (int)sk->len, sk->str);
            goto out;
        }
        char sect[128];
        snprintf(sect, sizeof sect, "%.*s", (int)sk->len, sk->str);
        if (apply_mapping(s, c, &doc, sect, sv, err) < 0)
            goto out;
    }
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

int tfm_schema_load_yaml(const tfm_schema *s, void *c, const char *path, tfm_err *err)
{
    tfm_buf b = {0};
    FILE *fp = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!fp)
        return tfm_err_errno(err, "%s", path);
    int rc = tfm_read_all(fp, path, &b, err);
    if (fp != stdin)
        fclose(fp);
    if (rc == 0)
        rc = tfm_schema_apply_yaml(s, c, b.data ? b.data : "", b.len, path, err);
    tfm_buf_free(&b);
    return rc;
}

int tfm_schema_set(const tfm_schema *s, void *c, const char *assignment, tfm_err *err)
{
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return tfm_err_set(err, "--set '%s': expected key=value (e.g. optim.lr=3e-4)",
                           assignment);
    char path[256];
    size_t n = (size_t)(eq - assignment);
    if (n >= sizeof path)
        n = sizeof path - 1;
    memcpy(path, assignment, n);
    path[n] = 0;
    const tfm_schema_key *k = tfm_schema_find(s, path);
    if (!k) {
        const char *hint = tfm_schema_suggest(s, path);
        if (hint)
            return tfm_err_set(err, "--set: unknown key '%s' (did you mean '%s'?)", path,
                               hint);
        return tfm_err_set(err, "--set: unknown key '%s'", path);
    }
    if (store(s, c, k, eq + 1, 0, err) < 0)
        return tfm_err_prefix(err, "--set");
    return 0;
}

/* Shortest decimal that reads back to the same double. */
static void put_double(tfm_buf *out, double d)
{
    char s[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(s, sizeof s, "%.*g", prec, d);
        if (strtod(s, NULL) == d)
            break;
    }
    /* YAML 1.2 core schema: "1e-05" is a float, but "1" would read as an int,
     * which is fine for a float key. */
    tfm_buf_puts(out, s);
}

static int needs_quotes(const char *s)
{
    if (!*s)
        return 1;
    static const char special[] = ":#{}[],&*!|>'\"%@`";
    if (strchr("-?~ ", s[0]) || isspace((unsigned char)s[strlen(s) - 1]))
        return 1;
    for (const char *p = s; *p; p++)
        if (strchr(special, *p) || (unsigned char)*p < 0x20)
            return 1;
    /* Would be typed as something else. */
    double d;
    if (tfm_parse_double(s, -INFINITY, INFINITY, &d) == 0)
        return 1;
    static const char *words[] = {"true", "false", "null", "True", "False", "Null", "TRUE",
                                  "FALSE", "NULL", "yes", "no", "on", "off"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (!strcmp(s, words[i]))
            return 1;
    return 0;
}

void tfm_schema_dump(const tfm_schema *s, const void *c, int comments, tfm_buf *out)
{
    const char *section = "";
    size_t section_len = 0;
    for (size_t i = 0; i < s->n; i++) {
        const tfm_schema_key *k = &s->keys[i];
        const char *dot = strchr(k->path, '.');
        size_t sl = (size_t)(dot - k->path);
        if (sl != section_len || memcmp(section, k->path, sl)) {
            tfm_buf_printf(out, "%.*s:\n", (int)sl, k->path);
            section = k->path;
            section_len = sl;
        }
        size_t start = out->len;
        tfm_buf_printf(out, "  %s: ", dot + 1);
        const char *field = (const char *)c + k->offset;
        char tmp[64];
        switch (k->type) {
        case TFM_SCHEMA_INT:
            tfm_buf_printf(out, "%lld", (long long)*(const int64_t *)field);
            break;
        case TFM_SCHEMA_FLOAT:
            put_double(out, *(const double *)field);
            break;
        case TFM_SCHEMA_BOOL:
            tfm_buf_puts(out, *(const int *)field ? "true" : "false");
            break;
        case TFM_SCHEMA_STRING:
            if (needs_quotes(field))
                tfm_buf_put_json_string(out, field, strlen(field));
            else
                tfm_buf_puts(out, field);
            break;
        case TFM_SCHEMA_ENUM:
            tfm_buf_puts(out, choice_at(k->choices, *(const int *)field, tmp, sizeof tmp));
            break;
        }
        if (comments) {
            size_t w = out->len - start;
            for (; w < 28; w++)
                tfm_buf_putc(out, ' ');
            tfm_buf_printf(out, " # %s", k->doc);
        }
        tfm_buf_putc(out, '\n');
    }
}
