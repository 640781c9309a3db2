"""A target's pipeline, graph to C, as one list of named stages run by one driver.

``pipeline_for(target)`` is that list (``Stage``: a name, a kind, a function), and
``stage_names(target)`` its names in order:

* graph passes (``GRAPH_PASSES``, ``Module -> Module``): clean-up, fusion, library
  offload, memory planning. Every decision is written into the IR, so the text
  after any pass is the whole state.
* ``lower``: each generated group becomes a loop-IR kernel (``lower_kernels``).
* kernel stages (``Kernel -> Kernel``, on every kernel): the schedule, the CPU's
  (``braze.schedule.KERNEL_STAGES``) or a CUDA target's (``schedule/gpu.py``).
* ``emit``: the host C and every kernel's C (``codegen.host.HostGen``).

``run_pipeline`` runs the graph passes; ``compile_to_c`` runs all of it;
``resume_c`` continues from a stage file of a ``BRAZE_DUMP`` directory and gives
the same C. Instruments (braze/instruments.py) hook every stage; the options
choose the default ones: ``Verify`` at ``debug >= 1``, the fusion log, ``Dump``
when a dump directory is set.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Callable, Sequence

from . import log as _logging
from .errors import BrazeError, BrazeWarning
from .instruments import Instrument, LogReports, PassTimer, PrintAfter, RuleCounter, Verify
from .ir.graph import Module
from .options import Options
from .passes import (assign_memory, canonicalize, channels_last, constant_fold, copy_module, cse, dce, decompose,
                     fuse, hoist_casts, precision, recognize_patterns)
from .passes.node_classes import CALL_KINDS
from .passes.offload import offload
from .passes.common import top_functions
from .target import is_cuda
from .tune.dispatch import dispatch

Pass = Callable[[Module], Module]


@dataclasses.dataclass(frozen=True)
class Stage:
    """One stage of a target's pipeline. ``kind`` says what it maps: ``graph`` a Module to a Module
    (or a Module and its log), ``lower`` a Module to Kernels, ``kernel`` one Kernel to another (run
    on each), ``emit`` the Module and its Kernels to the NativeSource. What a stage file of a dump
    holds follows from it (``DUMP_SUFFIX``)."""
    name: str
    kind: str
    fn: Callable


DUMP_SUFFIX = {"graph": "braze", "lower": "loop", "kernel": "loop", "emit": "c"}

_log = _logging.get("pipeline")

# canonicalize first so folding and CSE see the simplest form; channels_last after
# batch norms are folded into convs (its permute pairs cancel in the next canonicalize);
# decompose after the clean-up (sdpa's pieces then get canonicalized and CSE'd: one mask
# per model, not one per layer); precision after decompose (attention's products are matmuls
# by then), its casts of constant weights folded right after, then its casts to 16 bits moved
# above relus and pools (hoist_casts: on CSE's one cast per value) so products store 16 bits; fuse, then offload the library
# calls' post-ops, pick each product's kernel per range of M (braze/tune: the default rule, or the tuning
# database's), drop what offload made dead, and plan the arena.
GRAPH_PASSES: list[Pass] = [canonicalize, constant_fold, cse, dce, recognize_patterns, channels_last, decompose,
                            precision, canonicalize, constant_fold, cse, hoist_casts, dce, fuse, offload, dispatch,
                            dce, assign_memory]


def _cpu_stages():
    from .schedule import KERNEL_STAGES
    return KERNEL_STAGES


def _gpu_stages():
    from .schedule.gpu import GPU_STAGES
    return GPU_STAGES


# each target kind's schedule: a new target adds its entry (and its host part, codegen/host.py's HOSTS)
KERNEL_STAGES_OF = {"cpu": _cpu_stages, "cuda": _gpu_stages}


def kernel_stages(target=None) -> list:
    """The schedule stages of the target's kind (None: the CPU), run on every kernel after
    ``lower`` (``lower_kernels``)."""
    return list(KERNEL_STAGES_OF[getattr(target, "kind", "cpu")]())


def emit(module, kernels, isa, profile: bool = False, weight_copies: bool = True):
    from .codegen.host import HostGen
    return HostGen(module, kernels, isa, profile=profile, weight_copies=weight_copies).generate()


def pipeline_for(target=None) -> list[Stage]:
    """The target's pipeline (None: the CPU's), every stage in order: the graph passes, ``lower``,
    its kernel stages, ``emit``. A new target adds its kernel stages to ``KERNEL_STAGES_OF``."""
    return [*(Stage(pass_name(p), "graph", p) for p in GRAPH_PASSES), Stage("lower", "lower", lower_kernels),
            *(Stage(pass_name(k), "kernel", k) for k in kernel_stages(target)), Stage("emit", "emit", emit)]


def stage_names(target=None) -> list[str]:
    """Every stage of the target's pipeline, in order (the ``NN_`` numbers of a dump count from 1)."""
    return [st.name for st in pipeline_for(target)]


