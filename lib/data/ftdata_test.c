/* Fine-tuning examples (data/ftdata.h) and their predictions
 * (data/predict.h): the readers and their errors, label sets, the rows
 * each encoding builds (with BERT's uncased vocabulary and GPT-2's
 * tokenizer from testdata/), span windows and character offsets, and the
 * choice of predictions from given head outputs. */
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
#include "data/ftdata.h"
#include "data/predict.h"
#include "data/taskdata.h"
#include "text/tokenizer.h"

static tfm_tokenizer *bert, *gpt2;

static const char *srcdir(void)
{
    const char *s = getenv("TFM_SRCDIR");
    return s ? s : SRCDIR;
}

static tfm_tokenizer *load(const char *rel)
{
    tfm_buf p = {0};
    tfm_buf_printf(&p, "%s/%s", srcdir(), rel);
    tfm_tokenizer *t = NULL;
    tfm_err err = {0};
    if (tfm_tokenizer_load(&t, tfm_buf_cstr(&p), &err))
        fprintf(stderr, "%s\n", err.msg);
    tfm_buf_free(&p);
    return t;
}

static int setup(void **state)
{
    (void)state;
    bert = load("testdata/bert/bert-base-uncased-vocab.txt");
    gpt2 = load("testdata/gpt2");
    return bert && gpt2 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tfm_tokenizer_free(bert);
    tfm_tokenizer_free(gpt2);
    return 0;
}

static int rd(tfm_ft_data *d, tfm_ft_task task, const char *text, const char *name, int gold,
              int pairs, tfm_err *err)
{
    tfm_ft_read_opts o = {.need_gold = gold, .pairs = pairs};
    return tfm_ft_read(d, task, text, strlen(text), name, &o, err);
}

/* The read fails with a message that starts with want. */
static void read_fails(tfm_ft_task task, const char *text, const char *name, int gold, int pairs,
                       const char *want)
{
    tfm_ft_data d;
    tfm_err err = {0};
    assert_int_equal(rd(&d, task, text, name, gold, pairs, &err), -1);
    if (strncmp(err.msg, want, strlen(want)))
        fail_msg("got '%s', want '%s...'", err.msg, want);
}

static void test_classify_tsv(void **state)
{
    (void)state;
    tfm_ft_data d;
    tfm_err err = {0};
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, "pos\tgood film\r\n\nneg\tbad\n", "t.tsv", 1, -1,
                        &err), 0);
    assert_int_equal(d.n, 2);
    assert_true(d.gold && !d.pairs && !d.jsonl);
    assert_string_equal(d.ex[0].label, "pos");
    assert_string_equal(d.ex[0].a, "good film");
    assert_int_equal(d.ex[1].line, 3);
    assert_null(d.ex[1].b);
    tfm_ft_data_free(&d);
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, "1\ta b\tc d\n", "t.tsv", 1, -1, &err), 0);
    assert_true(d.pairs);
    assert_string_equal(d.ex[0].b, "c d");
    tfm_ft_data_free(&d);
    /* prediction: the model's pairs tell whether a label is there */
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, "good film\nbad one\n", "p.tsv", 0, 0, &err), 0);
    assert_true(!d.gold && d.ex[1].label == NULL);
    tfm_ft_data_free(&d);
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, "a\tb\n", "p.tsv", 0, 1, &err), 0);
    assert_true(!d.gold && d.pairs);
    tfm_ft_data_free(&d);

    read_fails(TFM_FT_CLASSIFY, "pos\tgood\nneg\tx\ty\n", "t.tsv", 1, -1,
               "t.tsv:2: two texts, but line 1 has one");
    read_fails(TFM_FT_CLASSIFY, "pos good\n", "t.tsv", 1, -1,
               "t.tsv:1: 1 field: expected label<TAB>text");
    read_fails(TFM_FT_CLASSIFY, "a\tb\tc\td\n", "t.tsv", 1, -1, "t.tsv:1: 4 fields");
    read_fails(TFM_FT_CLASSIFY, "pos\tok\n \tfoo\n", "t.tsv", 1, -1, "t.tsv:2: empty label");
    read_fails(TFM_FT_CLASSIFY, "pos\t\n", "t.tsv", 1, -1, "t.tsv:1: empty text");
    /* invalid UTF-8: the same message in TSV, CoNLL and JSON Lines */
    read_fails(TFM_FT_CLASSIFY, "pos\tgood\nneg\tb\xe9te\n", "t.tsv", 1, -1,
               "t.tsv:2: invalid UTF-8");
    read_fails(TFM_FT_TAG, "a\tO\n\nb\xc3\tB-X\n", "t.conll", 1, -1,
               "t.conll:3: invalid UTF-8");
    read_fails(TFM_FT_CLASSIFY, "{\"label\": \"x\", \"text\": \"\xff\"}\n", "t.jsonl", 1, -1,
               "t.jsonl:1: invalid UTF-8");
    read_fails(TFM_FT_CLASSIFY, "pos\tgood\nbad\n", "p.tsv", 0, 0,
               "p.tsv:2: no gold data, but line 1 has (every example");
    read_fails(TFM_FT_CLASSIFY, "\n\n", "e.tsv", 1, -1, "e.tsv: no examples");
}

