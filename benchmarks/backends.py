"""The backends the harness compares. Each one runs inside its own worker process.

A backend turns a zoo model into a ``Prepared`` object:

- ``convert(inputs)``: the zoo's torch input tensors as the backend's own
  argument objects (numpy arrays, TVM tensors); not timed, like a server
  that already holds its inputs in the backend's format;
- ``run(args)``: one inference (timed);
- ``first_output(out)``: the first output as a NumPy array (for the error
  check; not timed).

``compile_counts()`` gives the backend's counters of compilations done so far
in this process, by name (empty where the idea does not apply); the harness
reports how much each grew up to the first result and after the first shape
(recompiles). The first counter is the pair's ``recompiles``.

Importing this module is cheap: every backend imports its libraries inside
its methods, so the parent process never loads torch, ORT or TVM.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable


class Unavailable(Exception):
    """The backend cannot run here (not installed, not built yet, cannot handle the model)."""


@dataclass
class Prepared:
    run: Callable[[Any], Any]
    convert: Callable[[tuple], Any] = lambda inputs: inputs
    first_output: Callable[[Any], Any] = None  # out -> np.ndarray
    info: dict = field(default_factory=dict)  # extra facts for the results (e.g. TVM target)
    # () -> {name: running count}: what the backend counts of its own calls (braze: its teams)
    counters: Callable[[], dict] | None = None


def _torch_first_output(out):
    from braze.zoo import first_output
    return first_output(out).detach().numpy()


class Backend:
    name: str = ""
    label: str = ""
    description: str = ""
    warm_cache: bool = False  # a second process with the same cache dir prepares faster
    min_warmups: int = 1  # untimed calls per shape before the timed runs (the first call counts)
    default: bool = True  # part of the default --backends list
    precision: str = "fp32"  # what the row computes in: "fp32", "bf16 policy", "bf16 model", ...
    env: dict = {}  # set in the environment its process starts with (benchmarks.interleaved's servers)

    def unavailable_reason(self) -> str | None:
        return None

    def prepare(self, zm, cache_dir: Path, threads: int) -> Prepared:
        raise NotImplementedError

    def compile_counts(self) -> dict[str, int]:
        return {}


# ---------------------------------------------------------------------------
# PyTorch eager
# ---------------------------------------------------------------------------


class Eager(Backend):
    name = "eager"
    label = "PyTorch eager"
    description = "the nn.Module called under torch.no_grad()"

    def prepare(self, zm, cache_dir, threads):
        import torch

        def run(args):
            with torch.no_grad():
                return zm.module(*args)
        return Prepared(run=run, first_output=_torch_first_output)


# ---------------------------------------------------------------------------
# torch.compile (inductor)
# ---------------------------------------------------------------------------


class Inductor(Backend):
    name = "inductor"
    label = "torch.compile"
    description = ("torch.compile(module, backend='inductor', dynamic=True) under torch.no_grad(); "
                   "compilation happens at the first call, so it is counted in the time to first result")
    warm_cache = True  # inductor's FX graph / AOTAutograd caches under TORCHINDUCTOR_CACHE_DIR
    freezing = False

    def prepare(self, zm, cache_dir, threads):
        import torch
        import torch._inductor.config as icfg

        icfg.freezing = self.freezing
        compiled = torch.compile(zm.module, backend="inductor", dynamic=True)

        def run(args):
            with torch.no_grad():
                return compiled(*args)
        return Prepared(run=run, first_output=_torch_first_output,
                        info={"freezing": self.freezing, "torch_compile": "backend=inductor, dynamic=True"})

    def compile_counts(self):
        return {"dynamo_graphs": _dynamo_graphs()}


def _dynamo_graphs() -> int:
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


class InductorFreezing(Inductor):
    name = "inductor-freezing"
    label = "torch.compile+freezing"
    description = "as 'inductor', with torch._inductor.config.freezing = True (weights folded as constants)"
    freezing = True


# ---------------------------------------------------------------------------
# ONNX Runtime
# ---------------------------------------------------------------------------


def _onnx_file(zm, cache_dir) -> tuple[Path, bool]:
    """The pair's .onnx (braze.zoo.export_onnx, dynamic dims), exported unless cached; (path, exported)."""
    from braze import zoo

    path = Path(cache_dir) / f"{zm.name}.onnx"
    if path.exists():
        return path, False
    tmp = path.with_suffix(".tmp.onnx")
    zoo.export_onnx(zm, tmp)
    os.replace(tmp, path)
    return path, True


