/* WordPiece exactness against HuggingFace tokenizers (golden files in
 * testdata/bert, produced as testdata/bert/README says), decoding, loading
 * edge cases and the trainer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/file.h"
#include "io/json.h"
#include "text/bert_internal.h"
#include "text/wordpiece.h"

static char *path_of(const char *name)
{
    const char *src = getenv("TFM_SRCDIR");
    tfm_buf b = {0};
    tfm_buf_printf(&b, "%s/testdata/bert/%s", src ? src : "..", name);
    return (char *)tfm_buf_cstr(&b);
}

static tfm_wordpiece *bert_vocab(void)
{
    static tfm_wordpiece *wp;
    if (!wp) {
        tfm_err e = {0};
        char *p = path_of("bert-base-uncased-vocab.txt");
        if (tfm_wordpiece_load_vocab_txt(&wp, p, &e) < 0)
            fail_msg("%s", e.msg);
        free(p);
    }
    return wp;
}

/* Decodes a JSON string literal through the project's JSON reader. */
static void json_string(const char *lit, size_t n, tfm_buf *out)
{
    tfm_json_doc d;
    tfm_err e = {0};
    if (tfm_json_parse(&d, lit, n, "case", 0, &e) < 0)
        fail_msg("bad case %.*s: %s", (int)n, lit, e.msg);
    assert_int_equal(d.root->type, TFM_JSON_STRING);
    tfm_buf_clear(out);
    tfm_buf_append(out, d.root->str, d.root->len);
    tfm_json_doc_free(&d);
}

static void parse_ids(const char *s, size_t n, tfm_ids *ids)
{
    tfm_ids_clear(ids);
    size_t i = 0;
    while (i < n) {
        while (i < n && s[i] == ' ')
            i++;
        if (i >= n)
            break;
        uint32_t v = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9')
            v = v * 10 + (uint32_t)(s[i++] - '0');
        tfm_ids_push(ids, v);
    }
}

static void show_ids(const char *what, const tfm_ids *ids)
{
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < ids->len; i++)
        fprintf(stderr, " %u", ids->data[i]);
    fprintf(stderr, "\n");
}

static int same_ids(const tfm_ids *a, const tfm_ids *b)
{
    return a->len == b->len && (a->len == 0 || !memcmp(a->data, b->data, a->len * 4));
}

/* Every line "input<TAB>ids" of a golden file must match.  hex: the input is
 * hex bytes rather than a JSON string. */
static void check_file(const tfm_wordpiece *wp, const char *name, int hex)
{
    char *p = path_of(name);
    tfm_map m;
    tfm_err e = {0};
    if (tfm_map_open(&m, p, &e) < 0)
        fail_msg("%s", e.msg);
    const char *s = (const char *)m.data, *end = s + m.size;
    tfm_buf in = {0};
    tfm_ids want = {0}, got = {0};
    tfm_wordpiece_scratch *sc = tfm_wordpiece_scratch_new();
    int bad = 0, lines = 0;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        if (!nl)
            nl = end;
        const char *tab = memchr(s, '\t', (size_t)(nl - s));
        assert_non_null(tab);
        if (hex) {
            tfm_buf_clear(&in);
            for (const char *q = s; q + 1 < tab; q += 2) {
                unsigned v;
                sscanf(q, "%2x", &v);
                tfm_buf_putc(&in, (char)v);
            }
        } else {
            json_string(s, (size_t)(tab - s), &in);
        }
        parse_ids(tab + 1, (size_t)(nl - tab - 1), &want);
        tfm_ids_clear(&got);
        tfm_wordpiece_encode(wp, lines & 1 ? sc : NULL, in.data, in.len, &got);
        lines++;
        if (!same_ids(&want, &got)) {
            fprintf(stderr, "%s:%d: %.*s\n", name, lines, (int)(tab - s), s);
            show_ids("want", &want);
            show_ids("got ", &got);
            bad++;
        }
        s = nl + 1;
    }
    tfm_wordpiece_scratch_free(sc);
    tfm_buf_free(&in);
    tfm_ids_free(&want);
    tfm_ids_free(&got);
    tfm_map_close(&m);
    free(p);
    assert_true(lines > 10);
    assert_int_equal(bad, 0);
}

static void test_golden(void **state)
{
    (void)state;
    check_file(bert_vocab(), "bert-uncased.tsv", 0);
}

static void test_cases_uncased(void **state)
{
    (void)state;
    check_file(bert_vocab(), "cases-uncased.tsv", 0);
}

static void test_invalid_utf8(void **state)
{
    (void)state;
    check_file(bert_vocab(), "invalid.tsv", 1);
}

/* A tokenizer.json around BERT's vocabulary with the given normalizer, built
 * through our own JSON writer (so this also round-trips model_json). */
static tfm_wordpiece *with_normalizer(const char *normalizer, const char *pre)
{
    tfm_wordpiece *base = bert_vocab();
    tfm_buf j = {0};
    tfm_buf_printf(&j, "{\"normalizer\":%s,\"pre_tokenizer\":%s,\"model\":", normalizer, pre);
    tfm_wordpiece_model_json(base, &j);
    tfm_buf_puts(&j, "}");
    tfm_json_doc d;
    tfm_err e = {0};
    if (tfm_json_parse(&d, j.data, j.len, "tok.json", 0, &e) < 0)
        fail_msg("%s", e.msg);
    tfm_wordpiece *wp;
    if (tfm_wordpiece_from_json(&wp, &d, tfm_json_get(d.root, "model"),
                                tfm_json_get(d.root, "normalizer"),
                                tfm_json_get(d.root, "pre_tokenizer"), &e) < 0)
        fail_msg("%s", e.msg);
    tfm_json_doc_free(&d);
    tfm_buf_free(&j);
    assert_int_equal(tfm_wordpiece_vocab_size(wp), tfm_wordpiece_vocab_size(base));
    return wp;
}

static void test_cases_other_normalizers(void **state)
{
    (void)state;
    static const struct {
        const char *norm, *file;
    } t[] = {
        {"{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,"
         "\"strip_accents\":null,\"lowercase\":true}",
         "cases-uncased.tsv"},
        {"{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,"
         "\"strip_accents\":null,\"lowercase\":false}",
         "cases-cased.tsv"},
        {"{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,"
         "\"strip_accents\":false,\"lowercase\":true}",
         "cases-lower_keep_accents.tsv"},
        {"{\"type\":\"BertNormalizer\",\"clean_text\":false,\"handle_chinese_chars\":false,"
         "\"strip_accents\":false,\"lowercase\":false}",
         "cases-raw.tsv"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        tfm_wordpiece *wp = with_normalizer(t[i].norm, "{\"type\":\"BertPreTokenizer\"}");
        check_file(wp, t[i].file, 0);
        tfm_wordpiece_free(wp);
    }
}

/* A tokenizer.json as HF writes it (pretty-printed, its own key order). */
static void test_hf_saved(void **state)
{
    (void)state;
    char *p = path_of("hf-saved.json");
    tfm_json_doc d;
    tfm_err e = {0};
    if (tfm_json_parse_file(&d, p, 0, &e) < 0)
        fail_msg("%s", e.msg);
    tfm_wordpiece *wp;
    if (tfm_wordpiece_from_json(&wp, &d, tfm_json_get(d.root, "model"),
                                tfm_json_get(d.root, "normalizer"),
                                tfm_json_get(d.root, "pre_tokenizer"), &e) < 0 ||
        tfm_wordpiece_decoder_from_json(wp, &d, tfm_json_get(d.root, "decoder"), &e) < 0)
        fail_msg("%s", e.msg);
    assert_int_equal(tfm_wordpiece_vocab_size(wp), 400);
    check_file(wp, "hf-saved.tsv", 0);
    tfm_wordpiece_free(wp);
    tfm_json_doc_free(&d);
    free(p);
}

/* Every code point through the normalizer and the pre-tokenizer, hashed in
 * the form testdata/bert/probe.js writes (hex UTF-8 columns), against the
 * hash of HF's output. */
static uint64_t fnv_buf(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    return h;
}

static void join_word(void *ctx, const char *w, size_t n)
{
    tfm_buf *b = ctx;
    if (b->len)
        tfm_buf_putc(b, '|');
    tfm_buf_append(b, w, n);
}

static void put_hex(tfm_buf *line, const tfm_buf *b)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < b->len; i++) {
        unsigned char c = (unsigned char)b->data[i];
        tfm_buf_putc(line, hx[c >> 4]);
        tfm_buf_putc(line, hx[c & 15]);
    }
}

