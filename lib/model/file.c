/* Model files: checksums, writing, reading, and opening for inference. */
#include "config.h"

#include "model/file.h"
#include "model/lora.h"
#include "model/quant.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/file.h"
#include "io/json.h"

/* ---- integrity ------------------------------------------------------ */

/* Each step is a bijection of the state for a fixed input word and of the
 * word for a fixed state, so any single changed word changes the result. */
typedef struct hash {
    uint64_t h;
} hash;

static void hash_bytes(hash *s, const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = s->h ^ (n * 0x9e3779b97f4a7c15ULL);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h = (h << 29) | (h >> 35);
    }
    uint64_t w = 0;
    memcpy(&w, b + i, n - i);
    h = (h ^ w ^ ((uint64_t)(n - i) << 56)) * 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    s->h = h;
}

static void hash_str(hash *s, const char *str, size_t n)
{
    hash_bytes(s, str, n);
}

/* The checksum covers what a reader sees: every tensor (name, dtype, shape,
 * bytes) in name order and every metadata pair but "checksum" in key order,
 * so that it can be verified from the file alone (tfm_model_file_verify). */
typedef struct item {
    const char *name;
    int dtype;
    int ndim;
    const size_t *shape;
    const void *data;
    size_t nbytes;
} item;

typedef struct kv {
    const char *key, *val;
    size_t len;
} kv;

static int item_cmp(const void *a, const void *b)
{
    return strcmp(((const item *)a)->name, ((const item *)b)->name);
}

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const kv *)a)->key, ((const kv *)b)->key);
}

static void checksum(item *it, size_t n, kv *meta, size_t n_meta, char out[17])
{
    qsort(it, n, sizeof *it, item_cmp);
    qsort(meta, n_meta, sizeof *meta, kv_cmp);
    hash s = {0x74666d2d636b7074ULL};
    for (size_t i = 0; i < n; i++) {
        uint64_t dims[TFM_ST_MAX_DIMS + 2] = {(uint64_t)it[i].dtype, (uint64_t)it[i].ndim};
        for (int d = 0; d < it[i].ndim && d < TFM_ST_MAX_DIMS; d++)
            dims[2 + d] = it[i].shape[d];
        hash_str(&s, it[i].name, strlen(it[i].name));
        hash_bytes(&s, dims, sizeof dims);
        hash_bytes(&s, it[i].data, it[i].nbytes);
    }
    for (size_t i = 0; i < n_meta; i++) {
        if (!strcmp(meta[i].key, "checksum"))
            continue;
        hash_str(&s, meta[i].key, strlen(meta[i].key));
        hash_str(&s, meta[i].val, meta[i].len);
    }
    snprintf(out, 17, "%016" PRIx64, s.h);
}

int tfm_model_file_verify(const tfm_safetensors *st, int required, tfm_err *err)
{
    size_t sl = 0;
    const char *stored = tfm_safetensors_meta(st, "checksum", &sl);
    if (!stored)
        return required ? tfm_err_set(err, "%s: no checksum in __metadata__: not a tfm file",
                                      st->name)
                        : 0;
    item *it = tfm_malloc((st->n_tensors + 1) * sizeof *it);
    kv *meta = tfm_malloc((st->n_meta + 1) * sizeof *meta);
    for (size_t i = 0; i < st->n_tensors; i++) {
        const tfm_st_tensor *t = &st->tensors[i];
        it[i] = (item){t->name, (int)t->dtype, t->ndim, t->shape, t->data, t->nbytes};
    }
    for (size_t i = 0; i < st->n_meta; i++)
        meta[i] = (kv){st->meta[i].key, st->meta[i].value, st->meta[i].value_len};
    char sum[17];
    checksum(it, st->n_tensors, meta, st->n_meta, sum);
    free(it);
    free(meta);
    if (sl != 16 || memcmp(stored, sum, 16))
        return tfm_err_set(err, "%s: checksum mismatch: the file is corrupt", st->name);
    return 0;
}

/* tfm_model_file_write with the matrices stored as dt (model/quant.h);
 * names (NULL: the table's) name the table's entries. */
static int file_write_as(const char *path, const tfm_param *table, const char *const *names,
                         int n_table, const float *const *arrays, const char *const *prefixes,
                         int n_arrays, const char *const *keys, const char *const *vals,
                         const size_t *lens, int n_keys, tfm_weight_dtype dt, tfm_err *err)
{
    size_t n = (size_t)n_arrays * (size_t)n_table, nt = 0;
    /* up to two stored tensors per parameter: an 8-bit matrix and its scales */
    item *it = tfm_malloc((2 * n + 1) * sizeof *it);
    tfm_enc_tensor *enc = tfm_malloc((2 * n + 1) * sizeof *enc);
    kv meta[17];
    size_t n_meta = 0;
    int rc = -1;
    tfm_safetensors_writer w;
    tfm_safetensors_writer_init(&w);
    for (int a = 0; a < n_arrays; a++)
        for (int k = 0; k < n_table; k++) {
            const tfm_param *p = &table[k];
            char name[128];
            snprintf(name, sizeof name, "%s%s", prefixes[a], names ? names[k] : p->name);
            int got = tfm_quant_encode(name, arrays[a] + p->offset, p->ndim, p->shape, dt,
                                       &enc[nt], err);
            if (got < 0) {
                rc = -2; /* the model's fault: tfm_model_resave names it */
                goto out;
            }
            nt += (size_t)got;
        }
    for (size_t j = 0; j < nt; j++) {
        const tfm_enc_tensor *e = &enc[j];
        it[j] = (item){e->name, e->dtype, e->ndim, e->shape, e->data, e->nbytes};
        tfm_safetensors_writer_add(&w, e->name, e->dtype, e->ndim, e->shape, e->data);
    }
    for (int i = 0; i < n_keys; i++)
        if (vals[i]) {
            meta[n_meta++] = (kv){keys[i], vals[i], lens[i]};
            tfm_safetensors_writer_meta_n(&w, keys[i], vals[i], lens[i]);
        }
    if (dt != TFM_WEIGHTS_F32) {
        const char *name = tfm_weight_dtype_name(dt);
        meta[n_meta++] = (kv){"weights", name, strlen(name)};
        tfm_safetensors_writer_meta(&w, "weights", name);
    }
    char sum[17];
    checksum(it, nt, meta, n_meta, sum);
    tfm_safetensors_writer_meta_n(&w, "checksum", sum, 16);
    rc = tfm_safetensors_writer_write(&w, path, err);
out:
    tfm_safetensors_writer_free(&w);
    for (size_t j = 0; j < nt; j++)
        if (enc[j].owned)
            free((void *)enc[j].data);
    free(enc);
    free(it);
    return rc;
}

int tfm_model_file_write(const char *path, const tfm_param *table, int n_table,
                         const float *const *arrays, const char *const *prefixes, int n_arrays,
                         const char *const *keys, const char *const *vals, const size_t *lens,
                         int n_keys, tfm_err *err)
{
    TFM_ASSERT(n_keys <= 16);
    return file_write_as(path, table, NULL, n_table, arrays, prefixes, n_arrays, keys, vals,
                         lens, n_keys, TFM_WEIGHTS_F32, err);
}

int tfm_model_file_write_named(const char *path, const tfm_param *table,
                               const char *const *names, int n_table, const float *array,
                               const char *const *keys, const char *const *vals,
                               const size_t *lens, int n_keys, tfm_err *err)
{
    TFM_ASSERT(n_keys <= 16);
    const char *prefixes[] = {""};
    return file_write_as(path, table, names, n_table, &array, prefixes, 1, keys, vals, lens,
                         n_keys, TFM_WEIGHTS_F32, err);
}

/* NULL (and an error) when absent or not an F32 tensor of the param's shape. */
static const float *tensor_like(const tfm_safetensors *st, const char *name, const tfm_param *p,
                                tfm_err *err)
{
    const tfm_st_tensor *t = tfm_safetensors_find(st, name);
    char old[160]; /* a tagger's file from before its HF name */
    if (!t && tfm_head_legacy_name(name, old, sizeof old))
        t = tfm_safetensors_find(st, old);
    if (!t) {
        tfm_err_set(err, "no tensor '%s' (was the run made with another model "
                         "configuration?)",
                    name);
        return NULL;
    }
    int same = t->dtype == TFM_ST_F32 && t->ndim == p->ndim && t->shape[0] == p->shape[0] &&
               (p->ndim == 1 || t->shape[1] == p->shape[1]);
    if (!same) {
        char want[64], got[64];
        if (p->ndim == 1)
            snprintf(want, sizeof want, "F32 [%zu]", p->shape[0]);
        else
            snprintf(want, sizeof want, "F32 [%zu, %zu]", p->shape[0], p->shape[1]);
        int n = snprintf(got, sizeof got, "%s [", tfm_st_dtype_name(t->dtype));
        for (int i = 0; i < t->ndim && n < 48; i++)
            n += snprintf(got + n, sizeof got - (size_t)n, "%s%zu", i ? ", " : "", t->shape[i]);
        snprintf(got + n, sizeof got - (size_t)n, "]");
        tfm_err_set(err, "tensor '%s' is %s but the configuration needs %s", name, got, want);
        return NULL;
    }
    return t->data;
}

int tfm_model_file_read(const tfm_safetensors *st, const tfm_param *table, int n_table,
                        float *const *arrays, const char *const *prefixes, int n_arrays,
                        tfm_err *err)
{
    for (int a = 0; a < n_arrays; a++)
        for (int k = 0; k < n_table; k++) {
            char name[128];
            snprintf(name, sizeof name, "%s%s", prefixes[a], table[k].name);
            const float *d = tensor_like(st, name, &table[k], err);
            if (!d)
                return tfm_err_prefix(err, "%s", st->name);
            memcpy(arrays[a] + table[k].offset, d, table[k].numel * sizeof(float));
        }
    return 0;
}

/* ---- the description ---------------------------------------------- */

int tfm_model_config_from_keys(const tfm_model_keys *c, const tfm_lora_keys *lora,
                               tfm_model_config *g, tfm_err *err)
{
    tfm_model_config_default(g);
    g->n_layer = (int)c->n_layer;
    g->n_head = (int)c->n_head;
    g->n_embd = (int)c->n_embd;
    g->block_size = (int)c->block_size;
    g->vocab_size = (int)c->vocab_size;
    g->dropout = (float)c->dropout;
    g->ffn_dropout = (float)c->ffn_dropout;
    g->final_dropout = (float)c->final_dropout;
    g->attn_dropout = (float)c->attn_dropout;
    g->emb_dropout = (float)c->emb_dropout;
    g->tie_embeddings = c->tie_embeddings;
    g->bias = c->bias;
    g->ln = c->norm;
    g->act = c->activation;
    g->ln_eps = (float)c->ln_eps;
    g->kind = c->kind;
    g->pos = c->positions;
    g->d_ff = (int)c->d_ff;
    g->head_dim = (int)c->head_dim;
    g->n_kv_head = (int)c->n_kv_head;
    g->window = (int)c->window;
    g->rope_base = (float)c->rope_base;
    g->t5_buckets = (int)c->t5_buckets;
    g->t5_max_distance = (int)c->t5_max_distance;
    g->n_segments = (int)c->segments;
    g->emb_norm = c->emb_norm;
    g->emb_scale = c->emb_scale;
    g->head_scale = c->head_scale;
    g->head_bias = c->head_bias;
    g->decoder_start = (int)c->decoder_start;
    g->forced_bos = (int)c->forced_bos;
    g->forced_eos = (int)c->forced_eos;
    g->source_bos = c->source_bos;
    g->init = c->init;
    g->norm = c->norm_type;
    g->ffn = c->ffn;
    g->attn_unscaled = !c->attn_scale;
    g->n_enc_layer = (int)c->n_enc_layer;
    g->tie_source = c->tie_source;
    g->src_vocab_size = (int)c->src_vocab_size;
    g->mlm_head = c->mlm_head;
    g->pooler = c->pooler;
    g->pool_mean = c->pooling;
    g->n_classes = (int)c->classes;
    g->nsp = c->nsp;
    g->n_tags = (int)c->tags;
    g->span = c->span;
    if (lora) {
        g->lora_r = (int)lora->r;
        g->lora_alpha = (float)lora->alpha;
        g->lora_dropout = (float)lora->dropout;
        if (g->lora_r && tfm_lora_targets_parse(lora->targets, &g->lora_targets, err) < 0)
            return -1;
    }
    if (tfm_model_config_check(g, err) < 0)
        return tfm_err_prefix(err, "model");
    return 0;
}

/* ---- model files ---------------------------------------------------- */


int tfm_model_save(const char *path, const tfm_model *m, const char *config_yaml,
                   const char *tok_json, size_t tok_len, int64_t step, tfm_err *err)
{
    return tfm_model_save_translation(path, m, config_yaml, tok_json, tok_len, NULL, 0, step,
                                      err);
}

int tfm_model_save_translation(const char *path, const tfm_model *m, const char *config_yaml,
                               const char *tok_json, size_t tok_len, const char *src_tok_json,
                               size_t src_tok_len, int64_t step, tfm_err *err)
{
    return tfm_model_save_task(path, m, config_yaml, tok_json, tok_len, src_tok_json,
                               src_tok_len, NULL, step, err);
}

int tfm_model_save_task(const char *path, const tfm_model *m, const char *config_yaml,
                        const char *tok_json, size_t tok_len, const char *src_tok_json,
                        size_t src_tok_len, const char *task_json, int64_t step, tfm_err *err)
{
    return tfm_model_save_dtype(path, m, config_yaml, tok_json, tok_len, src_tok_json,
                                src_tok_len, task_json, step, TFM_WEIGHTS_F32, err);
}

int tfm_model_save_dtype(const char *path, const tfm_model *m, const char *config_yaml,
                         const char *tok_json, size_t tok_len, const char *src_tok_json,
                         size_t src_tok_len, const char *task_json, int64_t step,
                         tfm_weight_dtype dt, tfm_err *err)
{
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
    /* the optional pairs last, and only when present */
    const char *keys[6] = {"format", "config", "tokenizer", "step"};
    const char *vals[6] = {"tfm-gpt", config_yaml, tok_json, stepbuf};
    size_t lens[6] = {7, strlen(config_yaml), tok_json ? tok_len : 0, strlen(stepbuf)};
    int n = 4;
    if (src_tok_json) {
        keys[n] = "source_tokenizer";
        vals[n] = src_tok_json;
        lens[n++] = src_tok_len;
    }
    if (task_json) {
        keys[n] = "task";
        vals[n] = task_json;
        lens[n++] = strlen(task_json);
    }
    const float *arrays[] = {m->params};
    const char *prefixes[] = {""};
    return file_write_as(path, m->table, NULL, m->n_table, arrays, prefixes, 1, keys, vals,
                         lens, n, dt, err);
}

static const char *bert_prefix(const tfm_safetensors *st);
static int bert_task_json(const tfm_safetensors *st, const char *pre, tfm_buf *out,
                          tfm_err *err);

int tfm_model_file_meta(const char *path, const char *key, tfm_buf *out, tfm_err *err)
{
    char file[4200];
    path = tfm_model_file_path(path, file, sizeof file);
    tfm_safetensors st;
    if (tfm_safetensors_open(&st, path, err) < 0)
        return -1;
    size_t len = 0;
    const char *v = tfm_safetensors_meta(&st, key, &len);
    int rc = v != NULL;
    const char *pre;
    if (v)
        tfm_buf_append(out, v, len);
    else if (!strcmp(key, "task") && (pre = bert_prefix(&st)))
        rc = bert_task_json(&st, pre, out, err); /* a BERT checkpoint's task head */
    tfm_safetensors_close(&st);
    return rc;
}

/* ---- HuggingFace BERT checkpoints ------------------------------------ */

/* A BertModel / BertForPreTraining / BertForMaskedLM safetensors file as
 * published (names with or without "bert."; LayerNorm.weight/bias or the
 * old LayerNorm.gamma/beta) and the config.json beside it become tfm's
 * encoder (model/transformer.h): post-LN blocks, exact GELU, learned
 * positions (max_position_embeddings rows), segments = type_vocab_size,
 * the embedding LayerNorm, biases, and the LM head tied to the word
 * embeddings.  HF stores each Linear [out, in] and q, k, v apart; tfm's
 * matrices are [in, out] with q, k, v side by side in c_attn, so the
 * weights are copied into the model's layout rather than mapped in place.
 * The heads present are loaded as tfm's (model/transformer.h): the MLM
 * head (cls.predictions.*, its decoder tied to the word embeddings), the
 * pooler (bert.pooler.dense) and the next-sentence head
 * (cls.seq_relationship, kept only with the pooler it reads); buffers such
 * as embeddings.position_ids are ignored. */

/* A folder stands for the model.safetensors inside it (HuggingFace's
 * layout: config.json and the tokenizer beside it). */
const char *tfm_model_file_path(const char *path, char *buf, size_t n)
{
    if (!tfm_is_dir(path))
        return path;
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    snprintf(buf, n, "%.*s/model.safetensors", (int)len, path);
    return buf;
}

/* The file's tfm format, or NULL: HuggingFace's save_pretrained writes
 * "format": "pt", which is none. */
static const char *tfm_format(const tfm_safetensors *st)
{
    const char *f = tfm_safetensors_meta(st, "format", NULL);
    return f && strcmp(f, "pt") ? f : NULL;
}

/* NAME in the folder of model_path. */
static void path_beside(const char *model_path, const char *name, char *out, size_t n)
{
    const char *slash = strrchr(model_path, '/');
    int dir = slash ? (int)(slash - model_path) + 1 : 0;
    snprintf(out, n, "%.*s%s", dir, model_path, name);
}

/* "bert." or "" (the prefix of the checkpoint's names), or NULL when the
 * file is not a BERT checkpoint. */
static const char *bert_prefix(const tfm_safetensors *st)
{
    if (tfm_format(st))
        return NULL;
    if (tfm_safetensors_find(st, "bert.embeddings.word_embeddings.weight"))
        return "bert.";
    if (tfm_safetensors_find(st, "embeddings.word_embeddings.weight"))
        return "";
    return NULL;
}

