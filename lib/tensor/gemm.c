/* The BLIS wrapper (tensor/gemm.h): kernels and threads set once, every
 * product through BLIS with strides.  The packed-weight driver is
 * gemm_packed.c; the CPU's kernel choice is platform.c. */
#include "config.h"

#include "tensor/gemm.h"
#include "base/err.h"
#include "base/thread.h"
#include "tensor/blis_internal.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static int blas_threads = 1;   /* asked for: --threads */
static int active_threads = 1; /* running now (tfm_threads_now) */
static int blas_ready;

void tfm_blas_init(int threads)
{
    if (!blas_ready) {
        tfm_blis_choose_arch();
        bli_init();
        blas_ready = 1;
    }
    if (threads <= 0)
        threads = tfm_threads_default();
    blas_threads = active_threads = threads;
    bli_thread_set_num_threads(threads);
#ifdef _OPENMP
    omp_set_num_threads(threads);
#endif
}

void tfm_blas_ensure(void)
{
    if (!blas_ready)
        tfm_blas_init(1);
}

int tfm_blas_threads(void)
{
    return blas_threads;
}

const char *tfm_blas_kernels(void)
{
    /* after bli_init: BLIS reads BLIS_ARCH_TYPE only then */
    tfm_blas_ensure();
    return bli_arch_string(bli_arch_query_id());
}

/* Waiting threads cost nothing on idle cores but, when another job wants
 * the same cores, libgomp's idle threads spin (~300000 pauses) and a
 * thread at a barrier waits for one that has no CPU: two 2-thread runs on
 * 2 cores took 7-18 times one alone.  So the work started now gets only
 * the CPUs the machine's other runnable threads leave free; products and
 * loops give the same bits on any number of threads.  OpenMP's default
 * follows, so its loops and BLIS's threads shrink and grow together. */
int tfm_threads_now(void)
{
    if (blas_threads <= 1)
        return 1;
#ifdef _OPENMP
    if (omp_in_parallel())
        return 1;
#endif
    int n = tfm_threads_fair(blas_threads);
    if (n != active_threads) {
        active_threads = n;
#ifdef _OPENMP
        omp_set_num_threads(n);
#endif
    }
    return n;
}

/* Below ~64³ multiply-adds BLIS's thread start-up (a few µs) costs more than
 * the second core gains. */
int tfm_gemm_small(int M, int N, int K)
{
    return (double)M * N * K <= 64.0 * 64 * 64 * 2;
}

void tfm_gemm_on(int nthreads, int transA, int transB, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C,
                 int ldc)
{
    if (!blas_ready)
        tfm_blas_init(1);
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return;
    }
    /* Row-major X with leading dimension ld: row stride ld, column stride 1;
     * its transpose is the same memory with the strides swapped. */
    inc_t rsa = transA ? 1 : lda, csa = transA ? lda : 1;
    inc_t rsb = transB ? 1 : ldb, csb = transB ? ldb : 1;
    float a = alpha, b = beta;
    if (M == 1) {
        /* c[1,N] = op(B)ᵀ·op(A)ᵀ: gemv over op(B)ᵀ (N×K), x = row of op(A);
         * sgemm with M = 1 is several times slower than gemv. */
        bli_sgemv(BLIS_TRANSPOSE, BLIS_NO_CONJUGATE, K, N, &a, (float *)B, rsb, csb,
                  (float *)A, csa, &b, C, 1);
        return;
    }
    if (N == 1) {
        bli_sgemv(BLIS_NO_TRANSPOSE, BLIS_NO_CONJUGATE, M, K, &a, (float *)A, rsa, csa,
                  (float *)B, rsb, &b, C, ldc);
        return;
    }
#ifdef TFM_BLIS_1
    rntm_t rntm = BLIS_RNTM_INITIALIZER;
#else
    rntm_t rntm;
    bli_rntm_init(&rntm);
#endif
    if (nthreads <= 1 || tfm_gemm_small(M, N, K))
        nthreads = 1;
#ifdef _OPENMP
    /* called from a parallel region (data-parallel training): the caller's
     * threads are the parallelism */
    if (omp_in_parallel())
        nthreads = 1;
#endif
    bli_rntm_set_num_threads(nthreads, &rntm);
    /* BLIS's small-matrix ("sup") kernels, used with the haswell kernels,
     * round a row differently depending on where it falls in a tile: equal
     * rows of a batch would score differently.  Packed products cost the
     * same here (char-small step 23.1 ms either way). */
    bli_rntm_disable_l3_sup(&rntm);
    bli_sgemm_ex(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, M, N, K, &a, (float *)A, rsa, csa,
                 (float *)B, rsb, csb, &b, C, ldc, 1, NULL, &rntm);
}

void tfm_gemm(int transA, int transB, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta,
              float *C, int ldc)
{
    tfm_gemm_on(tfm_threads_now(), transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void tfm_gemm1(int transA, int transB, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta,
               float *C, int ldc)
{
    if (!transA && tfm_gemm1_packed(transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc))
        return;
    tfm_gemm_on(1, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
