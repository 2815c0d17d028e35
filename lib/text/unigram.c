/* SentencePiece's Unigram model: normalizer, lattice, Viterbi, n-best and
 * sampling, decoding (see unigram.h). */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "text/unigram.h"
#include "text/unigram_trie.h"
#include "text/utf8.h"

/* ---- the model ---- */

struct tfm_unigram {
    uint32_t n, cap;
    char **piece;
    uint32_t *plen;
    float *score;
    uint8_t *type;
    int64_t unk;
    int byte_fallback;
    int32_t byte_id[256];
    float min_score, max_score;
    tfm_uni_trie all;  /* every piece */
    tfm_uni_trie user; /* user-defined symbols, matched before normalization */
    tfm_uni_dtrie dall, duser; /* the two compiled (by new, again by finish) */
    int has_user;
    uint8_t user_first[256]; /* a user-defined symbol starts with the byte */
    /* bit c (c < 0x10000): the character passes normalization unchanged,
     * whatever follows it (no charsmap rule starts with it, no computed
     * normalizer); NULL: none is known to */
    uint8_t *plain;
    /* an ASCII byte that only begins rules (Latin letters begin their
     * combining sequences): the charsmap's position after it, else 0; the
     * byte is plain when the next byte does not go on from there */
    uint32_t ascii_after[128];
    int bpe;        /* model_type BPE: merges by score instead of the lattice */
    int has_unused; /* BPE: merges into unused pieces are undone at the end */
    /* normalizer */
    tfm_uni_norm_spec spec; /* spec.charsmap points at charsmap */
    unsigned char *charsmap;
    uint32_t *da; /* the double-array's units */
    size_t n_da;
    const char *nstr; /* replacement strings (in charsmap) */
    char *unk_surface; /* what the unknown piece decodes to */
    tfm_unigram *denorm; /* the decoded text's normalizer, or NULL */
    size_t unk_surface_len;
    size_t nstr_len;
};

/* Darts-clone's unit layout. */
static inline uint32_t da_offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
static inline uint32_t da_label(uint32_t u) { return u & ((1u << 31) | 0xff); }
static inline int da_has_leaf(uint32_t u) { return (u >> 8) & 1; }
static inline uint32_t da_value(uint32_t u) { return u & ((1u << 31) - 1); }

/* Every node reachable from the root: its children inside the array, each
 * leaf's string inside the blob and NUL-terminated there. */
static int charsmap_check(tfm_unigram *u, const char *what, tfm_err *err)
{
    const uint32_t *a = u->da;
    size_t N = u->n_da;
    uint8_t *seen = tfm_calloc(N, 1);
    uint32_t *stack = tfm_malloc(N * sizeof *stack);
    size_t sp = 0;
    int rc = 0;
    uint32_t root = da_offset(a[0]);
    if (root >= N) {
        rc = tfm_err_set(err, "%s: the precompiled charsmap's trie points outside itself", what);
        goto done;
    }
    seen[root] = 1;
    stack[sp++] = root;
    while (sp && !rc) {
        uint32_t base = stack[--sp];
        for (uint32_t c = 0; c < 256; c++) {
            uint32_t pos = base ^ c;
            if (pos >= N || da_label(a[pos]) != c)
                continue;
            uint32_t next = pos ^ da_offset(a[pos]);
            if (next >= N) {
                rc = tfm_err_set(err, "%s: the precompiled charsmap's trie points outside "
                                      "itself (unit %u)", what, pos);
                break;
            }
            if (da_has_leaf(a[pos])) {
                uint32_t v = da_value(a[next]);
                if (v >= u->nstr_len || !memchr(u->nstr + v, 0, u->nstr_len - v)) {
                    rc = tfm_err_set(err, "%s: the precompiled charsmap's trie points past its "
                                          "strings (unit %u)", what, next);
                    break;
                }
            }
            if (!seen[next]) {
                seen[next] = 1;
                stack[sp++] = next;
            }
        }
    }
done:
    free(seen);
    free(stack);
    return rc;
}

static size_t utf8_put(uint32_t c, unsigned char *b)
{
    if (c < 0x80) {
        b[0] = (unsigned char)c;
        return 1;
    }
    if (c < 0x800) {
        b[0] = (unsigned char)(0xC0 | c >> 6);
        b[1] = (unsigned char)(0x80 | (c & 0x3F));
        return 2;
    }
    b[0] = (unsigned char)(0xE0 | c >> 12);
    b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
    b[2] = (unsigned char)(0x80 | (c & 0x3F));
    return 3;
}

/* u->plain from the charsmap: a character is plain when the walk over its
 * bytes meets no rule and leaves the trie before its end. */
static void plain_build(tfm_unigram *u)
{
    free(u->plain);
    u->plain = NULL;
    if (u->spec.nmt || u->spec.nfkc)
        return;
    u->plain = tfm_calloc(0x10000 / 8, 1);
    for (uint32_t c = 0; c < 0x10000; c++) {
        if (c >= 0xD800 && c <= 0xDFFF)
            continue;
        unsigned char b[4];
        size_t k = utf8_put(c, b), i = 0;
        if (u->n_da) {
            const uint32_t *a = u->da;
            uint32_t pos = da_offset(a[0]);
            for (; i < k; i++) {
                pos ^= b[i];
                if (pos >= u->n_da || da_label(a[pos]) != b[i])
                    break;
                uint32_t unit = a[pos];
                pos ^= da_offset(unit);
                if (da_has_leaf(unit) || pos >= u->n_da) {
                    i = k; /* a rule (or a walk past the array): not plain */
                    break;
                }
            }
        }
        if (!u->n_da || i < k)
            u->plain[c >> 3] |= (uint8_t)(1u << (c & 7));
    }
    for (uint32_t c = 0; c < 128 && u->n_da; c++) {
        const uint32_t *a = u->da;
        uint32_t pos = da_offset(a[0]) ^ c;
        u->ascii_after[c] = 0;
        if (u->plain[c >> 3] >> (c & 7) & 1 || pos >= u->n_da || da_has_leaf(a[pos]))
            continue;
        pos ^= da_offset(a[pos]);
        if (pos && pos < u->n_da)
            u->ascii_after[c] = pos;
    }
}

