"""A torch.compile graph whose tensors are not on the CPU runs in PyTorch, with one warning that says
how to run it on the GPU (braze.compile's CUDA target), never a wrong device or a crash."""

import warnings

import pytest

torch = pytest.importorskip("torch")


def test_non_cpu_graph_runs_in_torch_with_one_warning():
    torch._dynamo.reset()
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.GELU()).to("meta")
    f = torch.compile(m, backend="braze")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        y = f(torch.randn(2, 4, device="meta"))
        f(torch.randn(2, 4, device="meta"))
    assert y.device.type == "meta" and tuple(y.shape) == (2, 3)
    msgs = [str(x.message) for x in w if "braze" in str(x.message)]
    assert len(msgs) == 1 and "on meta" in msgs[0] and "target='cuda'" in msgs[0], msgs
