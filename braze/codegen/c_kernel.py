"""C code for loop-IR kernels.

    kernel_to_c(kernel, isa=None) -> str     # one `BZ_KERNEL int <name>(...)` function (static: UNITS_C)
    kernel_prototype(kernel) -> str          # its declaration
    c_prelude(isa=None) -> str               # `#define BZ_VB n` + `#include "braze_vec.h"`, once per TU
    kernel_signature(kernel) -> list[(ctype, cname)]
    kernel_entry(kernel, export_name) -> str # `void export(void **bufs, const int64_t *syms)` (tests, tools)

A kernel's C parameters: one pointer per buffer (``kernel.buffers`` order;
inputs ``const``), then one ``int64_t`` per symbol (``kernel.syms`` order).
Buffers are row-major and contiguous; bool is ``uint8_t`` (0/1).

SIMD: GCC vector extensions of ``isa.vector_bytes`` bytes (float32 only; a
loop of ``kind="vector"`` gets a vector main loop plus a scalar remainder, so
any run-time extent works). ``vector_bytes == 0`` emits scalar code only.
The kernel is emitted as it is given: scheduling it is the caller's step, not this one's.
"""

from __future__ import annotations

import itertools

from ..errors import BrazeError
from ..ir import loop as L
from ..ir import sym as S
from ..ir.loop import LIBM_UNARY
from ..ir.loop import (Binary, Cast, Compare, Const, Expr, For, IndexValue, Kernel, Let, Load, Reduce, Select,
                       Store, Unary, Var)
from ..ir.types import DType
from ..schedule.vectorize import streamed_outputs
from .c_expr import int_expr
from .c_reduce import ReductionsC
from .c_types import HALF_SFX, UNSIGNED, c_literal, ctype, narrow_cast

F32, BOOL, I64 = DType.float32, DType.bool, DType.int64

# float32 functions of braze_vmath.h: bz_v<fn> (vector) and bz_s<fn> (scalar), bit-identical
_VMATH = ("exp", "expm1", "log", "tanh", "erf", "sigmoid", "silu", "gelu", "gelu_tanh", "sin", "cos", "log1p")



def vector_bytes_of(isa) -> int:
    """isa: an ISA (``.vector_bytes``), an int, or None (the host's best)."""
    if isa is None:
        from .isa import host_isa
        isa = host_isa()
    if isinstance(isa, int):
        return isa
    return int(isa.vector_bytes)


# As it is, a source is one translation unit with static kernels; the cache compiles a large one as
# several in parallel (runtime/compiler.py, docs/compiler-design.md): unit BRAZE_UNIT of BRAZE_UNITS
# holds the kernels numbered that modulo BRAZE_UNITS (host.py), unit 0 the host code too.
UNITS_C = """#ifndef BRAZE_UNITS
#define BZ_UNIT(i) 1
#define BZ_KERNEL static
#else
#define BZ_UNIT(i) ((i) % BRAZE_UNITS == BRAZE_UNIT)
#define BZ_KERNEL __attribute__((visibility("hidden")))
#endif
"""


def c_prelude(isa=None) -> str:
    vb = vector_bytes_of(isa)
    return (f"#ifndef BZ_VB\n#define BZ_VB {vb}\n#endif\n#include \"braze_vec.h\"\n"
            "#include <stdint.h>\n#include <math.h>\n" + UNITS_C)


def buffer_cname(b) -> str:
    """A C identifier for the buffer; names with other characters get a hash suffix (no clashes)."""
    if b.name.replace("_", "").isalnum() and b.name.isascii():
        return "b_" + b.name
    import hashlib
    clean = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in b.name)
    return f"b_{clean}_{hashlib.sha1(b.name.encode()).hexdigest()[:6]}"


def sym_cname(s) -> str:
    return s.name if L.is_loop_var(s) else "s_" + s.name


def kernel_signature(k: Kernel) -> list:
    out = []
    ptr = "*" if k.in_place else "*restrict"
    for b in k.buffers:
        t = ctype(b.dtype)
        out.append((f"const {t} {ptr}" if b.role == "in" else f"{t} {ptr}", buffer_cname(b)))
    for s in k.syms:
        out.append(("int64_t", sym_cname(s)))
    return out


