/* Byte-level BPE: loading (GPT-2 files, tokenizer.json), encoding, decoding,
 * writing.  See bpe.h for the algorithm. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "text/bpe.h"
#include "text/pretok.h"
#include "text/tok_internal.h"
#include "text/utf8.h"

/* ---- GPT-2's byte alphabet ---- */

/* Printable Latin-1 bytes spell themselves; the other 68 bytes take U+0100
 * onwards, in byte order. */
static int printable(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tfm_bpe_byte_char(uint8_t b)
{
    if (printable(b))
        return b;
    uint32_t k = 0;
    for (unsigned x = 0; x < b; x++)
        k += !printable(x);
    return 256 + k;
}

int tfm_bpe_char_byte(uint32_t cp)
{
    if (cp < 256)
        return printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    uint32_t k = cp - 256;
    for (unsigned x = 0; x < 256; x++)
        if (!printable(x) && k-- == 0)
            return (int)x;
    return -1;
}

void tfm_bpe_spell(const unsigned char *s, size_t n, tfm_buf *out)
{
    unsigned char u[4];
    for (size_t i = 0; i < n; i++)
        tfm_buf_append(out, u, tfm_utf8_encode(tfm_bpe_byte_char(s[i]), u));
}

/* ---- the model ---- */

typedef struct bpe_pair {
    uint32_t left, right, rank, merged; /* left == UINT32_MAX: empty slot */
} bpe_pair;

struct tfm_bpe {
    uint32_t byte_id[256];
    uint8_t has_byte[256];
    bpe_pair *pairs;
    uint32_t pair_mask;
    tfm_bpe_merge *merges; /* rank order */
    size_t n_merges;
    uint32_t n_vocab;      /* ids below this may be model entries */
    uint8_t *in_vocab;     /* [n_vocab]: 1 if the id is in the model's vocab */
    int64_t *rank_of;      /* [n_vocab] */
    char **bytes;          /* [n_vocab]: the bytes an id stands for */
    uint32_t *bytes_len;
    int add_prefix_space;
    /* 0: GPT-2's pre-tokenizer; 3 or 1: Llama 3's or Qwen2's (Split with
     * their regex, then ByteLevel without one), by the digits a number
     * pre-token holds at most */
    int split_digits;
    /* HF's ignore_merges: a word that is in the vocabulary as a whole is
     * that token, whatever the merges would give. */
    int ignore_merges;
    const tfm_tokenizer *tok;
};

static inline uint32_t pair_hash(uint32_t a, uint32_t b)
{
    uint64_t k = ((uint64_t)a << 32 | b) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k >> 32);
}

static inline const bpe_pair *pair_find(const tfm_bpe *m, uint32_t a, uint32_t b)
{
    uint32_t h = pair_hash(a, b) & m->pair_mask;
    for (;;) {
        const bpe_pair *p = &m->pairs[h];
        if (p->left == a && p->right == b)
            return p;
        if (p->left == UINT32_MAX)
            return NULL;
        h = (h + 1) & m->pair_mask;
    }
}

static void bpe_free(void *impl)
{
    tfm_bpe *m = impl;
    if (!m)
        return;
    free(m->pairs);
    free(m->merges);
    free(m->in_vocab);
    free(m->rank_of);
    if (m->bytes)
        for (uint32_t i = 0; i < m->n_vocab; i++)
            free(m->bytes[i]);
    free(m->bytes);
    free(m->bytes_len);
    free(m);
}

/* Bytes a piece spelt in the byte alphabet stands for; a piece with a
 * character outside the alphabet (an added token's text) stands for itself. */
static char *piece_bytes(const char *p, size_t n, uint32_t *outlen)
{
    char *r = tfm_malloc(n + 1);
    size_t i = 0, k = 0, adv;
    while (i < n) {
        int32_t cp = tfm_utf8_decode((const unsigned char *)p + i, n - i, &adv);
        int b = cp < 0 ? -1 : tfm_bpe_char_byte((uint32_t)cp);
        if (b < 0) {
            memcpy(r, p, n);
            r[n] = 0;
            *outlen = (uint32_t)n;
            return r;
        }
        r[k++] = (char)b;
        i += adv;
    }
    r[k] = 0;
    *outlen = (uint32_t)k;
    return r;
}

