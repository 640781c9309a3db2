/* braze_dnnl_wcache.c: derived forms of run-time weights, cached and revalidated by content.
 * Follows braze_dnnl_wtrack.c in one translation unit (see onednn.helper_text).
 *
 * A convolution reads its weights in a blocked layout that only a reorder makes, and oneDNN's
 * reorder from the plain torch layout runs at 3-5 GB/s here: redone at every call, it made a
 * live-weight ResNet-50 1.4-1.8x slower than with frozen weights. So the re-laid-out copy is
 * kept. Each call finds it unchanged from the kernel's page tables where it can (wtrack_gen: the
 * weight's pages unwritten since the copy was checked), else from a 64-bit fingerprint of the
 * weight's bytes (about 23-25 GB/s on 2 threads, AVX-512 or AVX2: one read of the weight). No
 * cheaper check in user space is sound: torch's version counter misses writes through `.data`,
 * NumPy views and DLPack, and a data pointer says nothing about the bytes behind it. */

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#include <omp.h>

/* ------------------------------------------------------------------ fingerprint */

#define FP_CHUNK (256 * 1024) /* bytes hashed on their own, in parallel, then combined in order */
#define FP_STRIPES 16          /* 64-byte stripes per 1 KB block, each with its own key */
#define FP_PRIME32 0x9E3779B1u
#define FP_PRIME64 0x9E3779B185EBCA87ull

static uint64_t fp_mix(uint64_t h) { /* splitmix64's finalizer */
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}

static uint64_t g_fp_keys[FP_STRIPES + 1][8]; /* the last row scrambles the accumulators */
static pthread_once_t g_fp_once = PTHREAD_ONCE_INIT;

static void fp_keys_init(void) {
    uint64_t s = 0x243F6A8885A308D3ull; /* fixed: a fingerprint is the same in every process */
    for (int i = 0; i <= FP_STRIPES; i++)
        for (int j = 0; j < 8; j++) g_fp_keys[i][j] = fp_mix(s += FP_PRIME64);
}

/* One chunk (n <= FP_CHUNK bytes), XXH3's long-input scheme: 8 lanes of 64-bit accumulators;
 * a stripe adds lo32(x ^ key) * hi32(x ^ key) and the stripe's other word pair to them; every 1
 * KB block scrambles them, so the order of blocks counts, and the stripe keys make the order
 * within a block count. */
static uint64_t fp_chunk(const unsigned char *p, size_t n) {
    uint64_t out[8];
#if defined(__AVX512F__)
    __m512i acc = _mm512_set_epi64(8, 7, 6, 5, 4, 3, 2, 1), scr = _mm512_loadu_si512(g_fp_keys[FP_STRIPES]);
    const __m512i prime = _mm512_set1_epi64(FP_PRIME32);
    size_t off = 0;
    while (off < n) {
        for (int s = 0; s < FP_STRIPES && off < n; s++, off += 64) {
            __m512i x;
            if (n - off >= 64) {
                x = _mm512_loadu_si512(p + off);
            } else { /* the tail, zero-padded: the length is mixed in below */
                unsigned char t[64] = {0};
                memcpy(t, p + off, n - off);
                x = _mm512_loadu_si512(t);
            }
            __m512i dk = _mm512_xor_si512(x, _mm512_loadu_si512(g_fp_keys[s]));
            __m512i prod = _mm512_mul_epu32(dk, _mm512_srli_epi64(dk, 32));
            acc = _mm512_add_epi64(acc, _mm512_add_epi64(prod, _mm512_shuffle_i64x2(x, x, 0x4E)));
        }
        /* scramble: acc = (acc ^ acc >> 47 ^ key) * PRIME32, as a 64 x 32-bit product */
        __m512i a = _mm512_xor_si512(_mm512_xor_si512(acc, _mm512_srli_epi64(acc, 47)), scr);
        acc = _mm512_add_epi64(_mm512_mul_epu32(a, prime),
                               _mm512_slli_epi64(_mm512_mul_epu32(_mm512_srli_epi64(a, 32), prime), 32));
    }
    _mm512_storeu_si512(out, acc);
#elif defined(__AVX2__)
    /* the same sums in two halves (lanes 0-3, 4-7): the portable loop ran at 6 GB/s on a Zen 3,
     * which is ResNet-50's whole live-weight cost */
    __m256i lo = _mm256_set_epi64x(4, 3, 2, 1), hi = _mm256_set_epi64x(8, 7, 6, 5);
    const __m256i prime = _mm256_set1_epi64x(FP_PRIME32);
    size_t off = 0;
    while (off < n) {
        for (int s = 0; s < FP_STRIPES && off < n; s++, off += 64) {
            __m256i xl, xh;
            if (n - off >= 64) {
                xl = _mm256_loadu_si256((const __m256i *)(p + off));
                xh = _mm256_loadu_si256((const __m256i *)(p + off + 32));
            } else {
                unsigned char t[64] = {0};
                memcpy(t, p + off, n - off);
                xl = _mm256_loadu_si256((const __m256i *)t);
                xh = _mm256_loadu_si256((const __m256i *)(t + 32));
            }
            __m256i dl = _mm256_xor_si256(xl, _mm256_loadu_si256((const __m256i *)g_fp_keys[s]));
            __m256i dh = _mm256_xor_si256(xh, _mm256_loadu_si256((const __m256i *)(g_fp_keys[s] + 4)));
            lo = _mm256_add_epi64(lo, _mm256_add_epi64(_mm256_mul_epu32(dl, _mm256_srli_epi64(dl, 32)), xh));
            hi = _mm256_add_epi64(hi, _mm256_add_epi64(_mm256_mul_epu32(dh, _mm256_srli_epi64(dh, 32)), xl));
        }
        for (int h = 0; h < 2; h++) {
            __m256i acc = h ? hi : lo;
            __m256i a = _mm256_xor_si256(_mm256_xor_si256(acc, _mm256_srli_epi64(acc, 47)),
                                         _mm256_loadu_si256((const __m256i *)(g_fp_keys[FP_STRIPES] + 4 * h)));
            acc = _mm256_add_epi64(_mm256_mul_epu32(a, prime),
                                   _mm256_slli_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), prime), 32));
            if (h) hi = acc; else lo = acc;
        }
    }
    _mm256_storeu_si256((__m256i *)out, lo);
    _mm256_storeu_si256((__m256i *)(out + 4), hi);
