/* braze_cuda_rt.h: the host side of a model library compiled for a CUDA target.
 *
 * The library is plain C for the GPU machine's CPU, built anywhere (no CUDA headers or
 * libraries at build time). At braze_create it opens the driver (libcuda.so.1, or
 * BRAZE_LIBCUDA) with dlopen and loads its kernels: the cubin for its arch, else the PTX
 * (JIT-compiled by the driver for a newer GPU). The host code is the CPU target's (checks,
 * symbols, arena offsets, call order); what differs lives here:
 *
 * - kernels: each generated kernel's host stub calls bzc_launch with the grid loops' count;
 * - memory: constants uploaded once per instance; the arena is one device allocation per
 *   calling thread, grown for a larger shape; inputs that are host memory are copied to a
 *   per-thread staging buffer, device pointers (CUDA torch tensors) are used where they are;
 *   outputs are computed on the device and copied to the caller's host buffers at the end;
 * - GEMM and convolution: braze_dnnl.h's float32 calls, implemented with the bz_gemm and
 *   bz_conv2d kernels of braze_cuda_lib.cuh (their launch contracts are there); GEMMs go to cuBLAS
 *   (dlopened at driver load, optional: BRAZE_LIBCUBLAS, BRAZE_CUBLAS=0) plus bz_epilogue where it is there;
 * - a stream per calling thread, so calls from several threads never share scratch memory.
 *
 * Errors never abort: a failed driver call records its message (the first one per call), later
 * launches of the call are skipped, and bzc_finish returns it to the entry.
 * Needs, before inclusion: bzc_cubin / bzc_cubin_size / bzc_ptx, BZC_N_KERNELS and bzc_names.
 */
#ifndef BRAZE_CUDA_RT_H
#define BRAZE_CUDA_RT_H

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;
typedef unsigned long long CUdeviceptr;

static struct {
    CUresult (*Init)(unsigned);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*MemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void **, void **);
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*PointerGetAttribute)(void *, int, CUdeviceptr);
    CUcontext ctx;
    CUmodule module;
    CUfunction fn[BZC_N_KERNELS];
    char error[768]; /* why the driver or the kernels could not be loaded ("" when ready) */
} bzc;

static pthread_once_t bzc_once = PTHREAD_ONCE_INIT;

static const char *bzc_errstr(CUresult r) {
    const char *s = NULL;
    if (bzc.GetErrorString) bzc.GetErrorString(r, &s);
    return s ? s : "unknown CUDA error";
}

#define BZC_SYM(field, name) \
    if (!(*(void **)&bzc.field = dlsym(h, name))) { \
        snprintf(bzc.error, sizeof bzc.error, "the CUDA driver %s lacks %s: it is older than braze needs " \
                 "(CUDA 12 or newer)", lib, name); return; }

/* --- cuBLAS (optional): float32 GEMMs, when the machine has it ------------------------------
 * Opened at driver load: BRAZE_LIBCUBLAS, else libcublas.so.13, else libcublas.so.12; BRAZE_CUBLAS=0 turns
 * it off. Missing (or lacking a symbol) is no error: bzc_gemm then launches bz_gemm. Only what braze calls
 * is declared here (no CUDA headers at build time): the types are cuBLAS's, the values its enums'. */
typedef void *cublasHandle_t;
typedef int cublasStatus_t;
#define BZC_CUBLAS_OP_N 0
#define BZC_CUBLAS_OP_T 1
#define BZC_CUBLAS_DEFAULT_MATH 0 /* float32 stays float32: never CUBLAS_TF32_TENSOR_OP_MATH (3) */
static struct {
    cublasStatus_t (*Create)(cublasHandle_t *);
    cublasStatus_t (*SetStream)(cublasHandle_t, CUstream);
    cublasStatus_t (*SetMathMode)(cublasHandle_t, int);
    cublasStatus_t (*SgemmStridedBatched)(cublasHandle_t, int, int, int, int, int, const float *, const float *, int,
                                          long long, const float *, int, long long, const float *, float *, int,
                                          long long, int);
    const char *(*GetStatusString)(cublasStatus_t); /* optional */
    int on;                                          /* all of the above but the optional one were found */
    char lib[256];                                   /* the library opened, or why none was ("" when off) */
} bzc_blas;

