"""The OpInfo sweep: each sample of torch's ``op_db`` through torch.export, then the braze
reference and the native backend, against eager.

Used by ``test_opinfo_<dtype>.py`` (through opinfo_cases.py: the first sample of each op in CI,
all of them under ``-m slow``) and by ``scripts/opinfo_report.py`` (the whole sweep as a table
and JSON).

What is tested is decided by rules, never by a list of known failures. A sample is skipped when:

- eager raises on it, or torch.export cannot export it (not braze's business);
- eager writes into an input, or it passes ``out=`` (in-place and out= variants are not
  inference graphs), or it returns no tensor or a non-tensor value (braze compiles tensor
  programs);
- braze raises ``UnsupportedOpError`` while importing it (the reference and the native backend
  are then skipped), or while compiling it natively (the native backend is skipped; the report
  counts these separately).

Anything else that raises, and any mismatch, is a failure. Outputs are compared with eager:
the same number of outputs, the same shape (a 0-d result stays 0-d) and dtype, ints and bools
exactly, floats within the op's tolerance (OP_TOLERANCES, default braze.testing's float32 one)
with NaN equal to NaN and infinities matching. When the op's own OpInfo says its values are
"not comparable" (empty, random ops), or eager gives different values under two RNG seeds,
only shapes and dtypes are compared.

Shapes are static: each sample is exported at its own sizes (OpInfo samples rarely export
with dynamic dims; braze's dynamic shapes are covered by the frontend and model tests).
Native compiles are batched (run_native): up to 32 samples are compiled as the functions of
one module, one C compile for all; any sample that fails there is compiled again on its own,
so every native verdict is that of the sample alone.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import warnings

import numpy as np

from braze.errors import UnsupportedOpError
from braze.options import Options
from braze.testing import TOLERANCES

DTYPES = ("float32", "int64", "bfloat16", "float16")

# op name (with ".variant" when the OpInfo has one) -> (rtol, atol, why). Default: TOLERANCES.
# Looser only with a reason.
OP_TOLERANCES: dict[str, tuple[float, float, str]] = {
    "nn.functional.scaled_dot_product_attention": (
        1e-4, 1e-5, "two float32 GEMMs and a softmax in eager against the float64-accumulated reference: "
                    "up to 1.4e-5 relative (2.5e-5 absolute) measured on the OpInfo samples"),
    "nn.functional.multi_head_attention_forward": (
        1e-4, 1e-5, "the same attention, with input and output projections: 1.8e-5 relative measured"),
    "bmm": (
        1e-5, 3e-5, "sums of 10 products up to 81 that cancel to about 0.4: eager and braze are both 2.6e-5 "
                    "absolute from float64 on sample 0, and on AVX2 oneDNN sums in another order than eager "
                    "(7.6e-6 apart)"),
    "nn.functional.interpolate.bicubic": (
        1e-4, 2e-5, "16-tap float32 sums: on the OpInfo samples eager float32 is up to 7.4e-6 absolute "
                    "from float64 eager, braze native up to 1.0e-5"),
}


def _torch_tensor(t):
    """A result as a torch tensor (torch.as_tensor takes no ml_dtypes bfloat16 array)."""
    import torch
    if isinstance(t, torch.Tensor):  # eager's
        return t
    a = np.asarray(t)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.as_tensor(a)


def _ties_view(x, dim):
    """Outputs (values..., indices) of a selection along ``dim`` whose equal values' indices the
    framework leaves in no particular order: the values, the input elements the indices select, and
    how many distinct indices each row has, not the indices themselves."""
    import torch

    def view(leaves):
        *values, idx = (_torch_tensor(t) for t in leaves)
        if x.dim() == 0:
            return [*values, idx]
        d = dim % x.dim()
        picked = torch.take_along_dim(x, idx, dim=d)
        distinct = torch.sort(idx, dim=d).values.diff(dim=d).ne(0).sum(d) if idx.shape[d] > 1 else idx.sum(d) * 0
        return [*values, picked, distinct]
    return view


def _topk_view(sample):
    """torch.topk leaves the order of equal values' indices unspecified (std::nth_element and an
    unstable sort)."""
    return _ties_view(sample.input, sample.kwargs.get("dim", sample.args[1] if len(sample.args) > 1 else -1))


def _sort_view(sample):
    """torch.sort and argsort without ``stable=True`` leave the order of equal values' indices
    unspecified too (an unstable sort: at 8000 bfloat16 elements eager's differ from a stable
    order at most ties); a stable sort's indices are compared exactly."""
    if sample.kwargs.get("stable"):
        return lambda leaves: [_torch_tensor(t) for t in leaves]
    return _ties_view(sample.input, sample.kwargs.get("dim", sample.args[0] if sample.args else -1))