int tfm_unigram_new(tfm_unigram **out, const tfm_uni_norm_spec *spec, const char *what,
                    tfm_err *err)
{
    tfm_unigram *u = tfm_calloc(1, sizeof *u);
    u->unk = -1;
    tfm_unigram_set_unk_surface(u, " \xe2\x81\x87 ", 5); /* sentencepiece's default */
    u->min_score = FLT_MAX;
    u->max_score = FLT_MIN; /* as sentencepiece: user symbols then score about -0.1 */
    for (int i = 0; i < 256; i++)
        u->byte_id[i] = -1;
    tfm_uni_trie_init(&u->all);
    tfm_uni_trie_init(&u->user);
    tfm_uni_dt_build(&u->dall, &u->all);
    tfm_uni_dt_build(&u->duser, &u->user);
    u->spec = *spec;
    u->spec.charsmap = NULL;
    u->spec.charsmap_len = 0;
    *out = NULL;
    if (spec->charsmap_len) {
        const unsigned char *b = spec->charsmap;
        size_t n = spec->charsmap_len;
        uint32_t tsize = n >= 4 ? (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                      (uint32_t)b[3] << 24
                                : 0;
        if (n <= 4 || tsize == 0 || tsize % 4 || tsize > n - 4) {
            tfm_unigram_free(u);
            return tfm_err_set(err, "%s: the precompiled charsmap is malformed (its trie size "
                                    "does not fit its %zu bytes)", what, n);
        }
        u->charsmap = tfm_malloc(n);
        memcpy(u->charsmap, b, n);
        u->spec.charsmap = u->charsmap;
        u->spec.charsmap_len = n;
        u->n_da = tsize / 4;
        u->da = tfm_malloc(tsize);
        for (size_t i = 0; i < u->n_da; i++) {
            const unsigned char *p = b + 4 + 4 * i;
            u->da[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                       (uint32_t)p[3] << 24;
        }
        u->nstr = (const char *)u->charsmap + 4 + tsize;
        u->nstr_len = n - 4 - tsize;
        if (charsmap_check(u, what, err)) {
            tfm_unigram_free(u);
            return -1;
        }
    }
    plain_build(u);
    *out = u;
    return 0;
}

void tfm_unigram_set_unk_surface(tfm_unigram *u, const char *s, size_t n)
{
    free(u->unk_surface);
    u->unk_surface = tfm_malloc(n + 1);
    memcpy(u->unk_surface, s, n);
    u->unk_surface[n] = 0;
    u->unk_surface_len = n;
}

int tfm_unigram_set_denormalizer(tfm_unigram *u, const tfm_uni_norm_spec *spec, const char *what,
                                 tfm_err *err)
{
    tfm_unigram *d;
    if (tfm_unigram_new(&d, spec, what, err))
        return -1;
    tfm_unigram_free(u->denorm);
    u->denorm = d;
    return 0;
}

void tfm_unigram_free(tfm_unigram *u)
{
    if (!u)
        return;
    for (uint32_t i = 0; i < u->n; i++)
        free(u->piece[i]);
    free(u->piece);
    free(u->plen);
    free(u->score);
    free(u->type);
    tfm_uni_trie_free(&u->all);
    tfm_uni_trie_free(&u->user);
    free(u->dall.u);
    free(u->duser.u);
    free(u->charsmap);
    free(u->unk_surface);
    free(u->da);
    free(u->plain);
    tfm_unigram_free(u->denorm);
    free(u);
}

/* <0xXX> -> XX, or -1. */
static int byte_of_piece(const char *p, size_t n)
{
    static const char hex[] = "0123456789ABCDEF";
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>')
        return -1;
    const char *h = memchr(hex, p[3], 16), *l = memchr(hex, p[4], 16);
    if (!h || !l || !p[3] || !p[4])
        return -1;
    return (int)((h - hex) * 16 + (l - hex));
}

int tfm_unigram_add(tfm_unigram *u, const char *piece, size_t len, float score,
                    tfm_uni_type type, const char *what, tfm_err *err)
{
    uint32_t id = u->n;
    if (len == 0)
        return tfm_err_set(err, "%s: piece %u is empty", what, id);
    if (!isfinite(score))
        return tfm_err_set(err, "%s: piece %u ('%.*s') has a non-finite score", what, id,
                           (int)(len > 64 ? 64 : len), piece);
    if (type < TFM_UNI_NORMAL || type > TFM_UNI_BYTE)
        return tfm_err_set(err, "%s: piece %u has an unknown type %d", what, id, (int)type);
    uint32_t node = tfm_uni_trie_insert(&u->all, piece, len);
    if (u->all.value[node] >= 0)
        return tfm_err_set(err, "%s: piece '%.*s' appears twice (ids %d and %u)", what,
                           (int)(len > 64 ? 64 : len), piece, u->all.value[node], id);
    if (type == TFM_UNI_UNKNOWN) {
        if (u->unk >= 0)
            return tfm_err_set(err, "%s: two unknown pieces (ids %lld and %u)", what,
                               (long long)u->unk, id);
        u->unk = id;
    }
    if (type == TFM_UNI_BYTE) {
        int b = byte_of_piece(piece, len);
        if (b < 0)
            return tfm_err_set(err, "%s: byte piece %u ('%.*s') is not <0x00>..<0xFF>", what,
                               id, (int)(len > 64 ? 64 : len), piece);
        u->byte_id[b] = (int32_t)id;
    }
    u->all.value[node] = (int32_t)id;
    if (type == TFM_UNI_UNUSED)
        u->has_unused = 1;
    if (type == TFM_UNI_USER) {
        uint32_t un = tfm_uni_trie_insert(&u->user, piece, len); /* may move user.value */
        u->user.value[un] = (int32_t)id;
        u->has_user = 1;
    }
    if (type == TFM_UNI_NORMAL) {
        if (score < u->min_score)
            u->min_score = score;
        if (score > u->max_score)
            u->max_score = score;
    }
    if (u->n == u->cap) {
        u->cap = u->cap ? u->cap * 2 : 256;
        u->piece = tfm_realloc(u->piece, u->cap * sizeof *u->piece);
        u->plen = tfm_realloc(u->plen, u->cap * sizeof *u->plen);
        u->score = tfm_realloc(u->score, u->cap * sizeof *u->score);
        u->type = tfm_realloc(u->type, u->cap * sizeof *u->type);
    }
    u->piece[id] = tfm_strndup(piece, len);
    u->plen[id] = (uint32_t)len;
    u->score[id] = score;
    u->type[id] = (uint8_t)type;
    u->n++;
    return 0;
}

int tfm_unigram_finish(tfm_unigram *u, int byte_fallback, const char *what, tfm_err *err)
{
    if (u->unk < 0)
        return tfm_err_set(err, "%s: the model has no unknown piece", what);
    if (byte_fallback)
        for (int b = 0; b < 256; b++)
            if (u->byte_id[b] < 0)
                return tfm_err_set(err, "%s: byte fallback without the byte piece <0x%02X>",
                                   what, b);
    u->byte_fallback = byte_fallback;
    free(u->dall.u);
    free(u->duser.u);
    if (tfm_uni_dt_build(&u->dall, &u->all) | tfm_uni_dt_build(&u->duser, &u->user))
        return tfm_err_set(err, "%s: the model's pieces make too large a trie", what);
    for (int b = 0; b < 256; b++)
        u->user_first[b] = tfm_uni_dt_step(&u->duser, 0, (unsigned char)b) >= 0;
    return 0;
}

void tfm_unigram_set_bpe(tfm_unigram *u, int bpe) { u->bpe = bpe != 0; }
int tfm_unigram_is_bpe(const tfm_unigram *u) { return u->bpe; }
uint32_t tfm_unigram_size(const tfm_unigram *u) { return u->n; }
float tfm_unigram_score(const tfm_unigram *u, uint32_t id) { return u->score[id]; }
tfm_uni_type tfm_unigram_type(const tfm_unigram *u, uint32_t id) { return u->type[id]; }
int64_t tfm_unigram_unk_id(const tfm_unigram *u) { return u->unk; }
int tfm_unigram_byte_fallback(const tfm_unigram *u) { return u->byte_fallback; }
const tfm_uni_norm_spec *tfm_unigram_norm_spec(const tfm_unigram *u) { return &u->spec; }

const char *tfm_unigram_piece(const tfm_unigram *u, uint32_t id, size_t *len)
{
    if (id >= u->n)
        return NULL;
    if (len)
        *len = u->plen[id];
    return u->piece[id];
}

/* ---- normalization ---- */

/* Longest match of the trie at s[0..n) with a value; 0 if none. */
static size_t trie_longest(const tfm_uni_dtrie *d, const char *s, size_t n)
{
    size_t best = 0;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        node = tfm_uni_dt_step(d, node, (unsigned char)s[i]);
        if (node < 0)
            break;
        if (d->u[node].value >= 0)
            best = i + 1;
    }
    return best;
}

/* Longest charsmap rule at s[0..n): its length (0: none), *rep its text
 * (checked at load to lie inside the blob). */
static size_t charsmap_match(const tfm_unigram *u, const unsigned char *s, size_t n,
                             const char **rep)
{
    const uint32_t *a = u->da;
    size_t N = u->n_da, best = 0;
    if (!N)
        return 0;
    uint32_t pos = da_offset(a[0]);
    for (size_t i = 0; i < n; i++) {
        pos ^= s[i];
        if (pos >= N)
            break;
        uint32_t unit = a[pos];
        if (da_label(unit) != s[i])
            break;
        pos ^= da_offset(unit);
        if (pos >= N)
            break;
        if (da_has_leaf(unit)) {
            best = i + 1;
            *rep = u->nstr + da_value(a[pos]);
        }
    }
    return best;
}

static const char SPACE_SYM[] = "\xe2\x96\x81"; /* U+2581 */

/* sentencepiece's nmt rules: 1 a space, 0 dropped, -1 neither. */
static int nmt_rule(int32_t c)
{
    switch (c) {
    case 0x09: case 0x0A: case 0x0C: case 0x0D: case 0x1680: case 0x200B: case 0x200C:
    case 0x200E: case 0x200F: case 0x2028: case 0x2029: case 0x2581: case 0xFEFF:
    case 0xFFFD:
        return 1;
    case 0x0B: case 0x7F: case 0x8F: case 0x9F:
        return 0;
    default:
        return (c >= 0x01 && c <= 0x08) || (c >= 0x0E && c <= 0x1F) ? 0 : -1;
    }
}

static void nfkc_put(const tfm_unigram *u, const char *s, size_t n, tfm_buf *out)
{
    utf8proc_uint8_t *d = NULL;
    utf8proc_ssize_t k = -1;
    if (n && u->spec.nfkc)
        k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &d,
                         UTF8PROC_STABLE | UTF8PROC_COMPAT | UTF8PROC_COMPOSE);
    if (k >= 0)
        tfm_buf_append(out, d, (size_t)k);
    else
        tfm_buf_append(out, s, n);
    free(d);
}

