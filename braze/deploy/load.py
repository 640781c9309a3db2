"""``braze.load``: an artifact directory back as a callable, with numpy alone.

It imports neither torch nor onnx nor the compiler, and runs no C compiler: it checks the
files against meta.json's SHA-256, then lets the artifact's own loader (braze_model_load in
libbraze_model.so) check the CPU and read and check the weights.
"""

from __future__ import annotations

import ctypes
import json
import weakref
from pathlib import Path

from ..errors import BrazeError
from ..ir.graph import TensorInfo
from ..runtime.loader import ERRLEN, NativeFunction, NativeLibrary, bind_inputs
from ..runtime.tensors import TensorSpec
from ..runtime.digest import sha256_file
from .artifact import ARTIFACT_ABI, LIBRARY, META, WEIGHTS

_HINT = "copy the whole artifact directory again, or save the model again"


def _read_meta(path: Path) -> dict:
    f = path / META
    if not path.is_dir():
        raise BrazeError(f"{path} is not a braze artifact directory (no such directory)",
                         hint="pass the directory CompiledModel.save or `braze compile -o` wrote")
    try:
        meta = json.loads(f.read_text())
    except FileNotFoundError:
        raise BrazeError(f"{f}: the file is missing, so {path} is not a complete braze artifact", hint=_HINT) from None
    except (OSError, ValueError) as e:
        raise BrazeError(f"{f}: cannot read it as JSON ({e})", hint=_HINT) from None
    if not isinstance(meta, dict) or meta.get("format") != "braze-artifact":
        raise BrazeError(f"{f}: not a braze artifact's meta.json", hint=_HINT)
    if meta.get("abi_version") != ARTIFACT_ABI:
        from .. import __version__
        raise BrazeError(f"{f}: artifact ABI version {meta.get('abi_version')} (saved by braze "
                         f"{meta.get('braze_version')}), but this braze ({__version__}) reads ABI {ARTIFACT_ABI}",
                         hint="load it with the braze version that saved it, or save the model again")
    return meta


def _check_files(path: Path, meta: dict) -> None:
    """Every file is there and, but for the weights, has its recorded SHA-256: the libraries
    before anything loads them. The weights are hashed once, by the library's loader, as it
    reads them (they are most of the bytes)."""
    for name, want in meta.get("files", {}).items():
        f = path / name
        if not f.exists():
            raise BrazeError(f"{f}: the file is missing from the artifact", hint=_HINT)
        if name != WEIGHTS and sha256_file(f) != want:
            raise BrazeError(f"{f}: its SHA-256 does not match the one in meta.json (the file was changed "
                             "or damaged)", hint=_HINT)


class LoadedModel:
    """A model loaded from an artifact: call it like ``braze.compile``'s result (numpy arrays or
    torch tensors in, the same kind out)."""

    def __init__(self, path):
        self.path = Path(path)
        self.meta = meta = _read_meta(self.path)
        _check_files(self.path, meta)
        self._lib = lib = NativeLibrary(self.path / LIBRARY)
        load = lib._cdll.braze_model_load
        load.restype, load.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int32]
        err = ctypes.create_string_buffer(ERRLEN)
        handle = load(str(self.path).encode(), err, ERRLEN)
        if not handle:
            raise BrazeError(err.value.decode("utf-8", "replace"), hint=_HINT)
        free = lib._cdll.braze_model_free
        free.argtypes = [ctypes.c_void_p]
        weakref.finalize(self, free, handle).atexit = False
        inst = lib._cdll.braze_model_instance
        inst.restype, inst.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
        self._handle = handle
        params = [TensorSpec(_dtype(i["dtype"]), len(i["shape"]), i["name"]) for i in meta["inputs"]]
        results = [TensorSpec(_dtype(o["dtype"]), len(o["shape"]), o["name"]) for o in meta["outputs"]]
        self._main = NativeFunction(lib, meta["entry"], params, results, instance=inst(handle))
        self.inputs = [TensorInfo.from_json(i) for i in meta["inputs"]]
        self.outputs = [TensorInfo.from_json(o) for o in meta["outputs"]]

    def __call__(self, *inputs, **named):
        """Inputs positionally, by name, or as one dict keyed by name."""
        if named or (len(inputs) == 1 and isinstance(inputs[0], dict)):
            inputs = bind_inputs([i.name for i in self.inputs], inputs, named, "the model")
        return self._main(*inputs)

    def __repr__(self):
        return (f"<braze LoadedModel ({', '.join(map(str, self.inputs))}) -> ({', '.join(map(str, self.outputs))}) "
                f"from {self.path}>")


def _dtype(name: str):
    from ..ir.types import DType
    try:
        return DType[name]
    except KeyError:
        raise BrazeError(f"meta.json names an unknown dtype {name!r}", hint=_HINT) from None


def load(path) -> LoadedModel:
    """Load an artifact directory written by ``CompiledModel.save`` (numpy only)."""
    return LoadedModel(path)
