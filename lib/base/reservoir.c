/* Reservoir sampling of lines (base/reservoir.h). */
#include "config.h"

#include "base/reservoir.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

void tfm_reservoir_init(tfm_reservoir *r, uint64_t want, uint64_t seed)
{
    memset(r, 0, sizeof *r);
    r->want = want;
    r->lines = tfm_calloc((size_t)want, sizeof *r->lines);
    r->lens = tfm_calloc((size_t)want, sizeof *r->lens);
    tfm_rng_seed(&r->rng, seed);
}

void tfm_reservoir_add(tfm_reservoir *r, const char *line, size_t n)
{
    uint64_t slot;
    if (r->seen < r->want) {
        slot = r->seen;
    } else {
        slot = tfm_rng_below(&r->rng, r->seen + 1);
        if (slot >= r->want) {
            r->seen++;
            return;
        }
        free(r->lines[slot]);
    }
    r->lines[slot] = tfm_strndup(line, n);
    r->lens[slot] = n;
    r->seen++;
}

uint64_t tfm_reservoir_kept(const tfm_reservoir *r)
{
    return r->seen < r->want ? r->seen : r->want;
}

void tfm_reservoir_free(tfm_reservoir *r)
{
    for (uint64_t i = 0; i < r->want; i++)
        free(r->lines[i]);
    free(r->lines);
    free(r->lens);
    memset(r, 0, sizeof *r);
}
