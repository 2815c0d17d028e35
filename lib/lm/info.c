#include "lm/info.h"

#include <stdlib.h>
#include <string.h>

#include "convert/convert.h"
#include "lm/lm.h"
#include "io/safetensors.h"

const char *tfm_tok_kind_name(tfm_tok_kind k)
{
    switch (k) {
    case TFM_TOK_BPE: return "bpe";
    case TFM_TOK_WORDPIECE: return "wordpiece";
    case TFM_TOK_CHAR: return "char";
    case TFM_TOK_UNIGRAM: return "unigram";
    }
    return "?";
}

int tfm_model_info_read(const char *path, tfm_model_info *mi, tfm_err *err)
{
    memset(mi, 0, sizeof *mi);
    /* the loader checks the format and the checksum, and reads the config
     * and tokenizer as tfm-generate and tfm-eval do */
    tfm_lm lm;
    if (tfm_lm_open(&lm, path, err) < 0)
        return -1;
    mi->cfg = lm.cfg;
    mi->file_bytes = lm.file_bytes;
    mi->eos = lm.eos;
    mi->prefix_lm = lm.prefix_lm;
    mi->prefix_pairs = lm.prefix_pairs;
    mi->bos = -1;
    if (lm.tok) {
        const tfm_tok_specials *sp = tfm_tokenizer_specials(lm.tok);
        mi->bos = sp ? sp->bos : -1;
        mi->has_tokenizer = 1;
        mi->tok_kind = tfm_tokenizer_kind(lm.tok);
        mi->tok_vocab = tfm_tokenizer_vocab_size(lm.tok);
    }
    /* the file the loader opened (a folder's model.safetensors) */
    const tfm_safetensors *st = lm.file;
    const char *format = tfm_safetensors_meta(st, "format", NULL);
    /* HuggingFace's save_pretrained writes "format": "pt" */
    const char *gguf = tfm_safetensors_meta(st, "gguf", NULL);
    mi->gguf = gguf != NULL;
    mi->tfm_file = !gguf && format != NULL && strcmp(format, "pt") != 0;
    mi->checksum = tfm_safetensors_meta(st, "checksum", NULL) != NULL;
    const char *step = tfm_safetensors_meta(st, "step", NULL);
    char *end = NULL;
    mi->step = step ? strtoll(step, &end, 10) : -1;
    if (step && (end == step || *end || mi->step < 0))
        mi->step = -1;
    /* the stored dtypes (the loader widened its view to float32) */
    tfm_safetensors raw;
    int rc = tfm_lm_file_open(&raw, st->name, err);
    tfm_lm_close(&lm);
    if (rc < 0)
        return -1;
    const char *pre;
    const tfm_convert_family *fam = mi->tfm_file || gguf ? NULL : tfm_convert_detect(&raw, &pre);
    mi->family = fam ? fam->name : NULL;
    gguf = tfm_safetensors_meta(&raw, "gguf", NULL); /* lm's is gone */
    if (gguf) /* a literal: it outlives raw */
        mi->family = !strcmp(gguf, "llama") ? "llama" : "gpt2";
    int i8 = 0, bf16 = 0, f16 = 0;
    mi->n_tensors = raw.n_tensors;
    for (size_t i = 0; i < raw.n_tensors; i++) {
        const tfm_st_tensor *t = &raw.tensors[i];
        size_t n = strlen(t->name);
        if (n > 9 && !strcmp(t->name + n - 9, ".q8_scale"))
            continue;
        mi->n_params += t->count;
        i8 |= t->dtype == TFM_ST_I8;
        bf16 |= t->dtype == TFM_ST_BF16;
        f16 |= t->dtype == TFM_ST_F16;
    }
    mi->weights = i8 ? "q8_0" : bf16 ? "bf16" : f16 ? "f16" : "f32";
    tfm_safetensors_close(&raw);
    return 0;
}

int tfm_model_unchecked(const char *path)
{
    tfm_safetensors st;
    if (tfm_safetensors_open(&st, path, NULL) < 0)
        return 0;
    /* tfm's files say "format": "tfm-…"; HuggingFace's "pt" promises no
     * checksum, so its absence there is no news */
    const char *format = tfm_safetensors_meta(&st, "format", NULL);
    int r = format && strncmp(format, "tfm", 3) == 0 &&
            tfm_safetensors_meta(&st, "checksum", NULL) == NULL;
    tfm_safetensors_close(&st);
    return r;
}
