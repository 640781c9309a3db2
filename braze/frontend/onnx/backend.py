"""braze as an ``onnx.backend`` backend: prepare() imports, run() uses braze's reference interpreter.

braze needs shape-like operands (Reshape's shape, Slice's starts, reduction
axes, ...) at import time. ONNX's node tests feed them as graph inputs, so
``run_node_test`` binds such inputs as initializers from the test data (what an
exporter does when it writes them as constants) and imports again.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from ... import reference
from ...errors import UnsupportedOpError
from .importer import import_onnx


class BrazeRep(BackendRep):
    def __init__(self, module):
        self.module = module

    def run(self, inputs, **kwargs):
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        elif isinstance(inputs, dict):
            names = [p.name for p in self.module.main.params]
            inputs = [inputs[n] for n in names]
        out = reference.run(self.module, *inputs)
        return list(out) if isinstance(out, tuple) else [out]


class BrazeBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs) -> BrazeRep:
        super().prepare(model, device, **kwargs)
        return BrazeRep(import_onnx(model))

    @classmethod
    def run_model(cls, model, inputs, device="CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"


def bind_inputs(model: onnx.ModelProto, values: dict) -> onnx.ModelProto:
    """A copy of ``model`` where the graph inputs named in ``values`` are initializers."""
    from onnx import numpy_helper

    m = onnx.ModelProto()
    m.CopyFrom(model)
    keep = [i for i in m.graph.input if i.name not in values]
    del m.graph.input[:]
    m.graph.input.extend(keep)
    for name, a in values.items():
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(a), name))
    return m


def as_array(a):
    """A NumPy array from an array or a TensorProto (ONNX test data for bfloat16 and friends)."""
    if isinstance(a, onnx.TensorProto):
        from onnx import numpy_helper
        return numpy_helper.to_array(a)
    return np.asarray(a)


def run_node_test(model: onnx.ModelProto, inputs: list) -> list:
    """Import and run one node test, binding inputs braze needs at import time as constants."""
    names = [i.name for i in model.graph.input]
    feed = dict(zip(names, [as_array(a) for a in inputs]))
    bound: dict = {}
    for _ in range(len(names) + 1):
        try:
            rep = BrazeBackend.prepare(bind_inputs(model, bound) if bound else model)
            break
        except UnsupportedOpError as e:
            name = getattr(e, "input_name", None)
            if name is None or name not in feed or name in bound:
                raise
            bound[name] = feed[name]
    else:  # pragma: no cover
        raise RuntimeError("binding inputs did not converge")
    rest = [feed[n] for n in names if n not in bound]
    return rep.run(rest)


prepare = BrazeBackend.prepare
run_model = BrazeBackend.run_model
supports_device = BrazeBackend.supports_device
