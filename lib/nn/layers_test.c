/* nn/norm.h and nn/ffn.h: forwards against double-precision definitions,
 * backwards against finite differences, and the layernorm kind of the
 * dispatch equal to tensor/ops.h's to the bit; nn/position.h's RoPE of one
 * row against its definition and the whole table's row. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/block.h"
#include "nn/ffn.h"
#include "nn/lora.h"
#include "nn/norm.h"
#include "nn/position.h"
#include "tensor/gemm.h"
#include "tensor/gradcheck.h"
#include "tensor/ops.h"

enum { N = 5, C = 24 };

struct norm_ctx {
    float x[N * C], w[C], out[N * C], rstd[N], r[N * C];
    float eps;
};

static double rms_loss(void *p)
{
    struct norm_ctx *c = p;
    tfm_rmsnorm_forward(c->out, c->rstd, c->x, c->w, N, C, c->eps);
    return gc_dot(c->out, c->r, (size_t)N * C);
}

static void test_rmsnorm(void **state)
{
    (void)state;
    static const float eps[] = {1e-6f, 1e-1f};
    for (int e = 0; e < 2; e++) {
        struct norm_ctx c;
        tfm_rng r;
        tfm_rng_seed(&r, 3 + (uint64_t)e);
        gc_fill(&r, c.x, N * C, 1.0f);
        for (int i = 0; i < C; i++)
            c.w[i] = 1.0f + 0.3f * tfm_rng_normal(&r);
        gc_fill(&r, c.r, N * C, 1.0f);
        c.x[7] += 3.0f; /* rows of unequal scale */
        for (int i = 0; i < C; i++)
            c.x[C + i] *= 0.3f; /* one row small: eps matters */
        c.eps = eps[e];
        rms_loss(&c);
        /* T5's definition: x·rsqrt(mean(x²) + eps)·w, no mean subtracted */
        for (int n = 0; n < N; n++) {
            double ss = 0;
            for (int i = 0; i < C; i++)
                ss += (double)c.x[n * C + i] * c.x[n * C + i];
            double rs = 1.0 / sqrt(ss / C + c.eps);
            assert_true(fabs(c.rstd[n] - rs) <= 1e-6 * rs);
            for (int i = 0; i < C; i++) {
                double y = c.x[n * C + i] * rs * c.w[i];
                assert_true(fabs(c.out[n * C + i] - y) <= 1e-6 * (1 + fabs(y)));
            }
        }
        /* backward accumulates: start from a known value */
        float dx[N * C], dw[C];
        for (int i = 0; i < N * C; i++)
            dx[i] = 0.5f;
        for (int i = 0; i < C; i++)
            dw[i] = -0.25f;
        tfm_rmsnorm_backward(dx, dw, c.r, c.x, c.w, c.rstd, N, C);
        for (int i = 0; i < N * C; i++)
            dx[i] -= 0.5f;
        for (int i = 0; i < C; i++)
            dw[i] += 0.25f;
        /* atol 5e-2: the float outputs' rounding (a row's every output moves
         * with rstd) divided by 2h is ~1e-4 at h 5e-3 */
        double ex = gc_check("rms dx", rms_loss, &c, c.x, dx, N * C, 5e-3f, 200, 5e-2);
        double ew = gc_check("rms dw", rms_loss, &c, c.w, dw, C, 5e-3f, 200, 5e-2);
        print_message("eps %g: worst dx %.2g, dw %.2g\n", c.eps, ex, ew);
        assert_true(ex < 5e-3 && ew < 5e-3);
        /* the dispatch is the same function */
        float out2[N * C], rstd2[N], mean2[N];
        tfm_norm_forward(TFM_NORM_RMS, out2, mean2, rstd2, c.x, c.w, NULL, N, C, c.eps);
        rms_loss(&c);
        assert_memory_equal(out2, c.out, sizeof out2);
        /* in place */
        memcpy(out2, c.x, sizeof out2);
        tfm_rmsnorm_forward(out2, rstd2, out2, c.w, N, C, c.eps);
        assert_memory_equal(out2, c.out, sizeof out2);
    }
}

