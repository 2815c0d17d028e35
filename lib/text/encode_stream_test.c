/* Streaming encoder and decoder: cut points, chunked == whole, thread
 * counts, formats, and the errors of decode. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/file.h"
#include "io/npy.h"
#include "text/encode_stream.h"
#include "text/tokenizer.h"

static const char corpus[] =
    "In the beginning God created the heaven and the earth.\n"
    "And the earth was without form, and void;   and darkness\twas upon the face.\n"
    "It's 3.14 o'clock, they'll say — naïve café, 你好，世界 🙂\r\n"
    "   leading spaces and trailing ones   \n"
    "\n"
    "numbers 12345 67890 and symbols !!! ??? ... ---\n";

static char tmpdir[64];

static tfm_tokenizer *train(tfm_tok_kind kind, uint32_t vocab)
{
    tfm_tok_train_opts o = {.kind = kind, .vocab_size = vocab, .lowercase = -1, .threads = 1};
    tfm_tok_trainer *t = tfm_tok_trainer_new(&o);
    for (int i = 0; i < 20; i++)
        tfm_tok_trainer_feed(t, corpus, sizeof corpus - 1);
    tfm_tokenizer *tok = NULL;
    tfm_err err = {0};
    assert_int_equal(tfm_tok_trainer_finish(t, &tok, &err), 0);
    tfm_tok_trainer_free(t);
    return tok;
}

/* Encodes text fed in pieces of `piece` bytes; returns the output file's
 * content. */
static void encode_to(const tfm_tokenizer *tok, tfm_enc_opts o, const char *text,
                      size_t len, size_t piece, tfm_buf *out)
{
    char path[128];
    snprintf(path, sizeof path, "%s/out", tmpdir);
    tfm_err err = {0};
    tfm_encoder *e;
    assert_int_equal(tfm_encoder_new(&e, tok, &o, path, &err), 0);
    for (size_t i = 0; i < len; i += piece)
        assert_int_equal(tfm_encoder_feed(e, text + i, len - i < piece ? len - i : piece, &err), 0);
    assert_int_equal(tfm_encoder_finish(e, &err), 0);
    tfm_encoder_free(e);
    tfm_map m;
    assert_int_equal(tfm_map_open(&m, path, &err), 0);
    tfm_buf_clear(out);
    tfm_buf_append(out, m.data, m.size);
    tfm_map_close(&m);
}

static void test_safe_cut(void **state)
{
    (void)state;
    assert_int_equal(tfm_enc_safe_cut("abc def", 7), 3);
    assert_int_equal(tfm_enc_safe_cut("abc def ghi", 11), 7);
    assert_int_equal(tfm_enc_safe_cut("abc  ", 5), 3);
    assert_int_equal(tfm_enc_safe_cut("a\nb", 3), 1);
    /* Llama 3's " ?[^\s\p{L}\p{N}]+[\r\n]*": no cut between "." and "\n" */
    assert_int_equal(tfm_enc_safe_cut("a. b.\nc", 8), 2);
    assert_int_equal(tfm_enc_safe_cut_after("x.\r\ny z", 8, 1), 5);
    assert_int_equal(tfm_enc_safe_cut("   ", 3), 0);
    assert_int_equal(tfm_enc_safe_cut("abcdef", 6), 0);
    assert_int_equal(tfm_enc_safe_cut("", 0), 0);
    /* only after an ASCII graphic character: a multi-byte character may be
     * whitespace itself (U+00A0, U+3000) */
    assert_int_equal(tfm_enc_safe_cut("\xc3\xa9 x", 4), 0);
    assert_int_equal(tfm_enc_safe_cut_after("ab cd ef", 8, 3), 5);
    assert_int_equal(tfm_enc_safe_cut_after("ab cd ef", 8, 1), 2);
    assert_int_equal(tfm_enc_safe_cut_after("abcdef", 6, 1), 0);
}

/* Whatever the piece size, round size and thread count, the output is the
 * same as encoding in one go. */
static void check_invariance(tfm_tokenizer *tok, tfm_enc_format fmt, int document)
{
    tfm_buf text = {0}, ref = {0}, got = {0};
    for (int i = 0; i < 300; i++)
        tfm_buf_append(&text, corpus, sizeof corpus - 1);
    tfm_enc_opts o = {.format = fmt, .document = document, .threads = 1,
                      .chunk = text.len + 1};
    encode_to(tok, o, text.data, text.len, text.len, &ref);
    assert_true(ref.len > 0);
    static const size_t chunks[] = {1, 5, 97, 4096, 70000};
    for (size_t c = 0; c < sizeof chunks / sizeof *chunks; c++)
        for (int th = 1; th <= 3; th++) {
            o.chunk = chunks[c];
            o.threads = th;
            encode_to(tok, o, text.data, text.len, 1000 + 7 * c, &got);
            assert_int_equal(got.len, ref.len);
            assert_memory_equal(got.data, ref.data, ref.len);
        }
    tfm_buf_free(&text);
    tfm_buf_free(&ref);
    tfm_buf_free(&got);
}

static void test_invariance_bpe(void **state)
{
    (void)state;
    tfm_tokenizer *tok = train(TFM_TOK_BPE, 400);
    check_invariance(tok, TFM_ENC_IDS, 0);
    check_invariance(tok, TFM_ENC_IDS, 1);
    check_invariance(tok, TFM_ENC_NPY, 1);
    check_invariance(tok, TFM_ENC_JSONL, 0);
    tfm_tokenizer_free(tok);
}

