"""ONNX sequences and optionals, resolved at import (converters_sequence.py, structure.py): sequences
built and taken apart inside a model compiled natively once and run at several dynamic shapes against
ONNX's reference evaluator; a sequence graph input imported for a given structure, its output one
tensor per element; the backend importing per structure; If over sequences with a condition known only
at run time; and the errors: a sequence where a tensor is needed, a sequence input to braze.compile, a
split into a number of pieces only known at run time."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx_models import onnx_model as _model  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import braze  # noqa: E402
from braze.errors import UnsupportedOpError  # noqa: E402
from braze.frontend.onnx import import_onnx  # noqa: E402
from braze.frontend.onnx.backend import StructuredRep, prepare  # noqa: E402

pytestmark = pytest.mark.usefixtures("module_cache")
F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL




def _seq_info(name, elem=F, shape=None):
    return helper.make_tensor_sequence_value_info(name, elem, shape)


def test_sequence_ops_inside_a_model_compile_once_for_every_shape(rng):
    """[x, y] + z at the front, the second erased, one taken out, the rest stacked and concatenated:
    SequenceConstruct, SequenceInsert, SequenceErase, SequenceAt, SequenceLength, ConcatFromSequence."""
    c = lambda name, v: helper.make_node("Constant", [], [name], value=helper.make_tensor(name, I64, [], [v]))  # noqa: E731
    nodes = [helper.make_node("SequenceConstruct", ["x", "y"], ["s"]),
             c("zero", 0), c("one", 1), c("last", -1),
             helper.make_node("SequenceInsert", ["s", "z", "zero"], ["s2"]),
             helper.make_node("SequenceErase", ["s2", "one"], ["s3"]),
             helper.make_node("SequenceAt", ["s3", "last"], ["at"]),
             helper.make_node("SequenceLength", ["s3"], ["n"]),
             helper.make_node("ConcatFromSequence", ["s3"], ["cat"], axis=0),
             helper.make_node("ConcatFromSequence", ["s3"], ["stack"], axis=-1, new_axis=1)]
    ins = [helper.make_tensor_value_info(k, F, ["b", 3]) for k in "xyz"]
    outs = [helper.make_tensor_value_info("at", F, ["b", 3]), helper.make_tensor_value_info("n", I64, []),
            helper.make_tensor_value_info("cat", F, [None, 3]), helper.make_tensor_value_info("stack", F, ["b", 3, 2])]
    m = _model(nodes, ins, outs)
    cm = braze.compile(m)
    ref = ReferenceEvaluator(m)
    for b in (1, 4, 7):
        feeds = [rng.standard_normal((b, 3)).astype(np.float32) for _ in range(3)]
        want = ref.run(None, dict(zip("xyz", feeds)))
        for g, w in zip(cm(*feeds), want):
            np.testing.assert_array_equal(np.asarray(g), w)


def test_split_to_sequence_then_concat_and_an_optional(rng):
    """SplitToSequence by sizes, by a scalar size (the last piece shorter) and into ones without the
    axis; Optional, OptionalHasElement and OptionalGetElement around it."""
    sizes = helper.make_tensor("sizes", I64, [2], [1, 4])
    chunk = helper.make_tensor("chunk", I64, [], [2])
    nodes = [helper.make_node("SplitToSequence", ["x", "sizes"], ["s1"], axis=1),
             helper.make_node("SplitToSequence", ["x", "chunk"], ["s2"], axis=1),
             helper.make_node("SplitToSequence", ["x"], ["s3"], axis=1, keepdims=0),
             helper.make_node("ConcatFromSequence", ["s1"], ["a"], axis=1),
             helper.make_node("SequenceLength", ["s2"], ["n2"]),
             helper.make_node("ConcatFromSequence", ["s3"], ["c"], axis=0),
             helper.make_node("Optional", ["c"], ["o"]),
             helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("OptionalGetElement", ["o"], ["got"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["b", 5])],
               [helper.make_tensor_value_info("a", F, [None, None]), helper.make_tensor_value_info("n2", I64, []),
                helper.make_tensor_value_info("has", B, []), helper.make_tensor_value_info("got", F, [None])],
               [sizes, chunk])
    cm = braze.compile(m)
    ref = ReferenceEvaluator(m)
    for b in (1, 3):
        x = rng.standard_normal((b, 5)).astype(np.float32)
        got = cm(x)
        for g, w in zip(got[:3], ref.run(None, {"x": x})):
            np.testing.assert_array_equal(np.asarray(g), w)
        # ONNX's reference gives OptionalGetElement of an Optional tensor as a list of it
        np.testing.assert_array_equal(got[3], x.T.reshape(-1))


def _identity_of_a_sequence():
    nodes = [helper.make_node("SequenceLength", ["xs"], ["n"]),
             helper.make_node("Identity", ["xs"], ["ys"])]
    return _model(nodes, [_seq_info("xs")], [helper.make_tensor_value_info("n", I64, []), _seq_info("ys")])


def test_a_sequence_input_needs_its_structure():
    m = _identity_of_a_sequence()
    with pytest.raises(UnsupportedOpError, match="(?s)graph input 'xs' is a sequence.*sequences="):
        braze.compile(m)
    module = import_onnx(m, sequences={"xs": [2, 1, 2]})
    assert [p.name for p in module.main.params] == ["xs_0", "xs_1", "xs_2"]
    assert module.output_names["main"] == ["n", "ys_0", "ys_1", "ys_2"]


def test_the_backend_imports_per_structure(rng):
    rep = prepare(_identity_of_a_sequence())
    assert isinstance(rep, StructuredRep)
    for shapes in ([(2, 3)], [(1,), (4, 5), ()], []):
        xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        n, ys = rep.run([xs])
        assert int(n) == len(xs) and len(ys) == len(xs)
        for y, x in zip(ys, xs):
            np.testing.assert_array_equal(y, x)
        n2, ys2 = rep.run({"xs": xs})  # by name
        assert int(n2) == len(xs) and all(np.array_equal(a, b) for a, b in zip(ys2, xs))


def test_if_over_sequences_with_a_condition_known_at_run_time(rng):
    """Both branches build a sequence of one structure: the result selects element by element."""
    def branch(name, k):
        return helper.make_graph([helper.make_node("Mul", ["x", "k" + name], ["m" + name]),
                                  helper.make_node("SequenceConstruct", ["m" + name, "x"], ["s" + name])],
                                 name, [], [_seq_info("s" + name, shape=["n"])],
                                 initializer=[helper.make_tensor("k" + name, F, [], [k])])
    nodes = [helper.make_node("If", ["c"], ["s"], then_branch=branch("t", 2.0), else_branch=branch("e", -1.0)),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)]
    m = _model(nodes, [helper.make_tensor_value_info("c", B, []), helper.make_tensor_value_info("x", F, ["n"])],
               [helper.make_tensor_value_info("y", F, [None])])
    cm = braze.compile(m)
    for c in (True, False):
        x = rng.standard_normal(5).astype(np.float32)
        np.testing.assert_array_equal(cm(np.array(c), x), np.concatenate([x * (2.0 if c else -1.0), x]))


def test_a_sequence_where_a_tensor_is_needed_is_refused_by_name():
    nodes = [helper.make_node("SequenceConstruct", ["x"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, [2])], [helper.make_tensor_value_info("y", F, [2])])
    with pytest.raises(UnsupportedOpError, match="input 0 \\('s'\\) is a sequence; this op takes tensors"):
        import_onnx(m)


def test_a_split_into_pieces_counted_at_run_time_is_refused():
    nodes = [helper.make_node("SplitToSequence", ["x"], ["s"], axis=0),
             helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0)]
    m = _model(nodes, [helper.make_tensor_value_info("x", F, ["n"])], [helper.make_tensor_value_info("y", F, [None])])
    with pytest.raises(UnsupportedOpError, match="symbolic size n into pieces of one"):
        import_onnx(m)
