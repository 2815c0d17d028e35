/* The facade over WordPiece: loading BERT's vocab.txt, the specials table,
 * special-token splitting, and tokenizer.json written and read back. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "text/tokenizer.h"

static tfm_tokenizer *bert;

static int setup(void **state)
{
    const char *src = getenv("TFM_SRCDIR");
    tfm_buf p = {0};
    tfm_buf_printf(&p, "%s/testdata/bert/bert-base-uncased-vocab.txt", src ? src : SRCDIR);
    tfm_err err = {0};
    int rc = tfm_tokenizer_load(&bert, tfm_buf_cstr(&p), &err);
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    tfm_buf_free(&p);
    return rc;
}

static int teardown(void **state)
{
    tfm_tokenizer_free(bert);
    return 0;
}

static void test_bert_specials(void **state)
{
    const tfm_tok_specials *s = tfm_tokenizer_specials(bert);
    assert_int_equal(tfm_tokenizer_kind(bert), TFM_TOK_WORDPIECE);
    assert_int_equal(tfm_tokenizer_vocab_size(bert), 30522);
    assert_int_equal(s->pad, 0);
    assert_int_equal(s->unk, 100);
    assert_int_equal(s->cls, 101);
    assert_int_equal(s->sep, 102);
    assert_int_equal(s->mask, 103);
    assert_int_equal(s->bos, 101);
    assert_int_equal(s->eos, 102);
    assert_int_equal(tfm_tokenizer_merge_rank(bert, 2000), -1);

    tfm_ids ids = {0};
    const char *t = "[CLS] Hello [MASK] world[SEP]";
    tfm_tokenizer_encode(bert, NULL, t, strlen(t), 1, &ids);
    static const uint32_t want[] = {101, 7592, 103, 2088, 102};
    assert_int_equal(ids.len, 5);
    assert_memory_equal(ids.data, want, sizeof want);
    tfm_buf out = {0};
    tfm_err err = {0};
    assert_int_equal(tfm_tokenizer_decode(bert, ids.data, ids.len, 1, &out, &err), 0);
    assert_string_equal(tfm_buf_cstr(&out), "hello world");
    tfm_ids_clear(&ids);
    tfm_tokenizer_encode(bert, NULL, t, strlen(t), 0, &ids);
    assert_true(ids.len > 5); /* "[", "cls", "]", ... */
    tfm_buf_free(&out);
    tfm_ids_free(&ids);
}

static void test_bert_json(void **state)
{
    tfm_buf a = {0}, b = {0};
    tfm_tokenizer_to_json(bert, &a);
    tfm_tokenizer *t;
    tfm_err err = {0};
    if (tfm_tokenizer_from_json(&t, a.data, a.len, "bert.json", &err))
        fail_msg("%s", err.msg);
    tfm_tokenizer_to_json(t, &b);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    assert_int_equal(tfm_tokenizer_specials(t)->mask, 103);
    const char *s = "Caf\xc3\xa9 [MASK] \xe4\xbd\xa0\xe5\xa5\xbd, UNAFFABLE!";
    tfm_ids x = {0}, y = {0};
    tfm_tokenizer_encode(bert, NULL, s, strlen(s), 1, &x);
    tfm_tokenizer_encode(t, NULL, s, strlen(s), 1, &y);
    assert_int_equal(x.len, y.len);
    assert_memory_equal(x.data, y.data, x.len * 4);
    tfm_tokenizer_free(t);
    tfm_ids_free(&x);
    tfm_ids_free(&y);
    tfm_buf_free(&a);
    tfm_buf_free(&b);
}

/* A vocab.txt listing a piece twice: the later id wins for lookups (HF),
 * also after the hash table has grown. */
