"""What the TF frontend reads, as one frozen function: a Keras model, a ``tf.function``, a
ConcreteFunction or a SavedModel directory becomes a ConcreteFunction whose variables are
constants and whose function calls are inlined (TF's own ``convert_variables_to_constants_v2``,
which SavedModel signatures need: their body is a call), with its inputs' names and specs and
its outputs' names.

A Keras model and a ``tf.function`` are traced here, so an axis named in ``dims`` is traced as
dynamic even where the model's own input spec fixes it. A ConcreteFunction or a SavedModel
signature is traced already: its static axes stay static.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ...errors import BrazeError, ModelFileError, ModelFormatError


@dataclass
class Frozen:
    graph_def: object  # the GraphDef: Placeholders for the inputs, Consts for the weights
    inputs: list[tuple[str, str, object]]  # (name, its Placeholder's tensor name, its TensorSpec)
    outputs: list[tuple[str, str]]  # (name, tensor name)
    where: str  # what the model is, for messages


def is_saved_model(path) -> bool:
    p = Path(path)
    return p.is_dir() and (p / "saved_model.pb").is_file()


def _tf():
    from ...errors import require
    require("tensorflow", "tf")
    import tensorflow as tf
    return tf


def freeze(model, dims: dict | None, signature: str | None) -> Frozen:
    tf = _tf()
    where = f"the {type(model).__name__}"
    loaded = None  # a loaded SavedModel owns the variables its signature reads: kept until frozen
    if isinstance(model, (str, os.PathLike)):
        loaded, cf, where = _saved_model(tf, Path(model), signature)
    elif signature is not None:
        raise BrazeError("signature= chooses a SavedModel's signature; the model is not a SavedModel directory",
                         hint="pass the SavedModel's directory, or leave signature out")
    elif hasattr(model, "get_concrete_function"):  # a tf.function
        cf = _traced(tf, model, dims, where)
    elif _is_keras(model):
        cf = _keras(tf, model, dims, where)
    elif hasattr(model, "structured_input_signature"):  # a ConcreteFunction
        cf = model
    else:
        raise BrazeError(f"braze cannot read a {type(model).__name__} as a TensorFlow model",
                         hint="pass a keras.Model, a tf.function with an input_signature, a ConcreteFunction or a "
                              "SavedModel directory")
    try:
        graph_def, placeholders, outputs = _frozen_graph(cf)
    except Exception as e:  # noqa: BLE001 (TF raises many kinds here)
        raise ModelFormatError(f"TensorFlow could not freeze {where}: {type(e).__name__}: {str(e).splitlines()[0]}",
                               hint="braze reads functions whose variables TF can turn into constants") from None
    del loaded
    specs = _flat_specs(cf)
    if len(placeholders) != len(specs):
        raise ModelFormatError(f"{where} has {len(placeholders)} graph inputs but its signature has {len(specs)}",
                               hint="this is likely a braze bug; please report it")
    inputs = [(name or ph.split(":")[0], ph, spec) for (name, spec), ph in zip(specs, placeholders)]
    return Frozen(graph_def, inputs, list(zip(_output_names(cf), outputs)), where)


def _frozen_graph(cf):
    """(GraphDef with the variables as constants and the calls inlined, its input and output
    tensor names). TF's ``convert_variables_to_constants_v2_as_graph`` also builds a new function
    from that GraphDef, which braze does not need: 9 of its 10.7 s on a BERT-base-size Keras
    encoder. So its two steps before that run here, with the public function as the fallback
    should TF rename them. Control flow stays as While / If ops (not lowered), so a model that has
    it is refused naming the op and its layer."""
    from tensorflow.python.framework import convert_to_constants as c2c
    try:
        data = c2c._FunctionConverterDataInEager(func=cf, lower_control_flow=False, aggressive_inlining=False)
        steps = c2c._replace_variables_by_constants
    except AttributeError:
        frozen, graph_def = c2c.convert_variables_to_constants_v2_as_graph(cf, lower_control_flow=False)
        return graph_def, [t.name for t in frozen.inputs], [t.name for t in frozen.outputs]
    graph_def, converted = steps(converter_data=data)
    captures = cf.graph.internal_captures
    gone = {id(captures[i]) for i in converted}
    return graph_def, [t.name for t in cf.inputs if id(t) not in gone], [t.name for t in cf.outputs]


def _saved_model(tf, path: Path, signature: str | None):
    if not is_saved_model(path):
        raise ModelFileError(f"{path} is not a SavedModel directory (it has no saved_model.pb)",
                             hint="save one with tf.saved_model.save(model, path) or model.export(path)")
    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as e:  # noqa: BLE001
        raise ModelFileError(f"TensorFlow could not load the SavedModel {path}: {type(e).__name__}: "
                             f"{str(e).splitlines()[0] if str(e) else ''}") from None
    sigs = dict(getattr(loaded, "signatures", {}) or {})
    name = signature or "serving_default"
    if name not in sigs:
        raise BrazeError(f"the SavedModel {path} has no signature {name!r}",
                         hint=f"its signatures: {', '.join(sorted(sigs)) or 'none'}; choose one with signature=")
    return loaded, sigs[name], f"the SavedModel {path} (signature {name!r})"


def _is_keras(model) -> bool:
    return any(c.__module__.split(".")[0] in ("keras", "tf_keras") for c in type(model).__mro__)


def _spec_with_dims(tf, spec, name: str, dims: dict | None):
    """``spec`` with each axis that ``dims`` names made dynamic (None), for tracing."""
    axes = (dims or {}).get(name)
    if axes is None or spec.shape.rank is None:
        return spec
    shape = [None if isinstance(a, str) else d for a, d in zip(axes, spec.shape.as_list())] \
        if len(axes) == spec.shape.rank else spec.shape.as_list()
    return tf.TensorSpec(shape, spec.dtype, name=name)


def _keras(tf, model, dims, where):
    ins = getattr(model, "inputs", None)
    if not ins:
        raise BrazeError(f"{where} has no input spec (a subclassed model that was never built on an Input)",
                         hint="wrap it: tf.function(lambda x: model(x), input_signature=[tf.TensorSpec(...)])")
    specs = [_spec_with_dims(tf, tf.TensorSpec(x.shape, x.dtype, name=_keras_name(x, i)), _keras_name(x, i), dims)
             for i, x in enumerate(ins)]
    single = len(specs) == 1

    def call(*xs):
        return model(xs[0] if single else list(xs), training=False)
    return tf.function(call).get_concrete_function(*specs)


def _keras_name(x, i: int) -> str:
    name = getattr(x, "name", None) or f"input_{i}"
    return name.split(":")[0]


def _traced(tf, fn, dims, where):
    sig = getattr(fn, "input_signature", None)
    if sig is None:
        raise BrazeError(f"{where} is a tf.function without an input_signature, so braze cannot know its inputs",
                         hint="decorate it with @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, "
                              "name='x')]), or pass fn.get_concrete_function(...)")
    flat = tf.nest.flatten(sig)
    specs = [_spec_with_dims(tf, s, s.name or f"input_{i}", dims) for i, s in enumerate(flat)]
    if all(a is b for a, b in zip(specs, flat)):  # dims makes no axis dynamic: its own trace
        return fn.get_concrete_function()
    try:
        return tf.function(fn.python_function).get_concrete_function(*tf.nest.pack_sequence_as(sig, specs))
    except Exception:  # noqa: BLE001 (a closure over another tf.function: trace it as it is)
        return fn.get_concrete_function()


def _flat_specs(cf) -> list[tuple[str | None, object]]:
    """The function's inputs in the order of its graph's inputs: positional, then keyword by name.
    Python values in the signature (``def f(x, training=False)``: TF traced them as constants)
    are no graph inputs."""
    import tensorflow as tf

    def specs(v):
        return [s for s in tf.nest.flatten(v) if isinstance(s, tf.TypeSpec)]
    args, kwargs = cf.structured_input_signature
    out = [(s.name, s) for s in specs(args)]
    for k in sorted(kwargs):
        out += [(k if len(specs(kwargs[k])) == 1 else s.name, s) for s in specs(kwargs[k])]
    return out


def _output_names(cf) -> list[str]:
    import tensorflow as tf
    so = cf.structured_outputs
    if isinstance(so, dict):
        return [str(k) for k in sorted(so)]
    n = len(tf.nest.flatten(so))
    return ["output"] if n == 1 else [f"output_{i}" for i in range(n)]


__all__ = ["Frozen", "freeze", "is_saved_model"]
