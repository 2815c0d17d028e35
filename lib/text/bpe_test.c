/* Byte-level BPE, the char model and the tokenizer facade.
 *
 * Exactness: testdata/gpt2/gpt2.tsv (the shared golden sample),
 * testdata/gpt2/extra.tsv (our own cases) and testdata/gpt2/random.tsv
 * (random mixes of every class; see testdata/gpt2/README) must match
 * OpenAI's GPT-2 ids line for line. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/file.h"
#include "base/rng.h"
#include "base/thread.h"
#include "text/bpe.h"
#include "text/pretok.h"
#include "text/tok_internal.h"
#include "text/tokenizer.h"
#include "text/utf8.h"

static tfm_tokenizer *gpt2;

static const char *srcdir(void)
{
    const char *s = getenv("TFM_SRCDIR");
    return s ? s : SRCDIR;
}

static char *path_of(const char *rel)
{
    tfm_buf b = {0};
    tfm_buf_printf(&b, "%s/%s", srcdir(), rel);
    return (char *)tfm_buf_cstr(&b);
}

static int load_gpt2(void **state)
{
    tfm_err err = {0};
    char *p = path_of("testdata/gpt2");
    if (tfm_tokenizer_load(&gpt2, p, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        free(p);
        return -1;
    }
    free(p);
    return 0;
}

static int free_gpt2(void **state)
{
    tfm_tokenizer_free(gpt2);
    return 0;
}

/* Decodes a JSON string literal with the project's JSON reader. */
static void json_string(const char *lit, size_t n, tfm_buf *out)
{
    tfm_json_doc doc;
    tfm_err err = {0};
    if (tfm_json_parse(&doc, lit, n, "tsv", 0, &err))
        fail_msg("bad golden line: %s", err.msg);
    assert_int_equal(doc.root->type, TFM_JSON_STRING);
    tfm_buf_clear(out);
    tfm_buf_append(out, doc.root->str, doc.root->len);
    tfm_json_doc_free(&doc);
}

static void encode_str(const tfm_tokenizer *t, tfm_tok_scratch *s, const char *text, size_t n,
                       int split, tfm_ids *ids)
{
    tfm_ids_clear(ids);
    tfm_tokenizer_encode(t, s, text, n, split, ids);
}

static void check_roundtrip(const tfm_tokenizer *t, const char *text, size_t n, const tfm_ids *ids)
{
    tfm_buf back = {0};
    tfm_err err = {0};
    assert_int_equal(tfm_tokenizer_decode(t, ids->data, ids->len, 0, &back, &err), 0);
    assert_int_equal(back.len, n);
    assert_memory_equal(back.data, text, n);
    tfm_buf_free(&back);
}

/* Every line of a golden file: ids match, with and without the cache, and
 * decode gives the text back. */
static size_t check_golden_file(const char *rel)
{
    char *p = path_of(rel);
    tfm_map m;
    tfm_err err = {0};
    if (tfm_map_open(&m, p, &err))
        fail_msg("%s", err.msg);
    tfm_tok_scratch *sc = tfm_tok_scratch_new(gpt2);
    tfm_buf text = {0}, want = {0}, got = {0};
    tfm_ids ids = {0};
    const char *s = (const char *)m.data, *end = s + m.size;
    size_t lines = 0;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *e = nl ? nl : end;
        const char *tab = memchr(s, '\t', (size_t)(e - s));
        assert_non_null(tab);
        json_string(s, (size_t)(tab - s), &text);
        tfm_buf_clear(&want);
        tfm_buf_append(&want, tab + 1, (size_t)(e - tab - 1));
        for (int pass = 0; pass < 3; pass++) {
            /* pass 0: no cache; 1: cache cold; 2: cache warm */
            encode_str(gpt2, pass ? sc : NULL, text.data, text.len, 0, &ids);
            tfm_buf_clear(&got);
            for (size_t i = 0; i < ids.len; i++)
                tfm_buf_printf(&got, "%s%u", i ? " " : "", ids.data[i]);
            if (got.len != want.len || (got.len && memcmp(got.data, want.data, got.len) != 0))
                fail_msg("%s line %zu: %.*s\n want %s\n got  %s", rel, lines + 1,
                         (int)(tab - s), s, tfm_buf_cstr(&want), tfm_buf_cstr(&got));
        }
        check_roundtrip(gpt2, text.data, text.len, &ids);
        lines++;
        s = nl ? nl + 1 : end;
    }
    tfm_tok_scratch_free(sc);
    tfm_buf_free(&text);
    tfm_buf_free(&want);
    tfm_buf_free(&got);
    tfm_ids_free(&ids);
    tfm_map_close(&m);
    free(p);
    return lines;
}

static void test_golden_shared(void **state)
{
    assert_true(check_golden_file("testdata/gpt2/gpt2.tsv") >= 140);
}

static void test_golden_extra(void **state)
{
    assert_true(check_golden_file("testdata/gpt2/extra.tsv") >= 100);
}

static void test_golden_random(void **state)
{
    assert_int_equal(check_golden_file("testdata/gpt2/random.tsv"), 1000);
}

/* The pre-tokenizer's splits, one category at a time. */
static void expect_split(const char *text, const char *const *want)
{
    const unsigned char *s = (const unsigned char *)text;
    size_t n = strlen(text), i = 0, k = 0;
    while (i < n) {
        size_t j = tfm_gpt2_pretok_next(s, n, i);
        assert_non_null(want[k]);
        if (strlen(want[k]) != j - i || memcmp(want[k], s + i, j - i) != 0)
            fail_msg("'%s': piece %zu is '%.*s', want '%s'", text, k, (int)(j - i), s + i,
                     want[k]);
        k++;
        i = j;
    }
    assert_null(want[k]);
}

