#include "train/schedule.h"

#include "config.h"

#include <math.h>

void tfm_schedule_from_config(tfm_schedule *s, const tfm_config *c)
{
    s->decay = c->schedule.decay;
    s->lr = c->optim.lr;
    s->min_lr = c->schedule.min_lr;
    s->warmup = c->schedule.warmup;
    s->max_steps = c->train.max_steps;
    s->d_model = c->model.n_embd;
}

double tfm_schedule_lr(const tfm_schedule *s, int64_t step)
{
    if (s->decay == TFM_CONFIG_DECAY_INVERSE_SQRT) {
        double t = (double)(step + 1), w = (double)(s->warmup > 0 ? s->warmup : 1);
        double a = 1.0 / sqrt(t), b = t * pow(w, -1.5);
        return s->lr / sqrt((double)s->d_model) * (a < b ? a : b);
    }
    if (step < s->warmup)
        return s->lr * (double)(step + 1) / (double)s->warmup;
    if (s->decay == TFM_CONFIG_DECAY_CONSTANT)
        return s->lr;
    double span = (double)(s->max_steps - s->warmup);
    double p = span > 0 ? (double)(step - s->warmup) / span : 1.0;
    if (p < 0)
        p = 0;
    if (p > 1)
        p = 1;
    if (s->decay == TFM_CONFIG_DECAY_LINEAR)
        return s->min_lr + (s->lr - s->min_lr) * (1.0 - p);
    return s->min_lr + 0.5 * (s->lr - s->min_lr) * (1.0 + cos(M_PI * p));
}
