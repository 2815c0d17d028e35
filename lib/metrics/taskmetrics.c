/* Task metrics: see taskmetrics.h.  Labels are strings; they are numbered
 * by sorting so that no per-label table grows with the square of the
 * number of labels (MCC needs only the marginals and the trace). */
#include "config.h"

#include "metrics/taskmetrics.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "base/err.h"
#include "text/utf8.h"
#include "text/wordpiece.h"

/* ---- classification ---------------------------------------------------- */

int tfm_metrics_check_label(const char *const *gold, const char *const *pred, size_t n,
                            const char *label, tfm_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(gold[i], label) || !strcmp(pred[i], label))
            return 0;
    /* the first few labels, in order of appearance, for the message */
    tfm_buf list = {0};
    const char *seen[8];
    size_t ns = 0, more = 0;
    for (size_t i = 0; i < 2 * n && !more; i++) {
        const char *s = i < n ? gold[i] : pred[i - n];
        size_t k = 0;
        while (k < ns && strcmp(seen[k], s))
            k++;
        if (k < ns)
            continue;
        if (ns == 8) {
            more = 1;
            break;
        }
        seen[ns++] = s;
        tfm_buf_printf(&list, "%s'%.40s'", ns > 1 ? ", " : "", s);
    }
    tfm_err_set(err, "--pos-label '%.60s' is not a label of the data (labels: %s%s)", label,
                list.len ? list.data : "none", more ? ", ..." : "");
    tfm_buf_free(&list);
    return -1;
}

typedef struct lab {
    const char *s;
    size_t i;  /* index into gold (i < n) or pred (n + i) */
} lab;

static int lab_cmp(const void *x, const void *y)
{
    const lab *a = x, *b = y;
    int c = strcmp(a->s, b->s);
    return c ? c : (a->i > b->i) - (a->i < b->i);
}

void tfm_metrics_classify(const char *const *gold, const char *const *pred, size_t n,
                          const char *pos, tfm_classify_result *r)
{
    memset(r, 0, sizeof *r);
    r->n = n;
    if (n == 0)
        return;
    /* id of every gold and predicted label */
    lab *all = tfm_malloc(2 * n * sizeof *all);
    for (size_t i = 0; i < n; i++) {
        all[i] = (lab){gold[i], i};
        all[n + i] = (lab){pred[i], n + i};
    }
    qsort(all, 2 * n, sizeof *all, lab_cmp);
    size_t *id = tfm_malloc(2 * n * sizeof *id), L = 0;
    for (size_t k = 0; k < 2 * n; k++) {
        if (k > 0 && strcmp(all[k].s, all[k - 1].s) != 0)
            L++;
        id[all[k].i] = L;
    }
    L++;
    size_t pos_id = SIZE_MAX;
    if (pos)
        for (size_t k = 0; k < 2 * n; k++)
            if (!strcmp(all[k].s, pos)) {
                pos_id = id[all[k].i];
                break;
            }
    size_t *tp = tfm_calloc(L, sizeof *tp), *ng = tfm_calloc(L, sizeof *ng),
           *np = tfm_calloc(L, sizeof *np);
    for (size_t i = 0; i < n; i++) {
        size_t g = id[i], p = id[n + i];
        ng[g]++;
        np[p]++;
        if (g == p) {
            tp[g]++;
            r->correct++;
        }
    }
    r->labels = L;
    r->accuracy = (double)r->correct / (double)n;
    /* micro F1 as scikit-learn computes it: from micro precision and recall
     * (both the accuracy here), so it carries the same rounding */
    double mp = r->accuracy, mr = r->accuracy;
    r->f1_micro = mp + mr > 0 ? 2 * mp * mr / (mp + mr) : 0;
    double macro = 0, weighted = 0;
    for (size_t l = 0; l < L; l++) {
        double P = np[l] ? (double)tp[l] / (double)np[l] : 0;
        double R = ng[l] ? (double)tp[l] / (double)ng[l] : 0;
        double F = P + R > 0 ? 2 * P * R / (P + R) : 0;
        macro += F;
        weighted += F * (double)ng[l];
    }
    r->f1_macro = macro / (double)L;
    r->f1_weighted = weighted / (double)n;
    /* MCC, multi-class (Gorodkin's R_K) as sklearn.metrics.matthews_corrcoef */
    double N = (double)n, c = (double)r->correct, tt = 0, pp = 0, tpd = 0;
    for (size_t l = 0; l < L; l++) {
        tpd += (double)ng[l] * (double)np[l];
        tt += (double)ng[l] * (double)ng[l];
        pp += (double)np[l] * (double)np[l];
    }
    double cov_tp = c * N - tpd, cov_pp = N * N - pp, cov_tt = N * N - tt;
    r->mcc = cov_pp * cov_tt == 0 ? 0 : cov_tp / sqrt(cov_tt * cov_pp);
    if (pos) {
        r->has_pos = 1;
        if (pos_id != SIZE_MAX) {
            r->pos_tp = tp[pos_id];
            r->pos_pred = np[pos_id];
            r->pos_gold = ng[pos_id];
        }
        double P = r->pos_pred ? (double)r->pos_tp / (double)r->pos_pred : 0;
        double R = r->pos_gold ? (double)r->pos_tp / (double)r->pos_gold : 0;
        r->precision_pos = P;
        r->recall_pos = R;
        r->f1_pos = P + R > 0 ? 2 * P * R / (P + R) : 0;
    }
    free(tp);
    free(ng);
    free(np);
    free(id);
    free(all);
}

