/* Batching by length: the order in which to visit items so that items of
 * similar size go together (less padding, fewer idle decode steps), ties in
 * input order so that the result does not depend on the sort. */
#ifndef TFM_BASE_ORDER_H
#define TFM_BASE_ORDER_H

#include <stddef.h>

/* order[0..n) = the indices 0..n-1 sorted by key(ctx, i), ascending, equal
 * keys by index. */
void tfm_order_by_key(size_t *order, size_t n, size_t (*key)(const void *ctx, size_t i),
                      const void *ctx);

#endif
