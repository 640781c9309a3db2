/* braze_dnnl_core.c: see braze_dnnl.h. Engine, per-thread streams, the primitive cache and
 * shared helpers. braze_dnnl_matmul.c and braze_dnnl_conv.c follow it in one translation
 * unit (onednn.helper_text). Needs only oneDNN's C API and pthreads; link with -ldnnl.
 *
 * One instance serves every model in the process (they link this library), so all state
 * here is process-wide: it is created once (pthread_once), the cache is under one mutex
 * and keyed per packed weight, and per-thread state is used by one call at a time. */
#define _GNU_SOURCE
#include "braze_dnnl.h"

#include <dlfcn.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "oneapi/dnnl/dnnl.h"
#include "oneapi/dnnl/dnnl_debug.h"

/* ------------------------------------------------------------------ errors */

static void set_err(char *err, int errlen, const char *fmt, ...) {
    if (!err || errlen <= 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, (size_t)errlen, fmt, ap);
    va_end(ap);
}

/* Evaluates a dnnl call; on failure writes "<call> failed: <status> (<context>)"
 * and jumps to the local `fail` label. `ctx` is a printf-formatted context. */
#define DN(call)                                                                  \
    do {                                                                          \
        dnnl_status_t st_ = (call);                                               \
        if (st_ != dnnl_success) {                                                \
            set_err(err, errlen, "braze_dnnl: %s failed: %s (%s)", #call,         \
                    dnnl_status2str(st_), ctx);                                   \
            goto fail;                                                            \
        }                                                                         \
    } while (0)

/* ------------------------------------------------------------------ engine */

static dnnl_engine_t g_engine = NULL;
static dnnl_status_t g_engine_status = dnnl_success;
static char g_engine_msg[512];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_runtime_m = 0; /* atomic: set by one model's caller while others run */

static pthread_key_t g_stream_key;
/* A calling thread's scratchpads: slot 0 for primitives and the small-M kernels, slot 1 for an
 * operand made for a call that runs on them (a convolution's columns: conv_gemm), slot 2 for a
 * live weight's padded copy (braze_matmul_w on AVX2, which conv_gemm may call), slots 3-5 for a
 * convolution backward's operands and result in the primitive's own layouts. */
#define SCRATCH_SLOTS 6
static pthread_key_t g_scratch_key[SCRATCH_SLOTS];

static void stream_dtor(void *s) {
    if (s) dnnl_stream_destroy((dnnl_stream_t)s);
}

/* A calling thread's scratchpad: [size_t capacity][pad to 64][bytes...], freed at thread exit. */
static void scratch_dtor(void *p) { free(p); }

static void engine_init_once(void) {
    g_engine_msg[0] = 0;
    int kerr = pthread_key_create(&g_stream_key, stream_dtor);
    for (int i = 0; i < SCRATCH_SLOTS && !kerr; i++) kerr = pthread_key_create(&g_scratch_key[i], scratch_dtor);
    if (kerr) {
        snprintf(g_engine_msg, sizeof g_engine_msg, "braze_dnnl: pthread_key_create failed: %s", strerror(kerr));
        return;
    }
    const char *rm = getenv("BRAZE_DNNL_RUNTIME_M");
    if (rm && rm[0] == '1') __atomic_store_n(&g_runtime_m, 1, __ATOMIC_RELAXED);
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_SYCL
    /* The SYCL CPU runtime finds its OpenCL CPU device through the ICD loader;
     * the pip wheels (intel-opencl-rt) put libintelocl.so next to libdnnl.so
     * but their vendors .icd file is not registered. Point the loader at it. */
    if (!getenv("OCL_ICD_FILENAMES")) {
        Dl_info info;
        if (dladdr((void *)&dnnl_engine_create, &info) && info.dli_fname) {
            char path[4096];
            snprintf(path, sizeof path, "%s", info.dli_fname);
            char *slash = strrchr(path, '/');
            if (slash) {
                snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "libintelocl.so");
                if (access(path, R_OK) == 0) setenv("OCL_ICD_FILENAMES", path, 0);
            }
        }
    }
