/* Metrics of the fine-tuning tasks, on predictions given as strings, as the
 * reference tools compute them:
 *   classification: accuracy, F1 (binary, macro, micro) and Matthews
 *     correlation as scikit-learn;
 *   regression: Pearson and Spearman (average ranks for ties) as SciPy;
 *   tagging: entity precision/recall/F1 with conlleval's chunk rules (as
 *     seqeval's default mode) and token accuracy;
 *   spans: exact match and token F1 with SQuAD v1.1's normalisation; a
 *     predicted span's answer text in whole words, as run_squad's.
 *
 * Undefined quantities follow scikit-learn's default (zero_division = 0): a
 * precision without predictions, a recall without gold items, an F1 of two
 * zeros and an MCC with a constant side are 0.  Correlations of a constant
 * side are NaN, as SciPy's; callers print them as null.  Nothing here can
 * fail. */
#ifndef TFM_METRICS_TASKMETRICS_H
#define TFM_METRICS_TASKMETRICS_H

#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"

typedef struct tfm_classify_result {
    size_t n, correct, labels;  /* labels: distinct labels in gold and pred */
    double accuracy, f1_macro, f1_micro, f1_weighted, mcc;
    /* one-vs-rest scores of the positive label (binary F1), when one is given */
    int has_pos;
    size_t pos_tp, pos_pred, pos_gold;
    double precision_pos, recall_pos, f1_pos;
} tfm_classify_result;

/* gold[i] and pred[i] (NUL-terminated labels, compared as bytes) for i < n.
 * pos: the positive label of the binary scores, or NULL for none.  Macro F1
 * averages over every label of gold or pred, as scikit-learn does by
 * default; weighted F1 weighs each label's F1 by its count in gold
 * (scikit-learn's average="weighted"); micro F1 equals accuracy for
 * single-label data. */
void tfm_metrics_classify(const char *const *gold, const char *const *pred, size_t n,
                          const char *pos, tfm_classify_result *r);

/* Pearson's r; NaN when n < 2 or one side is constant. */
double tfm_metrics_pearson(const double *x, const double *y, size_t n);
/* Spearman's rho: Pearson's r of the ranks, ties given their average rank. */
double tfm_metrics_spearman(const double *x, const double *y, size_t n);

typedef struct tfm_tag_result {
    size_t tokens, correct_tokens;
    size_t gold_chunks, pred_chunks, correct_chunks;
    double precision, recall, f1, token_accuracy;
} tfm_tag_result;

/* The chunks (entities) of one tag sequence as conlleval counts them: a
 * chunk starts at B-X, at S-X, at I-X or E-X after O or after a chunk of
 * another type (a stray I-X opens an entity), and at E/I after E or S; it
 * ends before B, S and O, after E and S, and where the type changes.  Tags
 * are "P-TYPE" (P the first byte) or "O".  Chunks are written as
 * (type start, type length, first, last) token positions. */
typedef struct tfm_chunk {
    const char *type;
    size_t type_len, first, last;
} tfm_chunk;
/* Returns the number of chunks of tags[0..n); out needs room for n. */
size_t tfm_tag_chunks(const char *const *tags, size_t n, tfm_chunk *out);

/* Entity scores over sentences: sentence s has len[s] tags, the tags of all
 * sentences one after another in gold and pred (the same lengths).  An entity
 * is right when type, first and last token all agree; scores are micro
 * averages over the types. */
void tfm_metrics_tag(const char *const *gold, const char *const *pred, const size_t *len,
                     size_t n_sent, tfm_tag_result *r);

/* SQuAD v1.1 normalisation: lowercase, ASCII punctuation removed, the words
 * a/an/the removed, whitespace squeezed to single spaces.  Appends to out. */
void tfm_squad_normalize(const char *s, size_t n, tfm_buf *out);
/* Exact match (0 or 1) and token F1 (0..1) of a prediction against one
 * gold answer, both normalised.  F1 is 0 without common tokens. */
int tfm_squad_exact(const char *pred, size_t pn, const char *gold, size_t gn);
double tfm_squad_f1(const char *pred, size_t pn, const char *gold, size_t gn);
/* A question without gold answers is unanswerable (SQuAD v2): exact match
 * and F1 are both this, 1 when the prediction normalises to nothing, else
 * 0, as in v2's official script. */
int tfm_squad_no_answer(const char *pred, size_t pn);
/* SQuAD exact match and F1 in percent of predictions pred[0..n), pred[i]
 * against the gold answers gold[group[i] .. group[i + 1]) (its best match
 * of each); an empty gold string is no answer, and a prediction without
 * any scores tfm_squad_no_answer. */
void tfm_metrics_span(const char *const *pred, size_t n, const char *const *gold,
                      const size_t *group, double *exact_match, double *f1);

/* The answer text of a predicted span [*start, *end) of bytes of a
 * context text[0..len): the span widened to whole words, as BERT's
 * run_squad (and HuggingFace's) maps a predicted token span back to the
 * context's words, so that a span ending (or starting) inside a word, say
 * at a WordPiece piece or a byte-level token, gives the whole word.
 *
 * Words are the context's whitespace-separated words (SQuAD's doc_tokens)
 * split as BERT's BasicTokenizer splits them: a punctuation character
 * (ASCII 33-47, 58-64, 91-96, 123-126, Unicode P*) or a CJK ideograph is a
 * word of its own.  Punctuation attached to a word thus stays out of the
 * answer unless the span covers it: "Smith's" with a span over "Smi" gives
 * "Smith", over "Smith's" gives "Smith's"; "(1990)." with a span over
 * "199" gives "1990".  This is what run_squad's get_final_text returns
 * when the predicted tokens cover whole words (it aligns the tokenizer-
 * normalised prediction with the BasicTokenizer words of the whitespace
 * words around it, to strip such "'s"); where the prediction is part of a
 * word get_final_text returns that part, here the whole word.  Its
 * fallback to the whole whitespace words (when normalisation changed the
 * text's length) is never needed: spans are bytes of the original text.
 * SQuAD's metrics drop ASCII punctuation anyway; the difference shows in
 * the answer text.
 *
 * Whitespace at the span's ends is dropped first; a span that holds none
 * but whitespace becomes empty (at its first non-space byte).  Offsets
 * inside a UTF-8 character move out to its boundaries. */
void tfm_squad_whole_words(const char *text, size_t len, long *start, long *end);

/* 0 when label is one of the gold or predicted labels, else -1 with err
 * naming it and the labels there are (scikit-learn refuses such a
 * pos_label too: its scores would all be 0). */
/* The positive label of the binary scores when none is given: "1"
 * (scikit-learn's default), else "true"/"True", when gold and pred have at
 * most two labels between them; else NULL. */
const char *tfm_metrics_default_pos(const char *const *gold, const char *const *pred, size_t n);

int tfm_metrics_check_label(const char *const *gold, const char *const *pred, size_t n,
                            const char *label, tfm_err *err);

#endif
