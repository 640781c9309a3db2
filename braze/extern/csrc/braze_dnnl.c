/* braze_dnnl.c: see braze_dnnl.h. Self-contained: needs only oneDNN's C API
 * (dnnl.h, dnnl_debug.h) and pthreads; link with -ldnnl. */
#define _GNU_SOURCE
#include "braze_dnnl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
static int g_runtime_m = 0;

static pthread_key_t g_stream_key;

static void stream_dtor(void *s) {
    if (s) dnnl_stream_destroy((dnnl_stream_t)s);
}

static void engine_init_once(void) {
    g_engine_msg[0] = 0;
    pthread_key_create(&g_stream_key, stream_dtor);
    const char *rm = getenv("BRAZE_DNNL_RUNTIME_M");
    if (rm && rm[0] == '1') g_runtime_m = 1;
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
    g_runtime_m = on ? 1 : 0;
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

#define KEYLEN 16
typedef struct {
    int64_t key[KEYLEN];
    int used;
    dnnl_primitive_t prim;
    dnnl_memory_desc_t wei_md;   /* weights md the primitive wants (owned) */
    void *wei_alt;               /* weights re-laid out for this primitive, or NULL */
} cache_entry;

#define CACHE_CAP 4096 /* power of two; open addressing; full -> no caching */
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
    free(e->wei_alt);
    e->prim = NULL;
    e->wei_md = NULL;
    e->wei_alt = NULL;
}

/* Drops every entry whose key[1] (the owner id) is `owner` (tombstones keep probing valid). */
static void cache_drop_owner(int64_t owner) {
    pthread_mutex_lock(&g_cache_mu);
    for (int i = 0; i < CACHE_CAP; i++) {
        cache_entry *e = &g_cache[i];
        if (e->used == 1 && e->key[1] == owner) {
            entry_release(e);
            e->used = 2; /* tombstone */
            g_cache_count--;
        }
    }
    pthread_mutex_unlock(&g_cache_mu);
}

static int64_t g_next_owner = 1;

/* ------------------------------------------------------------------ helpers */

static void *aligned_alloc64(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) return NULL;
    return p;
}

/* Reorders `src` (md, data) into `dst` (md, data). */
static int do_reorder(const_dnnl_memory_desc_t smd, const void *sdata, const_dnnl_memory_desc_t dmd,
                      void *ddata, const char *ctx, char *err, int errlen) {
    dnnl_primitive_desc_t rpd = NULL;
    dnnl_primitive_t r = NULL;
    dnnl_memory_t ms = NULL, md = NULL;
    int rc = 1;
    dnnl_stream_t s = get_stream(err, errlen);
    if (!s) return 1;
    DN(dnnl_reorder_primitive_desc_create(&rpd, smd, g_engine, dmd, g_engine, NULL));
    DN(dnnl_primitive_create(&r, rpd));
    DN(dnnl_memory_create(&ms, smd, g_engine, (void *)sdata));
    DN(dnnl_memory_create(&md, dmd, g_engine, ddata));
    {
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, ms}, {DNNL_ARG_TO, md}};
        DN(dnnl_primitive_execute(r, s, 2, args));
        DN(dnnl_stream_wait(s));
    }
    rc = 0;
fail:
    if (ms) dnnl_memory_destroy(ms);
    if (md) dnnl_memory_destroy(md);
    if (r) dnnl_primitive_destroy(r);
    if (rpd) dnnl_primitive_desc_destroy(rpd);
    return rc;
}

