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
 * in turn).  Compare with the streaming read of scripts/bench/generate.
 *
 *   q8_bench gemm THREADS [REPS]
 *
 * times the matrix product instead (tfm_q8_gemm, whole-sequence
 * inference) on BERT-base's shapes -- q|k|v 768 -> 2304, the projection
 * 768 -> 768, the feed-forward 768 -> 3072 and 3072 -> 768 -- for 4096
 * rows (a batch) and 128 (a sentence): per shape, a JSON line with the
 * median GFLOP/s (2·M·N·K per product) of REPS (default 5) products by
 * each kernel this CPU runs but the scalar one (each quantizing its input
 * rows first, as inference does), of tfm's float32 tfm_gemm, and of
 * tfm_gemm_packed over packed weights. */
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

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return v[n / 2];
}

static int gemm_bench(int threads, int reps)
{
    static const int bert[4][2] = {{3 * C, C}, {C, C}, {4 * C, C}, {C, 4 * C}};
    static const char *bert_name[4] = {"qkv", "proj", "fc", "fc2"};
    static const int rows[2] = {4096, 128};
    tfm_blas_init(threads);
    printf("{\"kernels\": \"%s\", \"threads\": %d, \"q8_gemm_chosen\": \"%s\"}\n",
           tfm_blas_kernels(), threads, tfm_q8_gemm_kernel_name(tfm_q8_gemm_kernel(), NULL));
    double *t = malloc(sizeof(double) * (size_t)reps);
    for (int mi = 0; mi < 2; mi++)
        for (int s = 0; s < 4; s++) {
            const int M = rows[mi], N = bert[s][0], K = bert[s][1], nb = K / TFM_Q8_BLOCK;
            const double flop = 2.0 * M * N * K;
            tfm_q8 W = make(N, K);
            tfm_q8_packed P;
            tfm_q8_pack(&P, &W);
            float *x = tfm_aligned_alloc(sizeof(float) * (size_t)M * K);
            float *y = tfm_aligned_alloc(sizeof(float) * (size_t)M * N);
            float *B = tfm_aligned_alloc(sizeof(float) * (size_t)K * N);
            int8_t *xq = tfm_aligned_alloc((size_t)M * K);
            float *xd = tfm_aligned_alloc(sizeof(float) * (size_t)M * nb);
            for (size_t i = 0; i < (size_t)M * K; i++)
                x[i] = (float)((int)(next() % 2001) - 1000) * 1e-3f;
            for (int k = 0; k < K; k++) /* B[k, j] = W's (j, k) widened */
                for (int j = 0; j < N; j++)
                    B[(size_t)k * N + j] =
                        tfm_f16_to_f32(W.d[(size_t)j * nb + k / TFM_Q8_BLOCK]) *
                        W.q[(size_t)j * K + k];
            printf("{\"shape\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d", bert_name[s], M,
                   N, K);
            for (int k = 0; k < tfm_q8_gemm_kernel_count(); k++) {
                int ok;
                const char *name = tfm_q8_gemm_kernel_name(k, &ok);
                if (!ok || !strcmp(name, "scalar"))
                    continue;
                tfm_q8_gemm_kernel_use(k);
                for (int r = -1; r < reps; r++) {
                    double t0 = tfm_now();
                    for (int i = 0; i < M; i++)
                        tfm_q8_quantize(xq + (size_t)i * K, xd + (size_t)i * nb, x + (size_t)i * K, K);
                    tfm_q8_gemm(y, N, xq, xd, M, &P, NULL, NULL, NULL);
                    if (r >= 0)
                        t[r] = tfm_now() - t0;
                }
                printf(", \"q8_%s_gflops\": %.1f", name, flop / 1e9 / median_of(t, reps));
            }
            for (int r = -1; r < reps; r++) {
                double t0 = tfm_now();
                tfm_gemm(0, 0, M, N, K, 1.0f, x, K, B, N, 0.0f, y, N);
                if (r >= 0)
                    t[r] = tfm_now() - t0;
            }
            printf(", \"f32_gemm_gflops\": %.1f", flop / 1e9 / median_of(t, reps));
            tfm_gemm_b pb;
            tfm_gemm_b_pack(&pb, B, N, K, N);
            for (int r = -1; r < reps; r++) {
                double t0 = tfm_now();
                tfm_gemm_packed(M, x, K, &pb, y, N, NULL, NULL);
                if (r >= 0)
                    t[r] = tfm_now() - t0;
            }
            printf(", \"f32_packed_gflops\": %.1f}\n", flop / 1e9 / median_of(t, reps));
            fflush(stdout);
            tfm_gemm_b_free(&pb);
            tfm_q8_packed_free(&P);
            free((void *)W.q); free((void *)W.d); free(x); free(y); free(B); free(xq); free(xd);
        }
    free(t);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && argc <= 4 && !strcmp(argv[1], "gemm")) {
        int threads = atoi(argv[2]), reps = argc > 3 ? atoi(argv[3]) : 5;
        if (threads < 1 || reps < 1) {
            fprintf(stderr, "q8_bench: THREADS and REPS must be positive\n");
            return 2;
        }
        return gemm_bench(threads, reps);
    }
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: q8_bench THREADS [STEPS]\n       q8_bench gemm THREADS [REPS]\n");
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
