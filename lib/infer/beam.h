/* Beam search over an abstract model.
 *
 * The model is seen through two callbacks on "cache slots" (one key/value
 * cache per slot): `step` appends one token to each of n slots and returns
 * the next-token log-probabilities of each, and `copy_slot` makes one
 * slot's cache a copy of another's (a hypothesis that forks).  A search
 * owns `beam` slots slot0..slot0+beam-1; the caller has already run the
 * prompt (or the start token over a source) into slot0 and passes its
 * next-token log-probabilities as `first`.
 *
 * Several independent searches (several prompts or sources) run together
 * with tfm_beam_search_many: each step gathers the live hypotheses of every
 * unfinished search into one call of `step` (one read of the weights for
 * all), and a search that has finished drops out of the steps.  Each search
 * gives exactly what it gives alone (the selection is per search; only the
 * batching of `step` is shared).
 *
 * Scores: a hypothesis carries S = sum of log p of its generated tokens;
 * finished hypotheses (end-of-text chosen, or the length limit reached) are
 * ranked by S / lp(L), L = number of generated tokens (end-of-text
 * included), with lp(L) = L^alpha (TFM_LENPEN_POWER, the default) or GNMT's
 * ((5 + L) / 6)^alpha (TFM_LENPEN_GNMT).  At each step the 2*beam best extensions of the live
 * hypotheses (by S) are scanned in order: one ending in end-of-text becomes
 * finished, the others live on until `beam` are live.  The search stops when
 * no live hypotheses are left, or when `nbest` are finished and no live one
 * can still beat the nbest-th: S only decreases, so S / L^alpha is bounded
 * by S / L'^alpha at the best reachable length L' (max_len for alpha > 0),
 * and this stop never changes the result (both penalties are monotone in L).
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

typedef enum tfm_lenpen {
    TFM_LENPEN_POWER, /* L^alpha */
    TFM_LENPEN_GNMT,  /* ((5 + L) / 6)^alpha (Wu et al. 2016) */
} tfm_lenpen;

typedef struct tfm_beam_opts {
    int beam;        /* >= 1; default 4 */
    int nbest;       /* 1 <= nbest <= beam; default 1 */
    float alpha;     /* length penalty exponent; default 0.6 */
    tfm_lenpen lenpen; /* default TFM_LENPEN_POWER */
    int max_len;     /* new tokens at most, >= 1 */
    int64_t eos;     /* end-of-text id, -1 if none */
    int64_t forced_last; /* the token every hypothesis that reaches max_len
                            ends with: its last step considers only it
                            (HF's forced_eos_token_id), its log p counting
                            0 in the score as HF's processor makes it;
                            -1 (default): none */
    int len_extra;   /* prompt tokens the length penalty counts as the
                        hypothesis's (HF's forced first token, which its
                        generate scores as generated); default 0 */
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

/* The length-normalised score of a hypothesis: sum / lp(len). */
double tfm_beam_score(double sum, size_t len, float alpha, tfm_lenpen lenpen);

/* first[vocab]: next-token log-probs after the prompt (slot 0); slots
 * 0..beam-1. */
int tfm_beam_search(const tfm_beam_model *model, const tfm_beam_opts *opts,
                    const float *first, tfm_beam_result *out, tfm_err *err);

/* One of several searches run together. */
typedef struct tfm_beam_task {
    const float *first; /* [vocab]: next-token log-probs in slot0 */
    int slot0;          /* its slots: slot0 .. slot0 + beam - 1, disjoint
                           from every other task's */
    int max_len;        /* new tokens at most (>= 1); 0: opts->max_len */
} tfm_beam_task;

/* Runs tasks[0..n) together; out[i] is task i's result (its `steps`: the
 * steps it took part in).  On error every out[i] is empty. */
int tfm_beam_search_many(const tfm_beam_model *model, const tfm_beam_opts *opts,
                         const tfm_beam_task *tasks, size_t n, tfm_beam_result *out,
                         tfm_err *err);
void tfm_beam_result_free(tfm_beam_result *r);

#endif
