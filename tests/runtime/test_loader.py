"""NativeLibrary / NativeFunction: calling ABI entries with numpy and torch tensors."""

import gc

import numpy as np
import pytest

from braze.errors import BrazeError, InputError
from braze.ir.types import DType
from braze.runtime import NativeFunction, NativeLibrary, TensorSpec, load_library

from rt_kernels import ADD1_SRC, INFO_SRC, MULTI_SRC, needs_cc

pytestmark = needs_cc

F32 = [("f32", None)]


@pytest.fixture
def add1():
    return NativeFunction(load_library(ADD1_SRC, name="add1"), "braze_add1", F32, F32)


@pytest.fixture
def info():
    return NativeFunction(load_library(INFO_SRC, name="info"), "braze_info", [(None, None)], [("i64", 1)])


@pytest.fixture
def multi():
    lib = load_library(MULTI_SRC, name="multi")
    return lib


@pytest.mark.parametrize("shape", [(), (0,), (5,), (2, 3), (0, 4), (2, 1, 3, 4)])
def test_add1_numpy(add1, shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    y = add1(x)
    assert type(y) is np.ndarray and y.dtype == np.float32 and y.shape == shape
    np.testing.assert_array_equal(y, x + 1)


def test_add1_large_output_is_aligned(add1):
    x = np.ones((300, 700), np.float32)
    y = add1(x)
    assert y.ctypes.data % 64 == 0 and y.flags.c_contiguous and y.flags.writeable
    np.testing.assert_array_equal(y, 2)


def test_non_contiguous_numpy(add1, rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    for v in (x.T, x[:, ::2], x[::-1], np.broadcast_to(x[0], (3, 6))):
        np.testing.assert_array_equal(add1(v), v + 1)


def test_zero_copy_numpy(info):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = info(x)
    assert out.tolist() == [x.ctypes.data, 0, 2, 3, 4]
    ro = np.broadcast_to(np.float32(1), ()).copy()
    ro.flags.writeable = False  # read-only inputs are fine, still zero-copy
    assert info(ro)[0] == ro.ctypes.data
    t = x.T  # non-contiguous: a contiguous copy is passed
    assert info(t)[0] != x.ctypes.data


def test_dtype_codes_numpy(info):
    for code, d in enumerate(DType):
        x = np.zeros((2,), d.numpy)
        assert info(x)[1] == code, d
    with pytest.raises(InputError, match="not supported"):
        info(np.zeros(2, np.complex64))
    # non-native byte order is converted
    assert info(np.zeros(2, ">f4"))[1] == 0


def test_python_scalars_and_lists(add1):
    with pytest.raises(InputError, match="f64"):
        add1(1.5)
    np.testing.assert_array_equal(add1(np.float32(1.5)), np.float32(2.5))


def test_torch_inputs_and_outputs(add1, info):
    torch = pytest.importorskip("torch")
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    y = add1(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == (2, 3)
    assert torch.equal(y, x + 1)
    # zero-copy for contiguous CPU tensors, also with a storage offset
    assert info(x)[0].item() == x.data_ptr()
    s = x[1]
    assert info(s)[0].item() == s.data_ptr()
    # non-contiguous and requires_grad inputs
    assert torch.equal(add1(x.t()), x.t() + 1)
    # an input that requires grad: refused while grad mode is on (the result would be cut off
    # from autograd), used as is under no_grad / inference_mode
    w = torch.ones(3, requires_grad=True)
    with pytest.raises(InputError, match="requires grad"):
        add1(w)
    for ctx in (torch.no_grad, torch.inference_mode):
        with ctx():
            r = add1(w)
        assert not r.requires_grad and torch.equal(r, torch.full((3,), 2.0))
    assert torch.equal(add1(torch.zeros(0, 3)), torch.ones(0, 3))
    # dtype codes incl. bfloat16 and torch's float8 types (its sub-byte types are packed: not braze's)
    for code, d in enumerate(DType):
        if d.is_narrow and not (d.is_minifloat and hasattr(torch, d.name)):
            continue
        td = getattr(torch, d.name)
        assert info(torch.zeros(2, dtype=td))[1].item() == code
    with pytest.raises(InputError, match="f64"):
        add1(torch.zeros(2, dtype=torch.float64))


def test_large_torch_outputs_are_numpy_backed_tensors(add1):
    """An output of 1 MiB or more is a NumPy array under the tensor (huge pages, no page fault
    per 4 KiB on every call): still a plain, writable, 64-byte aligned float32 tensor that
    outlives its array's last Python reference."""
    torch = pytest.importorskip("torch")
    x = torch.arange(512 * 1024, dtype=torch.float32).reshape(512, 1024)  # 2 MiB
    y = add1(x)
    gc.collect()
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.is_contiguous()
    assert torch.equal(y, x + 1) and y.data_ptr() % 64 == 0
    y += 1  # writable, and it is the data the kernel wrote
    assert torch.equal(y, x + 2)
    z = add1(x)  # y is alive: z gets another block, and y keeps its values
    assert z.data_ptr() != y.data_ptr() and torch.equal(y, x + 2) and torch.equal(z, x + 1)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_large_outputs_reuse_a_dropped_block_and_never_a_live_one(add1, kind):
    """Outputs of 1 MiB and more come from the function's BlockPool: a block whose output
    the caller dropped is used again (no fresh pages to fault in and zero), one the caller
    still holds, directly or through a view, never is."""
    x = np.arange(512 * 1024, dtype=np.float32).reshape(512, 1024)  # 2 MiB
    if kind == "torch":
        torch = pytest.importorskip("torch")
        x = torch.from_numpy(x)
    ptr = (lambda t: t.data_ptr()) if kind == "torch" else (lambda a: a.ctypes.data)
    y = add1(x)
    first = ptr(y)
    del y
    gc.collect()
    y = add1(x)
    assert ptr(y) == first  # the dropped block again
    view = y[3:5]
    del y
    z = add1(x)
    assert ptr(z) != first and (view == x[3:5] + 1).all()  # the view keeps its block
    z2 = add1(x)
    assert len({ptr(z), ptr(z2), first}) == 3 and (z == z2).all()


def test_without_output_reuse_a_dropped_block_is_freed():
    """``reuse_outputs=False`` (the plug-in's training graphs): nothing holds a large output once
    the caller drops it, so its memory goes back (a pool would hold a step's activations
    through the backward, and its gradients through the next forward)."""
    import weakref
    fn = NativeFunction(load_library(ADD1_SRC, name="add1"), "braze_add1", F32, F32, reuse_outputs=False)
    x = np.arange(512 * 1024, dtype=np.float32).reshape(512, 1024)  # 2 MiB
    y = fn(x)
    assert (y == x + 1).all()
    gone = weakref.ref(y.base if y.base is not None else y)
    del y
    gc.collect()
    assert gone() is None


def test_block_pool_holds_at_most_keep_blocks():
    from braze.runtime.tensors import BlockPool
    pool = BlockPool(keep=2)
    live = [pool.take(1 << 20) for _ in range(4)]  # held by the caller: four distinct blocks
    assert len({a.ctypes.data for a in live}) == 4 and len(pool._blocks) == 2
    kept = pool._blocks[0].ctypes.data
    del live
    again = pool.take(1 << 20)
    assert again.ctypes.data == kept and len(pool._blocks) == 2
    assert pool.take(4 << 20).size == 4 << 20  # too small blocks are not used for a large request
    assert pool.take(1 << 18).size == 1 << 18  # nor are much larger ones for a small request


def test_pooled_outputs_from_many_threads_are_distinct(add1):
    """8 threads calling at once each get their own output block, with their own values."""
    from braze.testing import run_threads
    xs = [np.full((512, 1024), t, np.float32) for t in range(8)]

    def work(t):
        for _ in range(20):
            outs = [add1(xs[t]) for _ in range(2)]
            assert outs[0].ctypes.data != outs[1].ctypes.data
            for o in outs:
                assert (o == t + 1).all()
    assert run_threads(work, 8) == []


def test_mixed_kinds_give_torch(multi):
    torch = pytest.importorskip("torch")
    c = np.array([1, 2, 3], np.float32)
    f = multi.create([c, np.array(3, np.int64)]).function("braze_affine", [("f32", 1), ("i64", 0)], [("f32", 1), ("f64", 0)])
    y, s = f(torch.ones(3), np.array(2, np.int64))
    assert isinstance(y, torch.Tensor) and isinstance(s, torch.Tensor)
    assert y.tolist() == [3, 4, 5] and s.item() == 12


def test_input_errors_then_keeps_working(add1):
    x32 = np.ones(3, np.float32)
    with pytest.raises(InputError, match=r"input 0 \(x\): expected dtype f32, got i32"):
        add1(np.ones(3, np.int32))
    with pytest.raises(InputError, match="expected rank <= 4, got 5"):
        add1(np.ones((1,) * 5, np.float32))
    with pytest.raises(InputError, match="above 1000000"):
        add1(np.empty((2000001,), np.float32))
    with pytest.raises(InputError, match="takes 1 inputs, got 2"):
        add1(x32, x32)
    np.testing.assert_array_equal(add1(x32), 2)


def test_init_constants_and_multiple_outputs(multi):
    c = np.array([1, 2, 3], np.float32)
    inst = multi.create([c, np.array(3, np.int64)])
    del c
    gc.collect()  # the instance keeps the constants alive
    f = inst.function("braze_affine", [TensorSpec(DType.float32, 1, "x"), ("i64", 0)],
                       [("f32", 1), ("f64", 0)])
    y, s = f(np.ones(3, np.float32), np.array(2, np.int64))
    assert y.tolist() == [3, 4, 5] and s.shape == () and s.dtype == np.float64 and s == 12
    with pytest.raises(InputError, match=r"dim 0 is 4, expected 3"):
        f(np.ones(4, np.float32), np.array(2, np.int64))
    with pytest.raises(InputError, match=r"input 1 \(k\): expected rank 0, got rank 1"):
        f(np.ones(3, np.float32), np.array([2], np.int64))
    with pytest.raises(InputError, match="must be >= 0, got -1"):
        f(np.ones(3, np.float32), np.array(-1, np.int64))
    y, s = f(np.ones(3, np.float32), np.array(0, np.int64))
    assert y.tolist() == [1, 2, 3]


def test_init_errors(multi):
    with pytest.raises(BrazeError, match="expected 2 constants, got 1"):
        multi.create([np.ones(3, np.float32)])
    lib = load_library(ADD1_SRC, name="add1")
    lib.create([])  # no braze_create: fine without constants
    with pytest.raises(BrazeError, match="no braze_create"):
        lib.create([np.ones(1)])


def test_instances_of_one_library_keep_their_own_constants(multi):
    """Two models sharing a library (same code, other weights) never see each other's weights."""
    specs = ([("f32", 1), ("i64", 0)], [("f32", 1), ("f64", 0)])
    f1 = multi.create([np.array([1, 2, 3], np.float32), np.array(3, np.int64)]).function("braze_affine", *specs)
    f2 = multi.create([np.array([5, 6], np.float32), np.array(2, np.int64)]).function("braze_affine", *specs)
    k = np.array(0, np.int64)
    assert f1(np.ones(3, np.float32), k)[0].tolist() == [1, 2, 3]
    assert f2(np.ones(2, np.float32), k)[0].tolist() == [5, 6]
    assert f1(np.ones(3, np.float32), k)[0].tolist() == [1, 2, 3]
    with pytest.raises(BrazeError, match="no model instance"):
        multi.function("braze_affine", *specs)(np.ones(3, np.float32), k)


def test_entry_failures_are_brazeerrors(multi):
    multi = multi.create([np.ones(3, np.float32), np.array(3, np.int64)])
    bad = multi.function("braze_bad_alloc", [], [("f32", 1)])
    with pytest.raises(BrazeError, match="output 7") as ei:
        bad()
    assert not isinstance(ei.value, InputError)
    internal = multi.function("braze_internal", [], [])
    with pytest.raises(BrazeError, match=r"something broke inside \(on purpose\)") as ei:
        internal()
    assert not isinstance(ei.value, InputError)
    silent = multi.function("braze_silent", [], [])
    with pytest.raises(InputError, match="error code 4"):
        silent()
    forgets = multi.function("braze_forgets_output", [], [("f32", 1)])
    with pytest.raises(BrazeError, match=r"without producing outputs \[0\]"):
        forgets()
    with pytest.raises(BrazeError, match="no symbol 'braze_nope'"):
        multi.function("braze_nope", [], [])


def test_output_spec_mismatch_is_caught(multi):
    multi = multi.create([np.ones(3, np.float32), np.array(3, np.int64)])
    f = multi.function("braze_bad_alloc", [], [("f32", 1)] * 8)
    # the entry allocates output 7 as f32[4] then returns: outputs 0..6 are missing
    with pytest.raises(BrazeError, match="without producing outputs"):
        f()
    g = multi.function("braze_bad_alloc", [], [("f32", 1)] * 7 + [("i64", 1)])
    with pytest.raises(BrazeError, match="expected 4"):
        g()


def test_native_library_missing_file(tmp_path):
    with pytest.raises(BrazeError, match="cannot load"):
        NativeLibrary(tmp_path / "nope.so")
