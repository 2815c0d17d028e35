/* Scoring text with a language model: the engine under tfm-eval.
 *
 *     tfm_eval e;
 *     tfm_eval_open(&e, "run/model.safetensors", NULL, 8, &err);   // batch of 8
 *     tfm_eval_seq s = {ids, n, n_target};   // score the last n_target ids
 *     tfm_eval_score(&e, &s, 1, NULL, &err); // s.logprob, s.greedy
 *     tfm_eval_close(&e);
 *
 * One engine serves the three evaluations: a perplexity window, a
 * multiple-choice ending and a LAMBADA target are all "a sequence whose
 * last k tokens are scored".  Sequences are run through the inference
 * forward (model/forward.h) several at a time, packed (no padding), and
 * the LM head runs on the rows before scored tokens only, a fixed number
 * of rows at a time: a sequence's scores do not depend on its batch, and
 * long contexts hold neither T×T attention nor T×V logits.  A prefix LM reads each sequence's unscored history as its
 * prefix (full attention over it), as it was trained (the first
 * perplexity window's history is one token, where the two masks agree).  Sequences longer than the context keep their last context
 * tokens (the scored ones must fit with one token of history).  The context
 * is the model's block_size unless tfm_eval_set_context sets another (longer
 * only for position schemes without a table: model/transformer.h).
 *
 * Buffers are planned for batch × context once; scoring allocates nothing
 * per token.
 *
 * Threads: call tfm_blas_init (tensor/gemm.h) first.
 *
 * Ownership: tfm_eval owns the model, its tokenizer and the buffers;
 * tfm_eval_items owns its arrays (the sequences point into its ids) and
 * borrows nothing once read. */
#ifndef TFM_INFER_EVAL_H
#define TFM_INFER_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/progress.h"
#include "data/fewshot.h"
#include "lm/lm.h"
#include "metrics/metrics.h"
#include "model/forward.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

typedef struct tfm_eval {
    tfm_lm lm;            /* the open model: weights, tokenizer taken over */
    tfm_model_config cfg; /* lm's */
    tfm_fwd fwd;          /* the inference forward over lm's weights */
    const char *path;     /* tfm_eval_open's, borrowed: for messages */
    tfm_tokenizer *tok;   /* NULL when the file carries none */
    int64_t eos;          /* end-of-text id, or -1 */
    int64_t bos;          /* the id put before each text (unless the caller
                             says not): the tokenizer's template's
                             (Llama 3's <|begin_of_text|>), else eos
                             (GPT-2's <|endoftext|>); -1: none */
    int prefix_lm;        /* a prefix LM (lm/lm.h tfm_lm.prefix_lm): a
                             sequence's history (all but its scored tokens)
                             is its prefix, seen whole by each position */
    int batch;            /* sequences per forward */
    int batch_asked;      /* tfm_eval_open's batch (< 1: chosen by size) */
    int context;          /* longest sequence run: block_size, or
                             tfm_eval_set_context's */
    int32_t *in;          /* [batch, context] ids, sequence i at i·context */
    double *nll;          /* [batch, context] per-position scratch */
    unsigned char *hit;   /* [batch, context]: target is the argmax */
    uint32_t *packed;     /* [batch · context] the forward's packed ids */
    float *top;           /* [batch · context, n_embd] its final hidden states */
    int32_t *head_row;    /* per scored position: the row of top before it */
    size_t *head_pos;     /* and its place in in/nll/hit */
    float *head_in, *logits; /* the LM head's input and output rows */
    size_t stat_tokens;   /* positions run through the model */
    double stat_seconds;  /* in the forward and scoring */
} tfm_eval;

/* Opens a model file written by tfm-train (weights, config and tokenizer;
 * its checksum verified) or a HuggingFace GPT-2 safetensors checkpoint (no
 * tokenizer), as tfm_lm_open (lm/lm.h) reads them.  batch < 1 picks one that keeps the forward's
 * activations under ~256 MB (at most 16).  adapter: a LoRA adapter directory merged in (model/lora.h;
 * NULL: none).  Errors name the path. */
int tfm_eval_open(tfm_eval *e, const char *path, const char *adapter, int batch, tfm_err *err);
/* Replaces the model's tokenizer (and end-of-text id) by tok, which e then
 * owns; an error, with tok still the caller's, when tok has more tokens
 * than the model. */
