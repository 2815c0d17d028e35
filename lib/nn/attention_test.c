#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "nn/attention.h"
#include "tensor/gemm.h"
#include "tensor/gradcheck.h"

/* q in its own buffer [B,Tq,C]; k and v interleaved in one [B,Tk,2CK]
 * buffer (as a fused projection would give), to exercise the strides; CK =
 * C but with grouped heads (use_kv_heads).  table/dtable: a T5 bias table
 * [NH, n_buckets] when t5 is used. */
struct ctx {
    tfm_attn a;
    tfm_attn_t5 t5;
    int C, CK;
    float *q, *kv, *out, *att, *scratch, *r, *table, *dtable;
};

static double attn_loss(void *p)
{
    struct ctx *c = p;
    int C = c->C, CK = c->CK;
    tfm_attn_forward(&c->a, c->out, C, c->att, c->q, C, c->kv, 2 * CK, c->kv + CK, 2 * CK,
                     c->scratch);
    return gc_dot(c->out, c->r, (size_t)c->a.B * c->a.Tq * C);
}

/* NaN everywhere: whatever reads a float it has not written shows. */
static float *poisoned(size_t n)
{
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = NAN;
    return x;
}

/* (Re)size the scratch after the features or the thread count change. */
static void ready(struct ctx *c)
{
    free(c->scratch);
    c->scratch = poisoned(tfm_attn_scratch_floats(&c->a));
}

/* the implementation every test runs: main() runs them under both */
static tfm_attn_impl forced = TFM_ATTN_FUSED;

static void setup(struct ctx *c, int B, int Tq, int Tk, int NH, int HS, tfm_mask_kind mask,
                  const int *key_len, float dropout, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->a = (tfm_attn){.B = B, .Tq = Tq, .Tk = Tk, .NH = NH, .HS = HS, .mask = mask,
                      .key_len = key_len, .dropout = dropout, .seed = 99, .impl = forced};
    c->C = c->CK = NH * HS;
    size_t nq = (size_t)B * Tq * c->C, nkv = (size_t)B * Tk * 2 * c->C;
    c->q = calloc(nq, sizeof(float));
    c->kv = calloc(nkv, sizeof(float));
    c->out = poisoned(nq);
    c->r = calloc(nq, sizeof(float));
    c->att = poisoned((size_t)B * NH * Tq * Tk);
    tfm_rng r;
    tfm_rng_seed(&r, seed);
    gc_fill(&r, c->q, nq, 1.0f);
    gc_fill(&r, c->kv, nkv, 1.0f);
    gc_fill(&r, c->r, nq, 1.0f);
    ready(c);
}

/* A random T5 table (large enough to matter against the scores). */
static void use_t5(struct ctx *c, int n_buckets, int max_distance, int bidirectional)
{
    size_t n = (size_t)c->a.NH * n_buckets;
    c->table = calloc(n, sizeof(float));
    c->dtable = calloc(n, sizeof(float));
    tfm_rng r;
    tfm_rng_seed(&r, 77);
    gc_fill(&r, c->table, n, 1.0f);
    c->t5 = (tfm_attn_t5){c->table, c->dtable, n_buckets, max_distance, bidirectional};
    c->a.t5 = &c->t5;
    ready(c);
}

/* NKV key/value heads (grouped-query attention; 1: multi-query): k and v
 * become NKV heads wide, drawn afresh from seed. */
static void use_kv_heads(struct ctx *c, int NKV, uint64_t seed)
{
    c->a.NKV = NKV;
    c->CK = NKV * c->a.HS;
    size_t nkv = (size_t)c->a.B * c->a.Tk * 2 * c->CK;
    free(c->kv);
    c->kv = calloc(nkv, sizeof(float));
    tfm_rng r;
    tfm_rng_seed(&r, seed);
    gc_fill(&r, c->kv, nkv, 1.0f);
    ready(c);
}

static void teardown_ctx(struct ctx *c)
{
    free(c->q); free(c->kv); free(c->out); free(c->r); free(c->att); free(c->scratch);
    free(c->table); free(c->dtable);
}

/* The mask and bias from their definitions, for one (b, h, i, j). */
static int ref_visible(const tfm_attn *a, int b, int i, int j)
{
    int qpos = a->Tk - a->Tq + i;
    if (a->key_len && j >= a->key_len[b])
        return 0;
    if (a->mask == TFM_MASK_CAUSAL && j > qpos)
        return 0;
    if (a->mask == TFM_MASK_PREFIX && j >= a->prefix_len[b] && j > qpos)
        return 0;
    if (a->doc_start && j < a->doc_start[b * a->Tq + i])
        return 0;
    if (a->window && (qpos - j >= a->window ||
                      (a->mask == TFM_MASK_NONE && j - qpos >= a->window)))
        return 0;
    return 1;
}

static double ref_bias(const tfm_attn *a, int h, int i, int j)
{
    int qpos = a->Tk - a->Tq + i;
    double x = 0;
    if (a->alibi)
        x -= (double)a->alibi[h] * abs(qpos - j);
    if (a->t5)
        x += a->t5->table[h * a->t5->n_buckets + tfm_t5_bucket(j - qpos, a->t5->bidirectional,
                                                              a->t5->n_buckets,
                                                              a->t5->max_distance)];
    return x;
}

/* Reference forward in double, without dropout: the output, and P where
 * the path keeps it (the tiled one does not); a query that sees no key
 * must give zeros. */
