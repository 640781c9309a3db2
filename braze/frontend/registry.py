"""One table of frontends: what each reads, how braze recognizes it, and the options it takes.

``braze.compile`` (``read_model``), the model-file checks and readers (files.py), ``braze
inspect`` / ``compile`` / ``tune`` and ``braze ops`` (optables.py) read ``FRONTENDS``, and their
error hints list its kinds. A new frontend is its package plus one entry here.

An object is recognized by the modules its type and base classes come from
(``type(obj).__mro__``), so braze never imports torch, onnx or TensorFlow just to look: a
user's ``nn.Module`` subclass has ``torch`` among them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import BrazeError, ModelFileError


@dataclass(frozen=True)
class Frontend:
    name: str  # the table's key
    title: str  # "ONNX": how messages name its models
    suffixes: tuple[str, ...]  # the model files it reads (lower case)
    files: str  # a hint's words for those files: ".onnx (ONNX)"
    objects: str  # a hint's words for the objects it reads: "an ONNX ModelProto"
    modules: tuple[str, ...]  # top-level modules of the types it reads (checked before ``accepts``)
    options: tuple[str, ...]  # the naming options its readers take (dim_ranges, dynamic_shapes)
    dims: str  # how its models name and range their dims: the hint when given another's option
    import_api: str  # braze.<import_api> imports its models
    ops_section: str  # ``braze ops <section>``
    ops_title: str  # that section's title
    accepts: Callable  # (obj) -> bool, for an object of one of ``modules``
    read_object: Callable  # (obj, example_inputs, timings, **options) -> Module
    read_file: Callable  # (path, **options) -> Module
    supported_ops: Callable  # () -> op names (IR rows for the IR)
    directory: Callable | None = None  # (path) -> bool: a model directory it reads (a SavedModel)


def _mro_modules(obj) -> set[str]:
    return {c.__module__.split(".")[0] for c in type(obj).__mro__}


# --- braze IR ------------------------------------------------------------------------------
def _ir_accepts(obj) -> bool:
    from ..ir.graph import Module
    return isinstance(obj, Module)


def _ir_object(model, example_inputs, timings):
    from ..ir import verify
    from ..passes.common import copy_module
    verify(model)  # hand-written or parsed IR: an ill-typed node would read out of bounds natively
    return copy_module(model)


def _ir_file(path):
    from ..ir import parse
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ModelFileError(f"cannot read {path}: {e}") from None
    return parse(text)


def _ir_ops():
    from ..ops import all_ops
    return sorted(all_ops())


# --- ONNX ----------------------------------------------------------------------------------
def _onnx_accepts(obj) -> bool:
    return isinstance(obj, (bytes, bytearray)) or type(obj).__name__ == "ModelProto"


def _onnx_read(model, example_inputs=None, timings=None, dim_ranges=None):
    from .onnx import import_onnx
    return import_onnx(model, dim_ranges=dim_ranges)


def _onnx_ops():
    from .onnx import supported_ops
    return supported_ops()


# --- torch ---------------------------------------------------------------------------------
def _torch_accepts(obj) -> bool:
    import torch  # imported already: the object's type comes from it
    return isinstance(obj, (torch.export.ExportedProgram, torch.nn.Module))


def _torch_object(model, example_inputs, timings, dynamic_shapes=None):
    import torch
    from .torch import import_torch
    if isinstance(model, torch.export.ExportedProgram):
        return import_torch(model, dynamic_shapes=dynamic_shapes)
    if example_inputs is None:
        raise BrazeError("compiling a torch.nn.Module needs example_inputs",
                         hint="braze.compile(model, example_inputs=(x,), dynamic_shapes=...)")
    ex = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    _warn_requires_grad(torch, ex)
    from .quiet import quiet_exporters
    t0 = time.perf_counter()
    with torch.no_grad(), quiet_exporters():
        ep = torch.export.export(model.eval(), ex, dynamic_shapes=dynamic_shapes, strict=False)
    timings["export"] = time.perf_counter() - t0
    return import_torch(ep)


def _warn_requires_grad(torch, example_inputs) -> None:
    import warnings

    from ..errors import BrazeWarning
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor) and x.requires_grad:
            warnings.warn(BrazeWarning(
                f"example input {i} requires grad, but braze compiles for inference only: the compiled model "
                "computes no gradients, and refuses inputs that require grad while grad mode is on "
                "(call it under torch.no_grad() or torch.inference_mode(), or pass x.detach())"), stacklevel=7)
            return


def _torch_file(path, dynamic_shapes=None):
    from .torch import import_torch
    from .torch.archive import load_exported
    return import_torch(load_exported(path), dynamic_shapes=dynamic_shapes)


def _torch_ops():
    from .torch import supported_ops
    return supported_ops()


# --- TensorFlow ----------------------------------------------------------------------------
def _tf_accepts(obj) -> bool:
    return True  # anything of keras' or TF's: the reader says what it cannot read


def _tf_read(model, example_inputs=None, timings=None, dims=None, dim_ranges=None, signature=None):
    from .tf import import_tf
    return import_tf(model, dims=dims, dim_ranges=dim_ranges, signature=signature)


def _tf_ops():
    from .tf import supported_ops
    return supported_ops()


def _saved_model(path) -> bool:
    from .tf.source import is_saved_model
    return is_saved_model(path)


FRONTENDS: dict[str, Frontend] = {f.name: f for f in (
    Frontend("ir", "braze IR", (".braze", ".ir", ".txt"), ".braze (braze IR text)", "a braze IR Module", ("braze",),
             (), "IR text declares its symbols and their ranges in its symbols block", "ir.parse", "ir",
             "Graph IR operators", _ir_accepts, _ir_object, _ir_file, _ir_ops),
    Frontend("onnx", "ONNX", (".onnx",), ".onnx (ONNX)", "an ONNX ModelProto (or its bytes)", ("onnx", "builtins"),
             ("dim_ranges",), "an ONNX model's dims are its dim_params: range them with "
             "braze.import_onnx(path, dim_ranges={'batch': (1, 64)}) or the CLI's --dim batch=1:64", "import_onnx",
             "onnx", "ONNX operators the ONNX frontend imports", _onnx_accepts, _onnx_read, _onnx_read, _onnx_ops),
    Frontend("torch", "torch", (".pt2", ".pt"), ".pt2 (torch.export.save)",
             "a torch.nn.Module (with example_inputs), a torch.export.ExportedProgram", ("torch",),
             ("dynamic_shapes",), "a torch program carries its dims' ranges: set them with "
             "torch.export.Dim(name, min=..., max=...) at export", "import_torch", "aten",
             "ATen operators the torch.export frontend converts", _torch_accepts, _torch_object, _torch_file,
             _torch_ops),
    Frontend("tf", "TensorFlow", (), "a SavedModel directory (TensorFlow)",
             "a keras.Model, a tf.function with an input_signature, a ConcreteFunction",
             ("keras", "tf_keras", "tensorflow"), ("dims", "dim_ranges", "signature"),
             'a TensorFlow model\'s dims are named by dims={"x": ("batch", "seq")}, one entry per axis, and '
             'ranged by dim_ranges={"batch": (1, 64)}', "import_tf", "tf", "TensorFlow ops the TF frontend converts",
             _tf_accepts, _tf_read, _tf_read, _tf_ops, directory=_saved_model),
)}


def _listed(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def model_kinds() -> str:
    """The model files and directories braze reads, for hints: "a model file ending in .onnx (ONNX),
    .pt2 (...) or .braze (...), or a SavedModel directory (TensorFlow)"."""
    files = "a model file ending in " + _listed([f.files for f in _file_order() if f.suffixes])
    return files + "".join(f", or {f.files}" for f in _file_order() if f.directory is not None)


