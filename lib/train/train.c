#include "train/train.h"

#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/file.h"
#include "base/progress.h"
#include "lm/lm.h"
#include "model/transformer.h"
#include "tensor/gemm.h"
#include "train/checkpoint.h"
#include "train/dist.h"
#include "train/init.h"
#include "train/plot.h"
#include "train/replicas.h"
#include "train/task.h"
#include "train/optim.h"
#include "model/lora.h"
#include "train/schedule.h"

/* Validation batches are drawn from their own stream so that every
 * evaluation sees the same windows and training batches are unaffected. */
#define EVAL_SEED_SALT 0x9e3779b97f4a7c15ULL
#define DATA_SEED_SALT 0xd1b54a32d192ed03ULL

static void say(const tfm_train_opts *o, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void say(const tfm_train_opts *o, const char *fmt, ...)
{
    if (!o->message || tfm_dist_rank() != 0) /* dist: rank 0 speaks */
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    o->message(o->ctx, msg);
}

/* Small models train faster data-parallel (each thread a share of the batch,
 * every product whole on one core: char-small 24.0 -> 23.1 ms a step on two
 * threads, model_bench -r; 14M parameters, 8 x 256 tokens: 985 -> 918 ms)
 * than with each product split across the threads and joined after it.  It
 * costs a gradient array per extra thread, so only while that stays small;
 * large products split well anyway.  tfm-train --data-parallel forces the
 * choice. */
static int data_parallel_threads(const tfm_model *m, int B, tfm_data_parallel dp)
{
    int n = tfm_blas_threads();
    if (n > B)
        n = B;
    if (dp != TFM_DP_AUTO)
        return dp == TFM_DP_YES ? n : 1;
    double extra = (double)m->n_params * sizeof(float) * (n - 1);
    return extra <= 64.0 * (1 << 20) ? n : 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char *join(const char *dir, const char *file)
{
    tfm_buf b = {0};
    tfm_buf_printf(&b, "%s/%s", dir, file);
    return (char *)tfm_buf_cstr(&b);
}

static int file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* log.tsv's columns: these, then val_<name> for each of the task's
 * validation metrics (tfm_task_metrics: val_bleu with train.eval_bleu, ...).
 * New columns go at the end. */
static const char LOG_HEADER[] =
    "step\ttrain_loss\tval_loss\tlr\tgrad_norm\ttokens_per_s\telapsed_s";

static void log_header(tfm_buf *b, const char *const *names, int n)
{
    tfm_buf_puts(b, LOG_HEADER);
    for (int i = 0; i < n; i++)
        tfm_buf_printf(b, "\tval_%s", names[i]);
    tfm_buf_putc(b, '\n');
}

/* On resume, drop log lines written after the checkpoint we restart from
 * (a kill -9 can leave some), so the log reads as one run; the header is
 * today's (a run logged before a column was added gains it). */
static int log_truncate(const char *path, int64_t step, const char *header, tfm_err *err)
{
    if (!file_exists(path))
        return tfm_write_file(path, header, strlen(header), err);
    FILE *fp = fopen(path, "r");
    if (!fp)
        return tfm_err_errno(err, "%s", path);
    tfm_buf line = {0}, out = {0};
    int first = 1;
    while (tfm_getline(fp, &line) > 0) {
        const char *s = tfm_buf_cstr(&line);
        if (!first) {
            char *end;
            long long k = strtoll(s, &end, 10);
            if (end == s || k > step)
                continue;
            tfm_buf_append(&out, line.data, line.len);
            tfm_buf_putc(&out, '\n');
        } else {
            tfm_buf_puts(&out, header);
        }
        first = 0;
    }
    fclose(fp);
    if (first)
        tfm_buf_puts(&out, header);
    int rc = tfm_write_file(path, out.data, out.len, err);
    tfm_buf_free(&line);
    tfm_buf_free(&out);
    return rc;
}

/* A kill -9 during a save leaves the temporary file of an atomic write
 * behind ("model.safetensors.tmp.XXXXXX"); the checkpoint itself is intact. */
static void remove_stale_temporaries(const char *rundir)
{
    static const char *const names[] = {"model.safetensors.tmp.", "best.safetensors.tmp.",
                                        "state.safetensors.tmp.", "log.tsv.tmp.",
                                        "curves.svg.tmp."};
    DIR *d = opendir(rundir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (!strncmp(e->d_name, names[i], strlen(names[i]))) {
                char *p = join(rundir, e->d_name);
                unlink(p);
                free(p);
            }
    }
    closedir(d);
}

typedef struct run {
    const tfm_config *cfg;
    const tfm_train_opts *o;
    tfm_model m;
    tfm_replicas reps;    /* data parallelism over threads (parts of m) */
    tfm_adam adam;
    tfm_train_state st;
    tfm_tokenizer *tok;
    tfm_tokenizer *src_tok;    /* data.source_tokenizer, or NULL */
    tfm_buf tok_json, src_tok_json, config_yaml;
    tfm_buf base_yaml;         /* LoRA: the configuration without adapters
                                  (the merged model files') */
    tfm_task *task;
    char *model_path, *best_path, *state_path, *log_path, *curves_path;
    int64_t saved_step;
    int saved_any; /* a checkpoint was written (or resumed from) */
    tfm_dist_reduce *red; /* dist: the gradient sum in buckets; NULL on one rank */
    float *lora_sum;      /* dist, LoRA: the trained tensors' gradients packed
                             for one sum (red is NULL then) */
} run;

/* What a stopped run leaves: "the last good checkpoint (step 20) is kept
 * in RUN", or that there is none. */
static void kept(const run *R, char *buf, size_t size)
{
    if (R->saved_any)
        snprintf(buf, size, "the last good checkpoint (step %lld) is kept in %s",
                 (long long)R->saved_step, R->o->rundir);
    else
        snprintf(buf, size, "no checkpoint was written");
}

/* The weights with everything the other programs need; finite ones only:
 * Adam with optim.eps 0 turns weights whose gradient is 0 (the rows of
 * tokens no batch had) into NaN while the loss stays finite. */
static int weights_finite(run *R, int64_t step, tfm_err *err)
{
    /* the norm (in double: no overflow) is finite when every weight is */
    if (isfinite(tfm_grad_norm(R->m.params, R->m.n_params)))
        return 0;
    char k[1200];
    kept(R, k, sizeof k);
    return tfm_err_set(err, "the weights are not finite at step %lld (NaN or infinity): "
                            "stopped without saving; %s", (long long)step, k);
}

/* A LoRA run's model files hold the adapters merged into the base
 * (W += (alpha/r)·B·A), without the adapter tensors: a plain model every
 * program reads.  The weights go back bit for bit after the write. */
static int save_model(run *R, const char *path, int64_t step, tfm_err *err)
{
    if (weights_finite(R, step, err) < 0)
        return -1;
    tfm_model view = R->m;
    const char *yaml = tfm_buf_cstr(&R->config_yaml);
    float *saved = NULL;
    if (R->m.cfg.lora_r > 0) {
        view.table = tfm_malloc((size_t)R->m.n_table * sizeof *view.table);
        view.n_table = 0;
        for (int i = 0; i < R->m.n_table; i++)
            if (!strstr(R->m.table[i].name, ".lora_"))
                view.table[view.n_table++] = R->m.table[i];
        view.cfg.lora_r = 0;
        yaml = tfm_buf_cstr(&R->base_yaml);
        saved = tfm_lora_merge_model(&R->m);
    }
    int rc = tfm_model_save_task(
        path, &view, yaml, R->tok ? R->tok_json.data : NULL,
        R->tok_json.len, R->src_tok ? R->src_tok_json.data : NULL, R->src_tok_json.len,
        tfm_task_meta(R->task), step, err);
    if (R->m.cfg.lora_r > 0) {
        tfm_lora_unmerge_model(&R->m, saved);
        free(view.table);
    }
    return rc;
}

/* PEFT's task_type for the run's task and model kind. */
static const char *peft_task(const tfm_config *c)
{
    switch (c->train.task) {
    case TFM_CONFIG_TASK_CLASSIFY: return "SEQ_CLS";
    case TFM_CONFIG_TASK_TAG: return "TOKEN_CLS";
    case TFM_CONFIG_TASK_SPAN: return "QUESTION_ANS";
    case TFM_CONFIG_TASK_LM:
        return c->model.kind == TFM_KIND_ENCODER_DECODER ? "SEQ_2_SEQ_LM"
               : c->model.kind == TFM_KIND_DECODER       ? "CAUSAL_LM"
                                                                : NULL;
    default:
        return c->model.kind == TFM_KIND_ENCODER_DECODER ? "SEQ_2_SEQ_LM" : NULL;
    }
}

/* The adapters in the run's directory, named as PEFT names them on their
 * base (a HuggingFace checkpoint's own module names). */
static int lora_save(const run *R, tfm_err *err)
{
    const char *pre;
    tfm_hf_family f = tfm_model_file_hf_family(R->cfg->train.init, &pre);
    return tfm_lora_save(R->o->rundir, &R->m, R->cfg->train.init, f, pre, peft_task(R->cfg),
                         err);
}

static int save(run *R, tfm_err *err)
{
    /* dist: a checkpoint is every rank's state, or the ranks went apart
     * (a collective: every rank saves at the same steps; rank 0 writes) */
    if (!tfm_dist_same(R->m.params, R->m.n_params * sizeof *R->m.params))
        return tfm_err_set(err, "the parameters differ between the %d ranks at step %lld: "
                                "not saved (the last good checkpoint is kept)",
                           tfm_dist_size(), (long long)R->st.step);
    /* dist: every rank stops (the weights are the same on all) */
    if (weights_finite(R, R->st.step, err) < 0)
        return -1;
    if (tfm_dist_rank() == 0 &&
        (save_model(R, R->model_path, R->st.step, err) < 0 ||
         (R->m.cfg.lora_r > 0 && lora_save(R, err) < 0) ||
         tfm_checkpoint_save_state(R->state_path, &R->m, &R->adam, &R->st,
                                   tfm_buf_cstr(&R->config_yaml), err) < 0))
        return -1;
    R->saved_step = R->st.step;
    R->saved_any = 1;
    return 0;
}

/* One writer per run directory: a second tfm-train on it would resume from
 * the same checkpoint and delete the first one's temporary files.  The lock
 * is on the directory itself (flock(2)), released when the process ends,
 * however it ends.  Returns the descriptor holding it. */
static int lock_rundir(const char *dir, tfm_err *err)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return tfm_err_errno(err, "%s", dir);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            return tfm_err_set(err, "%s: another tfm-train is writing this run directory "
                                    "(one writer at a time)", dir);
        errno = e;
        return tfm_err_errno(err, "%s: cannot lock", dir);
    }
    return fd;
}

