/* 8-bit block products: every kernel this CPU runs against the portable
 * one (exact integer sums), quantization's error bound, and the product
 * against a double-precision sum over the dequantized operands. */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "base/half.h"
#include "tensor/gemm.h"
#include "tensor/q8.h"

static void fill_i8(tfm_rng *r, int8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (int8_t)((int)tfm_rng_below(r, 255) - 127); /* -127..127 */
}

static void test_kernels_equal_scalar(void **state)
{
    (void)state;
    const int nbs[] = {1, 7, 8, 9, 15, 16, 17, 24, 32, 33, 40, 96, 300};
    tfm_rng r;
    tfm_rng_seed(&r, 7);
    int ran = 0;
    for (int k = 0; k < tfm_q8_kernel_count(); k++) {
        int sup;
        const char *name = tfm_q8_kernel_name(k, &sup);
        if (!sup) {
            printf("# q8 kernel %s: not on this CPU, skipped\n", name);
            continue;
        }
        ran++;
        for (size_t t = 0; t < sizeof nbs / sizeof nbs[0]; t++) {
            int nb = nbs[t];
            size_t n = (size_t)nb * TFM_Q8_BLOCK;
            int8_t *w = malloc(n + 1), *x = malloc(n + 1);
            uint16_t *dw = malloc(sizeof(uint16_t) * nb);
            float *dx = malloc(sizeof(float) * nb);
            /* odd addresses: the kernels load unaligned */
            fill_i8(&r, w + 1, n);
            fill_i8(&r, x + 1, n);
            /* the extremes: the largest sums in both signs, zeros */
            memset(w + 1, 127, TFM_Q8_BLOCK);
            memset(x + 1, 127, TFM_Q8_BLOCK);
            if (nb > 1) {
                memset(w + 1 + TFM_Q8_BLOCK, 127, TFM_Q8_BLOCK);
                memset(x + 1 + TFM_Q8_BLOCK, -127, TFM_Q8_BLOCK);
            }
            if (nb > 2)
                memset(x + 1 + 2 * TFM_Q8_BLOCK, 0, TFM_Q8_BLOCK);
            for (int b = 0; b < nb; b++) { /* subnormal scales too */
                dw[b] = tfm_f32_to_f16(tfm_rng_float(&r) * (b % 5 ? 0.01f : 1e-6f));
                dx[b] = tfm_rng_float(&r) * 0.02f;
            }
            /* the definition (q8.h), independently: exact block sums, then
             * one fused multiply-add per block into lane b % 8 */
            float acc[8] = {0};
            int32_t first = 0;
            for (int b = 0; b < nb; b++) {
                int32_t s = 0;
                for (int i = 0; i < TFM_Q8_BLOCK; i++)
                    s += w[1 + b * TFM_Q8_BLOCK + i] * x[1 + b * TFM_Q8_BLOCK + i];
                first = b ? first : s;
                acc[b % 8] = fmaf(tfm_f16_to_f32(dw[b]) * dx[b], (float)s, acc[b % 8]);
            }
            assert_int_equal(first, 32 * 127 * 127);
            float want = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            float got = tfm_q8_row_dot(k, w + 1, dw, x + 1, dx, nb);
            if (memcmp(&got, &want, sizeof got))
                fail_msg("kernel %s, %d blocks: %.9g, not %.9g", name, nb, got, want);
            free(w);
            free(x);
            free(dw);
            free(dx);
        }
        printf("# q8 kernel %s: equal to the definition\n", name);
    }
    assert_true(ran >= 1);
    int sup;
    printf("# q8 kernel chosen by timing: %s\n", tfm_q8_kernel_name(tfm_q8_kernel(), &sup));
    assert_true(sup);
}

/* Halfway values: to even for activations, away from zero for weights
 * (llama.cpp's reference quantizer); elsewhere both agree. */
static void test_quantize_ties(void **state)
{
    (void)state;
    float x[64];
    int8_t qa[64], qr[64];
    float da[2], dr[2];
    for (int i = 0; i < 64; i++)
        x[i] = (float)(i % 32) - 15.5f; /* -15.5 .. 15.5: every one halfway */
    x[31] = x[63] = 127;                /* scale 1: x / d = x exactly */
    x[40] = 2.25f;                      /* not halfway: 2 either way */
    tfm_q8_quantize(qa, da, x, 64);
    tfm_q8_quantize_ref(qr, dr, x, 64);
    assert_memory_equal(da, dr, sizeof da);
    assert_float_equal(da[0], 1, 0);
    for (int i = 0; i < 64; i++) {
        if (i % 32 == 31)
            continue;
        if (i == 40) {
            assert_int_equal(qa[i], 2);
            assert_int_equal(qr[i], 2);
            continue;
        }
        double h = x[i];
        int lo = (int)floor(h), hi = lo + 1; /* h = lo + 0.5 */
        assert_int_equal(qa[i], lo % 2 == 0 ? lo : hi);
        assert_int_equal(qr[i], h > 0 ? hi : lo);
    }
}

