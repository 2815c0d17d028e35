/* Sampling: each filter on distributions whose answer is known by hand, and
 * the drawn frequencies against the filtered distribution (chi-square). */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "infer/sample.h"

static void random_logits(tfm_rng *r, float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = scale * tfm_rng_normal(r);
}

/* logits = log(p), so softmax gives p back */
static void logits_of(const double *p, float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)log(p[i]);
}

static void test_argmax_ties(void **state)
{
    float x[] = {1, 3, 2, 3, -1};
    assert_int_equal(tfm_argmax(x, 5), 1);
    float y[] = {-INFINITY, -INFINITY, -5};
    assert_int_equal(tfm_argmax(y, 3), 2);
}

static void test_log_softmax(void **state)
{
    float x[] = {1000, 1001, 999, -INFINITY}, out[4];
    tfm_log_softmax(x, 4, out);
    double s = 0;
    for (int i = 0; i < 4; i++)
        s += exp(out[i]);
    assert_true(fabs(s - 1) < 1e-6);
    assert_true(fabs(out[1] - out[0] - 1) < 1e-5);
    assert_true(isinf(out[3]) && out[3] < 0);
}

static void test_top_k_1_is_greedy(void **state)
{
    enum { V = 5000 };
    static float x[V];
    tfm_rng r;
    tfm_rng_seed(&r, 1);
    tfm_sample_opts o;
    tfm_sample_opts_default(&o);
    o.top_k = 1;
    tfm_sampler s;
    assert_int_equal(tfm_sampler_init(&s, &o, V, 7, NULL), 0);
    for (int trial = 0; trial < 50; trial++) {
        random_logits(&r, x, V, 2.0f);
        assert_int_equal(tfm_sampler_sample(&s, x, NULL, 0), tfm_argmax(x, V));
    }
    tfm_sampler_free(&s);
}

static void test_top_k_keeps_k_best(void **state)
{
    enum { V = 3000 };
    static float x[V];
    tfm_rng r;
    tfm_rng_seed(&r, 2);
    random_logits(&r, x, V, 1.0f);
    x[17] = x[18] = 50; /* a tie at the top */
    tfm_sample_opts o;
    tfm_sample_opts_default(&o);
    o.top_k = 40;
    tfm_sampler s;
    assert_int_equal(tfm_sampler_init(&s, &o, V, 1, NULL), 0);
    size_t n = tfm_sampler_dist(&s, x, NULL, 0);
    assert_int_equal(n, 40);
    /* the 40th largest logit by brute force: every kept one >= it, every
     * dropped one <= it */
    float kth;
    {
        static float sorted[V];
        memcpy(sorted, x, sizeof sorted);
        for (size_t i = 0; i < 40; i++) {
            size_t b = i;
            for (size_t j = i + 1; j < V; j++)
                if (sorted[j] > sorted[b])
                    b = j;
            float t = sorted[i]; sorted[i] = sorted[b]; sorted[b] = t;
        }
        kth = sorted[39];
    }
    assert_int_equal(s.cand[0].id, 17);
    assert_int_equal(s.cand[1].id, 18);
    static uint8_t kept[V];
    memset(kept, 0, sizeof kept);
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(x[s.cand[i].id] >= kth);
        if (i)
            assert_true(s.cand[i].p <= s.cand[i - 1].p);
        kept[s.cand[i].id] = 1;
        sum += s.cand[i].p;
    }
    for (size_t i = 0; i < V; i++)
        if (!kept[i])
            assert_true(x[i] <= kth);
    assert_true(fabs(sum - 1) < 1e-5);
    tfm_sampler_free(&s);
}

static size_t nucleus(const double *p, size_t n, double P, tfm_sampler *s, float *x)
{
    logits_of(p, x, n);
    s->opts.top_p = (float)P;
    return tfm_sampler_dist(s, x, NULL, 0);
}