static void check_forward(struct ctx *c)
{
    tfm_attn *a = &c->a;
    int C = c->C, CK = c->CK, HS = a->HS;
    double *s = malloc(sizeof(double) * (size_t)a->Tk);
    attn_loss(c);
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->NH; h++)
            for (int i = 0; i < a->Tq; i++) {
                /* query head h's key/value head, from the definition */
                int kh = h / (a->NH / (a->NKV ? a->NKV : a->NH));
                double mx = -1e300, z = 0;
                for (int j = 0; j < a->Tk; j++) {
                    if (!ref_visible(a, b, i, j))
                        continue;
                    double d = 0;
                    for (int e = 0; e < HS; e++)
                        d += (double)c->q[((size_t)b * a->Tq + i) * C + h * HS + e] *
                             c->kv[((size_t)b * a->Tk + j) * 2 * CK + kh * HS + e];
                    s[j] = (a->unscaled ? d : d / sqrt(HS)) + ref_bias(a, h, i, j);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j < a->Tk; j++)
                    if (ref_visible(a, b, i, j))
                        z += (s[j] = exp(s[j] - mx));
                if (c->att) {
                    const float *P = c->att + (((size_t)b * a->NH + h) * a->Tq + i) * a->Tk;
                    for (int j = 0; j < a->Tk; j++) {
                        double ref = ref_visible(a, b, i, j) ? s[j] / z : 0.0;
                        assert_true(fabs(P[j] - ref) < 1e-5);
                    }
                }
                for (int e = 0; e < HS; e++) {
                    double y = 0;
                    for (int j = 0; j < a->Tk; j++)
                        if (ref_visible(a, b, i, j))
                            y += s[j] / z *
                                 c->kv[((size_t)b * a->Tk + j) * 2 * CK + CK + kh * HS + e];
                    assert_true(fabs(c->out[((size_t)b * a->Tq + i) * C + h * HS + e] - y) < 1e-5);
                }
            }
    free(s);
}

static void all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_true(isfinite(x[i]));
}

/* Gradients (dq, dk, dv and with T5 dtable) against finite differences.
 * The step balances the float rounding of the loss (error ∝ 1/H: 5e-3 at
 * H = 1e-2 for 40 keys) against truncation (∝ H²). */
static void check_backward(struct ctx *c)
{
    tfm_attn *a = &c->a;
    /* unscaled scores move √HS times faster with q and k */
    const float H = a->unscaled ? 1e-2f : 3e-2f;
    int C = c->C, CK = c->CK;
    size_t nq = (size_t)a->B * a->Tq * C, nkv = (size_t)a->B * a->Tk * 2 * CK;
    float *dq = poisoned(nq), *dkv = poisoned(nkv);
    attn_loss(c);
    if (a->t5)
        memset(c->dtable, 0, (size_t)a->NH * c->t5.n_buckets * sizeof(float));
    tfm_attn_backward(a, dq, C, dkv, 2 * CK, dkv + CK, 2 * CK, c->r, C, c->att, c->q, C, c->kv,
                      2 * CK, c->kv + CK, 2 * CK, c->scratch);
    /* gc_check passes NaN (a comparison with NaN is false): check first */
    all_finite(dq, nq);
    all_finite(dkv, nkv);
    if (a->t5)
        all_finite(c->dtable, (size_t)a->NH * c->t5.n_buckets);
    assert_true(gc_check("dq", attn_loss, c, c->q, dq, nq, H, 300, 1e-2) < 5e-3);
    assert_true(gc_check("dkv", attn_loss, c, c->kv, dkv, nkv, H, 300, 1e-2) < 5e-3);
    if (a->t5) {
        size_t nt = (size_t)a->NH * c->t5.n_buckets;
        assert_true(gc_check("dtable", attn_loss, c, c->table, c->dtable, nt, H, 300,
                             1e-2) < 5e-3);
    }
    free(dq);
    free(dkv);
}

