"""The bundled example: import a model with dynamic dims once, run it at several shapes.

``braze demo`` (or ``python -m braze.demo``) exports a zoo model with
torch.export, imports it into braze with its symbolic dims, runs it at
several shapes and compares results and timings with PyTorch eager.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def _time(fn, repeat: int) -> tuple[float, object]:
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
    dims = ", ".join(f"{k} in [{lo}, {hi}]" for k, (lo, hi) in zm.dims.items())
    say(f"[1/3] {zm.name}: exporting with dynamic dims {dims} ({frontend} frontend)")
    t0 = time.perf_counter()
    if frontend == "torch":
        mod = braze.import_torch(zoo.export(zm))
    else:
        import tempfile
        from pathlib import Path
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / f"{zm.name}.onnx"
            zoo.export_onnx(zm, path)
            mod = braze.import_onnx(path, dim_ranges=zm.dims)
    t_import = time.perf_counter() - t0
    f = mod.main
    say(f"[2/3] imported in {t_import:.1f} s: {len(f.nodes)} nodes, {len(mod.constants)} constants")
    for p in f.params:
        say(f"      input  %{p.name}: {p.type}")
    for r in f.results:
        say(f"      output %{r.name}: {r.type}")
    say("[3/3] running at several shapes: braze (reference interpreter, NumPy) vs PyTorch eager")
    rows = []
    for shape in zm.test_shapes:
        inputs = zm.make_inputs(**shape)
        arrays = [x.numpy() for x in inputs]
        with torch.no_grad():
            t_torch, ref = _time(lambda: zm.module(*inputs), repeat)
        ref = zoo.first_output(ref).numpy()
        t_braze, out = _time(lambda: braze.reference.run(mod, *arrays), repeat)
        out = out[0] if isinstance(out, tuple) else out
        err = rel_error(out, ref)
        rows.append({"shape": shape, "out_shape": list(np.shape(out)), "braze_ms": t_braze,
                     "torch_ms": t_torch, "rel_err": err})
    _report(rows, say, console)
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
    say("Timings are medians. The reference interpreter is braze's correctness oracle, not its fast path.")


def main(argv=None) -> int:
    from braze import zoo

    ap = argparse.ArgumentParser(prog="braze demo", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="bert", choices=zoo.names(), help="zoo model (default: bert)")
    ap.add_argument("--frontend", default="torch", choices=["torch", "onnx"], help="import path (default: torch)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per shape (median is shown)")
    ap.add_argument("--threads", type=int, default=None, help="PyTorch intra-op threads")
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
    raise SystemExit(main())
