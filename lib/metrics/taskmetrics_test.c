/* The task metrics against the reference tools: every case of
 * testdata/metrics/bleu.jsonl (sacrebleu 2.6.0) and metrics.jsonl
 * (scikit-learn, SciPy, seqeval, the SQuAD v1.1 script), copied from the
 * team's golden files; then hand-checked cases of the 13a tokenizer, the
 * chunk rules, SQuAD normalisation, ties and undefined values, and the
 * label file readers' errors; the text-to-text scores likewise. */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/file.h"
#include "metrics/bleu.h"
#include "metrics/taskmetrics.h"
#include "metrics/textmetrics.h"
#include "io/json.h"

static const char *srcdir(void)
{
    const char *s = getenv("TFM_SRCDIR");
    return s ? s : SRCDIR;
}

/* Calls fn on every line of a JSONL file of testdata/metrics; returns the
 * number of lines. */
static size_t each_case(const char *file, void (*fn)(const tfm_json *, long))
{
    tfm_buf path = {0};
    tfm_buf_printf(&path, "%s/testdata/metrics/%s", srcdir(), file);
    tfm_map m;
    tfm_err err = {0};
    if (tfm_map_open(&m, tfm_buf_cstr(&path), &err) < 0)
        fail_msg("%s", err.msg);
    size_t n = 0;
    long line = 0;
    for (size_t pos = 0; pos < m.size;) {
        const char *s = (const char *)m.data + pos, *nl = memchr(s, '\n', m.size - pos);
        size_t len = nl ? (size_t)(nl - s) : m.size - pos;
        pos += len + (nl != NULL);
        line++;
        if (len == 0)
            continue;
        tfm_json_doc doc;
        if (tfm_json_parse(&doc, s, len, file, 0, &err) < 0)
            fail_msg("%s:%ld: %s", file, line, err.msg);
        fn(doc.root, line);
        tfm_json_doc_free(&doc);
        n++;
    }
    tfm_map_close(&m);
    tfm_buf_free(&path);
    return n;
}

static const tfm_json *get(const tfm_json *o, const char *k)
{
    const tfm_json *v = tfm_json_get(o, k);
    if (!v)
        fail_msg("case without \"%s\"", k);
    return v;
}

static void near(double got, double want, double tol, const char *what, long line)
{
    if (!(fabs(got - want) <= tol))
        fail_msg("line %ld: %s = %.10g, want %.10g", line, what, got, want);
}

/* ---- BLEU and chrF ------------------------------------------------------- */

static void bleu_case(const tfm_json *c, long line)
{
    const tfm_json *hyps = get(c, "hyps"), *refs = get(c, "refs");
    int lc = get(c, "lowercase")->boolean, nrefs = (int)refs->n;
    const char *r[8];
    size_t rl[8];
    assert_true(nrefs >= 1 && nrefs <= 8);
    tfm_bleu_stats st = {0};
    tfm_chrf_stats cs = {0};
    const tfm_json *first5 = get(c, "sentence_bleu_first5");
    for (size_t i = 0; i < hyps->n; i++) {
        for (int k = 0; k < nrefs; k++) {
            assert_int_equal(refs->items[k]->n, hyps->n);
            r[k] = refs->items[k]->items[i]->str;
            rl[k] = refs->items[k]->items[i]->len;
        }
        const tfm_json *h = hyps->items[i];
        tfm_bleu_add(&st, h->str, h->len, r, rl, nrefs, lc);
        tfm_chrf_add(&cs, h->str, h->len, r, rl, nrefs, lc);
        if (i < first5->n) {
            tfm_bleu_stats one = {0};
            tfm_bleu_score sc;
            tfm_bleu_add(&one, h->str, h->len, r, rl, nrefs, lc);
            tfm_bleu_compute(&one, 1, &sc);
            near(sc.bleu, first5->items[i]->num, 1e-3, "sentence BLEU", line);
        }
    }
    tfm_bleu_score sc;
    tfm_bleu_compute(&st, 0, &sc);
    near(sc.bleu, get(c, "bleu")->num, 1e-3, "BLEU", line);
    near(sc.bp, get(c, "bp")->num, 1e-3, "BP", line);
    near(sc.sys_len, get(c, "sys_len")->num, 0, "sys_len", line);
    near(sc.ref_len, get(c, "ref_len")->num, 0, "ref_len", line);
    const tfm_json *p = get(c, "precisions");
    for (int n = 0; n < TFM_BLEU_ORDER; n++)
        near(sc.precisions[n], p->items[n]->num, 1e-3, "precision", line);
    near(tfm_chrf_compute(&cs), get(c, "chrf")->num, 1e-3, "chrF", line);
    tfm_buf sig = {0};
    tfm_bleu_signature(&sig, nrefs, lc, 0);
    assert_string_equal(tfm_buf_cstr(&sig), get(c, "signature")->str);
    tfm_buf_free(&sig);
}

