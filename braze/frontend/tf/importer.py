"""A frozen TF function (source.py) as a braze Module, straight from its GraphDef.

Each TF node is converted by its entry in ``ops.TF_OPS``. Most entries write the node as one or
a few ONNX ops and run braze's ONNX converters on them in memory (``TFNode.onnx``), so the two
frontends share every converter and the import-time folding of shape values (``tf.shape``
arithmetic folds to symbolic dims exactly as ONNX's Shape/Gather/Concat do). No ONNX model is
written: a node here is a name, an op type, attributes in a dict and the inputs' tensors.

Inputs are named as the function names them; their dynamic axes become the symbols ``dims``
names (``{"tokens": ("batch", "seq")}``), one symbol per name across inputs, ranged by
``dim_ranges``. TF node names are the source locations of the braze ops made from them.
"""

from __future__ import annotations

import numpy as np

from ...errors import BrazeError, ModelFormatError, UnsupportedOpError
from ...ir.graph import Module, Value
from ...ir.types import DType, TensorType
from ...ops.builder import unique_names
from ..onnx.common import TV, normalize_known
from ..onnx.importer import Importer, NodeCtx, node_names
from .source import Frozen

ONNX_OPSET = 18  # the opset the in-memory ONNX ops are read at: reductions take their axes as an input


class _OnnxNode:
    """One ONNX op written for a TF node: what an ONNX converter reads of a NodeProto."""
    domain = ""
    attribute = ()

    def __init__(self, op_type: str, name: str, inputs: list[str], attrs: dict, n_out: int):
        self.op_type, self.name, self.input, self.attrs = op_type, name, inputs, attrs
        self.output = [f"{name}:{op_type}:{k}" for k in range(n_out)]


class _OnnxCtx(NodeCtx):
    """NodeCtx for an ONNX op written for a TF node: its attributes from a dict, its errors naming
    the TF node."""

    def __init__(self, imp, node: _OnnxNode, inputs: list, tf_node):
        super().__init__(imp, node, inputs, ONNX_OPSET)
        self.tf_node = tf_node

    def has_attr(self, name: str) -> bool:
        return name in self.node.attrs

    def attr(self, name: str, default=None):
        return self.node.attrs.get(name, default)

    def where(self) -> str:
        return self.tf_node.where()

    def unsupported(self, what: str, hint: str | None = None) -> UnsupportedOpError:
        return UnsupportedOpError(f"TF {self.tf_node.op} (as ONNX {self.node.op_type}): {what}", where=self.where(),
                                  hint=hint)


class TFNode:
    """What a TF op's entry sees: the node's attributes and input tensors, and ways to emit."""

    def __init__(self, imp: "TFImporter", nd, inputs: list[TV]):
        self.imp = imp
        self.nd = nd
        self.op = nd.op
        self.name = nd.name
        self.inputs = inputs

    def where(self) -> str:
        return f"TF node '{self.name}' ({self.op}) of {self.imp.what}"

    def unsupported(self, what: str, hint: str | None = None) -> UnsupportedOpError:
        return UnsupportedOpError(f"TF {self.op}: {what}", where=self.where(), hint=hint)

    def attr(self, name: str, default=None):
        if name not in self.nd.attr:
            return default
        return attr_value(self.nd.attr[name])

    def known(self, i: int) -> np.ndarray:
        """Input i's value, which must be known at import time (a constant, or derived from shapes)."""
        t = self.inputs[i]
        if t.known is None:
            raise self.unsupported(f"its input {i} ('{self.nd.input[i]}') is computed from tensor data at run time; "
                                   "braze needs it known at import time (a constant, or derived from shapes)")
        return t.known

    def const(self, array, dtype: DType | None = None) -> TV:
        a = np.asarray(array)
        dt = dtype or DType.from_numpy(a.dtype)
        return TV(known=normalize_known(a, dt), dtype=dt)

    def onnx(self, op_type: str, inputs: list, outputs: int = 1, **attrs) -> list:
        """Run braze's converter of ONNX ``op_type`` on ``inputs`` (TVs or None) with ``attrs``, for
        ``outputs`` outputs; they come back as TVs."""
        from ..onnx.table import CONVERTERS
        entry = CONVERTERS.get(op_type)
        if entry is None:
            raise self.unsupported(f"braze has no ONNX {op_type} to convert it with")
        names = [f"{self.name}/{k}" for k in range(len(inputs))]
        node = _OnnxNode(op_type, self.name, names, {k: v for k, v in attrs.items() if v is not None}, outputs)
        outs = entry[0](_OnnxCtx(self.imp, node, list(inputs), self))
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        return [o if o is None or isinstance(o, TV) else TV(value=o) for o in outs]

    def onnx1(self, op_type: str, *inputs, **attrs) -> TV:
        return self.onnx(op_type, list(inputs), **attrs)[0]

    def graph1(self, op: str, *inputs: TV, **attrs) -> TV:
        """braze's graph op ``op`` on ``inputs``, for a TF op no ONNX op means (Erfc)."""
        node = _OnnxNode(op, self.name, [f"{self.name}/{k}" for k in range(len(inputs))], {}, 1)
        ctx = _OnnxCtx(self.imp, node, list(inputs), self)
        return TV(value=ctx.op(op, *[ctx.value(k) for k in range(len(inputs))], **attrs))


