/* braze native entry ABI (docs/compiler-design.md, "Native entry ABI").
 *
 * A compiled model is a shared library exporting
 *
 *   int32_t braze_create(void *const *constants, int32_t n_constants, int32_t threads,
 *                        braze_instance **model, char *err, int32_t errlen);
 *   void    braze_destroy(braze_instance *model);
 *   int32_t braze_<function>(const braze_instance *model, const braze_tensor *inputs, int32_t n_inputs,
 *                            braze_alloc_fn alloc, void *alloc_ctx, char *err, int32_t errlen);
 *
 * A model instance holds everything one compiled model owns: its constants,
 * prepacked weights and thread count (threads <= 0: the OpenMP default). With
 * braze_set_adapt(model, 1), exported beside braze_create, a call runs with fewer
 * threads while other processes take the cores (braze_team.h). The
 * library itself keeps no model state, so instances never share weights, and
 * one instance may be called from many threads at once. A library without
 * constants may omit braze_create; its entries then get model == NULL.
 *
 * Every entry returns BRAZE_OK or an error code, and on error writes a
 * NUL-terminated message into err[0..errlen). It never aborts the process.
 *
 * Memory:
 * - inputs[i].data points at row-major contiguous elements. It is NOT
 *   guaranteed to be aligned beyond the element size (inputs are the caller's
 *   tensors); load and store vectors unaligned.
 * - outputs come from alloc(alloc_ctx, index, dtype, ndim, shape): the caller
 *   allocates a contiguous tensor of that dtype and shape and returns its data
 *   pointer (64-byte aligned by the braze runtime), or NULL on failure (then
 *   return BRAZE_ERR_ALLOC). Each output index is requested exactly once. A
 *   zero-element output still gets a non-NULL pointer, which must not be
 *   dereferenced. alloc may be called only from the thread running the entry,
 *   outside OpenMP parallel regions.
 * - constants passed to braze_create stay valid until braze_destroy.
 */
#ifndef BRAZE_ABI_H
#define BRAZE_ABI_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BRAZE_ABI_VERSION 2

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define BRAZE_EXPORT __attribute__((visibility("default")))
#else
#define BRAZE_EXPORT
#endif

typedef struct {
    void *data;
    int32_t dtype;
    int32_t ndim;
    const int64_t *shape;
} braze_tensor;

typedef struct braze_instance braze_instance; /* defined by each compiled library */

typedef void *(*braze_alloc_fn)(void *ctx, int32_t index, int32_t dtype, int32_t ndim,
                                const int64_t *shape);

/* dtype codes: the index of the dtype in braze.ir.types.DType */
#define BRAZE_FLOAT32 0
#define BRAZE_FLOAT16 1
#define BRAZE_BFLOAT16 2
#define BRAZE_FLOAT64 3
#define BRAZE_INT64 4
#define BRAZE_INT32 5
#define BRAZE_INT8 6
#define BRAZE_UINT8 7
#define BRAZE_BOOL 8
#define BRAZE_INT16 9
#define BRAZE_UINT16 10
#define BRAZE_UINT32 11
#define BRAZE_UINT64 12
/* narrow types: one element per byte (docs/semantics.md, "Narrow types") */
#define BRAZE_FLOAT8_E4M3FN 13
#define BRAZE_FLOAT8_E4M3FNUZ 14
#define BRAZE_FLOAT8_E5M2 15
#define BRAZE_FLOAT8_E5M2FNUZ 16
#define BRAZE_FLOAT8_E8M0FNU 17
#define BRAZE_FLOAT4_E2M1FN 18
#define BRAZE_INT4 19
#define BRAZE_UINT4 20
#define BRAZE_INT2 21
#define BRAZE_UINT2 22
#define BRAZE_NUM_DTYPES 23

/* error codes. RANK..CONSTRAINT are the caller's fault (InputError in Python). */
#define BRAZE_OK 0
#define BRAZE_ERR_RANK 1
#define BRAZE_ERR_DTYPE 2
#define BRAZE_ERR_SHAPE 3
#define BRAZE_ERR_RANGE 4
#define BRAZE_ERR_CONSTRAINT 5
#define BRAZE_ERR_ALLOC 6
#define BRAZE_ERR_INTERNAL 7

static inline const char *braze_dtype_name(int32_t dtype) {
    static const char *const names[BRAZE_NUM_DTYPES] = {
        "f32", "f16", "bf16", "f64", "i64", "i32", "i8", "u8", "bool", "i16", "u16", "u32", "u64",
        "f8e4m3fn", "f8e4m3fnuz", "f8e5m2", "f8e5m2fnuz", "f8e8m0", "f4e2m1", "i4", "u4", "i2", "u2"};
    return (dtype >= 0 && dtype < BRAZE_NUM_DTYPES) ? names[dtype] : "?";
}

static inline int32_t braze_dtype_size(int32_t dtype) {
    static const int32_t sizes[BRAZE_NUM_DTYPES] = {4, 2, 2, 8, 8, 4, 1, 1, 1, 2, 2, 4, 8,
                                                          1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    return (dtype >= 0 && dtype < BRAZE_NUM_DTYPES) ? sizes[dtype] : 0;
}

/* Write a printf-style message into err (when err != NULL and errlen > 0) and return code. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static inline int32_t braze_fail(char *err, int32_t errlen, int32_t code, const char *fmt, ...) {
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, (size_t)errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* return braze_fail(err, errlen, code, fmt, ...): for entries whose parameters are named err, errlen. */
#define BRAZE_FAIL(code, ...) return braze_fail(err, errlen, (code), __VA_ARGS__)

static inline int64_t braze_numel(const braze_tensor *t) {
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* Check the dtype and rank of input `index` (named `name`); BRAZE_OK or an error code + message. */
static inline int32_t braze_check_input(const braze_tensor *t, int32_t index, const char *name,
                                        int32_t dtype, int32_t ndim, char *err, int32_t errlen) {
    if (t->ndim != ndim)
        return braze_fail(err, errlen, BRAZE_ERR_RANK,
                          "input %d (%s): expected rank %d, got rank %d", (int)index, name,
                          (int)ndim, (int)t->ndim);
    if (t->dtype != dtype)
        return braze_fail(err, errlen, BRAZE_ERR_DTYPE,
                          "input %d (%s): expected dtype %s, got %s", (int)index, name,
                          braze_dtype_name(dtype), braze_dtype_name(t->dtype));
    for (int32_t i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0)
            return braze_fail(err, errlen, BRAZE_ERR_SHAPE, "input %d (%s): dim %d is negative (%lld)",
                              (int)index, name, (int)i, (long long)t->shape[i]);
    return BRAZE_OK;
}

#ifdef __cplusplus
}
#endif

#endif /* BRAZE_ABI_H */