/* config.json's dropout probability KEY; absent (or null): def, HF's
 * default for the model type (from_pretrained trains with it). */
static int hf_prob(const tfm_json_doc *doc, const char *key, double def, double *out,
                   tfm_err *err)
{
    const tfm_json *j = tfm_json_get(doc->root, key);
    *out = def;
    if (!j || j->type == TFM_JSON_NULL)
        return 0;
    if (tfm_json_expect(doc, j, TFM_JSON_NUMBER, key, err) < 0)
        return -1;
    if (!(j->num >= 0 && j->num <= 0.99))
        return tfm_err_at(err, doc->name, j->line, j->col, "%s must be a probability in "
                          "[0, 0.99], not %s", key, j->str);
    *out = j->num;
    return 0;
}

/* config.json's integer KEY in [min, max]; absent (or null): def, or an
 * error when def < min (a key without default). */
static int t5_int(const tfm_json_doc *doc, const char *key, int64_t min, int64_t max,
                  int64_t def, int64_t *out, tfm_err *err)
{
    const tfm_json *j = tfm_json_get(doc->root, key);
    if ((!j || j->type == TFM_JSON_NULL) && def >= min) {
        *out = def;
        return 0;
    }
    return tfm_json_get_int(doc, j, key, min, max, out, err);
}

/* config.json's boolean KEY; def when absent (or null). */
static int hf_bool(const tfm_json_doc *doc, const char *key, int def, int *out, tfm_err *err)
{
    const tfm_json *j = tfm_json_get(doc->root, key);
    *out = def;
    if (!j || j->type == TFM_JSON_NULL)
        return 0;
    if (tfm_json_expect(doc, j, TFM_JSON_BOOL, key, err) < 0)
        return -1;
    *out = j->boolean;
    return 0;
}

/* ---- config.json's keys ----------------------------------------------- */

/* How a reader treats a config.json key: read (the family's reader handles
 * it), harmless (changes no computation: labels, generation settings,
 * bookkeeping) or harmless at its default only (null, false, 0, {}, []). */
enum { HF_READ, HF_ANY, HF_DEFAULT };

typedef struct hf_key {
    const char *key;
    int how;
} hf_key;

/* PretrainedConfig's own keys, the same for every family */
static const hf_key hf_common_keys[] = {
    /* dtype: transformers 5's name for torch_dtype (the stored type, which
     * the safetensors header says again) */
    {"architectures", HF_ANY}, {"torch_dtype", HF_ANY}, {"dtype", HF_ANY},
    {"transformers_version", HF_ANY},
    {"id2label", HF_ANY}, {"label2id", HF_ANY}, {"num_labels", HF_ANY},
    {"_name_or_path", HF_ANY}, {"_commit_hash", HF_ANY}, {"use_cache", HF_ANY},
    {"return_dict", HF_ANY}, {"output_hidden_states", HF_ANY}, {"output_attentions", HF_ANY},
    {"output_past", HF_ANY}, {"torchscript", HF_ANY}, {"use_bfloat16", HF_ANY},
    {"tf_legacy_loss", HF_ANY}, {"gradient_checkpointing", HF_ANY},
    {"chunk_size_feed_forward", HF_ANY}, {"initializer_range", HF_ANY},
    {"initializer_factor", HF_ANY}, {"init_std", HF_ANY}, {"finetuning_task", HF_ANY},
    {"problem_type", HF_ANY}, {"tokenizer_class", HF_ANY}, {"prefix", HF_ANY},
    {"task_specific_params", HF_ANY}, {"bos_token_id", HF_ANY}, {"pad_token_id", HF_ANY},
    {"sep_token_id", HF_ANY}, {"max_length", HF_ANY}, {"min_length", HF_ANY},
    {"do_sample", HF_ANY}, {"early_stopping", HF_ANY}, {"num_beams", HF_ANY},
    {"num_beam_groups", HF_ANY}, {"diversity_penalty", HF_ANY}, {"temperature", HF_ANY},
    {"top_k", HF_ANY}, {"top_p", HF_ANY}, {"typical_p", HF_ANY},
    {"repetition_penalty", HF_ANY}, {"length_penalty", HF_ANY},
    {"no_repeat_ngram_size", HF_ANY}, {"encoder_no_repeat_ngram_size", HF_ANY},
    {"bad_words_ids", HF_ANY}, {"num_return_sequences", HF_ANY}, {"output_scores", HF_ANY},
    {"return_dict_in_generate", HF_ANY}, {"remove_invalid_values", HF_ANY},
    {"exponential_decay_length_penalty", HF_ANY}, {"suppress_tokens", HF_ANY},
    {"begin_suppress_tokens", HF_ANY}, {"_attn_implementation", HF_ANY},
    {"_attn_implementation_autoset", HF_ANY}, {"classifier_dropout", HF_ANY},
    {"_num_labels", HF_ANY}, {"xla_device", HF_ANY}, {"max_new_tokens", HF_ANY},
    {"add_cross_attention", HF_DEFAULT}, {"pruned_heads", HF_DEFAULT},
    {"tie_encoder_decoder", HF_DEFAULT}, {"cross_attention_hidden_size", HF_DEFAULT},
    {"is_decoder", HF_DEFAULT}, {"forced_decoder_ids", HF_DEFAULT}, {NULL, 0},
};

static const hf_key hf_gpt2_keys[] = {
    {"model_type", HF_READ}, {"n_head", HF_READ}, {"n_embd", HF_READ}, {"n_layer", HF_READ},
    {"n_positions", HF_READ}, {"vocab_size", HF_READ}, {"n_inner", HF_READ},
    {"activation_function", HF_READ}, {"layer_norm_epsilon", HF_READ},
    {"resid_pdrop", HF_READ}, {"attn_pdrop", HF_READ}, {"embd_pdrop", HF_READ},
    {"forced_eos_token_id", HF_READ}, {"tie_word_embeddings", HF_READ},
    {"scale_attn_weights", HF_READ},
    /* n_ctx: an old copy of n_positions HF no longer reads; summary_*:
     * GPT2DoubleHeadsModel's head; the upcast: precision only */
    {"n_ctx", HF_ANY}, {"eos_token_id", HF_ANY}, {"decoder_start_token_id", HF_ANY},
    {"summary_type", HF_ANY}, {"summary_use_proj", HF_ANY}, {"summary_activation", HF_ANY},
    {"summary_proj_to_labels", HF_ANY}, {"summary_first_dropout", HF_ANY},
    {"reorder_and_upcast_attn", HF_ANY}, {"is_encoder_decoder", HF_DEFAULT},
    {"is_decoder", HF_ANY}, {"scale_attn_by_inverse_layer_idx", HF_DEFAULT},
    {"forced_bos_token_id", HF_DEFAULT}, {NULL, 0},
};

static const hf_key hf_bert_keys[] = {
    {"model_type", HF_READ}, {"hidden_size", HF_READ}, {"num_attention_heads", HF_READ},
    {"num_hidden_layers", HF_READ}, {"intermediate_size", HF_READ},
    {"max_position_embeddings", HF_READ}, {"type_vocab_size", HF_READ},
    {"vocab_size", HF_READ}, {"hidden_dropout_prob", HF_READ},
    {"attention_probs_dropout_prob", HF_READ}, {"layer_norm_eps", HF_READ},
    {"hidden_act", HF_READ}, {"position_embedding_type", HF_READ}, {"is_decoder", HF_READ},
    {"tie_word_embeddings", HF_READ},
    /* old Google-release keys HF never read */
    {"directionality", HF_ANY}, {"pooler_fc_size", HF_ANY},
    {"pooler_num_attention_heads", HF_ANY}, {"pooler_num_fc_layers", HF_ANY},
    {"pooler_size_per_head", HF_ANY}, {"pooler_type", HF_ANY}, {"eos_token_id", HF_ANY},
    {"decoder_start_token_id", HF_ANY}, {"is_encoder_decoder", HF_DEFAULT},
    {"forced_bos_token_id", HF_ANY}, {"forced_eos_token_id", HF_ANY}, {NULL, 0},
};

static const hf_key hf_t5_keys[] = {
    {"model_type", HF_READ}, {"d_model", HF_READ}, {"d_kv", HF_READ}, {"d_ff", HF_READ},
    {"num_layers", HF_READ}, {"num_decoder_layers", HF_READ}, {"num_heads", HF_READ},
    {"vocab_size", HF_READ}, {"relative_attention_num_buckets", HF_READ},
    {"relative_attention_max_distance", HF_READ}, {"n_positions", HF_READ},
    {"decoder_start_token_id", HF_READ}, {"eos_token_id", HF_READ},
    {"forced_eos_token_id", HF_READ}, {"dropout_rate", HF_READ},
    {"layer_norm_epsilon", HF_READ}, {"feed_forward_proj", HF_READ},
    {"tie_word_embeddings", HF_READ}, {"dense_act_fn", HF_READ}, {"is_gated_act", HF_READ},
    {"scale_decoder_outputs", HF_READ},
    {"is_encoder_decoder", HF_ANY}, {"forced_bos_token_id", HF_DEFAULT}, {NULL, 0},
};

static const hf_key hf_bart_keys[] = {
    {"model_type", HF_READ}, {"d_model", HF_READ}, {"encoder_layers", HF_READ},
    {"decoder_layers", HF_READ}, {"encoder_attention_heads", HF_READ},
    {"decoder_attention_heads", HF_READ}, {"encoder_ffn_dim", HF_READ},
    {"decoder_ffn_dim", HF_READ}, {"max_position_embeddings", HF_READ},
    {"vocab_size", HF_READ}, {"eos_token_id", HF_READ}, {"decoder_start_token_id", HF_READ},
    {"forced_bos_token_id", HF_READ}, {"forced_eos_token_id", HF_READ}, {"dropout", HF_READ},
    {"attention_dropout", HF_READ}, {"activation_dropout", HF_READ},
    {"scale_embedding", HF_READ}, {"tie_word_embeddings", HF_READ},
    {"normalize_before", HF_READ}, {"add_final_layer_norm", HF_READ},
    {"activation_function", HF_READ},
    /* BartConfig's copy of encoder_layers, and old fairseq-era keys that
     * modeling_bart.py no longer reads */
    {"num_hidden_layers", HF_ANY}, {"is_encoder_decoder", HF_ANY},
    {"normalize_embedding", HF_ANY}, {"static_position_embeddings", HF_ANY},
    {"add_bias_logits", HF_ANY}, {"extra_pos_embeddings", HF_ANY},
    {"classif_dropout", HF_ANY}, {"force_bos_token_to_be_generated", HF_ANY},
    /* layers skipped at random in training: tfm has no layerdrop */
    {"encoder_layerdrop", HF_DEFAULT}, {"decoder_layerdrop", HF_DEFAULT}, {NULL, 0},
};

static const hf_key *hf_key_find(const hf_key *t, const char *key)
{
    for (; t->key; t++)
        if (!strcmp(t->key, key))
            return t;
    return NULL;
}

/* null, false, 0, {} or []: a key's value that changes nothing */
static int hf_is_default(const tfm_json *j)
{
    return j->type == TFM_JSON_NULL || (j->type == TFM_JSON_BOOL && !j->boolean) ||
           (j->type == TFM_JSON_NUMBER && j->num == 0) ||
           ((j->type == TFM_JSON_ARRAY || j->type == TFM_JSON_OBJECT) && j->n == 0);
}

/* Every key of config.json is the family's (what: "GPT2Config") or
 * harmless: an unknown one may change the model, and ignoring it would
 * compute another model than HuggingFace's. */
static int hf_keys_check(const tfm_json_doc *doc, const hf_key *family, const char *what,
                         tfm_err *err)
{
    const tfm_json *root = doc->root;
    for (size_t i = 0; root && root->type == TFM_JSON_OBJECT && i < root->n; i++) {
        const char *key = root->keys[i]->str;
        const tfm_json *v = root->items[i];
        const hf_key *k = hf_key_find(family, key);
        if (!k)
            k = hf_key_find(hf_common_keys, key);
        if (!k)
            return tfm_err_at(err, doc->name, root->keys[i]->line, root->keys[i]->col,
                              "'%s' is not a %s key tfm reads: it may change the model, so "
                              "it is refused rather than ignored", key, what);
        if (k->how == HF_DEFAULT && !hf_is_default(v))
            return tfm_err_at(err, doc->name, v->line, v->col, "%s %s is not supported "
                              "(tfm computes the model only without it)", key,
                              v->type == TFM_JSON_STRING ? v->str
                              : v->type == TFM_JSON_ARRAY || v->type == TFM_JSON_OBJECT
                                  ? "(not empty)"
                                  : v->str);
    }
    return 0;
}

static int bert_config_int(const tfm_json_doc *doc, const char *key, int64_t min, int64_t max,
                           int64_t *out, tfm_err *err)
{
    return tfm_json_get_int(doc, tfm_json_get(doc->root, key), key, min, max, out, err);
}

/* What config.json says of a BERT checkpoint's heads: the architecture's
 * task head, problem_type's regression, tie_word_embeddings. */
typedef enum { BERT_ARCH_ANY, BERT_ARCH_SEQ, BERT_ARCH_TOK, BERT_ARCH_QA } bert_arch;
typedef struct bert_heads {
    bert_arch arch;
    int regression; /* problem_type regression: -1 unsaid, 0 no, 1 yes */
    int tie;
} bert_heads;

/* The architectures tfm reads, and the task head each has. */
static const struct {
    const char *name;
    bert_arch arch;
} bert_archs[] = {
    {"BertModel", BERT_ARCH_ANY},
    {"BertForPreTraining", BERT_ARCH_ANY},
    {"BertForMaskedLM", BERT_ARCH_ANY},
    {"BertForNextSentencePrediction", BERT_ARCH_ANY},
    {"BertForSequenceClassification", BERT_ARCH_SEQ},
    {"BertForTokenClassification", BERT_ARCH_TOK},
    {"BertForQuestionAnswering", BERT_ARCH_QA},
};

/* config.json's architectures, problem_type and tie_word_embeddings. */
static int bert_heads_json(const tfm_json_doc *doc, bert_heads *h, tfm_err *err)
{
    memset(h, 0, sizeof *h);
    h->regression = -1;
    const tfm_json *a = tfm_json_get(doc->root, "architectures");
    for (size_t i = 0; a && a->type == TFM_JSON_ARRAY && i < a->n; i++) {
        const tfm_json *n = a->items[i];
        size_t k = 0, nk = sizeof bert_archs / sizeof *bert_archs;
        while (k < nk && !(n->type == TFM_JSON_STRING && !strcmp(n->str, bert_archs[k].name)))
            k++;
        if (k == nk)
            return tfm_err_at(err, doc->name, n->line, n->col, "architectures: '%s' is not "
                              "supported (tfm reads BertModel, BertForPreTraining, "
                              "BertForMaskedLM, BertForNextSentencePrediction, "
                              "BertForSequenceClassification, BertForTokenClassification and "
                              "BertForQuestionAnswering)", n->str ? n->str : "");
        if (bert_archs[k].arch)
            h->arch = bert_archs[k].arch;
    }
    const tfm_json *p = tfm_json_get(doc->root, "problem_type");
    if (p && p->type != TFM_JSON_NULL) {
        if (p->type == TFM_JSON_STRING && !strcmp(p->str, "regression"))
            h->regression = 1;
        else if (p->type == TFM_JSON_STRING && !strcmp(p->str, "single_label_classification"))
            h->regression = 0;
        else
            return tfm_err_at(err, doc->name, p->line, p->col, "problem_type '%s' is not "
                              "supported (tfm's classifier is single_label_classification or "
                              "regression)", p->str ? p->str : "");
    }
    return hf_bool(doc, "tie_word_embeddings", 1, &h->tie, err);
}

/* config.json beside the checkpoint as the model section c (h: what it
 * says of the heads; NULL: not wanted). */
