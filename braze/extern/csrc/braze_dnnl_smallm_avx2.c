/* braze_dnnl_smallm_avx2.c: the small-M kernels of AVX2 builds (no AVX-512), C[M,N] =
 * epilogue(A[M,K] @ W^T) for a [N,K] weight W (torch's linear, a convolution's OIHW as a GEMM):
 * - braze_matmul_w's, on the caller's plain W read once per call as it is (dot products along K),
 *   which also serves a packed constant up to 12 rows (braze_pack_b_const keeps W);
 * - a packed constant's from 13 to 127 rows, on braze's own copy of W in 16-column panels.
 * Follows braze_dnnl_smallm.c (the AVX-512 kernels) in one translation unit.
 *
 * Why: oneDNN 3.2's AVX2 gemm:jit on a plain [N,K] weight took 1.2-1.8x this kernel's time at
 * M = 8-12 and 1.0-1.3x at M = 16-20 on a Zen 3 (BERT's layers, weights from memory); from
 * M = 24 it was as fast, and on a [K,N] weight (GPT-2's Conv1D) a kernel like braze_dnnl_smallm.c's smallw_kn
 * won on some shapes and lost on others, so oneDNN keeps those (docs/gemm.md). On this CPU a
 * 16-row product is already near the FMA limit (about 190 GFLOP/s on 2 cores against 22 GB/s:
 * 17 rows balance them), so the gain is in streaming the weight under the FMAs.
 *
 * Activations take oneDNN's AVX2 post-op values at special inputs, so a call gives the same
 * values on both sides of the limit: relu(NaN) is 0, gelu(+inf) and silu(+inf) are inf, and
 * gelu, gelu_tanh and silu at -inf are NaN (eager's AVX2 kernels agree but for relu). */

#if !defined(__AVX512F__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#include <omp.h>
#ifndef BZ_VB
#define BZ_VB 32
#endif
#include "braze_vec.h"

#define SW2_MAX 20 /* the largest M it takes: from 24 oneDNN was as fast (docs/gemm.md) */

