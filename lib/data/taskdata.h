/* Reading the label files of the fine-tuning tasks (gold data and
 * predictions alike), with file:line in every error:
 *   labels:  one class label a line (surrounding blanks removed);
 *   values:  one number a line (regression);
 *   tags:    CoNLL (one token a line, whitespace-separated columns, the tag
 *            last, a blank line between sentences, -DOCSTART- lines
 *            skipped) or one sentence a line (its tags separated by blanks);
 *   answers: one example a line; with multi, several answers separated by
 *            tabs (gold spans), else the whole line is the answer.
 * A final newline does not make an empty last line; a '\r' before a newline
 * is dropped.
 *
 * The struct owns everything; tfm_taskdata_free releases it. */
#ifndef TFM_DATA_TASKDATA_H
#define TFM_DATA_TASKDATA_H

#include <stddef.h>

#include "base/err.h"

typedef enum tfm_tag_format {
    TFM_TAGS_AUTO,   /* CoNLL when there is a -DOCSTART- line or a blank line
                        after a non-blank one (between sentences or at the
                        end), else one sentence a line */
    TFM_TAGS_CONLL,
    TFM_TAGS_LINES,
} tfm_tag_format;

typedef struct tfm_taskdata {
    size_t n;            /* labels, values, tags (all sentences) or answers */
    const char **item;   /* NUL-terminated items (labels, tags, answers) */
    const char **word;   /* tags, CoNLL: each token line's first column (the
                            word; the tag itself on one-column lines); NULL
                            for one sentence a line */
    size_t columns;      /* tags, CoNLL: columns of every token line */
    double *value;       /* values */
    long *line;          /* line of each item (tags: of each tag) */
    size_t n_group;      /* sentences (tags) or examples (answers) */
    size_t *group;       /* items of group g: [group[g], group[g + 1]) */
    long *group_line;    /* first line of each group */
    long lines;          /* lines read */
    char *text;          /* private: the copy the items point into */
} tfm_taskdata;

int tfm_taskdata_labels(tfm_taskdata *d, const char *text, size_t len, const char *name,
                        tfm_err *err);
int tfm_taskdata_values(tfm_taskdata *d, const char *text, size_t len, const char *name,
                        tfm_err *err);
int tfm_taskdata_tags(tfm_taskdata *d, const char *text, size_t len, const char *name,
                      tfm_tag_format fmt, tfm_err *err);
int tfm_taskdata_answers(tfm_taskdata *d, const char *text, size_t len, const char *name,
                         int multi, tfm_err *err);
void tfm_taskdata_free(tfm_taskdata *d);

/* Predictions against the gold they answer: -1 with a message naming the
 * first line of pname where one runs out when the counts differ (what:
 * "lines", "sentences"). */
int tfm_taskdata_same_count(size_t n_pred, size_t n_gold, const char *pname, const char *gname,
                            const char *what, tfm_err *err);
/* Tags: p's sentences (as many as g's) each as long as g's, or -1 naming
 * the first that is not. */
int tfm_taskdata_same_sentences(const tfm_taskdata *p, const tfm_taskdata *g, const char *pname,
                                const char *gname, tfm_err *err);

/* CoNLL: the first line that holds a single column (a word without its
 * tag; -DOCSTART- lines aside), or 0.  Fields are split at spaces and tabs
 * alone, as the readers of gold data always did. */
long tfm_taskdata_conll_untagged(const char *text, size_t len);

#endif
