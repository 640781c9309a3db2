/* fake_libcuda.cpp: a stand-in for the CUDA driver (libcuda.so.1), for tests on machines without a GPU.
 *
 * Implements the driver API entry points that braze_cuda_rt.h dlsyms, with their signatures:
 * - "device" memory is host memory (malloc, filled with 0xff bytes, a NaN for float, so a kernel that
 *   reads what nothing wrote shows it); every copy is a memcpy;
 * - cuPointerGetAttribute fails, so the runtime treats every caller's pointer as host memory;
 * - one device, compute capability 9.0; streams are dummies; copies and launches are synchronous;
 * - cuModuleLoadData ignores the image (cubin or PTX) and dlopens the shared library named by
 *   BRAZE_EMU_KERNELS: the model's .cu compiled with g++ over cuda_emu.h (tests/codegen/cuda_emu_build.py);
 *   where BRAZE_EMU_KERNELS is a directory, it opens DIR/<FNV-1a 64 of the image, 16 hex digits>.so, so
 *   that several models (a torch.compile graph's regions) each find their own kernels;
 * - cuModuleGetFunction(name) is that library's `bzemu_<name>` trampoline, which cuLaunchKernel calls as
 *   void (unsigned gx, unsigned gy, unsigned gz, unsigned bx, void **args);
 * - a launch checks that every non-NULL pointer argument points into a live allocation (the trampolines
 *   library's `bzemu_sig_<name>` string has a 'p' per pointer parameter): a host pointer handed to a kernel,
 *   which works here but faults on a GPU, fails the launch with CUDA_ERROR_ILLEGAL_ADDRESS (700);
 * - with BRAZE_FAKE_CUDA_LOG set to a file, each launch appends "launch <kernel> gx gy gz bx" to it, so a
 *   test sees which kernels ran.
 *
 * Build: g++ -std=c++17 -O1 -shared -fPIC -o fake_libcuda.so fake_libcuda.cpp -ldl -pthread
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <string>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;
typedef unsigned long long CUdeviceptr;

enum {
    FAKE_SUCCESS = 0,
    FAKE_INVALID_VALUE = 1,
    FAKE_OUT_OF_MEMORY = 2,
    FAKE_INVALID_IMAGE = 200,
    FAKE_NOT_FOUND = 500,
    FAKE_ILLEGAL_ADDRESS = 700,
};

typedef void (*bzemu_fn)(unsigned, unsigned, unsigned, unsigned, void **);

static std::mutex launch_mutex; /* cuda_emu.h runs one launch at a time per process */
static std::mutex state_mutex;  /* guards the maps below */
static std::map<uintptr_t, size_t> allocations; /* base -> size of each live cuMemAlloc */
static std::map<void *, std::pair<std::string, const char *>> functions; /* trampoline -> (name, signature) */
static int fake_context;        /* its address is the context handle */
static int fake_stream;

#define API extern "C" __attribute__((visibility("default")))

API CUresult cuInit(unsigned flags) { return flags == 0 ? FAKE_SUCCESS : FAKE_INVALID_VALUE; }

API CUresult cuDriverGetVersion(int *v) {
    if (!v) return FAKE_INVALID_VALUE;
    *v = 13000;
    return FAKE_SUCCESS;
}

/* the error cases' knobs: FAKE_CUDA_DEVICES (how many GPUs; default 1), FAKE_CUDA_CC (compute capability as
 * "80"; default 90), FAKE_CUDA_LOAD_ERROR (what cuModuleLoadData returns, e.g. 209: no binary for this GPU) */
static int fake_env(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

API CUresult cuDeviceGetCount(int *n) {
    if (!n) return FAKE_INVALID_VALUE;
    *n = fake_env("FAKE_CUDA_DEVICES", 1);
    return FAKE_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *d, int ordinal) {
    if (!d || ordinal != 0) return FAKE_INVALID_VALUE;
    *d = 0;
    return FAKE_SUCCESS;
}

API CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
    if (!v || d != 0) return FAKE_INVALID_VALUE;
    switch (attr) {
    case 75: *v = fake_env("FAKE_CUDA_CC", 90) / 10; return FAKE_SUCCESS; /* ..._COMPUTE_CAPABILITY_MAJOR */
    case 76: *v = fake_env("FAKE_CUDA_CC", 90) % 10; return FAKE_SUCCESS; /* ..._MINOR */
    default: *v = 0; return FAKE_SUCCESS;
    }
}

API CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
    if (!c || d != 0) return FAKE_INVALID_VALUE;
    *c = &fake_context;
    return FAKE_SUCCESS;
}

API CUresult cuCtxSetCurrent(CUcontext c) { return c == &fake_context || c == NULL ? FAKE_SUCCESS : FAKE_INVALID_VALUE; }

API CUresult cuCtxSynchronize(void) { return FAKE_SUCCESS; }

/* an image's length: a cubin's from its ELF header (the furthest of its tables and sections), PTX's up to
 * its NUL */
static size_t image_size(const unsigned char *p) {
    if (memcmp(p, "\177ELF", 4) != 0) return strlen((const char *)p);
    uint64_t shoff, phoff, end;
    uint16_t phent, phnum, shent, shnum;
    memcpy(&phoff, p + 0x20, 8); memcpy(&shoff, p + 0x28, 8);
    memcpy(&phent, p + 0x36, 2); memcpy(&phnum, p + 0x38, 2);
    memcpy(&shent, p + 0x3A, 2); memcpy(&shnum, p + 0x3C, 2);
    end = std::max(phoff + (uint64_t)phent * phnum, shoff + (uint64_t)shent * shnum);
    for (unsigned i = 0; i < shnum; ++i) {
        const unsigned char *sh = p + shoff + (uint64_t)i * shent;
        uint32_t type;
        uint64_t off, size;
        memcpy(&type, sh + 4, 4); memcpy(&off, sh + 0x18, 8); memcpy(&size, sh + 0x20, 8);
        if (type != 8) end = std::max(end, off + size); /* SHT_NOBITS takes no bytes */
    }
    return (size_t)end;
}

static uint64_t image_hash(const void *image) { /* FNV-1a 64 (cuda_emu_build.image_key) */
    const unsigned char *p = (const unsigned char *)image;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0, n = image_size(p); i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

API CUresult cuModuleLoadData(CUmodule *m, const void *image) {
    if (!m || !image) return FAKE_INVALID_VALUE;
    if (int e = fake_env("FAKE_CUDA_LOAD_ERROR", 0)) return (CUresult)e;
    const char *path = getenv("BRAZE_EMU_KERNELS");
    if (!path || !*path) {
        fprintf(stderr, "fake_libcuda: BRAZE_EMU_KERNELS is not set\n");
        return FAKE_INVALID_IMAGE;
    }
    std::string file = path;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        char name[32];
        snprintf(name, sizeof name, "/%016llx.so", (unsigned long long)image_hash(image));
        file += name;
    }
    void *h = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "fake_libcuda: %s\n", dlerror());
        return FAKE_INVALID_IMAGE;
    }
    *m = h;
    return FAKE_SUCCESS;
}

API CUresult cuModuleUnload(CUmodule m) { return m ? FAKE_SUCCESS : FAKE_INVALID_VALUE; }

API CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
    if (!f || !m || !name) return FAKE_INVALID_VALUE;
    std::string sym = std::string("bzemu_") + name;
    void *p = dlsym(m, sym.c_str());
    if (!p) return FAKE_NOT_FOUND;
    const char *sig = (const char *)dlsym(m, (std::string("bzemu_sig_") + name).c_str());
    {
        std::lock_guard<std::mutex> lock(state_mutex);
        functions[p] = {name, sig};
    }
    *f = p;
    return FAKE_SUCCESS;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n) {
    if (!d || n == 0) return FAKE_INVALID_VALUE; /* as the real one: 0 bytes is an error */
    void *p = malloc(n);
    if (!p) return FAKE_OUT_OF_MEMORY;
    memset(p, 0xff, n);
    {
        std::lock_guard<std::mutex> lock(state_mutex);
        allocations[(uintptr_t)p] = n;
    }
    *d = (CUdeviceptr)(uintptr_t)p;
    return FAKE_SUCCESS;
}

