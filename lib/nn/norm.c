/* RMSNorm and the norm dispatch; see norm.h. */
#include "config.h"

#include "nn/norm.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "tensor/ops.h"

/* Below this many elements a parallel region costs more than it saves
 * (tensor/ops.c's threshold). */
#define PAR_MIN 32768

void tfm_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *w, int N,
                         int C, float eps)
{
#pragma omp parallel for schedule(static) if ((size_t)N * C >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *y = out + (size_t)n * C;
        float v = 0.0f;
#pragma omp simd reduction(+:v)
        for (int i = 0; i < C; i++)
            v += x[i] * x[i];
        float rs = 1.0f / sqrtf(v / C + eps);
#pragma omp simd
        for (int i = 0; i < C; i++)
            y[i] = x[i] * rs * w[i];
        rstd[n] = rs;
    }
}

/* Column block width of the weight's gradient: each thread owns whole
 * columns and sums the rows in order. */
#define COLBLK 64

/* y_i = x_i·r·w_i with r = (Σx²/C + eps)^-½, so dr/dx_i = -r³·x_i/C and
 * dx_i = r·w_i·dy_i - x_i·r³/C·Σ_j dy_j·w_j·x_j. */
void tfm_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, const float *rstd, int N, int C)
{
#pragma omp parallel for schedule(static) if ((size_t)N * C >= PAR_MIN)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float rs = rstd[n], s = 0.0f;
#pragma omp simd reduction(+:s)
        for (int i = 0; i < C; i++)
            s += dy[i] * w[i] * x[i];
        float k = s * rs * rs * rs / C;
#pragma omp simd
        for (int i = 0; i < C; i++)
            dx[i] += dy[i] * w[i] * rs - x[i] * k;
    }
    if (!dw) /* frozen */
        return;
    int nblk = (C + COLBLK - 1) / COLBLK;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= PAR_MIN)
    for (int b = 0; b < nblk; b++) {
        int c0 = b * COLBLK, c1 = c0 + COLBLK < C ? c0 + COLBLK : C;
        float aw[COLBLK];
        memset(aw, 0, sizeof aw);
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            float rs = rstd[n];
#pragma omp simd
            for (int i = c0; i < c1; i++)
                aw[i - c0] += dy[i] * x[i] * rs;
        }
        for (int i = c0; i < c1; i++)
            dw[i] += aw[i - c0];
    }
}

void tfm_norm_forward(tfm_norm_kind kind, float *out, float *mean, float *rstd,
                      const float *inp, const float *w, const float *b, int N, int C,
                      float eps)
{
    if (kind == TFM_NORM_RMS)
        tfm_rmsnorm_forward(out, rstd, inp, w, N, C, eps);
    else
        tfm_layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
}

void tfm_norm_backward(tfm_norm_kind kind, float *dinp, float *dw, float *db,
                       const float *dout, const float *inp, const float *w, const float *mean,
                       const float *rstd, int N, int C)
{
    if (kind == TFM_NORM_RMS)
        tfm_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
    else
        tfm_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

const char *tfm_norm_name(tfm_norm_kind kind)
{
    return kind == TFM_NORM_RMS ? "rmsnorm" : "layernorm";
}
