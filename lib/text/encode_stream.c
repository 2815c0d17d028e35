#include "text/encode_stream.h"

#include <errno.h>
#include <stdatomic.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/file.h"
#include "base/progress.h"
#include "base/rng.h"
#include "base/thread.h"
#include "io/json.h"
#include "io/npy.h"

/* Below this many bytes a round runs on one thread: starting threads would
 * cost more than they save. */
#define MIN_PARALLEL_BYTES (64u << 10)
/* A round is cut into this many parts per thread, taken in turn. */
#define PARTS_PER_THREAD 4

struct part {
    const char *text;
    size_t len;
    tfm_buf out;
    uint64_t seqs, tokens;
    tfm_ids ids;
    uint64_t dropped;
    char first_dropped[64];
    uint64_t line; /* number of the part's next line in the input (sampling) */
    tfm_ids off;   /* n-best offsets */
};

struct tfm_encoder {
    const tfm_tokenizer *tok;
    tfm_enc_opts opts;
    const tfm_tok_specials *sp;
    int pairs;      /* add_special with [CLS]/[SEP] */
    int whole;      /* document mode may not be cut (see tfm_encoder_new) */
    int wide;       /* npy element is u4 */
    uint32_t *sep_ids; /* per-line npy separator */
    size_t n_sep;
    tfm_buf pending;
    size_t scanned; /* pending[0..scanned) holds no cut point */
    int threads;
    tfm_tok_scratch **scratch;
    struct part *parts;
    tfm_out out;          /* text formats */
    tfm_npy_writer npy;   /* npy */
    int open;             /* an output is open (not yet committed) */
    const char *out_name;
    int started;    /* document prefix written */
    int emitted;    /* document: a token has been written */
    int write_failed;     /* errno, or -1 with the message in werr */
    tfm_err werr;
    tfm_enc_stats stats;
};

/* An ASCII graphic character a, then ASCII whitespace b; a line break only
 * after a letter or digit: Llama 3's and Qwen2's pre-tokenizers keep the
 * line breaks after punctuation with it (" ?[^\s\p{L}\p{N}]+[\r\n]*"). */
static int cut_ok(unsigned char a, unsigned char b)
{
    if (a <= 0x20 || a >= 0x7f || !(b == ' ' || (b >= '\t' && b <= '\r')))
        return 0;
    return (b != '\n' && b != '\r') || (a >= '0' && a <= '9') || ((a | 0x20) >= 'a' &&
                                                                   (a | 0x20) <= 'z');
}

static size_t safe_cut_above(const char *text, size_t len, size_t low)
{
    const unsigned char *s = (const unsigned char *)text;
    if (low < 1)
        low = 1;
    for (size_t p = len ? len - 1 : 0; p >= low; p--)
        if (cut_ok(s[p - 1], s[p]))
            return p;
    return 0;
}

size_t tfm_enc_safe_cut(const char *text, size_t len)
{
    return safe_cut_above(text, len, 1);
}

size_t tfm_enc_safe_cut_after(const char *text, size_t len, size_t from)
{
    const unsigned char *s = (const unsigned char *)text;
    for (size_t p = from ? from : 1; p < len; p++)
        if (cut_ok(s[p - 1], s[p]))
            return p;
    return 0;
}

/* Decimal digits without printf, two at a time: formatting ids is a large
 * share of the work for the text formats.  d must have room for 10. */
static char *put_u32(char *d, uint32_t v)
{
    static const char pairs[] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    char tmp[10];
    int n = 10;
    while (v >= 100) {
        uint32_t r = v % 100;
        v /= 100;
        tmp[--n] = pairs[2 * r + 1];
        tmp[--n] = pairs[2 * r];
    }
    if (v >= 10) {
        tmp[--n] = pairs[2 * v + 1];
        tmp[--n] = pairs[2 * v];
    } else {
        tmp[--n] = (char)('0' + v);
    }
    memcpy(d, tmp + n, (size_t)(10 - n));
    return d + (10 - n);
}

static void put_piece(const tfm_encoder *e, tfm_buf *b, uint32_t id)
{
    size_t n = 0;
    const char *p = tfm_tokenizer_piece(e->tok, id, &n);
    if (!p) {
        tfm_buf_printf(b, "<%u>", id);
        return;
    }
    tfm_buf_reserve(b, n * 4);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x21 || c == 0x7f) {
            static const char hex[] = "0123456789abcdef";
            b->data[b->len++] = '\\';
            b->data[b->len++] = 'x';
            b->data[b->len++] = hex[c >> 4];
            b->data[b->len++] = hex[c & 15];
        } else if (c == '\\') {
            b->data[b->len++] = '\\';
            b->data[b->len++] = '\\';
        } else {
            b->data[b->len++] = (char)c;
        }
    }
}

