/* Training a byte-level BPE.
 *
 * 1. Counting (streaming): text is pre-tokenized with GPT-2's pattern and
 *    each distinct pre-token's count kept in a hash map, so memory grows with
 *    the number of distinct words, not the corpus.  Fed text is buffered in
 *    rounds; with threads > 1 a round is counted on several threads into
 *    private maps that are then added to the main one.
 * 2. Merging: every word becomes its byte symbols; pair counts (weighted by
 *    word counts) live in a hash map with, per pair, the list of words it
 *    occurs in.  A max-heap of (count, pair) with lazy invalidation gives the
 *    best pair; merging it rewrites only the words on its list and updates
 *    the counts of the neighbouring pairs.
 *
 * Ties: among pairs with the same count the one with the smaller (left id,
 * right id) wins.  Ids: the specials first (0..k-1), then the 256 bytes in
 * byte order, then merged tokens in merge order.  The result depends only on
 * the word counts, so it is the same for any thread count or feed split.
 * Merging stops at vocab_size, or when the best pair is seen fewer than
 * min_frequency times. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/thread.h"
#include "text/bpe.h"
#include "text/pretok.h"
#include "text/tok_internal.h"
#include "text/utf8.h"

/* ---- word counts ---- */

typedef struct wc_ent {
    uint64_t h;
    uint64_t count;
    uint64_t off; /* key in arena */
    uint32_t len;
} wc_ent;

typedef struct wordcount {
    uint32_t *slot; /* index+1 into ent; 0 empty */
    uint32_t mask;
    wc_ent *ent;
    size_t n, cap;
    tfm_buf arena;
} wordcount;

static uint64_t hash_bytes(const unsigned char *s, size_t n)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0x2545F4914F6CDD1Dull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    return h;
}

static void wc_init(wordcount *w)
{
    memset(w, 0, sizeof *w);
    w->mask = (1u << 12) - 1;
    w->slot = tfm_calloc(w->mask + 1, sizeof *w->slot);
}

static void wc_free(wordcount *w)
{
    free(w->slot);
    free(w->ent);
    tfm_buf_free(&w->arena);
}

static void wc_grow(wordcount *w)
{
    uint32_t cap = (w->mask + 1) * 2;
    free(w->slot);
    w->slot = tfm_calloc(cap, sizeof *w->slot);
    w->mask = cap - 1;
    for (size_t i = 0; i < w->n; i++) {
        uint32_t h = (uint32_t)w->ent[i].h & w->mask;
        while (w->slot[h])
            h = (h + 1) & w->mask;
        w->slot[h] = (uint32_t)i + 1;
    }
}

static void wc_add(wordcount *w, const unsigned char *s, size_t n, uint64_t h, uint64_t count)
{
    uint32_t i = (uint32_t)h & w->mask;
    for (;;) {
        uint32_t k = w->slot[i];
        if (!k)
            break;
        wc_ent *e = &w->ent[k - 1];
        if (e->h == h && e->len == n && memcmp(w->arena.data + e->off, s, n) == 0) {
            e->count += count;
            return;
        }
        i = (i + 1) & w->mask;
    }
    if (w->n == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 1024;
        w->ent = tfm_realloc(w->ent, w->cap * sizeof *w->ent);
    }
    w->ent[w->n] = (wc_ent){h, count, w->arena.len, (uint32_t)n};
    tfm_buf_append(&w->arena, s, n);
    w->slot[i] = (uint32_t)++w->n;
    if (w->n * 4 > (size_t)(w->mask + 1) * 3)
        wc_grow(w);
}

static void wc_count_text(wordcount *w, const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t j = tfm_gpt2_pretok_next(s, n, i);
        wc_add(w, s + i, j - i, hash_bytes(s + i, j - i), 1);
        i = j;
    }
}

/* ---- the trainer ---- */

#define ROUND_BYTES (8u << 20)

