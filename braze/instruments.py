"""Instruments: hooks the pipeline driver runs around every stage (braze/pipeline.py).

A stage's IR is a ``Module`` (graph passes), a ``Kernels`` set (loop-IR stages)
or a ``NativeSource`` (emit); ``str()`` of each is its text. The ``BRAZE_DEBUG``
levels and ``BRAZE_DUMP`` are these hooks (``default_instruments``).
"""

from __future__ import annotations

import logging
import sys
import time

from . import log as _logging
from .errors import VerifyError
from .ir.graph import Module

_log = _logging.get("pipeline")


class Instrument:
    """Hooks around every stage: ``start`` sees the input module, ``before`` and ``after``
    each stage (numbered from 1, over the whole pipeline), ``report`` a stage's log (the
    fusion log), ``finish`` the last stage's IR, ``abort`` a stage that raised. Subclass and
    override what you need."""

    def start(self, module: Module) -> None:
        pass

    def before(self, index: int, name: str, ir) -> None:
        pass

    def after(self, index: int, name: str, ir) -> None:
        pass

    def report(self, index: int, name: str, log) -> None:
        pass

    def finish(self, ir) -> None:
        pass

    def abort(self, index: int, name: str) -> None:
        pass


class Verify(Instrument):
    """Verify the graph IR after every pass (``BRAZE_DEBUG >= 1``); the error names the pass."""

    def after(self, index, name, ir):
        if not isinstance(ir, Module):
            return
        from .ir import verify
        try:
            verify(ir)
        except VerifyError as e:
            raise VerifyError(f"after pass '{name}' (#{index}): {e.what}", where=e.where, hint=e.hint) from e


class LogReports(Instrument):
    """Each stage's log (the fusion report) on ``braze.pipeline`` at DEBUG (stderr at ``BRAZE_DEBUG >= 2``)."""

    def report(self, index, name, log):
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("%s", str(log).rstrip("\n"))


class PassTimer(Instrument):
    """Seconds per stage, in order: ``times`` is a list of (stage name, seconds)."""

    def __init__(self):
        self.times: list[tuple[str, float]] = []
        self._t0 = 0.0

    def before(self, index, name, ir):
        self._t0 = time.perf_counter()

    def after(self, index, name, ir):
        self.times.append((name, time.perf_counter() - self._t0))

    def report_text(self) -> str:
        total = sum(t for _, t in self.times) or 1e-30
        return ", ".join(f"{n} {t * 1e3:.1f} ms ({100 * t / total:.0f}%)" for n, t in self.times)


class PrintAfter(Instrument):
    """Print the IR after the named stages (every stage when ``names`` is None) to ``stream``."""

    def __init__(self, names=None, stream=None):
        self.names = None if names is None else set(names)
        self.stream = stream

    def after(self, index, name, ir):
        if self.names is None or name in self.names:
            print(f"// after stage '{name}' (#{index})\n{ir}", file=self.stream or sys.stderr)


class RuleCounter(Instrument):
    """Hits of each named rewrite rule over the graph passes (``stats.report()``); logged at the
    end on ``braze.pipeline`` at DEBUG (stderr at ``BRAZE_DEBUG >= 2``)."""

    def __init__(self):
        from .passes.rules import RuleStats
        self.stats = RuleStats()
        self._block = None

    def before(self, index, name, ir):
        from .passes.rules import collect_rule_stats
        self._block = collect_rule_stats(self.stats)
        self._block.__enter__()

    def after(self, index, name, ir):
        if self._block is not None:
            self._block.__exit__(None, None, None)
            self._block = None

    def abort(self, index, name):  # a pass raised: close the collector all the same
        self.after(index, name, None)

    def finish(self, ir):
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("rewrite rules:\n%s", self.stats.report().rstrip("\n"))


__all__ = ["Instrument", "Verify", "LogReports", "PassTimer", "PrintAfter", "RuleCounter"]
