"""ONNX Scan, unrolled at import (converters_control.py): natively against ONNX's reference evaluator,
with states, scan inputs read forward and backward on other axes, and scan outputs stacked both ways."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import braze  # noqa: E402
from braze.errors import UnsupportedOpError  # noqa: E402

F = TensorProto.FLOAT


def _scan_model(steps, plain=False):
    # state s: [2]; scan inputs x (axis 0, forward) and y (axis 1, backward), [2] per step;
    # body: s' = s + x * y, outputs s' (stacked on axis 0) and x - y (stacked on axis 1, backward).
    # plain: every axis 0 and every direction forward (what ONNX's reference evaluator implements)
    ax, dr = ([0, 0], [0, 0]) if plain else ([0, 1], [0, 1])
    body = helper.make_graph(
        [helper.make_node("Mul", ["x_t", "y_t"], ["p"]), helper.make_node("Add", ["s_in", "p"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["acc"]), helper.make_node("Sub", ["x_t", "y_t"], ["d"])],
        "body", [helper.make_tensor_value_info(n, F, [2]) for n in ("s_in", "x_t", "y_t")],
        [helper.make_tensor_value_info(n, F, [2]) for n in ("s_out", "acc", "d")])
    scan = helper.make_node("Scan", ["s0", "x", "y"], ["s", "accs", "ds"], body=body, num_scan_inputs=2,
                            scan_input_axes=ax, scan_input_directions=dr, scan_output_axes=ax,
                            scan_output_directions=dr)
    g = helper.make_graph([scan], "g", [helper.make_tensor_value_info("s0", F, [2]),
                                        helper.make_tensor_value_info("x", F, [steps, 2]),
                                        helper.make_tensor_value_info("y", F, [steps, 2] if plain else [2, steps])],
                          [helper.make_tensor_value_info(n, F, [None] * r) for n, r in (("s", 1), ("accs", 2),
                                                                                        ("ds", 2))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("steps", [1, 5])
def test_scan_is_unrolled_and_matches_the_reference(steps):
    m = _scan_model(steps)
    onnx.checker.check_model(m)
    cm = braze.compile(braze.import_onnx(m))
    rng = np.random.default_rng(steps)
    feed = {"s0": rng.standard_normal(2).astype(np.float32), "x": rng.standard_normal((steps, 2)).astype(np.float32),
            "y": rng.standard_normal((2, steps)).astype(np.float32)}
    # by hand: ONNX's reference evaluator implements forward directions only
    s, accs, ds = feed["s0"].copy(), [], []
    for t in range(steps):
        x_t, y_t = feed["x"][t], feed["y"][:, steps - 1 - t]
        s = s + x_t * y_t
        accs.append(s)
        ds.append(x_t - y_t)
    want = (s, np.stack(accs, 0), np.stack(ds[::-1], 1))
    for got, w in zip(cm(*feed.values()), want):
        assert got.shape == w.shape
        np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-6)


def test_forward_scan_matches_onnx_reference_evaluator():
    m = _scan_model(4, plain=True)
    cm = braze.compile(braze.import_onnx(m))
    rng = np.random.default_rng(7)
    feed = {"s0": rng.standard_normal(2).astype(np.float32), "x": rng.standard_normal((4, 2)).astype(np.float32),
            "y": rng.standard_normal((4, 2)).astype(np.float32)}
    for got, want in zip(cm(*feed.values()), ReferenceEvaluator(m).run(None, feed)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_scan_over_a_symbolic_length_is_refused_by_name():
    m = _scan_model("t")
    with pytest.raises(UnsupportedOpError, match="Scan over t steps: braze unrolls Scan"):
        braze.import_onnx(m)
