/* A trainer's input (text/train_feed.h): lines and bytes counted across
 * reads and streams, a sample of all the lines equal to the lines
 * themselves, and a sample of k lines training on exactly k of them. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/buf.h"
#include "text/train_feed.h"

/* A pipe's read end holding text (small enough for the pipe's buffer). */
static int pipe_of(const char *text)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    assert_int_equal(write(fd[1], text, strlen(text)), (ssize_t)strlen(text));
    close(fd[1]);
    return fd[0];
}

/* The char tokenizer trained on the streams, as JSON; *lines, *bytes: what
 * the trainer was given. */
static void train(const char *const *streams, int n, uint64_t sample, uint64_t seed,
                  tfm_buf *json, uint64_t *lines, uint64_t *bytes, uint64_t *read_lines)
{
    tfm_tok_train_opts o = {.kind = TFM_TOK_CHAR, .lowercase = -1, .threads = 1};
    tfm_tok_trainer *tr = tfm_tok_trainer_new(&o);
    tfm_tok_feed f;
    tfm_tok_feed_init(&f, tr, sample, seed);
    double done = 0;
    tfm_err err = {0};
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        int fd = pipe_of(streams[i]);
        assert_int_equal(tfm_tok_feed_fd(&f, fd, "p", NULL, &done, &err), 0);
        close(fd);
        total += strlen(streams[i]);
    }
    assert_true(done == (double)total);
    *read_lines = f.lines;
    tfm_tok_feed_finish(&f, lines, bytes);
    tfm_tok_feed_free(&f);
    tfm_tokenizer *tok;
    assert_int_equal(tfm_tok_trainer_finish(tr, &tok, &err), 0);
    tfm_tok_trainer_free(tr);
    tfm_tokenizer_to_json(tok, json);
    tfm_tokenizer_free(tok);
}

static void test_all_lines(void **state)
{
    (void)state;
    const char *s[2] = {"aab\nbcc\n", "dd\ne"}; /* the last line without its newline */
    tfm_buf all = {0}, smp = {0};
    uint64_t lines, bytes, read;
    train(s, 2, 0, 0, &all, &lines, &bytes, &read);
    assert_int_equal(lines, 4);
    assert_int_equal(read, 4);
    assert_int_equal(bytes, 12);
    /* a sample as large as the input keeps every line: the same vocabulary
     * (the newline added to "e" is a character the others have) */
    train(s, 2, 10, 3, &smp, &lines, &bytes, &read);
    assert_int_equal(lines, 4);
    assert_int_equal(bytes, 12);
    assert_int_equal(all.len, smp.len);
    assert_memory_equal(all.data, smp.data, all.len);
    tfm_buf_free(&all);
    tfm_buf_free(&smp);
}

static void test_sample(void **state)
{
    (void)state;
    const char *s[1] = {"aaaa\nbbbb\ncccc\ndddd\n"};
    for (uint64_t seed = 1; seed <= 5; seed++) {
        tfm_buf json = {0}, again = {0};
        uint64_t lines, bytes, read;
        train(s, 1, 2, seed, &json, &lines, &bytes, &read);
        assert_int_equal(read, 4);
        assert_int_equal(lines, 2);
        assert_int_equal(bytes, 10);
        /* exactly two of the four letters made it into the vocabulary */
        tfm_tokenizer *tok;
        tfm_err err = {0};
        assert_int_equal(tfm_tokenizer_from_json(&tok, json.data, json.len, "j", &err), 0);
        int seen = 0;
        for (const char *c = "abcd"; *c; c++)
            seen += tfm_tokenizer_token_id(tok, c, 1) >= 0;
        assert_int_equal(seen, 2);
        tfm_tokenizer_free(tok);
        /* the same seed, the same sample */
        train(s, 1, 2, seed, &again, &lines, &bytes, &read);
        assert_int_equal(json.len, again.len);
        assert_memory_equal(json.data, again.data, json.len);
        tfm_buf_free(&json);
        tfm_buf_free(&again);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_lines),
        cmocka_unit_test(test_sample),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
