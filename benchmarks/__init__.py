"""braze's benchmark harness: braze against PyTorch eager, torch.compile, ONNX Runtime and TVM.

Run ``python -m benchmarks.run --help``.
"""