/* ---- regression ---------------------------------------------------------- */

double tfm_metrics_pearson(const double *x, const double *y, size_t n)
{
    if (n < 2)
        return NAN;
    double mx = 0, my = 0;
    for (size_t i = 0; i < n; i++) {
        mx += x[i];
        my += y[i];
    }
    mx /= (double)n;
    my /= (double)n;
    double sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < n; i++) {
        double dx = x[i] - mx, dy = y[i] - my;
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if (sxx == 0 || syy == 0)
        return NAN;
    double r = sxy / (sqrt(sxx) * sqrt(syy));
    return r > 1 ? 1 : r < -1 ? -1 : r;
}

typedef struct ranked {
    double v;
    size_t i;
} ranked;

static int ranked_cmp(const void *x, const void *y)
{
    const ranked *a = x, *b = y;
    return (a->v > b->v) - (a->v < b->v);
}

/* 1-based ranks; a run of ties gets the mean of its ranks. */
static void ranks(const double *x, size_t n, double *out)
{
    ranked *t = tfm_malloc((n ? n : 1) * sizeof *t);
    for (size_t i = 0; i < n; i++)
        t[i] = (ranked){x[i], i};
    qsort(t, n, sizeof *t, ranked_cmp);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && t[j].v == t[i].v)
            j++;
        double avg = (double)(i + 1 + j) / 2; /* mean of i+1 .. j */
        for (size_t k = i; k < j; k++)
            out[t[k].i] = avg;
        i = j;
    }
    free(t);
}

double tfm_metrics_spearman(const double *x, const double *y, size_t n)
{
    if (n < 2)
        return NAN;
    double *rx = tfm_malloc(2 * n * sizeof *rx), *ry = rx + n;
    ranks(x, n, rx);
    ranks(y, n, ry);
    double r = tfm_metrics_pearson(rx, ry, n);
    free(rx);
    return r;
}

/* ---- tagging --------------------------------------------------------------- */

/* seqeval's reading of a tag: its first byte, and the type after the first
 * '-' of the rest (the whole rest without one; "_" when empty). */
static void tag_parts(const char *t, char *p, const char **type, size_t *type_len)
{
    *p = t[0];
    const char *rest = t[0] ? t + 1 : t;
    const char *dash = strchr(rest, '-');
    const char *ty = dash ? dash + 1 : rest;
    if (!*ty) {
        *type = "_";
        *type_len = 1;
    } else {
        *type = ty;
        *type_len = strlen(ty);
    }
}

static int end_of_chunk(char pt, char t, int same_type)
{
    if (pt == 'E' || pt == 'S')
        return 1;
    if ((pt == 'B' || pt == 'I') && (t == 'B' || t == 'S' || t == 'O'))
        return 1;
    return pt != 'O' && pt != '.' && !same_type;
}

static int start_of_chunk(char pt, char t, int same_type)
{
    if (t == 'B' || t == 'S')
        return 1;
    if ((pt == 'E' || pt == 'S' || pt == 'O') && (t == 'E' || t == 'I'))
        return 1;
    return t != 'O' && t != '.' && !same_type;
}