static void check_both(struct ctx *c)
{
    check_forward(c);
    check_backward(c);
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

static void test_prefix(void **state)
{
    (void)state;
    struct ctx c;
    /* prefix 3 with padding; a prefix past the end (full attention) */
    static const int prefix[2] = {3, 12}, key_len[2] = {9, 7};
    setup(&c, 2, 9, 9, 2, 16, TFM_MASK_PREFIX, key_len, 0.0f, 5);
    c.a.prefix_len = prefix;
    check_both(&c);
    teardown_ctx(&c);
    /* rows wider than a vector; key blocks both inside and past the prefix */
    static const int prefix2[2] = {5, 17};
    setup(&c, 2, 21, 21, 1, 16, TFM_MASK_PREFIX, NULL, 0.0f, 6);
    c.a.prefix_len = prefix2;
    check_both(&c);
    /* a prefix of 0 or 1 is the causal mask */
    static const int prefix0[2] = {0, 1};
    c.a.prefix_len = prefix0;
    attn_loss(&c);
    size_t n = (size_t)2 * 21 * c.C;
    float *o = malloc(n * sizeof(float));
    memcpy(o, c.out, n * sizeof(float));
    c.a.mask = TFM_MASK_CAUSAL;
    attn_loss(&c);
    assert_memory_equal(o, c.out, n * sizeof(float));
    free(o);
    teardown_ctx(&c);
}

/* doc_start for documents beginning at starts[0..n) (the first 0). */
static void docs(int *doc_start, int T, const int *starts, int n)
{
    for (int i = 0, d = 0; i < T; i++) {
        while (d + 1 < n && starts[d + 1] <= i)
            d++;
        doc_start[i] = starts[d];
    }
}

static void test_packed(void **state)
{
    (void)state;
    struct ctx c;
    /* several documents per row, one of a single token */
    int ds[2 * 20];
    docs(ds, 20, (const int[]){0, 5, 12, 13}, 4);
    docs(ds + 20, 20, (const int[]){0, 17}, 2);
    setup(&c, 2, 20, 20, 2, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 7);
    c.a.doc_start = ds;
    check_both(&c);
    /* documents are independent: changing the first document's keys and
     * values leaves the later documents' outputs as they were */
    size_t n = (size_t)2 * 20 * c.C;
    float *o = malloc(n * sizeof(float));
    memcpy(o, c.out, n * sizeof(float));
    for (int e = 0; e < 2 * c.C; e++)
        c.kv[(size_t)2 * 2 * c.C + e] += 1.0f;
    attn_loss(&c);
    assert_memory_equal(o + (size_t)5 * c.C, c.out + (size_t)5 * c.C,
                        (size_t)15 * c.C * sizeof(float));
    assert_true(memcmp(o, c.out, (size_t)5 * c.C * sizeof(float)) != 0);
    free(o);
    teardown_ctx(&c);
    /* documents starting past the first vectors of a row, with padding */
    static const int key_len[2] = {40, 38};
    int ds2[2 * 40];
    docs(ds2, 40, (const int[]){0, 18, 35}, 3);
    docs(ds2 + 40, 40, (const int[]){0, 33}, 2);
    setup(&c, 2, 40, 40, 1, 16, TFM_MASK_CAUSAL, key_len, 0.0f, 8);
    c.a.doc_start = ds2;
    check_both(&c);
    teardown_ctx(&c);
    /* a block of queries over a cache: doc_start in key positions */
    int ds3[5] = {20, 20, 37, 37, 37};
    setup(&c, 1, 5, 40, 2, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 9);
    c.a.doc_start = ds3;
    check_both(&c);
    teardown_ctx(&c);
}

/* A query block over a cache of earlier keys gives the last rows of the
 * full sequence: the biases align queries at Tk - Tq + i. */
static void check_cache_rows(struct ctx *full, int Tq)
{
    tfm_attn a = full->a;
    int C = full->C, T = a.Tk;
    a.Tq = Tq;
    float *scratch = calloc(tfm_attn_scratch_floats(&a), sizeof(float));
    float *out = calloc((size_t)Tq * C, sizeof(float));
    float *att = calloc((size_t)a.NH * Tq * T, sizeof(float));
    attn_loss(full);
    tfm_attn_forward(&a, out, C, att, full->q + (size_t)(T - Tq) * C, C, full->kv, 2 * C,
                     full->kv + C, 2 * C, scratch);
    for (size_t i = 0; i < (size_t)Tq * C; i++)
        assert_true(fabsf(out[i] - full->out[(size_t)(T - Tq) * C + i]) < 1e-5f);
    free(scratch);
    free(out);
    free(att);
}

static void test_alibi(void **state)
{
    (void)state;
    float slopes[3];
    tfm_alibi_slopes(slopes, 3);
    struct ctx c;
    setup(&c, 2, 12, 12, 3, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 10);
    c.a.alibi = slopes;
    ready(&c);
    check_both(&c);
    teardown_ctx(&c);
    /* bidirectional, with padding */
    static const int key_len[2] = {11, 6};
    setup(&c, 2, 11, 11, 3, 16, TFM_MASK_NONE, key_len, 0.0f, 11);
    c.a.alibi = slopes;
    ready(&c);
    check_both(&c);
    teardown_ctx(&c);
    /* 3 queries over 20 keys */
    setup(&c, 1, 3, 20, 3, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 12);
    c.a.alibi = slopes;
    ready(&c);
    check_both(&c);
    teardown_ctx(&c);
    setup(&c, 1, 20, 20, 3, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 12);
    c.a.alibi = slopes;
    ready(&c);
    check_cache_rows(&c, 3);
    teardown_ctx(&c);
}

static void test_t5(void **state)
{
    (void)state;
    struct ctx c;
    /* bidirectional (encoder) with padding: 8 buckets, max distance 12,
     * so both the exact and the logarithmic buckets occur */
    static const int key_len[2] = {14, 9};
    setup(&c, 2, 14, 14, 2, 16, TFM_MASK_NONE, key_len, 0.0f, 13);
    use_t5(&c, 8, 12, 1);
    check_both(&c);
    teardown_ctx(&c);
    /* causal (decoder) */
    setup(&c, 2, 18, 18, 2, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 14);
    use_t5(&c, 8, 12, 0);
    check_both(&c);
    teardown_ctx(&c);
    /* 4 queries over 19 keys, and the same rows of the full sequence */
    setup(&c, 2, 4, 19, 2, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 15);
    use_t5(&c, 8, 12, 0);
    check_both(&c);
    teardown_ctx(&c);
    setup(&c, 1, 19, 19, 2, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 15);
    use_t5(&c, 8, 12, 0);
    check_cache_rows(&c, 4);
    teardown_ctx(&c);
}

/* tfm_attn_row (the cached decode step's) against the double reference of
 * check_forward: each query row alone, at position qpos = Tk - Tq + i,
 * over the key and value rows at their stride in the interleaved buffer. */
static void check_row(struct ctx *c)
{
    tfm_attn *a = &c->a;
    int C = c->C, CK = c->CK, HS = a->HS;
    float s[256], out[256];
    assert_true(a->Tk <= 256 && HS <= 256);
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < a->NH; h++)
            for (int i = 0; i < a->Tq; i++) {
                int qpos = a->Tk - a->Tq + i;
                int n_keys = a->key_len ? a->key_len[b] : a->Tk;
                int kh = h / (a->NH / (a->NKV ? a->NKV : a->NH));
                const float *kb = c->kv + (size_t)b * a->Tk * 2 * CK + kh * HS;
                tfm_attn_row(a, h, out, c->q + ((size_t)b * a->Tq + i) * C + h * HS, kb,
                             kb + CK, (size_t)2 * CK, qpos, n_keys,
                             a->prefix_len ? a->prefix_len[b] : 0, s);
                double sc[256], mx = -1e300, z = 0;
                for (int j = 0; j < a->Tk; j++) {
                    if (!ref_visible(a, b, i, j))
                        continue;
                    double d = 0;
                    for (int e = 0; e < HS; e++)
                        d += (double)c->q[((size_t)b * a->Tq + i) * C + h * HS + e] *
                             kb[(size_t)j * 2 * CK + e];
                    sc[j] = (a->unscaled ? d : d / sqrt(HS)) + ref_bias(a, h, i, j);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j < a->Tk; j++)
                    if (ref_visible(a, b, i, j))
                        z += (sc[j] = exp(sc[j] - mx));
                for (int e = 0; e < HS; e++) {
                    double y = 0;
                    for (int j = 0; j < a->Tk; j++)
                        if (ref_visible(a, b, i, j))
                            y += sc[j] / z * kb[(size_t)j * 2 * CK + CK + e];
                    assert_true(fabs(out[e] - y) < 1e-5);
                }
            }
}

