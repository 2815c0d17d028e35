/* The BERT pre-training task's sequences (task_mlm.c) read back token by
 * token: words of the corpus are unique ("w<n>" is id 5 + n), so each
 * token names its document, segment and place, and the tests check that
 * IsNext pairs are consecutive segments of one document, NotNext pairs come
 * from two, lengths stay within the context, the labels are balanced, the
 * masks choose 15% split 80/10/10, whole words stay whole, the same rng
 * repeats a batch and a sequence seen again is masked afresh; and the
 * errors for corpora and tokenizers the task cannot use. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/buf.h"
#include "train/run_config.h"
#include "text/tokenizer.h"
#include "train/task.h"

enum { CLS = 2, SEP = 3, MASK = 4, W0 = 5 };
enum { NDOC = 12, MAXW = 400 };

static char dir[] = "/tmp/tfm-mlm-test.XXXXXX";
static char vocab[96], docs[96], pieces_vocab[96], pieces[96];
static tfm_tokenizer *tok, *wp_tok;

/* word n: its document, its segment (numbered over the corpus), and whether
 * it starts or ends that segment */
static int n_words, n_segs, doc_of[MAXW], seg_of[MAXW], seg_nseg[MAXW];
static int starts_seg[MAXW], ends_seg[MAXW];

static void path(char *p, size_t n, const char *name)
{
    snprintf(p, n, "%s/%s", dir, name);
}

