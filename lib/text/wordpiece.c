/* The WordPiece model: vocabulary, greedy longest-match-first encoding,
 * decoding, and the tokenizer.json pieces.
 *
 * Encoding speed comes from two hash tables keyed by the piece's bytes —
 * one of whole pieces for a word's first match, one of "##"-continuations
 * stored without the prefix — and from computing the hashes of every prefix
 * of the rest of the word in one pass (FNV-1a is incremental), bounded by
 * the longest piece in the table, so a candidate costs a probe and rarely a
 * memcmp. */
#include <config.h>

#include <string.h>

#include "base/file.h"
#include "text/bert_internal.h"
#include "text/wordpiece.h"

#define NONE UINT32_MAX

/* A slot holds enough to decide most lookups without touching anything
 * else: the key's first 8 bytes and a tag of 24 hash bits + the length
 * (capped at 255).  Keys up to 8 bytes match on (head, tag) alone. */
typedef struct slot {
    uint64_t head; /* first min(len, 8) bytes, little-endian, zero-padded */
    uint32_t id;   /* NONE: empty */
    uint32_t tag;
} slot;

/* A blocked Bloom filter (two bits in one 64-bit word per key, ~16 bits
 * per key: ~2% false positives) answers most misses from L1 — the greedy
 * search tries many lengths that are not pieces, and each probe of the big
 * table would be a cache miss. */
typedef struct table {
    slot *s;
    size_t mask;
    size_t maxlen; /* longest key in bytes */
    uint64_t *bloom;
    size_t bmask;
} table;

static inline int bloom_maybe(const table *t, uint64_t h)
{
    uint64_t w = t->bloom[(h >> 40) & t->bmask];
    uint64_t bits = (1ULL << (h & 63)) | (1ULL << ((h >> 6) & 63));
    return (w & bits) == bits;
}

static inline void bloom_add(table *t, uint64_t h)
{
    t->bloom[(h >> 40) & t->bmask] |= (1ULL << (h & 63)) | (1ULL << ((h >> 6) & 63));
}

struct tfm_wordpiece {
    uint32_t n;      /* ids 0..n-1 (a JSON vocabulary may leave holes) */
    char *arena;     /* every piece, NUL-terminated */
    size_t *off;     /* piece of id i at arena + off[i]; holes have len NONE */
    uint32_t *len;
    table full, cont;
    char *unk;
    uint32_t unk_id;
    char *prefix;    /* continuing_subword_prefix */
    size_t prefix_len;
    uint32_t max_chars;
    tfm_bert_norm norm;
    int normalize, pretokenize;
    char *dec_prefix;
    int dec_cleanup;
};

struct tfm_wordpiece_scratch {
    tfm_buf word;
};

static inline uint64_t fnv_step(uint64_t h, unsigned char c)
{
    return (h ^ c) * 0x100000001b3ULL;
}
#define FNV_INIT 0xcbf29ce484222325ULL

static uint64_t fnv(const char *s, size_t n)
{
    uint64_t h = FNV_INIT;
    for (size_t i = 0; i < n; i++)
        h = fnv_step(h, (unsigned char)s[i]);
    return h;
}

/* Slot index from the full hash (mixing the high bits in, as FNV's low bits
 * are weak for short keys). */
static inline size_t slot_of(uint64_t h, size_t mask)
{
    return (size_t)((h ^ (h >> 29)) * 0x9E3779B97F4A7C15ULL >> 20) & mask;
}

static inline uint32_t tag_of(uint64_t h, size_t n)
{
    return ((uint32_t)(h >> 32) & ~0xFFu) | (uint32_t)(n < 255 ? n : 255);
}

/* First min(n, 8) bytes of s as a little-endian number. */
static inline uint64_t head_of(const char *s, size_t n)
{
    uint64_t v = 0;
    if (n >= 8) {
        memcpy(&v, s, 8);
        return v;
    }
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)(unsigned char)s[i] << (8 * i);
    return v;
}

static inline uint64_t head_cut(uint64_t head8, size_t n)
{
    return n >= 8 ? head8 : head8 & ((1ULL << (8 * n)) - 1);
}

/* Looks key[0..n) up; head is head_of(key, n).  skip: the table's keys are
 * the pieces minus that many leading bytes (the "##"). */
