/* braze_omp.h: braze's own thread teams behind the OpenMP calls its C makes (issue 29;
 * docs/threads.md).
 *
 * Why: libgomp's threads spin for about 300,000 pause loops (a few ms) whenever they wait: for
 * the next parallel region, at a barrier, at a region's end. Its spin count is read once, when
 * it loads, and torch loads it first. On a shared machine a waiting thread then burns the time
 * slice its partner needs, at each of a call's hundreds of regions (BERT-base took 2-3x its
 * quiet time beside one busy process, where ONNX Runtime's blocking threads took 1.5x), and
 * after each call it keeps about 1% of a core busy. With OMP_WAIT_POLICY=passive the quiet
 * calls were 1.5x slower instead, since each region then woke its threads from sleep.
 *
 * What: each library defines the GOMP_* and omp_* entry points that GCC's OpenMP code calls,
 * hidden, so the library's own regions bind to them and never to libgomp (the helper also
 * points libdnnl's imports at them: braze_dnnl_threads.c). They run a team of braze's threads
 * that spin for at most 100 us and then sleep on a futex. Once the workers are being
 * descheduled (bz_omp_pace), a worker sleeps at once and the master spins up to 1 ms, so the
 * master keeps its core and a worker takes turns on the other (BZ_OMP_SPIN_NS); a worker woken
 * on the master's CPU moves off it (bz_omp_part).
 *
 * Only what GCC emits for braze's C and what libdnnl imports: parallel regions (GOMP_parallel
 * and the old start/end pair), barriers, static and dynamic loops, critical and atomic
 * sections, and the thread-count calls. A region inside a region runs on its thread alone.
 *
 * One runtime per process: its state (a pool of workers per calling thread, each thread's
 * omp_set_num_threads) lives in the library whose table the others use (braze_omp_use): the
 * oneDNN helper's where there is one (runtime/loader.py; an artifact's library attaches
 * itself to its helper). BRAZE_OMP=openmp, read when the runtime first runs, forwards every
 * entry point to libgomp instead (for A/B measurements, and as a way out). */
#ifndef BRAZE_OMP_H
#define BRAZE_OMP_H

#include <dlfcn.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "braze_abi.h"

#define BZ_OMP_ABI 1
/* While a pool's workers are being descheduled (bz_omp_pace), a worker sleeps as soon as it has
 * no share, and the master spins up to 1 ms for a region's end before it sleeps (ONNX Runtime's
 * discipline); at a barrier inside a region both spin 5 us. A worker that spins stays runnable,
 * and Linux then balances it onto the master's core, where the two share one core while the
 * busy neighbour has the other to itself (perf sched: the neighbour's slices averaged 13 ms,
 * up to 244); a master that sleeps gives its core away. Beside one busy process on 2 cores a
 * team of 2 ran BERT-base (2x48) in 55.3-79.1 ms over 35 runs of this and its variants, 15 of
 * them under 66 (the runs are bimodal, by where the scheduler puts the threads), against
 * 76.9-78.6 in 7 runs with every wait at 5 us (ONNX Runtime: 66.5-67.4; one thread: 75;
 * docs/threads.md). The slow mode is both threads on one core; bz_omp_part ends it. Quiet, all
 * spin (BZ_OMP_SPIN_QUIET_NS): a worker that slept at once paid a wake-up per region (1x16:
 * 9.8 ms against 9.0 at 1 us) */
#define BZ_OMP_SPIN_NS 0L
#define BZ_OMP_MASTER_SPIN_NS 1000000L
#define BZ_OMP_BARRIER_SPIN_NS 5000L
/* While the workers keep up. 100 us and not 50: a call through torch.compile starts after dynamo's
 * guards and AOT's wrappers, 53-75 us of Python on the Xeon of docs/threads.md, so at 50 us its
 * first region found the workers asleep, and the master ran their shares: a 48 us model took 159.5
 * us a call through the plug-in at 50 us and 120.7 at 100 us (results/plugin_overhead_amx.md and
 * _spin50_amx.md); beside one busy process no change showed beyond run-to-run noise */
#define BZ_OMP_SPIN_QUIET_NS 100000L
/* A paced pool runs one window unpaced after this many paced windows. Paced, a worker sleeps at
 * once, so where regions are shorter than a worker's wake-up the master runs their shares even on
 * a quiet machine, and a window with 5% or fewer may never come. So it was on a Xeon with AMX
 * (docs/threads.md): BERT-base in bf16 took 6.8-9.2 ms a call at 1x16, against 6.4-7.0 with this
 * (and a new pool unpaced); beside a busy process, BERT-base at 2x48 in float32 took 77.2-78.9 ms
 * against 76.6-77.5 */
#define BZ_OMP_PROBE_WINDOWS 16
/* ... and twice as many after each unpaced window that fell behind (a busy machine), up to this */
#define BZ_OMP_PROBE_MAX_WINDOWS 1024
#define BZ_OMP_MAX_THREADS 1024
#define BZ_OMP_WS_SLOTS 8     /* dynamic loops in flight at once in one region (nowait) */
#define BZ_OMP_MASK_BYTES (BZ_OMP_MAX_THREADS / 8) /* an affinity mask of up to 1024 CPUs */

typedef void (*bz_omp_fn)(void *);

