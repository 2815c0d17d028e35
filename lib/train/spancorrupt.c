/* T5's span corruption and the T5 study's other noise (train/spancorrupt.h). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "train/spancorrupt.h"

void tfm_span_counts(size_t length, double density, double mean_span, size_t *noise,
                     size_t *spans)
{
    /* tf.math.round on float32, as random_spans_noise_mask computes them */
    float nf = rintf((float)length * (float)density);
    size_t n = nf < 1 ? 1 : (size_t)nf;
    if (n > length - 1)
        n = length - 1;
    float sf = rintf((float)n / (float)mean_span);
    size_t s = sf < 1 ? 1 : (size_t)sf;
    if (s > length - n)
        s = length - n;
    *noise = n;
    *spans = s;
}

void tfm_span_lengths(size_t length, double density, double mean_span, size_t *inputs,
                      size_t *targets)
{
    size_t noise, spans;
    tfm_span_counts(length, density, mean_span, &noise, &spans);
    *inputs = length - noise + spans + 1;
    *targets = noise + spans + 1;
}

size_t tfm_span_raw_length(size_t inputs_length, double density, double mean_span,
                           size_t *targets_length)
{
    size_t in, tg, len = 1;
    /* inputs grow with the raw length (one more token adds at most one
     * input), so the walk stops at the longest that fits */
    for (;;) {
        tfm_span_lengths(len + 1, density, mean_span, &in, &tg);
        if (in > inputs_length)
            break;
        len++;
    }
    if (len < 2)
        return 0;
    if (targets_length) {
        tfm_span_lengths(len, density, mean_span, &in, &tg);
        *targets_length = tg;
    }
    return len;
}

/* Lengths of k non-empty segments of n items, the k - 1 cuts among the
 * n - 1 gaps uniform (T5's _random_segmentation), by selection sampling. */
static void segment(size_t n, size_t k, size_t *len, tfm_rng *rng)
{
    size_t need = k - 1, seg = 0, cur = 1;
    for (size_t gap = 1; gap < n; gap++) {
        if (need && tfm_rng_below(rng, n - gap) < need) {
            len[seg++] = cur;
            cur = 0;
            need--;
        }
        cur++;
    }
    len[seg] = cur;
}

void tfm_span_noise_mask(unsigned char *mask, size_t length, double density,
                         double mean_span, tfm_rng *rng)
{
    size_t noise, spans;
    tfm_span_counts(length, density, mean_span, &noise, &spans);
    size_t *keep = tfm_malloc(2 * spans * sizeof *keep), *drop = keep + spans;
    segment(length - noise, spans, keep, rng);
    segment(noise, spans, drop, rng);
    size_t p = 0;
    for (size_t s = 0; s < spans; s++) {
        memset(mask + p, 0, keep[s]);
        p += keep[s];
        memset(mask + p, 1, drop[s]);
        p += drop[s];
    }
    free(keep);
}

/* noise_span_to_unique_sentinel: tokens where mask[i] == which are dropped,
 * each run of them replaced by the next sentinel. */
static int squeeze(const int32_t *tokens, const unsigned char *mask, size_t length, int which,
                   const int32_t *sentinel, size_t n_sentinel, int32_t *out, size_t *n_out)
{
    size_t n = 0, s = 0;
    for (size_t i = 0; i < length; i++) {
        if (!mask[i] != !which)
            out[n++] = tokens[i];
        else if (i == 0 || !mask[i - 1] != !which) {
            if (s == n_sentinel)
                return -1;
            out[n++] = sentinel[s++];
        }
    }
    *n_out = n;
    return 0;
}

int tfm_span_corrupt(const int32_t *tokens, const unsigned char *mask, size_t length,
                     const int32_t *sentinel, size_t n_sentinel, int32_t *inputs,
                     size_t *n_inputs, int32_t *targets, size_t *n_targets)
{
    if (squeeze(tokens, mask, length, 1, sentinel, n_sentinel, inputs, n_inputs) < 0 ||
        squeeze(tokens, mask, length, 0, sentinel, n_sentinel, targets, n_targets) < 0)
        return -1;
    return 0;
}

/* ---- the T5 study's other noise ----------------------------------------------- */

void tfm_noise_iid_mask(unsigned char *mask, size_t length, double density, tfm_rng *rng)
{
    for (size_t i = 0; i < length; i++)
        mask[i] = tfm_rng_double(rng) < density;
}

size_t tfm_span_fit(const unsigned char *mask, size_t length, size_t n_sentinel)
{
    size_t runs[2] = {0, 0};
    for (size_t i = 0; i < length; i++)
        if ((i == 0 || mask[i] != mask[i - 1]) && ++runs[!!mask[i]] > n_sentinel)
            return i;
    return length;
}

void tfm_noise_drop(const int32_t *tokens, const unsigned char *mask, size_t length,
                    int32_t *inputs, size_t *n_inputs, int32_t *targets, size_t *n_targets)
{
    size_t ni = 0, nt = 0;
    for (size_t i = 0; i < length; i++) {
        if (mask[i])
            targets[nt++] = tokens[i];
        else
            inputs[ni++] = tokens[i];
    }
    *n_inputs = ni;
    *n_targets = nt;
}

int32_t tfm_noise_random_token(const unsigned char *special, uint32_t V, tfm_rng *rng)
{
    for (;;) {
        int32_t t = (int32_t)tfm_rng_below(rng, V);
        if (!special || !special[t])
            return t;
    }
}

void tfm_noise_replace(const int32_t *tokens, const unsigned char *mask, size_t length,
                       int32_t mask_id, double random_prob, const unsigned char *special,
                       uint32_t V, tfm_rng *rng, int32_t *out)
{
    for (size_t i = 0; i < length; i++) {
        if (!mask[i])
            out[i] = tokens[i];
        else if (random_prob > 0 && tfm_rng_double(rng) < random_prob)
            out[i] = tfm_noise_random_token(special, V, rng);
        else
            out[i] = mask_id;
    }
}
