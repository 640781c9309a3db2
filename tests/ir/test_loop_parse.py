"""Loop-IR text reads back: ``parse_kernel(str(k))`` is ``k`` field for field, prints the same
and gives the same C, for every generated kernel of small real models; hand-written kernel
texts go in and scheduled texts come out; bad texts say which line and what was expected."""

from __future__ import annotations

import dataclasses
import math
import textwrap

import pytest

from braze.codegen.c_kernel import kernel_to_c
from braze.codegen.isa import host_isa
from braze.errors import IRParseError
from braze.ir import loop as L
from braze.ir import sym as S
from braze.ir.loop_parser import parse_kernel, parse_kernels
from braze.ir.types import DType
from braze.lowering import build_kernel, lower_function
from braze.schedule.default import schedule

F32, F64, I32, I64, BOOL = DType.float32, DType.float64, DType.int32, DType.int64, DType.bool
ISA = host_isa()


def same(a, b) -> bool:
    """Equal in every field, down to symbol ranges, loop-variable extents and value types."""
    if type(a) is not type(b):
        return False
    if isinstance(a, S.Sym):
        return (a.name, a.lo, a.hi) == (b.name, b.lo, b.hi) and same(getattr(a, "extent", None),
                                                                     getattr(b, "extent", None))
    if isinstance(a, S.SymExpr):
        fa, fb = sorted(a.free_syms(), key=str), sorted(b.free_syms(), key=str)
        return a == b and len(fa) == len(fb) and all(same(x, y) for x, y in zip(fa, fb))
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and (a == b or (math.isnan(a) and math.isnan(b)))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b


def check_round_trip(k: L.Kernel) -> L.Kernel:
    text = str(k)
    back = parse_kernel(text)
    assert str(back) == text
    assert same(back, k), text
    return back


def generated_kernels(module):
    """(function, kernel) for every fused group the host code runs as a generated kernel."""
    for f in list(module.functions.values()):
        for n in f.nodes:
            if n.op == "fused" and n.attrs["kind"] not in ("gemm", "conv"):
                callee = module.functions[n.attrs["callee"]]
                yield callee, build_kernel(callee, module, f"k_{callee.name}")


def check_model(module) -> int:
    count = 0
    for func, k in generated_kernels(module):
        back = check_round_trip(k)
        assert kernel_to_c(back, ISA) == kernel_to_c(k, ISA), str(k)
        # the unscheduled kernel reads back too, and schedules to the same kernel (a resumed compile)
        with L.kernel_names():
            k0 = lower_function(func, module, k.name)
        back0 = check_round_trip(k0)
        with L.kernel_names():
            want = str(schedule(k0))
        with L.kernel_names():
            assert str(schedule(back0)) == want
        count += 1
    return count


# ---------------------------------------------------------------------------
# real models
# ---------------------------------------------------------------------------


def _pipelined(model, example, dynamic_shapes):
    import torch

    import braze
    from braze.pipeline import run_pipeline
    ep = torch.export.export(model.eval(), example, dynamic_shapes=dynamic_shapes)
    return run_pipeline(braze.import_torch(ep))


@pytest.mark.parametrize("name", ["gpt", "cnn"])
def test_every_kernel_of_a_small_model_reads_back(tiny_models, name):
    assert check_model(_pipelined(*tiny_models[name])) >= 6  # the cnn stem and its epilogue: one kernel


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "gpt2", "bert"])
def test_every_kernel_of_a_zoo_model_reads_back(name):
    pytest.importorskip("torch")
    if name != "resnet50":
        pytest.importorskip("transformers")
    import braze
    from braze import zoo
    from braze.pipeline import run_pipeline
    m = run_pipeline(braze.import_torch(zoo.export(zoo.get(name))))
    assert check_model(m) > 10


# ---------------------------------------------------------------------------
# text in, text out
# ---------------------------------------------------------------------------


def scheduled_text(text: str) -> str:
    k = parse_kernel(textwrap.dedent(text))
    with L.kernel_names():
        return str(schedule(k))


def expect(text: str) -> str:
    return textwrap.dedent(text).strip("\n")


def test_pointwise_collapses_and_chunks_under_the_declared_range():
    src = """
        kernel k_exp(in x: f32[n, 4], out y: f32[n, 4]); syms n in [1, 1024]  [pointwise]
          for _i1 in 0..n:
            for _i2 in 0..4:
              y[_i1, _i2] = exp(x[_i1, _i2])
        """
    assert scheduled_text(src) == expect("""
        kernel k_exp(in x: f32[n, 4], out y: f32[n, 4]); syms n in [1, 1024]  [pointwise, scheduled, stream 50331648]
          parallel for _c4 in 0..((4*n + 4095) // 4096)  (threads if 48*((4*n + 4095) // 4096)*n - 48*n >= 65536):
            vector for _v5 in 0..-4096*_c4 + 4*n:
              y[[4096*_c4 + _v5]] = exp(x[[4096*_c4 + _v5]])
        """)
    # without the range, 4*n may exceed one chunk: the inner extent keeps its min
    assert "0..min(-4096*_c4 + 4*n, 4096):" in scheduled_text(src.replace(" in [1, 1024]", ""))


