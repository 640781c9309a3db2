"""The dynamo backend: options, AOTAutograd's lowering to ATen, and which weights are frozen."""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

from .. import log as _logging
from ..errors import BrazeError, BrazeWarning
from ..options import Options

_log = _logging.get("plugin")

OPTIONS = {
    "threads": "OpenMP threads of the native code (default: BRAZE_THREADS, else the runtime's)",
    "adapt_threads": "True: a call runs with fewer threads while other processes take the cores; "
                     "False (default): always 'threads' (BRAZE_ADAPT_THREADS; docs/threads.md)",
    "debug": "BRAZE_DEBUG level: 1 prints the partition and its time shares, 2 the fusion report, 3 each region's "
             "slowest kernels at exit",
    "dump": "a directory for every stage's text (graph IR, loop IR, C) and the fusion report (BRAZE_DUMP), "
            "one directory per region (forward0_fused_0, ...)",
    "cache_dir": "where compiled libraries are cached (BRAZE_CACHE_DIR)",
    "precision": "'fp32', 'bf16' or 'fp16': the dtype a float32 model's GEMMs, batched matmuls and convolutions "
                 "compute in (BRAZE_PRECISION; docs/precision.md)",
    "precision_keep": "op names or module paths whose products stay float32 under a 16-bit precision, e.g. "
                      "['lm_head', 'matmul'] (BRAZE_PRECISION_KEEP)",
    "tune": "'cached' (default), 'off', 'fast' or 'full': where each GEMM's kernel per range of rows comes from "
            "(BRAZE_TUNE; docs/tuning.md); it applies to constant weights, so to frozen ones (freeze=True)",
    "tune_budget_s": "seconds a 'fast' or 'full' compile may spend measuring (BRAZE_TUNE_BUDGET; default 600)",
    "freeze": "True bakes parameters and buffers in as constants (as inductor's freezing): faster, but the "
              "model must not change its weights after its first call (default False: weights are read at "
              "every call)",
    "rng": "'braze' (default): a training-mode dropout's mask comes from braze's counter-based generator, "
           "seeded from torch's (torch.manual_seed reproduces a run, not eager's masks); 'torch': dropout runs "
           "in PyTorch, the same masks as eager",
    "backward": "False leaves a training step's backward graph to PyTorch (default True: braze compiles what "
                "it supports of it, as of the forward)",
}


@functools.cache
def _log_weight_checks() -> None:
    """Once: how this process finds live weights unchanged between calls (docs/gemm.md)."""
    from ..extern import onednn
    try:
        on = onednn.available() and onednn.write_tracking()["on"]
    except Exception as e:  # noqa: BLE001 -- a debug line must not fail the compile
        _log.info("braze plugin: live weights: could not ask the oneDNN helper (%s)", e)
        return
    _log.info("braze plugin: live weights: %s", "checked from the kernel's page tables (write tracking); GEMMs run "
              "on packed copies while unwritten" if on else "write tracking is off or unavailable (Linux >= 6.7 "
              "with userfaultfd, BRAZE_WRITE_TRACKING); GEMMs read the plain weight, convolutions hash theirs")


class PluginOptions(NamedTuple):
    opts: Options
    freeze: bool = False  # weights baked in as constants
    backward: bool = True  # braze compiles the backward graph
    rng: str = "braze"  # who draws dropout's masks: "braze" or "torch"


def plugin_options(options: dict | None) -> PluginOptions:
    """``torch.compile(..., options={...})`` over the environment's settings: the compile
    options, whether weights are frozen, and whether braze compiles the backward."""
    opts = Options.from_env()
    if not options:
        return PluginOptions(opts)
    if not isinstance(options, dict):
        raise BrazeError(f"torch.compile options for braze must be a dict, got {type(options).__name__}",
                         hint="options={'threads': 2}")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise BrazeError(f"unknown braze option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}",
                         hint="braze takes: " + "; ".join(f"{k}: {v}" for k, v in OPTIONS.items()))
    changes = {}
    for key in ("threads", "debug"):
        if key in options:
            v = options[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if key == "threads" else 0):
                raise BrazeError(f"braze option {key!r} must be an integer >= {1 if key == 'threads' else 0}, "
                                 f"got {v!r}")
            changes[key] = v
    if "tune_budget_s" in options:
        v = options["tune_budget_s"]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise BrazeError(f"braze option 'tune_budget_s' must be a positive number of seconds, got {v!r}")
        changes["tune_budget_s"] = float(v)
    for key, field in (("dump", "dump_dir"), ("cache_dir", "cache_dir"), ("precision", "precision"),
                       ("tune", "tune")):
        if options.get(key) is not None:
            changes[field] = str(options[key])
    if "adapt_threads" in options:
        if not isinstance(options["adapt_threads"], bool):
            raise BrazeError(f"braze option 'adapt_threads' must be True or False, got {options['adapt_threads']!r}")
        changes["adapt_threads"] = options["adapt_threads"]
    if options.get("precision_keep") is not None:
        keep = options["precision_keep"]
        changes["precision_keep"] = (keep,) if isinstance(keep, str) else tuple(keep)
    flags = {}
    for key in ("freeze", "backward"):
        v = flags[key] = options.get(key, PluginOptions._field_defaults[key])
        if not isinstance(v, bool):
            raise BrazeError(f"braze option {key!r} must be True or False, got {v!r}")
    rng = options.get("rng", PluginOptions._field_defaults["rng"])
    if rng not in ("braze", "torch"):
        raise BrazeError(f"braze option 'rng' must be 'braze' or 'torch', got {rng!r}")
    return PluginOptions(opts.replace(**changes), rng=rng, **flags)


