"""What plug-in mode tells the user: one warning per op that runs in PyTorch, and under
``BRAZE_DEBUG >= 1`` the partition of every graph and each part's share of the time."""

from __future__ import annotations

import atexit
import threading
import time
import warnings

from .. import log as _logging
from ..errors import BrazeWarning

_log = _logging.get("plugin")
_lock = threading.Lock()
_warned: set[str] = set()  # ops already reported in this process
_graphs: list["GraphTimes"] = []  # graphs timed under BRAZE_DEBUG, reported at exit


def op_name(node) -> str:
    from ..frontend.torch.aten import op_display_name
    return op_display_name(node.target)


def where(node) -> str:
    from ..frontend.torch.common import source_loc
    loc = source_loc(node)
    if loc.file and loc.line:
        return f"{loc.file}:{loc.line}" + (f": {loc.code}" if loc.code else "")
    return str(loc)


def warn_once(key: str, message: str, node=None) -> bool:
    """Warn with ``message`` unless ``key`` was reported before in this process; the warning
    points at ``node``'s line in the user's source when known."""
    with _lock:
        if key in _warned:
            return False
        _warned.add(key)
    loc = None
    if node is not None:
        from ..frontend.torch.common import source_loc
        loc = source_loc(node)
    if loc is not None and loc.file and loc.line:
        warnings.warn_explicit(BrazeWarning(message), BrazeWarning, loc.file, loc.line, module="braze.plugin")
    else:
        warnings.warn(BrazeWarning(message), stacklevel=3)
    return True


def warn_torch_op(node, reason: str) -> None:
    op = op_name(node)
    warn_once(f"{op}: {reason}", f"braze runs {op} in PyTorch ({reason}); first seen at {where(node)}", node)


def region_failed(ops: list[str], e: Exception, node=None) -> None:
    """A region braze could not compile runs in PyTorch: say so once per reason, in one line (the
    C compiler's whole output goes to the log)."""
    from ..errors import BrazeError
    what = getattr(e, "what", None) or f"{type(e).__name__}: {e}"
    first = what.strip().splitlines()[0] if what.strip() else type(e).__name__
    if not isinstance(e, BrazeError):  # a bug in braze, not a limit: the traceback goes to the log
        first = f"an internal error in braze, {first}; please report it"
    _log.info("braze plugin: region of %d ops not compiled: %s", len(ops), what,
              exc_info=None if isinstance(e, BrazeError) else e)
    at = f"; first op at {where(node)}" if node is not None else ""
    warn_once(f"region:{first}", f"braze runs a region of {len(ops)} ops in PyTorch ({first}){at}; "
              "BRAZE_DEBUG=1 logs the details", node)


def call_failed(region: str, e: Exception) -> None:
    """A call of a compiled region that braze's library refused or failed ran in PyTorch."""
    from ..errors import BrazeError
    what = getattr(e, "what", None) or f"{type(e).__name__}: {e}"
    first = what.strip().splitlines()[0] if what.strip() else type(e).__name__
    _log.info("braze plugin: %s: a call ran in PyTorch: %s", region, what,
              exc_info=None if isinstance(e, BrazeError) else e)
    warn_once(f"call:{region}:{first}", f"braze could not run a compiled region at this call ({first}); PyTorch "
              "ran it (and runs every call braze cannot); BRAZE_DEBUG=1 logs the details")


def describe_partition(title: str, regions: list, torch_nodes: list) -> str:
    """The partition of one graph: each braze region's ops, and the ops left to torch."""
    lines = [f"{title}: {len(regions)} braze region(s), {len(torch_nodes)} op(s) in torch"]
    for r in regions:
        lines.append(f"  braze {r.name}: {len(r.ops)} ops ({_counts(r.ops)})")
    if torch_nodes:
        lines.append(f"  torch: {_counts([op_name(n) for n in torch_nodes])}")
    return "\n".join(lines)


def _counts(names: list[str], top: int = 8) -> str:
    c: dict[str, int] = {}
    for n in names:
        c[n] = c.get(n, 0) + 1
    items = sorted(c.items(), key=lambda kv: -kv[1])
    text = ", ".join(f"{k.removeprefix('aten.')} x{v}" if v > 1 else k.removeprefix("aten.") for k, v in items[:top])
    return text + (f", ... {len(items) - top} more kinds" if len(items) > top else "")


class GraphTimes:
    """Seconds spent per braze region and in the whole graph, for the BRAZE_DEBUG report."""

    def __init__(self, title: str, regions: list):
        self.title = title
        self.regions = {r.name: 0.0 for r in regions}
        self._objects = list(regions)  # their libraries' kernel timers, compiled in at BRAZE_DEBUG >= 3
        self.total = 0.0
        self.calls = 0
        with _lock:
            if not _graphs:
                atexit.register(_report_times)
            _graphs.append(self)

    def timed_region(self, region):
        name, times = region.name, self.regions

        def call(*args):
            t0 = time.perf_counter()
            try:
                return region(*args)
            finally:
                times[name] += time.perf_counter() - t0
        call.__name__ = name
        return call

    def timed_graph(self, fn):
        def call(args):
            t0 = time.perf_counter()
            try:
                return fn(args)
            finally:
                self.total += time.perf_counter() - t0
                self.calls += 1
        call._boxed_call = True
        return call

    def report(self) -> str:
        total = self.total or 1e-30
        inside = sum(self.regions.values())
        parts = [f"{n} {100 * s / total:.0f}%" for n, s in self.regions.items()]
        return (f"{self.title}: {self.calls} calls, {self.total * 1e3:.2f} ms; braze " + (", ".join(parts) or "-")
                + f"; torch and glue {100 * max(0.0, self.total - inside) / total:.0f}%")

    def kernel_reports(self) -> str:
        """Each compiled region's slowest kernels, where its library has timers (BRAZE_DEBUG >= 3)."""
        from ..errors import BrazeError
        parts = []
        for r in self._objects:
            model = getattr(r, "model", None)
            if model is None:
                continue
            try:
                parts.append(f"{self.title}, {r.name}:\n{model.profile_report()}")
            except BrazeError:  # compiled without timers
                continue
        return "\n".join(parts)


def time_report() -> str:
    """Each timed graph's time shares so far (graphs compiled with debug >= 1)."""
    with _lock:
        return "\n".join(g.report() for g in _graphs)


def _report_times() -> None:
    text = time_report()
    if text:
        _log.info("plug-in time shares:\n%s", text)
    with _lock:
        kernels = "\n".join(filter(None, (g.kernel_reports() for g in _graphs)))
    if kernels:
        _log.info("plug-in kernel times (BRAZE_DEBUG >= 3):\n%s", kernels)
