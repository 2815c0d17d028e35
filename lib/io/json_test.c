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
#include "base/err.h"
#include "base/file.h"
#include "io/json.h"

static tfm_json_doc parse_ok(const char *text, int yaml)
{
    tfm_json_doc d;
    tfm_err e = {0};
    int rc = tfm_json_parse(&d, text, strlen(text), "t.json", yaml, &e);
    if (rc != 0)
        fail_msg("unexpected error: %s", e.msg);
    return d;
}

/* Parses text expecting failure; the message must start with `prefix`. */
static void parse_fails(const char *text, size_t len, const char *prefix, const char *part)
{
    tfm_json_doc d;
    tfm_err e = {0};
    int rc = tfm_json_parse(&d, text, len, "t.json", 0, &e);
    if (rc == 0)
        fail_msg("parsed but should fail: %s", text);
    if (strncmp(e.msg, prefix, strlen(prefix)) != 0 || (part && !strstr(e.msg, part)))
        fail_msg("for %s: message '%s' lacks '%s' / '%s'", text, e.msg, prefix,
                 part ? part : "");
    assert_null(d.root);
}

static void test_types_nesting(void **state)
{
    (void)state;
    tfm_json_doc d = parse_ok(
        "{\"a\": [1, -2.5e3, true, false, null, \"s\", 0, 1E+2],"
        " \"b\": {\"c\": {}, \"d\": []}, \"big\": 9007199254740993}", 0);
    const tfm_json *r = d.root;
    assert_int_equal(r->type, TFM_JSON_OBJECT);
    assert_int_equal(r->n, 3);
    assert_string_equal(r->keys[0]->str, "a");
    const tfm_json *a = tfm_json_get(r, "a");
    assert_int_equal(a->type, TFM_JSON_ARRAY);
    assert_int_equal(a->n, 8);
    assert_int_equal(a->items[0]->type, TFM_JSON_NUMBER);
    assert_true(a->items[0]->num == 1.0);
    assert_true(a->items[1]->num == -2500.0);
    assert_string_equal(a->items[1]->str, "-2.5e3");
    assert_int_equal(a->items[2]->type, TFM_JSON_BOOL);
    assert_int_equal(a->items[2]->boolean, 1);
    assert_int_equal(a->items[3]->boolean, 0);
    assert_int_equal(a->items[4]->type, TFM_JSON_NULL);
    assert_int_equal(a->items[5]->type, TFM_JSON_STRING);
    assert_string_equal(a->items[5]->str, "s");
    assert_true(a->items[7]->num == 100.0);
    const tfm_json *b = tfm_json_get(r, "b");
    assert_int_equal(tfm_json_get(b, "c")->type, TFM_JSON_OBJECT);
    assert_int_equal(tfm_json_get(b, "c")->n, 0);
    assert_int_equal(tfm_json_get(b, "d")->n, 0);
    assert_null(tfm_json_get(b, "zz"));
    assert_null(tfm_json_get(a, "c"));

    int64_t v;
    tfm_err e = {0};
    assert_int_equal(tfm_json_get_int(&d, tfm_json_get(r, "big"), "big", 0, INT64_MAX, &v, &e), 0);
    assert_true(v == 9007199254740993LL); /* exact, not via double */
    assert_int_equal(tfm_json_get_int(&d, a->items[0], "x", 2, 5, &v, &e), -1);
    assert_string_equal(e.msg, "t.json:1:8: x must be between 2 and 5, not 1");
    tfm_json_doc d2 = parse_ok("[99999999999999999999, 1e400, 1.5]", 0);
    assert_int_equal(tfm_json_get_int(&d2, d2.root->items[0], "n", 0, 10, &v, &e), -1);
    assert_string_equal(e.msg, "t.json:1:2: n must be between 0 and 10, not 99999999999999999999");
    assert_int_equal(tfm_json_get_int(&d2, d2.root->items[1], "n", 0, 10, &v, &e), -1);
    assert_string_equal(e.msg, "t.json:1:24: n must be an integer, not 1e400");
    assert_int_equal(tfm_json_get_int(&d2, d2.root->items[2], "n", 0, 10, &v, &e), -1);
    assert_string_equal(e.msg, "t.json:1:31: n must be an integer, not 1.5");
    tfm_json_doc_free(&d2);
    assert_int_equal(tfm_json_get_int(&d, a->items[1], "x", -1e6, 5, &v, &e), 0);
    assert_true(v == -2500);
    assert_int_equal(tfm_json_get_int(&d, a->items[5], "the id", 0, 5, &v, &e), -1);
    assert_string_equal(e.msg, "t.json:1:38: the id must be a number, not a string");
    assert_int_equal(tfm_json_expect(&d, b, TFM_JSON_ARRAY, "\"b\"", &e), -1);
    assert_string_equal(e.msg, "t.json:1:58: \"b\" must be an array, not an object");
    assert_int_equal(tfm_json_expect(&d, NULL, TFM_JSON_ARRAY, "\"q\"", &e), -1);
    assert_string_equal(e.msg, "t.json: \"q\" is missing");
    tfm_json_doc_free(&d);

    /* scalars at the top level are JSON too */
    d = parse_ok(" \"x\" ", 0);
    assert_int_equal(d.root->type, TFM_JSON_STRING);
    tfm_json_doc_free(&d);
    d = parse_ok("\t[\n\t1]\n\t\n", 0); /* tabs are JSON whitespace anywhere */
    assert_int_equal(d.root->items[0]->col, 2);
    tfm_json_doc_free(&d);
    d = parse_ok("[]", 0);
    assert_int_equal(d.root->n, 0);
    tfm_json_doc_free(&d);
    d = parse_ok("{}", 0);
    assert_int_equal(d.root->type, TFM_JSON_OBJECT);
    tfm_json_doc_free(&d);
    d = parse_ok("-0.5", 0);
    assert_true(d.root->num == -0.5);
    tfm_json_doc_free(&d);
}

