/* 8-bit block products; see q8.h. */
#include "config.h"

#include "tensor/q8.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
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
         * 0), so that a product over it is not finite either, as in float;
         * a block so small (max |x| < 2^-121) that 1/d overflows, values 0 */
        float s = nan ? NAN : amax / 127.0f, inv = s > 0.0f && isfinite(s) ? 1.0f / s : 0.0f;
        inv = isfinite(inv) ? inv : 0.0f;
        for (int i = 0; i < TFM_Q8_BLOCK; i++)
            q[(size_t)b * TFM_Q8_BLOCK + i] =
                !inv ? 0 : away ? (int8_t)roundf(xb[i] * inv) : (int8_t)lrintf(xb[i] * inv);
        d[b] = s;
    }
}

#ifdef TFM_Q8_X86
/* quantize(.., 0) with AVX2: the same scale (max |x| is exact in any
 * order; NaN found apart), the same products x·(1/d), and vcvtps2dq
 * rounds them as lrintf does (to nearest, ties to even: the default
 * rounding mode); |x·(1/d)| <= 127 packs to bytes unchanged.  Whole-
 * sequence products quantize every row: scalar lrintf cost as much as
 * the product over a few hundred columns. */
__attribute__((target("avx2"))) static void quantize_avx2(int8_t *q, float *d, const float *x,
                                                          int K)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int b = 0; b < K / TFM_Q8_BLOCK; b++) {
        const float *xb = x + (size_t)b * TFM_Q8_BLOCK;
        __m256 v[4], m = _mm256_setzero_ps(), un = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
            un = _mm256_or_ps(un, _mm256_cmp_ps(v[i], v[i], _CMP_UNORD_Q));
        }
        float mm[8];
        _mm256_storeu_ps(mm, m);
        float amax = 0.0f;
        for (int i = 0; i < 8; i++)
            amax = fmaxf(amax, mm[i]);
        const int nan = _mm256_movemask_ps(un) != 0;
        float s = nan ? NAN : amax / 127.0f, inv = s > 0.0f && isfinite(s) ? 1.0f / s : 0.0f;
        inv = isfinite(inv) ? inv : 0.0f;
        d[b] = s;
        int8_t *qb = q + (size_t)b * TFM_Q8_BLOCK;
        if (!inv) {
            memset(qb, 0, TFM_Q8_BLOCK);
            continue;
        }
        const __m256 iv = _mm256_set1_ps(inv);
        __m256i n[4];
        for (int i = 0; i < 4; i++)
            n[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], iv));
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(n[0], n[1]),
                                             _mm256_packs_epi32(n[2], n[3]));
        _mm256_storeu_si256((__m256i *)qb, _mm256_permutevar8x32_epi32(p, order));
    }
}
#endif

void tfm_q8_quantize(int8_t *q, float *d, const float *x, int K)
{
#ifdef TFM_Q8_X86
    static int avx2 = -1;
    int a = __atomic_load_n(&avx2, __ATOMIC_RELAXED);
    if (a < 0) {
        __builtin_cpu_init();
        a = __builtin_cpu_supports("avx2") != 0;
        __atomic_store_n(&avx2, a, __ATOMIC_RELAXED);
    }
    if (a) {
        quantize_avx2(q, d, x, K);
        return;
    }
#endif
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

/* ---- the kernels: one row's product with one row of activations ----
 *
 * Every kernel computes, for blocks k = 0, 1, ... of the row,
 *     s_k = Σ_{i < 32} w[32k + i]·x[32k + i]        (exact, in 32 bits)
 *     acc[k % 8] = fma(d_w[k]·d_x[k], (float)s_k, acc[k % 8])
 * and returns ((acc0 + acc4) + (acc1 + acc5)) + ((acc2 + acc6) + (acc3 + acc7)):
 * the integer sums are exact, the float steps the same operations in the
 * same order, so all kernels agree to the bit (and fmaf rounds once, with
 * or without an FMA unit).  xs[k] = 128·Σ_i x[32k + i] serves the VNNI
 * kernels' unsigned weights (below). */

/* The weights are read once per product, a row after another: the
 * kernels ask for the bytes PREFETCH ahead of the ones they multiply
 * (GPT-2's 8-bit decode step on one thread read 10.5 GB/s without and
 * 12.9-13.6 with, against a plain read of the same bytes at 13.5;
 * scripts/bench/q8_bench). */
#define PREFETCH 2048
#define PF(p, lines)                                                                       \
    for (int l_ = 0; l_ < (lines); l_++)                                                   \
        _mm_prefetch((const char *)(p) + PREFETCH + 64 * l_, _MM_HINT_T0);
typedef float (*row_fn)(const int8_t *w, const uint16_t *dw, const int8_t *x, const float *dx,
                        const int32_t *xs, int nb);

static float lanes_sum(const float *acc)
{
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

/* blocks [k0, nb) into acc, portably (the vector kernels' last blocks) */
static void blocks_portable(float *acc, const int8_t *w, const uint16_t *dw, const int8_t *x,
                            const float *dx, int k0, int nb)
{
    for (int k = k0; k < nb; k++) {
        int32_t s = 0;
        for (int i = 0; i < TFM_Q8_BLOCK; i++)
            s += (int32_t)w[k * TFM_Q8_BLOCK + i] * x[k * TFM_Q8_BLOCK + i];
        acc[k % 8] = fmaf(tfm_f16_to_f32(dw[k]) * dx[k], (float)s, acc[k % 8]);
    }
}

static float row_scalar(const int8_t *w, const uint16_t *dw, const int8_t *x, const float *dx,
                        const int32_t *xs, int nb)
{
    (void)xs;
    float acc[8] = {0};
    blocks_portable(acc, w, dw, x, dx, 0, nb);
    return lanes_sum(acc);
}

#ifdef TFM_Q8_X86
/* Eight vectors of eight 32-bit lanes to their eight sums, in order. */
__attribute__((target("avx2"))) static inline __m256i reduce8(__m256i p0, __m256i p1,
                                                             __m256i p2, __m256i p3,
                                                             __m256i p4, __m256i p5,
                                                             __m256i p6, __m256i p7)
{
    __m256i a01 = _mm256_add_epi32(_mm256_unpacklo_epi32(p0, p1), _mm256_unpackhi_epi32(p0, p1));
    __m256i a23 = _mm256_add_epi32(_mm256_unpacklo_epi32(p2, p3), _mm256_unpackhi_epi32(p2, p3));
    __m256i a45 = _mm256_add_epi32(_mm256_unpacklo_epi32(p4, p5), _mm256_unpackhi_epi32(p4, p5));
    __m256i a67 = _mm256_add_epi32(_mm256_unpacklo_epi32(p6, p7), _mm256_unpackhi_epi32(p6, p7));
    /* per 128-bit half: the four-lane sums of p0..p3 (p4..p7) */
    __m256i b03 = _mm256_add_epi32(_mm256_unpacklo_epi64(a01, a23), _mm256_unpackhi_epi64(a01, a23));
    __m256i b47 = _mm256_add_epi32(_mm256_unpacklo_epi64(a45, a67), _mm256_unpackhi_epi64(a45, a67));
    return _mm256_add_epi32(_mm256_permute2x128_si256(b03, b47, 0x20),
                            _mm256_permute2x128_si256(b03, b47, 0x31));
}

/* blocks k..k+7's sums s (in order) into acc */
__attribute__((target("avx2,fma,f16c"))) static inline __m256 combine8(__m256 acc, __m256i s,
                                                                      const uint16_t *dw,
                                                                      const float *dx)
{
    __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dw)),
                             _mm256_loadu_ps(dx));
    return _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(s), acc);
}

