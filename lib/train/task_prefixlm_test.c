/* prefix-lm (task_prefixlm.c): the rows and their loss masks on hand-made
 * cases, the split point's range and uniformity, and the task's batches
 * from text (random splits of windows) and from input<TAB>target pairs:
 * each row a window of the text or its pair, scored exactly after its
 * prefix, the same rng giving the same batches. */
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
#include "train/task_internal.h"

static char dir[] = "/tmp/tfm-prefixlm-test.XXXXXX";
static char txt[64], tsv[64];
static tfm_tokenizer *tok;
static int32_t eos;

static int setup(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(dir));
    snprintf(txt, sizeof txt, "%s/t.txt", dir);
    snprintf(tsv, sizeof tsv, "%s/p.tsv", dir);
    FILE *f = fopen(txt, "w");
    assert_non_null(f);
    for (int i = 0; i < 300; i++) /* one line: ids cycle through a..f */
        fputc('a' + i % 6, f);
    fclose(f);
    f = fopen(tsv, "w");
    assert_non_null(f);
    /* input: n letters from 'a' + k; target: the same letters shifted by 1 */
    for (int i = 0; i < 30; i++) {
        int n = 1 + i % 7;
        for (int j = 0; j < n; j++)
            fputc('a' + (i + j) % 6, f);
        fputc('\t', f);
        for (int j = 0; j < n; j++)
            fputc('a' + (i + j + 1) % 6, f);
        fputc('\n', f);
    }
    fclose(f);
    const char *specials[] = {"<pad>", "<s>", "</s>"};
    tfm_tok_train_opts o = {.kind = TFM_TOK_CHAR, .specials = specials, .n_specials = 3,
                            .lowercase = -1, .threads = 1};
    tfm_tok_trainer *t = tfm_tok_trainer_new(&o);
    tfm_tok_trainer_feed(t, "abcdef", 6);
    tfm_err err = {0};
    assert_int_equal(tfm_tok_trainer_finish(t, &tok, &err), 0);
    tfm_tok_trainer_free(t);
    eos = (int32_t)tfm_tokenizer_specials(tok)->eos;
    assert_true(eos >= 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tfm_tokenizer_free(tok);
    unlink(txt);
    unlink(tsv);
    rmdir(dir);
    return 0;
}

/* Hand-checked rows: a window split after 3 tokens, and a pair. */
static void test_rows_exact(void **state)
{
    (void)state;
    const int32_t w[9] = {10, 11, 12, 13, 14, 15, 16, 17, 18};
    int32_t x[8], y[8];
    tfm_prefixlm_row(w, 8, 3, x, y);
    const int32_t ex[8] = {10, 11, 12, 13, 14, 15, 16, 17};
    const int32_t ey[8] = {-1, -1, 13, 14, 15, 16, 17, 18};
    assert_memory_equal(x, ex, sizeof ex);
    assert_memory_equal(y, ey, sizeof ey);
    /* the extremes: P = 1 is the plain LM, P = T scores the last token only */
    tfm_prefixlm_row(w, 8, 1, x, y);
    for (int t = 0; t < 8; t++)
        assert_int_equal(y[t], w[t + 1]);
    tfm_prefixlm_row(w, 8, 8, x, y);
    for (int t = 0; t < 7; t++)
        assert_int_equal(y[t], -1);
    assert_int_equal(y[7], 18);

    /* input 5 6 EOS, target 7 8: row 5 6 EOS 7 8 EOS, padded to 7 */
    const uint32_t s[3] = {5, 6, 1}, tg[2] = {7, 8};
    int32_t px[7], py[7];
    assert_int_equal(tfm_prefixlm_pair_row(s, 3, tg, 2, 1, 0, 7, px, py), 3);
    const int32_t epx[7] = {5, 6, 1, 7, 8, 0, 0};
    const int32_t epy[7] = {-1, -1, 7, 8, 1, -1, -1};
    assert_memory_equal(px, epx, sizeof epx);
    assert_memory_equal(py, epy, sizeof epy);
}