static void test_every_code_point(void **state)
{
    (void)state;
    tfm_bert_norm nd, nl, nc;
    tfm_bert_norm_default(&nd);
    nl = nd;
    nl.strip_accents = 0;
    nc.clean_text = 1;
    nc.handle_chinese_chars = 0;
    nc.strip_accents = 0;
    nc.lowercase = 0;
    tfm_buf t = {0}, a = {0}, w = {0}, line = {0};
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        tfm_buf_clear(&line);
        tfm_buf_printf(&line, "%x\t", (unsigned)cp);
        tfm_buf_clear(&t);
        tfm_bert_put_utf8(&t, cp);
        tfm_buf_clear(&a);
        tfm_bert_normalize(&nd, t.data, t.len, &a);
        put_hex(&line, &a);
        tfm_buf_putc(&line, '\t');
        tfm_buf_clear(&a);
        tfm_bert_normalize(&nl, t.data, t.len, &a);
        put_hex(&line, &a);
        tfm_buf_putc(&line, '\t');
        tfm_buf_clear(&t);
        tfm_buf_putc(&t, 'a');
        tfm_bert_put_utf8(&t, cp);
        tfm_buf_putc(&t, 'b');
        tfm_buf_clear(&a);
        tfm_bert_normalize(&nc, t.data, t.len, &a);
        put_hex(&line, &a);
        tfm_buf_putc(&line, '\t');
        tfm_buf_clear(&a);
        tfm_bert_split(&nd, 0, 1, t.data, t.len, &w, join_word, &a);
        put_hex(&line, &a);
        tfm_buf_putc(&line, '\n');
        h = fnv_buf(h, line.data, line.len);
    }
    tfm_buf_free(&t);
    tfm_buf_free(&a);
    tfm_buf_free(&w);
    tfm_buf_free(&line);
    /* FNV-1a 64 of the probe.tsv that testdata/bert/probe.js writes from
     * HF tokenizers 0.23.2 (see testdata/bert/README). */
    assert_int_equal(h, 0xcf7880b10e86d2d9ULL);
}

/* Canonical reordering of combining marks (HF's NFD): testdata/bert/ccc.tsv
 * holds "input hex<TAB>normalized hex" from probe_ccc.js. */
static void test_canonical_order(void **state)
{
    (void)state;
    char *p = path_of("ccc.tsv");
    tfm_map m;
    tfm_err e = {0};
    if (tfm_map_open(&m, p, &e) < 0)
        fail_msg("%s", e.msg);
    tfm_bert_norm n;
    tfm_bert_norm_default(&n);
    const char *s = (const char *)m.data, *end = s + m.size;
    tfm_buf in = {0}, want = {0}, got = {0};
    int lines = 0, bad = 0;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *tab = memchr(s, '\t', (size_t)(nl - s));
        tfm_buf_clear(&in);
        tfm_buf_clear(&want);
        for (const char *q = s; q + 1 < tab; q += 2) {
            unsigned v;
            sscanf(q, "%2x", &v);
            tfm_buf_putc(&in, (char)v);
        }
        for (const char *q = tab + 1; q + 1 < nl; q += 2) {
            unsigned v;
            sscanf(q, "%2x", &v);
            tfm_buf_putc(&want, (char)v);
        }
        tfm_buf_clear(&got);
        tfm_bert_normalize(&n, in.data, in.len, &got);
        lines++;
        if (got.len != want.len || memcmp(got.data, want.data, got.len) != 0) {
            if (bad++ < 10)
                fprintf(stderr, "ccc.tsv:%d: %.*s\n", lines, (int)(tab - s), s);
        }
        s = nl + 1;
    }
    assert_true(lines > 1000);
    assert_int_equal(bad, 0);
    /* Across a dropped character (NUL goes before NFD), and with an ASCII
     * starter in between (no reordering across it). */
    const char *x = "a\xF0\x9D\x85\xAD\x00\xF0\x9D\x85\xA5" "b";
    tfm_buf_clear(&got);
    tfm_bert_normalize(&n, x, 11, &got);
    assert_int_equal(got.len, 10);
    assert_memory_equal(got.data, "a\xF0\x9D\x85\xA5\xF0\x9D\x85\xAD" "b", 10);
    x = "\xF0\x9D\x85\xAD" "c\xF0\x9D\x85\xA5";
    tfm_buf_clear(&got);
    tfm_bert_normalize(&n, x, 9, &got);
    assert_memory_equal(got.data, x, 9);
    tfm_buf_free(&in);
    tfm_buf_free(&want);
    tfm_buf_free(&got);
    tfm_map_close(&m);
    free(p);
}

/* The per-character table (fast path) against the full pipeline, for every
 * BMP character in every configuration, alone and between marks that
 * reorder. */
static void test_fast_path(void **state)
{
    (void)state;
    tfm_buf t = {0}, a = {0}, b = {0}, w = {0};
    int bad = 0;
    for (int cfg = 0; cfg < 16; cfg++) {
        tfm_bert_norm n = {cfg & 1, (cfg >> 1) & 1, (cfg >> 2) & 1, (cfg >> 3) & 1};
        for (int32_t cp = 0x80; cp < 0x10000; cp++) {
            if (cp >= 0xD800 && cp <= 0xDFFF)
                continue;
            for (int form = 0; form < 2; form++) {
                tfm_buf_clear(&t);
                if (form == 0) {
                    tfm_buf_puts(&t, "a");
                    tfm_bert_put_utf8(&t, cp);
                    tfm_buf_puts(&t, "b");
                } else {
                    tfm_buf_puts(&t, "x\xF0\x9D\x85\xAD");
                    tfm_bert_put_utf8(&t, cp);
                    tfm_buf_puts(&t, "\xF0\x9D\x85\xA5 ");
                }
                tfm_buf_clear(&a);
                tfm_buf_clear(&b);
                tfm_bert_nocache = 0;
                tfm_bert_split(&n, 1, 1, t.data, t.len, &w, join_word, &a);
                tfm_bert_nocache = 1;
                tfm_bert_split(&n, 1, 1, t.data, t.len, &w, join_word, &b);
                tfm_bert_nocache = 0;
                if (a.len != b.len || memcmp(a.data, b.data, a.len) != 0) {
                    if (bad++ < 10)
                        fprintf(stderr, "config %d U+%04X form %d differs\n", cfg, (unsigned)cp,
                                form);
                }
            }
        }
    }
    tfm_buf_free(&t);
    tfm_buf_free(&a);
    tfm_buf_free(&b);
    tfm_buf_free(&w);
    assert_int_equal(bad, 0);
}

