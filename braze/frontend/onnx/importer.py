"""ONNX -> braze graph IR: loading, checking, symbols, and the graph walk.

Every ONNX tensor becomes a ``TV``: a braze ``Value`` and/or a *known value*,
a NumPy array whose elements may be symbolic ints (object dtype). Shape
arithmetic (``Shape -> Gather -> Concat -> Reshape``) is folded on known
values at import time, so reshape targets and slice bounds stay symbolic
attributes instead of run-time tensors. A known value becomes a graph value
only when a real op consumes it.
"""

from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from ... import log as _logging
from ...errors import BrazeError, ModelFormatError, UnsupportedOpError
from ...ir import sym as S
from ...ir.graph import Module, SourceLoc, Value
from ...ir.sym import Sym
from ...ir.types import DType, TensorType
from ...ops.builder import Builder, sanitize, unique_names
from .common import TV, Opt, Seq, is_symbolic_array, onnx_dtype
from .convert import TAKES_SEQUENCES, op_key
from .structure import STRUCTURED, flatten_output, structured_input

MIN_OPSET = 13
TARGET_OPSET = 21  # opsets 13..21 are the target; newer ones load where op semantics are unchanged
UNSUPPORTED_HINT = ("`braze ops` lists what braze supports; re-export the model without those ops (another opset, "
                    "or rewrite them), or, if your model needs them, file an issue with the op names and the model")

# ---------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------


