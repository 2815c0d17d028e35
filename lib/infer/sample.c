/* Next-token selection; the order of the filters is documented in sample.h. */
#include "config.h"

#include "infer/sample.h"

#include "tensor/ops.h"

#include <math.h>
#include <string.h>

void tfm_sample_opts_default(tfm_sample_opts *o)
{
    memset(o, 0, sizeof *o);
    o->temperature = 1.0f;
    o->top_p = 1.0f;
    o->repeat_penalty = 1.0f;
}

int tfm_sample_opts_check(const tfm_sample_opts *o, tfm_err *err)
{
    if (!(o->temperature >= 0) || isinf(o->temperature))
        return tfm_err_set(err, "temperature must be a finite number >= 0");
    if (!(o->top_p > 0 && o->top_p <= 1))
        return tfm_err_set(err, "top-p must be in (0, 1]");
    if (!(o->min_p >= 0 && o->min_p <= 1))
        return tfm_err_set(err, "min-p must be in [0, 1]");
    if (!(o->repeat_penalty > 0) || isinf(o->repeat_penalty))
        return tfm_err_set(err, "repeat-penalty must be a finite number > 0");
    return 0;
}

int tfm_sampler_init(tfm_sampler *s, const tfm_sample_opts *opts, uint32_t vocab,
                     uint64_t seed, tfm_err *err)
{
    memset(s, 0, sizeof *s);
    if (tfm_sample_opts_check(opts, err) < 0)
        return -1;
    if (vocab == 0)
        return tfm_err_set(err, "empty vocabulary");
    s->opts = *opts;
    s->vocab = vocab;
    tfm_rng_seed(&s->rng, seed);
    s->logits = tfm_malloc(sizeof *s->logits * vocab);
    s->cand = tfm_malloc(sizeof *s->cand * vocab);
    s->seen = tfm_calloc(vocab, 1);
    return 0;
}

void tfm_sampler_free(tfm_sampler *s)
{
    free(s->logits);
    free(s->cand);
    free(s->seen);
    memset(s, 0, sizeof *s);
}

uint32_t tfm_argmax(const float *x, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return (uint32_t)best;
}

double tfm_logsumexp(const float *x, size_t n)
{
    float mx = x[tfm_argmax(x, n)];
    if (isinf(mx) && mx < 0)
        return -INFINITY;
    /* vectorised exp (every token of a 50k vocabulary, every step) */
    float sum = 0.0f;
#pragma omp simd reduction(+:sum)
    for (size_t i = 0; i < n; i++)
        sum += tfm_expf_inline(x[i] - mx);
    return mx + log((double)sum);
}

void tfm_log_softmax(const float *x, size_t n, float *out)
{
    double lse = tfm_logsumexp(x, n);
    for (size_t i = 0; i < n; i++)
        out[i] = (float)((double)x[i] - lse);
}

void tfm_repeat_penalty(float *logits, uint32_t vocab, const uint32_t *prev,
                        size_t n_prev, float penalty, uint8_t *seen)
{
    if (penalty == 1.0f)
        return;
    for (size_t i = 0; i < n_prev; i++) {
        uint32_t t = prev[i];
        if (t >= vocab || seen[t])
            continue;
        seen[t] = 1;
        /* Dividing a positive logit and multiplying a negative one both
         * make the token less likely, whatever its sign. */
        if (logits[t] > 0)
            logits[t] /= penalty;
        else
            logits[t] *= penalty;
    }
    for (size_t i = 0; i < n_prev; i++)
        if (prev[i] < vocab)
            seen[prev[i]] = 0;
}

/* Descending probability, ascending id among equals: a strict total order,
 * so the result never depends on the sort algorithm. */
static inline int cand_before(const tfm_cand *a, const tfm_cand *b)
{
    return a->p > b->p || (a->p == b->p && a->id < b->id);
}

static int cand_cmp(const void *pa, const void *pb)
{
    const tfm_cand *a = pa, *b = pb;
    if (cand_before(a, b))
        return -1;
    if (cand_before(b, a))
        return 1;
    return 0;
}

void tfm_cand_sort(tfm_cand *cand, size_t n)
{
    qsort(cand, n, sizeof *cand, cand_cmp);
}

/* Moves the k first (in cand_before order) to the front, unsorted:
 * quickselect, so top-k over a 50k vocabulary costs O(V), not a full sort. */
static void cand_select(tfm_cand *c, size_t n, size_t k)
{
    size_t lo = 0, hi = n; /* the boundary k lies in [lo, hi) */
    while (hi - lo > 1) {
        tfm_cand pivot = c[lo + (hi - lo) / 2];
        /* three-way partition: before pivot | equal | after */
        size_t lt = lo, i = lo, gt = hi;
        while (i < gt) {
            if (cand_before(&c[i], &pivot)) {
                tfm_cand t = c[lt]; c[lt] = c[i]; c[i] = t;
                lt++; i++;
            } else if (cand_before(&pivot, &c[i])) {
                gt--;
                tfm_cand t = c[gt]; c[gt] = c[i]; c[i] = t;
            } else {
                i++;
            }
        }
        if (k <= lt)
            hi = lt;
        else if (k >= gt)
            lo = gt;
        else
            return;
    }
}

