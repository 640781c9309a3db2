"""``braze.compile``: a model in, one native library out, every shape served without recompiling."""

from __future__ import annotations

import time
from pathlib import Path

from .errors import BrazeError
from .ir.graph import Module, require_constant_data
from .options import Options


def _to_module(model, example_inputs, dynamic_shapes) -> Module:
    if isinstance(model, Module):
        from .ir import verify
        from .passes.common import copy_module
        verify(model)  # hand-written or parsed IR: an ill-typed node would read out of bounds natively
        return copy_module(model)
    if isinstance(model, (str, Path, bytes)) or type(model).__name__ == "ModelProto":
        from . import import_onnx
        return import_onnx(model)
    import sys
    torch = sys.modules.get("torch")  # a torch model means torch is already imported
    if torch is not None:

        from . import import_torch
        if isinstance(model, torch.export.ExportedProgram):
            return import_torch(model)
        if isinstance(model, torch.nn.Module):
            if example_inputs is None:
                raise BrazeError("compiling a torch.nn.Module needs example_inputs",
                                 hint="braze.compile(model, example_inputs=(x,), dynamic_shapes=...)")
            ex = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
            with torch.no_grad():
                ep = torch.export.export(model.eval(), ex, dynamic_shapes=dynamic_shapes, strict=False)
            return import_torch(ep)
    raise BrazeError(f"braze.compile does not know how to read a {type(model).__name__}",
                     hint="pass a torch.nn.Module, a torch.export.ExportedProgram, an ONNX path or ModelProto, "
                          "or a braze IR Module")


class CompiledModel:
    """A compiled model: call it with numpy arrays or torch tensors (same kind back)."""

    def __init__(self, module: Module, library, native, options: Options, timings: dict):
        self.module = module  # the module after the pipeline
        self.library = library
        self.options = options
        self.timings = timings
        self._fns = {e.function.name: library.function(e.symbol, [p.type for p in e.function.params],
                                                       [r.type for r in e.function.results])
                     for e in native.entries}
        self._main = self._fns[module.main.name]

    def __call__(self, *inputs):
        return self._main(*inputs)

    def profile(self) -> list[tuple[str, float, int]]:
        """Per-kernel (label, total seconds, calls) since load; needs BRAZE_DEBUG >= 3 at compile time."""
        import ctypes
        cdll = ctypes.CDLL(str(self.library.path))
        if not hasattr(cdll, "braze_profile"):
            raise BrazeError("this model was compiled without profiling", hint="compile it with BRAZE_DEBUG=3")
        names = ctypes.POINTER(ctypes.c_char_p)()
        secs = ctypes.POINTER(ctypes.c_double)()
        calls = ctypes.POINTER(ctypes.c_int64)()
        n = cdll.braze_profile(ctypes.byref(names), ctypes.byref(secs), ctypes.byref(calls))
        return [(names[i].decode(), secs[i], calls[i]) for i in range(n)]

    def profile_report(self, top: int = 25) -> str:
        rows = sorted(self.profile(), key=lambda r: -r[1])
        total = sum(r[1] for r in rows) or 1.0
        lines = [f"{'kernel':60s} {'ms':>10s} {'calls':>7s} {'share':>6s}"]
        for name, s, c in rows[:top]:
            lines.append(f"{name[:60]:60s} {s * 1e3:10.2f} {c:7d} {100 * s / total:5.1f}%")
        return "\n".join(lines)

    def function(self, name: str):
        return self._fns[name]

    def __repr__(self):
        f = self.module.main
        sig = ", ".join(f"%{p.name}: {p.type}" for p in f.params)
        return f"<braze CompiledModel @{f.name}({sig}) at {self.library.path}>"


def compile(model, example_inputs=None, dynamic_shapes=None, *, threads: int | None = None,
            options: Options | None = None) -> CompiledModel:
    """Compile ``model`` once for every shape its symbolic dims allow.

    ``model``: a ``torch.nn.Module`` (exported with torch.export; ``dynamic_shapes``
    follows torch.export's convention), a ``torch.export.ExportedProgram``, an
    ONNX path or ``ModelProto`` (dims from dim_params), or a braze IR Module.
    ``threads``: OpenMP threads for the native code (default: the runtime's).
    """
    from .codegen.host import HostGen
    from .codegen.isa import detect_isa
    from .extern import onednn
    from .pipeline import run_pipeline
    from .runtime import load_library

    opts = options if options is not None else Options.from_env()
    if threads is not None:
        opts = opts.replace(threads=threads)
    t0 = time.perf_counter()
    module = _to_module(model, example_inputs, dynamic_shapes)
    require_constant_data(module, "compile")
    t1 = time.perf_counter()
    module = run_pipeline(module, options=opts, copy=False)
    t2 = time.perf_counter()
    native = HostGen(module, detect_isa(), profile=opts.debug >= 3).generate()
    t3 = time.perf_counter()
    if opts.dump_dir:
        d = Path(opts.dump_dir)
        d.mkdir(parents=True, exist_ok=True)
        (d / "model.c").write_text(native.source)
        (d / "kernels.txt").write_text("\n\n".join(native.kernels.values()))
    env_cache = {}
    if opts.cache_dir:
        env_cache["BRAZE_CACHE_DIR"] = opts.cache_dir
    source = native.source + "\n/* ---- oneDNN helper ---- */\n" + onednn.helper_text()
    lib = _with_env(env_cache, lambda: load_library(
        source, name=module.main.name, include_dirs=[*onednn.include_dirs(), str(onednn.helper_header().parent)],
        library_dirs=onednn.library_dirs(), libraries=onednn.libraries(), rpaths=onednn.rpaths(),
        extra_cflags=onednn.extra_link_flags()))
    t4 = time.perf_counter()
    lib.init([module.constants[n] for n in native.constants])
    if opts.threads:
        import ctypes
        ctypes.CDLL(str(lib.path)).braze_set_num_threads(ctypes.c_int32(opts.threads))
    t5 = time.perf_counter()
    timings = {"import": t1 - t0, "passes": t2 - t1, "codegen": t3 - t2, "c_compile": t4 - t3, "init": t5 - t4}
    if opts.debug >= 1:
        import sys
        print("braze compile: " + ", ".join(f"{k} {v:.2f} s" for k, v in timings.items()), file=sys.stderr)
    return CompiledModel(module, lib, native, opts, timings)


def _with_env(env: dict, fn):
    import os
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return fn()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
