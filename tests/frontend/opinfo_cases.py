"""pytest glue of the OpInfo sweep (opinfo_sweep.py): one test per op, per dtype, in CI on the
first CI_SAMPLES samples of the op and under ``-m slow`` on all of them.

Tests run in chunks of consecutive selected ops: the first test of a chunk runs the whole chunk,
so that its samples compile natively in one C compile (each sample its own entry, as
run_native explains), and each test then checks its own op's results. Each dtype has its own
test file, so that ``pytest -n 2 --dist loadfile`` runs the two side by side.
"""

from __future__ import annotations

import pytest

import opinfo_sweep as sw

from braze.options import Options

# the first samples of each op's sample_inputs: the default run stays within a few minutes
CI_SAMPLES = 1
CHUNK = 20  # ops per chunk


def make(dtype: str, share: tuple[int, int] = (0, 1)):
    """(options fixture, CI test, slow test) for ``dtype``: assign them to module-level names.
    ``share`` (k, n): the CI test takes every n-th op from the k-th (bfloat16 and float16 split
    the ops between them by default, each a half, to keep the default suite short); the slow
    test takes them all."""
    cases = [pytest.param(op, id=sw.op_id(op)) for op in sw.ops_for(dtype)]
    k, n = share
    done: dict = {}  # (test name, op id) -> results, filled a chunk at a time

    @pytest.fixture(scope="module")
    def options(tmp_path_factory):
        # a fresh cache: a clean run compiles everything; identical kernels still hit within it
        return Options.from_env().replace(cache_dir=str(tmp_path_factory.mktemp("braze-cache")))

    def results(request, options, limit):
        fname = request.node.originalname
        key = (fname, sw.op_id(request.node.callspec.params["op"]))
        if key not in done:
            items = [it for it in request.session.items
                     if getattr(it, "originalname", None) == fname and it.module is request.node.module]
            pos = next(i for i, it in enumerate(items) if it.nodeid == request.node.nodeid)
            chunk = [it.callspec.params["op"] for it in items[pos:pos + CHUNK]]
            chunk = [op for op in chunk if (fname, sw.op_id(op)) not in done]
            for (op_id, _), rs in sw.run_ops([(op, dtype) for op in chunk], options, limit=limit).items():
                done[(fname, op_id)] = rs
        return done.pop(key)

    def check(rs):
        failures = [r for r in rs if r.failed]
        if failures:
            pytest.fail(f"{len(failures)} of {len(rs)} samples fail:\n" + sw.failure_report(failures),
                        pytrace=False)
        if not any(r.stage == "run" for r in rs):
            reasons = sorted({(r.skip or "").split(":")[0] for r in rs})
            pytest.skip(f"no sample claimed by braze ({'; '.join(reasons)})")

    @pytest.mark.parametrize("op", cases[k::n])
    def test_opinfo(op, options, request):
        check(results(request, options, CI_SAMPLES))

    @pytest.mark.slow
    @pytest.mark.parametrize("op", cases)
    def test_opinfo_all_samples(op, options, request):
        check(results(request, options, None))

    return options, test_opinfo, test_opinfo_all_samples