/* Continuing from model.safetensors alone (state.safetensors is corrupt):
 * its weights and step, a fresh optimizer, and the data stream reseeded
 * from the step, so the batches differ from an uninterrupted run's. */
static int load_weights_only(run *R, tfm_err *err)
{
    tfm_config mc;
    tfm_config_defaults(&mc);
    tfm_model m;
    if (tfm_model_load(R->model_path, &mc, &m, NULL, err) < 0)
        return -1;
    if (m.n_params != R->m.n_params) {
        tfm_model_free(&m);
        return tfm_err_set(err, "%s: a model of another shape than the configuration's",
                           R->model_path);
    }
    memcpy(R->m.params, m.params, m.n_params * sizeof *m.params);
    tfm_model_free(&m);
    tfm_safetensors st;
    if (tfm_safetensors_open(&st, R->model_path, err) < 0)
        return -1;
    size_t len;
    const char *step = tfm_safetensors_meta(&st, "step", &len);
    R->st.step = step ? strtoll(step, NULL, 10) : 0;
    tfm_safetensors_close(&st);
    return 0;
}

/* A state file that cannot be read (truncated, a flipped byte): said
 * plainly, with the way on when the model file is there. */
static int damaged_state(const char *rundir, const char *path, tfm_err *err)
{
    char *model = join(rundir, "model.safetensors");
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    if (strstr(path, "state.safetensors") && file_exists(model))
        tfm_err_set(err, "%s: the training state is damaged or truncated (rerun with "
                         "--fresh-optimizer to continue from the weights and step in %s with a "
                         "new optimizer state)", msg, model);
    else if (strstr(path, "state.safetensors"))
        tfm_err_set(err, "%s: the training state is damaged or truncated", msg);
    free(model);
    return -1;
}

/* Whether a state file passes its own checks (an error loading it is then
 * a mismatch with the configuration, which --fresh-optimizer cannot mend). */
static int state_intact(const char *path)
{
    tfm_safetensors st;
    tfm_err e = {0};
    if (tfm_safetensors_open(&st, path, &e) < 0)
        return 0;
    int ok = tfm_model_file_verify(&st, 1, &e) == 0;
    tfm_safetensors_close(&st);
    return ok;
}

int tfm_train_run_config(const char *rundir, int fresh, tfm_config *c, tfm_err *err)
{
    char *path = join(rundir, fresh ? "model.safetensors" : "state.safetensors");
    int rc = tfm_model_file_config(path, c, err);
    if (rc < 0)
        damaged_state(rundir, path, err);
    free(path);
    return rc;
}

/* A resumed run is the model it started as: a key that changes its shape
 * (or its heads, or what it computes: positions, norm, activation) is
 * refused rather than silently training another model on its weights. */
