/* The Unigram trainer (see unigram_train.h for the algorithm; the steps
 * below are numbered as there). */
#include "config.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "base/buf.h"
#include "base/thread.h"
#include "text/tok_internal.h"
#include "text/unigram.h"
#include "text/unigram_train.h"
#include "text/unigram_trie.h"
#include "text/utf8.h"

enum {
    MAX_PIECE_CHARS = 16,     /* max_sentencepiece_length */
    MAX_LINE_BYTES = 4192,    /* max_sentence_length */
    SEED_SIZE = 1000000,      /* seed_sentencepiece_size */
    SUB_ITERS = 2,            /* num_sub_iterations */
    N_CP = 0x110000,
    UNK_CHAR = 0x2585,        /* stands for a character that is not required */
    WS_CHAR = 0x2581,         /* "▁" */
};
#define SHRINK 0.75           /* shrinking_factor */
#define FP_ONE 16777216.0     /* expected counts are summed as integers x 2^24 */

/* ---- a string -> index map (keys kept in an arena) ---- */

typedef struct strmap {
    tfm_buf keys;
    size_t *off;
    uint32_t *len;
    size_t n, cap;
    uint32_t *slot; /* index + 1; 0 empty */
    size_t nslot;
} strmap;

static uint64_t str_hash(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static const char *sm_key(const strmap *m, size_t i, size_t *len)
{
    *len = m->len[i];
    return m->keys.data + m->off[i];
}

static int64_t sm_find(const strmap *m, const char *s, size_t n)
{
    if (!m->nslot)
        return -1;
    for (size_t h = str_hash(s, n) & (m->nslot - 1);; h = (h + 1) & (m->nslot - 1)) {
        uint32_t v = m->slot[h];
        if (!v)
            return -1;
        if (m->len[v - 1] == n && memcmp(m->keys.data + m->off[v - 1], s, n) == 0)
            return v - 1;
    }
}

static void sm_rehash(strmap *m, size_t nslot)
{
    free(m->slot);
    m->slot = tfm_calloc(nslot, sizeof *m->slot);
    m->nslot = nslot;
    for (size_t i = 0; i < m->n; i++) {
        size_t h = str_hash(m->keys.data + m->off[i], m->len[i]) & (nslot - 1);
        while (m->slot[h])
            h = (h + 1) & (nslot - 1);
        m->slot[h] = (uint32_t)(i + 1);
    }
}

/* The index of s, added if new (*added set then). */
static size_t sm_add(strmap *m, const char *s, size_t n, int *added)
{
    int64_t f = sm_find(m, s, n);
    if (added)
        *added = f < 0;
    if (f >= 0)
        return (size_t)f;
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 1024;
        m->off = tfm_realloc(m->off, m->cap * sizeof *m->off);
        m->len = tfm_realloc(m->len, m->cap * sizeof *m->len);
    }
    m->off[m->n] = m->keys.len;
    m->len[m->n] = (uint32_t)n;
    tfm_buf_append(&m->keys, s, n);
    m->n++;
    if (2 * m->n > m->nslot)
        sm_rehash(m, m->nslot ? 2 * m->nslot : 2048);
    else {
        size_t h = str_hash(s, n) & (m->nslot - 1);
        while (m->slot[h])
            h = (h + 1) & (m->nslot - 1);
        m->slot[h] = (uint32_t)m->n;
    }
    return m->n - 1;
}

static void sm_free(strmap *m)
{
    tfm_buf_free(&m->keys);
    free(m->off);
    free(m->len);
    free(m->slot);
    memset(m, 0, sizeof *m);
}

/* ---- the trainer's input ---- */

struct tfm_unigram_trainer {
    tfm_tok_train_opts o;
    char **strs; /* copies of the option strings */
    size_t n_strs;
    tfm_unigram *norm; /* a normalizer only */
    tfm_buf text;      /* normalized lines, each ending in '\0' */
    uint64_t skipped, skipped_bytes; /* lines over o.max_sentence_length */
};

static const char *keep_str(tfm_unigram_trainer *t, const char *s)
{
    t->strs = tfm_realloc(t->strs, (t->n_strs + 1) * sizeof *t->strs);
    return t->strs[t->n_strs++] = tfm_strdup(s);
}

tfm_unigram_trainer *tfm_unigram_trainer_new(const tfm_tok_train_opts *opts)
{
    tfm_unigram_trainer *t = tfm_calloc(1, sizeof *t);
    t->o = *opts;
    if (!t->o.vocab_size)
        t->o.vocab_size = 8000;
    if (!(t->o.character_coverage > 0))
        t->o.character_coverage = 0.9995;
    if (t->o.threads < 1)
        t->o.threads = 1;
    if (!t->o.max_sentence_length)
        t->o.max_sentence_length = MAX_LINE_BYTES;
    static const char *dflt[] = {"<unk>", "<s>", "</s>"};
    const char *const *sp = opts->specials ? opts->specials : dflt;
    size_t ns = opts->specials ? opts->n_specials : 3;
    const char **s2 = tfm_calloc(ns + 1, sizeof *s2);
    for (size_t i = 0; i < ns; i++)
        s2[i] = keep_str(t, sp[i]);
    t->o.specials = s2;
    t->o.n_specials = ns;
    const char **u2 = tfm_calloc(opts->n_user_symbols + 1, sizeof *u2);
    for (size_t i = 0; i < opts->n_user_symbols; i++)
        u2[i] = keep_str(t, opts->user_symbols[i]);
    t->o.user_symbols = u2;
    t->o.source = keep_str(t, opts->source ? opts->source : "the input");
    tfm_uni_norm_spec spec = {.add_dummy_prefix = 1, .remove_extra_whitespaces = 1,
                              .escape_whitespaces = 1, .nmt = 1, .nfkc = 1};
    int rc = tfm_unigram_new(&t->norm, &spec, "unigram trainer", NULL);
    TFM_ASSERT(rc == 0);
    return t;
}

void tfm_unigram_trainer_free(tfm_unigram_trainer *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_strs; i++)
        free(t->strs[i]);
    free(t->strs);
    free((void *)t->o.specials);
    free((void *)t->o.user_symbols);
    tfm_unigram_free(t->norm);
    tfm_buf_free(&t->text);
    free(t);
}