@functools.cache
def decompositions() -> dict:
    """torch's core-ATen decompositions of the ops braze has no converter for (as ``braze.compile``
    decomposes an exported program): ops braze supports whole stay whole."""
    import torch
    from ..frontend.torch.aten import is_supported
    table = torch.export.default_decompositions()
    return {op: fn for op, fn in table.items() if not is_supported(op)}


def braze_backend(gm, example_inputs, options: dict | None = None, mode: str | None = None):
    """dynamo hands over ``gm`` and its real inputs; AOTAutograd functionalizes and decomposes it,
    then ``partition.compile_graph`` compiles what braze supports. Whatever braze cannot do with
    a graph, PyTorch runs it: no exception leaves the backend but a bad option's."""
    import torch
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    from . import saved_layout
    from .partition import compile_graph, in_torch
    from .rng import braze_dropout
    from .strides import channels_last_inputs

    opts, freeze, compile_backward, rng = plugin_options(options)
    _logging.enable_debug_output(opts.debug)
    if mode not in (None, "default"):
        warnings.warn(BrazeWarning(f"torch.compile mode={mode!r} has no meaning for braze; it is ignored"),
                      stacklevel=2)
    real = [x if isinstance(x, torch.Tensor) else None for x in example_inputs]
    try:
        opts = device_options(real, opts)
    except Exception as e:  # noqa: BLE001 -- no device braze serves, or no driver: PyTorch runs the graph
        in_torch(gm, e)
        return gm.forward
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    names = [weight_name(n, i) for i, n in enumerate(places)]
    scalars = {i for i, n in enumerate(places) if getattr(n.meta.get("grapharg"), "pass_arg_as_tensor", False)}
    # a float the caller passes (a temperature, a scale) is an input read at each call: baked in, a
    # new value at each call would run the graph in PyTorch. Attributes and globals (eps, math.pi)
    # rarely change, and baked in they fold and join patterns
    scalars = {i for i in scalars if not _is_argument(places[i])}

    speculative = [False]  # the forward's, for its backward
    saved_nhwc: set[str] = set()  # the saved activations the forward returns channels-last, for the backward
    # a training step's graphs hand their large outputs to torch and drop them in the other graph
    # (activations in the backward, gradients at zero_grad): a pool would hold them through it
    # (and no packed copies of weights that every step writes)
    train_opts = opts.replace(reuse_outputs=False, weight_copies=False)

    def lower(g, weights: bool, label: str):
        try:
            with unset_fake_temporarily():  # braze reads the real weights
                frozen, checks = _frozen_inputs(g, real, names, scalars, weights)
                real.clear()  # what braze keeps is in ``frozen``; the activations are not needed
                # a training step's graphs run again at every step of their shape: one fixed to
                # batch 1 compiles now, so that no library is built once training is under way
                speculative[0] = (label == "inference" and maybe_specialised(g)) or retraced_frame()
                if rng == "braze":
                    braze_dropout(g)
                if label == "forward":
                    _keep_saved_activations()
                    saved_nhwc.update(saved_layout.forward(g))
                elif label == "inference" and not opts.target.startswith("cuda"):
                    channels_last_inputs(g, frozen)
                return compile_graph(g, frozen, opts if label == "inference" else train_opts,
                                     speculative=speculative[0], checks=checks, label=label)
        except Exception as e:  # noqa: BLE001 -- the user's program must not fail for braze's sake
            if dynamo_control(e):
                raise
            return in_torch(g, e)

    def inference(g, fake_args):
        if not freeze and opts.debug >= 1:
            _log_weight_checks()
        return lower(g, weights=freeze, label="inference")

    def forward(g, fake_args):  # training: weights stay inputs, for the optimizer to change
        return lower(g, weights=False, label="forward")

    def backward(g, fake_args):
        """Compiled at the first ``.backward()``: the saved activations and the incoming gradients
        are its inputs (no weights), its outputs the gradients; its sizes are the forward's
        symbols, so one compile serves every shape the forward does."""
        if not compile_backward:
            return make_boxed_func(g.forward)
        try:
            saved_layout.backward(g, saved_nhwc)
            entry = compile_graph(g, {}, train_opts, speculative=speculative[0], label="backward")
        except Exception as e:  # noqa: BLE001 -- as the forward: PyTorch runs what braze cannot
            if dynamo_control(e):
                raise
            return in_torch(g, e)

        def call(args):  # AOTAutograd wraps the backward in dynamo.disable, which keeps a function's
            return entry(args)  # attributes (_boxed_call) but not a class's
        call._boxed_call = True
        return call

    from torch._functorch.partitioners import min_cut_rematerialization_partition
    try:
        # the min-cut partitioner saves fewer activations and recomputes cheap ones in the backward
        return aot_autograd(fw_compiler=forward, inference_compiler=inference, bw_compiler=backward,
                            partition_fn=min_cut_rematerialization_partition, decompositions=decompositions(),
                            keep_inference_input_mutations=False)(gm, example_inputs)
    except Exception as e:  # noqa: BLE001 -- AOTAutograd could not lower it: PyTorch runs the graph as traced
        if dynamo_control(e):
            raise
        in_torch(gm, e)
        return gm.forward


