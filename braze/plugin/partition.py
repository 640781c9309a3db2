"""Partitioning: braze compiles what it supports of an ATen graph in as few regions as the ops
PyTorch must run allow (``stages``), PyTorch runs the rest, and the partitioned graph calls both.

A node runs in PyTorch when braze has no converter for its op, when a dtype has no braze kernels,
when its output shape depends on tensor data, or when its converter refused it (the partition is
then redone without that node). Size arithmetic stays in torch: braze reads sizes from its
inputs' shapes, so those nodes die once the regions are in place. Whatever fails here, PyTorch
runs the graph (``in_torch``).
"""

from __future__ import annotations

import itertools
import operator
import os

from .. import log as _logging
from ..errors import BrazeError
from . import report
from ..frontend.torch.aten import packet_name
from .region import UNREADABLE_SIZE, Refused, compile_region
from .rng import SEED_META
from .saved_layout import LAYOUT_META
from .strides import keep_traced_strides

_log = _logging.get("plugin")

SIZE = "size"  # a node that computes sizes, not tensors
SEED = "seed"  # the graph's random seed (``rng``): drawn by PyTorch before any region runs, no warning
VIEW = "layout view"  # a saved activation's channels-last view (``saved_layout``): PyTorch's, no warning
# a view of a braze result that PyTorch reads, made by PyTorch with eager's strides (``strides``)
TRACED_VIEW = "a view PyTorch makes with the traced strides"
QUIET = (SEED, VIEW, TRACED_VIEW)  # nodes PyTorch runs on purpose, which split no region
# a view to sizes the region cannot read (a loss's gradient viewed back to [batch, seq, vocab] with
# the forward's saved sizes): PyTorch makes it without a copy, with no warning
SIZED_VIEW = "a view to sizes from another graph, which PyTorch makes without a copy"
# an as_strided, which PyTorch makes from an input with the traced strides (``support``), no warning
STRIDED_VIEW = "an as_strided, which PyTorch makes without a copy"
SILENT = (SIZED_VIEW, STRIDED_VIEW)  # nodes PyTorch runs without a warning, which split regions
TORCH_META = "braze_torch"  # FX node meta: why PyTorch runs a node the plug-in put there
MAX_REFUSALS = 64
# a region of nothing but these is not worth a library: torch does them without copying
VIEW_OPS = {"aten.view", "aten._unsafe_view", "aten.reshape", "aten.expand", "aten.permute", "aten.t",
            "aten.transpose", "aten.unsqueeze", "aten.squeeze", "aten.slice", "aten.select", "aten.alias",
            "aten.as_strided", "aten.detach", "aten.lift_fresh_copy", "aten.clone"}
# views that never copy in torch; on the graph's inputs they are free where torch makes them
FREE_VIEWS = VIEW_OPS - {"aten.clone", "aten.lift_fresh_copy"}


def _braze_dtypes():
    import torch
    return {torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
            torch.bfloat16, torch.float16}


def _tensors(val):
    import torch
    if isinstance(val, torch.Tensor):
        yield val
    elif isinstance(val, (list, tuple)):
        for v in val:
            yield from _tensors(v)


def support(node, refused: dict) -> str | None:
    """None when braze compiles ``node``; SIZE for size arithmetic; else why torch runs it."""
    import torch
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    from ..frontend.torch.aten import is_supported
    if node.name in refused:
        return refused[node.name]
    if node.meta.get(SEED_META):
        return SEED
    if node.meta.get(LAYOUT_META):
        return VIEW
    if node.meta.get(TORCH_META):
        return node.meta[TORCH_META]
    if node.target is operator.getitem:
        src = node.args[0]
        return support(src, refused) if getattr(src, "op", None) == "call_function" else SIZE
    outs = list(_tensors(node.meta.get("val")))
    if not outs:
        return SIZE
    if not is_supported(node.target):
        # as_strided reads its input's memory by the traced strides, which its input, read by PyTorch,
        # then has (``keep_traced_strides``); torch's own decompositions make it (an adaptive pool of
        # a channels-last activation), so a warning would name nothing the user wrote
        return STRIDED_VIEW if packet_name(node.target) == "aten.as_strided" else "braze has no converter for it"
    dtypes = _braze_dtypes()
    args = [a.meta.get("val") for a in node.all_input_nodes]
    for t in outs + [t for a in args for t in _tensors(a)]:
        if t.dtype not in dtypes:
            return f"braze has no {str(t.dtype).removeprefix('torch.')} kernels"
    if any(free_unbacked_symbols(t) for t in outs):
        return "its output shape depends on tensor data"
    return None


