/* The byte tries of text/unigram.c and the Unigram trainer (internal to
 * lib/text): a trie grown in a hash table of transitions while pieces are
 * added, then compiled to a double array that lookups walk.
 *
 *   tfm_uni_trie t;  tfm_uni_trie_init(&t);
 *   node = tfm_uni_trie_insert(&t, piece, len); t.value[node] = id;
 *   (in two statements: inserting may move t.value)
 *   tfm_uni_dtrie d;  tfm_uni_dt_build(&d, &t);
 *   for (s = 0; s >= 0 && i < n; i++) s = tfm_uni_dt_step(&d, s, b[i]), then
 *   d.u[s].value is the piece id of b[0..i] or -1.
 * Ownership: each frees what it holds (tfm_uni_trie_free, free(d.u)). */
#ifndef TFM_TEXT_UNIGRAM_TRIE_H
#define TFM_TEXT_UNIGRAM_TRIE_H

#include <stddef.h>
#include <stdint.h>

typedef struct tfm_uni_trie {
    uint64_t *keys; /* (node << 8 | byte) + 1; 0: empty slot */
    uint32_t *child;
    size_t cap, used;
    int32_t *value; /* per node: piece id, or -1 */
    uint32_t n_nodes, cap_nodes;
} tfm_uni_trie;

void tfm_uni_trie_init(tfm_uni_trie *t);
void tfm_uni_trie_free(tfm_uni_trie *t);
/* The node of s[0..n), created on the way (its value -1 if new). */
uint32_t tfm_uni_trie_insert(tfm_uni_trie *t, const char *s, size_t n);

/* ---- the same trie compiled to a double array, for lookups ----
 *
 * Node i's child by byte b is unit base_i + b if that unit's label is b;
 * no two nodes share a base, so the label alone tells the parent.  The
 * root is unit 0, a leaf's base 0 (no unit below 256 has a parent of base
 * 0).  A step reads one 8-byte unit, holding the node's piece too, where
 * the hash table read two arrays at a hashed place. */

#define TFM_UNI_DT_MAX_BASE ((1u << 23) - 1)
#define TFM_UNI_DT_FREE 0x100u /* the label of a free unit: matches no byte */

typedef struct tfm_uni_dunit {
    uint32_t bl;   /* base << 9 | label */
    int32_t value; /* piece id, or -1 */
} tfm_uni_dunit;

typedef struct tfm_uni_dtrie {
    tfm_uni_dunit *u;
    size_t n; /* base + 255 < n for every unit */
} tfm_uni_dtrie;

/* The unit of the child of unit s by byte b, or -1. */
static inline int32_t tfm_uni_dt_step(const tfm_uni_dtrie *d, int32_t s, unsigned char b)
{
    int32_t c = (int32_t)(d->u[s].bl >> 9) + b;
    return (d->u[c].bl & 0x1ff) == b ? c : -1;
}

/* Compiles t (its node values) into d (d->u malloc'd); fails (-1, d an
 * empty trie) past TFM_UNI_DT_MAX_BASE units. */
int tfm_uni_dt_build(tfm_uni_dtrie *d, const tfm_uni_trie *t);

#endif
