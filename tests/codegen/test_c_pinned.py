"""The CPU C of two small models, pinned by sha256 at the scalar ISA (the same on every x86 host):
adding a target, or any refactor that means to change nothing, must leave it byte for byte as it
was. It is also the same in every process: the run-time checks once followed string hashing's order,
so the C (and the compile cache's key) changed with PYTHONHASHSEED. A deliberate change to the CPU C
updates these pins, and says why in its commit."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

PINNED = {"gpt": "5f385699cb0eca4c5a24ef84670ae2a4c4eb09a9f29b05b43f2c1dec83ca653f",
          "cnn": "8a8612fb80b7c4364f6fb667e9822876cd7d60c78fe7599698bd1daa3cc9659d"}

SCRIPT = """
import hashlib, sys, warnings
sys.path.insert(0, {tests!r})
warnings.filterwarnings("ignore")
from conftest import _tiny_models
from braze.compiler import _to_module, cpu_target
from braze.options import Options
from braze.pipeline import compile_to_c
for name, (m, ex, dyn) in _tiny_models().items():  # BRAZE_ISA=scalar: the same C on every host
    native, _ = compile_to_c(_to_module(m, ex, {{}}, dynamic_shapes=dyn), cpu_target(Options.from_env()))
    print(name, hashlib.sha256(native.source.encode()).hexdigest())
"""


@pytest.mark.parametrize("seed", ["1", "2"])
def test_cpu_c_is_pinned_and_independent_of_hashing(seed):
    pytest.importorskip("torch")
    env = dict(os.environ, BRAZE_ISA="scalar", BRAZE_TUNE="off", PYTHONHASHSEED=seed)  # no tuning database
    r = subprocess.run([sys.executable, "-c", SCRIPT.format(tests=str(Path(__file__).parent.parent))],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = dict(line.split() for line in r.stdout.split("\n") if line.strip())
    assert got == PINNED
