/* All-reduce bandwidth and latency of train/dist.h between the ranks of an
 * MPI job (scripts/bench/mpi):
 *
 *     mpirun -np 2 scripts/bench/allreduce_bench [MB ...]
 *
 * For each size: the median time of tfm_dist_sum_floats over 20 calls (the
 * ranks lined up before each), and the bus bandwidth, 2(N-1)/N · bytes /
 * time: what each rank's link carries in a ring all-reduce, comparable across
 * rank counts.  Rank 0 prints "allreduce bytes=B ms=T busbw_gbs=G" lines. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/progress.h"
#include "train/dist.h"

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    tfm_dist_init();
    int n = tfm_dist_size();
    if (n < 2) {
        fprintf(stderr, "allreduce_bench: run it under mpirun -np N (N >= 2)\n");
        return 1;
    }
    static const char *const defaults[] = {"0.000004", "0.004", "4", "40"};
    int ns = argc > 1 ? argc - 1 : 4;
    enum { REPS = 20 };
    for (int s = 0; s < ns; s++) {
        double mb = atof(argc > 1 ? argv[s + 1] : defaults[s]);
        size_t count = (size_t)(mb * 1e6 / sizeof(float));
        if (count < 1)
            count = 1;
        float *x = calloc(count, sizeof *x);
        double t[REPS];
        for (int r = 0; r < REPS; r++) {
            tfm_dist_any(0); /* line up */
            double t0 = tfm_now();
            tfm_dist_sum_floats(x, count);
            t[r] = tfm_now() - t0;
        }
        qsort(t, REPS, sizeof *t, cmp);
        double med = t[REPS / 2], bytes = (double)count * sizeof(float);
        if (tfm_dist_rank() == 0)
            printf("allreduce bytes=%.0f ms=%.4f busbw_gbs=%.3f\n", bytes, 1000 * med,
                   2.0 * (n - 1) / n * bytes / med / 1e9);
        free(x);
    }
    tfm_dist_finalize();
    return 0;
}
