"""Load a compiled library with ctypes and call its entries (braze_abi.h).

``NativeLibrary(path).create(constants, threads)`` makes one model instance
(``braze_create``): its constants, prepacked weights and thread count live in
that instance, so two models that share a library never share weights.
``NativeModel.function(symbol, ...)`` binds an entry to the instance.

One ``NativeFunction.__call__`` is one native call: the inputs' data
pointers, dtype codes and shapes are packed into one int64 buffer laid out as
a ``braze_tensor[]`` followed by the shapes; outputs are allocated by a
Python callback the entry calls once per output. Inputs are used in place
(zero-copy) when C-contiguous on the CPU; other inputs are copied to a
contiguous tensor first. Outputs are numpy arrays, or torch tensors when any
input was a torch tensor.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import weakref
from ctypes import CFUNCTYPE, POINTER, addressof, c_int32, c_int64, c_void_p, py_object
from pathlib import Path

import numpy as np

from .. import log as _logging
from ..errors import BrazeError, InputError
from . import tensors as T
from .tensors import TensorSpec, as_spec
from .threads import default_threads

_log = _logging.get("runtime")

ERRLEN = 1024

# error codes (braze_abi.h)
OK, ERR_RANK, ERR_DTYPE, ERR_SHAPE, ERR_RANGE, ERR_CONSTRAINT, ERR_ALLOC, ERR_INTERNAL = range(8)
ERROR_NAMES = {ERR_RANK: "rank", ERR_DTYPE: "dtype", ERR_SHAPE: "shape", ERR_RANGE: "range",
               ERR_CONSTRAINT: "constraint", ERR_ALLOC: "alloc", ERR_INTERNAL: "internal"}
_INPUT_ERRORS = (ERR_RANK, ERR_DTYPE, ERR_SHAPE, ERR_RANGE, ERR_CONSTRAINT)


def as_host_array(x) -> np.ndarray:
    """``x`` as a numpy array: zero-copy from any ``__dlpack__`` producer on the CPU (JAX,
    CuPy's host arrays, TensorFlow, ...), else ``np.asarray``."""
    if hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray):
        try:
            return np.from_dlpack(x)
        except (BufferError, TypeError, RuntimeError, ValueError) as e:
            raise InputError(f"cannot read a {type(x).__name__} through DLPack: {e}",
                             hint="braze runs on the CPU: pass a CPU tensor, or a numpy array") from None
    return np.asarray(x)


def bind_inputs(names: list[str], args: tuple, kwargs: dict, what: str) -> tuple:
    """The positional inputs of a call given positionally, as keywords, or as one dict keyed by
    input name (ONNX Runtime's and OpenVINO's way)."""
    if len(args) == 1 and isinstance(args[0], dict) and not kwargs:
        kwargs, args = dict(args[0]), ()
    if not kwargs:
        return args
    if args:
        raise InputError(f"{what}: pass the inputs positionally or by name, not both")
    unknown = sorted(set(kwargs) - set(names))
    missing = [n for n in names if n not in kwargs]
    if unknown or missing:
        raise InputError(f"{what} takes inputs {', '.join(names)}" +
                         (f"; unknown: {', '.join(map(str, unknown))}" if unknown else "") +
                         (f"; missing: {', '.join(missing)}" if missing else ""))
    return tuple(kwargs[n] for n in names)


class BrazeTensor(ctypes.Structure):
    """``braze_tensor`` (for reference and for C-side tests; calls pack words directly)."""

    _fields_ = [("data", c_void_p), ("dtype", c_int32), ("ndim", c_int32), ("shape", POINTER(c_int64))]


assert ctypes.sizeof(BrazeTensor) == 24 and ctypes.sizeof(c_void_p) == 8, "braze needs a 64-bit platform"

# alloc_ctx is passed as a PyObject* (the per-call state), borrowed for the call's duration
ALLOC_FN = CFUNCTYPE(c_void_p, py_object, c_int32, c_int32, c_int32, POINTER(c_int64))
ENTRY_FN = CFUNCTYPE(c_int32, c_void_p, c_void_p, c_int32, ALLOC_FN, py_object, c_void_p, c_int32)
CREATE_FN = CFUNCTYPE(c_int32, c_void_p, c_int32, c_int32, c_void_p, c_void_p, c_int32)
DESTROY_FN = CFUNCTYPE(None, c_void_p)
SET_ADAPT_FN = CFUNCTYPE(None, c_void_p, c_int32)
TEAM_STATS_FN = CFUNCTYPE(None, c_void_p, c_void_p)
TEAM_FORCE_FN = CFUNCTYPE(None, c_int32)