#endif
    g_engine_status = dnnl_engine_create(&g_engine, dnnl_cpu, 0);
    if (g_engine_status != dnnl_success) {
        g_engine = NULL;
        snprintf(g_engine_msg, sizeof g_engine_msg,
                 "braze_dnnl: dnnl_engine_create(cpu) failed: %s (oneDNN runtime %s%s)",
                 dnnl_status2str(g_engine_status), braze_dnnl_runtime(),
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_SYCL
                 "; no SYCL CPU device: is intel-opencl-rt installed and "
                 "OCL_ICD_FILENAMES pointing at libintelocl.so?"
#else
                 ""
#endif
        );
    }
}

int braze_dnnl_init(char *err, int errlen) {
    pthread_once(&g_once, engine_init_once);
    if (!g_engine) {
        set_err(err, errlen, "%s", g_engine_msg);
        return 1;
    }
    return 0;
}

const char *braze_dnnl_runtime(void) {
#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_SYCL
#define BRAZE_RT_PREFIX "sycl+"
#else
#define BRAZE_RT_PREFIX ""
#endif
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
    return BRAZE_RT_PREFIX "omp";
#elif DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_TBB
    return BRAZE_RT_PREFIX "tbb";
#elif DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_SEQ
    return BRAZE_RT_PREFIX "seq";
#elif DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_THREADPOOL
    return BRAZE_RT_PREFIX "threadpool";
#else
    return BRAZE_RT_PREFIX "unknown";
#endif
}

void braze_dnnl_set_runtime_m(int on) {
    pthread_once(&g_once, engine_init_once);
    __atomic_store_n(&g_runtime_m, on ? 1 : 0, __ATOMIC_RELAXED);
}

int braze_dnnl_runtime_m(void) {
    pthread_once(&g_once, engine_init_once);
    return __atomic_load_n(&g_runtime_m, __ATOMIC_RELAXED);
}

/* One stream per calling thread (streams are not meant to be shared). */
static dnnl_stream_t get_stream(char *err, int errlen) {
    dnnl_stream_t s = (dnnl_stream_t)pthread_getspecific(g_stream_key);
    if (s) return s;
    dnnl_status_t st = dnnl_stream_create(&s, g_engine, dnnl_stream_default_flags);
    if (st != dnnl_success) {
        set_err(err, errlen, "braze_dnnl: dnnl_stream_create failed: %s", dnnl_status2str(st));
        return NULL;
    }
    pthread_setspecific(g_stream_key, s);
    return s;
}

/* ------------------------------------------------------------------ primitive cache */

/* A key is everything a primitive depends on: key[0] the kind (1 matmul, 2 batch matmul,
 * 3 conv, 4 matmul with run-time weights, 5 conv with run-time weights), key[1] the packed
 * weight's or conv geometry's owner id (unique in the process, never reused; 0 for batch
 * matmul and run-time-weight matmul, which hold no weights: their primitives are shared by
 * every model), then the shapes, transposes, alpha, epilogue flags with the dtypes
 * (BRAZE_TYPES, in `act`) and mode. Dense row-major, or the weight's own layout (fixed by its
 * owner). The last word is left to get_entry (the thread count). */
#define KEYLEN 16
typedef struct {
    int64_t key[KEYLEN];
    int used;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t wei_md;   /* weights md the primitive wants (owned) */
    dnnl_memory_desc_t scratch_md; /* the primitive's scratchpad (owned), or NULL if it needs none */
    void *wei_alt;               /* weights re-laid out for this primitive only, or NULL */
    void (*alt_release)(void *); /* what wei_alt holds besides its own memory, or NULL */
    const void *wei;             /* the weights to run with (conv; not owned unless == wei_alt) */
    dnnl_primitive_t reorder;    /* run-time weights: plain -> wei_md at each call, or NULL */
    dnnl_memory_desc_t reorder_scratch_md;
    int unfused;                 /* conv: the primitive applies no post-op; the helper does (conv_apart) */
} cache_entry;