static void test_bleu_golden(void **state)
{
    (void)state;
    assert_true(each_case("bleu.jsonl", bleu_case) >= 34);
}

static void tok(const char *in, int lc, const char *want)
{
    tfm_buf b = {0};
    tfm_bleu_tokenize_13a(in, strlen(in), lc, &b);
    assert_string_equal(tfm_buf_cstr(&b), want);
    tfm_buf_free(&b);
}

static void test_13a(void **state)
{
    (void)state;
    /* punctuation split off, but ' and - kept inside words */
    tok("Hello, world! It's a well-known (test).", 0,
        "Hello , world ! It's a well-known ( test ) .");
    /* . and , stay between digits; - after a digit is split */
    tok("3.14, 1,000 and 5-6 or x-7.", 0, "3.14 , 1,000 and 5 - 6 or x-7 .");
    /* entities unescaped once, in sacrebleu's order */
    tok("&quot;a&quot; &amp;quot; &lt;b&gt;", 0, "\" a \" & quot ; < b >");
    tok("a<skipped>b  \t c \xc2\xa0 d\xe3\x80\x80", 0, "ab c d");
    tok("  ", 0, "");
    tok("\xc3\x84RGER. \xc3\x9c,", 1, "\xc3\xa4rger . \xc3\xbc ,");
    /* "..": the second dot has no non-digit before it left to match */
    tok("end..", 0, "end . .");
}

static void test_bleu_hand(void **state)
{
    (void)state;
    /* two references: the closer length (4, not 6) and the better count */
    const char *r[2] = {"the cat sat down", "a cat sat on the mat"};
    size_t rl[2] = {strlen(r[0]), strlen(r[1])};
    tfm_bleu_stats st = {0};
    tfm_bleu_add(&st, "the cat the mat", 15, r, rl, 2, 0);
    assert_true(st.sys_len == 4 && st.ref_len == 4);
    /* unigrams: the (2, at most 1 per reference), cat, mat: 3 of 4 */
    assert_true(st.correct[0] == 3 && st.total[0] == 4);
    /* bigrams: "the cat", "the mat": 2 of 3; no trigram matches */
    assert_true(st.correct[1] == 2 && st.total[1] == 3);
    assert_true(st.correct[2] == 0 && st.total[2] == 2);
    tfm_bleu_score sc;
    tfm_bleu_compute(&st, 0, &sc);
    /* exp smoothing: 1/(2*2) and 1/(4*1) for the two orders without match */
    double want = exp((log(75.0) + log(200.0 / 3) + log(25.0) + log(25.0)) / 4);
    assert_true(fabs(sc.bleu - want) < 1e-9);
    /* effective order on a two-word line: the mean over 2 orders only */
    tfm_bleu_stats one = {0};
    const char *r1 = "big dog";
    size_t l1 = 7;
    tfm_bleu_add(&one, "big dog", 7, &r1, &l1, 1, 0);
    tfm_bleu_compute(&one, 1, &sc);
    assert_true(fabs(sc.bleu - 100) < 1e-9);
    tfm_bleu_compute(&one, 0, &sc);
    assert_true(sc.bleu < 1e-9);
    tfm_buf sig = {0};
    tfm_chrf_signature(&sig, 2, 1);
    assert_string_equal(tfm_buf_cstr(&sig),
                        "nrefs:2|case:lc|eff:yes|nc:6|nw:0|space:no|version:2.6.0");
    tfm_buf_free(&sig);
    /* chrF: identical texts 100, whitespace does not count, disjoint 0 */
    tfm_chrf_stats cs = {0};
    const char *cr = "ab cd";
    size_t crl = 5;
    tfm_chrf_add(&cs, "abcd", 4, &cr, &crl, 1, 0);
    assert_true(fabs(tfm_chrf_compute(&cs) - 100) < 1e-9);
    memset(&cs, 0, sizeof cs);
    tfm_chrf_add(&cs, "xyz", 3, &cr, &crl, 1, 0);
    assert_true(tfm_chrf_compute(&cs) == 0);
}