static const int32_t g_sw2_tail[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

/* the first n lanes (0 <= n <= 8) */
BZ_INLINE __m256i sw2_mask(int64_t n) { return _mm256_loadu_si256((const __m256i *)(g_sw2_tail + 8 - n)); }

static int sw2_act_ok(int act) {
    switch (act & 0xff) {
    case BRAZE_ACT_NONE: case BRAZE_ACT_RELU: case BRAZE_ACT_GELU_ERF: case BRAZE_ACT_GELU_TANH:
    case BRAZE_ACT_SILU: case BRAZE_ACT_SIGMOID: case BRAZE_ACT_RELU_EAGER: case BRAZE_ACT_RELU6_EAGER: return 1;
    default: return 0; /* tanh: oneDNN's */
    }
}

BZ_INLINE __m256 sw2_act(int act, __m256 v) {
    __m256 r;
    switch (act & 0xff) {
    case BRAZE_ACT_RELU: return _mm256_max_ps(v, _mm256_setzero_ps()); /* maxps gives its second operand at NaN */
    case BRAZE_ACT_GELU_ERF: r = (__m256)bz_vgelu((bz_vf)v); break;
    case BRAZE_ACT_GELU_TANH: r = (__m256)bz_vgelu_tanh((bz_vf)v); break;
    case BRAZE_ACT_SILU: r = (__m256)bz_vsilu((bz_vf)v); break;
    case BRAZE_ACT_SIGMOID: return (__m256)bz_vsigmoid((bz_vf)v);
    case BRAZE_ACT_RELU6_EAGER: /* as eager_relu (braze_dnnl_core.c) */
        v = _mm256_blendv_ps(v, _mm256_set1_ps(6.f), _mm256_cmp_ps(v, _mm256_set1_ps(6.f), _CMP_GT_OQ));
        /* fall through */
    case BRAZE_ACT_RELU_EAGER:
        return _mm256_blendv_ps(v, _mm256_setzero_ps(), _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
    default: return v;
    }
    const __m256 inf = _mm256_set1_ps(INFINITY);
    r = _mm256_blendv_ps(r, inf, _mm256_cmp_ps(v, inf, _CMP_EQ_OQ));
    return _mm256_blendv_ps(r, _mm256_set1_ps(NAN), _mm256_cmp_ps(v, -inf, _CMP_EQ_OQ));
}

/* v + bias, the residual and the activation in the order act asks */
BZ_INLINE __m256 sw2_epi(int act, __m256 v, __m256 b, __m256 r) {
    v = _mm256_add_ps(v, b);
    return act & BRAZE_ACT_AFTER_RESIDUAL ? sw2_act(act, _mm256_add_ps(v, r)) : _mm256_add_ps(sw2_act(act, v), r);
}

/* C[:, n0 : n1] = epilogue(C[:, n0 : n1]) in vectors of 8 columns (C holds the raw products) */
static void sw2_epilogue(int64_t M, int64_t N, int64_t n0, int64_t n1, const float *bias, const float *res,
                         int act, float *C) {
    for (int64_t n = n0; n < n1; n += 8) {
        __m256i mk = sw2_mask(n1 - n < 8 ? n1 - n : 8);
        __m256 b = bias ? _mm256_maskload_ps(bias + n, mk) : _mm256_setzero_ps();
        for (int64_t m = 0; m < M; m++) {
            int64_t off = m * N + n;
            __m256 r = res ? _mm256_maskload_ps(res + off, mk) : _mm256_setzero_ps();
            _mm256_maskstore_ps(C + off, mk, sw2_epi(act, _mm256_maskload_ps(C + off, mk), b, r));
        }
    }
}

/* ------------------------------------------------------------------ [N,K]: dot products along K
 * A tile is SW2_NR rows of W against SW2_MR rows of A, 8 lanes of partial sums each (12
 * accumulators and 4 weight vectors: the 16 registers), added across lanes at the end. Each
 * thread takes a contiguous range of W's rows, a block of SW2_NR at a time, and runs every row
 * tile of A against it in chunks of SW2_KC along K (the block's chunk and A's in L1) while it
 * asks L2 for the next block's rows, spread evenly under all of this block's tiles. */

#define SW2_NR 4
#define SW2_MR 3
#define SW2_KC 512

/* The next block's prefetch: one line of each of its rows (the next, `line`) every `every` steps
 * of all the block's tiles, so it streams in evenly under them. */
typedef struct {
    const float *pf;
    int64_t line, left, every;
} sw2_pf;

/* acc (MR x NR vectors) += A[i, k0:k1] * W[j, k0:k1] (rows lda and ldw apart), from zero when
 * first, asking L2 for the next block's lines as pf says. With fresh (a K over SMALLM_LONG_K) the
 * chunk sums from zero and is then added to acc. */
BZ_INLINE void sw2_tile(const int MR, int64_t lda, int64_t ldw, int64_t k0, int64_t k1, const float *A,
                        const float *W, sw2_pf *pf, int first, int fresh, __m256 *acc) {
    __m256 c[SW2_MR][SW2_NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < SW2_NR; j++) c[i][j] = first || fresh ? _mm256_setzero_ps() : acc[i * SW2_NR + j];
    int64_t k = k0;
    for (; k + 8 <= k1; k += 8) {
        if (pf->pf && --pf->left == 0) {
            for (int j = 0; j < SW2_NR; j++) _mm_prefetch((const char *)(pf->pf + j * ldw + pf->line * 16), _MM_HINT_T1);
            pf->line++, pf->left = pf->every;
        }
        __m256 w[SW2_NR];
        for (int j = 0; j < SW2_NR; j++) w[j] = _mm256_loadu_ps(W + j * ldw + k);
        for (int i = 0; i < MR; i++) {
            __m256 a = _mm256_loadu_ps(A + i * lda + k);
            for (int j = 0; j < SW2_NR; j++) c[i][j] = _mm256_fmadd_ps(a, w[j], c[i][j]);
        }
    }
    if (k < k1) { /* K's last, partial vector */
        __m256i mk = sw2_mask(k1 - k);
        __m256 w[SW2_NR];
        for (int j = 0; j < SW2_NR; j++) w[j] = _mm256_maskload_ps(W + j * ldw + k, mk);
        for (int i = 0; i < MR; i++) {
            __m256 a = _mm256_maskload_ps(A + i * lda + k, mk);
            for (int j = 0; j < SW2_NR; j++) c[i][j] = _mm256_fmadd_ps(a, w[j], c[i][j]);
        }
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < SW2_NR; j++)
            acc[i * SW2_NR + j] = first || !fresh ? c[i][j] : _mm256_add_ps(acc[i * SW2_NR + j], c[i][j]);
}

/* (sum of v[0]'s lanes, ..., sum of v[3]'s) */
BZ_INLINE __m128 sw2_sum4(const __m256 *v) {
    __m256 c = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3])); /* 0123 per half */
    return _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
}

