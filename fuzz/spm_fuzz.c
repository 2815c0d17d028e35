/* libFuzzer harness for SentencePiece Unigram models: any bytes read as a
 * .model (a ModelProto: varints, lengths, the charsmap's double-array
 * trie) must load or fail cleanly; a model that loads must encode any text
 * (fixed strings and the input itself) to ids inside its vocabulary, the
 * same ids with and without spans, and sample, n-best and decode without
 * crashing.  An input starting with '{' is read as a tokenizer.json
 * instead; one that loads must also write a tokenizer.json that loads back
 * and writes the same text. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "text/tokenizer.h"
#include "text/unigram.h"

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "spm_fuzz: %s\n", what);
        abort();
    }
}

static void exercise_model(const tfm_unigram *u, const char *s, size_t n)
{
    uint32_t V = tfm_unigram_size(u);
    tfm_ids a = {0}, b = {0}, st = {0}, en = {0}, off = {0};
    tfm_unigram_encode(u, s, n, &a, NULL, NULL);
    tfm_unigram_encode(u, s, n, &b, &st, &en);
    check(a.len == b.len && (!a.len || !memcmp(a.data, b.data, a.len * sizeof *a.data)),
          "encodings with and without spans differ");
    check(st.len == a.len && en.len == a.len, "one span per id");
    for (size_t i = 0; i < a.len; i++)
        check(a.data[i] < V && st.data[i] <= en.data[i] && en.data[i] <= n, "id or span out of range");
    tfm_buf text = {0};
    tfm_unigram_decode(u, a.data, a.len, &text);
    tfm_rng rng;
    tfm_rng_seed(&rng, n);
    tfm_ids_clear(&b);
    tfm_unigram_sample(u, s, n, 0.5f, &rng, &b);
    for (size_t i = 0; i < b.len; i++)
        check(b.data[i] < V, "sampled id out of range");
    tfm_ids_clear(&b);
    size_t k = tfm_unigram_nbest(u, s, n, 3, &b, &off);
    check(off.len == k + 1, "n-best offsets");
    if (k)
        check(off.data[1] - off.data[0] == a.len &&
                  !memcmp(b.data, a.data, a.len * sizeof *a.data),
              "the first of the n-best is not the Viterbi segmentation");
    tfm_buf_free(&text);
    tfm_ids_free(&a);
    tfm_ids_free(&b);
    tfm_ids_free(&st);
    tfm_ids_free(&en);
    tfm_ids_free(&off);
}

static const char *const texts[] = {
    "", " ", "hello world", "  a  b  ", "caf\xc3\xa9 \xe6\x9d\xb1\xe4\xba\xac \xf0\x9f\x98\x80",
    "\xff\xfe\xc3", "e\xcc\x81\tx\xe3\x80\x80y",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tfm_err err = {0};
    const char *s = (const char *)data;
    if (size && data[0] == '{') {
        tfm_tokenizer *t;
        if (tfm_tokenizer_from_json(&t, s, size, "fuzz.json", &err) == 0) {
            tfm_buf j = {0}, j2 = {0};
            tfm_tokenizer_to_json(t, &j);
            tfm_tokenizer *t2;
            check(tfm_tokenizer_from_json(&t2, j.data, j.len, "written.json", &err) == 0,
                  "a written tokenizer.json does not load");
            tfm_tokenizer_to_json(t2, &j2);
            check(j.len == j2.len && !memcmp(j.data, j2.data, j.len), "tokenizer.json not stable");
            tfm_ids ids = {0};
            for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
                tfm_tokenizer_encode(t, NULL, texts[i], strlen(texts[i]), 1, &ids);
            tfm_buf out = {0};
            check(tfm_tokenizer_decode(t, ids.data, ids.len, 0, &out, &err) == 0, "decode failed");
            tfm_buf_free(&out);
            tfm_ids_free(&ids);
            tfm_buf_free(&j);
            tfm_buf_free(&j2);
            tfm_tokenizer_free(t2);
            tfm_tokenizer_free(t);
        }
        return 0;
    }
    tfm_unigram *u;
    if (tfm_unigram_from_spm(&u, data, size, "fuzz.model", &err) != 0)
        return 0;
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        exercise_model(u, texts[i], strlen(texts[i]));
    exercise_model(u, s, size);
    tfm_unigram_free(u);
    return 0;
}