/* 1. */
void tfm_unigram_trainer_feed(tfm_unigram_trainer *t, const char *text, size_t len)
{
    const char *s = text, *end = text + len;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *le = nl ? nl : end;
        if ((size_t)(le - s) > t->o.max_sentence_length) {
            t->skipped++;
            t->skipped_bytes += (uint64_t)(le - s) + (nl != NULL);
        } else {
            size_t before = t->text.len;
            tfm_unigram_normalize(t->norm, s, (size_t)(le - s), &t->text, NULL);
            if (t->text.len > before)
                tfm_buf_putc(&t->text, '\0');
        }
        s = nl ? nl + 1 : end;
    }
}

/* ---- scripts, for the seeds' rule that a piece keeps to one ---- */

enum { SCRIPT_ANY = -1, SCRIPT_COMMON = 0, SCRIPT_INHERITED = 1 };

/* A coarse script: Common for punctuation, symbols, spaces and digits,
 * Inherited for combining marks, else the letter's script by its block
 * (Han, Hiragana and Katakana as one). */
static int script_of(int32_t c)
{
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_ME:
        return SCRIPT_INHERITED;
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_NL:
        break;
    default:
        return SCRIPT_COMMON;
    }
    static const struct { int32_t lo, hi, script; } r[] = {
        {0x0000, 0x024F, 2},   {0x1E00, 0x1EFF, 2},   {0x2C60, 0x2C7F, 2},
        {0xA720, 0xA7FF, 2},   {0xAB30, 0xAB6F, 2},   {0xFF21, 0xFF5A, 2},   /* Latin */
        {0x0250, 0x02AF, 2},   {0x1D00, 0x1DBF, 2},
        {0x0370, 0x03FF, 3},   {0x1F00, 0x1FFF, 3},                          /* Greek */
        {0x0400, 0x052F, 4},   {0x1C80, 0x1C8F, 4},   {0x2DE0, 0x2DFF, 4},
        {0xA640, 0xA69F, 4},                                                 /* Cyrillic */
        {0x0530, 0x058F, 8},   {0xFB13, 0xFB17, 8},                          /* Armenian */
        {0x0590, 0x05FF, 9},   {0xFB1D, 0xFB4F, 9},                          /* Hebrew */
        {0x10A0, 0x10FF, 10},  {0x1C90, 0x1CBF, 10},  {0x2D00, 0x2D2F, 10},  /* Georgian */
        {0x1200, 0x139F, 11},  {0x2D80, 0x2DDF, 11},  {0xAB00, 0xAB2F, 11},  /* Ethiopic */
        {0x0700, 0x074F, 12},  {0x0780, 0x07BF, 13},  {0x07C0, 0x07FF, 14},  /* Syriac.. */
        {0x0600, 0x06FF, 5},   {0x0750, 0x077F, 5},   {0x08A0, 0x08FF, 5},
        {0xFB50, 0xFDFF, 5},   {0xFE70, 0xFEFF, 5},                          /* Arabic */
        {0x1100, 0x11FF, 6},   {0x3130, 0x318F, 6},   {0xA960, 0xA97F, 6},
        {0xAC00, 0xD7FF, 6},   {0xFFA0, 0xFFDC, 6},                          /* Hangul */
        {0x2E80, 0x2FDF, 7},   {0x3005, 0x3007, 7},   {0x3021, 0x3029, 7},
        {0x3038, 0x303B, 7},   {0x3040, 0x30FF, 7},   {0x31F0, 0x31FF, 7},
        {0x3400, 0x4DBF, 7},   {0x4E00, 0x9FFF, 7},   {0xF900, 0xFAFF, 7},
        {0xFF66, 0xFF9F, 7},   {0x20000, 0x3FFFF, 7},                        /* Han, kana */
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (c >= r[i].lo && c <= r[i].hi)
            return r[i].script;
    return 16 + (c >> 7); /* another block of 128 (Indic, Thai...), another script */
}

/* sentencepiece's IsValidSentencePiece with its defaults (split by
 * whitespace, Unicode script and number).  script: script_of of each code
 * point of c. */
static int valid_piece(const uint32_t *c, size_t n, const int16_t *script)
{
    if (n == 0 || n > MAX_PIECE_CHARS)
        return 0;
    int prev = SCRIPT_ANY;
    for (size_t i = 0; i < n; i++) {
        if (c[i] == 0 || c[i] == UNK_CHAR || c[i] == ' ')
            return 0;
        if (c[i] == WS_CHAR) {
            if (i > 0)
                return 0;
            continue;
        }
        int s = script[c[i]];
        if (s == SCRIPT_INHERITED)
            s = prev;
        if (s != SCRIPT_ANY && prev != SCRIPT_ANY && s != prev)
            return 0;
        prev = s;
    }
    return 1;
}

/* ---- 3. seeds: a suffix array over the text's characters ---- */

/* SA sorted by the first 16 characters (enough: seeds have at most 16, so
 * the suffixes that begin with one are together), by prefix doubling with
 * radix sorts.  A: n code points, 0 between lines. */