static void test_escapes(void **state)
{
    (void)state;
    tfm_json_doc d = parse_ok(
        "[\"a\\/b\\\"c\\\\d\", \"\\b\\f\\n\\r\\t\", \"\\u00e9\\u0120\", \"x\\u0000y\","
        " \"\\ud83d\\ude00!\", \"\\uD83D\\uDE00\", \"caf\xc3\xa9 \xe2\x82\xac\","
        " \"\xc2\x85\xc2\x9f\x7f\xe2\x80\xa8\", \"\\u0085\\u2028\"]", 0);
    const tfm_json *a = d.root;
    assert_int_equal(a->n, 9);
    assert_string_equal(a->items[0]->str, "a/b\"c\\d");
    assert_string_equal(a->items[1]->str, "\b\f\n\r\t");
    assert_string_equal(a->items[2]->str, "\xc3\xa9\xc4\xa0");
    assert_int_equal(a->items[3]->len, 3);
    assert_memory_equal(a->items[3]->str, "x\0y", 4);
    assert_string_equal(a->items[4]->str, "\xf0\x9f\x98\x80!");
    assert_string_equal(a->items[5]->str, "\xf0\x9f\x98\x80");
    assert_string_equal(a->items[6]->str, "caf\xc3\xa9 \xe2\x82\xac");
    /* raw C1 controls, DEL and U+2028 pass through unchanged */
    assert_string_equal(a->items[7]->str, "\xc2\x85\xc2\x9f\x7f\xe2\x80\xa8");
    assert_string_equal(a->items[8]->str, "\xc2\x85\xe2\x80\xa8");
    tfm_json_doc_free(&d);
}

static void test_positions(void **state)
{
    (void)state;
    tfm_json_doc d = parse_ok("{\n  \"model\": {\n    \"vocab\": {\"a\": 0, \"\xc3\xa9\": 1},\n"
                              "    \"merges\": [\"a b\"]\n  }\n}\n", 0);
    const tfm_json *m = tfm_json_get(d.root, "model");
    assert_int_equal(d.root->line, 1);
    assert_int_equal(d.root->col, 1);
    assert_int_equal(d.root->keys[0]->line, 2);
    assert_int_equal(d.root->keys[0]->col, 3);
    assert_int_equal(m->line, 2);
    assert_int_equal(m->col, 12);
    const tfm_json *v = tfm_json_get(m, "vocab");
    assert_int_equal(v->line, 3);
    assert_int_equal(v->col, 14);
    assert_int_equal(v->items[1]->line, 3);
    assert_int_equal(v->items[1]->col, 28); /* columns count characters */
    const tfm_json *mg = tfm_json_get(m, "merges");
    assert_int_equal(mg->items[0]->line, 4);
    assert_int_equal(mg->items[0]->col, 16);
    tfm_json_doc_free(&d);

    /* surrogates decoded here must not shift what follows on the line */
    d = parse_ok("[\"\\ud83d\\ude00\", \"\\ud83d\\ude00\", 7]", 0);
    assert_int_equal(d.root->items[1]->col, 18);
    assert_int_equal(d.root->items[2]->col, 34);
    tfm_json_doc_free(&d);
}

