/* braze_vmath.h: float32 math for generated kernels, written once and included twice by
 * braze_vec.h: for the SIMD type (bz_vexp, ...) and for plain floats (bz_sexp, ...).
 *
 * Both instances run the same operations in the same order, and every fused
 * multiply-add is explicit (BZ_FMA), so a value computed in a vector loop and the
 * same value computed in its scalar remainder (or in another, unvectorized loop)
 * have the same bits. Kernels are compiled with -ffp-contract=off: the C
 * compiler fuses nothing on its own.
 *
 * The includer defines: BZ_T (float type), BZ_I (int32 type), BZ_FN(name),
 * BZ_S(c) (splat), BZ_FMA(a, b, c), BZ_SEL(mask, a, b), BZ_GT/BZ_LT/BZ_GE/BZ_EQ/
 * BZ_NE (masks: all ones or zero), BZ_ASI/BZ_ASF (bit casts), BZ_CVTI (float ->
 * int32, truncating), BZ_CVTF (int32 -> float), BZ_ABS, BZ_MAX, BZ_MIN (NaN
 * propagating), BZ_CLAMP_HI(a, c) = a < c ? a : c and BZ_CLAMP_LO(a, c) = a > c ? a : c
 * (c where a is NaN: x86's minps / maxps, one instruction); optionally BZ_SCALEF(y, n) =
 * y 2^n rounded once (AVX-512 vscalefps).
 * They are undefined at the end of this file.
 *
 * Special values (checked by tests/codegen/test_special_values.py):
 *   exp (and expm1): +inf -> +inf, -inf -> +0 (-1), NaN -> NaN, overflow -> +inf, results
 *        below the smallest normal -> +0 (no denormal arithmetic: it is very slow); log: 0 -> -inf, < 0 -> NaN, +inf -> +inf,
 *        denormal inputs exact (rescaled by 2^23); tanh, erf: odd (sign of zero
 *        kept), +-inf -> +-1; sigmoid: e/(1+e) for x < 0 (no early underflow);
 *        gelu, gelu_tanh, silu: -inf -> -0, +inf -> +inf (the limits).
 */

/* exp: x = n ln2 + r, |r| <= ln2/2; e^r by Cephes' degree-6 polynomial; 2^n by exponent
 * bits, in two factors so that n = 128 (results up to the largest float) works.
 * Results below the smallest normal (x < ln(FLT_MIN) = -87.3365) are 0: computing a
 * denormal takes a microcode assist, 18x (vector) to 45x (scalar) slower, and masked
 * attention scores (x - max = -3e38) hit it for every masked element. The lower clamp is
 * the float just above ln(FLT_MIN): every x it leaves alone gets its own exp (a clamp at
 * -87 gave exp(-87) on [-87.34, -87]), and a clamped lane's e^x stays normal */
BZ_INLINE BZ_T BZ_FN(exp)(BZ_T x0) {
    /* above 88.73 the result overflows to inf by itself (89: 2^128 y); a NaN becomes a
     * bound here and is put back last */
    BZ_T x = BZ_CLAMP_HI(x0, BZ_S(89.0f));
    x = BZ_CLAMP_LO(x, BZ_S(-87.33654022f));
    BZ_T fx = x * 1.44269504088896341f;
    fx = (fx + 12582912.0f) - 12582912.0f; /* round to nearest */
    x = BZ_FMA(fx, BZ_S(-0.693359375f), x);
    x = BZ_FMA(fx, BZ_S(2.12194440e-4f), x);
    BZ_T z = x * x;
    BZ_T y = BZ_S(1.9875691500e-4f);
    y = BZ_FMA(y, x, BZ_S(1.3981999507e-3f));
    y = BZ_FMA(y, x, BZ_S(8.3334519073e-3f));
    y = BZ_FMA(y, x, BZ_S(4.1665795894e-2f));
    y = BZ_FMA(y, x, BZ_S(1.6666665459e-1f));
    y = BZ_FMA(y, x, BZ_S(5.0000001201e-1f));
    y = BZ_FMA(y, z, x) + 1.0f;
#ifdef BZ_SCALEF
    BZ_T r = BZ_SCALEF(y, fx); /* y 2^fx rounded once: the same bits as the two steps below */
#else
    BZ_I n = BZ_CVTI(fx);
    BZ_I n1 = n >> 1;
    BZ_I n2 = n - n1;
    BZ_T r = (y * BZ_ASF((n1 + 127) << 23)) * BZ_ASF((n2 + 127) << 23); /* exact, then rounded once */
#endif
    r = BZ_SEL(BZ_LT(x0, BZ_S(-87.33654022f)), BZ_S(0.0f), r);
    return BZ_SEL(BZ_NE(x0, x0), x0, r);
}

