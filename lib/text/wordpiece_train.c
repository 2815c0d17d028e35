/* WordPiece training.
 *
 * Counting: each fed text goes through BERT's basic tokenizer and every word
 * is counted in a hash map, so memory grows with the number of distinct
 * words, never with the corpus; big feeds are split across threads.  Words longer than 100 characters are not
 * counted: the model maps them to the unknown token whatever it learns.
 *
 * Learning: each word starts as its characters, the first as itself and the
 * others as "##"-continuations; the initial vocabulary is the specials, then
 * that alphabet in byte order.  (HuggingFace's trainer also adds the plain
 * form of every character, word-initial or not, and numbers its "##"
 * symbols in the order its word map yields them, so its ties go
 * otherwise.)  Then, until the vocabulary reaches its size,
 * the adjacent pair (a, b) with the highest score is merged into
 * a + b-without-"##".  The score (counts weighted by word frequency) is
 * count(ab), as HuggingFace's WordPiece trainer (BPE with "##"); or, as an
 * option, count(ab) / (count(a) · count(b)), which favours rare pairs: on
 * the KJV at 8000 pieces it gives 2.23 held-out tokens per word against
 * count's 1.19 (a likelihood gain, count(ab)·log(count(ab)·N/(count(a)·
 * count(b))), gave 1.20, and 2.42 against count's 2.38 on a 17-language
 * text; scripts/bench/wordpiece_quality).  Pairs seen fewer than
 * min_frequency times are never merged.
 *
 * Tie-breaking (so that a run is deterministic): higher score, then higher
 * pair count, then smaller id of a, then smaller id of b.  Ids follow the
 * order in which symbols enter the vocabulary.  When a merge spells a piece
 * that already exists (ab + ##c and a + ##bc both give abc) the existing id
 * is reused and the vocabulary does not grow.
 *
 * Updates are incremental: each pair lists the words it occurs in, a merge
 * rewrites only those words and adjusts the counts of the neighbouring pairs.
 * With the ratio score a merge also changes count(a) and count(b), which
 * changes the score of every pair containing a or b — so each symbol lists
 * its pairs and those are re-queued.  The priority queue is a binary heap
 * with lazy deletion: an entry is used only if its score and count still
 * match the pair's; pairs below min_frequency are not queued at all (most
 * pairs of a big corpus), and the heap is rebuilt when stale entries
 * outnumber the pairs.  The result equals a naive trainer's that recounts
 * everything before each merge (tested).
 *
 * Cost of tfm-tokenize train -v 8000 (2 threads; 2026-11, loaded 2-core
 * machine): the KJV verses (3.7 MB) 0.11 s of CPU, 10 MB peak; 23 MB of
 * messages in 17 languages 1.15 s, 78 MB (the ratio score: 0.94 s, 50 MB). */
#include <config.h>

#include <string.h>

#include "base/thread.h"
#include "text/bert_internal.h"
#include "text/wordpiece.h"

#define DEFAULT_VOCAB 30000

typedef struct wslot {
    uint64_t count;
    uint64_t off;   /* in the arena; UINT64_MAX: empty */
    uint32_t len;
    uint32_t hash;
} wslot;

/* A string -> count map over an arena (words while counting, symbols while
 * learning). */
typedef struct smap {
    wslot *s;
    size_t mask, used;
    tfm_buf arena;
} smap;

/* A counting thread's own map, merged into the trainer's after each feed. */
typedef struct counter {
    struct tfm_wordpiece_trainer *t;
    smap words;
    tfm_buf scratch;
    const char *text;
    size_t len;
} counter;

struct tfm_wordpiece_trainer {
    tfm_bert_norm norm;
    uint32_t vocab_size;
    uint64_t min_freq;
    tfm_wordpiece_score score;
    char **specials;
    size_t n_specials;
    smap words;
    tfm_buf scratch;
    int threads;
    counter *counters; /* threads of them, created on the first big feed */
};

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    return h ^ (h >> 31);
}

static void smap_init(smap *m, size_t cap)
{
    size_t c = 64;
    while (c < cap)
        c *= 2;
    m->s = tfm_malloc(c * sizeof *m->s);
    for (size_t i = 0; i < c; i++)
        m->s[i].off = UINT64_MAX;
    m->mask = c - 1;
    m->used = 0;
    memset(&m->arena, 0, sizeof m->arena);
}

