/* A uniform sample of N lines from a stream of unknown length (Algorithm
 * R): memory bounded by the N lines kept, whatever the stream's size.
 * tfm-tokenize train --sample-lines draws its training text with it.
 *
 *     tfm_reservoir r;
 *     tfm_reservoir_init(&r, 1000, seed);
 *     tfm_reservoir_add(&r, line, len);     // for each line of the stream
 *     for (size_t i = 0; i < tfm_reservoir_kept(&r); i++) ... r.lines[i] ...
 *     tfm_reservoir_free(&r);
 *
 * The same seed and stream keep the same lines in the same slots.
 * Ownership: the reservoir owns the copies of the lines it keeps. */
#ifndef TFM_BASE_RESERVOIR_H
#define TFM_BASE_RESERVOIR_H

#include <stddef.h>
#include <stdint.h>

#include "base/rng.h"

typedef struct tfm_reservoir {
    uint64_t want, seen;  /* slots; lines offered */
    char **lines;         /* [want] the kept lines (not NUL-terminated) */
    size_t *lens;         /* [want] their lengths */
    tfm_rng rng;
} tfm_reservoir;

void tfm_reservoir_init(tfm_reservoir *r, uint64_t want, uint64_t seed);
/* Offers line[0..n): the i-th line offered is kept with probability
 * want / i, in place of a uniformly chosen kept one. */
void tfm_reservoir_add(tfm_reservoir *r, const char *line, size_t n);
/* Lines kept: min(seen, want), in lines[0 .. that). */
uint64_t tfm_reservoir_kept(const tfm_reservoir *r);
void tfm_reservoir_free(tfm_reservoir *r);

#endif