static uint32_t *suffix_array(const uint32_t *A, size_t n)
{
    /* 12 bytes a character and the counts (n < 2^32): the new ranks go
     * where the order by the second key was */
    uint32_t *sa = tfm_malloc((n + 1) * sizeof *sa), *tmp = tfm_malloc((n + 1) * sizeof *tmp);
    uint32_t *rk = tfm_malloc((n + 1) * sizeof *rk), *rk2 = tmp;
    /* ranks of the characters, 1.. (0: past the end) */
    uint32_t *seen = tfm_calloc(N_CP, sizeof *seen);
    for (size_t i = 0; i < n; i++)
        seen[A[i]] = 1;
    uint32_t nr = 0;
    for (uint32_t c = 0; c < N_CP; c++)
        if (seen[c])
            seen[c] = ++nr;
    for (size_t i = 0; i < n; i++)
        rk[i] = seen[A[i]];
    free(seen);
    uint32_t *cnt = tfm_malloc((n + 2) * sizeof *cnt);
    for (size_t i = 0; i < n; i++)
        sa[i] = (uint32_t)i;
    for (size_t h = 1;; h *= 2) {
        /* sort by (rk[i], rk[i+h]): by the second key, then stably by the first */
        size_t K = (size_t)nr + 1;
        memset(cnt, 0, (K + 1) * sizeof *cnt);
        for (size_t i = 0; i < n; i++)
            cnt[i + h < n ? rk[i + h] : 0]++;
        for (uint32_t k = 0, s = 0; k <= K; k++) {
            uint32_t c = cnt[k];
            cnt[k] = s;
            s += c;
        }
        for (size_t i = 0; i < n; i++)
            tmp[cnt[i + h < n ? rk[i + h] : 0]++] = (uint32_t)i;
        memset(cnt, 0, (K + 1) * sizeof *cnt);
        for (size_t i = 0; i < n; i++)
            cnt[rk[i]]++;
        for (uint32_t k = 0, s = 0; k <= K; k++) {
            uint32_t c = cnt[k];
            cnt[k] = s;
            s += c;
        }
        for (size_t j = 0; j < n; j++)
            sa[cnt[rk[tmp[j]]]++] = tmp[j];
        rk2 = tmp; /* tmp is read no more */
        /* new ranks */
        uint32_t r = 0;
        for (size_t j = 0; j < n; j++) {
            uint32_t i = sa[j];
            if (j == 0) {
                r = 1;
            } else {
                uint32_t p = sa[j - 1];
                uint32_t a2 = i + h < n ? rk[i + h] : 0, b2 = p + h < n ? rk[p + h] : 0;
                if (rk[i] != rk[p] || a2 != b2)
                    r++;
            }
            rk2[i] = r;
        }
        tmp = rk;
        rk = rk2;
        nr = r;
        if (nr == n || 2 * h >= MAX_PIECE_CHARS)
            break;
    }
    free(cnt);
    free(tmp);
    free(rk);
    return sa;
}

typedef struct cand {
    uint32_t at, len; /* in A */
    uint64_t score;   /* frequency x length */
    uint32_t L;       /* tie-break: SA order */
} cand;

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    if (x->L != y->L)
        return x->L < y->L ? -1 : 1;
    return x->len < y->len ? -1 : x->len > y->len;
}

/* Whether the substring of the suffixes sa[L..R) (d characters) is a node
 * of sentencepiece's suffix tree, where the line break is a character like
 * any other: not when every occurrence ends a line (the node is then
 * deeper, holding the break, and no seed).  Seeding those too gave 0.56%
 * more held-out tokens on the 17-language text, where many lines repeat. */
static int branches(const uint32_t *A, size_t n, const uint32_t *sa, uint32_t L, uint32_t R,
                    int d)
{
    /* the suffixes followed by a break sort first: the last one decides
     * (but at d = 16 the sort by 16 characters says nothing) */
    for (uint32_t k = R; k-- > L;)
        if (sa[k] + (size_t)d < n && A[sa[k] + d] != 0)
            return 1;
    return 0;
}

/* The substrings that occur at least twice, as the internal nodes of the
 * suffix tree (lcp intervals) of depth 2..16 holding no line break; the
 * best `max` of them. */
static cand *seed_substrings(const uint32_t *A, size_t n, size_t max, size_t *n_out)
{
    uint32_t *sa = suffix_array(A, n);
    /* the script of each code point in the text, looked up once */
    int16_t *script = tfm_malloc(N_CP * sizeof *script);
    uint8_t *have = tfm_calloc(N_CP, 1);
    for (size_t i = 0; i < n; i++)
        if (!have[A[i]]) {
            have[A[i]] = 1;
            script[A[i]] = (int16_t)script_of((int32_t)A[i]);
        }
    free(have);
    /* lcp[j] of sa[j-1], sa[j], up to 17 characters, stopping at a 0 */
    uint8_t *lcp = tfm_malloc(n + 1);
    lcp[0] = 0;
    for (size_t j = 1; j < n; j++) {
        size_t a = sa[j - 1], b = sa[j], k = 0;
        while (k <= MAX_PIECE_CHARS && a + k < n && b + k < n && A[a + k] == A[b + k] &&
               A[a + k] != 0)
            k++;
        lcp[j] = (uint8_t)k;
    }
    cand *c = NULL;
    size_t nc = 0, cc = 0;
    /* stack of (left bound, depth) */
    uint32_t *stL = tfm_malloc((MAX_PIECE_CHARS + 3) * sizeof *stL);
    int *stD = tfm_malloc((MAX_PIECE_CHARS + 3) * sizeof *stD);
    int top = 0;
    stL[0] = 0;
    stD[0] = 0;
    for (size_t j = 1; j <= n; j++) {
        int h = j < n ? lcp[j] : 0;
        uint32_t left = (uint32_t)(j - 1);
        while (stD[top] > h) {
            /* interval [stL[top], j) at depth stD[top] */
            uint32_t L = stL[top];
            int d = stD[top];
            left = L;
            top--;
            if (d >= 2 && d <= MAX_PIECE_CHARS && branches(A, n, sa, L, (uint32_t)j, d) &&
                valid_piece(A + sa[L], (size_t)d, script)) {
                if (nc == cc) {
                    cc = cc ? 2 * cc : 4096;
                    c = tfm_realloc(c, cc * sizeof *c);
                }
                c[nc++] = (cand){.at = sa[L], .len = (uint32_t)d,
                                 .score = (uint64_t)(j - L) * (uint64_t)d, .L = L};
            }
        }
        if (stD[top] < h) {
            top++;
            stL[top] = left;
            stD[top] = h;
        }
    }
    free(stL);
    free(stD);
    free(lcp);
    free(sa);
    free(script);
    qsort(c, nc, sizeof *c, cand_cmp);
    if (nc > max)
        nc = max;
    *n_out = nc;
    return c;
}

/* ---- the model during EM ---- */

typedef struct model {
    strmap map;     /* piece -> index */
    tfm_uni_dtrie trie; /* the same, walked from each character by lat_build */
    double *score;
    double *prob;   /* exp(score) */
    uint8_t *dead;  /* per index: 1 if dropped since the model was built */
    size_t n;       /* indices */
    size_t n_alive; /* pieces */
    double min_score;
} model;

static void model_free(model *m)
{
    sm_free(&m->map);
    free(m->trie.u);
    free(m->score);
    free(m->prob);
    free(m->dead);
    memset(m, 0, sizeof *m);
}

/* Drops piece i in place: the lattice no longer finds it. */
static void model_kill(model *m, size_t i)
{
    size_t len;
    const unsigned char *b = (const unsigned char *)sm_key(&m->map, i, &len);
    int32_t node = 0;
    for (size_t k = 0; k < len; k++)
        node = tfm_uni_dt_step(&m->trie, node, b[k]);
    TFM_ASSERT(node >= 0 && m->trie.u[node].value == (int32_t)i);
    m->trie.u[node].value = -1;
    m->dead[i] = 1;
    m->n_alive--;
}

