"""The pass pipeline for the CPU target.

``run_pipeline(module, passes=CPU_PASSES, debug=None, options=None)`` copies the
module, runs each pass (``fn(module) -> module``), verifies the IR after each one
when ``debug >= 1``, writes the IR after each pass to ``<dump_dir>/NN_<pass>.braze``
and the fusion report to ``<dump_dir>/fusion.txt`` when a dump directory is set,
and logs the fusion report (``braze.pipeline``, DEBUG; on stderr when ``debug >= 2``,
see braze/log.py). Settings come from
an ``Options`` object (``Options.from_env()`` reads ``BRAZE_DEBUG``/``BRAZE_DUMP``
when none is given); ``debug=`` overrides its ``debug``.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Sequence

from . import log as _logging
from .errors import VerifyError
from .ir.graph import Module
from .options import Options
from .passes import (assign_memory, canonicalize, channels_last, constant_fold, recognize_patterns, copy_module, cse, dce, decompose, fuse,
                     fusion_report)

Pass = Callable[[Module], Module]

_log = _logging.get("pipeline")

# canonicalize first so folding and CSE see the simplest form; channels_last after
# batch norms are folded into convs (its permute pairs cancel in the next canonicalize);
# decompose after the clean-up (sdpa's pieces then get canonicalized and CSE'd: one mask
# per model, not one per layer); fuse last, then drop what fusion made dead and plan the arena.
CPU_PASSES: list[Pass] = [canonicalize, constant_fold, cse, dce, recognize_patterns, channels_last, decompose, canonicalize, cse, dce,
                          fuse, dce, assign_memory]


def pass_name(p) -> str:
    return getattr(p, "__name__", type(p).__name__)


def run_pipeline(module: Module, passes: Sequence[Pass] | None = None, debug: int | None = None,
                 options: Options | None = None, copy: bool = True) -> Module:
    from .ir import verify
    opts = options if options is not None else Options.from_env()
    if debug is not None:
        opts = opts.replace(debug=debug)
    passes = CPU_PASSES if passes is None else list(passes)
    _logging.enable_debug_output(opts.debug)
    m = copy_module(module) if copy else module
    dump = opts.dump_dir
    if dump:
        os.makedirs(dump, exist_ok=True)
        _logging.get("dump").info("BRAZE_DUMP: writing the IR after each pass to %s", os.path.abspath(dump))
        _write(os.path.join(dump, "00_input.braze"), str(m))
    for i, p in enumerate(passes, 1):
        name = pass_name(p)
        out = p(m)
        m = out if out is not None else m
        if opts.debug >= 1:
            try:
                verify(m)
            except VerifyError as e:
                raise VerifyError(f"after pass '{name}' (#{i}): {e.what}", where=e.where, hint=e.hint) from e
        if dump:
            _write(os.path.join(dump, f"{i:02d}_{name}.braze"), str(m))
        if (p is fuse or name == "fuse") and (dump or _log.isEnabledFor(logging.DEBUG)):
            report = fusion_report(m)
            if dump:
                _write(os.path.join(dump, "fusion.txt"), report)
            _log.debug("%s", report.rstrip("\n"))
    return m


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


__all__ = ["CPU_PASSES", "run_pipeline", "Options", "pass_name"]