/* The computed normalizer (spec nmt/nfkc) on the grapheme cluster at
 * s[0..n) (valid UTF-8 at s): the bytes consumed; the result in *tmp. */
static size_t computed_prefix(const tfm_unigram *u, const char *s, size_t n, tfm_buf *tmp)
{
    const unsigned char *b = (const unsigned char *)s;
    tfm_buf_clear(tmp);
    if (b[0] < 0x80 && (n == 1 || b[1] < 0x80)) { /* ASCII: NFKC leaves it */
        int r = u->spec.nmt ? nmt_rule(b[0]) : -1;
        if (r)
            tfm_buf_putc(tmp, r > 0 ? ' ' : s[0]);
        return 1;
    }
    size_t adv, pos, cs = 0;
    int32_t prev = tfm_utf8_decode(b, n, &adv), c;
    utf8proc_int32_t state = 0;
    for (pos = adv; pos < n; pos += adv, prev = c) {
        c = tfm_utf8_decode(b + pos, n - pos, &adv);
        if (c < 0 || utf8proc_grapheme_break_stateful(prev, c, &state))
            break;
    }
    for (size_t i = 0; i < pos; i += adv) {
        c = tfm_utf8_decode(b + i, pos - i, &adv);
        int r = u->spec.nmt ? nmt_rule(c) : -1;
        if (r < 0)
            continue;
        nfkc_put(u, s + cs, i - cs, tmp);
        if (r)
            tfm_buf_putc(tmp, ' ');
        cs = i + adv;
    }
    nfkc_put(u, s + cs, pos - cs, tmp);
    return pos;
}

/* One step of normalization at s[0..n) (n > 0): the bytes consumed; *r,
 * *rl: what they become (possibly in *tmp). */
/* The length of the character at b[0..n) if it passes normalization
 * unchanged (plain, or an ASCII byte whose rules the next byte does not go
 * on with) and no user symbol starts there; else 0.  Needs u->plain. */
static inline size_t plain_len(const tfm_unigram *u, const unsigned char *b, size_t n)
{
    if (u->has_user && u->user_first[b[0]])
        return 0;
    uint32_t c, pos;
    if (b[0] < 0x80) {
        c = b[0];
        if (u->plain[c >> 3] >> (c & 7) & 1)
            return 1;
        return (pos = u->ascii_after[c]) != 0 &&
               (n == 1 || (pos ^ b[1]) >= u->n_da || da_label(u->da[pos ^ b[1]]) != b[1]);
    }
    size_t m;
    if (b[0] >= 0xC2 && b[0] <= 0xDF && n >= 2 && (b[1] & 0xC0) == 0x80) {
        c = (uint32_t)(b[0] & 0x1F) << 6 | (b[1] & 0x3F);
        m = 2;
    } else if (b[0] >= 0xE0 && b[0] <= 0xEF && n >= 3 && (b[1] & 0xC0) == 0x80 &&
               (b[2] & 0xC0) == 0x80) {
        c = (uint32_t)(b[0] & 0x0F) << 12 | (uint32_t)(b[1] & 0x3F) << 6 | (b[2] & 0x3F);
        m = 3;
        if (c < 0x800) /* overlong: U+FFFD, not plain */
            return 0;
    } else {
        return 0;
    }
    return u->plain[c >> 3] >> (c & 7) & 1 ? m : 0;
}

static inline size_t norm_prefix(const tfm_unigram *u, const char *s, size_t n,
                                 const char **r, size_t *rl, tfm_buf *tmp)
{
    size_t m;
    /* most characters */
    if (u->plain && (m = plain_len(u, (const unsigned char *)s, n)) > 0) {
        *r = s;
        *rl = m;
        return m;
    }
    if (u->has_user && (m = trie_longest(&u->duser, s, n)) > 0) {
        *r = s;
        *rl = m;
        return m;
    }
    const char *rep;
    if ((m = charsmap_match(u, (const unsigned char *)s, n, &rep)) > 0) {
        *r = rep;
        *rl = strlen(rep);
        return m;
    }
    size_t adv;
    if (tfm_utf8_decode((const unsigned char *)s, n, &adv) < 0) {
        *r = "\xef\xbf\xbd"; /* U+FFFD for the one invalid byte */
        *rl = 3;
        return 1;
    }
    if (u->spec.nmt || u->spec.nfkc) {
        m = computed_prefix(u, s, n, tmp);
        *r = tmp->data ? tmp->data : "";
        *rl = tmp->len;
        return m;
    }
    *r = s;
    *rl = adv;
    return adv;
}

