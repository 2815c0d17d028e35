/* Adam/AdamW against hand-computed numbers and a textbook double-precision
 * implementation; clipping; schedules against their formulas. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/err.h"
#include "base/rng.h"
#include "train/optim.h"
#include "train/schedule.h"

static tfm_param two_params[2] = {
    {.name = "w", .ndim = 2, .shape = {2, 2}, .offset = 0, .numel = 4, .decay = 1},
    {.name = "b", .ndim = 1, .shape = {2, 0}, .offset = 4, .numel = 2, .decay = 0},
};

static void test_adamw_first_step_by_hand(void **state)
{
    (void)state;
    float p[6] = {1, 1, 1, 1, 1, 1};
    float g[6] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    tfm_adam o;
    tfm_adam_init(&o, 6, 1, 0.9, 0.999, 1e-8, 0.1);
    tfm_adam_step(&o, p, g, two_params, 2, 0.1, 1.0f);
    /* decay: p = 1·(1 - 0.1·0.1) = 0.99; m̂ = 0.5, v̂ = 0.25 → step 0.1·0.5/0.5 */
    assert_float_equal(p[0], 0.89f, 1e-6);
    /* no decay on the bias */
    assert_float_equal(p[4], 0.9f, 1e-6);
    assert_float_equal(o.m[0], 0.05f, 1e-7);
    assert_float_equal(o.v[0], 0.00025f, 1e-10);
    assert_int_equal(o.t, 1);
    tfm_adam_free(&o);
}

/* Textbook Adam(W) in double: m̂ = m/(1-β1^t), v̂ = v/(1-β2^t),
 * p -= lr·m̂/(√v̂ + ε·... ) in PyTorch's ε placement. */
static void reference(double *p, double *m, double *v, const double *g, int n, int t,
                      int decoupled, const int *decay, double lr, double b1, double b2,
                      double eps, double wd)
{
    for (int i = 0; i < n; i++) {
        double gi = g[i];
        if (decay[i]) {
            if (decoupled)
                p[i] -= lr * wd * p[i];
            else
                gi += wd * p[i];
        }
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        double mh = m[i] / (1 - pow(b1, t)), vh = v[i] / (1 - pow(b2, t));
        p[i] -= lr * mh / (sqrt(vh) + eps);
    }
}

/* 37 = two 16-wide vector blocks of decaying weights and a scalar tail that
 * crosses into the non-decaying slice. */
static tfm_param ref_params[2] = {
    {.name = "w", .ndim = 2, .shape = {4, 8}, .offset = 0, .numel = 32, .decay = 1},
    {.name = "b", .ndim = 1, .shape = {5, 0}, .offset = 32, .numel = 5, .decay = 0},
};

/* Tensors larger than the optimizer's chunks, whose chunks straddle tensor
 * boundaries, with a padding gap (left alone) before the last. */
static tfm_param big_params[3] = {
    {.name = "a", .ndim = 2, .shape = {100, 200}, .offset = 0, .numel = 20000, .decay = 1},
    {.name = "b", .ndim = 1, .shape = {30001, 0}, .offset = 20000, .numel = 30001, .decay = 0},
    {.name = "c", .ndim = 2, .shape = {7, 7143}, .offset = 50016, .numel = 50001, .decay = 1},
};

static void run_vs_reference(int decoupled, const tfm_param *table, int n_table, int steps)
{
    const tfm_param *last = &table[n_table - 1];
    const int N = (int)(last->offset + last->numel);
    tfm_rng r;
    tfm_rng_seed(&r, 7);
    float *p = calloc((size_t)N, sizeof *p), *g = calloc((size_t)N, sizeof *g);
    double *pd = calloc((size_t)N, sizeof *pd), *md = calloc((size_t)N, sizeof *md);
    double *vd = calloc((size_t)N, sizeof *vd), *gd = calloc((size_t)N, sizeof *gd);
    int *decay = calloc((size_t)N, sizeof *decay), *used = calloc((size_t)N, sizeof *used);
    for (int t = 0; t < n_table; t++)
        for (size_t i = 0; i < table[t].numel; i++) {
            decay[table[t].offset + i] = table[t].decay;
            used[table[t].offset + i] = 1;
        }
    for (int i = 0; i < N; i++)
        pd[i] = p[i] = tfm_rng_normal(&r);
    tfm_adam o;
    tfm_adam_init(&o, (size_t)N, decoupled, 0.9, 0.99, 1e-8, 0.1);
    for (int t = 1; t <= steps; t++) {
        for (int i = 0; i < N; i++)
            gd[i] = g[i] = used[i] ? tfm_rng_normal(&r) : 0.0f;
        double lr = 1e-2 * (1 + 0.1 * (t % 3));
        tfm_adam_step(&o, p, g, table, n_table, lr, 1.0f);
        for (int i = 0; i < N; i++)
            if (!used[i])
                gd[i] = 0.0;
        reference(pd, md, vd, gd, N, t, decoupled, decay, lr, 0.9, 0.99, 1e-8, 0.1);
    }
    for (int i = 0; i < N; i++)
        if (used[i])
            assert_true(fabs(p[i] - pd[i]) <= 1e-5 * (1 + fabs(pd[i])));
    /* padding between tensors is not touched */
    tfm_rng_seed(&r, 7);
    for (int i = 0; i < N; i++) {
        float p0 = tfm_rng_normal(&r);
        if (!used[i])
            assert_true(p[i] == p0);
    }
    tfm_adam_free(&o);
    free(p);
    free(g);
    free(pd);
    free(md);
    free(vd);
    free(gd);
    free(decay);
    free(used);
}