/* A new model of pieces p[i] (strings in `from`'s arena) with scores. */
typedef struct piece {
    const char *s;
    uint32_t len;
    double score;
} piece;

static void model_set(model *m, const piece *p, size_t n)
{
    model nm = {0};
    nm.score = tfm_malloc((n + 1) * sizeof *nm.score);
    nm.prob = tfm_malloc((n + 1) * sizeof *nm.prob);
    nm.min_score = DBL_MAX;
    tfm_uni_trie t;
    tfm_uni_trie_init(&t);
    for (size_t i = 0; i < n; i++) {
        size_t k = sm_add(&nm.map, p[i].s, p[i].len, NULL);
        uint32_t node = tfm_uni_trie_insert(&t, p[i].s, p[i].len); /* may move t.value */
        t.value[node] = (int32_t)k;
        nm.score[k] = p[i].score;
        nm.prob[k] = exp(p[i].score);
        if (p[i].score < nm.min_score)
            nm.min_score = p[i].score;
    }
    nm.n = nm.n_alive = nm.map.n;
    nm.dead = tfm_calloc(nm.n + 1, 1);
    /* pieces of at most 16 characters, a few hundred thousand of them: far
     * below the double array's limit */
    int rc = tfm_uni_dt_build(&nm.trie, &t);
    TFM_ASSERT(rc == 0);
    tfm_uni_trie_free(&t);
    model_free(m);
    *m = nm;
}

static int piece_cmp(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    size_t k = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->s, y->s, k);
    return c ? c : (x->len > y->len) - (x->len < y->len);
}

/* A word's lattice: edges [s, e) in characters with piece id (-1: the
 * unknown character). */
typedef struct edge {
    uint32_t s, e;
    int32_t id;
    double score, p; /* p = exp(score) */
} edge;

typedef struct lattice {
    size_t *pos; /* byte offset of each character, nc + 1 */
    size_t nc, cap_pos;
    edge *e;     /* by start */
    size_t ne, cap_e;
    double *a, *b; /* forward, backward / Viterbi */
    int32_t *back;
    size_t cap_ab;
} lattice;

static void lat_free(lattice *L)
{
    free(L->pos);
    free(L->e);
    free(L->a);
    free(L->b);
    free(L->back);
}

/* Builds the lattice of w[0..len) (valid UTF-8); skip: a piece never used. */
static void lat_build(lattice *L, const model *m, const char *w, size_t len, int64_t skip)
{
    L->nc = 0;
    L->ne = 0;
    for (size_t i = 0; i <= len;) {
        if (L->nc + 1 >= L->cap_pos) {
            L->cap_pos = 2 * L->cap_pos + 64;
            L->pos = tfm_realloc(L->pos, L->cap_pos * sizeof *L->pos);
        }
        L->pos[L->nc++] = i;
        if (i == len)
            break;
        /* the length from the lead byte alone: w is valid (tfm encoded it) */
        unsigned char c = (unsigned char)w[i];
        size_t adv = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        i += adv < len - i ? adv : len - i;
    }
    L->nc--; /* characters */
    if (L->nc + 1 > L->cap_ab) {
        L->cap_ab = 2 * (L->nc + 1);
        L->a = tfm_realloc(L->a, L->cap_ab * sizeof *L->a);
        L->b = tfm_realloc(L->b, L->cap_ab * sizeof *L->b);
        L->back = tfm_realloc(L->back, L->cap_ab * sizeof *L->back);
    }
    const unsigned char *b = (const unsigned char *)w;
    for (size_t s = 0; s < L->nc; s++) {
        int single = 0;
        /* the pieces that start here, shortest first, walking the trie */
        size_t kmax = s + MAX_PIECE_CHARS <= L->nc ? MAX_PIECE_CHARS : L->nc - s;
        int32_t node = 0;
        for (size_t k = 1, i = L->pos[s]; k <= kmax && node >= 0; k++) {
            for (; i < L->pos[s + k] && node >= 0; i++)
                node = tfm_uni_dt_step(&m->trie, node, b[i]);
            if (node < 0)
                break;
            int64_t id = m->trie.u[node].value;
            if (id < 0 || id == skip)
                continue;
            if (k == 1)
                single = 1;
            if (L->ne == L->cap_e) {
                L->cap_e = 2 * L->cap_e + 64;
                L->e = tfm_realloc(L->e, L->cap_e * sizeof *L->e);
            }
            L->e[L->ne++] =
                (edge){(uint32_t)s, (uint32_t)(s + k), (int32_t)id, m->score[id], m->prob[id]};
        }
        if (!single) {
            if (L->ne == L->cap_e) {
                L->cap_e = 2 * L->cap_e + 64;
                L->e = tfm_realloc(L->e, L->cap_e * sizeof *L->e);
            }
            L->e[L->ne++] = (edge){(uint32_t)s, (uint32_t)(s + 1), -1, m->min_score - 10.0,
                                   exp(m->min_score - 10.0)};
        }
    }
}

static double lse(double a, double b)
{
    if (a == -INFINITY)
        return b;
    if (b == -INFINITY)
        return a;
    return a > b ? a + log1p(exp(b - a)) : b + log1p(exp(a - b));
}

/* E-step for one word of count freq: adds freq x each piece's marginal to
 * exp_fp (fixed point). */