static void test_pretok(void **state)
{
    expect_split("Hello world", (const char *[]){"Hello", " world", NULL});
    expect_split("a  b", (const char *[]){"a", " ", " b", NULL});
    expect_split("a \tb", (const char *[]){"a", " ", "\t", "b", NULL});
    expect_split("end  ", (const char *[]){"end", "  ", NULL});
    expect_split("x\n\n y", (const char *[]){"x", "\n\n", " y", NULL});
    expect_split("I'm HE'S", (const char *[]){"I", "'m", " HE", "'", "S", NULL});
    expect_split("it'll we're", (const char *[]){"it", "'ll", " we", "'re", NULL});
    expect_split("abc123!!x", (const char *[]){"abc", "123", "!!", "x", NULL});
    expect_split(" !!'s", (const char *[]){" !!'", "s", NULL});
    expect_split("caf\xc3\xa9 na\xc3\xafve", (const char *[]){"caf\xc3\xa9", " na\xc3\xafve", NULL});
    /* U+00A0 is whitespace; U+200B is not (Cf) */
    expect_split("a\xc2\xa0" "b", (const char *[]){"a", "\xc2\xa0", "b", NULL});
    expect_split("a\xe2\x80\x8b" "b", (const char *[]){"a", "\xe2\x80\x8b", "b", NULL});
    /* invalid bytes are symbols, like U+FFFD */
    expect_split("a\xff\xfe b\x80", (const char *[]){"a", "\xff\xfe", " b", "\x80", NULL});
    expect_split(" \xff" "x", (const char *[]){" \xff", "x", NULL});
    /* a truncated sequence at the end */
    expect_split("x\xe4\xbd", (const char *[]){"x", "\xe4\xbd", NULL});
}

/* Llama 3's and Qwen2's pre-tokenizers: the byte ends of each text's
 * pieces, as tokenizers 0.23's Split with their regexes gives them (the
 * case-folded contractions, "\xc5\xbf" as s, included). */