/* the lanes of acc, then blocks [k, nb) portably, summed */
__attribute__((target("avx"))) static inline float finish8(__m256 acc, const int8_t *w,
                                                          const uint16_t *dw, const int8_t *x,
                                                          const float *dx, int k, int nb)
{
    float a[8];
    _mm256_storeu_ps(a, acc);
    blocks_portable(a, w, dw, x, dx, k, nb);
    return lanes_sum(a);
}

/* AVX2: |x| times w with x's sign (u8·s8 pairs to 16 bits: 2·127·127
 * fits), then pairs to 32 */
#define AVX2_BLOCK(j)                                                                      \
    __m256i p##j;                                                                          \
    {                                                                                      \
        __m256i xv = _mm256_loadu_si256((const __m256i *)(x + (k + j) * TFM_Q8_BLOCK));    \
        __m256i wv = _mm256_loadu_si256((const __m256i *)(w + (k + j) * TFM_Q8_BLOCK));    \
        p##j = _mm256_madd_epi16(                                                          \
            _mm256_maddubs_epi16(_mm256_sign_epi8(xv, xv), _mm256_sign_epi8(wv, xv)), ones); \
    }

__attribute__((target("avx2,fma,f16c"))) static float row_avx2(const int8_t *w,
                                                               const uint16_t *dw,
                                                               const int8_t *x, const float *dx,
                                                               const int32_t *xs, int nb)
{
    (void)xs;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= nb; k += 8) {
        PF(w + (size_t)k * TFM_Q8_BLOCK, 4)
        AVX2_BLOCK(0) AVX2_BLOCK(1) AVX2_BLOCK(2) AVX2_BLOCK(3)
        AVX2_BLOCK(4) AVX2_BLOCK(5) AVX2_BLOCK(6) AVX2_BLOCK(7)
        acc = combine8(acc, reduce8(p0, p1, p2, p3, p4, p5, p6, p7), dw + k, dx + k);
    }
    return finish8(acc, w, dw, x, dx, k, nb);
}
#undef AVX2_BLOCK

/* The VNNI kernels take the weights unsigned, w + 128 (w with its sign
 * bit flipped, 1..255), times the signed x: Σ (w + 128)·x - 128·Σ x is
 * Σ w·x, with x as stored and one instruction per weight vector. */
#define VNNI_BLOCK(j)                                                                      \
    __m256i p##j = _mm256_dpbusd_avx_epi32(                                                \
        _mm256_setzero_si256(),                                                            \
        _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + (k + j) * TFM_Q8_BLOCK)), \
                         flip),                                                            \
        _mm256_loadu_si256((const __m256i *)(x + (k + j) * TFM_Q8_BLOCK)));

__attribute__((target("avx2,fma,f16c,avxvnni"))) static float row_avxvnni(const int8_t *w,
                                                                         const uint16_t *dw,
                                                                         const int8_t *x,
                                                                         const float *dx,
                                                                         const int32_t *xs,
                                                                         int nb)
{
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m256 acc = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= nb; k += 8) {
        PF(w + (size_t)k * TFM_Q8_BLOCK, 4)
        VNNI_BLOCK(0) VNNI_BLOCK(1) VNNI_BLOCK(2) VNNI_BLOCK(3)
        VNNI_BLOCK(4) VNNI_BLOCK(5) VNNI_BLOCK(6) VNNI_BLOCK(7)
        __m256i s = _mm256_sub_epi32(reduce8(p0, p1, p2, p3, p4, p5, p6, p7),
                                     _mm256_loadu_si256((const __m256i *)(xs + k)));
        acc = combine8(acc, s, dw + k, dx + k);
    }
    return finish8(acc, w, dw, x, dx, k, nb);
}
#undef VNNI_BLOCK

/* AVX-512: two blocks per register, sixteen at a time. */
#define V512_PAIR(j)                                                                       \
    __m512i r##j = _mm512_dpbusd_epi32(                                                    \
        _mm512_setzero_si512(),                                                            \
        _mm512_xor_si512(_mm512_loadu_si512(w + (k + 2 * j) * TFM_Q8_BLOCK), flip),        \
        _mm512_loadu_si512(x + (k + 2 * j) * TFM_Q8_BLOCK));

#define T512 "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
/* r_j holds blocks 2j (lanes 0-7) and 2j + 1 (8-15): the sixteen sums in
 * block order */
__attribute__((target(T512))) static inline __m512i reduce16(__m512i r0, __m512i r1, __m512i r2,
                                                            __m512i r3, __m512i r4, __m512i r5,
                                                            __m512i r6, __m512i r7)
{
    __m512i a01 = _mm512_add_epi32(_mm512_unpacklo_epi32(r0, r1), _mm512_unpackhi_epi32(r0, r1));
    __m512i a23 = _mm512_add_epi32(_mm512_unpacklo_epi32(r2, r3), _mm512_unpackhi_epi32(r2, r3));
    __m512i a45 = _mm512_add_epi32(_mm512_unpacklo_epi32(r4, r5), _mm512_unpackhi_epi32(r4, r5));
    __m512i a67 = _mm512_add_epi32(_mm512_unpacklo_epi32(r6, r7), _mm512_unpackhi_epi32(r6, r7));
    /* 128-bit lane L: the four-lane sums of r0..r3 (r4..r7) over lane L */
    __m512i b03 = _mm512_add_epi32(_mm512_unpacklo_epi64(a01, a23), _mm512_unpackhi_epi64(a01, a23));
    __m512i b47 = _mm512_add_epi32(_mm512_unpacklo_epi64(a45, a67), _mm512_unpackhi_epi64(a45, a67));
    /* lanes 0 + 1 are the even blocks, 2 + 3 the odd ones */
    __m512i s = _mm512_add_epi32(_mm512_shuffle_i32x4(b03, b47, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_i32x4(b03, b47, _MM_SHUFFLE(3, 1, 3, 1)));
    /* s holds blocks 0 2 4 6 1 3 5 7 8 10 12 14 9 11 13 15 */
    return _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15), s);
}

