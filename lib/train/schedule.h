/* Learning-rate schedules.  Steps count from 0 (the first optimizer step).
 *
 *   warmup (step < W):  lr · (step + 1) / W
 *   then, with p = (step - W) / (max_steps - W) clamped to [0, 1]:
 *     cosine        min_lr + ½(lr - min_lr)(1 + cos πp)
 *     linear        min_lr + (lr - min_lr)(1 - p)
 *     constant      lr
 *   inverse_sqrt (the original Transformer's, warmup included), s = step + 1:
 *                   lr · d^-0.5 · min(s^-0.5, s · W^-1.5)
 *     (optim.lr = 1 gives the paper's schedule exactly; d = model width) */
#ifndef TFM_TRAIN_SCHEDULE_H
#define TFM_TRAIN_SCHEDULE_H

#include <stdint.h>

#include "train/run_config.h"

typedef struct tfm_schedule {
    int decay;          /* tfm_config_decay */
    double lr, min_lr;
    int64_t warmup, max_steps;
    int64_t d_model;    /* inverse_sqrt only */
} tfm_schedule;

void tfm_schedule_from_config(tfm_schedule *s, const tfm_config *c);
double tfm_schedule_lr(const tfm_schedule *s, int64_t step);

#endif
