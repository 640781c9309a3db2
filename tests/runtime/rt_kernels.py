"""Small hand-written kernels following braze_abi.h, shared by the runtime tests."""

import shutil

import pytest

HAVE_CC = bool(shutil.which("cc") or shutil.which("gcc"))
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler")

# y = x + 1 over a float32 tensor of any rank <= 4; validates dtype and rank
ADD1_SRC = r"""
#include "braze_abi.h"

BRAZE_EXPORT int32_t braze_add1(const braze_instance *model, const braze_tensor *inputs, int32_t n_inputs,
                                braze_alloc_fn alloc, void *alloc_ctx, char *err, int32_t errlen) {
    if (n_inputs != 1) BRAZE_FAIL(BRAZE_ERR_INTERNAL, "expected 1 input, got %d", (int)n_inputs);
    const braze_tensor *x = &inputs[0];
    if (x->dtype != BRAZE_FLOAT32)
        BRAZE_FAIL(BRAZE_ERR_DTYPE, "input 0 (x): expected dtype f32, got %s", braze_dtype_name(x->dtype));
    if (x->ndim > 4) BRAZE_FAIL(BRAZE_ERR_RANK, "input 0 (x): expected rank <= 4, got %d", (int)x->ndim);
    for (int32_t d = 0; d < x->ndim; d++)
        if (x->shape[d] > 1000000) BRAZE_FAIL(BRAZE_ERR_RANGE, "input 0 (x): dim %d = %lld is above 1000000",
                                              (int)d, (long long)x->shape[d]);
    int64_t n = braze_numel(x);
    float *y = (float *)alloc(alloc_ctx, 0, BRAZE_FLOAT32, x->ndim, x->shape);
    if (!y) BRAZE_FAIL(BRAZE_ERR_ALLOC, "allocating output 0 failed");
    const float *xd = (const float *)x->data;
    #pragma omp parallel for if (n > 100000)
    for (int64_t i = 0; i < n; i++) y[i] = xd[i] + 1.0f;
    return BRAZE_OK;
}
"""

# info(x) -> i64[3 + ndim]: data pointer, dtype code, ndim, dims (any dtype, any rank)
INFO_SRC = r"""
#include "braze_abi.h"

BRAZE_EXPORT int32_t braze_info(const braze_instance *model, const braze_tensor *inputs, int32_t n_inputs,
                                braze_alloc_fn alloc, void *alloc_ctx, char *err, int32_t errlen) {
    const braze_tensor *x = &inputs[0];
    int64_t n = 3 + x->ndim;
    int64_t *y = (int64_t *)alloc(alloc_ctx, 0, BRAZE_INT64, 1, &n);
    if (!y) BRAZE_FAIL(BRAZE_ERR_ALLOC, "allocating output 0 failed");
    y[0] = (int64_t)(intptr_t)x->data;
    y[1] = x->dtype;
    y[2] = x->ndim;
    for (int32_t d = 0; d < x->ndim; d++) y[3 + d] = x->shape[d];
    return BRAZE_OK;
}
"""

# a library with constants: braze_create keeps c (f32[n]) in the instance;
# affine(x: f32[n], k: i64[]) -> (x*c + k: f32[n], sum: f64[]); plus entries that misbehave on purpose
MULTI_SRC = r"""
#include <stdlib.h>
#include "braze_abi.h"

struct braze_instance { const float *c; int64_t n; };

BRAZE_EXPORT int32_t braze_create(void *const *constants, int32_t n_constants, int32_t threads,
                                  braze_instance **out, char *err, int32_t errlen) {
    *out = NULL;
    if (n_constants != 2) BRAZE_FAIL(BRAZE_ERR_INTERNAL, "braze_create: expected 2 constants, got %d", (int)n_constants);
    braze_instance *m = (braze_instance *)malloc(sizeof *m);
    if (!m) BRAZE_FAIL(BRAZE_ERR_ALLOC, "out of memory");
    m->c = (const float *)constants[0];
    m->n = *(const int64_t *)constants[1];
    *out = m;
    return BRAZE_OK;
}

BRAZE_EXPORT void braze_destroy(braze_instance *m) { free(m); }

BRAZE_EXPORT int32_t braze_affine(const braze_instance *model, const braze_tensor *inputs, int32_t n_inputs,
                                  braze_alloc_fn alloc, void *alloc_ctx, char *err, int32_t errlen) {
    int32_t rc;
    if (!model) BRAZE_FAIL(BRAZE_ERR_INTERNAL, "no model instance");
    const float *g_c = model->c;
    int64_t g_n = model->n;
    if ((rc = braze_check_input(&inputs[0], 0, "x", BRAZE_FLOAT32, 1, err, errlen))) return rc;
    if ((rc = braze_check_input(&inputs[1], 1, "k", BRAZE_INT64, 0, err, errlen))) return rc;
    int64_t n = inputs[0].shape[0];
    if (n != g_n) BRAZE_FAIL(BRAZE_ERR_SHAPE, "input 0 (x): dim 0 is %lld, expected %lld", (long long)n, (long long)g_n);
    int64_t k = *(const int64_t *)inputs[1].data;
    if (k < 0) BRAZE_FAIL(BRAZE_ERR_CONSTRAINT, "input 1 (k): must be >= 0, got %lld", (long long)k);
    float *y = (float *)alloc(alloc_ctx, 0, BRAZE_FLOAT32, 1, &n);
    if (!y) return BRAZE_ERR_ALLOC;
    double *s = (double *)alloc(alloc_ctx, 1, BRAZE_FLOAT64, 0, 0);
    if (!s) return BRAZE_ERR_ALLOC;
    double acc = 0;
    for (int64_t i = 0; i < n; i++) { y[i] = inputs[0].data == 0 ? 0 : ((const float *)inputs[0].data)[i] * g_c[i] + (float)k; acc += y[i]; }
    *s = acc;
    return BRAZE_OK;
}

BRAZE_EXPORT int32_t braze_bad_alloc(const braze_instance *model, const braze_tensor *inputs, int32_t n_inputs,
                                     braze_alloc_fn alloc, void *alloc_ctx, char *err, int32_t errlen) {
    int64_t n = 4;
    void *p = alloc(alloc_ctx, 7, BRAZE_FLOAT32, 1, &n);  /* no output 7 */
    if (!p) BRAZE_FAIL(BRAZE_ERR_ALLOC, "alloc failed");
    return BRAZE_OK;
}

BRAZE_EXPORT int32_t braze_internal(const braze_instance *model, const braze_tensor *inputs, int32_t n_inputs,
                                    braze_alloc_fn alloc, void *alloc_ctx, char *err, int32_t errlen) {
    BRAZE_FAIL(BRAZE_ERR_INTERNAL, "something broke inside (%s)", "on purpose");
}

BRAZE_EXPORT int32_t braze_silent(const braze_instance *model, const braze_tensor *inputs, int32_t n_inputs,
                                  braze_alloc_fn alloc, void *alloc_ctx, char *err, int32_t errlen) {
    return BRAZE_ERR_RANGE;  /* no message */
}

BRAZE_EXPORT int32_t braze_forgets_output(const braze_instance *model, const braze_tensor *inputs, int32_t n_inputs,
                                          braze_alloc_fn alloc, void *alloc_ctx, char *err, int32_t errlen) {
    return BRAZE_OK;
}
"""