#else
    uint64_t acc[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    size_t off = 0;
    while (off < n) {
        for (int s = 0; s < FP_STRIPES && off < n; s++, off += 64) {
            uint64_t x[8] = {0};
            memcpy(x, p + off, n - off >= 64 ? 64 : n - off);
            for (int j = 0; j < 8; j++) {
                uint64_t dk = x[j] ^ g_fp_keys[s][j];
                acc[j] += (dk & 0xffffffffu) * (dk >> 32) + x[(j + 4) & 7];
            }
        }
        for (int j = 0; j < 8; j++) {
            uint64_t a = acc[j] ^ (acc[j] >> 47) ^ g_fp_keys[FP_STRIPES][j];
            acc[j] = (a & 0xffffffffu) * FP_PRIME32 + (((a >> 32) * FP_PRIME32) << 32);
        }
    }
    memcpy(out, acc, sizeof out);
#endif
    uint64_t h = fp_mix(n);
    for (int j = 0; j < 8; j++) h = fp_mix(h ^ out[j]);
    return h;
}

/* 64-bit fingerprint of n bytes, the same whatever the thread count. */
uint64_t braze_fingerprint(const void *data, size_t n) {
    pthread_once(&g_fp_once, fp_keys_init);
    const unsigned char *p = (const unsigned char *)data;
    size_t nc = n ? (n + FP_CHUNK - 1) / FP_CHUNK : 0;
    if (nc <= 1) return fp_mix(fp_chunk(p, n) ^ FP_PRIME64);
    uint64_t stack[64], *part = nc <= 64 ? stack : (uint64_t *)malloc(nc * sizeof(uint64_t));
    if (!part) { /* no memory for the parts: hash them one after another */
        uint64_t h = FP_PRIME64;
        for (size_t c = 0; c < nc; c++) h = fp_mix(h ^ fp_chunk(p + c * FP_CHUNK, c + 1 < nc ? FP_CHUNK : n - c * FP_CHUNK));
        return h;
    }
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < nc; c++) part[c] = fp_chunk(p + c * FP_CHUNK, c + 1 < nc ? FP_CHUNK : n - c * FP_CHUNK);
    uint64_t h = FP_PRIME64;
    for (size_t c = 0; c < nc; c++) h = fp_mix(h ^ part[c]);
    if (part != stack) free(part);
    return h;
}

/* ------------------------------------------------------------------ the cache */

#define WCACHE_SLOTS 4 /* weight sets per conv: model instances that share one library */

typedef struct {
    uint64_t fp;           /* fingerprint of the plain weight this copy was made from */
    const void *w;         /* where those bytes were when last checked, */
    uint64_t gen, edges;   /* and their write generation then (0: untracked), wtrack_edges */
    dnnl_memory_desc_t md; /* the copy's layout (owned); NULL: an empty slot */
    void *data;
    int pins;       /* calls using it now: never evicted while pinned */
    uint64_t used;  /* clock of the last use: the least recent unpinned slot is evicted */
} wslot;

typedef struct {
    wslot s[WCACHE_SLOTS];
    uint64_t clock;
} wcache;