static void smap_free(smap *m)
{
    free(m->s);
    tfm_buf_free(&m->arena);
    memset(m, 0, sizeof *m);
}

static void smap_grow(smap *m)
{
    size_t cap = 2 * (m->mask + 1);
    wslot *s = tfm_malloc(cap * sizeof *s);
    for (size_t i = 0; i < cap; i++)
        s[i].off = UINT64_MAX;
    for (size_t i = 0; i <= m->mask; i++) {
        if (m->s[i].off == UINT64_MAX)
            continue;
        size_t j = m->s[i].hash & (cap - 1);
        while (s[j].off != UINT64_MAX)
            j = (j + 1) & (cap - 1);
        s[j] = m->s[i];
    }
    free(m->s);
    m->s = s;
    m->mask = cap - 1;
}

/* The slot for key, inserted with count 0 if new. */
static wslot *smap_get(smap *m, const char *k, size_t n, int insert)
{
    uint64_t h = hash_bytes(k, n);
    size_t i = (size_t)h & m->mask;
    for (;;) {
        wslot *e = &m->s[i];
        if (e->off == UINT64_MAX)
            break;
        if (e->hash == (uint32_t)h && e->len == n && memcmp(m->arena.data + e->off, k, n) == 0)
            return e;
        i = (i + 1) & m->mask;
    }
    if (!insert)
        return NULL;
    if (2 * (m->used + 1) > m->mask + 1) {
        smap_grow(m);
        return smap_get(m, k, n, insert);
    }
    wslot *e = &m->s[i];
    e->off = m->arena.len;
    e->len = (uint32_t)n;
    e->hash = (uint32_t)h;
    e->count = 0;
    tfm_buf_append(&m->arena, k, n);
    m->used++;
    return e;
}

tfm_wordpiece_trainer *tfm_wordpiece_trainer_new(const tfm_tok_train_opts *opts)
{
    static const char *const dflt[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    tfm_wordpiece_trainer *t = tfm_calloc(1, sizeof *t);
    tfm_bert_norm_default(&t->norm);
    t->norm.lowercase = opts->lowercase < 0 ? 1 : opts->lowercase != 0;
    t->vocab_size = opts->vocab_size ? opts->vocab_size : DEFAULT_VOCAB;
    t->min_freq = opts->min_frequency;
    const char *const *sp = opts->specials ? opts->specials : dflt;
    size_t ns = opts->specials ? opts->n_specials : sizeof dflt / sizeof dflt[0];
    t->specials = tfm_malloc((ns + 1) * sizeof *t->specials);
    for (size_t i = 0; i < ns; i++) {
        size_t j = 0;
        while (j < t->n_specials && strcmp(t->specials[j], sp[i]) != 0)
            j++;
        if (j == t->n_specials)
            t->specials[t->n_specials++] = tfm_strdup(sp[i]);
    }
    smap_init(&t->words, 1 << 12);
    t->threads = opts->threads > 0 ? opts->threads : 1;
    return t;
}

void tfm_wordpiece_trainer_set_score(tfm_wordpiece_trainer *t, tfm_wordpiece_score score)
{
    t->score = score;
}

void tfm_wordpiece_trainer_free(tfm_wordpiece_trainer *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_specials; i++)
        free(t->specials[i]);
    free(t->specials);
    smap_free(&t->words);
    tfm_buf_free(&t->scratch);
    for (int i = 0; t->counters && i < t->threads; i++) {
        smap_free(&t->counters[i].words);
        tfm_buf_free(&t->counters[i].scratch);
    }
    free(t->counters);
    free(t);
}

static size_t utf8_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static int too_long(const char *w, size_t n)
{
    return n == 0 || (n > 100 && utf8_chars(w, n) > 100);
}

void tfm_wordpiece_trainer_add_word(tfm_wordpiece_trainer *t, const char *word, size_t len,
                                    uint64_t count)
{
    if (!too_long(word, len))
        smap_get(&t->words, word, len, 1)->count += count;
}

static void count_word(void *ctx, const char *w, size_t n)
{
    smap *m = ctx;
    if (!too_long(w, n))
        smap_get(m, w, n, 1)->count++;
}

