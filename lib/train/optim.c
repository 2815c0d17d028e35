#include "train/optim.h"

#include "config.h"

#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

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

/* The constants of one Adam step over one slice. */
typedef struct adam_k {
    float b1, b2, c1, c2, eps, step, inv_sqrt_bc2, l2, shrink, gs;
} adam_k;

/* sqrtf may set errno, so compilers keep the Adam loop scalar; the vector
 * body uses the vector square root explicitly (GCC's vector operators for
 * the rest), the scalar tail the same formula. */
static void adam_span(float *restrict p, const float *restrict g, float *restrict m,
                      float *restrict v, size_t n, const adam_k *k)
{
    const adam_k c = *k;
    size_t i = 0;
#if defined(__AVX512F__)
    typedef __m512 vec;
    enum { W = 16 };
#define VSET(x) _mm512_set1_ps(x)
#define VLOAD(a) _mm512_loadu_ps(a)
#define VSTORE(a, x) _mm512_storeu_ps(a, x)
#define VSQRT(x) _mm512_sqrt_ps(x)
#elif defined(__AVX__)
    typedef __m256 vec;
    enum { W = 8 };
#define VSET(x) _mm256_set1_ps(x)
#define VLOAD(a) _mm256_loadu_ps(a)
#define VSTORE(a, x) _mm256_storeu_ps(a, x)
#define VSQRT(x) _mm256_sqrt_ps(x)
#endif
#ifdef VSET
    const vec b1 = VSET(c.b1), b2 = VSET(c.b2), c1 = VSET(c.c1), c2 = VSET(c.c2),
              eps = VSET(c.eps), step = VSET(c.step), isb = VSET(c.inv_sqrt_bc2),
              l2 = VSET(c.l2), shrink = VSET(c.shrink), gs = VSET(c.gs);
    for (; i + W <= n; i += W) {
        vec pi = VLOAD(p + i);
        vec gi = VLOAD(g + i) * gs + l2 * pi;
        pi = pi * shrink;
        vec mi = b1 * VLOAD(m + i) + c1 * gi;
        vec vi = b2 * VLOAD(v + i) + c2 * gi * gi;
        VSTORE(m + i, mi);
        VSTORE(v + i, vi);
        VSTORE(p + i, pi - step * mi / (VSQRT(vi) * isb + eps));
    }
#undef VSET
#undef VLOAD
#undef VSTORE
#undef VSQRT
#endif
    for (; i < n; i++) {
        float pi = p[i];
        float gi = g[i] * c.gs + c.l2 * pi;
        pi *= c.shrink;
        float mi = c.b1 * m[i] + c.c1 * gi;
        float vi = c.b2 * v[i] + c.c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - c.step * mi / (sqrtf(vi) * c.inv_sqrt_bc2 + c.eps);
    }
}

#define CHUNK 16384

static int any_frozen(const tfm_param *table, int n_table)
{
    for (int t = 0; t < n_table; t++)
        if (table[t].frozen)
            return 1;
    return 0;
}

size_t tfm_adam_size(const tfm_param *table, int n_table)
{
    size_t n = 0, packed = any_frozen(table, n_table);
    for (int t = 0; t < n_table; t++) {
        size_t end = table[t].offset + ((table[t].numel + 15) & ~(size_t)15);
        if (!packed)
            n = end > n ? end : n;
        else if (!table[t].frozen)
            n += (table[t].numel + 15) & ~(size_t)15;
    }
    return n;
}

tfm_param *tfm_adam_table(const tfm_param *table, int n_table, int *n)
{
    tfm_param *t = tfm_malloc((size_t)(n_table > 0 ? n_table : 1) * sizeof *t);
    size_t off = 0;
    int packed = any_frozen(table, n_table);
    *n = 0;
    for (int i = 0; i < n_table; i++) {
        if (table[i].frozen)
            continue;
        t[*n] = table[i];
        if (packed)
            t[*n].offset = off;
        off += (table[i].numel + 15) & ~(size_t)15;
        (*n)++;
    }
    return t;
}

void tfm_adam_step(tfm_adam *o, float *params, const float *grads, const tfm_param *table,
                   int n_table, double lr, float grad_scale)
{
    o->t++;
    const double bc1 = 1.0 - pow(o->beta1, (double)o->t);
    const double bc2 = 1.0 - pow(o->beta2, (double)o->t);
    adam_k k = {
        .b1 = (float)o->beta1,
        .b2 = (float)o->beta2,
        /* 1 - β in double first: (1.0f - 0.999f) loses 3 digits. */
        .c1 = (float)(1.0 - o->beta1),
        .c2 = (float)(1.0 - o->beta2),
        .eps = (float)o->eps,
        .step = (float)(lr / bc1),
        .inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2)),
        .gs = grad_scale,
    };
    /* frozen tensors have no moments: the moments of the others lie
     * packed, each on a 16-float boundary (tfm_adam_size); without frozen
     * tensors, at the table's own offsets */
    const int packed = any_frozen(table, n_table);
    size_t total = 0;
    for (int t = 0; t < n_table; t++)
        total += table[t].frozen ? 0 : table[t].numel;
    /* One parallel region over all tensors (most are too small to split on
     * their own): each thread takes a contiguous share of the elements,
     * cut in CHUNK-sized pieces, and updates the parts of the tensors that
     * fall in it.  Every element's arithmetic is the same whoever does it. */
    const size_t nchunks = (total + CHUNK - 1) / CHUNK;
