"""A shape histogram (``braze tune --shapes HIST.json``): the shapes a model is called at, so that
tuning measures the buckets those shapes reach, the most called products first, and no others.

The file is a JSON list. Each entry is the dims of one shape, ``{"batch": 4, "seq": 128}``, or
``{"dims": {...}, "count": N}`` for a shape called N times (default 1). Every symbol a product's
row count M depends on must be given. A bucket's weight is the calls that reach it; products
are measured in order of their buckets' weight (each product's buckets in one go), so a budget
that runs out leaves the least called products to their default rule.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from ..errors import BrazeError
from ..ir import sym as S
from .buckets import bucket_of

_FORMAT = ('a JSON list of shapes, each {"batch": 4, "seq": 128} or {"dims": {"batch": 4, "seq": 128}, '
           '"count": 10}')


def read_histogram(path, symbols: dict) -> list[tuple[dict[str, int], int]]:
    """The (dims, count) entries of the file at ``path``, checked against the module's
    ``symbols`` (name -> its range)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise BrazeError(f"the shape histogram {path} does not exist", hint=f"write {_FORMAT}") from None
    except (OSError, ValueError) as e:
        raise BrazeError(f"cannot read the shape histogram {path} as JSON: {e}", hint=f"write {_FORMAT}") from None
    if not isinstance(doc, list) or not doc:
        raise BrazeError(f"the shape histogram {path} is not a non-empty JSON list", hint=f"write {_FORMAT}")
    out = []
    for i, entry in enumerate(doc):
        where = f"{path}, entry {i}"
        if not isinstance(entry, dict):
            raise BrazeError(f"{where} is not an object", hint=f"write {_FORMAT}")
        dims, count = (entry.get("dims"), entry.get("count", 1)) if "dims" in entry else (entry, 1)
        if not isinstance(dims, dict) or not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise BrazeError(f"{where}: expected dims as an object and a positive integer count",
                             hint=f"write {_FORMAT}")
        for name, v in dims.items():
            if name not in symbols:
                raise BrazeError(f"{where} names the dim {name!r}, which the model does not have",
                                 hint=f"the model's dims: {', '.join(sorted(symbols)) or 'none'}")
            lo, hi = symbols[name].lo, symbols[name].hi
            if not isinstance(v, int) or isinstance(v, bool) or v < lo or (hi is not None and v > hi):
                raise BrazeError(f"{where}: {name}={v!r} is not an integer in {name}'s range [{lo}, "
                                 f"{'inf' if hi is None else hi}]", hint="give sizes the model accepts")
        out.append((dict(dims), count))
    return out


def bucket_counts(M, histogram: list[tuple[dict[str, int], int]], what: str) -> Counter:
    """Calls per bucket of ``M`` (a product's row count) over the histogram."""
    need = S.free_syms(M)
    counts: Counter = Counter()
    for dims, count in histogram:
        missing = sorted(str(s) for s in need if str(s) not in dims)
        if missing:
            raise BrazeError(f"a shape of the histogram, {dims}, gives no {', '.join(missing)}, which the rows of "
                             f"{what} depend on", hint="give every dim of the model in each shape")
        m = int(S.evaluate(M, dims))
        if m >= 1:
            counts[bucket_of(m)] += count
    return counts


__all__ = ["bucket_counts", "read_histogram"]
