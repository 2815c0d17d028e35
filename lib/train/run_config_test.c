/* tfm-train's configuration: YAML parsing with positions, --set, dump/parse
 * round trip, suggestions, the model's keys and their enumerations. */
#include <math.h>
#include <stdio.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "model/file.h"
#include "train/run_config.h"

static int apply(tfm_config *c, const char *yaml, tfm_err *err)
{
    return tfm_config_apply_yaml(c, yaml, strlen(yaml), "run.yaml", err);
}

static void expect_error(const char *yaml, const char *msg)
{
    tfm_config c;
    tfm_config_defaults(&c);
    tfm_err err = {0};
    assert_int_equal(apply(&c, yaml, &err), -1);
    if (!strstr(err.msg, msg))
        fail_msg("expected '%s' in '%s'", msg, err.msg);
}

static void test_defaults_and_yaml(void **state)
{
    (void)state;
    tfm_config c;
    tfm_config_defaults(&c);
    assert_int_equal(c.model.n_layer, 4);
    assert_int_equal(c.model.tie_embeddings, 1);
    assert_int_equal(c.schedule.decay, TFM_CONFIG_DECAY_COSINE);
    tfm_err err = {0};
    assert_int_equal(apply(&c,
                           "model:\n  n_layer: 2\n  norm: post\n"
                           "optim: {lr: 3e-4, type: adam}\n"
                           "data:\n  train: 2024\n"
                           "schedule:\n  decay: inverse_sqrt\n"
                           "train:\n",
                           &err),
                     0);
    assert_int_equal(c.model.n_layer, 2);
    assert_int_equal(c.model.n_head, 4); /* untouched */
    assert_int_equal(c.model.norm, TFM_LN_POST);
    assert_float_equal(c.optim.lr, 3e-4, 0);
    assert_int_equal(c.optim.type, TFM_CONFIG_OPTIM_ADAM);
    assert_string_equal(c.data.train, "2024");
    assert_int_equal(c.schedule.decay, TFM_CONFIG_DECAY_INVERSE_SQRT);
    /* blanks and comments only: nothing set, no error */
    assert_int_equal(apply(&c, "", &err), 0);
    assert_int_equal(apply(&c, "# nothing\n\n  # here\n", &err), 0);
    assert_int_equal(c.model.n_layer, 2);
}

static void test_errors_have_positions(void **state)
{
    (void)state;
    expect_error("model:\n  n_layer: 2\noptim:\n  lerning_rate: 0.1\n",
                 "run.yaml:4:3: unknown key 'lerning_rate' (did you mean 'optim.lr'?)");
    expect_error("model:\n  n_layr: 2\n", "run.yaml:2:3: unknown key 'n_layr' (did you mean "
                                          "'model.n_layer'?)");
    expect_error("modle:\n  n_layer: 2\n", "run.yaml:1:1: unknown section 'modle'");
    expect_error("lr: 0.1\n", "run.yaml:1:1: unknown key 'lr' (did you mean 'optim.lr'?)");
    expect_error("model:\n  n_layer: \"4\"\n", "run.yaml:2:12: 'model.n_layer' must be an integer");
    expect_error("model:\n  n_layer: 4.5\n", "run.yaml:2:12: 'model.n_layer' must be an integer");
    expect_error("model:\n  n_layer: 0\n", "'model.n_layer' must be in [1, 1024]");
    expect_error("model:\n  dropout: 1.5\n", "run.yaml:2:12: 'model.dropout' must be in");
    expect_error("model:\n  norm: middle\n", "'model.norm' must be one of pre|post, got 'middle'");
    expect_error("model:\n  bias: 1\n", "'model.bias' must be true or false");
    expect_error("model: 3\n", "run.yaml:1:8: section 'model' must be a mapping");
    expect_error("model:\n  n_layer: 2\n  n_layer: 3\n", "run.yaml:3:3: duplicate key");
    expect_error("- a\n- b\n", "run.yaml:1:1: the configuration must be a mapping");
    expect_error("optim:\n  lr: [1]\n", "run.yaml:2:7: 'optim.lr' must be a number, got a list");
}