static int bert_config(const char *model_path, tfm_model_keys *c, bert_heads *h, tfm_err *err)
{
    bert_heads h0;
    if (!h)
        h = &h0;
    char path[4200];
    path_beside(model_path, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return tfm_err_set(err, "%s: no such file (a HuggingFace BERT checkpoint needs "
                                "the config.json beside it)", path);
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = -1;
    int64_t C, NH, L, F, P, S, V;
    double drop, attn_drop;
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        hf_keys_check(&doc, hf_bert_keys, "BertConfig", err) < 0 ||
        bert_config_int(&doc, "hidden_size", 1, 65536, &C, err) < 0 ||
        bert_config_int(&doc, "num_attention_heads", 1, 1024, &NH, err) < 0 ||
        bert_config_int(&doc, "num_hidden_layers", 1, 1000, &L, err) < 0 ||
        bert_config_int(&doc, "intermediate_size", 1, 1 << 20, &F, err) < 0 ||
        bert_config_int(&doc, "max_position_embeddings", 1, 1 << 20, &P, err) < 0 ||
        bert_config_int(&doc, "type_vocab_size", 1, 1024, &S, err) < 0 ||
        bert_config_int(&doc, "vocab_size", 1, 1 << 24, &V, err) < 0 ||
        hf_prob(&doc, "hidden_dropout_prob", 0.1, &drop, err) < 0 ||
        hf_prob(&doc, "attention_probs_dropout_prob", 0.1, &attn_drop, err) < 0 ||
        bert_heads_json(&doc, h, err) < 0)
        goto out;
    const tfm_json *j = tfm_json_get(doc.root, "layer_norm_eps");
    if (tfm_json_expect(&doc, j, TFM_JSON_NUMBER, "layer_norm_eps", err) < 0)
        goto out;
    if (!(j->num >= 1e-12 && j->num < 1)) {
        tfm_err_at(err, path, j->line, j->col, "layer_norm_eps must be in [1e-12, 1), not %s",
                   j->str);
        goto out;
    }
    double eps = j->num;
    j = tfm_json_get(doc.root, "hidden_act");
    if (tfm_json_expect(&doc, j, TFM_JSON_STRING, "hidden_act", err) < 0)
        goto out;
    tfm_act act;
    if (!strcmp(j->str, "gelu")) {
        act = TFM_ACT_GELU_EXACT;
    } else if (!strcmp(j->str, "gelu_new") || !strcmp(j->str, "gelu_pytorch_tanh")) {
        act = TFM_ACT_GELU_TANH; /* the tanh approximation */
    } else if (!strcmp(j->str, "relu")) {
        act = TFM_ACT_RELU;
    } else {
        tfm_err_at(err, path, j->line, j->col, "hidden_act '%s' is not supported (tfm has "
                   "gelu, gelu_new and relu)", j->str);
        goto out;
    }
    j = tfm_json_get(doc.root, "model_type");
    if (j && !(j->type == TFM_JSON_STRING && !strcmp(j->str, "bert"))) {
        tfm_err_at(err, path, j->line, j->col, "model_type '%s' is not supported here (tfm "
                   "reads bert's layout)", j->str ? j->str : "");
        goto out;
    }
    j = tfm_json_get(doc.root, "position_embedding_type");
    if (j && !(j->type == TFM_JSON_STRING && !strcmp(j->str, "absolute"))) {
        tfm_err_at(err, path, j->line, j->col, "position_embedding_type '%s' is not supported "
                   "(only absolute)", j->str);
        goto out;
    }
    j = tfm_json_get(doc.root, "is_decoder");
    if (j && j->type == TFM_JSON_BOOL && j->boolean) {
        tfm_err_at(err, path, j->line, j->col, "is_decoder true (a causal BERT) is not "
                   "supported: tfm reads BERT as an encoder");
        goto out;
    }
    c->kind = TFM_KIND_ENCODER;
    c->positions = TFM_POS_LEARNED;
    c->norm = TFM_LN_POST;
    c->activation = act;
    c->ln_eps = eps;
    c->n_layer = L;
    c->n_head = NH;
    c->n_embd = C;
    c->d_ff = F;
    c->block_size = P;
    c->segments = S;
    c->vocab_size = V;
    c->emb_norm = 1;
    c->tie_embeddings = 1;
    c->bias = 1;
    /* BertConfig's rates: hidden_dropout_prob on the embeddings and each
     * residual branch, attention_probs_dropout_prob on the attention
     * weights */
    c->dropout = drop;
    c->attn_dropout = attn_drop;
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

/* A HuggingFace checkpoint being copied into m (BERT's and T5's loaders). */
typedef struct bert_ckpt {
    const tfm_safetensors *st;
    const char *pre; /* "bert." or "" */
    tfm_model *m;
    const char *what; /* "BERT", "T5": for messages */
} bert_ckpt;

/* The tensor pre + name (or pre + alt, the old LayerNorm spelling), which
 * must be F32 [d0] (d1 == 0) or [d0, d1]. */
static const float *bert_tensor(const bert_ckpt *b, const char *name, const char *alt,
                                size_t d0, size_t d1, tfm_err *err)
{
    char full[160], full_alt[160] = "", want[64], got[96];
    snprintf(full, sizeof full, "%s%s", b->pre, name);
    const tfm_st_tensor *t = tfm_safetensors_find(b->st, full);
    if (!t && alt) {
        snprintf(full_alt, sizeof full_alt, "%s%s", b->pre, alt);
        t = tfm_safetensors_find(b->st, full_alt);
    }
    if (d1)
        snprintf(want, sizeof want, "F32 [%zu, %zu]", d0, d1);
    else
        snprintf(want, sizeof want, "F32 [%zu]", d0);
    if (!t) {
        if (alt)
            tfm_err_set(err, "%s: no tensor '%s' (nor '%s'): a %s checkpoint needs it, %s",
                        b->st->name, full, full_alt, b->what, want);
        else
            tfm_err_set(err, "%s: no tensor '%s': a %s checkpoint needs it, %s", b->st->name,
                        full, b->what, want);
        return NULL;
    }
    if (t->dtype != TFM_ST_F32 || t->ndim != (d1 ? 2 : 1) || t->shape[0] != d0 ||
        (d1 && t->shape[1] != d1)) {
        int n = snprintf(got, sizeof got, "%s [", tfm_st_dtype_name(t->dtype));
        for (int i = 0; i < t->ndim && n < 80; i++)
            n += snprintf(got + n, sizeof got - (size_t)n, "%s%zu", i ? ", " : "", t->shape[i]);
        snprintf(got + n, sizeof got - (size_t)n, "]");
        tfm_err_set(err, "%s: tensor '%s' is %s but config.json implies %s", b->st->name,
                    t->name, got, want);
        return NULL;
    }
    return t->data;
}

/* dst[i, j] = src[j, i]: an HF Linear [out, in] into tfm's [in, out] with
 * row stride ld (3C for the q, k, v parts of c_attn). */
static void transpose_into(float *dst, size_t ld, const float *src, size_t out, size_t in)
{
    for (size_t j0 = 0; j0 < out; j0 += 32)
        for (size_t i = 0; i < in; i++)
            for (size_t j = j0; j < out && j < j0 + 32; j++)
                dst[i * ld + j] = src[j * in + i];
}

static float *bert_dst(const bert_ckpt *b, const char *fmt, int layer)
{
    char name[64];
    snprintf(name, sizeof name, fmt, layer);
    const tfm_param *p = tfm_model_param(b->m, name);
    TFM_ASSERT(p);
    return b->m->params + p->offset;
}

/* A vector or an embedding table, copied as it is. */
static int bert_copy(const bert_ckpt *b, const char *dst, int layer, const char *src,
                     const char *alt, size_t d0, size_t d1, tfm_err *err)
{
    const float *s = bert_tensor(b, src, alt, d0, d1, err);
    if (!s)
        return -1;
    memcpy(bert_dst(b, dst, layer), s, d0 * (d1 ? d1 : 1) * sizeof(float));
    return 0;
}

/* LayerNorm SRC (SRC.weight/.bias or SRC.gamma/.beta) into DST.weight/.bias. */
static int bert_norm(const bert_ckpt *b, const char *dst, int layer, const char *src,
                     size_t C, tfm_err *err)
{
    char dw[64], db[64], sw[128], sg[128], sb[128], sbeta[128];
    snprintf(dw, sizeof dw, "%s.weight", dst);
    snprintf(db, sizeof db, "%s.bias", dst);
    snprintf(sw, sizeof sw, "%s.weight", src);
    snprintf(sg, sizeof sg, "%s.gamma", src);
    snprintf(sb, sizeof sb, "%s.bias", src);
    snprintf(sbeta, sizeof sbeta, "%s.beta", src);
    return bert_copy(b, dw, layer, sw, sg, C, 0, err) < 0 ||
                   bert_copy(b, db, layer, sb, sbeta, C, 0, err) < 0
               ? -1
               : 0;
}

/* Linear SRC ([out, in] weight, [out] bias) into DST ([in, out], [out]). */
static int bert_linear(const bert_ckpt *b, const char *dst, int layer, const char *src,
                       size_t out, size_t in, tfm_err *err)
{
    char dw[64], db[64], sw[128], sb[128];
    snprintf(dw, sizeof dw, "%s.weight", dst);
    snprintf(db, sizeof db, "%s.bias", dst);
    snprintf(sw, sizeof sw, "%s.weight", src);
    snprintf(sb, sizeof sb, "%s.bias", src);
    const float *w = bert_tensor(b, sw, NULL, out, in, err);
    if (!w)
        return -1;
    transpose_into(bert_dst(b, dw, layer), out, w, out, in);
    return bert_copy(b, db, layer, sb, NULL, out, 0, err);
}

/* Linears SRC[0..n) ([out, in] weights, [out] biases) side by side into
 * DST.weight ([in, n·out]) and DST.bias ([n·out]): q|k|v, k|v. */
static int hf_fused(const bert_ckpt *b, const char *dst, const char *const *src, int n,
                    size_t out, size_t in, tfm_err *err)
{
    char dw[64], db[64], s[160];
    snprintf(dw, sizeof dw, "%s.weight", dst);
    snprintf(db, sizeof db, "%s.bias", dst);
    for (int k = 0; k < n; k++) {
        snprintf(s, sizeof s, "%s.weight", src[k]);
        const float *w = bert_tensor(b, s, NULL, out, in, err);
        if (!w)
            return -1;
        transpose_into(bert_dst(b, dw, 0) + (size_t)k * out, (size_t)n * out, w, out, in);
        snprintf(s, sizeof s, "%s.bias", src[k]);
        const float *bias = bert_tensor(b, s, NULL, out, 0, err);
        if (!bias)
            return -1;
        memcpy(bert_dst(b, db, 0) + (size_t)k * out, bias, out * sizeof(float));
    }
    return 0;
}

static int bert_weights(const bert_ckpt *b, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = (size_t)g->n_embd, F = (size_t)tfm_model_config_ff(g);
    if (bert_copy(b, "wte.weight", 0, "embeddings.word_embeddings.weight", NULL,
                  (size_t)g->vocab_size, C, err) < 0 ||
        bert_copy(b, "wpe.weight", 0, "embeddings.position_embeddings.weight", NULL,
                  (size_t)g->block_size, C, err) < 0 ||
        bert_copy(b, "wse.weight", 0, "embeddings.token_type_embeddings.weight", NULL,
                  (size_t)g->n_segments, C, err) < 0 ||
        bert_norm(b, "ln_e", 0, "embeddings.LayerNorm", C, err) < 0)
        return -1;
    char src[128];
    for (int l = 0; l < g->n_layer; l++) {
        /* q, k, v side by side: c_attn [C, 3C], bias [3C] */
        char q[128], k[128], v[128], dst[64];
        snprintf(q, sizeof q, "encoder.layer.%d.attention.self.query", l);
        snprintf(k, sizeof k, "encoder.layer.%d.attention.self.key", l);
        snprintf(v, sizeof v, "encoder.layer.%d.attention.self.value", l);
        snprintf(dst, sizeof dst, "h.%d.attn.c_attn", l);
        const char *qkv[3] = {q, k, v};
        if (hf_fused(b, dst, qkv, 3, C, C, err) < 0)
            return -1;
#define BERT_PART(call, fmt)                                                    \
    do {                                                                        \
        snprintf(src, sizeof src, "encoder.layer.%d." fmt, l);                  \
        if ((call) < 0)                                                         \
            return -1;                                                          \
    } while (0)
        /* post-LN: ln_1 is the norm after attention, ln_2 after the MLP */
        BERT_PART(bert_linear(b, "h.%d.attn.c_proj", l, src, C, C, err), "attention.output.dense");
        BERT_PART(bert_norm(b, "h.%d.ln_1", l, src, C, err), "attention.output.LayerNorm");
        BERT_PART(bert_linear(b, "h.%d.mlp.c_fc", l, src, F, C, err), "intermediate.dense");
        BERT_PART(bert_linear(b, "h.%d.mlp.c_proj", l, src, C, F, err), "output.dense");
        BERT_PART(bert_norm(b, "h.%d.ln_2", l, src, C, err), "output.LayerNorm");
#undef BERT_PART
    }
    /* more layers than config.json says: the wrong config.json */
    snprintf(src, sizeof src, "%sencoder.layer.%d.attention.self.query.weight", b->pre,
             g->n_layer);
    if (tfm_safetensors_find(b->st, src))
        return tfm_err_set(err, "%s: the checkpoint has a layer %d (tensor '%s') but "
                                "config.json's num_hidden_layers is %d",
                           b->st->name, g->n_layer, src, g->n_layer);
    return 0;
}

/* HuggingFace's tokenizer_config.json beside a tokenizer without
 * tokenizer.json (which carries its own settings), at path: BertTokenizer's
 * do_lower_case, strip_accents and tokenize_chinese_chars for a vocab.txt
 * (do_basic_tokenize false and never_split are refused); T5Tokenizer's
 * extra_ids for a spiece.model (absent: 100, T5Tokenizer's default, in a
 * T5 folder; else none); GPT-2's add_prefix_space true is refused.  No
 * file: the defaults. */
static int hf_tokenizer_config(const char *path, tfm_tokenizer *tok, int t5, int64_t *added,
                               tfm_err *err)
{
    tfm_tok_kind kind = tfm_tokenizer_kind(tok);
    int64_t extra = t5 ? 100 : 0;
    int rc = -1, lower = 1, strip = -1, cjk = 1, basic = 1, prefix = 0;
    tfm_json_doc doc = {0};
    if (access(path, F_OK) == 0) {
        if (tfm_json_parse_file(&doc, path, 0, err) < 0 ||
            tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
            hf_bool(&doc, "do_lower_case", 1, &lower, err) < 0 ||
            hf_bool(&doc, "tokenize_chinese_chars", 1, &cjk, err) < 0 ||
            hf_bool(&doc, "do_basic_tokenize", 1, &basic, err) < 0 ||
            hf_bool(&doc, "add_prefix_space", 0, &prefix, err) < 0 ||
            t5_int(&doc, "extra_ids", 0, 1 << 20, extra, &extra, err) < 0)
            goto out;
        const tfm_json *j = tfm_json_get(doc.root, "strip_accents");
        if (j && j->type != TFM_JSON_NULL) {
            if (tfm_json_expect(&doc, j, TFM_JSON_BOOL, "strip_accents", err) < 0)
                goto out;
            strip = j->boolean;
        }
        j = tfm_json_get(doc.root, "never_split");
        if (kind == TFM_TOK_WORDPIECE && j && !hf_is_default(j)) {
            tfm_err_at(err, path, j->line, j->col, "never_split is not supported (tfm's "
                       "WordPiece splits every word as HF's fast tokenizer does)");
            goto out;
        }
        j = tfm_json_get(doc.root, "do_basic_tokenize");
        if (kind == TFM_TOK_WORDPIECE && !basic) {
            tfm_err_at(err, path, j->line, j->col, "do_basic_tokenize false is not supported "
                       "(tfm's WordPiece always splits on whitespace and punctuation first)");
            goto out;
        }
        j = tfm_json_get(doc.root, "add_prefix_space");
        if (kind == TFM_TOK_BPE && prefix) {
            tfm_err_at(err, path, j->line, j->col, "add_prefix_space true is not supported "
                       "(write a tokenizer.json with the ByteLevel pre-tokenizer's "
                       "add_prefix_space)");
            goto out;
        }
    }
    if (kind == TFM_TOK_WORDPIECE)
        tfm_tokenizer_set_bert_case(tok, lower, strip, cjk);
    *added = kind == TFM_TOK_UNIGRAM ? extra : 0;
    if (*added && tfm_tokenizer_add_extra_ids(tok, (uint32_t)extra, path, err) < 0)
        goto out;
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

/* A special token as tokenizer_config.json names it: a string, or an
 * AddedToken object's "content"; NULL for none (null). */
static const tfm_json *hf_token_content(const tfm_json *j)
{
    if (j && j->type == TFM_JSON_OBJECT)
        j = tfm_json_get(j, "content");
    return j && j->type == TFM_JSON_STRING ? j : NULL;
}

/* 1 when the byte-level BPE tok puts a space before a text (ByteLevel's
 * add_prefix_space: "a" encodes as " a" does), else 0. */
static int bpe_prefix_space(const tfm_tokenizer *tok)
{
    tfm_tok_scratch *sc = tfm_tok_scratch_new(tok);
    tfm_ids a = {0}, b = {0};
    tfm_tokenizer_encode(tok, sc, "a", 1, 0, &a);
    tfm_tokenizer_encode(tok, sc, " a", 2, 0, &b);
    int same = a.len == b.len && !memcmp(a.data, b.data, a.len * sizeof *a.data);
    tfm_ids_free(&a);
    tfm_ids_free(&b);
    tfm_tok_scratch_free(sc);
    return same;
}

/* tokenizer_config.json at path against the tokenizer read from tokfile:
 * the special tokens it names (bos_token ... mask_token,
 * additional_special_tokens) must be tokens, and added_tokens_decoder's
 * ids must hold its contents: transformers would add what is missing as
 * new ids, which the model and tfm do not have.  No file: nothing. */
static int hf_tokenizer_config_agrees(const char *path, const tfm_tokenizer *tok,
                                      const char *tokfile, tfm_err *err)
{
    static const char *const named[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                        "pad_token", "cls_token", "mask_token"};
    if (access(path, F_OK) != 0)
        return 0;
    const char *tf = strrchr(tokfile, '/');
    tf = tf ? tf + 1 : tokfile;
    tfm_json_doc doc = {0};
    int rc = -1;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0 ||
        tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0)
        goto out;
    const tfm_json *extra = tfm_json_get(doc.root, "additional_special_tokens");
    size_t n_extra = extra && extra->type == TFM_JSON_ARRAY ? extra->n : 0;
    for (size_t i = 0; i < sizeof named / sizeof *named + n_extra; i++) {
        const tfm_json *j = i < sizeof named / sizeof *named
                                ? tfm_json_get(doc.root, named[i])
                                : extra->items[i - sizeof named / sizeof *named];
        const tfm_json *c = hf_token_content(j);
        if (c && tfm_tokenizer_token_id(tok, c->str, c->len) < 0) {
            tfm_err_at(err, path, c->line, c->col, "%s '%s' is not a token of %s (expected one "
                       "it defines: transformers would give it a new id)",
                       i < sizeof named / sizeof *named ? named[i]
                                                       : "additional_special_tokens' entry",
                       c->str, tf);
            goto out;
        }
    }
    /* transformers 5 follows add_prefix_space here over tokenizer.json's
     * ByteLevel pre-tokenizer: ids would differ from tfm's */
    const tfm_json *ap = tfm_json_get(doc.root, "add_prefix_space");
    if (ap && ap->type == TFM_JSON_BOOL && tfm_tokenizer_kind(tok) == TFM_TOK_BPE &&
        ap->boolean != bpe_prefix_space(tok)) {
        tfm_err_at(err, path, ap->line, ap->col, "add_prefix_space %s contradicts %s, whose "
                   "byte-level pre-tokenizer %s a space before each text (expected the same "
                   "setting in both: transformers follows this file)", ap->str, tf,
                   ap->boolean ? "does not put" : "puts");
        goto out;
    }
    const tfm_json *dec = tfm_json_get(doc.root, "added_tokens_decoder");
    for (size_t i = 0; dec && dec->type == TFM_JSON_OBJECT && i < dec->n; i++) {
        const tfm_json *k = dec->keys[i], *c = hf_token_content(dec->items[i]);
        char *end;
        long long id = strtoll(k->str, &end, 10);
        if (!c || end == k->str || *end || id < 0 || id > INT32_MAX) {
            tfm_err_at(err, path, k->line, k->col, "added_tokens_decoder: expected an id "
                       "and {\"content\": TOKEN, ...}");
            goto out;
        }
        size_t len = 0;
        const char *have = (uint64_t)id < tfm_tokenizer_vocab_size(tok)
                               ? tfm_tokenizer_piece(tok, (uint32_t)id, &len) : NULL;
        if (!have || len != c->len || memcmp(have, c->str, len) != 0) {
            int64_t at = tfm_tokenizer_token_id(tok, c->str, c->len);
            if (at >= 0)
                tfm_err_at(err, path, k->line, k->col, "added_tokens_decoder gives '%s' the "
                           "id %lld but %s has it as %lld", c->str, id, tf, (long long)at);
            else
                tfm_err_at(err, path, k->line, k->col, "added_tokens_decoder's '%s' (id %lld) "
                           "is not a token of %s (expected its tokens at their ids)", c->str,
                           id, tf);
            goto out;
        }
    }
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

/* The tokenizer beside a HuggingFace checkpoint: tokenizer.json (which says
 * whether it lowercases), else BERT's vocab.txt, else T5's spiece.model,
 * else GPT-2's vocab.json + merges.txt (or encoder.json + vocab.bpe), the
 * last three with tokenizer_config.json's settings (t5: a T5 folder's);
 * *tok = NULL when there is none. */
static int tokenizer_beside(const char *model_path, int vocab_size, int t5, tfm_tokenizer **tok,
                            tfm_err *err)
{
    char path[4200], load[4200], cfg[4200];
    *tok = NULL;
    path_beside(model_path, "tokenizer.json", path, sizeof path);
    int plain = access(path, F_OK) == 0;
    if (!plain) {
        path_beside(model_path, "vocab.txt", path, sizeof path);
        if (access(path, F_OK) != 0)
            path_beside(model_path, "spiece.model", path, sizeof path);
        if (access(path, F_OK) != 0) {
            /* GPT-2's pairs: the tokenizer loader reads them from the folder */
            static const char *const pairs[2][2] = {{"vocab.json", "merges.txt"},
                                                   {"encoder.json", "vocab.bpe"}};
            int k = 0;
            for (; k < 2; k++) {
                char merges[4200];
                path_beside(model_path, pairs[k][0], path, sizeof path);
                path_beside(model_path, pairs[k][1], merges, sizeof merges);
                if (access(path, F_OK) == 0 && access(merges, F_OK) == 0)
                    break;
            }
            if (k == 2)
                return 0;
        }
    }
    /* the pairs by their folder; messages name the vocabulary's file */
    if (strstr(path, ".json") && !plain)
        path_beside(model_path, ".", load, sizeof load);
    else
        snprintf(load, sizeof load, "%s", path);
    if (tfm_tokenizer_load(tok, load, err) < 0)
        return -1;
    path_beside(model_path, "tokenizer_config.json", cfg, sizeof cfg);
    int64_t extra = 0;
    if ((!plain && hf_tokenizer_config(cfg, *tok, t5, &extra, err) < 0) ||
        hf_tokenizer_config_agrees(cfg, *tok, path, err) < 0) {
        tfm_tokenizer_free(*tok);
        *tok = NULL;
        return -1;
    }
    uint32_t tv = tfm_tokenizer_vocab_size(*tok);
    if (tv > (uint32_t)vocab_size) {
        tfm_tokenizer_free(*tok);
        *tok = NULL;
        if (extra)
            return tfm_err_set(err, "%s: the tokenizer has %u tokens (with %lld <extra_id_N> "
                               "sentinels, %s) but the model only %d", path, tv,
                               (long long)extra, access(cfg, F_OK) == 0
                                   ? "tokenizer_config.json's extra_ids"
                                   : "T5Tokenizer's default without tokenizer_config.json",
                               vocab_size);
        return tfm_err_set(err, "%s: the tokenizer has %u tokens but the model only %d", path,
                           tv, vocab_size);
    }
    return 0;
}

/* The heads a BERT checkpoint has, into the model section c: the MLM
 * head, the pooler, NSP, and a task head: classifier.* is
 * BertForSequenceClassification's (on the pooler) or
 * BertForTokenClassification's tagger (no pooler), as architectures says
 * or else the pooler's presence; qa_outputs.* is the span head.  Its
 * outputs are classifier.weight's rows. */
static int bert_heads_config(const tfm_safetensors *st, const char *pre, const bert_heads *h,
                             tfm_model_keys *c, tfm_err *err)
{
    char name[160];
    c->mlm_head = tfm_safetensors_find(st, "cls.predictions.transform.dense.weight") != NULL;
    snprintf(name, sizeof name, "%spooler.dense.weight", pre);
    c->pooler = tfm_safetensors_find(st, name) != NULL;
    c->nsp = c->pooler && tfm_safetensors_find(st, "cls.seq_relationship.weight");
    c->classes = c->nsp ? 2 : 0;
    /* an untied decoder only where there is one: the MLM head's */
    c->tie_embeddings = h->tie || !c->mlm_head;
    const tfm_st_tensor *cl = tfm_safetensors_find(st, "classifier.weight");
    const tfm_st_tensor *qa = tfm_safetensors_find(st, "qa_outputs.weight");
    static const char *const need[] = {NULL, "classifier.weight", "classifier.weight",
                                       "qa_outputs.weight"};
    static const char *const arch[] = {NULL, "BertForSequenceClassification",
                                       "BertForTokenClassification", "BertForQuestionAnswering"};
    if (h->arch && !tfm_safetensors_find(st, need[h->arch]))
        return tfm_err_set(err, "%s: no tensor '%s', which config.json's architectures (%s) "
                                "has", st->name, need[h->arch], arch[h->arch]);
    if (h->arch == BERT_ARCH_SEQ && !c->pooler)
        return tfm_err_set(err, "%s: no tensor '%s', which config.json's architectures (%s) "
                                "has", st->name, name, arch[h->arch]);
    if (cl) {
        int64_t K = cl->ndim == 2 ? (int64_t)cl->shape[0] : 0;
        if (K < 1 || K > 1 << 16)
            return tfm_err_set(err, "%s: tensor 'classifier.weight' is not [labels, %lld]",
                               st->name, (long long)c->n_embd);
        int tag = h->arch == BERT_ARCH_TOK || (h->arch != BERT_ARCH_SEQ && !c->pooler);
        if (!tag && c->nsp)
            return tfm_err_set(err, "%s: both a classifier and the next-sentence head "
                                    "(cls.seq_relationship): tfm has one on the pooler",
                               st->name);
        if (tag)
            c->tags = K;
        else
            c->classes = K;
        if (h->regression == 1 && (tag || K != 1))
            return tfm_err_set(err, "%s: problem_type regression with %lld outputs: tfm's "
                                    "regression is one value per text", st->name,
                               (long long)K);
    }
    c->span = qa != NULL;
    return 0;
}

/* config.json's id2label for K outputs, in id order (PretrainedConfig's
 * LABEL_i without it), and perm: perm[k] is the id of the k-th label in
 * sorted order (tfm's labels are sorted; HF's are by id).  Each must be
 * distinct. */
static int bert_labels(const char *cfg_path, int K, char ***names, int **perm, tfm_err *err)
{
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, cfg_path, 0, err) < 0)
        return -1;
    char **nm = tfm_calloc((size_t)K, sizeof *nm);
    int *pm = tfm_malloc((size_t)K * sizeof *pm), rc = -1;
    const tfm_json *j = tfm_json_get(doc.root, "id2label");
    if (j && j->type != TFM_JSON_NULL &&
        tfm_json_expect(&doc, j, TFM_JSON_OBJECT, "id2label", err) < 0)
        goto out;
    if (j && j->type == TFM_JSON_OBJECT && j->n != (size_t)K) {
        tfm_err_at(err, cfg_path, j->line, j->col, "id2label has %zu labels but the "
                   "classifier %d outputs", j->n, K);
        goto out;
    }
    for (size_t i = 0; j && j->type == TFM_JSON_OBJECT && i < j->n; i++) {
        char *end;
        long id = strtol(j->keys[i]->str, &end, 10);
        const tfm_json *v = j->items[i];
        if (*end || end == j->keys[i]->str || id < 0 || id >= K || nm[id] ||
            v->type != TFM_JSON_STRING) {
            tfm_err_at(err, cfg_path, j->keys[i]->line, j->keys[i]->col, "id2label: expected "
                       "ids 0 to %d, each once, with a string", K - 1);
            goto out;
        }
        nm[id] = tfm_strdup(v->str);
    }
    for (int i = 0; i < K; i++) {
        if (!nm[i]) {
            char b[32];
            snprintf(b, sizeof b, "LABEL_%d", i);
            nm[i] = tfm_strdup(b);
        }
        pm[i] = i;
    }
    for (int i = 1; i < K; i++) /* insertion sort: K is small */
        for (int k = i; k > 0 && strcmp(nm[pm[k - 1]], nm[pm[k]]) >= 0; k--) {
            if (!strcmp(nm[pm[k - 1]], nm[pm[k]])) {
                tfm_err_at(err, cfg_path, j ? j->line : 1, j ? j->col : 1, "id2label: the "
                           "label '%s' is there twice", nm[pm[k]]);
                goto out;
            }
            int t = pm[k];
            pm[k] = pm[k - 1];
            pm[k - 1] = t;
        }
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    if (rc < 0) {
        for (int i = 0; i < K; i++)
            free(nm[i]);
        free(nm);
        free(pm);
        return -1;
    }
    *names = nm;
    *perm = pm;
    return 0;
}

