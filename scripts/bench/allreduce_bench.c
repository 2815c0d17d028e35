/* All-reduce bandwidth and latency of train/dist.h between the ranks of an
 * MPI job (scripts/bench/mpi):
 *
 *     mpirun -np 2 scripts/bench/allreduce_bench [MB ...]
 *
 * For each size: the median time of tfm_dist_sum_floats (MPI_Allreduce)
 * over 20 calls (the ranks lined up before each), and the bus bandwidth,
 * 2(N-1)/N · bytes / time: what each rank's link carries in a ring
 * all-reduce, comparable across rank counts; then the same for the
 * nonblocking sum training uses (tfm_dist_reduce, one bucket: MPI_Iallreduce
 * and MPI_Waitall, whose algorithms Open MPI picks separately).  Rank 0
 * prints "allreduce bytes=B ms=T busbw_gbs=G iallreduce_ms=T2
 * iallreduce_busbw_gbs=G2" lines. */
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
        tfm_dist_reduce *red = tfm_dist_reduce_new(x, count, NULL, 0, 0);
        double t[2][REPS];
        for (int r = 0; r < REPS; r++)
            for (int nb = 0; nb < 2; nb++) {
                tfm_dist_any(0); /* line up */
                double t0 = tfm_now();
                if (nb)
                    tfm_dist_reduce_wait(red);
                else
                    tfm_dist_sum_floats(x, count);
                t[nb][r] = tfm_now() - t0;
            }
        double med[2], bytes = (double)count * sizeof(float), bus = 2.0 * (n - 1) / n * bytes;
        for (int nb = 0; nb < 2; nb++) {
            qsort(t[nb], REPS, sizeof *t[nb], cmp);
            med[nb] = t[nb][REPS / 2];
        }
        if (tfm_dist_rank() == 0)
            printf("allreduce bytes=%.0f ms=%.4f busbw_gbs=%.3f iallreduce_ms=%.4f "
                   "iallreduce_busbw_gbs=%.3f\n", bytes, 1000 * med[0], bus / med[0] / 1e9,
                   1000 * med[1], bus / med[1] / 1e9);
        tfm_dist_reduce_free(red);
        free(x);
    }
    tfm_dist_finalize();
    return 0;
}