/* Appends ids in the output format, separated but without a leading
 * separator. */
static void put_ids(const tfm_encoder *e, tfm_buf *b, const uint32_t *ids, size_t n)
{
    switch (e->opts.format) {
    case TFM_ENC_IDS:
    case TFM_ENC_JSONL: {
        char sep = e->opts.format == TFM_ENC_IDS ? ' ' : ',';
        tfm_buf_reserve(b, n * 11);
        char *d = b->data + b->len;
        for (size_t i = 0; i < n; i++) {
            if (i)
                *d++ = sep;
            d = put_u32(d, ids[i]);
        }
        b->len = (size_t)(d - b->data);
        break;
    }
    case TFM_ENC_PIECES:
        for (size_t i = 0; i < n; i++) {
            if (i)
                tfm_buf_putc(b, ' ');
            put_piece(e, b, ids[i]);
        }
        break;
    case TFM_ENC_NPY:
        if (e->wide) {
            tfm_buf_reserve(b, n * 4);
            for (size_t i = 0; i < n; i++) {
                uint32_t v = ids[i];
                unsigned char *d = (unsigned char *)b->data + b->len;
                d[0] = (unsigned char)v;
                d[1] = (unsigned char)(v >> 8);
                d[2] = (unsigned char)(v >> 16);
                d[3] = (unsigned char)(v >> 24);
                b->len += 4;
            }
        } else {
            tfm_buf_reserve(b, n * 2);
            for (size_t i = 0; i < n; i++) {
                unsigned char *d = (unsigned char *)b->data + b->len;
                d[0] = (unsigned char)ids[i];
                d[1] = (unsigned char)(ids[i] >> 8);
                b->len += 2;
            }
        }
        break;
    }
}

/* text[0..n) as encoded: counts what the tokenizer dropped */
static void encode_text(tfm_encoder *e, struct part *pt, tfm_tok_scratch *sc, const char *s,
                        size_t n, tfm_ids *out)
{
    if (e->opts.sample) {
        /* each line its own stream: the same samples for any thread count */
        tfm_rng rng;
        tfm_rng_seed(&rng, e->opts.seed + pt->line * 0x9e3779b97f4a7c15ull);
        int rc = tfm_tokenizer_encode_sample(e->tok, s, n, e->opts.sample_alpha, &rng, out, NULL);
        TFM_ASSERT(rc == 0); /* the kind was checked by tfm_encoder_new */
        return;
    }
    tfm_tokenizer_encode(e->tok, sc, s, n, e->opts.split_special, out);
    size_t first;
    size_t k = tfm_tokenizer_dropped(e->tok, s, n, &first);
    if (k && !pt->dropped)
        tfm_tok_describe_char(s + first, n - first, pt->first_dropped);
    pt->dropped += k;
}

/* The n best segmentations of a line. */
static void encode_nbest(tfm_encoder *e, struct part *pt, const char *s, size_t n)
{
    tfm_ids_clear(&pt->ids);
    tfm_ids_clear(&pt->off);
    int rc = tfm_tokenizer_encode_nbest(e->tok, s, n, e->opts.nbest, &pt->ids, &pt->off, NULL);
    TFM_ASSERT(rc == 0);
    pt->seqs++;
    pt->tokens += pt->ids.len;
    tfm_buf *b = &pt->out;
    if (e->opts.format == TFM_ENC_JSONL)
        tfm_buf_puts(b, "{\"nbest\":[");
    for (size_t k = 0; k + 1 < pt->off.len; k++) {
        const uint32_t *ids = pt->ids.data + pt->off.data[k];
        size_t m = pt->off.data[k + 1] - pt->off.data[k];
        if (e->opts.format == TFM_ENC_JSONL) {
            tfm_buf_puts(b, k ? ",[" : "[");
            put_ids(e, b, ids, m);
            tfm_buf_putc(b, ']');
        } else {
            put_ids(e, b, ids, m);
            tfm_buf_putc(b, '\n');
        }
    }
    if (e->opts.format == TFM_ENC_JSONL)
        tfm_buf_puts(b, "]}\n");
}

