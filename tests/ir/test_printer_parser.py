"""The IR text form: print -> parse round trips, parse errors, constant placeholders."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from braze.errors import IRParseError
from braze.ir import ConstantRef, Module, SourceLoc, Sym, parse, verify
from braze.ir import sym as S
from braze.ir.parser import parse_expr, parse_type, tokenize
from braze.ir.printer import print_module
from braze.ops import Builder, all_ops, tensor


def needs(*ops):
    missing = [o for o in ops if o not in all_ops()]
    return pytest.mark.skipif(bool(missing), reason=f"ops not registered yet: {missing}")


def round_trip(m: Module, **kw) -> Module:
    text = str(m)
    back = parse(text, **kw)
    assert str(back) == text, f"--- printed\n{text}\n--- reprinted\n{back}"
    assert back == m
    return back


# --- hand-built modules ---------------------------------------------------------------


def test_params_constants_only():
    b = Builder()
    s = b.sym("seq", 1, 512)
    x = b.param("x", tensor("f32", b.sym("batch"), s, 8))
    b.constant(np.arange(64, dtype=np.float32).reshape(8, 8), name="w")
    b.constant(np.float32(0.1))
    b.constant(np.array([True, False]))
    b.ret(x)
    back = round_trip(b.module)
    verify(back)
    assert "@w : f32[8, 8] = dense<sha256:" in str(b.module)
    assert "@c1 : f32[] = [0.1]" in str(b.module)
    assert isinstance(back.constants["w"], ConstantRef)
    assert back.constants["c1"].dtype == np.float32 and back.constants["c1"] == np.float32(0.1)
    assert back.constants["c2"].tolist() == [True, False]


def test_empty_module_and_function():
    m = Module()
    round_trip(m)
    b = Builder()
    b.ret()
    round_trip(b.module)
    assert "return\n" in str(b.module)


@needs("add", "matmul")
def test_mlp_round_trip_and_text():
    b = Builder()
    bt, s = b.sym("batch"), b.sym("seq", 1, 512)
    x = b.param("x", tensor("f32", bt, s, 32))
    w = b.constant(np.ones((32, 32), np.float32), name="w0")
    bias = b.constant(np.full((32,), 0.5, np.float32), name="b0")
    h = b.matmul(x, w, loc=SourceLoc("m.py", 12, "fc1"))
    y = b.add(h, bias)
    b.ret(y)
    text = str(b.module)
    assert 'loc{"file":"m.py","line":12,"name":"fc1"}' in text
    assert "%0 = matmul(%x, %w0) : f32[batch, seq, 32]" in text
    back = round_trip(b.module)
    verify(back)
    n = back.main.nodes[2]
    assert n.loc == SourceLoc("m.py", 12, "fc1")


def test_an_attribute_left_out_as_its_default_none_reads_back_and_compiles():
    """A sum over every axis prints no ``axes`` (its default, None); read back, the node has
    axes=None again, so a dump with a loss's sum resumes through lowering (it raised a TypeError)."""
    import braze
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("n"), 3))
    b.ret(b.op("reduce_sum", [x], axes=None, keepdims=False))
    text = str(b.module)
    assert "axes" not in text
    back = parse(text)
    assert back.main.nodes[0].attrs["axes"] is None and str(back) == text
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(braze.compile(back)(a), a.sum())


@needs("split", "slice", "reshape", "concat")
def test_symbolic_attributes_round_trip():
    b = Builder()
    s = b.sym("seq", 1, 4096)
    x = b.param("x", tensor("f32", 2, s, 64))
    a, c = b.split(x, axis=2, sizes=[16, 48])
    sl = b.slice(a, axis=1, start=1, end=S.smin(s, 512))
    r = b.reshape(x, shape=[2 * s, 64])
    h = b.reshape(c, shape=[2, s, 6, 8])
    d = b.slice(x, axis=1, start=S.floordiv(s, 2), end=s)
    out = b.concat(a, c, axis=2)
    b.ret(sl, r, h, d, out)
    text = str(b.module)
    assert "sizes=[16, 48]" in text
    assert "end=min(512, seq)" in text or "end=min(seq, 512)" in text
    assert "shape=[2*seq, 64]" in text
    assert "start=(seq // 2)" in text
    back = round_trip(b.module)
    verify(back)
    # attributes come back with their kinds
    split = next(n for n in back.main.nodes if n.op == "split")
    assert split.attrs["sizes"] == (16, 48) and isinstance(split.attrs["sizes"], tuple)
    rs = next(n for n in back.main.nodes if n.op == "reshape")
    assert rs.attrs["shape"][0] == 2 * back.symbols["seq"]