size_t tfm_tag_chunks(const char *const *tags, size_t n, tfm_chunk *out)
{
    char pt = 'O';
    const char *ptype = "";
    size_t plen = 0, begin = 0, nc = 0;
    /* one more "O" at the end closes the last chunk */
    for (size_t i = 0; i <= n; i++) {
        char t;
        const char *type;
        size_t len;
        tag_parts(i < n ? tags[i] : "O", &t, &type, &len);
        int same = len == plen && memcmp(type, ptype, len) == 0;
        if (end_of_chunk(pt, t, same))
            out[nc++] = (tfm_chunk){ptype, plen, begin, i - 1};
        if (start_of_chunk(pt, t, same))
            begin = i;
        pt = t;
        ptype = type;
        plen = len;
    }
    return nc;
}

static int chunk_cmp(const void *x, const void *y)
{
    const tfm_chunk *a = x, *b = y;
    if (a->first != b->first)
        return a->first < b->first ? -1 : 1;
    if (a->last != b->last)
        return a->last < b->last ? -1 : 1;
    if (a->type_len != b->type_len)
        return a->type_len < b->type_len ? -1 : 1;
    return memcmp(a->type, b->type, a->type_len);
}

/* Sorts and removes duplicates (seqeval counts a set); returns the count. */
static size_t chunk_set(tfm_chunk *c, size_t n)
{
    qsort(c, n, sizeof *c, chunk_cmp);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (m == 0 || chunk_cmp(&c[m - 1], &c[i]) != 0)
            c[m++] = c[i];
    return m;
}

void tfm_metrics_tag(const char *const *gold, const char *const *pred, const size_t *len,
                     size_t n_sent, tfm_tag_result *r)
{
    memset(r, 0, sizeof *r);
    size_t total = 0;
    for (size_t s = 0; s < n_sent; s++)
        total += len[s];
    tfm_chunk *gc = tfm_malloc((total + 1) * sizeof *gc), *pc = tfm_malloc((total + 1) * sizeof *pc);
    size_t ng = 0, np = 0, off = 0;
    for (size_t s = 0; s < n_sent; s++) {
        /* positions of the whole data, as seqeval's flattening (sentences
         * are separated by an "O", so no chunk crosses them) */
        size_t g0 = ng, p0 = np;
        ng += tfm_tag_chunks(gold + off, len[s], gc + ng);
        np += tfm_tag_chunks(pred + off, len[s], pc + np);
        for (size_t k = g0; k < ng; k++) {
            gc[k].first += off + s;
            gc[k].last += off + s;
        }
        for (size_t k = p0; k < np; k++) {
            pc[k].first += off + s;
            pc[k].last += off + s;
        }
        for (size_t i = 0; i < len[s]; i++)
            r->correct_tokens += !strcmp(gold[off + i], pred[off + i]);
        off += len[s];
    }
    ng = chunk_set(gc, ng);
    np = chunk_set(pc, np);
    size_t i = 0, j = 0, hit = 0;
    while (i < ng && j < np) {
        int c = chunk_cmp(&gc[i], &pc[j]);
        if (c == 0) {
            hit++;
            i++;
            j++;
        } else if (c < 0) {
            i++;
        } else {
            j++;
        }
    }
    r->tokens = total;
    r->gold_chunks = ng;
    r->pred_chunks = np;
    r->correct_chunks = hit;
    r->precision = np ? (double)hit / (double)np : 0;
    r->recall = ng ? (double)hit / (double)ng : 0;
    r->f1 = r->precision + r->recall > 0
                ? 2 * r->precision * r->recall / (r->precision + r->recall) : 0;
    r->token_accuracy = total ? (double)r->correct_tokens / (double)total : 0;
    free(gc);
    free(pc);
}

/* ---- spans --------------------------------------------------------------- */

/* Python's str.isspace (str.split's separators). */
static int py_space(int32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 ||
           c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
           c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* Python's \w in a str pattern: letters, numbers, underscore. */
static int word_char(int32_t c)
{
    if (c < 0)
        return 0;
    if (c < 0x80)
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               c == '_';
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        return 1;
    default:
        return 0;
    }
}

/* string.punctuation: every ASCII graphic character but letters and digits */
static int ascii_punct(unsigned char c)
{
    return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') ||
           (c >= '{' && c <= '~');
}

