"""Shape buckets and dispatch tables.

A dispatch table picks a kernel by an integer (a GEMM's M): a tuple of ``(hi, choice)`` pairs with
increasing ``hi``, the last ``hi`` None. A value takes the choice of the first pair whose ``hi`` it
does not exceed. ``((48, "smallm"), (None, "dnnl"))`` is the GEMM's default rule.

Buckets are powers of two, ``[2^k, 2^(k+1) - 1]``, the same for every compile, so a measurement
made for one declared range serves every other range that has the bucket.
"""

from __future__ import annotations

from ..errors import BrazeError

Table = tuple  # of (int | None, str)


def bucket_of(v: int) -> tuple[int, int]:
    """The power-of-two bucket holding ``v`` (>= 1)."""
    lo = 1 << (max(1, int(v)).bit_length() - 1)
    return lo, 2 * lo - 1


def buckets(lo: int, hi: int) -> list[tuple[int, int]]:
    """The buckets that meet ``[lo, hi]`` (lo >= 1), in order."""
    out, b = [], bucket_of(max(1, lo))
    while b[0] <= hi and lo <= hi:
        out.append(b)
        b = (2 * b[0], 4 * b[0] - 1)
    return out


def choice_at(table: Table, v: int) -> str:
    for hi, choice in table:
        if hi is None or v <= hi:
            return choice
    raise BrazeError(f"the dispatch table {table} ends without a last entry for everything above",
                     hint="this is a braze bug; please report it")


def _pieces(table: Table, lo: int = 1):
    """(first, last, choice) per pair; last None for the open end."""
    for hi, choice in table:
        yield lo, hi, choice
        if hi is not None:
            lo = hi + 1


def merged(table: Table) -> Table:
    """``table`` with adjacent pairs of one choice made one."""
    out: list[tuple] = []
    for hi, choice in table:
        if out and out[-1][1] == choice:
            out[-1] = (hi, choice)
        else:
            out.append((hi, choice))
    return tuple(out)


def override(table: Table, lo: int, hi: int, choice: str) -> Table:
    """``table`` with every value in ``[lo, hi]`` taking ``choice``."""
    out: list[tuple] = []
    inserted = False
    for first, last, c in _pieces(table):
        if first < lo:  # the piece's part below lo
            out.append((last if last is not None and last < lo else lo - 1, c))
        if not inserted and (last is None or last >= lo):
            out.append((hi, choice))
            inserted = True
        if last is None or last > hi:  # its part above hi
            out.append((last, c))
    return merged(out)


def describe(table: Table, var: str = "M") -> str:
    """``table`` in words: ``M <= 48 smallm, 49..127 dnnl, >= 128 smallm``."""
    parts = []
    for first, last, c in _pieces(table):
        if last is None:
            parts.append(f"{c}" if first == 1 else f">= {first} {c}")
        elif first == 1:
            parts.append(f"{var} <= {last} {c}")
        else:
            parts.append(f"{first}..{last} {c}" if last > first else f"{first} {c}")
    return ", ".join(parts)


def summary(tables) -> list[str]:
    """One line per distinct (product, table) of ``tables`` ((call, product, table) triples, as
    ``CompiledModel.dispatch_tables`` gives them), with how many calls share it."""
    groups: dict[tuple, list[str]] = {}
    for call, product, table in tables:
        groups.setdefault((product, tuple(tuple(p) for p in table)), []).append(call)
    return [f"{product}: {describe(table)}" + (f"  ({len(calls)} calls)" if len(calls) > 1 else f"  ({calls[0]})")
            for (product, table), calls in groups.items()]