/* The entry points, as a table: a library runs its OpenMP calls through the table it was given */
typedef struct bz_omp_ops {
    int32_t abi, size;
    const char *name; /* "braze" or "openmp" */
    void (*parallel)(bz_omp_fn fn, void *data, unsigned n, unsigned flags);
    void (*parallel_start)(bz_omp_fn fn, void *data, unsigned n);
    void (*parallel_end)(void);
    void (*parallel_loop_dynamic)(bz_omp_fn fn, void *data, unsigned n, long s, long e, long incr, long chunk,
                                  unsigned flags);
    void (*barrier)(void);
    bool (*loop_static_start)(long s, long e, long incr, long chunk, long *is, long *ie);
    bool (*loop_static_next)(long *is, long *ie);
    bool (*loop_dynamic_start)(long s, long e, long incr, long chunk, long *is, long *ie);
    bool (*loop_dynamic_next)(long *is, long *ie);
    void (*loop_end)(void);
    void (*loop_end_nowait)(void);
    void (*critical_start)(void);
    void (*critical_end)(void);
    int (*get_thread_num)(void);
    int (*get_num_threads)(void);
    int (*get_max_threads)(void);
    void (*set_num_threads)(int n);
    int (*in_parallel)(void);
    int64_t (*counter)(int which); /* BZ_OMP_* counters below */
} bz_omp_ops;

/* regions run, workers started, waits that slept, workers' shares their master ran, times a
 * worker moved off its master's CPU */
enum { BZ_OMP_REGIONS, BZ_OMP_WORKERS, BZ_OMP_SLEEPS, BZ_OMP_TAKEN, BZ_OMP_PARTED, BZ_OMP_COUNTERS };

/* ------------------------------------------------------------------ waiting */

static long bz_omp_futex(uint32_t *addr, int op, uint32_t val) {
    return syscall(SYS_futex, addr, op | FUTEX_PRIVATE_FLAG, val, NULL, NULL, 0);
}

static int64_t bz_omp_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t bz_omp_count[BZ_OMP_COUNTERS];

/* Waits until *word != val: spins `spin` ns, then sleeps on the futex with *sleepers
 * counting it. Wakers store the word and then wake if *sleepers is nonzero; both sides use
 * sequentially consistent accesses, so one of them always sees the other. */
static uint32_t bz_omp_wait(uint32_t *word, uint32_t val, int *sleepers, int64_t spin) {
    uint32_t now;
    int64_t t0 = 0;
    for (int i = 0;; i++) {
        if ((now = __atomic_load_n(word, __ATOMIC_ACQUIRE)) != val) return now;
        __builtin_ia32_pause();
        if ((i & 63) == 63) {
            int64_t t = bz_omp_ns();
            if (!t0) t0 = t;
            else if (t - t0 > spin) break;
        }
    }
    __atomic_fetch_add(sleepers, 1, __ATOMIC_SEQ_CST);
    __atomic_fetch_add(&bz_omp_count[BZ_OMP_SLEEPS], 1, __ATOMIC_RELAXED);
    while ((now = __atomic_load_n(word, __ATOMIC_SEQ_CST)) == val) bz_omp_futex(word, FUTEX_WAIT, val);
    __atomic_fetch_sub(sleepers, 1, __ATOMIC_SEQ_CST);
    return now;
}

static void bz_omp_post(uint32_t *word, uint32_t val, int *sleepers) {
    __atomic_store_n(word, val, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(sleepers, __ATOMIC_SEQ_CST)) bz_omp_futex(word, FUTEX_WAKE, INT_MAX);
}

static void bz_omp_bump(uint32_t *word, int *sleepers) {
    __atomic_add_fetch(word, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(sleepers, __ATOMIC_SEQ_CST)) bz_omp_futex(word, FUTEX_WAKE, INT_MAX);
}

/* ------------------------------------------------------------------ teams */

typedef struct {
    long seq;                /* the work-share this slot holds (a thread's n-th loop in the region) */
    long next, total, chunk; /* iterations handed out, their count, per grab */
    long start, incr;
} bz_omp_ws;

typedef struct {
    long start, end, incr, chunk; /* a combined parallel loop's iterations (GOMP_parallel_loop_*) */
} bz_omp_loop;

struct bz_omp_pool;

typedef struct __attribute__((aligned(64))) {
    struct bz_omp_pool *pool;
    pthread_t thread;
    int tid, sleepers;
    uint32_t go; /* the job generation this worker was last given */
    int moved;           /* 1: its affinity excludes its master's CPU (bz_omp_part) */
    unsigned long *mask; /* its own affinity, while moved (BZ_OMP_MASK_BYTES; made at the first move) */
} bz_omp_worker;

typedef struct bz_omp_pool {
    /* the current job (written by the master before it posts the workers' go words) */
    bz_omp_fn fn;
    void *data;
    int n;
    long ws0; /* 1: a combined parallel loop, its work-share 1 already set up */
    uint32_t gen;
    int64_t spin, master_spin, bar_spin; /* how long its workers, its master and a barrier spin */
    int window, window_taken;       /* regions since the last pace, worker shares the master ran */
    int paced_windows;              /* windows paced since the last unpaced one */
    int probe_after, probing;       /* paced windows before the next unpaced one; 1: this one is it */
    int woke_idle;                  /* 1: this job woke a worker that slept through the master's pause */
    int64_t last_end;               /* when the master's last job ended (bz_omp_ns) */
    int master_cpu;                 /* the CPU the master launched the job on, while paced; else -1 */
    int pending __attribute__((aligned(64)));   /* shares of the job (1 .. n-1) not yet done */
    uint32_t done;                              /* bumped when pending reaches 0 */
    uint32_t *claims; /* claims[k] == gen: share k of job gen is free; 0: taken (bz_omp_help) */
    int done_sleepers;
    int bar_arrived __attribute__((aligned(64)));
    uint32_t bar_gen;
    int bar_sleepers;
    pthread_mutex_t ws_mu;
    bz_omp_ws ws[BZ_OMP_WS_SLOTS];
    int nworkers, quit;
    long fork_epoch;
    bz_omp_worker *workers;
} bz_omp_pool;

