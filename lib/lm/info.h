/* What a model file is, for `tfm-eval info`: its kind, configuration,
 * parameter count, training step, tokenizer and checksum state, read
 * through the loaders the other programs use (tfm_lm_open and the
 * safetensors reader), so what it reports is what they see.
 *
 *     tfm_model_info mi;
 *     if (tfm_model_info_read("run/model.safetensors", &mi, &err) < 0) ...
 */
#ifndef TFM_LM_INFO_H
#define TFM_LM_INFO_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "model/lora.h"
#include "model/transformer.h"
#include "text/tokenizer.h"

typedef struct tfm_model_info {
    int tfm_file;           /* 1: written by tfm (metadata "format"); 0: a
                               HuggingFace GPT-2, BERT or T5 checkpoint
                               (cfg.kind decoder, encoder, encoder-decoder) */
    tfm_model_config cfg;     /* as the loader reads it */
    size_t n_params;        /* elements of every tensor in the file (but
                               8-bit matrices' scales) */
    const char *weights;    /* how the matrices are stored: "f32", "bf16",
                               "f16" or "q8_0" (model/quant.h) */
    const char *family;     /* a HuggingFace checkpoint's converter
                               (convert/convert.h: "gpt2", "llama", ...),
                               NULL for tfm's own files */
    int gguf;               /* 1: a GGUF file (convert/gguf.h) of architecture
                               family ("gpt2", "llama"); tfm_file 0 */
    size_t n_tensors;
    size_t file_bytes;
    int64_t step;           /* training steps behind it; -1 when not recorded */
    int has_tokenizer;
    tfm_tok_kind tok_kind;  /* when has_tokenizer */
    uint32_t tok_vocab;
    int64_t eos;            /* end-of-text id, -1 when none */
    int64_t bos;            /* the tokenizer's beginning-of-text id (what
                               tfm-eval puts first), -1 when none */
    int prefix_lm;          /* 1: trained as a prefix LM (train.task prefix-lm):
                               a prompt is its prefix, seen whole */
    int prefix_pairs;       /* a prefix LM trained on input<TAB>target pairs
                               (train.prefix_from pairs), else on random
                               splits of running text */
    int checksum;           /* 1: present and verified; 0: the file has none
                               (a mismatch is an error of tfm_model_info_read) */
} tfm_model_info;

int tfm_model_info_read(const char *path, tfm_model_info *mi, tfm_err *err);

/* 1 when path says it was written by tfm but carries no checksum, so its
 * integrity cannot be checked (a file from an old or foreign writer); 0
 * otherwise, also when it cannot be read (the loader reports that). */
int tfm_model_unchecked(const char *path);

const char *tfm_tok_kind_name(tfm_tok_kind k);

#endif