static void lat_marginal(lattice *L, uint64_t freq, int64_t *exp_fp, double min_score)
{
    size_t nc = L->nc;
    /* Short words in probabilities (no log or exp per edge: a third of the
     * E-step's time), while the least likely path cannot underflow: each
     * edge is at least exp(min_score - 10) */
    if ((double)nc * (min_score - 10.0) > -600.0) {
        for (size_t i = 0; i <= nc; i++) {
            L->a[i] = 0;
            L->b[i] = 0;
        }
        L->a[0] = 1;
        for (size_t k = 0; k < L->ne; k++) {
            const edge *e = &L->e[k];
            L->a[e->e] += L->a[e->s] * e->p;
        }
        L->b[nc] = 1;
        for (size_t k = L->ne; k-- > 0;) {
            const edge *e = &L->e[k];
            L->b[e->s] += e->p * L->b[e->e];
        }
        double f = (double)freq * FP_ONE / L->a[nc];
        for (size_t k = 0; k < L->ne; k++) {
            const edge *e = &L->e[k];
            if (e->id >= 0)
                exp_fp[e->id] += (int64_t)llround(L->a[e->s] * e->p * L->b[e->e] * f);
        }
        return;
    }
    for (size_t i = 0; i <= nc; i++) {
        L->a[i] = -INFINITY;
        L->b[i] = -INFINITY;
    }
    L->a[0] = 0;
    for (size_t k = 0; k < L->ne; k++) {
        const edge *e = &L->e[k];
        L->a[e->e] = lse(L->a[e->e], L->a[e->s] + e->score);
    }
    L->b[nc] = 0;
    for (size_t k = L->ne; k-- > 0;) {
        const edge *e = &L->e[k];
        L->b[e->s] = lse(L->b[e->s], e->score + L->b[e->e]);
    }
    double Z = L->a[nc];
    for (size_t k = 0; k < L->ne; k++) {
        const edge *e = &L->e[k];
        if (e->id < 0)
            continue;
        double p = exp(L->a[e->s] + e->score + L->b[e->e] - Z);
        exp_fp[e->id] += (int64_t)llround((double)freq * p * FP_ONE);
    }
}

/* Viterbi: the best path's edges into path (reversed: last first);
 * returns their number, 0 if there is no path. */
static size_t lat_viterbi(lattice *L, int32_t *path, size_t cap)
{
    size_t nc = L->nc;
    for (size_t i = 0; i <= nc; i++) {
        L->a[i] = -INFINITY;
        L->back[i] = -1;
    }
    L->a[0] = 0;
    for (size_t k = 0; k < L->ne; k++) {
        const edge *e = &L->e[k];
        if (L->a[e->s] == -INFINITY)
            continue;
        double v = L->a[e->s] + e->score;
        if (v > L->a[e->e]) {
            L->a[e->e] = v;
            L->back[e->e] = (int32_t)k;
        }
    }
    if (L->back[nc] < 0 && nc > 0)
        return 0;
    size_t np = 0;
    for (size_t i = nc; i > 0 && np < cap;) {
        const edge *e = &L->e[L->back[i]];
        path[np++] = e->id;
        i = e->s;
    }
    return np;
}

/* ---- EM ---- */

typedef struct words {
    strmap map;
    uint64_t *count;
    uint32_t *order; /* by count, then bytes */
    size_t n;
} words;

typedef struct em_job {
    const model *m;
    const words *w;
    int64_t *acc;  /* [threads][m->n] */
    uint64_t *ntok;
    int viterbi;   /* 0: expected counts; 1: Viterbi counts */
} em_job;

static void em_part(void *ctx, int i, int n)
{
    em_job *j = ctx;
    const model *m = j->m;
    int64_t *acc = j->acc + (size_t)i * m->n;
    lattice L = {0};
    int32_t path[4096];
    uint64_t ntok = 0;
    for (size_t k = (size_t)i; k < j->w->n; k += (size_t)n) {
        uint32_t wi = j->w->order[k];
        size_t len;
        const char *s = sm_key(&j->w->map, wi, &len);
        uint64_t f = j->w->count[wi];
        lat_build(&L, m, s, len, -1);
        if (j->viterbi) {
            size_t np = lat_viterbi(&L, path, sizeof path / sizeof path[0]);
            for (size_t q = 0; q < np; q++)
                if (path[q] >= 0)
                    acc[path[q]] += (int64_t)f;
            ntok += np * f;
        } else {
            lat_marginal(&L, f, acc, m->min_score);
        }
    }
    j->ntok[i] = ntok;
    lat_free(&L);
}

/* Sums over all words, on `threads` threads; the same for any number. */
static int64_t *em_count(const model *m, const words *w, int threads, int viterbi)
{
    if ((size_t)threads > w->n / 64 + 1)
        threads = (int)(w->n / 64 + 1);
    em_job j = {.m = m, .w = w, .viterbi = viterbi};
    j.acc = tfm_calloc((size_t)threads * m->n + 1, sizeof *j.acc);
    j.ntok = tfm_calloc((size_t)threads, sizeof *j.ntok);
    tfm_parallel_run(threads, em_part, &j);
    for (int t = 1; t < threads; t++)
        for (size_t k = 0; k < m->n; k++)
            j.acc[k] += j.acc[(size_t)t * m->n + k];
    free(j.ntok);
    return j.acc;
}

double tfm_unigram_digamma(double x)
{
    double r = 0;
    for (; x < 7; x += 1)
        r -= 1 / x;
    x -= 0.5;
    double x2 = 1 / (x * x), x4 = x2 * x2;
    return r + log(x) + x2 / 24 - 7 * x4 / 960 + 31 * x4 * x2 / 8064 - 127 * x4 * x4 / 30720;
}

/* The M-step: drops the pieces expected fewer than 0.5 times, scores the
 * others.  When it drops few (after the first round it drops almost
 * none), they die in place: the same model as a rebuild, the indices of
 * the others in the same order, without building the trie again (that
 * was a tenth of the training time). */
static void m_step(model *m, const int64_t *exp_fp)
{
    size_t np = 0;
    double sum = 0;
    for (size_t i = 0; i < m->n; i++) {
        double f = (double)exp_fp[i] / FP_ONE;
        if (m->dead[i] || f < 0.5)
            continue;
        np++;
        sum += f;
    }
    double ls = tfm_unigram_digamma(sum);
    if (np >= m->n_alive - m->n_alive / 10) {
        m->min_score = DBL_MAX;
        for (size_t i = 0; i < m->n; i++) {
            double f = (double)exp_fp[i] / FP_ONE;
            if (m->dead[i])
                continue;
            if (f < 0.5) {
                model_kill(m, i);
                continue;
            }
            m->score[i] = tfm_unigram_digamma(f) - ls;
            m->prob[i] = exp(m->score[i]);
            if (m->score[i] < m->min_score)
                m->min_score = m->score[i];
        }
        return;
    }
    piece *p = tfm_malloc((np + 1) * sizeof *p);
    np = 0;
    for (size_t i = 0; i < m->n; i++) {
        double f = (double)exp_fp[i] / FP_ONE;
        if (m->dead[i] || f < 0.5)
            continue;
        size_t len;
        p[np].s = sm_key(&m->map, i, &len);
        p[np].len = (uint32_t)len;
        p[np++].score = tfm_unigram_digamma(f) - ls;
    }
    model nm = {0};
    model_set(&nm, p, np); /* p points into m */
    free(p);
    model_free(m);
    *m = nm;
}

