/* T5's span corruption (train/spancorrupt.h): upstream's unit case of
 * noise_span_to_unique_sentinel, random_spans_helper's length bookkeeping,
 * and properties of many random masks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <math.h>
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

/* The T5 study's i.i.d. variants on the upstream case's tokens and mask. */
static void test_iid_variants_by_hand(void **state)
{
    (void)state;
    const int32_t tokens[] = {10, 11, 12, 13, 14, 15};
    const unsigned char mask[] = {1, 1, 0, 0, 1, 0};
    int32_t in[6], tg[6];
    size_t ni, nt;
    /* drop corrupted tokens */
    tfm_noise_drop(tokens, mask, 6, in, &ni, tg, &nt);
    const int32_t drop_in[] = {12, 13, 15}, drop_tg[] = {10, 11, 14};
    assert_int_equal(ni, 3);
    assert_int_equal(nt, 3);
    assert_memory_equal(in, drop_in, sizeof drop_in);
    assert_memory_equal(tg, drop_tg, sizeof drop_tg);
    /* BERT-style: all masks, or (random_prob 1) the one non-special id */
    tfm_rng rng;
    tfm_rng_seed(&rng, 1);
    tfm_noise_replace(tokens, mask, 6, 999, 0, NULL, 1000, &rng, in);
    const int32_t bert[] = {999, 999, 12, 13, 999, 15};
    assert_memory_equal(in, bert, sizeof bert);
    const unsigned char special[8] = {1, 1, 1, 1, 1, 1, 1, 0};
    tfm_noise_replace(tokens, mask, 6, 999, 1, special, 8, &rng, in);
    const int32_t rnd[] = {7, 7, 12, 13, 7, 15};
    assert_memory_equal(in, rnd, sizeof rnd);
    /* the prefix that n sentinels encode: runs noise, keep, noise, keep */
    assert_int_equal(tfm_span_fit(mask, 6, 0), 0);
    assert_int_equal(tfm_span_fit(mask, 6, 1), 4);
    assert_int_equal(tfm_span_fit(mask, 6, 2), 6);
    const unsigned char keep_first[] = {0, 1, 0, 1, 1};
    assert_int_equal(tfm_span_fit(keep_first, 5, 1), 2);
}

/* i.i.d. masks: the noise share is the density (binomial, within 4.5 sd over
 * 2000 x 100 tokens), drop and iid lose nothing, bert keeps the length and
 * the non-noise tokens, and about random_prob of its noise is random. */
static void test_iid_properties(void **state)
{
    (void)state;
    tfm_rng rng;
    tfm_rng_seed(&rng, 7);
    enum { L = 100, V = 1000, N = 2000 };
    int32_t tok[L], in[L], tg[L], sent[L], out[L];
    unsigned char mask[L];
    for (int i = 0; i < L; i++) {
        tok[i] = i;
        sent[i] = V - 1 - i;
    }
    const double densities[] = {0.15, 0.5};
    for (int d = 0; d < 2; d++) {
        double p = densities[d];
        long noise = 0, random = 0;
        for (int trial = 0; trial < N; trial++) {
            tfm_noise_iid_mask(mask, L, p, &rng);
            size_t ni, nt, n = 0;
            for (int i = 0; i < L; i++)
                noise += mask[i];
            /* drop: merging the two back by the mask gives the window */
            tfm_noise_drop(tok, mask, L, in, &ni, tg, &nt);
            assert_int_equal(ni + nt, L);
            for (size_t i = 0, a = 0, b = 0; i < L; i++)
                out[n++] = mask[i] ? tg[b++] : in[a++];
            assert_memory_equal(out, tok, sizeof tok);
            /* iid: a sentinel per run, the fitted prefix restored */
            size_t len = tfm_span_fit(mask, L, 8);
            assert_int_equal(tfm_span_corrupt(tok, mask, len, sent, 8, in, &ni, tg, &nt), 0);
            assert_true(ni <= len && nt <= len + 1);
            n = 0;
            for (size_t i = 0; i < len; i++)
                n += i == 0 || mask[i] != mask[i - 1];
            assert_int_equal(ni + nt, len + n);
            /* bert */
            tfm_noise_replace(tok, mask, L, V - 1, 0.25, NULL, V - 100, &rng, in);
            for (int i = 0; i < L; i++) {
                if (!mask[i])
                    assert_int_equal(in[i], tok[i]);
                else if (in[i] != V - 1) {
                    assert_true(in[i] >= 0 && in[i] < V - 100);
                    random++;
                }
            }
        }
        double mean = p * L * N, sd = sqrt(p * (1 - p) * L * N);
        assert_true(fabs((double)noise - mean) < 4.5 * sd);
        double rmean = 0.25 * (double)noise, rsd = sqrt(0.25 * 0.75 * (double)noise);
        assert_true(fabs((double)random - rmean) < 4.5 * rsd);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_upstream_case),
        cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_random_masks),
        cmocka_unit_test(test_iid_variants_by_hand),
        cmocka_unit_test(test_iid_properties),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
