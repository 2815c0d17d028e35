#include "train/init.h"

#include "config.h"

#include <stdio.h>
#include <string.h>

#include "model/file.h"
#include "train/run_config.h"

/* Appends ", name" (or the first "name") to a list, ending it with "..."
 * once it is full. */
static void list_add(char *buf, size_t size, int *n, const char *name)
{
    size_t len = strlen(buf);
    if (len + strlen(name) + 8 >= size) {
        if (len + 5 < size && !strstr(buf, "..."))
            strcat(buf, ", ...");
        (*n)++;
        return;
    }
    snprintf(buf + len, size - len, "%s%s", *n ? ", " : "", name);
    (*n)++;
}

/* The keys that decide a model's tensors and what it computes, kind and
 * positions first (whether the others apply depends on them); dropout and
 * the initialisation scheme do not change the model. */
static const char *const shape_keys[] = {
    "model.kind",       "model.positions",     "model.n_layer",     "model.n_enc_layer",
    "model.n_head",     "model.n_embd",        "model.d_ff",        "model.block_size",
    "model.vocab_size", "model.src_vocab_size", "model.tie_embeddings", "model.tie_source",
    "model.bias",       "model.norm",          "model.activation",  "model.ln_eps",
    "model.rope_base",  "model.t5_buckets",    "model.t5_max_distance", "model.segments",
    "model.emb_norm",   "model.emb_scale",     "model.norm_type",   "model.ffn",
    "model.attn_scale", "model.head_scale",    "model.decoder_start", "model.head_bias",
    "model.head_dim",   "model.forced_bos",    "model.source_bos",  "model.n_kv_head",
    "model.attention_window", "model.rope_scaling", "model.rope_factor",
    "model.rope_low_freq_factor", "model.rope_high_freq_factor", "model.rope_original_context",
    "model.embedding_size",
};
/* A HuggingFace folder's rates (config.json's) are part of its recipe:
 * from_pretrained trains with them.  A tfm file's were its run's choice. */
static const char *const dropout_keys[] = {"model.dropout", "model.attn_dropout",
                                           "model.emb_dropout", "model.ffn_dropout",
                                           "model.final_dropout"};
static const char *const head_keys[] = {"model.mlm_head", "model.pooler", "model.pooling",
                                        "model.nsp",      "model.classes", "model.tags",
                                        "model.span",     "model.pooler_activation"};
#define N_SHAPE (sizeof shape_keys / sizeof shape_keys[0])
#define N_HEAD (sizeof head_keys / sizeof head_keys[0])
#define N_DROPOUT (sizeof dropout_keys / sizeof dropout_keys[0])

/* Whether the key means anything in c: a RoPE base without RoPE, or a
 * context length without a table of positions, does not. */
static int applies(const tfm_config *c, const char *key)
{
    if (!strcmp(key, "model.rope_base") || !strcmp(key, "model.rope_scaling"))
        return c->model.positions == TFM_POS_ROPE;
    if (!strncmp(key, "model.rope_", 11)) /* the scaling's parameters */
        return c->model.positions == TFM_POS_ROPE &&
               (c->model.rope_scaling == TFM_ROPE_LLAMA3 ||
                (c->model.rope_scaling == TFM_ROPE_LINEAR && !strcmp(key, "model.rope_factor")));
    if (!strcmp(key, "model.t5_buckets") || !strcmp(key, "model.t5_max_distance"))
        return c->model.positions == TFM_POS_T5;
    if (!strcmp(key, "model.activation")) /* a gated feed-forward has its own */
        return c->model.ffn == TFM_FFN_PLAIN || c->model.mlm_head;
    if (!strcmp(key, "model.block_size"))
        return c->model.positions == TFM_POS_LEARNED;
    if (!strcmp(key, "model.n_enc_layer") || !strcmp(key, "model.tie_source") ||
        !strcmp(key, "model.src_vocab_size") || !strcmp(key, "model.decoder_start") ||
        !strcmp(key, "model.forced_bos") || !strcmp(key, "model.source_bos"))
        return c->model.kind == TFM_KIND_ENCODER_DECODER;
    return 1;
}

/* The key's value as a number, with the 0s that stand for another key's
 * value resolved (d_ff 0 is 4·n_embd). */
static double value(const tfm_config *c, const tfm_schema_key *k)
{
    const char *f = (const char *)c + k->offset;
    double v = k->type == TFM_SCHEMA_INT     ? (double)*(const int64_t *)f
               : k->type == TFM_SCHEMA_FLOAT ? *(const double *)f
                                             : (double)*(const int *)f;
    if (v == 0 && !strcmp(k->path, "model.d_ff"))
        v = 4.0 * (double)c->model.n_embd;
    else if (v == 0 && !strcmp(k->path, "model.head_dim") && c->model.n_head > 0)
        v = (double)(c->model.n_embd / c->model.n_head);
    else if (v == 0 && !strcmp(k->path, "model.n_kv_head"))
        v = (double)c->model.n_head;
    else if (v == 0 && !strcmp(k->path, "model.n_enc_layer"))
        v = (double)c->model.n_layer;
    else if (v == 0 && !strcmp(k->path, "model.src_vocab_size"))
        v = (double)c->model.vocab_size;
    return v;
}