class OnnxRuntime(Backend):
    name = "onnxruntime"
    label = "ONNX Runtime"
    description = ("braze.zoo.export_onnx (torch.onnx.export, dynamo, opset 18, dynamic dims), then an "
                   "InferenceSession on the CPU EP with ORT_ENABLE_ALL, intra_op_num_threads = threads, "
                   "inter_op_num_threads = 1; the .onnx file is the warm cache")
    warm_cache = True

    def unavailable_reason(self):
        try:
            import onnxruntime  # noqa: F401
        except ImportError as e:
            return f"onnxruntime is not installed ({e})"
        return None

    def prepare(self, zm, cache_dir, threads):
        import numpy as np
        import onnxruntime as ort

        path, exported = _onnx_file(zm, cache_dir)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self.configure(so)
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        missing = [n for n in names if n not in zm.input_names]
        if missing:
            raise RuntimeError(f"the ONNX model has inputs {names}, the zoo model {zm.input_names}")

        def convert(inputs):
            by_name = dict(zip(zm.input_names, inputs))
            return {n: np.ascontiguousarray(by_name[n].numpy()) for n in names}

        def run(feed):
            return sess.run(None, feed)
        return Prepared(run=run, convert=convert, first_output=lambda out: out[0],
                        info={"exported_onnx": exported, "onnx_inputs": names})

    def configure(self, so) -> None:
        """More session settings, for a variant."""


class OnnxRuntimeNoSpin(OnnxRuntime):
    name = "onnxruntime-nospin"
    label = "ONNX Runtime, spinning off"
    description = ("as 'onnxruntime', with session.intra_op.allow_spinning = 0: its threads block as soon as "
                   "they run out of work, so they take no CPU between calls (what a shared server sets)")
    default = False

    def configure(self, so):
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")


# ---------------------------------------------------------------------------
# OpenVINO
# ---------------------------------------------------------------------------


class OpenVINO(Backend):
    name = "openvino"
    label = "OpenVINO"
    description = ("the same .onnx as 'onnxruntime' -> openvino.Core().read_model (dynamic dims kept) -> "
                   "compile_model on the CPU plugin with INFERENCE_PRECISION_HINT = f32, INFERENCE_NUM_THREADS = "
                   "threads, PERFORMANCE_HINT = LATENCY; one infer request. The .onnx and OpenVINO's CACHE_DIR "
                   "blobs are the warm cache")
    warm_cache = True
    precision_hint = "f32"

    def unavailable_reason(self):
        try:
            import openvino  # noqa: F401
        except Exception as e:  # ImportError, or a broken native library
            return f"openvino is not installed or does not import: {type(e).__name__}: {e} (pip install openvino)"
        return None

    def prepare(self, zm, cache_dir, threads):
        import numpy as np
        import openvino as ov

        path, exported = _onnx_file(zm, cache_dir)
        ov_cache = Path(cache_dir) / f"openvino-{self.precision_hint or 'default'}"
        cached = ov_cache.is_dir() and any(ov_cache.iterdir())
        core = ov.Core()
        model = core.read_model(str(path))
        # the CPU plugin defaults to bf16 where the ISA has it: 'openvino' pins f32, 'openvino-default'
        # takes the default
        config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "CACHE_DIR": str(ov_cache)}
        if self.precision_hint:
            config["INFERENCE_PRECISION_HINT"] = self.precision_hint
        compiled = core.compile_model(model, "CPU", config)
        names = [i.get_any_name() for i in compiled.inputs]
        missing = [n for n in names if n not in zm.input_names]
        if missing:
            raise RuntimeError(f"the ONNX model has inputs {names}, the zoo model {zm.input_names}")
        req = compiled.create_infer_request()

        def convert(inputs):
            by_name = dict(zip(zm.input_names, inputs))
            return {n: np.ascontiguousarray(by_name[n].numpy()) for n in names}

        def run(feed):
            # share_inputs: no input copy, like ORT reading the NumPy buffers in place
            return req.infer(feed, share_inputs=True)
        precision = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        return Prepared(run=run, convert=convert, first_output=lambda out: out[0],
                        info={"exported_onnx": exported, "onnx_inputs": names, "ov_cache_hit": cached,
                              "input_shapes": [str(i.get_partial_shape()) for i in compiled.inputs],
                              "inference_precision": precision})


