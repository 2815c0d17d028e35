#include "base/rng.h"

#include <math.h>
#include <time.h>
#include <unistd.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void tfm_rng_seed(tfm_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t tfm_rng_u64(tfm_rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t tfm_rng_below(tfm_rng *r, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do
        x = tfm_rng_u64(r);
    while (x >= limit);
    return x % n;
}

float tfm_rng_float(tfm_rng *r)
{
    return (float)(tfm_rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

double tfm_rng_double(tfm_rng *r)
{
    return (double)(tfm_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

float tfm_rng_normal(tfm_rng *r)
{
    double u1 = tfm_rng_double(r), u2 = tfm_rng_double(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

uint64_t tfm_rng_entropy_seed(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec ^
                 ((uint64_t)getpid() << 32);
    return splitmix64(&x) & 0xffffffffULL; /* short enough to retype */
}