/* testdata/bert/gen_random.js, ported: the same 20000 random lines. */
static uint32_t rnd_seed;
static uint32_t rnd(uint32_t n)
{
    rnd_seed = rnd_seed * 1103515245u + 12345u;
    return (rnd_seed >> 8) % n;
}

static int32_t rnd_cp(void)
{
    uint32_t r = rnd(100);
    if (r < 30) return 0x20 + (int32_t)rnd(0x5f);
    if (r < 40) return 0x80 + (int32_t)rnd(0x780);
    if (r < 50) return 0x300 + (int32_t)rnd(0x70);
    if (r < 60) return 0x4e00 + (int32_t)rnd(0x5200);
    if (r < 65) return 0x3000 + (int32_t)rnd(0x400);
    if (r < 72) return 0x2000 + (int32_t)rnd(0x1000);
    if (r < 80) {
        int32_t c;
        do
            c = 0x800 + (int32_t)rnd(0xf800);
        while (c >= 0xd800 && c <= 0xdfff);
        return c;
    }
    if (r < 85) return 0x1f300 + (int32_t)rnd(0x700);
    if (r < 88) return 0x1d100 + (int32_t)rnd(0x200);
    if (r < 95) return 0x10000 + (int32_t)rnd(0x10000);
    return 0x20000 + (int32_t)rnd(0xf0000);
}

static void test_random_text(void **state)
{
    (void)state;
    static const struct {
        const char *norm;
        uint64_t hash;
        size_t len;
    } cfg[] = {
        {"{\"type\":\"BertNormalizer\"}", 0xbf1d42b6954d8d20ULL, 1203399},
        {"{\"type\":\"BertNormalizer\",\"lowercase\":false,\"strip_accents\":false}",
         0xbb717faa7942f9b2ULL, 1187518},
        {"{\"type\":\"BertNormalizer\",\"lowercase\":true,\"strip_accents\":false}",
         0x38ea35835d907d28ULL, 1203418},
        {"{\"type\":\"BertNormalizer\",\"lowercase\":false,\"strip_accents\":true}",
         0xc9a3a1eac797dea7ULL, 1171944},
        {"{\"type\":\"BertNormalizer\",\"clean_text\":false,\"handle_chinese_chars\":false,"
         "\"lowercase\":false,\"strip_accents\":false}",
         0x591ad1cfc5c2a102ULL, 640926},
    };
    tfm_buf text = {0};
    size_t *ends = tfm_malloc(20000 * sizeof *ends);
    rnd_seed = 987654321u;
    for (int i = 0; i < 20000; i++) {
        uint32_t n = 1 + rnd(60);
        for (uint32_t j = 0; j < n; j++)
            tfm_bert_put_utf8(&text, rnd_cp());
        ends[i] = text.len;
    }
    tfm_ids ids = {0};
    tfm_buf out = {0};
    tfm_wordpiece_scratch *sc = tfm_wordpiece_scratch_new();
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        tfm_wordpiece *wp = with_normalizer(cfg[c].norm, "{\"type\":\"BertPreTokenizer\"}");
        tfm_buf_clear(&out);
        size_t start = 0;
        for (int i = 0; i < 20000; i++) {
            tfm_ids_clear(&ids);
            tfm_wordpiece_encode(wp, sc, text.data + start, ends[i] - start, &ids);
            for (size_t k = 0; k < ids.len; k++)
                tfm_buf_printf(&out, k ? " %u" : "%u", ids.data[k]);
            tfm_buf_putc(&out, '\n');
            start = ends[i];
        }
        uint64_t h = fnv_buf(0xcbf29ce484222325ULL, out.data, out.len);
        if (h != cfg[c].hash || out.len != cfg[c].len)
            fail_msg("config %zu: hash %#llx length %zu, want %#llx %zu", c,
                     (unsigned long long)h, out.len, (unsigned long long)cfg[c].hash, cfg[c].len);
        tfm_wordpiece_free(wp);
    }
    tfm_wordpiece_scratch_free(sc);
    tfm_ids_free(&ids);
    tfm_buf_free(&out);
    tfm_buf_free(&text);
    free(ends);
}

/* ---- decoding ---- */

static void test_decode_golden(void **state)
{
    (void)state;
    tfm_wordpiece *wp = bert_vocab();
    char *p = path_of("decode.tsv");
    tfm_map m;
    tfm_err e = {0};
    if (tfm_map_open(&m, p, &e) < 0)
        fail_msg("%s", e.msg);
    const char *s = (const char *)m.data, *end = s + m.size;
    tfm_buf want = {0}, got = {0};
    tfm_ids ids = {0};
    int bad = 0, n = 0;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *tab = memchr(s, '\t', (size_t)(nl - s));
        parse_ids(s, (size_t)(tab - s), &ids);
        json_string(tab + 1, (size_t)(nl - tab - 1), &want);
        tfm_buf_clear(&got);
        assert_int_equal(tfm_wordpiece_decode(wp, ids.data, ids.len, &got, &e), 0);
        n++;
        if (got.len != want.len || memcmp(got.data, want.data, got.len) != 0) {
            fprintf(stderr, "decode.tsv:%d: want '%.*s' got '%.*s'\n", n, (int)want.len,
                    want.data, (int)got.len, got.data);
            bad++;
        }
        s = nl + 1;
    }
    assert_int_equal(bad, 0);
    assert_true(n > 100);
    tfm_buf_free(&want);
    tfm_buf_free(&got);
    tfm_ids_free(&ids);
    tfm_map_close(&m);
    free(p);
}

static void test_decoder_cleanup(void **state)
{
    (void)state;
    char *p = path_of("decoder.tsv");
    tfm_map m;
    tfm_err e = {0};
    if (tfm_map_open(&m, p, &e) < 0)
        fail_msg("%s", e.msg);
    const char *s = (const char *)m.data, *end = s + m.size;
    tfm_buf want = {0}, got = {0};
    int n = 0;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *tab = memchr(s, '\t', (size_t)(nl - s));
        tfm_json_doc d;
        assert_int_equal(tfm_json_parse(&d, s, (size_t)(tab - s), "decoder.tsv", 0, &e), 0);
        const char *pieces[32];
        size_t lens[32];
        for (size_t i = 0; i < d.root->n; i++) {
            pieces[i] = d.root->items[i]->str;
            lens[i] = d.root->items[i]->len;
        }
        tfm_buf_clear(&got);
        tfm_wordpiece_decode_pieces(pieces, lens, d.root->n, "##", 1, &got);
        json_string(tab + 1, (size_t)(nl - tab - 1), &want);
        n++;
        if (got.len != want.len || memcmp(got.data, want.data, got.len) != 0)
            fail_msg("decoder.tsv:%d: want '%.*s' got '%.*s'", n, (int)want.len, want.data,
                     (int)got.len, got.data);
        tfm_json_doc_free(&d);
        s = nl + 1;
    }
    assert_true(n > 10);
    tfm_buf_free(&want);
    tfm_buf_free(&got);
    tfm_map_close(&m);
    free(p);
}

