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
    double sec, floats;
    tfm_dist_stats(&sec, &floats);
    CHECK(floats == (n > 1 ? N : 0) && sec >= 0);

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
    free(x);

    int ok = !tfm_dist_any(failures); /* all ranks report the same verdict */
    if (ok && r == 0)
        printf("dist_test: %d rank%s ok\n", n, n == 1 ? "" : "s");
    if (!ok)
        return 1; /* without finalize: the launcher ends the job */
    tfm_dist_finalize();
    return 0;
}
