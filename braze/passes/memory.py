"""Memory planning: arena offsets for a function's intermediates, by liveness, with symbolic sizes.

After fusion, the intermediates of a function are the outputs of its nodes
(``fused`` calls and any other non-constant node) that are not function
results. Each has a byte size (an ``IntLike`` over the symbols: numel * itemsize)
and a live interval ``[def, last use]`` in node indices. Walking the nodes in
order, buffers whose last use is *before* the current node go back to a free
list (a node's inputs and outputs never share memory, but for one case below);
a new buffer reuses a free slot when its size is provably <= the slot's size
(``constraints.equal``, or interval bounds from the symbol ranges on
``slot - size``), preferring a provably equal one, else it gets a new slot.
Slots are laid out one after the other, each rounded up to ``ALIGN`` bytes; the
arena size is their sum.

``plan_memory(module, func=None) -> MemoryPlan`` (main function by default);
``assign_memory(module)`` is the pass form: it writes the plan into the IR, so
the printed module carries it and a parsed one compiles the same: each node's
``arena`` attr holds its outputs' byte offsets (-1 for a function result,
which lives in the caller's memory), and ``module.arena_sizes`` each entry
function's arena size (the ``memory { @main arena <bytes> }`` block).

A ``conv`` group whose residual (the ``residual`` post-op) is read last there writes its
result over the residual (``in_place_residuals``): oneDNN's sum post-op adds into the
destination, so the helper otherwise copies the residual there first, on one thread
(ResNet-50: 16 copies, 22 MB a call at batch 1, 224 x 224; in place its calls took
0.89-0.99x the time, docs/compiler-design.md). A ``pointwise`` group of elementwise ops
writes its result over an input of its type that it reads last (``in_place_elementwise``):
each element is read at its own index in the loop iteration that stores it. An activation
no library call applies (a leaky ReLU; ReLUs were such, before the helper applied them: the
depthwise convnet at 8x224x224 took 0.93x the time, ResNet-50 at 1x224x224 0.97x, its arena a
third smaller) then runs over the convolution's result. Its loop kernel is marked
``in_place`` (its C declares no restrict pointers). These are the places a node's input and output share memory.

A ``scatter`` group that writes rows into an input the caller donated for its result
(``Module.donated``, ``donated_results``) writes them there: the result is the input's memory,
and only the rows move. The plug-in so writes a decoder's KV cache buffer at one position a step,
where a copy of the whole cache each step made decoding 7x slower than eager.

A ``scatter`` group whose result is a function result puts in place into its
``x`` (``in_place_inputs``) when nothing else reads ``x`` and a group of this
function makes it: ``x`` is then made straight in the result's memory, offset -1
too. A tied LM head's weight gradient, ``t(dLogits) @ h``, is so written into the
caller's tensor, and the embedding's rows are added to it there: no copy of the
vocabulary-sized matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..ir import sym as S
from ..ir.graph import Function, Module, Value
from ..ir.sym import IntLike
from ..ops.registry import get_op
from .common import top_functions
from .node_classes import SCATTERS, before_views

ALIGN = 64


def align(x: IntLike, a: int = ALIGN) -> IntLike:
    return S.mul(S.floordiv(S.add(x, a - 1), a), a)


def byte_size(v: Value) -> IntLike:
    return S.mul(S.prod(v.type.shape), v.type.dtype.itemsize)


@dataclass
class Buffer:
    value: Value
    size: IntLike  # bytes
    start: int  # index of the defining node
    end: int  # index of the last node that reads it (== start when unused)
    slot: int = -1
    offset: IntLike = 0
    over: Value | None = None  # the residual this buffer is written over (in_place_residuals)

    @property
    def name(self) -> str:
        return self.value.name


@dataclass
class MemoryPlan:
    """Where each intermediate of ``function`` lives in one arena (offsets and sizes in bytes)."""

    function: str
    buffers: list[Buffer] = field(default_factory=list)
    slot_sizes: list[IntLike] = field(default_factory=list)  # unaligned: the largest buffer it was made for
    slot_offsets: list[IntLike] = field(default_factory=list)
    arena_size: IntLike = 0
    alignment: int = ALIGN

    # --- lookups ---------------------------------------------------------------------------
    @property
    def offsets(self) -> dict[Value, IntLike]:
        """value -> byte offset in the arena."""
        return {b.value: b.offset for b in self.buffers}

    @property
    def sizes(self) -> dict[Value, IntLike]:
        return {b.value: b.size for b in self.buffers}

    def buffer(self, v: Value) -> Buffer | None:
        for b in self.buffers:
            if b.value is v:
                return b
        return None

    def offset_of(self, v: Value) -> IntLike:
        b = self.buffer(v)
        if b is None:
            raise KeyError(f"%{v.name} is not an intermediate of @{self.function}")
        return b.offset

    @property
    def total_intermediate_size(self) -> IntLike:
        """Sum of all intermediates' sizes (what the arena would be without reuse)."""
        t: IntLike = 0
        for b in self.buffers:
            t = S.add(t, b.size)
        return t

    # --- concrete values ------------------------------------------------------------------
    def evaluate(self, env: Mapping[str, int]) -> dict[str, tuple[int, int, int, int]]:
        """value name -> (offset, size, start, end) at concrete symbol values."""
        return {b.name: (S.evaluate(b.offset, env), S.evaluate(b.size, env), b.start, b.end)
                for b in self.buffers}

    def arena_bytes(self, env: Mapping[str, int]) -> int:
        return S.evaluate(self.arena_size, env)

    def check(self, env: Mapping[str, int]) -> None:
        """Raise AssertionError if two buffers live at the same time overlap at ``env``."""
        vals = [(S.evaluate(b.offset, env), S.evaluate(b.size, env), b) for b in self.buffers]
        arena = self.arena_bytes(env)
        for o, s, b in vals:
            assert 0 <= o and o + s <= arena, f"%{b.name} [{o}, {o + s}) is outside the arena of {arena} bytes"
        for i, (o1, s1, b1) in enumerate(vals):
            for o2, s2, b2 in vals[i + 1:]:
                if b2.over is b1.value and b1.end == b2.start and o1 == o2:
                    continue  # a residual the conv reading it last writes its result over
                if b1.start <= b2.end and b2.start <= b1.end and s1 and s2:
                    assert o1 + s1 <= o2 or o2 + s2 <= o1, \
                        f"%{b1.name} [{o1}, {o1 + s1}) and %{b2.name} [{o2}, {o2 + s2}) overlap while both live"

    def __str__(self):
        lines = [f"memory plan @{self.function}: {len(self.buffers)} intermediates in {len(self.slot_sizes)} slots, "
                 f"arena {self.arena_size} bytes"]
        for b in self.buffers:
            over = f" over %{b.over.name}" if b.over is not None else ""
            lines.append(f"  %{b.name}: slot {b.slot} offset {b.offset} size {b.size} live [{b.start}, {b.end}]{over}")
        return "\n".join(lines)