static int act_alg(int act, dnnl_alg_kind_t *alg, float *alpha) {
    *alpha = 0.f;
    if (act & ~(BRAZE_ACT_AFTER_RESIDUAL | 0xff)) return -1;
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

/* Index of the binary-add post-op: after the eltwise unless the activation
 * comes after the residual (or there is none). */
static int residual_post_op_index(int act) {
    return ((act & BRAZE_ACT_AFTER_RESIDUAL) || (act & 0xff) == BRAZE_ACT_NONE) ? 0 : 1;
}

/* Post-ops: eltwise(act) then binary add(residual md); with
 * BRAZE_ACT_AFTER_RESIDUAL, binary add then eltwise. */
static dnnl_status_t make_attr_ex(dnnl_primitive_attr_t *attr, int act, const_dnnl_memory_desc_t res_md,
                                  float out_scale_linear, int res_as_sum) {
    dnnl_post_ops_t po = NULL;
    dnnl_status_t st = dnnl_primitive_attr_create(attr);
    if (st != dnnl_success) return st;
    st = dnnl_post_ops_create(&po);
    if (st != dnnl_success) return st;
    if (out_scale_linear != 1.f)
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

static dnnl_status_t make_attr(dnnl_primitive_attr_t *attr, int act, const_dnnl_memory_desc_t res_md,
                               float out_scale_linear) {
    return make_attr_ex(attr, act, res_md, out_scale_linear, 0);
}

/* ------------------------------------------------------------------ GEMM weights */

struct braze_packed_b {
    int64_t N, K, owner;
    dnnl_memory_desc_t md; /* layout of data (a K x N weights md) */
    void *data;
    /* runtime-M mode: one primitive per (bias?, residual?, act) combination */
};

#define PACK_M_HINT 128 /* representative M for picking the packed layout */
#define SMALL_M 2       /* at or below: plain weights, runtime M (see braze_matmul) */

braze_packed_b *braze_pack_b_err(const float *W, int64_t N, int64_t K, int transposed_layout,
                                 char *err, int errlen) {
    char ctx[160];
    snprintf(ctx, sizeof ctx, "braze_pack_b N=%lld K=%lld transposed=%d", (long long)N,
             (long long)K, transposed_layout);
    braze_packed_b *B = NULL;
    dnnl_memory_desc_t plain = NULL, any = NULL, src = NULL, dst = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (braze_dnnl_init(err, errlen)) return NULL;
    if (N <= 0 || K <= 0 || !W) {
        set_err(err, errlen, "braze_dnnl: invalid arguments (%s, W=%p)", ctx, (const void *)W);
        return NULL;
    }
    B = (braze_packed_b *)calloc(1, sizeof *B);
    if (!B) goto oom;
    B->N = N;
    B->K = K;
    {
        dnnl_dims_t wd = {K, N}, sd = {PACK_M_HINT, K}, dd = {PACK_M_HINT, N};
        DN(dnnl_memory_desc_create_with_tag(&plain, 2, wd, dnnl_f32,
                                            transposed_layout ? dnnl_ba : dnnl_ab));
        DN(dnnl_memory_desc_create_with_tag(&any, 2, wd, dnnl_f32, dnnl_format_tag_any));
        DN(dnnl_memory_desc_create_with_tag(&src, 2, sd, dnnl_f32, dnnl_ab));
        DN(dnnl_memory_desc_create_with_tag(&dst, 2, dd, dnnl_f32, dnnl_ab));
        DN(dnnl_matmul_primitive_desc_create(&pd, g_engine, src, any, NULL, dst, NULL));
        DN(dnnl_memory_desc_clone(&B->md, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0)));
        size_t sz = dnnl_memory_desc_get_size(B->md);
        B->data = aligned_alloc64(sz);
        if (!B->data) goto oom;
        if (do_reorder(plain, W, B->md, B->data, ctx, err, errlen)) goto fail;
    }
    pthread_mutex_lock(&g_cache_mu);
    B->owner = g_next_owner++;
    pthread_mutex_unlock(&g_cache_mu);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_desc_destroy(plain);
    dnnl_memory_desc_destroy(any);
    dnnl_memory_desc_destroy(src);
    dnnl_memory_desc_destroy(dst);
    return B;
oom:
    set_err(err, errlen, "braze_dnnl: out of memory (%s)", ctx);
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (plain) dnnl_memory_desc_destroy(plain);
    if (any) dnnl_memory_desc_destroy(any);
    if (src) dnnl_memory_desc_destroy(src);
    if (dst) dnnl_memory_desc_destroy(dst);
    if (B) braze_free_packed_b(B);
    return NULL;
}

braze_packed_b *braze_pack_b(const float *W, int64_t N, int64_t K, int transposed_layout) {
    return braze_pack_b_err(W, N, K, transposed_layout, NULL, 0);
}

void braze_free_packed_b(braze_packed_b *B) {
    if (!B) return;
    if (B->owner) cache_drop_owner(B->owner);
    if (B->md) dnnl_memory_desc_destroy(B->md);
    free(B->data);
    free(B);
}

/* Creates the matmul primitive for (M or runtime M) against the packed weight;
 * if the implementation for this M rejects the packed layout, makes one with
 * weights `any` and re-lays the weight out for it (kept in the entry). */
static int create_matmul_entry(cache_entry *e, int64_t M, const braze_packed_b *B, int has_bias,
                               int has_res, int act, int runtime_m, const char *ctx, char *err, int errlen) {
    int rc = 1;
    int64_t N = B->N, K = B->K;
    int64_t m = runtime_m ? DNNL_RUNTIME_DIM_VAL : M;
    dnnl_memory_desc_t src = NULL, dst = NULL, bias = NULL, res = NULL, any = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_dims_t sd = {m, K}, dd = {m, N}, bd = {1, N}, wd = {K, N};
    DN(dnnl_memory_desc_create_with_tag(&src, 2, sd, dnnl_f32, dnnl_ab));
    DN(dnnl_memory_desc_create_with_tag(&dst, 2, dd, dnnl_f32, dnnl_ab));
    if (has_bias) DN(dnnl_memory_desc_create_with_tag(&bias, 2, bd, dnnl_f32, dnnl_ab));
    if (has_res) DN(dnnl_memory_desc_create_with_tag(&res, 2, dd, dnnl_f32, dnnl_ab));
    DN(make_attr(&attr, act, res, 1.f));
    /* runtime M: blocked weights get only the reference kernel; use a plain
     * [N,K] (torch) layout, which the brgemm kernel accepts with runtime dims */
    if (runtime_m || dnnl_matmul_primitive_desc_create(&pd, g_engine, src, B->md, bias, dst, attr) != dnnl_success) {
        pd = NULL;
        /* fallback: the layout this M wants */
        DN(dnnl_memory_desc_create_with_tag(&any, 2, wd, dnnl_f32,
                                            runtime_m ? dnnl_ba : dnnl_format_tag_any));
        DN(dnnl_matmul_primitive_desc_create(&pd, g_engine, src, any, bias, dst, attr));
        const_dnnl_memory_desc_t want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        DN(dnnl_memory_desc_clone(&e->wei_md, want));
        e->wei_alt = aligned_alloc64(dnnl_memory_desc_get_size(want));
        if (!e->wei_alt) {
            set_err(err, errlen, "braze_dnnl: out of memory (%s)", ctx);
            goto fail;
        }
        if (do_reorder(B->md, B->data, want, e->wei_alt, ctx, err, errlen)) goto fail;
    } else {
        DN(dnnl_memory_desc_clone(&e->wei_md, B->md));
    }
    DN(dnnl_primitive_create(&e->prim, pd));
    rc = 0;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (src) dnnl_memory_desc_destroy(src);
    if (dst) dnnl_memory_desc_destroy(dst);
    if (bias) dnnl_memory_desc_destroy(bias);
    if (res) dnnl_memory_desc_destroy(res);
    if (any) dnnl_memory_desc_destroy(any);
    return rc;
}

/* Finds or creates the cache entry for key k; `make` fills it. On a full
 * cache the entry is built in *tmp and the caller must release it. */
typedef int (*make_fn)(cache_entry *e, void *arg, char *err, int errlen);

static cache_entry *get_entry(const int64_t *k, make_fn make, void *arg, cache_entry *tmp,
                              int *is_tmp, char *err, int errlen) {
    *is_tmp = 0;
    pthread_mutex_lock(&g_cache_mu);
    cache_entry *e = cache_find(k);
    if (e) {
        g_hits++;
        pthread_mutex_unlock(&g_cache_mu);
        return e;
    }
    /* create under the lock: simple, and creation is rare (once per shape) */
    e = cache_insert(k);
    if (!e) {
        memset(tmp, 0, sizeof *tmp);
        e = tmp;
        *is_tmp = 1;
    }
    g_created++;
    if (make(e, arg, err, errlen)) {
        entry_release(e);
        if (!*is_tmp) {
            e->used = 2;
            g_cache_count--;
        }
        pthread_mutex_unlock(&g_cache_mu);
        return NULL;
    }
    pthread_mutex_unlock(&g_cache_mu);
    return e;
}

typedef struct {
    int64_t M;
    const braze_packed_b *B;
    int has_bias, has_res, act, runtime_m;
    const char *ctx;
} mm_arg;

static int make_mm(cache_entry *e, void *a, char *err, int errlen) {
    mm_arg *m = (mm_arg *)a;
    return create_matmul_entry(e, m->M, m->B, m->has_bias, m->has_res, m->act, m->runtime_m, m->ctx, err, errlen);
}

int braze_matmul(int64_t M, int64_t N, int64_t K, const float *A, const braze_packed_b *B,
                 const float *bias, const float *residual, int act, float *C, char *err,
                 int errlen) {
    char ctx[200];
    snprintf(ctx, sizeof ctx, "braze_matmul M=%lld N=%lld K=%lld bias=%d residual=%d act=%d",
             (long long)M, (long long)N, (long long)K, bias != NULL, residual != NULL, act);
    int rc = 1, is_tmp = 0;
    cache_entry tmp, *e = NULL;
    dnnl_memory_t ma = NULL, mw = NULL, mb = NULL, mr = NULL, mc = NULL;
    dnnl_memory_desc_t src = NULL, dst = NULL, bmd = NULL;
    dnnl_alg_kind_t dummy_alg;
    if (braze_dnnl_init(err, errlen)) return 1;
    if (!B) {
        set_err(err, errlen, "braze_dnnl: packed weight is NULL (%s)", ctx);
        return 1;
    }
    if (M < 0 || N != B->N || K != B->K || !A || !C) {
        set_err(err, errlen,
                "braze_dnnl: invalid arguments (%s; packed weight is N=%lld K=%lld; A=%p C=%p)",
                ctx, (long long)B->N, (long long)B->K, (const void *)A, (void *)C);
        return 1;
    }
    {
        float al;
        if (act_alg(act, &dummy_alg, &al) < 0) {
            set_err(err, errlen, "braze_dnnl: unknown activation code %d (%s)", act, ctx);
            return 1;
        }
    }
    if (M == 0) return 0;
    dnnl_stream_t s = get_stream(err, errlen);
    if (!s) return 1;
    {
        /* GEMV-like calls (M <= SMALL_M) run a plain-weight runtime-M primitive: at M=1 the
         * packed-weight kernel's overhead loses to it (MLP batch 1: 2.45 -> 2.23 ms) */
        int rm = g_runtime_m || (M <= SMALL_M && !residual); /* runtime-dim residual md: unsupported */
        int64_t k[KEYLEN] = {1, B->owner, rm ? -1 : M, N, K, bias != NULL, residual != NULL, act, rm};
        mm_arg arg = {M, B, bias != NULL, residual != NULL, act, rm, ctx};
        e = get_entry(k, make_mm, &arg, &tmp, &is_tmp, err, errlen);
        if (!e) return 1;
    }
    {
        dnnl_dims_t sd = {M, K}, dd = {M, N}, bd = {1, N};
        DN(dnnl_memory_desc_create_with_tag(&src, 2, sd, dnnl_f32, dnnl_ab));
        DN(dnnl_memory_desc_create_with_tag(&dst, 2, dd, dnnl_f32, dnnl_ab));
        DN(dnnl_memory_create(&ma, src, g_engine, (void *)A));
        DN(dnnl_memory_create(&mc, dst, g_engine, C));
        DN(dnnl_memory_create(&mw, e->wei_md, g_engine, e->wei_alt ? e->wei_alt : B->data));
        dnnl_exec_arg_t args[5];
        int n = 0;
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, ma};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mw};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, mc};
        if (bias) {
            DN(dnnl_memory_desc_create_with_tag(&bmd, 2, bd, dnnl_f32, dnnl_ab));
            DN(dnnl_memory_create(&mb, bmd, g_engine, (void *)bias));
            args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mb};
        }
        if (residual) {
            DN(dnnl_memory_create(&mr, dst, g_engine, (void *)residual));
            int idx = residual_post_op_index(act);
            args[n++] = (dnnl_exec_arg_t){DNNL_ARG_ATTR_MULTIPLE_POST_OP(idx) | DNNL_ARG_SRC_1, mr};
        }
        DN(dnnl_primitive_execute(e->prim, s, n, args));
        DN(dnnl_stream_wait(s));
    }
    rc = 0;
