/* braze_vec.h: scalar and SIMD helpers for generated kernels.
 *
 * Define BZ_VB (vector bytes: 64 AVX-512, 32 AVX2, 16 SSE, 0 scalar) before
 * including. Vectors are GCC vector extensions, so one source serves every
 * target; intrinsics are used only where the generic form has no operator
 * (sqrt, floor/ceil/round), behind feature macros.
 *
 * Vector math (float32): exp, log (Cephes-style range reduction + polynomial,
 * ~1-2 ulp), tanh (polynomial below 0.625, else via exp), erf (rational
 * approximation on [-4, 4], abs error < 5e-7), gelu via erfc
 * (erfc(z) = t exp(-z^2 + P(t)), t = 1/(1 + z/2), relative error ~1e-7, so the
 * negative tail keeps its relative accuracy), sigmoid = 1/(1+exp(-x)).
 * Inputs are clamped so nothing overflows; NaN propagates.
 * Scalar versions use libm.
 */
#ifndef BRAZE_VEC_H
#define BRAZE_VEC_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#ifndef BZ_VB
#define BZ_VB 0
#endif

#if defined(__GNUC__)
#define BZ_INLINE static inline __attribute__((always_inline))
#else
#define BZ_INLINE static inline
#endif

/* ---------------------------------------------------------------- ints -- */
BZ_INLINE int64_t bz_floordiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return ((a % b) != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
BZ_INLINE int64_t bz_floormod(int64_t a, int64_t b) {
    int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
BZ_INLINE int64_t bz_imin(int64_t a, int64_t b) { return a < b ? a : b; }
BZ_INLINE int64_t bz_imax(int64_t a, int64_t b) { return a > b ? a : b; }
/* integer division truncating toward zero; x / 0 == 0 (numpy's result) */
BZ_INLINE int64_t bz_idiv(int64_t a, int64_t b) { return b == 0 ? 0 : a / b; }
/* remainder with the divisor's sign (torch.remainder); x % 0 == 0 */
BZ_INLINE int64_t bz_imod(int64_t a, int64_t b) { return b == 0 ? 0 : bz_floormod(a, b); }
/* remainder with the dividend's sign (C %, torch.fmod); x % 0 == 0, and x % -1 == 0 avoids INT64_MIN % -1 */
BZ_INLINE int64_t bz_ifmod(int64_t a, int64_t b) { return (b == 0 || b == -1) ? 0 : a % b; }
BZ_INLINE int64_t bz_ipow(int64_t a, int64_t b) {
    int64_t r = 1;
    if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
    while (b) { if (b & 1) r *= a; a *= a; b >>= 1; }
    return r;
}

/* ------------------------------------------------------- scalar floats -- */
/* max/min propagating NaN (numpy.maximum / minimum) */
BZ_INLINE float bz_maxf(float a, float b) { return (a > b || a != a) ? a : b; }
BZ_INLINE float bz_minf(float a, float b) { return (a < b || a != a) ? a : b; }
BZ_INLINE double bz_maxd(double a, double b) { return (a > b || a != a) ? a : b; }
BZ_INLINE double bz_mind(double a, double b) { return (a < b || a != a) ? a : b; }
BZ_INLINE float bz_modf(float a, float b) {
    float r = fmodf(a, b);
    return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
BZ_INLINE double bz_modd(double a, double b) {
    double r = fmod(a, b);
    return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r;
}
BZ_INLINE float bz_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
BZ_INLINE double bz_sigmoidd(double x) { return 1.0 / (1.0 + exp(-x)); }
BZ_INLINE float bz_siluf(float x) { return x / (1.0f + expf(-x)); }
BZ_INLINE double bz_silud(double x) { return x / (1.0 + exp(-x)); }
BZ_INLINE float bz_geluf(float x) { return 0.5f * x * erfcf(-x * 0.70710678118654752f); }
BZ_INLINE double bz_gelud(double x) { return 0.5 * x * erfc(-x * 0.70710678118654752); }
BZ_INLINE float bz_gelu_tanhf(float x) {
    return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
BZ_INLINE double bz_gelu_tanhd(double x) {
    return 0.5 * x * (1.0 + tanh(0.79788456080286536 * (x + 0.044715 * x * x * x)));
}

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
BZ_INLINE bz_vf bz_splat(float s) { return (bz_vf){0} + s; }
BZ_INLINE bz_vi bz_msplat(int c) { return (bz_vi){0} - (c ? 1 : 0); }
BZ_INLINE bz_vf bz_sel(bz_vi m, bz_vf a, bz_vf b) { return (bz_vf)(((bz_vi)a & m) | ((bz_vi)b & ~m)); }
BZ_INLINE bz_vf bz_vmax(bz_vf a, bz_vf b) { return bz_sel((a > b) | (a != a), a, b); }
BZ_INLINE bz_vf bz_vmin(bz_vf a, bz_vf b) { return bz_sel((a < b) | (a != a), a, b); }
BZ_INLINE bz_vf bz_vabs(bz_vf x) { return (bz_vf)((bz_vi)x & 0x7fffffff); }
BZ_INLINE bz_vf bz_vm2f(bz_vi m) { return bz_sel(m, bz_splat(1.0f), bz_splat(0.0f)); }

BZ_INLINE float bz_hsum(bz_vf v) {
    float s = 0.0f;
    for (int i = 0; i < BZ_VL; i++) s += v[i];
    return s;
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

/* exp: x = n ln2 + r, |r| <= ln2/2; e^r by a degree-6 polynomial; 2^n via the exponent bits */
BZ_INLINE bz_vf bz_vexp(bz_vf x0) {
    bz_vf x = bz_sel(x0 > 88.3762626647949f, bz_splat(88.3762626647949f), x0);
    x = bz_sel(x < -88.3762626647949f, bz_splat(-88.3762626647949f), x);
    bz_vf fx = x * 1.44269504088896341f;
    fx = (fx + 12582912.0f) - 12582912.0f; /* round to nearest */
    x = x - fx * 0.693359375f;
    x = x + fx * 2.12194440e-4f;
    bz_vf z = x * x;
    bz_vf y = bz_splat(1.9875691500e-4f);
    y = y * x + 1.3981999507e-3f;
    y = y * x + 8.3334519073e-3f;
    y = y * x + 4.1665795894e-2f;
    y = y * x + 1.6666665459e-1f;
    y = y * x + 5.0000001201e-1f;
    y = y * z + x + 1.0f;
    bz_vi n = __builtin_convertvector(fx, bz_vi);
    bz_vi e = (n + 127) << 23;
    bz_vf r = y * (bz_vf)e;
    r = bz_sel(x0 > 88.72283935546875f, bz_splat(INFINITY), r);
    return bz_sel(x0 != x0, x0, r);
}

/* log: x = m 2^e with m in [sqrt(1/2), sqrt(2)); log(m) by a degree-9 polynomial */
BZ_INLINE bz_vf bz_vlog(bz_vf x0) {
    bz_vf x = bz_sel(x0 < 1.17549435e-38f, bz_splat(1.17549435e-38f), x0);
    bz_vi xi = (bz_vi)x;
    bz_vi ei = ((xi >> 23) & 0xff) - 126;
    xi = (xi & 0x807fffff) | 0x3f000000;
    x = (bz_vf)xi; /* in [0.5, 1) */
    bz_vi m = x < 0.707106781186547524f;
    ei = ei + m; /* m is -1 where true */
    bz_vf e = __builtin_convertvector(ei, bz_vf);
    x = x + bz_sel(m, x, bz_splat(0.0f)) - 1.0f;
    bz_vf z = x * x;
    bz_vf y = bz_splat(7.0376836292e-2f);
    y = y * x - 1.1514610310e-1f;
    y = y * x + 1.1676998740e-1f;
    y = y * x - 1.2420140846e-1f;
    y = y * x + 1.4249322787e-1f;
    y = y * x - 1.6668057665e-1f;
    y = y * x + 2.0000714765e-1f;
    y = y * x - 2.4999993993e-1f;
    y = y * x + 3.3333331174e-1f;
    y = y * x * z;
    y = y + e * -2.12194440e-4f;
    y = y - 0.5f * z;
    x = x + y;
    x = x + e * 0.693359375f;
    x = bz_sel(x0 == 0.0f, bz_splat(-INFINITY), x);
    x = bz_sel(x0 < 0.0f, bz_splat(NAN), x);
    x = bz_sel(x0 == INFINITY, bz_splat(INFINITY), x);
    return bz_sel(x0 != x0, x0, x);
}

BZ_INLINE bz_vf bz_vtanh(bz_vf x) {
    bz_vf ax = bz_vabs(x);
    bz_vf z = x * x;
    bz_vf p = bz_splat(-5.70498872745e-3f);
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    bz_vf small = p * z * x + x;
    bz_vf big = 1.0f - 2.0f / (bz_vexp(bz_vmin(ax + ax, bz_splat(88.0f))) + 1.0f);
    big = bz_sel(x < 0.0f, -big, big);
    return bz_sel(ax < 0.625f, small, bz_sel(x != x, x, big));
}

BZ_INLINE bz_vf bz_verf(bz_vf x0) {
    bz_vf x = bz_vmin(bz_vmax(x0, bz_splat(-4.0f)), bz_splat(4.0f));
    bz_vf x2 = x * x;
    bz_vf p = bz_splat(-2.72614225801306e-10f);
    p = p * x2 + 2.77068142495902e-08f;
    p = p * x2 - 2.10102402082508e-06f;
    p = p * x2 - 5.69250639462346e-05f;
    p = p * x2 - 7.34990630326855e-04f;
    p = p * x2 - 2.95459980854025e-03f;
    p = p * x2 - 1.60960333262415e-02f;
    p = p * x;
    bz_vf q = bz_splat(-1.45660718464996e-05f);
    q = q * x2 - 2.13374055278905e-04f;
    q = q * x2 - 1.68282697438203e-03f;
    q = q * x2 - 7.37332916720468e-03f;
    q = q * x2 - 1.42647390514189e-02f;
    return p / q;
}

/* erfc(z) for z >= 0 (Numerical Recipes' erfcc: relative error < 1.2e-7) */
BZ_INLINE bz_vf bz_verfc_pos(bz_vf z) {
    bz_vf t = 1.0f / (1.0f + 0.5f * z);
    bz_vf p = bz_splat(0.17087277f);
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    return t * bz_vexp(p - z * z);
}

/* gelu(x) = x/2 * (1 + erf(x/sqrt 2)) = x/2 * erfc(-x/sqrt 2) */
BZ_INLINE bz_vf bz_vgelu(bz_vf x) {
    bz_vf z = x * -0.70710678118654752f; /* erfc argument */
    bz_vf az = bz_vmin(bz_vabs(z), bz_splat(10.0f));
    bz_vf c = bz_verfc_pos(az);
    bz_vf ec = bz_sel(z < 0.0f, 2.0f - c, c);
    /* near 0 the erf form is more accurate than 2 - erfc */
    bz_vf ef = 1.0f + bz_verf(-z);
    ec = bz_sel(bz_vabs(z) < 0.5f, ef, ec);
    return 0.5f * x * ec;
}

BZ_INLINE bz_vf bz_vsigmoid(bz_vf x) { return 1.0f / (1.0f + bz_vexp(-x)); }
BZ_INLINE bz_vf bz_vsilu(bz_vf x) { return x / (1.0f + bz_vexp(-x)); }
BZ_INLINE bz_vf bz_vgelu_tanh(bz_vf x) {
    return 0.5f * x * (1.0f + bz_vtanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}

#endif /* BZ_VB > 0 */
#endif /* BRAZE_VEC_H */
