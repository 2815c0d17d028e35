/* The packed-weight product driver (tensor/gemm.h tfm_gemm_b_pack,
 * tfm_gemm_packed, and tfm_gemm1's in-cache path): BLIS 0.9's micro-kernel
 * called directly over panels packed once, with BLIS's blocking, so the
 * sums and bits are BLIS's own. */
#include "config.h"

#include "tensor/gemm.h"
#include "base/err.h"
#include "tensor/blis_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef __AVX__
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* BLIS 0.9's micro-kernel: C[m,n] = alpha·A·B + beta·C for one MR×NR tile
 * (m, n smaller at the edges), A an MR-row panel stored column by column,
 * B an NR-column panel stored row by row. */
typedef void (*sgemm_ukr)(dim_t m, dim_t n, dim_t k, float *restrict alpha, float *restrict a,
                          float *restrict b, float *restrict beta, float *restrict c, inc_t rs_c,
                          inc_t cs_c, auxinfo_t *restrict data, cntx_t *restrict cntx);

static struct {
    int ready;
    dim_t mr, nr, mc, kc, kc_max;
    sgemm_ukr ukr;
    cntx_t *cntx;
} kern;

static int kernel_ready(void)
{
    tfm_blas_ensure();
    if (!kern.ready) {
        cntx_t *cntx = bli_gks_query_cntx();
        kern.cntx = cntx;
        kern.mr = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MR, cntx);
        kern.nr = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NR, cntx);
        kern.mc = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MC, cntx);
        kern.kc = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_KC, cntx);
        kern.kc_max = bli_cntx_get_blksz_max_dt(BLIS_FLOAT, BLIS_KC, cntx);
        kern.ukr = (sgemm_ukr)bli_cntx_get_l3_nat_ukr_dt(BLIS_FLOAT, BLIS_GEMM_UKR, cntx);
        int usable = tfm_blis_known() && kern.ukr && kern.mr > 0 && kern.nr > 0 && kern.kc > 0 &&
                     kern.mc >= kern.mr;
        kern.ready = usable ? 1 : -1;
    }
    return kern.ready == 1;
}

/* BLIS's split of K (bli_determine_blocksize_f_sub): blocks of kc, the
 * remainder whole once it is at most kc_max.  Same blocks, same sums. */
static int k_block(int k0, int K)
{
    return K - k0 <= kern.kc_max ? K - k0 : (int)kern.kc;
}

void tfm_gemm_b_pack(tfm_gemm_b *p, const float *B, int ldb, int K, int N)
{
    memset(p, 0, sizeof *p);
    p->K = K;
    p->N = N;
    p->B = B;
    p->ldb = ldb;
    if (K <= 0 || N <= 1 || !kernel_ready())
        return;
    const int nr = (int)kern.nr, np = (N + nr - 1) / nr;
    p->panels = tfm_aligned_alloc(sizeof(float) * (size_t)K * np * nr);
    for (int k0 = 0, kb; k0 < K; k0 += kb) {
        kb = k_block(k0, K);
        float *blk = p->panels + (size_t)k0 * np * nr;
#pragma omp parallel for schedule(static) if ((size_t)kb * N >= (1 << 16))
        for (int j = 0; j < np; j++) {
            float *dst = blk + (size_t)j * kb * nr;
            const int n = N - j * nr < nr ? N - j * nr : nr;
            for (int k = 0; k < kb; k++) {
                const float *src = B + (size_t)(k0 + k) * ldb + (size_t)j * nr;
                for (int c = 0; c < nr; c++)
                    dst[(size_t)k * nr + c] = c < n ? src[c] : 0.0f;
            }
        }
    }
}

void tfm_gemm_b_free(tfm_gemm_b *p)
{
    free(p->panels);
    memset(p, 0, sizeof *p);
}