static void encode_line(tfm_encoder *e, struct part *pt, tfm_tok_scratch *sc,
                        const char *s, size_t n)
{
    const tfm_tok_specials *sp = e->sp;
    if (e->opts.nbest) {
        encode_nbest(e, pt, s, n);
        return;
    }
    tfm_ids_clear(&pt->ids);
    size_t first_len = 0;
    if (e->pairs) {
        const char *tab = memchr(s, '\t', n);
        size_t na = tab ? (size_t)(tab - s) : n;
        tfm_ids_push(&pt->ids, (uint32_t)sp->cls);
        encode_text(e, pt, sc, s, na, &pt->ids);
        tfm_ids_push(&pt->ids, (uint32_t)sp->sep);
        first_len = pt->ids.len;
        if (tab) {
            encode_text(e, pt, sc, tab + 1, n - na - 1, &pt->ids);
            tfm_ids_push(&pt->ids, (uint32_t)sp->sep);
        }
    } else if (e->opts.add_special && sp->prefix >= 0) {
        /* the template's first token (Llama 3's <|begin_of_text|>), as HF */
        tfm_ids_push(&pt->ids, (uint32_t)sp->prefix);
        encode_text(e, pt, sc, s, n, &pt->ids);
    } else {
        encode_text(e, pt, sc, s, n, &pt->ids);
        if (e->opts.add_special && sp->eos >= 0)
            tfm_ids_push(&pt->ids, (uint32_t)sp->eos);
    }
    pt->seqs++;
    pt->tokens += pt->ids.len;

    tfm_buf *b = &pt->out;
    switch (e->opts.format) {
    case TFM_ENC_IDS:
    case TFM_ENC_PIECES:
        put_ids(e, b, pt->ids.data, pt->ids.len);
        tfm_buf_putc(b, '\n');
        break;
    case TFM_ENC_JSONL:
        tfm_buf_puts(b, "{\"ids\":[");
        put_ids(e, b, pt->ids.data, pt->ids.len);
        tfm_buf_putc(b, ']');
        if (e->opts.add_special) {
            tfm_buf_puts(b, ",\"type_ids\":[");
            for (size_t i = 0; i < pt->ids.len; i++) {
                if (i)
                    tfm_buf_putc(b, ',');
                tfm_buf_putc(b, e->pairs && i >= first_len ? '1' : '0');
            }
            tfm_buf_putc(b, ']');
        }
        tfm_buf_puts(b, "}\n");
        break;
    case TFM_ENC_NPY:
        put_ids(e, b, pt->ids.data, pt->ids.len);
        if (!e->opts.add_special || (!e->pairs && sp->eos < 0 && sp->prefix < 0)) {
            put_ids(e, b, e->sep_ids, e->n_sep);
            pt->tokens += e->n_sep;
        }
        break;
    }
}

struct round {
    tfm_encoder *e;
    int n;            /* parts */
    atomic_int next;  /* the next part to take */
};

static void encode_one(tfm_encoder *e, struct part *pt, tfm_tok_scratch *sc)
{
    if (e->opts.document) {
        tfm_ids_clear(&pt->ids);
        encode_text(e, pt, sc, pt->text, pt->len, &pt->ids);
        pt->tokens += pt->ids.len;
        put_ids(e, &pt->out, pt->ids.data, pt->ids.len);
        return;
    }
    const char *s = pt->text, *end = pt->text + pt->len;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        encode_line(e, pt, sc, s, (size_t)(le - s));
        pt->line++;
        s = nl ? nl + 1 : end;
    }
}

/* Thread i takes the round's parts one at a time, so a slow part does not
 * leave the other threads idle. */
static void encode_part(void *ctx, int i, int n)
{
    (void)n;
    struct round *r = ctx;
    int j;
    while ((j = atomic_fetch_add(&r->next, 1)) < r->n)
        encode_one(r->e, &r->e->parts[j], r->e->scratch[i]);
}

static void emit(tfm_encoder *e, const void *p, size_t n)
{
    if (!n || e->write_failed)
        return;
    if (e->opts.format == TFM_ENC_NPY) {
        if (tfm_npy_writer_append(&e->npy, p, n / (e->wide ? 4 : 2), &e->werr) < 0)
            e->write_failed = -1;
    } else if (fwrite(p, 1, n, e->out.fp) != n) {
        e->write_failed = errno ? errno : EIO;
    }
}

