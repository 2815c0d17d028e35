#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "tensor/gemm.h"

/* Reference product in double: C = alpha·op(A)·op(B) + beta·C. */
static void naive(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < K; k++) {
                float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                s += (double)a * b;
            }
            float *c = &C[(size_t)i * ldc + j];
            *c = (float)(alpha * s + (beta == 0.0f ? 0.0 : (double)beta * *c));
        }
}

/* x[0..n) uniform in [-0.5, 0.5) */
static void fill(float *x, size_t n, tfm_rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = tfm_rng_float(r) - 0.5f;
}

static void check_case(int ta, int tb, int M, int N, int K, float alpha, float beta, int pad,
                       int one_thread)
{
    tfm_rng r;
    tfm_rng_seed(&r, (uint64_t)(M * 1000003 + N * 1009 + K * 7 + ta * 2 + tb));
    int arows = ta ? K : M, acols = ta ? M : K;
    int brows = tb ? N : K, bcols = tb ? K : N;
    int lda = acols + pad, ldb = bcols + pad, ldc = N + pad;
    size_t na = (size_t)arows * lda + 1, nb = (size_t)brows * ldb + 1, nc = (size_t)M * ldc + 1;
    float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B);
    float *C = malloc(nc * sizeof *C), *R = malloc(nc * sizeof *R);
    fill(A, na, &r);
    fill(B, nb, &r);
    fill(C, nc, &r);
    memcpy(R, C, nc * sizeof *C);
    if (beta == 0.0f) /* beta 0 must overwrite, even NaN */
        for (int i = 0; i < M; i++)
            C[(size_t)i * ldc] = NAN;
    naive(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
    if (one_thread)
        tfm_gemm1(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        tfm_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < ldc && (size_t)i * ldc + j < nc; j++) {
            size_t x = (size_t)i * ldc + j;
            if (j >= N) { /* padding is untouched */
                assert_true(C[x] == R[x]);
                continue;
            }
            double tol = 1e-5 * (K + 1);
            if (!(fabs(C[x] - R[x]) <= tol)) {
                print_error("ta=%d tb=%d M=%d N=%d K=%d at (%d,%d): %g vs %g\n", ta, tb, M, N,
                            K, i, j, C[x], R[x]);
                fail();
            }
        }
    free(A);
    free(B);
    free(C);
    free(R);
}

static void test_all_transposes(void **state)
{
    (void)state;
    static const int shapes[][3] = {
        {1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 64, 64}, {1, 37, 19}, {23, 1, 11},
        {1, 1, 40}, {130, 70, 150}, {5, 6, 0},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++)
                for (int pad = 0; pad < 2; pad++) {
                    int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                    check_case(ta, tb, M, N, K, 1.0f, 0.0f, pad * 3, 0);
                    check_case(ta, tb, M, N, K, 0.5f, 1.0f, pad * 3, 0);
                    check_case(ta, tb, M, N, K, -2.0f, 0.25f, pad, 1);
                }
}

static void test_threads(void **state)
{
    (void)state;
    tfm_blas_init(2);
    assert_int_equal(tfm_blas_threads(), 2);
    check_case(0, 1, 200, 180, 160, 1.0f, 0.0f, 0, 0);
    check_case(1, 0, 200, 180, 160, 1.0f, 1.0f, 5, 0);
    tfm_blas_init(1);
    assert_int_equal(tfm_blas_threads(), 1);
}

/* tfm_gemm1 packs and calls the kernel itself for products that fit in
 * cache: bit for bit BLIS's product (tfm_gemm), alpha, beta, K blocks,
 * short row panels and partial column panels included. */
