/* Times the library's embedding path for scripts/bench/embed, the model
 * loaded once (as the baselines measure only inference):
 *
 *   embed_bench MODEL LINES REPEATS THREADS [VECS]   one JSON line: the
 *       median and the least ms of tfm_embedder_run over every line of
 *       LINES (last layer, mean pooling, the default token budget), tokens,
 *       FLOPs of the real tokens, peak RSS, a hash of the token ids (runs
 *       of one text on two files of one model agree on it); VECS: the last run's vectors
 *       written there as raw float32 [lines, width] (the bench's cosines)
 *   embed_bench peak THREADS                  sgemm GFLOP/s at 2048³ (tfm_gemm)
 *       and BLIS's kernel family
 *   embed_bench gemm THREADS                  ms of BERT-base's four weight
 *       products at 128 to 4096 rows: BLIS's own call (tfm_gemm) against
 *       the packed panels (tfm_gemm_packed_ex forced to them), and the path
 *       tfm_gemm_packed chose for the shape; first a line with BLIS's
 *       kernel family
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/buf.h"
#include "base/file.h"
#include "base/progress.h"
#include "infer/embed.h"
#include "lm/lm.h"
#include "tensor/gemm.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int peak(int threads)
{
    tfm_blas_init(threads);
    const int n = 2048;
    float *a = tfm_aligned_alloc(sizeof(float) * n * n), *b = tfm_aligned_alloc(sizeof(float) * n * n),
          *c = tfm_aligned_alloc(sizeof(float) * n * n);
    for (size_t i = 0; i < (size_t)n * n; i++)
        a[i] = b[i] = (float)(i % 7) * 0.1f;
    tfm_gemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = tfm_now();
        tfm_gemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double g = 2.0 * n * n * n / (tfm_now() - t0) / 1e9;
        best = g > best ? g : best;
    }
    printf("{\"sgemm_gflops\": %.1f, \"kernels\": \"%s\"}\n", best, tfm_blas_kernels());
    free(a); free(b); free(c);
    return 0;
}

/* Median ms of 15 products of each shape, BLIS packing the weight each
 * time and packed once, taking turns. */