static void test_classify_jsonl(void **state)
{
    (void)state;
    tfm_ft_data d;
    tfm_err err = {0};
    const char *t = "{\"label\": 1, \"text\": \"a \\u00e9\"}\n{\"label\": 0, \"text\": \"b\"}\n";
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, t, "t.jsonl", 1, -1, &err), 0);
    assert_true(d.jsonl && d.gold && !d.pairs);
    assert_string_equal(d.ex[0].label, "1");
    assert_string_equal(d.ex[0].a, "a \xc3\xa9");
    tfm_ft_data_free(&d);
    t = "{\"label\": \"x\", \"text_a\": \"a\", \"text_b\": \"b\"}\n";
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, t, "t.jsonl", 1, -1, &err), 0);
    assert_true(d.pairs);
    assert_string_equal(d.ex[0].b, "b");
    tfm_ft_data_free(&d);

    read_fails(TFM_FT_CLASSIFY, "{\"label\": 1, \"text\": \"a\"}\n{\"label\": 1, \"text\": }\n",
               "t.jsonl", 1, -1, "t.jsonl:2:");
    read_fails(TFM_FT_CLASSIFY, "{\"label\": 1, \"txt\": \"a\"}\n", "t.jsonl", 1, -1,
               "t.jsonl:1: needs \"text\", or \"text_a\" and \"text_b\"");
    read_fails(TFM_FT_CLASSIFY, "{\"label\": [1], \"text\": \"a\"}\n", "t.jsonl", 1, -1,
               "t.jsonl:1:11: \"label\" must be a string or a number");
    read_fails(TFM_FT_CLASSIFY, "{\"text\": \"a\"}\n", "t.jsonl", 1, -1,
               "t.jsonl:1: no \"label\"");
    read_fails(TFM_FT_CLASSIFY, "{\"label\": 1, \"text\": \"a\"}\n[1]\n", "t.jsonl", 1, -1,
               "t.jsonl:2: expected a JSON object, not an array");
}

static void test_labels(void **state)
{
    (void)state;
    tfm_ft_data d;
    tfm_err err = {0};
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, "pos\ta\nneg\tb\npos\tc\n", "t.tsv", 1, -1, &err),
                     0);
    const tfm_ft_data *all[] = {&d};
    tfm_ft_labels l, m;
    assert_int_equal(tfm_ft_labels_from_data(&l, all, 1, -1, &err), 0);
    assert_int_equal(l.n, 2);
    assert_false(l.regression);
    assert_string_equal(l.name[0], "neg");
    assert_int_equal(tfm_ft_label_id(&l, "pos"), 1);
    assert_int_equal(tfm_ft_label_id(&l, "zzz"), -1);
    tfm_buf j = {0};
    tfm_ft_labels_json(&l, TFM_FT_CLASSIFY, &j);
    assert_string_equal(tfm_buf_cstr(&j), "{\"labels\":[\"neg\",\"pos\"],\"pairs\":false}");
    assert_int_equal(tfm_ft_labels_parse(&m, TFM_FT_CLASSIFY, j.data, j.len, "m", &err), 0);
    assert_int_equal(m.n, 2);
    assert_string_equal(m.name[1], "pos");
    tfm_ft_labels_free(&m);
    tfm_ft_labels_free(&l);
    /* a regression decided by the file: forced, refused */
    assert_int_equal(tfm_ft_labels_from_data(&l, all, 1, 1, &err), -1);
    assert_string_equal(err.msg, "t.tsv:1: label 'pos' is not a number (a regression: "
                                 "model.classes 1)");
    tfm_ft_data_free(&d);
    /* integers are classes, a decimal among numbers makes a regression */
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, "1\ta\n0\tb\n", "t.tsv", 1, -1, &err), 0);
    assert_int_equal(tfm_ft_labels_from_data(&l, all, 1, -1, &err), 0);
    assert_true(!l.regression && l.n == 2);
    tfm_ft_labels_free(&l);
    tfm_ft_data_free(&d);
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, "1\ta\n3.8\tb\n", "t.tsv", 1, -1, &err), 0);
    assert_int_equal(tfm_ft_labels_from_data(&l, all, 1, -1, &err), 0);
    assert_true(l.regression);
    tfm_buf_clear(&j);
    tfm_ft_labels_json(&l, TFM_FT_CLASSIFY, &j);
    assert_int_equal(tfm_ft_labels_parse(&m, TFM_FT_CLASSIFY, j.data, j.len, "m", &err), 0);
    assert_true(m.regression);
    tfm_ft_labels_free(&m);
    tfm_ft_labels_free(&l);
    tfm_ft_data_free(&d);
    tfm_buf_free(&j);
    const char *bad = "{\"labels\":[\"b\",\"a\"]}";
    assert_int_equal(tfm_ft_labels_parse(&m, TFM_FT_CLASSIFY, bad, strlen(bad), "m:task", &err),
                     -1);
    assert_non_null(strstr(err.msg, "sorted"));
}

static tfm_ft_enc_opts enc_bert(int max_len)
{
    const tfm_tok_specials *sp = tfm_tokenizer_specials(bert);
    return (tfm_ft_enc_opts){.max_len = max_len, .segments = 1, .cls = sp->cls, .sep = sp->sep,
                             .doc_stride = 128};
}