/* Builds the model from tok's current vocabulary and merges (taken over).
 * merges[i].merged must be the id of left's piece followed by right's. */
static tfm_bpe *bpe_model_build(tfm_tokenizer *tok, tfm_bpe_merge *merges, size_t n_merges)
{
    tfm_bpe *m = tfm_calloc(1, sizeof *m);
    m->tok = tok;
    m->merges = merges;
    m->n_merges = n_merges;
    m->n_vocab = tok->n_pieces;
    m->in_vocab = tfm_calloc(m->n_vocab + 1, 1);
    m->rank_of = tfm_malloc((m->n_vocab + 1) * sizeof *m->rank_of);
    m->bytes = tfm_calloc(m->n_vocab + 1, sizeof *m->bytes);
    m->bytes_len = tfm_calloc(m->n_vocab + 1, sizeof *m->bytes_len);
    for (uint32_t id = 0; id < m->n_vocab; id++) {
        m->rank_of[id] = -1;
        if (!tok->pieces[id])
            continue;
        m->in_vocab[id] = 1;
        m->bytes[id] = piece_bytes(tok->pieces[id], tok->piece_lens[id], &m->bytes_len[id]);
    }
    unsigned char u[4];
    for (unsigned b = 0; b < 256; b++) {
        size_t l = tfm_utf8_encode(tfm_bpe_byte_char((uint8_t)b), u);
        int64_t id = tfm_tokenizer_token_id(tok, (const char *)u, l);
        if (id >= 0) {
            m->byte_id[b] = (uint32_t)id;
            m->has_byte[b] = 1;
        }
    }
    uint32_t cap = 16;
    while (cap < 2 * n_merges + 16)
        cap *= 2;
    m->pairs = tfm_malloc((size_t)cap * sizeof *m->pairs);
    memset(m->pairs, 0xff, (size_t)cap * sizeof *m->pairs);
    m->pair_mask = cap - 1;
    for (size_t r = 0; r < n_merges; r++) {
        uint32_t a = merges[r].left, b = merges[r].right;
        uint32_t h = pair_hash(a, b) & m->pair_mask;
        while (m->pairs[h].left != UINT32_MAX && !(m->pairs[h].left == a && m->pairs[h].right == b))
            h = (h + 1) & m->pair_mask;
        if (m->pairs[h].left != UINT32_MAX)
            continue; /* a repeated merge keeps its first rank */
        m->pairs[h] = (bpe_pair){a, b, (uint32_t)r, merges[r].merged};
        if (merges[r].merged < m->n_vocab && m->rank_of[merges[r].merged] < 0)
            m->rank_of[merges[r].merged] = (int64_t)r;
    }
    return m;
}

int64_t tfm_bpe_merge_rank(const tfm_tokenizer *tok, uint32_t id)
{
    const tfm_bpe *m = tok->impl;
    if (tok->kind != TFM_TOK_BPE || !m || id >= m->n_vocab || tfm_tok_is_added(tok, id))
        return -1;
    return m->rank_of[id];
}

/* ---- the per-thread word cache ---- */

typedef struct cache_slot {
    uint64_t h;        /* 0: empty */
    uint32_t key, len; /* key bytes at arena[key..key+len) */
    uint32_t ids, n;   /* ids at idarena[ids..ids+n) */
} cache_slot;

struct tfm_bpe_cache {
    cache_slot *slots;
    uint32_t mask, used;
    tfm_buf arena;
    tfm_ids idarena;
};

#define CACHE_SLOTS (1u << 16)
#define CACHE_MAX_WORD 64

tfm_bpe_cache *tfm_bpe_cache_new(void)
{
    tfm_bpe_cache *c = tfm_calloc(1, sizeof *c);
    c->slots = tfm_calloc(CACHE_SLOTS, sizeof *c->slots);
    c->mask = CACHE_SLOTS - 1;
    return c;
}

