"""``braze tune --artifact DIR``: choose an artifact's kernels again on the CPU it now runs on.

An artifact keeps the module its library was compiled from (``module.braze``, the graph IR after
the graph passes, its constants in ``weights.safetensors`` by name) and the tuning database's
records of its products (``tune.jsonl``, any machine's). Re-tuning:

1. checks every file against meta.json and reads the module back, each constant checked against
   the content hash the text gives it;
2. adds the artifact's records to this machine's tuning database (the lines it lacks: another
   machine's lines are keyed by that machine's setting, so they choose nothing here);
3. compiles the module again from stage ``dispatch`` with ``tune="fast"`` (or ``full``): the
   buckets the database lacks for this machine are measured, the winners become the dispatch
   tables, and the rest of the pipeline runs as before;
4. saves the result as an artifact, whose ``tune.jsonl`` now holds this machine's records too.

The C is built for this CPU's ISA. With a database that already holds this machine's records,
nothing is measured and the C is the C the artifact was compiled from.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import BrazeError
from .artifact import MODULE, TUNE_DB, WEIGHTS
from .load import _check_files, _read_meta

_HINT = "save the model again with this braze (CompiledModel.save, or braze compile -o DIR)"


def _tensor_bytes(file: Path) -> dict:
    """Each tensor's bytes in a safetensors file, by name (safetensors' NumPy API reads no bfloat16 or
    float8; its ``deserialize`` hands the bytes over as they are)."""
    from safetensors import deserialize
    return {name: bytes(t["data"]) for name, t in deserialize(file.read_bytes())}


def read_module(path: Path, meta: dict):
    """The artifact's module, every named constant read from its weights and checked."""
    from ..ir import parse, verify
    from ..ir.graph import ConstantRef, array_digest
    if MODULE not in meta.get("files", {}):
        raise BrazeError(f"{path} was saved by braze {meta.get('braze_version')} without its module ({MODULE}), "
                         "so its kernels cannot be chosen again", hint=_HINT)
    m = parse((path / MODULE).read_text())
    raw = _tensor_bytes(path / WEIGHTS)
    by_name = {n: raw.get(f"c{i}") for i, n in enumerate(meta.get("constants", []))}
    for name, c in list(m.constants.items()):
        if not isinstance(c, ConstantRef):
            continue
        a = by_name.get(name)
        if a is not None:  # as the module's dtype: safetensors' NumPy API reads no bfloat16 or float8
            dt = c.type.dtype.numpy
            a = np.frombuffer(a, dt).reshape(c.type.shape) if len(a) == dt.itemsize * int(np.prod(
                c.type.shape)) and all(isinstance(d, int) for d in c.type.shape) else None
        if a is None or array_digest(a) != c.digest:
            raise BrazeError(f"{path / MODULE}: constant @{name} is "
                             f"{'not in ' + WEIGHTS if a is None else 'not the one in ' + WEIGHTS}", hint=_HINT)
        m.constants[name] = a
    verify(m)
    return m


def _import_records(path: Path, db_file: Path) -> int:
    """Append the artifact's records that ``db_file`` lacks; how many."""
    from ..tune.db import Database
    shipped = Database(path / TUNE_DB)
    local = Database(db_file)
    new = [r for k, r in sorted(shipped.records.items()) if k not in local.records]
    local.append(new)
    return len(new)


def retune(path, out=None, *, mode: str = "fast", budget_s: float = 600.0, threads: int | None = None,
           options=None):
    """Re-tune the artifact at ``path`` on this machine and save it to ``out`` (default: in place).

    Returns ``(compiled model, report)``; the report holds ``imported`` (records added to this
    machine's database), ``before`` and ``after`` (meta.json's dispatch lists) and ``isa``
    (the ISA the artifact was compiled for, and this one's).
    """
    from ..compiler import cpu_target, recompile
    from ..options import Options
    from ..pipeline import tuning_block
    from .artifact import check_save_path

    path = Path(path)
    out = path if out is None else Path(out)
    meta = _read_meta(path)
    if str(meta.get("target", "cpu")).startswith("cuda:"):
        raise BrazeError(f"{path} is a {meta['target']} artifact: its GPU kernels have no dispatch tables to tune",
                         hint="braze tune --artifact re-tunes CPU artifacts")
    if mode not in ("fast", "full"):
        raise BrazeError(f"tuning mode {mode!r} cannot re-tune an artifact", hint="use fast or full")
    check_save_path(out)
    _check_files(path, meta)
    module = read_module(path, meta)
    opts = Options.of(options).replace(tune=mode, tune_budget_s=float(budget_s),
                                       threads=meta.get("threads") if threads is None else threads,
                                       adapt_threads=bool(meta.get("adapt_threads", False)))
    imported = _import_records(path, Path(tuning_block(opts, cpu_target(opts))["db"]))
    cm = recompile(module, "dispatch", options=opts)
    cm.save(out)
    after = json.loads((out / "meta.json").read_text())
    return cm, {"imported": imported, "before": meta.get("dispatch", []), "after": after.get("dispatch", []),
                "isa": (meta.get("isa", {}).get("name"), after.get("isa", {}).get("name"))}


__all__ = ["read_module", "retune"]
