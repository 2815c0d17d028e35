/* The task heads' table (head.h) and the Linear every head uses. */
#include "config.h"
#include "model/head.h"

#include "tensor/gemm.h"
#include "tensor/ops.h"

/* Table order: the order of the heads' tensors in every model file. */
const tfm_head_part *const tfm_head_parts[] = {
    &tfm_head_mlm, &tfm_head_class, &tfm_head_tag, &tfm_head_span, NULL,
};

void tfm_head_linear_forward(float *out, const float *inp, const float *W, const float *b,
                             int N, int I, int O)
{
    tfm_gemm(0, 1, N, O, I, 1.0f, inp, I, W, I, 0.0f, out, O);
    tfm_bias_forward(out, b, N, O);
}

void tfm_head_linear_backward(float *dinp, float beta, float *dW, float *db,
                              const float *dout, const float *inp, const float *W, int N,
                              int I, int O)
{
    if (dW) /* NULL: frozen (with db) */
        tfm_gemm(1, 0, O, I, N, 1.0f, dout, O, inp, I, 1.0f, dW, I);
    if (db)
        tfm_bias_backward(db, dout, N, O);
    if (dinp)
        tfm_gemm(0, 0, N, I, O, 1.0f, dout, O, W, I, beta, dinp, I);
}
