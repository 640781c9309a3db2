"""Tuning with dynamic shapes: measured kernel choices per shape bucket, compiled into the one
library as range tests (docs/tuning.md).

* ``buckets``: power-of-two buckets and dispatch tables (``((48, "smallm"), (None, "dnnl"))``).
* ``products``: the product knob (which kernel multiplies by a packed weight: a GEMM's, a 1x1
  convolution's), its default rules and the site key (shape and epilogue) measurements are
  stored under.
* ``db``: the tuning database, JSON lines under the compile cache, keyed by machine.
* ``measure``: the measuring child process; ``search``: what to measure, and the winner rule.
* ``dispatch``: the graph pass that writes every call's table into the IR.
"""