/* Buffers each thread grows and keeps: products run per layer and heads
 * per product, and an allocation each would be as many.  They are freed
 * when the thread ends (OpenMP's teams shrink and grow with the thread
 * count). */
enum { KEPT_A, KEPT_B, KEPT_DONE, KEPT_KINDS };
typedef struct {
    void *buf[KEPT_KINDS];
    size_t cap[KEPT_KINDS];
} kept_buffers;

static __thread kept_buffers *kept;
static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;

static void kept_free(void *p)
{
    kept_buffers *k = p;
    for (int i = 0; i < KEPT_KINDS; i++)
        free(k->buf[i]);
    free(k);
    kept = NULL;
}

static void kept_key_create(void)
{
    TFM_ASSERT(pthread_key_create(&kept_key, kept_free) == 0);
}

/* The calling thread's buffer of this kind, at least bytes long. */
static void *kept_buffer(int kind, size_t bytes)
{
    if (!kept) {
        pthread_once(&kept_once, kept_key_create);
        kept = tfm_calloc(1, sizeof *kept);
        pthread_setspecific(kept_key, kept);
    }
    if (bytes > kept->cap[kind]) {
        free(kept->buf[kind]);
        kept->buf[kind] = tfm_aligned_alloc(bytes);
        kept->cap[kind] = bytes;
    }
    return kept->buf[kind];
}

/* The calling thread's buffer for A's panels. */
static float *a_panels(size_t floats)
{
    return kept_buffer(KEPT_A, sizeof(float) * floats);
}