static int check_same_model(run *R, const tfm_config *cfg, tfm_config *was, tfm_err *err)
{
    const char *from = R->o->fresh_optimizer ? R->model_path : R->state_path;
    tfm_config_defaults(was);
    if (tfm_model_file_config(from, was, err) < 0)
        return damaged_state(R->o->rundir, from, err);
    if (cfg->train.lora.r != was->train.lora.r ||
        (cfg->train.lora.r && strcmp(cfg->train.lora.targets, was->train.lora.targets)))
        return tfm_err_set(err, "cannot resume %s: train.lora.r %lld, targets '%s' (the run's: "
                                "r %lld, targets '%s'): a run keeps its adapters (leave "
                                "train.lora out, or start another run directory)",
                           R->o->rundir, (long long)cfg->train.lora.r,
                           cfg->train.lora.r ? cfg->train.lora.targets : "",
                           (long long)was->train.lora.r,
                           was->train.lora.r ? was->train.lora.targets : "");
    char keys[768];
    int n = tfm_train_shape_diff(cfg, was, 1, keys, sizeof keys);
    if (n)
        return tfm_err_set(err, "cannot resume %s: %s: a run keeps its model's shape (leave "
                                "%s out, or train another model in another run directory)",
                           R->o->rundir, keys, n == 1 ? "this key" : "these keys");
    return 0;
}

/* dist: every rank continues from rank 0's state (weights, moments, step,
 * RNGs, seed), so that rank 0 alone reads and writes the run directory. */
static void dist_share_state(run *R, tfm_config *cfg, int *resumed)
{
    if (tfm_dist_size() == 1)
        return;
    tfm_dist_bcast(resumed, sizeof *resumed);
    tfm_dist_bcast(&R->st, sizeof R->st);
    tfm_dist_bcast(&R->m.rng, sizeof R->m.rng);
    tfm_dist_bcast(&R->adam.t, sizeof R->adam.t);
    tfm_dist_bcast(&cfg->train.seed, sizeof cfg->train.seed);
    tfm_dist_bcast(R->m.params, R->m.n_params * sizeof *R->m.params);
    tfm_dist_bcast(R->adam.m, R->adam.n * sizeof *R->adam.m);
    tfm_dist_bcast(R->adam.v, R->adam.n * sizeof *R->adam.v);
}

/* dist: buckets of whole tensors, cut from the top of the table (backward
 * finishes it from its end: tfm_model.grads_ready), the embeddings apart
 * in the last (they are final only when backward ends). */
static tfm_dist_reduce *dist_plan(tfm_model *m, double bucket_mb)
{
    size_t *cuts = tfm_malloc((size_t)m->n_table * sizeof *cuts), emb = tfm_model_blocks_offset(m);
    int n = 0;
    cuts[n++] = emb;
    for (int i = 0; i < m->n_table; i++)
        if (m->table[i].offset > emb)
            cuts[n++] = m->table[i].offset;
    tfm_dist_reduce *r = tfm_dist_reduce_new(m->grads, m->n_params, cuts, n,
                                             (size_t)(bucket_mb * (1 << 20) / sizeof(float)));
    free(cuts);
    return r;
}

/* dist, LoRA: the frozen base's gradients stay zero, so only the trained
 * tensors' (the adapters and heads: a few per cent) are packed, summed in
 * one call after backward, and put back. */
static void lora_sum_grads(run *R)
{
    float *g = R->m.grads, *buf = R->lora_sum;
    size_t o = 0;
    for (int i = 0; i < R->m.n_table; i++)
        if (!R->m.table[i].frozen) {
            memcpy(buf + o, g + R->m.table[i].offset, R->m.table[i].numel * sizeof *g);
            o += R->m.table[i].numel;
        }
    tfm_dist_sum_floats(buf, o);
    o = 0;
    for (int i = 0; i < R->m.n_table; i++)
        if (!R->m.table[i].frozen) {
            memcpy(g + R->m.table[i].offset, buf + o, R->m.table[i].numel * sizeof *g);
            o += R->m.table[i].numel;
        }
}

/* tfm_model.grads_ready during the step's last backward */
static void grads_ready(void *red, size_t lo)
{
    tfm_dist_reduce_ready(red, lo);
}

/* data.tokenizer (key) against the tokenizer of the train.init file it
 * starts from: the model's rows are that tokenizer's ids, so another
 * vocabulary (other tokens, or the same at other ids) is refused; the same
 * vocabulary with other settings (normalization, specials) is a warning. */
static int check_init_tokenizer(run *R, const char *key, const char *path,
                                const tfm_tokenizer *tok, const tfm_buf *tok_json,
                                const tfm_tokenizer *init, const char *whose, tfm_err *err)
{
    uint32_t n = tfm_tokenizer_vocab_size(tok), ni = tfm_tokenizer_vocab_size(init);
    char why[400] = "";
    if (n != ni)
        snprintf(why, sizeof why, "%u tokens, train.init's %u", n, ni);
    for (uint32_t id = 0; !why[0] && id < n; id++) {
        size_t la = 0, lb = 0;
        const char *a = tfm_tokenizer_piece(tok, id, &la);
        const char *b = tfm_tokenizer_piece(init, id, &lb);
        if (!a || !b ? a != b : la != lb || memcmp(a, b, la)) {
            tfm_buf qa = {0}, qb = {0};
            if (a)
                tfm_buf_put_json_string(&qa, a, la);
            else
                tfm_buf_puts(&qa, "none");
            if (b)
                tfm_buf_put_json_string(&qb, b, lb);
            else
                tfm_buf_puts(&qb, "none");
            snprintf(why, sizeof why, "token %u is %.120s, train.init's %.120s", id,
                     tfm_buf_cstr(&qa), tfm_buf_cstr(&qb));
            tfm_buf_free(&qa);
            tfm_buf_free(&qb);
        }
    }
    const char *init_path = R->cfg->train.init;
    if (why[0])
        return tfm_err_set(err, "%s %s is not the %s of train.init %s (%s): a model started "
                                "from a file reads text with its tokenizers (leave %s out to "
                                "take it)",
                           key, path, whose, init_path, why, key);
    tfm_buf j = {0};
    tfm_tokenizer_to_json(init, &j);
    if (j.len != tok_json->len || memcmp(j.data, tok_json->data, j.len))
        say(R->o, "warning: %s %s has the vocabulary of train.init %s's %s but other "
                  "settings (normalization, pre-tokenization or special tokens): text is "
                  "encoded with %s's", key, path, init_path, whose, key);
    tfm_buf_free(&j);
    return 0;
}

/* An encoder-decoder file's own source tokenizer (metadata
 * source_tokenizer), or NULL. */
static int init_source_tokenizer(const char *path, tfm_tokenizer **out, tfm_err *err)
{
    *out = NULL;
    tfm_buf b = {0};
    int rc = tfm_model_file_meta(path, "source_tokenizer", &b, err);
    if (rc > 0) {
        char name[1100];
        snprintf(name, sizeof name, "%s:source_tokenizer", path);
        rc = tfm_tokenizer_from_json(out, b.data, b.len, name, err);
    }
    tfm_buf_free(&b);
    return rc < 0 ? -1 : 0;
}

