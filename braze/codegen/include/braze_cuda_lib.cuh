/* braze_cuda_lib.cuh: hand-written float32 device kernels for the CUDA target (GEMM, conv2d), compiled by
 * NVRTC in the same program as a model's generated kernels, after `#define BZ_VB 0` and
 * `#include "braze_vec.h"` (whose bz_s* scalar math gives the activations the CPU target's bits where
 * the operations allow). Also compiles with g++ over cuda_emu.h, which is how it is tested without a GPU.
 *
 * Plain float accumulation, no TF32, and nothing fused that the code does not write (NVRTC runs with
 * --fmad=false), so results depend only on the summation order written here.
 *
 * Epilogue, all three kernels (bz_epilogue applies it to a result cuBLAS computed):
 * y = act(alpha * acc + bias[n]) + res, or act(alpha * acc + bias[n] + res) when act & BZ_ACT_AFTER_RESIDUAL;
 * bias and res may be NULL; res has the output's layout and may alias it (each thread reads its element's
 * residual before writing the element).
 */
#ifndef BRAZE_CUDA_LIB_CUH
#define BRAZE_CUDA_LIB_CUH

#define BZ_ACT_NONE 0
#define BZ_ACT_RELU 1
#define BZ_ACT_GELU 2
#define BZ_ACT_GELU_TANH 3
#define BZ_ACT_SILU 4
#define BZ_ACT_SIGMOID 5
#define BZ_ACT_TANH 6
#define BZ_ACT_RELU_EAGER 7 /* braze_dnnl.h's: on the GPU the same as BZ_ACT_RELU */
#define BZ_ACT_RELU6_EAGER 8
#define BZ_ACT_AFTER_RESIDUAL 0x100

/* not inlined: the epilogue calls it at 32 sites per GEMM thread, and inlining every activation's body at
 * each one multiplied the PTX by ~10 */
static __device__ __noinline__ float bz_cuda_act(float v, int act) {
    switch (act & 0xff) {
    case BZ_ACT_RELU: case BZ_ACT_RELU_EAGER: return v < 0.0f ? 0.0f : v; /* NaN propagates, as braze's relu */
    case BZ_ACT_RELU6_EAGER: v = v > 6.0f ? 6.0f : v; return v < 0.0f ? 0.0f : v;
    case BZ_ACT_GELU: return bz_sgelu(v);
    case BZ_ACT_GELU_TANH: return bz_sgelu_tanh(v);
    case BZ_ACT_SILU: return bz_ssilu(v);
    case BZ_ACT_SIGMOID: return bz_ssigmoid(v);
    case BZ_ACT_TANH: return bz_stanh(v);
    default: return v;
    }
}

/* v is alpha * acc; out_i is the element's offset in the output (and in res) */
static __device__ __forceinline__ float bz_cuda_epilogue(float v, const float *bias, int64_t bias_i,
                                                         const float *res, int64_t out_i, int act) {
    if (bias) v += bias[bias_i];
    if (!(act & BZ_ACT_AFTER_RESIDUAL)) v = bz_cuda_act(v, act);
    if (res) v += res[out_i];
    if (act & BZ_ACT_AFTER_RESIDUAL) v = bz_cuda_act(v, act);
    return v;
}

/* ------------------------------------------------------------------------------------------- GEMM --
 * C(b) = epilogue(alpha * A(b) @ B(b)), A(b,m,k) = A[b*a_bs + m*a_rs + k*a_cs],
 * B(b,k,n) = B[b*b_bs + k*b_rs + n*b_cs], C(b,m,n) = C[b*c_bs + m*N + n]: arbitrary strides cover
 * transposed operands and broadcast batches (a stride of 0) without copies.
 *
 * Launch contract: block = BZ_GEMM_THREADS (1-D), grid = (ceil(N / 64), ceil(M / 64), batch)
 * (batch and ceil(M / 64) <= 65535: gridDim.z's and .y's limits), no dynamic shared memory.
 * Any M, N, K >= 0: every load is bounds-checked, and K == 0 gives epilogue(0).
 *
 * Each block computes a 64x64 tile of C, staging K in chunks of 16 through static shared memory
 * (8.5 KiB); each thread owns 4 rows (ty*4 + i) and 4 columns (tx + 16*j) of the tile, so a warp's
 * stores to one row are 16 consecutive floats, and its shared reads of Bs are conflict-free.
 */
