"""Shared model fixtures: zoo models built, exported and imported once per session."""

from __future__ import annotations

import pytest


class ZooCache:
    """Builds each zoo model, its torch.export program and its braze import at most once."""

    def __init__(self):
        self._models = {}
        self._exported = {}
        self._imported = {}

    def model(self, name):
        if name not in self._models:
            from braze import zoo
            self._models[name] = zoo.get(name)
        return self._models[name]

    def exported(self, name):
        if name not in self._exported:
            from braze import zoo
            self._exported[name] = zoo.export(self.model(name))
        return self._exported[name]

    def torch_imported(self, name):
        """The braze Module imported from the model's ExportedProgram."""
        if name not in self._imported:
            import braze
            self._imported[name] = braze.import_torch(self.exported(name))
        return self._imported[name]


@pytest.fixture(scope="session")
def onnx_exports(tmp_path_factory):
    """name -> (ZooModel, path of its ONNX export, braze Module imported from it), once per session."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    d = tmp_path_factory.mktemp("onnx_exports")
    cache: dict = {}

    def get(name):
        if name not in cache:
            import braze
            from braze import zoo
            zm = zoo.get(name)
            path = zoo.export_onnx(zm, d / f"{name}.onnx")
            cache[name] = (zm, path, braze.import_onnx(path, dim_ranges=dict(zm.dims)))
        return cache[name]

    return get


@pytest.fixture(scope="session")
def zoo_cache():
    pytest.importorskip("torch")
    return ZooCache()
