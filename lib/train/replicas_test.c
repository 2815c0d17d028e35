/* Data parallelism over threads (train/replicas.h): the parts' gradients
 * and losses are the whole batch's, and the model's grads_ready hook sees
 * their sum as backward goes. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "model/transformer.h"
#include "tensor/gemm.h"
#include "train/replicas.h"

static void small_config(tfm_model_config *cfg)
{
    tfm_model_config_default(cfg);
    cfg->n_layer = 2;
    cfg->n_head = 2;
    cfg->n_embd = 8;
    cfg->block_size = 6;
    cfg->vocab_size = 7;
}

/* Large random weights (transformer_test's), so every path matters. */
static void random_weights(tfm_model *m, uint64_t seed)
{
    tfm_rng r;
    tfm_rng_seed(&r, seed);
    for (int i = 0; i < m->n_table; i++) {
        const tfm_param *p = &m->table[i];
        float *w = m->params + p->offset;
        int ln_w = strstr(p->name, "ln_") && strstr(p->name, ".weight");
        for (size_t j = 0; j < p->numel; j++)
            w[j] = ln_w ? 1.0f + 0.2f * tfm_rng_normal(&r) : 0.4f * tfm_rng_normal(&r);
    }
}

/* Data parallelism splits the batch rows; the loss and the gradient of the
 * whole batch's mean are unchanged (up to summation order), parts of unequal
 * size and unequal counts of ignored targets included. */
static void test_data_parallel(void **state)
{
    (void)state;
    enum { B = 5, T = 6 };
    tfm_model_config cfg;
    small_config(&cfg);
    tfm_model m;
    tfm_err err = {0};
    assert_int_equal(tfm_model_init(&m, &cfg, &err), 0);
    random_weights(&m, 3);
    int32_t x[B * T], y[B * T];
    tfm_rng r;
    tfm_rng_seed(&r, 12);
    for (int i = 0; i < B * T; i++) {
        x[i] = (int32_t)tfm_rng_below(&r, cfg.vocab_size);
        y[i] = (int32_t)tfm_rng_below(&r, cfg.vocab_size);
    }
    y[1] = y[2] = y[T + 4] = -1; /* the first part counts fewer targets */
    float ref_loss, loss;
    tfm_model_zero_grad(&m);
    assert_int_equal(tfm_model_forward_backward(&m, x, y, B, T, 0.5f, &ref_loss, &err), 0);
    float *ref = malloc(m.n_params * sizeof(float));
    memcpy(ref, m.grads, m.n_params * sizeof(float));
    tfm_batch b = {.inputs = x, .targets = y, .B = B, .T = T};
    tfm_replicas rp = {0};
    for (int n = 2; n <= 3; n++) {
        tfm_replicas_free(&rp);
        tfm_replicas_init(&rp, &m, n);
        assert_int_equal(rp.n, n);
        tfm_model_zero_grad(&m);
        assert_int_equal(tfm_replicas_forward_backward(&rp, &b, 0.5f, &loss, &err), 0);
        assert_true(fabsf(loss - ref_loss) <= 1e-6f * fabsf(ref_loss));
        double worst = 0.0, norm = 0.0;
        for (size_t i = 0; i < m.n_params; i++) {
            double d = fabs((double)m.grads[i] - ref[i]);
            worst = d > worst ? d : worst;
            norm = fabs(ref[i]) > norm ? fabs(ref[i]) : norm;
        }
        assert_true(norm > 0.0);
        assert_true(worst <= 1e-5 * norm);
        for (int k = 0; k + 1 < n; k++)
            for (size_t i = 0; i < m.n_params; i++)
                assert_true(rp.rep[k].grads[i] == 0.0f);
        /* a bad id is reported for the whole batch's row */
        x[3 * T + 2] = cfg.vocab_size;
        assert_int_equal(tfm_replicas_forward_backward(&rp, &b, 1.0f, &loss, &err), -1);
        assert_non_null(strstr(err.msg, "batch row 3, position 2"));
        x[3 * T + 2] = 0;
    }
    /* with dropout the replicas' streams come from the model's rng: the
     * same rng state gives the same gradients */
    m.cfg.dropout = 0.3f;
    for (int k = 0; k + 1 < rp.n; k++)
        rp.rep[k].cfg.dropout = 0.3f;
    tfm_model_set_training(&m, 1);
    tfm_rng saved = m.rng;
    tfm_model_zero_grad(&m);
    assert_int_equal(tfm_replicas_forward_backward(&rp, &b, 1.0f, &loss, &err), 0);
    memcpy(ref, m.grads, m.n_params * sizeof(float));
    m.rng = saved;
    tfm_model_zero_grad(&m);
    float loss2;
    assert_int_equal(tfm_replicas_forward_backward(&rp, &b, 1.0f, &loss2, &err), 0);
    assert_true(loss2 == loss);
    assert_memory_equal(ref, m.grads, m.n_params * sizeof(float));
    tfm_replicas_free(&rp);
    tfm_replicas_init(&rp, &m, 1);
    assert_int_equal(rp.n, 1);
    tfm_replicas_free(&rp);
    free(ref);
    tfm_model_free(&m);
}