static void test_pretok_llama3(void **state)
{
    static const struct {
        int digits;
        const char *text;
        size_t ends[16];
    } cases[] = {
    {3, "don't DON'T we'Ll x'\xc5\xbf 'x", {3, 5, 9, 11, 14, 17, 19, 22, 24, 25}},
    {3, "12345 1 \xd9\xa3\xd9\xa4\xd9\xa5\xd9\xa6\xd9\xa7", {3, 5, 6, 7, 8, 14, 18}},
    {3, "  a  b   \n\n  c", {1, 3, 4, 6, 11, 12, 14}},
    {3, "!!!\n\n?.\r\n x", {5, 9, 11}},
    {3, "\t\tfoo  ", {1, 5, 7}},
    {3, "a\r\n\r\nb", {1, 5, 6}},
    {3, ".Hello ..world", {6, 9, 14}},
    {3, " ?x \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x80\x81\xe4\xb8\xad\xe6\x96\x87", {2, 3, 13, 22}},
    {3, "x \n y", {1, 3, 5}},
    {3, "   ", {3}},
    {1, "don't DON'T we'Ll x'\xc5\xbf 'x", {3, 5, 9, 11, 14, 17, 19, 22, 24, 25}},
    {1, "12345 1 \xd9\xa3\xd9\xa4\xd9\xa5\xd9\xa6\xd9\xa7", {1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18}},
    {1, "  a  b   \n\n  c", {1, 3, 4, 6, 11, 12, 14}},
    {1, "!!!\n\n?.\r\n x", {5, 9, 11}},
    {1, "\t\tfoo  ", {1, 5, 7}},
    {1, "a\r\n\r\nb", {1, 5, 6}},
    {1, ".Hello ..world", {6, 9, 14}},
    {1, " ?x \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x80\x81\xe4\xb8\xad\xe6\x96\x87", {2, 3, 13, 22}},
    {1, "x \n y", {1, 3, 5}},
    {1, "   ", {3}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const unsigned char *s = (const unsigned char *)cases[c].text;
        size_t n = strlen(cases[c].text), i = 0, k = 0;
        while (i < n) {
            size_t j = tfm_llama3_pretok_next(s, n, i, cases[c].digits);
            if (j != cases[c].ends[k])
                fail_msg("'%s' (digits %d): piece %zu ends at %zu, want %zu", cases[c].text,
                         cases[c].digits, k, j, cases[c].ends[k]);
            k++;
            i = j;
        }
        assert_true(k == 16 || cases[c].ends[k] == 0);
    }
}

/* The class of every code point, against testdata/gpt2/classes.tsv (what
 * tiktoken does; see gen-classes.js). */
static void test_classes(void **state)
{
    char *p = path_of("testdata/gpt2/classes.tsv");
    FILE *fp = fopen(p, "r");
    assert_non_null(fp);
    unsigned lo, hi;
    char k;
    uint32_t next = 0, bad = 0;
    while (fscanf(fp, "%x %x %c", &lo, &hi, &k) == 3) {
        if (lo > next)
            next = lo; /* surrogates */
        assert_int_equal(lo, next);
        int want = k == 'L' ? TFM_CC_LETTER : k == 'N' ? TFM_CC_NUMBER
                 : k == 'S' ? TFM_CC_SPACE : TFM_CC_OTHER;
        for (uint32_t cp = lo; cp <= hi; cp++) {
            unsigned char u[4];
            size_t l = tfm_utf8_encode(cp, u), adv;
            int got = tfm_char_class(u, l, &adv);
            assert_int_equal(adv, l);
            if (got != want && bad++ < 10)
                print_error("U+%04X: class %d, want %c\n", cp, got, k);
        }
        next = hi + 1;
    }
    fclose(fp);
    free(p);
    assert_int_equal(next, 0x110000);
    assert_int_equal(bad, 0);
}

/* decode(encode(x)) == x for random bytes, biased towards interesting ones. */
static void test_roundtrip_random(void **state)
{
    tfm_rng rng;
    tfm_rng_seed(&rng, 1234);
    static const char *const frag[] = {" ", "  ", "\n", "\t", "'s", "'", "a", "Z", "9", "!",
                                       "\xc3\xa9", "\xe4\xbd\xa0", "\xf0\x9f\x98\x80", "\xff",
                                       "\x80", "\xe4\xbd", "\xc2\xa0", "\xe2\x80\x8d", "<|endoftext|>",
                                       "the", " of", "\r\n"};
    size_t nfrag = sizeof frag / sizeof frag[0];
    int rounds = getenv("TFM_SANITIZED") ? 300 : 2000;
    tfm_tok_scratch *sc = tfm_tok_scratch_new(gpt2);
    tfm_ids ids = {0};
    tfm_buf text = {0};
    for (int r = 0; r < rounds; r++) {
        tfm_buf_clear(&text);
        size_t n = tfm_rng_u64(&rng) % 200;
        for (size_t i = 0; i < n; i++) {
            if (tfm_rng_u64(&rng) % 2)
                tfm_buf_putc(&text, (char)(tfm_rng_u64(&rng) & 0xff));
            else
                tfm_buf_puts(&text, frag[tfm_rng_u64(&rng) % nfrag]);
        }
        for (int split = 0; split < 2; split++) {
            encode_str(gpt2, sc, text.data, text.len, split, &ids);
            check_roundtrip(gpt2, text.data, text.len, &ids);
        }
    }
    tfm_tok_scratch_free(sc);
    tfm_ids_free(&ids);
    tfm_buf_free(&text);
}

/* The small-word and the long-word (heap) merge give the same ids. */
static void test_merge_paths_agree(void **state)
{
    tfm_rng rng;
    tfm_rng_seed(&rng, 99);
    static const char alpha[] = "aeinorst";
    tfm_ids a = {0}, b = {0};
    unsigned char w[128];
    for (int r = 0; r < 3000; r++) {
        size_t n = 2 + tfm_rng_u64(&rng) % 100;
        for (size_t i = 0; i < n; i++)
            w[i] = (unsigned char)(r % 3 == 0 ? alpha[tfm_rng_u64(&rng) % 3]
                                              : alpha[tfm_rng_u64(&rng) % 8]);
        tfm_ids_clear(&a);
        tfm_ids_clear(&b);
        tfm_bpe_encode_word(gpt2->impl, NULL, w, n, &a);
        tfm_bpe_encode_word_heap(gpt2->impl, w, n, &b);
        assert_int_equal(a.len, b.len);
        assert_memory_equal(a.data, b.data, a.len * sizeof *a.data);
    }
    tfm_ids_free(&a);
    tfm_ids_free(&b);
}

/* A very long word (heap path) still encodes to the right ids: a repeated
 * word equals the same ids as GPT-2 gives when cut into pieces that merge
 * independently is not guaranteed, so check against the small path on a
 * word just under the limit and round trip on a huge one. */
static void test_long_word(void **state)
{
    size_t n = getenv("TFM_SANITIZED") ? 20000 : 200000;
    char *s = tfm_malloc(n);
    for (size_t i = 0; i < n; i++)
        s[i] = "abcdefghij"[(i * 7 + i / 13) % 10];
    tfm_ids ids = {0};
    tfm_tokenizer_encode(gpt2, NULL, s, n, 0, &ids);
    assert_true(ids.len > 0 && ids.len < n);
    check_roundtrip(gpt2, s, n, &ids);
    free(s);
    tfm_ids_free(&ids);
}

static void test_specials(void **state)
{
    const tfm_tok_specials *sp = tfm_tokenizer_specials(gpt2);
    assert_int_equal(sp->eos, 50256);
    assert_int_equal(sp->bos, 50256);
    assert_int_equal(sp->unk, -1);
    assert_int_equal(tfm_tokenizer_vocab_size(gpt2), 50257);
    assert_int_equal(tfm_tokenizer_kind(gpt2), TFM_TOK_BPE);
    tfm_ids ids = {0};
    const char *t = "a<|endoftext|>b<|endoftext|>";
    encode_str(gpt2, NULL, t, strlen(t), 1, &ids);
    assert_int_equal(ids.len, 4);
    assert_int_equal(ids.data[0], 64);
    assert_int_equal(ids.data[1], 50256);
    assert_int_equal(ids.data[2], 65);
    assert_int_equal(ids.data[3], 50256);
    check_roundtrip(gpt2, t, strlen(t), &ids);
    tfm_buf out = {0};
    tfm_err err = {0};
    assert_int_equal(tfm_tokenizer_decode(gpt2, ids.data, ids.len, 1, &out, &err), 0);
    assert_int_equal(out.len, 2);
    assert_memory_equal(out.data, "ab", 2);
    encode_str(gpt2, NULL, t, strlen(t), 0, &ids);
    assert_true(ids.len > 4);
    uint32_t bad = 50257;
    assert_int_equal(tfm_tokenizer_decode(gpt2, &bad, 1, 0, &out, &err), -1);
    assert_non_null(strstr(err.msg, "50257"));
    size_t len;
    const char *p = tfm_tokenizer_piece(gpt2, 220, &len);
    assert_int_equal(len, 2);
    assert_memory_equal(p, "\xc4\xa0", 2);
    assert_int_equal(tfm_tokenizer_token_id(gpt2, "\xc4\xa0the", 5), 262);
    assert_int_equal(tfm_tokenizer_merge_rank(gpt2, 220), -1);
    assert_int_equal(tfm_tokenizer_merge_rank(gpt2, 50256), -1);
    assert_int_equal(tfm_tokenizer_merge_rank(gpt2, 256), 0); /* "Ġ t" is the first merge */
    tfm_buf_free(&out);
    tfm_ids_free(&ids);
}

/* Concurrent encoding, one scratch per thread, gives the same ids. */
typedef struct par_ctx {
    const char *text;
    size_t len;
    tfm_ids out[4];
} par_ctx;

static void par_encode(void *vctx, int i, int n)
{
    par_ctx *c = vctx;
    tfm_tok_scratch *sc = tfm_tok_scratch_new(gpt2);
    for (int rep = 0; rep < 3; rep++) {
        tfm_ids_clear(&c->out[i]);
        tfm_tokenizer_encode(gpt2, sc, c->text, c->len, 1, &c->out[i]);
    }
    tfm_tok_scratch_free(sc);
}

static void test_threads(void **state)
{
    char *p = path_of("testdata/gpt2/corpus.txt");
    tfm_map m;
    tfm_err err = {0};
    if (tfm_map_open(&m, p, &err))
        fail_msg("%s", err.msg);
    par_ctx c = {.text = (const char *)m.data, .len = m.size};
    tfm_parallel_run(4, par_encode, &c);
    tfm_ids want = {0};
    tfm_tokenizer_encode(gpt2, NULL, c.text, c.len, 1, &want);
    assert_true(want.len > 1000);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(c.out[i].len, want.len);
        assert_memory_equal(c.out[i].data, want.data, want.len * 4);
        tfm_ids_free(&c.out[i]);
    }
    check_roundtrip(gpt2, c.text, c.len, &want);
    tfm_ids_free(&want);
    tfm_map_close(&m);
    free(p);
}