def attr_value(a):
    """A TF AttrValue as Python: ints, floats, bools, strings, dtypes (braze DType or None), shapes
    (lists, -1 unknown), tensors (arrays) and lists of them."""
    kind = a.WhichOneof("value")
    if kind == "list":
        lst = a.list
        for field in ("i", "f", "b", "s", "type", "shape", "tensor"):
            vals = list(getattr(lst, field))
            if vals:
                return [_scalar_attr(field, v) for v in vals]
        return []
    return _scalar_attr(kind, getattr(a, kind)) if kind else None


def _scalar_attr(kind: str, v):
    if kind == "s":
        return v.decode(errors="replace")
    if kind == "type":
        return tf_dtype(v)
    if kind == "shape":
        return None if v.unknown_rank else [d.size for d in v.dim]
    if kind == "tensor":
        import tensorflow as tf
        return tf.make_ndarray(v)
    return v


_TF_DTYPES = {"float32": DType.float32, "float16": DType.float16, "bfloat16": DType.bfloat16,
              "float64": DType.float64, "int64": DType.int64, "int32": DType.int32, "int8": DType.int8,
              "uint8": DType.uint8, "bool": DType.bool, "int16": DType.int16, "uint16": DType.uint16,
              "uint32": DType.uint32, "uint64": DType.uint64}


def tf_dtype(code):
    """A TF DataType enum as a braze DType, or None where braze has none."""
    import tensorflow as tf
    try:
        return _TF_DTYPES.get(tf.as_dtype(code).name)
    except TypeError:
        return None


