"""The host code: one C source per model (one or several translation units: c_kernel.UNITS_C), one
exported entry per graph function.

An entry (see braze_abi.h) checks its inputs and binds the symbols
(host_checks.py), allocates the outputs through the caller's ``alloc``, takes
intermediates from a per-thread arena laid out by the memory plan, and calls
the generated kernels and the oneDNN helpers in order. ``braze_create`` makes
one model instance: it takes the constants, prepacks the GEMM and convolution
weights once and holds the thread count. The library has no state of its own
beyond per-thread scratch, so two models that share one library (same
architecture, other weights) never see each other's weights.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from ..errors import BrazeError, UnsupportedOpError
from ..ir import loop as L
from ..ir import sym as S
from ..ir.constant import ConstantRef
from ..ir.graph import Function, Module, Node
from ..ir.types import DType
from ..ops.elementwise import DIVIDING_OPS
from ..passes.common import top_functions
from ..passes.memory import byte_size, donated_results, in_place_inputs
from ..passes.node_classes import BACKWARD_CONVS, SCATTERS, SELECTS, before_views
from .c_expr import c_sym_name, int_expr, nbytes_c
from .c_kernel import KERNEL_BAD_INDEX, KERNEL_DIV_ZERO, KERNEL_NO_MEMORY
from .c_types import HALF_SFX, UNSIGNED, c_literal, ctype
from .cpu_host import CpuHost
from .cuda_host import CudaHost
from .host_checks import DTYPE_CODE, fact_checks, fail_c, validation_c
from .host_library import DT_CODES, LibraryCalls

# each target kind's host part (what its entries and instance add to the shared ones): a new
# target adds its class here
HOSTS = {"cpu": CpuHost, "cuda": CudaHost}


@dataclass
class Entry:
    symbol: str
    function: Function


@dataclass
class NativeSource:
    source: str
    entries: list[Entry]
    constants: list[str]  # module constant names, in braze_create order
    kernels: dict[str, str] = field(default_factory=dict)  # kernel name -> loop IR text (for dumps)
    uses_library: bool = False  # calls oneDNN: link the helper (braze/extern) into the library
    isa: str = ""  # what the C was generated for, with ``profile`` (a dump records both)
    profile: bool = False
    units: int = 1  # the source compiles as this many translation units at most (c_kernel.UNITS_C)
    cuda_source: str = ""  # a CUDA target's kernels (codegen/cuda_kernel.py), compiled by NVRTC at build
    cuda_binary: object = None  # their nvrtc.CudaBinary, once built


class HostGen:
    """C for a module after the graph pipeline (fused, offloaded, memory assigned) and its
    kernels (callee name -> scheduled loop-IR Kernel). It translates; it decides nothing. The
    entries' checks, symbol binding, arena offsets and call order are every target's; what a
    target changes comes from its part, ``HOSTS[target.kind]``."""

    def __init__(self, module: Module, kernels: dict, isa, profile: bool = False, weight_copies: bool = True):
        self.module = module
        self.weight_copies = weight_copies  # GEMM sites for input weights (Options.weight_copies)
        self.kernels = kernels
        self.isa = isa
        self.host = HOSTS[isa.kind](isa)
        self.profile = profile and self.host.timers
        self.profile_labels: list[str] = []
        self.const_index: dict[str, int] = {}
        self.init_lines: list[str] = []
        self.packed_b: list[str] = []
        self.packed_conv: list[str] = []
        self.live_sites: list[str] = []
        self.uses_library = False
        # header (braze_scatter.h, braze_select.h) -> its functions this model calls: name -> (the macro
        # that defines it, the macro's arguments)
        self.helpers: dict[str, dict[str, tuple[str, tuple]]] = {}
        self.attention = False  # calls braze_attention.h

    # --- constants (fields of the model instance) ----------------------------------------
    def const(self, name: str) -> str:
        if name not in self.const_index:
            self.const_index[name] = len(self.const_index)
        return f"M->c[{self.const_index[name]}]"

    def pack_b(self, wname: str, n, k, transposed: int, dt: int = 0) -> str:
        """A packed weight handle, created once per instance in braze_create; dt: the dtype code it is
        packed in (the constant's own dtype is the module's)."""
        if S.is_symbolic(n) or S.is_symbolic(k):
            raise BrazeError(f"weight @{wname} has a symbolic shape [{n}, {k}]; constant weights must be static")
        h = f"M->pb[{len(self.packed_b)}]"
        self.packed_b.append(h)
        # _const: the constant outlives the handle unchanged, so a kernel may read it (braze_dnnl.h)
        call = (f"braze_pack_b_const({self.const(wname)}, {self._const_dt(wname)}, {dt}, {n}, {k}, {transposed}, "
                "err, errlen)")
        self.init_lines.append(f"{h} = {call}; if (!{h}) goto fail;")
        return h

    def live_site(self, n, k, transposed: int, dt: int) -> str:
        """A GEMM site whose weight, an input, is read at each call (braze_dnnl_live.c: it keeps
        packed copies while the kernel sees the weight's pages unwritten). Made in braze_create."""
        h = f"M->lb[{len(self.live_sites)}]"
        self.live_sites.append(h)
        self.init_lines.append(f"{h} = braze_live_b_new({n}, {k}, {transposed}, {dt}, err, errlen); "
                               f"if (!{h}) goto fail;")
        return h

    def _const_dt(self, wname: str) -> int:
        c = self.module.constants[wname]
        dt = c.type.dtype if isinstance(c, ConstantRef) else DType.from_numpy(c.dtype)
        return DT_CODES[dt]

    def _const_nbytes(self, name: str) -> int:
        c = self.module.constants[name]
        return int(S.mul(c.type.numel(), c.type.dtype.itemsize)) if isinstance(c, ConstantRef) else int(c.nbytes)

    def pack_conv(self, wname: str | None, w_shape, groups, stride, pad, dil, layout: int = 0, dt: int = 0) -> str:
        """A conv handle made once per instance: the constant ``wname`` prepacked, or (None) the
        geometry alone, for weights read at each call. pad: (top, left, bottom, right)."""
        h = f"M->pc[{len(self.packed_conv)}]"
        self.packed_conv.append(h)
        oc, icg, kh, kw = w_shape
        if any(S.is_symbolic(d) for d in w_shape):
            raise UnsupportedOpError(f"a conv weight has a symbolic shape {list(w_shape)}; conv weights must be "
                                     "static", hint="give the kernel a fixed size (oneDNN makes a convolution per "
                                                    "kernel size)")
        geometry = (f"{oc}, {icg * groups}, {kh}, {kw}, {groups}, {stride[0]}, {stride[1]}, {pad[0]}, {pad[1]}, "
                    f"{pad[2]}, {pad[3]}, {dil[0]}, {dil[1]}, {layout}, err, errlen")
        w_dt = self._const_dt(wname) if wname is not None else dt
        if wname is None:
            call = f"braze_conv_geometry_typed({dt}, {geometry})" if dt else f"braze_conv_geometry({geometry})"
        elif dt or w_dt:
            call = f"braze_pack_conv_typed({self.const(wname)}, {w_dt}, {dt}, {geometry})"
        else:
            call = f"braze_pack_conv_weights((const float *){self.const(wname)}, {geometry})"

        self.init_lines.append(f"{h} = {call}; if (!{h}) goto fail;")
        return h

    # --- the translation unit -----------------------------------------------------------
    def generate(self) -> NativeSource:
        entries = []
        bodies = []
        for f in top_functions(self.module):
            sym = f"braze_{f.name}"
            bodies.append(_EntryWriter(self, f).write(sym))
            entries.append(Entry(sym, f))
        names = sorted(self.const_index, key=self.const_index.get)
        part = self.host.instance(len(names), [self._const_nbytes(n) for n in names], self.uses_library)
        model = _model_c(len(names), self.packed_b, self.packed_conv, self.init_lines, part, self.live_sites)
        source, units, gpu_source = self.host.source(self, model, bodies)
        return NativeSource(source, entries, names, {k.name: str(k) for k in self.kernels.values()},
                            self.uses_library and self.host.links_helper, self.isa.name, self.profile, units=units,
                            cuda_source=gpu_source)


def _model_c(n_const: int, packed_b: list[str], packed_conv: list[str], init_lines: list[str], part: dict,
             live_sites: list[str] = ()) -> str:
    """The model instance: its struct, braze_create (constants, prepacked weights, threads)
    and braze_destroy. ``part``: what the target adds (its host part's ``instance``): C before
    the struct (``head``), whether it holds packed weights (``packs``; a CPU model without
    library calls has no oneDNN at all, a faster C compile), its runtime's start (``runtime``),
    how constants are taken (``take``) and freed (``frees``), whether taking them can fail
    (``fails``) and braze_create's error then (``fail_rc``)."""
    init = "".join(f"    {ln}\n" for ln in init_lines)
    fields = (f"    braze_packed_b *pb[{max(len(packed_b), 1)}];\n"
              f"    braze_packed_conv *pc[{max(len(packed_conv), 1)}];\n") if part["packs"] else ""
    fields += f"    braze_live_b *lb[{len(live_sites)}];\n" if live_sites else ""
    frees = "".join(f"    braze_free_packed_b({h});\n" for h in packed_b) + \
        "".join(f"    braze_free_packed_conv({h});\n" for h in packed_conv) + \
        "".join(f"    braze_live_b_free({h});\n" for h in live_sites) + part["frees"]
    runtime = part["runtime"]
    runtime_init = f"    if ({runtime}(err, errlen)) return BRAZE_ERR_INTERNAL;\n" if runtime else ""
    take, head = part["take"], part["head"]
    fail = f"fail:\n    braze_destroy(M);\n    return {part['fail_rc']};\n" \
        if init_lines or part["fails"] else ""
    return head + f"""struct braze_instance {{
    void *c[{max(n_const, 1)}];
{fields}    int32_t threads;
    int32_t adapt; /* fewer threads while other processes take the cores (braze_team.h) */
}};
BRAZE_EXPORT void braze_set_adapt(braze_instance *M, int32_t on) {{ M->adapt = on != 0; }}
BRAZE_EXPORT void braze_destroy(braze_instance *M) {{
    if (!M) return;
{frees}    free(M);
}}
BRAZE_EXPORT int32_t braze_create(void *const *constants, int32_t n_constants, int32_t threads,
                                  braze_instance **out, char *err, int32_t errlen) {{
    *out = NULL;
    if (n_constants != {n_const})
        BRAZE_FAIL(BRAZE_ERR_INTERNAL, "braze_create: expected {n_const} constants, got %d", (int)n_constants);
{runtime_init}    braze_instance *M = (braze_instance *)calloc(1, sizeof *M);
    if (!M) BRAZE_FAIL(BRAZE_ERR_ALLOC, "braze_create: out of memory");
{take}    M->threads = threads; /* adapt stays 0 (calloc): braze_set_adapt turns it on */
{init}    *out = M;
    return BRAZE_OK;
{fail}}}
"""


class _EntryWriter(LibraryCalls):
    def __init__(self, gen: HostGen, func: Function):
        self.gen = gen
        self.func = func
        self.module = gen.module
        self.lines: list[str] = []
        self.ptr: dict[int, str] = {}
        self.input_ptrs: set[str] = set()  # the C pointers of the function's inputs
        self.live: dict[str, tuple[int, int]] = {}  # a live weight's pointer: (its index in lw_gen, bytes)
        # (C call, its symbols): the oneDNN primitives this function runs, for the target's prepare
        self.prepares: list[tuple[str, frozenset]] = []

    def emit(self, s: str) -> None:
        self.lines.append(s)

    def write(self, symbol: str) -> str:
        f = self.func
        checks, bound = validation_c(f, self.module.constraints, self.module.input_notes, self.module.value_symbols)
        self.bound = {s.name for s in bound}
        if f.name not in self.module.arena_sizes:
            raise BrazeError(f"@{f.name} has no memory plan", hint="run the assign_memory pass before generating C")
        host = self.gen.host
        for i, p in enumerate(f.params):
            self.ptr[id(p)] = host.input_ptr(i)
        self.input_ptrs = {self.ptr[id(p)] for p in f.params}
        for n in f.nodes:
            if n.op == "constant":
                self.ptr[id(n.outputs[0])] = f"((char *){self.gen.const(n.attrs['name'])})"
        # outputs first: their shapes depend on the symbols only; those whose size a node decides
        # (Module.data_symbols) are made in the arena, and allocated and copied once it has run
        decided = {k for k, r in enumerate(f.results) if self.module.decided(r.type)}
        donated = donated_results(self.module, f)  # made in the caller's input: never allocated
        for k, j in donated.items():
            self.ptr[id(f.results[k])] = host.input_ptr(j)
        out_lines = [ln for k, r in enumerate(f.results) if k not in decided | donated.keys()
                     for ln in self._alloc_output(k, r)]
        copies = []
        for k, r in enumerate(f.results):
            if k in donated:
                continue
            if id(r) in self.ptr or any(r is q for q in f.results[:k]) or k in decided:
                copies.append((k, r))  # a param, constant, repeated or decided result: copied at the end
            else:
                self.ptr[id(r)] = f"out_{k}"
        for x, r in in_place_inputs(self.module, f).items():  # made in the result it is added into
            self.ptr[x] = self.ptr[id(r)]
        for n in f.nodes:
            if n.op == "constant":
                continue
            if n.op != "fused":
                raise BrazeError(f"node '{n.op}' was not fused; the native backend runs fused groups only",
                                 where=str(n.loc) if n.loc else f"@{f.name}", hint="this is a braze bug; please report it")
            self._place(n)
            label = f"{n.attrs['kind']} @{n.attrs['callee']}"
            self.emit(f"/* {label} */")
            start = len(self.lines)
            if n.attrs["kind"] in ("gemm", "conv"):
                self._library(n)
            elif n.attrs["kind"] == "scatter":
                self._scatter(n)
            elif n.attrs["kind"] == "attention":
                self._attention(n)
            elif n.attrs["kind"] == "select":
                self._select(n)
            else:
                self._kernel(n)
            if self.gen.profile:
                self._time(start, f"@{f.name}: {label}", *_traffic(self.module, n))
        for k, r in copies:
            src = self.ptr[id(r)] if not any(r is q for q in f.results[:k]) else f"out_{[q is r for q in f.results].index(True)}"
            if k in decided:
                self.lines += self._alloc_output(k, r)
            self.emit(f"{host.copy}(out_{k}, {src}, {nbytes_c(r)});")
        # declared whether or not this function decides them
        sizes = [c_sym_name(self.module.constraints.symbol(s)) for s in sorted(self.module.data_symbols)]
        head = [*checks, *(f"int64_t {c} = 0; (void){c};" for c in sizes),
                *host.begin(f),
                *(f"char *out_{k} = NULL;" for k in range(len(f.results))),
                *out_lines,
                f"size_t arena_bytes = (size_t)({int_expr(self.module.arena_sizes[f.name])});",
                "char *arena = braze_arena(arena_bytes);",
                "if (!arena && arena_bytes) BRAZE_FAIL(BRAZE_ERR_ALLOC, \"could not allocate %zu bytes of scratch memory\", arena_bytes);",
                "(void)arena;", *host.prepare([p for p in self.prepares if not any(s.name in self.module.data_symbols
                                                                                    for s in p[1])]),
                *self._live_check()]
        body = "\n    ".join(head + self.lines + host.end() + ["return BRAZE_OK;"])
        params = "braze_tensor *inputs, int32_t n_inputs, braze_alloc_fn alloc, void *alloc_ctx, char *err, int32_t errlen"
        params = "const braze_instance *M, const " + params
        return host.entry(symbol, params, "M, inputs, n_inputs, alloc, alloc_ctx, err, errlen", body)

    def _alloc_output(self, k: int, r) -> list[str]:
        """C that allocates result ``k`` through the caller's ``alloc``, at its shape now."""
        shp = ", ".join(int_expr(d) for d in r.shape) or "0"
        return [f"{{ int64_t shp[{max(r.rank, 1)}] = {{{shp}}}; "
                f"out_{k} = (char *)alloc(alloc_ctx, {k}, {DTYPE_CODE[r.dtype]}, {r.rank}, shp); "
                f"if (!out_{k}) BRAZE_FAIL(BRAZE_ERR_ALLOC, \"could not allocate output {k} of @{self.func.name}\"); }}",
                *self.gen.host.output_lines(k, r)]

    def _place(self, n: Node) -> None:
        """Each output's memory: the caller's output, or its offset in the arena (assign_memory)."""
        offsets = n.attrs.get("arena")
        if offsets is None or len(offsets) != len(n.outputs):
            raise BrazeError(f"the fused node of @{n.attrs['callee']} has no arena offsets",
                             where=f"@{self.func.name}", hint="run the assign_memory pass before generating C")
        for v, off in zip(n.outputs, offsets):
            if id(v) in self.ptr:
                continue
            if isinstance(off, int) and off < 0:
                raise BrazeError(f"%{v.name} has no memory: its arena offset is {off}, but it is not a result "
                                 f"of @{self.func.name}", hint="run the assign_memory pass again after changing the IR")
            # named once: the offset's expression can be long, and each use would repeat it (the C
            # compiler's time grows with it)
            name = f"a_{len(self.ptr)}"
            self.emit(f"char *const {name} = arena + {int_expr(off)};")
            # planned at the bounds of its sizes: check the sizes found (a select group's own outputs are
            # written within them by construction, before their size is known)
            if self.module.decided(v.type) and {s.name for s in v.type.free_syms()} <= self.bound:
                size, plan = S.mul(v.type.numel(), v.dtype.itemsize), self.module.bounded(byte_size(v))
                self.emit(f"if ({int_expr(size)} > {int_expr(plan)}) " + fail_c(
                    "BRAZE_ERR_INTERNAL", f"%{v.name} ({v.type}) needs %PLD bytes, more than the {plan} "
                    "planned for it", f"(long long)({int_expr(size)})")
                    + " /* a size outgrew its bound (Module.bounded): a braze bug */")
            self.ptr[id(v)] = name

    def _time(self, start: int, label: str, nbytes, flops) -> None:
        """Wrap the lines from ``start`` in a timer that also sums the bytes the group moves and
        the flops of its GEMM or convolution (BRAZE_DEBUG >= 3)."""
        i = len(self.gen.profile_labels)
        self.gen.profile_labels.append(label)
        self.lines[start:] = ["{ double t0_ = omp_get_wtime();", *self.lines[start:],
                              "double dt_ = omp_get_wtime() - t0_;",
                              # calls may run in many threads
                              f"#pragma omp atomic\ng_prof_s[{i}] += dt_;",
                              f"#pragma omp atomic\ng_prof_b[{i}] += (double)({int_expr(nbytes)});",
                              f"#pragma omp atomic\ng_prof_f[{i}] += (double)({int_expr(flops)});",
                              f"#pragma omp atomic\ng_prof_n[{i}]++; }}"]

    # --- generated kernels --------------------------------------------------------------
    def _kernel(self, n: Node) -> None:
        callee = n.attrs["callee"]
        k = self.gen.kernels.get(callee)
        if k is None:
            raise BrazeError(f"no kernel was built for @{callee}", hint="this is a braze bug; please report it")
        ins = [b for b in k.buffers if b.role == "in" and b.const_name is None]
        outs = [b for b in k.buffers if b.role == "out"]
        if len(ins) != len(n.inputs) or len(outs) != len(n.outputs):
            raise BrazeError(f"kernel {k.name} takes {len(ins)} inputs and {len(outs)} outputs, but its call has "
                             f"{len(n.inputs)} and {len(n.outputs)}", hint="this is a braze bug; please report it")
        it_in, it_out = iter(n.inputs), iter(n.outputs)
        args = []
        for b in k.buffers:
            if b.const_name is not None:
                args.append(f"(void *){self.gen.const(b.const_name)}")
            elif b.role == "in":
                args.append(f"(void *){self.ptr_of(next(it_in))}")
            else:
                args.append(f"(void *){self.ptr_of(next(it_out))}")
        args += [c_sym_name(s) for s in k.syms]
        call = f"{k.name}({', '.join(args)})"
        allocates = any(isinstance(s, L.Alloc) for s in L.walk_stmts(k.body))
        nodes = self.module.functions[callee].nodes if self.gen.host.checks_data else []
        gathers = [m for m in nodes if m.op in ("gather", "gather_elements")]
        divides = [m for m in nodes if m.op in DIVIDING_OPS and m.outputs[0].type.dtype.is_int] \
            if nodes and _checks_divisors(k) else []
        if not (allocates or gathers or divides):
            self.emit(call + ";")
            return
        self.emit(f"{{ int rc_ = {call};")
        if allocates:
            self.emit(f"  if (rc_ & {KERNEL_NO_MEMORY}) BRAZE_FAIL(BRAZE_ERR_ALLOC, \"kernel {k.name} could not "
                      "allocate its row buffers (out of memory)\");")
        if gathers:
            what = "; ".join(f"{m.op}{_where(m)}: an index is out of range; each must lie in "
                             f"[{'-n' if m.attrs.get('wrap', True) else '0'}, n), n the size of the dim it indexes"
                             for m in gathers)
            self.emit(f"  if (rc_ & {KERNEL_BAD_INDEX}) " + fail_c("BRAZE_ERR_RANGE", what))
        if divides:
            ops_at: dict = {}  # one entry per source line: floor division is a remainder and a div
            for m in divides:
                ops_at.setdefault(_where(m), []).append(m.op)
            what = " or ".join(f"{'/'.join(dict.fromkeys(ops))}{w}" for w, ops in ops_at.items())
            self.emit(f"  if (rc_ & {KERNEL_DIV_ZERO}) " + fail_c(
                "BRAZE_ERR_RANGE", f"integer division by zero in {what}; every integer divisor must be nonzero"))
        self.emit("}")

    def _operand(self, n: Node, callee: Function, v) -> str:
        """The C pointer of value ``v`` of ``n``'s callee: a constant of the model, or the caller's
        operand that its parameter stands for."""
        p = v.producer
        if p is not None and p.op == "constant":
            return f"((char *){self.gen.const(p.attrs['name'])})"
        return self.ptr_of(n.inputs[next(i for i, q in enumerate(callee.params) if q is v)])

    def _attention(self, n: Node) -> None:
        """An ``attention_backward`` group: braze_attention.h on its operands, the mask read at
        the strides of its broadcast to [B, H, L, S]."""
        callee = self.module.functions[n.attrs["callee"]]
        a = next(m for m in callee.nodes if m.op == "attention_backward")
        q, k, v = a.inputs[:3]
        mask = a.inputs[6] if len(a.inputs) > 6 else None
        self.gen.attention = True
        B, H, L, E = q.shape
        Hk, Sk, Ev = k.shape[1], k.shape[2], v.shape[3]
        strides = ["0"] * 4
        kind = 0
        if mask is not None:
            kind = 1 if mask.dtype == DType.bool else 2
            ms = (1,) * (4 - mask.rank) + tuple(mask.shape)
            step = 1
            for d in range(3, -1, -1):
                strides[d] = "0" if ms[d] == 1 else int_expr(step)
                step = S.mul(step, ms[d])
        # a gradient nothing reads is not a result of the group: NULL, and the helper skips it
        result = {id(r): i for i, r in enumerate(callee.results)}
        grads = [self.ptr_of(n.outputs[result[id(g)]]) if id(g) in result else "NULL" for g in a.outputs]
        ins = [self._operand(n, callee, x) for x in a.inputs[:6]]
        args = ", ".join([f"(float *){p}" for p in grads] + [f"(const float *){p}" for p in ins])
        dims = ", ".join(int_expr(d) for d in (B, H, Hk, L, Sk, E, Ev))
        m = self._operand(n, callee, mask) if mask is not None else "NULL"
        self.emit(f"if (bz_attention_backward({args}, {m}, {kind}, {', '.join(strides)}, {dims}, "
                  f"{c_literal(a.attrs['scale'], DType.float32)}, {int(bool(a.attrs.get('is_causal')))})) "
                  f"BRAZE_FAIL(BRAZE_ERR_ALLOC, \"attention's backward @{callee.name} could not allocate its tiles "
                  "(out of memory)\");")

    def _scatter(self, n: Node) -> None:
        """An ``index_add`` or ``index_put`` group: braze_scatter.h's helper for its types and
        reduction, on the group's x (NULL when the group's ``full`` makes it), indices and source."""
        callee = self.module.functions[n.attrs["callee"]]
        add = next(m for m in callee.nodes if m.op in SCATTERS)
        fill = next((m for m in callee.nodes if m.op == "full"), None)
        x, idx, src = (before_views(v) for v in add.inputs)  # views move no data: the memory under them
        dt, it = x.dtype, idx.dtype
        copy = add.op == "index_put" and add.attrs["reduce"] == "none"  # rows written: any dtype
        if (dt.itemsize == 2 or dt == DType.bool) and not copy or it == DType.bool:
            raise UnsupportedOpError(f"{add.op} of {dt.name} with {it.name} indices has no kernel yet",
                                     where=str(add.loc) if add.loc else None, hint="compute it in float32")
        t, i_t = ctype(dt), ctype(it)
        args = (t, UNSIGNED.get(dt, t), i_t)
        if add.op == "index_add":
            name, helper = f"bz_index_add_{dt.name}_{it.name}", ("BZ_INDEX_ADD", args)
        else:
            mode = add.attrs["reduce"]
            name, helper = f"bz_index_put_{mode}_{dt.name}_{it.name}", \
                ("BZ_INDEX_PUT", args + (f"BZ_PUT_{mode.upper()}",))
        self.gen.helpers.setdefault("braze_scatter.h", {})[name] = helper
        shape = add.outputs[0].type.shape
        ax = add.attrs.get("axis", 0) % len(shape)
        outer, inner = (int_expr(S.prod(shape[:ax])), int_expr(S.prod(shape[ax + 1:])))
        out = self.ptr_of(n.outputs[0])
        ip, sp = self._operand(n, callee, idx), self._operand(n, callee, src)
        xp = "NULL" if fill else f"(const {t} *){self._operand(n, callee, x)}"
        self.emit(f"{{ int64_t bad = {name}(({t} *){out}, {xp}, {c_literal(fill.attrs['value'] if fill else 0, dt)}, "
                  f"(const {i_t} *){ip}, (const {t} *){sp}, {outer}, {int_expr(shape[ax])}, "
                  f"{int_expr(add.inputs[1].type.shape[0])}, {inner});")
        where = _where(add)
        n_ = f"(long long)({int_expr(shape[ax])})"
        self.emit("  if (bad >= 0) " + fail_c("BRAZE_ERR_RANGE", f"{add.op}{where}: index %PLD (position %PLD) is "
                                           f"outside [-%PLD, %PLD), the size of dim {ax}",
                                           f"(long long)((const {i_t} *){ip})[bad]", "(long long)bad", n_, n_) + " }")

    def _select(self, n: Node) -> None:
        """A ``select`` group: braze_select.h's function for its op and types writes the outputs and
        returns the size it found into that size's variable; then the shape facts that use the size
        are checked, as the entry checks its inputs'."""
        callee = self.module.functions[n.attrs["callee"]]
        op = next(m for m in callee.nodes if m.op in SELECTS)
        if op.op == "topk":
            return self._topk(n, callee, op)
        size = op.attrs["size"]
        outs = self._call_outputs(n, callee, op, ["int64_t"] * len(op.outputs))
        ins = [self._operand(n, callee, v) if v is not None else None for v in op.inputs]
        x = op.inputs[0]
        dt = x.dtype
        t = ctype(dt)
        if op.op == "nonzero":
            name = f"bz_nonzero_{dt.name}"
            helper = ("BZ_NONZERO", (t, "BZ_NZ_HALF" if dt in HALF_SFX else "BZ_NZ"))
            dims = ", ".join(int_expr(d) for d in x.shape)
            call = (f"{name}((const {t} *){ins[0]}, {int_expr(x.type.numel())}, {x.rank}, "
                    f"(const int64_t[]){{{dims}}}, {outs[0]})")
        elif op.op == "unique":
            if dt in HALF_SFX or dt == DType.bool:
                raise UnsupportedOpError(f"unique of {dt.name} has no kernel yet", hint="cast to float32 first")
            name = f"bz_unique_{dt.name}"
            helper = ("BZ_UNIQUE", (t, "BZ_CMP_FLOAT" if dt.is_float else "BZ_CMP_INT"))
            ax = op.attrs["axis"] % x.rank
            outer, inner = int_expr(S.prod(x.shape[:ax])), int_expr(S.prod(x.shape[ax + 1:]))
            call = (f"{name}((const {t} *){ins[0]}, {outer}, {int_expr(x.shape[ax])}, {inner}, "
                    f"{int(bool(op.attrs['sorted']))}, {', '.join(outs)})")
        else:
            if dt not in (DType.float32, DType.float64):
                raise UnsupportedOpError(f"non_max_suppression of {dt.name} boxes has no kernel yet",
                                         hint="cast the boxes and scores to float32 first")
            name = f"bz_nms_{dt.name}"
            helper = ("BZ_NMS", (t,))
            B, N, _ = x.shape
            opt = [f"(const {w} *){p}" if p is not None else "NULL"
                   for w, p in zip(("int64_t", t, t), ins[2:] + [None] * (5 - len(ins)))]
            call = (f"{name}((const {t} *){ins[0]}, (const {t} *){ins[1]}, {int_expr(B)}, "
                    f"{int_expr(op.inputs[1].shape[1])}, {int_expr(N)}, {', '.join(opt)}, "
                    f"{op.attrs['center_point_box']}, {outs[0]})")
        self.gen.helpers.setdefault("braze_select.h", {})[name] = helper
        u = c_sym_name(size)
        where = _where(op)
        self.emit(f"{u} = {call};")
        self.emit(f"if ({u} < 0) " + fail_c("BRAZE_ERR_ALLOC", f"{op.op}{where}: out of memory for its scratch"))
        self.bound.add(size.name)
        names = sorted(self.bound)
        self.lines += fact_checks(self.module.constraints, self.bound, size.name,
                                  f"the size {size.name} that {op.op}{where} found breaks the model's shape "
                                  "constraints: ", "\n  where: " + ", ".join(f"{k}=%PLD" for k in names),
                                  [f"(long long){c_sym_name(self.module.constraints.symbol(k))}" for k in names])

    def _call_outputs(self, n: Node, callee, op: Node, ctypes: list[str]) -> list[str]:
        """A header call's output pointers, cast to ``ctypes``: where the group returns each of
        ``op``'s outputs, NULL for one that nothing reads."""
        result = {id(r): i for i, r in enumerate(callee.results)}
        return [f"({c} *){self.ptr_of(n.outputs[result[id(o)]])}" if id(o) in result else "NULL"
                for c, o in zip(ctypes, op.outputs)]

    def _topk(self, n: Node, callee, op: Node) -> None:
        """A long-row ``topk`` (passes/decompose.py): braze_select.h's BZ_TOPK for its dtype writes
        the values and indices a later node reads (NULL: the other) of each row of x along the axis."""
        x = op.inputs[0]
        dt, a = x.dtype, op.attrs["axis"] % x.rank
        t = ctype(dt)
        name = f"bz_topk_{dt.name}"
        self.gen.helpers.setdefault("braze_select.h", {})[name] = \
            ("BZ_TOPK", (t, f"BZ_CMP_{HALF_SFX[dt].upper()}" if dt in HALF_SFX else
                         "BZ_CMP_FLOAT" if dt.is_float else "BZ_CMP_INT"))
        vals, idx = self._call_outputs(n, callee, op, [t, "int64_t"])
        outer, inner = int_expr(S.prod(x.shape[:a])), int_expr(S.prod(x.shape[a + 1:]))
        where = _where(op)
        self.emit(f"if ({name}((const {t} *){self._operand(n, callee, x)}, {outer}, {int_expr(x.shape[a])}, "
                  f"{inner}, {int_expr(op.attrs['k'])}, {int(bool(op.attrs['largest']))}, {vals}, {idx})) "
                  + fail_c("BRAZE_ERR_ALLOC", f"topk{where}: out of memory for its scratch"))

    def _live_check(self) -> list[str]:
        """The live weights' generations for this call (braze_dnnl_wtrack.c), checked at once."""
        if not self.live:
            return []
        k = len(self.live)
        ptrs = ", ".join(self.live)
        sizes = ", ".join(str(b) for _, b in self.live.values())
        return [f"const void *lw_ptr[{k}] = {{{ptrs}}};",
                f"static const size_t lw_bytes[{k}] = {{{sizes}}};",
                f"uint64_t lw_gen[{k}];",
                f"braze_live_check({k}, lw_ptr, lw_bytes, lw_gen);"]

    def ptr_of(self, v) -> str:
        try:
            return self.ptr[id(v)]
        except KeyError:
            raise BrazeError(f"%{v.name} has no memory at this point", hint="this is a braze bug; please report it") \
                from None


def _checks_divisors(k) -> bool:
    """The kernel reads an integer divisor that may be 0 (loop IR's ``divisor``)."""
    return any(isinstance(e, L.Unary) and e.fn == "divisor" for s in L.walk_stmts(k.body) for x in L.stmt_exprs(s)
               for e in L.walk(x))


def _where(node) -> str:
    """`` (file:line (name): code)`` of ``node``'s source for a run-time message, with the file's
    name only: the C must not depend on where the model's source lies (the compile cache's key,
    the pinned C of tests/codegen/test_c_pinned.py)."""
    loc = node.loc
    if not loc:
        return ""
    return f" ({replace(loc, file=os.path.basename(loc.file)) if loc.file else loc})"


# the helper's BRAZE_DT_* codes (braze_dnnl.h)
def _traffic(module: Module, n: Node):
    """(bytes read and written, flops) of one fused node: its inputs, outputs and weights; the
    flops of its GEMM or convolution (2 per multiply-add; 0 for a generated kernel)."""
    callee = module.functions[n.attrs["callee"]]
    vals = [v for v in n.inputs if v is not None] + list(n.outputs) + \
        [m.outputs[0] for m in callee.nodes if m.op == "constant"]
    nbytes = 0
    for v in vals:
        nbytes = S.add(nbytes, S.mul(v.type.numel(), v.dtype.itemsize))
    flops = 0
    for m in callee.nodes:
        if m.op in ("linear", "matmul"):
            flops = S.mul(2, S.mul(m.outputs[0].type.numel(), m.inputs[0].shape[-1] if m.inputs[0].rank else 1))
        elif m.op == "conv2d":
            flops = S.mul(2, S.mul(m.outputs[0].type.numel(), S.prod(m.inputs[1].shape[1:])))
        elif m.op in BACKWARD_CONVS:  # as many multiply-adds as the forward convolution
            w = m.inputs[1 if m.op == "conv_transpose2d" else 2]
            flops = S.mul(2, S.mul(m.inputs[0].type.numel(), S.prod(w.shape[1:])))
    return nbytes, flops
