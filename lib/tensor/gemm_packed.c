/* The packed-weight product driver (tensor/gemm.h tfm_gemm_b_pack,
 * tfm_gemm_packed, and tfm_gemm1's in-cache path): BLIS 0.9's micro-kernel
 * called directly over panels packed once, with BLIS's blocking, so the
 * sums and bits are BLIS's own. */
#include "config.h"

#include "tensor/gemm.h"
#include "base/err.h"
#include "base/progress.h"
#include "tensor/blis_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
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
    /* The kernel writes column-stored C directly and row-stored C through
     * a temporary tile copied element by element (BLIS 0.9's skx kernel):
     * at a row stride of a multiple of 4 KB (N = 3072: 12 KB) the copy's
     * 32 rows fall into one L1 set, and the kernel over 480×3072 tiles ran
     * at 20-24 GFLOP/s, against 69 with rows of 3088 floats and 74-85 with
     * C by columns (one core of a shared Zen 5).  Such a
     * kernel computes Cᵀ = Bᵀ·Aᵀ instead, as BLIS's own call does: B's
     * columns are the kernel's mr-wide left panels, A's rows its nr-wide
     * right panels, and C is column-stored for it.  Each element is the
     * same chain of fused multiply-adds either way: same bits. */
    int trans;
    dim_t mr, nr, mc, kc, kc_max;
    sgemm_ukr ukr;
    cntx_t *cntx;
} kern;

static int kernel_ready(void)
{
    tfm_blas_ensure();
    if (!kern.ready) {
        cntx_t *cntx = (cntx_t *)bli_gks_query_cntx(); /* const in BLIS 1.x */
        kern.cntx = cntx;
        kern.mr = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MR, cntx);
        kern.nr = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_NR, cntx);
        kern.mc = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_MC, cntx);
        kern.kc = bli_cntx_get_blksz_def_dt(BLIS_FLOAT, BLIS_KC, cntx);
        kern.kc_max = bli_cntx_get_blksz_max_dt(BLIS_FLOAT, BLIS_KC, cntx);
#ifdef TFM_BLIS_1
        kern.ukr = (sgemm_ukr)bli_cntx_get_ukr_dt(BLIS_FLOAT, BLIS_GEMM_UKR, cntx);
        kern.trans = bli_cntx_ukr_prefers_cols_dt(BLIS_FLOAT, BLIS_GEMM_UKR, cntx);
#else
        kern.ukr = (sgemm_ukr)bli_cntx_get_l3_nat_ukr_dt(BLIS_FLOAT, BLIS_GEMM_UKR, cntx);
        kern.trans = bli_cntx_l3_nat_ukr_prefers_cols_dt(BLIS_FLOAT, BLIS_GEMM_UKR, cntx);
#endif
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

/* Panel widths: of the operand on C's column side (B: the weights) and on
 * its row side (A: the activations), by the kernel's orientation. */
static int b_width(void)
{
    return (int)(kern.trans ? kern.mr : kern.nr);
}

static int a_width(void)
{
    return (int)(kern.trans ? kern.nr : kern.mr);
}

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

/* n (<= w) columns of B (row stride ldb) from its row k0, kb rows, as one
 * panel stored row by row (w floats a row, zero past n). */