static void test_long_key(void **state)
{
    (void)state;
    tfm_buf b = {0};
    tfm_buf_puts(&b, "{\"short\": 1, \"");
    for (int i = 0; i < 3000; i++)
        tfm_buf_putc(&b, (char)('a' + i % 26));
    tfm_buf_puts(&b, "\": 2, \"x\": \"");
    for (int i = 0; i < 5000; i++)
        tfm_buf_puts(&b, "\\u00e9");
    tfm_buf_puts(&b, "\", \"y\": 3}");
    tfm_json_doc d = parse_ok(tfm_buf_cstr(&b), 0);
    assert_int_equal(d.root->n, 4);
    assert_int_equal(d.root->keys[1]->len, 3000);
    assert_int_equal(d.root->keys[1]->str[2999], 'a' + 2999 % 26);
    assert_int_equal(d.root->keys[1]->col, 14);
    assert_true(d.root->items[1]->num == 2);
    assert_int_equal(d.root->items[1]->col, 3018);
    assert_int_equal(d.root->items[2]->len, 10000);
    assert_int_equal(d.root->keys[3]->col, 33030);
    tfm_json_doc_free(&d);

    /* a long key whose ':' is on the next line, then a surrogate pair */
    tfm_buf_clear(&b);
    tfm_buf_puts(&b, "{\"");
    for (int i = 0; i < 600; i++)
        tfm_buf_putc(&b, 'z');
    tfm_buf_puts(&b, "\"\n  :  \"\\ud83d\\ude00\", \"b\": [\"\\ud83d\\ude01\", 5]}");
    d = parse_ok(tfm_buf_cstr(&b), 0);
    assert_int_equal(d.root->n, 2);
    assert_int_equal(d.root->keys[0]->len, 600);
    assert_string_equal(d.root->items[0]->str, "\xf0\x9f\x98\x80");
    assert_int_equal(d.root->items[0]->line, 2);
    assert_int_equal(d.root->items[0]->col, 6);
    assert_int_equal(d.root->keys[1]->col, 22);
    assert_string_equal(d.root->items[1]->items[0]->str, "\xf0\x9f\x98\x81");
    assert_int_equal(d.root->items[1]->items[1]->col, 44);
    tfm_json_doc_free(&d);

    /* ... or far away on the same line */
    tfm_buf_clear(&b);
    tfm_buf_puts(&b, "{\"k\"");
    for (int i = 0; i < 2000; i++)
        tfm_buf_putc(&b, ' ');
    tfm_buf_puts(&b, ": 1, \"j\": 2}");
    d = parse_ok(tfm_buf_cstr(&b), 0);
    assert_int_equal(d.root->n, 2);
    assert_int_equal(d.root->items[0]->col, 2007);
    assert_int_equal(d.root->keys[1]->col, 2010);
    tfm_json_doc_free(&d);

    /* the same key twice is still found */
    tfm_buf_clear(&b);
    tfm_buf_puts(&b, "{\"");
    for (int i = 0; i < 3000; i++)
        tfm_buf_putc(&b, 'k');
    tfm_buf_puts(&b, "\": 1,\n \"");
    for (int i = 0; i < 3000; i++)
        tfm_buf_putc(&b, 'k');
    tfm_buf_puts(&b, "\": 2}");
    parse_fails(b.data, b.len, "t.json:2:2: duplicate key \"kkk", "(first at line 1)");
    tfm_buf_free(&b);
}

static void test_colon_on_next_line(void **state)
{
    (void)state;
    tfm_json_doc d = parse_ok("{\"a\"\n  : 1, \"b\"\r\n:\n[2]}", 0);
    assert_int_equal(d.root->n, 2);
    assert_true(tfm_json_get(d.root, "a")->num == 1);
    assert_int_equal(tfm_json_get(d.root, "a")->line, 2);
    assert_int_equal(tfm_json_get(d.root, "a")->col, 5);
    assert_int_equal(d.root->keys[1]->col, 8);
    assert_int_equal(tfm_json_get(d.root, "b")->line, 4);
    assert_int_equal(tfm_json_get(d.root, "b")->col, 1);
    tfm_json_doc_free(&d);
}

