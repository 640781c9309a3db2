"""Imports every op module, which registers its ops. Order does not matter."""

from . import core, elementwise, bitwise, reduce, nn, linalg, conv, shape, index, creation  # noqa: F401
from . import attention, resize, sample, select, sort  # noqa: F401
