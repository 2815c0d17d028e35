#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/attention.h"
#include "tensor/gemm.h"
#include "tensor/gradcheck.h"

/* q in its own buffer [B,Tq,C]; k and v interleaved in one [B,Tk,2C]
 * buffer (as a fused projection would give), to exercise the strides. */
struct ctx {
    tfm_attn a;
    int C;
    float *q, *kv, *out, *att, *scratch, *r;
};

static double attn_loss(void *p)
{
    struct ctx *c = p;
    int C = c->C;
    tfm_attn_forward(&c->a, c->out, C, c->att, c->q, C, c->kv, 2 * C, c->kv + C, 2 * C,
                     c->scratch);
    return gc_dot(c->out, c->r, (size_t)c->a.B * c->a.Tq * C);
}

static void setup(struct ctx *c, int B, int Tq, int Tk, int NH, int HS, tfm_mask_kind mask,
                  const int *key_len, float dropout, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->a = (tfm_attn){B, Tq, Tk, NH, HS, mask, key_len, dropout, 99};
    c->C = NH * HS;
    size_t nq = (size_t)B * Tq * c->C, nkv = (size_t)B * Tk * 2 * c->C;
    c->q = calloc(nq, sizeof(float));
    c->kv = calloc(nkv, sizeof(float));
    c->out = calloc(nq, sizeof(float));
    c->r = calloc(nq, sizeof(float));
    c->att = calloc((size_t)B * NH * Tq * Tk, sizeof(float));
    c->scratch = calloc(tfm_attn_scratch_floats(&c->a), sizeof(float));
    tfm_rng r;
    tfm_rng_seed(&r, seed);
    gc_fill(&r, c->q, nq, 1.0f);
    gc_fill(&r, c->kv, nkv, 1.0f);
    gc_fill(&r, c->r, nq, 1.0f);
}

static void teardown_ctx(struct ctx *c)
{
    free(c->q); free(c->kv); free(c->out); free(c->r); free(c->att); free(c->scratch);
}

/* Reference forward in double, without dropout. */
static void check_forward(struct ctx *c)
{
    tfm_attn *a = &c->a;
    int C = c->C, HS = a->HS;
    attn_loss(c);
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->NH; h++)
            for (int i = 0; i < a->Tq; i++) {
                double s[128], mx = -1e300, z = 0;
                int len = a->Tk;
                if (a->mask == TFM_MASK_CAUSAL && i + 1 + a->Tk - a->Tq < len)
                    len = i + 1 + a->Tk - a->Tq;
                if (a->key_len && a->key_len[b] < len)
                    len = a->key_len[b];
                for (int j = 0; j < len; j++) {
                    double d = 0;
                    for (int e = 0; e < HS; e++)
                        d += (double)c->q[((size_t)b * a->Tq + i) * C + h * HS + e] *
                             c->kv[((size_t)b * a->Tk + j) * 2 * C + h * HS + e];
                    s[j] = d / sqrt(HS);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j < len; j++)
                    z += (s[j] = exp(s[j] - mx));
                const float *P = c->att + (((size_t)b * a->NH + h) * a->Tq + i) * a->Tk;
                for (int j = 0; j < a->Tk; j++) {
                    double ref = j < len ? s[j] / z : 0.0;
                    assert_true(fabs(P[j] - ref) < 1e-5);
                }
                for (int e = 0; e < HS; e++) {
                    double y = 0;
                    for (int j = 0; j < len; j++)
                        y += s[j] / z * c->kv[((size_t)b * a->Tk + j) * 2 * C + C + h * HS + e];
                    assert_true(fabs(c->out[((size_t)b * a->Tq + i) * C + h * HS + e] - y) < 1e-5);
                }
            }
}