static void emit_doc_ids(tfm_encoder *e, const uint32_t *ids, size_t n)
{
    if (!n)
        return;
    tfm_buf b = {0};
    if (e->emitted && e->opts.format != TFM_ENC_NPY)
        tfm_buf_putc(&b, e->opts.format == TFM_ENC_JSONL ? ',' : ' ');
    put_ids(e, &b, ids, n);
    emit(e, b.data, b.len);
    tfm_buf_free(&b);
    e->emitted = 1;
    e->stats.tokens += n;
}

static void doc_start(tfm_encoder *e)
{
    if (e->started)
        return;
    e->started = 1;
    if (e->opts.format == TFM_ENC_JSONL)
        emit(e, "{\"ids\":[", 8);
    if (e->opts.add_special && (e->pairs || e->sp->prefix >= 0)) {
        uint32_t first = (uint32_t)(e->pairs ? e->sp->cls : e->sp->prefix);
        emit_doc_ids(e, &first, 1);
    }
}

/* Encodes text[0..len) (complete lines, or a document piece ending at a
 * safe cut) and writes the output. */
static void run_round(tfm_encoder *e, const char *text, size_t len)
{
    int threads = len < MIN_PARALLEL_BYTES ? 1 : e->threads;
    int n = threads * PARTS_PER_THREAD;
    size_t start = 0;
    for (int i = 0; i < n; i++) {
        size_t end = len;
        if (i < n - 1) {
            size_t target = len / (size_t)n * (size_t)(i + 1);
            if (target <= start)
                target = start + 1;
            if (e->opts.document) {
                size_t c = e->whole ? 0 : tfm_enc_safe_cut_after(text, len, target);
                end = c ? c : len;
            } else {
                const char *nl = target < len ? memchr(text + target, '\n', len - target) : NULL;
                end = nl ? (size_t)(nl - text) + 1 : len;
            }
        }
        struct part *pt = &e->parts[i];
        pt->text = text + start;
        pt->len = end - start;
        tfm_buf_clear(&pt->out);
        pt->seqs = pt->tokens = pt->dropped = 0;
        start = end;
    }
    if (e->opts.sample && !e->opts.document) {
        /* number the lines so that each draws from its own stream */
        uint64_t line = e->stats.sequences;
        for (int i = 0; i < n; i++) {
            struct part *pt = &e->parts[i];
            pt->line = line;
            for (const char *q = pt->text, *qe = pt->text + pt->len;
                 (q = memchr(q, '\n', (size_t)(qe - q))) != NULL; q++)
                line++;
            if (pt->len && pt->text[pt->len - 1] != '\n')
                line++;
        }
    }
    struct round r = {.e = e, .n = n};
    atomic_init(&r.next, 0);
    tfm_parallel_run(threads, encode_part, &r);
    if (e->opts.document)
        doc_start(e);
    for (int i = 0; i < n; i++) {
        struct part *pt = &e->parts[i];
        if (e->opts.document && pt->out.len) {
            if (e->emitted && e->opts.format != TFM_ENC_NPY)
                emit(e, e->opts.format == TFM_ENC_JSONL ? "," : " ", 1);
            e->emitted = 1;
        }
        emit(e, pt->out.data, pt->out.len);
        e->stats.sequences += pt->seqs;
        e->stats.tokens += pt->tokens;
        if (pt->dropped && !e->stats.dropped)
            memcpy(e->stats.first_dropped, pt->first_dropped, sizeof pt->first_dropped);
        e->stats.dropped += pt->dropped;
        /* A huge round must not pin its memory for the rest of the run. */
        if (pt->out.cap > (64u << 20)) {
            tfm_buf_free(&pt->out);
            tfm_ids_free(&pt->ids);
        }
    }
    e->stats.bytes += len;
    if (e->opts.progress)
        tfm_progress_update(e->opts.progress, (double)e->stats.bytes / 1e6);
}

static int cuts_are_invisible(const tfm_tokenizer *tok)
{
    static const char *const probes[] = {
        "x y",
        "Hello, world! It's 3.14 o'clock.\nThe end  \t of  it\r\n  done",
        "caf\xc3\xa9 na\xc3\xafve \xe4\xbd\xa0\xe5\xa5\xbd a\t\tb",
    };
    tfm_ids whole = {0}, cut = {0};
    int ok = 1;
    for (size_t i = 0; ok && i < sizeof probes / sizeof *probes; i++) {
        const char *s = probes[i];
        size_t len = strlen(s);
        tfm_ids_clear(&whole);
        tfm_tokenizer_encode(tok, NULL, s, len, 0, &whole);
        for (size_t p = 0; ok && (p = tfm_enc_safe_cut_after(s, len, p + 1)) != 0;) {
            tfm_ids_clear(&cut);
            tfm_tokenizer_encode(tok, NULL, s, p, 0, &cut);
            tfm_tokenizer_encode(tok, NULL, s + p, len - p, 0, &cut);
            ok = cut.len == whole.len &&
                 memcmp(cut.data, whole.data, whole.len * sizeof *whole.data) == 0;
        }
    }
    tfm_ids_free(&whole);
    tfm_ids_free(&cut);
    return ok;
}