def test_softmax_stitches_its_reductions():
    assert scheduled_text("""
        kernel k_softmax(in x: f32[rows, 10], out y: f32[rows, 10]); syms rows  [stitch]
          for _i1 in 0..rows:
            for _i2 in 0..10:
              y[_i1, _i2] = (exp((x[_i1, _i2] - max(_r3 < 10: x[_i1, _r3]))) / sum(_r4 < 10: exp((x[_i1, _r4] - max(_r3 < 10: x[_i1, _r3])))))
        """) == expect("""
        kernel k_softmax(in x: f32[rows, 10], out y: f32[rows, 10]); syms rows  [stitch, scheduled, stream 50331648]
          parallel for _i1 in 0..rows  (threads if 230*min(1, rows - 1)*rows >= 65536):
            alloc row2: f32[10]
            let r0: f32 = max vector(_r3 < 10: x[[10*_i1 + _r3]])
            vector for _k5 in 0..10:
              row2[[_k5]] = exp((x[[10*_i1 + _k5]] - r0))
            let r1: f32 = sum vector(_r4 < 10: row2[[_r4]])
            vector for _i2 in 0..10:
              y[[10*_i1 + _i2]] = (row2[[_i2]] / r1)
        """)


def test_gather_index_becomes_a_hoisted_flat_extra():
    assert scheduled_text("""
        kernel k_gather(in table: f32[100, 8] = @emb.weight, in ids: i32[n], out y: f32[n, 8]); syms n  [pointwise]
          # a data-dependent index is a scalar expression, in braces
          for _i1 in 0..n:
            for _i2 in 0..8:
              y[_i1, _i2] = table[{i64(ids[_i1])}, _i2]
        """) == expect("""
        kernel k_gather(in table: f32[100, 8] = @emb.weight, in ids: i32[n], out y: f32[n, 8]); syms n  [pointwise, scheduled, stream 50331648]
          parallel for _i1 in 0..n  (threads if 40*min(1, n - 1)*n >= 65536):
            let t0: i64 = (i64(ids[[_i1]]) * 8)
            vector for _i2 in 0..8:
              y[[8*_i1 + _i2]] = table[[_i2 + {t0}]]
        """)


def test_dtypes_reach_the_c_code():
    k = parse_kernel(textwrap.dedent("""
        kernel k(in x: f64[n], in m: i32[n], out y: f64[n], out z: i32[n]); syms n  [pointwise, scheduled]
          for _i1 in 0..n:
            y[[_i1]] = (x[[_i1]] * 0.5:f64)
            z[[_i1]] = (m[[_i1]] + 3:i32)
        """))
    c = kernel_to_c(k, ISA)
    assert "* 0.5)" in c and "0.5f" not in c
    assert "((int32_t)3)" in c and "uint32_t" in c


def test_hand_built_fields_survive():
    n = S.Sym("n", 2, 100)
    x = L.Buffer("x", F32, (n,), "in")
    w = L.Buffer("odd name", F64, (4,), "in", const_name="layer 0/w")
    y = L.Buffer("y", F32, (n,), "out")
    tmp = L.Buffer("tmp", I64, (n,), "temp")
    with L.kernel_names():
        i, j, r, r2 = L.loop_var(n), L.loop_var(n), L.loop_var(4, "r"), L.loop_var(n, "r")
    odd_var = L.LoopVar("_q1", 7)  # its own extent differs from its loop's
    inf_var = L.Var("inf", F32)  # a name that reads as a literal
    free = L.Var("outside", I32)  # bound by no let
    red = L.Reduce("sum", L.Cast(L.Load(w, (r, None), True), F32), ((r, 4),), F32, vector=True)
    body = [
        L.Alloc(tmp),
        L.Let(inf_var, L.Const(-0.0, F32)),
        L.For(i, n, [
            L.Store(tmp, (i, None), L.Binary("add", L.IndexValue(i, I32), L.Cast(free, I32), I64), True),
            L.Store(y, (i,), L.Select(L.Compare("ne", L.Load(x, (i, None), True), L.Const(math.nan, F32)),
                                      L.Binary("max", inf_var, red, F32), L.Const(math.inf, F32), F32)),
        ], "parallel", work=S.mul(n, 5), grain=64),
        L.For(j, n, [L.For(odd_var, 3, [
            L.Store(y, (S.add(j, 0), L.Load(tmp, (j, None), True)), L.Unary("neg", L.Const(2.5, F64), F32), True),
            L.Store(y, (j,), L.Cast(L.Compare("lt", L.Const(1, I64), L.Const(True, BOOL), I64), F32)),
        ], "unroll", grain=8)]),
        L.Store(y, (0,), L.Cast(L.Reduce("argmax", L.Load(x, (r2, None), True), ((r2, n),), I32), F32)),
    ]
    k = L.Kernel("weird kernel", [x, w, y], [n], body, "stitch", True)
    check_round_trip(k)
    assert kernel_to_c(parse_kernel(str(k)), ISA) == kernel_to_c(k, ISA)
    text = str(k)
    for piece in ('in "odd name": f64[4] = @"layer 0/w"', "syms n in [2, 100]", "let \"inf\": f32 = -0.0",
                  "(threads if 5*n >= 64)", "(grain 8)", "for _q1 (extent 7) in 0..3", "outside:i32",
                  "idx(_i1):i32", "neg(2.5:f64):f32", "(1 < true):i64", "argmax(_r4 < n: x[[_r4]]):i32", "y[[_i2 + {tmp[[_i2]]}]]", "y[_i2] = ",
                  "sum vector(_r3 < 4: f32(\"odd name\"[[_r3]]))", "alloc tmp: i64[n]", "!= nan"):
        assert piece in text, piece


