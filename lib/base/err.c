#include "base/err.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

static size_t page_round(size_t n)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return ((n ? n : 1) + page - 1) & ~(page - 1);
}

void *tfm_pages_alloc(size_t n, int huge)
{
    size_t len = page_round(n), page = page_round(1);
    size_t align = huge && len >= 2 * HUGE_PAGE ? HUGE_PAGE : page;
    size_t span = len + align - page;
    char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        out_of_memory(n);
    /* the aligned part kept, the rest given back */
    char *a = (char *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    if (a > p)
        munmap(p, (size_t)(a - p));
    if (a + len < p + span)
        munmap(a + len, (size_t)(p + span - (a + len)));
#ifdef MADV_HUGEPAGE
    if (align == HUGE_PAGE)
        madvise(a, len & ~(HUGE_PAGE - 1), MADV_HUGEPAGE);
#endif
    return a;
}

void tfm_pages_free(void *p, size_t n)
{
    if (p)
        munmap(p, page_round(n));
}

size_t tfm_pages_resident(const void *p, size_t n)
{
    size_t page = page_round(1), count = 0;
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t b = ((uintptr_t)p + n) & ~(uintptr_t)(page - 1);
    if (a >= b)
        return 0;
    size_t np = (b - a) / page;
    unsigned char *v = tfm_malloc(np);
    if (mincore((void *)a, b - a, v) == 0)
        for (size_t i = 0; i < np; i++)
            count += v[i] & 1;
    else
        count = np; /* unknown: taken as all */
    free(v);
    return count;
}