static void ids_of(tfm_tokenizer *t, const char *s, tfm_ids *out)
{
    tfm_tokenizer_encode(t, NULL, s, strlen(s), 0, out);
}

static void test_encode_classify(void **state)
{
    (void)state;
    tfm_ft_data d;
    tfm_ft_labels l;
    tfm_ft_set s;
    tfm_err err = {0};
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, "pos\tThe cat\tsat down\nneg\tA dog\tran\n", "t.tsv",
                        1, -1, &err), 0);
    const tfm_ft_data *all[] = {&d};
    assert_int_equal(tfm_ft_labels_from_data(&l, all, 1, -1, &err), 0);
    tfm_ft_enc_opts o = enc_bert(64);
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 2, bert, &l, &o, &err), 0);
    /* [CLS] the cat [SEP] sat down [SEP] */
    tfm_ids want = {0};
    tfm_ids_push(&want, 101);
    ids_of(bert, "The cat", &want);
    tfm_ids_push(&want, 102);
    size_t na = want.len;
    ids_of(bert, "sat down", &want);
    tfm_ids_push(&want, 102);
    assert_int_equal(s.n_rows, 2);
    assert_int_equal(s.row[0].len, (int)want.len);
    assert_memory_equal(s.ids.data, want.data, want.len * sizeof *want.data);
    for (size_t i = 0; i < want.len; i++)
        assert_int_equal(s.seg[i], i < na ? 0 : 1);
    assert_int_equal(s.row[0].cls_pos, 0);
    assert_int_equal(s.row[0].label, 1);
    assert_int_equal(s.row[1].label, 0);
    assert_int_equal(s.truncated, 0);
    tfm_ft_set_free(&s);

    /* the head kept, the closing [SEP] too */
    o.max_len = 4;
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 2, bert, &l, &o, &err), 0);
    assert_int_equal(s.row[0].len, 4);
    assert_int_equal(s.ids.data[0], 101);
    assert_int_equal(s.ids.data[1], want.data[1]);
    assert_int_equal(s.ids.data[3], 102);
    assert_int_equal(s.truncated, 2);
    tfm_ft_set_free(&s);
    o.truncate_error = 1;
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 2, bert, &l, &o, &err), -1);
    assert_string_equal(err.msg, "t.tsv:1: 7 tokens, more than the model's context of 4 "
                                 "(data.truncate head cuts it)");
    tfm_ft_data_free(&d);

    /* a pair is cut longest-first: B keeps its tokens, A gives up its tail */
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, "pos\tthe cat sat on the mat and then it slept\t"
                        "dog ran\n", "p.tsv", 1, -1, &err), 0);
    o = enc_bert(8);
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 1, bert, &l, &o, &err), 0);
    tfm_ids_clear(&want);
    tfm_ids_push(&want, 101);
    ids_of(bert, "the cat sat", &want);
    tfm_ids_push(&want, 102);
    ids_of(bert, "dog ran", &want);
    tfm_ids_push(&want, 102);
    assert_int_equal(want.len, 8);
    assert_int_equal(s.row[0].len, 8);
    assert_memory_equal(s.ids.data, want.data, want.len * sizeof *want.data);
    for (size_t i = 0; i < want.len; i++)
        assert_int_equal(s.seg[i], i < 5 ? 0 : 1);
    assert_int_equal(s.truncated, 1);
    tfm_ft_set_free(&s);
    tfm_ft_data_free(&d);

    /* a label the model does not know */
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, "pos\ta\tb\nmaybe\tc\td\n", "v.tsv", 1, -1, &err),
                     0);
    o = enc_bert(64);
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 2, bert, &l, &o, &err), -1);
    assert_string_equal(err.msg, "v.tsv:2: label 'maybe' is not one of the model's 2 labels "
                                 "(neg, pos)");
    tfm_ft_data_free(&d);
    tfm_ft_labels_free(&l);
    tfm_ids_free(&want);
}

