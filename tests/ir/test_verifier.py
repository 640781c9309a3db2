"""braze.ir.verify: each invariant, broken by hand, raises VerifyError."""

from __future__ import annotations

import numpy as np
import pytest

from braze.errors import VerifyError
from braze.ir import Sym, parse, verify
from braze.ir.graph import Node, SourceLoc, Value
from braze.ir.types import DType
from braze.ops import Builder, all_ops, tensor

pytestmark = pytest.mark.skipif(not {"add", "neg", "split", "layer_norm", "reshape", "softmax"} <= set(all_ops()),
                                reason="ops not registered yet")


def good():
    """A small valid module: (x + w) split in two, a reshape with a symbolic shape."""
    b = Builder()
    n = b.sym("n", 1, 64)
    x = b.param("x", tensor("f32", n, 8))
    w = b.constant(np.ones(8, np.float32), name="w")
    h = b.add(x, w, loc=SourceLoc("m.py", 3, "add"))
    p, q = b.split(h, axis=1, sizes=[3, 5])
    r = b.reshape(q, shape=[5 * n])
    b.ret(p, r)
    return b.module


def fails(m, *words):
    with pytest.raises(VerifyError) as ei:
        verify(m)
    msg = str(ei.value)
    for w in words:
        assert w in msg, msg
    return ei.value


def test_good_module_verifies():
    m = good()
    verify(m)
    verify(parse(str(m)))


def test_verify_does_not_change_the_store():
    m = good()
    facts = list(m.constraints.facts)
    verify(m)
    assert m.constraints.facts == facts


def test_error_names_function_node_and_problem():
    m = good()
    add = m.main.nodes[1]
    add.outputs[0].type = tensor("f32", m.symbols["n"], 9)
    e = fails(m, "in @main", "output %0 has type f32[n, 9]", "f32[n, 8]")
    assert "%0 = add(%x, %w) : f32[n, 9]" in e.where
    assert "m.py:3" in e.where


def test_wrong_dtype():
    m = good()
    m.main.nodes[1].outputs[0].type = tensor("f16", m.symbols["n"], 8)
    fails(m, "is f16", "gives f32")


def test_wrong_rank():
    m = good()
    m.main.nodes[1].outputs[0].type = tensor("f32", 8)
    fails(m, "rank 1", "rank 2")


def test_dims_equal_under_constraints_pass():
    m = good()
    k = m.constraints.add_symbol(Sym("k", 1, 64))
    m.constraints.add_equal(k, m.symbols["n"])
    node = m.main.nodes[1]
    node.outputs[0].type = tensor("f32", k, 8)  # k == n under the constraints
    verify(m)


def test_unprovable_dim_fails():
    m = good()
    k = m.constraints.add_symbol(Sym("k", 1, 64))
    m.main.nodes[1].outputs[0].type = tensor("f32", k, 8)
    fails(m, "dim 0 is k, expected n")


def test_value_used_before_definition():
    m = good()
    f = m.main
    f.nodes[1], f.nodes[2] = f.nodes[2], f.nodes[1]
    fails(m, "input %0 is used before its definition")


def test_dangling_input():
    m = good()
    stray = Value("stray", tensor("f32", m.symbols["n"], 8))
    m.main.nodes[1].inputs[0] = stray
    fails(m, "%stray is not defined in @main", "dangling")


def test_dangling_result():
    m = good()
    m.main.results.append(Value("ghost", tensor("f32", 1)))
    fails(m, "result %ghost is not defined", "dangling")


def test_value_defined_twice():
    m = good()
    f = m.main
    v = f.nodes[1].outputs[0]
    dup = Node("neg", [v], {}, [v])  # redefines %0
    f.nodes.insert(2, dup)
    fails(m, "defined more than once")


def test_output_that_is_a_param():
    m = good()
    f = m.main
    x = f.params[0]
    f.nodes.append(Node("neg", [x], {}, [x]))
    fails(m, "%x is defined more than once")


def test_duplicate_params():
    m = good()
    m.main.params.append(m.main.params[0])
    fails(m, "parameter %x appears twice")


def test_stale_producer():
    m = good()
    v = m.main.nodes[1].outputs[0]
    v.producer = None
    fails(m, "producer is not this node")


def test_unknown_op():
    m = good()
    m.main.nodes[1].op = "frobnicate"
    fails(m, "unknown op 'frobnicate'")


def test_wrong_arity():
    m = good()
    n = m.main.nodes[1]
    n.inputs.append(n.inputs[0])
    fails(m, "op 'add' takes 2 inputs")


def test_none_for_a_required_input():
    m = good()
    m.main.nodes[1].inputs[1] = None
    fails(m, "is none, but it is not optional")


def test_none_for_an_optional_input_is_fine():
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("n"), 8))
    b.ret(b.layer_norm(x, None, None))
    verify(b.module)
    verify(parse(str(b.module)))