static void test_decode_bad_id(void **state)
{
    (void)state;
    tfm_buf out = {0};
    tfm_err e = {0};
    uint32_t ids[] = {7592, 30522};
    assert_int_equal(tfm_wordpiece_decode(bert_vocab(), ids, 2, &out, &e), -1);
    assert_non_null(strstr(e.msg, "30522"));
    tfm_buf_free(&out);
}

/* ---- loading ---- */

static tfm_wordpiece *vocab_of(const char *text, tfm_err *e)
{
    tfm_wordpiece *wp = NULL;
    tfm_wordpiece_from_vocab_txt(&wp, text, strlen(text), "v.txt", e);
    return wp;
}

static void expect_encode(const tfm_wordpiece *wp, const char *text, const uint32_t *want,
                          size_t n)
{
    tfm_ids got = {0};
    tfm_wordpiece_encode(wp, NULL, text, strlen(text), &got);
    if (got.len != n || (n && memcmp(got.data, want, n * 4)))
        show_ids(text, &got);
    assert_int_equal(got.len, n);
    if (n)
        assert_memory_equal(got.data, want, n * 4);
    tfm_ids_free(&got);
}

static void test_vocab_txt_edges(void **state)
{
    (void)state;
    tfm_err e = {0};
    /* \r\n endings, trailing blanks, an empty line, a duplicate, no final \n */
    tfm_wordpiece *wp = vocab_of("[UNK]\r\nun\r\n##aff  \n\n##able\nun\n##a\n##f\naf", &e);
    assert_non_null(wp);
    assert_int_equal(tfm_wordpiece_vocab_size(wp), 9);
    size_t len;
    assert_string_equal(tfm_wordpiece_piece(wp, 2, &len), "##aff");
    assert_int_equal(len, 5);
    assert_int_equal(tfm_wordpiece_piece(wp, 3, &len)[0], 0);
    assert_int_equal(tfm_wordpiece_id(wp, "un", 2), 5); /* the later duplicate */
    assert_int_equal(tfm_wordpiece_unk_id(wp), 0);
    const uint32_t w1[] = {5, 2, 4};
    expect_encode(wp, "unaffable", w1, 3);
    const uint32_t w2[] = {0, 8};
    expect_encode(wp, "unx af", w2, 2);
    const uint32_t w3[] = {8, 7, 6, 7};
    expect_encode(wp, "AFFAF", w3, 4);
    tfm_wordpiece_free(wp);

    assert_null(vocab_of("a\nb\n", &e));
    assert_non_null(strstr(e.msg, "[UNK]"));
    assert_null(vocab_of("[UNK]\nok\nbad\xff\n", &e));
    assert_string_equal(e.msg, "v.txt:3: invalid UTF-8");
    assert_null(vocab_of("", &e));
    assert_non_null(strstr(e.msg, "v.txt"));

    tfm_wordpiece *wp2;
    assert_int_equal(tfm_wordpiece_load_vocab_txt(&wp2, "/nonexistent/vocab.txt", &e), -1);
    assert_non_null(strstr(e.msg, "/nonexistent/vocab.txt"));
}

static void test_max_chars(void **state)
{
    (void)state;
    tfm_err e = {0};
    tfm_wordpiece *wp = vocab_of("[UNK]\na\n##a\n", &e);
    assert_non_null(wp);
    char buf[202];
    memset(buf, 'a', 101);
    buf[101] = 0;
    const uint32_t unk[] = {0};
    expect_encode(wp, buf, unk, 1);
    buf[100] = 0;
    uint32_t hundred[100];
    hundred[0] = 1;
    for (int i = 1; i < 100; i++)
        hundred[i] = 2;
    expect_encode(wp, buf, hundred, 100);
    tfm_wordpiece_free(wp);

    /* Pieces longer than the 64 precomputed hashes. */
    tfm_buf v = {0}, word = {0};
    tfm_buf_puts(&v, "[UNK]\n##b\n");
    for (int i = 0; i < 80; i++)
        tfm_buf_putc(&v, 'b');
    tfm_buf_puts(&v, "\n");
    for (int i = 0; i < 40; i++)
        tfm_buf_puts(&v, "\xD0\xB6"); /* ж */
    tfm_buf_puts(&v, "\n##");
    for (int i = 0; i < 35; i++)
        tfm_buf_puts(&v, "\xD0\xB6");
    tfm_buf_puts(&v, "\n");
    wp = vocab_of(tfm_buf_cstr(&v), &e);
    assert_non_null(wp);
    memset(buf, 'b', 99);
    buf[99] = 0;
    const uint32_t long_pieces[] = {2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    expect_encode(wp, buf, long_pieces, 20); /* 80 + 19 × 1 */
    for (int i = 0; i < 75; i++)
        tfm_buf_puts(&word, "\xD0\xB6");
    const uint32_t both[] = {3, 4}; /* 80 + 70 bytes, 75 characters */
    expect_encode(wp, tfm_buf_cstr(&word), both, 2);
    tfm_buf_free(&word);
    tfm_wordpiece_free(wp);
    tfm_buf_free(&v);
}

static void test_json_errors(void **state)
{
    (void)state;
    static const struct {
        const char *json, *msg;
    } t[] = {
        {"{\"model\":{\"type\":\"BPE\",\"vocab\":{}}}", "tok.json:1:18: model type 'BPE'"},
        {"{\"model\":{\"type\":\"WordPiece\"}}", "tok.json:1:10: model has no \"vocab\""},
        {"{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":-1}}}", "tok.json:1:43: token id"},
        {"{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"a\":0}}}",
         "tok.json: unknown token '[UNK]' is not in the vocabulary"},
        {"{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"[UNK]\":0,\"a\":0}}}",
         "tok.json:1:53: token id 0 is used twice"},
        {"{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"[UNK]\":99999999}}}",
         "tok.json:1:38: vocabulary ids go up to 99999999"},
        {"{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"[UNK]\":0}},"
         "\"normalizer\":{\"type\":\"NFC\"}}",
         "tok.json:1:72: normalizer type 'NFC'"},
        {"{\"model\":{\"type\":\"WordPiece\",\"vocab\":{\"[UNK]\":0}},"
         "\"normalizer\":{\"type\":\"BertNormalizer\",\"lowercase\":1}}",
         "tok.json:1:101: lowercase must be a boolean"},
        {"{\"model\":{\"type\":\"WordPiece\",\"unk_token\":5,\"vocab\":{\"[UNK]\":0}}}",
         "tok.json:1:42: unk_token must be a string"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        tfm_json_doc d;
        tfm_err e = {0};
        assert_int_equal(tfm_json_parse(&d, t[i].json, strlen(t[i].json), "tok.json", 0, &e), 0);
        tfm_wordpiece *wp = NULL;
        int r = tfm_wordpiece_from_json(&wp, &d, tfm_json_get(d.root, "model"),
                                        tfm_json_get(d.root, "normalizer"),
                                        tfm_json_get(d.root, "pre_tokenizer"), &e);
        if (r != -1 || strncmp(e.msg, t[i].msg, strlen(t[i].msg)) != 0)
            fail_msg("case %zu: got %d '%s', want '%s'", i, r, e.msg, t[i].msg);
        assert_null(wp);
        tfm_json_doc_free(&d);
    }
    /* A model without "type" (older files) is accepted; a missing model is
     * an error naming the file. */
    const char *ok = "{\"model\":{\"vocab\":{\"[UNK]\":0,\"a\":1}}}";
    tfm_json_doc d;
    tfm_err e = {0};
    assert_int_equal(tfm_json_parse(&d, ok, strlen(ok), "tok.json", 0, &e), 0);
    tfm_wordpiece *wp;
    assert_int_equal(tfm_wordpiece_from_json(&wp, &d, tfm_json_get(d.root, "model"), NULL, NULL, &e), 0);
    assert_int_equal(tfm_wordpiece_vocab_size(wp), 2);
    tfm_wordpiece_free(wp);
    assert_int_equal(tfm_wordpiece_from_json(&wp, &d, NULL, NULL, NULL, &e), -1);
    assert_string_equal(e.msg, "tok.json: model is missing");
    tfm_json_doc_free(&d);
}

