/* Few-shot demonstrations (choice and draw, the prompt text), on cases
 * small enough to check by hand. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "data/fewshot.h"

static void test_read_and_prompt(void **state)
{
    (void)state;
    const char *data = "{\"context\": \"A\", \"endings\": [\" x\", \" y\"], \"label\": 1}\n"
                       "\n"
                       "{\"context\": \"B\", \"endings\": [\" z\", \" w\"], \"label\": 0}\n";
    tfm_fewshot f;
    tfm_err err = {0};
    tfm_fewshot_init(&f, 2, 1, 0);
    assert_int_equal(tfm_fewshot_read(&f, data, strlen(data), 1, "d", &err), 0);
    assert_int_equal(f.n, 2);
    size_t pick[2] = {1, 0};
    tfm_buf b = {0};
    tfm_fewshot_prompt(&f, pick, &b);
    assert_int_equal(b.len, strlen("B z\n\nA y\n\n"));
    assert_memory_equal(b.data, "B z\n\nA y\n\n", b.len);
    assert_int_equal(tfm_fewshot_check(&f, "d", &err), 0);
    f.k = 3;
    assert_int_equal(tfm_fewshot_check(&f, "d", &err), -1);
    assert_non_null(strstr(err.msg, "--shots 3, but only 2 demonstrations"));
    tfm_buf_free(&b);
    tfm_fewshot_free(&f);
}

static void test_pick(void **state)
{
    (void)state;
    tfm_fewshot f;
    tfm_fewshot_init(&f, 4, 7, 1);
    for (int i = 0; i < 5; i++)
        tfm_fewshot_add(&f, "x", 1, "", 0);
    for (size_t item = 0; item < 5; item++) {
        size_t a[4], b[4];
        tfm_fewshot_pick(&f, item, a);
        tfm_fewshot_pick(&f, item, b);
        assert_memory_equal(a, b, sizeof a);   /* the same seed, the same draw */
        for (int j = 0; j < 4; j++) {
            assert_true(a[j] < 5 && a[j] != item);  /* never the item itself */
            for (int k = 0; k < j; k++)
                assert_true(a[k] != a[j]);
        }
    }
    tfm_fewshot_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_and_prompt),
        cmocka_unit_test(test_pick),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
