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
#include "io/safetensors.h"

static char dir[] = "/tmp/tfm_st_testXXXXXX";

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

static void slurp(const char *p, tfm_buf *b)
{
    FILE *fp = fopen(p, "rb");
    assert_non_null(fp);
    tfm_err e = {0};
    tfm_buf_clear(b);
    assert_int_equal(tfm_read_all(fp, p, b, &e), 0);
    fclose(fp);
}

static float wte[3][4];
static int64_t steps[2] = {100, -7};
static uint8_t bytes3[3] = {1, 2, 3};
static double scalar = 3.25;

static void write_sample(const char *p, tfm_buf *long_value)
{
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            wte[i][j] = (float)(i * 4 + j) * 0.5f;
    tfm_buf_clear(long_value);
    for (int i = 0; i < 400; i++)
        tfm_buf_puts(long_value, "line \"q\" \\ caf\xc3\xa9 \xf0\x9f\x98\x80\n");
    tfm_safetensors_writer w;
    tfm_safetensors_writer_init(&w);
    size_t s_wte[2] = {3, 4}, s_steps[1] = {2}, s_b[1] = {3}, s_empty[2] = {0, 5};
    /* the odd-sized U8 first: the writer must still align the F32 data */
    tfm_safetensors_writer_add(&w, "bytes", TFM_ST_U8, 1, s_b, bytes3);
    tfm_safetensors_writer_add(&w, "wte.weight", TFM_ST_F32, 2, s_wte, wte);
    tfm_safetensors_writer_add(&w, "state.step", TFM_ST_I64, 1, s_steps, steps);
    tfm_safetensors_writer_add(&w, "empty", TFM_ST_F32, 2, s_empty, NULL);
    tfm_safetensors_writer_add(&w, "scalar", TFM_ST_F64, 0, NULL, &scalar);
    tfm_safetensors_writer_meta(&w, "format", "tfm-gpt");
    tfm_safetensors_writer_meta(&w, "tokenizer", "old");
    tfm_safetensors_writer_meta_n(&w, "tokenizer", long_value->data, long_value->len);
    tfm_safetensors_writer_meta(&w, "empty", "");
    tfm_err e = {0};
    assert_int_equal(tfm_safetensors_writer_write(&w, p, &e), 0);
    tfm_safetensors_writer_free(&w);
}

