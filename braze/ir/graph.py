"""Graph IR: a module of SSA functions over typed tensor values.

A ``Node`` applies a registered op to input ``Value``s and defines output
``Value``s. Weights live in ``Module.constants`` and enter a function through
``constant`` nodes that name them. Symbols and their relations live in
``Module.constraints``; the same ``Sym`` objects appear in every type.

Values and nodes (``value.py``) and constant hashes (``constant.py``) sit below
this module so that the printer, which ``Module.__str__`` calls, needs nothing
from here; they are imported from here all the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .constant import ConstantRef, array_digest
from .constraints import ConstraintStore
from .sym import IntLike, Sym, free_syms, subs
from .value import Node, SourceLoc, Value


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


@dataclass(frozen=True)
class TensorInfo:
    """One input or output of a model as its users see it: the name from the model file, the
    dtype's name, the shape (sizes, and symbolic dims as text) and each symbol's range."""

    name: str
    dtype: str
    shape: tuple  # of int | str
    ranges: dict  # symbol -> (lo, hi or None), for the symbols in shape

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape),
                "ranges": {k: list(v) for k, v in self.ranges.items()}}

    @staticmethod
    def from_json(d: dict) -> "TensorInfo":
        return TensorInfo(d["name"], d["dtype"], tuple(d["shape"]), {k: tuple(v) for k, v in d.get("ranges", {}).items()})

    def __str__(self):
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


def signature(module: "Module", fn: str | None = None) -> tuple[list[TensorInfo], list[TensorInfo]]:
    """The inputs and outputs of ``module.functions[fn]`` (default: the entry, ``module.main``),
    named as in the model file."""
    f = module.main if fn is None else module.functions[fn]
    fn = f.name
    syms = module.symbols

    def info(name, t):
        shape = tuple(d if isinstance(d, int) else str(d) for d in t.shape)
        used = sorted({s.name for d in t.shape if not isinstance(d, int) for s in d.free_syms()})
        return TensorInfo(name, t.dtype.name, shape, {s: (syms[s].lo, syms[s].hi) for s in used if s in syms})

    out_names = module.output_names.get(fn) or [v.name for v in f.results]
    return ([info(p.name, p.type) for p in f.params], [info(n, v.type) for n, v in zip(out_names, f.results)])


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


class Module:
    def __init__(self):
        self.functions: dict[str, Function] = {}
        self.constants: dict[str, Any] = {}  # name -> np.ndarray or ConstantRef
        self.constraints = ConstraintStore()
        # (function, parameter, axis) -> why that input dim is what it is, from the importer
        # (e.g. "fixed at export"); input errors quote it
        self.input_notes: dict[tuple[str, str, int], str] = {}
        # (function, parameter, flat index) -> the symbol that element of the input binds at run time:
        # a shape operand fed as an input (an ONNX Reshape's target shape), read by the entry's checks
        self.value_symbols: dict[tuple[str, str, int], str] = {}
        # symbol -> its upper bound (an expression in the other symbols): a size that an op's run
        # decides (NonZero's count), bound when the node whose ``size`` attribute names it has run.
        # Memory is planned for the bound; what runs after the node reads the size itself.
        self.data_symbols: dict[str, IntLike] = {}
        # function -> the names its results had in the model file (an ONNX graph's outputs, a
        # torch program's output nodes): what users, the CLI and artifacts call them
        self.output_names: dict[str, list[str]] = {}
        # function -> {parameter name: result index}: inputs the caller hands over, their values
        # dead after the call, for that result to be made in (the plug-in's buffers that a graph
        # writes, such as a KV cache). A scatter group whose result it is then writes its rows
        # straight into the input (passes/memory.py, ``donated_results``); the caller gets the
        # input back as that result. Anything else makes the result as usual.
        self.donated: dict[str, dict[str, int]] = {}
        # function -> bytes of scratch its intermediates need (assign_memory; each fused node's
        # ``arena`` attr places its outputs in it)
        self.arena_sizes: dict[str, IntLike] = {}
        # the compute dtypes chosen for this target (passes/precision.py reads it): "policy", the
        # precision the user asked for ("fp32", "bf16", "fp16"), and "library", the dtypes the
        # GEMM / convolution library runs natively on this CPU. Empty: fp32, float32 only.
        self.precision: dict[str, Any] = {}
        # where the library kernels' dispatch tables come from (braze/tune/dispatch.py reads it):
        # "mode" (off, cached, fast, full), "db" (the tuning database's path), "cache" (the compile
        # cache the measuring process loads the helper from), "threads" (the thread count measured
        # for) and "budget_s". Empty: every table is its default rule.
        self.tuning: dict[str, Any] = {}

    @property
    def symbols(self) -> dict[str, Sym]:
        return self.constraints.symbols

    def decided(self, t) -> bool:
        """Whether type ``t``'s shape uses a size a node decides at run time (``data_symbols``)."""
        return bool(self.data_symbols) and any(s.name in self.data_symbols for s in t.free_syms())

    def bounded(self, x: IntLike) -> IntLike:
        """``x`` with each size a node decides replaced by its upper bound (``data_symbols``): what
        memory is planned for. Sizes grow with their dims, so this bounds them; the host checks each
        decided size against its plan all the same."""
        for _ in range(len(self.data_symbols) + 1):
            at = {s: self.data_symbols[s.name] for s in free_syms(x) if s.name in self.data_symbols}
            if not at:
                return x
            x = subs(x, at)
        raise ValueError(f"the sizes block's bounds refer to each other in a cycle: {self.data_symbols}")

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


__all__ = ["ConstantRef", "Function", "Module", "Node", "SourceLoc", "Value", "array_digest", "input_count_message",
           "missing_constants", "require_constant_data"]