static void test_encode_decoder(void **state)
{
    (void)state;
    tfm_ft_data d;
    tfm_ft_set s;
    tfm_err err = {0};
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, "x y\tHello there\n", "p.tsv", 0, 1, &err), 0);
    tfm_ft_enc_opts o = {.decoder = 1, .max_len = 64, .eos = 50256, .both_orders = 1};
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 1, gpt2, NULL, &o, &err), 0);
    tfm_ids a = {0}, b = {0};
    ids_of(gpt2, "x y", &a);
    tfm_ids_push(&a, 50256);
    ids_of(gpt2, "Hello there", &a);
    tfm_ids_push(&a, 50256);
    ids_of(gpt2, "Hello there", &b);
    tfm_ids_push(&b, 50256);
    ids_of(gpt2, "x y", &b);
    tfm_ids_push(&b, 50256);
    assert_int_equal(s.n_rows, 2);
    assert_int_equal(s.ex_row[1], 2);
    assert_int_equal(s.row[0].len, (int)a.len);
    assert_memory_equal(s.ids.data, a.data, a.len * 4);
    assert_memory_equal(s.ids.data + s.row[1].off, b.data, b.len * 4);
    assert_int_equal(s.row[1].cls_pos, (int)b.len - 1);
    assert_null(s.seg);
    assert_int_equal(s.row[0].label, -1);
    tfm_ft_set_free(&s);

    /* cut longest-first (a tie costs B a token), both orders holding the
     * same cut texts: 3 positions for "x y" and "Hello there" (2 and 2) */
    o.max_len = 5;
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 1, gpt2, NULL, &o, &err), 0);
    tfm_ids_clear(&a);
    tfm_ids_clear(&b);
    ids_of(gpt2, "x y", &a);
    tfm_ids_push(&a, 50256);
    ids_of(gpt2, "Hello", &a);
    tfm_ids_push(&a, 50256);
    ids_of(gpt2, "Hello", &b);
    tfm_ids_push(&b, 50256);
    ids_of(gpt2, "x y", &b);
    tfm_ids_push(&b, 50256);
    assert_int_equal(a.len, 5);
    assert_int_equal(s.row[0].len, 5);
    assert_memory_equal(s.ids.data, a.data, a.len * 4);
    assert_memory_equal(s.ids.data + s.row[1].off, b.data, b.len * 4);
    assert_int_equal(s.truncated, 1);
    tfm_ft_set_free(&s);
    tfm_ft_data_free(&d);
    tfm_ids_free(&a);
    tfm_ids_free(&b);
}

static void test_tags(void **state)
{
    (void)state;
    tfm_ft_data d;
    tfm_ft_labels l;
    tfm_ft_set s;
    tfm_err err = {0};
    const char *t = "-DOCSTART- O\n\nJohn\tB-PER\nlikes\tO\nplaygrounds\tO\n\nHi\tO\n";
    assert_int_equal(rd(&d, TFM_FT_TAG, t, "t.conll", 1, -1, &err), 0);
    assert_int_equal(d.n, 2);
    assert_int_equal(d.n_word, 4);
    assert_int_equal(d.ex[0].line, 3);
    assert_string_equal(d.word[2], "playgrounds");
    assert_string_equal(d.tag[0], "B-PER");
    const tfm_ft_data *all[] = {&d};
    assert_int_equal(tfm_ft_labels_from_data(&l, all, 1, -1, &err), 0);
    assert_int_equal(l.n, 2);
    tfm_ft_enc_opts o = enc_bert(64);
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 2, bert, &l, &o, &err), 0);
    tfm_ids w = {0};
    ids_of(bert, "playgrounds", &w);
    assert_true(w.len >= 2); /* sub-tokens after the first are not tagged */
    const tfm_ft_row *r = &s.row[0];
    assert_int_equal(r->len, (int)(4 + w.len));
    assert_int_equal(s.word_pos[0], 1);
    assert_int_equal(s.word_pos[1], 2);
    assert_int_equal(s.word_pos[2], 3);
    int32_t per = (int32_t)tfm_ft_label_id(&l, "B-PER"), O = (int32_t)tfm_ft_label_id(&l, "O");
    assert_int_equal(s.tag[r->off + 0], -1);
    assert_int_equal(s.tag[r->off + 1], per);
    assert_int_equal(s.tag[r->off + 2], O);
    assert_int_equal(s.tag[r->off + 3], O);
    for (size_t i = 1; i < w.len; i++)
        assert_int_equal(s.tag[r->off + 3 + i], -1);
    assert_int_equal(s.tag[r->off + (size_t)r->len - 1], -1);
    tfm_ft_set_free(&s);
    /* cut: the words past the context have no position */
    o.max_len = 4;
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 1, bert, &l, &o, &err), 0);
    assert_int_equal(s.word_pos[1], 2);
    assert_int_equal(s.word_pos[2], -1);
    assert_int_equal(s.truncated, 1);
    tfm_ft_set_free(&s);
    tfm_ft_data_free(&d);
    tfm_ids_free(&w);

    /* GPT-2 spells a word after the first with its space */
    assert_int_equal(rd(&d, TFM_FT_TAG, "{\"tokens\": [\"Hi\", \"there\"], \"tags\": [\"O\", \"O\"]}\n",
                        "t.jsonl", 1, -1, &err), 0);
    o = (tfm_ft_enc_opts){.max_len = 64, .cls = 50256, .sep = 50256};
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 1, gpt2, &l, &o, &err), 0);
    ids_of(gpt2, " there", &w);
    assert_int_equal(w.len, 1);
    assert_int_equal(s.ids.data[2], w.data[0]);
    tfm_ft_set_free(&s);
    tfm_ft_data_free(&d);
    tfm_ft_labels_free(&l);
    tfm_ids_free(&w);

    read_fails(TFM_FT_TAG, "John\tB-PER\nlikes\n", "t.conll", 1, -1,
               "t.conll:2: one column: expected word<TAB>tag");
    read_fails(TFM_FT_TAG, "John B-PER\nlikes O x\n", "t.conll", 0, -1,
               "t.conll:2: 3 columns, but line 1 has 2");
    read_fails(TFM_FT_TAG, "{\"tokens\": [\"a\", \"b\"], \"tags\": [\"O\"]}\n", "t.jsonl", 1, -1,
               "t.jsonl:1:32: \"tags\" must be an array of 2 tags");
    /* the one-column rule alone: -DOCSTART- and blank lines are no words */
    assert_int_equal(tfm_taskdata_conll_untagged("-DOCSTART- -X- O\n\nJohn B-PER\r\n", 30), 0);
    assert_int_equal(tfm_taskdata_conll_untagged("-DOCSTART-\n\na O\n b \r\n", 21), 4);
    /* words alone: prediction */
    assert_int_equal(rd(&d, TFM_FT_TAG, "John\nlikes\n\nHi\n", "p.conll", 0, -1, &err), 0);
    assert_true(!d.gold && d.n == 2 && d.tag[0] == NULL);
    assert_string_equal(d.word[1], "likes");
    tfm_ft_data_free(&d);
}