@needs("cast", "leaky_relu", "clamp", "gelu", "layer_norm")
def test_attribute_kinds_round_trip():
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("n"), 16))
    y = b.cast(x, dtype="f16")
    y = b.cast(y, dtype="f32")
    y = b.leaky_relu(y, alpha=1.0)
    y = b.clamp(y, min=-math.inf, max=1e-30)
    y = b.gelu(y, approximate="tanh")
    y = b.layer_norm(y, None, None, eps=1e-12)
    b.ret(y)
    text = str(b.module)
    assert "dtype=#f16" in text
    assert "alpha=1.0" in text
    assert "min=-inf" in text and "max=1e-30" in text
    assert 'approximate="tanh"' in text
    assert "layer_norm(%" in text and ", none, none)" in text
    back = round_trip(b.module)
    verify(back)
    cl = next(n for n in back.main.nodes if n.op == "clamp")
    assert cl.attrs["min"] == -math.inf and cl.attrs["max"] == 1e-30


@needs("full")
def test_float_attributes_are_exact():
    b = Builder()
    vals = [0.1, 1 / 3, 1e-300, -0.0, 1e16, 2.0 ** -1074, math.inf]
    outs = [b.full(shape=[2], value=v, dtype="f32") for v in vals]
    b.ret(*outs)
    back = round_trip(b.module)
    got = [n.attrs["value"] for n in back.main.nodes]
    assert [repr(g) for g in got] == [repr(v) for v in vals]


@needs("full")
def test_nan_float_attribute():
    b = Builder()
    b.ret(b.full(shape=[1], value=math.nan, dtype="f32"))
    back = round_trip(b.module)
    assert math.isnan(back.main.nodes[0].attrs["value"])


@needs("add", "matmul")
def test_multi_function_module():
    b = Builder()
    x = b.param("x", tensor("f32", b.sym("n"), 4))
    b.ret(b.add(x, x))
    b2 = Builder(b.module, "second")
    y = b2.param("y", tensor("f32", 4, 4))
    b2.ret(b2.matmul(y, y))
    text = str(b.module)
    assert "func @main(" in text and "func @second(" in text
    back = round_trip(b.module)
    assert list(back.functions) == ["main", "second"]
    verify(back)


def test_constraints_round_trip_to_equal_store():
    b = Builder()
    s, sk, n = b.sym("seq", 1, 1024), b.sym("seq_k"), b.sym("n", 0, 64)
    c = b.module.constraints
    c.add_equal(sk, s)
    c.add_divisible(s, 8)
    c.add_range(n, 1, 32)
    c.add_product_equal([b.sym("p"), b.sym("q")], [s, 4])
    c.add_divisible(2 * n + 2, 4)
    b.ret()
    text = str(b.module)
    assert "seq_k == seq" in text
    assert "seq % 8 == 0" in text
    assert "n in [1, 32]" in text
    back = round_trip(b.module)
    assert back.constraints == b.module.constraints
    assert back.constraints.equal(back.symbols["seq_k"], back.symbols["seq"]) is True
    assert back.constraints.divisible(back.symbols["seq"], 8) is True
    assert back.symbols["n"].hi == 32


def test_equality_fact_on_a_mod_is_not_a_divisibility_fact():
    b = Builder()
    s = b.sym("s")
    b.module.constraints.add_equal(S.mod(s, 8), 0)
    b.module.constraints.add_divisible(s, 8)
    b.ret()
    back = round_trip(b.module)
    assert [f[0] for f in back.constraints.facts] == ["eq", "div"]


