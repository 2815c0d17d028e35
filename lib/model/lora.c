#include "config.h"

#include "model/lora.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/file.h"
#include "model/file.h"
#include "nn/lora.h"

/* tfm's words and HuggingFace's (Llama, BART, BERT, GPT-2, T5) */
static const struct {
    const char *word;
    unsigned bits;
} target_words[] = {
    {"q", TFM_LORA_Q}, {"k", TFM_LORA_K}, {"v", TFM_LORA_V}, {"o", TFM_LORA_O},
    {"fc", TFM_LORA_FC}, {"proj", TFM_LORA_PROJ},
    {"q_proj", TFM_LORA_Q}, {"query", TFM_LORA_Q}, {"k_proj", TFM_LORA_K},
    {"key", TFM_LORA_K}, {"v_proj", TFM_LORA_V}, {"value", TFM_LORA_V},
    {"o_proj", TFM_LORA_O}, {"out_proj", TFM_LORA_O}, {"dense", TFM_LORA_O},
    {"c_attn", TFM_LORA_Q | TFM_LORA_K | TFM_LORA_V}, {"c_fc", TFM_LORA_FC},
    {"fc1", TFM_LORA_FC}, {"wi", TFM_LORA_FC}, {"wi_0", TFM_LORA_FC}, {"wi_1", TFM_LORA_FC},
    {"intermediate", TFM_LORA_FC}, {"c_proj", TFM_LORA_PROJ}, {"fc2", TFM_LORA_PROJ},
    {"wo", TFM_LORA_PROJ}, {"output", TFM_LORA_PROJ},
};

int tfm_lora_targets_parse(const char *list, unsigned *bits, tfm_err *err)
{
    *bits = 0;
    const char *p = list;
    while (*p) {
        while (*p == ',' || isspace((unsigned char)*p))
            p++;
        size_t n = 0;
        while (p[n] && p[n] != ',' && !isspace((unsigned char)p[n]))
            n++;
        if (!n)
            break;
        size_t i = 0, nw = sizeof target_words / sizeof *target_words;
        while (i < nw && !(strlen(target_words[i].word) == n &&
                           !strncmp(target_words[i].word, p, n)))
            i++;
        if (i == nw)
            return tfm_err_set(err, "train.lora.targets: '%.*s' names no projection (q, k, v, "
                                    "o, fc, proj, or HuggingFace's q_proj, query, c_attn, "
                                    "c_fc, wi_0, fc2, ...)", (int)n, p);
        *bits |= target_words[i].bits;
        p += n;
    }
    if (!*bits)
        return tfm_err_set(err, "train.lora.targets is empty: name the projections to adapt "
                                "(q, k, v, o, fc, proj)");
    return 0;
}

size_t tfm_model_trainable(const tfm_model *m, size_t *total)
{
    size_t n = 0, all = 0;
    for (int i = 0; i < m->n_table; i++) {
        all += m->table[i].numel;
        if (!m->table[i].frozen)
            n += m->table[i].numel;
    }
    if (total)
        *total = all;
    return n;
}

/* The module of an adapter tensor's name: "h.0.attn.q.lora_A.weight" gives
 * "attn.q" (after the block prefix), or NULL for another tensor. */
static int module_suffix(const char *name, char *out, size_t size)
{
    const char *end = strstr(name, ".lora_A.weight");
    if (!end)
        return 0;
    const char *h = strncmp(name, "enc.", 4) ? name : name + 4;
    if (strncmp(h, "h.", 2))
        return 0;
    const char *dot = strchr(h + 2, '.');
    if (!dot || dot > end)
        return 0;
    snprintf(out, size, "%.*s", (int)(end - dot - 1), dot + 1);
    return 1;
}

