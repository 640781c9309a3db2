"""Lowering graph sub-functions to loop-IR kernels (define-by-run, as TorchInductor).

Each op registers ``fn(ctx, *inputs, **attrs)`` with ``@lowering("name", ...)``
into ``LOWERINGS``, apart from the op semantics in braze/ops (which know nothing
of loops). Every input is a ``TensorFn``: call it with an index tuple (one
``IntLike`` or integer ``Expr`` per dim) to get the scalar ``Expr`` of that element; the lowering returns an index function for its
output (a ``TensorFn`` or any callable ``idx -> Expr``). Intermediates are
thus inlined into their consumers; a reduction becomes a ``Reduce``
expression, which the schedule hoists out of the loops it does not depend on
(so layer_norm / softmax / rms_norm become one row-parallel "stitch" kernel
that reads the row once per reduction phase).

Entry points:

    lower_function(func, module=None, name=None) -> Kernel   # unscheduled: the first kernel stage
    build_kernel(func, module=None, name=None) -> Kernel     # lower_function, then braze.schedule.schedule

Modules:

    core         registration (``lowering``), ``TensorFn``, ``LowerCtx``, expression helpers
    index_math   index arithmetic (``iadd``/``imul``/``ifloordiv``/``imod``), broadcast, reshape
    elementwise  binary / compare / unary / activation / where / cast
    bitwise      bitwise and / or / xor / not, shifts, bitcast
    creation     arange / full / full_like
    conv         direct_conv2d: a sum over the window per output element
    views        reshape / permute / expand / slice / concat / pad / tile / gather / tril
    reductions   reductions, argmax, var, cumsum, softmax and the norms
    resize       nearest / linear / cubic interpolation
    sample       grid_sample: a grid's points, bilinear / nearest / bicubic
    kernel       ``lower_function`` / ``build_kernel`` (``kernel_syms`` is braze.ir.loop's, re-exported)

Importing this package registers every op lowering.
"""

from __future__ import annotations

# the op-lowering modules register themselves on import (``@lowering``)
from . import bitwise, conv, creation, elementwise, pooling, reductions, resize  # noqa: F401
from . import sample, views  # noqa: F401
from .core import (BOOL, I64, LowerCtx, TensorFn, add, cast, cmp, const, div, fconst, intlike_value,
                   lowered_ops, lowering, mul, select, sub, un, vmax, vmin)
from .index_math import broadcast_to, iadd, ifloordiv, imod, imul, reshape_index
from .kernel import build_kernel, kernel_syms, lower_function

__all__ = [
    # entry points
    "build_kernel", "kernel_syms", "lower_function",
    # writing lowerings
    "LowerCtx", "TensorFn", "lowered_ops", "lowering",
    "BOOL", "I64", "add", "cast", "cmp", "const", "div", "fconst", "intlike_value", "mul", "select", "sub",
    "un", "vmax", "vmin",
    # index arithmetic
    "broadcast_to", "iadd", "ifloordiv", "imod", "imul", "reshape_index",
]