static void write_tmp(const char *path, const char *text)
{
    tfm_err err = {0};
    assert_int_equal(tfm_write_file(path, text, strlen(text), &err), 0);
}

/* tokenizer.json: GPT-2 written and read back is the same tokenizer. */
static void test_json_roundtrip_gpt2(void **state)
{
    tfm_buf js = {0}, js2 = {0};
    tfm_tokenizer_to_json(gpt2, &js);
    tfm_tokenizer *t;
    tfm_err err = {0};
    if (tfm_tokenizer_from_json(&t, js.data, js.len, "gpt2.json", &err))
        fail_msg("%s", err.msg);
    tfm_tokenizer_to_json(t, &js2);
    assert_int_equal(js.len, js2.len);
    assert_memory_equal(js.data, js2.data, js.len);
    assert_int_equal(tfm_tokenizer_vocab_size(t), 50257);
    assert_int_equal(tfm_tokenizer_specials(t)->eos, 50256);
    tfm_ids a = {0}, b = {0};
    const char *s = "Hello, world! It's 2024\n\n  caf\xc3\xa9 \xf0\x9f\x98\x80<|endoftext|>";
    encode_str(gpt2, NULL, s, strlen(s), 1, &a);
    encode_str(t, NULL, s, strlen(s), 1, &b);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len * 4);
    tfm_tokenizer_free(t);
    tfm_ids_free(&a);
    tfm_ids_free(&b);
    tfm_buf_free(&js);
    tfm_buf_free(&js2);
}

/* HF's ignore_merges: a word in the vocabulary is taken whole. */
static void test_ignore_merges(void **state)
{
    static const char fmt[] =
        "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", %s"
        "\"vocab\": {\"a\": 0, \"b\": 1, \"c\": 2, \"ab\": 3, \"bc\": 4, \"abc\": 5},"
        " \"merges\": [[\"b\", \"c\"], \"a b\"]}}";
    for (int im = 0; im < 2; im++) {
        char js[512];
        snprintf(js, sizeof js, fmt, im ? "\"ignore_merges\": true, " : "");
        if (im) {
            /* newer HF writers wrap components in one-element Sequences */
            static const char from[] = "{\"type\": \"ByteLevel\"}";
            char *at = strstr(js, from);
            assert_non_null(at);
            char tail[512];
            snprintf(tail, sizeof tail, "%s", at + strlen(from));
            snprintf(at, sizeof js - (size_t)(at - js),
                     "{\"type\": \"Sequence\", \"pretokenizers\": [%s]}, \"normalizer\": "
                     "{\"type\": \"Sequence\", \"normalizers\": []}%s", from, tail);
        }
        tfm_tokenizer *t;
        tfm_err err = {0};
        if (tfm_tokenizer_from_json(&t, js, strlen(js), "im.json", &err))
            fail_msg("%s", err.msg);
        tfm_ids ids = {0};
        tfm_tok_scratch *sc = tfm_tok_scratch_new(t);
        for (int pass = 0; pass < 2; pass++) {
            encode_str(t, sc, "abc", 3, 0, &ids);
            if (im) {
                assert_int_equal(ids.len, 1);
                assert_int_equal(ids.data[0], 5);
            } else {
                assert_int_equal(ids.len, 2);
                assert_int_equal(ids.data[0], 0);
                assert_int_equal(ids.data[1], 4);
            }
        }
        tfm_buf out = {0};
        tfm_tokenizer_to_json(t, &out);
        assert_true((strstr(tfm_buf_cstr(&out), "ignore_merges") != NULL) == im);
        tfm_buf_free(&out);
        tfm_tok_scratch_free(sc);
        tfm_ids_free(&ids);
        tfm_tokenizer_free(t);
    }
}

/* Added tokens with lstrip/rstrip take the whitespace beside them, and
 * single_word ones stand alone (HF, checked with npm tokenizers 0.23.2). */
