/* A fine-tuned model over encoded examples (data/ftdata.h): batches, the
 * forward, and its head outputs turned into predictions.  Training's
 * validation (train/task_classify.c, task_tag.c, task_span.c) and tfm-eval
 * classify|tag|span run the same code.
 *
 *     tfm_predictor p;
 *     tfm_predictor_open(&p, "run/model.safetensors", NULL, TFM_FT_CLASSIFY, &err);
 *     tfm_ft_data d;   tfm_ft_read_file(&d, p.task, "-", &ro, &err);
 *     tfm_ft_set s;    tfm_ft_encode(&s, &d, 0, d.n, p.tok, &p.labels, &p.enc, &err);
 *     tfm_ft_out o;    tfm_ft_run(&p.m, &s, p.labels.regression, 0, 64, &o, NULL, &err);
 *     tfm_ft_pred pr;  tfm_ft_predict(&s, &o, &p.labels, 30, &pr);
 *     ... free them in reverse ...
 *
 * The forward is the model's own (model/transformer.h) in inference mode,
 * so the heads are the very code that was trained; rows are batched by
 * length, so that little of a batch is padding.
 *
 * Predictions:
 *   classify  the class with the highest probability (softmax of the
 *             logits of the label set's classes; a pair read in both
 *             orders: the mean of the two rows' probabilities); regression:
 *             the output (the mean of the rows).
 *   tag       per word, the tag of its first sub-token; a word cut off by
 *             truncation (or encoded to nothing) gets "O" when the tag set
 *             has it, else the first tag, with probability 0.
 *   span      the span (start ≤ end, at most max_answer tokens, both in the
 *             context) of the highest log p(start) + log p(end) (log-softmax
 *             over its row's positions) over every window, as the bytes of
 *             the context from its first token's start to its last's end
 *             widened to whole words (metrics/taskmetrics.h's
 *             tfm_squad_whole_words, as run_squad maps a span back to the
 *             context's words): the answer both tfm-eval span prints and
 *             the metrics score, in training's validation too.
 *
 * Ownership: each struct owns its arrays; the _free/_close functions
 * release them. */
#ifndef TFM_DATA_PREDICT_H
#define TFM_DATA_PREDICT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "data/data_keys.h"
#include "data/ftdata.h"
#include "model/config_keys.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

/* ---- batches ------------------------------------------------------------ */

typedef struct tfm_ft_batcher {
    int32_t *x, *seg, *y, *tags;  /* [B, T] */
    int *len, *cls;               /* [B] */
    int32_t *labels, *start, *end;
    float *values;
    size_t cap_bt, cap_b;
} tfm_ft_batcher;

/* The rows rows[0..n) of s as one batch (padded to the longest, arrays in
 * bb).  gold: the head's targets (class ids, or values with regression;
 * tags; span positions).  lm_weight > 0 (decoders, with gold): the LM's
 * next-token targets too, weighted so (GPT fine-tuning's auxiliary loss). */
void tfm_ft_batch(tfm_ft_batcher *bb, const tfm_ft_set *s, const size_t *rows, int n, int gold,
                  int regression, float lm_weight, tfm_batch *b);
void tfm_ft_batcher_free(tfm_ft_batcher *bb);

/* ---- the forward -------------------------------------------------------- */

typedef struct tfm_ft_out {
    int K, n_tags;
    float *cls;            /* [n_rows, K] classifier logits (regression: the value) */
    float *tag;            /* [Σ len, n_tags] tagger logits at every position */
    float *span;           /* [Σ len, 2] start and end logits at every position */
} tfm_ft_out;

/* Runs m (put in evaluation mode by the caller) over every row of s in
 * batches of rows of similar length, at most max_rows rows and max_tokens
 * padded positions each (0: 8192), and keeps the task's head outputs.  With
 * loss not NULL (s must have gold): *loss = the head's mean loss over all
 * its targets (classifier or MSE per row, tagger per tagged position, span
 * per row). */
int tfm_ft_run(tfm_model *m, const tfm_ft_set *s, int regression, int max_tokens, int max_rows,
               tfm_ft_out *out, double *loss, tfm_err *err);
