"""channels_last: NCHW conv/pool chains run in NHWC; permutes cancel between them; results unchanged."""

import numpy as np

from braze import reference
from braze.ops import Builder, tensor
from braze.passes import canonicalize, channels_last, cse, dce


def _nchw_input(b, *weight_shapes):
    """An NCHW input x [n, 8, h, w] (h, w >= 4) and random float32 constants w1, w2, ... of those shapes."""
    n, h, w = b.sym("n"), b.sym("h", 4), b.sym("w", 4)
    x = b.param("x", tensor("f32", n, 8, h, w))
    rng = np.random.default_rng(0)
    return x, [b.constant(rng.standard_normal(s).astype(np.float32), f"w{i + 1}") for i, s in enumerate(weight_shapes)]


def _resnet_block():
    b = Builder()
    x, (w1, w2) = _nchw_input(b, (8, 8, 3, 3), (8, 8, 1, 1))
    y = b.relu(b.op("conv2d", [x, w1], padding=(1, 1, 1, 1)))
    y = b.relu(b.add(b.op("conv2d", [y, w2]), x))
    b.ret(b.op("max_pool2d", [y], kernel=(2, 2)))
    return b.module


def test_permutes_cancel_and_results_hold():
    m = _resnet_block()
    xs = [np.random.default_rng(i).standard_normal(s).astype(np.float32) for i, s in
          enumerate([(1, 8, 4, 4), (2, 8, 7, 9)])]
    want = [reference.run(m, x) for x in xs]
    m = dce(cse(canonicalize(channels_last(m))))
    ops = [n.op for n in m.main.nodes if n.op != "constant"]
    assert ops.count("permute") == 2, ops  # one into NHWC at the input, one back at the output
    assert all(n.attrs["layout"] == "nhwc" for n in m.main.nodes if n.op in ("conv2d", "max_pool2d"))
    for x, w in zip(xs, want):
        np.testing.assert_allclose(reference.run(m, x), w, rtol=1e-5, atol=1e-5)


def test_a_global_average_pool_reads_nhwc_where_it_is():
    """ResNet's head: the 1x1 adaptive average pool after the last block becomes a mean over H and W
    of the NHWC activation, not a transpose of it back to NCHW and then a pool."""
    b = Builder()
    n, h, w = b.sym("n"), b.sym("h", 4), b.sym("w", 4)
    x = b.param("x", tensor("f32", n, 8, h, w))
    w1 = b.constant(np.random.default_rng(0).standard_normal((16, 8, 3, 3)).astype(np.float32), "w1")
    y = b.relu(b.op("conv2d", [x, w1], padding=(1, 1, 1, 1)))
    b.ret(b.op("adaptive_avg_pool2d", [y], output_size=(1, 1)))
    m = b.module
    xs = [np.random.default_rng(i).standard_normal(s).astype(np.float32) for i, s in
          enumerate([(1, 8, 4, 4), (3, 8, 7, 9)])]
    want = [reference.run(m, x) for x in xs]
    m = dce(cse(canonicalize(channels_last(m))))
    ops = [nd.op for nd in m.main.nodes if nd.op != "constant"]
    assert "adaptive_avg_pool2d" not in ops and "reduce_mean" in ops, ops
    mean = next(nd for nd in m.main.nodes if nd.op == "reduce_mean")
    assert mean.inputs[0].rank == 4 and list(mean.attrs["axes"]) == [1, 2]  # H and W of the NHWC value
    for x, w in zip(xs, want):
        np.testing.assert_allclose(reference.run(m, x), w, rtol=1e-5, atol=1e-5)


def test_a_pad_between_convolutions_keeps_no_transpose():
    """A SAME window on a symbolic size is padded apart (the ONNX and TF frontends' explicit pad):
    the pad moves to NHWC with its dims' padding, so conv -> pad -> max pool -> conv stays
    channels-last with one permute at each end."""
    b = Builder()
    x, (w1, w2) = _nchw_input(b, (8, 8, 3, 3), (4, 8, 1, 1))
    y = b.relu(b.op("conv2d", [x, w1]))
    y = b.op("pad", [y], pads=(0, 0, 1, 0, 0, 0, 2, 1), value=float("-inf"))
    y = b.op("max_pool2d", [y], kernel=(3, 2), stride=(2, 2))
    b.ret(b.op("conv2d", [b.op("pad", [y], pads=(0, 0, 0, 1, 0, 0, 1, 0), mode="edge"), w2]))
    m = b.module
    xs = [np.random.default_rng(i).standard_normal(s).astype(np.float32) for i, s in
          enumerate([(1, 8, 4, 4), (2, 8, 9, 7)])]
    want = [reference.run(m, x) for x in xs]
    m = dce(cse(canonicalize(channels_last(m))))
    ops = [nd.op for nd in m.main.nodes if nd.op != "constant"]
    assert ops.count("permute") == 2, ops
    for x, wt in zip(xs, want):
        np.testing.assert_allclose(reference.run(m, x), wt, rtol=1e-5, atol=1e-5)