/* power of two; open addressing; full -> no caching. One table for every model in the
 * process: sized for several models' weights times their distinct shapes. */
#define CACHE_CAP 16384
static cache_entry g_cache[CACHE_CAP];
static int g_cache_count = 0;
static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t g_created = 0, g_hits = 0;

void braze_dnnl_stats(int64_t *created, int64_t *hits) {
    pthread_mutex_lock(&g_cache_mu);
    if (created) *created = g_created;
    if (hits) *hits = g_hits;
    pthread_mutex_unlock(&g_cache_mu);
}

static uint64_t hash_key(const int64_t *k) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < KEYLEN; i++) {
        h ^= (uint64_t)k[i];
        h *= 1099511628211ull;
        h ^= h >> 29;
    }
    return h;
}

/* Lookup under the lock; entries are never removed while a packed weight is
 * alive, so a returned entry stays valid (removal only in *_free_packed_*). */
static cache_entry *cache_find(const int64_t *k) {
    uint64_t h = hash_key(k);
    for (int i = 0; i < CACHE_CAP; i++) {
        cache_entry *e = &g_cache[(h + (uint64_t)i) & (CACHE_CAP - 1)];
        if (!e->used) return NULL;
        if (e->used == 1 && memcmp(e->key, k, sizeof e->key) == 0) return e;
    }
    return NULL;
}

static cache_entry *cache_insert(const int64_t *k) {
    if (g_cache_count >= CACHE_CAP * 3 / 4) return NULL;
    uint64_t h = hash_key(k);
    for (int i = 0; i < CACHE_CAP; i++) {
        cache_entry *e = &g_cache[(h + (uint64_t)i) & (CACHE_CAP - 1)];
        if (e->used != 1) {
            memset(e, 0, sizeof *e);
            memcpy(e->key, k, sizeof e->key);
            e->used = 1;
            g_cache_count++;
            return e;
        }
    }
    return NULL;
}

static void entry_release(cache_entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    if (e->wei_md) dnnl_memory_desc_destroy(e->wei_md);
    if (e->scratch_md) dnnl_memory_desc_destroy(e->scratch_md);
    if (e->reorder) dnnl_primitive_destroy(e->reorder);
    if (e->reorder_scratch_md) dnnl_memory_desc_destroy(e->reorder_scratch_md);
    if (e->alt_release && e->wei_alt) e->alt_release(e->wei_alt);
    free(e->wei_alt);
    e->alt_release = NULL;
    e->prim = NULL;
    e->wei_md = NULL;
    e->scratch_md = NULL;
    e->reorder = NULL;
    e->reorder_scratch_md = NULL;
    e->wei_alt = NULL;
    e->wei = NULL;
}

/* Drops every entry whose key[1] (the owner id) is `owner` (tombstones keep probing valid),
 * then empties the tombstones that end a probe chain (one followed by an empty slot), so the
 * tombstones of models that come and go do not pile up in the shared table. No entry moves:
 * other threads keep using theirs outside the lock. */
static void cache_drop_owner(int64_t owner) {
    pthread_mutex_lock(&g_cache_mu);
    int empty = -1;
    for (int i = 0; i < CACHE_CAP; i++) {
        cache_entry *e = &g_cache[i];
        if (e->used == 1 && e->key[1] == owner) {
            entry_release(e);
            e->used = 2; /* tombstone */
            g_cache_count--;
        }
        if (e->used == 0) empty = i;
    }
    for (int j = 1; empty >= 0 && j < CACHE_CAP; j++) { /* backwards from an empty slot */
        int i = (empty - j) & (CACHE_CAP - 1);
        if (g_cache[i].used == 2 && g_cache[(i + 1) & (CACHE_CAP - 1)].used == 0) g_cache[i].used = 0;
    }
    pthread_mutex_unlock(&g_cache_mu);
}