static void bzc_blas_load(void) {
    const char *off = getenv("BRAZE_CUBLAS");
    if (off && strcmp(off, "0") == 0) {
        snprintf(bzc_blas.lib, sizeof bzc_blas.lib, "off (BRAZE_CUBLAS=0)");
        return;
    }
    const char *env = getenv("BRAZE_LIBCUBLAS");
    const char *names[] = {env && *env ? env : "libcublas.so.13", env && *env ? NULL : "libcublas.so.12"};
    void *h = NULL;
    const char *lib = NULL;
    for (int i = 0; i < 2 && !h && names[i]; i++) h = dlopen(lib = names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(bzc_blas.lib, sizeof bzc_blas.lib, "not found (%s)", dlerror());
        return;
    }
    const char *syms[] = {"cublasCreate_v2", "cublasSetStream_v2", "cublasSetMathMode", "cublasSgemmStridedBatched"};
    void **fields[] = {(void **)&bzc_blas.Create, (void **)&bzc_blas.SetStream, (void **)&bzc_blas.SetMathMode,
                       (void **)&bzc_blas.SgemmStridedBatched};
    for (int i = 0; i < 4; i++)
        if (!(*fields[i] = dlsym(h, syms[i]))) {
            snprintf(bzc_blas.lib, sizeof bzc_blas.lib, "%s lacks %s", lib, syms[i]);
            return;
        }
    *(void **)&bzc_blas.GetStatusString = dlsym(h, "cublasGetStatusString");
    snprintf(bzc_blas.lib, sizeof bzc_blas.lib, "%s", lib);
    bzc_blas.on = 1;
}

