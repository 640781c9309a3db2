"""Compile random graphs, run each at several shapes, compare with the reference.

``check_batch(seeds)`` builds the graphs of ``seeds`` into one module (one function
each: one C compile for all of them, since compiling dominates), compiles it
once, and for each graph and each of its run shapes: draws the inputs, runs
``braze.reference.run`` (the oracle), propagates the error bound
(``tolerance.propagate``), calls the native function and compares. When a batch
fails to compile, each graph is taken alone through the passes and code
generation (no C compiler) to find the ones that fail; the others are compiled
together again, and bisected if they still fail, so every failure names one seed.
``braze.stats()["native_compiles"]`` must not move after the compile: calling at a
new shape never recompiles.

Outcomes per graph: ``ok``; ``mismatch`` (a result out of bounds, or a wrong
shape/dtype); ``crash`` (an exception from compile or call that is not an
UnsupportedOpError or a BrazeError saying "not supported"; a dead worker process);
``unsupported`` (one that is: the native backend does not support something);
``recompile``; ``invalid`` (the reference refused the graph: a generator bug).
"""

from __future__ import annotations

import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field

import numpy as np

from .generator import Config, generate_batch
from .tolerance import compare, propagate

STATUSES = ("ok", "mismatch", "crash", "unsupported", "recompile", "invalid")


@dataclass
class GraphResult:
    seed: int
    status: str
    message: str = ""
    ops: dict = field(default_factory=dict)
    nodes: int = 0
    runs: int = 0
    unchecked: int = 0
    checked: int = 0
    special: bool = False

    def to_json(self) -> dict:
        return asdict(self)


def repro_command(seed: int, batch: list[int] | None = None) -> str:
    if batch and len(batch) > 1:
        return f"python -m braze.fuzz --seeds {','.join(map(str, batch))}"
    return f"python -m braze.fuzz --seed {seed}"


def _is_unsupported(e: BaseException) -> bool:
    from ..errors import BrazeError, UnsupportedOpError
    return isinstance(e, UnsupportedOpError) or \
        isinstance(e, BrazeError) and "not supported" in str(e) and "bug" not in str(e)