static void test_row(void **state)
{
    (void)state;
    struct ctx c;
    float slopes[20];
    tfm_alibi_slopes(slopes, 20); /* 20 heads: slopes that are not powers of 2 */
    /* causal, a head size no vector divides */
    setup(&c, 2, 13, 13, 2, 12, TFM_MASK_CAUSAL, NULL, 0.0f, 30);
    check_row(&c);
    /* ALiBi, and unscaled */
    c.a.alibi = slopes;
    check_row(&c);
    c.a.unscaled = 1;
    check_row(&c);
    teardown_ctx(&c);
    /* 3 queries at the end of 19 keys: a cache of 16 earlier ones */
    setup(&c, 1, 3, 19, 20, 4, TFM_MASK_CAUSAL, NULL, 0.0f, 31);
    c.a.alibi = slopes;
    check_row(&c);
    teardown_ctx(&c);
    /* T5, causal buckets */
    setup(&c, 2, 18, 18, 2, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 32);
    use_t5(&c, 8, 12, 0);
    check_row(&c);
    teardown_ctx(&c);
    /* full (cross-attention: padded sources), with bidirectional buckets */
    static const int key_len[2] = {14, 9};
    setup(&c, 2, 14, 14, 2, 16, TFM_MASK_NONE, key_len, 0.0f, 33);
    check_row(&c);
    use_t5(&c, 8, 12, 1);
    check_row(&c);
    teardown_ctx(&c);
    /* prefix-LM: past the end, inside, and 0 (causal) */
    static const int prefix[2] = {5, 17}, prefix0[2] = {0, 0};
    setup(&c, 2, 15, 15, 3, 8, TFM_MASK_PREFIX, NULL, 0.0f, 34);
    c.a.prefix_len = prefix;
    check_row(&c);
    c.a.alibi = slopes;
    check_row(&c);
    c.a.prefix_len = prefix0;
    check_row(&c);
    teardown_ctx(&c);
}

/* Sliding windows: causal (Mistral's: the window's last key is the query)
 * and symmetric (Longformer's, without a causal mask), with padding,
 * ALiBi, T5, grouped heads, dropout and a query block over a cache:
 * forward and finite differences, the cached decode's row, and the tiled
 * path past its tiles. */
static void test_window(void **state)
{
    (void)state;
    float slopes[4];
    tfm_alibi_slopes(slopes, 4);
    static const int key_len[2] = {29, 17};
    struct ctx c;
    setup(&c, 2, 29, 29, 2, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 81);
    c.a.window = 5;
    ready(&c);
    check_both(&c);
    check_row(&c);
    c.a.alibi = slopes;
    c.a.window = 1; /* each query sees itself alone */
    ready(&c);
    check_both(&c);
    teardown_ctx(&c);
    setup(&c, 2, 29, 29, 4, 16, TFM_MASK_NONE, key_len, 0.0f, 82);
    c.a.window = 4;
    use_t5(&c, 16, 20, 1);
    use_kv_heads(&c, 2, 83);
    check_both(&c);
    check_row(&c);
    teardown_ctx(&c);
    /* 6 new queries over 31 keys, dropout */
    setup(&c, 1, 6, 31, 2, 16, TFM_MASK_CAUSAL, NULL, 0.1f, 84);
    c.a.window = 7;
    ready(&c);
    check_backward(&c);
    c.a.dropout = 0.0f;
    check_forward(&c);
    check_row(&c);
    teardown_ctx(&c);
    /* the tiled path: windows narrower and wider than a tile */
    for (int w = 0; w < 2; w++) {
        setup(&c, 1, 600, 600, 2, 16, w ? TFM_MASK_NONE : TFM_MASK_CAUSAL, NULL, 0.0f, 85);
        c.a.window = w ? 300 : 70;
        c.a.impl = TFM_ATTN_TILED;
        ready(&c);
        free(c.att);
        c.att = NULL;
        check_forward(&c);
        teardown_ctx(&c);
    }
}

