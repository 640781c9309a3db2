"""The measuring process: ``python -m braze.tune.measure`` reads a job (JSON) on stdin and writes
one JSON line per site on stdout. The compile runs it as a child, so a kernel that crashes takes
down the measurement, never the user's program (search.py).

Per site: a random weight, packed as the model packs it (for a 1x1 convolution's ``conv`` kernel,
also as a convolution's, run on the squarest image of M pixels, ``_image``); copies of it enough
to exceed the last-level cache twice when one copy exceeds L2 (a model's weight comes from
memory; the same weight timed again would come from cache). Per point (an M) and path:

* the result's first rows checked against a float64 NumPy reference; a mismatch or an error
  rejects the path (recorded, never chosen);
* 3 warm-up calls (a primitive per M is created here);
* ``rounds`` interleaved rounds, the paths in a rotated order each round, each timing enough
  calls in the helper's own C loop (``braze_time_matmul``, ``braze_time_conv2d``) to last about
  ``SAMPLE_NS``.

The result per path and point is its samples, ns per call, one per round.
"""

from __future__ import annotations

import ctypes as C
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

# what a measurement means, in every database line's environment (db.environment): a fix to how
# kernels are checked or timed leaves the lines measured before it unread. 2: a relu site's
# reference has the relu (version 1 rejected every kernel of one).
VERSION = 2
SAMPLE_NS = 2_000_000
CHECK_ROWS = 16
# |result - float64 reference| / max |reference| by the result's dtype: float32 measured ~1e-6; a
# 16-bit result rounds once (bfloat16 2^-9, float16 2^-12 of an element), from operands the
# reference rounds as the kernels' inputs are
TOLERANCE = {"float32": 1e-4, "bfloat16": 1e-2, "float16": 2e-3}


def _cache_bytes(index: int, default: int) -> int:
    """The size of cpu0's cache ``index`` (2: L2, 3: the last level), from sysfs."""
    try:
        s = Path(f"/sys/devices/system/cpu/cpu0/cache/index{index}/size").read_text().strip()
        return int(s[:-1]) * {"K": 1 << 10, "M": 1 << 20}[s[-1]] if s[-1] in "KM" else int(s)
    except (OSError, ValueError, KeyError, IndexError):
        return default


def _activation(code: int, v: np.ndarray) -> np.ndarray:
    """braze_dnnl.h's activation ``code`` (its low byte) of v."""
    code &= 0xff
    if code in (7, 8):  # eager relu, relu6
        return np.where(v < 0, 0.0, np.minimum(v, 6.0) if code == 8 else v)
    if code == 2:
        return 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    if code == 3:
        return 0.5 * v * (1 + np.tanh(0.7978845608028654 * (v + 0.044715 * v ** 3)))
    if code == 4:
        return v / (1 + np.exp(-v))
    if code == 6:
        return np.tanh(v)
    return v


def _dtype(name: str):
    """The NumPy dtype (ml_dtypes' for bfloat16) and the helper's BRAZE_DT_* code of a DType name."""
    from ..codegen.host_library import DT_CODES
    from ..ir.types import DType
    dt = DType.parse(name)
    return dt.numpy, DT_CODES[dt]


def _image(m: int) -> tuple[int, int]:
    """The squarest h x w = m (oneDNN's convolution blocks along rows of the image)."""
    h = max(d for d in range(1, math.isqrt(m) + 1) if m % d == 0)
    return h, m // h