def kernel_entry(k: Kernel, export_name: str) -> str:
    """An exported wrapper taking ``void **bufs`` and ``const int64_t *syms``; it returns the
    kernel's status (1: a buffer could not be allocated)."""
    args = [f"({'const ' if b.role == 'in' else ''}{ctype(b.dtype)} *)bufs[{i}]" for i, b in enumerate(k.buffers)]
    args += [f"syms[{i}]" for i in range(len(k.syms))]
    return (f"int {export_name}(void **bufs, const int64_t *syms) {{\n"
            f"    (void)bufs; (void)syms;\n    return {k.name}({', '.join(args)});\n}}\n")


# a kernel's failure word, returned at its end (from any thread): bit 1, a buffer allocation failed; bit 2,
# a gathered index was out of range (bz_axis_index); bit 4, an integer divisor was 0 (bz_divisor)
KERNEL_NO_MEMORY, KERNEL_BAD_INDEX, KERNEL_DIV_ZERO = 1, 2, 4
_FAIL = f"__atomic_fetch_or(&bz_fail, {KERNEL_NO_MEMORY}, __ATOMIC_RELAXED);"


def _moved(value: Expr, dtype: DType) -> Load | None:
    """The load of a ``dtype`` element that ``value`` (a store's rounding to ``dtype``) only widened."""
    x = value.x
    if isinstance(x, Cast) and x.dtype == DType.float32 and isinstance(x.x, Load) and x.x.dtype == dtype:
        return x.x
    return None


