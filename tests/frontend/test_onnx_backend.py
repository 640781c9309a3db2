"""ONNX's backend node tests through braze (import_onnx + braze.reference.run).

Runs every node test whose ops braze supports (``supported_ops()``); tests in
``backend_exclusions.EXCLUSIONS`` must fail (with the documented reason) and
all others must pass. The cases are generated in memory by
``onnx.backend.test.case.node.collect_testcases`` (the wheel ships no data dir).
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from braze.frontend.onnx import supported_ops  # noqa: E402
from braze.ir.types import is_ml_dtype  # noqa: E402
from braze.frontend.onnx.backend import as_array, run_node_test  # noqa: E402
from braze.frontend.onnx.backend_exclusions import EXCLUSIONS, exclusion_reason  # noqa: E402
from braze.frontend.onnx.convert import op_key  # noqa: E402


def _collect():
    import onnx.backend.test.case.node as N

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = N.collect_testcases(None)
    sup = set(supported_ops())
    return [c for c in cases if all(op_key(n.domain, n.op_type) in sup for n in c.model.graph.node)]


CASES = _collect()


def _check(case):
    for ins, outs in case.data_sets:
        got = run_node_test(case.model, list(ins))
        assert len(got) == len(outs), f"{len(got)} outputs, expected {len(outs)}"
        for k, (g, e) in enumerate(zip(got, outs)):
            e = as_array(e)
            defined = _defined(case, ins, e)
            if defined is not None:
                g, e = g[defined], e[defined]
            _same(g, e, case, f"output {k}")


def _defined(case, ins, e):
    """Where a float -> integer Cast (or CastLike) giving ``e`` is defined: the spec leaves an input
    outside the integer type's range undefined, and onnx's data changed there (1.23's saturates to a
    4- or 2-bit type's bounds, earlier data wrapped); None: everywhere."""
    nodes = case.model.graph.node
    if len(nodes) != 1 or nodes[0].op_type not in ("Cast", "CastLike"):
        return None
    x = as_array(ins[0])
    if not (np.issubdtype(x.dtype, np.floating) or is_ml_dtype(x.dtype)):
        return None
    try:
        info = ml_dtypes.iinfo(e.dtype)  # numpy's integers and ml_dtypes' int4 / int2 alike
    except ValueError:  # not an integer type
        return None
    v = np.trunc(x.astype(np.float64))
    return (v >= info.min) & (v <= info.max)


def _same(g, e, case, what):
    """g matches e: a tensor within the test's tolerances, a sequence element by element, an empty
    optional as None."""
    if isinstance(e, list) or e is None:
        assert type(g) is type(e) and (e is None or len(g) == len(e)), f"{what}: {g!r}, expected {e!r}"
        for i, (x, y) in enumerate(zip(g or [], e or [])):
            _same(x, y, case, f"{what}[{i}]")
        return
    assert g.dtype == e.dtype, f"{what}: dtype {g.dtype}, expected {e.dtype}"
    assert g.shape == e.shape, f"{what}: shape {g.shape}, expected {e.shape}"
    np.testing.assert_allclose(_numeric(g), _numeric(e), rtol=case.rtol, atol=case.atol, err_msg=what)


def _numeric(a):
    """``a``, or its values in float64 where its dtype is ml_dtypes' (bfloat16, float8, int4, ...),
    which NumPy's comparisons do not take."""
    return a.astype(np.float64) if is_ml_dtype(a.dtype) else a


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node(case):
    why = exclusion_reason(case.name)
    if why is None:
        with np.errstate(all="ignore"):
            _check(case)
        return
    try:
        with np.errstate(all="ignore"):
            _check(case)
    except Exception:
        pytest.xfail(why)
    pytest.fail(f"{case.name} passes but is excluded ({why}); remove it from EXCLUSIONS")


def test_every_supported_op_has_node_tests():
    covered = {op_key(n.domain, n.op_type) for c in CASES for n in c.model.graph.node}
    # ops whose ONNX node tests all use other ops too, or only inside subgraphs (or none exist), are covered
    # by test_onnx_frontend.py and test_onnx_sequences.py
    missing = set(supported_ops()) - covered
    assert missing <= {"Constant", "Dropout", "ConcatFromSequence", "Optional", "SequenceAt", "SequenceConstruct",
                       "SequenceErase"}, sorted(missing)


def test_every_exclusion_is_used():
    import re

    names = [c.name for c in CASES]
    for pat in EXCLUSIONS:
        assert any(re.search(pat, n) for n in names), f"exclusion {pat!r} matches no test"


def test_pass_count():
    passing = [c for c in CASES if exclusion_reason(c.name) is None]
    assert len(CASES) > 1000 and len(passing) > 800, (len(CASES), len(passing))