def pass_name(p) -> str:
    return getattr(p, "__name__", type(p).__name__)


class Kernels(dict):
    """callee name -> loop-IR Kernel; ``str()`` is every kernel's text, one after another."""

    def __str__(self):
        return "\n\n".join(str(k) for k in self.values()) + "\n"


def default_instruments(opts: Options) -> list[Instrument]:
    """The instruments the options ask for: verify at debug >= 1; the fusion log and the rule
    hit counts (shown at debug >= 2); the dump."""
    out: list[Instrument] = [Verify()] if opts.debug >= 1 else []
    out.append(LogReports())
    if opts.debug >= 2:
        out.append(RuleCounter())
    if opts.dump_dir:
        from .dump import Dump
        out.append(Dump(opts.dump_dir))
    return out


def _hooks(opts: Options | None, debug: int | None, instruments) -> tuple[Options, list[Instrument]]:
    opts = opts if opts is not None else Options.from_env()
    if debug is not None:
        opts = opts.replace(debug=debug)
    _logging.enable_debug_output(opts.debug)
    return opts, default_instruments(opts) + list(instruments)


def _run(stages: Sequence[Stage], first: int, m: Module, kernels, isa, opts: Options, hooks):
    """``stages``, numbered from ``first`` (1-based, over the whole pipeline), with the hooks
    around each: (the module, the kernels, the NativeSource), each None until a stage makes it."""
    native = None
    for i, st in enumerate(stages, first):
        ir_in = m if st.kind in ("graph", "lower") else kernels
        for h in hooks:
            h.before(i, st.name, ir_in)
        log = None
        try:
            if st.kind == "graph":
                out = st.fn(m)
                if isinstance(out, tuple):  # a pass with a log: fuse
                    out, log = out
                m = out = m if out is None else out
            elif st.kind == "lower":
                kernels = out = st.fn(m)
            elif st.kind == "kernel":
                kernels = out = Kernels((key, st.fn(k)) for key, k in kernels.items())
            else:
                native = out = st.fn(m, kernels, isa, profile=opts.debug >= 3, weight_copies=opts.weight_copies)
        except BaseException:
            for h in hooks:
                h.abort(i, st.name)
            raise
        for h in hooks:
            h.after(i, st.name, out)
            if log is not None:
                h.report(i, st.name, log)
    return m, kernels, native


def run_pipeline(module: Module, passes: Sequence[Pass] | None = None, debug: int | None = None,
                 options: Options | None = None, copy: bool = True,
                 instruments: Sequence[Instrument] = ()) -> Module:
    """The graph passes (``GRAPH_PASSES`` by default) on a copy of ``module``."""
    opts, hooks = _hooks(options, debug, instruments)
    m = copy_module(module) if copy else module
    for h in hooks:
        h.start(m)
    stages = [Stage(pass_name(p), "graph", p) for p in (GRAPH_PASSES if passes is None else passes)]
    m, _, _ = _run(stages, 1, m, None, None, opts, hooks)
    for h in hooks:
        h.finish(m)
    return m


def lower_kernels(module: Module) -> Kernels:
    """One loop-IR kernel per generated group (every fused node a library or a header does not
    run: ``node_classes.CALL_KINDS``), in call order."""
    from .ir.loop import kernel_names
    from .lowering import lower_function
    out = Kernels()
    for f in top_functions(module):
        for n in f.nodes:
            callee = n.attrs.get("callee") if n.op == "fused" else None
            if callee is None or n.attrs.get("kind") in CALL_KINDS or callee in out:
                continue
            with kernel_names():
                k = lower_function(module.functions[callee], module, f"k_{callee}")
            out[callee] = dataclasses.replace(k, in_place=_writes_over_an_input(n))
    return out


