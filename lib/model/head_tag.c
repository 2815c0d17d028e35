/* The token tagger: per position z = h·Wᵀ + w, cross-entropy against
 * tfm_batch.tags: HF's BertForTokenClassification, classifier.*, so that
 * a LoRA adapter's modules_to_save names HF's module; token_classifier.*
 * beside a sequence classifier (which has classifier.*), as every file
 * written before the rename. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "model/head.h"
#include "tensor/ops.h"

typedef struct tag_acts {
    float *z, *lse;   /* [N,n_tags], [N] */
    int32_t *tags;    /* [N] */
    int has_tags;
} tag_acts;

static int has(const tfm_model_config *c)
{
    return c->n_tags > 0;
}

static const char *tag_name(const tfm_model_config *c, int bias)
{
    if (c->n_classes && !c->nsp)
        return bias ? "token_classifier.bias" : "token_classifier.weight";
    return bias ? "classifier.bias" : "classifier.weight";
}

const char *tfm_head_legacy_name(const char *name, char *buf, size_t size)
{
    /* name, or a prefix ("adam.m.") and name */
    const char *c = strstr(name, "classifier.");
    if (!c || (c != name && c[-1] != '.') ||
        (strcmp(c, "classifier.weight") && strcmp(c, "classifier.bias")))
        return NULL;
    snprintf(buf, size, "%.*stoken_%s", (int)(c - name), name, c);
    return buf;
}

static int task(const tfm_model_config *c)
{
    return c->n_tags > 0;
}

static int check_config(const tfm_model_config *c, tfm_err *err)
{
    if (c->n_tags < 0 || c->n_tags > 1 << 16)
        return tfm_err_set(err, "tags %d is out of range [0, 65536]", c->n_tags);
    return 0;
}

static void params(tfm_table_builder *tb, const tfm_model_config *c)
{
    tfm_table_add(tb, tag_name(c, 0), (size_t)c->n_tags, (size_t)c->n_embd, 1, 1);
    tfm_table_add(tb, tag_name(c, 1), (size_t)c->n_tags, 0, 0, 1);
}

static void layout(void *acts, const tfm_model_config *c, size_t N, float *base, size_t *off)
{
    tag_acts *a = acts;
    tfm_acts_take(&a->z, base, off, N * (size_t)c->n_tags);
    tfm_acts_take(&a->lse, base, off, N);
    tfm_acts_take_ids(&a->tags, base, off, N);
}

static int check(const tfm_model_config *c, const tfm_batch *b, tfm_err *err)
{
    if (b->tags && !c->n_tags)
        return tfm_err_set(err, "tags given to a model without a tagger");
    if (b->tags)
        for (size_t i = 0, N = (size_t)b->B * b->T; i < N; i++)
            if (b->tags[i] < -1 || b->tags[i] >= c->n_tags)
                return tfm_err_set(err, "tag %d at batch row %zu, position %zu is out of "
                                   "range [-1, %d)", (int)b->tags[i], i / b->T, i % b->T,
                                   c->n_tags);
    return 0;
}

static void keep(void *acts, const tfm_batch *b)
{
    tag_acts *a = acts;
    if (b->tags)
        memcpy(a->tags, b->tags, (size_t)b->B * b->T * sizeof *a->tags);
    a->has_tags = b->tags != NULL;
}

static int given(const tfm_batch *b)
{
    return b->tags != NULL;
}

static void rows(tfm_batch *p, const tfm_batch *b, int r0)
{
    p->tags = b->tags ? b->tags + (size_t)r0 * b->T : NULL;
}

static long count(const tfm_model_config *c, const tfm_batch *b)
{
    long n = 0;
    for (size_t i = 0, N = (size_t)b->B * b->T; c->n_tags && b->tags && i < N; i++)
        n += b->tags[i] >= 0;
    return n;
}

static int forward(void *acts, tfm_model *m, const float *final, float *loss, long *n)
{
    const tfm_model_config *c = &m->cfg;
    tag_acts *a = acts;
    int N = m->B * m->T;
    float *P = m->params;
    tfm_head_linear_forward(a->z, final, tfm_model_ptr(m, P, tag_name(c, 0)),
                            tfm_model_ptr(m, P, tag_name(c, 1)), N, c->n_embd,
                            c->n_tags);
    if (!a->has_tags)
        return 0;
    double sum = tfm_crossentropy_forward(a->lse, NULL, a->z, a->tags, N, c->n_tags, 0.0f, n);
    *loss = *n ? (float)(sum / *n) : 0.0f;
    return 1;
}

static void backward(void *acts, tfm_model *m, const float *final, float *dfinal, float *tmp,
                     float f)
{
    const tfm_model_config *c = &m->cfg;
    tag_acts *a = acts;
    int N = m->B * m->T;
    float *G = m->grads, *P = m->params;
    (void)tmp;
    if (!a->has_tags)
        return;
    if (m->tag_grad) /* tfm_model_backward_positions: a value head's */
        memcpy(a->z, m->tag_grad, (size_t)N * sizeof *a->z);
    else
        tfm_crossentropy_backward(a->z, a->lse, a->tags, N, c->n_tags, 0.0f, f);
    tfm_head_linear_backward(dfinal, 1.0f, tfm_model_ptr(m, G, tag_name(c, 0)),
                             tfm_model_ptr(m, G, tag_name(c, 1)), a->z, final,
                             tfm_model_ptr(m, P, tag_name(c, 0)), N, c->n_embd,
                             c->n_tags);
}

static const float *out(const void *acts, const tfm_model *m, int *rows, int *cols)
{
    *rows = m->B * m->T;
    *cols = m->cfg.n_tags;
    return ((const tag_acts *)acts)->z;
}

const tfm_head_part tfm_head_tag = {
    .name = "tagger",
    .loss = TFM_HEAD_TAG,
    .acts_size = sizeof(tag_acts),
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
