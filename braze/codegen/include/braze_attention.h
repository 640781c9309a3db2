/* braze_attention.h: attention's backward, tile by tile from the saved logsumexp (the host code
 * of an `attention` group calls it; include braze_vec.h first, for its vector exp and fma).
 *
 * For out = softmax(s) @ v, s = q @ k^T * scale (+ a float mask; -inf where a bool mask, or
 * the causal triangle, drops a key), and lse the rows' logsumexp (0 for a row that attends to
 * nothing), per block of BZ_AK keys and block of BZ_AQ queries:
 *
 *   p  = exp(s - lse)                      recomputed, never stored beyond the tile
 *   dv += p^T @ dout        dp = dout @ v^T        ds = p * (dp - rowsum(dout * out)) * scale
 *   dq += ds @ k            dk += ds^T @ q
 *
 * so no L x S matrix exists (FlashAttention-2's backward; torch's CPU flash kernel works the
 * same way). Shapes: q, dq [B, H, L, E]; k, dk [B, Hk, S, E]; v, dv [B, Hk, S, Ev]; out, dout
 * [B, H, L, Ev]; lse [B, H, L]; H a multiple of Hk, each key/value head shared by H / Hk query
 * heads (GQA). The mask (kind 1 bool bytes, 2 float32, 0 none) is read at element strides
 * (mb, mh, ml, ms) of its broadcast to [B, H, L, S] (0 along a broadcast dim).
 *
 * Threads take whole key/value heads, each with its group of query heads: every sum runs in one
 * fixed order on any thread count (the same bits every call) and no two threads write one
 * gradient. Each thread copies its head's operands into rows padded to 64 columns (k and v also
 * transposed), so that all five products are one register-blocked kernel (bz_att_mk): 16 vector
 * accumulators, a row of b loaded once for BZ_AR rows of c. Plain loops over the rows ran at a
 * quarter of oneDNN's GEMMs on the same products (BERT-base heads, 2 cores, AVX-512).
 * Returns 0, or 1 when a thread could not allocate its buffers. */
#ifndef BRAZE_ATTENTION_H
#define BRAZE_ATTENTION_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <omp.h>

#define BZ_AQ 64
#define BZ_AK 64

#if BZ_VB > 0
#define BZ_ANV (BZ_AK / BZ_VL) /* vectors in a row of 64 floats */

/* c[r][0:NV vectors] = (add ? c[r][...] : 0) + sum_{t < T} a[r * ar + t * at] * b[t * ldb + ...],
 * r < nr, R rows a step (NV * R = 16 accumulators; a row of b loaded once for R rows of c) */
#define BZ_ATT_MK_ROWS(R, NV)                                                                     \
    for (; r0 + (R) <= nr; r0 += (R)) {                                                           \
        bz_vf acc[R][NV];                                                                         \
        _Pragma("GCC unroll 16") for (int i = 0; i < (R); i++)                                    \
            _Pragma("GCC unroll 16") for (int j = 0; j < (NV); j++)                               \
                acc[i][j] = add ? bz_ld(c + (r0 + i) * ldc + j * BZ_VL) : bz_splat(0.0f);          \
        for (int64_t t = 0; t < T; t++) {                                                         \
            bz_vf bv[NV];                                                                         \
            _Pragma("GCC unroll 16") for (int j = 0; j < (NV); j++) bv[j] = bz_ld(b + t * ldb + j * BZ_VL); \
            _Pragma("GCC unroll 16") for (int i = 0; i < (R); i++) {                              \
                const bz_vf av = bz_splat(a[(r0 + i) * ar + t * at]);                             \
                _Pragma("GCC unroll 16") for (int j = 0; j < (NV); j++)                           \
                    acc[i][j] = bz_vfma(av, bv[j], acc[i][j]);                                    \
            }                                                                                     \
        }                                                                                         \
        _Pragma("GCC unroll 16") for (int i = 0; i < (R); i++)                                    \
            _Pragma("GCC unroll 16") for (int j = 0; j < (NV); j++)                               \
                bz_st(c + (r0 + i) * ldc + j * BZ_VL, acc[i][j]);                                 \
    }
#define BZ_ATT_MK(NV)                                                                             \
    static void bz_att_mk##NV(float *c, int64_t ldc, const float *a, int64_t ar, int64_t at,       \
                              const float *b, int64_t ldb, int64_t T, int64_t nr, int add) {      \
        int64_t r0 = 0;                                                                           \
        BZ_ATT_MK_ROWS(16 / (NV), NV)                                                             \
        BZ_ATT_MK_ROWS(1, NV)                                                                     \
    }
BZ_ATT_MK(1)
BZ_ATT_MK(2)
BZ_ATT_MK(4)
#if BZ_ANV >= 8
BZ_ATT_MK(8)
#endif
#if BZ_ANV >= 16
BZ_ATT_MK(16)
#endif