/* A batch in parts that know the whole batch's target counts
 * (tfm_batch.head_total, as MPI ranks run it): the parts' gradients and
 * losses add up to the whole's, for every head, when the parts hold
 * different shares of each head's targets. */
static void test_batch_parts(void **state)
{
    (void)state;
    enum { B = 5, T = 6 };
    const int lengths[B] = {6, 3, 5, 6, 2}, last[B] = {5, 2, 4, 5, 1};
    const int32_t labels[B] = {1, -1, 0, -1, 1}, s0[B] = {1, -1, 0, 2, 1}, e0[B] = {3, -1, 0, 4, 1};
    const float values[B] = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f};
    int32_t x[B * T], y[B * T], seg[B * T], tags[B * T];
    tfm_rng r;
    tfm_rng_seed(&r, 31);
    for (int i = 0; i < B * T; i++) {
        x[i] = (int32_t)tfm_rng_below(&r, 7);
        /* the first rows hold more LM targets than the last */
        y[i] = i < 2 * T || i % 4 == 0 ? (int32_t)tfm_rng_below(&r, 7) : -1;
        seg[i] = i % T >= T / 2;
        tags[i] = i % 3 ? (int32_t)tfm_rng_below(&r, 3) : -1;
    }
    for (int kind = 0; kind < 4; kind++) {
        tfm_model_config cfg;
        small_config(&cfg);
        tfm_batch b = {.inputs = x, .targets = y, .B = B, .T = T, .labels = labels};
        if (kind == 0) { /* GPT fine-tuning: the last token's class + 0.5·LM */
            cfg.n_classes = 2;
            b.cls_pos = last;
            b.lm_weight = 0.5f;
        } else { /* BERT: MLM + NSP; regression; tagger, span and classes */
            cfg.kind = TFM_KIND_ENCODER;
            cfg.ln = TFM_LN_POST;
            cfg.n_segments = 2;
            b.segments = seg;
            b.lengths = lengths;
            cfg.mlm_head = cfg.pooler = kind == 1;
            cfg.nsp = kind == 1;
            cfg.n_classes = kind == 2 ? 1 : 2;
            if (kind == 2) {
                b.labels = NULL;
                b.values = values;
            }
            if (kind == 3) {
                cfg.n_tags = 3;
                cfg.span = 1;
                b.targets = NULL;
                b.tags = tags;
                b.span_start = s0;
                b.span_end = e0;
            }
        }
        tfm_model m;
        tfm_err err = {0};
        assert_int_equal(tfm_model_init(&m, &cfg, &err), 0);
        random_weights(&m, 5);
        float *ref = malloc(m.n_params * sizeof(float));
        long total[TFM_HEAD_N];
        tfm_batch_counts(&cfg, &b, total);
        for (int n = 1; n <= 2; n++) {
            tfm_replicas rp;
            tfm_replicas_init(&rp, &m, n);
            float whole, l0, l1;
            tfm_model_zero_grad(&m);
            assert_int_equal(tfm_replicas_forward_backward(&rp, &b, 0.5f, &whole, &err), 0);
            memcpy(ref, m.grads, m.n_params * sizeof(float));
            tfm_model_zero_grad(&m);
            tfm_batch p0 = tfm_batch_rows(&b, 0, 2), p1 = tfm_batch_rows(&b, 2, 3);
            p0.head_total = p1.head_total = total;
            assert_int_equal(tfm_replicas_forward_backward(&rp, &p0, 0.5f, &l0, &err), 0);
            assert_int_equal(tfm_replicas_forward_backward(&rp, &p1, 0.5f, &l1, &err), 0);
            tfm_replicas_free(&rp);
            if (!(fabsf(l0 + l1 - whole) <= 1e-5f * fabsf(whole)))
                fail_msg("kind %d, %d replicas: parts' losses %g + %g, the whole's %g", kind, n,
                         l0, l1, whole);
            double worst = 0.0, norm = 0.0;
            for (size_t i = 0; i < m.n_params; i++) {
                double d = fabs((double)m.grads[i] - ref[i]);
                worst = d > worst ? d : worst;
                norm = fabs(ref[i]) > norm ? fabs(ref[i]) : norm;
            }
            if (!(norm > 0.0 && worst <= 1e-5 * norm))
                fail_msg("kind %d, %d replicas: parts' gradients off by %g (largest %g)", kind,
                         n, worst, norm);
        }
        free(ref);
        tfm_model_free(&m);
    }
}

