"""One braze region of a partitioned graph: its FX subgraph imported and compiled natively."""

from __future__ import annotations

import operator
import re
import threading

from .. import log as _logging
from ..errors import BrazeError
from . import pins, reuse

_log = _logging.get("plugin")


# why a node that needs a size the region cannot read is refused (``_check_sizes``)
UNREADABLE_SIZE = "it uses a size braze cannot read from its inputs' shapes: one that comes from tensor data or " \
    "from another graph"


class Refused(Exception):
    """A converter refused one node (its attributes, its dtypes): rerun the partition without it."""

    def __init__(self, node_name: str, reason: str):
        super().__init__(f"{node_name}: {reason}")
        self.node_name = node_name
        self.reason = reason


class Region:
    """A braze region of the partitioned graph, called with the fused subgraph's arguments.

    A region of a graph whose sizes dynamo may have specialised (``dynamo.maybe_specialised``) is
    compiled lazily: its first call runs the subgraph in PyTorch, and its second looks for a
    library it is an instance of (``reuse``) before compiling one. A graph dynamo
    traces for one call (the first shape of automatic-dynamic, a batch of 1) then costs no C
    compile at all."""

    def __init__(self, name: str, sub, ops: list[str], arg_index: list[int], module, weights: dict, opts,
                 match: reuse.Match | None = None, pin_ok=None, pinned: dict[str, int] | None = None,
                 grad_sums: bool = False, sizes: tuple[int, ...] = ()):
        self.name = name
        self.sub = sub  # the FX subgraph: PyTorch runs it until braze's library is ready
        self.ops = ops  # the ATen ops it covers, for the debug report
        self.arg_index = arg_index  # positions of the subgraph's arguments braze takes
        self.pin_ok = pin_ok  # None, or a test of the arguments: do they agree with the pinned values?
        self.pinned = pinned or {}  # integer arguments (torch symbols) the library is built for one value of
        self.sizes = sizes  # positions in the taken arguments of integers passed as 0-d tensors (pins)
        self.module, self.weights, self.opts = module, weights, opts
        self.model = None
        self.on_ready = []  # callbacks once the library serves the region
        self._lock = threading.Lock()
        self._seen = False
        self._call = self._deferred
        self.__name__ = name
        self.grad_sums = grad_sums  # a backward's region (reuse.find)
        if match is not None:
            self._ready(match)

    def __call__(self, *args):
        return self._call(*args)

    def tensors(self, *tensors):
        """The native call, with braze's inputs only (``arg_index`` picked)."""
        return self._main(*tensors)

    def _ready(self, match: reuse.Match):
        model = match.model
        self.model, self.module = model, None  # the imported IR lives on in ``reuse``
        main = _picked(model._main, match.pick)
        self._main = main = pins.as_sizes(main, self.sizes) if self.sizes else main
        idx, sub = self.arg_index, self.sub
        if len(idx) == 1:
            i0 = idx[0]
            run = lambda *args: main(args[i0])  # noqa: E731
        else:
            pick = operator.itemgetter(*idx)
            run = lambda *args: main(*pick(args))  # noqa: E731

        pin_ok, pinned = self.pin_ok, ", ".join(f"{k} = {v}" for k, v in self.pinned.items())

        def call(*args):
            try:
                if pin_ok is not None and not pin_ok(args):
                    raise BrazeError(f"the region is compiled for the integer arguments {pinned}, and this call "
                                     "has others")
                return run(*args)
            except Exception as e:  # noqa: BLE001 -- PyTorch runs what braze could not, with eager's errors
                self.native_failed(e)
                return sub(*args)
        self._call = call
        for fn in self.on_ready:
            fn()

    def native_failed(self, e: Exception) -> None:
        """A call braze's library refused or failed: PyTorch runs it, and says so once per reason."""
        from .report import call_failed
        call_failed(self.name, e)

    def _deferred(self, *args):
        if self._lock.acquire(blocking=False):  # another thread compiling: run in torch meanwhile
            try:
                if self.model is None and self.module is not None:
                    if self._seen:
                        self._finish()
                    self._seen = True
            except Exception as e:  # noqa: BLE001 -- the user's call must not fail for braze's sake
                from .report import region_failed
                self.module = None  # PyTorch keeps running it
                region_failed(self.ops, e)
            finally:
                self._lock.release()
        if self.model is not None:
            return self._call(*args)
        return self.sub(*args)

    def _finish(self):
        self._ready(library_for(self.name, self.module, self.weights, self.opts, compile_now=True,
                                grad_sums=self.grad_sums))

    def __repr__(self):
        state = "compiled" if self.model is not None else "deferred"
        return f"<braze region {self.name}: {len(self.ops)} ops, {state}>"


