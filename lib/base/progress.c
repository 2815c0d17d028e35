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
    char eta[32], elapsed[32];
    fmt_time(elapsed, sizeof elapsed, el);
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
        fprintf(stderr, "\r\033[K%s [%s] %3.0f%% %.4g/%.4g %s, %.3g %s/s, %s<%s %s",
                p->label, bar, frac * 100, done, p->total, p->unit, rate, p->unit,
                elapsed, eta, p->extra);
    } else {
        fprintf(stderr, "\r\033[K%s %.4g %s, %.3g %s/s, %s %s", p->label, done,
                p->unit, rate, p->unit, elapsed, p->extra);
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
