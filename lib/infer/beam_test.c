/* Beam search on toy models whose "cache" is the token history of each slot:
 * a wrong slot copy changes the history and so the answer. */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "infer/beam.h"
#include "infer/sample.h"

enum { MAXS = 128, MAXL = 16 };

typedef struct toy {
    uint32_t vocab;
    uint64_t seed;
    uint32_t hist[MAXS][MAXL];
    size_t len[MAXS];
    int nslots;
    size_t calls, max_rows; /* step calls, most rows in one */
    /* logprobs of the next token after hist[0..len) */
    void (*dist)(const struct toy *t, const uint32_t *h, size_t len, float *lp);
} toy;

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Pseudo-random but a pure function of the history. */
static void random_dist(const toy *t, const uint32_t *h, size_t len, float *lp)
{
    uint64_t k = t->seed;
    for (size_t i = 0; i < len; i++)
        k = mix(k ^ (h[i] + 1));
    for (uint32_t v = 0; v < t->vocab; v++) {
        k = mix(k + v);
        lp[v] = (float)((k >> 11) * 0x1.0p-53 * 4.0);
    }
    tfm_log_softmax(lp, t->vocab, lp);
}

static int toy_step(void *ctx, size_t n, const uint32_t *tokens, const int *slots,
                    float *logprobs, tfm_err *err)
{
    toy *t = ctx;
    t->calls++;
    if (n > t->max_rows)
        t->max_rows = n;
    for (size_t i = 0; i < n; i++) {
        int s = slots[i];
        assert_true(s >= 0 && s < t->nslots);
        for (size_t j = 0; j < i; j++)
            assert_int_not_equal(slots[j], s); /* one hypothesis per slot */
        assert_true(t->len[s] < MAXL);
        t->hist[s][t->len[s]++] = tokens[i];
        t->dist(t, t->hist[s], t->len[s], logprobs + i * t->vocab);
    }
    return 0;
}

static int toy_copy(void *ctx, int dst, int src, tfm_err *err)
{
    toy *t = ctx;
    assert_int_not_equal(dst, src);
    memcpy(t->hist[dst], t->hist[src], sizeof t->hist[0]);
    t->len[dst] = t->len[src];
    return 0;
}

static void run(toy *t, const tfm_beam_opts *o, tfm_beam_result *res)
{
    memset(t->len, 0, sizeof t->len);
    t->nslots = o->beam;
    float first[64];
    t->dist(t, NULL, 0, first);
    tfm_beam_model m = {t, t->vocab, toy_step, toy_copy};
    tfm_err err = {0};
    assert_int_equal(tfm_beam_search(&m, o, first, res, &err), 0);
}

static void test_beam1_is_greedy(void **state)
{
    for (uint64_t seed = 1; seed <= 20; seed++) {
        toy t = {.vocab = 7, .seed = seed, .dist = random_dist};
        tfm_beam_opts o;
        tfm_beam_opts_default(&o);
        o.beam = 1;
        o.max_len = 10;
        o.eos = 3;
        tfm_beam_result r;
        run(&t, &o, &r);
        /* greedy by hand */
        uint32_t h[MAXL];
        size_t len = 0;
        float lp[64];
        double sum = 0;
        for (;;) {
            random_dist(&t, h, len, lp);
            uint32_t v = tfm_argmax(lp, t.vocab);
            sum += lp[v];
            h[len++] = v;
            if (v == 3 || len == 10)
                break;
        }
        assert_int_equal(r.n, 1);
        assert_int_equal(r.hyps[0].len, len);
        assert_memory_equal(r.hyps[0].tokens, h, len * sizeof *h);
        assert_true(fabs(r.hyps[0].sum - sum) < 1e-4);
        assert_int_equal(r.hyps[0].finish, h[len - 1] == 3 ? TFM_FINISH_EOS : TFM_FINISH_LENGTH);
        tfm_beam_result_free(&r);
    }
}

/* Greedy takes A (0.6) and is then stuck with 0.34; B (0.4) then
 * end-of-text (0.9) is worth 0.36. */
static void garden_path(const toy *t, const uint32_t *h, size_t len, float *lp)
{
    double p[3];
    if (len == 0) {
        p[0] = 0.6; p[1] = 0.4; p[2] = 1e-9;
    } else if (h[0] == 0) {
        p[0] = 0.34; p[1] = 0.33; p[2] = 0.33;
    } else {
        p[0] = 0.05; p[1] = 0.05; p[2] = 0.9;
    }
    for (int i = 0; i < 3; i++)
        lp[i] = (float)log(p[i]);
}

