/* braze_dnnl_smallm.c: C[M,N] = epilogue(A[M,K] @ W^T) for small M, straight from the
 * weight oneDNN packed (braze_pack_b), with no primitive.
 *
 * Why: at small M a linear layer streams its weight from memory once per call. oneDNN's
 * brgemm walks the packed weight in 4 KB pieces spread over every 64-column panel, and
 * measured 16.8 GB/s over BERT-base's weights at M = 16 against 30 GB/s read bandwidth on
 * 2 threads: memory and FMAs do not overlap (20.2 ms, about the sum of 11.3 ms to read and
 * 7.5 ms to compute). Here each thread reads whole panels front to back, one sequential
 * stream, and asks L2 for the lines ahead (docs/gemm.md has the measurements).
 *
 * The packed layout is oneDNN's BA16a64b (checked at pack time, smallm_layout): column
 * panel p (64 wide, N padded) holds rows k = 0..Kp-1 of 64 floats, contiguous, so element
 * (k, n) is at (n / 64) * Kp * 64 + k * 64 + n % 64.
 *
 * A bfloat16 weight (AVX512_BF16 builds) is oneDNN's BA16a64b2a: the same panels, each row the
 * 64 columns' pairs (k, k + 1), so the tiles below run unchanged on 32-bit "floats" that are
 * pairs, with VDPBF16PS in place of the FMA (A bfloat16, the result float32 or bfloat16). */

/* a K above this sums each chunk of K from zero and then adds it (smallm_tile, smallw_tile and
 * braze_dnnl_smallm_avx2.c's sw2_tile): chains of float32 adds KC + K / KC long, not K. GPT-2's
 * input gradient through its LM head (K = 50257 words) was 6.5x further from float64 than
 * eager's in one chain. Below it, the one chain: chunked everywhere, a training step of BERT-base
 * at M = 48 took 155 ms against 142 (the in-place weights' chunks must then be the packed
 * kernel's 64 rows, not 32, for the same bits). */
#define SMALLM_LONG_K 4096

#if defined(__AVX512F__)
#include <immintrin.h>
#include <omp.h>
#ifndef BZ_VB
#define BZ_VB 64
#endif
#include "braze_vec.h"

#define SMALLM_MR 6     /* rows per register tile: 6 x 4 accumulators + 4 weight vectors */
#define SMALLM_KC 64    /* weight rows per chunk (256 B each: 16 KB, in L1) */
#define SMALLM_PFD 64   /* weight rows prefetched ahead (prefetcht1; T0 measured slower) */
#define SMALLM_MB 48    /* rows of A per block: acc is SMALLM_MB x 64 floats (12 KB) */

static int smallm_act_ok(int act) {
    switch (act & 0xff) {
    case BRAZE_ACT_NONE: case BRAZE_ACT_RELU: case BRAZE_ACT_GELU_ERF: case BRAZE_ACT_GELU_TANH:
    case BRAZE_ACT_SILU: case BRAZE_ACT_SIGMOID: case BRAZE_ACT_RELU_EAGER: case BRAZE_ACT_RELU6_EAGER: return 1;
    default: return 0; /* tanh: oneDNN's */
    }
}

/* The activation with oneDNN's post-op values at special inputs, so a call gives the same
 * bits at M = 48 and at M = 49: gelu(+-inf), gelu_tanh(-inf) and silu(-inf) are NaN (eager's too;
 * braze's own kernels take the limits: docs/semantics.md); relu keeps NaN. */
BZ_INLINE __m512 smallm_act(int act, __m512 v) {
    const __m512 inf = _mm512_set1_ps(INFINITY), nan = _mm512_set1_ps(NAN);
    switch (act & 0xff) {
    case BRAZE_ACT_RELU: return _mm512_max_ps(_mm512_setzero_ps(), v); /* maxps returns v when v is NaN */
    case BRAZE_ACT_GELU_ERF:
        return _mm512_mask_mov_ps((__m512)bz_vgelu((bz_vf)v), _mm512_cmp_ps_mask(_mm512_abs_ps(v), inf, _CMP_EQ_OQ),
                                  nan);
    case BRAZE_ACT_GELU_TANH: /* GPT-2's: NaN at -inf too */
        return _mm512_mask_mov_ps((__m512)bz_vgelu_tanh((bz_vf)v), _mm512_cmp_ps_mask(v, -inf, _CMP_EQ_OQ), nan);
    case BRAZE_ACT_SILU:
        return _mm512_mask_mov_ps((__m512)bz_vsilu((bz_vf)v), _mm512_cmp_ps_mask(v, -inf, _CMP_EQ_OQ), nan);
    case BRAZE_ACT_SIGMOID: return (__m512)bz_vsigmoid((bz_vf)v);
    case BRAZE_ACT_RELU6_EAGER: /* as eager_relu (braze_dnnl_core.c) */
        v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_set1_ps(6.f), _CMP_GT_OQ), _mm512_set1_ps(6.f));
        /* fall through */
    case BRAZE_ACT_RELU_EAGER:
        return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ), _mm512_setzero_ps());
    default: return v;
    }
}

#if defined(__AVX512BF16__)
/* c + a.lo * w.lo + a.hi * w.hi per float32 lane, a and w pairs of bfloat16 (VDPBF16PS: the
 * instruction oneDNN's bf16 kernels use, so a call gives the same sums at M = 48 and 49) */