def test_symbol_ranges_normalize_expressions():
    # a Sym object without the range the store gives it prints like the store's
    b = Builder()
    loose = Sym("t")
    x = b.param("x", tensor("f32", loose))
    b.module.constraints.add_range(loose, 1, 256)
    b.ret(x)
    b.func.params[0].type = tensor("f32", S.smin(loose, 512))
    assert "%x: f32[t]" in str(b.module)
    round_trip(b.module)


def test_clashing_value_names_get_suffixes():
    b = Builder()
    x = b.param("x", tensor("f32", 4))
    c = b.constant(np.zeros(4, np.float32), name="x")  # named like the parameter
    c.name = "x"
    b.ret(c)
    text = str(b.module)
    assert "%x_1 = constant()" in text and "return %x_1" in text
    round_trip(b.module)


def test_value_and_constant_names_that_need_quotes():
    b = Builder()
    x = b.param("x", tensor("f32", 2))
    x.name = "input 0"
    b.module.constants["my weight"] = np.zeros(2, np.float32)
    b.ret(x)
    text = str(b.module)
    assert '%"input 0"' in text and '@"my weight"' in text
    back = round_trip(b.module)
    assert back.main.params[0].name == "input 0"


def test_inline_constant_values_are_exact():
    b = Builder()
    arrs = {
        "f32": np.array([0.1, -0.0, np.inf, -np.inf, 3.4028235e38, 1e-45], np.float32),
        "f64": np.array([0.1, 1 / 3, 5e-324], np.float64),
        "f16": np.array([0.1, 65504, 6e-8], np.float16),
        "i64": np.array([[-(2 ** 63), 2 ** 63 - 1]], np.int64),
        "u8": np.array([0, 255], np.uint8),
        "i8": np.array(-128, np.int8),
        "i16": np.array([-(2 ** 15), 2 ** 15 - 1], np.int16),
        "u16": np.array([0, 2 ** 16 - 1], np.uint16),
        "u32": np.array([0, 2 ** 32 - 1], np.uint32),
        "u64": np.array([0, 2 ** 63, 2 ** 64 - 1], np.uint64),
        "empty": np.zeros((0, 3), np.float32),
    }
    for k, a in arrs.items():
        b.module.constants[k] = a
    b.module.constants["nan"] = np.array([np.nan], np.float32)
    b.ret()
    back = round_trip(b.module)
    for k, a in arrs.items():
        got = back.constants[k]
        assert got.dtype == a.dtype and got.shape == a.shape
        assert got.tobytes() == a.tobytes(), k
    assert np.isnan(back.constants["nan"][0])


def test_bfloat16_constant():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    b = Builder()
    b.module.constants["h"] = np.array([0.1, 3.0], ml_dtypes.bfloat16)
    b.ret()
    back = round_trip(b.module)
    assert back.constants["h"].tobytes() == b.module.constants["h"].tobytes()


def test_inline_limit():
    b = Builder()
    b.constant(np.arange(4, dtype=np.int32), name="small")
    b.ret()
    assert "= [0, 1, 2, 3]" in print_module(b.module)
    assert "dense<sha256:" in print_module(b.module, inline_limit=3)


# --- constants: placeholders and given arrays ------------------------------------------


def _weights_module():
    b = Builder()
    w = b.constant(np.arange(100, dtype=np.float32).reshape(10, 10), name="w")
    b.ret(w)
    return b.module


def test_constant_ref_placeholder():
    m = _weights_module()
    back = parse(str(m))
    ref = back.constants["w"]
    assert isinstance(ref, ConstantRef)
    assert ref.digest == m.constant_digest("w")
    assert str(ref.type) == "f32[10, 10]"
    assert back == m  # equal by content hash
    verify(back)  # inference of 'constant' reads the placeholder's type
    assert back.constant_digest("w") == m.constant_digest("w")