/* rows n0 .. n0 + nr of C (nr <= NR; fewer than NR rows read a zero-padded copy). With raw, the
 * sums alone (sw2_epilogue adds the rest later, in whole vectors); else with the epilogue. */
static void sw2_block(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *Wb, int64_t ldw,
                      const float *pf, int64_t n0, int nr, int raw, const float *bias, const float *res, int act,
                      float *C) {
    __m256 acc[(SW2_MAX + SW2_MR - 1) / SW2_MR][SW2_MR * SW2_NR];
    int64_t T = (M + SW2_MR - 1) / SW2_MR;
    sw2_pf q = {pf, 0, 1, 2 * T}; /* a line is 2 steps of 8 floats */
    for (int64_t k0 = 0; k0 < K; k0 += SW2_KC) {
        int64_t k1 = k0 + SW2_KC < K ? k0 + SW2_KC : K;
        for (int64_t t = 0; t < T; t++) {
            const float *At = A + t * SW2_MR * lda;
            switch (M - t * SW2_MR < SW2_MR ? M - t * SW2_MR : SW2_MR) { /* constant row counts: the loops unroll */
            case 3: sw2_tile(3, lda, ldw, k0, k1, At, Wb, &q, k0 == 0, K > SMALLM_LONG_K, acc[t]); break;
            case 2: sw2_tile(2, lda, ldw, k0, k1, At, Wb, &q, k0 == 0, K > SMALLM_LONG_K, acc[t]); break;
            default: sw2_tile(1, lda, ldw, k0, k1, At, Wb, &q, k0 == 0, K > SMALLM_LONG_K, acc[t]); break;
            }
        }
    }
    __m256i mk = sw2_mask(nr);
    __m256 b = !raw && bias ? _mm256_maskload_ps(bias + n0, mk) : _mm256_setzero_ps();
    for (int64_t m = 0; m < M; m++) {
        __m256 v = _mm256_castps128_ps256(sw2_sum4(acc[m / SW2_MR] + (m % SW2_MR) * SW2_NR));
        int64_t off = m * N + n0;
        if (!raw) {
            __m256 r = res ? _mm256_maskload_ps(res + off, mk) : _mm256_setzero_ps();
            v = sw2_epi(act, v, b, r);
        }
        _mm256_maskstore_ps(C + off, mk, v);
    }
}

