"""What the host C of a CUDA-target model adds to the shared entry and model instance (host.py):
inputs and outputs copied to and from the GPU where they are not there already, the constants
uploaded at braze_create, the call ended on the model's stream, a launch stub per kernel and
braze_cuda_rt.h (``CudaHost``, registered in host.HOSTS).

The kernels themselves are ``NativeSource.cuda_source`` (codegen/cuda_kernel.py), compiled by
NVRTC at build time; ``cuda_blob`` turns that binary into the C that the host source starts with.
"""

from __future__ import annotations

from .c_expr import int_expr, nbytes_c
from .c_kernel import kernel_signature, sym_cname
from .cuda_kernel import cuda_source, launch_total, per_block

LIB_KERNELS = ("bz_gemm", "bz_conv2d", "bz_epilogue", "bz_im2col", "bz_scale_epilogue")  # braze_cuda_lib.cuh, in BZC_* order


def _stub(k, index: int) -> str:
    params = ", ".join(f"{'int64_t' if t == 'int64_t' else 'void *'} {n}" for t, n in kernel_signature(k)) or "void"
    args = ", ".join(f"&{n}" for _, n in kernel_signature(k))
    total = int_expr(launch_total(k), sym_cname)
    return (f"static int {k.name}({params}) {{\n"
            f"    void *args[] = {{{args or 'NULL'}}};\n"
            f"    return bzc_launch({index}, (int64_t)({total}), {int(per_block(k))}, args);\n}}\n")


def _check_supported(module) -> None:
    """What the CUDA target cannot run yet: sizes read from input values (the inputs are in device
    memory); braze_cuda_rt.h's GEMM and convolution take float32 only (no BRAZE_TYPES yet), and it has
    no convolution gradients, no scatter-add, no fused attention backward and no op that decides a
    size (braze_scatter.h, braze_attention.h and braze_select.h are CPU code)."""
    from ..errors import UnsupportedOpError
    from ..ir.types import DType
    from ..passes.common import top_functions
    from ..passes.node_classes import ATTENTIONS, BACKWARD_CONVS, SCATTERS, SELECTS
    if module.value_symbols:  # the entry would read them from device memory
        (fn, param, _), name = next(iter(sorted(module.value_symbols.items())))
        raise UnsupportedOpError(f"the CUDA target cannot read sizes from input values yet (%{param} of @{fn} "
                                 f"gives {name})", hint="make the shape operand a constant, or compile for the CPU")
    for f in top_functions(module):
        for n in f.nodes:
            if n.op == "fused" and n.attrs.get("kind") in ("scatter", "attention", "select"):
                cpu_only = next(m.op for m in module.functions[n.attrs["callee"]].nodes
                                if m.op in SCATTERS + ATTENTIONS + SELECTS)
                raise UnsupportedOpError(f"the CUDA target has no {cpu_only} yet (@{n.attrs['callee']})",
                                         where=str(n.loc) if n.loc else None,
                                         hint="compile the graph for the CPU")
            if n.op == "fused" and n.attrs.get("kind") in ("gemm", "conv"):
                grads = sorted({m.op for m in module.functions[n.attrs["callee"]].nodes} & set(BACKWARD_CONVS))
                if grads:
                    raise UnsupportedOpError(f"the CUDA target has no {grads[0]} yet (@{n.attrs['callee']})",
                                             where=str(n.loc) if n.loc else None,
                                             hint="compile the training graph for the CPU")
                odd = {v.dtype.name for v in (*n.inputs, *n.outputs) if v.dtype != DType.float32}
                if odd:
                    raise UnsupportedOpError(
                        f"the CUDA target runs float32 GEMMs and convolutions only; @{n.attrs['callee']} "
                        f"computes in {', '.join(sorted(odd))}", where=str(n.loc) if n.loc else None,
                        hint="compile a float32 model (model.float()), or compile for the CPU")


