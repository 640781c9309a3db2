"""Locating oneDNN (libdnnl.so + headers) and the C helper compiled against it.

braze depends on oneDNN 3.2 in its GNU-OpenMP build: the pinned
``onednn-cpu-gomp`` / ``onednn-devel-cpu-gomp`` wheels (``PIP_INSTALL``, the
same pins as pyproject.toml; docs/gemm.md says why not the SYCL/TBB
``onednn`` wheel, which would also overwrite the same ``lib/libdnnl.so``).
They install ``libdnnl.so`` under ``<sys.prefix>/lib`` and the headers under
``<sys.prefix>/include`` (data files of the wheels). Search order:

1. ``BRAZE_DNNL_ROOT`` (a prefix holding ``lib/libdnnl.so`` and
   ``include/oneapi/dnnl/dnnl.h``; ``lib64`` also accepted);
2. ``sys.prefix``, ``sys.base_prefix``, the user base (``pip --user``);
3. the data directories of the installed oneDNN distributions (their RECORD
   names the files wherever pip put them).

The helper (``csrc/braze_dnnl_*.c``, about 2000 lines against oneDNN's C API)
is built once into a shared library of its own in the compile cache
(``helper_library``), and each model library that calls oneDNN links it
(``model_build_args``; what braze.compile does)::

    from braze.extern import onednn
    compile_shared(model_src, name=..., cache_dir=..., **onednn.model_build_args(cache_dir))

Compiled into every model, the helper was most of a small model's C compile
(zoo MLP: 0.60 s, against 0.19 s linking it; docs/gemm.md). Its own build
gets ``include_dirs()``, ``library_dirs()``, ``libraries()``, ``rpaths()`` and
``extra_link_flags()``, plus the ISA flags compile_shared gives every library,
so its cache key (hence its path) changes with the helper's source, the
oneDNN build, the ISA and the compiler. A model links the helper by that
absolute path (its DT_NEEDED), which puts the helper's key into the model's
key too. The helper's builds and hits count in ``helper_stats()``, not in
``braze.stats()``.

``extra_link_flags()`` holds ``-Wl,--disable-new-dtags`` and a define naming
the oneDNN build (so the cache key changes with it). The pinned build's
libdnnl needs only system libraries (libgomp, libstdc++); the old-style
DT_RPATH the flag gives is for a build under ``BRAZE_DNNL_ROOT`` whose
libdnnl needs libraries from its own directory without a RUNPATH of its own
(only a DT_RPATH on the loading library is searched for the dependencies of
its dependencies, not a DT_RUNPATH).

One helper instance per process (per helper file): every model that links the same
file shares its engine, per-thread streams and scratchpads, primitive cache
and ``braze_dnnl_set_runtime_m`` setting (``BRAZE_DNNL_RUNTIME_M`` is read once,
when the engine starts). The primitive cache keys on the packed weight's
process-wide owner id, so models never see each other's primitives, and
freeing a weight drops only its own entries (braze_dnnl_core.c).
"""

from __future__ import annotations

import functools
import os
import re
import site
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import MissingDependencyError

# the pinned build (pyproject.toml's dependencies; tests/extern/test_onednn.py checks they agree)
ONEDNN_REQUIREMENTS = ("onednn-cpu-gomp==2023.2.0", "onednn-devel-cpu-gomp==2023.2.0")
PIP_INSTALL = "pip install " + " ".join(ONEDNN_REQUIREMENTS)
ENV_ROOT = "BRAZE_DNNL_ROOT"

_CSRC = Path(__file__).resolve().parent / "csrc"


@dataclass(frozen=True)
class OneDNN:
    """Where oneDNN is: ``library`` is the libdnnl.so file, ``include_dir`` holds oneapi/dnnl/dnnl.h."""

    library: Path
    include_dir: Path
    version: tuple[int, int, int] | None
    cpu_runtime: str          # "omp", "tbb", "sycl", "threadpool", "seq"
    threading_runtime: str    # "omp", "tbb", "threadpool", "seq"

    @property
    def library_dir(self) -> Path:
        return self.library.parent


def _prefixes() -> list[Path]:
    out: list[Path] = []
    for p in (sys.prefix, sys.base_prefix, getattr(site, "USER_BASE", None)):
        if p and Path(p) not in out:
            out.append(Path(p))
    return out


