/* Checkpoints: model and state files round-trip exactly; corruption and
 * foreign shapes are refused with the file named. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/file.h"
#include "data/data_keys.h"
#include "lm/lm.h"
#include "train/run_config.h"
#include "train/checkpoint.h"

static char dir[] = "/tmp/tfm-ckpt-test.XXXXXX";
static char model_path[64], state_path[64];

static void make_model(tfm_config *c, tfm_model *m, int n_embd)
{
    tfm_config_defaults(c);
    c->model.n_layer = 1;
    c->model.n_head = 2;
    c->model.n_embd = n_embd;
    c->model.block_size = 8;
    c->model.vocab_size = 11;
    tfm_model_config g;
    tfm_err err = {0};
    assert_int_equal(tfm_model_config_from(c, &g, &err), 0);
    assert_int_equal(tfm_model_init(m, &g, &err), 0);
    tfm_model_init_weights(m, 42);
}

/* Tensors only: the layout may leave padding between them. */
static void assert_same(const tfm_model *m, const float *a, const float *b)
{
    for (int k = 0; k < m->n_table; k++)
        assert_memory_equal(a + m->table[k].offset, b + m->table[k].offset,
                            m->table[k].numel * sizeof(float));
}

/* Plain stdio: tfm_write_file fsyncs, far too slow for hundreds of files. */
static void put_file(const char *path, const void *p, size_t n)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(p, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

static void test_round_trip(void **state)
{
    (void)state;
    tfm_config c, c2;
    tfm_model m, m2;
    tfm_err err = {0};
    make_model(&c, &m, 8);
    tfm_buf yaml = {0};
    tfm_config_dump(&c, 0, &yaml);
    assert_int_equal(tfm_model_save(model_path, &m, tfm_buf_cstr(&yaml), NULL, 0, 7,
                                               &err),
                     0);
    assert_int_equal(tfm_model_load(model_path, &c2, &m2, NULL, &err), 0);
    assert_memory_equal(&c.model, &c2.model, sizeof c.model);
    assert_int_equal(m2.n_params, m.n_params);
    assert_same(&m, m.params, m2.params);
    tfm_model_free(&m2);

    /* state: moments, RNGs and scalars come back exactly */
    tfm_adam o, o2;
    tfm_adam_init(&o, m.n_params, 1, 0.9, 0.99, 1e-8, 0.1);
    for (size_t i = 0; i < m.n_params; i++) {
        o.m[i] = (float)i * 1e-3f;
        o.v[i] = (float)i * 1e-6f;
    }
    o.t = 5;
    tfm_rng_seed(&m.rng, 99);
    tfm_train_state s = {.step = 5, .best_val = INFINITY, .best_step = -1,
                         .evals_since_best = 2, .elapsed = 1.25, .seed = 1337,
                         .log_loss = 0.1 + 0.2, .log_n = 3, .log_tokens = 96, .log_time = 1e-3 / 3};
    tfm_rng_seed(&s.data_rng, 3);
    assert_int_equal(tfm_checkpoint_save_state(state_path, &m, &o, &s, tfm_buf_cstr(&yaml), &err),
                     0);
    make_model(&c2, &m2, 8);
    tfm_adam_init(&o2, m2.n_params, 1, 0.9, 0.99, 1e-8, 0.1);
    tfm_train_state s2 = {0};
    if (tfm_checkpoint_load_state(state_path, &m2, &o2, &s2, &err) < 0)
        fail_msg("%s", err.msg);
    assert_same(&m, m.params, m2.params);
    assert_same(&m, o.m, o2.m);
    assert_same(&m, o.v, o2.v);
    assert_memory_equal(&m.rng, &m2.rng, sizeof m.rng);
    assert_memory_equal(&s.data_rng, &s2.data_rng, sizeof s.data_rng);
    assert_int_equal(o2.t, 5);
    assert_int_equal(s2.step, 5);
    assert_true(isinf(s2.best_val));
    assert_int_equal(s2.best_step, -1);
    assert_int_equal(s2.evals_since_best, 2);
    assert_float_equal(s2.elapsed, 1.25, 0);
    assert_int_equal(s2.seed, 1337);
    /* the open log interval, bit for bit */
    assert_true(s2.log_loss == 0.1 + 0.2 && s2.log_time == 1e-3 / 3);
    assert_int_equal(s2.log_n, 3);
    assert_true(s2.log_tokens == 96);
    tfm_config c3;
    tfm_config_defaults(&c3);
    assert_int_equal(tfm_model_file_config(state_path, &c3, &err), 0);
    assert_int_equal(c3.model.vocab_size, 11);
    tfm_adam_free(&o2);
    tfm_model_free(&m2);

    /* another width: refused, naming the file and the tensor */
    make_model(&c2, &m2, 16);
    tfm_adam_init(&o2, m2.n_params, 1, 0.9, 0.99, 1e-8, 0.1);
    assert_int_equal(tfm_checkpoint_load_state(state_path, &m2, &o2, &s2, &err), -1);
    assert_non_null(strstr(err.msg, state_path));
    assert_non_null(strstr(err.msg, "wte.weight"));
    tfm_adam_free(&o2);
    tfm_model_free(&m2);

    /* every single flipped byte is detected (checksum, or the reader) */
    tfm_map map;
    assert_int_equal(tfm_map_open(&map, model_path, &err), 0);
    size_t size = map.size;
    unsigned char *copy = malloc(size);
    memcpy(copy, map.data, size);
    tfm_map_close(&map);
    char bad[80];
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    int accepted = 0;
    for (size_t off = 0; off < size; off += 1 + off / 64) {
        copy[off] ^= 0x10;
        put_file(bad, copy, size);
        copy[off] ^= 0x10;
        tfm_config c4;
        tfm_model m4;
        if (tfm_model_load(bad, &c4, &m4, NULL, &err) == 0) {
            /* a flip in JSON whitespace padding changes nothing */
            assert_same(&m, m4.params, m.params);
            tfm_model_free(&m4);
            accepted++;
        } else {
            assert_non_null(strstr(err.msg, bad));
        }
    }
    /* truncation */
    for (size_t cut = 0; cut < size; cut += 1 + cut / 8) {
        put_file(bad, copy, cut);
        tfm_config c4;
        tfm_model m4;
        assert_int_equal(tfm_model_load(bad, &c4, &m4, NULL, &err), -1);
    }
    unlink(bad);
    free(copy);
    /* at most the few bytes of header padding may be harmless */
    assert_true(accepted <= 7);
    tfm_adam_free(&o);
    tfm_model_free(&m);
    tfm_buf_free(&yaml);
}

/* Each owner reads its own keys of a file's recorded configuration: model/
 * its section and the run keys it needs, data/ the data section, and the
 * whole configuration reads back as written; a key nobody owns is an error
 * only to the whole configuration. */
static void test_owners_read_their_keys(void **state)
{
    (void)state;
    tfm_config c, c2;
    tfm_model m, m2;
    tfm_err err = {0};
    make_model(&c, &m, 8);
    const char *sets[] = {"data.cls_id=5", "data.prefix=say: ", "train.task=prefix-lm",
                          "train.prefix_from=pairs", "optim.lr=0.5", "train.batch_size=3"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
        assert_int_equal(tfm_config_set(&c, sets[i], &err), 0);
    tfm_buf yaml = {0}, yaml2 = {0};
    tfm_config_dump(&c, 0, &yaml);
    assert_int_equal(tfm_model_save(model_path, &m, tfm_buf_cstr(&yaml), NULL, 0, 1, &err), 0);

    tfm_model_file_keys k;
    assert_int_equal(tfm_model_load_keys(model_path, &k, &m2, NULL, &err), 0);
    assert_int_equal(k.stored, 1);
    assert_memory_equal(&k.model, &c.model, sizeof c.model);
    assert_int_equal(k.task, TFM_CONFIG_TASK_PREFIX_LM);
    assert_int_equal(k.prefix_from, TFM_CONFIG_PREFIX_PAIRS);
    assert_int_equal(k.lora.r, 0);
    assert_string_equal(k.lora.targets, "q, v");
    tfm_model_free(&m2);
    tfm_data_keys d;
    assert_int_equal(tfm_data_keys_of_file(model_path, &d, &err), 0);
    assert_int_equal(d.cls_id, 5);
    assert_int_equal(d.sep_id, -1);
    assert_string_equal(d.prefix, "say: ");
    tfm_lm lm;
    assert_int_equal(tfm_lm_open(&lm, model_path, &err), 0);
    assert_int_equal(lm.prefix_lm, 1);
    assert_int_equal(lm.prefix_pairs, 1);
    tfm_lm_close(&lm);
    assert_int_equal(tfm_model_load(model_path, &c2, &m2, NULL, &err), 0);
    tfm_config_dump(&c2, 0, &yaml2);
    assert_string_equal(tfm_buf_cstr(&yaml2), tfm_buf_cstr(&yaml));
    tfm_model_free(&m2);

    tfm_buf_puts(&yaml, "extra:\n  x: 1\n");
    assert_int_equal(tfm_model_save(model_path, &m, tfm_buf_cstr(&yaml), NULL, 0, 1, &err), 0);
    assert_int_equal(tfm_model_load_keys(model_path, &k, &m2, NULL, &err), 0);
    tfm_model_free(&m2);
    assert_int_equal(tfm_data_keys_of_file(model_path, &d, &err), 0);
    assert_int_equal(tfm_model_load(model_path, &c2, &m2, NULL, &err), -1);
    assert_non_null(strstr(err.msg, "unknown section 'extra'"));
    tfm_model_free(&m);
    tfm_buf_free(&yaml);
    tfm_buf_free(&yaml2);
}

int main(void)
{
    if (!mkdtemp(dir))
        return 1;
    snprintf(model_path, sizeof model_path, "%s/model.safetensors", dir);
    snprintf(state_path, sizeof state_path, "%s/state.safetensors", dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_owners_read_their_keys),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(model_path);
    unlink(state_path);
    rmdir(dir);
    return rc;
}