static void check_backward(struct ctx *c)
{
    tfm_attn *a = &c->a;
    int C = c->C;
    size_t nq = (size_t)a->B * a->Tq * C, nkv = (size_t)a->B * a->Tk * 2 * C;
    float *dq = calloc(nq, sizeof(float)), *dkv = calloc(nkv, sizeof(float));
    attn_loss(c);
    tfm_attn_backward(a, dq, C, dkv, 2 * C, dkv + C, 2 * C, c->r, C, c->att, c->q, C, c->kv,
                      2 * C, c->kv + C, 2 * C, c->scratch);
    assert_true(gc_check("dq", attn_loss, c, c->q, dq, nq, 1e-2f, 300, 1e-2) < 5e-3);
    assert_true(gc_check("dkv", attn_loss, c, c->kv, dkv, nkv, 1e-2f, 300, 1e-2) < 5e-3);
    free(dq);
    free(dkv);
}

static void test_causal_self(void **state)
{
    (void)state;
    struct ctx c;
    setup(&c, 2, 7, 7, 3, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 1);
    check_forward(&c);
    check_backward(&c);
    /* the future is invisible: changing the last key and value changes
     * nothing but the last query's output */
    float *before = malloc((size_t)2 * 7 * c.C * sizeof(float));
    memcpy(before, c.out, (size_t)2 * 7 * c.C * sizeof(float));
    for (int e = 0; e < 2 * c.C; e++)
        c.kv[(size_t)6 * 2 * c.C + e] += 1.0f;
    attn_loss(&c);
    assert_memory_equal(before, c.out, (size_t)6 * c.C * sizeof(float));
    free(before);
    teardown_ctx(&c);
}

static void test_cross_padding(void **state)
{
    (void)state;
    static const int key_len[2] = {6, 4};
    struct ctx c;
    setup(&c, 2, 3, 6, 2, 5, TFM_MASK_NONE, key_len, 0.0f, 2);
    check_forward(&c);
    check_backward(&c);
    teardown_ctx(&c);
    /* a head size the fused loops take, and more keys than one register */
    setup(&c, 2, 3, 21, 1, 32, TFM_MASK_NONE, key_len, 0.0f, 2);
    check_forward(&c);
    check_backward(&c);
    teardown_ctx(&c);
}

static void test_causal_cache_alignment(void **state)
{
    (void)state;
    /* 3 queries against 8 keys: query i is position 5 + i */
    struct ctx c;
    setup(&c, 1, 3, 8, 2, 4, TFM_MASK_CAUSAL, NULL, 0.0f, 3);
    check_forward(&c);
    check_backward(&c);
    teardown_ctx(&c);
    setup(&c, 1, 5, 70, 1, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 3);
    check_forward(&c);
    check_backward(&c);
    teardown_ctx(&c);
}

static void test_dropout(void **state)
{
    (void)state;
    struct ctx c;
    setup(&c, 2, 6, 6, 2, 16, TFM_MASK_CAUSAL, NULL, 0.3f, 4);
    check_backward(&c);
    /* some probabilities really are dropped: output differs from p = 0 */
    attn_loss(&c);
    float *o = malloc((size_t)2 * 6 * c.C * sizeof(float));
    memcpy(o, c.out, (size_t)2 * 6 * c.C * sizeof(float));
    c.a.dropout = 0.0f;
    attn_loss(&c);
    assert_true(memcmp(o, c.out, (size_t)2 * 6 * c.C * sizeof(float)) != 0);
    free(o);
    teardown_ctx(&c);
}

int main(void)
{
    tfm_blas_init(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_causal_self),
        cmocka_unit_test(test_cross_padding),
        cmocka_unit_test(test_causal_cache_alignment),
        cmocka_unit_test(test_dropout),
    };
    /* both implementations: the fused loops and the per-head BLIS products */
    setenv("TFM_ATTN", "fused", 1);
    int failed = cmocka_run_group_tests_name("fused", tests, NULL, NULL);
    setenv("TFM_ATTN", "blas", 1);
    failed += cmocka_run_group_tests_name("blas", tests, NULL, NULL);
    return failed;
}
