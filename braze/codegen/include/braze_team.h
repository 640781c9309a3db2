/* braze_team.h: how many threads a call runs with, fewer while other processes take the
 * process's cores (issue 29; docs/threads.md).
 *
 * Every kernel is a parallel region that ends when all its threads' shares are done. With one
 * more runnable thread than cores (a busy neighbour beside a 2-thread model on 2 cores), a worker
 * the scheduler stops in the middle of its share holds the region's end for a time slice, at
 * each of a call's hundreds of regions. With libgomp's spinning threads BERT-base ran 2.5-3.3x
 * its quiet time where ONNX Runtime ran 1.6x, and a team of 1 about 1.8x: so braze changed the
 * team. On braze's own teams (braze_omp.h: short spins, and the shares no worker has started
 * run by the master) a fixed team of 2 does about as well, and this is off by default: the
 * signal below also counts the wait of a thread woken from a futex, and a quiet BERT-base ran
 * half its calls on one thread (docs/threads.md).
 *
 * The signal is the calling thread's run delay: the time it was runnable but waiting for a CPU
 * (/proc/thread-self/schedstat, second field). Over each window of at least BZ_TEAM_WINDOW_NS of
 * the thread's time (calls and the gaps between them), r = delay / elapsed. On a quiet machine r
 * stays near 0; 3 runnable threads fair-shared over 2 cores each wait about a third of the time.
 * When r > BZ_TEAM_SHRINK_AT in two windows in a row the team shrinks to floor(team * (1 - r)),
 * at least 1 (with one window, a quiet BERT-base shrank its team once in 20 s here). A shrunken
 * team no longer waits, so it cannot see the neighbour leave: BZ_TEAM_PROBE_NS (0.5 s) after a
 * change the next window runs the full team again and measures; one window over the threshold
 * then shrinks it again, and the next probe waits twice as long, up to BZ_TEAM_PROBE_MAX_NS (2 s).
 * Reading the file costs about 5 us, once per window. Without the file (no schedstats, not
 * Linux) the team is always full.
 *
 * State is per calling thread (its own run delay) and per library; the counters are for
 * tests and benchmarks. Results do not depend on the team size: kernels split independent
 * iterations, and oneDNN's primitives are cached per thread count (braze_dnnl_core.c); the one
 * known exception, oneDNN's matrix-vector kernel without AVX-512, is in docs/threads.md. */
#ifndef BRAZE_TEAM_H
#define BRAZE_TEAM_H

#include "braze_abi.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define BZ_TEAM_WINDOW_NS 20000000LL   /* 20 ms: one BERT-base call at batch 1, many small ones */
#define BZ_TEAM_PROBE_NS 500000000LL   /* a shrunken team tries the full one again after 0.5 s, */
#define BZ_TEAM_PROBE_MAX_NS 2000000000LL /* twice as long after each probe that shrank, up to 2 s */
#define BZ_TEAM_SHRINK_AT 0.10         /* quiet: about 0 here; beside a busy process, about 1/3 */

typedef struct {
    int64_t t0, d0;   /* the window's start: monotonic time, run delay (ns); t0 == 0: not started */
    int64_t changed;  /* when the team size last changed */
    int full, cur;    /* the team the call asks for, the one it runs with */
    int strikes;      /* windows in a row with r over BZ_TEAM_SHRINK_AT */
    int probing;      /* the full team is back on trial: one window over the threshold shrinks it */
    int64_t wait;     /* how long a shrunken team waits before the next probe (0: BZ_TEAM_PROBE_NS) */
    int off;          /* no run-delay source: always the full team */
} bz_team_state;

/* One window's decision: the team size for the calls after it (a pure function, tested alone) */
static int bz_team_next(bz_team_state *s, int64_t now, int64_t delay) {
    if (s->t0 == 0 || now < s->t0) {
        s->t0 = now;
        s->d0 = delay;
        if (s->changed == 0) s->changed = now;
        return s->cur;
    }
    if (now - s->t0 < BZ_TEAM_WINDOW_NS) return s->cur;
    double r = (double)(delay - s->d0) / (double)(now - s->t0);
    s->t0 = now;
    s->d0 = delay;
    if (s->wait == 0) s->wait = BZ_TEAM_PROBE_NS;
    s->strikes = r > BZ_TEAM_SHRINK_AT ? s->strikes + 1 : 0;
    if (s->strikes >= 2 || (s->strikes && s->probing)) {
        int n = (int)((double)s->cur * (1.0 - r));
        if (n < 1) n = 1;
        if (n < s->cur) {
            /* a probe that failed: the next waits longer (a probe costs a window at the slow
             * full team; with 100 ms calls, every 0.5 s was a third of the calls) */
            s->wait = s->probing ? (2 * s->wait < BZ_TEAM_PROBE_MAX_NS ? 2 * s->wait : BZ_TEAM_PROBE_MAX_NS)
                                 : BZ_TEAM_PROBE_NS;
            s->cur = n;
            s->changed = now;
        }
        s->probing = 0;
    } else if (s->cur < s->full && now - s->changed >= s->wait) {
        s->cur = s->full;
        s->changed = now;
        s->probing = 1;
    } else if (!s->strikes) {
        s->probing = 0;
        if (s->cur == s->full) s->wait = BZ_TEAM_PROBE_NS;
    }
    return s->cur;
}

static int64_t bz_team_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* the calling thread's run delay in ns, or -1 */
static int64_t bz_team_delay(void) {
    char buf[96];
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *p = buf, *end;
    strtoll(p, &end, 10); /* time on a CPU */
    if (end == p) return -1;
    p = end;
    long long d = strtoll(p, &end, 10);
    return end == p ? -1 : (int64_t)d;
}

static _Thread_local bz_team_state bz_team;
static int bz_team_forced;                 /* > 0: every adaptive call runs this many (tests) */
static int64_t bz_team_calls[2];           /* calls run with the full team, with a smaller one */

/* The team for a call that asks for `full` threads (> 1) and may adapt */
static int bz_team_size(int full) {
    int n = __atomic_load_n(&bz_team_forced, __ATOMIC_RELAXED);
    if (n <= 0) {
        bz_team_state *s = &bz_team;
        if (s->full != full) {
            s->full = s->cur = full;
            s->t0 = s->changed = s->wait = 0;
            s->strikes = s->probing = 0;
        }
        n = full;
        if (!s->off) {
            int64_t now = bz_team_now();
            if (s->t0 != 0 && now - s->t0 < BZ_TEAM_WINDOW_NS) {
                n = s->cur;
            } else {
                int64_t d = bz_team_delay();
                if (d < 0) s->off = 1;
                else n = bz_team_next(s, now, d);
            }
        }
    }
    if (n > full) n = full;
    __atomic_fetch_add(&bz_team_calls[n < full], 1, __ATOMIC_RELAXED);
    return n;
}

/* the counters and the override, for tests and measurements (NativeLibrary.team_calls, force_team) */
BRAZE_EXPORT void braze_team_force(int32_t n) { __atomic_store_n(&bz_team_forced, n, __ATOMIC_RELAXED); }
BRAZE_EXPORT void braze_team_stats(int64_t *full, int64_t *fewer) {
    *full = __atomic_load_n(&bz_team_calls[0], __ATOMIC_RELAXED);
    *fewer = __atomic_load_n(&bz_team_calls[1], __ATOMIC_RELAXED);
}

#endif
