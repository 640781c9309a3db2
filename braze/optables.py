"""What braze supports, from the registries: graph IR ops, and the ops each frontend imports (one
section per entry of frontend/registry.py's FRONTENDS: ``ir``, ``onnx``, ``aten``, ``tf``).

One source for both readers: ``braze ops`` prints ``render_text()``, and
scripts/gen_op_tables.py writes ``render_markdown()`` into README.md.
Nothing here imports torch, onnx or TensorFlow.
"""

from __future__ import annotations

from .frontend.registry import FRONTENDS

SECTIONS = tuple(f.ops_section for f in FRONTENDS.values())
ONNX_OPSETS = "13-21; older ones converted to 13 at import"


def ir_ops() -> list[dict]:
    """One row per graph IR op: name, kind, inputs, attributes (with defaults), semantics."""
    from .ops import all_ops
    from .ops.registry import REQUIRED

    rows = []
    for name, op in all_ops().items():
        attrs = ", ".join(k if a.default is REQUIRED else f"{k}={_fmt_default(a.default)}"
                          for k, a in op.attrs.items())
        rows.append({"name": name, "kind": op.kind, "inputs": ", ".join(op.inputs), "attrs": attrs, "doc": op.doc})
    return rows


def section_ops(section: str) -> list[str]:
    """The op names of one frontend's section (``onnx``: ONNX op types, another domain's as ``domain::Op``;
    ``aten``: ``aten.name`` or ``aten.name.overload``), sorted."""
    fe = next(f for f in FRONTENDS.values() if f.ops_section == section)
    return sorted(fe.supported_ops())


def _fmt_default(v) -> str:
    if isinstance(v, float):
        return repr(v)
    if hasattr(v, "name") and v.__class__.__name__ == "DType":
        return v.name
    return repr(v) if isinstance(v, str) else str(v)


def render_markdown() -> list[str]:
    """The README's tables, as lines (without the generator's markers)."""
    lines = ["### Graph IR operators", "",
             "| op | kind | inputs | attributes | semantics |", "|---|---|---|---|---|"]
    for r in ir_ops():
        lines.append(f"| `{r['name']}` | {r['kind']} | {r['inputs'] or '-'} | {r['attrs'] or '-'} | {r['doc']} |")
    for fe in FRONTENDS.values():
        if fe.ops_section != "ir":
            ops = section_ops(fe.ops_section)
            lines += ["", f"### {fe.ops_title} ({len(ops)}{_NOTES.get(fe.ops_section, '')})", "",
                      ", ".join(f"`{o}`" for o in ops) or "(none)"]
    return lines


def render_text(sections=SECTIONS, width: int = 100) -> str:
    """Plain text for ``braze ops``: the chosen sections, one op per line (IR) or wrapped name lists."""
    out: list[str] = []
    if "ir" in sections:
        rows = ir_ops()
        out.append(f"Graph IR operators ({len(rows)}): what the compiler implements natively")
        out += [f"  {r['name']:30s} {r['kind']:14s} {r['doc']}" for r in rows]
    for fe in FRONTENDS.values():
        if fe.ops_section in sections and fe.ops_section != "ir":
            ops = section_ops(fe.ops_section)
            out += _section(out, f"{fe.ops_title} ({len(ops)}{_NOTES.get(fe.ops_section, '')})", ops, width)
    return "\n".join(out) + "\n"


_NOTES = {"onnx": f", opsets {ONNX_OPSETS}, default domain and ai.onnx.preview::FlexAttention",
          "aten": "; ops with a torch decomposition into these are decomposed first"}


def _section(out: list[str], title: str, names: list[str], width: int) -> list[str]:
    lines = ([""] if out else []) + [title]
    row = " "
    for n in names:
        if len(row) + len(n) + 2 > width and row.strip():
            lines.append(row.rstrip(","))
            row = " "
        row += f" {n},"
    if row.strip():
        lines.append(row.rstrip(","))
    return lines


__all__ = ["ir_ops", "render_markdown", "render_text", "section_ops", "SECTIONS"]
