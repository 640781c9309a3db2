"""The tuning database: JSON lines under the compile cache (``<cache>/tune/tune.jsonl``).

One line per measured bucket of one kernel site on one machine::

    {"v": 1, "env": "<16 hex>", "site": "gemm n=768 k=768 ...", "bucket": [64, 127], "winner": "smallm",
     "times_us": {"smallm": {"64": [median, mad], "127": [...]}, ...}, "points": [64, 127], ...}

``env`` hashes what a measurement depends on besides the site (``environment``): the CPU model,
the ISA and its flags, the thread count and the helper library's build. A site's key is its shape
and epilogue, never a name or a file, so every model with that product shares the line.

Appends are one ``write`` each on a file opened ``O_APPEND`` (whole lines, so processes tuning at
once interleave lines, never bytes); a line that does not parse is skipped with one warning per
file; the last line for a (env, site, bucket) wins.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

from ..errors import BrazeWarning

VERSION = 1
FILE = "tune.jsonl"


def db_path(cache_dir=None) -> Path:
    from ..runtime.compiler import resolve_cache_dir
    return resolve_cache_dir(cache_dir) / "tune" / FILE


def resolved_threads(threads: int | None) -> int:
    """The thread count native code runs with for ``Options.threads`` (None or 0: the CPUs this
    process may use)."""
    if threads:
        return int(threads)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def environment(threads: int | None) -> dict:
    from ..codegen.isa import cpu_model, host_isa
    from ..extern.onednn import helper_build_id
    from .measure import VERSION
    isa = host_isa()  # what the measurements ran at: tuning_block leaves lower levels untuned
    return {"cpu": cpu_model(), "isa": isa.name, "features": sorted(isa.host_features),
            "threads": resolved_threads(threads), "helper": helper_build_id(), "measure": VERSION}


def env_key(env: dict) -> str:
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:16]


class Database:
    """The lines of one database file, read once (``path`` need not exist)."""

    def __init__(self, path):
        self.path = Path(path)
        self.records: dict[tuple[str, str, tuple[int, int]], dict] = {}
        self.envs: dict[str, dict] = {}
        self.bad_lines = 0
        self._read()

    def _read(self) -> None:
        try:
            text = self.path.read_text(errors="replace")
        except FileNotFoundError:
            return
        except OSError as e:
            warnings.warn(BrazeWarning(f"the tuning database {self.path} cannot be read ({e}): default dispatch "
                                       "rules"))
            return
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                key = (str(r["env"]), str(r["site"]), (int(r["bucket"][0]), int(r["bucket"][1])))
                if r.get("v") != VERSION or not isinstance(r.get("winner"), str):
                    raise ValueError
            except (ValueError, KeyError, TypeError, IndexError):
                self.bad_lines += 1
                continue
            self.records[key] = r
            if isinstance(r.get("env_info"), dict):
                self.envs[key[0]] = r["env_info"]
        if self.bad_lines:
            warnings.warn(BrazeWarning(f"the tuning database {self.path} has {self.bad_lines} line(s) that are not "
                                       "tuning records; they are skipped (delete the file, or run braze tune, to "
                                       "start it again)"))

    def buckets(self, env: str, site: str) -> dict[tuple[int, int], dict]:
        return {b: r for (e, s, b), r in self.records.items() if e == env and s == site}

    def foreign(self, env: str) -> list[dict]:
        """The environments of other machines (or thread counts, or helper builds) the file holds,
        where it holds none of ``env``."""
        if any(e == env for e, _, _ in self.records):
            return []
        return list(self.envs.values())

    def append(self, records: list[dict]) -> None:
        if not records:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                for r in records:
                    os.write(fd, (json.dumps(r, sort_keys=True) + "\n").encode())
            finally:
                os.close(fd)
        except OSError as e:
            warnings.warn(BrazeWarning(f"the tuning database {self.path} cannot be written ({e}): this compile uses "
                                       "its measurements, later ones measure again (set BRAZE_TUNE_DB or "
                                       "BRAZE_CACHE_DIR to a writable place)"))
        for r in records:
            self.records[(r["env"], r["site"], tuple(r["bucket"]))] = r