def _picked(main, pick: tuple[int, ...] | None):
    """The library's entry, returning the region's results (``reuse.Match.pick``)."""
    if pick is None:
        return main
    if len(pick) == 1:
        i0 = pick[0]
        return lambda *args: main(*args)[i0]
    take = operator.itemgetter(*pick)
    return lambda *args: take(main(*args))


def symbol_names(shape_env) -> dict[str, str]:
    """torch symbol -> a braze name from where dynamo found it: ``L['x'].size()[0]`` -> ``x_dim0``,
    ``L['kwargs']['input_ids'].size()[1]`` -> ``input_ids_dim1``.
    Names depend only on the model's arguments, so the same graph gives the same library."""
    from ..frontend.torch.importer import source_names
    out: dict[str, str] = {}
    for sym, texts in source_names(shape_env).items():
        for text in texts:
            m = re.fullmatch(r"L((?:\[[^\]]+\])+)\.size\(\)\[(\d+)\]", text)
            if m:  # L['x'], L['args'][0], L['kwargs']['input_ids']
                keys = [k.strip("'\"") for k in re.findall(r"\[([^\]]+)\]", m.group(1))]
                name = re.sub(r"\W+", "_", "_".join(k for k in keys if k != "kwargs")) + f"_dim{m.group(2)}"
            else:
                name = re.sub(r"\W+", "_", text).strip("_")
            if name:
                out[sym] = name if name[0].isalpha() else "d_" + name
                break
    return out


def symbol_ranges(shape_env) -> dict[str, tuple[int, int | None]]:
    """Ranges from the ShapeEnv, from 1 where dynamo's starts at 2: dynamo's 0/1 specialisation
    sends size 1 to another graph, and that graph may reuse this library (``reuse``)."""
    from ..frontend.torch.importer import _vr_int
    out = {}
    for sym, vr in getattr(shape_env, "var_to_range", {}).items():
        lo, hi = _vr_int(vr.lower, 1), _vr_int(vr.upper, None)
        out[str(sym)] = (1 if lo <= 2 else lo, hi)
    return out


def _free_symbols(val) -> set:
    import torch
    if isinstance(val, torch.Tensor):
        return {s for d in val.shape if isinstance(d, torch.SymInt) for s in d.node.expr.free_symbols}
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return set(val.node.expr.free_symbols)
    return set()


def compile_region(name: str, sub, call_node, frozen: dict, shape_env, opts, speculative: bool,
                   backward: bool = False, donated: dict[str, int] | None = None) -> Region:
    """Import the fused subgraph ``sub`` (called by ``call_node`` in the outer graph) and compile it.
    Weights in ``frozen`` (outer placeholder -> (name, tensor)) become constants; braze reads sizes
    from its inputs' shapes, so of the region's arguments it takes the run-time tensors, and an
    integer argument of the user's that no shape carries as a 0-d tensor of its own, or
    (where it cannot) builds for its value at hand (``pins``).
    Raises Refused when a converter refuses a node, BrazeError when the region cannot be compiled.
    A region of a ``speculative`` graph compiles on its second call (``Region``). A ``backward``
    graph's region may take a library whose sums over a batch of 1 it passes on (``reuse``).
    ``donated``: placeholder -> the region output that is its new value, for the buffers the region
    may write in place (``partition.written_buffers``)."""
    import torch

    from ..frontend.torch.importer import GraphInput, Importer, TorchGraph

    places = [n for n in sub.graph.nodes if n.op == "placeholder"]
    inputs, arg_index = {}, []
    for i, p in enumerate(places):
        outer = call_node.args[i]
        if getattr(outer, "op", None) == "placeholder" and outer.name in frozen:
            cname, tensor = frozen[outer.name]
            inputs[p.name] = GraphInput("constant", cname, tensor)
        elif getattr(outer, "op", None) == "get_attr":  # a tensor the graph holds (torch.tensor(...))
            inputs[p.name] = GraphInput("constant", str(outer.target), _fetch_attr(call_node.graph, outer.target))
        elif isinstance(p.meta.get("val"), torch.Tensor):
            arg_index.append(i)
    read = _shape_symbols(places, arg_index)[0]
    sizes = pins.size_arguments(places, shape_env, read) if not opts.target.startswith("cuda") else []
    size_syms = {places[i].meta["val"].node.expr for i in sizes}
    for i in sizes:
        inputs[places[i].name] = GraphInput("size")
    pinned = pins.pinned_symbols(places, shape_env, read | size_syms)
    pin_ok = pins.pin_check(places, arg_index, pinned) if pinned else None
    if pin_ok is None:
        pinned = {}
    _check_sizes(places, arg_index, sub, pinned, size_syms)
    used = {str(s) for p in places for s in _free_symbols(p.meta.get("val"))}
    pinned_syms = {str(k): int(v) for k, v in pinned.items()}
    ranges = {k: v for k, v in symbol_ranges(shape_env).items() if k in used and k not in pinned_syms}
    for s in size_syms:  # a value may be 0 (a decoder's first position)
        ranges[str(s)] = (0, ranges.get(str(s), (0, None))[1])
    taken = sorted(arg_index + sizes)
    for k, (_, hi) in ranges.items():
        if hi is not None and hi < 1:  # an integer argument braze could not pin (pins.pin_check)
            raise BrazeError(f"the region's shapes use {k}, an integer that is at most {hi}: braze reads sizes of "
                             "at least 1")
    tg = TorchGraph(sub.graph, inputs, ranges, symbol_names(shape_env), shape_env, pinned=pinned_syms,
                    donated=donated)
    imp = Importer(tg)
    try:
        module = imp.run()
    except BrazeError as e:
        if getattr(e, "op_node", None):  # an op without an output the graph uses (SDPA's logsumexp)
            raise Refused(e.op_node, e.what) from e
        node = imp.node
        if node is not None and node.op == "call_function":
            raise Refused(node.name, e.what) from e
        raise
    frozen_names = {cname for cname, _ in frozen.values()}
    weights = {k: reuse.weight_key(t, k in frozen_names) for k, t in imp.weights.items()}
    from .report import op_name
    ops = [op_name(n) for n in sub.graph.nodes if n.op == "call_function"]
    match = library_for(name, module, weights, opts, compile_now=not speculative, grad_sums=backward)
    return Region(name, sub, ops, taken, module, weights, opts, match, pin_ok, pinned_syms, backward,
                  tuple(taken.index(i) for i in sizes))


