"""The artifact commands of the CLI: ``braze compile``, ``braze run``, ``braze bench``,
``braze inspect`` and ``braze tune --artifact`` of an artifact directory (braze/cli.py assembles
the parser)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from ..cmdline import UsageError
from ..options import PRECISIONS, Options
from .artifact import META


def _progress(msg: str) -> None:
    """A step of a long command, on stderr when it is a terminal (stdout stays for results)."""
    if sys.stderr.isatty():
        print(msg, file=sys.stderr, flush=True)


def is_artifact(path) -> bool:
    return (Path(path) / META).is_file()


def _output_dir(path) -> Path:
    """``-o``'s directory, checked before the long work: a usage error if an artifact cannot go there."""
    from ..cmdline import one_line
    from ..errors import BrazeError
    from .artifact import check_save_path
    try:
        check_save_path(Path(path))
    except BrazeError as e:
        raise UsageError(f"-o: {one_line(e)}") from None
    return Path(path)


def cmd_compile(args) -> int:
    import braze
    from ..cmdline import check_model_arg, model_naming, one_line
    from ..frontend.files import load_model_file
    from ..target import TargetError, parse_target
    try:
        parse_target(args.target)
    except TargetError as e:
        raise UsageError(f"--target: {one_line(e)}") from None
    check_model_arg(args.model)
    out = _output_dir(args.output)
    t0 = time.perf_counter()
    _progress(f"importing {args.model} ...")
    module = load_model_file(args.model, **model_naming(args))
    _progress(f"compiling ({time.perf_counter() - t0:.1f} s so far) ...")
    opts = precision_options(args, Options.from_env())
    cm = braze.compile(module, threads=args.threads, precision=args.precision, target=args.target, options=opts)
    _progress(f"saving to {out} ({time.perf_counter() - t0:.1f} s so far) ...")
    cm.save(out)
    print(f"wrote {out} in {time.perf_counter() - t0:.1f} s: ({', '.join(map(str, cm.inputs))}) -> "
          f"({', '.join(map(str, cm.outputs))})")
    return 0


def cmd_inspect_artifact(path: Path) -> int:
    meta = json.loads((path / META).read_text())
    print(f"braze artifact {path}")
    print(f"  saved {meta.get('saved')} by braze {meta.get('braze_version')}, ABI {meta.get('abi_version')}, "
          f"oneDNN {meta.get('onednn_version') or 'not used'}")
    if meta.get("target", "cpu").startswith("cuda:"):
        print(f"  target {meta['target']}: kernels compiled by NVRTC {meta['cuda']['nvrtc']} (kernels.cubin, and "
              f"kernels.ptx for newer GPUs); host code for any x86-64 CPU (docs/cuda.md)")
    else:
        print(f"  ISA {meta['isa']['name']}: {' '.join(meta['isa']['features'])}")
        threads = meta.get("threads") or "OpenMP's default number of"
        adapt = ", fewer while other processes take the cores" if meta.get("adapt_threads", False) else ""
        print(f"  threads: {threads}{adapt}, on braze's own teams, libgomp's under BRAZE_OMP=openmp "
              "(docs/threads.md)")
    if meta.get("precision"):
        prec = meta["precision"]
        keep = f", float32 kept for {', '.join(prec['keep'])}" if prec.get("keep") else ""
        print(f"  precision {prec['policy']} (GEMMs in {', '.join(prec['library'])} natively where it was "
              f"compiled{keep})")
    print("inputs:")
    for v in meta["inputs"]:
        print(f"  {v['name']}: {v['dtype']}[{', '.join(map(str, v['shape']))}]")
    print("outputs:")
    for v in meta["outputs"]:
        print(f"  {v['name']}: {v['dtype']}[{', '.join(map(str, v['shape']))}]")
    print("symbols:")
    for n, r in meta["symbols"].items():
        decided = f", decided by the model at run time (at most {r['decided_at_most']})" if "decided_at_most" in r else ""
        print(f"  {n} in [{r['min']}, {r['max'] if r['max'] is not None else 'inf'}]{decided}")
    if meta.get("constraints"):
        print("constraints:")
        for c in meta["constraints"]:
            print(f"  {c}")
    fusion = meta.get("fusion") or {}
    if fusion:
        print("fusion: " + ", ".join(f"{k} {v}" for k, v in sorted(fusion.items(), key=lambda kv: -kv[1])))
    if meta.get("dispatch"):
        from ..tune.buckets import summary
        tuning = meta.get("tuning") or {}
        how = "measured (tuning database)" if tuning.get("measured") else "default rules"
        print(f"dispatch ({how}; tune={tuning.get('mode', '?')}; braze/tune):")
        for line in summary((d["call"], d["product"], d["table"]) for d in meta["dispatch"]):
            print(f"  {line}")
        if "records" in tuning:
            print(f"  tune.jsonl: {tuning['records']} measured bucket(s) of these products, from "
                  f"{tuning.get('settings', 0)} machine setting(s); `braze tune --artifact` measures this CPU's")
    print(f"files: {', '.join(sorted(meta['files']))}, meta.json")
    return 0