def _key(x: IntLike):
    return x.key() if isinstance(x, S.SymExpr) else x


def _provably_le(store, a: IntLike, b: IntLike) -> bool:
    """a <= b for every allowed value of the symbols."""
    if store.equal(a, b) is True:
        return True
    d = store.simplify(S.add(b, S.mul(-1, a)))
    if isinstance(d, int):
        return d >= 0
    return store.bounds(d)[0] >= 0


def _use_counts(f: Function) -> dict[int, int]:
    """id(value) -> how many node operands read it."""
    uses: dict[int, int] = {}
    for n in f.nodes:
        for v in n.inputs:
            if v is not None:
                uses[id(v)] = uses.get(id(v), 0) + 1
    return uses


def _scatter_x(module: Module, n):
    """A ``scatter`` group's index_add / index_put node and the position of its ``x`` among the
    group's inputs; None where ``x`` is the group's own fill, or the group reads it twice."""
    if n.op != "fused" or n.attrs.get("kind") != "scatter":
        return None
    callee = module.functions[n.attrs["callee"]]
    put = next(m for m in callee.nodes if m.op in SCATTERS)
    x = before_views(put.inputs[0])
    k = next((i for i, p in enumerate(callee.params) if p is x), None)
    if k is None or sum(v is x for m in callee.nodes for v in m.inputs) != 1:
        return None
    return put, k


