"""Walks an exported FX graph and builds a braze function, node by node."""

from __future__ import annotations

import functools
import re
from typing import Any

from ...errors import BrazeError, ModelFormatError, UnsupportedOpError, require
from ...ir import sym as S
from ...ir.graph import Module, SourceLoc, Value
from ...ir.types import DType, TensorType
from ...ops.builder import Builder, unique_names
from .common import ISSUES_HINT, NotProduced, source_loc, tensor_to_numpy, to_braze_dtype

# ---------------------------------------------------------------------------
# sympy (torch's symbolic sizes) -> braze IntLike
# ---------------------------------------------------------------------------


class SymConverter:
    """Converts torch's sympy size expressions to braze expressions."""

    def __init__(self, symbols: dict[str, S.Sym], shape_env=None, pinned: dict[str, int] | None = None):
        self.symbols = symbols  # torch symbol name -> braze Sym
        self.shape_env = shape_env
        self.pinned = pinned or {}  # torch symbol name -> the value it is compiled for
        self._cache: dict = {}

    def __call__(self, x, where: str | None = None):
        import torch
        if isinstance(x, (torch.SymInt, torch.SymBool, torch.SymFloat)):
            node = x.node
            if node.is_nested_int() if hasattr(node, "is_nested_int") else False:
                raise UnsupportedOpError("nested (jagged) sizes are not supported", where=where)
            x = node.expr
        if isinstance(x, bool):
            return x
        if isinstance(x, int):
            return x
        if isinstance(x, float):
            return x
        key = x
        if key in self._cache:
            return self._cache[key]
        if self.shape_env is not None:
            try:
                x = self.shape_env.replace(x)
            except Exception:
                pass
        out = self._conv(self.pin(x), where)
        self._cache[key] = out
        return out

    def pin(self, e):
        """``e`` with the pinned symbols put in."""
        if self.pinned and any(s.name in self.pinned for s in getattr(e, "free_symbols", ())):
            import sympy
            e = e.xreplace({s: sympy.Integer(self.pinned[s.name]) for s in e.free_symbols if s.name in self.pinned})
        return e

    def _conv(self, e, where):
        import sympy
        if isinstance(e, sympy.Integer) or (isinstance(e, sympy.Number) and e.is_integer):
            return int(e)
        if e is sympy.true:
            return True
        if e is sympy.false:
            return False
        if isinstance(e, sympy.Float) or isinstance(e, sympy.Rational):
            return float(e)
        if isinstance(e, sympy.Symbol):
            s = self.symbols.get(e.name)
            if s is None:
                if e.name.startswith("u"):
                    raise UnsupportedOpError(
                        f"the size '{e.name}' depends on tensor data (an unbacked symbol); braze needs sizes "
                        "that follow from the input shapes", where=where,
                        hint="avoid data-dependent shapes (nonzero, boolean masks, .item()) in the model")
                s = S.Sym(_sanitize_sym(e.name))
                self.symbols[e.name] = s
            return s
        name = type(e).__name__
        if name in ("TruncToInt", "FloorToInt") and len(e.args) == 1 and isinstance(e.args[0], sympy.Mul):
            out = self._scaled(e.args[0], where)  # an interpolation's size: floor(s * ToFloat(n))
            if out is not None:
                return out
        args = [self._conv(a, where) for a in e.args]
        if isinstance(e, sympy.Add):
            out = 0
            for a in args:
                out = S.add(out, a)
            return out
        if isinstance(e, sympy.Mul):
            out = 1
            for a in args:
                if isinstance(a, float):
                    raise UnsupportedOpError(f"non-integer size expression {e}", where=where)
                out = S.mul(out, a)
            return out
        if isinstance(e, sympy.Pow):
            base, ex = args
            if isinstance(ex, int) and ex >= 0:
                out = 1
                for _ in range(ex):
                    out = S.mul(out, base)
                return out
        if name in ("FloorDiv", "IntTrueDiv", "CleanDiv"):
            return S.floordiv(args[0], args[1])
        if name in ("Mod", "PythonMod"):
            return S.mod(args[0], args[1])
        if name == "Min":
            return S.smin(*args)
        if name == "Max":
            return S.smax(*args)
        if name == "CeilDiv":
            return S.mul(-1, S.floordiv(S.mul(-1, args[0]), args[1]))
        if name in ("TruncToInt", "FloorToInt", "CeilToInt", "RoundToInt", "ToFloat", "Identity") and len(args) == 1:
            if isinstance(args[0], (int,)) or S.is_symbolic(args[0]):
                return args[0]
        if name == "Identity":
            return args[0]
        raise UnsupportedOpError(f"size expression '{e}' ({name}) has no braze equivalent", where=where,
                                 hint="braze supports + - * // % min max over sizes")


    def _scaled(self, e, where):
        """floor(c * n) for a float c and an integer size n, kept symbolic (frontend.sizes)."""
        from ..sizes import floor_scaled
        nums = [a for a in e.args if a.is_Number]
        rest = [a for a in e.args if not a.is_Number]
        if len(nums) != 1 or len(rest) != 1:
            return None
        n = self._conv(rest[0], where)
        if not (isinstance(n, int) or S.is_symbolic(n)):
            return None
        out = floor_scaled(n, float(nums[0]))
        if out is None:
            raise UnsupportedOpError(f"the size floor({nums[0]} * {n}) has no exact integer form braze can keep "
                                     "symbolic", where=where,
                                     hint="pass an explicit size (F.interpolate(size=...)) instead of this scale")
        return out


