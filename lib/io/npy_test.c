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
#include "io/npy.h"

static char dir[] = "/tmp/tfm_npy_testXXXXXX";

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

static void read_file(const char *p, tfm_buf *b)
{
    FILE *fp = fopen(p, "rb");
    assert_non_null(fp);
    tfm_err e = {0};
    assert_int_equal(tfm_read_all(fp, p, b, &e), 0);
    fclose(fp);
}

static void test_whole_roundtrip(void **state)
{
    (void)state;
    float m[2][3] = {{1, 2, 3}, {4, 5, -6.5f}};
    size_t shape[2] = {2, 3};
    tfm_err e = {0};
    assert_int_equal(tfm_npy_write(path("m.npy"), TFM_NPY_F32, 2, shape, m, &e), 0);

    tfm_buf b = {0};
    read_file(path("m.npy"), &b);
    /* exactly the documented layout: v1.0, data at a multiple of 64 */
    assert_int_equal(b.len, 128 + sizeof m);
    assert_memory_equal(b.data, "\x93NUMPY\x01\x00\x76\x00", 10);
    const char *dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    assert_memory_equal(b.data + 10, dict, strlen(dict));
    assert_int_equal(b.data[127], '\n');
    assert_int_equal(b.data[126], ' ');
    tfm_buf_free(&b);

    tfm_npy a;
    assert_int_equal(tfm_npy_open(&a, path("m.npy"), &e), 0);
    assert_int_equal(a.dtype, TFM_NPY_F32);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 2);
    assert_int_equal(a.shape[1], 3);
    assert_int_equal(a.count, 6);
    assert_memory_equal(a.data, m, sizeof m);
    tfm_npy_close(&a);

    uint32_t v[5] = {0, 1, 70000, 4000000000u, 7};
    size_t n = 5;
    assert_int_equal(tfm_npy_write(path("v.npy"), TFM_NPY_U32, 1, &n, v, &e), 0);
    assert_int_equal(tfm_npy_open(&a, path("v.npy"), &e), 0);
    assert_int_equal(a.dtype, TFM_NPY_U32);
    assert_int_equal(a.ndim, 1);
    assert_int_equal(a.shape[0], 5);
    assert_memory_equal(a.data, v, sizeof v);
    tfm_npy_close(&a);

    /* empty and scalar arrays */
    n = 0;
    assert_int_equal(tfm_npy_write(path("e.npy"), TFM_NPY_I32, 1, &n, NULL, &e), 0);
    assert_int_equal(tfm_npy_open(&a, path("e.npy"), &e), 0);
    assert_int_equal(a.count, 0);
    tfm_npy_close(&a);
    int32_t s = -3;
    assert_int_equal(tfm_npy_write(path("s.npy"), TFM_NPY_I32, 0, NULL, &s, &e), 0);
    assert_int_equal(tfm_npy_open(&a, path("s.npy"), &e), 0);
    assert_int_equal(a.ndim, 0);
    assert_int_equal(a.count, 1);
    assert_int_equal(*(const int32_t *)a.data, -3);
    tfm_npy_close(&a);
}