_LITTLE = sys.byteorder == "little"
_from_buffer = ctypes.c_char.from_buffer
_tls = threading.local()  # one error buffer per thread
# non-NULL pointer handed out for zero-element outputs (never dereferenced)
_EMPTY = (c_int64 * 8)()
_EMPTY_ADDR = addressof(_EMPTY)


class _NoTensor:
    pass


def _torch_fast_path():
    """(torch.Tensor, torch dtype -> code, torch.is_grad_enabled) once torch is imported;
    a class nothing is an instance of before that (braze.load needs no torch)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return _NoTensor, {}, bool
    return torch.Tensor, T._torch_tables()[0], torch.is_grad_enabled


def _error_message(err, rc: int) -> str:
    msg = err.value.decode("utf-8", "replace").strip()
    return msg or f"native entry failed with error code {rc} ({ERROR_NAMES.get(rc, 'unknown')})"


class OmpOps(ctypes.Structure):
    """braze_omp.h's bz_omp_ops: a runtime's entry points (tests call the thread-count ones)."""
    _fields_ = [("abi", c_int32), ("size", c_int32), ("name", ctypes.c_char_p),
                *((f, c_void_p) for f in ("parallel", "parallel_start", "parallel_end", "parallel_loop_dynamic",
                                          "barrier", "loop_static_start", "loop_static_next", "loop_dynamic_start",
                                          "loop_dynamic_next", "loop_end", "loop_end_nowait", "critical_start",
                                          "critical_end", "get_thread_num", "get_num_threads")),
                ("get_max_threads", CFUNCTYPE(c_int32)), ("set_num_threads", CFUNCTYPE(None, c_int32)),
                ("in_parallel", c_void_p), ("counter", CFUNCTYPE(c_int64, c_int32))]

    @classmethod
    def at(cls, table) -> "OmpOps":
        return cls.from_address(table)


class _ProcessTeams:
    """One OpenMP runtime for every braze library in the process (braze_omp.h): each library
    carries one, and all but the first run their OpenMP calls on the first's, so a thread count
    set by one call reaches every kernel and oneDNN primitive it runs, and the process keeps one
    pool of workers per calling thread. A library that links the oneDNN helper brings the
    helper's runtime, which libdnnl's calls run on; where the helper could not bind libdnnl
    (braze_dnnl_omp_status), that runtime is libgomp's, and it becomes everyone's."""

    def __init__(self):
        self.lock = threading.Lock()
        self.table = None  # the runtime every library uses (a bz_omp_ops pointer)
        self.bound = None  # the helper's libdnnl binding is settled (bound or not)
        self.users = []    # each library's braze_omp_use, to move them all at once

    def join(self, cdll) -> None:
        if not hasattr(cdll, "braze_omp_use"):
            return  # a CUDA target's library: no CPU teams
        use = cdll.braze_omp_use
        use.argtypes, use.restype = [c_void_p], c_int32
        with self.lock:
            helper = getattr(cdll, "braze_dnnl_omp_use", None)  # found through the helper it links
            if helper is not None and self.bound is None:
                cdll.braze_dnnl_omp_status.restype = c_int32
                self.bound = cdll.braze_dnnl_omp_status() == 1
                if not self.bound:  # libdnnl runs on libgomp: so must everything else
                    ops = cdll.braze_dnnl_omp_ops
                    ops.restype = c_void_p
                    self._move(ops())
                    _log.info("OpenMP runtime: libgomp, since the oneDNN helper could not bind libdnnl's "
                              "calls to braze's teams (status %d)", cdll.braze_dnnl_omp_status())
            if self.table is None:
                ops = cdll.braze_omp_ops
                ops.restype = c_void_p
                self.table = ops()
                _log.info("OpenMP runtime: %s", self.describe())
            elif use(self.table):
                _log.warning("%s was built with another version of braze's thread runtime, so it keeps its own "
                             "threads; delete its BRAZE_CACHE_DIR entry to rebuild it", cdll._name)
            self.users.append(use)
            if helper is not None and self.bound:
                helper.argtypes, helper.restype = [c_void_p], c_int32
                helper(self.table)

    def _move(self, table) -> None:
        self.table = table
        for use in self.users:
            use(table)

    def ops(self) -> OmpOps | None:
        """The process's runtime, once a library is loaded: ``ops().set_num_threads(n)`` is
        ``omp_set_num_threads(n)`` for the calling thread's braze calls."""
        return None if self.table is None else OmpOps.at(self.table)

    def describe(self) -> str:
        if self.table is None:
            return "none loaded"
        name = OmpOps.at(self.table).name.decode()
        return ("braze's teams (a waiting thread spins up to 100 us, then sleeps; while the cores are shared, "
                "workers sleep at once, the calling thread spins up to 1 ms, and a worker woken on its CPU moves off "
                "it: braze_omp.h)" if name == "braze"
                else "libgomp's (BRAZE_OMP=openmp, or libdnnl unbound)")


