"""The memory-bound chains of the benchmarks (braze/zoo.py): one stitch kernel each, and the
same results as eager at 1 row, an odd row count and 64 rows; and the GEMM block beside them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import braze  # noqa: E402
from braze import zoo  # noqa: E402
from braze.testing import assert_close  # noqa: E402


@pytest.mark.parametrize("name", ["chain_ln", "chain_rms"])
def test_chain_is_one_stitch_kernel_and_matches_eager(name):
    zm = zoo.get(name)
    cm = braze.compile(zoo.export(zm))
    assert [n.attrs["kind"] for n in cm.module.main.nodes if n.op == "fused"] == ["stitch"]
    for dims in zm.test_shapes:
        x = zm.make_inputs(**dims)
        with torch.no_grad():
            want = zm.module(*x).numpy()
        assert_close(cm(*x).numpy(), want, rtol=1e-5, atol=1e-5, what=f"{name} at {dims}")
        assert zm.bytes_moved(**dims) >= 2 * x[0].numel() * 4  # the input read and the output written


def test_gemm_block_is_one_gemm_with_post_ops_then_a_stitch_and_matches_eager():
    zm = zoo.get("block")
    cm = braze.compile(zoo.export(zm))
    fused = [n for n in cm.module.main.nodes if n.op == "fused"]
    assert [n.attrs["kind"] for n in fused] == ["gemm", "stitch"]
    assert fused[0].attrs["post_ops"] == ["gelu", "residual"]  # the bias is the linear's own input
    for dims in zm.test_shapes:
        x = zm.make_inputs(**dims)
        with torch.no_grad():
            want = zm.module(*x).numpy()
        assert_close(cm(*x).numpy(), want, rtol=1e-4, atol=1e-4, what=f"block at {dims}")
        assert zm.flops(**dims) == 2 * dims["rows"] * 768 * 768


def test_chain_output_above_the_streaming_threshold_matches_eager():
    """16,385 rows of 768 (50 MB out): the kernel streams its stores past the caches
    (schedule.vectorize STREAM_BYTES), and gives eager's values, twice in a row (the second
    call's output is a reused block: runtime BlockPool)."""
    from braze.schedule.vectorize import STREAM_BYTES
    zm = zoo.get("chain_rms")
    rows = STREAM_BYTES // (768 * 4) + 1
    cm = braze.compile(zm.module, example_inputs=zm.example_inputs(), dynamic_shapes=zm.dynamic_shapes)
    x = zm.make_inputs(rows=rows)
    with torch.no_grad():
        want = zm.module(*x).numpy()
    for _ in range(2):
        assert_close(cm(*x).numpy(), want, rtol=1e-5, atol=1e-5, what=f"chain_rms at {rows} rows")


def test_the_host_reports_a_kernel_that_could_not_allocate_its_row_buffers(tmp_path, monkeypatch):
    """chain_ln's stitch kernel keeps rows in buffers; the entry checks the kernel's status
    and fails with BRAZE_ERR_ALLOC (a clear error) instead of running on."""
    monkeypatch.setenv("BRAZE_DUMP", str(tmp_path))
    zm = zoo.get("chain_ln")
    braze.compile(zm.module, example_inputs=zm.example_inputs(), dynamic_shapes=zm.dynamic_shapes)
    src = (tmp_path / "model.c").read_text()
    assert "bz_malloc_n(" in src and "return bz_fail;" in src
    assert "could not allocate its row buffers" in src and "BRAZE_FAIL(BRAZE_ERR_ALLOC" in src