static void bzc_load(void) {
    const char *lib = getenv("BRAZE_LIBCUDA");
    if (!lib || !*lib) lib = "libcuda.so.1";
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(bzc.error, sizeof bzc.error, "this model was compiled for %s, but the CUDA driver (%s) could not be "
                 "loaded: %s; run it on a machine with an NVIDIA GPU and its driver", BZC_TARGET, lib, dlerror());
        return;
    }
    BZC_SYM(Init, "cuInit") BZC_SYM(DriverGetVersion, "cuDriverGetVersion") BZC_SYM(DeviceGetCount, "cuDeviceGetCount")
    BZC_SYM(DeviceGet, "cuDeviceGet") BZC_SYM(DeviceGetAttribute, "cuDeviceGetAttribute")
    BZC_SYM(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") BZC_SYM(CtxSetCurrent, "cuCtxSetCurrent")
    BZC_SYM(ModuleLoadData, "cuModuleLoadData") BZC_SYM(ModuleGetFunction, "cuModuleGetFunction")
    BZC_SYM(MemAlloc, "cuMemAlloc_v2") BZC_SYM(MemFree, "cuMemFree_v2") BZC_SYM(MemcpyHtoD, "cuMemcpyHtoD_v2")
    BZC_SYM(MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2") BZC_SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
    BZC_SYM(MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2") BZC_SYM(StreamCreate, "cuStreamCreate")
    BZC_SYM(StreamSynchronize, "cuStreamSynchronize") BZC_SYM(LaunchKernel, "cuLaunchKernel")
    BZC_SYM(GetErrorString, "cuGetErrorString") BZC_SYM(PointerGetAttribute, "cuPointerGetAttribute")
    CUresult r = bzc.Init(0);
    int n = 0;
    if (r == 0) r = bzc.DeviceGetCount(&n);
    if (r != 0 || n == 0) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        snprintf(bzc.error, sizeof bzc.error, "this model was compiled for %s, but no CUDA GPU is visible (%s)%s",
                 BZC_TARGET, r ? bzc_errstr(r) : "0 devices",
                 vis && !*vis ? "; CUDA_VISIBLE_DEVICES is set and empty" : "");
        return;
    }
    CUdevice dev;
    int major = 0, minor = 0, version = 0;
    bzc.DeviceGet(&dev, 0);
    bzc.DeviceGetAttribute(&major, 75, dev); /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
    bzc.DeviceGetAttribute(&minor, 76, dev);
    bzc.DriverGetVersion(&version);
    if ((r = bzc.DevicePrimaryCtxRetain(&bzc.ctx, dev)) || (r = bzc.CtxSetCurrent(bzc.ctx))) {
        snprintf(bzc.error, sizeof bzc.error, "could not open the GPU: %s", bzc_errstr(r));
        return;
    }
    /* the cubin runs on its own arch; the PTX on that arch or newer, JIT-compiled by the driver */
    char own[16];
    snprintf(own, sizeof own, "sm_%d%d", major, minor);
    r = strcmp(own, BZC_ARCH) == 0 ? bzc.ModuleLoadData(&bzc.module, bzc_cubin) : 1;
    if (r != 0) r = bzc.ModuleLoadData(&bzc.module, bzc_ptx);
    if (r != 0) {
        snprintf(bzc.error, sizeof bzc.error, "this model's kernels were compiled for %s (NVRTC %s), and this GPU is "
                 "%s with a driver for CUDA %d.%d: %s; compile for target cuda:%s, or update the driver",
                 BZC_TARGET, BZC_NVRTC, own, version / 1000, version % 1000 / 10, bzc_errstr(r), own);
        return;
    }
    for (int i = 0; i < BZC_N_KERNELS; i++)
        if ((r = bzc.ModuleGetFunction(&bzc.fn[i], bzc.module, bzc_names[i]))) {
            snprintf(bzc.error, sizeof bzc.error, "kernel %s is missing from the model's module: %s", bzc_names[i],
                     bzc_errstr(r));
            return;
        }
    bzc_blas_load();
}

static int bzc_init(char *err, int errlen) {
    pthread_once(&bzc_once, bzc_load);
    if (bzc.error[0]) return braze_fail(err, errlen, BRAZE_ERR_INTERNAL, "%s", bzc.error);
    return bzc.CtxSetCurrent(bzc.ctx) ? braze_fail(err, errlen, BRAZE_ERR_INTERNAL, "could not make the GPU current")
                                      : 0;
}

static void *bzc_upload(const void *host, size_t n, char *err, int errlen) {
    CUdeviceptr d = 0;
    CUresult r = bzc.MemAlloc(&d, n ? n : 1);
    if (r == 0 && n) r = bzc.MemcpyHtoD(d, host, n);
    if (r) {
        braze_fail(err, errlen, BRAZE_ERR_ALLOC, "could not copy a %zu-byte weight to the GPU: %s", n, bzc_errstr(r));
        return NULL;
    }
    return (void *)(uintptr_t)d;
}

static void bzc_free(void *d) {
    if (d) bzc.MemFree((CUdeviceptr)(uintptr_t)d);
}

/* --- per calling thread: stream, scratch, staging, the call's first error ------------------ */
#define BZC_SLOTS 64
typedef struct { CUdeviceptr p; size_t n; } bzc_buf;
static _Thread_local struct {
    CUstream stream;
    bzc_buf arena, in[BZC_SLOTS], out[BZC_SLOTS], col; /* col: a convolution's im2col matrix */
    void *host_out[BZC_SLOTS];
    size_t out_bytes[BZC_SLOTS];
    int n_out;
    char error[512];
} bzc_t;

static void bzc_fail(const char *what, CUresult r) {
    if (!bzc_t.error[0]) snprintf(bzc_t.error, sizeof bzc_t.error, "%s: %s", what, bzc_errstr(r));
}

static char *bzc_grow(bzc_buf *b, size_t need) {
    if (need <= b->n && b->p) return (char *)(uintptr_t)b->p;
    if (b->p) bzc.MemFree(b->p);
    b->p = 0;
    b->n = 0;
    size_t n = (need + 4095) & ~(size_t)4095;
    CUresult r = bzc.MemAlloc(&b->p, n ? n : 4096);
    if (r) { bzc_fail("could not allocate GPU memory", r); b->p = 0; return NULL; }
    b->n = n;
    return (char *)(uintptr_t)b->p;
}

/* the start of a call: its stream, no error, no pending copies */
static int bzc_begin(char *err, int errlen) {
    if (bzc_init(err, errlen)) return 1;
    bzc_t.error[0] = 0;
    bzc_t.n_out = 0;
    CUresult r;
    if (!bzc_t.stream && (r = bzc.StreamCreate(&bzc_t.stream, 1 /* non-blocking */)))
        return braze_fail(err, errlen, BRAZE_ERR_INTERNAL, "could not create a CUDA stream: %s", bzc_errstr(r));
    return 0;
}

static char *braze_arena(size_t need) { return bzc_grow(&bzc_t.arena, need); }

static int bzc_is_device(const void *p) {
    unsigned int type = 0; /* CU_POINTER_ATTRIBUTE_MEMORY_TYPE: 2 is device memory */
    return p && bzc.PointerGetAttribute(&type, 2, (CUdeviceptr)(uintptr_t)p) == 0 && type == 2;
}

/* staging slot i of bufs (the device copy of a host input or output), grown to n bytes */
static char *bzc_stage(bzc_buf *bufs, int i, size_t n, const char *what) {
    if (i < BZC_SLOTS) return bzc_grow(&bufs[i], n);
    if (!bzc_t.error[0]) snprintf(bzc_t.error, sizeof bzc_t.error, "more than %d host %s", BZC_SLOTS, what);
    return NULL;
}

static char *bzc_input(int i, void *data, size_t n) {
    if (bzc_is_device(data)) return (char *)data;
    char *d = bzc_stage(bzc_t.in, i, n, "inputs");
    CUresult r;
    if (d && n && (r = bzc.MemcpyHtoDAsync((CUdeviceptr)(uintptr_t)d, data, n, bzc_t.stream)))
        bzc_fail("could not copy an input to the GPU", r);
    return d;
}

static char *bzc_output(int k, void *host, size_t n) {
    if (bzc_is_device(host)) return (char *)host;
    char *d = bzc_stage(bzc_t.out, k, n, "outputs");
    if (k >= BZC_SLOTS) return NULL;
    bzc_t.host_out[k] = host;
    bzc_t.out_bytes[k] = n;
    if (k + 1 > bzc_t.n_out) bzc_t.n_out = k + 1;
    return d;
}

static void bzc_copy(void *dst, const void *src, size_t n) {
    CUresult r;
    if (n && !bzc_t.error[0] &&
        (r = bzc.MemcpyDtoDAsync((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n, bzc_t.stream)))
        bzc_fail("could not copy on the GPU", r);
}

static void bzc_launch3(int k, unsigned gx, unsigned gy, unsigned gz, unsigned block, void **args) {
    if (bzc_t.error[0] || !gx || !gy || !gz) return;
    CUresult r = bzc.LaunchKernel(bzc.fn[k], gx, gy, gz, block, 1, 1, 0, bzc_t.stream, args, NULL);
    if (r) {
        char what[160];
        snprintf(what, sizeof what, "could not launch kernel %s", bzc_names[k]);
        bzc_fail(what, r);
    }
}

/* a grid-stride kernel over `total` iterations, each a thread's or (per_block) a block's:
 * 256 threads a block, at most 2^20 blocks */
static int bzc_launch(int k, int64_t total, int per_block, void **args) {
    if (total <= 0) return 0;
    int64_t blocks = per_block ? total : (total + 255) / 256;
    bzc_launch3(k, (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20)), 1, 1, 256, args);
    return 0;
}

/* the end of a call: copy the outputs back, wait, and report the call's first error */
static int bzc_finish(char *err, int errlen) {
    CUresult r;
    for (int k = 0; k < bzc_t.n_out && !bzc_t.error[0]; k++)
        if (bzc_t.host_out[k] && bzc_t.out_bytes[k] &&
            (r = bzc.MemcpyDtoHAsync(bzc_t.host_out[k], bzc_t.out[k].p, bzc_t.out_bytes[k], bzc_t.stream)))
            bzc_fail("could not copy an output from the GPU", r);
    if ((r = bzc.StreamSynchronize(bzc_t.stream))) bzc_fail("a kernel failed on the GPU", r);
    for (int k = 0; k < bzc_t.n_out; k++) bzc_t.host_out[k] = NULL;
    bzc_t.n_out = 0;
    if (bzc_t.error[0]) return braze_fail(err, errlen, BRAZE_ERR_INTERNAL, "%s", bzc_t.error);
    return 0;
}

/* --- GEMM and convolution: braze_dnnl.h's float32 calls on the GPU ------------------------ */
typedef struct braze_packed_b { const float *w; int64_t N, K; int transposed; } braze_packed_b;
typedef struct braze_packed_conv {
    const float *w;
    int64_t OC, IC, KH, KW, groups, sh, sw, ph, pw, dh, dw;
    int layout;
} braze_packed_conv;

static braze_packed_b *braze_pack_b_err(const float *W, int64_t N, int64_t K, int transposed, char *err, int errlen) {
    braze_packed_b *B = (braze_packed_b *)malloc(sizeof *B);
    if (!B) { braze_fail(err, errlen, BRAZE_ERR_ALLOC, "out of memory"); return NULL; }
    B->w = W; B->N = N; B->K = K; B->transposed = transposed;
    return B;
}
/* the host's call for a constant (braze_dnnl.h): the device weight is float32 and outlives B */
static braze_packed_b *braze_pack_b_const(const void *W, int w_dt, int dt, int64_t N, int64_t K, int transposed,
                                          char *err, int errlen) {
    if (w_dt || dt) {
        braze_fail(err, errlen, BRAZE_ERR_DTYPE, "braze_pack_b_const: a GEMM weight in a 16-bit type; the CUDA target runs float32 GEMMs: give the model float32 weights and precision=\"fp32\"");
        return NULL;
    }
    return braze_pack_b_err((const float *)W, N, K, transposed, err, errlen);
}
static void braze_free_packed_b(braze_packed_b *B) { free(B); }
static int braze_matmul_prepare(int64_t M, const braze_packed_b *B, int has_bias, int has_res, int act) {
    (void)M; (void)B; (void)has_bias; (void)has_res; (void)act;
    return 0;
}
static int braze_matmul_w_prepare(int64_t M, int64_t N, int64_t K, int t, int has_bias, int has_res, int act) {
    (void)M; (void)N; (void)K; (void)t; (void)has_bias; (void)has_res; (void)act;
    return 0;
}

#define BZC_GEMM 0 /* bzc_names[0] */
#define BZC_CONV 1
#define BZC_EPI 2
#define BZC_IM2COL 3
#define BZC_SCALE 4

/* the generated GEMM: any strides, the epilogue fused */
static void bzc_gemm_kernel(int64_t batch, int64_t M, int64_t N, int64_t K, const void *A, int64_t a_rs,
                            int64_t a_cs, int64_t a_bs, const void *B, int64_t b_rs, int64_t b_cs, int64_t b_bs,
                            void *C, int64_t c_bs, float alpha, const void *bias, const void *res, int act) {
    /* the grid's y (row tiles) and z (batch) stop at 65535: larger ones go in pieces */
    const int64_t rows = 65535 * 64, zmax = 65535;
    for (int64_t b0 = 0; b0 < batch; b0 += zmax)
        for (int64_t m0 = 0; m0 < M; m0 += rows) {
            int64_t m = M - m0 < rows ? M - m0 : rows, nb = batch - b0 < zmax ? batch - b0 : zmax;
            const float *a = (const float *)A + b0 * a_bs + m0 * a_rs, *b = (const float *)B + b0 * b_bs;
            float *c = (float *)C + b0 * c_bs + m0 * N;
            const float *r = res ? (const float *)res + b0 * c_bs + m0 * N : NULL;
            void *args[] = {&m, &N, &K, &a, &a_rs, &a_cs, &a_bs, &b, &b_rs, &b_cs, &b_bs, &c, &c_bs, &alpha, &bias,
                            &r, &act};
            if (N > 0)
                bzc_launch3(BZC_GEMM, (unsigned)((N + 63) / 64), (unsigned)((m + 63) / 64), (unsigned)nb, 256, args);
        }
}

/* per calling thread: its cuBLAS handle (bound to bzc_t.stream) and a scratch copy of a residual */
static _Thread_local struct {
    cublasHandle_t handle;
    CUstream stream; /* the stream the handle is bound to */
    int failed;      /* cublasCreate failed on this thread: bz_gemm from then on */
    bzc_buf res;
} bzc_bt;

static void bzc_blas_fail(const char *what, cublasStatus_t st) {
    static const char *const names[] = {
        "CUBLAS_STATUS_SUCCESS", "CUBLAS_STATUS_NOT_INITIALIZED", "", "CUBLAS_STATUS_ALLOC_FAILED", "", "", "",
        "CUBLAS_STATUS_INVALID_VALUE", "CUBLAS_STATUS_ARCH_MISMATCH", "", "", "CUBLAS_STATUS_MAPPING_ERROR", "",
        "CUBLAS_STATUS_EXECUTION_FAILED", "CUBLAS_STATUS_INTERNAL_ERROR", "CUBLAS_STATUS_NOT_SUPPORTED",
        "CUBLAS_STATUS_LICENSE_ERROR"};
    const char *s = bzc_blas.GetStatusString ? bzc_blas.GetStatusString(st) : NULL;
    if (!s || !*s) s = st >= 0 && st < (int)(sizeof names / sizeof *names) && *names[st] ? names[st] : "unknown status";
    if (!bzc_t.error[0])
        snprintf(bzc_t.error, sizeof bzc_t.error, "cuBLAS (%s): %s failed: %s (%d)", bzc_blas.lib, what, s, st);
}

/* this thread's handle on its stream; NULL: use bz_gemm (no cuBLAS, or it would not start here) */
static cublasHandle_t bzc_blas_handle(void) {
    if (!bzc_blas.on || bzc_bt.failed) return NULL;
    cublasStatus_t st;
    if (!bzc_bt.handle) {
        if (bzc_blas.Create(&bzc_bt.handle) || !bzc_bt.handle) {
            bzc_bt.handle = NULL;
            bzc_bt.failed = 1; /* e.g. a cuBLAS newer than the driver: the generated GEMM still runs */
            return NULL;
        }
        if ((st = bzc_blas.SetMathMode(bzc_bt.handle, BZC_CUBLAS_DEFAULT_MATH))) {
            bzc_blas_fail("cublasSetMathMode", st); /* this call fails; later ones run bz_gemm */
            bzc_bt.failed = 1;
            return NULL;
        }
        bzc_bt.stream = NULL;
    }
    if (bzc_bt.stream != bzc_t.stream) {
        if ((st = bzc_blas.SetStream(bzc_bt.handle, bzc_t.stream))) {
            bzc_blas_fail("cublasSetStream", st);
            return NULL;
        }
        bzc_bt.stream = bzc_t.stream;
    }
    return bzc_bt.handle;
}

/* an r x c operand X(i, j) = X[i*rs + j*cs] as cuBLAS's column-major op(X^T): X^T stored column-major is X
 * row-major (op N, ld = rs: needs cs == 1), X stored column-major is X transposed (op T, ld = cs: needs
 * rs == 1). A dim of 1 (or 0) makes its stride irrelevant, so either layout may fit; ld then is the
 * least cuBLAS takes. 0: neither fits (or ld overflows an int). */
static int bzc_blas_op(int64_t r, int64_t c, int64_t rs, int64_t cs, int *op, int *ld) {
    int64_t l;
    if ((cs == 1 || c <= 1) && (l = r <= 1 ? (c > 1 ? c : 1) : rs) >= (c > 1 ? c : 1)) *op = BZC_CUBLAS_OP_N;
    else if ((rs == 1 || r <= 1) && (l = c <= 1 ? (r > 1 ? r : 1) : cs) >= (r > 1 ? r : 1)) *op = BZC_CUBLAS_OP_T;
    else return 0;
    if (l > 0x7fffffff) return 0;
    *ld = (int)l;
    return 1;
}

/* C(b) = epilogue(alpha * A(b) @ B(b)), bz_gemm's contract (braze_cuda_lib.cuh): by cuBLAS where it is loaded
 * and the strides fit, else by bz_gemm.
 *
 * cuBLAS is column-major, and row-major C [M, N] (ld N) is column-major C^T [N, M], so it computes
 * C^T = B^T A^T: cublasSgemmStridedBatched(m = N, n = M, k = K, "A" = B with op/ld from bzc_blas_op(K, N, b_rs,
 * b_cs), "B" = A with op/ld from bzc_blas_op(M, K, a_rs, a_cs), ldc = N, strides b_bs / a_bs / c_bs).
 * The epilogue: res apart from C: beta 0, then bz_epilogue(bias, act, res). res == C (it holds the
 * residual): beta 1 gives AB + res, exact when the activation comes after the residual or there is
 * none (bz_epilogue then adds the bias and applies the activation: act(AB + res + bias), bz_gemm's
 * sum in another order); an activation before the residual needs res kept apart, so C is first copied
 * to a scratch buffer and read from there. bz_epilogue is skipped when there is nothing to apply. */
static void bzc_gemm(int64_t batch, int64_t M, int64_t N, int64_t K, const void *A, int64_t a_rs, int64_t a_cs,
                     int64_t a_bs, const void *B, int64_t b_rs, int64_t b_cs, int64_t b_bs, void *C, int64_t c_bs,
                     float alpha, const void *bias, const void *res, int act) {
    if (bzc_t.error[0] || batch <= 0 || M <= 0 || N <= 0) return;
    int opa, opb, lda, ldb;
    const int64_t imax = 0x7fffffff;
    cublasHandle_t h = NULL;
    if (K <= 0 || M > imax || N > imax || K > imax || (batch > 1 && (c_bs < M * N || a_bs < 0 || b_bs < 0)) ||
        !bzc_blas_op(K, N, b_rs, b_cs, &opb, &ldb) || !bzc_blas_op(M, K, a_rs, a_cs, &opa, &lda) ||
        !(h = bzc_blas_handle())) {
        if (!bzc_t.error[0]) bzc_gemm_kernel(batch, M, N, K, A, a_rs, a_cs, a_bs, B, b_rs, b_cs, b_bs, C, c_bs, alpha,
                                             bias, res, act);
        return;
    }
    const int act_fn = act & 0xff, after = (act & 0x100) != 0; /* BZ_ACT_AFTER_RESIDUAL */
    const int64_t span = (batch - 1) * c_bs + M * N;             /* C's floats */
    float beta = 0.0f;
    const void *eres = res;
    if (res && res == C) {
        if (!act_fn || after) {
            beta = 1.0f;
            eres = NULL;
        } else {
            char *s = bzc_grow(&bzc_bt.res, (size_t)span * sizeof(float));
            if (!s) return;
            bzc_copy(s, C, (size_t)span * sizeof(float));
            eres = s;
        }
    }
    const int64_t zmax = 65535; /* batches in pieces, as bz_gemm's grid */
    for (int64_t b0 = 0; b0 < batch && !bzc_t.error[0]; b0 += zmax) {
        int nb = (int)(batch - b0 < zmax ? batch - b0 : zmax);
        cublasStatus_t st = bzc_blas.SgemmStridedBatched(
            h, opb, opa, (int)N, (int)M, (int)K, &alpha, (const float *)B + b0 * b_bs, ldb, b_bs,
            (const float *)A + b0 * a_bs, lda, a_bs, &beta, (float *)C + b0 * c_bs, (int)N, c_bs, nb);
        if (st) bzc_blas_fail("cublasSgemmStridedBatched", st);
    }
    if (bias || eres || act_fn) {
        void *args[] = {&batch, &M, &N, &C, &c_bs, &bias, &eres, &act};
        bzc_launch(BZC_EPI, batch * M * N, 0, args);
    }
}

static int braze_matmul_w(int64_t M, int64_t N, int64_t K, const void *A, const void *W, int transposed,
                          const void *bias, const void *res, int act, void *C, char *err, int errlen) {
    (void)err; (void)errlen;
    bzc_gemm(1, M, N, K, A, K, 1, 0, W, transposed ? 1 : N, transposed ? K : 1, 0, C, 0, 1.0f, bias, res, act);
    return 0;
}

static int braze_matmul(int64_t M, int64_t N, int64_t K, const void *A, const braze_packed_b *B, const void *bias,
                        const void *res, int act, void *C, char *err, int errlen) {
    return braze_matmul_w(M, N, K, A, B->w, B->transposed, bias, res, act, C, err, errlen);
}

static int braze_batch_matmul_bcast(int nb, const int64_t *a_batch, const int64_t *b_batch, int64_t M, int64_t N,
                                    int64_t K, const float *A, int ta, const float *Bm, int tb, float alpha, float *C,
                                    char *err, int errlen) {
    (void)err; (void)errlen;
    /* the innermost batch dim is the launch's z (a broadcast side has stride 0); the others loop here */
    int64_t outer = 1;
    for (int i = 0; i + 1 < nb; i++) outer *= a_batch[i] > b_batch[i] ? a_batch[i] : b_batch[i];
    int64_t an = a_batch[nb - 1], bn = b_batch[nb - 1], cn = an > bn ? an : bn;
    for (int64_t o = 0; o < outer; o++) {
        int64_t ai = 0, bi = 0, rem = o;
        int64_t astride = an, bstride = bn;
        for (int i = nb - 2; i >= 0; i--) {
            int64_t c = a_batch[i] > b_batch[i] ? a_batch[i] : b_batch[i], x = rem % c;
            rem /= c;
            ai += (a_batch[i] == 1 ? 0 : x) * astride;
            bi += (b_batch[i] == 1 ? 0 : x) * bstride;
            astride *= a_batch[i];
            bstride *= b_batch[i];
        }
        bzc_gemm(cn, M, N, K, A + ai * M * K, ta ? 1 : K, ta ? M : 1, an == 1 ? 0 : M * K,
                 Bm + bi * K * N, tb ? 1 : N, tb ? K : 1, bn == 1 ? 0 : K * N, C + o * cn * M * N, M * N, alpha,
                 NULL, NULL, 0);
    }
    return 0;
}

static int braze_batch_matmul(int64_t batch, int64_t M, int64_t N, int64_t K, const float *A, int ta,
                              const float *Bm, int tb, float alpha, float *C, char *err, int errlen) {
    return braze_batch_matmul_bcast(1, &batch, &batch, M, N, K, A, ta, Bm, tb, alpha, C, err, errlen);
}

static braze_packed_conv *braze_conv_geometry(int64_t OC, int64_t IC, int64_t KH, int64_t KW, int64_t groups,
                                              int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t ph_end,
                                              int64_t pw_end, int64_t dh, int64_t dw, int layout, char *err,
                                              int errlen) {
    (void)ph_end; (void)pw_end; /* implied by the output size each call passes */
    if (layout & ~1) { /* OHWI weights (braze_dnnl.h's layout | 2): the plug-in gives this target none */
        braze_fail(err, errlen, BRAZE_ERR_INTERNAL, "conv layout %d: OIHW weights only on the GPU", layout);
        return NULL;
    }
    braze_packed_conv *P = (braze_packed_conv *)calloc(1, sizeof *P);
    if (!P) { braze_fail(err, errlen, BRAZE_ERR_ALLOC, "out of memory"); return NULL; }
    P->OC = OC; P->IC = IC; P->KH = KH; P->KW = KW; P->groups = groups; P->sh = sh; P->sw = sw;
    P->ph = ph; P->pw = pw; P->dh = dh; P->dw = dw; P->layout = layout;
    return P;
}
static braze_packed_conv *braze_pack_conv_weights(const float *W, int64_t OC, int64_t IC, int64_t KH, int64_t KW,
                                                  int64_t groups, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                                                  int64_t ph_end, int64_t pw_end, int64_t dh, int64_t dw, int layout,
                                                  char *err, int errlen) {
    braze_packed_conv *P = braze_conv_geometry(OC, IC, KH, KW, groups, sh, sw, ph, pw, ph_end, pw_end, dh, dw,
                                               layout, err, errlen);
    if (P) P->w = W;
    return P;
}
static void braze_free_packed_conv(braze_packed_conv *P) { free(P); }
static int braze_conv2d_prepare(int64_t N, int64_t H, int64_t W, const braze_packed_conv *P, int has_bias,
                                int has_res, int act) {
    (void)N; (void)H; (void)W; (void)P; (void)has_bias; (void)has_res; (void)act;
    return 0;
}

static int braze_conv2d_w(int64_t N, int64_t H, int64_t W, const void *X, const braze_packed_conv *P, const void *Wt,
                          const void *bias, const void *res, int act, int64_t OH, int64_t OW, void *Y, char *err,
                          int errlen) {
    (void)err; (void)errlen;
    int64_t C = P->IC, OC = P->OC, KH = P->KH, KW = P->KW, sh = P->sh, sw = P->sw, ph = P->ph, pw = P->pw;
    int64_t dh = P->dh, dw = P->dw, groups = P->groups;
    int nhwc = P->layout;
    if (nhwc && groups == 1 && N * OH * OW > 0 && OC > 0) {
        /* NHWC output rows [N*OH*OW, OC] = im2col(X) [rows, C*KH*KW] @ W^T, W's [OC, C, KH, KW] read as it is;
         * a 1x1 stride-1 unpadded conv needs no im2col (X is already that matrix) */
        int64_t K = C * KH * KW, rows = N * OH * OW;
        if (KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0 && OH == H && OW == W) {
            bzc_gemm(1, rows, OC, C, X, C, 1, 0, Wt, 1, C, 0, Y, 0, 1.0f, bias, res, act);
            return 0;
        }
        /* in pieces of at most 64 MiB of im2col matrix */
        int64_t chunk = ((int64_t)16 << 20) / (K > 0 ? K : 1);
        chunk = chunk < 1 ? 1 : chunk > rows ? rows : chunk;
        float *col = (float *)bzc_grow(&bzc_t.col, (size_t)(chunk * (K > 0 ? K : 1)) * sizeof(float));
        if (!col) return 0; /* recorded; the call reports it */
        for (int64_t m0 = 0; m0 < rows; m0 += chunk) {
            int64_t mc = rows - m0 < chunk ? rows - m0 : chunk;
            void *cargs[] = {&N, &C, &H, &W, &KH, &KW, &OH, &OW, &sh, &sw, &ph, &pw, &dh, &dw, &m0, &mc, &X, &col};
            bzc_launch(BZC_IM2COL, mc * K, 0, cargs);
            bzc_gemm(1, mc, OC, K, col, K, 1, 0, Wt, 1, K, 0, (float *)Y + m0 * OC, 0, 1.0f, bias,
                     res ? (const float *)res + m0 * OC : NULL, act);
        }
        return 0;
    }
    void *args[] = {&N, &C, &H, &W, &OC, &KH, &KW, &OH, &OW, &sh, &sw, &ph, &pw, &dh, &dw, &groups, &nhwc,
                    &X, &Wt, &bias, &res, &act, &Y};
    int64_t total = N * OC * OH * OW, blocks = (total + 255) / 256;
    if (total > 0) bzc_launch3(BZC_CONV, (unsigned)(blocks < 65535 * 8 ? blocks : 65535 * 8), 1, 1, 256, args);
    return 0;
}

static int braze_conv2d(int64_t N, int64_t H, int64_t W, const void *X, const braze_packed_conv *P, const void *bias,
                        const void *res, int act, int64_t OH, int64_t OW, void *Y, char *err, int errlen) {
    return braze_conv2d_w(N, H, W, X, P, P->w, bias, res, act, OH, OW, Y, err, errlen);
}

/* braze_dnnl.h's: act(conv2d(X, Wt) * scale + bias) + res (NHWC), the convolution first, then
 * bz_scale_epilogue over its result; a residual in Y's memory is copied apart first */
static int braze_conv2d_ws(int64_t N, int64_t H, int64_t W, const void *X, const braze_packed_conv *P, const void *Wt,
                           const void *scale, const void *bias, const void *res, int act, int64_t OH, int64_t OW,
                           void *Y, char *err, int errlen) {
    int64_t OC = P->OC, total = N * OH * OW * OC;
    if (!P->layout) {
        braze_fail(err, errlen, BRAZE_ERR_INTERNAL, "braze_conv2d_ws: a scaled convolution is NHWC");
        return 1;
    }
    if (res && res == Y && total > 0) {
        char *s = bzc_grow(&bzc_bt.res, (size_t)total * sizeof(float));
        if (!s) return 0; /* recorded; the call reports it */
        bzc_copy(s, Y, (size_t)total * sizeof(float));
        res = s;
    }
    if (braze_conv2d_w(N, H, W, X, P, Wt, NULL, NULL, 0, OH, OW, Y, err, errlen)) return 1;
    void *args[] = {&total, &OC, &Y, &scale, &bias, &res, &act};
    if (total > 0 && !bzc_t.error[0]) bzc_launch(BZC_SCALE, total, 0, args);
    return 0;
}

#endif
