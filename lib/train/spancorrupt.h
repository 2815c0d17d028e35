/* T5's span corruption (train.task span-corruption; spancorrupt.c, used by
 * task_spancorrupt.c), as google-research/text-to-text-transfer-transformer's
 * random_spans_noise_mask, noise_span_to_unique_sentinel and
 * random_spans_helper do it:
 *
 *   a window of `length` raw tokens gets round(length·density) noise tokens
 *   (at least 1, at most length - 1) in round(noise / mean_span) spans (at
 *   least 1), non-noise and noise spans alternating, non-noise first, the
 *   cuts between them drawn uniformly;
 *   inputs  = the non-noise tokens, each noise span replaced by one sentinel;
 *   targets = the noise tokens, each non-noise span replaced by one sentinel.
 *
 * Sentinel i is <extra_id_i>, which T5 numbers from the top of the vocabulary
 * down; the caller looks them up.  With T5's mask (ending with noise) the
 * targets are [s0, span0, s1, span1, ...] and s_i stands for span i in the
 * inputs.  The EOS both get is the caller's.
 *
 * The T5 study's other noise (its Tables 4 and 5; train.noise), each on an
 * i.i.d. mask (every token noise with probability density, T5's
 * iid_noise_mask):
 *   iid   tfm_span_corrupt on the i.i.d. mask: each run of noise tokens one
 *         sentinel ("i.i.d. noise, replace spans", T5's iid_15_u_u);
 *   drop  inputs = the non-noise tokens, targets = the noise tokens, no
 *         sentinels ("drop corrupted tokens", iid_15_d_d);
 *   bert  each noise token replaced by a mask (or, with random_prob, a
 *         random token), the target the whole original ("BERT-style",
 *         iid_15_r10s90_f; "MASS-style" with random_prob 0). */
#ifndef TFM_TRAIN_SPANCORRUPT_H
#define TFM_TRAIN_SPANCORRUPT_H

#include <stddef.h>
#include <stdint.h>

#include "base/rng.h"

/* The noise tokens and noise spans of a window of length ≥ 2 tokens.
 * Rounding is TensorFlow's (float32, half to even).  Unlike T5, the spans
 * are at most the non-noise tokens, so that every span is non-empty at
 * high densities. */
void tfm_span_counts(size_t length, double density, double mean_span, size_t *noise,
                     size_t *spans);

/* The lengths of a window of `length` raw tokens once corrupted, each with
 * its EOS: non-noise + spans + 1 inputs, noise + spans + 1 targets. */
void tfm_span_lengths(size_t length, double density, double mean_span, size_t *inputs,
                      size_t *targets);

/* random_spans_helper: the longest raw window whose inputs (with EOS) fit
 * inputs_length, and its targets' length in *targets_length (may be NULL).
 * 0 when not even a window of 2 fits. */
size_t tfm_span_raw_length(size_t inputs_length, double density, double mean_span,
                           size_t *targets_length);

/* A random noise mask of mask[0..length), length ≥ 2: 1 noise, 0 not. */
void tfm_span_noise_mask(unsigned char *mask, size_t length, double density,
                         double mean_span, tfm_rng *rng);

/* The inputs and targets of tokens[0..length) under any mask (without
 * EOS); sentinel[i] is <extra_id_i>, n_sentinel of them.  Returns -1 when
 * the mask has more spans of either kind than sentinels. */
int tfm_span_corrupt(const int32_t *tokens, const unsigned char *mask, size_t length,
                     const int32_t *sentinel, size_t n_sentinel, int32_t *inputs,
                     size_t *n_inputs, int32_t *targets, size_t *n_targets);

/* An i.i.d. noise mask of mask[0..length): each token noise with
 * probability density. */
void tfm_noise_iid_mask(unsigned char *mask, size_t length, double density, tfm_rng *rng);

/* The longest prefix of mask[0..length) that tfm_span_corrupt can encode
 * with n_sentinel sentinels: its runs of noise and of non-noise number at
 * most n_sentinel each. */
size_t tfm_span_fit(const unsigned char *mask, size_t length, size_t n_sentinel);

/* Drop corrupted tokens: inputs = the tokens where mask is 0, targets = those
 * where it is 1, in order (without EOS). */
void tfm_noise_drop(const int32_t *tokens, const unsigned char *mask, size_t length,
                    int32_t *inputs, size_t *n_inputs, int32_t *targets, size_t *n_targets);

/* A random token for replacement noise: uniform over the ids [0, V) with
 * special[id] == 0 (special may be NULL); at least one must be. */
int32_t tfm_noise_random_token(const unsigned char *special, uint32_t V, tfm_rng *rng);

/* BERT-style corruption into out[0..length): each token where mask is 1
 * becomes a random token (tfm_noise_random_token) with probability
 * random_prob, else mask_id; the others are copied. */
void tfm_noise_replace(const int32_t *tokens, const unsigned char *mask, size_t length,
                       int32_t mask_id, double random_prob, const unsigned char *special,
                       uint32_t V, tfm_rng *rng, int32_t *out);

#endif