static void count_part(void *ctx, int i, int n)
{
    (void)n;
    counter *c = &((counter *)ctx)[i];
    tfm_bert_split(&c->t->norm, 1, 1, c->text, c->len, &c->scratch, count_word, &c->words);
}

/* Counting is split across threads for big inputs: parts end at ASCII
 * whitespace, which always separates words (and no UTF-8 sequence or
 * combining-mark reordering spans it), so the counts are the same. */
void tfm_wordpiece_trainer_feed(tfm_wordpiece_trainer *t, const char *text, size_t len)
{
    int n = t->threads;
    if (n <= 1 || len < (size_t)n * 65536) {
        tfm_bert_split(&t->norm, 1, 1, text, len, &t->scratch, count_word, &t->words);
        return;
    }
    if (!t->counters) {
        t->counters = tfm_calloc((size_t)n, sizeof *t->counters);
        for (int i = 0; i < n; i++) {
            t->counters[i].t = t;
            smap_init(&t->counters[i].words, 1 << 12);
        }
    }
    size_t start = 0;
    for (int i = 0; i < n; i++) {
        size_t end = i == n - 1 ? len : len / (size_t)n * (size_t)(i + 1);
        while (end < len && text[end] != ' ' && text[end] != '\n' && text[end] != '\t')
            end++;
        if (end < start)
            end = start;
        t->counters[i].text = text + start;
        t->counters[i].len = end - start;
        start = end;
    }
    tfm_parallel_run(n, count_part, t->counters);
    for (int i = 0; i < n; i++) {
        smap *m = &t->counters[i].words;
        for (size_t k = 0; k <= m->mask; k++) {
            wslot *e = &m->s[k];
            if (e->off == UINT64_MAX)
                continue;
            smap_get(&t->words, m->arena.data + e->off, e->len, 1)->count += e->count;
            e->off = UINT64_MAX;
        }
        m->used = 0;
        m->arena.len = 0;
    }
}

/* ---- learning ---- */

typedef struct pair {
    uint32_t a, b;
    int64_t count;
    uint32_t *words; /* words holding the pair (possibly stale, no dups in a row) */
    uint32_t nw, cw;
    uint32_t stamp;  /* merge step that last touched it */
    uint8_t listed;  /* bit 0: in a's pair list, bit 1: in b's */
} pair;

typedef struct hent {
    double score;
    int64_t count;
    uint32_t pair;
} hent;

typedef struct word {
    uint64_t count;
    uint32_t *s; /* symbols, into the shared array */
    uint32_t n;
    uint32_t stamp;
} word;

/* Key and value side by side: one cache miss a lookup. */
typedef struct pent {
    uint64_t key; /* (a << 32 | b) + 1, 0 empty */
    uint32_t val;
} pent;

typedef struct learner {
    smap syms;          /* symbol text -> id (count field = id) */
    uint64_t *sym_off;  /* symbol id -> arena offset, length */
    uint32_t *sym_len;
    int64_t *sc;        /* symbol counts */
    uint32_t **sp;      /* symbol -> pairs containing it */
    uint32_t *spn, *spc;
    uint32_t nsym, csym;
    pair *pairs;
    size_t npairs, cpairs;
    pent *pmap;         /* pair map */
    size_t pmask;
    hent *heap;
    size_t nheap, cheap;
    word *words;
    size_t nwords;
    uint32_t *touched;
    size_t ntouched, ctouched;
    uint32_t step;
    int64_t minf;       /* pairs rarer than this are never queued */
    tfm_wordpiece_score score;
} learner;

static uint32_t sym_add(learner *L, const char *s, size_t n)
{
    wslot *e = smap_get(&L->syms, s, n, 1);
    if (e->count)
        return (uint32_t)(e->count - 1);
    if (L->nsym == L->csym) {
        L->csym = L->csym ? 2 * L->csym : 1024;
        L->sym_off = tfm_realloc(L->sym_off, L->csym * sizeof *L->sym_off);
        L->sym_len = tfm_realloc(L->sym_len, L->csym * sizeof *L->sym_len);
        L->sc = tfm_realloc(L->sc, L->csym * sizeof *L->sc);
        L->sp = tfm_realloc(L->sp, L->csym * sizeof *L->sp);
        L->spn = tfm_realloc(L->spn, L->csym * sizeof *L->spn);
        L->spc = tfm_realloc(L->spc, L->csym * sizeof *L->spc);
    }
    uint32_t id = L->nsym++;
    e->count = (uint64_t)id + 1;
    L->sym_off[id] = e->off;
    L->sym_len[id] = e->len;
    L->sc[id] = 0;
    L->sp[id] = NULL;
    L->spn[id] = L->spc[id] = 0;
    return id;
}

