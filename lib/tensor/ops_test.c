#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/gemm.h"
#include "tensor/gradcheck.h"
#include "tensor/ops.h"

#define N_ 6
#define C_ 20

static float *fvec(size_t n)
{
    return calloc(n, sizeof(float));
}

static void test_expf(void **state)
{
    (void)state;
    double worst = 0.0;
    for (float x = -87.0f; x < 88.0f; x += 0.01318f) {
        double e = fabs(tfm_expf(x) - exp((double)x)) / exp((double)x);
        worst = e > worst ? e : worst;
    }
    assert_true(worst < 4e-7);
    assert_true(tfm_expf(-INFINITY) < 1e-37f);
    assert_true(tfm_expf(-1000.0f) >= 0.0f);
    /* a diverged model's NaN passes through (no undefined shift on the way:
     * the sanitized build checks) */
    assert_true(isnan(tfm_expf(NAN)));
    assert_true(isnan(tfm_expf_inline(-NAN)));
    assert_true(tfm_expf(INFINITY) > 1e38f);
}

/* ---- layer norm ---- */
struct ln_ctx {
    float *x, *w, *b, *out, *mean, *rstd, *r;
};

static double ln_loss(void *p)
{
    struct ln_ctx *c = p;
    tfm_layernorm_forward(c->out, c->mean, c->rstd, c->x, c->w, c->b, N_, C_, 1e-5f);
    return gc_dot(c->out, c->r, N_ * C_);
}

static void test_layernorm(void **state)
{
    (void)state;
    tfm_rng r;
    tfm_rng_seed(&r, 1);
    struct ln_ctx c = {fvec(N_ * C_), fvec(C_), fvec(C_), fvec(N_ * C_), fvec(N_), fvec(N_),
                       fvec(N_ * C_)};
    gc_fill(&r, c.x, N_ * C_, 1.0f);
    gc_fill(&r, c.w, C_, 1.0f);
    gc_fill(&r, c.b, C_, 1.0f);
    gc_fill(&r, c.r, N_ * C_, 1.0f);
    ln_loss(&c);
    /* forward: each row of (out - b)/w has mean 0 and variance ~1 */
    for (int n = 0; n < N_; n++) {
        double s = 0, s2 = 0;
        for (int i = 0; i < C_; i++) {
            double z = (c.out[n * C_ + i] - c.b[i]) / c.w[i];
            s += z;
            s2 += z * z;
        }
        assert_true(fabs(s / C_) < 1e-5);
        assert_true(fabs(s2 / C_ - 1.0) < 1e-3);
    }
    float *dx = fvec(N_ * C_), *dw = fvec(C_), *db = fvec(C_);
    /* backward accumulates: start from 1 and subtract it again */
    for (int i = 0; i < N_ * C_; i++)
        dx[i] = 1.0f;
    tfm_layernorm_backward(dx, dw, db, c.r, c.x, c.w, c.mean, c.rstd, N_, C_);
    for (int i = 0; i < N_ * C_; i++)
        dx[i] -= 1.0f;
    assert_true(gc_check("ln dx", ln_loss, &c, c.x, dx, N_ * C_, 1e-2f, 200, 1e-2) < 5e-3);
    assert_true(gc_check("ln dw", ln_loss, &c, c.w, dw, C_, 1e-2f, 200, 1e-2) < 5e-3);
    assert_true(gc_check("ln db", ln_loss, &c, c.b, db, C_, 1e-2f, 200, 1e-2) < 5e-3);
    free(c.x); free(c.w); free(c.b); free(c.out); free(c.mean); free(c.rstd); free(c.r);
    free(dx); free(dw); free(db);
}

/* ---- activations ---- */
struct act_ctx {
    tfm_act_kind k;
    float *x, *out, *r;
    size_t n;
};

static double act_loss(void *p)
{
    struct act_ctx *c = p;
    tfm_act_forward(c->k, c->out, c->x, c->n);
    return gc_dot(c->out, c->r, c->n);
}