/* tfm_q8_quantize (vectorized where the CPU can) against the definition
 * written out here: d = max|x| / 127, q = x·(1/d) rounded to nearest,
 * ties to even; NaN or infinity in a block: scale NaN or infinite,
 * values 0.  Blocks of every scale, subnormal ones, zeros, ties; the
 * scalar code for weights (tfm_q8_quantize_ref) agrees off the ties. */
static void test_quantize_definition(void **state)
{
    (void)state;
    enum { NB = 400, K = 32 * NB };
    tfm_rng r;
    tfm_rng_seed(&r, 17);
    float *x = malloc(sizeof(float) * K), d[NB];
    int8_t *q = malloc(K);
    for (int b = 0; b < NB; b++) {
        const float scale = ldexpf(1.0f, (int)tfm_rng_below(&r, 260) - 140);
        for (int i = 0; i < 32; i++)
            x[b * 32 + i] = tfm_rng_normal(&r) * scale;
        if (b % 7 == 1) /* x·(1/d) halfway: d = 1 */
            for (int i = 0; i < 32; i++)
                x[b * 32 + i] = i == 5 ? -127.0f : (float)((int)tfm_rng_below(&r, 200) - 100) + 0.5f;
    }
    for (int i = 0; i < 32; i++)
        x[2 * 32 + i] = 0.0f;
    x[3 * 32 + 7] = NAN;
    x[4 * 32 + 30] = -INFINITY;
    x[5 * 32 + 0] = -0.0f;
    int8_t *qr = malloc(K);
    float *dr = malloc(sizeof(float) * NB);
    tfm_q8_quantize(q, d, x, K);
    tfm_q8_quantize_ref(qr, dr, x, K);
    for (int b = 0; b < NB; b++) {
        if (b % 7 != 1) /* no ties: the same values */
            assert_memory_equal(q + b * 32, qr + b * 32, 32);
        float amax = 0.0f;
        int bad = 0;
        for (int i = 0; i < 32; i++) {
            bad |= !isfinite(x[b * 32 + i]);
            amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        }
        const float want_d = b == 3 ? NAN : b == 4 ? INFINITY : amax / 127.0f;
        if (isnan(want_d))
            assert_true(isnan(d[b]));
        else
            assert_memory_equal(&d[b], &want_d, sizeof(float));
        /* a block whose 1/d overflows (max |x| < 2^-121) quantizes to 0 */
        const float inv = !bad && want_d > 0 && isfinite(1.0f / want_d) ? 1.0f / want_d : 0.0f;
        for (int i = 0; i < 32; i++) {
            const int want = inv ? (int)nearbyintf(x[b * 32 + i] * inv) : 0;
            if (q[b * 32 + i] != want)
                fail_msg("block %d value %d: %d, not %d", b, i, q[b * 32 + i], want);
        }
    }
    free(x);
    free(q);
    free(qr);
    free(dr);
}

static void test_quantize_bound(void **state)
{
    (void)state;
    enum { K = 32 * 9 };
    tfm_rng r;
    tfm_rng_seed(&r, 3);
    float x[K], y[K], d[K / 32];
    int8_t q[K];
    for (int i = 0; i < K; i++)
        x[i] = tfm_rng_normal(&r) * (1 + i / 32); /* each block its own range */
    for (int i = 64; i < 96; i++)
        x[i] = 0; /* an all-zero block: scale 0, values 0 */
    x[100] = -1e-30f; /* a tiny value among larger ones rounds to 0 */
    tfm_q8_quantize(q, d, x, K);
    tfm_q8_dequantize(y, q, d, K);
    for (int b = 0; b < K / 32; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        assert_float_equal(d[b], amax / 127, 0);
        for (int i = 0; i < 32; i++) {
            int j = b * 32 + i;
            assert_true(q[j] >= -127 && q[j] <= 127);
            /* round to nearest: half a step, and float's rounding of x/d */
            assert_true(fabsf(x[j] - y[j]) <= d[b] * (0.5f + 1e-5f));
        }
    }
    assert_int_equal(d[2] == 0, 1);
    for (int i = 64; i < 96; i++)
        assert_int_equal(q[i], 0);
    /* a diverged activation stays visible: NaN and infinity in, a product
     * that is not finite out */
    int8_t w8[64];
    uint16_t wd[2] = {tfm_f32_to_f16(0.01f), tfm_f32_to_f16(0.02f)};
    float out;
    for (int i = 0; i < 64; i++)
        w8[i] = (int8_t)(i % 7 - 3);
    const float bad[2] = {NAN, INFINITY};
    for (int k = 0; k < 2; k++) {
        float xs[64], xd2[2];
        int8_t xq2[64];
        for (int i = 0; i < 64; i++)
            xs[i] = 0.5f;
        xs[40] = bad[k];
        tfm_q8_quantize(xq2, xd2, xs, 64);
        tfm_q8 W = {w8, wd, 1, 64};
        tfm_q8_gemv(&out, xq2, xd2, &W, NULL, 1);
        assert_false(isfinite(out));
    }
}