# ---------------------------------------------------------------------------
# TVM (Relax)
# ---------------------------------------------------------------------------


def _tvm_pipeline(target):
    """TVM's default CPU Relax pipeline plus its stock dlight CPU schedule rules (GEMV, Reduction)."""
    import tvm
    from tvm.relax.backend.cpu_generic import pipeline as cpu
    from tvm.s_tir import dlight as dl

    @tvm.transform.module_pass(opt_level=0)
    def _pipeline(mod, _ctx):
        with target:
            seq = tvm.transform.Sequential(
                cpu.library_dispatch_passes(target) + cpu.legalize_passes(target)
                + [dl.ApplyDefaultSchedule(dl.cpu.GEMV(), dl.cpu.Reduction())]
                + cpu.dataflow_lower_passes(target) + cpu.finalize_passes(target))
            return seq(mod)
    return _pipeline


class TVM(Backend):
    name = "tvm"
    label = "TVM (Relax)"
    description = ("apache-tvm wheel: torch.export (dynamic dims) -> tvm.relax.frontend.torch."
                   "from_exported_program (symbolic shapes kept; if that or the build fails, the .onnx through "
                   "tvm.relax.frontend.onnx.from_onnx) -> relax.build (tvm.compile) for "
                   "target llvm -mcpu=<detected> with TVM's default CPU Relax pipeline plus its dlight CPU "
                   "rules (GEMV, Reduction); no MetaSchedule tuning (it tunes static shapes only and takes "
                   "hours on 2 cores) -> relax.VirtualMachine. The exported .so is the warm cache")
    warm_cache = True

    def unavailable_reason(self):
        try:
            import tvm  # noqa: F401
            from tvm.relax.frontend.torch import from_exported_program  # noqa: F401
        except Exception as e:  # ImportError, or a broken native library
            return f"TVM is not installed or does not import: {type(e).__name__}: {e} (pip install apache-tvm)"
        return None

    def prepare(self, zm, cache_dir, threads):
        import tvm
        from tvm import relax

        mcpu = tvm.target.codegen.llvm_get_system_cpu()
        target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": threads})
        lib_path = Path(cache_dir) / f"{zm.name}.tvm.so"
        info = {"target": str(target), "mcpu": mcpu}
        if lib_path.exists():
            ex = tvm.runtime.load_module(str(lib_path))
            info.update(loaded_from_cache=True, frontend=lib_path.with_suffix(".frontend").read_text())
        else:
            ex, info["frontend"] = self._build(zm, target, cache_dir)
            lib_path.with_suffix(".frontend").write_text(info["frontend"])
            tmp = lib_path.with_suffix(".tmp.so")
            ex.export_library(str(tmp))
            os.replace(tmp, lib_path)
            info["loaded_from_cache"] = False
        dev = tvm.cpu()
        vm = relax.VirtualMachine(ex, dev)
        main = vm["main"]

        def convert(inputs):
            return [tvm.runtime.tensor(x.numpy(), dev) for x in inputs]

        def run(args):
            return main(*args)

        def first_output(out):
            while not hasattr(out, "numpy"):
                out = out[0]
            return out.numpy()
        return Prepared(run=run, convert=convert, first_output=first_output, info=info)

    def _build(self, zm, target, cache_dir):
        """PyTorch frontend first; if it (or relax.build) fails, the ONNX frontend; both reasons if both fail."""
        import tvm

        from braze import zoo
        reasons = []
        mod = None
        try:
            from tvm.relax.frontend.torch import from_exported_program
            mod = from_exported_program(zoo.export(zm), keep_params_as_input=False)
            return tvm.compile(mod, target=target, relax_pipeline=_tvm_pipeline(target)), "from_exported_program"
        except Exception as e:
            stage = "relax.build" if mod is not None else "from_exported_program"
            reasons.append(f"PyTorch frontend: {stage} failed: {type(e).__name__}: {_short(e, 300)}")
        mod = None
        try:
            import onnx
            from tvm.relax.frontend.onnx import from_onnx
            path = Path(cache_dir) / f"{zm.name}.onnx"
            if not path.exists():
                zoo.export_onnx(zm, path)
            mod = from_onnx(onnx.load(str(path)), keep_params_in_input=False)
            return tvm.compile(mod, target=target, relax_pipeline=_tvm_pipeline(target)), "from_onnx"
        except Exception as e:
            stage = "relax.build" if mod is not None else "from_onnx"
            reasons.append(f"ONNX frontend: {stage} failed: {type(e).__name__}: {_short(e, 300)}")
        raise Unavailable(f"TVM cannot build {zm.name} with dynamic dims. " + " ".join(reasons))


