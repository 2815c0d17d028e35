/* The KV-cache forward against the training forward (model/transformer.h) recomputing
 * the whole sequence at every step: same tokens, logits within rounding. */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/half.h"
#include "model/transformer.h"
#include "model/decode.h"
#include "model/forward.h"
#include "tensor/gemm.h"
#include "tensor/q8.h"

static void test_gemv_rows(void **state)
{
    /* small and large enough to run on one thread and on several */
    const int Ks[] = {7, 64, 700}, Ns[] = {64, 130, 333};
    tfm_rng r;
    tfm_rng_seed(&r, 1);
    for (int ki = 0; ki < 3; ki++)
        for (int ni = 0; ni < 3; ni++)
            for (int n = 1; n <= 6; n++) {
                int K = Ks[ki], N = Ns[ni];
                float *W = malloc(sizeof(float) * K * N), *x = malloc(sizeof(float) * n * K);
                float *b = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * n * N);
                for (int i = 0; i < K * N; i++) W[i] = tfm_rng_normal(&r);
                for (int i = 0; i < n * K; i++) x[i] = tfm_rng_normal(&r);
                for (int i = 0; i < N; i++) b[i] = tfm_rng_normal(&r);
                tfm_gemv_rows(y, x, W, (n & 1) ? b : NULL, n, K, N);
                for (int rr = 0; rr < n; rr++)
                    for (int j = 0; j < N; j++) {
                        double s = (n & 1) ? b[j] : 0;
                        for (int i = 0; i < K; i++)
                            s += (double)x[rr * K + i] * W[(size_t)i * N + j];
                        assert_true(fabs(s - y[rr * N + j]) < 1e-4 * (1 + fabs(s)));
                    }
                free(W); free(x); free(b); free(y);
            }
}

static uint16_t round_bf16(float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    return (uint16_t)((v + 0x7fffu + ((v >> 16) & 1)) >> 16);
}

static float widen_bf16(uint16_t u)
{
    uint32_t v = (uint32_t)u << 16;
    float f;
    memcpy(&f, &v, 4);
    return f;
}

static void test_gemv_rows_bf16(void **state)
{
    tfm_rng r;
    tfm_rng_seed(&r, 2);
    const int K = 700, N = 333;
    for (int n = 1; n <= 5; n += 2) {
        uint16_t *W = malloc(sizeof *W * K * N);
        float *x = malloc(sizeof(float) * n * K), *b = malloc(sizeof(float) * N);
        float *y = malloc(sizeof(float) * n * N);
        for (int i = 0; i < K * N; i++) W[i] = round_bf16(tfm_rng_normal(&r));
        for (int i = 0; i < n * K; i++) x[i] = tfm_rng_normal(&r);
        for (int i = 0; i < N; i++) b[i] = tfm_rng_normal(&r);
        tfm_gemv_rows_bf16(y, x, W, b, n, K, N);
        for (int rr = 0; rr < n; rr++)
            for (int j = 0; j < N; j++) {
                double sum = b[j];
                for (int i = 0; i < K; i++)
                    sum += (double)x[rr * K + i] * widen_bf16(W[(size_t)i * N + j]);
                assert_true(fabs(sum - y[rr * N + j]) < 1e-4 * (1 + fabs(sum)) * 30);
            }
        free(W); free(x); free(b); free(y);
    }
    /* rounding: to nearest, ties to even */
    assert_int_equal(round_bf16(1.0f), 0x3f80);
    float f;
    uint32_t v = 0x3f808000u; /* exactly between 0x3f80 and 0x3f81 */
    memcpy(&f, &v, 4);
    assert_int_equal(round_bf16(f), 0x3f80);
}

/* The block kinds the models below get (test_block_kinds sets them). */
static tfm_norm_kind kind_norm = TFM_NORM_LAYER;
static tfm_ffn_kind kind_ffn = TFM_FFN_PLAIN;
static int kind_unscaled = 0;
/* heads whose total width differs from n_embd (model.head_dim): 0 keeps
 * the case's own n_head and n_embd/n_head */
static int kind_n_head = 0, kind_head_dim = 0;
/* key/value heads (model.n_kv_head): 0 keeps every query head its own */
static int kind_n_kv_head = 0;
/* The factor on the initial matrices: large, so that the next token is
 * rarely a near tie; smaller for the kinds whose norms keep the mean (RMSNorm)
 * or whose scores lack 1/√HS, where ×20 saturates the softmaxes and the
 * paths' different rounding shows at 1e-2. */
static float kind_scale = 20.0f;

static void apply_kinds(tfm_model_config *c)
{
    c->norm = kind_norm;
    c->ffn = kind_ffn;
    c->attn_unscaled = kind_unscaled;
    if (kind_head_dim) {
        c->n_head = kind_n_head;
        c->head_dim = kind_head_dim;
    }
    c->n_kv_head = kind_n_kv_head;
}

/* The first index of the largest logit (as infer/sample.h's tfm_argmax,
 * which sits above this layer). */
static uint32_t argmax(const float *x, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (uint32_t)best;
}

/* A small model with weights large enough that the next token is rarely a
 * near tie (GPT-2's 0.02 init gives almost flat logits). */
static void make_model_pos(tfm_model *m, tfm_ln_place ln, int tied, int bias, int V,
                           tfm_pos pos)
{
    tfm_model_config c;
    tfm_model_config_default(&c);
    c.pos = pos;
    if (pos != TFM_POS_LEARNED) { /* and the other shape options along */
        c.d_ff = 40;
        c.emb_norm = pos == TFM_POS_ROPE;
    }
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 32;
    c.block_size = 48;
    c.vocab_size = V;
    c.ln = ln;
    c.tie_embeddings = tied;
    c.bias = bias;
    apply_kinds(&c);
    tfm_err err = {0};
    assert_int_equal(tfm_model_init(m, &c, &err), 0);
    tfm_model_init_weights(m, 1234 + ln * 10 + tied * 3 + bias + (uint64_t)pos * 17);
    tfm_rng r;
    tfm_rng_seed(&r, 99);
    for (int i = 0; i < m->n_table; i++) {
        tfm_param *p = &m->table[i];
        for (size_t j = 0; j < p->numel; j++) {
            float *v = &m->params[p->offset + j];
            if (p->ndim == 2)
                *v *= kind_scale;
            else if (strstr(p->name, "bias"))
                *v = 0.1f * tfm_rng_normal(&r);
            else
                *v = 1.0f + 0.1f * tfm_rng_normal(&r);
        }
    }
}

