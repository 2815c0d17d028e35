#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "model/transformer.h"
#include "tensor/gemm.h"
#include "tensor/gradcheck.h"

enum { B_ = 2, T_ = 5 };

struct ctx {
    tfm_model m;
    int32_t x[B_ * T_], y[B_ * T_], src[B_ * 8];
    tfm_rng rng0; /* dropout stream restored before every forward */
    tfm_batch batch; /* x, y and the masks' and embeddings' extras */
};

/* Extras a batch may carry (NULL members: none). */
typedef struct extras {
    const int32_t *segments;
    const int *lengths, *prefix_len, *doc_start;
    int S;                  /* encoder-decoders: a random source of S ≤ 8 positions */
    const int *src_lengths;
    /* the heads' targets (tfm_batch) */
    const int *cls_pos;
    const int32_t *labels, *tags, *span_start, *span_end;
    const float *values;
    float lm_weight;
    int lm_every;           /* LM targets only at every k-th position (MLM) */
    int no_lm;              /* no LM targets at all */
    int recompute;          /* the feed-forward's middle recomputed in backward */
    float scale;            /* of the random weights; 0: 0.4 */
} extras;

static double model_loss(void *p)
{
    struct ctx *c = p;
    float loss;
    tfm_err err = {0};
    c->m.rng = c->rng0;
    if (tfm_model_forward_batch(&c->m, &c->batch, &loss, &err) < 0)
        fail_msg("%s", err.msg);
    return loss;
}

static void small_config(tfm_model_config *cfg)
{
    tfm_model_config_default(cfg);
    cfg->n_layer = 2;
    cfg->n_head = 2;
    cfg->n_embd = 8;
    cfg->block_size = 6;
    cfg->vocab_size = 7;
}

/* Large random weights, so every path (attention, activation tails) is
 * exercised away from its linear regime. */
static void random_weights_scaled(tfm_model *m, uint64_t seed, float scale);

static void random_weights(tfm_model *m, uint64_t seed)
{
    random_weights_scaled(m, seed, 0.4f);
}

static void random_weights_scaled(tfm_model *m, uint64_t seed, float scale)
{
    tfm_rng r;
    tfm_rng_seed(&r, seed);
    for (int i = 0; i < m->n_table; i++) {
        const tfm_param *p = &m->table[i];
        float *w = m->params + p->offset;
        int ln_w = strstr(p->name, "ln_") && strstr(p->name, ".weight");
        for (size_t j = 0; j < p->numel; j++)
            w[j] = ln_w ? 1.0f + 0.2f * tfm_rng_normal(&r) : scale * tfm_rng_normal(&r);
    }
}

static void check_model_with(const tfm_model_config *cfg, int ignore_one, const extras *ex)
{
    struct ctx c;
    tfm_err err = {0};
    c.batch = (tfm_batch){.inputs = c.x, .targets = c.y, .B = B_, .T = T_};
    if (ex) {
        c.batch.segments = ex->segments;
        c.batch.lengths = ex->lengths;
        c.batch.prefix_len = ex->prefix_len;
        c.batch.doc_start = ex->doc_start;
        c.batch.S = ex->S;
        c.batch.src = ex->S ? c.src : NULL;
        c.batch.src_lengths = ex->src_lengths;
        c.batch.cls_pos = ex->cls_pos;
        c.batch.labels = ex->labels;
        c.batch.values = ex->values;
        c.batch.tags = ex->tags;
        c.batch.span_start = ex->span_start;
        c.batch.span_end = ex->span_end;
        c.batch.lm_weight = ex->lm_weight;
        if (ex->no_lm)
            c.batch.targets = NULL;
    }
    assert_int_equal(tfm_model_init(&c.m, cfg, &err), 0);
    c.m.recompute = ex && ex->recompute;
    random_weights_scaled(&c.m, 7, ex && ex->scale > 0 ? ex->scale : 0.4f);
    tfm_rng r;
    tfm_rng_seed(&r, 11);
    for (int i = 0; i < B_ * T_; i++) {
        c.x[i] = (int32_t)tfm_rng_below(&r, cfg->vocab_size);
        c.y[i] = (int32_t)tfm_rng_below(&r, cfg->vocab_size);
    }
    for (int i = 0; ex && i < B_ * ex->S; i++)
        c.src[i] = (int32_t)tfm_rng_below(&r, tfm_model_config_src_vocab(cfg));
    if (ignore_one)
        c.y[3] = -1;
    for (int i = 0; ex && ex->lm_every && i < B_ * T_; i++)
        if (i % ex->lm_every != 1)
            c.y[i] = -1;
    tfm_model_set_training(&c.m, cfg->dropout > 0.0f || cfg->ffn_dropout > 0.0f ||
                                     cfg->final_dropout > 0.0f);
    tfm_rng_seed(&c.rng0, 5);
    model_loss(&c);
    tfm_model_zero_grad(&c.m);
    tfm_model_backward(&c.m, 1.0f);
    float *g = malloc(c.m.n_params * sizeof(float));
    memcpy(g, c.m.grads, c.m.n_params * sizeof(float));
    double worst = 0.0;
    for (int i = 0; i < c.m.n_table; i++) {
        const tfm_param *p = &c.m.table[i];
        if (p->frozen) { /* a LoRA model's base: no gradient at all */
            for (size_t j = 0; j < p->numel; j++)
                if (g[p->offset + j] != 0.0f)
                    fail_msg("%s is frozen but has a gradient", p->name);
            continue;
        }
        /* 3e-3: the large weights saturate some softmaxes, where 1e-2 leaves the
         * quadratic regime; much smaller, and the float loss's rounding dominates */
        double e = gc_check(p->name, model_loss, &c, c.m.params + p->offset, g + p->offset,
                            p->numel, 3e-3f, 24, 1e-2);
        if (e > 2e-2)
            print_error("%s: worst error %g (kind %d pos %d ln %d)\n", p->name, e, (int)cfg->kind,
                        (int)cfg->pos, (int)cfg->ln);
        worst = e > worst ? e : worst;
    }
    assert_true(worst < 2e-2);
    /* backward accumulates: a second pass doubles the gradients */
    model_loss(&c);
    tfm_model_backward(&c.m, 1.0f);
    for (size_t i = 0; i < c.m.n_params; i++)
        assert_true(fabsf(c.m.grads[i] - 2.0f * g[i]) <= 1e-6f + 1e-5f * fabsf(g[i]));
    /* and scale scales */
    tfm_model_zero_grad(&c.m);
    model_loss(&c);
    tfm_model_backward(&c.m, 0.5f);
    for (size_t i = 0; i < c.m.n_params; i++)
        assert_true(fabsf(c.m.grads[i] - 0.5f * g[i]) <= 1e-6f + 1e-5f * fabsf(g[i]));
    free(g);
    tfm_model_free(&c.m);
}