static int write_config(const char *path, const tfm_model *m, const char *base,
                        const char *task_type, tfm_err *err)
{
    const tfm_model_config *c = &m->cfg;
    tfm_buf b = {0}, mods = {0}, heads = {0};
    int n_mods = 0, n_heads = 0;
    for (int i = 0; i < m->n_table; i++) {
        const char *name = m->table[i].name;
        char mod[48];
        if (module_suffix(name, mod, sizeof mod)) {
            char quoted[64];
            snprintf(quoted, sizeof quoted, "\"%s\"", mod);
            if (!mods.data || !strstr(tfm_buf_cstr(&mods), quoted))
                tfm_buf_printf(&mods, "%s%s", n_mods++ ? ", " : "", quoted);
        } else if (!m->table[i].frozen && !strstr(name, ".lora_B.") &&
                   strstr(name, ".weight")) {
            tfm_buf_printf(&heads, "%s\"%.*s\"", n_heads++ ? ", " : "",
                           (int)(strstr(name, ".weight") - name), name);
        }
    }
    tfm_buf_puts(&b, "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": ");
    if (task_type)
        tfm_buf_printf(&b, "\"%s\"", task_type);
    else
        tfm_buf_puts(&b, "null");
    tfm_buf_puts(&b, ",\n  \"base_model_name_or_path\": ");
    if (base && *base)
        tfm_buf_put_json_string(&b, base, strlen(base));
    else
        tfm_buf_puts(&b, "null");
    tfm_buf_printf(&b, ",\n  \"r\": %d,\n  \"lora_alpha\": %.9g,\n  \"lora_dropout\": %.9g,\n"
                       "  \"target_modules\": [%s],\n  \"bias\": \"none\",\n"
                       "  \"fan_in_fan_out\": false,\n  \"inference_mode\": true,\n"
                       "  \"modules_to_save\": ",
                   c->lora_r, (double)c->lora_alpha, (double)c->lora_dropout,
                   tfm_buf_cstr(&mods));
    if (n_heads)
        tfm_buf_printf(&b, "[%s]", tfm_buf_cstr(&heads));
    else
        tfm_buf_puts(&b, "null");
    tfm_buf_puts(&b, "\n}\n");
    int rc = tfm_write_file(path, b.data, b.len, err);
    tfm_buf_free(&b);
    tfm_buf_free(&mods);
    tfm_buf_free(&heads);
    return rc;
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

int tfm_lora_save(const char *dir, const tfm_model *m, const char *base, const char *task_type,
                  tfm_err *err)
{
    /* the trained tensors: a table of them over m's params */
    tfm_param *t = tfm_malloc((size_t)m->n_table * sizeof *t);
    int n = 0;
    for (int i = 0; i < m->n_table; i++)
        if (!m->table[i].frozen)
            t[n++] = m->table[i];
    const float *arrays[] = {m->params};
    const char *prefixes[] = {"base_model.model."};
    const char *keys[] = {"format"}, *vals[] = {"pt"};
    size_t lens[] = {2};
    char *st = join(dir, "adapter_model.safetensors"), *js = join(dir, "adapter_config.json");
    int rc = tfm_model_file_write(st, t, n, arrays, prefixes, 1, keys, vals, lens, 1, err);
    if (rc == 0)
        rc = write_config(js, m, base, task_type, err);
    free(st);
    free(js);
    free(t);
    return rc;
}

int tfm_lora_module_weight(const char *module, const char **weight, int *part)
{
    static const struct {
        const char *module, *weight;
        int part;
    } map[] = {
        {"attn.q", "attn.c_attn.weight", 0},       {"attn.k", "attn.c_attn.weight", 1},
        {"attn.v", "attn.c_attn.weight", 2},       {"attn.c_proj", "attn.c_proj.weight", 0},
        {"xattn.c_q", "xattn.c_q.weight", 0},      {"xattn.k", "xattn.c_kv.weight", 0},
        {"xattn.v", "xattn.c_kv.weight", 1},       {"xattn.c_proj", "xattn.c_proj.weight", 0},
        {"mlp.c_fc", "mlp.c_fc.weight", 0},        {"mlp.wi_0", "mlp.wi_0.weight", 0},
        {"mlp.wi_1", "mlp.wi_1.weight", 0},        {"mlp.c_proj", "mlp.c_proj.weight", 0},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (!strcmp(map[i].module, module)) {
            *weight = map[i].weight;
            *part = map[i].part;
            return 1;
        }
    return 0;
}

/* Calls f on each adapter of m: its A, B and the adapted weight's row. */
typedef void (*adapter_fn)(tfm_model *m, const tfm_param *a, const tfm_param *b,
                           const tfm_param *w, int part, void *ctx);

static void each_adapter(tfm_model *m, adapter_fn f, void *ctx)
{
    for (int i = 0; i < m->n_table; i++) {
        const tfm_param *a = &m->table[i];
        char mod[48], name[64], wname[64];
        const char *weight;
        int part;
        if (!module_suffix(a->name, mod, sizeof mod) ||
            !tfm_lora_module_weight(mod, &weight, &part))
            continue;
        size_t pre = (size_t)(strstr(a->name, mod) - a->name);
        snprintf(name, sizeof name, "%.*s%s.lora_B.weight", (int)pre, a->name, mod);
        snprintf(wname, sizeof wname, "%.*s%s", (int)pre, a->name, weight);
        const tfm_param *b = tfm_model_param(m, name), *w = tfm_model_param(m, wname);
        TFM_ASSERT(b && w);
        f(m, a, b, w, part, ctx);
    }
}

typedef struct {
    float *saved;    /* NULL: only count */
    size_t n;
    size_t last;     /* the offset of the weight saved last, +1 (0: none) */
    int restore;
} merge_ctx;

/* The parts of one weight (c_attn's q, k, v) come one after another in
 * the table: each weight is saved (or restored) once, at the first. */
static void merge_one(tfm_model *m, const tfm_param *a, const tfm_param *b, const tfm_param *w,
                      int part, void *p)
{
    merge_ctx *c = p;
    int r = (int)a->shape[0], in = (int)a->shape[1], out = (int)b->shape[0];
    if (c->last != w->offset + 1) {
        c->last = w->offset + 1;
        if (c->saved && c->restore)
            memcpy(m->params + w->offset, c->saved + c->n, w->numel * sizeof(float));
        else if (c->saved)
            memcpy(c->saved + c->n, m->params + w->offset, w->numel * sizeof(float));
        c->n += w->numel;
    }
    if (c->saved && !c->restore)
        tfm_lora_merge(m->params + w->offset + (size_t)part * out, (int)w->shape[1], 0,
                       m->params + a->offset, m->params + b->offset, in, out, r,
                       m->cfg.lora_alpha / (float)m->cfg.lora_r);
}

float *tfm_lora_merge_model(tfm_model *m)
{
    if (m->cfg.lora_r <= 0)
        return NULL;
    merge_ctx count = {0};
    each_adapter(m, merge_one, &count);
    merge_ctx c = {.saved = tfm_malloc(count.n * sizeof(float) + 1)};
    each_adapter(m, merge_one, &c);
    return c.saved;
}

void tfm_lora_unmerge_model(tfm_model *m, float *saved)
{
    if (!saved)
        return;
    merge_ctx c = {.saved = saved, .restore = 1};
    each_adapter(m, merge_one, &c);
    free(saved);
}
