#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "base/buf.h"
#include "text/utf8.h"

int32_t tfm_utf8_decode(const unsigned char *s, size_t n, size_t *adv)
{
    unsigned c = s[0];
    *adv = 1;
    if (c < 0x80)
        return (int32_t)c;
    size_t len;
    uint32_t cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2; cp = c & 0x1F; min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3; cp = c & 0x0F; min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4; cp = c & 0x07; min = 0x10000;
    } else {
        return -1;
    }
    if (len > n)
        return -1;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return -1;
    *adv = len;
    return (int32_t)cp;
}

size_t tfm_utf8_encode(uint32_t cp, unsigned char *d)
{
    if (cp < 0x80) {
        d[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (unsigned char)(0xC0 | (cp >> 6));
        d[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (unsigned char)(0xE0 | (cp >> 12));
        d[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        d[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    d[0] = (unsigned char)(0xF0 | (cp >> 18));
    d[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    d[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    d[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid UTF-8 that starts s[0..n). */
static size_t valid_prefix(const unsigned char *s, size_t n)
{
    size_t i = 0, adv;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if (tfm_utf8_decode(s + i, n - i, &adv) < 0)
            break;
        i += adv;
    }
    return i;
}

int tfm_utf8_valid(const unsigned char *s, size_t n)
{
    return valid_prefix(s, n) == n;
}

long tfm_utf8_invalid_line(const char *text, size_t len)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t bad = valid_prefix(s, len);
    if (bad == len)
        return 0;
    long line = 1;
    for (size_t i = 0; i < bad; i++)
        line += s[i] == '\n';
    return line;
}

void tfm_utf8_lower(const char *s, size_t n, tfm_buf *out)
{
    tfm_utf8_lower_src(s, n, out, NULL);
}

void tfm_utf8_lower_src(const char *s, size_t n, tfm_buf *out, tfm_ids *src)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, adv;
    tfm_buf_reserve(out, n + 8);
    while (i < n) {
        size_t o0 = out->len;
        if (src) {
            /* a character's bytes, whatever their new length, come from it */
            int32_t cp = u[i] < 0x80 ? u[i] : tfm_utf8_decode(u + i, n - i, &adv);
            size_t at = i;
            if (cp == 0x130)
                tfm_buf_append(out, "i\xcc\x87", 3), adv = 2;
            else if (cp < 0 || u[i] < 0x80)
                tfm_buf_putc(out, (char)(u[i] >= 'A' && u[i] <= 'Z' ? u[i] + 32 : u[i])),
                    adv = 1;
            else {
                unsigned char d[4];
                tfm_buf_append(out, d, tfm_utf8_encode((uint32_t)utf8proc_tolower(cp), d));
            }
            for (size_t k = o0; k < out->len; k++)
                tfm_ids_push(src, (uint32_t)at);
            i += adv;
            continue;
        }
        if (u[i] < 0x80) {
            char c = (char)u[i];
            tfm_buf_putc(out, c >= 'A' && c <= 'Z' ? (char)(c + 32) : c);
            i++;
            continue;
        }
        int32_t cp = tfm_utf8_decode(u + i, n - i, &adv);
        if (cp < 0) {
            tfm_buf_putc(out, (char)u[i]);
        } else if (cp == 0x130) {
            tfm_buf_append(out, "i\xcc\x87", 3);
        } else {
            unsigned char d[4];
            tfm_buf_append(out, d, tfm_utf8_encode((uint32_t)utf8proc_tolower(cp), d));
        }
        i += adv;
    }
}

void tfm_utf8_nfc_src(const char *s, size_t n, tfm_buf *out, tfm_ids *src)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        /* nothing composes with an ASCII character that follows, nor is
         * reordered past one: runs that start at one are normalized alone */
        size_t j = i + 1;
        while (j < n && u[j] >= 0x80)
            j++;
        utf8proc_uint8_t *r = NULL;
        utf8proc_ssize_t l = -1;
        if (j - i > 1 && tfm_utf8_valid(u + i, j - i))
            l = utf8proc_map(u + i, (utf8proc_ssize_t)(j - i), &r,
                             UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (l < 0 || ((size_t)l == j - i && memcmp(r, u + i, j - i) == 0)) {
            tfm_buf_append(out, s + i, j - i);
            for (size_t k = i; src && k < j; k++)
                tfm_ids_push(src, (uint32_t)k);
        } else {
            tfm_buf_append(out, r, (size_t)l);
            for (utf8proc_ssize_t k = 0; src && k < l; k++)
                tfm_ids_push(src, (uint32_t)i);
        }
        free(r);
        i = j;
    }
}