#ifdef __AVX__
/* v[r] (row r, 8 columns) to v[c] (column c, 8 rows) */
static inline void transpose8(__m256 v[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
    }
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        v[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/* One panel of mr <= 8 rows (n of them in A, the rest zero), columns
 * [k0, k0 + kb): eight columns at a time, transposed in registers, column
 * k at d + k·ld.  With ld = mr each column's store spills 8 - mr floats
 * into the next column, which the next store overwrites, so only the
 * panel's last column is stored exactly. */
static void pack_panel8(float *d, int ld, const float *A, int lda, int n, int mr, int k0, int kb)
{
    const float *src[8] = {0};
    for (int r = 0; r < n; r++)
        src[r] = A + (size_t)r * lda + k0;
    int k = 0;
    for (; k + 8 <= kb; k += 8) {
        __m256 v[8];
        for (int r = 0; r < 8; r++)
            v[r] = r < n ? _mm256_loadu_ps(src[r] + k) : _mm256_setzero_ps();
        transpose8(v);
        for (int c = 0; c < 8; c++) {
            if (mr == 8 || k + c + 1 < kb) {
                _mm256_storeu_ps(d + (size_t)(k + c) * ld, v[c]);
            } else {
                float col[8];
                _mm256_storeu_ps(col, v[c]);
                memcpy(d + (size_t)(k + c) * ld, col, sizeof(float) * mr);
            }
        }
    }
    for (; k < kb; k++)
        for (int r = 0; r < mr; r++)
            d[(size_t)k * ld + r] = r < n ? src[r][k] : 0.0f;
}
#endif

/* Packs rows [r0, r0 + rows) and columns [k0, k0 + kb) of A into mr-row
 * panels, each stored column by column, zero rows past M. */
static void pack_a(float *dst, const float *A, int lda, int M, int r0, int rows, int k0,
                   int kb)
{
    const int mr = (int)kern.mr;
    for (int i = 0; i < rows; i += mr) {
        float *d = dst + (size_t)i * kb;
        const int n = M - (r0 + i) < mr ? M - (r0 + i) : mr;
#ifdef __AVX__
        if (mr <= 8) {
            pack_panel8(d, mr, A + (size_t)(r0 + i) * lda, lda, n, mr, k0, kb);
            continue;
        }
#endif
        for (int k = 0; k < kb; k++)
            for (int r = 0; r < mr; r++)
                d[(size_t)k * mr + r] = r < n ? A[(size_t)(r0 + i + r) * lda + k0 + k] : 0.0f;
    }
}

#if defined(__AVX2__) && defined(__FMA__)
/* The last row panel when M is not a multiple of mr = 6: BLIS's 6×16
 * kernel takes as long for its m < 6 rows as for six (at 128 rows, 22
 * panels' time for 21.3).  Each row's 2×8 columns are the same chain as in
 * BLIS's kernel, a fused multiply-add per k in order, alpha = 1 applied,
 * then + C (beta 1) or not (beta 0): same bits; with fewer chains the loop
 * waits on the FMA latency, 4 cycles per k for m ≤ 4 against the kernel's 6. */
static inline __attribute__((always_inline)) void
short_panel_m(int m, int kb, const float *a, const float *b, int beta, float *c, int ldc)
{
    __m256 acc[5][2];
    for (int r = 0; r < m; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int k = 0; k < kb; k++) {
        const __m256 b0 = _mm256_loadu_ps(b + (size_t)k * 16),
                     b1 = _mm256_loadu_ps(b + (size_t)k * 16 + 8);
        for (int r = 0; r < m; r++) {
            const __m256 ar = _mm256_broadcast_ss(a + (size_t)k * 6 + r);
            acc[r][0] = _mm256_fmadd_ps(ar, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(ar, b1, acc[r][1]);
        }
    }
    for (int r = 0; r < m; r++) {
        float *cr = c + (size_t)r * ldc;
        if (beta) {
            acc[r][0] = _mm256_add_ps(_mm256_loadu_ps(cr), acc[r][0]);
            acc[r][1] = _mm256_add_ps(_mm256_loadu_ps(cr + 8), acc[r][1]);
        }
        _mm256_storeu_ps(cr, acc[r][0]);
        _mm256_storeu_ps(cr + 8, acc[r][1]);
    }
}

/* 1 if it computed the tile: m < 6 rows of one full 16-column panel of a
 * 6×16 kernel (BLIS's haswell and zen kernels), else 0 */
static int short_panel(int m, int n, int kb, const float *a, const float *b, int beta,
                       float *c, int ldc)
{
    if (kern.mr != 6 || kern.nr != 16 || n != 16)
        return 0;
    switch (m) {
    case 1: short_panel_m(1, kb, a, b, beta, c, ldc); return 1;
    case 2: short_panel_m(2, kb, a, b, beta, c, ldc); return 1;
    case 3: short_panel_m(3, kb, a, b, beta, c, ldc); return 1;
    case 4: short_panel_m(4, kb, a, b, beta, c, ldc); return 1;
    case 5: short_panel_m(5, kb, a, b, beta, c, ldc); return 1;
    default: return 0;
    }
}
#else
static int short_panel(int m, int n, int kb, const float *a, const float *b, int beta,
                       float *c, int ldc)
{
    (void)m, (void)n, (void)kb, (void)a, (void)b, (void)beta, (void)c, (void)ldc;
    return 0;
}
#endif

/* One tile of C: the short-row loop where it applies (m < mr, alpha 1,
 * beta 0 or 1), else BLIS's kernel. */
static void kernel_tile(int m, int n, int kb, float *alpha, const float *a, const float *b,
                        float *beta, float *c, int ldc, auxinfo_t *aux)
{
    if (m < kern.mr && *alpha == 1.0f && (*beta == 0.0f || *beta == 1.0f) &&
        short_panel(m, n, kb, a, b, *beta != 0.0f, c, ldc))
        return;
    kern.ukr(m, n, kb, alpha, (float *)a, (float *)b, beta, c, ldc, 1, aux, kern.cntx);
}

/* The kernel's side information for A and B packed as above. */
static void packed_auxinfo(auxinfo_t *aux)
{
    memset(aux, 0, sizeof *aux);
    bli_auxinfo_set_schema_a(BLIS_PACKED_ROW_PANELS, aux);
    bli_auxinfo_set_schema_b(BLIS_PACKED_COL_PANELS, aux);
    bli_auxinfo_set_is_a(1, aux);
    bli_auxinfo_set_is_b(1, aux);
}

/* K block [k0, k0 + kb) of op(B) (B, or Bᵀ with transB) as nr-column
 * panels stored row by row, zero columns past N. */
static void pack_b(float *dst, int transB, const float *B, int ldb, int N, int k0, int kb)
{
    const int nr = (int)kern.nr;
    for (int j0 = 0; j0 < N; j0 += nr) {
        float *d = dst + (size_t)j0 * kb;
        const int n = N - j0 < nr ? N - j0 : nr;
        if (transB) {
#ifdef __AVX__
            if (nr % 8 == 0) {
                for (int h = 0; h < nr; h += 8)
                    pack_panel8(d + h, nr, B + (size_t)(j0 + h) * ldb, ldb,
                                n - h < 0 ? 0 : n - h < 8 ? n - h : 8, 8, k0, kb);
                continue;
            }
#endif
            for (int k = 0; k < kb; k++)
                for (int c = 0; c < nr; c++)
                    d[(size_t)k * nr + c] =
                        c < n ? B[(size_t)(j0 + c) * ldb + k0 + k] : 0.0f;
        } else {
            for (int k = 0; k < kb; k++) {
                const float *src = B + (size_t)(k0 + k) * ldb + j0;
                float *dk = d + (size_t)k * nr;
                if (n == nr) {
                    for (int c = 0; c < nr; c++)
                        dk[c] = src[c];
                } else {
                    memcpy(dk, src, sizeof(float) * (size_t)n);
                    memset(dk + n, 0, sizeof(float) * (size_t)(nr - n));
                }
            }
        }
    }
}

/* The calling thread's buffer for B's panels in gemm1_packed. */
static float *b_panels(size_t floats)
{
    return kept_buffer(KEPT_B, sizeof(float) * floats);
}

/* tfm_gemm1 through the kernel directly, for products that fit in cache
 * (attention's heads: BLIS's own call spends ~40% of a 128×128×64 product
 * in its set-up and packing).  BLIS's K blocks and kernel calls, alpha and
 * beta applied by the kernel: same bits.  Only for beta 0 or 1: a kernel
 * that prefers column-stored C (skx) gets C by columns from BLIS, which
 * transposes the product, but by rows here, and its two store paths round
 * beta·C + αAB differently (fused on one, two roundings on the other);
 * with beta 0 or 1 both are exact, so the bits agree on every kernel by
 * construction.  0 if not taken. */
int tfm_gemm1_packed(int transB, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc)
{
    enum { MAX_FLOATS = 1 << 18 }; /* of each operand: 1 MB */
    /* alpha 0 only scales C in BLIS: no product, no NaN from A or B */
    if (M < 2 || N < 2 || K < 1 || alpha == 0.0f || (beta != 0.0f && beta != 1.0f) ||
        (size_t)M * K > MAX_FLOATS ||
        (size_t)K * N > MAX_FLOATS || !kernel_ready())
        return 0;
    const int mr = (int)kern.mr, nr = (int)kern.nr;
    const int ma = (M + mr - 1) / mr, np = (N + nr - 1) / nr;
    float *ap = a_panels((size_t)ma * mr * kern.kc_max),
          *bp = b_panels((size_t)np * nr * kern.kc_max);
    auxinfo_t aux;
    packed_auxinfo(&aux);
    float al = alpha;
    for (int k0 = 0, kb; k0 < K; k0 += kb) {
        kb = k_block(k0, K);
        float bk = k0 ? 1.0f : beta;
        pack_a(ap, A, lda, M, 0, ma * mr, k0, kb);
        pack_b(bp, transB, B, ldb, N, k0, kb);
        for (int j = 0; j < np; j++) {
            const float *b = bp + (size_t)j * nr * kb;
            const int n = N - j * nr < nr ? N - j * nr : nr;
            for (int i = 0; i < ma; i++) {
                const float *a = ap + (size_t)i * mr * kb;
                const int m = M - i * mr < mr ? M - i * mr : mr;
                float *c = C + (size_t)i * mr * ldc + (size_t)j * nr;
                bli_auxinfo_set_next_a(i + 1 < ma ? (float *)a + (size_t)mr * kb : (float *)a,
                                       &aux);
                bli_auxinfo_set_next_b((float *)b, &aux);
                kernel_tile(m, n, kb, &al, a, b, &bk, c, ldc, &aux);
            }
        }
    }
    return 1;
}

/* epi over all of C[M, N], in blocks of rows across the threads */
static void epilogue_all(tfm_gemm_epilogue epi, void *ctx, float *C, int ldc, int M, int N)
{
#pragma omp parallel for schedule(static) if ((size_t)M * N >= (1 << 15))
    for (int r = 0; r < M; r += 16)
        epi(ctx, C + (size_t)r * ldc, ldc, r, M - r < 16 ? M - r : 16, 0, N);
}

/* One product's work as items claimed in turn by whichever thread is free.
 * Static shares wait for the slower thread, and on a shared machine one
 * core or the other runs slower for seconds at a time: through BERT-base
 * on one sentence the threads' finishing times differed by ~10% of the
 * products' time (claims: 3% faster end to end).  Items go K block by K
 * block; an item waits for its block of C to finish the K block before
 * (almost never: that was claimed a whole K block earlier), so every
 * element sums its K blocks in the same order through the same kernel
 * calls as in BLIS, whoever runs them. */
typedef struct {
    const float *A;
    int lda, M, N, K, mr, nr, ma, np, mcp, nk, nic;
    const tfm_gemm_b *B;
    float *C;
    int ldc;
    tfm_gemm_epilogue epi;
    void *ctx;
    const float *apack; /* all of A packed (shared), else NULL: items pack */
    int items;
    int *done;          /* K blocks finished, per block of C an item owns */
    int next __attribute__((aligned(64))); /* the next unclaimed item, its own line */
} product;

static int claim(product *p)
{
    return __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
}

/* K block b: columns [k0, k0 + kb) of A, rows of B (every block but the
 * last is kc long) */
static void k_range(const product *p, int b, int *k0, int *kb)
{
    *k0 = b * (int)kern.kc;
    *kb = k_block(*k0, p->K);
}

/* Column panel j of B's K block [k0, k0 + kb) */
static float *b_panel(const product *p, int k0, int kb, int j)
{
    return p->B->panels + (size_t)k0 * p->np * p->nr + (size_t)j * kb * p->nr;
}

/* The kernel over row panels [ic, ie) and column panel j of K block
 * [k0, k0 + kb), A's panel ic at a0 and the next at astride; pf: lines
 * to bring into L2 meanwhile, a share per kernel call (a sentence's
 * weights come from memory once per product, and at 128 rows a panel
 * serves only 22 calls, too few to hide the fetch: one sentence 6%
 * faster); then, after the last K block, the epilogue. */
static void run_panel(const product *p, auxinfo_t *aux, const float *a0, size_t astride,
                      int ic, int ie, int j, int k0, int kb, const char *pf, int pf_lines)
{
    const int mr = p->mr, nr = p->nr, M = p->M;
    float one = 1.0f, beta = k0 ? 1.0f : 0.0f;
    float *bp = b_panel(p, k0, kb, j);
    const int n = p->N - j * nr < nr ? p->N - j * nr : nr;
    const int pf_step = (pf_lines + (ie - ic) - 1) / (ie - ic);
    for (int i = ic; i < ie; i++) {
        const int l0 = (i - ic) * pf_step;
        for (int l = l0; l < l0 + pf_step && l < pf_lines; l++)
            __builtin_prefetch(pf + (size_t)l * 64, 0, 2);
        float *ap = (float *)a0 + (size_t)(i - ic) * astride;
        const int m = M - i * mr < mr ? M - i * mr : mr;
        bli_auxinfo_set_next_a(i + 1 < ie ? ap + astride : ap, aux);
        bli_auxinfo_set_next_b(bp, aux);
        float *c = p->C + (size_t)i * mr * p->ldc + (size_t)j * nr;
        kernel_tile(m, n, kb, &one, ap, bp, &beta, c, p->ldc, aux);
    }
    if (k0 + kb == p->K && p->epi) {
        const int r0 = ic * mr, rows = (ie * mr < M ? ie * mr : M) - r0;
        p->epi(p->ctx, p->C + (size_t)r0 * p->ldc + (size_t)j * nr, p->ldc, r0, rows, j * nr, n);
    }
}

static void await(const int *done, int b)
{
    while (__atomic_load_n(done, __ATOMIC_ACQUIRE) < b)
        tfm_spin_pause();
}

/* Claims the next run of items, shorter as the K block's items run out
 * (OpenMP's guided schedule): long runs keep each thread's reads of B
 * sequential and claims rare, short ones at the end let a thread that got
 * ahead take over the slower one's share.  Returns the first; *n the count. */
static int claim_run(product *p, int per_k, int nthreads, int *n)
{
    int cur = __atomic_load_n(&p->next, __ATOMIC_RELAXED), len;
    do {
        if (cur >= p->items)
            return p->items;
        const int left = per_k - cur % per_k;
        len = left / (2 * nthreads);
        len = len < 1 ? 1 : len;
    } while (!__atomic_compare_exchange_n(&p->next, &cur, cur + len, 1, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    *n = len;
    return cur;
}

/* Shared A: an item is one column panel of one block of rows in one K
 * block. */
static void run_shared(product *p, auxinfo_t *aux, int nthreads)
{
    const int per_k = p->nic * p->np;
    int len = 0, run = claim_run(p, per_k, nthreads, &len);
    while (run < p->items) {
        /* the next run is claimed as the last item of this one starts, so
         * that its first panel of B can be prefetched meanwhile */
        int next_len = 0, next_run = p->items;
        for (int it = run; it < run + len; it++) {
            if (it == run + len - 1)
                next_run = claim_run(p, per_k, nthreads, &next_len);
            const int b = it / per_k, icb = it % per_k / p->np, j = it % p->np;
            int k0, kb;
            k_range(p, b, &k0, &kb);
            const int ic = icb * p->mcp, ie = ic + p->mcp < p->ma ? ic + p->mcp : p->ma;
            const int nx = it + 1 < run + len ? it + 1 : next_run;
            const char *pf = NULL;
            int pf_lines = 0;
            if (nx < p->items && (nx / per_k != b || nx % p->np != j)) {
                int nk0, nkb;
                k_range(p, nx / per_k, &nk0, &nkb);
                pf = (const char *)b_panel(p, nk0, nkb, nx % p->np);
                pf_lines = nkb * p->nr * (int)sizeof(float) / 64;
            }
            int *done = &p->done[icb * p->np + j];
            await(done, b);
            run_panel(p, aux, p->apack + (size_t)ic * p->mr * p->K + (size_t)k0 * p->mr,
                      (size_t)p->mr * p->K, ic, ie, j, k0, kb, pf, pf_lines);
            __atomic_store_n(done, b + 1, __ATOMIC_RELEASE);
        }
        run = next_run;
        len = next_len;
    }
}

/* A too large to share: an item is one block of mc rows in one K block;
 * its thread packs that block of A (in L2) and runs every column panel. */
static void run_blocks(product *p, auxinfo_t *aux)
{
    float *ablk = a_panels((size_t)p->mcp * p->mr * kern.kc_max);
    for (int it; (it = claim(p)) < p->items;) {
        const int b = it / p->nic, icb = it % p->nic;
        int k0, kb;
        k_range(p, b, &k0, &kb);
        const int ic = icb * p->mcp, ie = ic + p->mcp < p->ma ? ic + p->mcp : p->ma;
        await(&p->done[icb], b);
        pack_a(ablk, p->A, p->lda, p->M, ic * p->mr, (ie - ic) * p->mr, k0, kb);
        const int pf_lines = kb * p->nr * (int)sizeof(float) / 64;
        for (int j = 0; j < p->np; j++)
            run_panel(p, aux, ablk, (size_t)p->mr * kb, ic, ie, j, k0, kb,
                      (const char *)b_panel(p, k0, kb, j + 1), j + 1 < p->np ? pf_lines : 0);
        __atomic_store_n(&p->done[icb], b + 1, __ATOMIC_RELEASE);
    }
}

/* The calling thread's per-block counters, zeroed. */
static int *done_counters(size_t n)
{
    int *done = kept_buffer(KEPT_DONE, sizeof(int) * n);
    memset(done, 0, sizeof(int) * n);
    return done;
}

void tfm_gemm_packed(int M, const float *A, int lda, const tfm_gemm_b *B, float *C, int ldc,
                     tfm_gemm_epilogue epi, void *ctx)
{
    const int K = B->K, N = B->N;
    if (M <= 0)
        return;
    /* a single row too goes through the kernel (tfm_gemm would take gemv):
     * a row's result never depends on how many rows come with it.  Same
     * sums as tfm_gemm, same bits. */
    if (!B->panels) {
        tfm_gemm(0, 0, M, N, K, 1.0f, A, lda, B->B, B->ldb, 0.0f, C, ldc);
        if (epi)
            epilogue_all(epi, ctx, C, ldc, M, N);
        return;
    }
    product p = {.A = A, .lda = lda, .M = M, .N = N, .K = K, .mr = (int)kern.mr,
                 .nr = (int)kern.nr, .B = B, .C = C, .ldc = ldc, .epi = epi, .ctx = ctx};
    p.ma = (M + p.mr - 1) / p.mr;
    p.np = (N + p.nr - 1) / p.nr;
    p.mcp = (int)(kern.mc / kern.mr);
    p.nic = (p.ma + p.mcp - 1) / p.mcp;
    for (int k0 = 0, kb; k0 < K; k0 += kb, p.nk++)
        kb = k_block(k0, K);
    /* BLIS's loops: K blocks, then blocks of mc rows, then C's column
     * panels, then A's row panels.  Up to 1024 rows the threads pack all of
     * A together, once, and share it; beyond, A no longer fits in cache:
     * each item packs the block it is about to use (mc rows, one K block:
     * in L2).
     * (Finishing a strip of C over every K block before the next, to keep
     * it in L1, was 8-10% slower at 4096 rows: the weight's panels then
     * come from L3 for every block of rows.) */
    const int shared = M <= 1024;
    p.items = p.nk * p.nic * (shared ? p.np : 1);
    p.done = done_counters((size_t)p.nic * (shared ? p.np : 1));
    int nthreads = tfm_threads_now();
    if (tfm_gemm_small(M, N, K))
        nthreads = 1;
#ifdef _OPENMP
    if (omp_in_parallel())
        nthreads = 1;
#endif
    float *apack = shared ? a_panels((size_t)p.ma * p.mr * K) : NULL;
    p.apack = apack;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        if (shared) {
#pragma omp for schedule(dynamic, 2)
            for (int i = 0; i < p.ma; i++)
                pack_a(apack + (size_t)i * p.mr * K, A, lda, M, i * p.mr, p.mr, 0, K);
        }
        auxinfo_t aux;
        packed_auxinfo(&aux);
        if (shared)
            run_shared(&p, &aux, nthreads);
        else
            run_blocks(&p, &aux);
    }
}