static void test_added_strip(void **state)
{
    static const char js[] =
        "{\"added_tokens\": [{\"id\": 4, \"content\": \"<m>\", \"lstrip\": true, \"special\": true},"
        " {\"id\": 5, \"content\": \"<r>\", \"rstrip\": true, \"special\": true},"
        " {\"id\": 6, \"content\": \"<w>\", \"single_word\": true, \"special\": true}],"
        " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\","
        " \"vocab\": {\"H\": 0, \"i\": 1, \"\u0120\": 2, \"x\": 3}, \"merges\": []}}";
    tfm_tokenizer *t;
    tfm_err err = {0};
    if (tfm_tokenizer_from_json(&t, js, strlen(js), "strip.json", &err))
        fail_msg("%s", err.msg);
    tfm_ids ids = {0};
    const char *text = "Hi \xc2\xa0 <m> <r> \xe3\x80\x80 x<m><r>";
    encode_str(t, NULL, text, strlen(text), 1, &ids);
    static const uint32_t want[] = {0, 1, 4, 2, 5, 3, 4, 5};
    assert_int_equal(ids.len, 8);
    assert_memory_equal(ids.data, want, sizeof want);
    /* single_word: no word character (\\w) right before or after */
    static const struct {
        const char *text;
        int match;
    } sw[] = {{"<w>", 1}, {"x<w>", 0}, {"<w>x", 0}, {"!<w>!", 1}, {"_<w>", 0},
              {"\xc3\xa9<w>", 0}, {"<w>\xcc\x81", 0}, {"\xc2\xbd<w>", 1}, {"\xe2\x92\xb6<w>", 0},
              {"\xe2\x80\x8d<w>", 0}, {"\xe1\xb2\x89<w>", 0}, {"\xff<w>", 1}, {"x <w> x", 1}};
    for (size_t k = 0; k < sizeof sw / sizeof sw[0]; k++) {
        encode_str(t, NULL, sw[k].text, strlen(sw[k].text), 1, &ids);
        int found = 0;
        for (size_t q = 0; q < ids.len; q++)
            found |= ids.data[q] == 6;
        if (found != sw[k].match)
            fail_msg("single_word on '%s': %d", sw[k].text, found);
    }
    tfm_buf out = {0};
    tfm_tokenizer_to_json(t, &out);
    assert_non_null(strstr(tfm_buf_cstr(&out), "\"lstrip\": true"));
    assert_non_null(strstr(tfm_buf_cstr(&out), "\"rstrip\": true"));
    tfm_buf_free(&out);
    tfm_ids_free(&ids);
    tfm_tokenizer_free(t);
}

static void test_bad_files(void **state)
{
    char dir[] = "/tmp/tfm_bpe_test_XXXXXX";
    assert_non_null(mkdtemp(dir));
    tfm_buf p = {0};
    tfm_tokenizer *t = NULL;
    tfm_err err = {0};

    tfm_buf_printf(&p, "%s/bad.json", dir);
    write_tmp(p.data, "{\"model\": {\"type\": \"BPE\",\n  \"vocab\": {\"a\": 0,}}}");
    assert_int_equal(tfm_tokenizer_load(&t, p.data, &err), -1);
    assert_non_null(strstr(err.msg, "bad.json:"));

    write_tmp(p.data, "{\"model\": {\"type\": \"Unigram\"}}");
    assert_int_equal(tfm_tokenizer_load(&t, p.data, &err), -1);
    assert_non_null(strstr(err.msg, "bad.json:1:"));

    write_tmp(p.data, "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\",\n"
                      " \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}}");
    assert_int_equal(tfm_tokenizer_load(&t, p.data, &err), -1);
    assert_non_null(strstr(err.msg, "bad.json:2:"));
    assert_non_null(strstr(err.msg, "'c'"));

    write_tmp(p.data, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}}}");
    assert_int_equal(tfm_tokenizer_load(&t, p.data, &err), -1);
    assert_non_null(strstr(err.msg, "bad.json:1:"));

    write_tmp(p.data, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 2000000000}}}");
    assert_int_equal(tfm_tokenizer_load(&t, p.data, &err), -1);
    assert_non_null(strstr(err.msg, "bad.json:1:"));

    write_tmp(p.data, "{\"vocab\": 1}");
    assert_int_equal(tfm_tokenizer_load(&t, p.data, &err), -1);
    assert_non_null(strstr(err.msg, "bad.json"));

    tfm_buf_clear(&p);
    tfm_buf_printf(&p, "%s/missing.json", dir);
    assert_int_equal(tfm_tokenizer_load(&t, p.data, &err), -1);
    assert_non_null(strstr(err.msg, "missing.json"));

    /* a directory without tokenizer files */
    assert_int_equal(tfm_tokenizer_load(&t, dir, &err), -1);
    assert_non_null(strstr(err.msg, dir));

    /* GPT-2 files with a broken merges line */
    tfm_buf_clear(&p);
    tfm_buf_printf(&p, "%s/vocab.json", dir);
    write_tmp(p.data, "{\"a\": 0, \"b\": 1, \"ab\": 2}");
    tfm_buf_clear(&p);
    tfm_buf_printf(&p, "%s/merges.txt", dir);
    write_tmp(p.data, "#version: 0.2\na b\nab\n");
    assert_int_equal(tfm_tokenizer_load(&t, dir, &err), -1);
    assert_non_null(strstr(err.msg, "merges.txt:3"));
    assert_int_equal(tfm_tokenizer_load(&t, p.data, &err), -1);
    assert_non_null(strstr(err.msg, "give the directory"));
    write_tmp(p.data, "#version: 0.2\na b\n");
    assert_int_equal(tfm_tokenizer_load(&t, dir, &err), 0);
    tfm_ids ids = {0};
    encode_str(t, NULL, "abab", 4, 0, &ids);
    assert_int_equal(ids.len, 2);
    assert_int_equal(ids.data[0], 2);
    tfm_tokenizer_free(t);
    tfm_ids_free(&ids);

    unlink(p.data);
    tfm_buf_clear(&p);
    tfm_buf_printf(&p, "%s/vocab.json", dir);
    unlink(p.data);
    tfm_buf_clear(&p);
    tfm_buf_printf(&p, "%s/bad.json", dir);
    unlink(p.data);
    rmdir(dir);
    tfm_buf_free(&p);
}

/* ---- training ---- */

