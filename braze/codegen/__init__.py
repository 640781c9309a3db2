"""C code generation for the native CPU target (see docs/compiler-design.md)."""

from pathlib import Path

#: Directory of the C headers generated code includes (braze_abi.h, braze_vec.h).
INCLUDE_DIR = Path(__file__).resolve().parent / "include"