static inline uint32_t table_find(const tfm_wordpiece *wp, const table *t, uint64_t h,
                                  uint64_t head, const char *key, size_t n, size_t skip)
{
    uint32_t tag = tag_of(h, n);
    size_t i = slot_of(h, t->mask);
    for (;;) {
        const slot *e = &t->s[i];
        if (e->id == NONE)
            return NONE;
        if (e->tag == tag && e->head == head &&
            (n <= 8 || (wp->len[e->id] == n + skip &&
                        memcmp(wp->arena + wp->off[e->id] + skip + 8, key + 8, n - 8) == 0)))
            return e->id;
        i = (i + 1) & t->mask;
    }
}

static uint32_t table_lookup(const tfm_wordpiece *wp, const table *t, const char *key, size_t n,
                             size_t skip)
{
    return table_find(wp, t, fnv(key, n), head_of(key, n), key, n, skip);
}

/* Inserts id under its piece minus `skip` leading bytes. */
static void table_put(tfm_wordpiece *wp, table *t, uint32_t id, size_t skip)
{
    const char *k = wp->arena + wp->off[id] + skip;
    size_t n = wp->len[id] - skip;
    uint64_t h = fnv(k, n);
    size_t i = slot_of(h, t->mask);
    while (t->s[i].id != NONE)
        i = (i + 1) & t->mask;
    t->s[i].id = id;
    t->s[i].tag = tag_of(h, n);
    t->s[i].head = head_of(k, n);
    bloom_add(t, h);
    if (n > t->maxlen)
        t->maxlen = n;
}

static void table_init(table *t, size_t n)
{
    size_t cap = 16;
    while (cap < 2 * n + 2)
        cap *= 2;
    t->s = tfm_malloc(cap * sizeof *t->s);
    for (size_t i = 0; i < cap; i++)
        t->s[i].id = NONE;
    t->mask = cap - 1;
    t->maxlen = 0;
    size_t words = 1;
    while (words * 4 < n + 1)
        words *= 2;
    t->bloom = tfm_calloc(words, sizeof *t->bloom);
    t->bmask = words - 1;
}

/* A fresh model with the vocabulary's pieces laid out but no index yet. */
static tfm_wordpiece *wp_new(void)
{
    tfm_wordpiece *wp = tfm_calloc(1, sizeof *wp);
    tfm_bert_norm_default(&wp->norm);
    wp->normalize = wp->pretokenize = 1;
    wp->prefix = tfm_strdup("##");
    wp->prefix_len = 2;
    wp->unk = tfm_strdup("[UNK]");
    wp->max_chars = 100;
    wp->dec_prefix = tfm_strdup("##");
    wp->dec_cleanup = 1;
    return wp;
}

/* Builds the index.  Later duplicates win, as in HF (a HashMap insert):
 * the earlier id keeps its piece for decoding but is never produced. */
static int wp_index(tfm_wordpiece *wp, const char *name, tfm_err *err)
{
    table_init(&wp->full, wp->n);
    size_t ncont = 0;
    for (uint32_t i = 0; i < wp->n; i++)
        if (wp->len[i] != NONE && wp->len[i] >= wp->prefix_len &&
            memcmp(wp->arena + wp->off[i], wp->prefix, wp->prefix_len) == 0)
            ncont++;
    table_init(&wp->cont, ncont);
    for (uint32_t i = wp->n; i-- > 0;) {
        if (wp->len[i] == NONE)
            continue;
        const char *p = wp->arena + wp->off[i];
        if (table_lookup(wp, &wp->full, p, wp->len[i], 0) == NONE)
            table_put(wp, &wp->full, i, 0);
        if (wp->len[i] >= wp->prefix_len && memcmp(p, wp->prefix, wp->prefix_len) == 0) {
            size_t k = wp->len[i] - wp->prefix_len;
            if (table_lookup(wp, &wp->cont, p + wp->prefix_len, k, wp->prefix_len) == NONE)
                table_put(wp, &wp->cont, i, wp->prefix_len);
        }
    }
    int64_t unk = tfm_wordpiece_id(wp, wp->unk, strlen(wp->unk));
    if (unk < 0)
        return tfm_err_set(err, "%s: unknown token '%s' is not in the vocabulary", name,
                           wp->unk);
    wp->unk_id = (uint32_t)unk;
    return 0;
}

