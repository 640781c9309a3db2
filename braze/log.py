"""braze's messages: stdlib ``logging`` on named channels under the ``braze`` logger.

Channels: ``braze.compile`` (a compile starts, where its time went),
``braze.cache`` (hit or miss, where the library is, a fallback cache; ``braze.cache.helper``
for the oneDNN helper library that models link),
``braze.frontend`` (importing a model), ``braze.tune`` (what a tuning compile measures, what
won), ``braze.schedule`` (kernel-stage decisions at DEBUG:
the row buffers ``keep`` makes), ``braze.pipeline`` (passes, the
fusion report at DEBUG), ``braze.dump`` (where ``BRAZE_DUMP`` wrote).

braze prints nothing by default: its records go wherever the application's
logging sends them (``logging.basicConfig(level=logging.INFO)`` shows the
progress lines). ``BRAZE_DEBUG=1`` adds one handler to the ``braze`` logger
that writes INFO and above to stderr, ``BRAZE_DEBUG>=2`` DEBUG and above
(the fusion report); the handler is added once per process, and never to the
root logger. Problems the user must act on (a fallback cache) are warnings
(``warnings.warn``), shown once.
"""

from __future__ import annotations

import logging
import sys

ROOT = "braze"


def get(channel: str) -> logging.Logger:
    """The logger of one channel, e.g. ``get("cache")`` is ``braze.cache``."""
    return logging.getLogger(f"{ROOT}.{channel}")


class _StderrHandler(logging.StreamHandler):
    """Writes to the current ``sys.stderr`` (looked up at each record, so a
    stream swapped later, as pytest's capsys does, still gets the output)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def enable_debug_output(debug: int) -> None:
    """For ``BRAZE_DEBUG >= 1``: make sure braze's INFO (``>= 2``: DEBUG) records reach stderr."""
    if debug < 1:
        return
    level = logging.DEBUG if debug >= 2 else logging.INFO
    logger = logging.getLogger(ROOT)
    if logger.getEffectiveLevel() > level:
        logger.setLevel(level)
    handler = next((h for h in logger.handlers if isinstance(h, _StderrHandler)), None)
    if handler is None:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)
    if handler.level == logging.NOTSET or handler.level > level:
        handler.setLevel(level)


__all__ = ["get", "enable_debug_output"]