BZ_INLINE __m512 smallm_dp(__m512 c, __m512 a, __m512 w) {
    return _mm512_dpbf16_ps(c, (__m512bh)a, (__m512bh)w);
}
#else
BZ_INLINE __m512 smallm_dp(__m512 c, __m512 a, __m512 w) { (void)a, (void)w; return c; } /* never called */
#endif

/* acc[0:MR, 0:64] (+)= A[m0 : m0 + MR, k0 : k1] @ P[k0 : k1, :]. With BF, a "float" is a pair of
 * bfloat16 (k counts pairs, P's rows hold 64 columns' pairs). With PF the tile also asks L2 for
 * the 64 floats at pf + k * pf_ld (while k < pf_end): the rows a later chunk or panel reads, so
 * the weight stream runs under the FMAs. */
BZ_INLINE void smallm_tile(const int MR, const int PF, const int BF, int64_t k0, int64_t k1, const float *pf,
                           int64_t pf_ld, int64_t pf_end, const float *A, int64_t K, const float *P, int64_t m0,
                           float *acc) {
    const int fresh = K > SMALLM_LONG_K; /* the chunk sums from zero, then is added to acc */
    __m512 c[SMALLM_MR][4];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < 4; j++)
            c[i][j] = k0 == 0 || fresh ? _mm512_setzero_ps() : _mm512_load_ps(acc + (m0 + i) * 64 + 16 * j);
    const float *a = A + m0 * K;
    for (int64_t k = k0; k < k1; k++) {
        const float *w = P + k * 64;
        if (PF && k < pf_end) {
            const char *q = (const char *)(pf + k * pf_ld);
            _mm_prefetch(q, _MM_HINT_T1);
            _mm_prefetch(q + 64, _MM_HINT_T1);
            _mm_prefetch(q + 128, _MM_HINT_T1);
            _mm_prefetch(q + 192, _MM_HINT_T1);
        }
        __m512 w0 = _mm512_load_ps(w), w1 = _mm512_load_ps(w + 16), w2 = _mm512_load_ps(w + 32),
               w3 = _mm512_load_ps(w + 48);
        for (int i = 0; i < MR; i++) {
            __m512 x = _mm512_set1_ps(a[i * K + k]);
            if (BF) { /* x: the pair A[i, 2k..2k+1]; w: 64 columns' pairs; 2 products per lane */
                c[i][0] = smallm_dp(c[i][0], x, w0);
                c[i][1] = smallm_dp(c[i][1], x, w1);
                c[i][2] = smallm_dp(c[i][2], x, w2);
                c[i][3] = smallm_dp(c[i][3], x, w3);
            } else {
                c[i][0] = _mm512_fmadd_ps(x, w0, c[i][0]);
                c[i][1] = _mm512_fmadd_ps(x, w1, c[i][1]);
                c[i][2] = _mm512_fmadd_ps(x, w2, c[i][2]);
                c[i][3] = _mm512_fmadd_ps(x, w3, c[i][3]);
            }
        }
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < 4; j++) {
            float *at = acc + (m0 + i) * 64 + 16 * j;
            _mm512_store_ps(at, k0 == 0 || !fresh ? c[i][j] : _mm512_add_ps(_mm512_load_ps(at), c[i][j]));
        }
}

/* Every row tile of mb rows of A (Ab, rows K apart) against weight rows k0 .. k1 of panel P; with
 * pf, the first tile also asks L2 for the rows at pf + k * pf_ld (k < pf_end). */
static void smallm_row_tiles(int64_t mb, int64_t k0, int64_t k1, const float *pf, int64_t pf_ld, int64_t pf_end,
                             const float *Ab, int64_t K, const float *P, float *acc, int bf) {
#define SMALLM_TILE(MR, PF) \
    (bf ? smallm_tile(MR, PF, 1, k0, k1, pf, pf_ld, pf_end, Ab, K, P, m, acc) \
        : smallm_tile(MR, PF, 0, k0, k1, pf, pf_ld, pf_end, Ab, K, P, m, acc))
    int64_t m = 0;
    for (; m + SMALLM_MR <= mb; m += SMALLM_MR) {
        if (m == 0 && pf) SMALLM_TILE(SMALLM_MR, 1);
        else SMALLM_TILE(SMALLM_MR, 0);
    }
    int first = m == 0 && pf;
    switch (mb - m) { /* constant row counts: the tile's loops unroll */
    case 5: if (first) SMALLM_TILE(5, 1); else SMALLM_TILE(5, 0); break;
    case 4: if (first) SMALLM_TILE(4, 1); else SMALLM_TILE(4, 0); break;
    case 3: if (first) SMALLM_TILE(3, 1); else SMALLM_TILE(3, 0); break;
    case 2: if (first) SMALLM_TILE(2, 1); else SMALLM_TILE(2, 0); break;
    case 1: if (first) SMALLM_TILE(1, 1); else SMALLM_TILE(1, 0); break;
    default: break;
    }
#undef SMALLM_TILE
}

/* 16 lanes of a float32 or bfloat16 (dt) vector at p, masked, as float32 */
BZ_INLINE __m512 smallm_load(int dt, __mmask16 mk, const void *p) {
    if (dt == BRAZE_DT_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, p)), 16));
    return _mm512_maskz_loadu_ps(mk, p);
}