fail:
    if (ma) dnnl_memory_destroy(ma);
    if (mw) dnnl_memory_destroy(mw);
    if (mb) dnnl_memory_destroy(mb);
    if (mr) dnnl_memory_destroy(mr);
    if (mc) dnnl_memory_destroy(mc);
    if (src) dnnl_memory_desc_destroy(src);
    if (dst) dnnl_memory_desc_destroy(dst);
    if (bmd) dnnl_memory_desc_destroy(bmd);
    if (is_tmp) entry_release(&tmp);
    return rc;
}

/* ------------------------------------------------------------------ batched matmul */

typedef struct {
    int64_t b, M, N, K;
    int ta, tb;
    float alpha;
    const char *ctx;
} bmm_arg;

static int bmm_mds(int64_t b, int64_t M, int64_t N, int64_t K, int ta, int tb, dnnl_memory_desc_t *a,
                   dnnl_memory_desc_t *w, dnnl_memory_desc_t *c) {
    dnnl_dims_t ad = {b, M, K}, wd = {b, K, N}, cd = {b, M, N};
    if (dnnl_memory_desc_create_with_tag(a, 3, ad, dnnl_f32, ta ? dnnl_acb : dnnl_abc)) return 1;
    if (dnnl_memory_desc_create_with_tag(w, 3, wd, dnnl_f32, tb ? dnnl_acb : dnnl_abc)) return 1;
    if (dnnl_memory_desc_create_with_tag(c, 3, cd, dnnl_f32, dnnl_abc)) return 1;
    return 0;
}

