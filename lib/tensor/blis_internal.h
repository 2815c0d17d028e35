/* What the files of tensor/ that reach into BLIS share: gemm.c (the
 * wrapper: tfm_gemm, threads), gemm_packed.c (the packed-weight product
 * driver over BLIS's micro-kernel) and platform.c (the architecture
 * choice).  BLIS's header without its warnings, and the few
 * functions they call in each other.  Private to tensor/. */
#ifndef TFM_TENSOR_BLIS_INTERNAL_H
#define TFM_TENSOR_BLIS_INTERNAL_H

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wsign-compare"
#include <blis.h>
#pragma GCC diagnostic pop

/* platform.c: sets BLIS_ARCH_TYPE from the CPU (unless the user did); must
 * run before BLIS initialises itself. */
void tfm_blis_choose_arch(void);
/* platform.c: whether this is the BLIS whose internals tensor/ knows (its
 * micro-kernel's interface and panel layout): 0.9, or 1.x when built
 * against 1.x (TFM_BLIS_1). */
int tfm_blis_known(void);

/* gemm.c: tfm_blas_init(1) unless it ran. */
void tfm_blas_ensure(void);
/* gemm.c: below ~64³ multiply-adds a product runs on one thread. */
int tfm_gemm_small(int M, int N, int K);
/* gemm.c: tfm_gemm on at most nthreads threads. */
void tfm_gemm_on(int nthreads, int transA, int transB, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C,
                 int ldc);

/* gemm_packed.c: tfm_gemm1 through the micro-kernel when the operands fit
 * in cache; 0 if not taken. */
int tfm_gemm1_packed(int transB, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc);

/* One pause of a spin-wait. */
static inline void tfm_spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

#endif
