#include "train/plot.h"

#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/file.h"

/* ---- reading log.tsv ----------------------------------------------------- */

/* Field i of the tab-separated line [s, s + n): its start and length, or -1. */
static int field(const char *s, size_t n, int i, const char **f, size_t *fn)
{
    size_t a = 0;
    for (int k = 0; k < i; k++) {
        const char *t = memchr(s + a, '\t', n - a);
        if (!t)
            return -1;
        a = (size_t)(t - s) + 1;
    }
    const char *t = memchr(s + a, '\t', n - a);
    *f = s + a;
    *fn = t ? (size_t)(t - (s + a)) : n - a;
    return 0;
}

static double number(const char *s, size_t n, int col)
{
    const char *f;
    size_t fn;
    char tmp[64];
    if (col < 0 || field(s, n, col, &f, &fn) < 0 || fn == 0 || fn >= sizeof tmp)
        return NAN;
    memcpy(tmp, f, fn);
    tmp[fn] = 0;
    char *end;
    double v = strtod(tmp, &end);
    return *end ? NAN : v;
}

static int column(const char *s, size_t n, const char *name)
{
    const char *f;
    size_t fn;
    for (int i = 0; field(s, n, i, &f, &fn) == 0; i++)
        if (fn == strlen(name) && !memcmp(f, name, fn))
            return i;
    return -1;
}

int tfm_plot_run_parse(tfm_plot_run *r, const char *name, const char *text, size_t len,
                       const char *path, tfm_err *err)
{
    memset(r, 0, sizeof *r);
    r->name = name;
    const char *end = text + len, *nl = memchr(text, '\n', len);
    size_t hn = nl ? (size_t)(nl - text) : len;
    int c_step = column(text, hn, "step"), c_train = column(text, hn, "train_loss");
    int c_val = column(text, hn, "val_loss"), c_lr = column(text, hn, "lr"), c_metric = -1;
    if (c_step < 0 || c_train < 0)
        return tfm_err_set(err, "%s: not a tfm-train log (its header has no step and "
                                "train_loss columns)", path);
    const char *f;
    size_t fn;
    for (int i = 0; c_metric < 0 && field(text, hn, i, &f, &fn) == 0; i++)
        if (fn > 4 && !memcmp(f, "val_", 4) && i != c_val && fn - 4 < sizeof r->metric_name) {
            c_metric = i;
            memcpy(r->metric_name, f + 4, fn - 4);
            r->metric_name[fn - 4] = 0;
        }
    size_t cap = 0;
    for (const char *p = text; p < end; p++)
        cap += *p == '\n';
    cap++;
    r->step = tfm_malloc(cap * sizeof *r->step);
    r->train = tfm_malloc(cap * sizeof *r->train);
    r->val = tfm_malloc(cap * sizeof *r->val);
    r->lr = tfm_malloc(cap * sizeof *r->lr);
    r->metric = tfm_malloc(cap * sizeof *r->metric);
    for (const char *s = nl ? nl + 1 : end; s < end;) {
        const char *e = memchr(s, '\n', (size_t)(end - s));
        size_t n = e ? (size_t)(e - s) : (size_t)(end - s);
        double step = number(s, n, c_step);
        if (!isnan(step)) {
            size_t k = r->n++;
            r->step[k] = step;
            r->train[k] = number(s, n, c_train);
            r->val[k] = number(s, n, c_val);
            r->lr[k] = number(s, n, c_lr);
            r->metric[k] = number(s, n, c_metric);
        }
        s += n + 1;
    }
    return 0;
}

int tfm_plot_run_read(tfm_plot_run *r, const char *rundir, tfm_err *err)
{
    memset(r, 0, sizeof *r);
    tfm_buf path = {0};
    tfm_buf_printf(&path, "%s/log.tsv", rundir);
    const char *p = tfm_buf_cstr(&path);
    struct stat st;
    int rc = -1;
    if (stat(p, &st) < 0) {
        tfm_err_set(err, "%s: no such file (is %s a tfm-train run directory?)", p, rundir);
    } else {
        tfm_map m;
        if (tfm_map_open(&m, p, err) == 0) {
            rc = tfm_plot_run_parse(r, rundir, (const char *)m.data, m.size, p, err);
            tfm_map_close(&m);
        }
    }
    tfm_buf_free(&path);
    return rc;
}

