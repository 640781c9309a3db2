"""C code that checks an entry's inputs and binds the symbols from their shapes.

It mirrors ``braze.reference.bind_symbols`` so the native entry and the
reference interpreter reject the same inputs with the same words. The C uses
the integer helpers of braze_vec.h (``bz_floormod``, via ``c_prelude``).
"""

from __future__ import annotations

from ..errors import BrazeError
from ..ir import sym as S
from ..ir.constraints import ConstraintStore
from ..ir.graph import Function, input_count_message
from ..ir.types import DType
from .c_expr import c_sym_name, int_expr
from .c_types import ctype

DTYPE_CODE = {d: i for i, d in enumerate(DType)}

# the names Python users see (DType member names), indexed by dtype code
C_DTYPE_NAMES = ("static inline const char *braze_dtype_long_name(int32_t d) {\n"
                 f"    static const char *const n[] = {{{', '.join(chr(34) + d.name + chr(34) for d in DType)}}};\n"
                 f"    return (d >= 0 && d < {len(DType)}) ? n[d] : \"unknown\";\n}}\n")


def _c_str(s: str) -> str:
    s = s.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("\n", "\\n")
    return '"' + s + '"'


def fail_c(code: str, fmt: str, *args: str) -> str:
    """``BRAZE_FAIL`` with a message; in ``fmt``, ``%PLD`` is a long long and ``%PS`` a string."""
    c_fmt = _c_str(fmt).replace("%%PLD", "%lld").replace("%%PS", "%s")
    return f"BRAZE_FAIL({code}, {c_fmt}{''.join(f', {x}' for x in args)});"


