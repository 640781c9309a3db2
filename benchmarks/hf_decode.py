"""Token-by-token decoding of transformers models through torch.compile: eager, the braze plug-in
and inductor, each run in its own process.

    python -m benchmarks.hf_decode [--models gpt2,llama] [--rounds 3] [--tokens 60] [--threads 2]
                                   [--backends eager,braze,inductor] [--out benchmarks/results]

``gpt2``: GPT-2 with a DynamicCache (the cache passed in and returned one position longer, as
``generate`` does by default); ``llama``: LLaMA with a StaticCache (a buffer written at
``cache_position`` by ``index_copy_``). Small configs with random weights (no download): 4 layers
of 256 (GPT-2), 2 layers of 256 with grouped-query attention (LLaMA). Greedy decoding after an
8-token prompt; a run's time is the median decode step after 10 warm ones, a point's the median
over ``--rounds`` runs. Every backend's tokens must equal eager's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

BACKENDS = ("eager", "braze", "inductor")
MODELS = ("gpt2", "llama")


def _model(name: str):
    import torch
    import transformers as tf
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = tf.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=5000, n_positions=256)
        return tf.GPT2LMHeadModel(cfg).eval(), cfg
    cfg = tf.LlamaConfig(num_hidden_layers=2, hidden_size=256, intermediate_size=512, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=1000, max_position_embeddings=256)
    return tf.LlamaForCausalLM(cfg).eval(), cfg


def one_run(backend: str, name: str, tokens: int, threads: int) -> dict:
    """Median µs per decoded token and the tokens."""
    import warnings

    import torch
    torch.set_num_threads(threads)
    model, cfg = _model(name)
    fwd = model.forward if backend == "eager" else torch.compile(model.forward, backend=backend, dynamic=True)
    ids = torch.randint(0, cfg.vocab_size, (1, 8), generator=torch.Generator().manual_seed(1))
    times, out_tokens = [], []
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "gpt2":
            out = fwd(ids, use_cache=True)
            step = lambda t, i, past: fwd(t, past_key_values=past, use_cache=True)  # noqa: E731
        else:
            from transformers import StaticCache
            cache = StaticCache(config=cfg, max_cache_len=128)
            out = fwd(ids, past_key_values=cache, cache_position=torch.arange(8), use_cache=True)
            step = lambda t, i, past: fwd(t, past_key_values=past, cache_position=torch.tensor([i]),  # noqa: E731
                                          use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        for i in range(8, 8 + tokens):
            t0 = time.perf_counter()
            out = step(nxt, i, past)
            times.append(time.perf_counter() - t0)
            past = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
            out_tokens.append(int(nxt))
    return {"us": statistics.median(times[10:]) * 1e6, "tokens": out_tokens}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=60, help="tokens decoded per run (the first 10 not timed)")
    from .harness import add_round_options, chosen_backends, process_rounds
    from .run import _machine, write_results
    add_round_options(ap, "hf_decode", "MODEL", BACKENDS)
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(one_run(a.one[0], a.one[1], a.tokens, a.threads)))
        return 0
    backends, models = chosen_backends(ap, a, BACKENDS), a.models.split(",")
    if not set(models) <= set(MODELS):
        ap.error(f"--models: any of {', '.join(MODELS)}")
    runs = process_rounds("benchmarks.hf_decode", models, backends, a.rounds,
                          ["--tokens", str(a.tokens), "--threads", str(a.threads)])
    import torch
    import transformers

    import braze
    points = {}
    for k, v in runs.items():
        eager = runs[k.split("/")[0] + "/eager"][0]["tokens"]
        points[k] = {"us": statistics.median(x["us"] for x in v), "runs_us": [round(x["us"], 1) for x in v],
                     "same_tokens": all(x["tokens"] == eager for x in v)}
    doc = {"meta": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "threads": a.threads, "braze": braze.__version__,
                    "torch": torch.__version__, "transformers": transformers.__version__,
                    "machine": _machine(a.threads), "tokens": a.tokens, "backends": backends, "models": models},
           "results": points}
    print(write_results(a.out, "hf_decode", doc, _markdown))
    return 0 if all(p["same_tokens"] for p in points.values()) else 1


def _markdown(doc: dict) -> str:
    m, res = doc["meta"], doc["results"]
    mc, bk = m["machine"], m["backends"]
    lines = ["# Decoding transformers models token by token (benchmarks/hf_decode.py)", "",
             f"{m['date']}; {mc['cpu']}, {mc['cores']} cores ({', '.join(mc['isa'])}); {m['threads']} threads; "
             f"braze {m['braze']}, torch {m['torch']}, transformers {m['transformers']}. Greedy decoding after an "
             f"8-token prompt, batch 1; median µs per token (each run's median over {m['tokens'] - 10} tokens; the "
             "median of the runs). gpt2: 4 layers of 256, DynamicCache; llama: 2 layers of 256, grouped-query "
             "attention, StaticCache (index_copy_ into a buffer).", "",
             "| model | " + " | ".join(bk) + " | " + " | ".join(f"{b} / eager" for b in bk[1:]) +
             " | same tokens | runs |",
             "|---|" + "---:|" * (2 * len(bk) - 1) + "---|---|"]
    for name in m["models"]:
        t = [res[f"{name}/{k}"]["us"] for k in bk]
        same = all(res[f"{name}/{k}"]["same_tokens"] for k in bk)
        runs = "; ".join(f"{k} " + ", ".join(str(x) for x in res[f"{name}/{k}"]["runs_us"]) for k in bk)
        lines.append(f"| {name} | " + " | ".join(f"{x:.0f}" for x in t) + " | " +
                     " | ".join(f"{x / t[0]:.2f}" for x in t[1:]) + f" | {'yes' if same else 'NO'} | {runs} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
