/* libFuzzer harness for the JSON/YAML reader.  Any bytes must parse or fail
 * with a message naming the input, never crash.  A document accepted as JSON
 * is written back (strings re-escaped, numbers as written) and must parse to
 * the same tree: this catches mis-decoded escapes and surrogates, and strings
 * replaced in the pre-pass landing on the wrong node. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "io/json.h"

static void check_tree(const tfm_json *j)
{
    if (j->line < 1 || j->col < 1 || !j->str == (j->type != TFM_JSON_ARRAY && j->type != TFM_JSON_OBJECT))
        abort();
    if (j->str && j->str[j->len] != 0)
        abort();
    for (size_t i = 0; i < j->n; i++) {
        if (j->type == TFM_JSON_OBJECT) {
            if (j->keys[i]->type != TFM_JSON_STRING)
                abort();
            check_tree(j->keys[i]);
        }
        check_tree(j->items[i]);
    }
}

static int same(const tfm_json *a, const tfm_json *b)
{
    if (a->type != b->type || a->n != b->n)
        return 0;
    if (a->str && (a->len != b->len || memcmp(a->str, b->str, a->len) != 0))
        return 0;
    for (size_t i = 0; i < a->n; i++) {
        if (a->type == TFM_JSON_OBJECT && !same(a->keys[i], b->keys[i]))
            return 0;
        if (!same(a->items[i], b->items[i]))
            return 0;
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int yaml = 0; yaml <= 1; yaml++) {
        tfm_json_doc d;
        tfm_err e = {0};
        if (tfm_json_parse(&d, (const char *)data, size, "in", yaml, &e) < 0) {
            if (strncmp(e.msg, "in", 2) != 0)
                abort();
            continue;
        }
        check_tree(d.root);
        if (!yaml) {
            tfm_buf b = {0};
            tfm_json_write(&b, d.root);
            tfm_json_doc d2;
            if (tfm_json_parse(&d2, b.data, b.len, "again", 0, &e) < 0) {
                fprintf(stderr, "re-parse failed: %s\n", e.msg);
                abort();
            }
            if (!same(d.root, d2.root))
                abort();
            tfm_json_doc_free(&d2);
            tfm_buf_free(&b);
        }
        tfm_json_doc_free(&d);
    }
    return 0;
}