static void test_activations(void **state)
{
    (void)state;
    size_t n = 401;
    tfm_rng r;
    tfm_rng_seed(&r, 2);
    struct act_ctx c = {0, fvec(n), fvec(n), fvec(n), n};
    float *d = fvec(n);
    for (size_t i = 0; i < n; i++)
        c.x[i] = -10.0f + 20.0f * (float)i / (n - 1) + 0.01f; /* avoid 0 exactly (relu) */
    gc_fill(&r, c.r, n, 1.0f);
    for (int k = 0; k < 3; k++) {
        c.k = (tfm_act_kind)k;
        act_loss(&c);
        for (size_t i = 0; i < n; i++) {
            double x = c.x[i], ref;
            if (k == TFM_ACT_KIND_GELU_TANH)
                ref = 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
            else if (k == TFM_ACT_KIND_GELU_EXACT)
                ref = 0.5 * x * (1 + erf(x / sqrt(2.0)));
            else
                ref = x > 0 ? x : 0;
            assert_true(fabs(c.out[i] - ref) <= 1e-6 + 1e-6 * fabs(ref));
        }
        tfm_act_backward(c.k, d, c.r, c.x, n);
        assert_true(gc_check("act", act_loss, &c, c.x, d, n, 1e-3f, n, 1e-2) < 5e-3);
        /* in place: dinp aliases dout */
        float *d2 = fvec(n);
        memcpy(d2, c.r, n * sizeof *d2);
        tfm_act_backward(c.k, d2, d2, c.x, n);
        assert_memory_equal(d, d2, n * sizeof *d);
        free(d2);
    }
    free(c.x); free(c.out); free(c.r); free(d);
}

/* ---- bias, embedding ---- */
static void test_bias_embedding(void **state)
{
    (void)state;
    int B = 3, T = 5, C = 70, V = 4;
    tfm_rng r;
    tfm_rng_seed(&r, 3);
    float *dout = fvec((size_t)B * T * C), *db = fvec(C);
    gc_fill(&r, dout, (size_t)B * T * C, 1.0f);
    tfm_bias_backward(db, dout, B * T, C);
    for (int i = 0; i < C; i++) {
        double s = 0;
        for (int n = 0; n < B * T; n++)
            s += dout[n * C + i];
        assert_true(fabs(db[i] - s) < 1e-5);
    }
    int32_t tok[15];
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)tfm_rng_below(&r, V);
    float *wte = fvec((size_t)V * C), *wpe = fvec((size_t)T * C), *out = fvec((size_t)B * T * C);
    gc_fill(&r, wte, (size_t)V * C, 1.0f);
    gc_fill(&r, wpe, (size_t)T * C, 1.0f);
    tfm_embedding_forward(out, tok, wte, wpe, B, T, C);
    for (int bt = 0; bt < B * T; bt++)
        for (int i = 0; i < C; i++)
            assert_true(out[bt * C + i] == wte[tok[bt] * C + i] + wpe[(bt % T) * C + i]);
    float *dwte = fvec((size_t)V * C), *dwpe = fvec((size_t)T * C);
    tfm_embedding_backward(dwte, dwpe, dout, tok, B, T, C);
    for (int v = 0; v < V; v++)
        for (int i = 0; i < C; i++) {
            double s = 0;
            for (int bt = 0; bt < B * T; bt++)
                if (tok[bt] == v)
                    s += dout[bt * C + i];
            assert_true(fabs(dwte[v * C + i] - s) < 1e-5);
        }
    for (int t = 0; t < T; t++)
        for (int i = 0; i < C; i++) {
            double s = 0;
            for (int b = 0; b < B; b++)
                s += dout[(b * T + t) * C + i];
            assert_true(fabs(dwpe[t * C + i] - s) < 1e-5);
        }
    free(dout); free(db); free(wte); free(wpe); free(out); free(dwte); free(dwpe);
}