class _Site:
    def __init__(self, lib, site: dict, paths: dict, rng):
        self.lib, self.s, self.paths = lib, site, paths
        n, k = site["n"], site["k"]
        self.err = C.create_string_buffer(512)
        (self.dt, dt), (self.out_dt, out), (self.bias_dt, bias) = (
            _dtype(site.get(f, "float32")) for f in ("dtype", "out_dtype", "bias_dtype"))
        self.types = (dt << 12) | (out << 14) | (bias << 16)  # BRAZE_TYPES(src, dst, bias)
        w = rng.standard_normal((n, k) if site["transposed"] else (k, n), dtype=np.float32) / math.sqrt(k)
        w = w.astype(self.dt)
        self.wt = w if site["transposed"] else w.T  # [N, K] either way
        copies = 1
        if w.nbytes > _cache_bytes(2, 1 << 20):  # at most 64 copies and 1 GiB
            copies = min(64, math.ceil(2 * _cache_bytes(3, 32 << 20) / w.nbytes), max(1, (1 << 30) // w.nbytes))
        # each copy packed from its own plain weight, alive while packed: the kept constant an AVX2
        # small-M kernel reads and a packed convolution's plain weights are then as cold as the packing
        self.sources = [w] + [w.copy() for _ in range(copies - 1)]
        self.packed, self.convs = [], []
        for src in self.sources:
            pb = lib.braze_pack_b_const(src.ctypes.data, dt, dt, n, k, site["transposed"], self.err, len(self.err))
            if not pb:
                raise RuntimeError(self.err.value.decode(errors="replace"))
            self.packed.append(pb)
            if site.get("kind") == "conv1x1":  # [OC, IC, 1, 1]: the same memory as [N, K]
                pc = lib.braze_pack_conv_typed(src.ctypes.data, dt, dt, n, k, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1,
                                               self.err, len(self.err))
                if not pc:
                    raise RuntimeError(self.err.value.decode(errors="replace"))
                self.convs.append(pc)
        self.arr = (C.c_void_p * copies)(*self.packed)
        self.conv_arr = (C.c_void_p * copies)(*self.convs) if self.convs else None
        self.bias = rng.standard_normal(n, dtype=np.float32).astype(self.bias_dt) if site["bias"] else None

    def runs_as_itself(self, path: str, m: int) -> bool:
        """False where ``path`` is ``smallm`` and the helper would run one of oneDNN's primitives
        for it at M=m (a weight, an M or an epilogue its kernels do not take): the same code as
        ``dnnl``, so not a candidate of its own there."""
        return path != "smallm" or bool(self.lib.braze_packed_b_small_m_takes(self.packed[0], m,
                                                                              self.s["act"] | self.types))

    def close(self):
        for pb in self.packed:
            self.lib.braze_free_packed_b(pb)
        for pc in self.convs:
            self.lib.braze_free_packed_conv(pc)

    def _run(self, reps: int, m: int, path: str, a, c) -> float:
        """Times ``reps`` calls writing ``c``; a residual is ``c`` itself, added in place, as where a
        model's memory plan puts a product's result over the residual it reads."""
        bias = None if self.bias is None else self.bias.ctypes.data
        res = c.ctypes.data if self.s["residual"] else None
        if path == "conv":
            h, w = _image(m)
            ns = self.lib.braze_time_conv2d(reps, 1, h, w, a.ctypes.data, self.conv_arr, len(self.convs), bias, res,
                                            self.s["act"] | self.types, h, w, c.ctypes.data, self.err, len(self.err))
        else:
            ns = self.lib.braze_time_matmul(reps, m, self.s["n"], self.s["k"], a.ctypes.data, self.arr,
                                            len(self.packed), bias, res,
                                            self.s["act"] | self.types | (self.paths[path] << 20),
                                            c.ctypes.data, self.err, len(self.err))
        if ns < 0:
            raise RuntimeError(self.err.value.decode(errors="replace"))
        return ns / reps

    def check(self, m: int, path: str, rng) -> str | None:
        """Why ``path``'s result at M=m is wrong, or None."""
        a = self._rows(rng, m, self.s["k"], self.dt)
        res = self._rows(rng, m, self.s["n"], self.out_dt) if self.s["residual"] else None
        c = np.empty((m, self.s["n"]), self.out_dt) if res is None else res.copy()
        try:
            self._run(1, m, path, a, c)
        except RuntimeError as e:
            return str(e)
        r = min(m, CHECK_ROWS)
        ref = a[:r].astype(np.float64) @ self.wt.T.astype(np.float64)
        if self.bias is not None:
            ref = ref + self.bias.astype(np.float64)
        from ..codegen.host_library import AFTER_RESIDUAL
        act, late = self.s["act"], self.s["act"] & AFTER_RESIDUAL
        if res is not None and late:
            ref = ref + res[:r].astype(np.float64)
        ref = _activation(act, ref)
        if res is not None and not late:
            ref = ref + res[:r].astype(np.float64)
        got = c[:r].astype(np.float64)
        if not np.isfinite(got).all():
            return "non-finite results"
        e = float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-30))
        tol = TOLERANCE[self.s.get("out_dtype", "float32")]
        return None if e <= tol else f"max relative error {e:.1e} above {tol:.0e}"

    @staticmethod
    def _rows(rng, m: int, n: int, dt) -> np.ndarray:
        return rng.standard_normal((m, n), dtype=np.float32).astype(dt)

    def time(self, m: int, paths: list[str], rounds: int, warmup: int, rng) -> dict[str, list[float]]:
        """Each path's ns per call, one sample per round (the same round of every path adjacent)."""
        a = self._rows(rng, m, self.s["k"], self.dt)
        c = np.zeros((m, self.s["n"]), self.out_dt)
        reps = {}
        for p in paths:
            est = self._run(max(1, warmup), m, p, a, c)
            reps[p] = max(1, min(10000, int(SAMPLE_NS / max(est, 1.0))))
        samples: dict[str, list[float]] = {p: [] for p in paths}
        for r in range(rounds):
            order = paths[r % len(paths):] + paths[:r % len(paths)]
            for p in order:
                samples[p].append(self._run(reps[p], m, p, a, c))
        return samples


def run_job(job: dict, emit) -> None:
    from ..extern import onednn
    lib = onednn.load_standalone(cache_dir=job.get("cache_dir"))
    paths = onednn.GEMM_PATHS
    for spec in job["sites"]:
        out = {"id": spec["id"], "times": {}, "rejected": {}, "pruned": {}, "skipped": False}
        if time.time() > job.get("deadline", math.inf):
            out["skipped"] = True
            emit(out)
            continue
        rng = np.random.default_rng(spec["id"])
        site = _Site(lib, spec["site"], paths, rng)
        try:
            # each path's points where it runs as itself
            at = {p: [m for m in spec["points"] if site.runs_as_itself(p, m)] for p in spec["paths"]}
            cands = []
            for p in spec["paths"]:
                # checked at the lowest and highest M where it runs as itself
                why = ("the small-M kernel does not take this weight or activation" if not at[p] else
                       site.check(at[p][0], p, rng) or site.check(at[p][-1], p, rng))
                if why:
                    out["rejected"][p] = why
                else:
                    cands.append(p)
            for p in cands:
                if len(at[p]) < len(spec["points"]):
                    out["pruned"][p] = [m for m in spec["points"] if m not in at[p]]
            for m in spec["points"]:
                here = [p for p in cands if m in at[p]]
                if len(here) < 2:
                    continue
                for p, t in site.time(m, here, job["rounds"], job.get("warmup", 3), rng).items():
                    out["times"].setdefault(p, {})[str(m)] = t
        finally:
            site.close()
        emit(out)


def main() -> int:
    job = json.load(sys.stdin)

    def emit(out):
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()

    run_job(job, emit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