static void test_roundtrip(void **state)
{
    (void)state;
    tfm_buf lv = {0}, img = {0};
    write_sample(path("m.safetensors"), &lv);
    slurp(path("m.safetensors"), &img);
    uint64_t hlen = 0;
    memcpy(&hlen, img.data, 8);
    assert_int_equal((8 + hlen) % 8, 0);
    assert_int_equal(img.data[8], '{');
    assert_int_equal(img.len, 8 + hlen + 3 + 48 + 16 + 8);

    tfm_safetensors st;
    tfm_err e = {0};
    assert_int_equal(tfm_safetensors_open(&st, path("m.safetensors"), &e), 0);
    assert_int_equal(st.n_tensors, 5);
    assert_string_equal(st.tensors[0].name, "bytes"); /* header order kept */
    const tfm_st_tensor *t = tfm_safetensors_find(&st, "wte.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, TFM_ST_F32);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[0], 3);
    assert_int_equal(t->shape[1], 4);
    assert_int_equal(t->count, 12);
    assert_int_equal(t->nbytes, 48);
    assert_memory_equal(t->data, wte, sizeof wte);
    assert_int_equal((uintptr_t)t->data % 4, 0);
    t = tfm_safetensors_find(&st, "state.step");
    assert_int_equal(t->dtype, TFM_ST_I64);
    assert_int_equal(((const int64_t *)t->data)[1], -7);
    assert_int_equal((uintptr_t)t->data % 8, 0);
    t = tfm_safetensors_find(&st, "bytes");
    assert_memory_equal(t->data, bytes3, 3);
    t = tfm_safetensors_find(&st, "empty");
    assert_int_equal(t->count, 0);
    assert_int_equal(t->shape[1], 5);
    t = tfm_safetensors_find(&st, "scalar");
    assert_int_equal(t->ndim, 0);
    assert_true(*(const double *)t->data == 3.25);
    assert_null(tfm_safetensors_find(&st, "nope"));
    size_t len;
    assert_string_equal(tfm_safetensors_meta(&st, "format", NULL), "tfm-gpt");
    const char *v = tfm_safetensors_meta(&st, "tokenizer", &len);
    assert_int_equal(len, lv.len);
    assert_memory_equal(v, lv.data, lv.len);
    assert_string_equal(tfm_safetensors_meta(&st, "empty", &len), "");
    assert_null(tfm_safetensors_meta(&st, "nope", NULL));
    tfm_safetensors_close(&st);

    /* every truncation fails cleanly; every flipped byte fails or parses
     * (the sanitizers watch for anything worse) */
    size_t step = getenv("TFM_SANITIZED") ? 7 : 1;
    for (size_t n = 0; n < img.len; n += step) {
        assert_int_equal(tfm_safetensors_parse(&st, img.data, n, "cut", &e), -1);
        assert_true(strncmp(e.msg, "cut", 3) == 0);
    }
    char *copy = malloc(img.len);
    for (size_t i = 0; i < img.len; i += step) {
        memcpy(copy, img.data, img.len);
        copy[i] ^= (char)0x5a;
        if (tfm_safetensors_parse(&st, copy, img.len, "flip", &e) == 0)
            tfm_safetensors_close(&st);
        else
            assert_true(strncmp(e.msg, "flip", 4) == 0);
    }
    free(copy);
    tfm_buf_free(&lv);
    tfm_buf_free(&img);
}

/* An image with the given header and `data` bytes of buffer. */
static void make(tfm_buf *b, const char *header, size_t data)
{
    tfm_buf_clear(b);
    uint64_t n = strlen(header);
    for (int i = 0; i < 8; i++)
        tfm_buf_putc(b, (char)(n >> (8 * i)));
    tfm_buf_puts(b, header);
    for (size_t i = 0; i < data; i++)
        tfm_buf_putc(b, (char)(i + 1));
}

static void expect_bad(const char *header, size_t data, const char *part)
{
    tfm_buf b = {0};
    make(&b, header, data);
    tfm_safetensors st;
    tfm_err e = {0};
    if (tfm_safetensors_parse(&st, b.data, b.len, "x.st", &e) == 0)
        fail_msg("accepted %s", header);
    if (strncmp(e.msg, "x.st", 4) != 0 || !strstr(e.msg, part))
        fail_msg("for %s: message '%s' lacks '%s'", header, e.msg, part);
    tfm_buf_free(&b);
}

static void test_validation(void **state)
{
    (void)state;
    tfm_safetensors st;
    tfm_err e = {0};
    assert_int_equal(tfm_safetensors_parse(&st, "abc", 3, "x.st", &e), -1);
    assert_non_null(strstr(e.msg, "too short"));
    assert_int_equal(tfm_safetensors_parse(&st, "\xff\xff\xff\xff\0\0\0\0{}", 10, "x.st", &e), -1);
    assert_non_null(strstr(e.msg, "exceeds 100 MB"));
    assert_int_equal(tfm_safetensors_parse(&st, "\x10\0\0\0\0\0\0\0{}", 10, "x.st", &e), -1);
    assert_non_null(strstr(e.msg, "truncated: header length 16 but only 2 bytes follow"));

    /* valid corner cases */
    tfm_buf b = {0};
    make(&b, "{}", 0);
    assert_int_equal(tfm_safetensors_parse(&st, b.data, b.len, "x.st", &e), 0);
    assert_int_equal(st.n_tensors, 0);
    tfm_safetensors_close(&st);
    make(&b, "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
             "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1,5]}}   ", 5);
    float f = 1.5f;
    memcpy(b.data + b.len - 4, &f, 4);
    assert_int_equal(tfm_safetensors_parse(&st, b.data, b.len, "x.st", &e), 0);
    const tfm_st_tensor *t = tfm_safetensors_find(&st, "b");
    assert_int_equal((uintptr_t)t->data % 4, 0); /* copied to an aligned place */
    assert_true(*(const float *)t->data == 1.5f);
    tfm_safetensors_close(&st);
    tfm_buf_free(&b);

    expect_bad(" {}", 0, "not a JSON object");
    expect_bad("[1]", 0, "not a JSON object");
    expect_bad("{\"a\":", 0, "x.st:1:");
    expect_bad("{\"a\": 1}", 0, "x.st:1:7: tensor 'a' must be an object");
    expect_bad("{\"a\":{\"dtype\":\"F8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
               "x.st:1:15: unsupported dtype \"F8\"");
    expect_bad("{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "dtype of 'a' is missing");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1,
               "x.st:1:29: the shape of 'a' must be between 0 and");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}", 1,
               "must be an integer");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 1,
               "the shape of 'a' must be an array");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", 1,
               "more than 8 dimensions");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1,
               "must be [begin, end]");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,0]}}", 1,
               "lie outside the 1-byte data buffer");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}", 1,
               "lie outside");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
               "span 4 bytes but shape and dtype make a different size");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],"
               "\"data_offsets\":[0,0]}}", 0, "overflowing");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12,
               "tensor 'b' at byte 8 leaves a hole after the previous tensor ending at 4");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
               "tensor 'b' at byte 4 overlaps");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
               "leaves a hole");
    expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8,
               "tensors cover 4 bytes of the 8-byte data buffer");
    expect_bad("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
               "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2,
               "duplicate key \"a\"");
    expect_bad("{\"__metadata__\":{\"k\":1}}", 0, "a __metadata__ value must be a string");
    expect_bad("{\"__metadata__\":[]}", 0, "__metadata__ must be an object");
    expect_bad("{\"\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
               "non-empty");
    expect_bad("{\"a\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
               "hold no NUL");

    assert_int_equal(tfm_safetensors_open(&st, path("missing.safetensors"), &e), -1);
    assert_non_null(strstr(e.msg, "missing.safetensors"));
}

static void test_writer_errors(void **state)
{
    (void)state;
    tfm_safetensors_writer w;
    tfm_safetensors_writer_init(&w);
    size_t s[1] = {1};
    tfm_safetensors_writer_add(&w, "a", TFM_ST_U8, 1, s, bytes3);
    tfm_safetensors_writer_add(&w, "b", TFM_ST_U8, 1, s, bytes3);
    tfm_safetensors_writer_add(&w, "a", TFM_ST_U8, 1, s, bytes3);
    tfm_err e = {0};
    assert_int_equal(tfm_safetensors_writer_write(&w, path("dup.safetensors"), &e), -1);
    assert_non_null(strstr(e.msg, "'a' used twice"));
    assert_int_equal(access(path("dup.safetensors"), F_OK), -1);
    tfm_safetensors_writer_free(&w);

    tfm_safetensors_writer_init(&w);
    tfm_safetensors_writer_add(&w, "x", TFM_ST_U8, 1, s, bytes3);
    assert_int_equal(tfm_safetensors_writer_write(&w, "/nonexistent/dir/m.safetensors", &e), -1);
    assert_non_null(strstr(e.msg, "/nonexistent/dir/m.safetensors"));
    tfm_safetensors_writer_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_validation),
        cmocka_unit_test(test_writer_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