static void test_gemm1_bits(void **state)
{
    (void)state;
    static const int shapes[][3] = {
        {128, 128, 64}, {128, 64, 128}, {2, 2, 1}, {7, 33, 9}, {200, 70, 600}, {45, 17, 300},
    };
    static const float alphas[] = {1.0f, 0.3f, -1.7f}, betas[] = {0.0f, 1.0f, 0.7f};
    tfm_rng r;
    tfm_rng_seed(&r, 11);
    int failed = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int tb = 0; tb < 2; tb++)
            for (size_t ab = 0; ab < 9; ab++) {
                const int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], pad = (int)ab % 2;
                const int lda = K + pad, ldb = (tb ? K : N) + pad, ldc = N + 3 * pad;
                const size_t na = (size_t)M * lda, nb = (size_t)(tb ? N : K) * ldb,
                             nc = (size_t)M * ldc;
                float *A = malloc(na * sizeof *A), *B = malloc(nb * sizeof *B),
                      *C = malloc(nc * sizeof *C), *R = malloc(nc * sizeof *R);
                fill(A, na, &r);
                fill(B, nb, &r);
                fill(C, nc, &r);
                memcpy(R, C, nc * sizeof *C);
                const float alpha = alphas[ab / 3], beta = betas[ab % 3];
                tfm_gemm1(0, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
                tfm_gemm(0, tb, M, N, K, alpha, A, lda, B, ldb, beta, R, ldc);
                if (memcmp(C, R, nc * sizeof *C) != 0) {
                    print_error("tb=%d M=%d N=%d K=%d alpha=%g beta=%g: not BLIS's bits\n", tb,
                                M, N, K, alpha, beta);
                    failed++;
                }
                free(A);
                free(B);
                free(C);
                free(R);
            }
    assert_int_equal(failed, 0);
}

static void test_arch_respects_user(void **state)
{
    (void)state;
    /* tfm_blas_init ran already (main): the variable is set to a number
     * (ours or the user's), never removed. */
    const char *v = getenv("BLIS_ARCH_TYPE");
    if (__builtin_cpu_supports("avx2"))
        assert_non_null(v);
}

/* Test epilogue: c = 2c + 1 on its block, counting visits per element. */
typedef struct visit {
    int *count;
    int ldc;
} visit;

static void visit_block(void *ctx, float *C, int ldc, int r0, int m, int c0, int n)
{
    visit *v = ctx;
    assert_int_equal(ldc, v->ldc);
    for (int r = 0; r < m; r++)
        for (int c = 0; c < n; c++) {
            C[(size_t)r * ldc + c] = 2.0f * C[(size_t)r * ldc + c] + 1.0f;
            __atomic_add_fetch(&v->count[(size_t)(r0 + r) * ldc + c0 + c], 1, __ATOMIC_RELAXED);
        }
}

static const char *path_name(tfm_gemm_path path)
{
    return path == TFM_GEMM_PACKED ? "packed" : path == TFM_GEMM_BLIS ? "blis" : "auto";
}

/* A packed right-hand operand gives tfm_gemm's own result, bit for bit: the
 * same kernel, tiles and K blocks (K past one block, edges in M and N),
 * along either path and the chosen one. */