static void put_src(tfm_ids *src, size_t at, size_t k)
{
    for (size_t i = 0; i < k; i++)
        tfm_ids_push(src, (uint32_t)at);
}

static void normalize(const tfm_unigram *u, const char *s, size_t n, tfm_buf *out,
                      tfm_ids *src, int no_prefix);

void tfm_unigram_normalize(const tfm_unigram *u, const char *s, size_t n, tfm_buf *out,
                           tfm_ids *src)
{
    normalize(u, s, n, out, src, 0);
}

static void normalize_spm(const tfm_unigram *u, const char *s, size_t n, tfm_buf *out,
                          tfm_ids *src, int no_prefix);

/* ALBERT's normalizers before the charsmap (spec quotes, nfkd,
 * strip_accents, lowercase) on s into out, map[i] the offset in s of out's
 * byte i. */
static void pre_normalize(const tfm_uni_norm_spec *sp, const char *s, size_t n, tfm_buf *out,
                          tfm_ids *map)
{
    tfm_buf t = {0};
    tfm_ids tm = {0};
    for (size_t i = 0; i < n;) {
        if (sp->quotes && i + 1 < n && (s[i] == '`' || s[i] == '\'') && s[i + 1] == s[i]) {
            tfm_buf_putc(&t, '"');
            tfm_ids_push(&tm, (uint32_t)i);
            i += 2;
            continue;
        }
        size_t adv;
        int32_t c = tfm_utf8_decode((const unsigned char *)s + i, n - i, &adv);
        utf8proc_int32_t d[32];
        utf8proc_ssize_t k = -1;
        int last = 0;
        if (c >= 0 && sp->nfkd)
            k = utf8proc_decompose_char(c, d, 32, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT, &last);
        if (k < 0 || k > 32) {
            d[0] = c;
            k = 1;
        }
        for (utf8proc_ssize_t j = 0; j < k; j++) {
            if (c < 0) { /* an invalid byte, kept */
                tfm_buf_putc(&t, s[i]);
                tfm_ids_push(&tm, (uint32_t)i);
                break;
            }
            if (sp->strip_accents && utf8proc_category(d[j]) == UTF8PROC_CATEGORY_MN)
                continue;
            unsigned char e[4];
            size_t el = tfm_utf8_encode((uint32_t)d[j], e);
            tfm_buf_append(&t, e, el);
            for (size_t b = 0; b < el; b++)
                tfm_ids_push(&tm, (uint32_t)i);
        }
        i += adv ? adv : 1;
    }
    if (sp->lowercase) {
        tfm_ids lm = {0};
        tfm_utf8_lower_src(t.data ? t.data : "", t.len, out, &lm);
        for (size_t b = 0; b < lm.len; b++)
            tfm_ids_push(map, tm.data[lm.data[b]]);
        tfm_ids_free(&lm);
    } else {
        tfm_buf_append(out, t.data, t.len);
        tfm_ids_append(map, tm.data, tm.len);
    }
    tfm_buf_free(&t);
    tfm_ids_free(&tm);
}

static void normalize(const tfm_unigram *u, const char *s, size_t n, tfm_buf *out,
                      tfm_ids *src, int no_prefix)
{
    const tfm_uni_norm_spec *sp = &u->spec;
    if (!(sp->quotes || sp->nfkd || sp->strip_accents || sp->lowercase)) {
        normalize_spm(u, s, n, out, src, no_prefix);
        return;
    }
    tfm_buf t = {0};
    tfm_ids map = {0};
    pre_normalize(sp, s, n, &t, &map);
    size_t s0 = src ? src->len : 0;
    normalize_spm(u, t.data ? t.data : "", t.len, out, src, no_prefix);
    /* offsets in the pre-normalized text back to s's (its end: n) */
    for (size_t i = s0; src && i < src->len; i++)
        src->data[i] = src->data[i] < map.len ? map.data[src->data[i]] : (uint32_t)n;
    tfm_buf_free(&t);
    tfm_ids_free(&map);
}

static void normalize_spm(const tfm_unigram *u, const char *s, size_t n, tfm_buf *out,
                          tfm_ids *src, int no_prefix)
{
    const tfm_uni_norm_spec *sp = &u->spec;
    size_t at = 0, o0 = out->len;
    const char *r;
    size_t rl, m;
    tfm_buf tmp = {0};
    if (sp->remove_extra_whitespaces)
        while (at < n && (m = norm_prefix(u, s + at, n - at, &r, &rl, &tmp)) > 0 && rl == 1 &&
               r[0] == ' ')
            at += m;
    if (at == n) {
        tfm_buf_free(&tmp);
        return;
    }
    const char *ws = sp->escape_whitespaces ? SPACE_SYM : " ";
    size_t wsl = sp->escape_whitespaces ? 3 : 1;
    size_t s0 = src ? src->len : 0;
    int prefix = sp->add_dummy_prefix && !no_prefix;
    if (prefix) {
        tfm_buf_append(out, ws, wsl);
        if (src)
            put_src(src, at, wsl);
    }
    int prev_space = sp->remove_extra_whitespaces;
    while (at < n) {
        m = norm_prefix(u, s + at, n - at, &r, &rl, &tmp);
        if (prev_space)
            while (rl && r[0] == ' ') {
                r++;
                rl--;
            }
        if (rl) {
            if (out->cap - out->len < 3 * rl)
                tfm_buf_reserve(out, 3 * rl + n - at);
            char *d = out->data + out->len;
            for (size_t i = 0; i < rl; i++) {
                if (r[i] == ' ' && sp->escape_whitespaces) {
                    memcpy(d, SPACE_SYM, 3);
                    d += 3;
                } else {
                    *d++ = r[i];
                }
            }
            if (src)
                put_src(src, at, (size_t)(d - (out->data + out->len)));
            out->len = (size_t)(d - out->data);
            prev_space = r[rl - 1] == ' ';
        }
        at += m;
        if (!sp->remove_extra_whitespaces)
            prev_space = 0;
    }
    if (sp->remove_extra_whitespaces)
        while (out->len - o0 >= wsl && memcmp(out->data + out->len - wsl, ws, wsl) == 0) {
            out->len -= wsl;
            if (src)
                src->len -= wsl;
        }
    /* HF's Metaspace looks at the text after the prefix would go */
    if (prefix && sp->prefix_unless_space && out->len - o0 >= 2 * wsl &&
        memcmp(out->data + o0 + wsl, ws, wsl) == 0) {
        memmove(out->data + o0, out->data + o0 + wsl, out->len - o0 - wsl);
        out->len -= wsl;
        if (src) {
            memmove(src->data + s0, src->data + s0 + wsl, (src->len - s0 - wsl) * sizeof *src->data);
            src->len -= wsl;
        }
    }
    tfm_buf_free(&tmp);
}

