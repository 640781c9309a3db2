"""Fusion: partition each entry function into groups; each group becomes one ``fused`` node
calling a new sub-function ``@fused_N`` of the same module.

The caller's node is ``fused(%a, %b, ...) {callee="fused_N", kind="<kind>"}`` with
kind one of ``pointwise | reduction | stitch | gemm | conv | scatter | attention | select | opaque``. Its inputs
are the values the group reads from outside (parameters and other groups'
outputs), its outputs the group's values that are used outside it (the
original Value objects, so later nodes keep their inputs). Weights do not
cross the boundary: the sub-function has its own ``constant`` nodes, so kernels
know which operands are constants (for prepacking).

Rules (all shape tests are ``constraints.equal(a, b) is True``, so two symbolic
dims known to be equal fuse whatever their values):

1. gemm / conv (first): a ``linear``/``matmul``/``conv2d`` takes the elementwise
   nodes after it whose output has the anchor's shape (bias add, activation,
   residual add, scale, mask ``where``...), also a DAG of them (GPT-2's tanh
   GELU); for gemm also views that keep the last dim (GPT-2's ``addmm`` reshape);
   for conv an unfolded ``batch_norm``. The group keeps exactly one output. A
   view (reshape...) whose only user is the gemm joins it as a prologue: it only
   reinterprets a contiguous operand; so does a ``permute`` swapping a ``matmul``
   operand's last two axes (the library reads it transposed, as a weight gradient's
   ``t(dY) @ X`` needs: no kernel writes the transpose). A convolution's gradient
   (``conv2d_backward_input`` / ``_weight``) takes nothing: a group of its own.
2. then, producer into consumer, in topological order, until nothing changes:
   * pointwise (elementwise, broadcast, injective, creation ops): a producer
     whose outputs are all used inside the consumer group is computed at the
     consumer's index (through views and broadcasts); otherwise the two merge
     only when every output of the merged group has one shape (multi-output).
   * reduction: producers into a reduction, and elementwise consumers over the
     reduction's output shape. A cheap pointwise producer that other groups read too
     stays out (merged, the reduction would write its full-size values for them); rule 3
     computes it again in each reader instead.
   * stitch: reductions and ``softmax``/``log_softmax``/``layer_norm``/``rms_norm``
     over the same trailing axes of the same shape ``F = rows + reduced``, with
     the elementwise nodes between and after them, when every node after a
     reduction has shape ``F`` or a row shape (``rows + [1]*k`` or ``rows``) and
     only reshapes rows into rows: one kernel per row (decomposed layer_norm:
     mean -> sub -> mul -> mean -> add -> rsqrt -> mul is one group).
3. a cheap pointwise group (<= 16 nodes) with several consumer groups is
   duplicated into each consumer it can join (e.g. an attention mask built
   from ``arange`` compares); it stays for the others. One whose output is a
   function result is duplicated only into consumers that just re-lay it out
   (views and permutes: a training forward's saved NCHW activation, permuted
   back to NHWC for the next convolution, is computed again from the NHWC
   convolution output, read in its own order). Then rule 2 again.

Neither rule 2 nor rule 3 puts a producer with a transcendental op (``EXPENSIVE``)
into a consumer that iterates over more elements than the producer makes: the consumer would
evaluate it once per element of the broadcast. Into a window (``direct_conv2d``, which reads each
element once per tap) goes no producer but views. A RoPE table
(``cos``/``sin`` of ``arange * inv_freq``, [seq, 64]) read by every attention
head of every layer is computed once per call, in a group of its own, not in each
of the 2 x layers consumers at batch x heads times its size.
4. reduction groups that read a value in common and reduce the same shape over the same
   axes to one result shape, neither reading the other's result, merge (``merge_siblings``:
   batch norm's backward sums dy and dy * (x - mean)); then rule 2 again. The kernel computes
   them in one nest, and the C code in one loop over the rows (``codegen/c_reduce.jam_sums``).
5. an ``index_add`` or ``index_put`` is a ``scatter`` group, with the ``full`` that makes its ``x``
   when nothing else reads it (an embedding's gradient starts as zeros), and the views (reshapes) of
   its operands and of its result that nothing else reads (ONNX's scatters view their data as
   rows): the host calls braze_scatter.h on the memory under the views, which writes the fill and
   puts the rows in one pass per thread; a view as a kernel of its own would copy it.
6. an ``attention_backward`` is an ``attention`` group of its own (braze_attention.h), and an op
   whose output size its data decides (``nonzero``, ``unique``, ``non_max_suppression``) a
   ``select`` group (braze_select.h): what reads its result needs the size it found.
7. every other node (pools, cumsum...) is its own ``opaque`` group.

No merge may create a cycle: two groups never merge when one reaches the
other through a third. ``fuse(module)`` mutates the module and returns it with its
``FusionLog``, the readable record of the groups and the decisions (``str(log)``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..ir import sym as S
from ..ir.graph import Function, Module, Node, Value
from ..ops.core import FUSED_KINDS
from ..ops.registry import get_op
from .common import same_shape, top_functions
from ..ir.loop import LIBM_UNARY
from .node_classes import (BACKWARD_CONVS, CLOSED_KINDS, GEMMS, RELAYOUTS, SCATTERS, VIEWS, WINDOWS, node_class,
                           scatter_group_nodes, swaps_last_two, weight_permute)

MAX_DUP_NODES = 16
MAX_EPILOGUE = 32
# ten or more simple ops per element (braze/schedule/cost.py): not recomputed per element
# of a broadcast
EXPENSIVE = ("exp", "expm1", "log", "log1p", "sin", "cos", "tanh", "erf", "sigmoid", "silu", "gelu", "softplus",
             "elu", "pow", "mish", "softmax", "log_softmax", *LIBM_UNARY)


def _prologue(anchor: Node, n: Node) -> bool:
    """``n`` may come before the gemm or conv ``anchor`` in its group: a view (a free
    reinterpretation; gemm only), a matmul operand's transpose (the library reads it transposed), or
    a 2-D convolution's OHWI weight read as OIHW (a channels-last weight, which the library reads
    where it lies: ``weight_permute``)."""
    if anchor.op == "conv2d":
        return weight_permute(anchor) is n
    return n.op in VIEWS or (anchor.op == "matmul" and swaps_last_two(n))


def _is_elementwise(n: Node) -> bool:
    return n.op == "batch_norm" or get_op(n.op).kind == "elementwise"


def _reduced_axes(n: Node):
    """(full input shape, sorted reduced axes) of a reduction or normalization node."""
    x = n.inputs[0]
    r = x.type.rank
    a = n.attrs
    if n.op in ("softmax", "log_softmax"):
        axes = [a["axis"] % max(r, 1)]
    elif n.op in ("layer_norm", "rms_norm"):
        axes = list(range(a["axis"] % max(r, 1), r))
    elif n.op in ("argmax", "argmin"):
        axes = [a["axis"] % max(r, 1)]
    else:
        ax = a.get("axes")
        axes = list(range(r)) if ax is None else sorted({q % max(r, 1) for q in ax})
    return x.type.shape, axes


class Group:
    __slots__ = ("gid", "nodes", "kind", "alive")

    def __init__(self, gid, nodes, kind):
        self.gid = gid
        self.nodes = list(nodes)
        self.kind = kind
        self.alive = True

    def __repr__(self):
        return f"<group {self.gid} {self.kind}: {' '.join(n.op for n in self.nodes)}>"


class _Fuser:
    def __init__(self, module: Module, f: Function, log: list):
        self.m = module
        self.store = module.constraints
        self.f = f
        self.log = log
        self.pos: dict[int, float] = {}
        self.cons: dict[int, list[Node]] = {}
        self.results = {id(v) for v in f.results}
        self.group_of: dict[int, Group] = {}
        self.groups: list[Group] = []
        self.dup_count = 0
        self._reindex()

    # --- bookkeeping -------------------------------------------------------------------------
    def _reindex(self):
        self.cons = {}
        for i, n in enumerate(self.f.nodes):
            self.pos.setdefault(id(n), float(i))
            seen = set()
            for v in n.inputs:
                if v is not None and id(v) not in seen:
                    seen.add(id(v))
                    self.cons.setdefault(id(v), []).append(n)

    def new_group(self, nodes, kind):
        g = Group(len(self.groups), nodes, kind)
        self.groups.append(g)
        for n in nodes:
            self.group_of[id(n)] = g
        return g

    def lo(self, g):
        return min(self.pos[id(n)] for n in g.nodes)

    def hi(self, g):
        return max(self.pos[id(n)] for n in g.nodes)

    def escaping(self, nodes) -> list[Value]:
        ids = {id(n) for n in nodes}
        out = []
        for n in sorted(nodes, key=lambda n: self.pos[id(n)]):
            for v in n.outputs:
                if id(v) in self.results or any(id(u) not in ids for u in self.cons.get(id(v), ())):
                    out.append(v)
        return out

    def succs(self, g) -> list[Group]:
        out = {}
        for n in g.nodes:
            for v in n.outputs:
                for u in self.cons.get(id(v), ()):
                    h = self.group_of.get(id(u))
                    if h is not None and h is not g:
                        out[h.gid] = h
        return sorted(out.values(), key=self.lo)

    def would_cycle(self, members: list[Group]) -> bool:
        """True when merging ``members`` makes a cycle: one reaches another through an outsider."""
        mids = {g.gid for g in members}
        limit = max(self.hi(g) for g in members)
        stack = [h for g in members for h in self.succs(g) if h.gid not in mids]
        seen = set()
        while stack:
            h = stack.pop()
            if h.gid in seen:
                continue
            seen.add(h.gid)
            if self.lo(h) >= limit:
                continue
            for s in self.succs(h):
                if s.gid in mids:
                    return True
                if s.gid not in seen:
                    stack.append(s)
        return False

    def amplifies(self, g: Group, c: Group) -> bool:
        """Whether merging producer ``g`` into consumer ``c`` would evaluate ``g`` more often
        than ``g`` has elements where that costs: a transcendental when ``c`` iterates over (at
        least) its largest value and what ``g`` gives ``c`` is smaller (a broadcast); anything
        but a view when ``c`` reads it through a window (once per tap)."""
        windows = [n for n in c.nodes if n.op in WINDOWS]
        made = {id(v) for n in g.nodes for v in n.outputs} if windows else set()
        if any(v is not None and id(v) in made for n in windows for v in n.inputs):
            # the expand convolution's ReLU6 at each of a depthwise convolution's 9 taps costs about
            # the pass over memory it saves (docs/gemm.md)
            return any(n.op not in RELAYOUTS for n in g.nodes)
        if not any(n.op in EXPENSIVE for n in g.nodes):
            return False
        simp = self.store.simplify  # the constraints (b == a) decide what is equal
        into = [simp(S.prod(v.type.shape)) for n in g.nodes for v in n.outputs
                if any(self.group_of.get(id(u)) is c for u in self.cons.get(id(v), ()))]
        sizes = {simp(S.prod(v.type.shape)) for n in c.nodes for v in (*n.inputs, *n.outputs) if v is not None}
        return any(not S.provably_le(w, v) for v in into for w in sizes)

    def merge(self, members: list[Group], kind: str) -> Group:
        g = members[0]
        for h in members[1:]:
            g.nodes.extend(h.nodes)
            for n in h.nodes:
                self.group_of[id(n)] = g
            h.alive = False
            h.nodes = []
        g.kind = kind
        return g

    # --- legality ----------------------------------------------------------------------------
    def validate(self, nodes, esc=None) -> str | None:
        """The kind of a group made of ``nodes`` (escaping values ``esc``), or None if illegal."""
        if esc is None:
            esc = self.escaping(nodes)
        classes = [node_class(n) for n in nodes]
        for kind in ("opaque", "attention", "select"):
            if kind in classes:
                return kind if len(nodes) == 1 else None
        if "scatter" in classes:
            ops = [n.op for n in self._sorted(nodes) if n.op not in VIEWS]
            return "scatter" if ops[-1] in SCATTERS and ops[:-1] in ([], ["full"]) else None
        if "gemm" in classes or "conv" in classes:
            return self._validate_anchor(nodes, classes, esc)
        reds = [n for n, c in zip(nodes, classes) if c in ("red", "norm")]
        if not reds:
            if not esc:
                return "pointwise"
            shapes = [v.type.shape for v in esc]
            if all(same_shape(self.store, shapes[0], s) for s in shapes[1:]):
                return "pointwise"
            return None
        return self._validate_reduction(nodes, reds, esc)

    def _downstream(self, nodes, roots) -> list[Node]:
        ids = {id(n) for n in nodes}
        down = {id(r) for r in roots}
        out = []
        for n in sorted(nodes, key=lambda n: self.pos[id(n)]):
            if id(n) in down:
                out.append(n)
                continue
            if any(v is not None and v.producer is not None and id(v.producer) in down and id(v.producer) in ids
                   for v in n.inputs):
                down.add(id(n))
                out.append(n)
        return out

    def _validate_anchor(self, nodes, classes, esc):
        anchors = [n for n, c in zip(nodes, classes) if c in ("gemm", "conv")]
        if len(anchors) != 1 or len(esc) != 1:
            return None
        a = anchors[0]
        if a.op in BACKWARD_CONVS and len(nodes) > 1:
            return None  # the library call alone: oneDNN's backward convolutions take no post-ops
        kind = "gemm" if a.op in GEMMS else "conv"
        down = self._downstream(nodes, [a])
        ids = {id(n) for n in nodes}
        down_ids = {id(n) for n in down}
        for n in nodes:
            if id(n) in down_ids:
                continue
            # a prologue feeds the gemm directly
            if not _prologue(a, n) or \
                    any(u is not a for u in self.cons.get(id(n.outputs[0]), ())):
                return None
        for n in down:
            if n is a:
                continue
            inner = [v for v in n.inputs if v is not None and v.producer is not None and id(v.producer) in ids]
            if n.op in VIEWS:
                if kind != "gemm":
                    return None
                x, y = n.inputs[0].type.shape, n.outputs[0].type.shape
                if not x or not y or self.store.equal(x[-1], y[-1]) is not True:
                    return None
                continue
            if not _is_elementwise(n) or (n.op == "batch_norm" and kind != "conv"):
                return None
            out = n.outputs[0].type.shape
            if not all(same_shape(self.store, v.type.shape, out) for v in inner):
                return None
        return kind

    def _row_shapes(self, rows, k):
        return (tuple(rows) + (1,) * k, tuple(rows))

    def _siblings(self, nodes, reds, infos) -> bool:
        """Reductions (not norms) over one shape and the same axes to one result shape, none reading
        another's result: one nest computes them all (``merge_siblings``)."""
        st = self.store
        (full, axes), o = infos[0], reds[0].outputs[0].type.shape
        if any(node_class(r) != "red" for r in reds):
            return False
        if len(reds) == 1:
            return True
        if any(ax != axes or not same_shape(st, fs, full) or not same_shape(st, r.outputs[0].type.shape, o)
               for r, (fs, ax) in zip(reds, infos)):
            return False
        red_ids = {id(r) for r in reds}
        return not any(id(n) in red_ids and n is not r for r in reds for n in self._downstream(nodes, [r]))

    def _validate_reduction(self, nodes, reds, esc):
        st = self.store
        infos = [_reduced_axes(r) for r in reds]
        down = self._downstream(nodes, reds)
        red_ids = {id(r) for r in reds}
        if self._siblings(nodes, reds, infos):
            r = reds[0]
            full, _ = infos[0]
            o = r.outputs[0].type.shape
            down_ids = {id(n) for n in down}
            ok = all(_is_elementwise(n) and same_shape(st, n.outputs[0].type.shape, o)
                     for n in down if id(n) not in red_ids)
            ok = ok and all(same_shape(st, v.type.shape, o) if id(v.producer) in down_ids
                            else (same_shape(st, v.type.shape, full) or same_shape(st, v.type.shape, o))
                            for v in esc)
            if ok:
                return "reduction"
        # stitch: same full shape, same number of trailing reduced axes
        full, axes = infos[0]
        r = len(full)
        k = len(axes)
        for (fs, ax) in infos:
            if len(fs) != r or not same_shape(st, fs, full) or ax != list(range(r - k, r)) or k == 0:
                return None
        rows = full[:r - k]
        row_shapes = self._row_shapes(rows, k)

        def cls(shape):
            if same_shape(st, shape, full):
                return "full"
            if any(same_shape(st, shape, rs) for rs in row_shapes):
                return "row"
            return None

        for n in down:
            if id(n) in red_ids:
                continue
            if _is_elementwise(n):
                if cls(n.outputs[0].type.shape) is None:
                    return None
            elif n.op in VIEWS:
                if cls(n.inputs[0].type.shape) != "row" or cls(n.outputs[0].type.shape) != "row":
                    return None
            else:
                return None
        if any(cls(v.type.shape) is None for v in esc):
            return None
        return "stitch"

    # --- phases ------------------------------------------------------------------------------
    def seed(self):
        taken = {}  # id(node) -> the scatter group's nodes it joins (rule 5)
        for n in self.f.nodes:
            if node_class(n) == "scatter":
                nodes = scatter_group_nodes(n, self.results, self.cons)
                taken.update((id(m), nodes) for m in nodes)
        for n in self.f.nodes:
            c = node_class(n)
            if c == "const" or (id(n) in taken and c != "scatter"):
                continue
            kind = {"pw": "pointwise", "red": "reduction", "norm": "stitch", "gemm": "gemm",
                    "conv": "conv", "scatter": "scatter", "attention": "attention",
                    "select": "select"}.get(c, "opaque")
            self.new_group(taken[id(n)] if c == "scatter" else [n], kind)

    def _epilogue_ok(self, n, kind):
        if n.op in VIEWS:
            return kind == "gemm"
        if n.op == "batch_norm":
            return kind == "conv"
        return node_class(n) == "pw" and _is_elementwise(n)

    def grow_epilogues(self):
        for g in list(self.groups):
            if not g.alive or g.kind not in ("gemm", "conv"):
                continue
            if g.kind in ("gemm", "conv"):
                a = g.nodes[0]
                for v in a.inputs:
                    u = v.producer if v is not None else None
                    if u is None or id(v) in self.results or not _prologue(a, u):
                        continue
                    h = self.group_of.get(id(u))
                    if h is None or h is g or len(h.nodes) != 1 or \
                            any(c is not a for c in self.cons.get(id(v), ())):
                        continue
                    if self.validate(g.nodes + h.nodes) == g.kind:
                        self.merge([g, h], g.kind)
            while True:
                esc = self.escaping(g.nodes)
                if len(esc) != 1 or id(esc[0]) in self.results:
                    break
                W: dict[int, Node] = {}
                frontier = [esc[0]]
                ok = False
                for _ in range(MAX_EPILOGUE):
                    bad = False
                    for v in frontier:
                        for u in self.cons.get(id(v), ()):
                            if self.group_of.get(id(u)) is g or id(u) in W:
                                continue
                            if not self._epilogue_ok(u, g.kind) or len(self.group_of[id(u)].nodes) != 1:
                                bad = True
                                break
                            W[id(u)] = u
                        if bad:
                            break
                    if bad or len(W) > MAX_EPILOGUE:
                        break
                    e2 = self.escaping(g.nodes + list(W.values()))
                    if len(e2) == 1:
                        ok = True
                        break
                    if not e2:
                        break
                    latest = max(e2, key=lambda v: self.pos[id(v.producer)])
                    frontier = [v for v in e2 if v is not latest]
                if not ok:
                    break
                cand = g.nodes + list(W.values())
                if self.validate(cand) != g.kind:
                    break
                members = [g] + [self.group_of[i] for i in W]
                if self.would_cycle(members):
                    break
                self.merge(members, g.kind)
            # a trailing view needs no kernel of its own inside the gemm group
            while len(g.nodes) > 1:
                esc = self.escaping(g.nodes)
                if len(esc) != 1 or esc[0].producer.op not in VIEWS:
                    break
                tail = esc[0].producer
                g.nodes.remove(tail)
                self.new_group([tail], "pointwise")
            if len(g.nodes) > 1:
                self.log.append(f"{g.kind} epilogue: {' -> '.join(n.op for n in self._sorted(g.nodes))}")

    def merge_loop(self) -> int:
        merges = 0
        changed = True
        while changed:
            changed = False
            for g in sorted([g for g in self.groups if g.alive], key=self.lo):
                if not g.alive or g.kind in CLOSED_KINDS:
                    continue
                again = True
                while again:
                    again = False
                    for c in self.succs(g):
                        if c.kind in CLOSED_KINDS:
                            continue
                        kind = self.validate(g.nodes + c.nodes)
                        if kind is None or self.would_cycle([g, c]) or self.amplifies(g, c) or \
                                self._recomputable(g, c, kind):
                            continue
                        # keep the producer-first order of the members for a stable gid
                        self.merge([g, c], kind)
                        merges += 1
                        changed = again = True
                        break
        return merges

    def _recomputable(self, g: Group, c: Group, kind: str) -> bool:
        """Whether pointwise ``g``, read by reduction ``c`` and by other groups as well, should stay
        out of ``c``: merged, ``c`` would write ``g``'s full-size values for the others to read
        (batch norm's backward wrote dy and x - mean); apart, ``duplicate`` computes it again in
        each reader from its inputs."""
        if g.kind != "pointwise" or kind != "reduction" or len(g.nodes) > MAX_DUP_NODES:
            return False
        return any(h is not c for h in self.succs(g))

    def merge_siblings(self) -> int:
        """Reduction groups that read a value in common and reduce alike (``_siblings``: batch norm's
        backward sums dy and dy * (x - mean) over N, H and W) become one group: one nest reads the
        inputs once for all of them."""
        merges = 0
        readers: dict[int, list[Group]] = {}
        for g in self.groups:
            if g.alive and g.kind == "reduction":
                ids = {id(n) for n in g.nodes}
                for v in {id(v): v for n in g.nodes for v in n.inputs
                          if v is not None and (v.producer is None or id(v.producer) not in ids)
                          and (v.producer is None or v.producer.op != "constant")}.values():
                    readers.setdefault(id(v), []).append(g)
        for gs in readers.values():
            for i, g in enumerate(gs):
                for h in gs[i + 1:]:
                    if g is h or not g.alive or not h.alive:
                        continue
                    if self.validate(g.nodes + h.nodes) == "reduction" and not self.would_cycle([g, h]):
                        first, second = sorted((g, h), key=self.lo)
                        self.merge([first, second], "reduction")
                        merges += 1
                        self.log.append(f"siblings: {self._describe(first)}")
        return merges

    def duplicate(self) -> int:
        count = 0
        for g in sorted([g for g in self.groups if g.alive], key=self.lo, reverse=True):
            if not g.alive or g.kind != "pointwise" or len(g.nodes) > MAX_DUP_NODES:
                continue
            esc = self.escaping(g.nodes)
            if not esc:
                continue
            cons = [c for c in self.succs(g)]
            if any(id(v) in self.results for v in esc):
                # a result stays written; a consumer that only re-lays it out (a conv's NHWC copy of
                # a saved NCHW activation) computes it again at its own index instead, reading the
                # group's inputs in their layout rather than the result across it
                cons = [c for c in cons if all(n.op in RELAYOUTS for n in c.nodes)]
                if not cons:
                    continue
            elif len(cons) < 2:
                continue
            done = []
            for c in cons:
                if c.kind in CLOSED_KINDS or self.amplifies(g, c):
                    continue
                kind = self.validate(c.nodes + g.nodes, esc=self.escaping(c.nodes))
                if kind is None:
                    continue
                self._clone_into(g, c)
                c.kind = kind
                done.append(c)
            if done:
                count += 1
                self.log.append(f"duplicated {self._describe(g)} into {len(done)} consumer group(s)")
                if not self.escaping(g.nodes):
                    self._remove_group(g)
        return count

    def _clone_into(self, g: Group, c: Group):
        vmap: dict[int, Value] = {}
        clones = []
        for n in self._sorted(g.nodes):
            outs = [Value(v.name, v.type) for v in n.outputs]
            nn = Node(n.op, [None if v is None else vmap.get(id(v), v) for v in n.inputs], dict(n.attrs), outs,
                      n.loc)
            for v, w in zip(n.outputs, outs):
                vmap[id(v)] = w
            self.pos[id(nn)] = self.pos[id(n)]
            clones.append(nn)
        for n in c.nodes:
            n.inputs = [None if v is None else vmap.get(id(v), v) for v in n.inputs]
        c.nodes.extend(clones)
        for nn in clones:
            self.group_of[id(nn)] = c
        self.f.nodes.extend(clones)
        self._rebuild_consumers()

    def _remove_group(self, g: Group):
        ids = {id(n) for n in g.nodes}
        self.f.nodes = [n for n in self.f.nodes if id(n) not in ids]
        for n in g.nodes:
            self.group_of.pop(id(n), None)
        g.alive = False
        g.nodes = []
        self._rebuild_consumers()

    def _rebuild_consumers(self):
        self.cons = {}
        for n in self.f.nodes:
            seen = set()
            for v in n.inputs:
                if v is not None and id(v) not in seen:
                    seen.add(id(v))
                    self.cons.setdefault(id(v), []).append(n)

    def _sorted(self, nodes) -> list[Node]:
        """Topological order inside a group (by original position, then dependencies)."""
        ids = {id(n) for n in nodes}
        prod = {id(v): n for n in nodes for v in n.outputs}
        deps = {id(n): {id(prod[id(v)]) for v in n.inputs if v is not None and id(v) in prod} for n in nodes}
        out, done = [], set()
        pending = sorted(nodes, key=lambda n: self.pos[id(n)])
        while pending:
            rest = []
            progressed = False
            for n in pending:
                if deps[id(n)] <= done:
                    out.append(n)
                    done.add(id(n))
                    progressed = True
                else:
                    rest.append(n)
            if not progressed:
                raise AssertionError("cycle inside a fusion group")
            pending = rest
        del ids
        return out

    def _describe(self, g: Group) -> str:
        ops = [n.op for n in self._sorted(g.nodes)]
        outs = ", ".join("%" + v.name for v in self.escaping(g.nodes))
        return f"{outs} ({' -> '.join(ops)})"

    # --- emission ----------------------------------------------------------------------------
    def emit(self, used_names: set[str], counter: list[int]) -> list[dict]:
        groups = [g for g in self.groups if g.alive and g.nodes]
        # group DAG topological order
        preds: dict[int, set[int]] = {g.gid: set() for g in groups}
        for g in groups:
            for s in self.succs(g):
                preds[s.gid].add(g.gid)
        order = []
        done = set()
        pending = sorted(groups, key=self.lo)
        while pending:
            rest = []
            progressed = False
            for g in pending:
                if preds[g.gid] <= done:
                    order.append(g)
                    done.add(g.gid)
                    progressed = True
                else:
                    rest.append(g)
            if not progressed:
                raise AssertionError("cycle between fusion groups")
            pending = rest
        const_nodes = [n for n in self.f.nodes if n.op == "constant"]
        new_main = []
        records = []
        for g in order:
            esc = self.escaping(g.nodes)
            if not esc:
                continue
            nodes = self._sorted(g.nodes)
            ids = {id(n) for n in nodes}
            inputs, in_ids, consts = [], set(), []
            for n in nodes:
                for v in n.inputs:
                    if v is None or id(v) in in_ids:
                        continue
                    p = v.producer
                    if p is not None and id(p) in ids:
                        continue
                    in_ids.add(id(v))
                    if p is not None and p.op == "constant" and p in const_nodes:
                        consts.append(v)
                    else:
                        inputs.append(v)
            while f"fused_{counter[0]}" in used_names:
                counter[0] += 1
            name = f"fused_{counter[0]}"
            counter[0] += 1
            used_names.add(name)
            sub = Function(name)
            vmap: dict[int, Value] = {}
            for v in inputs:
                w = Value(v.name, v.type)
                vmap[id(v)] = w
                sub.params.append(w)
            for v in consts:
                w = Value(v.name, v.type)
                sub.nodes.append(Node("constant", [], dict(v.producer.attrs), [w], v.producer.loc))
                vmap[id(v)] = w
            for n in nodes:
                outs = [Value(v.name, v.type) for v in n.outputs]
                for v, w in zip(n.outputs, outs):
                    vmap[id(v)] = w
                sub.nodes.append(Node(n.op, [None if v is None else vmap[id(v)] for v in n.inputs],
                                      dict(n.attrs), outs, n.loc))
            sub.results = [vmap[id(v)] for v in esc]
            self.m.functions[name] = sub
            loc = next((n.loc for n in nodes if n.loc is not None and node_class(n) not in ("pw", "const")),
                       next((n.loc for n in nodes if n.loc is not None), None))
            fn = Node("fused", list(inputs), {"callee": name, "kind": g.kind}, list(esc), loc)
            new_main.append(fn)
            records.append({"callee": name, "kind": g.kind, "ops": [n.op for n in nodes], "inputs": inputs,
                            "outputs": esc})
        # constants still used directly by the function's results stay in it
        keep_consts = [n for n in const_nodes if any(id(v) in self.results for v in n.outputs)]
        self.f.nodes = keep_consts + new_main
        return records

    def run(self, used_names, counter):
        n0 = len(self.f.nodes)
        self.seed()
        self.grow_epilogues()
        for _ in range(3):
            self.merge_loop()
            if not self.duplicate():
                break
        self.merge_loop()
        if self.merge_siblings():
            self.merge_loop()
        records = self.emit(used_names, counter)
        kinds = Counter(r["kind"] for r in records)
        self.log.insert(0, f"@{self.f.name}: {n0} nodes -> {len(records)} groups (" +
                        ", ".join(f"{k} {kinds[k]}" for k in FUSED_KINDS if kinds[k]) + ")")
        return records


