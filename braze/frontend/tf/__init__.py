"""The TensorFlow frontend: ``import_tf(model, dims=None, dim_ranges=None, signature=None) -> Module``.

It reads a Keras model, a ``tf.function`` with an input signature, a ConcreteFunction or a
SavedModel directory straight from the frozen function's GraphDef (importer.py), converting each
TF op through ``ops.TF_OPS``, most of them by braze's ONNX converters. ``supported_ops()`` lists
the TF ops it converts. TensorFlow is imported only when a TF model is read.
"""

from .importer import import_tf


def supported_ops() -> list[str]:
    """TF op names braze converts, sorted."""
    from .ops import supported_ops as _s
    return _s()


__all__ = ["import_tf", "supported_ops"]