static void test_json_pieces(void **state)
{
    (void)state;
    tfm_wordpiece *wp = bert_vocab();
    tfm_buf b = {0};
    tfm_wordpiece_normalizer_json(wp, &b);
    assert_string_equal(tfm_buf_cstr(&b),
                        "{\"type\":\"BertNormalizer\",\"clean_text\":true,"
                        "\"handle_chinese_chars\":true,\"strip_accents\":null,"
                        "\"lowercase\":true}");
    tfm_buf_clear(&b);
    tfm_wordpiece_pre_tokenizer_json(wp, &b);
    assert_string_equal(tfm_buf_cstr(&b), "{\"type\":\"BertPreTokenizer\"}");
    tfm_buf_clear(&b);
    tfm_wordpiece_decoder_json(wp, &b);
    assert_string_equal(tfm_buf_cstr(&b), "{\"type\":\"WordPiece\",\"prefix\":\"##\",\"cleanup\":true}");
    tfm_buf_clear(&b);
    tfm_wordpiece_post_processor_json(wp, &b);
    assert_string_equal(tfm_buf_cstr(&b),
                        "{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",102],"
                        "\"cls\":[\"[CLS]\",101]}");
    tfm_buf_clear(&b);
    tfm_wordpiece_model_json(wp, &b);
    assert_memory_equal(b.data,
                        "{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\","
                        "\"continuing_subword_prefix\":\"##\",\"max_input_chars_per_word\":100,"
                        "\"vocab\":{\"[PAD]\":0,",
                        120);
    tfm_buf_free(&b);

    /* The decoder's options come back from JSON. */
    tfm_json_doc d;
    tfm_err e = {0};
    const char *j = "{\"type\":\"WordPiece\",\"prefix\":\"@@\",\"cleanup\":false}";
    assert_int_equal(tfm_json_parse(&d, j, strlen(j), "d.json", 0, &e), 0);
    tfm_wordpiece *w2 = vocab_of("[UNK]\nhello\n@@lo\n.\n", &e);
    assert_int_equal(tfm_wordpiece_decoder_from_json(w2, &d, d.root, &e), 0);
    uint32_t ids[] = {1, 2, 3};
    tfm_buf out = {0};
    assert_int_equal(tfm_wordpiece_decode(w2, ids, 3, &out, &e), 0);
    assert_string_equal(tfm_buf_cstr(&out), "hellolo .");
    const char *pc[] = {"a", "@@b", "."};
    size_t pl[] = {1, 3, 1};
    tfm_buf_clear(&out);
    tfm_wordpiece_decode_pieces_wp(w2, pc, pl, 3, &out);
    assert_string_equal(tfm_buf_cstr(&out), "ab .");
    tfm_buf_free(&out);
    tfm_wordpiece_free(w2);
    tfm_json_doc_free(&d);
}

static void test_no_pretokenizer(void **state)
{
    (void)state;
    /* HF with pre_tokenizer null: the whole normalized text is one word. */
    tfm_wordpiece *wp = with_normalizer("null", "null");
    const uint32_t want[] = {7592}; /* "hello" */
    expect_encode(wp, "hello", want, 1);
    const uint32_t unk[] = {100};   /* "hello world" has no full match */
    expect_encode(wp, "hello world", unk, 1);
    const uint32_t upper[] = {100}; /* no lowercasing without a normalizer */
    expect_encode(wp, "Hello", upper, 1);
    tfm_wordpiece_free(wp);
}

static void test_pretokenize_api(void **state)
{
    (void)state;
    tfm_bert_norm n;
    tfm_bert_norm_default(&n);
    tfm_bert_words w = {0};
    const char *text = "Héllo, 世界! a\xffz";
    tfm_bert_pretokenize(&n, text, strlen(text), &w);
    static const char *const want[] = {"hello", ",", "世", "界", "!", "az"};
    assert_int_equal(w.n, 6);
    for (size_t i = 0; i < w.n; i++) {
        assert_int_equal(w.len[i], strlen(want[i]));
        assert_memory_equal(w.text.data + w.off[i], want[i], w.len[i]);
    }
    tfm_bert_words_free(&w);
    tfm_buf b = {0};
    tfm_bert_normalize(&n, "ÀB\tC", 5, &b);
    assert_string_equal(tfm_buf_cstr(&b), "ab c");
    tfm_buf_free(&b);
}

/* ---- training ---- */

static tfm_wordpiece *train_score(const char *corpus, size_t len, uint32_t vocab, uint64_t minf,
                                  tfm_wordpiece_score score)
{
    tfm_tok_train_opts o = {.kind = TFM_TOK_WORDPIECE, .vocab_size = vocab,
                            .min_frequency = minf, .lowercase = -1, .threads = 1};
    tfm_wordpiece_trainer *t = tfm_wordpiece_trainer_new(&o);
    tfm_wordpiece_trainer_set_score(t, score);
    tfm_wordpiece_trainer_feed(t, corpus, len);
    tfm_wordpiece *wp;
    tfm_err e = {0};
    if (tfm_wordpiece_trainer_finish(t, &wp, &e) < 0)
        fail_msg("%s", e.msg);
    tfm_wordpiece_trainer_free(t);
    return wp;
}

static tfm_wordpiece *train_len(const char *corpus, size_t len, uint32_t vocab, uint64_t minf)
{
    return train_score(corpus, len, vocab, minf, TFM_WP_SCORE_COUNT);
}

static tfm_wordpiece *train(const char *corpus, uint32_t vocab, uint64_t minf)
{
    return train_len(corpus, strlen(corpus), vocab, minf);
}

