/* Threads.  One knob for the whole suite: --threads N, else TFM_NUM_THREADS,
 * else the CPUs this process may use (affinity mask and CPU quota: taskset,
 * containers, systemd's CPUQuota).  Coarse parallel work (tokenizing chunks,
 * counting words) uses tfm_parallel_run; the numeric core uses OpenMP loops
 * and BLIS's own threads, set from the same number. */
#ifndef TFM_BASE_THREAD_H
#define TFM_BASE_THREAD_H

/* TFM_NUM_THREADS if set to a number in 1..1024, else tfm_cpus_available(). */
int tfm_threads_default(void);
/* TFM_NUM_THREADS if set to a number in 1..1024, else 0. */
int tfm_threads_env(void);
/* CPUs this process may run on: the affinity mask's count, lowered to a
 * cgroup CPU quota rounded up (v2 cpu.max, v1 cpu.cfs_quota_us, on the
 * process's cgroup or any ancestor); at least 1. */
int tfm_cpus_available(void);
/* The quota part, from a cgroup mount ROOT and a /proc/PID/cgroup file:
 * CPUs granted, rounded up, or 0 when there is no quota (for tests). */
int tfm_cgroup_cpu_limit(const char *root, const char *self_cgroup);

/* Runs fn(ctx, i, n) for i in [0, n) on n threads (the caller runs i = 0)
 * and waits for all of them. */
void tfm_parallel_run(int n, void (*fn)(void *ctx, int i, int n), void *ctx);

#endif