/* The split point: in [1, T], every value about equally often, and a
 * fixed seed repeats it. */
static void test_draw_uniform(void **state)
{
    (void)state;
    enum { T = 8, N = 80000 };
    long count[T + 2] = {0};
    tfm_rng r, r2;
    tfm_rng_seed(&r, 42);
    tfm_rng_seed(&r2, 42);
    for (int i = 0; i < N; i++) {
        int p = tfm_prefixlm_draw(&r, T);
        assert_int_equal(p, tfm_prefixlm_draw(&r2, T));
        assert_true(p >= 1 && p <= T);
        count[p]++;
    }
    /* N/T = 10000 each; 5 standard deviations is about 470 */
    for (int p = 1; p <= T; p++)
        assert_true(labs(count[p] - N / T) < 500);
    assert_int_equal(tfm_prefixlm_draw(&r, 1), 1);
}

static void config(tfm_config *c, int pairs)
{
    tfm_config_defaults(c);
    c->model.kind = TFM_KIND_DECODER;
    c->model.block_size = 10;
    snprintf(c->data.text, sizeof c->data.text, "%s", pairs ? tsv : txt);
    snprintf(c->data.tokenizer, sizeof c->data.tokenizer, "chars");
    c->data.val_fraction = 0.2;
    c->train.batch_size = 6;
    c->train.task = TFM_CONFIG_TASK_PREFIX_LM;
    c->train.prefix_from = pairs ? TFM_CONFIG_PREFIX_PAIRS : TFM_CONFIG_PREFIX_RANDOM;
}

/* The letter after id a in the cycle a..f, by the tokenizer's ids. */
static int32_t next_letter(int32_t a)
{
    char buf[2] = {0, 0};
    for (int c = 0; c < 6; c++) {
        tfm_ids ids = {0};
        buf[0] = (char)('a' + c);
        tfm_tok_scratch *sc = tfm_tok_scratch_new(tok);
        tfm_tokenizer_encode(tok, sc, buf, 1, 0, &ids);
        tfm_tok_scratch_free(sc);
        int32_t id = (int32_t)ids.data[0];
        free(ids.data);
        if (id == a) {
            buf[0] = (char)('a' + (c + 1) % 6);
            tfm_ids n = {0};
            sc = tfm_tok_scratch_new(tok);
            tfm_tokenizer_encode(tok, sc, buf, 1, 0, &n);
            tfm_tok_scratch_free(sc);
            int32_t r = (int32_t)n.data[0];
            free(n.data);
            return r;
        }
    }
    fail_msg("id %d is not a letter", a);
    return -1;
}

static void test_task_random(void **state)
{
    (void)state;
    tfm_config c;
    config(&c, 0);
    assert_int_equal(tfm_config_validate(&c, &(tfm_err){0}), 0);
    tfm_task *t;
    tfm_err err = {0};
    assert_int_equal(tfm_task_open(&t, &c, tok, NULL, &err), 0);
    assert_string_equal(tfm_task_name(t), "prefix-lm");
    assert_true(tfm_task_has_val(t));
    tfm_rng r, r2;
    tfm_rng_seed(&r, 5);
    tfm_rng_seed(&r2, 5);
    int seen_p[11] = {0};
    for (int k = 0; k < 20; k++) {
        tfm_batch b;
        size_t n;
        assert_int_equal(tfm_task_next(t, &r, &b, &n, &err), 0);
        assert_int_equal(b.B, 6);
        assert_int_equal(b.T, 10);
        assert_non_null(b.prefix_len);
        size_t want = 0;
        int32_t x0[60], y0[60], p0[6];
        memcpy(x0, b.inputs, sizeof x0);
        memcpy(y0, b.targets, sizeof y0);
        memcpy(p0, b.prefix_len, sizeof p0);
        for (int i = 0; i < 6; i++) {
            int P = b.prefix_len[i];
            assert_true(P >= 1 && P <= 10);
            seen_p[P] = 1;
            want += (size_t)(10 + 1 - P);
            const int32_t *x = b.inputs + i * 10, *y = b.targets + i * 10;
            for (int j = 0; j < 10; j++) {
                if (j + 1 < 10) /* a window of the text */
                    assert_int_equal(x[j + 1], next_letter(x[j]));
                assert_int_equal(y[j], j < P - 1 ? -1 : next_letter(x[j]));
            }
        }
        assert_int_equal(n, want);
        /* the same rng, the same batch */
        assert_int_equal(tfm_task_next(t, &r2, &b, &n, &err), 0);
        assert_memory_equal(b.inputs, x0, sizeof x0);
        assert_memory_equal(b.targets, y0, sizeof y0);
        assert_memory_equal(b.prefix_len, p0, sizeof p0);
    }
    int distinct = 0;
    for (int p = 1; p <= 10; p++)
        distinct += seen_p[p];
    assert_true(distinct >= 8); /* 120 draws of 10 values */
    tfm_task_free(t);
}