static void expect_pieces(const tfm_wordpiece *wp, const char *const *want, size_t n)
{
    if (tfm_wordpiece_vocab_size(wp) != n) {
        for (uint32_t i = 0; i < tfm_wordpiece_vocab_size(wp); i++)
            fprintf(stderr, " %s", tfm_wordpiece_piece(wp, i, NULL));
        fprintf(stderr, "\n");
    }
    assert_int_equal(tfm_wordpiece_vocab_size(wp), n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(tfm_wordpiece_piece(wp, (uint32_t)i, NULL), want[i]);
}

static void test_train_tiny(void **state)
{
    (void)state;
    /* ab: 3 times, cd: once.  Alphabet ##b ##d a c.  The count score merges
     * the frequent pair first; the ratio score, (a,##b) 3/(3·3) against
     * (c,##d) 1/(1·1), the rare one. */
    const char *corpus = "AB ab ab cd";
    static const char *const v10[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                      "##b",   "##d",   "a",     "c",     "ab"};
    tfm_wordpiece *wp = train(corpus, 10, 0);
    expect_pieces(wp, v10, 10);
    tfm_wordpiece_free(wp);
    static const char *const v10r[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                       "##b",   "##d",   "a",     "c",     "cd"};
    wp = train_score(corpus, strlen(corpus), 10, 0, TFM_WP_SCORE_RATIO);
    expect_pieces(wp, v10r, 10);
    tfm_wordpiece_free(wp);
    static const char *const v11[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "##b",
                                      "##d",   "a",     "c",     "ab",    "cd"};
    wp = train(corpus, 100, 0);
    expect_pieces(wp, v11, 11);
    tfm_wordpiece_free(wp);
    /* min_frequency 2: cd (count 1) is never merged. */
    static const char *const vmin[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                       "##b",   "##d",   "a",     "c",     "ab"};
    wp = train(corpus, 100, 2);
    expect_pieces(wp, vmin, 10);
    tfm_wordpiece_free(wp);
    /* A tie (equal score and count) goes to the smaller id of a: a < c. */
    static const char *const vtie[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
                                       "##b",   "##d",   "a",     "c",     "ab"};
    wp = train("cd ab", 10, 0);
    expect_pieces(wp, vtie, 10);
    tfm_wordpiece_free(wp);
}

static void test_train_merges_reuse(void **state)
{
    (void)state;
    /* "abc" can be built two ways; the piece must appear once. */
    tfm_wordpiece *wp = train("abc abc ab bc abd xbc", 1000, 0);
    uint32_t n = tfm_wordpiece_vocab_size(wp);
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++)
            assert_string_not_equal(tfm_wordpiece_piece(wp, i, NULL),
                                    tfm_wordpiece_piece(wp, j, NULL));
    /* Everything merged: each word is one piece. */
    tfm_ids ids = {0};
    tfm_wordpiece_encode(wp, NULL, "abc abd xbc", 11, &ids);
    assert_int_equal(ids.len, 3);
    tfm_ids_free(&ids);
    tfm_wordpiece_free(wp);
}

/* Frequent words become pieces of their own: Zipf-like counts of common
 * words plus rare words full of one-off letter pairs.  A score that favours
 * rare pairs (count(ab)/(count(a)·count(b))) spends the budget on those and
 * leaves the common words in pieces. */
static void test_train_learns_words(void **state)
{
    (void)state;
    static const char *const common[] = {"the", "and", "of", "that", "shall", "unto",
                                         "lord", "his", "they", "said", "heaven", "earth"};
    const size_t nc = sizeof common / sizeof *common;
    tfm_buf b = {0};
    rnd_seed = 7;
    for (int line = 0; line < 400; line++) {
        for (size_t i = 0; i < nc; i++)
            for (size_t r = 0; r < nc - i; r++) {
                tfm_buf_puts(&b, common[i]);
                tfm_buf_putc(&b, ' ');
            }
        /* a rare word: random letters */
        for (int k = 0; k < 6; k++)
            tfm_buf_putc(&b, (char)('a' + rnd(26)));
        tfm_buf_putc(&b, '\n');
    }
    /* Specials, the alphabet (##-forms included), then 40 merges: enough
     * for the 12 words (31 merges if no piece were shared). */
    tfm_wordpiece *wp = train_len(b.data, b.len, 5 + 2 * 26 + 40, 2);
    tfm_ids ids = {0};
    for (size_t i = 0; i < nc; i++) {
        tfm_ids_clear(&ids);
        tfm_wordpiece_encode_word(wp, common[i], strlen(common[i]), &ids);
        if (ids.len != 1)
            fail_msg("'%s' is %zu pieces", common[i], ids.len);
    }
    tfm_ids_free(&ids);
    tfm_wordpiece_free(wp);
    tfm_buf_free(&b);
}

static const char *corpus_text(size_t *len)
{
    static tfm_buf b;
    if (!b.len) {
        /* A varied corpus: the golden inputs plus the hand-made cases. */
        const char *files[] = {"bert-uncased.tsv", "cases-uncased.tsv"};
        for (int f = 0; f < 2; f++) {
            char *p = path_of(files[f]);
            tfm_map m;
            tfm_err e = {0};
            if (tfm_map_open(&m, p, &e) < 0)
                fail_msg("%s", e.msg);
            const char *s = (const char *)m.data, *end = s + m.size;
            tfm_buf one = {0};
            while (s < end) {
                const char *nl = memchr(s, '\n', (size_t)(end - s));
                const char *tab = memchr(s, '\t', (size_t)(nl - s));
                json_string(s, (size_t)(tab - s), &one);
                tfm_buf_append(&b, one.data, one.len);
                tfm_buf_putc(&b, '\n');
                s = nl + 1;
            }
            tfm_buf_free(&one);
            tfm_map_close(&m);
            free(p);
        }
    }
    *len = b.len;
    return b.data;
}