static const char *sym_str(const learner *L, uint32_t id)
{
    return L->syms.arena.data + L->sym_off[id];
}

static size_t pslot(uint64_t key, size_t mask)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 17) & mask;
}

static void pmap_grow(learner *L)
{
    size_t cap = L->pmask ? 2 * (L->pmask + 1) : 1 << 16;
    pent *m = tfm_calloc(cap, sizeof *m);
    for (size_t i = 0; L->pmask && i <= L->pmask; i++) {
        if (!L->pmap[i].key)
            continue;
        size_t j = pslot(L->pmap[i].key, cap - 1);
        while (m[j].key)
            j = (j + 1) & (cap - 1);
        m[j] = L->pmap[i];
    }
    free(L->pmap);
    L->pmap = m;
    L->pmask = cap - 1;
}

static void sp_add(learner *L, uint32_t s, uint32_t p)
{
    if (L->spn[s] == L->spc[s]) {
        L->spc[s] = L->spc[s] ? 2 * L->spc[s] : 4;
        L->sp[s] = tfm_realloc(L->sp[s], L->spc[s] * sizeof *L->sp[s]);
    }
    L->sp[s][L->spn[s]++] = p;
}

static uint32_t pair_get(learner *L, uint32_t a, uint32_t b)
{
    uint64_t key = ((uint64_t)a << 32 | b) + 1;
    if (2 * (L->npairs + 1) > L->pmask + 1)
        pmap_grow(L);
    size_t i = pslot(key, L->pmask);
    while (L->pmap[i].key) {
        if (L->pmap[i].key == key)
            return L->pmap[i].val;
        i = (i + 1) & L->pmask;
    }
    if (L->npairs == L->cpairs) {
        L->cpairs = L->cpairs ? 2 * L->cpairs : 1 << 14;
        L->pairs = tfm_realloc(L->pairs, L->cpairs * sizeof *L->pairs);
    }
    uint32_t p = (uint32_t)L->npairs++;
    memset(&L->pairs[p], 0, sizeof L->pairs[p]);
    L->pairs[p].a = a;
    L->pairs[p].b = b;
    L->pairs[p].stamp = UINT32_MAX;
    L->pmap[i].key = key;
    L->pmap[i].val = p;
    L->pairs[p].listed = 3;
    if (L->score == TFM_WP_SCORE_COUNT)
        return p; /* symbols' pair lists unused: see merge() */
    sp_add(L, a, p);
    if (b != a)
        sp_add(L, b, p);
    return p;
}

static void touch(learner *L, uint32_t p)
{
    if (L->pairs[p].stamp == L->step)
        return;
    L->pairs[p].stamp = L->step;
    if (L->ntouched == L->ctouched) {
        L->ctouched = L->ctouched ? 2 * L->ctouched : 1024;
        L->touched = tfm_realloc(L->touched, L->ctouched * sizeof *L->touched);
    }
    L->touched[L->ntouched++] = p;
}

static void pair_add(learner *L, uint32_t a, uint32_t b, int64_t delta, uint32_t w)
{
    uint32_t p = pair_get(L, a, b);
    pair *q = &L->pairs[p];
    q->count += delta;
    /* A pair that died and was dropped from its symbols' lists comes back
     * (a merge that spells an existing piece): list it again. */
    if (delta > 0 && q->listed != 3) {
        if (!(q->listed & 1))
            sp_add(L, a, p);
        if (!(q->listed & 2) && b != a)
            sp_add(L, b, p);
        q = &L->pairs[p];
        q->listed = 3;
    }
    if (delta > 0 && (q->nw == 0 || q->words[q->nw - 1] != w)) {
        if (q->nw == q->cw) {
            q->cw = q->cw ? 2 * q->cw : 2;
            q->words = tfm_realloc(q->words, q->cw * sizeof *q->words);
        }
        q->words[q->nw++] = w;
    }
    touch(L, p);
}

