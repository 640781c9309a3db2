"""recognize_patterns: GPT-2's hand-written tanh GELU becomes one gelu(approximate="tanh"); rows added
into zeros and then to another tensor are added into it (add_into_rows)."""

import math

import numpy as np
import pytest

from braze import reference
from braze.ops import Builder, tensor
from braze.passes import dce, recognize_patterns


@pytest.mark.parametrize("cube", ["pow", "mul"])
def test_new_gelu_becomes_gelu_tanh(cube):
    b = Builder()
    n = b.sym("n")
    x = b.param("x", tensor("f32", n, 16))
    c = lambda v: b.constant(np.array(v, np.float32))  # noqa: E731
    x3 = b.pow(x, c(3.0)) if cube == "pow" else b.mul(b.mul(x, x), x)
    inner = b.mul(b.add(x, b.mul(x3, c(0.044715))), c(math.sqrt(2 / math.pi)))
    b.ret(b.mul(b.mul(x, c(0.5)), b.add(b.tanh(inner), c(1.0))))
    m = b.module
    xs = np.random.default_rng(0).standard_normal((5, 16)).astype(np.float32) * 3
    want = reference.run(m, xs)
    m = dce(recognize_patterns(m))
    ops = [nd.op for nd in m.main.nodes if nd.op != "constant"]
    assert ops == ["gelu"] and m.main.nodes[-1].attrs["approximate"] == "tanh"
    np.testing.assert_allclose(reference.run(m, xs), want, rtol=1e-5, atol=1e-6)


def test_other_constants_are_left_alone():
    b = Builder()
    x = b.param("x", tensor("f32", 4))
    c = lambda v: b.constant(np.array(v, np.float32))  # noqa: E731
    inner = b.mul(b.add(x, b.mul(b.pow(x, c(3.0)), c(0.05))), c(math.sqrt(2 / math.pi)))
    b.ret(b.mul(b.mul(x, c(0.5)), b.add(b.tanh(inner), c(1.0))))
    m = dce(recognize_patterns(b.module))
    assert "gelu" not in [nd.op for nd in m.main.nodes]


@pytest.mark.parametrize("zeros", ["full", "constant"])
def test_rows_added_to_zeros_then_to_a_tensor_are_added_into_it(zeros):
    """``a + index_add(zeros, i, s)`` (a tied embedding's two gradients) -> ``index_add(a, i, s)``,
    from a ``full`` or the constant that folding makes of a small one; not where the rows' sum is
    read elsewhere too, or the add broadcasts."""
    def build(reused=False, small_a=False):
        b = Builder()
        t = b.sym("t")
        a = b.param("a", tensor("f32", 1 if small_a else 5, 3))
        i, s = b.param("i", tensor("i64", t)), b.param("s", tensor("f32", t, 3))
        z = b.full(shape=(5, 3), value=0.0, dtype="f32") if zeros == "full" else \
            b.constant(np.zeros((5, 3), np.float32))
        rows = b.index_add(z, i, s)
        b.ret(b.add(rows, a), *([rows] if reused else []))
        return b.module
    m = build()
    args = (np.arange(15, dtype=np.float32).reshape(5, 3), np.array([4, 0, 4]), np.ones((3, 3), np.float32))
    want = reference.run(m, *args)
    m = dce(recognize_patterns(m))
    (n,) = [nd for nd in m.main.nodes if nd.op not in ("constant", "full")]
    assert n.op == "index_add" and n.inputs[0] is m.main.params[0]
    np.testing.assert_array_equal(reference.run(m, *args), want)
    for kw in ({"reused": True}, {"small_a": True}):
        m = dce(recognize_patterns(build(**kw)))
        assert "add" in [nd.op for nd in m.main.nodes], kw
