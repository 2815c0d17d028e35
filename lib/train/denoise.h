/* BART's noise (train.task denoise, task_denoise.c), as fairseq's
 * DenoisingDataset does it with BART's settings (mask_length span-poisson,
 * replace_length 1, permute_sentences 1, no rotation):
 *
 *   sentence permutation: the window's sentences in a random order
 *   (tfm_denoise_sentences, tfm_denoise_permute);
 *   text infilling: ceil(n x mask_ratio) tokens planned in spans whose
 *   lengths are Poisson(lambda), drawn until they reach that budget (the
 *   last one cut to it); each span of length ≥ 1 starts at a distinct
 *   uniform position, its first token becomes one mask (or, with
 *   random_prob, a random token) and the rest are deleted; spans run past
 *   the end are cut there, and spans that overlap merge (so fewer tokens
 *   than planned may be covered: fairseq's behaviour); each length-0 span
 *   inserts one mask (or random token) at a uniform position instead.
 *
 * The target is the original window; the caller adds EOS.  Draws come from
 * the rng passed in only. */
#ifndef TFM_TRAIN_DENOISE_H
#define TFM_TRAIN_DENOISE_H

#include <stddef.h>
#include <stdint.h>

#include "base/rng.h"

#define TFM_POISSON_MAX 128

/* The noise of one task: its parameters and the scratch of one window of at
 * most max_len tokens.  init/free pair; the caller keeps special[] alive. */
typedef struct tfm_denoise {
    double mask_ratio, random_prob;
    double cdf[TFM_POISSON_MAX]; /* Poisson(lambda) cut at TFM_POISSON_MAX - 1 */
    int n_cdf;
    int32_t mask_id;
    const unsigned char *special; /* [V]: never drawn as a random token (or NULL) */
    uint32_t V;
    size_t max_len;
    size_t *start, *len, *pos;    /* [max_len] */
    unsigned char *rnd, *mark;    /* [max_len] */
} tfm_denoise;

/* A plan of text infilling for n tokens: spans (start, len ≥ 1, whether
 * the token that stands for it is random) and n_inserts length-0 spans. */
typedef struct tfm_infill_plan {
    size_t n_spans, n_inserts;
    const size_t *start, *len;
    const unsigned char *random; /* [n_spans] */
} tfm_infill_plan;

void tfm_denoise_init(tfm_denoise *d, double mask_ratio, double lambda, double random_prob,
                      int32_t mask_id, const unsigned char *special, uint32_t V,
                      size_t max_len);
void tfm_denoise_free(tfm_denoise *d);

/* One span length from Poisson(lambda). */
size_t tfm_denoise_span_length(const tfm_denoise *d, tfm_rng *rng);

/* ceil(n x mask_ratio) (a rounding error of 1e-9 forgiven: 10 x 0.3 is 3). */
size_t tfm_denoise_budget(const tfm_denoise *d, size_t n);

/* A random plan for n ≤ max_len tokens (points into d's scratch, valid
 * until the next call). */
void tfm_denoise_plan(tfm_denoise *d, size_t n, tfm_rng *rng, tfm_infill_plan *p);

/* Applies plan p to tokens[0..n) into out, returning its length: at most
 * max_out, inserts beyond that left out (the source must fit the model).
 * The rng draws the random tokens and the inserts' positions. */
size_t tfm_denoise_apply(tfm_denoise *d, const int32_t *tokens, size_t n,
                         const tfm_infill_plan *p, size_t max_out, tfm_rng *rng,
                         int32_t *out);

/* Plan and apply: text infilling of tokens[0..n) into out[0..max_out). */
size_t tfm_denoise_infill(tfm_denoise *d, const int32_t *tokens, size_t n, size_t max_out,
                          tfm_rng *rng, int32_t *out);

/* The sentences of tokens[0..n): each ends after the last of a run of
 * tokens with is_end[id] set, and the window's last piece is one too.
 * ends[k] is one past sentence k's last token; returns their number. */
size_t tfm_denoise_sentences(const int32_t *tokens, size_t n, const unsigned char *is_end,
                             size_t *ends);

/* Sentence permutation of tokens[0..n) into out[0..n): the sentences in a
 * uniformly random order.  Returns the number of sentences. */
size_t tfm_denoise_permute(tfm_denoise *d, const int32_t *tokens, size_t n,
                           const unsigned char *is_end, tfm_rng *rng, int32_t *out);

#endif