static int make_bmm(cache_entry *e, void *p, char *err, int errlen) {
    bmm_arg *m = (bmm_arg *)p;
    const char *ctx = m->ctx;
    int rc = 1;
    dnnl_memory_desc_t a = NULL, w = NULL, c = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (bmm_mds(m->b, m->M, m->N, m->K, m->ta, m->tb, &a, &w, &c)) {
        set_err(err, errlen, "braze_dnnl: dnnl_memory_desc_create_with_tag failed (%s)", ctx);
        goto fail;
    }
    DN(make_attr(&attr, BRAZE_ACT_NONE, NULL, m->alpha));
    DN(dnnl_matmul_primitive_desc_create(&pd, g_engine, a, w, NULL, c, attr));
    DN(dnnl_primitive_create(&e->prim, pd));
    rc = 0;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (a) dnnl_memory_desc_destroy(a);
    if (w) dnnl_memory_desc_destroy(w);
    if (c) dnnl_memory_desc_destroy(c);
    return rc;
}

int braze_batch_matmul(int64_t batch, int64_t M, int64_t N, int64_t K, const float *A, int transA,
                       const float *Bm, int transB, float alpha, float *C, char *err, int errlen) {
    char ctx[200];
    snprintf(ctx, sizeof ctx, "braze_batch_matmul batch=%lld M=%lld N=%lld K=%lld transA=%d transB=%d",
             (long long)batch, (long long)M, (long long)N, (long long)K, transA, transB);
    int rc = 1, is_tmp = 0;
    cache_entry tmp, *e = NULL;
    dnnl_memory_desc_t a = NULL, w = NULL, c = NULL;
    dnnl_memory_t ma = NULL, mw = NULL, mc = NULL;
    if (braze_dnnl_init(err, errlen)) return 1;
    if (batch < 0 || M < 0 || N < 0 || K < 0 || !A || !Bm || !C) {
        set_err(err, errlen, "braze_dnnl: invalid arguments (%s)", ctx);
        return 1;
    }
    if (batch == 0 || M == 0 || N == 0) return 0;
    if (K == 0) {
        memset(C, 0, (size_t)(batch * M * N) * sizeof(float));
        return 0;
    }
    dnnl_stream_t s = get_stream(err, errlen);
    if (!s) return 1;
    {
        union { float f; int32_t i; } u = {alpha};
        int64_t k[KEYLEN] = {2, 0, batch, M, N, K, transA != 0, transB != 0, u.i};
        bmm_arg arg = {batch, M, N, K, transA != 0, transB != 0, alpha, ctx};
        e = get_entry(k, make_bmm, &arg, &tmp, &is_tmp, err, errlen);
        if (!e) return 1;
    }
    if (bmm_mds(batch, M, N, K, transA != 0, transB != 0, &a, &w, &c)) {
        set_err(err, errlen, "braze_dnnl: dnnl_memory_desc_create_with_tag failed (%s)", ctx);
        goto fail;
    }
    DN(dnnl_memory_create(&ma, a, g_engine, (void *)A));
    DN(dnnl_memory_create(&mw, w, g_engine, (void *)Bm));
    DN(dnnl_memory_create(&mc, c, g_engine, C));
    {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, mc}};
        DN(dnnl_primitive_execute(e->prim, s, 3, args));
        DN(dnnl_stream_wait(s));
    }
    rc = 0;