/* ---- the lattice ---- */

/* sentencepiece's character length from the first byte. */
static inline size_t one_char_len(unsigned char c)
{
    return (size_t)"\1\1\1\1\1\1\1\1\1\1\1\1\2\2\3\4"[c >> 4];
}

/* A piece of a segmentation: normalized bytes [s, e), id. */
typedef struct seg {
    uint32_t s, e;
    uint32_t id;
} seg;

static inline int matchable(const tfm_unigram *u, int32_t id)
{
    return u->type[id] == TFM_UNI_NORMAL || u->type[id] == TFM_UNI_USER;
}

/* Calls fn for every lattice edge starting at byte p of t[0..L): the
 * matching pieces, then an unknown edge over the character when no piece
 * covers exactly it. */
typedef void (*edge_fn)(void *ctx, uint32_t s, uint32_t e, uint32_t id, double score, int user);

static void edges_at(const tfm_unigram *u, const char *t, size_t L, size_t p, edge_fn fn,
                     void *ctx)
{
    size_t mb = one_char_len((unsigned char)t[p]);
    if (mb > L - p)
        mb = L - p;
    int single = 0;
    int32_t node = 0;
    for (size_t k = p; k < L; k++) {
        node = tfm_uni_dt_step(&u->dall, node, (unsigned char)t[k]);
        if (node < 0)
            break;
        int32_t id = u->dall.u[node].value;
        if (id < 0 || !matchable(u, id))
            continue;
        size_t len = k + 1 - p;
        int user = u->type[id] == TFM_UNI_USER;
        /* a user-defined symbol always wins */
        double sc = user ? (double)((float)len * u->max_score) - 0.1 : u->score[id];
        fn(ctx, (uint32_t)p, (uint32_t)(k + 1), (uint32_t)id, sc, user);
        if (len == mb)
            single = 1;
    }
    if (!single)
        fn(ctx, (uint32_t)p, (uint32_t)(p + mb), (uint32_t)u->unk,
           (double)(u->min_score - 10.0f), 0);
}

/* Segmentation -> ids: each run of unknown pieces becomes one unknown id,
 * or with byte fallback the byte pieces of its bytes.  With src, each id's
 * span in the original text (src maps normalized bytes to it; n_orig is
 * the end). */
static void segs_to_ids(const tfm_unigram *u, const char *t, const seg *sg, size_t ns,
                        tfm_ids *out, const tfm_ids *src, size_t n_orig, tfm_ids *st,
                        tfm_ids *en)
{
    size_t L = src ? src->len : 0;
    for (size_t i = 0; i < ns; i++) {
        uint32_t s = sg[i].s, e = sg[i].e;
        int unk = (int64_t)sg[i].id == u->unk;
        if (unk && !u->byte_fallback)
            while (i + 1 < ns && (int64_t)sg[i + 1].id == u->unk)
                e = sg[++i].e;
        size_t k0 = out->len;
        if (unk && u->byte_fallback) {
            for (uint32_t b = s; b < e; b++)
                tfm_ids_push(out, (uint32_t)u->byte_id[(unsigned char)t[b]]);
        } else {
            tfm_ids_push(out, sg[i].id);
        }
        if (st) {
            uint32_t os = s < L ? src->data[s] : (uint32_t)n_orig;
            uint32_t oe = e < L ? src->data[e] : (uint32_t)n_orig;
            if (oe < os)
                oe = os;
            for (size_t k = k0; k < out->len; k++) {
                tfm_ids_push(st, os);
                tfm_ids_push(en, oe);
            }
        }
    }
}

/* Viterbi as sentencepiece's optimized encoder: starts visited in order,
 * the first best kept on ties.  Its candidate is a double (the piece's
 * score is the double of a ternary whose other arm, the user-symbol bonus,
 * is one), compared with the float stored at the node and stored back as a
 * float; summing in float instead flips near-ties ("XXXX X X" against "X X
 * XXXX").  The unknown piece's candidate is a float sum, as there. */
typedef struct vnode {
    float score;
    int32_t start; /* -1: not reached */
    uint32_t id;
} vnode;

static inline void vrelax(vnode *tn, double cand, size_t s, uint32_t id)
{
    if (tn->start < 0 || cand > tn->score) {
        tn->score = (float)cand;
        tn->start = (int32_t)s;
        tn->id = id;
    }
}

/* Buffers of one encoding thread, kept from line to line. */
struct tfm_uni_work {
    tfm_buf t;
    tfm_ids src;
    vnode *v;
    seg *sg;
    size_t cap; /* of v and sg */
};

tfm_uni_work *tfm_uni_work_new(void)
{
    return tfm_calloc(1, sizeof(tfm_uni_work));
}

void tfm_uni_work_free(tfm_uni_work *w)
{
    if (!w)
        return;
    tfm_buf_free(&w->t);
    tfm_ids_free(&w->src);
    free(w->v);
    free(w->sg);
    free(w);
}

/* The best segmentation of t[0..L) into w->sg; returns its length.  The
 * edges as edges_at gives them, walked here without the callback. */
static size_t viterbi(const tfm_unigram *u, const char *t, size_t L, tfm_uni_work *w)
{
    if (L + 1 > w->cap) {
        w->cap = 2 * (L + 1);
        free(w->v);
        free(w->sg);
        w->v = tfm_malloc(w->cap * sizeof *w->v);
        w->sg = tfm_malloc(w->cap * sizeof *w->sg);
    }
    vnode *v = w->v;
    for (size_t i = 0; i <= L; i++)
        v[i] = (vnode){0, -1, 0};
    const tfm_uni_dunit *du = u->dall.u;
    const unsigned char *b = (const unsigned char *)t;
    const float unk_score = u->min_score - 10.0f;
    for (size_t p = 0; p < L;) {
        size_t mb = one_char_len(b[p]);
        if (mb > L - p)
            mb = L - p;
        const float sp = v[p].score;
        int single = 0;
        int32_t node = 0;
        for (size_t k = p; k < L; k++) {
            int32_t c = (int32_t)(du[node].bl >> 9) + b[k];
            if ((du[c].bl & 0x1ff) != b[k])
                break;
            node = c;
            int32_t id = du[node].value;
            if (id < 0)
                continue;
            uint8_t ty = u->type[id];
            size_t len = k + 1 - p;
            if (ty == TFM_UNI_NORMAL)
                vrelax(&v[k + 1], (double)u->score[id] + sp, p, (uint32_t)id);
            else if (ty == TFM_UNI_USER) /* a user-defined symbol always wins */
                vrelax(&v[k + 1], ((double)((float)len * u->max_score) - 0.1) + sp, p,
                       (uint32_t)id);
            else
                continue;
            single |= len == mb;
        }
        if (!single) /* the unknown piece's candidate is a float sum */
            vrelax(&v[p + mb], (double)(unk_score + sp), p, (uint32_t)u->unk);
        p += mb;
    }
    size_t ns = 0;
    for (size_t e = L; e > 0; e = (size_t)v[e].start)
        ns++;
    size_t k = ns;
    for (size_t e = L; e > 0; e = (size_t)v[e].start)
        w->sg[--k] = (seg){(uint32_t)v[e].start, (uint32_t)e, v[e].id};
    return ns;
}

