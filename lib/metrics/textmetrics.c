/* Text-to-text scores: string and SQuAD matches, BLEU, chrF and macro F1
 * over a small label set, each from the metric functions of bleu.c and
 * taskmetrics.c. */
#include "config.h"

#include "metrics/textmetrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "metrics/bleu.h"
#include "metrics/taskmetrics.h"

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

const char *tfm_text_trim(const char *s, size_t *n)
{
    size_t a = 0, b = *n;
    while (a < b && is_space(s[a]))
        a++;
    while (b > a && is_space(s[b - 1]))
        b--;
    *n = b - a;
    return s + a;
}

static int same(const char *x, size_t xn, const char *y, size_t yn)
{
    return xn == yn && memcmp(x, y, xn) == 0;
}

/* The distinct first references (their trimmed texts in lab[], lengths in
 * len[], room for max_labels + 1) and each line's label in gold[]; 0 when
 * they are more than max_labels or fewer than 2 lines each. */
static size_t label_set(const char *const *ref, const size_t *group, size_t n,
                        size_t max_labels, const char **lab, size_t *len, size_t *gold)
{
    size_t L = 0;
    for (size_t i = 0; i < n && L <= max_labels; i++) {
        size_t rn = strlen(ref[group[i]]);
        const char *r = tfm_text_trim(ref[group[i]], &rn);
        size_t l = 0;
        while (l < L && !same(lab[l], len[l], r, rn))
            l++;
        if (l == L) {
            lab[L] = r;
            len[L++] = rn;
        }
        gold[i] = l;
    }
    return L <= max_labels && 2 * L <= n ? L : 0;
}

/* T5's mean_multiclass_f1: per gold label, F1 of its precision and
 * recall (2PR / (P + R), 0 when both are 0, as scikit-learn), averaged
 * over the gold labels; an output that is no label predicts none. */
static double macro_f1(const char *const *hyp, size_t n, const char *const *lab,
                       const size_t *len, size_t L, const size_t *gold)
{
    size_t *tp = tfm_calloc(L, sizeof *tp), *ng = tfm_calloc(L, sizeof *ng),
           *np = tfm_calloc(L, sizeof *np);
    for (size_t i = 0; i < n; i++) {
        size_t hn = strlen(hyp[i]);
        const char *h = tfm_text_trim(hyp[i], &hn);
        size_t p = 0; /* the output's label, L: none */
        while (p < L && !same(h, hn, lab[p], len[p]))
            p++;
        ng[gold[i]]++;
        if (p < L) {
            np[p]++;
            tp[p] += p == gold[i];
        }
    }
    double sum = 0;
    for (size_t l = 0; l < L; l++) {
        double P = np[l] ? (double)tp[l] / (double)np[l] : 0;
        double R = (double)tp[l] / (double)ng[l];
        sum += P + R > 0 ? 2 * P * R / (P + R) : 0;
    }
    free(tp);
    free(ng);
    free(np);
    return 100 * sum / (double)L;
}

void tfm_metrics_text(const char *const *hyp, size_t n, const char *const *ref,
                      const size_t *group, size_t max_labels, tfm_text_result *r)
{
    memset(r, 0, sizeof *r);
    r->n = n;
    r->f1_macro = NAN;
    if (n == 0)
        return;
    size_t most = 0;
    for (size_t i = 0; i < n; i++)
        if (group[i + 1] - group[i] > most)
            most = group[i + 1] - group[i];
    size_t *rl = tfm_malloc(most * sizeof *rl);
    tfm_bleu_stats bs = {0};
    tfm_chrf_stats cs = {0};
    for (size_t i = 0; i < n; i++) {
        const char *const *rs = ref + group[i];
        int nr = (int)(group[i + 1] - group[i]);
        size_t hn = strlen(hyp[i]);
        const char *h = tfm_text_trim(hyp[i], &hn);
        int hit = 0;
        for (int k = 0; k < nr; k++) {
            rl[k] = strlen(rs[k]);
            size_t tn = rl[k];
            const char *t = tfm_text_trim(rs[k], &tn);
            hit |= same(h, hn, t, tn);
        }
        r->exact_count += (size_t)hit;
        /* sentence statistics summed: corpus BLEU and chrF */
        tfm_bleu_stats one = {0};
        tfm_bleu_add(&one, hyp[i], strlen(hyp[i]), rs, rl, nr, 0);
        tfm_bleu_stats_merge(&bs, &one);
        tfm_chrf_stats c1 = {0};
        tfm_chrf_add(&c1, hyp[i], strlen(hyp[i]), rs, rl, nr, 0);
        tfm_chrf_stats_merge(&cs, &c1);
    }
    free(rl);
    r->exact = 100 * (double)r->exact_count / (double)n;
    tfm_metrics_span(hyp, n, ref, group, &r->squad_em, &r->squad_f1);
    tfm_bleu_score sc;
    tfm_bleu_compute(&bs, 0, &sc);
    r->bleu = sc.bleu;
    r->chrf = tfm_chrf_compute(&cs);
    if (max_labels == 0)
        return;
    const char **lab = tfm_malloc((max_labels + 1) * sizeof *lab);
    size_t *len = tfm_malloc((max_labels + 1) * sizeof *len);
    size_t *gold = tfm_malloc(n * sizeof *gold);
    r->labels = label_set(ref, group, n, max_labels, lab, len, gold);
    if (r->labels)
        r->f1_macro = macro_f1(hyp, n, lab, len, r->labels, gold);
    free(lab);
    free(len);
    free(gold);
}
