/* braze_dnnl_wtrack.c: whether a run-time weight was written since it was last looked at, from
 * the kernel's page tables. Follows braze_dnnl_core.c in one translation unit (see
 * onednn.helper_text).
 *
 * A live weight (plug-in mode: the parameters are inputs of every call) may change between
 * calls through any alias: `.data`, a NumPy or DLPack view, `copy_`, an optimizer step, a read()
 * into its memory. torch's version counter misses the first three, so the only user-level check
 * that is sound is a hash of the weight's bytes, one full read of every weight at every call
 * (braze_fingerprint). Linux >= 6.7 keeps the answer itself: a userfaultfd registered for
 * write-protection in async mode (UFFD_FEATURE_WP_ASYNC) lets the first write to each protected
 * page through and marks the page written, and PAGEMAP_SCAN reads and re-arms those marks for a
 * range in about 2 ns a page (0.25 ms for BERT-base's 440 MB, against 14 ms to hash it). A write
 * by the kernel on the process's behalf (read(), recv()) takes the same fault, and so is seen.
 *
 * What it cannot see, so such pages are never tracked: pages that another process or a file can
 * change (PAGE_IS_FILE: shared memory, mmap-ed checkpoints), and a device writing by DMA into
 * memory it pinned before the protection (documented in docs/gemm.md; BRAZE_WRITE_TRACKING=0
 * turns tracking off).
 *
 * braze_live_check (a model's entry: all its weights at once; wtrack_gen: one) gives each weight a
 * generation number of the whole pages inside it, unique over the process's lifetime: the same
 * number at two checks means that no such page was written in between. Bytes on the partial pages
 * at either end may belong to other objects, so the caller hashes them itself (wtrack_edges). 0
 * means "not tracked": the caller checks the bytes its own way; WT_PENDING (1) "not yet": a new
 * range is armed at its second check, so that memory new at every call costs no registration. */

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>

/* linux/fs.h's PAGEMAP_SCAN (6.7) and userfaultfd's async write-protection, for older headers:
 * the build machine's headers may predate the kernel the library runs on. */
#ifndef PAGEMAP_SCAN
#define PAGE_IS_WRITTEN (1 << 1)
#define PAGE_IS_FILE (1 << 2)
struct page_region {
    uint64_t start, end, categories;
};
#define PM_SCAN_WP_MATCHING (1 << 0)
#define PM_SCAN_CHECK_WPASYNC (1 << 1)
struct pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted, category_mask,
        category_anyof_mask, return_mask;
};
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

#define WT_MIN_PAGES 16      /* below 64 KB, hashing the bytes costs less than a page-table walk */
#define WT_VOLATILE 3        /* checks of the last 8 that found writes: a weight that trains (a step's
                                forward and backward both check it, and only one finds the write) */
#define WT_REST 256          /* checks a volatile or untrackable range waits before trying again */
#define WT_MAX_RANGES 4096   /* then ranges not armed, and armed ones since unmapped, are forgotten */
#define WT_PENDING 1         /* the generation of a weight whose range is armed at its next check */

typedef struct {
    uintptr_t a, b; /* whole pages [a, b), registered with the userfaultfd while armed */
    uint64_t gen;   /* 0 while not armed */
    unsigned hist;  /* one bit per check since armed, the last in bit 0: it found writes */
    int rest;       /* checks left before an unarmed range is armed again */
    int fresh;      /* not armed yet since it was made: its weights' generation is WT_PENDING */
    int res;        /* its scan in the current check */
    uint64_t mark;  /* the check that last scanned or updated it */
} wt_range;

static struct {
    pthread_mutex_t mu;
    int state; /* 0: not probed, 1: available, -1: not (old kernel, no permission, turned off) */
    int uffd, pagemap;
    uintptr_t page;
    wt_range *r; /* disjoint, sorted by a */
    int n, cap;
    uint64_t next_gen, marks;
} g_wt = {PTHREAD_MUTEX_INITIALIZER, 0, -1, -1, 4096, NULL, 0, 0, WT_PENDING, 0};
static int g_wt_on = -1; /* atomic; -1: BRAZE_WRITE_TRACKING decides at the first check */

