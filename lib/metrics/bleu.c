/* BLEU and chrF as sacrebleu 2.6: see bleu.h.  N-grams are substrings of
 * one buffer (a word n-gram of the tokenized text, whose tokens are joined by
 * single spaces, is a substring too), counted by sorting. */
#include "config.h"

#include "metrics/bleu.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "text/utf8.h"

/* Python's str.isspace, which str.split and str.strip use. */
static int py_space(int32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 ||
           c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
           c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Appends the words of s[0..n) (split at Unicode whitespace) to out joined by
 * `sep` bytes (sep_len 0: no separator, i.e. whitespace removed). */
static void join_words(const char *s, size_t n, const char *sep, size_t sep_len, tfm_buf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, adv;
    int in_word = 0, any = 0;
    while (i < n) {
        int32_t c = u[i] < 0x80 ? u[i] : tfm_utf8_decode(u + i, n - i, &adv);
        if (u[i] < 0x80)
            adv = 1;
        if (py_space(c)) {
            in_word = 0;
        } else {
            if (!in_word && any)
                tfm_buf_append(out, sep, sep_len);
            tfm_buf_append(out, s + i, adv);
            in_word = any = 1;
        }
        i += adv;
    }
}

/* out = in with every occurrence of pat replaced by rep (left to right, not
 * overlapping: Python's str.replace). */
static void replace_all(const tfm_buf *in, const char *pat, const char *rep, tfm_buf *out)
{
    size_t pl = strlen(pat), rl = strlen(rep);
    tfm_buf_clear(out);
    for (size_t i = 0; i < in->len;) {
        if (i + pl <= in->len && memcmp(in->data + i, pat, pl) == 0) {
            tfm_buf_append(out, rep, rl);
            i += pl;
        } else {
            tfm_buf_putc(out, in->data[i++]);
        }
    }
}

static int digit(char c) { return c >= '0' && c <= '9'; }

/* The first regex of 13a: ASCII punctuation but ' , - . */
static int punct13a(unsigned char c)
{
    return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
           (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}

/* Python's str.rstrip(): the length without trailing Unicode whitespace. */
static size_t rstrip_len(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t keep = 0, i = 0, adv;
    while (i < n) {
        int32_t c = tfm_utf8_decode(u + i, n - i, &adv);
        i += adv;
        if (!py_space(c))
            keep = i;
    }
    return keep;
}

void tfm_bleu_tokenize_13a(const char *s, size_t n, int lowercase, tfm_buf *out)
{
    tfm_buf a = {0}, b = {0};
    if (lowercase)
        tfm_utf8_lower(s, n, &a);
    else
        tfm_buf_append(&a, s, n);
    a.len = rstrip_len(a.data, a.len);
    replace_all(&a, "<skipped>", "", &b);
    replace_all(&b, "-\n", "", &a);
    replace_all(&a, "\n", " ", &b);
    if (b.len && memchr(b.data, '&', b.len)) {
        /* sacrebleu's order, so "&amp;quot;" becomes "&quot;", not '"' */
        replace_all(&b, "&quot;", "\"", &a);
        replace_all(&a, "&amp;", "&", &b);
        replace_all(&b, "&lt;", "<", &a);
        replace_all(&a, "&gt;", ">", &b);
    }
    /* b holds the line; the regexes of TokenizerRegexp run over " line ".
     * Each is applied as re.sub does: left to right, a match consumes its
     * characters.  Bytes stand in for characters: the patterns are ASCII and
     * a match never starts inside a multi-byte character. */
    tfm_buf_clear(&a);
    tfm_buf_putc(&a, ' ');
    for (size_t i = 0; i < b.len; i++) {
        unsigned char c = (unsigned char)b.data[i];
        if (punct13a(c)) {
            tfm_buf_putc(&a, ' ');
            tfm_buf_putc(&a, (char)c);
            tfm_buf_putc(&a, ' ');
        } else {
            tfm_buf_putc(&a, (char)c);
        }
    }
    tfm_buf_putc(&a, ' ');
    /* ([^0-9])([\.,]) -> "\1 \2 " */
    tfm_buf_clear(&b);
    for (size_t i = 0; i < a.len;) {
        if (i + 1 < a.len && !digit(a.data[i]) && (a.data[i + 1] == '.' || a.data[i + 1] == ',')) {
            tfm_buf_putc(&b, a.data[i]);
            tfm_buf_putc(&b, ' ');
            tfm_buf_putc(&b, a.data[i + 1]);
            tfm_buf_putc(&b, ' ');
            i += 2;
        } else {
            tfm_buf_putc(&b, a.data[i++]);
        }
    }
    /* ([\.,])([^0-9]) -> " \1 \2" */
    tfm_buf_clear(&a);
    for (size_t i = 0; i < b.len;) {
        if (i + 1 < b.len && (b.data[i] == '.' || b.data[i] == ',') && !digit(b.data[i + 1])) {
            tfm_buf_putc(&a, ' ');
            tfm_buf_putc(&a, b.data[i]);
            tfm_buf_putc(&a, ' ');
            tfm_buf_putc(&a, b.data[i + 1]);
            i += 2;
        } else {
            tfm_buf_putc(&a, b.data[i++]);
        }
    }
    /* ([0-9])(-) -> "\1 \2 " */
    tfm_buf_clear(&b);
    for (size_t i = 0; i < a.len;) {
        if (i + 1 < a.len && digit(a.data[i]) && a.data[i + 1] == '-') {
            tfm_buf_putc(&b, a.data[i]);
            tfm_buf_putc(&b, ' ');
            tfm_buf_putc(&b, '-');
            tfm_buf_putc(&b, ' ');
            i += 2;
        } else {
            tfm_buf_putc(&b, a.data[i++]);
        }
    }
    join_words(b.data, b.len, " ", 1, out);
    tfm_buf_free(&a);
    tfm_buf_free(&b);
}

/* ---- n-gram counting -------------------------------------------------- */

typedef struct gram {
    const char *p;
    size_t len;
} gram;

static int gram_cmp(const void *x, const void *y)
{
    const gram *a = x, *b = y;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    return memcmp(a->p, b->p, a->len);
}

/* How many times g occurs in the sorted array v[0..n). */
static size_t gram_count(const gram *v, size_t n, const gram *g)
{
    size_t lo = 0, hi = n;
    while (lo < hi) { /* first >= g */
        size_t mid = lo + (hi - lo) / 2;
        if (gram_cmp(&v[mid], g) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t k = lo;
    while (k < n && gram_cmp(&v[k], g) == 0)
        k++;
    return k - lo;
}

/* Unit boundaries of a text: off[0..n] with unit i = text[off[i], end[i]).
 * Word units: tokens of a space-joined string; character units: UTF-8
 * characters. */
typedef struct units {
    const char *text;
    size_t *start, *end;
    size_t n;
} units;

static void units_words(units *u, const char *s, size_t n)
{
    size_t cap = 1;
    for (size_t i = 0; i < n; i++)
        cap += s[i] == ' ';
    u->text = s;
    u->start = tfm_malloc(cap * sizeof *u->start);
    u->end = tfm_malloc(cap * sizeof *u->end);
    u->n = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && s[j] != ' ')
            j++;
        if (j > i) {
            u->start[u->n] = i;
            u->end[u->n++] = j;
        }
        i = j + 1;
    }
}

static void units_chars(units *u, const char *s, size_t n)
{
    u->text = s;
    u->start = tfm_malloc((n + 1) * sizeof *u->start);
    u->end = tfm_malloc((n + 1) * sizeof *u->end);
    u->n = 0;
    for (size_t i = 0, adv; i < n; i += adv) {
        tfm_utf8_decode((const unsigned char *)s + i, n - i, &adv);
        u->start[u->n] = i;
        u->end[u->n++] = i + adv;
    }
}

static void units_free(units *u)
{
    free(u->start);
    free(u->end);
}

/* The sorted n-grams of order k; returns how many. */
static size_t grams_of(const units *u, size_t k, gram *out)
{
    if (u->n < k)
        return 0;
    size_t m = u->n - k + 1;
    for (size_t i = 0; i < m; i++)
        out[i] = (gram){u->text + u->start[i], u->end[i + k - 1] - u->start[i]};
    qsort(out, m, sizeof *out, gram_cmp);
    return m;
}

/* Clipped matches of the hypothesis's order-k n-grams against the largest
 * count in any of the references. */
static size_t clipped_matches(const gram *h, size_t nh, gram *const *r, const size_t *nr,
                              int nrefs)
{
    size_t match = 0;
    for (size_t i = 0; i < nh;) {
        size_t j = i + 1;
        while (j < nh && gram_cmp(&h[i], &h[j]) == 0)
            j++;
        size_t best = 0;
        for (int k = 0; k < nrefs; k++) {
            size_t c = gram_count(r[k], nr[k], &h[i]);
            if (c > best)
                best = c;
        }
        match += best < j - i ? best : j - i;
        i = j;
    }
    return match;
}

void tfm_bleu_add(tfm_bleu_stats *st, const char *hyp, size_t hyp_len,
                  const char *const *refs, const size_t *ref_lens, int nrefs, int lowercase)
{
    TFM_ASSERT(nrefs >= 1);
    tfm_buf ht = {0};
    tfm_buf *rt = tfm_calloc((size_t)nrefs, sizeof *rt);
    units hu, *ru = tfm_malloc((size_t)nrefs * sizeof *ru);
    tfm_bleu_tokenize_13a(hyp, hyp_len, lowercase, &ht);
    units_words(&hu, ht.data, ht.len);
    double best_diff = INFINITY, closest = 0;
    for (int k = 0; k < nrefs; k++) {
        tfm_bleu_tokenize_13a(refs[k], ref_lens[k], lowercase, &rt[k]);
        units_words(&ru[k], rt[k].data, rt[k].len);
        double rl = (double)ru[k].n, diff = fabs((double)hu.n - rl);
        if (diff < best_diff || (diff == best_diff && rl < closest)) {
            best_diff = diff;
            closest = rl;
        }
    }
    st->sys_len += (double)hu.n;
    st->ref_len += closest;
    size_t maxn = hu.n;
    for (int k = 0; k < nrefs; k++)
        maxn = ru[k].n > maxn ? ru[k].n : maxn;
    gram *h = tfm_malloc((maxn + 1) * sizeof *h);
    gram **r = tfm_malloc((size_t)nrefs * sizeof *r);
    size_t *nr = tfm_malloc((size_t)nrefs * sizeof *nr);
    for (int k = 0; k < nrefs; k++)
        r[k] = tfm_malloc((ru[k].n + 1) * sizeof *r[k]);
    for (size_t n = 1; n <= TFM_BLEU_ORDER; n++) {
        size_t nh = grams_of(&hu, n, h);
        for (int k = 0; k < nrefs; k++)
            nr[k] = grams_of(&ru[k], n, r[k]);
        st->total[n - 1] += (double)nh;
        st->correct[n - 1] += (double)clipped_matches(h, nh, r, nr, nrefs);
    }
    for (int k = 0; k < nrefs; k++) {
        free(r[k]);
        units_free(&ru[k]);
        tfm_buf_free(&rt[k]);
    }
    free(r);
    free(nr);
    free(h);
    free(ru);
    free(rt);
    units_free(&hu);
    tfm_buf_free(&ht);
}

/* sacrebleu's my_log: log(0) is a large negative number, not -inf. */
static double my_log(double x) { return x == 0 ? -9999999999.0 : log(x); }

void tfm_bleu_compute(const tfm_bleu_stats *st, int effective_order, tfm_bleu_score *out)
{
    memset(out, 0, sizeof *out);
    out->sys_len = st->sys_len;
    out->ref_len = st->ref_len;
    if (st->sys_len < st->ref_len)
        out->bp = st->sys_len > 0 ? exp(1 - st->ref_len / st->sys_len) : 0.0;
    else
        out->bp = 1.0;
    int any = 0;
    for (int n = 0; n < TFM_BLEU_ORDER; n++)
        any |= st->correct[n] > 0;
    if (!any)
        return;
    double smooth = 1;
    int eff = TFM_BLEU_ORDER;
    for (int n = 1; n <= TFM_BLEU_ORDER; n++) {
        if (st->total[n - 1] == 0)
            break;
        if (effective_order)
            eff = n;
        if (st->correct[n - 1] == 0) {
            smooth *= 2;
            out->precisions[n - 1] = 100.0 / (smooth * st->total[n - 1]);
        } else {
            out->precisions[n - 1] = 100.0 * st->correct[n - 1] / st->total[n - 1];
        }
    }
    double s = 0;
    for (int n = 0; n < eff; n++)
        s += my_log(out->precisions[n]);
    out->bleu = out->bp * exp(s / eff);
}

void tfm_bleu_signature(tfm_buf *b, int nrefs, int lowercase, int effective_order)
{
    tfm_buf_printf(b, "nrefs:%d|case:%s|eff:%s|tok:13a|smooth:exp|version:%s", nrefs,
                   lowercase ? "lc" : "mixed", effective_order ? "yes" : "no",
                   TFM_SACREBLEU_VERSION);
}

/* ---- chrF -------------------------------------------------------------- */

/* sacrebleu's _compute_f_score without eps smoothing. */
static double chrf_f(const double *hyp, const double *ref, const double *match)
{
    const double factor = TFM_CHRF_BETA * TFM_CHRF_BETA;
    double avg_p = 0, avg_r = 0;
    int eff = 0;
    for (int n = 0; n < TFM_CHRF_ORDER; n++)
        if (hyp[n] > 0 && ref[n] > 0) {
            avg_p += match[n] / hyp[n];
            avg_r += match[n] / ref[n];
            eff++;
        }
    if (eff == 0)
        return 0;
    avg_p /= eff;
    avg_r /= eff;
    if (avg_p + avg_r == 0)
        return 0;
    return 100 * (1 + factor) * avg_p * avg_r / (factor * avg_p + avg_r);
}

double tfm_chrf_compute(const tfm_chrf_stats *st)
{
    return chrf_f(st->hyp, st->ref, st->match);
}

/* Lowercased (optionally), whitespace removed: the text chrF sees. */
static void chrf_prep(const char *s, size_t n, int lowercase, tfm_buf *out)
{
    tfm_buf lc = {0};
    if (lowercase) {
        tfm_utf8_lower(s, n, &lc);
        s = lc.data;
        n = lc.len;
    }
    join_words(s, n, "", 0, out);
    tfm_buf_free(&lc);
}

void tfm_chrf_add(tfm_chrf_stats *st, const char *hyp, size_t hyp_len,
                  const char *const *refs, const size_t *ref_lens, int nrefs, int lowercase)
{
    TFM_ASSERT(nrefs >= 1);
    tfm_buf ht = {0}, rt = {0};
    units hu, ru;
    chrf_prep(hyp, hyp_len, lowercase, &ht);
    units_chars(&hu, ht.data, ht.len);
    gram *h[TFM_CHRF_ORDER];
    size_t nh[TFM_CHRF_ORDER];
    for (int n = 0; n < TFM_CHRF_ORDER; n++) {
        h[n] = tfm_malloc((hu.n + 1) * sizeof *h[n]);
        nh[n] = grams_of(&hu, (size_t)n + 1, h[n]);
    }
    double best_f = -1, best[3][TFM_CHRF_ORDER] = {{0}};
    for (int k = 0; k < nrefs; k++) {
        tfm_buf_clear(&rt);
        chrf_prep(refs[k], ref_lens[k], lowercase, &rt);
        units_chars(&ru, rt.data, rt.len);
        gram *r = tfm_malloc((ru.n + 1) * sizeof *r);
        double s[3][TFM_CHRF_ORDER];
        for (int n = 0; n < TFM_CHRF_ORDER; n++) {
            size_t nr = grams_of(&ru, (size_t)n + 1, r);
            gram *rp = r;
            /* hypothesis n-grams count only when the reference has some */
            s[0][n] = nr ? (double)nh[n] : 0;
            s[1][n] = (double)nr;
            s[2][n] = (double)clipped_matches(h[n], nh[n], &rp, &nr, 1);
        }
        double f = chrf_f(s[0], s[1], s[2]);
        if (f > best_f) {
            best_f = f;
            memcpy(best, s, sizeof best);
        }
        free(r);
        units_free(&ru);
    }
    for (int n = 0; n < TFM_CHRF_ORDER; n++) {
        st->hyp[n] += best[0][n];
        st->ref[n] += best[1][n];
        st->match[n] += best[2][n];
        free(h[n]);
    }
    units_free(&hu);
    tfm_buf_free(&ht);
    tfm_buf_free(&rt);
}

void tfm_chrf_signature(tfm_buf *b, int nrefs, int lowercase)
{
    tfm_buf_printf(b, "nrefs:%d|case:%s|eff:yes|nc:%d|nw:0|space:no|version:%s", nrefs,
                   lowercase ? "lc" : "mixed", TFM_CHRF_ORDER, TFM_SACREBLEU_VERSION);
}

void tfm_bleu_stats_merge(tfm_bleu_stats *st, const tfm_bleu_stats *one)
{
    st->sys_len += one->sys_len;
    st->ref_len += one->ref_len;
    for (int n = 0; n < TFM_BLEU_ORDER; n++) {
        st->correct[n] += one->correct[n];
        st->total[n] += one->total[n];
    }
}

void tfm_chrf_stats_merge(tfm_chrf_stats *st, const tfm_chrf_stats *one)
{
    for (int n = 0; n < TFM_CHRF_ORDER; n++) {
        st->hyp[n] += one->hyp[n];
        st->ref[n] += one->ref[n];
        st->match[n] += one->match[n];
    }
}
