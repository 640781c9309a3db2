/* braze_narrow.h: the narrow storage types (float8, float4, int4, int2), one element per byte.
 *
 * A kernel reads a narrow element only through a cast (docs/semantics.md, "Narrow types"), and
 * lowering (braze/lowering/core.py, _narrow_cast) gives the emitter four forms:
 *
 *   bz_dec_<t>(bits) -> float     a minifloat's value (exact)
 *   bz_enc_<t>(float) -> bits     rounded to nearest, ties to even
 *   bz_dec_<t>(bits) -> int32     a 4- or 2-bit integer's value
 *   bz_enc_<t>(int64) -> bits     wrapped to the low bits; bz_enc_<t>_f(double) truncates first
 *
 * Each gives ml_dtypes' bits (tests/codegen/test_narrow_native.py checks every code and the rounding
 * boundaries of every float32 exponent):
 * - overflow (past the largest finite value after rounding) and infinity give infinity in e5m2,
 *   NaN in the fn and fnuz types, and the largest value in float4_e2m1fn, which has neither;
 * - NaN gives the type's NaN with the input's sign (fnuz: 0x80); float4_e2m1fn has none, and takes
 *   ml_dtypes' code for it (the zero of the opposite sign);
 * - a zero, or a value that rounds to one, keeps its sign, except in the fnuz types (no -0);
 * - float to a 4- or 2-bit integer truncates toward zero and wraps; NaN, infinities and values of
 *   magnitude 2^31 or more give 0.
 * float8_e8m0fnu (a power of two, 0xff NaN) is only decoded: ONNX's encodings of it round by a
 * mode, built from its float32 bits in the importer.
 *
 * Included by braze_vec.h, at its end.
 */
#ifndef BRAZE_NARROW_H
#define BRAZE_NARROW_H

enum { BZ_MINI_IEEE, BZ_MINI_FN, BZ_MINI_FNUZ, BZ_MINI_FINITE, BZ_MINI_E8M0 };

BZ_INLINE float bz_dec_mini(uint32_t b, int E, int M, int bias, int kind) {
    uint32_t emask = (1u << E) - 1, mmask = (1u << M) - 1, sbit = 1u << (E + M);
    uint32_t e = (b >> M) & emask, m = b & mmask;
    float sign = (b & sbit) ? -1.0f : 1.0f;
    if (kind == BZ_MINI_E8M0) return b == 0xffu ? NAN : ldexpf(1.0f, (int)b - 127);
    if (kind == BZ_MINI_FNUZ && b == sbit) return NAN;
    if (kind == BZ_MINI_FN && e == emask && m == mmask) return NAN;
    if (kind == BZ_MINI_IEEE && e == emask) return m ? NAN : sign * INFINITY;
    if (e == 0) return sign * ldexpf((float)m, 1 - bias - M);
    return sign * ldexpf(1.0f + (float)m / (float)(1u << M), (int)e - bias);
}

/* the largest finite code's magnitude bits: IEEE reserves the top exponent, fn the all-ones code */
BZ_INLINE uint32_t bz_mini_max_code(int E, int M, int kind) {
    uint32_t top = (1u << E) - 1 - (kind == BZ_MINI_IEEE), mant = (1u << M) - 1 - (kind == BZ_MINI_FN);
    return (top << M) | mant;
}

/* Rounds on the float32's bits: a normal result keeps the top M mantissa bits, rounded to nearest
 * even by adding just under half an ulp plus the kept lowest bit (a carry moves into the exponent),
 * then rebiases the exponent; a subnormal result is the value scaled by 2^(bias - 1 + M), an exact
 * power-of-two scaling, rounded to an integer by nearbyintf (to nearest even): its code is that
 * integer, and 2^M there is the smallest normal's code. */