static void make_model(tfm_model *m, tfm_ln_place ln, int tied, int bias, int V)
{
    make_model_pos(m, ln, tied, bias, V, TFM_POS_LEARNED);
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

static void assert_close(const float *a, const float *b, int n)
{
    for (int i = 0; i < n; i++)
        if (!(fabsf(a[i] - b[i]) <= 2e-3f * (1.0f + fabsf(b[i]))))
            fail_msg("logit %d: cache %g, full %g", i, a[i], b[i]);
}

/* forced: the next token is a fixed pseudo-random one instead of the
 * argmax, so that random weights which fall into repeating a token still
 * exercise varied tokens at every position. */
static void greedy_case_pos(tfm_ln_place ln, int tied, int bias, tfm_pos pos, int forced)
{
    enum { V = 61, P = 5, NEW = 30 };
    tfm_model m;
    make_model_pos(&m, ln, tied, bias, V, pos);
    tfm_weights w;
    tfm_err err = {0};
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    tfm_infer g;
    assert_int_equal(tfm_infer_init(&g, &m.cfg, &w, 1, P + NEW, &err), 0);

    uint32_t seq_c[P + NEW], seq_f[P + NEW];
    const uint32_t prompt[P] = {3, 14, 15, 9, 26};
    memcpy(seq_c, prompt, sizeof prompt);
    memcpy(seq_f, prompt, sizeof prompt);
    float lc[V], lf[V];
    assert_int_equal(tfm_infer_prefill(&g, 0, prompt, P, lc, &err), 0);
    int distinct = 0;
    for (int t = P; t < P + NEW; t++) {
        full_logits(&m, seq_f, t, lf);
        assert_close(lc, lf, V);
        seq_c[t] = argmax(lc, V);
        seq_f[t] = argmax(lf, V);
        assert_int_equal(seq_c[t], seq_f[t]);
        if (forced)
            seq_c[t] = seq_f[t] = (uint32_t)((t * 37 + 11) % V);
        distinct += seq_c[t] != seq_c[t - 1];
        if (t + 1 < P + NEW) {
            int slot = 0;
            assert_int_equal(tfm_infer_step(&g, 1, &seq_c[t], &slot, lc, &err), 0);
        }
    }
    assert_true(distinct > 3); /* not a degenerate repetition */
    /* the context is full now: one more is an error, not a crash */
    int slot = 0;
    assert_int_equal(tfm_infer_step(&g, 1, &seq_c[0], &slot, lc, &err), 0);
    assert_int_equal(tfm_infer_step(&g, 1, &seq_c[0], &slot, lc, &err), -1);
    assert_non_null(strstr(err.msg, "context length"));
    tfm_infer_free(&g);
    tfm_weights_free(&w);
    tfm_model_free(&m);
}

static void greedy_case(tfm_ln_place ln, int tied, int bias)
{
    greedy_case_pos(ln, tied, bias, TFM_POS_LEARNED, 0);
}

/* Every position scheme: the cache (rotated keys, biases on absolute
 * distances) gives what recomputing the whole sequence gives. */
static void test_positions_cache_equals_full(void **state)
{
    (void)state;
    const tfm_pos all[] = {TFM_POS_SINUSOIDAL, TFM_POS_ROPE, TFM_POS_ALIBI, TFM_POS_T5};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        greedy_case_pos(TFM_LN_PRE, 1, 1, all[i], 1);
        greedy_case_pos(TFM_LN_POST, 0, 1, all[i], 1);
    }
}

/* Positions without a table go past the training context. */
static void test_past_block_size(void **state)
{
    (void)state;
    tfm_model m;
    make_model_pos(&m, TFM_LN_PRE, 1, 1, 20, TFM_POS_ROPE);
    tfm_weights w;
    tfm_err err = {0};
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    tfm_infer g;
    int n = m.cfg.block_size + 16;
    assert_int_equal(tfm_infer_init(&g, &m.cfg, &w, 1, n, &err), 0);
    assert_int_equal(g.max_len, n);
    uint32_t *seq = malloc(sizeof *seq * n);
    for (int i = 0; i < n; i++)
        seq[i] = (uint32_t)(i * 7 % 20);
    float lc[20], lf[20];
    assert_int_equal(tfm_infer_prefill(&g, 0, seq, n, lc, &err), 0);
    full_logits(&m, seq, n, lf);
    assert_close(lc, lf, 20);
    free(seq);
    tfm_infer_free(&g);
    tfm_weights_free(&w);
    tfm_model_free(&m);
}

/* Logits at the last of seq[0..n) by the training forward of an
 * encoder-decoder over src[0..S). */
static void full_logits_src(tfm_model *m, const uint32_t *src, int S, const uint32_t *seq,
                            int n, float *out)
{
    int32_t *in = malloc(sizeof *in * n), *sr = malloc(sizeof *sr * S);
    for (int i = 0; i < n; i++)
        in[i] = (int32_t)seq[i];
    for (int i = 0; i < S; i++)
        sr[i] = (int32_t)src[i];
    tfm_batch b = {.inputs = in, .B = 1, .T = n, .src = sr, .S = S};
    tfm_err err = {0};
    assert_int_equal(tfm_model_forward_batch(m, &b, NULL, &err), 0);
    memcpy(out, tfm_model_logits(m) + (size_t)(n - 1) * m->cfg.vocab_size,
           sizeof(float) * m->cfg.vocab_size);
    free(in);
    free(sr);
}

/* Encoder-decoders: two slots with sources of different lengths decode as
 * one batch (the cross-attention cache read per slot), and a copied slot
 * continues as its original; every step's logits equal the training
 * forward's over the whole target; every position scheme, pre-LN tied
 * three ways and post-LN with a source vocabulary of its own. */