typedef struct bpe_trainer {
    wordcount words;
    int threads;
    tfm_buf pending;  /* fed text not yet counted (threads > 1) */
    size_t *cuts;     /* ends of the fed pieces in pending */
    size_t n_cuts, cap_cuts;
    int lowercase;
    tfm_buf lower;
} bpe_trainer;

static void *bt_create(const tfm_tok_train_opts *opts)
{
    bpe_trainer *t = tfm_calloc(1, sizeof *t);
    wc_init(&t->words);
    t->threads = opts->threads > 0 ? opts->threads : 1;
    t->lowercase = opts->lowercase == 1;
    return t;
}

typedef struct round_ctx {
    bpe_trainer *t;
    wordcount *local;
    size_t *bounds; /* [threads + 1] offsets in pending */
} round_ctx;

static void round_part(void *vctx, int i, int n)
{
    round_ctx *c = vctx;
    const unsigned char *s = (const unsigned char *)c->t->pending.data;
    /* pieces inside [bounds[i], bounds[i+1]) are counted one by one */
    size_t lo = c->bounds[i], hi = c->bounds[i + 1];
    size_t k = 0, start = 0;
    for (; k < c->t->n_cuts; k++) {
        size_t end = c->t->cuts[k];
        if (end > lo && start < hi)
            wc_count_text(&c->local[i], s + start, end - start);
        start = end;
    }
}

static void bt_flush(bpe_trainer *t)
{
    if (t->n_cuts == 0)
        return;
    int n = t->threads;
    round_ctx c = {t, tfm_calloc((size_t)n, sizeof(wordcount)),
                   tfm_calloc((size_t)n + 1, sizeof(size_t))};
    /* split at piece ends, about equal bytes per thread */
    size_t total = t->pending.len, k = 0;
    c.bounds[0] = 0;
    for (int i = 1; i < n; i++) {
        size_t want = total / (size_t)n * (size_t)i;
        while (k < t->n_cuts && t->cuts[k] < want)
            k++;
        c.bounds[i] = k < t->n_cuts ? t->cuts[k] : total;
        if (c.bounds[i] < c.bounds[i - 1])
            c.bounds[i] = c.bounds[i - 1];
    }
    c.bounds[n] = total;
    for (int i = 0; i < n; i++)
        wc_init(&c.local[i]);
    tfm_parallel_run(n, round_part, &c);
    for (int i = 0; i < n; i++) {
        wordcount *l = &c.local[i];
        for (size_t e = 0; e < l->n; e++)
            wc_add(&t->words, (const unsigned char *)l->arena.data + l->ent[e].off,
                   l->ent[e].len, l->ent[e].h, l->ent[e].count);
        wc_free(l);
    }
    free(c.local);
    free(c.bounds);
    tfm_buf_clear(&t->pending);
    t->n_cuts = 0;
}

static void bt_feed(void *impl, const char *text, size_t len)
{
    bpe_trainer *t = impl;
    if (t->lowercase) {
        tfm_buf_clear(&t->lower);
        tfm_utf8_lower(text, len, &t->lower);
        text = t->lower.data;
        len = t->lower.len;
    }
    if (t->threads <= 1) {
        wc_count_text(&t->words, (const unsigned char *)text, len);
        return;
    }
    tfm_buf_append(&t->pending, text, len);
    if (t->n_cuts == t->cap_cuts) {
        t->cap_cuts = t->cap_cuts ? t->cap_cuts * 2 : 1024;
        t->cuts = tfm_realloc(t->cuts, t->cap_cuts * sizeof *t->cuts);
    }
    t->cuts[t->n_cuts++] = t->pending.len;
    if (t->pending.len >= ROUND_BYTES * (size_t)t->threads)
        bt_flush(t);
}

static void bt_free(void *impl)
{
    bpe_trainer *t = impl;
    if (!t)
        return;
    wc_free(&t->words);
    tfm_buf_free(&t->pending);
    tfm_buf_free(&t->lower);
    free(t->cuts);
    free(t);
}

/* ---- merging ---- */

