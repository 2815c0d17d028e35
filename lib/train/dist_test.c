/* The collectives of train/dist.h.  Alone (make check) it checks the
 * one-process behaviour; under `mpirun -np N` (tests/train_mpi.sh) the sums,
 * broadcast, agreement and comparison across N ranks.  A plain program, not
 * cmocka: every rank must run every check, in the same order. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/dist.h"

static int failures;

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "dist_test: rank %d: %s:%d: %s\n", tfm_dist_rank(), __FILE__,       \
                    __LINE__, #cond);                                                         \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

int main(void)
{
    tfm_dist_init();
    int r = tfm_dist_rank(), n = tfm_dist_size();
    CHECK(n >= 1 && r >= 0 && r < n);

    /* sums: rank r contributes (r + 1)·(i + 1), so the sum is (i + 1)·n(n+1)/2;
     * more than one MPI chunk would need 2^28 floats, too many for a test */
    enum { N = 1000 };
    float *x = malloc(N * sizeof *x);
    double d[3] = {r + 0.5, -r, 1};
    for (int i = 0; i < N; i++)
        x[i] = (float)((r + 1) * (i + 1));
    tfm_dist_sum_floats(x, N);
    tfm_dist_sum_doubles(d, 3);
    float tri = (float)n * (n + 1) / 2;
    for (int i = 0; i < N; i++)
        CHECK(x[i] == (float)(i + 1) * tri);
    CHECK(d[0] == (double)n * (n - 1) / 2 + 0.5 * n);
    CHECK(d[2] == n);
    tfm_dist_stat st;
    tfm_dist_stats(&st);
    CHECK(st.floats == (n > 1 ? N : 0) && st.wait_seconds >= 0);
    CHECK(st.buckets == (n > 1) && st.early == 0);

    /* the sum is the same bits on every rank */
    CHECK(tfm_dist_same(x, N * sizeof *x));

    /* broadcast: rank 0's bytes everywhere */
    char msg[32];
    snprintf(msg, sizeof msg, "from rank %d", r);
    tfm_dist_bcast(msg, sizeof msg);
    CHECK(!strcmp(msg, "from rank 0"));

    /* agreement: a flag on the last rank only is seen by all */
    CHECK(tfm_dist_any(r == n - 1) == 1);
    CHECK(tfm_dist_any(0) == 0);

    /* comparison: one float different on the last rank */
    for (int i = 0; i < N; i++)
        x[i] = (float)i;
    CHECK(tfm_dist_same(x, N * sizeof *x));
    if (r == n - 1)
        x[N / 2] += 1;
    CHECK(tfm_dist_same(x, N * sizeof *x) == (n == 1));
    /* and an odd length, the last bytes different */
    if (r == n - 1)
        ((char *)x)[4 * N - 3] ^= 1;
    CHECK(tfm_dist_same((char *)x + 4 * N - 5, 5) == (n == 1));

    /* buckets from the top, each at least 300 floats at these cuts, and
     * the first cut's own: [600, 1000), [250, 600), [100, 250), [0, 100);
     * with 0 every cut; with N the first cut's only */
    const size_t cuts[] = {100, 200, 250, 600, 990};
    tfm_dist_reduce *red = tfm_dist_reduce_new(x, N, cuts, 5, 300);
    size_t last = 0;
    CHECK(tfm_dist_reduce_buckets(red, &last) == 4 && last == 100);
    tfm_dist_reduce *each = tfm_dist_reduce_new(x, N, cuts, 5, 0);
    CHECK(tfm_dist_reduce_buckets(each, &last) == 6 && last == 100);
    tfm_dist_reduce_free(each);
    each = tfm_dist_reduce_new(x, N, cuts, 5, N);
    CHECK(tfm_dist_reduce_buckets(each, &last) == 2 && last == 100);
    tfm_dist_reduce_free(each);
    each = tfm_dist_reduce_new(x, N, NULL, 0, 0);
    CHECK(tfm_dist_reduce_buckets(each, &last) == 1 && last == N);
    tfm_dist_reduce_free(each);

    /* the bucketed sum: right, the same bits on every rank, and the same
     * bits whether the buckets start as parts become final or all at the
     * wait (values whose sum depends on the order of additions) */
    float *y = malloc(N * sizeof *y), *z = malloc(N * sizeof *z);
    for (int i = 0; i < N; i++)
        x[i] = (float)((r + 1) * (i + 1));
    tfm_dist_stats(&st);
    const size_t lows[] = {995, 700, 600, 599, 300, 250, 100, 0};
    for (int k = 0; k < 8; k++) {
        tfm_dist_reduce_ready(red, lows[k]);
        CHECK(k == 7 || x[0] == (float)(r + 1)); /* [0, 100) not started before lo 0 */
    }
    tfm_dist_reduce_wait(red);
    for (int i = 0; i < N; i++)
        CHECK(x[i] == (float)(i + 1) * tri);
    tfm_dist_stat st2;
    tfm_dist_stats(&st2);
    CHECK(st2.buckets - st.buckets == (n > 1 ? 4 : 0));
    CHECK(st2.early - st.early == (n > 1 ? 4 : 0));
    CHECK(st2.floats - st.floats == (n > 1 ? N : 0));
    CHECK(st2.span_seconds >= st.span_seconds);
    for (int i = 0; i < N; i++)
        x[i] = y[i] = (float)(r + 1) / (float)(i + 3) + 0.1f * (float)r;
    tfm_dist_reduce_ready(red, 650);
    tfm_dist_reduce_ready(red, 600); /* the top bucket only */
    tfm_dist_reduce_ready(red, 260);
    tfm_dist_reduce_wait(red);
    memcpy(z, x, N * sizeof *x);
    memcpy(x, y, N * sizeof *x);
    tfm_dist_reduce_wait(red);
    CHECK(!memcmp(x, z, N * sizeof *x));
    CHECK(tfm_dist_same(x, N * sizeof *x));
    tfm_dist_stats(&st);
    CHECK(st.early - st2.early == (n > 1 ? 1 : 0));
    tfm_dist_reduce_free(red);
    free(x);
    free(y);
    free(z);

    int ok = !tfm_dist_any(failures); /* all ranks report the same verdict */
    if (ok && r == 0)
        printf("dist_test: %d rank%s ok\n", n, n == 1 ? "" : "s");
    if (!ok)
        return 1; /* without finalize: the launcher ends the job */
    tfm_dist_finalize();
    return 0;
}
