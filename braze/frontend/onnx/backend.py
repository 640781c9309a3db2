"""braze as an ``onnx.backend`` backend: prepare() imports, run() uses braze's reference interpreter.

braze reads some shape operands (Reshape's shape, Tile's repeats, ...) as symbols at run time when they
are graph inputs, and needs others at import time: those that decide axes or a rank (reduction axes,
Unsqueeze's axes, a Slice's axes, ...). ``import_onnx`` refuses a model that feeds one of those as a
graph input. This backend's prepare() does not: its rep imports the model once per distinct value of
those inputs, bound as initializers, when run() sees them (``SpecializingRep``), as an interpreter
would take them. ``run_node_test`` binds every shape operand as an initializer from the test data (what
an exporter does when it writes them as constants; ``prepare_bound``).

A model whose graph inputs are sequences or optionals is imported for the structure run() is given
(how many tensors each sequence holds, whether an optional holds one: ``StructuredRep``), once per
structure; a sequence output comes back as a list, an empty optional as None (structure.py).
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from ... import reference
from ...errors import InputError, UnsupportedOpError
from .importer import import_structured
from .structure import STRUCTURED, flatten, group, spec_of

log = logging.getLogger("braze.frontend")


class BrazeRep(BackendRep):
    """One imported module. With ``model`` (what prepare() gives), a value its shape operands read at
    run time that the module cannot take (a Reshape's -1, a Slice's negative end: an InputError) makes
    it import the model again with those operands bound (a ``SpecializingRep``), as an interpreter
    would take them. ``structure`` rebuilds sequence and optional outputs (structure.group)."""

    def __init__(self, module, model: onnx.ModelProto | None = None, structure: list | None = None,
                 sequences: dict | None = None):
        self.module = module
        self.model = model
        self.structure = structure
        self.sequences = sequences  # the specs it was imported for
        self._special = None

    def module_for(self, inputs: list) -> tuple:
        """The module these inputs run, the inputs as its parameters take them, and its outputs'
        structure (for a caller that compiles the module itself)."""
        return self.module, self._flat(inputs), self.structure

    def _flat(self, inputs: list) -> list:
        """The arrays of the graph's inputs, a sequence's elements one each; a list given for a tensor
        input becomes an array, or an InputError where its elements differ in shape."""
        names = [i.name for i in self.model.graph.input] if self.model is not None else []
        out = []
        for k, v in enumerate(inputs):
            name = names[k] if k < len(names) else f"#{k}"
            if name in (self.sequences or {}):
                out += flatten(v)
            elif isinstance(v, (list, tuple)):
                try:
                    out.append(np.asarray(v))
                except ValueError:
                    raise InputError(f"input '{name}' is a tensor, given a list of {len(v)} arrays of different "
                                     "shapes", hint="pass one array") from None
            else:
                out.append(v)
        return out

    def run(self, inputs, **kwargs):
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        elif isinstance(inputs, dict):
            names = [i.name for i in self.model.graph.input] if self.model is not None else \
                [p.name for p in self.module.main.params]
            inputs = [inputs[n] for n in names]
        try:
            out = reference.run(self.module, *self._flat(inputs))
        except InputError:
            if self.model is None or not self.module.value_symbols:
                raise
            if self._special is None:
                names = [i.name for i in self.model.graph.input]
                owners = _owners(names, inputs)
                params = [p.name for p in self.module.main.params]
                read = {owners[params.index(p)] for (_, p, _) in self.module.value_symbols}
                self._special = SpecializingRep(self.model, [n for n in names if n in read], self.sequences)
            return self._special.run(inputs)
        out = list(out) if isinstance(out, tuple) else [out]
        return group(self.structure, out) if self.structure else out


def _owners(names: list[str], inputs: list) -> list[str]:
    """The graph input each module parameter comes from (a sequence's elements are one each)."""
    return [n for n, v in zip(names, inputs) for _ in flatten(v)]


def _import(model: onnx.ModelProto, sequences: dict | None = None, bound: onnx.ModelProto | None = None) -> BrazeRep:
    module, structure = import_structured(bound or model, sequences=sequences)
    return BrazeRep(module, bound or model, structure, sequences)


def structured_inputs(model: onnx.ModelProto) -> list[str]:
    """The graph inputs that are sequences or optionals."""
    return [i.name for i in model.graph.input if i.type.WhichOneof("value") in STRUCTURED]


class StructuredRep(BackendRep):
    """A model with sequence or optional graph inputs: run() imports it for the structure of the values
    it is given (structure.spec_of), once per structure (at most ``MAX_KEPT`` kept)."""

    MAX_KEPT = 16

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.names = [i.name for i in model.graph.input]
        self.structured = structured_inputs(model)
        self._reps: dict = {}
        self._lock = threading.Lock()

    def rep_for(self, inputs: list) -> BrazeRep:
        specs = {n: spec_of(v) for n, v in zip(self.names, inputs) if n in self.structured}
        key = repr(sorted(specs.items()))
        with self._lock:
            rep = self._reps.get(key)
            if rep is None:
                rep = prepare(self.model, sequences=specs)
                if len(self._reps) >= self.MAX_KEPT:
                    self._reps.pop(next(iter(self._reps)))
                self._reps[key] = rep
        return rep

    def module_for(self, inputs: list) -> tuple:
        return self.rep_for(inputs).module_for(inputs)

    def run(self, inputs, **kwargs):
        inputs = [inputs[n] for n in self.names] if isinstance(inputs, dict) else list(inputs)
        return self.rep_for(inputs).run(inputs)


# a graph input of at most this many elements (by its declared shape) may be a shape operand: where the
# import needs a value computed from graph inputs, the backend binds every such input; binding is exact,
# and costs at most an import per distinct value
SMALL = 64


def _small(vi) -> bool:
    t = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if t is None or not t.HasField("shape"):
        return False
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return None not in dims and int(np.prod(dims, dtype=np.int64)) <= SMALL


def to_bind(model: onnx.ModelProto, e: UnsupportedOpError, bound) -> list[str]:
    """The graph inputs to bind as constants so that the import ``e`` failed on may pass: the input it
    names, or, where it names a tensor computed from inputs, every small input not bound yet."""
    name = getattr(e, "input_name", None)
    if name is None:
        return []
    inputs = {i.name: i for i in model.graph.input}
    if name in inputs:
        return [] if name in bound else [name]
    return [n for n, vi in inputs.items() if n not in bound and _small(vi)]


class SpecializingRep(BackendRep):
    """A model that feeds axis-deciding operands as graph inputs: run() imports it with those inputs'
    values bound as initializers, once per distinct value (at most ``MAX_VALUES`` kept), and runs the
    rest. Which inputs decide axes comes from the import's own errors (``UnsupportedOpError.input_name``,
    ``to_bind``)."""

    MAX_VALUES = 16

    def __init__(self, model: onnx.ModelProto, first: list[str], sequences: dict | None = None):
        self.model = model
        self.names = [i.name for i in model.graph.input]
        self.bind = list(first)  # the inputs bound so far, in the order the import asked for them
        self.sequences = sequences
        self._reps: dict = {}
        self._lock = threading.Lock()

    def _rep(self, feed: dict) -> tuple[BrazeRep, frozenset]:
        """The rep for these values, and the inputs it has bound."""
        with self._lock:  # one import at a time: it may grow ``bind``, which the keys are made of
            while True:
                key = tuple((n, feed[n].dtype.str, feed[n].shape, feed[n].tobytes()) for n in self.bind)
                rep = self._reps.get(key)
                if rep is not None:
                    return rep, frozenset(self.bind)
                try:
                    rep = _import(self.model, self.sequences, bind_inputs(self.model, {n: feed[n] for n in self.bind}))
                except UnsupportedOpError as e:
                    more = to_bind(self.model, e, self.bind)
                    if not more:
                        raise
                    self.bind += more
                    continue
                log.info("ONNX backend: imported the model for the values of %s (axis-deciding inputs)",
                         ", ".join(self.bind))
                if len(self._reps) >= self.MAX_VALUES:
                    self._reps.pop(next(iter(self._reps)))
                self._reps[key] = rep
                return rep, frozenset(self.bind)

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feed = {n: as_array(inputs[n]) for n in self.names}
        else:
            inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(inputs) != len(self.names):
                raise InputError(f"{len(inputs)} inputs given, the model has {len(self.names)}",
                                 hint=f"pass one array per graph input: {', '.join(self.names)}")
            feed = dict(zip(self.names, [as_array(a) for a in inputs]))
        rep, bound = self._rep(feed)
        return rep.run([feed[n] for n in self.names if n not in bound])

    def module_for(self, inputs: list) -> tuple:
        feed = dict(zip(self.names, inputs))
        rep, bound = self._rep(feed)
        return rep.module_for([feed[n] for n in self.names if n not in bound])


class BrazeBackend(Backend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", sequences: dict | None = None,
                **kwargs) -> BackendRep:
        """A rep of ``model``; ``sequences`` gives the structure of its sequence and optional inputs
        (structure.py), without which a model that has them gets a ``StructuredRep``."""
        super().prepare(model, device, **kwargs)
        if sequences is None and structured_inputs(model):
            return StructuredRep(model)
        try:
            return _import(model, sequences)
        except UnsupportedOpError as e:
            first = to_bind(model, e, ())
            if first:
                return SpecializingRep(model, first, sequences)
            raise

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
    """A NumPy array from an array or a TensorProto (ONNX test data for bfloat16 and friends); a list (a
    sequence's test data) as a list of arrays, and None (an empty optional) as None."""
    if a is None:
        return None
    if isinstance(a, (list, tuple)):
        return [as_array(x) for x in a]
    if isinstance(a, onnx.TensorProto):
        from onnx import numpy_helper
        return numpy_helper.to_array(a)
    return np.asarray(a)


def prepare_bound(model: onnx.ModelProto, feed: dict) -> tuple[BackendRep, dict]:
    """Import ``model`` with its shape operands bound as initializers from ``feed`` (what an exporter
    writes as constants): those the import needs (``to_bind``) and those it would read at run time (the
    module's value symbols); sequence and optional inputs imported for the structure ``feed`` gives.
    Returns the rep and what was bound."""
    names = [i.name for i in model.graph.input]
    specs = {n: spec_of(feed[n]) for n in structured_inputs(model)}
    bound: dict = {}
    for _ in range(len(names) + 1):
        try:
            rep = _import(model, specs, bind_inputs(model, bound) if bound else None)
        except UnsupportedOpError as e:
            more = to_bind(model, e, bound)
            if not more:
                raise
            bound.update((n, feed[n]) for n in more)
            continue
        params = [p.name for p in rep.module.main.params]  # the graph inputs left, in order
        left = [n for n in names if n not in bound]
        owners = _owners(left, [feed[n] for n in left])
        read = {owners[params.index(p)] for (_, p, _) in rep.module.value_symbols}
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