static size_t bpe_merge(const tfm_unigram *u, const char *t, size_t L, float alpha,
                        tfm_rng *rng, seg **sg);

static void encode(const tfm_unigram *u, tfm_uni_work *w, const char *s, size_t n,
                   tfm_ids *out, tfm_ids *start, tfm_ids *end, int no_prefix);

void tfm_unigram_encode_with(const tfm_unigram *u, tfm_uni_work *w, const char *s, size_t n,
                             tfm_ids *out, tfm_ids *start, tfm_ids *end)
{
    encode(u, w, s, n, out, start, end, 0);
}

void tfm_unigram_encode_after(const tfm_unigram *u, tfm_uni_work *w, const char *s, size_t n,
                              tfm_ids *out, tfm_ids *start, tfm_ids *end)
{
    tfm_uni_work *own = w ? NULL : tfm_uni_work_new();
    encode(u, w ? w : own, s, n, out, start, end, u->spec.prefix_first);
    tfm_uni_work_free(own);
}

static void encode(const tfm_unigram *u, tfm_uni_work *w, const char *s, size_t n,
                   tfm_ids *out, tfm_ids *start, tfm_ids *end, int no_prefix)
{
    tfm_buf_clear(&w->t);
    tfm_ids_clear(&w->src);
    normalize(u, s, n, &w->t, start ? &w->src : NULL, no_prefix);
    const char *t = w->t.data;
    if (u->bpe) {
        seg *sg;
        size_t ns = bpe_merge(u, t, w->t.len, 0, NULL, &sg);
        segs_to_ids(u, t, sg, ns, out, start ? &w->src : NULL, n, start, end);
        free(sg);
    } else if (!u->spec.split_spaces) {
        size_t ns = viterbi(u, t, w->t.len, w);
        segs_to_ids(u, t, w->sg, ns, out, start ? &w->src : NULL, n, start, end);
    } else {
        /* HF's pre-tokens: from each "▁" up to the next */
        size_t L = w->t.len;
        for (size_t a = 0, b; a < L; a = b) {
            for (b = a + 1; b < L && !(b + 3 <= L && memcmp(t + b, SPACE_SYM, 3) == 0); b++)
                ;
            size_t ns = viterbi(u, t + a, b - a, w);
            for (size_t i = 0; i < ns; i++)
                w->sg[i].s += (uint32_t)a, w->sg[i].e += (uint32_t)a;
            segs_to_ids(u, t, w->sg, ns, out, start ? &w->src : NULL, n, start, end);
        }
    }
}

void tfm_unigram_encode(const tfm_unigram *u, const char *s, size_t n, tfm_ids *out,
                        tfm_ids *start, tfm_ids *end)
{
    tfm_uni_work *w = tfm_uni_work_new();
    tfm_unigram_encode_with(u, w, s, n, out, start, end);
    tfm_uni_work_free(w);
}

/* ---- every edge, for sampling and n-best ---- */

typedef struct edge {
    uint32_t s, e, id;
    int user;
    double score;
} edge;

typedef struct edges {
    edge *a;
    size_t n, cap;
} edges;

static void collect_edge(void *ctx, uint32_t s, uint32_t e, uint32_t id, double score,
                         int user)
{
    edges *E = ctx;
    if (E->n == E->cap) {
        E->cap = E->cap ? 2 * E->cap : 64;
        E->a = tfm_realloc(E->a, E->cap * sizeof *E->a);
    }
    E->a[E->n++] = (edge){s, e, id, user, score};
}

/* Every edge of t[0..L), by start. */
static void lattice(const tfm_unigram *u, const char *t, size_t L, edges *E)
{
    for (size_t p = 0; p < L;) {
        edges_at(u, t, L, p, collect_edge, E);
        size_t mb = one_char_len((unsigned char)t[p]);
        p += mb < L - p ? mb : L - p;
    }
}

static double logaddexp(double a, double b)
{
    if (a == -INFINITY)
        return b;
    if (b == -INFINITY)
        return a;
    return a > b ? a + log1p(exp(b - a)) : b + log1p(exp(a - b));
}

void tfm_unigram_sample(const tfm_unigram *u, const char *s, size_t n, float alpha,
                        tfm_rng *rng, tfm_ids *out)
{
    tfm_buf t = {0};
    tfm_unigram_normalize(u, s, n, &t, NULL);
    size_t L = t.len;
    if (!L)
        return;
    if (u->bpe) { /* BPE-dropout */
        seg *bs;
        size_t nb = bpe_merge(u, t.data, L, alpha, rng, &bs);
        segs_to_ids(u, t.data, bs, nb, out, NULL, n, NULL, NULL);
        free(bs);
        tfm_buf_free(&t);
        return;
    }
    edges E = {0};
    lattice(u, t.data, L, &E);
    /* forward: fw[p] = log sum over paths to p of exp(alpha x score) */
    double *fw = tfm_malloc((L + 1) * sizeof *fw);
    for (size_t i = 0; i <= L; i++)
        fw[i] = -INFINITY;
    fw[0] = 0;
    for (size_t i = 0; i < E.n; i++) {
        const edge *g = &E.a[i];
        if (fw[g->s] > -INFINITY)
            fw[g->e] = logaddexp(fw[g->e], fw[g->s] + alpha * g->score);
    }
    /* edges grouped by end, for the backward draws */
    size_t *first = tfm_calloc(L + 2, sizeof *first);
    size_t *by_end = tfm_malloc((E.n + 1) * sizeof *by_end);
    for (size_t i = 0; i < E.n; i++)
        first[E.a[i].e + 1]++;
    for (size_t p = 0; p <= L; p++)
        first[p + 1] += first[p];
    size_t *fill = tfm_malloc((L + 1) * sizeof *fill);
    memcpy(fill, first, (L + 1) * sizeof *fill);
    for (size_t i = 0; i < E.n; i++)
        by_end[fill[E.a[i].e]++] = i;
    seg *sg = tfm_malloc((L + 1) * sizeof *sg);
    size_t ns = 0;
    for (size_t p = L; p > 0;) {
        /* draw an edge ending at p: weight exp(fw[start] + alpha x score - fw[p]) */
        double r = tfm_rng_double(rng), acc = 0;
        size_t pick = SIZE_MAX, last = SIZE_MAX;
        for (size_t k = first[p]; k < first[p + 1]; k++) {
            const edge *g = &E.a[by_end[k]];
            if (fw[g->s] == -INFINITY)
                continue;
            last = by_end[k];
            acc += exp(fw[g->s] + alpha * g->score - fw[p]);
            if (r < acc) {
                pick = last;
                break;
            }
        }
        if (pick == SIZE_MAX)
            pick = last; /* rounding left the sum just under r */
        TFM_ASSERT(pick != SIZE_MAX);
        sg[ns++] = (seg){E.a[pick].s, E.a[pick].e, E.a[pick].id};
        p = E.a[pick].s;
    }
    for (size_t i = 0; i < ns / 2; i++) {
        seg x = sg[i];
        sg[i] = sg[ns - 1 - i];
        sg[ns - 1 - i] = x;
    }
    segs_to_ids(u, t.data, sg, ns, out, NULL, n, NULL, NULL);
    free(sg);
    free(fill);
    free(by_end);
    free(first);
    free(fw);
    free(E.a);
    tfm_buf_free(&t);
}