def test_given_constants_are_checked():
    m = _weights_module()
    text = str(m)
    back = parse(text, constants={"w": m.constants["w"]})
    assert back.constants["w"] is m.constants["w"]
    with pytest.raises(IRParseError, match="content hash"):
        parse(text, constants={"w": m.constants["w"] + 1})
    with pytest.raises(IRParseError, match="f32"):
        parse(text, constants={"w": np.zeros((10, 10), np.float64)})
    with pytest.raises(IRParseError, match=r"f32\[10, 10\]"):
        parse(text, constants={"w": np.zeros((5, 20), np.float32)})
    with pytest.raises(IRParseError, match="missing"):
        parse(text, constants={})
    # a placeholder with the same hash is accepted
    ref = parse(text).constants["w"]
    assert parse(text, constants={"w": ref}).constants["w"] is ref


def test_placeholder_reprints_as_hash_with_any_inline_limit():
    b = Builder()
    b.constant(np.arange(4, dtype=np.int32), name="small")
    b.ret()
    text = print_module(b.module, inline_limit=0)
    back = parse(text)
    assert isinstance(back.constants["small"], ConstantRef)
    assert print_module(back) == text


# --- parse errors --------------------------------------------------------------------


def _err(text, **kw) -> IRParseError:
    with pytest.raises(IRParseError) as ei:
        parse(text, **kw)
    return ei.value


GOOD = """module {
  symbols {
    n in [1, inf]
  }
  func @main(%x: f32[n, 4]) -> (f32[n, 4]) {
    return %x
  }
}
"""


def test_good_text_parses():
    m = parse(GOOD)
    assert str(m) == GOOD


@pytest.mark.parametrize("bad, line, col, words", [
    (GOOD.replace("f32[n, 4]) ->", "f32[n, 4) ->"), 5, 26, "expected ']'"),
    (GOOD.replace("return %x", "return %y"), 6, 12, "%y is used but not defined"),
    (GOOD.replace("n in [1, inf]", "n in [1 inf]"), 3, 13, "expected ','"),
    (GOOD.replace("f32[n, 4]) ->", "f99[n, 4]) ->"), 5, 18, "unknown dtype"),
    (GOOD.replace("module {", "modul {"), 1, 1, "expected 'module'"),
    (GOOD + "extra", 9, 1, "end of the text"),
    (GOOD.replace("    return %x\n", ""), 6, 3, "expected a node or 'return'"),
    (GOOD.replace("-> (f32[n, 4])", "-> (f32[n, 5])"), 5, 33, "does not match"),
    (GOOD.replace("[n, 4]) ->", "[n, 4 $]) ->"), 5, 27, "unexpected character"),
])
def test_parse_errors_have_line_and_column(bad, line, col, words):
    e = _err(bad)
    msg = str(e)
    assert msg.startswith(f"{line}:{col}:"), msg
    assert words in msg
    assert e.line == line and e.col == col


def test_parse_error_shows_the_line_with_a_caret():
    e = _err(GOOD.replace("return %x", "return %y"))
    assert "return %y" in e.where and "^" in e.where


def test_node_parse_errors():
    base = """module {
  func @f(%x: f32[4]) -> (f32[4]) {
    %y = NODE
    return %y
  }
}
"""
    assert "defined twice" in str(_err(base.replace("%y = NODE", "%x = neg(%x) : f32[4]")))
    assert "1 output(s) but 2 type(s)" in str(_err(base.replace("NODE", "neg(%x) : f32[4], f32[4]")))
    assert "expected ':'" in str(_err(base.replace("NODE", "neg(%x)")))
    assert "given twice" in str(_err(base.replace("NODE", "softmax(%x) {axis=0, axis=0} : f32[4]")))
    assert "loc{...}" in str(_err(base.replace("NODE", 'neg(%x) : f32[4] loc{"bogus":1}')))
    assert "bad string literal" in str(_err(base.replace("NODE", 'gelu(%x) {approximate="tanh} : f32[4]')))


