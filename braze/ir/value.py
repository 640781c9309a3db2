"""SSA values, the nodes that define them, and where a node came from in the user's model."""

from __future__ import annotations

import json
from dataclasses import dataclass

from .types import TensorType, Typed


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


class Value(Typed):
    """An SSA value. Identity is the object; ``name`` is for printing."""

    __slots__ = ("name", "type", "producer")

    def __init__(self, name: str, type: TensorType, producer: "Node | None" = None):
        self.name = name
        self.type = type
        self.producer = producer

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
