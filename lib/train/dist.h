/* Data parallelism across processes: MPI ranks, for the training loop.
 *
 *     tfm_dist_init();                     // cmd: before training
 *     int r = tfm_dist_rank(), n = tfm_dist_size();
 *     ... each rank computes gradients of its share of the batch ...
 *     tfm_dist_sum_floats(m.grads, m.n_params);   // now the sum on every rank
 *     tfm_dist_finalize();                 // cmd: after a successful run
 *
 * Built without MPI (configure --with-mpi=no, or none found) every call is
 * trivial: rank 0 of 1.  Built with it, a process joins MPI only when a
 * launcher started it (mpirun, srun: OMPI_COMM_WORLD_SIZE, PMIX_RANK or
 * PMI_SIZE in the environment); a plain start stays one process and never
 * touches MPI, so single-process runs cost exactly what they did.
 *
 * Every collective (sum, bcast, any, same) must be called by all ranks in the
 * same order, from the thread that called tfm_dist_init.  MPI errors abort
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

/* Seconds spent in tfm_dist_sum_floats and floats summed there since
 * tfm_dist_init (0 when size is 1). */
void tfm_dist_stats(double *sum_seconds, double *sum_floats);

#endif
