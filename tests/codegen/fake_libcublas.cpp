/* fake_libcublas.cpp: a stand-in for cuBLAS (libcublas.so.13), for tests on machines without a GPU, next to
 * fake_libcuda.cpp (whose "device" memory is host memory, so this library reads and writes it directly).
 *
 * Implements the entry points braze_cuda_rt.h dlsyms, with cuBLAS's signatures and status codes:
 * - cublasCreate_v2 / cublasSetStream_v2 / cublasSetMathMode record the stream and the math mode on the handle;
 * - cublasSgemmStridedBatched is a naive column-major sgemm per batch, honoring transa/transb, lda/ldb/ldc,
 *   the strides, alpha and beta (beta == 0: C is not read, as BLAS says; fake_libcuda fills new memory with
 *   NaN, so reading it would show). It checks its arguments as cuBLAS does (m, n, k, batch >= 0; lda, ldb,
 *   ldc at least the rows of the stored matrix) and fails with CUBLAS_STATUS_INVALID_VALUE otherwise; it also
 *   fails (CUBLAS_STATUS_NOT_SUPPORTED) on a handle whose math mode allows TF32 or tensor-op rounding, or
 *   whose stream was never set (braze's streams are non-blocking: the legacy default stream would race);
 * - with BRAZE_FAKE_CUDA_LOG set to a file, each sgemm call appends "cublas sgemm m n k batch" to it;
 * - with BRAZE_FAKE_CUBLAS_FAIL set, every sgemm fails with CUBLAS_STATUS_EXECUTION_FAILED (the error path);
 * - cublasGetStatusString names the statuses.
 * If the fake driver (BRAZE_LIBCUDA, already loaded) exports `fake_cuda_is_device`, every pointer must be
 * device memory (CUBLAS_STATUS_EXECUTION_FAILED otherwise, as a fault would be on a GPU).
 *
 * Build: g++ -std=c++17 -O1 -shared -fPIC -o fake_libcublas.so fake_libcublas.cpp -ldl
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    ST_SUCCESS = 0,
    ST_NOT_INITIALIZED = 1,
    ST_INVALID_VALUE = 7,
    ST_EXECUTION_FAILED = 13,
    ST_NOT_SUPPORTED = 15,
};

struct fake_handle {
    void *stream;
    int stream_set;
    int math_mode;
};

#define API extern "C" __attribute__((visibility("default")))

API int cublasCreate_v2(fake_handle **h) {
    if (!h) return ST_INVALID_VALUE;
    *h = new fake_handle{nullptr, 0, 0};
    return ST_SUCCESS;
}

API int cublasDestroy_v2(fake_handle *h) {
    if (!h) return ST_NOT_INITIALIZED;
    delete h;
    return ST_SUCCESS;
}

API int cublasSetStream_v2(fake_handle *h, void *stream) {
    if (!h) return ST_NOT_INITIALIZED;
    h->stream = stream;
    h->stream_set = 1;
    return ST_SUCCESS;
}

API int cublasSetMathMode(fake_handle *h, int mode) {
    if (!h) return ST_NOT_INITIALIZED;
    h->math_mode = mode;
    return ST_SUCCESS;
}

API const char *cublasGetStatusString(int st) {
    switch (st) {
    case ST_SUCCESS: return "CUBLAS_STATUS_SUCCESS (fake cuBLAS)";
    case ST_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED (fake cuBLAS)";
    case ST_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE (fake cuBLAS)";
    case ST_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED (fake cuBLAS)";
    case ST_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED (fake cuBLAS)";
    default: return "CUBLAS_STATUS_UNKNOWN (fake cuBLAS)";
    }
}

typedef int (*is_device_fn)(const void *);

static is_device_fn device_check() {
    const char *drv = getenv("BRAZE_LIBCUDA");
    void *h = drv && *drv ? dlopen(drv, RTLD_NOW | RTLD_NOLOAD) : nullptr;
    return h ? (is_device_fn)dlsym(h, "fake_cuda_is_device") : nullptr;
}

/* column-major op(X)(i, j) for X stored with leading dimension ld */
static inline float at(const float *x, int op, int ld, int64_t i, int64_t j) {
    return op ? x[j + i * (int64_t)ld] : x[i + j * (int64_t)ld];
}

API int cublasSgemmStridedBatched(fake_handle *h, int transa, int transb, int m, int n, int k, const float *alpha,
                                  const float *A, int lda, long long sa, const float *B, int ldb, long long sb,
                                  const float *beta, float *C, int ldc, long long sc, int batch) {
    if (!h) return ST_NOT_INITIALIZED;
    if ((transa != 0 && transa != 1) || (transb != 0 && transb != 1) || m < 0 || n < 0 || k < 0 || batch < 0 ||
        !alpha || !beta)
        return ST_INVALID_VALUE;
    const int rows_a = transa ? k : m, rows_b = transb ? n : k;
    if (lda < (rows_a > 1 ? rows_a : 1) || ldb < (rows_b > 1 ? rows_b : 1) || ldc < (m > 1 ? m : 1))
        return ST_INVALID_VALUE;
    if ((h->math_mode & 0xf) == 1 || (h->math_mode & 0xf) == 3 || !h->stream_set || !h->stream)
        return ST_NOT_SUPPORTED; /* TF32 / tensor-op math, or the legacy default stream */
    if (const char *fail = getenv("BRAZE_FAKE_CUBLAS_FAIL"); fail && *fail) return ST_EXECUTION_FAILED;
    if (m == 0 || n == 0 || batch == 0) return ST_SUCCESS;
    if (is_device_fn dev = device_check()) {
        if (!dev(C) || (k && (!dev(A) || !dev(B)))) {
            fprintf(stderr, "fake_libcublas: sgemm: a pointer is not device memory (A %p, B %p, C %p)\n",
                    (const void *)A, (const void *)B, (void *)C);
            return ST_EXECUTION_FAILED;
        }
    }
    if (const char *log = getenv("BRAZE_FAKE_CUDA_LOG"); log && *log) {
        if (FILE *out = fopen(log, "a")) {
            fprintf(out, "cublas sgemm %d %d %d %d\n", m, n, k, batch);
            fclose(out);
        }
    }
    const float al = *alpha, be = *beta;
    for (int b = 0; b < batch; b++) {
        const float *a = A + b * sa, *bm = B + b * sb;
        float *c = C + b * sc;
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < m; i++) {
                float acc = 0.0f;
                for (int64_t p = 0; p < k; p++) acc += at(a, transa, lda, i, p) * at(bm, transb, ldb, p, j);
                float *y = c + i + j * (int64_t)ldc;
                *y = be == 0.0f ? al * acc : al * acc + be * *y;
            }
    }
    return ST_SUCCESS;
}
