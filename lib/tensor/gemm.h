/* The one matrix product of the suite: a row-major wrapper over BLIS.
 *
 * Every product in tfm goes through tfm_gemm so that kernel choice,
 * threading and the single-row fast path live in one place.  Transposed
 * operands are passed to BLIS as strides: nothing is copied.
 *
 * Call tfm_blas_init once, before any BLIS use (it must set BLIS_ARCH_TYPE
 * before BLIS initialises itself: Debian's BLIS 0.9 does not know recent
 * CPUs and would otherwise fall back to its slow reference kernels). */
#ifndef TFM_TENSOR_GEMM_H
#define TFM_TENSOR_GEMM_H

#include <stddef.h>

/* Picks BLIS's kernels from the CPU's features (AVX-512F -> skx, except
 * on AMD Zen 4, which splits 512-bit work in halves; AVX2 -> haswell)
 * unless the user set BLIS_ARCH_TYPE, and sets the thread count of BLIS
 * and OpenMP.  threads <= 0 means TFM_NUM_THREADS, else the CPUs this
 * process may use (tfm_threads_default).  May be called again to change the thread count. */
void tfm_blas_init(int threads);
/* The thread count set by tfm_blas_init (1 before it). */
int tfm_blas_threads(void);
/* The family of BLIS's kernels in use ("skx", "haswell", ...), for
 * benchmarks to print: figures from different families do not compare. */
const char *tfm_blas_kernels(void);
/* The threads for work started now, from the main thread between parallel
 * regions: tfm_blas_threads, fewer while other jobs hold the machine's CPUs
 * (base/thread.h, tfm_threads_fair), and OpenMP's default set to match; 1
 * inside a parallel region.  Only for work whose bits do not depend on the
 * thread count (products, elementwise loops, rows split among threads). */
int tfm_threads_now(void);

/* C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C, all row-major.
 * op(A) = A (A is M×K, row stride lda) or Aᵀ (transA: A is K×M, stride lda);
 * likewise B.  beta 0 overwrites C (NaNs in C do not propagate).
 * Single rows or columns go to gemv; small products, and calls from inside
 * an OpenMP parallel region, run on one thread. */
void tfm_gemm(int transA, int transB, int M, int N, int K, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta,
              float *C, int ldc);

/* The same product on exactly one thread, for callers that are already
 * inside a parallel loop (per-head attention); the same bits.  Products
 * that fit in cache (op(A) not transposed) are packed into the thread's
 * own buffers and run through BLIS's micro-kernel directly. */
void tfm_gemm1(int transA, int transB, int M, int N, int K, float alpha,
               const float *A, int lda, const float *B, int ldb, float beta,
               float *C, int ldc);

/* A right-hand operand packed once for many products: inference weights.
 * BLIS packs B afresh in every product; a sentence's activations are a few
 * hundred rows, so for them re-packing the weight costs as much memory
 * traffic as the product reads.  The panels are BLIS's own layout for its
 * micro-kernel (for a kernel that prefers column-stored C, skx, that of
 * the left operand of Cᵀ = Bᵀ·Aᵀ, as BLIS itself runs such products), so
 * tfm_gemm_packed rounds exactly as tfm_gemm does. */
typedef struct tfm_gemm_b {
    int K, N;
    float *panels; /* NULL when BLIS's kernel is not usable: B below is used */
    const float *B;
    int ldb;
} tfm_gemm_b;

/* Packs B[K,N] (row-major, row stride ldb); B must outlive p: BLIS's own
 * call reads it where that is faster, and when the kernel is unusable. */
void tfm_gemm_b_pack(tfm_gemm_b *p, const float *B, int ldb, int K, int N);
void tfm_gemm_b_free(tfm_gemm_b *p);
/* Run by a product on each block of C once the block's sums are complete,
 * while it is still in cache: C points at C[r0, c0], the block is m×n with
 * row stride ldc (tensor/ops.h's tfm_linear_epilogue: bias, activation,
 * residual).  Blocks never overlap; they may run on any thread. */
typedef void (*tfm_gemm_epilogue)(void *ctx, float *C, int ldc, int r0, int m, int c0, int n);
/* C[M,N] = A[M,K] · B, overwriting C, then epi (if not NULL) over all of C;
 * threads as tfm_gemm, and for M > 1 its rounding.  A single row goes
 * through the same kernel (not gemv), so each row's result is the same
 * whatever M and the row's place in A.  C must not overlap A.
 *
 * Two ways give these bits for M > 1: the packed panels, or BLIS's own
 * call on B (tfm_gemm, then epi).  Which is faster depends on the host's
 * kernels and caches, so the first product of each shape (M rounded down
 * to a power of two, K, N, threads) runs both ways a few times without
 * epi (the results are the same, C is rewritten each time), then the
 * faster with epi, and the process keeps that way for the shape; a single
 * row always takes the panels. */
void tfm_gemm_packed(int M, const float *A, int lda, const tfm_gemm_b *B, float *C, int ldc,
                     tfm_gemm_epilogue epi, void *ctx);

typedef enum tfm_gemm_path {
    TFM_GEMM_AUTO,   /* timed once per shape, as tfm_gemm_packed */
    TFM_GEMM_PACKED, /* the packed panels (BLIS's call when B has none) */
    TFM_GEMM_BLIS,   /* BLIS's own call on B (gemv for a single row) */
} tfm_gemm_path;
/* tfm_gemm_packed along the given path (tests, benchmarks). */
void tfm_gemm_packed_ex(int M, const float *A, int lda, const tfm_gemm_b *B, float *C, int ldc,
                        tfm_gemm_epilogue epi, void *ctx, tfm_gemm_path path);
/* The path tfm_gemm_packed keeps for this shape on this many threads, or
 * TFM_GEMM_AUTO while no product of the shape has run. */
tfm_gemm_path tfm_gemm_packed_choice(int M, int K, int N, int threads);
#endif
