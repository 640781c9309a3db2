"""Shared test settings: deterministic seeds, and one torch thread per xdist worker."""

import os

import numpy as np
import pytest


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # two workers on two cores: one intra-op thread each avoids oversubscription
        try:
            import torch
            torch.set_num_threads(1)
        except ImportError:
            pass


@pytest.fixture
def rng():
    return np.random.default_rng(0)