static int sw2_nk_matmul(int64_t M, int64_t N, int64_t K, const float *A, const float *W, int64_t ldw,
                         const float *bias, const float *res, int act, float *C) {
    int64_t nb = N / SW2_NR, tail = N % SW2_NR;
    /* Rows of A a multiple of 4 KB apart share L1 sets (K = 1024, 2048, 3072, ...): such an A is
     * read from a copy with a line more per row, in the calling thread's scratchpad. */
    int64_t lda = K % 1024 ? K : K + 16;
    float *Ap = lda == K ? NULL : (float *)thread_scratch((size_t)(M * lda) * sizeof(float));
    if (lda != K && !Ap) return 0;
    /* the last rows, padded with zero rows to a block: made before any thread writes C, so a
     * failed call leaves C as it was (it may be the residual) */
    float *pad = tail ? (float *)calloc((size_t)(SW2_NR * K), sizeof(float)) : NULL;
    if (tail && !pad) return 0;
    for (int64_t j = 0; j < tail; j++) memcpy(pad + j * K, W + (nb * SW2_NR + j) * ldw, (size_t)K * sizeof(float));
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
            const float *Wb = W + b * SW2_NR * ldw;
            sw2_block(M, N, K, Ar, lda, Wb, ldw, b + 1 < b1 ? Wb + SW2_NR * ldw : NULL, b * SW2_NR, SW2_NR, raw,
                      bias, res, act, C);
        }
        int64_t n1 = b1 * SW2_NR;
        if (pad && t == nt - 1) {
            sw2_block(M, N, K, Ar, lda, pad, K, NULL, nb * SW2_NR, (int)tail, raw, bias, res, act, C);
            n1 = N;
        }
        if (raw) sw2_epilogue(M, N, b0 * SW2_NR, n1, bias, res, act, C);
    }
    free(pad);
    return 1;
}

static int smallm_w_applies(int64_t M, int64_t N, int64_t K, int transposed, int act) {
    return transposed && !(act & BRAZE_TYPES_MASK) && M <= braze_dnnl_small_m() && M <= SW2_MAX && N > 0 &&
           K > 0 && sw2_act_ok(act);
}

static int smallm_w_matmul(int64_t M, int64_t N, int64_t K, const float *A, const float *W, int transposed,
                           const float *bias, const float *res, int act, float *C) {
    if (!smallm_w_applies(M, N, K, transposed, act)) return 0;
    return sw2_nk_matmul(M, N, K, A, W, K, bias, res, act, C);
}

/* ------------------------------------------------------------------ 16-column panels
 * From 13 rows the dot products above lose to oneDNN: A's rows no longer stay in L1 beside the
 * weight's, and each output ends in a sum across lanes. Here the weight is braze's own copy in
 * panels of 16 columns, P[n / 16][k][n % 16] (the last one padded with zero columns), and a tile
 * is SP2_MR rows of A against one panel over all of K: 12 accumulators, 2 weight vectors and a
 * broadcast of A, every FMA fed from registers and L1. Each thread takes a contiguous range of
 * panels, so its weight is one stream, front to back; the first tile of a panel asks L2 for the
 * panel SP2_AHEAD after it, one line per row of K, and the panel's other tiles read it from L2. */

#define SP2_MR 6
#define SP2_MAX 127 /* the top of the tuner's [64, 127] bucket: it measures both ends of a bucket */
/* A weight of at most this many elements (4 KB) at any M: 1x1 convolutions of 16 -> 64 channels
 * took 0.97-1.08x the time of oneDNN's at 1024-25088 pixels (a stack of them with GELU), with no
 * primitive to create at a new shape; of 32 -> 128 (4096) 1.03-1.13x, of 64 -> 256 1.01-1.24x
 * (docs/gemm.md) */
#define SP2_TINY_W 1024
#define SP2_ROW_BLOCK 48 /* rows: A's and C's for every panel in L1 */
#define SP2_AHEAD 2 /* panels; in a standalone test at M = 16, 1 ran 103 GFLOP/s against 123 (one run each) */

