#include "config.h"

#include "nn/lora.h"
#include "tensor/gemm.h"
#include "tensor/ops.h"

/* drop(x) into scratch, or x itself without dropout. */
static const float *dropped(const tfm_lora_op *op, const float *x, float *scratch)
{
    if (op->dropout <= 0.0f)
        return x;
    tfm_dropout_forward(scratch, x, (size_t)op->N * op->I, op->dropout, op->seed);
    return scratch;
}

void tfm_lora_forward(const tfm_lora_op *op, float *y, int ldy, float *u, const float *x,
                      const float *A, const float *B, float *scratch)
{
    int N = op->N, I = op->I, O = op->O, r = op->r;
    const float *xd = dropped(op, x, scratch);
    tfm_gemm(0, 1, N, r, I, 1.0f, xd, I, A, I, 0.0f, u, r);
    tfm_gemm(0, 1, N, O, r, op->scale, u, r, B, r, 1.0f, y, ldy);
}

void tfm_lora_backward(const tfm_lora_op *op, float *dx, float *dA, float *dB, const float *dy,
                       int ldy, const float *x, const float *u, const float *A, const float *B,
                       float *scratch, float *du)
{
    int N = op->N, I = op->I, O = op->O, r = op->r;
    tfm_gemm(1, 0, O, r, N, op->scale, dy, ldy, u, r, 1.0f, dB, r);
    tfm_gemm(0, 0, N, r, O, op->scale, dy, ldy, B, r, 0.0f, du, r);
    const float *xd = dropped(op, x, scratch);
    tfm_gemm(1, 0, r, I, N, 1.0f, du, r, xd, I, 1.0f, dA, I);
    if (!dx)
        return;
    if (op->dropout <= 0.0f) {
        tfm_gemm(0, 0, N, I, r, 1.0f, du, r, A, I, 1.0f, dx, I);
        return;
    }
    /* scratch held drop(x), read above; now du·A through the same mask */
    size_t n = (size_t)N * I;
    tfm_gemm(0, 0, N, I, r, 1.0f, du, r, A, I, 0.0f, scratch, I);
    tfm_dropout_backward(scratch, scratch, n, op->dropout, op->seed);
    tfm_add_inplace(dx, scratch, n);
}

void tfm_lora_merge(float *W, int ldw, int out_in, const float *A, const float *B, int I, int O,
                    int r, float scale)
{
    if (out_in) /* [O, I] += s·B[O, r]·A[r, I] */
        tfm_gemm(0, 0, O, I, r, scale, B, r, A, I, 1.0f, W, ldw);
    else        /* [I, O] += s·Aᵀ[I, r]·Bᵀ[r, O] */
        tfm_gemm(1, 1, I, O, r, scale, A, I, B, r, 1.0f, W, ldw);
}
