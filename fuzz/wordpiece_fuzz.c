/* libFuzzer harness for WordPiece: any bytes, valid UTF-8 or not, must
 * encode without crashing to ids inside the vocabulary, identically with and
 * without a scratch and when split at whitespace; the ids must decode.  The
 * first byte also selects three more targets: the rest as a vocab.txt ('V'),
 * as a tokenizer.json ('J'), and as a training corpus ('T': every word of at
 * most 100 characters must then encode without [UNK], since the alphabet
 * covers it).
 *
 * BERT's vocabulary is read from $TFM_BERT_VOCAB, else
 * $TFM_SRCDIR/testdata/bert/bert-base-uncased-vocab.txt, else
 * testdata/bert/bert-base-uncased-vocab.txt (run from the source tree). */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/json.h"
#include "text/bert_internal.h"
#include "text/wordpiece.h"

static tfm_wordpiece *bert;
static tfm_wordpiece_scratch *scratch;

static void setup(void)
{
    char path[4096];
    const char *v = getenv("TFM_BERT_VOCAB");
    const char *src = getenv("TFM_SRCDIR");
    if (v)
        snprintf(path, sizeof path, "%s", v);
    else
        snprintf(path, sizeof path, "%s/testdata/bert/bert-base-uncased-vocab.txt",
                 src ? src : ".");
    tfm_err err = {0};
    if (tfm_wordpiece_load_vocab_txt(&bert, path, &err)) {
        fprintf(stderr, "wordpiece_fuzz: %s (set TFM_BERT_VOCAB)\n", err.msg);
        abort();
    }
    scratch = tfm_wordpiece_scratch_new();
}

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "wordpiece_fuzz: %s\n", what);
        abort();
    }
}

static int same(const tfm_ids *a, const tfm_ids *b)
{
    return a->len == b->len && (!a->len || !memcmp(a->data, b->data, a->len * sizeof *a->data));
}

/* split: whether whitespace always separates words (not with a null
 * pre_tokenizer). */
static void encode_checks(const tfm_wordpiece *wp, const char *s, size_t n, int split)
{
    tfm_ids a = {0}, b = {0}, c = {0};
    tfm_wordpiece_encode(wp, scratch, s, n, &a);
    tfm_wordpiece_encode(wp, NULL, s, n, &b);
    check(same(&a, &b), "encodings with and without scratch differ");
    uint32_t V = tfm_wordpiece_vocab_size(wp);
    for (size_t i = 0; i < a.len; i++)
        check(a.data[i] < V, "id out of range");
    /* Whitespace separates words: encoding the halves gives the same ids. */
    for (size_t i = 0; split && i < n; i++) {
        if (s[i] == ' ' || s[i] == '\n') {
            tfm_wordpiece_encode(wp, scratch, s, i, &c);
            tfm_wordpiece_encode(wp, scratch, s + i, n - i, &c);
            check(same(&a, &c), "split at whitespace changes the encoding");
            break;
        }
    }
    tfm_buf text = {0};
    tfm_err err = {0};
    check(tfm_wordpiece_decode(wp, a.data, a.len, &text, &err) == 0, "decode failed");
    tfm_buf_free(&text);
    tfm_ids_free(&a);
    tfm_ids_free(&b);
    tfm_ids_free(&c);
}

typedef struct train_ctx {
    const tfm_wordpiece *wp;
    uint32_t unk;
} train_ctx;

static void no_unk(void *ctx, const char *w, size_t n)
{
    train_ctx *t = ctx;
    size_t chars = 0;
    for (size_t i = 0; i < n; i++)
        chars += ((unsigned char)w[i] & 0xC0) != 0x80;
    if (chars > 100)
        return;
    tfm_ids ids = {0};
    tfm_wordpiece_encode_word(t->wp, w, n, &ids);
    for (size_t i = 0; i < ids.len; i++)
        check(ids.data[i] != t->unk, "a trained word encodes to [UNK]");
    tfm_ids_free(&ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!bert)
        setup();
    const char *s = (const char *)data;
    encode_checks(bert, s, size, 1);
    if (size < 1)
        return 0;
    tfm_err err = {0};
    if (data[0] == 'V') {
        /* The rest as a vocab.txt. */
        tfm_wordpiece *wp;
        if (tfm_wordpiece_from_vocab_txt(&wp, s + 1, size - 1, "fuzz.txt", &err) == 0) {
            encode_checks(wp, "unaffable [UNK] héllo, 世界!", 29, 1);
            encode_checks(wp, s + 1, size - 1, 1);
            tfm_wordpiece_free(wp);
        }
    } else if (data[0] == 'J') {
        tfm_json_doc d;
        if (tfm_json_parse(&d, s + 1, size - 1, "fuzz.json", 0, &err) == 0) {
            tfm_wordpiece *wp;
            const tfm_json *r = d.root;
            if (tfm_wordpiece_from_json(&wp, &d, tfm_json_get(r, "model"),
                                        tfm_json_get(r, "normalizer"),
                                        tfm_json_get(r, "pre_tokenizer"), &err) == 0) {
                tfm_wordpiece_decoder_from_json(wp, &d, tfm_json_get(r, "decoder"), &err);
                const tfm_json *pt = tfm_json_get(r, "pre_tokenizer");
                int split = pt && pt->type != TFM_JSON_NULL;
                encode_checks(wp, "unaffable [UNK] héllo, 世界!", 29, split);
                encode_checks(wp, s + 1, size - 1, split);
                tfm_buf j = {0};
                tfm_wordpiece_model_json(wp, &j);
                tfm_buf_free(&j);
                tfm_wordpiece_free(wp);
            }
            tfm_json_doc_free(&d);
        }
    } else if (data[0] == 'T') {
        /* The rest as a corpus. */
        tfm_tok_train_opts o = {.kind = TFM_TOK_WORDPIECE, .vocab_size = 40 + data[1 % size],
                                .min_frequency = 0, .lowercase = -1, .threads = 1};
        tfm_wordpiece_trainer *t = tfm_wordpiece_trainer_new(&o);
        tfm_wordpiece_trainer_feed(t, s + 1, size - 1);
        tfm_wordpiece *wp;
        check(tfm_wordpiece_trainer_finish(t, &wp, &err) == 0, "training failed");
        tfm_wordpiece_trainer_free(t);
        encode_checks(wp, s + 1, size - 1, 1);
        train_ctx c = {wp, tfm_wordpiece_unk_id(wp)};
        tfm_buf word = {0};
        tfm_bert_split(tfm_wordpiece_norm(wp), 1, 1, s + 1, size - 1, &word, no_unk, &c);
        tfm_buf_free(&word);
        tfm_wordpiece_free(wp);
    }
    return 0;
}
