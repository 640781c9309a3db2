"""Tolerances, comparisons and small builders shared by braze's tests (and usable by users' tests)."""

from __future__ import annotations

import numpy as np

from .ir import sym
from .ir.types import DType
from .ops import Builder

# (rtol, atol) per dtype name, for comparing one op against its reference
TOLERANCES = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}

# whole models: max |error| / max |reference| (float32)
MODEL_REL_TOL = 1e-4


def differs_from_torch(op: str, attrs: dict, *inputs) -> np.ndarray:
    """Where braze deliberately differs from torch eager (docs/semantics.md): the elements of
    ``inputs`` at which eager's ``op`` is mathematically wrong and braze keeps the right value.
    Tests compare with eager everywhere else."""
    x = np.asarray(inputs[0])
    if x.dtype.kind != "f" and x.dtype.name != "bfloat16":
        return np.zeros(x.shape, bool)
    big = float(np.finfo(np.float32 if x.dtype.name == "bfloat16" else x.dtype).max)
    x = x.astype(np.float64)
    if op == "gelu":  # eager: NaN at +-inf, and x * 2 overflows near the largest finite value
        if attrs.get("approximate", "none") == "none":
            # and where the result is a zero, whose sign eager's AVX2 kernel drops (+0 for -0 and
            # below -5.55; its AVX-512 kernel keeps -0): braze gives -0, x Phi(x)'s sign
            return np.isinf(x) | (x > big / 2) | ((x == 0) & np.signbit(x)) | (x < -5.5)
        return x == -np.inf
    if op == "silu":  # eager: NaN at -inf
        return x == -np.inf
    if op == "hardswish":  # eager: NaN at -inf; x * 6 / 6 overflows
        return (x == -np.inf) | (x > big / 6)
    if op == "remainder":  # eager: a - b * floor(a / b) is NaN once a / b overflows
        b = np.asarray(inputs[1]).astype(np.float64)
        with np.errstate(all="ignore"):
            q = x / b
        return np.isfinite(x) & np.isfinite(b) & (np.abs(q) > big)
    return np.zeros(x.shape, bool)


def assert_close(actual, expected, dtype: str | None = None, rtol=None, atol=None, what: str = ""):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{what} shape {actual.shape} != expected {expected.shape}"
    dtype = dtype or expected.dtype.name
    if dtype not in TOLERANCES:  # ints and bools compare exactly
        np.testing.assert_array_equal(actual, expected, err_msg=what)
        return
    r, a = TOLERANCES[dtype]
    np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                               rtol=r if rtol is None else rtol, atol=a if atol is None else atol,
                               err_msg=what, equal_nan=True)


def assert_close_scaled(actual, expected, dtype: str = "float32", what: str = ""):
    """assert_close for long sums (matmul, conv): the dtype's tolerances, but atol grows to
    4 * rtol * max|expected| for large outputs, since the terms of a long dot product cancel."""
    r, a = TOLERANCES[dtype]
    scale = float(np.abs(np.asarray(expected)).max(initial=0))
    assert_close(actual, expected, dtype, rtol=r, atol=max(a, 4 * r * scale), what=what)


def rel_error(actual, expected) -> float:
    """max |actual - expected| / max |expected| (the model-level metric)."""
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    denom = float(np.max(np.abs(expected))) if expected.size else 0.0
    err = float(np.max(np.abs(actual - expected))) if expected.size else 0.0
    return err / denom if denom > 0 else err


def assert_ir_round_trips(module) -> None:
    """The module verifies, and its text form parses back into an equal module."""
    from . import ir

    ir.verify(module)
    text = str(module)
    back = ir.parse(text, constants=module.constants)
    assert back == module, "IR text did not parse back into an equal module"
    assert str(back) == text
    ir.verify(back)
    # without the weights, large constants come back as content-hash placeholders
    assert ir.parse(text) == module


def build(types, fn):
    """A module with one param per type in ``types`` (named x0, x1, ...) that returns
    ``fn(builder, *params)``: a Value or a tuple of them. Returns (module, that output)."""
    b = Builder()
    params = [b.param(f"x{i}", t) for i, t in enumerate(types)]
    out = fn(b, *params)
    b.ret(*(out if isinstance(out, tuple) else (out,)))
    return b.module, out


def concrete_shape(shape, env) -> tuple[int, ...]:
    """``shape`` (ints and symbolic dims) evaluated under ``env`` (symbol name or Sym -> int)."""
    return tuple(sym.evaluate(d, env) for d in shape)


