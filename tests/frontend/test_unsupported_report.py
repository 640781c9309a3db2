"""Unsupported ops are reported all at once, after braze's decompositions, with counts and
where they are (torch: source lines; ONNX: node names), and point to `braze ops`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
from braze.errors import UnsupportedOpError  # noqa: E402
from braze.frontend.torch import importer  # noqa: E402

Dim = torch.export.Dim
F = torch.nn.functional


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _export(fn, x, dyn=None):
    dyn = dyn if dyn is not None else ({0: Dim("b", min=2, max=64)},)
    return torch.export.export(_Fn(fn), (x,), dynamic_shapes=dyn, strict=False)


class _Several(torch.nn.Module):
    def forward(self, x):
        d = torch.diff(x, dim=-1)  # braze decomposes diff: not a blocker
        a = torch.linalg.det(x[..., :3, :3])  # MARKER-det-1
        b = torch.linalg.det(x[..., 1:4, 1:4])  # MARKER-det-2
        s = torch.linalg.slogdet(x[..., :2, :2]).logabsdet  # MARKER-slogdet
        return d.sum() + a + b + s


def test_torch_reports_every_unsupported_op_with_counts_and_lines():
    ep = torch.export.export(_Several(), (torch.randn(3, 4, 4),), dynamic_shapes=({0: Dim("b", min=2, max=64)},),
                             strict=False)
    with pytest.raises(UnsupportedOpError) as ei:
        braze.import_torch(ep)
    e = ei.value
    msg = str(e)
    assert len(e.unsupported) >= 2, msg
    det = [k for k in e.unsupported if "det" in k and "slogdet" not in k]
    assert det and e.unsupported[det[0]] == 2, msg  # both det calls, counted
    assert any("slogdet" in k for k in e.unsupported), msg
    assert "MARKER-det-1" in msg and "MARKER-det-2" in msg and "MARKER-slogdet" in msg
    assert "test_unsupported_report.py" in msg
    assert "diff" not in msg  # decomposed: named only if something it became is missing
    assert "`braze ops`" in msg and "docs/" not in msg and "similar" not in msg


def test_torch_single_unsupported_op_has_one_line_message():
    ep = _export(lambda x: torch.linalg.det(x), torch.randn(3, 2, 2))
    with pytest.raises(UnsupportedOpError, match="is not supported by braze's torch frontend") as ei:
        braze.import_torch(ep)
    assert "det" in str(ei.value) and len(ei.value.unsupported) == 1
    assert "test_unsupported_report.py" in str(ei.value)


@pytest.mark.parametrize("fn", [lambda x: F.pairwise_distance(x, x + 1), lambda x: torch.std_mean(x, -1)[0]])
def test_torch_decompositions_run_to_a_fixpoint(monkeypatch, rng, fn):
    """pairwise_distance -> norm -> linalg_vector_norm and std_mean -> var_mean need two rounds."""
    ep = _export(fn, torch.rand(4, 6) + 0.1)
    monkeypatch.setattr(importer, "MAX_DECOMPOSITION_ROUNDS", 1)
    with pytest.raises(UnsupportedOpError):
        braze.import_torch(ep)
    monkeypatch.undo()
    mod = braze.import_torch(ep)
    for b in (2, 5):
        x = torch.from_numpy(rng.random((b, 6)).astype("float32") + 0.1)
        got = braze.reference.run(mod, x)
        torch.testing.assert_close(torch.from_numpy(got), fn(x), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------
# ONNX
# ---------------------------------------------------------------------------


def test_onnx_reports_every_unsupported_op_with_counts_and_node_names(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    f = TensorProto.FLOAT
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="fine"),
             helper.make_node("GlobalLpPool", ["a"], ["d1"], name="lp_one"),
             helper.make_node("GlobalLpPool", ["a"], ["d2"], name="lp_two"),
             helper.make_node("MaxRoiPool", ["a", "rois"], ["h"], name="hm", pooled_shape=[1, 1]),
             helper.make_node("MyOp", ["h"], ["c"], name="custom_node", domain="com.example"),
             helper.make_node("Add", ["d1", "d2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, ["n", 3, 3]),
                                       helper.make_tensor_value_info("rois", f, [1, 5])],
                          [helper.make_tensor_value_info("y", f, ["n", 3, 3]),
                           helper.make_tensor_value_info("c", f, ["n", 3, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.example", 1)])
    p = tmp_path / "bad.onnx"
    onnx.save(m, str(p))
    with pytest.raises(UnsupportedOpError) as ei:
        braze.import_onnx(str(p))
    e = ei.value
    msg = str(e)
    assert e.unsupported == {"GlobalLpPool": 2, "MaxRoiPool": 1, "com.example::MyOp": 1}, msg
    assert "'lp_one'" in msg and "'lp_two'" in msg and "'hm'" in msg and "'custom_node'" in msg
    assert "bad.onnx" in msg and "opset 18" in msg
    assert "`braze ops`" in msg and "Relu" not in msg