static void test_set_precedence(void **state)
{
    (void)state;
    tfm_config c;
    tfm_config_defaults(&c);
    tfm_err err = {0};
    assert_int_equal(apply(&c, "optim:\n  lr: 0.01\n  beta2: 0.95\n", &err), 0);
    assert_int_equal(tfm_config_set(&c, "optim.lr=0.5", &err), 0);
    assert_float_equal(c.optim.lr, 0.5, 0);
    assert_float_equal(c.optim.beta2, 0.95, 0); /* YAML beats the default */
    assert_float_equal(c.optim.beta1, 0.9, 0);  /* default */
    assert_int_equal(tfm_config_set(&c, "model.norm=post", &err), 0);
    assert_int_equal(c.model.norm, TFM_LN_POST);
    assert_int_equal(tfm_config_set(&c, "data.train=a=b.npy", &err), 0);
    assert_string_equal(c.data.train, "a=b.npy");
    assert_int_equal(tfm_config_set(&c, "train.max_steps=1e3", &err), 0);
    assert_int_equal(c.train.max_steps, 1000);
    assert_int_equal(tfm_config_set(&c, "optim.lerning_rate=1", &err), -1);
    assert_non_null(strstr(err.msg, "unknown key 'optim.lerning_rate' (did you mean 'optim.lr'?)"));
    assert_int_equal(tfm_config_set(&c, "train.batch_size=many", &err), -1);
    assert_non_null(strstr(err.msg, "'train.batch_size' must be an integer"));
    assert_int_equal(tfm_config_set(&c, "model.n_layer", &err), -1);
    assert_non_null(strstr(err.msg, "expected key=value"));
}

/* Which keys a file or --set gave, whatever their value (the default's
 * included): train.init takes the others from its file. */
static void test_given(void **state)
{
    (void)state;
    tfm_config c;
    tfm_config_defaults(&c);
    tfm_err err = {0};
    assert_int_equal(tfm_config_given(&c, "model.n_head"), 0);
    assert_int_equal(apply(&c, "model: {n_head: 4, norm: post}\n", &err), 0);
    assert_int_equal(tfm_config_set(&c, "model.activation=gelu", &err), 0);
    assert_int_equal(tfm_config_given(&c, "model.n_head"), 1); /* the default's value */
    assert_int_equal(tfm_config_given(&c, "model.norm"), 1);
    assert_int_equal(tfm_config_given(&c, "model.activation"), 1);
    assert_int_equal(tfm_config_given(&c, "model.n_layer"), 0);
    /* a bad value gives nothing */
    assert_int_equal(tfm_config_set(&c, "model.n_layer=x", &err), -1);
    assert_int_equal(tfm_config_given(&c, "model.n_layer"), 0);
}

static void test_dump_round_trip(void **state)
{
    (void)state;
    tfm_config c, d;
    tfm_config_defaults(&c);
    tfm_err err = {0};
    assert_int_equal(tfm_config_set(&c, "optim.lr=0.000123456789", &err), 0);
    assert_int_equal(tfm_config_set(&c, "data.train=true", &err), 0);
    assert_int_equal(tfm_config_set(&c, "data.val=has: colon #and hash", &err), 0);
    assert_int_equal(tfm_config_set(&c, "data.text=12", &err), 0);
    assert_int_equal(tfm_config_set(&c, "model.activation=relu", &err), 0);
    assert_int_equal(tfm_config_set(&c, "train.seed=-1", &err), 0);
    for (int comments = 0; comments < 2; comments++) {
        tfm_buf b = {0};
        tfm_config_dump(&c, comments, &b);
        tfm_config_defaults(&d);
        memset(&d.data, 0x55, sizeof d.data);
        tfm_config_defaults(&d);
        if (apply(&d, tfm_buf_cstr(&b), &err) < 0)
            fail_msg("%s\n%s", err.msg, b.data);
        /* the same values (the dump gives every key, so all are given) */
        assert_memory_equal(&c, &d, offsetof(tfm_config, given));
        tfm_buf_free(&b);
    }
}

static void test_every_key_documented(void **state)
{
    (void)state;
    size_t n;
    const tfm_schema_key *k = tfm_config_keys(&n);
    assert_true(n > 30);
    tfm_config c;
    tfm_config_defaults(&c);
    for (size_t i = 0; i < n; i++) {
        assert_non_null(strchr(k[i].path, '.'));
        assert_true(strlen(k[i].doc) > 10);
        assert_ptr_equal(tfm_config_find(k[i].path), &k[i]);
    }
    char buf[32];
    assert_string_equal(tfm_config_choice_name("schedule.decay", 3, buf, sizeof buf),
                        "inverse_sqrt");
}