/* ---- classification, regression, tagging, spans ------------------------- */

static const char **strings(const tfm_json *a)
{
    const char **s = malloc((a->n + 1) * sizeof *s);
    for (size_t i = 0; i < a->n; i++)
        s[i] = a->items[i]->str;
    return s;
}

static void metrics_case(const tfm_json *c, long line)
{
    const char *kind = get(c, "kind")->str;
    if (!strcmp(kind, "classify")) {
        const tfm_json *g = get(c, "gold"), *p = get(c, "pred");
        const char **gs = strings(g), **ps = strings(p);
        int binary = tfm_json_get(c, "f1_binary_pos") != NULL;
        tfm_classify_result r;
        tfm_metrics_classify(gs, ps, g->n, binary ? "pos" : NULL, &r);
        near(r.accuracy, get(c, "accuracy")->num, 1e-9, "accuracy", line);
        near(r.mcc, get(c, "mcc")->num, 1e-9, "mcc", line);
        near(r.f1_macro, get(c, "f1_macro")->num, 1e-9, "f1_macro", line);
        near(r.f1_micro, get(c, "f1_micro")->num, 1e-9, "f1_micro", line);
        if (binary) {
            near(r.f1_pos, get(c, "f1_binary_pos")->num, 1e-9, "f1 pos", line);
            near(r.precision_pos, get(c, "precision_pos")->num, 1e-9, "precision pos", line);
            near(r.recall_pos, get(c, "recall_pos")->num, 1e-9, "recall pos", line);
        }
        free(gs);
        free(ps);
    } else if (!strcmp(kind, "regress")) {
        const tfm_json *g = get(c, "gold"), *p = get(c, "pred");
        double *x = malloc(g->n * sizeof *x), *y = malloc(g->n * sizeof *y);
        for (size_t i = 0; i < g->n; i++) {
            x[i] = g->items[i]->num;
            y[i] = p->items[i]->num;
        }
        near(tfm_metrics_pearson(x, y, g->n), get(c, "pearson")->num, 1e-9, "pearson", line);
        near(tfm_metrics_spearman(x, y, g->n), get(c, "spearman")->num, 1e-9, "spearman",
             line);
        free(x);
        free(y);
    } else if (!strcmp(kind, "tag")) {
        const tfm_json *g = get(c, "gold"), *p = get(c, "pred");
        size_t total = 0;
        for (size_t s = 0; s < g->n; s++)
            total += g->items[s]->n;
        const char **gs = malloc((total + 1) * sizeof *gs), **ps = malloc((total + 1) * sizeof *ps);
        size_t *len = malloc(g->n * sizeof *len), k = 0;
        for (size_t s = 0; s < g->n; s++) {
            assert_int_equal(g->items[s]->n, p->items[s]->n);
            len[s] = g->items[s]->n;
            for (size_t i = 0; i < len[s]; i++, k++) {
                gs[k] = g->items[s]->items[i]->str;
                ps[k] = p->items[s]->items[i]->str;
            }
        }
        tfm_tag_result r;
        tfm_metrics_tag(gs, ps, len, g->n, &r);
        near(r.f1, get(c, "f1")->num, 1e-9, "f1", line);
        near(r.precision, get(c, "precision")->num, 1e-9, "precision", line);
        near(r.recall, get(c, "recall")->num, 1e-9, "recall", line);
        free(gs);
        free(ps);
        free(len);
    } else if (!strcmp(kind, "span")) {
        const tfm_json *items = get(c, "items");
        double em = 0, f1 = 0;
        for (size_t i = 0; i < items->n; i++) {
            const tfm_json *pr = get(items->items[i], "pred"), *gl = get(items->items[i], "golds");
            double be = 0, bf = 0;
            for (size_t k = 0; k < gl->n; k++) {
                const tfm_json *a = gl->items[k];
                be = fmax(be, tfm_squad_exact(pr->str, pr->len, a->str, a->len));
                bf = fmax(bf, tfm_squad_f1(pr->str, pr->len, a->str, a->len));
            }
            em += be;
            f1 += bf;
        }
        near(100 * em / (double)items->n, get(c, "exact_match")->num, 1e-9, "exact match",
             line);
        near(100 * f1 / (double)items->n, get(c, "f1")->num, 1e-9, "span f1", line);
    } else {
        fail_msg("line %ld: unknown kind %s", line, kind);
    }
}

static void test_metrics_golden(void **state)
{
    (void)state;
    assert_true(each_case("metrics.jsonl", metrics_case) >= 50);
}