static void encdec_case(tfm_pos pos, int post)
{
    enum { V = 41, VS = 29, P = 3, NEW = 14, S0 = 7, S1 = 4 };
    tfm_model_config c;
    tfm_model_config_default(&c);
    c.kind = TFM_KIND_ENCODER_DECODER;
    c.pos = pos;
    c.n_layer = 2;
    c.n_enc_layer = post ? 3 : 1;
    c.n_head = 4;
    c.n_embd = 32;
    c.block_size = 32;
    c.vocab_size = V;
    c.ln = post ? TFM_LN_POST : TFM_LN_PRE;
    c.tie_embeddings = c.tie_source = !post;
    c.src_vocab_size = post ? VS : 0;
    c.emb_norm = post;
    c.emb_scale = (pos + post) % 2;
    apply_kinds(&c);
    tfm_model m;
    tfm_err err = {0};
    assert_int_equal(tfm_model_init(&m, &c, &err), 0);
    tfm_model_init_weights(&m, 77 + (uint64_t)pos * 5 + (uint64_t)post);
    tfm_rng r;
    tfm_rng_seed(&r, 5);
    for (int i = 0; i < m.n_table; i++) {
        tfm_param *p = &m.table[i];
        for (size_t j = 0; j < p->numel; j++) {
            float *v = &m.params[p->offset + j];
            if (p->ndim == 2)
                *v *= kind_scale;
            else if (strstr(p->name, "bias"))
                *v = 0.1f * tfm_rng_normal(&r);
            else
                *v = 1.0f + 0.1f * tfm_rng_normal(&r);
        }
    }
    tfm_weights w;
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    tfm_infer g;
    assert_int_equal(tfm_infer_init(&g, &m.cfg, &w, 3, P + NEW, &err), 0);
    const uint32_t src0[S0] = {1, 8, 2, 8, 1, 8, 2}, src1[S1] = {5, 3, 5, 6};
    const uint32_t prompt[P] = {3, 14, 15};
    uint32_t seq[P + NEW];
    memcpy(seq, prompt, sizeof prompt);
    /* no source yet: an error */
    float l0[V], l1[V], lf[V], both[2 * V];
    assert_int_equal(tfm_infer_prefill(&g, 0, prompt, P, l0, &err), -1);
    assert_non_null(strstr(err.msg, "source"));
    assert_int_equal(tfm_infer_encode(&g, 0, src0, S0, &err), 0);
    assert_int_equal(tfm_infer_encode(&g, 1, src1, S1, &err), 0);
    assert_int_equal(tfm_infer_prefill(&g, 0, prompt, P, l0, &err), 0);
    assert_int_equal(tfm_infer_prefill(&g, 1, prompt, P, l1, &err), 0);
    for (int t = P; t < P + NEW; t++) {
        full_logits_src(&m, src0, S0, seq, t, lf);
        assert_close(l0, lf, V);
        full_logits_src(&m, src1, S1, seq, t, lf);
        assert_close(l1, lf, V);
        if (t == P + NEW / 2) { /* slot 2 takes over slot 1 */
            tfm_infer_copy_slot(&g, 2, 1);
            tfm_infer_reset(&g, 1);
        }
        seq[t] = (uint32_t)((t * 37 + 11) % V);
        if (t + 1 < P + NEW) {
            uint32_t tok[2] = {seq[t], seq[t]};
            int slots[2] = {0, t >= P + NEW / 2 ? 2 : 1};
            assert_int_equal(tfm_infer_step(&g, 2, tok, slots, both, &err), 0);
            memcpy(l0, both, sizeof l0);
            memcpy(l1, both + V, sizeof l1);
        }
    }
    /* sources encoded in one pass leave each slot as one at a time would,
     * to the bit (a one-token source too) */
    const uint32_t one[1] = {4};
    const uint32_t *srcs[3] = {src0, src1, one};
    const int lens[3] = {S0, S1, 1}, sl[3] = {2, 0, 1};
    float alone[3][V], many[3][V];
    for (int s = 0; s < 3; s++) {
        assert_int_equal(tfm_infer_encode(&g, sl[s], srcs[s], lens[s], &err), 0);
        assert_int_equal(tfm_infer_prefill(&g, sl[s], prompt, P, alone[s], &err), 0);
    }
    assert_int_equal(tfm_infer_encode_many(&g, 3, sl, srcs, lens, &err), 0);
    for (int s = 0; s < 3; s++) {
        assert_int_equal(tfm_infer_prefill(&g, sl[s], prompt, P, many[s], &err), 0);
        assert_memory_equal(alone[s], many[s], sizeof alone[s]);
    }
    /* the source's own vocabulary bounds its ids */
    uint32_t bad = post ? VS : V;
    assert_int_equal(tfm_infer_encode(&g, 0, &bad, 1, &err), -1);
    assert_non_null(strstr(err.msg, "source vocabulary"));
    tfm_infer_free(&g);
    tfm_weights_free(&w);
    tfm_model_free(&m);
}

static void test_encoder_decoder_cache(void **state)
{
    (void)state;
    const tfm_pos all[] = {TFM_POS_LEARNED, TFM_POS_SINUSOIDAL, TFM_POS_ROPE, TFM_POS_ALIBI,
                           TFM_POS_T5};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        encdec_case(all[i], 0);
        encdec_case(all[i], 1);
    }
}

static void test_greedy_cache_equals_full(void **state)
{
    greedy_case(TFM_LN_PRE, 1, 1);
    greedy_case(TFM_LN_PRE, 0, 0);
    greedy_case(TFM_LN_POST, 1, 1);
}

/* Three prompts of different lengths decoded as one batch give what each
 * gives alone. */
static void test_batch_equals_single(void **state)
{
    enum { V = 50, NEW = 12 };
    tfm_model m;
    make_model(&m, TFM_LN_PRE, 1, 1, V);
    tfm_weights w;
    tfm_err err = {0};
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    const uint32_t p0[] = {1, 2, 3}, p1[] = {7}, p2[] = {40, 41, 42, 43, 44, 45, 46};
    const uint32_t *ps[3] = {p0, p1, p2};
    const int pn[3] = {3, 1, 7};
    uint32_t alone[3][NEW], batch[3][NEW];
    float lg[3 * V];
    for (int k = 0; k < 3; k++) {
        tfm_infer g;
        assert_int_equal(tfm_infer_init(&g, &m.cfg, &w, 1, 32, &err), 0);
        assert_int_equal(tfm_infer_prefill(&g, 0, ps[k], pn[k], lg, &err), 0);
        for (int t = 0; t < NEW; t++) {
            alone[k][t] = argmax(lg, V);
            int s = 0;
            assert_int_equal(tfm_infer_step(&g, 1, &alone[k][t], &s, lg, &err), 0);
        }
        tfm_infer_free(&g);
    }
    tfm_infer g;
    assert_int_equal(tfm_infer_init(&g, &m.cfg, &w, 3, 32, &err), 0);
    for (int k = 0; k < 3; k++)
        assert_int_equal(tfm_infer_prefill(&g, 2 - k, ps[k], pn[k], lg + k * V, &err), 0);
    const int slots[3] = {2, 1, 0};
    for (int t = 0; t < NEW; t++) {
        uint32_t tok[3];
        for (int k = 0; k < 3; k++)
            tok[k] = batch[k][t] = argmax(lg + k * V, V);
        assert_int_equal(tfm_infer_step(&g, 3, tok, slots, lg, &err), 0);
    }
    assert_memory_equal(alone, batch, sizeof alone);
    tfm_infer_free(&g);
    tfm_weights_free(&w);
    tfm_model_free(&m);
}

/* bfloat16 copies of the weights: the decode logits stay close to the
 * float32 ones (half the bytes, 8-bit mantissas). */
/* Greedy decoding with reduced-precision copies (convert) against float32:
 * the worst logit difference relative to the largest logit, and how many
 * of the greedy tokens agree. */