# op name -> fn(sample) -> a view of the outputs that is compared instead of them, where the
# framework leaves part of the result unspecified. Only with a reason in the function's docstring.
OUTPUT_VIEWS = {"topk": _topk_view, "sort": _sort_view, "argsort": _sort_view}


@dataclasses.dataclass
class SampleResult:
    op: str
    dtype: str
    index: int
    stage: str  # the last stage reached: "eager", "export", "import", "run" (the backends ran)
    skip: str | None = None  # why the sample was skipped (stage != "run")
    ref: str | None = None  # "pass", "mismatch", "error"
    native: str | None = None  # "pass", "mismatch", "error", "unsupported"
    import_msg: str | None = None
    ref_msg: str | None = None
    native_msg: str | None = None
    zero_d: bool = False  # a 0-d input or output
    values_compared: bool = True
    repro: str = ""
    seconds: float = 0.0

    @property
    def failure(self) -> str | None:
        """The first failure: "import_error", "ref_error", "ref_mismatch", "native_error", "native_mismatch"."""
        if self.import_msg is not None:
            return "import_error"
        if self.ref in ("error", "mismatch"):
            return "ref_" + self.ref
        if self.native in ("error", "mismatch"):
            return "native_" + self.native
        return None

    @property
    def error(self) -> str | None:
        return {"import_error": self.import_msg, "ref_error": self.ref_msg, "ref_mismatch": self.ref_msg,
                "native_error": self.native_msg, "native_mismatch": self.native_msg}.get(self.failure)

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "failure": self.failure}


def op_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def op_db():
    from torch.testing._internal import common_utils
    from torch.testing._internal.common_methods_invocations import op_db as db
    from torch.testing._internal.opinfo import core
    # torch's sample iterators look for the unittest.TestCase calling them with inspect.stack(),
    # which reads the source of every frame of pytest's deep stack: the first samples of 150 int64
    # ops took 5.6 s under pytest with that search, 2.6-3.9 s without. Outside a TestCase, as
    # here, it finds nothing and returns None. opinfo.core calls the name it imported, so both
    # modules' names are replaced (common_utils' alone left the search in place).
    common_utils.extract_test_fn = core.extract_test_fn = lambda: None
    return db


def ops_for(dtype: str):
    import torch
    tdt = getattr(torch, dtype)
    return [op for op in op_db() if tdt in op.supported_dtypes("cpu")]


def samples(op, dtype: str, limit: int | None = None):
    """The op's sample inputs for ``dtype`` (the first ``limit``), deterministic: seeded per op."""
    import torch
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen = op.sample_inputs("cpu", getattr(torch, dtype), requires_grad=False)
        try:
            return list(itertools.islice(gen, limit))
        finally:  # now, not at garbage collection (inside some later export's tracing)
            close = getattr(gen, "close", None)
            if close is not None:
                close()


def tolerance(op) -> tuple[float, float]:
    t = OP_TOLERANCES.get(op_id(op)) or OP_TOLERANCES.get(op.name)
    return (t[0], t[1]) if t else TOLERANCES["float32"]


def _not_comparable(op) -> bool:
    """The OpInfo itself says its values are not comparable (empty_*, random ops)."""
    for d in getattr(op, "decorators", ()):
        for dec in getattr(d, "decorators", ()):
            for cell in getattr(dec, "__closure__", None) or ():
                try:
                    c = cell.cell_contents
                except ValueError:
                    continue
                if isinstance(c, str) and "not comparable" in c:
                    return True
    return False


