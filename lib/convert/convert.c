/* The registry of HuggingFace families (convert/convert.h) and what they
 * share: detection, the load every copied family goes through, and the
 * message refusing a folder of a family tfm lacks. */
#include "config.h"

#include "convert/convert.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

extern const tfm_convert_family tfm_convert_gpt2, tfm_convert_bert, tfm_convert_roberta,
    tfm_convert_t5, tfm_convert_bart, tfm_convert_llama, tfm_convert_distilbert,
    tfm_convert_electra, tfm_convert_albert;

/* Detection order: BERT's names first (a file could hold another family's
 * too), GPT-2's last (its wte.weight is also tfm's own name). */
const tfm_convert_family *const tfm_convert_families[] = {
    &tfm_convert_bert, &tfm_convert_roberta, &tfm_convert_distilbert, &tfm_convert_electra,
    &tfm_convert_albert, &tfm_convert_bart, &tfm_convert_t5, &tfm_convert_llama,
    &tfm_convert_gpt2, NULL,
};

/* The families in the order messages list them */
static const tfm_convert_family *const listed[] = {
    &tfm_convert_gpt2, &tfm_convert_bert, &tfm_convert_roberta, &tfm_convert_distilbert,
    &tfm_convert_electra, &tfm_convert_albert, &tfm_convert_t5, &tfm_convert_bart,
    &tfm_convert_llama, NULL,
};

const tfm_convert_family *tfm_convert_detect(const tfm_safetensors *st, const char **pre)
{
    for (const tfm_convert_family *const *f = tfm_convert_families; *f; f++) {
        const char *p = (*f)->detect(st);
        if (p) {
            *pre = p;
            return *f;
        }
    }
    *pre = "";
    return NULL;
}

int tfm_convert_load(const tfm_convert_family *f, const tfm_safetensors *st, const char *pre,
                     tfm_model_keys *c, tfm_model *m, tfm_tokenizer **tok, int64_t *eos,
                     tfm_err *err)
{
    char cfg_path[4200];
    tfm_hf_json_beside(st->name, "config.json", cfg_path, sizeof cfg_path);
    tfm_model_config g;
    int64_t e = -1;
    if (f->config(st, pre, c, &g, &e, err) < 0)
        return -1;
    /* a description from config.json is its; one from the tensors, the file's */
    if (tfm_model_init(m, &g, err) < 0)
        return tfm_err_prefix(err, "%s", f->in_place ? st->name : cfg_path);
    tfm_hf_ckpt b = {st, pre, m, f->what};
    if (f->weights(&b, err) < 0 || (tok && tfm_convert_tokenizer(f, st, g.vocab_size, tok, err) < 0)) {
        tfm_model_free(m);
        return -1;
    }
    if (eos)
        *eos = e;
    return 0;
}

int tfm_convert_tokenizer(const tfm_convert_family *f, const tfm_safetensors *st,
                          int vocab_size, tfm_tokenizer **tok, tfm_err *err)
{
    if (tfm_hf_tokenizer_beside(st->name, vocab_size, f->t5_tokenizer, tok, err) < 0)
        return -1;
    if (*tok && f->tokenizer && f->tokenizer(st, *tok, err) < 0) {
        tfm_tokenizer_free(*tok);
        *tok = NULL;
        return -1;
    }
    return 0;
}

const char *tfm_convert_reads(char *buf, size_t n)
{
    size_t k = 0, len = 0;
    while (listed[k])
        k++;
    buf[0] = 0;
    for (size_t i = 0; i < k && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%s", i == 0 ? "" : i + 1 < k ? ", " : " and ",
                                listed[i]->reads);
    return buf;
}

int tfm_convert_unread(const char *model_path, tfm_err *err)
{
    char path[4200];
    tfm_hf_json_beside(model_path, "config.json", path, sizeof path);
    if (access(path, F_OK) != 0)
        return 0;
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, path, 0, err) < 0)
        return -1;
    int rc = 0;
    const tfm_json *a = tfm_json_get(doc.root, "architectures");
    const tfm_json *t = tfm_json_get(doc.root, "model_type");
    const tfm_json *n = a && a->type == TFM_JSON_ARRAY && a->n ? a->items[0] : NULL;
    int known = 0;
    for (const tfm_convert_family *const *f = tfm_convert_families;
         *f && t && t->type == TFM_JSON_STRING; f++)
        for (const char *const *mt = (*f)->model_types; *mt; mt++)
            known |= !strcmp(t->str, *mt);
    const tfm_json *at = n ? n : t;
    if (!known && at) {
        char reads[512];
        rc = tfm_err_at(err, path, at->line, at->col, "architecture '%s' (model_type '%s') is "
                        "not one tfm reads: it reads the folders of %s",
                        n && n->type == TFM_JSON_STRING ? n->str : "?",
                        t && t->type == TFM_JSON_STRING ? t->str : "?",
                        tfm_convert_reads(reads, sizeof reads));
    }
    tfm_json_doc_free(&doc);
    return rc;
}
