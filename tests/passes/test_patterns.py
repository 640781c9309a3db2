"""recognize_patterns: GPT-2's hand-written tanh GELU becomes one gelu(approximate="tanh")."""

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
