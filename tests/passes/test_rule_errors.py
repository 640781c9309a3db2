"""A bug in a rewrite rule surfaces as the bug, not as a silently missed rewrite."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from braze.ops import Builder, tensor
from braze.ops.registry import get_op
from braze.passes import canonicalize, constant_fold, decompose

canon_mod = importlib.import_module("braze.passes.canonicalize")
decompose_mod = importlib.import_module("braze.passes.decompose")


def _module():
    b = Builder()
    n = b.sym("n", 1, 8)
    x = b.param("x", tensor("f32", n, 4))
    c = b.constant(np.arange(4, dtype=np.float32), "c")
    y = b.mul(b.reshape(b.reshape(x, shape=(n, 2, 2)), shape=(n, 4)), b.exp(c))
    q = b.reshape(y, shape=(1, n, 4))
    b.ret(b.scaled_dot_product_attention(q, q, q))
    return b.module


def _boom(*args, **kw):
    raise KeyError("a bug in a rule")


def test_canonicalize_rule_bug_surfaces(monkeypatch):
    monkeypatch.setattr(canon_mod, "_rewrite", _boom)
    with pytest.raises(KeyError, match="a bug in a rule"):
        canonicalize(_module())


def test_decompose_rule_bug_surfaces(monkeypatch):
    monkeypatch.setitem(decompose_mod.DECOMPOSITIONS, "scaled_dot_product_attention", _boom)
    with pytest.raises(KeyError, match="a bug in a rule"):
        decompose(_module())


def test_constant_fold_reference_bug_surfaces(monkeypatch):
    monkeypatch.setattr(get_op("exp"), "reference", _boom)
    with pytest.raises(KeyError, match="a bug in a rule"):
        constant_fold(_module())


def test_rules_that_do_not_apply_still_leave_the_node():
    m = canonicalize(constant_fold(decompose(_module())))
    ops = [n.op for n in m.main.nodes]
    assert "exp" not in ops and "scaled_dot_product_attention" not in ops and "softmax" in ops