/* what the calling thread is running: its team (NULL: none, or a region of one) */
typedef struct {
    bz_omp_pool *pool;
    int tid, n, level, active;    /* active: inside a region of more than one thread */
    long ws_seq;                  /* loops this thread has entered in its region */
    long s_next, s_total, s_chunk; /* a static loop, in iterations */
    long s_start, s_incr;
    bz_omp_ws solo;               /* a dynamic loop in a region of one */
} bz_omp_ctx;

static __thread bz_omp_ctx bz_omp_cur = {.n = 1};
static __thread int bz_omp_nthreads_var; /* omp_set_num_threads; 0: the default */
static __thread bz_omp_pool *bz_omp_mine;  /* this thread's pool, as a master */
static int bz_omp_default_n;
static int (*bz_omp_gomp_max)(void); /* libgomp's omp_get_max_threads, where the process has libgomp */
static long bz_omp_epoch;                  /* bumped in a forked child: its pools have no threads */
static pthread_once_t bz_omp_once = PTHREAD_ONCE_INIT;
static pthread_key_t bz_omp_key;
static pthread_mutex_t bz_omp_big = PTHREAD_MUTEX_INITIALIZER; /* critical and atomic sections */

static void bz_omp_run(bz_omp_pool *p, int tid) {
    bz_omp_ctx saved = bz_omp_cur;
    bz_omp_cur = (bz_omp_ctx){.pool = p, .tid = tid, .n = p->n, .level = saved.level + 1, .active = 1,
                              .ws_seq = p->ws0};
    p->fn(p->data);
    bz_omp_cur = saved;
}

/* Runs the shares of job g that no thread has taken, its own (`first`) first. A share is a
 * thread number's part of the region: whoever takes it runs fn as that thread. So a region does
 * not wait for a worker the scheduler has not run yet: once the master's share is done, it takes
 * the shares still free and runs them itself. A share that waits at a barrier cannot be taken
 * that way (the master passes no barrier before every share has reached it), so only a region
 * without one is ever run by fewer threads. The claim is a compare-and-swap from g: a worker
 * that wakes late, after the master published another job, finds no share of g free and reads
 * nothing of the newer job's. */
static int bz_omp_help(bz_omp_pool *p, uint32_t g, int first) {
    int n = __atomic_load_n(&p->n, __ATOMIC_ACQUIRE), ran = 0;
    if (n < 2 || n > BZ_OMP_MAX_THREADS) return 0;
    for (int i = 0; i < n - 1; i++) {
        int k = 1 + (first - 1 + i) % (n - 1);
        uint32_t want = g;
        if (!__atomic_compare_exchange_n(&p->claims[k], &want, 0, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) continue;
        bz_omp_run(p, k);
        ran++;
        if (__atomic_sub_fetch(&p->pending, 1, __ATOMIC_SEQ_CST) == 0) bz_omp_bump(&p->done, &p->done_sleepers);
    }
    return ran;
}

/* glibc's and musl's, declared by <sched.h> only under _GNU_SOURCE: through the vDSO (or rseq),
 * no system call, so a paced region's launch pays a few ns for it */
extern int sched_getcpu(void);

static int bz_omp_getcpu(void) { return sched_getcpu(); }

/* While paced, a worker woken on the CPU its master launched the job from leaves that CPU: its
 * affinity becomes its own mask without it; once the pool is quiet again the mask is restored.
 * Linux's wake-up placement often puts a sleeping worker on its waker's CPU, and then the two
 * threads share one core while the busy neighbour has the other to itself: no balancing moves
 * them, since each core has one runnable CPU hog. Beside one busy process, BERT-base and GPT-2
 * at 2x48 ran 52-55 ms in 7 of 7 runs this way, against 61-77 (6 of 7 over 72) without
 * (docs/threads.md). A mask without another CPU leaves the worker where it is. */
static void bz_omp_part(bz_omp_worker *w, const bz_omp_pool *p) {
    enum { BITS = 8 * sizeof(unsigned long) };
    int mc = __atomic_load_n(&p->master_cpu, __ATOMIC_RELAXED);
    if (mc < 0) {
        if (w->moved) syscall(SYS_sched_setaffinity, 0, BZ_OMP_MASK_BYTES, w->mask);
        w->moved = 0;
        return;
    }
    if (mc >= 8 * BZ_OMP_MASK_BYTES || bz_omp_getcpu() != mc) return;
    if (!w->mask && !(w->mask = (unsigned long *)calloc(1, BZ_OMP_MASK_BYTES))) return;
    if (!w->moved && syscall(SYS_sched_getaffinity, 0, BZ_OMP_MASK_BYTES, w->mask) <= 0) return;
    unsigned long m[BZ_OMP_MASK_BYTES / sizeof(unsigned long)];
    unsigned long any = 0;
    memcpy(m, w->mask, sizeof m);
    m[mc / BITS] &= ~(1UL << (mc % BITS));
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) any |= m[i];
    if (any && syscall(SYS_sched_setaffinity, 0, sizeof m, m) == 0) {
        w->moved = 1;
        __atomic_fetch_add(&bz_omp_count[BZ_OMP_PARTED], 1, __ATOMIC_RELAXED);
    }
}

static void *bz_omp_worker_main(void *arg) {
    bz_omp_worker *w = (bz_omp_worker *)arg;
    bz_omp_pool *p = w->pool;
    uint32_t seen = 0; /* never posted yet: a worker starts before its first job is posted */
    for (;;) {
        seen = bz_omp_wait(&w->go, seen, &w->sleepers, __atomic_load_n(&p->spin, __ATOMIC_RELAXED));
        if (__atomic_load_n(&p->quit, __ATOMIC_ACQUIRE)) break;
        bz_omp_part(w, p);
        bz_omp_help(p, seen, w->tid);
    }
    return NULL;
}