def stages(g, reasons: dict) -> list[list]:
    """The nodes braze compiles, grouped by how many PyTorch nodes the longest path to each
    passes through: one region per group. A group depends only on groups and PyTorch nodes of
    fewer, so no path leaves a region and comes back, and nodes that do not touch each other
    still share a region. So the partition follows from which ops run in PyTorch alone: a graph
    dynamo specialised to a size of 1 is cut where its general graph is, and its regions line up
    with the general graph's (``reuse``), which connected components did not (a node that a size
    of 1 removes, such as an expand, split a region in two).

    Size arithmetic on a tensor braze computes (``sym_size`` of an intermediate) joins the
    region when only braze's nodes of that region read it (the importer evaluates it from the
    shapes: a region returns tensors, not numbers); read by PyTorch or by a later region, it
    runs in PyTorch, after the region. A view of the graph's inputs goes to its reader's group
    (``_place_input_views``)."""
    nodes = list(g.graph.nodes)
    computed = set()  # nodes whose value comes from compute, not only from the inputs' sizes
    for n in nodes:
        if n.op == "call_function" and (reasons.get(n.name) != SIZE or any(a in computed for a in n.all_input_nodes)):
            computed.add(n)
    outside: set = set()  # size nodes a later region reads: PyTorch's
    while True:
        inside = set()  # size nodes on computed tensors that only braze's nodes (or such) read
        for n in reversed(nodes):
            if n in computed and reasons.get(n.name) == SIZE and n.users and n not in outside and \
                    all(reasons.get(u.name, "") is None or u in inside for u in n.users):
                inside.add(n)
        depth: dict = {}
        groups: dict[int, list] = {}
        for n in nodes:
            d = 0
            for a in n.all_input_nodes:
                r = reasons.get(a.name, SIZE) if a.op == "call_function" else SIZE
                in_torch = r is not None and r not in QUIET and a not in inside and (r != SIZE or a in computed)
                d = max(d, depth[a] + in_torch)
            depth[n] = d
            if n.op == "call_function" and (reasons.get(n.name) is None or n in inside):
                groups.setdefault(d, []).append(n)
        group_of = _place_input_views(groups, reasons)
        later = {n for n in inside if any(group_of.get(u) != group_of[n] for u in n.users)}
        if not later:
            placed: dict[int, list] = {}
            for n in nodes:
                if n in group_of:
                    placed.setdefault(group_of[n], []).append(n)
            return [placed[d] for d in sorted(placed)]
        outside |= later


def _is_input_view(n, reasons: dict) -> bool:
    """Whether ``n`` is a view (``FREE_VIEWS``) of the graph's inputs, through views only: torch
    makes it without touching the data, and a region that wrote it would copy it (GPT-2's
    ``t(wte)``, 154 MB, written by one region for the next region's LM head)."""
    if n.op != "call_function" or reasons.get(n.name) is not None or packet_name(n.target) not in FREE_VIEWS:
        return False
    tensors = [a for a in n.all_input_nodes if reasons.get(a.name) != SIZE or a.op != "call_function"]
    return all(a.op == "placeholder" or _is_input_view(a, reasons) for a in tensors)


def split_input_views(g, reasons: dict) -> None:
    """Gives every reader of a view of the graph's inputs a view of its own (``_is_input_view``),
    so that each can be made where it is read (``_place_input_views``)."""
    for n in reversed(list(g.graph.nodes)):
        if len(n.users) > 1 and _is_input_view(n, reasons):
            for u in list(n.users)[1:]:
                with g.graph.inserting_after(n):
                    twin = g.graph.node_copy(n)
                reasons[twin.name] = None
                u.replace_input_with(n, twin)


def _user_results(g, label: str) -> set:
    """The nodes the graph returns to the user's side: all it returns, but for a training
    forward's saved activations, which only its backward reads (and braze's backward reads any
    strides; ``saved_layout`` picks their layout)."""
    from .saved_layout import saved_start
    results = next(n for n in g.graph.nodes if n.op == "output").args[0]
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    start = saved_start() if label == "forward" else None
    return set(results[:start] if start is not None else results)


