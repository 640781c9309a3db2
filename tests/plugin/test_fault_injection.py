"""No exception leaves the backend: a failure injected at each stage of plug-in mode (AOTAutograd's
lowering, freezing, partitioning, size checks, import, reuse, compile, the second-call compile of
a specialised graph, the native call) makes that graph or region run in PyTorch, with one warning,
and every call still returns what eager returns."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from braze.errors import BrazeWarning  # noqa: E402

nn = torch.nn


class Injected(RuntimeError):
    pass


def _raise(*args, **kwargs):
    raise Injected("injected failure")


STAGES = {
    "decompositions": ("braze.plugin.dynamo", "decompositions"),
    "freezing": ("braze.plugin.dynamo", "_frozen_inputs"),
    "specialisation check": ("braze.plugin.dynamo", "maybe_specialised"),
    "partition support": ("braze.plugin.partition", "support"),
    "partition stages": ("braze.plugin.partition", "stages"),
    "size check": ("braze.plugin.region", "_check_sizes"),
    "import": ("braze.frontend.torch.importer.Importer", "run"),
    "reuse lookup": ("braze.plugin.reuse", "find"),
    "reuse table": ("braze.plugin.reuse", "remember"),
    "compile": ("braze.compiler", "compile"),
    "C generation": ("braze.pipeline", "compile_to_c"),
    "C compiler": ("braze.runtime.compiler", "compile_shared"),
    "native call": ("braze.runtime.loader.NativeFunction", "__call__"),
}


def _target(path: str):
    import importlib
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(path)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 12), nn.LayerNorm(12)).eval()


@pytest.mark.parametrize("stage", list(STAGES))
@pytest.mark.parametrize("freeze", [False, True], ids=["live", "frozen"])
def test_a_failure_at_any_stage_runs_pytorch(stage, freeze, monkeypatch, fresh_warnings, tmp_path):
    where, attr = STAGES[stage]
    monkeypatch.setattr(_target(where), attr, _raise)
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path))  # the C compiler really runs
    m = _model()
    c = torch.compile(m, backend="braze", dynamic=True, options={"freeze": freeze})
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for b in (3, 1, 5, 1, 2):  # batch 1: dynamo's specialised graph, compiled at its second call
            x = torch.randn(b, 12)
            torch.testing.assert_close(c(x), m(x))
    said = [str(w.message) for w in caught if issubclass(w.category, BrazeWarning)]
    assert said, f"{stage}: the failure went unreported"
    assert any("PyTorch" in s for s in said), said
    assert len(said) == len(set(said)), f"a warning repeated: {said}"


def test_a_graph_braze_cannot_lower_still_runs(monkeypatch, fresh_warnings):
    """AOTAutograd itself failing (here: injected into its entry) leaves dynamo's graph to PyTorch."""
    import torch._dynamo.backends.common as common

    def broken(**kwargs):
        def compiler(gm, example_inputs):
            raise Injected("AOTAutograd failed")
        return compiler
    monkeypatch.setattr(common, "aot_autograd", broken)
    m = _model()
    c = torch.compile(m, backend="braze", dynamic=True)
    with torch.no_grad(), pytest.warns(BrazeWarning, match="AOTAutograd failed"):
        for b in (3, 4):
            x = torch.randn(b, 12)
            torch.testing.assert_close(c(x), m(x))