static void test_gemv(void **state)
{
    (void)state;
    const int Ks[] = {32, 96, 768, 8192 + 64}, Ns[] = {1, 5, 64, 700};
    tfm_rng r;
    tfm_rng_seed(&r, 11);
    for (int ki = 0; ki < 4; ki++)
        for (int ni = 0; ni < 4; ni++) {
            const int K = Ks[ki], N = Ns[ni], nb = K / 32, n = 1 + (ki + ni) % 4;
            int8_t *wq = malloc((size_t)N * K), *xq = malloc((size_t)n * K);
            uint16_t *wd = malloc(sizeof *wd * N * nb);
            float *xd = malloc(sizeof(float) * n * nb);
            float *bias = malloc(sizeof(float) * N);
            float *y = malloc(sizeof(float) * n * N), *y0 = malloc(sizeof(float) * n * N);
            float *x = malloc(sizeof(float) * n * K), *wrow = malloc(sizeof(float) * K);
            fill_i8(&r, wq, (size_t)N * K);
            for (int i = 0; i < N * nb; i++) /* half precision, subnormals too */
                wd[i] = tfm_f32_to_f16(tfm_rng_float(&r) * (i % 97 ? 0.01f : 1e-6f));
            for (int i = 0; i < n * K; i++)
                x[i] = tfm_rng_normal(&r);
            for (int i = 0; i < N; i++)
                bias[i] = tfm_rng_normal(&r);
            for (int rr = 0; rr < n; rr++)
                tfm_q8_quantize(xq + (size_t)rr * K, xd + (size_t)rr * nb, x + (size_t)rr * K, K);
            tfm_q8 W = {wq, wd, N, K};
            int first = 1;
            for (int k = 0; k < tfm_q8_kernel_count(); k++) {
                int sup;
                tfm_q8_kernel_name(k, &sup);
                if (!sup)
                    continue;
                assert_int_equal(tfm_q8_kernel_use(k), 0);
                tfm_q8_gemv(y, xq, xd, &W, (n & 1) ? bias : NULL, n);
                if (first) { /* against the dequantized operands in double */
                    memcpy(y0, y, sizeof(float) * n * N);
                    first = 0;
                    for (int j = 0; j < N; j++) {
                        for (int i = 0; i < K; i++) /* the scale widened here */
                            wrow[i] = tfm_f16_to_f32(wd[(size_t)j * nb + i / 32]) *
                                      (float)wq[(size_t)j * K + i];
                        for (int rr = 0; rr < n; rr++) {
                            double s = (n & 1) ? bias[j] : 0, mag = fabs(s);
                            for (int i = 0; i < K; i++) {
                                double xv = (double)xd[rr * nb + i / 32] * xq[(size_t)rr * K + i];
                                s += (double)wrow[i] * xv;
                                mag += fabs((double)wrow[i] * xv);
                            }
                            assert_true(fabs(y[(size_t)rr * N + j] - s) <= 1e-5 * mag + 1e-30);
                        }
                    }
                } else { /* every kernel: the same floats */
                    assert_memory_equal(y, y0, sizeof(float) * n * N);
                }
            }
            free(wq); free(xq); free(wd); free(xd); free(bias); free(y); free(y0);
            free(x); free(wrow);
        }
}

/* The definition (q8.h) for y[r, j], independently of the library. */
static float def_dot(const int8_t *w, const uint16_t *dw, const int8_t *x, const float *dx,
                     int nb)
{
    float acc[8] = {0};
    for (int b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int i = 0; i < TFM_Q8_BLOCK; i++)
            s += w[b * TFM_Q8_BLOCK + i] * x[b * TFM_Q8_BLOCK + i];
        acc[b % 8] = fmaf(tfm_f16_to_f32(dw[b]) * dx[b], (float)s, acc[b % 8]);
    }
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* counts the epilogue's visits of each element of y */
typedef struct {
    int *seen;
    float *y;
    int ldy;
} epi_check;