static void check_packed(int M, int N, int K, int pad, tfm_gemm_path path)
{
    tfm_rng r;
    tfm_rng_seed(&r, (uint64_t)(M * 7919 + N * 31 + K));
    int lda = K + pad, ldb = N + pad, ldc = N + pad;
    float *A = malloc(sizeof(float) * ((size_t)M * lda + 1));
    float *B = malloc(sizeof(float) * ((size_t)K * ldb + 1));
    float *C = malloc(sizeof(float) * ((size_t)M * ldc + 1));
    float *R = malloc(sizeof(float) * ((size_t)M * ldc + 1));
    fill(A, (size_t)M * lda, &r);
    fill(B, (size_t)K * ldb, &r);
    for (size_t i = 0; i < (size_t)M * ldc; i++)
        C[i] = R[i] = (float)i; /* beyond N must stay as it is */
    for (int i = 0; i < M; i++)
        C[(size_t)i * ldc] = NAN; /* overwritten, never read */
    tfm_gemm(0, 0, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, R, ldc);
    tfm_gemm_b P;
    tfm_gemm_b_pack(&P, B, ldb, K, N);
    tfm_gemm_packed_ex(M, A, lda, &P, C, ldc, NULL, NULL, path);
    /* one row: tfm_gemm takes gemv, the packed product its kernel (rows alone below) */
    if (M > 1 && memcmp(C, R, sizeof(float) * (size_t)M * ldc) != 0) {
        print_error("%s M=%d N=%d K=%d pad=%d differs from tfm_gemm\n", path_name(path), M, N,
                    K, pad);
        fail();
    }
    /* each row alone (always through the kernel) gives its row of the
     * whole product */
    for (int i = 0; i < M && path != TFM_GEMM_BLIS; i += M > 8 ? M / 5 : 1) {
        float *row = malloc(sizeof(float) * (size_t)N);
        tfm_gemm_packed(1, A + (size_t)i * lda, lda, &P, row, N, NULL, NULL);
        if (memcmp(row, C + (size_t)i * ldc, sizeof(float) * (size_t)N) != 0) {
            print_error("packed row %d of M=%d N=%d K=%d alone differs\n", i, M, N, K);
            fail();
        }
        free(row);
    }
    /* the epilogue sees every element of C once, after its last K block,
     * and nothing past N; also on the unpacked fallback */
    for (int unpacked = 0; unpacked < 2; unpacked++) {
        tfm_gemm_b U = {.K = K, .N = N, .B = B, .ldb = ldb};
        visit v = {.count = calloc((size_t)M * ldc + 1, sizeof(int)), .ldc = ldc};
        float *E = malloc(sizeof(float) * ((size_t)M * ldc + 1));
        for (size_t i = 0; i < (size_t)M * ldc; i++)
            E[i] = (float)i;
        tfm_gemm_packed_ex(M, A, lda, unpacked ? &U : &P, E, ldc, visit_block, &v, path);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < ldc; j++) {
                size_t at = (size_t)i * ldc + j;
                int inside = j < N;
                float want = inside ? 2.0f * C[at] + 1.0f : (float)at;
                if (v.count[at] != inside || E[at] != want) {
                    print_error("epilogue%s M=%d N=%d K=%d: [%d,%d] seen %d times, %g for %g\n",
                                unpacked ? " (unpacked)" : "", M, N, K, i, j, v.count[at],
                                (double)E[at], (double)want);
                    fail();
                }
            }
        free(v.count);
        free(E);
    }
    tfm_gemm_b_free(&P);
    free(A);
    free(B);
    free(C);
    free(R);
}

/* Edges of both kernels' tiles (6×16 haswell, 32×12 skx) in M and N, K
 * past one block (256 haswell, 384 skx; the last up to 480), row counts
 * past a shared packing of A (1024) and slices of it (1020). */
static void test_packed(void **state)
{
    (void)state;
    static const int shapes[][3] = {
        {2, 2, 3}, {7, 17, 5}, {6, 16, 256}, {13, 33, 257}, {12, 32, 385}, {11, 31, 481},
        {128, 96, 768}, {200, 70, 600}, {173, 129, 1000}, {400, 48, 64}, {1100, 40, 30},
        {1500, 130, 700}, {1030, 20, 3000}, {2100, 37, 20}, {25, 520, 100},
    };
    static const tfm_gemm_path paths[] = {TFM_GEMM_PACKED, TFM_GEMM_BLIS, TFM_GEMM_AUTO};
    for (int threads = 1; threads <= 2; threads++) {
        tfm_blas_init(threads);
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int pad = 0; pad < 2; pad++)
                for (size_t q = 0; q < sizeof paths / sizeof paths[0]; q++)
                    check_packed(shapes[s][0], shapes[s][1], shapes[s][2], pad * 5, paths[q]);
    }
    tfm_blas_init(1);
}

/* Test epilogue that records the widest block it was given and counts
 * the elements. */
typedef struct blocks {
    int widest;
    long seen;
} blocks;