static void bert_labels_free(char **names, int *perm, int K)
{
    for (int i = 0; names && i < K; i++)
        free(names[i]);
    free(names);
    free(perm);
}

/* The "task" a tfm model file carries, for a BERT checkpoint with a task
 * head (model/file.h): {"labels": [...sorted], "pairs": false},
 * {"regression": true, "pairs": false}, {"tags": [...]} or {} (span).  0:
 * no task head. */
static int bert_task_json(const tfm_safetensors *st, const char *pre, tfm_buf *out,
                          tfm_err *err)
{
    tfm_model_keys c;
    bert_heads h;
    char cfg[4200];
    memset(&c, 0, sizeof c);
    if (bert_config(st->name, &c, &h, err) < 0 || bert_heads_config(st, pre, &h, &c, err) < 0)
        return -1;
    int K = (int)(c.tags ? c.tags : c.nsp ? 0 : c.classes);
    if (!K && c.span) {
        tfm_buf_puts(out, "{}");
        return 1;
    }
    if (!K)
        return 0;
    if (!c.tags && K == 1 && h.regression != 0) {
        tfm_buf_puts(out, "{\"regression\":true,\"pairs\":false}");
        return 1;
    }
    char **names;
    int *perm;
    path_beside(st->name, "config.json", cfg, sizeof cfg);
    if (bert_labels(cfg, K, &names, &perm, err) < 0)
        return -1;
    tfm_buf_printf(out, "{\"%s\":[", c.tags ? "tags" : "labels");
    for (int k = 0; k < K; k++) {
        if (k)
            tfm_buf_putc(out, ',');
        tfm_buf_put_json_string(out, names[perm[k]], strlen(names[perm[k]]));
    }
    tfm_buf_puts(out, c.tags ? "]}" : "],\"pairs\":false}");
    bert_labels_free(names, perm, K);
    return 1;
}

/* A task head's Linear SRC ([K, C], [K]) into DST with its rows in tfm's
 * sorted label order. */
static int bert_head_rows(const bert_ckpt *b, const char *dst, const char *src, int K,
                          const int *perm, tfm_err *err)
{
    char sw[96], sb[96], dw[96], db[96];
    size_t C = (size_t)b->m->cfg.n_embd;
    snprintf(sw, sizeof sw, "%s.weight", src);
    snprintf(sb, sizeof sb, "%s.bias", src);
    snprintf(dw, sizeof dw, "%s.weight", dst);
    snprintf(db, sizeof db, "%s.bias", dst);
    const float *w = bert_tensor(b, sw, NULL, (size_t)K, C, err);
    const float *bias = w ? bert_tensor(b, sb, NULL, (size_t)K, 0, err) : NULL;
    if (!bias)
        return -1;
    float *ow = bert_dst(b, dw, 0), *ob = bert_dst(b, db, 0);
    for (int k = 0; k < K; k++) {
        int r = perm ? perm[k] : k;
        memcpy(ow + (size_t)k * C, w + (size_t)r * C, C * sizeof(float));
        ob[k] = bias[r];
    }
    return 0;
}

/* Copies the heads bert_heads_config found (HF's Linears are [out, in], as
 * tfm's heads). */
static int bert_head_weights(const bert_ckpt *b, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = g->n_embd, V = g->vocab_size;
    bert_ckpt cls = *b;
    cls.pre = ""; /* cls.* never has the "bert." prefix */
    if (g->mlm_head &&
        (bert_copy(&cls, "cls.predictions.transform.dense.weight", 0,
                   "cls.predictions.transform.dense.weight", NULL, C, C, err) < 0 ||
         bert_copy(&cls, "cls.predictions.transform.dense.bias", 0,
                   "cls.predictions.transform.dense.bias", NULL, C, 0, err) < 0 ||
         bert_norm(&cls, "cls.predictions.transform.LayerNorm", 0,
                   "cls.predictions.transform.LayerNorm", C, err) < 0 ||
         bert_copy(&cls, "cls.predictions.bias", 0,
                   /* untied, transformers 5 computes with the decoder's own
                    * bias (tied, it is cls.predictions.bias) */
                   !g->tie_embeddings &&
                           tfm_safetensors_find(b->st, "cls.predictions.decoder.bias")
                       ? "cls.predictions.decoder.bias"
                       : "cls.predictions.bias",
                   NULL, V, 0, err) < 0))
        return -1;
    if (g->pooler && (bert_copy(b, "pooler.dense.weight", 0, "pooler.dense.weight", NULL, C, C,
                                err) < 0 ||
                      bert_copy(b, "pooler.dense.bias", 0, "pooler.dense.bias", NULL, C, 0,
                                err) < 0))
        return -1;
    if (g->nsp && (bert_copy(&cls, "cls.seq_relationship.weight", 0,
                             "cls.seq_relationship.weight", NULL, 2, C, err) < 0 ||
                   bert_copy(&cls, "cls.seq_relationship.bias", 0, "cls.seq_relationship.bias",
                             NULL, 2, 0, err) < 0))
        return -1;
    if (!g->tie_embeddings && bert_copy(&cls, "lm_head.weight", 0,
                                        "cls.predictions.decoder.weight", NULL, V, C, err) < 0)
        return -1;
    if (g->span && bert_head_rows(&cls, "qa_outputs", "qa_outputs", 2, NULL, err) < 0)
        return -1;
    int K = g->n_tags ? g->n_tags : g->nsp ? 0 : g->n_classes;
    if (!K)
        return 0;
    /* the classifier's rows in the sorted order of its labels */
    char cfg[4200], **names = NULL;
    int *perm = NULL;
    path_beside(b->st->name, "config.json", cfg, sizeof cfg);
    if (K > 1 && bert_labels(cfg, K, &names, &perm, err) < 0)
        return -1;
    /* the tagger is classifier.*, and so is the classifier without one */
    int rc = bert_head_rows(&cls, "classifier", "classifier", K, perm, err);
    bert_labels_free(names, perm, K);
    return rc;
}

/* Builds *m (and the model section c) from an open BERT checkpoint; the
 * tokenizer beside it when tok is not NULL.  On failure nothing is held. */
static int bert_load(const tfm_safetensors *st, const char *pre, tfm_model_keys *c, tfm_model *m,
                     tfm_tokenizer **tok, tfm_err *err)
{
    char cfg_path[4200];
    path_beside(st->name, "config.json", cfg_path, sizeof cfg_path);
    tfm_model_config g;
    bert_heads h;
    if (bert_config(st->name, c, &h, err) < 0 || bert_heads_config(st, pre, &h, c, err) < 0)
        return -1;
    if (tfm_model_config_from_keys(c, NULL, &g, err) < 0)
        return tfm_err_prefix(err, "%s", cfg_path);
    if (tfm_model_init(m, &g, err) < 0)
        return tfm_err_prefix(err, "%s", cfg_path);
    bert_ckpt b = {st, pre, m, "BERT"};
    if (bert_weights(&b, err) < 0 || bert_head_weights(&b, err) < 0 ||
        (tok && tokenizer_beside(st->name, g.vocab_size, 0, tok, err) < 0)) {
        tfm_model_free(m);
        return -1;
    }
    return 0;
}

/* tfm_model_load of a BERT checkpoint: 1 when path is not one. */
static int bert_model_load(const char *path, tfm_model_keys *c, tfm_model *m, tfm_tokenizer **tok,
                           tfm_err *err)
{
    tfm_safetensors st;
    if (tfm_safetensors_open(&st, path, err) < 0)
        return -1;
    const char *pre = bert_prefix(&st);
    int rc = 1;
    if (pre)
        rc = tfm_model_file_verify(&st, 0, err) < 0 || tfm_quant_widen(&st, NULL, err) < 0
                 ? -1
                 : bert_load(&st, pre, c, m, tok, err);
    tfm_safetensors_close(&st);
    return rc;
}

/* ---- HuggingFace T5 checkpoints -------------------------------------- */

