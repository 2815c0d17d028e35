/* The pieces of tfm-eval's evaluations that need no model: the perplexity
 * windows as sequences, the choice rules, the last-word split, and the
 * choice items and last-word passages as sequences (counted by hand with a
 * character tokenizer: a token a character). */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "infer/eval.h"
#include "text/tokenizer.h"

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

/* A character tokenizer over the letters of the cases below. */
static tfm_tokenizer *char_tok(void)
{
    tfm_tok_train_opts o = {.kind = TFM_TOK_CHAR, .lowercase = -1, .threads = 1};
    tfm_tok_trainer *tr = tfm_tok_trainer_new(&o);
    const char *text = "abcdefghijklmnopqrstuvwxyz \n";
    tfm_tok_trainer_feed(tr, text, strlen(text));
    tfm_tokenizer *t;
    tfm_err err = {0};
    if (tfm_tok_trainer_finish(tr, &t, &err) < 0)
        fail_msg("%s", err.msg);
    tfm_tok_trainer_free(tr);
    return t;
}

/* ids[0..n) are exactly the encoding of text. */
static void assert_encodes(const tfm_tokenizer *tok, const uint32_t *ids, size_t n,
                           const char *text)
{
    tfm_ids e = {0};
    tfm_tokenizer_encode(tok, NULL, text, strlen(text), 1, &e);
    assert_int_equal(e.len, n);
    assert_memory_equal(e.data, ids, n * sizeof *ids);
    tfm_ids_free(&e);
}

static int read_items(int choice, const char *data, tfm_eval_items_opts *o,
                      tfm_eval_items *it, tfm_err *err)
{
    memset(err, 0, sizeof *err);
    return (choice ? tfm_eval_choice_read : tfm_eval_lastword_read)(it, data, strlen(data), "x",
                                                                    o, err);
}

static void test_choice_items(void **state)
{
    (void)state;
    tfm_tokenizer *tok = char_tok();
    tfm_eval_items_opts o = {.tok = tok, .bos = 1, .block_size = 16, .context = 16};
    tfm_eval_items it;
    tfm_err err;
    const char *data = "{\"context\": \"ab\", \"endings\": [\" c\", \"de\"], \"label\": 1}\n"
                       "  \n"
                       "{\"context\": \"x\", \"endings\": [\"y\", \"zz\", \" w\"], \"label\": 0}";
    assert_int_equal(read_items(1, data, &o, &it, &err), 0);
    assert_int_equal(it.n, 2);
    assert_int_equal(it.n_seq, 5);
    assert_int_equal(it.line[0], 1);
    assert_int_equal(it.line[1], 3);
    assert_int_equal(it.first[1], 2);
    assert_int_equal(it.count[1], 3);
    assert_int_equal(it.label[0], 1);
    assert_int_equal(it.label[1], 0);
    assert_int_equal(it.k, 0);
    assert_null(it.picks);
    /* bos, context, ending; the ending scored */
    const size_t n[5] = {5, 5, 3, 4, 4}, nt[5] = {2, 2, 1, 2, 2}, bytes[5] = {2, 2, 1, 2, 2};
    const char *whole[5] = {"ab c", "abde", "xy", "xzz", "x w"};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(it.seqs[i].n, n[i]);
        assert_int_equal(it.seqs[i].n_target, nt[i]);
        assert_int_equal(it.end_bytes[i], bytes[i]);
        assert_int_equal(it.seqs[i].ids[0], 1);
        assert_encodes(tok, it.seqs[i].ids + 1, n[i] - 1, whole[i]);
        assert_null(it.seqs[i].token_logprobs);
    }
    tfm_eval_items_free(&it);

    /* errors name the input, the line and the column */
    struct { const char *data, *msg; int block, bos; } bad[] = {
        {"{\"context\": \"a\", \"endings\": [\"b\", \"c\"], \"label\": 2}\n",
         "x:1:50: \"label\" must be the index of the right ending (0 to 1)", 16, 1},
        {"\n[1]\n", "x:2: an item must be a JSON object, not an array", 16, 1},
        {"{\"context\": \"a\", \"endings\": [\"b\"], \"label\": 0}",
         "x:1:29: \"endings\" must be an array of at least two strings", 16, 1},
        {"{\"context\": \"a\", \"endings\": [\"b\", 5], \"label\": 0}",
         "x:1:35: ending 1 must be a string", 16, 1},
        {"{\"context\": \"a\", \"endings\": [\"b\", \"\"], \"label\": 0}",
         "x:1:35: ending 1 is empty", 16, 1},
        {"{\"context\": \"a\", \"endings\": [\"b\", \"cdef\"], \"label\": 0}",
         "x:1:35: ending 1 has 4 tokens: too long for the model's context of 4", 4, 1},
        {"{\"context\": \"\", \"endings\": [\"b\", \"c\"], \"label\": 0}",
         "x:1:13: empty context and no end-of-text token to put before the endings", 16, -1},
        {" \n\n", "x: empty input: no items", 16, 1},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        o.block_size = bad[k].block;
        o.bos = bad[k].bos;
        assert_int_equal(read_items(1, bad[k].data, &o, &it, &err), -1);
        assert_string_equal(err.msg, bad[k].msg);
        assert_null(it.seqs); /* nothing left to free */
    }
    tfm_tokenizer_free(tok);
}

