/* libFuzzer harness for the safetensors reader: any bytes must be rejected
 * with a message naming the input, or accepted with every tensor lying inside
 * the input, sized as its shape and dtype say; every byte of every tensor is
 * read so that AddressSanitizer sees any out-of-bounds view. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tfm_safetensors st;
    tfm_err e = {0};
    if (tfm_safetensors_parse(&st, data, size, "in", &e) < 0) {
        if (strncmp(e.msg, "in", 2) != 0)
            abort();
        return 0;
    }
    size_t total = 0;
    unsigned sum = 0;
    for (size_t i = 0; i < st.n_tensors; i++) {
        const tfm_st_tensor *t = &st.tensors[i];
        size_t count = 1;
        for (int d = 0; d < t->ndim; d++)
            count *= t->shape[d];
        if (count != t->count || t->nbytes != count * tfm_st_dtype_size(t->dtype))
            abort();
        if ((uintptr_t)t->data % tfm_st_dtype_size(t->dtype))
            abort();
        if (tfm_safetensors_find(&st, t->name) == NULL)
            abort();
        const uint8_t *p = t->data;
        for (size_t k = 0; k < t->nbytes; k++)
            sum += p[k];
        total += t->nbytes;
    }
    if (total > size)
        abort();
    for (size_t i = 0; i < st.n_meta; i++)
        if (tfm_safetensors_meta(&st, st.meta[i].key, NULL) == NULL)
            abort();
    tfm_safetensors_close(&st);
    return (int)(sum & 0);
}
