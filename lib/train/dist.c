#include "train/dist.h"

#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/progress.h"

static int dist_rank = 0, dist_size = 1;
static double sum_seconds, sum_floats;

int tfm_dist_rank(void) { return dist_rank; }
int tfm_dist_size(void) { return dist_size; }

void tfm_dist_stats(double *seconds, double *floats)
{
    *seconds = sum_seconds;
    *floats = sum_floats;
}

#ifdef HAVE_MPI
#include <mpi.h>

/* FNV-style over 8-byte words: only compared between ranks, never stored. */
static uint64_t hash_bytes(const void *buf, size_t bytes)
{
    const unsigned char *b = buf;
    uint64_t h = 0xcbf29ce484222325ULL ^ bytes;
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t w = 0;
        memcpy(&w, b + i, bytes - i < 8 ? bytes - i : 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 31;
    }
    return h;
}

static int joined; /* MPI_Init done by us, not yet finalized */

/* A launcher's variables: Open MPI's mpirun, PMIx (Open MPI 5, srun
 * --mpi=pmix), PMI-1/2 (MPICH's hydra, srun --mpi=pmi2). */
static int launched(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        if (getenv(vars[i]))
            return 1;
    return 0;
}

void tfm_dist_init(void)
{
    int flag = 0;
    MPI_Initialized(&flag);
    if (flag || !launched())
        return;
    /* OpenMP threads compute; only the main thread calls MPI */
    int provided;
    MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &dist_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &dist_size);
    joined = 1;
}

void tfm_dist_finalize(void)
{
    if (!joined)
        return;
    MPI_Finalize();
    joined = 0;
    dist_rank = 0;
    dist_size = 1;
}

/* MPI counts are ints: large arrays go in pieces. */
#define CHUNK ((size_t)1 << 28)

void tfm_dist_sum_floats(float *x, size_t n)
{
    if (dist_size == 1)
        return;
    double t0 = tfm_now();
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        MPI_Allreduce(MPI_IN_PLACE, x + i, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    sum_seconds += tfm_now() - t0;
    sum_floats += (double)n;
}

void tfm_dist_sum_doubles(double *x, size_t n)
{
    if (dist_size == 1)
        return;
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        MPI_Allreduce(MPI_IN_PLACE, x + i, (int)k, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
}

void tfm_dist_bcast(void *buf, size_t bytes)
{
    if (dist_size == 1)
        return;
    for (size_t i = 0; i < bytes; i += CHUNK) {
        size_t k = bytes - i < CHUNK ? bytes - i : CHUNK;
        MPI_Bcast((char *)buf + i, (int)k, MPI_BYTE, 0, MPI_COMM_WORLD);
    }
}

int tfm_dist_any(int flag)
{
    if (dist_size == 1)
        return flag != 0;
    int in = flag != 0, out = 0;
    MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    return out;
}

int tfm_dist_same(const void *buf, size_t bytes)
{
    if (dist_size == 1)
        return 1;
    uint64_t h[2] = {hash_bytes(buf, bytes), 0}, lo, hi;
    h[1] = ~h[0];
    uint64_t out[2];
    /* min and max in one call: max of h and of ~h (= ~min h) */
    MPI_Allreduce(h, out, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    hi = out[0];
    lo = ~out[1];
    return lo == hi;
}

#else /* no MPI: one process */

void tfm_dist_init(void) {}
void tfm_dist_finalize(void) {}
void tfm_dist_sum_floats(float *x, size_t n) { (void)x; (void)n; }
void tfm_dist_sum_doubles(double *x, size_t n) { (void)x; (void)n; }
void tfm_dist_bcast(void *buf, size_t bytes) { (void)buf; (void)bytes; }
int tfm_dist_any(int flag) { return flag != 0; }
int tfm_dist_same(const void *buf, size_t bytes) { (void)buf; (void)bytes; return 1; }

#endif
