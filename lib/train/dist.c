#include "train/dist.h"

#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/progress.h"

static int dist_rank = 0, dist_size = 1;
static tfm_dist_stat stats;

int tfm_dist_rank(void) { return dist_rank; }
int tfm_dist_size(void) { return dist_size; }

void tfm_dist_stats(tfm_dist_stat *s)
{
    *s = stats;
}

/* MPI counts are ints: large arrays go in pieces. */
#define CHUNK ((size_t)1 << 28)

struct tfm_dist_reduce {
    float *x;
    size_t n;
    size_t *lo;          /* bucket b is [lo[b], lo[b - 1]), lo[-1] = n: from the top */
    int nb;
    int started;         /* buckets started, from the top */
    void *req;           /* MPI_Request[n_req]: a bucket's pieces (CHUNK), in order */
    int n_req, req_started;
    int done;            /* every started bucket seen complete */
    double t_start;      /* the first bucket's start */
};

tfm_dist_reduce *tfm_dist_reduce_new(float *x, size_t n, const size_t *cuts, int n_cuts,
                                     size_t bucket_floats)
{
    tfm_dist_reduce *r = tfm_calloc(1, sizeof *r);
    r->x = x;
    r->n = n;
    r->lo = tfm_malloc(((size_t)n_cuts + 1) * sizeof *r->lo);
    size_t hi = n;
    for (int i = n_cuts - 1; i >= 0; i--) {
        TFM_ASSERT(cuts[i] <= n && (i == 0 || cuts[i - 1] <= cuts[i]));
        if (cuts[i] > 0 && cuts[i] < hi && (hi - cuts[i] >= bucket_floats || i == 0))
            r->lo[r->nb++] = hi = cuts[i];
    }
    if (hi > 0)
        r->lo[r->nb++] = 0;
    for (int b = 0; b < r->nb; b++) {
        size_t len = (b ? r->lo[b - 1] : n) - r->lo[b];
        r->n_req += (int)((len + CHUNK - 1) / CHUNK);
    }
    return r;
}

void tfm_dist_reduce_free(tfm_dist_reduce *r)
{
    if (!r)
        return;
    /* a sum still in flight (an error path) is left to MPI: the process
     * exits without entering it again, so nothing writes into x */
    free(r->lo);
    free(r->req);
    free(r);
}

int tfm_dist_reduce_buckets(const tfm_dist_reduce *r, size_t *last)
{
    if (last)
        *last = r->nb ? (r->nb > 1 ? r->lo[r->nb - 2] : r->n) : 0;
    return r->nb;
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

void tfm_dist_sum_floats(float *x, size_t n)
{
    if (dist_size == 1)
        return;
    double t0 = tfm_now();
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        MPI_Allreduce(MPI_IN_PLACE, x + i, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double dt = tfm_now() - t0;
    stats.wait_seconds += dt;
    stats.span_seconds += dt;
    stats.floats += (double)n;
    stats.buckets++;
}

/* Starts the next bucket from the top. */
static void start_bucket(tfm_dist_reduce *r)
{
    MPI_Request *req = r->req;
    int b = r->started++;
    size_t lo = r->lo[b], hi = b ? r->lo[b - 1] : r->n;
    if (b == 0)
        r->t_start = tfm_now();
    r->done = 0;
    for (size_t i = lo; i < hi; i += CHUNK) {
        size_t k = hi - i < CHUNK ? hi - i : CHUNK;
        MPI_Iallreduce(MPI_IN_PLACE, r->x + i, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                       &req[r->req_started++]);
    }
}

/* On entry to ready and wait: MPI_THREAD_FUNNELED holds, and the requests
 * exist (the plan above is made without MPI). */
static void enter(tfm_dist_reduce *r)
{
    int main_thread = 0;
    MPI_Is_thread_main(&main_thread);
    TFM_ASSERT(main_thread);
    if (!r->req)
        r->req = tfm_malloc((size_t)r->n_req * sizeof(MPI_Request));
}

void tfm_dist_reduce_ready(tfm_dist_reduce *r, size_t lo)
{
    if (dist_size == 1 || !r->nb)
        return;
    double t0 = tfm_now();
    enter(r);
    while (r->started < r->nb && r->lo[r->started] >= lo)
        start_bucket(r);
    if (r->req_started && !r->done) {
        int flag = 0;
        MPI_Testall(r->req_started, r->req, &flag, MPI_STATUSES_IGNORE);
        r->done = flag;
    }
    stats.wait_seconds += tfm_now() - t0;
}

void tfm_dist_reduce_wait(tfm_dist_reduce *r)
{
    if (dist_size == 1 || !r->nb)
        return;
    double t0 = tfm_now();
    enter(r);
    int early = r->started;
    while (r->started < r->nb)
        start_bucket(r);
    MPI_Waitall(r->req_started, r->req, MPI_STATUSES_IGNORE);
    double t1 = tfm_now();
    stats.wait_seconds += t1 - t0;
    stats.span_seconds += t1 - r->t_start;
    stats.floats += (double)r->n;
    stats.buckets += r->nb;
    stats.early += early;
    r->started = r->req_started = r->done = 0;
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
void tfm_dist_reduce_ready(tfm_dist_reduce *r, size_t lo) { (void)r; (void)lo; }
void tfm_dist_reduce_wait(tfm_dist_reduce *r) { (void)r; }
void tfm_dist_sum_doubles(double *x, size_t n) { (void)x; (void)n; }
void tfm_dist_bcast(void *buf, size_t bytes) { (void)buf; (void)bytes; }
int tfm_dist_any(int flag) { return flag != 0; }
int tfm_dist_same(const void *buf, size_t bytes) { (void)buf; (void)bytes; return 1; }

#endif