def test_a_max_pools_indices_and_backward_run_in_nhwc():
    """A training step's pool: in the forward graph the indices run channels-last beside the pool;
    in the backward graph the input's gradient does too (its NCHW loops had gathered across planes:
    0.5 and 0.9 ms of a 16 ms convnet step), and the saved activation x and indices, which the
    plug-in hands over channels-last (permuted to NCHW in the graph), are read as they are."""
    b = Builder()
    n, h, w = b.sym("n"), b.sym("h", 4), b.sym("w", 4)
    x = b.param("x", tensor("f32", n, 8, h, w))
    w1 = b.constant(np.random.default_rng(0).standard_normal((8, 8, 3, 3)).astype(np.float32), "w1")
    b.ret(b.op("max_pool2d_indices", [b.relu(b.op("conv2d", [x, w1], padding=(1, 1, 1, 1)))], kernel=(2, 2)))
    fwd = b.module
    b = Builder()
    n, h, w = b.sym("n"), b.sym("h", 4), b.sym("w", 4)
    oh, ow = (h - 2) // 2 + 1, (w - 2) // 2 + 1
    g, x, idx = b.param("g", tensor("f32", n, 8, oh, ow)), b.param("x", tensor("f32", n, h, w, 8)), \
        b.param("idx", tensor("i64", n, oh, ow, 8))
    to_nchw = (lambda v: b.op("permute", [v], perm=(0, 3, 1, 2)))
    b.ret(b.op("max_pool2d_backward", [b.relu(g), to_nchw(x), to_nchw(idx)], kernel=(2, 2)))
    bwd = b.module
    rng = np.random.default_rng(1)
    nhwc = (lambda a: np.ascontiguousarray(a.transpose(0, 2, 3, 1)))
    xs = [rng.standard_normal((k, 8, hh, ww)).astype(np.float32) for k, hh, ww in ((1, 4, 4), (2, 7, 9))]
    cases = [(rng.standard_normal((a.shape[0], 8, a.shape[2] // 2, a.shape[3] // 2)).astype(np.float32), nhwc(a),
              nhwc(reference.run(fwd, a))) for a in xs]
    want = [reference.run(bwd, *c) for c in cases]
    fwd, bwd = (dce(cse(canonicalize(channels_last(m)))) for m in (fwd, bwd))
    (ind,) = [nd for nd in fwd.main.nodes if nd.op == "max_pool2d_indices"]
    (back,) = [nd for nd in bwd.main.nodes if nd.op == "max_pool2d_backward"]
    assert ind.attrs["layout"] == back.attrs["layout"] == "nhwc"
    assert back.inputs[1].producer is None and back.inputs[2].producer is None  # the inputs themselves
    for a, c, wnt in zip(xs, cases, want):
        np.testing.assert_array_equal(nhwc(reference.run(fwd, a)), c[2])
        np.testing.assert_allclose(reference.run(bwd, *c), wnt, rtol=1e-5, atol=1e-5)


def _conv_bn(constant_params: bool):
    """conv2d (a run-time weight) -> batch_norm -> relu, NCHW; the batch norm's parameters inputs
    (the plug-in's live weights) or constants."""
    b = Builder()
    n, h, w = b.sym("n"), b.sym("h", 4), b.sym("w", 4)
    x = b.param("x", tensor("f32", n, 8, h, w))
    wt = b.param("wt", tensor("f32", 6, 8, 3, 3))
    rng = np.random.default_rng(1)
    vecs = [rng.uniform(0.5, 2.0, 6).astype(np.float32) for _ in range(4)]
    ps = [b.constant(v, f"p{i}") for i, v in enumerate(vecs)] if constant_params else \
        [b.param(name, tensor("f32", 6)) for name in ("gamma", "beta", "mean", "var")]
    y = b.op("batch_norm", [b.op("conv2d", [x, wt], padding=(1, 1, 1, 1)), *ps], eps=1e-3)
    b.ret(b.relu(y))
    return b.module, vecs


def test_a_batch_norm_on_run_time_parameters_becomes_a_scale_and_shift_in_nhwc():
    """Its ``x * s + t`` sinks with the permutes (the convolution's call applies it: test_offload);
    with constant parameters constant_fold folds it into the weight instead, so it stays."""
    m, vecs = _conv_bn(False)
    rng = np.random.default_rng(2)
    feeds = [[rng.standard_normal(s).astype(np.float32) for s in ((k, 8, 5 + k, 4 + 2 * k), (6, 8, 3, 3))] + vecs
             for k in (1, 2)]
    want = [reference.run(m, *f) for f in feeds]
    m = dce(cse(canonicalize(channels_last(m))))
    ops = [nd.op for nd in m.main.nodes if nd.op != "constant"]
    transposes = [nd for nd in m.main.nodes if nd.op == "permute" and sum(d != 1 for d in nd.inputs[0].shape) > 1]
    assert "batch_norm" not in ops and len(transposes) == 2, ops  # the activation's, at the edges
    mul = next(nd for nd in m.main.nodes if nd.op == "mul" and nd.inputs[0].rank == 4)
    assert mul.inputs[0].producer.op == "conv2d" and mul.inputs[0].producer.attrs["layout"] == "nhwc"
    assert mul.inputs[1].shape[-1] == 6 and all(d == 1 for d in mul.inputs[1].shape[:-1])  # one per channel
    for f, w in zip(feeds, want):
        np.testing.assert_allclose(reference.run(m, *f), w, rtol=1e-5, atol=1e-5)
    constant, _ = _conv_bn(True)
    constant = dce(cse(canonicalize(channels_last(constant))))
    assert "batch_norm" in [nd.op for nd in constant.main.nodes]