def _describe(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = f" (at {tb[-1].filename.split('braze/')[-1]}:{tb[-1].lineno})" if tb else ""
    return f"{type(e).__name__}: {str(e).strip()[:600]}{where}"


def _compile(module, cache_dir):
    import braze
    from ..options import Options
    opts = Options.from_env()
    if cache_dir:
        opts = opts.replace(cache_dir=str(cache_dir))
    return braze.compile(module, options=opts)


def _lower_alone(g) -> BaseException | None:
    """The error of compiling graph ``g`` alone up to the C source (passes, lowering, codegen;
    no C compiler): most compile failures happen there, and this costs ~1/20 of a C compile."""
    from ..compiler import cpu_target
    from ..ir import verify
    from ..options import Options
    from ..pipeline import compile_to_c
    try:
        m = g.alone()
        verify(m)
        compile_to_c(m, cpu_target(Options.from_env()), copy=False)
    except Exception as e:  # noqa: BLE001
        return e
    return None


def _failed(g, e: BaseException) -> GraphResult:
    status = "unsupported" if _is_unsupported(e) else "crash"
    return GraphResult(g.seed, status, "compile: " + _describe(e), g.op_counts, len(g.function.nodes),
                       special=g.special)


def check_batch(seeds, config: Config | None = None, cache_dir=None, split: bool = True) -> list[GraphResult]:
    """Results for the graphs of ``seeds``, compiled together (one compile)."""
    import braze
    seeds = list(seeds)
    module, graphs = generate_batch(seeds, config)
    try:
        cm = _compile(module, cache_dir)
    except Exception as e:  # noqa: BLE001 - every failure is reported with its seed
        if not split or len(seeds) == 1:
            return [_failed(g, e) for g in graphs]
        # find the graphs that fail before the C compiler, then compile the others together;
        # if they still fail (the C compiler, or graphs that only fail together), bisect
        bad = {g.seed: err for g in graphs if (err := _lower_alone(g)) is not None}
        if bad:
            rest = [s for s in seeds if s not in bad]
            out = [_failed(g, bad[g.seed]) for g in graphs if g.seed in bad]
            out += check_batch(rest, config, cache_dir) if rest else []
            return sorted(out, key=lambda r: seeds.index(r.seed))
        half = len(seeds) // 2
        return check_batch(seeds[:half], config, cache_dir) + check_batch(seeds[half:], config, cache_dir)
    compiles = braze.stats()["native_compiles"]
    results = []
    for g in graphs:
        r = check_graph(cm, g)
        if braze.stats()["native_compiles"] != compiles:
            r.status, r.message = "recompile", "a call compiled again: " + r.message
            compiles = braze.stats()["native_compiles"]
        results.append(r)
    return results


def check_graph(cm, g) -> GraphResult:
    """Run graph ``g`` (compiled in ``cm``) at each of its run shapes against the reference."""
    from .. import reference
    res = GraphResult(g.seed, "ok", ops=dict(g.op_counts), nodes=len(g.function.nodes), special=g.special)
    fn = cm.function(g.func)
    f = g.function
    for run, env in enumerate(g.envs):
        xs = g.inputs(run)
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # means of empty slices (NaN, as meant)
                want = reference.run(g.module, *xs, func=g.func)
        except Exception as e:  # noqa: BLE001
            res.status, res.message = "invalid", f"run {run} {env}: reference: {_describe(e)}"
            return res
        try:
            vals, errs = propagate(g.module, f, xs, env)
        except Exception as e:  # noqa: BLE001
            res.status, res.message = "invalid", f"run {run} {env}: error bound: {_describe(e)}"
            return res
        want = want if isinstance(want, tuple) else (want,)
        try:
            got = fn(*xs)
        except Exception as e:  # noqa: BLE001
            res.status = "unsupported" if _is_unsupported(e) else "crash"
            res.message = f"run {run} {env}: call: {_describe(e)}"
            return res
        got = got if isinstance(got, tuple) else (got,)
        if len(got) != len(want):
            res.status, res.message = "mismatch", f"run {run} {env}: {len(got)} results, expected {len(want)}"
            return res
        for i, (a, w, v) in enumerate(zip(got, want, f.results)):
            ok, msg, unchecked = compare(a, w, errs[id(v)])
            res.unchecked += unchecked
            res.checked += int(np.size(w)) - unchecked
            if not ok:
                res.status = "mismatch"
                res.message = f"run {run} {env}: result {i} (%{v.name}: {v.type}): {msg}"
                return res
        res.runs += 1
    return res


def report_failure(r: GraphResult, config: Config | None = None, batch=None) -> str:
    """A failure as text: seed, outcome, message, the one-line repro and the graph's IR."""
    from .generator import generate
    g = generate(r.seed, config=config)
    return (f"seed {r.seed}: {r.status}: {r.message}\n  re-run: {repro_command(r.seed, batch)}\n"
            + "\n".join("  | " + line for line in g.text().splitlines()))


def summarize(results: list[GraphResult], seconds: float, compiles: int) -> str:
    from collections import Counter
    st = Counter(r.status for r in results)
    ops = Counter()
    for r in results:
        ops.update(r.ops)
    nodes = sum(r.nodes for r in results)
    runs = sum(r.runs for r in results)
    checked = sum(r.checked for r in results)
    unchecked = sum(r.unchecked for r in results)
    lines = [f"graphs: {len(results)} ({sum(r.special for r in results)} with special values), nodes: {nodes}, "
             f"runs: {runs}, compiles: {compiles}, time: {seconds:.1f} s "
             f"({seconds / max(len(results), 1):.2f} s/graph)",
             "outcomes: " + ", ".join(f"{k} {st.get(k, 0)}" for k in STATUSES),
             f"elements checked: {checked}, unbounded (not checked): {unchecked}",
             "op mix: " + ", ".join(f"{k} {v}" for k, v in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))]
    return "\n".join(lines)


def timed_batches(seeds, batch: int):
    seeds = list(seeds)
    return [seeds[i:i + batch] for i in range(0, len(seeds), batch)]


def run_in_process(seeds, batch: int = 8, config: Config | None = None, cache_dir=None):
    """All ``seeds`` in this process; (results, seconds, compiles)."""
    import braze
    t0 = time.perf_counter()
    c0 = braze.stats()["native_compiles"]
    results = []
    for chunk in timed_batches(seeds, batch):
        results.extend(check_batch(chunk, config, cache_dir))
    return results, time.perf_counter() - t0, braze.stats()["native_compiles"] - c0