def test_unknown_attribute():
    m = good()
    m.main.nodes[1].attrs["alpha"] = 1.0
    fails(m, "op 'add' has no attribute(s) ['alpha']")


def test_missing_required_attribute():
    m = good()
    del m.main.nodes[3].attrs["shape"]
    fails(m, "needs attribute 'shape'")


def test_missing_defaulted_attribute_is_fine():
    m = good()
    del m.main.nodes[2].attrs["axis"]
    m.main.nodes[2].attrs["sizes"] = (8, 0)  # axis defaults to 0 ... which no longer fits
    with pytest.raises(VerifyError):
        verify(m)
    b = Builder()
    x = b.param("x", tensor("f32", 4))
    b.ret(b.softmax(x))
    del b.func.nodes[0].attrs["axis"]
    verify(b.module)


@pytest.mark.parametrize("key, value", [("axis", 1.5), ("axis", True), ("axis", "1"), ("sizes", (3, 5.0)),
                                         ("sizes", 8)])
def test_ill_kinded_attribute(key, value):
    m = good()
    m.main.nodes[2].attrs[key] = value
    fails(m, f"attribute '{key}' of 'split' must be")


def test_missing_constant():
    m = good()
    del m.constants["w"]
    fails(m, "names @w, which is not in the module's constants")


def test_bad_constant_value():
    m = good()
    m.constants["w"] = [1.0] * 8
    fails(m, "constant @w is a list")


def test_undeclared_symbol_in_a_type():
    m = good()
    ghost = Sym("ghost")
    m.main.params[0].type = tensor("f32", ghost, 8)
    fails(m, "parameter %x uses symbol 'ghost', which the module does not declare")


def test_undeclared_symbol_in_an_attribute():
    m = good()
    ghost = Sym("ghost")
    m.main.nodes[3].attrs["shape"] = (5 * ghost,)
    fails(m, "attribute 'shape' uses symbol 'ghost'")


def test_shape_inference_failure_is_reported():
    m = good()
    m.main.nodes[3].attrs["shape"] = (3,)  # 5*n elements, n >= 1, can never be 3
    with pytest.raises(VerifyError, match="in @main"):
        verify(m)


def test_wrong_output_count():
    m = good()
    split = m.main.nodes[2]
    split.outputs.pop()
    fails(m, "produces 2 output(s) here, the node has 1")


def test_not_a_tensor_type():
    m = good()
    m.main.params[0].type = (DType.float32, (4,))
    fails(m, "not a TensorType")


def test_function_key_mismatch():
    m = good()
    m.functions["other"] = m.functions.pop("main")
    fails(m, "stored under the key 'other'")


def test_multi_function_module_verifies_each():
    m = good()
    b = Builder(m, "second")
    y = b.param("y", tensor("f32", 4))
    out = b.neg(y)
    b.ret(out)
    verify(m)
    # a value from @main used in @second is dangling there
    b.func.nodes[0].inputs[0] = m.main.params[0]
    fails(m, "in @second", "not defined in @second")


def test_constant_node_type_must_match_the_constant():
    m = good()
    m.constants["w"] = np.ones(9, np.float32)
    fails(m, "output %w has type f32[8]", "f32[9]")


def test_parsed_placeholders_verify():
    m = good()
    m.constants["w"] = np.ones(8, np.float32)
    text = m.to_text(inline_limit=0)
    back = parse(text)
    verify(back)


def _decides(n_sizes: int = 1):
    """nonzero(x) and what reads its size; ``n_sizes`` size symbols declared."""
    b = Builder()
    n = b.sym("n")
    x = b.param("x", tensor("f32", n))
    sizes = [b.size_sym(n) for _ in range(n_sizes)]
    idx = b.nonzero(x, size=sizes[0])
    b.ret(b.neg(idx))
    return b, idx, sizes


def test_a_size_a_node_decides_verifies_and_reads_back():
    b, _, _ = _decides()
    verify(b.module)
    text = b.module.to_text()
    assert "sizes {\n    u0 <= n\n  }" in text and "nonzero(%x) {size=u0}" in text
    again = parse(text)
    verify(again)
    assert again == b.module and again.data_symbols == {"u0": Sym("n")}


def test_a_size_outside_the_sizes_block_is_refused():
    b, _, _ = _decides()
    del b.module.data_symbols["u0"]
    fails(b.module, "decides the size u0, which the module's sizes block does not list")


def test_a_size_used_before_a_node_decides_it_is_refused():
    b, idx, (u0, u1) = _decides(2)
    b.func.nodes[-1].outputs[0].type = tensor("i64", 1, u1)
    fails(b.module, "uses the size u1 before a node decides it")


def test_a_size_decided_twice_is_refused():
    b, idx, (u0,) = _decides()
    x = b.func.params[0]
    b.nonzero(x, size=u0)
    fails(b.module, "the size u0 is decided twice")