API CUresult cuMemFree_v2(CUdeviceptr d) {
    if (!d) return FAKE_SUCCESS;
    {
        std::lock_guard<std::mutex> lock(state_mutex);
        if (!allocations.erase((uintptr_t)d)) return FAKE_INVALID_VALUE; /* not an allocation's base */
    }
    free((void *)(uintptr_t)d);
    return FAKE_SUCCESS;
}

/* p lies in a live allocation (its end included: a zero-length view may sit there) */
static bool is_device(const void *p) {
    std::lock_guard<std::mutex> lock(state_mutex);
    auto it = allocations.upper_bound((uintptr_t)p);
    if (it == allocations.begin()) return false;
    --it;
    return (uintptr_t)p <= it->first + it->second;
}

static CUresult copy(void *dst, const void *src, size_t n) {
    if (n && (!dst || !src)) return FAKE_INVALID_VALUE;
    if (n) memmove(dst, src, n);
    return FAKE_SUCCESS;
}

API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
    return copy((void *)(uintptr_t)dst, src, n);
}
API CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
    return copy(dst, (const void *)(uintptr_t)src, n);
}
API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream) {
    return copy((void *)(uintptr_t)dst, src, n);
}
API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream) {
    return copy(dst, (const void *)(uintptr_t)src, n);
}
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream) {
    return copy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
}

API CUresult cuStreamCreate(CUstream *s, unsigned) {
    if (!s) return FAKE_INVALID_VALUE;
    *s = &fake_stream;
    return FAKE_SUCCESS;
}

API CUresult cuStreamSynchronize(CUstream) { return FAKE_SUCCESS; }

API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                            unsigned bz, unsigned smem, CUstream, void **args, void **extra) {
    if (!f || !gx || !gy || !gz || !bx || by != 1 || bz != 1 || bx > 1024 || gy > 65535 || gz > 65535 ||
        smem != 0 || extra != NULL)
        return FAKE_INVALID_VALUE; /* braze launches 1-D blocks with no dynamic shared memory */
    std::lock_guard<std::mutex> lock(launch_mutex);
    std::string name = "?";
    const char *sig = NULL;
    {
        std::lock_guard<std::mutex> slock(state_mutex);
        auto it = functions.find(f);
        if (it == functions.end()) return FAKE_INVALID_VALUE; /* not from cuModuleGetFunction */
        name = it->second.first;
        sig = it->second.second;
    }
    for (int i = 0; sig && sig[i]; i++) {
        if (sig[i] != 'p') continue;
        void *p = *(void **)args[i];
        if (p && !is_device(p)) {
            fprintf(stderr, "fake_libcuda: kernel %s: argument %d (%p) is not device memory\n", name.c_str(), i, p);
            return FAKE_ILLEGAL_ADDRESS;
        }
    }
    const char *log = getenv("BRAZE_FAKE_CUDA_LOG");
    if (log && *log) {
        if (FILE *out = fopen(log, "a")) {
            fprintf(out, "launch %s %u %u %u %u\n", name.c_str(), gx, gy, gz, bx);
            fclose(out);
        }
    }
    ((bzemu_fn)f)(gx, gy, gz, bx, args);
    return FAKE_SUCCESS;
}

API CUresult cuGetErrorString(CUresult r, const char **s) {
    if (!s) return FAKE_INVALID_VALUE;
    switch (r) {
    case FAKE_SUCCESS: *s = "no error (fake driver)"; break;
    case FAKE_INVALID_VALUE: *s = "invalid argument (fake driver)"; break;
    case FAKE_OUT_OF_MEMORY: *s = "out of memory (fake driver)"; break;
    case FAKE_INVALID_IMAGE: *s = "device kernel image is invalid (fake driver: BRAZE_EMU_KERNELS)"; break;
    case FAKE_NOT_FOUND: *s = "named symbol not found (fake driver: no bzemu_ trampoline)"; break;
    case FAKE_ILLEGAL_ADDRESS: *s = "an illegal memory access was encountered (fake driver: a kernel argument "
                                    "is not device memory)"; break;
    default: *s = "unknown error (fake driver)"; return FAKE_INVALID_VALUE;
    }
    return FAKE_SUCCESS;
}

/* every pointer is host memory: the runtime stages inputs and outputs, as for numpy arrays on a GPU */
API CUresult cuPointerGetAttribute(void *, int, CUdeviceptr) { return FAKE_INVALID_VALUE; }
