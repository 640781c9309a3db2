"""The entry's library calls: each offloaded gemm / conv group as one call into the oneDNN helper
(braze_dnnl.h), its post-ops (chosen by passes/offload.py) and its dispatch table (braze/tune) as
the call's arguments. A mixin of host.py's entry writer: it emits through the writer's ``emit``,
``prepares`` (calls that create a new shape's primitives) and ``gen`` (the model's packed weights)."""

from __future__ import annotations

from ..errors import BrazeError, UnsupportedOpError
from ..extern.onednn import GEMM_PATHS
from ..ir import sym as S
from ..ir.graph import Node, Value
from ..ir.types import DType
from ..ops.conv import is_pointwise_conv, pads4
from ..passes.node_classes import BACKWARD_CONVS, weight_permute
from ..passes.offload import ANCHORS, VIEW_OPS, transposed_operands
from .c_expr import int_expr

# the post-op activations' codes in braze_dnnl.h (which ones oneDNN runs: passes/offload.py); relu and
# relu6 are its _EAGER ones, applied by the helper itself (its oneDNN-valued relu and sigmoid go unused)
ACTIVATION_CODES = {"gelu": 2, "gelu_tanh": 3, "silu": 4, "tanh": 6, "relu": 7, "relu6": 8}
AFTER_RESIDUAL = 0x100  # BRAZE_ACT_AFTER_RESIDUAL: act(product + bias + residual)


def act_code(post_ops) -> int:
    """The ``act`` a library call with these post-ops takes (without its dtypes): the activation's
    code, with AFTER_RESIDUAL when the residual add comes first; 0 for none."""
    ops = list(post_ops)
    act = next((a for a in ops if a in ACTIVATION_CODES), None)
    if act is None:
        return 0
    late = "residual" in ops and ops.index("residual") < ops.index(act)
    return ACTIVATION_CODES[act] | (AFTER_RESIDUAL if late else 0)


def post_op_operands(name: str, after: list[Node], anchor: Node, post_ops) -> list[tuple[str, Value | None]]:
    """Each of a library call's ``post_ops`` with the operand its node adds (a bias, a residual; None
    for an activation or a cast), in order. ``after`` is the group's nodes after the anchor,
    constants aside: each one that is not a view is the next post-op's, reading the one before."""
    out = []
    todo = list(post_ops)
    chain = anchor.outputs[0]
    for m in after:  # views only rename the result
        if m.op not in VIEW_OPS:
            if not todo or chain not in m.inputs:
                raise BrazeError(f"@{name} does not match its post_ops {list(post_ops)} at '{m.op}'",
                                 hint="this is a braze bug; please report it")
            out.append((todo.pop(0), next((v for v in m.inputs if v is not chain), None)))
        chain = m.outputs[0]
    if todo:
        raise BrazeError(f"@{name} lacks the nodes of its post_ops {todo}", hint="this is a braze bug; please report it")
    return out


def _residual_kind(residual, dst) -> int:
    """The helper's residual kind (braze_dnnl_core.c res_kind): 0 none, 1 a tensor of its own, 2 the
    output itself (memory planning put them in one place: a sum post-op), so the prepared primitive
    is the one the call runs."""
    return 0 if not residual else 2 if residual == dst else 1