static void test_invariance_char(void **state)
{
    (void)state;
    tfm_tokenizer *tok = train(TFM_TOK_CHAR, 0);
    check_invariance(tok, TFM_ENC_PIECES, 0);
    check_invariance(tok, TFM_ENC_NPY, 1);
    tfm_tokenizer_free(tok);
}

static void test_formats(void **state)
{
    (void)state;
    tfm_tokenizer *tok = train(TFM_TOK_BPE, 300);
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    assert_true(sp->eos >= 0);
    tfm_buf out = {0};
    tfm_enc_opts o = {.format = TFM_ENC_IDS, .threads = 1};
    /* empty input: nothing; empty lines: empty output lines */
    encode_to(tok, o, "", 0, 1, &out);
    assert_int_equal(out.len, 0);
    encode_to(tok, o, "\n\n", 2, 1, &out);
    assert_int_equal(out.len, 2);
    /* the last line needs no newline */
    encode_to(tok, o, "a\nb", 3, 1, &out);
    assert_int_equal(memchr(out.data, '\n', out.len) != NULL, 1);
    assert_int_equal(out.data[out.len - 1], '\n');
    /* document mode: one line, and --add-special puts eos at its end */
    o.document = 1;
    o.add_special = 1;
    encode_to(tok, o, "a\nb", 3, 1, &out);
    char want[32];
    snprintf(want, sizeof want, " %lld\n", (long long)sp->eos);
    assert_true(out.len > strlen(want));
    assert_memory_equal(out.data + out.len - strlen(want), want, strlen(want));
    /* per-line npy: each line followed by eos */
    o = (tfm_enc_opts){.format = TFM_ENC_NPY, .threads = 1};
    encode_to(tok, o, "a\nb\n", 4, 1, &out);
    tfm_npy a;
    tfm_err err = {0};
    assert_int_equal(tfm_npy_parse(&a, out.data, out.len, "out", &err), 0);
    assert_int_equal(a.dtype, TFM_NPY_U16);
    assert_int_equal(a.count, 4);
    const uint16_t *v = a.data;
    assert_int_equal(v[1], sp->eos);
    assert_int_equal(v[3], sp->eos);
    tfm_npy_close(&a);
    tfm_buf_free(&out);
    tfm_tokenizer_free(tok);
}

static void test_decode_errors(void **state)
{
    (void)state;
    tfm_tokenizer *tok = train(TFM_TOK_BPE, 300);
    char in[] = "1 2 3\n4 70000 5\n";
    FILE *fp = fmemopen(in, strlen(in), "r");
    char *mem = NULL;
    size_t memlen = 0;
    FILE *out = open_memstream(&mem, &memlen);
    tfm_err err = {0};
    assert_int_equal(tfm_decode_stream(tok, fp, "ids.txt", out, "out", 0, &err), -1);
    assert_string_equal(err.msg, "ids.txt:2:3: id 70000 is outside the vocabulary (size 300)");
    fclose(fp);
    /* a jsonl line: the column of the bad element */
    char in2[] = "{\"ids\":[1,2,400]}\n";
    fp = fmemopen(in2, strlen(in2), "r");
    assert_int_equal(tfm_decode_stream(tok, fp, "x.jsonl", out, "out", 0, &err), -1);
    assert_non_null(strstr(err.msg, "x.jsonl:1:"));
    assert_non_null(strstr(err.msg, "id 400 is outside"));
    fclose(fp);
    /* an array element */
    uint32_t ids[] = {1, 2, 300};
    assert_int_equal(tfm_decode_array(tok, ids, 3, "a.npy", out, "out", 0, &err), -1);
    assert_string_equal(err.msg, "a.npy: element 2: id 300 is outside the vocabulary (size 300)");
    fclose(out);
    free(mem);
    tfm_tokenizer_free(tok);
}

/* decode(encode(x)) == x for byte-level BPE, invalid UTF-8 included. */
static void test_round_trip(void **state)
{
    (void)state;
    tfm_tokenizer *tok = train(TFM_TOK_BPE, 400);
    static const char text[] = "ok \xff\xfe bad \xc0\x80 utf8 \xed\xa0\x80 and  spaces\tend \n";
    tfm_buf out = {0};
    tfm_enc_opts o = {.format = TFM_ENC_NPY, .document = 1, .threads = 2, .chunk = 3};
    encode_to(tok, o, text, sizeof text - 1, 5, &out);
    tfm_npy a;
    tfm_err err = {0};
    assert_int_equal(tfm_npy_parse(&a, out.data, out.len, "out", &err), 0);
    char *mem = NULL;
    size_t memlen = 0;
    FILE *fp = open_memstream(&mem, &memlen);
    assert_int_equal(tfm_decode_npy(tok, &a, "out", fp, "mem", 0, &err), 0);
    fclose(fp);
    assert_int_equal(memlen, sizeof text - 1);
    assert_memory_equal(mem, text, memlen);
    free(mem);
    tfm_npy_close(&a);
    tfm_buf_free(&out);
    tfm_tokenizer_free(tok);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "%s", "/tmp/tfm-enc-test.XXXXXX");
    if (!mkdtemp(tmpdir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_safe_cut),
        cmocka_unit_test(test_invariance_bpe),
        cmocka_unit_test(test_invariance_char),
        cmocka_unit_test(test_formats),
        cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_round_trip),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/out", tmpdir);
    unlink(path);
    rmdir(tmpdir);
    return rc;
}