static void test_classify_hand(void **state)
{
    (void)state;
    /* 3 classes; confusion rows (gold) a: 2 a, 1 b; b: 1 b; c: 1 a */
    const char *g[] = {"a", "a", "a", "b", "c"}, *p[] = {"a", "a", "b", "b", "a"};
    tfm_classify_result r;
    tfm_metrics_classify(g, p, 5, "b", &r);
    assert_int_equal(r.labels, 3);
    assert_true(fabs(r.accuracy - 0.6) < 1e-12);
    /* F1: a 2*2/(2*2+1+1) = 2/3, b 2/(2+1) = 2/3, c 0 */
    assert_true(fabs(r.f1_macro - 4.0 / 9) < 1e-12);
    /* weighted by gold counts 3, 1, 1: (3 * 2/3 + 2/3 + 0) / 5 */
    assert_true(fabs(r.f1_weighted - (2 + 2.0 / 3) / 5) < 1e-12);
    assert_true(fabs(r.f1_pos - 2.0 / 3) < 1e-12);
    /* MCC: c*N - t.p = 15 - (3*3 + 1*2 + 1*0) = 4, N^2 - p.p = 25 - 13,
     * N^2 - t.t = 25 - 11 */
    assert_true(fabs(r.mcc - 4 / sqrt(12.0 * 14)) < 1e-12);
    /* a positive label nobody uses: 0, not undefined */
    tfm_metrics_classify(g, p, 5, "z", &r);
    assert_true(r.has_pos && r.f1_pos == 0 && r.precision_pos == 0);
    /* one class everywhere: MCC 0 as scikit-learn */
    const char *one[] = {"x", "x"};
    tfm_metrics_classify(one, one, 2, NULL, &r);
    assert_true(r.mcc == 0 && r.accuracy == 1);
}

static void test_regress_hand(void **state)
{
    (void)state;
    double x[] = {1, 2, 2, 3}, y[] = {10, 20, 20, 40}, k[] = {5, 5, 5, 5};
    assert_true(fabs(tfm_metrics_spearman(x, y, 4) - 1) < 1e-12);
    /* ranks of x: 1, 2.5, 2.5, 4 */
    double z[] = {4, 3, 2, 1};
    double rx[] = {1, 2.5, 2.5, 4};
    assert_true(fabs(tfm_metrics_spearman(x, z, 4) - tfm_metrics_pearson(rx, z, 4)) < 1e-12);
    assert_true(isnan(tfm_metrics_pearson(x, k, 4)));
    assert_true(isnan(tfm_metrics_spearman(k, y, 4)));
    assert_true(isnan(tfm_metrics_pearson(x, y, 1)));
}

static void test_chunks(void **state)
{
    (void)state;
    /* a stray I- opens a chunk; a type change inside I- splits; E and S */
    const char *t[] = {"I-PER", "I-PER", "I-LOC", "O", "B-ORG", "I-ORG", "E-ORG", "S-MISC",
                       "E-X"};
    tfm_chunk c[9];
    size_t n = tfm_tag_chunks(t, 9, c);
    assert_int_equal(n, 5);
    size_t want[5][2] = {{0, 1}, {2, 2}, {4, 6}, {7, 7}, {8, 8}};
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(c[i].first, want[i][0]);
        assert_int_equal(c[i].last, want[i][1]);
    }
    assert_true(c[0].type_len == 3 && !memcmp(c[0].type, "PER", 3));
    /* sentences do not join: B-X at the end and I-X at the start of the next */
    const char *g[] = {"O", "B-X", "I-X", "O"}, *p[] = {"O", "B-X", "I-X", "O"};
    size_t len2[2] = {2, 2}, len1[1] = {4};
    tfm_tag_result r;
    tfm_metrics_tag(g, p, len2, 2, &r);
    assert_int_equal(r.gold_chunks, 2);
    tfm_metrics_tag(g, p, len1, 1, &r);
    assert_int_equal(r.gold_chunks, 1);
    assert_true(r.f1 == 1 && r.token_accuracy == 1);
    /* no entities predicted: precision 0 (not undefined), F1 0 */
    const char *o[] = {"O", "O", "O", "O"};
    tfm_metrics_tag(g, o, len1, 1, &r);
    assert_true(r.precision == 0 && r.recall == 0 && r.f1 == 0);
    assert_true(fabs(r.token_accuracy - 0.5) < 1e-12);
}