static void bz_omp_pool_free(void *arg) {
    bz_omp_pool *p = (bz_omp_pool *)arg;
    if (!p) return;
    if (p->fork_epoch == __atomic_load_n(&bz_omp_epoch, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&p->quit, 1, __ATOMIC_SEQ_CST);
        for (int i = 1; i <= p->nworkers; i++) bz_omp_bump(&p->workers[i].go, &p->workers[i].sleepers);
        for (int i = 1; i <= p->nworkers; i++) pthread_join(p->workers[i].thread, NULL);
    } /* else a forked child's copy: its workers never existed there */
    for (int i = 1; i <= p->nworkers; i++) free(p->workers[i].mask);
    pthread_mutex_destroy(&p->ws_mu);
    free(p->claims);
    free(p->workers);
    free(p);
}

static void bz_omp_after_fork(void) {
    __atomic_add_fetch(&bz_omp_epoch, 1, __ATOMIC_RELEASE);
    bz_omp_mine = NULL; /* leaked on purpose: its workers belong to the parent */
    bz_omp_cur = (bz_omp_ctx){.n = 1};
}

static int bz_omp_cpus(void) { /* the affinity mask's CPUs, as libgomp counts them */
    unsigned long mask[BZ_OMP_MAX_THREADS / (8 * sizeof(unsigned long))] = {0};
    long got = syscall(SYS_sched_getaffinity, 0, sizeof mask, mask);
    int cpus = 0;
    for (long i = 0; got > 0 && i < got / (long)sizeof(unsigned long); i++) cpus += __builtin_popcountl(mask[i]);
    if (cpus > 0) return cpus;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static void bz_omp_init(void) {
    pthread_key_create(&bz_omp_key, bz_omp_pool_free);
    pthread_atfork(NULL, NULL, bz_omp_after_fork);
    int n = 0;
    const char *env = getenv("OMP_NUM_THREADS"); /* as libgomp reads it: the first level's count */
    if (env) n = atoi(env);
    bz_omp_default_n = n > 0 ? (n < BZ_OMP_MAX_THREADS ? n : BZ_OMP_MAX_THREADS) : bz_omp_cpus();
    /* the count a thread set through libgomp (torch.set_num_threads does) stays the default, as
     * when braze's code ran on libgomp; a process without libgomp (a C program) has its own */
    void *gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (gomp) *(void **)&bz_omp_gomp_max = dlsym(gomp, "omp_get_max_threads");
}

static int bz_omp_max_threads(void) {
    pthread_once(&bz_omp_once, bz_omp_init);
    if (bz_omp_nthreads_var > 0) return bz_omp_nthreads_var;
    int n = bz_omp_gomp_max ? bz_omp_gomp_max() : bz_omp_default_n;
    return n < 1 ? 1 : n > BZ_OMP_MAX_THREADS ? BZ_OMP_MAX_THREADS : n;
}

/* this thread's pool with at least `workers` workers, or NULL (no memory, no threads) */
static bz_omp_pool *bz_omp_pool_for(int workers) {
    bz_omp_pool *p = bz_omp_mine;
    if (p && p->fork_epoch != __atomic_load_n(&bz_omp_epoch, __ATOMIC_ACQUIRE)) p = bz_omp_mine = NULL;
    if (!p) {
        p = (bz_omp_pool *)calloc(1, sizeof *p);
        if (!p) return NULL;
        p->workers = (bz_omp_worker *)calloc(BZ_OMP_MAX_THREADS, sizeof *p->workers);
        p->claims = (uint32_t *)calloc(BZ_OMP_MAX_THREADS, sizeof *p->claims);
        if (!p->workers || !p->claims) {
            free(p->workers);
            free(p->claims);
            free(p);
            return NULL;
        }
        pthread_mutex_init(&p->ws_mu, NULL);
        p->spin = BZ_OMP_SPIN_QUIET_NS; /* unpaced until its workers fall behind */
        p->master_spin = BZ_OMP_SPIN_QUIET_NS;
        p->bar_spin = BZ_OMP_SPIN_QUIET_NS;
        p->fork_epoch = __atomic_load_n(&bz_omp_epoch, __ATOMIC_ACQUIRE);
        p->master_cpu = -1;
        p->probe_after = BZ_OMP_PROBE_WINDOWS;
        bz_omp_mine = p;
        pthread_setspecific(bz_omp_key, p);
    }
    while (p->nworkers < workers) {
        bz_omp_worker *w = &p->workers[p->nworkers + 1];
        w->pool = p;
        w->tid = p->nworkers + 1;
        if (pthread_create(&w->thread, NULL, bz_omp_worker_main, w) != 0) break;
        p->nworkers++;
        __atomic_fetch_add(&bz_omp_count[BZ_OMP_WORKERS], 1, __ATOMIC_RELAXED);
    }
    return p;
}

/* the team size a region asking for n gets: 1 inside another region */
static int bz_omp_team_size(unsigned n) {
    if (bz_omp_cur.level > 0) return 1;
    int want = n ? (int)n : bz_omp_max_threads();
    return want < 1 ? 1 : want > BZ_OMP_MAX_THREADS ? BZ_OMP_MAX_THREADS : want;
}

static void bz_omp_ws_set(bz_omp_ws *w, long seq, long s, long e, long incr, long chunk);

/* Whether a job of n threads launched at `now` wakes a worker that slept through a pause of the
 * master's: unpaced, a pause longer than the spin (a decode step's Python between two calls) lets
 * every worker sleep, and waking them then says nothing of the load (bz_omp_pace). */
static int bz_omp_idle_wake(const bz_omp_pool *p, int n, int64_t now) {
    if (p->spin == BZ_OMP_SPIN_NS || now - p->last_end <= BZ_OMP_SPIN_QUIET_NS) return 0;
    for (int i = 1; i < n; i++)
        if (__atomic_load_n(&p->workers[i].sleepers, __ATOMIC_SEQ_CST)) return 1;
    return 0;
}

/* Starts fn on the team's workers, the caller being thread 0 (it runs its share next).
 * `loop`: a combined parallel loop's iterations, set up as the region's first work-share. */
static void bz_omp_launch(bz_omp_fn fn, void *data, unsigned asked, const bz_omp_loop *loop) {
    int n = bz_omp_team_size(asked);
    bz_omp_pool *p = n > 1 ? bz_omp_pool_for(n - 1) : NULL;
    if (p && p->nworkers + 1 < n) n = p->nworkers + 1; /* fewer threads than asked could start */
    if (!p) n = 1;
    __atomic_fetch_add(&bz_omp_count[BZ_OMP_REGIONS], 1, __ATOMIC_RELAXED);
    bz_omp_ctx ctx = {.pool = n > 1 ? p : NULL, .n = n, .level = bz_omp_cur.level + 1,
                      .active = bz_omp_cur.active || n > 1, .ws_seq = loop != NULL};
    if (n > 1) {
        /* every share of the last job is done, so no thread reads these until the claims below */
        p->fn = fn;
        p->data = data;
        p->ws0 = loop != NULL;
        p->bar_arrived = 0;
        for (int i = 0; i < BZ_OMP_WS_SLOTS; i++) p->ws[i].seq = 0;
        if (loop) bz_omp_ws_set(&p->ws[1], 1, loop->start, loop->end, loop->incr, loop->chunk);
        __atomic_store_n(&p->n, n, __ATOMIC_RELEASE);
        __atomic_store_n(&p->pending, n - 1, __ATOMIC_SEQ_CST);
        if (++p->gen == 0) p->gen = 1; /* 0 marks a taken share */
        __atomic_store_n(&p->master_cpu, p->spin == BZ_OMP_SPIN_NS ? bz_omp_getcpu() : -1, __ATOMIC_RELAXED);
        for (int i = 1; i < n; i++) __atomic_store_n(&p->claims[i], p->gen, __ATOMIC_SEQ_CST);
        p->woke_idle = bz_omp_idle_wake(p, n, bz_omp_ns());
        for (int i = 1; i < n; i++) bz_omp_post(&p->workers[i].go, p->gen, &p->workers[i].sleepers);
    } else if (loop) {
        bz_omp_ws_set(&ctx.solo, 1, loop->start, loop->end, loop->incr, loop->chunk);
    }
    bz_omp_cur = ctx;
}

/* How long a pool's threads spin, from how often its workers kept up. Each 64 regions, if the
 * master ran a worker's share in more than 15% of them, the workers are being descheduled (here
 * 21-32% of them beside one busy process, 2-7% on a quiet machine): the workers sleep at once
 * and the master spins long (BZ_OMP_SPIN_NS), until a window has 5% or fewer (so a window of
 * a few kept-up regions does not bring the spinning workers back), and for one window after
 * BZ_OMP_PROBE_WINDOWS paced ones (more after each such window that fell behind). Otherwise all
 * spin BZ_OMP_SPIN_QUIET_NS, so a worker is still awake for the next region: with 5 us always,
 * ResNet-50 at 1x64x64 (about a hundred regions in 3 ms) paid a wake-up in many of them and took
 * 1.028x libgomp's time; paced, 0.977x. Set by the master alone. */
static void bz_omp_pace(bz_omp_pool *p, int taken) {
    int paced = p->spin == BZ_OMP_SPIN_NS;
    p->window_taken += taken > 0;
    if (++p->window < 64) return;
    int busy = p->window_taken * 100 > (paced ? 5 : 15) * p->window;
    if (!busy && (paced || p->probing)) p->probe_after = BZ_OMP_PROBE_WINDOWS; /* quiet again */
    else if (p->probing && p->probe_after < BZ_OMP_PROBE_MAX_WINDOWS) p->probe_after *= 2; /* still busy */
    p->probing = busy && paced && ++p->paced_windows >= p->probe_after;
    if (p->probing) busy = 0;
    if (!busy) p->paced_windows = 0;
    __atomic_store_n(&p->spin, busy ? BZ_OMP_SPIN_NS : BZ_OMP_SPIN_QUIET_NS, __ATOMIC_RELAXED);
    p->master_spin = busy ? BZ_OMP_MASTER_SPIN_NS : BZ_OMP_SPIN_QUIET_NS;
    __atomic_store_n(&p->bar_spin, busy ? BZ_OMP_BARRIER_SPIN_NS : BZ_OMP_SPIN_QUIET_NS, __ATOMIC_RELAXED);
    p->window = p->window_taken = 0;
}

/* thread 0's share is done: run the shares no worker has started, wait for the rest */
static void bz_omp_join(bz_omp_ctx saved) {
    bz_omp_pool *p = bz_omp_cur.pool;
    if (p) {
        int taken = bz_omp_help(p, p->gen, 1);
        if (taken) __atomic_fetch_add(&bz_omp_count[BZ_OMP_TAKEN], taken, __ATOMIC_RELAXED);
        bz_omp_pace(p, p->woke_idle ? 0 : taken);
        uint32_t d = __atomic_load_n(&p->done, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&p->pending, __ATOMIC_SEQ_CST) != 0)
            d = bz_omp_wait(&p->done, d, &p->done_sleepers, p->master_spin);
        p->last_end = bz_omp_ns();
    }
    bz_omp_cur = saved;
}

