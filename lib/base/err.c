#include "base/err.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

int tfm_err_vset(tfm_err *err, const char *fmt, va_list ap)
{
    if (err) {
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        err->failed = 1;
    }
    return -1;
}

int tfm_err_set(tfm_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tfm_err_vset(err, fmt, ap);
    va_end(ap);
    return -1;
}

int tfm_err_at(tfm_err *err, const char *path, long line, long col,
               const char *fmt, ...)
{
    if (!err)
        return -1;
    char where[512];
    if (line > 0 && col > 0)
        snprintf(where, sizeof where, "%s:%ld:%ld: ", path, line, col);
    else if (line > 0)
        snprintf(where, sizeof where, "%s:%ld: ", path, line);
    else
        snprintf(where, sizeof where, "%s: ", path);
    char body[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    snprintf(err->msg, sizeof err->msg, "%s%s", where, body);
    err->failed = 1;
    return -1;
}

int tfm_err_prefix(tfm_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char pre[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    char old[sizeof err->msg];
    memcpy(old, err->msg, sizeof old);
    snprintf(err->msg, sizeof err->msg, "%s: %s", pre, old);
    err->failed = 1;
    return -1;
}

int tfm_err_errno(tfm_err *err, const char *fmt, ...)
{
    int e = errno;
    if (!err)
        return -1;
    char body[sizeof err->msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    snprintf(err->msg, sizeof err->msg, "%s: %s", body, strerror(e));
    err->failed = 1;
    return -1;
}

void tfm_err_clear(tfm_err *err)
{
    if (err) {
        err->failed = 0;
        err->msg[0] = '\0';
    }
}

const char *tfm_prog_name(void)
{
    /* glibc's, set from argv[0] before main */
    return program_invocation_short_name && *program_invocation_short_name
               ? program_invocation_short_name : "tfm";
}

static void out_of_memory(size_t n)
{
    fprintf(stderr, "%s: out of memory (allocating %zu bytes)\n", tfm_prog_name(), n);
    exit(1);
}

void *tfm_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        out_of_memory(n);
    return p;
}

void *tfm_calloc(size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size)
        out_of_memory(SIZE_MAX);
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        out_of_memory(count * size);
    return p;
}

void *tfm_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        out_of_memory(n);
    return q;
}

char *tfm_strdup(const char *s)
{
    return tfm_strndup(s, strlen(s));
}

char *tfm_strndup(const char *s, size_t n)
{
    char *d = tfm_malloc(n + 1);
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* Large arrays (weights, gradients, activations) go on 2 MiB pages where
 * the kernel offers them (transparent huge pages in "madvise" mode, Debian's
 * default): a training step sweeps tens of MiB in short products, and with
 * 4 KiB pages the TLB misses cost more than the arithmetic of some. */
#define HUGE_PAGE ((size_t)2 << 20)

void *tfm_aligned_alloc(size_t n)
{
    void *p = NULL;
    size_t align = n >= 2 * HUGE_PAGE ? HUGE_PAGE : 64;
    if (posix_memalign(&p, align, n ? n : 64) != 0)
        out_of_memory(n);
#ifdef MADV_HUGEPAGE
    if (align == HUGE_PAGE)
        madvise(p, n & ~(HUGE_PAGE - 1), MADV_HUGEPAGE);
#endif
    return p;
}