/* "Café" is 4 characters and 5 bytes: answer_start counts characters. */
static const char *squad =
    "{\"id\": \"q1\", \"context\": \"Caf\\u00e9 au lait is a drink made of coffee and hot milk "
    "in France.\", \"question\": \"What is made of coffee?\", \"answers\": {\"text\": "
    "[\"lait\", \"au lait\"], \"answer_start\": [8, 5]}}\n";

static void test_spans(void **state)
{
    (void)state;
    tfm_ft_data d;
    tfm_ft_set s;
    tfm_err err = {0};
    assert_int_equal(rd(&d, TFM_FT_SPAN, squad, "s.jsonl", 1, -1, &err), 0);
    assert_int_equal(d.n_ans, 2);
    assert_int_equal(d.ans[0].start, 9);
    assert_int_equal(d.ans[1].start, 6);
    assert_string_equal(d.ex[0].id, "q1");
    /* a window of 6 context tokens beside [CLS] question(6) [SEP] ... [SEP] */
    tfm_ids q = {0}, c = {0};
    ids_of(bert, d.ex[0].b, &q);
    ids_of(bert, d.ex[0].a, &c);
    tfm_ft_enc_opts o = enc_bert((int)q.len + 3 + 6);
    o.doc_stride = 4;
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 1, bert, NULL, &o, &err), 0);
    size_t windows = 1 + (c.len - 6 + 3) / 4;
    assert_int_equal(s.n_rows, windows);
    int with_answer = 0;
    for (size_t i = 0; i < s.n_rows; i++) {
        const tfm_ft_row *r = &s.row[i];
        assert_int_equal(r->ctx_tok, 4 * i);
        assert_int_equal(r->ctx_pos, (int)q.len + 2);
        assert_int_equal(s.ids.data[r->off + (size_t)r->len - 1], 102);
        assert_int_equal(s.seg[r->off + (size_t)r->ctx_pos], 1);
        assert_int_equal(s.seg[r->off + (size_t)r->ctx_pos - 1], 0);
        if (r->start == 0) {
            assert_int_equal(r->end, 0);
            continue;
        }
        with_answer++;
        /* the first answer's tokens ("lai", "##t") read back from the context */
        size_t t0 = r->ctx_tok + (size_t)(r->start - r->ctx_pos);
        size_t t1 = r->ctx_tok + (size_t)(r->end - r->ctx_pos);
        assert_int_equal(t1, t0 + 1);
        assert_int_equal(s.tok_start[t0], 9);
        assert_int_equal(s.tok_end[t1], 13);
    }
    assert_true(with_answer >= 1);
    tfm_ft_set_free(&s);
    tfm_ft_data_free(&d);
    tfm_ids_free(&q);
    tfm_ids_free(&c);

    read_fails(TFM_FT_SPAN, "{\"context\": \"abc def\", \"question\": \"q\", \"answers\": "
               "[{\"text\": \"def\", \"answer_start\": 3}]}\n", "s.jsonl", 1, -1,
               "s.jsonl:1:85: answer 1: \"def\" is not at character 3 of the context (it has "
               "\" de\" there)");
    read_fails(TFM_FT_SPAN, "pos\tx\n", "s.tsv", 1, -1, "s.tsv:1: expected JSON Lines");
    read_fails(TFM_FT_SPAN, "{\"context\": \"a\", \"question\": \"q\"}\n", "s.jsonl", 1, -1,
               "s.jsonl:1: no \"answers\"");
}

static void test_token_offsets(void **state)
{
    (void)state;
    /* the snowman is [UNK]: it gets the text between its neighbours */
    const char *t = "An \xe2\x98\x83 snow-Man";
    tfm_ids ids = {0};
    ids_of(bert, t, &ids);
    long st[16], en[16];
    assert_true(ids.len >= 5 && ids.len <= 16);
    tfm_ft_token_offsets(bert, t, strlen(t), ids.data, ids.len, st, en);
    assert_int_equal(ids.data[1], 100);
    assert_int_equal(st[0], 0);
    assert_int_equal(en[0], 2);
    assert_int_equal(st[1], 3);
    assert_int_equal(en[1], 6);
    assert_int_equal(st[2], 7);
    assert_int_equal(en[ids.len - 1], (long)strlen(t));
    tfm_ids_free(&ids);
}