void tfm_wordpiece_free(tfm_wordpiece *wp)
{
    if (!wp)
        return;
    free(wp->arena);
    free(wp->off);
    free(wp->len);
    free(wp->full.s);
    free(wp->cont.s);
    free(wp->full.bloom);
    free(wp->cont.bloom);
    free(wp->unk);
    free(wp->prefix);
    free(wp->dec_prefix);
    free(wp);
}

/* Trailing Unicode whitespace, as Rust's str::trim_end removes it. */
static size_t trim_end(const unsigned char *s, size_t n)
{
    for (;;) {
        if (n >= 1 && ((s[n - 1] >= 9 && s[n - 1] <= 13) || s[n - 1] == ' ')) {
            n--;
            continue;
        }
        if (n >= 2 && s[n - 2] == 0xC2 && (s[n - 1] == 0x85 || s[n - 1] == 0xA0)) {
            n -= 2;
            continue;
        }
        if (n >= 3) {
            int32_t cp;
            const unsigned char *t = s + n - 3;
            if (t[0] >= 0xE0 && tfm_bert_utf8_next(t, 3, &cp) == 3 &&
                (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
                 cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000)) {
                n -= 3;
                continue;
            }
        }
        return n;
    }
}

static int valid_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t k = tfm_bert_utf8_next(s + i, n - i, &cp);
        if (cp == 0xFFFD && !(k == 3 && s[i] == 0xEF && s[i + 1] == 0xBF && s[i + 2] == 0xBD))
            return 0;
        i += k;
    }
    return 1;
}

int tfm_wordpiece_from_vocab_txt(tfm_wordpiece **out, const char *data, size_t len,
                                 const char *name, tfm_err *err)
{
    *out = NULL;
    const unsigned char *s = (const unsigned char *)data;
    size_t lines = 0;
    for (size_t i = 0; i < len; i++)
        lines += s[i] == '\n';
    lines += len && s[len - 1] != '\n';
    if (lines == 0)
        return tfm_err_set(err, "%s: empty vocabulary", name);
    if (lines >= NONE)
        return tfm_err_set(err, "%s: too many lines for a vocabulary", name);
    tfm_wordpiece *wp = wp_new();
    wp->n = (uint32_t)lines;
    wp->arena = tfm_malloc(len + lines + 1);
    wp->off = tfm_malloc(lines * sizeof *wp->off);
    wp->len = tfm_malloc(lines * sizeof *wp->len);
    size_t pos = 0, a = 0;
    for (uint32_t id = 0; id < lines; id++) {
        const unsigned char *e = memchr(s + pos, '\n', len - pos);
        size_t end = e ? (size_t)(e - s) : len;
        size_t n = trim_end(s + pos, end - pos);
        if (!valid_utf8(s + pos, n)) {
            tfm_wordpiece_free(wp);
            return tfm_err_at(err, name, (long)id + 1, 0, "invalid UTF-8");
        }
        memcpy(wp->arena + a, s + pos, n);
        wp->arena[a + n] = 0;
        wp->off[id] = a;
        wp->len[id] = (uint32_t)n;
        a += n + 1;
        pos = end + 1;
    }
    if (wp_index(wp, name, err) < 0) {
        tfm_wordpiece_free(wp);
        return -1;
    }
    *out = wp;
    return 0;
}

int tfm_wordpiece_from_pieces(tfm_wordpiece **out, const char *const *pieces,
                              const size_t *lens, uint32_t n, const char *unk,
                              const tfm_bert_norm *norm, tfm_err *err)
{
    *out = NULL;
    tfm_wordpiece *wp = wp_new();
    size_t bytes = 0;
    for (uint32_t i = 0; i < n; i++)
        bytes += lens[i] + 1;
    wp->n = n;
    wp->arena = tfm_malloc(bytes + 1);
    wp->off = tfm_malloc((n ? n : 1) * sizeof *wp->off);
    wp->len = tfm_malloc((n ? n : 1) * sizeof *wp->len);
    size_t a = 0;
    for (uint32_t i = 0; i < n; i++) {
        memcpy(wp->arena + a, pieces[i], lens[i]);
        wp->arena[a + lens[i]] = 0;
        wp->off[i] = a;
        wp->len[i] = (uint32_t)lens[i];
        a += lens[i] + 1;
    }
    free(wp->unk);
    wp->unk = tfm_strdup(unk);
    wp->norm = *norm;
    if (wp_index(wp, "vocabulary", err) < 0) {
        tfm_wordpiece_free(wp);
        return -1;
    }
    *out = wp;
    return 0;
}

