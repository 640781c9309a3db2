"""A decoder step over a key/value cache: eager, the braze plug-in and inductor, one token at a
time after a 16-token prefill. The cache is a module buffer written at ``start_pos`` (an int
argument), as the LLaMA reference code does (``slice``: ``cache[:, pos:pos + n] = k``) or as
transformers' StaticCache does (``index_copy``: ``cache.index_copy_(1, positions, k)``);
functionalized, each write is a new cache and a copy back, the cost a backend pays unless it
writes in place. Or (``cat``) the cache is passed in and returned one row longer, as transformers'
DynamicCache does: the attention's products then have a new length at every step.

    python -m benchmarks.kv_cache_decode [--rounds 3] [--steps 200] [--threads 2] [--backends eager,braze,inductor]
                                         [--out benchmarks/results]

Each (backend, variant) runs in its own process (inductor's OpenMP threads spin after each call,
on the cores the others need), in ``--rounds`` rounds, backends in turn; a run's time is the median
decode step after 20 warm steps, and a point's the median over rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

BACKENDS = ("eager", "braze", "inductor")
VARIANTS = ("slice", "index_copy", "cat")
DIM, CACHE = 256, 512


def _model(variant: str):
    import torch
    nn = torch.nn

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.qkv, self.out = nn.Linear(DIM, 3 * DIM), nn.Linear(DIM, DIM)
            self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))
            self.register_buffer("ck", torch.zeros(1, CACHE, DIM))
            self.register_buffer("cv", torch.zeros(1, CACHE, DIM))

        def forward(self, x, start_pos: int, past=None):
            n = x.shape[1]
            q, k, v = self.qkv(x).chunk(3, -1)
            if variant == "cat":
                keys, values = (k, v) if past is None else (torch.cat([past[0], k], 1), torch.cat([past[1], v], 1))
                h = x + self.out((q @ keys.transpose(1, 2) / DIM ** 0.5).softmax(-1) @ values)
                return h + self.mlp(h), (keys, values)
            if variant == "slice":
                self.ck[:, start_pos:start_pos + n] = k
                self.cv[:, start_pos:start_pos + n] = v
            else:
                pos = torch.arange(start_pos, start_pos + n)
                self.ck.index_copy_(1, pos, k)
                self.cv.index_copy_(1, pos, v)
            keys, values = self.ck[:, :start_pos + n], self.cv[:, :start_pos + n]
            h = x + self.out((q @ keys.transpose(1, 2) / DIM ** 0.5).softmax(-1) @ values)
            return h + self.mlp(h)
    return Decoder()


def one_run(backend: str, variant: str, steps: int, threads: int) -> dict:
    """Median µs per decode step, and the largest difference from eager's outputs (eager runs the
    same steps afterwards, not between the timed calls, whose threads it would disturb)."""
    import torch
    torch.set_num_threads(threads)
    m = _model(variant)
    if backend != "eager":
        m = torch.compile(m, backend=backend, dynamic=True)
    torch.manual_seed(1)
    xs = [torch.randn(1, 16, DIM)] + [torch.randn(1, 1, DIM) for _ in range(steps)]
    positions = [0, *range(16, 16 + steps)]

    def decode(model, timed: list | None = None) -> list:
        """Every step's output; the ``cat`` variant's cache travels from step to step."""
        outs, past = [], None
        for p, x in zip(positions, xs):
            t0 = time.perf_counter()
            y = model(x, p, past) if variant == "cat" else model(x, p)
            if timed is not None and p:
                timed.append(time.perf_counter() - t0)
            y, past = y if variant == "cat" else (y, None)
            outs.append(y)
        return outs

    times: list = []
    with torch.no_grad():
        outs = decode(m, times)
        err = max((y - e).abs().max().item() for y, e in zip(outs, decode(_model(variant))))
    return {"us": statistics.median(times[20:]) * 1e6, "max_abs_err": err}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every (backend, variant) run")
    ap.add_argument("--steps", type=int, default=200, help="decode steps per run")
    from .harness import add_round_options, chosen_backends, process_rounds
    from .run import _machine, write_results
    add_round_options(ap, "kv_cache_decode", "VARIANT", BACKENDS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(one_run(a.one[0], a.one[1], a.steps, a.threads)))
        return 0
    backends = chosen_backends(ap, a, BACKENDS)
    runs = process_rounds("benchmarks.kv_cache_decode", list(VARIANTS), backends, a.rounds,
                          ["--steps", str(a.steps), "--threads", str(a.threads)])
    import torch

    import braze
    points = {k: {"us": statistics.median(x["us"] for x in v), "runs_us": [round(x["us"], 1) for x in v],
                  "max_abs_err": max(x["max_abs_err"] for x in v)} for k, v in runs.items()}
    doc = {"meta": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "threads": a.threads, "braze": braze.__version__,
                    "torch": torch.__version__, "machine": _machine(a.threads), "dim": DIM, "cache": CACHE,
                    "steps": a.steps, "backends": backends},
           "results": points}
    print(write_results(a.out, "kv_cache_decode", doc, _markdown))
    return 0


def _markdown(doc: dict) -> str:
    m, res = doc["meta"], doc["results"]
    mc, bk = m["machine"], m["backends"]
    lines = ["# A decoder step over its KV cache (benchmarks/kv_cache_decode.py)", "",
             f"{m['date']}; {mc['cpu']}, {mc['cores']} cores ({', '.join(mc['isa'])}; copy {mc['copy_gbs']} GB/s, "
             f"GEMM {mc['gemm_gflops']} GFLOP/s); {m['threads']} threads; braze {m['braze']}, torch {m['torch']}. "
             f"Cache [1, {m['cache']}, {m['dim']}] x2, one token per step after a 16-token prefill; "
             f"median µs per step (each run's median over {m['steps'] - 20} steps; the median of the runs).", "",
             "slice, index_copy: a cache buffer written at `start_pos`; cat: the cache passed in and returned "
             "one row longer (transformers' DynamicCache).", "",
             "| cache | " + " | ".join(bk) + " | " + " | ".join(f"{b} / eager" for b in bk[1:]) + " | runs |",
             "|---|" + "---:|" * (2 * len(bk) - 1) + "---|"]
    for v in VARIANTS:
        t = [res[f"{v}/{k}"]["us"] for k in bk]
        runs = "; ".join(f"{k} " + ", ".join(str(x) for x in res[f"{v}/{k}"]["runs_us"]) for k in bk)
        lines.append(f"| {v} | " + " | ".join(f"{x:.0f}" for x in t) + " | " +
                     " | ".join(f"{x / t[0]:.2f}" for x in t[1:]) + f" | {runs} |")
    lines += ["", "Largest difference from eager's outputs: " + ", ".join(
        f"{k} {x['max_abs_err']:.1e}" for k, x in res.items() if not k.endswith("eager")) + "."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
