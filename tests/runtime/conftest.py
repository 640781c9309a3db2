"""Fixtures for the native runtime tests: a private compile cache per test."""

import pytest


@pytest.fixture(autouse=True)
def braze_cache(tmp_path, monkeypatch):
    """A private BRAZE_CACHE_DIR; BRAZE_ISA and CC unset; counters from zero."""
    d = tmp_path / "braze-cache"
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(d))
    monkeypatch.delenv("BRAZE_ISA", raising=False)
    monkeypatch.delenv("CC", raising=False)
    from braze.runtime import reset_stats
    reset_stats()
    return d