static void test_lastword_items(void **state)
{
    (void)state;
    tfm_tokenizer *tok = char_tok();
    tfm_eval_items_opts o = {.tok = tok, .bos = 1, .block_size = 16, .context = 16};
    tfm_eval_items it;
    tfm_err err;
    /* trailing blanks go; the target keeps its space */
    assert_int_equal(read_items(0, "ab cd\n\t\nx y zz \t\n", &o, &it, &err), 0);
    assert_int_equal(it.n, 2);
    assert_int_equal(it.n_seq, 2);
    assert_int_equal(it.line[0], 1);
    assert_int_equal(it.line[1], 3);
    assert_null(it.first);
    assert_int_equal(it.seqs[0].n, 6);
    assert_int_equal(it.seqs[0].n_target, 3);
    assert_encodes(tok, it.seqs[0].ids + 1, 5, "ab cd");
    assert_int_equal(it.seqs[1].n, 7);
    assert_int_equal(it.seqs[1].n_target, 3);
    assert_encodes(tok, it.seqs[1].ids + 1, 6, "x y zz");
    tfm_eval_items_free(&it);

    assert_int_equal(read_items(0, "a b\nab\n", &o, &it, &err), -1);
    assert_string_equal(err.msg, "x:2: no space in the passage: the final word follows the "
                                 "last space");
    o.block_size = 3;
    assert_int_equal(read_items(0, "a bcd\n", &o, &it, &err), -1);
    assert_string_equal(err.msg, "x:1: the final word has 4 tokens: too long for the model's "
                                 "context of 3");
    o.block_size = 16;
    o.bos = -1;
    assert_int_equal(read_items(0, " ab\n", &o, &it, &err), -1);
    assert_string_equal(err.msg, "x:1: nothing before the final word and no end-of-text token "
                                 "to put there");
    assert_int_equal(read_items(0, "", &o, &it, &err), -1);
    assert_string_equal(err.msg, "x: empty input: no passages");
    tfm_tokenizer_free(tok);
}

/* With demonstrations: each item's are drawn, put first, never the item
 * itself (they come from the same data), and sequences past the context
 * are counted. */