void tfm_plot_run_free(tfm_plot_run *r)
{
    free(r->step);
    free(r->train);
    free(r->val);
    free(r->lr);
    free(r->metric);
    memset(r, 0, sizeof *r);
}

/* ---- axes ---------------------------------------------------------------- */

typedef struct axis {
    double lo, hi;      /* the domain (log10 of it when log) */
    int log;
    double tick[32];
    int n_tick;
} axis;

static double nice(double x)
{
    double e = pow(10, floor(log10(x))), f = x / e;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * e;
}

/* An axis over [lo, hi] (finite values seen; lo > hi when none). */
static void axis_init(axis *a, double lo, double hi, int allow_log)
{
    memset(a, 0, sizeof *a);
    if (!(lo <= hi)) {
        lo = 0;
        hi = 1;
    }
    if (allow_log && lo > 0 && hi / lo > 10) {
        a->log = 1;
        a->lo = floor(log10(lo));
        a->hi = ceil(log10(hi));
        int decades = (int)(a->hi - a->lo);
        for (double d = a->lo; d <= a->hi && a->n_tick < 32; d++) {
            a->tick[a->n_tick++] = d;
            if (decades <= 2)
                for (int m = 2; m <= 5 && a->n_tick < 32 && d < a->hi; m += 3)
                    a->tick[a->n_tick++] = d + log10(m);
        }
        return;
    }
    if (hi - lo < 1e-12 * (fabs(hi) + 1e-300)) {
        double pad = lo != 0 ? fabs(lo) * 0.1 : 1;
        lo -= pad;
        hi += pad;
    }
    double step = nice((hi - lo) / 5);
    a->lo = floor(lo / step) * step;
    a->hi = ceil(hi / step) * step;
    for (double t = a->lo; t <= a->hi + step * 1e-6 && a->n_tick < 32; t += step)
        a->tick[a->n_tick++] = fabs(t) < step * 1e-9 ? 0 : t;
}

static double axis_frac(const axis *a, double v)
{
    if (a->log)
        v = log10(v);
    return a->hi > a->lo ? (v - a->lo) / (a->hi - a->lo) : 0.5;
}

static void tick_label(const axis *a, double t, char *buf, size_t size)
{
    double v = a->log ? pow(10, t) : t;
    if (v != 0 && (fabs(v) < 1e-4 || fabs(v) >= 1e6))
        snprintf(buf, size, "%.0e", v);
    else
        snprintf(buf, size, "%.4g", v);
}

/* ---- drawing ------------------------------------------------------------- */

static const char *const COLOURS[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                      "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
#define N_COLOURS (sizeof COLOURS / sizeof *COLOURS)

enum { WIDTH = 860, LEFT = 90, RIGHT = 30, PANEL_H = 190, PANEL_GAP = 70 };

static void escape(tfm_buf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': tfm_buf_puts(b, "&amp;"); break;
        case '<': tfm_buf_puts(b, "&lt;"); break;
        case '>': tfm_buf_puts(b, "&gt;"); break;
        case '"': tfm_buf_puts(b, "&quot;"); break;
        default: tfm_buf_putc(b, *s);
        }
    }
}

typedef struct panel {
    double y;           /* top */
    axis xa, ya;
    const char *title, *ylabel;
} panel;

static void panel_draw(tfm_buf *b, const panel *p)
{
    const double w = WIDTH - LEFT - RIGHT, h = PANEL_H;
    char lab[64];
    tfm_buf_printf(b, "<g class=\"panel\">\n");
    tfm_buf_printf(b, "<text x=\"%d\" y=\"%.1f\" font-size=\"14\" font-weight=\"bold\">",
                   LEFT, p->y - 8);
    escape(b, p->title);
    tfm_buf_puts(b, "</text>\n");
    /* grid and ticks */
    for (int i = 0; i < p->ya.n_tick; i++) {
        double y = p->y + h - axis_frac(&p->ya, p->ya.log ? pow(10, p->ya.tick[i])
                                                           : p->ya.tick[i]) * h;
        tfm_buf_printf(b, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                       LEFT, y, LEFT + w, y);
        tick_label(&p->ya, p->ya.tick[i], lab, sizeof lab);
        /* a log axis labels its decades, the 2 and 5 between only with few */
        tfm_buf_printf(b, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", LEFT - 6,
                       y + 4, lab);
    }
    for (int i = 0; i < p->xa.n_tick; i++) {
        double x = LEFT + axis_frac(&p->xa, p->xa.tick[i]) * w;
        tfm_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
                       x, p->y, x, p->y + h);
        tfm_buf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n",
                       x, p->y + h, x, p->y + h + 5);
        tick_label(&p->xa, p->xa.tick[i], lab, sizeof lab);
        tfm_buf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x,
                       p->y + h + 18, lab);
    }
    tfm_buf_printf(b, "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                      "stroke=\"#000\"/>\n", LEFT, p->y, w, h);
    tfm_buf_printf(b, "<text class=\"xlabel\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">"
                      "step (optimizer updates)</text>\n", LEFT + w / 2, p->y + h + 36);
    tfm_buf_printf(b, "<text class=\"ylabel\" x=\"%d\" y=\"%.1f\" text-anchor=\"middle\" "
                      "transform=\"rotate(-90 %d %.1f)\">", 22, p->y + h / 2, 22, p->y + h / 2);
    escape(b, p->ylabel);
    if (p->ya.log)
        tfm_buf_puts(b, ", log scale");
    tfm_buf_puts(b, "</text>\n</g>\n");
}