int tfm_wordpiece_load_vocab_txt(tfm_wordpiece **out, const char *path, tfm_err *err)
{
    tfm_map m;
    *out = NULL;
    if (tfm_map_open(&m, path, err) < 0)
        return -1;
    int r = tfm_wordpiece_from_vocab_txt(out, (const char *)m.data, m.size, path, err);
    tfm_map_close(&m);
    return r;
}

/* ---- tokenizer.json ---- */

static int get_bool(const tfm_json_doc *doc, const tfm_json *obj, const char *key,
                    int dflt, int allow_null, int *out, tfm_err *err)
{
    const tfm_json *v = tfm_json_get(obj, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (allow_null && v->type == TFM_JSON_NULL) {
        *out = -1;
        return 0;
    }
    if (v->type != TFM_JSON_BOOL)
        return tfm_err_at(err, doc->name, v->line, v->col, "%s must be a boolean%s", key,
                          allow_null ? " or null" : "");
    *out = v->boolean;
    return 0;
}

static int get_string(const tfm_json_doc *doc, const tfm_json *obj, const char *key,
                      char **out, tfm_err *err)
{
    const tfm_json *v = tfm_json_get(obj, key);
    if (!v)
        return 0; /* keep the default */
    if (tfm_json_expect(doc, v, TFM_JSON_STRING, key, err) < 0)
        return -1;
    free(*out);
    *out = tfm_strndup(v->str, v->len);
    return 0;
}

static int is_null(const tfm_json *v)
{
    return !v || v->type == TFM_JSON_NULL;
}

static int check_type(const tfm_json_doc *doc, const tfm_json *obj, const char *what,
                      const char *want, tfm_err *err)
{
    if (tfm_json_expect(doc, obj, TFM_JSON_OBJECT, what, err) < 0)
        return -1;
    const tfm_json *t = tfm_json_get(obj, "type");
    if (!t)
        return tfm_err_at(err, doc->name, obj->line, obj->col, "%s has no \"type\"", what);
    if (t->type != TFM_JSON_STRING || strcmp(t->str, want) != 0)
        return tfm_err_at(err, doc->name, t->line, t->col,
                          "%s type %s%.*s%s is not supported with WordPiece (want %s)", what,
                          t->type == TFM_JSON_STRING ? "'" : "",
                          t->type == TFM_JSON_STRING ? (int)t->len : 0, t->str ? t->str : "",
                          t->type == TFM_JSON_STRING ? "'" : "", want);
    return 0;
}

int tfm_wordpiece_from_json(tfm_wordpiece **out, const tfm_json_doc *doc,
                            const tfm_json *model, const tfm_json *normalizer,
                            const tfm_json *pre_tokenizer, tfm_err *err)
{
    *out = NULL;
    /* Old tokenizer.json files may leave the model's "type" out (HF then
     * guesses from the fields); the caller has decided it is WordPiece. */
    if (tfm_json_expect(doc, model, TFM_JSON_OBJECT, "model", err) < 0 ||
        (tfm_json_get(model, "type") && check_type(doc, model, "model", "WordPiece", err) < 0))
        return -1;
    tfm_wordpiece *wp = wp_new();
    int64_t maxc = 100;
    const tfm_json *v;
    if (get_string(doc, model, "unk_token", &wp->unk, err) < 0 ||
        get_string(doc, model, "continuing_subword_prefix", &wp->prefix, err) < 0)
        goto fail;
    wp->prefix_len = strlen(wp->prefix);
    if ((v = tfm_json_get(model, "max_input_chars_per_word")) &&
        tfm_json_get_int(doc, v, "max_input_chars_per_word", 0, UINT32_MAX - 1, &maxc, err) < 0)
        goto fail;
    wp->max_chars = (uint32_t)maxc;

    const tfm_json *vocab = tfm_json_get(model, "vocab");
    if (!vocab) {
        tfm_err_at(err, doc->name, model->line, model->col, "model has no \"vocab\"");
        goto fail;
    }
    if (tfm_json_expect(doc, vocab, TFM_JSON_OBJECT, "model.vocab", err) < 0)
        goto fail;
    /* Ids may come in any order; bound them so that a hostile file cannot
     * make us allocate gigabytes for a handful of entries. */
    uint64_t maxid = 0, bytes = 0;
    for (size_t i = 0; i < vocab->n; i++) {
        int64_t id;
        if (tfm_json_get_int(doc, vocab->items[i], "token id", 0, UINT32_MAX - 2, &id, err) < 0)
            goto fail;
        if ((uint64_t)id > maxid)
            maxid = (uint64_t)id;
        bytes += vocab->keys[i]->len + 1;
    }
    if (vocab->n == 0) {
        tfm_err_at(err, doc->name, vocab->line, vocab->col, "empty vocabulary");
        goto fail;
    }
    if (maxid >= 2 * (uint64_t)vocab->n + 1024) {
        tfm_err_at(err, doc->name, vocab->line, vocab->col,
                   "vocabulary ids go up to %llu for %zu tokens", (unsigned long long)maxid,
                   vocab->n);
        goto fail;
    }
    wp->n = (uint32_t)maxid + 1;
    wp->arena = tfm_malloc(bytes + 1);
    wp->off = tfm_calloc(wp->n, sizeof *wp->off);
    wp->len = tfm_malloc(wp->n * sizeof *wp->len);
    for (uint32_t i = 0; i < wp->n; i++)
        wp->len[i] = NONE;
    size_t a = 0;
    for (size_t i = 0; i < vocab->n; i++) {
        uint32_t id = (uint32_t)vocab->items[i]->num;
        const tfm_json *k = vocab->keys[i];
        if (wp->len[id] != NONE) {
            tfm_err_at(err, doc->name, vocab->items[i]->line, vocab->items[i]->col,
                       "token id %u is used twice", id);
            goto fail;
        }
        memcpy(wp->arena + a, k->str, k->len);
        wp->arena[a + k->len] = 0;
        wp->off[id] = a;
        wp->len[id] = (uint32_t)k->len;
        a += k->len + 1;
    }

    if (is_null(normalizer)) {
        wp->normalize = 0;
    } else {
        if (check_type(doc, normalizer, "normalizer", "BertNormalizer", err) < 0 ||
            get_bool(doc, normalizer, "clean_text", 1, 0, &wp->norm.clean_text, err) < 0 ||
            get_bool(doc, normalizer, "handle_chinese_chars", 1, 0,
                     &wp->norm.handle_chinese_chars, err) < 0 ||
            get_bool(doc, normalizer, "strip_accents", -1, 1, &wp->norm.strip_accents, err) < 0 ||
            get_bool(doc, normalizer, "lowercase", 1, 0, &wp->norm.lowercase, err) < 0)
            goto fail;
    }
    if (is_null(pre_tokenizer))
        wp->pretokenize = 0;
    else if (check_type(doc, pre_tokenizer, "pre_tokenizer", "BertPreTokenizer", err) < 0)
        goto fail;

    if (wp_index(wp, doc->name, err) < 0)
        goto fail;
    *out = wp;
    return 0;
fail:
    tfm_wordpiece_free(wp);
    return -1;
}

int tfm_wordpiece_decoder_from_json(tfm_wordpiece *wp, const tfm_json_doc *doc,
                                    const tfm_json *decoder, tfm_err *err)
{
    if (is_null(decoder))
        return 0;
    char *prefix = tfm_strdup(wp->dec_prefix);
    int cleanup = wp->dec_cleanup;
    if (check_type(doc, decoder, "decoder", "WordPiece", err) < 0 ||
        get_string(doc, decoder, "prefix", &prefix, err) < 0 ||
        get_bool(doc, decoder, "cleanup", 1, 0, &cleanup, err) < 0) {
        free(prefix);
        return -1;
    }
    free(wp->dec_prefix);
    wp->dec_prefix = prefix;
    wp->dec_cleanup = cleanup;
    return 0;
}

/* ---- accessors ---- */

uint32_t tfm_wordpiece_vocab_size(const tfm_wordpiece *wp)
{
    return wp->n;
}

const char *tfm_wordpiece_piece(const tfm_wordpiece *wp, uint32_t id, size_t *len)
{
    if (id >= wp->n || wp->len[id] == NONE)
        return NULL;
    if (len)
        *len = wp->len[id];
    return wp->arena + wp->off[id];
}

int64_t tfm_wordpiece_id(const tfm_wordpiece *wp, const char *piece, size_t len)
{
    uint32_t id = table_lookup(wp, &wp->full, piece, len, 0);
    return id == NONE ? -1 : (int64_t)id;
}

uint32_t tfm_wordpiece_unk_id(const tfm_wordpiece *wp)
{
    return wp->unk_id;
}

const tfm_bert_norm *tfm_wordpiece_norm(const tfm_wordpiece *wp)
{
    return &wp->norm;
}

/* ---- encoding ---- */

tfm_wordpiece_scratch *tfm_wordpiece_scratch_new(void)
{
    return tfm_calloc(1, sizeof(tfm_wordpiece_scratch));
}

void tfm_wordpiece_scratch_free(tfm_wordpiece_scratch *s)
{
    if (!s)
        return;
    tfm_buf_free(&s->word);
    free(s);
}

void tfm_wordpiece_encode_word(const tfm_wordpiece *wp, const char *word, size_t n,
                               tfm_ids *out)
{
    const unsigned char *w = (const unsigned char *)word;
    if (n > wp->max_chars) {
        size_t chars = 0;
        for (size_t i = 0; i < n; i++)
            chars += (w[i] & 0xC0) != 0x80;
        if (chars > wp->max_chars) {
            tfm_ids_push(out, wp->unk_id);
            return;
        }
    }
    size_t mark = out->len, start = 0;
    uint64_t hsbuf[65], *hs = hsbuf, *big = NULL;
    while (start < n) {
        const table *t = start == 0 || wp->prefix_len == 0 ? &wp->full : &wp->cont;
        size_t lim = n - start;
        if (lim > t->maxlen)
            lim = t->maxlen;
        const char *k = word + start;
        uint32_t id = NONE;
        if (lim > 64 && !big) /* only with a vocabulary of very long pieces */
            big = tfm_malloc((n + 1) * sizeof *big);
        hs = lim > 64 ? big : hsbuf;
        uint64_t h = FNV_INIT;
        for (size_t i = 0; i < lim; i++)
            hs[i + 1] = h = fnv_step(h, (unsigned char)k[i]);
        uint64_t head8 = head_of(k, lim);
        size_t len = lim;
        for (; len > 0; len--) {
            /* Only end on a character boundary. */
            if (start + len < n && (w[start + len] & 0xC0) == 0x80)
                continue;
            uint64_t hl = hs[len];
            if (!bloom_maybe(t, hl))
                continue;
            id = table_find(wp, t, hl, head_cut(head8, len), k, len,
                            t == &wp->cont ? wp->prefix_len : 0);
            if (id != NONE)
                break;
        }
        if (id == NONE) {
            out->len = mark;
            tfm_ids_push(out, wp->unk_id);
            break;
        }
        tfm_ids_push(out, id);
        start += len;
    }
    free(big);
}

typedef struct enc_ctx {
    const tfm_wordpiece *wp;
    tfm_ids *out;
} enc_ctx;

static void enc_word(void *ctx, const char *w, size_t n)
{
    enc_ctx *c = ctx;
    tfm_wordpiece_encode_word(c->wp, w, n, c->out);
}

void tfm_wordpiece_encode(const tfm_wordpiece *wp, tfm_wordpiece_scratch *s,
                          const char *text, size_t len, tfm_ids *out)
{
    tfm_wordpiece_scratch local = {{0}};
    tfm_wordpiece_scratch *sc = s ? s : &local;
    enc_ctx c = {wp, out};
    tfm_bert_split(&wp->norm, wp->normalize, wp->pretokenize, text, len, &sc->word, enc_word,
                   &c);
    if (!s)
        tfm_buf_free(&local.word);
}

typedef struct span_ctx {
    const tfm_wordpiece *wp;
    tfm_ids *out, *start, *end, src;
    const unsigned char *text;
    size_t len;
} span_ctx;

/* End of the input character that starts at byte o (as tfm_bert_split read
 * it: a maximal invalid subpart is one character). */
static uint32_t char_end(const span_ctx *c, uint32_t o)
{
    int32_t cp;
    return o + (uint32_t)tfm_bert_utf8_next(c->text + o, c->len - o, &cp);
}

static void span_word(void *ctx, const char *w, size_t n)
{
    span_ctx *c = ctx;
    const tfm_wordpiece *wp = c->wp;
    size_t i0 = c->out->len;
    tfm_wordpiece_encode_word(wp, w, n, c->out);
    size_t at = 0;
    for (size_t i = i0; i < c->out->len; i++) {
        size_t pl = n;
        if (!(c->out->len == i0 + 1 && c->out->data[i] == wp->unk_id)) {
            tfm_wordpiece_piece(wp, c->out->data[i], &pl);
            if (i > i0 && pl >= wp->prefix_len)
                pl -= wp->prefix_len;
        }
        size_t b = at + pl < n ? at + pl : n;
        /* the piece's normalized bytes [at, b) come from these characters */
        tfm_ids_push(c->start, at < n ? c->src.data[at] : char_end(c, c->src.data[n - 1]));
        tfm_ids_push(c->end, b > at ? char_end(c, c->src.data[b - 1]) : c->start->data[i]);
        at = b;
    }
}

void tfm_wordpiece_encode_spans(const tfm_wordpiece *wp, tfm_wordpiece_scratch *s,
                                const char *text, size_t len, tfm_ids *out, tfm_ids *start,
                                tfm_ids *end)
{
    tfm_wordpiece_scratch local = {{0}};
    tfm_wordpiece_scratch *sc = s ? s : &local;
    span_ctx c = {wp, out, start, end, {0}, (const unsigned char *)text, len};
    tfm_bert_split_src(&wp->norm, wp->normalize, wp->pretokenize, text, len, &sc->word, &c.src,
                       span_word, &c);
    tfm_ids_free(&c.src);
    if (!s)
        tfm_buf_free(&local.word);
}

/* ---- decoding ---- */

/* HF's decoder cleanup (decoders/wordpiece.rs), applied to each piece once it
 * carries its joining space: the replacements run in this order, each over
 * the whole piece. */
static void cleanup(tfm_buf *b, size_t from)
{
    static const char *const rep[][2] = {
        {" .", "."},   {" ?", "?"},     {" !", "!"},       {" ,", ","},
        {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},     {" do not", " don't"},
        {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
    };
    if (memchr(b->data + from, ' ', b->len - from) == NULL)
        return;
    tfm_buf t = {0};
    for (size_t r = 0; r < sizeof rep / sizeof rep[0]; r++) {
        const char *pat = rep[r][0], *to = rep[r][1];
        size_t pn = strlen(pat), tn = strlen(to);
        char *s = b->data + from;
        size_t n = b->len - from;
        if (n < pn || !memmem(s, n, pat, pn))
            continue;
        tfm_buf_clear(&t);
        for (size_t i = 0; i < n;) {
            if (i + pn <= n && memcmp(s + i, pat, pn) == 0) {
                tfm_buf_append(&t, to, tn);
                i += pn;
            } else {
                tfm_buf_putc(&t, s[i++]);
            }
        }
        b->len = from;
        tfm_buf_append(b, t.data, t.len);
    }
    tfm_buf_free(&t);
}

void tfm_wordpiece_decode_pieces(const char *const *pieces, const size_t *lens, size_t n,
                                 const char *prefix, int clean, tfm_buf *out)
{
    size_t pn = strlen(prefix);
    for (size_t i = 0; i < n; i++) {
        size_t from = out->len;
        const char *p = pieces[i];
        size_t len = lens[i];
        if (i != 0) {
            if (len >= pn && memcmp(p, prefix, pn) == 0) {
                p += pn;
                len -= pn;
            } else {
                tfm_buf_putc(out, ' ');
            }
        }
        tfm_buf_append(out, p, len);
        if (clean)
            cleanup(out, from);
    }
}

void tfm_wordpiece_decode_pieces_wp(const tfm_wordpiece *wp, const char *const *pieces,
                                    const size_t *lens, size_t n, tfm_buf *out)
{
    tfm_wordpiece_decode_pieces(pieces, lens, n, wp->dec_prefix, wp->dec_cleanup, out);
}

int tfm_wordpiece_decode(const tfm_wordpiece *wp, const uint32_t *ids, size_t n,
                         tfm_buf *out, tfm_err *err)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= wp->n || wp->len[ids[i]] == NONE)
            return tfm_err_set(err, "token id %u is not in the vocabulary (size %u)", ids[i],
                               wp->n);
    const char **p = tfm_malloc((n ? n : 1) * sizeof *p);
    size_t *l = tfm_malloc((n ? n : 1) * sizeof *l);
    for (size_t i = 0; i < n; i++) {
        p[i] = wp->arena + wp->off[ids[i]];
        l[i] = wp->len[ids[i]];
    }
    tfm_wordpiece_decode_pieces(p, l, n, wp->dec_prefix, wp->dec_cleanup, out);
    free(p);
    free(l);
    return 0;
}

