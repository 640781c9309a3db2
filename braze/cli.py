"""braze: a deep-learning compiler for models whose shapes change at run time.

commands:
  braze demo [--model bert]        compile a bundled model once (dynamic dims) and run it at
                                   several shapes against PyTorch eager
  braze compile MODEL -o DIR       compile a model file into a relocatable artifact directory
                                   that C loads without Python (docs/deployment.md)
  braze run DIR --input NAME=F.npy run an artifact on .npy inputs [-o out.npz]
  braze bench DIR --shape N=V,...  time an artifact at given shapes (latency percentiles)
  braze inspect MODEL|DIR          print a model file's IR (.onnx, .pt2, .braze), or an
                                   artifact's signature, symbols and fusion summary
  braze ops [ir|onnx|aten]         list what braze supports: graph IR ops, and the ONNX and
                                   ATen ops its two frontends import
  braze resume DUMP/NN_STAGE.braze continue a compile from one stage of a BRAZE_DUMP directory
                                   (a repro: the same C as the compile that dumped it)
  braze tune MODEL --dim N=LO:HI   measure each product's kernels per bucket of its rows on this
                                   machine into the tuning database (docs/tuning.md)
  braze tune --artifact DIR        re-tune a saved artifact on this CPU, from the records it ships

`braze COMMAND --help` explains each command. Errors are one line on stderr:
exit status 2 for a usage error (a bad option, a missing file), 1 for a
model braze cannot handle. BRAZE_DEBUG=1 adds the traceback of an internal
error (README.md lists every BRAZE_* variable).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from .cmdline import Parser, UsageError, check_model_arg, model_naming, run_command, show_tune_progress


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


def _parse_dims(spec: str) -> tuple[str, tuple]:
    m = re.fullmatch(r"\s*([^=\s]+)\s*=\s*(.+)", spec)
    axes = [a.strip() for a in m.group(2).split(",")] if m else []
    if not m or not all(a == "_" or a.isdigit() or a.isidentifier() for a in axes):
        raise argparse.ArgumentTypeError(f"bad --dims {spec!r}; expected INPUT=AXIS,AXIS,... with a name for each "
                                         "dynamic axis and _ (or the size) for a static one, e.g. tokens=batch,seq")
    return m.group(1), tuple(None if a == "_" else int(a) if a.isdigit() else a for a in axes)


def _add_dim(p) -> None:
    p.add_argument("--dim", action="append", type=_parse_dim, metavar="NAME=LO:HI",
                   help="range of a symbolic dim (an ONNX model's dim_param, a TF model's --dims name), e.g. "
                        "batch=1:64; repeatable")
    p.add_argument("--dims", action="append", type=_parse_dims, metavar="INPUT=AXIS,...",
                   help="a TensorFlow model's dim names, one per axis of an input: a name for a dynamic axis, _ "
                        "for a static one, e.g. tokens=batch,seq; repeatable")


def cmd_inspect(args) -> int:
    from .deploy.commands import cmd_inspect_artifact, is_artifact
    from .frontend.files import load_model_file
    if is_artifact(args.model):
        return cmd_inspect_artifact(Path(args.model))
    check_model_arg(args.model)
    mod = load_model_file(args.model, **model_naming(args))
    print(mod.to_text(inline_limit=args.inline), end="")
    return 0


def cmd_ops(args) -> int:
    from .optables import SECTIONS, render_text
    sys.stdout.write(render_text(SECTIONS if args.section == "all" else (args.section,)))
    return 0


def cmd_resume(args) -> int:
    import hashlib
    import os

    from .compiler import cpu_target
    from .dump import read_target, stage_of
    from .options import Options
    from .pipeline import resume_c, resumed_target, stage_names
    if not os.path.isfile(args.stage):
        raise UsageError(f"no such file: {args.stage!r}")
    index, _, _ = stage_of(args.stage)
    expected = None
    if args.check:  # read before resuming: the check must not see what this run writes
        with open(args.check) as fh:
            expected = fh.read()
    isa = cpu_target(Options.from_env())
    native, _ = resume_c(args.stage, isa)
    if args.output:
        with open(args.output, "w") as fh:
            fh.write(native.source)
    digest = hashlib.sha256(native.source.encode()).hexdigest()[:16]
    ran = stage_names(resumed_target(read_target(os.path.dirname(args.stage) or "."), isa))[index:]
    print(f"resumed after stage {index:02d}; ran {', '.join(ran)}")
    print(f"C source: {len(native.source)} bytes, sha256 {digest}..." +
          (f", written to {args.output}" if args.output else ""))
    if args.check:
        same = expected == native.source
        print("identical to " + args.check if same else "DIFFERS from " + args.check)
        return 0 if same else 1
    return 0


def _parse_budget(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"bad --budget {text!r}; expected seconds or a duration such as 90s, 10m, 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def cmd_tune(args) -> int:
    import time

    import braze
    from .deploy.commands import precision_options
    from .frontend.files import load_model_file
    from .options import Options
    from .tune.buckets import summary
    if args.artifact is not None:
        if args.model is not None or args.dim or args.dims:
            raise UsageError("--artifact re-tunes a saved model: give no MODEL and no --dim (its dims are fixed)")
        if args.precision is not None or args.precision_keep is not None:
            raise UsageError("--artifact re-tunes a saved model in the precision it was compiled with: give no "
                             "--precision or --precision-keep")
        from .deploy.commands import cmd_tune_artifact
        return cmd_tune_artifact(args)
    if args.output is not None:
        raise UsageError("-o names where a re-tuned artifact goes: use it with --artifact")
    if args.model is None:
        raise UsageError("give a MODEL file to tune, or --artifact DIR")
    check_model_arg(args.model)
    show_tune_progress()
    module = load_model_file(args.model, **model_naming(args))
    opts = precision_options(args, Options.from_env().replace(tune=args.mode, tune_budget_s=args.budget))
    if args.shapes:
        opts = opts.replace(tune_shapes=args.shapes)
    t0 = time.perf_counter()
    cm = braze.compile(module, threads=args.threads, precision=args.precision, options=opts)
    tables = cm.dispatch_tables()
    db = cm.module.tuning.get("db")
    print(f"tuned {args.model} in {time.perf_counter() - t0:.1f} s: {cm.tune_measurements} measurement(s), "
          f"database {db}")
    if not tables:
        print("no GEMM on a constant weight: nothing to tune")
    for line in summary(tables):
        print(f"  {line}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    from .optables import SECTIONS
    ap = Parser(prog="braze", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", action="version", version=f"braze {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    sub.add_parser("demo", add_help=False, help="compile a bundled model once and run it at several shapes "
                   "against PyTorch eager (braze demo --help)")
    from .deploy.commands import add_parsers, add_precision
    add_parsers(sub, _add_dim)
    p = sub.add_parser(
        "inspect", help="print a model file's IR, or an artifact's signature",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Import a model file and print braze's graph IR: its symbolic dims with their ranges, "
                    "its constants and its nodes with source locations. Given an artifact directory, print "
                    "its inputs and outputs, symbols and constraints, ISA, versions and fusion summary.\n\n"
                    "  braze inspect model.onnx --dim batch=1:64 --dim seq=1:512\n"
                    "  braze inspect model.pt2        (written by torch.export.save)\n"
                    "  braze inspect model.braze      (IR text, e.g. from BRAZE_DUMP)\n"
                    "  braze inspect saved_model/ --dims x=batch,_   (a TensorFlow SavedModel)\n"
                    "  braze inspect model/           (an artifact: braze compile -o model)")
    p.add_argument("model", help="an .onnx file, a .pt2 file from torch.export.save, braze IR text (.braze), "
                   "a TensorFlow SavedModel directory, or an artifact directory")
    _add_dim(p)
    p.add_argument("--inline", type=int, default=16, metavar="N",
                   help="print constants with at most N elements inline, larger ones by content hash (default 16)")
    p = sub.add_parser(
        "ops", help="list the supported operators (graph IR, ONNX, ATen, TensorFlow)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="List what braze supports: the graph IR ops it compiles natively (with their semantics), "
                    "the ONNX op types the ONNX frontend imports, the ATen ops the torch.export frontend "
                    "converts and the TensorFlow ops the TF frontend converts.\n\n  braze ops          all of them\n"
                    "  braze ops onnx     one of them")
    p.add_argument("section", nargs="?", default="all", choices=["all", *SECTIONS],
                   help="which list to print (default: all)")
    p = sub.add_parser(
        "resume", help="continue a compile from a stage of a BRAZE_DUMP directory",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Read one stage's text from a BRAZE_DUMP directory (graph IR NN_<pass>.braze or loop IR "
                    "NN_<stage>.loop, with the constants/ folder beside it), run the stages after it and "
                    "produce the C source. It is byte for byte the C of the compile that wrote the dump, so "
                    "a dump is a repro: edit a stage's text and resume to see what changes.\n\n"
                    "  BRAZE_DUMP=out python app.py\n"
                    "  braze resume out/18_assign_memory.braze --check out/model.c\n"
                    "  braze resume out/21_collapse.loop -o model.c")
    p.add_argument("stage", help="a stage file of a BRAZE_DUMP directory")
    p.add_argument("-o", "--output", metavar="FILE", help="write the C source to FILE")
    p.add_argument("--check", metavar="FILE", help="compare the C source with FILE (e.g. the dump's model.c); "
                   "exit status 1 if they differ")
    p = sub.add_parser(
        "tune", help="measure a model's kernels on this machine into the tuning database",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Compile a model file with tune=fast (or full): each GEMM or 1x1 convolution on a constant "
                    "weight has its kernels (oneDNN's convolution, braze's small-M kernel, oneDNN's matmul per M "
                    "or with a run-time M) timed per power-of-two bucket of its rows M, inside the ranges the dims "
                    "allow, in a child process. "
                    "Buckets the database already holds are not measured again. Later compiles on this machine "
                    "(tune=cached, the default) use the winners, with no measuring; prints each product's "
                    "dispatch table (docs/tuning.md).\n\n"
                    "  braze tune model.onnx --dim batch=1:64 --dim seq=1:512 --budget 10m\n"
                    "  braze tune model.onnx --dim batch=1:64 --dim seq=1:512 --shapes traffic.json\n"
                    "  BRAZE_TUNE_DB=my.jsonl braze tune model.pt2 --mode full\n"
                    "  braze tune --artifact model_dir -o model_dir_here   # on the CPU the artifact will run on")
    p.add_argument("model", nargs="?", help="an .onnx file, a .pt2 file from torch.export.save, braze IR text "
                   "(.braze) or a TensorFlow SavedModel directory")
    _add_dim(p)
    p.add_argument("--artifact", metavar="DIR", help="re-tune a saved artifact on this CPU instead of a model file: "
                   "its products are measured here, starting from the measurements it ships (tune.jsonl), and "
                   "it is compiled again for this CPU and saved (in place, or to -o)")
    p.add_argument("-o", "--output", metavar="DIR", help="with --artifact: save the re-tuned artifact here "
                   "(default: replace DIR)")
    p.add_argument("--budget", type=_parse_budget, default=600.0, metavar="TIME",
                   help="stop measuring after this long, keeping what was found: seconds, or 90s, 10m, 1h "
                        "(default 10m)")
    p.add_argument("--shapes", metavar="HIST.json", help="a shape histogram: a JSON list of the shapes the model "
                   "is called at, each {\"batch\": 4, \"seq\": 128} or {\"dims\": {...}, \"count\": N}; only the "
                   "buckets these shapes reach are measured, the most called products first (docs/tuning.md)")
    p.add_argument("--mode", choices=["fast", "full"], default="fast",
                   help="fast: two kernels per GEMM up to M = 1024; full: all three, more rounds, up to 4096 "
                        "(default fast)")
    p.add_argument("--threads", type=int, default=None, help="the thread count the model will run with "
                   "(default: this process's CPUs; with --artifact, the artifact's setting); measurements are kept "
                   "per thread count")
    add_precision(p, "its products are measured in the dtypes they run in, so tune with the precision the model "
                     "will be compiled with")
    return ap


def _run(argv) -> int:
    if argv and argv[0] == "demo":
        from .demo import main as demo_main
        return demo_main(argv[1:])
    args = build_parser().parse_args(argv)
    from .deploy import commands as dc
    return {"inspect": cmd_inspect, "ops": cmd_ops, "resume": cmd_resume, "compile": dc.cmd_compile,
            "run": dc.cmd_run, "bench": dc.cmd_bench, "tune": cmd_tune}[args.cmd](args)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    cmd = next((a for a in argv if not a.startswith("-")), None)
    prog = f"braze {cmd}" if cmd in ("demo", "inspect", "ops", "resume", "compile", "run", "bench", "tune") else "braze"
    return run_command(prog, lambda: _run(argv))


if __name__ == "__main__":
    sys.exit(main())