#define BZ_GEMM_TILE 64
#define BZ_GEMM_KC 16
#define BZ_GEMM_THREADS 256
/* row padding: keeps the transposing stores into shared memory from all landing in one bank, while
 * rows stay 16-byte aligned for vector reads */
#define BZ_GEMM_PAD 4

extern "C" __global__ void bz_gemm(int64_t M, int64_t N, int64_t K,
                                   const float *A, int64_t a_rs, int64_t a_cs, int64_t a_bs,
                                   const float *B, int64_t b_rs, int64_t b_cs, int64_t b_bs,
                                   float *C, int64_t c_bs,
                                   float alpha, const float *bias, const float *res, int act) {
    __shared__ float As[BZ_GEMM_KC][BZ_GEMM_TILE + BZ_GEMM_PAD]; /* As[k][m] */
    __shared__ float Bs[BZ_GEMM_KC][BZ_GEMM_TILE + BZ_GEMM_PAD]; /* Bs[k][n] */
    const int t = threadIdx.x, tx = t % 16, ty = t / 16;
    const int64_t b = blockIdx.z, m0 = (int64_t)blockIdx.y * BZ_GEMM_TILE, n0 = (int64_t)blockIdx.x * BZ_GEMM_TILE;
    A += b * a_bs;
    B += b * b_bs;
    /* pick which index the warp's consecutive threads walk so global loads coalesce for the common
     * layouts (the branch is uniform over the grid) */
    const bool a_kfast = a_cs == 1, b_nfast = !(b_rs == 1 && b_cs != 1);
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < K; k0 += BZ_GEMM_KC) {
        for (int e = t; e < BZ_GEMM_KC * BZ_GEMM_TILE; e += BZ_GEMM_THREADS) {
            int kk = a_kfast ? e % BZ_GEMM_KC : e / BZ_GEMM_TILE;
            int mm = a_kfast ? e / BZ_GEMM_KC : e % BZ_GEMM_TILE;
            int64_t m = m0 + mm, k = k0 + kk;
            As[kk][mm] = (m < M && k < K) ? A[m * a_rs + k * a_cs] : 0.0f;
            kk = b_nfast ? e / BZ_GEMM_TILE : e % BZ_GEMM_KC;
            int nn = b_nfast ? e % BZ_GEMM_TILE : e / BZ_GEMM_KC;
            int64_t n = n0 + nn;
            k = k0 + kk;
            Bs[kk][nn] = (n < N && k < K) ? B[k * b_rs + n * b_cs] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BZ_GEMM_KC; ++kk) {
            float a[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = As[kk][ty * 4 + i];
#pragma unroll
            for (int j = 0; j < 4; ++j) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * bv[j];
        }
        __syncthreads(); /* the next chunk overwrites As/Bs */
    }
    C += b * c_bs;
    if (res) res += b * c_bs;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t m = m0 + ty * 4 + i;
        if (m >= M) break;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t n = n0 + tx + 16 * j;
            if (n < N) C[m * N + n] = bz_cuda_epilogue(alpha * acc[i][j], bias, n, res, m * N + n, act);
        }
    }
}

/* ------------------------------------------------------------------------------------- epilogue --
 * In place on a GEMM's result (cuBLAS's, which has no epilogue of its own): C(b,m,n) =
 * bz_cuda_epilogue(C(b,m,n), bias, n, res, ..., act) for C(b,m,n) = C[b*c_bs + m*N + n], res in C's
 * layout (NULL, or a buffer apart from C: the value C held before the GEMM was copied there).
 *
 * Launch contract: block = 256 (1-D), grid = min(ceil(total / 256), 2^20) with total = batch * M * N
 * (bzc_launch's); the grid-stride loop covers whatever the grid does not.
 */