/* One series of run r: the points (x[i], y[i]) that are finite (and > 0 on a
 * log axis) as a polyline, with dots when dots. */
static void series(tfm_buf *b, const panel *p, const double *x, const double *y, size_t n,
                   const char *colour, const char *cls, int dashed, int dots)
{
    const double w = WIDTH - LEFT - RIGHT, h = PANEL_H;
    tfm_buf pts = {0}, dot = {0};
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(y[i]) || !isfinite(x[i]) || (p->ya.log && y[i] <= 0))
            continue;
        double px = LEFT + axis_frac(&p->xa, x[i]) * w, py = p->y + h - axis_frac(&p->ya, y[i]) * h;
        tfm_buf_printf(&pts, "%s%.1f,%.1f", k++ ? " " : "", px, py);
        if (dots)
            tfm_buf_printf(&dot, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n", px,
                           py, colour);
    }
    if (k) {
        tfm_buf_printf(b, "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s "
                          "points=\"%s\"/>\n", cls, colour,
                       dashed ? " stroke-dasharray=\"6 3\"" : "", tfm_buf_cstr(&pts));
        if (dots)
            tfm_buf_append(b, dot.data, dot.len);
    }
    tfm_buf_free(&pts);
    tfm_buf_free(&dot);
}

static void range(const double *v, size_t n, double *lo, double *hi)
{
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) {
            *lo = v[i] < *lo ? v[i] : *lo;
            *hi = v[i] > *hi ? v[i] : *hi;
        }
}

/* The metric's axis label, with its unit. */
static void metric_label(const char *name, char *buf, size_t size)
{
    const char *unit = "";
    if (!strcmp(name, "bleu"))
        unit = " (BLEU, 0-100)";
    else if (!strncmp(name, "squad_", 6))
        unit = " (%)";
    else if (!strcmp(name, "pearson"))
        unit = " (Pearson r)";
    else
        unit = " (fraction)";
    snprintf(buf, size, "validation %s%s", name, unit);
}

