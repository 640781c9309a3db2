/* braze_dnnl.h: braze's float32 GEMM / convolution calls on oneDNN's C API.
 *
 * Built once into a shared library of its own (braze_dnnl_{core,wtrack,wcache,matmul,live,smallm,...}.c in
 * onednn.HELPER_PARTS's order, one translation unit; braze/extern/onednn.py helper_library) that model libraries
 * link, so all models in a process share one instance of its state: the engine, the
 * per-thread streams and scratchpads, the primitive cache (keyed per packed weight, see
 * braze_dnnl_core.c) and the runtime-M setting. Every function returns 0 on success and nonzero
 * on failure, with a message naming the call and the shapes in err[errlen];
 * nothing aborts. All tensors are dense row-major, float32 unless BRAZE_TYPES says otherwise.
 *
 * Dynamic shapes: primitives are created per distinct shape on first use and
 * kept in a small thread-safe cache inside the helper (creating one is not a
 * recompile; see docs/gemm.md for the numbers behind this choice). Constant weights
 * are reordered once into the layout the primitive wants (braze_pack_*); weights given at
 * each call are read as they are (braze_matmul_w) or through a copy checked by content
 * (braze_conv2d_w).
 *
 * Threads: oneDNN's own runtime (OpenMP builds follow the caller's OpenMP
 * settings, TBB builds use TBB's arena; braze_dnnl_runtime() says which).
 */
#ifndef BRAZE_DNNL_H
#define BRAZE_DNNL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Activations (the `act` argument). */
enum {
    BRAZE_ACT_NONE = 0,
    BRAZE_ACT_RELU = 1,
    BRAZE_ACT_GELU_ERF = 2,
    BRAZE_ACT_GELU_TANH = 3,
    BRAZE_ACT_SILU = 4,
    BRAZE_ACT_SIGMOID = 5,
    BRAZE_ACT_TANH = 6,
    /* eager's relu and relu6 (x < 0 ? 0 : x, then x > 6 ? 6 : x: NaN and -0 kept), which oneDNN's
     * eltwise would not give (its relu and clip map NaN to a number). braze applies them itself:
     * in its small-M kernels' epilogue, else over C after oneDNN's primitive (braze_after_act),
     * so nothing may follow them: a residual comes first (BRAZE_ACT_AFTER_RESIDUAL), and a 16-bit
     * C takes them after its rounding, on the stored bits. */
    BRAZE_ACT_RELU_EAGER = 7,
    BRAZE_ACT_RELU6_EAGER = 8,
    /* OR-ed into `act`: apply the activation after the residual add
     * (ResNet: relu(conv + bias + residual)) instead of before it. */
    BRAZE_ACT_AFTER_RESIDUAL = 0x100
};

/* Operand dtypes (BRAZE_DT_*), OR-ed into `act` (batched matmul: its `types`) as
 * BRAZE_TYPES(src, dst, bias): src is A's (and a weight read at the call: the same), dst is C's
 * and the residual's, bias the bias's. 0 everywhere is all float32. 16-bit products accumulate
 * in float32 and round once into dst. A prepacked weight has the dtype it was packed in
 * (braze_pack_b_typed, braze_pack_conv_typed), which must be src's. */
enum { BRAZE_DT_F32 = 0, BRAZE_DT_BF16 = 1, BRAZE_DT_F16 = 2 };
#define BRAZE_TYPES(src, dst, bias) (((src) << 12) | ((dst) << 14) | ((bias) << 16))
#define BRAZE_TYPES_MASK (0x3f << 12)

typedef struct braze_packed_b braze_packed_b;       /* opaque: a prepacked GEMM weight */
typedef struct braze_packed_conv braze_packed_conv; /* opaque: a prepacked conv weight */
typedef struct braze_live_b braze_live_b;           /* opaque: a GEMM site with run-time weights */

/* Creates the engine (idempotent, thread-safe). Called by every other entry;
 * call it from braze_init to pay the start-up cost there. */
int braze_dnnl_init(char *err, int errlen);

/* The helper's OpenMP runtime (braze_omp.h, braze_dnnl_threads.c): a model library that links
 * the helper runs its own OpenMP calls through this table, as libdnnl does. */
struct bz_omp_ops;
const struct bz_omp_ops *braze_dnnl_omp_ops(void);
int32_t braze_dnnl_omp_status(void);

/* "omp", "tbb", "seq", "threadpool" or "sycl+tbb" etc.: the library's runtime. */
const char *braze_dnnl_runtime(void);