/* -1 with err naming path when an output of tfm_ft_run is not finite (a
 * model with NaN weights): predictions from it would look like results. */
int tfm_ft_out_check(const tfm_ft_out *out, const tfm_ft_set *s, const char *path,
                     tfm_err *err);
void tfm_ft_out_free(tfm_ft_out *o);

/* ---- predictions -------------------------------------------------------- */

typedef struct tfm_ft_pred {
    size_t n;              /* examples */
    int32_t *label;        /* classify: class id */
    float *prob;           /* classify: its probability */
    int n_class;           /* classify: the classes of probs */
    float *probs;          /* classify: [n, n_class] every class's probability */
    double *value;         /* regression */
    int32_t *tag;          /* tag: per word (set->ex_word order) */
    float *tag_prob;
    size_t n_word;
    long *start, *end;     /* span: the answer's bytes in the context (whole
                              words) */
    double *score;         /* span: log p(start) + log p(end) */
} tfm_ft_pred;

void tfm_ft_predict(const tfm_ft_set *s, const tfm_ft_out *o, const tfm_ft_labels *l,
                    int max_answer, tfm_ft_pred *p);
void tfm_ft_pred_free(tfm_ft_pred *p);
/* classify: the k most probable classes of example e into top[0..k),
 * most probable first (ties: the lower id); returns k, at most n_class. */
int tfm_ft_pred_top(const tfm_ft_pred *p, size_t e, int k, int32_t *top);

/* The validation metric of predictions against the gold of s's examples of
 * d: accuracy (classify), Pearson's r (regression), entity F1 (tags with
 * chunk prefixes B-, I-, E-, S-, as conlleval) else token accuracy, SQuAD
 * F1 in percent (span).  *name: "accuracy", "pearson", "entity_f1",
 * "token_accuracy", "squad_f1". */
double tfm_ft_metric(const tfm_ft_data *d, const tfm_ft_set *s, const tfm_ft_pred *p,
                     const tfm_ft_labels *l, const char **name);
/* Every validation metric of the task, the first tfm_ft_metric's: its names
 * (static strings) into names[], "accuracy" and "macro_f1" (classify; as
 * fractions), "pearson" (regression), "entity_f1" (chunk tags) and
 * "token_accuracy" (tag), "squad_f1" and "squad_em" (span, in percent); the
 * values of p into values[] in the same order.  Both return the number (at
 * most 4). */
int tfm_ft_metric_names(tfm_ft_task task, const tfm_ft_labels *l, const char **names);
int tfm_ft_metrics(const tfm_ft_data *d, const tfm_ft_set *s, const tfm_ft_pred *p,
                   const tfm_ft_labels *l, double *values);

/* ---- a model for prediction --------------------------------------------- */

/* The encoding a configuration implies: the model's kind, context,
 * segments; data.truncate, data.symmetric, data.doc_stride; [CLS] and [SEP]
 * from data.cls_id/data.sep_id or tok, end-of-text from tok. */
void tfm_ft_enc_opts_from_keys(tfm_ft_enc_opts *o, const tfm_model_keys *model,
                               const tfm_data_keys *data, const tfm_tokenizer *tok);

/* train.task of the task: "classify", "tag", "span". */
const char *tfm_ft_task_name(tfm_ft_task t);

typedef struct tfm_predictor {
    tfm_data_keys data;    /* the model file's */
    tfm_model m;           /* in inference mode */
    tfm_tokenizer *tok;
    tfm_ft_task task;
    tfm_ft_labels labels;  /* the "task" metadata's */
    tfm_ft_enc_opts enc;
} tfm_predictor;

/* Loads a model fine-tuned for task (train.task classify, tag or span; an
 * error otherwise), its tokenizer and label set; adapter: a LoRA adapter
 * directory merged in (model/lora.h; NULL: none), which can replace the
 * head but not add one (the labels are the model file's). */
int tfm_predictor_open(tfm_predictor *p, const char *path, const char *adapter,
                       tfm_ft_task task, tfm_err *err);
void tfm_predictor_close(tfm_predictor *p);

#endif