/* The ids that end each line of per-line npy (tfm-tokenize(1)): the
 * end-of-sequence token, else a newline's ids if they decode to a line
 * break; none (0) when neither exists. */
static size_t npy_separator(const tfm_tokenizer *tok, uint32_t **sep)
{
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    if (sp->eos >= 0) {
        *sep = tfm_malloc(sizeof **sep);
        (*sep)[0] = (uint32_t)sp->eos;
        return 1;
    }
    /* a sentencepiece normalizer turns a newline into a space and drops
     * it: its ids (none, or "\xe2\x96\x81") would not keep lines apart */
    tfm_ids nl = {0};
    tfm_tokenizer_encode(tok, NULL, "\n", 1, 0, &nl);
    tfm_buf text = {0};
    int ok = nl.len && tfm_tokenizer_decode(tok, nl.data, nl.len, 0, &text, NULL) == 0 &&
             memchr(text.data, '\n', text.len);
    tfm_buf_free(&text);
    if (!ok) {
        tfm_ids_free(&nl);
        *sep = NULL;
        return 0;
    }
    *sep = nl.data;
    return nl.len;
}

int tfm_enc_opts_check(const tfm_tokenizer *tok, const tfm_enc_opts *opts, tfm_err *err)
{
    const char *what = opts->nbest ? "--nbest" : "--sample";
    if (opts->sample && opts->nbest)
        return tfm_err_set(err, "--sample and --nbest exclude each other");
    if ((opts->sample || opts->nbest) && opts->document)
        return tfm_err_set(err, "%s works line by line, not with --document", what);
    if (opts->nbest && (opts->format == TFM_ENC_NPY || opts->add_special))
        return tfm_err_set(err, "--nbest writes ids, pieces or jsonl, without --add-special");
    if (!tok)
        return 0;
    if ((opts->sample || opts->nbest) && tfm_tokenizer_kind(tok) != TFM_TOK_UNIGRAM)
        return tfm_err_set(err, "%s needs a Unigram (sentencepiece) tokenizer", what);
    if (opts->nbest) { /* the kind's own refusal (sentencepiece's BPE has no n-best) */
        tfm_ids ids = {0}, off = {0};
        int rc = tfm_tokenizer_encode_nbest(tok, "", 0, 1, &ids, &off, err);
        tfm_ids_free(&ids);
        tfm_ids_free(&off);
        if (rc)
            return -1;
    }
    if (opts->sample) { /* BPE-dropout's alpha is a probability */
        tfm_ids ids = {0};
        tfm_rng rng;
        tfm_rng_seed(&rng, 1);
        int rc = tfm_tokenizer_encode_sample(tok, "", 0, opts->sample_alpha, &rng, &ids, err);
        tfm_ids_free(&ids);
        if (rc)
            return -1;
    }
    const tfm_tok_specials *sp = tfm_tokenizer_specials(tok);
    int pairs = opts->add_special && sp->cls >= 0 && sp->sep >= 0;
    if (opts->format == TFM_ENC_NPY && !opts->document && !pairs) {
        uint32_t *sep;
        size_t n = npy_separator(tok, &sep);
        free(sep);
        if (!n)
            return tfm_err_set(err, "per-line npy needs a separator between lines, and this "
                                    "tokenizer has no end-of-sequence token and no ids for a "
                                    "newline (its normalizer drops it): use --document or "
                                    "another --format");
    }
    return 0;
}

