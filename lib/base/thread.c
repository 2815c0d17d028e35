#include "base/thread.h"
#include "base/err.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

int tfm_threads_default(void)
{
    const char *env = getenv("TFM_NUM_THREADS");
    if (env && *env) {
        long n = strtol(env, NULL, 10);
        if (n >= 1 && n <= 1024)
            return (int)n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n >= 1 ? (int)n : 1;
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
