/* tfm_model_init_weights' schemes (model.init): the statistics of each
 * tensor kind under xavier, and gpt2 unchanged. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "model/transformer.h"

/* n_kv_head: key/value heads (0: n_head's 4) */
static void make_kv(tfm_model *m, tfm_init init, int n_kv_head)
{
    tfm_model_config cfg;
    tfm_model_config_default(&cfg);
    cfg.kind = TFM_KIND_ENCODER_DECODER;
    cfg.pos = TFM_POS_SINUSOIDAL;
    cfg.n_layer = 3;
    cfg.n_head = 4;
    cfg.n_embd = 128;
    cfg.d_ff = 512;
    cfg.block_size = 32;
    cfg.vocab_size = 29;
    cfg.ln = TFM_LN_POST;
    cfg.emb_scale = 1;
    cfg.init = init;
    cfg.n_kv_head = n_kv_head;
    tfm_err err = {0};
    assert_int_equal(tfm_model_init(m, &cfg, &err), 0);
    tfm_model_init_weights(m, 1234);
}

static void make(tfm_model *m, tfm_init init)
{
    make_kv(m, init, 0);
}

typedef struct stats {
    double mean, std, maxabs;
} stats;

static stats of(const tfm_model *m, const char *name)
{
    const tfm_param *p = tfm_model_param(m, name);
    assert_non_null(p);
    const float *w = m->params + p->offset;
    double s = 0, s2 = 0, mx = 0;
    for (size_t i = 0; i < p->numel; i++) {
        s += w[i];
        s2 += (double)w[i] * w[i];
        if (fabs(w[i]) > mx)
            mx = fabs(w[i]);
    }
    double mean = s / (double)p->numel;
    return (stats){mean, sqrt(s2 / (double)p->numel - mean * mean), mx};
}

/* U(±a): every |w| ≤ a, the largest close to a, std a/√3 (within 4%). */
static void uniform(const tfm_model *m, const char *name, double a)
{
    stats s = of(m, name);
    assert_true(s.maxabs <= a);
    assert_true(s.maxabs > 0.99 * a);
    assert_true(fabs(s.std / (a / sqrt(3.0)) - 1) < 0.04);
    assert_true(fabs(s.mean) < 0.05 * a);
}

static void normal(const tfm_model *m, const char *name, double std)
{
    stats s = of(m, name);
    assert_true(fabs(s.std / std - 1) < 0.05);
    assert_true(fabs(s.mean) < 0.1 * std);
    assert_true(s.maxabs > 2.5 * std); /* not uniform */
}

static void test_xavier(void **state)
{
    (void)state;
    tfm_model m;
    make(&m, TFM_INIT_XAVIER);
    normal(&m, "wte.weight", 1 / sqrt(128.0));
    for (int l = 0; l < 3; l++) {
        char n[64];
        /* q|k|v and k|v: three and two 128 x 128 matrices */
        snprintf(n, sizeof n, "enc.h.%d.attn.c_attn.weight", l);
        uniform(&m, n, sqrt(6.0 / 256));
        snprintf(n, sizeof n, "h.%d.attn.c_attn.weight", l);
        uniform(&m, n, sqrt(6.0 / 256));
        snprintf(n, sizeof n, "h.%d.xattn.c_kv.weight", l);
        uniform(&m, n, sqrt(6.0 / 256));
        snprintf(n, sizeof n, "h.%d.xattn.c_q.weight", l);
        uniform(&m, n, sqrt(6.0 / 256));
        snprintf(n, sizeof n, "h.%d.xattn.c_proj.weight", l);
        uniform(&m, n, sqrt(6.0 / 256));
        snprintf(n, sizeof n, "enc.h.%d.attn.c_proj.weight", l);
        uniform(&m, n, sqrt(6.0 / 256));
        snprintf(n, sizeof n, "h.%d.mlp.c_fc.weight", l);
        uniform(&m, n, sqrt(6.0 / 640));
        snprintf(n, sizeof n, "enc.h.%d.mlp.c_proj.weight", l);
        uniform(&m, n, sqrt(6.0 / 640));
        snprintf(n, sizeof n, "h.%d.ln_x.weight", l);
        stats s = of(&m, n);
        assert_true(s.mean == 1 && s.std == 0);
        snprintf(n, sizeof n, "h.%d.xattn.c_kv.bias", l);
        assert_true(of(&m, n).maxabs == 0);
    }
    tfm_model_free(&m);
}

/* Grouped heads (n_kv_head 1 of 4): c_attn's q columns are one 128 x 128
 * matrix and its k and v columns two 128 x 32 ones, each with its own
 * bound; c_kv's k and v are 128 x 32 too. */
static void test_xavier_grouped(void **state)
{
    (void)state;
    tfm_model m;
    make_kv(&m, TFM_INIT_XAVIER, 1);
    const tfm_param *p = tfm_model_param(&m, "h.1.attn.c_attn.weight");
    assert_non_null(p);
    assert_int_equal((int)p->shape[1], 128 + 2 * 32);
    const double aq = sqrt(6.0 / 256), akv = sqrt(6.0 / 160);
    double mq = 0, mkv = 0;
    for (size_t i = 0; i < p->numel; i++) {
        double v = fabs(m.params[p->offset + i]);
        if (i % p->shape[1] < 128)
            mq = v > mq ? v : mq;
        else
            mkv = v > mkv ? v : mkv;
    }
    assert_true(mq <= aq && mq > 0.99 * aq);
    assert_true(mkv <= akv && mkv > 0.99 * akv);
    uniform(&m, "h.2.xattn.c_kv.weight", akv);
    tfm_model_free(&m);
}

/* gpt2 (the default) as before: N(0, 0.02), residual projections
 * 0.02/√(3L) in the decoder and 0.02/√(2L) in the encoder. */
static void test_gpt2(void **state)
{
    (void)state;
    tfm_model m;
    make(&m, TFM_INIT_GPT2);
    normal(&m, "wte.weight", 0.02);
    normal(&m, "h.0.attn.c_attn.weight", 0.02);
    normal(&m, "h.1.mlp.c_proj.weight", 0.02 / sqrt(9.0));
    normal(&m, "enc.h.2.mlp.c_proj.weight", 0.02 / sqrt(6.0));
    tfm_model_free(&m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xavier),
        cmocka_unit_test(test_xavier_grouped),
        cmocka_unit_test(test_gpt2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
