"""``CompiledModel.save``: a compiled model as one relocatable directory (docs/deployment.md).

The directory holds ``libbraze_model.so`` (the model's C, compiled again with the loader of
``csrc/braze_artifact.c`` and a block of this artifact's facts), ``braze_model.h`` and
``braze_abi.h``, ``weights.safetensors``, ``meta.json`` and, for a model that calls oneDNN,
``libbraze_dnnl-<key>.so`` (helper_name) and ``libdnnl.so.3``: every library it needs beyond the C and C++
runtimes and OpenMP, found through ``$ORIGIN``, so the directory can move. A CUDA target's
artifact holds its kernels in the library (and as ``kernels.cubin`` / ``kernels.ptx`` beside it,
for tools) and needs the GPU's driver alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

from ..errors import BrazeError
from ..ir.types import DType
from ..runtime.digest import sha256_file
from ..runtime.tensors import DTYPE_CODE

ARTIFACT_ABI = 1  # the artifact's layout and C API; braze.load and the loader refuse others
LIBRARY = "libbraze_model.so"
WEIGHTS = "weights.safetensors"
META = "meta.json"
HEADER = "braze_model.h"
MODULE = "module.braze"  # the module after the graph passes: `braze tune --artifact` compiles it again
TUNE_DB = "tune.jsonl"  # the tuning database's records of this model's products (braze/tune/db.py)
_CSRC = Path(__file__).resolve().parent / "csrc"


def helper_name(isa) -> str:
    """The file name and soname of an artifact's copy of the oneDNN helper: one per helper build
    (source, oneDNN, ISA flags). The dynamic loader takes a library whose soname it already holds
    for any other that names it, so two artifacts saved at two ISA levels, loaded in one process,
    would otherwise both run the first one's kernels."""
    from ..extern import onednn
    key = hashlib.sha256(" ".join([onednn.helper_build_id(), *isa.cflags]).encode()).hexdigest()[:16]
    return f"libbraze_dnnl-{key}.so"


# cpuinfo flag -> __builtin_cpu_supports name
_CPU_NAME = {"avx512_bf16": "avx512bf16", "avx512_vnni": "avx512vnni", "avx512_fp16": "avx512fp16",
             "sse4_1": "sse4.1", "sse4_2": "sse4.2", "avx512_4fmaps": "avx5124fmaps",
             "avx512_vp2intersect": "avx512vp2intersect"}


def _copy(src, dst: Path) -> None:
    """Copy ``src`` over ``dst`` by a rename: a process that has the old library loaded (an
    artifact re-saved in place) keeps its mapping of the old file."""
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _c_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid C string literal for these names


def _weights(names: list[str], arrays: list[np.ndarray]) -> tuple[bytes, list[tuple[int, int]]]:
    """safetensors bytes of the constants (named c0, c1, ... in braze_create order; the IR
    names in the metadata) and each one's (offset, nbytes) in the data section."""
    from safetensors.numpy import save
    # the narrow types (float8, int4, ...) as their bits: safetensors has no int4 or float4 type, and the
    # library takes bytes; retune.read_module reads every constant as the module's dtype again
    tensors = {f"c{i}": np.ascontiguousarray(a).view(np.uint8) if DType.from_numpy(a.dtype).is_narrow
               else np.ascontiguousarray(a) for i, a in enumerate(arrays)}
    blob = save(tensors, metadata={"braze_names": json.dumps(names)})
    hlen = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + hlen])
    spans = []
    for i in range(len(arrays)):
        b, e = header[f"c{i}"]["data_offsets"]
        spans.append((b, e - b))
    return blob, spans


def _dims(t) -> tuple[list[int], list[str]]:
    return ([d if isinstance(d, int) else -1 for d in t.shape],
            ["" if isinstance(d, int) else str(d) for d in t.shape])


