"""Stage ``jam`` (braze/schedule/jam.py) and how C emits a jam loop: which vector loops it marks,
that the mark prints and parses back, and that the jammed C computes the same bits as the loop
it replaces, with the channels a whole number of vectors or not."""

from __future__ import annotations

import ctypes
import numpy as np
import pytest

from braze.codegen.c_kernel import c_prelude, kernel_entry, kernel_to_c
from braze.ir import loop as L
from braze.ir import sym as S
from braze.ir.loop_parser import parse_kernel
from braze.schedule import jam
from braze.schedule.jam import JAM_LANES, JAM_MIN_SCALARS


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "jam_cache"))


def taps_kernel(channels, taps=9, extra_let=False, stride=1) -> L.Kernel:
    """A direct convolution's shape: per pixel ``taps`` scalars loaded once (lets), each times a
    row of weights (every ``stride``-th: a gather), summed in order over ``channels`` output
    channels, plus a bias."""
    row = stride * channels
    s = f"(t0 * w[[{stride}*_i2]])"
    for k in range(1, taps):
        s = f"({s} + (t{k} * w[[{stride}*_i2 + {k * row}]]))"
    lines = [f"kernel k(in x: f32[n, {taps}], in w: f32[{taps}, {row}], in b: f32[{channels}], "
             f"out y: f32[n, {channels}]); syms n  [pointwise]",
             "  for _i1 in 0..n:"]
    lines += [f"    let t{k}: f32 = x[[{taps}*_i1 + {k}]]" for k in range(taps)]
    lines += [f"    vector for _i2 in 0..{channels}:"]
    lines += ["      let u: f32 = t0"] if extra_let else []
    lines += [f"      y[[{channels}*_i1 + _i2]] = ({s} + b[[_i2]])"]
    return parse_kernel("\n".join(lines) + "\n")


def vector_loops(k):
    return [s for s in L.walk_stmts(k.body) if isinstance(s, L.For) and s.kind == "vector"]


def test_jam_ir_in_ir_out():
    """Nine broadcast taps over 16 channels: the loop is marked, the mark prints as ``(jam)`` and
    parses back, and a second run changes nothing."""
    k = jam(taps_kernel(16))
    (f,) = vector_loops(k)
    assert f.jam and "    vector for _i2 in 0..16  (jam):" in str(k).splitlines()
    assert str(parse_kernel(str(k))) == str(k)
    assert str(jam(k)) == str(k)


@pytest.mark.parametrize("kernel", [
    taps_kernel(JAM_LANES + 8),  # too many channels to keep side by side
    taps_kernel(16, taps=JAM_MIN_SCALARS - 1),  # few broadcasts: they fit in registers anyway
])
def test_jam_leaves_other_vector_loops(kernel):
    assert str(jam(kernel)) == str(kernel)


def test_jam_leaves_a_loop_with_lets_inside():
    """The emitter jams stores alone."""
    assert not any(f.jam for f in vector_loops(jam(taps_kernel(16, extra_let=True))))


def test_jam_leaves_a_loop_with_a_reduction():
    k = parse_kernel(str(taps_kernel(16)).replace("+ b[[_i2]])", "+ sum(_r3 < 4: b[[_i2]]))"))
    assert "sum(" in str(k) and str(jam(k)) == str(k)


def _run(kernel, vb, n, rng):
    from braze.runtime.compiler import compile_shared
    src = c_prelude(vb) + "\n" + kernel_to_c(kernel, vb) + "\n" + kernel_entry(kernel, "bz_test_entry")
    fn = ctypes.CDLL(str(compile_shared(src, name=kernel.name))).bz_test_entry
    fn.restype = None
    fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64)]
    arrays = [rng.standard_normal(tuple(S.evaluate(d, {"n": n}) for d in b.shape)).astype(np.float32)
              for b in kernel.buffers]
    ptrs = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    fn(ptrs, (ctypes.c_int64 * 1)(n))
    return arrays


@pytest.mark.parametrize("channels,stride", [(16, 1), (20, 1), (24, 1), (32, 1), (16, 2)])
def test_jammed_c_gives_the_bits_of_the_loop(channels, stride):
    """AVX2-width C (8 lanes): 2, 2 and a scalar tail of 4, 3, and 4 vectors side by side, in no
    C loop, each sum in one variable; the same bits as the unjammed loop, and the sums of a NumPy
    reference taken in the same order. Weights read with a stride are gathered lane by lane, in
    loops C cannot interleave: the copies then follow one another."""
    k = taps_kernel(channels, stride=stride)
    jammed = jam(k)
    c = kernel_to_c(jammed, 32)
    assert "_i2 + 8 <=" not in c and "bz_vf acc" in c
    assert ("_i2 < n" in c) == (channels % 8 != 0)  # the scalar tail only where one is left
    for n in (1, 7):
        x, w, b, got = _run(jammed, 32, n, np.random.default_rng(n))
        *_, want = _run(k, 32, n, np.random.default_rng(n))
        np.testing.assert_array_equal(got, want)
        ref = x[:, :1] * w[0, ::stride]
        for t in range(1, x.shape[1]):
            ref = ref + x[:, t:t + 1] * w[t, ::stride]
        np.testing.assert_array_equal(got, ref + b)


def test_scalar_c_ignores_the_mark():
    k = jam(taps_kernel(16))
    assert kernel_to_c(k, 0) == kernel_to_c(taps_kernel(16), 0)
