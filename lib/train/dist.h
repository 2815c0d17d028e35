/* Data parallelism across processes: MPI ranks, for the training loop.
 *
 *     tfm_dist_init();                     // cmd: before training
 *     int r = tfm_dist_rank(), n = tfm_dist_size();
 *     ... each rank computes gradients of its share of the batch ...
 *     tfm_dist_sum_floats(m.grads, m.n_params);   // now the sum on every rank
 *     tfm_dist_finalize();                 // cmd: after a successful run
 *
 * or, overlapping the sum with backward (tfm_dist_reduce below):
 *
 *     tfm_dist_reduce *red = tfm_dist_reduce_new(m.grads, m.n_params, cuts, n_cuts, floats);
 *     ... backward calls tfm_dist_reduce_ready(red, lo) as grads[lo, n) become final ...
 *     tfm_dist_reduce_wait(red);           // now the sum on every rank
 *
 * Built without MPI (configure --with-mpi=no, or none found) every call is
 * trivial: rank 0 of 1.  Built with it, a process joins MPI only when a
 * launcher started it (mpirun, srun: OMPI_COMM_WORLD_SIZE, PMIX_RANK or
 * PMI_SIZE in the environment); a plain start stays one process and never
 * touches MPI, so single-process runs cost exactly what they did.
 *
 * Every collective (sum, a tfm_dist_reduce's buckets, bcast, any, same) must
 * be called by all ranks in the same order, from the thread that called
 * tfm_dist_init.  MPI errors abort
 * the whole job (MPI's default handler), and a rank that exits with an error
 * without tfm_dist_finalize makes the launcher end the others: a lost peer is
 * not recoverable, and a job hung in a collective is worse than a dead one.
 *
 * Results of tfm_dist_sum_* are bitwise the same on every rank (the MPI
 * reductions Open MPI uses compute each element once and share it, and
 * floating-point addition is commutative), so ranks that apply the same
 * update to the same parameters stay identical; tfm_dist_same checks it. */
#ifndef TFM_TRAIN_DIST_H
#define TFM_TRAIN_DIST_H

#include <stddef.h>

/* Joins MPI when launched by an MPI launcher; otherwise, or without MPI
 * support, does nothing.  Calling it again does nothing. */
void tfm_dist_init(void);
/* Leaves MPI (a collective: every rank calls it).  Only after success: a
 * failing rank exits without it, so that the launcher stops the job. */
void tfm_dist_finalize(void);

int tfm_dist_rank(void); /* 0 .. size - 1 */
int tfm_dist_size(void); /* 1 without MPI or when not launched by one */

/* x[i] = Σ over ranks of x[i], in place, on every rank. */
void tfm_dist_sum_floats(float *x, size_t n);
void tfm_dist_sum_doubles(double *x, size_t n);
/* Rank 0's bytes into buf on every rank. */
void tfm_dist_bcast(void *buf, size_t bytes);
/* 1 on every rank when flag is nonzero on any rank ("any rank stopped"). */
int tfm_dist_any(int flag);
/* 1 on every rank when buf holds the same bytes on every rank (compared by
 * a 64-bit hash of them). */
int tfm_dist_same(const void *buf, size_t bytes);

/* A sum of one float array across ranks in buckets, each started
 * (MPI_Iallreduce) as soon as backward has finished its part, as PyTorch's
 * DistributedDataParallel does.  The array is cut at offsets of cuts[]
 * (ascending; tensor boundaries): the last bucket is [0, cuts[0]), the part
 * backward finishes only at its end (the embeddings), and above it, from
 * the top down, a bucket closes at the first cut where it holds at least
 * bucket_floats (0: at every cut).  The plan depends only on the arguments, so every rank starts
 * the same buckets in the same order, whenever its own backward gets there.
 * Each bucket is summed as tfm_dist_sum_floats sums, so the result is the
 * same bits on every rank, and the same whether buckets start early or all
 * in tfm_dist_reduce_wait.  Without MPI or with one rank every call is
 * trivial.  Calls come from tfm_dist_init's thread (MPI_THREAD_FUNNELED),
 * which checks it. */
typedef struct tfm_dist_reduce tfm_dist_reduce;

tfm_dist_reduce *tfm_dist_reduce_new(float *x, size_t n, const size_t *cuts, int n_cuts,
                                     size_t bucket_floats);
void tfm_dist_reduce_free(tfm_dist_reduce *r);
/* x[lo, n) is final: starts the buckets that lie in it and have not
 * started, and lets the started ones progress (MPI_Testall: Open MPI moves
 * a nonblocking collective on only inside MPI calls).  lo never grows
 * between two waits. */
void tfm_dist_reduce_ready(tfm_dist_reduce *r, size_t lo);
/* Starts the buckets not started yet and waits for all: x is the sum.  The
 * next sum starts from nothing started. */
void tfm_dist_reduce_wait(tfm_dist_reduce *r);
/* Buckets in the plan, and in *last (may be NULL) the floats of the last
 * one, which starts only when backward ends (for reports and tests). */
int tfm_dist_reduce_buckets(const tfm_dist_reduce *r, size_t *last);

/* Since tfm_dist_init (all 0 when size is 1): */
typedef struct tfm_dist_stat {
    double wait_seconds; /* the caller held up by float sums: in tfm_dist_sum_floats
                            and in tfm_dist_reduce_ready and _wait (the exposed time) */
    double span_seconds; /* from each sum's first bucket started to the end of its
                            wait, summed: ≥ the sums' own time, equal to the wait
                            when nothing started early */
    double floats;       /* floats summed */
    long buckets;        /* buckets summed (a tfm_dist_sum_floats call is one) */
    long early;          /* of them, started before tfm_dist_reduce_wait */
} tfm_dist_stat;
void tfm_dist_stats(tfm_dist_stat *s);

#endif
