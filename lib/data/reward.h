/* A reward model's scores (train.task reward's validation, tfm-eval
 * reward): the one output of a decoder's classifier (model.classes 1) on
 * the last token of each text, as TRL's RewardTrainer reads a
 * sequence-classification model: the text's ids are data/chat.h's, prompt
 * + answer + end-of-text.
 *
 *     tfm_reward_batch rb;  tfm_reward_batch_init(&rb, 2 * n, T, pad);
 *     tfm_reward_batch_fill(&rb, ids, len, rows, &b);   // rows ≤ 2n
 *     tfm_reward_score(&m, ids, len, n, batch, scores, &err);
 *
 * Ownership: the batch owns its arrays. */
#ifndef TFM_DATA_REWARD_H
#define TFM_DATA_REWARD_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "model/transformer.h"

typedef struct tfm_reward_batch {
    int rows, T;
    int32_t pad;
    int32_t *x;      /* [rows, T] */
    int *cls_pos;    /* [rows]: each text's last token */
    float *values;   /* [rows] zeros: the classifier's "targets", whose loss a
                        reward's backward ignores (tfm_model_backward_rows) */
} tfm_reward_batch;

void tfm_reward_batch_init(tfm_reward_batch *rb, int rows, int T, int32_t pad);
void tfm_reward_batch_free(tfm_reward_batch *rb);
/* The texts ids[0..n) (len[i] ids each, 1 ≤ len[i] ≤ T) padded to the
 * longest into *b, with the classifier's positions and values. */
void tfm_reward_batch_fill(tfm_reward_batch *rb, const uint32_t *const *ids, const int *len,
                           int n, tfm_batch *b);

/* Whether m is a reward model: a decoder with one classifier output;
 * else an error naming what it is. */
int tfm_reward_model_check(const tfm_model_config *c, const char *name, tfm_err *err);
/* scores[i] = m's reward of text i of ids[0..n), batch texts a forward
 * (m in evaluation mode). */
int tfm_reward_score(tfm_model *m, const uint32_t *const *ids, const int *len, size_t n,
                     int batch, int32_t pad, float *scores, tfm_err *err);

#endif