def _short(e: BaseException, limit: int = 600) -> str:
    s = str(e).strip()
    # TVM errors carry a long C++ traceback first; keep the message lines at the end
    lines = [ln for ln in s.splitlines() if ln.strip()]
    s = " | ".join(lines[-4:]) if len(lines) > 4 else " | ".join(lines)
    return s if len(s) <= limit else s[:limit] + " ..."


# ---------------------------------------------------------------------------
# braze
# ---------------------------------------------------------------------------


class Braze(Backend):
    name = "braze"
    label = "braze"
    description = ("braze.compile(module, example_inputs=zm.example_inputs(), dynamic_shapes=zm.dynamic_shapes) "
                   "with BRAZE_CACHE_DIR set to the pair's cache dir (fresh for the cold run), then m(*inputs)")
    warm_cache = True

    def unavailable_reason(self):
        import braze
        if not hasattr(braze, "compile"):
            return "braze.compile not built yet"
        return None

    def prepare(self, zm, cache_dir, threads):
        return _braze_prepared(zm, zm.module, lambda x: x)

    def compile_counts(self):
        import braze
        if not hasattr(braze, "stats"):
            return {}
        return {"native_compiles": int(braze.stats().get("native_compiles", 0))}


def _braze_prepared(zm, module, convert, example_inputs=None, dtype=None, precision=None,
                    adapt_threads=None) -> Prepared:
    """braze.compile(module) with the zoo model's dynamic shapes (and ``precision``), as a Prepared."""
    import torch

    import braze
    from braze.options import Options
    opts = Options.from_env()
    if adapt_threads is not None:
        opts = opts.replace(adapt_threads=adapt_threads)
    m = braze.compile(module, example_inputs=example_inputs or zm.example_inputs(),
                      dynamic_shapes=zm.dynamic_shapes, precision=precision, options=opts)

    def run(args):
        with torch.no_grad():
            return m(*args)

    def first_output(out):
        import numpy as np
        from braze.zoo import first_output as fo
        o = fo(out)
        return o.detach().float().numpy() if hasattr(o, "detach") else np.asarray(o, np.float32)
    info = {"precision": m.module.precision.get("policy", "fp32")} if precision else {}

    def counters():
        full, fewer = m.library.team_calls() or (0, 0)
        return {"full team": full, "fewer threads": fewer}
    return Prepared(run=run, convert=convert, first_output=first_output, info=info, counters=counters)


