/* The platform under the products: which of BLIS's kernels run on this CPU,
 * and whether tensor/ knows this BLIS's internals (tensor/blis_internal.h).
 * BLIS's own thread barrier spins without yielding; rather than replacing
 * it, every product runs on only the CPUs other jobs leave free
 * (tfm_threads_now in gemm.c), so no thread waits for one without a CPU. */
#include "config.h"

#include "tensor/blis_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
/* AMD family 0x19 is Zen 3 and Zen 4; of these only Zen 4 has AVX-512, and
 * it runs each 512-bit operation as two 256-bit halves. */
static int amd_family_19h(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d) || b != 0x68747541u /* "Auth" */)
        return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return 0;
    unsigned family = (a >> 8) & 0xf;
    if (family == 0xf)
        family += (a >> 20) & 0xff;
    return family == 0x19;
}

/* BLIS reads BLIS_ARCH_TYPE once, at its own initialisation, so this must run
 * before any other BLIS call.  Debian's BLIS 0.9 does not recognise Zen 5 and
 * silently picks the generic reference kernels (~15% of peak); the numeric ids
 * are BLIS 0.9's arch_t values (0 = skx, 3 = haswell).  On Zen 4 the AVX2
 * kernels are the faster ones: as fast on large products (109 against 103
 * GFLOP/s on one core, 2048³) and 7% faster over a char-small training step,
 * whose small products waste less on the haswell kernel's smaller tiles. */
void tfm_blis_choose_arch(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && !amd_family_19h())
        setenv("BLIS_ARCH_TYPE", "0", 0);
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        setenv("BLIS_ARCH_TYPE", "3", 0);
}
#else
void tfm_blis_choose_arch(void)
{
    /* BLIS's own detection knows the other architectures it was built for */
}
#endif

int tfm_blis_known(void)
{
    static int known = -1; /* every thread computes the same answer */
    int k = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (k < 0) {
        /* the micro-kernel's interface, auxinfo and panel layout are the
         * same in 0.9 and 1.x; the queries that find it differ (TFM_BLIS_1) */
        const char *v = bli_info_get_version_str();
#ifdef TFM_BLIS_1
        k = v && strncmp(v, "1.", 2) == 0;
#else
        k = v && strncmp(v, "0.9", 3) == 0;
#endif
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k;
}

