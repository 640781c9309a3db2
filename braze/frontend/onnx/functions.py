"""Ops braze has no converter for, but which ONNX defines as a function of other ops (SwiGLU,
RMSNormalization, Attention, SoftmaxCrossEntropyLoss, ...), expanded into that function's body
before import, recursively: the body's ops may be functions too.

ONNX's schemas hold the bodies: a fixed one, or one built for the node's attributes and input
types (a context-dependent function, which needs the graph's types: onnx's shape inference gives
them). Each expanded node becomes a call of a model-local function made from its body, and
onnx's own inliner (``onnx.inliner.inline_local_functions``) puts the bodies in place, renaming
their tensors and substituting the node's attributes.
"""

from __future__ import annotations

DOMAIN = "braze.expanded"
# the function ops braze claims (supported_ops): each passes its ONNX node tests this way, but for
# the exclusions backend_exclusions.py names (the suite checks both)
EXPANDED = ("AffineGrid", "Attention", "CausalConvWithState", "CenterCropPad", "LinearAttention",
            "MeanVarianceNormalization", "NegativeLogLikelihoodLoss", "RMSNormalization", "RotaryEmbedding",
            "SoftmaxCrossEntropyLoss", "SwiGLU")
MAX_DEPTH = 8  # bodies inside bodies: ONNX's nest a few deep at most


def _body_version(versions, opset: int) -> int | None:
    fit = [v for v in versions if v <= opset]
    return max(fit) if fit else None


def _body(schema, node, opset: int, types: dict):
    """The FunctionProto of ``node``'s op at ``opset``, or None where ONNX defines none."""
    from onnx import FunctionProto, TypeProto
    v = _body_version(schema.context_dependent_function_opset_versions, opset) \
        if schema.has_context_dependent_function else None
    if v is not None:
        in_types = [(types.get(x) or TypeProto()).SerializeToString() for x in node.input]
        data = schema.get_context_dependent_function_with_opset_version(v, node.SerializeToString(), in_types)
        return FunctionProto.FromString(data) if data else None
    v = _body_version(schema.function_opset_versions, opset) if schema.has_function else None
    if v is None:
        return None
    data = schema.get_function_with_opset_version(v)
    return FunctionProto.FromString(data) if data else None


def _default_attributes(node, schema) -> None:
    """The schema's default of each attribute ``node`` leaves out, written on it: a function body
    reads its attributes by reference, and the inliner drops a reference with no value (a
    MeanVarianceNormalization without ``axes`` then reduced over every axis)."""
    have = {a.name for a in node.attribute}
    for name, attr in schema.attributes.items():
        d = attr.default_value
        if name not in have and d is not None and d.type != 0:
            a = node.attribute.add()
            a.CopyFrom(d)
            a.name = name


def _at_opset(body, opset: int) -> bool:
    """Whether the body, written at its own opset, means the same at the model's ``opset`` (no op of
    it changed in between); if so its opset becomes the model's, as the inliner needs. Else the
    node stays as it is, and the import names it as unsupported."""
    own = next((o.version for o in body.opset_import if o.domain in ("", "ai.onnx")), opset)
    if own != opset:
        for n in body.node:
            s = _schema(n.op_type, opset) if n.domain in ("", "ai.onnx") else None
            if n.domain in ("", "ai.onnx") and (s is None or s.since_version > own):
                return False
        for o in body.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = opset
    return True


def _schema(op_type: str, opset: int):
    import onnx
    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except Exception:  # noqa: BLE001 (onnx raises SchemaError for an unknown op)
        return None


def _types(model) -> dict:
    """Every tensor's TypeProto that onnx's shape inference finds (inputs, initializers, values)."""
    import onnx
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 (a model shape inference rejects: bodies get no types)
        inferred = model
    g = inferred.graph
    out = {vi.name: vi.type for vi in (*g.input, *g.value_info, *g.output)}
    for init in g.initializer:
        if init.name not in out:
            t = onnx.TypeProto()
            t.tensor_type.elem_type = init.data_type
            for d in init.dims:
                t.tensor_type.shape.dim.add().dim_value = d
            out[init.name] = t
    return out


def expand_functions(model, known, opset: int):
    """``model`` with each node of an op not in ``known`` that ONNX defines as a function replaced
    by the function's body (recursively); the model itself when there is none."""
    import onnx
    from onnx import helper, inliner

    for _ in range(MAX_DEPTH):
        todo = [(i, n) for i, n in enumerate(model.graph.node) if n.domain in ("", "ai.onnx") and n.op_type not in known]
        bodies = []
        types = None
        for i, node in todo:
            schema = _schema(node.op_type, opset)
            if schema is None or not (schema.has_function or schema.has_context_dependent_function):
                continue
            if types is None and schema.has_context_dependent_function:
                types = _types(model)
            filled = onnx.NodeProto()
            filled.CopyFrom(node)
            _default_attributes(filled, schema)
            try:
                body = _body(schema, filled, opset, types or {})
            except Exception:  # noqa: BLE001 (onnx cannot build it, e.g. without input types): stays unsupported
                body = None
            if body is not None and _at_opset(body, opset):
                bodies.append((i, filled, body))
        if not bodies:
            return model
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        for k, (i, filled, body) in enumerate(bodies):
            target = copy.graph.node[i]
            del target.attribute[:]
            target.attribute.extend(filled.attribute)
            body.domain, body.name = DOMAIN, f"{filled.op_type}_{k}"
            target.domain, target.op_type = DOMAIN, body.name
            copy.functions.append(body)
        if not any(o.domain == DOMAIN for o in copy.opset_import):
            copy.opset_import.append(helper.make_opsetid(DOMAIN, 1))
        model = inliner.inline_local_functions(copy)
        del model.opset_import[:]
        model.opset_import.extend(o for o in copy.opset_import if o.domain != DOMAIN)
    return model


__all__ = ["EXPANDED", "expand_functions"]