def _keep_saved_activations() -> None:
    """Withdraws AOTAutograd's donation of the saved activations to the backward, for the graph
    being compiled. Donated, they may be overwritten by the backward, so PyTorch refuses
    ``backward(retain_graph=True)`` (a RuntimeError eager never raises: two losses through one
    graph, a GAN's discriminator step). braze's backward only reads its inputs, so the donation
    gains nothing. The donation is recorded on the graph's metadata, which the TracingContext
    holds while the forward compiles."""
    import torch
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    if meta is not None and hasattr(meta, "bw_donated_idxs"):
        meta.bw_donated_idxs = []


def device_options(real: list, opts: Options) -> Options:
    """The options for a graph's device: a graph whose tensors are on cuda:0 compiles for this
    machine's GPU (``target="cuda"``, unless the options name a CUDA arch already); a CPU graph
    keeps the options' target (``BRAZE_TARGET=cuda:sm_90`` runs it on the GPU, its tensors copied
    there and back). A BrazeError for any other device, or when no driver answers for cuda:0:
    PyTorch runs that graph."""
    from ..target import parse_target
    devices = {x.device for x in real if x is not None and x.device.type != "cpu"}
    if not devices:
        return opts
    # the first line is what the plug-in's warning shows: each says what to do
    if len(devices) > 1:
        raise BrazeError(f"the graph's tensors are on {', '.join(sorted(map(str, devices)))}; braze compiles a "
                         "graph for one device: keep the model and its inputs on one")
    device = devices.pop()
    if device.type != "cuda":
        raise BrazeError(f"the graph's tensors are on {device}; braze compiles for the CPU and for NVIDIA GPUs: "
                         "move the model and its inputs to one of those")
    if device.index not in (None, 0):  # braze_cuda_rt.h opens GPU 0
        raise BrazeError(f"the graph's tensors are on {device}; braze runs on cuda:0 for now: make that GPU the "
                         "first visible one (CUDA_VISIBLE_DEVICES)")
    if opts.target.startswith("cuda:"):
        return opts
    return opts.replace(target=parse_target("cuda").name)


def dynamo_control(e: Exception) -> bool:
    """dynamo's own control flow, raised through a backend on purpose (restart the analysis with
    other settings, skip the frame): never braze's to handle."""
    from torch._dynamo import exc
    return isinstance(e, (exc.RestartAnalysis, exc.SkipFrame, exc.ResetRequired))


RETRACES = 2  # from this many graphs of one frame on, a graph compiles on its second call


def retraced_frame() -> bool:
    """Whether dynamo has traced this frame RETRACES times before: a model whose Python branches
    on sizes (a scan unrolled per sequence length) gets a new graph for many shapes, and a graph
    used once is not worth a C compile."""
    from torch._guards import CompileContext
    cid = CompileContext.current_compile_id()
    return cid is not None and (cid.frame_compile_id or 0) >= RETRACES


