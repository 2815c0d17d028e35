/* 16-bit floats; see half.h. */
#include "config.h"

#include "base/half.h"

#include <math.h>
#include <string.h>

float tfm_f16_to_f32(uint16_t h)
{
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
    float f;
    if (e == 0) { /* zero and subnormals: m·2^-24 */
        f = ldexpf((float)m, -24);
        memcpy(&x, &f, sizeof x);
    } else if (e == 31) {
        x = 0x7f800000u | m << 13;
    } else {
        x = (e + 112) << 23 | m << 13;
    }
    x |= (uint32_t)(h & 0x8000) << 16;
    memcpy(&f, &x, sizeof f);
    return f;
}

uint16_t tfm_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return sign | 0x7e00; /* NaN */
    if (ax >= 0x477ff000u)    /* 65520 and up round to infinity */
        return sign | 0x7c00;
    if (ax < 0x38800000u) {   /* below 2^-14: a multiple of 2^-24 */
        float a;
        memcpy(&a, &ax, sizeof a);
        return sign | (uint16_t)lrintf(a * 16777216.0f);
    }
    uint32_t h = ((ax >> 23) - 112) << 10 | (ax >> 13 & 0x3ff), rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++; /* a carry into the exponent is right too */
    return sign | (uint16_t)h;
}

float tfm_bf16_to_f32(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

uint16_t tfm_f32_to_bf16(float f)
{
    uint32_t v;
    memcpy(&v, &f, sizeof v);
    if ((v & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((v >> 16) | 0x40); /* NaN stays NaN */
    v += 0x7fffu + ((v >> 16) & 1);         /* round to nearest even */
    return (uint16_t)(v >> 16);
}
