/* Instruction data (data/chat.h): reading TRL's formats, ChatML's
 * rendering, the completion masks, and the template check, on cases small
 * enough to check by hand (GPT-2's own tokenizer from testdata/gpt2). */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "data/chat.h"

static tfm_tokenizer *gpt2;

static int setup(void **state)
{
    (void)state;
    const char *s = getenv("TFM_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/testdata/gpt2", s ? s : SRCDIR);
    tfm_err err = {0};
    if (tfm_tokenizer_load(&gpt2, path, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tfm_tokenizer_free(gpt2);
    return 0;
}

static void read_ok(tfm_chat_data *d, const char *text)
{
    tfm_err err = {0};
    int rc = tfm_chat_read(d, text, strlen(text), "t.jsonl", 0, &err);
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
}

static void read_bad(const char *text, const char *want)
{
    tfm_chat_data d;
    tfm_err err = {0};
    assert_int_equal(tfm_chat_read(&d, text, strlen(text), "t.jsonl", 0, &err), -1);
    if (!strstr(err.msg, want))
        fprintf(stderr, "got '%s', want '%s'\n", err.msg, want);
    assert_non_null(strstr(err.msg, want));
    assert_int_equal(d.n, 0);
}

static void test_render(void **state)
{
    (void)state;
    tfm_chat_msg m[2] = {{"user", "Hi"}, {"assistant", "Yo"}};
    tfm_buf b = {0};
    size_t spans[4], n;
    tfm_chat_render(m, 2, 0, &b, spans, &n);
    const char *want = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n";
    assert_string_equal(tfm_buf_cstr(&b), want);
    assert_int_equal(n, 1);
    assert_int_equal(spans[1] - spans[0], strlen("Yo<|im_end|>"));
    assert_memory_equal(b.data + spans[0], "Yo<|im_end|>", spans[1] - spans[0]);
    tfm_buf_clear(&b);
    tfm_chat_render(m, 1, 1, &b, NULL, NULL);
    assert_string_equal(tfm_buf_cstr(&b), "<|im_start|>user\nHi<|im_end|>\n"
                                          "<|im_start|>assistant\n");
    tfm_buf_clear(&b);
    tfm_chat_render_prompt("Hi", 2, &b);
    assert_string_equal(tfm_buf_cstr(&b), "<|im_start|>user\nHi<|im_end|>\n"
                                          "<|im_start|>assistant\n");
    tfm_buf_free(&b);
}

static void test_read_errors(void **state)
{
    (void)state;
    read_bad("{\"prompt\": \"a\", \"completion\": \"b\"}\n\n{\"prompt\": \"a\"}\n",
             "t.jsonl:3:");
    read_bad("{\"prompt\": \"a\", \"completion\": \"b\", \"x\": 1}\n", "unknown key 'x'");
    read_bad("{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n",
             "no assistant message");
    read_bad("{\"messages\": [{\"role\": \"assistant\", \"content\": 3}]}\n",
             "messages[0].content: expected a string");
    read_bad("{\"messages\": [{\"role\": \"assistant\", \"content\": \"a\", \"name\": \"b\"}]}\n",
             "unknown key 'name'");
    read_bad("[1]\n", "t.jsonl:1: expected a JSON object");
    read_bad("{\"prompt\": \"a\", \"completion\": \"b\"\n", "t.jsonl:1:");
    read_bad("\n\n", "t.jsonl: no examples");
}

/* The masked tokens' text. */
static void masked_text(const tfm_ids *ids, const tfm_ids *mask, tfm_buf *out)
{
    tfm_ids keep = {0};
    for (size_t i = 0; i < ids->len; i++)
        if (mask->data[i])
            tfm_ids_push(&keep, ids->data[i]);
    tfm_err err = {0};
    assert_int_equal(tfm_tokenizer_decode(gpt2, keep.data, keep.len, 0, out, &err), 0);
    tfm_ids_free(&keep);
}

static void test_masks(void **state)
{
    (void)state;
    tfm_chat_data d;
    read_ok(&d, "{\"prompt\": \"Hello\", \"completion\": \" world\"}\n"
                "{\"prompt\": \"Hel\", \"completion\": \"lo\"}\n"
                "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
                "{\"role\": \"assistant\", \"content\": \"Yo\"}]}\n"
                "{\"prompt\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                "\"completion\": [{\"role\": \"assistant\", \"content\": \"Yo\"}]}\n");
    assert_int_equal(d.n, 4);
    tfm_tok_scratch *sc = tfm_tok_scratch_new(gpt2);
    tfm_ids ids = {0}, mask = {0};
    tfm_buf t = {0};
    /* Hello | world <|endoftext|>: GPT-2's 15496, 995, 50256 */
    tfm_chat_encode(&d.ex[0], gpt2, sc, &ids, &mask);
    assert_int_equal(ids.len, 3);
    assert_int_equal(ids.data[0], 15496);
    assert_int_equal(ids.data[1], 995);
    assert_int_equal(ids.data[2], 50256);
    assert_int_equal(mask.data[0], 0);
    assert_int_equal(mask.data[1] + mask.data[2], 2);
    /* "Hel" + "lo" merge into "Hello": the prompt's ids are no prefix, so
     * the completion starts at the first token, as TRL's */
    tfm_chat_encode(&d.ex[1], gpt2, sc, &ids, &mask);
    assert_int_equal(ids.data[0], 15496);
    assert_int_equal(mask.data[0], 1);
    /* messages: the assistant's content and <|im_end|>, not the "\n" */
    tfm_chat_encode(&d.ex[2], gpt2, sc, &ids, &mask);
    masked_text(&ids, &mask, &t);
    assert_string_equal(tfm_buf_cstr(&t), "Yo<|im_end|>");
    assert_int_equal(mask.data[ids.len - 1], 0);
    /* conversational prompt/completion: everything after the header */
    tfm_chat_encode(&d.ex[3], gpt2, sc, &ids, &mask);
    tfm_buf_clear(&t);
    masked_text(&ids, &mask, &t);
    assert_string_equal(tfm_buf_cstr(&t), "Yo<|im_end|>\n");
    tfm_buf_free(&t);
    tfm_ids_free(&ids);
    tfm_ids_free(&mask);
    tfm_tok_scratch_free(sc);
    tfm_chat_data_free(&d);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_template_check(void **state)
{
    (void)state;
    char dir[] = "/tmp/tfm-chat-XXXXXX", cfg[64], jinja[64];
    assert_non_null(mkdtemp(dir));
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", dir);
    snprintf(jinja, sizeof jinja, "%s/chat_template.jinja", dir);
    tfm_err err = {0};
    assert_int_equal(tfm_chat_template_check(dir, &err), 0); /* no file */
    write_file(cfg, "{\"eos_token\": \"x\"}");
    assert_int_equal(tfm_chat_template_check(dir, &err), 0); /* no template */
    tfm_buf b = {0};
    tfm_buf_puts(&b, "{\"chat_template\": ");
    tfm_buf_put_json_string(&b, tfm_chat_template, strlen(tfm_chat_template));
    tfm_buf_puts(&b, "}");
    write_file(cfg, tfm_buf_cstr(&b));
    assert_int_equal(tfm_chat_template_check(dir, &err), 0);
    write_file(cfg, "{\"eos_token\": \"x\",\n \"chat_template\": \"{{ messages }}\"}");
    assert_int_equal(tfm_chat_template_check(dir, &err), -1);
    assert_non_null(strstr(err.msg, cfg));
    assert_non_null(strstr(err.msg, ":2:"));
    unlink(cfg);
    write_file(jinja, tfm_chat_template);
    assert_int_equal(tfm_chat_template_check(jinja, &err), 0); /* a file in the folder */
    write_file(jinja, "{{ messages }}");
    assert_int_equal(tfm_chat_template_check(dir, &err), -1);
    assert_non_null(strstr(err.msg, "chat_template.jinja"));
    unlink(jinja);
    rmdir(dir);
    tfm_buf_free(&b);
}

static void test_preferences(void **state)
{
    (void)state;
    tfm_chat_data d;
    tfm_err err = {0};
    const char *ok = "{\"prompt\": \"Hello\", \"chosen\": \" world\", \"rejected\": \" there\"}\n";
    assert_int_equal(tfm_chat_read(&d, ok, strlen(ok), "p.jsonl", 1, &err), 0);
    tfm_tok_scratch *sc = tfm_tok_scratch_new(gpt2);
    tfm_ids c = {0}, r = {0};
    /* Hello | world <|endoftext|> and Hello | there <|endoftext|> */
    assert_int_equal(tfm_pref_encode(&d.ex[0], gpt2, sc, &c, &r), 1);
    assert_int_equal(c.len, 3);
    assert_int_equal(c.data[1], 995);
    assert_int_equal(c.data[2], 50256);
    assert_int_equal(r.len, 3);
    assert_int_equal(r.data[2], 50256);
    tfm_ids_free(&c);
    tfm_ids_free(&r);
    tfm_tok_scratch_free(sc);
    tfm_chat_data_free(&d);
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"prompt\": \"a\", \"chosen\": \"\", \"rejected\": \"b\"}\n", "p.jsonl:1: \"chosen\" is empty"},
        {"{\"prompt\": \"a\", \"chosen\": \"b\", \"rejected\": \"b\"}\n", "p.jsonl:1: \"chosen\" and \"rejected\" are the same"},
        {"\n{\"prompt\": \"a\", \"chosen\": \"b\"}\n", "p.jsonl:2:"},
        {"{\"prompt\": \"a\", \"completion\": \"b\"}\n", "unknown key 'completion'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(tfm_chat_read(&d, bad[i].text, strlen(bad[i].text), "p.jsonl", 1, &err),
                         -1);
        if (!strstr(err.msg, bad[i].want))
            fail_msg("got '%s', want '%s'", err.msg, bad[i].want);
    }
}

/* PPO's prompts: a string's ids as they are, messages rendered with the
 * assistant's header; another key, an empty prompt, by line. */
static void test_prompts(void **state)
{
    (void)state;
    tfm_chat_data d;
    tfm_err err = {0};
    const char *ok = "{\"prompt\": \"Hello\"}\n\n"
                     "{\"prompt\": [{\"role\": \"user\", \"content\": \"Hi\"}]}\n";
    assert_int_equal(tfm_chat_read(&d, ok, strlen(ok), "q.jsonl", TFM_CHAT_READ_PROMPTS, &err),
                     0);
    assert_int_equal(d.n, 2);
    assert_int_equal(d.ex[1].line, 3);
    tfm_tok_scratch *sc = tfm_tok_scratch_new(gpt2);
    tfm_ids ids = {0};
    tfm_chat_prompt_encode(&d.ex[0], gpt2, sc, &ids);
    assert_int_equal(ids.len, 1);
    assert_int_equal(ids.data[0], 15496);
    tfm_chat_prompt_encode(&d.ex[1], gpt2, sc, &ids);
    tfm_buf t = {0};
    assert_int_equal(tfm_tokenizer_decode(gpt2, ids.data, ids.len, 0, &t, &err), 0);
    assert_string_equal(tfm_buf_cstr(&t), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    tfm_buf_free(&t);
    tfm_ids_free(&ids);
    tfm_tok_scratch_free(sc);
    tfm_chat_data_free(&d);
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"prompt\": \"a\"}\n{\"prompt\": \"\"}\n", "q.jsonl:2:"},
        {"{\"prompt\": \"a\", \"completion\": \"b\"}\n", "q.jsonl:1:"},
        {"{\"text\": \"a\"}\n", "unknown key 'text'"},
        {"", "q.jsonl: no examples"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(tfm_chat_read(&d, bad[i].text, strlen(bad[i].text), "q.jsonl",
                                       TFM_CHAT_READ_PROMPTS, &err), -1);
        if (!strstr(err.msg, bad[i].want))
            fail_msg("got '%s', want '%s'", err.msg, bad[i].want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render),
        cmocka_unit_test(test_read_errors),
        cmocka_unit_test(test_masks),
        cmocka_unit_test(test_template_check),
        cmocka_unit_test(test_preferences),
        cmocka_unit_test(test_prompts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