def test_unknown_ops_parse_and_fail_verification():
    from braze.errors import VerifyError
    text = """module {
  func @f(%x: f32[4]) -> (f32[4]) {
    %y = no_such_op(%x) {f=2.5, k=1, l=[1, 2.0], s="a"} : f32[4]
    return %y
  }
}
"""
    m = parse(text)
    assert str(m) == text
    assert m.main.nodes[0].attrs == {"k": 1, "f": 2.5, "s": "a", "l": (1, 2.0)}
    with pytest.raises(VerifyError, match="unknown op"):
        verify(m)


def test_constant_parse_errors():
    base = """module {
  constants {
    @c : CONST
  }
}
"""
    assert "needs 4 values" in str(_err(base.replace("CONST", "f32[2, 2] = [1.0, 2.0]")))
    assert "static" in str(_err(base.replace("CONST", "f32[n] = [1.0]")))
    assert "expected true or false" in str(_err(base.replace("CONST", "bool[1] = [1]")))
    assert "expected an integer" in str(_err(base.replace("CONST", "i32[1] = [1.5]")))
    m = parse(base.replace("CONST", "f32[2] = [1, -2]"))
    assert m.constants["c"].tolist() == [1.0, -2.0]


def test_hand_written_text_is_canonicalized():
    text = """module {
  symbols {
    s in [1, 100]
  }
  func @main(%x: f32[2*(s+1) - 2, (2*s+3)//2, min(s, 512)]) -> (f32[2*s, s + 1, s]) {
    return %x
  }
}
"""
    m = parse(text)
    s = m.symbols["s"]
    assert m.main.params[0].type.shape == (2 * s, s + 1, s)
    assert "%x: f32[2*s, s + 1, s]" in str(m)


# --- expressions and types ------------------------------------------------------------


def test_parse_expr_and_type():
    s = Sym("s", 1, 64)
    assert parse_expr("s%8", {"s": s}) == S.mod(s, 8)
    assert parse_expr("-(s - 3)", {"s": s}) == 3 - s
    assert parse_expr("max(s, 1, 0)", {"s": s}) == s
    assert parse_type("i64[]").shape == ()
    assert parse_type("bool[s, 2]", {"s": s}).shape == (s, 2)
    with pytest.raises(IRParseError, match="division by zero"):
        parse_expr("s // 0")
    with pytest.raises(IRParseError, match="1:4"):
        parse_expr("s +")


def test_tokenizer_positions():
    toks = tokenize('%a = f(%"b c") {k=#f32}\n  loc{"line":3}')
    assert [(t.kind, t.line, t.col) for t in toks] == [
        ("val", 1, 1), ("op", 1, 4), ("id", 1, 6), ("op", 1, 7), ("val", 1, 8), ("op", 1, 14), ("op", 1, 16),
        ("id", 1, 17), ("op", 1, 18), ("dtype", 1, 19), ("op", 1, 23), ("loc", 2, 3), ("eof", 2, 16)]


# --- random modules ----------------------------------------------------------------------

_SYMS = [("a", 1, None), ("b", 1, 64), ("c", 2, 8)]


@st.composite
def exprs(draw, depth=2):
    syms = [Sym(n, lo, hi) for n, lo, hi in _SYMS]
    if depth == 0 or draw(st.booleans()):
        return draw(st.one_of(st.integers(0, 9), st.sampled_from(syms)))
    x, y = draw(exprs(depth=depth - 1)), draw(exprs(depth=depth - 1))
    op = draw(st.sampled_from(["+", "-", "*", "//", "%", "min", "max"]))
    if op in ("//", "%"):
        y = draw(st.one_of(st.integers(1, 8), st.sampled_from(syms)))
    return {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y, "//": lambda: S.floordiv(x, y),
            "%": lambda: S.mod(x, y), "min": lambda: S.smin(x, y), "max": lambda: S.smax(x, y)}[op]()


@settings(max_examples=100, deadline=None)
@given(st.lists(exprs(), min_size=0, max_size=4), st.lists(exprs(), min_size=1, max_size=3))
def test_random_types_round_trip(dims, facts):
    b = Builder()
    for n, lo, hi in _SYMS:
        b.sym(n, lo, hi)
    c = b.module.constraints
    for i, e in enumerate(facts):
        try:
            if i % 2:
                c.add_divisible(e, 2 + i)
            else:
                c.add_equal(b.sym(f"d{i}"), e)
        except ValueError:
            pass
    x = b.param("x", tensor("f32", *dims))
    b.ret(x)
    back = round_trip(b.module)
    assert back.constraints == b.module.constraints