static void check_model(const tfm_model_config *cfg, int ignore_one)
{
    check_model_with(cfg, ignore_one, NULL);
}

/* A T5-like encoder-decoder over a padded 4-token source: one encoder
 * block, T5 buckets, RMSNorm, no biases; weights of 0.3 (RMSNorm, after
 * dropout too, on rows this short leaves the finite differences' quadratic
 * regime at 0.4). */
static void t5_like(tfm_model_config *cfg, extras *ex)
{
    static const int src_lengths[B_] = {4, 2};
    cfg->kind = TFM_KIND_ENCODER_DECODER;
    cfg->n_enc_layer = 1;
    cfg->pos = TFM_POS_T5;
    cfg->t5_buckets = 8;
    cfg->t5_max_distance = 16;
    cfg->norm = TFM_NORM_RMS;
    cfg->bias = 0;
    ex->scale = 0.3f;
    ex->S = 4;
    ex->src_lengths = src_lengths;
}

/* Every position scheme, in decoders (plain, prefix-LM, packed documents)
 * and encoders (padding, segments, the embedding norm), against finite
 * differences of the whole model's loss. */
static void test_positions_and_masks(void **state)
{
    (void)state;
    const tfm_pos all[] = {TFM_POS_LEARNED, TFM_POS_SINUSOIDAL, TFM_POS_ROPE, TFM_POS_ALIBI,
                           TFM_POS_T5};
    const int prefix[B_] = {2, 0};
    const int docs[B_ * T_] = {0, 0, 2, 2, 2, 0, 1, 1, 3, 3};
    const int lengths[B_] = {5, 3};
    const int32_t seg[B_ * T_] = {0, 0, 1, 1, 1, 0, 1, 1, 0, 0};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        tfm_model_config cfg;
        small_config(&cfg);
        cfg.pos = all[i];
        cfg.d_ff = 12;
        cfg.t5_buckets = 8;
        cfg.t5_max_distance = 16;
        check_model(&cfg, 0);
        check_model_with(&cfg, 0, &(extras){.prefix_len = prefix});
        check_model_with(&cfg, 1, &(extras){.doc_start = docs});
        cfg.kind = TFM_KIND_ENCODER;
        cfg.ln = TFM_LN_POST;
        cfg.n_segments = 2;
        cfg.emb_norm = 1;
        cfg.act = TFM_ACT_GELU_EXACT;
        check_model_with(&cfg, 1, &(extras){.lengths = lengths, .segments = seg});
    }
}

/* The heads (model/transformer.h): BERT's MLM head with NSP on a pooler,
 * regression, tagger, span, a decoder's classifier on its last token with
 * λ·LM; alone and together, with padding. */
static void test_heads(void **state)
{
    (void)state;
    const int lengths[B_] = {5, 3};
    const int32_t seg[B_ * T_] = {0, 0, 1, 1, 1, 0, 1, 1, 0, 0};
    const int32_t labels[B_] = {1, 0}, tags[B_ * T_] = {0, 2, -1, 1, 2, 1, 0, 2, -1, -1};
    const int32_t s0[B_] = {1, 2}, e0[B_] = {3, 2}, s1[B_] = {-1, 0}, e1[B_] = {-1, 1};
    const float values[B_] = {0.7f, -1.3f};
    const int last[B_] = {4, 2};
    tfm_model_config cfg;
    small_config(&cfg);
    cfg.kind = TFM_KIND_ENCODER;
    cfg.ln = TFM_LN_POST;
    cfg.n_segments = 2;
    cfg.emb_norm = 1;
    cfg.act = TFM_ACT_GELU_EXACT;
    /* BERT pre-training: MLM at a few positions + NSP */
    cfg.mlm_head = 1;
    cfg.pooler = 1;
    cfg.n_classes = 2;
    cfg.nsp = 1;
    check_model_with(&cfg, 0, &(extras){.lengths = lengths, .segments = seg, .labels = labels,
                                        .lm_every = 3});
    /* untied decoder, MLM only */
    cfg.tie_embeddings = 0;
    check_model_with(&cfg, 0, &(extras){.lengths = lengths, .segments = seg, .lm_every = 4});
    cfg.tie_embeddings = 1;
    /* fine-tuning heads without LM targets */
    cfg.nsp = 0;
    cfg.n_classes = 1;
    check_model_with(&cfg, 0, &(extras){.lengths = lengths, .values = values, .no_lm = 1});
    /* the classifier on the mean of the unpadded positions, with and
     * without the pooler */
    cfg.n_classes = 3;
    cfg.pool_mean = 1;
    check_model_with(&cfg, 0, &(extras){.lengths = lengths, .labels = labels, .no_lm = 1});
    cfg.pooler = 0;
    check_model_with(&cfg, 0, &(extras){.lengths = lengths, .labels = labels, .no_lm = 1});
    cfg.pool_mean = 0;
    cfg.pooler = 1;
    cfg.mlm_head = 0;
    cfg.pooler = 0;
    cfg.n_tags = 3;
    cfg.span = 1;
    check_model_with(&cfg, 0, &(extras){.lengths = lengths, .tags = tags, .no_lm = 1});
    check_model_with(&cfg, 0, &(extras){.lengths = lengths, .span_start = s0, .span_end = e0,
                                        .labels = labels, .no_lm = 1});
    check_model_with(&cfg, 0, &(extras){.span_start = s1, .span_end = e1, .no_lm = 1});
    /* a factorised embedding (ALBERT's, ELECTRA's): tables E wide,
     * narrower and wider than C, with dropout before emb_proj; the MLM
     * head maps back to E, tied and untied; the pooler's GELU (ELECTRA's
     * classification head; DistilBERT's ReLU has kinks finite differences
     * cannot follow) */
    const int widths[] = {5, 12, 8};
    for (int i = 0; i < 3; i++) {
        small_config(&cfg);
        cfg.kind = TFM_KIND_ENCODER;
        cfg.ln = TFM_LN_POST;
        cfg.n_segments = 2;
        cfg.emb_norm = 1;
        cfg.act = TFM_ACT_GELU_EXACT;
        cfg.emb_dim = widths[i];
        cfg.mlm_head = 1;
        cfg.dropout = i ? 0.1f : 0.0f;
        check_model_with(&cfg, 0, &(extras){.lengths = lengths, .segments = seg,
                                            .lm_every = 3});
        cfg.tie_embeddings = 0;
        check_model_with(&cfg, 0, &(extras){.lengths = lengths, .segments = seg,
                                            .lm_every = 2});
        cfg.tie_embeddings = 1;
        cfg.mlm_head = 0;
        cfg.dropout = 0.0f;
        cfg.pooler = 1;
        cfg.pooler_act = TFM_POOL_GELU;
        cfg.n_classes = 3;
        check_model_with(&cfg, 0, &(extras){.lengths = lengths, .labels = labels, .no_lm = 1});
    }
    /* GPT fine-tuning: classifier on the last token + 0.5·LM */
    small_config(&cfg);
    cfg.n_classes = 2;
    check_model_with(&cfg, 1, &(extras){.cls_pos = last, .labels = labels, .lm_weight = 0.5f});
    /* and on the mean of the tokens up to the last */
    cfg.pool_mean = 1;
    check_model_with(&cfg, 1, &(extras){.cls_pos = last, .labels = labels, .no_lm = 1});
}