/* v stored as float32 or bfloat16 (dt); bfloat16 rounds as oneDNN's bf16 kernels do (VCVTNEPS2BF16) */
BZ_INLINE void smallm_put(int dt, __mmask16 mk, void *p, __m512 v) {
#if defined(__AVX512BF16__)
    if (dt == BRAZE_DT_BF16) {
        _mm256_mask_storeu_epi16(p, mk, (__m256i)_mm512_cvtneps_pbh(v));
        return;
    }
#endif
    _mm512_mask_storeu_ps((float *)p, mk, v);
}

/* C[m0 : m0 + mb, n0 : n0 + 64] = epilogue(acc): the bias, C and the residual in the dtypes act's
 * BRAZE_TYPES names (float32 or bfloat16) */
static void smallm_store(int64_t m0, int64_t mb, int64_t N, int64_t n0, const float *acc, const void *bias,
                         const void *res, int act, void *C) {
    int nv = N - n0 < 64 ? (int)(N - n0) : 64, late = (act & BRAZE_ACT_AFTER_RESIDUAL) != 0;
    int bdt = BIAS_DT(act), cdt = DST_DT(act);
    size_t bs = dt_size(bdt), cs = dt_size(cdt);
    /* a 16-bit C takes an eager act after the rounding, as after a primitive (braze_after_act) */
    int act16 = cdt != BRAZE_DT_F32 && eager_act(act) ? act : 0;
    if (act16) act &= ~0xff;
    for (int j = 0; j < 4 && nv > 16 * j; j++) {
        int left = nv - 16 * j;
        __mmask16 mk = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
        __m512 b = bias ? smallm_load(bdt, mk, (const char *)bias + (n0 + 16 * j) * bs) : _mm512_setzero_ps();
        for (int64_t i = 0; i < mb; i++) {
            int64_t off = (m0 + i) * N + n0 + 16 * j;
            __m512 v = _mm512_add_ps(_mm512_load_ps(acc + i * 64 + 16 * j), b);
            __m512 r = res ? smallm_load(cdt, mk, (const char *)res + off * cs) : _mm512_setzero_ps();
            v = late ? smallm_act(act, _mm512_add_ps(v, r)) : _mm512_add_ps(smallm_act(act, v), r);
            smallm_put(cdt, mk, (char *)C + off * cs, v);
            if (act16) eager_relu16_span(act16, (uint16_t *)((char *)C + off * cs), left < 16 ? left : 16);
        }
    }
}

/* C[:, n0 : n0 + 64] from panel P (kp rows): rows of A in blocks of SMALLM_MB, each block
 * through K in chunks of SMALLM_KC weight rows (16 KB, in L1) with every row tile, partial
 * sums in acc (SMALLM_MB x 64, in L1). The first block reads P from memory and prefetches
 * its own rows ahead; with more blocks, the second prefetches the next panel (`next`, this
 * thread's, or NULL) while the rest work from L2. */
static void smallm_panel(int64_t M, int64_t K, int64_t kp, int64_t N, const float *A, const float *P,
                         const float *next, int64_t n0, const void *bias, const void *res, int act,
                         void *C, float *acc, int bf) {
    for (int64_t mb0 = 0; mb0 < M; mb0 += SMALLM_MB) {
        int64_t mb = M - mb0 < SMALLM_MB ? M - mb0 : SMALLM_MB;
        const float *Ab = A + mb0 * K, *pf = NULL;
        int64_t pf_end = 0;
        if (mb0 == 0) { /* own rows ahead; with one block, on into the next panel */
            pf = P + SMALLM_PFD * 64;
            pf_end = (next && M <= SMALLM_MB ? kp + K : K) - SMALLM_PFD;
        } else if (mb0 == SMALLM_MB && next) {
            pf = next, pf_end = K;
        }
        for (int64_t k0 = 0; k0 < K; k0 += SMALLM_KC)
            smallm_row_tiles(mb, k0, k0 + SMALLM_KC < K ? k0 + SMALLM_KC : K, pf, 64, pf_end, Ab, K, P, acc, bf);
        smallm_store(mb0, mb, N, n0, acc, bias, res, act, C);
    }
}

static int smallm_fits(const braze_packed_b *B, int64_t M, int act) {
    (void)M; /* any M: the dispatch table or braze_dnnl_small_m() bounds it */
    int types_ok = B->dt == BRAZE_DT_F32 ? !(act & BRAZE_TYPES_MASK)
                                         : B->dt == BRAZE_DT_BF16 && SRC_DT(act) == BRAZE_DT_BF16 &&
                                               DST_DT(act) != BRAZE_DT_F16 && BIAS_DT(act) != BRAZE_DT_F16;
    return B->smallm_kp && types_ok && smallm_act_ok(act);
}