static void wt_unregister(uintptr_t a, uintptr_t b) {
    struct uffdio_range r = {a, b - a};
    ioctl(g_wt.uffd, UFFDIO_UNREGISTER, &r); /* fails harmlessly where nothing is registered */
}

/* Registers [a, b) and write-protects it: 0, or -1 with nothing left registered. */
static int wt_register(uintptr_t a, uintptr_t b) {
    struct uffdio_register reg = {.range = {a, b - a}, .mode = UFFDIO_REGISTER_MODE_WP};
    struct uffdio_writeprotect wp = {.range = {a, b - a}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
    if (ioctl(g_wt.uffd, UFFDIO_REGISTER, &reg)) return -1;
    if (!ioctl(g_wt.uffd, UFFDIO_WRITEPROTECT, &wp)) return 0;
    wt_unregister(a, b);
    return -1;
}

/* wt_scan's flags: a registered range, its written pages protected again as they are read */
#define WT_REARM (PM_SCAN_CHECK_WPASYNC | PM_SCAN_WP_MATCHING)

/* 1 when a page of [a, b) matching `any` was found, 0 when none; with PM_SCAN_CHECK_WPASYNC in
 * flags, -1 when the range is not (all) registered any more: unmapped, remapped. */
static int wt_scan(uintptr_t a, uintptr_t b, uint64_t any, uint64_t flags) {
    struct page_region v[16];
    int found = 0;
    while (a < b) {
        struct pm_scan_arg arg = {.size = sizeof arg, .flags = flags,
                                  .start = a, .end = b, .vec = (uintptr_t)v, .vec_len = 16,
                                  .category_anyof_mask = any, .return_mask = any};
        long got = ioctl(g_wt.pagemap, PAGEMAP_SCAN, &arg);
        if (got < 0) return -1;
        found |= got > 0;
        if (arg.walk_end <= a) return -1; /* no progress: never expected */
        a = arg.walk_end;
    }
    return found;
}

/* Asks for [a, b)'s aligned 2 MB blocks to be backed by huge pages, now: a scan then reads one
 * page-table entry per 2 MB instead of 512 (BERT-base's GEMM weights: 170 -> 16 us a call). The
 * bytes and addresses stay as they are. Best effort: the kernel may refuse (THP off, no memory). */
static void wt_huge(uintptr_t a, uintptr_t b) {
#if defined(MADV_HUGEPAGE)
    const uintptr_t H = (uintptr_t)2 << 20;
    uintptr_t s = (a + H - 1) & ~(H - 1), e = b & ~(H - 1);
    if (e > s && !madvise((void *)s, e - s, MADV_HUGEPAGE)) madvise((void *)s, e - s, 25 /* MADV_COLLAPSE */);
#else
    (void)a, (void)b;
#endif
}

/* Registers [a, b) and protects it: 0, or -1 (the range stays unregistered) when some page is one
 * that others can write (a file's or shared memory's) or the kernel refuses. */
static int wt_arm(uintptr_t a, uintptr_t b) {
    if (wt_scan(a, b, PAGE_IS_FILE, 0) != 0) return -1;
    wt_huge(a, b); /* before registering: the kernel collapses no write-protected range */
    return wt_register(a, b);
}

/* A child of fork() has no registrations (no UFFD_FEATURE_EVENT_FORK), and the parent's
 * userfaultfd and pagemap file still point at the parent's memory: start again. */
static void wt_prepare_fork(void) { pthread_mutex_lock(&g_wt.mu); }
static void wt_parent_fork(void) { pthread_mutex_unlock(&g_wt.mu); }
static void wt_child_fork(void) {
    if (g_wt.uffd >= 0) close(g_wt.uffd);
    if (g_wt.pagemap >= 0) close(g_wt.pagemap);
    g_wt.uffd = g_wt.pagemap = -1;
    g_wt.state = 0;
    g_wt.n = 0; /* the generations go on counting: none seen before the fork comes back */
    pthread_mutex_unlock(&g_wt.mu);
}

/* Opens the userfaultfd and the pagemap file and proves on a scratch mapping that a write is
 * seen and a re-armed page is clean. Under g_wt.mu. */
static int wt_probe(void) {
    static int atfork;
    if (!atfork) atfork = !pthread_atfork(wt_prepare_fork, wt_parent_fork, wt_child_fork);
    if (!atfork) return -1;
    long ps = sysconf(_SC_PAGESIZE);
    g_wt.page = ps > 0 ? (uintptr_t)ps : 4096;
    /* user-mode-only needs no privilege; async write faults are resolved in the fault path
     * itself, so kernel-mode writes are let through and marked just the same */
    g_wt.uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (g_wt.uffd < 0) return -1;
    struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED};
    g_wt.pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (ioctl(g_wt.uffd, UFFDIO_API, &api) || g_wt.pagemap < 0) return -1;
    size_t len = 4 * g_wt.page;
    char *m = (char *)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return -1;
    memset(m, 1, len);
    uintptr_t a = (uintptr_t)m, b = a + len;
    int ok = !wt_arm(a, b) && wt_scan(a, b, PAGE_IS_WRITTEN, WT_REARM) == 0;
    if (ok) {
        ((volatile char *)m)[g_wt.page + 5] = 2;
        ok = wt_scan(a, b, PAGE_IS_WRITTEN, WT_REARM) == 1 && wt_scan(a, b, PAGE_IS_WRITTEN, WT_REARM) == 0;
    }
    munmap(m, len);
    return ok ? 0 : -1;
}

