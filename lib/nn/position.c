/* Sinusoidal and rotary positions; see position.h. */
#include "config.h"

#include "nn/position.h"

#include <math.h>
#include <stddef.h>

void tfm_sinusoidal_table(float *pe, int n_pos, int C)
{
    for (int i = 0; i < C / 2; i++) {
        double freq = pow(10000.0, -2.0 * i / C);
        for (int p = 0; p < n_pos; p++) {
            pe[(size_t)p * C + 2 * i] = (float)sin(p * freq);
            pe[(size_t)p * C + 2 * i + 1] = (float)cos(p * freq);
        }
    }
}

void tfm_sinusoidal_row(float *pe, int p, int C)
{
    for (int i = 0; i < C / 2; i++) {
        double a = p * pow(10000.0, -2.0 * i / C);
        pe[2 * i] = (float)sin(a);
        pe[2 * i + 1] = (float)cos(a);
    }
}

const char *tfm_rope_scaling_name(tfm_rope_scaling s)
{
    return s == TFM_ROPE_LINEAR ? "linear" : s == TFM_ROPE_LLAMA3 ? "llama3" : "default";
}

double tfm_rope_freq(const tfm_rope *r, int d, int HS)
{
    double f = pow((double)r->base, -2.0 * d / HS);
    if (r->scaling == TFM_ROPE_LINEAR)
        return f / r->factor;
    if (r->scaling == TFM_ROPE_LLAMA3) {
        double wavelength = 6.283185307179586 / f, ctx = r->original_context;
        if (wavelength > ctx / r->low_freq_factor)
            return f / r->factor;
        if (wavelength < ctx / r->high_freq_factor)
            return f;
        double smooth = (ctx / wavelength - r->low_freq_factor) /
                        (r->high_freq_factor - r->low_freq_factor);
        return (1.0 - smooth) * f / r->factor + smooth * f;
    }
    return f;
}

void tfm_rope_table(float *cs, int first, int n_pos, int HS, const tfm_rope *r)
{
    int half = HS / 2;
    float *sn = cs + (size_t)n_pos * half;
    for (int d = 0; d < half; d++) {
        double freq = tfm_rope_freq(r, d, HS);
        for (int p = 0; p < n_pos; p++) {
            double th = (double)(first + p) * freq;
            cs[(size_t)p * half + d] = (float)cos(th);
            sn[(size_t)p * half + d] = (float)sin(th);
        }
    }
}

void tfm_rope_apply(float *x, int ld, int N, const int32_t *pos, int first, int n_heads,
                    int HS, const float *cs, int n_pos, int inverse)
{
    int half = HS / 2;
    const float *sn = cs + (size_t)n_pos * half;
    float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static) if ((size_t)N * n_heads * HS >= (1 << 16))
    for (int n = 0; n < N; n++) {
        int p = pos[n] - first;
        const float *c = cs + (size_t)p * half, *s = sn + (size_t)p * half;
        float *row = x + (size_t)n * ld;
        for (int h = 0; h < n_heads; h++) {
            float *a = row + (size_t)h * HS, *b = a + half;
#pragma omp simd
            for (int d = 0; d < half; d++) {
                float x1 = a[d], x2 = b[d], sd = sign * s[d];
                a[d] = x1 * c[d] - x2 * sd;
                b[d] = x1 * sd + x2 * c[d];
            }
        }
    }
}

void tfm_rope_row(float *x, int pos, int n_heads, int HS, const tfm_rope *r, float *cs)
{
    const int32_t p = pos;
    tfm_rope_table(cs, pos, 1, HS, r);
    tfm_rope_apply(x, n_heads * HS, 1, &p, pos, n_heads, HS, cs, 1, 0);
}