/* A bfloat16 weight's panels have K / 2 rows (pairs), and A is read two elements at a time */
static int smallm_matmul(int64_t M, int64_t N, int64_t K, const void *A, const braze_packed_b *B,
                         const void *bias, const void *res, int act, void *C) {
    int bf = B->dt == BRAZE_DT_BF16;
    int64_t np = (N + 63) / 64, kp = bf ? B->smallm_kp / 2 : B->smallm_kp, kw = bf ? (K + 1) / 2 : K;
    const float *Aw = (const float *)A;
    if (bf && K % 2) {
        /* an odd K's last pair is (A[i, K-1], 0): rows of A copied with a zero after them (the
         * weight's pad row is 0, but A's next element may be inf), into the calling thread's
         * scratchpad (no primitive runs during this call) */
        uint16_t *Ap = (uint16_t *)thread_scratch((size_t)(M * 2 * kw) * sizeof(uint16_t));
        if (!Ap) return 0;
        for (int64_t i = 0; i < M; i++) {
            memcpy(Ap + i * 2 * kw, (const uint16_t *)A + i * K, (size_t)K * sizeof(uint16_t));
            Ap[i * 2 * kw + K] = 0;
        }
        Aw = (const float *)Ap;
    }
    const float *W = (const float *)B->data;
#pragma omp parallel if (np > 1)
    {
        float acc[SMALLM_MB * 64] __attribute__((aligned(64)));
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t p0 = np * t / nt, p1 = np * (t + 1) / nt; /* contiguous: a panel's next is this thread's */
        for (int64_t p = p0; p < p1; p++)
            smallm_panel(M, kw, kp, N, Aw, W + p * kp * 64, p + 1 < p1 ? W + (p + 1) * kp * 64 : NULL, p * 64,
                         bias, res, act, C, acc, bf);
    }
    return 1;
}
/* ------------------------------------------------------------------ plain run-time weights
 * braze_matmul_w at small M: C[M,N] = epilogue(A[M,K] @ W^T) with W the caller's [N,K] (torch's
 * linear layout), read once per call as it is, so a weight changed between calls is never stale.
 * Dot products along K: a tile is SMALLW_NR rows of W against SMALLW_MR rows of A, 16 lanes of
 * partial sums each, added across lanes at the end. Each thread takes a contiguous range of W's
 * rows, a block of SMALLW_NR rows at a time, every row tile of A against it while it is in L1
 * (NR x K floats: 12 KB at K = 768), and asks L2 for the next block's rows meanwhile. */

#define SMALLW_NR 4
#define SMALLW_MR 6
#define SMALLW_KC 512 /* k per chunk: A's chunk (M x 2 KB) and the block's (8 KB) in L1 */
#ifndef SMALLW_MAX
#define SMALLW_MAX 48
#endif
/* measured against oneDNN's plain-weight matmul: docs/gemm.md */

/* (sum of v[0]'s lanes, ..., sum of v[3]'s) */
BZ_INLINE __m128 smallw_sum4(const __m512 *v) {
    __m512 a = _mm512_add_ps(_mm512_unpacklo_ps(v[0], v[1]), _mm512_unpackhi_ps(v[0], v[1])); /* 01 01 per 128 */
    __m512 b = _mm512_add_ps(_mm512_unpacklo_ps(v[2], v[3]), _mm512_unpackhi_ps(v[2], v[3])); /* 23 23 per 128 */
    __m512 c = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b))));
    __m256 d = _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1));
    return _mm_add_ps(_mm256_castps256_ps128(d), _mm256_extractf128_ps(d, 1)); /* 0123 */
}

/* A tile's partial sums over k0 .. k1: acc (MR x NR vectors of 16 lanes) += A[m0 + i, k0:k1] *
 * W[n0 + j, k0:k1], starting from zero when first. With pf, it also asks L2 for the block's share
 * of the next block's rows: one line of each every T k-steps of the block's clock *q, so the
 * next block streams in evenly under all of this block's tiles and chunks (prefetching it all in
 * the first tile left memory idle under the others). */
BZ_INLINE void smallw_tile(const int MR, int64_t K, int64_t lda, int64_t k0, int64_t k1, const float *A,
                           const float *W, const float *pf, int64_t *q, int64_t T, int first, __m512 *acc) {
    const int fresh = K > SMALLM_LONG_K; /* from zero, then added to acc: as smallm_tile's chunks */
    __m512 c[SMALLW_MR][SMALLW_NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < SMALLW_NR; j++) c[i][j] = first || fresh ? _mm512_setzero_ps() : acc[i * SMALLW_NR + j];
    int64_t k = k0, qq = *q;
    for (; k + 16 <= k1; k += 16, qq++) {
        if (pf && qq % T == 0) {
            for (int j = 0; j < SMALLW_NR; j++) _mm_prefetch((const char *)(pf + j * K + (qq / T) * 16), _MM_HINT_T1);
        }
        __m512 w[SMALLW_NR];
        for (int j = 0; j < SMALLW_NR; j++) w[j] = _mm512_loadu_ps(W + j * K + k);
        for (int i = 0; i < MR; i++) {
            __m512 a = _mm512_loadu_ps(A + i * lda + k);
            for (int j = 0; j < SMALLW_NR; j++) c[i][j] = _mm512_fmadd_ps(a, w[j], c[i][j]);
        }
    }
    if (k < k1) { /* K's last, partial vector */
        __mmask16 mk = (__mmask16)((1u << (k1 - k)) - 1);
        __m512 w[SMALLW_NR];
        for (int j = 0; j < SMALLW_NR; j++) w[j] = _mm512_maskz_loadu_ps(mk, W + j * K + k);
        for (int i = 0; i < MR; i++) {
            __m512 a = _mm512_maskz_loadu_ps(mk, A + i * lda + k);
            for (int j = 0; j < SMALLW_NR; j++) c[i][j] = _mm512_fmadd_ps(a, w[j], c[i][j]);
        }
        qq++;
    }
    *q = qq;
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < SMALLW_NR; j++)
            acc[i * SMALLW_NR + j] = first || !fresh ? c[i][j] : _mm512_add_ps(acc[i * SMALLW_NR + j], c[i][j]);
}