def load_model(model) -> tuple[Any, str | None]:
    """(ModelProto, path or None) from a path, bytes or ModelProto; ModelFormatError if malformed."""
    import onnx

    path = None
    if isinstance(model, onnx.ModelProto):
        proto = model
    elif isinstance(model, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(model), "<bytes>")
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise ModelFormatError(f"cannot read ONNX model file: {e.strerror or e}", where=path,
                                   hint="check the path and the file's permissions") from None
        proto = _parse(data, path)
        if _external(proto):
            try:
                from onnx.external_data_helper import load_external_data_for_model
                load_external_data_for_model(proto, os.path.dirname(os.path.abspath(path)))
            except Exception as e:
                raise _missing_external(proto, f"cannot load the model's external weight data ({e})", path) from None
    else:
        raise ModelFormatError(f"import_onnx takes a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    where = path or "<model>"
    if path is None and _external(proto):
        # onnx.load(..., load_external_data=False): the weights are not in the proto, and reading
        # them relative to the current directory would work only by accident
        raise _missing_external(proto, "the model's weights are in external data that was not loaded", where)
    try:
        onnx.checker.check_model(proto)
    except Exception as e:  # onnx.checker.ValidationError and friends
        msg = " ".join(str(e).split())  # the checker's message spans lines (the node's name, its op)
        msg = msg if len(msg) <= 400 else msg[:400] + " ..."
        raise ModelFormatError(f"the ONNX model is invalid: {msg or type(e).__name__}", where=where,
                               hint="run onnx.checker.check_model(model) for details; re-export the model") from None
    return proto, path


def _external(proto) -> list:
    """The initializers whose data lives in an external file and is not loaded."""
    import onnx
    return [t for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]


def _missing_external(proto, what: str, where: str) -> ModelFormatError:
    ts = _external(proto)
    files = sorted({e.value for t in ts for e in t.external_data if e.key == "location"})
    names = ", ".join(t.name for t in ts[:20]) + (f", and {len(ts) - 20} more" if len(ts) > 20 else "")
    return ModelFormatError(
        f"{what}: {len(ts)} initializer{'s' if len(ts) != 1 else ''} without data: {names}"
        + (f" (stored in {', '.join(files)})" if files else ""), where=where,
        hint="load the model with onnx.load(path) (it loads external data from the .onnx file's directory), "
             "or pass the .onnx path and keep its data file next to it")


def _parse(data: bytes, where: str):
    import onnx
    from google.protobuf.message import DecodeError

    if not data:
        raise ModelFormatError("the ONNX model is empty (0 bytes)", where=where, hint="re-export the model")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelFormatError(f"not an ONNX model: protobuf parsing failed ({e})", where=where,
                               hint="is this really an .onnx file? It may be truncated or another format") from None
    if not proto.HasField("graph"):
        raise ModelFormatError("not an ONNX model: the file has no graph", where=where,
                               hint="is this really an .onnx file?")
    return proto


# ---------------------------------------------------------------------------
# the importer
# ---------------------------------------------------------------------------


class NodeCtx:
    """What a converter sees: the node, its inputs as TVs, attributes, and the builder."""

    def __init__(self, imp: "Importer", node, inputs: list, opset: int):
        self.imp = imp
        self.node = node
        self.inputs = inputs
        self.opset = opset
        self.b = imp.b
        self.loc = imp.loc(node)
        self.version = imp.since_version(node.op_type)
        self._attrs = {a.name: a for a in node.attribute}

    # --- attributes ----------------------------------------------------------
    def has_attr(self, name: str) -> bool:
        return name in self._attrs

    def attr(self, name: str, default=None):
        import onnx
        from onnx import numpy_helper

        a = self._attrs.get(name)
        if a is None:
            return default
        if a.type == onnx.AttributeProto.TENSOR:
            return numpy_helper.to_array(a.t)
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            return v.decode()
        if isinstance(v, list):
            return [x.decode() if isinstance(x, bytes) else x for x in v]
        return v

    # --- inputs --------------------------------------------------------------
    def n_inputs(self) -> int:
        return len(self.inputs)

    def tv(self, i: int) -> TV | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def value(self, i: int) -> Value | None:
        t = self.tv(i)
        return None if t is None else self.imp.materialize(t)

    def known(self, i: int) -> np.ndarray | None:
        t = self.tv(i)
        return None if t is None else t.known

    def known_ints(self, i: int, what: str, run_time: tuple | None = None) -> list | None:
        """Flat list of IntLikes of input i, or an UnsupportedOpError if only known at run time.

        ``run_time``: (lo, hi), where the converter takes a graph input's values at run time as symbols
        that must lie in that range (Importer.value_symbols); those values only move shapes."""
        t = self.tv(i)
        if t is None:
            return None
        if run_time is not None:
            self.imp.value_symbols(t, *run_time)
        if t.known is None:
            raise self._needs_known(i, what)
        return [x if isinstance(x, S.SymExpr) else int(x) for x in t.known.flat]

    def const_scalar(self, i: int, what: str):
        t = self.tv(i)
        if t is None:
            return None
        if t.known is None or is_symbolic_array(t.known):
            raise self._needs_known(i, what)
        return t.known.reshape(-1)[0].item() if t.known.size else None

    def _needs_known(self, i: int, what: str) -> UnsupportedOpError:
        e = self.unsupported(f"its {what} (input {i}, '{self.node.input[i]}') is computed from tensor data at run "
                             "time; braze needs it known at import time (a constant, or derived from shapes)",
                             hint="export it as a constant (e.g. an initializer), or fold the data-dependent part")
        e.input_name = self.node.input[i]  # lets a caller bind that tensor as a constant and retry
        return e

    # --- emitting ------------------------------------------------------------
    def op(self, name: str, *inputs, **attrs) -> Any:
        return self.b.op(name, list(inputs), loc=self.loc, **attrs)

    def const(self, array, dtype: DType | None = None) -> Value:
        a = np.asarray(array)
        if dtype is not None:
            a = a.astype(dtype.numpy)
        return self.b.constant(a, loc=self.loc)

    def scalar(self, v, dtype: DType) -> Value:
        return self.const(np.asarray(v, dtype=dtype.numpy))

    def cast(self, v: Value, dtype: DType) -> Value:
        return v if v.dtype is dtype else self.op("cast", v, dtype=dtype)

    def int_value(self, v, dtype: DType = DType.int64) -> Value:
        """A 0-d tensor of a (maybe symbolic) integer: a dim, a stride, a count."""
        return self.imp.materialize(TV(known=np.array(v, dtype=object), dtype=dtype))

    def iota(self, n, axis: int = 0, rank: int = 1) -> Value:
        """0..n-1 (int64) along ``axis`` of a rank-``rank`` shape of ones (n may be symbolic)."""
        r = self.op("arange", start=0, end=n, step=1, dtype=DType.int64)
        return self.op("reshape", r, shape=tuple(n if i == axis else 1 for i in range(rank))) if rank > 1 else r

    def onnx_op(self, op_type: str, *inputs: Value, **attrs) -> Value:
        """ONNX ``op_type`` with ``attrs`` on ``inputs``, converted as a node of the model would be (a
        one-node subgraph): a converter that is written in terms of another ONNX op."""
        from onnx import helper

        names = [f"in{i}" for i in range(len(inputs))]
        g = helper.make_graph([helper.make_node(op_type, names, ["out"], **attrs)], op_type,
                              [helper.make_empty_tensor_value_info(n) for n in names],
                              [helper.make_empty_tensor_value_info("out")])
        return self.imp.materialize(self.imp.run_subgraph(g, [TV(value=v) for v in inputs])[0])

    # --- errors --------------------------------------------------------------
    def where(self) -> str:
        n = self.node
        return f"node '{n.name or '<unnamed>'}' ({n.op_type}, opset {self.opset})" + \
            (f" in {self.imp.path}" if self.imp.path else "")

    def unsupported(self, what: str, hint: str | None = None) -> UnsupportedOpError:
        return UnsupportedOpError(f"ONNX {self.node.op_type}: {what}", where=self.where(), hint=hint)


def _upgrade(proto, version: int, where: str):
    """A model of an opset older than 13, converted to opset 13 by ONNX's own version converter: braze's
    converters are written against 13..21, and the converter knows every op's changes between."""
    from onnx import version_converter

    try:
        out = version_converter.convert_version(proto, MIN_OPSET)
    except Exception as e:  # noqa: BLE001 (the converter raises RuntimeError, ValueError, its own C++ errors)
        # its C++ assertions read "file.cc:N: fn: Assertion `cond` failed: what"; keep the what
        why = re.sub(r"^.*Assertion .* failed: ", "", str(e).splitlines()[0]) if str(e) else type(e).__name__
        raise UnsupportedOpError(
            f"the model uses ONNX opset {version}, and ONNX's version converter could not bring it to opset "
            f"{MIN_OPSET}: {why}", where=where,
            hint=f"re-export the model with opset_version between {MIN_OPSET} and {TARGET_OPSET}") from None
    _logging.get("frontend").info("%s: converted from ONNX opset %d to %d (onnx.version_converter)",
                                  where, version, MIN_OPSET)
    return out


def node_names(names: list[str]) -> str:
    """The first three node names of an error's listing, and how many more."""
    return ", ".join(f"'{n}'" for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


class Importer:
    def __init__(self, proto, path: str | None, dim_ranges, sequences=None):
        self._start(path, dim_ranges)
        self.sequences = dict(sequences or {})  # structure.structured_input's specs, by graph input
        self.output_structure: list = []  # each graph output's, as structure.flatten_output gives it
        self.proto = proto
        self.graph = proto.graph
        self.opset = self._opset()
        self._expand()

    def _start(self, path: str | None, dim_ranges) -> None:
        """What every importer starts with (the TF frontend's too): an empty module and its names."""
        self.path = path
        self.module = Module()
        self.b = Builder(self.module, "main")
        self.env: dict[str, TV] = {}
        self.dim_ranges = dict(dim_ranges or {})
        self._used_ranges: set[str] = set()
        self._fresh = 0
        self._node_idx = 0

    def model_where(self) -> str:
        return self.path or "<model>"

    def _check_ranges(self) -> None:
        """dim_ranges may name only the model's dims (call it once every input's type is made)."""
        unknown = set(self.dim_ranges) - self._used_ranges
        if unknown:
            raise ModelFormatError(f"dim_ranges names dims the model does not have: {sorted(unknown)}",
                                   where=self.model_where(),
                                   hint=f"the model's dims are: {', '.join(sorted(self.module.symbols))}")

    # --- opsets --------------------------------------------------------------
    def _opset(self) -> int:
        ops = {o.domain: o.version for o in self.proto.opset_import}
        v = ops.get("", ops.get("ai.onnx"))
        where = self.path or "<model>"
        if v is None and ops:  # only other domains: ai.onnx.ml, ai.onnx.training, a vendor's
            raise UnsupportedOpError(f"the model's ops are from domain{'s' if len(ops) > 1 else ''} "
                                     f"{', '.join(sorted(ops))}, which braze does not support", where=where,
                                     hint="braze imports ops of the default ONNX domain (ai.onnx)")
        if v is None:
            raise ModelFormatError("the model imports no default-domain ('' / ai.onnx) opset", where=where,
                                   hint="re-export the model with a standard opset (13..21)")
        if v < MIN_OPSET:
            self.proto = _upgrade(self.proto, v, where)
            return MIN_OPSET
        return v

    def _expand(self) -> None:
        """Ops braze lacks that ONNX defines as functions, replaced by their bodies (functions.py)."""
        from .functions import expand_functions
        from .table import CONVERTERS
        self.proto = expand_functions(self.proto, CONVERTERS, self.opset)
        self.graph = self.proto.graph

    def since_version(self, op_type: str) -> int:
        import onnx

        try:
            return onnx.defs.get_schema(op_type, self.opset, "").since_version
        except Exception:
            return self.opset

    def loc(self, node) -> SourceLoc:
        return SourceLoc(file=self.path, name=node.name or f"{node.op_type}_{self._node_idx}")

    # --- symbols -------------------------------------------------------------
    def _symbol(self, dim_param: str | None, input_name: str, axis: int) -> Sym:
        if dim_param:
            name = sanitize(dim_param).replace(".", "_")
            keys = (dim_param, name)
        else:
            name = sanitize(f"{input_name}_dim{axis}").replace(".", "_")
            keys = (name,)
        if name[0].isdigit():
            name = "d" + name
        lo, hi = self._user_range(keys, 1, None)
        existing = self.module.constraints.symbol(name)
        if existing is not None and (existing.lo, existing.hi) == (lo, hi):
            return existing
        return self.b.sym(name, lo, hi)

    def value_symbols(self, t: TV, lo: int, hi: int | None) -> None:
        """Make a numeric graph input of static shape (a shape operand fed at run time) known as
        symbols, one per element, that the entry reads from the input and checks against [lo, hi] and
        ``dim_ranges`` (``<input>_<i>``, or ``<input>`` for a 0-d input). Anything else stays unknown.
        An input made so before (read by another op too) gets this use's range as well: each op's
        reading of the values (a Reshape's target entries are sizes, not codes) holds at run time."""
        if t.known is not None:
            names = set(self.module.value_symbols.values())
            for s in t.known.flat:
                if isinstance(s, Sym) and s.name in names:
                    self.b.sym(s.name, lo, hi)  # the store intersects the ranges
            return
        p = t.value
        ok = p is not None and (p.dtype.is_int or p.dtype in (DType.float32, DType.float64))  # floats truncate
        if not ok or not p.type.is_static() or p.rank > 1 \
                or not any(p is q for q in self.b.func.params) or int(p.type.numel()) > 64:
            return
        fn = self.b.func.name
        syms = []
        for j in range(int(p.type.numel())):
            name = sanitize(t.name if p.rank == 0 else f"{t.name}_{j}").replace(".", "_")
            name = "v" + name if name[0].isdigit() else name
            key = (fn, p.name, j)
            while self.module.value_symbols.get(key) != name and self.module.constraints.symbol(name) is not None:
                name += "_"  # a dim's symbol has that name: not the same thing
            ulo, uhi = self._user_range((name,), lo, hi)
            his = [h for h in (hi, uhi) if h is not None]
            syms.append(self.b.sym(name, max(lo, ulo), min(his) if his else None))
            self.module.value_symbols[key] = name
        t.known = np.array(syms, dtype=object).reshape(tuple(int(d) for d in p.shape))

    def _user_range(self, keys, lo: int, hi: int | None) -> tuple:
        """(lo, hi) from ``dim_ranges`` under one of ``keys``, else the given default."""
        for k in keys:
            if k in self.dim_ranges:
                rng = self.dim_ranges[k]
                self._used_ranges.add(k)
                try:
                    lo, hi = int(rng[0]), (None if rng[1] is None or rng[1] == float("inf") else int(rng[1]))
                except (TypeError, ValueError, IndexError):
                    raise ModelFormatError(f"dim_ranges[{k!r}] = {rng!r} is not a (lo, hi) pair",
                                           hint="pass e.g. dim_ranges={'batch': (1, 64)}; hi may be None") from None
                if lo < 0 or (hi is not None and hi < lo):
                    raise ModelFormatError(f"dim_ranges[{k!r}] = {rng!r} is an empty range",
                                           hint="give (lo, hi) with 0 <= lo <= hi, e.g. (1, 64)")
        return lo, hi

    def _input_type(self, vi) -> TensorType:
        tt = vi.type
        if not tt.HasField("tensor_type"):
            where = f"graph input '{vi.name}'" + (f" in {self.path}" if self.path else "")
            raise UnsupportedOpError(f"graph input '{vi.name}' is not a tensor ({tt.WhichOneof('value')})",
                                     where=where, hint="braze imports models whose inputs are tensors")
        return self.tensor_type(vi.name, tt.tensor_type)

    def tensor_type(self, name: str, t, rank: int | None = None, element: bool = False) -> TensorType:
        """The type of graph input ``name`` from its ONNX tensor type; one without a shape takes ``rank``
        symbolic dims, where the caller knows the rank. A sequence's ``element`` gets symbols of its own
        for dims the type leaves open: a dim_param there names no dim shared between elements."""
        where = f"graph input '{name}'" + (f" in {self.path}" if self.path else "")
        dt = onnx_dtype(t.elem_type, where)
        if not t.HasField("shape"):
            if rank is not None:
                return TensorType(dt, tuple(self._symbol(None, name, axis) for axis in range(rank)))
            raise ModelFormatError(f"graph input '{name}' has no shape (not even a rank)", where=where,
                                   hint="export with input shapes (torch.onnx.export(..., dynamic_axes=...)) or set "
                                        "them with onnx.tools.update_model_dims.update_inputs_outputs_dims")
        dims = []
        for axis, d in enumerate(t.shape.dim):
            if d.HasField("dim_value"):
                if d.dim_value < 0:
                    raise ModelFormatError(f"graph input '{name}' dim {axis} is {d.dim_value}", where=where)
                dims.append(int(d.dim_value))
            else:
                dims.append(self._symbol(None if element else d.dim_param or None, name, axis))
        return TensorType(dt, tuple(dims))

    # --- known values -> graph values -----------------------------------------
    def materialize(self, t: TV) -> Value:
        if not isinstance(t, TV):
            raise UnsupportedOpError(f"{t!r} where a tensor is needed", where=self.model_where(),
                                     hint="take the tensor out of the sequence or optional first")
        if t.value is not None:
            return t.value
        a = t.known
        if not is_symbolic_array(a):
            t.value = self.b.constant(np.asarray(a, dtype=t.dtype.numpy), name=t.name)
            return t.value
        # symbolic ints: one arange(e, e+1) per symbolic element, joined
        pieces = []
        flat = list(a.flat)
        dt = t.dtype if t.dtype in (DType.int64, DType.int32) else DType.int64
        run: list[int] = []
        for x in flat:
            if isinstance(x, S.SymExpr):
                if run:
                    pieces.append(self.b.constant(np.array(run, dtype=dt.numpy)))
                    run = []
                pieces.append(self.b.op("arange", [], start=x, end=S.add(x, 1), step=1, dtype=dt))
            else:
                run.append(int(x))
        if run:
            pieces.append(self.b.constant(np.array(run, dtype=dt.numpy)))
        v = pieces[0] if len(pieces) == 1 else self.b.op("concat", pieces, axis=0)
        if a.shape != (len(flat),):
            v = self.b.op("reshape", [v], shape=tuple(a.shape))
        if dt is not t.dtype:
            v = self.b.op("cast", [v], dtype=t.dtype)
        t.value = v
        return v

    def run_subgraph(self, graph, feeds: list) -> list:
        """Convert a node's subgraph (a Scan body) once: its inputs are ``feeds`` (TVs, in order),
        the outer graph's tensors stay visible, its own names live only for this pass. Returns its
        outputs' TVs."""
        from onnx import numpy_helper

        if len(feeds) != len(graph.input):
            raise ModelFormatError(f"a subgraph takes {len(graph.input)} inputs, given {len(feeds)}",
                                   where=self.model_where())
        saved = self.env
        self.env = dict(saved)
        try:
            for vi, t in zip(graph.input, feeds):
                if not isinstance(t, TV):  # a sequence or an optional, as it is
                    self.env[vi.name] = t
                    continue
                self.env[vi.name] = TV(value=t.value, known=t.known, dtype=t.dtype, name=vi.name) \
                    if t.value is None else TV(value=t.value, known=t.known, name=vi.name)
            for init in graph.initializer:
                dt = onnx_dtype(init.data_type, f"initializer '{init.name}'")
                self.env[init.name] = TV(known=np.asarray(numpy_helper.to_array(init)).astype(dt.numpy, copy=False),
                                         dtype=dt, name=init.name)
            for node in graph.node:
                self._convert(node)
            missing = [o.name for o in graph.output if o.name not in self.env]
            if missing:
                raise ModelFormatError(f"subgraph output '{missing[0]}' is not produced by any node",
                                       where=self.model_where())
            return [self.env[o.name] for o in graph.output]
        finally:
            self.env = saved

    # --- the walk ------------------------------------------------------------
    def run(self) -> Module:
        from onnx import numpy_helper

        g = self.graph
        inits = {i.name for i in g.initializer}
        for init in g.initializer:
            where = f"initializer '{init.name}'"
            dt = onnx_dtype(init.data_type, where)
            try:
                arr = numpy_helper.to_array(init)
            except Exception as e:
                raise ModelFormatError(f"cannot read initializer '{init.name}': {e}", where=self.path) from None
            self.env[init.name] = TV(known=np.asarray(arr).astype(dt.numpy, copy=False), dtype=dt, name=init.name)
        for vi in g.input:
            if vi.name in inits:
                continue  # an initializer listed as input (old exporters): a constant
            if not vi.type.HasField("tensor_type") and vi.type.WhichOneof("value") in STRUCTURED:
                self.env[vi.name] = structured_input(self, vi, self.sequences)
                continue
            self.env[vi.name] = TV(value=self.param(vi.name, self._input_type(vi)), name=vi.name)
        self._check_ops()
        for idx, node in enumerate(g.node):
            self._node_idx = idx
            self._convert(node)
        self._check_ranges()  # after the walk: shape operands fed as inputs name their symbols in it
        results, names = [], []
        for o in g.output:
            t = self.env.get(o.name)
            if t is None:
                raise ModelFormatError(f"graph output '{o.name}' is not produced by any node", where=self.path)
            tensors, shape = flatten_output(t, o.name)
            self.output_structure.append(shape)
            results += [self.materialize(x) for x, _ in tensors]
            names += [n for _, n in tensors]
        self.b.ret(*results)
        self.module.output_names[self.b.func.name] = unique_names(names)
        return self.module

    def param(self, name: str, type: TensorType) -> Value:
        """A graph input's parameter (a sequence's element is one too)."""
        p = self.b.param(name, type)
        for axis, d in enumerate(p.type.shape):
            if isinstance(d, int):  # input errors say why the dim is fixed
                self.module.input_notes[(self.b.func.name, p.name, axis)] = (
                    f"the ONNX model fixes this dim to {d} (its graph input has a dim_value, not a dim_param); "
                    "to serve other sizes, export the model with this dim dynamic")
        return p

    def _check_ops(self):
        """One error naming every op type braze cannot convert, with counts and node names."""
        from .table import CONVERTERS
        bad: dict[str, list[str]] = {}
        for idx, node in enumerate(self.graph.node):
            key = op_key(node.domain, node.op_type)
            if key not in CONVERTERS:
                bad.setdefault(key, []).append(node.name or f"{node.op_type}_{idx}")
        if not bad:
            return
        order = sorted(bad, key=lambda k: (-len(bad[k]), k))
        total = sum(len(v) for v in bad.values())
        lines = []
        for k in order:
            ns = bad[k]
            custom = " (a custom domain)" if "::" in k else ""
            lines.append(f"    {k} x{len(ns)}{custom}: node{'s' if len(ns) > 1 else ''} {node_names(ns)}")
        what = (f"ONNX op '{order[0]}' is not supported" if total == 1 else
                f"the model uses {len(order)} ONNX op{'s' if len(order) > 1 else ''} that braze does not support "
                f"({total} nodes in all)")
        where = f"{self.path or '<model>'} (opset {self.opset})"
        err = UnsupportedOpError(what + ":\n" + "\n".join(lines), where=where, hint=UNSUPPORTED_HINT)
        err.unsupported = {k: len(bad[k]) for k in order}  # op type -> node count
        raise err

    def _convert(self, node):
        from .table import CONVERTERS

        entry = CONVERTERS.get(op_key(node.domain, node.op_type))
        if entry is None and node.domain not in ("", "ai.onnx"):
            ctx = NodeCtx(self, node, [], self.opset)
            raise UnsupportedOpError(f"ONNX op {node.domain}::{node.op_type} is from a custom domain",
                                     where=ctx.where(), hint=UNSUPPORTED_HINT)
        for o in node.output:
            if o and o in self.env:
                raise ModelFormatError(f"tensor '{o}' is defined twice (graph is not SSA)",
                                       where=f"node '{node.name}' ({node.op_type})")
        inputs = []
        for i in node.input:
            if not i:
                inputs.append(None)
                continue
            t = self.env.get(i)
            if t is None:
                raise ModelFormatError(f"node '{node.name}' ({node.op_type}) reads tensor '{i}', which is not "
                                       "defined before it", where=self.path or "<model>",
                                       hint="the graph must be topologically sorted; re-export the model")
            inputs.append(t)
        ctx = NodeCtx(self, node, inputs, self.opset)
        if entry is None:
            raise UnsupportedOpError(f"ONNX op '{node.op_type}' is not supported", where=ctx.where(),
                                     hint=UNSUPPORTED_HINT)
        if op_key(node.domain, node.op_type) not in TAKES_SEQUENCES:
            for k, t in enumerate(inputs):
                if isinstance(t, (Seq, Opt)):
                    what = "a sequence" if isinstance(t, Seq) else "an optional"
                    raise ctx.unsupported(f"input {k} ('{node.input[k]}') is {what}; this op takes tensors",
                                          hint="take the tensor out first (SequenceAt, ConcatFromSequence, "
                                               "OptionalGetElement)")
        fn, attrs = entry
        for a in node.attribute:
            if a.name not in attrs:
                raise ctx.unsupported(f"attribute '{a.name}' is not supported",
                                      hint=f"supported attributes: {', '.join(sorted(attrs)) or 'none'}")
        try:
            outs = fn(ctx)
        except BrazeError:
            raise
        except Exception as e:
            raise BrazeError(f"converting ONNX {node.op_type} failed: {type(e).__name__}: {e}",
                             where=ctx.where(), hint="this is likely a braze bug; please report it") from e
        if not isinstance(outs, (list, tuple)):
            outs = [outs]
        for k, name in enumerate(node.output):
            if not name:
                continue
            if k >= len(outs) or outs[k] is None:
                raise ctx.unsupported(f"output {k} ('{name}') is not supported")
            o = outs[k]
            if isinstance(o, Value):
                o = TV(value=o, name=name)
            else:
                o.name = o.name or name
            self.env[name] = o


def import_onnx(model, dim_ranges=None, sequences=None) -> Module:
    """An ONNX model (path, bytes or ModelProto) as a braze Module.

    Graph inputs' ``dim_param`` names become symbols (sanitized), ranged by
    ``dim_ranges={'batch': (1, 64)}`` (default ``[1, inf)``); unnamed dynamic
    dims get fresh symbols named ``<input>_dim<axis>``. A graph input that is a
    sequence or an optional needs its structure in ``sequences``
    (structure.structured_input); a sequence output gives one output per element.
    """
    return import_structured(model, dim_ranges, sequences)[0]


def import_structured(model, dim_ranges=None, sequences=None) -> tuple[Module, list]:
    """``import_onnx``'s module, and each graph output's structure (structure.group rebuilds a
    sequence or optional output from the module's flat outputs)."""
    from ...errors import require

    require("onnx", "onnx")
    proto, path = load_model(model)
    imp = Importer(proto, path, dim_ranges, sequences)
    return imp.run(), imp.output_structure
