/* BART's noise: text infilling and sentence permutation (train/denoise.h). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "train/denoise.h"
#include "train/spancorrupt.h"

void tfm_denoise_init(tfm_denoise *d, double mask_ratio, double lambda, double random_prob,
                      int32_t mask_id, const unsigned char *special, uint32_t V,
                      size_t max_len)
{
    memset(d, 0, sizeof *d);
    d->mask_ratio = mask_ratio;
    d->random_prob = random_prob;
    d->mask_id = mask_id;
    d->special = special;
    d->V = V;
    d->max_len = max_len;
    /* fairseq's table: P(k) for k = 0, 1, ... until the tail is negligible
     * (in logs, so that a large lambda neither overflows nor stops at k = 0) */
    double sum = 0;
    int n = 0;
    for (int k = 0; k < TFM_POISSON_MAX; k++) {
        double p = exp(-lambda + k * log(lambda) - lgamma(k + 1.0));
        sum += p;
        d->cdf[n++] = sum;
        if (k > lambda && p < 1e-7)
            break;
    }
    for (int k = 0; k < n; k++)
        d->cdf[k] /= sum;
    d->n_cdf = n;
    size_t m = max_len ? max_len : 1;
    d->start = tfm_malloc(3 * m * sizeof *d->start);
    d->len = d->start + m;
    d->pos = d->len + m;
    d->rnd = tfm_malloc(2 * m);
    d->mark = d->rnd + m;
}

void tfm_denoise_free(tfm_denoise *d)
{
    free(d->start);
    free(d->rnd);
    memset(d, 0, sizeof *d);
}

size_t tfm_denoise_span_length(const tfm_denoise *d, tfm_rng *rng)
{
    double u = tfm_rng_double(rng);
    int k = 0;
    while (k < d->n_cdf - 1 && u >= d->cdf[k])
        k++;
    return (size_t)k;
}

size_t tfm_denoise_budget(const tfm_denoise *d, size_t n)
{
    return (size_t)ceil((double)n * d->mask_ratio - 1e-9);
}

void tfm_denoise_plan(tfm_denoise *d, size_t n, tfm_rng *rng, tfm_infill_plan *p)
{
    TFM_ASSERT(n <= d->max_len);
    size_t budget = tfm_denoise_budget(d, n), used = 0, spans = 0, inserts = 0;
    /* lengths until the budget is reached, the last cut to it (≥ 1) */
    while (used < budget) {
        size_t l = tfm_denoise_span_length(d, rng);
        if (l == 0) {
            inserts++;
            continue;
        }
        if (l > budget - used)
            l = budget - used;
        d->len[spans++] = l;
        used += l;
    }
    /* distinct uniform starts: a partial Fisher-Yates shuffle of 0..n-1 */
    for (size_t i = 0; i < n; i++)
        d->pos[i] = i;
    for (size_t s = 0; s < spans; s++) {
        size_t j = s + (size_t)tfm_rng_below(rng, n - s), t = d->pos[s];
        d->pos[s] = d->pos[j];
        d->pos[j] = t;
        d->start[s] = d->pos[s];
    }
    for (size_t s = 0; s < spans; s++)
        d->rnd[s] = d->random_prob > 0 && tfm_rng_double(rng) < d->random_prob;
    *p = (tfm_infill_plan){.n_spans = spans, .n_inserts = inserts, .start = d->start,
                           .len = d->len, .random = d->rnd};
}

/* The token that stands for a span or an insert. */
static int32_t stand_in(const tfm_denoise *d, int random, tfm_rng *rng)
{
    return random ? tfm_noise_random_token(d->special, d->V, rng) : d->mask_id;
}

enum { KEEP, DELETE, MASK, RANDOM };

size_t tfm_denoise_apply(tfm_denoise *d, const int32_t *tokens, size_t n,
                         const tfm_infill_plan *p, size_t max_out, tfm_rng *rng,
                         int32_t *out)
{
    TFM_ASSERT(n <= d->max_len && n <= max_out);
    unsigned char *mark = d->mark;
    memset(mark, KEEP, n);
    for (size_t s = 0; s < p->n_spans; s++)
        mark[p->start[s]] = p->random[s] ? RANDOM : MASK;
    /* a span's other tokens go, other spans' starts among them too */
    for (size_t s = 0; s < p->n_spans; s++)
        for (size_t i = p->start[s] + 1; i < p->start[s] + p->len[s] && i < n; i++)
            mark[i] = DELETE;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        kept += mark[i] != DELETE;
    size_t ins = p->n_inserts;
    if (ins > max_out - kept)
        ins = max_out - kept;
    /* the inserts take ins of the kept + ins places, uniformly (selection
     * sampling), each a mask or with random_prob a random token */
    size_t o = 0, i = 0, total = kept + ins;
    for (size_t slot = 0; slot < total; slot++) {
        if (ins && tfm_rng_below(rng, total - slot) < ins) {
            ins--;
            out[o++] = stand_in(d, d->random_prob > 0 && tfm_rng_double(rng) < d->random_prob,
                                rng);
            continue;
        }
        while (mark[i] == DELETE)
            i++;
        out[o++] = mark[i] == KEEP ? tokens[i] : stand_in(d, mark[i] == RANDOM, rng);
        i++;
    }
    return o;
}

size_t tfm_denoise_infill(tfm_denoise *d, const int32_t *tokens, size_t n, size_t max_out,
                          tfm_rng *rng, int32_t *out)
{
    tfm_infill_plan p;
    tfm_denoise_plan(d, n, rng, &p);
    return tfm_denoise_apply(d, tokens, n, &p, max_out, rng, out);
}

size_t tfm_denoise_sentences(const int32_t *tokens, size_t n, const unsigned char *is_end,
                             size_t *ends)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (i + 1 == n || (is_end[tokens[i]] && !is_end[tokens[i + 1]]))
            ends[k++] = i + 1;
    return k;
}

size_t tfm_denoise_permute(tfm_denoise *d, const int32_t *tokens, size_t n,
                           const unsigned char *is_end, tfm_rng *rng, int32_t *out)
{
    TFM_ASSERT(n <= d->max_len);
    size_t *ends = d->pos, *order = d->start;
    size_t k = tfm_denoise_sentences(tokens, n, is_end, ends);
    for (size_t s = 0; s < k; s++)
        order[s] = s;
    for (size_t s = k; s > 1; s--) {
        size_t j = (size_t)tfm_rng_below(rng, s), t = order[s - 1];
        order[s - 1] = order[j];
        order[j] = t;
    }
    size_t o = 0;
    for (size_t s = 0; s < k; s++) {
        size_t a = order[s] ? ends[order[s] - 1] : 0, b = ends[order[s]];
        memcpy(out + o, tokens + a, (b - a) * sizeof *out);
        o += b - a;
    }
    return k;
}
