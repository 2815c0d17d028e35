/* libFuzzer harness for the .npy reader: reject with a message naming the
 * input, or expose exactly count elements inside (or copied from) it. */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    tfm_npy a;
    tfm_err e = {0};
    if (tfm_npy_parse(&a, data, size, "in", &e) < 0) {
        if (strncmp(e.msg, "in", 2) != 0)
            abort();
        return 0;
    }
    size_t bytes = a.count * tfm_npy_dtype_size(a.dtype);
    if (bytes > size || (uintptr_t)a.data % tfm_npy_dtype_size(a.dtype))
        abort();
    unsigned sum = 0;
    for (size_t k = 0; k < bytes; k++)
        sum += ((const uint8_t *)a.data)[k];
    tfm_npy_close(&a);
    return (int)(sum & 0);
}