/* Features together: ALiBi over packed documents, T5 under a prefix, both
 * biases with padding and dropout. */
static void test_combined(void **state)
{
    (void)state;
    struct ctx c;
    float slopes[2];
    tfm_alibi_slopes(slopes, 2);
    int ds[2 * 24];
    docs(ds, 24, (const int[]){0, 7, 19}, 3);
    docs(ds + 24, 24, (const int[]){0, 1, 22}, 3);
    setup(&c, 2, 24, 24, 2, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 16);
    c.a.alibi = slopes;
    c.a.doc_start = ds;
    ready(&c);
    check_both(&c);
    teardown_ctx(&c);

    static const int prefix[2] = {6, 10};
    setup(&c, 2, 13, 13, 2, 16, TFM_MASK_PREFIX, NULL, 0.0f, 17);
    c.a.prefix_len = prefix;
    use_t5(&c, 16, 32, 1);
    check_both(&c);
    teardown_ctx(&c);

    static const int key_len[2] = {10, 7};
    setup(&c, 2, 10, 10, 2, 16, TFM_MASK_NONE, key_len, 0.0f, 18);
    c.a.alibi = slopes;
    use_t5(&c, 8, 12, 1);
    check_forward(&c);
    c.a.dropout = 0.2f;
    check_backward(&c);
    teardown_ctx(&c);
}

/* Without the 1/√HS factor (T5): the reference forward and finite
 * differences, alone and with T5's bias under a causal mask and padding.
 * The same scores scaled by √HS in q give the scaled attention's result, so
 * the factor is applied once and only once. */
static void test_unscaled(void **state)
{
    (void)state;
    struct ctx c;
    static const int key_len[2] = {9, 6};
    setup(&c, 2, 9, 9, 2, 16, TFM_MASK_NONE, key_len, 0.0f, 31);
    c.a.unscaled = 1;
    /* small q, k: unscaled scores of unit vectors would saturate the softmax */
    for (size_t i = 0; i < (size_t)2 * 9 * c.C; i++)
        c.q[i] *= 0.25f;
    check_both(&c);
    size_t nq = (size_t)2 * 9 * c.C;
    float *unscaled = malloc(nq * sizeof(float));
    memcpy(unscaled, c.out, nq * sizeof(float));
    c.a.unscaled = 0;
    for (size_t i = 0; i < nq; i++)
        c.q[i] *= 4.0f; /* √16 */
    attn_loss(&c);
    for (size_t i = 0; i < nq; i++)
        assert_true(fabsf(unscaled[i] - c.out[i]) <= 1e-5f * (1.0f + fabsf(c.out[i])));
    free(unscaled);
    teardown_ctx(&c);
    setup(&c, 2, 12, 12, 2, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 32);
    c.a.unscaled = 1;
    for (size_t i = 0; i < (size_t)2 * 12 * c.C; i++)
        c.q[i] *= 0.25f;
    use_t5(&c, 8, 12, 0);
    check_both(&c);
    teardown_ctx(&c);
}

/* Everything at once through both implementations: equal to rounding. */
static void test_paths_agree(void **state)
{
    (void)state;
    float slopes[2];
    tfm_alibi_slopes(slopes, 2);
    static const int key_len[2] = {37, 30};
    int ds[2 * 37];
    docs(ds, 37, (const int[]){0, 17, 33}, 3);
    docs(ds + 37, 37, (const int[]){0, 3}, 2);
    struct ctx c;
    setup(&c, 2, 37, 37, 2, 16, TFM_MASK_CAUSAL, key_len, 0.1f, 19);
    c.a.alibi = slopes;
    c.a.doc_start = ds;
    use_t5(&c, 16, 20, 0);
    size_t nq = (size_t)2 * 37 * c.C, nkv = (size_t)2 * 37 * 2 * c.C, nt = 2 * 16;
    size_t natt = (size_t)2 * 2 * 37 * 37;
    float *res[2][5];
    for (int path = 0; path < 2; path++) {
        c.a.impl = path ? TFM_ATTN_BLAS : TFM_ATTN_FUSED;
        float *dq = calloc(nq, sizeof(float)), *dkv = calloc(nkv, sizeof(float));
        memset(c.dtable, 0, nt * sizeof(float));
        attn_loss(&c);
        tfm_attn_backward(&c.a, dq, c.C, dkv, 2 * c.C, dkv + c.C, 2 * c.C, c.r, c.C, c.att,
                          c.q, c.C, c.kv, 2 * c.C, c.kv + c.C, 2 * c.C, c.scratch);
        res[path][0] = malloc(nq * sizeof(float));
        memcpy(res[path][0], c.out, nq * sizeof(float));
        res[path][1] = malloc(natt * sizeof(float));
        memcpy(res[path][1], c.att, natt * sizeof(float));
        res[path][2] = dq;
        res[path][3] = dkv;
        res[path][4] = malloc(nt * sizeof(float));
        memcpy(res[path][4], c.dtable, nt * sizeof(float));
    }
    size_t len[5] = {nq, natt, nq, nkv, nt};
    for (int t = 0; t < 5; t++) {
        for (size_t i = 0; i < len[t]; i++)
            assert_true(fabsf(res[0][t][i] - res[1][t][i]) <=
                        1e-5f * (1.0f + fabsf(res[1][t][i])));
        free(res[0][t]);
        free(res[1][t]);
    }
    teardown_ctx(&c);
}

