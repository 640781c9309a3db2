"""braze: a deep-learning compiler for models whose shapes change at run time.

Importing braze is cheap: torch and onnx are imported only when a frontend
needs them.
"""

from . import ir, reference
from .errors import BrazeError, InputError, ModelFormatError, ShapeError, UnsupportedOpError
from .options import Options

__version__ = "0.1.0"


def stats():
    """Counters of this process's native runtime: native_compiles, cache_hits."""
    from .runtime import stats
    return stats()


def import_onnx(model, *, dim_ranges=None):
    """An ONNX model (path, bytes or ModelProto) as a braze Module; dim_params become symbols."""
    from .frontend.onnx import import_onnx as _imp
    return _imp(model, dim_ranges=dim_ranges)


def import_torch(exported_program, dynamic_shapes=None):
    """A ``torch.export.ExportedProgram`` as a braze Module; torch's symbolic sizes become symbols,
    named by the export's Dims (or by ``dynamic_shapes``, torch.export's format, for a program
    loaded from a .pt2 file, which has lost them)."""
    from .frontend.torch import import_torch as _imp
    return _imp(exported_program, dynamic_shapes=dynamic_shapes)


def import_tf(model, *, dims=None, dim_ranges=None, signature=None, via="graph"):
    """A TensorFlow model (a keras.Model, a tf.function with an input signature, a ConcreteFunction,
    or a SavedModel directory) as a braze Module. ``dims={"tokens": ("batch", "seq")}`` names each
    input's axes (None or a size for a static one); ``dim_ranges`` ranges the names; ``signature``
    picks a SavedModel's signature (default ``serving_default``); ``via="onnx"`` converts through
    tf2onnx instead of reading the graph directly (docs/tensorflow.md)."""
    from .frontend.tf import import_tf as _imp
    return _imp(model, dims=dims, dim_ranges=dim_ranges, signature=signature, via=via)


__all__ = ["BrazeError", "InputError", "ModelFormatError", "Options", "ShapeError", "UnsupportedOpError",
           "import_onnx", "import_tf", "import_torch", "ir", "load", "reference", "resume", "stats", "__version__"]


def compile(model, example_inputs=None, dynamic_shapes=None, **kw):
    """Compile a model once into native code that serves every shape (see braze.compiler.compile)."""
    from .compiler import compile as _compile
    return _compile(model, example_inputs, dynamic_shapes, **kw)


def load(path):
    """Load an artifact directory written by ``CompiledModel.save`` or ``braze compile``: a
    callable like ``braze.compile``'s result. Needs only numpy (no torch, no C compiler)."""
    from .deploy.load import load as _load
    return _load(path)


def resume(path, **kw):
    """Compile from a stage file of a BRAZE_DUMP directory; the same C as the dumped compile
    (see braze.compiler.resume)."""
    from .compiler import resume as _resume
    return _resume(path, **kw)
