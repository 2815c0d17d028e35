/* Data parallelism over threads: a batch's rows split among n parts, part 0
 * the model itself and parts 1..n-1 replicas sharing its parameters
 * (tfm_model_init_replica), one OpenMP thread each with single-threaded
 * BLIS; their gradients are summed into the model's in a fixed order, so
 * the result depends on n, never on scheduling.  Small models gain from
 * it: each thread's products run whole on one core instead of being split
 * and synchronised.
 *
 *     tfm_replicas r;
 *     tfm_replicas_init(&r, &m, n);        // n - 1 more gradient arrays
 *     m.grads_ready = hook;                // optional, as for the model alone
 *     tfm_replicas_forward_backward(&r, &batch, scale, &loss, &err);
 *     tfm_replicas_free(&r);               // the model stays
 *
 * The model's grads_ready hook (an all-reduce overlapping backward,
 * train/dist.h) sees the sum: during the backward, part 0's thread adds in
 * the range every part has finished before handing it on; lo reaches 0
 * once all are added.  Logits are not kept with n ≥ 2. */
#ifndef TFM_TRAIN_REPLICAS_H
#define TFM_TRAIN_REPLICAS_H

#include <stddef.h>

#include "model/transformer.h"

enum { TFM_MAX_REPLICAS = 64 };

typedef struct tfm_replicas {
    tfm_model *m;        /* part 0; its grads receive the sum */
    int n;               /* parts (1: the model alone) */
    tfm_model *rep;      /* [n - 1] parts 1.. */
    /* private: backward's progress, per part, for the model's hook */
    size_t ready_lo[TFM_MAX_REPLICAS];
    int parts;           /* parts of the running step */
    tfm_grads_ready_fn hook;  /* the model's hook during a step */
    void *hook_ctx;
} tfm_replicas;

/* n parts (at most TFM_MAX_REPLICAS; n ≤ 1: the model alone) for m, which
 * must outlive r. */
void tfm_replicas_init(tfm_replicas *r, tfm_model *m, int n);
void tfm_replicas_free(tfm_replicas *r);

/* tfm_model_forward_backward_batch of m, the rows split among min(n, B)
 * parts: grads += scale · d(mean loss)/d(params), *loss the mean loss
 * (tfm_batch.head_total as there).  Errors name the whole batch's rows. */
int tfm_replicas_forward_backward(tfm_replicas *r, const tfm_batch *b, float scale,
                                  float *loss, tfm_err *err);

/* Bytes the replicas hold (their gradients and activations). */
size_t tfm_replicas_bytes(const tfm_replicas *r);

#endif