static void widest_block(void *ctx, float *C, int ldc, int r0, int m, int c0, int n)
{
    (void)C, (void)ldc, (void)r0, (void)c0;
    blocks *b = ctx;
    __atomic_add_fetch(&b->seen, (long)m * n, __ATOMIC_RELAXED);
    int w = __atomic_load_n(&b->widest, __ATOMIC_RELAXED);
    while (n > w && !__atomic_compare_exchange_n(&b->widest, &w, n, 0, __ATOMIC_RELAXED,
                                                 __ATOMIC_RELAXED))
        ;
}

/* The width of the widest epilogue block of one product along path:
 * BLIS's call is followed by the epilogue over whole rows, the packed
 * panels run it per block of a few panels (at most 480 columns).  The
 * epilogue runs once over C, also while the first product of a shape
 * times both paths. */
static int widest_epilogue(int M, const float *A, const tfm_gemm_b *P, float *C,
                           tfm_gemm_path path)
{
    blocks b = {0, 0};
    tfm_gemm_packed_ex(M, A, P->K, P, C, P->N, widest_block, &b, path);
    assert_int_equal(b.seen, (long)M * P->N);
    return b.widest;
}

/* The path is timed once per shape and kept, forcing either path takes
 * it, and a single row takes the panels.  Which path wins is the host's
 * business: not asserted. */
static void test_path_choice(void **state)
{
    (void)state;
    const int M = 40, K = 50, N = 600;
    tfm_rng r;
    tfm_rng_seed(&r, 5);
    float *A = malloc(sizeof(float) * 64 * K), *B = malloc(sizeof(float) * K * N),
          *C = malloc(sizeof(float) * 64 * N);
    fill(A, (size_t)64 * K, &r);
    fill(B, (size_t)K * N, &r);
    tfm_gemm_b P;
    tfm_gemm_b_pack(&P, B, N, K, N);
    if (!P.panels) { /* BLIS's internals unknown: one path only */
        assert_int_equal(widest_epilogue(M, A, &P, C, TFM_GEMM_AUTO), N);
        skip();
    }
    assert_int_equal(widest_epilogue(M, A, &P, C, TFM_GEMM_BLIS), N);
    assert_true(widest_epilogue(M, A, &P, C, TFM_GEMM_PACKED) < N);
    /* forcing chooses nothing */
    assert_int_equal(tfm_gemm_packed_choice(M, K, N, 1), TFM_GEMM_AUTO);
    const int first = widest_epilogue(M, A, &P, C, TFM_GEMM_AUTO);
    const tfm_gemm_path chose = tfm_gemm_packed_choice(M, K, N, 1);
    assert_true(chose == TFM_GEMM_PACKED || chose == TFM_GEMM_BLIS);
    assert_true(chose == TFM_GEMM_BLIS ? first == N : first < N);
    /* rows of the same power of two share the choice, and it runs */
    for (int m = 32; m < 64; m += 7) {
        assert_int_equal(tfm_gemm_packed_choice(m, K, N, 1), chose);
        const int w = widest_epilogue(m, A, &P, C, TFM_GEMM_AUTO);
        assert_true(chose == TFM_GEMM_BLIS ? w == N : w < N);
    }
    assert_int_equal(tfm_gemm_packed_choice(M, K, N, 2), TFM_GEMM_AUTO);
    assert_int_equal(tfm_gemm_packed_choice(16, K, N, 1), TFM_GEMM_AUTO);
    assert_int_equal(tfm_gemm_packed_choice(1, K, N, 1), TFM_GEMM_PACKED);
    assert_true(widest_epilogue(1, A, &P, C, TFM_GEMM_AUTO) < N);
    tfm_gemm_b_free(&P);
    free(A);
    free(B);
    free(C);
}

int main(void)
{
    tfm_blas_init(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_transposes),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_gemm1_bits),
        cmocka_unit_test(test_packed),
        cmocka_unit_test(test_path_choice),
        cmocka_unit_test(test_arch_respects_user),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