def validation_c(func: Function, constraints: ConstraintStore, notes: dict | None = None,
                 value_symbols: dict | None = None) -> tuple[list[str], list[S.Sym]]:
    """Lines of C for the entry's start, and the symbols they bind (as ``int64_t sym_<name>``).

    ``notes``: the module's ``input_notes``; a rejected dim's note becomes the message's hint.
    ``value_symbols``: the module's; those symbols are read from the inputs' elements (host memory).
    """
    value_symbols = value_symbols or {}
    n = len(func.params)
    notes = notes or {}
    out = [f"if (n_inputs != {n}) "
           + fail_c("BRAZE_ERR_SHAPE", f"{input_count_message(func)}; got %PLD", "(long long)n_inputs")]
    bound: dict[str, S.Sym] = {}
    bound_at: dict[str, tuple[str, int]] = {}
    pending = []
    for i, p in enumerate(func.params):
        where = f"\n  where: input %{p.name} of @{func.name}, declared {p.type}"
        t = f"inputs[{i}]"
        out.append(f"if ({t}.ndim != {p.rank}) " + fail_c(
            "BRAZE_ERR_RANK", f"input %{p.name} has rank %PLD, expected rank {p.rank}{where}", f"(long long){t}.ndim"))
        out.append(f"if ({t}.dtype != {DTYPE_CODE[p.dtype]}) " + fail_c(
            "BRAZE_ERR_DTYPE", f"input %{p.name} has dtype %PS, expected {p.dtype.name}{where}\n  hint: convert it to {p.dtype.name}",
            f"braze_dtype_long_name({t}.dtype)"))
        for axis, d in enumerate(p.shape):
            dim = f"{t}.shape[{axis}]"
            if isinstance(d, int):
                note = notes.get((func.name, p.name, axis))
                out.append(f"if ({dim} != {d}) " + fail_c(
                    "BRAZE_ERR_SHAPE", f"input %{p.name} dim {axis} is %PLD, expected {d}{where}"
                    + (f"\n  hint: {note}" if note else ""), f"(long long){dim}"))
            elif isinstance(d, S.Sym) and d.name not in bound:
                bound[d.name] = d
                bound_at[d.name] = (p.name, axis)
                out.append(f"int64_t {c_sym_name(d)} = {dim};")
            elif isinstance(d, S.Sym):
                out.append(f"if ({dim} != {c_sym_name(d)}) " + fail_c(
                    "BRAZE_ERR_SHAPE",
                    f"input %{p.name} dim {axis} is %PLD, but symbol '{d.name}' was already bound to %PLD by an "
                    f"earlier dim{where}\n  hint: every dim named '{d.name}' must have the same size",
                    f"(long long){dim}", f"(long long){c_sym_name(d)}"))
            else:
                pending.append((p, axis, d, dim, where))
    params = {p.name: (i, p) for i, p in enumerate(func.params)}
    for (fn, pname, idx), sname in sorted(value_symbols.items()):
        if fn != func.name:
            continue
        i, p = params[pname]
        v = f"((const {ctype(p.dtype)} *)inputs[{i}].data)[{idx}]"
        v = f"bz_ftoi64((double){v})" if p.dtype.is_float else f"(int64_t){v}"
        if sname not in bound:  # an element read as a size: the range checks below cover it
            bound[sname] = constraints.symbol(sname)
            bound_at[sname] = (pname, -1 - idx)
            out.append(f"int64_t {c_sym_name(bound[sname])} = {v};")
        else:
            out.append(f"if ({v} != {c_sym_name(bound[sname])}) " + fail_c(
                "BRAZE_ERR_SHAPE", f"input %{pname} element {idx} is %PLD, but symbol '{sname}' was already bound to "
                f"%PLD\n  where: input %{pname} of @{func.name}, declared {p.type}", f"(long long){v}",
                f"(long long){c_sym_name(bound[sname])}"))
    for p, axis, d, dim, where in pending:
        missing = [s.name for s in S.free_syms(d) if s.name not in bound]
        if missing:
            raise BrazeError(f"input %{p.name} dim {axis} is the expression {d}, but its symbols "
                             f"{', '.join(missing)} are not the plain size of any input dim",
                             where=f"@{func.name}", hint="give each symbol a dim of its own in some input")
        out.append(f"if ({dim} != {int_expr(d)}) " + fail_c(
            "BRAZE_ERR_SHAPE", f"input %{p.name} dim {axis} is %PLD, but must equal {d} = %PLD{where}",
            f"(long long){dim}", f"(long long){int_expr(d)}"))
    env_fmt = ", ".join(f"{k}=%PLD" for k in sorted(bound))
    env_args = [f"(long long){c_sym_name(bound[k])}" for k in sorted(bound)]
    prefix = f"inputs of @{func.name} break the model's shape constraints: "
    tail = f"\n  where: @{func.name} with {env_fmt}"
    # in name order: the order symbols and facts were recorded in can follow string hashing (it
    # differed between processes), and the C, the cache key with it, must not
    for s in sorted(constraints.symbols.values(), key=lambda s: s.name):
        if s.name not in bound:
            continue
        conds = [f"{c_sym_name(s)} < {s.lo}"] + ([f"{c_sym_name(s)} > {s.hi}"] if s.hi is not None else [])
        note = notes.get((func.name, *bound_at[s.name]))
        out.append(f"if ({' || '.join(conds)}) " + fail_c(
            "BRAZE_ERR_RANGE", prefix + f"{s.name} = %PLD is outside its range {s.range_str()}" + tail
            + (f"\n  hint: {note}" if note else ""), f"(long long){c_sym_name(s)}", *env_args))
    out += fact_checks(constraints, set(bound), None, prefix, tail, env_args)
    return out, list(bound.values())


def fact_checks(constraints: ConstraintStore, bound: set, new: str | None, prefix: str, tail: str,
                env_args: list) -> list[str]:
    """C that fails when a fact of the store (an equality or a divisibility) does not hold, for each fact
    whose symbols are all ``bound`` (and which uses the symbol ``new``, when given)."""
    out = []
    for f in sorted(constraints.facts, key=lambda f: (f[0], *map(str, f[1:]))):
        if f[0] == "range":
            continue
        syms = {x.name for x in S.free_syms(f[1]) | S.free_syms(f[2] if f[0] == "eq" else 0)}
        if not syms <= bound or (new is not None and new not in syms):
            continue
        if f[0] == "eq":
            a, b = int_expr(f[1]), int_expr(f[2])
            out.append(f"if ({a} != {b}) " + fail_c(
                "BRAZE_ERR_CONSTRAINT",
                prefix + f"{f[1]} == {f[2]} must hold, but {f[1]} = %PLD and {f[2]} = %PLD" + tail,
                f"(long long)({a})", f"(long long)({b})", *env_args))
        elif f[0] == "div":
            a = int_expr(f[1])
            out.append(f"if (bz_floormod({a}, {f[2]}) != 0) " + fail_c(
                "BRAZE_ERR_CONSTRAINT", prefix + f"{f[1]} must be divisible by {f[2]}, but it is %PLD" + tail,
                f"(long long)({a})", *env_args))
    return out