static void norm(const char *in, const char *want)
{
    tfm_buf b = {0};
    tfm_squad_normalize(in, strlen(in), &b);
    assert_string_equal(tfm_buf_cstr(&b), want);
    tfm_buf_free(&b);
}

static void test_squad(void **state)
{
    (void)state;
    norm("The  Cat, an Apple; A-team!", "cat apple ateam");
    norm("theatre a\xc3\xa9 then", "theatre a\xc3\xa9 then");
    norm("\xc2\xabthe\xc2\xbb", "\xc2\xab \xc2\xbb");
    assert_int_equal(tfm_squad_exact("the Answer.", 11, "answer", 6), 1);
    /* pred "cat sat", gold "the cat sat down": P 1, R 2/3 */
    assert_true(fabs(tfm_squad_f1("cat sat", 7, "the cat sat down", 16) - 0.8) < 1e-12);
    /* repeated tokens count as often as both sides have them */
    assert_true(fabs(tfm_squad_f1("x x x", 5, "x y", 3) - 2 * (1.0 / 3) * 0.5 / (1.0 / 3 + 0.5)) <
                1e-12);
    assert_true(tfm_squad_f1("", 0, "", 0) == 0);
    assert_int_equal(tfm_squad_exact("", 0, "a", 1), 1);
}

/* No gold answers: unanswerable (SQuAD v2), right only when empty. */
static void test_squad_no_answer(void **state)
{
    assert_int_equal(tfm_squad_no_answer("", 0), 1);
    assert_int_equal(tfm_squad_no_answer("The.", 4), 1); /* normalises to nothing */
    assert_int_equal(tfm_squad_no_answer("cat", 3), 0);
}

/* The span [s, e) of text widened to whole words is want. */
static void words(const char *text, long s, long e, const char *want)
{
    tfm_squad_whole_words(text, strlen(text), &s, &e);
    assert_true(s >= 0 && s <= e && (size_t)e <= strlen(text));
    char got[64];
    snprintf(got, sizeof got, "%.*s", (int)(e - s), text + s);
    if (strcmp(got, want))
        fail_msg("%s [%ld, %ld): got '%s', want '%s'", text, s, e, got, want);
}

/* A predicted span becomes whole words, as run_squad maps it back. */
static void test_squad_whole_words(void **state)
{
    (void)state;
    /* a span ending or starting inside a word: the whole word */
    words("He met Seth today", 7, 9, "Seth");       /* "Se" */
    words("He met Seth today", 9, 11, "Seth");      /* "th", a ## piece */
    words("He met Seth today", 0, 9, "He met Seth");
    words("He met Seth today", 8, 14, "Seth today");
    words("Seth", 1, 3, "Seth");
    /* punctuation is a word of its own (BERT's BasicTokenizer): attached
     * to a word it stays out unless the span covers it, as get_final_text
     * strips "'s" from "Smith's" */
    words("Steve Smith's car", 6, 9, "Smith");      /* "Smi" */
    words("Steve Smith's car", 0, 11, "Steve Smith");
    words("Steve Smith's car", 6, 13, "Smith's");
    words("Steve Smith's car", 10, 12, "Smith'");   /* "h'": its words */
    words("born (1990).", 7, 9, "1990");            /* "99" */
    words("born (1990).", 5, 12, "(1990).");
    words("in France.", 3, 5, "France");
    words("in France.", 9, 10, ".");
    words("state-of-the-art", 2, 4, "state");
    /* whitespace at the ends goes; whitespace alone is nothing */
    words("a lait \n", 2, 9, "lait");
    words("a   b", 1, 4, "");
    /* multi-byte UTF-8: whole characters, whole words */
    words("Z\xc3\xbcrich ist sch\xc3\xb6n.", 0, 2, "Z\xc3\xbcrich");     /* "Z" + half of ü */
    words("Z\xc3\xbcrich ist sch\xc3\xb6n.", 2, 4, "Z\xc3\xbcrich");     /* from inside ü */
    words("Z\xc3\xbcrich ist sch\xc3\xb6n.", 12, 15, "sch\xc3\xb6n");    /* not the "." */
    words("\xd0\x9c\xd0\xbe\xd1\x81\xd0\xba\xd0\xb2\xd0\xb0, \xd0\xb4\xd0\xb0", 0, 4,
          "\xd0\x9c\xd0\xbe\xd1\x81\xd0\xba\xd0\xb2\xd0\xb0"); /* "Мо" of "Москва," */
    words("cafe\xcc\x81 noir", 0, 3, "cafe\xcc\x81");  /* a combining accent */
    words("caf\xc3\xa9\xe2\x80\x94noir", 0, 2, "caf\xc3\xa9"); /* an em dash (Pd) splits */
    /* CJK ideographs are words of their own, as BERT splits them */
    words("\xe6\x9d\xb1\xe4\xba\xac\xe3\x81\xaf", 1, 2, "\xe6\x9d\xb1");
    words("\xe6\x9d\xb1\xe4\xba\xac\xe3\x81\xaf", 0, 5, "\xe6\x9d\xb1\xe4\xba\xac");
    /* out-of-range offsets are clamped */
    words("ab cd", -3, 1, "ab");
    words("ab cd", 4, 99, "cd");
}

