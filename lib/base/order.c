#include "config.h"

#include "base/order.h"

#include <stdlib.h>

#include "base/err.h"

typedef struct keyed {
    size_t key, index;
} keyed;

static int by_key(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

void tfm_order_by_key(size_t *order, size_t n, size_t (*key)(const void *ctx, size_t i),
                      const void *ctx)
{
    if (n == 0)
        return;
    keyed *k = tfm_malloc(n * sizeof *k);
    for (size_t i = 0; i < n; i++)
        k[i] = (keyed){key(ctx, i), i};
    qsort(k, n, sizeof *k, by_key);
    for (size_t i = 0; i < n; i++)
        order[i] = k[i].index;
    free(k);
}
