/* braze_vec.h: scalar and SIMD helpers for generated kernels.
 *
 * Define BZ_VB (vector bytes: 64 AVX-512, 32 AVX2, 16 SSE, 0 scalar) before
 * including. Vectors are GCC vector extensions, so one source serves every
 * target; intrinsics are used only where the generic form has no operator
 * (sqrt, floor/ceil/round, fma), behind feature macros.
 *
 * float32 math (exp, log, tanh, erf, gelu, sigmoid, silu, gelu_tanh) is
 * braze_vmath.h, instantiated for the SIMD type (bz_vexp, ...) and for plain
 * floats (bz_sexp, ...): the same operations in the same order, so the SIMD
 * body and the scalar remainder of a loop give the same bits. Fused
 * multiply-adds are explicit (bz_fmaf, bz_vfma: fused where the target has FMA,
 * else a multiply and an add, in both); kernels are compiled with
 * -ffp-contract=off so the compiler fuses nothing else. float64 uses libm.
 */
#ifndef BRAZE_VEC_H
#define BRAZE_VEC_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <float.h>

#ifndef BZ_VB
#define BZ_VB 0
#endif

#if defined(__GNUC__)
#define BZ_INLINE static inline __attribute__((always_inline))
#else
#define BZ_INLINE static inline
#endif

/* ---------------------------------------------------------------- ints -- */
/* Python's // and % on index expressions. By 0 they give 0 rather than trap: a divisor is a
 * dim's size, and a kernel computes the index into an empty dim speculatively, for a load whose
 * value is never used (concat of a tiled empty input: fuzz seed 70587, SIGFPE) */