static void test_beam_beats_greedy(void **state)
{
    toy t = {.vocab = 3, .dist = garden_path};
    tfm_beam_opts o;
    tfm_beam_opts_default(&o);
    o.alpha = 0;
    o.max_len = 2;
    o.eos = 2;
    o.beam = 1;
    tfm_beam_result r;
    run(&t, &o, &r);
    assert_int_equal(r.hyps[0].tokens[0], 0); /* greedy's path */
    tfm_beam_result_free(&r);
    o.beam = 2;
    run(&t, &o, &r);
    assert_int_equal(r.hyps[0].len, 2);
    assert_int_equal(r.hyps[0].tokens[0], 1);
    assert_int_equal(r.hyps[0].tokens[1], 2);
    assert_int_equal(r.hyps[0].finish, TFM_FINISH_EOS);
    assert_true(fabs(r.hyps[0].sum - log(0.36)) < 1e-5);
    tfm_beam_result_free(&r);
}

/* Exhaustive search over every sequence (ending in end-of-text or at the
 * length limit): the best normalised score and its tokens. */
static void brute(const toy *t, uint32_t *h, size_t len, double sum, size_t L,
                  uint32_t eos, float alpha, tfm_lenpen lenpen, double *best,
                  uint32_t *best_h, size_t *best_len)
{
    float lp[64];
    t->dist(t, h, len, lp);
    for (uint32_t v = 0; v < t->vocab; v++) {
        h[len] = v;
        double s = sum + lp[v];
        if (v == eos || len + 1 == L) {
            double sc = lenpen == TFM_LENPEN_GNMT ? s / pow((6.0 + len) / 6.0, alpha)
                                                  : s / pow((double)(len + 1), alpha);
            if (sc > *best) {
                *best = sc;
                memcpy(best_h, h, sizeof *h * (len + 1));
                *best_len = len + 1;
            }
        } else {
            brute(t, h, len + 1, s, L, eos, alpha, lenpen, best, best_h, best_len);
        }
    }
}

static void test_wide_beam_is_exact(void **state)
{
    /* With a beam as wide as the number of sequences, beam search is
     * exhaustive; early stopping must not change its answer. */
    const float alphas[] = {0, 0.6f, 1.0f};
    for (uint64_t seed = 1; seed <= 12; seed++)
        for (int ai = 0; ai < 6; ai++) {
            toy t = {.vocab = 4, .seed = seed * 77, .dist = random_dist};
            tfm_beam_opts o;
            tfm_beam_opts_default(&o);
            o.beam = 64;
            o.nbest = 3;
            o.max_len = 4;
            o.eos = 0;
            o.alpha = alphas[ai % 3];
            o.lenpen = ai < 3 ? TFM_LENPEN_POWER : TFM_LENPEN_GNMT;
            tfm_beam_result r;
            run(&t, &o, &r);
            uint32_t h[MAXL], bh[MAXL];
            size_t bl = 0;
            double best = -INFINITY;
            brute(&t, h, 0, 0, 4, 0, o.alpha, o.lenpen, &best, bh, &bl);
            assert_int_equal(r.n, 3);
            assert_true(fabs(r.hyps[0].score - best) < 1e-5);
            assert_int_equal(r.hyps[0].len, bl);
            assert_memory_equal(r.hyps[0].tokens, bh, bl * sizeof *bh);
            for (size_t i = 1; i < r.n; i++)
                assert_true(r.hyps[i].score <= r.hyps[i - 1].score);
            /* the reported per-token log-probs add up to the sum */
            for (size_t i = 0; i < r.n; i++) {
                double s = 0;
                for (size_t j = 0; j < r.hyps[i].len; j++)
                    s += r.hyps[i].logprobs[j];
                assert_true(fabs(s - r.hyps[i].sum) < 1e-4);
            }
            tfm_beam_result_free(&r);
        }
}

static void test_slots_follow_hypotheses(void **state)
{
    /* A narrower beam forks and drops hypotheses all the time; each step
     * the toy checks nothing but histories, so compare the returned
     * tokens' log-probs with the model's own on the returned sequence. */
    for (uint64_t seed = 1; seed <= 30; seed++) {
        toy t = {.vocab = 9, .seed = seed, .dist = random_dist};
        tfm_beam_opts o;
        tfm_beam_opts_default(&o);
        o.beam = 4;
        o.nbest = 4;
        o.max_len = 12;
        o.eos = 5;
        tfm_beam_result r;
        run(&t, &o, &r);
        assert_true(r.n >= 1);
        for (size_t i = 0; i < r.n; i++) {
            const tfm_beam_hyp *hy = &r.hyps[i];
            float lp[64];
            for (size_t j = 0; j < hy->len; j++) {
                random_dist(&t, hy->tokens, j, lp);
                assert_true(fabs(lp[hy->tokens[j]] - hy->logprobs[j]) < 1e-6);
            }
        }
        tfm_beam_result_free(&r);
    }
}