static void test_stream(void **state)
{
    (void)state;
    tfm_err e = {0};
    tfm_npy_writer w;
    assert_int_equal(tfm_npy_writer_open(&w, path("ids.npy"), TFM_NPY_U16, 0, &e), 0);
    /* nothing is visible under the final name until commit */
    assert_int_equal(access(path("ids.npy"), F_OK), -1);
    uint16_t chunk[1000];
    for (int k = 0; k < 7; k++) {
        for (int i = 0; i < 1000; i++)
            chunk[i] = (uint16_t)(k * 1000 + i);
        assert_int_equal(tfm_npy_writer_append(&w, chunk, k == 6 ? 3 : 1000, &e), 0);
    }
    assert_int_equal(tfm_npy_writer_commit(&w, &e), 0);
    tfm_npy a;
    assert_int_equal(tfm_npy_open(&a, path("ids.npy"), &e), 0);
    assert_int_equal(a.dtype, TFM_NPY_U16);
    assert_int_equal(a.ndim, 1);
    assert_int_equal(a.shape[0], 6003);
    const uint16_t *d = a.data;
    for (int i = 0; i < 6003; i++)
        assert_int_equal(d[i], i);
    assert_int_equal((uintptr_t)a.data % 64, 0);
    tfm_npy_close(&a);

    /* 2-D rows of floats */
    assert_int_equal(tfm_npy_writer_open(&w, path("emb.npy"), TFM_NPY_F32, 4, &e), 0);
    float row[4];
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < 4; i++)
            row[i] = (float)(r * 10 + i);
        assert_int_equal(tfm_npy_writer_append(&w, row, 4, &e), 0);
    }
    assert_int_equal(tfm_npy_writer_commit(&w, &e), 0);
    assert_int_equal(tfm_npy_open(&a, path("emb.npy"), &e), 0);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 3);
    assert_int_equal(a.shape[1], 4);
    assert_true(((const float *)a.data)[11] == 23.0f);
    tfm_npy_close(&a);

    /* incomplete rows are refused and leave nothing behind */
    assert_int_equal(tfm_npy_writer_open(&w, path("bad.npy"), TFM_NPY_F32, 4, &e), 0);
    assert_int_equal(tfm_npy_writer_append(&w, row, 3, &e), 0);
    assert_int_equal(tfm_npy_writer_commit(&w, &e), -1);
    assert_non_null(strstr(e.msg, "whole rows of 4"));
    assert_int_equal(access(path("bad.npy"), F_OK), -1);

    /* abort leaves nothing either */
    assert_int_equal(tfm_npy_writer_open(&w, path("ab.npy"), TFM_NPY_U32, 0, &e), 0);
    tfm_npy_writer_abort(&w);
    assert_int_equal(access(path("ab.npy"), F_OK), -1);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -c tmp >/dev/null", dir);
    assert_int_not_equal(system(cmd), 0); /* no temporary files left */
}

static void expect_bad(const void *img, size_t n, const char *part)
{
    tfm_npy a;
    tfm_err e = {0};
    if (tfm_npy_parse(&a, img, n, "x.npy", &e) == 0)
        fail_msg("accepted a bad file (expected '%s')", part);
    if (strncmp(e.msg, "x.npy: ", 7) != 0 || !strstr(e.msg, part))
        fail_msg("message '%s' lacks '%s'", e.msg, part);
}

/* A v1 image with the given dict and `data` bytes of payload. */
static void make(tfm_buf *b, const char *dict, size_t data)
{
    tfm_buf_clear(b);
    size_t hlen = strlen(dict);
    tfm_buf_append(b, "\x93NUMPY\x01\x00", 8);
    tfm_buf_putc(b, (char)(hlen & 0xff));
    tfm_buf_putc(b, (char)(hlen >> 8));
    tfm_buf_puts(b, dict);
    for (size_t i = 0; i < data; i++)
        tfm_buf_putc(b, (char)i);
}

static void test_malformed(void **state)
{
    (void)state;
    tfm_buf b = {0};
    make(&b, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }\n", 6);
    tfm_npy a;
    tfm_err e = {0};
    assert_int_equal(tfm_npy_parse(&a, b.data, b.len, "x.npy", &e), 0);
    assert_int_equal(a.count, 3);
    tfm_npy_close(&a);
    /* data at an odd offset is copied so that it is aligned */
    make(&b, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,)}", 6);
    assert_int_equal(tfm_npy_parse(&a, b.data, b.len, "x.npy", &e), 0);
    assert_int_equal((uintptr_t)a.data % 2, 0);
    assert_int_equal(((const uint16_t *)a.data)[1], 0x0302);
    tfm_npy_close(&a);
    /* key order and quotes are free; numpy writes these variants */
    make(&b, "{\"shape\": (2, 1), \"fortran_order\": True, \"descr\": \"<i8\"}", 16);
    assert_int_equal(tfm_npy_parse(&a, b.data, b.len, "x.npy", &e), 0);
    assert_int_equal(a.dtype, TFM_NPY_I64);
    tfm_npy_close(&a);

    expect_bad("", 0, "not a .npy file");
    expect_bad("\x93NUMPX\x01\x00\x00\x00", 10, "not a .npy file");
    expect_bad("\x93NUMPY\x04\x00\x00\x00", 10, "unsupported .npy version 4.0");
    expect_bad("\x93NUMPY\x01\x00\x50\x00{}", 12, "truncated .npy header");
    expect_bad("\x93NUMPY\x02\x00\x02\x00", 10, "truncated .npy header");
    make(&b, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }", 5);
    expect_bad(b.data, b.len, "truncated: 5 bytes of data, expected 6");
    make(&b, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), }", 7);
    expect_bad(b.data, b.len, "trailing bytes");
    make(&b, "{'descr': '>u2', 'fortran_order': False, 'shape': (3,), }", 6);
    expect_bad(b.data, b.len, "big-endian");
    make(&b, "{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", 6);
    expect_bad(b.data, b.len, "unsupported dtype '|O'");
    make(&b, "{'descr': '<u2', 'shape': (3,), }", 6);
    expect_bad(b.data, b.len, "no 'fortran_order'");
    make(&b, "{'descr': '<u2', 'fortran_order': True, 'shape': (3, 2), }", 12);
    expect_bad(b.data, b.len, "Fortran-order");
    make(&b, "{'descr': '<u2', 'fortran_order': False, 'shape': (-3,), }", 6);
    expect_bad(b.data, b.len, "non-negative integers");
    make(&b, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,), 'x': 1}", 6);
    expect_bad(b.data, b.len, "unknown key 'x'");
    make(&b, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,) 'x'}", 6);
    expect_bad(b.data, b.len, "expected ',' or '}'");
    make(&b, "{'descr': '<u2', 'fortran_order': False, 'shape': (3,)} junk", 6);
    expect_bad(b.data, b.len, "junk after the dict");
    make(&b, "{'descr': '<u2', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}", 6);
    expect_bad(b.data, b.len, "shape too large");
    make(&b, "{'descr': '<u2', 'fortran_order': False, 'shape': (99999999999999999999999,)}", 6);
    expect_bad(b.data, b.len, "dimension too large");
    make(&b, "{'descr': '<u2', 'fortran_order': Maybe, 'shape': (3,)}", 6);
    expect_bad(b.data, b.len, "True or False");
    tfm_buf_free(&b);

    assert_int_equal(tfm_npy_open(&a, path("missing.npy"), &e), -1);
    assert_non_null(strstr(e.msg, "missing.npy"));
}