static void test_task_pairs(void **state)
{
    (void)state;
    tfm_config c;
    config(&c, 1);
    c.model.block_size = 16; /* every pair fits: 7 + EOS + 7 (+ EOS) */
    tfm_task *t;
    tfm_err err = {0};
    assert_int_equal(tfm_task_open(&t, &c, tok, NULL, &err), 0);
    char d[256];
    tfm_task_describe(t, d, sizeof d);
    assert_null(strstr(d, "cut"));
    tfm_rng r;
    tfm_rng_seed(&r, 9);
    for (int k = 0; k < 10; k++) {
        tfm_batch b;
        size_t n;
        assert_int_equal(tfm_task_next(t, &r, &b, &n, &err), 0);
        size_t scored = 0;
        for (int i = 0; i < b.B; i++) {
            int P = b.prefix_len[i];
            const int32_t *x = b.inputs + i * b.T, *y = b.targets + i * b.T;
            /* input n letters + EOS, target its n letters each shifted */
            int len = P - 1;
            assert_true(len >= 1 && len <= 7);
            assert_int_equal(x[P - 1], eos);
            for (int j = 0; j < b.T; j++) {
                if (j < P - 1)
                    assert_int_equal(y[j], -1);
                else if (j < P - 1 + len)
                    assert_int_equal(y[j], next_letter(x[j - (P - 1)]));
                else if (j == P - 1 + len)
                    assert_int_equal(y[j], eos);
                else
                    assert_int_equal(y[j], -1);
                if (y[j] >= 0)
                    scored++;
            }
        }
        assert_int_equal(n, scored);
    }
    tfm_task_free(t);
}

/* Pairs longer than the context: cut (input's head and EOS) or an error
 * naming the line. */
static void test_pairs_fit(void **state)
{
    (void)state;
    tfm_config c;
    config(&c, 1);
    c.model.block_size = 6; /* pairs of 7 + 1 + 7 + 1 tokens do not fit */
    tfm_task *t;
    tfm_err err = {0};
    assert_int_equal(tfm_task_open(&t, &c, tok, NULL, &err), 0);
    char d[256];
    tfm_task_describe(t, d, sizeof d);
    assert_non_null(strstr(d, "cut to 6 tokens"));
    tfm_rng r;
    tfm_rng_seed(&r, 1);
    for (int k = 0; k < 20; k++) {
        tfm_batch b;
        size_t n;
        assert_int_equal(tfm_task_next(t, &r, &b, &n, &err), 0);
        assert_true(b.T <= 6);
        for (int i = 0; i < b.B; i++) {
            assert_true(b.prefix_len[i] >= 2);
            assert_int_equal(b.inputs[i * b.T + b.prefix_len[i] - 1], eos);
        }
    }
    tfm_task_free(t);
    c.data.truncate = TFM_CONFIG_TRUNCATE_ERROR;
    assert_int_equal(tfm_task_open(&t, &c, tok, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "p.tsv:"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_exact),
        cmocka_unit_test(test_draw_uniform),
        cmocka_unit_test(test_task_random),
        cmocka_unit_test(test_task_pairs),
        cmocka_unit_test(test_pairs_fit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
