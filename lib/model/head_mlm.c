/* BERT's MLM head: a transform of the stack's output before the LM decoder
 * (tied to wte), at the positions whose target is not -1 only:
 *   logits = LN(act(h·Dᵀ + d))·wteᵀ + cls.predictions.bias
 * (HF BertOnlyMLMHead); D maps C to the embeddings' width E (C, or a
 * factorised embedding's: ALBERT's and ELECTRA's generator's).  The LM
 * head (transformer.c) computes the logits and the loss from the rows this
 * part hands it. */
#include "config.h"

#include <string.h>

#include "model/head.h"
#include "tensor/ops.h"

typedef struct mlm_acts {
    int32_t *row, *tgt;                 /* [N] chosen positions, their targets */
    float *x, *h, *g, *ln, *mean, *rstd; /* [N,C], [N,E]x3, [N]x2 */
} mlm_acts;

#define DENSE_W "cls.predictions.transform.dense.weight"
#define DENSE_B "cls.predictions.transform.dense.bias"
#define LN_W "cls.predictions.transform.LayerNorm.weight"
#define LN_B "cls.predictions.transform.LayerNorm.bias"

static int has(const tfm_model_config *c)
{
    return c->mlm_head;
}

static int check_config(const tfm_model_config *c, tfm_err *err)
{
    if (c->head_bias && c->mlm_head)
        return tfm_err_set(err, "head_bias with mlm_head: the MLM head has its own bias "
                                "(cls.predictions.bias)");
    return 0;
}

static void params(tfm_table_builder *tb, const tfm_model_config *c)
{
    size_t C = c->n_embd, E = tfm_model_config_emb_dim(c);
    tfm_table_add(tb, DENSE_W, E, C, 1, 0);
    tfm_table_add(tb, DENSE_B, E, 0, 0, 0);
    tfm_table_add(tb, LN_W, E, 0, 0, 0);
    tfm_table_add(tb, LN_B, E, 0, 0, 0);
    tfm_table_add(tb, "cls.predictions.bias", (size_t)c->vocab_size, 0, 0, 0);
}

static void layout(void *acts, const tfm_model_config *c, size_t N, float *base, size_t *off)
{
    mlm_acts *a = acts;
    size_t C = c->n_embd, E = tfm_model_config_emb_dim(c);
    tfm_acts_take_ids(&a->row, base, off, N);
    tfm_acts_take_ids(&a->tgt, base, off, N);
    tfm_acts_take(&a->x, base, off, N * C);
    tfm_acts_take(&a->h, base, off, N * E);
    tfm_acts_take(&a->g, base, off, N * E);
    tfm_acts_take(&a->ln, base, off, N * E);
    tfm_acts_take(&a->mean, base, off, N);
    tfm_acts_take(&a->rstd, base, off, N);
}

/* ln = LN(act(h·Dᵀ + d)) of the rows whose target is not -1 (every row
 * without targets).  Returns the rows. */
static int lm_forward(void *acts, tfm_model *m, const float *final, const int32_t *targets,
                      const float **x, const int32_t **tgt)
{
    const tfm_model_config *c = &m->cfg;
    mlm_acts *a = acts;
    int C = c->n_embd, E = tfm_model_config_emb_dim(c), R = 0, N = m->B * m->T;
    float *P = m->params;
    for (int i = 0; i < N; i++)
        if (!targets || targets[i] != -1) {
            a->row[R] = i;
            a->tgt[R] = targets ? targets[i] : -1;
            memcpy(a->x + (size_t)R * C, final + (size_t)i * C, C * sizeof *final);
            R++;
        }
    *x = a->ln;
    *tgt = targets ? a->tgt : NULL;
    if (!R)
        return 0;
    tfm_head_linear_forward(a->h, a->x, tfm_model_ptr(m, P, DENSE_W),
                            tfm_model_ptr(m, P, DENSE_B), R, C, E);
    tfm_act_forward(tfm_model_block(c).act, a->g, a->h, (size_t)R * E);
    tfm_layernorm_forward(a->ln, a->mean, a->rstd, a->g, tfm_model_ptr(m, P, LN_W),
                          tfm_model_ptr(m, P, LN_B), R, E, c->ln_eps);
    return R;
}

/* dx [R,E]: d ln in; d x, added into the rows' positions of dfinal
 * (= over every row). */
static void lm_backward(void *acts, tfm_model *m, int R, float *dx, float *dfinal)
{
    const tfm_model_config *c = &m->cfg;
    mlm_acts *a = acts;
    int C = c->n_embd, E = tfm_model_config_emb_dim(c), N = m->B * m->T;
    float *G = m->grads, *P = m->params;
    /* ln is free now: it receives d g, then d h */
    float *dg = a->ln;
    memset(dg, 0, (size_t)R * E * sizeof *dg);
    tfm_layernorm_backward(dg, tfm_model_ptr(m, G, LN_W), tfm_model_ptr(m, G, LN_B), dx, a->g,
                           tfm_model_ptr(m, P, LN_W), a->mean, a->rstd, R, E);
    tfm_act_backward(tfm_model_block(c).act, dg, dg, a->h, (size_t)R * E);
    /* x is read for dW before it receives d x ([R, C]) */
    tfm_head_linear_backward(NULL, 0.0f, tfm_model_ptr(m, G, DENSE_W),
                             tfm_model_ptr(m, G, DENSE_B), dg, a->x,
                             tfm_model_ptr(m, P, DENSE_W), R, C, E);
    tfm_head_linear_backward(a->x, 0.0f, NULL, NULL, dg, a->x, tfm_model_ptr(m, P, DENSE_W), R,
                             C, E);
    memset(dfinal, 0, (size_t)N * C * sizeof *dfinal);
    for (int r = 0; r < R; r++)
        tfm_add_inplace(dfinal + (size_t)a->row[r] * C, a->x + (size_t)r * C, C);
}

const tfm_head_part tfm_head_mlm = {
    .name = "MLM",
    .loss = TFM_HEAD_LM,
    .acts_size = sizeof(mlm_acts),
    .has = has,
    .check_config = check_config,
    .params = params,
    .layout = layout,
    .lm_forward = lm_forward,
    .lm_bias = "cls.predictions.bias",
    .lm_backward = lm_backward,
};