/* tfm-eval score's span rule: the best gold answer; empty gold is none. */
static void test_metrics_span(void **state)
{
    (void)state;
    const char *pred[3] = {"the cat", "a dog", ""};
    const char *gold[4] = {"cat", "big dog", "", ""};
    size_t group[4] = {0, 1, 2, 4};
    double em, f1;
    tfm_metrics_span(pred, 3, gold, group, &em, &f1);
    /* exact 1, 0, 1 (no answer, empty prediction); F1 1, 2/3, 1 */
    assert_true(fabs(em - 200.0 / 3) < 1e-12);
    assert_true(fabs(f1 - 100 * (2 + 2.0 / 3) / 3) < 1e-12);
}

static void test_default_pos(void **state)
{
    (void)state;
    const char *g[3] = {"0", "1", "1"}, *p[3] = {"1", "0", "0"};
    assert_string_equal(tfm_metrics_default_pos(g, p, 3), "1");
    const char *g2[2] = {"false", "true"}, *p2[2] = {"true", "true"};
    assert_string_equal(tfm_metrics_default_pos(g2, p2, 2), "true");
    const char *g3[2] = {"a", "b"}, *p3[2] = {"c", "a"};
    assert_null(tfm_metrics_default_pos(g3, p3, 2)); /* three labels */
    const char *g4[1] = {"x"}, *p4[1] = {"y"};
    assert_null(tfm_metrics_default_pos(g4, p4, 1));
}

/* Corpus counts are the sum of the sentences'. */
static void test_stats_merge(void **state)
{
    (void)state;
    const char *hyp[2] = {"the cat sat on the mat", "a dog ran"};
    const char *ref[2] = {"the cat sat on a mat", "the dog ran fast"};
    tfm_bleu_stats all = {0}, sum = {0};
    tfm_chrf_stats call = {0}, csum = {0};
    for (int i = 0; i < 2; i++) {
        size_t rl = strlen(ref[i]);
        tfm_bleu_stats one = {0};
        tfm_chrf_stats cone = {0};
        tfm_bleu_add(&all, hyp[i], strlen(hyp[i]), &ref[i], &rl, 1, 0);
        tfm_bleu_add(&one, hyp[i], strlen(hyp[i]), &ref[i], &rl, 1, 0);
        tfm_bleu_stats_merge(&sum, &one);
        tfm_chrf_add(&call, hyp[i], strlen(hyp[i]), &ref[i], &rl, 1, 0);
        tfm_chrf_add(&cone, hyp[i], strlen(hyp[i]), &ref[i], &rl, 1, 0);
        tfm_chrf_stats_merge(&csum, &cone);
    }
    assert_memory_equal(&all, &sum, sizeof all);
    assert_memory_equal(&call, &csum, sizeof call);
}

static void test_check_label(void **state)
{
    const char *gold[] = {"a", "b", "a"}, *pred[] = {"b", "c", "a"};
    tfm_err e = {0};
    assert_int_equal(tfm_metrics_check_label(gold, pred, 3, "c", &e), 0);
    assert_int_equal(tfm_metrics_check_label(gold, pred, 3, "nosuch", &e), -1);
    assert_string_equal(e.msg, "--pos-label 'nosuch' is not a label of the data (labels: 'a', "
                               "'b', 'c')");
}

/* ---- text to text (textmetrics.h): the golden cases seen through
 * tfm_metrics_text, then cases worked by hand: trimming, case, several
 * references, the label-set rule, macro F1 over the references' labels -- */

static size_t n_span, n_classify, n_f1;