def maybe_specialised(g) -> bool:
    """Whether dynamo may have fixed this graph's sizes for one call: a user input (not a weight or
    buffer) has a dim of 0 or 1 (dynamo's 0/1 specialisation), or no user input has a symbolic dim
    (automatic-dynamic's first graph). braze then compiles an inference graph's regions on their
    second call, after looking for a symbolic library that serves them (``region.Region``)."""
    import torch
    from torch._guards import TracingContext
    meta = getattr(TracingContext.try_get(), "fw_metadata", None)
    static = set(getattr(meta, "static_input_indices", ()) or ())
    places = [n for n in g.graph.nodes if n.op == "placeholder"]
    dims = [d for i, p in enumerate(places) if i not in static and isinstance(p.meta.get("val"), torch.Tensor)
            for d in p.meta["val"].shape]
    if not dims:
        return False
    return any(type(d) is int and d in (0, 1) for d in dims) or not any(isinstance(d, torch.SymInt) for d in dims)


def weight_name(node, i: int) -> str:
    """A weight's name from where dynamo found it: ``L['self']._modules['fc']._parameters['weight']``
    -> ``fc.weight``; stable across the graphs of one model, so equal graphs compare equal."""
    import re
    ga = node.meta.get("grapharg")
    try:
        text = ga.source.name() if callable(ga.source.name) else ga.source.name
    except Exception:
        return node.name
    parts = re.findall(r"\['([^']+)'\]|\.(\w+)", text)
    keep = [a or b for a, b in parts if (a or b) not in ("self", "_modules", "_parameters", "_buffers", "L", "G")]
    return ".".join(keep) or node.name


def _is_argument(place) -> bool:
    """Whether dynamo's placeholder ``place`` is a local of the compiled frame itself (its
    arguments), not an attribute or a global reached from one."""
    from torch._dynamo.source import LocalSource
    return isinstance(getattr(place.meta.get("grapharg"), "source", None), LocalSource)


def _frozen_inputs(g, real: list, names: list[str], scalars: set[int], weights: bool) -> tuple[dict, tuple]:
    """What braze bakes in as constants: placeholder name -> (name, tensor); and the checks that
    keep that honest (``partition.GuardedCall``): (input index, the tensor, its version) per
    weight, (input index, value) per scalar.

    - Weights (``weights``: the ``freeze`` option): dynamo's static inputs (parameters, buffers)
      that the graph neither mutates nor returns a view of, as inductor's freezing does. Each
      call checks that every one is the same tensor at the same version; a weight replaced or
      changed in place since makes the graph run in PyTorch until ``torch._dynamo.reset()`` and
      a new compile. Without ``freeze``, weights are inputs like any other, read at every call.
    - Python floats dynamo passes as 0-d tensors without guarding their value, from attributes
      and globals (``eps``, ``scaling``, ``math.pi``; not the frame's arguments). Baked in, they
      fold and join patterns (GELU's tanh form); each call compares them with their baked values.
    """
    import math

    import torch
    from torch._functorch._aot_autograd.schemas import MutationType
    from torch._guards import TracingContext
    ctx = TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None)
    places = [n for n in g.graph.nodes if n.op == "placeholder"]
    if meta is None or len(places) != len(real):
        _log.info("braze plugin: inputs do not line up with dynamo's (%d vs %d); nothing is frozen",
                  len(places), len(real))
        return {}, ([], [])
    keep = {i for i, m in enumerate(meta.input_info)
            if m.mutation_type in (MutationType.MUTATED_IN_GRAPH, MutationType.MUTATED_OUT_GRAPH)}
    keep |= {o.base_idx for o in meta.output_info if o.base_idx is not None}
    frozen, weight_checks, scalar_checks = {}, [], []
    for i in sorted(scalars - keep):
        t = real[i]
        if t is not None and t.dim() == 0 and t.dtype.is_floating_point and not math.isnan(t.item()):
            frozen[places[i].name] = (names[i], t.clone())
            scalar_checks.append((i, t.item()))
    for i in (meta.static_input_indices if weights else ()):
        t, fake = real[i], places[i].meta.get("val")
        shape = tuple(getattr(fake, "shape", ()))
        if i in keep or not isinstance(t, torch.Tensor) or not all(type(d) is int for d in shape) \
                or shape != tuple(t.shape) or t.dtype != fake.dtype:
            continue
        frozen[places[i].name] = (names[i] if i < len(names) else places[i].name, t)
        weight_checks.append((i, t, t._version))
    return frozen, (weight_checks, scalar_checks)