/* Head outputs made up to check which prediction is taken. */
static void test_predict(void **state)
{
    (void)state;
    tfm_ft_data d;
    tfm_ft_set s;
    tfm_err err = {0};
    assert_int_equal(rd(&d, TFM_FT_SPAN, squad, "s.jsonl", 0, -1, &err), 0);
    tfm_ft_enc_opts o = enc_bert(128);
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 1, bert, NULL, &o, &err), 0);
    assert_int_equal(s.n_rows, 1);
    const tfm_ft_row *r = &s.row[0];
    tfm_ft_out out = {0};
    out.span = calloc((size_t)r->len * 2, sizeof *out.span);
    int p = r->ctx_pos;
    /* context tokens: café au lai ##t is a ...  The best start (p+5) lies
     * after the best end (p+0): no span; "au lait" (p+1..p+3) wins, and
     * [CLS] (outside the context) is never taken */
    out.span[2 * 0] = 9;
    out.span[2 * (p + 5)] = 5;
    out.span[2 * (p + 1)] = 4;
    out.span[2 * (p + 3) + 1] = 4;
    out.span[2 * (p + 0) + 1] = 6;
    tfm_ft_labels none = {0};
    tfm_ft_pred pr;
    tfm_ft_predict(&s, &out, &none, 30, &pr);
    char *got = tfm_strndup(d.ex[0].a + pr.start[0], (size_t)(pr.end[0] - pr.start[0]));
    assert_string_equal(got, "au lait");
    free(got);
    tfm_ft_pred_free(&pr);
    /* at most two tokens: "au lait" (4 + 4) is too long; the best end p+0
     * with itself as the start (0 + 6) beats p+5 (5 + 0) and p+1 (4 + 0) */
    tfm_ft_predict(&s, &out, &none, 2, &pr);
    got = tfm_strndup(d.ex[0].a + pr.start[0], (size_t)(pr.end[0] - pr.start[0]));
    assert_string_equal(got, "Caf\xc3\xa9");
    free(got);
    assert_true(pr.score[0] < 0);
    tfm_ft_pred_free(&pr);
    free(out.span);
    tfm_ft_set_free(&s);
    tfm_ft_data_free(&d);

    /* a pair in both orders: the mean of the two rows' probabilities */
    assert_int_equal(rd(&d, TFM_FT_CLASSIFY, "a\tb\n", "p.tsv", 0, 1, &err), 0);
    o = (tfm_ft_enc_opts){.decoder = 1, .max_len = 64, .eos = 50256, .both_orders = 1};
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 1, gpt2, NULL, &o, &err), 0);
    float z[4] = {0, (float)log(3.0), (float)log(3.0), 0}; /* p = .25/.75, .75/.25 */
    tfm_ft_out co = {.K = 2, .cls = z};
    tfm_ft_labels two = {0};
    tfm_ft_predict(&s, &co, &two, 30, &pr);
    assert_float_equal(pr.prob[0], 0.5, 1e-6);
    tfm_ft_pred_free(&pr);
    /* a third output the label set does not name is never predicted */
    char *ab[] = {"a", "b"};
    tfm_ft_labels named = {.n = 2, .name = ab};
    float z3[6] = {0, 1, 5, 0, 1, 5};
    tfm_ft_out o3 = {.K = 3, .cls = z3};
    tfm_ft_predict(&s, &o3, &named, 30, &pr);
    assert_int_equal(pr.label[0], 1);
    assert_float_equal(pr.prob[0], 1 / (1 + exp(-1.0)), 1e-6);
    tfm_ft_pred_free(&pr);
    tfm_ft_set_free(&s);
    tfm_ft_data_free(&d);
}

/* Antonín Dvořák wrote it (1893), from Nelahozeves.  BERT uncased:
 * anton ##in d ##vor ##ak wrote it ( 1893 ) , from ne ##lah ##oz ##eves .
 * GPT-2: Ant on ÃŃn ĠD vo Å Ļ Ã¡ k Ġwrote ..., ř cut in two bytes. */
static const char *dvorak =
    "{\"context\": \"Anton\xc3\xadn Dvo\xc5\x99\xc3\xa1k wrote it (1893), from Nelahozeves.\", "
    "\"question\": \"Who wrote it?\", \"answers\": [{\"text\": \"Dvo\xc5\x99\xc3\xa1k\", "
    "\"answer_start\": 8}]}\n";

/* The answer tfm_ft_predict gives when the head points at context tokens
 * first..last of dvorak, and the exact match it scores (percent). */
static char *answer(tfm_tokenizer *tok, tfm_ft_enc_opts o, int first, int last, double *em)
{
    tfm_ft_data d;
    tfm_ft_set s;
    tfm_err err = {0};
    assert_int_equal(rd(&d, TFM_FT_SPAN, dvorak, "w.jsonl", 1, -1, &err), 0);
    assert_int_equal(tfm_ft_encode(&s, &d, 0, 1, tok, NULL, &o, &err), 0);
    assert_int_equal(s.n_rows, 1);
    const tfm_ft_row *r = &s.row[0];
    assert_true(last < r->ctx_len);
    tfm_ft_out out = {0};
    out.span = calloc((size_t)r->len * 2, sizeof *out.span);
    out.span[2 * (size_t)(r->ctx_pos + first)] = 10;
    out.span[2 * (size_t)(r->ctx_pos + last) + 1] = 10;
    tfm_ft_labels none = {0};
    tfm_ft_pred pr;
    tfm_ft_predict(&s, &out, &none, 30, &pr);
    char *got = tfm_strndup(d.ex[0].a + pr.start[0], (size_t)(pr.end[0] - pr.start[0]));
    double v[4];
    tfm_ft_metrics(&d, &s, &pr, &none, v);
    *em = v[1];
    tfm_ft_pred_free(&pr);
    free(out.span);
    tfm_ft_set_free(&s);
    tfm_ft_data_free(&d);
    return got;
}

