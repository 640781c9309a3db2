"""The hint braze gives when oneDNN is missing names the pinned OpenMP build, as pyproject.toml does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from braze.errors import MissingDependencyError
from braze.extern import onednn

ROOT = Path(__file__).resolve().parents[2]


def _pyproject_onednn_pins() -> list[str]:
    text = (ROOT / "pyproject.toml").read_text()
    deps = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    return sorted(re.findall(r'"(onednn[^"]*)"', deps))


def test_requirements_match_pyproject():
    assert sorted(onednn.ONEDNN_REQUIREMENTS) == _pyproject_onednn_pins()
    assert onednn.PIP_INSTALL == "pip install " + " ".join(onednn.ONEDNN_REQUIREMENTS)


def test_missing_onednn_hint_names_the_pinned_gomp_wheels(monkeypatch, tmp_path):
    monkeypatch.setattr(onednn, "_prefixes", lambda: [tmp_path])
    monkeypatch.setattr(onednn, "_dist_dirs", lambda: ([], []))
    onednn._locate.cache_clear()
    try:
        with pytest.raises(MissingDependencyError) as ei:
            onednn._locate(None)
    finally:
        onednn._locate.cache_clear()
    hint = ei.value.hint
    for pin in _pyproject_onednn_pins():
        assert pin in hint
    # not the SYCL/TBB wheel docs/gemm.md rejects (it would overwrite the pinned lib/libdnnl.so)
    assert not re.search(r"\bonednn(-devel)?==", hint)
