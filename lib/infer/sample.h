/* Choosing the next token from a vector of logits.
 *
 * The filters are applied in one fixed order, so that combinations mean the
 * same thing every time:
 *
 *   1. repetition penalty  (over the distinct previous tokens: a positive
 *                           logit is divided by the penalty, a negative one
 *                           multiplied — CTRL / llama.cpp semantics)
 *   2. temperature         (logits / T; T == 0 means greedy)
 *   3. top-k               (keep the K most probable tokens)
 *   4. top-p               (keep the smallest set, most probable first, whose
 *                           probability reaches P)
 *   5. min-p               (keep tokens with p >= min_p * p_max)
 *   6. draw                (from what is left, renormalised)
 *
 * Probabilities in steps 3-5 are those of softmax(logits / T) over the tokens
 * still kept, so the distribution actually sampled is exactly "softmax of the
 * tempered logits restricted to the kept set".  Ties are broken towards the
 * lower token id, everywhere (argmax, top-k, top-p).
 *
 * Everything here is deterministic given the seed: the same seed, logits and
 * options give the same token.
 *
 * Ownership: a tfm_sampler owns its scratch; tfm_sampler_free releases it. */
#ifndef TFM_INFER_SAMPLE_H
#define TFM_INFER_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/rng.h"

typedef struct tfm_sample_opts {
    float temperature;    /* > 0; 0 = greedy (argmax) */
    uint32_t top_k;       /* 0 = off */
    float top_p;          /* in (0, 1]; 1 = off */
    float min_p;          /* in [0, 1]; 0 = off */
    float repeat_penalty; /* >= 1 usually; 1 = off */
    uint32_t repeat_last_n; /* penalise only the last N previous tokens; 0 = all */
} tfm_sample_opts;

/* temperature 1, everything else off. */
void tfm_sample_opts_default(tfm_sample_opts *o);
/* Checks ranges; the message names the option ("top-p must be in (0, 1]"). */
int tfm_sample_opts_check(const tfm_sample_opts *o, tfm_err *err);

/* One candidate of a filtered distribution. */
typedef struct tfm_cand {
    uint32_t id;
    float p;
} tfm_cand;

typedef struct tfm_sampler {
    tfm_sample_opts opts;
    tfm_rng rng;
    uint32_t vocab;
    float *logits;   /* [vocab] working copy */
    tfm_cand *cand;  /* [vocab] */
    uint8_t *seen;   /* [vocab] marks for the repetition penalty */
} tfm_sampler;

int tfm_sampler_init(tfm_sampler *s, const tfm_sample_opts *opts, uint32_t vocab,
                     uint64_t seed, tfm_err *err);
void tfm_sampler_free(tfm_sampler *s);

/* The distribution after steps 1-5: writes the kept candidates into
 * s->cand, probabilities summing to 1, and returns their number (>= 1).
 * They are most probable first when top-k or top-p is on; otherwise in id
 * order (sorting a 50k vocabulary per token would cost more than drawing).  logits[vocab] is not modified.  With temperature 0
 * the single argmax is kept.  An id whose logit is -inf is never a
 * candidate (tfm_gen's ids without text). */
size_t tfm_sampler_dist(tfm_sampler *s, const float *logits,
                        const uint32_t *prev, size_t n_prev);

/* Steps 1-6: the next token.  prev[n_prev] are the tokens so far (prompt
 * and generated) for the repetition penalty; may be NULL/0. */
uint32_t tfm_sampler_sample(tfm_sampler *s, const float *logits,
                            const uint32_t *prev, size_t n_prev);

/* ---- the pure building blocks, also used by beam search ---- */

/* Index of the largest value, the lowest index among equals. */
uint32_t tfm_argmax(const float *x, size_t n);
/* log(sum(exp(x))), computed stably. */
double tfm_logsumexp(const float *x, size_t n);
/* out[i] = x[i] - logsumexp(x); out may equal x. */
void tfm_log_softmax(const float *x, size_t n, float *out);
/* In place over logits[vocab]; each distinct token in prev counts once.
 * seen[vocab] is zeroed scratch and is left zeroed; ids >= vocab are ignored. */
void tfm_repeat_penalty(float *logits, uint32_t vocab, const uint32_t *prev,
                        size_t n_prev, float penalty, uint8_t *seen);
/* Sorts cand[n] by probability, descending, lower id first among equals. */
void tfm_cand_sort(tfm_cand *cand, size_t n);
/* On cand sorted descending: the number to keep for top-p (smallest prefix
 * whose cumulative probability reaches p; a relative tolerance of 1e-6
 * absorbs rounding), at least 1.  Probabilities need not sum to 1. */
size_t tfm_top_p_keep(const tfm_cand *cand, size_t n, float p);

#endif