static void bz_omp_parallel(bz_omp_fn fn, void *data, unsigned n, unsigned flags) {
    (void)flags;
    bz_omp_ctx saved = bz_omp_cur;
    bz_omp_launch(fn, data, n, NULL);
    fn(data);
    bz_omp_join(saved);
}

/* GOMP_parallel_start / _end: the caller runs fn itself between them (libdnnl's form) */
static __thread bz_omp_ctx bz_omp_outer[8];
static __thread int bz_omp_depth;

static void bz_omp_parallel_start(bz_omp_fn fn, void *data, unsigned n) {
    int d = bz_omp_depth < 8 ? bz_omp_depth : 7;
    bz_omp_outer[d] = bz_omp_cur;
    bz_omp_depth++;
    bz_omp_launch(fn, data, n, NULL);
}

static void bz_omp_parallel_end(void) {
    int d = --bz_omp_depth < 8 ? bz_omp_depth : 7;
    bz_omp_join(bz_omp_outer[d]);
}

static void bz_omp_barrier(void) {
    bz_omp_pool *p = bz_omp_cur.pool;
    if (!p) return;
    uint32_t g = __atomic_load_n(&p->bar_gen, __ATOMIC_SEQ_CST);
    if (__atomic_add_fetch(&p->bar_arrived, 1, __ATOMIC_SEQ_CST) == bz_omp_cur.n) {
        __atomic_store_n(&p->bar_arrived, 0, __ATOMIC_SEQ_CST);
        bz_omp_post(&p->bar_gen, g + 1, &p->bar_sleepers);
    } else {
        bz_omp_wait(&p->bar_gen, g, &p->bar_sleepers, __atomic_load_n(&p->bar_spin, __ATOMIC_RELAXED));
    }
}