static void reduced_close(size_t (*convert)(tfm_weights *, const tfm_model_config *),
                          double *worst_out, int *same_out)
{
    enum { V = 61, P = 5, NEW = 10 };
    tfm_model m;
    make_model(&m, TFM_LN_PRE, 1, 1, V);
    tfm_weights w32, w16;
    tfm_err err = {0};
    assert_int_equal(tfm_weights_from_model(&w32, &m, &err), 0);
    assert_int_equal(tfm_weights_from_model(&w16, &m, &err), 0);
    assert_true(convert(&w16, &m.cfg) > 0);
    tfm_infer a, b;
    assert_int_equal(tfm_infer_init(&a, &m.cfg, &w32, 1, P + NEW, &err), 0);
    assert_int_equal(tfm_infer_init(&b, &m.cfg, &w16, 1, P + NEW, &err), 0);
    const uint32_t prompt[P] = {3, 14, 15, 9, 26};
    float la[V], lb[V];
    assert_int_equal(tfm_infer_prefill(&a, 0, prompt, P, la, &err), 0);
    assert_int_equal(tfm_infer_prefill(&b, 0, prompt, P, lb, &err), 0);
    int slot = 0, same = 0;
    double worst = 0;
    for (int t = 0; t < NEW; t++) {
        uint32_t tok = argmax(la, V);
        same += tok == argmax(lb, V);
        assert_int_equal(tfm_infer_step(&a, 1, &tok, &slot, la, &err), 0);
        assert_int_equal(tfm_infer_step(&b, 1, &tok, &slot, lb, &err), 0);
        float mx = 0;
        for (int i = 0; i < V; i++)
            mx = fabsf(la[i]) > mx ? fabsf(la[i]) : mx;
        for (int i = 0; i < V; i++) {
            double d = fabs(la[i] - lb[i]) / mx;
            worst = d > worst ? d : worst;
        }
    }
    *worst_out = worst;
    *same_out = same;
    assert_true(worst > 0);     /* the reduced path really ran */
    assert_true(same >= NEW - 2);
    tfm_infer_free(&a);
    tfm_infer_free(&b);
    tfm_weights_free(&w32);
    tfm_weights_free(&w16);
    tfm_model_free(&m);
}

static void test_bf16_close(void **state)
{
    double worst;
    int same;
    reduced_close(tfm_weights_to_bf16, &worst, &same);
    printf("# bf16 decode: worst logit difference %.4f of the largest, %d of 10 tokens the "
           "same\n", worst, same);
    assert_true(worst < 0.05);
}

/* 8-bit weights and activations: each weight and each input off by at
 * most half a step of its block's max/127 (2^-8 of the block's largest,
 * against bfloat16's 2^-9 of each value): here about four times
 * bfloat16's error (0.031 against 0.008 of the largest logit, with one
 * 32-wide block per row); 0.05 leaves room for other compilers' rounding,
 * and a wrong product (a transposed matrix, a lost scale) lands near 1. */
static void test_q8_close(void **state)
{
    double worst;
    int same;
    reduced_close(tfm_weights_to_q8, &worst, &same);
    printf("# q8 decode: worst logit difference %.4f of the largest, %d of 10 tokens the "
           "same\n", worst, same);
    assert_true(worst < 0.05);
}

/* With 8-bit weights every product runs in 8 bits, a prompt's rows
 * GEMV_ROWS (8) at a time or all through tfm_q8_gemm: a 19-token prompt
 * at once (chunks of 8, 8, 3, or 19 rows) gives, to the bit, the logits
 * and next steps of its tokens fed one by one. */
static void test_q8_prompt_equals_steps(void **state)
{
    (void)state;
    enum { V = 61, P = 19, NEW = 4 };
    tfm_model m;
    make_model(&m, TFM_LN_PRE, 1, 1, V);
    tfm_weights w;
    tfm_err err = {0};
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    assert_true(tfm_weights_to_q8(&w, &m.cfg) > 0);
    const uint32_t prompt[P] = {3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32, 38, 4, 6, 2, 6, 43, 3};
    tfm_infer a, b;
    assert_int_equal(tfm_infer_init(&a, &m.cfg, &w, 1, P + NEW, &err), 0);
    assert_int_equal(tfm_infer_init(&b, &m.cfg, &w, 1, P + NEW, &err), 0);
    float la[V], lb[V];
    int slot = 0;
    assert_int_equal(tfm_infer_prefill(&a, 0, prompt, P, la, &err), 0);
    assert_int_equal(tfm_infer_prefill(&b, 0, prompt, 1, lb, &err), 0);
    for (int t = 1; t < P; t++)
        assert_int_equal(tfm_infer_step(&b, 1, &prompt[t], &slot, lb, &err), 0);
    assert_memory_equal(la, lb, sizeof la);
    /* the prompt's products either way: GEMV_ROWS rows at a time, or all
     * rows through tfm_q8_gemm on the matrices packed */
    for (int way = 1; way <= 2; way++) {
        tfm_infer c;
        float lc[V];
        assert_int_equal(tfm_infer_init(&c, &m.cfg, &w, 1, P + NEW, &err), 0);
        c.q8_prompt = way;
        assert_int_equal(tfm_infer_prefill(&c, 0, prompt, P, lc, &err), 0);
        assert_memory_equal(la, lc, sizeof la);
        assert_int_equal(c.qpack.cap > 0, way == 2);
        tfm_infer_free(&c);
    }
    for (int t = 0; t < NEW; t++) {
        uint32_t tok = argmax(la, V);
        assert_int_equal(tfm_infer_step(&a, 1, &tok, &slot, la, &err), 0);
        assert_int_equal(tfm_infer_step(&b, 1, &tok, &slot, lb, &err), 0);
        assert_memory_equal(la, lb, sizeof la);
    }
    tfm_infer_free(&a);
    tfm_infer_free(&b);
    tfm_weights_free(&w);
    tfm_model_free(&m);
}

/* The prefetch hint of bfloat16 products is timed on the first decode
 * steps, alternating: the logits are the same under either hint, and after
 * the timed steps one is chosen; float32 weights time nothing. */
