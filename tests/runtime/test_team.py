"""A call's team shrinks while other processes take the cores (braze_team.h): the decision from
the calling thread's run delay, and results that do not depend on the team."""

import os

import numpy as np
import pytest

import braze
from braze.ops import Builder, tensor
from braze.options import Options
from braze.runtime import NativeLibrary, compile_shared

from rt_kernels import needs_cc

MS = 1_000_000  # ns

# bz_team_next over a sequence of (time, run delay) readings, from a fresh state
HARNESS = r"""
#include "braze_abi.h"
#include "braze_team.h"
BRAZE_EXPORT void team_trace(int32_t full, int32_t n, const int64_t *now, const int64_t *delay, int32_t *out) {
    bz_team_state s = {0};
    s.full = s.cur = full;
    for (int32_t i = 0; i < n; i++) out[i] = bz_team_next(&s, now[i], delay[i]);
}
/* a closed loop: readings step_ns apart; the thread waits share_full of each step while the full
 * team runs, share_fewer while a smaller one does */
BRAZE_EXPORT void team_loop(int32_t full, int32_t n, int64_t step_ns, double share_full, double share_fewer,
                            int32_t *out) {
    bz_team_state s = {0};
    s.full = s.cur = full;
    int64_t now = step_ns, delay = 0;
    for (int32_t i = 0; i < n; i++) {
        out[i] = bz_team_next(&s, now, delay);
        now += step_ns;
        delay += (int64_t)((double)step_ns * (out[i] == full ? share_full : share_fewer));
    }
}
"""


@pytest.fixture(scope="module")
def trace():
    import ctypes
    lib = ctypes.CDLL(str(compile_shared(HARNESS, name="team_trace")))

    def run(full, readings):
        now = np.array([t for t, _ in readings], np.int64)
        delay = np.array([d for _, d in readings], np.int64)
        out = np.zeros(len(readings), np.int32)
        lib.team_trace(ctypes.c_int32(full), ctypes.c_int32(len(readings)), now.ctypes.data_as(ctypes.c_void_p),
                       delay.ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p))
        return out.tolist()

    def loop(full, n, step_ms, share_full, share_fewer):
        out = np.zeros(n, np.int32)
        lib.team_loop(ctypes.c_int32(full), ctypes.c_int32(n), ctypes.c_int64(step_ms * MS),
                      ctypes.c_double(share_full), ctypes.c_double(share_fewer), out.ctypes.data_as(ctypes.c_void_p))
        return out.tolist()
    run.loop = loop
    return run


def _windows(start, n, step_ms, waited_share, t0=0, d0=0):
    """n readings step_ms apart from (t0, d0), the thread waiting waited_share of each step"""
    return [(t0 + (start + i) * step_ms * MS, d0 + int((start + i) * step_ms * MS * waited_share))
            for i in range(n)]


@needs_cc
def test_a_quiet_thread_keeps_its_team(trace):
    assert set(trace(2, _windows(1, 50, 25, 0.005))) == {2}


@needs_cc
@pytest.mark.parametrize("full, share, team", [(2, 1 / 3, 1), (2, 0.5, 1), (16, 1 / 17 + 0.05, 14), (8, 0.3, 5)])
def test_a_thread_that_waits_for_a_cpu_shrinks_its_team(trace, full, share, team):
    """floor(full * (1 - share)), after two whole windows over 10%; smaller still while it waits"""
    teams = trace(full, _windows(1, 5, 25, share))
    assert teams[:3] == [full, full, team] and teams[3] <= team and teams[4] <= teams[3]


@needs_cc
def test_a_window_shorter_than_20_ms_decides_nothing(trace):
    # readings every 3 ms from 3 ms: windows close at 24 ms and 45 ms
    assert trace(2, _windows(1, 14, 3, 0.5)) == [2] * 14
    assert trace(2, _windows(1, 15, 3, 0.5))[-1] == 1


@needs_cc
def test_a_shrunken_team_tries_the_full_one_after_half_a_second(trace):
    busy = _windows(1, 3, 25, 0.4)  # shrinks at 75 ms
    t, d = busy[-1]
    quiet = _windows(1, 30, 25, 0.0, t, d)  # 25 ms apart, no waiting: full again 0.5 s after the change
    teams = trace(2, busy + quiet)
    assert teams[:3] == [2, 2, 1]
    back = teams.index(2, 3)
    assert (quiet[back - 3][0] - busy[-1][0]) == 500 * MS and set(teams[back:]) == {2}


