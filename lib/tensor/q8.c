/* 8-bit block products; see q8.h. */
#include "config.h"

#include "tensor/q8.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TFM_Q8_X86 1
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "base/err.h"
#include "base/half.h"
#include "base/progress.h"
#include "tensor/gemm.h"

/* away: ties round away from zero (roundf), else to even (lrintf) */
static void quantize(int8_t *q, float *d, const float *x, int K, int away)
{
    for (int b = 0; b < K / TFM_Q8_BLOCK; b++) {
        const float *xb = x + (size_t)b * TFM_Q8_BLOCK;
        float amax = 0.0f;
        int nan = 0;
        for (int i = 0; i < TFM_Q8_BLOCK; i++) {
            amax = fmaxf(amax, fabsf(xb[i]));
            nan |= xb[i] != xb[i];
        }
        /* a NaN or infinite input gives a NaN or infinite scale (and values
         * 0), so that a product over it is not finite either, as in float */
        float s = nan ? NAN : amax / 127.0f, inv = s > 0.0f && isfinite(s) ? 1.0f / s : 0.0f;
        for (int i = 0; i < TFM_Q8_BLOCK; i++)
            q[(size_t)b * TFM_Q8_BLOCK + i] =
                !inv ? 0 : away ? (int8_t)roundf(xb[i] * inv) : (int8_t)lrintf(xb[i] * inv);
        d[b] = s;
    }
}

void tfm_q8_quantize(int8_t *q, float *d, const float *x, int K)
{
    quantize(q, d, x, K, 0);
}

void tfm_q8_quantize_ref(int8_t *q, float *d, const float *x, int K)
{
    quantize(q, d, x, K, 1);
}

void tfm_q8_dequantize(float *x, const int8_t *q, const float *d, int K)
{
    for (int i = 0; i < K; i++)
        x[i] = d[i / TFM_Q8_BLOCK] * (float)q[i];
}

void tfm_q8_row(float *x, const tfm_q8 *W, int j)
{
    const int nb = W->K / TFM_Q8_BLOCK;
    const int8_t *q = W->q + (size_t)j * W->K;
    for (int b = 0; b < nb; b++) {
        const float d = tfm_f16_to_f32(W->d[(size_t)j * nb + b]);
        for (int i = b * TFM_Q8_BLOCK; i < (b + 1) * TFM_Q8_BLOCK; i++)
            x[i] = d * (float)q[i];
    }
}

/* ---- half-precision scales to float32 (exact) ---- */

static void scales_portable(float *dst, const uint16_t *src, int m)
{
    for (int i = 0; i < m; i++)
        dst[i] = tfm_f16_to_f32(src[i]);
}

#ifdef TFM_Q8_X86
__attribute__((target("avx,f16c"))) static void scales_f16c(float *dst, const uint16_t *src,
                                                            int m)
{
    int i = 0;
    for (; i + 8 <= m; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    scales_portable(dst + i, src + i, m - i);
}
#endif

static void (*scales_f32)(float *dst, const uint16_t *src, int m) = scales_portable;

/* ---- the kernels: sums[b] = Σ w·x over block b ---- */

typedef void (*block_sums_fn)(int32_t *sums, const int8_t *w, const int8_t *x, int nb);

static void sums_scalar(int32_t *sums, const int8_t *w, const int8_t *x, int nb)
{
    for (int b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int i = 0; i < TFM_Q8_BLOCK; i++)
            s += (int32_t)w[b * TFM_Q8_BLOCK + i] * x[b * TFM_Q8_BLOCK + i];
        sums[b] = s;
    }
}

#ifdef TFM_Q8_X86
/* The x86 kernels multiply unsigned by signed bytes: |x| times w with x's
 * sign, which is w·x when both lie in -127..127 (the files' values are
 * checked for it on loading).  Eight blocks' eight-lane partial sums
 * become eight sums with one transposing reduction. */
__attribute__((target("avx2"))) static inline __m256i reduce8(__m256i p0, __m256i p1,
                                                             __m256i p2, __m256i p3,
                                                             __m256i p4, __m256i p5,
                                                             __m256i p6, __m256i p7)
{
    __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
    __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(p4, p5), _mm256_hadd_epi32(p6, p7));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

#define AVX2_BLOCK(k)                                                                      \
    __m256i p##k;                                                                          \
    {                                                                                      \
        __m256i xv = _mm256_loadu_si256((const __m256i *)(x + (b + k) * TFM_Q8_BLOCK));    \
        __m256i wv = _mm256_loadu_si256((const __m256i *)(w + (b + k) * TFM_Q8_BLOCK));    \
        p##k = DOT(_mm256_sign_epi8(xv, xv), _mm256_sign_epi8(wv, xv));                    \
    }