def _file_order() -> list[Frontend]:
    # the order hints have long listed them in: the framework formats first
    return sorted(FRONTENDS.values(), key=lambda f: f.name == "ir")


def suffixes() -> tuple[str, ...]:
    return tuple(s for f in FRONTENDS.values() for s in f.suffixes)


def for_path(path) -> Frontend | None:
    """The frontend that reads ``path``: a model directory one of them recognizes, else a file by
    its suffix; or None."""
    p = Path(path)
    if p.is_dir():
        return next((f for f in FRONTENDS.values() if f.directory is not None and f.directory(p)), None)
    return next((f for f in FRONTENDS.values() if p.suffix.lower() in f.suffixes), None)


def for_object(obj) -> Frontend | None:
    """The frontend that reads ``obj``, or None (nothing is imported to look)."""
    mods = _mro_modules(obj)
    return next((f for f in FRONTENDS.values() if mods & set(f.modules) and f.accepts(obj)), None)


def check_options(fe: Frontend, what, **options) -> dict:
    """The options given (not None) that ``fe`` takes; a BrazeError for one it does not."""
    given = {k: v for k, v in options.items() if v is not None and v != {}}
    for k in given:
        if k not in fe.options:
            takers = [f.title for f in FRONTENDS.values() if k in f.options]
            raise BrazeError(f"{k} applies to {_listed(takers) if takers else 'no'} models; {what} is read by the "
                             f"{fe.title} frontend", hint=fe.dims)
    return given


def read_object(model, example_inputs=None, timings: dict | None = None, **options):
    """``model``, an object a frontend reads, as a braze Module. ``options``: the naming options
    (dim_ranges, dynamic_shapes); a frontend refuses one it does not take. ``timings["export"]``
    gets the time a framework's own export took."""
    fe = for_object(model)
    if fe is None:
        raise BrazeError(f"braze.compile does not know how to read a {type(model).__name__}",
                         hint=f"pass {_listed([f.objects for f in _file_order()])}; or {model_kinds()}")
    return fe.read_object(model, example_inputs, {} if timings is None else timings,
                          **check_options(fe, f"the {type(model).__name__}", **options))


__all__ = ["FRONTENDS", "Frontend", "ModelFileError", "check_options", "model_kinds", "for_object", "for_path",
           "read_object", "suffixes"]