int tfm_eval_set_tokenizer(tfm_eval *e, tfm_tokenizer *tok, tfm_err *err);
void tfm_eval_close(tfm_eval *e);
/* Sequences of up to context tokens from now on (buffers re-planned).  Past
 * block_size only for positions that are not a learned table. */
int tfm_eval_set_context(tfm_eval *e, int context, tfm_err *err);

typedef struct tfm_eval_seq {
    const uint32_t *ids;  /* borrowed */
    size_t n;
    size_t n_target;      /* the last n_target ids are scored; ≥ 1, < n */
    double *token_logprobs; /* NULL, or n_target doubles that get each target
                               token's log-probability, in order (borrowed) */
    /* results */
    double logprob;       /* Σ log p(target token | everything before it) */
    int greedy;           /* 1 when every target token is the argmax */
} tfm_eval_seq;

/* Scores seqs[0..n).  Errors: a target longer than the context allows, an
 * id outside the vocabulary, a score that is not finite (NaN weights).  progress (may be NULL) advances by the
 * scored tokens. */
int tfm_eval_score(tfm_eval *e, tfm_eval_seq *seqs, size_t n, tfm_progress *progress,
                   tfm_err *err);

/* ---- perplexity ---------------------------------------------------------
 *
 *     tfm_ppl p;
 *     tfm_ppl_init(&p, ids, n, context, stride, want_token_logprobs);
 *     tfm_ppl_run(&p, &e, progress, &err);     // p.nll, p.cross_entropy, ...
 *     tfm_ppl_free(&p);
 *
 * A token stream scored in the windows of metrics/metrics.h's
 * tfm_ppl_windows: every token but the first once, in order. */
typedef struct tfm_ppl {
    size_t n_windows;
    tfm_ppl_window *w;     /* [n_windows] */
    tfm_eval_seq *seqs;    /* [n_windows] the windows as sequences */
    size_t scored;         /* tokens scored: n - 1 */
    double *token_lp;      /* [scored] each scored token's log-probability, in
                              stream order (position k + 1 is token_lp[k]);
                              NULL unless asked for */
    /* tfm_ppl_run's results */
    double nll;            /* total, in nats */
    double cross_entropy;  /* nll per scored token */
    double perplexity;     /* exp(cross_entropy) */
} tfm_ppl;

/* Plans the windows over ids[0..n) (borrowed; n ≥ 2, 2 ≤ context,
 * 1 ≤ stride ≤ context). */
void tfm_ppl_init(tfm_ppl *p, const uint32_t *ids, size_t n, size_t context, size_t stride,
                  int token_logprobs);
/* Scores the windows with e (progress, may be NULL, advances by the
 * scored tokens). */
int tfm_ppl_run(tfm_ppl *p, tfm_eval *e, tfm_progress *progress, tfm_err *err);
void tfm_ppl_free(tfm_ppl *p);

/* The bytes and characters of text[0..len) that the scored tokens of its
 * encoding ids[] cover, for bits per byte and per character: all of them,
 * but for the first token's (its decoding by tok) when nothing was put
 * before the text (bos_first = 0): that token is never scored. */
int tfm_ppl_text_size(const tfm_tokenizer *tok, const uint32_t *ids, int bos_first,
                      const char *text, size_t len, size_t *bytes, size_t *chars,
                      tfm_err *err);

/* ---- multiple choice and last word -------------------------------------- */

/* The ending of one item each rule picks, from its n endings' scores
 * seqs[0..n) (their target is the ending) and the endings' lengths in
 * bytes: best[0] by the sum of log-probabilities, best[1] per token,
 * best[2] per byte (lm-evaluation-harness's acc, and acc_norm by length).
 * The first ending wins a tie. */
void tfm_eval_choice_pick(const tfm_eval_seq *seqs, const size_t *end_bytes, size_t n,
                          int best[3]);

/* A LAMBADA passage s[0..len) (trailing blanks already removed) splits at
 * its last space: the context is s[0..k), the target word, with its space,
 * s[k..len).  Returns k, or -1 when there is no space. */
