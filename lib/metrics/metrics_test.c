/* Hand-checkable metrics: NLL of a row, stderr, bits per byte, and the
 * perplexity windows (how many, which tokens each scores). */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "metrics/metrics.h"

static void test_nll(void **state)
{
    (void)state;
    float uni[4] = {0, 0, 0, 0};
    assert_true(fabs(tfm_metrics_nll(uni, 4, 2) - log(4.0)) < 1e-12);
    /* softmax([ln 1, ln 2, ln 3, ln 4]) = k / 10 */
    float l[4] = {0, (float)log(2.0), (float)log(3.0), (float)log(4.0)};
    assert_true(fabs(tfm_metrics_nll(l, 4, 3) - -log(0.4)) < 1e-6);
    assert_true(fabs(tfm_metrics_nll(l, 4, 0) - -log(0.1)) < 1e-6);
    /* large logits do not overflow */
    float big[3] = {1000, 1000, 0};
    assert_true(fabs(tfm_metrics_nll(big, 3, 0) - log(2.0)) < 1e-9);
    assert_int_equal(tfm_metrics_argmax(l, 4), 3);
    float tie[3] = {1, 5, 5};
    assert_int_equal(tfm_metrics_argmax(tie, 3), 1);
}

static void test_stderr_bpb(void **state)
{
    (void)state;
    /* 3 of 4: p = .75, sqrt(.75 * .25 / 3) = 0.25 */
    assert_true(fabs(tfm_metrics_stderr(3, 4) - 0.25) < 1e-12);
    assert_true(tfm_metrics_stderr(1, 1) == 0);
    assert_true(tfm_metrics_stderr(0, 10) == 0);
    /* 8 ln 2 nats over 4 bytes = 2 bits per byte */
    assert_true(fabs(tfm_metrics_bpb(8 * log(2.0), 4) - 2) < 1e-12);
    assert_true(tfm_metrics_bpb(1, 0) == 0);
    assert_int_equal(tfm_metrics_utf8_chars("h\xc3\xa9llo \xe2\x82\xac", 10), 7);
}

/* Each position 1..n-1 is scored exactly once, each with at least
 * context - stride tokens of history after the first window. */
static void check_cover(size_t n, size_t c, size_t s)
{
    tfm_ppl_window w[256];
    size_t nw = tfm_ppl_windows(n, c, s, w, 256);
    assert_true(nw <= 256);
    size_t st = s < c - 1 ? s : c - 1;
    size_t expect = n <= c ? 1 : 1 + (n - c + st - 1) / st;
    assert_int_equal(nw, expect);
    unsigned char seen[1024] = {0};
    for (size_t i = 0; i < nw; i++) {
        assert_true(w[i].end - w[i].begin <= c);
        assert_true(w[i].score_from > w[i].begin);
        assert_true(w[i].score_from < w[i].end);
        for (size_t p = w[i].score_from; p < w[i].end; p++) {
            seen[p]++;
            if (i > 0)
                assert_true(p - w[i].begin >= c - st);
        }
    }
    assert_int_equal(w[nw - 1].end, n);
    assert_int_equal(seen[0], 0);
    for (size_t p = 1; p < n; p++)
        assert_int_equal(seen[p], 1);
}

static void test_windows(void **state)
{
    (void)state;
    /* 10 tokens, context 4, stride 2: windows [0,4) [2,6) [4,8) [6,10),
     * scoring 1-3, 4-5, 6-7, 8-9: 9 tokens */
    tfm_ppl_window w[8];
    assert_int_equal(tfm_ppl_windows(10, 4, 2, w, 8), 4);
    assert_int_equal(w[0].begin, 0); assert_int_equal(w[0].score_from, 1);
    assert_int_equal(w[0].end, 4);
    assert_int_equal(w[1].begin, 2); assert_int_equal(w[1].score_from, 4);
    assert_int_equal(w[1].end, 6);
    assert_int_equal(w[3].begin, 6); assert_int_equal(w[3].score_from, 8);
    assert_int_equal(w[3].end, 10);
    /* stride = context: windows overlap by one token, so each scores
     * context - 1 new ones: [0,4) 1-3, [3,7) 4-6, [6,10) 7-9 */
    assert_int_equal(tfm_ppl_windows(10, 4, 4, w, 8), 3);
    assert_int_equal(w[1].begin, 3); assert_int_equal(w[1].score_from, 4);
    assert_int_equal(w[1].end, 7);
    assert_int_equal(w[2].begin, 6); assert_int_equal(w[2].score_from, 7);
    assert_int_equal(tfm_ppl_windows(1, 4, 4, NULL, 0), 0);
    assert_int_equal(tfm_ppl_windows(3, 4, 1, NULL, 0), 1);
    assert_int_equal(tfm_ppl_windows(10, 4, 5, NULL, 0), 0); /* stride > context */
    for (size_t n = 2; n < 60; n += 3)
        for (size_t c = 2; c < 12; c++)
            for (size_t s = 1; s <= c; s++)
                check_cover(n, c, s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nll),
        cmocka_unit_test(test_stderr_bpb),
        cmocka_unit_test(test_windows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