# ---------------------------------------------------------------------------
# one sample
# ---------------------------------------------------------------------------


def _flatten_call(sample):
    """(tensor leaves, rebuild(tensors) -> (input, args, kwargs))."""
    import torch
    from torch.utils import _pytree as pytree
    leaves, spec = pytree.tree_flatten((sample.input, tuple(sample.args), dict(sample.kwargs)))
    where = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    tensors = [leaves[i] for i in where]

    def rebuild(ts):
        ls = list(leaves)
        for i, t in zip(where, ts):
            ls[i] = t
        return pytree.tree_unflatten(ls, spec)
    return tensors, rebuild


def _module(fn, rebuild):
    import torch

    class Call(torch.nn.Module):
        def forward(self, *tensors):
            inp, args, kwargs = rebuild(tensors)
            return fn(inp, *args, **kwargs)
    return Call()


def _leaves(out):
    import torch
    from torch.utils import _pytree as pytree
    return [x for x in pytree.tree_leaves(out) if x is not None] if not isinstance(out, torch.Tensor) else [out]


def _short(e: BaseException, n: int = 300) -> str:
    s = f"{type(e).__name__}: {e}".replace("\n", " | ")
    return s if len(s) <= n else s[:n] + "..."


def _eager(fn, rebuild, tensors, seed: int):
    """(fn's output on copies of ``tensors``, those copies after the call)."""
    import torch
    torch.manual_seed(seed)
    ins = [t.clone() for t in tensors]
    with torch.no_grad():
        inp, args, kwargs = rebuild(ins)
        return fn(inp, *args, **kwargs), ins


def _mutated(before, after) -> bool:
    """Eager wrote into one of its inputs (export's training IR keeps in-place ops as they are)."""
    import torch
    def same(a, b):
        if a.shape != b.shape or a.dtype != b.dtype or a.layout != b.layout:
            return False
        if a.layout != torch.strided:  # sparse
            a, b = a.to_dense(), b.to_dense()
        return torch.equal(a.nan_to_num(), b.nan_to_num()) if a.is_floating_point() else torch.equal(a, b)
    return not all(same(a, b) for a, b in zip(before, after))


def _numpy(t) -> np.ndarray:
    import torch
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy()


def compare(actual, expected, rtol: float, atol: float, values: bool = True) -> str | None:
    """None when ``actual`` (braze's outputs) matches ``expected`` (eager's); else what differs."""
    import torch
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, eager has {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected)):
        if not isinstance(e, torch.Tensor):
            return f"output {k}: eager gives a {type(e).__name__}"
        a = _numpy(a) if isinstance(a, torch.Tensor) else np.asarray(a)  # an OUTPUT_VIEWS tensor
        e = _numpy(e)
        if a.shape != e.shape:
            return f"output {k}: shape {a.shape}, eager {e.shape}"
        if a.dtype != e.dtype:
            return f"output {k}: dtype {a.dtype}, eager {e.dtype}"
        if not values or e.size == 0:
            continue
        if e.dtype.kind in "biu":
            if not np.array_equal(a, e):
                bad = np.argwhere(a != e)
                i = tuple(bad[0])
                return f"output {k}: {len(bad)} of {e.size} differ, e.g. at {i}: {a[i]} vs eager {e[i]}"
            continue
        r, t = TOLERANCES.get(e.dtype.name, (0, 0))  # float16/bfloat16 results: at least their dtype's
        try:
            np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=max(rtol, r),
                                       atol=max(atol, t), equal_nan=True)
        except AssertionError as err:
            msg = " ".join(str(err).split())
            return f"output {k}: {msg[:400]}"
    return None


def _repro(op, dtype, index) -> str:
    return (f"python scripts/opinfo_report.py --op {op_id(op)} --dtype {dtype} --sample {index}")


class _Prepared:
    """What the native stage needs of a sample that the reference ran."""

    def __init__(self, result, mod, arrays, expected, tol, values, view, exact=None):
        self.result, self.mod, self.arrays, self.expected = result, mod, arrays, expected
        self.tol, self.values, self.view = tol, values, view
        self.exact = exact  # 16-bit samples: eager on the inputs widened to float64


