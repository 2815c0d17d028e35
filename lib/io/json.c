/* JSON and YAML documents through libyaml's event parser.
 *
 * JSON is flow-style YAML, but libyaml is not a JSON parser, and in JSON mode
 * a pre-pass over the text (json_scan) bridges the differences before libyaml
 * sees it:
 *   - YAML has no surrogate pairs: libyaml rejects "\ud83d\ude00", which
 *     ensure_ascii writers (Python's json, GPT-2's encoder.json) emit.
 *   - libyaml forgets a flow-mapping key once it is more than 1024 characters
 *     long (the YAML "implicit key" limit), so a long vocabulary entry fails.
 *   - libyaml's reader rejects characters JSON allows raw in strings (DEL,
 *     C1 controls, U+FFFE/U+FFFF) and treats NEL/U+2028/U+2029 as line
 *     breaks inside quoted scalars.
 *   - libyaml drops a key whose ':' is on a later line.
 *   - libyaml accepts YAML-only escapes (\x41, \e, \N, ...), comments,
 *     trailing commas and single-quoted strings, which JSON does not.
 * The pre-pass validates the lexical layer itself (escapes, UTF-8, control
 * characters, the characters allowed between tokens, trailing commas, ':'
 * inside arrays) and replaces each troublesome string literal by "" in a
 * copy of the text; the string is then decoded here from the original bytes
 * when libyaml reports the placeholder.  The edits are recorded so that
 * libyaml's positions are mapped back to the original line:column.
 * Most files need no edit and are parsed in place.
 *
 * Columns count characters (as libyaml does), not bytes. */
#include "io/json.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include <yaml.h>

#include "base/file.h"

/* Strings longer than this (in characters, quotes included) are decoded here
 * rather than by libyaml, safely below its 1024-character key limit. */
#define LONG_STRING 512
/* Nesting limit: consumers walk trees recursively. */
#define MAX_DEPTH 1000

/* ---- arena ---------------------------------------------------------- */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    max_align_t data[];
} chunk;

typedef struct arena {
    chunk *head;
} arena;

static void *arena_alloc(arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = 1 << 16;
        if (n > cap / 4) {
            /* Big blocks get their own chunk behind the current one, so the
             * current chunk's free space is not wasted. */
            chunk *big = tfm_malloc(sizeof *big + n);
            big->used = n;
            big->cap = n;
            if (c) {
                big->next = c->next;
                c->next = big;
            } else {
                big->next = NULL;
                a->head = big;
            }
            return big->data;
        }
        c = tfm_malloc(sizeof *c + cap);
        c->used = 0;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    return p;
}

