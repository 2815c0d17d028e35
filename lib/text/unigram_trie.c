/* Byte tries: built in a hash table, compiled to a double array (see
 * unigram_trie.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "text/unigram_trie.h"


static uint64_t mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    return k ^ (k >> 29);
}

void tfm_uni_trie_init(tfm_uni_trie *t)
{
    memset(t, 0, sizeof *t);
    t->cap_nodes = 64;
    t->value = tfm_malloc(t->cap_nodes * sizeof *t->value);
    t->value[0] = -1;
    t->n_nodes = 1;
}

void tfm_uni_trie_free(tfm_uni_trie *t)
{
    free(t->keys);
    free(t->child);
    free(t->value);
}

/* The child of node by byte b, or UINT32_MAX. */
static inline uint32_t tfm_uni_trie_step(const tfm_uni_trie *t, uint32_t node, unsigned char b)
{
    if (!t->cap)
        return UINT32_MAX;
    uint64_t k = ((uint64_t)node << 8 | b) + 1;
    size_t h = mix(k) & (t->cap - 1);
    for (;;) {
        if (t->keys[h] == k)
            return t->child[h];
        if (!t->keys[h])
            return UINT32_MAX;
        h = (h + 1) & (t->cap - 1);
    }
}

static void tfm_uni_trie_put(tfm_uni_trie *t, uint64_t k, uint32_t child)
{
    size_t h = mix(k) & (t->cap - 1);
    while (t->keys[h])
        h = (h + 1) & (t->cap - 1);
    t->keys[h] = k;
    t->child[h] = child;
    t->used++;
}

static uint32_t tfm_uni_trie_child(tfm_uni_trie *t, uint32_t node, unsigned char b)
{
    uint32_t c = tfm_uni_trie_step(t, node, b);
    if (c != UINT32_MAX)
        return c;
    if ((t->used + 1) * 2 > t->cap) {
        size_t ocap = t->cap;
        uint64_t *ok = t->keys;
        uint32_t *oc = t->child;
        t->cap = ocap ? ocap * 2 : 1024;
        t->keys = tfm_calloc(t->cap, sizeof *t->keys);
        t->child = tfm_malloc(t->cap * sizeof *t->child);
        t->used = 0;
        for (size_t i = 0; i < ocap; i++)
            if (ok[i])
                tfm_uni_trie_put(t, ok[i], oc[i]);
        free(ok);
        free(oc);
    }
    if (t->n_nodes == t->cap_nodes) {
        t->cap_nodes *= 2;
        t->value = tfm_realloc(t->value, t->cap_nodes * sizeof *t->value);
    }
    c = t->n_nodes++;
    t->value[c] = -1;
    tfm_uni_trie_put(t, ((uint64_t)node << 8 | b) + 1, c);
    return c;
}

/* The node of s[0..n), created on the way. */
uint32_t tfm_uni_trie_insert(tfm_uni_trie *t, const char *s, size_t n)
{
    uint32_t node = 0;
    for (size_t i = 0; i < n; i++)
        node = tfm_uni_trie_child(t, node, (unsigned char)s[i]);
    return node;
}

typedef struct tedge {
    uint64_t key; /* node << 8 | byte */
    uint32_t child;
} tedge;

/* next_free[i]: the first free unit >= i (union-find, path halving). */
static size_t tfm_uni_dt_free_find(size_t *nf, size_t i)
{
    while (nf[i] != i) {
        nf[i] = nf[nf[i]];
        i = nf[i];
    }
    return i;
}

