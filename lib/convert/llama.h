/* The Llama family's description (convert/llama.c), shared by the
 * HuggingFace folders and GGUF's llama files (convert/gguf.c). */
#ifndef TFM_CONVERT_LLAMA_H
#define TFM_CONVERT_LLAMA_H

#include <stdint.h>

#include "convert/convert.h"

typedef struct tfm_llama_dims {
    int64_t V, C, F, L, NH, NKV, HS, P; /* vocabulary, width, feed-forward, layers,
                                           heads, key/value heads, head size,
                                           positions */
    int64_t window, forced_eos;         /* 0, -1: none */
    double eps, base, attn_dropout;     /* RMSNorm's epsilon, RoPE's base */
    int tied, bias;
} tfm_llama_dims;

/* tfm's model section of a Llama-family decoder: pre-norm RMSNorm blocks,
 * RoPE, SwiGLU, grouped-query attention. */
void tfm_llama_config_into(const tfm_llama_dims *d, tfm_model_keys *c);

#endif
