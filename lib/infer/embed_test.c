/* Embeddings: layer selection and its errors, combination, pooling,
 * normalization and cosine on hand-computed values; the embedder's batching
 * (sorting, token budgets, input order) against one input at a time; the
 * packed forward against the training forward. */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "infer/embed.h"
#include "tensor/gemm.h"

static void test_layer_names(void **state)
{
    (void)state;
    tfm_layer_sel s;
    tfm_err err = {0};
    assert_int_equal(tfm_layer_sel_parse(&s, "last", 12, &err), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.layer[0], 12);
    assert_int_equal(tfm_layer_sel_parse(&s, "first", 12, &err), 0);
    assert_int_equal(s.layer[0], 1);
    assert_int_equal(tfm_layer_sel_parse(&s, "second-last", 12, &err), 0);
    assert_int_equal(s.layer[0], 11);
    assert_int_equal(tfm_layer_sel_parse(&s, "sum-last-4", 12, &err), 0);
    assert_int_equal(s.n, 4);
    assert_int_equal(s.layer[0], 9);
    assert_int_equal(s.layer[3], 12);
    assert_int_equal(s.concat, 0);
    assert_int_equal(tfm_layer_sel_dim(&s, 8), 8);
    assert_int_equal(tfm_layer_sel_parse(&s, "concat-last-4", 12, &err), 0);
    assert_int_equal(s.concat, 1);
    assert_int_equal(tfm_layer_sel_dim(&s, 8), 32);
    assert_int_equal(tfm_layer_sel_parse(&s, "sum-all", 12, &err), 0);
    assert_int_equal(s.n, 12);
    assert_int_equal(s.layer[0], 1); /* the blocks, not the embeddings */
    assert_int_equal(tfm_layer_sel_parse(&s, "0", 12, &err), 0);
    assert_int_equal(s.layer[0], 0);
    assert_int_equal(tfm_layer_sel_parse(&s, "-1", 12, &err), 0);
    assert_int_equal(s.layer[0], 12);
    assert_int_equal(tfm_layer_sel_parse(&s, "-13", 12, &err), 0);
    assert_int_equal(s.layer[0], 0);
}

static void test_layer_errors(void **state)
{
    (void)state;
    tfm_layer_sel s;
    tfm_err err = {0};
    assert_int_equal(tfm_layer_sel_parse(&s, "13", 12, &err), -1);
    assert_string_equal(err.msg, "13 is out of range: the model has layers 0 to 12 "
                                 "(-1 to -13 from the top)");
    assert_int_equal(tfm_layer_sel_parse(&s, "-14", 12, &err), -1);
    assert_int_equal(tfm_layer_sel_parse(&s, "3x", 12, &err), -2); /* usage */
    assert_int_equal(tfm_layer_sel_parse(&s, "", 12, &err), -2);
    assert_int_equal(tfm_layer_sel_parse(&s, "sum-last-4", 3, &err), -1);
    assert_string_equal(err.msg, "'sum-last-4': the model has only 3 blocks");
    assert_int_equal(tfm_layer_sel_parse(&s, "second-last", 1, &err), -1);
    float sc[3] = {0, 0, 0};
    assert_int_equal(tfm_layer_sel_elmo(&s, sc, 3, 1.0f, 3, &err), -1);
    assert_string_equal(err.msg, "3 given, the model has 4 layers (0 to 3)");
}

/* hidden[l][r][c] = 100·l + 10·r + c */
static void fill_hidden(float *store, float **hidden, int L, int R, int C)
{
    for (int l = 0; l <= L; l++) {
        hidden[l] = store + (size_t)l * R * C;
        for (int r = 0; r < R; r++)
            for (int c = 0; c < C; c++)
                hidden[l][r * C + c] = (float)(100 * l + 10 * r + c);
    }
}

