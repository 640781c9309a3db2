/* braze_select.h: the ops whose output size their data decides (braze/ops/select.py), called by the
 * host code of a `select` group. Each returns the size it found (the group's size symbol), or -1
 * when it could not allocate its scratch; it writes only that many rows of its outputs, whose memory
 * the host planned for the upper bound.
 *
 * BZ_NONZERO(name, T, NZ): nonzero of a T tensor (NZ(v): whether v counts as nonzero), written as
 *   [rank, count] row-major, so a first pass counts.
 * BZ_UNIQUE(name, T, CMP): the distinct slices of x [outer, n, inner] along n: first [count],
 *   inverse [n], counts [count] (NULL: not wanted). CMP(a, b) is <0, 0 or >0; slices compare lexicographically in
 *   (outer, inner) order, after which the lower index comes first, so a merge sort's order is total
 *   and each group starts at its first index.
 * BZ_NMS(name, T): ONNX NonMaxSuppression on boxes [B, N, 4] and scores [B, C, N], in T, as ONNX's
 *   reference computes it.
 * BZ_TOPK(name, T, CMP): topk (braze/ops/sort.py) of x [outer, n, inner] along n, for a row too long
 *   for the compares and sums decompose.py makes of it: values and indices [outer, k, inner] (either
 *   NULL: not wanted), best first, NaN best for largest and last otherwise, ties in index order.
 *   Returns 0, or -1 when it could not allocate its scratch (no size to decide). */
#ifndef BRAZE_SELECT_H
#define BRAZE_SELECT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* numbers in order, NaN above them all and equal to NaN; -0 == 0 */
#define BZ_CMP_FLOAT(a, b) (((a) != (a) || (b) != (b)) ? ((a) != (a)) - ((b) != (b)) : ((a) > (b)) - ((a) < (b)))
#define BZ_CMP_INT(a, b) (((a) > (b)) - ((a) < (b)))
/* 16-bit floats, their bits, compared as their float32 values (exact: widening is) with
 * braze_half.h's conversions, which the C including this header has */
#define BZ_CMP_BF16(a, b) BZ_CMP_FLOAT(bz_bf16_to_f32(a), bz_bf16_to_f32(b))
#define BZ_CMP_F16(a, b) BZ_CMP_FLOAT(bz_f16_to_f32(a), bz_f16_to_f32(b))
#define BZ_NZ(v) ((v) != 0)
#define BZ_NZ_HALF(v) (((v) & 0x7fff) != 0) /* a 16-bit float's bits: only +-0 are zero */

typedef int (*bz_idx_cmp)(const void *ctx, int64_t a, int64_t b);

/* a stable merge sort of idx[0..n) by cmp, with tmp of n elements */
static void bz_sort_idx(int64_t *idx, int64_t *tmp, int64_t n, bz_idx_cmp cmp, const void *ctx) {
    int64_t *a = idx, *b = tmp;
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) b[k++] = cmp(ctx, a[j], a[i]) < 0 ? a[j++] : a[i++];
            while (i < mid) b[k++] = a[i++];
            while (j < hi) b[k++] = a[j++];
        }
        int64_t *t = a; a = b; b = t;
    }
    if (a != idx) memcpy(idx, a, (size_t)n * sizeof *idx);
}

#define BZ_NONZERO(NAME, T, NZ)                                                                      \
static int64_t NAME(const T *x, int64_t n, int rank, const int64_t *shape, int64_t *out) {          \
    int64_t count = 0;                                                                               \
    for (int64_t i = 0; i < n; i++) count += NZ(x[i]) ? 1 : 0;                                       \
    int64_t k = 0;                                                                                   \
    for (int64_t i = 0; i < n; i++) {                                                                \
        if (!(NZ(x[i]))) continue;                                                                   \
        int64_t r = i;                                                                               \
        for (int d = rank - 1; d >= 0; d--) { out[d * count + k] = r % shape[d]; r /= shape[d]; }    \
        k++;                                                                                         \
    }                                                                                                \
    return count;                                                                                    \
}

typedef struct { const void *x; int64_t outer, n, inner; } bz_slices;