def cmd_tune_artifact(args) -> int:
    from ..cmdline import show_tune_progress
    from ..tune.buckets import summary
    from .retune import retune
    path = Path(args.artifact)
    if not is_artifact(path):
        raise UsageError(f"--artifact: {path} is not a braze artifact directory (no meta.json); make one with "
                         "'braze compile MODEL -o DIR'")
    out = _output_dir(args.output or path)
    show_tune_progress()
    t0 = time.perf_counter()
    options = {"tune_shapes": args.shapes} if args.shapes else None
    cm, report = retune(path, out, mode=args.mode, budget_s=args.budget, threads=args.threads, options=options)
    was, now = report["isa"]
    changed = sum(b["table"] != a["table"] for b, a in zip(report["before"], report["after"]))
    print(f"re-tuned {path} in {time.perf_counter() - t0:.1f} s: {report['imported']} shipped record(s) added to "
          f"the database {cm.module.tuning.get('db')}, {cm.tune_measurements} measurement(s), "
          f"{changed} of {len(report['after'])} dispatch table(s) changed")
    if was != now:
        print(f"the library was built for {was}; it is now built for this CPU's {now}")
    for line in summary((d["call"], d["product"], d["table"]) for d in report["after"]):
        print(f"  {line}")
    print(f"wrote {out}")
    return 0


def _load(path):
    import braze
    if not is_artifact(path):
        raise UsageError(f"{path} is not a braze artifact directory (no meta.json); make one with "
                         "'braze compile MODEL -o DIR'")
    return braze.load(path)


