"""braze's own thread teams behind GCC's OpenMP calls (braze_omp.h): the constructs braze's C
and libdnnl use give the answers a serial loop gives, on any team and from many threads at once;
every share runs exactly once; nothing is left spinning or running after a call; libdnnl
runs on the same teams; BRAZE_OMP=openmp hands everything to libgomp."""

import ctypes
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import braze
from braze.ops import Builder, tensor
from braze.runtime import compile_shared

needs_cc = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler")
pytestmark = needs_cc

HARNESS = r"""
#include <omp.h>
#include <stdint.h>
#include "braze_omp.h"

/* every construct braze's C and libdnnl use; returns 0 or which check failed */
BRAZE_EXPORT int32_t constructs(int32_t nt, int64_t n, double *sum) {
    omp_set_num_threads(nt);
    if (omp_get_max_threads() != nt || omp_get_num_threads() != 1 || omp_in_parallel()) return 1;
    double s = 0;
    #pragma omp parallel for schedule(static) reduction(+:s)
    for (int64_t i = 0; i < n; i++) s += (double)i;
    *sum = s;
    int hits[97] = {0};
    #pragma omp parallel for schedule(dynamic, 3)
    for (int i = 0; i < 97; i++) __atomic_fetch_add(&hits[i], 1, __ATOMIC_RELAXED);
    int bad = 0, seen = 0;
    #pragma omp parallel if (n > 10)
    {
        int t = omp_get_thread_num(), k = omp_get_num_threads();
        if (k != nt || omp_in_parallel() != (nt > 1)) __atomic_store_n(&bad, 2, __ATOMIC_RELAXED);
        #pragma omp for schedule(dynamic) nowait
        for (int i = 0; i < 97; i++) __atomic_fetch_add(&hits[i], 1, __ATOMIC_RELAXED);
        #pragma omp barrier
        #pragma omp for schedule(static, 5)
        for (int i = 0; i < 97; i++) __atomic_fetch_add(&hits[i], 1, __ATOMIC_RELAXED);
        #pragma omp for schedule(static)
        for (int i = 0; i < 97; i++) __atomic_fetch_add(&hits[i], 1, __ATOMIC_RELAXED);
        #pragma omp critical
        { seen |= 1 << t; }
        #pragma omp parallel
        { if (omp_get_num_threads() != 1 || omp_get_thread_num() != 0) __atomic_store_n(&bad, 3, __ATOMIC_RELAXED); }
    }
    if (bad) return bad;
    if (seen != (1 << nt) - 1) return 4;
    for (int i = 0; i < 97; i++) if (hits[i] != 4) return 5;
    if (omp_get_num_threads() != 1 || omp_in_parallel()) return 6;
    return 0;
}

/* bz_omp_part on the calling thread, as a worker of a pool paced from its CPU: it moves off that
 * CPU, and back to its own mask once the pool is quiet. Returns 0 or which check failed. */
BRAZE_EXPORT int32_t part(void) {
    static bz_omp_pool p;
    static bz_omp_worker w;
    unsigned long before[BZ_OMP_MASK_BYTES / sizeof(unsigned long)] = {0}, after[sizeof before / sizeof before[0]] = {0};
    if (syscall(SYS_sched_getaffinity, 0, sizeof before, before) <= 0) return 1;
    int cpu = bz_omp_getcpu();
    p.master_cpu = cpu;
    bz_omp_part(&w, &p);
    if (!w.moved) return 2;
    if (bz_omp_getcpu() == cpu) return 3;
    syscall(SYS_sched_getaffinity, 0, sizeof after, after);
    if (after[cpu / 64] >> (cpu % 64) & 1) return 4;
    p.master_cpu = -1;
    bz_omp_part(&w, &p);
    syscall(SYS_sched_getaffinity, 0, sizeof after, after);
    if (w.moved || memcmp(before, after, sizeof before)) return 5;
    return 0;
}

/* bz_omp_pace fed `windows` windows of 64 regions, the first taken[w] of window w with a worker's
 * share run by the master: paced[w] = 1 where the pool was paced after window w. A new pool's
 * state comes first, in paced[windows]. */
BRAZE_EXPORT int32_t pace_trace(int32_t windows, const int32_t *taken, int32_t *paced) {
    bz_omp_pool *p = bz_omp_pool_for(1);
    if (!p) return 1;
    paced[windows] = p->spin == BZ_OMP_SPIN_NS;
    for (int w = 0; w < windows; w++) {
        for (int r = 0; r < 64; r++) bz_omp_pace(p, r < taken[w]);
        paced[w] = p->spin == BZ_OMP_SPIN_NS;
    }
    return 0;
}

/* `calls` calls after a pause of the caller's longer than the spin, each 4 regions: the first's
 * worker share (20 us) taken by the master, whose own share is empty, as the worker sleeps; in
 * the others both shares take 300 us, time for the worker to wake and start its own. Returns
 * whether the calling thread's pool ended paced. */
static void busy_us(int64_t us) { int64_t t0 = bz_omp_ns(); while (bz_omp_ns() - t0 < us * 1000) {} }
BRAZE_EXPORT int32_t after_pauses(int32_t calls) {
    omp_set_num_threads(2);
    for (int c = 0; c < calls; c++) {
        usleep(400);
        for (int r = 0; r < 4; r++) {
            #pragma omp parallel
            { if (r > 0 || omp_get_thread_num() > 0) busy_us(r > 0 ? 300 : 20); }
        }
    }
    bz_omp_pool *p = bz_omp_pool_for(1);
    return p && p->spin == BZ_OMP_SPIN_NS;
}

/* bz_omp_idle_wake's answers: a quiet pool whose worker sleeps, 1 ms after its master's last job
 * (1), 50 us after it (0); its worker awake (0); the pool paced (0). */
BRAZE_EXPORT int32_t idle_wake_cases(int32_t *out) {
    static bz_omp_worker w[2];
    bz_omp_pool p = {.spin = BZ_OMP_SPIN_QUIET_NS, .workers = w, .last_end = 10000000};
    w[1].sleepers = 1;
    out[0] = bz_omp_idle_wake(&p, 2, p.last_end + 1000000);
    out[1] = bz_omp_idle_wake(&p, 2, p.last_end + 50000);
    w[1].sleepers = 0;
    out[2] = bz_omp_idle_wake(&p, 2, p.last_end + 1000000);
    w[1].sleepers = 1;
    p.spin = BZ_OMP_SPIN_NS;
    out[3] = bz_omp_idle_wake(&p, 2, p.last_end + 1000000);
    return 0;
}

/* regions of tiny shares: each thread number's share runs exactly once per region */
BRAZE_EXPORT int32_t shares(int32_t nt, int32_t regions, int64_t *count) {
    omp_set_num_threads(nt);
    for (int r = 0; r < regions; r++) {
        #pragma omp parallel
        { __atomic_fetch_add(&count[omp_get_thread_num()], 1, __ATOMIC_RELAXED); }
    }
    return 0;
}

"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    path = compile_shared(HARNESS, name="omp_harness", cache_dir=tmp_path_factory.mktemp("omp_cache"))
    lib = ctypes.CDLL(str(path))
    lib.constructs.argtypes = [ctypes.c_int32, ctypes.c_int64, ctypes.POINTER(ctypes.c_double)]
    lib.shares.argtypes = [ctypes.c_int32, ctypes.c_int32, ctypes.c_void_p]
    lib.pace_trace.argtypes = [ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p]
    lib.idle_wake_cases.argtypes = [ctypes.c_void_p]
    lib.braze_omp_counter.restype = ctypes.c_int64
    lib.braze_omp_ops.restype = ctypes.c_void_p
    return path, lib


def _constructs(lib, nt, n=100_001):
    s = ctypes.c_double()
    rc = lib.constructs(nt, n, ctypes.byref(s))
    assert rc == 0, f"check {rc} failed with {nt} threads"
    assert s.value == n * (n - 1) / 2


@pytest.mark.parametrize("nt", [1, 2, 3, 5])
def test_constructs_give_the_serial_answer(harness, nt):
    _, lib = harness
    for _ in range(50):
        _constructs(lib, nt)


@pytest.mark.parametrize("nt", [2, 3])
def test_every_share_runs_once(harness, nt):
    _, lib = harness
    count = np.zeros(8, np.int64)
    lib.shares(nt, 3000, count.ctypes.data)
    assert count.tolist() == [3000] * nt + [0] * (8 - nt)


def test_regions_from_many_threads_at_once(harness):
    """Each calling thread is the master of its own team: 6 threads, each running regions of 3."""
    from braze.testing import run_threads
    _, lib = harness

    def run(_):
        for _ in range(30):
            _constructs(lib, 3)

    assert run_threads(run, 6, timeout=120) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc (Linux)")
def test_a_finished_calling_thread_takes_its_workers_with_it(harness):
    _, lib = harness
    before = len(os.listdir("/proc/self/task"))
    t = threading.Thread(target=_constructs, args=(lib, 4))
    t.start()
    t.join(60)
    deadline = time.time() + 10
    while len(os.listdir("/proc/self/task")) > before and time.time() < deadline:
        time.sleep(0.05)
    assert len(os.listdir("/proc/self/task")) <= before  # its 3 workers joined (earlier tests' may end too)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs in the affinity mask")
def test_a_paced_worker_leaves_its_masters_cpu_and_comes_back(harness):
    """While the workers are being descheduled, a worker woken on its master's CPU moves off it
    (else both share one core beside a busy neighbour); when the pool is quiet its mask returns."""
    _, lib = harness
    rc = []
    t = threading.Thread(target=lambda: rc.append(lib.part()))  # its own thread: the mask changes
    t.start()
    t.join(60)
    assert rc == [0], f"check {rc} failed"


def _pace(lib, taken):
    n = len(taken)
    paced = (ctypes.c_int32 * (n + 1))()
    result = threading.Thread(target=lambda: lib.pace_trace(n, (ctypes.c_int32 * n)(*taken), paced))
    result.start()  # its own thread: its own, new pool
    result.join(60)
    return paced[n], list(paced[:n])


def test_a_pool_is_paced_while_its_workers_fall_behind_and_tries_unpaced_again(harness):
    """A new pool is unpaced. Over 15% of a window's regions with a worker's share run by the master
    paces it; paced, 5% or fewer ends it. A pool whose regions are shorter than a worker's wake-up
    keeps having its shares taken while paced, even on a quiet machine, so after 16 paced windows
    it runs one unpaced, and stays so if that window keeps up; if it does not (a busy machine), the
    next try comes after twice as many (BERT-base in bf16 at 1x128 stayed
    paced, at 1.11x libgomp's time, before)."""
    _, lib = harness
    fresh, trace = _pace(lib, [5, 10, 4, 3, 20])
    assert fresh == 0 and trace == [0, 1, 1, 0, 1]
    _, trace = _pace(lib, [64] * 60)  # never keeps up: after 16 paced windows one unpaced, then 32
    assert trace == [1] * 16 + [0] + [1] * 32 + [0] + [1] * 10
    _, trace = _pace(lib, [64] * 17 + [0, 0])  # the unpaced window kept up: the pool stays unpaced
    assert trace == [1] * 16 + [0, 0, 0]
    # a window that keeps up while paced: the next try comes after 16 paced windows again
    _, trace = _pace(lib, [64] * 18 + [0] + [64] * 18)
    assert trace == [1] * 16 + [0] + [1] + [0] + [1] * 16 + [0] + [1]


def test_a_wake_after_a_pause_of_the_callers_is_not_counted(harness):
    """A decode loop's calls come after 200 us or more of Python, longer than the workers' spin, so
    each call's first region wakes a sleeping worker and the master runs its share. That is no sign
    of a busy machine (bz_omp_idle_wake): such a region does not count towards pacing where the
    master was away longer than the spin and the pool is unpaced."""
    _, lib = harness
    out = (ctypes.c_int32 * 4)()
    assert lib.idle_wake_cases(out) == 0
    assert list(out) == [1, 0, 0, 0]


@pytest.mark.slow  # timing: beside a busy process (another test worker) the pool may pace for good reason
def test_a_pause_of_the_callers_does_not_pace_the_pool(harness):
    """48 calls after a pause each, their first region's worker share taken by the master: the pool
    stays unpaced (it was paced after two windows, every region then waking a worker). In a process
    of its own: another thread's pool that ran before moves the timings."""
    path, _ = harness
    out = _run(f"""
        import ctypes
        print(ctypes.CDLL({str(path)!r}).after_pauses(48))
    """)
    assert out.strip() == "0"


def test_no_cpu_after_the_last_region(harness):
    """Workers spin at most 100 us after a region and then sleep: under 1% of a core over the next second
    (libgomp's took about 1%, torch's process aside)."""
    _, lib = harness
    _constructs(lib, 2)
    c0 = time.process_time()
    time.sleep(1.0)
    assert time.process_time() - c0 < 0.01


def _run(script: str, **env) -> str:
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, **env})
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_braze_omp_openmp_hands_every_call_to_libgomp(harness):
    path, _ = harness
    out = _run(f"""
        import ctypes
        lib = ctypes.CDLL({str(path)!r})
        lib.braze_omp_counter.restype = ctypes.c_int64
        s = ctypes.c_double()
        for nt in (1, 2, 3):
            assert lib.constructs(nt, 100001, ctypes.byref(s)) == 0 and s.value == 100001 * 100000 / 2
        print(lib.braze_omp_counter(0))
    """, BRAZE_OMP="openmp")
    assert out.split() == ["-1"]  # libgomp's table has no counters


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_starts_its_own_workers(harness):
    """A child forked after regions ran has none of the parent's workers: it starts its own."""
    path, _ = harness
    out = _run(f"""
        import ctypes, os
        lib = ctypes.CDLL({str(path)!r})
        s = ctypes.c_double()
        assert lib.constructs(2, 100001, ctypes.byref(s)) == 0
        pid = os.fork()
        if pid == 0:
            os._exit(lib.constructs(2, 100001, ctypes.byref(s)))
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """)
    assert out.split() == ["0"]