static void test_bf16_prefetch_hint(void **state)
{
    (void)state;
    enum { V = 61, STEPS = 12 };
    tfm_model m;
    make_model(&m, TFM_LN_PRE, 1, 1, V);
    tfm_weights w;
    tfm_err err = {0};
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    assert_true(tfm_weights_to_bf16(&w, &m.cfg) > 0);
    tfm_infer g[3];
    for (int k = 0; k < 3; k++) {
        assert_int_equal(tfm_infer_init(&g[k], &m.cfg, &w, 1, STEPS + 1, &err), 0);
        if (k) { /* the choice made: L1, L2 */
            g[k].pf_steps = 1 << 20;
            g[k].pf_l2 = k - 1;
        }
    }
    assert_null(tfm_infer_prefetch(&g[0]));
    assert_string_equal(tfm_infer_prefetch(&g[2]), "L2");
    float l[3][V];
    int slot = 0;
    uint32_t tok = 7;
    for (int t = 0; t < STEPS; t++) {
        for (int k = 0; k < 3; k++)
            assert_int_equal(tfm_infer_step(&g[k], 1, &tok, &slot, l[k], &err), 0);
        assert_memory_equal(l[0], l[1], sizeof l[0]);
        assert_memory_equal(l[0], l[2], sizeof l[0]);
        tok = argmax(l[0], V);
    }
    assert_non_null(tfm_infer_prefetch(&g[0]));
    for (int k = 0; k < 3; k++)
        tfm_infer_free(&g[k]);
    tfm_weights_free(&w);
    /* the same model's float32 weights */
    tfm_weights f;
    tfm_infer f32;
    assert_int_equal(tfm_weights_from_model(&f, &m, &err), 0);
    assert_int_equal(tfm_infer_init(&f32, &m.cfg, &f, 1, STEPS + 1, &err), 0);
    tok = 7;
    for (int t = 0; t < STEPS; t++)
        assert_int_equal(tfm_infer_step(&f32, 1, &tok, &slot, l[0], &err), 0);
    assert_null(tfm_infer_prefetch(&f32));
    tfm_infer_free(&f32);
    tfm_weights_free(&f);
    tfm_model_free(&m);
}

/* Sets float32 W [K, N] (trans: a block matrix, [in, out]; else [N, K])
 * to the values of its 8-bit or bfloat16 copy, as a file's widened view
 * holds them (model/quant.h). */
static void widen_into(float *W, const tfm_matrix *m, int K, int N, int trans)
{
    const int8_t *q = m->data;
    const uint16_t *w16 = m->data;
    for (int j = 0; j < N; j++)
        for (int i = 0; i < K; i++) {
            size_t at = trans ? (size_t)i * N + j : (size_t)j * K + i;
            W[at] = m->dtype == TFM_WEIGHTS_Q8_0
                        ? tfm_f16_to_f32(m->scale[(size_t)j * (K / TFM_Q8_BLOCK) +
                                                  i / TFM_Q8_BLOCK]) *
                              (float)q[(size_t)j * K + i]
                        : widen_bf16(w16[at]);
        }
}

/* Stored-only weights (lm/lm.h TFM_LM_STORED): a decoder whose block
 * matrices, wte and LM head exist only as 8-bit or bfloat16 copies decodes
 * to the bit as one that also has float32 weights of the same values: a
 * prompt past the gemv rows (its products widen each matrix in turn), the
 * embedding rows, the steps after it. */
static void stored_only_case(int q8, int tied)
{
    enum { V = 61, P = 13, NEW = 6 };
    tfm_model m;
    make_model(&m, TFM_LN_PRE, tied, 1, V);
    const int C = m.cfg.n_embd, F = tfm_model_config_ff(&m.cfg), nb = C / TFM_Q8_BLOCK;
    const int D = tfm_model_config_attn_dim(&m.cfg);
    tfm_weights w, s;
    tfm_err err = {0};
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    assert_true((q8 ? tfm_weights_to_q8 : tfm_weights_to_bf16)(&w, &m.cfg) > 0);
    /* wte's copy: the head's when tied, else made here */
    float *wte = (float *)w.dec.wte.f32;
    int8_t *eq = NULL;
    uint16_t *ed = NULL, *e16 = NULL;
    tfm_matrix wte_m = w.lm_head;
    if (!tied && q8) {
        eq = malloc((size_t)V * C);
        ed = malloc(sizeof *ed * V * nb);
        float d[8];
        assert_true(nb <= 8);
        for (int v = 0; v < V; v++) {
            tfm_q8_quantize(eq + (size_t)v * C, d, wte + (size_t)v * C, C);
            for (int b = 0; b < nb; b++)
                ed[v * nb + b] = tfm_f32_to_f16(d[b]);
        }
        wte_m = (tfm_matrix){NULL, TFM_WEIGHTS_Q8_0, eq, ed};
    } else if (!tied) {
        e16 = malloc(sizeof *e16 * V * C);
        for (int i = 0; i < V * C; i++)
            e16[i] = round_bf16(wte[i]);
        wte_m = (tfm_matrix){NULL, TFM_WEIGHTS_BF16, e16, NULL};
    }
    wte_m.f32 = NULL;
    /* the float32 weights get the copies' values; s has the copies alone */
    s = w;
    s.layers = malloc(sizeof *s.layers * (size_t)w.n_layer);
    s.bf16_store = NULL;
    s.q8_store = NULL;
    int stored = 0;
    for (int l = 0; l < w.n_layer; l++) {
        tfm_layer_weights *L = &w.layers[l], *S = &s.layers[l];
        *S = *L;
        tfm_matrix *f[5] = {&S->qkv_w, &S->proj_w, &S->fc_w, &S->fc1_w, &S->fcp_w};
        const int K[5] = {C, D, C, C, F}, N[5] = {3 * D, C, F, F, C};
        for (int k = 0; k < 5; k++) {
            /* no gate, or an input not whole 8-bit blocks: no copy, floats stay */
            if (!f[k]->f32 || f[k]->dtype == TFM_WEIGHTS_F32)
                continue;
            assert_int_equal(f[k]->dtype, q8 ? TFM_WEIGHTS_Q8_0 : TFM_WEIGHTS_BF16);
            widen_into((float *)f[k]->f32, f[k], K[k], N[k], 1);
            f[k]->f32 = NULL;
            stored++;
        }
    }
    assert_true(stored >= 3 * w.n_layer);
    widen_into(wte, &wte_m, C, V, 0);
    if (!tied)
        widen_into((float *)w.lm_head.f32, &w.lm_head, C, V, 0);
    s.lm_head.f32 = NULL;
    s.dec.wte = wte_m;

    tfm_infer a, b;
    assert_int_equal(tfm_infer_init(&a, &m.cfg, &w, 1, P + NEW, &err), 0);
    assert_int_equal(tfm_infer_init(&b, &m.cfg, &s, 1, P + NEW, &err), 0);
    const uint32_t prompt[P] = {3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32, 38};
    float la[V], lb[V];
    assert_int_equal(tfm_infer_prefill(&a, 0, prompt, P, la, &err), 0);
    assert_int_equal(tfm_infer_prefill(&b, 0, prompt, P, lb, &err), 0);
    assert_memory_equal(la, lb, sizeof la);
    int slot = 0;
    for (int t = 0; t < NEW; t++) {
        uint32_t tok = argmax(la, V);
        assert_int_equal(tfm_infer_step(&a, 1, &tok, &slot, la, &err), 0);
        assert_int_equal(tfm_infer_step(&b, 1, &tok, &slot, lb, &err), 0);
        assert_memory_equal(la, lb, sizeof la);
    }
    /* the widened values are not the original weights: the prompt's
     * logits differ from those of the unrounded model */
    tfm_model m0;
    make_model(&m0, TFM_LN_PRE, tied, 1, V);
    tfm_weights w0;
    assert_int_equal(tfm_weights_from_model(&w0, &m0, &err), 0);
    tfm_infer c;
    assert_int_equal(tfm_infer_init(&c, &m0.cfg, &w0, 1, P, &err), 0);
    float l0[V];
    assert_int_equal(tfm_infer_prefill(&c, 0, prompt, P, l0, &err), 0);
    assert_memory_not_equal(l0, lb, sizeof l0);
    tfm_infer_free(&c);
    tfm_weights_free(&w0);
    tfm_model_free(&m0);

    tfm_infer_free(&a);
    tfm_infer_free(&b);
    /* 8-bit copies of stored-only weights (tfm-generate --q8): a bfloat16
     * matrix quantizes as its float32 values do; an 8-bit one keeps its own */
    if (!q8) {
        size_t nw = tfm_weights_to_q8(&w, &m.cfg);
        assert_int_equal(tfm_weights_to_q8(&s, &m.cfg), nw);
        assert_memory_equal(w.q8_store, s.q8_store, nw);
    } else {
        const void *had = s.layers[1].fc_w.data;
        assert_int_equal(tfm_weights_to_q8(&s, &m.cfg), 0);
        assert_ptr_equal(s.layers[1].fc_w.data, had);
    }
    tfm_weights_free(&s); /* its layers and 8-bit copies; w owns the rest */
    free(eq);
    free(ed);
    free(e16);
    tfm_weights_free(&w);
    tfm_model_free(&m);
}