/* The tiled forward (no P kept) against the double reference and against
 * the one-pass path, over tile boundaries (64 queries, 256 keys), under
 * every mask with padding, packed documents, ALiBi, T5 and grouped heads,
 * with a query block appended to a cache (Tq < Tk), on one thread and two. */
static void test_tiled(void **state)
{
    (void)state;
    float slopes[4];
    tfm_alibi_slopes(slopes, 4);
    static const int key_len[2] = {300, 211}, none_len[2] = {290, 0}, prefix_len[2] = {100, 5};
    int ds[2 * 300];
    docs(ds, 300, (const int[]){0, 65, 257}, 3);
    docs(ds + 300, 300, (const int[]){0, 3}, 2);
#ifdef _OPENMP
    int saved = omp_get_max_threads();
#endif
    for (int threads = 1; threads <= 2; threads++) {
#ifdef _OPENMP
        omp_set_num_threads(threads);
#endif
        for (int k = 0; k < 4; k++) {
            struct ctx c;
            if (k == 0) { /* causal, padded, packed, ALiBi and T5 */
                setup(&c, 2, 300, 300, 2, 16, TFM_MASK_CAUSAL, key_len, 0.0f, 41);
                c.a.alibi = slopes;
                c.a.doc_start = ds;
                use_t5(&c, 16, 40, 0);
            } else if (k == 1) { /* 70 new queries over 600 keys, one k/v head */
                setup(&c, 1, 70, 600, 4, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 42);
                use_kv_heads(&c, 1, 43);
            } else if (k == 2) { /* encoder: bidirectional T5, a sequence of no keys */
                setup(&c, 2, 290, 290, 2, 32, TFM_MASK_NONE, none_len, 0.0f, 44);
                use_t5(&c, 32, 128, 1);
            } else { /* prefix LM, two heads per k/v head */
                setup(&c, 2, 280, 280, 4, 16, TFM_MASK_PREFIX, NULL, 0.0f, 45);
                c.a.prefix_len = prefix_len;
                use_kv_heads(&c, 2, 46);
            }
            size_t nq = (size_t)c.a.B * c.a.Tq * c.C;
            c.a.impl = TFM_ATTN_BLAS;
            ready(&c);
            attn_loss(&c);
            float *one = malloc(nq * sizeof(float));
            memcpy(one, c.out, nq * sizeof(float));
            c.a.impl = TFM_ATTN_TILED;
            ready(&c);
            free(c.att);
            c.att = NULL;
            check_forward(&c);
            for (size_t i = 0; i < nq; i++)
                assert_true(fabsf(c.out[i] - one[i]) <= 1e-5f * (1.0f + fabsf(one[i])));
            if (k == 2)
                for (size_t i = nq / 2; i < nq; i++)
                    assert_true(c.out[i] == 0.0f);
            free(one);
            teardown_ctx(&c);
        }
    }
#ifdef _OPENMP
    omp_set_num_threads(saved);
#endif
}

/* Grouped-query attention, 4 query heads over 2 and over 1 (multi-query)
 * key/value heads: the forward (whole sequences and tfm_attn_row) against
 * the double reference, the gradients (dk, dv summed over each group's
 * query heads) against finite differences, under the causal, prefix and
 * padded full masks, with ALiBi, T5 and dropout; and the same numbers as
 * ungrouped attention over k and v replicated to every query head, the
 * gradients of the copies summed over the group. */
