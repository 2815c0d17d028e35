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

/* The ids and spans of text; fails unless the spans are want[0..n). */
static void spans_are(tfm_tokenizer *t, const char *text, const uint32_t (*want)[2], size_t n)
{
    tfm_ids ids = {0}, st = {0}, en = {0}, plain = {0};
    tfm_tokenizer_encode_spans(t, NULL, text, strlen(text), 0, &ids, &st, &en);
    tfm_tokenizer_encode(t, NULL, text, strlen(text), 0, &plain);
    assert_int_equal(ids.len, plain.len);
    assert_memory_equal(ids.data, plain.data, ids.len * sizeof *ids.data);
    assert_int_equal(st.len, ids.len);
    assert_int_equal(en.len, ids.len);
    if (ids.len != n)
        fail_msg("'%s': %zu tokens, want %zu", text, ids.len, n);
    for (size_t i = 0; i < n; i++)
        if (st.data[i] != want[i][0] || en.data[i] != want[i][1])
            fail_msg("'%s' token %zu: [%u, %u), want [%u, %u)", text, i, st.data[i],
                     en.data[i], want[i][0], want[i][1]);
    tfm_ids_free(&ids);
    tfm_ids_free(&st);
    tfm_ids_free(&en);
    tfm_ids_free(&plain);
}

/* Byte spans through the normalizers, as HF tokenizers' offsets (in
 * characters there) map them: a token covers the original characters its
 * normalized ones came from. */
/* A char model without an unknown token drops what it has no id for; the
 * programs learn of it through tfm_tokenizer_dropped and check_kept. */
static void test_dropped(void **state)
{
    (void)state;
    static const char *specials[] = {"<s>"};
    tfm_tok_train_opts o = {.kind = TFM_TOK_CHAR, .specials = specials, .n_specials = 1};
    tfm_tok_trainer *tr = tfm_tok_trainer_new(&o);
    tfm_tok_trainer_feed(tr, "abc\n", 4);
    tfm_tokenizer *ch = NULL;
    tfm_err err = {0};
    assert_int_equal(tfm_tok_trainer_finish(tr, &ch, &err), 0);
    tfm_tok_trainer_free(tr);
    size_t first = 99;
    assert_int_equal(tfm_tokenizer_dropped(ch, "cab", 3, &first), 0);
    assert_int_equal(first, 99);
    assert_int_equal(tfm_tokenizer_check_kept(ch, "cab", 3, &err), 0);
    assert_int_equal(tfm_tokenizer_dropped(ch, "cbA\xc3\xa9x", 6, &first), 3);
    assert_int_equal(first, 2);
    assert_int_equal(tfm_tokenizer_check_kept(ch, "cbA", 3, &err), -1);
    assert_non_null(strstr(err.msg, "'A' (U+0041) is not in the vocabulary"));
    /* an invalid byte is named as such */
    assert_int_equal(tfm_tokenizer_dropped(ch, "a\xff", 2, &first), 1);
    assert_int_equal(first, 1);
    assert_int_equal(tfm_tokenizer_check_kept(ch, "a\xff", 2, &err), -1);
    assert_non_null(strstr(err.msg, "byte 0xFF"));
    tfm_tokenizer_free(ch);
    /* with <unk> (the default) nothing is dropped */
    o.specials = NULL;
    o.n_specials = 0;
    tr = tfm_tok_trainer_new(&o);
    tfm_tok_trainer_feed(tr, "abc\n", 4);
    assert_int_equal(tfm_tok_trainer_finish(tr, &ch, &err), 0);
    tfm_tok_trainer_free(tr);
    assert_int_equal(tfm_tokenizer_dropped(ch, "cbA", 3, NULL), 0);
    tfm_tokenizer_free(ch);
}

