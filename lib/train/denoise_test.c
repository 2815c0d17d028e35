/* BART's noise (train/denoise.h): hand-made plans of text infilling,
 * sentence boundaries, the Poisson table, and properties of many random
 * draws. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "train/denoise.h"

enum { MASK = 99 };

static void test_poisson(void **state)
{
    (void)state;
    tfm_denoise d;
    tfm_denoise_init(&d, 0.3, 3, 0, MASK, NULL, 100, 10);
    /* P(0) = e^-3, P(0) + P(1) = 4 e^-3, the tail past the table < 1e-6 */
    assert_true(fabs(d.cdf[0] - exp(-3)) < 1e-6);
    assert_true(fabs(d.cdf[1] - 4 * exp(-3)) < 1e-6);
    assert_true(d.n_cdf > 10 && d.n_cdf < 20);
    assert_true(d.cdf[d.n_cdf - 1] == 1.0);
    tfm_rng rng;
    tfm_rng_seed(&rng, 5);
    double sum = 0, zeros = 0;
    enum { N = 200000 };
    for (int i = 0; i < N; i++) {
        size_t k = tfm_denoise_span_length(&d, &rng);
        sum += (double)k;
        zeros += k == 0;
    }
    /* mean 3 (sd of the mean sqrt(3/N) = 0.004), P(0) = 0.0498 */
    assert_true(fabs(sum / N - 3) < 0.02);
    assert_true(fabs(zeros / N - exp(-3)) < 0.003);
    /* ceil(n x ratio), 10 x 0.3 being 3 */
    assert_int_equal(tfm_denoise_budget(&d, 10), 3);
    assert_int_equal(tfm_denoise_budget(&d, 7), 3);
    assert_int_equal(tfm_denoise_budget(&d, 0), 0);
    tfm_denoise_free(&d);
    /* a large lambda is not cut at k = 0 */
    tfm_denoise_init(&d, 0.3, 40, 0, MASK, NULL, 100, 10);
    assert_true(d.n_cdf > 60 && d.cdf[20] < 0.01);
    tfm_denoise_free(&d);
}

static void test_infill_by_hand(void **state)
{
    (void)state;
    const int32_t tok[] = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
    int32_t out[16];
    tfm_denoise d;
    const unsigned char special[8] = {1, 1, 1, 1, 1, 1, 1, 0};
    tfm_denoise_init(&d, 0.3, 3, 0, MASK, special, 8, 10);
    tfm_rng rng;
    tfm_rng_seed(&rng, 1);
    /* spans of 3 at 2 and of 1 at 7: one mask each */
    {
        const size_t start[] = {2, 7}, len[] = {3, 1};
        const unsigned char rnd[] = {0, 0};
        tfm_infill_plan p = {2, 0, start, len, rnd};
        const int32_t want[] = {10, 11, MASK, 15, 16, MASK, 18, 19};
        assert_int_equal(tfm_denoise_apply(&d, tok, 10, &p, 10, &rng, out), 8);
        assert_memory_equal(out, want, sizeof want);
    }
    /* overlapping spans merge (the start at 3 is inside 1..4), a span past
     * the end is cut there; a random stand-in is the one non-special id */
    {
        const size_t start[] = {1, 3, 8}, len[] = {4, 2, 5};
        const unsigned char rnd[] = {0, 0, 1};
        tfm_infill_plan p = {3, 0, start, len, rnd};
        const int32_t want[] = {10, MASK, 15, 16, 17, 7};
        assert_int_equal(tfm_denoise_apply(&d, tok, 10, &p, 10, &rng, out), 6);
        assert_memory_equal(out, want, sizeof want);
    }
    /* two inserts: the 10 tokens in order with two masks among them, at
     * most max_out in all */
    {
        tfm_infill_plan p = {0, 2, NULL, NULL, NULL};
        long seen[12] = {0};
        for (int t = 0; t < 1200; t++) {
            assert_int_equal(tfm_denoise_apply(&d, tok, 10, &p, 12, &rng, out), 12);
            size_t k = 0;
            for (int i = 0; i < 12; i++) {
                if (out[i] == MASK)
                    seen[i]++;
                else
                    assert_int_equal(out[i], tok[k++]);
            }
            assert_int_equal(k, 10);
        }
        /* every place is taken 2/12 of the time: 200 of 1200 (sd 13) */
        for (int i = 0; i < 12; i++)
            assert_true(seen[i] > 140 && seen[i] < 260);
        assert_int_equal(tfm_denoise_apply(&d, tok, 10, &p, 11, &rng, out), 11);
        assert_int_equal(tfm_denoise_apply(&d, tok, 10, &p, 10, &rng, out), 10);
        assert_memory_equal(out, tok, sizeof tok);
    }
    tfm_denoise_free(&d);
}