def cmd_run(args) -> int:
    m = _load(args.artifact)
    given = {}
    for spec in args.input or []:
        name, sep, file = spec.partition("=")
        if not sep or not name or not file:
            raise UsageError(f"bad --input {spec!r}; expected NAME=file.npy")
        try:
            given[name] = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise UsageError(f"--input {name}: cannot read {file} as a .npy file ({e})") from None
    from ..errors import InputError
    from ..runtime.loader import bind_inputs
    try:
        inputs = bind_inputs([v.name for v in m.inputs], (), given, "the model")
    except InputError as e:
        raise UsageError(e.what) from None
    outs = m(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    for v, o in zip(m.outputs, outs):
        o = np.asarray(o)
        stats = f" min {o.min():.6g} max {o.max():.6g} mean {o.mean():.6g}" if o.size and o.dtype.kind == "f" else ""
        print(f"{v.name}: {o.dtype}{list(o.shape)}{stats}")
    if args.output:
        np.savez(args.output, **{v.name: np.asarray(o) for v, o in zip(m.outputs, outs)})
        print(f"wrote {args.output}")
    return 0


def _parse_shape(spec: str) -> dict[str, int]:
    dims = {}
    for part in spec.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit():
            raise UsageError(f"bad --shape {spec!r}; expected NAME=VALUE,... with integers, e.g. batch=1,seq=128")
        dims[name.strip()] = int(value)
    return dims


def _eval_dim(expr: str, dims: dict[str, int]) -> int:
    """A symbolic dim's size: a symbol, or an expression of symbols (e.g. 2*seq)."""
    if expr in dims:
        return dims[expr]
    from ..ir.parser import parse_expr
    return int(parse_expr(expr).evaluate(dims))


def _bench_inputs(m, dims: dict[str, int]) -> list[np.ndarray]:
    from ..ir.types import DType
    rng = np.random.default_rng(0)
    symbols = {s for v in m.inputs for s in v.ranges}
    missing = sorted(symbols - set(dims))
    if missing:
        raise UsageError(f"--shape must give {', '.join(missing)} (the model's symbolic dims: {', '.join(sorted(symbols))})")
    out = []
    for v in m.inputs:
        shape = [d if isinstance(d, int) else _eval_dim(d, dims) for d in v.shape]
        dt = np.dtype(v.dtype) if v.dtype != "bfloat16" else DType.bfloat16.numpy  # ml_dtypes' (bf16 only)
        floating = dt.kind == "f" or v.dtype == "bfloat16"
        out.append(rng.standard_normal(shape).astype(dt) if floating else np.ones(shape, dt))
    return out


def cmd_bench(args) -> int:
    m = _load(args.artifact)
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    shapes = [(dims, _bench_inputs(m, dims)) for dims in map(_parse_shape, args.shape)]
    print(f"{'shape':32s} {'first ms':>9s} {'p50 ms':>9s} {'p90 ms':>9s} {'p99 ms':>9s} {'min ms':>9s}  runs")
    for dims, inputs in shapes:
        label = ",".join(f"{k}={v}" for k, v in dims.items())
        _progress(f"{label}: {args.repeat} runs ...")
        t = time.perf_counter()
        m(*inputs)
        first = time.perf_counter() - t
        times = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            m(*inputs)
            times.append(time.perf_counter() - t)
        p50, p90, p99 = (np.percentile(times, q) * 1e3 for q in (50, 90, 99))
        print(f"{label:32s} {first * 1e3:9.3f} {p50:9.3f} {p90:9.3f} {p99:9.3f} {min(times) * 1e3:9.3f}  {len(times)}")
    return 0


def _artifact_parser(sub, name: str, help: str, description: str):
    import argparse
    p = sub.add_parser(name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("artifact", metavar="DIR", help="an artifact directory (braze compile -o DIR)")
    return p


def add_precision(p, what: str) -> None:
    """``--precision`` and ``--precision-keep``, as ``braze compile`` and ``braze tune`` take them;
    ``what`` says what else the precision decides there."""
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="the dtype GEMMs, batched matmuls and convolutions of a float32 model compute in: fp32, "
                        "or bf16 (2x or more where the CPU has AVX512_BF16 or AMX-BF16) or fp16 (where it has "
                        f"AMX-FP16; elsewhere either compiles fp32, with a warning); {what}; docs/precision.md. "
                        "Default: BRAZE_PRECISION, else fp32")
    p.add_argument("--precision-keep", metavar="NAMES", default=None,
                   help="comma-separated op names (matmul, linear, conv2d) or module paths (lm_head, "
                        "encoder.layer.0) whose products stay float32 under --precision bf16/fp16 "
                        "(default: BRAZE_PRECISION_KEEP)")


def precision_options(args, opts: Options) -> Options:
    """``opts`` with what add_precision's arguments say (``--precision`` goes to braze.compile's own argument)."""
    if args.precision_keep:
        opts = opts.replace(precision_keep=tuple(k for k in args.precision_keep.split(",") if k.strip()))
    return opts


def add_parsers(sub, add_dim) -> None:
    """The compile, run and bench commands; ``add_dim`` adds the --dim option braze inspect has too."""
    import argparse
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "compile", help="compile a model file into a relocatable artifact directory", formatter_class=raw,
        description="Compile an .onnx file, a .pt2 file (torch.export.save) or a TensorFlow SavedModel directory "
                    "once for every shape its "
                    "symbolic dims allow, and write an artifact directory: libbraze_model.so, braze_model.h, "
                    "weights.safetensors, meta.json and the libraries it needs (docs/deployment.md). Load it "
                    "with braze.load (numpy only) or from C.\n\n"
                    "  braze compile model.onnx -o model --dim batch=1:64 --dim seq=1:512\n"
                    "  braze compile saved_model/ -o model --dims tokens=batch,seq --dim seq=1:512\n"
                    "  braze run model --input input_ids=ids.npy --input attention_mask=mask.npy")
    p.add_argument("model", help="an .onnx file, a .pt2 file from torch.export.save, braze IR text (.braze) or a "
                   "TensorFlow SavedModel directory")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="the artifact directory to write")
    add_dim(p)
    p.add_argument("--threads", type=int, metavar="N", help="OpenMP threads the model runs with (default: the "
                   "runtime's)")
    add_precision(p, "the weights are saved in it")
    p.add_argument("--target", default=None, metavar="TARGET",
                   help="cpu (this machine at its best instruction set, the default); cpu-x86:LEVEL (avx512, "
                        "avx2, sse or scalar: for CPUs with that level, no higher than this machine's); or "
                        "cuda:sm_XX, e.g. cuda:sm_90 for an H100 or H200: compiles anywhere, runs where that GPU "
                        "and its driver are (docs/cuda.md). Default: BRAZE_TARGET, else cpu")
    p = _artifact_parser(
        sub, "run", help="run an artifact on .npy inputs",
        description="Load an artifact directory and run it once on inputs from .npy files, named as the "
                    "model names them (braze inspect DIR lists them). Prints each output's dtype, shape and "
                    "range; -o writes them to an .npz file.\n\n"
                    "  braze run model --input x=x.npy -o out.npz")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="one input; repeatable")
    p.add_argument("-o", "--output", metavar="FILE.npz", help="write the outputs here, by output name")
    p = _artifact_parser(
        sub, "bench", help="time an artifact at given shapes (latency percentiles)",
        description="Load an artifact directory and time it at each --shape: the first call, then "
                    "--repeat calls: latency percentiles p50, p90, p99 and the minimum, in ms. Inputs are random normal "
                    "floats, integer inputs are ones.\n\n"
                    "  braze bench model --shape batch=1,seq=16 --shape batch=8,seq=128 --repeat 50")
    p.add_argument("--shape", action="append", required=True, metavar="NAME=VALUE,...",
                   help="a value for every symbolic dim; repeatable")
    p.add_argument("--repeat", type=int, default=20, metavar="N", help="timed calls per shape (default 20)")