long tfm_eval_last_word(const char *s, size_t len);

/* ---- items: choice JSONL and last-word passages as sequences ------------
 *
 *     tfm_eval_items_opts o = {tok, scratch, eos, NULL, block_size, context};
 *     tfm_eval_items it;
 *     tfm_eval_choice_read(&it, data, len, "items.jsonl", &o, &err);
 *     tfm_eval_score(&e, it.seqs, it.n_seq, NULL, &err);
 *     tfm_eval_choice_pick(it.seqs + it.first[i], it.end_bytes + it.first[i],
 *                          it.count[i], best);
 *     tfm_eval_items_free(&it);
 *
 * A choice item is a JSON object per line, {"context": "...", "endings":
 * ["...", ...] (at least two), "label": index of the right one}; each
 * ending becomes a sequence: bos (if any), the few-shot demonstrations (if
 * any), the context, then the ending, the ending's tokens scored.  A
 * last-word passage is a line (trailing blanks dropped) split at its last
 * space (tfm_eval_last_word): the word, with its space, is scored after
 * bos, the demonstrations and the rest.  Blank lines are skipped (and
 * counted in line numbers).  Errors name the input (name), the line and,
 * in JSON, the column: malformed JSON, a missing or mistyped field, an
 * empty ending, a target too long for the model (block_size, as one token
 * of history must fit), nothing at all before a target; an input with no
 * item is an error too. */
typedef struct tfm_eval_items_opts {
    const tfm_tokenizer *tok;
    tfm_tok_scratch *scratch;
    int64_t bos;               /* put before every sequence; < 0: nothing */
    const tfm_fewshot *shots;  /* demonstrations before each item; NULL: none */
    int block_size;            /* the model's context */
    int context;               /* tfm_eval's: longer sequences are cut (counted) */
} tfm_eval_items_opts;

typedef struct tfm_eval_items {
    tfm_ids ids;               /* every sequence's ids, one after another */
    tfm_eval_seq *seqs;        /* [n_seq]: ids point into ids */
    size_t n_seq;
    size_t n;                  /* items (choice), passages (last word) */
    long *line;                /* [n] each one's line in the input */
    size_t *first, *count;     /* choice: [n] item i's endings are seqs[first[i] ..
                                  first[i] + count[i]) */
    int64_t *label;            /* choice: [n] the right ending */
    size_t *end_bytes;         /* choice: [n_seq] each ending's length in bytes */
    int k;                     /* demonstrations per item (0: none) */
    size_t *picks;             /* [n * k] item i's are picks[i * k .. + k) */
    size_t n_cut;              /* with demonstrations: items with a sequence
                                  longer than the context, cut from the left */
} tfm_eval_items;

int tfm_eval_choice_read(tfm_eval_items *it, const char *data, size_t len, const char *name,
                         const tfm_eval_items_opts *o, tfm_err *err);
int tfm_eval_lastword_read(tfm_eval_items *it, const char *data, size_t len, const char *name,
                           const tfm_eval_items_opts *o, tfm_err *err);
void tfm_eval_items_free(tfm_eval_items *it);

/* What the items scored, after tfm_eval_score over it->seqs: for choice,
 * each item's pick by each rule of tfm_eval_choice_pick (best[3 * i + m])
 * and the items each rule got right (right[m]); for last word, the
 * passages whose word is the greedy continuation (right[0]), the sum of
 * the words' log-probabilities, their tokens, and the perplexity per word
 * (exp(-logprob / n), as lm-evaluation-harness).  acc[m] = right[m] / n,
 * with its standard error (metrics/metrics.h).  The tally owns best. */
typedef struct tfm_eval_tally {
    size_t n;                  /* items or passages */
    int *best;                 /* choice: [n * 3] */
    size_t right[3];
    double acc[3], acc_se[3];
    double logprob;            /* last word */
    size_t targets;            /* last word: target tokens */
    double word_perplexity;    /* last word */
} tfm_eval_tally;

void tfm_eval_choice_tally(const tfm_eval_items *it, tfm_eval_tally *t);
void tfm_eval_lastword_tally(const tfm_eval_items *it, tfm_eval_tally *t);
void tfm_eval_tally_free(tfm_eval_tally *t);

#endif