/* k-best: each position keeps its best k partial paths, scored as the
 * Viterbi search scores them (a double candidate against the stored float;
 * the unknown piece's a float sum), so that the first is its segmentation. */
typedef struct kent {
    float score;
    uint32_t edge; /* the last edge */
    uint32_t rank; /* which of its start's paths precedes it */
} kent;

size_t tfm_unigram_nbest(const tfm_unigram *u, const char *s, size_t n, size_t nbest,
                         tfm_ids *out, tfm_ids *off)
{
    tfm_buf t = {0};
    tfm_unigram_normalize(u, s, n, &t, NULL);
    size_t L = t.len, K = nbest;
    tfm_ids_push(off, (uint32_t)out->len);
    if (!L || !K) {
        /* empty text: its one segmentation is empty */
        if (K)
            tfm_ids_push(off, (uint32_t)out->len);
        tfm_buf_free(&t);
        return K ? 1 : 0;
    }
    edges E = {0};
    lattice(u, t.data, L, &E);
    kent *kb = tfm_malloc((L + 1) * K * sizeof *kb);
    uint32_t *cnt = tfm_calloc(L + 1, sizeof *cnt);
    cnt[0] = 1;
    kb[0] = (kent){0, UINT32_MAX, 0};
    for (size_t i = 0; i < E.n; i++) {
        const edge *g = &E.a[i];
        kent *dst = kb + (size_t)g->e * K;
        for (uint32_t r = 0; r < cnt[g->s]; r++) {
            float prev = kb[(size_t)g->s * K + r].score;
            double sc = (int64_t)g->id == u->unk ? (double)((float)g->score + prev)
                                                  : g->score + prev;
            /* insert keeping dst sorted, best first; equal scores keep the earlier */
            uint32_t c = cnt[g->e];
            if (c == K && sc <= dst[K - 1].score)
                break; /* the rest of this start's paths score lower still */
            uint32_t j = c < K ? c : (uint32_t)K - 1;
            while (j > 0 && (double)dst[j - 1].score < sc) {
                dst[j] = dst[j - 1];
                j--;
            }
            dst[j] = (kent){(float)sc, (uint32_t)i, r};
            if (c < K)
                cnt[g->e]++;
        }
    }
    seg *sg = tfm_malloc((L + 1) * sizeof *sg);
    size_t got = cnt[L];
    for (size_t r0 = 0; r0 < got; r0++) {
        size_t ns = 0, p = L;
        uint32_t r = (uint32_t)r0;
        while (p > 0) {
            const kent *k = &kb[p * K + r];
            const edge *g = &E.a[k->edge];
            sg[ns++] = (seg){g->s, g->e, g->id};
            r = k->rank;
            p = g->s;
        }
        for (size_t i = 0; i < ns / 2; i++) {
            seg x = sg[i];
            sg[i] = sg[ns - 1 - i];
            sg[ns - 1 - i] = x;
        }
        segs_to_ids(u, t.data, sg, ns, out, NULL, n, NULL, NULL);
        tfm_ids_push(off, (uint32_t)out->len);
    }
    free(sg);
    free(cnt);
    free(kb);
    free(E.a);
    tfm_buf_free(&t);
    return got;
}

/* ---- sentencepiece's BPE model ----
 *
 * The normalized text starts as its characters (a user-defined symbol is
 * one frozen symbol, never merged).  Every adjacent pair whose
 * concatenation is a piece (normal, user-defined or unused) is a candidate
 * scored by that piece's score; the best (ties: the leftmost) merges, and
 * the new symbol's pairs with its neighbours become candidates.  Candidates
 * whose symbols changed since are dropped when they come up.  Each final
 * symbol is its piece's id or unknown; one that is an unused piece is split
 * back into the two symbols its last candidate joined, recursively.  With
 * alpha > 0 (BPE-dropout) each merge is skipped with probability alpha. */

typedef struct bsym {
    uint32_t s, len; /* len 0: merged into its left neighbour */
    int32_t prev, next;
    int32_t node; /* the trie unit of its bytes, -1: none */
    int frozen;
} bsym;

typedef struct bpair {
    float score;
    int32_t left, right;
    uint32_t size;
    int32_t node;
} bpair;

/* a before b in the heap: higher score, then leftmost */
static inline int bpair_before(const bpair *a, const bpair *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct bheap {
    bpair *a;
    size_t n, cap;
} bheap;

static void bheap_push(bheap *h, bpair p)
{
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 64;
        h->a = tfm_realloc(h->a, h->cap * sizeof *h->a);
    }
    size_t i = h->n++;
    while (i > 0 && bpair_before(&p, &h->a[(i - 1) / 2])) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = p;
}

static bpair bheap_pop(bheap *h)
{
    bpair top = h->a[0], last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && bpair_before(&h->a[c + 1], &h->a[c]))
            c++;
        if (!bpair_before(&h->a[c], &last))
            break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n)
        h->a[i] = last;
    return top;
}

/* An unused piece formed by a candidate: which split formed it last. */
typedef struct brev {
    uint32_t id, left_len;
} brev;

typedef struct bctx {
    const tfm_unigram *u;
    const char *t;
    bsym *sym;
    bheap heap;
    brev *rev;
    size_t n_rev, cap_rev;
} bctx;

static void bpe_candidate(bctx *c, int32_t l, int32_t r)
{
    if (l < 0 || r < 0 || c->sym[l].frozen || c->sym[r].frozen)
        return;
    const tfm_unigram *u = c->u;
    int32_t node = c->sym[l].node;
    const unsigned char *b = (const unsigned char *)c->t + c->sym[r].s;
    for (uint32_t i = 0; i < c->sym[r].len && node >= 0; i++)
        node = tfm_uni_dt_step(&u->dall, node, b[i]);
    if (node < 0 || u->dall.u[node].value < 0)
        return;
    int32_t id = u->dall.u[node].value;
    uint8_t ty = u->type[id];
    if (ty != TFM_UNI_NORMAL && ty != TFM_UNI_USER && ty != TFM_UNI_UNUSED)
        return;
    bheap_push(&c->heap, (bpair){u->score[id], l, r, c->sym[l].len + c->sym[r].len, node});
    if (ty == TFM_UNI_UNUSED) {
        if (c->n_rev == c->cap_rev) {
            c->cap_rev = c->cap_rev ? 2 * c->cap_rev : 16;
            c->rev = tfm_realloc(c->rev, c->cap_rev * sizeof *c->rev);
        }
        c->rev[c->n_rev++] = (brev){(uint32_t)id, c->sym[l].len};
    }
}

