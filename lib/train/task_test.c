/* The seq2seq task's batches: teacher forcing laid out as the model expects
 * (BOS + target in, target + EOS out, source + EOS, padding masked or
 * ignored), token budgets kept, every pair reachable, and the same rng
 * giving the same batches.  Classification's draws by class
 * (train.class_balance).  SFT's rows, plain and packed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/file.h"
#include "train/run_config.h"
#include "text/tokenizer.h"
#include "train/task.h"

static char dir[] = "/tmp/tfm-task-test.XXXXXX";
static char tsv[64], cls_tsv[64], reg_tsv[64];
static tfm_tokenizer *tok;

/* "abc...": the pair (w, reverse(w)) of n letters starting at 'a' + k. */
static void word(char *w, int n, int k)
{
    for (int i = 0; i < n; i++)
        w[i] = (char)('a' + (k + i) % 6);
    w[n] = 0;
}

static int setup(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(tsv, sizeof tsv, "%s/p.tsv", dir);
    FILE *f = fopen(tsv, "w");
    assert_non_null(f);
    char w[16], r[16];
    for (int i = 0; i < 40; i++) {
        int n = 1 + i % 9;
        word(w, n, i);
        for (int j = 0; j < n; j++)
            r[j] = w[n - 1 - j];
        r[n] = 0;
        fprintf(f, "%s\t%s\n", w, r);
    }
    fclose(f);
    /* 90 texts of class a, 10 of class b; the same texts with numbers */
    snprintf(cls_tsv, sizeof cls_tsv, "%s/c.tsv", dir);
    snprintf(reg_tsv, sizeof reg_tsv, "%s/r.tsv", dir);
    FILE *fc = fopen(cls_tsv, "w"), *fr = fopen(reg_tsv, "w");
    assert_non_null(fc);
    assert_non_null(fr);
    for (int i = 0; i < 100; i++) {
        word(w, 2 + i % 5, i);
        fprintf(fc, "%s\t%s\n", i % 10 ? "a" : "b", w);
        fprintf(fr, "%d.5\t%s\n", i % 7, w);
    }
    fclose(fc);
    fclose(fr);
    const char *specials[] = {"<pad>", "<s>", "</s>"};
    tfm_tok_train_opts o = {.kind = TFM_TOK_CHAR, .specials = specials, .n_specials = 3,
                            .lowercase = -1, .threads = 1};
    tfm_tok_trainer *t = tfm_tok_trainer_new(&o);
    tfm_tok_trainer_feed(t, "abcdef", 6);
    tfm_err err = {0};
    assert_int_equal(tfm_tok_trainer_finish(t, &tok, &err), 0);
    tfm_tok_trainer_free(t);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tfm_tokenizer_free(tok);
    unlink(tsv);
    unlink(cls_tsv);
    unlink(reg_tsv);
    rmdir(dir);
    return 0;
}

static void config(tfm_config *c, int64_t max_tokens)
{
    tfm_config_defaults(c);
    c->model.kind = TFM_KIND_ENCODER_DECODER;
    c->model.block_size = 12;
    snprintf(c->data.text, sizeof c->data.text, "%s", tsv);
    snprintf(c->data.tokenizer, sizeof c->data.tokenizer, "chars");
    c->data.val_fraction = 0.25;
    c->train.batch_size = 5;
    c->train.max_tokens = max_tokens;
}

/* Every row is one pair, laid out for teacher forcing. */
static void check_rows(const tfm_batch *b, size_t n_tokens)
{
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    size_t count = 0;
    for (int i = 0; i < b->B; i++) {
        const int32_t *s = b->src + (size_t)i * b->S, *x = b->inputs + (size_t)i * b->T,
                      *y = b->targets + (size_t)i * b->T;
        int S = b->src_lengths[i];
        assert_true(S >= 2 && S <= b->S);
        assert_int_equal(s[S - 1], sp->eos);
        for (int j = 0; j < S - 1; j++)
            assert_true(s[j] > 2); /* letters */
        int L = 0; /* target length */
        while (L < b->T && y[L] >= 0 && y[L] != sp->eos)
            L++;
        assert_true(L < b->T);
        assert_int_equal(y[L], sp->eos);
        for (int j = L + 1; j < b->T; j++)
            assert_int_equal(y[j], -1);
        assert_int_equal(x[0], sp->bos);
        for (int j = 1; j <= L; j++)
            assert_int_equal(x[j], y[j - 1]);
        /* the pairs are reversals: the target is the source backwards */
        assert_int_equal(L, S - 1);
        for (int j = 0; j < L; j++)
            assert_int_equal(y[j], s[L - 1 - j]);
        count += (size_t)L + 1;
    }
    assert_int_equal(count, n_tokens);
}