typedef struct alt_job {
    const model *m;
    uint8_t *keep;       /* per piece: 1 always keep, 0 may go */
    uint32_t **alt;      /* per piece: its second-best segmentation */
    uint32_t *n_alt;
} alt_job;

static void alt_part(void *ctx, int t, int n)
{
    alt_job *j = ctx;
    const model *m = j->m;
    lattice L = {0};
    int32_t path[MAX_PIECE_CHARS + 1];
    for (size_t i = (size_t)t; i < m->n; i += (size_t)n) {
        size_t len;
        if (m->dead[i])
            continue; /* keep[i] 0 */
        const char *s = sm_key(&m->map, i, &len);
        lat_build(&L, m, s, len, -1);
        size_t np = lat_viterbi(&L, path, MAX_PIECE_CHARS + 1);
        j->keep[i] = 1;
        if (np >= 2) {
            j->keep[i] = 0; /* its best segmentation does not use it */
            continue;
        }
        lat_build(&L, m, s, len, (int64_t)i);
        np = lat_viterbi(&L, path, MAX_PIECE_CHARS + 1);
        if (np == 0)
            continue;
        j->alt[i] = tfm_malloc(np * sizeof *j->alt[i]);
        for (size_t q = 0; q < np; q++)
            if (path[np - 1 - q] >= 0)
                j->alt[i][j->n_alt[i]++] = (uint32_t)path[np - 1 - q];
    }
    lat_free(&L);
}

typedef struct loss {
    size_t id;
    double loss;
} loss;

