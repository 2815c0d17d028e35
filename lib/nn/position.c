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

void tfm_rope_table(float *cs, int first, int n_pos, int HS, float base)
{
    int half = HS / 2;
    float *sn = cs + (size_t)n_pos * half;
    for (int d = 0; d < half; d++) {
        double freq = pow((double)base, -2.0 * d / HS);
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

/* ALiBi's slopes (declared in nn/attention.h, whose scores they bias). */
static void slopes_pow2(float *out, int n)
{
    double start = pow(2.0, -8.0 / n);
    double r = start;
    for (int i = 0; i < n; i++, r *= start)
        out[i] = (float)r;
}

void tfm_alibi_slopes(float *slopes, int n)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    slopes_pow2(slopes, p);
    if (p == n)
        return;
    /* the paper's code: the power of two below, then every other slope of
     * twice that power */
    float extra[2048];
    slopes_pow2(extra, 2 * p);
    for (int i = 0; i < n - p; i++)
        slopes[p + i] = extra[2 * i];
}

int tfm_t5_bucket(int rel, int bidirectional, int n_buckets, int max_distance)
{
    int bucket = 0, n = n_buckets;
    if (bidirectional) {
        n /= 2;
        if (rel > 0)
            bucket += n;
        rel = rel < 0 ? -rel : rel;
    } else {
        rel = rel < 0 ? -rel : 0;
    }
    int max_exact = n / 2;
    if (rel < max_exact)
        return bucket + rel;
    /* float arithmetic and truncation as HF's int64 cast of a float32 */
    float l = logf((float)rel / (float)max_exact) / logf((float)max_distance / (float)max_exact) *
              (float)(n - max_exact);
    int large = max_exact + (int)l;
    if (large > n - 1)
        large = n - 1;
    return bucket + large;
}