static void test_random_pairs(void **state)
{
    (void)state;
    tfm_config c;
    config(&c, 0);
    tfm_task *t;
    tfm_err err = {0};
    assert_int_equal(tfm_task_open(&t, &c, tok, NULL, &err), 0);
    assert_string_equal(tfm_task_name(t), "seq2seq");
    assert_int_equal(c.model.vocab_size, 9);
    assert_true(tfm_task_has_val(t));
    tfm_rng a, b;
    tfm_rng_seed(&a, 1);
    tfm_rng_seed(&b, 1);
    for (int k = 0; k < 20; k++) {
        tfm_batch x;
        size_t n;
        assert_int_equal(tfm_task_next(t, &a, &x, &n, &err), 0);
        assert_int_equal(x.B, 5);
        check_rows(&x, n);
        /* the same rng state gives the same batch */
        int32_t first = x.inputs[1], S = x.S;
        tfm_batch y;
        size_t m;
        assert_int_equal(tfm_task_next(t, &b, &y, &m, &err), 0);
        assert_int_equal(y.inputs[1], first);
        assert_int_equal(y.S, S);
        assert_int_equal(m, n);
    }
    tfm_task_free(t);
}

static void test_token_budget(void **state)
{
    (void)state;
    tfm_config c;
    config(&c, 24);
    tfm_task *t;
    tfm_err err = {0};
    assert_int_equal(tfm_task_open(&t, &c, tok, NULL, &err), 0);
    tfm_rng r;
    tfm_rng_seed(&r, 2);
    int seen_len[16] = {0}, several = 0;
    for (int k = 0; k < 400; k++) {
        tfm_batch x;
        size_t n;
        assert_int_equal(tfm_task_next(t, &r, &x, &n, &err), 0);
        check_rows(&x, n);
        int longest = x.S > x.T ? x.S : x.T;
        /* within budget, unless one pair alone exceeds it */
        assert_true(x.B * longest <= 24 || x.B == 1);
        /* similar lengths: the shortest pair is close to the longest */
        int shortest = 99;
        for (int i = 0; i < x.B; i++)
            if (x.src_lengths[i] < shortest)
                shortest = x.src_lengths[i];
        assert_true(longest - shortest <= 2);
        several += x.B > 1;
        for (int i = 0; i < x.B; i++)
            seen_len[x.src_lengths[i]]++;
    }
    assert_true(several > 100);
    /* every length of the training pairs (1..9 letters) is drawn */
    for (int L = 2; L <= 10; L++)
        assert_true(seen_len[L] > 0);
    tfm_task_free(t);
}

static void classify_config(tfm_config *c, const char *text, double q)
{
    tfm_config_defaults(c);
    c->model.kind = TFM_KIND_DECODER;
    c->model.block_size = 12;
    c->train.task = TFM_CONFIG_TASK_CLASSIFY;
    snprintf(c->data.text, sizeof c->data.text, "%s", text);
    snprintf(c->data.val, sizeof c->data.val, "%s", text);
    snprintf(c->data.tokenizer, sizeof c->data.tokenizer, "chars");
    c->train.batch_size = 5;
    c->train.class_balance = q;
}

/* Class b is 10% of the training rows: drawn 10% of the time by default,
 * 25% with square-root sampling (10·10^-1/2 against 90·90^-1/2) and half
 * the time with every class alike.  1000 draws: the bounds are 6 binomial
 * standard deviations or more. */
