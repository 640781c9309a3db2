"""Small ONNX models for the frontend's tests: onnx.helper's graph and model, checked by onnx.checker."""

from __future__ import annotations

import onnx
from onnx import helper


def onnx_model(nodes, inputs, outputs, inits=(), opset=18, name="g") -> onnx.ModelProto:
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8  # what ONNX Runtime 1.18, the oldest the tests take, reads
    onnx.checker.check_model(m)
    return m