static void test_top_p_smallest_nucleus(void **state)
{
    float x[8];
    tfm_sample_opts o;
    tfm_sample_opts_default(&o);
    tfm_sampler s;
    assert_int_equal(tfm_sampler_init(&s, &o, 4, 1, NULL), 0);
    /* given out of order on purpose */
    const double p[] = {0.2, 0.4, 0.1, 0.3};
    assert_int_equal(nucleus(p, 4, 0.39, &s, x), 1);
    assert_int_equal(s.cand[0].id, 1);
    assert_int_equal(nucleus(p, 4, 0.4, &s, x), 1);    /* reaches exactly */
    assert_int_equal(nucleus(p, 4, 0.5, &s, x), 2);
    assert_int_equal(nucleus(p, 4, 0.7, &s, x), 2);    /* 0.4 + 0.3 reaches 0.7 */
    assert_int_equal(nucleus(p, 4, 0.71, &s, x), 3);
    assert_int_equal(s.cand[2].id, 0);
    assert_int_equal(nucleus(p, 4, 0.9, &s, x), 3);
    assert_int_equal(nucleus(p, 4, 0.95, &s, x), 4);
    assert_int_equal(nucleus(p, 4, 1.0, &s, x), 4);
    assert_int_equal(nucleus(p, 4, 1e-6, &s, x), 1);
    /* renormalised over the nucleus */
    nucleus(p, 4, 0.5, &s, x);
    assert_true(fabs(s.cand[0].p - 4.0 / 7) < 1e-6);
    assert_true(fabs(s.cand[1].p - 3.0 / 7) < 1e-6);
    /* ties: four equal tokens, P = 0.5 keeps two, the lower ids */
    const double q[] = {0.25, 0.25, 0.25, 0.25};
    assert_int_equal(nucleus(q, 4, 0.5, &s, x), 2);
    assert_int_equal(s.cand[0].id, 0);
    assert_int_equal(s.cand[1].id, 1);
    assert_int_equal(nucleus(q, 4, 0.51, &s, x), 3);
    tfm_sampler_free(&s);
}

/* A large vocabulary exercises the threshold shortcut; the answer comes
 * from a plain sort in double precision. */
static int cmp_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void test_top_p_large_vocab(void **state)
{
    enum { V = 20000 };
    static float x[V];
    static double p[V];
    tfm_rng r;
    tfm_rng_seed(&r, 3);
    tfm_sample_opts o;
    tfm_sample_opts_default(&o);
    tfm_sampler s;
    assert_int_equal(tfm_sampler_init(&s, &o, V, 1, NULL), 0);
    const float scales[] = {0.5f, 3.0f, 8.0f};
    const double Ps[] = {0.3, 0.9, 0.99, 0.999};
    for (size_t si = 0; si < 3; si++)
        for (size_t pi = 0; pi < 4; pi++) {
            random_logits(&r, x, V, scales[si]);
            double mx = x[tfm_argmax(x, V)], z = 0;
            for (size_t i = 0; i < V; i++)
                z += p[i] = exp((double)x[i] - mx);
            for (size_t i = 0; i < V; i++)
                p[i] /= z;
            qsort(p, V, sizeof *p, cmp_desc);
            size_t want = 0;
            double cum = 0;
            while (want < V && cum < Ps[pi] * (1 - 1e-6))
                cum += p[want++];
            s.opts.top_p = (float)Ps[pi];
            size_t got = tfm_sampler_dist(&s, x, NULL, 0);
            /* float rounding may move the boundary by one token at most
             * when two cumulative sums straddle P within 1e-6 */
            assert_true(got == want || (got + 1 == want || got == want + 1));
            for (size_t i = 1; i < got; i++)
                assert_true(s.cand[i].p <= s.cand[i - 1].p);
        }
    tfm_sampler_free(&s);
}