/* ------------------------------------------------------------------ loops */

static long bz_omp_trip(long s, long e, long incr) {
    if (incr > 0) return e > s ? (e - s + incr - 1) / incr : 0;
    return s > e ? (s - e - incr - 1) / -incr : 0;
}

static bool bz_omp_static_next(long *is, long *ie) {
    bz_omp_ctx *c = &bz_omp_cur;
    if (c->s_next >= c->s_total) return false;
    long b = c->s_next, e = b + c->s_chunk < c->s_total ? b + c->s_chunk : c->s_total;
    c->s_next = b + (long)c->n * c->s_chunk; /* round robin: this thread's next chunk */
    *is = c->s_start + b * c->s_incr;
    *ie = c->s_start + e * c->s_incr;
    return true;
}

static bool bz_omp_static_start(long s, long e, long incr, long chunk, long *is, long *ie) {
    bz_omp_ctx *c = &bz_omp_cur;
    long total = bz_omp_trip(s, e, incr);
    c->s_start = s;
    c->s_incr = incr;
    c->s_total = total;
    if (chunk > 0) {
        c->s_chunk = chunk;
        c->s_next = (long)c->tid * chunk;
    } else { /* one block per thread, the first total % n threads one longer */
        long q = total / c->n, r = total % c->n, t = c->tid;
        long b = t * q + (t < r ? t : r);
        c->s_next = b;
        c->s_chunk = q + (t < r);
        c->s_total = b + c->s_chunk;
        if (c->s_chunk == 0) return false;
        bool ok = bz_omp_static_next(is, ie);
        c->s_next = c->s_total;
        return ok;
    }
    return bz_omp_static_next(is, ie);
}

static bool bz_omp_ws_grab(bz_omp_ws *w, long *is, long *ie) {
    long b = __atomic_fetch_add(&w->next, w->chunk, __ATOMIC_RELAXED);
    if (b >= w->total) return false;
    long e = b + w->chunk < w->total ? b + w->chunk : w->total;
    *is = w->start + b * w->incr;
    *ie = w->start + e * w->incr;
    return true;
}

static bz_omp_ws *bz_omp_ws_cur(void) {
    bz_omp_ctx *c = &bz_omp_cur;
    return c->pool ? &c->pool->ws[c->ws_seq % BZ_OMP_WS_SLOTS] : &c->solo;
}

static void bz_omp_ws_set(bz_omp_ws *w, long seq, long s, long e, long incr, long chunk) {
    w->start = s;
    w->incr = incr;
    w->total = bz_omp_trip(s, e, incr);
    w->chunk = chunk > 0 ? chunk : 1;
    __atomic_store_n(&w->next, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&w->seq, seq, __ATOMIC_RELEASE);
}

static bool bz_omp_dynamic_start(long s, long e, long incr, long chunk, long *is, long *ie) {
    bz_omp_ctx *c = &bz_omp_cur;
    long seq = ++c->ws_seq;
    bz_omp_ws *w = bz_omp_ws_cur();
    if (!c->pool) {
        bz_omp_ws_set(w, seq, s, e, incr, chunk);
    } else if (__atomic_load_n(&w->seq, __ATOMIC_ACQUIRE) != seq) { /* the first thread here sets it up */
        pthread_mutex_lock(&c->pool->ws_mu);
        if (__atomic_load_n(&w->seq, __ATOMIC_ACQUIRE) != seq) bz_omp_ws_set(w, seq, s, e, incr, chunk);
        pthread_mutex_unlock(&c->pool->ws_mu);
    }
    return bz_omp_ws_grab(w, is, ie);
}

static bool bz_omp_dynamic_next(long *is, long *ie) { return bz_omp_ws_grab(bz_omp_ws_cur(), is, ie); }

static void bz_omp_parallel_loop_dynamic(bz_omp_fn fn, void *data, unsigned n, long s, long e, long incr,
                                         long chunk, unsigned flags) {
    (void)flags;
    bz_omp_ctx saved = bz_omp_cur;
    const bz_omp_loop loop = {s, e, incr, chunk};
    bz_omp_launch(fn, data, n, &loop);
    fn(data);
    bz_omp_join(saved);
}

