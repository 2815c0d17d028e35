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

#endif