static void test_errors(void **state)
{
    (void)state;
#define FAILS(text, prefix, part) parse_fails(text, sizeof text - 1, prefix, part)
    FAILS("{\"a\": [1, 2", "t.json:1:12: unexpected end of input", NULL);
    FAILS("{\"a\": [1, 2]\n", "t.json:2:1: unexpected end of input", NULL);
    FAILS("{\"a\": \"x", "t.json:1:7: unterminated string", NULL);
    FAILS("{\"a\": 1} x", "t.json:1:10: unexpected content after the JSON value", NULL);
    FAILS("{\"a\": 1}\n{\"b\": 2}", "t.json:2:1:", NULL);
    FAILS("[\"ok\",\n \"bad \\x41\"]", "t.json:2:7: bad escape '\\x'", NULL);
    FAILS("[\"\\e\"]", "t.json:1:3: bad escape", NULL);
    FAILS("[\"\\u12g4\"]", "t.json:1:3: bad \\u escape", NULL);
    FAILS("[\"\\ud83d\"]", "t.json:1:3: unpaired high surrogate", NULL);
    FAILS("[\"\\ud83dx\\ude00\"]", "t.json:1:3: unpaired high surrogate", NULL);
    FAILS("[\"\\ude00\"]", "t.json:1:3: unpaired low surrogate", NULL);
    FAILS("{\"a\": 1,\n  \"b\": 2,\n  \"a\": 3}", "t.json:3:3: duplicate key \"a\"",
          "(first at line 1)");
    FAILS("{\"a\": 1} # note", "t.json:1:10: unexpected character '#'", "comments");
    FAILS("['a']", "t.json:1:2: unexpected character '''", "double quotes");
    FAILS("a: 1\nb: 2\n", "t.json:1:1:", "block style");
    FAILS("- 1\n- 2\n", "t.json:1:1:", "block style");
    FAILS("[1, 2,]", "t.json:1:7: trailing comma", NULL);
    FAILS("{\"a\": 1,}", "t.json:1:9: trailing comma", NULL);
    FAILS("[1,, 2]", "t.json:1:4: unexpected ','", NULL);
    FAILS("[\"a\": 1]", "t.json:1:5: unexpected ':' in an array", NULL);
    FAILS("{\"a\": hello}", "t.json:1:7: invalid literal 'hello'", NULL);
    FAILS("[01]", "t.json:1:2: invalid literal", NULL);
    FAILS("[1.]", "t.json:1:2: invalid literal", NULL);
    FAILS("[True]", "t.json:1:2: invalid literal", NULL);
    FAILS("{\"a\"}", "t.json:1:", "expected a value");
    FAILS("{1: 2}", "t.json:1:2: object keys must be strings", NULL);
    FAILS("[\"tab\there\"]", "t.json:1:6: control character 0x09", NULL);
    FAILS("[\"a\nb\"]", "t.json:1:4: unterminated string", NULL);
    FAILS("[\"\xff\"]", "t.json:1:3: invalid UTF-8", NULL);
    FAILS("[\"\xed\xa0\x80\"]", "t.json:1:3: invalid UTF-8", NULL);
    FAILS("[\xc3\xa9]", "t.json:1:2: unexpected byte 0xc3", NULL);
    FAILS("[1] ]", "t.json:1:5: unexpected ']'", NULL);
    FAILS("[1}", "t.json:1:3: unexpected '}'", NULL);
    FAILS("---\n[1]", "t.json:1:1:", "document markers");
    FAILS("", "t.json: empty document", NULL);
    parse_fails(NULL, 0, "t.json: empty document", NULL);
    FAILS("  \n ", "t.json: empty document", NULL);
    FAILS("[\"x\0y\"]", "t.json:1:4: control character 0x00", NULL);
#undef FAILS
    /* very deep nesting is refused before anything recurses over it */
    size_t n = 5000;
    char *deep = malloc(n);
    memset(deep, '[', n);
    parse_fails(deep, n, "t.json:1:1001: nesting deeper", NULL);
    free(deep);
}