static int loss_cmp(const void *a, const void *b)
{
    const loss *x = a, *y = b;
    if (x->loss != y->loss)
        return x->loss > y->loss ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Pruning: the pieces kept, into p; returns their number. */
static size_t prune(const model *m, const words *w, int threads, size_t desired, piece *p)
{
    alt_job aj = {.m = m};
    aj.keep = tfm_calloc(m->n + 1, 1);
    aj.alt = tfm_calloc(m->n + 1, sizeof *aj.alt);
    aj.n_alt = tfm_calloc(m->n + 1, sizeof *aj.n_alt);
    int at = (size_t)threads > m->n / 256 + 1 ? (int)(m->n / 256 + 1) : threads;
    tfm_parallel_run(at, alt_part, &aj);
    int64_t *freq = em_count(m, w, threads, 1);
    double sum = 0, vsum = 0;
    for (size_t i = 0; i < m->n; i++)
        sum += (double)freq[i];
    for (size_t i = 0; i < w->n; i++)
        vsum += (double)w->count[i];
    double logsum = log(sum);
    loss *c = tfm_malloc((m->n + 1) * sizeof *c);
    size_t nc = 0, np = 0;
    for (size_t i = 0; i < m->n; i++) {
        size_t len;
        const char *s = sm_key(&m->map, i, &len);
        if (freq[i] == 0 || !aj.keep[i])
            continue;
        if (!aj.n_alt[i]) {
            p[np++] = (piece){s, (uint32_t)len, m->score[i]};
            continue;
        }
        double fi = (double)freq[i];
        double F = fi / vsum;
        double lp = log(fi) - logsum;
        /* The new total as sentencepiece 0.1.97 (the reference) takes it:
         * fi re-assigned to as many pieces as the model has, not to the
         * n_alt of the alternative (0.1.99 changed this).  The large total
         * makes each alternative piece cost about log(n) nats, so the loss
         * grows with the tokens the removal adds: held-out tokens on the
         * 17-language text 1.4% -> 0.4% over spm_train's, KJV 0.09% -> 0.02% */
        double lsa = log(sum + fi * ((double)m->n_alive - 1));
        double lpa = 0;
        for (uint32_t q = 0; q < aj.n_alt[i]; q++)
            lpa += log((double)freq[aj.alt[i][q]] + fi) - lsa;
        c[nc++] = (loss){i, F * (lp - lpa)};
    }
    qsort(c, nc, sizeof *c, loss_cmp);
    size_t want = (size_t)(SHRINK * (double)m->n_alive);
    if (want < desired)
        want = desired;
    for (size_t k = 0; k < nc && np < want; k++) {
        size_t len;
        const char *s = sm_key(&m->map, c[k].id, &len);
        p[np++] = (piece){s, (uint32_t)len, m->score[c[k].id]};
    }
    free(c);
    free(freq);
    for (size_t i = 0; i < m->n; i++)
        free(aj.alt[i]);
    free(aj.alt);
    free(aj.n_alt);
    free(aj.keep);
    return np;
}

/* ---- finish ---- */

typedef struct chcount {
    uint32_t c;
    uint64_t n;
} chcount;

static int chcount_cmp(const void *a, const void *b)
{
    const chcount *x = a, *y = b;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    return (x->c > y->c) - (x->c < y->c);
}

static int word_cmp_ctx_sort(const words *w, uint32_t a, uint32_t b)
{
    if (w->count[a] != w->count[b])
        return w->count[a] > w->count[b] ? -1 : 1;
    size_t la, lb;
    const char *sa = sm_key(&w->map, a, &la), *sb = sm_key(&w->map, b, &lb);
    size_t k = la < lb ? la : lb;
    int c = memcmp(sa, sb, k);
    return c ? c : (la > lb) - (la < lb);
}

static const words *g_words; /* qsort has no context argument */
static int word_order_cmp(const void *a, const void *b)
{
    return word_cmp_ctx_sort(g_words, *(const uint32_t *)a, *(const uint32_t *)b);
}

static int has_unk(const char *s)
{
    for (; *s; s++)
        if ((s[0] == 'u' || s[0] == 'U') && (s[1] == 'n' || s[1] == 'N') &&
            (s[2] == 'k' || s[2] == 'K'))
            return 1;
    return 0;
}

int tfm_unigram_trainer_finish(tfm_unigram_trainer *t, tfm_tokenizer **out, tfm_err *err)
{
    const tfm_tok_train_opts *o = &t->o;
    *out = NULL;
    /* the meta pieces: specials, <unk> if none, user symbols, bytes, sentinels */
    strmap meta = {0};
    int unk_given = 0;
    for (size_t i = 0; i < o->n_specials; i++) {
        sm_add(&meta, o->specials[i], strlen(o->specials[i]), NULL);
        unk_given |= has_unk(o->specials[i]);
    }
    if (!unk_given)
        sm_add(&meta, "<unk>", 5, NULL);
    size_t n_control = meta.n;
    for (size_t i = 0; i < o->n_user_symbols; i++)
        sm_add(&meta, o->user_symbols[i], strlen(o->user_symbols[i]), NULL);
    size_t n_user_end = meta.n;
    if (o->byte_fallback)
        for (int b = 0; b < 256; b++) {
            char s[8];
            snprintf(s, sizeof s, "<0x%02X>", b);
            sm_add(&meta, s, 6, NULL);
        }
    size_t n_bytes_end = meta.n;
    for (uint32_t k = o->extra_ids; k-- > 0;) {
        char s[32];
        int l = snprintf(s, sizeof s, "<extra_id_%u>", k);
        sm_add(&meta, s, (size_t)l, NULL);
    }

    /* the text as code points, 0 between lines; character counts (2.) */
    size_t n = 0;
    uint32_t *A = tfm_malloc((t->text.len + 1) * sizeof *A);
    uint64_t *cnt = tfm_calloc(N_CP, sizeof *cnt), total = 0;
    for (size_t i = 0; i < t->text.len;) {
        size_t adv;
        int32_t c = t->text.data[i] ? tfm_utf8_decode((const unsigned char *)t->text.data + i,
                                                      t->text.len - i, &adv)
                                    : 0;
        if (!t->text.data[i])
            adv = 1;
        if (c < 0)
            c = 0xFFFD;
        A[n++] = (uint32_t)c;
        if (c) {
            cnt[c]++;
            total++;
        }
        i += adv;
    }
    tfm_buf_free(&t->text);
    int rc = 0;
    chcount *ch = NULL;
    size_t n_req = 0;
    if (total == 0 && t->skipped) {
        rc = tfm_err_set(err, "%s: no text to train on: %s%llu line%s longer than the "
                              "max_sentence_length of %u bytes, skipped (as spm_train does)",
                         o->source, t->skipped == 1 ? "its " : "every one of its ",
                         (unsigned long long)t->skipped, t->skipped == 1 ? " is" : "s is",
                         o->max_sentence_length);
        goto done;
    }
    if (total == 0) {
        rc = tfm_err_set(err, "%s: no text to train on (empty, or only spaces and control "
                              "characters)", o->source);
        goto done;
    }
    {
        size_t nch = 0;
        for (uint32_t c = 1; c < N_CP; c++)
            nch += cnt[c] > 0;
        ch = tfm_malloc(nch * sizeof *ch);
        nch = 0;
        for (uint32_t c = 1; c < N_CP; c++)
            if (cnt[c])
                ch[nch++] = (chcount){c, cnt[c]};
        qsort(ch, nch, sizeof *ch, chcount_cmp);
        uint64_t acc = 0;
        for (; n_req < nch; n_req++) {
            if ((double)acc / (double)total >= o->character_coverage)
                break;
            acc += ch[n_req].n;
        }
    }
    if (n_req + meta.n > o->vocab_size) {
        rc = tfm_err_set(err, "%s: a vocabulary of %u is too small for the %zu characters "
                              "needed to cover %g of the text plus %zu special pieces "
                              "(specials, user symbols, bytes, sentinels): raise "
                              "--vocab-size to at least %zu or lower --character-coverage",
                         o->source, o->vocab_size, n_req, o->character_coverage, meta.n,
                         n_req + meta.n);
        goto done;
    }
    memset(cnt, 0, N_CP * sizeof *cnt); /* now: 1 for a required character */
    for (size_t i = 0; i < n_req; i++)
        cnt[ch[i].c] = 1;
    for (size_t i = 0; i < n; i++)
        if (A[i] && !cnt[A[i]])
            A[i] = UNK_CHAR;

    /* 3. seeds */
    model m = {0};
    piece *p;
    size_t np = 0;
    {
        size_t ns;
        /* spm 0.1.97 counts the characters in the seed_sentencepiece_size */
        cand *c = seed_substrings(A, n, n_req < SEED_SIZE ? SEED_SIZE - n_req : 0, &ns);
        p = tfm_malloc((n_req + ns + 1) * sizeof *p);
        tfm_buf arena = {0};
        /* offsets first (the arena moves), then pointers */
        size_t *off = tfm_malloc((n_req + ns + 1) * sizeof *off);
        unsigned char u8[4];
        for (size_t i = 0; i < n_req; i++) {
            off[np] = arena.len;
            size_t l = tfm_utf8_encode(ch[i].c, u8);
            tfm_buf_append(&arena, u8, l);
            p[np].len = (uint32_t)l;
            p[np++].score = (double)ch[i].n;
        }
        for (size_t i = 0; i < ns; i++) {
            off[np] = arena.len;
            for (uint32_t k = 0; k < c[i].len; k++)
                tfm_buf_append(&arena, u8, tfm_utf8_encode(A[c[i].at + k], u8));
            p[np].len = (uint32_t)(arena.len - off[np]);
            p[np++].score = (double)c[i].score;
        }
        free(c);
        double sum = 0;
        for (size_t i = 0; i < np; i++)
            sum += p[i].score;
        double ls = log(sum);
        for (size_t i = 0; i < np; i++) {
            p[i].s = arena.data + off[i];
            p[i].score = log(p[i].score) - ls;
        }
        model_set(&m, p, np);
        tfm_buf_free(&arena);
        free(off);
    }

    /* 4. words and their counts */
    words w = {0};
    {
        size_t cap = 0;
        tfm_buf wb = {0};
        unsigned char u8[4];
        for (size_t i = 0; i < n;) {
            if (!A[i]) {
                i++;
                continue;
            }
            tfm_buf_clear(&wb);
            size_t j = i;
            do
                tfm_buf_append(&wb, u8, tfm_utf8_encode(A[j++], u8));
            while (j < n && A[j] && A[j] != WS_CHAR);
            int added;
            size_t k = sm_add(&w.map, wb.data, wb.len, &added);
            if (added) {
                if (w.map.n > cap) {
                    cap = 2 * w.map.n + 1024;
                    w.count = tfm_realloc(w.count, cap * sizeof *w.count);
                }
                w.count[k] = 0;
            }
            w.count[k]++;
            i = j;
        }
        tfm_buf_free(&wb);
        w.n = w.map.n;
        w.order = tfm_malloc((w.n + 1) * sizeof *w.order);
        for (size_t i = 0; i < w.n; i++)
            w.order[i] = (uint32_t)i;
        g_words = &w;
        qsort(w.order, w.n, sizeof *w.order, word_order_cmp);
    }
    free(A);
    A = NULL;

    size_t target = o->vocab_size - meta.n; /* trained pieces */
    size_t desired = (size_t)((double)o->vocab_size * 1.1);
    for (;;) {
        for (int it = 0; it < SUB_ITERS; it++) {
            int64_t *e = em_count(&m, &w, o->threads, 0);
            m_step(&m, e);
            free(e);
        }
        if (m.n_alive <= desired)
            break;
        piece *q = tfm_malloc((m.n + 1) * sizeof *q);
        size_t nq = prune(&m, &w, o->threads, desired, q);
        model nm = {0};
        model_set(&nm, q, nq);
        free(q);
        model_free(&m);
        m = nm;
    }

    /* 5. the final pieces: the required characters, then the best */
    free(p);
    p = tfm_malloc((m.n + n_req + 1) * sizeof *p);
    np = 0;
    strmap fin = {0};
    tfm_buf chars = {0};
    {
        size_t *off = tfm_malloc((n_req + 1) * sizeof *off);
        unsigned char u8[4];
        for (size_t i = 0; i < n_req; i++) {
            off[i] = chars.len;
            tfm_buf_append(&chars, u8, tfm_utf8_encode(ch[i].c, u8));
        }
        double pen = 0;
        for (size_t i = 0; i < n_req; i++) {
            const char *s = chars.data + off[i];
            size_t l = (i + 1 < n_req ? off[i + 1] : chars.len) - off[i];
            if (sm_find(&meta, s, l) >= 0)
                continue;
            int64_t k = sm_find(&m.map, s, l);
            if (k >= 0 && m.dead[k])
                k = -1;
            double sc = k >= 0 ? m.score[k] : m.min_score + pen;
            if (k < 0)
                pen += 0.0001;
            sm_add(&fin, s, l, NULL);
            p[np++] = (piece){s, (uint32_t)l, sc};
        }
        free(off);
        piece *all = tfm_malloc((m.n + 1) * sizeof *all);
        size_t na = 0;
        for (size_t i = 0; i < m.n; i++) {
            size_t l;
            if (m.dead[i])
                continue;
            all[na].s = sm_key(&m.map, i, &l);
            all[na].len = (uint32_t)l;
            all[na++].score = m.score[i];
        }
        qsort(all, na, sizeof *all, piece_cmp);
        for (size_t i = 0; i < na && np < target; i++) {
            if (sm_find(&fin, all[i].s, all[i].len) >= 0 ||
                sm_find(&meta, all[i].s, all[i].len) >= 0)
                continue;
            p[np++] = all[i];
        }
        free(all);
        qsort(p, np, sizeof *p, piece_cmp);
    }

    /* the model */
    {
        tfm_unigram *u;
        rc = tfm_unigram_new(&u, tfm_unigram_norm_spec(t->norm), o->source, err);
        size_t unk_at = n_control - 1; /* the <unk> added, or the first naming unk */
        for (size_t i = 0; unk_given && i < n_control; i++) {
            size_t l;
            const char *s = sm_key(&meta, i, &l);
            char z[256];
            snprintf(z, sizeof z, "%.*s", (int)l, s);
            if (has_unk(z)) {
                unk_at = i;
                break;
            }
        }
        for (size_t i = 0; i < meta.n && !rc; i++) {
            size_t l;
            const char *s = sm_key(&meta, i, &l);
            tfm_uni_type ty = i == unk_at       ? TFM_UNI_UNKNOWN
                              : i < n_control   ? TFM_UNI_CONTROL
                              : i < n_user_end  ? TFM_UNI_USER
                              : i < n_bytes_end ? TFM_UNI_BYTE
                                                : TFM_UNI_CONTROL;
            rc = tfm_unigram_add(u, s, l, 0.0f, ty, o->source, err);
            /* the trained pieces go between the bytes and the sentinels */
            if (i + 1 == n_bytes_end)
                for (size_t k = 0; k < np && !rc; k++)
                    rc = tfm_unigram_add(u, p[k].s, p[k].len, (float)p[k].score,
                                         TFM_UNI_NORMAL, o->source, err);
        }
        if (!rc)
            rc = tfm_unigram_finish(u, o->byte_fallback, o->source, err);
        if (rc) {
            tfm_unigram_free(u);
        } else {
            tfm_tokenizer *tok = tfm_tok_new(TFM_TOK_UNIGRAM, NULL);
            if (tfm_tok_unigram_adopt(tok, u, o->source, err)) {
                tfm_tokenizer_free(tok);
                rc = -1;
            } else {
                tfm_tok_guess_specials(tok);
                *out = tok;
            }
        }
    }
    sm_free(&fin);
    tfm_buf_free(&chars);
    free(p);
    model_free(&m);
    sm_free(&w.map);
    free(w.count);
    free(w.order);
done:
    free(A);
    free(cnt);
    free(ch);
    sm_free(&meta);
    return rc;
}

/* ---- the facade's hooks ---- */

static void *tr_create(const tfm_tok_train_opts *opts)
{
    return tfm_unigram_trainer_new(opts);
}

static void tr_feed(void *impl, const char *text, size_t len)
{
    tfm_unigram_trainer_feed(impl, text, len);
}

static int tr_finish(void *impl, const tfm_tok_train_opts *opts, tfm_tokenizer **out,
                     tfm_err *err)
{
    (void)opts;
    return tfm_unigram_trainer_finish(impl, out, err);
}

static void tr_free(void *impl)
{
    tfm_unigram_trainer_free(impl);
}

static uint64_t tr_skipped(const void *impl, uint64_t *bytes)
{
    const tfm_unigram_trainer *t = impl;
    *bytes = t->skipped_bytes;
    return t->skipped;
}

const tfm_tok_trainer_ops tfm_unigram_trainer_ops = {
    .create = tr_create, .feed = tr_feed, .finish = tr_finish, .free = tr_free,
    .skipped = tr_skipped,
};
