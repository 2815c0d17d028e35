/* Times the 8-bit block products (tensor/q8.h) on GPT-2-small's weight
 * matrices, the products of one decode step:
 *
 *   q8_bench THREADS [STEPS]
 *
 * 12 layers of q|k|v [2304, 768], the projection [768, 768], the
 * feed-forward [3072, 768] and [768, 3072], and the tied head [50257, 768],
 * random 8-bit weights (134 MB with their scales: far beyond the caches,
 * as in decoding).  For each kernel this CPU runs, a JSON line: the median
 * ms of STEPS (default 20) passes over all of them (each product
 * quantizes its input first, as the decode step does), the bytes read per
 * ms as GB/s, and the median GB/s of each shape alone (its twelve layers
 * in turn).  Compare with the streaming read of scripts/bench/generate. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/half.h"
#include "base/progress.h"
#include "tensor/gemm.h"
#include "tensor/q8.h"

enum { LAYERS = 12, C = 768, SHAPES = 5 };
static const int shape_nk[SHAPES][2] = {{3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}, {50257, C}};
static const char *shape_name[SHAPES] = {"qkv", "proj", "fc", "fc2", "head"};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint32_t rng = 2463534242u;
static uint32_t next(void)
{
    rng ^= rng << 13, rng ^= rng >> 17, rng ^= rng << 5;
    return rng;
}

static tfm_q8 make(int N, int K)
{
    int8_t *q = tfm_aligned_alloc((size_t)N * K);
    uint16_t *d = tfm_aligned_alloc(sizeof(uint16_t) * (size_t)N * (K / TFM_Q8_BLOCK));
    for (size_t i = 0; i < (size_t)N * K; i++)
        q[i] = (int8_t)((int)(next() % 255) - 127);
    for (size_t i = 0; i < (size_t)N * (K / TFM_Q8_BLOCK); i++)
        d[i] = tfm_f32_to_f16(1e-3f * (float)(1 + next() % 100));
    return (tfm_q8){q, d, N, K};
}

static double bytes_of(const tfm_q8 *W)
{
    return (double)W->N * W->K * (1.0 + 2.0 / TFM_Q8_BLOCK);
}

static volatile long sink;

/* Σ of W's bytes, its scales' included (a streaming read) */
static long read_all(const tfm_q8 *W, int threads)
{
    const size_t n = (size_t)W->N * W->K / 8, m = (size_t)W->N * (W->K / TFM_Q8_BLOCK) / 4;
    const uint64_t *q = (const uint64_t *)W->q, *d = (const uint64_t *)W->d;
    uint64_t s = 0;
#pragma omp parallel for reduction(^ : s) num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++)
        s ^= q[i];
#pragma omp parallel for reduction(^ : s) num_threads(threads) schedule(static)
    for (size_t i = 0; i < m; i++)
        s ^= d[i];
    return (long)s;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: q8_bench THREADS [STEPS]\n");
        return 2;
    }
    int threads = atoi(argv[1]), steps = argc > 2 ? atoi(argv[2]) : 20;
    if (threads < 1 || steps < 1) {
        fprintf(stderr, "q8_bench: THREADS and STEPS must be positive\n");
        return 2;
    }
    tfm_blas_init(threads);
    tfm_q8 W[SHAPES][LAYERS];
    double step_bytes = 0;
    for (int s = 0; s < SHAPES; s++)
        for (int l = 0; l < (s == SHAPES - 1 ? 1 : LAYERS); l++) {
            W[s][l] = make(shape_nk[s][0], shape_nk[s][1]);
            step_bytes += bytes_of(&W[s][l]);
        }
    float *x = tfm_aligned_alloc(sizeof(float) * 4 * C), *y = tfm_aligned_alloc(sizeof(float) * 50257);
    int8_t *xq = tfm_aligned_alloc(4 * C);
    float *xd = tfm_aligned_alloc(sizeof(float) * 4 * C / TFM_Q8_BLOCK);
    for (int i = 0; i < 4 * C; i++)
        x[i] = (float)((int)(next() % 2001) - 1000) * 1e-3f;
    double *ms = malloc(sizeof(double) * (size_t)(steps > LAYERS ? steps : LAYERS));
    printf("{\"kernels\": \"%s\", \"threads\": %d, \"step_mb\": %.1f}\n", tfm_blas_kernels(),
           threads, step_bytes / 1e6);
    /* the bound: the same bytes read as fast as this machine reads them,
     * the threads splitting each matrix as the products do */
    {
        for (int r = -1; r < steps; r++) {
            double t0 = tfm_now();
            long total = 0;
            for (int s = 0; s < SHAPES; s++)
                for (int l = 0; l < (s == SHAPES - 1 ? 1 : LAYERS); l++)
                    total += read_all(&W[s][l], threads);
            if (r >= 0)
                ms[r] = (tfm_now() - t0) * 1e3;
            sink += total;
        }
        qsort(ms, (size_t)steps, sizeof(double), cmp_double);
        printf("{\"kernel\": \"read\", \"step_ms\": %.3f, \"gb_per_s\": %.1f}\n", ms[steps / 2],
               step_bytes / 1e6 / ms[steps / 2]);
    }
    for (int k = 0; k < tfm_q8_kernel_count(); k++) {
        int ok;
        const char *name = tfm_q8_kernel_name(k, &ok);
        if (!ok || !strcmp(name, "scalar"))
            continue;
        tfm_q8_kernel_use(k);
        for (int r = -1; r < steps; r++) {
            double t0 = tfm_now();
            for (int l = 0; l < LAYERS; l++)
                for (int s = 0; s < SHAPES - 1; s++) {
                    tfm_q8_quantize(xq, xd, x, W[s][l].K);
                    tfm_q8_gemv(y, xq, xd, &W[s][l], NULL, 1);
                }
            tfm_q8_quantize(xq, xd, x, C);
            tfm_q8_gemv(y, xq, xd, &W[SHAPES - 1][0], NULL, 1);
            if (r >= 0)
                ms[r] = (tfm_now() - t0) * 1e3;
        }
        qsort(ms, (size_t)steps, sizeof(double), cmp_double);
        printf("{\"kernel\": \"%s\", \"step_ms\": %.3f, \"gb_per_s\": %.1f", name, ms[steps / 2],
               step_bytes / 1e6 / ms[steps / 2]);
        tfm_q8_quantize(xq, xd, x, C);
        for (int s = 0; s < SHAPES; s++) {
            int n = s == SHAPES - 1 ? 1 : LAYERS, reps = s == SHAPES - 1 ? 9 : 3;
            double gbs[3 * LAYERS];
            for (int r = 0; r < reps; r++)
                for (int l = 0; l < n; l++) {
                    tfm_q8_quantize(xq, xd, x, W[s][l].K);
                    double t0 = tfm_now();
                    tfm_q8_gemv(y, xq, xd, &W[s][l], NULL, 1);
                    gbs[r * n + l] = bytes_of(&W[s][l]) / 1e9 / (tfm_now() - t0);
                }
            qsort(gbs, (size_t)(reps * n), sizeof(double), cmp_double);
            printf(", \"%s_gb_per_s\": %.1f", shape_name[s], gbs[reps * n / 2]);
        }
        printf("}\n");
        fflush(stdout);
    }
    return 0;
}
