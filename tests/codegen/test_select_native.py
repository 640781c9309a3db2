"""The ops whose output size their data decides, compiled (a ``select`` group calling
braze_select.h, its size then read by what follows) against the reference: every dtype nonzero
takes (16-bit floats' -0 included), unique along axes and by first appearance, non_max_suppression;
sizes of 0, 1 and odd; kernels after the select that read the size; a result allocated once the
size is known; a shape fact on a size checked when the size is found; threads; a saved artifact;
and the CUDA target's refusal."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import braze
import braze.reference
from braze.errors import InputError, UnsupportedOpError
from braze.ir import sym as S
from braze.ir.types import DType, TensorType
from braze.ops import Builder
from braze.ops.select import nms_numpy

pytestmark = pytest.mark.usefixtures("module_cache")


def _check(m, *xs):
    cm = braze.compile(m)
    got, want = cm(*xs), braze.reference.run(m, *xs)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape)
        np.testing.assert_array_equal(g, w)
    return cm


def _compress_module(dt="float32"):
    """x[:, nonzero(keep)] * 2 + 1 and the indices: kernels after the select read its size."""
    b = Builder()
    n, m = b.sym("n"), b.sym("m")
    x = b.param("x", TensorType(DType[dt], (n, m)))
    keep = b.param("keep", TensorType(DType.bool, (m,)))
    u = b.size_sym(m)
    idx = b.reshape(b.nonzero(keep, size=u), shape=(u,))
    y = b.add(b.mul(b.gather(x, idx, axis=1), b.constant(np.array(2, DType[dt].numpy))),
              b.constant(np.array(1, DType[dt].numpy)))
    b.ret(y, idx)
    return b.module


def test_kernels_after_a_select_read_the_size_it_found(rng):
    cm = braze.compile(_compress_module())
    for n, m in ((1, 1), (3, 7), (2, 65), (17, 128)):
        x = rng.standard_normal((n, m)).astype(np.float32)
        for keep in (rng.random(m) > 0.5, np.zeros(m, bool), np.ones(m, bool)):
            y, idx = cm(x, keep)
            np.testing.assert_array_equal(idx, np.flatnonzero(keep))
            np.testing.assert_array_equal(y, x[:, keep] * 2 + 1)


@pytest.mark.parametrize("dt", ["float32", "float64", "int64", "int32", "int8", "uint8", "bool", "float16",
                                "bfloat16"])
def test_nonzero_of_every_dtype(dt, rng):
    b = Builder()
    d = (b.sym("a"), b.sym("b"), 3)
    x = b.param("x", TensorType(DType[dt], d))
    b.ret(b.nonzero(x, size=b.size_sym(S.prod(d))))
    npt = DType[dt].numpy
    for shape in ((1, 1, 3), (4, 5, 3), (2, 33, 3)):
        x = (rng.standard_normal(shape) > 0.3).astype(npt)
        if DType[dt].is_float:
            x[0, 0] = [-0.0, np.nan, 0.0]  # -0 is zero, NaN is not
        _check(b.module, x)


@pytest.mark.parametrize("dt", ["float32", "int64", "float64"])
@pytest.mark.parametrize("axis, sorted_", [(0, True), (1, True), (2, False), (1, False)])
def test_unique_along_an_axis(dt, axis, sorted_, rng):
    b = Builder()
    d = (b.sym("a"), b.sym("b"), 2)
    x = b.param("x", TensorType(DType[dt], d))
    first, inverse, counts = b.unique(x, axis=axis, sorted=sorted_, size=b.size_sym(d[axis]))
    b.ret(b.gather(x, first, axis=axis), first, inverse, counts)
    for shape in ((1, 1, 2), (3, 7, 2), (5, 40, 2)):
        x = rng.integers(-1, 2, shape).astype(DType[dt].numpy)
        if DType[dt].is_float:
            x.flat[::5] = np.nan
            x.flat[1::7] = -0.0
        _check(b.module, x)


def test_unique_with_outputs_nothing_reads():
    b = Builder()
    x = b.param("x", TensorType(DType.int32, (b.sym("n"),)))
    first, _, _ = b.unique(x, axis=0, sorted=False, size=b.size_sym(x.shape[0]))
    b.ret(first)
    _check(b.module, np.array([5, 3, 5, 1, 3], np.int32))


def _nms_module(with_threshold=True):
    b = Builder()
    B, N, C = b.sym("B"), b.sym("N"), b.sym("C")
    boxes = b.param("boxes", TensorType(DType.float32, (B, N, 4)))
    scores = b.param("scores", TensorType(DType.float32, (B, C, N)))
    limit = b.param("limit", TensorType(DType.int64, (1,)))
    iou = b.param("iou", TensorType(DType.float32, ()))
    extra = [b.param("score", TensorType(DType.float32, (1,)))] if with_threshold else []
    b.ret(b.non_max_suppression(boxes, scores, limit, iou, *extra, center_point_box=0,
                                size=b.size_sym(S.prod((B, C, N)))))
    return b.module


@pytest.mark.parametrize("with_threshold", [True, False])
def test_non_max_suppression_is_onnx_s(with_threshold, rng):
    cm = braze.compile(_nms_module(with_threshold))
    for B, C, N in ((1, 1, 1), (2, 3, 9), (1, 2, 70)):
        boxes = rng.uniform(0, 5, (B, N, 4)).astype(np.float32)
        scores = rng.choice(np.float32([0.1, 0.4, 0.4, 0.8]), (B, C, N))
        for limit in (0, 2, 1000):
            args = [np.array([limit], np.int64), np.array(0.25, np.float32)]
            args += [np.array([0.3], np.float32)] if with_threshold else []
            want = nms_numpy(boxes, scores, *args)
            np.testing.assert_array_equal(cm(boxes, scores, *args), want)


def test_a_shape_fact_on_a_found_size_is_checked_when_it_is_found(rng):
    """y[nonzero(keep)] + z needs as many kept as z is long: an error names the size, never a read
    past z."""
    b = Builder()
    m = b.sym("m")
    x = b.param("x", TensorType(DType.float32, (m,)))
    keep = b.param("keep", TensorType(DType.bool, (m,)))
    z = b.param("z", TensorType(DType.float32, (b.sym("k"),)))
    u = b.size_sym(m)
    idx = b.reshape(b.nonzero(keep, size=u), shape=(u,))
    b.ret(b.add(b.gather(x, idx, axis=0), z))
    cm = braze.compile(b.module)
    x = np.arange(5, dtype=np.float32)
    keep = np.array([1, 0, 1, 1, 0], bool)
    np.testing.assert_array_equal(cm(x, keep, np.ones(3, np.float32)), x[keep] + 1)
    with pytest.raises(InputError, match="the size u0 that nonzero.* found breaks the model.s shape constraints"):
        cm(x, keep, np.ones(2, np.float32))


def test_threads_share_a_compiled_select(rng):
    cm = braze.compile(_compress_module())
    cases = [(rng.standard_normal((3, m)).astype(np.float32), rng.random(m) > 0.5) for m in (1, 8, 33, 100)]
    errors = []

    def work(k):
        try:
            for _ in range(30):
                x, keep = cases[k % len(cases)]
                y, idx = cm(x, keep)
                assert np.array_equal(idx, np.flatnonzero(keep)) and np.array_equal(y, x[:, keep] * 2 + 1)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[0]


def test_a_saved_select_runs_after_loading(tmp_path, rng):
    cm = braze.compile(_compress_module())
    cm.save(tmp_path / "art")
    loaded = braze.load(tmp_path / "art")
    x, keep = rng.standard_normal((2, 9)).astype(np.float32), rng.random(9) > 0.5
    y, idx = loaded(x, keep)
    np.testing.assert_array_equal(idx, np.flatnonzero(keep))
    np.testing.assert_array_equal(y, x[:, keep] * 2 + 1)


def test_the_cuda_target_refuses_a_select_by_name():
    with pytest.raises(UnsupportedOpError, match="the CUDA target has no nonzero yet"):
        braze.compile(_compress_module(), target="cuda:sm_90")
