/* T5's span corruption (train/spancorrupt.h): upstream's unit case of
 * noise_span_to_unique_sentinel, random_spans_helper's length bookkeeping,
 * and properties of many random masks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "train/spancorrupt.h"

/* tokens 10..15 with the noise mask T T F F T F */
static void test_upstream_case(void **state)
{
    (void)state;
    const int32_t tokens[] = {10, 11, 12, 13, 14, 15};
    const unsigned char mask[] = {1, 1, 0, 0, 1, 0};
    const int32_t sentinel[] = {999, 998}; /* <extra_id_0>, <extra_id_1> of a vocab of 1000 */
    int32_t in[8], tg[8];
    size_t ni, nt;
    assert_int_equal(tfm_span_corrupt(tokens, mask, 6, sentinel, 2, in, &ni, tg, &nt), 0);
    const int32_t want_in[] = {999, 12, 13, 998, 15}, want_tg[] = {10, 11, 999, 14, 998};
    assert_int_equal(ni, 5);
    assert_int_equal(nt, 5);
    assert_memory_equal(in, want_in, sizeof want_in);
    assert_memory_equal(tg, want_tg, sizeof want_tg);
    /* one sentinel is too few for this mask */
    assert_int_equal(tfm_span_corrupt(tokens, mask, 6, sentinel, 1, in, &ni, tg, &nt), -1);
}

static void test_lengths(void **state)
{
    (void)state;
    size_t tl = 0;
    /* random_spans_helper(512, 0.15, 3) */
    assert_int_equal(tfm_span_raw_length(512, 0.15, 3, &tl), 568);
    assert_int_equal(tl, 114);
    size_t in, tg;
    tfm_span_lengths(568, 0.15, 3, &in, &tg);
    assert_int_equal(in, 512);
    assert_int_equal(tg, 114);
    tfm_span_lengths(569, 0.15, 3, &in, &tg);
    assert_true(in > 512);
    /* counts: round(600·0.15) = 90 noise tokens in 30 spans; at least one
     * of each; half to even as tf.math.round (2.5 -> 2) */
    size_t noise, spans;
    tfm_span_counts(600, 0.15, 3, &noise, &spans);
    assert_int_equal(noise, 90);
    assert_int_equal(spans, 30);
    tfm_span_counts(2, 0.15, 3, &noise, &spans);
    assert_int_equal(noise, 1);
    assert_int_equal(spans, 1);
    tfm_span_counts(10, 0.25, 1, &noise, &spans);
    assert_int_equal(noise, 2);
    tfm_span_counts(10, 0.35, 1, &noise, &spans);
    assert_int_equal(noise, 4);
    tfm_span_counts(10, 0.99, 1, &noise, &spans);
    assert_int_equal(noise, 9);
    assert_int_equal(spans, 1);
    /* nothing fits 2 inputs (a token, a sentinel and EOS are 3) */
    assert_int_equal(tfm_span_raw_length(2, 0.15, 3, NULL), 0);
    assert_int_equal(tfm_span_raw_length(3, 0.15, 3, NULL), 2);
}

/* Many random masks: non-noise first, spans alternating, the counts of
 * tfm_span_counts, and the corruption losing nothing: the inputs with each
 * sentinel expanded by what follows it in the targets give the window. */
static void test_random_masks(void **state)
{
    (void)state;
    tfm_rng rng;
    tfm_rng_seed(&rng, 42);
    const double densities[] = {0.15, 0.3, 0.5, 0.8};
    const double means[] = {1, 3, 7.5};
    enum { L = 300, V = 1000 };
    int32_t tok[L], in[L + 1], tg[L + 1], sent[L], out[L];
    unsigned char mask[L + 1];
    long seen_noise[20] = {0}, hits = 0;
    for (int i = 0; i < L; i++) {
        tok[i] = i;
        sent[i] = V - 1 - i;
    }
    for (int trial = 0; trial < 4000; trial++) {
        size_t len = 2 + (size_t)tfm_rng_below(&rng, L - 1);
        if (trial < 2000)
            len = 20;
        double d = densities[trial % 4], m = means[(trial / 4) % 3];
        size_t noise, spans;
        tfm_span_counts(len, d, m, &noise, &spans);
        memset(mask, 7, sizeof mask);
        tfm_span_noise_mask(mask, len, d, m, &rng);
        assert_int_equal(mask[len], 7); /* nothing written past the window */
        size_t n_noise = 0, runs[2] = {0, 0};
        for (size_t i = 0; i < len; i++) {
            assert_true(mask[i] <= 1);
            n_noise += mask[i];
            if (i == 0 || mask[i] != mask[i - 1])
                runs[mask[i]]++;
        }
        assert_int_equal(mask[0], 0);
        assert_int_equal(mask[len - 1], 1);
        assert_int_equal(n_noise, noise);
        assert_int_equal(runs[1], spans);
        assert_int_equal(runs[0], spans);
        if (len == 20 && d == 0.3 && m == 3 && ++hits)
            for (size_t i = 0; i < len; i++)
                seen_noise[i] += mask[i];
        size_t ni, nt;
        assert_int_equal(tfm_span_corrupt(tok, mask, len, sent, spans, in, &ni, tg, &nt), 0);
        size_t want_in, want_tg;
        tfm_span_lengths(len, d, m, &want_in, &want_tg);
        assert_int_equal(ni + 1, want_in);
        assert_int_equal(nt + 1, want_tg);
        /* targets: s0 span0 s1 span1 ..., sentinels in order */
        size_t k = 0, n = 0, j = 0;
        for (size_t i = 0; i < ni; i++) {
            if (in[i] < L) {
                out[n++] = in[i];
                continue;
            }
            assert_int_equal(in[i], sent[k]);
            assert_true(j < nt);
            assert_int_equal(tg[j], sent[k]);
            for (j++; j < nt && tg[j] < L; j++)
                out[n++] = tg[j];
            k++;
        }
        assert_int_equal(k, spans);
        assert_int_equal(j, nt);
        assert_int_equal(n, len);
        assert_memory_equal(out, tok, len * sizeof *tok);
    }
    /* the cuts move: every position but the first (never noise) and the
     * last (always) is noise in some masks and not in others */
    assert_int_equal(seen_noise[0], 0);
    for (int i = 1; i < 19; i++)
        assert_true(seen_noise[i] > 0 && seen_noise[i] < hits);
    assert_int_equal(seen_noise[19], hits);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upstream_case),
        cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_random_masks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