/* log: x = m 2^e with m in [sqrt(1/2), sqrt(2)); log(m) by Cephes' degree-9 polynomial */
BZ_INLINE BZ_T BZ_FN(log)(BZ_T x0) {
    BZ_I tiny = BZ_LT(x0, BZ_S(1.17549435e-38f)); /* denormals (and <= 0): scale by 2^23 */
    BZ_T x = BZ_SEL(tiny, x0 * 8388608.0f, x0);
    BZ_I xi = BZ_ASI(x);
    BZ_I ei = ((xi >> 23) & 0xff) - 126 + (tiny & -23);
    xi = (xi & 0x807fffff) | 0x3f000000;
    x = BZ_ASF(xi); /* in [0.5, 1) */
    BZ_I m = BZ_LT(x, BZ_S(0.707106781186547524f));
    ei = ei + m; /* m is -1 where true */
    BZ_T e = BZ_CVTF(ei);
    x = x + BZ_SEL(m, x, BZ_S(0.0f)) - 1.0f;
    BZ_T z = x * x;
    BZ_T y = BZ_S(7.0376836292e-2f);
    y = BZ_FMA(y, x, BZ_S(-1.1514610310e-1f));
    y = BZ_FMA(y, x, BZ_S(1.1676998740e-1f));
    y = BZ_FMA(y, x, BZ_S(-1.2420140846e-1f));
    y = BZ_FMA(y, x, BZ_S(1.4249322787e-1f));
    y = BZ_FMA(y, x, BZ_S(-1.6668057665e-1f));
    y = BZ_FMA(y, x, BZ_S(2.0000714765e-1f));
    y = BZ_FMA(y, x, BZ_S(-2.4999993993e-1f));
    y = BZ_FMA(y, x, BZ_S(3.3333331174e-1f));
    y = y * x * z;
    y = BZ_FMA(e, BZ_S(-2.12194440e-4f), y);
    y = BZ_FMA(z, BZ_S(-0.5f), y);
    x = x + y;
    x = BZ_FMA(e, BZ_S(0.693359375f), x);
    x = BZ_SEL(BZ_EQ(x0, BZ_S(0.0f)), BZ_S(-INFINITY), x);
    x = BZ_SEL(BZ_LT(x0, BZ_S(0.0f)), BZ_S(NAN), x);
    x = BZ_SEL(BZ_EQ(x0, BZ_S(INFINITY)), BZ_S(INFINITY), x);
    return BZ_SEL(BZ_NE(x0, x0), x0, x);
}

/* expm1 (braze_vec.h calls glibc's vector expm1f instead where it links: one function,
 * measured 1.5x faster here): x (1 + x/2 + ... + x^7/8!) below |x| = 0.5 (relative error ~1e-8 before rounding;
 * keeps -0 and denormals), e^x - 1 above (no cancellation there) */
BZ_INLINE BZ_T BZ_FN(expm1_own)(BZ_T x) {
    BZ_T p = BZ_S(2.48015873015873e-05f); /* 1/8! */
    p = BZ_FMA(p, x, BZ_S(1.98412698412698e-04f));
    p = BZ_FMA(p, x, BZ_S(1.38888888888889e-03f));
    p = BZ_FMA(p, x, BZ_S(8.33333333333333e-03f));
    p = BZ_FMA(p, x, BZ_S(4.16666666666667e-02f));
    p = BZ_FMA(p, x, BZ_S(1.66666666666667e-01f));
    p = BZ_FMA(p, x, BZ_S(0.5f));
    BZ_T small = x * BZ_FMA(p, x, BZ_S(1.0f)); /* x (1 + ...): keeps -0 */
    return BZ_SEL(BZ_LT(BZ_ABS(x), BZ_S(0.5f)), small, BZ_FN(exp)(x) - 1.0f);
}

/* the sign bit of s on the magnitude a (odd functions keep -0 and stay exactly odd) */
BZ_INLINE BZ_T BZ_FN(withsign)(BZ_T a, BZ_T s) {
    return BZ_ASF(BZ_ASI(a) | (BZ_ASI(s) & (-2147483647 - 1)));
}

/* tanh: odd polynomial below 0.625, else 1 - 2 / (e^2|x| + 1); braze_vec.h calls glibc's
 * vector tanhf instead where it links (one function, measured 1.9x faster here) */
BZ_INLINE BZ_T BZ_FN(tanh_own)(BZ_T x) {
    BZ_T ax = BZ_ABS(x);
    BZ_T z = ax * ax;
    BZ_T p = BZ_S(-5.70498872745e-3f);
    p = BZ_FMA(p, z, BZ_S(2.06390887954e-2f));
    p = BZ_FMA(p, z, BZ_S(-5.37397155531e-2f));
    p = BZ_FMA(p, z, BZ_S(1.33314422036e-1f));
    p = BZ_FMA(p, z, BZ_S(-3.33332819422e-1f));
    BZ_T small = BZ_FMA(p * z, ax, ax);
    BZ_T big = 1.0f - 2.0f / (BZ_FN(exp)(BZ_MIN(ax + ax, BZ_S(88.0f))) + 1.0f);
    return BZ_FN(withsign)(BZ_SEL(BZ_LT(ax, BZ_S(0.625f)), small, big), x);
}