static void test_adamw_vs_reference(void **state)
{
    (void)state;
    run_vs_reference(1, ref_params, 2, 50);
    run_vs_reference(1, big_params, 3, 5);
}

static void test_adam_l2_vs_reference(void **state)
{
    (void)state;
    run_vs_reference(0, ref_params, 2, 50);
    run_vs_reference(0, big_params, 3, 5);
}

static void test_clip(void **state)
{
    (void)state;
    float g[2] = {3, 4};
    double norm = tfm_grad_clip(g, 2, 1.0);
    assert_float_equal(norm, 5.0, 1e-12);
    assert_float_equal(g[0], 0.6f, 1e-6);
    assert_float_equal(g[1], 0.8f, 1e-6);
    float h[2] = {0.3f, 0.4f};
    norm = tfm_grad_clip(h, 2, 1.0);
    assert_float_equal(norm, 0.5, 1e-7);
    assert_float_equal(h[0], 0.3f, 0); /* under the limit: untouched */
    assert_float_equal(tfm_grad_clip_factor(5.0, 1.0), 1.0 / (5.0 + 1e-6), 1e-7);
    assert_float_equal(tfm_grad_clip_factor(0.5, 1.0), 1.0, 0);
    assert_float_equal(tfm_grad_clip_factor(5.0, 0), 1.0, 0);
    /* the factor folded into the step equals clipping first */
    {
        float p1[6] = {1, 2, 3, 4, 5, 6}, p2[6] = {1, 2, 3, 4, 5, 6};
        float g1[6] = {3, -4, 5, 1, 2, -2}, g2[6] = {3, -4, 5, 1, 2, -2};
        tfm_adam a1, a2;
        tfm_adam_init(&a1, 6, 1, 0.9, 0.99, 1e-8, 0.1);
        tfm_adam_init(&a2, 6, 1, 0.9, 0.99, 1e-8, 0.1);
        for (int t = 0; t < 3; t++) {
            double n1 = tfm_grad_clip(g1, 6, 1.0);
            float f = tfm_grad_clip_factor(tfm_grad_norm(g2, 6), 1.0);
            assert_float_equal(n1, tfm_grad_norm(g2, 6), 0);
            tfm_adam_step(&a1, p1, g1, two_params, 2, 0.01, 1.0f);
            tfm_adam_step(&a2, p2, g2, two_params, 2, 0.01, f);
            for (int i = 0; i < 6; i++) /* re-arm the same gradients */
                g1[i] = g2[i];
        }
        assert_memory_equal(p1, p2, sizeof p1);
        tfm_adam_free(&a1);
        tfm_adam_free(&a2);
    }
    /* Big arrays: the chunked sum equals a plain double sum. */
    size_t n = 100003;
    float *big = malloc(n * sizeof(float));
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        big[i] = (float)((i % 7) - 3) * 0.01f;
        s += (double)big[i] * big[i];
    }
    assert_float_equal(tfm_grad_norm(big, n), sqrt(s), 1e-9);
    free(big);
}

/* tfm_grad_norm_model: tfm_grad_norm's value to the bit, over tensors
 * that cross its chunks in every way, without reading a frozen tensor's
 * floats (NaN there changes nothing). */
