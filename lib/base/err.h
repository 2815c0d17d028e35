/* Errors as values.
 *
 * Library functions that can fail take a `tfm_err *` last and return 0 on
 * success, -1 on failure after filling the error.  The message already names
 * the user's file (and line:column where there is one) but never the program:
 * cmd/ prefixes the program name when it prints.  Programming errors (a broken
 * invariant, not bad input) use TFM_ASSERT, which aborts with file and line. */
#ifndef TFM_BASE_ERR_H
#define TFM_BASE_ERR_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct tfm_err {
    int failed;
    char msg[1024];
} tfm_err;

/* Sets the message and returns -1, so that `return tfm_err_set(...)` reads
 * naturally.  `err` may be NULL (the message is then dropped). */
int tfm_err_set(tfm_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int tfm_err_vset(tfm_err *err, const char *fmt, va_list ap);

/* "path:line:col: message"; line/col 0 are left out. */
int tfm_err_at(tfm_err *err, const char *path, long line, long col,
               const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Prefixes an existing message with "context: " (used to add a file name to an
 * error raised deeper down). */
int tfm_err_prefix(tfm_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Like tfm_err_set with ": strerror(errno)" appended. */
int tfm_err_errno(tfm_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void tfm_err_clear(tfm_err *err);

/* Allocation that cannot fail: out of memory is reported and the process
 * exits 1 (there is no useful recovery in a command-line tool). */
void *tfm_malloc(size_t n);
void *tfm_calloc(size_t count, size_t size);
void *tfm_realloc(void *p, size_t n);
char *tfm_strdup(const char *s);
char *tfm_strndup(const char *s, size_t n);
/* 64-byte aligned, for SIMD and BLIS; release with free(). */
void *tfm_aligned_alloc(size_t n);
/* n zero bytes in whole pages of their own, from the kernel: a page costs
 * memory only once written, so a part never written is never resident (a
 * LoRA run's frozen gradients).  huge: on 2 MiB pages where the kernel
 * offers them, as tfm_aligned_alloc (then writing one byte makes 2 MiB
 * resident).  Release with tfm_pages_free(p, n), the same n. */
void *tfm_pages_alloc(size_t n, int huge);
void tfm_pages_free(void *p, size_t n);
/* How many of the pages wholly inside p[0, n) are resident (mincore): the
 * tests' check of tfm_pages_alloc's promise. */
size_t tfm_pages_resident(const void *p, size_t n);

/* The running program's name, for the messages the library prints itself
 * (out of memory, internal errors): every message starts with it. */
const char *tfm_prog_name(void);

#define TFM_ASSERT(cond)                                                      \
    do {                                                                      \
        if (!(cond)) {                                                        \
            fprintf(stderr, "%s: internal error at %s:%d: %s\n",              \
                    tfm_prog_name(), __FILE__, __LINE__, #cond);              \
            abort();                                                          \
        }                                                                     \
    } while (0)

#endif