void tfm_bpe_cache_free(tfm_bpe_cache *c)
{
    if (!c)
        return;
    free(c->slots);
    tfm_buf_free(&c->arena);
    tfm_ids_free(&c->idarena);
    free(c);
}

static inline uint64_t word_hash(const unsigned char *s, size_t n)
{
    uint64_t h = 0x243F6A8885A308D3ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 32;
    return h | 1;
}

/* ---- merging one word ---- */

#define SMALL_WORD 128

static void merge_small(const tfm_bpe *m, const unsigned char *s, size_t n, tfm_ids *out)
{
    uint32_t ids[SMALL_WORD], rk[SMALL_WORD], nw[SMALL_WORD];
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (m->has_byte[s[i]])
            ids[k++] = m->byte_id[s[i]];
    if (k == 0)
        return;
    for (size_t i = 0; i + 1 < k; i++) {
        const bpe_pair *p = pair_find(m, ids[i], ids[i + 1]);
        rk[i] = p ? p->rank : UINT32_MAX;
        nw[i] = p ? p->merged : 0;
    }
    while (k > 1) {
        uint32_t best = UINT32_MAX;
        size_t b = 0;
        for (size_t i = 0; i + 1 < k; i++)
            if (rk[i] < best) {
                best = rk[i];
                b = i;
            }
        if (best == UINT32_MAX)
            break;
        ids[b] = nw[b];
        /* drop element b+1 and pair b (pairs b-1 and b are recomputed) */
        memmove(ids + b + 1, ids + b + 2, (k - b - 2) * sizeof *ids);
        if (k >= b + 3) {
            memmove(rk + b + 1, rk + b + 2, (k - b - 3) * sizeof *rk);
            memmove(nw + b + 1, nw + b + 2, (k - b - 3) * sizeof *nw);
        }
        k--;
        if (b > 0) {
            const bpe_pair *p = pair_find(m, ids[b - 1], ids[b]);
            rk[b - 1] = p ? p->rank : UINT32_MAX;
            nw[b - 1] = p ? p->merged : 0;
        }
        if (b + 1 < k) {
            const bpe_pair *p = pair_find(m, ids[b], ids[b + 1]);
            rk[b] = p ? p->rank : UINT32_MAX;
            nw[b] = p ? p->merged : 0;
        }
    }
    tfm_ids_append(out, ids, k);
}

/* Long words: a linked list of symbols and a min-heap of (rank, position)
 * with lazy invalidation, so a word of n bytes costs O(n log n). */
typedef struct heap_ent {
    uint32_t rank, pos;
} heap_ent;

