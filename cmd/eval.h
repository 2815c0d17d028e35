/* What tfm-eval's command files share (cmd/tfm-eval.c, eval-metrics.c,
 * eval-task.c): their entry points, and the metric reports of `score`,
 * which the prediction commands print for their own predictions so that
 * both agree by construction. */
#ifndef TFM_CMD_EVAL_H
#define TFM_CMD_EVAL_H

#include <stddef.h>

#include "base/buf.h"

/* score, bleu, chrf (eval-metrics.c) and classify, tag, span (eval-task.c):
 * main()s of their own, argv as tfm-eval's. */
int tfm_eval_metrics_main(int argc, char **argv);
int tfm_eval_task_main(int argc, char **argv);
/* reward (eval-reward.c) */
int tfm_eval_reward_main(int argc, char **argv);
/* fill (eval-fill.c) */
int tfm_eval_fill_main(int argc, char **argv);

/* Each appends score's result to o: one JSON object (json), or a TSV header
 * line and a value line; and unless quiet, a summary on stderr. */
void tfm_eval_report_classify(const char *const *gold, const char *const *pred, size_t n,
                              const char *pos, int json, int quiet, tfm_buf *o);
void tfm_eval_report_regress(const double *gold, const double *pred, size_t n, int json,
                             int quiet, tfm_buf *o);
/* Sentence s has len[s] tags; the sentences' tags one after another. */
void tfm_eval_report_tag(const char *const *gold, const char *const *pred, const size_t *len,
                         size_t n_sent, int json, int quiet, tfm_buf *o);
/* pred[i] against the gold answers gold[group[i] .. group[i + 1]). */
void tfm_eval_report_span(const char *const *pred, size_t n, const char *const *gold,
                          const size_t *group, int json, int quiet, tfm_buf *o);

#endif