static void text_metrics_case(const tfm_json *c, long line)
{
    const char *kind = get(c, "kind")->str;
    tfm_text_result r;
    if (!strcmp(kind, "span")) {
        /* one line per question, its gold answers the references */
        const tfm_json *items = get(c, "items");
        size_t n = items->n, total = 0;
        for (size_t i = 0; i < n; i++)
            total += get(items->items[i], "golds")->n;
        const char **hyp = malloc(n * sizeof *hyp), **ref = malloc(total * sizeof *ref);
        size_t *group = malloc((n + 1) * sizeof *group), k = 0;
        for (size_t i = 0; i < n; i++) {
            hyp[i] = get(items->items[i], "pred")->str;
            group[i] = k;
            const tfm_json *g = get(items->items[i], "golds");
            for (size_t j = 0; j < g->n; j++)
                ref[k++] = g->items[j]->str;
        }
        group[n] = k;
        tfm_metrics_text(hyp, n, ref, group, TFM_TEXT_MAX_LABELS, &r);
        near(r.squad_em, get(c, "exact_match")->num, 1e-9, "squad_em", line);
        near(r.squad_f1, get(c, "f1")->num, 1e-9, "squad_f1", line);
        free(hyp);
        free(ref);
        free(group);
        n_span++;
    } else if (!strcmp(kind, "classify")) {
        /* labels as text: exact is the accuracy; macro F1 is scikit-learn's
         * when every predicted label is a gold one (else sklearn averages
         * over the extra labels too, T5 and tfm-eval text do not) */
        const tfm_json *g = get(c, "gold"), *p = get(c, "pred");
        size_t n = g->n;
        const char **hyp = malloc(n * sizeof *hyp), **ref = malloc(n * sizeof *ref);
        size_t *group = malloc((n + 1) * sizeof *group);
        int subset = 1;
        for (size_t i = 0; i < n; i++) {
            hyp[i] = p->items[i]->str;
            ref[i] = g->items[i]->str;
            group[i] = i;
        }
        group[n] = n;
        for (size_t i = 0; i < n; i++) {
            int found = 0;
            for (size_t j = 0; j < n && !found; j++)
                found = !strcmp(hyp[i], ref[j]);
            subset &= found;
        }
        tfm_metrics_text(hyp, n, ref, group, 1000, &r);
        near(r.exact, 100 * get(c, "accuracy")->num, 1e-9, "exact", line);
        if (subset && r.labels) {
            near(r.f1_macro, 100 * get(c, "f1_macro")->num, 1e-9, "f1_macro", line);
            n_f1++;
        }
        free(hyp);
        free(ref);
        free(group);
        n_classify++;
    }
}

static void test_text_golden_metrics(void **state)
{
    (void)state;
    each_case("metrics.jsonl", text_metrics_case);
    assert_true(n_span >= 3);
    assert_true(n_classify >= 3);
    assert_true(n_f1 >= 1);
}

static void text_bleu_case(const tfm_json *c, long line)
{
    if (get(c, "lowercase")->boolean)
        return; /* tfm-eval text compares text as it is */
    const tfm_json *hyps = get(c, "hyps"), *refs = get(c, "refs");
    size_t n = hyps->n, nr = refs->n;
    const char **hyp = malloc(n * sizeof *hyp), **ref = malloc(n * nr * sizeof *ref);
    size_t *group = malloc((n + 1) * sizeof *group);
    for (size_t i = 0; i < n; i++) {
        hyp[i] = hyps->items[i]->str;
        group[i] = i * nr;
        for (size_t k = 0; k < nr; k++)
            ref[i * nr + k] = refs->items[k]->items[i]->str;
    }
    group[n] = n * nr;
    tfm_text_result r;
    tfm_metrics_text(hyp, n, ref, group, 0, &r);
    near(r.bleu, get(c, "bleu")->num, 1e-3, "BLEU", line);
    near(r.chrf, get(c, "chrf")->num, 1e-3, "chrF", line);
    assert_true(r.labels == 0 && isnan(r.f1_macro));
    free(hyp);
    free(ref);
    free(group);
}

static void test_text_golden_bleu(void **state)
{
    (void)state;
    assert_true(each_case("bleu.jsonl", text_bleu_case) >= 34);
}

