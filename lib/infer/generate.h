/* Text generation: prompts in, continuations out, over the KV-cache
 * forward (model/decode.h) with one of three strategies — greedy, sampling
 * (infer/sample.h) or beam search (infer/beam.h).
 *
 *     tfm_lm lm;   tfm_lm_open(&lm, "model.safetensors", &err);
 *     tfm_gen_opts o;   tfm_gen_opts_default(&o);   o.max_tokens = 50;
 *     tfm_gen gen;  tfm_gen_init(&gen, &lm, &o, n_prompts_at_once, &err);
 *     tfm_gen_run(&gen, prompts, n, results, on_text, ctx, &err);
 *
 * Several prompts given to one tfm_gen_run are decoded as one batch (one
 * read of the weights per step for all of them); with beam search, the
 * beams of every prompt of a batch step together (infer/beam.h's
 * tfm_beam_search_many), and a prompt whose search has ended leaves the
 * steps.
 *
 * Encoder-decoders (translation): each "prompt" is a source — its token
 * ids as the encoder reads them, ending with end-of-text (tfm_translate_
 * source in infer/translate.h makes them from text).  The encoder runs once
 * per source (tfm_infer_encode); the decoder starts from opts.start (by
 * default the model's decoder_start (T5: 0), else the tokenizer's
 * beginning-of-text token, else end-of-text, as fairseq does), then,
 * with the model's forced_bos (BART's <s>), that token, as HuggingFace's
 * forced_bos_token_id makes it the first generated one: both are the
 * decoder's prompt, not part of the output.  It stops at end-of-text,
 * which is not part of the output either.
 * A source of S tokens gets at most max_len_a·S + max_len_b new tokens
 * (when either is > 0) and max_tokens at most.  A model without an
 * end-of-text token is an error.
 *
 * Prefix LMs (tfm_lm.prefix_lm, train.task prefix-lm): the prompt is the
 * prefix, its positions seeing each other (tfm_infer_prefill_prefix), the
 * new tokens causal: the mask the model was trained with.
 *
 * With the model's forced_eos (BART's </s>; HF's forced_eos_token_id), the
 * last new token a prompt is allowed (the max_tokens-th, or max_len_a·S +
 * max_len_b-th, or the one that fills the context) is that token, whatever
 * the model prefers, in every strategy: HF's ForcedEOSTokenLogitsProcessor
 * at max_length = the decoder's prompt (start token and forced_bos, or a
 * decoder's prompt) + max_tokens.  Its log p stays the model's.  Not with
 * ignore_eos.
 *
 * Stopping: end-of-text (not part of the text), max_tokens, a stop string
 * (the text is cut where it begins; it is not part of the text), or the
 * model's context filling up (finish "length": there is no sliding window;
 * a prompt that does not fit is an error).
 *
 * Streaming: on_text receives each prompt's text piece by piece as soon as
 * it is final — bytes that might begin a stop string or end inside a UTF-8
 * character are held back until they are decided.
 *
 * Ownership: tfm_lm owns the mapping, weights view and tokenizer;
 * tfm_gen owns the cache; each tfm_gen_result owns its arrays. */
#ifndef TFM_INFER_GENERATE_H
#define TFM_INFER_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "infer/beam.h"
#include "infer/sample.h"
#include "model/transformer.h"
#include "model/decode.h"
#include "lm/lm.h"
#include "text/tokenizer.h"

typedef enum tfm_gen_strategy {
    TFM_GEN_SAMPLE,
    TFM_GEN_GREEDY,
    TFM_GEN_BEAM,
} tfm_gen_strategy;

typedef struct tfm_gen_opts {
    tfm_gen_strategy strategy;
    tfm_sample_opts sample;
    tfm_beam_opts beam;      /* beam.max_len and beam.eos are set from below */
    int max_tokens;          /* new tokens at most */
    /* With max_len_a > 0 or max_len_b > 0, a prompt of P tokens also stops
     * after a·P + b new tokens (fairseq's --max-len-a/-b). */
    double max_len_a;
    int max_len_b;
    const char *const *stops;/* stop strings */
    size_t n_stops;
    uint64_t seed;           /* prompt i samples with seed + i */
    int ignore_eos;          /* 1: end-of-text is an ordinary token */
    int profile;             /* 1: time the phases of each decode step
                                (tfm_gen.prof_s) */
    int no_cache;            /* 1: recompute the whole sequence for every
                                token (every strategy; for benchmarks and
                                tests of the cache) */
    int64_t start;           /* encoder-decoders: the decoder's first token;
                                -1 (default): the model's decoder_start, else
                                the tokenizer's bos, else eos */
} tfm_gen_opts;