typedef struct pair_info {
    uint32_t a, b;
    int64_t count;
    uint32_t *words; /* word indices (ascending, may be stale) */
    uint32_t n_words, cap_words;
    uint32_t mark; /* merge number that last queued it for the heap */
} pair_info;

typedef struct pairs {
    uint32_t *slot; /* index+1 */
    uint32_t mask;
    pair_info *p;
    size_t n, cap;
} pairs;

static inline uint32_t ph(uint32_t a, uint32_t b)
{
    uint64_t k = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k >> 32);
}

static void pairs_grow(pairs *P)
{
    uint32_t cap = P->mask ? (P->mask + 1) * 2 : 1u << 16;
    free(P->slot);
    P->slot = tfm_calloc(cap, sizeof *P->slot);
    P->mask = cap - 1;
    for (size_t i = 0; i < P->n; i++) {
        uint32_t h = ph(P->p[i].a, P->p[i].b) & P->mask;
        while (P->slot[h])
            h = (h + 1) & P->mask;
        P->slot[h] = (uint32_t)i + 1;
    }
}

static pair_info *pair_get(pairs *P, uint32_t a, uint32_t b)
{
    uint32_t h = ph(a, b) & P->mask;
    for (;;) {
        uint32_t k = P->slot[h];
        if (!k)
            break;
        pair_info *q = &P->p[k - 1];
        if (q->a == a && q->b == b)
            return q;
        h = (h + 1) & P->mask;
    }
    if (P->n == P->cap) {
        P->cap = P->cap ? P->cap * 2 : 4096;
        P->p = tfm_realloc(P->p, P->cap * sizeof *P->p);
    }
    P->p[P->n] = (pair_info){a, b, 0, NULL, 0, 0, 0};
    P->slot[h] = (uint32_t)++P->n;
    if (P->n * 2 > (size_t)P->mask + 1) {
        pairs_grow(P);
        return pair_get(P, a, b);
    }
    return &P->p[P->n - 1];
}

static void pair_add_word(pair_info *q, uint32_t w)
{
    if (q->n_words && q->words[q->n_words - 1] == w)
        return;
    if (q->n_words == q->cap_words) {
        q->cap_words = q->cap_words ? q->cap_words * 2 : 4;
        q->words = tfm_realloc(q->words, q->cap_words * sizeof *q->words);
    }
    q->words[q->n_words++] = w;
}

typedef struct hent {
    int64_t count;
    uint32_t a, b;
} hent;

/* max-heap: higher count first, then smaller (a, b) */
static inline int hbetter(const hent *x, const hent *y)
{
    if (x->count != y->count)
        return x->count > y->count;
    if (x->a != y->a)
        return x->a < y->a;
    return x->b < y->b;
}

typedef struct heap {
    hent *e;
    size_t n, cap;
} heap;

static void hpush(heap *H, hent v)
{
    if (H->n == H->cap) {
        H->cap = H->cap ? H->cap * 2 : 4096;
        H->e = tfm_realloc(H->e, H->cap * sizeof *H->e);
    }
    size_t i = H->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!hbetter(&v, &H->e[p]))
            break;
        H->e[i] = H->e[p];
        i = p;
    }
    H->e[i] = v;
}

static hent hpop(heap *H)
{
    hent top = H->e[0], v = H->e[--H->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= H->n)
            break;
        if (c + 1 < H->n && hbetter(&H->e[c + 1], &H->e[c]))
            c++;
        if (!hbetter(&H->e[c], &v))
            break;
        H->e[i] = H->e[c];
        i = c;
    }
    if (H->n > 0)
        H->e[i] = v;
    return top;
}

