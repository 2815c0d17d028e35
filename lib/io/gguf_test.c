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
#include "io/gguf.h"

static char dir[] = "/tmp/tfm_gguf_testXXXXXX";

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static char *path(const char *name)
{
    static char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return p;
}

static void put(tfm_buf *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        tfm_buf_putc(b, (char)(v >> (8 * i)));
}

static void put_str(tfm_buf *b, const char *s)
{
    put(b, strlen(s), 8);
    tfm_buf_puts(b, s);
}

static void key(tfm_buf *b, const char *k, uint32_t type)
{
    put_str(b, k);
    put(b, type, 4);
}

static void tensor_info(tfm_buf *b, const char *name, int nd, const uint64_t *ne, uint32_t type,
                        uint64_t off)
{
    put_str(b, name);
    put(b, (uint64_t)nd, 4);
    for (int d = 0; d < nd; d++)
        put(b, ne[d], 8);
    put(b, type, 4);
    put(b, off, 8);
}

static size_t data_start; /* where sample()'s data begins */

/* A file of every metadata type (nested arrays too), alignment 64, an F32
 * [2, 3] tensor and a Q8_0 row of one block. */
static void sample(tfm_buf *b, uint32_t version, uint32_t type2, uint64_t off2)
{
    tfm_buf_clear(b);
    tfm_buf_append(b, "GGUF", 4);
    put(b, version, 4);
    put(b, 2, 8);  /* tensors */
    put(b, 16, 8); /* key/values */
    key(b, "a.u8", TFM_GGUF_U8), put(b, 200, 1);
    key(b, "a.i8", TFM_GGUF_I8), put(b, (uint8_t)-5, 1);
    key(b, "a.u16", TFM_GGUF_U16), put(b, 60000, 2);
    key(b, "a.i16", TFM_GGUF_I16), put(b, (uint16_t)-300, 2);
    key(b, "a.u32", TFM_GGUF_U32), put(b, 4000000000u, 4);
    key(b, "a.i32", TFM_GGUF_I32), put(b, (uint32_t)-70000, 4);
    float f = 1e-5f;
    uint32_t fu;
    memcpy(&fu, &f, 4);
    key(b, "a.f32", TFM_GGUF_F32), put(b, fu, 4);
    key(b, "a.bool", TFM_GGUF_BOOL), put(b, 1, 1);
    key(b, "general.architecture", TFM_GGUF_STRING), put_str(b, "gpt2");
    key(b, "a.u64", TFM_GGUF_U64), put(b, UINT64_C(1) << 40, 8);
    key(b, "a.i64", TFM_GGUF_I64), put(b, (uint64_t)INT64_C(-9), 8);
    double d = 0.25;
    uint64_t du;
    memcpy(&du, &d, 8);
    key(b, "a.f64", TFM_GGUF_F64), put(b, du, 8);
    key(b, "a.ints", TFM_GGUF_ARRAY), put(b, TFM_GGUF_I32, 4), put(b, 3, 8);
    put(b, 1, 4), put(b, (uint32_t)-2, 4), put(b, 3, 4);
    key(b, "a.strs", TFM_GGUF_ARRAY), put(b, TFM_GGUF_STRING, 4), put(b, 2, 8);
    put_str(b, "he llo"), put_str(b, "");
    key(b, "general.alignment", TFM_GGUF_U32), put(b, 64, 4);
    /* an array of arrays (of u8, of strings) */
    key(b, "a.nested", TFM_GGUF_ARRAY), put(b, TFM_GGUF_ARRAY, 4), put(b, 2, 8);
    put(b, TFM_GGUF_U8, 4), put(b, 1, 8), put(b, 7, 1);
    put(b, TFM_GGUF_STRING, 4), put(b, 1, 8), put_str(b, "x");
    const uint64_t ne1[2] = {3, 2}, ne2[1] = {32};
    tensor_info(b, "t.f32", 2, ne1, TFM_GGML_F32, 0);
    tensor_info(b, "t.q8", 1, ne2, type2, off2);
    while (b->len % 64)
        tfm_buf_putc(b, 0);
    data_start = b->len;
    for (int i = 0; i < 6; i++) {
        float v = (float)i + 0.5f;
        uint32_t u;
        memcpy(&u, &v, 4);
        put(b, u, 4);
    }
    while (b->len < data_start + 64)
        tfm_buf_putc(b, 0);
    put(b, 0x3c00, 2); /* scale 1.0 */
    for (int i = 0; i < 32; i++)
        put(b, (uint8_t)(i - 16), 1);
}

static void write_buf(const char *p, const tfm_buf *b, size_t n)
{
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b->data, 1, n, f), n);
    fclose(f);
}