/* sums[i * NR + j] = the lanes of acc[i * NR + j] added: a row's 4 sums in one vector, 13 ops */
static void smallw_sums(int mr, const __m512 *acc, float *sums) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < SMALLW_NR; j += 4) _mm_storeu_ps(sums + i * SMALLW_NR + j, smallw_sum4(acc + i * SMALLW_NR + j));
}

/* C[m0 : m0 + mr, n0 : n0 + nr] = sums, the epilogue left to smallw_epilogue */
static void smallw_store_raw(int64_t m0, int mr, int64_t n0, int nr, int64_t N, const float *sums, float *C) {
    __mmask16 mk = (__mmask16)((1u << nr) - 1);
    for (int i = 0; i < mr; i++) _mm512_mask_storeu_ps(C + (m0 + i) * N + n0, mk, _mm512_maskz_loadu_ps(mk, sums + i * SMALLW_NR));
}

/* C[:, n0 : n1] = epilogue(C[:, n0 : n1]) in whole vectors of 16 columns: applied per block of 4
 * columns, the epilogue cost as much as the dot products on BERT's layers at M = 16. */
static void smallw_epilogue(int64_t M, int64_t N, int64_t n0, int64_t n1, const float *bias, const float *res,
                            int act, float *C) {
    int late = (act & BRAZE_ACT_AFTER_RESIDUAL) != 0;
    for (int64_t n = n0; n < n1; n += 16) {
        __mmask16 mk = n1 - n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n1 - n)) - 1);
        __m512 b = bias ? _mm512_maskz_loadu_ps(mk, bias + n) : _mm512_setzero_ps();
        for (int64_t m = 0; m < M; m++) {
            int64_t off = m * N + n;
            __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(mk, C + off), b);
            __m512 r = res ? _mm512_maskz_loadu_ps(mk, res + off) : _mm512_setzero_ps();
            v = late ? smallm_act(act, _mm512_add_ps(v, r)) : _mm512_add_ps(smallm_act(act, v), r);
            _mm512_mask_storeu_ps(C + off, mk, v);
        }
    }
}

/* C[m0 : m0 + mr, n0 : n0 + nr] = epilogue(sums) */
static void smallw_store(int64_t m0, int mr, int64_t n0, int nr, int64_t N, const float *sums, const float *bias,
                         const float *res, int act, float *C) {
    __mmask16 mk = (__mmask16)((1u << nr) - 1);
    int late = (act & BRAZE_ACT_AFTER_RESIDUAL) != 0;
    __m512 b = bias ? _mm512_maskz_loadu_ps(mk, bias + n0) : _mm512_setzero_ps();
    for (int i = 0; i < mr; i++) {
        int64_t off = (m0 + i) * N + n0;
        __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(mk, sums + i * SMALLW_NR), b);
        __m512 r = res ? _mm512_maskz_loadu_ps(mk, res + off) : _mm512_setzero_ps();
        v = late ? smallm_act(act, _mm512_add_ps(v, r)) : _mm512_add_ps(smallm_act(act, v), r);
        _mm512_mask_storeu_ps(C + off, mk, v);
    }
}

/* rows n0 .. n0 + nr of C (nr <= NR; fewer than NR rows read a zero-padded copy). K runs in
 * chunks of SMALLW_KC, each through every row tile, so a chunk of A (M x KC) and of the block's
 * rows (NR x KC) stay in L1 while every tile reads them: whole rows of K = 3072 did not fit, and
 * the tiles read A from L2 (1.3x slower than the packed-weight kernel on BERT's FFN at M = 16). */
static void smallw_block(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *Wb,
                         const float *pf, int64_t n0, int nr, int raw, const float *bias, const float *res, int act,
                         float *C) {
    __m512 acc[(SMALLW_MAX + SMALLW_MR - 1) / SMALLW_MR][SMALLW_MR * SMALLW_NR];
    float sums[SMALLW_MR * SMALLW_NR];
    int64_t T = (M + SMALLW_MR - 1) / SMALLW_MR, q = 0;
    for (int64_t k0 = 0; k0 < K; k0 += SMALLW_KC) {
        int64_t k1 = k0 + SMALLW_KC < K ? k0 + SMALLW_KC : K;
        for (int64_t t = 0; t < T; t++) {
            int64_t m = t * SMALLW_MR;
            const float *At = A + m * lda;
            switch (M - m < SMALLW_MR ? M - m : SMALLW_MR) { /* constant row counts: the loops unroll */
            case 6: smallw_tile(6, K, lda, k0, k1, At, Wb, pf, &q, T, k0 == 0, acc[t]); break;
            case 5: smallw_tile(5, K, lda, k0, k1, At, Wb, pf, &q, T, k0 == 0, acc[t]); break;
            case 4: smallw_tile(4, K, lda, k0, k1, At, Wb, pf, &q, T, k0 == 0, acc[t]); break;
            case 3: smallw_tile(3, K, lda, k0, k1, At, Wb, pf, &q, T, k0 == 0, acc[t]); break;
            case 2: smallw_tile(2, K, lda, k0, k1, At, Wb, pf, &q, T, k0 == 0, acc[t]); break;
            default: smallw_tile(1, K, lda, k0, k1, At, Wb, pf, &q, T, k0 == 0, acc[t]); break;
            }
        }
    }
    for (int64_t t = 0; t < T; t++) {
        int mr = (int)(M - t * SMALLW_MR < SMALLW_MR ? M - t * SMALLW_MR : SMALLW_MR);
        smallw_sums(mr, acc[t], sums);
        if (raw)
            smallw_store_raw(t * SMALLW_MR, mr, n0, nr, N, sums, C);
        else
            smallw_store(t * SMALLW_MR, mr, n0, nr, N, sums, bias, res, act, C);
    }
}