static inline int ent_less(heap_ent a, heap_ent b)
{
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(heap_ent *h, size_t *n, heap_ent e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ent_less(e, h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static heap_ent heap_pop(heap_ent *h, size_t *n)
{
    heap_ent top = h[0], e = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && ent_less(h[c + 1], h[c]))
            c++;
        if (!ent_less(h[c], e))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n > 0)
        h[i] = e;
    return top;
}

void tfm_bpe_encode_word_heap(const tfm_bpe *m, const unsigned char *s, size_t n, tfm_ids *out)
{
    uint32_t *id = tfm_malloc(n * sizeof *id);
    uint32_t *next = tfm_malloc(n * sizeof *next);
    uint32_t *prev = tfm_malloc(n * sizeof *prev);
    uint8_t *alive = tfm_malloc(n);
    /* each merge pushes at most 2 entries */
    heap_ent *heap = tfm_malloc(3 * (n + 1) * sizeof *heap);
    size_t hn = 0, k = 0;
    for (size_t i = 0; i < n; i++)
        if (m->has_byte[s[i]])
            id[k++] = m->byte_id[s[i]];
    for (size_t i = 0; i < k; i++) {
        next[i] = i + 1 < k ? (uint32_t)(i + 1) : UINT32_MAX;
        prev[i] = i > 0 ? (uint32_t)(i - 1) : UINT32_MAX;
        alive[i] = 1;
    }
    for (size_t i = 0; i + 1 < k; i++) {
        const bpe_pair *p = pair_find(m, id[i], id[i + 1]);
        if (p)
            heap_push(heap, &hn, (heap_ent){p->rank, (uint32_t)i});
    }
    while (hn > 0) {
        heap_ent e = heap_pop(heap, &hn);
        uint32_t a = e.pos;
        if (!alive[a] || next[a] == UINT32_MAX)
            continue;
        uint32_t b = next[a];
        const bpe_pair *p = pair_find(m, id[a], id[b]);
        if (!p || p->rank != e.rank)
            continue; /* stale: the pair at a has changed */
        id[a] = p->merged;
        alive[b] = 0;
        next[a] = next[b];
        if (next[b] != UINT32_MAX)
            prev[next[b]] = a;
        if (prev[a] != UINT32_MAX) {
            const bpe_pair *q = pair_find(m, id[prev[a]], id[a]);
            if (q)
                heap_push(heap, &hn, (heap_ent){q->rank, prev[a]});
        }
        if (next[a] != UINT32_MAX) {
            const bpe_pair *q = pair_find(m, id[a], id[next[a]]);
            if (q)
                heap_push(heap, &hn, (heap_ent){q->rank, a});
        }
    }
    for (uint32_t i = 0; k > 0 && i != UINT32_MAX; i = next[i])
        tfm_ids_push(out, id[i]);
    free(id);
    free(next);
    free(prev);
    free(alive);
    free(heap);
}

static int whole_word(const tfm_bpe *m, const unsigned char *s, size_t n, tfm_ids *out)
{
    tfm_buf b = {0};
    tfm_bpe_spell(s, n, &b);
    int64_t id = tfm_tokenizer_token_id(m->tok, b.data, b.len);
    tfm_buf_free(&b);
    if (id < 0 || (uint32_t)id >= m->n_vocab || !m->in_vocab[id])
        return 0;
    tfm_ids_push(out, (uint32_t)id);
    return 1;
}

static void word_ids(const tfm_bpe *m, const unsigned char *s, size_t n, tfm_ids *out)
{
    if (m->ignore_merges && whole_word(m, s, n, out))
        return;
    if (n > SMALL_WORD)
        tfm_bpe_encode_word_heap(m, s, n, out);
    else
        merge_small(m, s, n, out);
}

void tfm_bpe_encode_word(const tfm_bpe *m, tfm_bpe_cache *c, const unsigned char *s,
                         size_t n, tfm_ids *out)
{
    if (n == 1) {
        if (m->has_byte[s[0]])
            tfm_ids_push(out, m->byte_id[s[0]]);
        return;
    }
    if (!c || n > CACHE_MAX_WORD) {
        word_ids(m, s, n, out);
        return;
    }
    uint64_t h = word_hash(s, n);
    uint32_t i = (uint32_t)h & c->mask;
    for (;;) {
        cache_slot *sl = &c->slots[i];
        if (sl->h == 0)
            break;
        if (sl->h == h && sl->len == n && memcmp(c->arena.data + sl->key, s, n) == 0) {
            tfm_ids_append(out, c->idarena.data + sl->ids, sl->n);
            return;
        }
        i = (i + 1) & c->mask;
    }
    size_t before = out->len;
    word_ids(m, s, n, out);
    if (c->used >= CACHE_SLOTS / 2 || c->arena.len > (64u << 20)) {
        /* full: start over rather than evict (cheap, and the working set of
         * a text's frequent words refills it at once) */
        memset(c->slots, 0, CACHE_SLOTS * sizeof *c->slots);
        c->used = 0;
        tfm_buf_clear(&c->arena);
        tfm_ids_clear(&c->idarena);
        i = (uint32_t)h & c->mask;
    }
    cache_slot *sl = &c->slots[i];
    sl->h = h;
    sl->key = (uint32_t)c->arena.len;
    sl->len = (uint32_t)n;
    sl->ids = (uint32_t)c->idarena.len;
    sl->n = (uint32_t)(out->len - before);
    tfm_buf_append(&c->arena, s, n);
    tfm_ids_append(&c->idarena, out->data + before, out->len - before);
    c->used++;
}

/* ---- the kind's hooks ---- */

static void bpe_encode(const tfm_tokenizer *tok, void *scratch, const char *text,
                       size_t len, tfm_ids *out)
{
    const tfm_bpe *m = tok->impl;
    const unsigned char *s = (const unsigned char *)text;
    char *tmp = NULL;
    if (m->add_prefix_space && len > 0 && s[0] != ' ') {
        tmp = tfm_malloc(len + 1);
        tmp[0] = ' ';
        memcpy(tmp + 1, text, len);
        s = (const unsigned char *)tmp;
        len++;
    }
    size_t i = 0;
    while (i < len) {
        size_t j = m->split_digits ? tfm_llama3_pretok_next(s, len, i, m->split_digits)
                                   : tfm_gpt2_pretok_next(s, len, i);
        tfm_bpe_encode_word(m, scratch, s + i, j - i, out);
        i = j;
    }
    free(tmp);
}

static void bpe_decode(const tfm_tokenizer *tok, const uint32_t *ids, size_t n, tfm_buf *out)
{
    const tfm_bpe *m = tok->impl;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id < m->n_vocab && m->bytes[id] && !tfm_tok_is_added(tok, id))
            tfm_buf_append(out, m->bytes[id], m->bytes_len[id]);
        else
            tfm_buf_append(out, tok->pieces[id], tok->piece_lens[id]);
    }
}

