"""A small MLP whose first product (128 x 64, bias, GELU) the small-M kernel wins at larger M than
the default rule's 48 on the CPUs measured (docs/tuning.md)."""

import pytest


@pytest.fixture(scope="session")
def mlp():
    torch = pytest.importorskip("torch")
    from torch.export import Dim
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 32)).eval()
    return m, (torch.randn(3, 64),), {"input": {0: Dim("batch", min=1, max=300)}}


@pytest.fixture
def module_of(mlp):
    """The MLP imported (graph IR), fresh each time."""
    from braze.compiler import _to_module

    def make():
        m, ex, dyn = mlp
        return _to_module(m, ex, {}, dynamic_shapes=dyn)
    return make