/* init_tok: train.init's tokenizer (NULL: none, or no train.init); taken
 * over when the run reads text with it. */
static int load_data(run *R, tfm_config *cfg, tfm_tokenizer **init_tok, tfm_err *err)
{
    /* a model started from a file reads text with the file's own
     * tokenizer unless data.tokenizer names one (then it must be the
     * same); the stored configuration then names where it came from */
    const char *init = cfg->train.init;
    int from_init = init[0] && *init_tok &&
                    (!cfg->data.tokenizer[0] || !strcmp(cfg->data.tokenizer, init));
    if (from_init) {
        snprintf(cfg->data.tokenizer, sizeof cfg->data.tokenizer, "%s", init);
        R->tok = *init_tok;
        *init_tok = NULL;
        tfm_tokenizer_to_json(R->tok, &R->tok_json);
    } else if (cfg->data.tokenizer[0]) {
        if (tfm_model_tokenizer_load(&R->tok, cfg->data.tokenizer, err) < 0)
            return -1;
        tfm_tokenizer_to_json(R->tok, &R->tok_json);
        if (*init_tok && check_init_tokenizer(R, "data.tokenizer", cfg->data.tokenizer, R->tok,
                                              &R->tok_json, *init_tok, "tokenizer", err) < 0)
            return -1;
    } else if (init[0] && (cfg->data.text[0] || cfg->data.source[0])) {
        return tfm_err_set(err, "%s needs a tokenizer: train.init %s carries none (set "
                                "data.tokenizer)",
                           cfg->data.text[0] ? "data.text" : "data.source", init);
    }
    /* an encoder-decoder file's source tokenizer encodes its sources */
    tfm_tokenizer *init_src = NULL;
    if (init[0] && cfg->model.kind == TFM_KIND_ENCODER_DECODER &&
        init_source_tokenizer(init, &init_src, err) < 0)
        return -1;
    int rc = 0;
    if (cfg->data.source_tokenizer[0]) {
        if (tfm_model_tokenizer_load(&R->src_tok, cfg->data.source_tokenizer, err) < 0) {
            rc = -1;
        } else {
            tfm_tokenizer_to_json(R->src_tok, &R->src_tok_json);
            if (init_src)
                rc = check_init_tokenizer(R, "data.source_tokenizer",
                                          cfg->data.source_tokenizer, R->src_tok,
                                          &R->src_tok_json, init_src, "source tokenizer", err);
        }
    } else if (init_src) { /* taken again from train.init on resume */
        R->src_tok = init_src;
        init_src = NULL;
        tfm_tokenizer_to_json(R->src_tok, &R->src_tok_json);
    }
    if (init_src)
        tfm_tokenizer_free(init_src);
    if (rc < 0)
        return -1;
    if (tfm_task_open(&R->task, cfg, R->tok, R->src_tok, err) < 0)
        return -1;
    tfm_task_set_translate(R->task, R->o->translate);
    {
        char *sp = R->o->rundir ? join(R->o->rundir, "samples.tsv") : NULL;
        tfm_task_set_rollout(R->task, R->o->sample, sp);
        free(sp);
    }
    return 0;
}

/* One id array as JSON: "key": [ids...], "text_key": its text (ids < 0,
 * the ignored targets, left out of the text) or null without a tokenizer
 * or when an id is outside it. */
static void dump_ids(tfm_buf *out, const tfm_tokenizer *tok, const char *key,
                     const char *text_key, const int32_t *ids, int n, tfm_buf *text,
                     uint32_t *scratch)
{
    tfm_buf_printf(out, "\"%s\": [", key);
    int k = 0;
    for (int i = 0; i < n; i++) {
        tfm_buf_printf(out, i ? ", %d" : "%d", (int)ids[i]);
        if (ids[i] >= 0)
            scratch[k++] = (uint32_t)ids[i];
    }
    tfm_buf_printf(out, "], \"%s\": ", text_key);
    tfm_buf_clear(text);
    if (tok && tfm_tokenizer_decode(tok, scratch, (size_t)k, 0, text, NULL) == 0)
        tfm_buf_put_json_string(out, text->data ? text->data : "", text->len);
    else
        tfm_buf_puts(out, "null");
}

/* Row r of b: the encoder's input (the source of an encoder-decoder, else
 * the inputs up to the row's length) and the targets, trailing ignored
 * positions dropped. */
static void dump_row(tfm_buf *out, const tfm_tokenizer *tok, const tfm_batch *b, int r,
                     tfm_buf *text, uint32_t *scratch)
{
    const int32_t *in = b->src ? b->src + (size_t)r * b->S : b->inputs + (size_t)r * b->T;
    int n_in = b->src ? (b->src_lengths ? b->src_lengths[r] : b->S)
                      : (b->lengths ? b->lengths[r] : b->T);
    const int32_t *tg = b->targets ? b->targets + (size_t)r * b->T : NULL;
    int n_tg = tg ? b->T : 0;
    while (n_tg > 0 && tg[n_tg - 1] < 0)
        n_tg--;
    tfm_buf_puts(out, "{");
    dump_ids(out, tok, "input_ids", "input", in, n_in, text, scratch);
    tfm_buf_puts(out, ", ");
    dump_ids(out, tok, "target_ids", "target", tg, n_tg, text, scratch);
    if (b->prefix_len) /* prefix-lm: the inputs below it see each other */
        tfm_buf_printf(out, ", \"prefix_len\": %d", b->prefix_len[r]);
    if (b->doc_start) { /* packing: each position's document start */
        tfm_buf_puts(out, ", \"doc_start\": [");
        for (int t = 0; t < n_in; t++)
            tfm_buf_printf(out, t ? ", %d" : "%d", b->doc_start[(size_t)r * b->T + t]);
        tfm_buf_putc(out, ']');
    }
    tfm_buf_puts(out, "}\n");
}