def _c_block(model, entry: str, spans, files: dict[str, str], weights_sha: str, isa) -> str:
    """This artifact's facts as C, for braze_artifact.c."""
    lines = [f"#define BZA_ENTRY {entry}", "#define BZA_CREATE braze_create", "#define BZA_DESTROY braze_destroy",
             f"#define BZA_N_CONST {len(spans)}", f"#define BZA_ABI_VERSION {ARTIFACT_ABI}",
             f"#define BZA_THREADS {int(model.options.threads or 0)}",
             f"#define BZA_ADAPT {int(model.options.adapt_threads)}",
             f"#define BZA_BRAZE_VERSION {_c_str(_version())}", f"#define BZA_ISA {_c_str(isa.name)}",
             f"static const int64_t bza_const_offset[] = {{{', '.join(str(o) for o, _ in spans) or '0'}}};",
             f"static const int64_t bza_const_nbytes[] = {{{', '.join(str(n) for _, n in spans) or '0'}}};",
             f"static const char bza_weights_sha256[] = {_c_str(weights_sha)};",
             f"#define BZA_N_FILES {len(files)}",
             "static const char *const bza_files[][2] = {" +
             ", ".join(f"{{{_c_str(k)}, {_c_str(v)}}}" for k, v in files.items()) + "};",
             "#pragma GCC push_options", "#pragma GCC target(\"arch=x86-64\")",
             "static const char *bza_cpu_missing(void) {", "    __builtin_cpu_init();"]
    for f in sorted(isa.features):
        name = _CPU_NAME.get(f, f)
        lines.append(f"    if (!__builtin_cpu_supports({_c_str(name)})) return {_c_str(f)};")
    lines += ["    return NULL;", "}", "#pragma GCC pop_options"]
    f = model.module.main
    for side, values, infos in (("in", f.params, model.inputs), ("out", f.results, model.outputs)):
        dims, names, first = [], [], []
        for v in values:
            d, n = _dims(v.type)
            first.append(len(dims))
            dims += d
            names += n
        lines += [f"#define BZA_N_{side.upper()} {len(values)}",
                  f"static const char *const bza_{side}_name[] = {{{', '.join(_c_str(i.name) for i in infos) or '0'}}};",
                  f"static const int32_t bza_{side}_dtype[] = {{{', '.join(str(DTYPE_CODE[v.type.dtype]) for v in values) or '0'}}};",
                  f"static const int32_t bza_{side}_ndim[] = {{{', '.join(str(len(v.type.shape)) for v in values) or '0'}}};",
                  f"static const int32_t bza_{side}_first[] = {{{', '.join(map(str, first)) or '0'}}};",
                  f"static const int64_t bza_{side}_dims[] = {{{', '.join(map(str, dims)) or '0'}}};",
                  f"static const char *const bza_{side}_dim_names[] = {{{', '.join(map(_c_str, names)) or '0'}}};"]
    return "\n".join(lines) + "\n"


def _version() -> str:
    from .. import __version__
    return __version__


def check_save_path(path: Path) -> None:
    """An artifact may be written at ``path``: a new or empty directory, or an artifact to replace."""
    if path.exists() and not path.is_dir():
        raise BrazeError(f"cannot save the model to {path}: it is a file", hint="choose a directory path")
    if path.is_dir() and any(path.iterdir()) and not (path / META).exists():
        raise BrazeError(f"cannot save the model to {path}: the directory is not empty and is not a braze artifact",
                         hint="choose a new or empty directory (an existing artifact is replaced)")


