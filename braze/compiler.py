"""``braze.compile``: a model in, one native library out, every shape served without recompiling."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from . import log as _logging
from .errors import BrazeError, InputError
from .ir.graph import Module, TensorInfo, input_count_message, require_constant_data, signature
from .options import Options
from .passes.memory import donated_results
from .runtime.loader import bind_inputs
from .runtime.tensors import TensorSpec

_log = _logging.get("compile")


def _to_module(model, example_inputs, timings: dict, **naming) -> Module:
    """The model (an object or a model file's path) as a braze Module, through the frontend that
    reads it (frontend/registry.py), with the naming options it takes (dynamic_shapes, dims,
    dim_ranges, signature); ``timings["export"]`` gets the time torch.export took."""
    if isinstance(model, (str, os.PathLike)):
        from .frontend.files import load_model_file
        return load_model_file(model, **naming)
    from .frontend.registry import read_object
    return read_object(model, example_inputs, timings, **naming)


def _describe(model) -> str:
    if isinstance(model, Module):
        return "a braze IR module"
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    return f"a {type(model).__name__}"


@dataclass(frozen=True)
class KernelTime:
    """One kernel's totals over every call since load (BRAZE_DEBUG >= 3)."""

    label: str
    seconds: float
    calls: int
    bytes: float  # read and written, summed over calls
    flops: float  # GEMM/convolution multiply-adds x 2, summed over calls; 0 for generated kernels


class CompiledModel:
    """A compiled model: call it with numpy arrays or torch tensors (same kind back)."""

    def __init__(self, module: Module, library, instance, native, options: Options, timings: dict):
        self.module = module  # the module after the pipeline
        self.library = library
        self.instance = instance  # this model's constants, packed weights and thread count
        self.options = options
        self.timings = timings
        self._native = native  # the C and its entries: save() compiles it again as an artifact
        self._inputs, self._outputs = signature(module)  # the module is final: names never change
        self._fns = {e.function.name: instance.function(
            e.symbol, [TensorSpec(p.type.dtype, p.type.rank, p.name) for p in e.function.params],
            [r.type for r in e.function.results], reuse_outputs=options.reuse_outputs,
            in_place=donated_results(module, e.function)) for e in native.entries}
        self._main = self._fns[module.main.name]
        self._n_inputs = len(module.main.params)

    def __call__(self, *inputs, **named):
        if named or (len(inputs) == 1 and isinstance(inputs[0], dict)):
            inputs = bind_inputs([i.name for i in self._inputs], inputs, named, "the model")
        if len(inputs) != self._n_inputs:
            raise InputError(f"{input_count_message(self.module.main)}; got {len(inputs)}")
        return self._main(*inputs)

    @property
    def tune_measurements(self) -> int:
        """Kernel measurements this compile made (``tune="fast"`` or ``"full"`` with buckets the
        tuning database lacked); 0 when every choice came from the database or the default rules."""
        return getattr(self.module, "tune_measurements", 0)

    def dispatch_tables(self) -> list[tuple[str, str, tuple]]:
        """Each library call's dispatch table: (the ``fused`` node's callee, a description of its
        product, the table ``((hi, kernel), ..., (None, kernel))``), in call order."""
        from .tune.products import dispatched_calls
        return [(n.attrs["callee"], c.site.describe() if c and c.site else n.attrs["kind"],
                 tuple(tuple(p) for p in n.attrs["dispatch"])) for n, c in dispatched_calls(self.module)]

    @property
    def inputs(self) -> list[TensorInfo]:
        """Each input's name, dtype, shape (symbolic dims by name) and symbol ranges."""
        return list(self._inputs)

    @property
    def outputs(self) -> list[TensorInfo]:
        """Each output's name (as the model file named it), dtype, shape and symbol ranges."""
        return list(self._outputs)

    def profile(self) -> list[KernelTime]:
        """Per-kernel totals since load (``KernelTime``); needs BRAZE_DEBUG >= 3 at compile time."""
        import ctypes
        cdll = ctypes.CDLL(str(self.library.path))
        if not hasattr(cdll, "braze_profile"):
            raise BrazeError("this model was compiled without profiling", hint="compile it with BRAZE_DEBUG=3")
        names = ctypes.POINTER(ctypes.c_char_p)()
        secs, nbytes, flops = (ctypes.POINTER(ctypes.c_double)() for _ in range(3))
        calls = ctypes.POINTER(ctypes.c_int64)()
        n = cdll.braze_profile(ctypes.byref(names), ctypes.byref(secs), ctypes.byref(calls), ctypes.byref(nbytes),
                               ctypes.byref(flops))
        return [KernelTime(names[i].decode(), secs[i], calls[i], nbytes[i], flops[i]) for i in range(n)]

    def profile_report(self, top: int = 25) -> str:
        """The slowest kernels: time, calls, share, and GB/s and GFLOP/s against what this machine
        measures (braze/runtime/limits.py)."""
        from .runtime.limits import measured_limits
        lim = measured_limits()
        rows = sorted(self.profile(), key=lambda r: -r.seconds)
        total = sum(r.seconds for r in rows) or 1.0
        lines = [f"machine: {lim.bandwidth_gbs:.1f} GB/s copy, {lim.gemm_gflops:.0f} GFLOP/s GEMM (measured)",
                 f"{'kernel':52s} {'ms':>9s} {'calls':>6s} {'share':>6s} {'GB/s':>7s} {'%bw':>5s} "
                 f"{'GFLOP/s':>8s} {'%peak':>6s}"]
        for r in rows[:top]:
            gbs = r.bytes / r.seconds / 1e9 if r.seconds else 0.0
            gfl = r.flops / r.seconds / 1e9 if r.seconds else 0.0
            flop = f"{gfl:8.1f} {100 * gfl / lim.gemm_gflops:5.0f}%" if r.flops else f"{'-':>8s} {'-':>6s}"
            lines.append(f"{r.label[:52]:52s} {r.seconds * 1e3:9.2f} {r.calls:6d} {100 * r.seconds / total:5.1f}% "
                         f"{gbs:7.1f} {100 * gbs / lim.bandwidth_gbs:4.0f}% {flop}")
        return "\n".join(lines)

    def function(self, name: str):
        return self._fns[name]

    def save(self, path):
        """Write this model as a relocatable artifact directory (docs/deployment.md): load it
        with ``braze.load(path)`` (numpy only, no compiler) or from C (``braze_model.h``)."""
        from .deploy.artifact import save
        return save(self, path)

    def __repr__(self):
        f = self.module.main
        sig = ", ".join(f"%{p.name}: {p.type}" for p in f.params)
        return f"<braze CompiledModel @{f.name}({sig}) at {self.library.path}>"


def compile(model, example_inputs=None, dynamic_shapes=None, *, threads: int | None = None,
            precision: str | None = None, target: str | None = None, tune: str | None = None,
            options: Options | dict | None = None, dims: dict | None = None, dim_ranges: dict | None = None,
            signature: str | None = None) -> CompiledModel:
    """Compile ``model`` once for every shape its symbolic dims allow.

    ``model``: a ``torch.nn.Module`` (exported with torch.export; ``dynamic_shapes``
    follows torch.export's convention), a ``torch.export.ExportedProgram``, a model
    file (``.onnx``; ``.pt2`` from torch.export.save, whose dim names
    ``dynamic_shapes`` gives back; ``.braze`` IR text), an ONNX ``ModelProto`` or
    bytes, a braze IR Module, or a TensorFlow model: a ``keras.Model``, a ``tf.function`` with
    an input signature, a ConcreteFunction or a SavedModel directory (``signature``: which of its
    signatures, default ``serving_default``); frontend/registry.py lists them.
    ``dims``: a TF model's dim names, one entry per axis of each input (``{"tokens": ("batch",
    "seq")}``; None or a size for a static axis). ``dim_ranges``: the ranges of an ONNX model's
    dim_params or a TF model's dims (``{"batch": (1, 64)}``).
    ``threads``: OpenMP threads for the native code (default: the runtime's).
    ``precision``: "fp32", "bf16" or "fp16": the dtype a float32 model's GEMMs, batched matmuls
    and convolutions compute in (default: the options', else ``BRAZE_PRECISION``, else fp32;
    docs/precision.md). A 16-bit model computes in its own dtype whatever this says.
    ``target``: "cpu" (default) or "cuda:sm_XX" (cross-compiles on any machine; the GPU is first
    needed at the first call), "cuda" for this machine's GPU (docs/cuda.md).
    ``tune``: where each GEMM's and 1x1 convolution's kernel per range of M comes from: "cached" (default: the tuning
    database's measured choices, never measuring), "fast" or "full" (measure the buckets the
    database lacks first, at most ``tune_budget_s``), "off" (the default rules); docs/tuning.md.
    ``options``: settings: an ``Options``, or a dict of changes to ``Options.from_env()``
    (``{"threads": 2, "cache_dir": "..."}``; default: ``Options.from_env()``); its ``cache_dir`` is
    where the library is cached, passed down explicitly (the environment is
    never changed, so threads compiling at once keep their own settings).
    """
    from .instruments import PassTimer
    from .pipeline import compile_to_c

    opts = Options.of(options)
    if threads is not None:
        opts = opts.replace(threads=threads)
    if precision is not None:
        opts = opts.replace(precision=precision)
    if target is not None:
        opts = opts.replace(target=target)
    if tune is not None:
        opts = opts.replace(tune=tune)
    device = _target(opts)
    _logging.enable_debug_output(opts.debug)
    _log.info("compiling %s", _describe(model))
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    module = _to_module(model, example_inputs, timings, dynamic_shapes=dynamic_shapes, dims=dims,
                        dim_ranges=dim_ranges, signature=signature)
    require_constant_data(module, "compile")
    t1 = time.perf_counter()
    timings["import"] = t1 - t0 - timings.get("export", 0.0)
    timer = PassTimer()
    native, module = compile_to_c(module, device, options=opts, copy=False, instruments=[timer])
    _log.info("stages: %s", timer.report_text())
    timings["stages"] = time.perf_counter() - t1
    return _build(module, native, opts, timings, t0, device)


class _LazyInstance:
    """A CUDA model's instance (weights uploaded to the GPU), made at the first call, once."""

    def __init__(self, make):
        import threading
        self._make = make
        self._real = None
        self._lock = threading.Lock()

    def get(self):
        with self._lock:
            if self._real is None:
                self._real = self._make()
            return self._real

    def function(self, *args, **kw):
        fn = None

        def call(*inputs):
            nonlocal fn
            if fn is None:
                fn = self.get().function(*args, **kw)
            return fn(*inputs)
        return call


def _target(opts: Options):
    """The options' target (braze/target.py): a CUDA target, or the host's ISA at the level a
    ``cpu-x86:LEVEL`` target names (its best for ``cpu``)."""
    from .target import parse_target
    return parse_target(opts.target)


def cpu_target(opts: Options):
    """The ISA a CPU compile of these options is for: the level their target names, the host's
    best for ``cpu`` or a CUDA target (whose dumps and artifacts name their own target)."""
    from .codegen.isa import host_isa
    from .target import is_cuda
    device = _target(opts)
    return host_isa() if is_cuda(device) else device


def _build_cuda(module: Module, native, opts: Options):
    """NVRTC compiles the kernels; the host C, with their cubin and PTX in it, is built for
    baseline x86-64 (it runs on the GPU machine's CPU)."""
    from .codegen.cuda_host import cuda_blob
    from .codegen.isa import level_isa
    from .codegen.nvrtc import compile_cuda
    from .runtime import load_library
    binary = compile_cuda(native.cuda_source, native.isa.split(":")[1], cache_dir=opts.cache_dir)
    native.cuda_binary = binary
    return load_library(cuda_blob(binary) + native.source, name=module.main.name, cache_dir=opts.cache_dir,
                        isa=level_isa("scalar"))


def resume(path, *, threads: int | None = None, options: Options | dict | None = None) -> CompiledModel:
    """Compile from a stage file of a ``BRAZE_DUMP`` directory (``NN_<stage>.braze`` or
    ``.loop``), running the stages after it: the same C as the compile that dumped it."""
    from .pipeline import resume_c

    opts = Options.of(options)
    if threads is not None:
        opts = opts.replace(threads=threads)
    _logging.enable_debug_output(opts.debug)
    t0 = time.perf_counter()
    isa = cpu_target(opts)
    native, module = resume_c(path, isa, options=opts)
    return _build(module, native, opts, {"stages": time.perf_counter() - t0}, t0, isa)


def recompile(module: Module, stage: str = "dispatch", *, options: Options | dict | None = None) -> CompiledModel:
    """Compile ``module``, the final module of an earlier compile (``CompiledModel.module``, an
    artifact's ``module.braze``), again from graph stage ``stage``: from ``dispatch``, its
    GEMMs' and 1x1 convolutions' kernels are chosen again with these options' tuning mode and
    database (braze/deploy/retune.py)."""
    from .pipeline import recompile_c

    opts = Options.of(options)
    _logging.enable_debug_output(opts.debug)
    t0 = time.perf_counter()
    isa = cpu_target(opts)
    native, module = recompile_c(module, stage, isa, options=opts)
    return _build(module, native, opts, {"stages": time.perf_counter() - t0}, t0, isa)


def _build(module: Module, native, opts: Options, timings: dict, t0: float, isa=None) -> CompiledModel:
    """Compile the C (or find it in the cache), load it and make the model instance. ``isa``: what
    the C was generated for, so the C compiler gets its flags."""
    from .runtime import load_library
    from .target import is_cuda

    isa = None if is_cuda(isa) else isa

    t3 = time.perf_counter()
    if native.cuda_source:
        lib = _build_cuda(module, native, opts)
    elif native.uses_library:
        from .extern import onednn  # links the oneDNN helper, built once per cache (rebuilt here if deleted)
        lib = load_library(native.source, name=module.main.name, cache_dir=opts.cache_dir, units=native.units,
                           isa=isa, **onednn.model_build_args(opts.cache_dir, isa))
    else:  # no GEMM or convolution: no oneDNN in the library (half the C compile time)
        lib = load_library(native.source, name=module.main.name, cache_dir=opts.cache_dir, units=native.units,
                           isa=isa)
    t4 = time.perf_counter()
    constants = [module.constants[n] for n in native.constants]
    if native.cuda_source:  # the GPU is first needed at the first call: compiling needs none
        instance = _LazyInstance(lambda: lib.create(constants, threads=opts.threads))
    else:
        instance = lib.create(constants, threads=opts.threads, adapt=opts.adapt_threads)
    t5 = time.perf_counter()
    timings.update(c_compile=t4 - t3, init=t5 - t4)
    _log.info("compiled @%s in %.2f s (%s); library %s", module.main.name, t5 - t0,
              ", ".join(f"{k} {v:.2f} s" for k, v in timings.items()), lib.path)
    return CompiledModel(module, lib, instance, native, opts, timings)