static const char corpus[] =
    "The quick brown fox jumps over the lazy dog.\n"
    "The lazy dog sleeps; the quick fox runs away!\n"
    "It's a dog's life, isn't it? Yes, it's the dog's.\n"
    "Numbers: 123 456 7890, and 123 again 123.\n"
    "Caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80\n"
    "   indented   spaces   and\ttabs\t\tend  \n";

static tfm_tokenizer *train_bpe(int threads, uint32_t vocab, int pieces)
{
    tfm_tok_train_opts o = {.kind = TFM_TOK_BPE, .vocab_size = vocab, .min_frequency = 2,
                            .threads = threads, .lowercase = -1};
    tfm_tok_trainer *tr = tfm_tok_trainer_new(&o);
    for (int rep = 0; rep < 20; rep++) {
        if (pieces) {
            const char *s = corpus;
            while (*s) {
                const char *nl = strchr(s, '\n');
                tfm_tok_trainer_feed(tr, s, (size_t)(nl - s + 1));
                s = nl + 1;
            }
        } else {
            tfm_tok_trainer_feed(tr, corpus, sizeof corpus - 1);
        }
    }
    tfm_tokenizer *t;
    tfm_err err = {0};
    if (tfm_tok_trainer_finish(tr, &t, &err))
        fail_msg("%s", err.msg);
    tfm_tok_trainer_free(tr);
    return t;
}

static void test_train_bpe(void **state)
{
    tfm_tokenizer *a = train_bpe(1, 300, 1);
    tfm_tokenizer *b = train_bpe(2, 300, 1);
    tfm_buf ja = {0}, jb = {0};
    tfm_tokenizer_to_json(a, &ja);
    tfm_tokenizer_to_json(b, &jb);
    /* deterministic: the thread count does not matter */
    assert_int_equal(ja.len, jb.len);
    assert_memory_equal(ja.data, jb.data, ja.len);
    assert_int_equal(tfm_tokenizer_vocab_size(a), 300);
    /* <|endoftext|> is id 0, then the 256 bytes */
    assert_int_equal(tfm_tokenizer_specials(a)->eos, 0);
    assert_int_equal(tfm_tokenizer_token_id(a, "\xc4\xa0", 2), 1 + 32);
    /* the most frequent pair merges first: " t" ... at least "Ġ" + letter */
    assert_int_equal(tfm_tokenizer_merge_rank(a, 257), 0);
    /* common words became single tokens */
    assert_true(tfm_tokenizer_token_id(a, "\xc4\xa0" "dog", 5) >= 257);
    assert_true(tfm_tokenizer_token_id(a, "The", 3) >= 257);

    tfm_ids ids = {0};
    encode_str(a, NULL, corpus, sizeof corpus - 1, 0, &ids);
    assert_true(ids.len < (sizeof corpus - 1) * 2 / 3);
    check_roundtrip(a, corpus, sizeof corpus - 1, &ids);
    const char *odd = "unseen \xff\xfe bytes <|endoftext|> zzz";
    encode_str(a, NULL, odd, strlen(odd), 1, &ids);
    check_roundtrip(a, odd, strlen(odd), &ids);

    /* tokenizer.json loads back identical */
    tfm_tokenizer *c;
    tfm_err err = {0};
    if (tfm_tokenizer_from_json(&c, ja.data, ja.len, "trained.json", &err))
        fail_msg("%s", err.msg);
    tfm_buf jc = {0};
    tfm_tokenizer_to_json(c, &jc);
    assert_int_equal(ja.len, jc.len);
    assert_memory_equal(ja.data, jc.data, ja.len);
    tfm_ids ids2 = {0};
    encode_str(a, NULL, corpus, sizeof corpus - 1, 1, &ids);
    encode_str(c, NULL, corpus, sizeof corpus - 1, 1, &ids2);
    assert_int_equal(ids.len, ids2.len);
    assert_memory_equal(ids.data, ids2.data, ids.len * 4);

    tfm_tokenizer_free(a);
    tfm_tokenizer_free(b);
    tfm_tokenizer_free(c);
    tfm_buf_free(&ja);
    tfm_buf_free(&jb);
    tfm_buf_free(&jc);
    tfm_ids_free(&ids);
    tfm_ids_free(&ids2);
}

/* Training on a tiny corpus with a known answer. */
/* The trainer against a naive one (recount every pair at every step, same
 * tie-break) on a small corpus: the same vocabulary in the same order. */
typedef struct naive_word {
    uint32_t sym[256];
    size_t n;
    uint64_t count;
} naive_word;