static int64_t g_next_owner = 1; /* under g_cache_mu */

/* ------------------------------------------------------------------ helpers */

static void *aligned_alloc64(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) return NULL;
    return p;
}

/* A packed weight's buffer, read whole at every call of a weight-bound GEMM: from 4 MB it is
 * 2 MB-aligned and its whole 2 MB blocks are advised huge pages (nothing added but address space;
 * a kernel with THP off ignores it). BERT-base's live copies at batch 1, seq 16 on 4 KB pages ran
 * 1.07-1.10x the frozen time, 1.02-1.06x on huge pages (docs/gemm.md). */
static void *weight_alloc(size_t n) {
    const size_t H = (size_t)2 << 20;
    if (n < 2 * H) return aligned_alloc64(n);
    void *p = NULL;
    if (posix_memalign(&p, H, n) != 0) return NULL;
#if defined(MADV_HUGEPAGE)
    madvise(p, n & ~(H - 1), MADV_HUGEPAGE);
#endif
    return p;
}

/* This thread's scratchpad `slot`, at least n bytes (grow-only; freed at thread exit), or NULL.
 * Primitives run with user-managed scratchpads from slot 0: the wheel is built without
 * DNNL_ENABLE_CONCURRENT_EXEC, and library-managed scratchpads are not safe when two
 * threads execute primitives at once (wrong results and crashes under concurrent calls). */
static void *thread_scratch_at(int slot, size_t n) {
    char *p = (char *)pthread_getspecific(g_scratch_key[slot]);
    if (p && *(size_t *)p >= n) return p + 64;
    free(p);
    size_t cap = (n + 4095) & ~(size_t)4095;
    p = (char *)aligned_alloc64(cap + 64);
    if (p) *(size_t *)p = cap;
    pthread_setspecific(g_scratch_key[slot], p);
    return p ? p + 64 : NULL;
}

static void *thread_scratch(size_t n) { return thread_scratch_at(0, n); }

/* The scratchpad md that pd asks for, cloned into *md (NULL when it needs none). */
static dnnl_status_t clone_scratch_md(const_dnnl_primitive_desc_t pd, dnnl_memory_desc_t *md) {
    *md = NULL;
    const_dnnl_memory_desc_t q = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    if (!q || dnnl_memory_desc_get_size(q) == 0) return dnnl_success;
    return dnnl_memory_desc_clone(md, q);
}

/* Executes prim on the calling thread's stream and waits; args has room for one more
 * (the scratchpad, from thread_scratch, when scratch_md is not NULL). */
static int run_primitive(const_dnnl_primitive_t prim, const_dnnl_memory_desc_t scratch_md, dnnl_stream_t s,
                         int n, dnnl_exec_arg_t *args, const char *ctx, char *err, int errlen) {
    dnnl_memory_t ms = NULL;
    int rc = 1;
    if (scratch_md) {
        size_t sz = dnnl_memory_desc_get_size(scratch_md);
        void *buf = thread_scratch(sz);
        if (!buf) {
            set_err(err, errlen, "braze_dnnl: out of memory (a %zu-byte scratchpad; %s)", sz, ctx);
            return 1;
        }
        DN(dnnl_memory_create(&ms, scratch_md, g_engine, buf));
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, ms};
    }
    DN(dnnl_primitive_execute(prim, s, n, args));
    DN(dnnl_stream_wait(s));
    rc = 0;
fail:
    if (ms) dnnl_memory_destroy(ms);
    return rc;
}

/* An attribute with a user-managed scratchpad (see thread_scratch). */
static dnnl_status_t make_user_scratch_attr(dnnl_primitive_attr_t *attr) {
    dnnl_status_t st = dnnl_primitive_attr_create(attr);
    if (st == dnnl_success) st = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user);
    return st;
}