/* Sampling with temperature 0.8, top-k 40, top-p 0.95, min-p 0.05;
 * max_tokens 128; beam 4, alpha 0.6 (length^alpha), nbest 1; start -1. */
void tfm_gen_opts_default(tfm_gen_opts *o);

typedef struct tfm_gen_hyp {
    tfm_ids ids;             /* generated tokens (end-of-text excluded) */
    float *logprobs;         /* [ids.len]: log p under the model's own
                                distribution (before any filter) */
    tfm_buf text;            /* decoded, cut at a stop string */
    tfm_finish finish;
    float eos_logprob;       /* finish EOS: log p of the end-of-text token,
                                which score counts (ids leave it out) */
    double score;            /* beam: Σ log p / L^α (cut at a stop string: of
                                the tokens kept); otherwise Σ log p;
                                both with end-of-text's term */
} tfm_gen_hyp;

typedef struct tfm_gen_result {
    size_t n_prompt;         /* prompt tokens */
    tfm_gen_hyp *hyps;       /* best first; 1 unless beam with nbest > 1 */
    size_t n_hyps;
    double prefill_s, decode_s; /* wall time (shared when batched) */
} tfm_gen_result;

void tfm_gen_result_free(tfm_gen_result *r);

/* Called with the next final piece of prompt `index`'s text. */
typedef void (*tfm_gen_text_fn)(void *ctx, size_t index, const char *text, size_t n);

typedef struct tfm_gen {
    const tfm_lm *lm;
    tfm_gen_opts opts;
    int batch;               /* prompts decoded together at most */
    tfm_infer infer;
    int infer_ready;
    int infer_slots, infer_len;
    /* Totals over every run, for the speed summary.  Batched prompts share
     * their prefill and decode time; beam search counts decode steps. */
    size_t stat_prompt_tokens, stat_gen_tokens;
    double stat_prefill_s, stat_decode_s; /* encoding counts as prefill */
    size_t stat_seqs;        /* prompts or sources done */
    size_t stat_out_tokens;  /* tokens of the best hypotheses */
    int encdec;              /* the model is an encoder-decoder */
    uint32_t start;          /* its decoder's first token */
    int64_t forced;          /* the token forced after it (model.forced_bos,
                                HF's forced_bos_token_id); -1: none */
    int n_start;             /* the decoder's prompt: 1, or 2 with forced */
    int64_t forced_last;     /* the token the last new token allowed is
                                forced to be (model.forced_eos, HF's
                                forced_eos_token_id); -1: none */
    /* Ids the tokenizer has no text for (a vocabulary padded past the
     * tokenizer's, or holes in it): their logits are -inf in every
     * strategy, so that text output never meets an id it cannot decode;
     * log p is then over the ids that have text.  None without a tokenizer. */
    uint32_t *absent;
    size_t n_absent;
    /* Messages name prompt i as input:(i + 1) when input is set (the file
     * the prompts are lines of), else "prompt i + 1" ("source" for
     * encoder-decoders). */
    const char *input;
    size_t cur_first;        /* the first index of the batch being decoded */
    /* With opts.profile: wall time of each phase of the decode steps
     * (model/decode.h's tfm_prof_phase) and the number of steps. */
    double prof_s[TFM_PROF_N];
    size_t prof_steps;
} tfm_gen;

int tfm_gen_init(tfm_gen *g, const tfm_lm *lm, const tfm_gen_opts *opts,
                 int batch, tfm_err *err);
void tfm_gen_free(tfm_gen *g);

/* The longest source an encoder-decoder takes: model.block_size, whatever
 * the position scheme (the lengths it was trained for). */
