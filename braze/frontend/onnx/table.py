"""Every ONNX converter, by op type. Importing this module imports the converter modules, which
register themselves; the importer imports it, never the other way."""

from __future__ import annotations

# each registers its converters
from . import converters, converters_composite, converters_control, converters_nn  # noqa: F401
from . import converters_quantized, converters_rnn, converters_scatter, converters_select  # noqa: F401
from . import converters_sampling, converters_sequence, converters_shape, converters_spectral  # noqa: F401
from .convert import CONVERTERS


def supported_ops() -> list[str]:
    """ONNX op types braze imports (another domain's as ``domain::Op``): those it converts, and the
    function ops it expands into their bodies (functions.EXPANDED)."""
    from .functions import EXPANDED
    return sorted(set(CONVERTERS) | set(EXPANDED))


__all__ = ["CONVERTERS", "supported_ops"]