def _exact(fn, rebuild, tensors):
    """Eager on the floating inputs widened to float64 (a 16-bit sample's exact result), or None."""
    import torch
    try:
        out, _ = _eager(fn, rebuild, [t.double() if t.is_floating_point() else t for t in tensors], 0)
        leaves = _leaves(out)
        return [t.double().numpy() for t in leaves] if all(isinstance(t, torch.Tensor) for t in leaves) else None
    except Exception:
        return None


def closer_than_eager(actual, expected, exact) -> bool:
    """16-bit outputs where braze's native result is no farther from the float64 result than
    eager's, output by output: eager rounds after every op, braze once per fused kernel, so a sum
    that cancels (hinge_embedding_loss in bfloat16) can leave eager the less accurate of the two."""
    for a, e, x in zip(actual, expected, exact):
        a, e, x = (np.asarray(_numpy(v) if hasattr(v, "detach") else v, dtype=np.float64) for v in (a, e, x))
        if a.shape != x.shape or not np.array_equal(np.isnan(a), np.isnan(x)):
            return False
        ok = ~np.isnan(x)
        if np.abs(a[ok] - x[ok]).max(initial=0.0) > np.abs(e[ok] - x[ok]).max(initial=0.0):
            return False
    return True


def prepare_sample(op, dtype: str, index: int, sample) -> tuple[SampleResult, _Prepared | None]:
    """Eager, export, import and the reference; the second item is set when the native stage applies."""
    import torch

    import braze
    r = SampleResult(op_id(op), dtype, index, stage="eager", repro=_repro(op, dtype, index))
    if "out" in sample.kwargs:
        r.skip = "out= variant: not an inference graph"
        return r, None
    fn = op.op
    tensors, rebuild = _flatten_call(sample)
    try:
        expected, after = _eager(fn, rebuild, tensors, 0)
    except Exception as e:
        r.skip = f"eager raises: {_short(e, 120)}"
        return r, None
    if _mutated(tensors, after):
        r.skip = "mutates an input (in-place variant): not an inference graph"
        return r, None
    exp_leaves = _leaves(expected)
    if not exp_leaves or not all(isinstance(t, torch.Tensor) for t in exp_leaves):
        r.skip = "returns non-tensor values (braze compiles tensor programs)"
        return r, None
    r.zero_d = any(t.dim() == 0 for t in tensors) or any(
        isinstance(t, torch.Tensor) and t.dim() == 0 for t in exp_leaves)
    values = not _not_comparable(op)
    if values:  # a random op: eager differs under another seed
        try:
            again = _leaves(_eager(fn, rebuild, tensors, 1)[0])
            values = compare([_numpy(t) if isinstance(t, torch.Tensor) else t for t in again],
                             exp_leaves, 0.0, 0.0) is None
        except Exception:
            values = False
    r.values_compared = values

    r.stage = "export"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.export(_module(fn, rebuild), tuple(t.clone() for t in tensors), strict=False)
    except Exception as e:
        r.skip = f"torch.export cannot export it (not braze's business): {_short(e, 160)}"
        return r, None

    r.stage = "import"
    try:
        mod = braze.import_torch(ep)
    except UnsupportedOpError as e:
        r.skip = f"unsupported: {_short(e, 200)}"
        return r, None
    except Exception as e:
        r.import_msg = _short(e)
        return r, None

    r.stage = "run"
    tol = tolerance(op)
    view = OUTPUT_VIEWS[op.name](sample) if op.name in OUTPUT_VIEWS else (lambda leaves: leaves)
    arrays = [_numpy(t) for t in tensors]
    try:
        got = braze.reference.run(mod, *arrays)
        got = list(got) if len(mod.main.results) > 1 else [got]
        bad = compare(view(got), view(exp_leaves), *tol, values)
        r.ref, r.ref_msg = ("pass", None) if bad is None else ("mismatch", bad)
    except Exception as e:
        r.ref, r.ref_msg = "error", _short(e)
    exact = _exact(fn, rebuild, tensors) if dtype in ("bfloat16", "float16") and values else None
    return r, _Prepared(r, mod, arrays, exp_leaves, tol, values, view, exact)