/* The epilogue of a linear layer, on blocks of any shape, rounds as the
 * three passes it replaces: bias, activation, residual add. */
static void test_linear_epilogue(void **state)
{
    (void)state;
    enum { R = 37, C = 300, LD = 305 };
    tfm_rng r;
    tfm_rng_seed(&r, 11);
    float *bias = fvec(C), *y0 = fvec((size_t)R * LD), *x0 = fvec((size_t)R * C);
    gc_fill(&r, bias, C, 1.0f);
    gc_fill(&r, y0, (size_t)R * LD, 4.0f);
    gc_fill(&r, x0, (size_t)R * C, 1.0f);
    float *y = fvec((size_t)R * LD), *x = fvec((size_t)R * C);
    float *yw = fvec((size_t)R * C), *xw = fvec((size_t)R * C);
    for (int kind = -1; kind <= TFM_ACT_KIND_RELU; kind++)
        for (int with = 0; with < 4; with++) {
            /* wanted: the separate passes over a dense copy */
            for (int i = 0; i < R; i++)
                memcpy(yw + (size_t)i * C, y0 + (size_t)i * LD, sizeof(float) * C);
            memcpy(xw, x0, sizeof(float) * R * C);
            if (with & 1)
                tfm_bias_forward(yw, bias, R, C);
            if (kind >= 0)
                tfm_act_forward((tfm_act_kind)kind, yw, yw, (size_t)R * C);
            if (with & 2)
                tfm_add_inplace(xw, yw, (size_t)R * C);
            tfm_linear_epi e = {.bias = with & 1 ? bias : NULL, .act = kind >= 0,
                                .act_kind = kind >= 0 ? (tfm_act_kind)kind : 0,
                                .add = with & 2 ? x : NULL, .ldadd = C};
            memcpy(y, y0, sizeof(float) * R * LD);
            memcpy(x, x0, sizeof(float) * R * C);
            /* uneven blocks, as a product's edges give */
            for (int r0 = 0; r0 < R; r0 += 6)
                for (int c0 = 0; c0 < C; c0 += 16)
                    tfm_linear_epilogue(&e, y + (size_t)r0 * LD + c0, LD, r0,
                                        R - r0 < 6 ? R - r0 : 6, c0, C - c0 < 16 ? C - c0 : 16);
            for (int i = 0; i < R; i++) {
                assert_memory_equal(y + (size_t)i * LD, yw + (size_t)i * C, sizeof(float) * C);
                assert_memory_equal(y + (size_t)i * LD + C, y0 + (size_t)i * LD + C,
                                    sizeof(float) * (LD - C));
            }
            assert_memory_equal(x, xw, sizeof(float) * R * C);
        }
    free(bias); free(y0); free(x0); free(y); free(x); free(yw); free(xw);
}

/* ---- softmax, cross-entropy ---- */
static void test_softmax(void **state)
{
    (void)state;
    float x[2][8] = {{1, 2, 3, 4, 5, 6, 7, 8}, {-1000, 0, 1000, 3, 9, 9, 9, 9}};
    tfm_softmax_rows(&x[0][0], 2, 5, 8);
    double s0 = 0, ref = 0;
    for (int i = 0; i < 5; i++)
        ref += exp(i + 1.0);
    for (int i = 0; i < 5; i++) {
        s0 += x[0][i];
        assert_true(fabs(x[0][i] - exp(i + 1.0) / ref) < 1e-6);
    }
    assert_true(fabs(s0 - 1.0) < 1e-6);
    assert_true(x[0][5] == 6.0f); /* beyond len untouched */
    assert_true(fabs(x[1][2] - 1.0) < 1e-6 && x[1][0] == 0.0f);
}

struct ce_ctx {
    float *x, *lse, *losses;
    int32_t *t;
    int N, V;
    float eps;
};