static void test_grouped(void **state)
{
    (void)state;
    float slopes[4];
    tfm_alibi_slopes(slopes, 4);
    static const int key_len[2] = {11, 6}, prefix[2] = {4, 9};
    for (int NKV = 2; NKV >= 1; NKV--) {
        struct ctx c;
        /* causal self-attention, a head size of the fused loops */
        setup(&c, 2, 9, 9, 4, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 40);
        use_kv_heads(&c, NKV, 41);
        check_both(&c);
        check_row(&c);
        /* prefix-LM with ALiBi, then T5 with dropout */
        c.a.mask = TFM_MASK_PREFIX;
        c.a.prefix_len = prefix;
        c.a.alibi = slopes;
        ready(&c);
        check_both(&c);
        check_row(&c);
        c.a.alibi = NULL;
        use_t5(&c, 8, 12, 0);
        check_both(&c);
        c.a.dropout = 0.1f;
        check_backward(&c);
        teardown_ctx(&c);
        /* cross-attention over padded keys, a head size of BLIS's path */
        setup(&c, 2, 3, 11, 4, 8, TFM_MASK_NONE, key_len, 0.0f, 42);
        use_kv_heads(&c, NKV, 43);
        check_both(&c);
        check_row(&c);
        teardown_ctx(&c);

        /* against the replicated keys and values */
        struct ctx g, r;
        setup(&g, 2, 13, 13, 4, 16, TFM_MASK_CAUSAL, NULL, 0.1f, 44);
        use_kv_heads(&g, NKV, 45);
        setup(&r, 2, 13, 13, 4, 16, TFM_MASK_CAUSAL, NULL, 0.1f, 44);
        const int B = 2, T = 13, HS = 16, NH = 4, G = NH / NKV;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int h = 0; h < NH; h++)
                    for (int p = 0; p < 2; p++) /* k, v */
                        memcpy(r.kv + ((size_t)b * T + t) * 2 * r.CK + p * r.CK + h * HS,
                               g.kv + ((size_t)b * T + t) * 2 * g.CK + p * g.CK + (h / G) * HS,
                               HS * sizeof(float));
        size_t nq = (size_t)B * T * g.C, ng = (size_t)B * T * 2 * g.CK;
        size_t nr = (size_t)B * T * 2 * r.CK;
        float *dqg = calloc(nq, sizeof(float)), *dqr = calloc(nq, sizeof(float));
        float *dkvg = calloc(ng, sizeof(float)), *dkvr = calloc(nr, sizeof(float));
        attn_loss(&g);
        tfm_attn_backward(&g.a, dqg, g.C, dkvg, 2 * g.CK, dkvg + g.CK, 2 * g.CK, g.r, g.C,
                          g.att, g.q, g.C, g.kv, 2 * g.CK, g.kv + g.CK, 2 * g.CK, g.scratch);
        attn_loss(&r);
        tfm_attn_backward(&r.a, dqr, r.C, dkvr, 2 * r.CK, dkvr + r.CK, 2 * r.CK, r.r, r.C,
                          r.att, r.q, r.C, r.kv, 2 * r.CK, r.kv + r.CK, 2 * r.CK, r.scratch);
        assert_memory_equal(g.out, r.out, nq * sizeof(float));
        assert_memory_equal(dqg, dqr, nq * sizeof(float));
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int p = 0; p < 2; p++)
                    for (int kh = 0; kh < NKV; kh++)
                        for (int e = 0; e < HS; e++) {
                            float sum = 0.0f; /* in the group's order */
                            for (int j = 0; j < G; j++)
                                sum += dkvr[((size_t)b * T + t) * 2 * r.CK + p * r.CK +
                                            (kh * G + j) * HS + e];
                            assert_true(dkvg[((size_t)b * T + t) * 2 * g.CK + p * g.CK +
                                             kh * HS + e] == sum);
                        }
        free(dqg); free(dqr); free(dkvg); free(dkvr);
        teardown_ctx(&g);
        teardown_ctx(&r);
    }
}

/* dtable is summed in a fixed order: the same bits for any thread count;
 * and backward adds to it. */
static void test_t5_deterministic(void **state)
{
    (void)state;
    struct ctx c;
    setup(&c, 5, 17, 17, 3, 16, TFM_MASK_CAUSAL, NULL, 0.0f, 20);
    use_t5(&c, 16, 32, 0);
    size_t nq = (size_t)5 * 17 * c.C, nkv = (size_t)5 * 17 * 2 * c.C, nt = 3 * 16;
    float *dq = calloc(nq, sizeof(float)), *dkv = calloc(nkv, sizeof(float));
    float first[3 * 16];
#ifdef _OPENMP
    int saved = omp_get_max_threads();
    const int threads[] = {1, 2, 3, 4};
#else
    const int threads[] = {1};
#endif
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
#ifdef _OPENMP
        omp_set_num_threads(threads[t]);
#endif
        ready(&c);
        attn_loss(&c);
        memset(c.dtable, 0, nt * sizeof(float));
        tfm_attn_backward(&c.a, dq, c.C, dkv, 2 * c.C, dkv + c.C, 2 * c.C, c.r, c.C, c.att,
                          c.q, c.C, c.kv, 2 * c.C, c.kv + c.C, 2 * c.C, c.scratch);
        if (t == 0)
            memcpy(first, c.dtable, sizeof first);
        else
            assert_memory_equal(first, c.dtable, sizeof first);
    }
#ifdef _OPENMP
    omp_set_num_threads(saved);
    ready(&c);
#endif
    /* a second backward adds the same gradient again */
    tfm_attn_backward(&c.a, dq, c.C, dkv, 2 * c.C, dkv + c.C, 2 * c.C, c.r, c.C, c.att, c.q,
                      c.C, c.kv, 2 * c.C, c.kv + c.C, 2 * c.C, c.scratch);
    double norm = 0;
    for (size_t i = 0; i < nt; i++) {
        assert_true(fabsf(c.dtable[i] - 2.0f * first[i]) <= 1e-6f * (1.0f + fabsf(first[i])));
        norm += fabs(first[i]);
    }
    assert_true(norm > 0);
    free(dq);
    free(dkv);
    teardown_ctx(&c);
}

/* The paper's slopes: 2^(-8k/n) for n a power of two; for 12, those of 8
 * then the odd k of 16's, 2^(-k/2) for k = 1, 3, 5, 7. */
static void test_alibi_slopes(void **state)
{
    (void)state;
    static const double s8[8] = {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125,
                                 0.00390625};
    static const double s12[12] = {0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125,
                                   0.00390625, 0.7071067811865476, 0.3535533905932738,
                                   0.1767766952966369, 0.08838834764831845};
    float s[12];
    tfm_alibi_slopes(s, 8);
    for (int i = 0; i < 8; i++)
        assert_true(fabs(s[i] - s8[i]) <= 1e-7 * s8[i]);
    tfm_alibi_slopes(s, 12);
    for (int i = 0; i < 12; i++)
        assert_true(fabs(s[i] - s12[i]) <= 1e-7 * s12[i]);
    /* 4 heads: 2^-2, 2^-4, 2^-6, 2^-8 */
    tfm_alibi_slopes(s, 4);
    assert_true(s[0] == 0.25f && s[1] == 0.0625f && s[2] == 0.015625f && s[3] == 0.00390625f);
}