static void test_train_naive(void **state)
{
    const uint32_t vocab = 420;
    const uint64_t minf = 2;
    /* words of the corpus (fed once, whole) */
    naive_word *w = tfm_calloc(1024, sizeof *w);
    size_t nw = 0;
    const unsigned char *s = (const unsigned char *)corpus;
    size_t n = sizeof corpus - 1, i = 0;
    while (i < n) {
        size_t j = tfm_gpt2_pretok_next(s, n, i);
        size_t k;
        for (k = 0; k < nw; k++) {
            if (w[k].n != j - i)
                continue;
            size_t q = 0;
            while (q < w[k].n && w[k].sym[q] == 1u + s[i + q])
                q++;
            if (q == w[k].n)
                break;
        }
        if (k == nw) {
            assert_true(nw < 1024 && j - i <= 256);
            w[nw].n = j - i;
            for (size_t q = 0; q < j - i; q++)
                w[nw].sym[q] = 1u + s[i + q]; /* id 0 is <|endoftext|> */
            nw++;
        }
        w[k].count += 3; /* fed three times below */
        i = j;
    }
    /* pieces as raw bytes, by id */
    tfm_buf *piece = tfm_calloc(vocab + 1, sizeof *piece);
    uint32_t npiece = 257;
    for (uint32_t b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        tfm_buf_append(&piece[b + 1], &c, 1);
    }
    uint64_t *cnt = tfm_calloc((size_t)vocab * vocab, sizeof *cnt);
    while (npiece < vocab) {
        memset(cnt, 0, (size_t)vocab * vocab * sizeof *cnt);
        for (size_t k = 0; k < nw; k++)
            for (size_t q = 0; q + 1 < w[k].n; q++)
                cnt[(size_t)w[k].sym[q] * vocab + w[k].sym[q + 1]] += w[k].count;
        uint64_t best = 0;
        size_t bi = 0;
        for (size_t x = 0; x < (size_t)vocab * vocab; x++)
            if (cnt[x] > best) { /* row-major scan: ties keep the smaller (a, b) */
                best = cnt[x];
                bi = x;
            }
        if (best < minf)
            break;
        uint32_t a = (uint32_t)(bi / vocab), b = (uint32_t)(bi % vocab);
        tfm_buf nb = {0};
        tfm_buf_append(&nb, piece[a].data, piece[a].len);
        tfm_buf_append(&nb, piece[b].data, piece[b].len);
        uint32_t z = npiece;
        for (uint32_t x = 1; x < npiece; x++)
            if (piece[x].len == nb.len && memcmp(piece[x].data, nb.data, nb.len) == 0)
                z = x;
        if (z == npiece)
            piece[npiece++] = nb;
        else
            tfm_buf_free(&nb);
        for (size_t k = 0; k < nw; k++) {
            size_t o = 0;
            for (size_t q = 0; q < w[k].n;) {
                if (q + 1 < w[k].n && w[k].sym[q] == a && w[k].sym[q + 1] == b) {
                    w[k].sym[o++] = z;
                    q += 2;
                } else {
                    w[k].sym[o++] = w[k].sym[q++];
                }
            }
            w[k].n = o;
        }
    }
    /* ours */
    tfm_tok_train_opts o = {.kind = TFM_TOK_BPE, .vocab_size = vocab, .min_frequency = minf,
                            .threads = 1, .lowercase = -1};
    tfm_tok_trainer *tr = tfm_tok_trainer_new(&o);
    for (int rep = 0; rep < 3; rep++)
        tfm_tok_trainer_feed(tr, corpus, sizeof corpus - 1);
    tfm_tokenizer *t;
    tfm_err err = {0};
    assert_int_equal(tfm_tok_trainer_finish(tr, &t, &err), 0);
    tfm_tok_trainer_free(tr);
    assert_true(npiece > 320); /* plenty of merges, with ties among them */
    assert_int_equal(tfm_tokenizer_vocab_size(t), npiece);
    for (uint32_t id = 257; id < npiece; id++) {
        tfm_buf spelt = {0};
        tfm_bpe_spell((const unsigned char *)piece[id].data, piece[id].len, &spelt);
        size_t len;
        const char *p = tfm_tokenizer_piece(t, id, &len);
        if (len != spelt.len || memcmp(p, spelt.data, len) != 0)
            fail_msg("id %u: '%.*s', naive '%s'", id, (int)len, p, tfm_buf_cstr(&spelt));
        tfm_buf_free(&spelt);
    }
    for (uint32_t x = 0; x <= vocab; x++)
        tfm_buf_free(&piece[x]);
    free(piece);
    free(cnt);
    free(w);
    tfm_tokenizer_free(t);
}

static void test_train_known(void **state)
{
    tfm_tok_train_opts o = {.kind = TFM_TOK_BPE, .vocab_size = 0, .min_frequency = 2,
                            .threads = 1, .lowercase = -1};
    const char *specials[] = {"<s>", "</s>"};
    o.specials = specials;
    o.n_specials = 2;
    tfm_tok_trainer *tr = tfm_tok_trainer_new(&o);
    /* words: "aaab" x3 -> pairs (a,a) 6, (a,b) 3 */
    tfm_tok_trainer_feed(tr, "aaab aaab aaab", 14);
    tfm_tokenizer *t;
    tfm_err err = {0};
    assert_int_equal(tfm_tok_trainer_finish(tr, &t, &err), 0);
    tfm_tok_trainer_free(tr);
    /* 2 specials + 256 bytes, then "aa" (6), "aaa"?  After aa: words "aa a b"
     * x2 (" aaab" has a space first: "Ġ a a a b") -- check the first merge */
    size_t len;
    const char *p = tfm_tokenizer_piece(t, 258, &len);
    assert_non_null(p);
    assert_int_equal(len, 2);
    assert_memory_equal(p, "aa", 2);
    assert_int_equal(tfm_tokenizer_specials(t)->bos, 0);
    assert_int_equal(tfm_tokenizer_specials(t)->eos, 1);
    tfm_ids ids = {0};
    encode_str(t, NULL, "aaab", 4, 0, &ids);
    assert_int_equal(ids.len, 1);
    tfm_tokenizer_free(t);
    tfm_ids_free(&ids);
}

static void test_lowercase(void **state)
{
    tfm_tok_train_opts o = {.kind = TFM_TOK_BPE, .vocab_size = 400, .min_frequency = 1,
                            .threads = 1, .lowercase = 1};
    tfm_tok_trainer *tr = tfm_tok_trainer_new(&o);
    tfm_tok_trainer_feed(tr, corpus, sizeof corpus - 1);
    tfm_tokenizer *t;
    tfm_err err = {0};
    assert_int_equal(tfm_tok_trainer_finish(tr, &t, &err), 0);
    tfm_tok_trainer_free(tr);
    assert_true(tfm_tokenizer_token_id(t, "The", 3) < 0);
    tfm_ids a = {0}, b = {0};
    encode_str(t, NULL, "THE Quick DOG", 13, 0, &a);
    encode_str(t, NULL, "the quick dog", 13, 0, &b);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len * 4);
    tfm_buf js = {0};
    tfm_tokenizer_to_json(t, &js);
    assert_non_null(strstr(tfm_buf_cstr(&js), "\"normalizer\": {\"type\": \"Lowercase\"}"));
    tfm_tokenizer *c;
    if (tfm_tokenizer_from_json(&c, js.data, js.len, "lower.json", &err))
        fail_msg("%s", err.msg);
    encode_str(c, NULL, "THE Quick DOG", 13, 0, &b);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len * 4);
    /* Rust's char::to_lowercase: U+0130 becomes "i" + U+0307; invalid bytes stay */
    tfm_buf l = {0};
    tfm_utf8_lower("\xc4\xb0X\xce\xa3\xff", 6, &l);
    assert_int_equal(l.len, 7);
    assert_memory_equal(l.data, "i\xcc\x87x\xcf\x83\xff", 7);
    tfm_buf_free(&l);
    tfm_tokenizer_free(t);
    tfm_tokenizer_free(c);
    tfm_buf_free(&js);
    tfm_ids_free(&a);
    tfm_ids_free(&b);
}

