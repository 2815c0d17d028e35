/* fill-mask's top-k selection, on a case small enough to check by hand. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "infer/fill.h"

static void test_top_k(void **state)
{
    (void)state;
    const double p[] = {0.1, 0.3, 0.05, 0.3, 0.25};
    uint32_t idx[3];
    tfm_top_k(p, 5, 3, idx);
    /* ties by lower index */
    assert_int_equal(idx[0], 1);
    assert_int_equal(idx[1], 3);
    assert_int_equal(idx[2], 4);
    uint32_t all[5];
    tfm_top_k(p, 5, 5, all);
    assert_int_equal(all[3], 0);
    assert_int_equal(all[4], 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_top_k),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