/* C[0 : MR, n0 : n0 + nr] = epilogue(out), plain loads and stores for a whole panel (full) */
BZ_INLINE void sp2_store(const int full, const int MR, int64_t N, int64_t n0, int nr, float (*out)[16],
                         const float *bias, const float *res, int act, float *C) {
    __m256i k0 = sw2_mask(nr < 8 ? nr : 8), k1 = sw2_mask(nr > 8 ? nr - 8 : 0);
#define SP2_LD(p, k) (full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, k))
    __m256 b0 = bias ? SP2_LD(bias + n0, k0) : _mm256_setzero_ps();
    __m256 b1 = bias ? SP2_LD(bias + n0 + 8, k1) : _mm256_setzero_ps();
    for (int i = 0; i < MR; i++) {
        int64_t off = i * N + n0;
        __m256 r0 = res ? SP2_LD(res + off, k0) : _mm256_setzero_ps();
        __m256 r1 = res ? SP2_LD(res + off + 8, k1) : _mm256_setzero_ps();
        __m256 v0 = sw2_epi(act, _mm256_load_ps(out[i]), b0, r0), v1 = sw2_epi(act, _mm256_load_ps(out[i] + 8), b1, r1);
        if (full) {
            _mm256_storeu_ps(C + off, v0);
            _mm256_storeu_ps(C + off + 8, v1);
        } else {
            _mm256_maskstore_ps(C + off, k0, v0);
            _mm256_maskstore_ps(C + off + 8, k1, v1);
        }
    }
#undef SP2_LD
}

/* C[0 : MR, n0 : n0 + nr] = epilogue(A[0 : MR, :] @ P), A's rows K apart, C's and res's N apart */
BZ_INLINE void sp2_tile(const int MR, int64_t N, int64_t K, const float *A, const float *P, const float *pf,
                        int64_t n0, int nr, const float *bias, const float *res, int act, float *C) {
    __m256 c[SP2_MR][2];
    for (int i = 0; i < MR; i++) c[i][0] = c[i][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < K; k++) {
        if (pf) _mm_prefetch((const char *)(pf + k * 16), _MM_HINT_T1);
        __m256 w0 = _mm256_load_ps(P + k * 16), w1 = _mm256_load_ps(P + k * 16 + 8);
        for (int i = 0; i < MR; i++) {
            __m256 a = _mm256_broadcast_ss(A + i * K + k);
            c[i][0] = _mm256_fmadd_ps(a, w0, c[i][0]);
            c[i][1] = _mm256_fmadd_ps(a, w1, c[i][1]);
        }
    }
    /* through memory: an epilogue loop over c itself would keep c on the stack inside the k loop */
    float out[SP2_MR][16] __attribute__((aligned(32)));
    for (int i = 0; i < MR; i++) {
        _mm256_store_ps(out[i], c[i][0]);
        _mm256_store_ps(out[i] + 8, c[i][1]);
    }
    /* a whole panel with plain loads and stores: AMD's masked ones are microcoded. With masks
     * everywhere, the depthwise convnet's 1x1 convolutions here took 1.18x and 1.56x oneDNN's time
     * at 2x96x96 and 8x224x224; so, 0.94x and 1.00x (docs/gemm.md). A constant `full`: one body each. */
    if (nr == 16)
        sp2_store(1, MR, N, n0, 16, out, bias, res, act, C);
    else
        sp2_store(0, MR, N, n0, nr, out, bias, res, act, C);
}

/* Up to SP2_MAX rows each thread takes a range of panels over all rows; above (a tiny weight,
 * SP2_TINY_W), a range of rows over all panels, each a whole number of tiles but the last. */
static void sp2_matmul(int64_t M, int64_t N, int64_t K, const float *A, const float *P, const float *bias,
                       const float *res, int act, float *C) {
    int64_t np = (N + 15) / 16;
    int by_rows = M > SP2_MAX;
#pragma omp parallel if (np > 1 || by_rows)
    {
        int nt = omp_get_num_threads(), t = omp_get_thread_num();
        int64_t tiles = M / SP2_MR, p0 = by_rows ? 0 : np * t / nt, p1 = by_rows ? np : np * (t + 1) / nt;
        int64_t r0 = by_rows ? tiles * t / nt * SP2_MR : 0,
                r1 = !by_rows || t == nt - 1 ? M : tiles * (t + 1) / nt * SP2_MR;
        int64_t block = by_rows ? SP2_ROW_BLOCK : M;
        for (int64_t b0 = r0; b0 < r1; b0 += block) {
            int64_t rows = r1 - b0 < block ? r1 - b0 : block;
            const float *At = A + b0 * K, *Rt = res ? res + b0 * N : NULL;
            float *Ct = C + b0 * N;
            for (int64_t p = p0; p < p1; p++) {
                const float *Pp = P + p * K * 16, *pf = p + SP2_AHEAD < p1 ? Pp + SP2_AHEAD * K * 16 : NULL;
                int64_t n0 = p * 16;
                int nr = N - n0 < 16 ? (int)(N - n0) : 16;
                int64_t m = 0;
#define SP2_TILE(MR) \
    sp2_tile(MR, N, K, At + m * K, Pp, m == 0 ? pf : NULL, n0, nr, bias, Rt ? Rt + m * N : NULL, act, Ct + m * N)
                for (; m + SP2_MR <= rows; m += SP2_MR) SP2_TILE(SP2_MR);
                switch (rows - m) { /* constant row counts: the tile's loops unroll */
                case 5: SP2_TILE(5); break;
                case 4: SP2_TILE(4); break;
                case 3: SP2_TILE(3); break;
                case 2: SP2_TILE(2); break;
                case 1: SP2_TILE(1); break;
                default: break;
                }
#undef SP2_TILE
            }
        }
    }
}

