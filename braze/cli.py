"""braze: a deep-learning compiler for models whose shapes change at run time.

commands:
  braze demo [--model bert]        compile a bundled model once (dynamic dims) and run it at
                                   several shapes against PyTorch eager
  braze inspect MODEL [--dim ...]  import a model file (.onnx, .pt2, .braze) and print its IR
  braze ops [ir|onnx|aten]         list what braze supports: graph IR ops, and the ONNX and
                                   ATen ops its two frontends import

`braze COMMAND --help` explains each command. Errors are one line on stderr:
exit status 2 for a usage error (a bad option, a missing file), 1 for a
model braze cannot handle. BRAZE_DEBUG=1 adds the traceback of an internal
error (README.md lists every BRAZE_* variable).
"""

from __future__ import annotations

import argparse
import os
import re
import sys

USAGE_ERROR = 2


class UsageError(Exception):
    """A bad command line: one line on stderr, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (argparse prints the usage block first)."""

    def error(self, message):
        raise UsageError(f"{message} (see '{self.prog} --help')")


def _parse_dim(spec: str) -> tuple[str, tuple[int, int | None]]:
    m = re.fullmatch(r"\s*([^=\s][^=]*?)\s*=\s*(\d+)\s*(?::\s*(\d+|inf)?\s*)?", spec)
    if not m:
        raise argparse.ArgumentTypeError(f"bad --dim {spec!r}; expected NAME=LO:HI with integers, e.g. batch=1:64 "
                                         "(HI may be left out or 'inf' for no upper bound)")
    name, lo = m.group(1), int(m.group(2))
    hi = None if m.group(3) in (None, "inf") else int(m.group(3))
    if hi is not None and hi < lo:
        raise argparse.ArgumentTypeError(f"bad --dim {spec!r}: the range is empty ({lo} > {hi}); "
                                         f"did you mean {name}={hi}:{lo}?")
    return name, (lo, hi)


def cmd_inspect(args) -> int:
    from .frontend.files import ModelFileError, check_model_path, load_model_file
    try:
        check_model_path(args.model)
    except ModelFileError as e:
        raise UsageError(_one_line(e)) from None
    dims = dict(args.dim or [])
    mod = load_model_file(args.model, dim_ranges=dims or None)
    print(mod.to_text(inline_limit=args.inline), end="")
    return 0


def cmd_ops(args) -> int:
    from .optables import SECTIONS, render_text
    sys.stdout.write(render_text(SECTIONS if args.section == "all" else (args.section,)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    ap = _Parser(prog="braze", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"braze {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    sub.add_parser("demo", add_help=False, help="compile a bundled model once and run it at several shapes "
                   "against PyTorch eager (braze demo --help)")
    p = sub.add_parser(
        "inspect", help="import a model file and print its IR", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Import a model file and print braze's graph IR: its symbolic dims with their ranges, "
                    "its constants and its nodes with source locations.\n\n"
                    "  braze inspect model.onnx --dim batch=1:64 --dim seq=1:512\n"
                    "  braze inspect model.pt2        (written by torch.export.save)\n"
                    "  braze inspect model.braze      (IR text, e.g. from BRAZE_DUMP)")
    p.add_argument("model", help="an .onnx file, a .pt2 file from torch.export.save, or braze IR text (.braze)")
    p.add_argument("--dim", action="append", type=_parse_dim, metavar="NAME=LO:HI",
                   help="range of an ONNX model's symbolic dim (its dim_param), e.g. batch=1:64; repeatable")
    p.add_argument("--inline", type=int, default=16, metavar="N",
                   help="print constants with at most N elements inline, larger ones by content hash (default 16)")
    p = sub.add_parser(
        "ops", help="list the supported operators (graph IR, ONNX, ATen)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="List what braze supports: the graph IR ops it compiles natively (with their semantics), "
                    "the ONNX op types the ONNX frontend imports, and the ATen ops the torch.export frontend "
                    "converts.\n\n  braze ops          all three\n  braze ops onnx     one of them")
    p.add_argument("section", nargs="?", default="all", choices=["all", "ir", "onnx", "aten"],
                   help="which list to print (default: all)")
    return ap


def _one_line(e: BaseException) -> str:
    """A BrazeError's what / where / hint (or any exception) as one line."""
    what = getattr(e, "what", None) or str(e) or type(e).__name__
    parts = [what] + [f"{k}: {v}" for k, v in (("where", getattr(e, "where", None)),
                                                 ("hint", getattr(e, "hint", None))) if v]
    return "; ".join(" ".join(p.split()) for p in parts)


def _run(argv) -> int:
    if argv and argv[0] == "demo":
        from .demo import main as demo_main
        return demo_main(argv[1:])
    args = build_parser().parse_args(argv)
    return {"inspect": cmd_inspect, "ops": cmd_ops}[args.cmd](args)


def main(argv=None) -> int:
    from .errors import BrazeError
    argv = sys.argv[1:] if argv is None else list(argv)
    cmd = next((a for a in argv if not a.startswith("-")), None)
    prog = f"braze {cmd}" if cmd in ("demo", "inspect", "ops") else "braze"
    try:
        rc = _run(argv)
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
        print(f"{prog}: error: {_one_line(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug in braze: one line, the traceback with BRAZE_DEBUG
        if os.environ.get("BRAZE_DEBUG", "").strip() not in ("", "0"):
            raise
        print(f"{prog}: internal error: {type(e).__name__}: {_one_line(e)} (a braze bug: please report it; "
              "BRAZE_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