static void test_char(void **state)
{
    tfm_tok_train_opts o = {.kind = TFM_TOK_CHAR, .threads = 1, .lowercase = -1};
    tfm_tok_trainer *tr = tfm_tok_trainer_new(&o);
    const char *text = "abracadabra \xc3\xa9\xc3\xa9\n";
    tfm_tok_trainer_feed(tr, text, strlen(text));
    tfm_tokenizer *t;
    tfm_err err = {0};
    assert_int_equal(tfm_tok_trainer_finish(tr, &t, &err), 0);
    tfm_tok_trainer_free(tr);
    assert_int_equal(tfm_tokenizer_kind(t), TFM_TOK_CHAR);
    /* <unk>, then a(5) b(2) r(2) é(2) c d ' ' '\n': ties by code point */
    static const char *const want[] = {"<unk>", "a", "b", "r", "\xc3\xa9", "\n", " ", "c", "d"};
    assert_int_equal(tfm_tokenizer_vocab_size(t), 9);
    for (uint32_t i = 0; i < 9; i++) {
        size_t len;
        const char *p = tfm_tokenizer_piece(t, i, &len);
        assert_int_equal(len, strlen(want[i]));
        assert_memory_equal(p, want[i], len);
    }
    assert_int_equal(tfm_tokenizer_specials(t)->unk, 0);
    tfm_ids ids = {0};
    encode_str(t, NULL, "abz\xc3\xa9\xff", 6, 0, &ids);
    assert_int_equal(ids.len, 5);
    assert_int_equal(ids.data[0], 1);
    assert_int_equal(ids.data[1], 2);
    assert_int_equal(ids.data[2], 0);
    assert_int_equal(ids.data[3], 4);
    assert_int_equal(ids.data[4], 0);
    encode_str(t, NULL, text, strlen(text), 0, &ids);
    check_roundtrip(t, text, strlen(text), &ids);
    tfm_buf js = {0}, js2 = {0};
    tfm_tokenizer_to_json(t, &js);
    assert_non_null(strstr(tfm_buf_cstr(&js), "\"Fuse\""));
    tfm_tokenizer *c;
    if (tfm_tokenizer_from_json(&c, js.data, js.len, "char.json", &err))
        fail_msg("%s", err.msg);
    assert_int_equal(tfm_tokenizer_kind(c), TFM_TOK_CHAR);
    tfm_tokenizer_to_json(c, &js2);
    assert_int_equal(js.len, js2.len);
    assert_memory_equal(js.data, js2.data, js.len);
    tfm_ids ids2 = {0};
    encode_str(c, NULL, "abz\xc3\xa9\xff", 6, 0, &ids2);
    encode_str(t, NULL, "abz\xc3\xa9\xff", 6, 0, &ids);
    assert_int_equal(ids.len, ids2.len);
    assert_memory_equal(ids.data, ids2.data, ids.len * 4);
    tfm_tokenizer_free(t);
    tfm_tokenizer_free(c);
    tfm_ids_free(&ids);
    tfm_ids_free(&ids2);

    /* holes in the id space: written back without them; decode rejects them */
    static const char holes[] = "{\"model\": {\"type\": \"BPE\", \"unk_token\": \"?\", "
                                "\"vocab\": {\"?\": 0, \"a\": 1, \"c\": 3}, \"merges\": []}}";
    if (tfm_tokenizer_from_json(&c, holes, strlen(holes), "holes.json", &err))
        fail_msg("%s", err.msg);
    assert_int_equal(tfm_tokenizer_vocab_size(c), 4);
    tfm_buf_clear(&js);
    tfm_tokenizer_to_json(c, &js);
    assert_non_null(strstr(tfm_buf_cstr(&js), "\"c\": 3"));
    uint32_t two = 2;
    tfm_buf_clear(&js2);
    assert_int_equal(tfm_tokenizer_decode(c, &two, 1, 0, &js2, &err), -1);
    tfm_tokenizer_free(c);
    tfm_buf_free(&js);
    tfm_buf_free(&js2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pretok),
        cmocka_unit_test(test_pretok_llama3),
        cmocka_unit_test(test_classes),
        cmocka_unit_test(test_golden_shared),
        cmocka_unit_test(test_golden_extra),
        cmocka_unit_test(test_golden_random),
        cmocka_unit_test(test_roundtrip_random),
        cmocka_unit_test(test_merge_paths_agree),
        cmocka_unit_test(test_long_word),
        cmocka_unit_test(test_specials),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_json_roundtrip_gpt2),
        cmocka_unit_test(test_ignore_merges),
        cmocka_unit_test(test_added_strip),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_train_bpe),
        cmocka_unit_test(test_train_known),
        cmocka_unit_test(test_train_naive),
        cmocka_unit_test(test_lowercase),
        cmocka_unit_test(test_char),
    };
    return cmocka_run_group_tests(tests, load_gpt2, free_gpt2);
}