class BrazePlugin(Backend):
    name = "braze-plugin"
    label = "torch.compile(braze)"
    description = ("torch.compile(module, backend='braze', dynamic=True) under torch.no_grad(): dynamo hands its "
                   "graphs to braze.plugin (the torch_dynamo_backends entry point 'braze'); a graph with symbolic "
                   "sizes compiles at its first call, one dynamo fixed to a size of 1 runs in PyTorch at its first "
                   "call and compiles at its second (so that compile is in the first timed calls, not in 'first "
                   "result'); BRAZE_CACHE_DIR is the warm cache. Recompiles count both dynamo graphs and braze "
                   "native compiles")
    warm_cache = True
    min_warmups = 3  # the PyTorch call, the compiling call, the first native call

    def unavailable_reason(self):
        try:
            from braze import plugin
        except Exception as e:
            return f"braze.plugin not built yet ({type(e).__name__}: {e})"
        if not callable(getattr(plugin, "backend", None)):
            return "braze.plugin.backend not built yet"
        import torch
        if "braze" not in torch._dynamo.list_backends(exclude_tags=()):
            return ("torch.compile does not know backend 'braze': the torch_dynamo_backends entry point is not "
                    "registered (reinstall: pip install -e .)")
        return None

    def prepare(self, zm, cache_dir, threads):
        import torch

        compiled = torch.compile(zm.module, backend="braze", dynamic=True)

        def run(args):
            with torch.no_grad():
                return compiled(*args)
        return Prepared(run=run, first_output=_torch_first_output,
                        info={"torch_compile": "backend=braze, dynamic=True"})

    def compile_counts(self):
        import braze
        return {"dynamo_graphs": _dynamo_graphs(), "native_compiles": int(braze.stats()["native_compiles"])}


class BrazeReference(Backend):
    name = "braze-reference"
    label = "braze reference (oracle)"
    description = ("NOT the fast path: torch.export -> braze.import_torch -> braze.reference.run, the NumPy "
                   "reference interpreter (braze's correctness oracle). Off by default; use small shapes")
    default = False

    def prepare(self, zm, cache_dir, threads):
        import braze
        from braze import zoo
        mod = braze.import_torch(zoo.export(zm))

        def run(arrays):
            return braze.reference.run(mod, *arrays)

        def first_output(out):
            import numpy as np
            return np.asarray(out[0] if isinstance(out, (tuple, list)) else out)
        return Prepared(run=run, convert=lambda inputs: [x.numpy() for x in inputs], first_output=first_output)


# ---------------------------------------------------------------------------
# 16-bit rows (issue 23): off by default; `--backends` names them, `--precision bf16` adds them
# ---------------------------------------------------------------------------


def half_module(zm, dtype: str):
    """A copy of the zoo model cast to ``dtype`` (the zoo's own module stays float32: the worker's
    eager reference is computed from it)."""
    import copy

    import torch
    return copy.deepcopy(zm.module).to(getattr(torch, dtype)).eval()


def half_inputs(inputs, dtype: str):
    """The float inputs cast to ``dtype``; token ids and masks as they are."""
    import torch
    return tuple(x.to(getattr(torch, dtype)) if x.is_floating_point() else x for x in inputs)


def _float_first_output(out):
    from braze.zoo import first_output
    return first_output(out).detach().float().numpy()


class EagerBf16(Backend):
    name = "eager-bf16"
    label = "PyTorch eager bf16"
    description = "the nn.Module cast with .to(torch.bfloat16), inputs too, under torch.no_grad()"
    default = False
    precision = "bf16 model"

    def prepare(self, zm, cache_dir, threads):
        import torch
        m = half_module(zm, "bfloat16")

        def run(args):
            with torch.no_grad():
                return m(*args)
        return Prepared(run=run, convert=lambda x: half_inputs(x, "bfloat16"), first_output=_float_first_output)