/* A T5ForConditionalGeneration safetensors file as save_pretrained writes
 * it (t5-small's layout: shared.weight, no lm_head.weight when tied; v1.1
 * and flan-t5's: gated-gelu, an untied lm_head.weight, num_decoder_layers
 * that may differ from num_layers) with config.json beside it becomes tfm's
 * encoder-decoder (model/transformer.h): pre-norm blocks with RMSNorm
 * (layer_norm_epsilon, default 1e-6), T5 relative positions with one table
 * per stack (block 0's relative_attention_bias, [buckets, heads] there,
 * [heads, buckets] in tfm), unscaled attention, no biases, the feed-forward
 * of feed_forward_proj, the source embedding tied to the target's
 * (shared.weight; encoder.embed_tokens.weight or decoder.embed_tokens.weight
 * when a file lacks it), the LM head tied unless lm_head.weight differs
 * from it (t5_head_tied), reading the hidden states times d_model^-0.5
 * (head_scale) unless scale_decoder_outputs (transformers 5) or
 * tie_word_embeddings (4) is false.  HF's
 * Linears are [out, in], tfm's [in, out], and tfm's q|k|v and k|v are
 * fused: the weights are copied.  Old files also carry a
 * decoder.block.0.layer.1.EncDecAttention.relative_attention_bias that HF
 * never uses (cross-attention has no position bias): it is ignored. */

static int t5_is(const tfm_safetensors *st)
{
    return !tfm_format(st) &&
           tfm_safetensors_find(st, "encoder.block.0.layer.0.SelfAttention.q.weight") != NULL;
}


/* generation_config.json beside model_path, which transformers 5's
 * generate reads instead of config.json (save_pretrained no longer writes
 * these there): its decoder_start_token_id, eos_token_id,
 * forced_bos_token_id (bos NULL: a T5, which has none) and
 * forced_eos_token_id replace config.json's when present.  No file:
 * nothing. */
