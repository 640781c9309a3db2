"""Output names (Module.output_names): printed in an ``outputs`` block, parsed back, verified."""

import numpy as np
import pytest

import braze
from braze.errors import VerifyError
from braze.ops import Builder, tensor


def _module(names):
    b = Builder()
    n = b.sym("n", 1, 8)
    x = b.param("x", tensor("f32", n, 4))
    b.ret(b.relu(x), b.tanh(x))
    b.module.output_names["main"] = names
    return b.module


def test_output_names_print_and_parse_back():
    mod = _module(["probs", 'a "quoted" name'])
    text = str(mod)
    assert '  outputs {\n    @main "probs" "a \\"quoted\\" name"\n  }' in text
    back = braze.ir.parse(text)
    assert back.output_names == {"main": ["probs", 'a "quoted" name']} and back == mod


def test_output_names_survive_the_pipeline():
    cm = braze.compile(_module(["r", "t"]))
    assert cm.module.output_names == {"main": ["r", "t"]}
    assert [o.name for o in cm.outputs] == ["r", "t"]
    x = np.ones((2, 4), np.float32)
    assert len(cm(x)) == 2


@pytest.mark.parametrize("names,words", [(["only_one"], "2 results but 1 output names"),
                                         ([1, 2], "2 results but 2 output names")])
def test_verify_checks_one_name_per_result(names, words):
    with pytest.raises(VerifyError, match=words):
        braze.ir.verify(_module(names))


def test_signature_of_an_entry_not_named_main():
    from braze.ir.graph import signature
    b = Builder(func_name="f")
    n = b.sym("n", 1, 8)
    b.ret(b.relu(b.param("x", tensor("f32", n, 4))))
    ins, outs = signature(b.module)
    assert [str(i) for i in ins] == ["x: float32[n, 4]"] and outs[0].dtype == "float32"
    assert [str(i) for i in braze.compile(b.module).inputs] == ["x: float32[n, 4]"]