def library_for(name: str, module, weights: dict, opts, compile_now: bool, grad_sums: bool = False):
    """A library braze holds that serves ``module`` (``reuse.Match``), else (with ``compile_now``)
    a new one, remembered; else None."""
    match = reuse.find(module, weights, name, opts, grad_sums)
    if match is not None:
        _log.info("braze plugin: %s is an instance of a region compiled before; reusing its library%s", name,
                  "" if match.pick is None else f" (its outputs {list(match.pick)})")
    elif compile_now:
        from ..compiler import compile as braze_compile
        model = braze_compile(module, options=opts)
        reuse.remember(module, weights, model)
        match = reuse.Match(model)
    return match


def _shape_symbols(places, arg_index, pinned: dict | None = None) -> tuple[set, set]:
    """The symbols braze reads from the region's tensor inputs (those of a plain symbol or a
    single-symbol ``a*s + b`` dim, once the ``pinned`` values are put in), and every input dim's
    whole expression."""
    import torch

    from ..frontend.torch.importer import linear_form
    syms, exprs = set(), set()
    for i in arg_index:
        for d in places[i].meta["val"].shape:
            if isinstance(d, torch.SymInt):
                e = d.node.expr.xreplace(pinned) if pinned else d.node.expr
                exprs.add(e)
                if linear_form(e) is not None:
                    syms |= e.free_symbols
    return syms, exprs


def _check_sizes(places, arg_index, sub, pinned: dict, size_syms: set = frozenset()) -> None:
    """Every size in the region must follow from its tensor inputs' shapes, the only sizes braze
    reads: a plain symbol, a single-symbol ``a*s + b``, or an input dim's whole expression, with
    ``pinned`` symbols as the constants they are compiled for and ``size_syms`` read from the
    values of the 0-d tensors that carry them. The first node that needs another size (from tensor
    data, or from another graph) is refused."""
    import torch

    syms, exprs = _shape_symbols(places, arg_index, pinned)
    syms = syms | size_syms

    def readable(val) -> bool:
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            e = val.node.expr.xreplace(pinned) if pinned else val.node.expr
            return e.free_symbols <= syms or e in exprs
        if isinstance(val, torch.Tensor):
            return all(readable(d) for d in val.shape)
        if isinstance(val, (list, tuple)):
            return all(readable(v) for v in val)
        return True

    for n in sub.graph.nodes:
        if n.op == "placeholder" and not readable(n.meta.get("val")):
            users = [u for u in n.users if u.op == "call_function"]
            if users:
                raise Refused(users[0].name, UNREADABLE_SIZE)
        elif n.op == "call_function" and not readable(n.meta.get("val")):
            raise Refused(n.name, "its shape needs a size braze cannot read from the region's inputs: one that "
                                  "comes from tensor data or from another graph")

def _fetch_attr(graph, target: str):
    obj = graph.owning_module
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
