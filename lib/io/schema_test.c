/* The schema engine on a table of its own (train/run_config_test.c covers
 * tfm-train's): the engine knows no key, so any owner's table works. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "io/schema.h"

typedef struct toy {
    struct {
        int64_t n;
        double rate;
        int on, mode;
    } a;
    struct {
        char name[TFM_SCHEMA_STRING_MAX];
    } b;
    unsigned char given[5];
} toy;

#define OFF(f) offsetof(toy, f)
static const tfm_schema_key keys[] = {
    {"a.n", TFM_SCHEMA_INT, OFF(a.n), "3", 1, 10, NULL, "a count"},
    {"a.rate", TFM_SCHEMA_FLOAT, OFF(a.rate), "0.1", 0, 1, NULL, "a rate"},
    {"a.on", TFM_SCHEMA_BOOL, OFF(a.on), "true", 0, 0, NULL, "a switch"},
    {"a.mode", TFM_SCHEMA_ENUM, OFF(a.mode), "slow", 0, 0, "fast|slow", "a mode"},
    {"b.name", TFM_SCHEMA_STRING, OFF(b.name), "", 0, 0, NULL, "a name"},
};
static const tfm_schema_alias aliases[] = {{"count", "a.n"}};
static const tfm_schema schema = {keys, 5, sizeof(toy), OFF(given), "a or b", aliases, 1, 0};

static void test_toy_schema(void **state)
{
    (void)state;
    toy t;
    tfm_schema_defaults(&schema, &t);
    assert_int_equal(t.a.n, 3);
    assert_true(t.a.rate == 0.1);
    assert_int_equal(t.a.on, 1);
    assert_int_equal(t.a.mode, 1);
    assert_string_equal(t.b.name, "");
    tfm_err err = {0};
    const char *yaml = "a: {n: 7, mode: fast}\nb:\n  name: x y\n";
    assert_int_equal(tfm_schema_apply_yaml(&schema, &t, yaml, strlen(yaml), "t.yaml", &err), 0);
    assert_int_equal(t.a.n, 7);
    assert_int_equal(t.a.mode, 0);
    assert_string_equal(t.b.name, "x y");
    assert_true(tfm_schema_given(&schema, &t, "a.n"));
    assert_false(tfm_schema_given(&schema, &t, "a.rate"));
    assert_int_equal(tfm_schema_set(&schema, &t, "a.on=false", &err), 0);
    assert_int_equal(t.a.on, 0);

    /* the dump reads back to the same values */
    tfm_buf out = {0};
    tfm_schema_dump(&schema, &t, 0, &out);
    assert_string_equal(tfm_buf_cstr(&out), "a:\n  n: 7\n  rate: 0.1\n  on: false\n  mode: fast\n"
                                  "b:\n  name: x y\n");
    toy u;
    tfm_schema_defaults(&schema, &u);
    assert_int_equal(tfm_schema_apply_yaml(&schema, &u, out.data, out.len, "d", &err), 0);
    assert_int_equal(memcmp(&t.a, &u.a, sizeof t.a), 0);
    assert_string_equal(t.b.name, u.b.name);
    tfm_buf_free(&out);

    /* errors name the table's own sections, keys and aliases */
    const char *bad = "c: {n: 1}\n";
    assert_int_equal(tfm_schema_apply_yaml(&schema, &t, bad, strlen(bad), "t.yaml", &err), -1);
    assert_string_equal(err.msg, "t.yaml:1:1: unknown section 'c' (expected a or b)");
    bad = "a:\n  rat: 0.5\n";
    assert_int_equal(tfm_schema_apply_yaml(&schema, &t, bad, strlen(bad), "t.yaml", &err), -1);
    assert_string_equal(err.msg, "t.yaml:2:3: unknown key 'rat' (did you mean 'a.rate'?)");
    assert_int_equal(tfm_schema_set(&schema, &t, "a.n=11", &err), -1);
    assert_non_null(strstr(err.msg, "'a.n' must be in [1, 10], got 11"));
    assert_string_equal(tfm_schema_suggest(&schema, "counts"), "a.n");
    char buf[8];
    assert_string_equal(tfm_schema_choice_name(&schema, "a.mode", 0, buf, sizeof buf), "fast");
    assert_null(tfm_schema_find(&schema, "a.nope"));
}

/* Two owners' tables, each over its own struct, joined into one schema. */
typedef struct part_a {
    int64_t n;
    double rate;
} part_a;
typedef struct joined {
    char pad[24];
    part_a a;
    int on;
    unsigned char given[3];
} joined;

static void test_join(void **state)
{
    (void)state;
    static const tfm_schema_key ka[] = {
        {"a.n", TFM_SCHEMA_INT, offsetof(part_a, n), "2", 0, 9, NULL, "n"},
        {"a.rate", TFM_SCHEMA_FLOAT, offsetof(part_a, rate), "0.5", 0, 1, NULL, "rate"},
    };
    static const tfm_schema_key kb[] = {
        {"b.on", TFM_SCHEMA_BOOL, offsetof(joined, on), "false", 0, 0, NULL, "on"},
    };
    const tfm_schema_part parts[] = {{ka, 2, offsetof(joined, a)}, {kb, 1, 0}};
    tfm_schema_key all[3];
    assert_int_equal(tfm_schema_join(all, 3, parts, 2), 3);
    assert_string_equal(all[0].path, "a.n");
    assert_string_equal(all[2].path, "b.on");
    assert_int_equal(all[1].offset, offsetof(joined, a.rate));
    assert_int_equal(all[2].offset, offsetof(joined, on));
    const tfm_schema s = {all, 3, sizeof(joined), offsetof(joined, given), "a or b", NULL, 0, 0};
    joined j;
    tfm_schema_defaults(&s, &j);
    assert_int_equal(j.a.n, 2);
    assert_true(j.a.rate == 0.5);
    tfm_err err = {0};
    assert_int_equal(tfm_schema_set(&s, &j, "a.rate=0.25", &err), 0);
    assert_int_equal(tfm_schema_set(&s, &j, "b.on=true", &err), 0);
    assert_true(j.a.rate == 0.25);
    assert_int_equal(j.on, 1);
    assert_true(tfm_schema_given(&s, &j, "a.rate"));
    assert_false(tfm_schema_given(&s, &j, "a.n"));
}

/* An owner reading its own keys of a document that holds others' too. */
static void test_skip_unknown(void **state)
{
    (void)state;
    tfm_schema part = schema;
    part.skip_unknown = 1;
    toy t;
    tfm_schema_defaults(&part, &t);
    tfm_err err = {0};
    const char *yaml = "c: {x: 1}\na: {n: 5, other: [1, 2], nested: {y: 2}}\nb: {name: z}\n";
    assert_int_equal(tfm_schema_apply_yaml(&part, &t, yaml, strlen(yaml), "t.yaml", &err), 0);
    assert_int_equal(t.a.n, 5);
    assert_string_equal(t.b.name, "z");
    /* its own keys are still checked, and the strict schema refuses the rest */
    const char *bad = "c: 1\na: {n: 11}\n";
    assert_int_equal(tfm_schema_apply_yaml(&part, &t, bad, strlen(bad), "t.yaml", &err), -1);
    assert_non_null(strstr(err.msg, "a.n"));
    assert_int_equal(tfm_schema_apply_yaml(&schema, &t, yaml, strlen(yaml), "t.yaml", &err), -1);
    assert_non_null(strstr(err.msg, "unknown section 'c'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_toy_schema),
        cmocka_unit_test(test_join),
        cmocka_unit_test(test_skip_unknown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
