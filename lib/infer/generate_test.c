/* tfm-generate's prompt rules (tfm_gen_prompt_ids) on token ids: no
 * tokenizer or weights needed. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "infer/generate.h"

static void test_prompt_ids(void **state)
{
    (void)state;
    tfm_lm lm;
    memset(&lm, 0, sizeof lm);
    lm.cfg.kind = TFM_KIND_DECODER;
    lm.cfg.vocab_size = 100;
    lm.eos = 7;
    tfm_gen_prompt p = {.ids = 1, .src_eos = -1};
    tfm_ids out = {0};
    size_t cut = 5;
    tfm_err err = {0};
    assert_int_equal(tfm_gen_prompt_ids(&lm, &p, " 12, 7\t99\n", 10, "prompt 1", &out, &cut,
                                        &err), 0);
    assert_int_equal(out.len, 3);
    assert_int_equal(out.data[0], 12);
    assert_int_equal(out.data[2], 99);
    assert_int_equal(cut, 0);
    /* an empty prompt starts a text from end-of-text */
    assert_int_equal(tfm_gen_prompt_ids(&lm, &p, "", 0, "prompt 2", &out, &cut, &err), 0);
    assert_int_equal(out.len, 1);
    assert_int_equal(out.data[0], 7);
    assert_int_equal(tfm_gen_prompt_ids(&lm, &p, "3 100", 5, "prompt 3", &out, &cut, &err), -1);
    assert_string_equal(err.msg, "prompt 3: '100' is not a token id below 100");
    lm.eos = -1;
    assert_int_equal(tfm_gen_prompt_ids(&lm, &p, " ", 1, "prompt 4", &out, &cut, &err), -1);
    assert_string_equal(err.msg, "prompt 4 is empty, and the model has no end-of-text token "
                                 "to start from");
    /* an encoder-decoder's source ends with end-of-text, cut to block_size */
    lm.cfg.kind = TFM_KIND_ENCODER_DECODER;
    lm.cfg.src_vocab_size = 10;
    lm.cfg.block_size = 3;
    p.src_eos = 2;
    p.truncate = 1;
    assert_int_equal(tfm_gen_prompt_ids(&lm, &p, "5 6 7 8", 7, "source 1", &out, &cut, &err), 0);
    assert_int_equal(out.len, 3);
    assert_int_equal(out.data[1], 6);
    assert_int_equal(out.data[2], 2);
    assert_int_equal(cut, 2);
    assert_int_equal(tfm_gen_prompt_ids(&lm, &p, "12", 2, "source 2", &out, &cut, &err), -1);
    assert_string_equal(err.msg, "source 2: '12' is not a token id below 10");
    tfm_ids_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_ids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