__attribute__((target(T512))) static float row_avx512vnni(const int8_t *w, const uint16_t *dw,
                                                          const int8_t *x, const float *dx,
                                                          const int32_t *xs, int nb)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m256 acc = _mm256_setzero_ps();
    int k = 0;
    for (; k + 16 <= nb; k += 16) {
        PF(w + (size_t)k * TFM_Q8_BLOCK, 8)
        V512_PAIR(0) V512_PAIR(1) V512_PAIR(2) V512_PAIR(3)
        V512_PAIR(4) V512_PAIR(5) V512_PAIR(6) V512_PAIR(7)
        __m512i s = _mm512_sub_epi32(reduce16(r0, r1, r2, r3, r4, r5, r6, r7),
                                     _mm512_loadu_si512(xs + k));
        __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(dw + k))),
                                 _mm512_loadu_ps(dx + k));
        __m512 sf = _mm512_cvtepi32_ps(s);
        /* blocks k..k+7, then k+8..k+15, into lanes 0..7 in turn */
        acc = _mm256_fmadd_ps(_mm512_castps512_ps256(d), _mm512_castps512_ps256(sf), acc);
        acc = _mm256_fmadd_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(d), 1)),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sf), 1)),
                              acc);
    }
    for (; k + 8 <= nb; k += 8) {
        const __m256i flip8 = _mm256_set1_epi8((char)0x80);
        __m256i p[8];
        for (int j = 0; j < 8; j++)
            p[j] = _mm256_dpbusd_epi32(
                _mm256_setzero_si256(),
                _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + (k + j) * TFM_Q8_BLOCK)),
                                 flip8),
                _mm256_loadu_si256((const __m256i *)(x + (k + j) * TFM_Q8_BLOCK)));
        __m256i s = _mm256_sub_epi32(reduce8(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7]),
                                     _mm256_loadu_si256((const __m256i *)(xs + k)));
        acc = combine8(acc, s, dw + k, dx + k);
    }
    return finish8(acc, w, dw, x, dx, k, nb);
}
#undef V512_PAIR
#endif

static const struct {
    const char *name;
    row_fn fn;
    const char *needs[6]; /* __builtin_cpu_supports features */
} kernels[] = {
    {"scalar", row_scalar, {NULL}},
#ifdef TFM_Q8_X86
    {"avx2", row_avx2, {"avx2", "fma", "f16c"}},
    {"avxvnni", row_avxvnni, {"avx2", "fma", "f16c", "avxvnni"}},
    {"avx512vnni", row_avx512vnni, {"avx512f", "avx512bw", "avx512vnni", "avx512vl", "fma", "f16c"}},
#endif
};
#define N_KERNELS ((int)(sizeof kernels / sizeof kernels[0]))

