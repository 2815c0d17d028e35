#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/file.h"
#include "base/opt.h"
#include "base/order.h"
#include "base/progress.h"
#include "base/reservoir.h"
#include "base/rng.h"
#include "base/thread.h"

static void test_err_at(void **state)
{
    tfm_err e = {0};
    assert_int_equal(tfm_err_at(&e, "a.yaml", 12, 3, "unknown key '%s'", "x"), -1);
    assert_string_equal(e.msg, "a.yaml:12:3: unknown key 'x'");
    tfm_err_at(&e, "b", 0, 0, "bad");
    assert_string_equal(e.msg, "b: bad");
    tfm_err_prefix(&e, "loading %s", "m");
    assert_string_equal(e.msg, "loading m: b: bad");
}

static void test_json_string(void **state)
{
    tfm_buf b = {0};
    tfm_buf_put_json_string(&b, "a\"\\\n\x01\xc3\xa9\xff", 8);
    assert_string_equal(tfm_buf_cstr(&b), "\"a\\\"\\\\\\n\\u0001\xc3\xa9\\ufffd\"");
    /* a truncated 3-byte character is one U+FFFD, as Python's "replace" */
    tfm_buf_clear(&b);
    tfm_buf_put_json_string(&b, "\xe6\x97x\xed\xa0\x80\xf0\x9f\x98", 9);
    assert_string_equal(tfm_buf_cstr(&b), "\"\\ufffdx\\ufffd\\ufffd\\ufffd\\ufffd\"");
    tfm_buf_free(&b);
}

static void test_rng_repeatable(void **state)
{
    tfm_rng a, b;
    tfm_rng_seed(&a, 42);
    tfm_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++)
        assert_int_equal(tfm_rng_u64(&a), tfm_rng_u64(&b));
    tfm_rng_seed(&b, 43);
    assert_int_not_equal(tfm_rng_u64(&a), tfm_rng_u64(&b));
    /* below(): every value reachable, none out of range */
    int seen[7] = {0};
    for (int i = 0; i < 7000; i++) {
        uint64_t v = tfm_rng_below(&a, 7);
        assert_true(v < 7);
        seen[v]++;
    }
    for (int i = 0; i < 7; i++)
        assert_true(seen[i] > 800 && seen[i] < 1200);
    double sum = 0, sq = 0;
    for (int i = 0; i < 20000; i++) {
        double x = tfm_rng_normal(&a);
        sum += x;
        sq += x * x;
    }
    assert_true(fabs(sum / 20000) < 0.05);
    assert_true(fabs(sq / 20000 - 1) < 0.05);
}

static void test_atomic_write(void **state)
{
    char dir[] = "/tmp/tfm_base_testXXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/out.txt", dir);
    tfm_err e = {0};
    tfm_out o;
    assert_int_equal(tfm_out_open(&o, path, &e), 0);
    fputs("partial", o.fp);
    assert_int_equal(access(path, F_OK), -1); /* nothing visible before commit */
    tfm_out_abort(&o);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(tfm_write_file(path, "hello", 5, &e), 0);
    tfm_map m;
    assert_int_equal(tfm_map_open(&m, path, &e), 0);
    assert_int_equal(m.size, 5);
    assert_memory_equal(m.data, "hello", 5);
    tfm_map_close(&m);
    unlink(path);
    assert_int_equal(tfm_map_open(&m, path, &e), -1);
    assert_non_null(strstr(e.msg, "out.txt"));
    rmdir(dir);
}

static void test_write_device_in_place(void **state)
{
    tfm_err e = {0};
    assert_int_equal(tfm_write_file("/dev/null", "x", 1, &e), 0);
    struct stat st;
    assert_int_equal(stat("/dev/null", &st), 0);
    assert_true(S_ISCHR(st.st_mode));
}