def in_place_inputs(module: Module, f: Function) -> dict[int, Value]:
    """id(x) -> the result of the ``scatter`` group that adds into ``x`` in place (the module
    docstring)."""
    results = {id(v) for v in f.results}
    uses = _use_counts(f)
    out = {}
    for n in f.nodes:
        found = _scatter_x(module, n)
        if found is None or id(n.outputs[0]) not in results:
            continue
        x = n.inputs[found[1]]
        p = x.producer
        if p is not None and p.op == "fused" and uses.get(id(x)) == 1 and id(x) not in results and \
                sum(r is n.outputs[0] for r in f.results) == 1:
            out[id(x)] = n.outputs[0]
    return out


def donated_results(module: Module, f: Function) -> dict[int, int]:
    """Result index -> the index of the input it is made in (``Module.donated``): each result the
    caller donated an input for that a ``scatter`` group writing rows (``index_put``, no
    reduction) makes from that input, of its type, where nothing else reads the input. The group
    then writes its rows in place (``x == out``: no copy). A rerun of such a call (in PyTorch,
    after a later kernel failed it) writes the same rows again from the same sources, which read
    nothing of the input."""
    given = module.donated.get(f.name)
    if not given:
        return {}
    index = {p.name: j for j, p in enumerate(f.params)}
    uses = _use_counts(f)
    out = {}
    for name, k in given.items():
        j = index.get(name)
        if j is None or not 0 <= k < len(f.results):
            continue
        p, r = f.params[j], f.results[k]
        n = r.producer
        found = _scatter_x(module, n) if n is not None else None
        if found is None or r.type != p.type or uses.get(id(p)) != 1 or sum(q is r for q in f.results) != 1 \
                or r is not n.outputs[0]:
            continue
        put, at = found
        if put.op == "index_put" and put.attrs.get("reduce") == "none" and n.inputs[at] is p:
            out[k] = j
    return out


def _last_uses(f: Function) -> dict[int, int]:
    """id(value) -> the index of the last node that reads it."""
    last_use: dict[int, int] = {}
    for i, n in enumerate(f.nodes):
        for v in n.inputs:
            if v is not None:
                last_use[id(v)] = i
    return last_use


def in_place_residuals(module: Module, f: Function, last_use: dict[int, int] | None = None) -> dict[int, Value]:
    """id(output) -> the residual it is written over, for each ``conv`` group whose residual is
    a fused group's result that no later node (nor the group itself, through another operand)
    reads, of the output's dtype and shape (the module docstring)."""
    last_use = _last_uses(f) if last_use is None else last_use
    results = {id(v) for v in f.results}
    out = {}
    for i, n in enumerate(f.nodes):
        if n.op != "fused" or n.attrs.get("kind") != "conv" or "residual" not in (n.attrs.get("post_ops") or ()):
            continue
        callee = module.functions[n.attrs["callee"]]
        if not any(m.op == "conv2d" for m in callee.nodes):
            continue  # a gradient's convolution takes no residual
        y = n.outputs[0]
        for k, p in enumerate(callee.params):
            readers = [m for m in callee.nodes if any(v is p for v in m.inputs)]
            if len(readers) != 1 or readers[0].op != "add" or p.type != y.type:
                continue
            x = n.inputs[k]
            if _dies_here(x, n, i, last_use, results):
                out[id(y)] = x
            break
    return out


def _dies_here(x: Value, n, i: int, last_use: dict[int, int], results: set) -> bool:
    """Whether ``x``, an input of node ``n`` (the ``i``-th), is a fused group's result in the arena
    that no later node reads, and ``n`` reads it through this operand only: ``n``'s output may
    take its memory."""
    prod = x.producer
    return (prod is not None and prod.op == "fused" and last_use.get(id(x)) == i and id(x) not in results
            and sum(v is x for v in n.inputs) == 1)