BZ_INLINE int64_t bz_floordiv(int64_t a, int64_t b) {
    if (b == 0) return 0;
    int64_t q = a / b;
    return ((a % b) != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
BZ_INLINE int64_t bz_floormod(int64_t a, int64_t b) {
    if (b == 0) return 0;
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
BZ_INLINE int64_t bz_imin(int64_t a, int64_t b) { return a < b ? a : b; }
BZ_INLINE int64_t bz_imax(int64_t a, int64_t b) { return a > b ? a : b; }
/* integer division truncating toward zero; x / 0 == 0 (numpy's result); x / -1 == -x,
 * wrapping (INT64_MIN / -1 traps in the hardware divide) */
BZ_INLINE int64_t bz_idiv(int64_t a, int64_t b) {
    return b == 0 ? 0 : (b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b);
}
/* remainder with the divisor's sign (torch.remainder); x % 0 == 0, x % -1 == 0 */
BZ_INLINE int64_t bz_imod(int64_t a, int64_t b) { return (b == 0 || b == -1) ? 0 : bz_floormod(a, b); }
/* remainder with the dividend's sign (C %, torch.fmod); x % 0 == 0, and x % -1 == 0 avoids INT64_MIN % -1 */
BZ_INLINE int64_t bz_ifmod(int64_t a, int64_t b) { return (b == 0 || b == -1) ? 0 : a % b; }
/* integer power, wrapping on overflow (unsigned arithmetic: signed overflow is undefined in C) */
BZ_INLINE int64_t bz_ipow(int64_t a, int64_t b) {
    uint64_t r = 1, x = (uint64_t)a;
    if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
    while (b) { if (b & 1) r *= x; x *= x; b >>= 1; }
    return (int64_t)r;
}

/* a float read as a size (a value symbol): truncated; NaN and what int64 cannot hold saturate, so the
 * range check that follows rejects them instead of C's undefined conversion */
BZ_INLINE int64_t bz_ftoi64(double x) {
    return x != x ? INT64_MIN : x >= 9.2e18 ? INT64_MAX : x <= -9.2e18 ? INT64_MIN : (int64_t)x;
}
/* braze.ops.bitwise's shifts: by b < 0 or b >= bits, only the sign's fill is left; a left shift drops
 * what passes the width (done unsigned: shifting into a signed sign bit is undefined in C) */
BZ_INLINE int64_t bz_shl(int64_t a, int64_t b, int64_t bits) {
    return (b < 0 || b >= bits) ? 0 : (int64_t)((uint64_t)a << b);
}
BZ_INLINE int64_t bz_sshr(int64_t a, int64_t b, int64_t bits) {
    return (b < 0 || b >= bits) ? (a < 0 ? -1 : 0) : a >> b;
}
BZ_INLINE uint64_t bz_ushr(uint64_t a, int64_t b, int64_t bits) { return (b < 0 || b >= bits) ? 0 : a >> b; }
/* uint64's own: its values above INT64_MAX do not survive the int64 forms above */
BZ_INLINE uint64_t bz_udiv(uint64_t a, uint64_t b) { return b == 0 ? 0 : a / b; }
BZ_INLINE uint64_t bz_umod(uint64_t a, uint64_t b) { return b == 0 ? 0 : a % b; }
BZ_INLINE uint64_t bz_upow(uint64_t a, uint64_t b) {
    uint64_t r = 1;
    while (b) { if (b & 1) r *= a; a *= a; b >>= 1; }
    return r;
}

/* loop IR's axis_index: a gathered index (data) counted from the end when negative. One outside
 * [-n, n), where eager raises, reads the nearest end of the axis (never memory outside it; 0 for an
 * empty axis) and sets bit 2 of the kernel's failure word (c_kernel.KERNEL_BAD_INDEX), so the call
 * fails (BRAZE_ERR_RANGE) */
BZ_INLINE int64_t bz_axis_clamp(int64_t i, int64_t n) {
    int64_t j = i < 0 ? i + n : i;
    return j < 0 ? 0 : j < n ? j : (n > 0 ? n - 1 : 0);
}
#if !defined(__CUDACC__)
BZ_INLINE int64_t bz_axis_index(int64_t i, int64_t n, int *fail) {
    if (__builtin_expect(i < -n || i >= n, 0)) __atomic_fetch_or(fail, 2, __ATOMIC_RELAXED);
    return bz_axis_clamp(i, n);
}
/* loop IR's divisor: an integer divisor (data). 0, where eager raises, sets bit 4 of the kernel's
 * failure word (c_kernel.KERNEL_DIV_ZERO); the division itself gives 0 (bz_idiv) */
BZ_INLINE int64_t bz_divisor(int64_t b, int *fail) {
    if (__builtin_expect(b == 0, 0)) __atomic_fetch_or(fail, 4, __ATOMIC_RELAXED);
    return b;
}
#endif

/* braze.ops.creation's counter-based random numbers: SplitMix64's output number counter + 1 from
 * the state seed, its top 24 bits as a float in [0, 1) (the same bits as uniform_numpy) */
BZ_INLINE float bz_uniform(uint64_t seed, uint64_t counter) {
    uint64_t z = seed + (counter + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) * 0x1p-24f;
}

/* n elements of size bytes, or NULL (n * size overflowing is a failure, not a small block) */
BZ_INLINE void *bz_malloc_n(int64_t n, size_t size) {
    if (n < 0 || (uint64_t)n > SIZE_MAX / size) return NULL;
    return malloc(n ? (size_t)n * size : 1);
}

/* ------------------------------------------------------- scalar floats -- */
/* max/min propagating NaN (numpy.maximum / minimum); the vector forms' lanes bit for bit. The
 * conditions join float compares with | and &, not || and &&: gcc 12.2 at -O3 -fopenmp -mavx512f
 * vectorized `(a >= b || b != b) ? b : a` inside two sums of an OpenMP loop into wrong values (a
 * variance of min(x, t) over 4 rows off by 3x: fuzz seed 1503, tests/codegen/test_kernels.py) */
BZ_INLINE float bz_maxf(float a, float b) { return ((a <= b) | (b != b)) ? b : a; }
BZ_INLINE float bz_minf(float a, float b) { return ((a >= b) | (b != b)) ? b : a; }
BZ_INLINE double bz_maxd(double a, double b) { return ((a <= b) | (b != b)) ? b : a; }
BZ_INLINE double bz_mind(double a, double b) { return ((a >= b) | (b != b)) ? b : a; }
BZ_INLINE float bz_modf(float a, float b) {
    float r = fmodf(a, b);
    return ((r != 0.0f) & ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
BZ_INLINE double bz_modd(double a, double b) {
    double r = fmod(a, b);
    return ((r != 0.0) & ((r < 0.0) != (b < 0.0))) ? r + b : r;
}
/* IEEE pow. The exponent goes through an empty asm, so GCC cannot see a constant 0.5: at -O3 its
   vectorizer rewrites powf(x, 0.5f) as sqrt(x), NaN at -inf and -0 at -0 where pow gives inf and
   +0 (fuzz seed 20498) */
#if defined(__CUDACC__) /* device code: NVRTC's own optimizer; no x86 register class */
#define BZ_OPAQUE(v) ((void)0)
#elif defined(__x86_64__) || defined(__i386__)
#define BZ_OPAQUE(v) __asm__("" : "+x"(v))
#else
#define BZ_OPAQUE(v) __asm__("" : "+r"(v))
#endif
BZ_INLINE float bz_powf(float a, float b) { BZ_OPAQUE(b); return powf(a, b); }
BZ_INLINE double bz_powd(double a, double b) { BZ_OPAQUE(b); return pow(a, b); }
/* float64 activations (libm); the limits at +-inf as in braze_vmath.h */
BZ_INLINE double bz_sigmoidd(double x) {
    double e = exp(-fabs(x));
    return (x >= 0.0 ? 1.0 : e) / (1.0 + e);
}
BZ_INLINE double bz_silud(double x) { return fmax(x, -DBL_MAX) * bz_sigmoidd(x); }
BZ_INLINE double bz_gelud(double x) { return 0.5 * fmax(x, -DBL_MAX) * erfc(-x * 0.70710678118654752); }
BZ_INLINE double bz_gelu_tanhd(double x) {
    return 0.5 * fmax(x, -DBL_MAX) * (1.0 + tanh(0.79788456080286536 * (x + 0.044715 * x * x * x)));
}

/* ------------------------------------------------------------------ fma -- */
#if defined(__FMA__) || defined(__AVX512F__)
#define BZ_HAS_FMA 1
#else
#define BZ_HAS_FMA 0
#endif
BZ_INLINE float bz_fmaf(float a, float b, float c) {
#if BZ_HAS_FMA
    return __builtin_fmaf(a, b, c);
#else
    return a * b + c; /* two roundings, as bz_vfma on this target */
#endif
}

/* ------------------------------------------------- scalar float32 math -- */
BZ_INLINE int32_t bz_f2i_bits(float x) { int32_t i; __builtin_memcpy(&i, &x, 4); return i; }
BZ_INLINE float bz_i2f_bits(int32_t i) { float x; __builtin_memcpy(&x, &i, 4); return x; }
BZ_INLINE int64_t bz_d2i_bits(double x) { int64_t i; __builtin_memcpy(&i, &x, 8); return i; }
BZ_INLINE double bz_i2d_bits(int64_t i) { double x; __builtin_memcpy(&x, &i, 8); return x; }
#define BZ_T float
#define BZ_I int32_t
#define BZ_FN(name) bz_s##name
#define BZ_S(c) (c)
#define BZ_FMA(a, b, c) bz_fmaf((a), (b), (c))
#define BZ_SEL(m, a, b) ((m) ? (a) : (b))
#define BZ_GT(a, b) (-(int32_t)((a) > (b)))
#define BZ_LT(a, b) (-(int32_t)((a) < (b)))
#define BZ_GE(a, b) (-(int32_t)((a) >= (b)))
#define BZ_EQ(a, b) (-(int32_t)((a) == (b)))
#define BZ_NE(a, b) (-(int32_t)((a) != (b)))
#define BZ_ASI(x) bz_f2i_bits(x)
#define BZ_ASF(i) bz_i2f_bits(i)
#define BZ_CVTI(x) ((int32_t)(x))
#define BZ_CVTF(i) ((float)(i))
#define BZ_ABS(x) bz_i2f_bits(bz_f2i_bits(x) & 0x7fffffff)
#define BZ_MAX(a, b) bz_maxf((a), (b))
#define BZ_MIN(a, b) bz_minf((a), (b))
#define BZ_CLAMP_HI(a, c) ((a) < (c) ? (a) : (c))
#define BZ_CLAMP_LO(a, c) ((a) > (c) ? (a) : (c))
#if defined(__AVX512F__)
#include <immintrin.h>
#define BZ_SCALEF(y, n) _mm_cvtss_f32(_mm_scalef_ss(_mm_set_ss(y), _mm_set_ss(n)))
#endif
#include "braze_vmath.h" /* undefines the BZ_* macros it took */

/* -------------------------------------------------------------- vectors -- */
#if BZ_VB > 0

typedef float bz_vf __attribute__((vector_size(BZ_VB)));
typedef int32_t bz_vi __attribute__((vector_size(BZ_VB)));
#define BZ_VL (BZ_VB / 4)

#if defined(__AVX512F__) || defined(__AVX__) || defined(__SSE4_1__)
#include <immintrin.h>
#endif

BZ_INLINE bz_vf bz_ld(const float *p) { bz_vf v; __builtin_memcpy(&v, p, sizeof v); return v; }
BZ_INLINE void bz_st(float *p, bz_vf v) { __builtin_memcpy(p, &v, sizeof v); }
BZ_INLINE bz_vf bz_splat(float s) { return s - (bz_vf){0}; } /* s - 0 keeps -0 (0 + -0 is +0) */
BZ_INLINE bz_vi bz_msplat(int c) { return (bz_vi){0} - (c ? 1 : 0); }
BZ_INLINE bz_vf bz_sel(bz_vi m, bz_vf a, bz_vf b) { return (bz_vf)(((bz_vi)a & m) | ((bz_vi)b & ~m)); }
/* NaN-propagating max / min (as bz_maxf): b where a <= b (min: a >= b) or b is NaN, else a. Against a
 * constant b (a clamp's bound) b != b folds away: one compare and a blend, half what (a > b) | (a != a)
 * took (a depthwise convolution's ReLU6 epilogue in cache: docs/gemm.md). Two NaNs give b's. */
BZ_INLINE bz_vf bz_vmax(bz_vf a, bz_vf b) { return bz_sel((a <= b) | (b != b), b, a); }
BZ_INLINE bz_vf bz_vmin(bz_vf a, bz_vf b) { return bz_sel((a >= b) | (b != b), b, a); }
BZ_INLINE bz_vf bz_vabs(bz_vf x) { return (bz_vf)((bz_vi)x & 0x7fffffff); }
BZ_INLINE bz_vf bz_vm2f(bz_vi m) { return bz_sel(m, bz_splat(1.0f), bz_splat(0.0f)); }
/* a mask's lanes (-1 or 0) stored as BZ_VL bools (bytes 1 or 0) */
typedef uint8_t bz_vu8 __attribute__((vector_size(BZ_VL)));
BZ_INLINE void bz_st_mask(uint8_t *p, bz_vi m) {
    bz_vu8 b = __builtin_convertvector(m & 1, bz_vu8);
    __builtin_memcpy(p, &b, sizeof b);
}

/* a store past the caches (large outputs: no read for ownership, no eviction of what the
 * kernel still reads) where nt is set and p is aligned, else a plain store; the kernel ends
 * each thread's streamed stores with bz_sfence() */
#if defined(__AVX512F__) && BZ_VB == 64
#define BZ_STREAM(p, v) _mm512_stream_ps((p), (__m512)(v))
#elif defined(__AVX__) && BZ_VB == 32
#define BZ_STREAM(p, v) _mm256_stream_ps((p), (__m256)(v))
#elif defined(__SSE__) && BZ_VB == 16
#include <xmmintrin.h>
#define BZ_STREAM(p, v) _mm_stream_ps((p), (__m128)(v))
#endif
BZ_INLINE void bz_st_nt(float *p, bz_vf v, int nt) {
#ifdef BZ_STREAM
    if (nt && !((uintptr_t)p & (BZ_VB - 1))) {
        BZ_STREAM(p, v);
        return;
    }
#endif
    (void)nt;
    bz_st(p, v);
}
BZ_INLINE void bz_sfence(void) {
#ifdef BZ_STREAM
    _mm_sfence();
#endif
}

/* pairwise: log2(VL) roundings on any lane's path, and VL equal lanes sum exactly */
BZ_INLINE float bz_hsum(bz_vf v) {
    float t[BZ_VL];
    for (int i = 0; i < BZ_VL; i++) t[i] = v[i];
    for (int w = BZ_VL / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) t[i] += t[i + w];
    return t[0];
}
typedef double bz_vd2 __attribute__((vector_size(BZ_VB * 2))); /* BZ_VL doubles */
BZ_INLINE double bz_hsum_d2(bz_vd2 v) {
    double s = 0.0;
    for (int i = 0; i < BZ_VL; i++) s += v[i];
    return s;
}
BZ_INLINE float bz_hprod(bz_vf v) {
    float s = 1.0f;
    for (int i = 0; i < BZ_VL; i++) s *= v[i];
    return s;
}
BZ_INLINE float bz_hmax(bz_vf v) {
    float s = v[0];
    for (int i = 1; i < BZ_VL; i++) s = bz_maxf(s, v[i]);
    return s;
}
BZ_INLINE float bz_hmin(bz_vf v) {
    float s = v[0];
    for (int i = 1; i < BZ_VL; i++) s = bz_minf(s, v[i]);
    return s;
}

/* lane-wise fallbacks for ops without a vector form */
#define BZ_LANES1(f, x) __extension__({ bz_vf _bx = (x), _br; \
    for (int _bl = 0; _bl < BZ_VL; _bl++) _br[_bl] = f(_bx[_bl]); _br; })
#define BZ_LANES2(f, x, y) __extension__({ bz_vf _bx = (x), _by = (y), _br; \
    for (int _bl = 0; _bl < BZ_VL; _bl++) _br[_bl] = f(_bx[_bl], _by[_bl]); _br; })

BZ_INLINE bz_vf bz_vsqrt(bz_vf x) {
#if defined(__AVX512F__) && BZ_VB == 64
    return (bz_vf)_mm512_sqrt_ps((__m512)x);
#elif defined(__AVX__) && BZ_VB == 32
    return (bz_vf)_mm256_sqrt_ps((__m256)x);
#elif defined(__SSE2__) && BZ_VB == 16
    return (bz_vf)_mm_sqrt_ps((__m128)x);
#else
    return BZ_LANES1(sqrtf, x);
#endif
}

#if defined(__AVX512F__) && BZ_VB == 64
#define BZ_ROUNDV(x, mode) ((bz_vf)_mm512_roundscale_ps((__m512)(x), (mode) | _MM_FROUND_NO_EXC))
#elif defined(__AVX__) && BZ_VB == 32
#define BZ_ROUNDV(x, mode) ((bz_vf)_mm256_round_ps((__m256)(x), (mode) | _MM_FROUND_NO_EXC))
#elif defined(__SSE4_1__) && BZ_VB == 16
#define BZ_ROUNDV(x, mode) ((bz_vf)_mm_round_ps((__m128)(x), (mode) | _MM_FROUND_NO_EXC))
#endif
#ifdef BZ_ROUNDV
BZ_INLINE bz_vf bz_vfloor(bz_vf x) { return BZ_ROUNDV(x, _MM_FROUND_TO_NEG_INF); }
BZ_INLINE bz_vf bz_vceil(bz_vf x) { return BZ_ROUNDV(x, _MM_FROUND_TO_POS_INF); }
BZ_INLINE bz_vf bz_vround(bz_vf x) { return BZ_ROUNDV(x, _MM_FROUND_TO_NEAREST_INT); }
#else
BZ_INLINE bz_vf bz_vfloor(bz_vf x) { return BZ_LANES1(floorf, x); }
BZ_INLINE bz_vf bz_vceil(bz_vf x) { return BZ_LANES1(ceilf, x); }
BZ_INLINE bz_vf bz_vround(bz_vf x) { return BZ_LANES1(nearbyintf, x); }
#endif

#define BZ_LANES3(f, x, y, z) __extension__({ bz_vf _bx = (x), _by = (y), _bz = (z), _br; \
    for (int _bl = 0; _bl < BZ_VL; _bl++) _br[_bl] = f(_bx[_bl], _by[_bl], _bz[_bl]); _br; })