def save(model, path) -> Path:
    """Write ``model`` (a CompiledModel) as an artifact directory at ``path``; returns it."""
    from ..codegen.isa import isa_at, level_isa
    from ..extern import onednn
    from ..runtime.compiler import compile_shared

    native = model._native
    f = model.module.main
    if model.module.donated:
        raise BrazeError("this model writes results into inputs its caller donated (Module.donated: a plug-in "
                         "region's buffers); an artifact's caller allocates every output",
                         hint="compile the model again without a donated block to save it")
    entry = next(e.symbol for e in native.entries if e.function.name == f.name)
    path = Path(path)
    check_save_path(path)
    path.mkdir(parents=True, exist_ok=True)
    cache = model.options.cache_dir
    cuda = native.cuda_binary  # a CUDA target's kernels: in the library, and beside it for tools
    # what the C was generated for: the host code of a CUDA target runs on the GPU machine's CPU,
    # whatever it is; a CPU target's is the level its target named (the host's best for "cpu")
    isa = level_isa("scalar") if cuda is not None else isa_at(native.isa)
    t0 = time.perf_counter()
    files: dict[str, str] = {}  # name -> sha256, for the loader (all but the library and meta.json)

    names = list(native.constants)
    arrays = [np.asarray(model.module.constants[n]) for n in names]
    blob, spans = _weights(names, arrays)
    (path / WEIGHTS).write_bytes(blob)
    weights_sha = hashlib.sha256(blob).hexdigest()
    files[WEIGHTS] = weights_sha

    link_inputs = []
    if native.uses_library:
        helper_file = helper_name(isa)
        helper = compile_shared(onednn.helper_text(), name="braze_dnnl", include_dirs=onednn.include_dirs(),
                                library_dirs=onednn.library_dirs(), libraries=onednn.libraries(), rpaths=["$ORIGIN"],
                                extra_cflags=[*onednn.extra_link_flags(), f"-Wl,-soname,{helper_file}"],
                                cache_dir=cache, filename=helper_file, log_channel="cache.helper", isa=isa)
        _copy(helper, path / helper_file)
        lib = onednn.locate().library
        dnnl_name = _soname(lib)
        if not dnnl_name:
            raise BrazeError(f"cannot read the SONAME of {lib}, so the artifact would not find it",
                             hint="install binutils (readelf), which the C toolchain normally brings")
        _copy(os.path.realpath(lib), path / dnnl_name)
        files[helper_file] = sha256_file(path / helper_file)
        files[dnnl_name] = sha256_file(path / dnnl_name)
        link_inputs = [str(path / helper_file)]
    if cuda is not None:
        for name, data in (("kernels.cubin", cuda.cubin), ("kernels.ptx", cuda.ptx)):
            (path / name).write_bytes(data)
            files[name] = sha256_file(path / name)
    for h in (HEADER, "braze_abi.h"):
        src = _CSRC / h if h == HEADER else Path(__file__).resolve().parents[1] / "codegen" / "include" / h
        _copy(src, path / h)
        files[h] = sha256_file(path / h)

    head = ""
    if cuda is not None:
        from ..codegen.cuda_host import cuda_blob
        head = cuda_blob(cuda)
    source = (head + native.source + "\n/* ---- braze artifact ---- */\n#include \"braze_model.h\"\n" +
              _c_block(model, entry, spans, files, weights_sha, isa) +
              '#line 1 "braze_artifact.c"\n' + (_CSRC / "braze_artifact.c").read_text())
    include = [str(_CSRC)] + (onednn.model_build_args(cache)["include_dirs"] if native.uses_library else [])
    so = compile_shared(source, name=f"{model.module.main.name} artifact", include_dirs=include,
                        link_inputs=link_inputs, rpaths=["$ORIGIN"], cache_dir=cache, filename=LIBRARY,
                        isa=isa)
    _copy(so, path / LIBRARY)
    # neither is read to run the model (the C loader does not know them); braze.load checks their hashes too
    records = _tuning_records(model)
    (path / MODULE).write_text(_module_text(model.module))
    (path / TUNE_DB).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    kept = {n: sha256_file(path / n) for n in (MODULE, TUNE_DB)}

    meta = {
        "format": "braze-artifact", "abi_version": ARTIFACT_ABI, "braze_version": _version(),
        "onednn_version": ".".join(map(str, onednn.locate().version or ())) or None if native.uses_library else None,
        "threads": model.options.threads,
        "adapt_threads": model.options.adapt_threads,
        "isa": {"name": isa.name, "features": sorted(isa.features), "cflags": list(isa.cflags)},
        # the precision policy and the dtypes oneDNN ran natively where it was compiled (a bf16 GEMM on a
        # CPU without AVX512_BF16 still runs, on oneDNN's slower kernels)
        "precision": {"policy": model.module.precision.get("policy", "fp32"),
                      "library": list(model.module.precision.get("library", ("float32",))),
                      "keep": list(model.module.precision.get("keep", ()))},
        "target": native.isa if cuda is not None else "cpu",
        **({"cuda": {"arch": cuda.arch, "nvrtc": cuda.nvrtc}} if cuda is not None else {}),
        "entry": entry,
        "inputs": [i.to_json() for i in model.inputs],
        "outputs": [o.to_json() for o in model.outputs],
        "symbols": {n: {"min": s.lo, "max": s.hi,
                        # a size the model decides when it runs (Module.data_symbols): its upper bound
                        **({"decided_at_most": str(model.module.data_symbols[n])}
                           if n in model.module.data_symbols else {})}
                    for n, s in model.module.symbols.items()},
        "constraints": _constraints(model.module),
        "constants": names,
        "fusion": _fusion(model.module),
        # each GEMM's kernel per range of M (braze/tune), and whether measurements chose them
        "dispatch": [{"call": c, "product": p, "table": [list(x) for x in t]} for c, p, t in model.dispatch_tables()],
        "tuning": {"mode": model.options.tune, "measured": _measured(model), "records": len(records),
                   "settings": len({r["env"] for r in records})},
        "files": {**files, **kept, LIBRARY: sha256_file(path / LIBRARY)},
        "saved": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (path / META).write_text(json.dumps(meta, indent=1) + "\n")
    from .. import log as _logging
    _logging.get("deploy").info("saved @%s to %s in %.2f s", f.name, path, time.perf_counter() - t0)
    return path


def _measured(model) -> bool:
    """Whether any dispatch table differs from its default rule (a measurement chose it)."""
    from ..tune.products import dispatched_calls
    return any(c is not None and tuple(tuple(p) for p in n.attrs["dispatch"]) != c.default
               for n, c in dispatched_calls(model.module))


def _tuning_records(model) -> list[dict]:
    """The tuning database's records (any machine's) of the model's products, in a fixed order:
    the measurements another CPU's `braze tune --artifact` starts from."""
    from ..tune.db import Database
    from ..tune.products import dispatched_calls
    db = model.module.tuning.get("db") if model.module.tuning else None
    if not db:
        return []
    sites = {c.site.key for _, c in dispatched_calls(model.module) if c is not None and c.site is not None}
    records = Database(db).records
    return [records[k] for k in sorted(records) if k[1] in sites]


def _module_text(module) -> str:
    """The module as IR text, its constants named (their data is in the weights, by the same
    names), without the tuning block: that names files of the machine that compiled it."""
    import copy
    m = copy.copy(module)
    m.tuning = {}
    return m.to_text(inline_limit=16)


def _fusion(module) -> dict[str, int]:
    """How many kernels of each kind the entry runs (gemm, conv, stitch, pointwise, ...)."""
    kinds: dict[str, int] = {}
    for n in module.main.nodes:
        k = n.attrs.get("kind")
        if isinstance(k, str):
            kinds[k] = kinds.get(k, 0) + 1
    return kinds


def _constraints(module) -> list[str]:
    """The module's constraints as the IR printer writes them (its ``constraints { }`` block)."""
    if not module.constraints.facts:
        return []
    lines = module.to_text(inline_limit=0).splitlines()
    start = lines.index("  constraints {") + 1
    return [ln.strip() for ln in lines[start:lines.index("  }", start)]]


def _soname(lib: Path) -> str | None:
    """The DT_SONAME of an ELF shared library (libdnnl.so -> libdnnl.so.3): the name the
    helper's DT_NEEDED holds, so the copy must have it."""
    import subprocess
    try:
        out = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        if "(SONAME)" in line and "[" in line:
            return line.split("[", 1)[1].rstrip("]").strip()
    return None