/* 0 where the data will give the value (vocab_size from the tokenizer,
 * classes and tags from the labels): nothing to compare yet. */
static int unresolved(const tfm_config *c, const tfm_schema_key *k)
{
    return value(c, k) == 0 &&
           (!strcmp(k->path, "model.vocab_size") || !strcmp(k->path, "model.src_vocab_size") ||
            !strcmp(k->path, "model.classes") || !strcmp(k->path, "model.tags"));
}

static void value_text(const tfm_config *c, const tfm_schema_key *k, char *buf, size_t size)
{
    const char *f = (const char *)c + k->offset;
    if (k->type == TFM_SCHEMA_ENUM)
        tfm_config_choice_name(k->path, *(const int *)f, buf, size);
    else if (k->type == TFM_SCHEMA_BOOL)
        snprintf(buf, size, "%s", *(const int *)f ? "true" : "false");
    else
        snprintf(buf, size, "%.10g", value(c, k));
}

/* Adds "model.norm post (whose: pre)" to list when the key differs. */
static void diff_key(const tfm_config *c, const tfm_config *other, const tfm_schema_key *k,
                     int from_file, const char *whose, char *list, size_t size, int *n)
{
    /* the same text is the same value (d_ff 0 in both, whatever n_embd) */
    size_t len = k->type == TFM_SCHEMA_INT ? sizeof(int64_t)
                 : k->type == TFM_SCHEMA_FLOAT ? sizeof(double) : sizeof(int);
    if (!applies(c, k->path) || !applies(other, k->path) || unresolved(c, k) ||
        !memcmp((const char *)c + k->offset, (const char *)other + k->offset, len) ||
        value(c, k) == value(other, k))
        return;
    /* a model started from a file may use a shorter context than the
     * file's table of positions (its first rows) */
    if (from_file && !strcmp(k->path, "model.block_size") &&
        c->model.block_size < other->model.block_size)
        return;
    char a[64], b[64], item[256];
    value_text(c, k, a, sizeof a);
    value_text(other, k, b, sizeof b);
    snprintf(item, sizeof item, "%s %s (%s: %s)", k->path, a, whose, b);
    list_add(list, size, n, item);
}

int tfm_train_shape_diff(const tfm_config *c, const tfm_config *run, int heads, char *keys,
                         size_t size)
{
    int n = 0;
    keys[0] = 0;
    for (size_t i = 0; i < N_SHAPE; i++)
        diff_key(c, run, tfm_config_find(shape_keys[i]), 0, "the run's", keys, size, &n);
    for (size_t i = 0; heads && i < N_HEAD; i++)
        diff_key(c, run, tfm_config_find(head_keys[i]), 0, "the run's", keys, size, &n);
    return n;
}

/* Whether train.task t uses the head. */
static int task_uses(int t, const char *head)
{
    int nsp = t == TFM_CONFIG_TASK_MLM_NSP;
    if (!strcmp(head, "model.mlm_head"))
        return t == TFM_CONFIG_TASK_MLM || nsp;
    if (!strcmp(head, "model.nsp"))
        return nsp;
    if (!strcmp(head, "model.pooler") || !strcmp(head, "model.pooling") ||
        !strcmp(head, "model.classes") || !strcmp(head, "model.pooler_activation"))
        return nsp || t == TFM_CONFIG_TASK_CLASSIFY || t == TFM_CONFIG_TASK_REWARD;
    if (!strcmp(head, "model.tags"))
        return t == TFM_CONFIG_TASK_TAG || t == TFM_CONFIG_TASK_PPO;
    return t == TFM_CONFIG_TASK_SPAN;
}

