#include "base/opt.h"

#include "config.h"

#include "base/thread.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

int tfm_parse_long(const char *s, long min, long max, long *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

int tfm_parse_double(const char *s, double min, double max, double *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v) || v < min || v > max)
        return -1;
    *out = v;
    return 0;
}

long tfm_opt_long(const char *prog, const char *opt, const char *arg, long min, long max)
{
    long v;
    if (tfm_parse_long(arg, min, max, &v) < 0)
        tfm_usage_error(prog, "%s: expected an integer in [%ld, %ld], got '%s'", opt,
                        min, max, arg ? arg : "");
    return v;
}

double tfm_opt_double(const char *prog, const char *opt, const char *arg, double min, double max)
{
    double v;
    if (tfm_parse_double(arg, min, max, &v) < 0)
        tfm_usage_error(prog, "%s: expected a number in [%g, %g], got '%s'", opt, min,
                        max, arg ? arg : "");
    return v;
}

void tfm_usage_error(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help' for more information.\n", prog);
    exit(2);
}

void tfm_die(const char *prog, const tfm_err *err)
{
    fprintf(stderr, "%s: %s\n", prog, err && err->msg[0] ? err->msg : "failed");
    exit(1);
}

void tfm_fatal(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

void tfm_print_version(const char *prog)
{
    printf("%s (tfm) %s\n", prog, PACKAGE_VERSION);
    exit(0);
}

int tfm_opt_threads(const char *prog, const char *source, long requested)
{
    if (requested <= 0) {
        requested = tfm_threads_env();
        source = "TFM_NUM_THREADS";
        if (!requested)
            return tfm_cpus_available();
    }
    int cpus = tfm_cpus_available();
    if (requested <= cpus)
        return (int)requested;
    const char *s = cpus == 1 ? "" : "s";
    fprintf(stderr, "%s: %s%s%ld: only %d CPU%s available to this process; using %d thread%s\n",
            prog, source, source[0] == '-' ? " " : "=", requested, cpus, s, cpus, s);
    return cpus;
}
