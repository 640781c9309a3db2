"""What braze's commands share: an argument parser whose errors are one line, and the wrapper
that turns any error into one line on stderr with braze's exit statuses. ``braze.cli`` and the
commands it runs (``braze.demo``) import this module, so neither imports the other back."""

from __future__ import annotations

import argparse
import os
import sys

USAGE_ERROR = 2


class UsageError(Exception):
    """A bad command line: one line on stderr, exit status 2."""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (argparse prints the usage block first)."""

    def error(self, message):
        raise UsageError(f"{message} (see '{self.prog} --help')")


def one_line(e: BaseException) -> str:
    """A BrazeError's what / where / hint (or any exception) as one line."""
    what = getattr(e, "what", None) or str(e) or type(e).__name__
    parts = [what] + [f"{k}: {v}" for k, v in (("where", getattr(e, "where", None)),
                                                 ("hint", getattr(e, "hint", None))) if v]
    return "; ".join(" ".join(p.split()) for p in parts)


def check_model_arg(path) -> None:
    """A usage error (one line, exit 2) for a model path that is missing or not a model file."""
    from .frontend.files import ModelFileError, check_model_path
    try:
        check_model_path(path)
    except ModelFileError as e:
        raise UsageError(one_line(e)) from None


def model_naming(args) -> dict:
    """What --dim and --dims give the model's frontend (each takes the options it has: an ONNX
    model's dim_params are ranged by --dim; a TF model's axes are named by --dims)."""
    return {"dim_ranges": dict(args.dim or []) or None, "dims": dict(args.dims or []) or None}


def show_tune_progress() -> None:
    """The tuner's progress lines (logger ``braze.tune``) on stderr, unless logging is set up already."""
    import logging
    progress = logging.getLogger("braze.tune")
    if not progress.handlers and not logging.getLogger("braze").handlers:
        progress.addHandler(logging.StreamHandler(sys.stderr))
        progress.setLevel(logging.INFO)


def run_command(prog: str, body) -> int:
    """``body()``'s exit status, with every error as one line on stderr: 2 for a usage error,
    1 for a model braze cannot handle or a braze bug (its traceback under BRAZE_DEBUG=1)."""
    from .errors import BrazeError
    try:
        rc = body()
        sys.stdout.flush()
        return rc
    except BrokenPipeError:
        # the reader stopped early (`braze ops | head`): that is not an error; drop what is left
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return USAGE_ERROR
    except BrazeError as e:
        print(f"{prog}: error: {one_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug in braze: one line, the traceback with BRAZE_DEBUG
        if os.environ.get("BRAZE_DEBUG", "").strip() not in ("", "0"):
            raise
        print(f"{prog}: internal error: {type(e).__name__}: {one_line(e)} (a braze bug: please report it; "
              "BRAZE_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1