/* A reorder primitive from `from` to `to` with a user scratchpad (its md in *scratch, NULL if it
 * needs none), or *re = NULL when the two are one layout. */
static dnnl_status_t make_reorder(const_dnnl_memory_desc_t from, const_dnnl_memory_desc_t to, dnnl_primitive_t *re,
                                  dnnl_memory_desc_t *scratch) {
    *re = NULL;
    *scratch = NULL;
    if (dnnl_memory_desc_equal(from, to)) return dnnl_success;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = make_user_scratch_attr(&attr);
    if (st == dnnl_success) st = dnnl_reorder_primitive_desc_create(&pd, from, g_engine, to, g_engine, attr);
    if (st == dnnl_success) st = clone_scratch_md(pd, scratch);
    if (st == dnnl_success) st = dnnl_primitive_create(re, pd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return st;
}

/* Runs reorder `re` (from make_reorder) from (from_md, from) into (to_md, to) on stream s. */
static int run_reorder(const_dnnl_primitive_t re, const_dnnl_memory_desc_t scratch, dnnl_stream_t s,
                       const_dnnl_memory_desc_t from_md, const void *from, const_dnnl_memory_desc_t to_md, void *to,
                       const char *ctx, char *err, int errlen) {
    dnnl_memory_t a = NULL, b = NULL;
    int rc = 1;
    DN(dnnl_memory_create(&a, from_md, g_engine, (void *)from));
    DN(dnnl_memory_create(&b, to_md, g_engine, to));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, a}, {DNNL_ARG_TO, b}};
    rc = run_primitive(re, scratch, s, 2, args, ctx, err, errlen);
fail:
    if (a) dnnl_memory_destroy(a);
    if (b) dnnl_memory_destroy(b);
    return rc;
}

/* Reorders `src` (md, data) into `dst` (md, data), with a primitive made for this one call. */
static int do_reorder(const_dnnl_memory_desc_t smd, const void *sdata, const_dnnl_memory_desc_t dmd,
                      void *ddata, const char *ctx, char *err, int errlen) {
    dnnl_primitive_t r = NULL;
    dnnl_memory_desc_t scratch = NULL;
    int rc = 1;
    dnnl_stream_t s = get_stream(err, errlen);
    if (!s) return 1;
    DN(make_reorder(smd, dmd, &r, &scratch));
    if (!r) { /* one layout */
        memcpy(ddata, sdata, dnnl_memory_desc_get_size(smd));
        return 0;
    }
    rc = run_reorder(r, scratch, s, smd, sdata, dmd, ddata, ctx, err, errlen);
fail:
    if (r) dnnl_primitive_destroy(r);
    if (scratch) dnnl_memory_desc_destroy(scratch);
    return rc;
}

/* ------------------------------------------------------------------ dtypes (BRAZE_TYPES) */

#define SRC_DT(act) (((act) >> 12) & 3)
#define DST_DT(act) (((act) >> 14) & 3)
#define BIAS_DT(act) (((act) >> 16) & 3)

static dnnl_data_type_t dt_of(int code) {
    return code == BRAZE_DT_BF16 ? dnnl_bf16 : code == BRAZE_DT_F16 ? dnnl_f16 : dnnl_f32;
}

static size_t dt_size(int code) { return code == BRAZE_DT_F32 ? 4 : 2; }

static const char *dt_name(int code) {
    return code == BRAZE_DT_BF16 ? "bf16" : code == BRAZE_DT_F16 ? "f16" : code == BRAZE_DT_F32 ? "f32" : "?";
}

/* element i of p (dtype code) as float32, and v stored there rounded to nearest even; for the
 * few scalar epilogues oneDNN cannot run (a product over K = 0) */