#pragma omp parallel for schedule(static) if (nchunks > 4)
    for (size_t c = 0; c < nchunks; c++) {
        size_t lo = c * CHUNK, hi = lo + CHUNK < total ? lo + CHUNK : total, start = 0;
        size_t mstart = 0;
        for (int t = 0; t < n_table && start < hi; t++) {
            const tfm_param *tp = &table[t];
            if (tp->frozen)
                continue;
            size_t a = lo > start ? lo - start : 0, end = start + tp->numel;
            size_t b = hi < end ? hi - start : tp->numel;
            size_t moff = (packed ? mstart : tp->offset) + a;
            start = end;
            mstart += (tp->numel + 15) & ~(size_t)15;
            if (a >= b)
                continue;
            adam_k kk = k;
            /* Adam's L2 decay enters the gradient; AdamW's is a factor on p. */
            kk.l2 = (!o->decoupled && tp->decay) ? (float)o->weight_decay : 0.0f;
            kk.shrink = (o->decoupled && tp->decay) ? (float)(1.0 - lr * o->weight_decay) : 1.0f;
            size_t off = tp->offset + a;
            adam_span(params + off, grads + off, o->m + moff, o->v + moff, b - a, &kk);
        }
    }
}

static double sumsq_span(const float *restrict g, size_t n)
{
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * g[i];
    return s;
}

double tfm_grad_norm(const float *g, size_t n)
{
    size_t nchunks = (n + CHUNK - 1) / CHUNK;
    double stack[256];
    double *part = nchunks <= 256 ? stack : tfm_malloc(nchunks * sizeof(double));
#pragma omp parallel for schedule(static) if (nchunks > 4)
    for (size_t c = 0; c < nchunks; c++) {
        size_t lo = c * CHUNK, len = lo + CHUNK < n ? CHUNK : n - lo;
        part[c] = sumsq_span(g + lo, len);
    }
    double s = 0;
    for (size_t c = 0; c < nchunks; c++)
        s += part[c];
    if (part != stack)
        free(part);
    return sqrt(s);
}

double tfm_grad_norm_model(const tfm_model *m)
{
    const float *g = m->grads;
    size_t n = m->n_params, nchunks = (n + CHUNK - 1) / CHUNK, lo, hi;
    /* each chunk's floats in the runs; a chunk with none sums to 0 */
    size_t *in = tfm_calloc(nchunks ? nchunks : 1, sizeof *in);
    double *part = tfm_calloc(nchunks ? nchunks : 1, sizeof *part);
    for (int row = 0; tfm_model_grad_span(m, &row, &lo, &hi);)
        for (size_t c = lo / CHUNK; c * CHUNK < hi; c++) {
            size_t a = c * CHUNK > lo ? c * CHUNK : lo;
            size_t b = (c + 1) * CHUNK < hi ? (c + 1) * CHUNK : hi;
            in[c] += b - a;
        }
#pragma omp parallel for schedule(static) if (nchunks > 4)
    for (size_t c = 0; c < nchunks; c++) {
        size_t c0 = c * CHUNK, len = c0 + CHUNK < n ? CHUNK : n - c0;
        if (!in[c])
            continue;
        /* a chunk partly in the runs: summed as tfm_grad_norm sums it, over
         * a copy with zeros for the rest (64-byte aligned as g + c0 is, so
         * that the vectorized sum adds in the same order) */
        float *buf = NULL;
        if (in[c] < len) {
            buf = tfm_aligned_alloc(CHUNK * sizeof *buf);
            memset(buf, 0, len * sizeof *buf);
            int row = 0;
            while (tfm_model_grad_span(m, &row, &lo, &hi))
                if (lo < c0 + len && hi > c0) {
                    size_t a = lo > c0 ? lo : c0, b = hi < c0 + len ? hi : c0 + len;
                    memcpy(buf + (a - c0), g + a, (b - a) * sizeof *buf);
                }
        }
        part[c] = sumsq_span(buf ? buf : g + c0, len);
        free(buf);
    }
    double s = 0;
    for (size_t c = 0; c < nchunks; c++)
        s += part[c];
    free(part);
    free(in);
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