class TFImporter(Importer):
    def __init__(self, frozen: Frozen, dims: dict, dim_ranges: dict | None, path: str | None = None):
        # not Importer.__init__: there is no ModelProto; the ONNX ops written here are read at ONNX_OPSET.
        # ``dims``: checked against the inputs (check_dims)
        self._start(path, dim_ranges)
        self.proto = self.graph = None
        self.opset = ONNX_OPSET
        self.what = frozen.where
        self.frozen = frozen
        self.dims = dims

    def run(self) -> Module:
        from .ops import TF_OPS
        nodes = _topological(self.frozen.graph_def)
        self._check_ops(nodes, TF_OPS)
        placeholder = {ph.split(":")[0]: (name, spec) for name, ph, spec in self.frozen.inputs}
        names = unique_names([n for n, _, _ in self.frozen.inputs])
        for (name, ph, spec), pname in zip(self.frozen.inputs, names):
            p = self.b.param(pname, self._input_type(name, spec))
            self.env[ph] = TV(value=p, name=pname)
        self._check_ranges()
        for idx, nd in enumerate(nodes):
            self._node_idx = idx
            if nd.op == "Placeholder":
                if nd.name not in placeholder:
                    raise ModelFormatError(f"the graph input '{nd.name}' is not one of the function's inputs",
                                           where=self.what, hint="this is likely a braze bug; please report it")
                continue
            self._convert_tf(nd, TF_OPS[nd.op])
        results = []
        for name, tensor in self.frozen.outputs:
            t = self.env.get(_tensor_key(tensor))
            if t is None:
                raise ModelFormatError(f"output '{name}' ({tensor}) is not computed by the graph", where=self.what,
                                       hint="this is likely a braze bug; please report it")
            results.append(self.materialize(t))
        self.b.ret(*results)
        self.module.output_names[self.b.func.name] = unique_names([n for n, _ in self.frozen.outputs])
        return self.module

    def model_where(self) -> str:
        return self.what

    # --- inputs --------------------------------------------------------------
    def _input_type(self, name: str, spec) -> TensorType:
        dt = tf_dtype(spec.dtype.as_datatype_enum)
        if dt is None:
            raise UnsupportedOpError(f"input '{name}' is {spec.dtype.name}, which braze has no type for",
                                     where=self.what, hint="cast it to a float or int type in the model")
        if spec.shape.rank is None:
            raise ModelFormatError(f"input '{name}' has no rank", where=self.what,
                                   hint="give the function an input_signature with a shape for each input")
        shape = spec.shape.as_list()
        axes = self.dims.get(name)
        out = []
        for axis, d in enumerate(shape):
            want = axes[axis] if axes is not None else None
            if isinstance(want, str):
                if d is not None:
                    raise BrazeError(f"dims[{name!r}] names axis {axis} {want!r}, but {self.what} was traced with "
                                     f"that axis fixed to {d}", hint="trace it with None there (a TensorSpec with "
                                                                     "None), or pass the Keras model or tf.function")
                out.append(self._symbol(want, name, axis))
            elif want is not None and d is not None and int(want) != d:
                raise BrazeError(f"dims[{name!r}] gives axis {axis} the size {want}, but the model fixes it to {d}",
                                 hint=f"give None or {d} there")
            elif d is None:
                if want is not None:
                    out.append(int(want))
                else:
                    out.append(self._symbol(None, name, axis))
            else:
                out.append(int(d))
                self.module.input_notes[(self.b.func.name, name, axis)] = (
                    f"the TF model fixes this dim to {d} (its input spec has that size, not None); to serve other "
                    "sizes, give the axis a name in dims=")
        return TensorType(dt, tuple(out))

    # --- nodes ---------------------------------------------------------------
    def _check_ops(self, nodes, table) -> None:
        """One error naming every TF op braze cannot convert, with counts and node names."""
        bad: dict[str, list[str]] = {}
        for nd in nodes:
            if nd.op not in table and nd.op != "Placeholder":
                bad.setdefault(nd.op, []).append(nd.name)
        if not bad:
            return
        order = sorted(bad, key=lambda k: (-len(bad[k]), k))
        lines = [f"    {k} x{len(bad[k])}: {node_names(bad[k])}" for k in order]
        loops = " Recurrent layers (LSTM, GRU) and other loops are TF While ops, which braze does not convert " \
            "yet." if "While" in bad else ""
        err = UnsupportedOpError(f"{self.what} uses {len(order)} TF op{'s' * (len(order) > 1)} braze does not convert:\n"
                                 + "\n".join(lines), where=self.what,
                                 hint="`braze ops tf` lists the TF ops braze converts." + loops)
        err.unsupported = {k: len(bad[k]) for k in order}
        raise err

    def _convert_tf(self, nd, fn) -> None:
        inputs = []
        for name in nd.input:
            if name.startswith("^"):
                continue  # a control dependency: braze's graph has no side effects to order
            t = self.env.get(_tensor_key(name))
            if t is None:  # an output braze leaves out: a batch norm's statistics, which training uses
                raise UnsupportedOpError(f"TF node '{nd.name}' ({nd.op}) reads '{name}', an output braze does not "
                                         "compute", where=self.what,
                                         hint="trace the model for inference (training=False)")
            inputs.append(t)
        node = TFNode(self, nd, inputs)
        try:
            outs = fn(node)
        except BrazeError:
            raise
        except Exception as e:  # noqa: BLE001
            raise BrazeError(f"converting TF {nd.op} failed: {type(e).__name__}: {e}", where=node.where(),
                             hint="this is likely a braze bug; please report it") from e
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        for k, o in enumerate(outs):
            if o is None:
                continue  # an output nothing may read (a batch norm's statistics): reading it is an error below
            if isinstance(o, Value):
                o = TV(value=o)
            self.env[f"{nd.name}:{k}"] = o