static float dt_load(const void *p, int64_t i, int code) {
    if (code == BRAZE_DT_F32) return ((const float *)p)[i];
    if (code == BRAZE_DT_F16) return (float)((const _Float16 *)p)[i];
    union { uint32_t u; float f; } x = {(uint32_t)((const uint16_t *)p)[i] << 16};
    return x.f;
}

static void dt_store(void *p, int64_t i, int code, float v) {
    if (code == BRAZE_DT_F32) {
        ((float *)p)[i] = v;
    } else if (code == BRAZE_DT_F16) {
        ((_Float16 *)p)[i] = (_Float16)v;
    } else {
        union { float f; uint32_t u; } x = {v};
        uint32_t u = x.u;
        ((uint16_t *)p)[i] = (u & 0x7fffffffu) > 0x7f800000u ? (uint16_t)((u >> 16) | 0x40)
                                                            : (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
    }
}

/* Nanoseconds from an arbitrary start: the tuner's timing loops (braze_time_matmul, braze_time_conv2d). */
static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int eager_act(int act) {
    return (act & 0xff) == BRAZE_ACT_RELU_EAGER || (act & 0xff) == BRAZE_ACT_RELU6_EAGER;
}

/* eager's relu and relu6: NaN and -0 kept */
static inline float eager_relu(int act, float v) {
    if ((act & 0xff) == BRAZE_ACT_RELU6_EAGER) v = v > 6.f ? 6.f : v;
    return v < 0.f ? 0.f : v;
}

/* eager's relu and relu6 on a 16-bit value's bits, as eager_relu on its value: a negative number
 * (not -0, not NaN) becomes +0, and for relu6 a number above 6 becomes 6. Both 16-bit formats order
 * magnitudes up to inf as integers; inf is 0x7f80 (bfloat16) or 0x7c00 (float16), 6 is 0x40c0 or
 * 0x4600. Integer lanes: 32 to a vector, with no widening and no rounding. */
static inline uint16_t eager_relu16(int relu6, uint16_t u, uint16_t inf, uint16_t six) {
    uint16_t a = u & 0x7fffu;
    if (relu6 && u > six && u <= inf) u = six; /* u > six: positive too */
    return (u & 0x8000u) && a != 0 && a <= inf ? 0 : u;
}

/* the n elements of C (act's DST_DT: 16 bits) through eager_relu16, in the calling thread */
static void eager_relu16_span(int act, uint16_t *C, int64_t n) {
    int relu6 = (act & 0xff) == BRAZE_ACT_RELU6_EAGER, f16 = DST_DT(act) == BRAZE_DT_F16;
    uint16_t inf = f16 ? 0x7c00u : 0x7f80u, six = f16 ? 0x4600u : 0x40c0u;
    for (int64_t i = 0; i < n; i++) C[i] = eager_relu16(relu6, C[i], inf, six);
}

/* An eager activation over the n elements of C (its dtype: act's DST_DT) after oneDNN's
 * primitive wrote them (dense: a matmul's M x N, a convolution's output), in the calling
 * thread's team, as braze's own kernel after the product would have: after the residual, and
 * for a 16-bit C after the rounding (passes/offload.py absorbs it only after a cast). */
static void braze_after_act(int act, void *C, int64_t n) {
    if (!eager_act(act) || n <= 0) return;
    if (DST_DT(act) != BRAZE_DT_F32) {
#pragma omp parallel for schedule(static) if (n >= 131072)
        for (int64_t i = 0; i < n; i += 4096) eager_relu16_span(act, (uint16_t *)C + i, n - i < 4096 ? n - i : 4096);
        return;
    }
    float *c = (float *)C;
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; i++) c[i] = eager_relu(act, c[i]);
}

/* An eager activation is applied after everything oneDNN's primitive did, so a residual only
 * before it: 0, or 1 with err set (saying so, in ctx) */