static void write_file(const char *p, const char *text)
{
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    assert_non_null(mkdtemp(dir));
    path(vocab, sizeof vocab, "vocab.txt");
    path(docs, sizeof docs, "docs.txt");
    path(pieces_vocab, sizeof pieces_vocab, "pieces.txt");
    path(pieces, sizeof pieces, "pieces_docs.txt");
    /* NDOC documents of 1..5 segments of 2..4 words, blank lines between
     * (some doubled, some with spaces: still one break) */
    FILE *f = fopen(docs, "w");
    assert_non_null(f);
    for (int j = 0; j < NDOC; j++) {
        int nseg = 1 + j % 5;
        for (int s = 0; s < nseg; s++) {
            int len = 2 + (j * 7 + s * 3) % 3;
            for (int i = 0; i < len; i++) {
                doc_of[n_words] = j;
                seg_of[n_words] = n_segs;
                seg_nseg[n_words] = nseg;
                starts_seg[n_words] = i == 0;
                ends_seg[n_words] = i == len - 1;
                fprintf(f, "%sw%d", i ? " " : "", n_words++);
            }
            fprintf(f, "\n");
            n_segs++;
        }
        fprintf(f, j % 3 == 1 ? "\n  \n" : "\n");
    }
    fclose(f);
    f = fopen(vocab, "w");
    assert_non_null(f);
    fprintf(f, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n");
    for (int n = 0; n < n_words; n++)
        fprintf(f, "w%d\n", n);
    fclose(f);
    tfm_err err = {0};
    assert_int_equal(tfm_tokenizer_load(&tok, vocab, &err), 0);
    /* whole words: x, y, z and p, q continued by ##a, ##b, ##c */
    write_file(pieces_vocab, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nx\ny\nz\np\nq\n##a\n##b\n##c\n");
    assert_int_equal(tfm_tokenizer_load(&wp_tok, pieces_vocab, &err), 0);
    static const char *const w[] = {"xa", "xab", "yc", "z", "p", "q", "zcc", "ybca", "qa"};
    f = fopen(pieces, "w");
    assert_non_null(f);
    unsigned r = 7;
    for (int j = 0; j < 30; j++) {
        for (int s = 0; s < 3; s++) {
            for (int i = 0; i < 6; i++) {
                r = r * 1103515245u + 12345u;
                fprintf(f, "%s%s", i ? " " : "", w[(r >> 16) % 9]);
            }
            fprintf(f, "\n");
        }
        fprintf(f, "\n");
    }
    fclose(f);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tfm_tokenizer_free(tok);
    tfm_tokenizer_free(wp_tok);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void config(tfm_config *c, const char *text, const char *tokpath, int T, int nsp)
{
    tfm_config_defaults(c);
    c->model.kind = TFM_KIND_ENCODER;
    c->model.block_size = T;
    c->model.segments = 2;
    c->model.mlm_head = 1;
    if (nsp) {
        c->model.pooler = 1;
        c->model.classes = 2;
        c->model.nsp = 1;
    }
    c->train.task = nsp ? TFM_CONFIG_TASK_MLM_NSP : TFM_CONFIG_TASK_MLM;
    snprintf(c->data.text, sizeof c->data.text, "%s", text);
    snprintf(c->data.tokenizer, sizeof c->data.tokenizer, "%s", tokpath);
    c->data.val_fraction = 0;
    c->train.batch_size = 16;
}

/* A row as read back: the original ids (masked ones from the targets). */
typedef struct row {
    int32_t orig[128];
    int len, la, lb, label, chosen, content;
} row;

static void read_row(const tfm_batch *b, int r, row *w)
{
    const int32_t *x = b->inputs + (size_t)r * b->T, *y = b->targets + (size_t)r * b->T,
                  *seg = b->segments + (size_t)r * b->T;
    w->len = b->lengths[r];
    assert_true(w->len >= 5 && w->len <= b->T);
    w->chosen = 0;
    for (int t = 0; t < b->T; t++) {
        w->orig[t] = y[t] >= 0 ? y[t] : x[t];
        w->chosen += y[t] >= 0;
        if (t >= w->len)
            assert_true(x[t] == 0 && y[t] == -1);
    }
    assert_int_equal(w->orig[0], CLS);
    assert_int_equal(w->orig[w->len - 1], SEP);
    int sep = 1;
    while (w->orig[sep] != SEP)
        sep++;
    w->la = sep - 1;
    w->lb = w->len - sep - 2;
    w->content = w->la + w->lb;
    assert_true(w->la >= 1 && w->lb >= 1);
    for (int t = 0; t < w->len; t++)
        assert_int_equal(seg[t], t <= sep ? 0 : 1);
    /* [CLS] and [SEP] are never chosen */
    assert_true(y[0] < 0 && y[sep] < 0 && y[w->len - 1] < 0);
    w->label = b->labels ? b->labels[r] : 0;
}

/* Word numbers of A (which 0) or B, checked contiguous. */
static int word(const row *w, int which, int i)
{
    int t = which == 0 ? 1 + i : w->la + 2 + i;
    int n = w->orig[t] - W0;
    assert_true(n >= 0 && n < n_words);
    return n;
}

static void check_contiguous(const row *w, int which)
{
    int n = which == 0 ? w->la : w->lb;
    for (int i = 1; i < n; i++)
        assert_int_equal(word(w, which, i), word(w, which, i - 1) + 1);
}

typedef struct tally {
    long rows, nsp1, chosen, content, masked, random, same;
    long is_next_single, is_next_multi, full, short_rows;
    int docs_seen[NDOC];
} tally;

/* The masks: round(0.15 * content) positions (without whole words), each
 * [MASK], a random word or unchanged. */
static void count_masks(const tfm_batch *b, int r, const row *w, tally *t, int exact)
{
    const int32_t *x = b->inputs + (size_t)r * b->T, *y = b->targets + (size_t)r * b->T;
    long k = lrint(0.15 * w->content);
    k = k < 1 ? 1 : k;
    if (exact)
        assert_int_equal(w->chosen, k);
    else
        assert_true(w->chosen <= k);
    for (int p = 0; p < w->len; p++) {
        if (y[p] < 0)
            continue;
        if (x[p] == MASK)
            t->masked++;
        else if (x[p] == y[p])
            t->same++;
        else {
            assert_true(x[p] >= W0); /* never a special */
            t->random++;
        }
    }
    t->chosen += w->chosen;
    t->content += w->content;
}

/* |observed share - p| within 5 standard deviations of n draws */
static void assert_share(long k, long n, double p)
{
    double sd = sqrt(p * (1 - p) / (double)n);
    if (fabs((double)k / (double)n - p) > 5 * sd)
        fail_msg("share %ld/%ld = %.4f, expected %.4f +- %.4f", k, n, (double)k / (double)n, p,
                 5 * sd);
}

/* Long enough a context that nothing is ever truncated: A and B are whole
 * segments, so their boundaries can be checked exactly. */
static void test_pairs_exact(void **state)
{
    (void)state;
    tfm_config c;
    config(&c, docs, vocab, 48, 1);
    tfm_task *t;
    tfm_err err = {0};
    assert_int_equal(tfm_task_open(&t, &c, tok, NULL, &err), 0);
    assert_string_equal(tfm_task_name(t), "mlm+nsp");
    assert_int_equal(c.model.vocab_size, W0 + n_words);
    tfm_rng rng;
    tfm_rng_seed(&rng, 1);
    tally s = {0};
    for (int i = 0; i < 250; i++) {
        tfm_batch b;
        size_t n;
        assert_int_equal(tfm_task_next(t, &rng, &b, &n, &err), 0);
        size_t tokens = 0;
        for (int r = 0; r < b.B; r++) {
            row w;
            read_row(&b, r, &w);
            tokens += (size_t)w.len;
            check_contiguous(&w, 0);
            check_contiguous(&w, 1);
            int a0 = word(&w, 0, 0), a1 = word(&w, 0, w.la - 1);
            int b0 = word(&w, 1, 0), b1 = word(&w, 1, w.lb - 1);
            assert_int_equal(doc_of[a0], doc_of[a1]);
            assert_int_equal(doc_of[b0], doc_of[b1]);
            s.docs_seen[doc_of[a0]]++;
            int single = seg_nseg[a0] == 1;
            if (!single) /* A is whole segments */
                assert_true(starts_seg[a0] && ends_seg[a1]);
            if (w.label == 0) {
                /* IsNext: what follows A in its document */
                assert_int_equal(doc_of[b0], doc_of[a0]);
                assert_int_equal(b0, a1 + 1);
                if (single) {
                    assert_int_equal(seg_of[b0], seg_of[a0]);
                    s.is_next_single++;
                } else {
                    assert_true(starts_seg[b0] && ends_seg[b1]);
                    s.is_next_multi++;
                }
            } else {
                /* NotNext: whole segments of another document */
                assert_int_not_equal(doc_of[b0], doc_of[a0]);
                assert_true(starts_seg[b0] && ends_seg[b1]);
                s.nsp1++;
            }
            s.rows++;
            count_masks(&b, r, &w, &s, 1);
        }
        assert_int_equal(n, tokens);
    }
    /* about half NotNext (5 sd of 4000 draws) */
    assert_share(s.nsp1, s.rows, 0.5);
    assert_true(s.is_next_single > 100 && s.is_next_multi > 100);
    for (int j = 0; j < NDOC; j++)
        assert_true(s.docs_seen[j] > 0);
    /* 80/10/10 of the chosen; a random word may be the same one (1 in 200) */
    assert_share(s.masked, s.chosen, 0.8);
    assert_share(s.random, s.chosen, 0.1 * (1 - 1.0 / n_words));
    assert_share(s.same, s.chosen, 0.1 + 0.1 / n_words);
    double rate = (double)s.chosen / (double)s.content;
    assert_true(rate > 0.13 && rate < 0.17);
    tfm_task_free(t);
}

/* A short context: pairs are cut to block_size - 3 from the longer side;
 * IsNext B still comes after A in the same document, past a segment
 * boundary (or the cut of a one-segment document). */
static void test_pairs_truncated(void **state)
{
    (void)state;
    tfm_config c;
    config(&c, docs, vocab, 12, 1);
    c.train.short_seq_prob = 0.3;
    tfm_task *t;
    tfm_err err = {0};
    assert_int_equal(tfm_task_open(&t, &c, tok, NULL, &err), 0);
    tfm_rng rng;
    tfm_rng_seed(&rng, 2);
    tally s = {0};
    long cut_front = 0, cut_back = 0; /* A cut inside a segment */
    for (int i = 0; i < 250; i++) {
        tfm_batch b;
        size_t n;
        assert_int_equal(tfm_task_next(t, &rng, &b, &n, &err), 0);
        for (int r = 0; r < b.B; r++) {
            row w;
            read_row(&b, r, &w);
            assert_true(w.content <= 9);
            s.full += w.content == 9;
            s.short_rows += w.content < 6;
            check_contiguous(&w, 0);
            check_contiguous(&w, 1);
            int a0 = word(&w, 0, 0), a1 = word(&w, 0, w.la - 1), b0 = word(&w, 1, 0);
            if (seg_nseg[a0] > 1) {
                cut_front += !starts_seg[a0];
                cut_back += !ends_seg[a1];
            }
            if (w.label == 0) {
                assert_int_equal(doc_of[b0], doc_of[a0]);
                assert_true(b0 > a1);
                int boundary = seg_nseg[a0] == 1;
                for (int m = a1 + 1; m <= b0; m++)
                    boundary |= starts_seg[m];
                assert_true(boundary);
            } else {
                assert_int_not_equal(doc_of[b0], doc_of[a0]);
                s.nsp1++;
            }
            s.rows++;
            count_masks(&b, r, &w, &s, 1);
        }
    }
    assert_share(s.nsp1, s.rows, 0.5);
    assert_true(s.full > 1000 && s.short_rows > 100);
    /* truncation takes from either end */
    assert_true(cut_front > 100 && cut_back > 100);
    tfm_task_free(t);
}

/* data.documents line: every line a document, A and B cut inside it. */
static void test_line_documents(void **state)
{
    (void)state;
    tfm_config c;
    config(&c, docs, vocab, 16, 1);
    c.data.documents = TFM_CONFIG_DOCS_LINE;
    tfm_task *t;
    tfm_err err = {0};
    assert_int_equal(tfm_task_open(&t, &c, tok, NULL, &err), 0);
    char what[256];
    tfm_task_describe(t, what, sizeof what);
    char want[64];
    snprintf(want, sizeof want, "%d documents (%d segments", n_segs, n_segs);
    assert_non_null(strstr(what, want));
    tfm_rng rng;
    tfm_rng_seed(&rng, 3);
    long next = 0;
    for (int i = 0; i < 50; i++) {
        tfm_batch b;
        size_t n;
        assert_int_equal(tfm_task_next(t, &rng, &b, &n, &err), 0);
        for (int r = 0; r < b.B; r++) {
            row w;
            read_row(&b, r, &w);
            int a0 = word(&w, 0, 0), a1 = word(&w, 0, w.la - 1), b0 = word(&w, 1, 0);
            if (w.label == 0) {
                assert_int_equal(seg_of[b0], seg_of[a0]);
                assert_int_equal(b0, a1 + 1);
                next++;
            } else {
                assert_int_not_equal(seg_of[b0], seg_of[a0]);
            }
        }
    }
    assert_true(next > 300);
    tfm_task_free(t);
}

/* Whole words: a chosen word is chosen with all its pieces, and each piece
 * gets its own 80/10/10 draw (google-research/bert's whole-word masking). */
static void test_whole_words(void **state)
{
    (void)state;
    tfm_config c;
    config(&c, pieces, pieces_vocab, 32, 0);
    c.train.whole_word_mask = 1;
    tfm_task *t;
    tfm_err err = {0};
    assert_int_equal(tfm_task_open(&t, &c, wp_tok, NULL, &err), 0);
    char what[256];
    tfm_task_describe(t, what, sizeof what);
    assert_non_null(strstr(what, "whole words"));
    tfm_rng rng;
    tfm_rng_seed(&rng, 4);
    tally s = {0};
    long long_words = 0, mixed = 0;
    for (int i = 0; i < 200; i++) {
        tfm_batch b;
        size_t n;
        assert_int_equal(tfm_task_next(t, &rng, &b, &n, &err), 0);
        for (int r = 0; r < b.B; r++) {
            row w;
            read_row(&b, r, &w);
            const int32_t *x = b.inputs + (size_t)r * b.T, *y = b.targets + (size_t)r * b.T;
            /* words: a piece without "##", or the first of A or of B, and
             * the "##" pieces after it */
            for (int p = 1; p < w.len - 1;) {
                if (p == w.la + 1) {
                    p++;
                    continue;
                }
                int end = p + 1;
                for (;;) {
                    if (end == w.la + 1 || end >= w.len - 1)
                        break;
                    size_t pl;
                    const char *pc = tfm_tokenizer_piece(wp_tok, (uint32_t)w.orig[end], &pl);
                    if (!(pl >= 2 && pc[0] == '#' && pc[1] == '#'))
                        break;
                    end++;
                }
                int chosen = 0, masked = 0;
                for (int q = p; q < end; q++) {
                    chosen += y[q] >= 0;
                    masked += x[q] == MASK;
                }
                assert_true(chosen == 0 || chosen == end - p);
                if (chosen && end - p > 1) {
                    long_words++;
                    mixed += masked > 0 && masked < end - p;
                }
                p = end;
            }
            s.rows++;
            count_masks(&b, r, &w, &s, 0);
        }
    }
    assert_true(long_words > 300);
    assert_true(mixed > 30);
    assert_share(s.masked, s.chosen, 0.8);
    /* words that would overshoot the 15% are passed over, so a little under */
    double rate = (double)s.chosen / (double)s.content;
    assert_true(rate > 0.12 && rate < 0.16);
    tfm_task_free(t);
}

/* Byte-level BPE: a word runs from a token starting with a space to the
 * next; whole words never split. */
static void test_whole_words_bpe(void **state)
{
    (void)state;
    const char *specials[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    tfm_tok_train_opts o = {.kind = TFM_TOK_BPE, .vocab_size = 300, .specials = specials,
                            .n_specials = 5, .lowercase = -1, .threads = 1};
    tfm_tok_trainer *tr = tfm_tok_trainer_new(&o);
    const char text[] = "the cathedral and the bazaar were unremarkable\n";
    tfm_tok_trainer_feed(tr, text, sizeof text - 1);
    tfm_tokenizer *bpe;
    tfm_err err = {0};
    assert_int_equal(tfm_tok_trainer_finish(tr, &bpe, &err), 0);
    tfm_tok_trainer_free(tr);
    char corpus[96];
    path(corpus, sizeof corpus, "bpe.txt");
    FILE *f = fopen(corpus, "w");
    assert_non_null(f);
    for (int j = 0; j < 20; j++)
        fprintf(f, "unremarkable bazaar %d and the cathedral\nthe zebra were there\n\n", j);
    fclose(f);
    tfm_config c;
    config(&c, corpus, "bpe.json", 24, 0);
    c.train.whole_word_mask = 1;
    tfm_task *t;
    assert_int_equal(tfm_task_open(&t, &c, bpe, NULL, &err), 0);
    tfm_rng rng;
    tfm_rng_seed(&rng, 5);
    tfm_buf s = {0};
    long multi = 0;
    for (int i = 0; i < 100; i++) {
        tfm_batch b;
        size_t n;
        assert_int_equal(tfm_task_next(t, &rng, &b, &n, &err), 0);
        for (int r = 0; r < b.B; r++) {
            row w;
            read_row(&b, r, &w);
            const int32_t *y = b.targets + (size_t)r * b.T;
            /* a position continues the word before it when neither side of
             * the join is a space and no [SEP] lies between */
            for (int p = 2; p < w.len - 1; p++) {
                if (p == w.la + 1 || p == w.la + 2)
                    continue;
                uint32_t prev = (uint32_t)w.orig[p - 1], cur = (uint32_t)w.orig[p];
                tfm_buf_clear(&s);
                assert_int_equal(tfm_tokenizer_decode(bpe, &prev, 1, 0, &s, &err), 0);
                int joined = s.len && s.data[s.len - 1] != ' ';
                tfm_buf_clear(&s);
                assert_int_equal(tfm_tokenizer_decode(bpe, &cur, 1, 0, &s, &err), 0);
                joined &= s.len && s.data[0] != ' ';
                if (joined) {
                    assert_int_equal(y[p] >= 0, y[p - 1] >= 0);
                    multi += y[p] >= 0;
                }
            }
        }
    }
    assert_true(multi > 50);
    tfm_buf_free(&s);
    tfm_task_free(t);
    tfm_tokenizer_free(bpe);
}

/* The same rng state gives the same batch (resume repeats it); a sequence
 * drawn again is masked afresh. */
static void test_fresh_masks(void **state)
{
    (void)state;
    char one[96];
    path(one, sizeof one, "one.txt");
    /* one document of two segments: every sequence is the same */
    write_file(one, "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9\nw10 w11 w12 w13 w14 w15 w16 w17 w18 w19\n");
    tfm_config c;
    config(&c, one, vocab, 32, 0);
    c.train.short_seq_prob = 0;
    tfm_task *t;
    tfm_err err = {0};
    assert_int_equal(tfm_task_open(&t, &c, tok, NULL, &err), 0);
    tfm_rng rng, again;
    tfm_rng_seed(&rng, 6);
    int32_t first[32];
    uint32_t seen[16] = {0}; /* masked positions as bits, per row */
    int distinct = 0;
    for (int i = 0; i < 8; i++) {
        again = rng;
        tfm_batch b;
        size_t n;
        assert_int_equal(tfm_task_next(t, &rng, &b, &n, &err), 0);
        size_t bt = (size_t)b.B * b.T;
        int32_t *x = malloc(bt * sizeof *x), *y = malloc(bt * sizeof *y);
        memcpy(x, b.inputs, bt * sizeof *x);
        memcpy(y, b.targets, bt * sizeof *y);
        for (int r = 0; r < b.B; r++) {
            row w;
            read_row(&b, r, &w);
            if (i == 0 && r == 0)
                memcpy(first, w.orig, sizeof first);
            assert_memory_equal(w.orig, first, sizeof first);
            uint32_t bits = 0;
            for (int p = 0; p < b.T; p++)
                if (b.targets[(size_t)r * b.T + p] >= 0)
                    bits |= 1u << p;
            int fresh = 1;
            for (int k = 0; k < distinct && fresh; k++)
                fresh = seen[k] != bits;
            if (fresh && distinct < 16)
                seen[distinct++] = bits;
        }
        assert_int_equal(tfm_task_next(t, &again, &b, &n, &err), 0);
        assert_memory_equal(b.inputs, x, bt * sizeof *x);
        assert_memory_equal(b.targets, y, bt * sizeof *y);
        assert_memory_equal(&again, &rng, sizeof rng);
        free(x);
        free(y);
    }
    assert_true(distinct >= 10);
    tfm_task_free(t);
}

static void expect_error(tfm_config *c, const tfm_tokenizer *tk, const char *want)
{
    tfm_task *t = NULL;
    tfm_err err = {0};
    assert_int_equal(tfm_task_open(&t, c, tk, NULL, &err), -1);
    assert_null(t);
    if (!strstr(err.msg, want))
        fail_msg("error '%s' lacks '%s'", err.msg, want);
}

static void test_errors(void **state)
{
    (void)state;
    char p[96], want[160];
    tfm_config c;
    path(p, sizeof p, "empty.txt");
    write_file(p, "\n  \n\n");
    config(&c, p, vocab, 16, 0);
    snprintf(want, sizeof want, "%s: no text (empty, or only blank lines)", p);
    expect_error(&c, tok, want);

    path(p, sizeof p, "short.txt");
    write_file(p, "w0 w1\nw2\n\nw3\n\nw4 w5\n");
    config(&c, p, vocab, 16, 0);
    snprintf(want, sizeof want, "%s:4: a document of one token", p);
    expect_error(&c, tok, want);

    path(p, sizeof p, "single.txt");
    write_file(p, "w0 w1\nw2 w3\n");
    config(&c, p, vocab, 16, 1);
    snprintf(want, sizeof want, "%s: one document: train.task mlm+nsp", p);
    expect_error(&c, tok, want);
    /* without NSP one document is enough */
    config(&c, p, vocab, 16, 0);
    tfm_task *t;
    tfm_err err = {0};
    assert_int_equal(tfm_task_open(&t, &c, tok, NULL, &err), 0);
    tfm_task_free(t);

    /* a tokenizer without [MASK] */
    char nomask[96];
    path(nomask, sizeof nomask, "nomask.txt");
    write_file(nomask, "[PAD]\n[UNK]\n[CLS]\n[SEP]\nw0\nw1\nw2\nw3\n");
    tfm_tokenizer *nm;
    assert_int_equal(tfm_tokenizer_load(&nm, nomask, &err), 0);
    config(&c, p, nomask, 16, 0);
    snprintf(want, sizeof want, "tokenizer %s has no [MASK]: set data.mask_id", nomask);
    expect_error(&c, nm, want);
    tfm_tokenizer_free(nm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pairs_exact),    cmocka_unit_test(test_pairs_truncated),
        cmocka_unit_test(test_line_documents), cmocka_unit_test(test_whole_words),
        cmocka_unit_test(test_whole_words_bpe), cmocka_unit_test(test_fresh_masks),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
