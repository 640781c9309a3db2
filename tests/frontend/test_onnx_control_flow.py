"""ONNX control flow resolved at import (converters_control.py), natively against ONNX's reference
evaluator: Scan unrolled, with states, scan inputs read forward and backward on other axes, and scan
outputs stacked both ways; Loop unrolled over a known trip count; If by a known condition, or by a
run-time one through ``where``."""

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


def _branch(name, node_op, value):
    out = helper.make_tensor_value_info(f"{name}_out", F, ["n", 3])
    nodes = [helper.make_node("Constant", [], [f"{name}_c"], value=helper.make_tensor(f"{name}_c", F, [], [value])),
             helper.make_node(node_op, ["x", f"{name}_c"], [f"{name}_out"])]
    return helper.make_graph(nodes, name, [], [out])


def _if_model(cond_is_input: bool, cond=True):
    then, other = _branch("then", "Add", 1.0), _branch("else", "Mul", -2.0)
    ins = [helper.make_tensor_value_info("x", F, ["n", 3])]
    nodes = []
    if cond_is_input:
        ins.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    else:
        nodes.append(helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.BOOL, [], [cond])))
    nodes.append(helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other))
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("y", F, ["n", 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_if_with_a_known_condition_imports_one_branch():
    for cond, want_op in ((True, "add"), (False, "mul")):
        mod = braze.import_onnx(_if_model(False, cond))
        ops = {n.op for n in mod.main.nodes}
        assert want_op in ops and ({"add", "mul"} - {want_op}).isdisjoint(ops) and "where" not in ops
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        np.testing.assert_array_equal(braze.compile(mod)(x), x + 1 if cond else x * -2)


def test_if_with_a_run_time_condition_selects_at_symbolic_shapes():
    model = _if_model(True)
    m, ref = braze.compile(model), ReferenceEvaluator(model)
    for n in (1, 4):
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        for c in (True, False):
            np.testing.assert_array_equal(m(x, np.array(c)), ref.run(None, {"x": x, "c": np.array(c)})[0])


def test_if_whose_branches_differ_in_shape_needs_a_known_condition():
    model = _if_model(True)
    other = helper.make_graph([helper.make_node("Constant", [], ["v"], value=helper.make_tensor("v", F, [3], [1, 2, 3]))],
                              "else", [], [helper.make_tensor_value_info("v", F, [3])])
    model.graph.node[0].attribute[1].g.CopyFrom(other)
    with pytest.raises(UnsupportedOpError, match="output 0 is .* in one branch and .* in the other"):
        braze.import_onnx(model)


def _loop_model(trips, cond_input=False):
    # s' = s * 2 + i (i the iteration), scan output s'; 'trips' a constant
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F), helper.make_node("Constant", [], ["two"],
                                                                          value=helper.make_tensor("two", F, [], [2.0])),
         helper.make_node("Mul", ["s_in", "two"], ["m"]), helper.make_node("Add", ["m", "fi"], ["s_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Identity", ["s_out"], ["scan"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("s_in", F, ["n"])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("s_out", F, ["n"]), helper.make_tensor_value_info("scan", F, ["n"])])
    nodes = [helper.make_node("Constant", [], ["M"], value=helper.make_tensor("M", TensorProto.INT64, [], [trips]))]
    ins = [helper.make_tensor_value_info("s0", F, ["n"])]
    if cond_input:
        ins.append(helper.make_tensor_value_info("c", TensorProto.BOOL, []))
    else:
        nodes.append(helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.BOOL, [], [True])))
    nodes.append(helper.make_node("Loop", ["M", "c", "s0"], ["s", "scans"], body=body))
    g = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info("s", F, ["n"]),
                                            helper.make_tensor_value_info("scans", F, [trips, "n"])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])


def test_loop_with_a_known_trip_count_is_unrolled():
    model = _loop_model(5)
    m, ref = braze.compile(model), ReferenceEvaluator(model)
    for n in (1, 3):
        s0 = np.arange(n, dtype=np.float32) - 1
        for g, w in zip(m(s0), ref.run(None, {"s0": s0})):
            np.testing.assert_array_equal(g, w)


def test_loop_refuses_what_it_cannot_unroll():
    with pytest.raises(UnsupportedOpError, match="condition .* computed from tensor data"):
        braze.import_onnx(_loop_model(3, cond_input=True))
    with pytest.raises(UnsupportedOpError, match="a Loop of more than 256 steps"):
        braze.import_onnx(_loop_model(300))