def linear_form(e):
    """(s, a, b) when the sympy expression ``e`` is ``a*s + b`` in one symbol ``s``, with integers
    a >= 1 and b; else None. The importer recovers ``s`` from such an input dim. Only sums and
    products of integers and the symbol qualify: ``FloorDiv``, ``Mod``, ``Max``, ``Min`` and the
    like are not linear (and substituting a value into them can divide by zero)."""
    import sympy
    if len(e.free_symbols) != 1 or not _sums_and_products(e):
        return None
    s = next(iter(e.free_symbols))
    try:
        poly = sympy.Poly(e, s)
    except sympy.PolynomialError:
        return None
    if poly.degree() != 1:
        return None
    a, b = poly.coeff_monomial(s), poly.coeff_monomial(1)
    if a.is_Integer and b.is_Integer and int(a) >= 1:
        return s, int(a), int(b)
    return None


def _sums_and_products(e) -> bool:
    """``e`` is built from integers and symbols with + and * alone."""
    import sympy
    if e.is_Symbol or e.is_Integer:
        return True
    if isinstance(e, (sympy.Add, sympy.Mul)):
        return all(_sums_and_products(a) for a in e.args)
    return False


def _sanitize_sym(name: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not s or not (s[0].isalpha() or s[0] == "_"):
        s = "d_" + s
    return s


def source_names(shape_env) -> dict[str, list[str]]:
    """torch symbol name -> the names of the sources it was read from (``L['x'].size()[0]``)."""
    out: dict[str, list[str]] = {}
    for sym, sources in getattr(shape_env, "var_to_sources", {}).items():
        names = []
        for src in sources:
            try:
                names.append(src.name() if callable(src.name) else src.name)
            except Exception:  # a source torch cannot name: skip it
                continue
        out[str(sym)] = names
    return out


def dim_names(ep) -> dict[str, str]:
    """torch symbol name -> the user's Dim name, from the shape env's source names."""
    out: dict[str, str] = {}
    env = None
    for n in ep.graph.nodes:
        if n.op != "placeholder":
            continue
        v = n.meta.get("val")
        for d in getattr(v, "shape", ()):
            node = getattr(d, "node", None)
            if node is not None and getattr(node, "shape_env", None) is not None:
                env = node.shape_env
                break
        if env is not None:
            break
    if env is None:
        return out, None
    debug = getattr(env, "source_name_to_debug_name", {}) or {}
    for sym, names in source_names(env).items():
        dn = next((debug[nm] for nm in names if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", debug.get(nm) or "")), None)
        if dn:
            out[sym] = dn
    _derived_dim_names(ep, debug.values(), out)
    return out, env


_DERIVED_RE = re.compile(r"\s*(\d+)\s*\*\s*([A-Za-z_]\w*)\s*(?:([+-])\s*(\d+))?\s*")


def _derived_dim_names(ep, debug_names, out: dict) -> None:
    """The root Dim's name for a symbol seen only in derived input dims ('4*hb' -> s2: 'hb'),
    matched by the coefficients a and b of a * s + b."""
    roots: dict = {}
    for dn in debug_names:
        m = _DERIVED_RE.fullmatch(str(dn))
        if m:
            b = int(m.group(4) or 0) * (-1 if m.group(3) == "-" else 1)
            roots.setdefault((int(m.group(1)), b), set()).add(m.group(2))
    if not roots:
        return
    for n in ep.graph.nodes:
        if n.op != "placeholder":
            continue
        for d in getattr(n.meta.get("val"), "shape", ()):
            e = getattr(getattr(d, "node", None), "expr", None)
            if e is None or len(getattr(e, "free_symbols", ())) != 1:
                continue
            sym = next(iter(e.free_symbols))
            a, b = e.coeff(sym), e.subs(sym, 0)
            names = roots.get((int(a), int(b))) if a.is_Integer and b.is_Integer else None
            if names and len(names) == 1 and sym.name not in out:
                out[sym.name] = next(iter(names))


# ---------------------------------------------------------------------------
# the importer
# ---------------------------------------------------------------------------


class GraphInput:
    """What one placeholder of the graph is: a run-time input, a constant tensor, or a token."""

    __slots__ = ("kind", "name", "tensor")

    def __init__(self, kind: str, name: str | None = None, tensor=None):
        self.kind = kind  # "input" | "constant" | "token" | "size" (an integer passed as a 0-d int64 tensor)
        self.name = name
        self.tensor = tensor


class TorchGraph:
    """What the importer reads: an FX graph, the role of each placeholder, and the symbols'
    names and ranges. Built from a torch.export program (``from_exported``) or from a graph that
    torch.compile hands over (``braze.plugin``); both then share one walk and one converter table."""

    def __init__(self, graph, inputs: dict[str, GraphInput], ranges: dict[str, tuple[int, int | None]],
                 names: dict[str, str], shape_env=None, outputs: list[str] | None = None,
                 notes=None, user_ranged: set[str] = frozenset(), pinned: dict[str, int] | None = None,
                 donated: dict[str, int] | None = None):
        self.graph = graph
        self.inputs = inputs  # placeholder name -> role (absent: a run-time input)
        self.ranges = ranges  # torch symbol name -> (lo, hi or None)
        self.names = names  # torch symbol name -> braze symbol name
        self.shape_env = shape_env
        self.outputs = outputs  # the output nodes' names braze returns (None: all)
        self.notes = notes  # (params, symbols, func name) -> input notes, or None
        self.user_ranged = user_ranged
        self.pinned = pinned or {}  # integer arguments compiled for one value, which the caller checks
        # placeholder -> the position of the graph output that is its new value: a buffer the graph
        # writes, whose memory the caller hands over for that output (Module.donated)
        self.donated = donated or {}


def from_exported(ep, names: dict[str, str] | None = None, user_ranged: set[str] | None = None) -> TorchGraph:
    """A ``torch.export.ExportedProgram`` as a TorchGraph: weights and buffers become constants."""
    import sympy
    import torch
    own, shape_env = _dim_names_safe(ep)
    names = {**own, **(names or {})}
    user_ranged = set(own) | set(user_ranged or ())
    consts, state = dict(ep.constants), ep.state_dict
    inputs: dict[str, GraphInput] = {}
    for spec in ep.graph_signature.input_specs:
        if not hasattr(spec.arg, "name"):
            continue
        kind = spec.kind.name
        if kind in ("PARAMETER", "BUFFER", "CONSTANT_TENSOR"):
            t = spec.target
            arr = state[t] if t in state else consts[t] if t in consts else None
            if arr is None:
                raise ModelFormatError(f"exported program has no value for {kind.lower()} '{t}'")
            if not isinstance(arr, torch.Tensor):
                raise UnsupportedOpError(f"{kind.lower()} '{t}' is a {type(arr).__name__}, not a tensor")
            inputs[spec.arg.name] = GraphInput("constant", t, arr)
        elif kind == "TOKEN":
            inputs[spec.arg.name] = GraphInput("token")
        elif kind != "USER_INPUT":
            raise UnsupportedOpError(f"exported input '{spec.arg.name}' of kind {kind} is not supported",
                                     hint=ISSUES_HINT)
    ranges = {k.name: (max(1, _vr_int(vr.lower, 1)), _vr_int(vr.upper, None))
              for k, vr in ep.range_constraints.items() if isinstance(k, sympy.Symbol)}
    outputs = [s.arg.name for s in ep.graph_signature.output_specs if s.kind.name == "USER_OUTPUT"] or None

    def notes(params, symbols, func_name):
        from .dims import input_notes
        return input_notes(ep, params, symbols, user_ranged, func_name)

    return TorchGraph(ep.graph, inputs, ranges, names, shape_env, outputs, notes, user_ranged)


class Importer:
    def __init__(self, tg: TorchGraph):
        self.tg = tg
        self.module = Module()
        self.b = Builder(self.module)
        self.env: dict[Any, Any] = {}
        self.loc: SourceLoc | None = None
        self.node = None
        self.names = tg.names
        self.weights: dict[str, Any] = {}  # constant name in the module -> the torch tensor it copies
        self.conv_sym = SymConverter({}, tg.shape_env, tg.pinned)
        self._setup_symbols()

    # --- symbols ------------------------------------------------------------
    def _setup_symbols(self):
        used = set()
        ranges = self.tg.ranges
        # every symbol in a placeholder shape or a range
        tnames = list(ranges)
        for e in self._input_dims():
            for s in sorted(e.free_symbols, key=str):
                if s.name not in tnames:
                    tnames.append(s.name)
        derived = self._derived_dims()
        for tn in tnames:
            if tn in self.tg.pinned:
                continue
            name = self.names.get(tn) or _sanitize_sym(tn)
            if tn in derived:  # only a*s + b is an input dim: that dim is the symbol (see _derived_dims)
                e, a, b = derived[tn]
                name += f"_x{a}" + (f"_plus{b}" if b > 0 else f"_minus{-b}" if b < 0 else "")
            base, i = name, 1
            while name in used:
                name = f"{base}_{i}"
                i += 1
            used.add(name)
            lo, hi = ranges.get(tn, (1, None))
            if tn in derived:
                store = self.module.constraints
                d = store.add_symbol(S.Sym(name, max(1, a * lo + b), None if hi is None else a * hi + b))
                if a > 1:
                    store.add_divisible(S.add(d, -b), a)  # checked on every call
                self.conv_sym.symbols[tn] = S.floordiv(S.add(d, -b), a)
                self.conv_sym._cache[e] = d
                continue
            s = self.module.constraints.add_symbol(S.Sym(name, lo, hi))
            self.conv_sym.symbols[tn] = s
        self._opaque_dims(set(derived), used)
        self._guarded_equalities()

    def _guarded_equalities(self) -> None:
        """Equalities of sizes that torch's guards hold (``s3*s88 == s38*s97``: a loss's logits
        and labels flattened, which torch checked) become braze facts: shape inference may rely
        on them, and the entry checks them on every call. Only relations between symbols this
        graph reads: a guard that fixes a size to a number is torch's business."""
        import sympy
        known = set(self.conv_sym.symbols) | set(self.tg.pinned)
        for g in getattr(self.tg.shape_env, "guards", ()):
            e = getattr(g, "expr", None)
            if not isinstance(e, sympy.Eq) or not e.lhs.free_symbols or not e.rhs.free_symbols or \
                    not {s.name for s in e.free_symbols} <= known:
                continue
            try:
                a, b = self.sym(e.lhs), self.sym(e.rhs)
            except BrazeError:
                continue
            store = self.module.constraints
            if S.is_symbolic(a) and S.is_symbolic(b) and store.equal(a, b) is None:
                store.add_equal(a, b)

    def _input_dims(self):
        """The sympy expressions of the placeholders' symbolic dims, in order."""
        for n in self.tg.graph.nodes:
            if n.op == "placeholder":
                for d in getattr(n.meta.get("val"), "shape", ()):
                    e = getattr(getattr(d, "node", None), "expr", None)
                    if e is not None:
                        yield self.conv_sym.pin(e)

    def _opaque_dims(self, derived: set, used: set) -> None:
        """An input dim such as ``2*s0*s1`` whose symbols no plain input dim gives (a graph that
        torch.compile cut between two ops, say) becomes a symbol of its own: the entry binds it
        from that dim, and the same expression elsewhere in the graph reads it. Any other use of
        ``s0`` or ``s1`` stays unbound, and the compile says so."""
        import sympy
        plain, exprs = set(derived), []
        for e in self._input_dims():
            if isinstance(e, sympy.Symbol):
                plain.add(e.name)
            elif e.free_symbols and e not in exprs:
                exprs.append(e)
        for e in exprs:
            if {s.name for s in e.free_symbols} <= plain or e in self.conv_sym._cache:
                continue
            text = str(e)
            for tn, sym in self.conv_sym.symbols.items():
                if isinstance(sym, S.Sym):
                    text = re.sub(rf"\b{re.escape(tn)}\b", sym.name, text)
            name = base = "dim_" + re.sub(r"\W+", "_", text.replace("*", "_x_")).strip("_")
            i = 1
            while name in used:
                name, i = f"{base}_{i}", i + 1
            used.add(name)
            self.conv_sym._cache[e] = self.module.constraints.add_symbol(S.Sym(name, 1, None))

    def _derived_dims(self) -> dict:
        """torch symbols that occur in the inputs' shapes only as ``a * s + b`` (a derived
        ``torch.export.Dim``, e.g. ``4 * hb``): torch name -> (that expression, a, b). The
        native entry binds symbols from plain input dims, so that dim becomes the symbol and
        ``s`` is ``(dim - b) // a``, with ``dim - b`` divisible by ``a`` checked on every call."""
        import sympy
        plain, found = set(), {}
        exprs = []
        for e in self._input_dims():
            if isinstance(e, sympy.Symbol):
                plain.add(e.name)
            elif len(e.free_symbols) == 1:
                exprs.append(e)
        for e in exprs:
            form = linear_form(e)
            if form is not None and form[0].name not in plain:
                found.setdefault(form[0].name, (e, form[1], form[2]))
        return found

    def sym(self, x):
        where = str(self.loc) if self.loc else None
        return self.conv_sym(x, where)

    def shape_of(self, fake) -> tuple:
        return tuple(self.sym(d) for d in fake.shape)

    def meta_type(self, fake) -> TensorType:
        where = str(self.loc) if self.loc else None
        return TensorType(to_braze_dtype(fake.dtype, where), self.shape_of(fake))

    # --- the walk -----------------------------------------------------------
    def run(self) -> Module:
        import torch
        from .aten import convert_node

        tg = self.tg
        nodes = list(tg.graph.nodes)
        # user inputs first (in order), then weights on first use
        for n in nodes:
            if n.op != "placeholder":
                continue
            role = tg.inputs.get(n.name)
            self.node, self.loc = n, SourceLoc(name=n.name)
            if role is None or role.kind in ("input", "size"):
                v = n.meta.get("val")
                if isinstance(v, torch.SymInt):  # a size torch passes along: braze reads it from the shapes
                    self.env[n] = self.sym(v)
                    if role is not None and role.kind == "size":  # the entry reads it from a 0-d tensor
                        self._size_input(n.name, self.env[n])
                    continue
                if isinstance(v, torch.SymFloat):  # a float of sizes (a scale factor): computed at run time
                    self.env[n] = _SizeFloat(v.node.expr)
                    continue
                if not isinstance(v, torch.Tensor):
                    if isinstance(v, (int, float, bool)) or v is None:
                        self.env[n] = v  # a constant non-tensor input, baked in
                        continue
                    raise UnsupportedOpError(f"input '{n.name}' is a {type(v).__name__}; braze takes tensor inputs",
                                             hint="pass sizes as tensor shapes, not Python numbers")
                self.env[n] = self.b.param(n.name, self.meta_type(v))
            elif role.kind == "constant":
                self.env[n] = _Lazy(role.name, role.tensor)
            else:
                self.env[n] = None
        user_outputs = tg.outputs
        results, names = [], []
        for n in nodes:
            if n.op == "placeholder":
                continue
            self.node, self.loc = n, source_loc(n)
            if n.op == "output":
                outs = n.args[0]
                flat = list(outs) if isinstance(outs, (list, tuple)) else [outs]
                donors = {q: p for p, q in tg.donated.items()}
                for q, o in enumerate(flat):
                    if o is None or (hasattr(o, "name") and user_outputs and o.name not in user_outputs):
                        continue
                    v = self.value(o)
                    if q in donors and self.donated(self.env.get(self._placeholder(donors[q]))):
                        self.module.donated.setdefault(self.b.func.name, {})[donors[q]] = len(results)
                    if not isinstance(v, Value):
                        if isinstance(v, (int, float, bool)) or S.is_symbolic(v):
                            raise UnsupportedOpError(f"output {o} is a number ({v}), not a tensor",
                                                     where=str(self.loc), hint="return tensors only")
                    results.append(v)
                    names.append(getattr(o, "name", None) or f"output_{len(names)}")
                continue
            if n.op == "get_attr":
                raise UnsupportedOpError(f"graph attribute '{n.target}' (a submodule or higher-order op) is not "
                                         "supported", where=str(self.loc), hint=ISSUES_HINT)
            if n.op != "call_function":
                raise UnsupportedOpError(f"FX node kind '{n.op}' is not supported", where=str(self.loc))
            self.env[n] = convert_node(self, n)
        self.b.ret(*results)
        self.module.output_names[self.b.func.name] = unique_names(names)
        if tg.notes is not None:
            params = {n.name: v for n, v in self.env.items() if getattr(n, "op", None) == "placeholder"
                      and isinstance(v, Value)}
            self.module.input_notes.update(tg.notes(params, self.conv_sym.symbols, self.b.func.name))
        return self.module

    def donated(self, v) -> bool:
        """Whether ``v`` is an input whose memory the caller hands over (``TorchGraph.donated``):
        a converter may then write its new value there (an ``index_put`` of rows, not a copy)."""
        return isinstance(v, Value) and v.producer is None and v.name in self.tg.donated and \
            any(p is v for p in self.b.func.params)

    def _placeholder(self, name: str):
        return next((n for n in self.tg.graph.nodes if n.op == "placeholder" and n.name == name), None)

    def _size_input(self, name: str, sym) -> None:
        """An integer argument the caller passes as a 0-d int64 tensor: its value binds ``sym``
        (``Module.value_symbols``), whatever its size, as a shape would."""
        if not isinstance(sym, S.Sym):
            raise BrazeError(f"integer argument {name} is {sym}, not a symbol of its own")
        p = self.b.param(name, TensorType(DType.int64, ()))
        self.module.value_symbols[(self.b.func.name, p.name, 0)] = sym.name

    def value(self, a):
        """An FX argument as braze: Values for tensors, IntLikes for sizes, lists recursively."""
        import torch.fx as fx
        if isinstance(a, fx.Node):
            if a not in self.env:
                raise BrazeError(f"torch frontend: node '{a.name}' used before it is defined")
            v = self.env[a]
            if isinstance(v, _Lazy):
                lazy = v
                v = self.b.constant(tensor_to_numpy(lazy.tensor, lazy.name), name=lazy.name,
                                    loc=SourceLoc(name=lazy.name))
                self.weights[v.producer.attrs["name"]] = lazy.tensor
                self.env[a] = v
            if isinstance(v, _SizeFloat):
                from .convert import float_value
                v = self.env[a] = float_value(self, v.expr)
            if isinstance(v, NotProduced):
                v = self.env[a] = self._produce(a, v)
            return v
        if isinstance(a, (list, tuple)):
            return type(a)(self.value(x) for x in a)
        return a

    def _produce(self, a, v):
        """An output braze builds only where the graph uses it (``v.make``); one it does not build,
        or cannot, refuses the op whose output it is: the plug-in leaves that op alone to torch
        (``plugin.region.compile_region``), not the node that reads it."""
        import operator
        src = a.args[0] if a.target is operator.getitem and a.args else a
        if v.make is not None:
            try:
                return v.make()
            except BrazeError as e:
                e.op_node = getattr(src, "name", None)
                raise
        from .aten import op_display_name
        e = UnsupportedOpError(f"the {v.what} of {op_display_name(getattr(src, 'target', a.target))} is used, "
                               "but braze does not compute it", where=str(self.loc), hint=ISSUES_HINT)
        e.op_node = getattr(src, "name", None)
        raise e


class _SizeFloat:
    """An input that is a float of sizes, made a 0-d float64 value where it is first used."""
    __slots__ = ("expr",)

    def __init__(self, expr):
        self.expr = expr


class _Lazy:
    __slots__ = ("name", "tensor")

    def __init__(self, name, tensor):
        self.name = name
        self.tensor = tensor


def _vr_int(x, default):
    try:
        import sympy
        if x in (sympy.oo, -sympy.oo) or str(x) in ("int_oo", "-int_oo", "oo", "-oo"):
            return default
        v = int(x)
        if abs(v) > 2 ** 62:
            return default
        return v
    except Exception:
        return default


def _dim_names_safe(ep):
    try:
        return dim_names(ep)
    except Exception:
        return {}, None


MAX_DECOMPOSITION_ROUNDS = 8


def _unsupported_nodes(ep) -> list:
    from .aten import is_supported
    return [n for n in ep.graph.nodes if n.op == "call_function" and not is_supported(n.target)]


@functools.lru_cache(maxsize=1)
def _decompositions() -> dict:
    """torch.export's default decompositions as a plain dict, made once per process: the table
    torch returns is made lazily again at each call and at each lookup (0.2 s and 0.1 s; the OpInfo
    sweep spent 40% of its export time there). Read only."""
    import torch
    return torch.export.default_decompositions().materialize()


def _maybe_decompose(ep):
    """Decompose the ops braze has no converter for (where torch has a decomposition), round after
    round until none is left or none can be decomposed further (a decomposition may produce ops
    that need decomposing in turn: roll -> fmod, ...). Returns (program, unsupported FX nodes of
    it, a note on a decomposition torch failed to run or None)."""
    bad = _unsupported_nodes(ep)
    if not bad:
        return ep, [], None
    table = _decompositions()
    tried: set = set()
    for _ in range(MAX_DECOMPOSITION_ROUNDS):
        sub = {t: table[t] for t in {n.target for n in bad} if t in table and t not in tried}
        if not sub:
            break
        tried |= set(sub)
        try:
            dec = ep.run_decompositions(sub)
        except Exception as e:  # torch's own failure: report what is unsupported without it
            from .aten import op_display_name
            names = ", ".join(sorted(op_display_name(t) for t in sub))
            return ep, bad, f"torch could not decompose {names} ({type(e).__name__}: {str(e).splitlines()[0]})"
        ep, bad = dec, _unsupported_nodes(dec)
        if not bad:
            break
    return ep, bad, None


def import_torch(ep, dynamic_shapes=None) -> Module:
    """A ``torch.export.ExportedProgram`` as a braze Module (symbols named by the export's Dims).

    ``dynamic_shapes`` (torch.export's format) names the symbols where the program lost the
    names (one loaded from a .pt2 file); where it has them, the spec's names win.
    """
    require("torch", "torch")
    import torch
    if not isinstance(ep, torch.export.ExportedProgram):
        raise ModelFormatError(f"import_torch takes a torch.export.ExportedProgram, got {type(ep).__name__}",
                               hint="call torch.export.export(model, example_inputs, dynamic_shapes=...) first")
    names = _dim_names_safe(ep)[0]
    user_ranged = set(names)
    if dynamic_shapes is not None:
        from .dims import names_from_spec
        spec = names_from_spec(ep, dynamic_shapes)
        names = {**names, **{k: v[0] for k, v in spec.items()}}
        user_ranged |= {k for k, (_, lo) in spec.items() if lo is not None and lo >= 2}
    ep2, bad, note = _maybe_decompose(ep)
    if bad:  # every op still missing after the decompositions, at once
        from .aten import unsupported_report
        raise unsupported_report(bad, note)
    # a decomposed program may have a fresh shape env: keep the original Dim names
    return Importer(from_exported(ep2, names, user_ranged)).run()