static void test_grad_norm_model(void **state)
{
    (void)state;
    static const size_t numel[] = {20000, 37, 50000, 2 * 16384 + 5, 3, 1000, 40000, 16384, 7};
    static const int frozen[] = {1, 0, 1, 0, 1, 0, 1, 1, 0};
    enum { N = sizeof numel / sizeof *numel };
    tfm_param table[N];
    tfm_model m;
    memset(&m, 0, sizeof m);
    memset(table, 0, sizeof table);
    size_t off = 0;
    for (int i = 0; i < N; i++) {
        table[i].offset = off;
        table[i].numel = numel[i];
        table[i].frozen = frozen[i];
        off += (numel[i] + 15) & ~(size_t)15;
    }
    m.table = table;
    m.n_table = N;
    m.n_params = off;
    m.grads = tfm_pages_alloc(off * sizeof(float), 0);
    tfm_rng r;
    tfm_rng_seed(&r, 3);
    double s = 0;
    for (int i = 0; i < N; i++)
        for (size_t j = 0; j < numel[i] && !frozen[i]; j++) {
            float g = tfm_rng_normal(&r);
            m.grads[table[i].offset + j] = g;
            s += (double)g * g;
        }
    double whole = tfm_grad_norm(m.grads, off), norm = tfm_grad_norm_model(&m);
    assert_true(norm == whole);
    assert_float_equal(norm, sqrt(s), 1e-12 * sqrt(s));
    /* frozen floats (and the padding after them) are not read */
    for (int i = 0; i < N; i++) {
        size_t end = i + 1 < N ? table[i + 1].offset : off;
        for (size_t j = table[i].offset; frozen[i] && j < end; j++)
            m.grads[j] = NAN;
    }
    assert_true(isnan(tfm_grad_norm(m.grads, off)));
    assert_true(tfm_grad_norm_model(&m) == whole);
    /* nothing frozen: all of it, as tfm_grad_norm */
    for (int i = 0; i < N; i++)
        table[i].frozen = 0;
    for (size_t j = 0; j < off; j++)
        if (isnan(m.grads[j]))
            m.grads[j] = 0.5f;
    assert_true(tfm_grad_norm_model(&m) == tfm_grad_norm(m.grads, off));
    tfm_pages_free(m.grads, off * sizeof(float));
}

static void test_schedules(void **state)
{
    (void)state;
    tfm_schedule s = {.decay = TFM_CONFIG_DECAY_COSINE, .lr = 1e-3, .min_lr = 1e-4,
                      .warmup = 10, .max_steps = 110, .d_model = 128};
    assert_float_equal(tfm_schedule_lr(&s, 0), 1e-4, 1e-15);
    assert_float_equal(tfm_schedule_lr(&s, 4), 5e-4, 1e-15);
    assert_float_equal(tfm_schedule_lr(&s, 9), 1e-3, 1e-15);
    assert_float_equal(tfm_schedule_lr(&s, 10), 1e-3, 1e-15);
    assert_float_equal(tfm_schedule_lr(&s, 60), 5.5e-4, 1e-15);
    assert_float_equal(tfm_schedule_lr(&s, 35), 1e-4 + 0.9e-3 * 0.5 * (1 + cos(M_PI / 4)),
                       1e-15);
    assert_float_equal(tfm_schedule_lr(&s, 110), 1e-4, 1e-15);
    assert_float_equal(tfm_schedule_lr(&s, 500), 1e-4, 1e-15);
    s.decay = TFM_CONFIG_DECAY_LINEAR;
    assert_float_equal(tfm_schedule_lr(&s, 35), 1e-4 + 0.9e-3 * 0.75, 1e-15);
    assert_float_equal(tfm_schedule_lr(&s, 110), 1e-4, 1e-15);
    s.decay = TFM_CONFIG_DECAY_CONSTANT;
    assert_float_equal(tfm_schedule_lr(&s, 5), 6e-4, 1e-15);
    assert_float_equal(tfm_schedule_lr(&s, 100), 1e-3, 1e-15);
    /* Vaswani et al.: d^-0.5 · min(s^-0.5, s · w^-1.5), peak at s = w. */
    tfm_schedule v = {.decay = TFM_CONFIG_DECAY_INVERSE_SQRT, .lr = 1, .warmup = 4000,
                      .max_steps = 100000, .d_model = 512};
    assert_float_equal(tfm_schedule_lr(&v, 3999), pow(512, -0.5) * pow(4000, -0.5), 1e-15);
    assert_float_equal(tfm_schedule_lr(&v, 0), pow(512, -0.5) * pow(4000, -1.5), 1e-15);
    assert_float_equal(tfm_schedule_lr(&v, 15999), pow(512, -0.5) / 4000.0 * sqrt(4000) / 2,
                       1e-15);
    assert_true(tfm_schedule_lr(&v, 3998) < tfm_schedule_lr(&v, 3999));
    assert_true(tfm_schedule_lr(&v, 4000) < tfm_schedule_lr(&v, 3999));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adamw_first_step_by_hand),
        cmocka_unit_test(test_adamw_vs_reference),
        cmocka_unit_test(test_adam_l2_vs_reference),
        cmocka_unit_test(test_clip),
        cmocka_unit_test(test_grad_norm_model),
        cmocka_unit_test(test_schedules),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