static void test_text_hand(void **state)
{
    (void)state;
    const char *hyp[] = {"yes", " no ", "maybe", "Yes", "no", "yes"};
    const char *ref[] = {"yes", "no", "no", "yes", "no\n", "no"};
    size_t group[] = {0, 1, 2, 3, 4, 5, 6};
    tfm_text_result r;
    tfm_metrics_text(hyp, 6, ref, group, TFM_TEXT_MAX_LABELS, &r);
    /* exact: lines 0, 1 (spaces dropped) and 4; "Yes" is not "yes" */
    assert_int_equal(r.exact_count, 3);
    assert_true(fabs(r.exact - 50) < 1e-12);
    /* SQuAD's lowercasing makes line 3 a match too; one-word answers: F1 = EM */
    assert_true(fabs(r.squad_em - 400.0 / 6) < 1e-9);
    assert_true(fabs(r.squad_f1 - 400.0 / 6) < 1e-9);
    /* labels yes, no; yes: tp 1 of 2 predicted, 2 gold: F1 1/2; no: tp 2 of
     * 2 predicted, 4 gold: P 1, R 1/2, F1 2/3; "maybe" and "Yes" predict no
     * label: no third class */
    assert_int_equal(r.labels, 2);
    assert_true(fabs(r.f1_macro - 100 * (0.5 + 2.0 / 3) / 2) < 1e-9);
    /* one-token lines: no bigram anywhere, so BLEU is 0 */
    assert_true(r.bleu == 0);
    assert_true(r.chrf > 0 && r.chrf < 100);

    /* several references: the best one counts */
    const char *h2[] = {"the Jared.", "Enoch", "Seth begat Enos"};
    const char *r2[] = {"Enoch", "Jared", "Enos", "Seth", "Enos"};
    size_t g2[] = {0, 2, 4, 5};
    tfm_metrics_text(h2, 3, r2, g2, TFM_TEXT_MAX_LABELS, &r);
    assert_int_equal(r.exact_count, 0); /* "Enoch" is not one of line 2's */
    assert_true(fabs(r.squad_em - 100.0 / 3) < 1e-9);
    /* F1: 1; 0; "seth begat enos" vs "enos": P 1/3, R 1, F1 1/2 */
    assert_true(fabs(r.squad_f1 - 100 * 1.5 / 3) < 1e-9);
    /* 2 distinct first references in 3 lines, not 2 lines each: no label set */
    assert_int_equal(r.labels, 0);
    assert_true(isnan(r.f1_macro));

    /* identical text: every score 100 */
    const char *h3[] = {"In the beginning God created the heaven and the earth."};
    tfm_metrics_text(h3, 1, h3, group, TFM_TEXT_MAX_LABELS, &r);
    assert_true(r.exact == 100 && r.squad_em == 100 && fabs(r.squad_f1 - 100) < 1e-9);
    assert_true(fabs(r.bleu - 100) < 1e-9 && fabs(r.chrf - 100) < 1e-9);
}

static void test_text_label_rule(void **state)
{
    (void)state;
    /* 3 labels in 6 lines: a set; at most 2 allowed: none */
    const char *ref[] = {"a", "b", "c", "a", "b", "c"};
    size_t group[] = {0, 1, 2, 3, 4, 5, 6};
    tfm_text_result r;
    tfm_metrics_text(ref, 6, ref, group, 3, &r);
    assert_int_equal(r.labels, 3);
    assert_true(fabs(r.f1_macro - 100) < 1e-12);
    tfm_metrics_text(ref, 6, ref, group, 2, &r);
    assert_int_equal(r.labels, 0);
    tfm_metrics_text(ref, 5, ref, group, 3, &r); /* 3 labels, 5 lines: < 2 each */
    assert_int_equal(r.labels, 0);
    size_t n = 8;
    const char *t = tfm_text_trim(" \tab c\r\n", &n);
    assert_true(n == 4 && !strncmp(t, "ab c", 4));
    n = 2;
    tfm_text_trim("  ", &n);
    assert_true(n == 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bleu_golden),   cmocka_unit_test(test_13a),
        cmocka_unit_test(test_bleu_hand),     cmocka_unit_test(test_metrics_golden),
        cmocka_unit_test(test_classify_hand), cmocka_unit_test(test_regress_hand),
        cmocka_unit_test(test_chunks),        cmocka_unit_test(test_squad),
        cmocka_unit_test(test_squad_no_answer), cmocka_unit_test(test_check_label),
        cmocka_unit_test(test_squad_whole_words), cmocka_unit_test(test_metrics_span),
        cmocka_unit_test(test_default_pos),   cmocka_unit_test(test_stats_merge),
        cmocka_unit_test(test_text_golden_metrics), cmocka_unit_test(test_text_golden_bleu),
        cmocka_unit_test(test_text_hand),     cmocka_unit_test(test_text_label_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