static void test_stored_only(void **state)
{
    for (int q8 = 0; q8 <= 1; q8++)
        for (int tied = 0; tied <= 1; tied++)
            stored_only_case(q8, tied);
}

static void test_bad_token(void **state)
{
    tfm_model m;
    make_model(&m, TFM_LN_PRE, 1, 1, 20);
    tfm_weights w;
    tfm_err err = {0};
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    tfm_infer g;
    assert_int_equal(tfm_infer_init(&g, &m.cfg, &w, 1, 8, &err), 0);
    const uint32_t bad[] = {1, 20};
    float lg[20];
    assert_int_equal(tfm_infer_prefill(&g, 0, bad, 2, lg, &err), -1);
    assert_non_null(strstr(err.msg, "vocabulary"));
    const uint32_t longp[9] = {0};
    assert_int_equal(tfm_infer_prefill(&g, 0, longp, 9, lg, &err), -1);
    assert_non_null(strstr(err.msg, "context length"));
    tfm_infer_free(&g);
    tfm_weights_free(&w);
    tfm_model_free(&m);
}

/* The packed whole-sequence forward (model/forward.h) of rows of unequal
 * length, weights packed or not, against the training forward of each row
 * alone: a decoder's logits through its head, an encoder's top layer. */
static void packed_case(tfm_kind kind, tfm_ln_place ln)
{
    enum { V = 23, C = 32, L0 = 7, L1 = 4 };
    tfm_model_config c;
    tfm_model_config_default(&c);
    c.kind = kind;
    c.pos = kind == TFM_KIND_ENCODER ? TFM_POS_T5 : TFM_POS_ALIBI;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = C;
    c.d_ff = 24;
    c.block_size = 16;
    c.vocab_size = V;
    c.ln = ln;
    c.emb_norm = kind == TFM_KIND_ENCODER;
    apply_kinds(&c);
    tfm_model m;
    tfm_err err = {0};
    assert_int_equal(tfm_model_init(&m, &c, &err), 0);
    tfm_model_init_weights(&m, 41);
    for (int i = 0; i < m.n_table; i++) /* away from the near-linear regime */
        if (m.table[i].ndim == 2)
            for (size_t j = 0; j < m.table[i].numel; j++)
                m.params[m.table[i].offset + j] *= 10.0f;
    tfm_model_set_inference(&m);
    tfm_weights w;
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    uint32_t tok[L0 + L1];
    for (int i = 0; i < L0 + L1; i++)
        tok[i] = (uint32_t)((i * 7 + 3) % V);
    const int len[2] = {L0, L1};
    float top[(L0 + L1) * C];
    float *hidden[3] = {NULL, NULL, top};
    for (int packed = 0; packed < 2; packed++) {
        tfm_fwd f;
        assert_int_equal(tfm_fwd_init(&f, &c, &w, TFM_FWD_MAIN, &err), 0);
        if (packed)
            tfm_fwd_pack_weights(&f);
        tfm_fwd_batch b = {.n = 2, .len = len, .tok = tok, .hidden = hidden};
        assert_int_equal(tfm_fwd_run(&f, &b, &err), 0);
        for (int s = 0, r0 = 0; s < 2; r0 += len[s], s++) {
            int32_t in[L0];
            for (int i = 0; i < len[s]; i++)
                in[i] = (int32_t)tok[r0 + i];
            assert_int_equal(tfm_model_forward(&m, in, NULL, 1, len[s], NULL, &err), 0);
            const float *ref = tfm_model_logits(&m);
            for (int i = 0; i < len[s]; i++) {
                float got[V];
                for (int v = 0; v < V; v++) {
                    float d = 0;
                    for (int k = 0; k < C; k++)
                        d += top[(size_t)(r0 + i) * C + k] * w.lm_head.f32[(size_t)v * C + k];
                    got[v] = d;
                }
                assert_close(got, ref + (size_t)i * V, V);
            }
        }
        tfm_fwd_free(&f);
    }
    tfm_weights_free(&w);
    tfm_model_free(&m);
}

/* RMSNorm, GEGLU, SwiGLU and unscaled attention through the three paths
 * that apply a block: the cached decode step (decoders, and the decoder of
 * an encoder-decoder over its encoder's packed forward) and the packed
 * forward (decoders, encoders) each equal the training forward, pre- and
 * post-norm; the bfloat16 copies cover wi_1. */
static void test_block_kinds(void **state)
{
    (void)state;
    const struct {
        tfm_norm_kind norm;
        tfm_ffn_kind ffn;
        int unscaled;
    } kinds[] = {{TFM_NORM_RMS, TFM_FFN_PLAIN, 0}, {TFM_NORM_LAYER, TFM_FFN_GEGLU, 0},
                 {TFM_NORM_LAYER, TFM_FFN_SWIGLU, 1}, {TFM_NORM_RMS, TFM_FFN_GEGLU, 1}};
    kind_scale = 8.0f;
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        kind_norm = kinds[k].norm;
        kind_ffn = kinds[k].ffn;
        kind_unscaled = kinds[k].unscaled;
        greedy_case_pos(TFM_LN_PRE, 1, 1, k % 2 ? TFM_POS_T5 : TFM_POS_ROPE, 1);
        greedy_case_pos(TFM_LN_POST, 0, (int)(k % 2), TFM_POS_LEARNED, 1);
        encdec_case(k % 2 ? TFM_POS_T5 : TFM_POS_SINUSOIDAL, 0);
        encdec_case(TFM_POS_LEARNED, 1);
        packed_case(TFM_KIND_DECODER, TFM_LN_PRE);
        packed_case(TFM_KIND_ENCODER, TFM_LN_POST);
        packed_case(TFM_KIND_ENCODER, TFM_LN_PRE);
    }
    /* bfloat16 decode of a gated model */
    kind_norm = TFM_NORM_RMS;
    kind_ffn = TFM_FFN_SWIGLU;
    kind_unscaled = 1;
    test_bf16_close(state);
    kind_norm = TFM_NORM_LAYER;
    kind_ffn = TFM_FFN_PLAIN;
    kind_unscaled = 0;
    kind_scale = 20.0f;
}