static void test_items_shots(void **state)
{
    (void)state;
    tfm_tokenizer *tok = char_tok();
    const char *data = "ab cd\nef gh\nij kl\n";
    tfm_fewshot f;
    tfm_err err = {0};
    tfm_fewshot_init(&f, 1, 7, 1);
    assert_int_equal(tfm_fewshot_read(&f, data, strlen(data), 0, "x", &err), 0);
    tfm_eval_items_opts o = {.tok = tok, .bos = -1, .shots = &f, .block_size = 16,
                             .context = 9};
    tfm_eval_items it;
    assert_int_equal(read_items(0, data, &o, &it, &err), 0);
    assert_int_equal(it.k, 1);
    const char *pass[3] = {"ab cd", "ef gh", "ij kl"};
    for (size_t i = 0; i < 3; i++) {
        size_t d = it.picks[i];
        assert_true(d < 3 && d != i);
        /* "demo\n\n" then the passage: 5 + 2 + 5 tokens, past the context of 9 */
        char want[32];
        snprintf(want, sizeof want, "%s\n\n%s", pass[d], pass[i]);
        assert_int_equal(it.seqs[i].n, 12);
        assert_int_equal(it.seqs[i].n_target, 3);
        assert_encodes(tok, it.seqs[i].ids, 12, want);
    }
    assert_int_equal(it.n_cut, 3);
    tfm_eval_items_free(&it);
    o.context = 12;
    assert_int_equal(read_items(0, data, &o, &it, &err), 0);
    assert_int_equal(it.n_cut, 0);
    tfm_eval_items_free(&it);
    tfm_fewshot_free(&f);
    tfm_tokenizer_free(tok);
}

/* The tallies, on scores set by hand: the picks and the rights by each
 * rule, accuracy and its standard error, the words' perplexity. */
static void test_tally(void **state)
{
    (void)state;
    tfm_tokenizer *tok = char_tok();
    tfm_eval_items_opts o = {.tok = tok, .bos = 1, .block_size = 16, .context = 16};
    tfm_eval_items it;
    tfm_err err;
    /* item 0's endings: 1 and 3 bytes; item 1's: 2 and 2 */
    const char *data = "{\"context\": \"a\", \"endings\": [\"b\", \"cde\"], \"label\": 1}\n"
                       "{\"context\": \"a\", \"endings\": [\"bc\", \"de\"], \"label\": 0}\n";
    assert_int_equal(read_items(1, data, &o, &it, &err), 0);
    /* item 0: sums -1, -2 (ending 0 by sum), per byte -1, -0.67 (ending 1);
     * item 1: -3, -1: ending 1 by every rule */
    const double lp[4] = {-1, -2, -3, -1};
    for (int i = 0; i < 4; i++)
        it.seqs[i].logprob = lp[i];
    tfm_eval_tally t;
    tfm_eval_choice_tally(&it, &t);
    assert_int_equal(t.n, 2);
    const int best[6] = {0, 1, 1, 1, 1, 1};
    assert_memory_equal(t.best, best, sizeof best);
    assert_int_equal(t.right[0], 0);
    assert_int_equal(t.right[1], 1);
    assert_int_equal(t.right[2], 1);
    assert_true(t.acc[2] == 0.5);
    assert_float_equal(t.acc_se[2], sqrt(0.5 * 0.5 / 1), 1e-12);
    tfm_eval_tally_free(&t);
    tfm_eval_items_free(&it);

    assert_int_equal(read_items(0, "a bc\nd ef\nx y\n", &o, &it, &err), 0);
    it.seqs[0].logprob = -1;
    it.seqs[1].logprob = -2;
    it.seqs[2].logprob = -3;
    it.seqs[1].greedy = 1;
    tfm_eval_lastword_tally(&it, &t);
    assert_int_equal(t.right[0], 1);
    assert_int_equal(t.targets, 3 + 3 + 2);
    assert_true(t.logprob == -6);
    assert_float_equal(t.word_perplexity, exp(2.0), 1e-12);
    assert_float_equal(t.acc[0], 1.0 / 3, 1e-15);
    tfm_eval_tally_free(&t);
    tfm_eval_items_free(&it);
    tfm_tokenizer_free(tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ppl_plan),
        cmocka_unit_test(test_choice_pick),
        cmocka_unit_test(test_last_word),
        cmocka_unit_test(test_choice_items),
        cmocka_unit_test(test_lastword_items),
        cmocka_unit_test(test_items_shots),
        cmocka_unit_test(test_tally),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