/* Selects how dynamic M is handled by braze_matmul (for measurements):
 * 0 = primitive per distinct shape, cached (default);
 * 1 = one primitive per weight with DNNL_RUNTIME_DIM_VAL for M.
 * Process-wide (every model linking this helper); braze_dnnl_runtime_m() reads it back. */
void braze_dnnl_set_runtime_m(int on);
int braze_dnnl_runtime_m(void);

/* A call with BRAZE_PATH_AUTO runs braze_matmul's own small-M kernel (straight from the packed
 * weight, no primitive) for M <= max_m where the weight's layout and the activation allow; 0 turns
 * the kernel off for every call, BRAZE_PATH_SMALLM too (a diagnostic: models' dispatch tables name
 * their path). Process-wide, like braze_dnnl_set_runtime_m. */
void braze_dnnl_set_small_m(int max_m);
int braze_dnnl_small_m(void);
/* A batched matmul of two activations (float32, A untransposed) runs the small-M kernels, no
 * primitive, for M <= max_m (default 16) while braze_dnnl_small_m() allows M too; 0 turns that off.
 * Process-wide. */
void braze_dnnl_set_small_bmm(int max_m);
int braze_dnnl_small_bmm(void);
/* braze_conv2d_w runs an NHWC, ungrouped conv of at most max_m output pixels (N x OH x OW) as a
 * GEMM on the plain weight (braze_matmul_w over gathered columns) instead of checking its cached
 * re-laid-out copy; 0 turns it off. Process-wide, like braze_dnnl_set_small_m. */
void braze_dnnl_set_conv_gemm_m(int max_m);
int braze_dnnl_conv_gemm_m(void);
/* The packed weight's K rows (padded) if the small-M kernel can read it, else 0 (another
 * layout; on AVX2 builds, a weight braze_pack_b_const did not keep; a helper built without
 * AVX-512 or AVX2: then oneDNN runs every M). */
int64_t braze_packed_b_small_m_rows(const braze_packed_b *B);
/* 1 if the small-M kernel runs a call on this weight at this M with this epilogue (act's low
 * bits and dtypes), 0 if BRAZE_PATH_SMALLM would run one of oneDNN's primitives instead: what the
 * tuner need not time twice. */
int braze_packed_b_small_m_takes(const braze_packed_b *B, int64_t M, int act);

/* A 64-bit fingerprint of n bytes (XXH3-style; the same in every process and for every thread
 * count): what braze_conv2d_w checks its cached copy of a weight against. */
uint64_t braze_fingerprint(const void *data, size_t n);

/* Number of primitives created so far (cache misses) and cache hits. */
void braze_dnnl_stats(int64_t *created, int64_t *hits);

/* Prepacks a weight once. W is [N,K] row-major (torch linear layout) when
 * transposed_layout=1, else [K,N] row-major. Returns NULL on failure (err set). */
braze_packed_b *braze_pack_b(const float *W, int64_t N, int64_t K, int transposed_layout);
braze_packed_b *braze_pack_b_err(const float *W, int64_t N, int64_t K, int transposed_layout,
                                 char *err, int errlen);
/* The same from a weight W stored in w_dt, packed in dt (a float32 weight packed in bfloat16:
 * rounded once, here). */
braze_packed_b *braze_pack_b_typed(const void *W, int w_dt, int dt, int64_t N, int64_t K, int transposed_layout,
                                   char *err, int errlen);
/* The same for a constant: W stays valid and unchanged while B lives (a model's weight). A float32
 * [N,K] W packed in float32 is kept: AVX2 builds' small-M kernels read it at M <= 12 and their own
 * copy of it in 16-column panels (made here) up to M = 127, where oneDNN's gemm:jit on the packed
 * weight took up to 1.85x their time (docs/gemm.md). */
braze_packed_b *braze_pack_b_const(const void *W, int w_dt, int dt, int64_t N, int64_t K, int transposed_layout,
                                   char *err, int errlen);
void braze_free_packed_b(braze_packed_b *B);

/* Kernels of a prepacked weight's product, OR-ed into braze_matmul's `act` as BRAZE_PATH(p): a
 * model's dispatch table picks one per range of M (braze/tune/products.py, in the IR). AUTO keeps the
 * helper's rule: the small-M kernel at M <= braze_dnnl_small_m() where it applies, oneDNN's
 * run-time-M primitive at M <= 2, else a primitive per M. SMALLM runs the small-M kernel where
 * the weight's layout, dtypes and activation allow, unless braze_dnnl_set_small_m(0) turned it off
 * (else AUTO's oneDNN rule); DNNL a primitive per M; DNNL_RT one primitive with a run-time M (a
 * primitive per M with a residual, which it does not take). Every path computes the same product,
 * in its own summation order. */
