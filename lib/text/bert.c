/* BERT's basic tokenization, exactly as HuggingFace tokenizers does it
 * (normalizers/bert.rs + pre_tokenizers/bert.rs):
 *
 *   BertNormalizer, per character, in this order:
 *     clean_text:  drop U+0000, U+FFFD and "other" characters (Cc, Cf, Co,
 *                  Cs; not \t \n \r), map whitespace to ' '
 *     chinese:     ' ' c ' ' around CJK ideographs
 *     strip:       NFD, then drop Mn (strip_accents null follows lowercase)
 *     lowercase:   Rust's char::to_lowercase (full mapping: U+0130 -> i̇)
 *   BertPreTokenizer: split on whitespace (removed), then on punctuation
 *   (ASCII 33-47, 58-64, 91-96, 123-126, and Unicode P*), each punctuation
 *   character a word of its own.
 *
 * HF takes the general categories for "other", Mn and P* from an old table
 * (the unicode_categories crate) and NFD from older tables than utf8proc's
 * (Unicode 15), while it lowercases with Unicode 16.  bert_tables.h lists
 * every place where HF disagrees with utf8proc, measured by running every
 * code point through HF tokenizers 0.23.2 (see testdata/bert/README).
 *
 * Speed: ASCII goes through a byte table, other BMP characters through a
 * per-configuration table of the whole pipeline's result (built on first
 * use); only the rest pays for decomposition and the utf8proc lookups.
 * Invalid UTF-8 reads as U+FFFD per maximal invalid subpart (what HF's
 * Node binding receives), which clean_text drops. */
#include <config.h>

#include <string.h>

#include <utf8proc.h>

#include "text/bert_internal.h"
#include "text/bert_tables.h"

void tfm_bert_norm_default(tfm_bert_norm *n)
{
    n->clean_text = 1;
    n->handle_chinese_chars = 1;
    n->strip_accents = -1;
    n->lowercase = 1;
}

size_t tfm_bert_utf8_next(const unsigned char *s, size_t n, int32_t *cp)
{
    unsigned b0 = s[0];
    if (b0 < 0x80) {
        *cp = (int32_t)b0;
        return 1;
    }
    unsigned need, lo = 0x80, hi = 0xBF;
    int32_t v;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        need = 1;
        v = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        need = 2;
        v = b0 & 0x0F;
        if (b0 == 0xE0)
            lo = 0xA0;
        else if (b0 == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        need = 3;
        v = b0 & 0x07;
        if (b0 == 0xF0)
            lo = 0x90;
        else if (b0 == 0xF4)
            hi = 0x8F;
    } else {
        *cp = 0xFFFD;
        return 1;
    }
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= n || s[i] < lo || s[i] > hi) {
            *cp = 0xFFFD; /* the maximal subpart s[0..i) */
            return i;
        }
        v = (v << 6) | (s[i] & 0x3F);
        lo = 0x80;
        hi = 0xBF;
    }
    *cp = v;
    return i;
}