/* braze_matmul_w for a [K,N] weight (GPT-2's Conv1D, x @ W). Each thread owns a contiguous range
 * of 64-column panels and streams its part of the weight row by row: a chunk of SMALLKN_KC rows is
 * copied into the packed kernel's panel layout (buf, in L2), then every row tile of every panel
 * runs on it, with partial sums for all the thread's panels in acc. Read panel by panel instead
 * (256 B of each row, rows N x 4 B apart), the weight came from memory in scattered pieces and the
 * kernel ran 1.45x the packed one on GPT-2 at M = 16; whole row segments stream at full speed. */
#define SMALLKN_KC 32
#ifndef SMALLKN_PFD
#define SMALLKN_PFD 16
#endif

/* Rows k0 .. k1 of the thread's panels (columns c0 .. c1) from a [K,N] weight: row k's segment,
 * left to right, into the panels' row k */
static void smallw_kn_chunk(int64_t N, const float *W, int64_t c0, int64_t c1, int64_t npt, int64_t k0,
                            int64_t k1, int64_t kc, float *buf) {
    for (int64_t k = k0; k < k1; k++) {
        for (int64_t p = 0; p < npt; p++) {
            const float *src = W + k * N + c0 + p * 64;
            float *dst = buf + p * kc * 64 + (k - k0) * 64;
            for (int j = 0; j < 4; j++) {
                int64_t left = c1 - (c0 + p * 64 + 16 * j);
                __mmask16 mk = left >= 16 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
                _mm512_store_ps(dst + 16 * j, _mm512_maskz_loadu_ps(mk, src + 16 * j));
            }
        }
    }
}

/* r[k] = (r[0][k], ..., r[15][k]): a 16 x 16 block of floats transposed in registers */
BZ_INLINE void smallw_t16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
        __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int i = 0; i < 4; i++) {
        t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
        t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
        r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
        r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
    }
}

/* An [N,K] weight's product in the packed kernel's arithmetic: as a [K,N] one's, but each chunk
 * of SMALLNK_KC k's of the thread's 64-row panels is transposed into the panel layout (16 x 16
 * blocks in registers). Every output is then one FMA chain along k, as braze_matmul
 * computes it on a packed weight, so a live GEMM site gives the same bits before and after it
 * has made its packed copy (braze_dnnl_live.c). Each row's next chunk is asked of L2 meanwhile.
 * 0.8-1.4x the dot-product kernel's time at M = 1-48 (six BERT weights cycled, Zen 5): live GEMM
 * sites run it where the process tracks writes, braze_matmul_w keeps the dot products. */
#ifndef SMALLNK_KC
#define SMALLNK_KC 64
#endif
#if SMALLNK_KC != SMALLM_KC
#error "a weight read in place must sum in the packed kernel's chunks (the same bits before and after its copy)"
#endif

/* k rows per chunk of a weight read in place; over a long K the packed kernel's, whose chunks'
 * sums (smallm_tile) are then the same bits */
static int64_t smallw_kc(int64_t K, int transposed) {
    return transposed || K > SMALLM_LONG_K ? SMALLNK_KC : SMALLKN_KC;
}

/* r[k] = W[n + i, kb + k] for the 16 rows from n (zero from row end on) and the kn <= 16 k's
 * from kb (zero after) of an [N,K] weight */
BZ_INLINE void smallw_nk_block(const float *W, int64_t K, int64_t n, int64_t end, int64_t kb, int64_t kn,
                               __m512 r[16]) {
    __mmask16 mk = kn == 16 ? (__mmask16)0xffff : (__mmask16)((1u << kn) - 1);
    for (int i = 0; i < 16; i++)
        r[i] = n + i < end ? _mm512_maskz_loadu_ps(mk, W + (n + i) * K + kb) : _mm512_setzero_ps();
    smallw_t16(r);
}