static void bz_omp_loop_end(void) { bz_omp_barrier(); }
static void bz_omp_loop_end_nowait(void) {}
static void bz_omp_critical_start(void) { pthread_mutex_lock(&bz_omp_big); }
static void bz_omp_critical_end(void) { pthread_mutex_unlock(&bz_omp_big); }
static int bz_omp_get_thread_num(void) { return bz_omp_cur.tid; }
static int bz_omp_get_num_threads(void) { return bz_omp_cur.n; }
static void bz_omp_set_num_threads(int n) { bz_omp_nthreads_var = n > 0 ? n : 1; }
static int bz_omp_in_parallel(void) { return bz_omp_cur.active; }
static int64_t bz_omp_counter(int which) {
    return which >= 0 && which < BZ_OMP_COUNTERS ? __atomic_load_n(&bz_omp_count[which], __ATOMIC_RELAXED) : -1;
}

static const bz_omp_ops bz_omp_braze = {
    BZ_OMP_ABI, (int32_t)sizeof(bz_omp_ops), "braze",
    bz_omp_parallel, bz_omp_parallel_start, bz_omp_parallel_end, bz_omp_parallel_loop_dynamic,
    bz_omp_barrier, bz_omp_static_start, bz_omp_static_next, bz_omp_dynamic_start, bz_omp_dynamic_next,
    bz_omp_loop_end, bz_omp_loop_end_nowait, bz_omp_critical_start, bz_omp_critical_end,
    bz_omp_get_thread_num, bz_omp_get_num_threads, bz_omp_max_threads, bz_omp_set_num_threads,
    bz_omp_in_parallel, bz_omp_counter,
};

/* ------------------------------------------------------------------ libgomp, for BRAZE_OMP=openmp */

static bz_omp_ops bz_omp_gomp;

static int64_t bz_omp_no_counter(int which) { (void)which; return -1; }

static int bz_omp_gomp_load(void) {
    /* the process's libgomp (torch's, where torch loaded one: the same soname) */
    void *gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!gomp) return 1;
    bz_omp_ops o;
    memset(&o, 0, sizeof o);
    o.abi = BZ_OMP_ABI;
    o.size = (int32_t)sizeof(bz_omp_ops);
    o.name = "openmp";
#define BZ_OMP_SYM(field, sym) if (!(*(void **)&o.field = dlsym(gomp, sym))) return 1;
    BZ_OMP_SYM(parallel, "GOMP_parallel")
    BZ_OMP_SYM(parallel_start, "GOMP_parallel_start")
    BZ_OMP_SYM(parallel_end, "GOMP_parallel_end")
    BZ_OMP_SYM(parallel_loop_dynamic, "GOMP_parallel_loop_nonmonotonic_dynamic")
    BZ_OMP_SYM(barrier, "GOMP_barrier")
    BZ_OMP_SYM(loop_static_start, "GOMP_loop_static_start")
    BZ_OMP_SYM(loop_static_next, "GOMP_loop_static_next")
    BZ_OMP_SYM(loop_dynamic_start, "GOMP_loop_nonmonotonic_dynamic_start")
    BZ_OMP_SYM(loop_dynamic_next, "GOMP_loop_nonmonotonic_dynamic_next")
    BZ_OMP_SYM(loop_end, "GOMP_loop_end")
    BZ_OMP_SYM(loop_end_nowait, "GOMP_loop_end_nowait")
    BZ_OMP_SYM(critical_start, "GOMP_critical_start")
    BZ_OMP_SYM(critical_end, "GOMP_critical_end")
    BZ_OMP_SYM(get_thread_num, "omp_get_thread_num")
    BZ_OMP_SYM(get_num_threads, "omp_get_num_threads")
    BZ_OMP_SYM(get_max_threads, "omp_get_max_threads")
    BZ_OMP_SYM(set_num_threads, "omp_set_num_threads")
    BZ_OMP_SYM(in_parallel, "omp_in_parallel")
#undef BZ_OMP_SYM
    o.counter = bz_omp_no_counter;
    bz_omp_gomp = o;
    return 0;
}

/* ------------------------------------------------------------------ this library's table */

static const bz_omp_ops *bz_omp_table;
static pthread_once_t bz_omp_pick_once = PTHREAD_ONCE_INIT;