void tfm_bert_put_utf8(tfm_buf *b, int32_t cp)
{
    unsigned char t[4];
    size_t n;
    if (cp < 0x80) {
        t[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        t[0] = (unsigned char)(0xC0 | (cp >> 6));
        t[1] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        t[0] = (unsigned char)(0xE0 | (cp >> 12));
        t[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        t[0] = (unsigned char)(0xF0 | (cp >> 18));
        t[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        t[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    tfm_buf_append(b, t, n);
}

static int in_ranges(const uint32_t (*r)[2], size_t n, int32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((uint32_t)cp < r[mid][0])
            hi = mid;
        else if ((uint32_t)cp > r[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}
#define IN_TABLE(t, cp) in_ranges(t, sizeof t / sizeof t[0], cp)

/* Rust's char::is_whitespace (the White_Space property). */
static int is_ws(int32_t c)
{
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* HF's is_control: "other" characters except \t \n \r. */
static int is_other(int32_t c)
{
    if (c < 0x80)
        return (c < 32 && c != 9 && c != 10 && c != 13) || c == 127;
    if (IN_TABLE(bert_other_extra, c))
        return 1;
    if (IN_TABLE(bert_other_missing, c))
        return 0;
    utf8proc_category_t k = utf8proc_category(c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF ||
           k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CS;
}

static int is_chinese(int32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static int is_mn(int32_t c)
{
    if (IN_TABLE(bert_mn_extra, c))
        return 1;
    if (IN_TABLE(bert_mn_missing, c))
        return 0;
    return utf8proc_category(c) == UTF8PROC_CATEGORY_MN;
}

static int is_punct(int32_t c)
{
    if (c < 0x80)
        return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
               (c >= 123 && c <= 126);
    if (IN_TABLE(bert_punct_extra, c))
        return 1;
    if (IN_TABLE(bert_punct_missing, c))
        return 0;
    utf8proc_category_t k = utf8proc_category(c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

int tfm_bert_char_alone(int32_t c)
{
    return c >= 0 && (is_punct(c) || is_chinese(c));
}

/* ASCII classes, per clean_text setting. */
enum { A_WORD, A_UPPER, A_SPACE, A_PUNCT, A_DROP, A_NONASCII };

static unsigned char ascii_class[2][256];

static void ascii_init(void)
{
    for (int clean = 0; clean < 2; clean++) {
        unsigned char *t = ascii_class[clean];
        for (int c = 0; c < 256; c++) {
            if (c >= 0x80)
                t[c] = A_NONASCII;
            else if (clean && (c == 0 || is_other(c)))
                t[c] = A_DROP;
            else if (is_ws(c))
                t[c] = A_SPACE;
            else if (is_punct(c))
                t[c] = A_PUNCT;
            else if (c >= 'A' && c <= 'Z')
                t[c] = A_UPPER;
            else
                t[c] = A_WORD;
        }
    }
}

/* Splitter state: the current word and where it goes. */
typedef struct split {
    int pretok;
    tfm_buf *word;
    tfm_bert_word_fn fn;
    void *ctx;
    /* NFD's canonical reordering: kept (non-Mn) combining marks waiting for
     * the next starter.  Almost always empty. */
    int32_t *pend;
    uint8_t *pccc;
    size_t npend, cpend;
    /* With offsets: src[i] is the byte offset in the input of the character
     * that word byte i came from (pend_src: of each waiting mark); cur is
     * the character being normalized. */
    tfm_ids *src;
    uint32_t *pend_src;
    uint32_t cur;
} split;

static inline void flush(split *s)
{
    if (s->word->len) {
        s->fn(s->ctx, s->word->data, s->word->len);
        s->word->len = 0;
        if (s->src)
            s->src->len = 0;
    }
}

/* Appends c to the word; with offsets, its bytes come from s->cur. */
static void put(split *s, int32_t c)
{
    size_t n0 = s->word->len;
    tfm_bert_put_utf8(s->word, c);
    if (s->src)
        for (size_t i = n0; i < s->word->len; i++)
            tfm_ids_push(s->src, s->cur);
}

/* One normalized character into the pre-tokenizer. */
static void emit(split *s, int32_t c)
{
    if (!s->pretok) {
        put(s, c);
    } else if (is_ws(c)) {
        flush(s);
    } else if (is_punct(c)) {
        flush(s);
        put(s, c);
        flush(s);
    } else {
        put(s, c);
    }
}

static void emit_lower(split *s, const tfm_bert_norm *n, int32_t c)
{
    if (n->lowercase) {
        if (c == 0x130) { /* the one unconditional multi-character lowercase */
            emit(s, 'i');
            emit(s, 0x307);
            return;
        }
        c = bert_tolower(c);
    }
    emit(s, c);
}

/* The canonical combining class as HF's NFD (Unicode 9 tables) sees it:
 * marks added since are unknown to it (class 0). */
static int hf_ccc(int32_t c)
{
    if (c < 0x300)
        return 0;
    if (IN_TABLE(bert_ccc_zero, c))
        return 0;
    return utf8proc_get_property(c)->combining_class;
}

/* Emits the waiting marks in stable ccc order: a counting sort, so that a
 * long run of marks costs linear time. */
static void pend_flush(split *s, const tfm_bert_norm *n)
{
    size_t m = s->npend;
    int sorted = 1;
    for (size_t i = 1; i < m && sorted; i++)
        sorted = s->pccc[i - 1] <= s->pccc[i];
    if (!sorted) {
        size_t start[257] = {0};
        for (size_t i = 0; i < m; i++)
            start[s->pccc[i] + 1]++;
        for (int k = 1; k <= 256; k++)
            start[k] += start[k - 1];
        int32_t *tmp = tfm_malloc(m * sizeof *tmp);
        uint32_t *tsrc = tfm_malloc(m * sizeof *tsrc);
        for (size_t i = 0; i < m; i++) {
            size_t at = start[s->pccc[i]]++;
            tmp[at] = s->pend[i];
            tsrc[at] = s->pend_src[i];
        }
        memcpy(s->pend, tmp, m * sizeof *tmp);
        memcpy(s->pend_src, tsrc, m * sizeof *tsrc);
        free(tmp);
        free(tsrc);
    }
    s->npend = 0;
    uint32_t cur = s->cur;
    for (size_t i = 0; i < m; i++) {
        s->cur = s->pend_src[i]; /* a mark keeps the offset of its character */
        emit_lower(s, n, s->pend[i]);
    }
    s->cur = cur;
}

/* One character of the NFD output (strip_accents on). */
static void put_nfd(split *s, const tfm_bert_norm *n, int32_t c)
{
    int k = hf_ccc(c);
    if (k == 0) {
        if (s->npend)
            pend_flush(s, n);
        if (!is_mn(c))
            emit_lower(s, n, c);
        return;
    }
    if (is_mn(c))
        return; /* dropped: where it would sort changes nothing */
    if (s->npend == s->cpend) {
        s->cpend = s->cpend ? 2 * s->cpend : 16;
        s->pend = tfm_realloc(s->pend, s->cpend * sizeof *s->pend);
        s->pccc = tfm_realloc(s->pccc, s->cpend);
        s->pend_src = tfm_realloc(s->pend_src, s->cpend * sizeof *s->pend_src);
    }
    s->pend_src[s->npend] = s->cur;
    s->pend[s->npend] = c;
    s->pccc[s->npend++] = (uint8_t)k;
}

/* The normalizer's pipeline for one input character. */
static void norm_char(split *s, const tfm_bert_norm *n, int normalize, int32_t c)
{
    if (!normalize) {
        emit(s, c);
        return;
    }
    if (n->clean_text) {
        if (c == 0 || c == 0xFFFD || is_other(c))
            return;
        if (is_ws(c))
            c = ' ';
    }
    int cjk = n->handle_chinese_chars && is_chinese(c);
    int strip = n->strip_accents < 0 ? n->lowercase : n->strip_accents;
    if (!strip) {
        if (cjk)
            emit(s, ' ');
        emit_lower(s, n, c);
        if (cjk)
            emit(s, ' ');
        return;
    }
    if (cjk)
        put_nfd(s, n, ' ');
    /* U+11938 decomposes since Unicode 13, not in HF's NFD tables. */
    if (c >= 0xC0 && c != 0x11938) {
        utf8proc_int32_t d[32];
        int last = 0;
        utf8proc_ssize_t k = utf8proc_decompose_char(c, d, 32, UTF8PROC_DECOMPOSE, &last);
        if (k < 1 || k > 32) {
            d[0] = c;
            k = 1;
        }
        for (utf8proc_ssize_t i = 0; i < k; i++)
            put_nfd(s, n, d[i]);
    } else {
        put_nfd(s, n, c);
    }
    if (cjk)
        put_nfd(s, n, ' ');
}

/* ---- the BMP table: the whole pipeline for one character, precomputed ----
 *
 * Per configuration, each BMP code point maps to what the normalizer and
 * pre-tokenizer do with it when it stands for itself: nothing (dropped by
 * clean_text, or a nonspacing mark), one character that is a word character,
 * a separator or a word of its own — or "slow" when the output has more than
 * one kept character or waits for canonical reordering.  Built on the first
 * non-ASCII character, shared by all tokenizers and threads. */
enum { B_SLOW, B_DROP, B_DROPFLUSH, B_WORD, B_SPACE, B_ALONE };

int tfm_bert_nocache;
static uint32_t *bmp_tables[16];

static uint32_t bmp_entry(const tfm_bert_norm *n, int strip, int32_t c)
{
    if (n->clean_text) {
        if (c == 0 || c == 0xFFFD || is_other(c))
            return (uint32_t)B_DROP << 24;
        if (is_ws(c))
            c = ' ';
    }
    int cjk = n->handle_chinese_chars && is_chinese(c);
    int32_t o = c;
    if (strip) {
        utf8proc_int32_t d[32];
        utf8proc_ssize_t k = 1;
        d[0] = c;
        if (c >= 0xC0 && c != 0x11938) {
            int last = 0;
            k = utf8proc_decompose_char(c, d, 32, UTF8PROC_DECOMPOSE, &last);
            if (k < 1 || k > 32)
                return B_SLOW;
        }
        if (hf_ccc(d[0]) != 0)
            return k == 1 && is_mn(d[0]) ? (uint32_t)B_DROP << 24 : B_SLOW;
        for (utf8proc_ssize_t i = 1; i < k; i++)
            if (!is_mn(d[i]))
                return B_SLOW;
        if (is_mn(d[0]))
            return cjk ? B_SLOW : (uint32_t)B_DROPFLUSH << 24;
        o = d[0];
    }
    if (n->lowercase) {
        if (o == 0x130)
            return B_SLOW;
        o = bert_tolower(o);
    }
    if (cjk)
        return is_ws(o) || is_punct(o) ? B_SLOW : (uint32_t)B_ALONE << 24 | (uint32_t)o;
    if (is_ws(o))
        return (uint32_t)B_SPACE << 24;
    return (uint32_t)(is_punct(o) ? B_ALONE : B_WORD) << 24 | (uint32_t)o;
}

static const uint32_t *bmp_table(const tfm_bert_norm *n)
{
    int strip = n->strip_accents < 0 ? n->lowercase : n->strip_accents;
    int key = (!!n->clean_text) | (!!n->handle_chinese_chars) << 1 | (!!strip) << 2 |
              (!!n->lowercase) << 3;
    uint32_t *t = __atomic_load_n(&bmp_tables[key], __ATOMIC_ACQUIRE);
    if (t)
        return t;
    t = tfm_malloc(0x10000 * sizeof *t);
    for (int32_t c = 0; c < 0x10000; c++)
        t[c] = c < 0x80 || (c >= 0xD800 && c <= 0xDFFF) ? B_SLOW : bmp_entry(n, strip, c);
    uint32_t *none = NULL;
    if (!__atomic_compare_exchange_n(&bmp_tables[key], &none, t, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        free(t); /* another thread was first */
        t = none;
    }
    return t;
}

void tfm_bert_split(const tfm_bert_norm *norm, int normalize, int pretokenize,
                    const char *text, size_t len, tfm_buf *word,
                    tfm_bert_word_fn fn, void *ctx)
{
    tfm_bert_split_src(norm, normalize, pretokenize, text, len, word, NULL, fn, ctx);
}

void tfm_bert_split_src(const tfm_bert_norm *norm, int normalize, int pretokenize,
                        const char *text, size_t len, tfm_buf *word, tfm_ids *src,
                        tfm_bert_word_fn fn, void *ctx)
{
    static int ready;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        ascii_init(); /* idempotent, so a race only repeats the work */
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    split s = {pretokenize, word, fn, ctx, NULL, NULL, 0, 0, src, NULL, 0};
    word->len = 0;
    if (src)
        src->len = 0;
    const unsigned char *p = (const unsigned char *)text, *end = p + len;
    int fast = normalize && pretokenize;
    const unsigned char *cls = ascii_class[normalize && norm->clean_text];
    int lower = normalize && norm->lowercase;
    const uint32_t *bmp = NULL;
    while (p < end) {
        unsigned c = *p;
        s.cur = (uint32_t)(p - (const unsigned char *)text);
        if (fast && c < 0x80) {
            if (s.npend && cls[c] != A_DROP)
                pend_flush(&s, norm);
            /* The common case: a run of ASCII word characters. */
            if (word->len + 2 > word->cap)
                tfm_buf_reserve(word, 64);
            switch (cls[c]) {
            case A_WORD:
                word->data[word->len++] = (char)c;
                if (src)
                    tfm_ids_push(src, s.cur);
                break;
            case A_UPPER:
                word->data[word->len++] = (char)(lower ? c + 32 : c);
                if (src)
                    tfm_ids_push(src, s.cur);
                break;
            case A_SPACE:
                flush(&s);
                break;
            case A_PUNCT:
                flush(&s);
                word->data[word->len++] = (char)c;
                if (src)
                    tfm_ids_push(src, s.cur);
                flush(&s);
                break;
            default: /* A_DROP */
                break;
            }
            p++;
            continue;
        }
        int32_t cp;
        p += tfm_bert_utf8_next(p, (size_t)(end - p), &cp);
        if (fast && cp < 0x10000 && !tfm_bert_nocache) {
            if (!bmp)
                bmp = bmp_table(norm);
            uint32_t a = bmp[cp];
            unsigned act = a >> 24;
            if (act == B_SLOW) {
                norm_char(&s, norm, normalize, cp);
                continue;
            }
            if (act == B_DROP)
                continue;
            if (s.npend)
                pend_flush(&s, norm);
            switch (act) {
            case B_WORD:
                put(&s, (int32_t)(a & 0x1FFFFF));
                break;
            case B_SPACE:
                flush(&s);
                break;
            case B_ALONE:
                flush(&s);
                put(&s, (int32_t)(a & 0x1FFFFF));
                flush(&s);
                break;
            default: /* B_DROPFLUSH */
                break;
            }
            continue;
        }
        norm_char(&s, norm, normalize, cp);
    }
    if (s.npend)
        pend_flush(&s, norm);
    flush(&s);
    free(s.pend);
    free(s.pccc);
    free(s.pend_src);
}

static void collect(void *ctx, const char *w, size_t n)
{
    tfm_bert_words *out = ctx;
    if (out->n == out->cap) {
        out->cap = out->cap ? 2 * out->cap : 64;
        out->off = tfm_realloc(out->off, out->cap * sizeof *out->off);
        out->len = tfm_realloc(out->len, out->cap * sizeof *out->len);
    }
    out->off[out->n] = (uint32_t)out->text.len;
    out->len[out->n] = (uint32_t)n;
    out->n++;
    tfm_buf_append(&out->text, w, n);
}

void tfm_bert_pretokenize(const tfm_bert_norm *norm, const char *text, size_t len,
                          tfm_bert_words *out)
{
    tfm_buf word = {0};
    out->n = 0;
    tfm_buf_clear(&out->text);
    tfm_bert_split(norm, 1, 1, text, len, &word, collect, out);
    tfm_buf_free(&word);
}

void tfm_bert_words_free(tfm_bert_words *w)
{
    tfm_buf_free(&w->text);
    free(w->off);
    free(w->len);
    memset(w, 0, sizeof *w);
}

static void append_word(void *ctx, const char *w, size_t n)
{
    tfm_buf_append(ctx, w, n);
}

void tfm_bert_normalize(const tfm_bert_norm *norm, const char *text, size_t len,
                        tfm_buf *out)
{
    tfm_buf word = {0};
    tfm_bert_split(norm, 1, 0, text, len, &word, append_word, out);
    tfm_buf_free(&word);
}