static void pack_cols(float *d, int w, const float *B, int ldb, int n, int k0, int kb)
{
    for (int k = 0; k < kb; k++) {
        const float *src = B + (size_t)(k0 + k) * ldb;
        float *dk = d + (size_t)k * w;
        if (n == w) {
            for (int c = 0; c < w; c++)
                dk[c] = src[c];
        } else {
            memcpy(dk, src, sizeof(float) * (size_t)n);
            memset(dk + n, 0, sizeof(float) * (size_t)(w - n));
        }
    }
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
    const int w = b_width(), np = (N + w - 1) / w;
    p->panels = tfm_aligned_alloc(sizeof(float) * (size_t)K * np * w);
    for (int k0 = 0, kb; k0 < K; k0 += kb) {
        kb = k_block(k0, K);
        float *blk = p->panels + (size_t)k0 * np * w;
#pragma omp parallel for schedule(static) if ((size_t)kb * N >= (1 << 16))
        for (int j = 0; j < np; j++)
            pack_cols(blk + (size_t)j * kb * w, w, B + (size_t)j * w, ldb, min_int(N - j * w, w),
                      k0, kb);
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

/* mr <= 8 rows of a panel (n of them in A, the rest zero), columns
 * [k0, k0 + kb): eight columns at a time, transposed in registers, column
 * k at d + k·ld.  With mr < 8 each column's store spills 8 - mr floats
 * past the mr rows, which later stores overwrite (the next column's, or
 * the panel's other rows' when packed after); only the panel's last column
 * is stored exactly. */
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

/* Rows [r0, r0 + rows) (rows a multiple of w) and columns [k0, k0 + kb)
 * of X (rows rows_x, row stride ldx) as w-row panels, each stored column
 * by column, zero rows past rows_x: A's rows, or Bᵀ's. */
static void pack_rows(float *dst, int w, const float *X, int ldx, int rows_x, int r0, int rows,
                      int k0, int kb)
{
    for (int i = 0; i < rows; i += w) {
        float *d = dst + (size_t)i * kb;
        const int n = min_int(rows_x - (r0 + i), w);
#ifdef __AVX__
        /* eight rows at a time, the last (narrower) group first: its
         * spills land in the next column's first rows, stored after */
        for (int h = (w - 1) / 8 * 8; h >= 0; h -= 8)
            pack_panel8(d + h, w, X + (size_t)(r0 + i + h) * ldx, ldx,
                        n - h < 0 ? 0 : min_int(n - h, 8), min_int(w - h, 8), k0, kb);
#else
        for (int k = 0; k < kb; k++)
            for (int r = 0; r < w; r++)
                d[(size_t)k * w + r] = r < n ? X[(size_t)(r0 + i + r) * ldx + k0 + k] : 0.0f;
#endif
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

/* One m×n tile of the kernel's output at c (row stride rs, column stride
 * cs): the short-row loop where it applies (row-stored, m < mr, alpha 1,
 * beta 0 or 1), else BLIS's kernel. */
static void kernel_tile(int m, int n, int kb, float *alpha, const float *a, const float *b,
                        float *beta, float *c, inc_t rs, inc_t cs, auxinfo_t *aux)
{
    if (cs == 1 && m < kern.mr && *alpha == 1.0f && (*beta == 0.0f || *beta == 1.0f) &&
        short_panel(m, n, kb, a, b, *beta != 0.0f, c, (int)rs))
        return;
    kern.ukr(m, n, kb, alpha, (float *)a, (float *)b, beta, c, rs, cs, aux, kern.cntx);
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

/* K block [k0, k0 + kb) of op(B) (B, or Bᵀ with transB) as w-column
 * panels stored row by row, zero columns past N. */
static void pack_b(float *dst, int w, int transB, const float *B, int ldb, int N, int k0, int kb)
{
    const int np = (N + w - 1) / w;
    if (transB) {
        pack_rows(dst, w, B, ldb, N, 0, np * w, k0, kb);
        return;
    }
    for (int j = 0; j < np; j++)
        pack_cols(dst + (size_t)j * w * kb, w, B + (size_t)j * w, ldb, min_int(N - j * w, w), k0,
                  kb);
}

/* The calling thread's buffer for B's panels in gemm1_packed. */
static float *b_panels(size_t floats)
{
    return kept_buffer(KEPT_B, sizeof(float) * floats);
}

/* tfm_gemm1 through the kernel directly, for products that fit in cache
 * (attention's heads: BLIS's own call spends ~40% of a 128×128×64 product
 * in its set-up and packing).  BLIS's K blocks and kernel calls, alpha and
 * beta applied by the kernel, C stored as the kernel prefers: same bits.
 * Only for beta 0 or 1, whose bits do not depend on which of the kernel's
 * two store paths (C as it prefers, or through a tile) writes C.  0 if not
 * taken. */
int tfm_gemm1_packed(int transB, int M, int N, int K, float alpha, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc)
{
    enum { MAX_FLOATS = 1 << 18 }; /* of each operand: 1 MB */
    /* alpha 0 only scales C in BLIS: no product, no NaN from A or B */
    if (M < 2 || N < 2 || K < 1 || alpha == 0.0f || (beta != 0.0f && beta != 1.0f) ||
        (size_t)M * K > MAX_FLOATS ||
        (size_t)K * N > MAX_FLOATS || !kernel_ready())
        return 0;
    const int mr = (int)kern.mr, nr = (int)kern.nr, trans = kern.trans;
    /* the kernel's left (mr-wide) and right (nr-wide) operands, and its C */
    const int L = trans ? N : M, R = trans ? M : N;
    const int nl = (L + mr - 1) / mr, np = (R + nr - 1) / nr;
    const inc_t rs = trans ? 1 : ldc, cs = trans ? ldc : 1;
    float *lp = a_panels((size_t)nl * mr * kern.kc_max),
          *rp = b_panels((size_t)np * nr * kern.kc_max);
    auxinfo_t aux;
    packed_auxinfo(&aux);
    float al = alpha;
    for (int k0 = 0, kb; k0 < K; k0 += kb) {
        kb = k_block(k0, K);
        float bk = k0 ? 1.0f : beta;
        if (trans) {
            pack_b(lp, mr, transB, B, ldb, N, k0, kb);
            pack_rows(rp, nr, A, lda, M, 0, np * nr, k0, kb);
        } else {
            pack_rows(lp, mr, A, lda, M, 0, nl * mr, k0, kb);
            pack_b(rp, nr, transB, B, ldb, N, k0, kb);
        }
        for (int j = 0; j < np; j++) {
            const float *b = rp + (size_t)j * nr * kb;
            const int n = min_int(R - j * nr, nr);
            for (int i = 0; i < nl; i++) {
                const float *a = lp + (size_t)i * mr * kb;
                const int m = min_int(L - i * mr, mr);
                float *c = C + (size_t)i * mr * rs + (size_t)j * nr * cs;
                bli_auxinfo_set_next_a(i + 1 < nl ? (float *)a + (size_t)mr * kb : (float *)a,
                                       &aux);
                bli_auxinfo_set_next_b((float *)b, &aux);
                kernel_tile(m, n, kb, &al, a, b, &bk, c, rs, cs, &aux);
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
 * calls as in BLIS, whoever runs them.
 *
 * In the kernel's terms C is L×R: its tiles are mr of the L rows (left
 * panels, in blocks of mcp panels) by nr of the R columns (right panels).
 * Without trans L is A's M rows and R is B's N columns; with trans
 * (kern.trans) the other way round and C is column-stored for the kernel. */
typedef struct {
    const float *A;
    int lda, M, N, K, mr, nr, mcp, nk, nic;
    int trans, L, R, nl, np; /* np: right panels */
    int wa, nb;              /* A's panel width, B's panel count */
    inc_t rs, cs;            /* C's strides for the kernel */
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

/* Panel j of B's K block [k0, k0 + kb) (K block by K block; panels of a
 * block kb·width apart) */
static const float *b_panel(const product *p, int k0, int kb, int j)
{
    const int w = b_width();
    return p->B->panels + (size_t)k0 * p->nb * w + (size_t)j * kb * w;
}

/* Panel i of all of A packed, at K block k0 (panel by panel, each over
 * all of K) */
static const float *a_panel(const product *p, int k0, int i)
{
    return p->apack + (size_t)i * p->wa * p->K + (size_t)k0 * p->wa;
}

/* The right panel j of K block [k0, k0 + kb), with A shared */
static const float *right_panel(const product *p, int k0, int kb, int j)
{
    return p->trans ? a_panel(p, k0, j) : b_panel(p, k0, kb, j);
}

/* The kernel over left panels [ic, ie) (panel ic at l0, the next lstride
 * further) and right panel j (at rp) of K block [k0, k0 + kb); pf: lines
 * to bring into L2 meanwhile, a share per kernel call (a sentence's
 * weights come from memory once per product, and at 128 rows a panel
 * serves only 22 calls, too few to hide the fetch: one sentence 6%
 * faster); then, after the last K block, the epilogue on the block. */
static void run_panel(const product *p, auxinfo_t *aux, const float *l0, size_t lstride,
                      int ic, int ie, const float *rp, int j, int k0, int kb, const char *pf,
                      int pf_lines)
{
    const int mr = p->mr, nr = p->nr;
    float one = 1.0f, beta = k0 ? 1.0f : 0.0f;
    const int n = min_int(p->R - j * nr, nr);
    const int pf_step = (pf_lines + (ie - ic) - 1) / (ie - ic);
    for (int i = ic; i < ie; i++) {
        const int l = (i - ic) * pf_step;
        for (int q = l; q < l + pf_step && q < pf_lines; q++)
            __builtin_prefetch(pf + (size_t)q * 64, 0, 2);
        float *lp = (float *)l0 + (size_t)(i - ic) * lstride;
        const int m = min_int(p->L - i * mr, mr);
        bli_auxinfo_set_next_a(i + 1 < ie ? lp + lstride : lp, aux);
        bli_auxinfo_set_next_b((float *)rp, aux);
        float *c = p->C + (size_t)i * mr * p->rs + (size_t)j * nr * p->cs;
        kernel_tile(m, n, kb, &one, lp, rp, &beta, c, p->rs, p->cs, aux);
    }
    if (k0 + kb == p->K && p->epi) {
        const int l0i = ic * mr, lsize = min_int(ie * mr, p->L) - l0i, r0 = j * nr;
        if (p->trans)
            p->epi(p->ctx, p->C + (size_t)r0 * p->ldc + l0i, p->ldc, r0, n, l0i, lsize);
        else
            p->epi(p->ctx, p->C + (size_t)l0i * p->ldc + r0, p->ldc, l0i, lsize, r0, n);
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

/* Shared A: an item is one right panel of one block of left panels in
 * one K block. */
static void run_shared(product *p, auxinfo_t *aux, int nthreads)
{
    const int per_k = p->nic * p->np;
    int len = 0, run = claim_run(p, per_k, nthreads, &len);
    while (run < p->items) {
        /* the next run is claimed as the last item of this one starts, so
         * that its first right panel can be prefetched meanwhile */
        int next_len = 0, next_run = p->items;
        for (int it = run; it < run + len; it++) {
            if (it == run + len - 1)
                next_run = claim_run(p, per_k, nthreads, &next_len);
            const int b = it / per_k, icb = it % per_k / p->np, j = it % p->np;
            int k0, kb;
            k_range(p, b, &k0, &kb);
            const int ic = icb * p->mcp, ie = min_int(ic + p->mcp, p->nl);
            const int nx = it + 1 < run + len ? it + 1 : next_run;
            const char *pf = NULL;
            int pf_lines = 0;
            if (nx < p->items && (nx / per_k != b || nx % p->np != j)) {
                int nk0, nkb;
                k_range(p, nx / per_k, &nk0, &nkb);
                pf = (const char *)right_panel(p, nk0, nkb, nx % p->np);
                pf_lines = nkb * p->nr * (int)sizeof(float) / 64;
            }
            int *done = &p->done[icb * p->np + j];
            await(done, b);
            if (p->trans)
                run_panel(p, aux, b_panel(p, k0, kb, ic), (size_t)kb * p->mr, ic, ie,
                          a_panel(p, k0, j), j, k0, kb, pf, pf_lines);
            else
                run_panel(p, aux, a_panel(p, k0, ic), (size_t)p->mr * p->K, ic, ie,
                          b_panel(p, k0, kb, j), j, k0, kb, pf, pf_lines);
            __atomic_store_n(done, b + 1, __ATOMIC_RELEASE);
        }
        run = next_run;
        len = next_len;
    }
}

/* A too large to share (without trans): an item is one block of mc rows
 * in one K block; its thread packs that block of A (in L2) and runs every
 * column panel. */
static void run_blocks(product *p, auxinfo_t *aux)
{
    float *ablk = a_panels((size_t)p->mcp * p->mr * kern.kc_max);
    for (int it; (it = claim(p)) < p->items;) {
        const int b = it / p->nic, icb = it % p->nic;
        int k0, kb;
        k_range(p, b, &k0, &kb);
        const int ic = icb * p->mcp, ie = min_int(ic + p->mcp, p->nl);
        await(&p->done[icb], b);
        pack_rows(ablk, p->mr, p->A, p->lda, p->M, ic * p->mr, (ie - ic) * p->mr, k0, kb);
        const int pf_lines = kb * p->nr * (int)sizeof(float) / 64;
        for (int j = 0; j < p->np; j++)
            run_panel(p, aux, ablk, (size_t)p->mr * kb, ic, ie, b_panel(p, k0, kb, j), j, k0,
                      kb, (const char *)b_panel(p, k0, kb, j + 1), j + 1 < p->np ? pf_lines : 0);
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

/* An epilogue over rows offset by r0: a product over a slice of the rows */
typedef struct {
    tfm_gemm_epilogue epi;
    void *ctx;
    int r0;
} row_shift;

static void shifted_epilogue(void *ctx, float *C, int ldc, int r0, int m, int c0, int n)
{
    const row_shift *s = ctx;
    s->epi(s->ctx, C, ldc, s->r0 + r0, m, c0, n);
}

/* With trans, A is shared in slices of this many rows (a multiple of nr):
 * BLIS packs up to nc (3072 for skx) rows of its right operand per K
 * block. */
static int trans_slice_rows(void)
{
    return (int)(1024 / kern.nr * kern.nr);
}

/* The packed product on nthreads threads (B->panels set, M >= 1). */
static void packed_run(int nthreads, int M, const float *A, int lda, const tfm_gemm_b *B,
                       float *C, int ldc, tfm_gemm_epilogue epi, void *ctx)
{
    const int K = B->K, N = B->N;
    const int trans = kern.trans, slice = trans_slice_rows();
    if (trans && M > slice) {
        for (int r0 = 0; r0 < M; r0 += slice) {
            row_shift s = {epi, ctx, r0};
            packed_run(nthreads, min_int(M - r0, slice), A + (size_t)r0 * lda, lda, B,
                       C + (size_t)r0 * ldc, ldc, epi ? shifted_epilogue : NULL, &s);
        }
        return;
    }
    product p = {.A = A, .lda = lda, .M = M, .N = N, .K = K, .mr = (int)kern.mr,
                 .nr = (int)kern.nr, .trans = trans, .L = trans ? N : M, .R = trans ? M : N,
                 .wa = a_width(), .nb = (N + b_width() - 1) / b_width(),
                 .rs = trans ? 1 : ldc, .cs = trans ? ldc : 1,
                 .B = B, .C = C, .ldc = ldc, .epi = epi, .ctx = ctx};
    p.nl = (p.L + p.mr - 1) / p.mr;
    p.np = (p.R + p.nr - 1) / p.nr;
    p.mcp = (int)(kern.mc / kern.mr);
    p.nic = (p.nl + p.mcp - 1) / p.mcp;
    for (int k0 = 0, kb; k0 < K; k0 += kb, p.nk++)
        kb = k_block(k0, K);
    /* BLIS's loops: K blocks, then blocks of mc left rows, then the right
     * panels, then the left panels.  Up to 1024 rows the threads pack all
     * of A together, once, and share it; beyond, A no longer fits in
     * cache: without trans each item packs the block it is about to use
     * (mc rows, one K block: in L2); with trans (A on the right) the
     * product goes by slices of rows (above), as BLIS's nc blocks.
     * (Finishing a strip of C over every K block before the next, to keep
     * it in L1, was 8-10% slower at 4096 rows: the weight's panels then
     * come from L3 for every block of rows.) */
    const int shared = trans || M <= 1024;
    p.items = p.nk * p.nic * (shared ? p.np : 1);
    p.done = done_counters((size_t)p.nic * (shared ? p.np : 1));
    const int wa = p.wa, na = (M + wa - 1) / wa;
    float *apack = shared ? a_panels((size_t)na * wa * K) : NULL;
    p.apack = apack;
#pragma omp parallel num_threads(nthreads) if (nthreads > 1)
    {
        if (shared) {
#pragma omp for schedule(dynamic, 2)
            for (int i = 0; i < na; i++)
                pack_rows(apack + (size_t)i * wa * K, wa, A, lda, M, i * wa, wa, 0, K);
        }
        auxinfo_t aux;
        packed_auxinfo(&aux);
        if (shared)
            run_shared(&p, &aux, nthreads);
        else
            run_blocks(&p, &aux);
    }
}

/* BLIS's own call on B, then the epilogue: the other path */
static void blis_run(int nthreads, int M, const float *A, int lda, const tfm_gemm_b *B, float *C,
                     int ldc, tfm_gemm_epilogue epi, void *ctx)
{
    tfm_gemm_on(nthreads, 0, 0, M, B->N, B->K, 1.0f, A, lda, B->B, B->ldb, 0.0f, C, ldc);
    if (epi)
        epilogue_all(epi, ctx, C, ldc, M, B->N);
}

/* The paths chosen so far, per shape: few (a model's weight shapes times
 * the row counts' powers of two), so a list. */
typedef struct {
    int mb, K, N, threads;
    tfm_gemm_path path;
} path_choice;

static struct {
    pthread_mutex_t lock;
    path_choice *v;
    int n, cap;
} chosen = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* M's bucket: its power of two (2-3, 4-7, 8-15, ...) */
static int m_bucket(int M)
{
    int b = 0;
    while (M >>= 1)
        b++;
    return b;
}

static tfm_gemm_path choice_find(int mb, int K, int N, int threads)
{
    tfm_gemm_path path = TFM_GEMM_AUTO;
    pthread_mutex_lock(&chosen.lock);
    for (int i = 0; i < chosen.n; i++) {
        const path_choice *c = &chosen.v[i];
        if (c->mb == mb && c->K == K && c->N == N && c->threads == threads) {
            path = c->path;
            break;
        }
    }
    pthread_mutex_unlock(&chosen.lock);
    return path;
}

static void choice_keep(int mb, int K, int N, int threads, tfm_gemm_path path)
{
    pthread_mutex_lock(&chosen.lock);
    int i = 0;
    while (i < chosen.n && !(chosen.v[i].mb == mb && chosen.v[i].K == K && chosen.v[i].N == N &&
                             chosen.v[i].threads == threads))
        i++;
    if (i == chosen.n) { /* else another thread timed it too: its choice stays */
        if (chosen.n == chosen.cap) {
            chosen.cap = chosen.cap ? 2 * chosen.cap : 16;
            chosen.v = tfm_realloc(chosen.v, sizeof *chosen.v * (size_t)chosen.cap);
        }
        chosen.v[chosen.n++] = (path_choice){mb, K, N, threads, path};
    }
    pthread_mutex_unlock(&chosen.lock);
}

tfm_gemm_path tfm_gemm_packed_choice(int M, int K, int N, int threads)
{
    return M < 2 ? TFM_GEMM_PACKED : choice_find(m_bucket(M), K, N, threads);
}

/* Seconds of CPU the calling thread has used */
static double thread_cpu(void)
{
    struct timespec t;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0)
        return tfm_now();
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Runs the product both ways, alternately and without the epilogue (it
 * may add into another array: tfm_linear_epilogue's residual), and
 * returns the way whose fastest run was faster.  Two runs each at least
 * (the first pays for cold caches and buffers), more until the runs have
 * taken 20 ms, up to five pairs (paid once per weight shape and power of
 * two of rows).  On one thread a run is timed by the thread's CPU time:
 * on a shared machine (where tfm_threads_now gives one thread) a run of
 * more than a few ms is almost always preempted, and the fastest of a few
 * wall times picked a path 2.5 times slower.  On several threads, by the
 * wall clock, and only runs during which no thread of the process was
 * preempted count, if each way had one.  BLIS's call must win by 3%: the
 * timing leaves out the
 * epilogue, which the panels run on blocks still in cache and BLIS's call
 * as one more pass over C, and a tie within the noise keeps the panels. */
static tfm_gemm_path time_paths(int nthreads, int M, const float *A, int lda,
                                const tfm_gemm_b *B, float *C, int ldc)
{
    double best[2] = {1e300, 1e300}, clean[2] = {1e300, 1e300};
    double (*clock)(void) = nthreads == 1 ? thread_cpu : tfm_now;
    double spent = 0;
    for (int rep = 0; rep < 5; rep++) {
        if (rep >= 2 && spent >= 0.02)
            break;
        for (int way = 0; way < 2; way++) {
            struct rusage u0, u1;
            getrusage(RUSAGE_SELF, &u0);
            const double t0 = clock();
            if (way)
                blis_run(nthreads, M, A, lda, B, C, ldc, NULL, NULL);
            else
                packed_run(nthreads, M, A, lda, B, C, ldc, NULL, NULL);
            const double t = clock() - t0;
            getrusage(RUSAGE_SELF, &u1);
            best[way] = t < best[way] ? t : best[way];
            if (u1.ru_nivcsw == u0.ru_nivcsw && t < clean[way])
                clean[way] = t;
            spent += t;
        }
    }
    if (nthreads > 1 && clean[0] < 1e300 && clean[1] < 1e300)
        memcpy(best, clean, sizeof best);
    return best[1] < 0.97 * best[0] ? TFM_GEMM_BLIS : TFM_GEMM_PACKED;
}

void tfm_gemm_packed_ex(int M, const float *A, int lda, const tfm_gemm_b *B, float *C, int ldc,
                        tfm_gemm_epilogue epi, void *ctx, tfm_gemm_path path)
{
    const int K = B->K, N = B->N;
    if (M <= 0)
        return;
    int nthreads = tfm_threads_now();
    if (tfm_gemm_small(M, N, K))
        nthreads = 1;
#ifdef _OPENMP
    if (omp_in_parallel())
        nthreads = 1;
#endif
    /* a single row too goes through the kernel (BLIS's call would take
     * gemv): a row's result never depends on how many rows come with it */
    if (!B->panels)
        path = TFM_GEMM_BLIS;
    else if (M == 1)
        path = TFM_GEMM_PACKED;
    if (path == TFM_GEMM_AUTO) {
        const int mb = m_bucket(M);
        path = choice_find(mb, K, N, nthreads);
        if (path == TFM_GEMM_AUTO) {
            path = time_paths(nthreads, M, A, lda, B, C, ldc);
            choice_keep(mb, K, N, nthreads, path);
        }
    }
    if (path == TFM_GEMM_BLIS)
        blis_run(nthreads, M, A, lda, B, C, ldc, epi, ctx);
    else
        packed_run(nthreads, M, A, lda, B, C, ldc, epi, ctx);
}

void tfm_gemm_packed(int M, const float *A, int lda, const tfm_gemm_b *B, float *C, int ldc,
                     tfm_gemm_epilogue epi, void *ctx)
{
    tfm_gemm_packed_ex(M, A, lda, B, C, ldc, epi, ctx, TFM_GEMM_AUTO);
}
