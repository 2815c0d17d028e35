/* GGUF files (llama.cpp's format, io/gguf.h) as tfm models.
 *
 * A GGUF file opens as a view in tfm's own file format (model/file.h,
 * model/quant.h): "format": "tfm-gpt", its "config" made from the GGUF
 * metadata by the HuggingFace families' mappers (convert/gpt2.h,
 * convert/llama.h), its tensors renamed to tfm's and laid out as tfm's
 * (llama.cpp's [out, in] matrices transposed, Llama's q|k|v fused and
 * their rows put back in HuggingFace's order -- convert_hf_to_gguf
 * permutes q and k for its rotation), and its tokenizer as a
 * tokenizer.json.  The stored types stay: F16 and BF16 matrices are
 * transposed as 16-bit values (tfm widens them as it does its own bf16
 * files, and decodes BF16 ones as stored), Q8_0 matrices become tfm's
 * q8_0 tensors, the same blocks (the values and the F16 scales apart), so
 * that decoding multiplies them as stored; a Q8_0 tensor tfm keeps in
 * float32 (position_embd, vectors) is dequantized.
 *
 * Architectures (general.architecture):
 *   gpt2: gpt2.context_length, .embedding_length, .block_count,
 *     .feed_forward_length, .attention.head_count,
 *     .attention.layer_norm_epsilon; token_embd, position_embd,
 *     blk.N.attn_norm, attn_qkv, attn_output, ffn_norm, ffn_up, ffn_down
 *     (weights and biases), output_norm, output (absent: tied).
 *   llama: llama.context_length, .embedding_length, .block_count,
 *     .feed_forward_length, .attention.head_count, .head_count_kv,
 *     .attention.layer_norm_rms_epsilon, .rope.freq_base,
 *     .rope.dimension_count (all of a head), .attention.key_length;
 *     token_embd, blk.N.attn_norm, attn_q, attn_k, attn_v, attn_output,
 *     ffn_norm, ffn_gate, ffn_up, ffn_down, output_norm, output (absent:
 *     tied).  Rope scaling and experts are refused.
 * Every tensor must be one of these, and every key of the architecture's
 * (plus ARCH.vocab_size, the rows of token_embd): another would be dropped
 * unread.
 * The tokenizer: tokenizer.ggml.model "gpt2" (tokens, merges, token_type:
 * control and user-defined tokens are added tokens) with
 * tokenizer.ggml.pre "gpt-2" or "default", GPT-2's byte-level BPE; any
 * other (llama's SentencePiece, other pre-tokenizers) is not read: the
 * model has no tokenizer (programs take --ids).  tokenizer.ggml.eos_token_id
 * is the end-of-text id (the view's "eos_token_id"). */
#ifndef TFM_CONVERT_GGUF_H
#define TFM_CONVERT_GGUF_H

#include "base/err.h"
#include "io/safetensors.h"

/* The view of GGUF file path in st (closed with tfm_safetensors_close).
 * Errors name the file and what was expected. */
int tfm_gguf_view_open(tfm_safetensors *st, const char *path, tfm_err *err);
/* The view's metadata alone, without tensors (the file checked as by
 * tfm_gguf_view_open): what a file's description needs, without copying
 * its weights. */
int tfm_gguf_view_meta(tfm_safetensors *st, const char *path, tfm_err *err);

#endif
