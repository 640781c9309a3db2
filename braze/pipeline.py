"""The pass pipeline for the CPU target.

``run_pipeline(module, passes=CPU_PASSES, debug=None, options=None, instruments=())``
copies the module and runs each pass (``fn(module) -> module``) between the hooks of
its instruments (``Instrument``: ``start``, ``before``, ``after``). The options give
the default ones: ``Verify`` after each pass when ``debug >= 1``, ``FusionLog`` (the
fusion report on ``braze.pipeline`` at DEBUG, on stderr when ``debug >= 2``, see
braze/log.py), and ``Dump`` (``<dump_dir>/NN_<pass>.braze`` and ``fusion.txt``) when
a dump directory is set. ``PassTimer`` and ``PrintAfter`` are there to add. Settings
come from an ``Options`` object (``Options.from_env()`` reads ``BRAZE_DEBUG``/
``BRAZE_DUMP`` when none is given); ``debug=`` overrides its ``debug``.
"""

from __future__ import annotations

import logging
import os
import time
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


class Instrument:
    """Hooks around every pass of ``run_pipeline``: ``start`` sees the input, ``before`` and
    ``after`` each pass (numbered from 1). Subclass and override what you need."""

    def start(self, module: Module) -> None:
        pass

    def before(self, index: int, name: str, module: Module) -> None:
        pass

    def after(self, index: int, name: str, module: Module) -> None:
        pass


class Verify(Instrument):
    """Verify the IR after every pass (``BRAZE_DEBUG >= 1``); the error names the pass."""

    def after(self, index, name, module):
        from .ir import verify
        try:
            verify(module)
        except VerifyError as e:
            raise VerifyError(f"after pass '{name}' (#{index}): {e.what}", where=e.where, hint=e.hint) from e


class Dump(Instrument):
    """Write the IR before the first pass and after each one (``NN_<pass>.braze``), and the
    fusion report after ``fuse`` (``fusion.txt``), to a directory (``BRAZE_DUMP``)."""

    def __init__(self, directory: str):
        self.dir = directory

    def start(self, module):
        os.makedirs(self.dir, exist_ok=True)
        _logging.get("dump").info("BRAZE_DUMP: writing the IR after each pass to %s", os.path.abspath(self.dir))
        _write(os.path.join(self.dir, "00_input.braze"), str(module))

    def after(self, index, name, module):
        _write(os.path.join(self.dir, f"{index:02d}_{name}.braze"), str(module))
        if name == "fuse":
            _write(os.path.join(self.dir, "fusion.txt"), fusion_report(module))


class FusionLog(Instrument):
    """Log the fusion report after ``fuse`` (``braze.pipeline``, DEBUG; stderr at ``BRAZE_DEBUG >= 2``)."""

    def after(self, index, name, module):
        if name == "fuse" and _log.isEnabledFor(logging.DEBUG):
            _log.debug("%s", fusion_report(module).rstrip("\n"))


class PassTimer(Instrument):
    """Seconds per pass, in order: ``times`` is a list of (pass name, seconds)."""

    def __init__(self):
        self.times: list[tuple[str, float]] = []
        self._t0 = 0.0

    def before(self, index, name, module):
        self._t0 = time.perf_counter()

    def after(self, index, name, module):
        self.times.append((name, time.perf_counter() - self._t0))

    def report(self) -> str:
        total = sum(t for _, t in self.times) or 1e-30
        return ", ".join(f"{n} {t * 1e3:.1f} ms ({100 * t / total:.0f}%)" for n, t in self.times)


class PrintAfter(Instrument):
    """Print the IR after the named passes (every pass when ``names`` is None) to ``stream``."""

    def __init__(self, names=None, stream=None):
        self.names = None if names is None else set(names)
        self.stream = stream

    def after(self, index, name, module):
        if self.names is None or name in self.names:
            import sys
            print(f"// after pass '{name}' (#{index})\n{module}", file=self.stream or sys.stderr)


def default_instruments(opts: Options) -> list[Instrument]:
    """The instruments the options ask for: verify at debug >= 1, the fusion log, the dump."""
    out: list[Instrument] = [Verify()] if opts.debug >= 1 else []
    out.append(FusionLog())
    if opts.dump_dir:
        out.append(Dump(opts.dump_dir))
    return out


def run_pipeline(module: Module, passes: Sequence[Pass] | None = None, debug: int | None = None,
                 options: Options | None = None, copy: bool = True,
                 instruments: Sequence[Instrument] = ()) -> Module:
    opts = options if options is not None else Options.from_env()
    if debug is not None:
        opts = opts.replace(debug=debug)
    passes = CPU_PASSES if passes is None else list(passes)
    _logging.enable_debug_output(opts.debug)
    hooks = default_instruments(opts) + list(instruments)
    m = copy_module(module) if copy else module
    for h in hooks:
        h.start(m)
    for i, p in enumerate(passes, 1):
        name = pass_name(p)
        for h in hooks:
            h.before(i, name, m)
        out = p(m)
        m = out if out is not None else m
        for h in hooks:
            h.after(i, name, m)
    return m


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


__all__ = ["CPU_PASSES", "run_pipeline", "Options", "pass_name", "Instrument", "Verify", "Dump", "FusionLog",
           "PassTimer", "PrintAfter", "default_instruments"]
