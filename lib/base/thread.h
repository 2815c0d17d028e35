/* Threads.  One knob for the whole suite: --threads N, else TFM_NUM_THREADS,
 * else the number of online cores.  Coarse parallel work (tokenizing chunks,
 * counting words) uses tfm_parallel_run; the numeric core uses OpenMP loops
 * and BLIS's own threads, set from the same number. */
#ifndef TFM_BASE_THREAD_H
#define TFM_BASE_THREAD_H

int tfm_threads_default(void);

/* Runs fn(ctx, i, n) for i in [0, n) on n threads (the caller runs i = 0)
 * and waits for all of them. */
void tfm_parallel_run(int n, void (*fn)(void *ctx, int i, int n), void *ctx);

#endif