/* a * b + c, fused exactly where bz_fmaf is */
BZ_INLINE bz_vf bz_vfma(bz_vf a, bz_vf b, bz_vf c) {
#if defined(__AVX512F__) && BZ_VB == 64
    return (bz_vf)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c);
#elif (defined(__FMA__) || defined(__AVX512VL__)) && BZ_VB == 32
    return (bz_vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#elif (defined(__FMA__) || defined(__AVX512VL__)) && BZ_VB == 16
    return (bz_vf)_mm_fmadd_ps((__m128)a, (__m128)b, (__m128)c);
#elif BZ_HAS_FMA
    return BZ_LANES3(bz_fmaf, a, b, c);
#else
    return a * b + c;
#endif
}

#define BZ_T bz_vf
#define BZ_I bz_vi
#define BZ_FN(name) bz_v##name
#define BZ_S(c) bz_splat(c)
#define BZ_FMA(a, b, c) bz_vfma((a), (b), (c))
#define BZ_SEL(m, a, b) bz_sel((m), (a), (b))
#define BZ_GT(a, b) ((a) > (b))
#define BZ_LT(a, b) ((a) < (b))
#define BZ_GE(a, b) ((a) >= (b))
#define BZ_EQ(a, b) ((a) == (b))
#define BZ_NE(a, b) ((a) != (b))
#define BZ_ASI(x) ((bz_vi)(x))
#define BZ_ASF(i) ((bz_vf)(i))
#define BZ_CVTI(x) __builtin_convertvector((x), bz_vi)
#define BZ_CVTF(i) __builtin_convertvector((i), bz_vf)
#define BZ_ABS(x) bz_vabs(x)
#define BZ_MAX(a, b) bz_vmax((a), (b))
#define BZ_MIN(a, b) bz_vmin((a), (b))
#if defined(__AVX512F__) && BZ_VB == 64
#define BZ_CLAMP_HI(a, c) ((bz_vf)_mm512_min_ps((__m512)(a), (__m512)(c)))
#define BZ_CLAMP_LO(a, c) ((bz_vf)_mm512_max_ps((__m512)(a), (__m512)(c)))
#elif defined(__AVX__) && BZ_VB == 32
#define BZ_CLAMP_HI(a, c) ((bz_vf)_mm256_min_ps((__m256)(a), (__m256)(c)))
#define BZ_CLAMP_LO(a, c) ((bz_vf)_mm256_max_ps((__m256)(a), (__m256)(c)))
#elif defined(__SSE__) && BZ_VB == 16
#define BZ_CLAMP_HI(a, c) ((bz_vf)_mm_min_ps((__m128)(a), (__m128)(c)))
#define BZ_CLAMP_LO(a, c) ((bz_vf)_mm_max_ps((__m128)(a), (__m128)(c)))
#else
#define BZ_CLAMP_HI(a, c) bz_sel((a) < (c), (a), (c))
#define BZ_CLAMP_LO(a, c) bz_sel((a) > (c), (a), (c))
#endif
#if defined(__AVX512F__) && BZ_VB == 64
#define BZ_SCALEF(y, n) ((bz_vf)_mm512_scalef_ps((__m512)(y), (__m512)(n)))
#endif
#include "braze_vmath.h" /* undefines the BZ_* macros it took */