static void bpe_to_json(const tfm_tokenizer *tok, tfm_buf *out)
{
    const tfm_bpe *m = tok->impl;
    const char *bl = m->add_prefix_space ? "true" : "false";
    tfm_tok_normalizer_to_json(tok, out);
    if (m->split_digits) {
        const char *rx = m->split_digits == 3 ? tfm_pretok_llama3_regex : tfm_pretok_qwen2_regex;
        tfm_buf_puts(out, "  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": "
                          "[{\"type\": \"Split\", \"pattern\": {\"Regex\": ");
        tfm_buf_put_json_string(out, rx, strlen(rx));
        tfm_buf_puts(out, "}, \"behavior\": \"Isolated\", \"invert\": false}, {\"type\": "
                          "\"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
                          "\"use_regex\": false}]},\n");
    } else {
        tfm_buf_printf(out, "  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": "
                            "%s, \"trim_offsets\": true, \"use_regex\": true},\n", bl);
    }
    tfm_buf_puts(out, "  \"post_processor\": ");
    if (!tfm_tok_prefix_to_json(tok, out))
        tfm_buf_puts(out, "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                          "\"trim_offsets\": false, \"use_regex\": true}");
    tfm_buf_puts(out, ",\n");
    tfm_buf_puts(out, "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, "
                      "\"trim_offsets\": true, \"use_regex\": true},\n");
    tfm_buf_puts(out, "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n"
                      "    \"unk_token\": null,\n    \"continuing_subword_prefix\": null,\n"
                      "    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n"
                      "    \"byte_fallback\": false,\n");
    /* only when set: older readers reject the field */
    if (m->ignore_merges)
        tfm_buf_puts(out, "    \"ignore_merges\": true,\n");
    tfm_buf_puts(out, "    \"vocab\": {");
    int first = 1;
    for (uint32_t id = 0; id < m->n_vocab; id++) {
        if (!m->in_vocab[id])
            continue;
        tfm_buf_puts(out, first ? "\n      " : ",\n      ");
        first = 0;
        tfm_buf_put_json_string(out, tok->pieces[id], tok->piece_lens[id]);
        tfm_buf_printf(out, ": %u", id);
    }
    tfm_buf_puts(out, "\n    },\n    \"merges\": [");
    tfm_buf pair = {0};
    for (size_t r = 0; r < m->n_merges; r++) {
        const tfm_bpe_merge *g = &m->merges[r];
        tfm_buf_clear(&pair);
        tfm_buf_append(&pair, tok->pieces[g->left], tok->piece_lens[g->left]);
        tfm_buf_putc(&pair, ' ');
        tfm_buf_append(&pair, tok->pieces[g->right], tok->piece_lens[g->right]);
        tfm_buf_puts(out, r ? ",\n      " : "\n      ");
        tfm_buf_put_json_string(out, pair.data, pair.len);
    }
    tfm_buf_free(&pair);
    tfm_buf_puts(out, m->n_merges ? "\n    ]\n  }" : "]\n  }");
}