class _Gen(ReductionsC):
    def __init__(self, k: Kernel, vb: int):
        self.k = k
        self.vb = vb
        self.vl = vb // 4 if vb else 0
        self.lines: list[str] = []
        self.ind = 1
        self.scopes: list[dict] = [{}]
        self.barriers: list = [None]
        self.n = 0
        self.vvar = None  # the loop var vectorized in the current context
        self.rename: dict = {}  # loop var name -> C expression (lane loops)
        self.vec_vars: set = set()  # Let names holding vectors
        self._flv: dict = {}
        self.frees: list = []  # per open block: the buffers it allocated
        self.hoisted: set = set()  # Allocs made before an enclosing loop
        self.tail_of = None  # the vector loop whose scalar remainder is being emitted
        self.accumulate = False  # in a jam loop: a vector sum of 3+ terms goes into one variable
        # output buffer -> the C flag that streams its vector stores past the caches
        self.stream: dict = {}

    # --- output -------------------------------------------------------------
    def line(self, s: str):
        self.lines.append("    " * self.ind + s)

    def tmp(self, prefix="x") -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def push(self, barrier=None):
        self.scopes.append({})
        self.barriers.append(barrier)

    def pop(self):
        self.scopes.pop()
        self.barriers.pop()

    # --- helpers --------------------------------------------------------------
    def flv(self, e) -> frozenset:
        k = id(e)
        hit = self._flv.get(k)
        if hit is not None and hit[0] is e:
            return hit[1]
        r = L.free_loop_vars(e)
        self._flv[k] = (e, r)
        return r

    def varying(self, e) -> bool:
        if self.vvar is None:
            return False
        if self.vvar in self.flv(e):
            return True
        return bool(self.vec_vars) and bool(L.vars_used(e) & self.vec_vars)

    def ic(self, x) -> str:
        """C of an IntLike (loop vars of lane loops print as their ``rename``)."""
        return int_expr(x, self._ic_name, trust_bounds=True)

    def _ic_name(self, s) -> str:
        r = self.rename.get(s.name)
        return r if r is not None else sym_cname(s)

    # --- expressions ----------------------------------------------------------
    def lookup(self, e):
        for scope, bar in zip(reversed(self.scopes), reversed(self.barriers)):
            hit = scope.get(e)
            if hit is not None:
                return hit
            if bar is not None and bar in self.flv(e):
                return None
        return None

    def emit(self, e: Expr):
        """(C expression, is_vector) of e in the current context."""
        if isinstance(e, Const):
            return self.const(e), False
        if isinstance(e, Var):
            return e.name, e.name in self.vec_vars
        if isinstance(e, IndexValue):
            vec = self.varying(e)
            if vec:
                raise BrazeError("codegen bug: a varying index value in a vector loop")
            s = self.ic(e.value)
            return (s if e.dtype == I64 else f"(({ctype(e.dtype)})({s}))"), False
        hit = self.lookup(e)
        if hit is not None:
            return hit
        vec = self.varying(e)
        if vec and self.accumulate and (terms := _sum_terms(e)) is not None:
            return self.accumulated(e, terms)
        if vec:
            code, kind = self.vexpr(e)
        else:
            code, kind = self.sexpr(e), None
        if isinstance(e, Reduce) and code.isidentifier():
            res = (code, vec)
        else:
            name = self.tmp()
            t = {"vf": "bz_vf", "vi": "bz_vi"}.get(kind) if vec else ctype(e.dtype)
            self.line(f"const {t} {name} = {code};")
            res = (name, vec)
        self.scopes[-1][e] = res
        return res

    def const(self, e: Const) -> str:
        return c_literal(e.value, e.dtype)

    def sx(self, e) -> str:
        code, vec = self.emit(e)
        if vec:
            raise BrazeError("codegen bug: vector value in scalar context")
        return code

    def offset(self, index) -> str:
        poly, extra = index
        s = self.ic(poly)
        if extra is not None:
            s = f"{s} + {self.sx(extra)}" if not (isinstance(poly, int) and poly == 0) else self.sx(extra)
        return s

    # scalar ----------------------------------------------------------------
    def sexpr(self, e) -> str:
        dt = e.dtype
        if isinstance(e, Load):
            return f"{buffer_cname(e.buffer)}[{self.offset(e.index)}]"
        if isinstance(e, Unary):
            if e.fn == "bitcast":
                return _bitcast(self.sx(e.x), e.x.dtype, dt)
            return self.sunary(e.fn, self.sx(e.x), dt)
        if isinstance(e, Binary):
            return self.sbinary(e.op, self.sx(e.a), self.sx(e.b), dt)
        if isinstance(e, Compare):
            op = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[e.op]
            return f"(uint8_t)({self.sx(e.a)} {op} {self.sx(e.b)})"
        if isinstance(e, Select):
            return f"({self.sx(e.cond)} ? {self.sx(e.a)} : {self.sx(e.b)})"
        if isinstance(e, Cast):
            if e.x.dtype.is_narrow or dt.is_narrow:
                return narrow_cast(self.sx(e.x), e.x.dtype, dt)
            if e.x.dtype in HALF_SFX:  # stage widen: a 16-bit load, or an explicit rounding
                sfx = HALF_SFX[e.x.dtype]
                if dt == F32 and isinstance(e.x, Load):
                    return f"bz_{sfx}_to_f32({self.sx(e.x)})"
                if dt == F32 and isinstance(e.x, Cast):
                    return f"bz_{sfx}_to_f32(bz_f32_to_{sfx}({self.sx(e.x.x)}))"
            if dt in HALF_SFX or e.x.dtype in HALF_SFX:
                raise BrazeError(f"codegen bug: a {e.x.dtype.name} -> {dt.name} cast outside a load or a store "
                                 "(stage widen did not run)")
            x = self.sx(e.x)
            if dt == BOOL:
                return f"(uint8_t)({x} != 0)"
            return f"({ctype(dt)})({x})"
        if isinstance(e, Reduce):
            return self.sreduce(e)
        raise BrazeError(f"cannot emit {type(e).__name__}")

    def sunary(self, fn, x, dt) -> str:
        if dt.is_float:
            f = "f" if dt == F32 else ""
            sfx = "f" if dt == F32 else "d"
            one = "1.0f" if dt == F32 else "1.0"
            m = {"neg": f"(-{x})", "abs": f"fabs{f}({x})", "exp": f"exp{f}({x})", "expm1": f"expm1{f}({x})",
                 "log": f"log{f}({x})",
                 "log1p": f"log1p{f}({x})", "sqrt": f"sqrt{f}({x})", "rsqrt": f"({one} / sqrt{f}({x}))",
                 "reciprocal": f"({one} / {x})", "tanh": f"tanh{f}({x})", "erf": f"erf{f}({x})",
                 "sigmoid": f"bz_sigmoid{sfx}({x})", "silu": f"bz_silu{sfx}({x})", "gelu": f"bz_gelu{sfx}({x})",
                 "gelu_tanh": f"bz_gelu_tanh{sfx}({x})", "sin": f"sin{f}({x})", "cos": f"cos{f}({x})",
                 "floor": f"floor{f}({x})", "ceil": f"ceil{f}({x})", "round": f"nearbyint{f}({x})",
                 "not": f"(uint8_t)(!{x})"}
            if fn in LIBM_UNARY:
                return f"{fn}{f}({x})"
            if dt == F32 and fn in _VMATH:
                # the scalar twin of the vector math (same bits), not libm: a vector loop's
                # remainder, and unvectorized loops computing the same value, must agree
                return f"bz_s{fn}({x})"
            return m[fn]
        t = ctype(dt)
        u = UNSIGNED.get(dt)
        neg = f"({t})(0 - ({u})({x}))" if u else f"({t})(-{x})"  # wraps at the minimum, as numpy and torch
        m = {"neg": neg, "abs": f"({x} < 0 ? {neg} : {x})", "not": f"(uint8_t)(!{x})", "bitnot": f"({t})(~{x})",
             "floor": x, "ceil": x, "round": x, "divisor": self.divisor(x, t)}
        if fn not in m:
            raise BrazeError(f"unary {fn} on {dt.name} has no C form")
        return m[fn]

    def axis_index(self, i: str, n: str) -> str:
        return f"bz_axis_index({i}, {n}, &bz_fail)"

    def divisor(self, b: str, t: str) -> str:
        return f"({t})bz_divisor((int64_t)({b}), &bz_fail)"

    def sbinary(self, op, a, b, dt) -> str:
        if op == "uniform":
            return f"bz_uniform((uint64_t)({a}), (uint64_t)({b}))"
        if op == "axis_index":
            return self.axis_index(a, b)
        if dt.is_float:
            f = "f" if dt == F32 else "d"
            if op in ("add", "sub", "mul", "div"):
                return f"({a} {dict(add='+', sub='-', mul='*', div='/')[op]} {b})"
            lib = "f" if dt == F32 else ""
            return {"max": f"bz_max{f}({a}, {b})", "min": f"bz_min{f}({a}, {b})", "mod": f"bz_mod{f}({a}, {b})",
                    "fmod": f"fmod{lib}({a}, {b})", "pow": f"bz_{'spowf' if dt == F32 else 'powd'}({a}, {b})"}[op]
        t = ctype(dt)
        if op in ("and", "or", "xor"):
            return f"({t})({a} {dict(**{'and': '&', 'or': '|', 'xor': '^'})[op]} {b})"
        if op in ("shl", "shr"):
            fn = "bz_shl" if op == "shl" else "bz_ushr" if dt.is_unsigned else "bz_sshr"
            return f"({t}){fn}({a}, {b}, {dt.itemsize * 8})"
        if op in ("add", "sub", "mul"):
            sym = dict(add='+', sub='-', mul='*')[op]
            u = UNSIGNED.get(dt)
            if u:  # wrap on overflow (signed overflow is undefined in C; the compiler may exploit it)
                return f"({t})(({u})({a}) {sym} ({u})({b}))"
            return f"({t})({a} {sym} {b})"
        if op in ("max", "min"):
            return f"({a} {'>' if op == 'max' else '<'} {b} ? {a} : {b})"
        if dt is DType.uint64:
            fn = {"div": "bz_udiv", "mod": "bz_umod", "fmod": "bz_umod", "pow": "bz_upow"}[op]
        else:
            fn = {"div": "bz_idiv", "mod": "bz_imod", "fmod": "bz_ifmod", "pow": "bz_ipow"}[op]
        return f"({t}){fn}({a}, {b})"

    # vector ----------------------------------------------------------------
    def vx(self, e) -> str:
        """e as a float vector (splat when uniform)."""
        code, vec = self.emit(e)
        if vec:
            return code
        if e.dtype == BOOL:
            return f"bz_msplat({code})"
        if e.dtype != F32:
            code = f"(float)({code})"
        return f"bz_splat({code})"

    def vexpr(self, e):
        """(code, 'vf'|'vi') of a varying expression."""
        dt = e.dtype
        if isinstance(e, Load):
            if e.dtype == BOOL:
                return self.by_lane(e, "bz_vi", "-(int32_t)({} != 0)"), "vi"
            if self.unit_stride(e):
                return f"bz_ld(&{buffer_cname(e.buffer)}[{self.offset(e.index)}])", "vf"
            return self.by_lane(e), "vf"
        if dt == BOOL:
            if isinstance(e, Compare):
                op = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[e.op]
                return f"({self.vx(e.a)} {op} {self.vx(e.b)})", "vi"
            if isinstance(e, Binary):
                op = {"and": "&", "or": "|", "xor": "^"}[e.op]
                return f"({self.vx(e.a)} {op} {self.vx(e.b)})", "vi"
            if isinstance(e, Unary) and e.fn == "not":
                return f"(~{self.vx(e.x)})", "vi"
            if isinstance(e, Cast):
                return f"({self.vx(e.x)} != 0.0f)", "vi"
            if isinstance(e, Select):
                return f"(({self.vx(e.cond)} & {self.vx(e.a)}) | (~{self.vx(e.cond)} & {self.vx(e.b)}))", "vi"
            raise BrazeError(f"codegen bug: vector bool {type(e).__name__}")
        if isinstance(e, Unary):
            x = self.vx(e.x)
            if e.fn in LIBM_UNARY:  # the scalar code's libm call in each lane: the same bits
                return f"BZ_LANES1({e.fn}f, {x})", "vf"
            m = {"neg": f"(-{x})", "abs": f"bz_vabs({x})", "exp": f"bz_vexp({x})", "expm1": f"bz_vexpm1({x})",
                 "log": f"bz_vlog({x})",
                 "log1p": f"bz_vlog1p({x})", "sqrt": f"bz_vsqrt({x})", "rsqrt": f"(1.0f / bz_vsqrt({x}))",
                 "reciprocal": f"(1.0f / {x})", "tanh": f"bz_vtanh({x})", "erf": f"bz_verf({x})",
                 "sigmoid": f"bz_vsigmoid({x})", "silu": f"bz_vsilu({x})", "gelu": f"bz_vgelu({x})",
                 "gelu_tanh": f"bz_vgelu_tanh({x})", "sin": f"bz_vsin({x})", "cos": f"bz_vcos({x})",
                 "floor": f"bz_vfloor({x})", "ceil": f"bz_vceil({x})", "round": f"bz_vround({x})"}
            return m[e.fn], "vf"
        if isinstance(e, Binary) and e.op == "uniform":
            return self.by_lane(e), "vf"
        if isinstance(e, Binary):
            a, b = self.vx(e.a), self.vx(e.b)
            if e.op in ("add", "sub", "mul", "div"):
                return f"({a} {dict(add='+', sub='-', mul='*', div='/')[e.op]} {b})", "vf"
            return {"max": f"bz_vmax({a}, {b})", "min": f"bz_vmin({a}, {b})",
                    "mod": f"BZ_LANES2(bz_modf, {a}, {b})", "fmod": f"BZ_LANES2(fmodf, {a}, {b})",
                    "pow": f"bz_vpow({a}, {b})"}[e.op], "vf"
        if isinstance(e, Select):
            return f"bz_sel({self.vx(e.cond)}, {self.vx(e.a)}, {self.vx(e.b)})", "vf"
        if isinstance(e, Cast):
            if e.x.dtype in HALF_SFX and isinstance(e.x, Load):
                sfx = HALF_SFX[e.x.dtype]
                if self.unit_stride(e.x):
                    return f"bz_ld_{sfx}(&{buffer_cname(e.x.buffer)}[{self.offset(e.x.index)}])", "vf"
                return self.by_lane(e.x, "bz_vf", f"bz_{sfx}_to_f32({{}})"), "vf"
            if e.x.dtype in HALF_SFX and isinstance(e.x, Cast):
                return f"bz_vround_{HALF_SFX[e.x.dtype]}({self.vx(e.x.x)})", "vf"
            if isinstance(e.x, Load) and e.x.dtype.is_int:
                return self.by_lane(e.x, "bz_vf", "(float)({})"), "vf"
            if e.x.dtype == BOOL:
                return f"bz_vm2f({self.vx(e.x)})", "vf"
            return self.vx(e.x), "vf"
        if isinstance(e, Reduce):
            return self.vreduce(e), "vf"
        raise BrazeError(f"codegen bug: cannot vectorize {type(e).__name__}")

    def unit_stride(self, e: Load) -> bool:
        """The load reads consecutive elements as the vector loop's variable steps."""
        from ..schedule.default import coeff
        poly, extra = e.index
        c = coeff(poly, self.vvar)
        return isinstance(c, int) and c == 1 and (extra is None or self.vvar not in self.flv(extra))

    def by_lane(self, e, vtype="bz_vf", conv="{}") -> str:
        """A vector of ``conv`` of ``e`` (a gathered load, a random number) computed lane by lane
        in scalar code, the vector loop's variable renamed to each lane's."""
        v = self.vvar
        name = self.tmp("g")
        lane = self.tmp("l")
        self.line(f"{vtype} {name};")
        self.line(f"for (int {lane} = 0; {lane} < {self.vl}; {lane}++) {{")
        self.ind += 1
        saved = self.vvar, dict(self.rename), self.vec_vars
        self.rename[v.name] = f"({self.rename.get(v.name, v.name)} + {lane})"  # atop a reduction copy's v + k*VL
        self.vvar, self.vec_vars = None, set()
        self.push(barrier=v)
        self.line(f"{name}[{lane}] = " + conv.format(self.sexpr(e)) + ";")
        self.pop()
        self.vvar, self.rename, self.vec_vars = saved
        self.ind -= 1
        self.line("}")
        return name

    # --- statements -----------------------------------------------------------
    def stmt(self, s):
        if isinstance(s, For):
            self.for_(s)
        elif isinstance(s, Store):
            self.store(s)
        elif isinstance(s, Let):
            code, vec = self.emit(s.value)
            t = "bz_vf" if vec and s.value.dtype != BOOL else ("bz_vi" if vec else ctype(s.var.dtype))
            self.line(f"const {t} {s.var.name} = {code};")
            if vec:
                self.vec_vars.add(s.var.name)
        elif isinstance(s, L.Alloc):
            if s not in self.hoisted:
                self.alloc(s.buffer)
                self.frees[-1].append(s.buffer)
                # the rest of the block runs only with the buffer (the caller reports the failure)
                self.line(f"if (!{buffer_cname(s.buffer)}) {_FAIL} else {{")
        else:
            raise BrazeError(f"cannot emit statement {type(s).__name__}")

    def store(self, s: Store):
        if not s.flat:
            from ..schedule.default import flat_offset
            s = Store(s.buffer, flat_offset(s.buffer, s.index), s.value, True)
        sfx = HALF_SFX.get(s.buffer.dtype)
        if sfx is not None:  # stage widen: the value is bf16(v) / f16(v), rounded here
            if not (isinstance(s.value, Cast) and s.value.dtype == s.buffer.dtype):
                raise BrazeError(f"codegen bug: a store into {s.buffer.dtype.name} of an unrounded value "
                                 "(stage widen did not run)")
            where = f"{buffer_cname(s.buffer)}[{self.offset(s.index)}]"
            moved = _moved(s.value, s.buffer.dtype)
            if moved is not None and (self.vvar is None or self.unit_stride(moved)):
                # a 16-bit element stored as it was loaded (a permute, a copy): its bits, not a
                # round trip through float32, which costs the rounding and quiets a NaN's payload
                src = f"{buffer_cname(moved.buffer)}[{self.offset(moved.index)}]"
                self.line(f"bz_mv16(&{where}, &{src});" if self.vvar is not None else f"{where} = {src};")
            elif self.vvar is not None:
                self.line(f"bz_st_{sfx}(&{where}, {self.vx(s.value.x)});")
            else:
                self.line(f"{where} = bz_f32_to_{sfx}({self.sx(s.value.x)});")
            return
        if self.vvar is not None:
            code, vec = self.emit(s.value)
            if not vec:
                code = self.vx(s.value)
            if s.buffer.dtype == BOOL:
                self.line(f"bz_st_mask(&{buffer_cname(s.buffer)}[{self.offset(s.index)}], {code});")
                return
            flag = self.stream.get(s.buffer.name)
            if flag:
                self.line(f"bz_st_nt(&{buffer_cname(s.buffer)}[{self.offset(s.index)}], {code}, {flag});")
            else:
                self.line(f"bz_st(&{buffer_cname(s.buffer)}[{self.offset(s.index)}], {code});")
            return
        self.line(f"{buffer_cname(s.buffer)}[{self.offset(s.index)}] = {self.sx(s.value)};")

    def alloc(self, b):
        t = ctype(b.dtype)
        self.line(f"{t} *{buffer_cname(b)} = ({t} *)bz_malloc_n({self.ic(b.numel())}, sizeof({t}));")

    def body(self, stmts):
        """``stmts`` as a C block's statements; the buffers they allocate are freed at its end."""
        self.frees.append([])
        self.jam_sums(stmts)
        for s in stmts:
            self.stmt(s)
        for b in reversed(self.frees.pop()):  # each closes the "if allocated" brace opened after it
            self.line("}")
            self.line(f"free({buffer_cname(b)});")

    def invariant_allocs(self, f: For) -> list:
        """Allocs inside ``f`` whose size no loop variable changes: made once before the loop
        (once per thread for a parallel one) instead of once per iteration. Their contents do
        not live across iterations: stage ``keep`` fills a row buffer before each read of it."""
        out = [s for s in L.walk_stmts(f.body) if isinstance(s, L.Alloc) and s not in self.hoisted
               and not any(L.is_loop_var(v) for d in s.buffer.shape for v in S.free_syms(d))]
        self.hoisted.update(out)
        return out

    def accumulated(self, e: Binary, terms: list):
        """The float vector sum ``e`` of three or more ``terms``, added left to right into one
        variable, as the expression would: gcc spilled the same sum written as a chain of constants."""
        acc = self.tmp("acc")
        self.line(f"bz_vf {acc} = {self.vx(terms[0])};")
        for t in terms[1:]:
            self.line(f"{acc} = ({acc} + {self.vx(t)});")
        self.scopes[-1][e] = res = (acc, True)
        return res

    def jammed(self, f: For, copies: int):
        """The ``copies`` whole vectors of the jam loop ``f`` (all of them), each emitted in a scope
        of its own at its offset, their lines then interleaved one by one: each copy's lines keep
        their order, and no copy reads another's temporaries. No C loop around them: gcc hoisted
        the broadcasts out of even a one-trip loop, then spilled them."""
        v = f.var.name
        saved_vvar, saved_rename, saved_lines = self.vvar, dict(self.rename), self.lines
        self.vvar, self.accumulate = f.var, True
        parts = []
        for k in range(copies):
            self.lines = []
            self.rename[v] = f"({v} + {k * self.vl})" if k else v
            self.push(barrier=f.var)
            self.body(f.body)
            self.pop()
            parts.append(self.lines)
        self.vvar, self.rename, self.lines, self.accumulate = saved_vvar, saved_rename, saved_lines, False
        if any(line.rstrip().endswith(("{", "}")) for part in parts for line in part):  # a lane loop (a gather)
            self.lines.extend(line for part in parts for line in part)  # blocks do not interleave
            return
        self.lines.extend(line for group in itertools.zip_longest(*parts) for line in group if line is not None)

    def for_(self, f: For):
        v = f.var.name
        n = self.tmp("n")
        self.line(f"const int64_t {n} = {self.ic(f.extent)};")
        if f.kind == "vector" and self.vl and self.vvar is None:
            self.line("{")
            self.ind += 1
            self.line(f"int64_t {v} = 0;")
            # a jam loop's extent is a constant: its whole vectors all go side by side, in no C loop
            whole = f.extent // self.vl if f.jam and isinstance(f.extent, int) else 0
            if whole > 1:
                self.jammed(f, whole)
                if f.extent % self.vl:
                    self.line(f"{v} = {whole * self.vl};")
            else:
                self.line(f"for (; {v} + {self.vl} <= {n}; {v} += {self.vl}) {{")
                self.ind += 1
                saved = self.vvar
                self.vvar = f.var
                self.push(barrier=f.var)
                self.body(f.body)
                self.pop()
                self.vvar = saved
                self.ind -= 1
                self.line("}")
            if not (whole > 1 and f.extent % self.vl == 0):
                self.line(f"for (; {v} < {n}; {v}++) {{")
                self.ind += 1
                self.push(barrier=f.var)
                saved_tail, self.tail_of = self.tail_of, f.var  # its reductions as vreduce's lanes do them
                self.body(f.body)
                self.tail_of = saved_tail
                self.pop()
                self.ind -= 1
                self.line("}")
            self.ind -= 1
            self.line("}")
            return
        allocs = self.invariant_allocs(f)
        # streamed stores drain (sfence) on each thread before the region ends
        fence = f.kind == "parallel" and bool(self.stream)
        block = bool(allocs) or fence
        if block:
            if f.kind == "parallel":
                cond = f" if({self.ic(f.work)} >= {f.grain})" if f.work is not None else ""
                self.line(f"#pragma omp parallel{cond}")
            self.line("{")
            self.ind += 1
            for a in allocs:
                self.alloc(a.buffer)
            if allocs:
                ok = self.tmp("bz_ok")
                self.line(f"const int {ok} = " + " && ".join(f"{buffer_cname(a.buffer)} != NULL" for a in allocs)
                          + ";")
                self.line(f"if (!{ok}) {_FAIL}")
        if f.kind == "parallel":
            cond = f" if({self.ic(f.work)} >= {f.grain})" if f.work is not None and not block else ""
            self.line(f"#pragma omp {'for' if block else 'parallel for'} schedule(static){' nowait' if fence else ''}"
                      f"{cond}")
        elif f.kind == "unroll":
            self.line("#pragma GCC unroll 4")
        self.line(f"for (int64_t {v} = 0; {v} < {n}; {v}++) {{")
        self.ind += 1
        if allocs:  # a thread without its buffers skips its iterations (every thread meets the omp for)
            self.line(f"if (!{ok}) continue;")
        self.push(barrier=f.var)
        self.body(f.body)
        self.pop()
        self.ind -= 1
        self.line("}")
        if block:
            if fence:
                self.line("bz_sfence();")
            for a in allocs:
                self.line(f"free({buffer_cname(a.buffer)});")
            self.ind -= 1
            self.line("}")


