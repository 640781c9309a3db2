"""One table of frontends (braze/frontend/registry.py): every entry is reachable from each place that
reads models or lists what braze reads: braze.compile, braze.import_*, the model-path checks and
readers, braze ops, and the error hints."""

from __future__ import annotations

import operator

import numpy as np
import pytest

import braze
from braze.cli import build_parser
from braze.errors import BrazeError
from braze.frontend.files import ModelFileError, check_model_path, load_model_file
from braze.frontend.registry import FRONTENDS, model_kinds, for_object, for_path, read_object
from braze.ops import Builder, tensor
from braze.optables import SECTIONS, render_text, section_ops


def _onnx_relu():
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _samples():
    """An object of each frontend's kind, and what it computes (relu)."""
    torch = pytest.importorskip("torch")
    keras = pytest.importorskip("keras")
    b = Builder()
    b.ret(b.relu(b.param("x", tensor("f32", b.sym("n"), 3))))
    x = keras.Input((3,), name="x")
    return {"ir": b.module, "onnx": _onnx_relu(), "torch": torch.nn.ReLU(),
            "tf": keras.Model(x, keras.layers.ReLU()(x))}


def test_every_frontend_is_reachable_from_every_reader(tmp_path):
    import torch
    samples = _samples()
    assert set(samples) == set(FRONTENDS)
    x = np.array([[-1.0, 2.0, -0.0]], np.float32)
    parser = build_parser()
    for name, fe in FRONTENDS.items():
        # braze.compile: the object is recognized by the modules of its type, and compiled
        ex = (torch.from_numpy(x),) if name == "torch" else None
        assert for_object(samples[name]) is fe
        got = braze.compile(samples[name], ex)(x)
        np.testing.assert_array_equal(np.asarray(got), np.maximum(x, 0))
        # braze.import_*: the API the entry names
        assert callable(operator.attrgetter(fe.import_api)(braze))
        # the model-path checks: each suffix, in any case, and each model directory is this frontend's
        for suffix in fe.suffixes:
            p = tmp_path / f"m{suffix.upper()}"
            p.write_bytes(b"")
            assert for_path(p) is fe and check_model_path(p) == p
        if fe.directory is not None:
            d = tmp_path / f"{name}_dir"
            d.mkdir()
            assert for_path(d) is None
            (d / "saved_model.pb").write_bytes(b"")
            assert for_path(d) is fe and check_model_path(d) == d
        # the hints name its files and objects
        assert fe.files in model_kinds()
        with pytest.raises(BrazeError, match="does not know how to read") as e:
            read_object(object())
        assert fe.objects in e.value.hint
        # braze ops: its section, in the CLI's choices too
        assert fe.ops_section in SECTIONS
        assert parser.parse_args(["ops", fe.ops_section]).section == fe.ops_section
        ops = section_ops(fe.ops_section)
        assert ops and all(o in render_text((fe.ops_section,)) for o in ops)


def test_a_frontend_refuses_another_frontends_naming_option(tmp_path):
    p = tmp_path / "relu.onnx"
    p.write_bytes(_onnx_relu().SerializeToString())
    with pytest.raises(BrazeError, match="dynamic_shapes applies to torch models; .*relu.onnx is read by the ONNX frontend") as e:
        load_model_file(p, dynamic_shapes={"x": {0: "n"}})
    assert e.value.hint == FRONTENDS["onnx"].dims
    assert load_model_file(p, dim_ranges={"n": (1, 8)}).symbols  # the option it takes
    with pytest.raises(BrazeError, match="dim_ranges applies to ONNX or TensorFlow models; the Module is read by the braze IR frontend") as e:
        read_object(_samples()["ir"], dim_ranges={"n": (1, 8)})
    assert e.value.hint == FRONTENDS["ir"].dims


def test_unknown_kinds_name_every_kind():
    with pytest.raises(ModelFileError, match=r"\(suffix '\.h5'\)") as e:
        check_model_path("model.h5")
    assert all(fe.files in e.value.hint for fe in FRONTENDS.values())