def _torch_readers(n, reasons: dict, returned: set) -> list:
    """The users of ``n`` that PyTorch runs and that read its values: its ops (not size arithmetic,
    nor ``saved_layout``'s views; a ``TRACED_VIEW`` reads eager's strides), and the graph's output
    where ``n`` is among the ``returned``. A view of the graph's inputs is PyTorch's own: none."""
    if _is_input_view(n, reasons):
        return []
    return [u for u in n.users if (u.op == "output" and n in returned) or
            (u.op == "call_function" and reasons.get(u.name) not in (None, SIZE, SEED, VIEW))]


def _place_input_views(groups: dict, reasons: dict) -> dict:
    """Each grouped node's group, with each view of the graph's inputs moved to its reader's group,
    or to none (PyTorch's) when its reader is not braze's (the graph's output, a PyTorch op): a
    view braze computed would be a copy of its input, written by one region for another or for
    the output."""
    group_of = {n: d for d, nodes in groups.items() for n in nodes}
    for d in sorted(groups, reverse=True):
        for n in reversed(groups[d]):
            if _is_input_view(n, reasons) and len(n.users) == 1:
                user = next(iter(n.users))
                if user in group_of:
                    group_of[n] = group_of[user]
                else:
                    del group_of[n]
    return group_of


def compile_graph(gm, frozen: dict, opts, speculative: bool = False, checks: tuple = ((), ()),
                  label: str = "inference"):
    """The callable AOTAutograd runs for ``gm`` (boxed: it takes a list of inputs). ``frozen``:
    placeholder name -> (weight name, tensor), the weights braze bakes in. ``speculative``: dynamo
    may have fixed the sizes for one call, so the regions compile on their second call. ``checks``:
    what every call verifies of the baked-in weights and scalars (``GuardedCall``). ``label``
    names the graph (inference, forward, backward) in the BRAZE_DEBUG log."""
    entry = _compile_graph(gm, frozen, opts, speculative, label)
    return GuardedCall(entry, *checks, _boxed(gm)) if any(checks) else entry


def _compile_graph(gm, frozen, opts, speculative, label):
    refused: dict[str, str] = {}
    names = {n.name for n in gm.graph.nodes}
    try:
        for _ in range(MAX_REFUSALS):
            try:
                return _build(gm, frozen, refused, opts, speculative, label)
            except Refused as r:
                _log.info("braze plugin: %s refused (%s); partitioning again", r.node_name, r.reason)
                if r.node_name in refused or r.node_name not in names:
                    raise BrazeError(f"the partition did not converge at {r.node_name}: {r.reason}") from None
                view = r.reason == UNREADABLE_SIZE and \
                    packet_name(next(n for n in gm.graph.nodes if n.name == r.node_name).target) in FREE_VIEWS
                refused[r.node_name] = SIZED_VIEW if view else r.reason
        raise BrazeError(f"{MAX_REFUSALS} ops refused in one graph")
    except Exception as e:  # noqa: BLE001 -- whatever braze cannot do, PyTorch still runs the graph
        return in_torch(gm, e)


def written_buffers(gm) -> dict[str, int]:
    """Placeholder -> the position of the graph output that holds its new value: the buffers an
    inference graph writes (a KV cache). AOTAutograd returns their new values first, in the order
    of ``mutated_inp_runtime_indices``, and copies each into its buffer after the call; a copy of a
    tensor onto itself costs nothing, so a region that writes the buffer in place and returns it
    moves only the rows it writes."""
    from torch._guards import TracingContext
    meta = getattr(TracingContext.try_get(), "fw_metadata", None)
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if meta is None or len(meta.input_info) != len(places):
        return {}
    out = {}
    for q, i in enumerate(meta.mutated_inp_runtime_indices):
        info = meta.input_info[i]
        if info.mutates_data and not info.mutates_metadata and not getattr(info, "mutates_storage_metadata", False):
            out[places[i].name] = q
    return out


def _donated(node, sub, written: dict[str, int], outputs) -> dict[str, int]:
    """The region's placeholders whose buffer (``written_buffers``) it may write: the region is the
    buffer's only reader, and one of its outputs is the buffer's new value; -> that output's
    position among the region's."""
    places = [n for n in sub.graph.nodes if n.op == "placeholder"]
    flat = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    out = {}
    for p, a in zip(places, node.args):
        q = written.get(getattr(a, "name", None)) if getattr(a, "op", None) == "placeholder" else None
        if q is None or q >= len(flat) or set(a.users) != {node}:
            continue
        o = flat[q]
        if o is node:
            out[p.name] = 0
        elif getattr(o, "target", None) is operator.getitem and o.args[0] is node:
            out[p.name] = o.args[1]
    return out