static void want_answer(tfm_tokenizer *tok, tfm_ft_enc_opts o, int first, int last,
                        const char *want, double want_em)
{
    double em;
    char *got = answer(tok, o, first, last, &em);
    if (strcmp(got, want))
        fail_msg("tokens %d..%d: got '%s', want '%s'", first, last, got, want);
    assert_float_equal(em, want_em, 1e-9);
    free(got);
}

/* Predicted spans become whole words of the context, in the answer and
 * in the metrics (tfm-eval span and training's validation alike). */
static void test_predict_whole_words(void **state)
{
    (void)state;
    tfm_ft_enc_opts o = enc_bert(64);
    /* ending inside a word ("d ##vor" of "Dvořák"): the whole word */
    want_answer(bert, o, 2, 3, "Dvo\xc5\x99\xc3\xa1k", 100);
    want_answer(bert, o, 0, 3, "Anton\xc3\xadn Dvo\xc5\x99\xc3\xa1k", 0);
    /* starting with a ## piece: the word from its start */
    want_answer(bert, o, 3, 4, "Dvo\xc5\x99\xc3\xa1k", 100);
    want_answer(bert, o, 1, 1, "Anton\xc3\xadn", 0);
    /* punctuation is a word of its own: the answer holds it only when the
     * span covers it ("ne ##lah" of "Nelahozeves.": not the ".") */
    want_answer(bert, o, 12, 13, "Nelahozeves", 0);
    want_answer(bert, o, 8, 8, "1893", 0);
    want_answer(bert, o, 7, 10, "(1893),", 0);
    want_answer(bert, o, 15, 16, "Nelahozeves.", 0);
    /* byte-level BPE cuts ř in two: from "vo" to the first byte of ř is
     * the whole word, never half a character */
    tfm_ft_enc_opts g = {.max_len = 64, .segments = 1, .cls = 50256, .sep = 50256,
                         .doc_stride = 128};
    want_answer(gpt2, g, 4, 5, "Dvo\xc5\x99\xc3\xa1k", 100);
    want_answer(gpt2, g, 6, 6, "Dvo\xc5\x99\xc3\xa1k", 100);
}

/* The label, tag and answer files (data/taskdata.h). */
static void test_taskdata(void **state)
{
    (void)state;
    tfm_taskdata d;
    tfm_err err = {0};
    const char *lab = " pos \r\nneg\n";
    assert_int_equal(tfm_taskdata_labels(&d, lab, strlen(lab), "l.txt", &err), 0);
    assert_int_equal(d.n, 2);
    assert_string_equal(d.item[0], "pos");
    tfm_taskdata_free(&d);
    assert_int_equal(tfm_taskdata_labels(&d, "a\n\nb\n", 5, "l.txt", &err), -1);
    assert_non_null(strstr(err.msg, "l.txt:2:"));
    assert_int_equal(tfm_taskdata_values(&d, "1.5\n-2e3\n", 9, "v.txt", &err), 0);
    assert_true(d.value[1] == -2000);
    tfm_taskdata_free(&d);
    assert_int_equal(tfm_taskdata_values(&d, "1\n2x\n", 5, "v.txt", &err), -1);
    assert_non_null(strstr(err.msg, "v.txt:2:"));
    assert_int_equal(tfm_taskdata_values(&d, "nan\n", 4, "v.txt", &err), -1);
    /* invalid UTF-8 in any of these files */
    assert_int_equal(tfm_taskdata_labels(&d, "pos\nn\xe9g\n", 8, "l.txt", &err), -1);
    assert_string_equal(err.msg, "l.txt:2: invalid UTF-8");
    assert_int_equal(tfm_taskdata_tags(&d, "a O\n\n\xed\xa0\x80 O\n", 10, "c", TFM_TAGS_CONLL,
                                       &err), -1);
    assert_string_equal(err.msg, "c:3: invalid UTF-8");
    assert_int_equal(tfm_taskdata_answers(&d, "ok\n\xff\n", 5, "a.txt", 1, &err), -1);
    assert_string_equal(err.msg, "a.txt:2: invalid UTF-8");
    /* CoNLL: sentences by blank lines, the tag last, -DOCSTART- skipped */
    const char *conll = "-DOCSTART- O\n\nJohn B-PER\nlives O\n\n\nin O\nParis B-LOC\n";
    assert_int_equal(tfm_taskdata_tags(&d, conll, strlen(conll), "c", TFM_TAGS_AUTO, &err), 0);
    assert_int_equal(d.n_group, 2);
    assert_int_equal(d.n, 4);
    assert_string_equal(d.item[3], "B-LOC");
    assert_int_equal(d.group[1], 2);
    assert_int_equal(d.group_line[1], 7);
    tfm_taskdata_free(&d);
    const char *missing = "John NNP B-PER\nlives VBZ\n";
    assert_int_equal(tfm_taskdata_tags(&d, missing, strlen(missing), "c", TFM_TAGS_CONLL,
                                       &err), -1);
    assert_non_null(strstr(err.msg, "c:2:"));
    /* one sentence a line; auto-detected without blank lines */
    assert_int_equal(tfm_taskdata_tags(&d, "B-X I-X\nO\n", 10, "t", TFM_TAGS_AUTO, &err), 0);
    assert_int_equal(d.n_group, 2);
    tfm_taskdata_free(&d);
    /* an empty sentence is a blank line: auto would take it for CoNLL */
    const char *lines = "B-PER I-PER O\n\nO\tB-LOC\n";
    assert_int_equal(tfm_taskdata_tags(&d, lines, strlen(lines), "t", TFM_TAGS_LINES, &err), 0);
    assert_int_equal(d.n_group, 3);
    assert_int_equal(d.group[1] - d.group[0], 3);
    assert_int_equal(d.group[2] - d.group[1], 0);
    assert_string_equal(d.item[4], "B-LOC");
    tfm_taskdata_free(&d);
    const char *ans = "one\ttwo\n\nthree\n";
    assert_int_equal(tfm_taskdata_answers(&d, ans, strlen(ans), "a", 1, &err), 0);
    assert_int_equal(d.n_group, 3);
    assert_int_equal(d.n, 4);
    assert_string_equal(d.item[2], "");
    tfm_taskdata_free(&d);
}