int tfm_train_dump_batches(const tfm_config *c, int64_t n, tfm_buf *out, tfm_err *err)
{
    run R_ = {0}, *R = &R_;
    tfm_train_opts o = {0};
    tfm_config cfg = *c;
    R->cfg = &cfg;
    R->o = &o;
    int rc = -1;
    tfm_buf text = {0};
    uint32_t *scratch = NULL;
    tfm_tokenizer *init_tok = NULL;
    if (tfm_config_validate(&cfg, err) < 0)
        goto out;
    if (cfg.train.init[0]) {
        /* the shape keys train.init gives, as a run resolves them */
        tfm_config icfg;
        tfm_model init_src;
        if (tfm_model_load(cfg.train.init, &icfg, &init_src, &init_tok, err) < 0) {
            tfm_err_prefix(err, "train.init");
            goto out;
        }
        tfm_model_free(&init_src);
        char note[512];
        if (tfm_train_init_config(&cfg, &icfg, cfg.train.init, note, sizeof note, err) < 0)
            goto out;
    }
    if (load_data(R, &cfg, &init_tok, err) < 0)
        goto out;
    /* the data stream of a new run's first steps */
    uint64_t seed = cfg.train.seed >= 0 ? (uint64_t)cfg.train.seed : tfm_rng_entropy_seed();
    tfm_rng rng;
    tfm_rng_seed(&rng, seed ^ DATA_SEED_SALT);
    for (int64_t k = 0; k < n;) {
        tfm_batch b;
        size_t nt;
        if (tfm_task_next(R->task, &rng, &b, &nt, err) < 0)
            goto out;
        int longest = b.src && b.S > b.T ? b.S : b.T;
        scratch = tfm_realloc(scratch, (size_t)longest * sizeof *scratch);
        for (int r = 0; r < b.B && k < n; r++, k++)
            dump_row(out, R->tok, &b, r, &text, scratch);
    }
    rc = 0;
out:
    free(scratch);
    tfm_buf_free(&text);
    if (init_tok)
        tfm_tokenizer_free(init_tok);
    if (R->tok)
        tfm_tokenizer_free(R->tok);
    tfm_buf_free(&R->tok_json);
    if (R->src_tok)
        tfm_tokenizer_free(R->src_tok);
    tfm_buf_free(&R->src_tok_json);
    tfm_task_free(R->task);
    return rc;
}