static void test_combine(void **state)
{
    (void)state;
    enum { L = 4, R = 2, C = 3 };
    float store[(L + 1) * R * C], *hidden[L + 1], out[R * 4 * C];
    fill_hidden(store, hidden, L, R, C);
    tfm_layer_sel s;
    tfm_err err = {0};
    tfm_layer_sel_parse(&s, "sum-last-4", L, &err);
    tfm_layer_sel_combine(&s, (const float *const *)hidden, R, C, out);
    /* layers 1..4: 100·(1+2+3+4) + 4·(10 r + c) */
    assert_float_equal(out[0], 1000.0f, 0);
    assert_float_equal(out[C + 2], 1000.0f + 4 * 12, 0);
    tfm_layer_sel_parse(&s, "concat-last-4", L, &err);
    tfm_layer_sel_combine(&s, (const float *const *)hidden, R, C, out);
    assert_float_equal(out[0], 100.0f, 0);
    assert_float_equal(out[C], 200.0f, 0);
    assert_float_equal(out[3 * C + 2], 402.0f, 0);
    assert_float_equal(out[4 * C + 1], 111.0f, 0); /* row 1 starts at 4C */
    /* ELMo: equal scalars are the mean, scaled by gamma */
    float sc[L + 1] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    assert_int_equal(tfm_layer_sel_elmo(&s, sc, L + 1, 2.0f, L, &err), 0);
    tfm_layer_sel_combine(&s, (const float *const *)hidden, R, C, out);
    assert_float_equal(out[0], 2.0f * 200.0f, 1e-3);
    /* one dominant scalar picks its layer */
    float one[L + 1] = {0, 0, 40, 0, 0};
    tfm_layer_sel_elmo(&s, one, L + 1, 1.0f, L, &err);
    tfm_layer_sel_combine(&s, (const float *const *)hidden, R, C, out);
    assert_float_equal(out[1], 201.0f, 1e-3);
}

static void test_pool(void **state)
{
    (void)state;
    const float x[3 * 2] = {1, -2, 3, 5, -4, 0.5f}; /* T = 3, D = 2 */
    float o[2];
    assert_int_equal(tfm_pool_parse("mean"), TFM_POOL_MEAN);
    assert_int_equal(tfm_pool_parse("median"), -1);
    assert_string_equal(tfm_pool_name(TFM_POOL_LAST), "last");
    tfm_pool_rows(TFM_POOL_CLS, x, 3, 2, o);
    assert_float_equal(o[0], 1, 0);
    assert_float_equal(o[1], -2, 0);
    tfm_pool_rows(TFM_POOL_LAST, x, 3, 2, o);
    assert_float_equal(o[0], -4, 0);
    assert_float_equal(o[1], 0.5f, 0);
    tfm_pool_rows(TFM_POOL_MEAN, x, 3, 2, o);
    assert_float_equal(o[0], 0, 1e-7);
    assert_float_equal(o[1], 3.5f / 3, 1e-6);
    tfm_pool_rows(TFM_POOL_MAX, x, 3, 2, o);
    assert_float_equal(o[0], 3, 0);
    assert_float_equal(o[1], 5, 0);
    /* mean-sqrt-len: the sum over sqrt(T): (1 + 3 - 4, -2 + 5 + 0.5) / sqrt(3) */
    tfm_pool_rows(TFM_POOL_MEAN_SQRT_LEN, x, 3, 2, o);
    assert_float_equal(o[0], 0, 1e-7);
    assert_float_equal(o[1], 3.5 / sqrt(3.0), 1e-6);
    const float y[4 * 1] = {1, 2, 3, 6}; /* T = 4, D = 1: 12 / 2 */
    tfm_pool_rows(TFM_POOL_MEAN_SQRT_LEN, y, 4, 1, o);
    assert_float_equal(o[0], 6, 0);
    /* one token: every pooling is that token */
    for (int p = TFM_POOL_CLS; p <= TFM_POOL_LAST; p++) {
        tfm_pool_rows((tfm_pool)p, x + 2, 1, 2, o);
        assert_float_equal(o[0], 3, 0);
    }
}

/* Sets of modes: parsed in any order, concatenated in sentence-
 * transformers' order (cls, max, mean, mean_sqrt_len, lasttoken). */
