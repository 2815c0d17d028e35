/* The pieces of tfm-eval's evaluations that need no model: the perplexity
 * windows as sequences, the choice rules, the last-word split. */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "infer/eval.h"

/* Every token but the first scored once, in order, token_lp following it. */
static void test_ppl_plan(void **state)
{
    (void)state;
    uint32_t ids[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    tfm_ppl p;
    tfm_ppl_init(&p, ids, 10, 4, 2, 1);
    assert_int_equal(p.n_windows, 4);
    assert_int_equal(p.scored, 9);
    size_t k = 0;
    for (size_t i = 0; i < p.n_windows; i++) {
        const tfm_eval_seq *s = &p.seqs[i];
        assert_ptr_equal(s->ids, ids + p.w[i].begin);
        assert_int_equal(s->n, p.w[i].end - p.w[i].begin);
        assert_ptr_equal(s->token_logprobs, p.token_lp + k);
        /* the targets are the next positions of the stream */
        assert_int_equal(s->ids[s->n - s->n_target], k + 1);
        k += s->n_target;
    }
    assert_int_equal(k, 9);
    tfm_ppl_free(&p);
    tfm_ppl_init(&p, ids, 10, 4, 4, 0);
    assert_int_equal(p.n_windows, 3);
    assert_null(p.token_lp);
    assert_null(p.seqs[0].token_logprobs);
    tfm_ppl_free(&p);
}

static void test_choice_pick(void **state)
{
    (void)state;
    /* sums -6, -4, -5 over 3, 1, 5 tokens and 6, 8, 1 bytes */
    tfm_eval_seq s[3] = {{.logprob = -6, .n_target = 3}, {.logprob = -4, .n_target = 1},
                         {.logprob = -5, .n_target = 5}};
    size_t bytes[3] = {6, 8, 1};
    int best[3];
    tfm_eval_choice_pick(s, bytes, 3, best);
    assert_int_equal(best[0], 1);  /* -4 */
    assert_int_equal(best[1], 2);  /* -1 per token */
    assert_int_equal(best[2], 1);  /* -0.5 per byte */
    /* ties: the first */
    tfm_eval_seq t[2] = {{.logprob = -2, .n_target = 1}, {.logprob = -2, .n_target = 1}};
    size_t tb[2] = {1, 1};
    tfm_eval_choice_pick(t, tb, 2, best);
    assert_int_equal(best[0], 0);
    assert_int_equal(best[1], 0);
    assert_int_equal(best[2], 0);
}

static void test_last_word(void **state)
{
    (void)state;
    assert_int_equal(tfm_eval_last_word("he ate the cake", 15), 10);
    assert_int_equal(tfm_eval_last_word(" word", 5), 0);
    assert_int_equal(tfm_eval_last_word("word", 4), -1);
    assert_int_equal(tfm_eval_last_word("", 0), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ppl_plan),
        cmocka_unit_test(test_choice_pick),
        cmocka_unit_test(test_last_word),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
