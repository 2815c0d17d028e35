/* Adam and AdamW over a model's flat parameter array, and gradient clipping
 * by global norm.
 *
 * The optimizer works on the layout of tfm_model (one float array for the
 * parameters, one for the gradients, a table of named slices with a `decay`
 * flag): weight decay touches only the slices flagged as matrices.
 *
 *   AdamW (decoupled, Loshchilov & Hutter):  p -= lr·wd·p, then the Adam step
 *   Adam with weight decay (L2):             g += wd·p,    then the Adam step
 *   Adam step, t = 1, 2, ...:  m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
 *                              p -= lr/(1-β1^t) · m / (√v/√(1-β2^t) + ε)
 * which is PyTorch's formulation, so runs can be compared with it.
 *
 * Ownership: tfm_adam owns m and v; tfm_adam_free releases them. */
#ifndef TFM_TRAIN_OPTIM_H
#define TFM_TRAIN_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "model/transformer.h"

typedef struct tfm_adam {
    float *m, *v;   /* first and second moments, n floats each */
    size_t n;
    int64_t t;      /* steps taken; bias correction uses t after increment */
    int decoupled;  /* 1: AdamW; 0: Adam with L2 weight decay */
    double beta1, beta2, eps, weight_decay;
} tfm_adam;

/* The moments' floats for a table: its tensors not frozen, packed each
 * on a 16-float boundary; when none is frozen, at the table's own offsets
 * (a model's n_params). */
size_t tfm_adam_size(const tfm_param *table, int n_table);

/* The same tensors as a table of their own over that layout (the state
 * file's); caller frees.  *n: its entries. */
tfm_param *tfm_adam_table(const tfm_param *table, int n_table, int *n);

/* Moments zeroed, t = 0. */
void tfm_adam_init(tfm_adam *o, size_t n, int decoupled, double beta1, double beta2,
                   double eps, double weight_decay);
void tfm_adam_free(tfm_adam *o);

/* One step at learning rate lr over params/grads described by table
 * (frozen tensors skipped; moments as tfm_adam_size lays them out), with
 * the gradient taken as grad_scale · grads (the clipping factor, applied in
 * the same pass instead of a separate sweep over the gradients). */
void tfm_adam_step(tfm_adam *o, float *params, const float *grads, const tfm_param *table,
                   int n_table, double lr, float grad_scale);

/* √(Σ g²), summed in double in fixed chunks so that the result does not depend
 * on the number of threads (resumed runs must match bit for bit). */
double tfm_grad_norm(const float *g, size_t n);
/* tfm_grad_norm of m->grads, to the bit, reading only the runs that
 * backward writes (tfm_model_grad_span): a frozen tensor's floats are
 * taken as the zeros they are, never read, so their pages stay untouched. */
double tfm_grad_norm_model(const tfm_model *m);

/* PyTorch's clip_grad_norm_ factor: max_norm / (norm + 1e-6) when that is
 * < 1, else 1 (also 1 when max_norm <= 0 or the norm is not finite). */
float tfm_grad_clip_factor(double norm, double max_norm);

/* Scales g so that its norm is at most max_norm (PyTorch's clip_grad_norm_:
 * factor max_norm / (norm + 1e-6), applied only when it is < 1).  Returns the
 * norm before clipping.  max_norm <= 0 only measures. */
double tfm_grad_clip(float *g, size_t n, double max_norm);

#endif