extern "C" __global__ void bz_epilogue(int64_t batch, int64_t M, int64_t N, float *C, int64_t c_bs,
                                       const float *bias, const float *res, int act) {
    const int64_t mn = M * N, total = batch * mn;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t o = (i / mn) * c_bs + i % mn;
        C[o] = bz_cuda_epilogue(C[o], bias, i % N, res, o, act);
    }
}

/* -------------------------------------------------------------------------------- scale epilogue --
 * In place on an NHWC convolution's result (bz_conv2d's, run without an epilogue): Y[i] =
 * bz_cuda_epilogue(Y[i] * scale[c], bias, c, res, i, act) with c = i % OC: a batch norm on weights read
 * at run time (passes/layout.py's scale and shift, braze_conv2d_ws). res apart from Y.
 *
 * Launch contract: block = 256 (1-D), grid = min(ceil(total / 256), 2^20) (bzc_launch's); the grid-stride
 * loop covers whatever the grid does not.
 */
extern "C" __global__ void bz_scale_epilogue(int64_t total, int64_t OC, float *Y, const float *scale,
                                             const float *bias, const float *res, int act) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
        Y[i] = bz_cuda_epilogue(Y[i] * scale[i % OC], bias, i % OC, res, i, act);
}

/* ----------------------------------------------------------------------------------------- conv2d --
 * Y = epilogue(conv2d(X, Wt)) with torch's semantics: Wt is [OC, C/groups, KH, KW]; X, Y and res are
 * NCHW when nhwc == 0, else NHWC; stride sh/sw, dilation dh/dw, padding ph/pw on the top/left (the
 * bottom/right padding is whatever OH/OW imply). One thread per output element, a direct sum
 * over (kh, kw, c): a correct fallback for any shape, not a fast path.
 *
 * Launch contract: block = BZ_CONV_THREADS (1-D), grid = min(ceil(total / 256), BZ_CONV_MAX_BLOCKS)
 * with total = N * OC * OH * OW; the grid-stride loop covers whatever the grid does not.
 */
#define BZ_CONV_THREADS 256
#define BZ_CONV_MAX_BLOCKS (65535 * 8)

extern "C" __global__ void bz_conv2d(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OC, int64_t KH, int64_t KW,
                                     int64_t OH, int64_t OW, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                                     int64_t dh, int64_t dw, int64_t groups, int nhwc,
                                     const float *X, const float *Wt, const float *bias, const float *res,
                                     int act, float *Y) {
    const int64_t total = N * OC * OH * OW, cpg = C / groups, ocpg = OC / groups;
    /* element strides of X along (n, c, h, w) */
    const int64_t xs_c = nhwc ? 1 : H * W, xs_w = nhwc ? C : 1, xs_h = W * xs_w, xs_n = C * H * W;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n, oc, oh, ow, r = i;
        if (nhwc) {
            oc = r % OC; r /= OC;
            ow = r % OW; r /= OW;
            oh = r % OH; n = r / OH;
        } else {
            ow = r % OW; r /= OW;
            oh = r % OH; r /= OH;
            oc = r % OC; n = r / OC;
        }
        const float *x = X + n * xs_n + (oc / ocpg) * cpg * xs_c;
        const float *w = Wt + oc * cpg * KH * KW;
        float acc = 0.0f;
        for (int64_t kh = 0; kh < KH; ++kh) {
            const int64_t ih = oh * sh - ph + kh * dh;
            if (ih < 0 || ih >= H) continue;
            for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t iw = ow * sw - pw + kw * dw;
                if (iw < 0 || iw >= W) continue;
                const float *xp = x + ih * xs_h + iw * xs_w, *wp = w + kh * KW + kw;
                for (int64_t c = 0; c < cpg; ++c) acc += xp[c * xs_c] * wp[c * KH * KW];
            }
        }
        Y[i] = bz_cuda_epilogue(acc, bias, oc, res, i, act);
    }
}