static void test_class_balance(void **state)
{
    (void)state;
    const struct { double q; int lo, hi; } cases[] = {{0, 40, 160}, {0.5, 170, 330}, {1, 400, 600}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tfm_config c;
        classify_config(&c, cls_tsv, cases[k].q);
        tfm_task *t;
        tfm_err err = {0};
        assert_int_equal(tfm_task_open(&t, &c, tok, NULL, &err), 0);
        tfm_rng r;
        tfm_rng_seed(&r, 3);
        int n[2] = {0, 0};
        for (int i = 0; i < 200; i++) {
            tfm_batch x;
            size_t tokens;
            assert_int_equal(tfm_task_next(t, &r, &x, &tokens, &err), 0);
            for (int j = 0; j < x.B; j++) {
                assert_true(x.labels[j] == 0 || x.labels[j] == 1);
                n[x.labels[j]]++;
            }
        }
        assert_int_equal(n[0] + n[1], 1000);
        /* a is the first label seen, b the second */
        int nb = n[1];
        if (nb < cases[k].lo || nb > cases[k].hi)
            fail_msg("class_balance %g: class b drawn %d times of 1000, expected [%d, %d]",
                     cases[k].q, nb, cases[k].lo, cases[k].hi);
        tfm_task_free(t);
    }
    /* numbers have no classes to balance */
    tfm_config c;
    classify_config(&c, reg_tsv, 0.5);
    c.model.classes = 1;
    tfm_task *t;
    tfm_err err = {0};
    assert_int_equal(tfm_task_open(&t, &c, tok, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "class_balance"));
}

/* train.task sft: each row (or each packed example, its own document) is
 * prompt + completion + end-of-text with targets on the completion and
 * the end-of-text only, a contiguous tail of the document. */
static void check_sft(const tfm_batch *b, size_t n_tokens, int packed)
{
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    size_t count = 0;
    for (int i = 0; i < b->B; i++) {
        const int32_t *x = b->inputs + (size_t)i * b->T, *y = b->targets + (size_t)i * b->T;
        const int *d = packed ? b->doc_start + (size_t)i * b->T : NULL;
        int start = 0;
        while (start < b->T) {
            int end = start + 1; /* the document [start, end) */
            while (end < b->T && (packed ? d[end] == start : 1))
                end++;
            int first = start;
            while (first < end && y[first] < 0)
                first++;
            if (first < end) {
                /* the targets: x shifted, on to the end-of-text that ends it */
                int last = first;
                while (last < end && y[last] >= 0)
                    last++;
                assert_int_equal(y[last - 1], sp->eos);
                for (int t = first; t < last - 1; t++)
                    assert_int_equal(y[t], x[t + 1]);
                for (int t = last; t < end; t++)
                    assert_int_equal(y[t], -1);
                for (int t = start; t < last; t++)
                    assert_true(x[t] > 2); /* letters, no padding inside */
                count += (size_t)(last - first);
            }
            if (!packed)
                break;
            start = end;
        }
    }
    assert_int_equal(count, n_tokens);
}

static void test_sft(void **state)
{
    (void)state;
    char path[80];
    snprintf(path, sizeof path, "%s/s.jsonl", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 12; i++) {
        char p[16], c[16];
        word(p, 1 + i % 3, i);
        word(c, 1 + i % 4, i + 1);
        fprintf(f, "{\"prompt\": \"%s\", \"completion\": \"%s\"}\n", p, c);
    }
    fclose(f);
    for (int packing = 0; packing < 2; packing++) {
        tfm_config c;
        tfm_config_defaults(&c);
        c.model.block_size = 16;
        snprintf(c.data.text, sizeof c.data.text, "%s", path);
        snprintf(c.data.tokenizer, sizeof c.data.tokenizer, "chars");
        c.data.val_fraction = 0.25;
        c.data.packing = packing;
        c.train.batch_size = 3;
        c.train.task = TFM_CONFIG_TASK_SFT;
        tfm_task *t;
        tfm_err err = {0};
        if (tfm_task_open(&t, &c, tok, NULL, &err) < 0)
            fail_msg("%s", err.msg);
        assert_string_equal(tfm_task_name(t), "sft");
        assert_true(tfm_task_has_val(t));
        tfm_rng r;
        tfm_rng_seed(&r, 3);
        for (int k = 0; k < 20; k++) {
            tfm_batch b;
            size_t n;
            assert_int_equal(tfm_task_next(t, &r, &b, &n, &err), 0);
            assert_true(packing ? b.doc_start != NULL && b.T == 16 : b.doc_start == NULL);
            check_sft(&b, n, packing);
        }
        tfm_task_free(t);
    }
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_pairs),
        cmocka_unit_test(test_token_budget),
        cmocka_unit_test(test_class_balance),
        cmocka_unit_test(test_sft),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
