"""``BRAZE_DUMP``: every stage's text in one directory, and reading a stage back to resume.

The directory holds ``00_input.braze``, then one file per stage, numbered in
pipeline order: ``NN_<pass>.braze`` (graph IR), ``NN_<stage>.loop`` (every
kernel's loop IR), ``NN_emit.c`` (the C source, also as ``model.c``; a CUDA target's kernels as ``model.cu``), plus
``fusion.txt`` (the fusion log), ``constants/<sha256>.npy`` (each constant the
IR names by hash, once) and ``target.json`` (the ISA and whether per-kernel
counters were compiled in: the C depends on both). A stage file with the constants is a repro:
``braze.pipeline.resume_c(path)`` continues from it and writes the same C.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from . import log as _logging
from .errors import BrazeError
from .instruments import Instrument
from .ir.graph import ConstantRef, Module, array_digest
from .ir.types import ML_DTYPES

STAGE_FILE = re.compile(r"^(\d\d)_([A-Za-z0-9_]+)\.(braze|loop|c)$")


_STAGE_FILE = re.compile(r"^\d\d_\w+\.(braze|loop|c)$")


class Dump(Instrument):
    """Write the input and each stage's text to ``directory`` (``BRAZE_DUMP``)."""

    def __init__(self, directory: str, inline_limit: int = 16):
        self.dir = Path(directory)
        self.inline_limit = inline_limit
        self._written: dict[int, object] = {}  # id -> the array (kept, so no id is reused)

    def start(self, module):
        (self.dir / "constants").mkdir(parents=True, exist_ok=True)
        # an earlier compile's stage files (a stage list since changed, say) would read as this one's
        for f in self.dir.iterdir():
            if _STAGE_FILE.match(f.name) and f.is_file():
                f.unlink()
        _logging.get("dump").info("BRAZE_DUMP: writing every stage's text to %s", self.dir.resolve())
        self._module("00_input.braze", module)

    def after(self, index, name, ir):
        if isinstance(ir, Module):
            self._module(f"{index:02d}_{name}.braze", ir)
        elif name == "emit":
            _write(self.dir / f"{index:02d}_{name}.c", ir.source)
            _write(self.dir / "model.c", ir.source)
            if ir.cuda_source:  # a CUDA target's kernels (NVRTC compiles them at build)
                _write(self.dir / "model.cu", ir.cuda_source)
            _write(self.dir / "target.json", json.dumps({"isa": ir.isa, "profile": ir.profile}) + "\n")
        else:
            _write(self.dir / f"{index:02d}_{name}.loop", str(ir))

    def report(self, index, name, log):
        _write(self.dir / ("fusion.txt" if name == "fuse" else f"{index:02d}_{name}.txt"), str(log))

    def _module(self, filename: str, m: Module) -> None:
        _write(self.dir / filename, m.to_text(self.inline_limit))
        for c in m.constants.values():
            if isinstance(c, ConstantRef) or np.asarray(c).size <= self.inline_limit:
                continue
            key = id(c)
            if key in self._written:
                continue
            self._written[key] = c
            path = self.dir / "constants" / f"{array_digest(c)}.npy"
            if not path.exists():
                np.save(path, np.asarray(c), allow_pickle=False)


def _write(path: Path, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def stage_of(path) -> tuple[int, str, str]:
    """(index, stage name, kind) of a dumped stage file, e.g. ``14_assign_memory.braze``."""
    m = STAGE_FILE.match(Path(path).name)
    if not m:
        raise BrazeError(f"{os.fspath(path)!r} is not a stage file of a BRAZE_DUMP directory",
                         hint="pass a file named NN_<stage>.braze or NN_<stage>.loop from the dump")
    return int(m.group(1)), m.group(2), m.group(3)


def read_target(directory) -> dict:
    """What the dump's C was generated for (``target.json``): ``isa`` and ``profile``; {} if absent."""
    f = Path(directory) / "target.json"
    try:
        return json.loads(f.read_text()) if f.exists() else {}
    except (OSError, ValueError) as e:
        raise BrazeError(f"cannot read {f}: {e}", hint="dump again with BRAZE_DUMP set") from None


def read_module(path) -> Module:
    """A dumped graph-IR stage with its constants (from ``constants/`` beside it), verified."""
    from .ir import parse, verify
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise BrazeError(f"cannot read {str(path)!r}: {e.strerror}", hint="check the path") from None
    m = parse(text)
    store = path.parent / "constants"
    for name, c in list(m.constants.items()):
        if not isinstance(c, ConstantRef):
            continue
        f = store / f"{c.digest}.npy"
        if not f.exists():
            raise BrazeError(f"constant @{name} of {path.name} is not in the dump ({f} is missing)",
                             hint="dump again with BRAZE_DUMP set; the directory must keep its constants/ folder")
        a = np.load(f, allow_pickle=False)
        if a.dtype.kind == "V" and a.dtype.itemsize == c.type.dtype.itemsize and c.type.dtype in ML_DTYPES:
            a = a.view(c.type.dtype.numpy)  # .npy keeps ml_dtypes' bfloat16 and float8 as raw bytes
        if tuple(a.shape) != tuple(c.type.shape) or str(a.dtype) != c.type.dtype.name:
            raise BrazeError(f"constant @{name} in {f} is {a.dtype}{list(a.shape)}, but {path.name} declares it "
                             f"{c.type}", hint="the dump's constants/ folder is from another compile; dump again")
        m.constants[name] = a
    verify(m)  # edited text: an ill-typed node would read out of bounds natively
    return m


def read_kernels(path) -> list:
    """The kernels of a dumped loop-IR stage."""
    from .ir.loop_parser import parse_kernels
    try:
        return parse_kernels(Path(path).read_text())
    except OSError as e:
        raise BrazeError(f"cannot read {os.fspath(path)!r}: {e.strerror}", hint="check the path") from None


def last_graph_stage(directory) -> Path:
    """The last graph-IR file of a dump (the module the loop-IR stages belong to)."""
    files = sorted(p for p in Path(directory).iterdir() if STAGE_FILE.match(p.name) and p.suffix == ".braze")
    if not files:
        raise BrazeError(f"{os.fspath(directory)!r} holds no graph-IR stage (NN_<pass>.braze)",
                         hint="resume from a complete BRAZE_DUMP directory")
    return files[-1]


__all__ = ["Dump", "stage_of", "read_module", "read_kernels", "read_target", "last_graph_stage"]
