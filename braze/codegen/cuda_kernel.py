"""CUDA C for loop-IR kernels scheduled by ``GPU_STAGES`` (braze/schedule/gpu.py).

    cuda_source(kernels) -> str       # one .cu: prelude, braze_cuda_lib.cuh, every kernel
    kernel_to_cuda(kernel) -> str     # one `extern "C" __global__ void <name>(...)`
    launch_total(kernel) -> IntLike   # the grid loops' iteration count (1: one thread)

A kernel's parameters are its C ones (c_kernel.kernel_signature): a pointer per buffer, then
an ``int64_t`` per symbol, so one compile serves every shape. Its ``grid`` loops become one
grid-stride loop over their flattened iterations; the launch (braze_cuda_rt.h) sizes the grid
from ``launch_total`` at run time. The scalar code is c_kernel's (no SIMD width), with the
math of braze_vmath.h compiled as device code, so a GPU value rounds as the CPU's scalar one.
"""

from __future__ import annotations

from ..ir import sym as S
from ..ir.loop import For, Kernel
from ..schedule.gpu import grid_loops
from .c_kernel import _Gen, ctype, kernel_signature, require_flat

# NVRTC compiles C++: `restrict` is `__restrict__`; a failed row-buffer allocation (device heap)
# stops the kernel with a trap, which the host reports as a launch error
PRELUDE = """#define BZ_VB 0
#define restrict __restrict__
#define __atomic_fetch_or(p, v, order) (*(p) |= (v))
#include "braze_vec.h"
#include "braze_cuda_lib.cuh"
"""


_REDUCE_CODE = {"sum": 0, "prod": 1, "max": 2, "min": 3}  # bz_block_reduce's op (braze_cuda_lib.cuh)


class _CudaGen(_Gen):
    coop = False  # in a block's row, outside its thread loops: every thread of the block runs this code

    def axis_index(self, i: str, n: str) -> str:
        # clamped, unchecked: a failure word would trap, which ends the CUDA context torch shares too
        return f"bz_axis_clamp({i}, {n})"

    def divisor(self, b: str, t: str) -> str:
        return b  # unchecked, for the same reason: an integer divided by 0 gives 0

    def for_(self, f: For):
        if f.kind == "thread":
            return self._thread_loop(f)
        if f.kind not in ("grid", "block"):
            return super().for_(f)
        chain = [f]
        while len(chain[-1].body) == 1 and isinstance(chain[-1].body[0], For) and \
                chain[-1].body[0].kind == f.kind:
            chain.append(chain[-1].body[0])
        exts = [self.tmp("n") for _ in chain]
        for n, g in zip(exts, chain):
            self.line(f"const int64_t {n} = {self.ic(g.extent)};")
        g, t = self.tmp("gidx"), self.tmp("grem")  # not t<n> or r<n>: the names of Lets
        if f.kind == "grid":  # one iteration per thread
            self.line(f"for (int64_t {g} = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; {g} < "
                      f"{' * '.join(exts)}; {g} += (int64_t)gridDim.x * blockDim.x) {{")
        else:  # one iteration (row) per block: the loop is uniform over the block, so it may sync
            self.line(f"for (int64_t {g} = blockIdx.x; {g} < {' * '.join(exts)}; {g} += gridDim.x) {{")
        self.ind += 1
        self.line(f"int64_t {t} = {g};")
        # the innermost varies fastest; the outermost is what is left (g < the product of the extents)
        for n, loop in reversed(list(zip(exts[1:], chain[1:]))):
            self.line(f"const int64_t {loop.var.name} = {t} % {n}; {t} /= {n};")
        self.line(f"const int64_t {chain[0].var.name} = {t};")
        self.push(barrier=chain[-1].var)
        self.coop = f.kind == "block"
        self.body(chain[-1].body)
        self.coop = False
        self.pop()
        self.ind -= 1
        self.line("}")

    def _thread_loop(self, f: For):
        v = f.var.name
        n = self.tmp("n")
        self.line(f"const int64_t {n} = {self.ic(f.extent)};")
        self.line(f"for (int64_t {v} = threadIdx.x; {v} < {n}; {v} += blockDim.x) {{")
        self.ind += 1
        self.push(barrier=f.var)
        saved, self.coop = self.coop, False
        self.body(f.body)
        self.coop = saved
        self.pop()
        self.ind -= 1
        self.line("}")

    def sreduce(self, e):
        if not self.coop or e.op not in _REDUCE_CODE:
            return super().sreduce(e)  # argmax/argmin: every thread computes the whole (uniform) result
        # a strided partial per thread over the outer reduction loop, then the block's tree
        dt = e.dtype
        wide = e.op == "sum" and dt.name == "float32"
        t = "double" if wide else ctype(dt)
        acc = self.tmp("acc")
        self.line(f"{t} {acc} = {self._init(e.op, dt)};")
        (v0, ext0), rest = e.loops[0], e.loops[1:]
        n = self.tmp("n")
        self.line(f"const int64_t {n} = {self.ic(ext0)};")
        self.line(f"for (int64_t {v0.name} = threadIdx.x; {v0.name} < {n}; {v0.name} += blockDim.x) {{")
        self.ind += 1
        self.push()
        saved, self.coop = self.coop, False
        self._open_loops(rest)
        self.line(self._combine(e.op, acc, self.sx(e.body), dt))
        self._close_loops(rest)
        self.coop = saved
        self.pop()
        self.ind -= 1
        self.line("}")
        self.line(f"{acc} = bz_block_reduce({_REDUCE_CODE[e.op]}, {acc});")
        return self._narrow(acc, wide)

    def store(self, s):
        super().store(s)
        if self.coop:  # a row-level store: the block computed its value together, one thread writes it
            line = self.lines[-1]
            self.lines[-1] = line[:len(line) - len(line.lstrip())] + "if (threadIdx.x == 0) " + line.lstrip()


def per_block(kernel: Kernel) -> bool:
    """Whether the kernel's grid iterations are blocks (rows) rather than threads."""
    loops = grid_loops(kernel)
    return bool(loops) and loops[0].kind == "block"


def launch_total(kernel: Kernel):
    """How many grid iterations the kernel has (an IntLike of its symbols); 1 without grid loops."""
    return S.prod(f.extent for f in grid_loops(kernel))


def kernel_to_cuda(kernel: Kernel) -> str:
    require_flat(kernel, "the GPU kernel stages (GPU_STAGES) before kernel_to_cuda")
    g = _CudaGen(kernel, 0)
    single = not grid_loops(kernel)
    if single:  # one thread runs it all (see schedule/gpu.py)
        g.line("if (blockIdx.x != 0 || threadIdx.x != 0) return;")
    g.body(kernel.body)
    g.line("if (bz_fail) __trap();")
    params = ", ".join(f"{t} {n}" for t, n in kernel_signature(kernel)) or "void"
    return (f'extern "C" __global__ void {kernel.name}({params}) {{\n'
            "    int bz_fail = 0; /* 1: a row buffer could not be allocated */\n" + "\n".join(g.lines) + "\n}\n")


def cuda_source(kernels) -> str:
    """The model's one .cu: every kernel after the prelude and the GEMM/conv library."""
    return PRELUDE + "\n" + "\n".join(kernel_to_cuda(k) for k in kernels)


__all__ = ["PRELUDE", "cuda_source", "kernel_to_cuda", "launch_total", "per_block"]
