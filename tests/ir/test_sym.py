"""Property tests of braze's symbolic integers (braze.ir.sym)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from braze.ir import sym as S
from braze.ir.sym import Sym, smax, smin

SETTINGS = settings(max_examples=200, deadline=None)

A = Sym("a", 1, None)
B = Sym("b", 1, 16)
C = Sym("c", 2, 5)
SYMS = (A, B, C)


# --- random expression trees -------------------------------------------------
# A tree is a nested tuple; build() makes the canonical SymExpr, direct() the
# plain integer value under an environment.

def _leaf():
    return st.one_of(st.integers(-6, 9).map(lambda v: ("int", v)), st.sampled_from(SYMS).map(lambda s: ("sym", s)))


def _extend(children):
    pos = st.integers(1, 7)
    return st.one_of(
        st.tuples(st.just("+"), children, children),
        st.tuples(st.just("-"), children, children),
        st.tuples(st.just("*"), children, children),
        st.tuples(st.just("//k"), children, pos),
        st.tuples(st.just("//s"), children, st.sampled_from(SYMS)),
        st.tuples(st.just("%k"), children, pos),
        st.tuples(st.just("%s"), children, st.sampled_from(SYMS)),
        st.tuples(st.just("min"), children, children),
        st.tuples(st.just("max"), children, children),
    )


trees = st.recursive(_leaf(), _extend, max_leaves=8)


def build(t):
    k = t[0]
    if k == "int":
        return t[1]
    if k == "sym":
        return t[1]
    x = build(t[1])
    if k in ("//k", "%k", "//s", "%s"):
        y = t[2]
    else:
        y = build(t[2])
    return {"+": lambda: x + y, "-": lambda: x - y, "*": lambda: x * y,
            "//k": lambda: S.floordiv(x, y), "//s": lambda: S.floordiv(x, y),
            "%k": lambda: S.mod(x, y), "%s": lambda: S.mod(x, y),
            "min": lambda: smin(x, y), "max": lambda: smax(x, y)}[k]()


def direct(t, env):
    k = t[0]
    if k == "int":
        return t[1]
    if k == "sym":
        return env[t[1].name]
    x = direct(t[1], env)
    if k in ("//k", "%k"):
        y = t[2]
    elif k in ("//s", "%s"):
        y = env[t[2].name]
    else:
        y = direct(t[2], env)
    return {"+": x + y, "-": x - y, "*": x * y, "//k": x // y if y else 0, "//s": x // y if y else 0,
            "%k": x % y if y else 0, "%s": x % y if y else 0, "min": min(x, y), "max": max(x, y)}[k]


envs = st.fixed_dictionaries({"a": st.integers(1, 40), "b": st.integers(1, 16), "c": st.integers(2, 5)})


@SETTINGS
@given(trees, st.lists(envs, min_size=1, max_size=4))
def test_canonical_form_evaluates_like_the_tree(t, env_list):
    e = build(t)
    for env in env_list:
        assert S.evaluate(e, env) == direct(t, env), f"{e} under {env}"


@SETTINGS
@given(trees, envs)
def test_bounds_contain_every_value(t, env):
    e = build(t)
    lo, hi = S.bounds(e)
    v = S.evaluate(e, env)
    assert lo <= v <= hi, f"{e} = {v} under {env}, bounds {lo, hi}"


def test_bounds_see_a_floor_division_below_its_dividend():
    """n - n // k >= 0 for n >= 0: the start of x[:, n - n // 2:] that TF code computes from a shape.
    Interval bounds alone take n and n // 2 as unrelated and cannot tell its sign."""
    n = Sym("n", 1, None)
    assert S.bounds(S.add(n, S.mul(-1, S.floordiv(n, 2))))[0] >= 1
    assert S.bounds(S.add(n, S.mul(-1, S.floordiv(n, 7))))[0] >= 1
    assert S.bounds(S.add(S.mul(2, S.floordiv(n, 2)), S.mul(-1, n))) == (-1, 0)
    z = Sym("z", 0, 9)
    assert S.bounds(S.add(z, S.mul(-1, S.floordiv(z, 3)))) == (0, 6)  # 9 - 9 // 3


@SETTINGS
@given(trees)
def test_building_twice_gives_equal_hash_equal_exprs(t):
    e1, e2 = build(t), build(t)
    assert e1 == e2
    assert hash(e1) == hash(e2)
    assert str(e1) == str(e2)