def test_the_documented_example_reads_back_verbatim():
    from braze.ir import loop_printer
    doc = loop_printer.__doc__
    example = textwrap.dedent(doc[doc.index("::") + 2:doc.index("The text holds")]).strip("\n")
    assert str(parse_kernel(example)) == example


def test_several_kernels_as_a_dump_holds_them():
    a = parse_kernel("kernel a(out y: f32[4])  [pointwise]\n  for _i1 in 0..4:\n    y[_i1] = 1.0")
    b = parse_kernel("kernel b(in x: f32[m], out y: f32[m]); syms m  [pointwise]\n"
                     "  for _i1 in 0..m:\n    y[_i1] = sqrt(x[_i1])")
    ks = parse_kernels(f"{a}\n\n{b}\n")
    assert [str(k) for k in ks] == [str(a), str(b)]
    assert parse_kernels("") == []


# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------

_HEAD = "kernel k(in x: f32[n], out y: f32[n]); syms n  [pointwise]\n"


@pytest.mark.parametrize("body, line, message", [
    ("  for _i1 in 0..m:\n    y[_i1] = x[_i1]", 2, "symbol 'm' is not declared"),
    ("  for _i1 in 0..n:\n    z[_i1] = x[_i1]", 3, "buffer 'z' is not declared"),
    ("  for _i1 in 0..n:\n    y[_i1] = x[_i1]\n      y[_i1] = x[_i1]", 4, "expected a statement at column 5"),
    ("  for _i1 in 0..n\n    y[_i1] = x[_i1]", 2, "expected ':' to end a loop's header, found the end of the line"),
    ("  for _i1 in 0..n:\n    y[_i1] = foo(x[_i1])", 3, "unknown function 'foo'"),
    ("  for _i1 in 0..n:\n    y[_i1] = (x[_i1] + t9)", 3, "'t9' is not defined by a let above"),
    ("  for _i1 in 0..n:\n    y[_i1] = x[_i1] $", 3, "unexpected character '$'"),
    ("  for _i1 in 0..n:\n    y[_i1] = x[_i1]:f64", 3, "a load's dtype is its buffer's"),
    ("  for _i1 in 1..n:\n    y[_i1] = x[_i1]", 2, "loops start at 0"),
    ("  for _i1 in 0..n:\n    y[_i1] = x[_i1] y[_i1] = x[_i1]", 3, "expected the end of the line after a store"),
    ("  let t: f32 = 1.0\n  y[[0]] = select(t, 1.0)", 3, "select(...) takes 3 argument(s), found 2"),
    ("  frob y", 2, "expected a statement"),
])
def test_bad_text_names_the_line_and_what_was_expected(body, line, message):
    with pytest.raises(IRParseError) as e:
        parse_kernel(_HEAD + body)
    assert e.value.line == line and str(e.value).startswith(f"{line}:") and message in str(e.value), str(e.value)


def test_bad_headers_and_trailing_text():
    for text, message in [("kernel k(in x: f32[n])  [pointwise]", "symbol 'n' is not declared"),
                          ("kernel k(in x: f32[4]", "expected ')' to close the kernel's buffers"),
                          ("kernel k(x: f32[4])  [pointwise]", "expected a buffer role"),
                          ("kernel k(in x: f32[4])", "expected '[' to open the kernel's flags"),
                          ("kernel k(in x: f32[4])  [pointwise, fast]",
                           "expected a kernel flag (scheduled, in_place, stream BYTES) once, found 'fast'"),
                          ("kernel k(in x: f32[4])  [pointwise, stream]", "expected the bytes from which outputs stream"),
                          ("kernel k(in x: f32[4])  [pointwise, stream -1]", "stream -1: the bytes from which outputs"),
                          ("kernel k(in x: f32[4])  [pointwise, stream 0, stream 1]", "once, found 'stream'"),
                          ("kernel k(in x: f32[4])  [pointwise, in_place, in_place]", "once, found 'in_place'"),
                          ("kernel k(in x: f32[4], out x: f32[4])  [pointwise]", "buffer 'x' is declared twice"),
                          (_HEAD + _HEAD, "expected the end of the text after kernel k")]:
        with pytest.raises(IRParseError) as e:
            parse_kernel(text)
        assert message in str(e.value), str(e.value)
    with pytest.raises(TypeError):
        parse_kernel(None)
