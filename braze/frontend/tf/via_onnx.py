"""The fallback route, ``via="onnx"``: tf2onnx converts the frozen GraphDef (source.py) to ONNX, and
braze's ONNX frontend imports that, for models with a TF op the direct table (ops.py) lacks but
tf2onnx converts.

What tf2onnx alone gets wrong for braze is mended here: its inputs and outputs get the function's
names (not ``tokens:0``); every dynamic axis gets the name ``dims`` gives it (tf2onnx writes
``unk__N``); Erfc, which tf2onnx leaves a TF op, is rewritten as 1 - Erf before it converts; the
weights are constants already (the freeze folded the captured variables). A TF op left in the
ONNX graph is an UnsupportedOpError naming it.
"""

from __future__ import annotations

import contextlib
import logging

import numpy as np

from ...errors import UnsupportedOpError, require
from .source import Frozen

OPSET = 17


def import_via_onnx(frozen: Frozen, dims: dict, dim_ranges: dict | None):
    require("tf2onnx", "tf")
    import tf2onnx

    from ..onnx import import_onnx
    graph_def = _erfc_as_erf(frozen.graph_def)
    rename = {ph: name for name, ph, _ in frozen.inputs}
    rename.update({tensor: name for name, tensor in frozen.outputs})
    try:
        with _quiet("tf2onnx", "tensorflow"):  # their INFO lines and TF v1 deprecation notes, per node
            proto, _ = tf2onnx.convert.from_graph_def(graph_def, input_names=[ph for _, ph, _ in frozen.inputs],
                                                      output_names=[t for _, t in frozen.outputs], opset=OPSET,
                                                      tensors_to_rename=rename)
    except Exception as e:  # noqa: BLE001 (tf2onnx raises many kinds)
        raise UnsupportedOpError(f"tf2onnx could not convert {frozen.where}: {type(e).__name__}: "
                                 f"{str(e).splitlines()[0] if str(e) else ''}", where=frozen.where,
                                 hint="import it directly (via='graph', the default)") from None
    left = sorted({n.op_type for n in proto.graph.node if n.domain not in ("", "ai.onnx")})
    if left:
        raise UnsupportedOpError(f"{frozen.where} has TF ops tf2onnx leaves unconverted: {', '.join(left)}",
                                 where=frozen.where, hint="`braze ops tf` lists the TF ops braze converts directly")
    _name_dims(proto, frozen, dims)
    return import_onnx(proto, dim_ranges=dim_ranges)


@contextlib.contextmanager
def _quiet(*names):
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _erfc_as_erf(graph_def):
    """A copy of ``graph_def`` whose Erfc nodes compute 1 - Erf(x) (tf2onnx has no Erfc)."""
    import tensorflow as tf
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    for nd in [n for n in out.node if n.op == "Erfc"]:
        dt = nd.attr["T"].type
        one = out.node.add(name=f"{nd.name}/braze_one", op="Const")
        one.attr["dtype"].type = dt
        one.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.ones((), tf.as_dtype(dt).as_numpy_dtype)))
        erf = out.node.add(name=f"{nd.name}/braze_erf", op="Erf", input=list(nd.input))
        erf.attr["T"].type = dt
        nd.op = "Sub"
        del nd.input[:]
        nd.input.extend([one.name, erf.name])
    return out


def _name_dims(proto, frozen: Frozen, dims: dict) -> None:
    """Each graph input's dynamic axes named as ``dims`` says, else ``<input>_dim<axis>``."""
    for vi in proto.graph.input:
        axes = dims.get(vi.name, ())
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            want = axes[axis] if axis < len(axes) else None
            if d.HasField("dim_value") and d.dim_value > 0:
                continue
            if isinstance(want, int):
                d.dim_value = want
            else:
                d.dim_param = want if isinstance(want, str) else f"{vi.name}_dim{axis}"


__all__ = ["import_via_onnx"]