/* W ([N,K], rows K apart) in the panels sp2_matmul reads, or NULL: without the memory, or for a K
 * the kernel leaves to oneDNN (over SMALLM_LONG_K) */
static float *smallm_own_panels(const float *W, int64_t N, int64_t K) {
    if (N <= 0 || K <= 0 || K > SMALLM_LONG_K) return NULL;
    int64_t np = (N + 15) / 16;
    /* on huge pages where it is large: panels on 4 KB pages made the kernel 14-17% slower at M = 13-16
     * and 2-5% at 24-96 (docs/gemm.md) */
    float *P = (float *)weight_alloc((size_t)(np * K * 16) * sizeof(float));
    if (!P) return NULL;
    /* a row of W at a time into its column of the panel (which stays in L2): W read in order */
#pragma omp parallel for if (np > 1)
    for (int64_t p = 0; p < np; p++) {
        float *Pp = P + p * K * 16;
        for (int64_t j = 0; j < 16; j++) {
            const float *w = p * 16 + j < N ? W + (p * 16 + j) * K : NULL;
            for (int64_t k = 0; k < K; k++) Pp[k * 16 + j] = w ? w[k] : 0.0f;
        }
    }
    return P;
}

/* A packed weight: up to SW2_PACKED_MAX rows the dot products above on the [N,K] constant that
 * braze_pack_b_const kept, then up to SP2_MAX the panels (a weight of at most SP2_TINY_W elements:
 * at every M). Against oneDNN's gemm:jit on its packed weight (AMD EPYC AVX2, 2 threads, weights
 * from memory, interleaved; docs/gemm.md): the dot kernel on BERT-base's 72 weights, 340 MB,
 * 1.15-1.78x faster at M = 1-8, 1.05-1.10x at 12, 0.94x at 16; the panels on BERT's and GPT-2's four
 * weight shapes, 0.98-1.48x at M = 13-48, 1.02-1.07x at 64-96 and 1.01-1.17x at 112-127; from
 * M = 1024 oneDNN was 5-14% faster. */
#define SW2_PACKED_MAX 12

static int smallm_fits(const braze_packed_b *B, int64_t M, int act) {
    return B->src && (M <= SW2_PACKED_MAX || (B->panels && (M <= SP2_MAX || B->N * B->K <= SP2_TINY_W))) &&
           !(act & BRAZE_TYPES_MASK) && sw2_act_ok(act); /* src: float32 only */
}

static int smallm_matmul(int64_t M, int64_t N, int64_t K, const void *A, const braze_packed_b *B,
                         const void *bias, const void *res, int act, void *C) {
    if (!smallm_fits(B, M, act)) return 0;
    if (M <= SW2_PACKED_MAX)
        return smallm_w_matmul(M, N, K, (const float *)A, B->src, 1, (const float *)bias, (const float *)res, act,
                               (float *)C);
    sp2_matmul(M, N, K, (const float *)A, B->panels, (const float *)bias, (const float *)res, act, (float *)C);
    return 1;
}
#endif