static int eager_act_refused(int act, int has_res, const char *ctx, char *err, int errlen) {
    if (!eager_act(act) || !has_res || (act & BRAZE_ACT_AFTER_RESIDUAL)) return 0;
    set_err(err, errlen, "braze_dnnl: activation %d (eager relu/relu6) is applied after the product, so it cannot "
            "come before a residual add; pass BRAZE_ACT_AFTER_RESIDUAL or add the residual after the call (%s)",
            act, ctx);
    return 1;
}

/* 1: an oneDNN eltwise post-op (alg, alpha); 0: none (no activation, or one braze applies after
 * the primitive: eager_act, in any dtype); -1: an act it cannot take */
static int act_alg(int act, dnnl_alg_kind_t *alg, float *alpha) {
    *alpha = 0.f;
    if (act & ~(BRAZE_ACT_AFTER_RESIDUAL | 0xff | BRAZE_TYPES_MASK)) return -1;
    if (SRC_DT(act) == 3 || DST_DT(act) == 3 || BIAS_DT(act) == 3) return -1;
    if (eager_act(act)) return 0;
    switch (act & 0xff) {
    case BRAZE_ACT_NONE: return 0;
    case BRAZE_ACT_RELU: *alg = dnnl_eltwise_relu; return 1;
    case BRAZE_ACT_GELU_ERF: *alg = dnnl_eltwise_gelu_erf; return 1;
    case BRAZE_ACT_GELU_TANH: *alg = dnnl_eltwise_gelu_tanh; return 1;
    case BRAZE_ACT_SILU: *alg = dnnl_eltwise_swish; *alpha = 1.f; return 1;
    case BRAZE_ACT_SIGMOID: *alg = dnnl_eltwise_logistic; return 1;
    case BRAZE_ACT_TANH: *alg = dnnl_eltwise_tanh; return 1;
    default: return -1;
    }
}

/* How a matmul takes its residual (the has_res of its key and its prepare call): none, a tensor
 * of its own (a binary-add post-op), or the output itself (RES_IN_C: a sum post-op, which adds
 * what C holds before the product is written). A binary add reading the C it writes gave wrong
 * results on AVX2, where oneDNN's GEMM writes partial sums into C before the post-ops run. */
enum { RES_NONE = 0, RES_OWN = 1, RES_IN_C = 2 };
static int res_kind(const void *residual, const void *C) {
    return !residual ? RES_NONE : residual == C ? RES_IN_C : RES_OWN;
}

/* Index of the binary-add post-op: after the eltwise unless the activation
 * comes after the residual (or there is none). */
static int residual_post_op_index(int act) {
    return ((act & BRAZE_ACT_AFTER_RESIDUAL) || (act & 0xff) == BRAZE_ACT_NONE) ? 0 : 1;
}

/* Post-ops: eltwise(act) then binary add(residual md); with
 * BRAZE_ACT_AFTER_RESIDUAL, binary add then eltwise. */
/* make_attr_ex, with first n_chan binary post-ops on a per-channel vector chan_md: a multiply
 * (1 or 2) and an add (2) */