fail:
    if (ma) dnnl_memory_destroy(ma);
    if (mw) dnnl_memory_destroy(mw);
    if (mc) dnnl_memory_destroy(mc);
    if (a) dnnl_memory_desc_destroy(a);
    if (w) dnnl_memory_desc_destroy(w);
    if (c) dnnl_memory_desc_destroy(c);
    if (is_tmp) entry_release(&tmp);
    return rc;
}

/* ------------------------------------------------------------------ convolution */

struct braze_packed_conv {
    int64_t OC, IC, KH, KW, G, sh, sw, ph, pw, dh, dw;
    int layout;
    int64_t owner;
    dnnl_memory_desc_t md;
    void *data;
};

static int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
    return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

/* Memory descs of one conv call (weights: plain torch layout or `any`). */
static int conv_mds(const braze_packed_conv *P, int64_t N, int64_t H, int64_t W, int any_w,
                    dnnl_memory_desc_t *src, dnnl_memory_desc_t *wei, dnnl_memory_desc_t *dst) {
    int64_t OH = conv_out(H, P->KH, P->sh, P->ph, P->dh);
    int64_t OW = conv_out(W, P->KW, P->sw, P->pw, P->dw);
    dnnl_format_tag_t t = P->layout ? dnnl_nhwc : dnnl_nchw;
    dnnl_dims_t sd = {N, P->IC, H, W}, dd = {N, P->OC, OH, OW};
    if (dnnl_memory_desc_create_with_tag(src, 4, sd, dnnl_f32, t)) return 1;
    if (dnnl_memory_desc_create_with_tag(dst, 4, dd, dnnl_f32, t)) return 1;
    if (wei) {
        if (P->G == 1) {
            dnnl_dims_t wd = {P->OC, P->IC, P->KH, P->KW};
            if (dnnl_memory_desc_create_with_tag(wei, 4, wd, dnnl_f32, any_w ? dnnl_format_tag_any : dnnl_oihw))
                return 1;
        } else {
            dnnl_dims_t wd = {P->G, P->OC / P->G, P->IC / P->G, P->KH, P->KW};
            if (dnnl_memory_desc_create_with_tag(wei, 5, wd, dnnl_f32, any_w ? dnnl_format_tag_any : dnnl_goihw))
                return 1;
        }
    }
    return 0;
}

