#include "base/opt.h"

#include "config.h"

#include "base/buf.h"
#include "base/thread.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *stdout_prog = "tfm";
/* Set by the failure exits: the status is 1 and the reason said already. */
static int failing;

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

/* Length of the valid UTF-8 character at s[0..n), 0 if none. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) ||
        (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))
        return 0; /* overlong, surrogate, beyond U+10FFFF */
    return len;
}

/* Messages quote input (a token from a bad file, a line of text): its
 * control characters and invalid UTF-8 are written as \xNN, so that raw
 * bytes never reach the terminal. */
static void put_escaped(tfm_buf *b, const char *msg)
{
    const unsigned char *s = (const unsigned char *)msg;
    size_t n = strlen(msg);
    for (size_t i = 0; i < n;) {
        size_t l = s[i] >= 0x80 ? utf8_len(s + i, n - i) : 1;
        if (l > 1) {
            tfm_buf_append(b, s + i, l);
            i += l;
        } else {
            if (s[i] < 0x20 || s[i] == 0x7f || s[i] >= 0x80)
                tfm_buf_printf(b, "\\x%02x", s[i]);
            else
                tfm_buf_putc(b, (char)s[i]);
            i++;
        }
    }
}

/* "prog: <pre><msg escaped><post>" and a newline in one write to the
 * unbuffered stderr, so that processes sharing it (MPI ranks failing
 * together) do not interleave their messages. */
static void put_line(const char *prog, const char *pre, const char *msg, const char *post)
{
    tfm_buf b = {0};
    tfm_buf_printf(&b, "%s: %s", prog, pre);
    put_escaped(&b, msg);
    tfm_buf_printf(&b, "%s\n", post);
    fwrite(b.data, 1, b.len, stderr);
    tfm_buf_free(&b);
}

static void put_message(const char *prog, const char *fmt, va_list ap)
{
    char msg[4096];
    vsnprintf(msg, sizeof msg, fmt, ap);
    put_line(prog, "", msg, "");
}

void tfm_usage_error(const char *prog, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    put_message(prog, fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try '%s --help' for more information.\n", prog);
    failing = 1;
    exit(2);
}

size_t tfm_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return (size_t)-1;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t prev = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t cur = row[j];
            size_t sub = prev + (a[i - 1] != b[j - 1]);
            size_t del = row[j] + 1, ins = row[j - 1] + 1;
            row[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            prev = cur;
        }
    }
    return row[lb];
}

/* The long option closest to the unknown "--word[=value]", if it is close
 * enough to be a typo (at most a third of its letters wrong), else NULL. */
static const char *closest_option(const char *word, const struct option *opts)
{
    if (!opts || strncmp(word, "--", 2) != 0 || !word[2])
        return NULL;
    char name[65];
    size_t n = strcspn(word + 2, "=");
    if (n >= sizeof name)
        return NULL;
    memcpy(name, word + 2, n);
    name[n] = '\0';
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (const struct option *o = opts; o->name; o++) {
        size_t d = tfm_edit_distance(name, o->name);
        if (d < best_d) {
            best_d = d;
            best = o->name;
        }
    }
    return best && best_d > 0 && best_d <= (n + 2) / 3 ? best : NULL;
}

void tfm_usage_hint(const char *prog, char *const argv[], const struct option *opts)
{
    /* getopt_long leaves optopt 0 only for an unknown (or ambiguous) long
     * option, which it has stepped past: the word is argv[optind - 1]. */
    const char *s = optopt == 0 && argv && optind > 0 ? closest_option(argv[optind - 1], opts) : NULL;
    if (s)
        fprintf(stderr, "%s: did you mean '--%s'?\n", prog, s);
    fprintf(stderr, "Try '%s --help' for more information.\n", prog);
    failing = 1;
    exit(2);
}

void tfm_die(const char *prog, const tfm_err *err)
{
    failing = 1;
    put_line(prog, "", err && err->msg[0] ? err->msg : "failed", "");
    exit(1);
}

void tfm_fatal(const char *prog, const char *fmt, ...)
{
    va_list ap;
    failing = 1;
    va_start(ap, fmt);
    put_message(prog, fmt, ap);
    va_end(ap);
    exit(1);
}

void tfm_print_version(const char *prog)
{
    printf("%s (tfm) %s\n", prog, PACKAGE_VERSION);
    exit(0);
}


void tfm_check_stdout(const char *prog)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return;
    /* ferror alone (an earlier flush failed) leaves no errno to show */
    if (errno)
        fprintf(stderr, "%s: <stdout>: write error: %s\n", prog, strerror(errno));
    else
        fprintf(stderr, "%s: <stdout>: write error\n", prog);
    _exit(1);
}

static void check_stdout_at_exit(void)
{
    if (failing)
        return;
    tfm_check_stdout(stdout_prog);
    /* close reports what the last flush could not (e.g. NFS) */
    if (fclose(stdout) != 0) {
        fprintf(stderr, "%s: <stdout>: write error: %s\n", stdout_prog, strerror(errno));
        _exit(1);
    }
}

void tfm_main_start(const char *prog)
{
    stdout_prog = prog;
    atexit(check_stdout_at_exit);
    const char *env = getenv("TFM_NUM_THREADS");
    long n;
    if (env && *env && tfm_parse_long(env, 1, 1024, &n) < 0)
        put_line(prog, "warning: TFM_NUM_THREADS='", env, "' is not a thread count (1 to 1024)");
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