static void arena_free(arena *a)
{
    chunk *c = a->head;
    while (c) {
        chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}

static char *arena_strndup(arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---- JSON pre-pass -------------------------------------------------- */

typedef struct edit {
    size_t new_index;  /* character index in the edited text where it starts */
    size_t line;       /* 0-based line (edits never add or remove lines) */
    long col_delta;    /* original - edited columns, summed over this line's
                          edits up to and including this one */
    size_t orig_off;   /* byte offset of the original string literal */
    size_t orig_len;   /* its length in bytes; 0 for a moved ':' */
} edit;

typedef struct scan {
    const char *name;
    const char *text; /* original */
    size_t len;
    tfm_buf out;      /* edited copy, only once the first edit is made */
    size_t copied;    /* bytes of text already copied to out */
    size_t delta;     /* edited index - original index (characters) */
    edit *edits;
    size_t n_edits, cap_edits;
} scan;

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static int hex4(const unsigned char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(p[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Length of the valid UTF-8 sequence at s (and its code point), 0 if invalid. */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2; v = c & 0x1f; min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3; v = c & 0x0f; min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4; v = c & 0x07; min = 0x10000;
    } else {
        return 0;
    }
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

static size_t utf8_encode(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Records an edit replacing text[off, off+orig_len) (orig_chars characters at
 * original character index idx, on `line`) by `repl`. */
static void scan_edit(scan *s, size_t off, size_t orig_len, size_t orig_chars,
                      size_t idx, size_t line, const char *repl, size_t repl_len,
                      int is_string)
{
    tfm_buf_append(&s->out, s->text + s->copied, off - s->copied);
    tfm_buf_append(&s->out, repl, repl_len);
    s->copied = off + orig_len;
    if (s->n_edits == s->cap_edits) {
        s->cap_edits = s->cap_edits ? 2 * s->cap_edits : 64;
        s->edits = tfm_realloc(s->edits, s->cap_edits * sizeof *s->edits);
    }
    edit *e = &s->edits[s->n_edits++];
    e->new_index = idx + s->delta;
    e->line = line;
    long d = (long)orig_chars - (long)repl_len; /* repl is ASCII */
    if (s->n_edits > 1 && e[-1].line == line)
        d += e[-1].col_delta;
    e->col_delta = d;
    e->orig_off = is_string ? off : 0;
    e->orig_len = is_string ? orig_len : 0;
    s->delta += repl_len;
    s->delta -= orig_chars;
}

/* Decodes the (pre-validated) JSON string literal text[off, off+n) into the
 * arena. */
static char *decode_string(arena *a, const char *text, size_t off, size_t n,
                           size_t *out_len)
{
    const unsigned char *p = (const unsigned char *)text + off + 1;
    const unsigned char *end = (const unsigned char *)text + off + n - 1;
    char *out = arena_alloc(a, n + 1); /* decoding never grows the text */
    size_t k = 0;
    while (p < end) {
        if (*p != '\\') {
            out[k++] = (char)*p++;
            continue;
        }
        char e = (char)p[1];
        p += 2;
        switch (e) {
        case 'b': out[k++] = '\b'; break;
        case 'f': out[k++] = '\f'; break;
        case 'n': out[k++] = '\n'; break;
        case 'r': out[k++] = '\r'; break;
        case 't': out[k++] = '\t'; break;
        case 'u': {
            uint32_t cp = (uint32_t)hex4(p);
            p += 4;
            if (cp >= 0xd800 && cp <= 0xdbff) {
                uint32_t lo = (uint32_t)hex4(p + 2);
                p += 6;
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            k += utf8_encode(out + k, cp);
            break;
        }
        default: out[k++] = e; break; /* " \ / */
        }
    }
    out[k] = 0;
    *out_len = k;
    return out;
}

static int scan_fail(scan *s, size_t line, size_t col, tfm_err *err,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int scan_fail(scan *s, size_t line, size_t col, tfm_err *err,
                     const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tfm_err_at(err, s->name, (long)line + 1, (long)col + 1, "%s", msg);
}

static int is_literal_char(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
           (c >= 'A' && c <= 'Z') || c == '+' || c == '-' || c == '.';
}

static int json_scan(scan *s, tfm_err *err)
{
    const unsigned char *t = (const unsigned char *)s->text;
    size_t n = s->len;
    size_t line = 0, col = 0, idx = 0;
    char *stack = NULL;
    size_t depth = 0, cap = 0;
    int prev = 0; /* previous structural character, for trailing commas */
    int rc = -1;
    size_t i = 0;
    while (i < n) {
        unsigned char c = t[i];
        if (c == '\n' || c == '\r') {
            size_t w = (c == '\r' && i + 1 < n && t[i + 1] == '\n') ? 2 : 1;
            i += w;
            idx += w;
            line++;
            col = 0;
            continue;
        }
        if (c == ' ' || c == '\t') {
            /* outside brackets libyaml is in block context, where a tab
             * cannot start a line: make it a space (same width) */
            if (c == '\t' && depth == 0)
                scan_edit(s, i, 1, 1, idx, line, " ", 1, 0);
            i++; idx++; col++;
            continue;
        }
        if (c == '"') {
            size_t start = i, scol = col, sidx = idx;
            size_t j = i + 1, chars = 1;
            int needs = 0;
            for (;;) {
                if (j >= n) {
                    scan_fail(s, line, scol, err, "unterminated string");
                    goto out;
                }
                unsigned char b = t[j];
                if (b == '"')
                    break;
                if (b == '\\') {
                    if (j + 1 >= n) {
                        scan_fail(s, line, scol, err, "unterminated string");
                        goto out;
                    }
                    unsigned char e = t[j + 1];
                    if (e == 'u') {
                        int v = j + 5 < n ? hex4(t + j + 2) : -1;
                        if (v < 0) {
                            scan_fail(s, line, col + chars, err,
                                      "bad \\u escape (4 hex digits expected)");
                            goto out;
                        }
                        if (v >= 0xdc00 && v <= 0xdfff) {
                            scan_fail(s, line, col + chars, err,
                                      "unpaired low surrogate \\u%04x", v);
                            goto out;
                        }
                        if (v >= 0xd800 && v <= 0xdbff) {
                            int lo = (j + 11 < n && t[j + 6] == '\\' && t[j + 7] == 'u')
                                         ? hex4(t + j + 8) : -1;
                            if (lo < 0xdc00 || lo > 0xdfff) {
                                scan_fail(s, line, col + chars, err,
                                          "unpaired high surrogate \\u%04x", v);
                                goto out;
                            }
                            needs = 1;
                            j += 12;
                            chars += 12;
                        } else {
                            j += 6;
                            chars += 6;
                        }
                        continue;
                    }
                    if (!strchr("\"\\/bfnrt", e) || e == 0) {
                        if (e >= 0x20 && e < 0x7f)
                            scan_fail(s, line, col + chars, err,
                                      "bad escape '\\%c' in string", e);
                        else
                            scan_fail(s, line, col + chars, err, "bad escape in string");
                        goto out;
                    }
                    j += 2;
                    chars += 2;
                    continue;
                }
                if (b < 0x20) {
                    scan_fail(s, line, col + chars, err,
                              b == '\n' ? "unterminated string (newline inside)"
                                        : "control character 0x%02x in string (must be escaped)",
                              b);
                    goto out;
                }
                if (b < 0x7f) {
                    j++;
                    chars++;
                    continue;
                }
                uint32_t cp = b;
                size_t w = b == 0x7f ? 1 : utf8_decode(t + j, n - j, &cp);
                if (w == 0) {
                    scan_fail(s, line, col + chars, err, "invalid UTF-8 in string");
                    goto out;
                }
                if (cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 ||
                    cp == 0x2029 || cp == 0xfeff || cp == 0xfffe || cp == 0xffff)
                    needs = 1;
                j += w;
                chars++;
            }
            j++; /* closing quote */
            chars++;
            if (chars > LONG_STRING)
                needs = 1;
            if (needs)
                scan_edit(s, start, j - start, chars, sidx, line, "\"\"", 2, 1);
            i = j;
            idx += chars;
            col += chars;
            prev = '"';
            /* libyaml forgets a key whose ':' is on a later line (or far
             * away): move the ':' up behind the key and blank it where it
             * was, which keeps every line as it was. */
            size_t k = i;
            int newline = 0;
            while (k < n && (t[k] == ' ' || t[k] == '\t' || t[k] == '\n' || t[k] == '\r')) {
                if (t[k] == '\n' || t[k] == '\r')
                    newline = 1;
                k++;
            }
            if ((newline || k - i > 256) && k < n && t[k] == ':' && depth > 0 &&
                stack[depth - 1] == '{') {
                scan_edit(s, i, 0, 0, idx, line, ":", 1, 0);
                size_t kidx = idx + (k - i), kline = line; /* whitespace is ASCII */
                for (size_t q = i; q < k; q++)
                    if (t[q] == '\n' || (t[q] == '\r' && !(q + 1 < k && t[q + 1] == '\n')))
                        kline++;
                scan_edit(s, k, 1, 1, kidx, kline, " ", 1, 0);
            }
            continue;
        }
        switch (c) {
        case '{':
        case '[':
            if (depth == MAX_DEPTH) {
                scan_fail(s, line, col, err, "nesting deeper than %d levels", MAX_DEPTH);
                goto out;
            }
            if (depth == cap) {
                cap = cap ? 2 * cap : 64;
                stack = tfm_realloc(stack, cap);
            }
            stack[depth++] = (char)c;
            break;
        case '}':
        case ']':
            if (prev == ',') {
                scan_fail(s, line, col, err, "trailing comma before '%c'", c);
                goto out;
            }
            if (depth == 0 || stack[depth - 1] != (c == '}' ? '{' : '[')) {
                scan_fail(s, line, col, err, "unexpected '%c'", c);
                goto out;
            }
            depth--;
            break;
        case ':':
            if (depth > 0 && stack[depth - 1] == '[') {
                scan_fail(s, line, col, err, "unexpected ':' in an array");
                goto out;
            }
            break;
        case ',':
            if (prev == ',' || prev == '[' || prev == '{') {
                scan_fail(s, line, col, err, "unexpected ','");
                goto out;
            }
            break;
        default:
            if (!is_literal_char(c)) {
                if (c >= 0x20 && c < 0x7f)
                    scan_fail(s, line, col, err, "unexpected character '%c'%s", c,
                              c == '#' ? " (JSON has no comments)"
                              : c == '\'' ? " (JSON strings use double quotes)" : "");
                else
                    scan_fail(s, line, col, err, "unexpected byte 0x%02x", c);
                goto out;
            }
        }
        prev = c;
        i++; idx++; col++;
    }
    rc = 0;
    if (s->n_edits)
        tfm_buf_append(&s->out, s->text + s->copied, n - s->copied);
out:
    free(stack);
    return rc;
}

/* ---- tree building from events -------------------------------------- */

typedef struct frame {
    tfm_json *node;
    size_t base; /* first child in the child stack */
} frame;

typedef struct anchor {
    char *name;
    tfm_json *node;
} anchor;

typedef struct builder {
    tfm_json_doc *doc;
    arena *a;
    int yaml;
    const char *text; /* original text */
    scan *sc;          /* JSON mode edits (may have none) */
    size_t next_edit;  /* cursor over edits, in document order */
    tfm_json **kids;
    size_t n_kids, cap_kids;
    frame *frames;
    size_t depth, cap_frames;
    anchor *anchors;
    size_t n_anchors;
    uint32_t *hash;    /* duplicate-key table scratch */
    size_t hash_cap;
} builder;

/* Maps a libyaml mark to the original 1-based line and column. */
static void mark_pos(const builder *b, yaml_mark_t m, long *line, long *col)
{
    *line = (long)m.line + 1;
    *col = (long)m.column + 1;
    const scan *s = b->sc;
    if (!s || !s->n_edits)
        return;
    /* last edit starting before the mark */
    size_t lo = 0, hi = s->n_edits;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->edits[mid].new_index < m.index)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0 && s->edits[lo - 1].line == m.line)
        *col += s->edits[lo - 1].col_delta;
}

static int fail_at(builder *b, yaml_mark_t m, tfm_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(builder *b, yaml_mark_t m, tfm_err *err, const char *fmt, ...)
{
    long line, col;
    mark_pos(b, m, &line, &col);
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tfm_err_at(err, b->doc->name, line, col, "%s", msg);
}

static tfm_json *new_node(builder *b, tfm_json_type type, yaml_mark_t m)
{
    tfm_json *j = arena_alloc(b->a, sizeof *j);
    memset(j, 0, sizeof *j);
    j->type = type;
    mark_pos(b, m, &j->line, &j->col);
    return j;
}

static void push_kid(builder *b, tfm_json *j)
{
    if (b->n_kids == b->cap_kids) {
        b->cap_kids = b->cap_kids ? 2 * b->cap_kids : 256;
        b->kids = tfm_realloc(b->kids, b->cap_kids * sizeof *b->kids);
    }
    b->kids[b->n_kids++] = j;
}

/* JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int is_json_number(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && s[i] == '-')
        i++;
    if (i >= n)
        return 0;
    if (s[i] == '0') {
        i++;
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
    } else {
        return 0;
    }
    if (i < n && s[i] == '.') {
        i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return 0;
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return 0;
    }
    return i == n;
}

static int all_in(const char *s, size_t n, const char *set)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(set, s[i]) || s[i] == 0)
            return 0;
    return n > 0;
}

/* YAML 1.2 core schema: the type a plain scalar resolves to. */
static tfm_json_type yaml_plain_type(const char *s, size_t n, double *num, int *boolean)
{
    if (n == 0 || (n == 1 && s[0] == '~') ||
        (n == 4 && (!memcmp(s, "null", 4) || !memcmp(s, "Null", 4) || !memcmp(s, "NULL", 4))))
        return TFM_JSON_NULL;
    if (n == 4 && (!memcmp(s, "true", 4) || !memcmp(s, "True", 4) || !memcmp(s, "TRUE", 4))) {
        *boolean = 1;
        return TFM_JSON_BOOL;
    }
    if (n == 5 && (!memcmp(s, "false", 5) || !memcmp(s, "False", 5) || !memcmp(s, "FALSE", 5))) {
        *boolean = 0;
        return TFM_JSON_BOOL;
    }
    if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
        int hex = s[1] == 'x';
        if (!all_in(s + 2, n - 2, hex ? "0123456789abcdefABCDEF" : "01234567"))
            return TFM_JSON_STRING;
        *num = (double)strtoull(s + 2, NULL, hex ? 16 : 8);
        return TFM_JSON_NUMBER;
    }
    size_t i = 0;
    if (s[i] == '+' || s[i] == '-')
        i++;
    if (n - i == 4 && s[i] == '.' &&
        (!memcmp(s + i, ".inf", 4) || !memcmp(s + i, ".Inf", 4) || !memcmp(s + i, ".INF", 4))) {
        *num = s[0] == '-' ? -INFINITY : INFINITY;
        return TFM_JSON_NUMBER;
    }
    if (n == 4 && (!memcmp(s, ".nan", 4) || !memcmp(s, ".NaN", 4) || !memcmp(s, ".NAN", 4))) {
        *num = NAN;
        return TFM_JSON_NUMBER;
    }
    /* [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? */
    size_t digits = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++, digits++;
    if (i < n && s[i] == '.') {
        i++;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++, digits++;
    }
    if (digits == 0)
        return TFM_JSON_STRING;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            i++;
        size_t d = i;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            i++;
        if (i == d)
            return TFM_JSON_STRING;
    }
    if (i != n)
        return TFM_JSON_STRING;
    char tmp[64];
    if (n < sizeof tmp) {
        memcpy(tmp, s, n);
        tmp[n] = 0;
        *num = strtod(tmp, NULL);
    } else {
        char *t = tfm_strndup(s, n);
        *num = strtod(t, NULL);
        free(t);
    }
    return TFM_JSON_NUMBER;
}

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static int same_key(const tfm_json *a, const tfm_json *b)
{
    return a->len == b->len && memcmp(a->str, b->str, a->len) == 0;
}

static int check_duplicates(builder *b, tfm_json *obj, tfm_err *err)
{
    size_t n = obj->n;
    const tfm_json *dup = NULL, *first = NULL;
    if (n <= 16) {
        for (size_t i = 1; i < n && !dup; i++)
            for (size_t j = 0; j < i; j++)
                if (same_key(obj->keys[i], obj->keys[j])) {
                    dup = obj->keys[i];
                    first = obj->keys[j];
                    break;
                }
    } else {
        size_t cap = 64;
        while (cap < 2 * n)
            cap *= 2;
        if (cap > b->hash_cap) {
            free(b->hash);
            b->hash = tfm_malloc(cap * sizeof *b->hash);
            b->hash_cap = cap;
        }
        /* slot holds index + 1; 0 is empty */
        memset(b->hash, 0, cap * sizeof *b->hash);
        for (size_t i = 0; i < n && !dup; i++) {
            const tfm_json *k = obj->keys[i];
            size_t h = hash_bytes(k->str, k->len) & (cap - 1);
            while (b->hash[h]) {
                const tfm_json *o = obj->keys[b->hash[h] - 1];
                if (same_key(k, o)) {
                    dup = k;
                    first = o;
                    break;
                }
                h = (h + 1) & (cap - 1);
            }
            b->hash[h] = (uint32_t)i + 1;
        }
    }
    if (!dup)
        return 0;
    char shown[80];
    size_t m = dup->len < 60 ? dup->len : 60;
    memcpy(shown, dup->str, m);
    shown[m] = 0;
    for (size_t i = 0; i < m; i++)
        if ((unsigned char)shown[i] < 0x20)
            shown[i] = '?';
    return tfm_err_at(err, b->doc->name, dup->line, dup->col,
                      "duplicate key \"%s%s\" (first at line %ld)", shown,
                      dup->len > m ? "..." : "", first->line);
}

/* Hangs a finished node on the open container (or makes it the root). */
static int attach(builder *b, tfm_json *j, yaml_mark_t m, tfm_err *err)
{
    if (b->depth == 0) {
        b->doc->root = j;
        return 0;
    }
    frame *f = &b->frames[b->depth - 1];
    if (f->node->type == TFM_JSON_OBJECT && (b->n_kids - f->base) % 2 == 0 &&
        j->type != TFM_JSON_STRING) {
        if (b->yaml && (j->type == TFM_JSON_NUMBER || j->type == TFM_JSON_BOOL ||
                        j->type == TFM_JSON_NULL)) {
            /* a plain YAML key like `1:` or `true:` is still a name */
            j->type = TFM_JSON_STRING;
        } else {
            return fail_at(b, m, err, "object keys must be strings");
        }
    }
    push_kid(b, j);
    return 0;
}

static int on_scalar(builder *b, yaml_event_t *ev, tfm_err *err)
{
    const char *v = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    yaml_scalar_style_t style = ev->data.scalar.style;
    tfm_json *j;
    if (!b->yaml) {
        if (ev->data.scalar.anchor || ev->data.scalar.tag)
            return fail_at(b, ev->start_mark, err, "YAML anchors and tags are not JSON");
        if (style == YAML_DOUBLE_QUOTED_SCALAR_STYLE) {
            j = new_node(b, TFM_JSON_STRING, ev->start_mark);
            const scan *s = b->sc;
            while (b->next_edit < s->n_edits &&
                   (s->edits[b->next_edit].new_index < ev->start_mark.index ||
                    !s->edits[b->next_edit].orig_len))
                b->next_edit++;
            if (b->next_edit < s->n_edits &&
                s->edits[b->next_edit].new_index == ev->start_mark.index) {
                const edit *e = &s->edits[b->next_edit++];
                j->str = decode_string(b->a, b->text, e->orig_off, e->orig_len, &j->len);
            } else {
                j->str = arena_strndup(b->a, v, n);
                j->len = n;
            }
        } else if (style == YAML_PLAIN_SCALAR_STYLE) {
            if (n == 4 && !memcmp(v, "null", 4)) {
                j = new_node(b, TFM_JSON_NULL, ev->start_mark);
            } else if (n == 4 && !memcmp(v, "true", 4)) {
                j = new_node(b, TFM_JSON_BOOL, ev->start_mark);
                j->boolean = 1;
            } else if (n == 5 && !memcmp(v, "false", 5)) {
                j = new_node(b, TFM_JSON_BOOL, ev->start_mark);
            } else if (is_json_number(v, n)) {
                j = new_node(b, TFM_JSON_NUMBER, ev->start_mark);
                j->num = strtod(v, NULL); /* libyaml NUL-terminates values */
            } else if (n == 0) {
                return fail_at(b, ev->start_mark, err, "expected a value");
            } else {
                return fail_at(b, ev->start_mark, err, "invalid literal '%.*s'",
                               (int)(n < 40 ? n : 40), v);
            }
            j->str = arena_strndup(b->a, v, n);
            j->len = n;
        } else {
            return fail_at(b, ev->start_mark, err,
                           "only double-quoted strings are JSON");
        }
    } else {
        double num = 0;
        int boolean = 0;
        tfm_json_type t = TFM_JSON_STRING;
        const char *tag = (const char *)ev->data.scalar.tag;
        if (style == YAML_PLAIN_SCALAR_STYLE &&
            !(tag && !strcmp(tag, "tag:yaml.org,2002:str")))
            t = yaml_plain_type(v, n, &num, &boolean);
        j = new_node(b, t, ev->start_mark);
        j->num = num;
        j->boolean = boolean;
        j->str = arena_strndup(b->a, v, n);
        j->len = n;
    }
    return attach(b, j, ev->start_mark, err);
}

static int on_start(builder *b, yaml_event_t *ev, tfm_json_type type, tfm_err *err)
{
    const yaml_char_t *anchor_name, *tag;
    int block;
    if (type == TFM_JSON_OBJECT) {
        anchor_name = ev->data.mapping_start.anchor;
        tag = ev->data.mapping_start.tag;
        block = ev->data.mapping_start.style == YAML_BLOCK_MAPPING_STYLE;
    } else {
        anchor_name = ev->data.sequence_start.anchor;
        tag = ev->data.sequence_start.tag;
        block = ev->data.sequence_start.style == YAML_BLOCK_SEQUENCE_STYLE;
    }
    if (!b->yaml) {
        if (anchor_name || tag)
            return fail_at(b, ev->start_mark, err, "YAML anchors and tags are not JSON");
        if (block)
            return fail_at(b, ev->start_mark, err, "YAML block style is not JSON");
    }
    if (b->depth == MAX_DEPTH)
        return fail_at(b, ev->start_mark, err, "nesting deeper than %d levels", MAX_DEPTH);
    tfm_json *j = new_node(b, type, ev->start_mark);
    if (attach(b, j, ev->start_mark, err) < 0)
        return -1;
    if (b->depth == b->cap_frames) {
        b->cap_frames = b->cap_frames ? 2 * b->cap_frames : 32;
        b->frames = tfm_realloc(b->frames, b->cap_frames * sizeof *b->frames);
    }
    b->frames[b->depth++] = (frame){j, b->n_kids};
    if (anchor_name) {
        b->anchors = tfm_realloc(b->anchors, (b->n_anchors + 1) * sizeof *b->anchors);
        b->anchors[b->n_anchors++] = (anchor){tfm_strdup((const char *)anchor_name), j};
    }
    return 0;
}

static int on_end(builder *b, tfm_err *err)
{
    frame *f = &b->frames[--b->depth];
    tfm_json *j = f->node;
    size_t count = b->n_kids - f->base;
    tfm_json **kids = count ? b->kids + f->base : NULL;
    if (j->type == TFM_JSON_ARRAY) {
        j->n = count;
        j->items = arena_alloc(b->a, (count ? count : 1) * sizeof *j->items);
        if (count)
            memcpy(j->items, kids, count * sizeof *kids);
    } else {
        j->n = count / 2;
        j->keys = arena_alloc(b->a, (j->n ? j->n : 1) * sizeof *j->keys);
        j->items = arena_alloc(b->a, (j->n ? j->n : 1) * sizeof *j->items);
        for (size_t i = 0; i < j->n; i++) {
            j->keys[i] = kids[2 * i];
            j->items[i] = kids[2 * i + 1];
        }
    }
    b->n_kids = f->base;
    if (j->type == TFM_JSON_OBJECT && check_duplicates(b, j, err) < 0)
        return -1;
    return 0;
}

static int on_alias(builder *b, yaml_event_t *ev, tfm_err *err)
{
    if (!b->yaml)
        return fail_at(b, ev->start_mark, err, "YAML aliases are not JSON");
    const char *name = (const char *)ev->data.alias.anchor;
    for (size_t i = b->n_anchors; i-- > 0;)
        if (!strcmp(b->anchors[i].name, name))
            return attach(b, b->anchors[i].node, ev->start_mark, err);
    return fail_at(b, ev->start_mark, err, "unknown alias '*%s'", name);
}

static int yaml_failure(builder *b, yaml_parser_t *p, const char *text, size_t len,
                        tfm_err *err)
{
    const char *problem = p->problem ? p->problem : "parse error";
    if (p->error == YAML_READER_ERROR) {
        /* reader errors carry a byte offset, not a mark */
        long line = 1, col = 1;
        size_t off = p->problem_offset < len ? p->problem_offset : len;
        for (size_t i = 0; i < off; i++) {
            if (text[i] == '\n') {
                line++;
                col = 1;
            } else if (((unsigned char)text[i] & 0xc0) != 0x80) {
                col++;
            }
        }
        if (p->problem_value != -1 && p->problem_value >= 0)
            return tfm_err_at(err, b->doc->name, line, col, "%s (0x%x)", problem,
                              (unsigned)p->problem_value);
        return tfm_err_at(err, b->doc->name, line, col, "%s", problem);
    }
    /* At the end of the input libyaml reports a position on a line after
     * the last one; name the real end instead. */
    size_t chars = 0;
    for (size_t i = 0; i < len; i++)
        chars += ((unsigned char)text[i] & 0xc0) != 0x80;
    if (p->problem_mark.index >= chars) {
        const char *t = b->text;
        size_t n = b->sc->len;
        long line = 1, col = 1;
        for (size_t i = 0; i < n; i++) {
            if (t[i] == '\n') {
                line++;
                col = 1;
            } else if (((unsigned char)t[i] & 0xc0) != 0x80) {
                col++;
            }
        }
        return tfm_err_at(err, b->doc->name, line, col,
                          "unexpected end of input: %s", problem);
    }
    if (!b->yaml && !strcmp(problem, "did not find expected <document start>"))
        return fail_at(b, p->problem_mark, err, "unexpected content after the JSON value");
    if (p->context)
        return fail_at(b, p->problem_mark, err, "%s (%s)", problem, p->context);
    return fail_at(b, p->problem_mark, err, "%s", problem);
}

int tfm_json_parse(tfm_json_doc *doc, const char *text, size_t len,
                   const char *name, int yaml, tfm_err *err)
{
    memset(doc, 0, sizeof *doc);
    doc->name = name ? name : "<input>";
    arena *a = tfm_calloc(1, sizeof *a);
    doc->arena = a;

    if (!text)
        text = "";
    /* A UTF-8 byte order mark is not content; libyaml would skip it without
     * counting it, so dropping it keeps positions in step. */
    if (len >= 3 && !memcmp(text, "\xef\xbb\xbf", 3)) {
        text += 3;
        len -= 3;
    }

    scan sc = {.name = doc->name, .text = text, .len = len};
    builder b = {.doc = doc, .a = a, .yaml = yaml, .text = text, .sc = &sc};
    int rc = -1;
    const char *input = text;
    size_t input_len = len;
    if (!yaml) {
        if (json_scan(&sc, err) < 0)
            goto out;
        if (sc.n_edits) {
            input = sc.out.data;
            input_len = sc.out.len;
        }
    }

    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) {
        tfm_err_set(err, "%s: cannot initialise the YAML parser", doc->name);
        goto out;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)input, input_len);
    int docs = 0, done = 0;
    while (!done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&p, &ev)) {
            yaml_failure(&b, &p, input, input_len, err);
            break;
        }
        int r = 0;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_DOCUMENT_START_EVENT:
            if (docs++ > 0) {
                r = fail_at(&b, ev.start_mark, err, "more than one document");
            } else if (!yaml && (!ev.data.document_start.implicit ||
                                 ev.data.document_start.version_directive)) {
                r = fail_at(&b, ev.start_mark, err, "YAML document markers are not JSON");
            }
            break;
        case YAML_DOCUMENT_END_EVENT:
            if (!yaml && !ev.data.document_end.implicit)
                r = fail_at(&b, ev.start_mark, err, "YAML document markers are not JSON");
            break;
        case YAML_SCALAR_EVENT:
            r = on_scalar(&b, &ev, err);
            break;
        case YAML_SEQUENCE_START_EVENT:
            r = on_start(&b, &ev, TFM_JSON_ARRAY, err);
            break;
        case YAML_MAPPING_START_EVENT:
            r = on_start(&b, &ev, TFM_JSON_OBJECT, err);
            break;
        case YAML_SEQUENCE_END_EVENT:
        case YAML_MAPPING_END_EVENT:
            r = on_end(&b, err);
            break;
        case YAML_ALIAS_EVENT:
            r = on_alias(&b, &ev, err);
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
        if (r < 0)
            break;
        if (done) {
            if (!doc->root) {
                tfm_err_set(err, "%s: empty document", doc->name);
            } else {
                rc = 0;
            }
        }
    }
    yaml_parser_delete(&p);
out:
    tfm_buf_free(&sc.out);
    free(sc.edits);
    free(b.kids);
    free(b.frames);
    for (size_t i = 0; i < b.n_anchors; i++)
        free(b.anchors[i].name);
    free(b.anchors);
    free(b.hash);
    if (rc < 0)
        tfm_json_doc_free(doc);
    return rc;
}