static void test_pool_set(void **state)
{
    (void)state;
    unsigned set = 0;
    char name[64];
    tfm_err err = {0};
    assert_int_equal(tfm_pool_parse("mean-sqrt-len"), TFM_POOL_MEAN_SQRT_LEN);
    assert_string_equal(tfm_pool_name(TFM_POOL_MEAN_SQRT_LEN), "mean-sqrt-len");
    assert_int_equal(tfm_pool_set_parse("mean", &set, &err), 0);
    assert_int_equal(set, TFM_POOL_SET(TFM_POOL_MEAN));
    assert_int_equal(tfm_pool_set_parse("mean,max", &set, &err), 0);
    assert_int_equal(set, TFM_POOL_SET(TFM_POOL_MEAN) | TFM_POOL_SET(TFM_POOL_MAX));
    assert_int_equal(tfm_pool_set_count(set), 2);
    assert_string_equal(tfm_pool_set_name(set, name, sizeof name), "max,mean");
    assert_int_equal(tfm_pool_set_parse("last,mean-sqrt-len,cls,mean,max", &set, &err), 0);
    assert_string_equal(tfm_pool_set_name(set, name, sizeof name),
                        "cls,max,mean,mean-sqrt-len,last");
    assert_int_equal(tfm_pool_set_parse("none", &set, &err), 0);
    assert_int_equal(set, TFM_POOL_SET(TFM_POOL_NONE));
    set = 0;
    assert_int_equal(tfm_pool_set_parse("mean,median", &set, &err), -1);
    assert_string_equal(err.msg, "'mean,median': expected cls, mean, max, mean-sqrt-len, "
                                 "last or none, or a comma list of them (mean,max)");
    assert_int_equal(tfm_pool_set_parse("mean,", &set, &err), -1);
    assert_int_equal(tfm_pool_set_parse("max,max", &set, &err), -1);
    assert_string_equal(err.msg, "'max,max': max twice");
    assert_int_equal(tfm_pool_set_parse("mean,none", &set, &err), -1);
    assert_string_equal(err.msg, "'mean,none': none (every token's vector) cannot be in a list");
    assert_int_equal(set, 0); /* untouched on error */

    /* T = 3, D = 2; every mode hand-computed */
    const float x[3 * 2] = {1, -2, 3, 5, -4, 0.5f};
    float o[5 * 2];
    tfm_pool_set_rows(TFM_POOL_SET(TFM_POOL_MEAN) | TFM_POOL_SET(TFM_POOL_MAX), x, 3, 2, o);
    assert_float_equal(o[0], 3, 0); /* max first */
    assert_float_equal(o[1], 5, 0);
    assert_float_equal(o[2], 0, 1e-7); /* then mean */
    assert_float_equal(o[3], 3.5f / 3, 1e-6);
    tfm_pool_set_rows(0x1f, x, 3, 2, o); /* all five */
    const float want[5 * 2] = {1, -2,                                  /* cls */
                               3, 5,                                   /* max */
                               0, 3.5f / 3,                            /* mean */
                               0, (float)(3.5 / sqrt(3.0)),            /* mean-sqrt-len */
                               -4, 0.5f};                              /* last */
    for (int k = 0; k < 10; k++)
        assert_float_equal(o[k], want[k], 1e-6);
}

static void test_normalize_cosine(void **state)
{
    (void)state;
    float a[2] = {3, 4}, z[2] = {0, 0}, b[2] = {-6, -8}, c[2] = {4, -3};
    tfm_l2_normalize(a, 2);
    assert_float_equal(a[0], 0.6f, 1e-7);
    assert_float_equal(a[1], 0.8f, 1e-7);
    tfm_l2_normalize(z, 2);
    assert_float_equal(z[0], 0, 0);
    assert_float_equal(tfm_cosine(a, b, 2), -1.0, 1e-7);
    assert_float_equal(tfm_cosine(a, c, 2), 0.0, 1e-7);
    assert_float_equal(tfm_cosine(a, z, 2), 0.0, 0);
}

/* A random model; each input embedded alone equals it embedded among
 * others with tiny token budgets (sorted, several batches), in input
 * order; pooled and per-token. */