static void test_sentences(void **state)
{
    (void)state;
    unsigned char is_end[10] = {0};
    is_end[1] = is_end[2] = 1; /* ".", "!" */
    size_t ends[10];
    const int32_t a[] = {3, 4, 1, 5, 1, 2, 6, 7};
    assert_int_equal(tfm_denoise_sentences(a, 8, is_end, ends), 3);
    assert_int_equal(ends[0], 3);
    assert_int_equal(ends[1], 6); /* ". !" ends one sentence */
    assert_int_equal(ends[2], 8); /* the window's last piece */
    const int32_t b[] = {1, 3, 4, 2};
    assert_int_equal(tfm_denoise_sentences(b, 4, is_end, ends), 2);
    assert_int_equal(ends[0], 1);
    assert_int_equal(ends[1], 4);
    /* the 3 sentences of a in each of the 6 orders, uniformly */
    tfm_denoise d;
    tfm_denoise_init(&d, 0.3, 3, 0, MASK, NULL, 10, 8);
    tfm_rng rng;
    tfm_rng_seed(&rng, 3);
    const int32_t *s[3] = {a, a + 3, a + 6};
    const size_t n[3] = {3, 3, 2};
    long count[6] = {0};
    for (int t = 0; t < 1800; t++) {
        int32_t out[8];
        assert_int_equal(tfm_denoise_permute(&d, a, 8, is_end, &rng, out), 3);
        static const int orders[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                         {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
        int found = -1;
        for (int o = 0; o < 6 && found < 0; o++) {
            int32_t want[8];
            size_t k = 0;
            for (int j = 0; j < 3; j++) {
                memcpy(want + k, s[orders[o][j]], n[orders[o][j]] * sizeof *want);
                k += n[orders[o][j]];
            }
            if (!memcmp(out, want, sizeof want))
                found = o;
        }
        assert_true(found >= 0);
        count[found]++;
    }
    for (int o = 0; o < 6; o++)
        assert_true(count[o] > 220 && count[o] < 380); /* 300, sd 16 */
    tfm_denoise_free(&d);
}

/* Random plans of 200 tokens: the spans' lengths add up to the budget;
 * the output is the window with runs deleted and masks standing in:
 * filling each mask with the run it hides gives the window back; every
 * run of deleted tokens has a mask; the covered share is at most the
 * budget and close to it on average (overlaps merge). */
static void test_infill_properties(void **state)
{
    (void)state;
    enum { L = 200, N = 3000 };
    int32_t tok[L], out[L];
    for (int i = 0; i < L; i++)
        tok[i] = 1000 + i;
    const double ratios[] = {0.3, 0.15, 0.5};
    for (int r = 0; r < 3; r++) {
        tfm_denoise d;
        tfm_denoise_init(&d, ratios[r], 3, 0, MASK, NULL, 2000, L);
        tfm_rng rng;
        tfm_rng_seed(&rng, 11 + (uint64_t)r);
        size_t budget = tfm_denoise_budget(&d, L);
        double covered = 0, inserts = 0, spans = 0;
        for (int t = 0; t < N; t++) {
            tfm_infill_plan p;
            tfm_denoise_plan(&d, L, &rng, &p);
            size_t sum = 0;
            for (size_t s = 0; s < p.n_spans; s++) {
                assert_true(p.len[s] >= 1 && p.start[s] < L);
                for (size_t u = 0; u < s; u++)
                    assert_true(p.start[u] != p.start[s]);
                sum += p.len[s];
            }
            assert_int_equal(sum, budget);
            inserts += (double)p.n_inserts;
            spans += (double)p.n_spans;
            size_t n = tfm_denoise_apply(&d, tok, L, &p, L, &rng, out);
            assert_true(n <= L);
            /* walk: kept tokens in order, a gap only where a mask is */
            size_t next = 0, masks = 0, kept = 0;
            for (size_t i = 0; i < n; i++) {
                if (out[i] == MASK) {
                    masks++;
                    continue;
                }
                assert_true(out[i] >= 1000 && out[i] < 1000 + L);
                size_t at = (size_t)(out[i] - 1000);
                assert_true(at >= next);
                if (at > next)
                    assert_true(masks > 0); /* the hidden run's mask */
                next = at + 1;
                masks = 0;
                kept++;
            }
            assert_true(next == L || masks > 0);
            /* covered: the deleted tokens and those a mask replaced */
            size_t gone = L - kept;
            assert_true(gone <= budget);
            covered += (double)gone;
        }
        double share = covered / N / L;
        assert_true(share <= ratios[r] + 1e-9);
        assert_true(share > 0.75 * ratios[r]);
        /* length-0 spans: P(0) / (1 - P(0)) per span of length ≥ 1 */
        double want = exp(-3) / (1 - exp(-3));
        assert_true(fabs(inserts / spans - want) < 0.15 * want);
        tfm_denoise_free(&d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_poisson),
        cmocka_unit_test(test_infill_by_hand),
        cmocka_unit_test(test_sentences),
        cmocka_unit_test(test_infill_properties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
