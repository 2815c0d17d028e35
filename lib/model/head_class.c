/* The sequence classifier on a pooled position p_b (tfm_batch.cls_pos, else
 * 0; a decoder's reader passes its last token): u = h[b, p_b], or with
 * pool_mean the mean of h[b, t] over t < n_b (n_b: the row's length, or
 * p_b + 1 for a batch without lengths, a decoder's), with the
 * pooler u = act(u·Pᵀ + p) (tanh, or pooler_act's ReLU or GELU);
 * z = u·Wᵀ + w; cross-entropy over the classes
 * against tfm_batch.labels, or with one output the mean squared error
 * against tfm_batch.values.  With nsp it is BERT's next-sentence head
 * (cls.seq_relationship.*), else HF's classifier.*. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "model/head.h"
#include "tensor/ops.h"

typedef struct class_acts {
    float *pool_x, *pool_u;    /* [N,C] (B rows used) */
    float *pool_h;             /* [N,C] the pooler's input of its activation */
    float *z, *lse;            /* [N,K], [N] */
    int32_t *cls_pos, *labels; /* [N] (B used) */
    int32_t *n_pool;           /* [N] positions pool_mean averages */
    float *values;             /* [N] (B used) */
    int has_labels, has_values;
} class_acts;

static const char *cls_name(const tfm_model_config *c, int bias)
{
    if (c->nsp)
        return bias ? "cls.seq_relationship.bias" : "cls.seq_relationship.weight";
    return bias ? "classifier.bias" : "classifier.weight";
}

/* The pooler's ReLU or GELU as an activation kernel's */
static tfm_act_kind pool_act(const tfm_model_config *c)
{
    return c->pooler_act == TFM_POOL_RELU ? TFM_ACT_KIND_RELU : TFM_ACT_KIND_GELU_EXACT;
}

/* the pooler alone (a pre-trained BERT's) is kept and saved too */
static int has(const tfm_model_config *c)
{
    return c->n_classes || c->pooler;
}

/* the NSP head of a pre-trained model is no fine-tuning head: it stays a
 * masked LM */
static int task(const tfm_model_config *c)
{
    return c->n_classes && !c->nsp;
}

static int check_config(const tfm_model_config *c, tfm_err *err)
{
    if (c->n_classes < 0 || c->n_classes > 1 << 16)
        return tfm_err_set(err, "classes %d is out of range [0, 65536]", c->n_classes);
    if (c->nsp && c->n_classes != 2)
        return tfm_err_set(err, "nsp (the next-sentence head) has 2 classes, not %d",
                           c->n_classes);
    if (c->pool_mean && (!c->n_classes || c->nsp))
        return tfm_err_set(err, "pooling mean is for a classifier (classes), not %s",
                           c->nsp ? "the next-sentence head" : "a model without one");
    return 0;
}

static void params(tfm_table_builder *tb, const tfm_model_config *c)
{
    size_t C = c->n_embd;
    if (c->pooler) {
        tfm_table_add(tb, "pooler.dense.weight", C, C, 1, 0);
        tfm_table_add(tb, "pooler.dense.bias", C, 0, 0, 0);
    }
    if (c->n_classes) {
        tfm_table_add(tb, cls_name(c, 0), (size_t)c->n_classes, C, 1, !c->nsp);
        tfm_table_add(tb, cls_name(c, 1), (size_t)c->n_classes, 0, 0, !c->nsp);
    }
}

static void layout(void *acts, const tfm_model_config *c, size_t N, float *base, size_t *off)
{
    class_acts *a = acts;
    size_t C = c->n_embd;
    if (c->n_classes) {
        tfm_acts_take(&a->pool_x, base, off, N * C);
        tfm_acts_take(&a->pool_u, base, off, N * C);
        tfm_acts_take(&a->pool_h, base, off, N * C);
        tfm_acts_take(&a->z, base, off, N * (size_t)c->n_classes);
        tfm_acts_take(&a->lse, base, off, N);
        tfm_acts_take(&a->values, base, off, N);
        tfm_acts_take_ids(&a->labels, base, off, N);
    }
    tfm_acts_take_ids(&a->cls_pos, base, off, N);
    tfm_acts_take_ids(&a->n_pool, base, off, N);
}