int tfm_uni_dt_build(tfm_uni_dtrie *d, const tfm_uni_trie *t)
{
    size_t ne = t->used;
    /* the edges by node (a counting sort), then by byte within a node
     * (an insertion sort of its few children) */
    size_t *first = tfm_calloc((size_t)t->n_nodes + 1, sizeof *first);
    for (size_t i = 0; i < t->cap; i++)
        if (t->keys[i])
            first[((t->keys[i] - 1) >> 8) + 1]++;
    for (uint32_t i = 0; i < t->n_nodes; i++)
        first[i + 1] += first[i];
    tedge *e = tfm_malloc((ne + 1) * sizeof *e);
    size_t *fill = tfm_malloc(((size_t)t->n_nodes + 1) * sizeof *fill);
    memcpy(fill, first, ((size_t)t->n_nodes + 1) * sizeof *fill);
    for (size_t i = 0; i < t->cap; i++)
        if (t->keys[i])
            e[fill[(t->keys[i] - 1) >> 8]++] = (tedge){t->keys[i] - 1, t->child[i]};
    free(fill);
    for (uint32_t node = 0; node < t->n_nodes; node++)
        for (size_t j = first[node] + 1; j < first[node + 1]; j++) {
            tedge x = e[j];
            size_t k = j;
            for (; k > first[node] && e[k - 1].key > x.key; k--)
                e[k] = e[k - 1];
            e[k] = x;
        }
    /* units: grown as needed; nf over the same range plus one sentinel */
    size_t cap = 2 * (size_t)t->n_nodes + 512;
    uint8_t *used = tfm_calloc(cap, 1); /* 1: a unit, 2: a base, 3: both */
    size_t *nf = tfm_malloc((cap + 1) * sizeof *nf);
    for (size_t i = 0; i <= cap; i++)
        nf[i] = i;
    int32_t *base = tfm_calloc(t->n_nodes, sizeof *base);
    uint32_t *at = tfm_malloc((size_t)t->n_nodes * sizeof *at); /* node -> unit */
    /* holes before frontier are no longer tried: a search that failed on
     * many of them moves it past them, which keeps building linear */
    size_t top = 0, frontier = 1;
    int rc = 0;
    at[0] = 0;
    used[0] = 1;
    nf[0] = 1;
    /* nodes in the order they were made, parents before children: the
     * edges are read in order */
    for (uint32_t node = 0; node < t->n_nodes; node++) {
        size_t a = first[node], b = first[node + 1];
        if (a == b)
            continue;
        unsigned c0 = (unsigned)(e[a].key & 0xff);
        size_t f = tfm_uni_dt_free_find(nf, frontier > c0 + 1 ? frontier : c0 + 1), bs, tries = 0;
        for (;; f = tfm_uni_dt_free_find(nf, f + 1)) {
            bs = f - c0;
            if (bs + 256 >= cap) { /* grow: room for any base + byte */
                size_t nc = 2 * cap;
                if (nc > 2 * (size_t)TFM_UNI_DT_MAX_BASE + 1024) {
                    bs = SIZE_MAX;
                    break;
                }
                used = tfm_realloc(used, nc);
                memset(used + cap, 0, nc - cap);
                nf = tfm_realloc(nf, (nc + 1) * sizeof *nf);
                for (size_t i = cap + 1; i <= nc; i++)
                    nf[i] = i;
                cap = nc;
            }
            size_t j = a + 1;
            if (!(used[bs] & 2))
                while (j < b && !(used[bs + (e[j].key & 0xff)] & 1))
                    j++;
            if (j == b && !(used[bs] & 2))
                break;
            if (++tries == 32)
                frontier = f;
        }
        if (bs == SIZE_MAX || bs > TFM_UNI_DT_MAX_BASE) {
            rc = -1; /* too large */
            break;
        }
        base[node] = (int32_t)bs;
        used[bs] |= 2;
        for (size_t j = a; j < b; j++) {
            size_t c = bs + (e[j].key & 0xff);
            used[c] |= 1;
            nf[c] = c + 1;
            at[e[j].child] = (uint32_t)c;
            if (c > top)
                top = c;
        }
    }
    d->n = rc ? 257 : top + 257;
    d->u = tfm_malloc(d->n * sizeof *d->u);
    for (size_t i = 0; i < d->n; i++)
        d->u[i] = (tfm_uni_dunit){TFM_UNI_DT_FREE, -1};
    /* the root keeps the free label: a leaf's step by byte 0 lands on it */
    for (uint32_t node = 0; node < t->n_nodes && !rc; node++) {
        tfm_uni_dunit *x = &d->u[at[node]];
        x->bl = (uint32_t)base[node] << 9 | (x->bl & 0x1ff);
        x->value = t->value[node];
        for (size_t j = first[node]; j < first[node + 1]; j++) {
            tfm_uni_dunit *y = &d->u[at[e[j].child]];
            y->bl = (y->bl & ~0x1ffu) | (uint32_t)(e[j].key & 0xff);
        }
    }
    free(e);
    free(first);
    free(used);
    free(nf);
    free(base);
    free(at);
    return rc;
}