static dnnl_status_t conv_pd(dnnl_primitive_desc_t *pd, const braze_packed_conv *P,
                             const_dnnl_memory_desc_t src, const_dnnl_memory_desc_t wei,
                             const_dnnl_memory_desc_t bias, const_dnnl_memory_desc_t dst,
                             const_dnnl_primitive_attr_t attr) {
    dnnl_dims_t strides = {P->sh, P->sw}, dil = {P->dh - 1, P->dw - 1}, pad = {P->ph, P->pw};
    /* right padding so that the output size matches the formula exactly */
    return dnnl_convolution_forward_primitive_desc_create(pd, g_engine, dnnl_forward_inference,
                                                          dnnl_convolution_direct, src, wei, bias,
                                                          dst, strides, dil, pad, pad, attr);
}

#define CONV_HW_HINT 56

braze_packed_conv *braze_pack_conv_weights(const float *W, int64_t OC, int64_t IC, int64_t KH,
                                           int64_t KW, int64_t groups, int64_t stride_h,
                                           int64_t stride_w, int64_t pad_h, int64_t pad_w,
                                           int64_t dil_h, int64_t dil_w, int layout, char *err,
                                           int errlen) {
    char ctx[300];
    snprintf(ctx, sizeof ctx,
             "braze_pack_conv_weights OC=%lld IC=%lld KH=%lld KW=%lld groups=%lld stride=%lldx%lld "
             "pad=%lldx%lld dil=%lldx%lld layout=%s",
             (long long)OC, (long long)IC, (long long)KH, (long long)KW, (long long)groups,
             (long long)stride_h, (long long)stride_w, (long long)pad_h, (long long)pad_w,
             (long long)dil_h, (long long)dil_w, layout ? "nhwc" : "nchw");
    braze_packed_conv *P = NULL;
    dnnl_memory_desc_t src = NULL, wany = NULL, wplain = NULL, dst = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (braze_dnnl_init(err, errlen)) return NULL;
    if (!W || OC <= 0 || IC <= 0 || KH <= 0 || KW <= 0 || groups <= 0 || OC % groups || IC % groups ||
        stride_h <= 0 || stride_w <= 0 || pad_h < 0 || pad_w < 0 || dil_h <= 0 || dil_w <= 0 ||
        (layout != 0 && layout != 1)) {
        set_err(err, errlen, "braze_dnnl: invalid arguments (%s)", ctx);
        return NULL;
    }
    P = (braze_packed_conv *)calloc(1, sizeof *P);
    if (!P) {
        set_err(err, errlen, "braze_dnnl: out of memory (%s)", ctx);
        return NULL;
    }
    *P = (braze_packed_conv){OC, IC, KH, KW, groups, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, layout, 0, NULL, NULL};
    {
        /* representative input: big enough for the kernel window */
        int64_t hh = CONV_HW_HINT, ww = CONV_HW_HINT;
        int64_t need_h = dil_h * (KH - 1) + 1, need_w = dil_w * (KW - 1) + 1;
        if (hh < need_h) hh = need_h;
        if (ww < need_w) ww = need_w;
        if (conv_mds(P, 1, hh, ww, 1, &src, &wany, &dst)) {
            set_err(err, errlen, "braze_dnnl: dnnl_memory_desc_create_with_tag failed (%s)", ctx);
            goto fail;
        }
        {
            dnnl_memory_desc_t s2 = NULL, d2 = NULL;
            if (conv_mds(P, 1, hh, ww, 0, &s2, &wplain, &d2)) {
                set_err(err, errlen, "braze_dnnl: dnnl_memory_desc_create_with_tag failed (%s)", ctx);
                goto fail;
            }
            dnnl_memory_desc_destroy(s2);
            dnnl_memory_desc_destroy(d2);
        }
        DN(conv_pd(&pd, P, src, wany, NULL, dst, NULL));
        DN(dnnl_memory_desc_clone(&P->md, dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0)));
        P->data = aligned_alloc64(dnnl_memory_desc_get_size(P->md));
        if (!P->data) {
            set_err(err, errlen, "braze_dnnl: out of memory (%s)", ctx);
            goto fail;
        }
        if (do_reorder(wplain, W, P->md, P->data, ctx, err, errlen)) goto fail;
    }
    pthread_mutex_lock(&g_cache_mu);
    P->owner = g_next_owner++;
    pthread_mutex_unlock(&g_cache_mu);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_desc_destroy(src);
    dnnl_memory_desc_destroy(wany);
    dnnl_memory_desc_destroy(wplain);
    dnnl_memory_desc_destroy(dst);
    return P;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (src) dnnl_memory_desc_destroy(src);
    if (wany) dnnl_memory_desc_destroy(wany);
    if (wplain) dnnl_memory_desc_destroy(wplain);
    if (dst) dnnl_memory_desc_destroy(dst);
    braze_free_packed_conv(P);
    return NULL;
}

