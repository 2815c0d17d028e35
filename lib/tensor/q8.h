/* 8-bit block weights (llama.cpp's Q8_0) and their products with 8-bit
 * activations.
 *
 * A matrix of N rows of K (a linear layer's [out, in], as torch stores
 * it) is cut along its rows into blocks of 32: block b of row j holds
 * q[j, 32b .. 32b+31] (int8, -127..127) and one scale d[j, b] in half
 * precision (as Q8_0 stores it: 34 bytes per 32 weights), the weight
 * being d·q.  Quantizing a block: d = max|x| / 127, q = round(x / d).
 * Activations keep float32 scales.
 *
 *     int8_t xq[K]; float xd[K / 32];
 *     tfm_q8_quantize(xq, xd, x, K);                 // the activations too
 *     tfm_q8_gemv(y, xq, xd, &W, bias, 1);           // y = W·x + bias
 *
 * A product sums each block's 32 int8 products exactly in 32-bit
 * integers, then adds d_w·d_x·sum over the blocks in float with fused
 * multiply-adds, block k into lane k % 8 and the eight lanes in a fixed
 * tree (tfm_q8_row_dot below): an order fixed by K alone.  The products
 * run on the fastest of the kernels this CPU has (a portable one, AVX2,
 * AVX-VNNI, AVX-512 VNNI; for tfm_q8_gemm also AMX), chosen by timing
 * them once, at the first product; as the sums are exact and the float
 * steps the same, every kernel gives the same result to the bit. */
#ifndef TFM_TENSOR_Q8_H
#define TFM_TENSOR_Q8_H

#include <stddef.h>
#include <stdint.h>

#include "tensor/gemm.h"

#define TFM_Q8_BLOCK 32

/* N rows of K weights (K a multiple of 32): q [N, K], d [N, K / 32] the
 * scales in IEEE half precision. */
typedef struct tfm_q8 {
    const int8_t *q;
    const uint16_t *d;
    int N, K;
} tfm_q8;

/* Quantizes x[0..K) (K a multiple of 32) into q and d[K / 32]; a value
 * halfway between two steps rounds to the even one (as llama.cpp's
 * vectorized quantizer of activations).  A block holding a NaN or an
 * infinity gets a NaN or infinite scale and values 0; a block so small
 * (max |x| < 2^-121) that 1/d overflows, its scale d and values 0. */
void tfm_q8_quantize(int8_t *q, float *d, const float *x, int K);
/* The same with halfway values rounded away from zero (C's roundf): what
 * llama.cpp's reference quantizer (quantize_row_q8_0_ref), and so
 * llama-quantize, stores for weights; tfm's weights are quantized so. */
void tfm_q8_quantize_ref(int8_t *q, float *d, const float *x, int K);
/* x[i] = d[i / 32]·q[i] for i < K. */
void tfm_q8_dequantize(float *x, const int8_t *q, const float *d, int K);
/* Row j of W the same way: x[i] = d[j, i / 32]·q[j, i], the scale
 * widened exactly from half precision. */
void tfm_q8_row(float *x, const tfm_q8 *W, int j);

/* y[r, j] = b[j] + Σ_blocks W.d[j, b]·xd[r, b]·Σ W.q[j, i]·xq[r, i]
 * (b NULL: 0) for n rows of quantized activations xq [n, K], xd
 * [n, K / 32]; y [n, N].  Threads split the rows of W (each y[r, j] is
 * one thread's, so results do not depend on the thread count). */
void tfm_q8_gemv(float *y, const int8_t *xq, const float *xd, const tfm_q8 *W,
                 const float *b, int n);

/* The kernels, for tests and logs: how many there are, kernel i's name
 * ("scalar", "avx2", "avxvnni", "avx512vnni") and whether this CPU runs
 * it. */
int tfm_q8_kernel_count(void);
const char *tfm_q8_kernel_name(int i, int *supported);
/* The kernel products use: the one timing chose (choosing now if not yet),
 * or the one set by tfm_q8_kernel_use. */