#define SUMS_256(NAME, TARGET)                                                             \
    __attribute__((target(TARGET))) static void NAME(int32_t *sums, const int8_t *w,       \
                                                     const int8_t *x, int nb)              \
    {                                                                                      \
        int b = 0;                                                                         \
        for (; b + 8 <= nb; b += 8) {                                                      \
            AVX2_BLOCK(0) AVX2_BLOCK(1) AVX2_BLOCK(2) AVX2_BLOCK(3)                        \
            AVX2_BLOCK(4) AVX2_BLOCK(5) AVX2_BLOCK(6) AVX2_BLOCK(7)                        \
            _mm256_storeu_si256((__m256i *)(sums + b),                                     \
                                reduce8(p0, p1, p2, p3, p4, p5, p6, p7));                  \
        }                                                                                  \
        sums_scalar(sums + b, w + (size_t)b * TFM_Q8_BLOCK, x + (size_t)b * TFM_Q8_BLOCK,   \
                    nb - b);                                                               \
    }

/* AVX2: u8·s8 pairs to 16 bits (|127·127·2| fits), then pairs to 32 */
#define DOT(a, s) _mm256_madd_epi16(_mm256_maddubs_epi16(a, s), _mm256_set1_epi16(1))
SUMS_256(sums_avx2, "avx2")
#undef DOT
/* AVX-VNNI: four u8·s8 products into each 32-bit lane in one instruction */
#define DOT(a, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), a, s)
SUMS_256(sums_avxvnni, "avx2,avxvnni")
#undef DOT

/* AVX-512 VNNI: two blocks per register; AVX-512 has no byte sign, so w
 * is negated where x is negative under a mask. */
#define V512_PAIR(k)                                                                       \
    __m512i r##k;                                                                          \
    {                                                                                      \
        __m512i xv = _mm512_loadu_si512(x + (b + 2 * k) * TFM_Q8_BLOCK);                   \
        __m512i wv = _mm512_loadu_si512(w + (b + 2 * k) * TFM_Q8_BLOCK);                   \
        __mmask64 neg = _mm512_movepi8_mask(xv);                                           \
        wv = _mm512_mask_sub_epi8(wv, neg, _mm512_setzero_si512(), wv);                    \
        r##k = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(xv), wv);       \
    }
#define LO(k) _mm512_castsi512_si256(r##k)
#define HI(k) _mm512_extracti64x4_epi64(r##k, 1)

__attribute__((target("avx512f,avx512bw,avx512vnni,avx2"))) static void
sums_avx512vnni(int32_t *sums, const int8_t *w, const int8_t *x, int nb)
{
    int b = 0;
    for (; b + 16 <= nb; b += 16) {
        V512_PAIR(0) V512_PAIR(1) V512_PAIR(2) V512_PAIR(3)
        V512_PAIR(4) V512_PAIR(5) V512_PAIR(6) V512_PAIR(7)
        _mm256_storeu_si256((__m256i *)(sums + b),
                            reduce8(LO(0), HI(0), LO(1), HI(1), LO(2), HI(2), LO(3), HI(3)));
        _mm256_storeu_si256((__m256i *)(sums + b + 8),
                            reduce8(LO(4), HI(4), LO(5), HI(5), LO(6), HI(6), LO(7), HI(7)));
    }
    sums_avx2(sums + b, w + (size_t)b * TFM_Q8_BLOCK, x + (size_t)b * TFM_Q8_BLOCK, nb - b);
}
#undef LO
#undef HI
#endif

static const struct {
    const char *name;
    block_sums_fn fn;
    const char *needs[3]; /* __builtin_cpu_supports features */
} kernels[] = {
    {"scalar", sums_scalar, {NULL}},
#ifdef TFM_Q8_X86
    {"avx2", sums_avx2, {"avx2"}},
    {"avxvnni", sums_avxvnni, {"avx2", "avxvnni"}},
    {"avx512vnni", sums_avx512vnni, {"avx512f", "avx512bw", "avx512vnni"}},
#endif
};
#define N_KERNELS ((int)(sizeof kernels / sizeof kernels[0]))

static int supported(int i)
{
#ifdef TFM_Q8_X86
    __builtin_cpu_init();
    for (int k = 0; k < 3 && kernels[i].needs[k]; k++) {
        const char *f = kernels[i].needs[k];
        /* __builtin_cpu_supports takes literals only */
        int ok = !strcmp(f, "avx2")         ? __builtin_cpu_supports("avx2")
                 : !strcmp(f, "avxvnni")    ? __builtin_cpu_supports("avxvnni")
                 : !strcmp(f, "avx512f")    ? __builtin_cpu_supports("avx512f")
                 : !strcmp(f, "avx512bw")   ? __builtin_cpu_supports("avx512bw")
                 : !strcmp(f, "avx512vnni") ? __builtin_cpu_supports("avx512vnni")
                                            : 0;
        if (!ok)
            return 0;
    }
#endif
    return 1;
}

int tfm_q8_kernel_count(void)
{
    return N_KERNELS;
}

const char *tfm_q8_kernel_name(int i, int *sup)
{
    TFM_ASSERT(i >= 0 && i < N_KERNELS);
    if (sup)
        *sup = supported(i);
    return kernels[i].name;
}

void tfm_q8_block_sums(int i, int32_t *sums, const int8_t *w, const int8_t *x, int nb)
{
    TFM_ASSERT(i >= 0 && i < N_KERNELS && supported(i));
    kernels[i].fn(sums, w, x, nb);
}

