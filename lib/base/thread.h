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

/* Threads to run now, out of want, on a machine that others share: while
 * other processes' runnable threads leave fewer than want CPUs free, only
 * as many as are free (at least 1), so that no thread of ours waits at a
 * barrier for one that has no CPU.  From the run queue (/proc/loadavg's
 * runnable count less this process's runnable threads), sampled at most
 * every 50 ms; call it from one thread, between parallel regions.  Only
 * for work whose results do not depend on the thread count. */
int tfm_threads_fair(int want);
/* Its rule: of online CPUs, those not taken by the running threads that are
 * not this process's mine, between 1 and want. */
int tfm_threads_fit(int want, int online, int running, int mine);

/* Runs fn(ctx, i, n) for i in [0, n) on n threads (the caller runs i = 0)
 * and waits for all of them. */
void tfm_parallel_run(int n, void (*fn)(void *ctx, int i, int n), void *ctx);

#endif
