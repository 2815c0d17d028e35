/* Semantic search: the nearest rows of a stored matrix on hand-computed
 * cosines (order, ties, a zero row, k past the rows), the text of each
 * row, and the files it refuses. */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "infer/search.h"
#include "io/npy.h"

static char dir[] = "/tmp/tfm_search_XXXXXX";

static const char *path_of(const char *name)
{
    static char p[4][128];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

static void write_f32(const char *name, size_t n, size_t d, const float *v)
{
    tfm_err err = {0};
    size_t shape[2] = {n, d};
    assert_int_equal(tfm_npy_write(path_of(name), TFM_NPY_F32, 2, shape, v, &err), 0);
}

static void write_text(const char *name, const char *s)
{
    FILE *fp = fopen(path_of(name), "wb");
    assert_non_null(fp);
    fputs(s, fp);
    fclose(fp);
}

/* rows: e1, a zero row, e1 + e2 (cos 1/sqrt2 to e1), 3 e1 (cos 1: ties row
 * 0, which comes first), -e1 (cos -1), e2 (cos 0, as the zero row) */
static const float rows[6 * 2] = {1, 0, 0, 0, 1, 1, 3, 0, -1, 0, 0, 1};

static void test_top(void **state)
{
    (void)state;
    write_f32("v.npy", 6, 2, rows);
    tfm_search s;
    tfm_err err = {0};
    assert_int_equal(tfm_search_open(&s, path_of("v.npy"), &err), 0);
    assert_int_equal(s.n, 6);
    assert_int_equal(s.d, 2);
    const float q[2] = {2, 0};
    uint32_t row[8];
    double cos[8];
    assert_int_equal(tfm_search_top(&s, q, 3, row, cos), 3);
    assert_int_equal(row[0], 0);
    assert_int_equal(row[1], 3);
    assert_int_equal(row[2], 2);
    assert_true(cos[0] == 1.0 && cos[1] == 1.0);
    assert_true(fabs(cos[2] - sqrt(0.5)) < 1e-15);
    /* k past the rows: every row, the zero row (0) before e2 (0), -e1 last */
    assert_int_equal(tfm_search_top(&s, q, 8, row, cos), 6);
    const uint32_t want[6] = {0, 3, 2, 1, 5, 4};
    for (int i = 0; i < 6; i++)
        assert_int_equal(row[i], want[i]);
    assert_true(cos[3] == 0.0 && cos[4] == 0.0 && cos[5] == -1.0);
    /* a zero query is as far from every row: cosine 0, rows in order */
    const float z[2] = {0, 0};
    assert_int_equal(tfm_search_top(&s, z, 2, row, cos), 2);
    assert_int_equal(row[0], 0);
    assert_int_equal(row[1], 1);
    assert_null(tfm_search_text(&s, 0, &(size_t){0}));
    tfm_search_close(&s);
}

static void test_texts(void **state)
{
    (void)state;
    write_f32("v.npy", 6, 2, rows);
    tfm_search s;
    tfm_err err = {0};
    assert_int_equal(tfm_search_open(&s, path_of("v.npy"), &err), 0);
    /* a final line without a newline counts; an empty line is a row; CRLF */
    write_text("ok.txt", "one\n\nthree\r\nfour\nfive\nsix");
    assert_int_equal(tfm_search_texts(&s, path_of("ok.txt"), &err), 0);
    size_t n;
    const char *t = tfm_search_text(&s, 2, &n);
    assert_int_equal(n, 5);
    assert_memory_equal(t, "three", 5);
    t = tfm_search_text(&s, 1, &n);
    assert_int_equal(n, 0);
    t = tfm_search_text(&s, 5, &n);
    assert_int_equal(n, 3);
    assert_memory_equal(t, "six", 3);
    assert_null(tfm_search_text(&s, 6, &n));
    /* one line short or one too many: the counts and both names */
    write_text("short.txt", "1\n2\n3\n4\n5\n");
    assert_int_equal(tfm_search_texts(&s, path_of("short.txt"), &err), -1);
    assert_non_null(strstr(err.msg, "short.txt has 5 lines but the vectors 6 rows"));
    write_text("long.txt", "1\n2\n3\n4\n5\n6\n7\n");
    assert_int_equal(tfm_search_texts(&s, path_of("long.txt"), &err), -1);
    assert_non_null(strstr(err.msg, "long.txt has 7 lines"));
    /* the good text stays after a failed one */
    t = tfm_search_text(&s, 2, &n);
    assert_memory_equal(t, "three", 5);
    tfm_search_close(&s);
}

static void test_refused(void **state)
{
    (void)state;
    tfm_search s;
    tfm_err err = {0};
    size_t shape1[1] = {4};
    assert_int_equal(tfm_npy_write(path_of("1d.npy"), TFM_NPY_F32, 1, shape1, rows, &err), 0);
    assert_int_equal(tfm_search_open(&s, path_of("1d.npy"), &err), -1);
    assert_non_null(strstr(err.msg, "1d.npy: a 1-D array: expected the float32 [N, D]"));
    const double d[2] = {1, 2};
    size_t shape2[2] = {1, 2};
    assert_int_equal(tfm_npy_write(path_of("f8.npy"), TFM_NPY_F64, 2, shape2, d, &err), 0);
    assert_int_equal(tfm_search_open(&s, path_of("f8.npy"), &err), -1);
    assert_non_null(strstr(err.msg, "f8.npy: holds <f8 values"));
    write_f32("empty.npy", 0, 2, rows);
    assert_int_equal(tfm_search_open(&s, path_of("empty.npy"), &err), -1);
    assert_non_null(strstr(err.msg, "an empty [0, 2] array"));
    float bad[4] = {1, 2, 3, NAN};
    write_f32("nan.npy", 2, 2, bad);
    assert_int_equal(tfm_search_open(&s, path_of("nan.npy"), &err), -1);
    assert_non_null(strstr(err.msg, "nan.npy: row 2, column 2 is not finite"));
    assert_int_equal(tfm_search_open(&s, path_of("missing.npy"), &err), -1);
    assert_non_null(strstr(err.msg, "missing.npy"));
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_top),
        cmocka_unit_test(test_texts),
        cmocka_unit_test(test_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    const char *names[] = {"v.npy", "ok.txt", "short.txt", "long.txt", "1d.npy", "f8.npy",
                           "empty.npy", "nan.npy"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        unlink(path_of(names[i]));
    rmdir(dir);
    return rc;
}