static void test_train_roundtrip(void **state)
{
    (void)state;
    size_t len;
    const char *text = corpus_text(&len);
    tfm_tok_train_opts o = {.kind = TFM_TOK_WORDPIECE, .vocab_size = 600, .min_frequency = 2,
                            .lowercase = -1, .threads = 1};
    tfm_wordpiece *wp[2];
    for (int r = 0; r < 2; r++) {
        tfm_wordpiece_trainer *t = tfm_wordpiece_trainer_new(&o);
        /* fed in pieces the second time: counting must not care */
        if (r == 0) {
            tfm_wordpiece_trainer_feed(t, text, len);
        } else {
            const char *s = text, *end = text + len;
            while (s < end) {
                const char *nl = memchr(s, '\n', (size_t)(end - s));
                tfm_wordpiece_trainer_feed(t, s, (size_t)(nl - s) + 1);
                s = nl + 1;
            }
        }
        tfm_err e = {0};
        assert_int_equal(tfm_wordpiece_trainer_finish(t, &wp[r], &e), 0);
        tfm_wordpiece_trainer_free(t);
    }
    /* Deterministic. */
    uint32_t n = tfm_wordpiece_vocab_size(wp[0]);
    assert_int_equal(n, 600);
    assert_int_equal(tfm_wordpiece_vocab_size(wp[1]), n);
    for (uint32_t i = 0; i < n; i++)
        assert_string_equal(tfm_wordpiece_piece(wp[0], i, NULL), tfm_wordpiece_piece(wp[1], i, NULL));
    assert_string_equal(tfm_wordpiece_piece(wp[0], 1, NULL), "[UNK]");
    assert_int_equal(tfm_wordpiece_unk_id(wp[0]), 1);

    /* Round trip: every word of the corpus (up to 100 characters) encodes
     * without [UNK], and the pieces glue back to the word. */
    tfm_bert_norm norm;
    tfm_bert_norm_default(&norm);
    tfm_bert_words w = {0};
    tfm_bert_pretokenize(&norm, text, len, &w);
    tfm_ids ids = {0};
    tfm_buf out = {0};
    size_t pieces = 0;
    for (size_t i = 0; i < w.n; i++) {
        const char *s = w.text.data + w.off[i];
        size_t chars = 0;
        for (size_t k = 0; k < w.len[i]; k++)
            chars += ((unsigned char)s[k] & 0xC0) != 0x80;
        if (chars > 100)
            continue;
        tfm_ids_clear(&ids);
        tfm_wordpiece_encode_word(wp[0], s, w.len[i], &ids);
        pieces += ids.len;
        tfm_buf_clear(&out);
        tfm_err e = {0};
        assert_int_equal(tfm_wordpiece_decode(wp[0], ids.data, ids.len, &out, &e), 0);
        if (out.len != w.len[i] || memcmp(out.data, s, out.len) != 0)
            fail_msg("word '%.*s' came back as '%.*s'", (int)w.len[i], s, (int)out.len, out.data);
    }
    /* The merges did something: fewer pieces than characters. */
    assert_true(pieces * 4 < w.text.len * 3);
    tfm_bert_words_free(&w);
    tfm_ids_free(&ids);
    tfm_buf_free(&out);

    /* The trained model survives tokenizer.json and back. */
    tfm_buf j = {0};
    tfm_buf_puts(&j, "{\"normalizer\":");
    tfm_wordpiece_normalizer_json(wp[0], &j);
    tfm_buf_puts(&j, ",\"pre_tokenizer\":");
    tfm_wordpiece_pre_tokenizer_json(wp[0], &j);
    tfm_buf_puts(&j, ",\"model\":");
    tfm_wordpiece_model_json(wp[0], &j);
    tfm_buf_puts(&j, "}");
    tfm_json_doc d;
    tfm_err e = {0};
    assert_int_equal(tfm_json_parse(&d, j.data, j.len, "t.json", 0, &e), 0);
    tfm_wordpiece *back;
    assert_int_equal(tfm_wordpiece_from_json(&back, &d, tfm_json_get(d.root, "model"),
                                             tfm_json_get(d.root, "normalizer"),
                                             tfm_json_get(d.root, "pre_tokenizer"), &e),
                     0);
    tfm_ids a = {0}, b = {0};
    tfm_wordpiece_encode(wp[0], NULL, text, len, &a);
    tfm_wordpiece_encode(back, NULL, text, len, &b);
    assert_true(same_ids(&a, &b));
    tfm_ids_free(&a);
    tfm_ids_free(&b);
    tfm_wordpiece_free(back);
    tfm_json_doc_free(&d);
    tfm_buf_free(&j);
    tfm_wordpiece_free(wp[0]);
    tfm_wordpiece_free(wp[1]);
}

/* Counting on several threads gives the same vocabulary. */
static void test_train_threads(void **state)
{
    (void)state;
    size_t len;
    const char *text = corpus_text(&len);
    tfm_buf big = {0};
    for (int i = 0; i < 4; i++)
        tfm_buf_append(&big, text, len);
    tfm_wordpiece *wp[3];
    for (int r = 0; r < 3; r++) {
        tfm_tok_train_opts o = {.kind = TFM_TOK_WORDPIECE, .vocab_size = 800, .min_frequency = 2,
                                .lowercase = -1, .threads = r + 1};
        tfm_wordpiece_trainer *t = tfm_wordpiece_trainer_new(&o);
        tfm_wordpiece_trainer_feed(t, big.data, big.len);
        tfm_wordpiece_trainer_feed(t, text, len);
        tfm_err e = {0};
        assert_int_equal(tfm_wordpiece_trainer_finish(t, &wp[r], &e), 0);
        tfm_wordpiece_trainer_free(t);
    }
    for (int r = 1; r < 3; r++) {
        assert_int_equal(tfm_wordpiece_vocab_size(wp[r]), tfm_wordpiece_vocab_size(wp[0]));
        for (uint32_t i = 0; i < tfm_wordpiece_vocab_size(wp[0]); i++)
            assert_string_equal(tfm_wordpiece_piece(wp[r], i, NULL), tfm_wordpiece_piece(wp[0], i, NULL));
    }
    for (int r = 0; r < 3; r++)
        tfm_wordpiece_free(wp[r]);
    tfm_buf_free(&big);
}

/* ---- a naive trainer: recount everything at every step ---- */

typedef struct naive {
    char **str;
    size_t n, cap;
} naive;

static uint32_t naive_sym(naive *v, const char *s, size_t len)
{
    for (size_t i = 0; i < v->n; i++)
        if (strlen(v->str[i]) == len && memcmp(v->str[i], s, len) == 0)
            return (uint32_t)i;
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 256;
        v->str = tfm_realloc(v->str, v->cap * sizeof *v->str);
    }
    v->str[v->n] = tfm_strndup(s, len);
    return (uint32_t)v->n++;
}

static int cmp_cstr(const void *x, const void *y)
{
    return strcmp(*(char *const *)x, *(char *const *)y);
}

/* The incremental trainer must learn exactly what recounting every pair and
 * symbol before every merge learns. */