static void check_batching(tfm_kind kind)
{
    tfm_model_config cfg;
    tfm_model_config_default(&cfg);
    cfg.kind = kind;
    cfg.n_layer = 3;
    cfg.n_head = 2;
    cfg.n_embd = 16;
    cfg.block_size = 32;
    cfg.vocab_size = 40;
    if (kind == TFM_KIND_ENCODER) {
        cfg.ln = TFM_LN_POST;
        cfg.n_segments = 2;
        cfg.emb_norm = 1;
    }
    tfm_err err = {0};
    tfm_model m;
    assert_int_equal(tfm_model_init(&m, &cfg, &err), 0);
    tfm_model_init_weights(&m, 7);
    tfm_weights w;
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    enum { N = 7 };
    const int len[N] = {5, 1, 12, 3, 12, 7, 2};
    size_t off[N], total = 0;
    for (int i = 0; i < N; i++) {
        off[i] = total;
        total += (size_t)len[i];
    }
    uint32_t tok[64];
    uint8_t seg[64];
    for (size_t r = 0; r < total; r++) {
        tok[r] = (uint32_t)((r * 7 + 3) % 40);
        seg[r] = kind == TFM_KIND_ENCODER && r % 3 == 0;
    }
    /* each mode alone, then max,mean and all five side by side */
    const unsigned sets[] = {
        TFM_POOL_SET(TFM_POOL_CLS), TFM_POOL_SET(TFM_POOL_MAX), TFM_POOL_SET(TFM_POOL_MEAN),
        TFM_POOL_SET(TFM_POOL_MEAN_SQRT_LEN), TFM_POOL_SET(TFM_POOL_LAST),
        TFM_POOL_SET(TFM_POOL_NONE), TFM_POOL_SET(TFM_POOL_MAX) | TFM_POOL_SET(TFM_POOL_MEAN),
        0x1f};
    float single[TFM_POOL_N][N * 16];
    for (size_t si = 0; si < sizeof sets / sizeof *sets; si++) {
        const unsigned pool = sets[si];
        tfm_embed_opts o;
        tfm_embed_opts_default(&o, &cfg);
        assert_int_equal(tfm_layer_sel_parse(&o.layers, "sum-all", 3, &err), 0);
        o.pools = pool;
        o.max_tokens = 13; /* several batches; the 12s alone */
        tfm_embedder e;
        assert_int_equal(tfm_embedder_init(&e, &cfg, &w, &o, &err), 0);
        const int none = pool == TFM_POOL_SET(TFM_POOL_NONE);
        const int D = e.W, k = tfm_pool_set_count(pool);
        assert_int_equal(e.W, none ? 16 : k * 16);
        float all[64 * 16 * 5], one[64 * 16 * 5];
        tfm_embed_input in = {.n = N, .tok = tok, .seg = kind == TFM_KIND_ENCODER ? seg : NULL,
                              .off = off, .len = len};
        assert_int_equal(tfm_embedder_run(&e, &in, all, &err), 0);
        for (int i = 0; i < N; i++) {
            size_t o0 = 0;
            tfm_embed_input in1 = {.n = 1, .tok = tok + off[i], .seg = in.seg ? seg + off[i] : NULL,
                                   .off = &o0, .len = &len[i]};
            assert_int_equal(tfm_embedder_run(&e, &in1, one, &err), 0);
            const float *got = all + (none ? off[i] : (size_t)i) * D;
            for (int j = 0; j < (none ? len[i] : 1) * D; j++)
                assert_float_equal(got[j], one[j], 1e-5 * (1 + fabsf(one[j])));
        }
        if (k == 1 && !none) {
            for (int m = 0; m < TFM_POOL_NONE; m++)
                if (pool == TFM_POOL_SET(m))
                    memcpy(single[m], all, sizeof(float) * N * 16);
        } else if (!none) {
            /* a set: each mode's own vector, to the bit, in the enum's order */
            for (int i = 0; i < N; i++) {
                int part = 0;
                for (int m = 0; m < TFM_POOL_NONE; m++)
                    if (pool & TFM_POOL_SET(m))
                        assert_memory_equal(all + (size_t)i * D + (size_t)part++ * 16,
                                            single[m] + (size_t)i * 16, sizeof(float) * 16);
            }
        }
        tfm_embedder_free(&e);
    }
    /* normalized after the concatenation: unit length over all 2 x 16 */
    {
        tfm_embed_opts o;
        tfm_embed_opts_default(&o, &cfg);
        o.pools = TFM_POOL_SET(TFM_POOL_MAX) | TFM_POOL_SET(TFM_POOL_MEAN);
        o.normalize = 1;
        tfm_embedder e;
        assert_int_equal(tfm_embedder_init(&e, &cfg, &w, &o, &err), 0);
        float v[N * 32];
        tfm_embed_input in = {.n = N, .tok = tok, .seg = kind == TFM_KIND_ENCODER ? seg : NULL,
                              .off = off, .len = len};
        assert_int_equal(tfm_embedder_run(&e, &in, v, &err), 0);
        for (int i = 0; i < N; i++) {
            double s = 0;
            for (int j = 0; j < 32; j++)
                s += (double)v[i * 32 + j] * v[i * 32 + j];
            assert_float_equal(s, 1.0, 1e-5);
        }
        tfm_embedder_free(&e);
        /* none with another mode, or nothing, is refused */
        o.pools = TFM_POOL_SET(TFM_POOL_NONE) | TFM_POOL_SET(TFM_POOL_MEAN);
        assert_int_equal(tfm_embedder_init(&e, &cfg, &w, &o, &err), -1);
        o.pools = 0;
        assert_int_equal(tfm_embedder_init(&e, &cfg, &w, &o, &err), -1);
    }
    /* the attention pass gives the same vector and rows of probabilities
     * summing to 1 (decoders: nothing above the diagonal) */
    tfm_embed_opts o;
    tfm_embed_opts_default(&o, &cfg);
    tfm_embedder e;
    assert_int_equal(tfm_embedder_init(&e, &cfg, &w, &o, &err), 0);
    float att[3 * 2 * 12 * 12], vec[16], all[N * 16];
    tfm_embed_input in = {.n = N, .tok = tok, .seg = kind == TFM_KIND_ENCODER ? seg : NULL,
                          .off = off, .len = len};
    assert_int_equal(tfm_embedder_run(&e, &in, all, &err), 0);
    assert_int_equal(tfm_embedder_attention(&e, tok + off[2], in.seg ? seg + off[2] : NULL, 12,
                                            att, vec, &err), 0);
    for (int k = 0; k < 16; k++)
        assert_float_equal(vec[k], all[2 * 16 + k], 1e-5 * (1 + fabsf(vec[k])));
    for (int q = 0; q < 3 * 2 * 12; q++) {
        double s = 0;
        for (int j = 0; j < 12; j++) {
            s += att[q * 12 + j];
            if (kind == TFM_KIND_DECODER && j > q % 12)
                assert_float_equal(att[q * 12 + j], 0, 0);
        }
        assert_float_equal(s, 1.0, 1e-5);
    }
    /* errors: too long, out of range token */
    int bad_len = 33;
    size_t o0 = 0;
    uint32_t many[33] = {0};
    tfm_embed_input bad = {.n = 1, .tok = many, .off = &o0, .len = &bad_len};
    assert_int_equal(tfm_embedder_run(&e, &bad, all, &err), -1);
    assert_string_equal(err.msg, "input 0 has 33 tokens: the model takes 1 to 32");
    many[0] = 40;
    int one_len = 1;
    bad.len = &one_len;
    assert_int_equal(tfm_embedder_run(&e, &bad, all, &err), -1);
    assert_string_equal(err.msg, "token id 40 is outside the model's vocabulary (40)");
    tfm_embedder_free(&e);
    tfm_weights_free(&w);
    tfm_model_free(&m);
}