class LibraryCalls:
    def _library(self, n: Node) -> None:
        callee = self.module.functions[n.attrs["callee"]]
        post_ops = n.attrs.get("post_ops")
        if post_ops is None:
            raise BrazeError(f"the {n.attrs['kind']} group @{callee.name} was not offloaded",
                             hint="run the offload pass after fuse")
        cptr = {id(p): self.ptr_of(v) for p, v in zip(callee.params, n.inputs)}
        const_of = {}
        nodes = []
        for m in callee.nodes:
            if m.op == "constant":
                const_of[id(m.outputs[0])] = m.attrs["name"]
                cptr[id(m.outputs[0])] = f"((char *){self.gen.const(m.attrs['name'])})"
            else:
                nodes.append(m)
        anchor_i = next(i for i, m in enumerate(nodes) if m.op in ANCHORS[n.attrs["kind"]])
        anchor = nodes[anchor_i]
        for m in nodes[:anchor_i]:  # prologue views and transposes read their input where it is
            cptr[id(m.outputs[0])] = cptr[id(m.inputs[0])]
        bias = residual = scale = None
        act = act_code(post_ops)
        bias_dt = DType.float32
        if anchor.op in ("linear", "conv2d") and len(anchor.inputs) > 2 and anchor.inputs[2] is not None:
            bias = cptr[id(anchor.inputs[2])]
            bias_dt = anchor.inputs[2].dtype
        # the activation is act's; a cast is the destination's dtype (n's output): the call rounds as it stores
        for op, other in post_op_operands(callee.name, nodes[anchor_i + 1:], anchor, post_ops):
            if op == "bias":
                bias = cptr[id(other)]
                bias_dt = other.dtype
            elif op == "residual":
                residual = cptr[id(other)]
            elif op == "scale":
                scale = cptr[id(other)]
        self._call_library(anchor, cptr, const_of, bias, residual, act, self.ptr_of(n.outputs[0]),
                           _types(anchor.inputs[0].dtype, n.outputs[0].dtype, bias_dt),
                           transposed_operands(callee, anchor), n.attrs.get("dispatch"), scale)

    def _call_library(self, a: Node, cptr, const_of, bias, residual, act, dst, types: str,
                      trans: tuple[int, int], dispatch=None, scale=None) -> None:
        self.gen.uses_library = True
        e = "err, errlen"
        bias = f"(const float *){bias}" if bias else "NULL"
        res = f"(const float *){residual}" if residual else "NULL"
        x = a.inputs[0]
        w = a.inputs[1]
        wconst = const_of.get(id(w))  # None: a weight read at this call (plug-in mode's live weights)
        wdt = DT_CODES[x.dtype]  # the library's operand dtype (offload checked x and w agree)
        act_t = f"{act} | {types}" if types else act  # the GEMM and conv calls take the dtypes in act
        if a.op in BACKWARD_CONVS:
            self._conv_gradient(a, cptr, dst)
            return
        if a.op == "conv2d":
            nhwc = a.attrs.get("layout") == "nhwc"
            # a channels-last weight, read where it lies: its OHWI memory is the prologue permute's input
            ohwi = 2 if weight_permute(a) is not None else 0
            h = self.gen.pack_conv(wconst, w.shape, a.attrs["groups"], a.attrs["stride"],
                                   pads4(a.attrs["padding"]), a.attrs["dilation"], layout=(1 if nhwc else 0) | ohwi,
                                   dt=wdt)
            y = a.outputs[0]
            hw = (1, 2) if nhwc else (2, 3)
            dims = (x.shape[0], x.shape[hw[0]], x.shape[hw[1]])
            # a scale (a batch norm on live weights, passes/offload.py) is bit 2 of the bias flags
            prepare = (f"braze_conv2d_prepare({', '.join(int_expr(d) for d in dims)}, {h}, "
                       f"{int(bias != 'NULL') | (2 if scale else 0)}, {int(res != 'NULL')}, {act_t})")
            fn, wt = ("braze_conv2d", "") if wconst is not None else ("braze_conv2d_w", f"(const float *){cptr[id(w)]}, ")
            if scale:
                fn, wt = "braze_conv2d_ws", f"{wt}(const float *){scale}, "
            call = (f"{fn}({int_expr(x.shape[0])}, {int_expr(x.shape[hw[0]])}, {int_expr(x.shape[hw[1]])}, "
                    f"(const float *){cptr[id(x)]}, {h}, {wt}{bias}, {res}, {act_t}, {int_expr(y.shape[hw[0]])}, "
                    f"{int_expr(y.shape[hw[1]])}, (float *){dst}, {e})")
            kernel = _kernel_select(dispatch, S.prod(dims), {"conv": "-1", **{k: str(v) for k, v in GEMM_PATHS.items()}})
            # oneDNN's convolution at every M
            if wconst is None or not self.gen.host.picks_kernels or kernel in ("", "-1"):
                self.prepares.append((prepare, frozenset().union(*(S.free_syms(d) for d in dims))))
                self.emit(f"if ({call}) return BRAZE_ERR_INTERNAL;")
                return
            if not is_pointwise_conv(a, w.shape):
                raise BrazeError(f"dispatch={dispatch!r} names a GEMM kernel for a convolution that is not a product "
                                 "(an NHWC 1x1 kernel, stride 1, no padding, one group)",
                                 where=str(a.loc) if a.loc else None, hint='give it [[none, "conv"]]')
            # a 1x1 convolution's dispatch table: a product of [N*H*W, IC] by [OC, IC] where it picks a GEMM kernel
            M, hb = int_expr(S.prod(dims)), self.gen.pack_b(wconst, w.shape[0], w.shape[1], 1, dt=wdt)
            has_res = _residual_kind(residual, dst)
            gemm = (f"braze_matmul({M}, {w.shape[0]}, {w.shape[1]}, (const float *){cptr[id(x)]}, {hb}, {bias}, "
                    f"{res}, {act_t} | BRAZE_PATH(bz_kernel), (float *){dst}, {e})")
            gemm_prepare = (f"braze_matmul_prepare({M}, {hb}, {int(bias != 'NULL')}, {has_res}, "
                            f"{act_t} | BRAZE_PATH({kernel}))")
            self.prepares.append((f"(({kernel}) < 0 ? {prepare} : {gemm_prepare})",
                                  frozenset().union(*(S.free_syms(d) for d in dims))))
            self.emit(f"{{ const int bz_kernel = {kernel};")
            self.emit(f"  if (bz_kernel < 0 ? {call} : {gemm}) return BRAZE_ERR_INTERNAL; }}")
            return
        K = x.shape[-1]
        ta, tb = trans
        if a.op == "linear" or (w.rank == 2 and not ta):
            # braze_matmul_w's flag: the weight's memory is [N, K] (linear's, or a transposed operand)
            transposed = 1 if a.op == "linear" or tb else 0
            N = w.shape[0] if a.op == "linear" else w.shape[1]
            M = S.prod(x.shape[:-1])
            epi = f"{bias}, {res}, {act_t}, (float *){dst}, {e})) return BRAZE_ERR_INTERNAL;"
            has_res = _residual_kind(residual, dst)
            flags = f"{int(bias != 'NULL')}, {has_res}, {act_t}"
            if wconst is not None:
                h = self.gen.pack_b(wconst, N, K, transposed, dt=wdt)
                # the table picks among the CPU helper's kernels; the CUDA runtime has one GEMM
                path = _kernel_select(dispatch, M, {k: f"BRAZE_PATH({v})" for k, v in GEMM_PATHS.items()}) \
                    if self.gen.host.picks_kernels else ""
                if path:
                    flags += f" | {path}"
                    epi = f"{bias}, {res}, {act_t} | {path}, (float *){dst}, {e})) return BRAZE_ERR_INTERNAL;"
                self.prepares.append((f"braze_matmul_prepare({int_expr(M)}, {h}, {flags})", S.free_syms(M)))
                self.emit(f"if (braze_matmul({int_expr(M)}, {int_expr(N)}, {int_expr(K)}, (const float *){cptr[id(x)]}, "
                          f"{h}, {epi}")
                return
            wp = cptr[id(w)]
            if (wp in self.input_ptrs and self.gen.weight_copies and not (S.is_symbolic(N) or S.is_symbolic(K))
                    and self.gen.host.picks_kernels):
                # a weight the caller passes in (a live parameter): a site that keeps it packed while
                # the entry's braze_live_check finds it unwritten
                h = self.gen.live_site(N, K, transposed, wdt)
                j, _ = self.live.setdefault(wp, (len(self.live), int(N) * int(K) * w.dtype.itemsize))
                self.prepares.append((f"braze_matmul_lw_prepare({h}, {int_expr(M)}, {flags})", S.free_syms(M)))
                self.emit(f"if (braze_matmul_lw({h}, lw_gen[{j}], {int_expr(M)}, (const float *){cptr[id(x)]}, "
                          f"(const float *){wp}, {epi}")
                return
            mnk = f"{int_expr(M)}, {int_expr(N)}, {int_expr(K)}"
            self.prepares.append((f"braze_matmul_w_prepare({mnk}, {transposed}, {flags})",
                                  frozenset().union(*(S.free_syms(d) for d in (M, N, K)))))
            self.emit(f"if (braze_matmul_w({mnk}, (const float *){cptr[id(x)]}, (const float *){cptr[id(w)]}, "
                      f"{transposed}, {epi}")
            return
        # matmul of two activations: equal batch dims, or a 2-D right operand; a vector
        # operand is a [1, K] or [K, 1] matrix (the same memory; torch drops that dim)
        if bias != "NULL" or act or res != "NULL":  # its one post-op is a cast: types names the result's dtype
            raise BrazeError("a matmul of two activations takes no fused epilogue but a cast", where=str(a.loc) if a.loc else None,
                             hint="this is a braze bug; please report it")
        xs = x.shape if x.rank >= 2 else (1, K)
        ws = w.shape if w.rank >= 2 else (K, 1)
        M, N = xs[-2], ws[-1]
        args = (f"(const float *){cptr[id(x)]}, {ta}, (const float *){cptr[id(w)]}, {tb}, 1.0f, (float *){dst}, {e})) "
                f"return BRAZE_ERR_INTERNAL;")
        arr = lambda dims: "(const int64_t[]){" + ", ".join(int_expr(d) for d in dims) + "}"
        if len(ws) == 2 and not ta:
            xb = wb = (1,)
            M = S.prod(xs[:-1])
        elif len(ws) == 2:  # A's memory [..., K, M]: each of its matrices against the one B
            xb, wb = _broadcast_batch(self.module.constraints, tuple(xs[:-2]) or (1,), (), a)
        else:
            xb, wb = _broadcast_batch(self.module.constraints, xs[:-2], ws[:-2], a)
        if types:  # 16-bit operands or result (float32 models keep the calls below)
            self.emit(f"if (braze_batch_matmul_typed({types}, {len(xb)}, {arr(xb)}, {arr(wb)}, {int_expr(M)}, "
                      f"{int_expr(N)}, {int_expr(K)}, " + args)
        elif xb != wb:
            self.emit(f"if (braze_batch_matmul_bcast({len(xb)}, {arr(xb)}, {arr(wb)}, {int_expr(M)}, "
                      f"{int_expr(N)}, {int_expr(K)}, " + args)
        else:
            self.emit(f"if (braze_batch_matmul({int_expr(S.prod(xb))}, {int_expr(M)}, {int_expr(N)}, {int_expr(K)}, "
                      + args)

    def _conv_gradient(self, a: Node, cptr, dst: str) -> None:
        """A convolution's input or weight gradient: one oneDNN backward call (float32; NCHW, or NHWC
        activations with layout nhwc)."""
        if a.op == "conv_transpose2d":  # its input is the gradient; the result has the shape x would
            (grad, w), x = a.inputs, a.outputs[0]
        else:
            grad, x, w = a.inputs
        nhwc = a.attrs.get("layout") == "nhwc"
        h = self.gen.pack_conv(None, w.shape, a.attrs["groups"], a.attrs["stride"], pads4(a.attrs["padding"]),
                               a.attrs["dilation"], layout=1 if nhwc else 0)
        hw_of = (lambda t: t.shape[1:3]) if nhwc else (lambda t: t.shape[2:])
        n, hw, ohw = int_expr(x.shape[0]), ", ".join(int_expr(d) for d in hw_of(x)), \
            ", ".join(int_expr(d) for d in hw_of(grad))
        if a.op != "conv2d_backward_weight":
            args = f"(const float *){cptr[id(grad)]}, {h}, (const float *){cptr[id(w)]}"
            fn = "braze_conv2d_bwd_data"
        else:
            args = f"(const float *){cptr[id(x)]}, (const float *){cptr[id(grad)]}, {h}"
            fn = "braze_conv2d_bwd_weights"
        self.emit(f"if ({fn}({n}, {hw}, {args}, {ohw}, (float *){dst}, err, errlen)) return BRAZE_ERR_INTERNAL;")