int tfm_train_init_config(tfm_config *c, const tfm_config *file, const char *path, char *note,
                          size_t size, tfm_err *err)
{
    char bad[768] = "";
    int n_bad = 0;
    note[0] = 0;
    for (size_t i = 0; i < N_SHAPE; i++) {
        const tfm_schema_key *k = tfm_config_find(shape_keys[i]);
        if (tfm_config_given(c, k->path)) {
            diff_key(c, file, k, 1, "the file's", bad, sizeof bad, &n_bad);
            continue;
        }
        size_t len = k->type == TFM_SCHEMA_INT ? sizeof(int64_t)
                     : k->type == TFM_SCHEMA_FLOAT ? sizeof(double) : sizeof(int);
        memcpy((char *)c + k->offset, (const char *)file + k->offset, len);
    }
    if (n_bad)
        return tfm_err_set(err, "train.init %s: %s: a model started from a file keeps the "
                                "file's shape (leave %s out of the configuration)",
                           path, bad, n_bad == 1 ? "this key" : "these keys");
    /* how the file's generations end, unless the configuration says */
    if (!tfm_config_given(c, "model.forced_eos"))
        c->model.forced_eos = file->model.forced_eos;
    /* a HuggingFace checkpoint has no tfm configuration in the file */
    tfm_buf meta = {0};
    int rc = tfm_model_file_meta(path, "config", &meta, err);
    tfm_buf_free(&meta);
    if (rc < 0)
        return -1;
    for (size_t i = 0; rc == 0 && i < N_DROPOUT; i++) {
        const tfm_schema_key *k = tfm_config_find(dropout_keys[i]);
        if (!tfm_config_given(c, k->path))
            memcpy((char *)c + k->offset, (const char *)file + k->offset, sizeof(double));
    }

    /* Pre-training's heads (BERT's MLM and NSP) mean nothing to the task
     * that follows it, though the configuration it came with still names
     * them: the file's heads that the new task does not use are dropped (a
     * head the file lacks is the user's to ask for, and the task's to
     * refuse). */
    int t = (int)c->train.task;
    if (t == (int)file->train.task)
        return 0;
    char dropped[256] = "";
    int n = 0, had_nsp = c->model.nsp && file->model.nsp;
    char task[32], was[32];
    tfm_config_choice_name("train.task", t, task, sizeof task);
    tfm_config_choice_name("train.task", (int)file->train.task, was, sizeof was);
    for (size_t i = 0; i < N_HEAD; i++) {
        const tfm_schema_key *k = tfm_config_find(head_keys[i]);
        if (task_uses(t, k->path) || value(c, k) == 0 || value(file, k) == 0)
            continue;
        list_add(dropped, sizeof dropped, &n, k->path);
        memset((char *)c + k->offset, 0,
               k->type == TFM_SCHEMA_INT ? sizeof(int64_t) : sizeof(int));
    }
    /* NSP's classifier has its 2 classes; the task's own is sized from its
     * labels */
    if (had_nsp && !c->model.nsp && c->model.classes) {
        list_add(dropped, sizeof dropped, &n, "model.classes (NSP's)");
        c->model.classes = 0;
    }
    if (n)
        snprintf(note, size, "train.task %s (%s was trained for %s) drops the heads it does not "
                             "use: %s",
                 task, path, was, dropped);
    return 0;
}

/* Which head classifier.* is in a model: the sequence classifier (1), the
 * tagger (2, HF's name for both), or none. */
static int classifier_owner(const tfm_model_config *c)
{
    return c->n_classes && !c->nsp ? 1 : c->n_tags ? 2 : 0;
}

/* Whether src's tensor of this name is the same head's as m's: a tagger's
 * classifier.* does not start a sequence classifier, nor the reverse. */
static int same_head(const tfm_model *m, const tfm_model *src, const char *name)
{
    return strncmp(name, "classifier.", 11) ||
           classifier_owner(&m->cfg) == classifier_owner(&src->cfg);
}

int tfm_train_init_from(tfm_model *m, const tfm_model *src, const char *path, char *report,
                        size_t size, tfm_err *err)
{
    char fresh[400] = "", unused[400] = "";
    int loaded = 0, n_fresh = 0, n_unused = 0;
    for (int i = 0; i < m->n_table; i++) {
        const tfm_param *p = &m->table[i];
        const tfm_param *q = tfm_model_param(src, p->name);
        size_t len = strlen(p->name);
        /* a shorter context keeps the first rows of the learned positions
         * (BERT's 512 for fine-tuning at 128) */
        int rows = q && same_head(m, src, p->name) && q->shape[1] == p->shape[1] &&
                   (q->shape[0] == p->shape[0] ||
                    (len >= 10 && !strcmp(p->name + len - 10, "wpe.weight") &&
                     q->shape[0] > p->shape[0]));
        if (rows) {
            memcpy(m->params + p->offset, src->params + q->offset, p->numel * sizeof(float));
            loaded++;
        } else if (!strstr(p->name, ".lora_")) { /* adapters are new by design */
            list_add(fresh, sizeof fresh, &n_fresh, p->name);
        }
    }
    for (int i = 0; i < src->n_table; i++) {
        const tfm_param *q = &src->table[i];
        const tfm_param *p = tfm_model_param(m, q->name);
        size_t len = strlen(q->name);
        int wpe = len >= 10 && !strcmp(q->name + len - 10, "wpe.weight");
        if (!p || !same_head(m, src, q->name) ||
            (wpe ? p->shape[0] > q->shape[0] : p->shape[0] != q->shape[0]) ||
            p->shape[1] != q->shape[1])
            list_add(unused, sizeof unused, &n_unused, q->name);
    }
    if (!loaded)
        return tfm_err_set(err, "train.init: %s has no tensor of this model's names and shapes",
                           path);
    snprintf(report, size, "initialised from %s: %d tensors loaded; %d new%s%s; %d unused%s%s",
             path, loaded, n_fresh, n_fresh ? ": " : "", fresh, n_unused,
             n_unused ? ": " : "", unused);
    return 0;
}