@dataclass
class FusionLog:
    """What ``fuse`` decided: ``report`` (the groups, as they came out) and the decision lines."""

    report: str = ""
    decisions: list[str] = field(default_factory=list)

    def __str__(self):
        extra = "decisions:\n" + "".join(f"  {s}\n" for s in self.decisions) if self.decisions else ""
        return self.report + extra


def fuse(module: Module) -> tuple[Module, FusionLog]:
    """Partition every entry function into ``fused`` groups (in place); see the module doc."""
    used = set(module.functions)
    counter = [0]
    logs = []
    groups = []
    for f in top_functions(module):
        if any(n.op == "fused" for n in f.nodes):
            continue  # already fused
        log: list[str] = []
        recs = _Fuser(module, f, log).run(used, counter)
        logs.extend(log)
        groups.extend(recs)
    return module, FusionLog(fusion_report(module), logs)


def group_counts(module: Module) -> dict[str, int]:
    """How many ``fused`` nodes of each kind the entry functions hold."""
    c = Counter()
    for f in top_functions(module):
        for n in f.nodes:
            if n.op == "fused":
                c[n.attrs.get("kind", "opaque")] += 1
    return {k: c[k] for k in FUSED_KINDS if c[k]}


def fusion_report(module: Module) -> str:
    """The fusion groups, readable: a summary and one line per group."""
    from ..ir.printer import _Printer
    p = _Printer(module)
    lines = []
    counts = group_counts(module)
    total = sum(counts.values())
    lines.append(f"fusion: {total} groups (" + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")")
    for f in top_functions(module):
        for n in f.nodes:
            if n.op != "fused":
                continue
            callee = module.functions.get(n.attrs["callee"])
            ops = [m.op for m in callee.nodes if m.op != "constant"] if callee else ["?"]
            ins = ", ".join("%" + v.name for v in n.inputs if v is not None)
            outs = ", ".join(f"%{v.name}: {p.type(v.type)}" for v in n.outputs)
            opstr = " -> ".join(ops) if len(ops) <= 12 else " -> ".join(ops[:6] + ["..."] + ops[-5:]) + \
                f" ({len(ops)} ops)"
            lines.append(f"  @{n.attrs['callee']:<10} {n.attrs['kind']:<9} {opstr}")
            lines.append(f"      in: {ins or '-'}   out: {outs}")
    return "\n".join(lines) + "\n"