/* sin, cos, tanh, expm1: glibc's vector math (libmvec, <= 4 ulp; sin and cos measured 7.7-9.7x
 * faster than libm lane by lane, tanh 1.9x and expm1 1.5x faster than braze_vmath.h's: see
 * benchmarks/math_ulp.py) when the toolchain links it (BZ_HAVE_MVEC, set by
 * braze/codegen/isa.py); else libm per lane (sin, cos) or braze_vmath.h (tanh, expm1). The
 * scalar forms run one lane of the same vector call, so a vector loop's remainder, and
 * unvectorized loops, give the same bits as its body. Each variant only where the target has
 * the ISA it is written in: a 64-byte vector built for an AVX2 CPU (the tests build every width
 * on every host) must not call the AVX-512 variant, or it dies of an illegal instruction. */
#if defined(BZ_HAVE_MVEC) && BZ_VB == 64 && defined(__AVX512F__)
#define BZ_MVEC(name) _ZGVeN16v_##name
#define BZ_MVEC2(name) _ZGVeN16vv_##name
#elif defined(BZ_HAVE_MVEC) && BZ_VB == 32 && defined(__AVX2__)
#define BZ_MVEC(name) _ZGVdN8v_##name
#define BZ_MVEC2(name) _ZGVdN8vv_##name
#elif defined(BZ_HAVE_MVEC) && BZ_VB == 16 && defined(__SSE4_1__)
#define BZ_MVEC(name) _ZGVbN4v_##name
#define BZ_MVEC2(name) _ZGVbN4vv_##name
#endif
#ifdef BZ_MVEC
bz_vf BZ_MVEC(sinf)(bz_vf);
bz_vf BZ_MVEC(cosf)(bz_vf);
bz_vf BZ_MVEC(tanhf)(bz_vf);
bz_vf BZ_MVEC(expm1f)(bz_vf);
bz_vf BZ_MVEC2(powf)(bz_vf, bz_vf);
/* libmvec's sinf (tanhf, expm1f) may return +0 at -0; eager (and libm) keep the sign */
BZ_INLINE bz_vf bz_vsin(bz_vf x) { return bz_sel(x == 0.0f, x, BZ_MVEC(sinf)(x)); }
BZ_INLINE bz_vf bz_vcos(bz_vf x) { return BZ_MVEC(cosf)(x); }
BZ_INLINE bz_vf bz_vtanh(bz_vf x) { return bz_sel(x == 0.0f, x, BZ_MVEC(tanhf)(x)); }
BZ_INLINE bz_vf bz_vexpm1(bz_vf x) { return bz_sel(x == 0.0f, x, BZ_MVEC(expm1f)(x)); }
BZ_INLINE float bz_ssin(float x) { return bz_vsin(bz_splat(x))[0]; }
BZ_INLINE float bz_scos(float x) { return bz_vcos(bz_splat(x))[0]; }
BZ_INLINE float bz_stanh(float x) { return bz_vtanh(bz_splat(x))[0]; }
BZ_INLINE float bz_sexpm1(float x) { return bz_vexpm1(bz_splat(x))[0]; }
/* powf: libmvec's is within 1 ulp of libm's and gives its values at every special input
 * (checked on 32M random pairs and the cross product of zeros, infinities, NaNs, +-1, halves,
 * integers and extremes), 2.5x faster on 16 lanes. Its widths differ from each other in a few
 * last bits, so the scalar form runs the loop's own width. */