int tfm_encoder_new(tfm_encoder **out, const tfm_tokenizer *tok,
                    const tfm_enc_opts *opts, const char *path, tfm_err *err)
{
    if (tfm_enc_opts_check(tok, opts, err))
        return -1;
    tfm_encoder *e = tfm_calloc(1, sizeof *e);
    e->tok = tok;
    e->opts = *opts;
    if (!e->opts.chunk)
        e->opts.chunk = 1u << 20;
    e->threads = opts->threads < 1 ? 1 : opts->threads;
    e->sp = tfm_tokenizer_specials(tok);
    e->pairs = opts->add_special && e->sp->cls >= 0 && e->sp->sep >= 0;
    e->wide = tfm_tokenizer_vocab_size(tok) > 65536;
    e->out_name = path && strcmp(path, "-") ? path : "<stdout>";
    /* The cut rule holds for pre-tokenizers that split at whitespace and
     * look at nothing before it (GPT-2's, BERT's, char).  A tokenizer that
     * prefixes each text with a space (ByteLevel add_prefix_space) or has no
     * pre-tokenizer would change at a cut: such a document is encoded whole,
     * in memory.  Probing beats trusting the tokenizer's description. */
    if (opts->document)
        e->whole = !cuts_are_invisible(tok);
    e->scratch = tfm_calloc((size_t)e->threads, sizeof *e->scratch);
    e->parts = tfm_calloc((size_t)e->threads * PARTS_PER_THREAD, sizeof *e->parts);
    for (int i = 0; i < e->threads; i++)
        e->scratch[i] = tfm_tok_scratch_new(tok);
    int rc;
    if (opts->format == TFM_ENC_NPY) {
        e->n_sep = npy_separator(tok, &e->sep_ids);
        rc = tfm_npy_writer_open(&e->npy, path, e->wide ? TFM_NPY_U32 : TFM_NPY_U16,
                                 0, err);
    } else {
        rc = tfm_out_open(&e->out, path, err);
    }
    if (rc < 0) {
        tfm_encoder_free(e);
        return -1;
    }
    e->open = 1;
    *out = e;
    return 0;
}

static int check_write(tfm_encoder *e, tfm_err *err)
{
    if (e->write_failed > 0) {
        errno = e->write_failed;
        return tfm_err_errno(err, "%s: write error", e->out_name);
    }
    if (e->write_failed < 0) {
        *err = e->werr;
        return -1;
    }
    return 0;
}

/* Encodes everything in pending up to its last cut point. */
static void drain(tfm_encoder *e, int all)
{
    tfm_buf *p = &e->pending;
    size_t cut;
    if (all) {
        cut = p->len;
    } else if (e->opts.document) {
        cut = e->whole ? 0 : safe_cut_above(p->data, p->len, e->scanned);
    } else {
        cut = 0;
        for (size_t i = p->len; i > e->scanned; i--)
            if (p->data[i - 1] == '\n') {
                cut = i;
                break;
            }
    }
    if (!cut) {
        e->scanned = p->len;
        return;
    }
    run_round(e, p->data, cut);
    memmove(p->data, p->data + cut, p->len - cut);
    p->len -= cut;
    e->scanned = 0;
}

int tfm_encoder_feed(tfm_encoder *e, const char *data, size_t len, tfm_err *err)
{
    size_t round = e->opts.chunk * (size_t)e->threads;
    while (len) {
        size_t take = len;
        if (e->pending.len < round && take > round - e->pending.len)
            take = round - e->pending.len;
        tfm_buf_append(&e->pending, data, take);
        data += take;
        len -= take;
        if (e->pending.len >= round) {
            size_t before = e->pending.len;
            drain(e, 0);
            /* No cut point in a whole round (one giant line or word): keep
             * reading until one comes. */
            if (e->pending.len == before && len) {
                tfm_buf_append(&e->pending, data, len);
                len = 0;
            }
        }
    }
    return check_write(e, err);
}

static int flush_out(tfm_encoder *e, tfm_err *err)
{
    if (e->opts.format != TFM_ENC_NPY && fflush(e->out.fp) != 0 && !e->write_failed)
        e->write_failed = errno ? errno : EIO;
    return check_write(e, err);
}

int tfm_encoder_feed_fd(tfm_encoder *e, int fd, const char *name, tfm_err *err)
{
    size_t cap = 1u << 20;
    char *buf = tfm_malloc(cap);
    int rc = 0;
    char last = '\n';
    for (;;) {
        ssize_t n = read(fd, buf, cap);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = tfm_err_errno(err, "%s: read error", name);
            break;
        }
        if (n == 0)
            break;
        last = buf[n - 1];
        if ((rc = tfm_encoder_feed(e, buf, (size_t)n, err)) < 0)
            break;
        /* Interactive input (one line at a time through a pipe or a
         * terminal): answer each line now rather than after a full round. */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if ((size_t)n < cap && poll(&pfd, 1, 0) == 0 && e->pending.len &&
            e->opts.format != TFM_ENC_NPY) {
            drain(e, 0);
            if ((rc = flush_out(e, err)) < 0)
                break;
        }
    }
    free(buf);
    /* Per line, the end of a file ends its last line, so that files do not
     * run into each other. */
    if (rc == 0 && !e->opts.document && last != '\n')
        rc = tfm_encoder_feed(e, "\n", 1, err);
    return rc;
}