static int chosen = -1;
static pthread_once_t choose_once = PTHREAD_ONCE_INIT;

static double thread_cpu(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0)
        return tfm_now();
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Times every kernel the CPU runs on one row of a 768-wide matrix times
 * 256 rows (L2-resident: the arithmetic, not the memory, decides), by the
 * thread's CPU time (a preempted run does not count against a kernel),
 * fastest of five runs, interleaved; a kernel must beat the fastest of
 * those before it in the list by 3% to be chosen, so that noise alone
 * never decides.  About 1 ms, once. */
static void choose(void)
{
    enum { NB = 24, ROWS = 256 };
    int8_t *w = tfm_aligned_alloc((size_t)ROWS * NB * TFM_Q8_BLOCK);
    int8_t x[NB * TFM_Q8_BLOCK];
    int32_t sums[NB];
    uint32_t s = 12345;
    for (int i = 0; i < ROWS * NB * TFM_Q8_BLOCK; i++) {
        s = s * 1664525u + 1013904223u;
        w[i] = (int8_t)((int)(s >> 24) % 127);
    }
    memcpy(x, w, sizeof x);
    double best[N_KERNELS];
    for (int k = 0; k < N_KERNELS; k++)
        best[k] = supported(k) ? 1e300 : -1;
    for (int rep = 0; rep < 5; rep++)
        for (int k = 0; k < N_KERNELS; k++) {
            if (best[k] < 0)
                continue;
            double t0 = thread_cpu();
            for (int r = 0; r < ROWS; r++)
                kernels[k].fn(sums, w + (size_t)r * NB * TFM_Q8_BLOCK, x, NB);
            double t = thread_cpu() - t0;
            best[k] = t < best[k] ? t : best[k];
        }
    free(w);
#ifdef TFM_Q8_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c"))
        scales_f32 = scales_f16c;
#endif
    int pick = 0;
    for (int k = 1; k < N_KERNELS; k++)
        if (best[k] >= 0 && best[k] < 0.97 * best[pick])
            pick = k;
    __atomic_store_n(&chosen, pick, __ATOMIC_RELEASE);
}

int tfm_q8_kernel(void)
{
    pthread_once(&choose_once, choose);
    return __atomic_load_n(&chosen, __ATOMIC_ACQUIRE);
}

int tfm_q8_kernel_use(int i)
{
    if (i < 0 || i >= N_KERNELS || !supported(i))
        return -1;
    pthread_once(&choose_once, choose);
    __atomic_store_n(&chosen, i, __ATOMIC_RELEASE);
    return 0;
}

/* ---- the product ---- */

/* Below this many weights a second thread costs more than it brings. */
#define Q8_PAR_MIN (1 << 18)
/* blocks per kernel call: the sums stay on the stack (a multiple of 8:
 * each block's lane below is its index modulo 8) */
#define CHUNK 256

void tfm_q8_gemv(float *y, const int8_t *xq, const float *xd, const tfm_q8 *W,
                 const float *b, int n)
{
    const int N = W->N, K = W->K, nb = K / TFM_Q8_BLOCK;
    const int kernel = tfm_q8_kernel();
    const block_sums_fn fn = kernels[kernel].fn;
    /* the portable kernel widens scales portably too: the kernels' equal
     * results (q8_test) then cover F16C's widening */
    void (*const widen)(float *, const uint16_t *, int) = kernel ? scales_f32 : scales_portable;
    int nt = 1;
#ifdef _OPENMP
    if ((size_t)N * K >= Q8_PAR_MIN && !omp_in_parallel())
        nt = tfm_threads_now();
#endif
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int j = 0; j < N; j++) {
        int32_t sums[CHUNK];
        float dw[CHUNK];
        const int8_t *wj = W->q + (size_t)j * K;
        const uint16_t *dj = W->d + (size_t)j * nb;
        for (int r = 0; r < n; r++) {
            const int8_t *xr = xq + (size_t)r * K;
            const float *dr = xd + (size_t)r * nb;
            /* block k adds into lane k % 8 (one vector, no chain of
             * dependent adds), the lanes then in a fixed order: the same
             * whatever the kernel */
            float acc[8] = {0};
            for (int c0 = 0; c0 < nb; c0 += CHUNK) {
                int m = nb - c0 < CHUNK ? nb - c0 : CHUNK;
                fn(sums, wj + (size_t)c0 * TFM_Q8_BLOCK, xr + (size_t)c0 * TFM_Q8_BLOCK, m);
                widen(dw, dj + c0, m);
                const float *a = dw, *x = dr + c0;
                int k = 0;
                for (; k + 8 <= m; k += 8)
                    for (int l = 0; l < 8; l++)
                        acc[l] += a[k + l] * x[k + l] * (float)sums[k + l];
                for (; k < m; k++)
                    acc[k % 8] += a[k] * x[k] * (float)sums[k];
            }
            float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) +
                      ((acc[2] + acc[6]) + (acc[3] + acc[7]));
            y[(size_t)r * N + j] = b ? s + b[j] : s;
        }
    }
}