static void *bpe_scratch_new(const tfm_tokenizer *tok)
{
    return tfm_bpe_cache_new();
}

static void bpe_scratch_free(void *s)
{
    tfm_bpe_cache_free(s);
}

const tfm_tok_ops tfm_bpe_ops = {
    .encode = bpe_encode,
    .decode = bpe_decode,
    .to_json = bpe_to_json,
    .scratch_new = bpe_scratch_new,
    .scratch_free = bpe_scratch_free,
    .free = bpe_free,
};

/* ---- loading ---- */

/* Resolves merge "a b" to ids; err names `where` (file:line or line:col). */
static int merge_resolve(tfm_tokenizer *tok, const char *a, size_t la, const char *b,
                         size_t lb, tfm_bpe_merge *g, tfm_buf *tmp, tfm_err *err)
{
    int64_t ia = tfm_tokenizer_token_id(tok, a, la);
    int64_t ib = tfm_tokenizer_token_id(tok, b, lb);
    tfm_buf_clear(tmp);
    tfm_buf_append(tmp, a, la);
    tfm_buf_append(tmp, b, lb);
    int64_t im = tfm_tokenizer_token_id(tok, tmp->data, tmp->len);
    if (ia < 0 || ib < 0 || im < 0) {
        const char *what = ia < 0 ? a : ib < 0 ? b : tfm_buf_cstr(tmp);
        int wl = (int)(ia < 0 ? la : ib < 0 ? lb : tmp->len);
        return tfm_err_set(err, "merge token '%.*s' is not in the vocabulary", wl, what);
    }
    g->left = (uint32_t)ia;
    g->right = (uint32_t)ib;
    g->merged = (uint32_t)im;
    return 0;
}

/* Splits "a b" at its one space. */
static int split_merge(const char *s, size_t n, size_t *sp)
{
    const char *p = memchr(s, ' ', n);
    if (!p || p == s || p == s + n - 1 || memchr(p + 1, ' ', n - (size_t)(p - s) - 1))
        return -1;
    *sp = (size_t)(p - s);
    return 0;
}

static int vocab_from_json(tfm_tokenizer *tok, const tfm_json_doc *doc, const tfm_json *v,
                           tfm_err *err)
{
    if (tfm_json_expect(doc, v, TFM_JSON_OBJECT, "vocab", err))
        return -1;
    for (size_t i = 0; i < v->n; i++) {
        int64_t id;
        if (tfm_json_get_int(doc, v->items[i], "token id", 0, TFM_TOK_MAX_ID, &id, err))
            return -1;
        if (tfm_tok_vocab_set(tok, (uint32_t)id, v->keys[i]->str, v->keys[i]->len, NULL, err))
            return tfm_err_prefix(err, "%s:%ld:%ld", doc->name, v->keys[i]->line,
                                  v->keys[i]->col);
    }
    return 0;
}

static int str_is(const tfm_json *x, const char *s)
{
    return x && x->type == TFM_JSON_STRING && strcmp(x->str, s) == 0;
}