static int supported(int i)
{
#ifdef TFM_Q8_X86
    __builtin_cpu_init();
    for (int k = 0; k < 6 && kernels[i].needs[k]; k++) {
        const char *f = kernels[i].needs[k];
        /* __builtin_cpu_supports takes literals only */
        int ok = !strcmp(f, "avx2")         ? __builtin_cpu_supports("avx2")
                 : !strcmp(f, "fma")        ? __builtin_cpu_supports("fma")
                 : !strcmp(f, "f16c")       ? __builtin_cpu_supports("f16c")
                 : !strcmp(f, "avxvnni")    ? __builtin_cpu_supports("avxvnni")
                 : !strcmp(f, "avx512f")    ? __builtin_cpu_supports("avx512f")
                 : !strcmp(f, "avx512bw")   ? __builtin_cpu_supports("avx512bw")
                 : !strcmp(f, "avx512vl")   ? __builtin_cpu_supports("avx512vl")
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

/* xs[k] = 128·Σ x over block k */
static void block_xsums(int32_t *xs, const int8_t *x, int nb)
{
    for (int k = 0; k < nb; k++) {
        int32_t s = 0;
        for (int i = 0; i < TFM_Q8_BLOCK; i++)
            s += x[k * TFM_Q8_BLOCK + i];
        xs[k] = 128 * s;
    }
}

float tfm_q8_row_dot(int i, const int8_t *w, const uint16_t *dw, const int8_t *x,
                     const float *dx, int nb)
{
    TFM_ASSERT(i >= 0 && i < N_KERNELS && supported(i));
    int32_t *xs = tfm_malloc(sizeof(int32_t) * (size_t)(nb ? nb : 1));
    block_xsums(xs, x, nb);
    float y = kernels[i].fn(w, dw, x, dx, xs, nb);
    free(xs);
    return y;
}

static int chosen = -1;
static volatile float choose_sink;
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
    uint16_t dw[ROWS * NB];
    int8_t x[NB * TFM_Q8_BLOCK];
    float dx[NB], sink = 0;
    int32_t xs[NB];
    uint32_t s = 12345;
    for (int i = 0; i < ROWS * NB * TFM_Q8_BLOCK; i++) {
        s = s * 1664525u + 1013904223u;
        w[i] = (int8_t)((int)(s >> 24) % 127);
    }
    for (int i = 0; i < ROWS * NB; i++)
        dw[i] = 0x3c00; /* 1.0 */
    for (int i = 0; i < NB; i++)
        dx[i] = 1.0f;
    memcpy(x, w, sizeof x);
    block_xsums(xs, x, NB);
    double best[N_KERNELS];
    for (int k = 0; k < N_KERNELS; k++)
        best[k] = supported(k) ? 1e300 : -1;
    for (int rep = 0; rep < 5; rep++)
        for (int k = 0; k < N_KERNELS; k++) {
            if (best[k] < 0)
                continue;
            double t0 = thread_cpu();
            for (int r = 0; r < ROWS; r++)
                sink += kernels[k].fn(w + (size_t)r * NB * TFM_Q8_BLOCK, dw + r * NB, x, dx, xs, NB);
            double t = thread_cpu() - t0;
            best[k] = t < best[k] ? t : best[k];
        }
    free(w);
    /* the results must be used, or the calls could go */
    choose_sink = sink;
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

void tfm_q8_gemv(float *y, const int8_t *xq, const float *xd, const tfm_q8 *W,
                 const float *b, int n)
{
    const int N = W->N, K = W->K, nb = K / TFM_Q8_BLOCK;
    const row_fn fn = kernels[tfm_q8_kernel()].fn;
    /* a decode step's block sums fit on the stack (GPT-2 small: 8 rows of
     * 96 blocks at most), sparing some 50 mallocs a token */
    int32_t xs_stack[1024];
    const size_t n_xs = (size_t)n * (nb ? nb : 1);
    int32_t *xs = n_xs <= 1024 ? xs_stack : tfm_malloc(sizeof(int32_t) * n_xs);
    for (int r = 0; r < n; r++)
        block_xsums(xs + (size_t)r * nb, xq + (size_t)r * K, nb);
    int nt = 1;
#ifdef _OPENMP
    if ((size_t)N * K >= Q8_PAR_MIN && !omp_in_parallel())
        nt = tfm_threads_now();
#endif
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
    for (int j = 0; j < N; j++) {
        const int8_t *wj = W->q + (size_t)j * K;
        const uint16_t *dj = W->d + (size_t)j * nb;
        for (int r = 0; r < n; r++) {
            float s = fn(wj, dj, xq + (size_t)r * K, xd + (size_t)r * nb, xs + (size_t)r * nb, nb);
            y[(size_t)r * N + j] = b ? s + b[j] : s;
        }
    }
    if (xs != xs_stack)
        free(xs);
}

/* ---- the matrix product (tfm_q8_gemm) ----
 *
 * The packed weights (q8.h) put 16 output columns in a vector's lanes;
 * a kernel computes mr rows by np panels at once, and for each lane
 * L = 0..7 of the definition runs the blocks L, L + 8, ... in order,
 * each block's exact sums into one int32 vector per (row, columns) and
 * then one fused multiply-add into one float vector per (row, columns):
 * the definition's acc[L] for 16 columns at once, with no horizontal
 * sums.  It stores the eight lanes' partials; the driver sums them in the
 * definition's tree and adds the bias. */

#define QP 16                          /* columns per panel */
#define QG (QP * 4)                    /* bytes per group of 4 k */
#define QB (QG * 8)                    /* bytes per block of a panel */
#define Q8_MR_MAX 8                    /* most rows of any kernel */
#define Q8_NP_MAX 2                    /* most panels of any kernel */
#define Q8_PART_ROWS 32                /* most rows of any kernel, AMX's */

void tfm_q8_repack(tfm_q8_packed *p, const tfm_q8 *W)
{
    TFM_ASSERT(W->K % TFM_Q8_BLOCK == 0 && W->N >= 0);
    const int N = W->N, K = W->K, nb = K / TFM_Q8_BLOCK, np = (N + QP - 1) / QP;
    const size_t blocks = (size_t)np * nb;
    p->N = N;
    p->K = K;
    if (blocks > p->cap || !p->w) {
        free(p->w);
        free(p->d);
        p->w = tfm_aligned_alloc(blocks * QB + 1);
        p->d = tfm_aligned_alloc(sizeof(float) * (blocks * QP + 1));
        p->cap = blocks;
    }
#pragma omp parallel for schedule(static) if (blocks * QB >= (1 << 18) && !omp_in_parallel())
    for (int pn = 0; pn < np; pn++)
        for (int c = 0; c < QP; c++) {
            const int j = pn * QP + c;
            const int8_t *row = j < N ? W->q + (size_t)j * K : NULL;
            for (int b = 0; b < nb; b++) {
                uint8_t *wb = p->w + ((size_t)pn * nb + b) * QB + c * 4;
                p->d[((size_t)pn * nb + b) * QP + c] =
                    row ? tfm_f16_to_f32(W->d[(size_t)j * nb + b]) : 0.0f;
                for (int g = 0; g < 8; g++) { /* 4 weights, each + 128: the top bit flipped */
                    uint32_t v = 0;
                    if (row)
                        memcpy(&v, row + b * TFM_Q8_BLOCK + 4 * g, 4);
                    v ^= 0x80808080u;
                    memcpy(wb + g * QG, &v, 4);
                }
            }
        }
}

void tfm_q8_pack(tfm_q8_packed *p, const tfm_q8 *W)
{
    memset(p, 0, sizeof *p);
    tfm_q8_repack(p, W);
}

void tfm_q8_packed_free(tfm_q8_packed *p)
{
    free(p->w);
    free(p->d);
    memset(p, 0, sizeof *p);
}

/* Fills part[L][r][0 .. np·16) with lane L's partial sums for rows
 * r < mr (x, xd, xs at the first row; strides K, nb, nb) and panels
 * pn .. pn + np - 1 of W. */
typedef void (*gemm_fn)(float *part, const tfm_q8_packed *W, int pn, int np, const int8_t *x,
                        const float *xd, const int32_t *xs, int mr);

static void gemm_scalar(float *part, const tfm_q8_packed *W, int pn, int np, const int8_t *x,
                        const float *xd, const int32_t *xs, int mr)
{
    (void)xs;
    const int K = W->K, nb = K / TFM_Q8_BLOCK, nc = np * QP;
    for (int L = 0; L < 8; L++)
        for (int r = 0; r < mr; r++)
            for (int c = 0; c < nc; c++) {
                const uint8_t *w = W->w + ((size_t)(pn + c / QP) * nb) * QB + (c % QP) * 4;
                const float *d = W->d + ((size_t)(pn + c / QP) * nb) * QP + c % QP;
                const int8_t *xr = x + (size_t)r * K;
                float acc = 0.0f;
                for (int b = L; b < nb; b += 8) {
                    int32_t s = 0;
                    for (int i = 0; i < TFM_Q8_BLOCK; i++)
                        s += ((int32_t)w[(size_t)b * QB + (i / 4) * QG + i % 4] - 128) *
                             xr[b * TFM_Q8_BLOCK + i];
                    acc = fmaf(d[(size_t)b * QP] * xd[(size_t)r * nb + b], (float)s, acc);
                }
                part[((size_t)L * mr + r) * nc + c] = acc;
            }
}

#ifdef TFM_Q8_X86
static inline int32_t load4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* AVX-512 VNNI: a vector is a panel; MR rows by NP panels in registers. */
__attribute__((target(T512), always_inline)) static inline void
gemm512_mk(float *part, const tfm_q8_packed *W, int pn, const int8_t *x, const float *xd,
           const int32_t *xs, const int MR, const int NP)
{
    const int K = W->K, nb = K / TFM_Q8_BLOCK;
    const uint8_t *w = W->w + (size_t)pn * nb * QB;
    const float *d = W->d + (size_t)pn * nb * QP;
    for (int L = 0; L < 8; L++) {
        __m512 acc[Q8_MR_MAX][Q8_NP_MAX];
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
            for (int q = 0; q < NP; q++)
                acc[r][q] = _mm512_setzero_ps();
        for (int b = L; b < nb; b += 8) {
            __m512i s[Q8_MR_MAX][Q8_NP_MAX];
            /* starting at -128·Σx leaves Σ w·x once the unsigned
             * weights' products are in */
#pragma GCC unroll 8
            for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
                for (int q = 0; q < NP; q++)
                    s[r][q] = _mm512_set1_epi32(-xs[(size_t)r * nb + b]);
            const uint8_t *wb = w + (size_t)b * QB;
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                __m512i wv[Q8_NP_MAX];
#pragma GCC unroll 2
                for (int q = 0; q < NP; q++)
                    wv[q] = _mm512_load_si512(wb + (size_t)q * nb * QB + g * QG);
#pragma GCC unroll 8
                for (int r = 0; r < MR; r++) {
                    const __m512i xb =
                        _mm512_set1_epi32(load4(x + (size_t)r * K + b * TFM_Q8_BLOCK + 4 * g));
#pragma GCC unroll 2
                    for (int q = 0; q < NP; q++)
                        s[r][q] = _mm512_dpbusd_epi32(s[r][q], wv[q], xb);
                }
            }
#pragma GCC unroll 8
            for (int r = 0; r < MR; r++) {
                const __m512 dx = _mm512_set1_ps(xd[(size_t)r * nb + b]);
#pragma GCC unroll 2
                for (int q = 0; q < NP; q++) {
                    const __m512 dv = _mm512_mul_ps(
                        _mm512_load_ps(d + ((size_t)q * nb + b) * QP), dx);
                    acc[r][q] = _mm512_fmadd_ps(dv, _mm512_cvtepi32_ps(s[r][q]), acc[r][q]);
                }
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++)
#pragma GCC unroll 2
            for (int q = 0; q < NP; q++)
                _mm512_storeu_ps(part + ((size_t)L * MR + r) * NP * QP + q * QP, acc[r][q]);
    }
}

#define G512_MR 6
__attribute__((target(T512))) static void gemm_avx512vnni(float *part, const tfm_q8_packed *W,
                                                          int pn, int np, const int8_t *x,
                                                          const float *xd, const int32_t *xs,
                                                          int mr)
{
#define G512(m)                                                                            \
    case m:                                                                                \
        if (np == 2)                                                                       \
            gemm512_mk(part, W, pn, x, xd, xs, m, 2);                                      \
        else                                                                               \
            gemm512_mk(part, W, pn, x, xd, xs, m, 1);                                      \
        break;
    switch (mr) {
        G512(1) G512(2) G512(3) G512(4) G512(5) G512(6)
    }
#undef G512
}

/* 256-bit kernels: a panel is two vectors of 8 columns; MR rows by one
 * panel.  AVX-VNNI multiplies the unsigned weights as AVX-512 VNNI does;
 * AVX2 has no such instruction: vpmaddubsw (u8·s8, pairs summed to 16
 * bits with saturation) is exact only while a pair's sum fits, and
 * 255·127·2 does not, so it takes the signed weights back (w + 128 with
 * its top bit flipped is w), and multiplies |x| by w with x's sign: each
 * product at most 127·127, a pair 32258 < 32767 (weights and activations
 * are -127..127), then vpmaddwd by ones sums pairs to 32 bits. */
#define T256 "avx2,fma,f16c"
#define G256_BODY(TARGET_DOT)                                                              \
    const int K = W->K, nb = K / TFM_Q8_BLOCK;                                             \
    const uint8_t *w = W->w + (size_t)pn * nb * QB;                                        \
    const float *d = W->d + (size_t)pn * nb * QP;                                          \
    for (int L = 0; L < 8; L++) {                                                          \
        __m256 acc[Q8_MR_MAX][2];                                                          \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] =       \
            _mm256_setzero_ps();                                                           \
        for (int b = L; b < nb; b += 8) {                                                  \
            __m256i s[Q8_MR_MAX][2];                                                       \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) s[r][0] = s[r][1] =       \
                _mm256_set1_epi32(SUB_XS ? -xs[(size_t)r * nb + b] : 0);                   \
            const uint8_t *wb = w + (size_t)b * QB;                                        \
            _Pragma("GCC unroll 8") for (int g = 0; g < 8; g++)                            \
            {                                                                              \
                __m256i w0 = _mm256_load_si256((const __m256i *)(wb + g * QG));            \
                __m256i w1 = _mm256_load_si256((const __m256i *)(wb + g * QG + 32));       \
                _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                       \
                {                                                                          \
                    const __m256i xb = _mm256_set1_epi32(                                  \
                        load4(x + (size_t)r * K + b * TFM_Q8_BLOCK + 4 * g));              \
                    TARGET_DOT                                                             \
                }                                                                          \
            }                                                                              \
            _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++)                           \
            {                                                                              \
                const __m256 dx = _mm256_set1_ps(xd[(size_t)r * nb + b]);                  \
                for (int h = 0; h < 2; h++) {                                              \
                    const __m256 dv =                                                      \
                        _mm256_mul_ps(_mm256_load_ps(d + (size_t)b * QP + 8 * h), dx);     \
                    acc[r][h] = _mm256_fmadd_ps(dv, _mm256_cvtepi32_ps(s[r][h]), acc[r][h]); \
                }                                                                          \
            }                                                                              \
        }                                                                                  \
        _Pragma("GCC unroll 8") for (int r = 0; r < MR; r++) for (int h = 0; h < 2; h++)   \
            _mm256_storeu_ps(part + ((size_t)L * MR + r) * QP + 8 * h, acc[r][h]);         \
    }