/* 1 if x should come out of the heap before y. */
static int before(const learner *L, const hent *x, const hent *y)
{
    if (x->score != y->score)
        return x->score > y->score;
    if (x->count != y->count)
        return x->count > y->count;
    const pair *p = &L->pairs[x->pair], *q = &L->pairs[y->pair];
    if (p->a != q->a)
        return p->a < q->a;
    return p->b < q->b;
}

static double score_of(const learner *L, const pair *p)
{
    if (L->score == TFM_WP_SCORE_COUNT)
        return (double)p->count;
    return (double)p->count / ((double)L->sc[p->a] * (double)L->sc[p->b]);
}

static void heap_push(learner *L, uint32_t p)
{
    const pair *q = &L->pairs[p];
    if (q->count < L->minf)
        return; /* queued again if its count grows */
    if (L->nheap == L->cheap) {
        L->cheap = L->cheap ? 2 * L->cheap : 1 << 14;
        L->heap = tfm_realloc(L->heap, L->cheap * sizeof *L->heap);
    }
    hent e = {score_of(L, q), q->count, p};
    size_t i = L->nheap++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!before(L, &e, &L->heap[up]))
            break;
        L->heap[i] = L->heap[up];
        i = up;
    }
    L->heap[i] = e;
}

static hent heap_pop(learner *L)
{
    hent top = L->heap[0], last = L->heap[--L->nheap];
    size_t i = 0, n = L->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && before(L, &L->heap[c + 1], &L->heap[c]))
            c++;
        if (!before(L, &L->heap[c], &last))
            break;
        L->heap[i] = L->heap[c];
        i = c;
    }
    if (n)
        L->heap[i] = last;
    return top;
}

/* Re-queues every live pair of symbol s, dropping dead ones from its list. */
static void requeue_symbol(learner *L, uint32_t s)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < L->spn[s]; i++) {
        uint32_t p = L->sp[s][i];
        pair *q = &L->pairs[p];
        if (q->count <= 0) {
            q->listed &= (uint8_t)~(q->a == s ? 1 : 2);
            continue;
        }
        L->sp[s][k++] = p;
        touch(L, p);
    }
    L->spn[s] = k;
}

static void merge(learner *L, uint32_t p, uint32_t m)
{
    uint32_t a = L->pairs[p].a, b = L->pairs[p].b;
    uint32_t *ws = L->pairs[p].words, nw = L->pairs[p].nw;
    L->pairs[p].words = NULL;
    L->pairs[p].nw = L->pairs[p].cw = 0;
    for (uint32_t k = 0; k < nw; k++) {
        /* Memory bound on big vocabularies: fetch the words ahead. */
        if (k + 8 < nw)
            __builtin_prefetch(&L->words[ws[k + 8]]);
        if (k + 4 < nw)
            __builtin_prefetch(L->words[ws[k + 4]].s);
        uint32_t wi = ws[k];
        word *w = &L->words[wi];
        if (w->stamp == L->step)
            continue;
        w->stamp = L->step;
        int64_t c = (int64_t)w->count;
        uint32_t *s = w->s, n = w->n;
        for (uint32_t i = 0; i + 1 < n; i++) {
            if (s[i] != a || s[i + 1] != b)
                continue;
            if (i > 0) {
                pair_add(L, s[i - 1], a, -c, wi);
                pair_add(L, s[i - 1], m, c, wi);
            }
            if (i + 2 < n) {
                pair_add(L, b, s[i + 2], -c, wi);
                pair_add(L, m, s[i + 2], c, wi);
            }
            L->pairs[p].count -= c;
            touch(L, p);
            L->sc[a] -= c;
            L->sc[b] -= c;
            L->sc[m] += c;
            s[i] = m;
            memmove(s + i + 1, s + i + 2, (n - i - 2) * sizeof *s);
            n--;
        }
        w->n = n;
    }
    free(ws);
    /* The ratio score of every pair holding a or b changed with their
     * counts; a count score only with the pair's, re-queued by pair_add. */
    if (L->score == TFM_WP_SCORE_COUNT)
        return;
    requeue_symbol(L, a);
    if (b != a)
        requeue_symbol(L, b);
    requeue_symbol(L, m);
}

/* Character key (its bytes, length, "##" flag) -> first-seen id; at most
 * half full, so keys (id -> key) has room for (mask + 1) / 2 ids. */