/* grads_ready's record of one backward: each call's lo, and a copy of
 * grads[lo, n_params) as it was then. */
typedef struct ready_log {
    tfm_model *m;
    int n;
    size_t lo[256];
    float *copy[256];
    pthread_t thread;
    int other_thread;
} ready_log;

static void log_ready(void *ctx, size_t lo)
{
    ready_log *r = ctx;
    if (!pthread_equal(pthread_self(), r->thread))
        r->other_thread = 1;
    assert_true(r->n < 256);
    r->lo[r->n] = lo;
    r->copy[r->n] = malloc((r->m->n_params - lo) * sizeof(float) + 1);
    memcpy(r->copy[r->n], r->m->grads + lo, (r->m->n_params - lo) * sizeof(float));
    r->n++;
}

/* The all-reduce's hook (tfm_model.grads_ready, with replicas): whatever it is told is
 * final stays so to the end of backward; lo falls to 0 in steps, one or
 * more a block, so that a sum can start before backward ends; the calls
 * come on the caller's thread, replicas or not; and the gradients are
 * those of a backward without the hook, bit for bit. */
static void test_grads_ready(void **state)
{
    (void)state;
    enum { B = 5, T = 6, S = 4 };
    const int lengths[B] = {6, 3, 5, 6, 2};
    const int32_t labels[B] = {1, 0, 0, 1, 1};
    int32_t x[B * T], y[B * T], seg[B * T], src[B * S];
    tfm_rng r;
    tfm_rng_seed(&r, 21);
    for (int i = 0; i < B * T; i++) {
        x[i] = (int32_t)tfm_rng_below(&r, 7);
        y[i] = i % 3 ? -1 : (int32_t)tfm_rng_below(&r, 7);
        seg[i] = i % T >= T / 2;
    }
    for (int i = 0; i < B * S; i++)
        src[i] = (int32_t)tfm_rng_below(&r, 7);
    for (int kind = 0; kind < 6; kind++) {
        tfm_model_config cfg;
        small_config(&cfg);
        cfg.n_layer = 3;
        tfm_batch b = {.inputs = x, .targets = y, .B = B, .T = T};
        if (kind == 1) { /* post-LN, untied, no biases */
            cfg.ln = TFM_LN_POST;
            cfg.tie_embeddings = 0;
            cfg.bias = 0;
        } else if (kind == 2) { /* BERT: MLM + NSP */
            cfg.kind = TFM_KIND_ENCODER;
            cfg.ln = TFM_LN_POST;
            cfg.n_segments = 2;
            cfg.emb_norm = 1;
            cfg.mlm_head = cfg.pooler = cfg.nsp = 1;
            cfg.n_classes = 2;
            b.segments = seg;
            b.lengths = lengths;
            b.labels = labels;
        } else if (kind == 5) { /* T5-like with adapters everywhere */
            cfg.kind = TFM_KIND_ENCODER_DECODER;
            cfg.n_enc_layer = 2;
            cfg.ffn = TFM_FFN_GEGLU;
            cfg.lora_r = 2;
            cfg.lora_alpha = 4;
            cfg.lora_dropout = 0.1f;
            cfg.lora_targets = 63;
            b.src = src;
            b.S = S;
        } else if (kind >= 3) { /* the original Transformer, and pre-LN with T5 */
            cfg.kind = TFM_KIND_ENCODER_DECODER;
            cfg.n_enc_layer = 2;
            cfg.ln = kind == 3 ? TFM_LN_POST : TFM_LN_PRE;
            cfg.pos = kind == 3 ? TFM_POS_SINUSOIDAL : TFM_POS_T5;
            cfg.t5_buckets = 8;
            cfg.t5_max_distance = 16;
            b.src = src;
            b.S = S;
        }
        tfm_model m;
        tfm_err err = {0};
        assert_int_equal(tfm_model_init(&m, &cfg, &err), 0);
        random_weights(&m, 4);
        float *ref = malloc(m.n_params * sizeof(float));
        for (int n = 1; n <= 3; n++) {
            tfm_replicas rp;
            tfm_replicas_init(&rp, &m, n);
            float loss;
            tfm_model_zero_grad(&m);
            assert_int_equal(tfm_replicas_forward_backward(&rp, &b, 0.5f, &loss, &err), 0);
            memcpy(ref, m.grads, m.n_params * sizeof(float));
            ready_log log = {.m = &m, .thread = pthread_self()};
            m.grads_ready = log_ready;
            m.grads_ready_ctx = &log;
            tfm_model_zero_grad(&m);
            assert_int_equal(tfm_replicas_forward_backward(&rp, &b, 0.5f, &loss, &err), 0);
            m.grads_ready = NULL;
            tfm_replicas_free(&rp);
            assert_memory_equal(ref, m.grads, m.n_params * sizeof(float));
            assert_false(log.other_thread);
            assert_true(log.n > 0 && log.lo[log.n - 1] == 0);
            int steps = 0;
            size_t lowest = m.n_params; /* above 0 */
            for (int i = 0; i < log.n; i++) {
                if (log.lo[i])
                    lowest = log.lo[i];
                if (i && log.lo[i] > log.lo[i - 1])
                    fail_msg("kind %d, %d replicas: lo %zu after %zu", kind, n, log.lo[i],
                             log.lo[i - 1]);
                steps += i && log.lo[i] < log.lo[i - 1];
                if (memcmp(log.copy[i], m.grads + log.lo[i],
                           (m.n_params - log.lo[i]) * sizeof(float)))
                    fail_msg("kind %d, %d replicas: grads[%zu, ...) changed after the call",
                             kind, n, log.lo[i]);
                free(log.copy[i]);
            }
            /* one backward alone: a step a block at least (with replicas
             * part 0 may run ahead of the others, and they all come last) */
            int blocks = cfg.n_layer + tfm_model_config_enc_layers(&cfg);
            if (n == 1 && steps < blocks)
                fail_msg("kind %d: %d steps of lo for %d blocks", kind, steps, blocks);
            /* and all the blocks are final before the embeddings */
            if (n == 1 && lowest != tfm_model_blocks_offset(&m))
                fail_msg("kind %d: lo %zu before 0, the first block at %zu", kind, lowest,
                         tfm_model_blocks_offset(&m));
        }
        free(ref);
        tfm_model_free(&m);
    }
}

