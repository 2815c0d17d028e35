#include "base/buf.h"
#include "base/err.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void tfm_buf_reserve(tfm_buf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra + 1)
        cap *= 2;
    b->data = tfm_realloc(b->data, cap);
    b->cap = cap;
}

void tfm_buf_append(tfm_buf *b, const void *p, size_t n)
{
    tfm_buf_reserve(b, n);
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

void tfm_buf_putc(tfm_buf *b, char c)
{
    tfm_buf_reserve(b, 1);
    b->data[b->len++] = c;
}

void tfm_buf_puts(tfm_buf *b, const char *s)
{
    tfm_buf_append(b, s, strlen(s));
}

void tfm_buf_printf(tfm_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    tfm_buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Length of the valid UTF-8 sequence at s (1-4), or 0 if invalid. */
static size_t utf8_valid_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned cp;
    if (c >= 0xc2 && c <= 0xdf) { len = 2; cp = c & 0x1f; }
    else if (c >= 0xe0 && c <= 0xef) { len = 3; cp = c & 0x0f; }
    else if (c >= 0xf0 && c <= 0xf4) { len = 4; cp = c & 0x07; }
    else return 0;
    if (n < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* Bytes an invalid sequence at s covers (n >= 1): a lead byte and the
 * continuation bytes that could still have completed it (Unicode's
 * "maximal subpart", as Python's and Rust's lossy decoders replace each
 * with one U+FFFD), else the one byte. */
static size_t utf8_bad_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0], lo = 0x80, hi = 0xbf;
    size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4 : 1;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
    size_t i = 1;
    for (; i < len && i < n; i++, lo = 0x80, hi = 0xbf)
        if (s[i] < lo || s[i] > hi)
            break;
    return i;
}

void tfm_buf_put_json_double(tfm_buf *b, int digits, double v)
{
    if (isfinite(v))
        tfm_buf_printf(b, "%.*g", digits, v);
    else
        tfm_buf_puts(b, "null");
}

void tfm_buf_put_json_string(tfm_buf *b, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    tfm_buf_putc(b, '"');
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') {
            tfm_buf_putc(b, '\\');
            tfm_buf_putc(b, (char)c);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            switch (c) {
            case '\n': tfm_buf_puts(b, "\\n"); break;
            case '\t': tfm_buf_puts(b, "\\t"); break;
            case '\r': tfm_buf_puts(b, "\\r"); break;
            case '\b': tfm_buf_puts(b, "\\b"); break;
            case '\f': tfm_buf_puts(b, "\\f"); break;
            default: tfm_buf_printf(b, "\\u%04x", c);
            }
            i++;
        } else if (c < 0x80) {
            tfm_buf_putc(b, (char)c);
            i++;
        } else {
            size_t len = utf8_valid_len(s + i, n - i);
            if (len == 0) {
                tfm_buf_puts(b, "\\ufffd");
                i += utf8_bad_len(s + i, n - i);
            } else {
                tfm_buf_append(b, s + i, len);
                i += len;
            }
        }
    }
    tfm_buf_putc(b, '"');
}

const char *tfm_buf_cstr(tfm_buf *b)
{
    tfm_buf_reserve(b, 0);
    b->data[b->len] = '\0';
    return b->data;
}

void tfm_buf_clear(tfm_buf *b)
{
    b->len = 0;
}

void tfm_buf_free(tfm_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void tfm_ids_push(tfm_ids *v, uint32_t id)
{
    if (v->len == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 64;
        v->data = tfm_realloc(v->data, v->cap * sizeof *v->data);
    }
    v->data[v->len++] = id;
}

void tfm_ids_append(tfm_ids *v, const uint32_t *ids, size_t n)
{
    if (v->len + n > v->cap) {
        size_t cap = v->cap ? v->cap : 64;
        while (cap < v->len + n)
            cap *= 2;
        v->data = tfm_realloc(v->data, cap * sizeof *v->data);
        v->cap = cap;
    }
    if (n)
        memcpy(v->data + v->len, ids, n * sizeof *ids);
    v->len += n;
}

void tfm_ids_clear(tfm_ids *v)
{
    v->len = 0;
}

void tfm_ids_free(tfm_ids *v)
{
    free(v->data);
    v->data = NULL;
    v->len = v->cap = 0;
}
