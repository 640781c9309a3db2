"""The native entry's input checks reject what the reference interpreter rejects, with the same words."""

import numpy as np
import pytest

from braze import reference
from braze.codegen.host_checks import C_DTYPE_NAMES, validation_c
from braze.errors import InputError
from braze.ops import Builder, tensor
from braze.runtime import load_library


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BRAZE_CACHE_DIR", str(tmp_path / "cache"))


def _module():
    b = Builder()
    batch, seq = b.sym("batch", 1, 8), b.sym("seq", 1, 64)
    x = b.param("x", tensor("f32", batch, seq))
    y = b.param("y", tensor("f32", batch, 2 * seq))
    z = b.param("z", tensor("i64", 3))
    b.module.constraints.add_divisible(seq, 2)
    b.ret(b.add(b.concat(x, x, axis=1), y), z)
    return b.module


def _entry(module):
    f = module.main
    lines, syms = validation_c(f, module.constraints)
    body = "\n    ".join(lines)
    # the test entry copies x's shape into output 0 so a passing call returns something checkable
    src = f"""#include "braze_abi.h"
#include "braze_vec.h"
{C_DTYPE_NAMES}
BRAZE_EXPORT int32_t braze_main(const braze_instance *model, const braze_tensor *inputs, int32_t n_inputs, braze_alloc_fn alloc,
                                void *alloc_ctx, char *err, int32_t errlen) {{
    {body}
    int64_t shape[1] = {{{len(syms)}}};
    int64_t *out = (int64_t *)alloc(alloc_ctx, 0, BRAZE_INT64, 1, shape);
    if (!out) BRAZE_FAIL(BRAZE_ERR_ALLOC, "alloc failed");
    {" ".join(f"out[{i}] = sym_{s.name};" for i, s in enumerate(syms))}
    return BRAZE_OK;
}}
"""
    lib = load_library(src, name="host_checks_test")
    return lib.function("braze_main", [None] * len(f.params), [("i64", 1)])


def test_binds_symbols():
    m = _module()
    fn = _entry(m)
    x, y, z = np.zeros((3, 4), np.float32), np.zeros((3, 8), np.float32), np.zeros(3, np.int64)
    assert list(fn(x, y, z)) == [3, 4]


@pytest.mark.parametrize("xs,ys,zs,xdt", [
    ((3,), (3, 8), (3,), "float32"),        # rank
    ((3, 4), (3, 8), (3,), "float64"),      # dtype
    ((3, 4), (3, 8), (4,), "float32"),      # fixed dim
    ((9, 4), (9, 8), (3,), "float32"),      # range
    ((3, 4), (2, 8), (3,), "float32"),      # symbol bound twice
    ((3, 4), (3, 9), (3,), "float32"),      # expression dim
    ((3, 5), (3, 10), (3,), "float32"),     # divisibility
])
def test_native_errors_match_reference(xs, ys, zs, xdt):
    m = _module()
    fn = _entry(m)
    args = (np.zeros(xs, xdt), np.zeros(ys, np.float32), np.zeros(zs, np.int64))
    with pytest.raises(InputError) as ref:
        reference.run(m, *args)
    with pytest.raises(InputError) as nat:
        fn(*args)
    assert str(nat.value) == str(ref.value)
    # the library keeps working after an error
    assert list(fn(np.zeros((1, 2), np.float32), np.zeros((1, 4), np.float32), np.zeros(3, np.int64))) == [1, 2]