static void no_hook(void *ctx, size_t lo)
{
    (void)ctx;
    (void)lo;
}

/* LoRA with replicas: the sum of the parts' trained gradients is the
 * whole batch's (summed at the end, or in pieces during backward through
 * grads_ready, to the same bits), and neither the model's nor a replica's
 * frozen gradient pages ever become resident. */
static void test_lora_replicas(void **state)
{
    (void)state;
    enum { B = 5, T = 6 };
    tfm_model_config cfg;
    small_config(&cfg);
    cfg.n_embd = 64;
    cfg.n_head = 4;
    cfg.vocab_size = 300;
    cfg.lora_r = 2;
    cfg.lora_alpha = 4;
    cfg.lora_targets = TFM_LORA_Q | TFM_LORA_V;
    tfm_model m;
    tfm_err err = {0};
    assert_int_equal(tfm_model_init(&m, &cfg, &err), 0);
    random_weights(&m, 5);
    int32_t x[B * T], y[B * T];
    for (int i = 0; i < B * T; i++) {
        x[i] = (i * 37 + 5) % 300;
        y[i] = (i * 53 + 11) % 300;
    }
    /* the reference: the whole batch in one model of the same weights
     * (reading m's frozen floats would map pages, if only the zero page) */
    tfm_model one;
    assert_int_equal(tfm_model_init(&one, &cfg, &err), 0);
    memcpy(one.params, m.params, m.n_params * sizeof(float));
    float ref_loss, loss;
    assert_int_equal(tfm_model_forward_backward(&one, x, y, B, T, 1.0f, &ref_loss, &err), 0);
    const float *ref = one.grads;
    float *hooked = malloc(m.n_params * sizeof(float));
    tfm_batch b = {.inputs = x, .targets = y, .B = B, .T = T};
    tfm_replicas rp;
    tfm_replicas_init(&rp, &m, 3);
    assert_int_equal(rp.n, 3);
    size_t res, lo, hi;
    for (int hook = 0; hook < 2; hook++) {
        m.grads_ready = hook ? no_hook : NULL;
        for (int step = 0; step < 2; step++) {
            tfm_model_zero_grad(&m);
            assert_int_equal(tfm_replicas_forward_backward(&rp, &b, 1.0f, &loss, &err), 0);
        }
        m.grads_ready = NULL;
        assert_true(fabsf(loss - ref_loss) <= 1e-6f * fabsf(ref_loss));
        double worst = 0.0, norm = 0.0;
        for (int row = 0; tfm_model_grad_span(&m, &row, &lo, &hi);)
            for (size_t i = lo; i < hi; i++) {
                double d = fabs((double)m.grads[i] - ref[i]);
                worst = d > worst ? d : worst;
                norm = fabs(ref[i]) > norm ? fabs(ref[i]) : norm;
                for (int k = 0; k + 1 < rp.n; k++)
                    assert_true(rp.rep[k].grads[i] == 0.0f);
            }
        assert_true(norm > 0.0);
        assert_true(worst <= 1e-5 * norm);
        assert_true(tfm_model_frozen_pages(&m, m.grads, &res) > 100);
        assert_int_equal(res, 0);
        for (int k = 0; k + 1 < rp.n; k++) {
            tfm_model_frozen_pages(&rp.rep[k], rp.rep[k].grads, &res);
            assert_int_equal(res, 0);
        }
        for (int row = 0; tfm_model_grad_span(&m, &row, &lo, &hi);) {
            if (hook)
                assert_memory_equal(hooked + lo, m.grads + lo, (hi - lo) * sizeof(float));
            memcpy(hooked + lo, m.grads + lo, (hi - lo) * sizeof(float));
        }
    }
    for (size_t i = 0; i < m.n_params; i++) /* the frozen ones: 0, as the reference's */
        if (ref[i] == 0.0f)
            assert_true(m.grads[i] == 0.0f);
    tfm_replicas_free(&rp);
    free(hooked);
    tfm_model_free(&one);
    tfm_model_free(&m);
}

int main(void)
{
    tfm_blas_init(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_parallel),
        cmocka_unit_test(test_batch_parts),
        cmocka_unit_test(test_grads_ready),
        cmocka_unit_test(test_lora_replicas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