def _tensor_key(name: str) -> str:
    return name if ":" in name else f"{name}:0"


def _topological(graph_def) -> list:
    """The GraphDef's nodes, each after the nodes it reads (TF does not promise an order)."""
    by_name = {nd.name: nd for nd in graph_def.node}
    done: set[str] = set()
    out = []
    for root in graph_def.node:
        stack = [(root, False)]
        while stack:
            nd, expanded = stack.pop()
            if nd.name in done:
                continue
            if expanded:
                done.add(nd.name)
                out.append(nd)
                continue
            stack.append((nd, True))
            for i in nd.input:
                src = by_name.get(i.lstrip("^").split(":")[0])
                if src is not None and src.name not in done:
                    stack.append((src, False))
    return out


def check_dims(dims: dict, frozen: Frozen) -> None:
    """``dims`` (as ``checked_dims`` gives it) names only the function's inputs, one entry per axis."""
    names = [n for n, _, _ in frozen.inputs]
    unknown = sorted(set(dims) - set(names))
    if unknown:
        raise BrazeError(f"dims names inputs the model does not have: {unknown}",
                         hint=f"its inputs: {', '.join(names)}")
    for name, _, spec in frozen.inputs:
        axes, rank = dims.get(name), spec.shape.rank
        if axes is not None and rank is not None and len(axes) != rank:
            raise BrazeError(f"dims[{name!r}] has {len(axes)} entries, but input '{name}' has rank {rank}",
                             hint="give one entry per axis: a name for a dynamic axis, None or the size for a "
                                  "static one")


def checked_dims(dims) -> dict:
    """``dims`` as given, its form checked before anything is traced: {input: tuple of entries}."""
    if dims is None:
        return {}
    if not isinstance(dims, dict):
        raise BrazeError(f"dims must be a dict of input name -> one entry per axis, got {type(dims).__name__}",
                         hint='for example dims={"tokens": ("batch", "seq")}')
    out = {}
    for k, axes in dims.items():
        if isinstance(axes, str) or not isinstance(axes, (list, tuple)):
            raise BrazeError(f"dims[{k!r}] must be a tuple with one entry per axis, got {axes!r}",
                             hint='for example ("batch", "seq", None)')
        for a in axes:
            if not (a is None or isinstance(a, str) and a.isidentifier() or isinstance(a, int) and a >= 0):
                raise BrazeError(f"dims[{k!r}] has the entry {a!r}: each is a dim name (an identifier), None or a "
                                 "size")
        out[k] = tuple(axes)
    return out


def import_tf(model, dims=None, dim_ranges=None, signature: str | None = None, via: str = "graph") -> Module:
    """A TensorFlow model as a braze Module: a ``keras.Model``, a ``tf.function`` with an input
    signature, a ConcreteFunction, or a SavedModel directory (its ``serving_default`` signature, or
    the one ``signature`` names).

    ``dims={"tokens": ("batch", "seq")}``: one entry per axis of an input, a name for a dynamic axis
    (the same name in two inputs is one symbol), None or the size for a static one; an unnamed
    dynamic axis is ``<input>_dim<axis>``. ``dim_ranges={"batch": (1, 64)}`` ranges the symbols.
    ``via``: "graph" (default) reads the frozen GraphDef here; "onnx" has tf2onnx convert it and
    imports the ONNX (via_onnx.py), for a model with a TF op only tf2onnx converts.
    """
    import os

    from .source import freeze
    if via not in ("graph", "onnx"):
        raise BrazeError(f"via={via!r} is not a TF import route", hint="use 'graph' (the default) or 'onnx'")
    path = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    dims = checked_dims(dims)
    frozen = freeze(model, dims, signature)
    check_dims(dims, frozen)
    if via == "onnx":
        from .via_onnx import import_via_onnx
        return import_via_onnx(frozen, dims, dim_ranges)
    return TFImporter(frozen, dims, dim_ranges, path).run()


__all__ = ["TFImporter", "import_tf"]
