/* Corpus and sentence BLEU and chrF as sacrebleu 2.6 computes them, so that
 * scores are comparable with published ones:
 *
 *     tfm_bleu_stats st = {0};
 *     for each line i: tfm_bleu_add(&st, hyp[i], hyp_len[i], refs_i, lens_i, nrefs, lc);
 *     tfm_bleu_score sc;
 *     tfm_bleu_compute(&st, 0, &sc);        // corpus BLEU, sc.bleu in 0..100
 *
 * chrF likewise with tfm_chrf_stats / tfm_chrf_add / tfm_chrf_compute.
 * Statistics are sums, so a corpus is the sum of its lines and the order of
 * lines does not matter.  Texts are UTF-8; nothing here can fail (memory
 * exhaustion exits, as everywhere in tfm). */
#ifndef TFM_METRICS_BLEU_H
#define TFM_METRICS_BLEU_H

#include <stddef.h>

#include "base/buf.h"

#define TFM_BLEU_ORDER 4
#define TFM_CHRF_ORDER 6
#define TFM_CHRF_BETA 2
/* The sacrebleu release whose results these functions reproduce; it is the
 * version field of the signatures. */
#define TFM_SACREBLEU_VERSION "2.6.0"

/* sacrebleu's "13a" tokenizer (mteval-v13a): drops "<skipped>", unescapes
 * &quot; &amp; &lt; &gt; (in that order), splits off ASCII punctuation
 * except ' - . , ; splits . and , unless between digits and - after a digit;
 * tokens are joined by single spaces (Unicode whitespace separates tokens, as
 * Python's str.split).  With lowercase, the text is lowercased first
 * (character by character, simple case mappings).  Trailing whitespace is
 * dropped, as sacrebleu's rstrip.  Appends the result to out. */
void tfm_bleu_tokenize_13a(const char *s, size_t n, int lowercase, tfm_buf *out);

typedef struct tfm_bleu_stats {
    double sys_len, ref_len;  /* tokens; ref_len sums the closest lengths */
    double correct[TFM_BLEU_ORDER], total[TFM_BLEU_ORDER];
} tfm_bleu_stats;

/* Adds one hypothesis against its nrefs >= 1 references.  An n-gram counts
 * up to its largest count in any one reference; the reference length is the
 * one closest to the hypothesis's (the shorter on a tie). */
void tfm_bleu_add(tfm_bleu_stats *st, const char *hyp, size_t hyp_len,
                  const char *const *refs, const size_t *ref_lens, int nrefs, int lowercase);

/* Adds the counts of one (a sentence's) into st: corpus BLEU sums them. */
void tfm_bleu_stats_merge(tfm_bleu_stats *st, const tfm_bleu_stats *one);

typedef struct tfm_bleu_score {
    double bleu;                         /* 0..100 */
    double precisions[TFM_BLEU_ORDER];   /* 0..100, smoothed */
    double bp;                           /* brevity penalty */
    double sys_len, ref_len;
} tfm_bleu_score;

/* BLEU with sacrebleu's "exp" smoothing: the k-th order without a match
 * counts as precision 1 / (2^k total).  No match of any order gives 0.
 * effective_order (sacrebleu's default for sentence BLEU): the geometric
 * mean runs over the orders the hypothesis has n-grams of, so a short line
 * is not 0 for want of 4-grams.  Brevity penalty exp(1 - ref/sys) when the
 * hypothesis is shorter, 0 for an empty one. */
void tfm_bleu_compute(const tfm_bleu_stats *st, int effective_order, tfm_bleu_score *out);

/* Appends sacrebleu's signature, e.g.
 * "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0". */
void tfm_bleu_signature(tfm_buf *b, int nrefs, int lowercase, int effective_order);

typedef struct tfm_chrf_stats {
    /* per character n-gram order 1..6: n-grams of the hypothesis (0 when
     * the reference has none of that order), of the reference, matched */
    double hyp[TFM_CHRF_ORDER], ref[TFM_CHRF_ORDER], match[TFM_CHRF_ORDER];
} tfm_chrf_stats;

/* Adds one hypothesis: character n-grams (Unicode characters, whitespace
 * removed) of orders 1..6 against the reference that gives this line the
 * best chrF (the first on ties). */
void tfm_chrf_add(tfm_chrf_stats *st, const char *hyp, size_t hyp_len,
                  const char *const *refs, const size_t *ref_lens, int nrefs, int lowercase);

/* Adds the counts of one (a sentence's) into st. */
void tfm_chrf_stats_merge(tfm_chrf_stats *st, const tfm_chrf_stats *one);

/* chrF2 in 0..100 as sacrebleu's default (no eps smoothing): precision and
 * recall are averaged over the orders where both sides have n-grams, then
 * combined with beta = 2; 0 when there is no such order or no match. */
double tfm_chrf_compute(const tfm_chrf_stats *st);

/* "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0" */
void tfm_chrf_signature(tfm_buf *b, int nrefs, int lowercase);

#endif