int tfm_bpe_split_pre_tokenizer(const tfm_json_doc *doc, const tfm_json *pre, int *digits,
                                tfm_err *err)
{
    *digits = 0;
    const tfm_json *list = tfm_json_get(pre, "pretokenizers");
    if (!str_is(tfm_json_get(pre, "type"), "Sequence") || !list || list->type != TFM_JSON_ARRAY ||
        list->n != 2 || !str_is(tfm_json_get(list->items[0], "type"), "Split") ||
        !str_is(tfm_json_get(list->items[1], "type"), "ByteLevel"))
        return 0;
    const tfm_json *sp = list->items[0], *bl = list->items[1], *x;
    const tfm_json *rx = tfm_json_get(tfm_json_get(sp, "pattern"), "Regex");
    if (!rx || rx->type != TFM_JSON_STRING) {
        const tfm_json *at = tfm_json_get(sp, "pattern") ? tfm_json_get(sp, "pattern") : sp;
        return tfm_err_at(err, doc->name, at->line, at->col, "pre_tokenizer Split: expected "
                          "{\"Regex\": PATTERN} (Llama 3's or Qwen2's)");
    }
    if (!strcmp(rx->str, tfm_pretok_llama3_regex))
        *digits = 3;
    else if (!strcmp(rx->str, tfm_pretok_qwen2_regex))
        *digits = 1;
    else
        return tfm_err_at(err, doc->name, rx->line, rx->col, "pre_tokenizer Split: the regex "
                          "'%s' is not one tfm reads (Llama 3's or Qwen2's, exactly)", rx->str);
    if ((x = tfm_json_get(sp, "behavior")) && !str_is(x, "Isolated"))
        return tfm_err_at(err, doc->name, x->line, x->col, "pre_tokenizer Split: behavior "
                          "must be Isolated (as Llama 3's and Qwen2's)");
    if ((x = tfm_json_get(sp, "invert")) && x->type == TFM_JSON_BOOL && x->boolean)
        return tfm_err_at(err, doc->name, x->line, x->col, "pre_tokenizer Split: invert true "
                          "is not supported");
    if ((x = tfm_json_get(bl, "use_regex")) && !(x->type == TFM_JSON_BOOL && !x->boolean))
        return tfm_err_at(err, doc->name, x->line, x->col, "pre_tokenizer ByteLevel after "
                          "Split: use_regex must be false (the Split has split the text)");
    if ((x = tfm_json_get(bl, "add_prefix_space")) && x->type == TFM_JSON_BOOL && x->boolean)
        return tfm_err_at(err, doc->name, x->line, x->col, "pre_tokenizer ByteLevel after "
                          "Split: add_prefix_space true is not supported (HF puts a space "
                          "before every piece)");
    return 1;
}