enum { BRAZE_PATH_AUTO = 0, BRAZE_PATH_SMALLM = 1, BRAZE_PATH_DNNL = 2, BRAZE_PATH_DNNL_RT = 3 };
#define BRAZE_PATH(p) ((p) << 20)
#define BRAZE_PATH_MASK (3 << 20)
#define BRAZE_PATH_OF(act) (((act) >> 20) & 3)

/* C[M,N] = act(A[M,K] @ W^T + bias[N]) + residual[M,N]   (bias/residual may be NULL;
 * residual may alias C). With act | BRAZE_ACT_AFTER_RESIDUAL:
 * C = act(A @ W^T + bias + residual). `act` may carry a BRAZE_PATH. */
int braze_matmul(int64_t M, int64_t N, int64_t K, const void *A, const braze_packed_b *B,
                 const void *bias, const void *residual, int act, void *C,
                 char *err, int errlen);

/* Creates, if new, the primitive that braze_matmul(M, N, K, ..., B, bias, residual, act)
 * runs (has_bias: whether bias is non-NULL; has_res: 0 without a residual, 1 with one of its own,
 * 2 when the residual is C itself), and runs nothing: a model's
 * entry creates a new shape's primitives in parallel before its first call at that shape.
 * 0 when the primitive is ready; 1 when not (the call itself then reports why). */
int braze_matmul_prepare(int64_t M, const braze_packed_b *B, int has_bias, int has_res, int act);

/* For a tuner: braze_matmul(M, N, K, A, Bs[i % nB], bias, residual, act, C) for i in [0, reps),
 * the weights taken in turn (nB copies of one weight, so that each call reads it from as far as
 * a model's would), timed in this loop. The nanoseconds the calls took, or -1 on an error (err). */
int64_t braze_time_matmul(int64_t reps, int64_t M, int64_t N, int64_t K, const void *A, const braze_packed_b *const *Bs,
                          int nB, const void *bias, const void *residual, int act, void *C, char *err, int errlen);

/* The same with a plain weight read at this call, never prepacked, so the caller may change it
 * between calls (plug-in mode's live weights): W is [N,K] row-major when transposed_layout=1
 * (torch linear layout), else [K,N]. Primitives are cached per shape and shared by every model. */
int braze_matmul_w(int64_t M, int64_t N, int64_t K, const void *A, const void *W, int transposed_layout,
                   const void *bias, const void *residual, int act, void *C, char *err, int errlen);
int braze_matmul_w_prepare(int64_t M, int64_t N, int64_t K, int transposed_layout, int has_bias, int has_res,
                           int act);

/* Live weights: whether a weight read at each call (plug-in mode) changed since the last call,
 * from the kernel's page tables (Linux >= 6.7: userfaultfd's async write-protection and
 * PAGEMAP_SCAN; braze_dnnl_wtrack.c). braze_live_check looks at the weights ptrs[i] (bytes[i]
 * bytes each) at once and gives each a generation, gens[i]: the same number at two calls means
 * no whole page of the weight was written in between (the bytes on its partial end pages are the
 * caller's to check, as braze_matmul_lw does); 0 means not tracked (no kernel support, a file's
 * or shared memory's pages, a weight under 64 KB, or one written at every call), and 1 not yet (a
 * weight seen for the first time: tracked from its next call). Returns how many are not 0.
 * Thread-safe. */
int braze_live_check(int n, const void *const *ptrs, const size_t *bytes, uint64_t *gens);

/* A GEMM site whose weight ([N,K] or [K,N] as in braze_matmul_w, dtype dt) is read at each call:
 * braze_matmul_lw runs braze_matmul on a packed copy of the weight while its generation (gen, from
 * braze_live_check in this call) stays the one the copy was made at. It keeps a copy for each of a
 * few weights (model instances sharing a library), made at the call that arms the weight's range
 * and after each write. Without one, in a process that tracks writes, a call gets the bits a copy
 * would give; elsewhere it runs braze_matmul_w. Thread-safe; free it with braze_live_b_free. */
braze_live_b *braze_live_b_new(int64_t N, int64_t K, int transposed_layout, int dt, char *err, int errlen);
void braze_live_b_free(braze_live_b *L);
int braze_matmul_lw(braze_live_b *L, uint64_t gen, int64_t M, const void *A, const void *W, const void *bias,
                    const void *residual, int act, void *C, char *err, int errlen);
