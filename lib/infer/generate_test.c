/* tfm-generate's prompt rules (tfm_gen_prompt_ids) on token ids, and which
 * tokenizer and end-of-text an encoder-decoder's sources get
 * (tfm_lm_sources_open): no weights needed. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "infer/generate.h"
#include "infer/translate.h"

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

/* A character tokenizer with the given specials. */
static tfm_tokenizer *char_tok(const char **specials, size_t n)
{
    tfm_tok_train_opts o = {.kind = TFM_TOK_CHAR, .lowercase = -1, .threads = 1,
                            .specials = specials, .n_specials = n};
    tfm_tok_trainer *tr = tfm_tok_trainer_new(&o);
    tfm_tok_trainer_feed(tr, "abc\n", 4);
    tfm_tokenizer *t;
    tfm_err err = {0};
    if (tfm_tok_trainer_finish(tr, &t, &err) < 0)
        fail_msg("%s", err.msg);
    tfm_tok_trainer_free(tr);
    return t;
}

static void test_sources(void **state)
{
    (void)state;
    tfm_lm lm; /* no file: no source tokenizer of its own */
    memset(&lm, 0, sizeof lm);
    lm.cfg.kind = TFM_KIND_ENCODER_DECODER;
    lm.eos = 5;
    tfm_lm_sources s;
    tfm_err err = {0};
    /* no tokenizer: ids only, ended by the model's end-of-text */
    assert_int_equal(tfm_lm_sources_open(&s, &lm, NULL, &err), 0);
    assert_null(s.tok);
    assert_null(s.owned);
    assert_int_equal(s.eos, 5);
    tfm_lm_sources_close(&s);
    /* the model's tokenizer without an end-of-text: still the model's */
    const char *unk[1] = {"<unk>"};
    lm.tok = char_tok(unk, 1);
    tfm_tok_scratch *sc = tfm_tok_scratch_new(lm.tok);
    assert_int_equal(tfm_lm_sources_open(&s, &lm, sc, &err), 0);
    assert_ptr_equal(s.tok, lm.tok);
    assert_ptr_equal(s.scratch, sc);
    assert_int_equal(s.eos, 5);
    tfm_lm_sources_close(&s);
    tfm_tok_scratch_free(sc);
    tfm_tokenizer_free(lm.tok);
    /* with one: the tokenizer's, whatever the model says */
    const char *eot[2] = {"<unk>", "<|endoftext|>"};
    lm.tok = char_tok(eot, 2);
    int64_t id = tfm_tokenizer_token_id(lm.tok, "<|endoftext|>", 13);
    assert_true(id >= 0 && id != 5);
    assert_int_equal(tfm_lm_sources_open(&s, &lm, NULL, &err), 0);
    assert_int_equal(s.eos, id);
    tfm_lm_sources_close(&s);
    tfm_tokenizer_free(lm.tok);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_ids),
        cmocka_unit_test(test_sources),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