static void test_min_p(void **state)
{
    const double p[] = {0.5, 0.2, 0.05, 0.25};
    float x[4];
    logits_of(p, x, 4);
    tfm_sample_opts o;
    tfm_sample_opts_default(&o);
    o.min_p = 0.38f; /* floor 0.19: keeps 0.5, 0.25, 0.2 */
    tfm_sampler s;
    assert_int_equal(tfm_sampler_init(&s, &o, 4, 1, NULL), 0);
    size_t n = tfm_sampler_dist(&s, x, NULL, 0);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++)
        assert_int_not_equal(s.cand[i].id, 2);
    s.opts.min_p = 0.6f; /* floor 0.3: only the top one */
    assert_int_equal(tfm_sampler_dist(&s, x, NULL, 0), 1);
    assert_int_equal(s.cand[0].id, 0);
    tfm_sampler_free(&s);
}

static void test_repeat_penalty(void **state)
{
    float x[] = {2, -2, 1, 0.5f, -1};
    uint8_t seen[5] = {0};
    const uint32_t prev[] = {0, 1, 0, 0, 1, 99};
    tfm_repeat_penalty(x, 5, prev, 6, 2.0f, seen);
    assert_true(x[0] == 1.0f);   /* positive: divided, once */
    assert_true(x[1] == -4.0f);  /* negative: multiplied, once */
    assert_true(x[2] == 1.0f && x[3] == 0.5f && x[4] == -1.0f);
    for (int i = 0; i < 5; i++)
        assert_int_equal(seen[i], 0);

    /* through the sampler: a penalised argmax loses to the runner-up,
     * and only within the last N tokens */
    float y[] = {3, 2.5f, 0};
    tfm_sample_opts o;
    tfm_sample_opts_default(&o);
    o.temperature = 0;
    o.repeat_penalty = 1.5f;
    tfm_sampler s;
    assert_int_equal(tfm_sampler_init(&s, &o, 3, 1, NULL), 0);
    const uint32_t hist[] = {0, 2, 2};
    assert_int_equal(tfm_sampler_sample(&s, y, hist, 3), 1);
    s.opts.repeat_last_n = 2;
    assert_int_equal(tfm_sampler_sample(&s, y, hist, 3), 0);
    assert_true(y[0] == 3); /* the caller's logits are untouched */
    tfm_sampler_free(&s);
}

static void test_temperature_to_zero(void **state)
{
    enum { V = 50 };
    float x[V];
    tfm_rng r;
    tfm_rng_seed(&r, 4);
    random_logits(&r, x, V, 1.0f);
    uint32_t best = tfm_argmax(x, V);
    tfm_sample_opts o;
    tfm_sample_opts_default(&o);
    tfm_sampler s;
    assert_int_equal(tfm_sampler_init(&s, &o, V, 9, NULL), 0);
    /* the probability of the argmax grows as T falls, reaching 1 */
    double last = 0;
    const float ts[] = {2, 1, 0.5f, 0.2f, 0.05f, 0.01f};
    for (size_t i = 0; i < 6; i++) {
        s.opts.temperature = ts[i];
        size_t n = tfm_sampler_dist(&s, x, NULL, 0);
        double pb = 0;
        for (size_t j = 0; j < n; j++)
            if (s.cand[j].id == best)
                pb = s.cand[j].p;
        assert_true(pb > last);
        last = pb;
    }
    assert_true(last > 0.999);
    s.opts.temperature = 0.001f;
    for (int i = 0; i < 200; i++)
        assert_int_equal(tfm_sampler_sample(&s, x, NULL, 0), best);
    s.opts.temperature = 0;
    assert_int_equal(tfm_sampler_sample(&s, x, NULL, 0), best);
    tfm_sampler_free(&s);
}

static void draw_many(uint64_t seed, const float *x, size_t V, uint32_t *out, size_t n)
{
    tfm_sample_opts o;
    tfm_sample_opts_default(&o);
    o.top_k = 20;
    o.top_p = 0.95f;
    tfm_sampler s;
    assert_int_equal(tfm_sampler_init(&s, &o, (uint32_t)V, seed, NULL), 0);
    for (size_t i = 0; i < n; i++)
        out[i] = tfm_sampler_sample(&s, x, out, i);
    tfm_sampler_free(&s);
}