class CudaHost:
    kind = "cuda"
    timers = False  # a GPU's kernels would need CUDA events
    picks_kernels = False  # braze_cuda_rt.h has one GEMM and one convolution, no live weight sites
    checks_data = False  # a gathered index is clamped into its axis, a divisor 0 gives 0, unchecked (cuda_kernel)
    copy = "bzc_copy"  # a result that is a parameter, a constant or repeated: copied at the end
    links_helper = False  # its library calls are braze_cuda_rt.h's

    def __init__(self, target):
        self.isa = target

    def input_ptr(self, i: int) -> str:
        return f"in_{i}"

    def output_lines(self, k: int, r) -> list[str]:
        return [f"out_{k} = bzc_output({k}, out_{k}, {nbytes_c(r)});"]  # computed on the GPU, copied at the end

    def begin(self, f) -> list[str]:
        return ["if (bzc_begin(err, errlen)) return BRAZE_ERR_INTERNAL;",
                *(f"char *in_{i} = bzc_input({i}, inputs[{i}].data, {nbytes_c(p)});" for i, p in enumerate(f.params))]

    def prepare(self, prepares) -> list[str]:
        return []

    def end(self) -> list[str]:
        return ["if (bzc_finish(err, errlen)) return BRAZE_ERR_INTERNAL;"]

    def entry(self, symbol: str, params: str, args: str, body: str) -> str:
        # the GPU runs the work: no CPU team
        return (f"static int32_t {symbol}_body({params}) {{\n    {body}\n}}\n"
                f"BRAZE_EXPORT int32_t {symbol}({params}) {{ return {symbol}_body({args}); }}\n")

    def instance(self, n_const: int, const_bytes, library: bool) -> dict:
        """braze_create uploads each constant (``const_bytes``: their sizes) to the GPU, and
        braze_destroy frees them there."""
        sizes = ", ".join(map(str, const_bytes)) or "0"
        return {"head": f"static const size_t bzc_const_bytes[{max(n_const, 1)}] = {{{sizes}}};\n",
                "packs": True, "runtime": "bzc_init", "fails": True, "fail_rc": "BRAZE_ERR_ALLOC",
                "take": (f"    for (int i = 0; i < {n_const}; i++)\n"
                         "        if (!(M->c[i] = bzc_upload(constants[i], bzc_const_bytes[i], err, errlen))) goto fail;\n"),
                "frees": f"    for (int i = 0; i < {n_const}; i++) bzc_free(M->c[i]);\n"}

    def source(self, gen, model: str, bodies: list[str]) -> tuple[str, int, str]:
        """(host C, one translation unit, the .cu) of the model."""
        host, cu = _generate(gen, model, bodies)
        return host, 1, cu


def _generate(gen, model: str, bodies) -> tuple[str, str]:
    """(host C, .cu) of a CUDA-target model, from HostGen ``gen``, its instance's C ``model``
    (host._model_c) and its entries' C ``bodies``."""
    _check_supported(gen.module)
    from .host_checks import C_DTYPE_NAMES
    kernels = list(gen.kernels.values())
    names = [*LIB_KERNELS, *(k.name for k in kernels)]
    target = gen.isa.name
    quoted = ", ".join(f'"{n}"' for n in names)
    head = (f"#define BZ_VB 0\n#include \"braze_vec.h\"\n#include \"braze_abi.h\"\n"
            f"#define BZC_TARGET \"{target}\"\n#define BZC_ARCH \"{target.split(':')[1]}\"\n"
            f"#define BZC_N_KERNELS {len(names)}\n"
            f"static const char *const bzc_names[{len(names)}] = {{{quoted}}};\n"
            "#include \"braze_cuda_rt.h\"\n"
            "BRAZE_EXPORT const char *braze_target(void) { return BZC_TARGET; }\n"
            "/* the GEMM library the first call found: a cuBLAS path, or why bz_gemm runs */\n"
            "BRAZE_EXPORT const char *braze_cuda_blas(void) { return bzc_blas.lib; }\n")
    stubs = [_stub(k, len(LIB_KERNELS) + i) for i, k in enumerate(kernels)]
    return "\n".join([head, C_DTYPE_NAMES, *stubs, model, *bodies]), cuda_source(kernels)


def cuda_blob(binary) -> str:
    """C defining the kernels' cubin and PTX (``bzc_cubin``, ``bzc_ptx``) and the NVRTC version,
    put before the host source."""
    def arr(data: bytes) -> str:
        return ",".join(str(b) for b in data)
    return (f"#define BZC_NVRTC \"{binary.nvrtc}\"\n"
            f"static const unsigned char __attribute__((aligned(64))) bzc_cubin[{len(binary.cubin) or 1}] = "
            f"{{{arr(binary.cubin) or '0'}}};\n"
            f"static const unsigned char bzc_ptx[{len(binary.ptx) + 1}] = {{{arr(binary.ptx + bytes(1))}}};\n")


__all__ = ["LIB_KERNELS", "CudaHost", "cuda_blob"]