BZ_INLINE bz_vf bz_vpow(bz_vf x, bz_vf y) { return BZ_MVEC2(powf)(x, y); }
BZ_INLINE float bz_spowf(float x, float y) { return bz_vpow(bz_splat(x), bz_splat(y))[0]; }
#else
BZ_INLINE bz_vf bz_vsin(bz_vf x) { return BZ_LANES1(sinf, x); }
BZ_INLINE bz_vf bz_vcos(bz_vf x) { return BZ_LANES1(cosf, x); }
BZ_INLINE bz_vf bz_vtanh(bz_vf x) { return bz_vtanh_own(x); }
BZ_INLINE bz_vf bz_vexpm1(bz_vf x) { return bz_vexpm1_own(x); }
BZ_INLINE bz_vf bz_vpow(bz_vf x, bz_vf y) { return BZ_LANES2(bz_powf, x, y); }
#endif
BZ_INLINE bz_vf bz_vgelu_tanh(bz_vf x) {
    bz_vf u = 0.79788456080286536f * bz_vfma(0.044715f * x * x, x, x);
    return 0.5f * bz_vmax(x, bz_splat(-3.40282347e+38f)) * (1.0f + bz_vtanh(u));
}

#endif /* BZ_VB > 0 */

#if BZ_VB == 0 || !defined(BZ_MVEC)
BZ_INLINE float bz_ssin(float x) { return sinf(x); }
BZ_INLINE float bz_scos(float x) { return cosf(x); }
BZ_INLINE float bz_stanh(float x) { return bz_stanh_own(x); }
BZ_INLINE float bz_sexpm1(float x) { return bz_sexpm1_own(x); }
BZ_INLINE float bz_spowf(float x, float y) { return bz_powf(x, y); }
#endif
/* tanh-approximated gelu, on the tanh chosen above (the same operations as bz_vgelu_tanh) */
BZ_INLINE float bz_sgelu_tanh(float x) {
    float u = 0.79788456080286536f * bz_fmaf(0.044715f * x * x, x, x);
    return 0.5f * bz_maxf(x, -3.40282347e+38f) * (1.0f + bz_stanh(u));
}
#include "braze_half.h" /* bfloat16 / float16 storage */
#include "braze_narrow.h" /* float8, float4, int4, int2 storage */
#endif /* BRAZE_VEC_H */