static void count_epi(void *ctx, float *C, int ldc, int r0, int m, int c0, int n)
{
    epi_check *e = ctx;
    assert_int_equal(ldc, e->ldy);
    assert_ptr_equal(C, e->y + (size_t)r0 * ldc + c0);
    for (int r = r0; r < r0 + m; r++)
        for (int c = c0; c < c0 + n; c++)
            e->seen[(size_t)r * ldc + c]++;
}

/* tfm_q8_gemm, every kernel this CPU runs, against the definition to the
 * bit: rows 1..9 and more, widths that are not multiples of the panels,
 * one block to many, with a bias and without, and with a row stride
 * wider than N (columns past N untouched). */
static void test_gemm(void **state)
{
    (void)state;
    /* AMX takes groups of 32 rows, the rest go to AVX-512 */
    const int Ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 32, 37, 71};
    const int Ns[] = {1, 5, 16, 17, 33, 48, 100};
    const int Ks[] = {32, 64, 224, 256, 288, 768, 3072 + 32};
    tfm_rng r;
    tfm_rng_seed(&r, 5);
    int ran[16] = {0};
    for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
            for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++) {
                const int M = Ms[mi], N = Ns[ni], K = Ks[ki], nb = K / 32, ldy = N + 3;
                const int with_bias = (mi + ni + ki) % 2;
                int8_t *wq = malloc((size_t)N * K), *xq = malloc((size_t)M * K);
                uint16_t *wd = malloc(sizeof *wd * N * nb);
                float *xd = malloc(sizeof(float) * M * nb), *bias = malloc(sizeof(float) * N);
                float *want = malloc(sizeof(float) * M * ldy), *y = malloc(sizeof(float) * M * ldy);
                int *seen = calloc((size_t)M * ldy, sizeof(int));
                fill_i8(&r, wq, (size_t)N * K);
                fill_i8(&r, xq, (size_t)M * K);
                /* the extremes: the largest block sums of both signs */
                memset(wq, 127, 32);
                memset(xq, 127, 32);
                if (M > 1)
                    memset(xq + K, -127, 32);
                if (N > 1)
                    memset(wq + K, -127, 32);
                for (int i = 0; i < N * nb; i++)
                    wd[i] = tfm_f32_to_f16(tfm_rng_float(&r) * (i % 13 ? 0.01f : 1e-6f));
                for (int i = 0; i < M * nb; i++)
                    xd[i] = tfm_rng_float(&r) * 0.02f;
                for (int j = 0; j < N; j++)
                    bias[j] = tfm_rng_normal(&r);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < ldy; j++)
                        want[(size_t)i * ldy + j] =
                            j >= N ? -1.0f
                                   : def_dot(wq + (size_t)j * K, wd + (size_t)j * nb,
                                             xq + (size_t)i * K, xd + (size_t)i * nb, nb) +
                                         (with_bias ? bias[j] : 0.0f);
                if (!with_bias) /* s, not s + 0: -0 stays */
                    for (int i = 0; i < M; i++)
                        for (int j = 0; j < N; j++)
                            want[(size_t)i * ldy + j] =
                                def_dot(wq + (size_t)j * K, wd + (size_t)j * nb,
                                        xq + (size_t)i * K, xd + (size_t)i * nb, nb);
                tfm_q8 W = {wq, wd, N, K};
                tfm_q8_packed P;
                tfm_q8_pack(&P, &W);
                for (int k = 0; k < tfm_q8_gemm_kernel_count(); k++) {
                    int sup;
                    const char *name = tfm_q8_gemm_kernel_name(k, &sup);
                    if (!sup)
                        continue;
                    ran[k] = 1;
                    assert_int_equal(tfm_q8_gemm_kernel_use(k), 0);
                    for (int i = 0; i < M * ldy; i++)
                        y[i] = -1.0f;
                    memset(seen, 0, sizeof(int) * M * ldy);
                    epi_check ec = {seen, y, ldy};
                    tfm_q8_gemm(y, ldy, xq, xd, M, &P, with_bias ? bias : NULL, count_epi, &ec);
                    for (int i = 0; i < M * ldy; i++) {
                        if (memcmp(&y[i], &want[i], sizeof(float)))
                            fail_msg("gemm kernel %s, M %d N %d K %d: y[%d,%d] %.9g, not %.9g",
                                     name, M, N, K, i / ldy, i % ldy, y[i], want[i]);
                        assert_int_equal(seen[i], i % ldy < N ? 1 : 0);
                    }
                }
                tfm_q8_packed_free(&P);
                free(wq); free(xq); free(wd); free(xd); free(bias); free(want); free(y);
                free(seen);
            }
    for (int k = 0; k < tfm_q8_gemm_kernel_count(); k++) {
        int sup;
        const char *name = tfm_q8_gemm_kernel_name(k, &sup);
        printf("# q8 gemm kernel %s: %s\n", name,
               ran[k] ? "equal to the definition" : "not on this CPU, skipped");
    }
    /* the x86-64 kernels must have been checked where the CPU runs them */
    for (int k = 0; k < tfm_q8_gemm_kernel_count(); k++) {
        int sup;
        tfm_q8_gemm_kernel_name(k, &sup);
        assert_int_equal(ran[k], sup);
    }
    int sup;
    printf("# q8 gemm kernel chosen by timing: %s\n",
           tfm_q8_gemm_kernel_name(tfm_q8_gemm_kernel(), &sup));
    assert_true(sup);
}