int tfm_json_parse_file(tfm_json_doc *doc, const char *path, int yaml, tfm_err *err)
{
    memset(doc, 0, sizeof *doc);
    tfm_map m;
    if (tfm_map_open(&m, path, err) < 0)
        return -1;
    const char *name = strcmp(path, "-") == 0 ? "<stdin>" : path;
    int rc = tfm_json_parse(doc, (const char *)m.data, m.size, name, yaml, err);
    tfm_map_close(&m);
    return rc;
}

int tfm_json_parse_line(tfm_json_doc *doc, const char *text, size_t len, const char *name,
                        long line, tfm_err *err)
{
    if (tfm_json_parse(doc, text, len, name, 0, err) == 0)
        return 0;
    /* the parser counted from the start of the line: name:1:col -> name:line:col */
    size_t nl = strlen(name);
    if (err && !strncmp(err->msg, name, nl) && !strncmp(err->msg + nl, ":1:", 3)) {
        char rest[sizeof err->msg];
        snprintf(rest, sizeof rest, "%s", err->msg + nl + 3);
        snprintf(err->msg, sizeof err->msg, "%s:%ld:%s", name, line, rest);
    }
    return -1;
}

void tfm_json_doc_free(tfm_json_doc *doc)
{
    if (doc->arena) {
        arena_free(doc->arena);
        free(doc->arena);
    }
    doc->arena = NULL;
    doc->root = NULL;
}

