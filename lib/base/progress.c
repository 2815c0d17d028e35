#include "base/progress.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

double tfm_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tfm_progress_init(tfm_progress *p, const char *label, const char *unit,
                       double total, int quiet)
{
    memset(p, 0, sizeof *p);
    p->enabled = !quiet && isatty(STDERR_FILENO);
    snprintf(p->label, sizeof p->label, "%s", label);
    snprintf(p->unit, sizeof p->unit, "%s", unit);
    p->total = total;
    p->start = tfm_now();
}

static void fmt_time(char *out, size_t n, double s)
{
    if (s < 0 || s > 1e7) {
        snprintf(out, n, "--:--");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(out, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(out, n, "%02ld:%02ld", t / 60, t % 60);
}

/* Counts (tokens, steps) print as integers, "12345/50000", never
 * "1.234e+04"; fractional amounts (MB) with one decimal. */
static void fmt_amount(char *out, size_t n, double v, int whole)
{
    snprintf(out, n, whole ? "%.0f" : "%.1f", v);
}

static void fmt_rate(char *out, size_t n, double v)
{
    snprintf(out, n, v >= 100 ? "%.0f" : "%.3g", v);
}

void tfm_progress_update(tfm_progress *p, double done)
{
    p->done = done;
    if (!p->enabled)
        return;
    double now = tfm_now();
    if (now - p->last_draw < 0.1 && !(p->total > 0 && done >= p->total))
        return;
    p->last_draw = now;
    double el = now - p->start;
    double rate = el > 0 ? done / el : 0;
    char eta[32], elapsed[32], d[32], t[32], r[32];
    fmt_time(elapsed, sizeof elapsed, el);
    fmt_rate(r, sizeof r, rate);
    const int whole = strcmp(p->unit, "MB") != 0;
    if (p->total > 0) {
        int width = 24;
        double frac = done / p->total;
        if (frac > 1)
            frac = 1;
        int fill = (int)(frac * width);
        char bar[64];
        for (int i = 0; i < width; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[width] = '\0';
        fmt_time(eta, sizeof eta, rate > 0 ? (p->total - done) / rate : -1);
        fmt_amount(d, sizeof d, done, whole);
        fmt_amount(t, sizeof t, p->total, whole);
        fprintf(stderr, "\r\033[K%s [%s] %3.0f%% %s/%s %s, %s %s/s, %s<%s %s",
                p->label, bar, frac * 100, d, t, p->unit, r, p->unit,
                elapsed, eta, p->extra);
    } else {
        fmt_amount(d, sizeof d, done, whole);
        fprintf(stderr, "\r\033[K%s %s %s, %s %s/s, %s %s", p->label, d,
                p->unit, r, p->unit, elapsed, p->extra);
    }
    fflush(stderr);
}

void tfm_progress_end(tfm_progress *p)
{
    if (p->enabled) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
    p->enabled = 0;
}
