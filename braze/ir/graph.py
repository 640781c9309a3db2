"""Graph IR: a module of SSA functions over typed tensor values.

A ``Node`` applies a registered op to input ``Value``s and defines output
``Value``s. Weights live in ``Module.constants`` and enter a function through
``constant`` nodes that name them. Symbols and their relations live in
``Module.constraints``; the same ``Sym`` objects appear in every type.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .constraints import ConstraintStore
from .sym import Sym
from .types import DType, TensorType


@dataclass(frozen=True)
class SourceLoc:
    """Where a node came from in the user's model."""

    file: str | None = None
    line: int | None = None
    name: str | None = None  # node name, module path or op label
    code: str | None = None  # the source line, when known

    def __str__(self):
        parts = []
        if self.file:
            parts.append(f"{self.file}:{self.line}" if self.line else self.file)
        if self.name:
            parts.append(self.name if not parts else f"({self.name})")
        s = " ".join(parts) or "<unknown>"
        if self.code:
            s += f": {self.code.strip()}"
        return s

    def to_json(self) -> str:
        d = {k: v for k, v in (("file", self.file), ("line", self.line), ("name", self.name),
                               ("code", self.code)) if v is not None}
        return json.dumps(d, sort_keys=True, separators=(",", ":"))


class Value:
    """An SSA value. Identity is the object; ``name`` is for printing."""

    __slots__ = ("name", "type", "producer")

    def __init__(self, name: str, type: TensorType, producer: "Node | None" = None):
        self.name = name
        self.type = type
        self.producer = producer

    @property
    def shape(self):
        return self.type.shape

    @property
    def dtype(self) -> DType:
        return self.type.dtype

    @property
    def rank(self) -> int:
        return self.type.rank

    def __repr__(self):
        return f"%{self.name}: {self.type}"


class Node:
    __slots__ = ("op", "inputs", "attrs", "outputs", "loc")

    def __init__(self, op: str, inputs: list, attrs: dict, outputs: list[Value], loc: SourceLoc | None = None):
        self.op = op
        self.inputs = list(inputs)  # Value or None (an absent optional input)
        self.attrs = dict(attrs)
        self.outputs = list(outputs)
        self.loc = loc
        for v in self.outputs:
            v.producer = self

    def __repr__(self):
        ins = ", ".join("none" if v is None else f"%{v.name}" for v in self.inputs)
        outs = ", ".join(f"%{v.name}" for v in self.outputs)
        return f"{outs} = {self.op}({ins}) {self.attrs}"


@dataclass
class Function:
    name: str
    params: list[Value] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    results: list[Value] = field(default_factory=list)

    def __repr__(self):
        return f"<Function @{self.name}: {len(self.params)} params, {len(self.nodes)} nodes>"


def input_count_message(func: Function) -> str:
    """"the model takes 1 input (%x: f32[batch, 16])": the start of a wrong-input-count message."""
    k = len(func.params)
    sig = ", ".join(f"%{p.name}: {p.type}" for p in func.params)
    who = "the model" if func.name == "main" else f"@{func.name}"
    return f"{who} takes {k} input{'' if k == 1 else 's'} ({sig})"


class ConstantRef:
    """A constant whose data is not at hand (parsed from text that elided it)."""

    def __init__(self, type: TensorType, digest: str):
        self.type = type
        self.digest = digest

    @property
    def shape(self):
        return self.type.shape

    def __repr__(self):
        return f"<ConstantRef {self.type} sha256:{self.digest[:12]}>"


def missing_constants(module: "Module") -> list[str]:
    """Names of the constants that nodes use but whose data is not at hand (ConstantRef)."""
    used = {n.attrs.get("name") for f in module.functions.values() for n in f.nodes if n.op == "constant"}
    return [k for k, c in module.constants.items() if isinstance(c, ConstantRef) and k in used]


def require_constant_data(module: "Module", action: str) -> None:
    """Raise ModelFormatError naming every constant without data (all of them, with a count):
    running on a placeholder would read garbage (or crash, for large weights)."""
    names = missing_constants(module)
    if not names:
        return
    from ..errors import ModelFormatError
    shown = ", ".join(f"@{k} ({module.constants[k].type})" for k in names[:20])
    more = f", and {len(names) - 20} more" if len(names) > 20 else ""
    raise ModelFormatError(
        f"cannot {action}: {len(names)} constant{'s' if len(names) != 1 else ''} of the model "
        f"{'have' if len(names) != 1 else 'has'} no data: {shown}{more}",
        hint="the module was read without its weights. For IR text, pass them: "
             "braze.ir.parse(text, constants={name: array}). For ONNX, load the external data "
             "(onnx.load(path) loads it; keep the .onnx file next to its data file).")


def array_digest(a: np.ndarray) -> str:
    a = np.asarray(a, order="C")  # ascontiguousarray would hash a 0-d array as shape (1,)
    h = hashlib.sha256()
    h.update(f"{a.dtype.name}{a.shape}".encode())
    h.update(a.tobytes())
    return h.hexdigest()


class Module:
    def __init__(self):
        self.functions: dict[str, Function] = {}
        self.constants: dict[str, Any] = {}  # name -> np.ndarray or ConstantRef
        self.constraints = ConstraintStore()
        # (function, parameter, axis) -> why that input dim is what it is, from the importer
        # (e.g. "fixed at export"); input errors quote it
        self.input_notes: dict[tuple[str, str, int], str] = {}

    @property
    def symbols(self) -> dict[str, Sym]:
        return self.constraints.symbols

    @property
    def main(self) -> Function:
        if "main" in self.functions:
            return self.functions["main"]
        return next(iter(self.functions.values()))

    def constant_digest(self, name: str) -> str:
        c = self.constants[name]
        return c.digest if isinstance(c, ConstantRef) else array_digest(c)

    def to_text(self, inline_limit: int = 16) -> str:
        from .printer import print_module
        return print_module(self, inline_limit=inline_limit)

    def __str__(self):
        return self.to_text()

    def __eq__(self, other):
        # the printed form is canonical (large constants by content hash)
        return isinstance(other, Module) and self.to_text() == other.to_text()

    __hash__ = None

    def __repr__(self):
        return f"<braze Module: {', '.join('@' + f for f in self.functions)}; {len(self.constants)} constants>"