/* Buckets of T5's default (32 buckets, max distance 128), worked out by hand
 * from HF's formula: distances n below max_exact are their own bucket; above,
 * max_exact + floor(log(n / max_exact) / log(128 / max_exact) · (nb -
 * max_exact)), capped at nb - 1.  Each row: first n of the bucket. */
static int hand_bucket(int rel, int bidirectional)
{
    /* bidirectional: 16 buckets a side, exact below 8, then 2·log2(n/8) */
    static const int bi_first[][2] = {{8, 8}, {12, 9}, {16, 10}, {23, 11}, {32, 12},
                                      {46, 13}, {64, 14}, {91, 15}};
    /* causal: 32 buckets for n = -rel, exact below 16, then
     * 16·log8(n/16): 16·8^(k/16) = 18.2, 20.7, 23.6, 26.9, ... */
    static const int ca_first[][2] = {{16, 16}, {19, 17}, {21, 18}, {24, 19}, {27, 20},
                                      {31, 21}, {35, 22}, {40, 23}, {46, 24}, {52, 25},
                                      {59, 26}, {67, 27}, {77, 28}, {87, 29}, {99, 30},
                                      {113, 31}};
    int n, base = 0, b = -1;
    if (bidirectional) {
        base = rel > 0 ? 16 : 0;
        n = abs(rel);
        if (n < 8)
            return base + n;
        for (size_t k = 0; k < sizeof bi_first / sizeof *bi_first; k++)
            if (n >= bi_first[k][0])
                b = bi_first[k][1];
    } else {
        n = rel < 0 ? -rel : 0;
        if (n < 16)
            return n;
        for (size_t k = 0; k < sizeof ca_first / sizeof *ca_first; k++)
            if (n >= ca_first[k][0])
                b = ca_first[k][1];
    }
    return base + b;
}

static void test_t5_bucket(void **state)
{
    (void)state;
    for (int rel = -300; rel <= 300; rel++) {
        assert_int_equal(tfm_t5_bucket(rel, 1, 32, 128), hand_bucket(rel, 1));
        assert_int_equal(tfm_t5_bucket(rel, 0, 32, 128), hand_bucket(rel, 0));
    }
    /* spot values: the boundaries either side of each power of two */
    assert_int_equal(tfm_t5_bucket(-15, 1, 32, 128), 9);
    assert_int_equal(tfm_t5_bucket(-16, 1, 32, 128), 10);
    assert_int_equal(tfm_t5_bucket(63, 1, 32, 128), 29);
    assert_int_equal(tfm_t5_bucket(64, 1, 32, 128), 30);
    assert_int_equal(tfm_t5_bucket(90, 1, 32, 128), 30);
    assert_int_equal(tfm_t5_bucket(91, 1, 32, 128), 31);
    assert_int_equal(tfm_t5_bucket(100000, 1, 32, 128), 31);
    assert_int_equal(tfm_t5_bucket(-128, 0, 32, 128), 31);
    assert_int_equal(tfm_t5_bucket(5, 0, 32, 128), 0);
    /* the small tables of the tests above: 8 buckets, max distance 12;
     * bidirectional: exact below 2, then 2 + floor(log(n/2)/log 6 · 2) */
    static const int bi8[] = {0, 1, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3};
    for (int n = 0; n < 14; n++) {
        assert_int_equal(tfm_t5_bucket(-n, 1, 8, 12), bi8[n]);
        assert_int_equal(tfm_t5_bucket(n, 1, 8, 12), n ? 4 + bi8[n] : 0);
    }
    /* causal: exact below 4, then 4 + floor(log(n/4)/log 3 · 4) */
    static const int ca8[] = {0, 1, 2, 3, 4, 4, 5, 6, 6, 6, 7, 7, 7, 7};
    for (int n = 0; n < 14; n++)
        assert_int_equal(tfm_t5_bucket(-n, 0, 8, 12), ca8[n]);
}

int main(void)
{
    tfm_blas_init(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_causal_self),
        cmocka_unit_test(test_cross_padding),
        cmocka_unit_test(test_causal_cache_alignment),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_prefix),
        cmocka_unit_test(test_packed),
        cmocka_unit_test(test_alibi),
        cmocka_unit_test(test_t5),
        cmocka_unit_test(test_combined),
        cmocka_unit_test(test_row),
        cmocka_unit_test(test_paths_agree),
        cmocka_unit_test(test_unscaled),
        cmocka_unit_test(test_t5_deterministic),
        cmocka_unit_test(test_grouped),
        cmocka_unit_test(test_tiled),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_alibi_slopes),
        cmocka_unit_test(test_t5_bucket),
    };
    /* both implementations: the fused loops and the per-head BLIS products */
    forced = TFM_ATTN_FUSED;
    int failed = cmocka_run_group_tests_name("fused", tests, NULL, NULL);
    forced = TFM_ATTN_BLAS;
    failed += cmocka_run_group_tests_name("blas", tests, NULL, NULL);
    return failed;
}
