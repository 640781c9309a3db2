"""The bundled example: compile a model with dynamic dims once, run it at several shapes.

``braze demo`` (or ``python -m braze.demo``) exports a zoo model with
torch.export (or ONNX), compiles it once into native code with its symbolic
dims, runs it at several shapes and compares results and timings with
PyTorch eager, checking that no new shape triggers a recompile. It reports
the export time and the compile time apart (their sum is the time to a
compiled model). ``--frontend plugin`` runs the same model through
``torch.compile(model, backend="braze", dynamic=True)`` instead, and counts
dynamo's graphs and braze's native compiles.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def _time(fn, repeat: int, warmups: int = 1) -> tuple[float, object]:
    for _ in range(warmups):
        out = fn()  # warm-up, and the result to compare
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3, out


def run_demo(model: str = "bert", frontend: str = "torch", repeat: int = 3, threads: int | None = None,
             console=None) -> list[dict]:
    import numpy as np
    import torch

    import braze
    from braze import zoo
    from braze.testing import rel_error

    if threads:
        torch.set_num_threads(threads)
    say = (lambda m: console.print(m, markup=False, highlight=False)) if console else print
    zm = zoo.get(model)
    if frontend == "plugin":
        return _run_plugin(zm, repeat, threads, say, console)
    dims = ", ".join(f"{k} in [{lo}, {hi}]" for k, (lo, hi) in zm.dims.items())
    say(f"[1/3] {zm.name}: exporting and compiling with dynamic dims {dims} ({frontend} frontend)")
    t0 = time.perf_counter()
    if frontend == "torch":
        ep = zoo.export(zm)
        t_export = time.perf_counter() - t0
        compiled = braze.compile(ep, threads=threads)
    else:
        import tempfile
        from pathlib import Path
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / f"{zm.name}.onnx"
            zoo.export_onnx(zm, path)
            t_export = time.perf_counter() - t0
            compiled = braze.compile(braze.import_onnx(path, dim_ranges=zm.dims), threads=threads)
    t_total = time.perf_counter() - t0
    compiles = braze.stats()["native_compiles"]
    exporter = "torch.export" if frontend == "torch" else "torch.onnx.export"
    say(f"[2/3] ready in {t_total:.2f} s: exported in {t_export:.2f} s ({exporter}), compiled in "
        f"{t_total - t_export:.2f} s ({compiles} native compile(s); "
        + ", ".join(f"{k} {v:.1f} s" for k, v in compiled.timings.items()) + ")")
    for i in compiled.inputs:
        say(f"      input  {i}")
    for o in compiled.outputs:  # named as the exported program or ONNX graph names them
        say(f"      output {o}")
    say("[3/3] running at several shapes: braze (native) vs PyTorch eager")
    rows = []
    for shape in zm.test_shapes:
        inputs = zm.make_inputs(**shape)
        with torch.no_grad():
            t_torch, ref = _time(lambda: zm.module(*inputs), repeat)
        ref = zoo.first_output(ref).numpy()
        t_braze, out = _time(lambda: compiled(*inputs), repeat)
        out = zoo.first_output(out).numpy()
        err = rel_error(out, ref)
        rows.append({"shape": shape, "out_shape": list(np.shape(out)), "braze_ms": t_braze,
                     "torch_ms": t_torch, "rel_err": err})
    recompiles = braze.stats()["native_compiles"] - compiles
    _report(rows, say, console)
    say(f"Recompiles after the first shape: {recompiles}.")
    return rows


def _run_plugin(zm, repeat, threads, say, console) -> list[dict]:
    import numpy as np
    import torch

    import braze
    from braze import zoo
    from braze.testing import rel_error

    graphs = torch._dynamo.utils.counters["stats"]
    say(f"[1/2] {zm.name}: torch.compile(model, backend='braze', dynamic=True); braze compiles each graph dynamo "
        "hands over at its first call (a graph dynamo fixed to a size of 1: at its second)")
    opts = {"threads": threads} if threads else None
    compiled = torch.compile(zm.module, backend="braze", dynamic=True, options=opts)
    say("[2/2] running at several shapes: braze plug-in vs PyTorch eager")
    rows, counts = [], []
    for shape in zm.test_shapes:
        inputs = zm.make_inputs(**shape)
        with torch.no_grad():
            t_torch, ref = _time(lambda: zm.module(*inputs), repeat)
            t0 = time.perf_counter()
            compiled(*inputs)
            first = time.perf_counter() - t0
            t_braze, out = _time(lambda: compiled(*inputs), repeat)
        ref, out = zoo.first_output(ref).numpy(), zoo.first_output(out).numpy()
        rows.append({"shape": shape, "out_shape": list(np.shape(out)), "braze_ms": t_braze, "torch_ms": t_torch,
                     "rel_err": rel_error(out, ref), "first_s": first})
        counts.append((int(graphs["unique_graphs"]), braze.stats()["native_compiles"]))
    _report(rows, say, console)
    firsts = ", ".join(f"{r['first_s']:.2f} s" for r in rows)
    say("dynamo graphs / braze native compiles after each shape: " + ", ".join(f"{g}/{n}" for g, n in counts)
        + f"; first call at each shape: {firsts}.")
    return rows


def _report(rows, say, console):
    headers = ["shape", "output", "braze ms", "torch ms", "braze/torch", "max rel err"]
    body = [[", ".join(f"{k}={v}" for k, v in r["shape"].items()), str(r["out_shape"]), f"{r['braze_ms']:.1f}",
             f"{r['torch_ms']:.1f}", f"{r['braze_ms'] / r['torch_ms']:.2f}x", f"{r['rel_err']:.1e}"] for r in rows]
    if console is not None:
        from rich.table import Table
        t = Table(*headers)
        for b in body:
            t.add_row(*b)
        console.print(t)
    else:
        widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(headers)]
        say("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
        for b in body:
            say("  ".join(c.ljust(w) for c, w in zip(b, widths)))
    say("Timings are medians of the timed runs after one warm-up call.")


def _positive(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


def main(argv=None) -> int:
    """``braze demo``'s body (``braze.cmdline.run_command`` turns its errors into one line)."""
    from braze import zoo
    from braze.cmdline import Parser

    ap = Parser(prog="braze demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert", choices=zoo.names(), help="zoo model (default: bert)")
    ap.add_argument("--frontend", default="torch", choices=["torch", "onnx", "plugin"],
                    help="import path: torch.export, torch.onnx.export then the ONNX frontend, or plugin: "
                         "torch.compile(model, backend='braze', dynamic=True) (default: torch)")
    ap.add_argument("--repeat", type=_positive, default=3, help="timed runs per shape (median is shown)")
    ap.add_argument("--threads", type=_positive, default=None,
                    help="threads for both braze and PyTorch (default: their own)")
    args = ap.parse_args(argv)
    try:
        from rich.console import Console
        console = Console(width=None if sys.stdout.isatty() else 110)
    except ImportError:
        console = None
    rows = run_demo(args.model, args.frontend, args.repeat, args.threads, console)
    from braze.testing import MODEL_REL_TOL
    bad = [r for r in rows if r["rel_err"] > MODEL_REL_TOL]
    if bad:
        print(f"FAILED: {len(bad)} shape(s) differ from PyTorch by more than {MODEL_REL_TOL}")
        return 1
    return 0


if __name__ == "__main__":
    from braze.cmdline import run_command
    raise SystemExit(run_command("braze demo", lambda: main(sys.argv[1:])))