void braze_free_packed_conv(braze_packed_conv *P) {
    if (!P) return;
    if (P->owner) cache_drop_owner(P->owner);
    if (P->md) dnnl_memory_desc_destroy(P->md);
    free(P->data);
    free(P);
}

typedef struct {
    const braze_packed_conv *P;
    int64_t N, H, W;
    int has_bias, has_res, act;
    const char *ctx;
} conv_arg;

static int make_conv(cache_entry *e, void *p, char *err, int errlen) {
    conv_arg *c = (conv_arg *)p;
    const braze_packed_conv *P = c->P;
    const char *ctx = c->ctx;
    int rc = 1;
    dnnl_memory_desc_t src = NULL, dst = NULL, wany = NULL, bias = NULL;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd = NULL;
    if (conv_mds(P, c->N, c->H, c->W, 1, &src, &wany, &dst)) {
        set_err(err, errlen, "braze_dnnl: dnnl_memory_desc_create_with_tag failed (%s)", ctx);
        goto fail;
    }
    if (c->has_bias) {
        dnnl_dims_t bd = {P->OC};
        DN(dnnl_memory_desc_create_with_tag(&bias, 1, bd, dnnl_f32, dnnl_a));
    }
    /* the residual is a sum post-op (Y is preloaded with it): the JIT convolutions take
     * sum, while binary add sends oneDNN 3.2 to its reference kernel */
    DN(make_attr_ex(&attr, c->act, c->has_res ? dst : NULL, 1.f, 1));
    /* weights `any`: the implementation picks its layout (a fixed packed layout can force
     * the reference kernel, e.g. for strided 1x1); re-lay the weights out when it differs */
    DN(conv_pd(&pd, P, src, wany, bias, dst, attr));
    {
        const_dnnl_memory_desc_t want = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
        DN(dnnl_memory_desc_clone(&e->wei_md, want));
        if (!dnnl_memory_desc_equal(want, P->md)) {
            e->wei_alt = aligned_alloc64(dnnl_memory_desc_get_size(want));
            if (!e->wei_alt) {
                set_err(err, errlen, "braze_dnnl: out of memory (%s)", ctx);
                goto fail;
            }
            if (do_reorder(P->md, P->data, want, e->wei_alt, ctx, err, errlen)) goto fail;
        }
    }
    DN(dnnl_primitive_create(&e->prim, pd));
    rc = 0;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (src) dnnl_memory_desc_destroy(src);
    if (dst) dnnl_memory_desc_destroy(dst);
    if (wany) dnnl_memory_desc_destroy(wany);
    if (bias) dnnl_memory_desc_destroy(bias);
    return rc;
}

