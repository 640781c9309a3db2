"""braze as an ``onnx.backend`` backend: prepare() imports, run() uses braze's reference interpreter.

braze needs some shape-like operands (Slice's starts, reduction axes, ...) at import time, and reads
others (Reshape's shape, Tile's repeats, ...) as symbols at run time when they are graph inputs. ONNX's
node tests feed them as graph inputs; ``run_node_test`` binds them as initializers from the test data
(what an exporter does when it writes them as constants) and imports again (``prepare_bound``).
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
    """A NumPy array from an array or a TensorProto (ONNX test data for bfloat16 and friends); a list
    (a sequence's test data, maybe ragged) is an UnsupportedOpError: braze imports tensor graphs."""
    if isinstance(a, (list, tuple)):
        raise UnsupportedOpError(f"a sequence of {len(a)} tensors as an input",
                                 hint="braze imports graphs of tensors, not sequences or optionals")
    if isinstance(a, onnx.TensorProto):
        from onnx import numpy_helper
        return numpy_helper.to_array(a)
    return np.asarray(a)


def prepare_bound(model: onnx.ModelProto, feed: dict) -> tuple[BrazeRep, dict]:
    """Import ``model`` with its shape operands bound as initializers from ``feed`` (what an exporter
    writes as constants): those the import needs (an UnsupportedOpError naming the input) and those it
    would read at run time (the module's value symbols). Returns the rep and what was bound."""
    names = [i.name for i in model.graph.input]
    bound: dict = {}
    for _ in range(len(names) + 1):
        try:
            rep = BrazeBackend.prepare(bind_inputs(model, bound) if bound else model)
        except UnsupportedOpError as e:
            name = getattr(e, "input_name", None)
            if name is None or name not in feed or name in bound:
                raise
            bound[name] = feed[name]
            continue
        params = [p.name for p in rep.module.main.params]  # the graph inputs left, in order
        left = [n for n in names if n not in bound]
        read = {left[params.index(p)] for (_, p, _) in rep.module.value_symbols}
        if not read:
            return rep, bound
        bound.update((n, feed[n]) for n in read)
    raise RuntimeError("binding inputs did not converge")  # pragma: no cover


def run_node_test(model: onnx.ModelProto, inputs: list) -> list:
    """Import and run one node test, its shape operands bound as constants (prepare_bound)."""
    names = [i.name for i in model.graph.input]
    feed = dict(zip(names, [as_array(a) for a in inputs]))
    rep, bound = prepare_bound(model, feed)
    return rep.run([feed[n] for n in names if n not in bound])


prepare = BrazeBackend.prepare
run_model = BrazeBackend.run_model
supports_device = BrazeBackend.supports_device