def _writes_over_an_input(n) -> bool:
    """Whether memory planning put one of the fused node's outputs where one of its inputs was."""
    outs = {str(at) for at in n.attrs.get("arena") or () if at != -1}
    for x in n.inputs:
        p = x.producer
        if p is not None and p.op == "fused" and p.attrs.get("arena") is not None:
            if str(p.attrs["arena"][p.outputs.index(x)]) in outs:
                return True
    return False


def compile_to_c(module: Module, isa, options: Options | None = None, copy: bool = True,
                 instruments: Sequence[Instrument] = ()):
    """Every stage: the module's ``NativeSource`` (C and entry list) and the
    module after the graph passes."""
    opts, hooks = _hooks(options, None, instruments)
    m = copy_module(module) if copy else module
    m.precision = target_precision(opts.precision, isa, opts.precision_keep)
    m.tuning = tuning_block(opts, isa)
    for h in hooks:
        h.start(m)
    return _finish(m, None, 1, isa, opts, hooks)


def target_precision(policy: str, isa, keep: tuple[str, ...] = ()) -> dict:
    """The module's ``precision`` block for this policy on this CPU (passes/precision.py). A 16-bit
    policy whose products would not be faster here (``policy_pays``) compiles float32, with a warning."""
    from .passes.precision import POLICY_FEATURES, library_dtypes, policy_pays
    library = library_dtypes(isa.host_features)
    if not policy_pays(policy, isa.host_features):
        warnings.warn(BrazeWarning(f"precision={policy!r}: this CPU has no {POLICY_FEATURES[policy][1]}, so its "
                                   f"{policy} GEMMs and convolutions would not be faster than float32; compiling "
                                   f"float32"))
        policy = "fp32"
    out = {"policy": policy, "library": library}
    if keep and policy != "fp32":
        out["keep"] = tuple(keep)
    return out


def kernel_rules(isa) -> str:
    """The default dispatch rules of the helper built for ``isa`` (braze/tune/products.py's RULES):
    "avx2" where it has AVX2 and FMA but not AVX-512 (braze_dnnl_smallm_avx2.c), "amx" at AVX-512 on
    a CPU with AMX-BF16 (oneDNN's bfloat16 products run on its tiles there), else ""."""
    if getattr(isa, "kind", "cpu") != "cpu":
        return ""
    if isa.name == "avx2" and "fma" in isa.features:
        return "avx2"
    return "amx" if isa.name == "avx512" and "amx_bf16" in isa.host_features else ""


def tuning_block(opts: Options, isa) -> dict:
    """The module's ``tuning`` block for these options (braze/tune/dispatch.py): the helper's
    default ``rules`` where they are not the usual ones (kernel_rules), and no more (the default
    rules) with ``tune="off"``, on a CUDA target, and at a ``cpu-x86:LEVEL`` below the host's ISA
    (the database holds this host's measurements, made with kernels built for its ISA)."""
    rules = {"rules": r} if (r := kernel_rules(isa)) else {}
    if opts.tune == "off" or is_cuda(isa):
        return rules
    from .codegen.isa import host_isa
    host = host_isa().name
    if isa.name != host:
        _log.info("tuning: the default rules, as %s is not this host's ISA (%s), which the tuning database "
                  "measures", isa.name, host)
        return rules
    from .runtime.compiler import resolve_cache_dir
    from .tune.db import db_path, resolved_threads
    db = Path(opts.tune_db).expanduser().resolve() if opts.tune_db else db_path(opts.cache_dir)
    out = {"mode": opts.tune, "db": str(db), "cache": str(resolve_cache_dir(opts.cache_dir)),
           "threads": resolved_threads(opts.threads), "budget_s": int(opts.tune_budget_s), **rules}
    if opts.tune_shapes:
        out["shapes"] = str(Path(opts.tune_shapes).expanduser().resolve())
    return out


def _finish(m: Module, kernels: Kernels | None, index: int, isa, opts: Options, hooks):
    """From stage ``index`` (1-based, over the whole pipeline) to the C. (Each stage's output
    depends on its input only: a kernel stage numbers new names past the kernel's, so a resumed
    compile names them the same.)"""
    m, _, native = _run(pipeline_for(isa)[index - 1:], index, m, kernels, isa, opts, hooks)
    for h in hooks:
        h.finish(native)
    return native, m