/* The same from an [N,K] weight: 16 x 16 blocks transposed, each row's next chunk asked of L2 */
static void smallw_nk_chunk(int64_t K, const float *W, int64_t c0, int64_t c1, int64_t npt, int64_t k0,
                            int64_t k1, float *buf) {
    for (int64_t p = 0; p < npt; p++)
        for (int64_t n = c0 + p * 64; n < c0 + p * 64 + 64 && n < c1; n += 16)
            for (int64_t kb = k0; kb < k1; kb += 16) {
                int64_t kn = k1 - kb < 16 ? k1 - kb : 16;
                for (int64_t i = 0; k1 < K && i < 16 && n + i < c1; i++)
                    _mm_prefetch((const char *)(W + (n + i) * K + kb + SMALLNK_KC), _MM_HINT_T1);
                __m512 r[16];
                smallw_nk_block(W, K, n, c1, kb, kn, r);
                float *dst = buf + p * SMALLNK_KC * 64 + (kb - k0) * 64 + (n - c0 - p * 64);
                for (int64_t kk = 0; kk < kn; kk++) _mm512_store_ps(dst + kk * 64, r[kk]);
            }
}

/* M = 1 from an [N,K] weight: each 16 x 16 block FMA'd as it is transposed, no panel copy (2.3x
 * the dot-product kernel's time through the panels; 0.8-1.4x this way) */
static void smallw_nk_one(int64_t N, int64_t K, const float *A, const float *W, int64_t p0, int64_t npt,
                          const float *bias, const float *res, int act, float *C, float *acc) {
    for (int64_t p = p0; p < p0 + npt; p++) {
        for (int j = 0; j < 4; j++) {
            int64_t n = p * 64 + 16 * j;
            /* the packed kernel's sums: over a long K each SMALLM_KC of k from zero, then added */
            __m512 c = _mm512_setzero_ps(), part = _mm512_setzero_ps();
            for (int64_t kb = 0; n < N && kb < K; kb += 16) {
                if (K > SMALLM_LONG_K && kb % SMALLM_KC == 0 && kb) {
                    c = kb == SMALLM_KC ? part : _mm512_add_ps(c, part);
                    part = _mm512_setzero_ps();
                }
                int64_t kn = K - kb < 16 ? K - kb : 16;
                /* the rows' later lines, and at their ends the next group's first ones, on their way */
                int64_t ahead = kb + 128 < K ? kb + 128 : 16 * K + kb + 128 - K;
                for (int64_t i = 0; i < 16 && n + i < N; i++)
                    _mm_prefetch((const char *)(W + (n + i) * K + ahead), _MM_HINT_T0);
                __m512 r[16];
                smallw_nk_block(W, K, n, N, kb, kn, r);
                for (int64_t kk = 0; kk < kn; kk++) part = _mm512_fmadd_ps(_mm512_set1_ps(A[kb + kk]), r[kk], part);
            }
            _mm512_store_ps(acc + 16 * j, K <= SMALLM_LONG_K ? part : _mm512_add_ps(c, part));
        }
        smallm_store(0, 1, N, p * 64, acc, bias, res, act, C);
    }
}

/* The thread's panels p0 .. p0 + npt of C, chunk by chunk of k: the chunk copied into the packed
 * kernel's panel layout (buf, in L2), then every row tile of every panel runs on it, with partial
 * sums for all the thread's panels in acc. */
static void smallw_rows(int64_t M, int64_t N, int64_t K, const float *A, const float *W, int transposed, int64_t p0,
                        int64_t npt, const float *bias, const float *res, int act, float *C, float *acc, float *buf) {
    int64_t c0 = p0 * 64, c1 = (p0 + npt) * 64 < N ? (p0 + npt) * 64 : N, kc = smallw_kc(K, transposed);
    for (int64_t k0 = 0; k0 < K; k0 += kc) {
        int64_t k1 = k0 + kc < K ? k0 + kc : K;
        if (transposed) smallw_nk_chunk(K, W, c0, c1, npt, k0, k1, buf);
        else smallw_kn_chunk(N, W, c0, c1, npt, k0, k1, kc, buf);
        for (int64_t p = 0; p < npt; p++) /* [K,N]: the first tile asks L2 for the panel's next chunk */
            smallm_row_tiles(M, k0, k1, transposed ? NULL : W + kc * N + c0 + p * 64, N, K - kc, A, K,
                             buf + p * kc * 64 - k0 * 64, acc + p * M * 64, 0);
    }
    for (int64_t p = 0; p < npt; p++) smallm_store(0, M, N, (p0 + p) * 64, acc + p * M * 64, bias, res, act, C);
}

/* braze_matmul_w's small-M product for a [K,N] weight, or (transposed) an [N,K] one in the packed
 * kernel's arithmetic: each thread owns a contiguous range of 64-column panels */
static int smallw_panel_matmul(int64_t M, int64_t N, int64_t K, const float *A, const float *W, int transposed,
                               const float *bias, const float *res, int act, float *C) {
    int64_t np = (N + 63) / 64, kc = smallw_kc(K, transposed);
    int ok = 1;
#pragma omp parallel if (np > 1)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t p0 = np * t / nt, npt = np * (t + 1) / nt - p0;
        /* this thread's scratchpad (no primitive runs on it during this call), taken before any
         * thread writes C: a failed call must leave C as it was (it may be the residual) */
        float *acc = npt ? (float *)thread_scratch((size_t)(npt * 64 * (M + kc)) * sizeof(float)) : NULL;
        if (npt && !acc) {
#pragma omp atomic write
            ok = 0;
        }
#pragma omp barrier
        if (ok && npt && transposed && M == 1) smallw_nk_one(N, K, A, W, p0, npt, bias, res, act, C, acc);
        else if (ok && npt) smallw_rows(M, N, K, A, W, transposed, p0, npt, bias, res, act, C, acc, acc + npt * M * 64);
    }
    return ok;
}
#define BRAZE_SMALLW_NK 1 /* braze_dnnl_live.c runs it */

