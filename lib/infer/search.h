/* Semantic search: the rows of a stored matrix of vectors (the float32
 * [N, D] .npy that tfm-embed writes for a corpus) nearest to a query
 * vector by cosine, as tfm-embed --search reports them.
 *
 *     tfm_search s;
 *     if (tfm_search_open(&s, "kjv.npy", &err) < 0) ...
 *     tfm_search_texts(&s, "kjv.txt", &err);        // optional: row i's line
 *     uint32_t row[5]; double cos[5];
 *     int k = tfm_search_top(&s, query, 5, row, cos);  // query: s.d floats
 *     // row[0] the nearest (from 0), cos[0] its cosine; tfm_search_text
 *     tfm_search_close(&s);
 *
 * Cosines are tfm_cosine's (double sums: the numbers --similarity gives for
 * the same two vectors), over every row (an exhaustive scan), the rows in
 * descending cosine, ties the lower row first; a zero row has cosine 0.
 *
 * Ownership: the search owns the mapped matrix, the mapped text and its
 * scratch; nothing it returns outlives tfm_search_close. */
#ifndef TFM_INFER_SEARCH_H
#define TFM_INFER_SEARCH_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/file.h"
#include "io/npy.h"

typedef struct tfm_search {
    size_t n;              /* rows */
    int d;                 /* their width */
    const float *rows;     /* [n, d], in the mapped file */
    /* private */
    tfm_npy a;
    double *score;         /* [n] one query's cosines */
    tfm_map text;          /* tfm_search_texts' file */
    size_t *line_at, *line_len; /* [n] each row's line in text */
} tfm_search;

/* Maps path (a float32 .npy of 2 dimensions, at least one row and one
 * column, every value finite).  Errors name the file and what was
 * expected. */
int tfm_search_open(tfm_search *s, const char *path, tfm_err *err);
/* Maps path, whose lines are the rows' texts, one a row: a count other than
 * s->n is an error naming both files. */
int tfm_search_texts(tfm_search *s, const char *path, tfm_err *err);
void tfm_search_close(tfm_search *s);

/* The k rows (k cut to n; k >= 1) nearest to q[d]: row[0..k) from 0, cos[]
 * their cosines.  Returns the count. */
int tfm_search_top(tfm_search *s, const float *q, int k, uint32_t *row, double *cos);
/* Row i's line of tfm_search_texts' file (not NUL-terminated; *n bytes),
 * or NULL when no text was given. */
const char *tfm_search_text(const tfm_search *s, uint32_t i, size_t *n);

#endif
