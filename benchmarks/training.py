"""Training step time through the plug-in (issue 24): eager, ``torch.compile(backend="braze",
dynamic=True)`` and ``torch.compile(backend="inductor", dynamic=True)``, one step = zero_grad,
forward, loss, backward, optimizer step.

    python -m benchmarks.training [--models mlp,llama,bert,bert+dropout] [--shapes quick] [--threads 2]
                                  [--min-time 2.0] [--out benchmarks/results]

Per model, in one process: the model in training mode with every dropout at 0 (so the three
compute the same step; a model named ``name+dropout`` keeps its config's dropout, each backend
then draws its own masks and the losses are not compared). ``gpt2+lm`` (GPT-2 with its LM head),
``bert+cls`` (BERT-base with a classification head) and ``convnet_bn`` (a small convnet with
BatchNorm) train on their own loss; a zoo model's loss is the mean square of its first output
scaled by 0.5-1.5 along the last axis (a stand-in for a head: it sends a gradient through every
output, and a layer-normed output does not make it 1 whatever the model computes). SGD at lr 0 (the step runs, the
weights stay, so the three share one module). Each backend is warmed up at every shape first
(the first step's seconds are its compile time, cold for this process), then per shape the three
are called in turn until ``--min-time`` seconds and >= 5 rounds; medians, the ratio of eager's
and inductor's median to braze's (above 1: braze is faster), and each loss against eager's.

Writes ``training.json`` and ``training.md`` to ``--out``.
"""

from __future__ import annotations

import statistics
import time

from .harness import merge_runs, per_model_main, per_model_markdown, runs_sentence
from .run import shape_str

DEFAULT_MODELS = ["mlp", "llama", "bert", "bert+dropout"]
BACKENDS = ("eager", "braze", "inductor")


def _no_dropout(module) -> None:
    for m in module.modules():
        if hasattr(m, "p") and isinstance(m.p, float) and "Dropout" in type(m).__name__:
            m.p = 0.0
        cfg = getattr(m, "config", None)
        for k in dir(cfg) if cfg is not None else ():
            if "dropout" in k and isinstance(getattr(cfg, k, None), float):
                setattr(cfg, k, 0.0)


def training_model(name: str):
    """(module in training mode, inputs(dims) -> (args, kwargs), loss(output), whether its losses
    compare with eager's) for ``name``: a task model with its own loss (``TASKS``), or a zoo model
    under the weighted mean-square stand-in; every dropout at 0 but for ``name+dropout``."""
    import torch

    from braze import zoo
    if name in TASKS:
        module, inputs = TASKS[name]()
        module.train()
        _no_dropout(module)
        return module, inputs, lambda out: out.loss if hasattr(out, "loss") else out, True
    base, _, variant = name.partition("+")
    zm = zoo.get(base)
    module = zm.module.train()
    if variant != "dropout":
        _no_dropout(module)

    def loss(out):
        out = zoo.first_output(out).float()
        return (out * torch.linspace(0.5, 1.5, out.shape[-1])).square().mean()
    return module, lambda dims: (zm.make_inputs(**dims), {}), loss, not variant


def _gpt2_lm():
    """GPT-2 small (random weights) with its LM head, trained on its own causal-LM loss."""
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(use_cache=False)
    model = transformers.GPT2LMHeadModel(cfg)

    def inputs(dims):
        ids = torch.randint(0, cfg.vocab_size, (dims["batch"], dims["seq"]),
                            generator=torch.Generator().manual_seed(dims["batch"] * 1000 + dims["seq"]))
        return (), {"input_ids": ids, "labels": ids}
    return model, inputs


def _bert_cls():
    """BERT-base (random weights) with a 3-class head, trained on cross-entropy; every other
    sequence padded, as in the zoo's BERT."""
    import torch
    import transformers
    torch.manual_seed(0)
    cfg = transformers.BertConfig(num_labels=3)
    model = transformers.BertForSequenceClassification(cfg)

    def inputs(dims):
        b, s = dims["batch"], dims["seq"]
        g = torch.Generator().manual_seed(b * 1000 + s)
        mask = torch.ones(b, s, dtype=torch.int64)
        mask[1::2, max(1, s - 3):] = 0
        return (), {"input_ids": torch.randint(0, cfg.vocab_size, (b, s), generator=g), "attention_mask": mask,
                    "labels": torch.randint(0, 3, (b,), generator=g)}
    return model, inputs