@needs_cc
def test_one_slow_window_alone_does_not_shrink(trace):
    """a hiccup (one window over 10%) between quiet ones"""
    first = _windows(1, 4, 25, 0.0)
    t, d = first[-1]
    teams = trace(2, first + [(t + 25 * MS, d + 10 * MS)] + _windows(2, 4, 25, 0.0, t, d + 10 * MS))
    assert set(teams) == {2}


@needs_cc
def test_a_failed_probe_doubles_the_wait_up_to_2_s(trace):
    """One busy neighbour on 2 cores: the full team waits 40% of the time, one thread none. Each
    probe runs the full team for one window and shrinks again; the waits go 0.5, 1, 2, 2 s."""
    teams = trace.loop(2, 1400, 5, 0.4, 0.0)  # 7 s in 5 ms steps from 5 ms
    assert teams[:9] == [2] * 8 + [1]  # windows close at 25 and 45 ms
    probes = [i for i in range(9, len(teams)) if teams[i] == 2 and teams[i - 1] == 1]
    ends = [teams.index(1, p) for p in probes]
    assert all(e - p <= 5 for p, e in zip(probes, ends)), "a probe longer than one window"
    waits = [(p - e) * 5 for p, e in zip(probes, [8] + ends)]  # ms from a shrink to the next probe
    assert [round(w / 100) for w in waits] == [5, 10, 20, 20], waits
    assert teams.count(2) / len(teams) < 0.03


@needs_cc
def test_two_neighbours_keep_one_thread_without_probing(trace):
    """With the thread still waiting at a team of 1, the full team is not tried again"""
    teams = trace.loop(2, 400, 5, 0.5, 0.3)
    assert teams[10:] == [1] * 390


def _model():
    b = Builder()
    n = b.sym("n", 1, 4096)
    x = b.param("x", tensor("f32", n, 256))
    rng = np.random.default_rng(0)
    w1 = b.constant(rng.standard_normal((1024, 256)).astype(np.float32) / 16, "w1")
    w2 = b.constant(rng.standard_normal((256, 1024)).astype(np.float32) / 32, "w2")
    h = b.op("gelu", [b.op("linear", [x, w1])])
    b.ret(b.tanh(b.op("add", [b.op("linear", [h, w2]), x])))
    return b.module


@needs_cc
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity") else True,
                    reason="needs 2 CPUs")
def test_every_team_gives_the_same_bits_and_is_counted():
    """A call forced to 1 thread and to 2 (the small-M kernel at 5 rows, oneDNN at 300, odd
    sizes) returns the same bits; an instance with adapt_threads=False is never counted. Without
    AVX-512, oneDNN's matrix-vector kernel at 1 or 2 rows sums K in one part per thread
    (docs/threads.md), so there those rows agree to float32 rounding only."""
    from braze.codegen.isa import host_isa
    wide = host_isa().name == "avx512"
    m = braze.compile(_model(), threads=2, options=Options.from_env().replace(adapt_threads=True))
    lib: NativeLibrary = m.library
    rng = np.random.default_rng(1)
    try:
        for rows in (1, 5, 77, 300):
            x = rng.standard_normal((rows, 256)).astype(np.float32)
            outs = []
            for team in (2, 1, 2, 1):
                lib.force_team(team)
                outs.append(m(x))
            for o in outs[1:]:
                if wide or rows > 2:
                    assert np.array_equal(o, outs[0]), rows
                else:
                    np.testing.assert_allclose(o, outs[0], rtol=1e-5, atol=1e-6)
    finally:
        lib.force_team(0)
    full, fewer = lib.team_calls()
    assert (full, fewer) >= (8, 8)
    fixed = braze.compile(_model(), threads=2, options=Options.from_env().replace(adapt_threads=False))
    before = fixed.library.team_calls()
    fixed(np.ones((5, 256), np.float32))
    assert fixed.library.team_calls() == before


def test_the_option_from_the_environment_and_the_plugin():
    assert Options.from_env({}).adapt_threads is False
    assert Options.from_env({"BRAZE_ADAPT_THREADS": "1"}).adapt_threads is True
    from braze.plugin.dynamo import plugin_options
    assert plugin_options({"adapt_threads": False}).opts.adapt_threads is False
    with pytest.raises(braze.BrazeError, match="adapt_threads"):
        plugin_options({"adapt_threads": "no"})
