/* Beam search over an abstract model.
 *
 * The model is seen through two callbacks on "cache slots" 0..beam-1 (one
 * key/value cache per slot): `step` appends one token to each of n slots and
 * returns the next-token log-probabilities of each, and `copy_slot` makes one
 * slot's cache a copy of another's (a hypothesis that forks).  The caller
 * has already run the prompt into slot 0 and passes its next-token
 * log-probabilities as `first`.
 *
 * Scores: a hypothesis carries S = sum of log p of its generated tokens;
 * finished hypotheses (end-of-text chosen, or the length limit reached) are
 * ranked by S / L^alpha, L = number of generated tokens (end-of-text
 * included).  At each step the 2*beam best extensions of the live
 * hypotheses (by S) are scanned in order: one ending in end-of-text becomes
 * finished, the others live on until `beam` are live.  The search stops when
 * no live hypotheses are left, or when `nbest` are finished and no live one
 * can still beat the nbest-th: S only decreases, so S / L^alpha is bounded
 * by S / L'^alpha at the best reachable length L' (max_len for alpha > 0),
 * and this stop never changes the result.
 *
 * Ownership: tfm_beam_result owns its arrays; free with tfm_beam_result_free. */
#ifndef TFM_INFER_BEAM_H
#define TFM_INFER_BEAM_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef struct tfm_beam_model {
    void *ctx;
    uint32_t vocab;
    /* For i < n: append tokens[i] to slot slots[i]'s cache and write the
     * log-probabilities of the next token to logprobs[i * vocab ...]. */
    int (*step)(void *ctx, size_t n, const uint32_t *tokens, const int *slots,
                float *logprobs, tfm_err *err);
    /* Slot dst becomes a copy of slot src (dst != src). */
    int (*copy_slot)(void *ctx, int dst, int src, tfm_err *err);
} tfm_beam_model;

typedef struct tfm_beam_opts {
    int beam;        /* >= 1; default 4 */
    int nbest;       /* 1 <= nbest <= beam; default 1 */
    float alpha;     /* length penalty exponent; default 0.6 */
    int max_len;     /* new tokens at most, >= 1 */
    int64_t eos;     /* end-of-text id, -1 if none */
} tfm_beam_opts;

void tfm_beam_opts_default(tfm_beam_opts *o);

typedef enum tfm_finish {
    TFM_FINISH_EOS,    /* end-of-text token */
    TFM_FINISH_LENGTH, /* max tokens or the context limit */
    TFM_FINISH_STOP,   /* a stop string */
} tfm_finish;

const char *tfm_finish_name(tfm_finish f);

typedef struct tfm_beam_hyp {
    uint32_t *tokens;  /* generated tokens (end-of-text included if chosen) */
    float *logprobs;   /* log p of each */
    size_t len;
    double sum;        /* S */
    double score;      /* S / len^alpha */
    tfm_finish finish;
} tfm_beam_hyp;

typedef struct tfm_beam_result {
    tfm_beam_hyp *hyps; /* best first */
    size_t n;
    size_t steps;       /* calls of model->step */
} tfm_beam_result;

/* first[vocab]: next-token log-probs after the prompt (slot 0). */
int tfm_beam_search(const tfm_beam_model *model, const tfm_beam_opts *opts,
                    const float *first, tfm_beam_result *out, tfm_err *err);
void tfm_beam_result_free(tfm_beam_result *r);

#endif