BZ_INLINE uint8_t bz_enc_mini(float x, int E, int M, int bias, int kind) {
    uint32_t sbit = 1u << (E + M), emask = (1u << E) - 1;
    uint32_t u = bz_f32_bits(x), s = (u >> 31) ? sbit : 0u, a = u & 0x7fffffffu, code;
    if (a > 0x7f800000u) {
        if (kind == BZ_MINI_FNUZ) return (uint8_t)sbit;
        if (kind == BZ_MINI_FN) return (uint8_t)(s | (sbit - 1));
        if (kind == BZ_MINI_IEEE) return (uint8_t)(s | (emask << M) | (1u << (M - 1)));
        return (uint8_t)(s ^ sbit);
    }
    if (a >= (uint32_t)(128 - bias) << 23) { /* at least the smallest normal, 2^(1 - bias) */
        int shift = 23 - M;
        a += (1u << (shift - 1)) - 1 + ((a >> shift) & 1u);
        code = (a >> shift) - ((uint32_t)(127 - bias) << M);
    } else {
        code = (uint32_t)nearbyintf(bz_bits_f32(a) * ldexpf(1.0f, bias - 1 + M));
    }
    if (code > bz_mini_max_code(E, M, kind)) {
        if (kind == BZ_MINI_IEEE) return (uint8_t)(s | (emask << M));
        if (kind == BZ_MINI_FN) return (uint8_t)(s | (sbit - 1));
        if (kind == BZ_MINI_FNUZ) return (uint8_t)sbit;
        code = bz_mini_max_code(E, M, kind);
    }
    if (code == 0) return (uint8_t)(kind == BZ_MINI_FNUZ ? 0u : s);
    return (uint8_t)(s | code);
}

#define BZ_MINIFLOAT(t, E, M, bias, kind)                                                 \
    BZ_INLINE float bz_dec_##t(uint8_t b) { return bz_dec_mini(b, E, M, bias, kind); }   \
    BZ_INLINE uint8_t bz_enc_##t(float x) { return bz_enc_mini(x, E, M, bias, kind); }
BZ_MINIFLOAT(f8e4m3fn, 4, 3, 7, BZ_MINI_FN)
BZ_MINIFLOAT(f8e4m3fnuz, 4, 3, 8, BZ_MINI_FNUZ)
BZ_MINIFLOAT(f8e5m2, 5, 2, 15, BZ_MINI_IEEE)
BZ_MINIFLOAT(f8e5m2fnuz, 5, 2, 16, BZ_MINI_FNUZ)
BZ_MINIFLOAT(f4e2m1, 2, 1, 1, BZ_MINI_FINITE)
#undef BZ_MINIFLOAT
BZ_INLINE float bz_dec_f8e8m0(uint8_t b) { return bz_dec_mini(b, 8, 0, 127, BZ_MINI_E8M0); }

BZ_INLINE uint8_t bz_enc_bits(int64_t v, int bits) { return (uint8_t)((uint64_t)v & ((1u << bits) - 1)); }
BZ_INLINE uint8_t bz_enc_bits_f(double x, int bits) {
    return (x > -2147483648.0 && x < 2147483648.0) ? bz_enc_bits((int64_t)x, bits) : 0;  /* NaN: 0 */
}

#define BZ_NARROW_INT(t, bits, is_signed)                                                        \
    BZ_INLINE int32_t bz_dec_##t(uint8_t b) {                                                    \
        uint32_t h = is_signed ? 1u << (bits - 1) : 0u;                                          \
        return (int32_t)((b ^ h) & ((1u << bits) - 1)) - (int32_t)h;                             \
    }                                                                                            \
    BZ_INLINE uint8_t bz_enc_##t(int64_t v) { return bz_enc_bits(v, bits); }                     \
    BZ_INLINE uint8_t bz_enc_##t##_f(double x) { return bz_enc_bits_f(x, bits); }
BZ_NARROW_INT(i4, 4, 1)
BZ_NARROW_INT(u4, 4, 0)
BZ_NARROW_INT(i2, 2, 1)
BZ_NARROW_INT(u2, 2, 0)
#undef BZ_NARROW_INT

#endif /* BRAZE_NARROW_H */