typedef struct cmap {
    uint64_t *slot; /* key, 0 empty */
    uint32_t *id;
    uint64_t *keys;
    uint32_t n, mask;
} cmap;

static void cmap_init(cmap *m, uint32_t cap)
{
    m->mask = cap - 1;
    m->slot = tfm_calloc(cap, sizeof *m->slot);
    m->id = tfm_malloc(cap * sizeof *m->id);
    m->keys = tfm_malloc(cap / 2 * sizeof *m->keys);
    m->n = 0;
}

static void cmap_free(cmap *m)
{
    free(m->slot);
    free(m->id);
    free(m->keys);
}

static uint32_t cmap_id(cmap *m, uint64_t key)
{
    if (2 * (m->n + 1) > m->mask + 1) {
        cmap g;
        cmap_init(&g, 2 * (m->mask + 1));
        for (uint32_t j = 0; j < m->n; j++)
            cmap_id(&g, m->keys[j]); /* same ids, in the same order */
        cmap_free(m);
        *m = g;
    }
    size_t i = pslot(key, m->mask);
    while (m->slot[i]) {
        if (m->slot[i] == key)
            return m->id[i];
        i = (i + 1) & m->mask;
    }
    m->slot[i] = key;
    m->id[i] = m->n;
    m->keys[m->n] = key;
    return m->n++;
}

typedef struct named {
    char *name;
    uint32_t id;
} named;

static int cmp_named(const void *x, const void *y)
{
    return strcmp(((const named *)x)->name, ((const named *)y)->name);
}

static void learner_free(learner *L)
{
    smap_free(&L->syms);
    for (uint32_t i = 0; i < L->nsym; i++)
        free(L->sp[i]);
    free(L->sp);
    free(L->spn);
    free(L->spc);
    free(L->sym_off);
    free(L->sym_len);
    free(L->sc);
    for (size_t i = 0; i < L->npairs; i++)
        free(L->pairs[i].words);
    free(L->pairs);
    free(L->pmap);
    free(L->heap);
    free(L->words);
    free(L->touched);
}

static int is_unk_like(const char *s)
{
    return strcasestr(s, "unk") != NULL;
}