void tfm_plot_svg(const tfm_plot_run *runs, int n, tfm_buf *out)
{
    double xlo = INFINITY, xhi = -INFINITY, llo = INFINITY, lhi = -INFINITY;
    double mlo = INFINITY, mhi = -INFINITY, rlo = INFINITY, rhi = -INFINITY;
    const char *metric = NULL;
    for (int i = 0; i < n; i++) {
        const tfm_plot_run *r = &runs[i];
        range(r->step, r->n, &xlo, &xhi);
        range(r->train, r->n, &llo, &lhi);
        range(r->val, r->n, &llo, &lhi);
        range(r->lr, r->n, &rlo, &rhi);
        if (r->metric_name[0] && !metric)
            metric = r->metric_name;
        if (metric && !strcmp(metric, r->metric_name))
            range(r->metric, r->n, &mlo, &mhi);
    }
    if (xlo > 0)
        xlo = 0;
    int has_metric = metric && mlo <= mhi;
    int n_panel = 2 + has_metric;
    /* legend: one entry a run, then the line styles */
    const int legend_top = 44, legend_rows = (n + 3) / 4 + 1;
    const double top = legend_top + 20.0 * legend_rows + 36;
    const double height = top + n_panel * (PANEL_H + PANEL_GAP);
    tfm_buf_printf(out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" "
                        "viewBox=\"0 0 %d %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
                   WIDTH, height, WIDTH, height);
    tfm_buf_printf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
    tfm_buf_printf(out, "<text x=\"%d\" y=\"26\" font-size=\"16\" font-weight=\"bold\">"
                        "Training curves</text>\n", LEFT);
    tfm_buf_puts(out, "<g class=\"legend\">\n");
    for (int i = 0; i < n; i++) {
        double x = LEFT + (i % 4) * 180.0, y = legend_top + 20.0 * (i / 4);
        tfm_buf_printf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                            "stroke-width=\"3\"/>\n", x, y, x + 24, y,
                       COLOURS[i % N_COLOURS]);
        tfm_buf_printf(out, "<text x=\"%.1f\" y=\"%.1f\">", x + 30, y + 4);
        escape(out, runs[i].name);
        tfm_buf_puts(out, "</text>\n");
    }
    double y = legend_top + 20.0 * ((n + 3) / 4);
    tfm_buf_printf(out, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#555\" "
                        "stroke-width=\"1.6\"/>\n<text x=\"%d\" y=\"%.1f\">training (mean since "
                        "the previous log line)</text>\n", LEFT, y, LEFT + 24, y, LEFT + 30, y + 4);
    tfm_buf_printf(out, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#555\" "
                        "stroke-width=\"1.6\" stroke-dasharray=\"6 3\"/>\n<circle cx=\"%d\" "
                        "cy=\"%.1f\" r=\"2.5\" fill=\"#555\"/>\n<text x=\"%d\" y=\"%.1f\">"
                        "validation (at each evaluation)</text>\n", LEFT + 340, y, LEFT + 364, y,
                   LEFT + 352, y, LEFT + 370, y + 4);
    tfm_buf_puts(out, "</g>\n");

    axis xa;
    axis_init(&xa, xlo, xhi, 0);
    panel loss = {.y = top, .xa = xa, .title = "Loss", .ylabel = "loss (nats per target)"};
    axis_init(&loss.ya, llo, lhi, 1);
    panel_draw(out, &loss);
    for (int i = 0; i < n; i++) {
        const tfm_plot_run *r = &runs[i];
        const char *c = COLOURS[i % N_COLOURS];
        series(out, &loss, r->step, r->train, r->n, c, "train_loss", 0, 0);
        series(out, &loss, r->step, r->val, r->n, c, "val_loss", 1, 1);
    }
    double next = top + PANEL_H + PANEL_GAP;
    if (has_metric) {
        char title[96], ylabel[128];
        snprintf(title, sizeof title, "Validation %s", metric);
        metric_label(metric, ylabel, sizeof ylabel);
        panel mp = {.y = next, .xa = xa, .title = title, .ylabel = ylabel};
        axis_init(&mp.ya, mlo, mhi, 0);
        panel_draw(out, &mp);
        for (int i = 0; i < n; i++)
            if (!strcmp(runs[i].metric_name, metric))
                series(out, &mp, runs[i].step, runs[i].metric, runs[i].n,
                       COLOURS[i % N_COLOURS], "val_metric", 1, 1);
        next += PANEL_H + PANEL_GAP;
    }
    panel lr = {.y = next, .xa = xa, .title = "Learning rate", .ylabel = "learning rate"};
    axis_init(&lr.ya, rlo < 0 ? rlo : 0, rhi, 0);
    panel_draw(out, &lr);
    for (int i = 0; i < n; i++)
        series(out, &lr, runs[i].step, runs[i].lr, runs[i].n, COLOURS[i % N_COLOURS], "lr", 0,
               0);
    tfm_buf_puts(out, "</svg>\n");
}

int tfm_plot_write(const char *const *rundirs, int n, const char *path, tfm_err *err)
{
    tfm_plot_run *runs = tfm_malloc((size_t)(n ? n : 1) * sizeof *runs);
    int k = 0, rc = -1;
    for (; k < n; k++)
        if (tfm_plot_run_read(&runs[k], rundirs[k], err) < 0)
            goto out;
    tfm_buf svg = {0};
    tfm_plot_svg(runs, n, &svg);
    rc = tfm_write_file(path, svg.data, svg.len, err);
    tfm_buf_free(&svg);
out:
    for (int i = 0; i < k; i++)
        tfm_plot_run_free(&runs[i]);
    free(runs);
    return rc;
}