static void test_vocab_txt_duplicates(void **state)
{
    char path[] = "/tmp/tfm_tok_test_XXXXXX.txt";
    int fd = mkstemps(path, 4);
    assert_true(fd >= 0);
    FILE *fp = fdopen(fd, "w");
    fputs("[PAD]\n[UNK]\n", fp);
    for (int i = 0; i < 3000; i++)
        fprintf(fp, "w%d\n", i % 2000);
    fclose(fp);
    tfm_tokenizer *t;
    tfm_err err = {0};
    if (tfm_tokenizer_load(&t, path, &err)) {
        unlink(path);
        fail_msg("%s", err.msg);
    }
    unlink(path);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 3002);
    assert_int_equal(tfm_tokenizer_token_id(t, "w10", 3), 2002 + 10);
    assert_int_equal(tfm_tokenizer_token_id(t, "w1999", 5), 2 + 1999);
    size_t len;
    const char *p = tfm_tokenizer_piece(t, 12, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(p, "w10", 3);
    tfm_tokenizer_free(t);
}

/* -t model.safetensors: the tokenizer from the header's __metadata__. */
static void test_model_file(void **state)
{
    tfm_buf js = {0}, hdr = {0}, file = {0};
    tfm_tokenizer_to_json(bert, &js);
    tfm_buf_puts(&hdr, "{\"__metadata__\": {\"format\": \"pt\", \"tokenizer\": ");
    tfm_buf_put_json_string(&hdr, js.data, js.len);
    tfm_buf_puts(&hdr, "}}");
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hdr.len >> (8 * i));
    tfm_buf_append(&file, len8, 8);
    tfm_buf_append(&file, hdr.data, hdr.len);
    char path[] = "/tmp/tfm_tok_test_XXXXXX.safetensors";
    int fd = mkstemps(path, 12);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, file.data, file.len), (ssize_t)file.len);
    close(fd);
    tfm_tokenizer *t;
    tfm_err err = {0};
    int rc = tfm_tokenizer_load(&t, path, &err);
    if (rc)
        fail_msg("%s", err.msg);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 30522);
    assert_int_equal(tfm_tokenizer_specials(t)->mask, 103);
    tfm_tokenizer_free(t);
    /* a truncated header is an error naming the file */
    fd = open(path, O_WRONLY | O_TRUNC);
    assert_int_equal(write(fd, file.data, 20), 20);
    close(fd);
    assert_int_equal(tfm_tokenizer_load(&t, path, &err), -1);
    assert_non_null(strstr(err.msg, path));
    unlink(path);
    tfm_buf_free(&js);
    tfm_buf_free(&hdr);
    tfm_buf_free(&file);
}

/* BERT's truncate_seq_pair, literally: pop from the longer, B on a tie. */
static void pop_longer(size_t *a, size_t *b, size_t max)
{
    while (*a + *b > max) {
        if (*a > *b)
            (*a)--;
        else
            (*b)--;
    }
}

static void test_pair_truncate(void **state)
{
    (void)state;
    size_t ka, kb;
    /* a long B keeps the room A leaves, not nothing */
    assert_int_equal(tfm_tok_pair_truncate(10, 100, 61, &ka, &kb), 1);
    assert_int_equal(ka, 10);
    assert_int_equal(kb, 51);
    assert_int_equal(tfm_tok_pair_truncate(40, 50, 61, &ka, &kb), 1);
    assert_int_equal(ka, 31);
    assert_int_equal(kb, 30);
    assert_int_equal(tfm_tok_pair_truncate(3, 4, 7, &ka, &kb), 0);
    assert_int_equal(ka, 3);
    assert_int_equal(kb, 4);
    for (size_t na = 0; na < 24; na++)
        for (size_t nb = 0; nb < 24; nb++)
            for (size_t max = 0; max < 50; max++) {
                size_t a = na, b = nb;
                pop_longer(&a, &b, max);
                int cut = tfm_tok_pair_truncate(na, nb, max, &ka, &kb);
                if (ka != a || kb != b || cut != (na + nb > max))
                    fail_msg("%zu+%zu in %zu: got %zu+%zu, want %zu+%zu", na, nb, max, ka, kb,
                             a, b);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bert_specials),
        cmocka_unit_test(test_bert_json),
        cmocka_unit_test(test_vocab_txt_duplicates),
        cmocka_unit_test(test_model_file),
        cmocka_unit_test(test_pair_truncate),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