class InductorBf16(Backend):
    name = "inductor-bf16"
    label = "torch.compile+freezing bf16"
    description = ("the bf16 model (as 'eager-bf16') through torch.compile(backend='inductor', dynamic=True) with "
                   "freezing: inductor's fastest CPU configuration")
    default = False
    warm_cache = True
    precision = "bf16 model"

    def prepare(self, zm, cache_dir, threads):
        import torch
        import torch._inductor.config as icfg
        icfg.freezing = True
        compiled = torch.compile(half_module(zm, "bfloat16"), backend="inductor", dynamic=True)

        def run(args):
            with torch.no_grad():
                return compiled(*args)
        return Prepared(run=run, convert=lambda x: half_inputs(x, "bfloat16"), first_output=_float_first_output,
                        info={"freezing": True, "torch_compile": "backend=inductor, dynamic=True"})

    def compile_counts(self):
        return {"dynamo_graphs": _dynamo_graphs()}


class OpenVINODefault(OpenVINO):
    name = "openvino-default"
    label = "OpenVINO default precision"
    description = ("as 'openvino' without INFERENCE_PRECISION_HINT: the CPU plugin's default, bf16 where the CPU "
                   "has AVX512_BF16 or AMX, else f32 (the results' info says which it took)")
    default = False
    precision_hint = None
    precision = "plugin default"


class BrazeAdaptThreads(Braze):
    name = "braze-adapt-threads"
    label = "braze adapt_threads=True"
    description = ("as 'braze', with adapt_threads=True: a call runs fewer threads while the calling thread "
                   "waits for a CPU (braze_team.h; off by default since braze runs its own teams; docs/threads.md)")
    default = False

    def prepare(self, zm, cache_dir, threads):
        return _braze_prepared(zm, zm.module, lambda x: x, adapt_threads=True)


class BrazeOpenMP(Braze):
    name = "braze-openmp"
    label = "braze BRAZE_OMP=openmp"
    description = ("braze as it ran before its own teams (braze_omp.h): its OpenMP calls run by libgomp "
                   "(BRAZE_OMP=openmp), whose threads spin for milliseconds whenever they wait, and "
                   "adapt_threads=True (the A side of an A/B with 'braze'; docs/threads.md)")
    default = False
    env = {"BRAZE_OMP": "openmp", "BRAZE_ADAPT_THREADS": "1"}


class _Untuned:
    """The A side of a tuning A/B: its process started with BRAZE_TUNE=off."""
    default = False
    env = {"BRAZE_TUNE": "off"}


class _Tuned:
    """The B side: its process started with BRAZE_TUNE=fast."""
    default = False
    env = {"BRAZE_TUNE": "fast"}


class BrazeUntuned(_Untuned, Braze):
    name = "braze-untuned"
    label = "braze tune=off"
    description = ("as 'braze', with every GEMM on the default rule (BRAZE_TUNE=off: braze's small-M kernel up to "
                   "M = 48, oneDNN above; braze/tune/products.py): the A side of a tuning A/B")


class BrazeTuned(_Tuned, Braze):
    name = "braze-tuned"
    label = "braze tune=fast"
    description = ("as 'braze', compiled with BRAZE_TUNE=fast: the compile measures each GEMM's kernels per bucket "
                   "of M that the tuning database in its cache dir lacks (docs/tuning.md), then uses the winners")


class BrazeOneDNNConv(Braze):
    name = "braze-onednn-conv"
    label = "braze, every conv on oneDNN"
    description = ("as 'braze', with decompose's conv2d rule off (DIRECT_IN_CHANNELS = 0 while it compiles): every "
                   "convolution a oneDNN call, none braze's loops (direct_conv2d): the A side of that A/B")
    default = False

    def prepare(self, zm, cache_dir, threads):
        import importlib
        rule = importlib.import_module("braze.passes.decompose")  # the module (the package exports the pass)
        keep, rule.DIRECT_IN_CHANNELS = rule.DIRECT_IN_CHANNELS, 0
        try:
            return _braze_prepared(zm, zm.module, lambda x: x)
        finally:
            rule.DIRECT_IN_CHANNELS = keep


class BrazeBf16(Braze):
    name = "braze-bf16"
    label = "braze precision=bf16"
    description = ("as 'braze', with precision='bf16': GEMMs, batched matmuls and convolutions in bfloat16 with "
                   "float32 accumulation, everything else float32 (docs/precision.md); on a CPU without bf16 "
                   "GEMMs braze warns and compiles float32")
    default = False
    precision = "bf16 policy"

    def prepare(self, zm, cache_dir, threads):
        return _braze_prepared(zm, zm.module, lambda x: x, precision="bf16")


