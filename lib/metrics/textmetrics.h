/* Scores of generated text against references, for every task cast as text
 * to text (T5): classification, question answering and translation alike
 * are a line of output compared with a line of reference.
 *
 *   exact       the output equals a reference as a string, once leading and
 *               trailing whitespace (ASCII) is dropped: T5's "accuracy" and
 *               "sequence accuracy";
 *   squad_em    exact match after SQuAD v1.1's normalisation (lowercase, no
 *   squad_f1    punctuation or articles, whitespace squeezed) and its token
 *               F1, the best over a line's references (taskmetrics.h);
 *   bleu, chrf  corpus BLEU and chrF2 as sacrebleu (bleu.h);
 *   f1_macro    when the first references form a small label set: the F1
 *               of each label (outputs compared as for exact) averaged over
 *               the labels of the references, as T5's mean_multiclass_f1,
 *               so an output that is no label is a miss of its line's label
 *               but adds no class of its own (tfm-eval score --task
 *               classify, as scikit-learn's default, averages over the
 *               outputs' labels too).
 * Every score is in percent.  Nothing here can fail. */
#ifndef TFM_METRICS_TEXTMETRICS_H
#define TFM_METRICS_TEXTMETRICS_H

#include <stddef.h>

/* A set of references is a label set when it has at most this many
 * distinct strings and every one comes twice on average. */
#define TFM_TEXT_MAX_LABELS 32

typedef struct tfm_text_result {
    size_t n, exact_count;
    double exact, squad_em, squad_f1, bleu, chrf;
    size_t labels;   /* distinct first references; 0 when no label set */
    double f1_macro; /* NaN when no label set */
} tfm_text_result;

/* hyp[0..n) against the references ref[group[i] .. group[i + 1]) of each
 * (at least one each; BLEU and chrF take them all, macro F1 the first).
 * max_labels: the largest label set (0: never a label set). */
void tfm_metrics_text(const char *const *hyp, size_t n, const char *const *ref,
                      const size_t *group, size_t max_labels, tfm_text_result *r);

/* s[0..*n) without leading and trailing ASCII whitespace: returns the start
 * and sets *n. */
const char *tfm_text_trim(const char *s, size_t *n);

#endif