int tfm_encoder_finish(tfm_encoder *e, tfm_err *err)
{
    if (e->pending.len)
        drain(e, 1);
    if (e->opts.document) {
        doc_start(e);
        if (e->opts.add_special) {
            int64_t end = e->pairs ? e->sp->sep : e->sp->prefix >= 0 ? -1 : e->sp->eos;
            if (end >= 0) {
                uint32_t id = (uint32_t)end;
                emit_doc_ids(e, &id, 1);
            }
        }
        e->stats.sequences = 1;
        if (e->opts.format == TFM_ENC_JSONL)
            emit(e, "]}\n", 3);
        else if (e->opts.format != TFM_ENC_NPY)
            emit(e, "\n", 1);
    }
    if (check_write(e, err) < 0)
        return -1;
    e->open = 0;
    if (e->opts.format == TFM_ENC_NPY)
        return tfm_npy_writer_commit(&e->npy, err);
    return tfm_out_commit(&e->out, err);
}

const tfm_enc_stats *tfm_encoder_stats(const tfm_encoder *e)
{
    return &e->stats;
}

void tfm_encoder_free(tfm_encoder *e)
{
    if (!e)
        return;
    for (int i = 0; i < e->threads; i++)
        tfm_tok_scratch_free(e->scratch[i]);
    for (int i = 0; i < e->threads * PARTS_PER_THREAD; i++) {
        tfm_buf_free(&e->parts[i].out);
        tfm_ids_free(&e->parts[i].ids);
        tfm_ids_free(&e->parts[i].off);
    }
    if (e->open) {
        if (e->opts.format == TFM_ENC_NPY)
            tfm_npy_writer_abort(&e->npy);
        else
            tfm_out_abort(&e->out);
    }
    free(e->scratch);
    free(e->parts);
    free(e->sep_ids);
    tfm_buf_free(&e->pending);
    free(e);
}

/* Decoding */

static int decode_write(const tfm_tokenizer *tok, const uint32_t *ids, size_t n,
                        int skip_special, tfm_buf *text, FILE *out,
                        const char *out_name, int newline, tfm_err *err)
{
    tfm_buf_clear(text);
    if (tfm_tokenizer_decode(tok, ids, n, skip_special, text, err) < 0)
        return -1;
    if (newline)
        tfm_buf_putc(text, '\n');
    if (text->len && fwrite(text->data, 1, text->len, out) != text->len)
        return tfm_err_errno(err, "%s: write error", out_name);
    return 0;
}

static int out_of_range(tfm_err *err, const char *name, long line, long col,
                        const char *digits, size_t nd, uint32_t vocab)
{
    return tfm_err_at(err, name, line, col,
                      "id %.*s is outside the vocabulary (size %u)", (int)nd,
                      digits, vocab);
}

/* One line of the "ids" format: numbers separated by spaces, tabs, commas or
 * brackets. */
static int parse_id_line(const char *s, size_t n, const char *name, long line,
                         uint32_t vocab, tfm_ids *ids, tfm_err *err)
{
    size_t i = 0;
    while (i < n) {
        char c = s[i];
        if (c == ' ' || c == '\t' || c == ',' || c == '\r' || c == '[' || c == ']') {
            i++;
            continue;
        }
        if (c < '0' || c > '9') {
            unsigned char u = (unsigned char)c;
            if (u > 0x20 && u < 0x7f)
                return tfm_err_at(err, name, line, (long)i + 1,
                                  "expected a token id, found '%c'", c);
            return tfm_err_at(err, name, line, (long)i + 1,
                              "expected a token id, found byte 0x%02x", u);
        }
        size_t start = i;
        uint64_t v = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            if (v <= UINT32_MAX)
                v = v * 10 + (uint64_t)(s[i] - '0');
            i++;
        }
        if (v >= vocab)
            return out_of_range(err, name, line, (long)start + 1, s + start,
                                i - start, vocab);
        tfm_ids_push(ids, (uint32_t)v);
    }
    return 0;
}