/* Heads of another total width than n_embd (n_head·head_dim < and > C, as
 * flan-t5-small's 6·64 over 512): the cached step, the encoder-decoder's
 * cross-attention cache and the packed forward equal the training forward,
 * and the bfloat16 and 8-bit copies stay close to it. */
static void test_head_dim(void **state)
{
    (void)state;
    /* over n_embd 32: 24, 40 and 64 wide (whole 8-bit blocks: o in 8 bits too) */
    const int shapes[][2] = {{3, 8}, {2, 20}, {4, 16}};
    kind_scale = 8.0f;
    for (size_t k = 0; k < 3; k++) {
        kind_n_head = shapes[k][0];
        kind_head_dim = shapes[k][1];
        kind_norm = k % 2 ? TFM_NORM_RMS : TFM_NORM_LAYER;
        kind_ffn = k % 2 ? TFM_FFN_GEGLU : TFM_FFN_PLAIN;
        kind_unscaled = (int)(k % 2);
        test_stored_only(state); /* widths D: the stored-only prompt pass */
        greedy_case_pos(TFM_LN_PRE, 1, 1, TFM_POS_ROPE, 1);
        greedy_case_pos(TFM_LN_POST, 0, 0, TFM_POS_T5, 1);
        encdec_case(TFM_POS_T5, 0);
        encdec_case(TFM_POS_LEARNED, 1);
        packed_case(TFM_KIND_DECODER, TFM_LN_PRE);
        packed_case(TFM_KIND_ENCODER, TFM_LN_POST);
        test_bf16_close(state);
        /* 8 bits for the LayerNorm kinds (with RMSNorm and unscaled scores
         * these random models are too touchy for its bound: bfloat16's
         * error alone reaches 0.13 of the largest logit at ×20) */
        if (k % 2 == 0)
            test_q8_close(state);
    }
    kind_n_head = kind_head_dim = 0;
    kind_norm = TFM_NORM_LAYER;
    kind_ffn = TFM_FFN_PLAIN;
    kind_unscaled = 0;
    kind_scale = 20.0f;
}

static void prefix_case(tfm_pos pos, tfm_ln_place ln);

/* Grouped-query and multi-query attention (model.n_kv_head 2 and 1 under
 * 4 query heads, of 8 and 16 columns): the cache holds n_kv_head heads,
 * and the cached step (greedy, batched, prefix-LM, the encoder-decoder's
 * cross-attention cache, the stored-only prompt pass), the packed
 * forward, and the bfloat16 and 8-bit copies behave as for full heads. */
static void test_kv_heads(void **state)
{
    (void)state;
    const int shapes[][3] = {{4, 8, 2}, {4, 16, 1}};
    for (size_t k = 0; k < 2; k++) {
        kind_n_head = shapes[k][0];
        kind_head_dim = shapes[k][1];
        kind_n_kv_head = shapes[k][2];
        kind_scale = 8.0f;
        /* the cache is n_kv_head heads wide */
        tfm_model m;
        make_model(&m, TFM_LN_PRE, 1, 1, 17);
        tfm_weights w;
        tfm_err err = {0};
        assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
        tfm_infer g;
        assert_int_equal(tfm_infer_init(&g, &m.cfg, &w, 1, 8, &err), 0);
        assert_int_equal((int)g.kv_width, kind_n_kv_head * kind_head_dim);
        tfm_infer_free(&g);
        tfm_weights_free(&w);
        tfm_model_free(&m);
        test_stored_only(state);
        greedy_case_pos(TFM_LN_PRE, 1, 1, TFM_POS_ROPE, 1);
        greedy_case_pos(TFM_LN_POST, 0, 0, TFM_POS_ALIBI, 1);
        encdec_case(TFM_POS_T5, 0);
        encdec_case(TFM_POS_LEARNED, 1);
        packed_case(TFM_KIND_DECODER, TFM_LN_PRE);
        packed_case(TFM_KIND_ENCODER, TFM_LN_POST);
        test_batch_equals_single(state);
        test_bf16_close(state);
        test_q8_close(state);
        prefix_case(TFM_POS_ROPE, TFM_LN_PRE);
        prefix_case(TFM_POS_T5, TFM_LN_POST);
    }
    kind_n_head = kind_head_dim = kind_n_kv_head = 0;
    kind_scale = 20.0f;
}

/* A prefix LM (train.task prefix-lm): the prompt's prefix prefilled with
 * tfm_infer_prefill_prefix, then causal steps, gives at every position the
 * logits of the training forward with tfm_batch.prefix_len, to 1e-5
 * (relative to the logit's size); and they differ from the causal
 * forward's, so the prefix is really seen. */