/* Search i's "source": a prefix of its first slot's history, as
 * tfm_infer_encode leaves a source in a slot (copies carry it along). */
static void put_source(toy *t, int slot, uint64_t i)
{
    t->len[slot] = 1 + i % 3;
    for (size_t j = 0; j < t->len[slot]; j++)
        t->hist[slot][j] = (uint32_t)(100 + 7 * i + j);
}

static void test_many_equal_alone(void **state)
{
    /* Several searches stepping together (different sources, lengths
     * limits, slot ranges) give exactly what each gives alone. */
    enum { N = 6, B = 3 };
    for (uint64_t seed = 1; seed <= 20; seed++)
        for (int pen = 0; pen < 2; pen++) {
            tfm_beam_opts o;
            tfm_beam_opts_default(&o);
            o.beam = B;
            o.nbest = 2;
            o.max_len = 9;
            o.eos = 4;
            o.lenpen = pen ? TFM_LENPEN_GNMT : TFM_LENPEN_POWER;
            toy t = {.vocab = 11, .seed = seed, .dist = random_dist, .nslots = N * B + 2};
            tfm_beam_model m = {&t, t.vocab, toy_step, toy_copy};
            tfm_err err = {0};
            float first[N][64];
            tfm_beam_task tasks[N];
            tfm_beam_result alone[N], many[N];
            for (int i = 0; i < N; i++) {
                memset(t.len, 0, sizeof t.len);
                put_source(&t, 0, (uint64_t)i);
                t.dist(&t, t.hist[0], t.len[0], first[i]);
                tfm_beam_opts oi = o;
                oi.max_len = 4 + i;
                assert_int_equal(tfm_beam_search(&m, &oi, first[i], &alone[i], &err), 0);
            }
            size_t calls_alone = t.calls;
            memset(t.len, 0, sizeof t.len);
            t.calls = t.max_rows = 0;
            for (int i = 0; i < N; i++) {
                /* out of order, with a gap: slot ranges are the tasks' own */
                int slot0 = 2 + (N - 1 - i) * B;
                put_source(&t, slot0, (uint64_t)i);
                tasks[i] = (tfm_beam_task){first[i], slot0, 4 + i};
            }
            assert_int_equal(tfm_beam_search_many(&m, &o, tasks, N, many, &err), 0);
            for (int i = 0; i < N; i++) {
                assert_int_equal(many[i].n, alone[i].n);
                assert_int_equal(many[i].steps, alone[i].steps);
                for (size_t k = 0; k < many[i].n; k++) {
                    const tfm_beam_hyp *a = &alone[i].hyps[k], *b = &many[i].hyps[k];
                    assert_int_equal(b->len, a->len);
                    assert_memory_equal(b->tokens, a->tokens, a->len * sizeof *a->tokens);
                    assert_memory_equal(b->logprobs, a->logprobs, a->len * sizeof *a->logprobs);
                    assert_true(b->sum == a->sum && b->score == a->score);
                    assert_int_equal(b->finish, a->finish);
                }
                tfm_beam_result_free(&alone[i]);
                tfm_beam_result_free(&many[i]);
            }
            /* and they did step together */
            assert_true(t.calls < calls_alone);
            assert_true(t.max_rows > B);
        }
}

static void test_bad_opts(void **state)
{
    toy t = {.vocab = 3, .dist = garden_path};
    float first[3];
    garden_path(&t, NULL, 0, first);
    tfm_beam_model m = {&t, 3, toy_step, toy_copy};
    tfm_beam_opts o;
    tfm_beam_opts_default(&o);
    o.nbest = 5;
    tfm_beam_result r;
    tfm_err err = {0};
    assert_int_equal(tfm_beam_search(&m, &o, first, &r, &err), -1);
    assert_non_null(strstr(err.msg, "nbest"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_beam1_is_greedy),
        cmocka_unit_test(test_beam_beats_greedy),
        cmocka_unit_test(test_wide_beam_is_exact),
        cmocka_unit_test(test_slots_follow_hypotheses),
        cmocka_unit_test(test_many_equal_alone),
        cmocka_unit_test(test_bad_opts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