/* the first n columns (n <= 64; a few more where the narrower kernels round up) */
static void bz_att_mk(float *c, int64_t ldc, const float *a, int64_t ar, int64_t at, const float *b,
                      int64_t ldb, int64_t T, int64_t nr, int add, int64_t n) {
    const int64_t nv = (n + BZ_VL - 1) / BZ_VL;
    if (nv <= 1) bz_att_mk1(c, ldc, a, ar, at, b, ldb, T, nr, add);
    else if (nv <= 2) bz_att_mk2(c, ldc, a, ar, at, b, ldb, T, nr, add);
    else if (nv <= 4 || BZ_ANV == 4) bz_att_mk4(c, ldc, a, ar, at, b, ldb, T, nr, add);
#if BZ_ANV >= 8
    else if (nv <= 8 || BZ_ANV == 8) bz_att_mk8(c, ldc, a, ar, at, b, ldb, T, nr, add);
#endif
#if BZ_ANV >= 16
    else bz_att_mk16(c, ldc, a, ar, at, b, ldb, T, nr, add);
#endif
}
#else
static void bz_att_mk(float *c, int64_t ldc, const float *a, int64_t ar, int64_t at, const float *b,
                      int64_t ldb, int64_t T, int64_t nr, int add, int64_t n) {
    for (int64_t r = 0; r < nr; r++) {
        float acc[BZ_AK];
        for (int j = 0; j < n; j++) acc[j] = add ? c[r * ldc + j] : 0.0f;
        for (int64_t t = 0; t < T; t++)
            for (int j = 0; j < n; j++) acc[j] = bz_fmaf(a[r * ar + t * at], b[t * ldb + j], acc[j]);
        for (int j = 0; j < n; j++) c[r * ldc + j] = acc[j];
    }
}
#endif

/* c (nr rows of n columns, n a multiple of 64) (+)= a x b, a block of 64 columns at a time */
static void bz_att_mm(float *c, int64_t ldc, const float *a, int64_t ar, int64_t at, const float *b,
                      int64_t ldb, int64_t T, int64_t nr, int64_t n, int add) {
    for (int64_t j = 0; j < n; j += BZ_AK) bz_att_mk(c + j, ldc, a, ar, at, b + j, ldb, T, nr, add, BZ_AK);
}

/* p[c] = exp(p[c] - shift) for c < n (rounded up to whole vectors) */
static void bz_att_exp_row(float *p, float shift, int64_t n) {
#if BZ_VB > 0
    for (int64_t c = 0; c < n; c += BZ_VL) bz_st(p + c, bz_vexp(bz_ld(p + c) - bz_splat(shift)));
#else
    for (int64_t c = 0; c < n; c++) p[c] = bz_sexp(p[c] - shift);
#endif
}

/* dst[r][0:n] = src[r][0:n] and zeros up to np columns, for r < rows, and zero rows to rows_p */
static void bz_att_pad(float *dst, int64_t np, int64_t rows_p, const float *src, int64_t n, int64_t rows) {
    for (int64_t r = 0; r < rows_p; r++)
        for (int64_t e = 0; e < np; e++) dst[r * np + e] = r < rows && e < n ? src[r * n + e] : 0.0f;
}