def in_torch(gm, e: Exception):
    """The boxed call that runs ``gm`` in PyTorch, after saying once why braze does not."""
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    report.region_failed([report.op_name(n) for n in calls], e, calls[0] if calls else None)
    return _boxed(gm)


def _shape_env(gm):
    for n in gm.graph.nodes:
        for t in _tensors(n.meta.get("val")):
            mode = getattr(t, "fake_mode", None)
            if mode is not None and mode.shape_env is not None:
                return mode.shape_env
    return None


def _build(gm, frozen: dict, refused: dict, opts, speculative: bool, label: str):
    import copy

    import torch
    from torch.fx.passes.infra.partitioner import Partition
    from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

    g = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))  # attributes shared, graph private
    calls = [n for n in g.graph.nodes if n.op == "call_function"]
    reasons = {n.name: support(n, refused) for n in calls}
    split_input_views(g, reasons)
    returned = _user_results(g, label)
    if keep_traced_strides(g, reasons, lambda n: _torch_readers(n, reasons, returned),
                           lambda n: packet_name(n.target) in FREE_VIEWS, TRACED_VIEW):
        reasons.update({n.name: support(n, refused) for n in g.graph.nodes
                        if n.op == "call_function" and n.name not in reasons})
    calls = [n for n in g.graph.nodes if n.op == "call_function"]
    parts = [Partition(nodes=p) for p in stages(g, reasons)
             if any(packet_name(n.target) not in VIEW_OPS for n in p if n.target is not operator.getitem)]
    torch_nodes = [n for n in calls if reasons[n.name] not in (None, SIZE, *QUIET) and n.target is not operator.getitem]
    fused = fuse_by_partitions(g, [p.nodes for p in parts], prefix="fused_") if parts else g
    shape_env = _shape_env(gm)
    # an inference graph's buffers, written by the region that alone reads them, are handed to it
    written = written_buffers(g) if label == "inference" and not opts.target.startswith("cuda") else {}
    outputs = next(n for n in fused.graph.nodes if n.op == "output").args[0]
    regions = []
    number = next(_counter)
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not str(node.target).startswith("fused_"):
            continue
        sub = getattr(fused, node.target)
        # each region's dump in a directory of its own: a training step compiles two graphs or more
        ropts = opts.replace(dump_dir=os.path.join(opts.dump_dir, f"{label}{number}_{node.target}")) \
            if opts.dump_dir else opts
        try:
            region = compile_region(str(node.target), sub, node, frozen, shape_env, ropts, speculative,
                                    backward=label == "backward", donated=_donated(node, sub, written, outputs))
        except Refused:  # the partition runs again without that node
            raise
        except Exception as e:  # noqa: BLE001 -- the region as a whole: torch runs it
            ops = [n for n in sub.graph.nodes if n.op == "call_function"]
            report.region_failed([report.op_name(n) for n in ops], e, ops[0] if ops else None)
            torch_nodes += ops
            continue
        with fused.graph.inserting_before(node):
            new = fused.graph.call_function(region, tuple(node.args))
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        fused.graph.erase_node(node)
        delattr(fused, node.target)
        regions.append(region)
    for n in torch_nodes:
        if n.op == "call_function" and reasons.get(n.name) not in (None, SIZE, *SILENT):
            report.warn_torch_op(n, reasons[n.name])
    fused.graph.eliminate_dead_code()
    fused.recompile()
    title = f"{label} graph {number}"
    if opts.debug >= 1:
        _log.info("%s", report.describe_partition(f"braze plugin {title}", regions, torch_nodes))
        times = report.GraphTimes(title, regions)
        for node in fused.graph.nodes:
            if node.op == "call_function" and node.target in regions:
                node.target = times.timed_region(node.target)
        fused.recompile()
        return times.timed_graph(_boxed(fused))
    graph = _boxed(fused)
    entry = GraphCall(graph)
    direct = _direct(fused, regions)
    if direct is not None:  # once the one region is compiled, AOTAutograd calls it with no FX layer
        region = regions[0]
        if region.model is not None:
            entry.impl = direct(region, graph)
        else:
            region.on_ready.append(lambda: setattr(entry, "impl", direct(region, graph)))
    return entry