static int smallm_w_applies(int64_t M, int64_t N, int64_t K, int transposed, int act) {
    (void)transposed; /* both layouts: [N,K] smallw_*, [K,N] smallw_kn_* */
    return !(act & BRAZE_TYPES_MASK) && M <= braze_dnnl_small_m() && M <= SMALLW_MAX && N > 0 && K > 0 &&
           smallm_act_ok(act);
}

static int smallm_w_matmul(int64_t M, int64_t N, int64_t K, const float *A, const float *W, int transposed,
                           const float *bias, const float *res, int act, float *C) {
    if (!smallm_w_applies(M, N, K, transposed, act)) return 0;
    if (!transposed) return smallw_panel_matmul(M, N, K, A, W, 0, bias, res, act, C);
    int64_t nb = N / SMALLW_NR, tail = N % SMALLW_NR;
    /* Rows of A a multiple of 4 KB apart share one L1 set (K = 1024, 2048, 3072, ...): every tile
     * evicted its own rows (BERT's FFN down-projection, K = 3072, ran 1.35x the packed kernel's
     * time). Such an A is read from a copy with a line more per row. */
    int64_t lda = K % 1024 ? K : K + 16;
    /* the calling thread's scratchpad: no primitive runs during this call */
    float *Ap = lda == K ? NULL : (float *)thread_scratch((size_t)(M * lda) * sizeof(float));
    if (lda != K && !Ap) return 0;
    /* the last rows, padded with zero rows to a block: made before any thread writes C, so a
     * failed call leaves C as it was (it may be the residual) */
    float *pad = tail ? (float *)calloc((size_t)(SMALLW_NR * K), sizeof(float)) : NULL;
    if (tail && !pad) return 0;
    if (pad) memcpy(pad, W + nb * SMALLW_NR * K, (size_t)(tail * K) * sizeof(float));
#pragma omp parallel if (nb > 1)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        if (Ap) {
            for (int64_t i = M * t / nt; i < M * (t + 1) / nt; i++) memcpy(Ap + i * lda, A + i * K, (size_t)K * sizeof(float));
#pragma omp barrier
        }
        const float *Ar = Ap ? Ap : A;
        /* the epilogue after this thread's columns, in whole vectors (unless the residual is C) */
        int raw = res != C && (bias || res || (act & 0xff) != BRAZE_ACT_NONE);
        int64_t b0 = nb * t / nt, b1 = nb * (t + 1) / nt; /* contiguous: the next block is this thread's */
        for (int64_t b = b0; b < b1; b++) {
            const float *Wb = W + b * SMALLW_NR * K;
            smallw_block(M, N, K, Ar, lda, Wb, b + 1 < b1 ? Wb + SMALLW_NR * K : NULL, b * SMALLW_NR, SMALLW_NR,
                         raw, bias, res, act, C);
        }
        int64_t n1 = b1 * SMALLW_NR;
        if (pad && t == nt - 1) {
            smallw_block(M, N, K, Ar, lda, pad, NULL, nb * SMALLW_NR, (int)tail, raw, bias, res, act, C);
            n1 = N;
        }
        if (raw) smallw_epilogue(M, N, b0 * SMALLW_NR, n1, bias, res, act, C);
    }
    free(pad);
    return 1;
}
#else
#if !(defined(__AVX2__) && defined(__FMA__)) /* AVX2 builds: braze_dnnl_smallm_avx2.c's */
static int smallm_w_applies(int64_t M, int64_t N, int64_t K, int transposed, int act) {
    (void)M, (void)N, (void)K, (void)transposed, (void)act;
    return 0;
}

static int smallm_w_matmul(int64_t M, int64_t N, int64_t K, const float *A, const float *W, int transposed,
                           const float *bias, const float *res, int act, float *C) {
    (void)M, (void)N, (void)K, (void)A, (void)W, (void)transposed, (void)bias, (void)res, (void)act, (void)C;
    return 0;
}

static int smallm_fits(const braze_packed_b *B, int64_t M, int act) {
    (void)B, (void)M, (void)act;
    return 0;
}

static int smallm_matmul(int64_t M, int64_t N, int64_t K, const void *A, const braze_packed_b *B,
                         const void *bias, const void *res, int act, void *C) {
    (void)M, (void)N, (void)K, (void)A, (void)B, (void)bias, (void)res, (void)act, (void)C;
    return 0;
}
#endif
#endif

#if defined(__AVX512F__) || !(defined(__AVX2__) && defined(__FMA__)) /* AVX2 builds: braze_dnnl_smallm_avx2.c's */
/* no copy of its own: AVX-512's kernel reads oneDNN's packed weight (smallm_layout), and builds
 * without AVX2 have no kernel */
static float *smallm_own_panels(const float *W, int64_t N, int64_t K) {
    (void)W, (void)N, (void)K;
    return NULL;
}
#endif
