"""Stage ``widen``: 16-bit float kernels compute in float32, as IR text in and IR text out."""

from __future__ import annotations

from braze.ir.loop_parser import parse_kernel
from braze.schedule import widen


def _widen(text: str) -> str:
    return str(widen(parse_kernel(text))).strip()


def test_loads_widen_and_stores_round_once():
    k = """kernel k(in x: bf16[n], in y: bf16[n], out z: bf16[n]); syms n  [pointwise]
  for _f0 in 0..n:
    z[[_f0]] = gelu((x[[_f0]] + y[[_f0]]))"""
    assert _widen(k) == """kernel k(in x: bf16[n], in y: bf16[n], out z: bf16[n]); syms n  [pointwise]
  for _f0 in 0..n:
    z[[_f0]] = bf16(gelu((f32(x[[_f0]]) + f32(y[[_f0]]))))"""


def test_reductions_lets_and_row_buffers_become_float32():
    k = """kernel k(in x: f16[r, n], out y: f16[r, n]); syms n, r  [stitch]
  for _f0 in 0..r:
    alloc row: f16[n]
    for _f1 in 0..n:
      row[[_f1 + _f0*n]] = exp(x[[_f1 + _f0*n]])
    let t0: f16 = sum(_f2 < n: row[[_f2]])
    for _f3 in 0..n:
      y[[_f3 + _f0*n]] = (row[[_f3]] / t0)"""
    out = _widen(k)
    assert "alloc row: f32[n]" in out
    assert "let t0: f32 = sum(_f2 < n: row[[_f2]])" in out  # a float32 let and sum
    assert "= exp(f32(x[[" in out
    assert "= f16((row[[_f3]] / t0))" in out
    assert str(widen(parse_kernel(out))).strip() == out  # a second run changes nothing


def test_an_explicit_cast_still_rounds_and_a_float32_kernel_is_unchanged():
    k = """kernel k(in x: f32[n], out y: f32[n]); syms n  [pointwise]
  for _f0 in 0..n:
    y[[_f0]] = f32(bf16(x[[_f0]]))"""
    assert _widen(k) == k  # the explicit rounding is already float32 -> bf16 -> float32
    plain = """kernel k(in x: f32[n], out y: f32[n]); syms n  [pointwise]
  for _f0 in 0..n:
    y[[_f0]] = exp(x[[_f0]])"""
    assert _widen(plain) == plain
    into = """kernel k(in x: f32[n], out y: bf16[n]); syms n  [pointwise]
  for _f0 in 0..n:
    y[[_f0]] = bf16(exp(x[[_f0]]))"""
    assert _widen(into) == into  # rounds once, not twice