static double ce_loss(void *p)
{
    struct ce_ctx *c = p;
    long cnt;
    return tfm_crossentropy_forward(c->lse, c->losses, c->x, c->t, c->N, c->V, c->eps, &cnt);
}

static void test_crossentropy(void **state)
{
    (void)state;
    int N = 5, V = 11;
    tfm_rng r;
    tfm_rng_seed(&r, 4);
    int32_t t[5] = {3, 0, -1, 10, 7};
    struct ce_ctx c = {fvec((size_t)N * V), fvec(N), fvec(N), t, N, V, 0};
    gc_fill(&r, c.x, (size_t)N * V, 2.0f);
    float eps_list[2] = {0.0f, 0.1f};
    for (int e = 0; e < 2; e++) {
        c.eps = eps_list[e];
        long cnt;
        double tot = tfm_crossentropy_forward(c.lse, c.losses, c.x, t, N, V, c.eps, &cnt);
        assert_int_equal(cnt, 4);
        /* reference in double */
        double ref = 0;
        for (int n = 0; n < N; n++) {
            if (t[n] < 0) {
                assert_true(c.losses[n] == 0.0f);
                continue;
            }
            double mx = -1e30, s = 0;
            for (int i = 0; i < V; i++)
                mx = fmax(mx, c.x[n * V + i]);
            for (int i = 0; i < V; i++)
                s += exp(c.x[n * V + i] - mx);
            double lse = mx + log(s), l = 0;
            for (int i = 0; i < V; i++) {
                double q = c.eps / V + (i == t[n] ? 1 - c.eps : 0);
                l -= q * (c.x[n * V + i] - lse);
            }
            ref += l;
        }
        assert_true(fabs(tot - ref) < 1e-5 * (1 + fabs(ref)));
        float *g = fvec((size_t)N * V);
        memcpy(g, c.x, (size_t)N * V * sizeof *g);
        tfm_crossentropy_backward(g, c.lse, t, N, V, c.eps, 1.0f);
        for (int i = 0; i < V; i++)
            assert_true(g[2 * V + i] == 0.0f);
        assert_true(gc_check("ce", ce_loss, &c, c.x, g, (size_t)N * V, 1e-2f, 100, 1e-2) < 1e-2);
        free(g);
    }
    free(c.x); free(c.lse); free(c.losses);
}

/* ---- dropout ---- */
static void test_dropout(void **state)
{
    (void)state;
    size_t n = 100000;
    float *x = fvec(n), *y = fvec(n), *d = fvec(n);
    for (size_t i = 0; i < n; i++)
        x[i] = 1.0f;
    tfm_dropout_forward(y, x, n, 0.25f, 42);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(y[i] == 0.0f || fabsf(y[i] - 1.0f / 0.75f) < 1e-6f);
        kept += y[i] != 0.0f;
        assert_int_equal(y[i] != 0.0f, tfm_dropout_keep(42, i, 0.25f));
    }
    /* 75% kept, within 5 standard deviations */
    assert_true(fabs((double)kept / n - 0.75) < 5 * sqrt(0.75 * 0.25 / n));
    /* backward uses the same mask: y = x·m/(1-p), so dx = dy·m/(1-p) = y here */
    tfm_dropout_backward(d, x, n, 0.25f, 42);
    assert_memory_equal(d, y, n * sizeof *d);
    /* another seed gives another mask */
    tfm_dropout_forward(d, x, n, 0.25f, 43);
    assert_true(memcmp(d, y, n * sizeof *d) != 0);
    /* p = 0 is the identity */
    tfm_dropout_forward(d, x, n, 0.0f, 42);
    assert_memory_equal(d, x, n * sizeof *d);
    free(x); free(y); free(d);
}

int main(void)
{
    tfm_blas_init(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expf),
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_bias_embedding),
        cmocka_unit_test(test_linear_epilogue),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_dropout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
