/* Data parallelism over threads (replicas.h). */
#include "config.h"

#include "train/replicas.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "base/err.h"
#include "base/rng.h"
#include "tensor/gemm.h"

void tfm_replicas_init(tfm_replicas *r, tfm_model *m, int n)
{
    memset(r, 0, sizeof *r);
    r->m = m;
    if (n > TFM_MAX_REPLICAS) /* a cap for the per-step bookkeeping on the stack */
        n = TFM_MAX_REPLICAS;
    r->n = n > 1 ? n : 1;
    if (r->n <= 1)
        return;
    r->rep = tfm_calloc((size_t)r->n - 1, sizeof *r->rep);
    for (int k = 0; k < r->n - 1; k++)
        tfm_model_init_replica(&r->rep[k], m);
}

void tfm_replicas_free(tfm_replicas *r)
{
    for (int k = 0; k + 1 < r->n; k++)
        tfm_model_free(&r->rep[k]);
    free(r->rep);
    memset(r, 0, sizeof *r);
}

size_t tfm_replicas_bytes(const tfm_replicas *r)
{
    size_t bytes = 0;
    for (int k = 0; k + 1 < r->n; k++)
        bytes += tfm_model_bytes(&r->rep[k]);
    return bytes;
}

/* grads[lo, hi) += the first n - 1 replicas' grads, in replica order, and
 * theirs back to zero: each element gets the same sums however the range
 * is cut, so summing it in pieces during backward changes no bit.  Only
 * the trained tensors' runs (tfm_model_grad_span): a frozen tensor's
 * gradient is zero everywhere and its pages stay untouched. */
