/* What the fine-tuning tasks (classify, tag, span) share: labelled
 * examples read from data.text (and data.val, or the last val_fraction of
 * data.text), their label set, rows encoded by data/ftdata.h, batches of
 * rows drawn uniformly from the rng, and validation through
 * data/predict.h (the head's mean loss, and tfm_ft_metric).  Each task's
 * file adds its model checks (task_classify.c, task_tag.c, task_span.c). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "data/predict.h"
#include "train/task_internal.h"

typedef struct ft_task {
    tfm_ft_task kind;
    tfm_ft_data train, val;    /* val: a file of its own, or empty */
    const tfm_ft_data *vdata;  /* where the validation examples are */
    size_t tr_n, va0, va_n;    /* training [0, tr_n); validation [va0, va0 + va_n) */
    tfm_ft_labels labels;
    tfm_ft_set tr, va;
    tfm_ft_batcher bb;
    size_t *draw;
    double *cdf;               /* train.class_balance: cumulative draw weights */
    int B, eval_rows, regression;
    float lm_weight;
    int max_len;
    tfm_buf meta;
} ft_task;

/* The first row whose cumulative weight exceeds a uniform draw. */
static size_t draw_weighted(const double *cdf, size_t n, tfm_rng *rng)
{
    double u = tfm_rng_double(rng) * cdf[n - 1];
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* train.class_balance q: row i is drawn with weight n_c^-q, n_c the count
 * of its class among the training rows. */
static int class_balance(ft_task *F, double q, tfm_err *err)
{
    if (q <= 0.0)
        return 0;
    if (F->kind != TFM_FT_CLASSIFY || F->regression)
        return tfm_err_set(err, "train.class_balance %g: only train.task classify with class "
                           "labels draws by class", q);
    size_t K = F->labels.n, n = F->tr.n_rows;
    double *weight = tfm_calloc(K, sizeof *weight); /* counts, then n_c^-q */
    for (size_t i = 0; i < n; i++) {
        int32_t y = F->tr.row[i].label;
        if (y < 0 || (size_t)y >= K) {
            free(weight);
            return tfm_err_set(err, "train.class_balance: training row %zu has no class", i);
        }
        weight[y] += 1.0;
    }
    for (size_t c = 0; c < K; c++)
        weight[c] = weight[c] > 0.0 ? pow(weight[c], -q) : 0.0;
    F->cdf = tfm_malloc(n * sizeof *F->cdf);
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        sum += weight[F->tr.row[i].label];
        F->cdf[i] = sum;
    }
    free(weight);
    return 0;
}

static int ft_next(void *impl, tfm_rng *rng, tfm_batch *b, size_t *n_tokens, tfm_err *err)
{
    (void)err;
    ft_task *F = impl;
    size_t tokens = 0;
    for (int i = 0; i < F->B; i++) {
        F->draw[i] = F->cdf ? draw_weighted(F->cdf, F->tr.n_rows, rng)
                            : (size_t)tfm_rng_below(rng, F->tr.n_rows);
        tokens += (size_t)F->tr.row[F->draw[i]].len;
    }
    tfm_ft_batch(&F->bb, &F->tr, F->draw, F->B, 1, F->regression, F->lm_weight, b);
    *n_tokens = tokens;
    return 0;
}

/* Every validation example: the head's loss (not GPT's auxiliary LM loss),
 * and the task's metric of the predictions. */
static int ft_evaluate(void *impl, tfm_model *m, uint64_t seed, tfm_task_score *s, tfm_err *err)
{
    (void)seed;
    ft_task *F = impl;
    tfm_ft_out out;
    if (tfm_ft_run(m, &F->va, F->regression, 0, F->eval_rows, &out, &s->loss, err) < 0)
        return -1;
    tfm_ft_pred p;
    /* answers as long as SQuAD's evaluation allows (30 tokens) */
    tfm_ft_predict(&F->va, &out, &F->labels, 30, &p);
    const char *names[TFM_TASK_METRICS_MAX];
    tfm_ft_metric_names(F->kind, &F->labels, names);
    tfm_ft_metrics(F->vdata, &F->va, &p, &F->labels, s->values);
    s->metric = s->values[0];
    s->metric_name = names[0];
    tfm_ft_pred_free(&p);
    tfm_ft_out_free(&out);
    return 0;
}

static int ft_metrics(void *impl, const char **names)
{
    ft_task *F = impl;
    return tfm_ft_metric_names(F->kind, &F->labels, names);
}

static int ft_has_val(void *impl)
{
    return ((ft_task *)impl)->va.n_rows > 0;
}

static void ft_describe(void *impl, char *buf, size_t size)
{
    ft_task *F = impl;
    tfm_buf b = {0};
    tfm_buf_printf(&b, "%zu training examples (%zu rows), %zu validation examples", F->tr_n,
                   F->tr.n_rows, F->va_n);
    if (F->kind == TFM_FT_CLASSIFY && F->labels.regression)
        tfm_buf_puts(&b, "; regression");
    else if (F->kind != TFM_FT_SPAN) {
        tfm_buf_printf(&b, "; %zu %s: ", F->labels.n, F->kind == TFM_FT_TAG ? "tags" : "labels");
        for (size_t i = 0; i < F->labels.n && i < 8; i++)
            tfm_buf_printf(&b, "%s%s", i ? " " : "", F->labels.name[i]);
        if (F->labels.n > 8)
            tfm_buf_puts(&b, " ...");
    }
    size_t cut = F->tr.truncated + F->va.truncated;
    if (cut)
        tfm_buf_printf(&b, "; %zu example%s cut to %d tokens (data.truncate head)", cut,
                       cut == 1 ? "" : "s", F->max_len);
    snprintf(buf, size, "%s", tfm_buf_cstr(&b));
    tfm_buf_free(&b);
}