int tfm_q8_kernel(void);
/* Forces kernel i (tests); -1 when this CPU cannot run it. */
int tfm_q8_kernel_use(int i);
/* One row's product by kernel i (which this CPU must run): with
 * s_k = Σ_{i < 32} w[32k + i]·x[32k + i] and acc[0..8) = 0, for k < nb in
 * turn acc[k % 8] = fmaf(f32(dw[k])·dx[k], (float)s_k, acc[k % 8]); the
 * result is ((acc0 + acc4) + (acc1 + acc5)) + ((acc2 + acc6) + (acc3 + acc7)). */
float tfm_q8_row_dot(int i, const int8_t *w, const uint16_t *dw, const int8_t *x,
                     const float *dx, int nb);

/* ---- the matrix product: many rows of activations at once ----
 *
 *     tfm_q8_packed P;
 *     tfm_q8_pack(&P, &W);                           // once, at load
 *     for (r < M) tfm_q8_quantize(xq + r·K, xd + r·K/32, x + r·K, K);
 *     tfm_q8_gemm(y, N, xq, xd, M, &P, bias, NULL, NULL);
 *     tfm_q8_packed_free(&P);
 *
 * Each y[r, j] is exactly what tfm_q8_gemv gives for it (the same block
 * sums, the same fused multiply-adds into lane k % 8, the same tree, then
 * + b[j]), whatever M, the row's place among them, the kernel or the
 * thread count; only the order of the work differs.  The weights are
 * repacked so that output columns lie in vector lanes: panels of 16
 * columns, each block of 32 weights of the panel as 8 groups of
 * 4 consecutive weights per column (64 bytes: column c's four in bytes
 * 4c..4c+3, what vpdpbusd multiplies by four broadcast activations),
 * stored as unsigned w + 128 (VNNI multiplies u8 by s8), and each block's
 * 16 scales widened to float; columns past N are zero. */
typedef struct tfm_q8_packed {
    int N, K;
    uint8_t *w; /* [ceil(N/16)][K/32][8][16][4], w + 128 */
    float *d;   /* [ceil(N/16)][K/32][16] */
    size_t cap; /* panel blocks w and d have room for */
} tfm_q8_packed;

/* Packs W (K a multiple of 32, weights -127..127); p owns its copy, W may
 * go. */
void tfm_q8_pack(tfm_q8_packed *p, const tfm_q8 *W);
/* The same into p's memory (p zeroed, or packed before), grown when too
 * small: scratch that packs one matrix after another. */
void tfm_q8_repack(tfm_q8_packed *p, const tfm_q8 *W);
void tfm_q8_packed_free(tfm_q8_packed *p);
/* y[r, j] (row stride ldy) = b[j] + Σ_blocks ... as tfm_q8_gemv for M rows
 * xq [M, K], xd [M, K / 32] (b NULL: no bias); then epi (if not NULL,
 * tensor/gemm.h) on blocks of y that are complete, as tfm_gemm_packed
 * runs it.  Threads split the columns.  y must not overlap xq or xd. */
void tfm_q8_gemm(float *y, int ldy, const int8_t *xq, const float *xd, int M,
                 const tfm_q8_packed *W, const float *b, tfm_gemm_epilogue epi, void *ctx);
/* tfm_q8_gemm's kernels: the row kernels' (same indices and names), then
 * "amx" (Intel's AMX tiles, where the CPU and Linux allow them; groups of
 * fewer than 32 rows go to avx512vnni); how many, kernel i's name and
 * whether this CPU runs it. */
int tfm_q8_gemm_kernel_count(void);
const char *tfm_q8_gemm_kernel_name(int i, int *supported);
/* The kernel tfm_q8_gemm runs (chosen by timing once, separately from the
 * row kernels'), and forcing one (tests, benchmarks; -1 when this CPU
 * cannot run it). */
int tfm_q8_gemm_kernel(void);
int tfm_q8_gemm_kernel_use(int i);

/* Whether tfm_q8_gemm, quantizing its input rows included, is faster on
 * this machine than tfm_gemm_packed on Wf, the same matrix widened to
 * float32 ([K, N]): timed once per (K, N) in the process, on 128 rows and
 * the threads products take; later calls give the same answer.  Not by
 * rows: so that a row's result never depends on the rows that come with
 * it.  The two products' numbers differ (8-bit activations), so the
 * answer decides the numbers too. */
int tfm_q8_gemm_faster(const tfm_q8_packed *Wq, const tfm_gemm_b *Wf);

#endif