static int hf_generation_ids(const char *model_path, int64_t V, int64_t *start, int64_t *eos,
                             int64_t *bos, int64_t *forced_eos, tfm_err *err)
{
    char path[4200];
    path_beside(model_path, "generation_config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return 0;
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = -1;
    const tfm_json *j;
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        t5_int(&doc, "decoder_start_token_id", 0, V - 1, *start, start, err) < 0 ||
        t5_int(&doc, "eos_token_id", 0, V - 1, *eos, eos, err) < 0 ||
        t5_int(&doc, "forced_eos_token_id", -1, V - 1, *forced_eos, forced_eos, err) < 0 ||
        (bos && t5_int(&doc, "forced_bos_token_id", -1, V - 1, *bos, bos, err) < 0))
        goto out;
    if (!bos && (j = tfm_json_get(doc.root, "forced_bos_token_id")) && !hf_is_default(j)) {
        tfm_err_at(err, path, j->line, j->col, "forced_bos_token_id is not supported for T5 "
                   "(tfm forces a first token only in BART)");
        goto out;
    }
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

/* config.json beside a T5 checkpoint as the model section c, and its
 * end-of-text id. */
static int t5_config(const char *model_path, tfm_model_keys *c, int64_t *eos, tfm_err *err)
{
    char path[4200];
    path_beside(model_path, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return tfm_err_set(err, "%s: no such file (a HuggingFace T5 checkpoint needs "
                                "the config.json beside it)", path);
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = -1;
    int64_t C, KV, F, L, DL, NH, V, NB, MD, P, start, pad, forced_eos;
    double drop;
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        hf_keys_check(&doc, hf_t5_keys, "T5Config", err) < 0 ||
        t5_int(&doc, "d_model", 1, 65536, -1, &C, err) < 0 ||
        t5_int(&doc, "d_kv", 1, 65536, -1, &KV, err) < 0 ||
        t5_int(&doc, "d_ff", 1, 1 << 20, -1, &F, err) < 0 ||
        t5_int(&doc, "num_layers", 1, 1024, -1, &L, err) < 0 ||
        t5_int(&doc, "num_decoder_layers", 1, 1024, L, &DL, err) < 0 ||
        t5_int(&doc, "num_heads", 1, 1024, -1, &NH, err) < 0 ||
        t5_int(&doc, "vocab_size", 2, 1 << 24, -1, &V, err) < 0 ||
        t5_int(&doc, "relative_attention_num_buckets", 4, 4096, 32, &NB, err) < 0 ||
        t5_int(&doc, "relative_attention_max_distance", 2, 1 << 20, 128, &MD, err) < 0 ||
        t5_int(&doc, "n_positions", 1, 1 << 20, 512, &P, err) < 0 ||
        t5_int(&doc, "decoder_start_token_id", 0, V - 1, 0, &start, err) < 0 ||
        t5_int(&doc, "eos_token_id", 0, V - 1, 1, eos, err) < 0 ||
        t5_int(&doc, "pad_token_id", 0, V - 1, 0, &pad, err) < 0 ||
        t5_int(&doc, "forced_eos_token_id", -1, V - 1, -1, &forced_eos, err) < 0 ||
        hf_prob(&doc, "dropout_rate", 0.1, &drop, err) < 0 ||
        hf_generation_ids(model_path, V, &start, eos, NULL, &forced_eos, err) < 0)
        goto out;
    const tfm_json *j = tfm_json_get(doc.root, "model_type");
    if (j && !(j->type == TFM_JSON_STRING && (!strcmp(j->str, "t5") || !strcmp(j->str, "mt5")))) {
        tfm_err_at(err, path, j->line, j->col, "model_type '%s' is not supported (tfm reads "
                   "t5 and mt5)", j->str ? j->str : "");
        goto out;
    }
    if (NH * KV > 1 << 20) {
        j = tfm_json_get(doc.root, "d_kv");
        tfm_err_at(err, path, j->line, j->col, "num_heads %lld x d_kv %lld is too wide",
                   (long long)NH, (long long)KV);
        goto out;
    }
    double eps = 1e-6;
    j = tfm_json_get(doc.root, "layer_norm_epsilon");
    if (j) {
        if (tfm_json_expect(&doc, j, TFM_JSON_NUMBER, "layer_norm_epsilon", err) < 0)
            goto out;
        if (!(j->num >= 1e-12 && j->num < 1)) {
            tfm_err_at(err, path, j->line, j->col, "layer_norm_epsilon must be in [1e-12, 1), "
                       "not %s", j->str);
            goto out;
        }
        eps = j->num;
    }
    /* HF's T5Config: "relu", "gelu", "gated-gelu" (GELU-tanh), "gated-silu", ... */
    tfm_ffn_kind ffn = TFM_FFN_PLAIN;
    tfm_act act = TFM_ACT_RELU;
    j = tfm_json_get(doc.root, "feed_forward_proj");
    if (j && tfm_json_expect(&doc, j, TFM_JSON_STRING, "feed_forward_proj", err) < 0)
        goto out;
    const char *proj = j ? j->str : "relu";
    if (!strcmp(proj, "relu")) {
        act = TFM_ACT_RELU;
    } else if (!strcmp(proj, "gelu")) {
        act = TFM_ACT_GELU_EXACT;
    } else if (!strcmp(proj, "gelu_new") || !strcmp(proj, "gelu_pytorch_tanh")) {
        act = TFM_ACT_GELU_TANH;
    } else if (!strcmp(proj, "gated-gelu") || !strcmp(proj, "gated-gelu_new")) {
        ffn = TFM_FFN_GEGLU; /* GELU-tanh, as HF maps gated-gelu to gelu_new */
        act = TFM_ACT_GELU_TANH;
    } else if (!strcmp(proj, "gated-silu")) {
        ffn = TFM_FFN_SWIGLU;
    } else {
        tfm_err_at(err, path, j->line, j->col, "feed_forward_proj '%s' is not supported (tfm "
                   "has relu, gelu, gelu_new, gated-gelu and gated-silu)", proj);
        goto out;
    }
    /* T5Config derives these from feed_forward_proj, but a config.json's
     * own values win in HF (set after it): they must say the same */
    const char *fn = !strcmp(proj, "gated-gelu") ? "gelu_new" : strrchr(proj, '-') ? strrchr(proj, '-') + 1 : proj;
    j = tfm_json_get(doc.root, "dense_act_fn");
    if (j && !(j->type == TFM_JSON_STRING && !strcmp(j->str, fn))) {
        tfm_err_at(err, path, j->line, j->col, "dense_act_fn '%s' differs from feed_forward_proj "
                   "'%s' (which means %s): tfm reads only feed_forward_proj's", j->str ? j->str : "",
                   proj, fn);
        goto out;
    }
    j = tfm_json_get(doc.root, "is_gated_act");
    if (j && !(j->type == TFM_JSON_BOOL && j->boolean == tfm_ffn_gated(ffn))) {
        tfm_err_at(err, path, j->line, j->col, "is_gated_act %s differs from feed_forward_proj "
                   "'%s'", j->str ? j->str : "", proj);
        goto out;
    }
    /* transformers 5 reads tie_word_embeddings false (v1.1's) as "no
     * d_model^-0.5 before the head" (scale_decoder_outputs, which it then
     * writes) and ties the head unless the file holds an lm_head.weight
     * that differs: t5_load decides the tie from the tensors */
    int tied, scale;
    if (hf_bool(&doc, "tie_word_embeddings", 1, &tied, err) < 0 ||
        hf_bool(&doc, "scale_decoder_outputs", tied, &scale, err) < 0)
        goto out;
    (void)pad; /* padding is told by lengths, never by id */
    j = tfm_json_get(doc.root, "architectures");
    int enc_only = j && j->type == TFM_JSON_ARRAY && j->n == 1 &&
                   j->items[0]->type == TFM_JSON_STRING &&
                   !strcmp(j->items[0]->str, "T5EncoderModel");
    c->kind = enc_only ? TFM_KIND_ENCODER : TFM_KIND_ENCODER_DECODER;
    c->positions = TFM_POS_T5;
    c->norm = TFM_LN_PRE;
    c->norm_type = TFM_NORM_RMS;
    c->ffn = ffn;
    c->activation = act;
    c->attn_scale = 0;
    c->bias = 0;
    c->ln_eps = eps;
    c->n_layer = DL;
    c->n_enc_layer = L;
    c->n_head = NH;
    c->n_embd = C;
    /* d_kv need not be d_model/num_heads (v1.1 and flan-t5 small: 6 x 64
     * over 512; t5-3b, t5-11b) */
    c->head_dim = KV;
    c->d_ff = F;
    c->block_size = P;
    c->vocab_size = V;
    c->t5_buckets = NB;
    c->t5_max_distance = MD;
    c->tie_embeddings = tied;
    c->tie_source = 1;
    c->head_scale = scale;
    c->decoder_start = start;
    c->forced_eos = forced_eos;
    /* HF's T5 drops at dropout_rate everywhere: embeddings, attention
     * weights, each residual branch, inside the feed-forward and after each
     * stack's final norm (attn_dropout and emb_dropout: -1, the same) */
    c->dropout = drop;
    c->ffn_dropout = drop;
    c->final_dropout = drop;
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

/* Linear SRC [out, in] into columns [col, col + out) of DST ([in, ld]). */
static int t5_linear(const bert_ckpt *b, const char *dst, size_t ld, size_t col,
                     const char *src, size_t out, size_t in, tfm_err *err)
{
    const float *w = bert_tensor(b, src, NULL, out, in, err);
    if (!w)
        return -1;
    transpose_into(bert_dst(b, dst, 0) + col, ld, w, out, in);
    return 0;
}

/* One relative-bias table: HF's [buckets, heads] into tfm's [heads, buckets]. */
static int t5_rel_bias(const bert_ckpt *b, const char *dst, const char *stack, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    char src[128];
    snprintf(src, sizeof src, "%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
             stack);
    return t5_linear(b, dst, (size_t)g->t5_buckets, 0, src, (size_t)g->t5_buckets,
                     (size_t)g->n_head, err);
}

/* "STACK.block.L.layer.N.PART" (HF) and "PREh.L.PART" (tfm). */
static const char *t5_src(char s[128], const char *stack, int l, int n, const char *part)
{
    snprintf(s, 128, "%s.block.%d.layer.%d.%s", stack, l, n, part);
    return s;
}

static const char *t5_dst(char d[64], const char *pre, int l, const char *part)
{
    snprintf(d, 64, "%sh.%d.%s", pre, l, part);
    return d;
}

/* The blocks of one stack ("encoder" into "enc.h.N.", "decoder" into
 * "h.N.": self-attention in layer 0, cross-attention in the decoder's
 * layer 1, the feed-forward last), then its final norm. */
static int t5_stack(const bert_ckpt *b, const char *stack, const char *pre, int n_layer,
                    int cross, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = (size_t)g->n_embd, F = (size_t)tfm_model_config_ff(g);
    size_t D = (size_t)tfm_model_config_attn_dim(g); /* HF's inner_dim */
    int gated = tfm_ffn_gated(g->ffn), ff = cross ? 2 : 1;
    char d[64], s[128];
    for (int l = 0; l < n_layer; l++) {
        if (bert_copy(b, t5_dst(d, pre, l, "ln_1.weight"), 0,
                      t5_src(s, stack, l, 0, "layer_norm.weight"), NULL, C, 0, err) < 0 ||
            t5_linear(b, t5_dst(d, pre, l, "attn.c_attn.weight"), 3 * D, 0,
                      t5_src(s, stack, l, 0, "SelfAttention.q.weight"), D, C, err) < 0 ||
            t5_linear(b, t5_dst(d, pre, l, "attn.c_attn.weight"), 3 * D, D,
                      t5_src(s, stack, l, 0, "SelfAttention.k.weight"), D, C, err) < 0 ||
            t5_linear(b, t5_dst(d, pre, l, "attn.c_attn.weight"), 3 * D, 2 * D,
                      t5_src(s, stack, l, 0, "SelfAttention.v.weight"), D, C, err) < 0 ||
            t5_linear(b, t5_dst(d, pre, l, "attn.c_proj.weight"), C, 0,
                      t5_src(s, stack, l, 0, "SelfAttention.o.weight"), C, D, err) < 0)
            return -1;
        if (cross &&
            (bert_copy(b, t5_dst(d, pre, l, "ln_x.weight"), 0,
                       t5_src(s, stack, l, 1, "layer_norm.weight"), NULL, C, 0, err) < 0 ||
             t5_linear(b, t5_dst(d, pre, l, "xattn.c_q.weight"), D, 0,
                       t5_src(s, stack, l, 1, "EncDecAttention.q.weight"), D, C, err) < 0 ||
             t5_linear(b, t5_dst(d, pre, l, "xattn.c_kv.weight"), 2 * D, 0,
                       t5_src(s, stack, l, 1, "EncDecAttention.k.weight"), D, C, err) < 0 ||
             t5_linear(b, t5_dst(d, pre, l, "xattn.c_kv.weight"), 2 * D, D,
                       t5_src(s, stack, l, 1, "EncDecAttention.v.weight"), D, C, err) < 0 ||
             t5_linear(b, t5_dst(d, pre, l, "xattn.c_proj.weight"), C, 0,
                       t5_src(s, stack, l, 1, "EncDecAttention.o.weight"), C, D, err) < 0))
            return -1;
        if (bert_copy(b, t5_dst(d, pre, l, "ln_2.weight"), 0,
                      t5_src(s, stack, l, ff, "layer_norm.weight"), NULL, C, 0, err) < 0 ||
            t5_linear(b, t5_dst(d, pre, l, gated ? "mlp.wi_0.weight" : "mlp.c_fc.weight"), F, 0,
                      t5_src(s, stack, l, ff, gated ? "DenseReluDense.wi_0.weight"
                                                    : "DenseReluDense.wi.weight"),
                      F, C, err) < 0 ||
            (gated && t5_linear(b, t5_dst(d, pre, l, "mlp.wi_1.weight"), F, 0,
                                t5_src(s, stack, l, ff, "DenseReluDense.wi_1.weight"), F, C,
                                err) < 0) ||
            t5_linear(b, t5_dst(d, pre, l, "mlp.c_proj.weight"), C, 0,
                      t5_src(s, stack, l, ff, "DenseReluDense.wo.weight"), C, F, err) < 0)
            return -1;
    }
    /* a block beyond config.json's count, or a bias table in a later block
     * (umT5's, one per layer), would be silently dropped */
    if (tfm_safetensors_find(b->st, t5_src(s, stack, n_layer, 0, "SelfAttention.q.weight")))
        return tfm_err_set(err, "%s: the checkpoint has a block %d (tensor '%s') but "
                                "config.json says %d", b->st->name, n_layer, s, n_layer);
    if (n_layer > 1 &&
        tfm_safetensors_find(b->st, t5_src(s, stack, 1, 0,
                                           "SelfAttention.relative_attention_bias.weight")))
        return tfm_err_set(err, "%s: tensor '%s': a relative bias in every block (umT5) is "
                                "not supported; T5 has one, in block 0", b->st->name, s);
    snprintf(d, sizeof d, "%sln_f.weight", pre);
    snprintf(s, sizeof s, "%s.final_layer_norm.weight", stack);
    return bert_copy(b, d, 0, s, NULL, C, 0, err);
}

static int t5_weights(const bert_ckpt *b, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = (size_t)g->n_embd, V = (size_t)g->vocab_size;
    /* save_pretrained keeps shared.weight of the tied three */
    const char *alt = tfm_safetensors_find(b->st, "decoder.embed_tokens.weight") &&
                              !tfm_safetensors_find(b->st, "encoder.embed_tokens.weight")
                          ? "decoder.embed_tokens.weight"
                          : "encoder.embed_tokens.weight";
    if (g->kind == TFM_KIND_ENCODER) /* T5EncoderModel's: the encoder stack alone */
        return bert_copy(b, "wte.weight", 0, "shared.weight", alt, V, C, err) < 0 ||
                       t5_rel_bias(b, "rel_bias.weight", "encoder", err) < 0 ||
                       t5_stack(b, "encoder", "", g->n_layer, 0, err) < 0
                   ? -1
                   : 0;
    if (bert_copy(b, "wte.weight", 0, "shared.weight", alt, V, C, err) < 0 ||
        t5_rel_bias(b, "enc.rel_bias.weight", "encoder", err) < 0 ||
        t5_rel_bias(b, "rel_bias.weight", "decoder", err) < 0 ||
        t5_stack(b, "encoder", "enc.", tfm_model_config_enc_layers(g), 0, err) < 0 ||
        t5_stack(b, "decoder", "", g->n_layer, 1, err) < 0)
        return -1;
    if (!g->tie_embeddings &&
        bert_copy(b, "lm_head.weight", 0, "lm_head.weight", NULL, V, C, err) < 0)
        return -1;
    return 0;
}

/* ---- HuggingFace BART checkpoints ------------------------------------ */

/* A BartForConditionalGeneration (names under "model.") or BartModel (no
 * prefix, no head) safetensors file with config.json beside it becomes
 * tfm's encoder-decoder (model/transformer.h), as modeling_bart.py
 * computes it: post-LN blocks with biases everywhere, q·kᵀ/√head_dim
 * (HF scales q instead: the same), learned positions whose tables have 2
 * leading rows that no position reads (HF's offset of 2: rows 2.. become
 * tfm's wpe of max_position_embeddings rows), embeddings times
 * √d_model with scale_embedding, layernorm_embedding as the embedding
 * norm of both stacks, eps 1e-5 (nn.LayerNorm's; BART's config has no
 * eps), no final norm, the LM head tied to shared.weight plus
 * final_logits_bias [1, V] (head_bias).  Names map as
 *   shared.weight (or encoder/decoder.embed_tokens)  wte
 *   S.embed_positions.weight [P + 2, C]        (enc.)wpe [P, C]
 *   S.layernorm_embedding                      (enc.)ln_e
 *   S.layers.N.self_attn.{q,k,v}_proj          (enc.)h.N.attn.c_attn
 *   S.layers.N.self_attn.out_proj              (enc.)h.N.attn.c_proj
 *   S.layers.N.self_attn_layer_norm            (enc.)h.N.ln_1
 *   decoder.layers.N.encoder_attn.q_proj       h.N.xattn.c_q
 *   decoder.layers.N.encoder_attn.{k,v}_proj   h.N.xattn.c_kv
 *   decoder.layers.N.encoder_attn.out_proj     h.N.xattn.c_proj
 *   decoder.layers.N.encoder_attn_layer_norm   h.N.ln_x
 *   S.layers.N.fc1, fc2                        (enc.)h.N.mlp.c_fc, c_proj
 *   S.layers.N.final_layer_norm                (enc.)h.N.ln_2
 * (Linears transposed: [out, in] there, [in, out] here). */

/* "model." or "" (the prefix of the checkpoint's names), or NULL when the
 * file is not a BART checkpoint. */
static const char *bart_prefix(const tfm_safetensors *st)
{
    if (tfm_format(st))
        return NULL;
    if (tfm_safetensors_find(st, "model.encoder.layers.0.self_attn.q_proj.weight"))
        return "model.";
    if (tfm_safetensors_find(st, "encoder.layers.0.self_attn.q_proj.weight"))
        return "";
    return NULL;
}


/* Two config.json keys that tfm reads as one (encoder and decoder heads,
 * feed-forward widths) must agree. */
static int bart_same(const tfm_json_doc *doc, const char *a, int64_t va, const char *b,
                     int64_t vb, tfm_err *err)
{
    if (va == vb)
        return 0;
    const tfm_json *j = tfm_json_get(doc->root, b);
    return tfm_err_at(err, doc->name, j->line, j->col, "%s %lld differs from %s %lld: tfm's "
                      "encoder and decoder share one", b, (long long)vb, a, (long long)va);
}

/* config.json beside a BART checkpoint as the model section c, and
 * its end-of-text id. */
static int bart_config(const char *model_path, tfm_model_keys *c, int64_t *eos, tfm_err *err)
{
    char path[4200];
    path_beside(model_path, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return tfm_err_set(err, "%s: no such file (a HuggingFace BART checkpoint needs "
                                "the config.json beside it)", path);
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = -1, scale, tied, before, final_ln;
    int64_t C, L, DL, NH, DNH, F, DF, P, V, start, bos, pad, forced, forced_eos;
    double drop, attn_drop, act_drop;
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        hf_keys_check(&doc, hf_bart_keys, "BartConfig", err) < 0 ||
        t5_int(&doc, "d_model", 1, 65536, -1, &C, err) < 0 ||
        t5_int(&doc, "encoder_layers", 1, 1024, -1, &L, err) < 0 ||
        t5_int(&doc, "decoder_layers", 1, 1024, -1, &DL, err) < 0 ||
        t5_int(&doc, "encoder_attention_heads", 1, 1024, -1, &NH, err) < 0 ||
        t5_int(&doc, "decoder_attention_heads", 1, 1024, -1, &DNH, err) < 0 ||
        t5_int(&doc, "encoder_ffn_dim", 1, 1 << 20, -1, &F, err) < 0 ||
        t5_int(&doc, "decoder_ffn_dim", 1, 1 << 20, -1, &DF, err) < 0 ||
        t5_int(&doc, "max_position_embeddings", 1, 1 << 20, -1, &P, err) < 0 ||
        t5_int(&doc, "vocab_size", 4, 1 << 24, -1, &V, err) < 0 ||
        t5_int(&doc, "pad_token_id", 0, V - 1, 1, &pad, err) < 0 ||
        t5_int(&doc, "bos_token_id", 0, V - 1, 0, &bos, err) < 0 ||
        t5_int(&doc, "eos_token_id", 0, V - 1, 2, eos, err) < 0 ||
        t5_int(&doc, "decoder_start_token_id", 0, V - 1, 2, &start, err) < 0 ||
        t5_int(&doc, "forced_bos_token_id", -1, V - 1, -1, &forced, err) < 0 ||
        t5_int(&doc, "forced_eos_token_id", -1, V - 1, -1, &forced_eos, err) < 0 ||
        hf_generation_ids(model_path, V, &start, eos, &forced, &forced_eos, err) < 0 ||
        hf_prob(&doc, "dropout", 0.1, &drop, err) < 0 ||
        hf_prob(&doc, "attention_dropout", 0.0, &attn_drop, err) < 0 ||
        hf_prob(&doc, "activation_dropout", 0.0, &act_drop, err) < 0 ||
        bart_same(&doc, "encoder_attention_heads", NH, "decoder_attention_heads", DNH, err) < 0 ||
        bart_same(&doc, "encoder_ffn_dim", F, "decoder_ffn_dim", DF, err) < 0 ||
        hf_bool(&doc, "scale_embedding", 0, &scale, err) < 0 ||
        hf_bool(&doc, "tie_word_embeddings", 1, &tied, err) < 0 ||
        hf_bool(&doc, "normalize_before", 0, &before, err) < 0 ||
        hf_bool(&doc, "add_final_layer_norm", 0, &final_ln, err) < 0)
        goto out;
    const tfm_json *j = tfm_json_get(doc.root, "model_type");
    if (j && !(j->type == TFM_JSON_STRING && !strcmp(j->str, "bart"))) {
        tfm_err_at(err, path, j->line, j->col, "model_type '%s' is not supported (tfm reads "
                   "bart; mbart, marian and pegasus are pre-LN or sinusoidal)",
                   j->str ? j->str : "");
        goto out;
    }
    if (before || final_ln) {
        j = tfm_json_get(doc.root, before ? "normalize_before" : "add_final_layer_norm");
        tfm_err_at(err, path, j->line, j->col, "%s true (mBART's pre-LN layout) is not "
                   "BART's: HF's BartModel ignores it, so the file was made for another model",
                   before ? "normalize_before" : "add_final_layer_norm");
        goto out;
    }
    if (C % NH) {
        j = tfm_json_get(doc.root, "encoder_attention_heads");
        tfm_err_at(err, path, j->line, j->col, "d_model %lld is not a multiple of "
                   "encoder_attention_heads %lld", (long long)C, (long long)NH);
        goto out;
    }
    /* HF's ACT2FN names */
    tfm_act act;
    j = tfm_json_get(doc.root, "activation_function");
    if (j && tfm_json_expect(&doc, j, TFM_JSON_STRING, "activation_function", err) < 0)
        goto out;
    const char *fn = j ? j->str : "gelu";
    if (!strcmp(fn, "gelu")) {
        act = TFM_ACT_GELU_EXACT;
    } else if (!strcmp(fn, "gelu_new") || !strcmp(fn, "gelu_pytorch_tanh")) {
        act = TFM_ACT_GELU_TANH;
    } else if (!strcmp(fn, "relu")) {
        act = TFM_ACT_RELU;
    } else {
        tfm_err_at(err, path, j->line, j->col, "activation_function '%s' is not supported "
                   "(tfm has gelu, gelu_new and relu)", fn);
        goto out;
    }
    /* padding is told by lengths, never by id; bos is the tokenizer's */
    (void)pad, (void)bos;
    c->kind = TFM_KIND_ENCODER_DECODER;
    c->positions = TFM_POS_LEARNED;
    c->norm = TFM_LN_POST;
    c->activation = act;
    c->ln_eps = 1e-5;
    c->bias = 1;
    c->n_layer = DL;
    c->n_enc_layer = L;
    c->n_head = NH;
    c->n_embd = C;
    c->d_ff = F;
    c->block_size = P;
    c->vocab_size = V;
    c->emb_norm = 1;
    c->emb_scale = scale;
    c->tie_embeddings = tied;
    c->tie_source = 1;
    c->decoder_start = start;
    /* HF's generate forces forced_bos_token_id (bart-large's 0, <s>) right
     * after the start token; its tokenizer begins every text with <s> */
    c->forced_bos = forced;
    c->source_bos = 1;
    /* HF's generate forces forced_eos_token_id (bart-large's 2, </s>) as
     * the last token a generation may have */
    c->forced_eos = forced_eos;
    /* BartConfig's rates: dropout on the embeddings and each residual
     * branch, attention_dropout on the attention weights,
     * activation_dropout inside the feed-forward; no final dropout */
    c->dropout = drop;
    c->attn_dropout = attn_drop;
    c->ffn_dropout = act_drop;
    rc = 0;
out:
    tfm_json_doc_free(&doc);
    return rc;
}

/* Layer l's Linear (out > 0: [out, in] weight and bias) or LayerNorm
 * (out 0, width in) STACK.layers.l.SRC into PREh.l.DST. */
static int bart_part(const bert_ckpt *b, const char *stack, const char *pre, int l,
                     const char *src, const char *dst, size_t out, size_t in, tfm_err *err)
{
    char s[160], d[64];
    snprintf(s, sizeof s, "%s.layers.%d.%s", stack, l, src);
    snprintf(d, sizeof d, "%sh.%d.%s", pre, l, dst);
    return out ? bert_linear(b, d, 0, s, out, in, err) : bert_norm(b, d, 0, s, in, err);
}

/* Layer l's attention ATTN ("self_attn", "encoder_attn"): its projections
 * PROJ[0..n) fused into PREh.l.DST (q|k|v into attn.c_attn, k|v into
 * xattn.c_kv). */
static int bart_fused(const bert_ckpt *b, const char *stack, const char *pre, int l,
                      const char *attn, const char *const *proj, int n, const char *dst,
                      size_t C, tfm_err *err)
{
    char s[3][160], d[64];
    const char *src[3];
    for (int k = 0; k < n; k++) {
        snprintf(s[k], sizeof s[k], "%s.layers.%d.%s.%s", stack, l, attn, proj[k]);
        src[k] = s[k];
    }
    snprintf(d, sizeof d, "%sh.%d.%s", pre, l, dst);
    return hf_fused(b, d, src, n, C, C, err);
}

/* One stack: "encoder" into "enc.", "decoder" into "" (with the
 * cross-attention); its positions, embedding norm and layers. */
static int bart_stack(const bert_ckpt *b, const char *stack, const char *pre, int n_layer,
                      int cross, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = (size_t)g->n_embd, F = (size_t)tfm_model_config_ff(g), P = (size_t)g->block_size;
    static const char *const qkv[3] = {"q_proj", "k_proj", "v_proj"};
    char d[64], s[160];
    snprintf(s, sizeof s, "%s.embed_positions.weight", stack);
    const float *pos = bert_tensor(b, s, NULL, P + 2, C, err);
    if (!pos)
        return -1;
    snprintf(d, sizeof d, "%swpe.weight", pre);
    memcpy(bert_dst(b, d, 0), pos + 2 * C, P * C * sizeof(float)); /* rows 0, 1: unread */
    snprintf(d, sizeof d, "%sln_e", pre);
    snprintf(s, sizeof s, "%s.layernorm_embedding", stack);
    if (bert_norm(b, d, 0, s, C, err) < 0)
        return -1;
    for (int l = 0; l < n_layer; l++) {
        if (bart_fused(b, stack, pre, l, "self_attn", qkv, 3, "attn.c_attn", C, err) < 0 ||
            bart_part(b, stack, pre, l, "self_attn.out_proj", "attn.c_proj", C, C, err) < 0 ||
            bart_part(b, stack, pre, l, "self_attn_layer_norm", "ln_1", 0, C, err) < 0)
            return -1;
        if (cross &&
            (bart_part(b, stack, pre, l, "encoder_attn.q_proj", "xattn.c_q", C, C, err) < 0 ||
             bart_fused(b, stack, pre, l, "encoder_attn", qkv + 1, 2, "xattn.c_kv", C, err) < 0 ||
             bart_part(b, stack, pre, l, "encoder_attn.out_proj", "xattn.c_proj", C, C, err) < 0 ||
             bart_part(b, stack, pre, l, "encoder_attn_layer_norm", "ln_x", 0, C, err) < 0))
            return -1;
        if (bart_part(b, stack, pre, l, "fc1", "mlp.c_fc", F, C, err) < 0 ||
            bart_part(b, stack, pre, l, "fc2", "mlp.c_proj", C, F, err) < 0 ||
            bart_part(b, stack, pre, l, "final_layer_norm", "ln_2", 0, C, err) < 0)
            return -1;
    }
    /* a layer beyond config.json's count would be silently dropped, and a
     * final norm (mBART's) silently skipped */
    snprintf(s, sizeof s, "%s%s.layers.%d.self_attn.q_proj.weight", b->pre, stack, n_layer);
    if (tfm_safetensors_find(b->st, s))
        return tfm_err_set(err, "%s: the checkpoint has a layer %d (tensor '%s') but "
                                "config.json says %d", b->st->name, n_layer, s, n_layer);
    snprintf(s, sizeof s, "%s%s.layer_norm.weight", b->pre, stack);
    if (tfm_safetensors_find(b->st, s))
        return tfm_err_set(err, "%s: tensor '%s': a final norm (mBART's pre-LN layout) is "
                                "not BART's", b->st->name, s);
    return 0;
}

static int bart_weights(const bert_ckpt *b, tfm_err *err)
{
    const tfm_model_config *g = &b->m->cfg;
    size_t C = (size_t)g->n_embd, V = (size_t)g->vocab_size;
    char alt[64];
    /* save_pretrained keeps shared.weight of the tied three */
    snprintf(alt, sizeof alt, "%s.embed_tokens.weight",
             tfm_safetensors_find(b->st, "model.decoder.embed_tokens.weight") ||
                     tfm_safetensors_find(b->st, "decoder.embed_tokens.weight")
                 ? "decoder"
                 : "encoder");
    if (bert_copy(b, "wte.weight", 0, "shared.weight", alt, V, C, err) < 0 ||
        bart_stack(b, "encoder", "enc.", tfm_model_config_enc_layers(g), 0, err) < 0 ||
        bart_stack(b, "decoder", "", g->n_layer, 1, err) < 0)
        return -1;
    bert_ckpt top = *b;
    top.pre = ""; /* the head's tensors are outside "model." */
    if (!g->tie_embeddings &&
        bert_copy(&top, "lm_head.weight", 0, "lm_head.weight", NULL, V, C, err) < 0)
        return -1;
    /* [1, V] in the file */
    if (g->head_bias) {
        const float *fb = bert_tensor(&top, "final_logits_bias", NULL, 1, V, err);
        if (!fb)
            return -1;
        memcpy(bert_dst(b, "final_logits_bias", 0), fb, V * sizeof(float));
    }
    return 0;
}

/* ---- HuggingFace T5 and BART: loading -------------------------------- */

/* Whether a T5 file's head is its embedding, as transformers 5 ties it:
 * no lm_head.weight, or one equal to the embedding (torch's .bin files and
 * old save_pretrained kept both); tie_word_embeddings no longer decides. */
static int t5_head_tied(const tfm_safetensors *st)
{
    const tfm_st_tensor *h = tfm_safetensors_find(st, "lm_head.weight");
    if (!h)
        return 1;
    const tfm_st_tensor *e = tfm_safetensors_find(st, "shared.weight");
    if (!e)
        e = tfm_safetensors_find(st, "decoder.embed_tokens.weight");
    if (!e)
        e = tfm_safetensors_find(st, "encoder.embed_tokens.weight");
    return e && e->dtype == h->dtype && e->nbytes == h->nbytes && e->ndim == h->ndim &&
           !memcmp(e->shape, h->shape, sizeof e->shape[0] * (size_t)h->ndim) &&
           !memcmp(e->data, h->data, h->nbytes);
}

/* Builds *m (and the model section c) from an open T5 checkpoint (bart
 * NULL) or BART one (bart: its names' prefix); the tokenizer beside it
 * (tokenizer.json, spiece.model, vocab.json + merges.txt) when tok is not
 * NULL, and config.json's end-of-text id.  On failure nothing is held. */
static int t5_load(const tfm_safetensors *st, const char *bart, tfm_model_keys *c, tfm_model *m,
                   tfm_tokenizer **tok, int64_t *eos, tfm_err *err)
{
    char cfg_path[4200];
    path_beside(st->name, "config.json", cfg_path, sizeof cfg_path);
    tfm_model_config g;
    if ((bart ? bart_config(st->name, c, eos, err) : t5_config(st->name, c, eos, err)) < 0)
        return -1;
    /* BartModel's files have no head, and HF's head starts with a zero bias */
    if (bart)
        c->head_bias = tfm_safetensors_find(st, "final_logits_bias") != NULL;
    else
        c->tie_embeddings = t5_head_tied(st);
    /* T5EncoderModel (t5_config): its encoder stack alone, tfm's encoder
     * with T5's bidirectional positions (tfm-embed); no head */
    if (!bart && c->kind == TFM_KIND_ENCODER) {
        c->n_layer = c->n_enc_layer;
        c->n_enc_layer = 0;
        c->decoder_start = -1;
        c->forced_eos = -1;
        c->head_scale = 0;
        c->tie_embeddings = 1;
    }
    if (tfm_model_config_from_keys(c, NULL, &g, err) < 0 || tfm_model_init(m, &g, err) < 0)
        return tfm_err_prefix(err, "%s", cfg_path);
    bert_ckpt b = {st, bart ? bart : "", m, bart ? "BART" : "T5"};
    if ((bart ? bart_weights(&b, err) : t5_weights(&b, err)) < 0 ||
        (tok && tokenizer_beside(st->name, g.vocab_size, !bart, tok, err) < 0)) {
        tfm_model_free(m);
        return -1;
    }
    return 0;
}

/* tfm_model_load of a T5 or BART checkpoint: 1 when path is neither. */
static int t5_model_load(const char *path, tfm_model_keys *c, tfm_model *m, tfm_tokenizer **tok,
                         tfm_err *err)
{
    tfm_safetensors st;
    if (tfm_safetensors_open(&st, path, err) < 0)
        return -1;
    int rc = 1;
    int64_t eos;
    const char *bart = bart_prefix(&st);
    if (bart || t5_is(&st))
        rc = tfm_model_file_verify(&st, 0, err) < 0 || tfm_quant_widen(&st, NULL, err) < 0
                 ? -1
                 : t5_load(&st, bart, c, m, tok, &eos, err);
    tfm_safetensors_close(&st);
    return rc;
}

static int gpt2_model_load(const char *path, tfm_model_keys *c, tfm_model *m, tfm_tokenizer **tok,
                           tfm_err *err);
static int hf_unread_folder(const char *model_path, tfm_err *err);

int tfm_model_file_apply_config(const char *path, const tfm_schema *s, void *c, tfm_err *err)
{
    char file[4200];
    path = tfm_model_file_path(path, file, sizeof file);
    tfm_buf yaml = {0};
    int has = tfm_model_file_meta(path, "config", &yaml, err);
    if (has > 0) {
        char name[1100];
        snprintf(name, sizeof name, "%s:config", path);
        if (tfm_schema_apply_yaml(s, c, yaml.data, yaml.len, name, err) < 0)
            has = -1;
    }
    tfm_buf_free(&yaml);
    return has;
}

int tfm_model_load_keys(const char *path, tfm_model_file_keys *c, tfm_model *m,
                        tfm_tokenizer **tok, tfm_err *err)
{
    if (tok)
        *tok = NULL;
    tfm_model_file_keys_defaults(c);
    char file[4200];
    path = tfm_model_file_path(path, file, sizeof file);
    int hf = bert_model_load(path, &c->model, m, tok, err);
    if (hf == 0) /* a BERT checkpoint with a task head is fine-tuned for it */
        c->task = c->model.tags          ? TFM_CONFIG_TASK_TAG
                  : c->model.span        ? TFM_CONFIG_TASK_SPAN
                  : c->model.classes && !c->model.nsp ? TFM_CONFIG_TASK_CLASSIFY
                                         : c->task;
    if (hf <= 0)
        return hf;
    hf = t5_model_load(path, &c->model, m, tok, err);
    if (hf <= 0)
        return hf;
    hf = gpt2_model_load(path, &c->model, m, tok, err);
    if (hf <= 0)
        return hf;
    int has = tfm_model_file_apply_config(path, tfm_model_file_keys_schema(), c, err);
    if (has == 0 && hf_unread_folder(path, err) == 0)
        tfm_err_set(err, "%s: no 'config' in __metadata__", path);
    if (has <= 0)
        return -1;
    c->stored = 1;
    tfm_model_config g;
    if (tfm_model_config_from_keys(&c->model, &c->lora, &g, err) < 0)
        return tfm_err_prefix(err, "%s", path);
    tfm_safetensors st;
    if (tfm_safetensors_open(&st, path, err) < 0)
        return -1;
    int rc = -1;
    if (tfm_model_init(m, &g, err) < 0) {
        tfm_err_prefix(err, "%s", path);
        goto out;
    }
    float *arrays[] = {m->params};
    const char *prefixes[] = {""};
    if (tfm_model_file_verify(&st, 0, err) < 0 || tfm_quant_widen(&st, NULL, err) < 0 ||
        tfm_model_file_read(&st, m->table, m->n_table, arrays, prefixes, 1, err) < 0)
        goto fail;
    size_t tok_len = 0;
    const char *tok_json = tfm_safetensors_meta(&st, "tokenizer", &tok_len);
    if (tok && tok_json) {
        char name[1100];
        snprintf(name, sizeof name, "%s:tokenizer", path);
        if (tfm_tokenizer_from_json(tok, tok_json, tok_len, name, err) < 0)
            goto fail;
        uint32_t tv = tfm_tokenizer_vocab_size(*tok);
        if (tv > (uint32_t)g.vocab_size) {
            tfm_err_set(err, "%s: the tokenizer has %u tokens but the model only %d", path, tv,
                        g.vocab_size);
            tfm_tokenizer_free(*tok);
            *tok = NULL;
            goto fail;
        }
    }
    rc = 0;
    goto out;
fail:
    tfm_model_free(m);
out:
    tfm_safetensors_close(&st);
    return rc;
}

static const tfm_st_tensor *find(const tfm_safetensors *st, const char *name);

int tfm_model_folder_tokenizer(const char *dir, tfm_tokenizer **tok, tfm_err *err)
{
    char file[4200];
    const char *pre;
    const char *path = tfm_model_file_path(dir, file, sizeof file);
    return tokenizer_beside(path, INT_MAX, tfm_model_file_hf_family(dir, &pre) == TFM_HF_T5,
                            tok, err);
}

int tfm_model_tokenizer_load(tfm_tokenizer **tok, const char *path, tfm_err *err)
{
    struct stat sb;
    *tok = NULL;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (tfm_model_folder_tokenizer(path, tok, err) < 0)
            return -1;
        if (*tok)
            return 0;
    }
    return tfm_tokenizer_load(tok, path, err); /* and its message for a folder without one */
}

tfm_hf_family tfm_model_file_hf_family(const char *path, const char **prefix)
{
    char file[4200];
    tfm_safetensors st;
    *prefix = "";
    if (!path || !*path ||
        tfm_safetensors_open(&st, tfm_model_file_path(path, file, sizeof file), NULL) < 0)
        return TFM_HF_NONE;
    tfm_hf_family f = TFM_HF_NONE;
    const char *p;
    if ((p = bert_prefix(&st))) {
        f = TFM_HF_BERT;
    } else if ((p = bart_prefix(&st))) {
        f = TFM_HF_BART;
    } else if (t5_is(&st)) {
        f = TFM_HF_T5;
        p = "";
    } else if (!tfm_format(&st) && find(&st, "wte.weight")) {
        f = TFM_HF_GPT2;
        p = tfm_safetensors_find(&st, "wte.weight") ? "" : "transformer.";
    }
    if (f)
        *prefix = p; /* string literals */
    tfm_safetensors_close(&st);
    return f;
}

int tfm_model_load_keys_adapter(const char *path, const char *adapter, tfm_model_file_keys *k,
                                tfm_model *m, tfm_tokenizer **tok, tfm_err *err)
{
    if (tfm_model_load_keys(path, k, m, tok, err) < 0)
        return -1;
    if (adapter && tfm_adapter_apply(m, adapter, path, err) < 0) {
        tfm_model_free(m);
        if (tok && *tok) {
            tfm_tokenizer_free(*tok);
            *tok = NULL;
        }
        return -1;
    }
    return 0;
}

/* ---- inference ----------------------------------------------------- */

static const tfm_st_tensor *find(const tfm_safetensors *st, const char *name)
{
    const tfm_st_tensor *t = tfm_safetensors_find(st, name);
    if (!t) {
        /* HuggingFace GPT-2 files may prefix every name */
        char buf[96];
        snprintf(buf, sizeof buf, "transformer.%s", name);
        t = tfm_safetensors_find(st, buf);
    }
    return t;
}

static const float *lookup(void *ctx, const char *name, size_t d0, size_t d1, tfm_err *err)
{
    const tfm_safetensors *st = ctx;
    const tfm_st_tensor *t = find(st, name);
    if (!t) {
        tfm_err_set(err, "%s: no tensor '%s' (not a GPT model file?)", st->name, name);
        return NULL;
    }
    if (t->dtype != TFM_ST_F32) {
        tfm_err_set(err, "%s: tensor '%s' is %s; only F32 weights are supported",
                    st->name, name, tfm_st_dtype_name(t->dtype));
        return NULL;
    }
    int want_ndim = d1 ? 2 : 1;
    if (t->ndim != want_ndim || t->shape[0] != d0 || (d1 && t->shape[1] != d1)) {
        char got[96] = "";
        size_t o = 0;
        for (int i = 0; i < t->ndim && o < sizeof got; i++)
            o += (size_t)snprintf(got + o, sizeof got - o, "%s%zu", i ? ", " : "", t->shape[i]);
        if (d1)
            tfm_err_set(err, "%s: tensor '%s' has shape [%s], the config implies [%zu, %zu]",
                        st->name, name, got, d0, d1);
        else
            tfm_err_set(err, "%s: tensor '%s' has shape [%s], the config implies [%zu]",
                        st->name, name, got, d0);
        return NULL;
    }
    return t->data;
}

/* What tfm reads of HuggingFace's folders, for the messages that refuse
 * another architecture. */
#define HF_READS                                                                        \
    "GPT-2 (GPT2LMHeadModel, GPT2Model), BERT (model_type bert), T5 and mT5 (t5, mt5) " \
    "and BART (bart)"

/* config.json beside a checkpoint that no loader of tfm's recognised
 * (model_path: its safetensors file): an error naming the architecture it
 * says, with what tfm reads.  0 (nothing set) when there is no
 * config.json, or it names a family tfm reads (the caller's message about
 * the tensors stands). */
static int hf_unread_folder(const char *model_path, tfm_err *err)
{
    char path[4200];
    path_beside(model_path, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return 0;
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = 0;
    const tfm_json *a = tfm_json_get(doc.root, "architectures");
    const tfm_json *t = tfm_json_get(doc.root, "model_type");
    const tfm_json *n = a && a->type == TFM_JSON_ARRAY && a->n ? a->items[0] : NULL;
    static const char *const families[] = {"gpt2", "bert", "t5", "mt5", "bart"};
    int known = 0;
    for (size_t i = 0; t && t->type == TFM_JSON_STRING && i < sizeof families / sizeof *families;
         i++)
        known |= !strcmp(t->str, families[i]);
    const tfm_json *at = n ? n : t;
    if (!known && at)
        rc = tfm_err_at(err, path, at->line, at->col, "architecture '%s' (model_type '%s') is "
                        "not one tfm reads: it reads the folders of " HF_READS,
                        n && n->type == TFM_JSON_STRING ? n->str : "?",
                        t && t->type == TFM_JSON_STRING ? t->str : "?");
    tfm_json_doc_free(&doc);
    return rc;
}

/* GPT2Config's integer KEY, which the tensors already tell (have): an
 * error naming config.json when it says otherwise. */
static int gpt2_agrees(const tfm_json_doc *doc, const char *key, int64_t have,
                       const char *tensor, tfm_err *err)
{
    const tfm_json *j = tfm_json_get(doc->root, key);
    int64_t v;
    if (!j || j->type == TFM_JSON_NULL)
        return 0;
    if (tfm_json_get_int(doc, j, key, 1, INT64_MAX, &v, err) < 0)
        return -1;
    if (v != have)
        return tfm_err_at(err, doc->name, j->line, j->col, "%s %lld but the checkpoint has "
                          "%lld (%s)", key, (long long)v, (long long)have, tensor);
    return 0;
}

/* HuggingFace's config.json beside a GPT-2 checkpoint (st, its shapes
 * already in g): every key as GPT2Config means it, checked against the
 * tensors (model/file.h).  Absent: 0, nothing changed. */
static int hf_config_json(const tfm_safetensors *st, tfm_model_config *g, tfm_err *err)
{
    char path[4200];
    path_beside(st->name, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return 0;
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = 0;
    int64_t v;
    char what[64];
    snprintf(what, sizeof what, "wte.weight [%d, %d]", g->vocab_size, g->n_embd);
    if (tfm_json_expect(&doc, doc.root, TFM_JSON_OBJECT, "the top level", err) < 0 ||
        hf_keys_check(&doc, hf_gpt2_keys, "GPT2Config", err) < 0 ||
        gpt2_agrees(&doc, "vocab_size", g->vocab_size, what, err) < 0 ||
        gpt2_agrees(&doc, "n_embd", g->n_embd, what, err) < 0 ||
        gpt2_agrees(&doc, "n_positions", g->block_size, "rows of wpe.weight", err) < 0 ||
        gpt2_agrees(&doc, "n_layer", g->n_layer, "blocks h.N", err) < 0)
        rc = -1;
    /* the LM and the bare model: other heads (sequence classification's
     * score, the double heads) would be dropped without a word */
    const tfm_json *j = tfm_json_get(doc.root, "architectures");
    for (size_t i = 0; rc == 0 && j && j->type == TFM_JSON_ARRAY && i < j->n; i++) {
        const tfm_json *n = j->items[i];
        if (!(n->type == TFM_JSON_STRING &&
              (!strcmp(n->str, "GPT2LMHeadModel") || !strcmp(n->str, "GPT2Model"))))
            rc = tfm_err_at(err, path, n->line, n->col, "architecture '%s' is not one tfm "
                            "reads: it reads the folders of " HF_READS,
                            n->str ? n->str : "");
    }
    j = tfm_json_get(doc.root, "model_type");
    if (rc == 0 && j && !(j->type == TFM_JSON_STRING && !strcmp(j->str, "gpt2")))
        rc = tfm_err_at(err, path, j->line, j->col, "model_type '%s' is not supported here "
                        "(tfm reads gpt2's layout)", j->str ? j->str : "");
    j = tfm_json_get(doc.root, "n_head");
    if (rc == 0 && j) {
        if (tfm_json_get_int(&doc, j, "n_head", 1, 1024, &v, err) < 0)
            rc = -1;
        else
            g->n_head = (int)v;
    }
    /* the feed-forward's width: null is 4 × n_embd */
    j = tfm_json_get(doc.root, "n_inner");
    if (rc == 0 && j && j->type != TFM_JSON_NULL) {
        if (tfm_json_get_int(&doc, j, "n_inner", 1, 1 << 20, &v, err) < 0)
            rc = -1;
        else
            g->d_ff = (int)v;
    } else if (rc == 0) {
        g->d_ff = 0;
    }
    const tfm_st_tensor *fc = find(st, "h.0.mlp.c_fc.weight");
    int ff = g->d_ff ? g->d_ff : 4 * g->n_embd;
    if (rc == 0 && fc && fc->ndim == 2 && fc->shape[1] != (size_t)ff) {
        if (j && j->type != TFM_JSON_NULL)
            rc = tfm_err_at(err, path, j->line, j->col, "n_inner %d but the checkpoint's "
                            "h.0.mlp.c_fc.weight is [%zu, %zu]", ff, fc->shape[0],
                            fc->shape[1]);
        else
            rc = tfm_err_set(err, "%s: n_inner %s means 4 x n_embd = %d, but the checkpoint's "
                             "h.0.mlp.c_fc.weight is [%zu, %zu]", path, j ? "null" : "absent",
                             ff, fc->shape[0], fc->shape[1]);
    }
    int scaled = 1, tied = 1;
    if (rc == 0 && (hf_bool(&doc, "scale_attn_weights", 1, &scaled, err) < 0 ||
                    hf_bool(&doc, "tie_word_embeddings", 1, &tied, err) < 0))
        rc = -1;
    if (rc == 0) {
        g->attn_unscaled = !scaled;
        g->tie_embeddings = tied;
    }
    j = tfm_json_get(doc.root, "tie_word_embeddings");
    if (rc == 0 && !tied && !find(st, "lm_head.weight"))
        rc = tfm_err_at(err, path, j->line, j->col, "tie_word_embeddings false but %s has no "
                        "lm_head.weight (the untied head)", st->name);
    j = tfm_json_get(doc.root, "activation_function");
    if (rc == 0 && j) {
        if (j->type == TFM_JSON_STRING && (!strcmp(j->str, "gelu_new") ||
                                           !strcmp(j->str, "gelu_pytorch_tanh")))
            g->act = TFM_ACT_GELU_TANH;
        else if (j->type == TFM_JSON_STRING && !strcmp(j->str, "gelu"))
            g->act = TFM_ACT_GELU_EXACT;
        else if (j->type == TFM_JSON_STRING && !strcmp(j->str, "relu"))
            g->act = TFM_ACT_RELU;
        else
            rc = tfm_err_set(err, "%s:%ld:%ld: activation_function '%s' is not supported "
                             "(tfm has gelu_new, gelu and relu)", path, j->line, j->col,
                             j->str ? j->str : "");
    }
    j = tfm_json_get(doc.root, "layer_norm_epsilon");
    if (rc == 0 && j) {
        if (j->type != TFM_JSON_NUMBER || !(j->num > 0 && j->num < 1))
            rc = tfm_err_set(err, "%s:%ld:%ld: layer_norm_epsilon must be a number in (0, 1)",
                             path, j->line, j->col);
        else
            g->ln_eps = (float)j->num;
    }
    /* GPT2Config's rates (0.1 each by default) and the token HF's generate
     * forces last */
    double resid, attn, embd;
    int64_t forced_eos;
    if (rc == 0 && (hf_prob(&doc, "resid_pdrop", 0.1, &resid, err) < 0 ||
                    hf_prob(&doc, "attn_pdrop", 0.1, &attn, err) < 0 ||
                    hf_prob(&doc, "embd_pdrop", 0.1, &embd, err) < 0 ||
                    t5_int(&doc, "forced_eos_token_id", -1, g->vocab_size - 1, -1, &forced_eos,
                           err) < 0))
        rc = -1;
    if (rc == 0) {
        g->dropout = (float)resid;
        g->attn_dropout = (float)attn;
        g->emb_dropout = (float)embd;
        g->forced_eos = (int)forced_eos;
    }
    tfm_json_doc_free(&doc);
    return rc;
}

/* A HuggingFace GPT-2 file carries no config: read the shape off the
 * tensors, and the rest from config.json beside the file (without one:
 * 64-wide heads, as every GPT-2 size has, and the feed-forward width of
 * the file's c_fc). */
static int config_from_shapes(const tfm_safetensors *st, tfm_model_config *g, tfm_err *err)
{
    const tfm_st_tensor *wte = find(st, "wte.weight"), *wpe = find(st, "wpe.weight");
    if ((!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2) && hf_unread_folder(st->name, err))
        return -1;
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2)
        return tfm_err_set(err, "%s: not a tfm model file (no \"format\": \"tfm-gpt\" "
                           "in __metadata__) nor a GPT-2 checkpoint", st->name);
    tfm_model_config_default(g);
    g->vocab_size = (int)wte->shape[0];
    g->n_embd = (int)wte->shape[1];
    g->block_size = (int)wpe->shape[0];
    g->n_head = g->n_embd % 64 == 0 ? g->n_embd / 64 : 1;
    int L = 0;
    for (;; L++) {
        char name[64];
        snprintf(name, sizeof name, "h.%d.ln_1.weight", L);
        if (!find(st, name))
            break;
    }
    g->n_layer = L;
    g->tie_embeddings = 1;
    const tfm_st_tensor *fc = find(st, "h.0.mlp.c_fc.weight");
    if (fc && fc->ndim == 2 && fc->shape[1] != 4 * (size_t)g->n_embd)
        g->d_ff = (int)fc->shape[1];
    if (hf_config_json(st, g, err) < 0)
        return -1;
    return tfm_model_config_check(g, err) < 0 ? tfm_err_prefix(err, "%s", st->name) : 0;
}

/* tfm's config (the model section) of a GPT-2 checkpoint's description. */
static void gpt2_config_into(const tfm_model_config *g, tfm_model_keys *c)
{
    c->kind = TFM_KIND_DECODER;
    c->positions = TFM_POS_LEARNED;
    c->norm = TFM_LN_PRE;
    c->activation = g->act;
    c->ln_eps = g->ln_eps;
    c->n_layer = g->n_layer;
    c->n_head = g->n_head;
    c->n_embd = g->n_embd;
    c->d_ff = g->d_ff;
    c->block_size = g->block_size;
    c->vocab_size = g->vocab_size;
    c->tie_embeddings = g->tie_embeddings;
    c->attn_scale = !g->attn_unscaled;
    c->bias = 1;
    /* config.json's, as float: printed back as the YAML a file saves */
    c->dropout = g->dropout;
    c->attn_dropout = g->attn_dropout;
    c->emb_dropout = g->emb_dropout;
    c->forced_eos = g->forced_eos;
}

/* tfm_model_load of a HuggingFace GPT-2 checkpoint (no tfm format, a wte
 * tensor): the description from the shapes and config.json, the weights
 * copied (GPT-2's names and [in, out] layout are tfm's), the tokenizer
 * beside it.  1 when path is not one. */
static int gpt2_model_load(const char *path, tfm_model_keys *c, tfm_model *m, tfm_tokenizer **tok,
                           tfm_err *err)
{
    tfm_safetensors st;
    if (tfm_safetensors_open(&st, path, err) < 0)
        return -1;
    int rc = 1;
    if (tfm_format(&st) || !find(&st, "wte.weight"))
        goto out;
    rc = -1;
    tfm_model_config g;
    if (tfm_model_file_verify(&st, 0, err) < 0 || tfm_quant_widen(&st, NULL, err) < 0 ||
        config_from_shapes(&st, &g, err) < 0)
        goto out;
    gpt2_config_into(&g, c);
    if (tfm_model_init(m, &g, err) < 0) {
        tfm_err_prefix(err, "%s", path);
        goto out;
    }
    for (int i = 0; i < m->n_table; i++) {
        const tfm_param *p = &m->table[i];
        const float *src = lookup(&st, p->name, p->shape[0], p->shape[1], err);
        if (!src) {
            tfm_model_free(m);
            goto out;
        }
        memcpy(m->params + p->offset, src, sizeof(float) * p->numel);
    }
    if (tok && tokenizer_beside(st.name, g.vocab_size, 0, tok, err) < 0) {
        tfm_model_free(m);
        goto out;
    }
    rc = 0;
out:
    tfm_safetensors_close(&st);
    return rc;
}

/* A BERT checkpoint's weights are copied into a tfm_model the tfm_lm
 * owns (tfm's layout differs from HF's), then bound from there. */
static int bert_lm_open(tfm_lm *lm, const tfm_safetensors *st, const char *pre, tfm_err *err)
{
    tfm_model_file_keys c;
    tfm_model_file_keys_defaults(&c);
    tfm_model *m = tfm_calloc(1, sizeof *m);
    if (bert_load(st, pre, &c.model, m, &lm->tok, err) < 0) {
        free(m);
        return -1;
    }
    lm->model = m;
    tfm_model_set_inference(m); /* no gradients */
    lm->cfg = m->cfg;
    if (lm->tok)
        lm->eos = tfm_tokenizer_specials(lm->tok)->eos;
    return tfm_weights_from_model(&lm->w, m, err);
}

/* A T5 or BART checkpoint (bart: its prefix), as a BERT one: copied,
 * then bound; the end-of-text id is config.json's. */
static int t5_lm_open(tfm_lm *lm, const tfm_safetensors *st, const char *bart, tfm_err *err)
{
    tfm_model_file_keys c;
    tfm_model_file_keys_defaults(&c);
    tfm_model *m = tfm_calloc(1, sizeof *m);
    if (t5_load(st, bart, &c.model, m, &lm->tok, &lm->eos, err) < 0) {
        free(m);
        return -1;
    }
    lm->model = m;
    tfm_model_set_inference(m);
    lm->cfg = m->cfg;
    return tfm_weights_from_model(&lm->w, m, err);
}

/* lookup, through the stored-only matrices' keys (model/quant.h) */
static const float *lookup_stored(void *ctx, const char *name, size_t d0, size_t d1,
                                  tfm_err *err)
{
    const tfm_lm *lm = ctx;
    const tfm_safetensors *st = lm->file;
    const tfm_st_tensor *t = find(st, name);
    const tfm_quant_view *v = t ? tfm_quant_find(lm->quant, t->name) : NULL;
    if (!v || !v->stored_only)
        return lookup((void *)st, name, d0, d1, err);
    if (v->shape[0] != d0 || v->shape[1] != d1) {
        tfm_err_set(err, "%s: tensor '%s' has shape [%zu, %zu] (as tfm lays it out), the "
                    "config implies [%zu, %zu]", st->name, name, v->shape[0], v->shape[1],
                    d0, d1);
        return NULL;
    }
    return v->m.f32;
}

/* The token a GPT-2 folder's generation stops at, as transformers'
 * generate takes it: eos_token_id of generation_config.json, else of
 * config.json (else *eos stays the tokenizer's).  An id outside the
 * vocabulary (GPT2Config's default 50256 in a smaller model) is one
 * generate never produces: nothing changes.  Several ids: refused, tfm
 * stops at one. */
static int gpt2_eos(const char *model_path, int V, int64_t *eos, tfm_err *err)
{
    static const char *const files[] = {"generation_config.json", "config.json"};
    for (int f = 0; f < 2; f++) {
        char path[4200];
        path_beside(model_path, files[f], path, sizeof path);
        if (access(path, F_OK) != 0)
            continue;
        tfm_json_doc doc;
        if (tfm_json_parse_file(&doc, path, 0, err) < 0)
            return -1;
        const tfm_json *j = tfm_json_get(doc.root, "eos_token_id");
        if (j && j->type == TFM_JSON_ARRAY && j->n == 1)
            j = j->items[0];
        int rc = 0, found = 0;
        if (j && j->type == TFM_JSON_ARRAY && j->n > 1)
            rc = tfm_err_at(err, path, j->line, j->col, "eos_token_id lists %zu tokens: "
                            "expected one (tfm's generation stops at one end-of-text token)",
                            j->n);
        else if (j && j->type == TFM_JSON_NUMBER && j->num == (double)(int64_t)j->num) {
            found = 1;
            if (j->num >= 0 && j->num < V)
                *eos = (int64_t)j->num;
        } else if (j && j->type != TFM_JSON_NULL && !(j->type == TFM_JSON_ARRAY && !j->n))
            rc = tfm_err_at(err, path, j->line, j->col, "eos_token_id must be a token id");
        tfm_json_doc_free(&doc);
        if (rc < 0 || found)
            return rc;
    }
    return 0;
}

int tfm_lm_open(tfm_lm *lm, const char *path, tfm_err *err)
{
    return tfm_lm_open_flags(lm, path, NULL, 0, err);
}

static int lm_open(tfm_lm *lm, const char *path, unsigned flags, tfm_err *err)
{
    memset(lm, 0, sizeof *lm);
    lm->eos = -1;
    char file[4200];
    path = tfm_model_file_path(path, file, sizeof file);
    tfm_safetensors *st = tfm_calloc(1, sizeof *st);
    if (tfm_safetensors_open(st, path, err) < 0) {
        free(st);
        return -1;
    }
    lm->file = st;
    lm->file_bytes = st->map.size;
    /* a flipped byte in the weights would otherwise go unnoticed: the
     * check reads the file once, the cost of about one generated token */
    if (tfm_model_file_verify(st, 0, err) < 0)
        goto fail;
    /* bfloat16, half precision and 8-bit tensors read as float32 (once the
     * kind of model is known: a decoder opened TFM_LM_STORED keeps the
     * matrices its decode steps read stored only); the stored matrices
     * are kept for the decode steps */
    lm->quant = tfm_calloc(1, sizeof(tfm_quant_views));
    const char *format = tfm_format(st);
    size_t cfg_len = 0;
    const char *cfg_text = tfm_safetensors_meta(st, "config", &cfg_len);
    if (format && strcmp(format, "tfm-gpt") != 0) {
        tfm_err_set(err, "%s: model format '%s' is not a GPT language model (tfm-gpt)",
                    path, format);
        goto fail;
    }
    const char *bert = bert_prefix(st), *bart = bart_prefix(st);
    if (bert || bart || t5_is(st)) {
        if (tfm_quant_widen(st, lm->quant, err) < 0)
            goto fail;
        if ((bert ? bert_lm_open(lm, st, bert, err) : t5_lm_open(lm, st, bart, err)) < 0)
            goto fail;
        /* the weights were copied: the mapped pages would only hold memory
         * (the mapping stays, for the file's description) */
        if (st->map.mapped)
            madvise((void *)st->map.data, st->map.size, MADV_DONTNEED);
        return 0;
    }
    if (format && cfg_text) {
        tfm_model_file_keys c;
        tfm_model_file_keys_defaults(&c);
        char name[1100];
        snprintf(name, sizeof name, "%s:config", path);
        if (tfm_schema_apply_yaml(tfm_model_file_keys_schema(), &c, cfg_text, cfg_len, name,
                                  err) < 0)
            goto fail;
        if (c.model.vocab_size == 0) {
            const tfm_st_tensor *wte = find(st, "wte.weight");
            if (wte && wte->ndim == 2)
                c.model.vocab_size = (int64_t)wte->shape[0];
        }
        if (tfm_model_config_from_keys(&c.model, &c.lora, &lm->cfg, err) < 0) {
            tfm_err_prefix(err, "%s", path);
            goto fail;
        }
        lm->prefix_lm = c.task == TFM_CONFIG_TASK_PREFIX_LM;
        lm->prefix_pairs = lm->prefix_lm && c.prefix_from == TFM_CONFIG_PREFIX_PAIRS;
    } else {
        /* shapes as stored: only BF16 and F16 tensors (of the same shape)
         * come without tfm's metadata */
        if (config_from_shapes(st, &lm->cfg, err) < 0 ||
            tokenizer_beside(path, lm->cfg.vocab_size, 0, &lm->tok, err) < 0)
            goto fail;
        if (lm->tok)
            lm->eos = tfm_tokenizer_specials(lm->tok)->eos;
        if (gpt2_eos(path, lm->cfg.vocab_size, &lm->eos, err) < 0)
            goto fail;
    }
    const int keep = (flags & TFM_LM_STORED) && lm->cfg.kind == TFM_KIND_DECODER;
    if (tfm_quant_widen_keep(st, lm->quant, keep, err) < 0)
        goto fail;
    if (tfm_weights_bind(&lm->w, &lm->cfg, keep ? lookup_stored : lookup,
                         keep ? (void *)lm : st, err) < 0)
        goto fail;
    tfm_quant_attach(lm->quant, &lm->w);
    size_t tok_len = 0;
    const char *tok_json = tfm_safetensors_meta(st, "tokenizer", &tok_len);
    if (tok_json && !lm->tok) {
        char name[1100];
        snprintf(name, sizeof name, "%s:tokenizer", path);
        if (tfm_tokenizer_from_json(&lm->tok, tok_json, tok_len, name, err) < 0)
            goto fail;
        if (tfm_tokenizer_vocab_size(lm->tok) > (uint32_t)lm->cfg.vocab_size) {
            tfm_err_set(err, "%s: the tokenizer has %u tokens but the model only %d",
                        path, tfm_tokenizer_vocab_size(lm->tok), lm->cfg.vocab_size);
            goto fail;
        }
        lm->eos = tfm_tokenizer_specials(lm->tok)->eos;
    }
    return 0;
fail:
    tfm_lm_close(lm);
    return -1;
}

/* The adapter's tensors first, then the file's (tfm_weights_bind's lookup). */
typedef struct adapted_file {
    const tfm_safetensors *st;
    const tfm_adapter *ad;
} adapted_file;

static const float *lookup_adapted(void *ctx, const char *name, size_t d0, size_t d1,
                                   tfm_err *err)
{
    const adapted_file *a = ctx;
    const float *w = lookup((void *)a->st, name, d0, d1, err);
    const float *t = w ? tfm_adapter_find(a->ad, name) : NULL;
    return t ? t : w;
}

/* tfm_adapter_load's view of a mapped file: F32 tensors by tfm's names. */
static const float *file_base(void *ctx, const char *name, size_t shape[2])
{
    const tfm_st_tensor *t = find(ctx, name);
    if (!t || t->dtype != TFM_ST_F32 || t->ndim > 2)
        return NULL;
    shape[0] = t->shape[0];
    shape[1] = t->ndim == 2 ? t->shape[1] : 0;
    return t->data;
}

int tfm_lm_open_adapter(tfm_lm *lm, const char *path, const char *adapter, tfm_err *err)
{
    return tfm_lm_open_flags(lm, path, adapter, 0, err);
}

int tfm_lm_open_flags(tfm_lm *lm, const char *path, const char *adapter, unsigned flags,
                      tfm_err *err)
{
    /* an adapter adds to float32 base weights */
    if (lm_open(lm, path, adapter ? flags & ~TFM_LM_STORED : flags, err) < 0)
        return -1;
    if (!adapter)
        return 0;
    if (lm->model) { /* a copied checkpoint: merged in place, bound where it was */
        if (tfm_adapter_apply(lm->model, adapter, path, err) < 0)
            goto fail;
        return 0;
    }
    tfm_adapter *ad = tfm_calloc(1, sizeof *ad);
    lm->adapter = ad;
    if (tfm_adapter_load(ad, adapter, path, file_base, lm->file, err) < 0)
        goto fail;
    adapted_file a = {lm->file, ad};
    tfm_weights_free(&lm->w);
    if (tfm_weights_bind(&lm->w, &lm->cfg, lookup_adapted, &a, err) < 0)
        goto fail;
    tfm_quant_attach(lm->quant, &lm->w);
    return 0;
fail:
    tfm_lm_close(lm);
    return -1;
}

void tfm_lm_close(tfm_lm *lm)
{
    if (lm->adapter) {
        tfm_adapter_free(lm->adapter);
        free(lm->adapter);
    }
    if (lm->tok)
        tfm_tokenizer_free(lm->tok);
    tfm_weights_free(&lm->w);
    if (lm->model) {
        tfm_model_free(lm->model);
        free(lm->model);
    }
    if (lm->file) {
        tfm_safetensors_close(lm->file);
        free(lm->file);
    }
    if (lm->quant) {
        tfm_quant_views_free(lm->quant);
        free(lm->quant);
    }
    memset(lm, 0, sizeof *lm);
    lm->eos = -1;
}

/* ---- conversion ------------------------------------------------------ */

int tfm_model_resave(const char *meta_from, const char *config_yaml, const tfm_model *m,
                     const tfm_tokenizer *tok, const char *out, tfm_weight_dtype dt,
                     tfm_err *err)
{
    tfm_buf tj = {0}, task = {0}, src = {0}, step = {0};
    if (tok)
        tfm_tokenizer_to_json(tok, &tj);
    int rc = -1, has_task, has_src, has_step;
    if ((has_task = tfm_model_file_meta(meta_from, "task", &task, err)) < 0 ||
        (has_src = tfm_model_file_meta(meta_from, "source_tokenizer", &src, err)) < 0 ||
        (has_step = tfm_model_file_meta(meta_from, "step", &step, err)) < 0)
        goto out;
    rc = tfm_model_save_dtype(out, m, config_yaml, tok ? tj.data : NULL, tj.len,
                              has_src ? src.data : NULL, src.len,
                              has_task ? tfm_buf_cstr(&task) : NULL,
                              has_step ? strtoll(tfm_buf_cstr(&step), NULL, 10) : 0, dt, err);
    if (rc == -2) {
        tfm_err_prefix(err, "%s", meta_from);
        rc = -1;
    }
out:
    tfm_buf_free(&tj);
    tfm_buf_free(&task);
    tfm_buf_free(&src);
    tfm_buf_free(&step);
    return rc;
}