static const char *ft_meta(void *impl)
{
    return tfm_buf_cstr(&((ft_task *)impl)->meta);
}

static void ft_free(void *impl)
{
    ft_task *F = impl;
    tfm_ft_set_free(&F->tr);
    tfm_ft_set_free(&F->va);
    tfm_ft_labels_free(&F->labels);
    tfm_ft_data_free(&F->train);
    tfm_ft_data_free(&F->val);
    tfm_ft_batcher_free(&F->bb);
    tfm_buf_free(&F->meta);
    free(F->draw);
    free(F->cdf);
    free(F);
}

#define OPS(task)                                                                          \
    {                                                                                      \
        .name = task, .describe = ft_describe, .has_val = ft_has_val, .next = ft_next,     \
        .evaluate = ft_evaluate, .free = ft_free, .meta = ft_meta, .metrics = ft_metrics   \
    }
static const tfm_task_ops ops[] = {OPS("classify"), OPS("tag"), OPS("span")};

static int load(ft_task *F, tfm_config *cfg, const tfm_tokenizer *tok, tfm_ft_prepare prepare,
                tfm_err *err)
{
    tfm_ft_read_opts ro = {.need_gold = 1, .pairs = -1};
    if (tfm_ft_read_file(&F->train, F->kind, cfg->data.text, &ro, err) < 0)
        return -1;
    F->tr_n = F->train.n;
    if (cfg->data.val[0]) {
        if (tfm_ft_read_file(&F->val, F->kind, cfg->data.val, &ro, err) < 0)
            return -1;
        if (F->val.pairs != F->train.pairs)
            return tfm_err_set(err, "%s has %s, but %s %s", cfg->data.val,
                               F->val.pairs ? "pairs of texts" : "single texts", cfg->data.text,
                               F->train.pairs ? "pairs" : "single texts");
        F->vdata = &F->val;
        F->va_n = F->val.n;
    } else {
        /* the last val_fraction of the examples */
        size_t nv = (size_t)((double)F->train.n * cfg->data.val_fraction);
        if (nv >= F->train.n)
            nv = F->train.n - 1;
        F->tr_n = F->train.n - nv;
        F->vdata = &F->train;
        F->va0 = F->tr_n;
        F->va_n = nv;
    }
    const tfm_ft_data *all[2] = {&F->train, &F->val};
    int regression = F->kind != TFM_FT_CLASSIFY ? 0
                     : cfg->model.classes == 1  ? 1
                     : cfg->model.classes >= 2  ? 0
                                                : -1;
    if (tfm_ft_labels_from_data(&F->labels, all, cfg->data.val[0] ? 2 : 1, regression, err) < 0)
        return -1;
    F->regression = F->labels.regression;
    if (prepare(cfg, &F->labels, err) < 0)
        return -1;
    if (tfm_task_vocab_from_tokenizer(cfg, tok, err) < 0)
        return -1;
    tfm_ft_enc_opts eo;
    tfm_ft_enc_opts_from_keys(&eo, &cfg->model, &cfg->data, tok);
    const int64_t ids[] = {eo.cls, eo.sep};
    const char *const keys[] = {"data.cls_id", "data.sep_id"};
    for (int k = 0; k < 2 && !eo.decoder; k++)
        if (ids[k] >= cfg->model.vocab_size)
            return tfm_err_set(err, "%s %lld is outside the vocabulary (size %lld)", keys[k],
                               (long long)ids[k], (long long)cfg->model.vocab_size);
    if (tfm_ft_encode(&F->tr, &F->train, 0, F->tr_n, tok, &F->labels, &eo, err) < 0 ||
        tfm_ft_encode(&F->va, F->vdata, F->va0, F->va_n, tok, &F->labels, &eo, err) < 0)
        return -1;
    F->max_len = eo.max_len;
    F->B = (int)cfg->train.batch_size;
    F->eval_rows = F->B > 16 ? F->B : 16;
    F->lm_weight = eo.decoder ? (float)cfg->train.lm_weight : 0.0f;
    F->draw = tfm_malloc((size_t)F->B * sizeof *F->draw);
    if (class_balance(F, cfg->train.class_balance, err) < 0)
        return -1;
    tfm_ft_labels_json(&F->labels, F->kind, &F->meta);
    return 0;
}

int tfm_task_ft_open(tfm_task *t, tfm_config *cfg, const tfm_tokenizer *tok, tfm_ft_task kind,
                     tfm_ft_prepare prepare, tfm_err *err)
{
    ft_task *F = tfm_calloc(1, sizeof *F);
    F->kind = kind;
    if (!tok) {
        free(F);
        return tfm_err_set(err, "train.task %s needs a tokenizer (data.tokenizer or train.init's)",
                           tfm_ft_task_name(kind));
    }
    if (load(F, cfg, tok, prepare, err) < 0) {
        ft_free(F);
        return -1;
    }
    t->ops = &ops[kind];
    t->impl = F;
    return 0;
}