#define SUB_XS 1
__attribute__((target(T256 ",avxvnni"), always_inline)) static inline void
gemmvnni_mk(float *part, const tfm_q8_packed *W, int pn, const int8_t *x, const float *xd,
            const int32_t *xs, const int MR)
{
    G256_BODY(s[r][0] = _mm256_dpbusd_avx_epi32(s[r][0], w0, xb);
              s[r][1] = _mm256_dpbusd_avx_epi32(s[r][1], w1, xb);)
}
#undef SUB_XS
#define SUB_XS 0
__attribute__((target(T256), always_inline)) static inline void
gemmavx2_mk(float *part, const tfm_q8_packed *W, int pn, const int8_t *x, const float *xd,
            const int32_t *xs, const int MR)
{
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    (void)xs;
    G256_BODY(const __m256i ax = _mm256_abs_epi8(xb);
              const __m256i sw0 = _mm256_sign_epi8(_mm256_xor_si256(w0, flip), xb);
              const __m256i sw1 = _mm256_sign_epi8(_mm256_xor_si256(w1, flip), xb);
              s[r][0] = _mm256_add_epi32(
                  s[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sw0), ones));
              s[r][1] = _mm256_add_epi32(
                  s[r][1], _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sw1), ones));)
}
#undef SUB_XS

#define G256_MR 4
#define G256_SWITCH(mk)                                                                    \
    switch (mr) {                                                                          \
    case 1: mk(part, W, pn, x, xd, xs, 1); break;                                          \
    case 2: mk(part, W, pn, x, xd, xs, 2); break;                                          \
    case 3: mk(part, W, pn, x, xd, xs, 3); break;                                          \
    case 4: mk(part, W, pn, x, xd, xs, 4); break;                                          \
    }
