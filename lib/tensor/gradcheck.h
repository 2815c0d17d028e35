/* Test helper: central finite differences against an analytic gradient.
 *
 * The function under test maps float inputs to float outputs; the tests
 * reduce the outputs to a scalar in double with fixed random weights
 * (L = Σ r_i·out_i, so dL/dout = r), which keeps the difference quotient
 * free of float summation noise.  Header-only, for the *_test.c files. */
#ifndef TFM_TENSOR_GRADCHECK_H
#define TFM_TENSOR_GRADCHECK_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "base/rng.h"

typedef double (*gc_loss_fn)(void *ctx);

/* Checks up to max_points entries of x (spread evenly) and returns the
 * worst error, measured as |num - ana| / (atol + |num|); infinite when either
 * is not finite. */
static inline double gc_check(const char *what, gc_loss_fn f, void *ctx, float *x,
                              const float *ana, size_t n, float h, size_t max_points,
                              double atol)
{
    size_t step = n > max_points ? n / max_points : 1;
    double worst = 0.0;
    for (size_t i = 0; i < n; i += step) {
        float x0 = x[i];
        x[i] = x0 + h;
        double lp = f(ctx);
        x[i] = x0 - h;
        double lm = f(ctx);
        x[i] = x0;
        /* the perturbation actually applied, after float rounding */
        double hh = ((double)(x0 + h) - (double)(x0 - h));
        double num = (lp - lm) / hh;
        double e = fabs(num - ana[i]) / (atol + fabs(num));
        if (!isfinite(num) || !isfinite((double)ana[i]))
            e = INFINITY; /* NaN would compare false and pass */
        if (e > worst) {
            worst = e;
            if (e > 1e-2)
                fprintf(stderr, "%s[%zu]: numeric %.7g analytic %.7g\n", what, i, num,
                        (double)ana[i]);
        }
    }
    return worst;
}

static inline void gc_fill(tfm_rng *r, float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * tfm_rng_normal(r);
}

static inline double gc_dot(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

#endif