static void add_replicas(tfm_replicas *r, int n, size_t lo, size_t hi, int threads)
{
    float *grads = r->m->grads;
    size_t s0, s1;
    for (int row = 0; tfm_model_grad_span(r->m, &row, &s0, &s1);) {
        size_t a0 = s0 > lo ? s0 : lo, b0 = s1 < hi ? s1 : hi;
        if (a0 >= b0)
            continue;
        size_t chunk = 1 << 14, nchunks = (b0 - a0 + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
        for (size_t c = 0; c < nchunks; c++) {
            size_t a = a0 + c * chunk, b = a + chunk < b0 ? a + chunk : b0;
            for (int k = 0; k + 1 < n; k++) {
                float *g = r->rep[k].grads;
#pragma omp simd
                for (size_t i = a; i < b; i++)
                    grads[i] += g[i];
                memset(g + a, 0, (b - a) * sizeof *g);
            }
        }
    }
}

/* A replica's grads_ready: its backward's progress, for part 0's thread. */
static void replica_ready(void *ctx, size_t lo)
{
    __atomic_store_n((size_t *)ctx, lo, __ATOMIC_RELEASE);
}

/* The model's grads_ready during a step (part 0's thread): final where
 * every part is; the others run on meanwhile, and what they finish after
 * part 0's backward is added after the parallel region. */
static void model_ready(void *ctx, size_t lo)
{
    tfm_replicas *r = ctx;
    size_t all = lo;
    for (int k = 1; k < r->parts; k++) {
        size_t p = __atomic_load_n(&r->ready_lo[k], __ATOMIC_ACQUIRE);
        all = p > all ? p : all;
    }
    if (all < r->ready_lo[0]) {
        add_replicas(r, r->parts, all, r->ready_lo[0], 1);
        r->ready_lo[0] = all;
    }
    r->hook(r->hook_ctx, r->ready_lo[0]);
}

int tfm_replicas_forward_backward(tfm_replicas *r, const tfm_batch *batch, float scale,
                                  float *loss, tfm_err *err)
{
    tfm_model *m = r->m;
    int B = batch->B;
    int n = r->n < B ? r->n : B;
    if (n <= 1)
        return tfm_model_forward_backward_batch(m, batch, scale, loss, err);
    int given[TFM_HEAD_N], any = 0;
    float w[TFM_HEAD_N];
    tfm_batch_heads(batch, given, w);
    for (int h = 0; h < TFM_HEAD_N; h++)
        any |= given[h];
    TFM_ASSERT(any);
    /* checked once, for the whole batch, so that errors name its rows */
    if (tfm_batch_check(&m->cfg, batch, err) < 0)
        return -1;
    tfm_model *part[TFM_MAX_REPLICAS];
    int rows[TFM_MAX_REPLICAS], first[TFM_MAX_REPLICAS], rc[TFM_MAX_REPLICAS];
    long count[TFM_MAX_REPLICAS][TFM_HEAD_N];
    tfm_err errs[TFM_MAX_REPLICAS];
    TFM_ASSERT(n <= TFM_MAX_REPLICAS);
    for (int k = 0, r0 = 0; k < n; k++) {
        part[k] = k ? &r->rep[k - 1] : m;
        rows[k] = B / n + (k < B % n);
        first[k] = r0;
        r0 += rows[k];
        if (k) {
            part[k]->training = m->training;
            /* dropout streams: drawn from the model's rng, so a resumed run
             * (which restores it) draws the same */
            if (m->training && tfm_model_config_drops(&m->cfg))
                tfm_rng_seed(&part[k]->rng, tfm_rng_u64(&m->rng));
        }
    }
    long total[TFM_HEAD_N] = {0};
    /* grads_ready: part 0's thread adds in what every part has finished */
    for (int k = 0; k < n; k++)
        r->ready_lo[k] = m->n_params;
    for (int k = 1; k < n; k++) {
        part[k]->grads_ready = replica_ready;
        part[k]->grads_ready_ctx = &r->ready_lo[k];
    }
    r->parts = n;
    r->hook = m->grads_ready;
    r->hook_ctx = m->grads_ready_ctx;
    if (r->hook) {
        m->grads_ready = model_ready;
        m->grads_ready_ctx = r;
    }
    /* n parts always (they decide the sums); fewer threads take them in
     * turn while other jobs hold the CPUs (tfm_threads_now) */
    int team = tfm_threads_now();
    if (team > n)
        team = n;
#pragma omp parallel num_threads(team)
    {
#ifdef _OPENMP
        int k = omp_get_thread_num();
#else
        int k = 0;
#endif
        /* a team smaller than asked (OMP_THREAD_LIMIT, nesting): threads
         * take the parts in turn */
#ifdef _OPENMP
        int nt = omp_get_num_threads();
#else
        int nt = 1;
#endif
        for (int j = k; j < n; j += nt) {
            tfm_batch pb = tfm_batch_rows(batch, first[j], rows[j]);
            float l;
            rc[j] = tfm_model_forward_checked(part[j], &pb, &l, &errs[j]);
            const long *hc = rc[j] < 0 ? NULL : tfm_model_head_counts(part[j]);
            for (int h = 0; h < TFM_HEAD_N; h++)
                count[j][h] = hc ? hc[h] : 0;
        }
#pragma omp barrier
#pragma omp single
        {
            for (int h = 0; h < TFM_HEAD_N; h++) {
                for (int j = 0; j < n; j++)
                    total[h] += count[j][h];
                if (batch->head_total) /* a part of a larger batch */
                    total[h] = batch->head_total[h];
            }
        }
        float f[TFM_HEAD_N];
        tfm_head_factors(f, total, w, scale);
        for (int j = k; j < n; j += nt)
            if (rc[j] >= 0)
                tfm_model_backward_heads(part[j], f);
    }
    r->parts = 0;
    m->grads_ready = r->hook;
    m->grads_ready_ctx = r->hook_ctx;
    for (int k = 1; k < n; k++)
        part[k]->grads_ready = NULL;
    for (int k = 0; k < n; k++)
        if (rc[k] < 0) {
            *err = errs[k];
            return -1;
        }
    /* grads += each replica's, in replica order, for what backward did not
     * add in already (grads_ready) */
    add_replicas(r, n, 0, r->ready_lo[0], n);
    if (m->grads_ready)
        m->grads_ready(m->grads_ready_ctx, 0);
    tfm_model_parts_loss(m, part, n, count, total, given, w);
    if (loss)
        *loss = m->loss;
    return 0;
}