/* The layernorm kind is tensor/ops.h's LayerNorm, bit for bit. */
static void test_layernorm_dispatch(void **state)
{
    (void)state;
    float x[N * C], w[C], b[C], o1[N * C], o2[N * C], m1[N], m2[N], r1[N], r2[N], dy[N * C];
    tfm_rng r;
    tfm_rng_seed(&r, 5);
    gc_fill(&r, x, N * C, 1.0f);
    gc_fill(&r, w, C, 1.0f);
    gc_fill(&r, b, C, 1.0f);
    gc_fill(&r, dy, N * C, 1.0f);
    tfm_layernorm_forward(o1, m1, r1, x, w, b, N, C, 1e-5f);
    tfm_norm_forward(TFM_NORM_LAYER, o2, m2, r2, x, w, b, N, C, 1e-5f);
    assert_memory_equal(o1, o2, sizeof o1);
    float dx1[N * C] = {0}, dx2[N * C] = {0}, dw1[C] = {0}, dw2[C] = {0}, db1[C] = {0},
          db2[C] = {0};
    tfm_layernorm_backward(dx1, dw1, db1, dy, x, w, m1, r1, N, C);
    tfm_norm_backward(TFM_NORM_LAYER, dx2, dw2, db2, dy, x, w, m2, r2, N, C);
    assert_memory_equal(dx1, dx2, sizeof dx1);
    assert_memory_equal(dw1, dw2, sizeof dw1);
    assert_memory_equal(db1, db2, sizeof db1);
    assert_string_equal(tfm_norm_name(TFM_NORM_RMS), "rmsnorm");
}

enum { M = 300 };

struct glu_ctx {
    tfm_ffn_kind kind;
    float gate[M], lin[M], out[M], r[M];
};

static double glu_loss(void *p)
{
    struct glu_ctx *c = p;
    tfm_glu_forward(c->kind, c->out, c->gate, c->lin, M);
    return gc_dot(c->out, c->r, M);
}

static double ref_gelu_tanh(double z)
{
    return 0.5 * z * (1.0 + tanh(sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z)));
}

/* GEGLU and SwiGLU: the forward against the definitions in double, the
 * backward (both inputs) against finite differences, gates from the far
 * negative tail to the far positive one. */
static void test_glu(void **state)
{
    (void)state;
    for (int k = TFM_FFN_GEGLU; k <= TFM_FFN_SWIGLU; k++) {
        struct glu_ctx c;
        c.kind = (tfm_ffn_kind)k;
        tfm_rng r;
        tfm_rng_seed(&r, 9 + (uint64_t)k);
        for (int i = 0; i < M; i++)
            c.gate[i] = -12.0f + 24.0f * (float)i / (M - 1) + 0.1f * tfm_rng_normal(&r);
        gc_fill(&r, c.lin, M, 1.0f);
        gc_fill(&r, c.r, M, 1.0f);
        glu_loss(&c);
        for (int i = 0; i < M; i++) {
            double z = c.gate[i];
            double a = k == TFM_FFN_GEGLU ? ref_gelu_tanh(z) : z / (1.0 + exp(-z));
            double want = a * c.lin[i];
            assert_true(fabs(c.out[i] - want) <= 1e-5 * (1e-3 + fabs(want)) + 1e-7);
        }
        float dgate[M], dlin[M];
        tfm_glu_backward(c.kind, dgate, dlin, c.r, c.gate, c.lin, M);
        double eg = gc_check("glu dgate", glu_loss, &c, c.gate, dgate, M, 1e-2f, M, 1e-3);
        double el = gc_check("glu dlin", glu_loss, &c, c.lin, dlin, M, 1e-2f, M, 1e-3);
        print_message("kind %d: worst dgate %.2g, dlin %.2g\n", k, eg, el);
        assert_true(eg < 5e-3 && el < 5e-3);
        /* dgate may alias dout; out may alias gate */
        float d2[M], l2[M];
        memcpy(d2, c.r, sizeof d2);
        tfm_glu_backward(c.kind, d2, l2, d2, c.gate, c.lin, M);
        assert_memory_equal(d2, dgate, sizeof d2);
        assert_memory_equal(l2, dlin, sizeof l2);
        float g2[M];
        glu_loss(&c); /* gc_check leaves the last perturbed output */
        memcpy(g2, c.gate, sizeof g2);
        tfm_glu_forward(c.kind, g2, g2, c.lin, M);
        for (int i = 0; i < M; i++) /* tensor/ops.h's GELU in place: another tail loop */
            assert_true(fabsf(g2[i] - c.out[i]) <= 1e-6f * (1.0f + fabsf(c.out[i])));
    }
}

/* The block's feed-forward middle: the plain kind is the activation
 * itself, the gated kinds nn/ffn.h's. */
