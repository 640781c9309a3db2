"""A buffer the graph writes (a decoder's KV cache, written at ``start_pos`` by a slice assignment,
``index_copy_`` or ``index_put_``) is written in place: the region writes only the new rows into
the caller's tensor and returns that tensor, so AOTAutograd's copy back is a copy onto itself.
Before, each step made a new cache and copied it back (``Module.donated``, docs/plugin.md)."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from braze.errors import BrazeWarning  # noqa: E402
from braze.plugin import region as region_mod  # noqa: E402

nn = torch.nn
CACHE = 16


def _braze_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, BrazeWarning)]


class Decoder(nn.Module):
    """A one-head decoder over a cache buffer of CACHE positions, written by ``write``."""

    def __init__(self, write: str, dtype=torch.float32, read_before: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.write, self.read_before = write, read_before
        self.qkv = nn.Linear(8, 24).to(dtype)
        self.register_buffer("ck", torch.zeros(2, CACHE, 8, dtype=dtype))
        self.register_buffer("cv", torch.zeros(2, CACHE, 8, dtype=dtype))

    def forward(self, x, start_pos: int):
        n = x.shape[1]
        q, k, v = self.qkv(x).chunk(3, -1)
        before = self.ck[:, :n] * 1 if self.read_before else None  # the old rows, read before the write
        if self.write == "slice":
            self.ck[:, start_pos:start_pos + n] = k
            self.cv[:, start_pos:start_pos + n] = v
        elif self.write == "index_copy":  # transformers' StaticCache
            pos = torch.arange(start_pos, start_pos + n)
            self.ck.index_copy_(1, pos, k)
            self.cv.index_copy_(1, pos, v)
        else:  # index_put_
            pos = torch.arange(start_pos, start_pos + n)
            self.ck[:, pos] = k
            self.cv[:, pos] = v
        keys, values = self.ck[:, :start_pos + n], self.cv[:, :start_pos + n]
        y = (q @ keys.transpose(1, 2) / 8 ** 0.5).softmax(-1) @ values
        return y if before is None else y + before


@pytest.fixture
def region_results(monkeypatch):
    """(arguments, results) of every call of a braze region."""
    seen = []
    call = region_mod.Region.__call__

    def spy(self, *args):
        out = call(self, *args)
        seen.append((args, out if isinstance(out, (tuple, list)) else (out,)))
        return out
    monkeypatch.setattr(region_mod.Region, "__call__", spy)
    return seen


def _steps():
    torch.manual_seed(1)
    return [torch.randn(2, 3, 8)] + [torch.randn(2, 1, 8) for _ in range(6)]


def _run(write, dtype, read_before=False):
    """Prefill then decode, against eager: outputs and both caches after every step."""
    eager, model = Decoder(write, dtype, read_before), Decoder(write, dtype, read_before)
    c = torch.compile(model, backend="braze", dynamic=True)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    with warnings.catch_warnings(record=True) as record, torch.no_grad():
        warnings.simplefilter("always")
        pos = 0
        for x in _steps():
            x = x.to(dtype)
            torch.testing.assert_close(c(x, pos), eager(x, pos), **tol)
            torch.testing.assert_close(model.ck, eager.ck, **tol)
            torch.testing.assert_close(model.cv, eager.cv, **tol)
            pos += x.shape[1]
    assert not _braze_warnings(record), _braze_warnings(record)
    return model


@pytest.mark.parametrize("write", ["slice", "index_copy", "index_put"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_kv_cache_is_written_in_place(write, dtype, region_results, fresh_warnings):
    """Eager's answers and caches at every step, natively; the region's results include the cache
    buffers themselves (written there), at the decode steps, whose graph is dynamic."""
    model = _run(write, dtype)
    args, out = region_results[-1]
    assert any(o is model.ck for o in out) and any(o is model.cv for o in out), \
        "the region made new caches: it wrote none in place"


def test_a_buffer_also_read_is_not_written_in_place(region_results, fresh_warnings):
    """A graph that reads the cache besides writing it gets new caches (its reads must see the old
    rows), with eager's answers."""
    model = _run("slice", torch.float32, read_before=True)
    args, out = region_results[-1]
    assert not any(o is model.ck for o in out)


def _outcome(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 -- the test compares which exception
        return type(e)


@pytest.mark.parametrize("write", ["slice", "index_copy"])
@pytest.mark.parametrize("n", [1, 2])
def test_a_write_past_the_end_does_as_eager(write, n, fresh_warnings):
    """A position past the cache's end: braze's call fails and PyTorch runs it, doing what eager
    does (a slice assignment of one row there writes nothing; of two, or index_copy, raises); the
    caches stay eager's, and the next call is right."""
    eager, model = Decoder(write), Decoder(write)
    c = torch.compile(model, backend="braze", dynamic=True)
    steps = _steps()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pos = 0
        for x in steps[:4]:
            c(x, pos), eager(x, pos)
            pos += x.shape[1]
        late = torch.randn(2, n, 8)
        want, got = _outcome(lambda: eager(late, CACHE)), _outcome(lambda: c(late, CACHE))
        if isinstance(want, type):
            assert isinstance(got, type) and issubclass(got, want), got  # dynamo's own subclass when it traces
        else:
            torch.testing.assert_close(got, want)
        torch.testing.assert_close(model.ck, eager.ck)
        torch.testing.assert_close(c(steps[5], pos), eager(steps[5], pos))
        torch.testing.assert_close(model.cv, eager.cv)


def test_two_instances_write_their_own_caches_from_two_threads(fresh_warnings):
    """Two instances of one decoder (one C library) each write their own cache; run in two threads
    at once, each matches its own eager twin at every step."""
    import threading
    twins = [(Decoder("slice"), Decoder("slice")) for _ in range(2)]
    compiled = [torch.compile(m, backend="braze", dynamic=True) for m, _ in twins]
    errors = []

    def decode(i):
        try:
            (model, eager), c = twins[i], compiled[i]
            torch.manual_seed(10 + i)
            pos = 0
            with torch.no_grad():
                for x in [torch.randn(2, 2, 8)] + [torch.randn(2, 1, 8) for _ in range(8)]:
                    torch.testing.assert_close(c(x, pos), eager(x, pos))
                    torch.testing.assert_close(model.ck, eager.ck)
                    pos += x.shape[1]
        except Exception as e:  # noqa: BLE001 -- reported by the main thread
            errors.append(e)
    decode(0)  # compiled one after the other: the threads then only call
    decode(1)
    threads = [threading.Thread(target=decode, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
