/* The curves SVG: well-formed XML (a small checker: balanced elements,
 * quoted attributes, escaped text), the expected polylines and points, the
 * axis labels and legend; log.tsv parsing and its errors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "train/plot.h"

/* 1 when s is well-formed as far as this SVG needs: an XML declaration, then
 * elements that nest and close, attributes name="value", no bare '<' or '&'
 * in text. */
static int well_formed(const char *s)
{
    const char *stack[64];
    size_t len[64];
    int depth = 0, roots = 0;
    if (strncmp(s, "<?xml ", 6))
        return 0;
    s = strstr(s, "?>");
    if (!s)
        return 0;
    s += 2;
    while (*s) {
        if (*s == '&') {
            if (strncmp(s, "&amp;", 5) && strncmp(s, "&lt;", 4) && strncmp(s, "&gt;", 4) &&
                strncmp(s, "&quot;", 6))
                return 0;
            s++;
            continue;
        }
        if (*s != '<') {
            if (depth == 0 && *s != '\n' && *s != ' ')
                return 0;
            s++;
            continue;
        }
        s++;
        if (*s == '/') {
            s++;
            size_t n = strcspn(s, ">");
            if (!depth || n != len[depth - 1] || strncmp(s, stack[depth - 1], n))
                return 0;
            depth--;
            s += n + 1;
            continue;
        }
        size_t n = strcspn(s, " />\n");
        if (!n)
            return 0;
        const char *name = s;
        s += n;
        for (;;) {
            s += strspn(s, " \n");
            if (*s == '>' || (s[0] == '/' && s[1] == '>'))
                break;
            size_t an = strcspn(s, "= >");
            if (!an || s[an] != '=' || s[an + 1] != '"')
                return 0;
            const char *q = strchr(s + an + 2, '"');
            if (!q || memchr(s + an + 2, '<', (size_t)(q - (s + an + 2))))
                return 0;
            s = q + 1;
        }
        if (*s == '/') {
            s += 2;
            roots += depth == 0;
            continue;
        }
        if (depth == 64)
            return 0;
        roots += depth == 0;
        stack[depth] = name;
        len[depth++] = n;
        s++;
    }
    return depth == 0 && roots == 1;
}

static int count(const char *s, const char *what)
{
    int n = 0;
    for (; (s = strstr(s, what)); s += strlen(what))
        n++;
    return n;
}

/* The number of points of each polyline of class cls, into pts[]. */
static int polyline_points(const char *s, const char *cls, int *pts, int max)
{
    char key[64];
    snprintf(key, sizeof key, "<polyline class=\"%s\"", cls);
    int k = 0;
    for (; (s = strstr(s, key)) && k < max; s++) {
        const char *p = strstr(s, "points=\"") + 8, *e = strchr(p, '"');
        int n = 1;
        for (const char *c = p; c < e; c++)
            n += *c == ' ';
        pts[k++] = n;
    }
    return k;
}

static const char LOG[] =
    "step\ttrain_loss\tval_loss\tlr\tgrad_norm\ttokens_per_s\telapsed_s\tval_accuracy\tval_macro_f1\n"
    "10\t5.0\t\t0.001\t1\t100\t1\t\t\n"
    "20\t2.0\t2.5\t0.002\t1\t100\t2\t0.4\t0.3\n"
    "30\t1.0\t\t0.0015\t1\t100\t3\t\t\n"
    "40\t0.3\t0.4\t0.001\t1\t100\t4\t0.8\t0.7\n"
    "50\t0.2\t\t0.0005\t1\t100\t5\t\t\n";

static void test_parse(void **state)
{
    (void)state;
    tfm_plot_run r;
    tfm_err err = {0};
    assert_int_equal(tfm_plot_run_parse(&r, "a", LOG, strlen(LOG), "a/log.tsv", &err), 0);
    assert_int_equal(r.n, 5);
    assert_string_equal(r.metric_name, "accuracy");
    assert_true(isnan(r.val[0]));
    assert_float_equal(r.val[1], 2.5, 1e-12);
    assert_float_equal(r.metric[3], 0.8, 1e-12);
    assert_float_equal(r.lr[4], 0.0005, 1e-12);
    tfm_plot_run_free(&r);
    const char bad[] = "a\tb\n1\t2\n";
    assert_int_equal(tfm_plot_run_parse(&r, "b", bad, strlen(bad), "b/log.tsv", &err), -1);
    assert_non_null(strstr(err.msg, "b/log.tsv: not a tfm-train log"));
    tfm_plot_run_free(&r);
    tfm_err e2 = {0};
    assert_int_equal(tfm_plot_run_read(&r, "/nonexistent/run", &e2), -1);
    assert_non_null(strstr(e2.msg, "/nonexistent/run/log.tsv"));
}