/* A product large enough for threads, on several: the same bits as one
 * thread's, and as tfm_q8_gemv's (the decode path) row by row. */
static void test_gemm_threads_gemv(void **state)
{
    (void)state;
    enum { M = 70, N = 300, K = 1024, NB = K / 32 };
    tfm_rng r;
    tfm_rng_seed(&r, 9);
    int8_t *wq = malloc((size_t)N * K), *xq = malloc((size_t)M * K);
    uint16_t *wd = malloc(sizeof *wd * N * NB);
    float *xd = malloc(sizeof(float) * M * NB), *bias = malloc(sizeof(float) * N);
    float *y1 = malloc(sizeof(float) * M * N), *yn = malloc(sizeof(float) * M * N);
    float *yg = malloc(sizeof(float) * M * N);
    fill_i8(&r, wq, (size_t)N * K);
    for (int i = 0; i < N * NB; i++)
        wd[i] = tfm_f32_to_f16(tfm_rng_float(&r) * 0.01f);
    float *x = malloc(sizeof(float) * M * K);
    for (int i = 0; i < M * K; i++)
        x[i] = tfm_rng_normal(&r);
    for (int i = 0; i < M; i++)
        tfm_q8_quantize(xq + (size_t)i * K, xd + (size_t)i * NB, x + (size_t)i * K, K);
    for (int j = 0; j < N; j++)
        bias[j] = tfm_rng_normal(&r);
    tfm_q8 W = {wq, wd, N, K};
    tfm_q8_packed P;
    tfm_q8_pack(&P, &W);
    tfm_q8_gemm_kernel_use(tfm_q8_kernel()); /* any: they agree */
    tfm_blas_init(1);
    tfm_q8_gemm(y1, N, xq, xd, M, &P, bias, NULL, NULL);
    tfm_blas_init(3);
    tfm_q8_gemm(yn, N, xq, xd, M, &P, bias, NULL, NULL);
    assert_memory_equal(y1, yn, sizeof(float) * M * N);
    for (int i = 0; i < M; i++)
        tfm_q8_gemv(yg + (size_t)i * N, xq + (size_t)i * K, xd + (size_t)i * NB, &W, bias, 1);
    assert_memory_equal(y1, yg, sizeof(float) * M * N);
    tfm_blas_init(1);
    /* the choice against float32 is made once per shape and kept */
    float *B = malloc(sizeof(float) * K * N);
    for (int k = 0; k < K; k++)
        for (int j = 0; j < N; j++)
            B[(size_t)k * N + j] = tfm_f16_to_f32(wd[(size_t)j * NB + k / 32]) * wq[(size_t)j * K + k];
    tfm_gemm_b pb;
    tfm_gemm_b_pack(&pb, B, N, K, N);
    int first = tfm_q8_gemm_faster(&P, &pb);
    assert_true(first == 0 || first == 1);
    assert_int_equal(tfm_q8_gemm_faster(&P, &pb), first);
    printf("# q8 gemm against float32 at %d x %d: %s\n", K, N, first ? "8-bit" : "float32");
    tfm_gemm_b_free(&pb);
    free(B);
    tfm_q8_packed_free(&P);
    free(wq); free(xq); free(wd); free(xd); free(bias); free(y1); free(yn); free(yg); free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_equal_scalar),
        cmocka_unit_test(test_quantize_ties),
        cmocka_unit_test(test_quantize_definition),
        cmocka_unit_test(test_quantize_bound),
        cmocka_unit_test(test_gemv),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_gemm_threads_gemv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