DT_CODES = {DType.float32: 0, DType.bfloat16: 1, DType.float16: 2}


def _kernel_select(table, M, words: dict) -> str:
    """A C expression of a dispatch table (braze/tune/products.py): each kernel's word (``words``) by
    range tests on M; one word for a static M; "" without a table."""
    if table is None:
        return ""
    try:
        table = tuple((hi, c) for hi, c in table)
        bounds = [hi for hi, _ in table[:-1]]
        ok = (table[-1][0] is None and all(c in words for _, c in table)
              and all(isinstance(h, int) and h >= 1 for h in bounds) and bounds == sorted(set(bounds)))
    except (TypeError, ValueError, IndexError):
        ok = False
    if not ok:
        raise BrazeError(f"dispatch={table!r} is not a dispatch table of this call",
                         hint=f'write [[HI, "KERNEL"], ..., [none, "KERNEL"]] with increasing HI and kernels among '
                              f'{", ".join(words)}')
    if isinstance(M, int):
        return words[next(c for hi, c in table if hi is None or M <= hi)]
    m = int_expr(M)
    expr = words[table[-1][1]]
    for hi, c in reversed(table[:-1]):
        expr = f"({m} <= {hi} ? {words[c]} : {expr})"
    return expr


def _types(src: DType, dst: DType, bias: DType = DType.float32) -> str:
    """The BRAZE_TYPES(...) word of a library call, or "" when everything is float32."""
    codes = (DT_CODES[src], DT_CODES[dst], DT_CODES[bias])
    return f"BRAZE_TYPES({', '.join(map(str, codes))})" if any(codes) else ""