class BrazeBf16Untuned(_Untuned, BrazeBf16):
    name = "braze-bf16-untuned"
    label = "braze precision=bf16 tune=off"
    description = "as 'braze-bf16', with every product on its default rule (BRAZE_TUNE=off): the A side of a tuning A/B"


class BrazeBf16Tuned(_Tuned, BrazeBf16):
    name = "braze-bf16-tuned"
    label = "braze precision=bf16 tune=fast"
    description = ("as 'braze-bf16', compiled with BRAZE_TUNE=fast: its bfloat16 products measured per bucket of M "
                   "(docs/tuning.md)")


ALT_ONEDNN = "BRAZE_BENCH_ONEDNN_ROOT"


class _AltOneDNN:
    """Runs with the oneDNN under $BRAZE_BENCH_ONEDNN_ROOT (BRAZE_DNNL_ROOT in its process): braze's
    helper built against another oneDNN, such as one built from source (docs/gemm.md)."""
    default = False

    @property
    def env(self) -> dict:
        root = os.environ.get(ALT_ONEDNN)
        if not root:
            raise SystemExit(f"{self.name}: set {ALT_ONEDNN} to the prefix of a oneDNN build "
                             "(lib/libdnnl.so, include/oneapi/dnnl/dnnl.h)")
        return {"BRAZE_DNNL_ROOT": root}


class BrazeAltOneDNN(_AltOneDNN, Braze):
    name = "braze-alt-onednn"
    label = "braze, another oneDNN"
    description = "as 'braze', with the oneDNN under $BRAZE_BENCH_ONEDNN_ROOT"


class BrazeBf16AltOneDNN(_AltOneDNN, BrazeBf16):
    name = "braze-bf16-alt-onednn"
    label = "braze precision=bf16, another oneDNN"
    description = "as 'braze-bf16', with the oneDNN under $BRAZE_BENCH_ONEDNN_ROOT"


class BrazeBf16Model(Braze):
    name = "braze-bf16-model"
    label = "braze bf16 model"
    description = "braze.compile of the bf16 model (as 'eager-bf16'), bf16 inputs"
    default = False
    precision = "bf16 model"

    def prepare(self, zm, cache_dir, threads):
        import torch
        ex = half_inputs(zm.example_inputs(), "bfloat16")
        return _braze_prepared(zm, half_module(zm, "bfloat16"), lambda x: half_inputs(x, "bfloat16"),
                               example_inputs=ex, dtype=torch.bfloat16)


BACKENDS: dict[str, Backend] = {b.name: b for b in
                                (Eager(), Inductor(), InductorFreezing(), OnnxRuntime(), OnnxRuntimeNoSpin(),
                                 OpenVINO(), TVM(), Braze(), BrazeAdaptThreads(), BrazeOpenMP(), BrazeUntuned(),
                                 BrazeTuned(), BrazeOneDNNConv(), BrazePlugin(),
                                 BrazeReference(),
                                 EagerBf16(), InductorBf16(), OpenVINODefault(), BrazeBf16(), BrazeBf16Untuned(),
                                 BrazeBf16Tuned(), BrazeAltOneDNN(), BrazeBf16AltOneDNN(), BrazeBf16Model())}
DEFAULT_BACKENDS = [n for n, b in BACKENDS.items() if b.default]
PEERS = [n for n, b in BACKENDS.items() if not n.startswith("braze") and b.precision == "fp32"]
# the 16-bit rows: braze-bf16 is compared with these (and with braze's float32)
HALF_PEERS = [n for n, b in BACKENDS.items() if not n.startswith("braze") and b.precision != "fp32"]
HALF_BACKENDS = [n for n, b in BACKENDS.items() if b.precision != "fp32"]


def get(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r}; choose from {', '.join(BACKENDS)}") from None


def now() -> float:
    return time.perf_counter()