static void bz_omp_pick(void) {
    const char *env = getenv("BRAZE_OMP");
    const bz_omp_ops *t = &bz_omp_braze;
    if (env && !strcmp(env, "openmp") && bz_omp_gomp_load() == 0) t = &bz_omp_gomp;
    const bz_omp_ops *none = NULL;
    __atomic_compare_exchange_n(&bz_omp_table, &none, t, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static inline const bz_omp_ops *bz_omp(void) {
    const bz_omp_ops *t = __atomic_load_n(&bz_omp_table, __ATOMIC_ACQUIRE);
    if (__builtin_expect(t != NULL, 1)) return t;
    pthread_once(&bz_omp_pick_once, bz_omp_pick);
    return __atomic_load_n(&bz_omp_table, __ATOMIC_ACQUIRE);
}

/* The table this library runs its OpenMP calls through, and a way to run them through another
 * library's (one runtime per process). A table of another ABI is refused (returns 1). */
#ifndef BZ_OMP_EXPORT_PREFIX
#define BZ_OMP_EXPORT_PREFIX braze_omp
#endif
#define BZ_OMP_CAT2(a, b) a##b
#define BZ_OMP_CAT(a, b) BZ_OMP_CAT2(a, b)
BRAZE_EXPORT const bz_omp_ops *BZ_OMP_CAT(BZ_OMP_EXPORT_PREFIX, _ops)(void) { return bz_omp(); }
static int32_t bz_omp_adopt(const bz_omp_ops *t) {
    if (!t || t->abi != BZ_OMP_ABI || t->size != (int32_t)sizeof(bz_omp_ops)) return 1;
    __atomic_store_n(&bz_omp_table, t, __ATOMIC_RELEASE);
    return 0;
}
BRAZE_EXPORT int32_t BZ_OMP_CAT(BZ_OMP_EXPORT_PREFIX, _use)(const bz_omp_ops *t) { return bz_omp_adopt(t); }

/* ------------------------------------------------------------------ the entry points GCC calls */

#define BZ_OMP_HIDDEN __attribute__((visibility("hidden")))
BZ_OMP_HIDDEN void GOMP_parallel(bz_omp_fn fn, void *data, unsigned n, unsigned flags) {
    bz_omp()->parallel(fn, data, n, flags);
}
BZ_OMP_HIDDEN void GOMP_parallel_start(bz_omp_fn fn, void *data, unsigned n) { bz_omp()->parallel_start(fn, data, n); }
BZ_OMP_HIDDEN void GOMP_parallel_end(void) { bz_omp()->parallel_end(); }
BZ_OMP_HIDDEN void GOMP_parallel_loop_nonmonotonic_dynamic(bz_omp_fn fn, void *data, unsigned n, long s, long e,
                                                          long incr, long chunk, unsigned flags) {
    bz_omp()->parallel_loop_dynamic(fn, data, n, s, e, incr, chunk, flags);
}
BZ_OMP_HIDDEN void GOMP_parallel_loop_dynamic(bz_omp_fn fn, void *data, unsigned n, long s, long e, long incr,
                                             long chunk, unsigned flags) {
    bz_omp()->parallel_loop_dynamic(fn, data, n, s, e, incr, chunk, flags);
}
BZ_OMP_HIDDEN void GOMP_barrier(void) { bz_omp()->barrier(); }
BZ_OMP_HIDDEN bool GOMP_loop_static_start(long s, long e, long incr, long chunk, long *is, long *ie) {
    return bz_omp()->loop_static_start(s, e, incr, chunk, is, ie);
}
BZ_OMP_HIDDEN bool GOMP_loop_static_next(long *is, long *ie) { return bz_omp()->loop_static_next(is, ie); }
BZ_OMP_HIDDEN bool GOMP_loop_nonmonotonic_dynamic_start(long s, long e, long incr, long chunk, long *is, long *ie) {
    return bz_omp()->loop_dynamic_start(s, e, incr, chunk, is, ie);
}
BZ_OMP_HIDDEN bool GOMP_loop_nonmonotonic_dynamic_next(long *is, long *ie) {
    return bz_omp()->loop_dynamic_next(is, ie);
}
BZ_OMP_HIDDEN bool GOMP_loop_dynamic_start(long s, long e, long incr, long chunk, long *is, long *ie) {
    return bz_omp()->loop_dynamic_start(s, e, incr, chunk, is, ie);
}
BZ_OMP_HIDDEN bool GOMP_loop_dynamic_next(long *is, long *ie) { return bz_omp()->loop_dynamic_next(is, ie); }
BZ_OMP_HIDDEN void GOMP_loop_end(void) { bz_omp()->loop_end(); }
BZ_OMP_HIDDEN void GOMP_loop_end_nowait(void) { bz_omp()->loop_end_nowait(); }
BZ_OMP_HIDDEN void GOMP_critical_start(void) { bz_omp()->critical_start(); }
BZ_OMP_HIDDEN void GOMP_critical_end(void) { bz_omp()->critical_end(); }
static pthread_mutex_t bz_omp_atomic_mu = PTHREAD_MUTEX_INITIALIZER; /* atomics wider than the CPU's */
BZ_OMP_HIDDEN void GOMP_atomic_start(void) { pthread_mutex_lock(&bz_omp_atomic_mu); }
BZ_OMP_HIDDEN void GOMP_atomic_end(void) { pthread_mutex_unlock(&bz_omp_atomic_mu); }
BZ_OMP_HIDDEN int omp_get_thread_num(void) { return bz_omp()->get_thread_num(); }
BZ_OMP_HIDDEN int omp_get_num_threads(void) { return bz_omp()->get_num_threads(); }
BZ_OMP_HIDDEN int omp_get_max_threads(void) { return bz_omp()->get_max_threads(); }
BZ_OMP_HIDDEN void omp_set_num_threads(int n) { bz_omp()->set_num_threads(n); }
BZ_OMP_HIDDEN int omp_in_parallel(void) { return bz_omp()->in_parallel(); }
BZ_OMP_HIDDEN double omp_get_wtime(void) { return (double)bz_omp_ns() * 1e-9; }

/* every entry point above by name, for a library that points another's imports at them
 * (braze_dnnl_threads.c): add one here when adding one above */
#define BZ_OMP_ENTRY_POINTS(X)                                                                       \
    X(GOMP_parallel) X(GOMP_parallel_start) X(GOMP_parallel_end) X(GOMP_parallel_loop_nonmonotonic_dynamic) \
    X(GOMP_parallel_loop_dynamic) X(GOMP_barrier) X(GOMP_loop_static_start) X(GOMP_loop_static_next)   \
    X(GOMP_loop_nonmonotonic_dynamic_start) X(GOMP_loop_nonmonotonic_dynamic_next)                     \
    X(GOMP_loop_dynamic_start) X(GOMP_loop_dynamic_next) X(GOMP_loop_end) X(GOMP_loop_end_nowait)       \
    X(GOMP_critical_start) X(GOMP_critical_end) X(GOMP_atomic_start) X(GOMP_atomic_end)                \
    X(omp_get_thread_num) X(omp_get_num_threads) X(omp_get_max_threads) X(omp_set_num_threads)         \
    X(omp_in_parallel) X(omp_get_wtime)

/* the runtime's counters (regions run, workers started, sleeps), for tests and measurements */
BRAZE_EXPORT int64_t BZ_OMP_CAT(BZ_OMP_EXPORT_PREFIX, _counter)(int32_t which) { return bz_omp()->counter(which); }

#endif