static void check_naive(const char *text, size_t len, uint32_t V, int64_t minf,
                        tfm_wordpiece_score score)
{
    tfm_wordpiece *wp = train_score(text, len, V, (uint64_t)minf, score);

    /* Words and counts, as the trainer counts them. */
    tfm_bert_norm norm;
    tfm_bert_norm_default(&norm);
    tfm_bert_words w = {0};
    tfm_bert_pretokenize(&norm, text, len, &w);
    char **words = tfm_malloc(w.n * sizeof *words);
    size_t nw = 0;
    for (size_t i = 0; i < w.n; i++) {
        const char *s = w.text.data + w.off[i];
        size_t chars = 0;
        for (size_t k = 0; k < w.len[i]; k++)
            chars += ((unsigned char)s[k] & 0xC0) != 0x80;
        if (chars <= 100)
            words[nw++] = tfm_strndup(s, w.len[i]);
    }
    qsort(words, nw, sizeof *words, cmp_cstr);
    size_t nd = 0;
    int64_t *cnt = tfm_calloc(nw, sizeof *cnt);
    for (size_t i = 0; i < nw; i++) {
        if (nd && strcmp(words[nd - 1], words[i]) == 0) {
            cnt[nd - 1]++;
            free(words[i]);
        } else {
            words[nd] = words[i];
            cnt[nd++] = 1;
        }
    }

    /* Specials, then the alphabet in byte order. */
    naive v = {0};
    const char *sp[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int i = 0; i < 5; i++)
        naive_sym(&v, sp[i], strlen(sp[i]));
    naive alpha = {0};
    tfm_buf t = {0};
    for (size_t i = 0; i < nd; i++)
        for (size_t j = 0; words[i][j];) {
            size_t k = j + 1;
            while (((unsigned char)words[i][k] & 0xC0) == 0x80)
                k++;
            tfm_buf_clear(&t);
            if (j)
                tfm_buf_puts(&t, "##");
            tfm_buf_append(&t, words[i] + j, k - j);
            naive_sym(&alpha, t.data, t.len);
            j = k;
        }
    qsort(alpha.str, alpha.n, sizeof *alpha.str, cmp_cstr);
    for (size_t i = 0; i < alpha.n; i++)
        naive_sym(&v, alpha.str[i], strlen(alpha.str[i]));
    uint32_t **seq = tfm_malloc(nd * sizeof *seq);
    size_t *sl = tfm_calloc(nd, sizeof *sl);
    for (size_t i = 0; i < nd; i++) {
        seq[i] = tfm_malloc((strlen(words[i]) + 1) * sizeof **seq);
        for (size_t j = 0; words[i][j];) {
            size_t k = j + 1;
            while (((unsigned char)words[i][k] & 0xC0) == 0x80)
                k++;
            tfm_buf_clear(&t);
            if (j)
                tfm_buf_puts(&t, "##");
            tfm_buf_append(&t, words[i] + j, k - j);
            seq[i][sl[i]++] = naive_sym(&v, t.data, t.len);
            j = k;
        }
    }

    int64_t *pc = tfm_calloc((size_t)V * V, sizeof *pc), *sc = tfm_calloc(V, sizeof *sc);
    size_t total = 0;
    for (size_t i = 0; i < nd; i++)
        total += sl[i];
    size_t *used = tfm_malloc((total + 1) * sizeof *used), nused = 0;
    while (v.n < V) {
        for (size_t i = 0; i < nused; i++)
            pc[used[i]] = 0;
        nused = 0;
        memset(sc, 0, V * sizeof *sc);
        for (size_t i = 0; i < nd; i++)
            for (size_t j = 0; j < sl[i]; j++) {
                sc[seq[i][j]] += cnt[i];
                if (j + 1 < sl[i]) {
                    size_t at = (size_t)seq[i][j] * V + seq[i][j + 1];
                    if (!pc[at])
                        used[nused++] = at;
                    pc[at] += cnt[i];
                }
            }
        int64_t bc = 0;
        double bs = 0;
        int found = 0;
        uint32_t ba = 0, bb = 0;
        for (size_t u = 0; u < nused; u++) {
            uint32_t a = (uint32_t)(used[u] / V), b = (uint32_t)(used[u] % V);
            int64_t c = pc[used[u]];
            if (c < minf)
                continue;
            {
                double sv = score == TFM_WP_SCORE_COUNT
                                ? (double)c
                                : (double)c / ((double)sc[a] * (double)sc[b]);
                if (!found || sv > bs ||
                    (sv == bs && (c > bc || (c == bc && (a < ba || (a == ba && b < bb)))))) {
                    found = 1;
                    bs = sv;
                    bc = c;
                    ba = a;
                    bb = b;
                }
            }
        }
        if (!found)
            break;
        tfm_buf_clear(&t);
        tfm_buf_puts(&t, v.str[ba]);
        tfm_buf_puts(&t, v.str[bb] + 2);
        uint32_t m = naive_sym(&v, t.data, t.len);
        for (size_t i = 0; i < nd; i++) {
            size_t o = 0;
            for (size_t j = 0; j < sl[i]; j++) {
                if (j + 1 < sl[i] && seq[i][j] == ba && seq[i][j + 1] == bb) {
                    seq[i][o++] = m;
                    j++;
                } else {
                    seq[i][o++] = seq[i][j];
                }
            }
            sl[i] = o;
        }
    }

    assert_int_equal(tfm_wordpiece_vocab_size(wp), v.n);
    for (uint32_t i = 0; i < v.n; i++)
        assert_string_equal(tfm_wordpiece_piece(wp, i, NULL), v.str[i]);

    for (size_t i = 0; i < nd; i++) {
        free(words[i]);
        free(seq[i]);
    }
    for (size_t i = 0; i < v.n; i++)
        free(v.str[i]);
    for (size_t i = 0; i < alpha.n; i++)
        free(alpha.str[i]);
    free(v.str);
    free(alpha.str);
    free(words);
    free(seq);
    free(sl);
    free(cnt);
    free(pc);
    free(sc);
    free(used);
    tfm_buf_free(&t);
    tfm_bert_words_free(&w);
    tfm_wordpiece_free(wp);
}

static void test_train_matches_naive(void **state)
{
    (void)state;
    size_t len;
    const char *text = corpus_text(&len);
    for (int sc = TFM_WP_SCORE_COUNT; sc <= TFM_WP_SCORE_RATIO; sc++) {
        check_naive(text, len, 700, 2, (tfm_wordpiece_score)sc);
        check_naive(text, len, 700, 1, (tfm_wordpiece_score)sc);
    }
    /* Words over a 4-letter alphabet: many merges spell a piece that
     * already exists, and pairs die and come back. */
    tfm_buf b = {0};
    rnd_seed = 42;
    for (int i = 0; i < 3000; i++) {
        uint32_t n = 1 + rnd(9);
        for (uint32_t j = 0; j < n; j++)
            tfm_buf_putc(&b, (char)('a' + rnd(4)));
        tfm_buf_putc(&b, ' ');
    }
    for (int sc = TFM_WP_SCORE_COUNT; sc <= TFM_WP_SCORE_RATIO; sc++) {
        check_naive(b.data, b.len, 400, 1, (tfm_wordpiece_score)sc);
        check_naive(b.data, b.len, 400, 3, (tfm_wordpiece_score)sc);
    }
    tfm_buf_free(&b);
}

static void test_train_specials(void **state)
{
    (void)state;
    const char *sp[] = {"<s>", "<unk>", "</s>", "<s>"};
    tfm_tok_train_opts o = {.kind = TFM_TOK_WORDPIECE, .vocab_size = 50, .specials = sp,
                            .n_specials = 4, .lowercase = 0};
    tfm_wordpiece_trainer *t = tfm_wordpiece_trainer_new(&o);
    tfm_wordpiece_trainer_feed(t, "Hello HELLO", 11);
    tfm_wordpiece *wp;
    tfm_err e = {0};
    assert_int_equal(tfm_wordpiece_trainer_finish(t, &wp, &e), 0);
    tfm_wordpiece_trainer_free(t);
    assert_string_equal(tfm_wordpiece_piece(wp, 0, NULL), "<s>");
    assert_string_equal(tfm_wordpiece_piece(wp, 1, NULL), "<unk>");
    assert_string_equal(tfm_wordpiece_piece(wp, 2, NULL), "</s>");
    assert_int_equal(tfm_wordpiece_unk_id(wp), 1);
    assert_int_equal(tfm_wordpiece_norm(wp)->lowercase, 0);
    assert_true(tfm_wordpiece_id(wp, "Hello", 5) >= 0);
    assert_true(tfm_wordpiece_id(wp, "HELLO", 5) >= 0);
    tfm_wordpiece_free(wp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_cases_uncased),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_cases_other_normalizers),
        cmocka_unit_test(test_hf_saved),
        cmocka_unit_test(test_every_code_point),
        cmocka_unit_test(test_canonical_order),
        cmocka_unit_test(test_fast_path),
        cmocka_unit_test(test_random_text),
        cmocka_unit_test(test_decode_golden),
        cmocka_unit_test(test_decoder_cleanup),
        cmocka_unit_test(test_decode_bad_id),
        cmocka_unit_test(test_vocab_txt_edges),
        cmocka_unit_test(test_max_chars),
        cmocka_unit_test(test_json_errors),
        cmocka_unit_test(test_json_pieces),
        cmocka_unit_test(test_no_pretokenizer),
        cmocka_unit_test(test_pretokenize_api),
        cmocka_unit_test(test_train_tiny),
        cmocka_unit_test(test_train_merges_reuse),
        cmocka_unit_test(test_train_learns_words),
        cmocka_unit_test(test_train_roundtrip),
        cmocka_unit_test(test_train_threads),
        cmocka_unit_test(test_train_matches_naive),
        cmocka_unit_test(test_train_specials),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
