/* libFuzzer harness for the byte-level BPE encoder: any bytes must encode
 * without crashing and decode back to themselves, identically with and
 * without the word cache and with special-token splitting on.
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!tok)
        setup();
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
