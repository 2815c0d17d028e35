/* Position schemes without parameters: the original Transformer's
 * sinusoids, and rotary embeddings (RoPE) applied to queries and keys.
 * (Learned positions are a table like the token embedding; ALiBi and T5
 * biases act on the attention scores: nn/attention.h.)
 *
 * Tables are computed in double and stored as float, so positions far
 * beyond a training context keep their accuracy. */
#ifndef TFM_NN_POSITION_H
#define TFM_NN_POSITION_H

#include <stdint.h>

/* pe[p, 2i] = sin(p / 10000^(2i/C)), pe[p, 2i+1] = cos(…) for p < n_pos
 * (C even). */
void tfm_sinusoidal_table(float *pe, int n_pos, int C);

/* The row of position p alone: pe[2i] = sin(p / 10000^(2i/C)), … */
void tfm_sinusoidal_row(float *pe, int p, int C);

/* RoPE's frequencies: base^(-2d/HS) for d < HS/2, rescaled for contexts
 * longer than the model was trained on as transformers' rope types do:
 *   linear: every frequency / factor (positions interpolated);
 *   llama3: wavelengths 2π/f above original_context / low_freq_factor
 *     divided by factor, below original_context / high_freq_factor kept,
 *     those between blended by (original_context / wavelength −
 *     low_freq_factor) / (high_freq_factor − low_freq_factor). */
typedef enum { TFM_ROPE_DEFAULT, TFM_ROPE_LINEAR, TFM_ROPE_LLAMA3 } tfm_rope_scaling;

typedef struct tfm_rope {
    float base;             /* 10000 */
    tfm_rope_scaling scaling;
    float factor;           /* linear, llama3: > 0 */
    float low_freq_factor;  /* llama3 */
    float high_freq_factor; /* llama3: > low_freq_factor */
    int original_context;   /* llama3: the context the base was trained on */
} tfm_rope;

double tfm_rope_freq(const tfm_rope *r, int d, int HS);
const char *tfm_rope_scaling_name(tfm_rope_scaling s); /* "default", "linear", "llama3" */

/* RoPE angles of positions first .. first + n_pos - 1 for heads of size HS
 * (even): cs[p, d] = cos θ and cs[n_pos·HS/2 + p·HS/2 + d] = sin θ,
 * θ = (first + p)·tfm_rope_freq(r, d, HS), d < HS/2.  cs holds n_pos·HS
 * floats. */
void tfm_rope_table(float *cs, int first, int n_pos, int HS, const tfm_rope *r);

/* Rotates n_heads heads of HS columns in each of N rows of x (row stride
 * ld) by the angles of position pos[n] - first (a row of the table above):
 * (x_d, x_{d+HS/2}) → (x_d cos θ − x_{d+HS/2} sin θ, x_d sin θ + x_{d+HS/2} cos θ).
 * inverse != 0 rotates by −θ: the backward pass of the rotation (its
 * transpose), applied to the gradient. */
void tfm_rope_apply(float *x, int ld, int N, const int32_t *pos, int first, int n_heads,
                    int HS, const float *cs, int n_pos, int inverse);

/* One row at position pos (the cached decode step's new query and key):
 * n_heads heads of HS columns of x rotated as above, the angles computed
 * into cs (HS floats, caller's scratch). */
void tfm_rope_row(float *x, int pos, int n_heads, int HS, const tfm_rope *r, float *cs);

#endif
