"""Count ONNX's backend node tests braze passes, over all of them (the wheel's ``collect_testcases``).

    python scripts/onnx_conformance.py [--native] [--ort] [--json FILE]

(benchmarks/results/onnx_conformance.json is its ``--native --ort --json`` output.)

Each test runs twice through braze's reference interpreter (``braze/frontend/onnx/backend.py``): with
its inputs fed as the test provides them, and with the shape operands braze needs at import time
(a Reshape's shape, Slice's starts, ...) bound as constants, as an exporter writes them. ``--native``
also compiles each test that passes bound and runs it natively (slow: one C compile per test);
``--ort`` runs each test through ONNX Runtime's CPU provider too, compared the same way. It prints the
counts over every test, and the commonest reasons for failing.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's braze


def _close(got, outs, case) -> bool:
    import numpy as np

    from braze.frontend.onnx.backend import as_array
    if len(got) != len(outs):
        return False
    for g, e in zip(got, outs):
        e = as_array(e)
        if isinstance(e, list) or isinstance(g, list) or e is None or g is None:  # a sequence, an empty optional
            if not (isinstance(e, list) and isinstance(g, list) and len(g) == len(e) or e is None and g is None):
                return False
            if e is not None and not all(_close([x], [y], case) for x, y in zip(g, e)):
                return False
            continue
        if g.dtype != e.dtype or g.shape != e.shape:
            return False
        if e.dtype.kind in "OUS":  # strings (ONNX Runtime's; braze has none)
            if not np.array_equal(g, e):
                return False
            continue
        if not np.allclose(g.astype(np.float64), e.astype(np.float64), rtol=case.rtol, atol=case.atol, equal_nan=True):
            return False
    return True


def _run(case, bind: bool, native: bool, cache: str, row: dict | None = None) -> bool:
    """Whether ``case`` passes; ``row["specialized"]`` says whether the backend imported it per value of
    an axis-deciding input (``SpecializingRep``)."""
    import braze
    from braze.frontend.onnx.backend import BrazeBackend, SpecializingRep, as_array, prepare_bound
    from braze.frontend.onnx.structure import group
    names = [i.name for i in case.model.graph.input]
    for ins, outs in case.data_sets:
        feed = dict(zip(names, [as_array(a) for a in ins]))
        rep, bound = prepare_bound(case.model, feed) if bind else (BrazeBackend.prepare(case.model), {})
        if row is not None:
            row["specialized"] = isinstance(rep, SpecializingRep)
        rest = [feed[n] for n in names if n not in bound]
        if native:
            module, flat, structure = rep.module_for(rest)
            got = braze.compile(module, options={"cache_dir": cache})(*flat)
            got = list(got) if isinstance(got, (list, tuple)) else [got]
            got = group(structure, got) if structure else got
        else:
            got = rep.run(rest)
        if not _close(got, outs, case):
            return False
    return True


def _run_ort(case) -> bool:
    """Whether ONNX Runtime's CPU provider passes ``case`` under the same comparison (a sequence output
    element by element)."""
    import numpy as np
    import onnxruntime as ort

    from braze.frontend.onnx.backend import as_array
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    sess = ort.InferenceSession(case.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in case.model.graph.input]
    for ins, outs in case.data_sets:
        feed = {n: [np.asarray(as_array(x)) for x in a] if isinstance(a, list) else np.asarray(as_array(a))
                for n, a in zip(names, ins)}
        got = sess.run(None, feed)
        if len(got) != len(outs):
            return False
        for g, e in zip(got, outs):
            if isinstance(e, list) != isinstance(g, list):
                return False
            pairs = zip(g, e) if isinstance(e, list) else [(g, e)]
            if isinstance(e, list) and len(g) != len(e):
                return False
            if not all(_close([_ort_typed(np.asarray(x), y)], [y], case) for x, y in pairs):
                return False
    return True


def _ort_typed(got, expected):
    """ONNX Runtime's Python API returns a 1-byte ml_dtypes type (float8, int4, ...) as its bits in
    uint8: read them as the expected type, so that its values are what is compared."""
    from braze.frontend.onnx.backend import as_array
    from braze.ir.types import is_ml_dtype
    e = as_array(expected)
    if got.dtype.name == "uint8" and is_ml_dtype(e.dtype) and e.dtype.itemsize == 1:
        return got.view(e.dtype)
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--native", action="store_true", help="also compile and run natively what passes bound")
    ap.add_argument("--ort", action="store_true", help="also run each test through ONNX Runtime (same comparison)")
    ap.add_argument("--json", metavar="FILE", help="write each test's results here")
    a = ap.parse_args(argv)
    ort_version = None
    if a.ort:
        try:
            import onnxruntime
        except ImportError:
            ap.error("--ort needs onnxruntime (pip install -e '.[test]')")
        ort_version = onnxruntime.__version__
    import numpy as np
    import onnx.backend.test.case.node as N
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = N.collect_testcases(None)
    results, why = {}, collections.Counter()
    cache = tempfile.mkdtemp(prefix="braze-onnx-")
    for case in cases:
        row = {}
        for mode, bind, native in (("fed", False, False), ("bound", True, False), ("native", True, True)):
            if mode == "native" and not (a.native and row["bound"]):
                continue
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    row[mode] = _run(case, bind, native, cache, row if mode == "fed" else None)
            except Exception as e:  # noqa: BLE001 (a failing test, whatever it raises)
                row[mode] = False
                if mode == "bound":
                    why[f"{type(e).__name__}: {str(e).splitlines()[0][:90]}"] += 1
        if a.ort:
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    row["ort"] = _run_ort(case)
            except Exception:  # noqa: BLE001 (ONNX Runtime refuses or fails the test)
                row["ort"] = False
        results[case.name] = row
    c = counts(results)
    line = f"{c['tests']} ONNX node tests: {c['fed']} pass as fed ({c['fed_specialized']} of them imported per " \
           f"value of an axis-deciding input), {c['bound']} with shape operands bound"
    if a.native:
        line += f", {c['native']} natively compiled (bound)"
    if a.ort:
        line += f"; ONNX Runtime {ort_version}: {c['ort']}"
    print(line)
    for k, v in why.most_common(20):
        print(f"  {v:4d}  {k}")
    if a.json:
        import onnx
        Path(a.json).write_text(json.dumps({"onnx": onnx.__version__, "native": a.native, "onnxruntime": ort_version,
                                            "machine": machine(), "counts": c, "tests": results}, indent=0))
    return 0


def machine() -> dict:
    """Where the counts were made: the CPU, the ISA braze compiled for, the cores."""
    import os

    from braze.codegen.isa import cpu_model, host_isa
    return {"cpu": cpu_model(), "isa": host_isa().name, "cores": os.cpu_count()}


def counts(results: dict) -> dict:
    """The totals over every test's row (fed, bound, native, and the fed passes imported per value)."""
    rows = results.values()
    return {"tests": len(results), "fed": sum(r["fed"] for r in rows),
            "fed_specialized": sum(r["fed"] and r.get("specialized", False) for r in rows),
            "bound": sum(r["bound"] for r in rows), "native": sum(r.get("native", False) for r in rows),
            "ort": sum(r.get("ort", False) for r in rows)}


if __name__ == "__main__":
    raise SystemExit(main())