static void test_spans(void **state)
{
    (void)state;
    /* BERT uncased: "cafe and en ##os"; é (2 bytes) gives the e of cafe */
    static const uint32_t cafe[][2] = {{0, 5}, {6, 9}, {10, 12}, {12, 14}};
    spans_are(bert, "Caf\xc3\xa9 and Enos", cafe, 4);
    /* e + U+0301: the mark is dropped, cafe ends after the e */
    static const uint32_t comb[][2] = {{0, 4}, {7, 8}};
    spans_are(bert, "Cafe\xcc\x81 x", comb, 2);
    /* U+0130 (2 bytes) -> i; U+1E9E (3 bytes) -> U+00DF (2 bytes):
     * "istanbul st ##ra\xc3\x9fe" */
    static const uint32_t len_change[][2] = {{0, 9}, {10, 12}, {12, 18}};
    spans_are(bert, "\xc4\xb0stanbul Stra\xe1\xba\x9e" "e", len_change, 3);
    /* a dropped control character inside a word, CJK ideographs spaced */
    static const uint32_t ctl[][2] = {{0, 3}, {3, 6}, {6, 9}};
    spans_are(bert, "a\x01" "b\xe4\xb8\xad\xe6\x96\x87", ctl, 3);

    /* the facade's Lowercase (char and BPE): U+0130 -> "i" U+0307 (3 bytes), both
     * spanning the 2 bytes of U+0130; U+1E9E -> U+00DF */
    tfm_tok_train_opts o = {.kind = TFM_TOK_CHAR, .lowercase = 1};
    tfm_tok_trainer *tr = tfm_tok_trainer_new(&o);
    const char *corpus = "i\xcc\x87 \xc3\x9f a";
    tfm_tok_trainer_feed(tr, corpus, strlen(corpus));
    tfm_tokenizer *ch = NULL;
    tfm_err err = {0};
    assert_int_equal(tfm_tok_trainer_finish(tr, &ch, &err), 0);
    tfm_tok_trainer_free(tr);
    static const uint32_t low[][2] = {{0, 2}, {0, 2}, {2, 5}, {5, 6}};
    spans_are(ch, "\xc4\xb0\xe1\xba\x9e" "A", low, 4);
    tfm_tokenizer_free(ch);
    o.kind = TFM_TOK_BPE;
    o.vocab_size = 300;
    tr = tfm_tok_trainer_new(&o);
    tfm_tok_trainer_feed(tr, corpus, strlen(corpus));
    assert_int_equal(tfm_tok_trainer_finish(tr, &ch, &err), 0);
    tfm_tok_trainer_free(tr);
    /* byte-level: whatever the merges, the tokens' bytes run through
     * "i\xcc\x87\xc3\x9f" "a" and map to whole characters */
    tfm_ids ids = {0}, st = {0}, en = {0};
    const char *in = "\xc4\xb0\xe1\xba\x9e" "A";
    tfm_tokenizer_encode_spans(ch, NULL, in, strlen(in), 0, &ids, &st, &en);
    assert_true(ids.len >= 1);
    assert_int_equal(st.data[0], 0);
    assert_int_equal(en.data[ids.len - 1], 6);
    for (size_t i = 0; i < ids.len; i++) {
        uint32_t a = st.data[i], b = en.data[i];
        assert_true(a == 0 || a == 2 || a == 5);
        assert_true(b == 2 || b == 5 || b == 6);
        assert_true(a < b);
        if (i)
            assert_true(a >= st.data[i - 1]);
    }
    tfm_ids_free(&ids);
    tfm_ids_free(&st);
    tfm_ids_free(&en);
    tfm_tokenizer_free(ch);
}

/* A Unigram tokenizer.json as the tokenizers library writes it: Metaspace's
 * prepend_scheme always adds no "\xe2\x96\x81" to a text that starts with a
 * space, first none after an added token either; split (the default)
 * segments each "\xe2\x96\x81" pre-token alone, so "\xe2\x96\x81\xe2\x96\x81" (a piece
 * of the whole text) is not found across two. */
static void test_metaspace_schemes(void **state)
{
    (void)state;
    static const struct {
        const char *scheme, *split, *text;
        uint32_t want[4];
        size_t n;
    } cases[] = {
        {"always", "false", "a", {3, 4}, 2},        /* ▁ a */
        {"always", "false", " a", {3, 4}, 2},       /* no second ▁ */
        {"always", "false", "  a", {5, 4}, 2},      /* ▁▁ a */
        {"always", "true", "  a", {3, 3, 4}, 3},    /* ▁ | ▁a split: ▁ ▁ a */
        {"always", "false", "</s>a", {2, 3, 4}, 3}, /* </s> ▁ a */
        {"first", "false", "</s>a", {2, 4}, 2},     /* </s> a */
        {"first", "false", "a</s>a", {3, 4, 2, 4}, 4},
        {"never", "false", "a", {4}, 1},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        char js[1024];
        snprintf(js, sizeof js,
                 "{\"added_tokens\": [{\"id\": 2, \"content\": \"</s>\", \"special\": true}],"
                 " \"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\", "
                 "\"replacement\": \"\xe2\x96\x81\", \"prepend_scheme\": \"%s\", \"split\": %s},"
                 " \"model\": {\"type\": \"Unigram\", \"unk_id\": 0, \"vocab\": [[\"<unk>\", 0],"
                 " [\"<s>\", 0], [\"</s>\", 0], [\"\xe2\x96\x81\", -1], [\"a\", -1],"
                 " [\"\xe2\x96\x81\xe2\x96\x81\", -1.5]]}}",
                 cases[k].scheme, cases[k].split);
        tfm_tokenizer *t;
        tfm_err err = {0};
        if (tfm_tokenizer_from_json(&t, js, strlen(js), "ms.json", &err))
            fail_msg("%s", err.msg);
        tfm_ids ids = {0};
        tfm_tokenizer_encode(t, NULL, cases[k].text, strlen(cases[k].text), 1, &ids);
        if (ids.len != cases[k].n || memcmp(ids.data, cases[k].want, ids.len * sizeof *ids.data))
            fail_msg("%s split %s '%s': %zu ids, first %u", cases[k].scheme, cases[k].split,
                     cases[k].text, ids.len, ids.len ? ids.data[0] : 0);
        tfm_ids_free(&ids);
        tfm_tokenizer_free(t);
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
        cmocka_unit_test(test_spans),
        cmocka_unit_test(test_dropped),
        cmocka_unit_test(test_metaspace_schemes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