def rand(rng, shape, dtype: str = "float32", scale=1.0, low=None, high=None):
    """Random array of ``dtype``: normal*scale for floats (uniform in [low, high) if low is given),
    ints in [low, high) (default [-5, 6)), coin flips for bool."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if DType[dtype].is_int:
        return rng.integers(-5 if low is None else low, 6 if high is None else high, size=shape).astype(dtype)
    if low is not None:
        x = rng.uniform(low, high, size=shape)
    else:
        x = rng.standard_normal(shape) * scale
    return x.astype(DType[dtype].numpy)


def flatten_outputs(x):
    """The leaves of nested tuples and lists, in order (how a torch model's outputs line up
    with braze's flat results)."""
    if isinstance(x, (tuple, list)):
        for y in x:
            yield from flatten_outputs(y)
    else:
        yield x


def run_threads(work, threads: int, timeout: float = 300.0) -> list:
    """Run ``work(t)`` for t in range(threads), each in its own thread, all released at once
    (a barrier); the exceptions they raised, in no particular order. A thread still running
    ``timeout`` seconds after the last start counts as a failure (a hang is not a pass)."""
    import threading
    import time
    start = threading.Barrier(threads)
    errors: list = []

    def run(t):
        try:
            start.wait(timeout=timeout)
            work(t)
        except Exception as e:  # noqa: BLE001 -- returned to the caller
            errors.append(e)

    ts = [threading.Thread(target=run, args=(t,), daemon=True) for t in range(threads)]
    for t in ts:
        t.start()
    deadline = time.monotonic() + timeout
    for t in ts:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in ts if t.is_alive()]
    if hung:
        errors.append(TimeoutError(f"{len(hung)} of {threads} threads still running after {timeout:g} s: "
                                   f"{', '.join(hung)}"))
    return errors


class NativeCalls:
    """Counts calls into braze's native libraries while active (``with NativeCalls() as n: ...;
    n.count``): a call PyTorch ran instead of braze does not count. For tests and sweeps that
    check braze, not a fallback, computed something."""

    def __init__(self):
        self.count = 0
        self.reusing = 0  # calls of functions that keep dropped outputs for later calls (BlockPool)
        self._saved = None

    def __enter__(self):
        from .runtime.loader import NativeFunction
        call = self._saved = NativeFunction.__call__
        counter = self

        def counted(fn, *args):
            counter.count += 1
            counter.reusing += fn._pool is not None
            return call(fn, *args)
        NativeFunction.__call__ = counted
        return self

    def __exit__(self, *exc):
        from .runtime.loader import NativeFunction
        NativeFunction.__call__ = self._saved
        return False


def thread_stress(fn, cases, threads: int = 8, calls: int = 50):
    """Call ``fn`` from ``threads`` threads at once, ``calls`` times each, cycling through
    ``cases`` (tuples of inputs) in a different order per thread. Every result must be
    bit-identical to a single-threaded call on the same case. Returns the mismatches as
    ``(thread, call, case index, what)``; an exception in a thread is a mismatch too."""

    def leaves(out):
        return [np.asarray(o.detach() if hasattr(o, "detach") else o) for o in flatten_outputs(out)]

    # the single-threaded answers come from a new thread too: OpenMP's thread count is per thread
    # (torch.set_num_threads sets the calling thread's), and oneDNN's GEMV at M = 1 on AVX2 sums
    # K in as many parts as it has threads, so a thread count of its own changes the last bits
    want: list = []
    errors = run_threads(lambda _: want.extend(leaves(fn(*c)) for c in cases), 1)
    if errors:
        return [(-1, -1, -1, repr(e)) for e in errors]
    bad: list = []

    def work(t):
        for j in range(calls):
            i = (t + j * (t + 1)) % len(cases)
            try:
                got = leaves(fn(*cases[i]))
            except Exception as e:  # noqa: BLE001 -- reported, not swallowed
                bad.append((t, j, i, repr(e)))
                continue
            if len(got) != len(want[i]) or not all(
                    g.shape == w.shape and g.dtype == w.dtype and g.tobytes() == w.tobytes()
                    for g, w in zip(got, want[i])):
                bad.append((t, j, i, "result differs from the single-threaded call"))

    bad.extend((-1, -1, -1, repr(e)) for e in run_threads(work, threads))
    return bad


def torch_module(fn, **submodules):
    """A ``torch.nn.Module`` whose ``forward(*inputs)`` is ``fn(self, *inputs)``, with
    ``submodules`` (layers, parameters) as attributes: a model from a lambda, for tests."""
    import torch

    class FnModule(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fn = fn
            for k, v in submodules.items():
                setattr(self, k, v)

        def forward(self, *xs):
            return self.fn(self, *xs)

    return FnModule()


def run_cli(*args, env: dict | None = None, cwd=None, timeout: float = 300.0):
    """``python -m braze ARGS`` in a subprocess (BRAZE_DEBUG unset): a CompletedProcess with text."""
    import os
    import subprocess
    import sys
    e = {**os.environ, **(env or {})}
    e.pop("BRAZE_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "braze", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=e, timeout=timeout)


def one_line_error(r, code: int, *words) -> str:
    """Asserts a command failed with exit status ``code`` and one line on stderr holding every
    word (no traceback); returns the line."""
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert "Traceback" not in r.stderr and lines[0].startswith("braze")
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]