static void test_big_object(void **state)
{
    (void)state;
    /* a vocabulary-sized object: duplicate detection goes through a hash */
    int n = getenv("TFM_SANITIZED") ? 5000 : 50000;
    tfm_buf b = {0};
    tfm_buf_putc(&b, '{');
    for (int i = 0; i < n; i++)
        tfm_buf_printf(&b, "%s\"tok%d\\u0120\": %d", i ? ", " : "", i, i);
    tfm_buf_putc(&b, '}');
    tfm_json_doc d = parse_ok(tfm_buf_cstr(&b), 0);
    assert_int_equal(d.root->n, (size_t)n);
    assert_string_equal(d.root->keys[n - 1]->str + 3 + (n > 9999 ? 5 : 4), "\xc4\xa0");
    assert_true(d.root->items[n - 1]->num == n - 1);
    tfm_json_doc_free(&d);
    /* append a duplicate of an early key */
    b.len--;
    tfm_buf_puts(&b, ", \"tok7\\u0120\": 1}");
    parse_fails(b.data, b.len, "t.json:1:", "duplicate key \"tok7\xc4\xa0\"");
    tfm_buf_free(&b);
}

static void test_yaml(void **state)
{
    (void)state;
    const char *cfg =
        "# a training config\n"
        "model:\n"
        "  layers: 4\n"
        "  width: 0x80\n"
        "  dropout: 0.1\n"
        "  tie: true\n"
        "  name: \"gpt #1\"\n"
        "  act: gelu\n"
        "train:\n"
        "  lr: 1e-4\n"
        "  steps: 2e3\n"
        "  none: ~\n"
        "  empty:\n"
        "  version: '1.0'\n"
        "  flow: {a: [1, 2], b: no}\n"
        "  list:\n"
        "    - x\n"
        "    - -3\n"
        "  inf: -.inf\n"
        "  str: !!str 12\n";
    tfm_json_doc d = parse_ok(cfg, 1);
    const tfm_json *m = tfm_json_get(d.root, "model");
    const tfm_json *t = tfm_json_get(d.root, "train");
    assert_int_equal(m->type, TFM_JSON_OBJECT);
    assert_int_equal(d.root->keys[0]->line, 2);
    assert_int_equal(d.root->keys[0]->col, 1);
    const tfm_json *layers = tfm_json_get(m, "layers");
    assert_int_equal(layers->type, TFM_JSON_NUMBER);
    assert_int_equal(layers->line, 3);
    assert_int_equal(layers->col, 11);
    assert_int_equal(m->keys[0]->line, 3);
    assert_int_equal(m->keys[0]->col, 3);
    int64_t v;
    tfm_err e = {0};
    assert_int_equal(tfm_json_get_int(&d, tfm_json_get(m, "width"), "width", 1, 1000, &v, &e), 0);
    assert_int_equal(v, 128);
    assert_true(tfm_json_get(m, "dropout")->num == 0.1);
    assert_int_equal(tfm_json_get(m, "tie")->type, TFM_JSON_BOOL);
    assert_string_equal(tfm_json_get(m, "name")->str, "gpt #1");
    assert_int_equal(tfm_json_get(m, "act")->type, TFM_JSON_STRING);
    assert_true(tfm_json_get(t, "lr")->num == 1e-4);
    assert_int_equal(tfm_json_get_int(&d, tfm_json_get(t, "steps"), "steps", 1, 1000000, &v, &e), 0);
    assert_int_equal(v, 2000);
    assert_int_equal(tfm_json_get_int(&d, tfm_json_get(t, "lr"), "train.lr", 0, 10, &v, &e), -1);
    assert_string_equal(e.msg, "t.json:10:7: train.lr must be an integer, not 1e-4");
    assert_int_equal(tfm_json_get(t, "none")->type, TFM_JSON_NULL);
    assert_int_equal(tfm_json_get(t, "empty")->type, TFM_JSON_NULL);
    assert_int_equal(tfm_json_get(t, "version")->type, TFM_JSON_STRING);
    const tfm_json *flow = tfm_json_get(t, "flow");
    assert_int_equal(tfm_json_get(flow, "a")->n, 2);
    /* YAML 1.2: "no" is a string, not a boolean */
    assert_int_equal(tfm_json_get(flow, "b")->type, TFM_JSON_STRING);
    const tfm_json *list = tfm_json_get(t, "list");
    assert_int_equal(list->type, TFM_JSON_ARRAY);
    assert_int_equal(list->items[1]->type, TFM_JSON_NUMBER);
    assert_int_equal(list->items[1]->line, 18);
    assert_int_equal(list->items[1]->col, 7);
    assert_true(tfm_json_get(t, "inf")->num < -1e308);
    assert_int_equal(tfm_json_get(t, "str")->type, TFM_JSON_STRING);
    tfm_json_doc_free(&d);

    d = parse_ok("base: &b {lr: 1}\nother: *b\n", 1);
    assert_true(tfm_json_get(tfm_json_get(d.root, "other"), "lr")->num == 1);
    tfm_json_doc_free(&d);

    tfm_err e2 = {0};
    const char *bad = "a: 1\nb:\n  c: 2\n  c: 3\n";
    assert_int_equal(tfm_json_parse(&d, bad, strlen(bad), "c.yaml", 1, &e2), -1);
    assert_string_equal(e2.msg, "c.yaml:4:3: duplicate key \"c\" (first at line 3)");
    bad = "a: 1\n b: 2\n";
    assert_int_equal(tfm_json_parse(&d, bad, strlen(bad), "c.yaml", 1, &e2), -1);
    assert_true(strncmp(e2.msg, "c.yaml:2:", 9) == 0);
    bad = "a: [1, 2\n";
    assert_int_equal(tfm_json_parse(&d, bad, strlen(bad), "c.yaml", 1, &e2), -1);
    assert_true(strncmp(e2.msg, "c.yaml:", 7) == 0);
    bad = "a: 1\n\x01";
    assert_int_equal(tfm_json_parse(&d, bad, strlen(bad), "c.yaml", 1, &e2), -1);
    assert_true(strncmp(e2.msg, "c.yaml:2:1: control characters", 30) == 0);
    bad = "a: *nope\n";
    assert_int_equal(tfm_json_parse(&d, bad, strlen(bad), "c.yaml", 1, &e2), -1);
    assert_string_equal(e2.msg, "c.yaml:1:4: unknown alias '*nope'");
}

