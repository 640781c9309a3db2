"""oneDNN's convolutions on braze's NHWC activations against a blocked layout, layer by layer.

    python -m benchmarks.conv_layouts [--shape 1x224x224] [--rounds 11] [--threads 2]
                                      [--out benchmarks/results] [--stem conv_layouts]

braze hands oneDNN NHWC activations (the layout pass, docs/gemm.md) and lets it choose the weights'
layout. oneDNN has other kernels for a blocked layout: ``nChw8c`` (AVX2; channels in blocks of 8,
innermost) or ``nChw16c`` (AVX-512). This builds one small C library against the oneDNN braze links
(braze.extern.onednn), creates each of ResNet-50's distinct convolutions at ``--shape`` (batch x
height x width) both ways, float32, inference, weights in the layout the primitive asks for, and
times them in interleaved rounds (each sample about 20 ms of calls of one primitive, the two
layouts back to back, the order alternating). Per layer: the median ms of each, the implementation
oneDNN picked, and the median over rounds of blocked / NHWC (below 1: the blocked layout is faster).
A convolution whose input channels are not a whole number of blocks (the 3-channel stem) reads the
plain NCHW image in the blocked network. The reorders a blocked network would need are not timed.

Writes ``STEM.json`` and ``STEM.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import ctypes as C
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

_SOURCE = r"""
#include <dnnl.h>
#include <stdlib.h>
#include <time.h>
typedef struct { dnnl_primitive_t p; dnnl_memory_t m[4]; const char *impl; } conv_t;
static dnnl_engine_t eng;
static dnnl_stream_t st;
static int fill(dnnl_memory_t m, float scale) {
    float *p;
    if (dnnl_memory_get_data_handle(m, (void **)&p)) return 1;
    const_dnnl_memory_desc_t md;
    dnnl_memory_get_memory_desc(m, &md);
    size_t n = dnnl_memory_desc_get_size(md) / sizeof(float);
    for (size_t i = 0; i < n; i++) p[i] = (float)(i % 13) * scale;
    return 0;
}
/* NULL if oneDNN has no such primitive; block: the activations' channel block (0: NHWC) */
conv_t *bz_conv(int n, int ic, int oc, int h, int w, int k, int s, int block) {
    dnnl_format_tag_t tag = block == 16 ? dnnl_nChw16c : block == 8 ? dnnl_nChw8c : dnnl_nhwc;
    /* a blocked network's first convolution reads the plain NCHW image (blocked, 3 channels take
     * oneDNN's reference kernel) */
    dnnl_format_tag_t src_tag = block && ic % block ? dnnl_nchw : tag;
    if (!eng && (dnnl_engine_create(&eng, dnnl_cpu, 0) || dnnl_stream_create(&st, eng, dnnl_stream_default_flags)))
        return NULL;
    int p = k / 2, oh = (h + 2 * p - k) / s + 1, ow = (w + 2 * p - k) / s + 1;
    dnnl_memory_desc_t x, wt, y, b;
    dnnl_dims_t xd = {n, ic, h, w}, wd = {oc, ic, k, k}, yd = {n, oc, oh, ow}, bd = {oc};
    dnnl_dims_t str = {s, s}, dil = {0, 0}, pad = {p, p};
    if (dnnl_memory_desc_create_with_tag(&x, 4, xd, dnnl_f32, src_tag) ||
        dnnl_memory_desc_create_with_tag(&y, 4, yd, dnnl_f32, tag) ||
        dnnl_memory_desc_create_with_tag(&wt, 4, wd, dnnl_f32, dnnl_format_tag_any) ||
        dnnl_memory_desc_create_with_tag(&b, 1, bd, dnnl_f32, dnnl_a))
        return NULL;
    dnnl_primitive_desc_t pd;
    if (dnnl_convolution_forward_primitive_desc_create(&pd, eng, dnnl_forward_inference, dnnl_convolution_direct,
                                                       x, wt, b, y, str, dil, pad, pad, NULL))
        return NULL;
    conv_t *c = calloc(1, sizeof *c);
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &c->impl);
    dnnl_query_t q[4] = {dnnl_query_src_md, dnnl_query_weights_md, dnnl_query_weights_md, dnnl_query_dst_md};
    int idx[4] = {0, 0, 1, 0};
    for (int i = 0; i < 4; i++)
        if (dnnl_memory_create(&c->m[i], dnnl_primitive_desc_query_md(pd, q[i], idx[i]), eng, DNNL_MEMORY_ALLOCATE) ||
            fill(c->m[i], i == 0 ? 0.1f : 0.01f))
            return NULL;
    return dnnl_primitive_create(&c->p, pd) ? NULL : c;
}
const char *bz_impl(conv_t *c) { return c->impl; }
/* seconds per call over reps calls */
double bz_time(conv_t *c, int reps) {
    dnnl_exec_arg_t a[4] = {{DNNL_ARG_SRC, c->m[0]}, {DNNL_ARG_WEIGHTS, c->m[1]}, {DNNL_ARG_BIAS, c->m[2]},
                            {DNNL_ARG_DST, c->m[3]}};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < reps; i++)
        if (dnnl_primitive_execute(c->p, st, 4, a)) return -1;
    dnnl_stream_wait(st);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return ((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9) / reps;
}
"""


def resnet50_convs(h: int, w: int) -> list[tuple]:
    """ResNet-50's distinct convolutions at an h x w image: (ic, oc, h, w, kernel, stride, count)."""
    out: dict[tuple, int] = {}

    def add(ic, oc, hh, ww, k, s):
        out[(ic, oc, hh, ww, k, s)] = out.get((ic, oc, hh, ww, k, s), 0) + 1
    add(3, 64, h, w, 7, 2)
    h, w = (h + 1) // 2, (w + 1) // 2  # the stem's stride
    h, w = (h + 1) // 2, (w + 1) // 2  # max pool
    ic = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for b in range(blocks):
            s = stride if b == 0 else 1
            add(ic, width, h, w, 1, 1)
            add(width, width, h, w, 3, s)
            oh, ow = (h - 1) // s + 1, (w - 1) // s + 1
            add(width, width * 4, oh, ow, 1, 1)
            if b == 0:
                add(ic, width * 4, h, w, 1, s)
            h, w, ic = oh, ow, width * 4
    return [(*k, n) for k, n in out.items()]