size_t tfm_top_p_keep(const tfm_cand *cand, size_t n, float p)
{
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += cand[i].p;
    double target = (double)p * total * (1 - 1e-6);
    double cum = 0;
    for (size_t i = 0; i < n; i++) {
        cum += cand[i].p;
        if (cum >= target)
            return i + 1;
    }
    return n ? n : 1;
}

size_t tfm_sampler_dist(tfm_sampler *s, const float *logits,
                        const uint32_t *prev, size_t n_prev)
{
    const tfm_sample_opts *o = &s->opts;
    uint32_t V = s->vocab;
    float *x = s->logits;
    memcpy(x, logits, sizeof *x * V);
    if (o->repeat_penalty != 1.0f && n_prev) {
        size_t from = 0;
        if (o->repeat_last_n && n_prev > o->repeat_last_n)
            from = n_prev - o->repeat_last_n;
        tfm_repeat_penalty(x, V, prev + from, n_prev - from, o->repeat_penalty, s->seen);
    }
    tfm_cand *c = s->cand;
    if (o->temperature == 0) {
        c[0].id = tfm_argmax(x, V);
        c[0].p = 1;
        return 1;
    }
    /* softmax(x / T) */
    float inv_t = 1.0f / o->temperature;
    float mx = x[tfm_argmax(x, V)] * inv_t;
    double sum = 0;
    size_t n = 0;
    for (uint32_t i = 0; i < V; i++) {
        if (x[i] == -INFINITY) /* an id that may not be chosen */
            continue;
        float e = tfm_expf_inline(x[i] * inv_t - mx);
        c[n].id = i;
        c[n++].p = e;
        sum += e;
    }
    if (!n) { /* every logit -inf: nothing to weigh */
        c[0].id = tfm_argmax(x, V);
        c[0].p = 1;
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        c[i].p = (float)(c[i].p / sum);

    if (o->top_k && o->top_k < n) {
        cand_select(c, n, o->top_k);
        n = o->top_k;
    }
    if (o->top_p < 1.0f) {
        /* The nucleus is a prefix of the sorted order, so it lies inside any
         * set {p >= t} that already holds mass >= P: try a few thresholds
         * before sorting, to sort hundreds of tokens instead of the whole
         * vocabulary. */
        double total = 0;
        for (size_t i = 0; i < n; i++)
            total += c[i].p;
        static const float thresholds[] = {1e-3f, 1e-5f};
        for (size_t t = 0; t < sizeof thresholds / sizeof *thresholds; t++) {
            double kept = 0;
            for (size_t i = 0; i < n; i++)
                if (c[i].p >= thresholds[t])
                    kept += c[i].p;
            if (kept >= o->top_p * total) {
                size_t m = 0;
                for (size_t i = 0; i < n; i++)
                    if (c[i].p >= thresholds[t]) {
                        tfm_cand tmp = c[m]; c[m] = c[i]; c[i] = tmp;
                        m++;
                    }
                tfm_cand_sort(c, m);
                /* relative to the mass of all n candidates, not just m */
                double target = (double)o->top_p * total * (1 - 1e-6), cum = 0;
                size_t keep = m;
                for (size_t i = 0; i < m; i++) {
                    cum += c[i].p;
                    if (cum >= target) {
                        keep = i + 1;
                        break;
                    }
                }
                n = keep;
                goto nucleus_done;
            }
        }
        tfm_cand_sort(c, n);
        n = tfm_top_p_keep(c, n, o->top_p);
    nucleus_done:;
    } else if (o->top_k) {
        tfm_cand_sort(c, n);
    }
    if (o->min_p > 0) {
        float pmax = 0;
        for (size_t i = 0; i < n; i++)
            pmax = c[i].p > pmax ? c[i].p : pmax;
        float floor = o->min_p * pmax;
        size_t m = 0;
        for (size_t i = 0; i < n; i++)
            if (c[i].p >= floor)
                c[m++] = c[i]; /* stable: keeps a sorted list sorted */
        n = m;
    }
    double total = 0;
    for (size_t i = 0; i < n; i++)
        total += c[i].p;
    for (size_t i = 0; i < n; i++)
        c[i].p = (float)(c[i].p / total);
    return n;
}

uint32_t tfm_sampler_sample(tfm_sampler *s, const float *logits,
                            const uint32_t *prev, size_t n_prev)
{
    size_t n = tfm_sampler_dist(s, logits, prev, n_prev);
    if (n == 1)
        return s->cand[0].id;
    double u = tfm_rng_double(&s->rng), cum = 0;
    for (size_t i = 0; i < n; i++) {
        cum += s->cand[i].p;
        if (u < cum)
            return s->cand[i].id;
    }
    return s->cand[n - 1].id; /* rounding left u above the last sum */
}
