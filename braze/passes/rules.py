"""Named local rewrite rules and a scoped count of how often each fired.

A ``Rule`` is a (pass, name) pair, usually around the function that tries the rewrite
(``@rule("canonicalize", "mul_one")``): calling it counts a hit when the function gives a
replacement (not None), so a rule function returns one only when the pass applies it.
Rules that are a step of a pass's own loop call ``hit()`` where they apply.

Counts go to the ``RuleStats`` of every ``collect_rule_stats()`` block open in the current
context (a ``ContextVar``, so threads compiling at once each count their own; a thread
started inside a block does not inherit it unless run in ``contextvars.copy_context()``).
With none open a hit costs one ``ContextVar.get``. Nested blocks each see every hit::

    with collect_rule_stats() as stats:
        canonicalize(module)
    print(stats.report())
"""

from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterator

# the collectors open in this context, innermost last (a tuple: a context's value is never mutated)
_active: ContextVar[tuple["RuleStats", ...]] = ContextVar("braze_rule_stats", default=())
_defined: list["Rule"] = []  # appended at import time only, for all_rules()


class Rule:
    """One named local rewrite of a pass; ``fn`` (optional) tries it."""

    __slots__ = ("key", "fn")

    def __init__(self, pass_name: str, name: str, fn: Callable | None = None):
        self.key = (pass_name, name)
        self.fn = fn
        _defined.append(self)

    @property
    def pass_name(self) -> str:
        return self.key[0]

    @property
    def name(self) -> str:
        return self.key[1]

    def __call__(self, *args):
        out = self.fn(*args)
        if out is not None:
            self.hit()
        return out

    def hit(self, n: int = 1) -> None:
        for stats in _active.get():
            stats.hits[self.key] += n

    def __repr__(self) -> str:
        return f"Rule({self.key[0]!r}, {self.key[1]!r})"


def rule(pass_name: str, name: str) -> Callable[[Callable], Rule]:
    """Decorator: the function becomes the named ``Rule`` that tries it."""
    return lambda fn: Rule(pass_name, name, fn)


def all_rules() -> tuple[Rule, ...]:
    """Every rule defined by the modules imported so far (the passes: all of braze's)."""
    return tuple(_defined)


class RuleStats:
    """Hits per rule: ``hits`` is a Counter of (pass, rule) -> times fired; ``stats[pass, rule]``."""

    def __init__(self):
        self.hits: Counter[tuple[str, str]] = Counter()

    def __getitem__(self, key: tuple[str, str]) -> int:
        return self.hits[key]

    def by_pass(self, pass_name: str) -> dict[str, int]:
        return {r: n for (p, r), n in sorted(self.hits.items()) if p == pass_name}

    def report(self) -> str:
        """A table of pass, rule, hits, sorted by pass then rule (rules that never fired are left out)."""
        rows = [("pass", "rule", "hits")] + [(p, r, str(n)) for (p, r), n in sorted(self.hits.items()) if n]
        if len(rows) == 1:
            return "no rewrite rule fired\n"
        w = [max(len(row[i]) for row in rows) for i in range(3)]
        return "".join(f"{p:<{w[0]}}  {r:<{w[1]}}  {n:>{w[2]}}\n" for p, r, n in rows)


@contextmanager
def collect_rule_stats(stats: RuleStats | None = None) -> Iterator[RuleStats]:
    """Count the rules fired in this block (in this context) into ``stats`` (a new one by
    default); yields it. Passing one ``stats`` to blocks in turn adds their counts up."""
    stats = RuleStats() if stats is None else stats
    open_ = _active.get()
    token = _active.set(open_ if any(s is stats for s in open_) else open_ + (stats,))  # no double count
    try:
        yield stats
    finally:
        _active.reset(token)


__all__ = ["Rule", "rule", "all_rules", "RuleStats", "collect_rule_stats"]