static void test_write(void **state)
{
    tfm_json_doc d = parse_ok("{ \"a\" : [1, -2.5e3, true, null],\n \"b\\u00e9\\n\" : {\"\\ud83d\\ude00\": \"x\\\"y\"}, \"c\": []}", 0);
    tfm_buf b = {0};
    tfm_json_write(&b, d.root);
    assert_string_equal(tfm_buf_cstr(&b),
                        "{\"a\":[1,-2.5e3,true,null],\"b\xc3\xa9\\n\":{\"\xf0\x9f\x98\x80\":\"x\\\"y\"},\"c\":[]}");
    tfm_json_doc again = parse_ok(tfm_buf_cstr(&b), 0);
    tfm_buf b2 = {0};
    tfm_json_write(&b2, again.root);
    assert_string_equal(tfm_buf_cstr(&b2), tfm_buf_cstr(&b));
    tfm_buf_free(&b);
    tfm_buf_free(&b2);
    tfm_json_doc_free(&again);
    tfm_json_doc_free(&d);
}

static void test_file(void **state)
{
    (void)state;
    char path[] = "/tmp/tfm_json_testXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "\xef\xbb\xbf{\"k\": [true]}\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    tfm_json_doc d;
    tfm_err e = {0};
    assert_int_equal(tfm_json_parse_file(&d, path, 0, &e), 0);
    assert_string_equal(d.name, path);
    assert_int_equal(tfm_json_get(d.root, "k")->items[0]->col, 8);
    tfm_json_doc_free(&d);
    unlink(path);
    assert_int_equal(tfm_json_parse_file(&d, path, 0, &e), -1);
    assert_non_null(strstr(e.msg, path));
    tfm_json_doc_free(&d); /* harmless after a failure */
}

/* A JSON Lines line: errors give the line in the file, not 1. */
static void test_parse_line(void **state)
{
    (void)state;
    tfm_json_doc doc;
    tfm_err err = {0};
    assert_int_equal(tfm_json_parse_line(&doc, "{\"a\": 1}", 8, "d.jsonl", 7, &err), 0);
    assert_int_equal(doc.root->type, TFM_JSON_OBJECT);
    tfm_json_doc_free(&doc);
    assert_int_equal(tfm_json_parse_line(&doc, "{\"a\": }", 7, "d.jsonl", 7, &err), -1);
    assert_true(!strncmp(err.msg, "d.jsonl:7:", 10));
    tfm_json_doc_free(&doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types_nesting), cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_positions),     cmocka_unit_test(test_long_key),
        cmocka_unit_test(test_colon_on_next_line), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_big_object),    cmocka_unit_test(test_yaml),
        cmocka_unit_test(test_file), cmocka_unit_test(test_write),
        cmocka_unit_test(test_parse_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