class GuardedCall:
    """Runs the braze graph while what it baked in still holds: each frozen weight is the same
    tensor at the same version (``_version`` counts in-place writes), each baked-in scalar has its
    value. Otherwise the call runs the graph in PyTorch, and braze says so once."""

    _boxed_call = True

    def __init__(self, entry, weights: list, scalars: list, eager):
        self.entry, self.eager = entry, eager
        self.w_index = tuple(i for i, _, _ in weights)
        self.w_tensors = tuple(t for _, t, _ in weights)
        self.w_versions = [v for _, _, v in weights]
        self.s_index = tuple(i for i, _ in scalars)
        self.s_values = [v for _, v in scalars]

    def __call__(self, args):
        if self.w_index:
            ws = [args[i] for i in self.w_index]
            if not all(map(operator.is_, ws, self.w_tensors)) or list(map(_VERSION, ws)) != self.w_versions:
                report.warn_once("weight-changed", "a weight or buffer braze compiled in as a constant was replaced "
                                 "or changed in place; calls run in PyTorch from now on: call "
                                 "torch._dynamo.reset() to compile again with the new weights")
                return self.eager(args)
        if self.s_index and [args[i].item() for i in self.s_index] != self.s_values:
            report.warn_once("scalar-changed", "a Python float braze compiled in as a constant (a module attribute "
                             "such as eps or a scale) changed value; those calls run in PyTorch: call "
                             "torch._dynamo.reset() to compile again with the new value")
            return self.eager(args)
        return self.entry(args)


_VERSION = operator.attrgetter("_version")


class GraphCall:
    """The boxed callable AOTAutograd keeps; its implementation may switch once, to the direct call."""

    _boxed_call = True
    __slots__ = ("impl",)

    def __init__(self, impl):
        self.impl = impl

    def __call__(self, args):
        return self.impl(args)


_counter = itertools.count()


def _boxed(gm):
    fwd = gm.forward

    def call(args):
        return fwd(*args)
    call._boxed_call = True
    return call


def _direct(gm, regions):
    """For a graph that is one braze region and nothing else: a maker of the call without the FX
    layer, from AOTAutograd's arguments straight to the native entry; else None."""
    import torch
    if len(regions) != 1:
        return None
    places, body, out = [], [], None
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            places.append(n)
        elif n.op == "output":
            out = n
        else:
            body.append(n)
    region = regions[0]
    node = next((n for n in body if n.target is region), None)
    if node is None or any(n is not node and not (n.target is operator.getitem and n.args[0] is node)
                           for n in body):
        return None
    results = out.args[0]
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    if not all(isinstance(r, torch.fx.Node) for r in results):  # a backward's None gradients
        return None
    single = not any(n.target is operator.getitem for n in body)
    if single and results != [node]:
        return None
    if not single and [r.args[1] if r.target is operator.getitem and r.args[0] is node else None
                       for r in results] != list(range(len(results))):
        return None
    args = [node.args[i] for i in region.arg_index]
    if not args or not all(a in places for a in args):
        return None
    index = [places.index(a) for a in args]
    # a pinned integer's test (Region.pin_ok) reads all the region's arguments
    region_args = [places.index(a) for a in node.args] if all(a in places for a in node.args) else None
    if region.pin_ok is not None and region_args is None:
        return None

    def make(region, graph):
        """The direct call; a call the library fails, or one whose integer arguments are not those
        its library was built for, runs ``graph`` (the FX layer, whose region call then runs in
        PyTorch and says why)."""
        main, pin_ok = region.tensors, region.pin_ok
        pick = operator.itemgetter(*index)
        if len(index) == 1:
            fast = (lambda args: (main(pick(args)),)) if single else (lambda args: main(pick(args)))
        else:
            fast = (lambda args: (main(*pick(args)),)) if single else (lambda args: main(*pick(args)))

        def call(args):
            if pin_ok is not None and not pin_ok([args[i] for i in region_args]):
                return graph(args)
            try:
                return fast(args)
            except Exception:  # noqa: BLE001 -- the region's own call says why, and runs PyTorch
                return graph(args)
        call._boxed_call = True
        return call
    return make