static int check(const tfm_model_config *c, const tfm_batch *b, tfm_err *err)
{
    int K = c->n_classes;
    if ((b->labels && K < 2) || (b->values && K != 1))
        return tfm_err_set(err, "%s given to a model with %d classifier outputs",
                           b->labels ? "class labels" : "regression values", K);
    if (b->cls_pos && !K && !c->pooler)
        return tfm_err_set(err, "pooled positions given to a model without a classifier");
    for (int r = 0; r < b->B; r++) {
        if (b->cls_pos) {
            int hi = b->lengths ? b->lengths[r] : b->T;
            if (b->cls_pos[r] < 0 || b->cls_pos[r] >= hi)
                return tfm_err_set(err, "pooled position %d of batch row %d is out of range "
                                   "[0, %d)", b->cls_pos[r], r, hi);
        }
        if (b->labels && (b->labels[r] < -1 || b->labels[r] >= K))
            return tfm_err_set(err, "label %d of batch row %d is out of range [-1, %d)",
                               (int)b->labels[r], r, K);
        if (b->values && !isfinite(b->values[r]))
            return tfm_err_set(err, "regression value of batch row %d is not finite", r);
    }
    return 0;
}

static void keep(void *acts, const tfm_batch *b)
{
    class_acts *a = acts;
    if (b->labels)
        memcpy(a->labels, b->labels, (size_t)b->B * sizeof *a->labels);
    if (b->values)
        memcpy(a->values, b->values, (size_t)b->B * sizeof *a->values);
    for (int r = 0; r < b->B; r++) {
        a->cls_pos[r] = b->cls_pos ? b->cls_pos[r] : 0;
        a->n_pool[r] = b->lengths ? b->lengths[r] : b->cls_pos ? b->cls_pos[r] + 1 : b->T;
    }
    a->has_labels = b->labels != NULL;
    a->has_values = b->values != NULL;
}

static int given(const tfm_batch *b)
{
    return b->labels || b->values;
}

static void rows(tfm_batch *p, const tfm_batch *b, int r0)
{
    p->cls_pos = b->cls_pos ? b->cls_pos + r0 : NULL;
    p->labels = b->labels ? b->labels + r0 : NULL;
    p->values = b->values ? b->values + r0 : NULL;
}

static long count(const tfm_model_config *c, const tfm_batch *b)
{
    long n = 0;
    if (c->n_classes >= 2 && b->labels)
        for (int r = 0; r < b->B; r++)
            n += b->labels[r] >= 0;
    else if (c->n_classes == 1 && b->values)
        n = b->B;
    return n;
}

static int forward(void *acts, tfm_model *m, const float *final, float *loss, long *n)
{
    const tfm_model_config *c = &m->cfg;
    class_acts *a = acts;
    int C = c->n_embd, B = m->B, T = m->T, K = c->n_classes;
    float *P = m->params;
    if (!K)
        return 0;
    for (int b = 0; b < B; b++) {
        float *x = a->pool_x + (size_t)b * C;
        if (!c->pool_mean) {
            memcpy(x, final + ((size_t)b * T + a->cls_pos[b]) * C, C * sizeof *final);
            continue;
        }
        memset(x, 0, C * sizeof *x);
        for (int t = 0; t < a->n_pool[b]; t++)
            tfm_add_inplace(x, final + ((size_t)b * T + t) * C, C);
        float inv = 1.0f / (float)a->n_pool[b];
        for (int i = 0; i < C; i++)
            x[i] *= inv;
    }
    const float *u = a->pool_x;
    if (c->pooler) {
        tfm_head_linear_forward(a->pool_h, a->pool_x, tfm_model_ptr(m, P, "pooler.dense.weight"),
                                tfm_model_ptr(m, P, "pooler.dense.bias"), B, C, C);
        if (c->pooler_act == TFM_POOL_TANH)
            for (size_t i = 0; i < (size_t)B * C; i++)
                a->pool_u[i] = tanhf(a->pool_h[i]);
        else
            tfm_act_forward(pool_act(c), a->pool_u, a->pool_h, (size_t)B * C);
        u = a->pool_u;
    }
    tfm_head_linear_forward(a->z, u, tfm_model_ptr(m, P, cls_name(c, 0)),
                            tfm_model_ptr(m, P, cls_name(c, 1)), B, C, K);
    double sum = 0.0;
    if (K >= 2 && a->has_labels) {
        sum = tfm_crossentropy_forward(a->lse, NULL, a->z, a->labels, B, K, 0.0f, n);
    } else if (K == 1 && a->has_values) {
        for (int b = 0; b < B; b++) {
            double d = (double)a->z[b] - a->values[b];
            sum += d * d;
        }
        *n = B;
    }
    if (!a->has_labels && !a->has_values)
        return 0;
    *loss = *n ? (float)(sum / *n) : 0.0f;
    return 1;
}