def _merge(preps):
    """One module whose functions are the samples' main functions (@s0, @s1, ...): one C compile
    serves them all (each function is a separate native entry, as in any multi-function module)."""
    from braze.ir.graph import Module
    from braze.passes.common import clone_function
    m = Module()
    for i, p in enumerate(preps):
        name = f"s{i}"
        f = clone_function(p.mod.main, name)
        for node in f.nodes:
            if node.op == "constant":
                node.attrs["name"] = f"{name}_{node.attrs['name']}"
        for k, c in p.mod.constants.items():
            m.constants[f"{name}_{k}"] = c
        m.functions[name] = f
    return m


def _native_one(p: _Prepared, fn) -> None:
    r = p.result
    try:
        got = fn(*p.arrays)
        got = list(got) if len(p.mod.main.results) > 1 else [got]
        bad = compare(p.view(got), p.view(p.expected), *p.tol, p.values)
        if bad is not None and p.exact is not None and p.view is not None and closer_than_eager(
                p.view(got), p.view(p.expected), p.view(p.exact)):
            bad = None  # farther from eager than the tolerance, but nearer the exact result
        r.native, r.native_msg = ("pass", None) if bad is None else ("mismatch", bad)
    except Exception as e:
        r.native, r.native_msg = "error", "call: " + _short(e)


def _compile_one(p: _Prepared, options: Options) -> None:
    import braze
    r = p.result
    try:
        m = braze.compile(p.mod, options=options)
    except UnsupportedOpError as e:
        r.native, r.native_msg = "unsupported", _short(e, 200)
        return
    except Exception as e:
        r.native, r.native_msg = "error", "compile: " + _short(e)
        return
    _native_one(p, m)


def run_native(preps: list[_Prepared], options: Options, batch: int = 32) -> None:
    """The native stage for prepared samples: compiled together ``batch`` at a time (one gcc run
    per batch); a batch that does not compile, and any sample that fails in a batch, is compiled
    on its own, so every verdict is that of the sample alone (as its repro command runs it)."""
    import braze
    singles = [p for p in preps if p.mod.symbols]  # symbolic dims stay out of merged modules
    todo = [p for p in preps if not p.mod.symbols]
    for k in range(0, len(todo), batch):
        group = todo[k:k + batch]
        if len(group) == 1:
            singles += group
            continue
        try:
            m = braze.compile(_merge(group), options=options)
        except Exception:
            singles += group
            continue
        for i, p in enumerate(group):
            _native_one(p, m.function(f"s{i}"))
            if p.result.native != "pass":
                singles.append(p)
    for p in singles:
        _compile_one(p, options)


def run_ops(cases, options: Options, limit: int | None = None, native: bool = True,
            only: int | None = None) -> dict[tuple[str, str], list[SampleResult]]:
    """Every sample (the first ``limit``; only sample ``only`` when given) of each (op, dtype) in
    ``cases``; {(op id, dtype): results}."""
    out: dict[tuple[str, str], list[SampleResult]] = {}
    preps = []
    for op, dtype in cases:
        rs = out.setdefault((op_id(op), dtype), [])
        try:
            ss = samples(op, dtype, limit if only is None else only + 1)
        except Exception as e:
            rs.append(SampleResult(op_id(op), dtype, -1, stage="eager",
                                   skip=f"sample_inputs raises: {_short(e, 120)}"))
            continue
        for i, s in enumerate(ss):
            if only is not None and i != only:
                continue
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r, p = prepare_sample(op, dtype, i, s)
            r.seconds = time.perf_counter() - t
            rs.append(r)
            if p is not None:
                preps.append(p)
    if native:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_native(preps, options)
    return out


def failure_report(results: list[SampleResult]) -> str:
    lines = []
    for r in results:
        if r.failed:
            lines.append(f"{r.op} {r.dtype} sample {r.index}: {r.failure}: {r.error}\n    repro: {r.repro}")
    return "\n".join(lines)
