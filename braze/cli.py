"""The ``braze`` command line.

    braze demo [--model bert]         the bundled example (dynamic dims, several shapes, vs PyTorch)
    braze inspect model.onnx          import a model and print its IR
    braze ops                         list the supported operators
"""

from __future__ import annotations

import argparse
import sys


def _parse_dim(spec: str) -> tuple[str, tuple[int, int | None]]:
    try:
        name, rng = spec.split("=", 1)
        lo, _, hi = rng.partition(":")
        return name, (int(lo), int(hi) if hi else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad --dim {spec!r}; expected NAME=LO:HI, e.g. batch=1:64") from None


def cmd_inspect(args) -> int:
    import braze

    path = args.model
    if path.endswith(".onnx"):
        mod = braze.import_onnx(path, dim_ranges=dict(args.dim or []))
    elif path.endswith((".pt2", ".pt")):
        from .errors import require
        torch = require("torch", "torch")
        mod = braze.import_torch(torch.export.load(path))
    elif path.endswith((".braze", ".txt", ".ir")):
        with open(path) as fh:
            mod = braze.ir.parse(fh.read())
    else:
        print(f"braze inspect: don't know how to read {path!r}; expected .onnx, .pt2 (torch.export.save) "
              "or .braze (IR text)", file=sys.stderr)
        return 2
    print(mod.to_text(inline_limit=args.inline))
    return 0


def cmd_ops(args) -> int:
    from .ops import all_ops

    for name, op in all_ops().items():
        print(f"{name:32s} {op.kind:14s} {op.doc}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="braze", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("demo", help="run the bundled example", add_help=False)
    p = sub.add_parser("inspect", help="import a model and print its IR")
    p.add_argument("model", help="an .onnx file, a torch.export .pt2 file, or braze IR text")
    p.add_argument("--dim", action="append", type=_parse_dim, metavar="NAME=LO:HI",
                   help="range of a symbolic dim (ONNX dim_param), repeatable")
    p.add_argument("--inline", type=int, default=16, help="print constants with at most this many elements inline")
    sub.add_parser("ops", help="list the supported operators")
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "demo":
        from .demo import main as demo_main
        return demo_main(argv[1:])
    args = ap.parse_args(argv)
    from .errors import BrazeError
    try:
        return {"inspect": cmd_inspect, "ops": cmd_ops}[args.cmd](args)
    except BrazeError as e:
        print(f"braze {args.cmd}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
