"""The reference interpreter's input checking (symbols bound from shapes)."""

import numpy as np
import pytest

from braze import reference
from braze.errors import InputError
from braze.ir.sym import Sym
from braze.ops import Builder, tensor


def _model():
    b = Builder()
    batch = b.sym("batch", 1, 8)
    seq = b.sym("seq", 1, 64)
    x = b.param("x", tensor("f32", batch, seq))
    y = b.param("y", tensor("f32", batch, seq))
    b.ret(b.add(x, y))
    return b.module


def test_binds_symbols_and_runs():
    m = _model()
    for bs, s in [(1, 1), (3, 7), (8, 64)]:
        x = np.random.rand(bs, s).astype(np.float32)
        np.testing.assert_array_equal(reference.run(m, x, x), x + x)


@pytest.mark.parametrize("shapes,dtype,msg", [
    (((3,), (3, 4)), "float32", "rank"),
    (((3, 4), (3, 4)), "float64", "dtype"),
    (((9, 4), (9, 4)), "float32", "outside its range"),
    (((3, 4), (3, 5)), "float32", "already bound"),
])
def test_bad_inputs_are_clear_errors(shapes, dtype, msg):
    m = _model()
    arrs = [np.zeros(s, dtype=dtype) for s in shapes]
    with pytest.raises(InputError, match=msg) as e:
        reference.run(m, *arrs)
    assert "%x" in str(e.value) or "%y" in str(e.value) or "batch" in str(e.value)


def test_wrong_input_count():
    with pytest.raises(InputError, match="takes 2 inputs"):
        reference.run(_model(), np.zeros((1, 1), np.float32))


def test_expression_dims_are_checked():
    b = Builder()
    s = b.sym("s")
    x = b.param("x", tensor("f32", s))
    y = b.param("y", tensor("f32", 2 * s))
    b.ret(b.add(b.concat(x, x, axis=0), y))
    m = b.module
    out = reference.run(m, np.ones(3, np.float32), np.ones(6, np.float32))
    assert out.shape == (6,)
    with pytest.raises(InputError, match="must equal 2\\*s"):
        reference.run(m, np.ones(3, np.float32), np.ones(5, np.float32))


def test_assumed_equality_is_checked_at_run_time():
    b = Builder()
    a, c = b.sym("a"), b.sym("c")
    x = b.param("x", tensor("f32", a))
    y = b.param("y", tensor("f32", c))
    b.ret(b.add(x, y))  # broadcasting a against c records a == c
    m = b.module
    assert m.constraints.equal(Sym("a"), Sym("c")) is True
    reference.run(m, np.ones(4, np.float32), np.ones(4, np.float32))
    with pytest.raises(InputError, match="shape constraints"):
        reference.run(m, np.ones(4, np.float32), np.ones(5, np.float32))
