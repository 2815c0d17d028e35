/* The task heads: each a part of its own behind one small interface, so
 * that transformer.c walks a table of parts instead of naming each head.
 * Internal to lib/model (transformer.c and the lib/model/head_*.c files).
 *
 * A new head is one file (lib/model/head_<name>.c defining a
 * tfm_head_part, listed in lib/model/local.am) and one entry in
 * tfm_head_parts (head.c); around it, its config field (transformer.h,
 * with its config key) and, when it has targets, a tfm_head loss slot and
 * its tfm_batch fields (which its rows, check, keep, given and count
 * read).
 *
 * A part, for a config that has it (has; check_config and check run for
 * every config and batch, so that a field or targets for an absent head
 * are errors):
 *   params    adds its tensors to the parameter table (after the LM head,
 *             in tfm_head_parts order: the table order of model files);
 *   layout    lays out its activations (tfm_acts_take; the first pass,
 *             with base NULL, only counts), planned once per shape;
 *   check     the batch's targets for it, before any work;
 *   keep      copies what its forward and backward need of the batch;
 *   forward   reads the stack's output final [B·T, C]; with targets, the
 *             mean loss and the items it ran over;
 *   backward  adds its gradient of final into dfinal [B·T, C] (the LM
 *             head's, or zeros, are already there);
 *   out       its outputs for tfm_model_head_out.
 * A part whose loss is TFM_HEAD_LM transforms the LM head's input instead
 * (BERT's MLM transform: lm_forward, lm_bias, lm_backward). */
#ifndef TFM_MODEL_HEAD_H
#define TFM_MODEL_HEAD_H

#include <stddef.h>
#include <stdint.h>

#include "model/transformer.h"

/* ---- what a part may use of the model ----------------------------------- */

typedef struct tfm_table_builder tfm_table_builder;

/* Adds tensor name [d0, d1] (d1 0: a vector) to the table being built;
 * lora_trained: still trained when the model has LoRA adapters (a task head
 * fine-tuning adds, PEFT's modules_to_save). */
void tfm_table_add(tfm_table_builder *tb, const char *name, size_t d0, size_t d1, int decay,
                   int lora_trained);

/* Takes n floats (or ids) of the activations at *off (64-byte aligned). */
void tfm_acts_take(float **ptr, float *base, size_t *off, size_t n);
void tfm_acts_take_ids(int32_t **ptr, float *base, size_t *off, size_t n);

/* The tensor name in base (m->params or m->grads); NULL when absent, or
 * when base is the gradients and the tensor frozen (backward skips it). */
float *tfm_model_ptr(const tfm_model *m, float *base, const char *name);

/* out[N,O] = inp[N,I]·Wᵀ + b, W [O,I] (an nn.Linear: the heads' HF layout) */
void tfm_head_linear_forward(float *out, const float *inp, const float *W, const float *b,
                             int N, int I, int O);
/* dW += doutᵀ·inp, db += Σ dout (NULL: frozen), dinp = dout·W + beta·dinp
 * (NULL: none; may alias inp, which is read first) */
void tfm_head_linear_backward(float *dinp, float beta, float *dW, float *db,
                              const float *dout, const float *inp, const float *W, int N,
                              int I, int O);

/* ---- the interface ------------------------------------------------------- */

typedef struct tfm_head_part {
    const char *name;    /* in messages: "the %s head" */
    tfm_head loss;       /* the loss it computes (TFM_HEAD_LM: a transform
                            of the LM head's input) */
    size_t acts_size;    /* bytes of its activation struct */
    int (*has)(const tfm_model_config *c);
    /* A fine-tuning head: without targets the LM logits are skipped.  NULL:
     * never. */
    int (*task)(const tfm_model_config *c);
    /* its config fields (NULL: nothing to check) */
    int (*check_config)(const tfm_model_config *c, tfm_err *err);
    void (*params)(tfm_table_builder *tb, const tfm_model_config *c);
    void (*layout)(void *acts, const tfm_model_config *c, size_t N, float *base, size_t *off);
    /* NULL for the LM transform (the LM's targets are the core's): */
    int (*check)(const tfm_model_config *c, const tfm_batch *b, tfm_err *err);
    void (*keep)(void *acts, const tfm_batch *b);
    int (*given)(const tfm_batch *b);          /* the batch has its targets */
    /* p = rows r0.. of b (tfm_batch_rows): its fields of p, offset */
    void (*rows)(tfm_batch *p, const tfm_batch *b, int r0);
    long (*count)(const tfm_model_config *c, const tfm_batch *b); /* its items */
    /* 1 with targets: *loss their mean, *n how many */
    int (*forward)(void *acts, tfm_model *m, const float *final, float *loss, long *n);
    /* f: d(total loss)/d(each item's loss); tmp: [B·T, C] scratch */
    void (*backward)(void *acts, tfm_model *m, const float *final, float *dfinal, float *tmp,
                     float f);
    const float *(*out)(const void *acts, const tfm_model *m, int *rows, int *cols);
    /* The LM transform: the rows the LM head reads ([R, C] in *x, their
     * targets in *tgt, NULL without), R returned; the logits' bias; and
     * from dx [R, C] (the gradient of *x, overwritten), dfinal. */
    int (*lm_forward)(void *acts, tfm_model *m, const float *final, const int32_t *targets,
                      const float **x, const int32_t **tgt);
    const char *lm_bias;
    void (*lm_backward)(void *acts, tfm_model *m, int R, float *dx, float *dfinal);
} tfm_head_part;

/* Every part, in table order, NULL-terminated (head.c). */
enum { TFM_HEAD_PARTS_MAX = 8 };
extern const tfm_head_part *const tfm_head_parts[];

extern const tfm_head_part tfm_head_mlm, tfm_head_class, tfm_head_tag, tfm_head_span;

#endif