static dnnl_status_t make_attr_chan(dnnl_primitive_attr_t *attr, int act, const_dnnl_memory_desc_t res_md,
                                    float out_scale_linear, int res_as_sum, const_dnnl_memory_desc_t chan_md,
                                    int n_chan) {
    dnnl_post_ops_t po = NULL;
    dnnl_status_t st = make_user_scratch_attr(attr);
    if (st != dnnl_success) return st;
    st = dnnl_post_ops_create(&po);
    if (st != dnnl_success) return st;
    if (n_chan >= 1) st = dnnl_post_ops_append_binary(po, dnnl_binary_mul, chan_md);
    if (st == dnnl_success && n_chan >= 2) st = dnnl_post_ops_append_binary(po, dnnl_binary_add, chan_md);
    if (st == dnnl_success && out_scale_linear != 1.f)
        st = dnnl_post_ops_append_eltwise(po, dnnl_eltwise_linear, out_scale_linear, 0.f);
    dnnl_alg_kind_t alg;
    float alpha;
    int late = (act & BRAZE_ACT_AFTER_RESIDUAL) != 0;
    if (st == dnnl_success && res_md && late)
        st = res_as_sum ? dnnl_post_ops_append_sum(po, 1.f, 0, dnnl_data_type_undef)
                        : dnnl_post_ops_append_binary(po, dnnl_binary_add, res_md);
    if (st == dnnl_success && act_alg(act, &alg, &alpha) == 1)
        st = dnnl_post_ops_append_eltwise(po, alg, alpha, 0.f);
    if (st == dnnl_success && res_md && !late)
        st = res_as_sum ? dnnl_post_ops_append_sum(po, 1.f, 0, dnnl_data_type_undef)
                        : dnnl_post_ops_append_binary(po, dnnl_binary_add, res_md);
    if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(*attr, po);
    dnnl_post_ops_destroy(po);
    return st;
}

static dnnl_status_t make_attr_ex(dnnl_primitive_attr_t *attr, int act, const_dnnl_memory_desc_t res_md,
                                  float out_scale_linear, int res_as_sum) {
    return make_attr_chan(attr, act, res_md, out_scale_linear, res_as_sum, NULL, 0);
}

static dnnl_status_t make_attr(dnnl_primitive_attr_t *attr, int act, const_dnnl_memory_desc_t res_md,
                               float out_scale_linear) {
    return make_attr_ex(attr, act, res_md, out_scale_linear, 0);
}

/* Finds the entry for key k or creates it with make(e, arg), outside the lock: the first
 * call for a shape pays the creation, and two threads creating different entries do not
 * wait for each other. If the table is full, the entry is built in *tmp and the caller
 * must release it. */
typedef int (*make_fn)(cache_entry *e, void *arg, char *err, int errlen);

/* What braze_*_prepare return: 0 when the entry is in the cache (a full cache's temporary
 * one is released: the call will create it again), 1 when it could not be made. */
static int prepared(const cache_entry *e, cache_entry *tmp, const int *is_tmp) {
    if (*is_tmp) entry_release(tmp);
    return e == NULL;
}

static cache_entry *get_entry(const int64_t *key, make_fn make, void *arg, cache_entry *tmp,
                              int *is_tmp, char *err, int errlen) {
    *is_tmp = 0;
    /* a primitive runs with the team it was created for (oneDNN fixes its thread count at
     * creation), and a call's team shrinks while the cores are shared (braze_team.h): the last
     * word of every key is the calling thread's team */
    int64_t k[KEYLEN];
    memcpy(k, key, sizeof k);
    k[KEYLEN - 1] = omp_get_max_threads();
    pthread_mutex_lock(&g_cache_mu);
    cache_entry *e = cache_find(k);
    if (e) {
        g_hits++;
        pthread_mutex_unlock(&g_cache_mu);
        return e;
    }
    pthread_mutex_unlock(&g_cache_mu);
    /* create outside the lock, so that a new shape's primitives can be created in parallel
     * (braze_*_prepare); then insert, unless another thread was first */
    cache_entry made;
    memset(&made, 0, sizeof made);
    if (make(&made, arg, err, errlen)) {
        entry_release(&made);
        return NULL;
    }
    pthread_mutex_lock(&g_cache_mu);
    g_created++;
    e = cache_find(k);
    if (e) {
        pthread_mutex_unlock(&g_cache_mu);
        entry_release(&made);
        return e;
    }
    e = cache_insert(k);
    if (!e) { /* the table is full: the caller uses this primitive once and releases it */
        pthread_mutex_unlock(&g_cache_mu);
        *tmp = made;
        *is_tmp = 1;
        return tmp;
    }
    memcpy(made.key, e->key, sizeof made.key);
    made.used = 1;
    *e = made;
    pthread_mutex_unlock(&g_cache_mu);
    return e;
}