static void test_block_mid(void **state)
{
    (void)state;
    float u[M], lin[M], a[M], b[M];
    tfm_rng r;
    tfm_rng_seed(&r, 21);
    gc_fill(&r, u, M, 2.0f);
    gc_fill(&r, lin, M, 1.0f);
    tfm_block blk = {.pre = 1, .ffn = TFM_FFN_PLAIN, .act = TFM_ACT_KIND_GELU_EXACT};
    tfm_block_ffn_mid(&blk, a, u, NULL, M);
    tfm_act_forward(TFM_ACT_KIND_GELU_EXACT, b, u, M);
    assert_memory_equal(a, b, sizeof a);
    blk.ffn = TFM_FFN_SWIGLU;
    tfm_block_ffn_mid(&blk, a, u, lin, M);
    tfm_glu_forward(TFM_FFN_SWIGLU, b, u, lin, M);
    assert_memory_equal(a, b, sizeof a);
    assert_string_equal(tfm_ffn_name(TFM_FFN_GEGLU), "geglu");
}

/* LoRA: forward against a double-precision definition, backward (x, A, B)
 * against finite differences, with and without dropout, on a slice of a
 * wider output (ldy > O, as q inside c_attn). */
enum { LN = 6, LI = 10, LO = 7, LR = 3, LDY = 12 };

struct lora_ctx {
    tfm_lora_op op;
    float x[LN * LI], A[LR * LI], B[LO * LR], y[LN * LDY], y0[LN * LDY], u[LN * LR];
    float scratch[LN * LI], rw[LN * LDY];
};

static double lora_loss(void *p)
{
    struct lora_ctx *c = p;
    memcpy(c->y, c->y0, sizeof c->y);
    tfm_lora_forward(&c->op, c->y, LDY, c->u, c->x, c->A, c->B, c->scratch);
    return gc_dot(c->y, c->rw, (size_t)LN * LDY);
}

/* tfm_rope_row (the decode step's) against θ = pos·base^(-2d/HS) in double,
 * and to the bit the row of a table of every position (the training and
 * whole-sequence forwards'), inverse too (the backward undoes it). */
static void test_rope_row(void **state)
{
    (void)state;
    enum { NH = 3, HS = 10, T = 40 };
    const float base = 10000.0f;
    const tfm_rope rope = {base, TFM_ROPE_DEFAULT, 1.0f, 1.0f, 4.0f, 8192};
    float x[NH * HS], y[NH * HS], z[NH * HS], cs[HS], table[T * HS];
    tfm_rng r;
    tfm_rng_seed(&r, 9);
    gc_fill(&r, x, NH * HS, 1.0f);
    tfm_rope_table(table, 0, T, HS, &rope);
    for (int pos = 0; pos < T; pos += 13) {
        memcpy(y, x, sizeof x);
        tfm_rope_row(y, pos, NH, HS, &rope, cs);
        for (int h = 0; h < NH; h++)
            for (int d = 0; d < HS / 2; d++) {
                double th = pos * pow(base, -2.0 * d / HS);
                const float *a = x + h * HS;
                assert_true(fabs(y[h * HS + d] - (a[d] * cos(th) - a[d + HS / 2] * sin(th))) < 1e-5);
                assert_true(fabs(y[h * HS + d + HS / 2] -
                                 (a[d] * sin(th) + a[d + HS / 2] * cos(th))) < 1e-5);
            }
        const int32_t p = pos;
        memcpy(z, x, sizeof x);
        tfm_rope_apply(z, NH * HS, 1, &p, 0, NH, HS, table, T, 0);
        assert_memory_equal(y, z, sizeof y);
        tfm_rope_apply(z, NH * HS, 1, &p, 0, NH, HS, table, T, 1);
        for (int i = 0; i < NH * HS; i++)
            assert_true(fabsf(z[i] - x[i]) < 1e-5f);
    }
}