static void prefix_case(tfm_pos pos, tfm_ln_place ln)
{
    enum { V = 29, N = 14, P = 6 };
    tfm_model m;
    kind_scale = 4.0f; /* moderate logits: the 1e-5 is then a real bound */
    make_model_pos(&m, ln, 1, 1, V, pos);
    kind_scale = 20.0f;
    tfm_weights w;
    tfm_err err = {0};
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    uint32_t seq[N];
    int32_t in[N];
    for (int i = 0; i < N; i++)
        in[i] = (int32_t)(seq[i] = (uint32_t)((i * 11 + 5) % V));
    /* the training forward, prefix mask and causal */
    const int plen = P;
    float ref[N * V], causal[N * V];
    tfm_batch b = {.inputs = in, .B = 1, .T = N, .prefix_len = &plen};
    assert_int_equal(tfm_model_forward_batch(&m, &b, NULL, &err), 0);
    memcpy(ref, tfm_model_logits(&m), sizeof ref);
    assert_int_equal(tfm_model_forward(&m, in, NULL, 1, N, NULL, &err), 0);
    memcpy(causal, tfm_model_logits(&m), sizeof causal);
    double diff = 0;
    for (int i = 0; i < N * V; i++)
        diff = fmax(diff, fabs(ref[i] - causal[i]));
    assert_true(diff > 1e-2);
    for (int whole = 0; whole < 2; whole++) {
        tfm_infer g;
        assert_int_equal(tfm_infer_init(&g, &m.cfg, &w, 2, N, &err), 0);
        float lg[V];
        /* the prompt is the prefix, or the whole sequence at once */
        int n0 = whole ? N : P;
        assert_int_equal(tfm_infer_prefill_prefix(&g, 1, seq, n0, P, lg, &err), 0);
        for (int t = n0 - 1; t < N; t++) {
            const float *r = ref + (size_t)t * V;
            for (int v = 0; v < V; v++)
                if (!(fabsf(lg[v] - r[v]) <= 1e-5f * (1.0f + fabsf(r[v]))))
                    fail_msg("pos %d logit %d: cache %.9g, full %.9g", t, v, lg[v], r[v]);
            if (t + 1 < N) {
                int slot = 1;
                assert_int_equal(tfm_infer_step(&g, 1, &seq[t + 1], &slot, lg, &err), 0);
            }
        }
        /* a copied slot keeps its prefix; a reset one is causal again */
        tfm_infer_reset(&g, 0);
        assert_int_equal(tfm_infer_prefill_prefix(&g, 0, seq, P, P, lg, &err), 0);
        tfm_infer_copy_slot(&g, 1, 0);
        assert_int_equal(g.prefix[1], P);
        tfm_infer_reset(&g, 1);
        assert_int_equal(g.prefix[1], 0);
        assert_int_equal(tfm_infer_prefill(&g, 1, seq, 3, lg, &err), 0);
        for (int v = 0; v < V; v++)
            assert_true(fabsf(lg[v] - causal[2 * V + v]) <= 1e-5f * (1.0f + fabsf(lg[v])));
        /* a prefix starts a sequence */
        assert_int_equal(tfm_infer_prefill_prefix(&g, 1, seq, 2, 2, lg, &err), -1);
        assert_non_null(strstr(err.msg, "starts a sequence"));
        tfm_infer_free(&g);
    }
    tfm_weights_free(&w);
    tfm_model_free(&m);
}

static void test_prefix_cache_equals_full(void **state)
{
    (void)state;
    const tfm_pos all[] = {TFM_POS_LEARNED, TFM_POS_SINUSOIDAL, TFM_POS_ROPE, TFM_POS_ALIBI,
                           TFM_POS_T5};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        prefix_case(all[i], TFM_LN_PRE);
        prefix_case(all[i], TFM_LN_POST);
    }
}

/* A sliding window's rolling cache (ring of window + chunk positions)
 * against the whole cache: a prompt prefilled across chunks, then steps
 * far past the ring, on two slots (one a copy), give the same logits to
 * the bit, in less memory; a prefix longer than a chunk is refused. */
static void rolling_case(tfm_pos pos)
{
    enum { V = 23, W = 5, N0 = 150, STEPS = 100, MAX = 300 };
    tfm_model m;
    kind_scale = 4.0f;
    tfm_model_config c;
    make_model_pos(&m, TFM_LN_PRE, 1, 1, V, pos);
    c = m.cfg;
    c.window = W;
    tfm_model_free(&m);
    tfm_err err = {0};
    assert_int_equal(tfm_model_init(&m, &c, &err), 0);
    tfm_model_init_weights(&m, 77 + (uint64_t)pos);
    kind_scale = 20.0f;
    tfm_weights w;
    assert_int_equal(tfm_weights_from_model(&w, &m, &err), 0);
    tfm_infer ring, whole;
    assert_int_equal(tfm_infer_init(&ring, &m.cfg, &w, 2, MAX, &err), 0);
    assert_int_equal(tfm_infer_init_cache(&whole, &m.cfg, &w, 2, MAX, 0, &err), 0);
    assert_int_equal(ring.ring, W + 64);
    assert_int_equal(whole.ring, 0);
    assert_true(tfm_infer_bytes(&ring) < tfm_infer_bytes(&whole));
    uint32_t seq[N0 + STEPS];
    for (int i = 0; i < N0 + STEPS; i++)
        seq[i] = (uint32_t)((i * 7 + i / 3) % V);
    float a[2 * V], b[2 * V];
    assert_int_equal(tfm_infer_prefill(&ring, 0, seq, N0, a, &err), 0);
    assert_int_equal(tfm_infer_prefill(&whole, 0, seq, N0, b, &err), 0);
    assert_memory_equal(a, b, sizeof(float) * V);
    tfm_infer_copy_slot(&ring, 1, 0);
    tfm_infer_copy_slot(&whole, 1, 0);
    for (int t = 0; t < STEPS; t++) {
        const uint32_t tok[2] = {seq[N0 + t], seq[(N0 + 3 * t) % (N0 + STEPS)]};
        const int slots[2] = {0, 1};
        assert_int_equal(tfm_infer_step(&ring, 2, tok, slots, a, &err), 0);
        assert_int_equal(tfm_infer_step(&whole, 2, tok, slots, b, &err), 0);
        for (int v = 0; v < 2 * V; v++)
            if (a[v] != b[v])
                fail_msg("step %d logit %d: ring %.9g, whole cache %.9g", t, v, a[v], b[v]);
    }
    tfm_infer_reset(&ring, 0);
    assert_int_equal(tfm_infer_prefill_prefix(&ring, 0, seq, 80, 70, a, &err), -1);
    assert_non_null(strstr(err.msg, "prefix"));
    tfm_infer_free(&ring);
    tfm_infer_free(&whole);
    tfm_weights_free(&w);
    tfm_model_free(&m);
}

static void test_rolling_cache(void **state)
{
    (void)state;
    rolling_case(TFM_POS_ROPE);
    rolling_case(TFM_POS_ALIBI);
    rolling_case(TFM_POS_T5);
}

static int setup(void **state)
{
    tfm_blas_init(2);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemv_rows),
        cmocka_unit_test(test_gemv_rows_bf16),
        cmocka_unit_test(test_bf16_close),
        cmocka_unit_test(test_q8_close),
        cmocka_unit_test(test_q8_prompt_equals_steps),
        cmocka_unit_test(test_bf16_prefetch_hint),
        cmocka_unit_test(test_stored_only),
        cmocka_unit_test(test_greedy_cache_equals_full),
        cmocka_unit_test(test_positions_cache_equals_full),
        cmocka_unit_test(test_past_block_size),
        cmocka_unit_test(test_encoder_decoder_cache),
        cmocka_unit_test(test_batch_equals_single),
        cmocka_unit_test(test_bad_token),
        cmocka_unit_test(test_block_kinds),
        cmocka_unit_test(test_prefix_cache_equals_full),
        cmocka_unit_test(test_head_dim),
        cmocka_unit_test(test_kv_heads),
        cmocka_unit_test(test_rolling_cache),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
