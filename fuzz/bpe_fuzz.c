/* libFuzzer harness for the byte-level BPE encoder: any bytes must encode
 * without crashing and decode back to themselves, identically with and
 * without the word cache and with special-token splitting on.
 *
 * An input starting with '{' is also read as a tokenizer.json: loading it
 * must fail cleanly or give a tokenizer that encodes, decodes, and writes a
 * tokenizer.json that loads back and writes the same text.
 *
 * GPT-2's vocabulary is read from $TFM_GPT2_DIR, else $TFM_SRCDIR/testdata/gpt2,
 * else testdata/gpt2 (run from the source tree). */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer.h"

static tfm_tokenizer *tok;
static tfm_tok_scratch *scratch;

static void setup(void)
{
    char path[4096];
    const char *d = getenv("TFM_GPT2_DIR");
    const char *src = getenv("TFM_SRCDIR");
    if (d)
        snprintf(path, sizeof path, "%s", d);
    else if (src)
        snprintf(path, sizeof path, "%s/testdata/gpt2", src);
    else
        snprintf(path, sizeof path, "testdata/gpt2");
    tfm_err err = {0};
    if (tfm_tokenizer_load(&tok, path, &err)) {
        fprintf(stderr, "bpe_fuzz: %s (set TFM_GPT2_DIR)\n", err.msg);
        abort();
    }
    scratch = tfm_tok_scratch_new(tok);
}

static void roundtrip(const uint8_t *data, size_t size, const tfm_ids *ids)
{
    tfm_buf back = {0};
    tfm_err err = {0};
    if (tfm_tokenizer_decode(tok, ids->data, ids->len, 0, &back, &err) != 0 ||
        back.len != size || (size && memcmp(back.data, data, size) != 0)) {
        fprintf(stderr, "bpe_fuzz: decode(encode(x)) != x\n");
        abort();
    }
    tfm_buf_free(&back);
}

static void as_tokenizer_json(const uint8_t *data, size_t size)
{
    tfm_tokenizer *t, *t2;
    tfm_err err = {0};
    if (tfm_tokenizer_from_json(&t, (const char *)data, size, "fuzz.json", &err))
        return;
    tfm_ids ids = {0};
    tfm_buf out = {0}, js = {0}, js2 = {0};
    static const char text[] = "Hello, world! 123 \xc3\xa9\xff <|endoftext|> [MASK]";
    tfm_tokenizer_encode(t, NULL, text, sizeof text - 1, 1, &ids);
    if (tfm_tokenizer_decode(t, ids.data, ids.len, 0, &out, &err) != 0) {
        fprintf(stderr, "bpe_fuzz: decode of encoded ids failed: %s\n", err.msg);
        abort();
    }
    tfm_tokenizer_to_json(t, &js);
    if (tfm_tokenizer_from_json(&t2, js.data, js.len, "written.json", &err)) {
        fprintf(stderr, "bpe_fuzz: a written tokenizer.json does not load: %s\n", err.msg);
        abort();
    }
    tfm_tokenizer_to_json(t2, &js2);
    if (js.len != js2.len || memcmp(js.data, js2.data, js.len) != 0) {
        fprintf(stderr, "bpe_fuzz: tokenizer.json changes when loaded and written again\n");
        abort();
    }
    tfm_tokenizer_free(t2);
    tfm_tokenizer_free(t);
    tfm_ids_free(&ids);
    tfm_buf_free(&out);
    tfm_buf_free(&js);
    tfm_buf_free(&js2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tok)
        setup();
    if (size > 0 && data[0] == '{')
        as_tokenizer_json(data, size);
    tfm_ids a = {0}, b = {0};
    tfm_tokenizer_encode(tok, scratch, (const char *)data, size, 0, &a);
    tfm_tokenizer_encode(tok, NULL, (const char *)data, size, 0, &b);
    if (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len * sizeof *a.data) != 0)) {
        fprintf(stderr, "bpe_fuzz: cached and uncached encodings differ\n");
        abort();
    }
    roundtrip(data, size, &a);
    tfm_ids_clear(&a);
    tfm_tokenizer_encode(tok, scratch, (const char *)data, size, 1, &a);
    roundtrip(data, size, &a);
    tfm_ids_free(&a);
    tfm_ids_free(&b);
    return 0;
}