/* dq, dk or dv NULL: a gradient the model does not read, neither accumulated nor stored */
static int bz_attention_backward(float *dq, float *dk, float *dv, const float *q, const float *k,
                                 const float *v, const float *o, const float *dout, const float *lse,
                                 const void *mask, int mask_kind, int64_t mb, int64_t mh, int64_t ml,
                                 int64_t ms, int64_t B, int64_t H, int64_t Hk, int64_t L, int64_t S,
                                 int64_t E, int64_t Ev, float scale, int causal) {
    const int64_t G = H / Hk;
    const int64_t Ep = (E + BZ_AK - 1) / BZ_AK * BZ_AK, Evp = (Ev + BZ_AK - 1) / BZ_AK * BZ_AK;
    const int64_t Sp = (S + BZ_AK - 1) / BZ_AK * BZ_AK;
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed) if (B * Hk > 1 && L * S * E >= 4096)
    for (int64_t u = 0; u < B * Hk; u++) {
        const int64_t b = u / Hk, hk = u % Hk;
        /* per key/value head: k^T, v^T [E|Ev, Sp]; k rows [Sp, Ep]; dk, dv [Sp, Ep|Evp]; per query
         * head: q, dout, dq rows [L, Ep|Evp]; rowsum(dout * out) [L]; tiles p, ds [BZ_AQ, BZ_AK] */
        const size_t need = (size_t)(Ep * Sp + Evp * Sp + Sp * Ep + Sp * Ep + Sp * Evp +
                                     L * Ep + L * Evp + L * Ep + L + 2 * BZ_AQ * BZ_AK);
        float *buf = (float *)aligned_alloc(64, (need * sizeof(float) + 63) / 64 * 64);
        if (!buf) {
            failed = 1;
            continue;
        }
        float *kt = buf, *vt = kt + Ep * Sp, *kr = vt + Evp * Sp, *dkp = kr + Sp * Ep, *dvp = dkp + Sp * Ep;
        float *qp = dvp + Sp * Evp, *dop = qp + L * Ep, *dqp = dop + L * Evp, *drow = dqp + L * Ep;
        float *pt = drow + L, *dst = pt + BZ_AQ * BZ_AK;
        const float *kb = k + u * S * E, *vb = v + u * S * Ev;
        for (int64_t e = 0; e < Ep; e++)
            for (int64_t c = 0; c < Sp; c++) kt[e * Sp + c] = e < E && c < S ? kb[c * E + e] : 0.0f;
        for (int64_t e = 0; e < Evp; e++)
            for (int64_t c = 0; c < Sp; c++) vt[e * Sp + c] = e < Ev && c < S ? vb[c * Ev + e] : 0.0f;
        bz_att_pad(kr, Ep, Sp, kb, E, S);
        memset(dkp, 0, sizeof(float) * (size_t)(Sp * Ep));
        memset(dvp, 0, sizeof(float) * (size_t)(Sp * Evp));
        for (int64_t g = 0; g < G; g++) {
            const int64_t bh = b * H + hk * G + g;
            const float *ob = o + bh * L * Ev, *db = dout + bh * L * Ev, *lb = lse + bh * L;
            bz_att_pad(qp, Ep, L, q + bh * L * E, E, L);
            bz_att_pad(dop, Evp, L, db, Ev, L);
            memset(dqp, 0, sizeof(float) * (size_t)(L * Ep));
            for (int64_t l = 0; l < L; l++) {
                float acc = 0.0f;
                for (int64_t e = 0; e < Ev; e++) acc += db[l * Ev + e] * ob[l * Ev + e];
                drow[l] = acc;
            }
            for (int64_t j0 = 0; j0 < S; j0 += BZ_AK) {
                const int64_t nk = S - j0 < BZ_AK ? S - j0 : BZ_AK;
#if BZ_VB > 0  /* the tile's columns the kernels compute: whole vectors */
                const int64_t nw = (nk + BZ_VL - 1) / BZ_VL * BZ_VL;
#else
                const int64_t nw = nk;
#endif
                /* top-left causal: row l sees keys j <= l, so rows before j0 see none of this block */
                for (int64_t i0 = causal ? j0 / BZ_AQ * BZ_AQ : 0; i0 < L; i0 += BZ_AQ) {
                    const int64_t nq = L - i0 < BZ_AQ ? L - i0 : BZ_AQ;
                    bz_att_mk(pt, BZ_AK, qp + i0 * Ep, Ep, 1, kt + j0, Sp, E, nq, 0, nk);     /* q k^T */
                    bz_att_mk(dst, BZ_AK, dop + i0 * Evp, Evp, 1, vt + j0, Sp, Ev, nq, 0, nk); /* dout v^T */
                    for (int64_t r = 0; r < nq; r++) {
                        const int64_t l = i0 + r;
                        float *pr = pt + r * BZ_AK, *dr = dst + r * BZ_AK;
                        const int64_t mrow = b * mb + (hk * G + g) * mh + l * ml + j0 * ms;
                        for (int64_t c = 0; c < nw; c++) {
                            float s = pr[c] * scale;
                            int keep = c < nk && (!causal || j0 + c <= l);
                            if (keep && mask_kind == 1) keep = ((const uint8_t *)mask)[mrow + c * ms] != 0;
                            else if (keep && mask_kind == 2) s += ((const float *)mask)[mrow + c * ms];
                            pr[c] = keep ? s : -INFINITY;
                        }
                        bz_att_exp_row(pr, lb[l], nw); /* exp(-inf - lse) = 0 */
                        const float dl = drow[l];
                        for (int64_t c = 0; c < nw; c++) dr[c] = pr[c] * (dr[c] - dl) * scale;
                    }
                    /* dv += p^T dout, dk += ds^T q: rows are keys, a read down the tile's columns */
                    if (dv) bz_att_mm(dvp + j0 * Evp, Evp, pt, 1, BZ_AK, dop + i0 * Evp, Evp, nq, nk, Evp, 1);
                    if (dk) bz_att_mm(dkp + j0 * Ep, Ep, dst, 1, BZ_AK, qp + i0 * Ep, Ep, nq, nk, Ep, 1);
                    if (dq) bz_att_mm(dqp + i0 * Ep, Ep, dst, BZ_AK, 1, kr + j0 * Ep, Ep, nk, nq, Ep, 1); /* ds k */
                }
            }
            for (int64_t l = 0; dq && l < L; l++)
                memcpy(dq + (bh * L + l) * E, dqp + l * Ep, sizeof(float) * (size_t)E);
        }
        for (int64_t c = 0; c < S; c++) {
            if (dk) memcpy(dk + (u * S + c) * E, dkp + c * Ep, sizeof(float) * (size_t)E);
            if (dv) memcpy(dv + (u * S + c) * Ev, dvp + c * Evp, sizeof(float) * (size_t)Ev);
        }
        free(buf);
    }
    return failed;
}

#endif
