/* Beam search (infer/beam.h) stepping through the KV cache (model/decode.h)
 * and through a step function that recomputes every hypothesis from scratch
 * with the training forward (model/transformer.h): the same hypotheses, in
 * the same order, with the same scores.  (Moved from model/decode_test.c:
 * a test of the model layer may not use infer/.) */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/rng.h"
#include "infer/beam.h"
#include "infer/sample.h"
#include "model/decode.h"
#include "model/transformer.h"
#include "tensor/gemm.h"

/* A small model with weights large enough that the next token is rarely a
 * near tie (GPT-2's 0.02 init gives almost flat logits): model/decode_test.c's,
 * learned positions. */
static void make_model(tfm_model *m, tfm_ln_place ln, int tied, int bias, int V)
{
    tfm_model_config c;
    tfm_model_config_default(&c);
    c.pos = TFM_POS_LEARNED;
    c.norm = TFM_NORM_LAYER;
    c.ffn = TFM_FFN_PLAIN;
    c.attn_unscaled = 0;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 32;
    c.block_size = 48;
    c.vocab_size = V;
    c.ln = ln;
    c.tie_embeddings = tied;
    c.bias = bias;
    tfm_err err = {0};
    assert_int_equal(tfm_model_init(m, &c, &err), 0);
    tfm_model_init_weights(m, 1234 + ln * 10 + tied * 3 + bias);
    tfm_rng r;
    tfm_rng_seed(&r, 99);
    for (int i = 0; i < m->n_table; i++) {
        tfm_param *p = &m->table[i];
        for (size_t j = 0; j < p->numel; j++) {
            float *v = &m->params[p->offset + j];
            if (p->ndim == 2)
                *v *= 20.0f;
            else if (strstr(p->name, "bias"))
                *v = 0.1f * tfm_rng_normal(&r);
            else
                *v = 1.0f + 0.1f * tfm_rng_normal(&r);
        }
    }
}

/* Next-token logits of seq[0..n) by the training forward. */
static void full_logits(tfm_model *m, const uint32_t *seq, int n, float *out)
{
    int32_t *in = malloc(sizeof *in * n);
    for (int i = 0; i < n; i++)
        in[i] = (int32_t)seq[i];
    tfm_err err = {0};
    assert_int_equal(tfm_model_forward(m, in, NULL, 1, n, NULL, &err), 0);
    memcpy(out, tfm_model_logits(m) + (size_t)(n - 1) * m->cfg.vocab_size,
           sizeof(float) * m->cfg.vocab_size);
    free(in);
}

typedef struct full_ctx {
    tfm_model *m;
    uint32_t hist[8][64];
    int len[8];
} full_ctx;

static int full_step(void *ctx, size_t n, const uint32_t *tokens, const int *slots,
                     float *logprobs, tfm_err *err)
{
    full_ctx *f = ctx;
    int V = f->m->cfg.vocab_size;
    for (size_t i = 0; i < n; i++) {
        int s = slots[i];
        f->hist[s][f->len[s]++] = tokens[i];
        full_logits(f->m, f->hist[s], f->len[s], logprobs + i * V);
        tfm_log_softmax(logprobs + i * V, V, logprobs + i * V);
    }
    return 0;
}

static int full_copy(void *ctx, int dst, int src, tfm_err *err)
{
    full_ctx *f = ctx;
    memcpy(f->hist[dst], f->hist[src], sizeof f->hist[0]);
    f->len[dst] = f->len[src];
    return 0;
}

typedef struct cache_ctx {
    tfm_infer *g;
} cache_ctx;

static int cache_step(void *ctx, size_t n, const uint32_t *tokens, const int *slots,
                      float *logprobs, tfm_err *err)
{
    cache_ctx *c = ctx;
    int V = c->g->cfg.vocab_size;
    if (tfm_infer_step(c->g, (int)n, tokens, slots, logprobs, err) < 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        tfm_log_softmax(logprobs + i * V, V, logprobs + i * V);
    return 0;
}

static int cache_copy(void *ctx, int dst, int src, tfm_err *err)
{
    cache_ctx *c = ctx;
    tfm_infer_copy_slot(c->g, dst, src);
    return 0;
}

static void test_beam_cache_equals_full(void **state)
{
    enum { V = 40, P = 4 };
    tfm_model m;
    make_model(&m, TFM_LN_PRE, 1, 1, V);
    tfm_weights w;
    tfm_err err = {0};
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    const uint32_t prompt[P] = {5, 6, 7, 8};
    tfm_beam_opts o;
    tfm_beam_opts_default(&o);
    o.beam = 4;
    o.nbest = 3;
    o.max_len = 14;
    o.eos = 0;
    float first[V];

    full_ctx *f = calloc(1, sizeof *f);
    f->m = &m;
    memcpy(f->hist[0], prompt, sizeof prompt);
    f->len[0] = P;
    full_logits(&m, prompt, P, first);
    tfm_log_softmax(first, V, first);
    tfm_beam_model fm = {f, V, full_step, full_copy};
    tfm_beam_result rf;
    assert_int_equal(tfm_beam_search(&fm, &o, first, &rf, &err), 0);

    tfm_infer g;
    assert_int_equal(tfm_infer_init(&g, &m.cfg, &w, o.beam, P + o.max_len, &err), 0);
    assert_int_equal(tfm_infer_prefill(&g, 0, prompt, P, first, &err), 0);
    tfm_log_softmax(first, V, first);
    cache_ctx cc = {&g};
    tfm_beam_model cm = {&cc, V, cache_step, cache_copy};
    tfm_beam_result rc;
    assert_int_equal(tfm_beam_search(&cm, &o, first, &rc, &err), 0);

    assert_int_equal(rc.n, rf.n);
    for (size_t i = 0; i < rc.n; i++) {
        assert_int_equal(rc.hyps[i].len, rf.hyps[i].len);
        assert_memory_equal(rc.hyps[i].tokens, rf.hyps[i].tokens,
                            rc.hyps[i].len * sizeof(uint32_t));
        assert_true(fabs(rc.hyps[i].score - rf.hyps[i].score) < 1e-3);
    }
    /* and the beam found something at least as good as greedy */
    tfm_beam_opts o1 = o;
    o1.beam = o1.nbest = 1;
    tfm_infer_reset(&g, 0);
    assert_int_equal(tfm_infer_prefill(&g, 0, prompt, P, first, &err), 0);
    tfm_log_softmax(first, V, first);
    tfm_beam_result r1;
    assert_int_equal(tfm_beam_search(&cm, &o1, first, &r1, &err), 0);
    assert_true(rc.hyps[0].score >= r1.hyps[0].score - 1e-6);
    tfm_beam_result_free(&r1);
    tfm_beam_result_free(&rc);
    tfm_beam_result_free(&rf);
    free(f);
    tfm_infer_free(&g);
    tfm_weights_free(&w);
    tfm_model_free(&m);
}

static int setup(void **state)
{
    tfm_blas_init(2);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_beam_cache_equals_full),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
