"""Stage ``dispatch`` (a graph pass, after ``offload``): every product by a constant weight (a GEMM,
a 1x1 convolution; products.py) gets its dispatch table, ``dispatch=[[48, "smallm"], [none, "dnnl"]]``
on its ``fused`` node, which the host turns into range tests on M.

The module's ``tuning`` block says where tables come from: none (or ``mode "off"``) gives every
call its default rule (products.DEFAULTS, or with ``rules "avx2"`` an AVX2 helper's,
products.default_rule); ``cached`` reads the tuning database (db.py) for this machine, threads and
helper build, and overrides the default in each bucket a measurement won; ``fast`` and ``full``
first measure the buckets the database lacks (search.py), within ``budget_s`` seconds, in a child
process that loads the helper library from the ``cache`` directory;
with a ``shapes`` histogram (shapes.py), only the buckets its shapes reach, the most called
products first.
The same database gives the same tables, hence the same C.

A database with lines only for other machines (or thread counts, or helper builds) gives the
default rules, with one warning that names what differs. The count of measurements made is
``module.tune_measurements`` (not part of the IR).
"""

from __future__ import annotations

import warnings
from collections import Counter

from .. import log as _logging
from ..errors import BrazeError, BrazeWarning
from ..ir import sym as S
from ..ir.graph import Module
from ..passes.common import top_functions
from .buckets import override
from .db import Database, env_key, environment
from .products import RULES, library_call
from .search import MODES, PLANS, measure, missing
from .shapes import bucket_counts, read_histogram

_log = _logging.get("tune")
DEFAULT_BUDGET_S = 600
_WARNED: set[str] = set()  # database files already warned about, once per process


def _range(M) -> tuple[int, int]:
    """M's range, at least 1: a product of a dim that may be negative and one unbounded, such as
    (s - 2) * s, has bounds of -inf (fuzz seed 18148: int(-inf) failed the compile)."""
    lo, hi = S.bounds(M)
    return int(max(lo, 1)), int(max(1, min(hi, 1 << 62)))


def _reached(todo, calls, histogram) -> list:
    """``todo`` cut to the buckets the histogram's shapes reach, and its sites in order of the calls
    those buckets get, the most first: the measuring runs a site at a time, so a budget that runs
    out leaves the least called sites to their default rule."""
    counts: dict[str, Counter] = {}
    for _, c in calls:
        if c.site is not None:
            counts.setdefault(c.site.key, Counter()).update(bucket_counts(c.M, histogram, c.site.describe()))
    out = []
    for s, lo, hi, bs in todo:
        hits = counts.get(s.key, Counter())
        kept = sorted((b for b in bs if hits[b]), key=lambda b: (-hits[b], b))
        if kept:
            out.append((s, lo, hi, kept, sum(hits[b] for b in kept)))
    out.sort(key=lambda t: -t[4])
    return [t[:4] for t in out]


def dispatch(m: Module) -> Module:
    calls = []
    for f in top_functions(m):
        for n in f.nodes:
            c = library_call(m, n)
            if c is not None:
                calls.append((n, c))
    m.tune_measurements = 0
    mode = m.tuning.get("mode", "off") if m.tuning else "off"
    if mode not in MODES:
        raise BrazeError(f"tuning mode {mode!r} is not one of {', '.join(MODES)}",
                         hint="off: default rules; cached: the database's choices, no measuring; fast / full: "
                              "measure what the database lacks first")
    if m.tuning.get("rules", "") not in RULES:
        raise BrazeError(f"the tuning block's default rules {m.tuning['rules']!r} are not one of "
                         f"{', '.join(repr(r) for r in RULES if r)}",
                         hint="the rules of the helper's kernels (braze/tune/products.py); leave the line out "
                              "for the others")
    tables: dict[str, tuple] = {}
    sites = {}
    for _, c in calls:
        if c.site is not None:
            lo, hi = _range(c.M)
            old = sites.get(c.site.key)
            sites[c.site.key] = (c.site, lo, hi) if old is None else (c.site, min(lo, old[1]), max(hi, old[2]))
    db = Database(m.tuning["db"]) if mode != "off" and sites else None
    if db is not None and (db.records or mode in PLANS):  # an empty database in cached mode: the defaults
        env = environment(m.tuning.get("threads"))
        key = env_key(env)
        if mode in PLANS:
            todo = [(s, lo, hi, b) for s, lo, hi in sites.values() if (b := missing(db, key, s, lo, hi, mode))]
            if m.tuning.get("shapes"):
                todo = _reached(todo, calls, read_histogram(m.tuning["shapes"], m.symbols))
            if todo:
                m.tune_measurements = measure(db, env, todo, mode, float(m.tuning.get("budget_s", DEFAULT_BUDGET_S)),
                                              cache_dir=m.tuning.get("cache"))
        foreign = db.foreign(key)
        if foreign and db.path.as_posix() not in _WARNED:
            _WARNED.add(db.path.as_posix())
            differ = [f"{k} {foreign[-1].get(k)!r} (here {v!r})" for k, v in env.items() if foreign[-1].get(k) != v]
            warnings.warn(BrazeWarning(
                f"the tuning database {db.path} holds measurements of another setting only: {'; '.join(differ)}. "
                "Compiling with the default dispatch rules (`braze tune` measures this one; a new braze or oneDNN "
                "build makes a new helper library, whose kernels are measured again)"))
        for s, _, _ in sites.values():
            t = s.default
            for bucket, rec in sorted(db.buckets(key, s.key).items()):
                if rec["winner"] in s.choices:
                    t = override(t, bucket[0], bucket[1], rec["winner"])
            tables[s.key] = t
    for n, c in calls:
        t = tables.get(c.site.key, c.default) if c.site is not None else c.default
        n.attrs["dispatch"] = tuple((hi, k) for hi, k in t)
    return m