/* ---- writing tokenizer.json pieces ---- */

static const char *jbool(int v)
{
    return v < 0 ? "null" : v ? "true" : "false";
}

void tfm_wordpiece_normalizer_json(const tfm_wordpiece *wp, tfm_buf *out)
{
    if (!wp->normalize) {
        tfm_buf_puts(out, "null");
        return;
    }
    tfm_buf_printf(out,
                   "{\"type\":\"BertNormalizer\",\"clean_text\":%s,\"handle_chinese_chars\":%s,"
                   "\"strip_accents\":%s,\"lowercase\":%s}",
                   jbool(wp->norm.clean_text), jbool(wp->norm.handle_chinese_chars),
                   jbool(wp->norm.strip_accents), jbool(wp->norm.lowercase));
}

void tfm_wordpiece_pre_tokenizer_json(const tfm_wordpiece *wp, tfm_buf *out)
{
    tfm_buf_puts(out, wp->pretokenize ? "{\"type\":\"BertPreTokenizer\"}" : "null");
}

void tfm_wordpiece_model_json(const tfm_wordpiece *wp, tfm_buf *out)
{
    tfm_buf_puts(out, "{\"type\":\"WordPiece\",\"unk_token\":");
    tfm_buf_put_json_string(out, wp->unk, strlen(wp->unk));
    tfm_buf_puts(out, ",\"continuing_subword_prefix\":");
    tfm_buf_put_json_string(out, wp->prefix, wp->prefix_len);
    tfm_buf_printf(out, ",\"max_input_chars_per_word\":%u,\"vocab\":{", wp->max_chars);
    int first = 1;
    for (uint32_t i = 0; i < wp->n; i++) {
        if (wp->len[i] == NONE)
            continue;
        /* A duplicate piece (vocab.txt may have them) can't be a JSON key
         * twice; write the id that encoding produces. */
        if (tfm_wordpiece_id(wp, wp->arena + wp->off[i], wp->len[i]) != (int64_t)i)
            continue;
        if (!first)
            tfm_buf_putc(out, ',');
        first = 0;
        tfm_buf_put_json_string(out, wp->arena + wp->off[i], wp->len[i]);
        tfm_buf_printf(out, ":%u", i);
    }
    tfm_buf_puts(out, "}}");
}

void tfm_wordpiece_decoder_json(const tfm_wordpiece *wp, tfm_buf *out)
{
    tfm_buf_puts(out, "{\"type\":\"WordPiece\",\"prefix\":");
    tfm_buf_put_json_string(out, wp->dec_prefix, strlen(wp->dec_prefix));
    tfm_buf_printf(out, ",\"cleanup\":%s}", jbool(wp->dec_cleanup));
}

void tfm_wordpiece_post_processor_json(const tfm_wordpiece *wp, tfm_buf *out)
{
    int64_t cls = tfm_wordpiece_id(wp, "[CLS]", 5), sep = tfm_wordpiece_id(wp, "[SEP]", 5);
    if (cls < 0 || sep < 0) {
        tfm_buf_puts(out, "null");
        return;
    }
    tfm_buf_printf(out,
                   "{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",%lld],"
                   "\"cls\":[\"[CLS]\",%lld]}",
                   (long long)sep, (long long)cls);
}