def _convnet_bn():
    """A small convnet with BatchNorm (batch statistics in training) and max-pooling, trained on
    10-class cross-entropy."""
    import torch
    from torch import nn
    torch.manual_seed(0)

    def block(cin, cout, stride):
        return [nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]

    class ConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(*block(3, 32, 1), *block(32, 64, 2), nn.MaxPool2d(2), *block(64, 128, 1),
                                      *block(128, 128, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.head = nn.Linear(128, 10)

        def forward(self, x, labels):
            return nn.functional.cross_entropy(self.head(self.body(x)), labels)

    def inputs(dims):
        g = torch.Generator().manual_seed(dims["batch"] * 1000 + dims["height"])
        return (torch.randn(dims["batch"], 3, dims["height"], dims["width"], generator=g),
                torch.randint(0, 10, (dims["batch"],), generator=g)), {}
    return ConvNet(), inputs


# models trained on their own loss, named apart from the zoo's (their shapes: benchmarks.run.SHAPES)
TASKS = {"gpt2+lm": _gpt2_lm, "bert+cls": _bert_cls, "convnet_bn": _convnet_bn}


def _step(fn, opt, loss_of, x) -> float:
    opt.zero_grad(set_to_none=True)
    loss = loss_of(fn(*x[0], **x[1]))
    loss.backward()
    opt.step()
    return loss.item()


def _compiled(module, backend: str):
    import torch
    return module if backend == "eager" else torch.compile(module, backend=backend, dynamic=True)


def alone(name: str, backend: str, shapes: list[dict], threads: int) -> dict:
    """One backend alone in a fresh process, after the main run (so the disk caches are warm): its
    first step's seconds (a warm compile: dynamo's and AOTAutograd's tracing, then the caches);
    the process's peak resident memory once every shape was stepped once (compiles included),
    and the peak over two more steps at every shape (the training steps alone). The eager
    process's peaks are the baseline: Python, torch, the model and its step. For braze, the
    libraries it built or loaded after the first step at the first two shapes (in the main run,
    inductor's traces of the same frame count as retraces for braze's heuristics)."""
    import torch

    import braze
    torch.set_num_threads(threads)

    def libraries():
        s = braze.stats()
        return s["native_compiles"] + s["cache_hits"]
    module, inputs, loss_of, _ = training_model(name)
    opt = torch.optim.SGD(module.parameters(), lr=0.0)
    fn = _compiled(module, backend)
    t = time.perf_counter()
    _step(fn, opt, loss_of, inputs(shapes[0]))
    first = time.perf_counter() - t
    two = libraries()
    for i, dims in enumerate(shapes[1:]):
        _step(fn, opt, loss_of, inputs(dims))
        if i == 0:
            two = libraries()
    with_compiles = _peak_rss_mb()
    _reset_peak_rss()
    for _ in range(2):  # the shapes in turn: the first (often batch 1) comes back after the others
        for dims in shapes:
            _step(fn, opt, loss_of, inputs(dims))
    out = {"first_step_warm_s": first, "peak_rss_mb": with_compiles, "step_peak_rss_mb": _peak_rss_mb()}
    if backend == "braze":
        out["libraries_after_two_shapes"] = libraries() - two
    return out


def _peak_rss_mb() -> float:
    """This process's peak resident memory: VmHWM, this address space's own (getrusage's
    ru_maxrss keeps the forking parent's across exec, so a spawned child would report it)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def _reset_peak_rss() -> None:
    """VmHWM from now on: Linux resets it to the resident size when 5 is written to clear_refs."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _alone_in_processes(name: str, shapes: list[dict]) -> dict:
    import multiprocessing

    import torch
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing compiled, caches on disk
    out = {}
    for b in BACKENDS:
        with ctx.Pool(1) as pool:
            out[b] = pool.apply(alone, (name, b, shapes, torch.get_num_threads()))
    return out


def measure(name: str, shapes: list[dict], min_time: float) -> dict:
    import torch

    import braze
    module, inputs, loss_of, comparable = training_model(name)
    opt = torch.optim.SGD(module.parameters(), lr=0.0)
    fns = {b: _compiled(module, b) for b in BACKENDS}

    def timed(fn, x):
        t = time.perf_counter()
        loss = _step(fn, opt, loss_of, x)
        return time.perf_counter() - t, loss

    first = {}
    # every graph dynamo makes, compiled before any timing: the shapes in turn, twice, so that the
    # first shape (often batch 1) comes back after the others, as in a training loop
    for dims in shapes + shapes:
        x = inputs(dims)
        for b, fn in fns.items():
            t, _ = timed(fn, x)
            first.setdefault(b, t)
    compiles, graphs = braze.stats()["native_compiles"], _dynamo_graphs()
    rows = []
    for dims in shapes:
        x = inputs(dims)
        times = {b: [] for b in BACKENDS}
        losses = {b: timed(fn, x)[1] for b, fn in fns.items()}
        t0 = time.perf_counter()
        while len(times["braze"]) < 5 or time.perf_counter() - t0 < min_time:
            for b, fn in fns.items():
                times[b].append(timed(fn, x)[0])
        med = {b: statistics.median(v) * 1e3 for b, v in times.items()}
        rows.append({"shape": shape_str(dims), "dims": dims, **{f"{b}_ms": med[b] for b in BACKENDS},
                     "eager_over_braze": med["eager"] / med["braze"],
                     "inductor_over_braze": med["inductor"] / med["braze"], "rounds": len(times["braze"]),
                     **{f"loss_rel_error_{b}": None if not comparable else
                        abs(losses[b] - losses["eager"]) / max(abs(losses["eager"]), 1e-30)
                        for b in ("braze", "inductor")}})
        print(f"  {name} {shape_str(dims)}: " + ", ".join(f"{b} {med[b]:.2f} ms" for b in BACKENDS), flush=True)
    recompiles = {"braze_native_compiles": braze.stats()["native_compiles"] - compiles,
                  "dynamo_graphs": _dynamo_graphs() - graphs}
    return {"model": name, "shapes": rows, "first_step_s": first, "after_warm_up": recompiles,
            "alone": _alone_in_processes(name, shapes)}


def _dynamo_graphs() -> int:
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


def to_markdown(doc: dict) -> str:
    runs = doc["meta"].get("runs")
    text = per_model_markdown(
        doc, "training steps (zero_grad, forward, the loss (a task model's own; a zoo model's a weighted mean "
        "square), backward, SGD step) in eager, "
        "`torch.compile(backend='braze', dynamic=True)` and `torch.compile(backend='inductor', dynamic=True)`, "
        "called in turn; median step times; x = the other's time over braze's (above 1: braze is faster)."
        + runs_sentence(doc) + (" First steps and memory: the first run's." if runs else ""),
        ["eager ms", "braze ms", "inductor ms", "eager / braze", "inductor / braze", "loss err braze"]
        + (["inductor / braze per run"] if runs else []),
        lambda s: [f"{s['eager_ms']:.2f}", f"{s['braze_ms']:.2f}", f"{s['inductor_ms']:.2f}",
                   f"{s['eager_over_braze']:.2f}x", f"{s['inductor_over_braze']:.2f}x",
                   "-" if s["loss_rel_error_braze"] is None else f"{s['loss_rel_error_braze']:.1e}"]
        + ([" ".join(f"{x:.2f}" for x in s["runs_inductor_over_braze"])] if runs else []))
    firsts = [f"{r['model']}: " + ", ".join(f"{b} {r['first_step_s'][b]:.1f} s" for b in BACKENDS)
              for r in doc["results"]]
    text += ("\nFirst step (compiles included; this process's caches cold, the disk caches as "
             "BRAZE_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR held them): " + "; ".join(firsts) + ".\n")
    alone = [r for r in doc["results"] if "alone" in r]  # runs before 2026-11-28 did not measure these
    if alone:
        text += ("\nAfter every shape was stepped twice, the timed rounds compiled: "
                 + "; ".join(f"{r['model']}: {r['after_warm_up']['braze_native_compiles']} braze libraries, "
                             f"{r['after_warm_up']['dynamo_graphs']} dynamo graphs" for r in alone) + ".\n")
        later = [r for r in alone if "libraries_after_two_shapes" in r["alone"]["braze"]]  # since 2026-11-28
        if later:
            text += ("\nbraze alone in its process, after its first step at each of the first two shapes, then every "
                     "shape in turn, twice: libraries built or loaded after those first two steps: "
                     + "; ".join(f"{r['model']}: {r['alone']['braze']['libraries_after_two_shapes']}" for r in later)
                     + ".\n")
        text += ("\nEach backend alone in a fresh process after the run (the disk caches warm): the first "
                 "step (a warm compile); the process's peak resident memory once every shape was stepped once "
                 "(compiles included), and over two more steps at every shape (steps alone). Eager's is the "
                 "baseline: Python, torch, the model and its step.\n\n"
                 "| model | first step s braze | inductor | peak MB with compiles eager | braze | inductor | "
                 "step peak MB eager | braze | inductor |\n|---|---|---|---|---|---|---|---|---|\n")
        for r in alone:
            a = r["alone"]
            steps = [f"{a[b]['step_peak_rss_mb']:.0f}" if "step_peak_rss_mb" in a[b] else "-" for b in BACKENDS]
            text += (f"| {r['model']} | {a['braze']['first_step_warm_s']:.1f} | {a['inductor']['first_step_warm_s']:.1f} | "
                     + " | ".join(f"{a[b]['peak_rss_mb']:.0f}" for b in BACKENDS) + " | " + " | ".join(steps) + " |\n")
    return text


def main(argv=None) -> int:
    return per_model_main(argv, __doc__, DEFAULT_MODELS, measure, to_markdown, "training", 2.0,
                          merge=lambda docs: merge_runs(docs, "inductor_over_braze"))


if __name__ == "__main__":
    raise SystemExit(main())