int braze_matmul_lw_prepare(braze_live_b *L, int64_t M, int has_bias, int has_res, int act);
/* Copies of weights L has made so far (for tests). */
int64_t braze_live_b_packs(braze_live_b *L);

/* Whether live weights are checked from the kernel's page tables (braze_live_check) rather than
 * by a fingerprint of their bytes: 1 when on and available. checks / written / arms (may be
 * NULL): ranges looked at so far, those that had been written, and times a range was
 * (re)registered. BRAZE_WRITE_TRACKING=0 in the environment, or braze_dnnl_set_write_tracking(0),
 * turns it off (process-wide); turning it off also forgets every range. */
int braze_dnnl_write_tracking(int64_t *checks, int64_t *written, int64_t *arms);
void braze_dnnl_set_write_tracking(int on);

/* Batched, both operands activations: for b in [0,batch):
 * C[b] = alpha * op(A[b]) @ op(Bm[b]), op(A) is [M,K], op(Bm) is [K,N].
 * transA=0: A[b] is [M,K]; transA=1: A[b] is [K,M]. transB=0: Bm[b] is [K,N];
 * transB=1: Bm[b] is [N,K]. All dense row-major, no broadcasting. */
int braze_batch_matmul(int64_t batch, int64_t M, int64_t N, int64_t K,
                       const float *A, int transA, const float *Bm, int transB,
                       float alpha, float *C, char *err, int errlen);

/* The same with broadcast batch dims: A has batch dims a_batch[0..nb), Bm has
 * b_batch[0..nb) (1 <= nb <= 4; each pair equal, or 1 on one side), C has
 * their elementwise max. Operands dense row-major as above. */
int braze_batch_matmul_bcast(int nb, const int64_t *a_batch, const int64_t *b_batch,
                             int64_t M, int64_t N, int64_t K, const float *A, int transA,
                             const float *Bm, int transB, float alpha, float *C,
                             char *err, int errlen);
/* braze_batch_matmul_bcast with 16-bit operands or result: types = BRAZE_TYPES(src, dst, 0), A and
 * Bm in src, C in dst. */
int braze_batch_matmul_typed(int types, int nb, const int64_t *a_batch, const int64_t *b_batch,
                             int64_t M, int64_t N, int64_t K, const void *A, int transA,
                             const void *Bm, int transB, float alpha, void *C,
                             char *err, int errlen);

/* Prepacks a conv weight W[OC, IC/groups, KH, KW] (torch layout) for the
 * given conv geometry (pad_h / pad_w: top / left, *_end: bottom / right);
 * layout: 0 = NCHW activations, 1 = NHWC activations.
 * W must stay valid until braze_free_packed_conv: a later shape whose
 * primitive wants another weight layout re-lays it out from W. */
braze_packed_conv *braze_pack_conv_weights(const float *W, int64_t OC, int64_t IC,
                                           int64_t KH, int64_t KW, int64_t groups,
                                           int64_t stride_h, int64_t stride_w,
                                           int64_t pad_h, int64_t pad_w,
                                           int64_t pad_h_end, int64_t pad_w_end,
                                           int64_t dil_h, int64_t dil_w, int layout,
                                           char *err, int errlen);
/* The same from a weight stored in w_dt, packed in dt (BRAZE_DT_*). */
braze_packed_conv *braze_pack_conv_typed(const void *W, int w_dt, int dt, int64_t OC, int64_t IC,
                                         int64_t KH, int64_t KW, int64_t groups,
                                         int64_t stride_h, int64_t stride_w,
                                         int64_t pad_h, int64_t pad_w,
                                         int64_t pad_h_end, int64_t pad_w_end,
                                         int64_t dil_h, int64_t dil_w, int layout,
                                         char *err, int errlen);
void braze_free_packed_conv(braze_packed_conv *P);
/* A conv's geometry alone, for weights given at each call (braze_conv2d_w); free it with
 * braze_free_packed_conv. layout: 0 NCHW or 1 NHWC activations, | 2 for weights [OC, KH, KW, IC] in
 * memory (a channels-last OIHW tensor's; one group). */
braze_packed_conv *braze_conv_geometry(int64_t OC, int64_t IC, int64_t KH, int64_t KW, int64_t groups,
                                       int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                                       int64_t pad_h_end, int64_t pad_w_end, int64_t dil_h, int64_t dil_w,
                                       int layout, char *err, int errlen);
/* The same for run-time weights of dtype dt (BRAZE_DT_*). */
braze_packed_conv *braze_conv_geometry_typed(int dt, int64_t OC, int64_t IC, int64_t KH, int64_t KW,
                                             int64_t groups, int64_t stride_h, int64_t stride_w, int64_t pad_h,
                                             int64_t pad_w, int64_t pad_h_end, int64_t pad_w_end, int64_t dil_h,
                                             int64_t dil_w, int layout, char *err, int errlen);