__attribute__((target(T256 ",avxvnni"))) static void gemm_avxvnni(float *part,
                                                                  const tfm_q8_packed *W, int pn,
                                                                  int np, const int8_t *x,
                                                                  const float *xd,
                                                                  const int32_t *xs, int mr)
{
    (void)np;
    G256_SWITCH(gemmvnni_mk)
}
__attribute__((target(T256))) static void gemm_avx2(float *part, const tfm_q8_packed *W, int pn,
                                                    int np, const int8_t *x, const float *xd,
                                                    const int32_t *xs, int mr)
{
    (void)np;
    G256_SWITCH(gemmavx2_mk)
}

/* AMX: tile multiply-adds of signed activations by the unsigned packed
 * weights (tdpbsud), one block at a time, so every block's sums come out
 * whole: a block of 16 rows of activations is a 16 x 32-byte tile (rows
 * K apart), a panel's block is already the 8 x 64-byte tile the
 * instruction takes (4 consecutive k of a column in each 32-bit
 * element).  32 rows by 2 panels: 4 sum tiles, 2 of activations, 2 of
 * weights.  Each block's sums are stored and, with AVX-512, brought
 * into the lane partials (kept in part, in L1) in block order: lane
 * b % 8 takes block b, as the definition says.  Only whole groups of 32
 * rows: the driver gives the rest to the AVX-512 kernel (same numbers). */
#define AMX_MR 32
#define TAMX T512 ",amx-tile,amx-int8"
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

__attribute__((target(TAMX), always_inline)) static inline void
gemmamx_mk(float *part, const tfm_q8_packed *W, int pn, const int8_t *x, const float *xd,
           const int32_t *xs, const int NP)
{
    const int K = W->K, nb = K / TFM_Q8_BLOCK, nc = NP * QP;
    const uint8_t *w = W->w + (size_t)pn * nb * QB;
    const float *d = W->d + (size_t)pn * nb * QP;
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 4; t++) /* sums: 16 rows of 16 int32 */
        cfg.rows[t] = 16, cfg.colsb[t] = 64;
    for (int t = 4; t < 6; t++) /* activations: 16 rows of one block */
        cfg.rows[t] = 16, cfg.colsb[t] = 32;
    for (int t = 6; t < 8; t++) /* weights: 8 groups of 4 k by 16 columns */
        cfg.rows[t] = 8, cfg.colsb[t] = 64;
    _tile_loadconfig(&cfg);
    memset(part, 0, sizeof(float) * 8 * AMX_MR * nc);
    /* [2 buffers][row group][panel][16 rows][16 columns] */
    int32_t sums[2][2][2][16][16] __attribute__((aligned(64)));
    for (int b = 0; b < nb; b++) {
        int32_t(*c)[2][16][16] = sums[b & 1];
        const int8_t *xb = x + (size_t)b * TFM_Q8_BLOCK;
        _tile_zero(0);
        _tile_zero(2);
        _tile_loadd(4, xb, K);
        _tile_loadd(5, xb + (size_t)16 * K, K);
        _tile_loadd(6, w + (size_t)b * QB, QG);
        _tile_dpbsud(0, 4, 6);
        _tile_dpbsud(2, 5, 6);
        _tile_stored(0, c[0][0], 64);
        _tile_stored(2, c[1][0], 64);
        if (NP == 2) {
            _tile_zero(1);
            _tile_zero(3);
            _tile_loadd(7, w + ((size_t)nb + b) * QB, QG);
            _tile_dpbsud(1, 4, 7);
            _tile_dpbsud(3, 5, 7);
            _tile_stored(1, c[0][1], 64);
            _tile_stored(3, c[1][1], 64);
        }
        float *lane = part + (size_t)(b % 8) * AMX_MR * nc;
        __m512 dw[2];
        for (int q = 0; q < NP; q++)
            dw[q] = _mm512_load_ps(d + ((size_t)q * nb + b) * QP);
        for (int r = 0; r < AMX_MR; r++) {
            const __m512i xsv = _mm512_set1_epi32(xs[(size_t)r * nb + b]);
            const __m512 dx = _mm512_set1_ps(xd[(size_t)r * nb + b]);
#pragma GCC unroll 2
            for (int q = 0; q < NP; q++) {
                float *a = lane + (size_t)r * nc + q * QP;
                const __m512i sv = _mm512_sub_epi32(_mm512_load_si512(c[r / 16][q][r % 16]), xsv);
                _mm512_storeu_ps(a, _mm512_fmadd_ps(_mm512_mul_ps(dw[q], dx),
                                                    _mm512_cvtepi32_ps(sv), _mm512_loadu_ps(a)));
            }
        }
    }
    _tile_release();
}

__attribute__((target(TAMX))) static void gemm_amx(float *part, const tfm_q8_packed *W, int pn,
                                                   int np, const int8_t *x, const float *xd,
                                                   const int32_t *xs, int mr)
{
    TFM_ASSERT(mr == AMX_MR);
    if (np == 2)
        gemmamx_mk(part, W, pn, x, xd, xs, 2);
    else
        gemmamx_mk(part, W, pn, x, xd, xs, 1);
}

/* The CPU has AMX's int8 tiles and Linux lets this process use them
 * (asked once: the tiles' state is large, so Linux gives it on request). */
static int amx_ok;
static pthread_once_t amx_once = PTHREAD_ONCE_INIT;
static void amx_probe(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)))
        return;
    if (!supported(3)) /* the AVX-512 VNNI kernel takes the rows AMX leaves */
        return;
    /* ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA */
    amx_ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
}
#endif

/* The row kernels' in their order, then AMX: the function, its most rows
 * and panels per call (exactly that many rows for AMX), and the kernel
 * that takes fewer rows (-1: itself). */
static const struct {
    const char *name;
    gemm_fn fn;
    int mr, np, tail;
} gemm_kernels[] = {
    {"scalar", gemm_scalar, 4, 1, -1},
#ifdef TFM_Q8_X86
    {"avx2", gemm_avx2, G256_MR, 1, -1},
    {"avxvnni", gemm_avxvnni, G256_MR, 1, -1},
    {"avx512vnni", gemm_avx512vnni, G512_MR, 2, -1},
    {"amx", gemm_amx, AMX_MR, 2, 3},
#endif
};
#define N_GEMM ((int)(sizeof gemm_kernels / sizeof gemm_kernels[0]))

static int gemm_supported(int i)
{
    if (i < N_KERNELS)
        return supported(i);
#ifdef TFM_Q8_X86
    pthread_once(&amx_once, amx_probe);
    return amx_ok;
#else
    return 0;
#endif
}

int tfm_q8_gemm_kernel_count(void)
{
    return N_GEMM;
}

const char *tfm_q8_gemm_kernel_name(int i, int *sup)
{
    TFM_ASSERT(i >= 0 && i < N_GEMM);
    if (sup)
        *sup = gemm_supported(i);
    return gemm_kernels[i].name;
}