static void wcache_free(wcache *c) {
    for (int i = 0; i < WCACHE_SLOTS; i++) {
        if (c->s[i].md) dnnl_memory_desc_destroy(c->s[i].md);
        free(c->s[i].data);
        c->s[i] = (wslot){0};
    }
}

/* the slot last checked against the bytes at w, unwritten since (gen from wtrack_gen) */
static wslot *wcache_find_tracked(wcache *c, const void *w, uint64_t gen, uint64_t edges,
                                  const_dnnl_memory_desc_t md) {
    for (int i = 0; gen && i < WCACHE_SLOTS; i++)
        if (c->s[i].md && c->s[i].w == w && c->s[i].gen == gen && c->s[i].edges == edges &&
            dnnl_memory_desc_equal(c->s[i].md, md))
            return &c->s[i];
    return NULL;
}

static wslot *wcache_find(wcache *c, uint64_t fp, const_dnnl_memory_desc_t md) {
    for (int i = 0; i < WCACHE_SLOTS; i++)
        if (c->s[i].md && c->s[i].fp == fp && dnnl_memory_desc_equal(c->s[i].md, md)) return &c->s[i];
    return NULL;
}

/* A use of weights laid out as md: data, and the slot to release (NULL: data is the caller's
 * to free, made for this call because every slot was pinned). */
typedef struct {
    const void *data;
    wslot *slot;
} wuse;

/* The plain weight W (plain_md, nbytes; gen = wtrack_gen(W, nbytes)) as md: from c when a copy of
 * these bytes is there, else made with `reorder` (plain_md -> md) and kept. 0, or 1 with err set. */
static int wcache_get(wcache *c, const_dnnl_memory_desc_t plain_md, const void *W, size_t nbytes, uint64_t gen,
                      const_dnnl_memory_desc_t md, const_dnnl_primitive_t reorder,
                      const_dnnl_memory_desc_t reorder_scratch_md, dnnl_stream_t st, wuse *out, const char *ctx,
                      char *err, int errlen) {
    if (gen == WT_PENDING) gen = 0;
    uint64_t edges = gen ? wtrack_edges(W, nbytes) : 0;
    pthread_mutex_lock(&g_cache_mu);
    wslot *hit = wcache_find_tracked(c, W, gen, edges, md);
    if (hit) {
        hit->pins++;
        hit->used = ++c->clock;
        pthread_mutex_unlock(&g_cache_mu);
        *out = (wuse){hit->data, hit};
        return 0;
    }
    pthread_mutex_unlock(&g_cache_mu);
    uint64_t fp = braze_fingerprint(W, nbytes);
    pthread_mutex_lock(&g_cache_mu);
    hit = wcache_find(c, fp, md);
    if (hit) {
        hit->w = W, hit->gen = gen, hit->edges = edges;
        hit->pins++;
        hit->used = ++c->clock;
        pthread_mutex_unlock(&g_cache_mu);
        *out = (wuse){hit->data, hit};
        return 0;
    }
    pthread_mutex_unlock(&g_cache_mu);
    int rc = 1;
    dnnl_memory_desc_t kept = NULL;
    void *data = weight_alloc(dnnl_memory_desc_get_size(md));
    if (!data) {
        set_err(err, errlen, "braze_dnnl: out of memory (the weights' layout for %s)", ctx);
        return 1;
    }
    if (run_reorder(reorder, reorder_scratch_md, st, plain_md, W, md, data, ctx, err, errlen)) goto fail;
    DN(dnnl_memory_desc_clone(&kept, md));
    pthread_mutex_lock(&g_cache_mu);
    hit = wcache_find(c, fp, md); /* made meanwhile by another thread */
    if (!hit) {
        wslot *victim = NULL;
        for (int i = 0; i < WCACHE_SLOTS; i++) {
            wslot *s = &c->s[i];
            if (!s->md) { victim = s; break; }
            if (!s->pins && (!victim || s->used < victim->used)) victim = s;
        }
        if (victim) {
            if (victim->md) dnnl_memory_desc_destroy(victim->md);
            free(victim->data);
            *victim = (wslot){fp, W, gen, edges, kept, data, 0, 0};
            kept = NULL, data = NULL;
            hit = victim;
        }
    }
    if (hit) {
        hit->pins++;
        hit->used = ++c->clock;
        *out = (wuse){hit->data, hit};
    } else { /* every slot in use by another call: this call's copy is its own */
        *out = (wuse){data, NULL};
        data = NULL;
    }
    pthread_mutex_unlock(&g_cache_mu);
    rc = 0;
fail:
    if (kept) dnnl_memory_desc_destroy(kept);
    free(data);
    return rc;
}

static void wcache_release(wuse *u) {
    if (u->slot) {
        pthread_mutex_lock(&g_cache_mu);
        u->slot->pins--;
        pthread_mutex_unlock(&g_cache_mu);
    } else {
        free((void *)u->data);
    }
    *u = (wuse){0};
}