def _broadcast_batch(store, xb, wb, node: Node):
    """Both operands' batch dims for braze_batch_matmul_bcast: left-padded with 1 to one
    rank, then adjacent dims that broadcast alike merged (at most 4 groups)."""
    n = max(len(xb), len(wb))
    xb = (1,) * (n - len(xb)) + tuple(xb)
    wb = (1,) * (n - len(wb)) + tuple(wb)
    pairs = []
    for p, q in zip(xb, wb):
        if store.equal(p, q) is True:
            pairs.append(("=", p, p))
        elif isinstance(p, int) and p == 1:
            pairs.append(("b", 1, q))
        elif isinstance(q, int) and q == 1:
            pairs.append(("a", p, 1))
        else:
            raise BrazeError(f"matmul batch dims {list(xb)} and {list(wb)} do not broadcast ({p} vs {q}; "
                             f"not known to be equal, and neither is 1)", where=str(node.loc) if node.loc else None,
                             hint="make the dims equal (expand the smaller operand) before the matmul")
    merged = []
    for kind, p, q in pairs:
        if merged and merged[-1][0] == kind:
            _, p0, q0 = merged[-1]
            merged[-1] = (kind, S.mul(p0, p), S.mul(q0, q))
        else:
            merged.append((kind, p, q))
    if len(merged) > 4:
        raise UnsupportedOpError(f"matmul batch dims {list(xb)} and {list(wb)} broadcast in more than 4 groups; "
                                 f"not supported natively", where=str(node.loc) if node.loc else None)
    return tuple(p for _, p, _ in merged), tuple(q for _, _, q in merged)
