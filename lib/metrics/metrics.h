/* lib/metrics, the layer: scores that need no model, so training's
 * validation (train/), evaluation (infer/, tfm-eval) and the predictions
 * of data/predict.h share one definition of each: this file's
 * language-model pieces, bleu.h (BLEU, chrF as sacrebleu) and
 * taskmetrics.h (classification, regression, conlleval tags, SQuAD spans).
 * It uses only base/ and text/ (and sits above model/ only in the order of
 * data/ftdata.h's picture).
 *
 * Small, exact pieces of language-model evaluation: the negative log
 * likelihood of one token from a row of logits, accuracy with its standard
 * error, and the windows perplexity is computed over.  No model here: the
 * functions are pure so the tests can check them by hand. */
#ifndef TFM_METRICS_METRICS_H
#define TFM_METRICS_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* -log softmax(logits)[target], accumulated in double (log-sum-exp with the
 * maximum subtracted, so large logits do not overflow). */
double tfm_metrics_nll(const float *logits, int V, uint32_t target);

/* Index of the largest value; the first one on ties. */
int tfm_metrics_argmax(const float *x, int n);

/* Standard error of a mean of n 0/1 outcomes with `correct` ones: the
 * sample standard deviation over sqrt(n), i.e. sqrt(p(1-p)/(n-1)) — what
 * lm-evaluation-harness reports.  0 when n < 2. */
double tfm_metrics_stderr(size_t correct, size_t n);

/* Bits per byte: total NLL in nats / ln 2 / bytes (0 when bytes is 0). */
double tfm_metrics_bpb(double nll_nats, size_t bytes);

/* A perplexity window over a token stream: the model reads
 * tokens[begin, end) and the positions [score_from, end) are scored (each
 * predicted from the ones before it in the window). */
typedef struct tfm_ppl_window {
    size_t begin, end, score_from;
} tfm_ppl_window;

/* The windows over n tokens for a context length and a stride (2 ≤
 * context, 1 ≤ stride ≤ context).  The first window is tokens[0, context)
 * and scores positions 1..context-1 (position 0 has no history).  Each next
 * window scores the following step = min(stride, context - 1) positions and
 * reads the context tokens ending with them.  So every position but 0 is
 * scored exactly once (n - 1 tokens in all), every window but a lone
 * first one is full, and each scored token has at least context - step
 * tokens of history (at least 1: with stride = context, consecutive
 * windows overlap by one token rather than leave a token unscored).
 * There are 1 + ceil((n - context) / step) windows when n > context, else 1
 * (0 when n < 2 or the arguments are out of range).  Writes up to cap of
 * them to out (out may be NULL) and returns how many there are. */
size_t tfm_ppl_windows(size_t n, size_t context, size_t stride, tfm_ppl_window *out,
                       size_t cap);

/* Number of UTF-8 characters in s[0..n): bytes that are not continuation
 * bytes (10xxxxxx). */
size_t tfm_metrics_utf8_chars(const char *s, size_t n);

#endif