@needs("arange", "reduce_sum", "tril")
def test_any_and_optional_attributes():
    b = Builder()
    s = b.sym("s", 1, 128)
    r1 = b.arange(start=0, end=s, dtype="i64")
    r2 = b.arange(start=0.5, end=4.0, step=0.5, dtype="f32")
    t = b.param("t", tensor("f32", s, s))
    r3 = b.reduce_sum(t)  # axes=None
    r4 = b.tril(t, k=s - 1)
    b.ret(r1, r2, r3, r4)
    text = str(b.module)
    assert "end=s" in text and "step=0.5" in text and "k=s - 1" in text
    assert "axes=" not in text  # left at its None default: not printed, and read back as None
    back = round_trip(b.module)
    verify(back)
    assert back.main.nodes[2].attrs.get("axes") is None
    n = back.main.nodes[1]
    assert n.attrs["start"] == 0.5 and isinstance(n.attrs["start"], float)
    assert back.main.nodes[0].attrs["end"] == back.symbols["s"]


@needs("linear", "permute", "scaled_dot_product_attention", "softmax", "conv2d", "max_pool2d", "concat",
       "gather", "where", "greater", "pad", "flatten", "expand", "unsqueeze", "cast", "reduce_mean")
def test_kitchen_sink_round_trips_and_verifies():
    b = Builder()
    bt, s = b.sym("batch", 1, 8), b.sym("seq", 1, 512)
    x = b.param("x", tensor("f32", bt, s, 16))
    w = b.constant(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32), name="wq")
    q = b.linear(x, w, None)
    q4 = b.reshape(q, shape=[bt, s, 2, 8])
    q4 = b.permute(q4, perm=[0, 2, 1, 3])
    att = b.scaled_dot_product_attention(q4, q4, q4, is_causal=True)
    sm = b.softmax(att, axis=-1)
    img = b.param("img", tensor("f32", bt, 3, 2 * s, 32))
    cw = b.constant(np.ones((4, 3, 3, 3), np.float32), name="cw")
    c = b.conv2d(img, cw, None, stride=[2, 2], padding=[1, 1, 1, 1])
    p = b.max_pool2d(c, kernel=[2, 2], stride=[2, 2])
    f = b.flatten(p)
    idx = b.param("idx", tensor("i64", 3))
    g = b.gather(x, idx, axis=1)
    m = b.greater(g, b.constant(np.float32(0)))
    wh = b.where(m, g, b.constant(np.float32(1)))
    pd = b.pad(x, pads=[0, 1, 0, 0, s, 0])
    cat = b.concat(x, x, axis=1)
    u = b.unsqueeze(b.reduce_mean(x, axes=[2]), axes=[0])
    e = b.expand(b.cast(idx, dtype="f32"), shape=[s, 3])
    b.ret(sm, f, wh, pd, cat, u, e)
    verify(b.module)
    back = round_trip(b.module)
    verify(back)


def test_value_symbols_print_and_parse_back_and_are_verified():
    from braze.errors import VerifyError
    from braze.ir.verifier import verify_module

    b = Builder()
    rows, cols = b.sym("rows"), b.sym("cols")
    x = b.param("x", tensor("f32", b.sym("n")))
    b.param("shape", tensor("i64", 2))
    b.ret(b.reshape(x, shape=(rows, cols)))
    b.module.value_symbols.update({("main", "shape", 0): "rows", ("main", "shape", 1): "cols"})
    back = round_trip(b.module)
    assert back.value_symbols == b.module.value_symbols and "values {" in str(back)
    verify_module(back)
    back.value_symbols[("main", "shape", 2)] = "rows"
    with pytest.raises(VerifyError, match="input of static shape that has that element"):
        verify_module(back)