def in_place_elementwise(module: Module, f: Function, last_use: dict[int, int] | None = None) -> dict[int, Value]:
    """id(output) -> the input it is written over, for each ``pointwise`` group of elementwise ops
    only (each output element reads its operands at its own index, in the same loop iteration
    that stores it) with an input of the output's type that a fused group made and that no later
    node reads: a leaky ReLU after a convolution writes over the convolution's result (and under a
    bf16 policy ResNet's relu after its residual add, which also stores the bfloat16 copy)."""
    last_use = _last_uses(f) if last_use is None else last_use
    results = {id(v) for v in f.results}
    out = {}
    for i, n in enumerate(f.nodes):
        if n.op != "fused" or n.attrs.get("kind") != "pointwise":
            continue
        callee = module.functions[n.attrs["callee"]]
        if not all(m.op == "constant" or get_op(m.op).kind == "elementwise" for m in callee.nodes):
            continue
        taken: set[int] = set()  # an input is written over by one output at most
        for y in n.outputs:  # (a group's outputs all have its loop's shape)
            x = next((x for x in n.inputs if x.type == y.type and id(x) not in taken
                      and _dies_here(x, n, i, last_use, results)), None)
            if x is not None:
                out[id(y)] = x
                taken.add(id(x))
    return out


def plan_memory(module: Module, func: str | None = None) -> MemoryPlan:
    f: Function = module.functions[func] if func else module.main
    store = module.constraints
    # a result whose size a node decides is made in the arena, at its bound, and copied out at the end
    results = {id(v) for v in f.results if not module.decided(v.type)} | set(in_place_inputs(module, f))
    params = {id(p) for p in f.params}
    last_use = _last_uses(f)
    last_use.update((id(v), len(f.nodes)) for v in f.results if module.decided(v.type))
    plan = MemoryPlan(f.name)
    memo: dict = {}

    def fits(size: IntLike, slot: IntLike) -> str:
        """"equal", "smaller" (provably <=) or "no"; a model repeats few sizes, each proof is dear."""
        key = (_key(size), _key(slot))
        if key not in memo:
            memo[key] = "equal" if store.equal(slot, size) is True else \
                "smaller" if _provably_le(store, size, slot) else "no"
        return memo[key]

    over = {**in_place_residuals(module, f, last_use), **in_place_elementwise(module, f, last_use)}
    free: list[int] = []  # free slot ids
    live: list[Buffer] = []
    for i, n in enumerate(f.nodes):
        if n.op == "constant":
            continue
        # release the buffers whose last reader ran before this node
        still = []
        for b in live:
            if b.end < i:
                free.append(b.slot)
            else:
                still.append(b)
        live = still
        for v in n.outputs:
            if id(v) in results or id(v) in params:
                continue
            b = Buffer(v, store.simplify(module.bounded(byte_size(v))), i, last_use.get(id(v), i))
            res = over.get(id(v))
            under = next((r for r in live if r.value is res), None) if res is not None else None
            if under is not None:  # the residual's slot passes to the output, and is freed after it
                live.remove(under)
                b.slot, b.over = under.slot, under.value
                plan.buffers.append(b)
                live.append(b)
                continue
            best = None
            for s in free:
                size = plan.slot_sizes[s]
                if fits(b.size, size) == "equal":
                    best = s
                    break
                if best is None and fits(b.size, size) == "smaller":
                    best = s
            if best is None:
                plan.slot_sizes.append(b.size)
                best = len(plan.slot_sizes) - 1
            else:
                free.remove(best)
            b.slot = best
            plan.buffers.append(b)
            live.append(b)
    off: IntLike = 0
    for s in plan.slot_sizes:
        plan.slot_offsets.append(off)
        off = store.simplify(S.add(off, align(s)))
    plan.arena_size = off
    for b in plan.buffers:
        b.offset = plan.slot_offsets[b.slot]
    return plan


def assign_memory(module: Module) -> Module:
    """The pass form: plans every entry function and writes each plan into the IR."""
    for f in top_functions(module):
        plan = plan_memory(module, f.name)
        offsets = {id(b.value): b.offset for b in plan.buffers}
        for n in f.nodes:
            if n.op != "constant":
                n.attrs["arena"] = [offsets.get(id(v), -1) for v in n.outputs]
        module.arena_sizes[f.name] = plan.arena_size
    return module


__all__ = ["MemoryPlan", "Buffer", "plan_memory", "assign_memory", "in_place_inputs", "donated_results", "in_place_residuals", "byte_size",
           "align", "ALIGN"]