/* y[c] = the definition's tree over the lanes a[L·lane + c], + b[c] */
static void lanes_to_row(float *restrict y, const float *restrict a, size_t lane,
                         const float *restrict b, int n)
{
    if (b)
        for (int c = 0; c < n; c++)
            y[c] = (((a[c] + a[4 * lane + c]) + (a[lane + c] + a[5 * lane + c])) +
                    ((a[2 * lane + c] + a[6 * lane + c]) + (a[3 * lane + c] + a[7 * lane + c]))) +
                   b[c];
    else
        for (int c = 0; c < n; c++)
            y[c] = ((a[c] + a[4 * lane + c]) + (a[lane + c] + a[5 * lane + c])) +
                   ((a[2 * lane + c] + a[6 * lane + c]) + (a[3 * lane + c] + a[7 * lane + c]));
}

/* Bytes of activations a row chunk keeps in cache while every panel of
 * a thread's columns runs over it. */
#define Q8_CHUNK_BYTES (128 << 10)

/* Columns [c0, c1) (multiples of the kernel's panels, c1 ≤ W's padded
 * width) of y for all M rows, kernel k. */
static void gemm_cols(int k, float *y, int ldy, const int8_t *xq, const float *xd,
                      const int32_t *xs, int M, const tfm_q8_packed *W, const float *bias,
                      int p0, int p1, tfm_gemm_epilogue epi, void *ctx)
{
    const gemm_fn fn = gemm_kernels[k].fn;
    const int MR = gemm_kernels[k].mr, NP = gemm_kernels[k].np;
    const int K = W->K, nb = K / TFM_Q8_BLOCK, N = W->N;
    int mc = K ? Q8_CHUNK_BYTES / K : M;
    mc = mc < MR ? MR : mc - mc % MR;
    float part[8 * Q8_PART_ROWS * Q8_NP_MAX * QP] __attribute__((aligned(64)));
    for (int r0 = 0; r0 < M; r0 += mc) {
        const int r1 = r0 + mc < M ? r0 + mc : M;
        for (int pn = p0; pn < p1; pn += NP) {
            const int np = p1 - pn < NP ? p1 - pn : NP, nc = np * QP, c0 = pn * QP;
            const int n = N - c0 < nc ? N - c0 : nc; /* the columns that exist */
            for (int r = r0, mr; r < r1; r += mr) {
                gemm_fn f = fn;
                mr = r1 - r < MR ? r1 - r : MR;
                if (mr < MR && gemm_kernels[k].tail >= 0) { /* too few rows for it */
                    const int t = gemm_kernels[k].tail;
                    f = gemm_kernels[t].fn;
                    mr = mr < gemm_kernels[t].mr ? mr : gemm_kernels[t].mr;
                }
                f(part, W, pn, np, xq + (size_t)r * K, xd + (size_t)r * nb,
                  xs + (size_t)r * nb, mr);
                const size_t lane = (size_t)mr * nc;
                for (int i = 0; i < mr; i++)
                    lanes_to_row(y + (size_t)(r + i) * ldy + c0, part + (size_t)i * nc, lane,
                                 bias ? bias + c0 : NULL, n);
                /* the tile is complete and in cache */
                if (epi)
                    epi(ctx, y + (size_t)r * ldy + c0, ldy, r, mr, c0, n);
            }
        }
    }
}

/* Below this many multiply-adds a second thread costs more than it brings. */
#define Q8_GEMM_PAR_MIN (1 << 22)

static void gemm_run(int k, int nthreads, float *y, int ldy, const int8_t *xq, const float *xd,
                     int M, const tfm_q8_packed *W, const float *b, tfm_gemm_epilogue epi,
                     void *ctx)
{
    const int nb = W->K / TFM_Q8_BLOCK, np = (W->N + QP - 1) / QP, NP = gemm_kernels[k].np;
    if (M <= 0 || W->N <= 0)
        return;
    int32_t *xs = tfm_malloc(sizeof(int32_t) * ((size_t)M * nb + 1));
    for (int r = 0; r < M; r++)
        block_xsums(xs + (size_t)r * nb, xq + (size_t)r * W->K, nb);
    /* units of NP panels, split evenly: each column one thread's */
    const int units = (np + NP - 1) / NP;
    if (nthreads > units)
        nthreads = units;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        int t = 0, nt = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        const int u0 = (int)((long)units * t / nt), u1 = (int)((long)units * (t + 1) / nt);
        const int p1 = u1 * NP < np ? u1 * NP : np;
        if (u1 > u0)
            gemm_cols(k, y, ldy, xq, xd, xs, M, W, b, u0 * NP, p1, epi, ctx);
    }
    free(xs);
}

static int gemm_chosen = -1;
static pthread_once_t gemm_once = PTHREAD_ONCE_INIT;

/* Times every kernel the CPU runs on 64 rows times a 768 x 128 matrix
 * (in cache), on this thread, by its CPU time, fastest of five
 * interleaved runs; a kernel must beat the fastest before it in the list
 * by 3%, as choose() above.  A first round on a quarter of the columns
 * (fastest of two runs) leaves out the kernels more than 8 times slower
 * than the best there (the portable one, some 100 times slower where
 * vector kernels run, would otherwise take most of the 30 ms the choice
 * cost: the first prompt of tfm-generate waited for it).  A few ms, once. */
