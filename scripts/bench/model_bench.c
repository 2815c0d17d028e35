/* Micro-benchmark of the GPT core: milliseconds per forward+backward step
 * for a shape, and how much of BLIS's measured sgemm peak that is.
 *
 *   model_bench [-L layers] [-H heads] [-C width] [-T context] [-B batch]
 *             [-V vocab] [-n steps] [-t threads] [-r replicas] [--adamw]
 * Defaults: the char-small shape (4, 4, 128, 64, 12, 73).  --adamw adds a
 * plain AdamW update over all parameters to each step (the optimizer
 * itself lives in lib/train; this only estimates its memory traffic).
 * -r N: data-parallel over N replicas (train/replicas.h).
 * Prints to stdout: ms_per_step (median), gflops, gemm_peak_gflops,
 * efficiency, peak_rss_mib. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/opt.h"
#include "base/progress.h"
#include "base/rng.h"
#include "model/transformer.h"
#include "tensor/gemm.h"
#include "train/replicas.h"

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static long peak_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kib = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return kib;
}

/* sgemm GFLOP/s on a square product of the model's width, the best of a few. */
static double gemm_peak(int n)
{
    float *a = tfm_aligned_alloc((size_t)n * n * sizeof(float));
    float *b = tfm_aligned_alloc((size_t)n * n * sizeof(float));
    float *c = tfm_aligned_alloc((size_t)n * n * sizeof(float));
    for (size_t i = 0; i < (size_t)n * n; i++)
        a[i] = b[i] = 0.001f * (float)(i % 97);
    double best = 0.0;
    for (int r = 0; r < 5; r++) {
        double t0 = tfm_now();
        tfm_gemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = tfm_now() - t0;
        double g = 2.0 * n * n * n / dt / 1e9;
        best = g > best ? g : best;
    }
    free(a);
    free(b);
    free(c);
    return best;
}

int main(int argc, char **argv)
{
    const char *prog = "model_bench";
    tfm_model_config cfg;
    tfm_model_config_default(&cfg);
    cfg.n_layer = 4;
    cfg.n_head = 4;
    cfg.n_embd = 128;
    cfg.block_size = 64;
    cfg.vocab_size = 73;
    int B = 12, steps = 20, threads = 0, adamw = 0, replicas = 1;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (!strcmp(o, "--adamw")) {
            adamw = 1;
            continue;
        }
        if (i + 1 >= argc)
            tfm_usage_error(prog, "option %s needs a value", o);
        const char *v = argv[++i];
        if (!strcmp(o, "-L")) cfg.n_layer = (int)tfm_opt_long(prog, o, v, 1, 1000);
        else if (!strcmp(o, "-H")) cfg.n_head = (int)tfm_opt_long(prog, o, v, 1, 1024);
        else if (!strcmp(o, "-C")) cfg.n_embd = (int)tfm_opt_long(prog, o, v, 1, 65536);
        else if (!strcmp(o, "-T")) cfg.block_size = (int)tfm_opt_long(prog, o, v, 1, 1 << 20);
        else if (!strcmp(o, "-B")) B = (int)tfm_opt_long(prog, o, v, 1, 1 << 20);
        else if (!strcmp(o, "-V")) cfg.vocab_size = (int)tfm_opt_long(prog, o, v, 1, 1 << 24);
        else if (!strcmp(o, "-n")) steps = (int)tfm_opt_long(prog, o, v, 1, 1000000);
        else if (!strcmp(o, "-t")) threads = (int)tfm_opt_long(prog, o, v, 1, 1024);
        else if (!strcmp(o, "-r")) replicas = (int)tfm_opt_long(prog, o, v, 1, 64);
        else tfm_usage_error(prog, "unknown option %s", o);
    }
    tfm_blas_init(threads);
    int T = cfg.block_size;
    tfm_model m;
    tfm_err err = {0};
    if (tfm_model_init(&m, &cfg, &err) < 0)
        tfm_die(prog, &err);
    tfm_model_init_weights(&m, 1);
    tfm_replicas reps;
    tfm_replicas_init(&reps, &m, replicas);
    size_t N = (size_t)B * T;
    int32_t *x = tfm_malloc(2 * N * sizeof *x);
    tfm_rng r;
    tfm_rng_seed(&r, 2);
    for (size_t i = 0; i < 2 * N; i++)
        x[i] = (int32_t)tfm_rng_below(&r, cfg.vocab_size);
    float *mom = NULL, *var = NULL;
    if (adamw) {
        mom = tfm_aligned_alloc(m.n_params * sizeof(float));
        var = tfm_aligned_alloc(m.n_params * sizeof(float));
        memset(mom, 0, m.n_params * sizeof(float));
        memset(var, 0, m.n_params * sizeof(float));
    }
    double *ms = tfm_malloc((size_t)(steps + 1) * sizeof *ms);
    float loss = 0.0f;
    double cpu0 = 0.0;
    for (int s = 0; s <= steps; s++) {
        if (s == 1)
            cpu0 = cpu_now(); /* step 0 plans memory and warms up */
        double t0 = tfm_now();
        tfm_model_zero_grad(&m);
        tfm_batch b = {.inputs = x, .targets = x + N, .B = B, .T = T};
        if (tfm_replicas_forward_backward(&reps, &b, 1.0f, &loss, &err) < 0)
            tfm_die(prog, &err);
        if (adamw) {
            float *p = m.params, *g = m.grads;
#pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < m.n_params; i++) {
                mom[i] = 0.9f * mom[i] + 0.1f * g[i];
                var[i] = 0.99f * var[i] + 0.01f * g[i] * g[i];
                p[i] -= 1e-4f * (mom[i] / (sqrtf(var[i]) + 1e-8f) + 0.1f * p[i]);
            }
        }
        ms[s] = (tfm_now() - t0) * 1e3;
    }
    /* CPU time per step: on a shared, loaded machine the wall-clock median
     * mostly measures the other processes; CPU time (summed over threads,
     * spin-waits included) is the steadier figure of the work done. */
    double cpu_ms = (cpu_now() - cpu0) * 1e3 / steps;
    qsort(ms + 1, (size_t)steps, sizeof *ms, cmp_double);
    double med = ms[1 + steps / 2];
    double C = cfg.n_embd, L = cfg.n_layer, V = cfg.vocab_size, HS = C / cfg.n_head;
    double fwd = 2.0 * N * (12.0 * C * C) * L + 2.0 * N * C * V +
                 2.0 * 2.0 * B * cfg.n_head * (double)T * T * HS * L;
    double flops = 3.0 * fwd;
    double peak = gemm_peak(cfg.n_embd >= 512 ? cfg.n_embd : 512);
    double got = flops / (med / 1e3) / 1e9;
    printf("shape L=%d H=%d C=%d T=%d B=%d V=%d threads=%d replicas=%d%s\n", cfg.n_layer,
           cfg.n_head, cfg.n_embd, T, B, cfg.vocab_size, tfm_blas_threads(), replicas,
           adamw ? " +adamw" : "");
    printf("ms_per_step=%.2f (median of %d; min %.2f; cpu_ms_per_step=%.2f)\n", med, steps,
           ms[1], cpu_ms);
    printf("gflops=%.1f gemm_peak_gflops=%.1f efficiency=%.0f%%\n", got, peak,
           100.0 * got / peak);
    printf("loss=%.4f model_bytes=%zu peak_rss_mib=%.0f\n", loss, tfm_model_bytes(&m),
           peak_rss_kib() / 1024.0);
    free(ms);
    free(x);
    free(mom);
    free(var);
    tfm_replicas_free(&reps);
    tfm_model_free(&m);
    return 0;
}
