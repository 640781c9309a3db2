"""TensorFlow models through braze's TF frontend: import and compile time, accuracy and latency
against TF itself, for a BERT-base-size Keras encoder (12 layers, d768, 12 heads, exact GELU, an
attention mask) and an NHWC CNN with batch norm and depthwise convolutions, random weights.

    python -m benchmarks.tf_models [--models encoder,cnn] [--layers 12] [--threads 2]
                                   [--min-time 1] [--out benchmarks/results] [--stem tf_models]

Per model, in one process: ``braze.import_tf`` (TF's freeze and braze's conversion) and
``braze.compile`` into an empty compile cache are timed once; then at each shape braze's answer
against TF's (max |diff| / max |TF|), and the median time per call of braze, TF eager (the Keras
model called) and ``tf.function`` (graph mode, no XLA), called in turn for ``--min-time`` seconds
each round, the order alternating. Writes ``<stem>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

SHAPES = {"encoder": [(1, 16), (4, 64), (8, 128)], "cnn": [(1, 64, 64), (4, 96, 96), (8, 160, 160)]}


def _encoder(layers: int, width: int = 768, heads: int = 12, ff: int = 3072, vocab: int = 30522):
    import keras
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    mask = keras.Input((None,), dtype="float32", name="mask")
    h = keras.layers.Embedding(vocab, width)(tokens)
    att = keras.ops.cast(mask[:, None, :] > 0.5, "bool")
    for _ in range(layers):
        h = keras.layers.LayerNormalization()(h + keras.layers.MultiHeadAttention(heads, width // heads)(
            h, h, attention_mask=att))
        f = keras.layers.Dense(ff, activation=keras.activations.gelu)(h)
        h = keras.layers.LayerNormalization()(h + keras.layers.Dense(width)(f))
    return keras.Model([tokens, mask], h), {"tokens": ("batch", "seq"), "mask": ("batch", "seq")}


def _cnn(layers: int):
    import keras
    keras.utils.set_random_seed(0)
    x = keras.Input((None, None, 3), name="image")
    h = keras.layers.ReLU()(keras.layers.BatchNormalization()(keras.layers.Conv2D(32, 3, 2, "same")(x)))
    for c in (64, 128, 256)[:max(1, min(layers, 3))]:
        h = keras.layers.DepthwiseConv2D(3, padding="same")(h)
        h = keras.layers.ReLU()(keras.layers.BatchNormalization()(keras.layers.Conv2D(c, 1)(h)))
        h = keras.layers.MaxPooling2D(2, padding="same")(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(x, keras.layers.Dense(10)(h)), {"image": ("batch", "h", "w", None)}


def _inputs(name: str, shape: tuple, seed: int) -> dict:
    import numpy as np
    rng = np.random.default_rng(seed)
    if name == "encoder":
        b, s = shape
        mask = np.ones((b, s), np.float32)
        mask[:, s // 2:] = rng.integers(0, 2, (b, s - s // 2))
        return {"tokens": rng.integers(0, 30522, (b, s)).astype(np.int32), "mask": mask}
    b, h, w = shape
    return {"image": rng.standard_normal((b, h, w, 3)).astype(np.float32)}


def measure(name: str, layers: int, min_time: float) -> dict:
    import numpy as np
    import tensorflow as tf

    import braze
    model, dims = (_encoder if name == "encoder" else _cnn)(layers)
    names = [x.name for x in model.inputs]
    t0 = time.perf_counter()
    module = braze.import_tf(model, dims=dims)
    t1 = time.perf_counter()
    with tempfile.TemporaryDirectory() as cache:
        cm = braze.compile(module, options={"cache_dir": cache})
    t2 = time.perf_counter()

    def keras_call(**kw):
        return model([kw[n] for n in names] if len(names) > 1 else kw[names[0]], training=False)
    graph = tf.function(keras_call)
    rows = []
    for seed, shape in enumerate(SHAPES[name]):
        args = _inputs(name, shape, seed)
        want = keras_call(**args).numpy()
        got = cm(**args)
        err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
        calls = {"braze": lambda: cm(**args), "eager": lambda: keras_call(**args).numpy(),
                 "tf.function": lambda: graph(**args).numpy()}
        for fn in calls.values():
            fn()
        times = {k: [] for k in calls}
        order = list(calls)
        rounds = 0
        while rounds < 5 or (rounds < 50 and sum(sum(v) for v in times.values()) < min_time * len(calls)):
            for k in (order if rounds % 2 == 0 else order[::-1]):
                s = time.perf_counter()
                calls[k]()
                times[k].append(time.perf_counter() - s)
            rounds += 1
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        rows.append({"shape": "x".join(map(str, shape)), "max_rel_err": err, "rounds": rounds,
                     **{f"{k}_ms": v for k, v in med.items()}})
        print(f"  {rows[-1]}", flush=True)
    return {"model": name, "layers": layers if name == "encoder" else max(1, min(layers, 3)), "params": int(model.count_params()), "import_s": t1 - t0,
            "compile_s": t2 - t1, "shapes": rows}


def to_markdown(doc: dict) -> str:
    m = doc["meta"]
    mach = m["machine"]
    lines = [f"Run {m['date']} on {mach['cpu']} ({mach['cores']} cores, ISA {' '.join(mach['isa'])}), "
             f"{m['threads']} threads, braze {m['braze']}, TensorFlow {m['tensorflow']}. One process; braze's "
             "import (TF's freeze and braze's conversion) and its compile into an empty cache timed once; per "
             "shape the median per call, braze, TF eager and tf.function called in turn.", ""]
    for r in doc["results"]:
        unit = "layers" if r["model"] == "encoder" else "depthwise blocks"
        lines += [f"**{r['model']}** ({r['layers']} {unit}, {r['params'] / 1e6:.2f} M parameters): import "
                  f"{r['import_s']:.2f} s, compile {r['compile_s']:.1f} s.", "",
                  "| shape | max rel err | braze ms | TF eager ms | tf.function ms | tf.function / braze |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {s['shape']} | {s['max_rel_err']:.1e} | {s['braze_ms']:.2f} | {s['eager_ms']:.2f} | "
                  f"{s['tf.function_ms']:.2f} | {s['tf.function_ms'] / s['braze_ms']:.2f} |" for s in r["shapes"]]
        lines.append("")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="encoder,cnn", help="comma-separated: encoder, cnn")
    ap.add_argument("--layers", type=int, default=12, help="the encoder's layers (the CNN's blocks, at most 3)")
    ap.add_argument("--threads", type=int, default=2, help="braze's and TF's threads")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds of calls per backend and shape")
    ap.add_argument("--out", default="benchmarks/results", help="directory for the results")
    ap.add_argument("--stem", default="tf_models", help="the results' file name, less .json / .md")
    a = ap.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    import braze

    from .run import _machine, write_results
    results = []
    for name in a.models.split(","):
        if name not in SHAPES:
            ap.error(f"unknown model {name!r}; choose from {', '.join(SHAPES)}")
        print(f"{name}:", flush=True)
        results.append(measure(name, a.layers, a.min_time))
    doc = {"meta": {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "threads": a.threads, "braze": braze.__version__,
                    "tensorflow": tf.__version__, "machine": _machine(a.threads)}, "results": results}
    print(write_results(a.out, a.stem, doc, to_markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
