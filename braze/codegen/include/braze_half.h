/* braze_half.h: bfloat16 and float16 storage for kernels that compute in float32.
 *
 * A 16-bit value is widened to float32 as it is loaded and rounded once as it is stored:
 *
 *   bz_bf16_to_f32 / bz_f32_to_bf16      scalar, bits in a uint16_t
 *   bz_f16_to_f32  / bz_f32_to_f16
 *   bz_ld_bf16 / bz_st_bf16 / bz_ld_f16 / bz_st_f16   BZ_VL lanes (braze_vec.h's bz_vf)
 *   bz_mv16                                           BZ_VL 16-bit elements, moved as they are
 *
 * Rounding is to nearest, ties to even, with subnormals kept (never flushed), overflow to
 * infinity, as ml_dtypes and torch round. NaN stays NaN with its sign: bfloat16 gives
 * ml_dtypes' quiet NaN (0x7fc0 | sign); float16 gives the F16C instruction's (quiet, the top 9
 * payload bits kept: torch's on x86). Every path (scalar, vector, with and without F16C) gives
 * the same bits: tests/codegen/test_half.py checks all 2^32 float32 inputs (slow) and a sample
 * of each class (default suite).
 *
 * bfloat16 uses integer arithmetic on the float's bits, in GCC vector extensions: one source for
 * every vector width. AVX512_BF16's VCVTNEPS2BF16 is not used: it flushes subnormal inputs to
 * zero, so matching ml_dtypes would need a fix-up blend, and the conversion is a few integer
 * operations per vector of a load or a store. float16 uses F16C (VCVTPS2PH / VCVTPH2PS) where
 * the target has it (AVX-512F, or AVX2 builds with -mf16c), else integer arithmetic.
 *
 * Included by braze_vec.h, at its end.
 */
#ifndef BRAZE_HALF_H
#define BRAZE_HALF_H

#if (BZ_VB == 64 && defined(__AVX512F__)) || (BZ_VB == 32 && defined(__F16C__))
#include <immintrin.h>
#define BZ_HALF_F16C 1
#endif

/* ------------------------------------------------------------------ scalar */
BZ_INLINE uint32_t bz_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
BZ_INLINE float bz_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

BZ_INLINE float bz_bf16_to_f32(uint16_t h) { return bz_bits_f32((uint32_t)h << 16); }

BZ_INLINE uint16_t bz_f32_to_bf16(float f) {
    uint32_t u = bz_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); /* carries into the exponent: inf */
}

/* float16 by integer arithmetic: the scalar path, and lanes without F16C */
BZ_INLINE float bz_f16_to_f32_int(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return bz_bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0)); /* inf, NaN (quiet) */
    if (e) return bz_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
    /* zero or subnormal: m x 2^-24, exact in float32 */
    float v = (float)m * 5.9604644775390625e-8f;
    return sign ? -v : v;
}

BZ_INLINE uint16_t bz_f32_to_f16_int(float f) {
    uint32_t u = bz_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN: quiet */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);                        /* >= 65520: inf */
    if (a >= 0x38800000u) {                                                          /* normal: >= 2^-14 */
        uint32_t r = a - 0x38000000u;                                                /* exponent 127 -> 15 */
        return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
    }
    /* subnormal or zero: adding 0.5 rounds |f| to a multiple of 2^-24 (the float unit at 0.5),
     * to nearest even; the low bits of the sum are that multiple */
    return (uint16_t)(sign | (bz_f32_bits(bz_bits_f32(a) + 0.5f) - 0x3f000000u));
}

#if defined(BZ_HALF_F16C)
BZ_INLINE float bz_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
BZ_INLINE uint16_t bz_f32_to_f16(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
#else
BZ_INLINE float bz_f16_to_f32(uint16_t h) { return bz_f16_to_f32_int(h); }
BZ_INLINE uint16_t bz_f32_to_f16(float f) { return bz_f32_to_f16_int(f); }
#endif

/* ------------------------------------------------------------------ vectors */
#if BZ_VB > 0
typedef uint32_t bz_vu __attribute__((vector_size(BZ_VB)));
typedef uint16_t bz_vh __attribute__((vector_size(BZ_VB / 2)));

BZ_INLINE bz_vf bz_ld_bf16(const uint16_t *p) {
    bz_vh h;
    __builtin_memcpy(&h, p, sizeof h);
    return (bz_vf)(__builtin_convertvector(h, bz_vu) << 16);
}

BZ_INLINE void bz_st_bf16(uint16_t *p, bz_vf v) {
    bz_vu u = (bz_vu)v, a = u & 0x7fffffffu;
    bz_vu r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    bz_vu nan = (bz_vu)((bz_vi)a > 0x7f800000); /* all ones in NaN lanes */
    r = (r & ~nan) | ((((u >> 16) & 0x8000u) | 0x7fc0u) & nan);
    bz_vh h = __builtin_convertvector(r, bz_vh);
    __builtin_memcpy(p, &h, sizeof h);
}

/* BZ_VL 16-bit elements copied as they are (a permute of a 16-bit tensor) */
BZ_INLINE void bz_mv16(uint16_t *p, const uint16_t *q) {
    bz_vh h;
    __builtin_memcpy(&h, q, sizeof h);
    __builtin_memcpy(p, &h, sizeof h);
}

/* v rounded to bfloat16 and widened back (an explicit cast inside a kernel) */
BZ_INLINE bz_vf bz_vround_bf16(bz_vf v) {
    bz_vu u = (bz_vu)v, a = u & 0x7fffffffu;
    bz_vu r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    bz_vu nan = (bz_vu)((bz_vi)a > 0x7f800000);
    return (bz_vf)((r & ~nan) | ((((u >> 16) & 0x8000u) | 0x7fc0u) << 16 & nan));
}

#if defined(BZ_HALF_F16C) && BZ_VB == 64
BZ_INLINE bz_vf bz_ld_f16(const uint16_t *p) { return (bz_vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
BZ_INLINE void bz_st_f16(uint16_t *p, bz_vf v) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph((__m512)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#elif defined(BZ_HALF_F16C) && BZ_VB == 32
BZ_INLINE bz_vf bz_ld_f16(const uint16_t *p) { return (bz_vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
BZ_INLINE void bz_st_f16(uint16_t *p, bz_vf v) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
#else
BZ_INLINE bz_vf bz_ld_f16(const uint16_t *p) {
    bz_vf v;
    for (int i = 0; i < BZ_VB / 4; i++) v[i] = bz_f16_to_f32_int(p[i]);
    return v;
}
BZ_INLINE void bz_st_f16(uint16_t *p, bz_vf v) {
    for (int i = 0; i < BZ_VB / 4; i++) p[i] = bz_f32_to_f16_int(v[i]);
}
#endif

/* v rounded to float16 and widened back */
BZ_INLINE bz_vf bz_vround_f16(bz_vf v) {
    uint16_t h[BZ_VB / 4];
    bz_st_f16(h, v);
    return bz_ld_f16(h);
}
#endif /* BZ_VB > 0 */

#endif /* BRAZE_HALF_H */
