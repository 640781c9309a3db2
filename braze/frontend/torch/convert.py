"""What every ATen converter uses: the registry (``conv`` adds to ``CONVERTERS``) and the
helpers that build braze nodes from FX arguments. The converter modules (``aten_math``,
``aten_shape``, ``aten_nn``) import this; ``aten`` (dispatch) imports them, so the imports run
one way."""

from __future__ import annotations

import numpy as np

from ...errors import UnsupportedOpError
from ...ir import sym as S
from ...ir.graph import Value
from ...ir.types import DType
from .common import to_braze_dtype

CONVERTERS: dict = {}


def conv(*names):
    def deco(fn):
        for n in names:
            CONVERTERS[n if n.startswith(("aten.", "prims.", "braze.")) else "aten." + n] = fn
        return fn
    return deco


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def op(cx, name, inputs, **attrs):
    return cx.b.op(name, inputs, loc=cx.loc, **attrs)


def meta(n, i=None):
    v = n.meta["val"]
    if isinstance(v, (list, tuple)):
        v = v[0 if i is None else i]
    return v


def out_dtype(cx, n, i=None) -> DType:
    return to_braze_dtype(meta(n, i).dtype, str(cx.loc))


def out_shape(cx, n, i=None) -> tuple:
    return cx.shape_of(meta(n, i))


def cast(cx, v, dt):
    return v if dt is None or v.dtype == dt else op(cx, "cast", [v], dtype=dt)


def scalar(cx, v, dt: DType):
    """A 0-d tensor of value ``v`` (a number or a symbolic size)."""
    if S.is_symbolic(v):
        a = op(cx, "arange", [], start=v, end=v + 1, step=1, dtype=dt if dt else DType.int64)
        return op(cx, "reshape", [a], shape=())
    if dt is None:
        dt = DType.bool if isinstance(v, bool) else DType.int64 if isinstance(v, int) else DType.float32
    return cx.b.constant(np.asarray(v, dtype=dt.numpy), loc=cx.loc)


def checked_index(cx, idx, n, wrap: bool):
    """``idx`` itself as int64, a negative index counted from the end where ``wrap``: the gather of
    0..n-1 at it, which fails the call where an index is out of range, as eager raises."""
    return op(cx, "gather", [op(cx, "arange", [], start=0, end=n, step=1, dtype=DType.int64), idx], axis=0,
              wrap=wrap)


def float_value(cx, e):
    """A float-valued size expression (a torch SymFloat: ``ToFloat(s) / 7``, ``1.5 * ToFloat(s)``,
    ...) as a 0-d float64 Value computed at run time, in double precision as Python does."""
    import sympy
    f64 = DType.float64
    name = type(e).__name__
    if e.is_Number:
        return scalar(cx, float(e), f64)
    if name == "ToFloat" or e.is_integer:
        return op(cx, "cast", [scalar(cx, cx.sym(e.args[0] if name == "ToFloat" else e), DType.int64)], dtype=f64)
    if name in ("FloatTrueDiv", "IntTrueDiv"):
        return op(cx, "div", [float_value(cx, e.args[0]), float_value(cx, e.args[1])])
    if isinstance(e, (sympy.Mul, sympy.Add)):
        vs = [float_value(cx, a) for a in e.args]
        out = vs[0]
        for v in vs[1:]:
            out = op(cx, "mul" if isinstance(e, sympy.Mul) else "add", [out, v])
        return out
    if isinstance(e, sympy.Pow) and e.exp == -1:
        return op(cx, "div", [scalar(cx, 1.0, f64), float_value(cx, e.base)])
    if name == "FloatPow" or isinstance(e, sympy.Pow):  # SDPA's default scale: (1 / sqrt(E)) ** 0.5
        return op(cx, "pow", [float_value(cx, e.args[0]), float_value(cx, e.args[1])])
    raise UnsupportedOpError(f"the float size expression {e} ({name}) has no braze equivalent", where=str(cx.loc),
                             hint="braze computes + - * / and powers over sizes")


def tensor(cx, x, dt: DType | None):
    if isinstance(x, Value):
        return cast(cx, x, dt)
    return scalar(cx, x, dt)


def axis(cx, d, rank):
    r = max(rank, 1)
    if not -r <= d < r:
        raise UnsupportedOpError(f"dim {d} is out of range for rank {rank}", where=str(cx.loc))
    return d % r


def axes(cx, dims, rank):
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return None
    if isinstance(dims, int):
        dims = [dims]
    return tuple(sorted({axis(cx, d, rank) for d in dims}))


def need_static(cx, v, what):
    if S.is_symbolic(v):
        raise UnsupportedOpError(f"{what} must be a constant, got the symbolic size {v}", where=str(cx.loc))
    return v
