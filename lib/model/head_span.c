/* The span head (HF's question answering, qa_outputs.*): per position
 * (s, e) = h·Wᵀ + w; the loss is the mean of the cross-entropies of start
 * over the row's positions against tfm_batch.span_start and of end against
 * span_end. */
#include "config.h"

#include <string.h>

#include "model/head.h"
#include "tensor/ops.h"

typedef struct span_acts {
    float *z, *s, *e, *lse; /* [N,2], [N], [N], [2N] */
    int32_t *tgt;           /* [2N]: start [B], then end [B] */
    int has_span;
} span_acts;

static int has(const tfm_model_config *c)
{
    return c->span;
}

static void params(tfm_table_builder *tb, const tfm_model_config *c)
{
    tfm_table_add(tb, "qa_outputs.weight", 2, (size_t)c->n_embd, 1, 1);
    tfm_table_add(tb, "qa_outputs.bias", 2, 0, 0, 1);
}

static void layout(void *acts, const tfm_model_config *c, size_t N, float *base, size_t *off)
{
    span_acts *a = acts;
    (void)c;
    tfm_acts_take(&a->z, base, off, 2 * N);
    tfm_acts_take(&a->s, base, off, N);
    tfm_acts_take(&a->e, base, off, N);
    tfm_acts_take(&a->lse, base, off, 2 * N);
    tfm_acts_take_ids(&a->tgt, base, off, 2 * N);
}

static int check(const tfm_model_config *c, const tfm_batch *b, tfm_err *err)
{
    if ((b->span_start || b->span_end) && (!c->span || !b->span_start || !b->span_end))
        return tfm_err_set(err, "span targets need a model with the span head and both "
                                "starts and ends");
    for (int r = 0; b->span_start && r < b->B; r++) {
        int s0 = b->span_start[r], e0 = b->span_end[r];
        if ((s0 == -1) != (e0 == -1) || s0 < -1 || s0 >= b->T || e0 < -1 || e0 >= b->T)
            return tfm_err_set(err, "span %d..%d of batch row %d is out of range [0, %d) "
                               "(-1 in both: no answer)", s0, e0, r, b->T);
    }
    return 0;
}

static void keep(void *acts, const tfm_batch *b)
{
    span_acts *a = acts;
    if (b->span_start) {
        memcpy(a->tgt, b->span_start, (size_t)b->B * sizeof *a->tgt);
        memcpy(a->tgt + b->B, b->span_end, (size_t)b->B * sizeof *a->tgt);
    }
    a->has_span = b->span_start != NULL;
}

static int given(const tfm_batch *b)
{
    return b->span_start != NULL;
}

static void rows(tfm_batch *p, const tfm_batch *b, int r0)
{
    p->span_start = b->span_start ? b->span_start + r0 : NULL;
    p->span_end = b->span_end ? b->span_end + r0 : NULL;
}

static long count(const tfm_model_config *c, const tfm_batch *b)
{
    long n = 0;
    for (int r = 0; c->span && b->span_start && r < b->B; r++)
        n += b->span_start[r] >= 0;
    return n;
}

static int forward(void *acts, tfm_model *m, const float *final, float *loss, long *n)
{
    span_acts *a = acts;
    int B = m->B, T = m->T, N = B * T;
    float *P = m->params;
    tfm_head_linear_forward(a->z, final, tfm_model_ptr(m, P, "qa_outputs.weight"),
                            tfm_model_ptr(m, P, "qa_outputs.bias"), N, m->cfg.n_embd, 2);
    for (int i = 0; i < N; i++) {
        a->s[i] = a->z[2 * i];
        a->e[i] = a->z[2 * i + 1];
    }
    if (!a->has_span)
        return 0;
    long n2 = 0;
    double sum = tfm_crossentropy_forward(a->lse, NULL, a->s, a->tgt, B, T, 0.0f, n);
    sum += tfm_crossentropy_forward(a->lse + B, NULL, a->e, a->tgt + B, B, T, 0.0f, &n2);
    *loss = *n ? (float)(0.5 * sum / *n) : 0.0f;
    return 1;
}

static void backward(void *acts, tfm_model *m, const float *final, float *dfinal, float *tmp,
                     float f)
{
    span_acts *a = acts;
    int B = m->B, T = m->T, N = B * T;
    float *G = m->grads, *P = m->params;
    (void)tmp;
    if (!a->has_span)
        return;
    /* the loss is the mean of the two cross-entropies */
    tfm_crossentropy_backward(a->s, a->lse, a->tgt, B, T, 0.0f, 0.5f * f);
    tfm_crossentropy_backward(a->e, a->lse + B, a->tgt + B, B, T, 0.0f, 0.5f * f);
    for (int i = 0; i < N; i++) {
        a->z[2 * i] = a->s[i];
        a->z[2 * i + 1] = a->e[i];
    }
    tfm_head_linear_backward(dfinal, 1.0f, tfm_model_ptr(m, G, "qa_outputs.weight"),
                             tfm_model_ptr(m, G, "qa_outputs.bias"), a->z, final,
                             tfm_model_ptr(m, P, "qa_outputs.weight"), N, m->cfg.n_embd, 2);
}

static const float *out(const void *acts, const tfm_model *m, int *rows, int *cols)
{
    *rows = m->B * m->T;
    *cols = 2;
    return ((const span_acts *)acts)->z;
}

const tfm_head_part tfm_head_span = {
    .name = "span",
    .loss = TFM_HEAD_SPAN,
    .acts_size = sizeof(span_acts),
    .has = has,
    .task = has,
    .params = params,
    .layout = layout,
    .check = check,
    .keep = keep,
    .given = given,
    .rows = rows,
    .count = count,
    .forward = forward,
    .backward = backward,
    .out = out,
};
