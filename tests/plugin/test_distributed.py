"""Distributed training through the plug-in (issue 24): 2-process gloo DDP (two buckets, which
dynamo's DDPOptimizer compiles as two graphs) and FSDP2 (``fully_shard`` on the root), each against
the same run in eager; the ranks run ``distributed_worker.py``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("torch.distributed is not built in", allow_module_level=True)

WORKER = Path(__file__).with_name("distributed_worker.py")


@pytest.mark.parametrize("mode, graphs", [("ddp", 2), ("fsdp", 1)])
def test_braze_trains_as_eager_does(mode, graphs, tmp_path):
    """On rank 0: every loss as eager's, the weights after 6 steps within 1e-4, braze's libraries
    ran every step (forward and backward of each graph), no warning, and PyTorch ran none of the
    model's ops."""
    out = tmp_path / f"{mode}.pt"
    r = subprocess.run([sys.executable, str(WORKER), mode, str(out)], capture_output=True, text=True, timeout=900,
                       env={**os.environ, "BRAZE_CACHE_DIR": str(tmp_path / "cache")})
    assert r.returncode == 0 and out.exists(), r.stderr[-3000:]
    res = torch.load(out)
    (le, _), (lb, calls) = res["eager"], res["braze"]
    for i, (a, b) in enumerate(zip(le, lb)):
        assert abs(a - b) <= 1e-4 * abs(a), f"loss {i}: eager {a}, braze {b}"
    for k, w in res["eager_w"].items():
        torch.testing.assert_close(res["braze_w"][k], w, rtol=1e-4, atol=1e-4, msg=lambda m: f"{k}: {m}")
    assert res["warnings"] == []
    assert res["libraries"] == 2 * graphs, f"{res['libraries']} libraries for {graphs} graph(s) and their backwards"
    assert calls >= 2 * graphs * (len(le) - 1), f"braze's libraries ran {calls} times in {len(le)} steps"
    _only_the_wrapper_s_ops(mode, res["ops"])


# what DDP's reducer (bucket copies, averaging) and FSDP's collectives (all-gather and
# reduce-scatter buffers) run in PyTorch around the model, in eager as under braze
WRAPPER_OPS = {"ddp": {"aten::add_", "aten::mul", "aten::copy_"},
               "fsdp": {"aten::narrow", "aten::split_with_sizes", "aten::_foreach_copy_", "aten::chunk",
                        "aten::split_with_sizes_copy", "aten::_chunk_cat", "aten::clone", "aten::div_",
                        "aten::add_"}}


def _only_the_wrapper_s_ops(mode, ops):
    """Issue 24's 10% rule on rank 0 (torch's profiler over one step, forward and backward apart):
    of the tensor work eager's step runs, PyTorch runs under braze only the distributed wrapper's
    own ops, no more of them than eager, and none of the model's: 0% of its ops."""
    for part, (eager, braze) in enumerate(zip(ops["eager"], ops["braze"])):
        model_ops = {k: v for k, v in eager.items() if k not in WRAPPER_OPS[mode]}
        assert model_ops, f"eager's {('forward', 'backward')[part]} ran no op of the model: {eager}"
        assert all(k in WRAPPER_OPS[mode] and v <= eager.get(k, 0) for k, v in braze.items()), \
            f"{('forward', 'backward')[part]}: PyTorch ran {braze} under braze; eager ran {eager}"