/* erf: rational approximation on [0, 4] (abs error < 5e-7), odd */
BZ_INLINE BZ_T BZ_FN(erf)(BZ_T x0) {
    BZ_T x = BZ_MIN(BZ_ABS(x0), BZ_S(4.0f));
    BZ_T x2 = x * x;
    BZ_T p = BZ_S(-2.72614225801306e-10f);
    p = BZ_FMA(p, x2, BZ_S(2.77068142495902e-08f));
    p = BZ_FMA(p, x2, BZ_S(-2.10102402082508e-06f));
    p = BZ_FMA(p, x2, BZ_S(-5.69250639462346e-05f));
    p = BZ_FMA(p, x2, BZ_S(-7.34990630326855e-04f));
    p = BZ_FMA(p, x2, BZ_S(-2.95459980854025e-03f));
    p = BZ_FMA(p, x2, BZ_S(-1.60960333262415e-02f));
    BZ_T q = BZ_S(-1.45660718464996e-05f);
    q = BZ_FMA(q, x2, BZ_S(-2.13374055278905e-04f));
    q = BZ_FMA(q, x2, BZ_S(-1.68282697438203e-03f));
    q = BZ_FMA(q, x2, BZ_S(-7.37332916720468e-03f));
    q = BZ_FMA(q, x2, BZ_S(-1.42647390514189e-02f));
    BZ_T r = (p / q) * x; /* x last: tiny x stays normal through p / q */
    /* from here on erf rounds to 1 (the rational is 1 ulp below it): gelu's 1 + erf(x) is
     * then exactly 0 on the negative tail, as in eager */
    r = BZ_SEL(BZ_GE(x, BZ_S(3.9192061f)), BZ_S(1.0f), r);
    return BZ_FN(withsign)(r, x0);
}

/* gelu(x) = x/2 (1 + erf(x/sqrt 2)): PyTorch's float32 formula (eager's and inductor's
 * vector code, ONNX Runtime's). One erf, 2.7x cheaper than the erfc form; like eager's,
 * 1 + erf cancels on the negative side (relative error 8e-5 on [-3, -1], large below,
 * where |gelu| < 4e-3; absolute error < 1.2e-6 there) and is -0 below x = -5.55.
 * x is clamped to -FLT_MAX so that gelu(-inf) is the limit -0, not -inf * 0 */
BZ_INLINE BZ_T BZ_FN(gelu)(BZ_T x) {
    BZ_T e = BZ_FN(erf)(x * 0.70710678118654752f);
    return (0.5f * BZ_MAX(x, BZ_S(-3.40282347e+38f))) * (1.0f + e);
}

/* sigmoid: 1 / (1 + e) for x >= 0, e / (1 + e) below, e = exp(-|x|) (no overflow,
 * and tiny results stay denormal instead of flushing to 0) */
BZ_INLINE BZ_T BZ_FN(sigmoid)(BZ_T x) {
    BZ_T e = BZ_FN(exp)(-BZ_ABS(x));
    return BZ_SEL(BZ_GE(x, BZ_S(0.0f)), BZ_S(1.0f), e) / (1.0f + e);
}

BZ_INLINE BZ_T BZ_FN(silu)(BZ_T x) {
    return BZ_MAX(x, BZ_S(-3.40282347e+38f)) * BZ_FN(sigmoid)(x);
}

/* log1p(x) = log(u) x / (u - 1), u = 1 + x rounded: the division corrects u's rounding
 * (u - 1 is exact), so one log gives log1p to about 2 ulp; x itself where u is 1 (tiny x,
 * -0), +inf at +inf. Measured 8x faster than glibc's vector log1pf here */
BZ_INLINE BZ_T BZ_FN(log1p)(BZ_T x) {
    BZ_T u = x + 1.0f;
    BZ_T d = u - 1.0f;
    BZ_T r = BZ_FN(log)(u) * (x / BZ_SEL(BZ_EQ(d, BZ_S(0.0f)), BZ_S(1.0f), d));
    r = BZ_SEL(BZ_EQ(d, BZ_S(0.0f)), x, r);
    return BZ_SEL(BZ_EQ(x, BZ_S(INFINITY)), x, r);
}

/* the includer's macros end here, so the next instance can define them again */
#undef BZ_SCALEF
#undef BZ_T
#undef BZ_I
#undef BZ_FN
#undef BZ_S
#undef BZ_FMA
#undef BZ_SEL
#undef BZ_GT
#undef BZ_LT
#undef BZ_GE
#undef BZ_EQ
#undef BZ_NE
#undef BZ_ASI
#undef BZ_ASF
#undef BZ_CVTI
#undef BZ_CVTF
#undef BZ_ABS
#undef BZ_MAX
#undef BZ_MIN
#undef BZ_CLAMP_HI
#undef BZ_CLAMP_LO