static int bt_finish(void *impl, const tfm_tok_train_opts *opts, tfm_tokenizer **out,
                     tfm_err *err)
{
    bpe_trainer *t = impl;
    bt_flush(t);
    static const char *defaults[] = {"<|endoftext|>"};
    const char **sp = opts->specials ? opts->specials : defaults;
    size_t nsp = opts->specials ? opts->n_specials : 1;

    tfm_tokenizer *tok = tfm_tok_new(TFM_TOK_BPE, &tfm_bpe_ops);
    tok->lowercase = t->lowercase;
    for (size_t i = 0; i < nsp; i++)
        if (sp[i][0] && tfm_tokenizer_token_id(tok, sp[i], strlen(sp[i])) < 0)
            tfm_tok_vocab_push(tok, sp[i], strlen(sp[i]));
    /* base alphabet: byte b -> its id */
    uint32_t byte_id[256];
    tfm_buf piece = {0};
    for (unsigned b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        tfm_buf_clear(&piece);
        tfm_bpe_spell(&c, 1, &piece);
        int64_t id = tfm_tokenizer_token_id(tok, piece.data, piece.len);
        byte_id[b] = id >= 0 ? (uint32_t)id : tfm_tok_vocab_push(tok, piece.data, piece.len);
    }
    uint32_t target = opts->vocab_size;
    if (target == 0 || target > TFM_TOK_MAX_ID)
        target = TFM_TOK_MAX_ID; /* "until no pair is frequent enough" */
    uint64_t minf = opts->min_frequency > 0 ? opts->min_frequency : 1;

    /* words as symbol arrays */
    wordcount *W = &t->words;
    size_t nw = W->n;
    uint32_t **sym = tfm_malloc((nw + 1) * sizeof *sym);
    uint32_t *slen = tfm_malloc((nw + 1) * sizeof *slen);
    uint64_t *wcnt = tfm_malloc((nw + 1) * sizeof *wcnt);
    for (size_t w = 0; w < nw; w++) {
        const unsigned char *s = (const unsigned char *)W->arena.data + W->ent[w].off;
        uint32_t n = W->ent[w].len;
        sym[w] = tfm_malloc((n + 1) * sizeof **sym);
        for (uint32_t i = 0; i < n; i++)
            sym[w][i] = byte_id[s[i]];
        slen[w] = n;
        wcnt[w] = W->ent[w].count;
    }
    /* the raw words are no longer needed */
    wc_free(W);
    wc_init(W);

    pairs P = {0};
    pairs_grow(&P);
    for (size_t w = 0; w < nw; w++)
        for (uint32_t i = 0; i + 1 < slen[w]; i++) {
            pair_info *q = pair_get(&P, sym[w][i], sym[w][i + 1]);
            q->count += (int64_t)wcnt[w];
            pair_add_word(q, (uint32_t)w);
        }
    heap H = {0};
    for (size_t i = 0; i < P.n; i++)
        if (P.p[i].count > 0)
            hpush(&H, (hent){P.p[i].count, P.p[i].a, P.p[i].b});

    size_t n_merges = 0, cap_merges = 1024;
    tfm_bpe_merge *merges = tfm_malloc(cap_merges * sizeof *merges);
    /* pairs whose count grew during one merge, to push afterwards */
    uint32_t *touched = NULL;
    size_t n_touched = 0, cap_touched = 0;

    while (H.n > 0 && tok->n_pieces < target) {
        hent top = hpop(&H);
        pair_info *q = pair_get(&P, top.a, top.b);
        if (q->count != top.count) {
            if (q->count > 0)
                hpush(&H, (hent){q->count, top.a, top.b});
            continue;
        }
        if ((uint64_t)top.count < minf)
            break;
        uint32_t a = top.a, b = top.b;
        if ((uint64_t)tok->piece_lens[a] + tok->piece_lens[b] > TFM_TOK_MAX_LEN) {
            q->count = 0; /* too long a token (a huge run of one byte): never merged */
            continue;
        }
        tfm_buf_clear(&piece);
        tfm_buf_append(&piece, tok->pieces[a], tok->piece_lens[a]);
        tfm_buf_append(&piece, tok->pieces[b], tok->piece_lens[b]);
        int64_t have = tfm_tokenizer_token_id(tok, piece.data, piece.len);
        uint32_t z = have >= 0 ? (uint32_t)have : tfm_tok_vocab_push(tok, piece.data, piece.len);
        if (n_merges == cap_merges)
            merges = tfm_realloc(merges, (cap_merges *= 2) * sizeof *merges);
        merges[n_merges++] = (tfm_bpe_merge){a, b, z};

        /* take the word list: q may move when pairs are added */
        uint32_t *wl = q->words;
        uint32_t nwl = q->n_words;
        q->words = NULL;
        q->n_words = q->cap_words = 0;
        q->count = 0;
        n_touched = 0;
        for (uint32_t k = 0; k < nwl; k++) {
            uint32_t w = wl[k];
            uint32_t *s = sym[w];
            uint32_t n = slen[w];
            int64_t c = (int64_t)wcnt[w];
            uint32_t i = 0, o = 0;
            while (i < n) {
                if (i + 1 < n && s[i] == a && s[i + 1] == b) {
                    /* neighbours: the previous output symbol and the symbol
                     * after the pair (still unmerged input) */
                    if (o > 0) {
                        uint32_t prev = s[o - 1];
                        pair_get(&P, prev, a)->count -= c;
                        pair_info *y = pair_get(&P, prev, z);
                        y->count += c;
                        pair_add_word(y, w);
                        if (y->mark != n_merges) {
                            y->mark = (uint32_t)n_merges;
                            if (n_touched == cap_touched)
                                touched = tfm_realloc(touched, (cap_touched = cap_touched ? cap_touched * 2 : 1024) * sizeof *touched);
                            touched[n_touched++] = (uint32_t)(y - P.p);
                        }
                    }
                    if (i + 2 < n) {
                        uint32_t next = s[i + 2];
                        pair_get(&P, b, next)->count -= c;
                        pair_info *y = pair_get(&P, z, next);
                        y->count += c;
                        pair_add_word(y, w);
                        if (y->mark != n_merges) {
                            y->mark = (uint32_t)n_merges;
                            if (n_touched == cap_touched)
                                touched = tfm_realloc(touched, (cap_touched = cap_touched ? cap_touched * 2 : 1024) * sizeof *touched);
                            touched[n_touched++] = (uint32_t)(y - P.p);
                        }
                    }
                    s[o++] = z;
                    i += 2;
                } else {
                    s[o++] = s[i++];
                }
            }
            slen[w] = o;
        }
        free(wl);
        /* the merged pair itself is gone everywhere */
        q = pair_get(&P, a, b);
        q->count = 0;
        for (size_t k = 0; k < n_touched; k++) {
            pair_info *y = &P.p[touched[k]];
            if (y->count > 0)
                hpush(&H, (hent){y->count, y->a, y->b});
        }
    }
    free(touched);
    free(H.e);
    for (size_t i = 0; i < P.n; i++)
        free(P.p[i].words);
    free(P.p);
    free(P.slot);
    for (size_t w = 0; w < nw; w++)
        free(sym[w]);
    free(sym);
    free(slen);
    free(wcnt);
    tfm_buf_free(&piece);

    tfm_bpe_attach(tok, merges, n_merges);
    for (size_t i = 0; i < nsp; i++) {
        if (!sp[i][0])
            continue;
        int64_t id = tfm_tokenizer_token_id(tok, sp[i], strlen(sp[i]));
        tfm_tok_added a = {.content = (char *)sp[i], .len = strlen(sp[i]),
                           .id = (uint32_t)id, .special = 1};
        if (!tfm_tok_is_added(tok, (uint32_t)id) && tfm_tok_add_token(tok, &a, "specials", err)) {
            tfm_tokenizer_free(tok);
            return -1;
        }
    }
    tfm_tok_guess_specials(tok);
    *out = tok;
    return 0;
}

const tfm_tok_trainer_ops tfm_bpe_trainer_ops = {
    .create = bt_create,
    .feed = bt_feed,
    .finish = bt_finish,
    .free = bt_free,
};