/* The character before byte i of s (-1 at the start). */
static int32_t char_before(const char *s, size_t i)
{
    if (i == 0)
        return -1;
    size_t k = i - 1;
    while (k > 0 && i - k < 4 && ((unsigned char)s[k] & 0xc0) == 0x80)
        k--;
    size_t adv;
    int32_t c = tfm_utf8_decode((const unsigned char *)s + k, i - k, &adv);
    return k + adv == i ? c : -1;
}

void tfm_squad_normalize(const char *s, size_t n, tfm_buf *out)
{
    tfm_buf lc = {0}, np = {0}, na = {0};
    tfm_utf8_lower(s, n, &lc);
    for (size_t i = 0; i < lc.len; i++)
        if (!ascii_punct((unsigned char)lc.data[i]))
            tfm_buf_putc(&np, lc.data[i]);
    /* re.sub(r'\b(a|an|the)\b', ' ', text): a whole word a, an or the */
    static const char *const art[] = {"the", "an", "a"};
    for (size_t i = 0; i < np.len;) {
        size_t m = 0;
        if (!word_char(char_before(np.data, i)))
            for (int k = 0; k < 3 && !m; k++) {
                size_t l = strlen(art[k]), adv;
                if (i + l <= np.len && memcmp(np.data + i, art[k], l) == 0 &&
                    (i + l == np.len ||
                     !word_char(tfm_utf8_decode((const unsigned char *)np.data + i + l,
                                                np.len - i - l, &adv))))
                    m = l;
            }
        if (m) {
            tfm_buf_putc(&na, ' ');
            i += m;
        } else {
            tfm_buf_putc(&na, np.data[i++]);
        }
    }
    /* ' '.join(text.split()) */
    const unsigned char *u = (const unsigned char *)na.data;
    int in_word = 0, any = 0;
    for (size_t i = 0, adv; i < na.len; i += adv) {
        int32_t c = tfm_utf8_decode(u + i, na.len - i, &adv);
        if (py_space(c)) {
            in_word = 0;
            continue;
        }
        if (!in_word && any)
            tfm_buf_putc(out, ' ');
        tfm_buf_append(out, na.data + i, adv);
        in_word = any = 1;
    }
    tfm_buf_free(&lc);
    tfm_buf_free(&np);
    tfm_buf_free(&na);
}

int tfm_squad_no_answer(const char *pred, size_t pn)
{
    tfm_buf a = {0};
    tfm_squad_normalize(pred, pn, &a);
    int empty = a.len == 0;
    tfm_buf_free(&a);
    return empty;
}

/* The character ending at byte i > 0 of u, its length in *adv (an invalid
 * byte: -1 and 1). */
static int32_t char_ending(const unsigned char *u, size_t i, size_t *adv)
{
    size_t k = i - 1;
    while (k > 0 && i - k < 4 && (u[k] & 0xc0) == 0x80)
        k--;
    int32_t c = tfm_utf8_decode(u + k, i - k, adv);
    if (k + *adv == i)
        return c;
    *adv = 1;
    return -1;
}

void tfm_squad_whole_words(const char *text, size_t len, long *start, long *end)
{
    const unsigned char *u = (const unsigned char *)text;
    size_t s = *start < 0 ? 0 : (size_t)*start > len ? len : (size_t)*start;
    size_t e = *end < (long)s ? s : (size_t)*end > len ? len : (size_t)*end, adv;
    /* whole characters (a byte-level token can end inside one) */
    for (int k = 0; k < 3 && s > 0 && s < len && (u[s] & 0xc0) == 0x80; k++)
        s--;
    while (e < len && (u[e] & 0xc0) == 0x80)
        e++;
    /* no whitespace at the ends */
    while (s < e && py_space(tfm_utf8_decode(u + s, len - s, &adv)))
        s += adv;
    while (e > s && py_space(char_ending(u, e, &adv)))
        e -= adv;
    if (s < e) {
        /* out to the ends of the words the first and last characters are
         * in; punctuation and CJK ideographs are words of their own */
        if (!tfm_bert_char_alone(tfm_utf8_decode(u + s, len - s, &adv)))
            for (int32_t c; s > 0; s -= adv) {
                c = char_ending(u, s, &adv);
                if (py_space(c) || tfm_bert_char_alone(c))
                    break;
            }
        if (!tfm_bert_char_alone(char_ending(u, e, &adv)))
            for (int32_t c; e < len; e += adv) {
                c = tfm_utf8_decode(u + e, len - e, &adv);
                if (py_space(c) || tfm_bert_char_alone(c))
                    break;
            }
    }
    *start = (long)s;
    *end = (long)(s < e ? e : s);
}

