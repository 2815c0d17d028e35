/* tfm_translate_greedy against a greedy loop written here over tfm_infer
 * (encode, the start token, argmax until end-of-text or the length limit),
 * for several batch sizes; and the source rules (end-of-text appended,
 * truncation, invalid UTF-8). */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "infer/generate.h"
#include "infer/sample.h"
#include "infer/translate.h"
#include "model/decode.h"
#include "model/transformer.h"

enum { V = 23, EOS = 2, START = 1, N = 7 };

static void by_hand(const tfm_model_config *c, const tfm_weights *w, const tfm_ids *src,
                    int max_new, tfm_ids *out)
{
    tfm_infer g;
    tfm_err err = {0};
    assert_int_equal(tfm_infer_init(&g, c, w, 1, 64, &err), 0);
    assert_int_equal(tfm_infer_encode(&g, 0, src->data, (int)src->len, &err), 0);
    float logits[V];
    uint32_t tok = START;
    assert_int_equal(tfm_infer_prefill(&g, 0, &tok, 1, logits, &err), 0);
    for (;;) {
        tok = tfm_argmax(logits, V);
        if (tok == EOS)
            break;
        tfm_ids_push(out, tok);
        if ((int)out->len >= max_new)
            break;
        int slot = 0;
        assert_int_equal(tfm_infer_step(&g, 1, &tok, &slot, logits, &err), 0);
    }
    tfm_infer_free(&g);
}

static void test_greedy_equals_loop(void **state)
{
    (void)state;
    for (int post = 0; post < 2; post++) {
        tfm_model_config c;
        tfm_model_config_default(&c);
        c.kind = TFM_KIND_ENCODER_DECODER;
        c.pos = post ? TFM_POS_SINUSOIDAL : TFM_POS_ROPE;
        c.n_layer = 2;
        c.n_head = 2;
        c.n_embd = 16;
        c.block_size = 64;
        c.vocab_size = V;
        c.ln = post ? TFM_LN_POST : TFM_LN_PRE;
        tfm_model m;
        tfm_err err = {0};
        assert_int_equal(tfm_model_init(&m, &c, &err), 0);
        tfm_model_init_weights(&m, 3 + (uint64_t)post);
        for (int i = 0; i < m.n_table; i++)
            if (m.table[i].ndim == 2)
                for (size_t j = 0; j < m.table[i].numel; j++)
                    m.params[m.table[i].offset + j] *= post ? 4.0f : 30.0f;
        /* a likelier end-of-text, so that translations end there too */
        for (int i = 0; i < m.n_table; i++)
            if (strcmp(m.table[i].name, "wte.weight") == 0)
                for (int j = 0; j < c.n_embd; j++)
                    m.params[m.table[i].offset + EOS * (size_t)c.n_embd + j] *= 3.0f;
        tfm_weights w;
        assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
        tfm_ids src[N] = {{0}}, want[N] = {{0}}, got[N] = {{0}};
        tfm_rng r;
        tfm_rng_seed(&r, 9);
        int ends = 0;
        for (int i = 0; i < N; i++) {
            int len = 1 + i * 3 % 8;
            for (int j = 0; j < len; j++)
                tfm_ids_push(&src[i], 3 + (uint32_t)(tfm_rng_u64(&r) % (V - 3)));
            tfm_ids_push(&src[i], EOS);
            by_hand(&m.cfg, &w, &src[i], (int)src[i].len + 5, &want[i]);
            ends += (int)want[i].len < (int)src[i].len + 5;
        }
        for (int batch = 1; batch <= 8; batch *= 2) {
            assert_int_equal(tfm_translate_greedy(&m.cfg, &w, START, EOS, src, N, batch, 1, 5,
                                                  got, &err), 0);
            for (int i = 0; i < N; i++) {
                assert_int_equal(got[i].len, want[i].len);
                assert_memory_equal(got[i].data, want[i].data, want[i].len * sizeof(uint32_t));
            }
        }
        assert_true(ends > 0); /* some end at end-of-text, before the limit */
        /* a source past the context is an error, not a crash */
        tfm_ids big = {0};
        for (int j = 0; j < 70; j++)
            tfm_ids_push(&big, 3);
        assert_int_equal(tfm_translate_greedy(&m.cfg, &w, START, EOS, &big, 1, 4, 1, 5, got,
                                              &err), -1);
        assert_non_null(strstr(err.msg, "longer than the encoder's context"));
        tfm_ids_free(&big);
        for (int i = 0; i < N; i++) {
            tfm_ids_free(&src[i]);
            tfm_ids_free(&want[i]);
            tfm_ids_free(&got[i]);
        }
        tfm_weights_free(&w);
        tfm_model_free(&m);
    }
}

static void test_fit(void **state)
{
    (void)state;
    tfm_ids s = {0};
    tfm_err err = {0};
    size_t cut = 9;
    for (uint32_t i = 0; i < 5; i++)
        tfm_ids_push(&s, 10 + i);
    tfm_ids_push(&s, EOS);
    assert_int_equal(tfm_translate_fit(&s, EOS, 6, 0, 1, &cut, &err), 0);
    assert_int_equal(cut, 0);
    assert_int_equal(tfm_translate_fit(&s, EOS, 4, 0, 1, &cut, &err), -1);
    assert_non_null(strstr(err.msg, "the source is 6 tokens"));
    assert_non_null(strstr(err.msg, "longer than the encoder's context (4)"));
    /* a prefix LM's input: the model's context */
    assert_int_equal(tfm_translate_fit(&s, EOS, 4, 0, 0, &cut, &err), -1);
    assert_non_null(strstr(err.msg, "the input is 6 tokens"));
    assert_non_null(strstr(err.msg, "longer than the model's context (4)"));
    assert_int_equal(tfm_translate_fit(&s, EOS, 4, 1, 1, &cut, &err), 0);
    assert_int_equal(cut, 2);
    const uint32_t want[] = {10, 11, 12, EOS};
    assert_int_equal(s.len, 4);
    assert_memory_equal(s.data, want, sizeof want);
    tfm_ids_free(&s);
}

/* --profile's rates: the MLP's weights are the model's d_ff wide, not 4·C. */
static void test_profile_bytes(void **state)
{
    (void)state;
    tfm_model_config c;
    memset(&c, 0, sizeof c);
    c.n_embd = 8;
    c.n_head = 2;
    c.n_layer = 2;
    c.vocab_size = 10;
    c.d_ff = 12;
    double b[TFM_PROF_N];
    tfm_gen_profile_bytes(&c, 4, b);
    assert_true(b[TFM_PROF_FC] == 2 * 8 * 12 * 4 && b[TFM_PROF_FCPROJ] == 2 * 12 * 8 * 4);
    assert_true(b[TFM_PROF_QKV] == 2 * 8 * 24 * 4 && b[TFM_PROF_HEAD] == 10 * 8 * 4);
    assert_true(b[TFM_PROF_ATTN] == 0 && b[TFM_PROF_OTHER] == 0);
    c.d_ff = 0; /* the default: 4·C */
    tfm_gen_profile_bytes(&c, 2, b);
    assert_true(b[TFM_PROF_FC] == 2 * 8 * 32 * 2);
    c.head_dim = 3; /* q|k|v [C, 3·2·3], the projection [2·3, C] */
    tfm_gen_profile_bytes(&c, 4, b);
    assert_true(b[TFM_PROF_QKV] == 2 * 8 * 18 * 4 && b[TFM_PROF_PROJ] == 2 * 6 * 8 * 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_equals_loop),
        cmocka_unit_test(test_fit),
        cmocka_unit_test(test_profile_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