def _library(tmp: Path):
    from braze.extern import onednn
    src = tmp / "conv_layouts.c"
    src.write_text(_SOURCE)
    so = tmp / "libconv_layouts.so"
    cmd = ["gcc", "-O2", "-shared", "-fPIC", str(src), "-o", str(so),
           *(f"-I{d}" for d in onednn.include_dirs()), *(f"-L{d}" for d in onednn.library_dirs()),
           *(f"-Wl,-rpath,{d}" for d in onednn.library_dirs()), "-ldnnl"]
    subprocess.run(cmd, check=True)
    lib = C.CDLL(str(so))
    lib.bz_conv.restype = C.c_void_p
    lib.bz_conv.argtypes = [C.c_int] * 8
    lib.bz_impl.restype = C.c_char_p
    lib.bz_impl.argtypes = [C.c_void_p]
    lib.bz_time.restype = C.c_double
    lib.bz_time.argtypes = [C.c_void_p, C.c_int]
    return lib


def measure(lib, n: int, h: int, w: int, blocked: int, rounds: int) -> list[dict]:
    rows = []
    for ic, oc, hh, ww, k, s, count in resnet50_convs(h, w):
        convs = {"nhwc": lib.bz_conv(n, ic, oc, hh, ww, k, s, 0), "blocked": lib.bz_conv(n, ic, oc, hh, ww, k, s, blocked)}
        if not all(convs.values()):
            continue
        est = max(lib.bz_time(c, 2) for c in convs.values())
        reps = max(1, int(0.02 / max(est, 1e-6)))
        ts = {name: [] for name in convs}
        for r in range(rounds):
            for name in (("nhwc", "blocked") if r % 2 == 0 else ("blocked", "nhwc")):
                ts[name].append(lib.bz_time(convs[name], reps))
        oh, ow = (hh + 2 * (k // 2) - k) // s + 1, (ww + 2 * (k // 2) - k) // s + 1
        rows.append({"layer": f"{k}x{k}/s{s} {ic}->{oc} @{oh}x{ow}", "count": count,
                     "nhwc_ms": statistics.median(ts["nhwc"]) * 1e3, "blocked_ms": statistics.median(ts["blocked"]) * 1e3,
                     "nhwc_impl": lib.bz_impl(convs["nhwc"]).decode(), "blocked_impl": lib.bz_impl(convs["blocked"]).decode(),
                     "ratio": statistics.median(b / a for a, b in zip(ts["nhwc"], ts["blocked"])),
                     "gflop": 2.0 * n * oh * ow * oc * ic * k * k / 1e9})
        print(f"  {rows[-1]['layer']}: blocked / nhwc {rows[-1]['ratio']:.3f}", flush=True)
    return rows


def to_markdown(doc: dict) -> str:
    m = doc["meta"]
    mach = m["machine"]
    tot = {k: sum(r[f"{k}_ms"] * r["count"] for r in doc["rows"]) for k in ("nhwc", "blocked")}
    best = sum(min(r["nhwc_ms"], r["blocked_ms"]) * r["count"] for r in doc["rows"])
    head = (f"Run {m['date']} on {mach['cpu']} ({mach['cores']} cores, ISA {' '.join(mach['isa'])}), {m['threads']} "
            f"threads, oneDNN {m['onednn']}, ResNet-50's convolutions at {m['shape']}, the blocked layout "
            f"{m['blocked']}. {m['rounds']} interleaved rounds per layer, each sample about 20 ms of calls; ms are "
            f"medians, `blocked / nhwc` the median over rounds of each round's ratio (below 1: blocked is faster). "
            f"Every layer once per count: NHWC {tot['nhwc']:.2f} ms, blocked {tot['blocked']:.2f} ms "
            f"({tot['blocked'] / tot['nhwc']:.3f}x); the faster of the two per layer {best:.2f} ms "
            f"({best / tot['nhwc']:.3f}x), reorders between them not included.")
    from .run import _md_table
    body = [[r["layer"], r["count"], f"{r['nhwc_ms']:.3f}", f"{r['blocked_ms']:.3f}", f"{r['ratio']:.3f}x",
             r["nhwc_impl"], r["blocked_impl"]] for r in doc["rows"]]
    return "\n".join([head, "", _md_table(["layer", "count", "nhwc ms", "blocked ms", "blocked / nhwc", "nhwc kernel",
                                          "blocked kernel"], body)]) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="1x224x224", help="batch x height x width")
    ap.add_argument("--rounds", type=int, default=11, help="interleaved rounds per layer")
    ap.add_argument("--threads", type=int, default=2, help="oneDNN's threads (OMP_NUM_THREADS)")
    ap.add_argument("--out", default="benchmarks/results", help="directory for STEM.json and STEM.md")
    ap.add_argument("--stem", default="conv_layouts", help="the results' file name, less .json / .md")
    a = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)  # before libdnnl's OpenMP starts
    from braze.codegen.isa import host_isa

    from .run import _machine, write_results
    n, h, w = (int(x) for x in a.shape.split("x"))
    blocked = 16 if host_isa().name == "avx512" else 8
    name = f"nChw{blocked}c"
    with tempfile.TemporaryDirectory() as tmp:
        lib = _library(Path(tmp))
        rows = measure(lib, n, h, w, blocked, a.rounds)
    from importlib import metadata
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "threads": a.threads, "shape": a.shape, "blocked": name,
            "rounds": a.rounds, "onednn": metadata.version("onednn-cpu-gomp"), "machine": _machine(a.threads)}
    print(write_results(a.out, a.stem, {"meta": meta, "rows": rows}, to_markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