int tfm_gen_source_limit(const tfm_model_config *cfg);

/* How a prompt's text becomes the ids generation starts from (tfm-generate's
 * rules).  Token ids (ids): numbers below the vocabulary (the source
 * vocabulary of an encoder-decoder), separated by blanks or commas.  Text:
 * an encoder-decoder's source is data/source.h's; a decoder's prompt is
 * the tokenizer's encoding with its specials, refused when the tokenizer
 * would lose text (tfm_tokenizer_check_kept); a prefix LM trained on pairs
 * (tfm_lm.prefix_pairs) reads its prompt as a source (its input), ending
 * with end-of-text.  Ids of a source (or such an input) get its
 * end-of-text and the length rule too.  An empty decoder prompt starts a
 * text: the end-of-text token, as the model saw the start of every
 * document in training (an error without one). */
typedef struct tfm_gen_prompt {
    int ids;                      /* the text is token ids */
    int truncate;                 /* encoder-decoders: cut a source longer than
                                     the encoder's context (else an error) */
    tfm_tok_scratch *scratch;     /* lm->tok's */
    const tfm_tokenizer *src_tok; /* encoder-decoders: encodes sources */
    tfm_tok_scratch *src_scratch;
    int64_t src_eos;              /* ends every source (-1: none) */
    /* encoder-decoders and prefix LMs of pairs: a task prefix put before
     * each text prompt (data.prefix, tfm_gen_task_prefix); NULL: none */
    const char *prefix;
    size_t prefix_len;
    /* sources and prefix-LM inputs: the text of a special token (T5's
     * <extra_id_0>, BART's <mask>) is that token, as a decoder's prompt's
     * always is; else ordinary text, as in training data */
    int split_special;
} tfm_gen_prompt;

/* out = the ids of prompt text[0..len) of lm by p's rules; *cut = the
 * tokens a truncated source lost (0: none).  Errors begin with where
 * ("prompt 3"). */
int tfm_gen_prompt_ids(const tfm_lm *lm, const tfm_gen_prompt *p, const char *text, size_t len,
                       const char *where, tfm_ids *out, size_t *cut, tfm_err *err);

/* Appends to out the task prefix (data.prefix) stored in the config of the
 * model file at path (a folder: its model.safetensors); nothing when it has
 * none or no config (a HuggingFace checkpoint).  -1 when the file cannot be
 * read. */
int tfm_gen_task_prefix(const char *path, tfm_buf *out, tfm_err *err);

/* Bytes of weights one decode step reads in each profiled phase
 * (tfm_prof_phase; 0 where none), at wbytes a weight: the rate that
 * --profile reports for one prompt at a time.  The MLP's are d_ff wide. */
void tfm_gen_profile_bytes(const tfm_model_config *cfg, double wbytes,
                           double bytes[TFM_PROF_N]);

/* Generates for prompts[0..n) (token ids; none may be empty), in batches
 * of g->batch.  results[n] are filled (free each with tfm_gen_result_free).
 * on_text may be NULL.  index passed to on_text counts from first_index. */
int tfm_gen_run(tfm_gen *g, const tfm_ids *prompts, size_t n, size_t first_index,
                tfm_gen_result *results, tfm_gen_text_fn on_text, void *ctx,
                tfm_err *err);

/* PPO's rollouts (train/task.h tfm_sample_fn, which it is): answers
 * sampled for prompts[0..n) of a decoder's weights w, prompt i from seed
 * + i, with temperature and top_k (0: off) alone, at most max_new tokens
 * each, into out[i]: the new ids, ending with eos when the answer stopped
 * there. */
int tfm_gen_sample_answers(const tfm_model_config *cfg, const tfm_weights *w, uint32_t eos,
                           const tfm_ids *prompts, size_t n, int max_new, double temperature,
                           int top_k, uint64_t seed, tfm_ids *out, tfm_err *err);

/* Of text[0..n): how many leading bytes are final — not inside an
 * incomplete UTF-8 character at the end and not the start of a possible
 * stop string.  Exposed for the tests. */
size_t tfm_gen_final_prefix(const char *text, size_t n, const char *const *stops,
                            size_t n_stops);

#endif