static void test_read(void **state)
{
    (void)state;
    tfm_buf b = {0};
    sample(&b, 3, TFM_GGML_Q8_0, 64);
    char *p = path("ok.gguf");
    write_buf(p, &b, b.len);
    assert_int_equal(tfm_gguf_is(p), 1);
    tfm_gguf g;
    tfm_err e = {0};
    assert_int_equal(tfm_gguf_open(&g, p, &e), 0);
    assert_int_equal(g.version, 3);
    assert_int_equal(g.alignment, 64);
    assert_int_equal(g.n_kv, 16);
    assert_int_equal(tfm_gguf_get(&g, "a.u8")->u, 200);
    assert_int_equal(tfm_gguf_get(&g, "a.i8")->i, -5);
    assert_int_equal(tfm_gguf_get(&g, "a.u16")->u, 60000);
    assert_int_equal(tfm_gguf_get(&g, "a.i16")->i, -300);
    assert_int_equal(tfm_gguf_get(&g, "a.u32")->u, 4000000000u);
    assert_int_equal(tfm_gguf_get(&g, "a.i32")->i, -70000);
    assert_true(tfm_gguf_get(&g, "a.f32")->f == (double)1e-5f);
    assert_int_equal(tfm_gguf_get(&g, "a.bool")->u, 1);
    assert_int_equal(tfm_gguf_get(&g, "a.u64")->u, UINT64_C(1) << 40);
    assert_int_equal(tfm_gguf_get(&g, "a.i64")->i, -9);
    assert_true(tfm_gguf_get(&g, "a.f64")->f == 0.25);
    const tfm_gguf_kv *a = tfm_gguf_get(&g, "a.ints");
    assert_int_equal(a->type, TFM_GGUF_ARRAY);
    assert_int_equal(a->elem, TFM_GGUF_I32);
    assert_int_equal(a->n, 3);
    assert_int_equal(a->data[4], 0xfe);
    a = tfm_gguf_get(&g, "a.strs");
    assert_int_equal(a->n, 2);
    assert_int_equal(a->strs[0].n, 6);
    assert_memory_equal(a->strs[0].s, "he llo", 6);
    assert_int_equal(a->strs[1].n, 0);
    assert_int_equal(tfm_gguf_get(&g, "a.nested")->n, 2);
    char s[16];
    assert_int_equal(tfm_gguf_string(&g, "general.architecture", s, sizeof s, &e), 0);
    assert_string_equal(s, "gpt2");
    int64_t v;
    assert_int_equal(tfm_gguf_int(&g, "a.i32", -100000, 0, 0, &v, &e), 0);
    assert_int_equal(v, -70000);
    assert_int_equal(tfm_gguf_int(&g, "absent", 0, 10, 4, &v, &e), 0);
    assert_int_equal(v, 4);
    double x;
    assert_int_equal(tfm_gguf_float(&g, "a.f32", 1, 0, &x, &e), 0);
    assert_true(x == (double)1e-5f);
    /* what a key holds, and what was expected */
    assert_int_equal(tfm_gguf_int(&g, "a.u32", 0, 100, 0, &v, &e), -1);
    assert_non_null(strstr(e.msg, "ok.gguf: metadata 'a.u32' is 4000000000: expected 0..100"));
    assert_int_equal(tfm_gguf_int(&g, "a.f32", 0, 100, 0, &v, &e), -1);
    assert_non_null(strstr(e.msg, "metadata 'a.f32' is f32: expected an integer"));
    assert_int_equal(tfm_gguf_int(&g, "absent", 0, 100, -1, &v, &e), -1);
    assert_non_null(strstr(e.msg, "no metadata 'absent' (an integer)"));
    assert_int_equal(tfm_gguf_string(&g, "a.u8", s, sizeof s, &e), -1);
    assert_non_null(strstr(e.msg, "metadata 'a.u8' is u8: expected a string"));
    const tfm_gguf_tensor *t = tfm_gguf_find(&g, "t.f32");
    assert_non_null(t);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->ne[0], 3);
    assert_int_equal(t->ne[1], 2);
    assert_int_equal(t->nbytes, 24);
    assert_ptr_equal(t->data, g.map.data + data_start);
    assert_true(((const float *)t->data)[5] == 5.5f);
    t = tfm_gguf_find(&g, "t.q8");
    assert_int_equal(t->nbytes, 34);
    assert_ptr_equal(t->data, g.map.data + data_start + 64);
    assert_string_equal(tfm_ggml_type_name(12), "Q4_K");
    assert_null(tfm_ggml_type_name(99));
    tfm_gguf_close(&g);
    tfm_buf_free(&b);
}

static void refused(const tfm_buf *b, size_t n, const char *want)
{
    char *p = path("bad.gguf");
    write_buf(p, b, n);
    tfm_gguf g;
    tfm_err e = {0};
    assert_int_equal(tfm_gguf_open(&g, p, &e), -1);
    if (!strstr(e.msg, want) || strncmp(e.msg, p, strlen(p)))
        fail_msg("'%s' lacks '%s'", e.msg, want);
}

static void test_errors(void **state)
{
    (void)state;
    tfm_buf b = {0};
    sample(&b, 3, TFM_GGML_Q8_0, 64);
    /* cut anywhere: the magic, or what ran past the end */
    for (size_t n = 0; n < b.len; n++)
        refused(&b, n, n < 4 ? "the magic at byte" : "truncated GGUF file: ");
    b.data[0] = 'X';
    refused(&b, b.len, "not a GGUF file (its first bytes are not \"GGUF\")");
    sample(&b, 1, TFM_GGML_Q8_0, 64);
    refused(&b, b.len, "GGUF version 1: tfm reads versions 2 and 3");
    sample(&b, 3u << 24, TFM_GGML_Q8_0, 64);
    refused(&b, b.len, "a big-endian GGUF file: tfm reads little-endian ones");
    sample(&b, 3, 12, 64);
    refused(&b, b.len, "tensor 't.q8' is of type Q4_K: tfm reads F32, F16, BF16 and Q8_0 "
                       "tensors");
    sample(&b, 3, 77, 64);
    refused(&b, b.len, "tensor 't.q8' has unknown type 77 (ggml's types are 0..39");
    sample(&b, 3, TFM_GGML_Q8_0, 32);
    refused(&b, b.len, "tensor 't.q8' at offset 32, not a multiple of the alignment 64");
    sample(&b, 3, TFM_GGML_Q8_0, 128);
    refused(&b, b.len, "truncated GGUF file: tensor 't.q8' (34 bytes at offset 128");
    tfm_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