static void backward(void *acts, tfm_model *m, const float *final, float *dfinal, float *tmp,
                     float f)
{
    const tfm_model_config *c = &m->cfg;
    class_acts *a = acts;
    int C = c->n_embd, B = m->B, T = m->T, K = c->n_classes;
    float *G = m->grads, *P = m->params;
    (void)final;
    if (!K || (!a->has_labels && !a->has_values))
        return;
    if (K >= 2) {
        tfm_crossentropy_backward(a->z, a->lse, a->labels, B, K, 0.0f, f);
    } else if (m->rows_grad && m->rows_head == TFM_HEAD_CLASS) {
        memcpy(a->z, m->rows_grad, (size_t)B * sizeof *a->z); /* tfm_model_backward_rows */
    } else {
        for (int b = 0; b < B; b++)
            a->z[b] = 2.0f * (a->z[b] - a->values[b]) * f;
    }
    const float *u = c->pooler ? a->pool_u : a->pool_x;
    tfm_head_linear_backward(tmp, 0.0f, tfm_model_ptr(m, G, cls_name(c, 0)),
                             tfm_model_ptr(m, G, cls_name(c, 1)), a->z, u,
                             tfm_model_ptr(m, P, cls_name(c, 0)), B, C, K);
    float *dx = tmp;
    if (c->pooler) {
        if (c->pooler_act == TFM_POOL_TANH)
            for (size_t i = 0; i < (size_t)B * C; i++)
                tmp[i] *= 1.0f - a->pool_u[i] * a->pool_u[i];
        else
            tfm_act_backward(pool_act(c), tmp, tmp, a->pool_h, (size_t)B * C);
        tfm_head_linear_backward(a->pool_x, 0.0f, tfm_model_ptr(m, G, "pooler.dense.weight"),
                                 tfm_model_ptr(m, G, "pooler.dense.bias"), tmp, a->pool_x,
                                 tfm_model_ptr(m, P, "pooler.dense.weight"), B, C, C);
        dx = a->pool_x;
    }
    for (int b = 0; b < B; b++) {
        if (!c->pool_mean) {
            tfm_add_inplace(dfinal + ((size_t)b * T + a->cls_pos[b]) * C, dx + (size_t)b * C, C);
            continue;
        }
        /* dx is free after this row: scale it by 1/n once */
        float *d = dx + (size_t)b * C, inv = 1.0f / (float)a->n_pool[b];
        for (int i = 0; i < C; i++)
            d[i] *= inv;
        for (int t = 0; t < a->n_pool[b]; t++)
            tfm_add_inplace(dfinal + ((size_t)b * T + t) * C, d, C);
    }
}

static const float *out(const void *acts, const tfm_model *m, int *rows, int *cols)
{
    const class_acts *a = acts;
    if (!m->cfg.n_classes)
        return NULL;
    *rows = m->B;
    *cols = m->cfg.n_classes;
    return a->z;
}

const tfm_head_part tfm_head_class = {
    .name = "pooler and classifier",
    .loss = TFM_HEAD_CLASS,
    .acts_size = sizeof(class_acts),
    .has = has,
    .task = task,
    .check_config = check_config,
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
