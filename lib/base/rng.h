/* Deterministic random numbers: xoshiro256** seeded through splitmix64.
 * The whole state is four words, so training can save and restore it. */
#ifndef TFM_BASE_RNG_H
#define TFM_BASE_RNG_H

#include <stdint.h>

typedef struct tfm_rng {
    uint64_t s[4];
} tfm_rng;

void tfm_rng_seed(tfm_rng *r, uint64_t seed);
uint64_t tfm_rng_u64(tfm_rng *r);
/* Uniform in [0, n) without modulo bias; n > 0. */
uint64_t tfm_rng_below(tfm_rng *r, uint64_t n);
/* Uniform float in [0, 1) with 24 random bits. */
float tfm_rng_float(tfm_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double tfm_rng_double(tfm_rng *r);
/* Standard normal (Box-Muller). */
float tfm_rng_normal(tfm_rng *r);
/* A seed from the clock and pid, for runs that were given none. */
uint64_t tfm_rng_entropy_seed(void);

#endif