static void test_batching_encoder(void **state)
{
    (void)state;
    check_batching(TFM_KIND_ENCODER);
}

static void test_batching_decoder(void **state)
{
    (void)state;
    check_batching(TFM_KIND_DECODER);
}

/* The packed forward's top layer equals the training forward's, which
 * tests/model_torch.py checks against PyTorch: a decoder's logits through
 * the tied head. */
static void test_forward_matches_training(void **state)
{
    (void)state;
    tfm_model_config cfg;
    tfm_model_config_default(&cfg);
    cfg.n_layer = 2;
    cfg.n_head = 2;
    cfg.n_embd = 16;
    cfg.block_size = 16;
    cfg.vocab_size = 20;
    cfg.pos = TFM_POS_ROPE;
    tfm_err err = {0};
    tfm_model m;
    assert_int_equal(tfm_model_init(&m, &cfg, &err), 0);
    tfm_model_init_weights(&m, 3);
    tfm_model_set_inference(&m);
    int32_t in[2 * 9];
    uint32_t tok[2 * 9];
    for (int i = 0; i < 18; i++)
        tok[i] = (uint32_t)(in[i] = (i * 5 + 1) % 20);
    assert_int_equal(tfm_model_forward(&m, in, NULL, 2, 9, NULL, &err), 0);
    const float *logits = tfm_model_logits(&m);
    tfm_weights w;
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    tfm_fwd f;
    assert_int_equal(tfm_fwd_init(&f, &cfg, &w, TFM_FWD_MAIN, &err), 0);
    float top[18 * 16];
    float *hidden[3] = {NULL, NULL, top};
    const int len[2] = {9, 9};
    tfm_fwd_batch b = {.n = 2, .len = len, .tok = tok, .hidden = hidden};
    assert_int_equal(tfm_fwd_run(&f, &b, &err), 0);
    for (int r = 0; r < 18; r++)
        for (int v = 0; v < 20; v++) {
            float s = 0;
            for (int c = 0; c < 16; c++)
                s += top[r * 16 + c] * w.dec.wte.f32[v * 16 + c];
            assert_float_equal(s, logits[r * 20 + v], 1e-4 * (1 + fabsf(s)));
        }
    tfm_fwd_free(&f);
    tfm_weights_free(&w);
    tfm_model_free(&m);
}

int main(void)
{
    tfm_blas_init(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layer_names),
        cmocka_unit_test(test_layer_errors),
        cmocka_unit_test(test_combine),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_pool_set),
        cmocka_unit_test(test_normalize_cosine),
        cmocka_unit_test(test_batching_encoder),
        cmocka_unit_test(test_batching_decoder),
        cmocka_unit_test(test_forward_matches_training),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
