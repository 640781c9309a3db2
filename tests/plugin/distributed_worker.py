"""Two gloo ranks train one model in eager and through braze, under DDP or FSDP2; rank 0 saves both
runs for ``test_distributed.py``. Run as a script (spawned ranks import it as ``__main__``):

    python distributed_worker.py ddp|fsdp OUT.pt
"""

from __future__ import annotations

import os
import socket
import sys
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

nn, F = torch.nn, torch.nn.functional
BATCHES = (3, 5, 4, 7, 2, 6)


class Net(nn.Module):
    """About 1.1 MB of weights: DDP with 1 MB buckets makes two, and dynamo's DDPOptimizer two graphs."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.ln, self.b, self.c = nn.Linear(32, 512), nn.LayerNorm(512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x, y):
        return F.cross_entropy(self.c(F.gelu(self.b(self.ln(F.gelu(self.a(x)))))), y)


def _wrap(mode):
    m = Net()
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard
        fully_shard(m)
        return m, m
    from torch.nn.parallel import DistributedDataParallel
    return m, DistributedDataParallel(m, bucket_cap_mb=1)


def _train(rank, model, fn):
    """SGD with momentum (AdamW would turn rounding noise in a near-zero gradient into steps of lr):
    the losses and the native calls braze made."""
    from braze.testing import NativeCalls
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    calls, losses = NativeCalls(), []
    for step, b in enumerate(BATCHES):
        g = torch.Generator().manual_seed(100 * step + rank)
        x, y = torch.randn(b, 32, generator=g), torch.randint(0, 10, (b,), generator=g)
        opt.zero_grad()
        with calls:
            loss = fn(x, y)
            loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, calls.count


def _weights(m):
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone() for k, v in m.state_dict().items()}


def _profiled_step(fn):
    """The top-level tensor-work ATen ops PyTorch runs in one forward and one backward of ``fn``
    (benchmarks.torch_ops' count, issue 24's 10% rule), as two dicts."""
    from torch.profiler import ProfilerActivity, profile
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.torch_ops import top_level_work
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(5, 32, generator=g), torch.randint(0, 10, (5,), generator=g)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        loss = fn(x, y)
    fwd = top_level_work(p)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        loss.backward()
    return dict(fwd), dict(top_level_work(p))


def run(rank, mode, port, out):
    import braze
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.set_num_threads(1)
    m, eager_model = _wrap(mode)
    eager = _train(rank, eager_model, eager_model)
    eager_w = _weights(m)
    m, model = _wrap(mode)
    before = braze.stats()
    compiled = torch.compile(model, backend="braze", dynamic=True)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        run_braze = _train(rank, model, compiled)
    after = braze.stats()
    libraries = sum(after[k] - before[k] for k in ("native_compiles", "cache_hits"))
    braze_w = _weights(m)
    # after the weights are taken: a step without the optimizer's, on both ranks (its collectives)
    ops = {"eager": _profiled_step(eager_model), "braze": _profiled_step(compiled)}
    if rank == 0:
        texts = [str(w.message) for w in record if "Braze" in type(w.message).__name__]
        torch.save({"eager": eager, "braze": run_braze, "eager_w": eager_w, "braze_w": braze_w,
                    "libraries": libraries, "warnings": texts, "ops": ops}, out)
    dist.destroy_process_group()


def main(mode, out):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    ranks = [ctx.Process(target=run, args=(r, mode, port, out)) for r in range(2)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join(600)
    return max(p.exitcode or 0 for p in ranks)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