int braze_conv2d(int64_t N, int64_t H, int64_t W, const float *X, const braze_packed_conv *P,
                 const float *bias, const float *residual, int act, int64_t OH, int64_t OW, float *Y,
                 char *err, int errlen) {
    char ctx[300];
    int rc = 1, is_tmp = 0;
    cache_entry tmp, *e = NULL;
    dnnl_memory_desc_t src = NULL, dst = NULL, bmd = NULL;
    dnnl_memory_t mx = NULL, mw = NULL, mb = NULL, mr = NULL, my = NULL;
    if (!P) {
        set_err(err, errlen, "braze_dnnl: braze_conv2d: packed conv weight is NULL");
        return 1;
    }
    snprintf(ctx, sizeof ctx,
             "braze_conv2d N=%lld IC=%lld H=%lld W=%lld -> OC=%lld OH=%lld OW=%lld kernel=%lldx%lld "
             "stride=%lldx%lld pad=%lldx%lld dil=%lldx%lld groups=%lld layout=%s bias=%d residual=%d act=%d",
             (long long)N, (long long)P->IC, (long long)H, (long long)W, (long long)P->OC,
             (long long)OH, (long long)OW, (long long)P->KH, (long long)P->KW, (long long)P->sh,
             (long long)P->sw, (long long)P->ph, (long long)P->pw, (long long)P->dh,
             (long long)P->dw, (long long)P->G, P->layout ? "nhwc" : "nchw", bias != NULL,
             residual != NULL, act);
    if (braze_dnnl_init(err, errlen)) return 1;
    {
        dnnl_alg_kind_t alg;
        float al;
        if (act_alg(act, &alg, &al) < 0) {
            set_err(err, errlen, "braze_dnnl: unknown activation code %d (%s)", act, ctx);
            return 1;
        }
    }
    if (N < 0 || H <= 0 || W <= 0 || !X || !Y || OH != conv_out(H, P->KH, P->sh, P->ph, P->dh) ||
        OW != conv_out(W, P->KW, P->sw, P->pw, P->dw) || OH <= 0 || OW <= 0) {
        set_err(err, errlen, "braze_dnnl: invalid arguments (%s; expected OH=%lld OW=%lld)", ctx,
                (long long)conv_out(H, P->KH, P->sh, P->ph, P->dh),
                (long long)conv_out(W, P->KW, P->sw, P->pw, P->dw));
        return 1;
    }
    if (N == 0) return 0;
    dnnl_stream_t s = get_stream(err, errlen);
    if (!s) return 1;
    {
        int64_t k[KEYLEN] = {3, P->owner, N, H, W, bias != NULL, residual != NULL, act};
        conv_arg arg = {P, N, H, W, bias != NULL, residual != NULL, act, ctx};
        e = get_entry(k, make_conv, &arg, &tmp, &is_tmp, err, errlen);
        if (!e) return 1;
    }
    if (conv_mds(P, N, H, W, 0, &src, NULL, &dst)) {
        set_err(err, errlen, "braze_dnnl: dnnl_memory_desc_create_with_tag failed (%s)", ctx);
        goto fail;
    }
    {
        dnnl_exec_arg_t args[5];
        int n = 0;
        DN(dnnl_memory_create(&mx, src, g_engine, (void *)X));
        DN(dnnl_memory_create(&my, dst, g_engine, Y));
        DN(dnnl_memory_create(&mw, e->wei_md, g_engine, e->wei_alt ? e->wei_alt : P->data));
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_SRC, mx};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_WEIGHTS, mw};
        args[n++] = (dnnl_exec_arg_t){DNNL_ARG_DST, my};
        if (bias) {
            dnnl_dims_t bd = {P->OC};
            DN(dnnl_memory_desc_create_with_tag(&bmd, 1, bd, dnnl_f32, dnnl_a));
            DN(dnnl_memory_create(&mb, bmd, g_engine, (void *)bias));
            args[n++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mb};
        }
        if (residual && residual != Y)
            memcpy(Y, residual, (size_t)(N * OH * OW * P->OC) * sizeof(float));
        DN(dnnl_primitive_execute(e->prim, s, n, args));
        DN(dnnl_stream_wait(s));
    }
    rc = 0;
fail:
    if (mx) dnnl_memory_destroy(mx);
    if (mw) dnnl_memory_destroy(mw);
    if (mb) dnnl_memory_destroy(mb);
    if (mr) dnnl_memory_destroy(mr);
    if (my) dnnl_memory_destroy(my);
    if (src) dnnl_memory_desc_destroy(src);
    if (dst) dnnl_memory_desc_destroy(dst);
    if (bmd) dnnl_memory_desc_destroy(bmd);
    if (is_tmp) entry_release(&tmp);
    return rc;
}