/* The heads' own config checks (model/head_*.c), and heads on a kind that
 * has none. */
static void test_head_config(void **state)
{
    (void)state;
    tfm_model_config cfg;
    tfm_err err;
    small_config(&cfg);
    cfg.n_classes = 3;
    cfg.nsp = 1;
    assert_int_equal(tfm_model_config_check(&cfg, &err), -1);
    assert_non_null(strstr(err.msg, "has 2 classes, not 3"));
    small_config(&cfg);
    cfg.n_tags = 70000;
    assert_int_equal(tfm_model_config_check(&cfg, &err), -1);
    assert_non_null(strstr(err.msg, "tags 70000 is out of range"));
    small_config(&cfg);
    cfg.emb_dim = 4; /* factorised embeddings are encoders' */
    assert_int_equal(tfm_model_config_check(&cfg, &err), -1);
    assert_non_null(strstr(err.msg, "embedding_size 4 (a factorised embedding) is for encoders"));
    small_config(&cfg);
    cfg.pool_mean = 1;
    assert_int_equal(tfm_model_config_check(&cfg, &err), -1);
    assert_non_null(strstr(err.msg, "pooling mean is for a classifier"));
    small_config(&cfg);
    cfg.mlm_head = cfg.head_bias = 1;
    assert_int_equal(tfm_model_config_check(&cfg, &err), -1);
    assert_non_null(strstr(err.msg, "the MLM head has its own bias"));
    small_config(&cfg);
    cfg.kind = TFM_KIND_ENCODER_DECODER;
    assert_int_equal(tfm_model_config_check(&cfg, &err), 0);
    cfg.span = 1;
    assert_int_equal(tfm_model_config_check(&cfg, &err), -1);
    assert_non_null(strstr(err.msg, "the span head is for encoders and decoders"));
    /* every head's tensors, in table order, after the LM head's */
    small_config(&cfg);
    cfg.kind = TFM_KIND_ENCODER;
    cfg.tie_embeddings = 0;
    cfg.mlm_head = cfg.pooler = cfg.span = 1;
    cfg.n_classes = 2;
    cfg.n_tags = 3;
    tfm_model m;
    assert_int_equal(tfm_model_init(&m, &cfg, &err), 0);
    const char *tail[] = {"lm_head.weight", "cls.predictions.transform.dense.weight",
                          "cls.predictions.transform.dense.bias",
                          "cls.predictions.transform.LayerNorm.weight",
                          "cls.predictions.transform.LayerNorm.bias", "cls.predictions.bias",
                          "pooler.dense.weight", "pooler.dense.bias", "classifier.weight",
                          "classifier.bias", "token_classifier.weight",
                          "token_classifier.bias", "qa_outputs.weight", "qa_outputs.bias"};
    int n = (int)(sizeof tail / sizeof *tail);
    assert_true(m.n_table > n);
    for (int i = 0; i < n; i++)
        assert_string_equal(m.table[m.n_table - n + i].name, tail[i]);
    tfm_model_free(&m);
}

/* Encoder-decoders: every position scheme, pre- and post-LN, three-way tied
 * and untied (a source vocabulary of its own), a padded source. */