static void test_svg_one_run(void **state)
{
    (void)state;
    tfm_plot_run r;
    tfm_err err = {0};
    assert_int_equal(tfm_plot_run_parse(&r, "r&d <1>", LOG, strlen(LOG), "x", &err), 0);
    tfm_buf b = {0};
    tfm_plot_svg(&r, 1, &b);
    const char *s = tfm_buf_cstr(&b);
    assert_true(well_formed(s));
    /* train loss, validation loss, accuracy, learning rate */
    assert_int_equal(count(s, "<polyline "), 4);
    int pts[4];
    assert_int_equal(polyline_points(s, "train_loss", pts, 4), 1);
    assert_int_equal(pts[0], 5);
    assert_int_equal(polyline_points(s, "val_loss", pts, 4), 1);
    assert_int_equal(pts[0], 2);
    assert_int_equal(polyline_points(s, "val_metric", pts, 4), 1);
    assert_int_equal(pts[0], 2);
    assert_int_equal(polyline_points(s, "lr", pts, 4), 1);
    assert_int_equal(pts[0], 5);
    /* the loss spans 0.2..5 (25x): log scale; axes labelled with units */
    assert_non_null(strstr(s, "loss (nats per target), log scale"));
    assert_int_equal(count(s, "step (optimizer updates)"), 3);
    assert_non_null(strstr(s, "validation accuracy (fraction)"));
    assert_non_null(strstr(s, ">learning rate<"));
    assert_non_null(strstr(s, ">r&amp;d &lt;1&gt;<")); /* the legend, escaped */
    tfm_buf_free(&b);
    tfm_plot_run_free(&r);
}

static void test_svg_two_runs(void **state)
{
    (void)state;
    static const char lm[] = "step\ttrain_loss\tval_loss\tlr\tgrad_norm\ttokens_per_s\telapsed_s\n"
                             "1\t3.0\t3.1\t0.01\t1\t1\t1\n"
                             "2\t2.9\t\t0.01\t1\t1\t1\n";
    tfm_plot_run r[2];
    tfm_err err = {0};
    assert_int_equal(tfm_plot_run_parse(&r[0], "pre", LOG, strlen(LOG), "x", &err), 0);
    assert_int_equal(tfm_plot_run_parse(&r[1], "scratch", lm, strlen(lm), "y", &err), 0);
    tfm_buf b = {0};
    tfm_plot_svg(r, 2, &b);
    const char *s = tfm_buf_cstr(&b);
    assert_true(well_formed(s));
    /* 4 of the first, train + val (one point) + lr of the second */
    assert_int_equal(count(s, "<polyline "), 7);
    assert_non_null(strstr(s, ">pre<"));
    assert_non_null(strstr(s, ">scratch<"));
    tfm_buf_free(&b);
    /* without a metric there is no metric panel; a narrow loss range is linear */
    b = (tfm_buf){0};
    tfm_plot_svg(&r[1], 1, &b);
    s = tfm_buf_cstr(&b);
    assert_true(well_formed(s));
    assert_int_equal(count(s, "<polyline "), 3);
    assert_int_equal(count(s, "class=\"panel\""), 2);
    assert_null(strstr(s, "log scale"));
    tfm_buf_free(&b);
    tfm_plot_run_free(&r[0]);
    tfm_plot_run_free(&r[1]);
}

static void test_checker(void **state)
{
    (void)state;
    assert_true(well_formed("<?xml version=\"1.0\"?>\n<a><b x=\"1\"/></a>\n"));
    assert_false(well_formed("<?xml version=\"1.0\"?>\n<a><b></a>\n"));
    assert_false(well_formed("<?xml version=\"1.0\"?>\n<a>x & y</a>\n"));
    assert_false(well_formed("<?xml version=\"1.0\"?>\n<a x=1></a>\n"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checker),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_svg_one_run),
        cmocka_unit_test(test_svg_two_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