static void test_seed_repeatable(void **state)
{
    enum { V = 100, N = 64 };
    float x[V];
    tfm_rng r;
    tfm_rng_seed(&r, 5);
    random_logits(&r, x, V, 0.5f);
    uint32_t a[N], b[N], c[N];
    draw_many(42, x, V, a, N);
    draw_many(42, x, V, b, N);
    draw_many(43, x, V, c, N);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
}

/* Draws N tokens and compares the counts with the distribution computed
 * here by hand from the documented order of the filters. */
static void test_chi_square(void **state)
{
    enum { V = 8 };
    const float x[V] = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, 3.0f, -2.0f};
    const uint32_t prev[] = {6, 6, 1};
    tfm_sample_opts o;
    tfm_sample_opts_default(&o);
    o.repeat_penalty = 1.5f; /* 6: 3 -> 2; 1: 2 -> 1.3333 */
    o.temperature = 0.7f;
    o.top_k = 6;             /* drops 3 (-1) and 7 (-2) */
    o.top_p = 0.9f;
    o.min_p = 0.05f;

    /* expected, step by step in double */
    double y[V];
    for (int i = 0; i < V; i++)
        y[i] = x[i];
    y[6] = 3.0 / 1.5;
    y[1] = 2.0 / 1.5;
    double p[V], z = 0;
    int keep[V] = {0};
    for (int i = 0; i < V; i++)
        z += p[i] = exp(y[i] / 0.7);
    for (int i = 0; i < V; i++)
        p[i] /= z;
    /* order by p: 6 (2.0), 4 (1.5), 1 (1.333), 0 (1.0), 2 (0.5), 5 (0.0) */
    const int order[] = {6, 4, 1, 0, 2, 5};
    double kept_mass = 0;
    for (int k = 0; k < 6; k++)
        kept_mass += p[order[k]];
    double cum = 0;
    int nk = 0;
    while (nk < 6 && cum < 0.9 * kept_mass)
        cum += p[order[nk++]];
    for (int k = 0; k < nk; k++)
        if (p[order[k]] >= 0.05 * p[6])
            keep[order[k]] = 1;
    double q[V], zq = 0;
    for (int i = 0; i < V; i++)
        zq += q[i] = keep[i] ? p[i] : 0;
    int df = -1;
    for (int i = 0; i < V; i++) {
        q[i] /= zq;
        df += keep[i];
    }
    assert_true(df >= 2); /* the case is not degenerate */

    enum { N = 40000 };
    long count[V] = {0};
    tfm_sampler s;
    assert_int_equal(tfm_sampler_init(&s, &o, V, 2024, NULL), 0);
    for (int i = 0; i < N; i++)
        count[tfm_sampler_sample(&s, x, prev, 3)]++;
    tfm_sampler_free(&s);
    double chi2 = 0;
    for (int i = 0; i < V; i++) {
        if (!keep[i]) {
            assert_int_equal(count[i], 0);
            continue;
        }
        double e = q[i] * N;
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    /* 99.9th percentile of chi-square with df <= 5 is < 20.6; a wrong
     * order of filters shifts frequencies by far more at N = 40000 */
    assert_true(chi2 < 20.6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_argmax_ties),
        cmocka_unit_test(test_log_softmax),
        cmocka_unit_test(test_top_k_1_is_greedy),
        cmocka_unit_test(test_top_k_keeps_k_best),
        cmocka_unit_test(test_top_p_smallest_nucleus),
        cmocka_unit_test(test_top_p_large_vocab),
        cmocka_unit_test(test_min_p),
        cmocka_unit_test(test_repeat_penalty),
        cmocka_unit_test(test_temperature_to_zero),
        cmocka_unit_test(test_seed_repeatable),
        cmocka_unit_test(test_chi_square),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