int tfm_train_run(const tfm_config *c, const tfm_train_opts *o, tfm_train_result *res,
                  tfm_err *err)
{
    run R_ = {0}, *R = &R_;
    tfm_config cfg = *c;
    R->cfg = &cfg;
    R->o = o;
    memset(res, 0, sizeof *res);
    res->val_loss = NAN;
    res->val_metric = NAN;
    res->val_metric_name = NULL;
    int rc = -1;
    double *times = NULL;
    int model_ok = 0, adam_ok = 0, lockfd = -1, resumed = 0, resuming = 0, init_ok = 0;
    tfm_model init_src; /* train.init's model, until its weights are copied */
    tfm_tokenizer *init_tok = NULL; /* and its tokenizer, unless the run takes it */
    char *created = NULL; /* the outermost directory this start made */
    tfm_progress bar = {0};
    FILE *logf = NULL;
    const int rk = tfm_dist_rank(), nr = tfm_dist_size(); /* dist: this rank, of nr */

    if (tfm_config_validate(&cfg, err) < 0)
        goto out;
    if (nr > cfg.train.batch_size && !cfg.train.max_tokens) {
        tfm_err_set(err, "train.batch_size %lld is smaller than the number of ranks (%d): each "
                         "rank needs a row of every batch", (long long)cfg.train.batch_size, nr);
        goto out;
    }
    R->model_path = join(o->rundir, "model.safetensors");
    R->best_path = join(o->rundir, "best.safetensors");
    R->state_path = join(o->rundir, "state.safetensors");
    R->log_path = join(o->rundir, "log.tsv");
    R->curves_path = join(o->rundir, "curves.svg");
    /* rank 0 decides; the others learn it in dist_share_state */
    resuming = rk == 0 && (file_exists(R->state_path) ||
                           (o->fresh_optimizer && file_exists(R->model_path)));
    /* model.safetensors of a LoRA run is the merged model, whose
     * configuration has no adapters: continuing from it would silently
     * train every weight (a LoRA run writes adapter_config.json) */
    char *adapter_cfg = join(o->rundir, "adapter_config.json");
    int lora_run = file_exists(adapter_cfg);
    free(adapter_cfg);
    if (rk == 0 && o->fresh_optimizer && lora_run) {
        tfm_err_set(err, "%s: --fresh-optimizer on a LoRA run: it resumes from its "
                         "state.safetensors (model.safetensors holds the merged weights)",
                    o->rundir);
        goto out;
    }
    if (cfg.train.init[0]) {
        /* the file's shape, before the data is read for it; on resume too,
         * so that the configuration resolves as it did at the start */
        tfm_config icfg;
        if (tfm_model_load(cfg.train.init, &icfg, &init_src, &init_tok, err) < 0) {
            tfm_err_prefix(err, "train.init");
            goto out;
        }
        init_ok = 1;
        char note[512];
        if (tfm_train_init_config(&cfg, &icfg, cfg.train.init, note, sizeof note, err) < 0)
            goto out;
        if (note[0] && !resuming)
            say(o, "%s", note);
    }
    tfm_config was; /* resuming: the run's configuration so far */
    if (resuming && check_same_model(R, &cfg, &was, err) < 0)
        goto out;
    if (load_data(R, &cfg, &init_tok, err) < 0)
        goto out;
    if (init_tok) {
        tfm_tokenizer_free(init_tok);
        init_tok = NULL;
    }
    if (nr > 1 && tfm_task_has_step(R->task)) {
        tfm_err_set(err, "train.task %s computes its loss over whole batches in one process: "
                         "run it without MPI ranks", tfm_task_name(R->task));
        goto out;
    }
    const char *mnames[TFM_TASK_METRICS_MAX];
    const int n_metrics = tfm_task_metrics(R->task, mnames);
    char best_name[64];
    tfm_config_choice_name("train.best_by", cfg.train.best_by, best_name, sizeof best_name);
    int best_i = -1; /* the metric best.safetensors goes by; -1 the loss */
    for (int i = 0; i < n_metrics; i++)
        if (!strcmp(mnames[i], best_name))
            best_i = i;
    if (strcmp(best_name, "loss") && best_i < 0) {
        tfm_buf v = {0};
        tfm_buf_puts(&v, "loss");
        for (int i = 0; i < n_metrics; i++)
            tfm_buf_printf(&v, ", %s", mnames[i]);
        tfm_err_set(err, "train.best_by %s: train.task %s does not report it; its validation "
                         "metrics: %s", best_name, tfm_task_name(R->task), tfm_buf_cstr(&v));
        tfm_buf_free(&v);
        goto out;
    }
    const int best_higher = best_i >= 0 && tfm_task_metric_higher_better(best_name);
    res->best_by = cfg.train.best_by;
    res->best_higher = best_higher;

    tfm_model_config gc;
    if (tfm_model_config_from(&cfg, &gc, err) < 0)
        goto out;
    if (rk == 0) { /* dist: rank 0 owns the run directory */
        if (tfm_mkdirs(o->rundir, &created, err) < 0)
            goto out;
        if ((lockfd = lock_rundir(o->rundir, err)) < 0)
            goto out;
        remove_stale_temporaries(o->rundir);
    }

    if (tfm_model_init(&R->m, &gc, err) < 0)
        goto out;
    model_ok = 1;
    if (gc.lora_r > 0 && !init_ok) {
        tfm_err_set(err, "train.lora.r %lld needs train.init: the base model the adapters "
                         "adapt", (long long)cfg.train.lora.r);
        goto out;
    }
    if (gc.lora_r > 0 && o->fresh_optimizer) {
        tfm_err_set(err, "--fresh-optimizer with train.lora: a LoRA run resumes from its "
                         "state.safetensors (model.safetensors holds the merged weights)");
        goto out;
    }
    /* the moments of the trained tensors only (a LoRA run's: its adapters) */
    tfm_adam_init(&R->adam, tfm_adam_size(R->m.table, R->m.n_table),
                  cfg.optim.type == TFM_CONFIG_OPTIM_ADAMW,
                  cfg.optim.beta1, cfg.optim.beta2, cfg.optim.eps, cfg.optim.weight_decay);
    adam_ok = 1;

    resumed = rk == 0 && file_exists(R->state_path);
    if (o->fresh_optimizer && rk == 0) {
        if (!file_exists(R->model_path)) {
            tfm_err_set(err, "%s: no model.safetensors to continue from", o->rundir);
            goto out;
        }
        resumed = 1; /* from the model file, whatever the state file is */
    }
    if (rk != 0) {
        /* dist: receives rank 0's state below */
    } else if (resumed && o->fresh_optimizer) {
        /* the seed is the run's (its configuration comes from the model
         * file): dropout and data restart from it, shifted by the step */
        if (load_weights_only(R, err) < 0)
            goto out;
        uint64_t seed = cfg.train.seed >= 0 ? (uint64_t)cfg.train.seed : 0;
        R->st.seed = seed;
        R->st.best_val = INFINITY;
        R->st.best_step = -1;
        tfm_rng_seed(&R->st.data_rng, seed ^ DATA_SEED_SALT ^ (uint64_t)R->st.step);
        say(o, "continuing %s at step %lld from %s with a fresh optimizer state", o->rundir,
            (long long)R->st.step, R->model_path);
    } else if (resumed) {
        char report[1024];
        /* LoRA: the state holds the adapters; the base is train.init's */
        if (gc.lora_r > 0 &&
            tfm_train_init_from(&R->m, &init_src, cfg.train.init, report, sizeof report, err) < 0)
            goto out;
        if (tfm_checkpoint_load_state(R->state_path, &R->m, &R->adam, &R->st, err) < 0) {
            if (!state_intact(R->state_path))
                damaged_state(o->rundir, R->state_path, err);
            tfm_err_prefix(err, "cannot resume %s", o->rundir);
            goto out;
        }
        cfg.train.seed = (int64_t)R->st.seed;
        say(o, "resuming %s at step %lld", o->rundir, (long long)R->st.step);
    } else {
        uint64_t seed = cfg.train.seed >= 0 ? (uint64_t)cfg.train.seed : tfm_rng_entropy_seed();
        if (cfg.train.seed < 0) {
            seed &= (1ULL << 62) - 1; /* stays a valid non-negative train.seed */
            cfg.train.seed = (int64_t)seed;
            say(o, "seed %llu", (unsigned long long)seed);
        }
        R->st.seed = seed;
        R->st.best_val = INFINITY;
        R->st.best_step = -1;
        tfm_model_init_weights(&R->m, seed);
        if (init_ok) {
            char report[1024];
            if (tfm_train_init_from(&R->m, &init_src, cfg.train.init, report, sizeof report,
                                    err) < 0)
                goto out;
            say(o, "%s", report);
        }
        tfm_rng_seed(&R->st.data_rng, seed ^ DATA_SEED_SALT);
    }
    if (rk == 0 && resumed) {
        /* Extending (or shortening) a run redraws its schedule: the rate
         * jumps to the new one's, so the result is not that of one run of
         * the new length, nor bit for bit the old run continued. */
        tfm_schedule a, b;
        tfm_schedule_from_config(&a, &was);
        tfm_schedule_from_config(&b, &cfg);
        if (was.train.max_steps != cfg.train.max_steps && R->st.step < cfg.train.max_steps)
            say(o, "warning: train.max_steps %lld (the run's: %lld): the learning-rate schedule "
                   "now runs to step %lld, so at step %lld the rate goes from %.2g to %.2g; "
                   "the run is no longer the same as one of %lld steps from the start",
                (long long)cfg.train.max_steps, (long long)was.train.max_steps,
                (long long)cfg.train.max_steps, (long long)R->st.step,
                tfm_schedule_lr(&a, R->st.step), tfm_schedule_lr(&b, R->st.step),
                (long long)cfg.train.max_steps);
    }
    if (init_ok) {
        tfm_model_free(&init_src);
        init_ok = 0;
    }
    dist_share_state(R, &cfg, &resumed);
    tfm_config_dump(&cfg, 0, &R->config_yaml);
    if (gc.lora_r > 0) {
        tfm_config bc = cfg;
        bc.train.lora.r = 0;
        tfm_config_dump(&bc, 0, &R->base_yaml);
    }
    tfm_buf header = {0};
    log_header(&header, mnames, n_metrics);
    int lt = rk == 0 ? log_truncate(R->log_path, resumed ? R->st.step : -1,
                                    tfm_buf_cstr(&header), err) : 0;
    tfm_buf_free(&header);
    if (lt < 0)
        goto out;
    R->saved_step = R->st.step;
    R->saved_any = resumed;
    res->seed = R->st.seed;
    char data_desc[256];
    tfm_task_describe(R->task, data_desc, sizeof data_desc);
    if (gc.lora_r > 0) {
        size_t all, trained = tfm_model_trainable(&R->m, &all);
        say(o, "LoRA r %d, alpha %g on %s: %zu trainable parameters of %zu (%.2f%%)", gc.lora_r,
            (double)gc.lora_alpha, cfg.train.lora.targets, trained, all,
            100.0 * (double)trained / (double)all);
    }
    say(o, "%.2fM parameters, vocabulary %lld, %s",
        (double)tfm_model_config_num_params(&gc) / 1e6, (long long)cfg.model.vocab_size,
        data_desc);
    res->best_val = R->st.best_val;

    if (R->st.step >= cfg.train.max_steps) {
        if (R->st.step > cfg.train.max_steps)
            say(o, "%s is at step %lld, already past train.max_steps %lld: nothing to do "
                   "(to continue, raise it: --set train.max_steps=N)", o->rundir,
                (long long)R->st.step, (long long)cfg.train.max_steps);
        else
            say(o, "%s is already at step %lld of %lld", o->rundir, (long long)R->st.step,
                (long long)cfg.train.max_steps);
        if (!resumed && save(R, err) < 0)
            goto out;
        res->end = TFM_TRAIN_DONE;
        res->step = R->st.step;
        rc = 0;
        goto out;
    }

    if (rk == 0) { /* dist: rank 0 writes the log */
        if (!(logf = fopen(R->log_path, "a"))) {
            tfm_err_errno(err, "%s", R->log_path);
            goto out;
        }
        setvbuf(logf, NULL, _IOLBF, 0);
    }

    const int B = (int)cfg.train.batch_size;
    const int64_t accum = cfg.train.grad_accum;
    /* dist: each rank computes its rows [r·B/N, (r+1)·B/N) of every
     * (global) batch */
    tfm_replicas_init(&R->reps, &R->m,
                      data_parallel_threads(&R->m, nr > 1 ? (B + nr - 1) / nr : B,
                                            R->o->data_parallel));
    if (nr > 1 && R->m.cfg.lora_r > 0) {
        size_t n = tfm_model_trainable(&R->m, NULL);
        R->lora_sum = tfm_malloc(n * sizeof *R->lora_sum + 1);
    } else if (nr > 1) {
        R->red = dist_plan(&R->m, cfg.train.bucket_mb);
    }
    int64_t todo = cfg.train.max_steps - R->st.step;
    if (o->run_steps > 0 && o->run_steps < todo)
        todo = o->run_steps;
    times = tfm_malloc((size_t)todo * sizeof *times);

    tfm_schedule sched;
    tfm_schedule_from_config(&sched, &cfg);
    if (cfg.schedule.warmup >= cfg.train.max_steps)
        say(o, "warning: schedule.warmup %lld is not below train.max_steps %lld: the learning "
               "rate rises for the whole run (to %.2g at the last step) and never decays",
            (long long)cfg.schedule.warmup, (long long)cfg.train.max_steps,
            tfm_schedule_lr(&sched, cfg.train.max_steps - 1));
    tfm_model_set_training(&R->m, 1);
    /* The bar counts this session's steps, so that rate and ETA stay right
     * after a resume; the absolute step goes into the text. */
    tfm_progress_init(&bar, "train", "step", (double)todo, o->quiet || rk != 0);

    double session_start = tfm_now(), elapsed0 = R->st.elapsed;
    /* the log line's interval, in the state: a resumed run's first line
     * averages the steps before the pause too */
    double *log_loss = &R->st.log_loss, *log_time = &R->st.log_time,
           *log_tokens = &R->st.log_tokens;
    int64_t *log_n = &R->st.log_n;
    res->end = TFM_TRAIN_DONE;
    while (R->st.step < cfg.train.max_steps) {
        if (tfm_dist_any(o->stop && *o->stop)) { /* dist: a signal to any rank stops all */
            res->end = TFM_TRAIN_STOPPED;
            break;
        }
        if (o->run_steps > 0 && res->steps_run >= o->run_steps) {
            res->end = TFM_TRAIN_PAUSED;
            break;
        }
        double t0 = tfm_now();
        tfm_model_zero_grad(&R->m);
        double loss = 0;
        for (int64_t a = 0; a < accum; a++) {
            tfm_batch batch;
            size_t n_tokens;
            if (tfm_task_next(R->task, &R->st.data_rng, &batch, &n_tokens, err) < 0)
                goto out_log;
            *log_tokens += (double)n_tokens;
            float l = 0.0f;
            tfm_rng keep = R->m.rng;
            long total[TFM_HEAD_N];
            if (nr > 1) {
                /* dist: this rank's rows, each head's mean over the whole
                 * batch's targets (so that the ranks' gradients and losses
                 * add up to the whole's), and its own dropout stream drawn
                 * from the shared one (which stays the same on all ranks) */
                int r0 = (int)((int64_t)rk * batch.B / nr);
                int rows = (int)((int64_t)(rk + 1) * batch.B / nr) - r0;
                tfm_batch_counts(&R->m.cfg, &batch, total);
                batch = tfm_batch_rows(&batch, r0, rows);
                batch.head_total = total;
                tfm_rng_seed(&R->m.rng, tfm_rng_u64(&keep) ^ (uint64_t)rk * EVAL_SEED_SALT);
            }
            /* dist: the last micro-batch's backward starts the sum of each
             * bucket it finishes (the earlier ones' gradients are not final) */
            if (R->red && cfg.train.overlap && a == accum - 1) {
                R->m.grads_ready = grads_ready;
                R->m.grads_ready_ctx = R->red;
            }
            /* a token-budget batch of fewer pairs than ranks leaves some
             * ranks without rows: they add nothing (and start every bucket
             * in the wait below) */
            int fb = batch.B <= 0 ? 0
                     : tfm_task_has_step(R->task)
                         ? tfm_task_step(R->task, &R->m, &batch, 1.0f / (float)accum, &l, err)
                         : tfm_replicas_forward_backward(&R->reps, &batch, 1.0f / (float)accum,
                                                         &l, err);
            R->m.grads_ready = NULL;
            if (fb < 0)
                goto out_log;
            if (nr > 1)
                R->m.rng = keep;
            loss += (double)l / (double)accum;
        }
        /* dist: the whole batch's gradient and loss, the same on every rank */
        if (R->red)
            tfm_dist_reduce_wait(R->red);
        else if (R->lora_sum)
            lora_sum_grads(R);
        tfm_dist_sum_doubles(&loss, 1);
        double norm = tfm_grad_norm_model(&R->m);
        if (!isfinite(loss) || !isfinite(norm)) {
            tfm_progress_end(&bar);
            char k[1200];
            kept(R, k, sizeof k);
            tfm_err_set(err, "%s at step %lld (loss %g, gradient norm %g): stopped; %s",
                        !isfinite(loss) ? "the loss is not finite" : "the gradient is not finite",
                        (long long)R->st.step + 1, loss, norm, k);
            goto out_log;
        }
        double lr = tfm_schedule_lr(&sched, R->st.step);
        tfm_adam_step(&R->adam, R->m.params, R->m.grads, R->m.table, R->m.n_table, lr,
                      tfm_grad_clip_factor(norm, cfg.optim.grad_clip));
        R->st.step++;
        double dt = tfm_now() - t0;
        times[res->steps_run++] = dt;
        *log_loss += loss;
        *log_time += dt;
        (*log_n)++;
        res->train_loss = loss;
        R->st.elapsed = elapsed0 + (tfm_now() - session_start);

        const int64_t step = R->st.step;
        const int last = step == cfg.train.max_steps;
        int evaluated = 0;
        double vloss = NAN, vals[TFM_TASK_METRICS_MAX];
        if (tfm_task_has_val(R->task) &&
            ((cfg.train.eval_interval && step % cfg.train.eval_interval == 0) || last)) {
            /* dist: rank 0 evaluates, every rank learns the result */
            tfm_task_score score = {.loss = NAN, .metric = NAN};
            if (rk == 0 &&
                tfm_task_evaluate(R->task, &R->m, R->st.seed ^ EVAL_SEED_SALT, &score, err) < 0)
                goto out_log;
            tfm_dist_bcast(&score.loss, sizeof score.loss);
            tfm_dist_bcast(&score.metric, sizeof score.metric);
            tfm_dist_bcast(score.values, sizeof score.values);
            vloss = score.loss;
            memcpy(vals, score.values, sizeof vals);
            res->val_metric = score.metric;
            res->val_metric_name = score.metric_name;
            evaluated = 1;
            res->val_loss = vloss;
            /* lower is better: the loss, or a higher-is-better metric negated */
            double v = best_i < 0 ? vloss : best_higher ? -vals[best_i] : vals[best_i];
            if (v < R->st.best_val) {
                R->st.best_val = v;
                R->st.best_step = step;
                R->st.evals_since_best = 0;
                if (rk == 0 && save_model(R, R->best_path, step, err) < 0)
                    goto out_log;
            } else {
                R->st.evals_since_best++;
            }
            res->best_val = R->st.best_val;
        }
        if (step % cfg.train.log_interval == 0 || evaluated || last) {
            R->st.elapsed = elapsed0 + (tfm_now() - session_start);
            double tps = *log_time > 0 ? *log_tokens / *log_time : 0;
            if (logf) {
                fprintf(logf, "%lld\t%.6f\t", (long long)step, *log_loss / (double)*log_n);
                if (evaluated)
                    fprintf(logf, "%.6f", vloss);
                fprintf(logf, "\t%.6g\t%.6g\t%.1f\t%.3f", lr, norm, tps, R->st.elapsed);
                for (int i = 0; i < n_metrics; i++) {
                    if (!evaluated)
                        fputc('\t', logf);
                    else
                        fprintf(logf, !strcmp(mnames[i], "bleu") ? "\t%.2f" : "\t%.6g", vals[i]);
                }
                fputc('\n', logf);
                /* the curves, redrawn from the log at each evaluation (a
                 * failure to draw them is said, not fatal) */
                if (evaluated) {
                    fflush(logf);
                    const char *dirs[1] = {o->rundir};
                    tfm_err perr = {0};
                    if (tfm_plot_write(dirs, 1, R->curves_path, &perr) < 0)
                        say(o, "warning: %s: %s", R->curves_path, perr.msg);
                }
            }
            *log_loss = *log_time = *log_tokens = 0;
            *log_n = 0;
        }
        /* Without validation data there are no evaluations, but a long run
         * still needs its checkpoints: 0 follows eval_interval either way. */
        int64_t every = cfg.train.checkpoint_interval ? cfg.train.checkpoint_interval
                                                      : cfg.train.eval_interval;
        int ckpt = every && step % every == 0;
        if (ckpt && save(R, err) < 0)
            goto out_log;
        int len = snprintf(bar.extra, sizeof bar.extra, "step %lld loss %.4f", (long long)step,
                           loss);
        if (!isnan(res->val_loss) && len > 0 && (size_t)len < sizeof bar.extra)
            len += snprintf(bar.extra + len, sizeof bar.extra - (size_t)len, " val %.4f",
                            res->val_loss);
        if (cfg.train.eval_bleu && !isnan(res->val_metric) && len > 0 &&
            (size_t)len < sizeof bar.extra)
            snprintf(bar.extra + len, sizeof bar.extra - (size_t)len, " BLEU %.2f",
                     res->val_metric);
        tfm_progress_update(&bar, (double)res->steps_run);
        if (evaluated && cfg.train.patience && R->st.evals_since_best >= cfg.train.patience) {
            res->end = TFM_TRAIN_PATIENCE;
            say(o, "no better validation %s in %lld evaluations: stopping at step %lld "
                   "(best %.4f at step %lld)", best_name,
                (long long)cfg.train.patience, (long long)step,
                best_higher ? -R->st.best_val : R->st.best_val, (long long)R->st.best_step);
            break;
        }
    }
    tfm_progress_end(&bar);
    if (R->saved_step != R->st.step && save(R, err) < 0)
        goto out_log;
    if (res->end == TFM_TRAIN_STOPPED && R->saved_any)
        say(o, "interrupted: saved step %lld in %s", (long long)R->st.step, o->rundir);
    else if (res->end == TFM_TRAIN_STOPPED)
        say(o, "interrupted before the first step: nothing saved");
    res->step = R->st.step;
    if (res->steps_run) {
        qsort(times, (size_t)res->steps_run, sizeof *times, cmp_double);
        res->ms_per_step = 1000 * times[res->steps_run / 2];
        tfm_dist_stat ds;
        tfm_dist_stats(&ds);
        double k = (double)res->steps_run;
        size_t last = 0;
        int nb = R->red ? tfm_dist_reduce_buckets(R->red, &last) : R->lora_sum ? 1 : 0;
        if (R->lora_sum)
            last = tfm_model_trainable(&R->m, NULL);
        if (nr > 1)
            say(o, "%d ranks: all-reduce of %.2f MB a step in %d buckets (the last %.2f MB; "
                   "%.0f%% started during backward): %.2f ms a step waited for, %.2f ms from "
                   "the first bucket's start to the sum's end (means); the median step %.2f ms",
                nr, ds.floats * sizeof(float) / k / 1e6, nb, (double)last * sizeof(float) / 1e6,
                ds.buckets ? floor(100.0 * (double)ds.early / (double)ds.buckets) : 0.0,
                1000 * ds.wait_seconds / k, 1000 * ds.span_seconds / k, res->ms_per_step);
    }
    rc = 0;
out_log:
    tfm_progress_end(&bar);
    if (logf)
        fclose(logf);
out:
    /* A start that failed or was stopped before its first checkpoint
     * leaves nothing (no lone log.tsv, no empty directory): the next
     * start is a clean one.  Once a checkpoint is written, a later failure
     * (NaN, a full disk) keeps the log, curves and best model with it;
     * and a run directory to resume (an error before resumed is set) is
     * never touched. */
    if (!R->saved_any && !resumed && !resuming && lockfd >= 0) {
        unlink(R->log_path);
        unlink(R->curves_path);
        unlink(R->best_path);
        if (created)
            tfm_rmdirs(o->rundir, created);
    }
    if (lockfd >= 0)
        close(lockfd);
    tfm_dist_reduce_free(R->red);
    free(R->lora_sum);
    free(created);
    free(times);
    if (init_ok)
        tfm_model_free(&init_src);
    if (init_tok)
        tfm_tokenizer_free(init_tok);
    if (adam_ok)
        tfm_adam_free(&R->adam);
    tfm_replicas_free(&R->reps);
    if (model_ok)
        tfm_model_free(&R->m);
    if (R->tok)
        tfm_tokenizer_free(R->tok);
    tfm_buf_free(&R->tok_json);
    if (R->src_tok)
        tfm_tokenizer_free(R->src_tok);
    tfm_buf_free(&R->src_tok_json);
    tfm_buf_free(&R->config_yaml);
    tfm_buf_free(&R->base_yaml);
    tfm_task_free(R->task);
    free(R->model_path);
    free(R->best_path);
    free(R->state_path);
    free(R->log_path);
    free(R->curves_path);
    return rc;
}
