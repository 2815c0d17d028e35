#include "config.h"

#include "model/lora.h"

#include <ctype.h>
#include <math.h>
#include <regex.h>
#include <stdint.h>
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

/* adapter_config.json: targets, PEFT's target_modules (a JSON list or
 * string), r and alpha as written (the HF layout may widen r). */
static int write_config(const char *path, const tfm_model *m, const char *base,
                        const char *task_type, const char *targets, int r, double alpha,
                        int fan_in_fan_out, tfm_err *err)
{
    const tfm_model_config *c = &m->cfg;
    tfm_buf b = {0}, heads = {0};
    int n_heads = 0;
    for (int i = 0; i < m->n_table; i++) {
        const char *name = m->table[i].name;
        char mod[48];
        if (!module_suffix(name, mod, sizeof mod) && !m->table[i].frozen &&
            !strstr(name, ".lora_B.") && strstr(name, ".weight"))
            tfm_buf_printf(&heads, "%s\"%.*s\"", n_heads++ ? ", " : "",
                           (int)(strstr(name, ".weight") - name), name);
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
                       "  \"target_modules\": %s,\n  \"bias\": \"none\",\n"
                       "  \"fan_in_fan_out\": %s,\n  \"inference_mode\": true,\n"
                       "  \"modules_to_save\": ",
                   r, alpha, (double)c->lora_dropout, targets,
                   fan_in_fan_out ? "true" : "false");
    if (n_heads)
        tfm_buf_printf(&b, "[%s]", tfm_buf_cstr(&heads));
    else
        tfm_buf_puts(&b, "null");
    tfm_buf_puts(&b, "\n}\n");
    int rc = tfm_write_file(path, b.data, b.len, err);
    tfm_buf_free(&b);
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

/* tfm's module (after "h.{l}.", in the encoder when enc) as the
 * HuggingFace family's module path (pre: its model prefix) into out, and
 * *leaf the part after the layer number (PEFT's target_modules entry);
 * 0 when the family has no such module. */
static int hf_module(tfm_hf_family f, const char *pre, int enc, int l, const char *mod,
                     char *out, size_t n, const char **leaf)
{
    if (f == TFM_HF_ROBERTA) /* the same encoder */
        f = TFM_HF_BERT;
    static const struct {
        tfm_hf_family f;
        int where; /* 0 any, 1 encoder, 2 decoder */
        const char *tfm, *fmt, *leaf;
    } map[] = {
        {TFM_HF_BERT, 0, "attn.q", "encoder.layer.%d.", "attention.self.query"},
        {TFM_HF_BERT, 0, "attn.k", "encoder.layer.%d.", "attention.self.key"},
        {TFM_HF_BERT, 0, "attn.v", "encoder.layer.%d.", "attention.self.value"},
        {TFM_HF_BERT, 0, "attn.c_proj", "encoder.layer.%d.", "attention.output.dense"},
        {TFM_HF_BERT, 0, "mlp.c_fc", "encoder.layer.%d.", "intermediate.dense"},
        {TFM_HF_BERT, 0, "mlp.c_proj", "encoder.layer.%d.", "output.dense"},
        {TFM_HF_GPT2, 0, "attn.c_proj", "h.%d.", "attn.c_proj"},
        {TFM_HF_GPT2, 0, "mlp.c_fc", "h.%d.", "mlp.c_fc"},
        {TFM_HF_GPT2, 0, "mlp.c_proj", "h.%d.", "mlp.c_proj"},
        {TFM_HF_GPT2, 0, "attn.c_attn", "h.%d.", "attn.c_attn"}, /* q, k, v fused */
        {TFM_HF_T5, 1, "attn.q", "encoder.block.%d.layer.0.", "SelfAttention.q"},
        {TFM_HF_T5, 1, "attn.k", "encoder.block.%d.layer.0.", "SelfAttention.k"},
        {TFM_HF_T5, 1, "attn.v", "encoder.block.%d.layer.0.", "SelfAttention.v"},
        {TFM_HF_T5, 1, "attn.c_proj", "encoder.block.%d.layer.0.", "SelfAttention.o"},
        {TFM_HF_T5, 1, "mlp.c_fc", "encoder.block.%d.layer.1.", "DenseReluDense.wi"},
        {TFM_HF_T5, 1, "mlp.wi_0", "encoder.block.%d.layer.1.", "DenseReluDense.wi_0"},
        {TFM_HF_T5, 1, "mlp.wi_1", "encoder.block.%d.layer.1.", "DenseReluDense.wi_1"},
        {TFM_HF_T5, 1, "mlp.c_proj", "encoder.block.%d.layer.1.", "DenseReluDense.wo"},
        {TFM_HF_T5, 2, "attn.q", "decoder.block.%d.layer.0.", "SelfAttention.q"},
        {TFM_HF_T5, 2, "attn.k", "decoder.block.%d.layer.0.", "SelfAttention.k"},
        {TFM_HF_T5, 2, "attn.v", "decoder.block.%d.layer.0.", "SelfAttention.v"},
        {TFM_HF_T5, 2, "attn.c_proj", "decoder.block.%d.layer.0.", "SelfAttention.o"},
        {TFM_HF_T5, 2, "xattn.c_q", "decoder.block.%d.layer.1.", "EncDecAttention.q"},
        {TFM_HF_T5, 2, "xattn.k", "decoder.block.%d.layer.1.", "EncDecAttention.k"},
        {TFM_HF_T5, 2, "xattn.v", "decoder.block.%d.layer.1.", "EncDecAttention.v"},
        {TFM_HF_T5, 2, "xattn.c_proj", "decoder.block.%d.layer.1.", "EncDecAttention.o"},
        {TFM_HF_T5, 2, "mlp.c_fc", "decoder.block.%d.layer.2.", "DenseReluDense.wi"},
        {TFM_HF_T5, 2, "mlp.wi_0", "decoder.block.%d.layer.2.", "DenseReluDense.wi_0"},
        {TFM_HF_T5, 2, "mlp.wi_1", "decoder.block.%d.layer.2.", "DenseReluDense.wi_1"},
        {TFM_HF_T5, 2, "mlp.c_proj", "decoder.block.%d.layer.2.", "DenseReluDense.wo"},
        {TFM_HF_BART, 1, "attn.q", "encoder.layers.%d.", "self_attn.q_proj"},
        {TFM_HF_BART, 1, "attn.k", "encoder.layers.%d.", "self_attn.k_proj"},
        {TFM_HF_BART, 1, "attn.v", "encoder.layers.%d.", "self_attn.v_proj"},
        {TFM_HF_BART, 1, "attn.c_proj", "encoder.layers.%d.", "self_attn.out_proj"},
        {TFM_HF_BART, 1, "mlp.c_fc", "encoder.layers.%d.", "fc1"},
        {TFM_HF_BART, 1, "mlp.c_proj", "encoder.layers.%d.", "fc2"},
        {TFM_HF_BART, 2, "attn.q", "decoder.layers.%d.", "self_attn.q_proj"},
        {TFM_HF_BART, 2, "attn.k", "decoder.layers.%d.", "self_attn.k_proj"},
        {TFM_HF_BART, 2, "attn.v", "decoder.layers.%d.", "self_attn.v_proj"},
        {TFM_HF_BART, 2, "attn.c_proj", "decoder.layers.%d.", "self_attn.out_proj"},
        {TFM_HF_BART, 2, "xattn.c_q", "decoder.layers.%d.", "encoder_attn.q_proj"},
        {TFM_HF_BART, 2, "xattn.k", "decoder.layers.%d.", "encoder_attn.k_proj"},
        {TFM_HF_BART, 2, "xattn.v", "decoder.layers.%d.", "encoder_attn.v_proj"},
        {TFM_HF_BART, 2, "xattn.c_proj", "decoder.layers.%d.", "encoder_attn.out_proj"},
        {TFM_HF_BART, 2, "mlp.c_fc", "decoder.layers.%d.", "fc1"},
        {TFM_HF_BART, 2, "mlp.c_proj", "decoder.layers.%d.", "fc2"},
    };
    for (size_t i = 0; i < sizeof map / sizeof *map; i++)
        if (map[i].f == f && !strcmp(map[i].tfm, mod) &&
            (!map[i].where || map[i].where == (enc ? 1 : 2))) {
            char at[64];
            snprintf(at, sizeof at, map[i].fmt, l);
            snprintf(out, n, "%s%s%s", pre, at, map[i].leaf);
            *leaf = map[i].leaf;
            return 1;
        }
    return 0;
}

/* A regular expression's text for s (PEFT's re.fullmatch and POSIX ERE
 * both read it). */
static void re_quote(tfm_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '.')
            tfm_buf_putc(b, '\\');
        tfm_buf_putc(b, *s);
    }
}