@SETTINGS
@given(trees, trees)
def test_commuted_sums_and_products_are_equal(t1, t2):
    x, y = build(t1), build(t2)
    for l, r in ((x + y, y + x), (x * y, y * x), (smin(x, y), smin(y, x)), (smax(x, y), smax(y, x))):
        assert l == r
        assert hash(l) == hash(r)
    assert (x + y) - y == x


@SETTINGS
@given(trees, envs)
def test_subs_matches_evaluate(t, env):
    e = build(t)
    assert S.subs(e, env) == S.evaluate(e, env)
    # partial substitution, then the rest
    part = S.subs(e, {"a": env["a"]})
    assert S.evaluate(part, env) == S.evaluate(e, env)


@SETTINGS
@given(trees)
def test_str_parse_round_trip(t):
    from braze.ir.parser import parse_expr
    e = build(t)
    syms = {s.name: s for s in SYMS}
    back = parse_expr(str(e), syms)
    assert back == e, f"{e!s} parsed as {back!s}"
    assert str(back) == str(e)


@SETTINGS
@given(trees)
def test_canonical_form_is_a_fixed_point(t):
    # rebuilding a canonical expression from its own parts changes nothing
    e = build(t)
    assert S.subs(e, {s: s for s in SYMS}) == e


# --- specific identities --------------------------------------------------------

s = Sym("seq", 1, None)
b = Sym("batch", 1, None)


def test_identities():
    assert 2 * (s + 1) - 2 == 2 * s
    assert (b * s) // s == b
    assert (2 * s + 3) // 2 == s + 1
    assert (s * 4) % 2 == 0
    assert (s + 1) - 1 == s
    assert s - s == 0 and isinstance(s - s, int)
    assert (s * b) // (b * s) == 1
    assert S.floordiv(S.floordiv(s, 2), 4) == S.floordiv(s, 8)
    assert smin(s, s + 1) == s
    assert smax(s, s + 1) == s + 1
    assert smin(s, 3, 5) == smin(3, s)
    assert S.mod(S.mod(s, 16), 8) == S.mod(s, 8)
    assert S.floordiv(s + 7, 8) * 8 != s  # no false simplification


def test_collapse_to_int_and_sym():
    assert isinstance((s + 3) - s, int)
    assert (s * 2) // 2 is s or (s * 2) // 2 == s
    assert isinstance((s * 2) // 2, Sym)


def test_range_based_simplification():
    t = Sym("t", 1, 512)
    assert smin(t, 512) == t
    assert smax(t, 0) == t
    assert S.floordiv(t, 1024) == 0
    assert S.mod(t, 1024) == t
    assert smin(t, 100) != t


def test_truth_value_and_int_raise():
    with pytest.raises(TypeError):
        bool(s + 1)
    with pytest.raises(TypeError):
        int(s)


def test_division_by_zero():
    with pytest.raises(ZeroDivisionError):
        S.floordiv(s, 0)
    with pytest.raises(ZeroDivisionError):
        S.mod(s, 0)


def test_invalid_symbol_names():
    for bad in ("", "1a", "a-b", "a b"):
        with pytest.raises(ValueError):
            Sym(bad)
    with pytest.raises(ValueError):
        Sym("x", 5, 2)


def test_expression_str_forms():
    assert str(2 * s + 1) == "2*seq + 1"
    assert str(S.floordiv(s, 2)) == "(seq // 2)"
    assert str(smin(s, 512)) == "min(512, seq)" or str(smin(s, 512)) == "min(seq, 512)"
    assert str(-s + 4) in ("-seq + 4", "4 - seq")


def test_parse_expr_restores_canonical_forms():
    from braze.ir.parser import parse_expr
    syms = {"seq": s, "batch": b}
    assert parse_expr("2*(seq+1) - 2", syms) == 2 * s
    assert parse_expr("(batch*seq)//seq", syms) == b
    assert parse_expr("(2*seq + 3) // 2", syms) == s + 1
    assert parse_expr("min(seq, 512) + max(batch, 1)", syms) == smin(s, 512) + b
    assert parse_expr("-3", syms) == -3
    assert parse_expr("seq % 8", syms) == S.mod(s, 8)
