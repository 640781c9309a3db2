"""The ONNX frontend: ``import_onnx(model, dim_ranges=None) -> Module``.

Opsets 13..21 of the default domain are the target (newer opsets load where
an op's semantics are unchanged). ``supported_ops()`` lists the ONNX op types
braze converts; ``braze.frontend.onnx.backend`` runs ONNX's backend node tests.
"""

from .importer import import_onnx


def supported_ops() -> list[str]:
    """ONNX op types that braze imports, sorted (another domain's as ``domain::Op``)."""
    from .table import supported_ops as _s
    return _s()


__all__ = ["import_onnx", "supported_ops"]