def _dist_dirs() -> tuple[list[Path], list[Path]]:
    """(library dirs, include dirs) named by the installed wheels' RECORD files."""
    libs: list[Path] = []
    incs: list[Path] = []
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover
        return libs, incs
    for name in ("onednn", "onednn-devel", "onednn-cpu-gomp", "onednn-devel-cpu-gomp",
                 "onednn-cpu-iomp", "onednn-devel-cpu-iomp", "onednn-cpu-tbb", "onednn-devel-cpu-tbb"):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        for f in dist.files or ():
            s = str(f)
            if re.search(r"(^|/)libdnnl\.so$", s):
                libs.append(Path(dist.locate_file(f)).resolve().parent)
            elif s.endswith("oneapi/dnnl/dnnl.h"):
                incs.append(Path(dist.locate_file(f)).resolve().parent.parent.parent)
    return libs, incs


def _lib_in(d: Path) -> Path | None:
    for name in ("libdnnl.so", "libdnnl.so.3"):
        if (d / name).exists():
            return d / name
    return None


def _parse_config(include_dir: Path) -> tuple[tuple[int, int, int] | None, str, str]:
    names = {"1u": "seq", "2u": "omp", "4u": "tbb", "8u": "threadpool", "512u": "sycl", "0u": "none"}
    consts: dict[str, str] = {}
    version = None
    try:
        cfg = (include_dir / "oneapi" / "dnnl" / "dnnl_config.h").read_text(errors="replace")
        for m in re.finditer(r"#define (DNNL_RUNTIME_\w+) (\w+)", cfg):
            consts[m.group(1)] = names.get(m.group(2), m.group(2))
        cpu = re.search(r"#define DNNL_CPU_RUNTIME (\w+)", cfg)
        thr = re.search(r"#define DNNL_CPU_THREADING_RUNTIME (\w+)", cfg)
        cpu_rt = consts.get(cpu.group(1), "unknown") if cpu else "unknown"
        thr_rt = consts.get(thr.group(1), "unknown") if thr else "unknown"
    except OSError:
        cpu_rt = thr_rt = "unknown"
    try:
        ver = (include_dir / "oneapi" / "dnnl" / "dnnl_version.h").read_text(errors="replace")
        parts = [re.search(rf"#define DNNL_VERSION_{k} (\d+)", ver) for k in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            version = tuple(int(p.group(1)) for p in parts)  # type: ignore[union-attr]
    except OSError:
        pass
    return version, cpu_rt, thr_rt


@functools.lru_cache(maxsize=None)
def _locate(env_root: str | None) -> OneDNN:
    tried: list[str] = []
    candidates: list[tuple[Path, Path]] = []   # (lib dir, include dir)
    if env_root:
        r = Path(env_root).expanduser()
        for libdir in (r / "lib", r / "lib64", r):
            candidates.append((libdir, r / "include"))
    else:
        for p in _prefixes():
            candidates.append((p / "lib", p / "include"))
            candidates.append((p / "lib64", p / "include"))
        libs, incs = _dist_dirs()
        for ld in libs:
            for inc in incs or [ld.parent / "include"]:
                candidates.append((ld, inc))
    for libdir, inc in candidates:
        lib = _lib_in(libdir)
        has_h = (inc / "oneapi" / "dnnl" / "dnnl.h").exists()
        tried.append(f"{libdir} ({'libdnnl.so' if lib else 'no libdnnl.so'}), "
                     f"{inc} ({'dnnl.h' if has_h else 'no oneapi/dnnl/dnnl.h'})")
        if lib and has_h:
            version, cpu_rt, thr_rt = _parse_config(inc)
            return OneDNN(lib, inc, version, cpu_rt, thr_rt)
    where = "; ".join(tried) if tried else "no candidate directories"
    if env_root:
        raise MissingDependencyError(
            f"{ENV_ROOT}={env_root} does not hold oneDNN (lib/libdnnl.so and include/oneapi/dnnl/dnnl.h)",
            where=f"looked in: {where}",
            hint=f"point {ENV_ROOT} at a oneDNN install prefix, or unset it and run: {PIP_INSTALL}")
    raise MissingDependencyError(
        "oneDNN (libdnnl.so and its headers) is not installed; braze's native CPU backend "
        "uses it for matmul and convolution",
        where=f"looked in: {where}",
        hint=f"{PIP_INSTALL}   (or set {ENV_ROOT} to a oneDNN install prefix)")


def locate() -> OneDNN:
    """Find oneDNN, or raise MissingDependencyError with the pip command."""
    return _locate(os.environ.get(ENV_ROOT) or None)


def available() -> bool:
    try:
        locate()
        return True
    except MissingDependencyError:
        return False


def include_dirs() -> list[str]:
    """-I directories: oneDNN's headers and braze_dnnl.h."""
    return [str(locate().include_dir), str(_CSRC)]


def library_dirs() -> list[str]:
    return [str(locate().library_dir)]


def libraries() -> list[str]:
    return ["dnnl", "pthread", "dl"]


def rpaths() -> list[str]:
    return [str(locate().library_dir)]


def extra_link_flags() -> list[str]:
    """Flags the model library needs (see the module docstring).

    The define names the oneDNN build, so it enters the compile cache's key:
    swapping the installed oneDNN never reuses a library built against another.
    """
    info = locate()
    ident = f"{'.'.join(map(str, info.version or ()))}-{info.cpu_runtime}-{info.threading_runtime}"
    lib_stat = info.library.stat()
    return ["-Wl,--disable-new-dtags",
            f"-DBRAZE_DNNL_BUILD=\"{ident}-{lib_stat.st_size}\""]


HELPER_PARTS = ("braze_dnnl_core.c", "braze_dnnl_threads.c", "braze_dnnl_wtrack.c", "braze_dnnl_wcache.c",
                "braze_dnnl_matmul.c", "braze_dnnl_smallm.c", "braze_dnnl_smallm_avx2.c", "braze_dnnl_live.c",
                "braze_dnnl_conv.c", "braze_dnnl_conv_bwd.c")


def helper_text() -> str:
    """The C helper's source: its parts, in order, as one translation unit (``helper_library``).
    ``#line`` names each part (by file name only, so the text, and with it the
    compile-cache key, does not depend on where braze is installed)."""
    return "".join(f'#line 1 "{p}"\n' + (_CSRC / p).read_text() + "\n" for p in HELPER_PARTS)


def helper_header() -> Path:
    return _CSRC / "braze_dnnl.h"


def runtime_env() -> dict[str, str]:
    """Environment a SYCL build of oneDNN (under ``BRAZE_DNNL_ROOT``) wants before it starts;
    empty for the pinned OpenMP build. The C helper sets it itself: a SYCL CPU engine finds
    its device through the OpenCL ICD loader, and intel-opencl-rt puts libintelocl.so next
    to libdnnl.so without registering it.
    """
    info = locate()
    env: dict[str, str] = {}
    if info.cpu_runtime == "sycl":
        ocl = info.library_dir / "libintelocl.so"
        if ocl.exists():
            env["OCL_ICD_FILENAMES"] = str(ocl)
    return env


def describe() -> str:
    info = locate()
    v = ".".join(map(str, info.version)) if info.version else "?"
    return (f"oneDNN {v} at {info.library} (headers {info.include_dir}); CPU runtime "
            f"{info.cpu_runtime}, threading {info.threading_runtime}")


HELPER_FILE = "libbraze_dnnl.so"
# braze_matmul's kernels, OR-ed into its act as BRAZE_PATH(code) (braze_dnnl.h): a model's
# dispatch table names them (braze/tune/products.py)
GEMM_PATHS = {"auto": 0, "smallm": 1, "dnnl": 2, "dnnl_rt": 3}


def helper_build_id() -> str:
    """What a measurement of the helper's kernels depends on: its source and oneDNN's version."""
    import hashlib
    if not available():
        return "no-onednn"
    info = locate()
    v = ".".join(map(str, info.version)) if info.version else "?"
    return f"{hashlib.sha256(helper_text().encode()).hexdigest()[:16]}-onednn{v}"
_HELPER_STATS = {"native_compiles": 0, "cache_hits": 0}


def helper_library(cache_dir: str | os.PathLike | None = None, *, force: bool = False, isa=None) -> Path:
    """The C helper as its own shared library in the compile cache (``libbraze_dnnl.so``
    in its entry), built on first use.

    One per (helper source, oneDNN build, ISA flags, compiler, cache): compile_shared
    gives it the same ISA flags as the models, and its key covers them all. A missing
    or corrupt entry (say, deleted from the cache) is rebuilt here, at the same path.
    Its compiles and hits count in ``helper_stats()``, not ``braze.stats()`` (which
    counts the libraries braze loads, one per model), and log on ``braze.cache.helper``.
    ``isa``: the model's, where a ``cpu-x86:LEVEL`` target chose one (None: the host's).
    """
    from ..runtime.compiler import compile_shared
    return compile_shared(helper_text(), name="braze_dnnl", include_dirs=include_dirs(),
                          library_dirs=library_dirs(), libraries=libraries(), rpaths=rpaths(),
                          extra_cflags=extra_link_flags(), force=force, cache_dir=cache_dir,
                          filename=HELPER_FILE, counters=_HELPER_STATS, log_channel="cache.helper", isa=isa)


def helper_stats() -> dict:
    """This process's builds of the helper library (``native_compiles``) and cache hits."""
    return dict(_HELPER_STATS)


def write_tracking(cache_dir: str | os.PathLike | None = None) -> dict:
    """How live weights are checked in this process (``braze_dnnl_wtrack.c``): ``on`` when from the
    kernel's page tables (Linux >= 6.7, userfaultfd allowed, ``BRAZE_WRITE_TRACKING`` not 0), else
    by a fingerprint of their bytes; ``checks``, ``written`` and ``arms``: the weight ranges looked
    at so far, those found written, and (re)registrations. Loads the helper library."""
    import ctypes as C
    lib = C.CDLL(str(helper_library(cache_dir)))
    f = lib.braze_dnnl_write_tracking
    f.restype, f.argtypes = C.c_int, [C.POINTER(C.c_int64)] * 3
    n = [C.c_int64() for _ in range(3)]
    on = f(*(C.byref(v) for v in n))
    return {"on": bool(on), "checks": n[0].value, "written": n[1].value, "arms": n[2].value}


def model_build_args(cache_dir: str | os.PathLike | None = None, isa=None) -> dict:
    """``compile_shared`` keywords for a model library that calls the helper: builds the
    helper first (``helper_library``) and links the model against that exact file.

    The helper has no SONAME and is linked by its absolute path, so the model's
    DT_NEEDED is that path (no rpath search): the loader binds exactly this file, never
    another helper build of the same file name already loaded in the process. The path
    (it holds the helper's key) is in the model's link flags, hence in its cache key: a
    model is never reused against another helper. The helper finds libdnnl through its
    own DT_RPATH.
    """
    helper = helper_library(cache_dir, isa=isa)
    return {"include_dirs": [str(_CSRC)], "link_inputs": [str(helper)]}


def build_standalone(extra_source: str = "", cache_dir: str | os.PathLike | None = None) -> Path:
    """The helper library (``helper_library``), or the helper plus ``extra_source`` in one
    library of its own (cached). For tests and benchmarks."""
    if not extra_source:
        return helper_library(cache_dir)
    from ..runtime.compiler import compile_shared
    return compile_shared(helper_text() + extra_source, name="braze_dnnl", include_dirs=include_dirs(),
                          library_dirs=library_dirs(), libraries=libraries(),
                          rpaths=rpaths(), extra_cflags=extra_link_flags(), cache_dir=cache_dir)


def load_standalone(extra_source: str = "", cache_dir: str | os.PathLike | None = None):
    """ctypes handle on a standalone helper library with argtypes set.

    Without ``extra_source`` this is the file models in the same cache link, so in a
    process that has loaded one it is the very same instance (one engine, one
    primitive cache, one ``braze_dnnl_set_runtime_m`` setting): restore what you change.
    """
    import ctypes as C
    lib = C.CDLL(str(build_standalone(extra_source, cache_dir)))
    i64, fp, vp, cp, i32 = C.c_int64, C.POINTER(C.c_float), C.c_void_p, C.c_char_p, C.c_int
    sig = {
        "braze_dnnl_init": (i32, [cp, i32]),
        "braze_dnnl_runtime": (cp, []),
        "braze_dnnl_set_runtime_m": (None, [i32]),
        "braze_dnnl_runtime_m": (i32, []),
        "braze_dnnl_set_small_m": (None, [i32]),
        "braze_dnnl_small_m": (i32, []),
        "braze_dnnl_set_small_bmm": (None, [i32]),
        "braze_dnnl_small_bmm": (i32, []),
        "braze_dnnl_set_conv_gemm_m": (None, [i32]),
        "braze_dnnl_conv_gemm_m": (i32, []),
        "braze_packed_b_small_m_rows": (i64, [vp]),
        "braze_packed_b_small_m_takes": (i32, [vp, i64, i32]),
        "braze_dnnl_stats": (None, [C.POINTER(i64), C.POINTER(i64)]),
        "braze_pack_b_err": (vp, [vp, i64, i64, i32, cp, i32]),
        "braze_pack_b": (vp, [vp, i64, i64, i32]),
        "braze_free_packed_b": (None, [vp]),
        "braze_matmul": (i32, [i64, i64, i64, vp, vp, vp, vp, i32, vp, cp, i32]),
        "braze_time_matmul": (i64, [i64, i64, i64, i64, vp, vp, i32, vp, vp, i32, vp, cp, i32]),
        "braze_matmul_w": (i32, [i64, i64, i64, vp, vp, i32, vp, vp, i32, vp, cp, i32]),
        "braze_matmul_w_prepare": (i32, [i64, i64, i64, i32, i32, i32, i32]),
        "braze_live_b_new": (vp, [i64, i64, i32, i32, cp, i32]),
        "braze_live_b_free": (None, [vp]),
        "braze_matmul_lw": (i32, [vp, C.c_uint64, i64, vp, vp, vp, vp, i32, vp, cp, i32]),
        "braze_live_check": (i32, [i32, vp, vp, vp]),
        "braze_matmul_lw_prepare": (i32, [vp, i64, i32, i32, i32]),
        "braze_live_b_packs": (i64, [vp]),
        "braze_dnnl_write_tracking": (i32, [C.POINTER(i64), C.POINTER(i64), C.POINTER(i64)]),
        "braze_dnnl_set_write_tracking": (None, [i32]),
        "braze_batch_matmul": (i32, [i64, i64, i64, i64, vp, i32, vp, i32, C.c_float, vp, cp, i32]),
        "braze_batch_matmul_bcast": (i32, [i32, vp, vp, i64, i64, i64, vp, i32, vp, i32, C.c_float, vp, cp, i32]),
        "braze_pack_conv_weights": (vp, [vp, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64,
                                         i64, i64, i32, cp, i32]),
        "braze_free_packed_conv": (None, [vp]),
        "braze_fingerprint": (C.c_uint64, [vp, C.c_size_t]),
        "braze_packed_conv_layouts": (i32, [vp]),
        "braze_conv_live_packs": (i64, [vp]),
        "braze_conv2d": (i32, [i64, i64, i64, vp, vp, vp, vp, i32, i64, i64, vp, cp, i32]),
        "braze_conv_geometry": (vp, [i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i32, cp, i32]),
        "braze_conv2d_w": (i32, [i64, i64, i64, vp, vp, vp, vp, vp, i32, i64, i64, vp, cp, i32]),
        "braze_conv2d_ws": (i32, [i64, i64, i64, vp, vp, vp, vp, vp, vp, i32, i64, i64, vp, cp, i32]),
        "braze_matmul_prepare": (i32, [i64, vp, i32, i32, i32]),
        "braze_conv2d_prepare": (i32, [i64, i64, i64, vp, i32, i32, i32]),
        "braze_time_conv2d": (i64, [i64, i64, i64, i64, vp, vp, i32, vp, vp, i32, i64, i64, vp, cp, i32]),
        "braze_conv2d_bwd_data": (i32, [i64, i64, i64, vp, vp, vp, i64, i64, vp, cp, i32]),
        "braze_conv2d_bwd_weights": (i32, [i64, i64, i64, vp, vp, vp, i64, i64, vp, cp, i32]),
        # 16-bit operands (BRAZE_TYPES)
        "braze_pack_b_typed": (vp, [vp, i32, i32, i64, i64, i32, cp, i32]),
        "braze_pack_b_const": (vp, [vp, i32, i32, i64, i64, i32, cp, i32]),
        "braze_batch_matmul_typed": (i32, [i32, i32, vp, vp, i64, i64, i64, vp, i32, vp, i32, C.c_float, vp, cp,
                                           i32]),
        "braze_pack_conv_typed": (vp, [vp, i32, i32, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64,
                                       i64, i64, i32, cp, i32]),
        "braze_conv_geometry_typed": (vp, [i32, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64, i64,
                                           i32, cp, i32]),
    }
    del fp
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    return lib