static void test_lora(void **state)
{
    (void)state;
    for (int d = 0; d < 2; d++) {
        struct lora_ctx c;
        tfm_rng r;
        tfm_rng_seed(&r, 40 + (uint64_t)d);
        c.op = (tfm_lora_op){.N = LN, .I = LI, .O = LO, .r = LR, .scale = 16.0f / LR,
                             .dropout = d ? 0.3f : 0.0f, .seed = 99};
        gc_fill(&r, c.x, LN * LI, 1.0f);
        gc_fill(&r, c.A, LR * LI, 0.5f);
        gc_fill(&r, c.B, LO * LR, 0.5f);
        gc_fill(&r, c.y0, LN * LDY, 1.0f);
        gc_fill(&r, c.rw, LN * LDY, 1.0f);
        lora_loss(&c);
        /* the columns past O are untouched; the rest is y0 + s·B·A·drop(x) */
        float keep = 1.0f / (1.0f - c.op.dropout);
        for (int n = 0; n < LN; n++)
            for (int o = 0; o < LDY; o++) {
                double want = c.y0[n * LDY + o];
                for (int k = 0; o < LO && k < LR; k++)
                    for (int i = 0; i < LI; i++) {
                        size_t e = (size_t)n * LI + i;
                        double xd = tfm_dropout_keep(99, e, c.op.dropout) ? c.x[e] * keep : 0;
                        if (c.op.dropout <= 0.0f)
                            xd = c.x[e];
                        want += c.op.scale * c.B[o * LR + k] * c.A[k * LI + i] * xd;
                    }
                assert_true(fabs(c.y[n * LDY + o] - want) <= 1e-5 * (1 + fabs(want)));
            }
        float dx[LN * LI], dA[LR * LI], dB[LO * LR], dy[LN * LDY], du[LN * LR];
        for (int i = 0; i < LN * LI; i++)
            dx[i] = 0.25f; /* backward adds to what is there */
        memset(dA, 0, sizeof dA);
        memset(dB, 0, sizeof dB);
        memcpy(dy, c.rw, sizeof dy);
        tfm_lora_backward(&c.op, dx, dA, dB, dy, LDY, c.x, c.u, c.A, c.B, c.scratch, du);
        for (int i = 0; i < LN * LI; i++)
            dx[i] -= 0.25f;
        /* linear in each of x, A, B: a wide step costs no truncation error */
        double ex = gc_check("lora dx", lora_loss, &c, c.x, dx, LN * LI, 0.1f, 1000, 1e-2);
        double ea = gc_check("lora dA", lora_loss, &c, c.A, dA, LR * LI, 0.1f, 1000, 1e-2);
        double eb = gc_check("lora dB", lora_loss, &c, c.B, dB, LO * LR, 0.1f, 1000, 1e-2);
        fprintf(stderr, "lora dropout %g: worst dx %.2g, dA %.2g, dB %.2g\n", c.op.dropout, ex,
                ea, eb);
        assert_true(ex < 1e-3 && ea < 1e-3 && eb < 1e-3);
    }
    /* merge: x·(W + s·(B·A)ᵀ) is x·W plus the adapter's term, in both
     * storage orders */
    float W[LI * LO], Wt[LO * LI], A[LR * LI], B[LO * LR], x[LI];
    tfm_rng r;
    tfm_rng_seed(&r, 7);
    gc_fill(&r, W, LI * LO, 1.0f);
    gc_fill(&r, A, LR * LI, 1.0f);
    gc_fill(&r, B, LO * LR, 1.0f);
    gc_fill(&r, x, LI, 1.0f);
    double want[LO];
    for (int o = 0; o < LO; o++) {
        want[o] = 0;
        for (int i = 0; i < LI; i++) {
            Wt[o * LI + i] = W[i * LO + o];
            want[o] += (double)x[i] * W[i * LO + o];
            for (int k = 0; k < LR; k++)
                want[o] += 0.5 * B[o * LR + k] * A[k * LI + i] * x[i];
        }
    }
    tfm_lora_merge(W, LO, 0, A, B, LI, LO, LR, 0.5f);
    tfm_lora_merge(Wt, LI, 1, A, B, LI, LO, LR, 0.5f);
    for (int o = 0; o < LO; o++) {
        double y = 0, yt = 0;
        for (int i = 0; i < LI; i++) {
            y += (double)x[i] * W[i * LO + o];
            yt += (double)x[i] * Wt[o * LI + i];
        }
        assert_true(fabs(y - want[o]) <= 1e-4 * (1 + fabs(want[o])));
        assert_true(fabs(yt - want[o]) <= 1e-4 * (1 + fabs(want[o])));
    }
}

int main(void)
{
    tfm_blas_init(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_layernorm_dispatch),
        cmocka_unit_test(test_glu),
        cmocka_unit_test(test_block_mid),
        cmocka_unit_test(test_rope_row),
        cmocka_unit_test(test_lora),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
