#include "base/thread.h"
#include "base/err.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The one or two numbers of a cgroup file (cpu.max, cpu.cfs_quota_us):
 * how many were read; "max" reads as -1. */
static int read_longs(const char *path, long *a, long *b)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return 0;
    char line[128];
    int n = 0;
    if (fgets(line, sizeof line, fp)) {
        if (strncmp(line, "max", 3) == 0) { /* cgroup v2: "max PERIOD" */
            *a = -1;
            n = 1 + (sscanf(line + 3, "%ld", b) == 1);
        } else {
            n = sscanf(line, "%ld %ld", a, b);
        }
    }
    fclose(fp);
    return n < 0 ? 0 : n;
}

/* CPUs a quota grants (rounded up), or 0 for none. */
static int quota_cpus(long quota, long period)
{
    if (quota <= 0 || period <= 0)
        return 0;
    long n = (quota + period - 1) / period;
    return n > 4096 ? 4096 : (int)n;
}

static int min_limit(int a, int b)
{
    return !a ? b : !b ? a : a < b ? a : b;
}

int tfm_cgroup_cpu_limit(const char *root, const char *self_cgroup)
{
    FILE *fp = fopen(self_cgroup, "r");
    if (!fp)
        return 0;
    char line[4096], dir[8192];
    int limit = 0;
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\n")] = 0;
        /* "ID:CONTROLLERS:PATH"; v2 is "0::PATH", v1 lists "cpu" */
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = 0;
        const char *ctl = c1 + 1, *path = c2 + 1;
        int v2 = !*ctl;
        if (!v2) {
            int cpu = 0;
            for (const char *p = ctl; *p;) {
                size_t n = strcspn(p, ",");
                cpu |= n == 3 && strncmp(p, "cpu", 3) == 0;
                p += n + (p[n] == ',');
            }
            if (!cpu)
                continue;
        }
        /* The quota may sit on any ancestor (the path is relative to the
         * mount when the container has its own cgroup namespace): walk up
         * to the root, under each possible mount point. */
        static const char *const v1_mounts[] = {"cpu", "cpu,cpuacct", "cpuacct,cpu"};
        for (int m = 0; m < (v2 ? 1 : 3); m++) {
            char base[4096];
            if (v2)
                snprintf(base, sizeof base, "%s", root);
            else
                snprintf(base, sizeof base, "%s/%s", root, v1_mounts[m]);
            char rel[4096];
            snprintf(rel, sizeof rel, "%s", path);
            for (;;) {
                long q = 0, p = 0;
                if (v2) {
                    snprintf(dir, sizeof dir, "%s%s/cpu.max", base, rel);
                    if (read_longs(dir, &q, &p) == 2)
                        limit = min_limit(limit, quota_cpus(q, p));
                } else {
                    snprintf(dir, sizeof dir, "%s%s/cpu.cfs_quota_us", base, rel);
                    if (read_longs(dir, &q, &p) >= 1) {
                        snprintf(dir, sizeof dir, "%s%s/cpu.cfs_period_us", base, rel);
                        long unused;
                        if (read_longs(dir, &p, &unused) >= 1)
                            limit = min_limit(limit, quota_cpus(q, p));
                    }
                }
                char *slash = strrchr(rel, '/');
                if (!slash || !*rel)
                    break;
                *slash = 0; /* "/a/b" -> "/a" -> "" (the mount itself) */
            }
        }
    }
    fclose(fp);
    return limit;
}

int tfm_cpus_available(void)
{
    static int cached;
    if (cached)
        return cached;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        n = CPU_COUNT(&set); /* taskset, cpuset cgroups, container pinning */
    if (n < 1)
        n = 1;
    int quota = tfm_cgroup_cpu_limit("/sys/fs/cgroup", "/proc/self/cgroup");
    if (quota && quota < n)
        n = quota;
    cached = (int)n;
    return cached;
}

int tfm_threads_env(void)
{
    const char *env = getenv("TFM_NUM_THREADS");
    if (env && *env) {
        long n = strtol(env, NULL, 10);
        if (n >= 1 && n <= 1024)
            return (int)n;
    }
    return 0;
}

int tfm_threads_default(void)
{
    int n = tfm_threads_env();
    return n ? n : tfm_cpus_available();
}
struct job {
    void (*fn)(void *, int, int);
    void *ctx;
    int i, n;
};

static void *job_main(void *p)
{
    struct job *j = p;
    j->fn(j->ctx, j->i, j->n);
    return NULL;
}

void tfm_parallel_run(int n, void (*fn)(void *ctx, int i, int n), void *ctx)
{
    if (n <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_t *th = tfm_calloc((size_t)n, sizeof *th);
    struct job *jobs = tfm_calloc((size_t)n, sizeof *jobs);
    int *started = tfm_calloc((size_t)n, sizeof *started);
    for (int i = 1; i < n; i++) {
        jobs[i] = (struct job){fn, ctx, i, n};
        started[i] = pthread_create(&th[i], NULL, job_main, &jobs[i]) == 0;
        if (!started[i])
            fn(ctx, i, n); /* no thread to spare: do its share here */
    }
    fn(ctx, 0, n);
    for (int i = 1; i < n; i++)
        if (started[i])
            pthread_join(th[i], NULL);
    free(started);
    free(jobs);
    free(th);
}

int tfm_threads_fit(int want, int online, int running, int mine)
{
    int others = running - mine;
    if (others < 0)
        others = 0;
    int fit = online - others;
    return fit < 1 ? 1 : fit > want ? want : fit;
}

/* Runnable threads on the machine now: the fourth field of /proc/loadavg
 * ("running/total", read at the moment, unlike the averages); -1 if
 * unreadable. */
static int machine_running(void)
{
    char b[128];
    FILE *fp = fopen("/proc/loadavg", "r");
    if (!fp)
        return -1;
    size_t n = fread(b, 1, sizeof b - 1, fp);
    fclose(fp);
    b[n] = 0;
    double l1, l5, l15;
    int running, total;
    return sscanf(b, "%lf %lf %lf %d/%d", &l1, &l5, &l15, &running, &total) == 5 ? running
                                                                                  : -1;
}

/* This process's threads in state R (running or waiting for a CPU). */
static int own_running(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[64], b[512];
        snprintf(path, sizeof path, "/proc/self/task/%.20s/stat", e->d_name);
        FILE *fp = fopen(path, "r");
        if (!fp)
            continue;
        size_t k = fread(b, 1, sizeof b - 1, fp);
        fclose(fp);
        b[k] = 0;
        /* "tid (comm) S ...": the state follows the last ')' */
        const char *p = strrchr(b, ')');
        n += p && p[1] == ' ' && p[2] == 'R';
    }
    closedir(d);
    return n;
}

int tfm_threads_fair(int want)
{
    /* one caller at a time (the main thread between parallel regions);
     * a sample every 50 ms (~40 µs of /proc reads: under 0.1%), and a
     * change only when two samples in a row
     * agree, so a passing process does not make the count flicker */
    static int current, proposed;
    static struct timespec last;
    if (want <= 1)
        return want;
    if (!current)
        current = want;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    long ms = (now.tv_sec - last.tv_sec) * 1000 + (now.tv_nsec - last.tv_nsec) / 1000000;
    if (ms < 50 && ms >= 0)
        return current > want ? want : current;
    last = now;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int running = machine_running(), mine = own_running();
    if (online < 1 || running < 0 || mine < 0)
        return want;
    int fit = tfm_threads_fit(want, (int)online, running, mine);
    if (fit != current && fit == proposed)
        current = fit;
    proposed = fit;
    return current > want ? want : current;
}