/* One output tensor of the HF layout: its name and floats (owned). */
typedef struct hf_out {
    char name[160];
    size_t shape[2];
    float *data;
} hf_out;

static hf_out *hf_add(hf_out **o, int *n, const char *mod, const char *ab, size_t d0,
                      size_t d1)
{
    *o = tfm_realloc(*o, (size_t)(*n + 1) * sizeof **o);
    hf_out *x = &(*o)[(*n)++];
    snprintf(x->name, sizeof x->name, "base_model.model.%s.%s.weight", mod, ab);
    x->shape[0] = d0;
    x->shape[1] = d1;
    x->data = tfm_calloc(d0 * d1 + 1, sizeof(float));
    return x;
}

/* The adapters of m on a HuggingFace checkpoint, in its module names, as
 * PeftModel.from_pretrained loads them on the same base.  GPT-2's q, k and
 * v are parts of one Conv1D (c_attn): their adapters become one of rank
 * parts·r (A stacked, B block-diagonal: the same product), and, PEFT's r
 * being one for all modules, the others are padded with zero rows and
 * columns to that rank, lora_alpha scaled to keep alpha/r. */
static int save_hf(const char *dir, const tfm_model *m, tfm_hf_family f, const char *pre,
                   const char *base, const char *task_type, tfm_err *err)
{
    const int r = m->cfg.lora_r;
    int parts = 0;
    for (unsigned bit = TFM_LORA_Q; bit <= TFM_LORA_V; bit <<= 1)
        parts += f == TFM_HF_GPT2 && (m->cfg.lora_targets & bit);
    const int R = parts ? parts * r : r;
    hf_out *o = NULL;
    int n = 0, rc = -1;
    tfm_buf leaves = {0}, targets = {0};
    int n_leaves = 0;
    for (int i = 0; i < m->n_table; i++) {
        const tfm_param *a = &m->table[i];
        char mod[48];
        int enc = !strncmp(a->name, "enc.", 4), l = -1, k = -1;
        if (!module_suffix(a->name, mod, sizeof mod) ||
            sscanf(a->name + (enc ? 4 : 0), "h.%d.%n", &l, &k) != 1 || k < 0)
            continue;
        char bname[64];
        size_t plen = (size_t)(strstr(a->name, ".lora_A.") - a->name);
        snprintf(bname, sizeof bname, "%.*s.lora_B.weight", (int)plen, a->name);
        const tfm_param *b = tfm_model_param(m, bname);
        TFM_ASSERT(b);
        const float *A = m->params + a->offset, *B = m->params + b->offset;
        size_t in = a->shape[1], out = b->shape[0];
        int part = -1;
        if (f == TFM_HF_GPT2 && (!strcmp(mod, "attn.q") || !strcmp(mod, "attn.k") ||
                                 !strcmp(mod, "attn.v")))
            part = mod[5] == 'q' ? 0 : mod[5] == 'k' ? 1 : 2;
        char hf[160];
        const char *leaf;
        if (!hf_module(f, pre, enc, l, part >= 0 ? "attn.c_attn" : mod, hf, sizeof hf, &leaf)) {
            tfm_err_set(err, "%s: module '%s' has no HuggingFace name in its base's family",
                        dir, mod);
            goto out;
        }
        char quoted[80];
        snprintf(quoted, sizeof quoted, "\"%s\"", leaf);
        if (!leaves.data || !strstr(tfm_buf_cstr(&leaves), quoted)) {
            tfm_buf_printf(&leaves, "%s%s", n_leaves ? ", " : "", quoted);
            if (n_leaves++)
                tfm_buf_putc(&targets, '|');
            /* BERT's FFN output.dense, not attention.output.dense */
            if ((f == TFM_HF_BERT || f == TFM_HF_ROBERTA) && !strcmp(leaf, "output.dense"))
                tfm_buf_puts(&targets, "layer\\.[0-9]+\\.");
            re_quote(&targets, leaf);
        }
        hf_out *xa = NULL, *xb = NULL;
        if (part >= 0) { /* the layer's fused c_attn: made once, filled per part */
            char an[200];
            snprintf(an, sizeof an, "base_model.model.%s.lora_A.weight", hf);
            for (int j = 0; j < n; j++)
                if (!strcmp(o[j].name, an)) {
                    xa = &o[j];
                    xb = &o[j + 1];
                }
            const tfm_block blk = tfm_model_block(&m->cfg);
            if (!xa) {
                xa = hf_add(&o, &n, hf, "lora_A", (size_t)R, in);
                xb = hf_add(&o, &n, hf, "lora_B", (size_t)tfm_block_qkv_dim(&blk), (size_t)R);
                xa = xb - 1;
            }
            /* this part's rank block: the parts targeted, in q, k, v order */
            int slot = 0;
            for (int q = 0; q < part; q++)
                slot += (m->cfg.lora_targets & (TFM_LORA_Q << q)) != 0;
            memcpy(xa->data + (size_t)slot * r * in, A, (size_t)r * in * sizeof(float));
            for (size_t y = 0; y < out; y++)
                memcpy(xb->data + ((size_t)tfm_block_qkv_off(&blk, part) + y) * R +
                           (size_t)slot * r,
                       B + y * (size_t)r, (size_t)r * sizeof(float));
        } else {
            xa = hf_add(&o, &n, hf, "lora_A", (size_t)R, in);
            xb = hf_add(&o, &n, hf, "lora_B", out, (size_t)R);
            xa = xb - 1;
            memcpy(xa->data, A, (size_t)r * in * sizeof(float));
            for (size_t y = 0; y < out; y++)
                memcpy(xb->data + y * R, B + y * (size_t)r, (size_t)r * sizeof(float));
        }
    }
    /* the trained heads, as they are (modules_to_save) */
    for (int i = 0; i < m->n_table; i++) {
        const tfm_param *p = &m->table[i];
        char mod[48];
        if (p->frozen || strstr(p->name, ".lora_") || module_suffix(p->name, mod, sizeof mod))
            continue;
        o = tfm_realloc(o, (size_t)(n + 1) * sizeof *o);
        hf_out *x = &o[n++];
        snprintf(x->name, sizeof x->name, "base_model.model.%s", p->name);
        x->shape[0] = p->shape[0];
        x->shape[1] = p->ndim == 2 ? p->shape[1] : 0;
        x->data = tfm_malloc(p->numel * sizeof(float) + 1);
        memcpy(x->data, m->params + p->offset, p->numel * sizeof(float));
    }
    /* one array for the writer: the tensors one after another */
    size_t total = 0;
    for (int j = 0; j < n; j++)
        total += o[j].shape[0] * (o[j].shape[1] ? o[j].shape[1] : 1);
    float *all = tfm_malloc(total * sizeof(float) + 1);
    tfm_param *t = tfm_calloc((size_t)n + 1, sizeof *t);
    const char **names = tfm_calloc((size_t)n + 1, sizeof *names);
    size_t off = 0;
    for (int j = 0; j < n; j++) {
        size_t numel = o[j].shape[0] * (o[j].shape[1] ? o[j].shape[1] : 1);
        t[j] = (tfm_param){.ndim = o[j].shape[1] ? 2 : 1,
                           .shape = {o[j].shape[0], o[j].shape[1]}, .offset = off,
                           .numel = numel};
        names[j] = o[j].name;
        memcpy(all + off, o[j].data, numel * sizeof(float));
        off += numel;
    }
    const char *keys[] = {"format"}, *vals[] = {"pt"};
    size_t lens[] = {2};
    char *st = join(dir, "adapter_model.safetensors"), *js = join(dir, "adapter_config.json");
    rc = tfm_model_file_write_named(st, t, names, n, all, keys, vals, lens, 1, err);
    if (rc == 0) {
        tfm_buf tj = {0};
        if (f == TFM_HF_BERT || f == TFM_HF_ROBERTA) { /* a regular expression over the whole name */
            tfm_buf re = {0};
            tfm_buf_printf(&re, ".*\\.(%s)", tfm_buf_cstr(&targets));
            tfm_buf_put_json_string(&tj, re.data, re.len);
            tfm_buf_free(&re);
        } else {
            tfm_buf_printf(&tj, "[%s]", tfm_buf_cstr(&leaves));
        }
        rc = write_config(js, m, base, task_type, tfm_buf_cstr(&tj), R,
                          (double)m->cfg.lora_alpha * R / r, f == TFM_HF_GPT2, err);
        tfm_buf_free(&tj);
    }
    free(st);
    free(js);
    free(all);
    free(t);
    free(names);
out:
    for (int j = 0; j < n; j++)
        free(o[j].data);
    free(o);
    tfm_buf_free(&leaves);
    tfm_buf_free(&targets);
    return rc;
}