def recompile_c(module: Module, stage: str, isa, options: Options | None = None,
                instruments: Sequence[Instrument] = ()):
    """Run graph stage ``stage`` (``dispatch`` or later) and every stage after it on ``module``, the
    final module of a compile (as an artifact keeps it): the ``NativeSource`` and the module. The
    tuning block comes from ``options``, so ``recompile_c(m, "dispatch", ...)`` makes the dispatch
    tables again; with the same database it gives the same C (the stages from ``dispatch`` on leave
    a module they have seen as it was: tests/deploy/test_retune.py)."""
    names = [st.name for st in pipeline_for(isa) if st.kind == "graph"]
    first = names.index("dispatch")
    again = names[first:]  # the earlier stages rewrite what they see: they run once
    if stage not in again:
        raise BrazeError(f"graph stage {stage!r} cannot run again on a compiled module",
                         hint=f"one of {', '.join(dict.fromkeys(again))}")
    opts, hooks = _hooks(options, None, instruments)
    module.tuning = tuning_block(opts, isa)
    for h in hooks:
        h.start(module)
    return _finish(module, None, first + again.index(stage) + 1, isa, opts, hooks)


def resumed_target(dumped: dict, isa):
    """The target a dump resumes for, from its ``target.json`` (``dump.read_target``): the CUDA
    target it was dumped for, else ``isa``."""
    name = str(dumped.get("isa", ""))
    if name.startswith("cuda:"):
        from .target import parse_target
        return parse_target(name)
    return isa


def resume_c(path, isa, options: Options | None = None, instruments: Sequence[Instrument] = ()):
    """Continue compiling from a stage file of a ``BRAZE_DUMP`` directory (``NN_<stage>.braze``
    or ``.loop``): the same ``NativeSource`` as the compile that wrote it, and the module."""
    from .dump import last_graph_stage, read_kernels, read_module, read_target, stage_of
    index, name, kind = stage_of(path)
    directory = Path(path).parent
    target = read_target(directory)
    isa = resumed_target(target, isa)
    stages = pipeline_for(isa)
    names = [st.name for st in stages]
    want_kind = DUMP_SUFFIX[stages[index - 1].kind] if 0 < index <= len(stages) else "braze"
    if not index <= len(names) or (index and names[index - 1] != name) or kind != want_kind:
        here = "00_input.braze" if index == 0 else \
            f"{index:02d}_{names[index - 1]}.{want_kind}" if index <= len(names) else "past the last stage"
        raise BrazeError(f"{path} is not a stage this braze can resume from (stage {index} is {here!r} here)",
                         hint="resume from a .braze or .loop file dumped by this version of braze")
    opts = options if options is not None else Options.from_env()
    if opts.dump_dir and Path(opts.dump_dir).resolve() == directory.resolve():
        opts = opts.replace(dump_dir=None)  # never overwrite the dump being resumed
    if target.get("isa") not in (None, isa.name):
        warnings.warn(BrazeWarning(f"{directory} was compiled for the {target['isa']} ISA and is resumed for "
                                   f"{isa.name}: the C will differ (resume with target='cpu-x86:{target['isa']}', "
                                   f"or BRAZE_ISA={target['isa']}, to match)"))
    opts, hooks = _hooks(opts.replace(debug=max(opts.debug, 3)) if target.get("profile") else opts, None,
                         instruments)
    if kind == "braze":
        m = read_module(path)
        kernels = None
    else:
        m = read_module(last_graph_stage(directory))
        kernels = Kernels((k.name[2:] if k.name.startswith("k_") else k.name, k) for k in read_kernels(path))
    for h in hooks:
        h.start(m)
    return _finish(m, kernels, index + 1, isa, opts, hooks)


__all__ = ["DUMP_SUFFIX", "GRAPH_PASSES", "Kernels", "Stage", "compile_to_c", "default_instruments", "emit",
           "kernel_stages", "lower_kernels", "pass_name", "pipeline_for", "recompile_c", "resume_c", "resumed_target",
           "run_pipeline", "stage_names", "Options", "Instrument", "Verify", "LogReports", "PassTimer", "PrintAfter",
           "RuleCounter"]