int tfm_squad_exact(const char *pred, size_t pn, const char *gold, size_t gn)
{
    tfm_buf a = {0}, b = {0};
    tfm_squad_normalize(pred, pn, &a);
    tfm_squad_normalize(gold, gn, &b);
    int eq = a.len == b.len && (a.len == 0 || memcmp(a.data, b.data, a.len) == 0);
    tfm_buf_free(&a);
    tfm_buf_free(&b);
    return eq;
}

typedef struct word {
    const char *p;
    size_t len;
} word;

static int word_cmp(const void *x, const void *y)
{
    const word *a = x, *b = y;
    size_t m = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->p, b->p, m);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

/* The space-separated words of a normalised text, sorted. */
static size_t words_of(const tfm_buf *b, word **out)
{
    size_t cap = 1, n = 0;
    for (size_t i = 0; i < b->len; i++)
        cap += b->data[i] == ' ';
    *out = tfm_malloc(cap * sizeof **out);
    for (size_t i = 0; i < b->len;) {
        size_t j = i;
        while (j < b->len && b->data[j] != ' ')
            j++;
        if (j > i)
            (*out)[n++] = (word){b->data + i, j - i};
        i = j + 1;
    }
    qsort(*out, n, sizeof **out, word_cmp);
    return n;
}

double tfm_squad_f1(const char *pred, size_t pn, const char *gold, size_t gn)
{
    tfm_buf a = {0}, b = {0};
    tfm_squad_normalize(pred, pn, &a);
    tfm_squad_normalize(gold, gn, &b);
    word *pw, *gw;
    size_t np = words_of(&a, &pw), ng = words_of(&b, &gw);
    /* common = Counter(pred) & Counter(gold): a merge of the sorted words */
    size_t i = 0, j = 0, same = 0;
    while (i < np && j < ng) {
        int c = word_cmp(&pw[i], &gw[j]);
        if (c == 0) {
            same++;
            i++;
            j++;
        } else if (c < 0) {
            i++;
        } else {
            j++;
        }
    }
    double f1 = 0;
    if (same > 0) {
        double P = (double)same / (double)np, R = (double)same / (double)ng;
        f1 = 2 * P * R / (P + R);
    }
    free(pw);
    free(gw);
    tfm_buf_free(&a);
    tfm_buf_free(&b);
    return f1;
}

const char *tfm_metrics_default_pos(const char *const *gold, const char *const *pred, size_t n)
{
    static const char *const cand[] = {"1", "true", "True"};
    const char *a = NULL, *b = NULL;
    for (int k = 0; k < 2; k++) {
        const char *const *d = k ? pred : gold;
        for (size_t i = 0; i < n; i++) {
            const char *s = d[i];
            if (a && !strcmp(s, a))
                continue;
            if (b && !strcmp(s, b))
                continue;
            if (!a)
                a = s;
            else if (!b)
                b = s;
            else
                return NULL;
        }
    }
    for (int c = 0; c < 3; c++)
        if ((a && !strcmp(a, cand[c])) || (b && !strcmp(b, cand[c])))
            return cand[c];
    return NULL;
}

void tfm_metrics_span(const char *const *pred, size_t n, const char *const *gold,
                      const size_t *group, double *exact_match, double *f1)
{
    double em = 0, f = 0;
    for (size_t i = 0; i < n; i++) {
        const char *pr = pred[i];
        double be = 0, bf = 0;
        size_t answers = 0;
        for (size_t k = group[i]; k < group[i + 1]; k++) {
            const char *gs = gold[k];
            if (!*gs) /* "answers": [] or an empty gold line: none */
                continue;
            answers++;
            be = fmax(be, tfm_squad_exact(pr, strlen(pr), gs, strlen(gs)));
            bf = fmax(bf, tfm_squad_f1(pr, strlen(pr), gs, strlen(gs)));
        }
        if (!answers)
            be = bf = tfm_squad_no_answer(pr, strlen(pr));
        em += be;
        f += bf;
    }
    *exact_match = 100 * em / (double)n;
    *f1 = 100 * f / (double)n;
}