static int wt_available(void) {
    if (g_wt.state) return g_wt.state > 0;
    int on = __atomic_load_n(&g_wt_on, __ATOMIC_RELAXED);
    if (on < 0) {
        const char *env = getenv("BRAZE_WRITE_TRACKING");
        on = !(env && env[0] == '0');
        __atomic_store_n(&g_wt_on, on, __ATOMIC_RELAXED); /* off: later checks skip the lock */
    }
    g_wt.state = on && !wt_probe() ? 1 : -1;
    if (g_wt.state < 0) {
        if (g_wt.uffd >= 0) close(g_wt.uffd);
        if (g_wt.pagemap >= 0) close(g_wt.pagemap);
        g_wt.uffd = g_wt.pagemap = -1;
    }
    return g_wt.state > 0;
}

/* The first range with b > a (ranges are disjoint and sorted). */
static int wt_find(uintptr_t a) {
    int lo = 0, hi = g_wt.n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (g_wt.r[mid].b <= a) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* An armed range still registered (its memory not unmapped or mapped anew since); its written
 * pages are left as they are. */
static int wt_alive(const wt_range *r) {
    return r->gen && wt_scan(r->a, r->b, PAGE_IS_WRITTEN, PM_SCAN_CHECK_WPASYNC) >= 0;
}

/* The range holding [a, b): an existing one, or a new one in place of every range it overlaps.
 * Overlapping ranges still registered, or new, are views of one weight: the new one is their
 * union. The others held weights since freed, and are dropped. NULL: out of memory. */
static wt_range *wt_range_for(uintptr_t a, uintptr_t b) {
    int i = wt_find(a);
    if (i < g_wt.n && g_wt.r[i].a <= a && b <= g_wt.r[i].b) return &g_wt.r[i];
    int j = i;
    for (; j < g_wt.n && g_wt.r[j].a < b; j++) /* [i, j) overlap [a, b) */
        if (g_wt.r[j].fresh || wt_alive(&g_wt.r[j])) {
            a = a < g_wt.r[j].a ? a : g_wt.r[j].a;
            b = b > g_wt.r[j].b ? b : g_wt.r[j].b;
        }
    if (j == i) {
        if (g_wt.n >= WT_MAX_RANGES) { /* keep the armed ranges still registered */
            int k = 0;
            for (int m = 0; m < g_wt.n; m++)
                if (wt_alive(&g_wt.r[m])) g_wt.r[k++] = g_wt.r[m];
            g_wt.n = k;
            if (k >= WT_MAX_RANGES) return NULL;
            i = wt_find(a);
        }
        if (g_wt.n == g_wt.cap) {
            int cap = g_wt.cap ? 2 * g_wt.cap : 64;
            wt_range *r = (wt_range *)realloc(g_wt.r, (size_t)cap * sizeof(wt_range));
            if (!r) return NULL;
            g_wt.r = r, g_wt.cap = cap;
        }
        j = i + 1;
        memmove(&g_wt.r[j], &g_wt.r[i], (size_t)(g_wt.n - i) * sizeof(wt_range));
        g_wt.n++;
    }
    memmove(&g_wt.r[i + 1], &g_wt.r[j], (size_t)(g_wt.n - j) * sizeof(wt_range));
    g_wt.n -= j - i - 1;
    /* armed at its second check: an input that is new memory at every call (an activation as a
     * matmul's right operand) never pays a registration and a huge-page collapse */
    g_wt.r[i] = (wt_range){a, b, 0, 0, 1, 1, 0, 0};
    return &g_wt.r[i];
}

void braze_dnnl_set_write_tracking(int on) {
    pthread_mutex_lock(&g_wt.mu);
    __atomic_store_n(&g_wt_on, on != 0, __ATOMIC_RELAXED);
    if (on && g_wt.state < 0) g_wt.state = 0; /* probe again */
    if (!on) { /* forget every range: no more faults; turned on again, it starts afresh */
        for (int i = 0; i < g_wt.n; i++)
            if (g_wt.r[i].gen) wt_unregister(g_wt.r[i].a, g_wt.r[i].b);
        g_wt.n = 0;
    }
    pthread_mutex_unlock(&g_wt.mu);
}

/* Whether this process tracks writes now (read without the lock: set once a check has probed) */
static int wtrack_on(void) {
    return __atomic_load_n(&g_wt_on, __ATOMIC_RELAXED) > 0 && __atomic_load_n(&g_wt.state, __ATOMIC_RELAXED) > 0;
}

static int64_t g_wt_stats[3]; /* checks, checks that found writes, arms; under g_wt.mu */

/* The range holding [a, b) (wt_range_for keeps them so), or -1. */
static int wt_index(uintptr_t a, uintptr_t b) {
    int i = wt_find(a);
    return i < g_wt.n && g_wt.r[i].a <= a && b <= g_wt.r[i].b ? i : -1;
}

/* Updates an armed range from its scan (w: wt_scan's answer), or arms an unarmed one; [a, b) is
 * the weight that brought it into this check. */
static void wt_update(wt_range *r, int w, uintptr_t a, uintptr_t b) {
    g_wt_stats[0]++;
    if (r->gen) {
        if (w == 0) {
            r->hist <<= 1;
            return;
        }
        g_wt_stats[1]++;
        r->hist = r->hist << 1 | 1;
        if (w > 0 && __builtin_popcount(r->hist & 0xff) >= WT_VOLATILE) {
            /* it trains: stop taking a fault per page per step */
            wt_unregister(r->a, r->b);
            r->gen = 0, r->hist = 0, r->rest = WT_REST;
            return;
        }
        if (w > 0) {
            r->gen = ++g_wt.next_gen;
            return;
        }
        /* unmapped or remapped since: arm what the weight holds now (the rest may be gone) */
        r->a = a, r->b = b, r->gen = 0;
    } else if (r->rest > 0) {
        if (r->fresh) {
            /* a file's or shared memory's pages: never pending, so its weight computes as an
             * untracked one from its first call on */
            if (wt_scan(r->a, r->b, PAGE_IS_FILE, 0) != 0) r->fresh = 0, r->rest = WT_REST;
            else r->rest--;
            return;
        }
        if (r->a == a && r->b == b) { /* the same weight, most likely: it waits its turn */
            r->rest--;
            return;
        } /* a weight of another size starts or ends in a range let go: new memory, armed now */
        r->a = a, r->b = b;
    }
    g_wt_stats[2]++;
    r->fresh = 0;
    if (wt_arm(r->a, r->b)) {
        r->rest = WT_REST;
        return;
    }
    r->hist = 0;
    r->gen = ++g_wt.next_gen;
}

#define WT_BATCH 512 /* weights per braze_live_check round */

int braze_live_check(int n, const void *const *ptrs, const size_t *bytes, uint64_t *gens) {
    for (int i = 0; i < n; i++) gens[i] = 0;
    if (n <= 0 || !__atomic_load_n(&g_wt_on, __ATOMIC_RELAXED)) return 0;
    if (n > WT_BATCH) return braze_live_check(WT_BATCH, ptrs, bytes, gens) +
                             braze_live_check(n - WT_BATCH, ptrs + WT_BATCH, bytes + WT_BATCH, gens + WT_BATCH);
    uintptr_t a[WT_BATCH], b[WT_BATCH];
    int idx[WT_BATCH], scan[WT_BATCH], ns = 0, tracked = 0;
    /* the lock spans scan and update: a call that found a page written and re-protected it
     * must have moved the generation before another call can read it */
    pthread_mutex_lock(&g_wt.mu);
    if (!wt_available()) goto out;
    for (int i = 0; i < n; i++) {
        uintptr_t p = (uintptr_t)ptrs[i];
        a[i] = (p + g_wt.page - 1) & ~(g_wt.page - 1), b[i] = (p + bytes[i]) & ~(g_wt.page - 1);
        if (!ptrs[i] || b[i] <= a[i] || b[i] - a[i] < WT_MIN_PAGES * g_wt.page) a[i] = b[i] = 0;
        else if (!wt_range_for(a[i], b[i])) goto out;
    }
    /* a later weight's range may have merged an earlier one's (and making one again may move
     * the others): look them all up again until none is missing; one still missing is untracked */
    for (int round = 0; round < 3; round++) {
        int missing = 0;
        for (int i = 0; i < n; i++) missing |= (idx[i] = b[i] ? wt_index(a[i], b[i]) : -1) < 0 && b[i];
        if (!missing || round == 2) break;
        for (int i = 0; i < n; i++)
            if (b[i] && idx[i] < 0) wt_range_for(a[i], b[i]);
    }
    uint64_t scanned = ++g_wt.marks;
    for (int i = 0; i < n; i++) { /* each armed range once; ranges are disjoint, so are their pages */
        int k = idx[i];
        if (k >= 0 && g_wt.r[k].gen && g_wt.r[k].mark != scanned) g_wt.r[k].mark = scanned, scan[ns++] = k;
    }
#pragma omp parallel for schedule(dynamic) if (ns > 8)
    for (int j = 0; j < ns; j++) {
        wt_range *r = &g_wt.r[scan[j]];
        r->res = wt_scan(r->a, r->b, PAGE_IS_WRITTEN, WT_REARM);
    }
    uint64_t updated = ++g_wt.marks;
    for (int i = 0; i < n; i++) {
        if (idx[i] < 0) continue;
        wt_range *r = &g_wt.r[idx[i]];
        if (r->mark != updated) {
            wt_update(r, r->mark == scanned ? r->res : 0, a[i], b[i]);
            r->mark = updated;
        }
        gens[i] = r->gen && r->a <= a[i] && b[i] <= r->b ? r->gen : r->fresh ? WT_PENDING : 0;
        tracked += gens[i] != 0;
    }
out:
    pthread_mutex_unlock(&g_wt.mu);
    return tracked;
}

static uint64_t wtrack_gen(const void *p, size_t n) {
    uint64_t gen;
    braze_live_check(1, &p, &n, &gen);
    return gen;
}

/* A hash of the bytes of [p, p+n) on the partial pages at its ends, which wtrack_gen leaves out. */
static uint64_t wtrack_edges(const void *p, size_t n) {
    uintptr_t s = (uintptr_t)p, e = s + n;
    uintptr_t a = (s + g_wt.page - 1) & ~(g_wt.page - 1), b = e & ~(g_wt.page - 1);
    return braze_fingerprint(p, a - s) * 0x9E3779B185EBCA87ull ^ braze_fingerprint((const void *)b, e - b);
}

int braze_dnnl_write_tracking(int64_t *checks, int64_t *written, int64_t *arms) {
    pthread_mutex_lock(&g_wt.mu);
    int on = __atomic_load_n(&g_wt_on, __ATOMIC_RELAXED) && wt_available();
    if (checks) *checks = g_wt_stats[0];
    if (written) *written = g_wt_stats[1];
    if (arms) *arms = g_wt_stats[2];
    pthread_mutex_unlock(&g_wt.mu);
    return on;
}
