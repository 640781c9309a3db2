"""The native runtime: C compiler driver with a cache, and the ctypes loader.

- ``compile_shared(source, name=...) -> Path``: a cached ``.so`` (compiler.py)
- ``NativeLibrary(path)``, ``NativeFunction(lib, symbol, params, results)`` (loader.py)
- ``load_library(source, name=...) -> NativeLibrary``: both, rebuilding a
  cached library that fails to load
- ``stats()``: ``native_compiles``, ``cache_hits`` for this process
"""

from __future__ import annotations

from .compiler import cache_dir, compile_shared, find_compiler, private_cache_dir, reset_stats, resolve_cache_dir, stats
from .loader import NativeFunction, NativeLibrary
from .tensors import TensorSpec


def load_library(source: str, *, name: str, **compile_kw) -> NativeLibrary:
    """Compile (or fetch from the cache) and load ``source``; a cached library
    that fails to load is rebuilt once. ``compile_kw`` go to ``compile_shared``
    (``cache_dir=`` among them)."""
    from ..errors import BrazeError

    path = compile_shared(source, name=name, **compile_kw)
    try:
        return NativeLibrary(path)
    except BrazeError:
        path = compile_shared(source, name=name, force=True, **compile_kw)
        return NativeLibrary(path)


__all__ = ["compile_shared", "cache_dir", "resolve_cache_dir", "private_cache_dir", "find_compiler", "stats", "reset_stats",
           "NativeLibrary", "NativeFunction", "TensorSpec", "load_library"]
