"""Imports every op module, which registers its ops. Order does not matter."""

from . import core, elementwise, bitwise, reduce, nn, linalg, conv, shape, index, creation, attention, resize, sort  # noqa: F401