const tfm_json *tfm_json_get(const tfm_json *obj, const char *key)
{
    if (!obj || obj->type != TFM_JSON_OBJECT)
        return NULL;
    size_t n = strlen(key);
    for (size_t i = 0; i < obj->n; i++)
        if (obj->keys[i]->len == n && memcmp(obj->keys[i]->str, key, n) == 0)
            return obj->items[i];
    return NULL;
}

const char *tfm_json_type_name(tfm_json_type t)
{
    switch (t) {
    case TFM_JSON_NULL: return "null";
    case TFM_JSON_BOOL: return "a boolean";
    case TFM_JSON_NUMBER: return "a number";
    case TFM_JSON_STRING: return "a string";
    case TFM_JSON_ARRAY: return "an array";
    case TFM_JSON_OBJECT: return "an object";
    }
    return "?";
}

int tfm_json_expect(const tfm_json_doc *doc, const tfm_json *node,
                    tfm_json_type type, const char *what, tfm_err *err)
{
    if (!node)
        return tfm_err_set(err, "%s: %s is missing", doc->name, what);
    if (node->type == type)
        return 0;
    return tfm_err_at(err, doc->name, node->line, node->col, "%s must be %s, not %s",
                      what, tfm_json_type_name(type), tfm_json_type_name(node->type));
}

