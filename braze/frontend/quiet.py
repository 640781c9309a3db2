"""Silence the third-party noise that braze's own calls into torch.export and ONNX trigger.

``quiet_exporters()`` wraps a call braze makes (torch.export.export or load,
torch.onnx.export). Inside it, DeprecationWarning and FutureWarning raised by
torch, onnx and onnxscript code are ignored, and torch.onnx's "torchvision is
not installed" log records and its notice that two axes share a name are
dropped. Warnings raised by the user's own
code (their module's forward) still show, and nothing changes outside the
call. ``warnings.catch_warnings`` swaps the process's filter list, so braze's
quiet calls hold one lock: two threads compiling at once cannot leave each
other's filters behind.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings

# modules whose deprecation notices are theirs to fix, not the user's
_NOISY_MODULES = r"(torch|onnx|onnxscript|onnx_ir|copyreg)(\.|$)"
# torch.onnx's notice that two dynamic axes with one name share a symbol (they are meant to)
_AXIS_NAME_NOTICE = r"# The axis name: .* will not be used, since it shares the same shape constraints"
# torch.onnx logs one warning per torchvision op it cannot register
_ONNX_REGISTRATION_LOGGER = "torch.onnx._internal.exporter._registration"

_LOCK = threading.RLock()


class _DropAll(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


@contextlib.contextmanager
def dropped_logs(*names: str):
    """Drop the records of these loggers (not their children) for the duration: for a call whose
    failure braze reports itself, in one line."""
    flt = _DropAll()
    loggers = [logging.getLogger(n) for n in names]
    for lg in loggers:
        lg.addFilter(flt)
    try:
        yield
    finally:
        for lg in loggers:
            lg.removeFilter(flt)


class _DropTorchvisionNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("torchvision is not installed")


@contextlib.contextmanager
def quiet_exporters():
    """Run a braze call into torch.export / torch.onnx without their deprecation noise."""
    flt = _DropTorchvisionNotice()
    reg = logging.getLogger(_ONNX_REGISTRATION_LOGGER)
    with _LOCK, warnings.catch_warnings():
        for cat in (DeprecationWarning, FutureWarning):
            warnings.filterwarnings("ignore", category=cat, module=_NOISY_MODULES)
        warnings.filterwarnings("ignore", message=_AXIS_NAME_NOTICE, category=UserWarning)
        reg.addFilter(flt)
        try:
            yield
        finally:
            reg.removeFilter(flt)
