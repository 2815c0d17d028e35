#include "train/optim.h"

#include "config.h"

#include <math.h>
#include <string.h>

#include "base/err.h"

void tfm_adam_init(tfm_adam *o, size_t n, int decoupled, double beta1, double beta2,
                   double eps, double weight_decay)
{
    memset(o, 0, sizeof *o);
    o->n = n;
    o->m = tfm_aligned_alloc(n * sizeof(float));
    o->v = tfm_aligned_alloc(n * sizeof(float));
    memset(o->m, 0, n * sizeof(float));
    memset(o->v, 0, n * sizeof(float));
    o->decoupled = decoupled;
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    o->weight_decay = weight_decay;
}

void tfm_adam_free(tfm_adam *o)
{
    free(o->m);
    free(o->v);
    memset(o, 0, sizeof *o);
}

void tfm_adam_step(tfm_adam *o, float *params, const float *grads, const tfm_param *table,
                   int n_table, double lr, float grad_scale)
{
    o->t++;
    const float b1 = (float)o->beta1, b2 = (float)o->beta2, eps = (float)o->eps;
    /* 1 - β in double first: (1.0f - 0.999f) loses 3 digits. */
    const float c1 = (float)(1.0 - o->beta1), c2 = (float)(1.0 - o->beta2);
    const double bc1 = 1.0 - pow(o->beta1, (double)o->t);
    const double bc2 = 1.0 - pow(o->beta2, (double)o->t);
    const float step = (float)(lr / bc1);
    const float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    for (int k = 0; k < n_table; k++) {
        const tfm_param *tp = &table[k];
        float *p = params + tp->offset;
        const float *g = grads + tp->offset;
        float *m = o->m + tp->offset, *v = o->v + tp->offset;
        const float wd = tp->decay ? (float)o->weight_decay : 0.0f;
        const float shrink = o->decoupled ? (float)(1.0 - lr * o->weight_decay) : 1.0f;
        const float l2 = o->decoupled ? 0.0f : wd;
        const int decay = tp->decay && o->weight_decay > 0;
        const size_t n = tp->numel;
#pragma omp parallel for schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) {
            float pi = p[i];
            float gi = g[i] * grad_scale + l2 * pi;
            if (decay && o->decoupled)
                pi *= shrink;
            float mi = b1 * m[i] + c1 * gi;
            float vi = b2 * v[i] + c2 * gi * gi;
            m[i] = mi;
            v[i] = vi;
            p[i] = pi - step * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
        }
    }
}

#define CHUNK 16384

double tfm_grad_norm(const float *g, size_t n)
{
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
    double stack[256];
    double *part = nchunks <= 256 ? stack : tfm_malloc(nchunks * sizeof(double));
#pragma omp parallel for schedule(static) if (nchunks > 4)
    for (size_t c = 0; c < nchunks; c++) {
        size_t lo = c * CHUNK, hi = lo + CHUNK < n ? lo + CHUNK : n;
        double s = 0;
        for (size_t i = lo; i < hi; i++)
            s += (double)g[i] * g[i];
        part[c] = s;
    }
    double s = 0;
    for (size_t c = 0; c < nchunks; c++)
        s += part[c];
    if (part != stack)
        free(part);
    return sqrt(s);
}

float tfm_grad_clip_factor(double norm, double max_norm)
{
    if (max_norm > 0 && isfinite(norm)) {
        double f = max_norm / (norm + 1e-6);
        if (f < 1)
            return (float)f;
    }
    return 1.0f;
}

double tfm_grad_clip(float *g, size_t n, double max_norm)
{
    double norm = tfm_grad_norm(g, n);
    float f = tfm_grad_clip_factor(norm, max_norm);
    if (f != 1.0f) {
#pragma omp parallel for schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++)
            g[i] *= f;
    }
    return norm;
}