static int gemm_shapes(int threads)
{
    tfm_blas_init(threads);
    printf("{\"kernels\": \"%s\", \"threads\": %d}\n", tfm_blas_kernels(), threads);
    static const int shapes[][2] = {{768, 2304}, {768, 768}, {768, 3072}, {3072, 768}};
    static const int rows[] = {128, 256, 512, 1024, 4096};
    enum { REPS = 15 };
    for (size_t m = 0; m < sizeof rows / sizeof rows[0]; m++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const int M = rows[m], K = shapes[s][0], N = shapes[s][1];
            float *a = tfm_aligned_alloc(sizeof(float) * M * K), *b = tfm_aligned_alloc(sizeof(float) * K * N),
                  *c = tfm_aligned_alloc(sizeof(float) * M * N);
            for (size_t i = 0; i < (size_t)M * K; i++)
                a[i] = (float)(i % 13) * 0.01f;
            for (size_t i = 0; i < (size_t)K * N; i++)
                b[i] = (float)(i % 11) * 0.01f;
            tfm_gemm_b p;
            tfm_gemm_b_pack(&p, b, N, K, N);
            tfm_gemm_packed(M, a, K, &p, c, N, NULL, NULL); /* times both, once */
            /* the thread count it ran on: fewer than asked while other
             * jobs hold the CPUs (tfm_threads_now) */
            char chose[64] = "";
            for (int t = 1; t <= threads; t++) {
                const tfm_gemm_path path = tfm_gemm_packed_choice(M, K, N, t);
                if (path != TFM_GEMM_AUTO)
                    snprintf(chose + strlen(chose), sizeof chose - strlen(chose), "%s%s%s",
                             *chose ? ", " : "", path == TFM_GEMM_BLIS ? "blis" : "packed",
                             t == threads ? "" : t == 1 ? " on 1 thread" : " on fewer threads");
            }
            double ms[2][REPS];
            for (int r = -1; r < REPS; r++)
                for (int packed = 0; packed < 2; packed++) {
                    double t0 = tfm_now();
                    if (packed)
                        tfm_gemm_packed_ex(M, a, K, &p, c, N, NULL, NULL, TFM_GEMM_PACKED);
                    else
                        tfm_gemm(0, 0, M, N, K, 1.0f, a, K, b, N, 0.0f, c, N);
                    if (r >= 0)
                        ms[packed][r] = (tfm_now() - t0) * 1e3;
                }
            qsort(ms[0], REPS, sizeof(double), cmp_double);
            qsort(ms[1], REPS, sizeof(double), cmp_double);
            double gf = 2.0 * M * N * K / 1e6;
            printf("{\"M\": %d, \"K\": %d, \"N\": %d, \"blis_ms\": %.3f, \"packed_ms\": %.3f, "
                   "\"blis_gflops\": %.1f, \"packed_gflops\": %.1f, \"chosen\": \"%s\"}\n",
                   M, K, N, ms[0][REPS / 2], ms[1][REPS / 2], gf / ms[0][REPS / 2],
                   gf / ms[1][REPS / 2], chose);
            tfm_gemm_b_free(&p);
            free(a); free(b); free(c);
        }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "peak"))
        return peak(atoi(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "gemm"))
        return gemm_shapes(atoi(argv[2]));
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: embed_bench MODEL LINES REPEATS THREADS [VECS] | peak THREADS | "
                        "gemm THREADS\n");
        return 2;
    }
    int repeats = atoi(argv[3]);
    tfm_blas_init(atoi(argv[4]));
    tfm_err err = {0};
    tfm_lm lm;
    if (tfm_lm_open(&lm, argv[1], &err) < 0 || !lm.tok) {
        fprintf(stderr, "embed_bench: %s\n", lm.tok ? err.msg : "no tokenizer");
        return 1;
    }
    FILE *fp = fopen(argv[2], "rb");
    if (!fp) {
        perror(argv[2]);
        return 1;
    }
    tfm_tok_scratch *sc = tfm_tok_scratch_new(lm.tok);
    tfm_ids ids = {0};
    tfm_buf seg = {0}, line = {0};
    size_t *off = NULL;
    int *len = NULL, n = 0;
    double flops = 0;
    while (tfm_getline(fp, &line) > 0) {
        off = tfm_realloc(off, sizeof *off * (n + 1));
        len = tfm_realloc(len, sizeof *len * (n + 1));
        off[n] = ids.len;
        len[n] = (int)tfm_embed_encode(lm.tok, sc, line.data ? line.data : "", line.len, NULL, 0, 0,
                                       &ids, &seg);
        flops += tfm_fwd_flops(&lm.cfg, tfm_embedder_layers(&lm.cfg), len[n]);
        n++;
    }
    fclose(fp);
    tfm_embed_opts o;
    tfm_embed_opts_default(&o, &lm.cfg);
    tfm_embedder e;
    if (tfm_embedder_init(&e, &lm.cfg, &lm.w, &o, &err) < 0) {
        fprintf(stderr, "embed_bench: %s\n", err.msg);
        return 1;
    }
    float *out = tfm_malloc(sizeof(float) * (size_t)n * e.W);
    tfm_embed_input in = {.n = n, .tok = ids.data, .seg = (const uint8_t *)seg.data,
                          .off = off, .len = len};
    double *ms = tfm_malloc(sizeof(double) * (size_t)(repeats + 1));
    for (int r = -1; r < repeats; r++) { /* one warm-up run */
        double t0 = tfm_now();
        if (tfm_embedder_run(&e, &in, out, &err) < 0) {
            fprintf(stderr, "embed_bench: %s\n", err.msg);
            return 1;
        }
        if (r >= 0)
            ms[r] = (tfm_now() - t0) * 1e3;
    }
    qsort(ms, (size_t)repeats, sizeof *ms, cmp_double);
    uint32_t hash = 2166136261u; /* FNV-1a over the ids and the sentences' lengths */
    for (size_t i = 0; i < ids.len; i++)
        hash = (hash ^ (uint32_t)ids.data[i]) * 16777619u;
    for (int i = 0; i < n; i++)
        hash = (hash ^ (uint32_t)len[i]) * 16777619u;
    if (argc == 6) {
        FILE *vf = fopen(argv[5], "wb");
        size_t nv = (size_t)n * e.W;
        if (!vf || fwrite(out, sizeof(float), nv, vf) != nv || fclose(vf) != 0) {
            perror(argv[5]);
            return 1;
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"ms\": %.3f, \"min_ms\": %.3f, \"sentences\": %d, \"tokens\": %zu, \"gflop\": %.4f, "
           "\"peak_rss_mb\": %.1f, \"check\": %.6g, \"ids_hash\": %u}\n",
           ms[repeats / 2], ms[0], n, ids.len, flops / 1e9, ru.ru_maxrss / 1024.0, (double)out[0],
           (unsigned)hash);
    free(ms);
    free(out);
    tfm_embedder_free(&e);
    tfm_ids_free(&ids);
    tfm_buf_free(&seg);
    tfm_buf_free(&line);
    free(off);
    free(len);
    tfm_tok_scratch_free(sc);
    tfm_lm_close(&lm);
    return 0;
}
