/* Token streams for training: a flat array of ids (from a memory-mapped .npy
 * file, or encoded from text), cut into random windows by a seeded RNG.
 *
 * The RNG is the whole "data position": saving its four words and restoring
 * them continues the same sequence of batches after a restart.
 *
 * Ownership: tfm_tokens owns its mapping or its array; tfm_tokens_free. */
#ifndef TFM_TRAIN_DATA_H
#define TFM_TRAIN_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/rng.h"
#include "text/tokenizer.h"

typedef struct tfm_tokens {
    const void *data;   /* width-byte little-endian ids */
    size_t n;           /* number of ids */
    int width;          /* 2 or 4 */
    char name[256];     /* file name for messages */
    void *owned;        /* private: array or mapping to release */
    int kind;           /* private */
} tfm_tokens;

/* A 1-D .npy of uint16 or uint32 (int32 with no negative ids also works). */
int tfm_tokens_open_npy(tfm_tokens *t, const char *path, tfm_err *err);
/* Takes ownership of ids (malloc'd). */
void tfm_tokens_from_ids(tfm_tokens *t, uint32_t *ids, size_t n, const char *name);
/* Encodes a text file as one document; the last val_fraction of the ids
 * goes to val (left empty when val_fraction is 0). */
int tfm_tokens_from_text(tfm_tokens *train, tfm_tokens *val, const char *path,
                         const tfm_tokenizer *tok, double val_fraction, tfm_err *err);
void tfm_tokens_free(tfm_tokens *t);

static inline uint32_t tfm_tokens_at(const tfm_tokens *t, size_t i)
{
    if (t->width == 2)
        return ((const uint16_t *)t->data)[i];
    return ((const uint32_t *)t->data)[i];
}

/* Largest id (0 for an empty stream). */
uint32_t tfm_tokens_max(const tfm_tokens *t);
/* Fails naming the file and the position of the first id >= vocab. */
int tfm_tokens_check(const tfm_tokens *t, uint32_t vocab, tfm_err *err);

/* B windows of T+1 consecutive ids at uniform random offsets:
 * x[b,:] = ids[s .. s+T), y[b,:] = ids[s+1 .. s+T].  Needs n >= T + 1. */
void tfm_tokens_batch(const tfm_tokens *t, tfm_rng *rng, int B, int T, int32_t *x,
                      int32_t *y);

/* Text as documents of segments, the input of BERT's pre-training data
 * (google-research/bert create_pretraining_data.py): a segment is a line
 * (stripped of surrounding whitespace; a line that encodes to nothing is
 * skipped), and documents are separated by blank lines (BLANK_LINE) or are
 * one line each (LINE: every document is one segment).  The ids of a
 * document's segments are consecutive in `ids`.
 *
 *   segment i   ids[seg[i] .. seg[i + 1])
 *   document j  segments doc[j] .. doc[j + 1] - 1, from line line[j] */
typedef enum tfm_docs_format {
    TFM_DOCS_BLANK_LINE,
    TFM_DOCS_LINE,
} tfm_docs_format;

typedef struct tfm_docs {
    tfm_tokens ids;     /* ids.name is the file */
    size_t *seg;        /* [n_seg + 1] */
    size_t *doc;        /* [n_doc + 1] */
    size_t *line;       /* [n_doc] 1-based */
    size_t n_seg, n_doc;
} tfm_docs;

/* Reads path; the last val_fraction of the documents (rounded down) go to
 * val, which is left empty when that is none.  An empty corpus is not an
 * error here (n_doc 0). */
int tfm_docs_from_text(tfm_docs *train, tfm_docs *val, const char *path,
                       tfm_docs_format format, const tfm_tokenizer *tok, double val_fraction,
                       tfm_err *err);
void tfm_docs_free(tfm_docs *d);

/* The ids of document j: [*start, *end) of d->ids. */
static inline void tfm_docs_span(const tfm_docs *d, size_t j, size_t *start, size_t *end)
{
    *start = d->seg[d->doc[j]];
    *end = d->seg[d->doc[j + 1]];
}

#endif