#define BZ_UNIQUE(NAME, T, CMP)                                                                      \
static int NAME##_cmp(const void *ctx, int64_t a, int64_t b) {                                       \
    const bz_slices *s = (const bz_slices *)ctx;                                                    \
    const T *x = (const T *)s->x;                                                                    \
    for (int64_t o = 0; o < s->outer; o++) {                                                         \
        const T *p = x + (o * s->n + a) * s->inner, *q = x + (o * s->n + b) * s->inner;              \
        for (int64_t i = 0; i < s->inner; i++) {                                                     \
            int c = CMP(p[i], q[i]);                                                                 \
            if (c) return c;                                                                         \
        }                                                                                            \
    }                                                                                                \
    return 0;                                                                                        \
}                                                                                                    \
static int NAME##_order(const void *ctx, int64_t a, int64_t b) {                                     \
    int c = NAME##_cmp(ctx, a, b);                                                                   \
    return c ? c : BZ_CMP_INT(a, b);                                                                 \
}                                                                                                    \
static int64_t NAME(const T *x, int64_t outer, int64_t n, int64_t inner, int sorted, int64_t *first, \
                    int64_t *inverse, int64_t *counts) {                                             \
    if (n == 0) return 0;                                                                            \
    int64_t *order = (int64_t *)malloc((size_t)n * 6 * sizeof(int64_t));                             \
    if (!order) return -1;                                                                           \
    int64_t *tmp = order + n, *remap = order + 2 * n;                                                \
    if (!first) first = order + 3 * n; /* an output nothing reads: scratch */                        \
    if (!inverse) inverse = order + 4 * n;                                                           \
    if (!counts) counts = order + 5 * n;                                                             \
    bz_slices s = {x, outer, n, inner};                                                              \
    for (int64_t i = 0; i < n; i++) order[i] = i;                                                    \
    bz_sort_idx(order, tmp, n, NAME##_order, &s);                                                   \
    int64_t g = -1;                                                                                  \
    for (int64_t k = 0; k < n; k++) {                                                                \
        int64_t j = order[k];                                                                        \
        if (k == 0 || NAME##_cmp(&s, order[k - 1], j)) { g++; first[g] = j; counts[g] = 0; }          \
        inverse[j] = g;                                                                              \
        counts[g]++;                                                                                 \
    }                                                                                                \
    int64_t u = g + 1;                                                                               \
    if (!sorted) { /* groups by first appearance: renumber them as they first appear */              \
        int64_t r = 0;                                                                               \
        for (int64_t j = 0; j < n; j++)                                                              \
            if (first[inverse[j]] == j) remap[inverse[j]] = r++;                                     \
        for (int64_t q = 0; q < u; q++) { tmp[remap[q]] = first[q]; order[remap[q]] = counts[q]; }   \
        for (int64_t q = 0; q < u; q++) { first[q] = tmp[q]; counts[q] = order[q]; }                 \
        for (int64_t j = 0; j < n; j++) inverse[j] = remap[inverse[j]];                              \
    }                                                                                                \
    free(order);                                                                                     \
    return u;                                                                                        \
}

typedef struct { const void *scores; } bz_nms_ctx;

#define BZ_NMS(NAME, T)                                                                              \
static int NAME##_order(const void *ctx, int64_t a, int64_t b) { /* higher score first, then index */\
    const T *s = (const T *)((const bz_nms_ctx *)ctx)->scores;                                       \
    return s[a] > s[b] ? -1 : s[a] < s[b] ? 1 : BZ_CMP_INT(a, b);                                   \
}                                                                                                    \
static int NAME##_over(const T *a, const T *b, int center, T threshold) {                            \
    T ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;                                                        \
    if (center) {                                                                                    \
        ax0 = a[0] - a[2] / 2; ax1 = a[0] + a[2] / 2; ay0 = a[1] - a[3] / 2; ay1 = a[1] + a[3] / 2;  \
        bx0 = b[0] - b[2] / 2; bx1 = b[0] + b[2] / 2; by0 = b[1] - b[3] / 2; by1 = b[1] + b[3] / 2;  \
    } else {                                                                                         \
        ax0 = a[1] < a[3] ? a[1] : a[3]; ax1 = a[1] < a[3] ? a[3] : a[1];                            \
        ay0 = a[0] < a[2] ? a[0] : a[2]; ay1 = a[0] < a[2] ? a[2] : a[0];                            \
        bx0 = b[1] < b[3] ? b[1] : b[3]; bx1 = b[1] < b[3] ? b[3] : b[1];                            \
        by0 = b[0] < b[2] ? b[0] : b[2]; by1 = b[0] < b[2] ? b[2] : b[0];                            \
    }                                                                                                \
    T ix0 = ax0 > bx0 ? ax0 : bx0, ix1 = ax1 < bx1 ? ax1 : bx1;                                      \
    T iy0 = ay0 > by0 ? ay0 : by0, iy1 = ay1 < by1 ? ay1 : by1;                                      \
    if (ix1 <= ix0 || iy1 <= iy0) return 0;                                                          \
    T inter = (ix1 - ix0) * (iy1 - iy0);                                                             \
    T area_a = (ax1 - ax0) * (ay1 - ay0), area_b = (bx1 - bx0) * (by1 - by0);                        \
    T uni = area_a + area_b - inter;                                                                 \
    if (inter <= 0 || area_a <= 0 || area_b <= 0 || uni <= 0) return 0;                              \
    return inter / uni > threshold;                                                                  \
}                                                                                                    \
static int64_t NAME(const T *boxes, const T *scores, int64_t B, int64_t C, int64_t N,                \
                    const int64_t *max_out, const T *iou, const T *score_thr, int center, int64_t *out) { \
    int64_t limit = max_out ? (max_out[0] > 0 ? max_out[0] : 0) : 0;                                 \
    T threshold = iou ? iou[0] : (T)0;                                                               \
    if (limit == 0 || N == 0) return 0;                                                              \
    int64_t *cand = (int64_t *)malloc((size_t)N * 3 * sizeof(int64_t));                              \
    if (!cand) return -1;                                                                            \
    int64_t *tmp = cand + N, *kept = cand + 2 * N, count = 0;                                        \
    for (int64_t b = 0; b < B; b++)                                                                  \
        for (int64_t c = 0; c < C; c++) {                                                            \
            const T *s = scores + (b * C + c) * N, *bx = boxes + b * N * 4;                          \
            int64_t m = 0, k = 0;                                                                    \
            for (int64_t i = 0; i < N; i++)                                                          \
                if (!score_thr || s[i] > score_thr[0]) cand[m++] = i;                                \
            bz_nms_ctx ctx = {s};                                                                    \
            bz_sort_idx(cand, tmp, m, NAME##_order, &ctx);                                          \
            for (int64_t q = 0; q < m && k < limit; q++) {                                           \
                int64_t i = cand[q], keep = 1;                                                       \
                for (int64_t j = 0; j < k && keep; j++)                                              \
                    if (NAME##_over(bx + i * 4, bx + kept[j] * 4, center, threshold)) keep = 0;      \
                if (!keep) continue;                                                                 \
                kept[k++] = i;                                                                       \
                out[count * 3] = b; out[count * 3 + 1] = c; out[count * 3 + 2] = i;                  \
                count++;                                                                             \
            }                                                                                        \
        }                                                                                            \
    free(cand);                                                                                      \
    return count;                                                                                    \
}

/* A k of at most a quarter of the row keeps the k best so far in a heap whose root is the worst of
 * them, in the total order "better value, else lower index": each element is compared with the root
 * and most are dropped at once (O(n log k) at worst), and the k left are sorted at the end. A larger
 * k sorts the whole row (O(n log n)). Rows run in parallel when there is enough work, each thread
 * with its own scratch. */
#define BZ_TOPK(NAME, T, CMP)                                                                        \
typedef struct { const T *x; int64_t inner; int sign; } NAME##_row;                                  \
static inline int NAME##_order(const NAME##_row *r, int64_t a, int64_t b) {                          \
    int c = r->sign * CMP(r->x[a * r->inner], r->x[b * r->inner]);                                   \
    return c ? c : BZ_CMP_INT(a, b);                                                                 \
}                                                                                                    \
/* the sort: (value, index) pairs, so a compare reads no value through an index; runs of 16 by       \
 * insertion, then merged */                                                                         \
typedef struct { T v; int64_t i; } NAME##_kv;                                                        \
static inline int NAME##_first(int sign, const NAME##_kv *a, const NAME##_kv *b) {                   \
    int c = sign * CMP(a->v, b->v);                                                                  \
    return c ? c < 0 : a->i < b->i;                                                                  \
}                                                                                                    \
static void NAME##_msort(int sign, NAME##_kv *p, NAME##_kv *tmp, int64_t n) {                        \
    for (int64_t lo = 0; lo < n; lo += 16) {                                                         \
        int64_t hi = lo + 16 < n ? lo + 16 : n;                                                      \
        for (int64_t j = lo + 1; j < hi; j++) {                                                      \
            NAME##_kv e = p[j];                                                                      \
            int64_t q = j;                                                                           \
            for (; q > lo && NAME##_first(sign, &e, &p[q - 1]); q--) p[q] = p[q - 1];                \
            p[q] = e;                                                                                \
        }                                                                                            \
    }                                                                                                \
    NAME##_kv *a = p, *b = tmp;                                                                      \
    for (int64_t w = 16; w < n; w *= 2) {                                                            \
        for (int64_t lo = 0; lo < n; lo += 2 * w) {                                                  \
            int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;             \
            int64_t i = lo, j = mid, k = lo;                                                         \
            while (i < mid && j < hi) b[k++] = NAME##_first(sign, &a[j], &a[i]) ? a[j++] : a[i++];   \
            while (i < mid) b[k++] = a[i++];                                                         \
            while (j < hi) b[k++] = a[j++];                                                          \
        }                                                                                            \
        NAME##_kv *t = a; a = b; b = t;                                                              \
    }                                                                                                \
    if (a != p) memcpy(p, a, (size_t)n * sizeof *p);                                                 \
}                                                                                                    \
static void NAME##_sift(const NAME##_row *r, int64_t *h, int64_t k, int64_t p) {                     \
    for (;;) {                                                                                       \
        int64_t c = 2 * p + 1;                                                                       \
        if (c >= k) return;                                                                          \
        if (c + 1 < k && NAME##_order(r, h[c + 1], h[c]) > 0) c++;                                   \
        if (NAME##_order(r, h[c], h[p]) <= 0) return;                                                \
        int64_t t = h[c]; h[c] = h[p]; h[p] = t; p = c;                                              \
    }                                                                                                \
}                                                                                                    \
static int NAME(const T *x, int64_t outer, int64_t n, int64_t inner, int64_t k, int largest, T *vals, \
                int64_t *idx) {                                                                      \
    const int64_t rows = outer * inner;                                                              \
    const int sign = largest ? -1 : 1, sort = 4 * k > n;                                             \
    int bad = 0;                                                                                     \
    if (k <= 0 || rows <= 0) return 0;                                                               \
    _Pragma("omp parallel if (rows > 1 && rows * n >= 32768)")                                       \
    {                                                                                                \
        const size_t m = (size_t)(sort ? n : k);                                                     \
        int64_t *buf = (int64_t *)malloc(m * (sizeof(int64_t) + 2 * sizeof(NAME##_kv)));             \
        NAME##_kv *kv = buf ? (NAME##_kv *)(buf + m) : NULL;                                         \
        if (!buf) __atomic_store_n(&bad, 1, __ATOMIC_RELAXED);                                       \
        _Pragma("omp for schedule(static)")                                                          \
        for (int64_t r = 0; r < rows; r++) {                                                         \
            if (!buf) continue;                                                                      \
            int64_t o = r / inner, i = r % inner;                                                    \
            NAME##_row row = {x + o * n * inner + i, inner, sign};                                   \
            if (sort) {                                                                              \
                for (int64_t j = 0; j < n; j++) kv[j] = (NAME##_kv){row.x[j * inner], j};            \
            } else {                                                                                 \
                for (int64_t j = 0; j < k; j++) { /* a heap of the first k: each placed above */     \
                    int64_t p = j;                                                                   \
                    for (; p > 0 && NAME##_order(&row, j, buf[(p - 1) / 2]) > 0; p = (p - 1) / 2)    \
                        buf[p] = buf[(p - 1) / 2];                                                   \
                    buf[p] = j;                                                                      \
                }                                                                                    \
                for (int64_t j = k; j < n; j++)                                                      \
                    if (NAME##_order(&row, j, buf[0]) < 0) { buf[0] = j; NAME##_sift(&row, buf, k, 0); }\
                for (int64_t j = 0; j < k; j++) kv[j] = (NAME##_kv){row.x[buf[j] * inner], buf[j]};  \
            }                                                                                        \
            NAME##_msort(sign, kv, kv + m, (int64_t)m);                                              \
            for (int64_t j = 0; j < k; j++) {                                                        \
                int64_t at = (o * k + j) * inner + i;                                                \
                if (vals) vals[at] = kv[j].v;                                                        \
                if (idx) idx[at] = kv[j].i;                                                          \
            }                                                                                        \
        }                                                                                            \
        free(buf);                                                                                   \
    }                                                                                                \
    return bad ? -1 : 0;                                                                             \
}

#endif
