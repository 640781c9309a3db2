"""C code of loop-IR reductions: a mixin of the kernel emitter (``c_kernel._Gen``).

Scalar reductions (``sreduce``), float32 sums along a contiguous innermost loop in vectors
(``sreduce_vector``), reductions with one output per vector lane (``vreduce``), and sibling
vector sums over the same loops computed in one loop nest (``jam_sums``).
"""

from __future__ import annotations

import math

from ..ir import loop as L
from ..ir.loop import Const, Reduce, Store
from ..ir.types import DType
from .c_types import INT_LIMITS, UNSIGNED, ctype

F32 = DType.float32
NACC = 4  # independent vector accumulators of a contiguous float32 reduction


class ReductionsC:
    """Reduction emitters; the host class gives ``line``, ``tmp``, ``push``/``pop``, ``emit``,
    ``sx``/``vx``, ``const``, ``lookup``, ``varying``, ``ic`` and the loop state."""

    def _init(self, op, dt) -> str:
        if op == "sum":
            return self.const(Const(0, dt))
        if op == "prod":
            return self.const(Const(1, dt))
        if dt.is_float:
            return self.const(Const(-math.inf if op == "max" else math.inf, dt))
        lo, hi = INT_LIMITS[dt]
        return lo if op == "max" else hi

    def _combine(self, op, acc, v, dt) -> str:
        if op in ("sum", "prod"):
            sym = "+" if op == "sum" else "*"
            u = UNSIGNED.get(dt)
            if u:  # wrap on overflow
                return f"{acc} = ({ctype(dt)})(({u}){acc} {sym} ({u})({v}));"
            return f"{acc} {sym}= {v};"
        if dt.is_float:
            f = "f" if dt == F32 else "d"
            return f"{acc} = bz_{op}{f}({acc}, {v});"
        return f"{acc} = ({v} {'>' if op == 'max' else '<'} {acc}) ? {v} : {acc};"

    def _open_loops(self, loops):
        for v, ext in loops:
            n = self.tmp("n")
            self.line(f"const int64_t {n} = {self.ic(ext)};")
            self.line(f"for (int64_t {v.name} = 0; {v.name} < {n}; {v.name}++) {{")
            self.ind += 1
            self.push()

    def _close_loops(self, loops):
        for _ in loops:
            self.pop()
            self.ind -= 1
            self.line("}")

    def sreduce(self, e: Reduce) -> str:
        dt = e.dtype
        if e.vector and self.vl and dt == F32 and not (self.tail_of is not None and self.tail_of in self.flv(e)):
            return self.sreduce_vector(e)
        acc = self.tmp("acc")
        if e.op in ("argmax", "argmin"):
            bt = ctype(e.body.dtype)
            best = self.tmp("best")
            self.line(f"int64_t {acc} = -1;")
            self.line(f"{bt} {best} = 0;")
            self._open_loops(e.loops)
            v = self.sx(e.body)
            cmpop = ">" if e.op == "argmax" else "<"
            pos = e.loops[-1][0].name
            self.line(f"if ({acc} < 0 || {v} {cmpop} {best} || ({v} != {v} && {best} == {best})) "
                      f"{{ {best} = {v}; {acc} = {pos}; }}")
            self._close_loops(e.loops)
            self.line(f"if ({acc} < 0) {acc} = 0;")
            return acc
        wide = e.op == "sum" and dt == F32  # float32 sums accumulate in double
        self.line(f"{'double' if wide else ctype(dt)} {acc} = {self._init(e.op, dt)};")
        saved = self.vvar
        self.vvar = None
        self._open_loops(e.loops)
        self.line(self._combine(e.op, acc, self.sx(e.body), dt))
        self._close_loops(e.loops)
        self.vvar = saved
        return self._narrow(acc, wide)

    def _vbody(self, e: Reduce, r, lane0: str):
        """The reduction's body as a vector at ``r + lane0`` (a fresh scope: nothing that depends
        on ``r`` is shared with another copy)."""
        saved = self.vvar, self.vec_vars, dict(self.rename)
        self.vvar, self.vec_vars = r, set()
        if lane0 != "0":
            self.rename[r.name] = f"({r.name} + {lane0})"
        self.push(barrier=r)
        v, isv = self.emit(e.body)
        self.pop()
        self.vvar, self.vec_vars, self.rename = saved
        return v if isv else f"bz_splat({v})"

    def sreduce_vector(self, e: Reduce) -> str:
        """A float32 reduction over a contiguous innermost loop, in float32 vectors: ``NACC``
        independent accumulators (the adds overlap instead of waiting on each other), then
        one, then a scalar tail of fewer than VL elements (a sum's in double, so a short row
        sums as vreduce's lanes do); combined pairwise at the end. A sum's error is at most
        (n/(NACC*VL) + NACC + log2(VL) + 2) * 2^-24 * sum|x| (docs/semantics.md)."""
        op, vl = e.op, self.vl
        init = self._init(op, F32)
        step = {"sum": "{a} += {v};", "prod": "{a} *= {v};", "max": "{a} = bz_vmax({a}, {v});",
                "min": "{a} = bz_vmin({a}, {v});"}[op]
        join = {"sum": "({a} + {b})", "prod": "({a} * {b})", "max": "bz_vmax({a}, {b})",
                "min": "bz_vmin({a}, {b})"}[op]
        wide = op == "sum"
        acc = self.tmp("acc")
        self.line(f"{'double' if wide else 'float'} {acc} = {init};")
        vaccs = [self.tmp("vacc") for _ in range(NACC)]
        for a in vaccs:
            self.line(f"bz_vf {a} = bz_splat({init});")
        self._open_loops(e.loops[:-1])
        r, ext = e.loops[-1]
        n = self.tmp("n")
        self.line(f"const int64_t {n} = {self.ic(ext)};")
        self.line("{")  # r's scope: a kernel may reduce over the same loop twice (var's two passes)
        self.ind += 1
        self.line(f"int64_t {r.name} = 0;")
        self.line(f"for (; {r.name} + {NACC * vl} <= {n}; {r.name} += {NACC * vl}) {{")
        self.ind += 1
        for k, a in enumerate(vaccs):
            self.line("{")  # a block per copy: each declares what its body computes
            self.ind += 1
            self.line(step.format(a=a, v=self._vbody(e, r, str(k * vl))))
            self.ind -= 1
            self.line("}")
        self.ind -= 1
        self.line("}")
        self.line(f"for (; {r.name} + {vl} <= {n}; {r.name} += {vl}) {{")
        self.ind += 1
        self.line(step.format(a=vaccs[0], v=self._vbody(e, r, "0")))
        self.ind -= 1
        self.line("}")
        self.line(f"for (; {r.name} < {n}; {r.name}++) {{")
        self.ind += 1
        self.push(barrier=r)
        saved = self.vvar
        self.vvar = None
        self.line(self._combine(op, acc, self.sx(e.body), F32))
        self.vvar = saved
        self.pop()
        self.ind -= 1
        self.line("}")
        self.ind -= 1
        self.line("}")
        self._close_loops(e.loops[:-1])
        while len(vaccs) > 1:
            half = len(vaccs) // 2
            for a, b in zip(vaccs[:half], vaccs[half:]):
                self.line(f"{a} = {join.format(a=a, b=b)};")
            vaccs = vaccs[:half]
        h = {"sum": "bz_hsum", "prod": "bz_hprod", "max": "bz_hmax", "min": "bz_hmin"}[op]
        if not wide:
            self.line(self._combine(op, acc, f"{h}({vaccs[0]})", F32))
            return acc
        name = self.tmp("sum")
        self.line(f"const float {name} = bz_hsum({vaccs[0]}) + (float){acc};")
        return name

    def _narrow(self, acc, wide):
        if not wide:
            return acc
        name = self.tmp("sum")
        self.line(f"const float {name} = (float){acc};")
        return name

    def vreduce(self, e: Reduce) -> str:
        """One output per lane. A sum accumulates in double as sreduce's does: the same value
        computed by both (a tail, or a second output of the kernel) has the same bits."""
        acc = self.tmp("vacc")
        if e.op == "sum":
            self.line(f"bz_vd2 {acc} = (bz_vd2){{0}};")
        else:
            self.line(f"bz_vf {acc} = bz_splat({self._init(e.op, F32)});")
        self._open_loops(e.loops)
        v = self.vx(e.body)
        self.line({"sum": f"{acc} += __builtin_convertvector({v}, bz_vd2);", "prod": f"{acc} *= {v};",
                   "max": f"{acc} = bz_vmax({acc}, {v});", "min": f"{acc} = bz_vmin({acc}, {v});"}[e.op])
        self._close_loops(e.loops)
        if e.op != "sum":
            return acc
        name = self.tmp("vsum")
        self.line(f"const bz_vf {name} = __builtin_convertvector({acc}, bz_vf);")
        return name

    def jam_sums(self, stmts) -> None:
        """In a vector loop's body: float32 sums with one output per lane (``vreduce``) that the
        stores of ``stmts`` read, over loops of the same extents, computed in one loop nest with
        an accumulator each, so the inputs they share are read once (batch norm's backward sums
        dy and dy * (x - mean) over the rows of an NHWC activation). Each sum's value is then
        found as a common subexpression, with the bits ``vreduce`` gives it; a sum computed alone is
        left to ``vreduce``."""
        if self.vvar is None or not all(isinstance(s, Store) for s in stmts):
            return  # (a Let's value must be defined before the nest reads it)
        groups: dict[tuple, list] = {}
        for s in stmts:
            for e in L.outer_reduces(s.value):
                if e.op == "sum" and e.dtype == F32 and self.varying(e) and self.lookup(e) is None:
                    same = groups.setdefault(tuple(self.ic(ext) for _, ext in e.loops), [])
                    if e not in same:
                        same.append(e)
        for sums in groups.values():
            if len(sums) < 2:
                continue
            accs = [self.tmp("vacc") for _ in sums]
            for a in accs:
                self.line(f"bz_vd2 {a} = (bz_vd2){{0}};")
            loops = sums[0].loops
            self._open_loops(loops)
            for e, a in zip(sums, accs):
                saved = dict(self.rename)
                self.rename.update({v.name: v0.name for (v, _), (v0, _) in zip(e.loops, loops) if v.name != v0.name})
                self.push()  # nothing of one sum's body is shared with another's under another name
                v = self.vx(e.body)
                self.pop()
                self.rename = saved
                self.line(f"{a} += __builtin_convertvector({v}, bz_vd2);")
            self._close_loops(loops)
            for e, a in zip(sums, accs):
                name = self.tmp("vsum")
                self.line(f"const bz_vf {name} = __builtin_convertvector({a}, bz_vf);")
                self.scopes[-1][e] = (name, True)

