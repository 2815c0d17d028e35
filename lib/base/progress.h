/* A progress line on stderr with rate and ETA, drawn only when stderr is a
 * terminal (and not quiet), redrawn at most ~10 times a second. */
#ifndef TFM_BASE_PROGRESS_H
#define TFM_BASE_PROGRESS_H

#include <stdint.h>

typedef struct tfm_progress {
    int enabled;
    char label[64];
    char unit[16];
    double total;  /* 0: unknown */
    double start, last_draw;
    double done;
    char extra[128]; /* free text appended, e.g. "loss 2.31" */
} tfm_progress;

/* unit: what `done` counts ("MB", "step"); total 0 if unknown. */
void tfm_progress_init(tfm_progress *p, const char *label, const char *unit,
                       double total, int quiet);
void tfm_progress_update(tfm_progress *p, double done);
/* Clears the line. */
void tfm_progress_end(tfm_progress *p);
/* Monotonic seconds. */
double tfm_now(void);

#endif