int tfm_lora_save(const char *dir, const tfm_model *m, const char *base, tfm_hf_family f,
                  const char *pre, const char *task_type, tfm_err *err)
{
    if (f) {
        /* PEFT's base for the task: HF's class with its model prefix */
        int cls = task_type && (!strcmp(task_type, "SEQ_CLS") || !strcmp(task_type, "TOKEN_CLS") ||
                                !strcmp(task_type, "QUESTION_ANS"));
        if (f == TFM_HF_BERT && cls)
            pre = "bert.";
        if (f == TFM_HF_ROBERTA && cls)
            pre = "roberta.";
        if (f == TFM_HF_GPT2 && task_type && !strcmp(task_type, "CAUSAL_LM"))
            pre = "transformer.";
        if (f == TFM_HF_BART && task_type && !strcmp(task_type, "SEQ_2_SEQ_LM"))
            pre = "model.";
        return save_hf(dir, m, f, pre, base, task_type, err);
    }
    /* the trained tensors: a table of them over m's params */
    tfm_param *t = tfm_malloc((size_t)m->n_table * sizeof *t);
    tfm_buf mods = {0};
    int n = 0, n_mods = 0;
    for (int i = 0; i < m->n_table; i++) {
        if (!m->table[i].frozen)
            t[n++] = m->table[i];
        char mod[48], quoted[64];
        if (module_suffix(m->table[i].name, mod, sizeof mod)) {
            snprintf(quoted, sizeof quoted, "\"%s\"", mod);
            if (!mods.data || !strstr(tfm_buf_cstr(&mods), quoted))
                tfm_buf_printf(&mods, "%s%s", n_mods++ ? ", " : "", quoted);
        }
    }
    const float *arrays[] = {m->params};
    const char *prefixes[] = {"base_model.model."};
    const char *keys[] = {"format"}, *vals[] = {"pt"};
    size_t lens[] = {2};
    char *st = join(dir, "adapter_model.safetensors"), *js = join(dir, "adapter_config.json");
    int rc = tfm_model_file_write(st, t, n, arrays, prefixes, 1, keys, vals, lens, 1, err);
    if (rc == 0) {
        tfm_buf tj = {0};
        tfm_buf_printf(&tj, "[%s]", mods.data ? tfm_buf_cstr(&mods) : "");
        rc = write_config(js, m, base, task_type, tfm_buf_cstr(&tj), m->cfg.lora_r,
                          (double)m->cfg.lora_alpha, 0, err);
        tfm_buf_free(&tj);
    }
    tfm_buf_free(&mods);
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
    /* the part's first column: c_attn's q | k | v, c_kv's k | v (nn/block.h) */
    const tfm_block blk = tfm_model_block(&m->cfg);
    size_t col = strstr(w->name, "c_attn.") ? (size_t)tfm_block_qkv_off(&blk, part)
                                            : (size_t)part * out;
    if (c->saved && !c->restore)
        tfm_lora_merge(m->params + w->offset + col, (int)w->shape[1], 0,
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

/* ---- --adapter DIR ------------------------------------------------- */

/* HuggingFace's module names as tfm's: BERT's encoder.layer.{i}.*, T5's
 * {encoder,decoder}.block.{i}.layer.{n}.* and BART's
 * {encoder,decoder}.layers.{i}.* become [enc.]h.{i}.*; GPT-2's and tfm's
 * own pass (their prefix "transformer.", "bert.", "roberta." or "model."
 * dropped). */
static void module_to_tfm(const char *mod, char *out, size_t size)
{
    static const struct {
        const char *hf, *tfm;
    } bert[] = {
        {"attention.self.query", "attn.q"}, {"attention.self.key", "attn.k"},
        {"attention.self.value", "attn.v"}, {"attention.output.dense", "attn.c_proj"},
        {"intermediate.dense", "mlp.c_fc"}, {"output.dense", "mlp.c_proj"},
    }, t5[] = {
        {"SelfAttention.q", "attn.q"},     {"SelfAttention.k", "attn.k"},
        {"SelfAttention.v", "attn.v"},     {"SelfAttention.o", "attn.c_proj"},
        {"EncDecAttention.q", "xattn.c_q"}, {"EncDecAttention.k", "xattn.k"},
        {"EncDecAttention.v", "xattn.v"},  {"EncDecAttention.o", "xattn.c_proj"},
        {"DenseReluDense.wi", "mlp.c_fc"}, {"DenseReluDense.wo", "mlp.c_proj"},
        {"DenseReluDense.wi_0", "mlp.wi_0"}, {"DenseReluDense.wi_1", "mlp.wi_1"},
    }, bart[] = {
        {"self_attn.q_proj", "attn.q"},          {"self_attn.k_proj", "attn.k"},
        {"self_attn.v_proj", "attn.v"},          {"self_attn.out_proj", "attn.c_proj"},
        {"encoder_attn.q_proj", "xattn.c_q"},    {"encoder_attn.k_proj", "xattn.k"},
        {"encoder_attn.v_proj", "xattn.v"},      {"encoder_attn.out_proj", "xattn.c_proj"},
        {"fc1", "mlp.c_fc"},                     {"fc2", "mlp.c_proj"},
    };
    if (!strncmp(mod, "transformer.", 12))
        mod += 12;
    else if (!strncmp(mod, "bert.", 5))
        mod += 5;
    else if (!strncmp(mod, "roberta.", 8))
        mod += 8;
    else if (!strncmp(mod, "model.", 6))
        mod += 6; /* BART's */
    snprintf(out, size, "%s", mod);
    int l, sub, k = -1;
    if ((sscanf(mod, "encoder.layers.%d.%n", &l, &k) == 1 ||
         sscanf(mod, "decoder.layers.%d.%n", &l, &k) == 1) && k > 0) {
        for (size_t i = 0; i < sizeof bart / sizeof *bart; i++)
            if (!strcmp(mod + k, bart[i].hf))
                snprintf(out, size, "%sh.%d.%s", mod[0] == 'e' ? "enc." : "", l, bart[i].tfm);
        return;
    }
    k = -1;
    if (sscanf(mod, "encoder.layer.%d.%n", &l, &k) == 1 && k > 0) {
        for (size_t i = 0; i < sizeof bert / sizeof *bert; i++)
            if (!strcmp(mod + k, bert[i].hf))
                snprintf(out, size, "h.%d.%s", l, bert[i].tfm);
        return;
    }
    const char *pre = !strncmp(mod, "encoder.", 8) ? "enc." : "";
    k = -1;
    if ((sscanf(mod, "encoder.block.%d.layer.%d.%n", &l, &sub, &k) == 2 ||
         sscanf(mod, "decoder.block.%d.layer.%d.%n", &l, &sub, &k) == 2) && k > 0)
        for (size_t i = 0; i < sizeof t5 / sizeof *t5; i++)
            if (!strcmp(mod + k, t5[i].hf))
                snprintf(out, size, "%sh.%d.%s", pre, l, t5[i].tfm);
}

/* The weight a tfm module adapts: its name, the column block (c_attn's
 * q, k, v: 0, 1, 2; c_kv's k, v: 0, 1) and how many blocks the fused
 * weight holds (c_attn 3, c_kv 2). */
static void module_target(const char *mod, char *weight, size_t size, int *part, int *nparts)
{
    int k = -1, l;
    const char *h = strncmp(mod, "enc.", 4) ? mod : mod + 4;
    const char *w;
    *part = 0;
    *nparts = 1;
    if (sscanf(h, "h.%d.%n", &l, &k) == 1 && k > 0 && tfm_lora_module_weight(h + k, &w, part)) {
        snprintf(weight, size, "%.*s%s", (int)(h + k - mod), mod, w);
        *nparts = strstr(w, "c_attn") ? 3 : strstr(w, "c_kv") ? 2 : 1;
        return;
    }
    snprintf(weight, size, "%s.weight", mod);
}

/* A tensor's floats (F32, or BF16 and F16 widened) into a new array; a
 * NaN or infinity is an error here, where the file and tensor are known,
 * not a broken model later. */
static float *tensor_f32(const tfm_safetensors *st, const tfm_st_tensor *t, tfm_err *err)
{
    if (t->dtype != TFM_ST_F32 && t->dtype != TFM_ST_BF16 && t->dtype != TFM_ST_F16) {
        tfm_err_set(err, "%s: tensor '%s' is %s; adapters are read as F32, BF16 or F16",
                    st->name, t->name, tfm_st_dtype_name(t->dtype));
        return NULL;
    }
    float *f = tfm_malloc(t->count * sizeof *f + 1);
    const uint16_t *h = t->data;
    for (size_t i = 0; i < t->count; i++)
        f[i] = t->dtype == TFM_ST_F32    ? ((const float *)t->data)[i]
               : t->dtype == TFM_ST_BF16 ? tfm_bf16_to_f32(h[i])
                                         : tfm_f16_to_f32(h[i]);
    for (size_t i = 0; i < t->count; i++)
        if (!isfinite(f[i])) {
            tfm_err_set(err, "%s: tensor '%s' holds %g (element %zu): the adapter is broken",
                        st->name, t->name, (double)f[i], i);
            free(f);
            return NULL;
        }
    return f;
}

static struct tfm_adapted *adapted(tfm_adapter *ad, const char *name, const float *base,
                                   size_t numel)
{
    for (int i = 0; i < ad->n; i++)
        if (!strcmp(ad->t[i].name, name))
            return &ad->t[i];
    ad->t = tfm_realloc(ad->t, (size_t)(ad->n + 1) * sizeof *ad->t);
    struct tfm_adapted *a = &ad->t[ad->n++];
    snprintf(a->name, sizeof a->name, "%s", name);
    a->numel = numel;
    a->data = tfm_malloc(numel * sizeof(float) + 1);
    memcpy(a->data, base, numel * sizeof(float));
    return a;
}

static void shape_str(char *out, size_t n, const size_t *shape, int ndim)
{
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(out + o, n - o, "%s%zu", i ? ", " : "", shape[i]);
}

typedef struct adapter_cfg {
    int r;
    float scale;
    const tfm_json *targets;   /* target_modules, or NULL */
} adapter_cfg;

/* A model path as an identity: "a/gpt2/", "a/gpt2/model.safetensors" and
 * the hub's "openai-community/gpt2" are all "gpt2". */
static void base_id(const char *path, char *out, size_t n)
{
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/')
        len--;
    static const char file[] = "/model.safetensors";
    if (len > sizeof file - 1 && !memcmp(path + len - (sizeof file - 1), file, sizeof file - 1))
        len -= sizeof file - 1;
    size_t b = len;
    while (b > 0 && path[b - 1] != '/')
        b--;
    snprintf(out, n, "%.*s", (int)(len - b), path + b);
}

/* The real path of a model (a folder: its model.safetensors), or "" */
static void base_real(const char *path, char *out, size_t n)
{
    char file[4200];
    out[0] = 0;
    path = tfm_model_file_path(path, file, sizeof file);
    char *r = realpath(path, NULL);
    if (r)
        snprintf(out, n, "%s", r);
    free(r);
}

/* An adapter trained on another model adds to weights it was not made
 * for: said, not refused (the base may have been copied or renamed). */
static void check_base(const char *cfg_path, const tfm_json *root, const char *base)
{
    const tfm_json *j = tfm_json_get(root, "base_model_name_or_path");
    if (!base || !j || j->type != TFM_JSON_STRING || !j->len)
        return;
    char a[4200], b[4200];
    base_id(j->str, a, sizeof a);
    base_id(base, b, sizeof b);
    if (!strcmp(a, b))
        return;
    base_real(j->str, a, sizeof a);
    base_real(base, b, sizeof b);
    if (a[0] && !strcmp(a, b))
        return;
    fprintf(stderr, "%s: warning: %s:%ld:%ld: the adapter was trained on '%s', not on %s\n",
            tfm_prog_name(), cfg_path, j->line, j->col, j->str, base);
}

/* adapter_config.json's keys beyond those read above.  PEFT writes every
 * LoraConfig field; each is honoured, harmless to the merged weights
 * (metadata, training and initialisation settings, and the selections of
 * modules and layers, which the file's tensors already reflect), or must be
 * at its default: tfm applies plain LoRA, W + scale·B·A, and a variant it
 * does not compute is refused rather than ignored, as is a key it does not
 * know (a newer PEFT's may change the adapter).  fan_in_fan_out changes
 * nothing here: PEFT decides it by the module (Conv1D's [in, out] weight,
 * nn.Linear's [out, in]), and lora_A [r, in], lora_B [out, r] are the same. */
static int check_keys(const tfm_json_doc *doc, const char *path, tfm_err *err)
{
    static const char *const known[] = {
        "r", "lora_alpha", "use_rslora", "peft_type", "bias", "target_modules",
        "base_model_name_or_path", "modules_to_save", "fan_in_fan_out", "task_type",
        "revision", "inference_mode", "peft_version", "auto_mapping", "lora_dropout",
        "init_lora_weights", "exclude_modules", "layers_to_transform", "layers_pattern",
        "loftq_config", "eva_config", "corda_config", "lora_ga_config", "megatron_config",
        "megatron_core", "runtime_config", "qalora_group_size", "ensure_weight_tying",
    };
    static const struct {
        const char *key, *what;
    } off[] = {
        {"use_dora", "DoRA adapters are not supported"},
        {"rank_pattern", "a rank or alpha per module is not supported (one r and lora_alpha "
                         "for all)"},
        {"alpha_pattern", "a rank or alpha per module is not supported (one r and lora_alpha "
                          "for all)"},
        {"lora_bias", "a bias term on lora_B is not supported"},
        {"trainable_token_indices", "trained token embeddings (PEFT's trainable tokens) are "
                                    "not supported"},
        {"layer_replication", "replicated layers are not supported"},
        {"target_parameters", "adapters of parameters (not of modules) are not supported"},
        {"alora_invocation_tokens", "activated LoRA (aLoRA) is not supported"},
        {"use_qalora", "QALoRA is not supported"},
        {"use_bdlora", "block-diagonal LoRA (BD-LoRA) is not supported"},
        {"arrow_config", "Arrow routing is not supported"},
        {"kasa_config", "KaSA adapters are not supported"},
        {"velora_config", "VeLoRA adapters are not supported"},
        {"monteclora_config", "MonteCLoRA adapters are not supported"},
    };
    const tfm_json *root = doc->root;
    for (size_t i = 0; i < root->n; i++) {
        const char *k = root->keys[i]->str;
        const tfm_json *v = root->items[i];
        size_t w = 0, nk = sizeof known / sizeof *known, no = sizeof off / sizeof *off;
        while (w < nk && strcmp(k, known[w]))
            w++;
        if (w < nk)
            continue;
        w = 0;
        while (w < no && strcmp(k, off[w].key))
            w++;
        if (w == no)
            return tfm_err_set(err, "%s:%ld:%ld: '%s' is not a LoraConfig key tfm reads: it "
                               "may change the adapter, so it is refused rather than ignored",
                               path, root->keys[i]->line, root->keys[i]->col, k);
        int def = v->type == TFM_JSON_NULL || (v->type == TFM_JSON_BOOL && !v->boolean) ||
                  ((v->type == TFM_JSON_OBJECT || v->type == TFM_JSON_ARRAY) && !v->n);
        if (!def)
            return tfm_err_set(err, "%s:%ld:%ld: %s: %s", path, v->line, v->col, k, off[w].what);
    }
    return 0;
}

static int read_adapter_config(const char *path, tfm_json_doc *doc, adapter_cfg *ac,
                               tfm_err *err)
{
    if (tfm_json_parse_file(doc, path, 0, err) < 0)
        return -1;
    const tfm_json *root = doc->root, *j;
    if (!root || root->type != TFM_JSON_OBJECT)
        return tfm_err_set(err, "%s: not a JSON object (PEFT's adapter_config.json)", path);
    int64_t r;
    if (!(j = tfm_json_get(root, "r")))
        return tfm_err_set(err, "%s: no \"r\" (the adapter's rank)", path);
    if (tfm_json_get_int(doc, j, "r", 1, 1 << 20, &r, err) < 0)
        return -1;
    if (!(j = tfm_json_get(root, "lora_alpha")))
        return tfm_err_set(err, "%s: no \"lora_alpha\" (the adapter's scale is lora_alpha/r)",
                           path);
    if (j->type != TFM_JSON_NUMBER || !isfinite(j->num))
        return tfm_err_set(err, "%s:%ld:%ld: lora_alpha must be a number", path, j->line,
                           j->col);
    ac->r = (int)r;
    double alpha = j->num;
    ac->scale = (float)(alpha / (double)r);
    if ((j = tfm_json_get(root, "use_rslora")) && j->type == TFM_JSON_BOOL && j->boolean)
        ac->scale = (float)(alpha / sqrt((double)r)); /* rank-stabilised LoRA */
    if ((j = tfm_json_get(root, "peft_type")) && j->type == TFM_JSON_STRING &&
        strcmp(j->str, "LORA"))
        return tfm_err_set(err, "%s:%ld:%ld: peft_type '%s': only LORA adapters are supported",
                           path, j->line, j->col, j->str);
    if ((j = tfm_json_get(root, "bias")) && j->type == TFM_JSON_STRING && strcmp(j->str, "none"))
        return tfm_err_set(err, "%s:%ld:%ld: bias '%s': only adapters without bias terms "
                           "(\"none\") are supported", path, j->line, j->col, j->str);
    if (check_keys(doc, path, err) < 0)
        return -1;
    ac->targets = tfm_json_get(root, "target_modules");
    if (ac->targets && ac->targets->type == TFM_JSON_NULL)
        ac->targets = NULL;
    if (ac->targets && ac->targets->type != TFM_JSON_STRING) {
        if (tfm_json_expect(doc, ac->targets, TFM_JSON_ARRAY, "target_modules", err) < 0)
            return -1;
        for (size_t i = 0; i < ac->targets->n; i++)
            if (tfm_json_expect(doc, ac->targets->items[i], TFM_JSON_STRING,
                                "a target_modules entry", err) < 0)
                return -1;
    }
    return 0;
}

/* PEFT's matching: a list entry is the module's name or its last dotted
 * parts; a string is a regular expression over the whole name
 * ("all-linear": every linear layer). */
static int target_matches(const tfm_json *t, const char *mod)
{
    size_t n = strlen(mod), k = t->len;
    return !strcmp(mod, t->str) || (n > k && mod[n - k - 1] == '.' && !strcmp(mod + n - k, t->str));
}

static int check_targets(const char *path, const adapter_cfg *ac, char **mods, int n_mods,
                         tfm_err *err)
{
    const tfm_json *t = ac->targets;
    if (!t)
        return 0;
    if (t->type == TFM_JSON_STRING) {
        if (!strcmp(t->str, "all-linear"))
            return 0;
        size_t n = t->len + 8;
        char *re = malloc(n);
        snprintf(re, n, "^(%s)$", t->str);
        regex_t rx;
        int bad = regcomp(&rx, re, REG_EXTENDED | REG_NOSUB);
        free(re);
        if (bad)
            return tfm_err_set(err, "%s:%ld:%ld: target_modules '%s' is not a regular "
                               "expression", path, t->line, t->col, t->str);
        int hit = 0;
        for (int i = 0; i < n_mods && !hit; i++)
            hit = regexec(&rx, mods[i], 0, NULL, 0) == 0;
        regfree(&rx);
        if (!hit)
            return tfm_err_set(err, "%s:%ld:%ld: target_modules '%s' matches no module of "
                               "adapter_model.safetensors", path, t->line, t->col, t->str);
        return 0;
    }
    for (size_t i = 0; i < t->n; i++) {
        int hit = 0;
        for (int m = 0; m < n_mods && !hit; m++)
            hit = target_matches(t->items[i], mods[m]);
        if (!hit)
            return tfm_err_set(err, "%s:%ld:%ld: target_modules entry '%s' names no module of "
                               "adapter_model.safetensors (%s%s)", path, t->items[i]->line,
                               t->items[i]->col, t->items[i]->str,
                               n_mods ? "it has " : "it has none", n_mods ? mods[0] : "");
    }
    return 0;
}

/* The HuggingFace family whose module names mod is in (its prefix
 * "base_model.model." gone), TFM_HF_NONE for tfm's own (h.{i}.*,
 * enc.h.{i}.*: any base) or a name of no family.  GPT-2's names are tfm's
 * too (h.{i}.attn.c_proj); under "transformer." they are GPT-2's. */
static tfm_hf_family module_family(const char *mod)
{
    if (!strncmp(mod, "transformer.h.", 14))
        return TFM_HF_GPT2;
    if (!strncmp(mod, "roberta.", 8))
        return TFM_HF_ROBERTA;
    if (!strncmp(mod, "bert.", 5) || !strncmp(mod, "encoder.layer.", 14))
        return TFM_HF_BERT;
    if (!strncmp(mod, "encoder.block.", 14) || !strncmp(mod, "decoder.block.", 14))
        return TFM_HF_T5;
    if (!strncmp(mod, "model.encoder.layers.", 21) || !strncmp(mod, "model.decoder.layers.", 21) ||
        !strncmp(mod, "encoder.layers.", 15) || !strncmp(mod, "decoder.layers.", 15))
        return TFM_HF_BART;
    return TFM_HF_NONE;
}

static const char *family_name(tfm_hf_family f)
{
    static const char *const names[] = {"tfm", "GPT-2", "BERT", "T5", "BART", "RoBERTa"};
    return names[f];
}

/* An adapter for another family's model (a BERT adapter's query on a
 * GPT-2 base of the same width would fit c_attn's q columns): refused by
 * its names when the base is a HuggingFace checkpoint of known family. A
 * tfm model file may have been converted from any family's checkpoint
 * (tfm-train --convert), so there the shapes alone decide. */
static int check_family(const tfm_safetensors *st, const char *mod, tfm_hf_family base_f,
                        const char *base_path, tfm_err *err)
{
    static const char *const examples[] = {
        "", "transformer.h.{i}.attn.c_attn, .attn.c_proj, .mlp.c_fc, .mlp.c_proj",
        "encoder.layer.{i}.attention.self.query, ..., intermediate.dense, output.dense",
        "encoder.block.{i}.layer.0.SelfAttention.q, ..., DenseReluDense.wi, .wo",
        "encoder.layers.{i}.self_attn.q_proj, ..., fc1, fc2",
        "encoder.layer.{i}.attention.self.query, ..., intermediate.dense, output.dense",
    };
    tfm_hf_family f = module_family(mod);
    /* a RoBERTa base has BERT's names (RobertaModel's without a prefix) */
    if (!base_f || !f || f == base_f || (base_f == TFM_HF_ROBERTA && f == TFM_HF_BERT &&
                                          strncmp(mod, "bert.", 5)))
        return 0;
    return tfm_err_set(err, "%s: module '%s' is a %s module, but the base model %s is a %s "
                       "checkpoint (modules %s): the adapter was made for another model",
                       st->name, mod, family_name(f), base_path, family_name(base_f),
                       examples[base_f]);
}

/* One module: A and B checked against the base weight, merged into its copy. */
static int merge_module(tfm_adapter *ad, const tfm_safetensors *st, const char *mod,
                        const tfm_st_tensor *A, const tfm_st_tensor *B, const adapter_cfg *ac,
                        tfm_lora_base_fn base, void *ctx, tfm_err *err)
{
    char tmod[96], weight[112], sa[64], sb[64], sw[64];
    int part, nparts;
    module_to_tfm(mod, tmod, sizeof tmod);
    module_target(tmod, weight, sizeof weight, &part, &nparts);
    size_t ws[2] = {0, 0};
    const float *w = strlen(weight) < 48 ? base(ctx, weight, ws) : NULL;
    char also[128] = "";
    if (strcmp(tmod, mod))
        snprintf(also, sizeof also, " (tfm's %s)", tmod);
    if (!w || !ws[1])
        return tfm_err_set(err, "%s: module '%s'%s names no weight of the base model", st->name,
                           mod, also);
    shape_str(sa, sizeof sa, A->shape, A->ndim);
    shape_str(sb, sizeof sb, B->shape, B->ndim);
    shape_str(sw, sizeof sw, ws, 2);
    if (A->ndim != 2 || B->ndim != 2 || A->shape[0] != (size_t)ac->r || B->shape[1] != (size_t)ac->r)
        return tfm_err_set(err, "%s: module '%s': lora_A [%s] and lora_B [%s] are not "
                           "[r, in] and [out, r] with adapter_config.json's r %d", st->name, mod,
                           sa, sb, ac->r);
    /* the part's columns [col, col + width): c_kv's k | v are halves; c_attn's
     * q is as wide as the heads c_proj reads ([D, C]), k and v share the rest
     * (narrower with grouped-query attention) */
    size_t col = 0, width = ws[1] / (size_t)nparts;
    char parts[96] = "";
    if (nparts == 3) {
        char proj[112];
        size_t ps[2] = {0, 0};
        snprintf(proj, sizeof proj, "%.*sc_proj.weight",
                 (int)(strstr(weight, "c_attn.weight") - weight), weight);
        size_t D = strlen(proj) < 48 && base(ctx, proj, ps) && ps[0] < ws[1] ? ps[0] : 0;
        size_t K = (ws[1] - D) / 2;
        width = part ? K : D;
        col = part ? D + (size_t)(part - 1) * K : 0;
        snprintf(parts, sizeof parts, ", q, k, v side by side: %zu, %zu and %zu columns", D, K,
                 K);
    } else if (nparts == 2) {
        col = (size_t)part * width;
        snprintf(parts, sizeof parts, ", k, v side by side");
    }
    if (A->shape[1] != ws[0] || B->shape[0] != width || !width)
        return tfm_err_set(err, "%s: module '%s'%s: lora_A [%s] and lora_B [%s] do not fit "
                           "the base model's %s [%s] ([in, out]%s)", st->name, mod, also, sa,
                           sb, weight, sw, parts);
    float *a = tensor_f32(st, A, err), *b = a ? tensor_f32(st, B, err) : NULL;
    if (!b) {
        free(a);
        return -1;
    }
    struct tfm_adapted *t = adapted(ad, weight, w, ws[0] * ws[1]);
    int out = (int)B->shape[0];
    tfm_lora_merge(t->data + col, (int)ws[1], 0, a, b, (int)ws[0], out,
                   ac->r, ac->scale);
    free(a);
    free(b);
    return 0;
}

/* A tensor that is no adapter's: a trained head replacing the base's. */
static int replace_tensor(tfm_adapter *ad, const tfm_safetensors *st, const tfm_st_tensor *t,
                          const char *name, tfm_lora_base_fn base, void *ctx, tfm_err *err)
{
    size_t ws[2] = {0, 0};
    const float *w = strlen(name) < 48 ? base(ctx, name, ws) : NULL;
    if (!w && !strncmp(name, "token_classifier.", 17) && (w = base(ctx, name + 6, ws)))
        name += 6; /* a tagger's adapter from before its HF name, classifier.* */
    if (!w)
        return tfm_err_set(err, "%s: tensor '%s' is no lora_A/lora_B and the base model has "
                           "no '%s' to replace (a head trained beside the adapter needs its run's merged "
                           "model.safetensors, which also holds the task)", st->name, t->name, name);
    char sa[64], sw[64];
    shape_str(sa, sizeof sa, t->shape, t->ndim);
    shape_str(sw, sizeof sw, ws, ws[1] ? 2 : 1);
    if (t->count != ws[0] * (ws[1] ? ws[1] : 1) || t->ndim != (ws[1] ? 2 : 1) ||
        t->shape[0] != ws[0])
        return tfm_err_set(err, "%s: tensor '%s' has shape [%s], the base model's '%s' [%s]",
                           st->name, t->name, sa, name, sw);
    float *f = tensor_f32(st, t, err);
    if (!f)
        return -1;
    struct tfm_adapted *a = adapted(ad, name, f, t->count);
    memcpy(a->data, f, t->count * sizeof *f);
    free(f);
    return 0;
}

int tfm_adapter_load(tfm_adapter *ad, const char *dir, const char *base_path,
                     tfm_hf_family base_f, tfm_lora_base_fn base, void *ctx,
                     tfm_err *err)
{
    memset(ad, 0, sizeof *ad);
    static const char pre[] = "base_model.model.";
    const size_t np = sizeof pre - 1;
    char *cfg_path = join(dir, "adapter_config.json");
    char *st_path = join(dir, "adapter_model.safetensors");
    tfm_json_doc doc = {0};
    tfm_safetensors st;
    int st_open = 0, rc = -1, n_mods = 0;
    char **mods = NULL;
    adapter_cfg ac = {0};
    if (read_adapter_config(cfg_path, &doc, &ac, err) < 0)
        goto out;
    if (tfm_safetensors_open(&st, st_path, err) < 0)
        goto out;
    st_open = 1;
    if (tfm_model_file_verify(&st, 0, err) < 0)
        goto out;
    if (!base_path)
        base_f = TFM_HF_NONE;
    mods = tfm_calloc(st.n_tensors + 1, sizeof *mods);
    for (size_t i = 0; i < st.n_tensors; i++) {
        const tfm_st_tensor *t = &st.tensors[i];
        if (strncmp(t->name, pre, np)) {
            tfm_err_set(err, "%s: tensor '%s' is not under PEFT's \"%s\"", st.name, t->name,
                        pre);
            goto out;
        }
        const char *name = t->name + np, *a = strstr(name, ".lora_A.weight"),
                   *b = strstr(name, ".lora_B.weight");
        char other[256];
        if (b && !b[14]) {
            snprintf(other, sizeof other, "%.*s.lora_A.weight", (int)(b - t->name), t->name);
            if (!tfm_safetensors_find(&st, other)) {
                tfm_err_set(err, "%s: tensor '%s' has no '%s' beside it", st.name, t->name,
                            other);
                goto out;
            }
            continue; /* merged with its A */
        }
        if (!a || a[14]) {
            if (strstr(name, "lora_")) {
                tfm_err_set(err, "%s: tensor '%s': only lora_A.weight and lora_B.weight of "
                            "linear layers are supported", st.name, t->name);
                goto out;
            }
            const char *h = strncmp(name, "transformer.", 12) ? name : name + 12;
            if (replace_tensor(ad, &st, t, h, base, ctx, err) < 0)
                goto out;
            continue;
        }
        char *mod = mods[n_mods++] = tfm_malloc((size_t)(a - name) + 1);
        memcpy(mod, name, (size_t)(a - name));
        mod[a - name] = 0;
        snprintf(other, sizeof other, "%.*s.lora_B.weight", (int)(a - t->name), t->name);
        const tfm_st_tensor *B = tfm_safetensors_find(&st, other);
        if (!B) {
            tfm_err_set(err, "%s: tensor '%s' has no '%s' beside it", st.name, t->name, other);
            goto out;
        }
        if (check_family(&st, mod, base_f, base_path, err) < 0 ||
            merge_module(ad, &st, mod, t, B, &ac, base, ctx, err) < 0)
            goto out;
    }
    if (!n_mods) {
        tfm_err_set(err, "%s: no lora_A/lora_B tensors: not a LoRA adapter", st.name);
        goto out;
    }
    if (check_targets(cfg_path, &ac, mods, n_mods, err) < 0)
        goto out;
    check_base(cfg_path, doc.root, base_path);
    rc = 0;
out:
    if (rc < 0)
        tfm_adapter_free(ad);
    for (int i = 0; i < n_mods; i++)
        free(mods[i]);
    free(mods);
    if (st_open)
        tfm_safetensors_close(&st);
    tfm_json_doc_free(&doc);
    free(cfg_path);
    free(st_path);
    return rc;
}

const float *tfm_adapter_find(const tfm_adapter *ad, const char *name)
{
    for (int i = 0; i < ad->n; i++)
        if (!strcmp(ad->t[i].name, name))
            return ad->t[i].data;
    return NULL;
}

void tfm_adapter_free(tfm_adapter *ad)
{
    for (int i = 0; i < ad->n; i++)
        free(ad->t[i].data);
    free(ad->t);
    memset(ad, 0, sizeof *ad);
}

static const float *model_base(void *ctx, const char *name, size_t shape[2])
{
    const tfm_model *m = ctx;
    const tfm_param *p = tfm_model_param(m, name);
    if (!p)
        return NULL;
    shape[0] = p->shape[0];
    shape[1] = p->ndim == 2 ? p->shape[1] : 0;
    return m->params + p->offset;
}

int tfm_adapter_apply(tfm_model *m, const char *dir, const char *base_path,
                      tfm_hf_family base_f, tfm_err *err)
{
    tfm_adapter ad;
    if (tfm_adapter_load(&ad, dir, base_path, base_f, model_base, m, err) < 0)
        return -1;
    for (int i = 0; i < ad.n; i++) {
        const tfm_param *p = tfm_model_param(m, ad.t[i].name);
        memcpy(m->params + p->offset, ad.t[i].data, ad.t[i].numel * sizeof(float));
    }
    tfm_adapter_free(&ad);
    return 0;
}