static void gemm_choose(void)
{
    enum { N = 128, K = 768, M = 64, NB = K / TFM_Q8_BLOCK };
    int8_t *w = tfm_aligned_alloc((size_t)N * K), *x = tfm_aligned_alloc((size_t)M * K);
    uint16_t *dw = tfm_malloc(sizeof(uint16_t) * N * NB);
    float *dx = tfm_malloc(sizeof(float) * M * NB), *y = tfm_malloc(sizeof(float) * M * N);
    uint32_t s = 12345;
    for (int i = 0; i < N * K; i++) {
        s = s * 1664525u + 1013904223u;
        w[i] = (int8_t)((int)(s >> 24) % 127);
    }
    for (int i = 0; i < M * K; i++)
        x[i] = w[i % (N * K)];
    for (int i = 0; i < N * NB; i++)
        dw[i] = 0x3c00;
    for (int i = 0; i < M * NB; i++)
        dx[i] = 1.0f;
    tfm_q8 W = {w, dw, N, K};
    tfm_q8_packed P;
    tfm_q8_pack(&P, &W);
    double best[N_GEMM];
    for (int k = 0; k < N_GEMM; k++)
        best[k] = gemm_supported(k) ? 1e300 : -1;
    float sink = 0;
    {
        tfm_q8 Wq = {w, dw, N / 4, K};
        tfm_q8_packed Pq;
        tfm_q8_pack(&Pq, &Wq);
        double quick[N_GEMM], fastest = 1e300;
        for (int k = 0; k < N_GEMM; k++) {
            quick[k] = 1e300;
            for (int rep = 0; rep < 2 && best[k] >= 0; rep++) {
                double t0 = thread_cpu();
                gemm_run(k, 1, y, N, x, dx, M, &Pq, NULL, NULL, NULL);
                double t = thread_cpu() - t0;
                sink += y[0];
                quick[k] = t < quick[k] ? t : quick[k];
            }
            if (best[k] >= 0 && quick[k] < fastest)
                fastest = quick[k];
        }
        for (int k = 0; k < N_GEMM; k++)
            if (best[k] >= 0 && quick[k] > 8 * fastest)
                best[k] = -1;
        tfm_q8_packed_free(&Pq);
    }
    for (int rep = 0; rep < 5; rep++)
        for (int k = 0; k < N_GEMM; k++) {
            if (best[k] < 0)
                continue;
            double t0 = thread_cpu();
            gemm_run(k, 1, y, N, x, dx, M, &P, NULL, NULL, NULL);
            double t = thread_cpu() - t0;
            sink += y[0];
            best[k] = t < best[k] ? t : best[k];
        }
    choose_sink = sink;
    tfm_q8_packed_free(&P);
    free(w); free(x); free(dw); free(dx); free(y);
    int pick = 0; /* the portable kernel always runs, but may have been left out */
    while (best[pick] < 0)
        pick++;
    for (int k = pick + 1; k < N_GEMM; k++)
        if (best[k] >= 0 && best[k] < 0.97 * best[pick])
            pick = k;
    __atomic_store_n(&gemm_chosen, pick, __ATOMIC_RELEASE);
}

int tfm_q8_gemm_kernel(void)
{
    pthread_once(&gemm_once, gemm_choose);
    return __atomic_load_n(&gemm_chosen, __ATOMIC_ACQUIRE);
}

int tfm_q8_gemm_kernel_use(int i)
{
    if (i < 0 || i >= N_GEMM || !gemm_supported(i))
        return -1;
    pthread_once(&gemm_once, gemm_choose);
    __atomic_store_n(&gemm_chosen, i, __ATOMIC_RELEASE);
    return 0;
}

void tfm_q8_gemm(float *y, int ldy, const int8_t *xq, const float *xd, int M,
                 const tfm_q8_packed *W, const float *b, tfm_gemm_epilogue epi, void *ctx)
{
    const int k = tfm_q8_gemm_kernel();
    int nt = 1;
#ifdef _OPENMP
    if ((double)M * W->N * W->K >= Q8_GEMM_PAR_MIN && !omp_in_parallel())
        nt = tfm_threads_now();
#endif
    gemm_run(k, nt, y, ldy, xq, xd, M, W, b, epi, ctx);
}

/* ---- 8-bit or float32: which product is faster, per shape ---- */

typedef struct {
    int K, N, q8;
} q8_choice;

static struct {
    pthread_mutex_t lock;
    q8_choice *v;
    int n, cap;
} q8_chosen = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Times 128 rows both ways, alternately, by the wall clock on the
 * threads products take now: the 8-bit one with its quantization of the
 * rows, the float32 one (tfm_gemm_packed, after a first product that
 * makes it choose its own way).  Fastest of two runs each, more until
 * they have taken 20 ms, up to five; the 8-bit product must win by 3%, so
 * that noise alone never changes the numbers a program gives. */
static int q8_time(const tfm_q8_packed *Wq, const tfm_gemm_b *Wf)
{
    enum { M = 128 };
    const int K = Wq->K, N = Wq->N, nb = K / TFM_Q8_BLOCK;
    float *x = tfm_aligned_alloc(sizeof(float) * (size_t)M * K);
    float *y = tfm_aligned_alloc(sizeof(float) * (size_t)M * N);
    int8_t *xq = tfm_aligned_alloc((size_t)M * K);
    float *xd = tfm_aligned_alloc(sizeof(float) * ((size_t)M * nb + 1));
    uint32_t s = 2463534242u;
    for (size_t i = 0; i < (size_t)M * K; i++) {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        x[i] = (float)((int)(s % 2001) - 1000) * 1e-3f;
    }
    tfm_gemm_packed(M, x, K, Wf, y, N, NULL, NULL);
    double best[2] = {1e300, 1e300}, spent = 0;
    for (int rep = 0; rep < 5 && (rep < 2 || spent < 0.02); rep++)
        for (int way = 0; way < 2; way++) {
            const double t0 = tfm_now();
            if (way) {
#pragma omp parallel for schedule(static) if ((size_t)M * K >= (1 << 16))
                for (int r = 0; r < M; r++)
                    tfm_q8_quantize(xq + (size_t)r * K, xd + (size_t)r * nb, x + (size_t)r * K,
                                    K);
                tfm_q8_gemm(y, N, xq, xd, M, Wq, NULL, NULL, NULL);
            } else {
                tfm_gemm_packed(M, x, K, Wf, y, N, NULL, NULL);
            }
            const double t = tfm_now() - t0;
            best[way] = t < best[way] ? t : best[way];
            spent += t;
        }
    free(x); free(y); free(xq); free(xd);
    return best[1] < 0.97 * best[0];
}

int tfm_q8_gemm_faster(const tfm_q8_packed *Wq, const tfm_gemm_b *Wf)
{
    TFM_ASSERT(Wq->K == Wf->K && Wq->N == Wf->N);
    int q8 = -1;
    pthread_mutex_lock(&q8_chosen.lock);
    for (int i = 0; i < q8_chosen.n; i++)
        if (q8_chosen.v[i].K == Wq->K && q8_chosen.v[i].N == Wq->N)
            q8 = q8_chosen.v[i].q8;
    pthread_mutex_unlock(&q8_chosen.lock);
    if (q8 >= 0)
        return q8;
    q8 = q8_time(Wq, Wf);
    pthread_mutex_lock(&q8_chosen.lock);
    int i = 0;
    while (i < q8_chosen.n && !(q8_chosen.v[i].K == Wq->K && q8_chosen.v[i].N == Wq->N))
        i++;
    if (i == q8_chosen.n) { /* else another thread timed it too: its choice stays */
        if (q8_chosen.n == q8_chosen.cap) {
            q8_chosen.cap = q8_chosen.cap ? 2 * q8_chosen.cap : 16;
            q8_chosen.v = tfm_realloc(q8_chosen.v, sizeof *q8_chosen.v * (size_t)q8_chosen.cap);
        }
        q8_chosen.v[q8_chosen.n++] = (q8_choice){Wq->K, Wq->N, q8};
    }
    q8 = q8_chosen.v[i].q8;
    pthread_mutex_unlock(&q8_chosen.lock);
    return q8;
}