def _nm_undefined(path) -> list[str]:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm (binutils)")
    out = subprocess.run([nm, "-D", "--undefined-only", str(path)], capture_output=True, text=True).stdout
    return [ln.split()[-1] for ln in out.splitlines() if ln.strip()]


W = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)


def _gemm_model():
    b = Builder()
    m = b.sym("m", 1, 4096)
    x = b.param("x", tensor("f32", m, 256))
    b.ret(b.op("linear", [x, b.constant(W, "w")]))
    return b.module


def test_compiled_libraries_import_nothing_from_libgomp(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))
    m = braze.compile(_gemm_model())
    libs = [m.library.path] + list(tmp_path.rglob("libbraze_dnnl.so"))
    for lib in libs:
        omp = [s for s in _nm_undefined(lib) if s.startswith(("GOMP_", "omp_"))]
        assert omp == [], f"{lib.name} imports {omp}"


def test_onednn_runs_on_braze_teams():
    """A model that is one oneDNN GEMM (M = 256: oneDNN's primitive, not the small-M kernel)
    opens braze's regions: libdnnl's OpenMP imports were bound to the helper's runtime."""
    from braze.extern import onednn
    if not onednn.available():
        pytest.skip("no oneDNN")
    m = braze.compile(_gemm_model(), threads=2)
    lib = ctypes.CDLL(str(m.library.path))
    lib.braze_dnnl_omp_status.restype = ctypes.c_int32
    lib.braze_omp_counter.restype = ctypes.c_int64
    assert lib.braze_dnnl_omp_status() == 1
    x = np.ones((256, 256), np.float32)
    m(x)
    r0 = lib.braze_omp_counter(0)
    m(x)
    assert lib.braze_omp_counter(0) > r0
    np.testing.assert_allclose(m(x), x @ W.T, rtol=1e-5, atol=1e-4)
