/* braze_scatter.h: index_add, a scatter-add of slices (torch.index_add, index_put with
 * accumulate, embedding gradients), and index_put, slices written (the last write wins) or
 * multiplied, maxed or minned in (ONNX's ScatterElements and ScatterND, torch's index_put), called
 * by the host code of a `scatter` group.
 *
 * out[o, idx[i], r] = PUT(out[o, idx[i], r], src[o, i, r]) for i in index order, after out = x;
 * x == NULL means out starts as `fill` (the group's `full`), x == out puts in place. Shapes: x and
 * out [outer, n, inner], src [outer, count, inner], idx [count].
 *
 * First out = x (or the fill), threads splitting it into blocks of BZ_SCATTER_BLOCK elements: each
 * writes whole pages of a fresh output (a 94 MB embedding gradient from 16 rows took 1.0 ms so, 2.9 ms with each thread
 * filling its columns of every row). Then threads split (o, column range) pieces, and each runs every index over its
 * pieces: repeated indices add in index order on any thread count (the same bits every call,
 * and as numpy.add.at), with no atomics. Columns are split only when `outer` is too small to
 * feed the team, in multiples of 16 elements (a 64-byte line of float32: two threads never
 * share one).
 *
 * Returns -1, or the position of the first index outside [-n, n) (nothing is written then).
 * BZ_INDEX_PUT(name, T, U, I, PUT): T the element type, U the type its adds and products are done
 * in (the unsigned type of a signed integer, for defined wrap-around), I the index type, PUT one of
 * the BZ_PUT_* below; BZ_INDEX_ADD(name, T, U, I) is the one that adds. max and min keep a NaN
 * (either operand's), and keep d where the two compare equal, as numpy.maximum and minimum do. */
#ifndef BRAZE_SCATTER_H
#define BRAZE_SCATTER_H

#include <stdint.h>
#include <string.h>
#include <omp.h>

/* the first pass copies (or fills) the output in blocks of this many elements, whatever the rows'
 * length: a row of one element (ScatterElements' rows) would otherwise cost a memcpy call each */
#define BZ_SCATTER_BLOCK 16384

#define BZ_PUT_ADD(T, U, d, s) (T)((U)(d) + (U)(s))
#define BZ_PUT_MUL(T, U, d, s) (T)((U)(d) * (U)(s))
#define BZ_PUT_NONE(T, U, d, s) (s)
/* | not ||: gcc 12.2 miscompiled a float || of this shape when it vectorized it (braze_vec.h) */
#define BZ_PUT_MAX(T, U, d, s) ((((s) != (s)) | ((s) > (d))) ? (s) : (d))
#define BZ_PUT_MIN(T, U, d, s) ((((s) != (s)) | ((s) < (d))) ? (s) : (d))
#define BZ_INDEX_ADD(NAME, T, U, I) BZ_INDEX_PUT(NAME, T, U, I, BZ_PUT_ADD)

#define BZ_INDEX_PUT(NAME, T, U, I, PUT)                                                             \
static int64_t NAME(T *out, const T *x, T fill, const I *idx, const T *src, int64_t outer, int64_t n, \
                    int64_t count, int64_t inner) {                                                  \
    for (int64_t i = 0; i < count; i++)                                                             \
        if ((int64_t)idx[i] < -n || (int64_t)idx[i] >= n) return i;                                 \
    int nt = omp_get_max_threads();                                                                  \
    int64_t chunk = inner;                                                                           \
    if (outer < nt && inner >= 32) {                                                                 \
        int64_t per = (inner + nt - 1) / nt;                                                         \
        chunk = (per + 15) / 16 * 16;                                                                \
    }                                                                                                \
    int64_t pieces = chunk ? (inner + chunk - 1) / chunk : 1;                                        \
    int64_t units = outer * pieces;                                                                  \
    /* in place (x == out) only the rows move: a decoder's one new row is no work for a team */   \
    int par = (double)outer * (double)((x != out ? n : 0) + count) * (double)inner >= 65536.0;       \
    _Pragma("omp parallel if(par)")                                                                  \
    {                                                                                                \
        if (x != out) {                                                                              \
            int64_t total = outer * n * inner;                                                       \
            _Pragma("omp for schedule(static)")                                                      \
            for (int64_t b = 0; b < (total + BZ_SCATTER_BLOCK - 1) / BZ_SCATTER_BLOCK; b++) {        \
                int64_t s0 = b * BZ_SCATTER_BLOCK;                                                   \
                int64_t len = total - s0 < BZ_SCATTER_BLOCK ? total - s0 : BZ_SCATTER_BLOCK;         \
                if (x) memcpy(out + s0, x + s0, (size_t)len * sizeof(T));                            \
                else for (int64_t c = 0; c < len; c++) out[s0 + c] = fill;                           \
            }                                                                                        \
        }                                                                                            \
        _Pragma("omp for schedule(static)")                                                          \
        for (int64_t u = 0; u < units; u++) {                                                        \
            int64_t o = u / pieces, c0 = (u % pieces) * chunk;                                       \
            int64_t c1 = c0 + chunk < inner ? c0 + chunk : inner;                                    \
            T *ob = out + o * n * inner;                                                             \
            const T *sb = src + o * count * inner;                                                   \
            for (int64_t i = 0; i < count; i++) {                                                    \
                int64_t j = (int64_t)idx[i] < 0 ? (int64_t)idx[i] + n : (int64_t)idx[i];             \
                T *d = ob + j * inner;                                                               \
                const T *s = sb + i * inner;                                                         \
                _Pragma("omp simd")                                                                  \
                for (int64_t c = c0; c < c1; c++) d[c] = PUT(T, U, d[c], s[c]);                     \
            }                                                                                        \
        }                                                                                            \
    }                                                                                                \
    return -1;                                                                                       \
}

#endif