static int parse_json_line(const char *s, size_t n, const char *name, long line,
                           uint32_t vocab, tfm_ids *ids, tfm_err *err)
{
    tfm_json_doc doc;
    char where[64];
    snprintf(where, sizeof where, "line %ld", line);
    if (tfm_json_parse(&doc, s, n, where, 0, err) < 0)
        return tfm_err_prefix(err, "%s", name);
    int rc = 0;
    const tfm_json *arr = tfm_json_get(doc.root, "ids");
    if (!arr || arr->type != TFM_JSON_ARRAY) {
        rc = tfm_err_at(err, name, line, 1, "expected an object with an \"ids\" array");
        goto done;
    }
    for (size_t i = 0; i < arr->n; i++) {
        const tfm_json *v = arr->items[i];
        if (v->type != TFM_JSON_NUMBER || v->num < 0 || v->num != (double)(uint64_t)v->num) {
            rc = tfm_err_at(err, name, line, v->col, "expected a token id");
            goto done;
        }
        if (v->num >= vocab) {
            rc = out_of_range(err, name, line, v->col, v->str, v->len, vocab);
            goto done;
        }
        tfm_ids_push(ids, (uint32_t)v->num);
    }
done:
    tfm_json_doc_free(&doc);
    return rc;
}

int tfm_decode_stream(const tfm_tokenizer *tok, FILE *in, const char *in_name,
                      FILE *out, const char *out_name, int skip_special,
                      tfm_err *err)
{
    uint32_t vocab = tfm_tokenizer_vocab_size(tok);
    tfm_buf line = {0}, text = {0};
    tfm_ids ids = {0};
    long lineno = 0;
    int rc = 0, got;
    while ((got = tfm_getline(in, &line)) > 0) {
        lineno++;
        tfm_ids_clear(&ids);
        size_t i = 0;
        while (i < line.len && (line.data[i] == ' ' || line.data[i] == '\t'))
            i++;
        if (i < line.len && line.data[i] == '{')
            rc = parse_json_line(line.data, line.len, in_name, lineno, vocab, &ids, err);
        else
            rc = parse_id_line(line.data, line.len, in_name, lineno, vocab, &ids, err);
        if (rc < 0)
            break;
        if ((rc = decode_write(tok, ids.data, ids.len, skip_special, &text, out,
                               out_name, 1, err)) < 0)
            break;
        /* Input arriving a line at a time gets its answer at once. */
        struct pollfd pfd = {.fd = fileno(in), .events = POLLIN};
        if (poll(&pfd, 1, 0) == 0 && fflush(out) != 0) {
            rc = tfm_err_errno(err, "%s: write error", out_name);
            break;
        }
    }
    if (got < 0 && rc == 0)
        rc = tfm_err_errno(err, "%s: read error", in_name);
    tfm_buf_free(&line);
    tfm_buf_free(&text);
    tfm_ids_free(&ids);
    return rc;
}

int tfm_decode_array(const tfm_tokenizer *tok, const uint32_t *ids, size_t n,
                     const char *name, FILE *out, const char *out_name,
                     int skip_special, tfm_err *err)
{
    uint32_t vocab = tfm_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= vocab)
            return tfm_err_set(err, "%s: element %zu: id %u is outside the vocabulary (size %u)",
                               name, i, ids[i], vocab);
    tfm_buf text = {0};
    /* Byte-level and char tokens decode to concatenated bytes, so a large
     * array can go in slices without needing its whole text at once;
     * WordPiece's spacing depends on neighbours, so it goes whole. */
    size_t slice = tfm_tokenizer_kind(tok) == TFM_TOK_WORDPIECE ? n : (size_t)1 << 20;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0;) {
        size_t m = n - i < slice ? n - i : slice;
        rc = decode_write(tok, ids + i, m, skip_special, &text, out, out_name, 0, err);
        i += m;
    }
    tfm_buf_free(&text);
    return rc;
}

int tfm_decode_npy(const tfm_tokenizer *tok, const struct tfm_npy *a,
                   const char *name, FILE *out, const char *out_name,
                   int skip_special, tfm_err *err)
{
    if (tfm_npy_ids_check(a, name, err) < 0)
        return -1;
    if (a->dtype == TFM_NPY_U32)
        return tfm_decode_array(tok, a->data, a->count, name, out, out_name,
                                skip_special, err);
    uint32_t *ids = tfm_malloc((a->count ? a->count : 1) * sizeof *ids);
    int rc = tfm_npy_ids(a, name, tfm_tokenizer_vocab_size(tok), ids, err);
    if (rc == 0)
        rc = tfm_decode_array(tok, ids, a->count, name, out, out_name, skip_special, err);
    free(ids);
    return rc;
}