/* The id of t[s..s+len): its piece of any type, or the unknown piece. */
static uint32_t bpe_id(const tfm_unigram *u, const char *t, uint32_t s, uint32_t len)
{
    int32_t node = 0;
    for (uint32_t i = 0; i < len && node >= 0; i++)
        node = tfm_uni_dt_step(&u->dall, node, (unsigned char)t[s + i]);
    return node >= 0 && u->dall.u[node].value >= 0 ? (uint32_t)u->dall.u[node].value
                                                   : (uint32_t)u->unk;
}

static void seg_push(seg **sg, size_t *ns, size_t *cap, seg x)
{
    if (*ns == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        *sg = tfm_realloc(*sg, *cap * sizeof **sg);
    }
    (*sg)[(*ns)++] = x;
}

static void bpe_resegment(const bctx *c, uint32_t s, uint32_t len, uint32_t id, seg **sg,
                          size_t *ns, size_t *cap)
{
    const brev *r = NULL;
    if (c->u->type[id] == TFM_UNI_UNUSED)
        for (size_t k = c->n_rev; k-- > 0;)
            if (c->rev[k].id == id) {
                r = &c->rev[k];
                break;
            }
    if (!r) {
        seg_push(sg, ns, cap, (seg){s, s + len, id});
        return;
    }
    uint32_t ll = r->left_len;
    bpe_resegment(c, s, ll, bpe_id(c->u, c->t, s, ll), sg, ns, cap);
    bpe_resegment(c, s + ll, len - ll, bpe_id(c->u, c->t, s + ll, len - ll), sg, ns, cap);
}

/* The BPE segmentation of t[0..L) into sg (malloc'd); returns its length. */
static size_t bpe_merge(const tfm_unigram *u, const char *t, size_t L, float alpha,
                        tfm_rng *rng, seg **sg)
{
    bctx c = {.u = u, .t = t, .sym = tfm_malloc((L + 1) * sizeof *c.sym)};
    int32_t n = 0;
    for (size_t p = 0; p < L; n++) {
        size_t m = u->has_user ? trie_longest(&u->duser, t + p, L - p) : 0;
        int frozen = m > 0;
        if (!m) {
            m = one_char_len((unsigned char)t[p]);
            if (m > L - p)
                m = L - p;
        }
        int32_t node = 0;
        for (size_t i = 0; i < m && node >= 0; i++)
            node = tfm_uni_dt_step(&u->dall, node, (unsigned char)t[p + i]);
        c.sym[n] = (bsym){(uint32_t)p, (uint32_t)m, n - 1, p + m < L ? n + 1 : -1, node, frozen};
        p += m;
    }
    for (int32_t i = 1; i < n; i++)
        bpe_candidate(&c, i - 1, i);
    while (c.heap.n) {
        bpair top = bheap_pop(&c.heap);
        bsym *l = &c.sym[top.left], *r = &c.sym[top.right];
        if (!l->len || !r->len || l->len + r->len != top.size)
            continue; /* a symbol of it has changed */
        if (alpha > 0 && tfm_rng_double(rng) < alpha)
            continue;
        l->len += r->len;
        l->node = top.node;
        l->next = r->next;
        if (r->next >= 0)
            c.sym[r->next].prev = top.left;
        r->len = 0;
        bpe_candidate(&c, l->prev, top.left);
        bpe_candidate(&c, top.left, l->next);
    }
    size_t ns = 0, cap = 0;
    *sg = NULL;
    for (int32_t i = n ? 0 : -1; i >= 0; i = c.sym[i].next) {
        const bsym *x = &c.sym[i];
        uint32_t id = x->node >= 0 && u->dall.u[x->node].value >= 0
                          ? (uint32_t)u->dall.u[x->node].value : (uint32_t)u->unk;
        bpe_resegment(&c, x->s, x->len, id, sg, &ns, &cap);
    }
    if (!*sg)
        *sg = tfm_malloc(sizeof **sg);
    free(c.sym);
    free(c.heap.a);
    free(c.rev);
    return ns;
}

/* ---- decoding ---- */

/* bytes[0..n) as text: each invalid UTF-8 byte becomes U+FFFD. */
static void put_bytes(const unsigned char *b, size_t n, tfm_buf *out)
{
    for (size_t i = 0; i < n;) {
        size_t adv;
        if (tfm_utf8_decode(b + i, n - i, &adv) < 0) {
            tfm_buf_append(out, "\xef\xbf\xbd", 3);
            i++;
        } else {
            tfm_buf_append(out, b + i, adv);
            i += adv;
        }
    }
}

void tfm_unigram_decode(const tfm_unigram *u, const uint32_t *ids, size_t n, tfm_buf *out)
{
    tfm_unigram_decode_part(u, ids, n, 1, out);
}

void tfm_unigram_decode_part(const tfm_unigram *u, const uint32_t *ids, size_t n, int at_start,
                             tfm_buf *out)
{
    /* spm_decode's rule: while nothing has been output, a piece's leading
     * "â" goes (with add_dummy_prefix or remove_extra_whitespaces), once
     * only, the dummy prefix, unless remove_extra_whitespaces says there
     * can be no leading space at all; control pieces output nothing and
     * leave the state alone */
    size_t o0 = out->len;
    int strip = u->spec.add_dummy_prefix || u->spec.remove_extra_whitespaces;
    int bos = at_start && strip;
    unsigned char *bytes = tfm_malloc(n + 1);
    for (size_t i = 0; i < n;) {
        uint32_t id = ids[i];
        if (u->type[id] == TFM_UNI_BYTE) {
            size_t k = 0;
            while (i < n && u->type[ids[i]] == TFM_UNI_BYTE)
                bytes[k++] = (unsigned char)byte_of_piece(u->piece[ids[i]], u->plen[ids[i]]),
                i++;
            put_bytes(bytes, k, out);
            continue;
        }
        i++;
        if (out->len != o0)
            bos = 0;
        if (u->type[id] == TFM_UNI_CONTROL)
            continue;
        if (u->type[id] == TFM_UNI_UNKNOWN) {
            tfm_buf_append(out, u->unk_surface, u->unk_surface_len);
            continue;
        }
        const char *p = u->piece[id];
        size_t l = u->plen[id];
        if (bos && l >= 3 && memcmp(p, SPACE_SYM, 3) == 0) {
            p += 3;
            l -= 3;
            if (!u->spec.remove_extra_whitespaces)
                bos = 0;
        }
        for (size_t j = 0; j < l;) {
            if (l - j >= 3 && memcmp(p + j, SPACE_SYM, 3) == 0) {
                tfm_buf_putc(out, ' ');
                j += 3;
            } else {
                tfm_buf_putc(out, p[j++]);
            }
        }
    }
    free(bytes);
    if (u->denorm && out->len > o0) {
        tfm_buf t = {0};
        tfm_unigram_normalize(u->denorm, out->data + o0, out->len - o0, &t, NULL);
        out->len = o0;
        tfm_buf_append(out, t.data, t.len);
        tfm_buf_free(&t);
    }
}
