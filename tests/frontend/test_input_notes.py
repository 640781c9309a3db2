"""Why an input dim is what it is: the importers' notes, quoted when an input is rejected.

A dim torch.export fixed (no dynamic_shapes), a Dim.AUTO dim whose range
starts at 2 (torch's 0/1 specialisation), a dim fixed in an ONNX model: the
native entry and the reference both say so, and what to do.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
from braze.errors import InputError  # noqa: E402


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))


class Net(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def _export(example, dyn=None):
    return torch.export.export(Net(), (example,), dynamic_shapes=dyn)


def _rejects(mod_or_compiled, x, *patterns):
    """Both the reference and (for a CompiledModel) the native entry reject x, with every pattern in the message."""
    runs = [("reference", lambda: braze.reference.run(getattr(mod_or_compiled, "module", mod_or_compiled), x))]
    if hasattr(mod_or_compiled, "module"):
        runs.append(("native", lambda: mod_or_compiled(x)))
    for who, run in runs:
        with pytest.raises(InputError) as ei:
            run()
        msg = str(ei.value)
        for p in patterns:
            assert p in msg, f"{who}: {p!r} not in {msg!r}"


def test_dim_fixed_at_export_says_so_and_what_to_do():
    m = braze.compile(_export(torch.randn(2, 3)))
    x = np.ones((5, 3), np.float32)
    _rejects(m, x, "dim 0 is 5, expected 2", "torch.export fixed this dim to 2",
             "dynamic_shapes={'x': {0: torch.export.Dim(")
    np.testing.assert_allclose(m(np.ones((2, 3), np.float32)), 2.0)  # the fixed size still works


def test_auto_dim_rejects_size_1_naming_the_0_1_specialisation():
    m = braze.compile(_export(torch.randn(2, 3), ({0: torch.export.Dim.AUTO},)))
    _rejects(m, np.ones((1, 3), np.float32), "= 1 is outside its range [2, inf]", "specialises sizes 0 and 1",
             "min=1")
    for n in (2, 7):
        np.testing.assert_allclose(m(np.ones((n, 3), np.float32)), 2.0)


def test_example_of_size_1_explains_why_auto_made_the_dim_static():
    mod = braze.import_torch(_export(torch.randn(1, 3), ({0: torch.export.Dim.AUTO},)))
    assert mod.main.params[0].type.shape == (1, 3)
    _rejects(mod, np.ones((4, 3), np.float32), "fixed this dim to 1", "specialises sizes 0 and 1",
             "example of size 2 or more")


def test_named_dims_carry_no_note_and_size_1_works():
    batch = torch.export.Dim("batch", min=1, max=64)
    mod = braze.import_torch(_export(torch.randn(2, 3), ({0: batch},)))
    assert ("main", "x", 0) not in mod.input_notes and ("main", "x", 1) in mod.input_notes
    np.testing.assert_allclose(braze.reference.run(mod, np.ones((1, 3), np.float32)), 2.0)
    with pytest.raises(InputError) as ei:
        braze.reference.run(mod, np.ones((65, 3), np.float32))
    assert "specialis" not in str(ei.value)  # a range the user chose is not torch's doing


def test_notes_print_and_parse_back():
    mod = braze.import_torch(_export(torch.randn(2, 3), ({0: torch.export.Dim.AUTO},)))
    text = str(mod)
    assert "notes {" in text and '@main %x 0 "torch.export gave' in text
    back = braze.ir.parse(text, constants=mod.constants)
    assert back.input_notes == mod.input_notes and back == mod


def test_onnx_static_dim_note():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    mod = braze.import_onnx(model)
    _rejects(mod, np.ones((2, 5), np.float32), "dim 1 is 5, expected 4", "the ONNX model fixes this dim to 4")
    assert ("main", "x", 0) not in mod.input_notes


# --------------------------------------------------------------------------- names from a .pt2 file


def test_pt2_keeps_the_dim_names_given_by_dynamic_shapes(tmp_path):
    batch = torch.export.Dim("batch", min=1, max=64)
    dyn = ({0: batch},)
    ep = _export(torch.randn(2, 3), dyn)
    path = tmp_path / "net.pt2"
    torch.export.save(ep, str(path))
    # torch.export.save keeps no Dim name: the loaded program says s<N>
    plain = braze.import_torch(torch.export.load(str(path)))
    assert "batch" not in plain.symbols
    # the spec given to torch.export names them back, by position or by argument name
    for spec in (dyn, {"x": {0: batch}}, {"x": {0: "batch"}}):
        mod = braze.compile(path, dynamic_shapes=spec).module
        assert "batch" in mod.symbols and mod.symbols["batch"].range_str() == "[1, 64]"
        assert str(mod.main.params[0].type) == "f32[batch, 3]"


def test_dynamic_shapes_names_an_exported_program_too():
    ep = _export(torch.randn(2, 3), ({0: torch.export.Dim.AUTO},))
    mod = braze.import_torch(ep, dynamic_shapes={"x": {0: "rows"}})
    assert str(mod.main.params[0].type) == "f32[rows, 3]"
    # named now, but its range [2, inf] is still torch's 0/1 specialisation: the note stays
    _rejects(mod, np.ones((1, 3), np.float32), "rows = 1 is outside its range [2, inf]", "specialises sizes 0 and 1")