int tfm_bpe_from_json(tfm_tokenizer *tok, const tfm_json_doc *doc, const tfm_json *root,
                      tfm_err *err)
{
    const tfm_json *model = tfm_json_get(root, "model");
    const tfm_json *pre = tfm_tok_pre_tokenizer(root);
    if (tfm_tok_normalizer_from_json(tok, doc, root, err))
        return -1;
    int aps = 0, digits = 0;
    if (tfm_bpe_split_pre_tokenizer(doc, pre, &digits, err) < 0)
        return -1;
    if (digits)
        pre = NULL; /* ByteLevel's settings checked there */
    const tfm_json *x;
    if ((x = tfm_json_get(pre, "add_prefix_space")) && x->type == TFM_JSON_BOOL)
        aps = x->boolean;
    if ((x = tfm_json_get(pre, "use_regex")) && x->type == TFM_JSON_BOOL && !x->boolean)
        return tfm_err_at(err, doc->name, x->line, x->col,
                          "ByteLevel use_regex false is not supported");
    static const char *const unsupported[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (size_t i = 0; i < 2; i++)
        if ((x = tfm_json_get(model, unsupported[i])) && x->type != TFM_JSON_NULL &&
            !(x->type == TFM_JSON_STRING && x->len == 0))
            return tfm_err_at(err, doc->name, x->line, x->col, "%s is not supported",
                              unsupported[i]);
    const tfm_json *vocab = tfm_json_get(model, "vocab");
    if (!vocab)
        return tfm_err_at(err, doc->name, model->line, model->col, "model has no \"vocab\"");
    if (vocab_from_json(tok, doc, vocab, err))
        return -1;
    const tfm_json *merges = tfm_json_get(model, "merges");
    size_t n = 0;
    tfm_bpe_merge *mg = NULL;
    if (merges) {
        if (tfm_json_expect(doc, merges, TFM_JSON_ARRAY, "merges", err))
            return -1;
        mg = tfm_malloc((merges->n + 1) * sizeof *mg);
        tfm_buf tmp = {0};
        for (size_t i = 0; i < merges->n; i++) {
            const tfm_json *e = merges->items[i];
            int bad;
            if (e->type == TFM_JSON_STRING) {
                size_t sp;
                bad = split_merge(e->str, e->len, &sp);
                if (bad)
                    tfm_err_set(err, "merge must be \"a b\"");
                else
                    bad = merge_resolve(tok, e->str, sp, e->str + sp + 1, e->len - sp - 1,
                                        &mg[n], &tmp, err);
            } else if (e->type == TFM_JSON_ARRAY && e->n == 2 &&
                       e->items[0]->type == TFM_JSON_STRING &&
                       e->items[1]->type == TFM_JSON_STRING) {
                bad = merge_resolve(tok, e->items[0]->str, e->items[0]->len, e->items[1]->str,
                                    e->items[1]->len, &mg[n], &tmp, err);
            } else {
                bad = tfm_err_set(err, "merge must be \"a b\" or [\"a\", \"b\"]");
            }
            if (bad) {
                tfm_buf_free(&tmp);
                free(mg);
                return tfm_err_prefix(err, "%s:%ld:%ld", doc->name, e->line, e->col);
            }
            n++;
        }
        tfm_buf_free(&tmp);
    }
    tfm_bpe *m = bpe_model_build(tok, mg, n);
    m->add_prefix_space = aps;
    m->split_digits = digits;
    if ((x = tfm_json_get(model, "ignore_merges")) && x->type == TFM_JSON_BOOL)
        m->ignore_merges = x->boolean;
    tok->impl = m;
    return 0;
}

int tfm_bpe_from_gpt2_files(tfm_tokenizer *tok, const char *vocab_path,
                            const char *merges_path, tfm_err *err)
{
    tfm_json_doc doc;
    if (tfm_json_parse_file(&doc, vocab_path, 0, err))
        return -1;
    int rc = vocab_from_json(tok, &doc, doc.root, err);
    tfm_json_doc_free(&doc);
    if (rc)
        return -1;
    tfm_map map;
    if (tfm_map_open(&map, merges_path, err))
        return -1;
    const char *s = (const char *)map.data, *end = s + map.size;
    size_t cap = 1024, n = 0;
    tfm_bpe_merge *mg = tfm_malloc(cap * sizeof *mg);
    tfm_buf tmp = {0};
    long line = 0;
    rc = 0;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *e = nl ? nl : end;
        line++;
        size_t len = (size_t)(e - s);
        if (len && s[len - 1] == '\r')
            len--;
        if (len > 0 && !(line == 1 && s[0] == '#')) {
            size_t sp;
            if (n == cap)
                mg = tfm_realloc(mg, (cap *= 2) * sizeof *mg);
            if (split_merge(s, len, &sp)) {
                rc = tfm_err_at(err, merges_path, line, 0, "expected two tokens separated by a space");
                break;
            }
            if (merge_resolve(tok, s, sp, s + sp + 1, len - sp - 1, &mg[n], &tmp, err)) {
                rc = tfm_err_prefix(err, "%s:%ld", merges_path, line);
                break;
            }
            n++;
        }
        s = nl ? nl + 1 : end;
    }
    tfm_buf_free(&tmp);
    tfm_map_close(&map);
    if (rc) {
        free(mg);
        return -1;
    }
    tok->impl = bpe_model_build(tok, mg, n);
    return 0;
}

void tfm_bpe_attach(tfm_tokenizer *tok, tfm_bpe_merge *merges, size_t n)
{
    tok->impl = bpe_model_build(tok, merges, n);
}