static void test_encoder_decoder(void **state)
{
    (void)state;
    const tfm_pos all[] = {TFM_POS_LEARNED, TFM_POS_SINUSOIDAL, TFM_POS_ROPE, TFM_POS_ALIBI,
                           TFM_POS_T5};
    const int src_lengths[B_] = {4, 2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        for (int v = 0; v < 2; v++) {
            tfm_model_config cfg;
            small_config(&cfg);
            cfg.kind = TFM_KIND_ENCODER_DECODER;
            cfg.pos = all[i];
            cfg.n_enc_layer = 1;
            cfg.t5_buckets = 8;
            cfg.t5_max_distance = 16;
            cfg.ln = v ? TFM_LN_POST : TFM_LN_PRE;
            cfg.tie_embeddings = cfg.tie_source = !v;
            cfg.src_vocab_size = v ? 5 : 0;
            cfg.emb_norm = v;
            /* the √C scale with both the fused learned table and the
             * others */
            cfg.emb_scale = (int)(i % 2) == v;
            cfg.act = v ? TFM_ACT_GELU_EXACT : TFM_ACT_GELU_TANH;
            check_model_with(&cfg, v, &(extras){.S = 4, .src_lengths = v ? src_lengths : NULL});
        }
}

/* The block's kinds (nn/block.h): RMSNorm, GEGLU and SwiGLU, unscaled
 * attention (and T5's scaled head), alone and together, in decoders, encoders and
 * encoder-decoders, pre- and post-norm, with and without linear biases, the
 * gated middle kept and recomputed. */
static void test_block_kinds(void **state)
{
    (void)state;
    const int lengths[B_] = {5, 3}, src_lengths[B_] = {4, 2};
    const int32_t seg[B_ * T_] = {0, 0, 1, 1, 1, 0, 1, 1, 0, 0};
    const struct {
        tfm_norm_kind norm;
        tfm_ffn_kind ffn;
        int unscaled, post, bias;
    } kinds[] = {
        {TFM_NORM_RMS, TFM_FFN_PLAIN, 0, 0, 1},  {TFM_NORM_LAYER, TFM_FFN_GEGLU, 0, 0, 1},
        {TFM_NORM_LAYER, TFM_FFN_SWIGLU, 0, 1, 0}, {TFM_NORM_LAYER, TFM_FFN_PLAIN, 1, 0, 1},
        {TFM_NORM_RMS, TFM_FFN_GEGLU, 1, 0, 0},  {TFM_NORM_RMS, TFM_FFN_SWIGLU, 1, 1, 1},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        for (int kind = 0; kind < 3; kind++) {
            tfm_model_config cfg;
            small_config(&cfg);
            cfg.norm = kinds[k].norm;
            cfg.ffn = kinds[k].ffn;
            cfg.attn_unscaled = kinds[k].unscaled;
            cfg.ln = kinds[k].post ? TFM_LN_POST : TFM_LN_PRE;
            cfg.bias = kinds[k].bias;
            cfg.d_ff = 12;
            cfg.pos = k % 2 ? TFM_POS_T5 : TFM_POS_ROPE;
            cfg.t5_buckets = 8;
            cfg.t5_max_distance = 16;
            cfg.head_scale = k >= 3; /* T5's tied head: x·C^-0.5 */
            cfg.head_bias = k % 3 == 2; /* BART's final_logits_bias */
            /* weights of 0.3: RMSNorm keeps the mean and unscaled scores are
             * 2√2 times larger, so 0.4 saturates softmaxes where finite
             * differences leave their quadratic regime */
            extras ex = {.recompute = (int)(k % 3 == 1), .scale = 0.3f};
            if (kind == 0) {
                check_model_with(&cfg, (int)(k % 2), &ex);
            } else if (kind == 1) {
                cfg.kind = TFM_KIND_ENCODER;
                cfg.n_segments = 2;
                cfg.emb_norm = 1;
                ex.lengths = lengths;
                ex.segments = seg;
                check_model_with(&cfg, 1, &ex);
            } else {
                cfg.kind = TFM_KIND_ENCODER_DECODER;
                cfg.n_enc_layer = 1;
                cfg.emb_norm = (int)(k % 2);
                ex.S = 4;
                ex.src_lengths = src_lengths;
                check_model_with(&cfg, 0, &ex);
            }
        }
    }
    /* the table: rmsnorm has no norm biases, gated feed-forwards wi_0 and
     * wi_1 instead of c_fc */
    tfm_model_config cfg;
    small_config(&cfg);
    cfg.kind = TFM_KIND_ENCODER_DECODER;
    cfg.norm = TFM_NORM_RMS;
    cfg.ffn = TFM_FFN_SWIGLU;
    cfg.emb_norm = 1;
    tfm_model m;
    tfm_err err = {0};
    assert_int_equal(tfm_model_init(&m, &cfg, &err), 0);
    const char *absent[] = {"h.0.ln_1.bias", "h.0.ln_x.bias", "h.1.ln_2.bias", "ln_f.bias",
                            "enc.ln_f.bias", "ln_e.bias", "enc.ln_e.bias", "h.0.mlp.c_fc.weight"};
    for (size_t i = 0; i < sizeof absent / sizeof *absent; i++)
        assert_null(tfm_model_param(&m, absent[i]));
    const char *present[] = {"h.0.ln_1.weight", "ln_f.weight", "enc.ln_e.weight",
                             "h.1.mlp.wi_0.weight", "h.1.mlp.wi_0.bias", "enc.h.1.mlp.wi_1.weight",
                             "h.0.mlp.wi_1.bias", "h.0.mlp.c_proj.weight"};
    for (size_t i = 0; i < sizeof present / sizeof *present; i++)
        assert_non_null(tfm_model_param(&m, present[i]));
    const tfm_param *w1 = tfm_model_param(&m, "h.0.mlp.wi_1.weight");
    assert_int_equal(w1->shape[0], 8);
    assert_int_equal(w1->shape[1], 32);
    assert_int_equal(w1->decay, 1);
    assert_int_equal(tfm_model_param(&m, "h.0.ln_1.weight")->decay, 0);
    /* the count the config implies is the table's */
    size_t n = 0;
    for (int i = 0; i < m.n_table; i++)
        n += m.table[i].numel;
    assert_int_equal(n, tfm_model_config_num_params(&cfg));
    tfm_model_free(&m);
    cfg.norm = (tfm_norm_kind)7;
    assert_int_equal(tfm_model_config_check(&cfg, &err), -1);
    assert_non_null(strstr(err.msg, "norm"));
}

/* Heads whose total width n_head·head_dim is not n_embd (T5 v1.1 small,
 * flan-t5-small: q, k, v [C, D], o [D, C]), narrower (3·2 over 8) and
 * wider (2·6): a RoPE decoder, an ALiBi encoder, a flan-T5-like
 * encoder-decoder (RMSNorm, GEGLU, unscaled, untied, no biases) and one
 * with LoRA on every projection, against finite differences. */
static void test_head_dim(void **state)
{
    (void)state;
    const int lengths[B_] = {5, 3};
    for (int v = 0; v < 4; v++) {
        tfm_model_config cfg;
        small_config(&cfg);
        cfg.n_head = v % 2 ? 3 : 2;
        cfg.head_dim = v % 2 ? 2 : 6;
        cfg.d_ff = 12;
        extras ex = {0};
        if (v == 0) {
            cfg.pos = TFM_POS_ROPE;
        } else if (v == 1) {
            cfg.kind = TFM_KIND_ENCODER;
            cfg.pos = TFM_POS_ALIBI;
            cfg.ln = TFM_LN_POST;
            ex.lengths = lengths;
        } else {
            t5_like(&cfg, &ex);
            cfg.ffn = TFM_FFN_GEGLU;
            cfg.attn_unscaled = 1;
            cfg.tie_embeddings = 0;
        }
        if (v == 3) {
            cfg.lora_r = 2;
            cfg.lora_alpha = 4;
            cfg.lora_targets = 63;
        }
        check_model_with(&cfg, 0, &ex);
    }
    /* the shapes: q|k|v [C, 3D], the output projections [D, C] */
    tfm_model_config cfg;
    small_config(&cfg);
    cfg.kind = TFM_KIND_ENCODER_DECODER;
    cfg.n_head = 3;
    cfg.head_dim = 2;
    tfm_model m;
    tfm_err err = {0};
    assert_int_equal(tfm_model_init(&m, &cfg, &err), 0);
    const struct { const char *name; size_t d0, d1; } want[] = {
        {"h.0.attn.c_attn.weight", 8, 18}, {"h.0.attn.c_attn.bias", 18, 0},
        {"h.0.attn.c_proj.weight", 6, 8}, {"h.0.xattn.c_q.weight", 8, 6},
        {"h.0.xattn.c_kv.weight", 8, 12}, {"h.0.xattn.c_proj.weight", 6, 8},
        {"enc.h.0.attn.c_proj.bias", 8, 0}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        const tfm_param *p = tfm_model_param(&m, want[i].name);
        assert_non_null(p);
        assert_int_equal(p->shape[0], want[i].d0);
        if (want[i].d1)
            assert_int_equal(p->shape[1], want[i].d1);
    }
    size_t n = 0;
    for (int i = 0; i < m.n_table; i++)
        n += m.table[i].numel;
    assert_int_equal(n, tfm_model_config_num_params(&cfg));
    tfm_model_free(&m);
}

static void test_pre_ln(void **state)
{
    (void)state;
    tfm_model_config cfg;
    small_config(&cfg);
    check_model(&cfg, 0);
}

static void test_post_ln_variants(void **state)
{
    (void)state;
    tfm_model_config cfg;
    small_config(&cfg);
    cfg.ln = TFM_LN_POST;
    cfg.act = TFM_ACT_GELU_EXACT;
    cfg.tie_embeddings = 0;
    cfg.bias = 0;
    cfg.label_smoothing = 0.1f;
    check_model(&cfg, 1);
}

/* Dropout masks are a function of the model's rng, restored before each
 * forward, so the function stays deterministic for the difference quotient.
 * (ReLU is checked per layer: its kinks defeat finite differences here.) */
static void test_dropout(void **state)
{
    (void)state;
    tfm_model_config cfg;
    small_config(&cfg);
    cfg.dropout = 0.2f;
    check_model(&cfg, 0);
    /* the feed-forward's own dropout (T5's, BART's activation_dropout),
     * alone and with the other: plain and gated, its output kept and
     * recomputed (the same mask), in an encoder-decoder's two stacks; the
     * dropout on each stack's output (T5's after its final norm), pre-
     * and post-LN */
    for (int v = 0; v < 5; v++) {
        small_config(&cfg);
        cfg.d_ff = 12;
        cfg.ffn_dropout = v < 3 ? 0.3f : 0.0f;
        cfg.final_dropout = v >= 2 ? 0.25f : 0.0f;
        cfg.ln = v == 4 ? TFM_LN_POST : TFM_LN_PRE;
        cfg.dropout = v == 1 ? 0.1f : 0.0f;
        extras ex = {.recompute = v == 2};
        if (v >= 1) {
            t5_like(&cfg, &ex);
            cfg.ffn = v == 1 ? TFM_FFN_GEGLU : TFM_FFN_PLAIN;
            cfg.act = TFM_ACT_GELU_EXACT; /* ReLU's kinks defeat finite differences */
        }
        check_model_with(&cfg, 0, &ex);
    }
    /* the attention probabilities' and the embeddings' own rates (BART's
     * attention_dropout, GPT-2's embd_pdrop), alone, beside another
     * model.dropout, and in cross-attention */
    for (int v = 0; v < 3; v++) {
        small_config(&cfg);
        cfg.dropout = v == 1 ? 0.2f : 0.0f;
        cfg.attn_dropout = v == 1 ? 0.0f : 0.3f;
        cfg.emb_dropout = v == 0 ? -1.0f : 0.25f;
        extras ex = {0};
        if (v == 2) {
            t5_like(&cfg, &ex);
            cfg.act = TFM_ACT_GELU_EXACT;
        }
        check_model_with(&cfg, 0, &ex);
    }
    /* each acts in training only, and there it changes the loss */
    tfm_err err = {0};
    for (int v = 0; v < 3; v++) {
        small_config(&cfg);
        if (v == 0)
            cfg.ffn_dropout = 0.5f;
        else if (v == 1)
            cfg.attn_dropout = 0.5f;
        else
            cfg.emb_dropout = 0.5f;
        tfm_model m;
        assert_int_equal(tfm_model_init(&m, &cfg, &err), 0);
        random_weights(&m, 3);
        int32_t x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {2, 3, 4, 5, 6, 0};
        float eval0, eval1, train0;
        assert_int_equal(tfm_model_forward(&m, x, y, 1, 6, &eval0, &err), 0);
        tfm_model_set_training(&m, 1);
        assert_int_equal(tfm_model_forward(&m, x, y, 1, 6, &train0, &err), 0);
        tfm_model_set_training(&m, 0);
        assert_int_equal(tfm_model_forward(&m, x, y, 1, 6, &eval1, &err), 0);
        assert_true(eval0 == eval1);
        assert_true(fabsf(train0 - eval0) > 1e-4f);
        tfm_model_free(&m);
    }
    small_config(&cfg);
    cfg.attn_dropout = -0.5f;
    assert_int_equal(tfm_model_config_check(&cfg, &err), -1);
    assert_non_null(strstr(err.msg, "attn_dropout -0.5 is neither -1 nor in [0, 1)"));
    cfg.attn_dropout = -1.0f;
    cfg.ffn_dropout = 1.0f;
    assert_int_equal(tfm_model_config_check(&cfg, &err), -1);
    assert_non_null(strstr(err.msg, "ffn_dropout 1 is out of range"));
    cfg.ffn_dropout = 0.0f;
    cfg.final_dropout = -0.5f;
    assert_int_equal(tfm_model_config_check(&cfg, &err), -1);
    assert_non_null(strstr(err.msg, "final_dropout -0.5 is out of range"));
}

/* LoRA adapters (nn/lora.h) in every model kind, on every projection they
 * may target, with their dropout: the adapters' and the task heads'
 * gradients against finite differences, the frozen base's exactly 0. */
static void test_lora(void **state)
{
    (void)state;
    const int lengths[B_] = {5, 3};
    const int32_t labels[B_] = {1, 0};
    for (int v = 0; v < 4; v++) {
        tfm_model_config cfg;
        small_config(&cfg);
        cfg.lora_r = 3;
        cfg.lora_alpha = 6;
        cfg.lora_targets = v == 0 ? TFM_LORA_Q | TFM_LORA_V : 63;
        cfg.lora_dropout = v == 3 ? 0.25f : 0.0f;
        extras ex = {0};
        if (v == 1) { /* BERT-like with a classifier: the head trains too */
            cfg.kind = TFM_KIND_ENCODER;
            cfg.ln = TFM_LN_POST;
            cfg.emb_norm = 1;
            cfg.pooler = 1;
            cfg.n_classes = 2;
            /* ALBERT's factorised embedding, frozen with emb_proj, and its MLM
             * head mapping back to it */
            cfg.emb_dim = 5;
            cfg.mlm_head = 1;
            ex.lengths = lengths;
            ex.labels = labels;
        } else if (v >= 2) { /* T5-like, gated, with cross-attention */
            t5_like(&cfg, &ex);
            cfg.ffn = v == 2 ? TFM_FFN_GEGLU : TFM_FFN_PLAIN;
        }
        if (v == 3) {
            cfg.dropout = 0.1f;
            cfg.pos = TFM_POS_ROPE;
        }
        check_model_with(&cfg, 0, &ex);
    }
}

/* An untrained adapter (B = 0) changes nothing: the same logits as the base
 * model with the same weights; and PEFT's count of trainable parameters. */
static void test_lora_identity(void **state)
{
    (void)state;
    tfm_model_config cfg;
    small_config(&cfg);
    cfg.kind = TFM_KIND_ENCODER_DECODER;
    cfg.lora_r = 2;
    cfg.lora_alpha = 2;
    cfg.lora_targets = 63;
    tfm_model base, ad;
    tfm_err err = {0};
    tfm_model_config bc = cfg;
    bc.lora_r = 0;
    assert_int_equal(tfm_model_init(&base, &bc, &err), 0);
    assert_int_equal(tfm_model_init(&ad, &cfg, &err), 0);
    tfm_model_init_weights(&base, 3);
    tfm_model_init_weights(&ad, 4);
    for (int i = 0; i < base.n_table; i++) {
        const tfm_param *p = &base.table[i], *q = tfm_model_param(&ad, p->name);
        assert_non_null(q);
        assert_true(q->frozen);
        memcpy(ad.params + q->offset, base.params + p->offset, p->numel * sizeof(float));
    }
    size_t trained = 0;
    for (int i = 0; i < ad.n_table; i++)
        if (!ad.table[i].frozen) {
            trained += ad.table[i].numel;
            assert_non_null(strstr(ad.table[i].name, ".lora_"));
        }
    /* q, k, v, o in 4 self- and 2 cross-attentions: 2·8 + 8·2 each; c_fc
     * and c_proj in 4 blocks: 2·8 + 32·2 each */
    assert_int_equal(trained, (4 + 2) * 4 * 32 + 4 * 2 * 80);
    int32_t x[6] = {1, 2, 3, 4, 5, 6}, src[6] = {6, 5, 4, 3, 2, 1};
    tfm_batch b = {.inputs = x, .B = 2, .T = 3, .src = src, .S = 3};
    assert_int_equal(tfm_model_forward_batch(&base, &b, NULL, &err), 0);
    assert_int_equal(tfm_model_forward_batch(&ad, &b, NULL, &err), 0);
    assert_memory_equal(tfm_model_logits(&base), tfm_model_logits(&ad),
                        6 * cfg.vocab_size * sizeof(float));
    tfm_model_free(&base);
    tfm_model_free(&ad);
}

/* A LoRA model's frozen base costs no gradient memory: after steps of
 * forward, backward and tfm_model_zero_grad (the model's and a replica's)
 * not one of its gradient pages is resident, the trained runs hold the
 * gradients a fresh model computes, and tfm_model_bytes counts only them. */
static void test_lora_frozen_untouched(void **state)
{
    (void)state;
    tfm_model_config cfg;
    small_config(&cfg);
    cfg.n_embd = 64;
    cfg.n_head = 4;
    cfg.vocab_size = 300;
    cfg.lora_r = 2;
    cfg.lora_alpha = 4;
    cfg.lora_targets = TFM_LORA_Q | TFM_LORA_V;
    int32_t x[12], y[12];
    for (int i = 0; i < 12; i++) {
        x[i] = (i * 37 + 5) % 300;
        y[i] = (i * 53 + 11) % 300;
    }
    tfm_batch b = {.inputs = x, .targets = y, .B = 2, .T = 6};
    tfm_err err = {0};
    tfm_model m, fresh, rep;
    assert_int_equal(tfm_model_init(&m, &cfg, &err), 0);
    assert_int_equal(tfm_model_init(&fresh, &cfg, &err), 0);
    random_weights(&m, 9); /* lora_B not 0: every adapter has a gradient */
    memcpy(fresh.params, m.params, m.n_params * sizeof(float));
    tfm_model_init_replica(&rep, &m);
    size_t lo, hi, trained = 0, res;
    for (int row = 0; tfm_model_grad_span(&m, &row, &lo, &hi);)
        trained += hi - lo;
    assert_true(trained > 0 && trained < m.n_params / 10);
    assert_int_equal(tfm_model_bytes(&rep), trained * sizeof(float)); /* nothing planned yet */
    assert_true(tfm_model_frozen_pages(&m, m.grads, &res) > 100);
    assert_int_equal(res, 0);
    for (int step = 0; step < 3; step++) {
        tfm_model_zero_grad(&m);
        tfm_model_zero_grad(&rep);
        assert_int_equal(tfm_model_forward_backward_batch(&m, &b, 1.0f, NULL, &err), 0);
        assert_int_equal(tfm_model_forward_backward_batch(&rep, &b, 0.5f, NULL, &err), 0);
    }
    assert_int_equal(tfm_model_forward_backward_batch(&fresh, &b, 1.0f, NULL, &err), 0);
    size_t pages = tfm_model_frozen_pages(&m, m.grads, &res);
    assert_int_equal(res, 0);
    assert_int_equal(tfm_model_frozen_pages(&rep, rep.grads, &res), pages);
    assert_int_equal(res, 0);
    /* the trained tensors: each with a gradient, the fresh model's */
    for (int i = 0; i < m.n_table; i++) {
        const tfm_param *p = &m.table[i];
        if (p->frozen)
            continue;
        double sum = 0;
        for (size_t j = 0; j < p->numel; j++) {
            float g = m.grads[p->offset + j];
            if (g != fresh.grads[p->offset + j] || rep.grads[p->offset + j] != 0.5f * g)
                fail_msg("%s[%zu]: %g, a fresh model's %g, a replica's %g", p->name, j, g,
                         fresh.grads[p->offset + j], rep.grads[p->offset + j]);
            sum += fabs(g);
        }
        if (!(sum > 0))
            fail_msg("%s has no gradient", p->name);
    }
    /* and the frozen floats read as the zeros they are */
    for (size_t i = 0; i < m.n_params; i++)
        assert_true(fresh.grads[i] == m.grads[i]);
    tfm_model_free(&rep);
    tfm_model_free(&fresh);
    tfm_model_free(&m);
}

static void test_table_and_init(void **state)
{
    (void)state;
    tfm_model_config cfg;
    small_config(&cfg);
    cfg.vocab_size = 50;
    tfm_model m;
    tfm_err err = {0};
    assert_int_equal(tfm_model_init(&m, &cfg, &err), 0);
    /* GPT-2 count: V·C + T·C + L·(12C² + 13C) + 2C */
    size_t C = 8, expect = 50 * C + 6 * C + 2 * (12 * C * C + 13 * C) + 2 * C;
    assert_int_equal(tfm_model_config_num_params(&cfg), expect);
    size_t sum = 0;
    for (int i = 0; i < m.n_table; i++) {
        sum += m.table[i].numel;
        assert_int_equal(m.table[i].offset % 16, 0);
        assert_int_equal(m.table[i].decay, m.table[i].ndim == 2);
    }
    assert_int_equal(sum, expect);
    const tfm_param *p = tfm_model_param(&m, "h.1.attn.c_attn.weight");
    assert_non_null(p);
    assert_int_equal(p->shape[0], 8);
    assert_int_equal(p->shape[1], 24);
    assert_null(tfm_model_param(&m, "lm_head.weight"));
    tfm_model_init_weights(&m, 1);
    /* small random weights: the loss starts near ln V */
    int32_t x[B_ * T_], y[B_ * T_];
    for (int i = 0; i < B_ * T_; i++)
        x[i] = i % 50, y[i] = (i * 7 + 3) % 50;
    float loss;
    assert_int_equal(tfm_model_forward(&m, x, y, B_, T_, &loss, &err), 0);
    if (!(fabsf(loss - logf(50.0f)) < 0.1f))
        fail_msg("initial loss %g, expected about %g", loss, logf(50.0f));
    /* the same forward again gives the same loss, bit for bit */
    float loss2;
    assert_int_equal(tfm_model_forward(&m, x, y, B_, T_, &loss2, &err), 0);
    assert_true(loss == loss2);
    /* logits only */
    assert_int_equal(tfm_model_forward(&m, x, NULL, 1, 3, &loss2, &err), 0);
    assert_true(loss2 == -1.0f);
    assert_non_null(tfm_model_logits(&m));
    /* bad input is an error naming the position, not a crash */
    x[7] = 50;
    assert_int_equal(tfm_model_forward(&m, x, y, B_, T_, &loss, &err), -1);
    assert_non_null(strstr(err.msg, "token id 50 at batch row 1, position 2"));
    x[7] = 0;
    assert_int_equal(tfm_model_forward(&m, x, y, 1, 7, &loss, &err), -1);
    assert_non_null(strstr(err.msg, "exceeds the model's context 6"));
    tfm_model_free(&m);

    cfg.n_head = 3;
    assert_int_equal(tfm_model_config_check(&cfg, &err), -1);
    assert_non_null(strstr(err.msg, "n_embd 8 is not a multiple of n_head 3"));
    assert_int_equal(tfm_model_init(&m, &cfg, &err), -1);
    cfg.head_dim = 5; /* heads of their own width need not divide n_embd */
    assert_int_equal(tfm_model_config_check(&cfg, &err), 0);
}

/* Forward-only mode runs every layer in one layer's buffers: the logits must
 * be exactly those of the training forward, for both block kinds. */
static void test_inference(void **state)
{
    (void)state;
    enum { B = 3, T = 6 };
    for (int post = 0; post <= 1; post++) {
        tfm_model_config cfg;
        small_config(&cfg);
        cfg.n_layer = 5;
        cfg.ln = post ? TFM_LN_POST : TFM_LN_PRE;
        tfm_model m;
        tfm_err err = {0};
        assert_int_equal(tfm_model_init(&m, &cfg, &err), 0);
        random_weights(&m, 9);
        int32_t x[B * T];
        for (int i = 0; i < B * T; i++)
            x[i] = (i * 5 + 3) % cfg.vocab_size;
        assert_int_equal(tfm_model_forward(&m, x, NULL, B, T, NULL, &err), 0);
        size_t n = (size_t)B * T * cfg.vocab_size, full = tfm_model_bytes(&m);
        float *ref = malloc(n * sizeof *ref);
        memcpy(ref, tfm_model_logits(&m), n * sizeof *ref);
        tfm_model_set_inference(&m);
        assert_null(m.grads);
        assert_int_equal(tfm_model_forward(&m, x, NULL, B, T, NULL, &err), 0);
        assert_memory_equal(ref, tfm_model_logits(&m), n * sizeof *ref);
        assert_true(tfm_model_bytes(&m) < full);
        free(ref);
        tfm_model_free(&m);
    }
}

/* tfm_model_backward_rows: the gradient of Σ_b w_b·s_b with s_b row b's
 * summed LM loss (DPO's log-probabilities) or its classifier output (a
 * reward), by finite differences, on a decoder. */
struct rows_ctx {
    struct ctx c;
    tfm_head h;
    float w[B_];
};

static double rows_loss(void *p)
{
    struct rows_ctx *r = p;
    model_loss(&r->c);
    double s = 0;
    if (r->h == TFM_HEAD_LM) {
        const float *ls = tfm_model_lm_losses(&r->c.m);
        for (int i = 0; i < B_ * T_; i++)
            s += (double)r->w[i / T_] * ls[i];
    } else {
        int rows, cols;
        const float *z = tfm_model_head_out(&r->c.m, TFM_HEAD_CLASS, &rows, &cols);
        for (int b = 0; b < B_; b++)
            s += (double)r->w[b] * z[b];
    }
    return s;
}

static void check_rows(tfm_head h)
{
    struct rows_ctx r = {.h = h, .w = {0.7f, -1.3f}};
    struct ctx *c = &r.c;
    const int last[B_] = {4, 2};
    const float zero[B_] = {0, 0};
    tfm_model_config cfg;
    small_config(&cfg);
    if (h == TFM_HEAD_CLASS)
        cfg.n_classes = 1;
    tfm_err err = {0};
    assert_int_equal(tfm_model_init(&c->m, &cfg, &err), 0);
    /* smaller weights than check_model's: this loss is a sum, not a mean,
     * and its differences leave the quadratic regime sooner */
    random_weights_scaled(&c->m, 7, 0.2f);
    tfm_rng g;
    tfm_rng_seed(&g, 11);
    for (int i = 0; i < B_ * T_; i++) {
        c->x[i] = (int32_t)tfm_rng_below(&g, cfg.vocab_size);
        c->y[i] = i % 3 ? (int32_t)tfm_rng_below(&g, cfg.vocab_size) : -1;
    }
    c->batch = (tfm_batch){.inputs = c->x, .targets = h == TFM_HEAD_LM ? c->y : NULL,
                           .B = B_, .T = T_};
    if (h == TFM_HEAD_CLASS) {
        c->batch.cls_pos = last;
        c->batch.values = zero;
    }
    tfm_rng_seed(&c->rng0, 5);
    rows_loss(&r);
    tfm_model_zero_grad(&c->m);
    tfm_model_backward_rows(&c->m, h, r.w);
    assert_null(c->m.rows_grad);
    double worst = 0.0;
    for (int i = 0; i < c->m.n_table; i++) {
        const tfm_param *p = &c->m.table[i];
        float *ana = malloc(p->numel * sizeof *ana);
        memcpy(ana, c->m.grads + p->offset, p->numel * sizeof *ana);
        double e = gc_check(p->name, rows_loss, &r, c->m.params + p->offset, ana, p->numel,
                            3e-3f, 24, 1e-2);
        free(ana);
        worst = e > worst ? e : worst;
    }
    assert_true(worst < 2e-2);
    tfm_model_free(&c->m);
}

static void test_backward_rows(void **state)
{
    (void)state;
    check_rows(TFM_HEAD_LM);
    check_rows(TFM_HEAD_CLASS);
}

/* tfm_model_backward_positions: the gradient of Σ_i wl_i·ℓ_i + wt_i·v_i,
 * ℓ_i position i's LM loss and v_i a one-output tagger's (PPO's value
 * head), by finite differences, on a decoder. */
struct pos_ctx {
    struct ctx c;
    float wl[B_ * T_], wt[B_ * T_];
};

static double pos_loss(void *p)
{
    struct pos_ctx *r = p;
    model_loss(&r->c);
    int rows, cols;
    const float *ls = tfm_model_lm_losses(&r->c.m);
    const float *v = tfm_model_head_out(&r->c.m, TFM_HEAD_TAG, &rows, &cols);
    double s = 0;
    for (int i = 0; i < B_ * T_; i++)
        s += (double)r->wl[i] * ls[i] + (double)r->wt[i] * v[i];
    return s;
}

static void test_backward_positions(void **state)
{
    (void)state;
    struct pos_ctx r;
    memset(&r, 0, sizeof r);
    struct ctx *c = &r.c;
    int32_t tags[B_ * T_];
    tfm_model_config cfg;
    small_config(&cfg);
    cfg.n_tags = 1;
    tfm_err err = {0};
    assert_int_equal(tfm_model_init(&c->m, &cfg, &err), 0);
    random_weights_scaled(&c->m, 7, 0.2f);
    tfm_rng g;
    tfm_rng_seed(&g, 13);
    for (int i = 0; i < B_ * T_; i++) {
        c->x[i] = (int32_t)tfm_rng_below(&g, cfg.vocab_size);
        c->y[i] = i % 3 ? (int32_t)tfm_rng_below(&g, cfg.vocab_size) : -1;
        tags[i] = -1;
        r.wl[i] = c->y[i] >= 0 ? (float)(tfm_rng_below(&g, 2000) / 1000.0 - 1.0) : 0.0f;
        r.wt[i] = c->y[i] >= 0 ? (float)(tfm_rng_below(&g, 2000) / 1000.0 - 1.0) : 0.0f;
    }
    c->batch = (tfm_batch){.inputs = c->x, .targets = c->y, .B = B_, .T = T_, .tags = tags};
    tfm_rng_seed(&c->rng0, 5);
    pos_loss(&r);
    tfm_model_zero_grad(&c->m);
    tfm_model_backward_positions(&c->m, r.wl, r.wt);
    assert_null(c->m.rows_grad);
    assert_null(c->m.tag_grad);
    double worst = 0.0;
    for (int i = 0; i < c->m.n_table; i++) {
        const tfm_param *p = &c->m.table[i];
        float *ana = malloc(p->numel * sizeof *ana);
        memcpy(ana, c->m.grads + p->offset, p->numel * sizeof *ana);
        double e = gc_check(p->name, pos_loss, &r, c->m.params + p->offset, ana, p->numel,
                            3e-3f, 24, 1e-2);
        free(ana);
        worst = e > worst ? e : worst;
    }
    assert_true(worst < 2e-2);
    tfm_model_free(&c->m);
}

int main(void)
{
    tfm_blas_init(0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pre_ln),
        cmocka_unit_test(test_head_config),
        cmocka_unit_test(test_post_ln_variants),
        cmocka_unit_test(test_dropout),
        cmocka_unit_test(test_lora),
        cmocka_unit_test(test_lora_identity),
        cmocka_unit_test(test_lora_frozen_untouched),
        cmocka_unit_test(test_positions_and_masks),
        cmocka_unit_test(test_encoder_decoder),
        cmocka_unit_test(test_heads),
        cmocka_unit_test(test_block_kinds),
        cmocka_unit_test(test_table_and_init),
        cmocka_unit_test(test_inference),
        cmocka_unit_test(test_head_dim),
        cmocka_unit_test(test_backward_rows),
        cmocka_unit_test(test_backward_positions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