/* The model's keys store the model's own enumerations: each choice's index
 * is the value of the enumerator of that name. */
static void expect_choice(const char *key, const char *name, int value)
{
    char yaml[128];
    snprintf(yaml, sizeof yaml, "model: {%s: %s}\n", strchr(key, '.') + 1, name);
    tfm_config c;
    tfm_config_defaults(&c);
    tfm_err err = {0};
    assert_int_equal(apply(&c, yaml, &err), 0);
    const tfm_schema_key *k = tfm_config_find(key);
    assert_non_null(k);
    assert_int_equal(*(const int *)((const char *)&c + k->offset), value);
}

static void test_model_enums(void **state)
{
    (void)state;
    expect_choice("model.kind", "decoder", TFM_KIND_DECODER);
    expect_choice("model.kind", "encoder", TFM_KIND_ENCODER);
    expect_choice("model.kind", "encoder-decoder", TFM_KIND_ENCODER_DECODER);
    expect_choice("model.positions", "learned", TFM_POS_LEARNED);
    expect_choice("model.positions", "sinusoidal", TFM_POS_SINUSOIDAL);
    expect_choice("model.positions", "rope", TFM_POS_ROPE);
    expect_choice("model.positions", "alibi", TFM_POS_ALIBI);
    expect_choice("model.positions", "t5", TFM_POS_T5);
    expect_choice("model.norm", "pre", TFM_LN_PRE);
    expect_choice("model.norm", "post", TFM_LN_POST);
    expect_choice("model.norm_type", "layernorm", TFM_NORM_LAYER);
    expect_choice("model.norm_type", "rmsnorm", TFM_NORM_RMS);
    expect_choice("model.activation", "gelu", TFM_ACT_GELU_TANH);
    expect_choice("model.activation", "gelu_exact", TFM_ACT_GELU_EXACT);
    expect_choice("model.activation", "relu", TFM_ACT_RELU);
    expect_choice("model.ffn", "plain", TFM_FFN_PLAIN);
    expect_choice("model.ffn", "geglu", TFM_FFN_GEGLU);
    expect_choice("model.ffn", "swiglu", TFM_FFN_SWIGLU);
    expect_choice("model.init", "gpt2", TFM_INIT_GPT2);
    expect_choice("model.init", "xavier", TFM_INIT_XAVIER);
    /* and the model's description takes them as they are */
    tfm_config c;
    tfm_config_defaults(&c);
    tfm_err err = {0};
    assert_int_equal(apply(&c, "model: {kind: encoder, positions: alibi, norm: post, "
                               "norm_type: rmsnorm, ffn: swiglu, init: xavier}\n", &err), 0);
    c.model.vocab_size = 16;
    tfm_model_config g;
    if (tfm_model_config_from(&c, &g, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(g.kind, TFM_KIND_ENCODER);
    assert_int_equal(g.pos, TFM_POS_ALIBI);
    assert_int_equal(g.ln, TFM_LN_POST);
    assert_int_equal(g.norm, TFM_NORM_RMS);
    assert_int_equal(g.ffn, TFM_FFN_SWIGLU);
    assert_int_equal(g.init, TFM_INIT_XAVIER);
}

static void test_validate(void **state)
{
    (void)state;
    tfm_config c;
    tfm_config_defaults(&c);
    tfm_err err = {0};
    assert_int_equal(tfm_config_validate(&c, &err), -1);
    assert_non_null(strstr(err.msg, "no training data"));
    tfm_config_set(&c, "data.train=x.npy", &err);
    assert_int_equal(tfm_config_validate(&c, &err), 0);
    tfm_config_set(&c, "model.n_head=3", &err);
    assert_int_equal(tfm_config_validate(&c, &err), -1);
    assert_non_null(strstr(err.msg, "divisible"));
    tfm_config_set(&c, "model.n_head=4", &err);
    tfm_config_set(&c, "train.class_balance=0.5", &err);
    assert_int_equal(tfm_config_validate(&c, &err), -1);
    assert_non_null(strstr(err.msg, "train.class_balance is for train.task classify"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_yaml),
        cmocka_unit_test(test_errors_have_positions),
        cmocka_unit_test(test_set_precedence),
        cmocka_unit_test(test_given),
        cmocka_unit_test(test_dump_round_trip),
        cmocka_unit_test(test_every_key_documented),
        cmocka_unit_test(test_model_enums),
        cmocka_unit_test(test_validate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