/* Token ids: one rule for every reader (io/npy.h). */
static void expect_ids(tfm_npy_dtype t, int ndim, const size_t *shape, const void *data,
                       uint64_t limit, const char *msg)
{
    tfm_err e = {0};
    assert_int_equal(tfm_npy_write(path("ids.npy"), t, ndim, shape, data, &e), 0);
    tfm_npy a;
    assert_int_equal(tfm_npy_open(&a, path("ids.npy"), &e), 0);
    uint32_t out[4] = {0};
    int rc = tfm_npy_ids(&a, "ids.npy", limit, out, &e);
    tfm_npy_close(&a);
    if (!msg) {
        assert_int_equal(rc, 0);
        assert_int_equal(out[0], 1);
        assert_int_equal(out[2], 7);
        return;
    }
    assert_int_equal(rc, -1);
    if (!strstr(e.msg, msg))
        fail_msg("'%s' lacks '%s'", e.msg, msg);
}

static void test_ids_rule(void **state)
{
    (void)state;
    size_t n = 3, sq[2] = {1, 3};
    const int8_t i8[] = {1, 0, 7};
    const int64_t i64[] = {1, 0, 7}, neg[] = {1, -1, 7};
    const uint8_t u8[] = {1, 0, 7};
    const uint64_t u64[] = {1, 0, 7}, big[] = {1, 5000000000ull, 7};
    const float f[] = {1, 0, 7};
    expect_ids(TFM_NPY_I8, 1, &n, i8, 50, NULL);
    expect_ids(TFM_NPY_U8, 1, &n, u8, 50, NULL);
    expect_ids(TFM_NPY_I64, 1, &n, i64, 50, NULL);
    expect_ids(TFM_NPY_U64, 1, &n, u64, 50, NULL);
    expect_ids(TFM_NPY_I64, 1, &n, neg, 50,
               "ids.npy: element 1: token id -1 is outside the vocabulary (size 50)");
    expect_ids(TFM_NPY_U64, 1, &n, big, 1ull << 40,
               "ids.npy: element 1: token id 5000000000 is outside the vocabulary (size 4294967296)");
    expect_ids(TFM_NPY_U8, 1, &n, u8, 7, "element 2: token id 7 is outside the vocabulary (size 7)");
    expect_ids(TFM_NPY_F32, 1, &n, f, 50, "ids.npy: token ids are integers, not <f4");
    expect_ids(TFM_NPY_I64, 2, sq, i64, 50, "ids.npy: token ids are a 1-D array, not 2-D");
    expect_ids(TFM_NPY_I64, 0, NULL, i64, 50, "ids.npy: token ids are a 1-D array, not 0-D");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_roundtrip),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_ids_rule),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