/* Predictions against gold: counts and sentence lengths, the first line
 * that differs named. */
static void test_taskdata_aligned(void **state)
{
    (void)state;
    tfm_err err = {0};
    assert_int_equal(tfm_taskdata_same_count(3, 3, "p", "g", "lines", &err), 0);
    assert_int_equal(tfm_taskdata_same_count(2, 3, "p", "g", "lines", &err), -1);
    assert_string_equal(err.msg, "p:3: missing: g has 3 lines, p only 2");
    assert_int_equal(tfm_taskdata_same_count(4, 3, "p", "g", "sentences", &err), -1);
    assert_string_equal(err.msg, "p:4: one too many: g has only 3 sentences");
    tfm_taskdata g, p;
    const char *gold = "John B-PER\nlives O\n\nin O\nParis B-LOC\n";
    const char *pred = "B-PER O\nO\n";
    assert_int_equal(tfm_taskdata_tags(&g, gold, strlen(gold), "g", TFM_TAGS_AUTO, &err), 0);
    assert_int_equal(tfm_taskdata_tags(&p, pred, strlen(pred), "p", TFM_TAGS_AUTO, &err), 0);
    assert_int_equal(tfm_taskdata_same_sentences(&p, &g, "p", "g", &err), -1);
    assert_string_equal(err.msg, "p:2: sentence 2 has 1 tag, but 2 at g:4");
    tfm_taskdata_free(&p);
    pred = "B-PER O\nO B-LOC\n";
    assert_int_equal(tfm_taskdata_tags(&p, pred, strlen(pred), "p", TFM_TAGS_AUTO, &err), 0);
    assert_int_equal(tfm_taskdata_same_sentences(&p, &g, "p", "g", &err), 0);
    tfm_taskdata_free(&p);
    tfm_taskdata_free(&g);
}

/* Predictions from a model with NaN weights are refused: the outputs a
 * classifier, tagger or span head gave are checked before any metric. */
static void test_nonfinite_outputs(void **state)
{
    float cls[6] = {1, 2, 3, 4, 5, 6}, span[4] = {0, 1, 2, 3};
    tfm_ft_set s = {.task = TFM_FT_CLASSIFY, .n_rows = 3};
    tfm_ft_out o = {.K = 2, .cls = cls};
    tfm_err e = {0};
    assert_int_equal(tfm_ft_out_check(&o, &s, "m.st", &e), 0);
    cls[5] = NAN;
    assert_int_equal(tfm_ft_out_check(&o, &s, "m.st", &e), -1);
    assert_non_null(strstr(e.msg, "m.st: the model's outputs are not finite (NaN)"));
    s.ids.len = 2;
    tfm_ft_out so = {.span = span};
    assert_int_equal(tfm_ft_out_check(&so, &s, "m.st", &e), 0);
    span[3] = INFINITY;
    assert_int_equal(tfm_ft_out_check(&so, &s, "m.st", &e), -1);
    assert_non_null(strstr(e.msg, "(infinite)"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classify_tsv),  cmocka_unit_test(test_classify_jsonl),
        cmocka_unit_test(test_labels),        cmocka_unit_test(test_encode_classify),
        cmocka_unit_test(test_encode_decoder), cmocka_unit_test(test_tags),
        cmocka_unit_test(test_spans),         cmocka_unit_test(test_token_offsets),
        cmocka_unit_test(test_predict),       cmocka_unit_test(test_predict_whole_words),
        cmocka_unit_test(test_taskdata),      cmocka_unit_test(test_nonfinite_outputs),
        cmocka_unit_test(test_taskdata_aligned),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
