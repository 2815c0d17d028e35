#include "train/checkpoint.h"

#include "config.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "io/safetensors.h"
#include "model/file.h"

/* ---- metadata ------------------------------------------------------- */

static void put_u64s(tfm_buf *b, const uint64_t *w, int n)
{
    for (int i = 0; i < n; i++)
        tfm_buf_printf(b, "%s%016" PRIx64, i ? ":" : "", w[i]);
}

static int get_u64s(const char *s, uint64_t *w, int n)
{
    for (int i = 0; i < n; i++) {
        char *end;
        w[i] = strtoull(s, &end, 16);
        if (end != s + 16 || (i + 1 < n ? *end != ':' : *end != 0))
            return -1;
        s = end + 1;
    }
    return 0;
}

static const char *const state_keys[] = {"format",   "config",    "step",
                                         "adam_t",   "data_rng",  "dropout_rng",
                                         "best_val", "best_step", "evals_since_best",
                                         "elapsed",  "seed",      "log_interval"};
#define N_KEYS ((int)(sizeof state_keys / sizeof state_keys[0]))

int tfm_checkpoint_save_state(const char *path, const tfm_model *m, const tfm_adam *o,
                              const tfm_train_state *s, const char *config_yaml,
                              tfm_err *err)
{
    tfm_buf b[N_KEYS] = {{0}};
    tfm_buf_puts(&b[0], "tfm-train-state");
    tfm_buf_puts(&b[1], config_yaml);
    tfm_buf_printf(&b[2], "%lld", (long long)s->step);
    tfm_buf_printf(&b[3], "%lld", (long long)o->t);
    put_u64s(&b[4], s->data_rng.s, 4);
    put_u64s(&b[5], m->rng.s, 4);
    tfm_buf_printf(&b[6], "%.17g", s->best_val);
    tfm_buf_printf(&b[7], "%lld", (long long)s->best_step);
    tfm_buf_printf(&b[8], "%lld", (long long)s->evals_since_best);
    tfm_buf_printf(&b[9], "%.17g", s->elapsed);
    tfm_buf_printf(&b[10], "%" PRIu64, s->seed);
    /* %.17g: the sum comes back bit for bit */
    tfm_buf_printf(&b[11], "%.17g:%lld:%.17g:%.17g", s->log_loss, (long long)s->log_n,
                   s->log_tokens, s->log_time);
    const char *vals[N_KEYS];
    size_t lens[N_KEYS];
    for (int i = 0; i < N_KEYS; i++) {
        vals[i] = tfm_buf_cstr(&b[i]);
        lens[i] = b[i].len;
    }
    /* the trained tensors (all, or a LoRA run's adapters and heads: its
     * base comes from train.init), gathered into the moments' layout */
    int n;
    tfm_param *t = tfm_adam_table(m->table, m->n_table, &n);
    float *p = m->params;
    if (n < m->n_table) {
        p = tfm_malloc(tfm_adam_size(m->table, m->n_table) * sizeof *p + 1);
        for (int i = 0, j = 0; i < m->n_table; i++)
            if (!m->table[i].frozen)
                memcpy(p + t[j++].offset, m->params + m->table[i].offset,
                       m->table[i].numel * sizeof *p);
    }
    const float *arrays[] = {p, o->m, o->v};
    const char *prefixes[] = {"", "adam.m.", "adam.v."};
    int rc = tfm_model_file_write(path, t, n, arrays, prefixes, 3, state_keys, vals, lens,
                                  N_KEYS, err);
    if (p != m->params)
        free(p);
    free(t);
    for (int i = 0; i < N_KEYS; i++)
        tfm_buf_free(&b[i]);
    return rc;
}

static int parse_i64(const char *path, const char *key, const char *v, int64_t *out,
                     tfm_err *err)
{
    char *end;
    if (!v)
        return tfm_err_set(err, "%s: no '%s' in __metadata__", path, key);
    long long x = strtoll(v, &end, 10);
    if (end == v || *end)
        return tfm_err_set(err, "%s: bad '%s' in __metadata__", path, key);
    *out = x;
    return 0;
}

int tfm_checkpoint_load_state(const char *path, tfm_model *m, tfm_adam *o, tfm_train_state *s,
                              tfm_err *err)
{
    tfm_safetensors st;
    if (tfm_safetensors_open(&st, path, err) < 0)
        return -1;
    const char *vals[N_KEYS];
    size_t lens[N_KEYS];
    int n;
    tfm_param *tt = tfm_adam_table(m->table, m->n_table, &n);
    float *p = n < m->n_table ? tfm_malloc(tfm_adam_size(m->table, m->n_table) * sizeof *p + 1)
                              : m->params;
    float *arrays[] = {p, o->m, o->v};
    const char *prefixes[] = {"", "adam.m.", "adam.v."};
    int rc = -1;
    if (tfm_model_file_verify(&st, 1, err) < 0 ||
        tfm_model_file_read(&st, tt, n, arrays, prefixes, 3, err) < 0)
        goto out;
    if (p != m->params) /* scattered over the base train.init gave */
        for (int i = 0, j = 0; i < m->n_table; i++)
            if (!m->table[i].frozen)
                memcpy(m->params + m->table[i].offset, p + tt[j++].offset,
                       m->table[i].numel * sizeof *p);
    for (int i = 0; i < N_KEYS; i++)
        vals[i] = tfm_safetensors_meta(&st, state_keys[i], &lens[i]);
    if (!vals[0] || strcmp(vals[0], "tfm-train-state")) {
        tfm_err_set(err, "%s: not a tfm training state", path);
        goto out;
    }
    int64_t t = 0, seed = 0; /* set on success; GCC -O3 cannot see it */
    if (parse_i64(path, "step", vals[2], &s->step, err) < 0 ||
        parse_i64(path, "adam_t", vals[3], &t, err) < 0 ||
        parse_i64(path, "best_step", vals[7], &s->best_step, err) < 0 ||
        parse_i64(path, "evals_since_best", vals[8], &s->evals_since_best, err) < 0 ||
        parse_i64(path, "seed", vals[10], &seed, err) < 0)
        goto out;
    o->t = t;
    s->seed = (uint64_t)seed;
    if (!vals[4] || get_u64s(vals[4], s->data_rng.s, 4) < 0 || !vals[5] ||
        get_u64s(vals[5], m->rng.s, 4) < 0 || !vals[6] || !vals[9]) {
        tfm_err_set(err, "%s: bad RNG state in __metadata__", path);
        goto out;
    }
    s->best_val = strtod(vals[6], NULL);
    s->elapsed = strtod(vals[9], NULL);
    s->log_loss = s->log_tokens = s->log_time = 0;
    s->log_n = 0;
    if (vals[11]) { /* a state written before the key: the interval starts afresh */
        long long ln;
        int used = 0;
        if (sscanf(vals[11], "%lf:%lld:%lf:%lf%n", &s->log_loss, &ln, &s->log_tokens,
                   &s->log_time, &used) != 4 ||
            vals[11][used] || ln < 0) {
            tfm_err_set(err, "%s: bad 'log_interval' in __metadata__", path);
            goto out;
        }
        s->log_n = ln;
    }
    rc = 0;
out:
    if (p != m->params)
        free(p);
    free(tt);
    tfm_safetensors_close(&st);
    return rc;
}