def _sum_terms(e) -> list | None:
    """The terms of ``e`` if it is a float32 sum of three or more, left-deep (``(a + b) + c``),
    in the order they are added; else None."""
    terms = []
    while isinstance(e, Binary) and e.op == "add" and e.dtype == F32:
        terms.append(e.b)
        e = e.a
    if len(terms) < 2:
        return None
    terms.append(e)
    return terms[::-1]


def require_flat(kernel: Kernel, run: str) -> None:
    """An emitter emits what it is given: a kernel still read through per-dim indices was not scheduled."""
    if any(isinstance(x, Load) and not x.flat for s in L.walk_stmts(kernel.body) for e in L.stmt_exprs(s)
           for x in L.walk(e)):
        raise BrazeError(f"kernel {kernel.name} reads through per-dim indices: it has not been scheduled",
                         hint=f"this is a braze bug: run {run}, which emits what it is given")


def kernel_to_c(kernel: Kernel, isa=None) -> str:
    """C source of one kernel: ``static void <name>(buffers..., int64_t syms...)``, emitted as
    given: schedule it first (``braze.schedule.schedule``, or the pipeline's kernel stages)."""
    require_flat(kernel, "braze.schedule.schedule (at least its flatten stage) before kernel_to_c")
    vb = vector_bytes_of(isa)
    g = _Gen(kernel, vb)
    streamed = streamed_outputs(kernel) if vb and kernel.stream is not None else []
    for b in streamed:
        g.stream[b.name] = flag = f"nt_{buffer_cname(b)}"
        g.line(f"const int {flag} = (double)({g.ic(b.numel())}) * {b.dtype.itemsize} >= {kernel.stream}.0;")
    g.body(kernel.body)
    if streamed:
        g.line("bz_sfence();")
    g.line("return bz_fail;")
    return (f"{_KERNEL_LINKAGE} int {kernel.name}({_params(kernel)}) {{\n"
            "    int bz_fail = 0; /* KERNEL_NO_MEMORY | KERNEL_BAD_INDEX | KERNEL_DIV_ZERO */\n"
            + "\n".join(g.lines) + "\n}\n")


# static, unless the model compiles as several translation units (UNITS_C)
_KERNEL_LINKAGE = "BZ_KERNEL"


def _params(kernel: Kernel) -> str:
    return ", ".join(f"{t} {n}" for t, n in kernel_signature(kernel)) or "void"


def kernel_prototype(kernel: Kernel) -> str:
    """The kernel's declaration, for host code in another translation unit."""
    return f"{_KERNEL_LINKAGE} int {kernel.name}({_params(kernel)});\n"


__all__ = ["c_prelude", "kernel_entry", "kernel_prototype", "kernel_signature", "kernel_to_c", "require_flat",
           "vector_bytes_of"]


def _bitcast(x: str, src: DType, dst: DType) -> str:
    """C (and CUDA C++) for x's bits read as dst, of src's width: a float's bits go through
    braze_vec.h's memcpy helpers; between integers of one width a conversion keeps the bits."""
    bits = {DType.float32: f"bz_f2i_bits({x})", DType.float64: f"bz_d2i_bits({x})"}.get(src, x)
    if dst is DType.float32:
        return f"bz_i2f_bits((int32_t)({bits}))"
    if dst is DType.float64:
        return f"bz_i2d_bits((int64_t)({bits}))"
    return f"(({ctype(dst)})({bits}))"

