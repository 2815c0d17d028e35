/* Loss curves: an SVG of one or more runs' log.tsv (train/train.h), drawn
 * by hand (no dependencies).
 *
 *     const char *runs[] = {"pre", "scratch"};
 *     if (tfm_plot_write(runs, 2, "both.svg", &err) < 0) ... err.msg ...
 *
 * Three panels share the step axis: the loss (train solid, validation
 * dashed with a dot at each evaluation; log scale when the values span
 * more than 10x), the task's metric (its first val_<metric> column after
 * val_loss: val_bleu, val_accuracy, ...; no panel when no run has one) and
 * the learning rate.  Each run has its colour; the legend names the runs
 * (by directory) and the line styles.  The training loop redraws its run's
 * RUNDIR/curves.svg at each evaluation (tfm_plot_write, atomic). */
#ifndef TFM_TRAIN_PLOT_H
#define TFM_TRAIN_PLOT_H

#include "base/buf.h"
#include "base/err.h"

/* One run's curves from log.tsv text (name labels it in the legend). */
typedef struct tfm_plot_run {
    const char *name;
    size_t n;                  /* rows */
    double *step, *train, *val, *lr, *metric; /* [n]; NAN where empty */
    char metric_name[64];      /* "" when log.tsv has no metric column */
} tfm_plot_run;

/* Parses log.tsv text (a header naming the columns, then rows); errors
 * name `path`.  Free with tfm_plot_run_free. */
int tfm_plot_run_parse(tfm_plot_run *r, const char *name, const char *text, size_t len,
                       const char *path, tfm_err *err);
/* Reads RUNDIR/log.tsv; a directory without one is an error naming it. */
int tfm_plot_run_read(tfm_plot_run *r, const char *rundir, tfm_err *err);
void tfm_plot_run_free(tfm_plot_run *r);

/* The SVG of runs[0..n) appended to out. */
void tfm_plot_svg(const tfm_plot_run *runs, int n, tfm_buf *out);

/* Reads each run directory's log.tsv and writes the SVG to path atomically. */
int tfm_plot_write(const char *const *rundirs, int n, const char *path, tfm_err *err);

#endif
