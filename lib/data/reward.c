/* A reward model's scores (data/reward.h). */
#include "data/reward.h"

#include "config.h"

#include <stdlib.h>
#include <string.h>

void tfm_reward_batch_init(tfm_reward_batch *rb, int rows, int T, int32_t pad)
{
    *rb = (tfm_reward_batch){.rows = rows, .T = T, .pad = pad};
    rb->x = tfm_malloc((size_t)rows * (size_t)T * sizeof *rb->x);
    rb->cls_pos = tfm_malloc((size_t)rows * sizeof *rb->cls_pos);
    rb->values = tfm_calloc((size_t)rows, sizeof *rb->values);
}

void tfm_reward_batch_free(tfm_reward_batch *rb)
{
    free(rb->x);
    free(rb->cls_pos);
    free(rb->values);
    memset(rb, 0, sizeof *rb);
}

void tfm_reward_batch_fill(tfm_reward_batch *rb, const uint32_t *const *ids, const int *len,
                           int n, tfm_batch *b)
{
    int T = 1;
    for (int i = 0; i < n; i++)
        T = len[i] > T ? len[i] : T;
    for (int i = 0; i < n; i++) {
        int32_t *x = rb->x + (size_t)i * T;
        for (int t = 0; t < T; t++)
            x[t] = t < len[i] ? (int32_t)ids[i][t] : rb->pad;
        rb->cls_pos[i] = len[i] - 1;
    }
    *b = (tfm_batch){.inputs = rb->x, .B = n, .T = T, .cls_pos = rb->cls_pos,
                     .values = rb->values};
}

int tfm_reward_model_check(const tfm_model_config *c, const char *name, tfm_err *err)
{
    if (c->kind != TFM_KIND_DECODER || c->n_classes != 1)
        return tfm_err_set(err, "%s is not a reward model (expected a decoder with one "
                           "classifier output, as train.task reward trains; it is %s with %d)",
                           name, tfm_kind_name(c->kind), c->n_classes);
    return 0;
}

int tfm_reward_score(tfm_model *m, const uint32_t *const *ids, const int *len, size_t n,
                     int batch, int32_t pad, float *scores, tfm_err *err)
{
    int T = 1;
    for (size_t i = 0; i < n; i++)
        T = len[i] > T ? len[i] : T;
    tfm_reward_batch rb;
    tfm_reward_batch_init(&rb, batch, T, pad);
    int rc = 0;
    for (size_t first = 0; first < n && rc == 0; first += (size_t)batch) {
        int k = n - first < (size_t)batch ? (int)(n - first) : batch;
        tfm_batch b;
        tfm_reward_batch_fill(&rb, ids + first, len + first, k, &b);
        b.values = NULL; /* scores only */
        rc = tfm_model_forward_batch(m, &b, NULL, err);
        int rows, cols;
        const float *z = rc == 0 ? tfm_model_head_out(m, TFM_HEAD_CLASS, &rows, &cols) : NULL;
        for (int i = 0; z && i < k; i++)
            scores[first + (size_t)i] = z[i];
    }
    tfm_reward_batch_free(&rb);
    return rc;
}
