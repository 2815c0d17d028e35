/* Growable byte buffer and growable arrays of ids.  The struct owns `data`;
 * release with tfm_buf_free. */
#ifndef TFM_BASE_BUF_H
#define TFM_BASE_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct tfm_buf {
    char *data;
    size_t len, cap;
} tfm_buf;

void tfm_buf_reserve(tfm_buf *b, size_t extra);
void tfm_buf_append(tfm_buf *b, const void *p, size_t n);
void tfm_buf_putc(tfm_buf *b, char c);
void tfm_buf_puts(tfm_buf *b, const char *s);
void tfm_buf_printf(tfm_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal (quotes included).  JSON cannot carry
 * invalid UTF-8, so each invalid sequence (a byte, or a truncated
 * character's bytes: Unicode's maximal subpart, as Python's and Rust's
 * lossy decoders take it) becomes one U+FFFD. */
void tfm_buf_put_json_string(tfm_buf *b, const char *s, size_t n);
/* Appends v as a JSON number with `digits` significant digits, or null when
 * v is not finite: JSON has no inf or nan (a diverged model gives them). */
void tfm_buf_put_json_double(tfm_buf *b, int digits, double v);
/* NUL-terminates without changing len. */
const char *tfm_buf_cstr(tfm_buf *b);
void tfm_buf_clear(tfm_buf *b);
void tfm_buf_free(tfm_buf *b);

typedef struct tfm_ids {
    uint32_t *data;
    size_t len, cap;
} tfm_ids;

void tfm_ids_push(tfm_ids *v, uint32_t id);
void tfm_ids_append(tfm_ids *v, const uint32_t *ids, size_t n);
void tfm_ids_clear(tfm_ids *v);
void tfm_ids_free(tfm_ids *v);

#endif