/* ---- a block's reduction (codegen/cuda_kernel.py's block rows) ----------------------------
 * Every thread of the block calls it with its partial; every thread gets the whole result.
 * blockDim.x is a power of two from 32 to 1024 (bzc_launch's 256). Each warp reduces its 32
 * partials by shuffles, lane 0 of each writes one to shared memory, and every warp then reduces
 * those (lane l reads partial l % warps, so each aligned group of `warps` lanes holds them all):
 * two barriers instead of a tree's log2(blockDim) + 2, and the order of the adds is fixed, so a
 * row's sum is the same at every call. op: 0 sum, 1 prod, 2 max, 3 min; float max/min are
 * braze_vec.h's (NaN-propagating, as the CPU kernels). The first barrier keeps a previous call's
 * readers of part[] ahead of this call's writers. cuda_emu.h emulates the shuffles. */
template <class T> static __device__ __forceinline__ T bz_comb(int op, T a, T b) {
    return op == 0 ? (T)(a + b) : op == 1 ? (T)(a * b) : op == 2 ? (a > b ? a : b) : (a < b ? a : b);
}
static __device__ __forceinline__ float bz_comb(int op, float a, float b) {
    return op == 0 ? a + b : op == 1 ? a * b : op == 2 ? bz_maxf(a, b) : bz_minf(a, b);
}
static __device__ __forceinline__ double bz_comb(int op, double a, double b) {
    return op == 0 ? a + b : op == 1 ? a * b : op == 2 ? bz_maxd(a, b) : bz_mind(a, b);
}
template <class T> static __device__ __forceinline__ T bz_shfl_xor(T v, int lanes) {
    if constexpr (sizeof(T) < 4) return (T)__shfl_xor_sync(0xffffffffu, (int)v, lanes); /* bool, 8/16-bit */
    else return __shfl_xor_sync(0xffffffffu, v, lanes);
}
template <class T> static __device__ T bz_block_reduce(int op, T v) {
    __shared__ T part[32];
    for (int o = 16; o > 0; o >>= 1) v = bz_comb(op, v, bz_shfl_xor(v, o));
    const unsigned lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = part[lane & (warps - 1)];
    for (unsigned o = warps >> 1; o > 0; o >>= 1) v = bz_comb(op, v, bz_shfl_xor(v, (int)o));
    return v;
}


/* ---- im2col for a convolution as a GEMM (braze_cuda_rt.h, NHWC, groups 1) ------------------
 * col[m - m0, k] for output rows m in [m0, m0 + mc) (m = (n, oh, ow)) and k = (c, kh, kw), the
 * order of a [OC, C, KH, KW] weight's rows; outside the image, 0. Grid-stride over mc * C*KH*KW. */
extern "C" __global__ void bz_im2col(int64_t N, int64_t C, int64_t H, int64_t W, int64_t KH, int64_t KW,
                                     int64_t OH, int64_t OW, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                                     int64_t dh, int64_t dw, int64_t m0, int64_t mc, const float *X, float *col) {
    (void)N;
    const int64_t K = C * KH * KW, total = mc * K;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t k = i % K, m = m0 + i / K;
        const int64_t kw = k % KW, kh = (k / KW) % KH, c = k / (KW * KH);
        const int64_t ow = m % OW, oh = (m / OW) % OH, n = m / (OW * OH);
        const int64_t ih = oh * sh - ph + kh * dh, iw = ow * sw - pw + kw * dw;
        col[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? X[((n * H + ih) * W + iw) * C + c] : 0.0f;
    }
}

#endif /* BRAZE_CUDA_LIB_CUH */