int tfm_wordpiece_trainer_finish(tfm_wordpiece_trainer *t, tfm_wordpiece **out, tfm_err *err)
{
    *out = NULL;
    learner L;
    memset(&L, 0, sizeof L);
    L.minf = t->min_freq > 1 ? (int64_t)t->min_freq : 1;
    L.score = t->score;
    smap_init(&L.syms, 1 << 12);
    smap *W = &t->words;

    /* The unknown token: [UNK] or the first unk-like special, else [UNK]. */
    const char *unk = NULL;
    for (size_t i = 0; i < t->n_specials && !unk; i++)
        if (strcmp(t->specials[i], "[UNK]") == 0)
            unk = t->specials[i];
    for (size_t i = 0; i < t->n_specials && !unk; i++)
        if (is_unk_like(t->specials[i]))
            unk = t->specials[i];
    for (size_t i = 0; i < t->n_specials; i++)
        sym_add(&L, t->specials[i], strlen(t->specials[i]));
    if (!unk) {
        unk = "[UNK]";
        sym_add(&L, unk, 5);
    }

    /* Words as character sequences, each character (and "##" flag) keyed
     * by its bytes in a small map: no string building, one probe per
     * character. */
    cmap cm;
    cmap_init(&cm, 1024);
    L.words = tfm_malloc((W->used + 1) * sizeof *L.words);
    uint32_t *syms = tfm_malloc((W->arena.len + 1) * sizeof *syms);
    size_t pos = 0;
    for (size_t i = 0; i <= W->mask; i++) {
        if (W->s[i].off == UINT64_MAX)
            continue;
        const unsigned char *w = (const unsigned char *)W->arena.data + W->s[i].off;
        size_t n = W->s[i].len;
        word *wd = &L.words[L.nwords++];
        wd->count = W->s[i].count;
        wd->s = syms + pos;
        wd->n = 0;
        wd->stamp = UINT32_MAX;
        for (size_t j = 0; j < n;) {
            size_t k = j + 1;
            /* The normalizer's output is valid UTF-8: 4 bytes at most. */
            while (k < n && k - j < 4 && (w[k] & 0xC0) == 0x80)
                k++;
            uint64_t key = (uint64_t)(k - j) << 32 | (uint64_t)(j > 0) << 40;
            for (size_t b = j; b < k; b++)
                key |= (uint64_t)w[b] << (8 * (b - j));
            wd->s[wd->n++] = cmap_id(&cm, key);
            j = k;
        }
        pos += wd->n;
    }

    /* The alphabet, in byte order. */
    named *alpha = tfm_malloc((cm.n + 1) * sizeof *alpha);
    for (uint32_t c = 0; c < cm.n; c++) {
        char b[8];
        size_t len = 0;
        if (cm.keys[c] >> 40)
            b[len++] = '#', b[len++] = '#';
        for (uint32_t q = 0; q < (uint32_t)(cm.keys[c] >> 32 & 0xFF); q++)
            b[len++] = (char)(cm.keys[c] >> (8 * q));
        alpha[c].name = tfm_strndup(b, len);
        alpha[c].id = c;
    }
    qsort(alpha, cm.n, sizeof *alpha, cmp_named);
    uint32_t *remap = tfm_malloc((cm.n + 1) * sizeof *remap);
    for (uint32_t c = 0; c < cm.n; c++) {
        remap[alpha[c].id] = sym_add(&L, alpha[c].name, strlen(alpha[c].name));
        free(alpha[c].name);
    }
    free(alpha);
    cmap_free(&cm);

    /* The initial symbol and pair counts. */
    L.step = 0;
    for (size_t i = 0; i < L.nwords; i++) {
        word *wd = &L.words[i];
        for (uint32_t j = 0; j < wd->n; j++) {
            uint32_t s = wd->s[j] = remap[wd->s[j]];
            L.sc[s] += (int64_t)wd->count;
            if (j)
                pair_add(&L, wd->s[j - 1], s, (int64_t)wd->count, (uint32_t)i);
        }
    }
    free(remap);
    tfm_buf tmp = {0};
    for (size_t i = 0; i < L.ntouched; i++)
        heap_push(&L, L.touched[i]);
    L.ntouched = 0;

    /* Merge until the vocabulary is full or nothing is left to merge. */
    while (L.nsym < t->vocab_size && L.nheap) {
        hent e = heap_pop(&L);
        pair *q = &L.pairs[e.pair];
        if (q->count < L.minf || q->count != e.count || score_of(&L, q) != e.score)
            continue; /* stale, or too rare */
        L.step++;
        tfm_buf_clear(&tmp);
        tfm_buf_append(&tmp, sym_str(&L, q->a), L.sym_len[q->a]);
        const char *bs = sym_str(&L, q->b);
        size_t bn = L.sym_len[q->b];
        if (bn >= 2 && bs[0] == '#' && bs[1] == '#')
            tfm_buf_append(&tmp, bs + 2, bn - 2);
        else
            tfm_buf_append(&tmp, bs, bn);
        uint32_t m = sym_add(&L, tmp.data, tmp.len);
        merge(&L, e.pair, m);
        for (size_t i = 0; i < L.ntouched; i++)
            heap_push(&L, L.touched[i]);
        L.ntouched = 0;
        /* Most entries are stale by now: rebuild with one per live pair, so
         * the heap stays proportional to the pairs, not to the merges. */
        if (L.nheap > 4 * L.npairs + 65536) {
            L.nheap = 0;
            for (size_t p = 0; p < L.npairs; p++)
                heap_push(&L, (uint32_t)p);
            L.cheap = 2 * L.nheap + 1024;
            L.heap = tfm_realloc(L.heap, L.cheap * sizeof *L.heap);
        }
    }
    tfm_buf_free(&tmp);
    free(syms);

    const char **pieces = tfm_malloc((L.nsym + 1) * sizeof *pieces);
    size_t *lens = tfm_malloc((L.nsym + 1) * sizeof *lens);
    for (uint32_t i = 0; i < L.nsym; i++) {
        pieces[i] = sym_str(&L, i);
        lens[i] = L.sym_len[i];
    }
    int r = tfm_wordpiece_from_pieces(out, pieces, lens, L.nsym, unk, &t->norm, err);
    free(pieces);
    free(lens);
    learner_free(&L);
    return r;
}