/* How many weight layouts P holds (1 + those later shapes asked for); for tests. */
int braze_packed_conv_layouts(const braze_packed_conv *P);
/* Packed copies its GEMM site (run-time weights, few output pixels) has made so far; for tests. */
int64_t braze_conv_live_packs(const braze_packed_conv *P);

/* Y = act(conv2d(X, W) + bias) + residual (or, with BRAZE_ACT_AFTER_RESIDUAL,
 * act(conv2d(X, W) + bias + residual)). X is [N,IC,H,W] (layout 0) or
 * [N,H,W,IC] (layout 1); Y likewise with OC, OH, OW (computed by the caller
 * with the usual formula and passed for checking). bias[OC] / residual
 * (Y's shape) may be NULL. Padding is symmetric (pad_h top and bottom). */
int braze_conv2d(int64_t N, int64_t H, int64_t W, const void *X,
                 const braze_packed_conv *P, const void *bias, const void *residual,
                 int act, int64_t OH, int64_t OW, void *Y, char *err, int errlen);

/* braze_conv2d for a geometry from braze_conv_geometry, with the plain weights Wt[OC, IC/groups,
 * KH, KW] of this call. The copy re-laid out for the primitive is kept (a few weight sets per
 * geometry) and reused while Wt's pages are unwritten (braze_dnnl_write_tracking) or, where that
 * is not known, while a fingerprint of Wt's bytes (braze_fingerprint) matches. */
int braze_conv2d_w(int64_t N, int64_t H, int64_t W, const void *X, const braze_packed_conv *P, const void *Wt,
                   const void *bias, const void *residual, int act, int64_t OH, int64_t OW, void *Y,
                   char *err, int errlen);

/* braze_conv2d_w for Y = act(conv2d(X, W) * scale + bias) + residual (the residual's place as
 * braze_conv2d's): an inference batch norm on weights read at run time (passes/layout.py), per
 * channel (scale[OC], float32, NHWC only; bias may be NULL). oneDNN applies both in the
 * convolution's epilogue; where that would send it to its reference kernel, the helper applies
 * them itself over the result. act: none, relu or relu6 (passes/offload.py). */
int braze_conv2d_ws(int64_t N, int64_t H, int64_t W, const void *X, const braze_packed_conv *P, const void *Wt,
                    const void *scale, const void *bias, const void *residual, int act, int64_t OH, int64_t OW,
                    void *Y, char *err, int errlen);

/* As braze_matmul_prepare, for braze_conv2d(N, H, W, ..., P, bias, residual, act, ...), braze_conv2d_w
 * and (has_bias | 2 when it has a scale) braze_conv2d_ws. */
int braze_conv2d_prepare(int64_t N, int64_t H, int64_t W, const braze_packed_conv *P, int has_bias, int has_res,
                         int act);

/* For a tuner, as braze_time_matmul: braze_conv2d(N, H, W, X, Ps[i % nP], bias, residual, act, OH, OW, Y) for
 * i in [0, reps); the nanoseconds the calls took, or -1 on an error (err). */
int64_t braze_time_conv2d(int64_t reps, int64_t N, int64_t H, int64_t W, const void *X,
                          const braze_packed_conv *const *Ps, int nP, const void *bias, const void *residual,
                          int act, int64_t OH, int64_t OW, void *Y, char *err, int errlen);

/* A convolution's gradients in training, float32, for a geometry from braze_conv_geometry (its
 * layout is the activations'; Wt and dW are [OC, IC/groups, KH, KW]). dY is the gradient of
 * the output [N, OC, OH, OW]. braze_conv2d_bwd_data writes dX, the input's gradient
 * [N, IC, H, W]; braze_conv2d_bwd_weights writes dW from the input X (all zero when N = 0). The
 * bias's gradient is dY's sum over N, OH and OW, which braze computes itself. */
int braze_conv2d_bwd_data(int64_t N, int64_t H, int64_t W, const void *dY, const braze_packed_conv *P, const void *Wt,
                          int64_t OH, int64_t OW, void *dX, char *err, int errlen);
int braze_conv2d_bwd_weights(int64_t N, int64_t H, int64_t W, const void *X, const void *dY,
                             const braze_packed_conv *P, int64_t OH, int64_t OW, void *dW, char *err, int errlen);

#ifdef __cplusplus
}
#endif
#endif /* BRAZE_DNNL_H */