static char *slurp(const char *path)
{
    static char buf[256];
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

/* A link is followed, not replaced: its target (also one reached through a
 * relative link, or one that does not exist yet) gets the content. */
static void test_write_through_symlink(void **state)
{
    char dir[] = "/tmp/tfm_base_testXXXXXX";
    assert_non_null(mkdtemp(dir));
    char sub[300], target[300], link1[300], link2[300], dangling[300], made[300];
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(target, sizeof target, "%s/sub/target.txt", dir);
    snprintf(link1, sizeof link1, "%s/link1", dir);
    snprintf(link2, sizeof link2, "%s/link2", dir);
    snprintf(dangling, sizeof dangling, "%s/dangling", dir);
    snprintf(made, sizeof made, "%s/sub/made.txt", dir);
    assert_int_equal(mkdir(sub, 0777), 0);
    tfm_err e = {0};
    assert_int_equal(tfm_write_file(target, "old", 3, &e), 0);
    assert_int_equal(symlink("sub/target.txt", link1), 0);
    assert_int_equal(symlink(link1, link2), 0);
    assert_int_equal(tfm_write_file(link2, "new", 3, &e), 0);
    struct stat st;
    assert_int_equal(lstat(link1, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(lstat(link2, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_string_equal(slurp(target), "new");
    assert_int_equal(symlink("sub/made.txt", dangling), 0);
    assert_int_equal(tfm_write_file(dangling, "made", 4, &e), 0);
    assert_int_equal(lstat(dangling, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_string_equal(slurp(made), "made");
    /* a link to a device is written in place, the device stays */
    assert_int_equal(unlink(link1), 0);
    assert_int_equal(symlink("/dev/null", link1), 0);
    assert_int_equal(tfm_write_file(link2, "x", 1, &e), 0);
    assert_int_equal(lstat(link1, &st), 0);
    assert_true(S_ISLNK(st.st_mode));
    /* a loop is an error naming the path */
    assert_int_equal(unlink(link1), 0);
    assert_int_equal(symlink(link2, link1), 0);
    assert_int_equal(tfm_write_file(link2, "x", 1, &e), -1);
    assert_non_null(strstr(e.msg, "link2"));
    unlink(link1), unlink(link2), unlink(dangling), unlink(made), unlink(target);
    rmdir(sub);
    rmdir(dir);
}

/* /proc/self/fd/N writes to descriptor N itself, at its offset: the file
 * open there keeps what was written before. */
static void test_write_own_descriptor(void **state)
{
    char path[] = "/tmp/tfm_base_fdXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "a", 1), 1);
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    tfm_err e = {0};
    assert_int_equal(tfm_write_file(self, "b", 1, &e), 0);
    assert_int_equal(write(fd, "c", 1), 1); /* fd is still open */
    close(fd);
    assert_string_equal(slurp(path), "abc");
    unlink(path);
}

static void test_getline_nul(void **state)
{
    FILE *fp = tmpfile();
    fwrite("ab\0c\nlast", 1, 9, fp);
    rewind(fp);
    tfm_buf b = {0};
    assert_int_equal(tfm_getline(fp, &b), 1);
    assert_int_equal(b.len, 4);
    assert_memory_equal(b.data, "ab\0c", 4);
    assert_int_equal(tfm_getline(fp, &b), 1);
    assert_int_equal(b.len, 4);
    assert_int_equal(tfm_getline(fp, &b), 0);
    fclose(fp);
    tfm_buf_free(&b);
}

static void add_index(void *ctx, int i, int n)
{
    int *slots = ctx;
    slots[i] = i + 1;
}

static void test_parallel(void **state)
{
    int slots[4] = {0};
    tfm_parallel_run(4, add_index, slots);
    for (int i = 0; i < 4; i++)
        assert_int_equal(slots[i], i + 1);
}

static void test_parse(void **state)
{
    long v;
    double d;
    assert_int_equal(tfm_parse_long("12", 0, 100, &v), 0);
    assert_int_equal(v, 12);
    assert_int_equal(tfm_parse_long("12x", 0, 100, &v), -1);
    assert_int_equal(tfm_parse_long("101", 0, 100, &v), -1);
    assert_int_equal(tfm_parse_long("", 0, 100, &v), -1);
    assert_int_equal(tfm_parse_double("0.5", 0, 1, &d), 0);
    assert_int_equal(tfm_parse_double("nan", 0, 1, &d), -1);
}

/* A count of tokens is drawn as an integer, not "1.235e+04". */
static void test_progress_counts(void **state)
{
    (void)state;
    char path[] = "/tmp/tfm-progress-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    tfm_progress p;
    tfm_progress_init(&p, "perplexity", "tok", 50000, 0);
    p.enabled = 1; /* stderr is no terminal here */
    tfm_progress_update(&p, 12345);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char buf[512] = {0};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    unlink(path);
    assert_true(n > 0);
    assert_non_null(strstr(buf, " 12345/50000 tok"));
    assert_null(strstr(buf, "e+"));
}

static void put(const char *dir, const char *file, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

static void mk(const char *dir, const char *sub)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    assert_int_equal(mkdir(path, 0700), 0);
}

/* CPU quotas from fake cgroup trees: v2 cpu.max on the process's cgroup or
 * an ancestor (the smaller wins, rounded up), v1 cfs files under a "cpu"
 * or "cpu,cpuacct" mount, no quota ("max", -1) and missing files. */
static void test_cgroup_quota(void **state)
{
    char root[] = "/tmp/tfm-cgroup.XXXXXX";
    assert_non_null(mkdtemp(root));
    mk(root, "a");
    mk(root, "a/b");
    put(root, "self", "0::/a/b\n");
    assert_int_equal(tfm_cgroup_cpu_limit(root, "/nonexistent/cgroup"), 0);
    char self[600];
    snprintf(self, sizeof self, "%s/self", root);
    assert_int_equal(tfm_cgroup_cpu_limit(root, self), 0); /* no cpu.max anywhere */
    put(root, "a/b/cpu.max", "max 100000\n");
    assert_int_equal(tfm_cgroup_cpu_limit(root, self), 0);
    put(root, "a/cpu.max", "250000 100000\n"); /* 2.5 CPUs on the parent */
    assert_int_equal(tfm_cgroup_cpu_limit(root, self), 3);
    put(root, "a/b/cpu.max", "50000 100000\n");
    assert_int_equal(tfm_cgroup_cpu_limit(root, self), 1);
    put(root, "cpu.max", "100000 100000\n"); /* the namespace root counts too */
    put(root, "a/b/cpu.max", "max 100000\n");
    assert_int_equal(tfm_cgroup_cpu_limit(root, self), 1);

    /* v1: "cpu" among the controllers of a line */
    char v1[] = "/tmp/tfm-cgroup1.XXXXXX";
    assert_non_null(mkdtemp(v1));
    mk(v1, "cpu,cpuacct");
    mk(v1, "cpu,cpuacct/job");
    put(v1, "self", "5:memory:/job\n4:cpuacct,cpu:/job\n0::/\n");
    snprintf(self, sizeof self, "%s/self", v1);
    put(v1, "cpu,cpuacct/job/cpu.cfs_quota_us", "-1\n");
    put(v1, "cpu,cpuacct/job/cpu.cfs_period_us", "100000\n");
    assert_int_equal(tfm_cgroup_cpu_limit(v1, self), 0);
    put(v1, "cpu,cpuacct/job/cpu.cfs_quota_us", "300000\n");
    assert_int_equal(tfm_cgroup_cpu_limit(v1, self), 3);
    put(v1, "self", "5:memory:/job\n4:cpuacct:/job\n"); /* no cpu controller */
    assert_int_equal(tfm_cgroup_cpu_limit(v1, self), 0);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s'", root, v1);
    assert_int_equal(system(cmd), 0);
    /* this process: at least one CPU, never more than the affinity mask */
    int n = tfm_cpus_available();
    assert_true(n >= 1 && n <= sysconf(_SC_NPROCESSORS_CONF));
}

static void test_threads_fit(void **state)
{
    (void)state;
    /* idle 2-CPU machine: our 2 threads are the only runnable ones */
    assert_int_equal(tfm_threads_fit(2, 2, 2, 2), 2);
    /* another 2-thread job: one thread each; both at one stay there */
    assert_int_equal(tfm_threads_fit(2, 2, 4, 2), 1);
    assert_int_equal(tfm_threads_fit(2, 2, 2, 1), 1);
    /* the other job gone: back to 2; never above the count asked */
    assert_int_equal(tfm_threads_fit(2, 2, 1, 1), 2);
    assert_int_equal(tfm_threads_fit(4, 64, 30, 2), 4);
    /* a busy large machine still leaves one */
    assert_int_equal(tfm_threads_fit(8, 16, 40, 3), 1);
    assert_int_equal(tfm_threads_fit(8, 16, 12, 3), 7);
    /* this process's threads counted between the two reads */
    assert_int_equal(tfm_threads_fit(2, 2, 1, 3), 2);
    /* called now: between 1 and the count asked */
    int n = tfm_threads_fair(2);
    assert_true(n >= 1 && n <= 2);
    assert_int_equal(tfm_threads_fair(1), 1);
}

static size_t key_of(const void *ctx, size_t i)
{
    return ((const size_t *)ctx)[i];
}

static void test_order_by_key(void **state)
{
    (void)state;
    const size_t key[] = {5, 1, 5, 0, 1, 9, 5};
    const size_t want[] = {3, 1, 4, 0, 2, 6, 5}; /* ties keep input order */
    size_t order[7];
    tfm_order_by_key(order, 7, key_of, key);
    assert_memory_equal(order, want, sizeof want);
    tfm_order_by_key(order, 0, key_of, key); /* nothing to order */
}

/* Fewer lines than slots: all kept in order; more: each line about equally
 * often, and the same seed the same sample. */
static void test_reservoir(void **state)
{
    (void)state;
    tfm_reservoir r;
    tfm_reservoir_init(&r, 4, 1);
    tfm_reservoir_add(&r, "a\n", 2);
    tfm_reservoir_add(&r, "bc", 2);
    assert_int_equal(tfm_reservoir_kept(&r), 2);
    assert_memory_equal(r.lines[1], "bc", 2);
    tfm_reservoir_free(&r);
    int count[10] = {0};
    for (uint64_t seed = 0; seed < 2000; seed++) {
        tfm_reservoir_init(&r, 3, seed);
        for (int i = 0; i < 10; i++) {
            char c = (char)('0' + i);
            tfm_reservoir_add(&r, &c, 1);
        }
        assert_int_equal(tfm_reservoir_kept(&r), 3);
        for (int k = 0; k < 3; k++)
            count[r.lines[k][0] - '0']++;
        tfm_reservoir_free(&r);
    }
    for (int i = 0; i < 10; i++) /* 600 expected; sd ~ 20 */
        assert_true(count[i] > 500 && count[i] < 700);
    tfm_reservoir a, b;
    tfm_reservoir_init(&a, 2, 7);
    tfm_reservoir_init(&b, 2, 7);
    for (int i = 0; i < 50; i++) {
        char c = (char)('A' + i % 26);
        tfm_reservoir_add(&a, &c, 1);
        tfm_reservoir_add(&b, &c, 1);
    }
    assert_int_equal(a.lines[0][0], b.lines[0][0]);
    assert_int_equal(a.lines[1][0], b.lines[1][0]);
    tfm_reservoir_free(&a);
    tfm_reservoir_free(&b);
}

/* tfm_pages_alloc: zero, aligned, and a page is resident only once
 * written; huge: 2 MiB aligned. */
static void test_pages(void **state)
{
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 64 * page + 100;
    for (int huge = 0; huge < 2; huge++) {
        size_t len = huge ? ((size_t)5 << 20) + 12 : n;
        unsigned char *p = tfm_pages_alloc(len, huge);
        assert_int_equal((uintptr_t)p % (huge ? (size_t)2 << 20 : page), 0);
        if (!huge) {
            assert_int_equal(tfm_pages_resident(p, len), 0);
            p[3 * page + 7] = 1;
            p[40 * page] = 1;
            assert_int_equal(tfm_pages_resident(p, len), 2);
            assert_int_equal(tfm_pages_resident(p + 4 * page, 36 * page), 0);
            assert_int_equal(tfm_pages_resident(p + 3 * page + 1, page), 0); /* no whole page */
        }
        p[len - 1] = 2; /* the whole length is writable */
        for (size_t i = 0; i + 1 < len; i++)
            if (p[i] > (i == 3 * page + 7 || i == 40 * page))
                fail_msg("byte %zu is %d", i, p[i]);
        tfm_pages_free(p, len);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reservoir), cmocka_unit_test(test_pages),
        cmocka_unit_test(test_progress_counts), cmocka_unit_test(test_err_at),       cmocka_unit_test(test_json_string),
        cmocka_unit_test(test_rng_repeatable), cmocka_unit_test(test_atomic_write),
        cmocka_unit_test(test_getline_nul),  cmocka_unit_test(test_parallel),
        cmocka_unit_test(test_parse), cmocka_unit_test(test_write_device_in_place),
        cmocka_unit_test(test_write_through_symlink), cmocka_unit_test(test_write_own_descriptor),
        cmocka_unit_test(test_cgroup_quota), cmocka_unit_test(test_threads_fit),
        cmocka_unit_test(test_order_by_key),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
