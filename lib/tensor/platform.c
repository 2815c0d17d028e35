/* The platform under the products: which of BLIS's kernels run on this CPU,
 * and how BLIS's threads wait for each other (tensor/blis_internal.h). */
#include "config.h"

#include "tensor/blis_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <dlfcn.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#endif

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
        const char *v = bli_info_get_version_str();
        k = v && strncmp(v, "0.9", 3) == 0;
        __atomic_store_n(&known, k, __ATOMIC_RELAXED);
    }
    return k;
}

/* BLIS 0.9 waits at its thread barriers by spinning on a flag, with no
 * pause, yield or sleep: when a thread it waits for cannot run (more threads
 * than free cores: another job on the same cores, taskset, a CPU quota) the
 * waiter burns its whole time slice, and products take 30 times as long.
 * BLIS exports the barrier and calls it through the PLT, so this definition
 * replaces it in our programs: the same sense-reversing protocol on the same
 * fields, spinning only as long as barriers take on an idle machine and then
 * sleeping on a futex.  The spin budget adapts per thread: it halves each time
 * a wait has to sleep (shared cores) and doubles back when waits end within
 * it (idle cores), so on idle cores waits end spinning, as in BLIS.  Weak, so
 * that a static libblis.a keeps its own; another BLIS version (other
 * fields) gets its own barrier back through RTLD_NEXT. */
#if defined(__linux__) && (defined(BLIS_ENABLE_OPENMP) || defined(BLIS_ENABLE_PTHREADS)) && \
    !defined(BLIS_TREE_BARRIER) && !defined(BLIS_USE_PTHREAD_BARRIER)
enum { SPIN_MAX = 4096, SPIN_MIN = 16 }; /* pauses: ~120 µs and ~0.5 µs at ~30 ns */

static int sleepers; /* threads asleep in any barrier: wakes are needed */
static __thread int spin_budget = SPIN_MAX;

static int *sense_word(thrcomm_t *comm)
{
    /* the flag is 0 or 1 in a 64-bit integer: futexes take its low half */
    int *w = (int *)&comm->barrier_sense;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w += sizeof comm->barrier_sense / sizeof(int) - 1;
#endif
    return w;
}

__attribute__((weak)) void bli_thrcomm_barrier(dim_t t_id, thrcomm_t *comm)
{
    if (!comm || comm->n_threads == 1)
        return;
    if (!tfm_blis_known()) {
        static void *next;
        void *f = __atomic_load_n(&next, __ATOMIC_ACQUIRE);
        if (!f) {
            f = dlsym(RTLD_NEXT, "bli_thrcomm_barrier");
            __atomic_store_n(&next, f, __ATOMIC_RELEASE);
        }
        if (f && f != (void *)bli_thrcomm_barrier)
            ((void (*)(dim_t, thrcomm_t *))f)(t_id, comm);
        return;
    }
    gint_t sense = __atomic_load_n(&comm->barrier_sense, __ATOMIC_RELAXED);
    dim_t arrived = __atomic_add_fetch(&comm->barrier_threads_arrived, 1, __ATOMIC_ACQ_REL);
    if (arrived == comm->n_threads) {
        comm->barrier_threads_arrived = 0;
        __atomic_fetch_xor(&comm->barrier_sense, 1, __ATOMIC_SEQ_CST);
        /* seq_cst on both sides: either a sleeper's futex sees the new
         * sense, or this load sees the sleeper */
        if (__atomic_load_n(&sleepers, __ATOMIC_SEQ_CST))
            syscall(SYS_futex, sense_word(comm), FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
        return;
    }
    int budget = spin_budget;
    for (int i = 0; i < budget; i++) {
        if (__atomic_load_n(&comm->barrier_sense, __ATOMIC_ACQUIRE) != sense) {
            if (budget < SPIN_MAX)
                spin_budget = budget * 2;
            return;
        }
        tfm_spin_pause();
    }
    if (budget > SPIN_MIN)
        spin_budget = budget / 2;
    /* the timeout only bounds the cost of a missed wake */
    struct timespec ts = {0, 10 * 1000 * 1000};
    __atomic_add_fetch(&sleepers, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&comm->barrier_sense, __ATOMIC_ACQUIRE) == sense)
        syscall(SYS_futex, sense_word(comm), FUTEX_WAIT_PRIVATE, (int)sense, &ts, NULL, 0);
    __atomic_sub_fetch(&sleepers, 1, __ATOMIC_SEQ_CST);
}
#endif