int tfm_json_get_int(const tfm_json_doc *doc, const tfm_json *node, const char *what,
                     int64_t min, int64_t max, int64_t *out, tfm_err *err)
{
    if (tfm_json_expect(doc, node, TFM_JSON_NUMBER, what, err) < 0)
        return -1;
    /* Parse the text, not the double, so that 64-bit values stay exact. */
    const char *s = node->str;
    int64_t v = 0;
    int ok = 0;
    errno = 0;
    char *end;
    if (node->len > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'o')) {
        unsigned long long u = strtoull(s + 2, &end, s[1] == 'x' ? 16 : 8);
        ok = errno == 0 && *end == 0 && u <= INT64_MAX;
        v = (int64_t)u;
    } else {
        long long ll = strtoll(s, &end, 10);
        if (*end == 0) {
            if (errno == ERANGE)
                return tfm_err_at(err, doc->name, node->line, node->col,
                                  "%s must be between %lld and %lld, not %s", what,
                                  (long long)min, (long long)max, s);
            ok = 1;
            v = ll;
        } else if (isfinite(node->num) && node->num == floor(node->num) &&
                   fabs(node->num) < 9007199254740992.0) {
            /* 1e4 or 2.0 in a config: integral, so accepted */
            ok = 1;
            v = (int64_t)node->num;
        }
    }
    if (!ok)
        return tfm_err_at(err, doc->name, node->line, node->col,
                          "%s must be an integer, not %s", what, s);
    if (v < min || v > max)
        return tfm_err_at(err, doc->name, node->line, node->col,
                          "%s must be between %lld and %lld, not %lld", what,
                          (long long)min, (long long)max, (long long)v);
    *out = v;
    return 0;
}

void tfm_json_write(tfm_buf *b, const tfm_json *j)
{
    switch (j->type) {
    case TFM_JSON_STRING:
        tfm_buf_put_json_string(b, j->str, j->len);
        break;
    case TFM_JSON_ARRAY:
    case TFM_JSON_OBJECT:
        tfm_buf_putc(b, j->type == TFM_JSON_ARRAY ? '[' : '{');
        for (size_t i = 0; i < j->n; i++) {
            if (i)
                tfm_buf_putc(b, ',');
            if (j->type == TFM_JSON_OBJECT) {
                tfm_buf_put_json_string(b, j->keys[i]->str, j->keys[i]->len);
                tfm_buf_putc(b, ':');
            }
            tfm_json_write(b, j->items[i]);
        }
        tfm_buf_putc(b, j->type == TFM_JSON_ARRAY ? ']' : '}');
        break;
    default:
        tfm_buf_append(b, j->str, j->len);
    }
}