PROCESS_TEAMS = _ProcessTeams()


class NativeLibrary:
    """A shared library following the braze ABI, loaded with ctypes (RTLD_LOCAL).

    The library is never unloaded (dlclose with live OpenMP threads is unsafe).
    """

    def __init__(self, path):
        self.path = Path(path)
        try:
            self._cdll = ctypes.CDLL(str(self.path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        except OSError as e:
            raise BrazeError(f"cannot load the native library {self.path}: {e}",
                             hint="a corrupt cache entry is rebuilt by compiling again; "
                                  "deleting BRAZE_CACHE_DIR is always safe") from None
        PROCESS_TEAMS.join(self._cdll)
        # a CUDA-target model (codegen/cuda_host.py) takes and gives CUDA tensors where they are
        self.cuda = hasattr(self._cdll, "braze_target")
        if self.cuda and os.environ.get("BRAZE_CUBLAS", "1") != "0":
            from .cuda import preload_cublas
            preload_cublas()

    def has_symbol(self, symbol: str) -> bool:
        return hasattr(self._cdll, symbol)

    def _symbol(self, symbol: str, proto):
        try:
            return proto((symbol, self._cdll))
        except AttributeError:
            raise BrazeError(f"the native library {self.path} has no symbol {symbol!r}") from None

    def create(self, constants=(), threads: int | None = None, adapt: bool = False) -> "NativeModel":
        """One model instance (``braze_create``) holding ``constants`` and the thread count.

        Each constant is a numpy array or torch tensor; non-contiguous ones are
        copied. A library without ``braze_create`` accepts only an empty list.
        """
        return NativeModel(self, constants, threads, adapt)

    def team_calls(self) -> tuple[int, int] | None:
        """(calls run with the full team, calls run with fewer threads while the cores were
        shared) by this library's adaptive instances (braze_team.h); None for a library built
        without the counters."""
        if not self.has_symbol("braze_team_stats"):
            return None
        full, fewer = c_int64(), c_int64()
        self._symbol("braze_team_stats", TEAM_STATS_FN)(addressof(full), addressof(fewer))
        return full.value, fewer.value

    def force_team(self, n: int) -> None:
        """Run every adaptive call of this library with ``n`` threads (0: decide again), for
        tests and measurements."""
        self._symbol("braze_team_force", TEAM_FORCE_FN)(int(n))

    def function(self, symbol: str, param_specs, result_specs) -> "NativeFunction":
        """An entry of a library without model state (its entries get model == NULL)."""
        return NativeFunction(self, symbol, param_specs, result_specs)

    def __repr__(self):
        return f"NativeLibrary({str(self.path)!r})"


class NativeModel:
    """One instance of a compiled model: ``braze_create``'s handle, destroyed with the object."""

    def __init__(self, lib: NativeLibrary, constants=(), threads: int | None = None, adapt: bool = False):
        self.lib = lib
        self.handle = None
        self.threads = 0  # OpenMP's default; braze_create's count below
        keep, ptrs = [], []
        for c in constants:
            if T.is_torch_tensor(c):
                c = c.detach()
                if c.device.type != "cpu":
                    raise InputError(f"constant on device {c.device}; braze runs on the CPU")
                c = c.contiguous()
                keep.append(c)
                ptrs.append(c.data_ptr() or _EMPTY_ADDR)
            else:
                a = np.ascontiguousarray(c)
                keep.append(a)
                ptrs.append(a.ctypes.data if a.size else _EMPTY_ADDR)
        self._constants = keep  # braze_create keeps the pointers: alive as long as the instance
        if not lib.has_symbol("braze_create"):
            if keep:
                raise BrazeError(f"the native library {lib.path} has no braze_create, "
                                 f"but {len(keep)} constants were given")
            return
        if not threads:
            threads, why = default_threads()
        else:
            why = "threads= set"
        _log.info("%s threads: %s; %s; run by %s", threads or "OpenMP's default number of", why,
                  "fewer while other processes take the cores (adapt_threads)" if adapt else "adapt_threads off",
                  PROCESS_TEAMS.describe())
        self.threads = threads
        fn = lib._symbol("braze_create", CREATE_FN)
        arr = (c_void_p * max(1, len(ptrs)))(*ptrs)
        err = ctypes.create_string_buffer(ERRLEN)
        out = c_void_p()
        rc = fn(addressof(arr), len(ptrs), int(threads), addressof(out), addressof(err), ERRLEN)
        if rc != OK:
            raise (InputError if rc in _INPUT_ERRORS else BrazeError)(
                _error_message(err, rc), where=f"braze_create in {lib.path}")
        self.handle = out.value
        destroy = lib._symbol("braze_destroy", DESTROY_FN)
        weakref.finalize(self, destroy, self.handle).atexit = False
        if lib.has_symbol("braze_set_adapt"):  # a library built before it: never adapts
            lib._symbol("braze_set_adapt", SET_ADAPT_FN)(self.handle, int(adapt))

    def function(self, symbol: str, param_specs, result_specs, reuse_outputs: bool = True,
                 in_place: dict[int, int] | None = None) -> "NativeFunction":
        return NativeFunction(self, symbol, param_specs, result_specs, reuse_outputs=reuse_outputs, in_place=in_place)


class _Call:
    """Per-call state reached from the alloc callback through alloc_ctx."""

    __slots__ = ("fn", "outputs", "torch", "error", "device")

    def __init__(self, fn, n_out, torch, device=None):
        self.fn = fn
        self.outputs = [None] * n_out
        self.torch = torch
        self.error = None
        self.device = device  # a CUDA input's torch device: the outputs are made there


def _alloc(ctx, index, dtype, ndim, shape_p):
    try:
        return ctx.fn._allocate(ctx, index, dtype, ndim, shape_p)
    except BaseException as e:  # an exception must not cross into C
        ctx.error = e
        return None


_ALLOC = ALLOC_FN(_alloc)


class NativeFunction:
    """A native entry ``int32_t symbol(const braze_tensor*, int32_t, braze_alloc_fn, void*, char*, int32_t)``.

    ``param_specs`` / ``result_specs``: one spec per input / output, each a
    TensorSpec, a TensorType, a ``(dtype, rank)`` tuple or a dtype; rank or
    dtype None means any. The entry itself validates inputs; the specs give
    the input count and check what the entry allocates.
    """

    def __init__(self, owner, symbol: str, param_specs, result_specs, instance: int | None = None,
                 reuse_outputs: bool = True, in_place: dict[int, int] | None = None):
        """``owner``: a NativeModel (its instance is passed to every call) or a NativeLibrary
        whose entries get ``instance`` (an instance made elsewhere, e.g. by an artifact's
        loader, kept alive by the caller; default NULL: a library without model state).
        ``reuse_outputs``: large outputs the caller dropped serve later calls (``BlockPool``).
        ``in_place``: output -> input, for outputs the entry makes in an input the caller donated
        (``passes.memory.donated_results``): the entry allocates none, and returns that input."""
        if isinstance(owner, NativeModel):
            self.model, lib = owner, owner.lib
        else:
            self.model, lib = None, owner
        self._handle = self.model.handle if self.model is not None else instance
        self.lib = lib
        self.symbol = symbol
        self.params: tuple[TensorSpec, ...] = tuple(as_spec(s) for s in param_specs)
        self.results: tuple[TensorSpec, ...] = tuple(as_spec(s) for s in result_specs)
        self._fn = lib._symbol(symbol, ENTRY_FN)
        self._n_in = len(self.params)
        self._n_out = len(self.results)
        self._res_codes = [None if s.dtype is None else T.DTYPE_CODE[s.dtype] for s in self.results]
        self._res_ranks = [s.rank for s in self.results]
        # the previous call's outputs may still be alive while this call fills its own
        self._pool = T.BlockPool(keep=2 * self._n_out + 2) if reuse_outputs else None
        self._in_place = tuple((in_place or {}).items())

    def __repr__(self):
        return f"NativeFunction({self.symbol!r}, {len(self.params)} inputs, {len(self.results)} outputs)"

    # ------------------------------------------------------------------ inputs

    def _label(self, i: int) -> str:
        name = self.params[i].name if i < len(self.params) else None
        return f"{i} (%{name})" if name else str(i)

    def _convert(self, i, x):
        """(keep, data pointer, dtype code, shape, is_torch) for a non-ndarray or odd input."""
        try:
            return self._convert_one(i, x)
        except InputError as e:
            if e.what.startswith("input "):
                raise
            raise InputError(f"input {self._label(i)}: {e.what}", where=e.where, hint=e.hint) from None

    def _convert_one(self, i, x):
        if T.is_torch_tensor(x):
            if x.device.type == "cuda" and self.lib.cuda:
                if x.device.index not in (None, 0):  # braze_cuda_rt.h opens GPU 0
                    raise InputError(f"input {self._label(i)} is on {x.device}; braze runs on cuda:0 for now",
                                     hint="move it with .to('cuda:0'), or make the GPU the first visible one "
                                          "(CUDA_VISIBLE_DEVICES)")
            elif x.device.type != "cpu":
                where = "this model was compiled for a CUDA GPU" if self.lib.cuda else "braze runs on the CPU"
                raise InputError(f"input {self._label(i)} is on device {x.device}; {where}",
                                 hint="move it with .cpu()" + (" or .cuda()" if self.lib.cuda else ""))
            if x.requires_grad:
                import torch
                if torch.is_grad_enabled():  # the result would be silently cut off from autograd
                    raise InputError(f"input {self._label(i)} requires grad, but braze computes no gradients "
                                     "(inference only)",
                                     hint="call the model under torch.no_grad() or torch.inference_mode(), "
                                          "or pass x.detach()")
                x = x.detach()
            if not x.is_contiguous():
                x = x.contiguous()
            code = T.torch_dtype_code(x.dtype)
            return x, (x.data_ptr() or _EMPTY_ADDR), code, tuple(x.shape), True
        if type(x) is not np.ndarray:
            x = as_host_array(x)
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        if not x.dtype.isnative:
            x = x.astype(x.dtype.newbyteorder("="))
        return x, x.ctypes.data, T.np_dtype_code(x.dtype), x.shape, False

    def __call__(self, *inputs):
        n = len(inputs)
        if n != self._n_in:
            raise InputError(f"{self.symbol} takes {self._n_in} inputs, got {n}")
        use_torch = False
        keep = []  # the (possibly converted) inputs, alive until the call returns
        heads = []
        dims = []
        np_code = T._NP_CODE
        tensor, torch_code, grad = _torch_fast_path()
        device = None
        for i, x in enumerate(inputs):
            if type(x) is np.ndarray and x.flags.c_contiguous and (code := np_code.get(x.dtype, -1)) >= 0:
                shape = x.shape
                try:  # ~4x cheaper than x.ctypes.data; needs a writable, non-empty buffer
                    ptr = addressof(_from_buffer(x))
                except (TypeError, ValueError, BufferError):
                    ptr = x.ctypes.data
            elif isinstance(x, tensor) and x.is_cpu and x.is_contiguous() and \
                    (code := torch_code.get(x.dtype, -1)) >= 0 and not (x.requires_grad and grad()):
                # plug-in mode passes every weight at every call: 0.5 us each here, 2.8 through _convert
                ptr, shape, use_torch = x.data_ptr() or _EMPTY_ADDR, x.shape, True
            elif isinstance(x, tensor) and x.is_cuda and self.lib.cuda and x.get_device() == 0 and \
                    x.is_contiguous() and (code := torch_code.get(x.dtype, -1)) >= 0 and \
                    not (x.requires_grad and grad()):
                ptr, shape, use_torch = x.data_ptr() or _EMPTY_ADDR, x.shape, True  # as the CPU's, on GPU 0
                if device is None:
                    device = x.device
            else:
                x, ptr, code, shape, is_t = self._convert(i, x)
                use_torch |= is_t
                if is_t and x.device.type == "cuda":
                    device = x.device
            keep.append(x)
            heads.append((ptr, code, len(shape)))
            dims.extend(shape)
        buf = (c_int64 * (3 * n + len(dims)))()
        base = addressof(buf)
        off = base + 24 * n
        words = []
        for ptr, code, nd in heads:
            words += (ptr, (code | (nd << 32)) if _LITTLE else ((code << 32) | nd), off)
            off += 8 * nd
        words += dims
        buf[:] = words

        state = _Call(self, self._n_out, use_torch, device)
        if device is not None:  # braze's stream reads what torch's stream may still be writing
            import torch
            torch.cuda.current_stream(device).synchronize()
        try:
            err = _tls.err
        except AttributeError:
            err = _tls.err = ctypes.create_string_buffer(ERRLEN)
        err[0] = 0
        rc = self._fn(self._handle, base, n, _ALLOC, state, addressof(err), ERRLEN)
        if state.error is not None:
            e = state.error
            if isinstance(e, BrazeError):
                raise e
            raise BrazeError(f"{self.symbol}: allocating an output failed: {e!r}") from e
        if rc != OK:
            msg = _error_message(err, rc)
            if rc in _INPUT_ERRORS:
                raise InputError(msg)
            raise BrazeError(f"{self.symbol}: {msg}", where=f"{self.lib.path}")
        outs = state.outputs
        for k, j in self._in_place:
            outs[k] = keep[j]
        for o in outs:
            if o is None:
                missing = [k for k, o in enumerate(outs) if o is None]
                raise BrazeError(f"{self.symbol} returned without producing outputs {missing}",
                                 where=f"{self.lib.path}")
        return outs[0] if self._n_out == 1 else tuple(outs)

    # ------------------------------------------------------------------ outputs

    def _allocate(self, state, index, dtype, ndim, shape_p):
        if not 0 <= index < self._n_out or state.outputs[index] is not None:
            raise BrazeError(f"{self.symbol} asked for output {index} "
                             f"({'already allocated' if 0 <= index < self._n_out else 'out of range'}; "
                             f"it has {self._n_out} outputs)")
        want = self._res_codes[index]
        if want is not None and dtype != want:
            raise BrazeError(f"{self.symbol} output {index}: allocating dtype code {dtype}, "
                             f"expected {want}")
        rank = self._res_ranks[index]
        if rank is not None and ndim != rank:
            raise BrazeError(f"{self.symbol} output {index}: allocating rank {ndim}, expected {rank}")
        shape = tuple(shape_p[:ndim]) if ndim else ()
        for d in shape:
            if d < 0:
                raise BrazeError(f"{self.symbol} output {index}: negative dim in shape {shape}")
        if state.device is not None:
            import torch
            t = torch.empty(shape, dtype=T.code_torch_dtype(dtype), device=state.device)
            state.outputs[index] = t
            return t.data_ptr() or _EMPTY_ADDR
        if state.torch:
            import torch
            np_dt = T.code_np_dtype(dtype)
            n = np_dt.itemsize
            for d in shape:
                n *= d
            if n >= T.POOLED and np_dt.kind in "fiub":
                # NumPy-backed, from the pool: torch.empty's fresh 32 MiB (chain_ln, 8192 rows)
                # page-faulted 8193 times a call; the tensor keeps the array alive
                a = T.aligned_empty(shape, np_dt, pool=self._pool)
                state.outputs[index] = torch.from_numpy(a)
                return addressof(_from_buffer(a))
            t = torch.empty(shape, dtype=T.code_torch_dtype(dtype))
            state.outputs[index] = t
            return t.data_ptr() or _EMPTY_ADDR
        a = T.aligned_empty(shape, T.code_np_dtype(dtype), pool=self._pool)
        state.outputs[index] = a
        try:
            return addressof(_from_buffer(a))
        except (TypeError, ValueError, BufferError):  # empty, or a dtype without buffer export
            return a.ctypes.data if a.size else _EMPTY_ADDR
